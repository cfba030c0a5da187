# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

from pathlib import Path

import pytest

from carme_runtime.apps import MIN_SECRET_LENGTH
from carme_runtime.apps import AppRenderError
from carme_runtime.apps import AppSpecError
from carme_runtime.apps import app_from_dict
from carme_runtime.apps import auth_off_allowed
from carme_runtime.apps import load_apps
from carme_runtime.front import app_secret

SESSION_SECRET = "s3cr3t-" + "x" * 40
#: what carme-launch renders the apps with (never the session secret itself)
SECRET = app_secret(SESSION_SECRET, 77)


SOCK = "/tmp/carme-77-abc/app.sock"


def render(name: str, secret: str = SECRET):
    app = load_apps([])[name]
    return app.render(host="10.0.0.5", port=41234, secret=secret, job_id=77, workdir="/home/alice", socket=SOCK)


def test_builtin_apps_load() -> None:
    apps = load_apps([])
    assert set(apps) == {"jupyterlab", "code-server", "tensorboard"}
    assert apps["jupyterlab"].secret_mode == "token"
    assert apps["code-server"].secret_mode == "proxy"  # the session front is its gate: no password page
    assert apps["tensorboard"].secret_mode == "proxy"


def test_jupyterlab_argv_and_token() -> None:
    r = render("jupyterlab")
    assert r.argv == [
        "jupyter",
        "lab",
        "--no-browser",
        f"--ServerApp.sock={SOCK}",
        "--ServerApp.sock_mode=0600",
        "--ServerApp.base_url=/proxy/77/",
        "--ServerApp.allow_remote_access=True",
        "--ServerApp.root_dir=/home/alice",
        "--LabApp.default_url=/lab?reset",  # Connect opens the launcher, not the last saved layout
    ]
    assert r.env == {"JUPYTER_TOKEN": SECRET}
    assert not any(SECRET in a for a in r.argv)  # argv is world-readable in /proc
    assert r.readiness_path == "/proxy/77/api/status"
    assert not any("41234" in a or "10.0.0.5" in a for a in r.argv)  # no TCP port at all
    assert load_apps([])["jupyterlab"].proxy_headers(SECRET) == {"Authorization": f"token {SECRET}"}


@pytest.mark.parametrize("name", ["jupyterlab", "code-server", "tensorboard"])
def test_rendered_with_the_app_secret_the_session_secret_appears_nowhere(name: str) -> None:
    r = render(name)
    rendered = [*r.argv, *r.env.values(), r.readiness_path]
    assert not any(SESSION_SECRET in v for v in rendered)
    if load_apps([])[name].secret_mode != "proxy":
        assert SECRET in r.env.values()
    assert len(SECRET) >= MIN_SECRET_LENGTH


def test_code_server_runs_without_its_own_auth_behind_the_front_only() -> None:
    r = render("code-server")
    assert r.argv[:7] == ["code-server", "--socket", SOCK, "--socket-mode", "600", "--auth", "none"]
    assert not any("41234" in a or "10.0.0.5" in a for a in r.argv)  # no TCP port at all
    assert r.env == {}  # no password anywhere: nothing to show, nothing to type
    spec_ = load_apps([])["code-server"]
    assert (spec_.secret_mode, spec_.isolation) == ("proxy", "socket")
    assert spec_.proxy_headers(SECRET) == {}
    # it serves at / (the front strips /proxy/<job>/), so readiness is its own path
    assert spec_.strip_prefix and r.readiness_path == "/healthz"
    assert not load_apps([])["jupyterlab"].strip_prefix


@pytest.mark.parametrize("isolation", ["socket", "netns"])
def test_proxy_app_reachable_only_through_the_front_may_turn_auth_off(isolation: str) -> None:
    argv = ["x", "--socket={socket}", "--auth", "none"] if isolation == "socket" else ["x", "--auth=none", "{port}"]
    app = app_from_dict(spec(argv=argv, env={}, secret_mode="proxy", isolation=isolation))
    r = app.render(host="127.0.0.1", port=1, secret=SECRET, job_id=1, workdir="/w", socket="/run/s/app.sock")
    assert "none" in r.argv or "--auth=none" in r.argv
    assert auth_off_allowed("proxy", isolation)


@pytest.mark.parametrize(
    ("mode", "isolation"),
    [("token", "socket"), ("token", "netns"), ("token", "none"), ("password", "socket"), ("password", "none")],
)
def test_auth_off_stays_refused_for_token_and_password_apps(mode: str, isolation: str) -> None:
    env = {"PASSWORD": "{secret}"} if mode == "password" else {"MYAPP_TOKEN": "{secret}"}
    app = app_from_dict(
        spec(argv=["x", "--socket={socket}", "--auth", "none"], env=env, secret_mode=mode, isolation=isolation)
    )
    with pytest.raises(AppRenderError, match="disable authentication"):
        app.render(host="h", port=1, secret=SECRET, job_id=1, workdir="/w", socket="/run/s/app.sock")
    assert not auth_off_allowed(mode, isolation)


def test_proxy_app_with_isolation_none_is_refused_at_load() -> None:
    with pytest.raises(AppSpecError) as info:
        app_from_dict(spec(argv=["x", "--auth", "none", "{port}"], env={}, secret_mode="proxy", isolation="none"))
    assert info.value.field == "isolation"
    assert not auth_off_allowed("proxy", "none")


