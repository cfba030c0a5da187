# SPDX-License-Identifier: GPL-3.0-or-later
"""Session profiles (issue 30): named start-form presets (app + image + resources + description).

Profiles come from the inventory (``carme_webui_session_profiles``, rendered into config.py as ``SESSION_PROFILES``
and written into the table by ``flask --app webui profiles-sync``, source ``inventory``) or from the admin page
(source ``portal``). The start form offers the enabled ones whose image is enabled, allows the app and whose app is
installed, ordered by position and name; a user's default is their last choice (``User.last_start``) while it is
still offered, else the first profile.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from sqlalchemy import select

from webui import forms
from webui.auth.logins import get_user
from webui.extensions import db
from webui.models import ImageCatalog
from webui.models import SessionProfile
from webui.sessions.catalog import installed_apps

#: a profile's name: what the form posts and ``last_start`` keeps
NAME = r"[a-z0-9][a-z0-9_.-]{0,63}"
APP = r"[a-z0-9][a-z0-9_-]{0,63}"
IMAGE = r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}"
#: the keys of a profile as the inventory and the admin page give it
FIELDS = ("name", "title", "description", "app", "image", "gpus", "cpus", "mem_mb", "time_minutes")
#: what the role's entries may leave out
OPTIONAL = {"description": "", "gpus": 0, "cpus": None, "mem_mb": None, "time_minutes": 60}


class ProfileInvalid(ValueError):
    """A profile entry that cannot be kept; the message names the entry and the key."""


def enabled_profiles() -> list[SessionProfile]:
    return list(
        db.session.execute(
            select(SessionProfile)
            .where(SessionProfile.enabled.is_(True))
            .order_by(SessionProfile.position, SessionProfile.name)
        ).scalars()
    )


def all_profiles() -> list[SessionProfile]:
    """Every profile, enabled or not (the admin page)."""
    return list(
        db.session.execute(select(SessionProfile).order_by(SessionProfile.position, SessionProfile.name)).scalars()
    )


def unavailable_reason(profile: SessionProfile, images: list[ImageCatalog], installed: set[str]) -> str:
    """Why ``profile`` cannot start now ("" when it can): ``images`` are the enabled catalogue entries."""
    image = next((i for i in images if i.name == profile.image), None)
    if image is None:
        return f"image {profile.image!r} is not in the catalogue or is disabled"
    if profile.app not in image.allowed_apps:
        return f"image {profile.image!r} does not offer {profile.app!r}"
    if profile.app not in installed:
        return f"app {profile.app!r} is not installed"
    return ""


def offered_profiles(images: list[ImageCatalog]) -> list[SessionProfile]:
    """The enabled profiles a user can start now, in the form's order."""
    installed = set(installed_apps())
    return [p for p in enabled_profiles() if not unavailable_reason(p, images, installed)]


def default_profile(username: str, offered: list[SessionProfile]) -> SessionProfile | None:
    """The user's last choice while it is still offered, else the first offered profile (None: none offered)."""
    user = get_user(username)
    last = (user.last_start or {}).get("profile") if user is not None else None
    chosen = next((p for p in offered if p.name == last), None)
    return chosen or (offered[0] if offered else None)


def chosen_profile(form: Mapping[str, Any], images: list[ImageCatalog]) -> SessionProfile | None:
    """The offered profile ``form`` names in ``profile``; None when it names none (the JSON API's own fields)."""
    if form.get("profile") in (None, ""):
        return None
    offered = offered_profiles(images)
    name = forms.choice(form, "profile", [p.name for p in offered])
    return next(p for p in offered if p.name == name)


def with_profile(form: Mapping[str, Any], profile: SessionProfile | None) -> dict[str, Any]:
    """The start's values: the profile's, each overridden by a non-empty field of ``form`` (the advanced fields);
    without a profile, ``form``'s as they are."""
    given = {key: form.get(key) for key in form}
    if profile is None:
        return given
    values: dict[str, Any] = {"app": profile.app, "image": profile.image, "gpus": profile.gpus}
    values["time_minutes"] = profile.time_minutes
    if profile.cpus is not None:
        values["cpus"] = profile.cpus
    if profile.mem_mb is not None:
        values["mem_mb"] = profile.mem_mb
    values.update({key: value for key, value in given.items() if value not in (None, "")})
    return values


