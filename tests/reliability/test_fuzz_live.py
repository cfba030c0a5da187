# SPDX-License-Identifier: GPL-3.0-or-later
"""Fuzzing the running demo portal (issue 18): nginx, gunicorn, the real slurmrestd and MariaDB behind the forms.

The same idea as tests/webui/test_fuzz.py, against https://127.0.0.1:8443: alice logs in (password and a fresh TOTP
enrolment, as every e2e test does); then a bounded number of generated requests (Hypothesis, derandomized, no
shrinking: ``EXAMPLES`` examples of ``PER_EXAMPLE`` requests or so, about 250 in all, stopped after ``BUDGET_S``)
go to the session start form and the JSON API, the reservation request form, the stop and connect paths, the admin
forms (as alice: refused), the pages' query strings and the login form (in a second, logged-out context). Shell
metacharacters, HTML and script markers, unicode, control characters, long strings, numbers as text, missing and
repeated fields, JSON of every type and malformed JSON. Afterwards:

* no answer was a 5xx (neither the portal's nor nginx's);
* a refused start names the field, as do the other forms' refusals;
* the Slurm jobs alice got in the meantime (squeue and sacct on the head) are exactly those of the starts the
  portal accepted: a refused request never created a job; none carries generated text in its name, comment or
  working directory; ``/tmp/carme-fuzz-pwned`` (what the shell payloads would create) exists on no container;
* no page (each answer, then the dashboard, start form, calendar and the API's session list) shows a marker raw.

Accounts are safe: the login form is only ever sent user names the portal refuses by their form (nothing reaches
LDAP, nothing counts towards a lockout), and alice's own password is never fuzzed. The test cleans up after itself:
every session it started is stopped (and scancelled if need be), every reservation request it made is cancelled
(its Slurm reservation deleted), whatever happened. Requests go only to the demo's published port on 127.0.0.1;
what was sent and answered is summed up in ``.artifacts/reliability/fuzz_live.json``.
"""

from __future__ import annotations

import collections
import datetime as dt
import html
import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import Any
from urllib.parse import quote
from urllib.parse import urlencode

import pytest
from hypothesis import HealthCheck
from hypothesis import Phase
from hypothesis import example
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from tests.fixtures.demo import BASE
from tests.fixtures.demo import NODE_PREFIX
from tests.fixtures.demo import REPO
from tests.fixtures.demo import Demo
from tests.fixtures.demo import login
from tests.fixtures.demo import on_head
from tests.fixtures.demo import run
from tests.fixtures.fuzz import MARKS
from tests.fixtures.fuzz import META
from tests.fixtures.fuzz import RAW
from tests.fixtures.fuzz import mutated
from webui.sessions.views import LABELS as FORM_LABELS

pytestmark = pytest.mark.e2e

EXAMPLES = 30
PER_EXAMPLE = 8  # requests an example sends, about (more when a start is accepted: the session is looked up, stopped)
BUDGET_S = 90.0  # examples after this send nothing
RESULTS = REPO / ".artifacts" / "reliability" / "fuzz_live.json"
PWNED = "/tmp/carme-fuzz-pwned"

NASTY = (
    f"$(touch {PWNED})",
    f"`touch {PWNED}`",
    f"; touch {PWNED} ;",
    f"| touch {PWNED}",
    f"&& touch {PWNED}",
    f"> {PWNED}",
    "line1\nline2",
    "nul\x00byte",
    "' OR '1'='1",
    "../../etc/passwd",
    "%00%0d%0aSet-Cookie: x=y",
    "{{ 7*7 }}",
    "\uff11\uff12",
    "٣",
    "²",
    "1e3",
    "-1",
    "1.5",
    "NaN",
    "9" * 40,
    "",
    " ",
    "\u202egnp.exe",
    "😀" * 10,
    "A" * 70_000,
    *MARKS,
)
texts = st.one_of(
    st.sampled_from(NASTY),
    st.text(max_size=30),
    st.text(alphabet=st.sampled_from(list(META + " <>=/%-_.:")), max_size=20),
    st.tuples(st.sampled_from(MARKS), st.text(max_size=6)).map("".join),
    st.integers(min_value=-(10**20), max_value=10**20).map(str),
    st.floats().map(repr),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.floats(allow_nan=False) | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=5,
)
RAW_BODIES = (b"[" * 3000, b'{"app": ', b"\xff\xfe", b'"text"', b'{"gpus": NaN}')
#: the portal's USERNAME_PATTERN (webui/settings.py): login fuzz only sends names it refuses by their form
USERNAME = re.compile(r"[a-z_][a-z0-9_.-]{0,31}")


