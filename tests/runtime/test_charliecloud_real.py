# SPDX-License-Identifier: GPL-3.0-or-later
"""The Charliecloud runtime for real: ``ch-run`` 0.31 from Debian in a throwaway container of the test-bed node
image, run as an unprivileged user with the argv and environment :class:`CharliecloudRuntime` builds.

Needs root, podman, the node image (``make image``) and the image base (``scripts/image-base.sh``, built here
when missing: about 40 s once, cached in ``/var/cache/carme/images``). About 20 s once both exist.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from carme_runtime.runtimes import AllowedBind
from carme_runtime.runtimes import Bind
from carme_runtime.runtimes import CharliecloudRuntime
from carme_runtime.runtimes import default_allow_list
from carme_runtime.runtimes import default_binds

pytestmark = [pytest.mark.host, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
NODE_IMAGE = os.environ.get("CARME_NODE_IMAGE", "localhost/carme-node:debian13")
SECRET = "ch-secret-" + uuid.uuid4().hex
UID = 2345
SOCKET_DIR = "/tmp/carme-41-chtest"
PROBE = """\
set -u
echo "uid=$(id -u)"
echo "user=$(id -un)"
echo "ch_running=${CH_RUNNING:-}"
echo "node_marker=$(test -e /etc/carme-node-marker && echo present || echo absent)"
echo "bound=$(cat "$HOME/hello.txt")"
echo "token_sha=$(printf %s "$JUPYTER_TOKEN" | sha256sum | cut -c1-64)"
echo "cuda=${CUDA_VISIBLE_DEVICES:-}"
printf %s "$JUPYTER_TOKEN" > /tmp/carme-41-chtest/pattern  # printf is a builtin: no argv holds it
echo "in_argv=$(grep -l -a -F -f /tmp/carme-41-chtest/pattern /proc/[0-9]*/cmdline 2>/dev/null | wc -l)"
echo "socket_dir=$(test -d /tmp/carme-41-chtest && echo visible || echo missing)"
echo "scratch=$(cat /scratch/job.txt)"
echo written > "$HOME/from-container.txt"
"""


def podman(*args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, check=check, timeout=timeout)


@pytest.fixture(scope="module")
def node() -> Iterator[tuple[str, str]]:
    if os.geteuid() != 0 or shutil.which("podman") is None or shutil.which("debootstrap") is None:
        pytest.skip("needs root, podman and debootstrap")
    if podman("image", "exists", NODE_IMAGE, check=False).returncode != 0:
        pytest.skip(f"node image {NODE_IMAGE} missing (make image)")
    base = (
        subprocess.run(
            ["bash", str(REPO / "scripts" / "image-base.sh")], capture_output=True, text=True, check=True, timeout=600
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    name = f"carme-chtest-{uuid.uuid4().hex[:8]}"
    podman("run", "-d", "--name", name, "-v", f"{base}:{base}:ro", NODE_IMAGE, "sleep", "infinity")
    try:
        setup = (
            "set -e; apt-get update -q >/dev/null; "
            "DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends charliecloud-runtime "
            ">/dev/null; "
            f"useradd -m -u {UID} -s /bin/sh chuser; echo hello-from-home > /home/chuser/hello.txt; "
            "touch /etc/carme-node-marker; "
            f"install -d -m 0700 -o chuser {SOCKET_DIR}; install -d -m 0700 -o chuser /scratch/41; "
            "echo job-scratch > /scratch/41/job.txt; chown chuser /scratch/41/job.txt"
        )
        podman("exec", name, "bash", "-c", setup)
        subprocess.run(
            ["podman", "exec", "-i", name, "tee", "/home/chuser/probe.sh"],
            input=PROBE,
            text=True,
            capture_output=True,
            check=True,
        )
        yield name, base
    finally:
        podman("rm", "-f", "-t", "0", name, check=False)


def test_ch_run_as_user_with_launcher_argv(node: tuple[str, str], tmp_path: Path) -> None:
    name, image = node  # the image directory has the same path on this host and in the node
    allowed = default_allow_list("/home/chuser", "/scratch", [])
    allowed.append(AllowedBind(SOCKET_DIR))
    rt = CharliecloudRuntime(allowed, home="/home/chuser", user="chuser")
    binds = [*default_binds("/home/chuser", "/scratch/41", []), Bind(SOCKET_DIR, SOCKET_DIR)]
    app_env = {"JUPYTER_TOKEN": SECRET}
    argv = rt.wrap(
        ["/bin/sh", "/home/chuser/probe.sh"], image=image, binds=binds, gpus=1, env=app_env, workdir="/home/chuser"
    )
    assert argv[:3] == ["ch-run", "--home", "--bind=/scratch/41:/scratch"]
    assert not any(SECRET in a for a in argv)
    env = rt.environment(app_env, {"CUDA_VISIBLE_DEVICES": "1", "LANG": "C.UTF-8"})
    envfile = tmp_path / "env"
    envfile.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
    out = podman("exec", "--user", "chuser", "--env-file", str(envfile), name, *argv, check=False)
    assert out.returncode == 0, out.stderr
    got = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
    assert (got["uid"], got["user"]) == (str(UID), "chuser")
    assert got["ch_running"] == "Weird Al Yankovic"  # ch-run's mark: inside the container
    assert got["node_marker"] == "absent"  # the image's /etc, not the node's
    assert got["bound"] == "hello-from-home"  # home bound (--home)
    assert got["token_sha"] == hashlib.sha256(SECRET.encode()).hexdigest()  # the secret arrived...
    assert got["in_argv"] == "0"  # ...and no process's argv holds it
    assert got["cuda"] == "1"
    assert got["socket_dir"] == "visible"  # shared /tmp: the socket directory has the same path inside
    assert got["scratch"] == "job-scratch"
    owner = podman("exec", name, "stat", "-c", "%u", "/home/chuser/from-container.txt").stdout.strip()
    assert owner == str(UID)  # written through the bind with the user's ownership
