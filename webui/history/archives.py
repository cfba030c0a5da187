# SPDX-License-Identifier: GPL-3.0-or-later
"""The job history from before an upgrade: ``sacct --json`` archives (the backup part ``slurm-history``,
docs/upgrade.md "The job-history archive") in ``HISTORY_ARCHIVE_DIR``, ``*.json.gz``, read-only.

Slurm 24.11 starts with a fresh accounting database (it refuses 22.05's), so the jobs from before are only in such
an archive. Each file is read once per process and kept while its mtime and size stay: only each user's jobs as
:class:`~webui.slurm.records.AccountJob` (parsed by the same code as the live accounting, any data_parser version,
GPU-hours by the one rule), not the JSON. A file over ``HISTORY_ARCHIVE_MAX_BYTES`` once unpacked, or one that is
not gzipped ``sacct --json``, is an error line on the page and in the log, never a failed page.
"""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flask import current_app

from webui.slurm.records import AccountJob
from webui.slurm.records import parse_account_job
from webui.slurm.scheduler import job_gpu_hours

#: how many archives one directory may hold (the first, by name, are read)
MAX_ARCHIVES = 16
DEFAULT_LABEL = "Before the upgrade"


class ArchiveError(Exception):
    """The file is not a readable ``sacct --json`` archive."""


@dataclass(frozen=True)
class Archive:
    name: str
    label: str  # "Before the upgrade (Slurm 22.05.8)"
    jobs_by_user: Mapping[str, tuple[AccountJob, ...]]  # newest start first


@dataclass(frozen=True)
class UserArchive:
    name: str
    label: str
    jobs: tuple[AccountJob, ...]


_lock = threading.Lock()
#: path -> ((mtime_ns, size), the archive or its error): only files present at the last look
_cache: dict[str, tuple[tuple[int, int], Archive | ArchiveError]] = {}


def read_archive(path: Path, max_bytes: int, label: str = DEFAULT_LABEL) -> Archive:
    """One archive: gzipped ``sacct --json`` (data_parser v0.0.38 of Slurm 22.05 or v0.0.40+), each job under its
    user. A job still running when it was written counts its GPU-hours up to the file's mtime."""
    try:
        written = path.stat().st_mtime
        with gzip.open(path, "rb") as fh:
            data = fh.read(max_bytes + 1)
        if len(data) > max_bytes:
            raise ArchiveError(f"larger than {max_bytes} bytes unpacked (HISTORY_ARCHIVE_MAX_BYTES)")
        doc = json.loads(data)
    except (OSError, EOFError, ValueError) as exc:  # gzip.BadGzipFile is an OSError, JSON and UTF-8 errors ValueErrors
        raise ArchiveError(str(exc) or type(exc).__name__) from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list):
        raise ArchiveError("not sacct --json output (no 'jobs' list)")
    by_user: dict[str, list[AccountJob]] = {}
    for raw in doc["jobs"]:
        if isinstance(raw, dict):
            job = parse_account_job(raw, job_gpu_hours(raw, now=written))
            by_user.setdefault(job.user, []).append(job)
    newest_first = {u: tuple(sorted(js, key=_newest, reverse=True)) for u, js in by_user.items()}
    release = _release(doc)
    return Archive(path.name, f"{label} (Slurm {release})" if release else label, newest_first)


def _newest(job: AccountJob) -> tuple[int, int]:
    return job.start_time, job.job_id


def _release(doc: Mapping[str, Any]) -> str:
    meta = doc.get("meta")
    slurm = meta.get("slurm") or meta.get("Slurm") if isinstance(meta, dict) else None
    release = slurm.get("release") if isinstance(slurm, dict) else None
    return release if isinstance(release, str) else ""


def _archive(path: Path, max_bytes: int, label: str) -> Archive | ArchiveError:
    """The cached archive or error of ``path``, read again when its mtime or size changed."""
    st = path.stat()
    key = (st.st_mtime_ns, st.st_size)
    with _lock:
        cached = _cache.get(str(path))
    if cached is not None and cached[0] == key:
        return cached[1]
    try:
        result: Archive | ArchiveError = read_archive(path, max_bytes, label)
    except ArchiveError as exc:
        result = exc
        current_app.logger.error("job-history archive %s cannot be read: %s", path, exc)
    with _lock:
        _cache[str(path)] = (key, result)
    return result


def user_archives(username: str) -> tuple[list[UserArchive], list[str]]:
    """The user's archived jobs, per archive (by file name), and an error line per archive that cannot be read.
    Only the user's own jobs (the job record's user) ever leave this function."""
    directory = str(current_app.config.get("HISTORY_ARCHIVE_DIR") or "")
    if not directory:
        return [], []
    try:
        paths = sorted(p for p in Path(directory).glob("*.json.gz") if p.is_file())
    except OSError as exc:
        current_app.logger.error("job-history archives in %s cannot be listed: %s", directory, exc)
        return [], [f"the archives of the job history before the upgrade cannot be listed ({exc.strerror})"]
    max_bytes = int(current_app.config.get("HISTORY_ARCHIVE_MAX_BYTES") or 0)
    label = str(current_app.config.get("HISTORY_ARCHIVE_LABEL") or DEFAULT_LABEL)
    found: list[UserArchive] = []
    errors: list[str] = []
    for path in paths[:MAX_ARCHIVES]:
        try:
            result = _archive(path, max_bytes, label)
        except OSError as exc:  # removed or unreadable between the listing and the read
            result = ArchiveError(exc.strerror or str(exc))
        if isinstance(result, ArchiveError):
            errors.append(f"archive {path.name} cannot be read: {result}")
        elif jobs := result.jobs_by_user.get(username):
            found.append(UserArchive(result.name, result.label, jobs))
    if len(paths) > MAX_ARCHIVES:
        errors.append(f"only the first {MAX_ARCHIVES} of {len(paths)} archives are shown")
    with _lock:  # forget files that are gone, so the cache holds at most the directory's archives
        for gone in set(_cache) - {str(p) for p in paths[:MAX_ARCHIVES]}:
            _cache.pop(gone, None)
    return found, errors
