# SPDX-License-Identifier: GPL-3.0-or-later
"""Per-peer connection limit of the session front (:mod:`carme_runtime.front`; issue #27, item 10c).

Every user on the cluster can open TCP connections to any front port. A flood of idle connections from one peer
used to hold descriptors until the head timeout and delayed the owner's requests (12 s measured). The front now
counts, per peer address, the connections that have not presented the front key: above ``limit`` a new connection
from that peer is closed at once. A peer that has presented the key once (nginx on the portal host: the key is
added there) is trusted from then on and never counted, so no other peer's flood can reach its requests.

Runs inside the front's event loop (one thread): no locking.
"""

from __future__ import annotations

import asyncio

#: connections without the front key one peer address may hold at once
PEER_LIMIT = 8


class Slot:
    """One admitted connection of ``peer``; counted until it presents the key or ends."""

    def __init__(self, limit: PeerLimit, peer: str, counted: bool) -> None:
        self._limit = limit
        self.peer = peer
        self._counted = counted

    def keyed(self) -> None:
        """The connection presented the front key: its peer is trusted, the connection no longer counted."""
        self._limit.trusted.add(self.peer)
        self.release()

    def release(self) -> None:
        if self._counted:
            self._counted = False
            self._limit.uncount(self.peer)


class PeerLimit:
    """Counts connections without the front key per peer address; :meth:`admit` refuses the one over ``limit``."""

    def __init__(self, limit: int = PEER_LIMIT) -> None:
        if limit < 1:
            raise ValueError("peer_limit must be at least 1")
        self.limit = limit
        self.open: dict[str, int] = {}
        self.trusted: set[str] = set()

    def admit(self, peer: str) -> Slot | None:
        """A slot for a new connection from ``peer``, or None when it must be closed at once."""
        if peer in self.trusted:
            return Slot(self, peer, counted=False)
        held = self.open.get(peer, 0)
        if held >= self.limit:
            return None
        self.open[peer] = held + 1
        return Slot(self, peer, counted=True)

    def uncount(self, peer: str) -> None:
        held = self.open.get(peer, 0) - 1
        if held > 0:
            self.open[peer] = held
        else:
            self.open.pop(peer, None)


def peer_address(writer: asyncio.StreamWriter) -> str:
    """The remote address of a connection (without its port); ``""`` when unknown."""
    peer = writer.get_extra_info("peername")
    return str(peer[0]) if isinstance(peer, tuple) and peer else ""
