# SPDX-License-Identifier: GPL-3.0-or-later
"""A small slurmrestd (OpenAPI v0.0.38) client on urllib. Each call names the Slurm user it acts as, and carries that
user's token (:mod:`webui.slurm.jwt_tokens`): no shell, no root.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from collections.abc import Mapping
from typing import Any

from webui.slurm.errors import SlurmError
from webui.slurm.errors import SlurmUnavailable
from webui.slurm.jwt_tokens import TokenRefused
from webui.slurm.jwt_tokens import TokenSource

API = "/slurm/v0.0.38"
API_DB = "/slurmdb/v0.0.38"


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


def make_client(config: Mapping[str, Any]) -> SlurmClient:
    tokens = TokenSource(
        str(config["SLURM_JWT_KEY_FILE"]),
        lifetime=int(config["SLURM_JWT_LIFETIME_SECONDS"]),
        forbidden=tuple(config["SLURM_FORBIDDEN_USERS"]),
    )
    return SlurmClient(str(config["SLURMRESTD_URL"]), tokens, timeout=float(config["SLURM_TIMEOUT_SECONDS"]))
