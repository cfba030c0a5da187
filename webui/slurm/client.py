# SPDX-License-Identifier: GPL-3.0-or-later
"""A small slurmrestd client on urllib. Each call names the Slurm user it acts as, and carries that user's token
(:mod:`webui.slurm.jwt_tokens`): no shell, no root.

The API version is :mod:`carme_runtime.slurmrest`'s business: the client asks slurmrestd which versions it offers on
its first request (``SLURMRESTD_API_VERSION = "auto"``, the default; once per process, again only after a failed
attempt), or uses the one the site names, and every endpoint method hands back records in Carme's dialect.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from typing import Any
from typing import TypeVar

from carme_runtime import slurmrest
from carme_runtime.slurmrest import SlurmRestApi
from webui.slurm.errors import SlurmError
from webui.slurm.errors import SlurmUnavailable
from webui.slurm.jwt_tokens import TokenRefused
from webui.slurm.jwt_tokens import TokenSource
from webui.slurm.listing import decode_listing

T = TypeVar("T")

#: Slurm 22.05's prefixes, for tests that talk to the host's 22.05 directly; the portal uses ``SlurmClient.api``
API = slurmrest.LEGACY_API.path("").rstrip("/")
API_DB = slurmrest.LEGACY_API.db_path("").rstrip("/")


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

    def __init__(
        self,
        base_url: str,
        tokens: TokenSource,
        *,
        timeout: float = 5.0,
        api_version: str = slurmrest.LEGACY,
        list_timeout: float = 30.0,
    ):
        """``api_version``: ``auto`` (ask slurmrestd; what :func:`make_client` passes by default) or a version.
        Constructed directly (tests against a stand-in), the client speaks Slurm 22.05's."""
        parsed = urllib.parse.urlsplit(base_url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"SLURMRESTD_URL must be http(s)://host:port, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.tokens = tokens
        self.timeout = timeout
        self.list_timeout = max(timeout, list_timeout)  # the full job list of a big queue (changed())
        self.queries = 0  # requests issued, for the benchmark
        self._count_lock = threading.Lock()
        setting = slurmrest.check_setting(api_version)
        self._api = None if setting == slurmrest.AUTO else SlurmRestApi(setting)
        self._api_lock = threading.Lock()

    def api_for(self, user: str) -> SlurmRestApi:
        """The API version spoken with this slurmrestd; the first call asks it (as ``user``) which it offers."""
        if self._api is not None:
            return self._api
        with self._api_lock:
            if self._api is None:
                try:
                    self._api = SlurmRestApi(slurmrest.choose_version(lambda path: self._get_or_none(path, user)))
                except slurmrest.ApiVersionError as exc:
                    raise SlurmError(f"Slurm's REST API: {exc}") from exc
            return self._api

    def _get_or_none(self, path: str, user: str) -> dict[str, Any] | None:
        """A GET's answer, or None where slurmrestd does not serve ``path`` (404, an error answer); unreachable,
        refused credentials and refused tokens raise."""
        try:
            return self.request("GET", path, user)
        except SlurmError as exc:
            if exc.status is None or exc.status in (401, 403):
                raise
            return None

    def request(
        self, method: str, path: str, user: str, body: Mapping[str, Any] | None = None, *, timeout: float | None = None
    ) -> dict[str, Any]:
        doc: dict[str, Any] = self._exchange(method, path, user, body, timeout, None)[0]
        return doc

    def _exchange(
        self,
        method: str,
        path: str,
        user: str,
        body: Mapping[str, Any] | None,
        timeout: float | None,
        listing: tuple[str, Callable[[dict[str, Any]], T]] | None,
    ) -> tuple[dict[str, Any], list[T]]:
        """The answer's object, and, with ``listing`` ``(key, parse)``, ``parse`` of each record of its ``key`` list,
        decoded one by one (:mod:`webui.slurm.listing`; then the object lacks ``key``)."""
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
            with urllib.request.urlopen(req, timeout=timeout or self.timeout) as resp:
                raw = resp.read()
                status = resp.status
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            status = exc.code
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            reason = getattr(exc, "reason", exc)
            raise SlurmUnavailable(f"The scheduler is not reachable right now ({reason}).") from exc
        items: list[T] = []
        try:
            if listing is None or not raw:
                doc = json.loads(raw) if raw else {}
            else:
                doc, items = decode_listing(raw.decode("utf-8"), *listing)
        except (json.JSONDecodeError, UnicodeDecodeError):  # not JSON; an error of ``parse`` is not swallowed
            doc, items = {}, []
        del raw
        if not isinstance(doc, dict):
            doc = {}
        errors = [e for e in doc.get("errors") or [] if e]
        if status in (401, 403):
            raise SlurmError("Slurm refused the portal's credentials for this action.", status=status, errors=errors)
        if status >= 500 and not errors:
            raise SlurmUnavailable(f"The scheduler answered with HTTP {status}; try again shortly.", status=status)
        if status >= 400 or errors:
            raise SlurmError(f"Slurm reported: {_error_text(errors)}", status=status, errors=errors)
        return doc, items

    # --- endpoints: records as the version prints them (carme_runtime.slurmrest's *_record() read any) -----------
    def jobs(self, user: str) -> list[dict[str, Any]]:
        doc = self.request("GET", self.api_for(user).path("jobs"), user)
        return [j for j in doc.get("jobs") or [] if isinstance(j, dict)]

    def changed(
        self, user: str, what: str, since: int | None, parse: Callable[[dict[str, Any]], T]
    ) -> tuple[list[T] | None, int | None]:
        """``parse`` of each record of ``jobs`` or ``nodes`` (decoded one by one: a big queue's answer is 77 MB), and
        Slurm's ``last_update`` of them. With ``since`` (an earlier answer's ``last_update``) Slurm sends nothing when
        nothing changed after that second: then ``(None, since)``. An answer without ``last_update`` (22.05's v0.0.38)
        gives ``(records, None)``: no conditional reads with that version."""
        path = self.api_for(user).path(what)
        if since is not None:
            path += "?" + urllib.parse.urlencode({"update_time": since})
        doc, records = self._exchange("GET", path, user, None, self.list_timeout, (what, parse))
        stamp = slurmrest.number(doc.get("last_update")) or None  # missing, unset or 0: none
        if since is not None and not records and not stamp:
            return None, since
        return records, stamp

    def nodes(self, user: str) -> list[dict[str, Any]]:
        doc = self.request("GET", self.api_for(user).path("nodes"), user)
        return [n for n in doc.get("nodes") or [] if isinstance(n, dict)]

    def partitions(self, user: str) -> list[dict[str, Any]]:
        doc = self.request("GET", self.api_for(user).path("partitions"), user)
        return [p for p in doc.get("partitions") or [] if isinstance(p, dict)]

    def reservations(self, user: str) -> list[dict[str, Any]]:
        doc = self.request("GET", self.api_for(user).path("reservations"), user)
        return [r for r in doc.get("reservations") or [] if isinstance(r, dict)]

    def submit(self, user: str, payload: Mapping[str, Any]) -> int:
        """Submit ``payload`` (Carme's dialect: :func:`carme_runtime.sessions.build_rest_payload`) as ``user``."""
        api = self.api_for(user)
        doc = self.request("POST", api.path("job/submit"), user, api.submit_body(payload))
        job_id = doc.get("job_id")
        if not isinstance(job_id, int):
            raise SlurmError("Slurm accepted the request but returned no job id.")
        return job_id

    def update_job(self, user: str, job_id: int, changes: Mapping[str, Any]) -> None:
        """Change job properties (the dialect's keys, e.g. ``{"time_limit": minutes}``) as ``user``."""
        api = self.api_for(user)
        self.request("POST", api.path(f"job/{int(job_id)}"), user, api.update_body(changes))

    def cancel(self, user: str, job_id: int) -> None:
        self.request("DELETE", self.api_for(user).path(f"job/{int(job_id)}"), user)

    def associations(self, user: str, *, of_user: str | None = None) -> list[dict[str, Any]]:
        """Slurm's associations (``of_user``'s only, when given) as ``user`` sees them: all of them for an Operator."""
        query = "" if of_user is None else "?" + urllib.parse.urlencode({"user": of_user})
        path = self.api_for(user).db_path("associations") + query
        assocs = self.request("GET", path, user).get("associations") or []
        return [a for a in assocs if isinstance(a, dict)]

    def qos(self, user: str) -> list[dict[str, Any]]:
        """Slurm's QOS with their limits, as ``user`` sees them (v0.0.38 may name the list ``QOS``)."""
        answer = self.request("GET", self.api_for(user).db_path("qos"), user)
        found = answer.get("qos") or answer.get("QOS") or []
        return [q for q in found if isinstance(q, dict)]

    def accounts(self, user: str) -> list[dict[str, Any]]:
        """Slurm's accounts with their coordinators, as ``user`` sees them."""
        accts = self.request("GET", self.api_for(user).accounts_path(), user).get("accounts") or []
        return [a for a in accts if isinstance(a, dict)]

    def account_jobs(self, user: str, accounts: Iterable[str], since: int) -> list[dict[str, Any]]:
        """Every job of ``accounts`` since ``since`` (epoch) from slurmdbd, without steps, as ``user`` sees them.

        slurmrestd 22.05.8 answers 500 "Unknown Query field" to ``users=`` and cannot parse an epoch ``start_time``:
        the query names the accounts and a local ``YYYY-MM-DDTHH:MM:SS`` start (slurmrestd runs next to the portal).
        22.05 reports an empty result as error 9003 "Nothing found": that is no jobs.
        """
        start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since))
        query = urllib.parse.urlencode({"account": ",".join(accounts), "start_time": start, "skip_steps": "true"})
        try:
            jobs = self.request("GET", self.api_for(user).db_path(f"jobs?{query}"), user).get("jobs") or []
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
    return SlurmClient(
        str(config["SLURMRESTD_URL"]),
        tokens,
        timeout=float(config["SLURM_TIMEOUT_SECONDS"]),
        list_timeout=float(config.get("SLURM_LIST_TIMEOUT_SECONDS", 30.0)),
        api_version=str(config.get("SLURMRESTD_API_VERSION", slurmrest.AUTO)),
    )
