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
