# SPDX-License-Identifier: GPL-3.0-or-later
"""Apptainer for real, in a throwaway Debian 13 node (``localhost/carme-node:debian13``; skipped without it):

1. the ``apptainer`` role installs Apptainer from the test bed's source (Debian unstable, pinned to the one package)
   and renders apptainer.conf (unprivileged: ``allow setuid = no``); a second run changes nothing;
2. ``carme image build base --runtime apptainer --base DIR`` (:func:`carme_admin.images.build`, Apptainer run in the
   node) makes the SIF of ``images/session/base.def`` from the test bed's Debian base tree (no registry here);
3. as an unprivileged user, carme-launch's checks and command line (``tests/runtime/apptainer_probe.py``) run a
   probe app in the SIF: the image's ``/etc/os-release``, the user's uid, her home bound, the socket directory;
4. carme-launch starts JupyterLab in the SIF and it becomes ready behind the session front;
5. an altered SIF is refused with the reason, before anything starts.

Opt-in (not in `make test`: about 100 s with the SIF cached, 7 to 8 min the first time): ``CARME_APPTAINER_TESTS=1``
and the image; skipped otherwise (at collection, so CI=true does not turn the skip into a failure).
The node runs like the Debian 13 demo nodes: not privileged, ``--security-opt unmask=ALL --cap-add MKNOD`` (without
the unmask the kernel refuses Apptainer's proc mount). Needs root, podman, debootstrap (the base tree,
``scripts/image-base.sh``, cached) and the wheelhouse (``scripts/wheelhouse.sh``). Measured times: see the README of
roles/apptainer. The node is removed however the test ends.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from carme_admin import images
from carme_admin import sif_cache
from carme_admin.image_apptainer import Run
from carme_runtime.images import image_digest
from tests.roles.harness import ansible_env

REPO = Path(__file__).resolve().parents[2]
NODE_IMAGE = os.environ.get("CARME_TRIXIE_NODE_IMAGE", "localhost/carme-node:debian13")


def _image_present() -> bool:
    found = shutil.which("podman") is not None
    return found and subprocess.run(["podman", "image", "exists", NODE_IMAGE], check=False, timeout=30).returncode == 0


if os.environ.get("CARME_APPTAINER_TESTS") != "1" or not _image_present():
    pytest.skip(
        f"opt-in: CARME_APPTAINER_TESTS=1 and the Debian 13 node image {NODE_IMAGE} (CARME_RELEASE=trixie images/node)",
        allow_module_level=True,
    )

pytestmark = [pytest.mark.host, pytest.mark.slow]
PREFIX = os.environ.get("CARME_TEST_CONTAINER_PREFIX", "carme-apptainer-test")
WHEELHOUSE = Path(os.environ.get("CARME_WHEELHOUSE", "/var/cache/carme/wheelhouse"))
#: built SIFs, one directory per (base.def, base tree, builder) so a rerun skips the build (about 4 min)
SIF_CACHE = Path(os.environ.get("CARME_APPTAINER_SIF_CACHE", "/var/cache/carme/images/apptainer"))
UID = 2345
PROBE_APP = """\
name = "probe"
title = "Probe"
argv = ["/bin/sh", "/home/alice/probe.sh", "{socket}"]
secret_mode = "token"
isolation = "socket"
readiness_path = "/"
proxy_base = "/proxy/{job_id}/"
[env]
PROBE_TOKEN = "{secret}"
"""
PROBE = """\
. /etc/os-release
echo "os=$PRETTY_NAME"
echo "uid=$(id -u)"
echo "home=$HOME"
echo "bound=$(cat "$HOME/hello.txt")"
echo "pwd=$(pwd)"
echo "socket_dir=$(test -d "$(dirname "$1")" && echo visible || echo missing)"
echo "node_marker=$(test -e /etc/carme-node-marker && echo present || echo absent)"
echo "scratch=$(cat /scratch/41/job.txt)"
echo "token_set=$(test -n "$PROBE_TOKEN" && echo yes || echo no)"
echo "host_env=${CARME_SESSION_SECRET:-none}"
echo written > "$HOME/from-container.txt"
"""
SETUP = f"""set -e
useradd -m -u {UID} -s /bin/bash alice
echo hello-from-home > /home/alice/hello.txt
touch /etc/carme-node-marker
install -d -m 0755 /scratch; install -d -m 0700 -o alice /scratch/41
echo job-scratch > /scratch/41/job.txt; chown alice /scratch/41/job.txt
install -d /etc/carme/apps.d
"""


def podman(
    *args: str, check: bool = True, timeout: float = 300, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], input=stdin, capture_output=True, text=True, check=check, timeout=timeout)


def write(name: str, path: str, text: str) -> None:
    podman("exec", "-i", name, "sh", "-c", f"cat > {path}", stdin=text)


def role_run(name: str, tmp: Path) -> str:
    """The apptainer role against the node (test-bed source); the play's recap line."""
    play = tmp / "apptainer.yml"
    play.write_text(
        "- hosts: all\n  roles: [apptainer]\n  vars:\n    apptainer_install_source: debian-unstable\n"
        "    apptainer_image_dirs: [/var/lib/carme/images]\n"
    )
    done = subprocess.run(
        ["ansible-playbook", "-i", f"{name},", "-c", "podman_nsenter", str(play)],
        capture_output=True, text=True, timeout=600, env=ansible_env(), cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    return next(line for line in done.stdout.splitlines() if line.startswith(name))


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, Path, Path]]:
    if os.geteuid() != 0 or shutil.which("podman") is None or shutil.which("debootstrap") is None:
        pytest.skip("needs root, podman and debootstrap")
    if not list(WHEELHOUSE.glob("jupyterlab-*.whl")):
        pytest.skip(f"wheelhouse {WHEELHOUSE} has no JupyterLab (scripts/wheelhouse.sh)")
    base = Path(
        subprocess.run(["bash", str(REPO / "scripts" / "image-base.sh")], capture_output=True, text=True, check=True,
                       timeout=600).stdout.strip().splitlines()[-1]
    )  # fmt: skip
    dest = SIF_CACHE / sif_cache.recipe_key(base, REPO)
    dest.mkdir(parents=True, exist_ok=True)
    work = tmp_path_factory.mktemp("work")
    work.chmod(0o755)
    name = f"{PREFIX}-{uuid.uuid4().hex[:8]}"
    podman(
        "run", "-d", "--name", name, "--security-opt", "unmask=ALL", "--cap-add", "MKNOD",
        "-v", f"{base}:{base}:ro", "-v", f"{WHEELHOUSE}:{WHEELHOUSE}:ro", "-v", f"{dest}:{dest}",
        "-v", f"{work}:{work}", "-v", f"{REPO}:/src:ro", NODE_IMAGE, "sleep", "7200",
    )  # fmt: skip
    try:
        podman("exec", name, "bash", "-c", SETUP)
        write(name, "/home/alice/probe.sh", PROBE)
        write(name, "/etc/carme/apps.d/probe.toml", PROBE_APP)
        yield name, dest, base, work
    finally:
        podman("rm", "-f", "-t", "0", name, check=False)


