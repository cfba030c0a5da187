# SPDX-License-Identifier: GPL-3.0-or-later
"""Who may see a view: logged-in users, administrators."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec
from typing import TypeVar

from flask import abort
from flask import redirect
from flask import request
from flask import url_for

from webui.auth.logins import current_user

P = ParamSpec("P")
R = TypeVar("R")


def login_required(view: Callable[P, R]) -> Callable[P, R]:
    @functools.wraps(view)
    def wrapped(*args: P.args, **kwargs: P.kwargs) -> R:
        if current_user() is None:
            if request.blueprint == "api" or request.accept_mimetypes.best == "application/json":
                abort(401)
            return redirect(url_for("auth.login", next=request.full_path))  # type: ignore[return-value]
        return view(*args, **kwargs)

    return wrapped


def admin_required(view: Callable[P, R]) -> Callable[P, R]:
    @functools.wraps(view)
    def wrapped(*args: P.args, **kwargs: P.kwargs) -> R:
        user = current_user()
        if user is None:
            return redirect(url_for("auth.login", next=request.full_path))  # type: ignore[return-value]
        if not user.is_admin:
            abort(403)
        return view(*args, **kwargs)

    return wrapped
