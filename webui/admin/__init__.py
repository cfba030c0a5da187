# SPDX-License-Identifier: GPL-3.0-or-later
"""Administration: the ``admin`` blueprint (:mod:`webui.admin.views`, ``/admin``, with the session profiles of
:mod:`webui.admin.profiles`) and the portal's Flask CLI (:mod:`webui.admin.commands`, ``flask --app webui ...``)."""

from webui.admin import profiles as profiles  # its routes join the admin blueprint
