"""A small slurmrestd (OpenAPI v0.0.38) client: urllib for HTTP, PyJWT for the tokens.

The portal mints a short-lived HS256 JWT per user from Slurm's ``jwt_key``
(``AuthAltParameters=jwt_key=...``), so every request reaches slurmctld as
that user: Slurm itself enforces who may cancel what. No shell, no root.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from typing import Any

import jwt

API = "/slurm/v0.0.38"
API_DB = "/slurmdb/v0.0.38"

SAFE_USERNAME = re.compile(r"^[a-z_][a-z0-9_.-]{0,31}$")
DEFAULT_FORBIDDEN = frozenset({"root", "slurm"})


class SlurmError(Exception):
    """Slurm answered but refused or failed the request. ``str()`` is fit for users."""

    def __init__(self, message: str, *, status: int | None = None, errors: list[Any] | None = None):
        super().__init__(message)
        self.status = status
        self.errors = errors or []


class SlurmUnavailable(SlurmError):
    """slurmrestd or slurmctld cannot be reached right now."""


class TokenRefused(ValueError):
    """The portal will not mint a token for this name."""


#: the only algorithm Slurm's auth/jwt accepts for its own key (``jwt_key``), and the only one decoded here
JWT_ALGORITHM = "HS256"


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


def decode_jwt(key: bytes, token: str, *, now: float | None = None) -> dict[str, Any]:
    """Verify the signature (HS256 only), that ``exp`` lies ahead and that ``sun`` is there; return the claims.

    ``ValueError`` for a token Slurm would refuse (PyJWT's message: bad signature, expired, other ``alg``).
    ``now``: check ``exp`` against this time instead of the clock (tests).
    """
    leeway = 0.0 if now is None else time.time() - now  # PyJWT checks exp <= clock - leeway
    try:
        claims: dict[str, Any] = jwt.decode(
            token, key, algorithms=[JWT_ALGORITHM], options={"require": ["exp", "sun"]}, leeway=leeway
        )
    except jwt.InvalidTokenError as exc:
        raise ValueError(f"Slurm token refused: {exc}") from exc
    return claims


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


def _error_text(errors: list[Any]) -> str:
    parts = []
    for err in errors:
        if isinstance(err, Mapping):
            text = str(err.get("error") or err.get("description") or "")
            code = err.get("error_number", err.get("error_code"))
            parts.append(f"{text} (code {code})" if code not in (None, 0) else text)
        else:
            parts.append(str(err))
    return "; ".join(p for p in parts if p) or "unknown error"


class SlurmClient:
    """One slurmrestd endpoint. Each call names the Slurm user it acts as."""

    def __init__(self, base_url: str, tokens: TokenSource, *, timeout: float = 5.0):
        parsed = urllib.parse.urlsplit(base_url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"SLURMRESTD_URL must be http(s)://host:port, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.tokens = tokens
        self.timeout = timeout
        self.queries = 0  # requests issued, for the benchmark
        self._count_lock = threading.Lock()

    def request(self, method: str, path: str, user: str, body: Mapping[str, Any] | None = None) -> dict[str, Any]:
        try:
            token = self.tokens.token(user)
        except TokenRefused as exc:
            raise SlurmError(str(exc)) from exc
        data = None if body is None else json.dumps(body).encode("utf-8")
        req = urllib.request.Request(self.base_url + path, data=data, method=method)
        req.add_header("X-SLURM-USER-NAME", user)
        req.add_header("X-SLURM-USER-TOKEN", token)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        with self._count_lock:
            self.queries += 1
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                raw = resp.read()
                status = resp.status
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            status = exc.code
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            reason = getattr(exc, "reason", exc)
            raise SlurmUnavailable(f"The scheduler is not reachable right now ({reason}).") from exc
        try:
            doc = json.loads(raw) if raw else {}
        except ValueError:
            doc = {}
        if not isinstance(doc, dict):
            doc = {}
        errors = [e for e in doc.get("errors") or [] if e]
        if status in (401, 403):
            raise SlurmError("Slurm refused the portal's credentials for this action.", status=status, errors=errors)
        if status >= 500 and not errors:
            raise SlurmUnavailable(f"The scheduler answered with HTTP {status}; try again shortly.", status=status)
        if status >= 400 or errors:
            raise SlurmError(f"Slurm reported: {_error_text(errors)}", status=status, errors=errors)
        return doc

    # --- endpoints --------------------------------------------------------
    def ping(self, user: str) -> dict[str, Any]:
        return self.request("GET", f"{API}/ping", user)

    def jobs(self, user: str) -> list[dict[str, Any]]:
        return list(self.request("GET", f"{API}/jobs", user).get("jobs") or [])

    def nodes(self, user: str) -> list[dict[str, Any]]:
        return list(self.request("GET", f"{API}/nodes", user).get("nodes") or [])

    def partitions(self, user: str) -> list[dict[str, Any]]:
        return list(self.request("GET", f"{API}/partitions", user).get("partitions") or [])

    def submit(self, user: str, payload: Mapping[str, Any]) -> int:
        doc = self.request("POST", f"{API}/job/submit", user, payload)
        job_id = doc.get("job_id")
        if not isinstance(job_id, int):
            raise SlurmError("Slurm accepted the request but returned no job id.")
        return job_id

    def cancel(self, user: str, job_id: int) -> None:
        self.request("DELETE", f"{API}/job/{int(job_id)}", user)

    def associations(self, user: str, *, of_user: str | None = None) -> list[dict[str, Any]]:
        """Slurm's associations (``of_user``'s only, when given) as ``user`` sees them: all of them for an Operator."""
        query = "" if of_user is None else "?" + urllib.parse.urlencode({"user": of_user})
        assocs = self.request("GET", f"{API_DB}/associations{query}", user).get("associations") or []
        return [a for a in assocs if isinstance(a, dict)]

    def account_jobs(self, user: str, accounts: Iterable[str], since: int) -> list[dict[str, Any]]:
        """Every job of ``accounts`` since ``since`` (epoch) from slurmdbd, without steps, as ``user`` sees them.

        slurmrestd 22.05.8 answers 500 "Unknown Query field" to ``users=`` and cannot parse an epoch ``start_time``:
        the query names the accounts and a local ``YYYY-MM-DDTHH:MM:SS`` start (slurmrestd runs next to the portal).
        22.05 reports an empty result as error 9003 "Nothing found": that is no jobs.
        """
        start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since))
        query = urllib.parse.urlencode({"account": ",".join(accounts), "start_time": start, "skip_steps": "true"})
        try:
            jobs = self.request("GET", f"{API_DB}/jobs?{query}", user).get("jobs") or []
        except SlurmError as exc:
            if exc.errors and all(isinstance(e, Mapping) and e.get("error_number") == 9003 for e in exc.errors):
                return []
            raise
        return [j for j in jobs if isinstance(j, dict)]

    def accounting_jobs(self, user: str, since: int) -> list[dict[str, Any]]:
        """The user's jobs since ``since`` (epoch) from slurmdbd, without steps, asked with the user's own token.

        The query names the user's accounts (from ``/associations?user=``, see :meth:`account_jobs`) and the jobs of
        other users in those accounts are dropped here. (The portal's GPU-hours use :class:`webui.scheduler.
        SlurmScheduler`'s per-account cache instead.)
        """
        accounts = sorted(
            {
                str(a["account"])
                for a in self.associations(user, of_user=user)
                if a.get("account") and a.get("user") == user
            }
        )
        if not accounts:
            return []
        return [j for j in self.account_jobs(user, accounts, since) if j.get("user") == user]


def make_client(config: Mapping[str, Any]) -> SlurmClient:
    tokens = TokenSource(
        str(config["SLURM_JWT_KEY_FILE"]),
        lifetime=int(config["SLURM_JWT_LIFETIME_SECONDS"]),
        forbidden=tuple(config["SLURM_FORBIDDEN_USERS"]),
    )
    return SlurmClient(str(config["SLURMRESTD_URL"]), tokens, timeout=float(config["SLURM_TIMEOUT_SECONDS"]))


Clock = Callable[[], float]
