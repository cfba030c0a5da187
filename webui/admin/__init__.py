# SPDX-License-Identifier: GPL-3.0-or-later
"""Administration: the ``admin`` blueprint (:mod:`webui.admin.views`, ``/admin``) and the portal's Flask CLI
(:mod:`webui.admin.commands`, ``flask --app webui ...``)."""
