# SPDX-License-Identifier: GPL-3.0-or-later
"""Carme web portal: LDAP + TOTP login, GPU sessions on Slurm, owner-checked proxy."""

from __future__ import annotations

import contextlib
import gc
import os
import weakref
from collections.abc import Mapping
from typing import Any

from flask import Flask
from flask import Response
from flask import g
from flask import jsonify
from flask import render_template
from flask import request
from flask_wtf.csrf import CSRFError  # type: ignore[import-untyped]
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import PendingRollbackError
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from werkzeug.exceptions import HTTPException
from werkzeug.middleware.proxy_fix import ProxyFix

from webui.auth.ldap import check_config as check_ldap_config
from webui.auth.login_cookie import SlidingSessionInterface
from webui.extensions import csrf
from webui.extensions import db
from webui.sessions.app_origin import browser_may_send
from webui.sessions.app_origin import check_apps_origin

__all__ = ["DATABASE_DOWN_MESSAGE", "create_app", "prepare_for_fork"]

DATABASE_DOWN_MESSAGE = "The portal's database is unavailable right now. Please try again in a minute."


class ConfigError(RuntimeError):
    """The portal refuses to start with this configuration."""


def create_app(test_config: Mapping[str, Any] | None = None) -> Flask:
    app = Flask(__name__, instance_relative_config=True)
    app.config.from_object("webui.settings")
    if test_config is None:
        path = os.environ.get("CARME_WEBUI_CONFIG")
        if path:
            app.config.from_pyfile(os.path.abspath(path))
        else:
            app.config.from_pyfile("config.py")
    else:
        app.config.update(test_config)
    check_config(app)
    if int(app.config["PROXY_FIX_HOPS"]) > 0:
        hops = int(app.config["PROXY_FIX_HOPS"])
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=hops, x_proto=hops, x_host=hops)  # type: ignore[method-assign]
    app.session_interface = SlidingSessionInterface()
    register_fetch_metadata_policy(app)
    register_extensions(app)
    register_blueprints(app)
    register_security_headers(app)
    register_error_handlers(app)
    register_commands(app)
    register_template_helpers(app)
    return app


def check_config(app: Flask) -> None:
    key = app.config.get("SECRET_KEY")
    if not key or not isinstance(key, str | bytes) or len(key) < 16:
        raise ConfigError(
            "SECRET_KEY is missing or shorter than 16 characters; set it in the instance config.py "
            "(roles/carme_webui renders it from the vault)."
        )
    check_ldap_config(app.config)
    try:
        check_apps_origin(str(app.config.get("APPS_ORIGIN") or ""))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


# --- forking servers (gunicorn --preload) -----------------------------------------------------------------------
#
# roles/carme_webui runs gunicorn with --preload: create_app() runs once, in the master, and the workers are forked
# from it. What create_app() builds is therefore shared by the workers, and it must leave nothing behind that two
# processes may not share: it starts no thread (the GPU-hours refresh pool, StaleWhileRefresh in webui/caches.py, is
# made on first use and again in any process other than the one that made it), opens no database, LDAP, Slurm or Zabbix
# connection (all of them are made on first use in a request), keeps no file open, and holds no per-process secret or
# random state (SECRET_KEY comes from the config; ``random`` is reseeded in a forked child by Python itself). As a guard
# all the same, a forked child replaces every engine's pool with an empty one (below): a database connection opened
# before a fork is never used by two processes. tests/webui/test_preload.py checks all of this.

_ENGINES: weakref.WeakSet[Engine] = weakref.WeakSet()


def _new_pools_in_child() -> None:
    # dispose(close=False): a new, empty pool, without closing (or telling the server about) the parent's
    # connections, which the parent goes on using (SQLAlchemy, "Using Connection Pools with Multiprocessing").
    for engine in list(_ENGINES):
        engine.dispose(close=False)


os.register_at_fork(after_in_child=_new_pools_in_child)


