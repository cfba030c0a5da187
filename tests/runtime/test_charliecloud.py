# SPDX-License-Identifier: GPL-3.0-or-later
"""Charliecloud (``ch-run`` 0.31) command lines and environment; ``test_charliecloud_real.py`` runs them."""

from __future__ import annotations

from pathlib import Path

import pytest

from carme_runtime.runtimes import CONTAINER_PATH
from carme_runtime.runtimes import AllowedBind
from carme_runtime.runtimes import Bind
from carme_runtime.runtimes import BindNotAllowed
from carme_runtime.runtimes import CharliecloudRuntime
from carme_runtime.runtimes import default_allow_list
from carme_runtime.runtimes import default_binds

APP = ["jupyter", "lab", "--ServerApp.sock=/tmp/carme-41-x/app.sock"]
SECRET = "s3cret-token-0123456789abcdef"


def image_with(tmp_path: Path, *mount_points: str) -> str:
    image = tmp_path / "img"
    (image / "etc").mkdir(parents=True)
    for mp in mount_points:
        (image / mp.lstrip("/")).mkdir(parents=True)
    return str(image)


def runtime(socket_dir: str = "/tmp/carme-41-x") -> CharliecloudRuntime:
    allow = default_allow_list("/home/alice", "/scratch", ["/data/imagenet"])
    allow.append(AllowedBind(socket_dir))
    return CharliecloudRuntime(allow, home="/home/alice", user="alice")


def test_ch_run_line_binds_home_scratch_dataset_and_skips_shared_tmp(tmp_path: Path) -> None:
    image = image_with(tmp_path, "/scratch/41", "/data/imagenet")
    binds = [
        *default_binds("/home/alice", "/scratch/41", ["/data/imagenet"]),
        Bind("/tmp/carme-41-x", "/tmp/carme-41-x"),
    ]
    argv = runtime().wrap(APP, image=image, binds=binds, gpus=1, env={}, workdir="/home/alice/project")
    assert argv == [
        "ch-run",
        "--home",
        "--bind=/scratch/41:/scratch/41",
        "--bind=/data/imagenet:/data/imagenet",
        "--cd=/home/alice/project",
        image,
        "--",
        *APP,
    ]


def test_home_outside_slash_home_is_translated() -> None:
    rt = CharliecloudRuntime([AllowedBind("/u/alice")], home="/u/alice", user="alice")
    argv = rt.wrap(
        ["id"], image="/srv/img.sqfs", binds=[Bind("/u/alice", "/u/alice")], gpus=0, env={}, workdir="/u/alice/w"
    )
    assert argv == ["ch-run", "--home", "--cd=/home/alice/w", "/srv/img.sqfs", "--", "id"]


def test_job_scratch_goes_to_the_images_scratch_mount_point(tmp_path: Path) -> None:
    image = image_with(tmp_path, "/scratch")
    argv = runtime().wrap(APP, image=image, binds=[Bind("/scratch/41", "/scratch/41")], gpus=0, env={})
    assert argv[:2] == ["ch-run", "--bind=/scratch/41:/scratch"]


def test_missing_mount_point_in_directory_image_is_refused_with_the_fix(tmp_path: Path) -> None:
    image = image_with(tmp_path, "/data")
    binds = [Bind("/data/imagenet", "/data/imagenet", readonly=True), Bind("/scratch/41", "/scratch/41")]
    with pytest.raises(BindNotAllowed, match=r"no mount point for '/scratch/41'.*image definition"):
        runtime().wrap(APP, image=image, binds=binds, gpus=0, env={})


@pytest.mark.parametrize(
    "bind", [Bind("/etc", "/etc"), Bind("/home/bob", "/home/bob"), Bind("/tmp/other", "/tmp/other")]
)
def test_binds_outside_allow_list_rejected(bind: Bind, tmp_path: Path) -> None:
    with pytest.raises(BindNotAllowed):
        runtime().wrap(APP, image=image_with(tmp_path), binds=[bind], gpus=0, env={})


@pytest.mark.parametrize("image", ["", "relative/img", "-w", "/img\n--write"])
def test_bad_image(image: str) -> None:
    with pytest.raises(ValueError, match="bad image"):
        runtime().wrap(APP, image=image, binds=[], gpus=0, env={})


def test_bad_user() -> None:
    rt = CharliecloudRuntime([], home="/home/x", user="../root")
    with pytest.raises(ValueError, match="bad user"):
        rt.wrap(APP, image="/i", binds=[], gpus=0, env={})


