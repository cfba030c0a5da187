"""Node names to IP addresses, cached (a proxied request must not cost a DNS lookup each)."""

from __future__ import annotations

import socket
import threading

import cachetools

_RESOLVE_TTL_S = 60.0


@cachetools.cached(cachetools.TTLCache(maxsize=1024, ttl=_RESOLVE_TTL_S), lock=threading.Lock())
def resolve_addresses(name: str) -> frozenset[str]:
    """IP addresses of a node name (cached for a minute; empty when it does not resolve)."""
    try:
        infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
        return frozenset(str(info[4][0]) for info in infos)
    except (OSError, UnicodeError):
        return frozenset()
