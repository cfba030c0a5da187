# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Carme contributors. GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Test-bed connection: run tasks in a local podman container through nsenter, with pipelining.

The demo and the Molecule nodes are containers on this host, and Ansible runs as root beside them. The collection's
``containers.podman.podman`` connection starts three podman processes for every task on every host (``podman mount``,
``podman exec`` for the temporary directory, ``podman exec`` for the module), about 0.2 s of wall time and 0.08 s of CPU
each, and it cannot pipeline. On 2 cores that overhead was most of an idempotent ``site.yml`` run.

This plugin asks podman once for the container's init PID (kept in a small cache file, checked against the process's
start time, so a restarted container is looked up again) and then enters the container's namespaces with ``nsenter``
(a few milliseconds), with the environment ``podman exec`` would give. Modules are piped to the container's Python
(pipelining), and files travel through ``cat`` inside the container, so paths are resolved by the container, never by
the host. Real sites use SSH; this is for containers on the controller's own host, as root, and nothing else.
"""

from __future__ import annotations

DOCUMENTATION = """
    name: podman_nsenter
    short_description: Run tasks in a local podman container through nsenter (test bed only)
    description:
        - Enters a running podman container's namespaces with nsenter, with pipelining. Root on the container's host only.
    options:
      remote_addr:
        description: The name or ID of the container.
        default: inventory_hostname
        vars:
          - name: inventory_hostname
          - name: ansible_host
          - name: ansible_podman_host
      remote_user:
        description: Only root (or unset) is supported.
        vars:
          - name: ansible_user
      podman_executable:
        description: Executable for podman.
        default: podman
        vars:
          - name: ansible_podman_executable
        env:
          - name: ANSIBLE_PODMAN_EXECUTABLE
"""

import json
import os
import shlex
import subprocess
import tempfile
from typing import Any

from ansible.errors import AnsibleConnectionFailure
from ansible.errors import AnsibleError
from ansible.module_utils.common.text.converters import to_bytes
from ansible.module_utils.common.text.converters import to_text
from ansible.plugins.connection import ConnectionBase
from ansible.plugins.connection import ensure_connect
from ansible.utils.display import Display

display = Display()

# what `podman exec` puts in the environment of a command in our node image
CONTAINER_ENV = [
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "TERM=xterm",
    "container=podman",
    "HOME=/root",
]
CACHE_DIR = os.path.join(tempfile.gettempdir(), "carme-podman-nsenter")


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat), None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            return stat.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


class Connection(ConnectionBase):
    """nsenter into a local podman container, with pipelining."""

    transport = "podman_nsenter"
    has_pipelining = True

    def __init__(self, play_context: Any, new_stdin: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(play_context, new_stdin, *args, **kwargs)
        self._pid: int | None = None

    def _container(self) -> str:
        return str(self._play_context.remote_addr or self.get_option("remote_addr"))

    def _cached_pid(self) -> int | None:
        path = os.path.join(CACHE_DIR, self._container())
        try:
            with open(path, encoding="ascii") as cache:
                entry = json.load(cache)
            pid = int(entry["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return pid if _start_time(pid) == entry.get("start") else None

    def _lookup_pid(self) -> int:
        podman = self.get_option("podman_executable")
        argv = [podman, "inspect", "--type", "container", "--format", "{{.State.Pid}}", self._container()]
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        pid = int(done.stdout.strip() or 0) if done.returncode == 0 else 0
        if pid <= 0:
            raise AnsibleConnectionFailure(
                f"container {self._container()} is not running (podman inspect: {done.stderr.strip() or 'no PID'})"
            )
        os.makedirs(CACHE_DIR, mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=CACHE_DIR)
        with os.fdopen(fd, "w", encoding="ascii") as cache:
            json.dump({"pid": pid, "start": _start_time(pid)}, cache)
        os.replace(tmp, os.path.join(CACHE_DIR, self._container()))
        return pid

    def _connect(self) -> Connection:
        if os.geteuid() != 0:
            raise AnsibleConnectionFailure("podman_nsenter needs root on the container's host")
        user = self.get_option("remote_user")
        if user not in (None, "", "root"):
            raise AnsibleError(f"podman_nsenter runs as root only, not as {user!r}")
        if not self._connected:
            self._pid = self._cached_pid() or self._lookup_pid()
            self._connected = True
        return self

    def _nsenter(self, argv: list[str], in_data: bytes | None) -> tuple[int, bytes, bytes]:
        prefix = [
            "nsenter",
            "--target",
            str(self._pid),
            "--mount",
            "--uts",
            "--ipc",
            "--net",
            "--pid",
            "--cgroup",
            "--root",
            "--wd",
            "--",
            "/usr/bin/env",
            "-i",
            *CONTAINER_ENV,
        ]
        display.vvv(f"NSENTER {argv}", host=self._container())
        done = subprocess.run(
            [to_bytes(a, errors="surrogate_or_strict") for a in prefix + argv],
            input=in_data or b"",
            capture_output=True,
            check=False,
        )
        return done.returncode, done.stdout, done.stderr

    @ensure_connect
    def exec_command(self, cmd: str, in_data: bytes | None = None, sudoable: bool = False) -> tuple[int, bytes, bytes]:
        super().exec_command(cmd, in_data=in_data, sudoable=sudoable)
        return self._nsenter(shlex.split(to_text(cmd, errors="surrogate_or_strict")), in_data)

    @ensure_connect
    def put_file(self, in_path: str, out_path: str) -> None:
        super().put_file(in_path, out_path)
        with open(to_bytes(in_path, errors="surrogate_or_strict"), "rb") as source:
            data = source.read()
        rc, _, err = self._nsenter(["/bin/sh", "-c", 'cat > "$1"', "put_file", out_path], data)
        if rc != 0:
            raise AnsibleError(f"could not write {out_path} in {self._container()}: {to_text(err).strip()}")

    @ensure_connect
    def fetch_file(self, in_path: str, out_path: str) -> None:
        super().fetch_file(in_path, out_path)
        rc, data, err = self._nsenter(["/bin/cat", "--", in_path], None)
        if rc != 0:
            raise AnsibleError(f"could not read {in_path} in {self._container()}: {to_text(err).strip()}")
        with open(to_bytes(out_path, errors="surrogate_or_strict"), "wb") as target:
            target.write(data)

    def close(self) -> None:
        self._connected = False
