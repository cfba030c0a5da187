# SPDX-License-Identifier: GPL-3.0-or-later
"""Random tokens and their SHA-256 keys.

What the portal hands out (login cookies, Connect tickets, browser bindings, calendar feed URLs, session secrets) is a
:func:`new_token`; where it keeps one to check it later, it keeps its :func:`token_hash` only.
"""

from __future__ import annotations

import hashlib
import secrets


def new_token() -> str:
    """32 random bytes, URL-safe base64 (43 characters)."""
    return secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    """The SHA-256 of ``token`` in hex: the form in which the portal stores or compares a token."""
    return hashlib.sha256(token.encode()).hexdigest()
