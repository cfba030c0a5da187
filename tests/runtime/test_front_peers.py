# SPDX-License-Identifier: GPL-3.0-or-later
"""The front's per-peer count of connections without the key (carme_runtime.front_peers), without sockets."""

from __future__ import annotations

import pytest

from carme_runtime.front_peers import PeerLimit


def test_a_peer_gets_limit_places_and_a_released_one_back() -> None:
    peers = PeerLimit(2)
    first, second = peers.admit("10.0.0.9"), peers.admit("10.0.0.9")
    assert first is not None and second is not None
    assert peers.admit("10.0.0.9") is None  # over the limit: closed at once
    assert peers.admit("10.0.0.1") is not None  # another peer is not affected
    first.release()
    first.release()  # twice changes nothing
    assert peers.open["10.0.0.9"] == 1
    assert peers.admit("10.0.0.9") is not None


def test_the_key_frees_the_place_and_trusts_the_peer() -> None:
    peers = PeerLimit(1)
    slot = peers.admit("10.0.0.1")
    assert slot is not None and peers.admit("10.0.0.1") is None
    slot.keyed()
    slot.release()  # the connection ends later: no double release
    assert "10.0.0.1" not in peers.open
    held = [peers.admit("10.0.0.1") for _ in range(10)]
    assert all(s is not None for s in held) and "10.0.0.1" not in peers.open


def test_the_limit_is_at_least_one() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        PeerLimit(0)
