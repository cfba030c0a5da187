# SPDX-License-Identifier: GPL-3.0-or-later
"""Node health from Zabbix, shown on the admin's health page (``/admin/health``) and, for the nodes of a user's
running jobs, on the dashboard: :mod:`webui.monitoring.zabbix` (the client, standalone) and
:mod:`webui.monitoring.health` (one shared snapshot per worker)."""
