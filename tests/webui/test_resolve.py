# SPDX-License-Identifier: GPL-3.0-or-later
"""A job publishes the address its app bound to; the portal accepts it only for the job's own nodes."""

from __future__ import annotations

import socket
import time

import cachetools
import pytest

from webui.slurm.dns import resolve_addresses


def test_node_name_resolves_to_its_addresses() -> None:
    assert "127.0.0.1" in resolve_addresses("localhost")


def test_unknown_name_resolves_to_nothing() -> None:
    assert resolve_addresses("no-such-node.invalid") == frozenset()


def test_a_name_that_failed_to_resolve_is_asked_again_soon(monkeypatch: pytest.MonkeyPatch) -> None:
    """A resolver's hiccup must not hide a node's address for the minute good answers are kept (Connect led to 404
    "not ready" for 60 s on the demo): a failure is kept 2 s, then the name is asked again."""
    from webui.slurm import dns

    answers: list[list[tuple[object, ...]]] = [[], [(2, 1, 6, "", ("10.89.0.7", 0))]]
    asked: list[str] = []

    def getaddrinfo(name: str, *_args: object, **_kw: object) -> list[tuple[object, ...]]:
        asked.append(name)
        found = answers.pop(0)
        if not found:
            raise socket.gaierror("Temporary failure in name resolution")
        return found

    monkeypatch.setattr(dns.socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(dns, "_failed", cachetools.TTLCache(maxsize=8, ttl=0.2))
    monkeypatch.setattr(dns, "_resolved", cachetools.TTLCache(maxsize=8, ttl=60))
    assert resolve_addresses("node1") == frozenset()
    assert resolve_addresses("node1") == frozenset() and asked == ["node1"]  # within the failure's 0.2 s: not asked
    time.sleep(0.3)
    assert resolve_addresses("node1") == frozenset({"10.89.0.7"})
    assert resolve_addresses("node1") == frozenset({"10.89.0.7"}) and asked == ["node1", "node1"]  # kept
