# SPDX-License-Identifier: GPL-3.0-or-later
"""carme_runtime.command_runner.SubprocessRunner: real programs, the meaning of ``subprocess.run(capture_output=True,
text=True)`` without importing :mod:`subprocess` (the epilog's budget)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from carme_runtime import command_runner
from carme_runtime.command_runner import RC_NOT_FOUND
from carme_runtime.command_runner import RC_TIMEOUT
from carme_runtime.command_runner import SubprocessRunner


def test_output_and_return_code() -> None:
    run = SubprocessRunner(timeout=10)
    assert run(["sh", "-c", "echo out; echo err >&2; exit 3"]) == (3, "out\n", "err\n")
    assert run(["true"]) == (0, "", "")


def test_killed_by_a_signal_returns_minus_the_signal() -> None:
    assert SubprocessRunner(timeout=10)(["sh", "-c", "kill -9 $$"])[0] == -9


def test_missing_program_is_127_not_an_exception(tmp_path: Path) -> None:
    rc, out, err = SubprocessRunner(timeout=10)(["carme-no-such-program-here"])
    assert (rc, out) == (RC_NOT_FOUND, "") and "carme-no-such-program-here" in err
    assert SubprocessRunner(timeout=10)([str(tmp_path / "missing")])[0] == RC_NOT_FOUND
    script = tmp_path / "no-interpreter"
    script.write_text("#!/nonexistent/interpreter\n")
    script.chmod(0o755)
    assert SubprocessRunner(timeout=10)([str(script)])[0] == RC_NOT_FOUND  # as subprocess's FileNotFoundError was
    with pytest.raises(ValueError):
        SubprocessRunner()([])


def test_a_hanging_program_is_killed_at_the_timeout() -> None:
    start = time.monotonic()
    # the grandchild keeps the pipes open: the runner must neither wait for it nor for the child's 30 s
    rc, out, err = SubprocessRunner(timeout=0.5)(["sh", "-c", "sleep 30 & exec sleep 30"])
    assert time.monotonic() - start < 10
    assert (rc, out) == (RC_TIMEOUT, "") and "timed out after 0.5 s" in err


def test_input_larger_than_a_pipe_goes_through_both_ways() -> None:
    text = "line\n" * 200_000  # 1 MB: more than a pipe holds, in and out at once
    assert SubprocessRunner(timeout=30)(["cat"], input_text=text) == (0, text, "")
    assert SubprocessRunner(timeout=10)(["cat"], input_text="") == (0, "", "")


def test_the_program_is_found_on_the_path_of_env(tmp_path: Path) -> None:
    (tmp_path / "carme-test-cmd").write_text('#!/bin/sh\necho found "$X"\n')
    (tmp_path / "carme-test-cmd").chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "X": "it"}
    assert SubprocessRunner(timeout=10)(["carme-test-cmd"], env=env) == (0, "found it\n", "")
    assert SubprocessRunner(timeout=10)(["carme-test-cmd"])[0] == RC_NOT_FOUND  # not on this process's PATH


def test_text_has_universal_newlines_and_replaces_bad_bytes() -> None:
    rc, out, _ = SubprocessRunner(timeout=10)(["printf", "a\\r\\nb\\rc\\377\\n"])
    assert (rc, out) == (0, "a\nb\nc\ufffd\n")


def test_no_descriptor_of_the_caller_reaches_the_program(tmp_path: Path) -> None:
    with open(tmp_path / "secret", "w") as held:
        rc, out, _ = SubprocessRunner(timeout=10)(["sh", "-c", "ls /proc/$$/fd"])
        assert rc == 0 and str(held.fileno()) not in out.split()
    assert sorted(out.split()) == ["0", "1", "2"]


def test_the_runner_leaves_no_descriptor_open() -> None:
    before = len(os.listdir("/proc/self/fd"))
    run = SubprocessRunner(timeout=0.2)
    for argv in (["true"], ["carme-no-such-program-here"], ["sleep", "5"]):
        run(argv, input_text="x")
        run(argv)
    assert len(os.listdir("/proc/self/fd")) == before


def test_the_program_gets_sigpipe_back_at_its_default() -> None:
    import signal

    assert command_runner._DEFAULT_SIGNALS == (signal.SIGPIPE, signal.SIGXFSZ)
    # with SIGPIPE ignored (Python's own setting) yes would print "Broken pipe" and fail
    assert SubprocessRunner(timeout=10)(["sh", "-c", "yes | head -1"]) == (0, "y\n", "")
