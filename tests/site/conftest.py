# SPDX-License-Identifier: GPL-3.0-or-later
"""The `site` marker (tests/site/test_site.py; CARME_SITE_TESTS=1: `make test-site`, a line of `make test`)."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "site: the site scenario over SSH (CARME_SITE_TESTS=1: make test-site)")
