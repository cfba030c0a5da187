"""gunicorn entry point: ``gunicorn 'webui.wsgi:app'`` (config from the instance folder)."""

from webui import create_app

app = create_app()
