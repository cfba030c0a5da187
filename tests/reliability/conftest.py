# SPDX-License-Identifier: GPL-3.0-or-later
"""The reliability suite's fixtures live in tests/fixtures/reliability.py."""

from tests.fixtures.reliability import alice_on_node

__all__ = ["alice_on_node"]
