# SPDX-License-Identifier: GPL-3.0-or-later
"""Node names to IP addresses, cached (a proxied request must not cost a DNS lookup each)."""

from __future__ import annotations

import socket
import threading

import cachetools

_RESOLVE_TTL_S = 60.0
#: a name that did not resolve is asked again this soon: a resolver's hiccup (a restarting DNS server) must not make
#: every session on that node look "not ready" for a minute (seen on the demo: Connect led to 404s for 60 s)
_FAILED_TTL_S = 2.0

_resolved: cachetools.TTLCache[str, frozenset[str]] = cachetools.TTLCache(maxsize=1024, ttl=_RESOLVE_TTL_S)
_failed: cachetools.TTLCache[str, bool] = cachetools.TTLCache(maxsize=1024, ttl=_FAILED_TTL_S)
_lock = threading.Lock()


def resolve_addresses(name: str) -> frozenset[str]:
    """IP addresses of a node name (cached for a minute; empty when it does not resolve, cached for 2 s)."""
    with _lock:
        hit = _resolved.get(name)
        if hit is not None:
            return hit
        if name in _failed:
            return frozenset()
    try:
        addresses = frozenset(str(info[4][0]) for info in socket.getaddrinfo(name, None, type=socket.SOCK_STREAM))
    except (OSError, UnicodeError):
        addresses = frozenset()
    with _lock:
        if addresses:
            _resolved[name] = addresses
        else:
            _failed[name] = True
    return addresses
