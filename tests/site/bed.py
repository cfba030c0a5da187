# SPDX-License-Identifier: GPL-3.0-or-later
"""The `site` scenario's test bed: two bare Debian machines reached only over SSH, and a non-root controller.

* A podman network ``carme-site`` made with ``--internal`` (no route out; netavark still gives this host an address on
  its bridge, so the controller reaches the nodes' addresses directly), a shared ``/home`` volume, and the containers
  ``carme-site-head`` and ``carme-site-node1`` from the node image, with the demo's options for systemd nodes
  (``--systemd=always``, SIGRTMIN+3, ``--cap-add MKNOD`` for the fake GPU device nodes).
* The offline bundle (``carme bundle build``) is mounted read-only at :data:`BUNDLE_ON_NODE` on both, as a site
  copies it to every node; the provisioning below installs sshd from it, as a site's installer gives a node sshd.
* On each node: the account ``deploy`` with the controller's key and sudo (passwordless, or with a password).
* On this host: the account ``carme-ctl`` (created if missing) with its own SSH key and ``known_hosts``; it runs
  ``carme site init`` and ``ansible-playbook`` from this checkout, never root. No nsenter, no ``podman exec`` in a
  deploy: ``podman exec`` is used here only to provision the bare machines and, in the test, to look at the result.

``python -m tests.site.bed up|down`` runs the steps by hand (``up`` prints the work directory).
"""

from __future__ import annotations

import os
import pwd
import shlex
import subprocess
import sys
import time
from pathlib import Path

from carme_admin import demo

REPO = Path(__file__).resolve().parents[2]
RELEASE = demo.release()  # CARME_RELEASE, else the default release (images/node/default-release)
IMAGE = demo.release_image()
NETWORK = "carme-site"
VOLUME = "carme-site-home"
LABEL = "carme.site=true"
HEAD = "carme-site-head"
NODES = (HEAD, "carme-site-node1")
CONTROLLER = "carme-ctl"
WORK = Path(os.environ.get("CARME_SITE_WORK", "/var/tmp/carme-site-ctl"))  # the controller's files (0700)
BUNDLE = Path(os.environ.get("CARME_SITE_BUNDLE", f"/var/tmp/carme-site-bundle-{RELEASE}"))  # make: SITE_BUNDLE
BUNDLE_ON_NODE = "/srv/carme-bundle"
DEPLOY_USER = "deploy"
#: the checkout's virtualenv runs a Python under /root, which the controller account cannot execute: it runs the
#: system's python3 (the same 3.11) on the virtualenv's packages instead (``python3 -m ansible.cli.playbook``)
SITE_PACKAGES = next((REPO / ".venv" / "lib").glob("python3*/site-packages"), REPO / ".venv")
PY = "/usr/bin/python3"

#: run on each bare node: sshd from the bundle (a private apt configuration, the node's own is left as it is), the
#: deploy account with the controller's key; sudo rule set by :func:`set_sudo`
PROVISION = r"""
set -eu
echo "deb [trusted=yes] file:{bundle}/apt ./" > /tmp/bundle.list
o="-o Dir::Etc::sourcelist=/tmp/bundle.list -o Dir::Etc::sourceparts=/nonexistent -o Dir::State::Lists=/tmp/lists"
mkdir -p /tmp/lists/partial
apt-get $o update -q >/dev/null
DEBIAN_FRONTEND=noninteractive apt-get $o install -y -q --no-install-recommends openssh-server >/dev/null 2>&1
rm -rf /tmp/lists /tmp/bundle.list
id {user} >/dev/null 2>&1 || useradd -m -d /var/lib/{user} -s /bin/bash {user}
install -d -m 0700 -o {user} -g {user} /var/lib/{user}/.ssh
printf '%s\n' "$1" > /var/lib/{user}/.ssh/authorized_keys
chown {user}:{user} /var/lib/{user}/.ssh/authorized_keys; chmod 0600 /var/lib/{user}/.ssh/authorized_keys
systemctl enable --now ssh >/dev/null 2>&1
"""


