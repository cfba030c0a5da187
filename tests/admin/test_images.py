# SPDX-License-Identifier: GPL-3.0-or-later
"""images/session: every definition parses with spython and passes the pin and label rules; the derived
catalogue images/session/catalog.json is in sync (regenerate: ``carme image catalog --write``)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from carme_admin import commands
from carme_admin import images
from carme_admin.image_apptainer import apptainer_argv

DEFS = images.load_all()
GOOD = """\
Bootstrap: docker
From: debian:bookworm-20241111-slim

%labels
    org.opencontainers.image.title T
    org.opencontainers.image.version 1.0
    carme.apps jupyterlab
    carme.accelerator none
    carme.framework.jupyterlab 4.6.6

%post
    /opt/carme/env/bin/pip install --no-index --find-links /opt/carme/wheelhouse \\
        jupyterlab==4.6.6
"""


def test_there_are_a_base_and_pytorch_and_tensorflow_variants() -> None:
    names = {d.name for d in DEFS}
    assert {"base", "pytorch", "pytorch-cpu", "tensorflow", "tensorflow-cpu"} <= names
    base = next(d for d in DEFS if d.name == "base")
    assert set(base.apps) == {"jupyterlab", "code-server", "tensorboard"}


@pytest.mark.parametrize("defn", DEFS, ids=[d.name for d in DEFS])
def test_definition_passes_pin_and_label_rules(defn: images.Definition) -> None:
    assert images.check_definition(defn, DEFS) == []
    assert defn.pip_pins(), "no pip requirement found: the parser missed %post"


def test_catalogue_is_in_sync_with_the_definitions() -> None:
    assert images.CATALOG.read_text() == images.catalog_text(DEFS), "run: carme image catalog --write"


def write(tmp_path: Path, text: str) -> images.Definition:
    path = tmp_path / "x.def"
    path.write_text(text)
    return images.load_definition(path)


def test_good_definition_passes(tmp_path: Path) -> None:
    assert images.check_definition(write(tmp_path, GOOD)) == []


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ("debian:bookworm-20241111-slim", "debian:latest", "not pinned"),
        ("debian:bookworm-20241111-slim", "debian", "not pinned"),
        ("jupyterlab==4.6.6\n", "jupyterlab\n", "'jupyterlab' is not pinned"),
        ("jupyterlab==4.6.6\n", "jupyterlab>=4\n", "not pinned"),
        ("carme.framework.jupyterlab 4.6.6", "carme.framework.jupyterlab 4.6.5", "label carme.framework.jupyterlab"),
        ("    carme.apps jupyterlab\n", "", "label carme.apps missing"),
        ("carme.apps jupyterlab", "carme.apps jupyterlab,rstudio", "unknown apps"),
        ("debian:bookworm-20241111-slim", "carme/nope:1.0", "names no definition"),
        ("Bootstrap: docker", "Bootstrap: library", "spython"),
    ],
)
def test_unpinned_or_unlabelled_definition_fails(tmp_path: Path, old: str, new: str, problem: str) -> None:
    assert old in GOOD
    try:
        problems = images.check_definition(write(tmp_path, GOOD.replace(old, new)))
    except images.DefinitionError as exc:
        problems = [str(exc)]
    assert any(problem in p for p in problems), problems


STANDIN = Path(__file__).resolve().parents[1] / "fixtures" / "bin" / "apptainer-standin"


def test_apptainer_build_command_lines_against_the_stand_in(tmp_path: Path) -> None:
    """`carme image build pytorch --runtime apptainer`: the base first, then pytorch from the base's SIF."""
    dest, wheels = tmp_path / "images", tmp_path / "wheels"
    log = dest / "apptainer-standin.log"
    built = images.build("pytorch", "apptainer", dest, wheels, defs=DEFS, executable=str(STANDIN))
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert [c["argv"][:4] for c in calls] == [["build", "--force", "--bind", f"{wheels}:/opt/carme/wheelhouse:ro"]] * 2
    assert calls[0]["argv"][4] == str(dest / ".carme-base-1.0.sif.partial")
    setup = '%setup\n    mkdir -p "${APPTAINER_ROOTFS}/opt/carme/wheelhouse"\n\n'
    assert calls[0]["definition"].replace(setup, "") == (images.DEFINITIONS / "base.def").read_text()
    assert setup + "%labels" in calls[0]["definition"]  # Apptainer binds the wheelhouse only onto an existing path
    assert "Bootstrap: localimage\nFrom: " + str(dest / "carme-base-1.0.sif") in calls[1]["definition"]
    assert "torch==2.5.1" in calls[1]["definition"]
    assert built.path == dest / "carme-pytorch-1.0.sif"
    assert built.digest == "sha256:" + hashlib.sha256(built.path.read_bytes()).hexdigest()
    assert (dest / "carme-pytorch-1.0.ref").read_text() == f"{built.path}@{built.digest}\n"
    assert not list(dest.glob(".*partial"))
    argv = images.register_argv(["flask", "--app", "webui"], built)
    assert argv[:9] == ["flask", "--app", "webui", "image-ensure", "pytorch", "--image", built.reference, "--kind",
                        "container"]  # fmt: skip
    assert argv[-3:] == ["--app=jupyterlab", "--app=code-server", "--app=tensorboard"]
    # the base exists now: a second build of a variant does not rebuild it
    images.build("tensorflow", "apptainer", dest, wheels, defs=DEFS, executable=str(STANDIN))
    assert len(log.read_text().splitlines()) == 3


