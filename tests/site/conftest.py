# SPDX-License-Identifier: GPL-3.0-or-later
"""The `site` marker (tests/site/test_site.py, opt-in with CARME_SITE_TESTS=1: `make test-site`)."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "site: the site scenario over SSH (opt-in, CARME_SITE_TESTS=1, make test-site)")
