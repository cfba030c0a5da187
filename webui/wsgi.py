# SPDX-License-Identifier: GPL-3.0-or-later
"""gunicorn entry point: ``gunicorn 'webui.wsgi:app'`` (config from the instance folder).

roles/carme_webui runs it with ``--preload``: this module is imported once, in the master, and the workers are forked
from it (see ``webui.prepare_for_fork``).
"""

from webui import create_app
from webui import prepare_for_fork

app = create_app()
prepare_for_fork(app)
