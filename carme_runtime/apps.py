# SPDX-License-Identifier: GPL-3.0-or-later
"""Declarative app specs (JupyterLab, code-server, TensorBoard, plus site additions).

An app is a TOML file: ``name``, ``title``, ``argv`` (a list of templates), ``env`` (table of templates),
``secret_mode``, ``readiness_path``, ``proxy_base`` and an optional ``secret_header`` table. Built-in specs
live in ``carme_runtime/apps/``; a site adds or overrides apps in ``/etc/carme/apps.d/*.toml`` (a site file
with the same ``name`` replaces the built-in).

Templates may use only these placeholders: ``{port} {host} {socket} {secret} {base_url} {base_path} {workdir}
{logdir} {job_id}`` (``base_path`` is ``base_url`` without the trailing slash, for TensorBoard; ``socket`` is the
path of the app's Unix socket, for ``isolation = "socket"``).

``{secret}`` is the session's *app secret* (:func:`carme_runtime.front.app_secret`: an HMAC of the job id with the
session secret, domain-separated from the front key), never the session secret itself: the app may show it
(JupyterLab writes its token into every page), and nothing the app or the browser sees lets anyone compute the
session front's key. ``carme-launch`` renders the spec with it.

``secret_mode``:

* ``token``: the app checks a token; ``{secret}`` must appear in ``env`` or ``argv``. The session front
  (:mod:`carme_runtime.front`) adds ``secret_header`` to the requests it forwards (and drops any header of that
  name the client sent), so the user never types the token and it never travels through nginx.
* ``password``: the app asks for a password; ``{secret}`` must appear in ``env`` (never argv).
* ``proxy``: the app has no authentication of its own (TensorBoard), or has it turned off (code-server with
  ``--auth none``). ``carme-launch`` starts it behind the session front (:mod:`carme_runtime.front`), which forwards
  nothing without the session's front key, and where only the front can reach it (``isolation`` ``socket`` or
  ``netns``, never ``none``); the portal proxy (owner check) and the front are the gates, and the user never sees
  or types a secret.

``strip_prefix`` (default false): the app serves at ``/`` and cannot be told a base path (code-server): the session
front removes ``proxy_base`` from each request path before passing it on, and ``readiness_path`` is the app's own.

``isolation`` (default ``"netns"`` for ``proxy`` apps, ``"none"`` otherwise):

* ``socket``: the app listens on a Unix socket (``{socket}`` must appear in ``argv`` or ``env``) in a fresh 0700
  directory of the user, and on no TCP port at all: other users on the node cannot connect to it, and the app keeps
  the node's network (pip, ``torch.distributed``). The front reaches it through that socket. For apps that can
  listen on a Unix socket (JupyterLab ``--ServerApp.sock``, code-server ``--socket``).

* ``netns``: ``carme-launch`` starts the app in a private network namespace of the user
  (:mod:`carme_runtime.netns`), so its ``127.0.0.1:<port>`` exists only there; the front reaches it through a
  Unix socket in a 0700 directory. Other users on the node can reach neither.
* ``none``: the app listens on the node's ``127.0.0.1:<port>``, which every local user can connect to (the app's
  own token or password is then the only gate); for site apps that cannot listen on a Unix socket.

Rendering refuses an empty or short secret and any argv that turns authentication off (``--auth none``, an empty
``token=``/``password=``), except for a ``proxy`` app with ``isolation`` ``socket`` or ``netns``: only the session
front reaches it, and the front is its authentication (:func:`auth_off_allowed`).
"""

from __future__ import annotations

import re
import string
import tomllib
from collections.abc import Iterable
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path

PLACEHOLDERS = frozenset({"port", "host", "socket", "secret", "base_url", "base_path", "workdir", "logdir", "job_id"})
SECRET_MODES = ("token", "password", "proxy")
ISOLATIONS = ("netns", "socket", "none")
APP_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
HEADER_NAME_RE = re.compile(r"^[A-Za-z0-9-]+$")
MIN_SECRET_LENGTH = 24
BUILTIN_APPS_DIR = Path(__file__).parent / "apps"
SITE_APPS_DIR = Path("/etc/carme/apps.d")

