# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

import pytest

from carme_runtime import slurm_formats


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