def test_tensorboard_binds_and_has_no_header() -> None:
    r = render("tensorboard")
    assert "--host=10.0.0.5" in r.argv
    assert "--path_prefix=/proxy/77" in r.argv
    assert load_apps([])["tensorboard"].proxy_headers(SECRET) == {}


@pytest.mark.parametrize("name", ["jupyterlab", "code-server", "tensorboard"])
@pytest.mark.parametrize("secret", ["", "short"])
def test_no_empty_or_short_secret_ever(name: str, secret: str) -> None:
    with pytest.raises(AppRenderError):
        render(name, secret)


def spec(**over: object) -> dict[str, object]:
    base: dict[str, object] = {
        "name": "myapp",
        "title": "My app",
        "argv": ["myapp", "--port={port}"],
        "env": {"MYAPP_TOKEN": "{secret}"},
        "secret_mode": "token",
        "readiness_path": "/",
    }
    base.update(over)
    return base


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"name": "My App"}, "name"),
        ({"argv": []}, "argv"),
        ({"argv": ["{host}"]}, "argv"),
        ({"argv": ["x", "--p={nope}"]}, "argv[1]"),
        ({"argv": ["x", "--p={port!r}"]}, "argv[1]"),
        ({"env": {"BAD-NAME": "x"}}, "env.BAD-NAME"),
        ({"env": {}}, "secret_mode"),
        ({"secret_mode": "none"}, "secret_mode"),
        ({"secret_mode": "password", "env": {}, "argv": ["x", "--pw={secret}"]}, "env"),
        ({"secret_mode": "password", "argv": ["x", "--pw={secret}"]}, "argv"),
        ({"readiness_path": "health"}, "readiness_path"),
        ({"proxy_base": "/proxy/"}, "proxy_base"),
        ({"secret_header": {"name": "Authorization"}}, "secret_header"),
        ({"secret_header": {"name": "Authorization", "value": "token"}}, "secret_header.value"),
        ({"colour": "blue"}, "colour"),
        ({"strip_prefix": "yes"}, "strip_prefix"),
    ],
)
def test_invalid_spec_names_field(over: dict[str, object], field: str) -> None:
    with pytest.raises(AppSpecError) as info:
        app_from_dict(spec(**over), source="site.toml")
    assert info.value.field == field
    assert str(info.value).startswith("site.toml: ")


def test_render_refuses_auth_off_arguments() -> None:
    app = app_from_dict(spec(argv=["x", "--auth", "none", "--port={port}"]))
    with pytest.raises(AppRenderError, match="disable authentication"):
        app.render(host="h", port=1, secret=SECRET, job_id=1, workdir="/w")
    app = app_from_dict(spec(argv=["x", "--ServerApp.token=", "--port={port}"]))
    with pytest.raises(AppRenderError, match="disable authentication"):
        app.render(host="h", port=1, secret=SECRET, job_id=1, workdir="/w")


def test_site_dir_adds_and_overrides(tmp_path: Path) -> None:
    (tmp_path / "myapp.toml").write_text(
        'name = "myapp"\ntitle = "Mine"\nargv = ["myapp", "{port}"]\nsecret_mode = "token"\n'
        '[env]\nMYAPP_TOKEN = "{secret}"\n'
    )
    (tmp_path / "tensorboard.toml").write_text(
        'name = "tensorboard"\ntitle = "TB site"\nargv = ["/opt/tb/bin/tensorboard", "--port={port}"]\n'
        'secret_mode = "proxy"\n'
    )
    apps = load_apps([tmp_path, tmp_path / "missing"])
    assert apps["myapp"].title == "Mine"
    assert apps["tensorboard"].title == "TB site"
    assert apps["tensorboard"].source == str(tmp_path / "tensorboard.toml")


def test_invalid_site_file_names_file_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "broken.toml"
    bad.write_text('name = "broken"\ntitle = "B"\nargv = "not a list"\n')
    with pytest.raises(AppSpecError) as info:
        load_apps([tmp_path])
    assert info.value.source == str(bad)
    assert info.value.field == "argv"
    (tmp_path / "broken.toml").write_text("name = [")
    with pytest.raises(AppSpecError) as info:
        load_apps([tmp_path])
    assert info.value.field == "<toml>"


def test_name_must_match_file(tmp_path: Path) -> None:
    (tmp_path / "other.toml").write_text('name = "myapp"\ntitle = "M"\nargv = ["m"]\nsecret_mode = "proxy"\n')
    with pytest.raises(AppSpecError) as info:
        load_apps([tmp_path])
    assert info.value.field == "name"


@pytest.mark.parametrize("name", ["jupyterlab", "code-server"])
def test_socket_apps_refuse_to_render_without_their_socket(name: str) -> None:
    """Without a socket path the app would fall back to a TCP port that every user on the node can reach."""
    app = load_apps([])[name]
    assert app.isolation == "socket"
    for sock in ("", "relative/app.sock"):
        with pytest.raises(AppRenderError, match="Unix socket"):
            app.render(host="10.0.0.5", port=1, secret=SECRET, job_id=77, workdir="/home/alice", socket=sock)


def test_a_socket_app_must_say_where_it_listens() -> None:
    data = {"name": "x", "argv": ["x", "--port={port}"], "env": {"T": "{secret}"}, "isolation": "socket"}
    with pytest.raises(AppSpecError) as err:
        app_from_dict(data, source="site.toml")
    assert err.value.field == "isolation" and "{socket}" in str(err.value)
    ok = app_from_dict({**data, "argv": ["x", "--unix={socket}"]}, source="site.toml")
    assert ok.isolation == "socket"