def test_secret_travels_in_the_environment_never_in_argv(tmp_path: Path) -> None:
    rt = runtime()
    app_env = {"JUPYTER_TOKEN": SECRET}
    argv = rt.wrap(APP, image=image_with(tmp_path), binds=[], gpus=1, env=app_env)
    assert not any(SECRET in a for a in argv)
    base = {
        "PATH": "/opt/venv/bin:/usr/bin",
        "VIRTUAL_ENV": "/opt/venv",
        "CUDA_VISIBLE_DEVICES": "1",
        "TMPDIR": "/var/tmp/j",
    }
    env = rt.environment(app_env, base)
    assert env["JUPYTER_TOKEN"] == SECRET
    assert env["CUDA_VISIBLE_DEVICES"] == "1"  # only the job's GPUs, inherited by ch-run's child
    assert env["PATH"] == CONTAINER_PATH
    assert (env["HOME"], env["USER"], env["TMPDIR"]) == ("/home/alice", "alice", "/tmp")
    assert "VIRTUAL_ENV" not in env


# -- ch-run newer than 0.31 (Debian 13's 0.38): --home implies --write-fake there, so the home's parent is bound --
def runtime_038(home: str = "/home/alice") -> CharliecloudRuntime:
    allow = default_allow_list(home, "/scratch", ["/srv/datasets/demo"])
    return CharliecloudRuntime(allow, home=home, user="alice", version="0.38")


def test_ch_run_038_binds_the_home_explicitly_and_keeps_its_path(tmp_path: Path) -> None:
    image = image_with(tmp_path, "/home", "/scratch/41", "/srv/datasets/demo")
    binds = default_binds("/home/alice", "/scratch/41", ["/srv/datasets/demo"])
    argv = runtime_038().wrap(APP, image=image, binds=binds, gpus=0, env={}, workdir="/home/alice/project")
    assert argv == [
        "ch-run",
        "--bind=/home:/home",
        "--set-env=HOME=/home/alice",
        "--bind=/scratch/41:/scratch/41",
        "--bind=/srv/datasets/demo:/srv/datasets/demo",
        "--cd=/home/alice/project",
        image,
        "--",
        *APP,
    ]
    env = runtime_038().environment({}, {"HOME": "/home/alice"})
    assert env["HOME"] == "/home/alice"


def test_ch_run_038_home_elsewhere_keeps_its_path_and_needs_its_parent(tmp_path: Path) -> None:
    argv = runtime_038("/u/alice").wrap(
        ["id"], image="/srv/img.sqfs", binds=[Bind("/u/alice", "/u/alice")], gpus=0, env={}, workdir="/u/alice/w"
    )
    assert argv == ["ch-run", "--bind=/u:/u", "--set-env=HOME=/u/alice", "--cd=/u/alice/w", "/srv/img.sqfs", "--", "id"]
    image = image_with(tmp_path, "/scratch")  # no /u in this directory image
    with pytest.raises(BindNotAllowed, match="no directory /u"):
        runtime_038("/u/alice").wrap(["id"], image=image, binds=[Bind("/u/alice", "/u/alice")], gpus=0, env={})


@pytest.mark.parametrize(
    ("version", "home_option"),
    [("0.31", True), ("0.31~pre+g1a2b", True), ("0.30", True), ("0.38", False), ("0.38-1", False), ("1.0", False)],
)
def test_the_version_picks_the_home_mode(version: str, home_option: bool) -> None:
    assert CharliecloudRuntime([], home="/home/a", user="a", version=version).home_option is home_option


def test_a_bad_version_is_refused() -> None:
    with pytest.raises(ValueError, match="bad version"):
        CharliecloudRuntime([], home="/home/a", user="a", version="latest")


def test_runtime_json_names_the_version_the_launcher_uses() -> None:
    from carme_runtime.config import ConfigError
    from carme_runtime.config import RuntimeConfig
    from carme_runtime.launch_plan import make_runtime

    default = make_runtime("charliecloud", "/srv/i.sqfs", RuntimeConfig.from_mapping({}), "/home/a", user="a")
    newer = RuntimeConfig.from_mapping({"charliecloud_version": "0.38"})
    assert isinstance(default, CharliecloudRuntime) and default.home_option
    rt = make_runtime("charliecloud", "/srv/i.sqfs", newer, "/home/a", user="a")
    assert isinstance(rt, CharliecloudRuntime) and not rt.home_option
    with pytest.raises(ConfigError, match="charliecloud_version"):
        RuntimeConfig.from_mapping({"charliecloud_version": "new"})
