# SPDX-License-Identifier: GPL-3.0-or-later
"""Datasets in sessions: ~/datasets/<name> links, $CARME_DATASETS_DIR, read-only binds for Apptainer."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from carme_runtime import datasets
from carme_runtime import launch
from carme_runtime import launch_plan
from carme_runtime import launch_run
from carme_runtime.apps import load_apps
from carme_runtime.config import ConfigError
from carme_runtime.config import RuntimeConfig
from carme_runtime.exit_codes import ExitCode
from tests.runtime.test_launch import TEST_APP
from tests.runtime.test_launch import job_env


def test_links_are_made_once_and_repointed(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    assert datasets.link_datasets(str(home), {"coco": "/srv/datasets/coco", "mnist": "/srv/datasets/mnist"}) == []
    assert os.readlink(home / "datasets" / "coco") == "/srv/datasets/coco"
    assert os.readlink(home / "datasets" / "mnist") == "/srv/datasets/mnist"
    assert datasets.link_datasets(str(home), {"coco": "/srv/datasets/coco"}) == []  # unchanged, no error
    assert datasets.link_datasets(str(home), {"coco": "/data/coco-2017"}) == []
    assert os.readlink(home / "datasets" / "coco") == "/data/coco-2017"


def test_a_users_own_file_of_that_name_is_left_alone(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "datasets" / "coco").mkdir(parents=True)
    (home / "datasets" / "coco" / "mine.txt").write_text("mine")
    notes = datasets.link_datasets(str(home), {"coco": "/srv/datasets/coco"})
    assert notes == [f"{home}/datasets/coco exists and is not a link: dataset coco is at /srv/datasets/coco"]
    assert (home / "datasets" / "coco" / "mine.txt").read_text() == "mine"


def test_no_datasets_no_directory(tmp_path: Path) -> None:
    assert datasets.link_datasets(str(tmp_path), {}) == []
    assert not (tmp_path / "datasets").exists()
    assert datasets.session_env(str(tmp_path), {}) == {}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"../x": "/srv/x"}, "dataset name '../x' must be letters"),
        ({"..": "/srv/x"}, "dataset name '..' must be letters"),
        ({"coco": "srv/coco"}, "dataset coco path 'srv/coco' must be an absolute path"),
        (["coco"], "datasets must be an object of strings"),
    ],
)
def test_config_refuses_bad_datasets(value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.").replace("(", r"\(")):
        RuntimeConfig.from_mapping({"datasets": value})


def _config(tmp_path: Path) -> RuntimeConfig:
    return RuntimeConfig.from_mapping(
        {
            "bind_address": "127.0.0.1",
            "scratch_root": str(tmp_path / "scratch"),
            "datasets": {"demo-samples": "/srv/datasets/demo-samples"},
            "dataset_dirs": ["/srv/legacy"],
        }
    )


def test_none_runtime_session_gets_the_links_directory(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    plan = launch_plan.plan_launch(
        job_env(tmp_path), {"myapp": TEST_APP}, _config(tmp_path), home=home, host="127.0.0.1", port=41000
    )
    assert plan.env["CARME_DATASETS_DIR"] == f"{home}/datasets"


def test_apptainer_session_binds_every_dataset_read_only(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    env = job_env(tmp_path, CARME_APP="jupyterlab", CARME_RUNTIME="apptainer", CARME_IMAGE="/opt/images/x.sif")
    plan = launch_plan.plan_launch(
        env, load_apps([]), _config(tmp_path), home=home, host="10.0.0.5", port=41234, socket_dir=str(tmp_path / "s")
    )
    binds = [b for i, a in enumerate(plan.argv) if a == "--bind" for b in plan.argv[i + 1].split(",")]
    assert "/srv/legacy:/srv/legacy:ro" in binds
    assert "/srv/datasets/demo-samples:/srv/datasets/demo-samples:ro" in binds
    assert plan.env["APPTAINERENV_CARME_DATASETS_DIR"] == f"{home}/datasets"


def test_launch_links_the_datasets_into_home(tmp_path: Path, fake_runner) -> None:
    def spawn(argv: list[str], env: dict[str, str], cwd: str) -> launch_run.Process:
        raise OSError(2, "stop here")

    rc = launch.launch_from_env(
        job_env(tmp_path),
        runner=fake_runner,
        config=_config(tmp_path),
        apps={"myapp": TEST_APP},
        spawn=spawn,
        log=lambda _m: None,
    )
    assert rc == ExitCode.APP_START_FAILED
    assert os.readlink(tmp_path / "home" / "datasets" / "demo-samples") == "/srv/datasets/demo-samples"
