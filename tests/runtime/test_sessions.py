# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

import dataclasses

import pytest

from carme_runtime.apps import load_apps
from carme_runtime.sessions import JOB_SCRIPT
from carme_runtime.sessions import SessionLimits
from carme_runtime.sessions import SessionRequest
from carme_runtime.sessions import ValidationError
from carme_runtime.sessions import build_job_environment
from carme_runtime.sessions import build_rest_payload
from carme_runtime.sessions import build_sbatch_argv
from tests.runtime.sbatch_submit import parse_sbatch_parsable
from tests.runtime.sbatch_submit import submit_with_sbatch

SECRET = "s3cr3t-" + "x" * 40
APPS = load_apps([])
GOOD = SessionRequest(
    user="alice",
    app="jupyterlab",
    image="/opt/carme/images/pytorch.sif",
    gpus=1,
    cpus=4,
    mem_mb=16000,
    time_minutes=120,
    partition="gpu",
    qos="carme-gpuusers",
    account="research",
    workdir="/home/alice/project",
)


def test_good_request_validates() -> None:
    GOOD.validate(SessionLimits())
    assert GOOD.errors(SessionLimits()) == []


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("user", ""),
        ("user", "alice;rm -rf"),
        ("user", "al\nice"),
        ("user", "-alice"),
        ("app", "jupyter lab"),
        ("image", ""),
        ("image", "/opt/../etc/shadow"),
        ("image", "--bind=/:/host"),
        ("image", "img\n.sif"),
        ("gpus", -1),
        ("gpus", 9),
        ("cpus", 0),
        ("cpus", 65),
        ("mem_mb", 0),
        ("mem_mb", 10**9),
        ("time_minutes", 0),
        ("time_minutes", 7 * 24 * 60 + 1),
        ("partition", "gpu,debug"),
        ("nodes", 0),
        ("nodes", 2),  # the default limit is one node
        ("qos", "normal\n#SBATCH --uid=0"),
        ("account", "x" * 65),
        ("workdir", ""),
        ("workdir", "relative/dir"),
        ("workdir", "/home/alice/../bob"),
        ("workdir", "/home/alice/%u"),
        ("workdir", "/home/alice\n"),
    ],
)
def test_each_bad_field_is_named(field: str, value: object) -> None:
    bad = dataclasses.replace(GOOD, **{field: value})
    with pytest.raises(ValidationError) as info:
        bad.validate(SessionLimits())
    assert info.value.field == field


def test_bool_is_not_an_int() -> None:
    with pytest.raises(ValidationError) as info:
        dataclasses.replace(GOOD, gpus=True).validate()
    assert info.value.field == "gpus"


def test_limits_restrict_partition_app_and_image() -> None:
    limits = SessionLimits(partitions=("gpu",), apps=("jupyterlab",), image_prefixes=("/opt/carme/images",))
    GOOD.validate(limits)
    for field, value in [("partition", "debug"), ("app", "tensorboard"), ("image", "/tmp/evil.sif")]:
        with pytest.raises(ValidationError) as info:
            dataclasses.replace(GOOD, **{field: value}).validate(limits)
        assert info.value.field == field


def test_errors_lists_every_bad_field() -> None:
    bad = dataclasses.replace(GOOD, user="", gpus=99, workdir="x")
    assert {e.field for e in bad.errors(SessionLimits())} == {"user", "gpus", "workdir"}


def test_from_mapping_converts_and_rejects() -> None:
    req = SessionRequest.from_mapping(
        {"user": "alice", "app": "jupyterlab", "image": "/i.sif", "gpus": "2", "workdir": "/home/alice"}
    )
    assert req.gpus == 2
    with pytest.raises(ValidationError) as info:
        SessionRequest.from_mapping({"user": "a", "app": "b", "image": "c", "gpus": "2; rm"})
    assert info.value.field == "gpus"
    with pytest.raises(ValidationError) as info:
        SessionRequest.from_mapping({"user": "a", "app": "b", "image": "c", "uid": "0"})
    assert info.value.field == "uid"
    with pytest.raises(ValidationError) as info:
        SessionRequest.from_mapping({"user": "a", "app": "b"})
    assert info.value.field == "image"


def test_sbatch_argv() -> None:
    argv = build_sbatch_argv(GOOD, APPS["jupyterlab"], "apptainer")
    assert argv == [
        "sbatch",
        "--parsable",
        "--job-name=carme-jupyterlab",
        "--partition=gpu",
        "--qos=carme-gpuusers",
        "--account=research",
        "--time=120",
        "--nodes=1",
        "--ntasks=1",
        "--cpus-per-task=4",
        "--mem=16000M",
        "--gres=gpu:1",
        "--chdir=/home/alice/project",
        "--output=/home/alice/project/carme-jupyterlab-%j.out",
        "--comment=carme:v1;app=jupyterlab;state=submitted",
        "--no-requeue",
        "--export=PATH,CARME_APP,CARME_IMAGE,CARME_RUNTIME,CARME_WORKDIR,CARME_SESSION_SECRET",
    ]
    assert not any(SECRET in a for a in argv)


