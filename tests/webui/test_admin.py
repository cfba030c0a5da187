# SPDX-License-Identifier: GPL-3.0-or-later
"""Admin pages: 403 for others, audit trail, user text stored and shown literally."""

from __future__ import annotations

from typing import Any

import pytest
from flask import Flask
from markupsafe import escape

from webui.extensions import db
from webui.models import AuditLog
from webui.models import ImageCatalog
from webui.models import News
from webui.slurm.limits import QosLimits

from .conftest import SPECIAL
from .conftest import FakeScheduler
from .conftest import log_in_as
from .conftest import post
from .conftest import set_slurm_limits


def escape_str(text: str) -> str:
    """How Jinja autoescape writes ``text`` into HTML (' and " as numeric entities)."""
    return str(escape(text))


ADMIN_GETS = ["/admin/", "/admin/news", "/admin/images", "/admin/users", "/admin/audit"]
ADMIN_POSTS = [
    "/admin/news",
    "/admin/news/1/delete",
    "/admin/images",
    "/admin/images/1/toggle",
    "/admin/users/alice/totp-reset",
    "/admin/users/alice/unlock",
    "/admin/sessions/1/stop",
]


@pytest.mark.parametrize("url", ADMIN_GETS)
def test_non_admin_gets_403(app: Flask, client: Any, url: str) -> None:
    log_in_as(app, client, "alice")
    assert client.get(url).status_code == 403


@pytest.mark.parametrize("url", ADMIN_POSTS)
def test_non_admin_posts_are_403(app: Flask, client: Any, url: str) -> None:
    log_in_as(app, client, "alice")
    assert post(client, url, {"title": "x", "body": "y"}).status_code == 403


@pytest.mark.parametrize("url", ADMIN_GETS)
def test_logged_out_is_sent_to_login(client: Any, url: str) -> None:
    resp = client.get(url)
    assert resp.status_code == 302 and "/auth/login" in resp.headers["Location"]


@pytest.mark.parametrize("url", ADMIN_GETS)
def test_admin_pages_render(app: Flask, client: Any, url: str) -> None:
    log_in_as(app, client, "carol", admin=True)
    assert client.get(url).status_code == 200


def test_news_with_special_characters_is_stored_and_shown_literally(app: Flask, client: Any) -> None:
    log_in_as(app, client, "carol", admin=True)
    title = 'it\'s "quoted" $(id); echo'
    assert post(client, "/admin/news", {"title": title, "body": SPECIAL}).status_code == 302
    with app.app_context():
        item = db.session.query(News).one()
        assert (item.title, item.body) == (title, SPECIAL)
    log_in_as(app, client, "alice")
    page = client.get("/").get_data(as_text=True)
    assert escape_str(title) in page
    assert escape_str(SPECIAL) in page  # the newline survives, shown via CSS pre-wrap
    assert "<b>bold</b>" not in page


def test_single_line_fields_refuse_newlines(app: Flask, client: Any) -> None:
    log_in_as(app, client, "carol", admin=True)
    resp = post(client, "/admin/news", {"title": "a\nb", "body": "x"})
    assert resp.status_code == 400
    assert "title: must be a single line" in resp.get_data(as_text=True)


def test_image_catalogue_with_special_description(app: Flask, client: Any) -> None:
    log_in_as(app, client, "carol", admin=True)
    data = {
        "name": "tf-2.15",
        "kind": "image",
        "image": "/images/tf.sif",
        "allowed_apps": "jupyterlab, tensorboard",
        "description": SPECIAL,
    }
    assert post(client, "/admin/images", data).status_code == 302
    with app.app_context():
        entry = db.session.query(ImageCatalog).filter_by(name="tf-2.15").one()
        assert entry.description == SPECIAL and entry.allowed_apps == ["jupyterlab", "tensorboard"]
        audit = db.session.query(AuditLog).filter_by(action="admin.image.save").one()
        assert audit.actor == "carol" and audit.target == "tf-2.15"
    page = client.get("/admin/images").get_data(as_text=True)
    assert escape_str(SPECIAL) in page
    bad = post(client, "/admin/images", {**data, "name": "x; rm -rf /"})
    assert bad.status_code == 400 and "name:" in bad.get_data(as_text=True)
    bad = post(client, "/admin/images", {**data, "allowed_apps": "$(id)"})
    assert bad.status_code == 400 and "allowed_apps:" in bad.get_data(as_text=True)