def prepare_for_fork(app: Flask) -> None:
    """Called by webui/wsgi.py, in the gunicorn master before it forks the workers (``--preload``).

    Does once, here, what each worker would otherwise do on its first requests (configure the ORM mappers, compile the
    templates), so that the workers share it instead of each building a copy; then moves every object made so far out
    of the garbage collector's reach (:func:`gc.freeze`): a full collection in a worker would otherwise write to each of
    them, and so copy, page by page, all the memory it shares with the master. Opens no connection, starts no thread.
    """
    from sqlalchemy.orm import configure_mappers

    configure_mappers()
    for name in app.jinja_env.list_templates(filter_func=lambda n: n.endswith(".html")):
        app.jinja_env.get_template(name)
    gc.collect()
    gc.freeze()


def register_extensions(app: Flask) -> None:
    csrf.init_app(app)
    db.init_app(app)
    with app.app_context():
        _ENGINES.update(db.engines.values())
    from webui.caches import TTLMap
    from webui.slurm import scheduler

    # SCHEDULER: a ready Scheduler object (tests, integration suites); else built from settings.
    app.extensions["carme_scheduler"] = app.config.get("SCHEDULER") or scheduler.from_config(app.config)
    app.extensions["carme_view_cache"] = TTLMap(float(app.config["SCHEDULER_CACHE_SECONDS"]))
    from webui.reservations import slurm as reservations_slurm

    app.extensions["carme_reservations"] = reservations_slurm.from_config(app.config)

    from webui.monitoring import health

    # MONITORING: a ready health_cache() (tests); else from ZABBIX_* settings (no ZABBIX_URL: monitoring off).
    app.extensions["carme_monitoring"] = app.config.get("MONITORING") or health.from_config(app.config)


def register_blueprints(app: Flask) -> None:
    from webui.admin.views import bp as admin_bp
    from webui.api.views import bp as api_bp
    from webui.auth.views import bp as auth_bp
    from webui.dashboard.views import bp as dashboard_bp
    from webui.history.views import bp as history_bp
    from webui.notifications.views import bp as notifications_bp
    from webui.projects.views import bp as projects_bp
    from webui.reservations.views import bp as reservations_bp
    from webui.sessions.views import bp as sessions_bp
    from webui.utilisation.views import bp as utilisation_bp

    app.register_blueprint(auth_bp)
    app.register_blueprint(dashboard_bp)
    app.register_blueprint(sessions_bp)
    app.register_blueprint(admin_bp)
    app.register_blueprint(api_bp)
    app.register_blueprint(reservations_bp)
    app.register_blueprint(history_bp)
    app.register_blueprint(projects_bp)
    app.register_blueprint(utilisation_bp)
    app.register_blueprint(notifications_bp)


def register_fetch_metadata_policy(app: Flask) -> None:
    """Registered before CSRFProtect, so that a cross-site request is refused as such, not as a CSRF failure."""
    if app.config.get("FETCH_METADATA_POLICY", True):

        @app.before_request
        def _fetch_metadata() -> Any:
            # Browsers say where a request comes from (Sec-Fetch-Site). Another site, or the same site on another
            # origin (the apps' origin: a user's own app), may only navigate to the portal, never call it. The
            # endpoints nginx reaches for the apps' origin are exempt; clients that send no such header (curl,
            # monitoring) are not browsers, and CSRF tokens still hold for them.
            if request.endpoint in _FETCH_METADATA_EXEMPT or browser_may_send(request.method, request.headers):
                return None
            message = "Cross-site request refused: the portal answers only its own pages."
            if _wants_json():
                return jsonify(error=message), 403
            return render_template("error.html", code=403, message=message), 403