def in_node(name: str) -> Run:
    """``run`` for :func:`carme_admin.images.build`: the argv inside the node, as root, with a clean environment."""

    def run(argv: list[str]) -> None:
        env = ["env", "-i", f"PATH={images.BUILD_PATH}", "HOME=/root", "LANG=C.UTF-8"]
        done = subprocess.run(["podman", "exec", name, *env, *argv], capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    return run


@pytest.fixture(scope="module")
def sif(node: tuple[str, Path, Path, Path], tmp_path_factory: pytest.TempPathFactory) -> images.Built:
    name, dest, base, _ = node
    podman("exec", name, "apt-get", "purge", "-y", "-q", "apptainer", timeout=120)  # the role installs it again
    t0 = time.monotonic()
    first = role_run(name, tmp_path_factory.mktemp("play"))
    second = role_run(name, tmp_path_factory.mktemp("play"))
    print(f"role: {time.monotonic() - t0:.0f} s; first {first.split(':', 1)[1]}; second {second.split(':', 1)[1]}")
    assert "changed=0" in second, second
    t0 = time.monotonic()
    defs = images.load_all()
    cached = dest / "carme-base-1.0.sif"
    if cached.exists():
        print(f"apptainer build of base.def: cached in {dest}")
        return images.Built(images.find(defs, "base"), cached, image_digest(str(cached)))
    # root in an unprivileged node is not real root (no CAP_SYS_ADMIN): Apptainer builds with --fakeroot (root's
    # /etc/subuid range), which cannot make device nodes: the build starts from a copy of the base tree without them
    # (Apptainer gives the container its own /dev)
    podman("exec", name, "bash", "-c", "echo root:100000:65536 | tee -a /etc/subuid >> /etc/subgid; "
           f"cp -a {base} /var/tmp/base-nodev && find /var/tmp/base-nodev/dev -mindepth 1 -delete")  # fmt: skip
    built = images.build(
        "base",
        "apptainer",
        dest,
        WHEELHOUSE,
        defs=defs,
        base=Path("/var/tmp/base-nodev"),
        run=in_node(name),
        fakeroot=True,
    )
    print(f"apptainer build of base.def: {time.monotonic() - t0:.0f} s, {built.path.stat().st_size >> 20} MiB")
    return built


def launch(name: str, reference: str, app: str, *extra: str, timeout: int = 150) -> subprocess.CompletedProcess[str]:
    """carme-launch's environment as a session job of alice gives it (no Slurm: publishing is printed or fails)."""
    job = [
        "-e", "SLURM_JOB_ID=41", f"-e=CARME_APP={app}", "-e", "CARME_RUNTIME=apptainer",
        f"-e=CARME_IMAGE={reference}", f"-e=CARME_SESSION_SECRET={'k' * 40}", "-e", "HOME=/home/alice",
        "-e", "USER=alice", "-e", "CARME_WORKDIR=/home/alice", "-e", "PYTHONPATH=/src",
        "-e", "PATH=/usr/bin:/bin", "-e", "CARME_CONFIG=/etc/carme/runtime.json",
    ]  # fmt: skip
    return podman("exec", "--user", "alice", *job, name, "timeout", str(timeout), *extra, check=False,
                  timeout=timeout + 30)  # fmt: skip


def fields(out: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line and not line.startswith("argv"))


def test_probe_runs_in_the_sif_as_the_user(node: tuple[str, Path, Path, Path], sif: images.Built) -> None:
    name = node[0]
    write(name, "/etc/carme/runtime.json", json.dumps({"runtime": "apptainer", "bind_address": "127.0.0.1"}))
    out = launch(name, sif.reference, "probe", "python3", "/src/tests/runtime/apptainer_probe.py")
    print(out.stdout, out.stderr[-2000:])
    assert out.returncode == 0, out.stdout + out.stderr
    argv = json.loads(next(line for line in out.stdout.splitlines() if line.startswith("argv: "))[6:])
    assert argv[:2] == ["apptainer", "exec"] and "--nv" not in argv and str(sif.path) in argv
    got = fields(out.stdout)
    assert got["os"].startswith("Debian GNU/Linux 12")  # the image's release; the node is Debian 13
    assert (got["uid"], got["home"], got["bound"], got["pwd"]) == (str(UID), "/home/alice", "hello-from-home",
                                                                   "/home/alice")  # fmt: skip
    assert (got["socket_dir"], got["node_marker"], got["scratch"]) == ("visible", "absent", "job-scratch")
    assert (got["token_set"], got["host_env"]) == ("yes", "none")  # the app's token came; the session secret did not
    owner = podman("exec", name, "stat", "-c", "%u", "/home/alice/from-container.txt").stdout.strip()
    assert owner == str(UID)


def test_jupyterlab_becomes_ready_in_the_sif(node: tuple[str, Path, Path, Path], sif: images.Built) -> None:
    name = node[0]
    write(name, "/etc/carme/runtime.json",
          json.dumps({"runtime": "apptainer", "bind_address": "127.0.0.1", "ready_timeout_s": 90}))  # fmt: skip
    # carme-launch in the background until it says ready (or 90 s), then SIGTERM, which it forwards to JupyterLab
    script = (
        "python3 -c 'import sys; from carme_runtime.entry_points import launch_main; sys.exit(launch_main([]))' "
        "> /tmp/launch.log 2>&1 & pid=$!; "
        "for i in $(seq 1 90); do sleep 1; grep -q 'ready on' /tmp/launch.log && break; done; "
        'echo waited=$i; printf %s "$CARME_SESSION_SECRET" > /tmp/pattern; '
        "echo in_argv=$(grep -l -a -F -f /tmp/pattern /proc/[0-9]*/cmdline | wc -l); "
        "kill $pid; wait $pid; cat /tmp/launch.log"
    )
    out = launch(name, sif.reference, "jupyterlab", "sh", "-c", script, timeout=120)
    log = out.stdout + out.stderr
    print(log[-3000:])
    assert "jupyterlab ready on /tmp/carme-41-" in log, log[-3000:]
    assert "in_argv=0" in log  # the session secret is in no process's command line


def test_an_altered_sif_is_refused_with_the_reason(node: tuple[str, Path, Path, Path], sif: images.Built) -> None:
    name, _, _, work = node
    altered = work / "carme-base-altered.sif"
    shutil.copyfile(sif.path, altered)
    with altered.open("r+b") as fh:
        fh.seek(altered.stat().st_size // 2)
        byte = fh.read(1)
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([byte[0] ^ 0xFF]))
    assert image_digest(str(altered)) != sif.digest
    t0 = time.monotonic()
    out = launch(name, f"{altered}@{sif.digest}", "probe", "python3", "/src/tests/runtime/apptainer_probe.py")
    print(out.stdout, f"refused after {time.monotonic() - t0:.1f} s")
    assert out.returncode == 3, out.stdout + out.stderr
    assert f"image {altered} is corrupt or was replaced" in out.stdout
    assert "state=failed" in out.stdout and "reason=image" in out.stdout
    assert "argv:" not in out.stdout  # nothing was started
