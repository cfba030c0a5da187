# SPDX-License-Identifier: GPL-3.0-or-later
"""``python -m carme_admin.child PROGRAM ARGS...``: run ansible-playbook so that nothing of it outlives carme.

ansible-runner starts its command with pexpect, in a session and process group of its own that ignores SIGHUP.
``carme_admin.playbook.write_child_wrapper`` starts this module there under ``setpriv --pdeathsig TERM``: when carme
dies (SIGKILL of a lost terminal's session included) this process gets SIGTERM and kills its whole process group
with SIGKILL: ansible-playbook and the worker processes it forked for the tasks running (measured on the demo:
with only ansible-playbook under --pdeathsig, the worker of the task then running lived on). As under pexpect
alone, SIGHUP is ignored and SIGINT (ansible-runner's cancel, after a Ctrl-C) goes to ansible-playbook, which stops
as it does at a Ctrl-C. The exit status is ansible-playbook's.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from types import FrameType


def _end_group(signum: int, frame: FrameType | None) -> None:
    os.killpg(os.getpgrp(), signal.SIGKILL)


def main(argv: list[str]) -> int:
    if not argv:
        sys.stderr.write("usage: python -m carme_admin.child PROGRAM [ARGS...]\n")
        return 2
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