_KNOWN_KEYS = frozenset(
    {
        "name",
        "title",
        "argv",
        "env",
        "secret_mode",
        "readiness_path",
        "proxy_base",
        "secret_header",
        "isolation",
        "strip_prefix",
    }
)
_AUTH_OFF_RE = re.compile(r"(?i)(token|password)=(''|\"\"|)$")


class AppSpecError(ValueError):
    """An invalid app spec; names the file and the field."""

    def __init__(self, source: str, field_name: str, message: str) -> None:
        super().__init__(f"{source}: {field_name}: {message}")
        self.source = source
        self.field = field_name
        self.message = message


class AppRenderError(ValueError):
    """Refused to render an app command (missing/short secret, authentication turned off)."""


@dataclass(frozen=True)
class SecretHeader:
    name: str
    value: str  # template, e.g. "token {secret}"


@dataclass(frozen=True)
class RenderedApp:
    argv: list[str]
    env: dict[str, str]
    readiness_path: str
    base_url: str


@dataclass(frozen=True)
class AppSpec:
    name: str
    title: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    secret_mode: str = "token"
    readiness_path: str = "/"
    proxy_base: str = "/proxy/{job_id}/"
    secret_header: SecretHeader | None = None
    source: str = "<builtin>"
    isolation: str = "none"
    strip_prefix: bool = False

    def base_url(self, job_id: int | str) -> str:
        return self.proxy_base.format(job_id=job_id)

    def render(
        self,
        *,
        host: str,
        port: int,
        secret: str,
        job_id: int | str,
        workdir: str,
        logdir: str | None = None,
        socket: str = "",
    ) -> RenderedApp:
        """Fill the templates; ``secret`` is the app secret (``front.app_secret``), never the session secret.

        Raises :class:`AppRenderError` rather than start an app without auth (or, for ``isolation = "socket"``,
        without its socket path: it would fall back to a TCP port)."""
        if len(secret) < MIN_SECRET_LENGTH:
            raise AppRenderError(f"{self.name}: app secret missing or shorter than {MIN_SECRET_LENGTH}")
        if self.isolation == "socket" and not socket.startswith("/"):
            raise AppRenderError(f"{self.name}: isolation = socket needs the absolute path of its Unix socket")
        base_url = self.base_url(job_id)
        values = {
            "port": str(port),
            "host": host,
            "socket": socket,
            "secret": secret,
            "base_url": base_url,
            "base_path": base_url.rstrip("/") or "/",
            "workdir": workdir,
            "logdir": logdir or workdir,
            "job_id": str(job_id),
        }
        argv = [a.format_map(values) for a in self.argv]
        env = {k: v.format_map(values) for k, v in self.env.items()}
        if not auth_off_allowed(self.secret_mode, self.isolation):
            _refuse_auth_off(self.name, argv)
        if self.secret_mode in ("token", "password"):
            carried = any(secret in v for v in env.values()) or any(secret in a for a in argv)
            if not carried:  # pragma: no cover - guaranteed by load-time validation
                raise AppRenderError(f"{self.name}: the secret does not reach the app")
        return RenderedApp(argv=argv, env=env, readiness_path=self.readiness_path.format_map(values), base_url=base_url)

    def proxy_headers(self, secret: str) -> dict[str, str]:
        """Headers the session front adds to each request it forwards, for the app secret ``secret`` (only token
        apps have any; a client's header of the same name is dropped)."""
        if self.secret_header is None or self.secret_mode != "token":
            return {}
        return {self.secret_header.name: self.secret_header.value.format(secret=secret)}


def auth_off_allowed(secret_mode: str, isolation: str) -> bool:
    """May the app run with its own authentication turned off? Only a ``proxy`` app that listens where nothing but
    the session front reaches it (a Unix socket in a 0700 directory, or a private network namespace): the front
    forwards nothing without the session's front key, which only the portal's owner-checked proxy adds."""
    return secret_mode == "proxy" and isolation in ("socket", "netns")