def remember_choice(username: str, choice: Mapping[str, Any]) -> None:
    """Keep the start form's choice (``profile`` and the advanced fields) on the user's row, uncommitted: it is
    committed with the session's record, so only a successful start is remembered."""
    user = get_user(username, create=True)
    assert user is not None
    user.last_start = {k: v for k, v in choice.items() if v not in (None, "")}


# --- the inventory's profiles ----------------------------------------------------


def _integer(entry: Mapping[str, Any], key: str, where: str, *, lo: int, optional: bool) -> int | None:
    value = entry.get(key, OPTIONAL.get(key))
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise ProfileInvalid(f"{where}: {key} must be a whole number of at least {lo}")
    return value


def _string(entry: Mapping[str, Any], key: str, where: str, pattern: str | None, max_len: int) -> str:
    value = entry.get(key, OPTIONAL.get(key))
    if not isinstance(value, str) or len(value) > max_len or (pattern and not re.fullmatch(pattern, value)):
        shape = f"match {pattern}" if pattern else f"be text of at most {max_len} characters"
        raise ProfileInvalid(f"{where}: {key} must {shape}")
    return value


def check_entry(entry: object, where: str) -> dict[str, Any]:
    """One profile entry, checked (as the admin page checks its form): a dict of :data:`FIELDS`."""
    if not isinstance(entry, Mapping):
        raise ProfileInvalid(f"{where}: not a mapping")
    unknown = set(entry) - set(FIELDS)
    if unknown:
        raise ProfileInvalid(f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))}")
    out: dict[str, Any] = {"name": _string(entry, "name", where, NAME, 64)}
    where = f"{where} ({out['name']})"
    out["title"] = _string(entry, "title", where, None, 200)
    if not out["title"].strip():
        raise ProfileInvalid(f"{where}: title must not be empty")
    out["description"] = _string(entry, "description", where, None, 2000)
    out["app"] = _string(entry, "app", where, APP, 64)
    out["image"] = _string(entry, "image", where, IMAGE, 64)
    out["gpus"] = _integer(entry, "gpus", where, lo=0, optional=False)
    out["cpus"] = _integer(entry, "cpus", where, lo=1, optional=True)
    out["mem_mb"] = _integer(entry, "mem_mb", where, lo=1, optional=True)
    out["time_minutes"] = _integer(entry, "time_minutes", where, lo=1, optional=False)
    return out


def check_entries(entries: object) -> list[dict[str, Any]]:
    """The inventory's list, every entry checked and no name twice, before anything is written."""
    if not isinstance(entries, list | tuple):
        raise ProfileInvalid("SESSION_PROFILES must be a list of profiles")
    checked = [check_entry(entry, f"profile {index}") for index, entry in enumerate(entries)]
    names = [c["name"] for c in checked]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ProfileInvalid(f"profile(s) named twice: {', '.join(twice)}")
    return checked


def _ensure(entry: dict[str, Any], position: int) -> str:
    """Create or update the inventory's profile ``entry`` at ``position``: created, updated or unchanged."""
    row = db.session.execute(select(SessionProfile).where(SessionProfile.name == entry["name"])).scalar_one_or_none()
    wanted = {**entry, "position": position, "enabled": True, "source": "inventory"}
    if row is None:
        db.session.add(SessionProfile(**wanted))
        return "created"
    if all(getattr(row, key) == value for key, value in wanted.items()):
        return "unchanged"
    for key, value in wanted.items():
        setattr(row, key, value)
    return "updated"


def sync_profiles(entries: object) -> list[tuple[str, str]]:
    """Make the inventory-owned profiles what ``entries`` (``SESSION_PROFILES``) lists, in its order: each is created
    or updated (a portal-made profile of the same name becomes the inventory's); inventory-owned profiles that left
    the list are disabled; portal-made ones stay as they are. Uncommitted; (name, outcome) per profile touched."""
    checked = check_entries(entries)
    outcomes = [(entry["name"], _ensure(entry, index)) for index, entry in enumerate(checked)]
    listed = {entry["name"] for entry in checked}
    gone = db.session.execute(
        select(SessionProfile).where(SessionProfile.source == "inventory", SessionProfile.enabled.is_(True))
    ).scalars()
    for row in gone:
        if row.name not in listed:
            row.enabled = False
            outcomes.append((row.name, "disabled"))
    db.session.flush()
    return outcomes
