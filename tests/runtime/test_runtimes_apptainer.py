# SPDX-License-Identifier: GPL-3.0-or-later
"""Golden command lines of sessions in Apptainer (``CARME_RUNTIME=apptainer``), as :func:`plan_launch` builds them
for the built-in apps, and the image check before a session. The same command lines run for real in a Debian 13
node in tests/runtime/test_apptainer_real.py."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path

import pytest

from carme_runtime import launch
from carme_runtime import launch_plan
from carme_runtime.apps import load_apps
from carme_runtime.config import RuntimeConfig
from carme_runtime.exit_codes import ExitCode
from carme_runtime.front import app_secret

SECRET = "s" * 40
JOB = 77


def job_env(tmp_path: Path, **over: str) -> dict[str, str]:
    env = {
        "SLURM_JOB_ID": str(JOB),
        "CARME_APP": "jupyterlab",
        "CARME_RUNTIME": "apptainer",
        "CARME_IMAGE": "/var/lib/carme/images/carme-base-1.0.sif",
        "CARME_WORKDIR": str(tmp_path / "home" / "project"),
        "CARME_SESSION_SECRET": SECRET,
        "HOME": str(tmp_path / "home"),
        "PATH": "/usr/bin:/bin",
    }
    env.update(over)
    return env


def plan(tmp_path: Path, **over: str) -> launch_plan.LaunchPlan:
    config = RuntimeConfig.from_mapping(
        {"scratch_root": "/scratch", "datasets": {"imagenet": "/data/imagenet"}, "bind_address": "127.0.0.1"}
    )
    return launch_plan.plan_launch(
        job_env(tmp_path, **over),
        load_apps([]),
        config,
        home=str(tmp_path / "home"),
        host="127.0.0.1",
        port=41234,
        scratch="/scratch/77",
        socket_dir="/tmp/carme-77-abc",
    )


def test_jupyterlab_without_gpus_golden(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    got = plan(tmp_path)
    assert got.argv == [
        "apptainer",
        "exec",
        "--contain",
        "--cleanenv",
        "--no-eval",
        "--pwd",
        f"{home}/project",
        "--bind",
        f"{home}:{home},/scratch/77:/scratch/77,/data/imagenet:/data/imagenet:ro,/tmp/carme-77-abc:/tmp/carme-77-abc",
        "/var/lib/carme/images/carme-base-1.0.sif",
        "jupyter",
        "lab",
        "--no-browser",
        "--ServerApp.sock=/tmp/carme-77-abc/app.sock",
        "--ServerApp.sock_mode=0600",
        "--ServerApp.base_url=/proxy/77/",
        "--ServerApp.allow_remote_access=True",
        f"--ServerApp.root_dir={home}/project",
        "--LabApp.default_url=/lab?reset",
    ]
    key = app_secret(SECRET, JOB)
    assert got.env["APPTAINERENV_JUPYTER_TOKEN"] == key  # the app's token: in the environment, never in argv
    assert not any(key in a or SECRET in a for a in got.argv)
    assert not any(SECRET in v for v in got.env.values())
    assert "APPTAINERENV_CUDA_VISIBLE_DEVICES" not in got.env


def test_gpus_add_nv_and_pass_the_devices(tmp_path: Path) -> None:
    got = plan(tmp_path, CUDA_VISIBLE_DEVICES="0,1")
    assert got.argv[:6] == ["apptainer", "exec", "--nv", "--contain", "--cleanenv", "--no-eval"]
    assert got.env["APPTAINERENV_CUDA_VISIBLE_DEVICES"] == "0,1"


def test_nothing_privileged_on_the_command_line(tmp_path: Path) -> None:
    argv = plan(tmp_path, CUDA_VISIBLE_DEVICES="0").argv
    options = argv[: argv.index("/var/lib/carme/images/carme-base-1.0.sif")]
    for flag in ("--fakeroot", "--writable", "--writable-tmpfs", "--add-caps", "--allow-setuid", "--keep-privs"):
        assert flag not in options
    assert "--home" not in options  # the home comes as a bind of the allow-list, like every other path


def test_a_relative_working_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(launch_plan.LaunchError) as err:
        plan(tmp_path, CARME_WORKDIR="project")
    assert err.value.code == ExitCode.CONFIG


def test_an_altered_sif_is_refused_with_its_reason_published(tmp_path: Path) -> None:
    sif = tmp_path / "carme-base-1.0.sif"
    sif.write_bytes(b"SIF built")
    digest = "sha256:" + hashlib.sha256(b"SIF built").hexdigest()
    published: list[list[str]] = []

    def runner(
        argv: Sequence[str], *, input_text: str | None = None, env: Mapping[str, str] | None = None
    ) -> tuple[int, str, str]:
        published.append(list(argv))
        return 0, "", ""

    apps = load_apps([])
    config = RuntimeConfig.from_mapping({"runtime": "apptainer"})
    env = job_env(tmp_path, CARME_IMAGE=f"{sif}@{digest}")
    checked = launch.check_image(apps["jupyterlab"], env, config, "10.0.0.5", JOB, runner)
    assert checked["CARME_IMAGE"] == str(sif) and not published
    sif.write_bytes(b"SIF built, then altered")
    with pytest.raises(launch_plan.LaunchError) as err:
        launch.check_image(apps["jupyterlab"], env, config, "10.0.0.5", JOB, runner)
    assert err.value.code == ExitCode.IMAGE_INVALID
    assert f"image {sif} is corrupt or was replaced" in str(err.value)
    assert "state=failed" in published[0][-1] and "reason=image" in published[0][-1]
