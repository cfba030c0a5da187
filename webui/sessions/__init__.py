# SPDX-License-Identifier: GPL-3.0-or-later
"""Interactive sessions: the start form and its limits, start and stop, what the dashboard shows of each session,
and the owner-checked proxy to its app (each session on an origin of its own).

* :mod:`webui.sessions.views`: the ``sessions`` blueprint (``/sessions/new``, ``/sessions/<job>/stop``,
  ``/sessions/<job>/connect``);
* :mod:`webui.sessions.catalog`: images, apps and the form's limits; :mod:`webui.sessions.service`: start and stop;
  :mod:`webui.sessions.limit`: the session limit under concurrent starts;
* :mod:`webui.sessions.records`: the portal's session rows; :mod:`webui.sessions.status`: what a session looks like
  (:mod:`webui.sessions.pending_reasons`: why it waits);
* :mod:`webui.sessions.endpoints`: the session front a job publishes, and its proof; :mod:`webui.sessions.proxy`:
  nginx's ``auth_request`` decision; :mod:`webui.sessions.app_origin`: the per-session origins, tickets and cookies;
* :mod:`webui.sessions.storage`: datasets for the form, the storage quota for the dashboard.
"""

from webui.sessions import stop_views as stop_views  # its routes join the sessions blueprint
