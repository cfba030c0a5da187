# SPDX-License-Identifier: GPL-3.0-or-later
"""TOTP (pyotp): enrolment with a QR code (segno), and codes that work once."""

from __future__ import annotations

import hmac
import re
import time

import pyotp
import segno
from flask import current_app
from werkzeug.exceptions import BadRequest

from webui.models import User


def totp_for(user: User) -> pyotp.TOTP:
    if not user.totp_secret:
        raise BadRequest("TOTP is not set up for this account")
    return pyotp.TOTP(user.totp_secret, issuer=str(current_app.config["TOTP_ISSUER"]))


def verify_totp(user: User, code: str, now: float | None = None) -> str | None:
    """Check a code; on success store its time step. Returns an error text or None.

    A code whose step is not newer than the last accepted one is refused, so a
    code seen once (shoulder, proxy log, phishing relay) cannot be used again.
    """
    code = code.strip().replace(" ", "")
    if not re.fullmatch(r"\d{6}", code):
        return "The code must be 6 digits."
    totp = totp_for(user)
    now = time.time() if now is None else now
    window = int(current_app.config["TOTP_VALID_WINDOW"])
    matched: int | None = None
    for offset in range(-window, window + 1):
        at = now + offset * totp.interval
        if hmac.compare_digest(totp.at(int(at)), code):
            matched = int(at // totp.interval)
    if matched is None:
        return "Wrong code."
    if matched <= user.totp_last_step:
        return "This code was already used; wait for the next one."
    user.totp_last_step = matched
    return None


def new_totp_secret() -> str:
    return pyotp.random_base32()


def provisioning_svg(user: User) -> str:
    uri = totp_for(user).provisioning_uri(name=user.username, issuer_name=str(current_app.config["TOTP_ISSUER"]))
    qr = segno.make(uri, error="m")
    svg: str = qr.svg_inline(scale=4, border=2, dark="#000", light="#fff", omitsize=False)
    return svg


def reset_totp(user: User) -> None:
    """Forget the user's TOTP secret (they enrol again at their next login) and end all their logins; the caller
    audits and commits."""
    user.totp_secret = None
    user.totp_confirmed = False
    user.totp_last_step = 0  # steps of the old secret mean nothing for the new one
    user.session_version += 1  # logs the user out everywhere
