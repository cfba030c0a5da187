# SPDX-License-Identifier: GPL-3.0-or-later
"""BeeGFS user quotas: ``beegfs-ctl --getquota --uid <user> --csv`` and its output.

The CSV (BeeGFS 7.4) has a header line ``name,id,size,hard,files,hard`` and one line per user: bytes used, byte
limit, files (chunk files) used, file limit; ``unlimited`` where no limit is set. Parsed here so the portal can show
storage next to GPU-hours; tested against the stand-in ``tests/fixtures/bin/beegfs-ctl`` (the real tool is not
obtainable here).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from carme_runtime.command_runner import Runner


class StorageQuotaError(ValueError):
    """Output that is not what ``beegfs-ctl --getquota --csv`` prints."""


class StorageQuota:
    __slots__ = ("files_limit", "files_used", "name", "size_limit", "size_used", "uid")

    def __init__(
        self, name: str, uid: int, size_used: int, size_limit: int | None, files_used: int, files_limit: int | None
    ) -> None:
        self.name = name
        self.uid = uid
        self.size_used = size_used
        self.size_limit = size_limit
        self.files_used = files_used
        self.files_limit = files_limit

    def __repr__(self) -> str:
        size = f"{self.size_used}/{self.size_limit}"
        return f"StorageQuota({self.name!r}, size={size}, files={self.files_used}/{self.files_limit})"

    @property
    def percent(self) -> int | None:
        if not self.size_limit:
            return None
        return min(100, round(100 * self.size_used / self.size_limit))


def getquota_argv(user: str, prefix: Sequence[str] = ("beegfs-ctl",)) -> list[str]:
    return [*prefix, "--getquota", "--uid", user, "--csv"]


def _limit(value: str) -> int | None:
    return None if value.strip().lower() == "unlimited" else int(value)


def parse_getquota_csv(text: str) -> list[StorageQuota]:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines or [c.strip() for c in lines[0].split(",")][:3] != ["name", "id", "size"]:
        raise StorageQuotaError("beegfs-ctl --getquota --csv: no 'name,id,size,...' header")
    out = []
    for line in lines[1:]:
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != 6:
            raise StorageQuotaError(f"beegfs-ctl --getquota --csv: 6 columns expected: {line[:80]!r}")
        try:
            out.append(
                StorageQuota(cells[0], int(cells[1]), int(cells[2]), _limit(cells[3]), int(cells[4]), _limit(cells[5]))
            )
        except ValueError as exc:
            raise StorageQuotaError(f"beegfs-ctl --getquota --csv: {exc}") from exc
    return out


def user_quota(user: str, runner: Runner, prefix: Sequence[str] = ("beegfs-ctl",)) -> StorageQuota | None:
    """The user's quota line, or None when there is none; raises :class:`StorageQuotaError` when the tool fails."""
    rc, out, err = runner(getquota_argv(user, prefix))
    if rc != 0:
        raise StorageQuotaError(f"beegfs-ctl rc={rc}: {err.strip()[:200]}")
    for quota in parse_getquota_csv(out):
        if quota.name == user:
            return quota
    return None