def register_security_headers(app: Flask) -> None:
    # Built once from the settings (they do not change after create_app), added to every response.
    headers = [
        ("Content-Security-Policy", str(app.config["CONTENT_SECURITY_POLICY"])),
        ("X-Frame-Options", "DENY"),
        ("X-Content-Type-Options", "nosniff"),
        ("Referrer-Policy", "same-origin"),
        ("Cross-Origin-Opener-Policy", "same-origin"),
        ("Permissions-Policy", "camera=(), microphone=(), geolocation=()"),
    ]
    if int(app.config["HSTS_SECONDS"]) > 0:
        headers.append(("Strict-Transport-Security", f"max-age={int(app.config['HSTS_SECONDS'])}"))

    lowered = [(name.lower(), name, value) for name, value in headers]

    @app.after_request
    def _headers(resp: Response) -> Response:
        h = resp.headers
        # setdefault() for each: the names the response has, looked up once (seven setdefault calls, each a scan of
        # the headers, were a few percent of a dashboard request)
        present = {name.lower() for name, _ in h}  # Headers iterates over (name, value)
        h.extend([(name, value) for low, name, value in lowered if low not in present])
        if resp.mimetype == "text/html" or request.blueprint in ("auth", "api"):
            h.setdefault("Cache-Control", "no-store")
        return resp


_FETCH_METADATA_EXEMPT = frozenset({"api.proxy_auth", "api.app_enter", "api.health", "static"})


def _wants_json() -> bool:
    return request.blueprint == "api" or request.path.startswith("/api/")


def register_error_handlers(app: Flask) -> None:
    @app.errorhandler(CSRFError)
    def _csrf(exc: CSRFError) -> tuple[Any, int]:
        message = f"CSRF check failed: {exc.description}"
        if _wants_json():
            return jsonify(error=message), 400
        return render_template("error.html", code=400, message=message), 400

    @app.errorhandler(HTTPException)
    def _http(exc: HTTPException) -> Any:
        code = exc.code or 500
        if code < 400:
            return exc
        message = exc.description or exc.name
        if _wants_json():
            return jsonify(error=message), code
        return render_template("error.html", code=code, message=message), code

    @app.errorhandler(DBAPIError)
    @app.errorhandler(PendingRollbackError)
    @app.errorhandler(PoolTimeoutError)
    def _database(exc: SQLAlchemyError) -> tuple[Any, int, dict[str, str]]:
        # MariaDB stopped, restarting or unreachable (OperationalError, InterfaceError, a full pool): a 503 that
        # says so, never a 500. Nothing the request changed is kept, and the next request gets a fresh connection.
        app.logger.error("database error on %s %s: %s", request.method, request.path, exc)
        with contextlib.suppress(SQLAlchemyError):
            db.session.rollback()
        g.carme_user = None  # the page must not ask the database who is logged in
        retry = {"Retry-After": "30"}
        if _wants_json():
            return jsonify(error=DATABASE_DOWN_MESSAGE, database="down"), 503, retry
        if request.endpoint in ("auth.login", "auth.totp"):
            page = render_template("auth/login.html", error=DATABASE_DOWN_MESSAGE, database_down=True)
            return page, 503, retry
        page = render_template("error.html", code=503, message=DATABASE_DOWN_MESSAGE, database_down=True)
        return page, 503, retry

    from webui.slurm.errors import SlurmError

    @app.errorhandler(SlurmError)
    def _slurm(exc: SlurmError) -> tuple[Any, int]:
        # Safety net: views handle scheduler errors themselves; never show a 500 for them.
        message = str(exc)
        if _wants_json():
            return jsonify(error=message), 503
        return render_template("error.html", code=503, message=message), 503


def register_commands(app: Flask) -> None:
    from webui.admin.commands import register
    from webui.utilisation.tick import register as register_tick

    register(app)
    register_tick(app)


def register_template_helpers(app: Flask) -> None:
    from webui.auth.logins import current_user

    @app.context_processor
    def _inject() -> dict[str, Any]:
        return {"current_user": current_user()}

    @app.template_filter("duration")
    def _duration(seconds: int | None) -> str:
        if seconds is None:
            return "-"
        hours, rest = divmod(int(seconds), 3600)
        return f"{hours}:{rest // 60:02d} h"

    @app.template_filter("tz")
    def _tz(name: str) -> Any:
        from zoneinfo import ZoneInfo

        return ZoneInfo(name)