def test_there_is_no_quota_policy_to_edit_slurm_limits_are_enforced(
    app: Flask, client: Any, fake_scheduler: FakeScheduler
) -> None:
    """Issue 31: the portal's own quota policy is gone; the start is refused with Slurm's figure and its record."""
    log_in_as(app, client, "carol", admin=True)
    assert client.get("/admin/quota").status_code == 404
    assert post(client, "/admin/quota", {"username": "alice", "max_gpus_per_session": "9"}).status_code == 404
    set_slurm_limits(fake_scheduler, "alice", gpus_per_job=1, max_wall_minutes=30)
    fake_scheduler.qos_list = (QosLimits("interactive", max_wall_minutes=20),)
    app.config["SESSION_QOS"] = "interactive"
    log_in_as(app, client, "alice")
    form = {"app": "jupyterlab", "image": "pytorch", "partition": "gpu", "gpus": "2", "time_minutes": "20"}
    resp = post(client, "/sessions/new", form)
    said = resp.get_data(as_text=True)
    assert resp.status_code == 400 and "GPUs: 2 per node on 1 nodes is more than the 1 GPUs" in said
    assert "Slurm: association alice@research MaxTRESPerJob=gres/gpu=1" in said
    resp = post(client, "/sessions/new", {**form, "gpus": "1", "time_minutes": "21"})
    said = resp.get_data(as_text=True)  # the QOS's MaxWall comes before the association's (Slurm's order)
    assert resp.status_code == 400 and "must be at most 20 minutes (Slurm: QOS interactive MaxWall=20)" in said
    assert fake_scheduler.submitted == []


def test_unlock_is_audited(app: Flask, client: Any) -> None:
    log_in_as(app, client, "alice")
    log_in_as(app, client, "carol", admin=True)
    assert post(client, "/admin/users/alice/unlock").status_code == 302
    assert post(client, "/admin/users/nobody-here/unlock").status_code == 404
    page = client.get("/admin/audit").get_data(as_text=True)
    assert "admin.user.unlock" in page


def test_audit_log_shows_details_literally(app: Flask, client: Any) -> None:
    from markupsafe import escape

    title = 'it\'s "quoted" $(touch /tmp/x); `id` <b>bold</b>'
    log_in_as(app, client, "carol", admin=True)
    assert post(client, "/admin/news", {"title": title, "body": "text"}).status_code == 302
    page = client.get("/admin/audit").get_data(as_text=True)
    assert f'<code class="pre">{escape(title)}</code>' in page
    assert "<b>bold</b>" not in page


IMAGE_FORM = {"name": "tf", "kind": "image", "allowed_apps": "jupyterlab", "description": ""}
DIGEST = "@sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("image", "says"),
    [
        ("/tmp", "must not lie in /tmp"),
        ("/tmp/evil.sif", "must not lie in /tmp"),
        ("..", "must not go up a directory (..)"),
        ("/var/lib/carme/images/../../etc", "must not go up a directory (..)"),
        ("a;b", "not &#39;;&#39;"),
        ("x y", "not &#39; &#39;"),
        ("images/tf.sif", "must be an absolute path"),
        ("/var/lib/carme//images/tf.sif", "must be a normalised path"),
        ("/var/lib/carme/images/", "must be a normalised path"),
        ("/etc", "must not be the system directory /etc"),
        ("/", "must not be the system directory /"),
        ("/images/tf.sif$(id)", "not &#39;$&#39;"),
        ("/images/tf.sif@sha256:xyz", "not &#39;@&#39;"),
    ],
)
def test_image_form_refuses_paths_that_are_not_images(app: Flask, client: Any, image: str, says: str) -> None:
    log_in_as(app, client, "carol", admin=True)
    resp = post(client, "/admin/images", {**IMAGE_FORM, "image": image})
    page = resp.get_data(as_text=True)
    assert resp.status_code == 400
    assert "image: Image path or environment " in page, page  # the field, by the label the admin sees too
    assert says in page, page
    with app.app_context():
        assert db.session.query(ImageCatalog).filter_by(name="tf").count() == 0


@pytest.mark.parametrize(
    ("kind", "image"),
    [
        ("image", "/images/tf.sif"),
        ("container", "/var/lib/carme/images/carme-base-1.0" + DIGEST),
        ("environment", "/opt/carme/envs/jupyter"),
    ],
)
def test_image_form_stores_a_good_path(app: Flask, client: Any, kind: str, image: str) -> None:
    log_in_as(app, client, "carol", admin=True)
    assert post(client, "/admin/images", {**IMAGE_FORM, "kind": kind, "image": image}).status_code == 302
    with app.app_context():
        assert db.session.query(ImageCatalog).filter_by(name="tf").one().image == image


# --- issue 30: the users page lists sessions, GPU-hours and actions; stop with a note -------------------------