def test_sbatch_argv_omits_empty_options_and_gres() -> None:
    req = dataclasses.replace(GOOD, gpus=0, partition="", qos="", account="")
    argv = build_sbatch_argv(req, APPS["jupyterlab"], "none")
    assert not any(a.startswith(("--partition", "--qos", "--account", "--gres")) for a in argv)


def test_sbatch_argv_for_two_nodes_asks_one_task_per_node() -> None:
    """A multi-node session: N nodes and N tasks (one per node, each with the CPUs, memory and GPUs of a node);
    the script stays the constant one, so the app starts once, on the first node."""
    req = dataclasses.replace(GOOD, nodes=2)
    req.validate(SessionLimits(max_nodes=2))
    argv = build_sbatch_argv(req, APPS["jupyterlab"], "apptainer")
    assert "--nodes=2" in argv and "--ntasks=2" in argv
    assert "--cpus-per-task=4" in argv and "--mem=16000M" in argv and "--gres=gpu:1" in argv
    assert not any(a.startswith(("--nodes=1", "--ntasks=1")) for a in argv)


def test_nodes_over_the_limit_names_the_field() -> None:
    req = dataclasses.replace(GOOD, nodes=3)
    with pytest.raises(ValidationError) as info:
        req.validate(SessionLimits(max_nodes=2))
    assert info.value.field == "nodes"
    assert "between 1 and 2" in info.value.message


def test_job_script_is_constant_and_user_values_go_to_env() -> None:
    env = build_job_environment(GOOD, APPS["jupyterlab"], "apptainer", SECRET)
    assert JOB_SCRIPT == "#!/bin/bash\nexec carme-launch\n"
    assert env["CARME_APP"] == "jupyterlab"
    assert env["CARME_IMAGE"] == GOOD.image
    assert env["CARME_SESSION_SECRET"] == SECRET
    assert env["CARME_WORKDIR"] == GOOD.workdir


def test_rest_payload_v0038() -> None:
    payload = build_rest_payload(GOOD, APPS["jupyterlab"], "apptainer", SECRET)
    assert payload["script"] == JOB_SCRIPT
    job = payload["job"]
    assert isinstance(job, dict)
    assert job["name"] == "carme-jupyterlab"
    assert job["account"] == "research"
    assert job["partition"] == "gpu"
    assert job["qos"] == "carme-gpuusers"
    assert job["time_limit"] == 120
    assert job["nodes"] == 1  # v0.0.38: a count; slurmrestd 22.05 ignores a [min, max] list (1 node)
    assert job["tasks"] == 1
    assert job["cpus_per_task"] == 4
    assert job["memory_per_node"] == 16000
    assert job["gres"] == "gpu:1"
    assert "tres_per_node" not in job  # v0.0.38 rejects it ("Unknown key")
    assert job["current_working_directory"] == "/home/alice/project"
    assert job["standard_output"] == "/home/alice/project/carme-jupyterlab-%j.out"
    assert job["environment"]["CARME_SESSION_SECRET"] == SECRET
    assert SECRET not in str(job["comment"])
    assert job["requeue"] is False  # a session on a lost node is not started again behind the user's back


def test_rest_payload_for_two_nodes() -> None:
    payload = build_rest_payload(dataclasses.replace(GOOD, nodes=2), APPS["jupyterlab"], "apptainer", SECRET)
    job = payload["job"]
    assert isinstance(job, dict)
    assert job["nodes"] == 2
    assert job["tasks"] == 2
    assert payload["script"] == JOB_SCRIPT


def test_short_secret_and_bad_runtime_refused() -> None:
    with pytest.raises(ValidationError) as info:
        build_rest_payload(GOOD, APPS["jupyterlab"], "apptainer", "short")
    assert info.value.field == "secret"
    with pytest.raises(ValidationError) as info:
        build_sbatch_argv(GOOD, APPS["jupyterlab"], "docker")
    assert info.value.field == "runtime"
    with pytest.raises(ValidationError) as info:
        build_sbatch_argv(GOOD, APPS["tensorboard"], "apptainer")
    assert info.value.field == "app"


def test_submit_with_sbatch_passes_script_on_stdin_and_secret_in_env(fake_runner) -> None:
    fake_runner.answers["sbatch"] = (0, "1234;feas\n", "")
    job_id = submit_with_sbatch(GOOD, APPS["jupyterlab"], "apptainer", SECRET, fake_runner)
    assert job_id == 1234
    assert fake_runner.inputs == [JOB_SCRIPT]
    assert fake_runner.envs[0]["CARME_SESSION_SECRET"] == SECRET
    assert not any(SECRET in a for a in fake_runner.calls[0])


def test_parse_sbatch_parsable() -> None:
    assert parse_sbatch_parsable("77\n") == 77
    with pytest.raises(ValueError, match="unexpected"):
        parse_sbatch_parsable("sbatch: error: Batch job submission failed")