def test_apptainer_build_from_a_base_directory_keeps_the_definition_it_built(tmp_path: Path) -> None:
    """Without a registry (the test bed) the first definition starts from a root filesystem directory (--base)."""
    dest, base = tmp_path / "images", tmp_path / "base-bookworm"
    built = images.build(
        "pytorch-cpu", "apptainer", dest, tmp_path / "w", defs=DEFS, base=base, executable=str(STANDIN)
    )
    calls = [json.loads(line) for line in (dest / "apptainer-standin.log").read_text().splitlines()]
    assert calls[0]["definition"].startswith(f"Bootstrap: localimage\nFrom: {base}\n")
    assert "debian:bookworm" not in calls[0]["definition"]
    assert f"From: {dest / 'carme-base-1.0.sif'}" in calls[1]["definition"]  # the variant: from the base's SIF
    assert calls[1]["argv"][-1] == str(dest / "carme-pytorch-cpu-1.0.def")
    assert (dest / "carme-pytorch-cpu-1.0.def").read_text() == calls[1]["definition"]
    assert built.path == dest / "carme-pytorch-cpu-1.0.sif"


def test_fakeroot_build_line() -> None:
    """A builder that is not real root (the test bed's Debian 13 node: root without CAP_SYS_ADMIN) uses --fakeroot."""
    argv = apptainer_argv("apptainer", Path("/i/o.sif"), Path("/i/o.def"), Path("/w"), fakeroot=True)
    assert argv == ["apptainer", "build", "--fakeroot", "--force", "--bind", "/w:/opt/carme/wheelhouse:ro", "/i/o.sif",
                    "/i/o.def"]  # fmt: skip
    assert "--fakeroot" not in apptainer_argv("apptainer", Path("/i/o.sif"), Path("/i/o.def"), Path("/w"))


def test_build_refuses_a_definition_that_fails_the_rules(tmp_path: Path) -> None:
    bad = write(tmp_path, GOOD.replace("jupyterlab==4.6.6\n", "jupyterlab\n"))
    with pytest.raises(images.DefinitionError, match="not pinned"):
        images.build("x", "apptainer", tmp_path / "i", tmp_path / "w", defs=[bad], executable=str(STANDIN))


def test_charliecloud_build_steps(tmp_path: Path) -> None:
    """The Charliecloud builder's steps (the real build runs in `make demo`: see the report in README)."""
    calls: list[list[str]] = []
    base = tmp_path / "base"
    (base / "etc").mkdir(parents=True)

    def run(argv: list[str]) -> None:
        calls.append(argv)
        if argv[0] == "cp":
            shutil.copytree(base, argv[-1], dirs_exist_ok=True)

    built = images.build("base", "charliecloud", tmp_path / "images", tmp_path / "w", defs=DEFS, base=base, run=run)
    work = str(tmp_path / "images" / ".carme-base-1.0.partial")
    assert [c[0] for c in calls] == ["cp", "mount", "mount", "chroot", "umount"]
    assert calls[1] == ["mount", "--bind", str(tmp_path / "w"), f"{work}/opt/carme/wheelhouse"]
    assert calls[3][:5] == ["chroot", work, "/bin/sh", "-e", "-c"]
    assert "jupyterlab==4.6.6" in calls[3][5]
    assert (built.path / "ch" / "environment").read_text() == "PATH=/opt/carme/env/bin:/usr/local/bin:/usr/bin:/bin\n"
    labels = json.loads((built.path / "ch" / "labels.json").read_text())
    assert labels["carme.apps"] == "jupyterlab,code-server,tensorboard"
    assert built.digest.startswith("sha256:")


def test_carme_image_build_passes_fakeroot_and_base(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`carme image build base --runtime apptainer --fakeroot --base DIR` (the test bed's Debian 13 node) reaches
    images.build; without --fakeroot it is off (the stand-in's command lines: test_fakeroot_build_line)."""
    seen: list[dict[str, object]] = []

    def build(name: str, runtime: str, dest: Path, wheelhouse: Path, **kwargs: object) -> images.Built:
        seen.append({"name": name, "runtime": runtime, **kwargs})
        return images.Built(next(d for d in DEFS if d.name == name), dest / "carme-base-1.0.sif", "sha256:0")

    monkeypatch.setattr(images, "build", build)
    base = tmp_path / "base-bookworm"
    argv = ["image", "build", "base", "--runtime", "apptainer", "--dest", str(tmp_path), "--base", str(base)]
    assert commands.main([*argv, "--fakeroot"]) == 0
    assert commands.main(argv) == 0
    assert [(s["runtime"], s["base"], s["fakeroot"]) for s in seen] == [("apptainer", base, True),
                                                                         ("apptainer", base, False)]  # fmt: skip
    assert "image-ensure base" in capsys.readouterr().out
