# SPDX-License-Identifier: GPL-3.0-or-later
"""Session profiles (issue 30): the inventory's synced into the table, the admin page, the start form's chooser with
the user's last choice, CPUs/memory/TensorBoard log directory, errors named by the form's labels, the API unchanged."""

from __future__ import annotations

import re
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskCliRunner
from sqlalchemy import select

from webui.extensions import db
from webui.models import AuditLog
from webui.models import ImageCatalog
from webui.models import PortalSession
from webui.models import SessionProfile
from webui.models import User
from webui.sessions.profiles import ProfileInvalid
from webui.sessions.profiles import sync_profiles

from .conftest import FakeScheduler
from .conftest import csrf_token
from .conftest import log_in_as
from .conftest import post

LAB = {"name": "lab", "title": "JupyterLab · pytorch · 1 GPU", "app": "jupyterlab", "image": "pytorch", "gpus": 1}
CODE = {"name": "code", "title": "code-server · pytorch", "app": "code-server", "image": "pytorch", "gpus": 0,
        "cpus": 2, "mem_mb": 4096, "time_minutes": 30}  # fmt: skip
API = {"app": "jupyterlab", "image": "pytorch", "gpus": 0, "time_minutes": 60}


def sync(app: Flask, entries: list[dict[str, Any]]) -> list[tuple[str, str]]:
    with app.app_context():
        outcomes = sync_profiles(entries)
        db.session.commit()
        return outcomes


def profiles(app: Flask) -> dict[str, SessionProfile]:
    with app.app_context():
        rows = db.session.execute(select(SessionProfile)).scalars()
        out = {p.name: p for p in rows}
        db.session.expunge_all()
        return out


def add_portal_profile(app: Flask, **values: Any) -> None:
    with app.app_context():
        db.session.add(SessionProfile(source="portal", position=100, **{**CODE, "name": "mine", **values}))
        db.session.commit()


def page(client: Any) -> str:
    return str(client.get("/sessions/new").get_data(as_text=True))


def test_sync_creates_updates_and_disables_only_inventory_profiles(app: Flask) -> None:
    add_portal_profile(app)
    assert sync(app, [LAB, CODE]) == [("lab", "created"), ("code", "created")]
    assert sync(app, [LAB, CODE]) == [("lab", "unchanged"), ("code", "unchanged")]
    assert sync(app, [{**CODE, "title": "VS Code"}]) == [("code", "updated"), ("lab", "disabled")]
    rows = profiles(app)
    assert rows["code"].title == "VS Code" and rows["code"].position == 0 and rows["code"].source == "inventory"
    assert not rows["lab"].enabled  # it left the inventory
    assert rows["mine"].enabled and rows["mine"].source == "portal"  # made on the admin page: untouched
    assert rows["code"].cpus == 2 and rows["code"].mem_mb == 4096 and rows["code"].time_minutes == 30
    assert sync(app, [LAB])[0] == ("lab", "updated")  # listed again: enabled again
    assert profiles(app)["lab"].enabled and profiles(app)["lab"].cpus is None  # the portal's default


@pytest.mark.parametrize(
    ("entries", "says"),
    [
        ([{**LAB, "name": "Bad Name"}], "name must match"),
        ([{**LAB, "gpus": -1}], "gpus must be a whole number"),
        ([{**LAB, "colour": "red"}], "unknown key(s) colour"),
        ([{k: v for k, v in LAB.items() if k != "app"}], "app must match"),
        ([LAB, LAB], "named twice: lab"),
        ({"lab": LAB}, "must be a list"),
    ],
)
def test_sync_checks_every_profile_before_it_writes_any(app: Flask, entries: Any, says: str) -> None:
    with app.app_context(), pytest.raises(ProfileInvalid, match=re.escape(says)):
        sync_profiles([CODE, *entries] if isinstance(entries, list) else entries)
    assert profiles(app) == {}