def test_users_page_lists_sessions_gpu_hours_and_actions(app: Flask, client: Any, fake_scheduler: Any) -> None:
    from webui.models import User
    from webui.models import utcnow

    from .conftest import add_session

    log_in_as(app, client, "bob")  # logged in once, no session
    with app.app_context():
        db.session.query(User).filter_by(username="bob").one().last_login_at = utcnow()
        db.session.commit()
    job_id = add_session(app, fake_scheduler, "alice")  # a session, never logged in here (no portal_user row)
    log_in_as(app, client, "carol", admin=True)
    html = client.get("/admin/users").get_data(as_text=True)
    alice = html.split('data-user="alice"')[1].split("</tr>")[0]
    assert f'data-job="{job_id}"' in alice and "jupyterlab" in alice and "running" in alice
    assert "1.5" in alice  # GPU-hours this month (FakeScheduler's accounting)
    assert 'name="note"' in alice and f"Stop job {job_id}" in alice
    assert "Reset TOTP" not in alice  # no account row yet: nothing to reset
    bob = html.split('data-user="bob"')[1].split("</tr>")[0]
    assert ">enrolled<" in bob and "not locked" in bob and "Reset TOTP" in bob and "Unlock" in bob
    assert "none" in bob  # no sessions


def test_admin_stops_a_session_with_a_note(app: Flask, client: Any, fake_scheduler: Any) -> None:
    from webui.models import PortalSession

    from .conftest import add_session

    job_id = add_session(app, fake_scheduler, "alice")
    log_in_as(app, client, "carol", admin=True)
    note = "Node maintenance at 14:00, please save your work"
    resp = post(client, f"/admin/sessions/{job_id}/stop", {"note": note, "next": "users"})
    assert resp.status_code == 302 and resp.headers["Location"].endswith("/admin/users")
    assert fake_scheduler.cancelled == [(job_id, "carme-portal")]
    with app.app_context():
        row = db.session.query(PortalSession).filter_by(job_id=job_id).one()
        assert (row.end_reason, row.stopped_by, row.stop_note) == ("admin", "carol", note)
        entry = db.session.query(AuditLog).filter_by(action="admin.session.stop").one()
        assert entry.actor == "carol" and entry.details["note"] == note
    assert escape_str(note) in client.get("/admin/audit").get_data(as_text=True)


@pytest.mark.parametrize("note", ["x" * 501, "a\x00b"])
def test_a_bad_note_is_refused_naming_the_field(app: Flask, client: Any, fake_scheduler: Any, note: str) -> None:
    from .conftest import add_session

    job_id = add_session(app, fake_scheduler, "alice")
    log_in_as(app, client, "carol", admin=True)
    resp = post(client, f"/admin/sessions/{job_id}/stop", {"note": note})
    assert resp.status_code == 400 and "Note: must" in resp.get_data(as_text=True)
    assert fake_scheduler.cancelled == []


def test_the_sessions_list_has_a_note_field_on_each_stop_form(app: Flask, client: Any, fake_scheduler: Any) -> None:
    from .conftest import add_session

    job_id = add_session(app, fake_scheduler, "alice")
    log_in_as(app, client, "carol", admin=True)
    html = client.get("/admin/").get_data(as_text=True)
    row = html.split(f'<tr data-job="{job_id}">')[1].split("</tr>")[0]
    assert "<label>Note to alice (optional) <input" in row and 'name="note"' in row


def test_cli_totp_reset_and_unlock_audit_who_ran_them(app: Flask, client: Any) -> None:
    from webui.models import User

    log_in_as(app, client, "bob")
    runner = app.test_cli_runner()
    done = runner.invoke(args=["totp-reset", "--actor", "root", "bob"])
    assert done.exit_code == 0, done.output
    assert "TOTP reset for bob; they enrol again at their next login" in done.output
    assert runner.invoke(args=["unlock", "bob"]).exit_code == 0  # no --actor: audited as "cli", as before
    bad = runner.invoke(args=["unlock", "--actor", "x; rm", "bob"])
    assert bad.exit_code == 2 and "--actor" in bad.output
    assert runner.invoke(args=["totp-reset", "nobody"]).exit_code == 1
    with app.app_context():
        assert not db.session.query(User).filter_by(username="bob").one().totp_confirmed
        rows = db.session.query(AuditLog).order_by(AuditLog.id).all()
        assert [(r.actor, r.action, r.target) for r in rows[-2:]] == [
            ("cli:root", "totp.reset", "bob"),
            ("cli", "user.unlock", "bob"),
        ]
