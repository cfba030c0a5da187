# SPDX-License-Identifier: GPL-3.0-or-later
"""Runtime command lines (Apptainer's also run for real: tests/runtime/test_apptainer_real.py)."""

from __future__ import annotations

import pytest

from carme_runtime.runtimes import AllowedBind
from carme_runtime.runtimes import ApptainerRuntime
from carme_runtime.runtimes import Bind
from carme_runtime.runtimes import BindNotAllowed
from carme_runtime.runtimes import NoneRuntime
from carme_runtime.runtimes import default_allow_list
from carme_runtime.runtimes import default_binds

ALLOW = default_allow_list("/home/alice", "/scratch", ["/data/imagenet"])
APP = ["jupyter", "lab", "--ServerApp.port=41234"]


def test_apptainer_exec_line() -> None:
    rt = ApptainerRuntime(ALLOW)
    binds = default_binds("/home/alice", "/scratch/41", ["/data/imagenet"])
    argv = rt.wrap(APP, image="/opt/images/pytorch.sif", binds=binds, gpus=1, env={})
    assert argv == [
        "apptainer",
        "exec",
        "--nv",
        "--contain",
        "--cleanenv",
        "--no-eval",
        "--bind",
        "/home/alice:/home/alice,/scratch/41:/scratch/41,/data/imagenet:/data/imagenet:ro",
        "/opt/images/pytorch.sif",
        *APP,
    ]


def test_apptainer_without_gpus_has_no_nv() -> None:
    argv = ApptainerRuntime(ALLOW).wrap(APP, image="/i.sif", binds=[], gpus=0, env={})
    assert argv[:5] == ["apptainer", "exec", "--contain", "--cleanenv", "--no-eval"]
    assert "--bind" not in argv


@pytest.mark.parametrize(
    "bind",
    [
        Bind("/etc", "/etc"),
        Bind("/home/bob", "/home/bob"),
        Bind("/home/alice2", "/x"),  # prefix match is per path component
        Bind("/home/alice/../bob", "/b"),
        Bind("relative", "/r"),
        Bind("/home/alice/a,b", "/x"),
        Bind("/home/alice/a:b", "/x"),
        Bind("/home/alice", "/x:rw"),
    ],
)
def test_binds_outside_allow_list_rejected(bind: Bind) -> None:
    with pytest.raises(BindNotAllowed):
        ApptainerRuntime(ALLOW).wrap(APP, image="/i.sif", binds=[bind], gpus=0, env={})


def test_dataset_bind_forced_read_only() -> None:
    argv = ApptainerRuntime(ALLOW).wrap(
        APP, image="/i.sif", binds=[Bind("/data/imagenet/train", "/train")], gpus=0, env={}
    )
    assert "/data/imagenet/train:/train:ro" in argv


def test_apptainer_bad_image() -> None:
    with pytest.raises(ValueError, match="bad image"):
        ApptainerRuntime(ALLOW).wrap(APP, image="--writable", binds=[], gpus=0, env={})


def test_apptainer_environment_uses_apptainerenv_prefix() -> None:
    env = ApptainerRuntime(ALLOW).environment(
        {"JUPYTER_TOKEN": "t0k"}, {"PATH": "/usr/bin", "CUDA_VISIBLE_DEVICES": "0"}
    )
    assert env["APPTAINERENV_JUPYTER_TOKEN"] == "t0k"
    assert env["APPTAINERENV_CUDA_VISIBLE_DEVICES"] == "0"
    assert "JUPYTER_TOKEN" not in env


def test_none_runtime_resolves_in_prefix_without_shell() -> None:
    rt = NoneRuntime("/opt/envs/torch")
    argv = rt.wrap(APP, image="", binds=[Bind("/etc", "/etc")], gpus=2, env={})
    assert argv == ["/opt/envs/torch/bin/jupyter", "lab", "--ServerApp.port=41234"]
    assert rt.wrap(["/usr/bin/env"], image="", binds=[], gpus=0, env={}) == ["/usr/bin/env"]
    env = rt.environment({"JUPYTER_TOKEN": "t"}, {"PATH": "/usr/bin:/bin"})
    assert env["PATH"] == "/opt/envs/torch/bin:/usr/bin:/bin"
    assert env["VIRTUAL_ENV"] == "/opt/envs/torch"
    assert env["JUPYTER_TOKEN"] == "t"


def test_none_runtime_needs_absolute_prefix() -> None:
    with pytest.raises(ValueError, match="absolute"):
        NoneRuntime("envs/torch")


def test_allowed_bind_prefix() -> None:
    rt = ApptainerRuntime([AllowedBind("/srv/shared/")])
    assert rt.wrap(["x"], image="/i.sif", binds=[Bind("/srv/shared/a", "/a")], gpus=0, env={})[6] == "/srv/shared/a:/a"
