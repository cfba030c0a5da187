# SPDX-License-Identifier: GPL-3.0-or-later
"""A failed browser test leaves a screenshot of every open page next to the step screenshots."""

from __future__ import annotations

import contextlib
from collections.abc import Generator
from typing import Any

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    funcargs = getattr(item, "funcargs", {})
    demo = funcargs.get("demo") or getattr(funcargs.get("portal"), "demo", None)
    if demo is None:
        return
    for context in demo.browser.contexts:
        for page in context.pages:
            with contextlib.suppress(Exception):  # a closed or crashed page: nothing to show
                demo.steps.shot(page, f"FAILED-{item.name}")