def run(argv: list[str], timeout: float = 120, check: bool = True, **kw: object) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False, **kw)  # type: ignore[call-overload]
    if check and done.returncode != 0:
        raise RuntimeError(f"{shlex.join(argv)}: rc {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done  # type: ignore[no-any-return]


def podman(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return run(["podman", *args], check=check, timeout=timeout)


def on_node(node: str, script: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """A shell script run as root on a node through podman (provisioning and inspection only, never a deploy)."""
    return podman("exec", node, "bash", "-c", script, "bash", *args, check=check, timeout=300)


def as_controller(
    argv: list[str],
    timeout: float = 300,
    check: bool = True,
    input_text: str | None = None,
    extra_env: tuple[str, ...] = (),
) -> subprocess.CompletedProcess[str]:
    """``argv`` as the controller account (never root), in this checkout, with its own HOME."""
    home = pwd.getpwnam(CONTROLLER).pw_dir
    env = ["env", "-i", f"HOME={home}", f"USER={CONTROLLER}", f"PATH={WORK}/bin:/usr/bin:/bin",
           f"CARME_PROJECT_DIR={WORK}/project",
           f"PYTHONPATH={SITE_PACKAGES}:{REPO}", f"ANSIBLE_CONFIG={REPO}/ansible.cfg",
           f"ANSIBLE_FACT_CACHING_CONNECTION={WORK}/facts", f"ANSIBLE_LOG_PATH={WORK}/ansible.log",
           "LANG=C.UTF-8", *extra_env]  # fmt: skip
    return run(
        ["runuser", "-u", CONTROLLER, "--", *env, *argv], timeout=timeout, check=check, cwd=REPO, input=input_text
    )


def address(node: str) -> str:
    fmt = f'{{{{(index .NetworkSettings.Networks "{NETWORK}").IPAddress}}}}'
    return podman("inspect", node, "--format", fmt).stdout.strip()


def controller_account() -> bool:
    """The controller's account and work directory (a fresh SSH key); True when this call created the account."""
    created = False
    try:
        pwd.getpwnam(CONTROLLER)
    except KeyError:
        run(["useradd", "-m", "-s", "/bin/bash", CONTROLLER])
        created = True
    run(["rm", "-rf", str(WORK)])
    run(["install", "-d", "-m", "0700", "-o", CONTROLLER, "-g", CONTROLLER, str(WORK)])
    ssh = Path(pwd.getpwnam(CONTROLLER).pw_dir) / ".ssh"
    run(["install", "-d", "-m", "0700", "-o", CONTROLLER, "-g", CONTROLLER, str(ssh)])
    run(["rm", "-f", str(ssh / "id_ed25519"), str(ssh / "id_ed25519.pub"), str(ssh / "known_hosts")])
    as_controller(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "carme-site-test", "-f", str(ssh / "id_ed25519")]
    )
    return created


def controller_tools() -> None:
    """``ansible-playbook``, ``ansible-vault`` and ``carme`` on the controller's PATH (the system's python3 on the
    virtualenv's packages), and a view of this checkout with its own ``.artifacts`` (``carme check`` writes its runs
    there): every top-level entry a link, as the controller account's own checkout would be."""
    tools = {"ansible-playbook": "ansible.cli.playbook", "ansible-vault": "ansible.cli.vault", "carme": "carme_admin"}
    script = f"mkdir -p {WORK}/bin {WORK}/project/.cache\n"
    for name, module in tools.items():
        script += f"printf '#!/bin/sh\\nexec {PY} -m {module} \"$@\"\\n' > {WORK}/bin/{name}\n"
    script += f"chmod 0755 {WORK}/bin/*\n"
    hidden = {".artifacts", ".cache", ".git", ".venv", ".secrets"}
    for entry in sorted(REPO.iterdir()):
        if entry.name not in hidden:
            script += f"ln -s {shlex.quote(str(entry))} {WORK}/project/{shlex.quote(entry.name)}\n"
    as_controller(["sh", "-c", script])
    snapshot_sources()


#: what the roles build wheels from (carme_runtime_source_dir, carme_webui_source_dir)
SOURCES = ("README.md", "packaging", "carme_runtime", "webui")


def snapshot_sources() -> None:
    """A copy of the packages' sources for the deploys: other work in this checkout while the scenario runs must
    not change the wheels between the first and the second converge (a site's controller has its own checkout)."""
    paths = " ".join(shlex.quote(str(REPO / name)) for name in SOURCES)
    as_controller(["sh", "-c", f"mkdir -p {WORK}/source && cp -a {paths} {WORK}/source/ && "
                   f"find {WORK}/source -name __pycache__ -prune -exec rm -rf {{}} +"])  # fmt: skip


def start_nodes() -> None:
    """The network with no route out, the shared /home and the two systemd nodes, provisioned with sshd."""
    down()
    podman("network", "create", "--internal", NETWORK)
    podman("volume", "create", VOLUME)
    for node in NODES:
        podman("run", "-d", "--name", node, "--hostname", node, "--network", NETWORK, "--systemd=always",
               "--stop-signal", "37", "--cap-add", "MKNOD", "-v", f"{VOLUME}:/home",
               "-v", f"{BUNDLE}:{BUNDLE_ON_NODE}:ro", "--label", LABEL, IMAGE, "/sbin/init")  # fmt: skip
    for node in NODES:
        state = podman("exec", node, "systemctl", "is-system-running", "--wait", check=False, timeout=120)
        assert state.stdout.strip() in ("running", "degraded"), f"{node}: systemd {state.stdout}{state.stderr}"


def provision(pubkey: str) -> None:
    script = PROVISION.format(bundle=BUNDLE_ON_NODE, user=DEPLOY_USER)
    for node in NODES:
        on_node(node, script, pubkey)
        set_sudo(node, password=None)


def set_sudo(node: str, password: str | None) -> None:
    """``deploy`` may run anything as root: without a password, or with ``password`` (then set as its own)."""
    if password is None:
        rule = f"{DEPLOY_USER} ALL=(ALL:ALL) NOPASSWD: ALL"
        on_node(node, f"echo '{rule}' > /etc/sudoers.d/carme-deploy; chmod 0440 /etc/sudoers.d/carme-deploy")
        return
    rule = f"{DEPLOY_USER} ALL=(ALL:ALL) ALL"
    script = f'echo "{DEPLOY_USER}:$1" | chpasswd; echo "{rule}" > /etc/sudoers.d/carme-deploy'
    on_node(node, script + "; chmod 0440 /etc/sudoers.d/carme-deploy", password)


def trust_ca(ca_cert: Path) -> None:
    """The site's CA in each node's trust store, as a site's machines have it."""
    for node in NODES:
        podman("cp", str(ca_cert), f"{node}:/usr/local/share/ca-certificates/carme-site-ca.crt")
        on_node(node, "update-ca-certificates >/dev/null 2>&1")


def trust_host_keys() -> None:
    """The nodes' host keys into the controller's known_hosts (under their addresses), read from the nodes."""
    lines = []
    for node in NODES:
        key = on_node(node, "cut -d' ' -f1,2 /etc/ssh/ssh_host_ed25519_key.pub").stdout.strip()
        lines.append(f"{address(node)} {key}")
    known = Path(pwd.getpwnam(CONTROLLER).pw_dir) / ".ssh" / "known_hosts"
    known.write_text("\n".join(lines) + "\n")
    run(["chown", f"{CONTROLLER}:{CONTROLLER}", str(known)])


def up() -> None:
    t0 = time.monotonic()
    controller_account()
    controller_tools()
    start_nodes()
    pub = Path(pwd.getpwnam(CONTROLLER).pw_dir) / ".ssh" / "id_ed25519.pub"
    provision(pub.read_text().strip())
    trust_host_keys()
    print(f"bed up in {time.monotonic() - t0:.0f} s; controller work directory {WORK}")


def down(remove_account: bool = False) -> None:
    """Remove the containers, the network and the volume (each bounded in time); the account if asked."""
    podman("rm", "-f", "-t", "5", *NODES, check=False, timeout=90)
    podman("network", "rm", "-f", NETWORK, check=False, timeout=60)
    podman("volume", "rm", "-f", VOLUME, check=False, timeout=60)
    if remove_account:
        run(["userdel", "-r", CONTROLLER], check=False)
        run(["rm", "-rf", str(WORK)], check=False)


if __name__ == "__main__":
    {"up": up, "down": lambda: down(remove_account=True)}[sys.argv[1]]()
