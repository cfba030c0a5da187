"""Shared fixtures for every test directory. Keep this file small: fixtures live in tests/fixtures/."""

from tests.fixtures.demo import demo
from tests.fixtures.hostslurm import host_slurm

__all__ = ["demo", "host_slurm"]
