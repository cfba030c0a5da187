# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

from collections.abc import Callable

import pytest

from carme_runtime import slurm_formats


def test_parse_squeue_json(data: Callable[[str], str]) -> None:
    jobs = slurm_formats.parse_squeue_json(data("squeue_node.json"))
    assert [j.job_id for j in jobs] == [41, 42, 43, 44]
    assert jobs[1].nodes == ["n1", "n2", "vm"]
    assert jobs[2].nodes == []
    assert slurm_formats.parse_comment(jobs[0].comment) == {
        "app": "jupyterlab",
        "host": "10.0.0.5",
        "port": "41234",
        "state": "ready",
    }


def test_jobs_on_node_filters_in_python(data: Callable[[str], str]) -> None:
    jobs = slurm_formats.parse_squeue_json(data("squeue_node.json"))
    assert [j.job_id for j in slurm_formats.jobs_on_node(jobs, "vm", user="alice")] == [41, 42]
    assert [j.job_id for j in slurm_formats.jobs_on_node(jobs, "vm")] == [41, 42, 44]
    assert [j.job_id for j in slurm_formats.jobs_on_node(jobs, "n2", uid=1001)] == [42]


def test_squeue_errors_raise() -> None:
    with pytest.raises(slurm_formats.SlurmParseError):
        slurm_formats.parse_squeue_json('{"errors": [{"error": "Invalid user"}], "jobs": []}')
    with pytest.raises(slurm_formats.SlurmParseError):
        slurm_formats.parse_squeue_json("not json")
    with pytest.raises(slurm_formats.SlurmParseError):
        slurm_formats.parse_squeue_json('{"errors": []}')


@pytest.mark.parametrize(
    ("expr", "hosts"),
    [
        ("vm", ["vm"]),
        ("gpu[01-03,07],cpu1", ["gpu01", "gpu02", "gpu03", "gpu07", "cpu1"]),
        ("n[1-2]", ["n1", "n2"]),
        ("a[9-11]b", ["a9b", "a10b", "a11b"]),
    ],
)
def test_expand_hostlist(expr: str, hosts: list[str]) -> None:
    assert slurm_formats.expand_hostlist(expr) == hosts


def test_comment_roundtrip_and_refusal() -> None:
    c = slurm_formats.format_comment(app="jupyterlab", host="10.0.0.5", port=8888, state="ready")
    assert c == "carme:v1;app=jupyterlab;host=10.0.0.5;port=8888;state=ready"
    assert slurm_formats.parse_comment(c) == {
        "app": "jupyterlab",
        "host": "10.0.0.5",
        "port": "8888",
        "state": "ready",
    }
    assert slurm_formats.parse_comment("user text") is None
    with pytest.raises(ValueError, match="characters"):
        slurm_formats.format_comment(host="a;secret=1")


def test_parse_parsable_both_styles() -> None:
    assert slurm_formats.parse_parsable("A|B\n1|2\n") == [{"A": "1", "B": "2"}]
    assert slurm_formats.parse_parsable("A|B|\n1|2|\n") == [{"A": "1", "B": "2"}]
    with pytest.raises(slurm_formats.SlurmParseError):
        slurm_formats.parse_parsable("A|B\n1\n")


def test_tres() -> None:
    tres = slurm_formats.parse_tres("billing=2,cpu=2,gres/gpu=2,mem=100M,node=1")
    assert slurm_formats.gpu_count_from_tres(tres) == 2
    assert slurm_formats.gpu_count_from_tres(slurm_formats.parse_tres("cpu=1,gres/gpu:a100=1,gres/gpu:v100=2")) == 3
    assert slurm_formats.gpu_count_from_tres(slurm_formats.parse_tres("cpu=1")) == 0
