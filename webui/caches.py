# SPDX-License-Identifier: GPL-3.0-or-later
"""The portal's in-process caches (one set per gunicorn worker; none is made before the fork but by create_app).

* :class:`SnapshotCache`: one value (the scheduler's state, Slurm's reservations, Zabbix's health), fetched at most
  once per interval, by one caller while the others wait; a failed refresh keeps the last good value, flagged.
* :class:`TTLMap`: values per key, each kept for its time (cachetools ``TLRUCache`` behind a lock).
* :class:`SingleFlight`: values per key, fetched by one caller at a time while the others wait for its result (the
  account-wide month-to-date jobs, the associations): the number of accounting queries depends on the accounts, not
  on the users asking.
* :class:`StaleWhileRefresh`: what the dashboard shows of the GPU-hours. A request gets the last known value at once;
  when it is older than ``fresh`` one background refresh per key is started (a small thread pool, created lazily in
  the process that uses it: never in a gunicorn master before the fork). Only a key's very first look waits, at most
  ``first_wait``. Decisions (starting a GPU session, reservations) never read it.
* :func:`view_cache`: the worker's :class:`TTLMap` of what pages show and admins rarely change (:func:`cached_view`).
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
from typing import Any
from typing import Generic
from typing import TypeVar

import cachetools
from flask import current_app

T = TypeVar("T")

log = logging.getLogger(__name__)


class SnapshotCache(Generic[T]):
    """One value fetched at most once per ``ttl`` seconds per process.

    Thread-safe and single-flight: while one caller refreshes, the others wait for its result instead of issuing
    their own queries. A refresh that fails with one of ``errors`` is cached for ``ttl`` too (an outage must not turn
    into a query storm): what it serves is ``on_error(last good value or None, exception)``, typically that value
    flagged with the error. Other exceptions reach the caller.
    """

    def __init__(
        self,
        fetch: Callable[[], T],
        ttl: float,
        *,
        on_error: Callable[[T | None, Exception], T],
        errors: tuple[type[Exception], ...] = (Exception,),
        clock: Callable[[], float] = time.monotonic,
    ):
        self._fetch = fetch
        self._on_error = on_error
        self._errors = errors
        self.ttl = ttl
        self._clock = clock
        self._cond = threading.Condition()
        self._value: T | None = None
        self._stamp = 0.0
        self._refreshing = False
        self._generation = 0  # bumped by invalidate(): a refresh that began before it is stale when it lands
        self.refreshes = 0

    def get(self, max_age: float | None = None) -> T:
        """The cached value, refreshed when older than ``ttl`` (or than ``max_age`` when that is smaller)."""
        limit = self.ttl if max_age is None else min(self.ttl, max_age)
        with self._cond:
            while True:
                if self._value is not None and self._clock() - self._stamp < limit:
                    return self._value
                if not self._refreshing:
                    self._refreshing = True
                    generation = self._generation
                    break
                self._cond.wait(timeout=30)
        new: T | None = None
        try:
            new = self._fetch()
        except self._errors as exc:
            new = self._on_error(self._value, exc)
        finally:
            with self._cond:
                if new is not None:
                    self._value = new
                    # invalidated while this refresh ran (a job submitted meanwhile may be missing): served to the
                    # callers that waited for it, but the next get() fetches again
                    self._stamp = self._clock() if generation == self._generation else -self.ttl - 1.0
                    self.refreshes += 1
                self._refreshing = False
                self._cond.notify_all()
        assert new is not None
        return new

    def last(self) -> T | None:
        """The value served last, without asking anyone (None before the first fetch)."""
        with self._cond:
            return self._value

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


def view_cache() -> TTLMap:
    """The worker's cache of what pages show and admins rarely change (made by create_app).

    The news for ``SCHEDULER_CACHE_SECONDS``, a user's storage quota for ``QUOTA_CACHE_SECONDS``. The admin views
    clear it when they change the news; decisions (start, limits) never read it.
    """
    cache: TTLMap = current_app.extensions["carme_view_cache"]
    return cache


def cached_view(key: tuple[Any, ...], compute: Callable[[], T], ttl: float | None = None) -> T:
    """``compute()``'s value, kept in :func:`view_cache` under ``key`` for ``ttl`` seconds (else the cache's own)."""
    hit, value = view_cache().get(key)
    if hit:
        return value  # type: ignore[no-any-return]
    value = compute()
    view_cache().put(key, value, ttl)
    return value
