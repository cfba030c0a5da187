# SPDX-License-Identifier: GPL-3.0-or-later
"""Slurm's job list, read in full only when a job changed (issue 32).

The portal's cluster state holds every job slurmctld knows. With 10,000 jobs queued slurmrestd 24.11 answers
``GET /jobs`` with 77 MB in 4 to 11 s on the test bed (``bench/bench_queue.py``), longer than the portal's timeout:
every page showed "the scheduler is not reachable". slurmctld keeps the second of its last job change
(``last_update``) and, asked with ``update_time`` set to it, answers with no jobs when none changed since, in
milliseconds (what ``squeue -i`` uses). So the portal reads the list again only after a change.

The node list (2.3 MB and 0.2 s for 1,000 nodes) is read in full each time: 24.11's slurmrestd answers its
unchanged case with ``304 Not Modified`` and an error line in its log each time ("Failure to query nodes"), and under
the 200-user bench that path ended in the portal's 5 s timeout on 17 of 38 refreshes (cause not found).

Slurm's stamp counts seconds and the comparison is ``changed after``: a change in the same second as the read that
returned that stamp does not move it. A stamp is therefore trusted only once it is *settled*: until a full read that
began at least :data:`SETTLE_S` after the first read that returned the same stamp had come back (slurmctld had that
stamp before it answered, so by then its clock is past that second: the later read saw every change made in it, and
any change after it gives a later stamp), the list is asked for with ``update_time`` one second earlier, which
returns it in full. One or two extra full reads per change, whatever the clocks of the two machines say, as long as
they run at the same rate.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from collections.abc import Mapping
from typing import Any
from typing import Generic
from typing import TypeVar

from webui.slurm.client import SlurmClient

SETTLE_S = 1.5
T = TypeVar("T")


class ChangedList(Generic[T]):
    """One of slurmrestd's lists (the portal's: ``jobs``): the records parsed at its last full read, and the stamp
    that tells whether that read is still current."""

    def __init__(
        self,
        client: SlurmClient,
        what: str,
        parse: Callable[[Mapping[str, Any]], T],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self.what = what
        self._parse = parse
        self._clock = clock
        self._lock = threading.Lock()
        self._items: tuple[T, ...] = ()
        self._stamp: int | None = None  # Slurm's last_update of that read; None: none yet, or a version without it
        self._first_seen = 0.0  # when the first read that returned this stamp came back (this machine's clock)
        self._settled = False
        self.full_reads = 0
        self.unchanged_reads = 0

    def read(self, user: str) -> tuple[tuple[T, ...] | None, tuple[T, ...]]:
        """``(read now, current)``: the records parsed by this read and the current ones, the same tuple; ``read
        now`` is None when Slurm says nothing changed (current: those of the last read)."""
        with self._lock:
            since = None if self._stamp is None else (self._stamp if self._settled else self._stamp - 1)
            began = self._clock()
            parsed, stamp = self._client.changed(user, self.what, since, self._parse)
            came_back = self._clock()
            if parsed is None:
                self.unchanged_reads += 1
                return None, self._items
            items = tuple(parsed)
            del parsed
            if stamp is not None and stamp == self._stamp:
                self._settled = began - self._first_seen >= SETTLE_S
            else:
                self._first_seen, self._settled = came_back, False
            self._items, self._stamp = items, stamp
            self.full_reads += 1
            return items, items
