"""Per-worker caches for the GPU-hours used this month (Slurm accounting is slow: ~0.3-0.6 s per slurmdbd query).

* :class:`SingleFlight`: values kept ``ttl`` seconds per key, fetched by one caller at a time while the others wait
  for its result (the account-wide month-to-date jobs, the associations): the number of accounting queries depends
  on the accounts, not on the users asking.
* :class:`StaleWhileRefresh`: what the dashboard shows. A request gets the last known value at once; when it is older
  than ``fresh`` one background refresh per key is started (a small thread pool, created lazily in the process that
  uses it: never in a gunicorn master before the fork). Only a key's very first look waits, at most ``first_wait``.

Decisions (starting a GPU session, reservations) never read :class:`StaleWhileRefresh`.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections.abc import Callable
from collections.abc import Hashable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Generic
from typing import TypeVar

T = TypeVar("T")

log = logging.getLogger(__name__)


class SingleFlight(Generic[T]):
    """``get(key, fetch)``: the value stored less than ``ttl`` seconds ago, else ``fetch()``'s, fetched once for all
    concurrent callers. A failed fetch (exception) stores nothing and raises to the caller that ran it; the callers
    that waited then try themselves (one at a time)."""

    def __init__(
        self, ttl: float, *, jitter: float = 0.0, clock: Callable[[], float] = time.monotonic, maxsize: int = 1024
    ):
        self.ttl = ttl
        self.jitter = jitter
        self.maxsize = maxsize
        self._clock = clock
        self._cond = threading.Condition()
        self._data: dict[Hashable, tuple[T, float, float]] = {}  # key -> (value, stored at, keep for)
        self._busy: set[Hashable] = set()
        self.fetches = 0

    def get(self, key: Hashable, fetch: Callable[[], T], *, max_age: float | None = None) -> T:
        with self._cond:
            while True:
                item = self._data.get(key)
                if item is not None:
                    limit = item[2] if max_age is None else min(item[2], max_age)
                    if self._clock() - item[1] < limit:
                        return item[0]
                if key not in self._busy:
                    self._busy.add(key)
                    break
                self._cond.wait(timeout=30)
        try:
            self.fetches += 1
            value = fetch()
        except BaseException:
            with self._cond:
                self._busy.discard(key)
                self._cond.notify_all()
            raise
        keep = self.ttl * (1.0 - self.jitter * random.random())
        with self._cond:
            self._data.pop(key, None)  # re-inserted last: the dict's order is the order of storing
            self._data[key] = (value, self._clock(), keep)
            while len(self._data) > self.maxsize:
                del self._data[next(iter(self._data))]
            self._busy.discard(key)
            self._cond.notify_all()
        return value

    def clear(self) -> None:
        with self._cond:
            self._data.clear()


@dataclass(frozen=True)
class Shown:
    """A value for display: ``value`` ``None`` when unknown (never fetched yet, or Slurm failed for too long);
    ``as_of`` the wall-clock time (epoch) it was read from Slurm."""

    value: float | None
    as_of: float | None


@dataclass
class _Entry:
    value: float | None
    as_of: float | None  # wall clock of the value
    stamp: float  # monotonic clock of the value (-inf when none)
    next_at: float  # monotonic clock from which a request starts a refresh


class StaleWhileRefresh:
    """Last known values, refreshed in the background (see the module's docstring).

    ``fresh``: a value younger than this is served without a refresh (kept between ``(1 - jitter) * fresh`` and
    ``fresh``, at random, so the keys stored together are not refreshed together); ``failure``: after a failed
    refresh (``fetch`` returned ``None`` or raised) the next one starts no sooner than this; ``max_stale``: a last
    good value older than this is shown as unknown; ``first_wait``: how long a key's first look waits for its value.
    """

    def __init__(
        self,
        fresh: float,
        *,
        failure: float = 10.0,
        max_stale: float = 300.0,
        first_wait: float = 2.0,
        jitter: float = 0.25,
        workers: int = 2,
        maxsize: int = 4096,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ):
        self.fresh = fresh
        self.failure = failure
        self.max_stale = max(max_stale, fresh)
        self.first_wait = first_wait
        self.jitter = jitter
        self.workers = workers
        self.maxsize = maxsize
        self._clock = clock
        self._wall = wall
        self._lock = threading.Lock()
        self._entries: dict[Hashable, _Entry] = {}
        self._inflight: dict[Hashable, threading.Event] = {}
        self._pool: ThreadPoolExecutor | None = None
        self._pool_pid = 0
        self.refreshes = 0

    def get(self, key: Hashable, fetch: Callable[[], float | None]) -> Shown:
        with self._lock:
            now = self._clock()
            entry = self._entries.get(key)
            if entry is None or now >= entry.next_at:
                self._start(key, fetch)
            if entry is not None:
                return self._shown(entry, now)
            done = self._inflight.get(key)
        if done is not None:
            done.wait(self.first_wait)
        with self._lock:
            entry = self._entries.get(key)
            return Shown(None, None) if entry is None else self._shown(entry, self._clock())

    def wait_idle(self, timeout: float = 5.0) -> bool:
        """True once no refresh is in flight (tests)."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                pending = list(self._inflight.values())
            if not pending:
                return True
            left = deadline - time.monotonic()
            if left <= 0 or not pending[0].wait(left):
                return False

    def _shown(self, entry: _Entry, now: float) -> Shown:
        if entry.value is None or now - entry.stamp > self.max_stale:
            return Shown(None, None)
        return Shown(entry.value, entry.as_of)

    def _start(self, key: Hashable, fetch: Callable[[], float | None]) -> None:
        """Under the lock: one refresh per key at a time."""
        if key in self._inflight:
            return
        if self._pool is None or self._pool_pid != os.getpid():  # lazily, in the process that serves requests
            self._pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="carme-usage")
            self._pool_pid = os.getpid()
        done = threading.Event()
        self._inflight[key] = done
        self._pool.submit(self._refresh, key, fetch, done)

    def _refresh(self, key: Hashable, fetch: Callable[[], float | None], done: threading.Event) -> None:
        value: float | None = None
        try:
            value = fetch()
        except Exception:  # a refresh must never kill the pool's thread; shown as a failure
            log.exception("GPU-hours refresh for %r failed", key)
        try:
            with self._lock:
                self.refreshes += 1
                now = self._clock()
                old = self._entries.pop(key, None)
                if value is not None:
                    keep = self.fresh * (1.0 - self.jitter * random.random())
                    self._entries[key] = _Entry(value, self._wall(), now, now + keep)
                elif old is not None:
                    self._entries[key] = _Entry(old.value, old.as_of, old.stamp, now + self.failure)
                else:
                    self._entries[key] = _Entry(None, None, float("-inf"), now + self.failure)
                while len(self._entries) > self.maxsize:
                    del self._entries[next(iter(self._entries))]
                self._inflight.pop(key, None)
        finally:
            done.set()

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
