# SPDX-License-Identifier: GPL-3.0-or-later
"""Server-side form parsing: bad input is a 400 whose message names the field."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from typing import Any

from werkzeug.exceptions import BadRequest


class FieldError(BadRequest):
    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field


def text(
    form: Mapping[str, Any],
    name: str,
    *,
    max_len: int = 200,
    required: bool = True,
    pattern: str | None = None,
    multiline: bool = False,
) -> str:
    value = form.get(name)
    if value is None or (isinstance(value, str) and value.strip() == ""):
        if required:
            raise FieldError(name, "is required")
        return ""
    if not isinstance(value, str):
        raise FieldError(name, "must be text")
    if len(value) > max_len:
        raise FieldError(name, f"must be at most {max_len} characters")
    if "\x00" in value:
        raise FieldError(name, "must not contain NUL characters")
    if not multiline and ("\n" in value or "\r" in value):
        raise FieldError(name, "must be a single line")
    if pattern is not None and not re.fullmatch(pattern, value):
        raise FieldError(name, "has characters that are not allowed here")
    return value


def integer(form: Mapping[str, Any], name: str, *, lo: int, hi: int, default: int | None = None) -> int:
    raw = form.get(name)
    if raw is None or raw == "":
        if default is not None:
            return default
        raise FieldError(name, "is required")
    if isinstance(raw, bool):
        raise FieldError(name, "must be a whole number")
    try:
        value = int(raw) if isinstance(raw, int) else int(str(raw).strip(), 10)
    except ValueError:
        raise FieldError(name, "must be a whole number") from None
    if not lo <= value <= hi:
        raise FieldError(name, f"must be between {lo} and {hi}")
    return value


def number(form: Mapping[str, Any], name: str, *, lo: float, hi: float) -> float:
    raw = form.get(name)
    try:
        value = float(str(raw).strip())
    except (TypeError, ValueError):
        raise FieldError(name, "must be a number") from None
    if not lo <= value <= hi or value != value:
        raise FieldError(name, f"must be between {lo:g} and {hi:g}")
    return value


def choice(form: Mapping[str, Any], name: str, options: list[str] | set[str] | tuple[str, ...]) -> str:
    value = form.get(name)
    if not isinstance(value, str) or value == "":
        raise FieldError(name, "is required")
    if value not in options:
        raise FieldError(name, "is not one of the offered choices")
    return value


#: the characters a path the portal hands to a node may have: no whitespace, control or shell characters
PATH_CHARS = re.compile(r"[A-Za-z0-9_.+/-]")
#: trees nothing the portal runs may come from: anyone may write there, or the kernel makes them up
SHARED_TREES = ("/tmp", "/var/tmp", "/dev", "/proc", "/sys", "/run")
#: the system's own directories, never a path of their own (an image or environment lies below them)
SYSTEM_DIRS = frozenset(
    {"/", "/bin", "/boot", "/etc", "/home", "/lib", "/lib64", "/media", "/mnt", "/opt", "/root", "/sbin", "/srv"}
    | {"/usr", "/usr/bin", "/usr/lib", "/usr/local", "/usr/sbin", "/usr/share", "/var", "/var/lib"}
)


def absolute_path(value: str, name: str, label: str) -> str:
    """``value`` if it is an absolute, normalised path of plain characters outside the system's own and the shared
    directories; else a :class:`FieldError` naming the field ``name`` and the ``label`` the form shows for it."""
    bad = next((ch for ch in value if not PATH_CHARS.fullmatch(ch)), None)
    if bad is not None:
        raise FieldError(name, f"{label} may have letters, digits and _ . + - / only, not {bad!r}")
    if ".." in value.split("/"):
        raise FieldError(name, f"{label} must not go up a directory (..)")
    if not value.startswith("/"):
        raise FieldError(name, f"{label} must be an absolute path (start with /)")
    if posixpath.normpath(value) != value or "//" in value:
        raise FieldError(name, f"{label} must be a normalised path (no //, /./ or / at the end)")
    if value in SYSTEM_DIRS:
        raise FieldError(name, f"{label} must not be the system directory {value}")
    shared = next((t for t in SHARED_TREES if value == t or value.startswith(t + "/")), None)
    if shared is not None:
        raise FieldError(name, f"{label} must not lie in {shared} (anyone may write there, or the kernel fills it)")
    return value


def flag(form: Mapping[str, Any], name: str) -> bool:
    return str(form.get(name, "")).lower() in ("1", "on", "true", "yes")


def decision(form: Mapping[str, Any]) -> tuple[str, str]:
    """An administrator's decision on a request: ``action`` approve or decline, and a ``reason`` (required to
    decline, at most 500 characters)."""
    action = choice(form, "action", ("approve", "decline"))
    return action, text(form, "reason", max_len=500, required=action == "decline")
