"""A job publishes the address its app bound to; the portal accepts it only for the job's own nodes."""

from __future__ import annotations

from webui.dns import resolve_addresses


def test_node_name_resolves_to_its_addresses() -> None:
    assert "127.0.0.1" in resolve_addresses("localhost")


def test_unknown_name_resolves_to_nothing() -> None:
    assert resolve_addresses("no-such-node.invalid") == frozenset()