def _refuse_auth_off(name: str, argv: list[str]) -> None:
    """Raise :class:`AppRenderError` for an argument that turns the app's authentication off."""
    for i, arg in enumerate(argv):
        off = _AUTH_OFF_RE.search(arg) or arg == "--auth=none"
        if off or (arg == "--auth" and i + 1 < len(argv) and argv[i + 1] == "none"):
            raise AppRenderError(f"{name}: argument {arg!r} would disable authentication")


def _check_template(source: str, field_name: str, template: str) -> None:
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise AppSpecError(source, field_name, f"bad template {template!r}: {exc}") from None
    for _literal, name, spec, conv in parsed:
        if name is None:
            continue
        if name not in PLACEHOLDERS:
            raise AppSpecError(
                source,
                field_name,
                f"unknown placeholder {{{name}}}; allowed: {', '.join(sorted(PLACEHOLDERS))}",
            )
        if spec or conv:
            raise AppSpecError(source, field_name, f"format specs are not allowed in {{{name}}}")


def _require_str(source: str, data: Mapping[str, object], key: str, default: str | None = None) -> str:
    value = data.get(key, default)
    if not isinstance(value, str) or not value:
        raise AppSpecError(source, key, "must be a non-empty string")
    return value


def app_from_dict(data: Mapping[str, object], source: str = "<dict>") -> AppSpec:
    """Validate a parsed TOML table into an :class:`AppSpec`; errors name ``source`` and the field."""
    unknown = set(data) - _KNOWN_KEYS
    if unknown:
        raise AppSpecError(source, sorted(unknown)[0], "unknown field")
    name = _require_str(source, data, "name")
    if not APP_NAME_RE.match(name):
        raise AppSpecError(source, "name", f"{name!r} must match {APP_NAME_RE.pattern}")
    title = _require_str(source, data, "title", name)
    argv = _argv(source, data)
    env = _env(source, data)
    secret_mode, isolation = _secret_mode_and_isolation(source, data, argv, env)
    strip_prefix = data.get("strip_prefix", False)
    if not isinstance(strip_prefix, bool):
        raise AppSpecError(source, "strip_prefix", "must be true or false")
    return AppSpec(
        name=name,
        title=title,
        argv=argv,
        env=env,
        secret_mode=secret_mode,
        readiness_path=_readiness_path(source, data),
        proxy_base=_proxy_base(source, data),
        secret_header=_secret_header(source, data, secret_mode),
        source=source,
        isolation=isolation,
        strip_prefix=strip_prefix,
    )


def _argv(source: str, data: Mapping[str, object]) -> tuple[str, ...]:
    raw_argv = data.get("argv")
    if not isinstance(raw_argv, list) or not raw_argv or not all(isinstance(a, str) for a in raw_argv):
        raise AppSpecError(source, "argv", "must be a non-empty list of strings")
    argv = tuple(raw_argv)
    if "{" in argv[0]:
        raise AppSpecError(source, "argv", "the program (argv[0]) must not be a template")
    for i, arg in enumerate(argv):
        _check_template(source, f"argv[{i}]", arg)
    return argv


def _env(source: str, data: Mapping[str, object]) -> dict[str, str]:
    raw_env = data.get("env", {})
    if not isinstance(raw_env, dict):
        raise AppSpecError(source, "env", "must be a table of strings")
    env: dict[str, str] = {}
    for key, value in raw_env.items():
        if not ENV_NAME_RE.match(key) or not isinstance(value, str):
            raise AppSpecError(source, f"env.{key}", 'must be NAME = "string"')
        _check_template(source, f"env.{key}", value)
        env[key] = value
    return env


