# SPDX-License-Identifier: GPL-3.0-or-later
"""LDAP (ldap3): the user's simple bind at login, and their groups (roles) read again without their password."""

from __future__ import annotations

import contextlib
import ssl
import warnings
from collections.abc import Iterator
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

with warnings.catch_warnings():
    # ldap3 2.9.1 imports names that pyasn1 >= 0.6 deprecates (tagMap/typeMap); harmless, not ours to fix.
    warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"ldap3(\.|$)")
    warnings.filterwarnings("ignore", r".*(tagMap|typeMap) is deprecated", DeprecationWarning)
    import ldap3  # type: ignore[import-untyped]
    from ldap3.core.exceptions import LDAPException  # type: ignore[import-untyped]
    from ldap3.utils.conv import escape_filter_chars  # type: ignore[import-untyped]
    from ldap3.utils.dn import escape_rdn  # type: ignore[import-untyped]


class LdapUnavailable(Exception):
    """The directory cannot be reached; not the user's fault, not counted as a failure."""


class LdapConfigError(ValueError):
    pass


@dataclass(frozen=True)
class LdapIdentity:
    username: str
    groups: frozenset[str]
    is_admin: bool


def check_config(config: Mapping[str, Any]) -> None:
    """Refuse an unencrypted directory connection unless explicitly allowed."""
    uri = str(config["LDAP_URI"])
    scheme = urlsplit(uri).scheme
    if scheme not in ("ldap", "ldaps"):
        raise LdapConfigError(f"LDAP_URI must start with ldap:// or ldaps://, got {uri!r}")
    if scheme == "ldap" and not config["LDAP_START_TLS"] and not config["LDAP_ALLOW_PLAINTEXT"]:
        raise LdapConfigError(
            "LDAP_URI is plain ldap:// without LDAP_START_TLS; passwords would travel in clear text. "
            "Use ldaps://, set LDAP_START_TLS = True, or (tests only) LDAP_ALLOW_PLAINTEXT = True."
        )


def server(config: Mapping[str, Any]) -> ldap3.Server:
    uri = str(config["LDAP_URI"])
    parts = urlsplit(uri)
    use_ssl = parts.scheme == "ldaps"
    tls = None
    if use_ssl or config["LDAP_START_TLS"]:
        tls = ldap3.Tls(
            validate=ssl.CERT_REQUIRED,
            version=ssl.PROTOCOL_TLS_CLIENT,
            ca_certs_file=config.get("LDAP_CA_FILE") or None,
        )
    return ldap3.Server(
        parts.hostname or "",
        port=parts.port,
        use_ssl=use_ssl,
        tls=tls,
        get_info=ldap3.NONE,
        connect_timeout=int(config["LDAP_TIMEOUT_SECONDS"]),
    )


def authenticate(config: Mapping[str, Any], username: str, password: str) -> LdapIdentity | None:
    """Bind as the user. ``None`` means wrong name or password (indistinguishable)."""
    check_config(config)
    if not password:
        return None  # an empty password would be an anonymous bind, which "succeeds"
    dn = str(config["LDAP_USER_DN_TEMPLATE"]).format(username=escape_rdn(username))
    auto_bind = ldap3.AUTO_BIND_TLS_BEFORE_BIND if config["LDAP_START_TLS"] else ldap3.AUTO_BIND_NO_TLS
    conn = ldap3.Connection(
        server(config),
        user=dn,
        password=password,
        auto_bind=ldap3.AUTO_BIND_NONE,
        receive_timeout=int(config["LDAP_TIMEOUT_SECONDS"]),
        raise_exceptions=False,
        read_only=True,
    )
    try:
        try:
            conn.open()
            if auto_bind == ldap3.AUTO_BIND_TLS_BEFORE_BIND and not conn.start_tls():
                raise LdapUnavailable("StartTLS failed")
            if not conn.bind():
                if conn.result and conn.result.get("result") == 49:  # invalidCredentials
                    return None
                raise LdapUnavailable(f"bind failed: {conn.result.get('description') if conn.result else '?'}")
        except LDAPException as exc:
            raise LdapUnavailable(str(exc)) from exc
        groups = _groups(config, conn, username)
    finally:
        close(conn)
    required = config.get("LDAP_USER_GROUP")
    if required and required not in groups:
        return None
    return LdapIdentity(username=username, groups=groups, is_admin=str(config["LDAP_ADMIN_GROUP"]) in groups)


def _groups(config: Mapping[str, Any], conn: ldap3.Connection, username: str) -> frozenset[str]:
    search_filter = str(config["LDAP_GROUP_FILTER"]).format(
        username=escape_filter_chars(username), dn=escape_filter_chars(conn.user or "")
    )
    try:
        ok = conn.search(str(config["LDAP_GROUP_BASE"]), search_filter, attributes=["cn"])
    except LDAPException as exc:
        raise LdapUnavailable(str(exc)) from exc
    if not ok:
        return frozenset()
    return group_names(conn.response)


def close(conn: ldap3.Connection) -> None:
    """Unbind, and close the socket: ldap3 leaves the socket of a failed connect open (an fd leak per attempt while
    LDAP is down)."""
    with contextlib.suppress(LDAPException):
        conn.unbind()
    sock = getattr(conn, "socket", None)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.close()


def group_names(response: Any) -> frozenset[str]:
    """The `cn` values of the group entries in an ldap3 search response."""
    names: set[str] = set()
    for entry in response or []:
        if entry.get("type") != "searchResEntry":
            continue
        cn = entry.get("attributes", {}).get("cn")
        if isinstance(cn, list):
            names.update(str(c) for c in cn)
        elif cn:
            names.add(str(cn))
    return frozenset(names)


@contextlib.contextmanager
def service_connection(config: Mapping[str, Any]) -> Iterator[ldap3.Connection]:
    """A connection bound as LDAP_BIND_DN (anonymously when unset), with StartTLS as configured, closed afterwards;
    whatever fails in it (the bind, or a search in the ``with`` block) raises :class:`LdapUnavailable`."""
    bind_dn = config.get("LDAP_BIND_DN") or None
    conn = ldap3.Connection(
        server(config),
        user=bind_dn,
        password=config.get("LDAP_BIND_PASSWORD") if bind_dn else None,
        auto_bind=ldap3.AUTO_BIND_NONE,
        receive_timeout=int(config["LDAP_TIMEOUT_SECONDS"]),
        raise_exceptions=False,
        read_only=True,
    )
    try:
        try:
            conn.open()
            if config["LDAP_START_TLS"] and not conn.start_tls():
                raise LdapUnavailable("StartTLS failed")
            if not conn.bind():
                raise LdapUnavailable(f"bind failed: {conn.result.get('description') if conn.result else '?'}")
            yield conn
        except LDAPException as exc:
            raise LdapUnavailable(str(exc)) from exc
    finally:
        close(conn)


def directory_groups(config: Mapping[str, Any], username: str) -> frozenset[str]:
    """The user's groups, read without the user's password: bound as LDAP_BIND_DN, or anonymously when unset."""
    dn = str(config["LDAP_USER_DN_TEMPLATE"]).format(username=escape_rdn(username))
    search_filter = str(config["LDAP_GROUP_FILTER"]).format(
        username=escape_filter_chars(username), dn=escape_filter_chars(dn)
    )
    with service_connection(config) as conn:
        if not conn.search(str(config["LDAP_GROUP_BASE"]), search_filter, attributes=["cn"]):
            if conn.result and conn.result.get("result") not in (0, 32):  # success, noSuchObject
                raise LdapUnavailable(f"search failed: {conn.result.get('description')}")
            return frozenset()
        return group_names(conn.response)
