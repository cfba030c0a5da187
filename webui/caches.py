"""The portal's in-process caches: the shared, single-flight scheduler state and TTL maps."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from collections.abc import Hashable
from typing import Any

import cachetools

from webui.slurm.errors import SlurmError
from webui.slurm.state import ClusterState


class StateCache:
    """Scheduler state fetched at most once per ``ttl`` seconds per process.

    Thread-safe and single-flight: while one request refreshes, the others
    wait for its result instead of issuing their own queries. A failed refresh
    is cached for ``ttl`` too (an outage must not turn into a query storm) and
    keeps the last good data, flagged with the error.
    """

    def __init__(
        self,
        fetch: Callable[[], ClusterState],
        ttl: float,
        clock: Callable[[], float] = time.monotonic,
        fallback: Callable[[], ClusterState | None] | None = None,
    ):
        self._fetch = fetch
        # on a failed refresh: the last good state another process fetched, used when newer than this one's own
        self._fallback = fallback
        self.ttl = ttl
        self._clock = clock
        self._cond = threading.Condition()
        self._state: ClusterState | None = None
        self._stamp = 0.0
        self._refreshing = False
        self._generation = 0  # bumped by invalidate(): a refresh that began before it is stale when it lands
        self.refreshes = 0

    def get(self, max_age: float | None = None) -> ClusterState:
        """The cached state, refreshed when older than ``ttl`` (or than ``max_age`` when that is smaller)."""
        limit = self.ttl if max_age is None else min(self.ttl, max_age)
        with self._cond:
            while True:
                if self._state is not None and self._clock() - self._stamp < limit:
                    return self._state
                if not self._refreshing:
                    self._refreshing = True
                    generation = self._generation
                    break
                self._cond.wait(timeout=30)
        new: ClusterState | None = None
        try:
            new = self._fetch()
        except SlurmError as exc:
            old = self._state or ClusterState()
            shared = self._fallback() if self._fallback is not None else None
            if shared is not None and shared.fetched_at > old.fetched_at:
                old = shared
            new = ClusterState(old.jobs, old.nodes, old.partitions, old.fetched_at, error=str(exc))
        finally:
            with self._cond:
                if new is not None:
                    self._state = new
                    # invalidated while this refresh ran (a job submitted meanwhile may be missing): served to the
                    # callers that waited for it, but the next get() fetches again
                    self._stamp = self._clock() if generation == self._generation else -self.ttl - 1.0
                    self.refreshes += 1
                self._refreshing = False
                self._cond.notify_all()
        assert new is not None
        return new

    def invalidate(self) -> None:
        with self._cond:
            self._stamp = -self.ttl - 1.0
            self._generation += 1


_MISS = object()


class TTLMap:
    """Values kept for ``ttl`` seconds (or the ``ttl`` given to :meth:`put`), thread-safe: a cachetools
    ``TLRUCache`` (per-item expiry, least recently used out first beyond ``maxsize``) behind a lock.

    ``jitter``: each value is kept between ``(1 - jitter) * ttl`` and ``ttl``, at random, so values stored at the same
    moment (every user's quota after a restart) do not all expire, and get fetched again, at the same moment.
    """

    def __init__(
        self, ttl: float, clock: Callable[[], float] = time.monotonic, *, jitter: float = 0.0, maxsize: int = 4096
    ):
        self.ttl = ttl
        self.jitter = jitter
        self._lock = threading.Lock()
        # the value is stored with how long to keep it; ttu (time to use) turns that into the expiry time
        self._data: cachetools.TLRUCache[Hashable, tuple[Any, float]] = cachetools.TLRUCache(
            maxsize=maxsize, ttu=lambda _key, item, now: now + item[1], timer=clock
        )

    def get(self, key: Hashable) -> tuple[bool, Any]:
        with self._lock:
            item = self._data.get(key, _MISS)
        if item is _MISS:
            return False, None
        assert isinstance(item, tuple)
        return True, item[0]

    def put(self, key: Hashable, value: Any, ttl: float | None = None) -> None:
        keep = self.ttl if ttl is None else ttl
        if self.jitter:
            keep *= 1.0 - self.jitter * random.random()
        with self._lock:
            self._data[key] = (value, keep)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
