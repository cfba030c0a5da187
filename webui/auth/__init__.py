# SPDX-License-Identifier: GPL-3.0-or-later
"""Login: LDAP password, then TOTP; who is logged in, what they may see, failed attempts, and the audit log.

* :mod:`webui.auth.views`: the ``auth`` blueprint (``/auth/login``, ``/auth/totp``, ``/auth/logout``);
* :mod:`webui.auth.ldap`: the user's bind and their groups; :mod:`webui.auth.totp`: codes and enrolment;
* :mod:`webui.auth.logins`: the server-side login behind the cookie (:mod:`webui.auth.login_cookie`), the current user;
* :mod:`webui.auth.access`: ``login_required``, ``admin_required``; :mod:`webui.auth.lockout`: failed attempts;
* :mod:`webui.auth.audit`: the audit log.

The names below are the package's public API (a login from a script: ``auth.get_user``, ``auth.start_login``).
"""

from __future__ import annotations

from webui.auth.access import admin_required
from webui.auth.access import login_required
from webui.auth.audit import audit
from webui.auth.lockout import record_success
from webui.auth.logins import CurrentUser
from webui.auth.logins import current_user
from webui.auth.logins import get_user
from webui.auth.logins import login_key
from webui.auth.logins import start_login
from webui.auth.totp import new_totp_secret

__all__ = [
    "CurrentUser",
    "admin_required",
    "audit",
    "current_user",
    "get_user",
    "login_key",
    "login_required",
    "new_totp_secret",
    "record_success",
    "start_login",
]