def reservation_day() -> str:
    """A day 20 days ahead (the policy allows 30): a reservation made there blocks nothing anybody uses today."""
    return (dt.datetime.now(dt.UTC).date() + dt.timedelta(days=20)).isoformat()


GOOD_START = {"app": "jupyterlab", "image": "jupyter", "gpus": "0", "nodes": "1", "time_minutes": "5"}
GOOD_JSON = {"app": "jupyterlab", "image": "jupyter", "gpus": 0, "nodes": 1, "time_minutes": 5}
START_FIELDS = ("app", "image", "partition", "reservation", "gpus", "nodes", "time_minutes", "body", "profile", "cpus",
                "mem_gib", "mem_mb", "logdir")  # fmt: skip
RESERVATION_FIELDS = ("gpus", "nodes", "start", "end", "purpose")
PAGES = ("/", "/sessions/new", "/reservations/", "/api/sessions", "/api/cluster")


def strings_in(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [s for k, v in value.items() for s in (*strings_in(k), *strings_in(v))]
    if isinstance(value, list | tuple):
        return [s for v in value for s in strings_in(v)]
    return []


@dataclass
class Live:
    """alice's (or a visitor's) requests: every answer checked and counted; what went wrong collected."""

    api: Any
    token: str = ""
    requests: int = 0
    statuses: collections.Counter[str] = field(default_factory=collections.Counter)
    problems: list[str] = field(default_factory=list)
    sent: set[str] = field(default_factory=set)

    def send(self, method: str, path: str, *, form: Mapping[str, Any] | None = None, body: Any = None,
             raw: bytes | None = None, query: Mapping[str, Any] | None = None) -> Any:  # fmt: skip
        url = BASE + path + ("?" + urlencode(query, doseq=True) if query else "")
        headers = {"X-CSRFToken": self.token, "Referer": BASE + "/"}
        data: str | bytes | None = None
        if form is not None:
            pairs = [(k, v) for k, vs in form.items() for v in (vs if isinstance(vs, list) else [vs])]
            data, headers["Content-Type"] = urlencode(pairs), "application/x-www-form-urlencoded"
        elif raw is not None:
            data, headers["Content-Type"] = raw, "application/json"
        elif body is not None or method in ("POST", "DELETE"):
            data, headers["Content-Type"] = json.dumps(body), "application/json"
        # the generated payloads (markers, shell commands): nothing the portal itself writes contains "fuzz"
        self.sent.update(s for s in strings_in([path, form, body, query]) if "fuzz" in s)
        resp = self.api.fetch(url, method=method, data=data, headers=headers, max_redirects=0, timeout=30_000)
        self.requests += 1
        shown = re.sub(r"/[^/]+/(stop|connect|cancel)$", r"/<id>/\1", path.split("?")[0])
        shown = shown if len(shown) < 40 else shown[:40] + "..."
        self.statuses[f"{method} {shown} {resp.status}"] += 1
        if resp.status >= 500:
            self.problems.append(
                f"{method} {url[:300]} {str(form or body or raw)[:300]!r}: {resp.status} {resp.text()[:300]}"
            )
        if "text/html" in resp.headers.get("content-type", ""):
            page = resp.text()
            for raw_mark in RAW:
                if raw_mark in page:
                    self.problems.append(f"{method} {url[:300]}: {raw_mark!r} shown unescaped")
        return resp

    def expect(self, resp: Any, allowed: tuple[int, ...], what: str, fields: tuple[str, ...] = ()) -> None:
        if resp.status not in allowed:
            self.problems.append(f"{what}: {resp.status} (expected one of {allowed}) {resp.text()[:300]}")
        elif resp.status == 400 and fields:
            text = html.unescape(resp.text())
            # the API names the field; the start form names it by its label ("Time (minutes): ...")
            if not any(f"{f}: " in text or f"{FORM_LABELS.get(f, f)}: " in text for f in fields):
                self.problems.append(f"{what}: a 400 that names none of {fields}: {text[:300]}")


def alice_jobs(since: str) -> set[int]:
    """alice's jobs submitted since ``since`` (head's clock), as squeue (every state it still knows) and sacct say."""
    ids: set[int] = set()
    queue = on_head("squeue", "--noheader", "--states=all", "--user", "alice", "--format=%i|%V")
    for line in queue.stdout.split():
        job, _, submitted = line.partition("|")
        if job.isdigit() and submitted >= since:
            ids.add(int(job))
    acct = on_head("sacct", "--noheader", "-X", "--user", "alice", "--starttime", since, "--format=JobID", "-P")
    ids.update(int(j) for j in acct.stdout.split() if j.isdigit())
    return ids


def carme_reservations() -> set[str]:
    shown = on_head("scontrol", "--oneliner", "show", "reservation").stdout
    return set(re.findall(r"ReservationName=(carme-alice-\d+)", shown))


def containers() -> list[str]:
    nodes = on_head("sinfo", "--noheader", "--Node", "--format=%N").stdout.split()
    return ["carme-demo-head", *sorted({NODE_PREFIX + n for n in nodes})]


def open_request_ids(live: Live) -> set[int]:
    page = live.send("GET", "/reservations/").text()
    return {int(i) for i in re.findall(r'action="/reservations/(\d+)/cancel"', page)}


def session_ids(live: Live) -> set[int]:
    resp = live.send("GET", "/api/sessions")
    return {int(v["job_id"]) for v in resp.json().get("sessions", [])} if resp.status == 200 else set()


def test_fuzzed_forms_and_api_on_the_demo(demo: Demo) -> None:
    for name in containers():
        run(["podman", "exec", name, "rm", "-f", PWNED])
    since = on_head("date", "+%Y-%m-%dT%H:%M:%S").stdout.strip()
    jobs_before = alice_jobs(since)  # running since before (sacct lists them too)
    # other users' jobs are never named, not even in a stop alice must be refused (the portal checks the owner first)
    others = set(on_head("squeue", "--noheader", "--format=%i").stdout.split())
    reservations_before = carme_reservations()
    page, _ = login(demo, "alice")
    alice = Live(page.context.request)
    alice.token = alice.api.get(f"{BASE}/api/csrf-token").json()["csrf_token"]
    visitor_context = demo.context()
    visitor = Live(visitor_context.request)
    requests_before = open_request_ids(alice)
    sessions_before = session_ids(alice)
    accepted: set[int] = set()
    started = time.monotonic()
    day = reservation_day()
    good_reservation = {"gpus": "1", "nodes": "1", "start": f"{day}T10:00", "end": f"{day}T12:00", "purpose": "fuzz"}

    def started_session(resp: Any) -> None:
        """Note the job of an accepted start, and stop it at once (the stop path of the API, for real)."""
        new = {int(resp.json()["job_id"])} if resp.status == 201 else session_ids(alice) - sessions_before - accepted
        accepted.update(new)
        for job in new:
            stop = alice.send("DELETE", f"/api/sessions/{job}")
            alice.expect(stop, (200,), f"stopping the accepted session {job}")

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        phases=(Phase.explicit, Phase.generate),  # no shrinking: the number of requests stays bounded
        suppress_health_check=list(HealthCheck),
    )
    @given(
        start=mutated(GOOD_START, texts),
        body=st.one_of(mutated(GOOD_JSON, json_values), json_values, st.sampled_from(RAW_BODIES)),
        reservation=mutated(good_reservation, texts),
        job=st.one_of(texts, st.integers(min_value=-5, max_value=10**13).map(str)),
        job_path=st.sampled_from(["form-stop", "api-stop", "api-delete", "connect"]),
        page_path=st.sampled_from(PAGES),
        query=st.dictionaries(st.sampled_from(["next", "view", "date", "job", "x"]), texts, max_size=3),
        username=texts.filter(lambda u: not USERNAME.fullmatch(u)),
        news=mutated({"title": "t", "body": "b"}, texts),
    )
    @example(
        start={**GOOD_START, "app": MARKS[0], "image": MARKS[1], "gpus": MARKS[2]},
        body=b"[" * 3000,
        reservation={**good_reservation, "purpose": MARKS[0]},
        job="²",
        job_path="api-stop",
        page_path="/reservations/",
        query={"date": "9999-12-31", "view": "month", "next": MARKS[1]},
        username=MARKS[0],
        news={"title": MARKS[0], "body": MARKS[3]},
    )
    def fuzz(
        start: dict[str, Any],
        body: Any,
        reservation: dict[str, Any],
        job: str,
        job_path: str,
        page_path: str,
        query: dict[str, str],
        username: str,
        news: dict[str, Any],
    ) -> None:
        if time.monotonic() - started > BUDGET_S:
            return
        job = "0" if job.strip() in others else job
        resp = alice.send("POST", "/sessions/new", form=start)
        alice.expect(resp, (302, 400), "POST /sessions/new", START_FIELDS)
        if resp.status == 302:
            started_session(resp)
        resp = (
            alice.send("POST", "/api/sessions", raw=body)
            if isinstance(body, bytes)
            else alice.send("POST", "/api/sessions", body=body)
        )
        alice.expect(resp, (201, 400), "POST /api/sessions", START_FIELDS)
        if resp.status == 201:
            started_session(resp)
        resp = alice.send("POST", "/reservations/request", form=reservation)
        alice.expect(resp, (302, 400, 409), "POST /reservations/request", RESERVATION_FIELDS)
        seg = quote(job, safe="")
        if job_path == "form-stop":
            resp = alice.send("POST", f"/sessions/{seg}/stop", form={"from": job})
        elif job_path == "api-stop":
            resp = alice.send("POST", f"/api/sessions/{seg}/stop")
        elif job_path == "api-delete":
            resp = alice.send("DELETE", f"/api/sessions/{seg}")
        else:
            resp = alice.send("GET", f"/sessions/{seg}/connect")
        if re.fullmatch(r"[0-9]{1,12}", job) is None and "/" not in job and job not in ("", ".", ".."):
            alice.expect(resp, (400, 404, 405), f"{job_path} of job {job[:50]!r}")
        alice.expect(alice.send("GET", page_path, query=query), (200, 400), f"GET {page_path}", ("view", "date"))
        alice.expect(alice.send("POST", "/admin/news", form=news), (403,), "POST /admin/news as alice")
        login_page = visitor.send("GET", "/auth/login", query={"next": query.get("next", job)})
        visitor.expect(login_page, (200,), "GET /auth/login")
        token = re.search(r'name="csrf-token" content="([^"]+)"', login_page.text())
        visitor.token = token.group(1) if token else ""
        resp = visitor.send("POST", "/auth/login", form={"username": username, "password": job, "next": job})
        # nginx allows 60 password POSTs a minute per address (burst 30): past that a 429, never a 5xx
        visitor.expect(resp, (400, 429), "POST /auth/login", ("username", "password"))

    try:
        fuzz()
        for path in (*PAGES, "/reservations/?view=month"):
            alice.expect(alice.send("GET", path), (200,), f"GET {path} after the fuzzing")
        resp = alice.send("POST", "/auth/totp", form={"code": "000000"})  # no login pending: back to the login page
        alice.expect(resp, (302,), "POST /auth/totp without a pending login")
    finally:
        elapsed = time.monotonic() - started
        # clean up: alice's sessions and reservation requests of this run, whatever happened
        for job in accepted:
            on_head("scancel", str(job))
        for request_id in open_request_ids(alice) - requests_before:
            alice.expect(alice.send("POST", f"/reservations/{request_id}/cancel"), (302,), f"cancel {request_id}")
        left = carme_reservations() - reservations_before
        for name in left:
            on_head("scontrol", "delete", f"ReservationName={name}")
        created = alice_jobs(since) - jobs_before
        pwned = [name for name in containers() if run(["podman", "exec", name, "test", "-e", PWNED]).returncode == 0]
        visitor_context.close()
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        summary = {
            "requests": alice.requests + visitor.requests,
            "seconds": round(elapsed, 1),
            "statuses": dict(sorted((alice.statuses + visitor.statuses).items())),
            "sessions_started": sorted(accepted),
            "jobs_created": sorted(created),
            "problems": alice.problems + visitor.problems,
        }
        RESULTS.write_text(json.dumps(summary, indent=1, ensure_ascii=False))

    problems = alice.problems + visitor.problems
    assert not problems, "\n".join(problems[:30])
    assert 150 <= summary["requests"] <= 400, summary["requests"]
    assert created == accepted, f"jobs alice got {sorted(created)} but the portal accepted only {sorted(accepted)}"
    assert not left, f"reservations left behind by the run (deleted now): {sorted(left)}"
    assert not pwned, f"{PWNED} exists on {pwned}: a fuzzed value was run by a shell"
    for job in accepted:
        fields = on_head("scontrol", "--oneliner", "show", "job", str(job)).stdout
        for text in alice.sent:
            assert text not in fields, f"job {job} carries the generated {text!r}: {fields[:500]}"
