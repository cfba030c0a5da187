# SPDX-License-Identifier: GPL-3.0-or-later
"""GPU quota: each user's limits as Slurm holds them (their association and QOS records) and their GPU-hours this month.

Decisions (a session's start, a reservation's budget) read both fresh: :func:`webui.quota.limits.user_limits`,
:func:`webui.quota.usage.gpu_hours_used`. Pages read them through the worker's caches (``cached=True``,
:func:`webui.quota.usage.quota_view`). The portal keeps no limits of its own: the inventory sets them in Slurm.
"""
