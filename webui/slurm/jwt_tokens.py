# SPDX-License-Identifier: GPL-3.0-or-later
"""Slurm JWTs for slurmrestd: per-user HS256 tokens minted (PyJWT) from Slurm's own ``jwt_key``.

The portal mints a short-lived token per user from the key (``AuthAltParameters=jwt_key=...``), so every request
reaches slurmctld as that user: Slurm itself enforces who may cancel what.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Iterable

import jwt

from webui.slurm.errors import SlurmUnavailable

SAFE_USERNAME = re.compile(r"^[a-z_][a-z0-9_.-]{0,31}$")
DEFAULT_FORBIDDEN = frozenset({"root", "slurm"})
#: the only algorithm Slurm's auth/jwt accepts for its own key (``jwt_key``)
JWT_ALGORITHM = "HS256"


class TokenRefused(ValueError):
    """The portal will not mint a token for this name."""


def mint_jwt(
    key: bytes,
    username: str,
    *,
    lifetime: int = 600,
    now: int | None = None,
    forbidden: Iterable[str] = DEFAULT_FORBIDDEN,
) -> str:
    """Return an HS256 JWT with Slurm's claims ``sun``, ``iat`` and ``exp`` (what ``scontrol token`` mints)."""
    if not SAFE_USERNAME.fullmatch(username) or username in set(forbidden) | DEFAULT_FORBIDDEN:
        raise TokenRefused(f"refusing to mint a Slurm token for {username!r}")
    if len(key) < 16:
        raise TokenRefused("the Slurm JWT key is too short")
    if lifetime <= 0:
        raise TokenRefused("token lifetime must be positive")
    iat = int(time.time()) if now is None else now
    return jwt.encode({"sun": username, "iat": iat, "exp": iat + lifetime}, key, algorithm=JWT_ALGORITHM)


class TokenSource:
    """Mints and caches per-user tokens; re-reads the key file when it changes."""

    def __init__(self, key_file: str, *, lifetime: int = 600, forbidden: Iterable[str] = DEFAULT_FORBIDDEN):
        self.key_file = key_file
        self.lifetime = lifetime
        self.forbidden = frozenset(forbidden) | DEFAULT_FORBIDDEN
        self._lock = threading.Lock()
        self._key: bytes | None = None
        self._key_mtime: float | None = None
        self._tokens: dict[str, tuple[str, float]] = {}

    def _read_key(self) -> bytes:
        try:
            mtime = os.stat(self.key_file).st_mtime
            if self._key is None or mtime != self._key_mtime:
                with open(self.key_file, "rb") as fh:
                    self._key = fh.read()
                self._key_mtime = mtime
                self._tokens.clear()
        except OSError as exc:
            raise SlurmUnavailable(
                "The portal cannot read the Slurm JWT key; ask an administrator to check its permissions."
            ) from exc
        return self._key

    def token(self, username: str) -> str:
        with self._lock:
            key = self._read_key()
            now = time.time()
            cached = self._tokens.get(username)
            if cached and cached[1] - now > self.lifetime / 2:
                return cached[0]
            token = mint_jwt(key, username, lifetime=self.lifetime, now=int(now), forbidden=self.forbidden)
            self._tokens[username] = (token, now + self.lifetime)
            return token