def test_the_cli_syncs_the_configs_profiles_and_audits(app: Flask, runner: FlaskCliRunner) -> None:
    app.config["SESSION_PROFILES"] = [LAB, CODE]
    result = runner.invoke(args=["profiles-sync"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == ["profile lab: created", "profile code: created"]
    assert runner.invoke(args=["profiles-sync"]).output.splitlines()[0] == "profile lab: unchanged"
    app.config["SESSION_PROFILES"] = [{**LAB, "gpus": "one"}]
    bad = runner.invoke(args=["profiles-sync"])
    assert bad.exit_code != 0 and "gpus must be a whole number" in bad.output
    with app.app_context():
        assert db.session.query(AuditLog).filter_by(action="profile.created").count() == 2


def test_the_form_offers_profiles_and_preselects_the_first(app: Flask, client: Any) -> None:
    sync(app, [LAB, CODE])
    log_in_as(app, client, "alice")
    html = page(client)
    assert html.index("JupyterLab · pytorch · 1 GPU") < html.index("code-server · pytorch")
    assert 'value="lab" checked' in html and 'value="code" checked' not in html
    assert "1 GPU ·" in html and "0 GPUs ·" in html and "1 GPUs" not in html  # plurals
    assert html.count("<details") == 1  # the advanced fields under one disclosure


def test_start_with_the_preselected_profile_starts_it_and_remembers_the_choice(
    app: Flask, client: Any, fake_scheduler: FakeScheduler
) -> None:
    sync(app, [LAB, CODE])
    log_in_as(app, client, "alice")
    assert post(client, "/sessions/new", {"profile": "code", "nodes": "1", "partition": "gpu"}).status_code == 302
    spec, _secret, payload = fake_scheduler.submitted[0]
    assert (spec.app, spec.image, spec.gpus, spec.cpus, spec.mem_mb, spec.time_minutes) == (
        "code-server", "/images/pytorch.sif", 0, 2, 4096, 30)  # fmt: skip
    assert payload["job"]["cpus_per_task"] == 2 and payload["job"]["memory_per_node"] == 4096
    with app.app_context():
        record = db.session.execute(select(PortalSession)).scalar_one()
        assert (record.profile, record.cpus, record.mem_mb) == ("code", 2, 4096)
        user = db.session.execute(select(User).where(User.username == "alice")).scalar_one()
        assert user.last_start == {"profile": "code"}
    assert 'value="code" checked' in page(client)  # next time: the last choice
    log_in_as(app, client, "bob")
    assert 'value="lab" checked' in page(client)  # another user: the first profile


def test_advanced_fields_override_the_profile(app: Flask, client: Any, fake_scheduler: FakeScheduler) -> None:
    sync(app, [LAB])
    app.config.update(SESSION_MAX_CPUS=8, SESSION_MAX_MEM_MB=8192)
    log_in_as(app, client, "alice")
    form = {"profile": "lab", "gpus": "0", "cpus": "3", "mem_gib": "1.5", "time_minutes": "45", "nodes": "1"}
    assert post(client, "/sessions/new", form).status_code == 302
    spec = fake_scheduler.submitted[0][0]
    assert (spec.app, spec.gpus, spec.cpus, spec.mem_mb, spec.time_minutes) == ("jupyterlab", 0, 3, 1536, 45)
    assert spec.limits.max_cpus == 8 and spec.limits.max_mem_mb == 8192  # carme_runtime checks them again


def test_a_failed_start_is_not_remembered(app: Flask, client: Any, fake_scheduler: FakeScheduler) -> None:
    sync(app, [LAB, CODE])
    log_in_as(app, client, "alice")
    assert post(client, "/sessions/new", {"profile": "code", "cpus": "99"}).status_code == 400
    assert 'value="lab" checked' in page(client)


def test_a_last_choice_no_longer_offered_falls_back_to_the_first(app: Flask, client: Any) -> None:
    sync(app, [LAB, CODE])
    with app.app_context():
        db.session.add(User(username="alice", last_start={"profile": "code"}))
        db.session.commit()
    sync(app, [LAB])  # code left the inventory
    log_in_as(app, client, "alice")
    html = page(client)
    assert 'value="lab" checked' in html and 'value="code"' not in html


@pytest.mark.parametrize("make_unavailable", ["disable_image", "app_not_allowed", "app_not_installed"])
def test_a_profile_whose_image_or_app_is_unavailable_is_not_offered(
    app: Flask, client: Any, make_unavailable: str
) -> None:
    other = {**LAB, "name": "other", "title": "Other profile"}
    if make_unavailable == "app_not_allowed":
        other["app"] = "tensorboard"  # pytorch allows jupyterlab and code-server
    elif make_unavailable == "app_not_installed":
        other["app"] = "no-such-app"
    elif make_unavailable == "disable_image":
        other["image"] = "spare"
        with app.app_context():  # an image an admin disabled on /admin/images
            db.session.add(
                ImageCatalog(name="spare", image="/images/s.sif", allowed_apps=["jupyterlab"], enabled=False)
            )
            db.session.commit()
    sync(app, [LAB, other])
    log_in_as(app, client, "alice")
    assert "Other profile" not in page(client)
    resp = post(client, "/sessions/new", {"profile": "other"})
    assert resp.status_code == 400 and "Profile: is not one of the offered choices" in resp.get_data(as_text=True)
    log_in_as(app, client, "carol", admin=True)
    assert "not offered:" in client.get("/admin/profiles").get_data(as_text=True)


def test_form_errors_name_the_label_and_the_api_keeps_the_field(
    app: Flask, client: Any, fake_scheduler: FakeScheduler
) -> None:
    log_in_as(app, client, "alice")
    form = {**API, "partition": "gpu", "time_minutes": "481"}
    html = post(client, "/sessions/new", form).get_data(as_text=True)
    assert "Time (minutes): must be between 1 and 480" in html and "time_minutes:" not in html
    html = post(client, "/sessions/new", {**form, "time_minutes": "60", "cpus": "0"}).get_data(as_text=True)
    assert "CPUs: must be between 1 and 4" in html
    headers = {"X-CSRFToken": csrf_token(client), "Referer": "https://localhost/"}
    resp = client.post("/api/sessions", json={**API, "time_minutes": 481}, headers=headers)
    assert resp.status_code == 400 and resp.get_json()["error"] == "time_minutes: must be between 1 and 480"


def test_the_api_starts_without_a_profile_as_before(app: Flask, client: Any, fake_scheduler: FakeScheduler) -> None:
    sync(app, [CODE])
    log_in_as(app, client, "alice")
    headers = {"X-CSRFToken": csrf_token(client), "Referer": "https://localhost/"}
    resp = client.post("/api/sessions", json=API, headers=headers)
    assert resp.status_code == 201, resp.get_data(as_text=True)
    spec = fake_scheduler.submitted[0][0]
    assert (spec.app, spec.gpus, spec.cpus, spec.mem_mb) == ("jupyterlab", 0, 4, 16000)  # the portal's defaults
    with app.app_context():
        assert db.session.execute(select(PortalSession)).scalar_one().profile is None
        user = db.session.execute(select(User).where(User.username == "alice")).scalar_one()
        assert user.last_start is None  # only a profile's start is remembered


def add_tensorboard_image(app: Flask) -> None:
    with app.app_context():
        db.session.add(ImageCatalog(name="tb", image="/images/tb.sif", allowed_apps=["tensorboard"], enabled=True))
        db.session.commit()


@pytest.mark.parametrize(
    ("logdir", "env"), [("~/runs/exp1", "/home/alice/runs/exp1"), ("/home/alice/tb", "/home/alice/tb"), ("", None)]
)
def test_tensorboard_gets_its_log_directory(
    app: Flask, client: Any, fake_scheduler: FakeScheduler, logdir: str, env: str | None
) -> None:
    add_tensorboard_image(app)
    log_in_as(app, client, "alice")
    form = {"app": "tensorboard", "image": "tb", "gpus": "0", "time_minutes": "30", "logdir": logdir}
    assert post(client, "/sessions/new", form).status_code == 302
    spec, _secret, payload = fake_scheduler.submitted[0]
    assert spec.logdir == (env or "")
    assert payload["job"]["environment"].get("CARME_LOGDIR") == env


@pytest.mark.parametrize(
    ("logdir", "says"),
    [
        ("/home/bob/runs", "TensorBoard log directory must lie in your home directory /home/alice"),
        ("~/../bob", "TensorBoard log directory must not go up a directory"),
        ("runs", "TensorBoard log directory must be an absolute path"),
        ("~/a b", "TensorBoard log directory may have letters"),
    ],
)
def test_a_bad_log_directory_is_400_with_its_label(
    app: Flask, client: Any, fake_scheduler: FakeScheduler, logdir: str, says: str
) -> None:
    add_tensorboard_image(app)
    log_in_as(app, client, "alice")
    form = {"app": "tensorboard", "image": "tb", "gpus": "0", "time_minutes": "30", "logdir": logdir}
    resp = post(client, "/sessions/new", form)
    assert resp.status_code == 400 and says in resp.get_data(as_text=True)
    assert fake_scheduler.submitted == []


def test_admins_manage_portal_profiles_and_see_the_inventorys_read_only(app: Flask, client: Any) -> None:
    sync(app, [LAB])
    log_in_as(app, client, "alice")
    assert client.get("/admin/profiles").status_code == 403
    log_in_as(app, client, "carol", admin=True)
    html = client.get("/admin/profiles").get_data(as_text=True)
    assert "from the inventory" in html and 'href="/admin/profiles"' in html
    form = {
        "name": "mine",
        "title": "Mine",
        "app": "code-server",
        "image": "pytorch",
        "gpus": "0",
        "time_minutes": "20",
    }
    assert post(client, "/admin/profiles", form).status_code == 302
    mine = profiles(app)["mine"]
    assert (mine.source, mine.enabled, mine.cpus, mine.position) == ("portal", True, None, 100)
    bad = post(client, "/admin/profiles", {**form, "time_minutes": "0"})
    assert bad.status_code == 400 and "Time (minutes): must be between" in bad.get_data(as_text=True)
    taken = post(client, "/admin/profiles", {**form, "name": "lab"})
    assert taken.status_code == 400 and "comes from the inventory" in taken.get_data(as_text=True)
    lab = profiles(app)["lab"]
    assert post(client, f"/admin/profiles/{lab.id}/toggle").status_code == 400
    assert post(client, f"/admin/profiles/{mine.id}/toggle").status_code == 302
    assert not profiles(app)["mine"].enabled
    assert post(client, f"/admin/profiles/{mine.id}/delete").status_code == 302
    assert "mine" not in profiles(app)
    with app.app_context():
        actions = {a.action for a in db.session.query(AuditLog).filter_by(target="mine")}
        assert actions == {"admin.profile.save", "admin.profile.disable", "admin.profile.delete"}
