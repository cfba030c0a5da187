# SPDX-License-Identifier: GPL-3.0-or-later
"""Shared fixtures for every test directory. Keep this file small: fixtures live in tests/fixtures/."""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest

from tests.fixtures.demo import demo
from tests.fixtures.hostslurm import host_slurm

__all__ = ["demo", "host_slurm"]


def components_required() -> bool:
    """Under CI (CI=true) or CARME_REQUIRED=1 a test that cannot get its real component fails: no silent skips."""
    return os.environ.get("CARME_REQUIRED", "") == "1" or os.environ.get("CI", "").lower() in ("true", "1")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, None, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if report.skipped and components_required() and not hasattr(report, "wasxfail"):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped, but CI=true / CARME_REQUIRED=1 make skips failures: {reason}"
