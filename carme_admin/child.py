# SPDX-License-Identifier: GPL-3.0-or-later
"""``python -m carme_admin.child PROGRAM ARGS...``: run ansible-playbook so that nothing of it outlives carme.

ansible-runner starts its command with pexpect, in a session and process group of its own that ignores SIGHUP.
``carme_admin.playbook.write_child_wrapper`` starts this module there under ``setpriv --pdeathsig TERM``: when carme
dies (SIGKILL of a lost terminal's session included) this process gets SIGTERM and kills, with SIGKILL, every
process descended from it and then its process group: ansible-playbook and the worker processes it forked for the
tasks running. The workers leave the group (ansible-core's ``WorkerProcess._detach`` calls ``setsid``): with only the
group killed, a worker of ``upgrade_hosts.yml`` lived on for hours on the demo, blocked writing its result to an
ansible-playbook that was gone; this process is a child subreaper, so a worker whose ansible-playbook died first is
still its descendant. As under pexpect alone, SIGHUP is ignored and SIGINT (ansible-runner's cancel, after a Ctrl-C)
goes to ansible-playbook, which stops as it does at a Ctrl-C. The exit status is ansible-playbook's.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from types import FrameType

PR_SET_CHILD_SUBREAPER = 36  # prctl(2)


def descendants(root: int, proc: str = "/proc") -> list[int]:
    """The pids of every live process below ``root`` (children, their children...), from ``/proc/*/stat``; zombies
    (killed, not yet reaped) are left out, so a kill loop ends once nothing below is left to kill."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        try:
            with open(f"{proc}/{entry}/stat", "rb") as stat:
                state, ppid = stat.read().rsplit(b")", 1)[1].split()[:2]
        except (OSError, IndexError, ValueError):
            continue  # ended meanwhile
        if state != b"Z":
            children.setdefault(int(ppid), []).append(int(entry))
    found: list[int] = []
    todo = [root]
    while todo:
        below = children.get(todo.pop(), [])
        found += below
        todo += below
    return found


def _become_subreaper() -> None:
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the group kill alone
        return


def _end_group(signum: int, frame: FrameType | None) -> None:
    for _ in range(3):  # again for what forked meanwhile, or came to this subreaper when its parent died
        pids = descendants(os.getpid())
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                continue
        if not pids:
            break
    os.killpg(os.getpgrp(), signal.SIGKILL)


def main(argv: list[str]) -> int:
    if not argv:
        sys.stderr.write("usage: python -m carme_admin.child PROGRAM [ARGS...]\n")
        return 2
    _become_subreaper()
    signal.signal(signal.SIGTERM, _end_group)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    started: list[subprocess.Popen[bytes]] = []
    asked: list[int] = []  # a SIGINT that came while the child was being started: sent to it once it is

    def forward(signum: int, frame: FrameType | None) -> None:
        if started:
            started[0].send_signal(signal.SIGINT)
        else:
            asked.append(signum)

    signal.signal(signal.SIGINT, forward)  # before the start: no moment where a cancel is a KeyboardInterrupt here
    started.append(subprocess.Popen(argv))
    if asked:
        started[0].send_signal(signal.SIGINT)
    return started[0].wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
