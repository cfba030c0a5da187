# SPDX-License-Identifier: GPL-3.0-or-later
"""Image digests (carme_runtime.images) and carme-launch's check of the image before a container session."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from carme_runtime import launch
from carme_runtime import launch_run
from carme_runtime.exit_codes import ExitCode
from carme_runtime.images import ImageError
from carme_runtime.images import image_digest
from carme_runtime.images import split_reference
from carme_runtime.images import verify_image
from tests.runtime.test_launch import TEST_APP
from tests.runtime.test_launch import config
from tests.runtime.test_launch import job_env


def tree(tmp_path: Path) -> Path:
    image = tmp_path / "img"
    (image / "etc").mkdir(parents=True)
    (image / "etc" / "os-release").write_text('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\n')
    (image / "bin").mkdir()
    (image / "bin" / "tool").write_text("#!/bin/sh\n")
    (image / "bin" / "tool").chmod(0o755)
    (image / "usr").symlink_to("bin")
    (image / "etc" / "shadow").write_text("root:*:1::::::\n")
    (image / "etc" / "shadow").chmod(0o640)
    (image / "root").mkdir(mode=0o700)
    return image


def test_directory_digest_is_stable_and_sees_content_modes_and_links(tmp_path: Path) -> None:
    image = tree(tmp_path)
    first = image_digest(str(image))
    assert first.startswith("sha256:") and len(first) == 71
    assert image_digest(str(image)) == first
    os.utime(image / "etc" / "os-release", (0, 0))  # times are not part of it
    assert image_digest(str(image)) == first
    (image / "etc" / "os-release").write_text('PRETTY_NAME="Evil"\n')
    changed = image_digest(str(image))
    assert changed != first
    (image / "bin" / "tool").chmod(0o4755)
    assert image_digest(str(image)) != changed


def test_file_digest_is_its_sha256(tmp_path: Path) -> None:
    sif = tmp_path / "x.sif"
    sif.write_bytes(b"abc")
    assert image_digest(str(sif)) == "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def test_split_reference() -> None:
    digest = "sha256:" + "a" * 64
    assert split_reference(f"/srv/img@{digest}") == ("/srv/img", digest)
    assert split_reference("/srv/img") == ("/srv/img", "")
    assert split_reference("/srv/img@sha256:short") == ("/srv/img@sha256:short", "")


def test_verify_refuses_missing_and_altered_images(tmp_path: Path) -> None:
    image = tree(tmp_path)
    ref = f"{image}@{image_digest(str(image))}"
    assert verify_image(ref) == str(image)
    (image / "bin" / "tool").write_text("#!/bin/sh\necho changed\n")
    with pytest.raises(ImageError, match="corrupt or was replaced"):
        verify_image(ref)
    with pytest.raises(ImageError, match="missing"):
        verify_image(f"{tmp_path}/nope@{image_digest(str(image))}")


@pytest.mark.parametrize("broken", ["missing", "altered"])
def test_launch_fails_within_seconds_with_the_reason_published(tmp_path: Path, fake_runner, broken: str) -> None:
    image = tree(tmp_path)
    ref = f"{image}@{image_digest(str(image))}"
    if broken == "missing":
        ref = ref.replace(str(image), str(tmp_path / "gone"))
    else:
        (image / "etc" / "os-release").write_text("tampered\n")
    messages: list[str] = []

    def spawn(argv: list[str], env: dict[str, str], cwd: str) -> launch_run.Process:
        raise AssertionError("must not start")

    env = job_env(tmp_path, CARME_RUNTIME="charliecloud", CARME_IMAGE=ref, USER="alice")
    start = time.monotonic()
    rc = launch.launch_from_env(
        env, runner=fake_runner, config=config(tmp_path), apps={"myapp": TEST_APP}, spawn=spawn, log=messages.append
    )
    assert time.monotonic() - start < 5
    assert rc == ExitCode.IMAGE_INVALID
    assert fake_runner.calls == [
        [
            "scontrol",
            "update",
            "JobId=77",
            "Requeue=0",
            "Comment=carme:v1;app=myapp;host=127.0.0.1;port=0;state=failed;reason=image",
        ]
    ]
    assert any(("missing" if broken == "missing" else "corrupt") in m for m in messages)