def _secret_mode_and_isolation(
    source: str, data: Mapping[str, object], argv: tuple[str, ...], env: Mapping[str, str]
) -> tuple[str, str]:
    """``secret_mode`` and ``isolation``, checked against where the app takes ``{secret}`` and ``{socket}``."""
    secret_mode = _require_str(source, data, "secret_mode", "token")
    if secret_mode not in SECRET_MODES:
        raise AppSpecError(source, "secret_mode", f"must be one of {', '.join(SECRET_MODES)}")
    in_env = any("{secret}" in v for v in env.values())
    in_argv = any("{secret}" in a for a in argv)
    if secret_mode == "token" and not (in_env or in_argv):
        raise AppSpecError(source, "secret_mode", "token apps must pass {secret} in env or argv")
    if secret_mode == "password" and not in_env:
        raise AppSpecError(source, "env", "password apps must pass {secret} through env (never argv)")
    if secret_mode == "password" and in_argv:
        raise AppSpecError(source, "argv", "password apps must not put {secret} on the command line")
    isolation = _require_str(source, data, "isolation", "netns" if secret_mode == "proxy" else "none")
    if isolation not in ISOLATIONS:
        raise AppSpecError(source, "isolation", f"must be one of {', '.join(ISOLATIONS)}")
    if secret_mode == "proxy" and isolation == "none":
        raise AppSpecError(
            source,
            "isolation",
            'proxy apps have no authentication: other users could reach them; use "netns" or "socket"',
        )
    if isolation == "socket" and not (any("{socket}" in a for a in argv) or any("{socket}" in v for v in env.values())):
        raise AppSpecError(source, "isolation", "socket apps must pass {socket} in argv or env (where they listen)")
    return secret_mode, isolation


def _readiness_path(source: str, data: Mapping[str, object]) -> str:
    readiness = _require_str(source, data, "readiness_path", "/")
    _check_template(source, "readiness_path", readiness)
    if not readiness.startswith(("/", "{base_url}")):
        raise AppSpecError(source, "readiness_path", "must start with / or {base_url}")
    return readiness


def _proxy_base(source: str, data: Mapping[str, object]) -> str:
    proxy_base = _require_str(source, data, "proxy_base", "/proxy/{job_id}/")
    try:
        parsed = [n for _l, n, _s, _c in string.Formatter().parse(proxy_base) if n is not None]
    except ValueError as exc:
        raise AppSpecError(source, "proxy_base", str(exc)) from None
    if parsed != ["job_id"] or not proxy_base.startswith("/") or not proxy_base.endswith("/"):
        raise AppSpecError(source, "proxy_base", "must be an absolute path ending in / using {job_id} once")
    return proxy_base


def _secret_header(source: str, data: Mapping[str, object], secret_mode: str) -> SecretHeader | None:
    raw_header = data.get("secret_header")
    if raw_header is None:
        return None
    if not isinstance(raw_header, dict) or set(raw_header) != {"name", "value"}:
        raise AppSpecError(source, "secret_header", "must be a table with name and value")
    hname, hvalue = raw_header["name"], raw_header["value"]
    if not isinstance(hname, str) or not HEADER_NAME_RE.match(hname):
        raise AppSpecError(source, "secret_header.name", "must be an HTTP header name")
    if not isinstance(hvalue, str) or "{secret}" not in hvalue:
        raise AppSpecError(source, "secret_header.value", "must contain {secret}")
    if secret_mode != "token":
        raise AppSpecError(source, "secret_header", "only token apps may have a secret_header")
    return SecretHeader(hname, hvalue)


def load_app_file(path: str | Path) -> AppSpec:
    path = Path(path)
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise AppSpecError(str(path), "<toml>", str(exc)) from None
    except OSError as exc:
        raise AppSpecError(str(path), "<file>", exc.strerror or str(exc)) from None
    spec = app_from_dict(data, source=str(path))
    if spec.name != path.stem:
        raise AppSpecError(str(path), "name", f"{spec.name!r} must equal the file name {path.stem!r}")
    return spec


def load_apps(dirs: Iterable[str | Path] | None = None, *, include_builtin: bool = True) -> dict[str, AppSpec]:
    """Built-in apps, then every ``*.toml`` of ``dirs`` (default: ``/etc/carme/apps.d``) in order.

    A later file with the same name replaces an earlier one; a directory that does not exist is skipped;
    an invalid file raises :class:`AppSpecError` naming the file and the field.
    """
    search: list[Path] = [BUILTIN_APPS_DIR] if include_builtin else []
    search += [Path(d) for d in (dirs if dirs is not None else [SITE_APPS_DIR])]
    apps: dict[str, AppSpec] = {}
    for directory in search:
        if not directory.is_dir():
            continue
        for path in sorted(directory.glob("*.toml")):
            spec = load_app_file(path)
            apps[spec.name] = spec
    return apps
