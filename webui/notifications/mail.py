# SPDX-License-Identifier: GPL-3.0-or-later
"""Mailing notifications through the site's SMTP relay (``MAIL_RELAY`` host:port; none: portal only).

A user's address is their LDAP entry's ``mail`` (``MAIL_LDAP_ATTRIBUTE``), else ``user@MAIL_DOMAIN`` where that is
set. A relay that fails leaves the notification pending: the next check tries again, until it is
``MAIL_RETRY_HOURS`` old."""

from __future__ import annotations

import datetime as dt
import email.utils
import smtplib
import ssl
import warnings
from collections.abc import Mapping
from email.message import EmailMessage
from typing import Any

from flask import current_app
from sqlalchemy import select

from webui.auth.ldap import LdapUnavailable
from webui.auth.ldap import service_connection
from webui.extensions import db
from webui.models import utcnow
from webui.notifications.models import Notification

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    import ldap3  # type: ignore[import-untyped]
    from ldap3.utils.dn import escape_rdn  # type: ignore[import-untyped]

#: at most this many mails per check (the rest wait for the next one)
BATCH = 100


class MailError(Exception):
    """The relay cannot be reached or refused the mail."""


def relay(config: Mapping[str, Any]) -> tuple[str, int] | None:
    """``MAIL_RELAY`` as (host, port), port 25 unless given; None when unset."""
    value = str(config.get("MAIL_RELAY") or "").strip()
    if not value:
        return None
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        return value, 25
    return host.strip("[]"), int(port)


def send(config: Mapping[str, Any], to: str, subject: str, body: str) -> None:
    """One plain-text mail through the relay; :class:`MailError` when it cannot."""
    where = relay(config)
    if where is None:
        raise MailError("no MAIL_RELAY configured")
    msg = EmailMessage()
    msg["From"] = str(config.get("MAIL_FROM") or "carme@localhost")
    msg["To"] = to
    msg["Subject"] = subject
    msg["Date"] = email.utils.formatdate(usegmt=True)
    msg["Message-ID"] = email.utils.make_msgid(domain="carme")
    msg.set_content(body)
    try:
        with smtplib.SMTP(where[0], where[1], timeout=float(config.get("MAIL_TIMEOUT_SECONDS", 10))) as smtp:
            if config.get("MAIL_STARTTLS"):
                smtp.starttls(context=ssl.create_default_context(cafile=config.get("MAIL_CA_FILE") or None))
            smtp.send_message(msg)
    except (OSError, smtplib.SMTPException) as exc:
        raise MailError(f"{where[0]}:{where[1]}: {exc}") from exc


def address_of(config: Mapping[str, Any], username: str) -> str | None:
    """The user's mail address: their LDAP entry's ``MAIL_LDAP_ATTRIBUTE`` (``mail``), else
    ``username@MAIL_DOMAIN``; None when neither. :class:`webui.auth.ldap.LdapUnavailable` when the directory
    cannot say."""
    attribute = str(config.get("MAIL_LDAP_ATTRIBUTE") or "")
    found = _ldap_mail(config, username, attribute) if attribute else None
    domain = str(config.get("MAIL_DOMAIN") or "")
    return found or (f"{username}@{domain}" if domain else None)


def _ldap_mail(config: Mapping[str, Any], username: str, attribute: str) -> str | None:
    dn = str(config["LDAP_USER_DN_TEMPLATE"]).format(username=escape_rdn(username))
    with service_connection(config) as conn:
        if not conn.search(dn, "(objectClass=*)", search_scope=ldap3.BASE, attributes=[attribute]):
            return None
        return _first_mail(conn.response, attribute)


def _first_mail(response: Any, attribute: str) -> str | None:
    for entry in response or []:
        mail = entry.get("attributes", {}).get(attribute) if entry.get("type") == "searchResEntry" else None
        values = mail if isinstance(mail, list) else [mail]
        for value in values:
            if value and "@" in str(value):
                return str(value)
    return None


def send_pending() -> int:
    """Mail the pending notifications (committed one by one); how many were sent. A relay or directory that fails
    is logged and leaves the rest pending for the next check."""
    config = current_app.config
    if relay(config) is None:
        return 0
    oldest = utcnow() - dt.timedelta(hours=float(config.get("MAIL_RETRY_HOURS", 24)))
    stmt = select(Notification).where(Notification.mail_state == "pending").order_by(Notification.id).limit(BATCH)
    sent = 0
    for row in db.session.scalars(stmt).all():
        if row.created_at < oldest:
            row.mail_state = "given_up"
        elif not _mail_one(config, row):
            db.session.commit()
            break  # the relay or the directory is down: the next check tries again
        sent += row.mail_state == "sent"
        db.session.commit()
    return sent


def _mail_one(config: Mapping[str, Any], row: Notification) -> bool:
    """Mail ``row`` (its state set, uncommitted); False when the relay or the directory failed."""
    try:
        to = address_of(config, row.username)
        if to is None:
            row.mail_state = "no_address"
            return True
        send(config, to, f"[Carme] {row.title}", mail_body(config, row))
    except (MailError, LdapUnavailable) as exc:
        row.mail_tries += 1
        row.mail_error = str(exc)[:1000]
        current_app.logger.warning(
            "notification %s to %s not mailed (try %s): %s", row.id, row.username, row.mail_tries, exc
        )
        return False
    row.mail_state, row.mail_error = "sent", ""
    return True


def mail_body(config: Mapping[str, Any], row: Notification) -> str:
    portal = str(config.get("PORTAL_URL") or "").rstrip("/")
    lines = [row.title, "", row.body] if row.body else [row.title]
    if portal:
        lines += ["", f"{portal}{row.link or '/notifications/'}"]
    return "\n".join(lines) + "\n"
