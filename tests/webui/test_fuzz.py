# SPDX-License-Identifier: GPL-3.0-or-later
"""Fuzzing the portal's forms, query strings and JSON API with Hypothesis (issue 18).

Every form and JSON endpoint a visitor, a logged-in user and an administrator can reach gets generated input: shell
metacharacters, HTML and script, unicode, control characters, huge strings, numbers as text (negative, float, huge,
in other scripts), missing fields, repeated fields, JSON of every type and malformed or deeply nested JSON. Every
answer must show that

* the portal never fails: the status is below 500 (with ``TESTING`` on, an exception the portal does not handle
  reaches the test as such; in production it would be a 500);
* a bad field is refused with a 400 that names it, where the endpoint names its fields;
* nothing is executed: the runtime's runner (``SubprocessRunner``, the one place commands run, on
  ``os.posix_spawn``), ``subprocess.Popen`` (under ``subprocess.run``), ``os.system``, ``os.popen``, ``os.exec*``,
  ``os.spawn*`` and ``os.posix_spawn*`` are replaced by recorders. The only program the portal may start is
  ``scontrol`` (reservations are created with it, webui/reservations/slurm.py): with an argv list, never a string,
  never ``shell=True``; the recorder answers as scontrol would. A generated payload (every marker and shell command
  here carries the word "fuzz") reaches an argv, or the submit payload the scheduler stand-in builds, only as a whole
  element;
* nothing is shown unescaped: no HTML answer, and, after the fuzzing, none of the pages that show stored data
  (dashboard, start form, calendar, admin pages, audit log) carries a marker such as ``<script>fuzz`` raw; the
  markers that were stored are shown escaped.

Bounded and reproducible: ``derandomize=True`` and no example database, so CI runs the same examples every time.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import subprocess
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import Any
from urllib.parse import quote
from urllib.parse import urlsplit

import pytest
from flask import Flask
from flask.testing import FlaskClient
from hypothesis import HealthCheck
from hypothesis import example
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from carme_runtime.command_runner import SubprocessRunner
from tests.fixtures.fuzz import MARKS
from tests.fixtures.fuzz import META
from tests.fixtures.fuzz import RAW
from tests.fixtures.fuzz import mutated
from webui.auth.ldap import LdapIdentity
from webui.reservations.slurm import Reservation
from webui.reservations.slurm import ReservationState
from webui.reservations.slurm import SlurmReservations
from webui.sessions.views import LABELS as FORM_LABELS
from webui.slurm.client import SlurmClient
from webui.slurm.jwt_tokens import TokenSource

from .conftest import FakeScheduler
from .conftest import log_in_as
from .conftest import make_app

REFERER = {"Referer": "https://localhost/"}

# --- what is generated -----------------------------------------------------------------------------------------------

NASTY = (
    "$(touch /tmp/carme-fuzz-pwned)",
    "`touch /tmp/carme-fuzz-pwned`",
    "; touch /tmp/carme-fuzz-pwned ;",
    "x | cat /etc/passwd",
    "a && b || c",
    "> /tmp/carme-fuzz-pwned",
    "< /etc/shadow",
    "line1\nline2",
    "line1\r\nline2",
    "nul\x00byte",
    "' OR '1'='1",
    "../../etc/passwd",
    "%00%0d%0aSet-Cookie: x=y",
    "{{ 7*7 }}{% raw %}",
    "${jndi:ldap://127.0.0.1/x}",
    "-rf",
    "--help",
    "\uff11\uff12",  # fullwidth digits
    "٣",  # Arabic-Indic digit three
    "²",  # superscript two: str.isdigit() says yes, int() says no
    "1e3",
    "0x10",
    "1_0",
    "-1",
    "-0",
    "1.5",
    "NaN",
    "inf",
    "9" * 40,
    "9" * 5000,  # more digits than int() reads
    " 1 ",
    "",
    " ",
    "true",
    "null",
    "[]",
    "{}",
    "\u202egnp.exe",
    "\ufeffbom",
    "😀" * 10,
    "A" * 70_000,
    "B" * 600_000,  # near the request size limit
    *MARKS,
)

texts = st.one_of(
    st.sampled_from(NASTY),
    st.text(max_size=40),
    st.text(alphabet=st.sampled_from(list(META + " <>=/%-_.:")), max_size=24),
    st.tuples(st.sampled_from(MARKS), st.text(max_size=8)).map("".join),
    st.integers(min_value=-(10**20), max_value=10**20).map(str),
    st.floats().map(repr),
)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)

RAW_BODIES = (
    b"[" * 3000,
    b'{"a":' * 3000,
    b'{"gpus": NaN, "image": "pytorch", "app": "jupyterlab", "time_minutes": 60}',
    b'{"gpus": 1e999, "image": "pytorch", "app": "jupyterlab", "time_minutes": 60}',
    b'{"gpus": ',
    b"\xff\xfe\x00",
    b"1" * 5000,
    b'"just a string"',
    b"null",
)


def form_of(good: Mapping[str, str]) -> st.SearchStrategy[dict[str, Any]]:
    return mutated(good, texts)


def json_of(good: Mapping[str, Any]) -> st.SearchStrategy[Any]:
    """A JSON body: the good object changed (values of any JSON type), or any other JSON value."""
    obj = mutated(good, json_values)
    return st.one_of(obj, obj, obj, json_values)


def path_segment() -> st.SearchStrategy[str]:
    return st.one_of(texts, st.integers(min_value=-5, max_value=10**13).map(str), st.just("1001"))


def fuzz_settings(examples: int) -> Callable[[Any], Any]:
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
    )


# --- nothing executed --------------------------------------------------------------------------------------------


def strings_in(value: Any) -> Iterator[str]:
    """Every string inside a form or JSON value (keys too)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield from strings_in(k)
            yield from strings_in(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from strings_in(v)


def distinctive(text: str) -> bool:
    """A generated payload (a marker, a shell command) that nothing the portal writes itself contains: its job script
    is full of shell metacharacters, so short random text of them would be found in it by chance."""
    return "fuzz" in text


@dataclass
class ExecMonitor:
    """Records every attempt to start a program; answers ``scontrol`` the way Slurm's would (in ``slurm``)."""

    slurm: ScontrolStandIn
    calls: list[tuple[str, Any, dict[str, Any]]] = field(default_factory=list)
    sent: set[str] = field(default_factory=set)

    def remember(self, *values: Any) -> None:
        self.sent.update(s for v in values for s in strings_in(v) if distinctive(s))

    def record(self, how: str, args: Any, kwargs: dict[str, Any]) -> None:
        self.calls.append((how, args, kwargs))

    def check(self) -> None:
        for how, args, kwargs in self.calls:
            assert how in ("SubprocessRunner", "subprocess.Popen"), f"the portal called {how}({args!r})"
            assert isinstance(args, list | tuple), f"a command as a string: {args!r}"
            assert not kwargs.get("shell"), f"shell=True: {args!r}"
            assert args and args[0] == "scontrol", f"the portal ran {args!r}"
            for element in args:
                for text in self.sent:
                    assert text not in element or text == element, f"fuzzed {text!r} inside argv element {element!r}"

    def check_payloads(self, sched: FakeScheduler) -> None:
        """What the portal asked the scheduler to submit: generated text only as whole values."""
        for spec, _secret, payload in sched.submitted:
            assert spec.user in ("alice", "carol") and re.fullmatch(r"[a-z0-9_-]+", spec.app), spec
            for leaf in strings_in(payload):
                for text in self.sent:
                    assert text not in leaf or text == leaf, f"fuzzed {text!r} inside the payload's {leaf[:200]!r}"


class ScontrolStandIn(SlurmReservations):
    """The real :class:`SlurmReservations` (its argv, its check of what Slurm made, its error handling), its state
    in memory; its ``scontrol`` runs go through the runner to the recorder, which answers with :meth:`answer`."""

    def __init__(self) -> None:
        super().__init__(
            SlurmClient("http://127.0.0.1:1", TokenSource("/nonexistent")),
            service_user="carme-portal",
            cache_seconds=0.0,
        )
        self.items: dict[str, Reservation] = {}

    def state(self, max_age: float | None = None) -> ReservationState:
        return ReservationState(tuple(self.items.values()), fetched_at=1.0)

    def last(self, error: str) -> ReservationState:
        return ReservationState(tuple(self.items.values()), fetched_at=1.0, error=error)

    def answer(self, argv: list[str]) -> tuple[int, str, str]:
        """What scontrol would say (exit status, stdout, stderr)."""
        args = list(argv[1:])
        if args[:2] == ["create", "reservation"]:
            kv = dict(a.split("=", 1) for a in args[2:])
            start = (
                dt.datetime.now(dt.UTC)
                if kv["StartTime"] == "now"
                else dt.datetime.strptime(kv["StartTime"], "%Y-%m-%dT%H:%M:%S").astimezone(dt.UTC)
            )
            end = dt.datetime.strptime(kv["EndTime"], "%Y-%m-%dT%H:%M:%S").astimezone(dt.UTC)
            if any(r.start < end and start < r.end for r in self.items.values()):
                return 1, "", "Error creating the reservation: Requested nodes are busy"
            count = int(kv["NodeCnt"])
            self.items[kv["ReservationName"]] = Reservation(
                kv["ReservationName"],
                start,
                end,
                users=(kv["Users"],),
                nodes=("gpu01",),
                node_count=count,
                partition=kv.get("PartitionName", ""),
            )
            return 0, f"Reservation created: {kv['ReservationName']}", ""
        if args[:3] == ["--oneliner", "show", "reservation"] and args[3] in self.items:
            return 0, f"ReservationName={args[3]} NodeCnt={self.items[args[3]].node_count}", ""
        if args[:1] == ["delete"] and args[1].startswith("ReservationName="):
            if self.items.pop(args[1].split("=", 1)[1], None) is None:
                return 1, "", "Reservation not found"
            return 0, "", ""
        return 1, "", f"scontrol stand-in: unexpected arguments {args!r}"


@pytest.fixture
def monitor(monkeypatch: pytest.MonkeyPatch) -> ExecMonitor:
    mon = ExecMonitor(ScontrolStandIn())

    class RecordingPopen:
        def __init__(self, args: Any, *rest: Any, **kwargs: Any) -> None:
            mon.record("subprocess.Popen", args, kwargs)
            if isinstance(args, str | bytes) or kwargs.get("shell") or not args or args[0] != "scontrol":
                raise PermissionError(f"fuzz test: the portal may not run {args!r}")
            self.args = args
            self.returncode, self._out, self._err = mon.slurm.answer(list(args))

        def __enter__(self) -> RecordingPopen:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def communicate(self, input: Any = None, timeout: float | None = None) -> tuple[str, str]:
            return self._out, self._err

        def poll(self) -> int:
            return self.returncode

        def wait(self, timeout: float | None = None) -> int:
            return self.returncode

        def kill(self) -> None:
            return None

        terminate = kill

    def refuse(name: str) -> Callable[..., Any]:
        def refused(*args: Any, **kwargs: Any) -> Any:
            mon.record(name, args, kwargs)
            raise PermissionError(f"fuzz test: the portal may not call {name}")

        return refused

    def recording_runner(
        self: SubprocessRunner, argv: Any, *, input_text: str | None = None, env: Any = None
    ) -> tuple[int, str, str]:
        mon.record("SubprocessRunner", argv, {"input_text": input_text, "env": env})
        if isinstance(argv, str | bytes) or not argv or argv[0] != "scontrol":
            raise PermissionError(f"fuzz test: the portal may not run {argv!r}")
        return mon.slurm.answer(list(argv))

    monkeypatch.setattr(SubprocessRunner, "__call__", recording_runner)
    monkeypatch.setattr(subprocess, "Popen", RecordingPopen)
    starters = ("system", "popen", "posix_spawn", "posix_spawnp", "execv", "execve", "execl", "execle", "execlp")
    starters += ("execlpe", "execvp", "execvpe", "spawnv", "spawnve", "spawnl", "spawnle", "spawnlp", "spawnlpe")
    for name in (*starters, "spawnvp", "spawnvpe"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, refuse(f"os.{name}"))
    return mon


@pytest.fixture
def fuzz_app(base_config: dict[str, Any], fake_scheduler: FakeScheduler, monitor: ExecMonitor) -> Iterator[Flask]:
    """The real app, its scheduler the in-memory stand-in, its reservations made with (recorded) scontrol, in a
    time zone other than UTC (times near the calendar's ends overflow there)."""
    from webui.extensions import db

    config = {
        **base_config,
        "SCHEDULER": fake_scheduler,
        "RESERVATIONS": monitor.slurm,
        "RESERVATION_TIMEZONE": "America/New_York",
        "LOGIN_RECHECK_SECONDS": 3600,  # no LDAP here: a login's groups must not be read again while the fuzz runs
    }
    application = make_app(config)
    yield application
    with application.app_context():
        db.engine.dispose()


# --- requests and what every answer must show ------------------------------------------------------------------------


def assert_escaped(html: str, where: str) -> None:
    for raw in RAW:
        assert raw not in html, f"{where}: {raw!r} shown unescaped"


@dataclass
class Browser:
    """A logged-in client that checks every answer."""

    client: FlaskClient
    monitor: ExecMonitor
    token: str = ""

    def refresh_token(self) -> None:
        resp = self.client.get("/api/csrf-token")
        assert resp.status_code == 200, resp.status_code
        self.token = resp.get_json()["csrf_token"]

    def checked(self, resp: Any, what: str) -> Any:
        assert resp.status_code < 500, f"{what}: {resp.status_code} {resp.get_data(as_text=True)[:500]}"
        if resp.mimetype == "text/html":
            assert_escaped(resp.get_data(as_text=True), what)
        self.monitor.check()
        return resp

    def get(self, url: str, **kwargs: Any) -> Any:
        self.monitor.remember(url, kwargs)
        return self.checked(self.client.get(url, **kwargs), f"GET {url[:200]}")

    def post(self, url: str, data: Mapping[str, Any] | None = None) -> Any:
        self.monitor.remember(url, data)
        form = {**(data or {}), "csrf_token": self.token}
        return self.checked(self.client.post(url, data=form, headers=REFERER), f"POST {url[:200]} {data!r:.300}")

    def api(self, method: str, url: str, **kwargs: Any) -> Any:
        self.monitor.remember(url, kwargs.get("json"))
        headers = {**REFERER, "X-CSRFToken": self.token}
        resp = self.client.open(url, method=method, headers=headers, **kwargs)
        return self.checked(resp, f"{method} {url[:200]} {kwargs!r:.300}")


def browser(app: Flask, monitor: ExecMonitor, user: str, *, admin: bool = False) -> Browser:
    client = app.test_client()
    log_in_as(app, client, user, admin=admin)
    b = Browser(client, monitor)
    b.refresh_token()
    return b


def names_a_field(resp: Any, fields: tuple[str, ...]) -> bool:
    """A refusal that says which field is wrong (``<field>: ...``), in a page or in the JSON error."""
    if resp.is_json:
        error = str((resp.get_json(silent=True) or {}).get("error", ""))
        return any(error.startswith(f"{f}: ") for f in fields)
    page = resp.get_data(as_text=True)
    return any(f"{f}: " in page or f"{FORM_LABELS.get(f, f)}: " in page for f in fields)  # the start form: labels


#: the pages that show stored data, as the user and as an administrator
USER_PAGES = ("/", "/sessions/new", "/reservations/", "/reservations/?view=month", "/api/sessions")
ADMIN_PAGES = (
    "/admin/",
    "/admin/news",
    "/admin/images",
    "/admin/users",
    "/admin/audit",
    "/reservations/admin",
)


def sweep(b: Browser, pages: tuple[str, ...]) -> str:
    """Every page must answer 200 and show stored markers escaped only; returns the pages' text."""
    out = []
    for url in pages:
        resp = b.get(url)
        assert resp.status_code == 200, f"GET {url}: {resp.status_code}"
        out.append(resp.get_data(as_text=True))
    return "\n".join(out)


def end_jobs(sched: FakeScheduler) -> None:
    """Slurm forgets the sessions started (the next views mark them ended): the session limit never stops the fuzz."""
    sched.jobs.clear()


GOOD_SESSION = {
    "app": "jupyterlab",
    "image": "pytorch",
    "partition": "gpu",
    "gpus": "1",
    "nodes": "1",
    "time_minutes": "60",
    "reservation": "",
}
SESSION_FIELDS = ("app", "image", "partition", "reservation", "gpus", "nodes", "time_minutes")


# --- sessions ------------------------------------------------------------------------------------------------------


def test_fuzz_session_start_form(fuzz_app: Flask, fake_scheduler: FakeScheduler, monitor: ExecMonitor) -> None:
    alice = browser(fuzz_app, monitor, "alice")

    @fuzz_settings(150)
    @given(form=form_of(GOOD_SESSION))
    @example(form=GOOD_SESSION)
    @example(form={**GOOD_SESSION, "gpus": "²"})
    @example(form={**GOOD_SESSION, "app": MARKS[0], "image": MARKS[1], "partition": MARKS[2]})
    def start(form: dict[str, Any]) -> None:
        before = len(fake_scheduler.submitted)
        resp = alice.post("/sessions/new", form)
        assert resp.status_code in (302, 400), resp.status_code
        if resp.status_code == 400:
            assert names_a_field(resp, SESSION_FIELDS), resp.get_data(as_text=True)[:2000]
            assert len(fake_scheduler.submitted) == before, "a refused start submitted a job"
        else:
            assert len(fake_scheduler.submitted) == before + 1
        monitor.check_payloads(fake_scheduler)
        end_jobs(fake_scheduler)

    start()
    assert any(fake_scheduler.submitted), "no generated form was ever accepted: the fuzz tests refusals only"
    sweep(alice, USER_PAGES)


def test_fuzz_session_api(fuzz_app: Flask, fake_scheduler: FakeScheduler, monitor: ExecMonitor) -> None:
    alice = browser(fuzz_app, monitor, "alice")
    good = {"app": "jupyterlab", "image": "pytorch", "gpus": 1, "nodes": 1, "time_minutes": 60}

    @fuzz_settings(150)
    @given(body=st.one_of(json_of(good), json_of(good), st.sampled_from(RAW_BODIES)), form=form_of(GOOD_SESSION))
    @example(body=good, form={})
    @example(body=b"[" * 3000, form={})
    def start(body: Any, form: dict[str, Any]) -> None:
        before = len(fake_scheduler.submitted)
        if isinstance(body, bytes):
            resp = alice.api("POST", "/api/sessions", data=body, content_type="application/json")
        else:
            resp = alice.api("POST", "/api/sessions", json=body)
        assert resp.is_json and resp.status_code in (201, 400), (resp.status_code, resp.get_data(as_text=True))
        if resp.status_code == 400:
            assert names_a_field(resp, (*SESSION_FIELDS, "body")), resp.get_json()
            assert len(fake_scheduler.submitted) == before
        # the API takes a form too (scripts without JSON)
        resp = alice.api("POST", "/api/sessions", data=form)
        assert resp.is_json and resp.status_code in (201, 400), (resp.status_code, resp.get_data(as_text=True))
        if resp.status_code == 400:
            assert names_a_field(resp, SESSION_FIELDS), resp.get_json()
        monitor.check_payloads(fake_scheduler)
        end_jobs(fake_scheduler)

    start()
    assert any(fake_scheduler.submitted)
    sweep(alice, USER_PAGES)


def test_fuzz_stop_and_connect(fuzz_app: Flask, fake_scheduler: FakeScheduler, monitor: ExecMonitor) -> None:
    """Job ids in the path (the form's ``from`` too), as the owner, as another user and as an admin."""
    from .conftest import add_session

    alice = browser(fuzz_app, monitor, "alice")
    bob = browser(fuzz_app, monitor, "bob")
    carol = browser(fuzz_app, monitor, "carol", admin=True)

    @fuzz_settings(100)
    @given(job=path_segment(), back=texts, who=st.sampled_from(["alice", "bob", "carol"]))
    @example(job="²", back="admin", who="alice")
    @example(job="own", back="admin", who="alice")
    def stop(job: str, back: str, who: str) -> None:
        own = add_session(fuzz_app, fake_scheduler, "alice")
        job = str(own) if job == "own" else job
        b = {"alice": alice, "bob": bob, "carol": carol}[who]
        seg = quote(job, safe="")
        for resp in (
            b.post(f"/sessions/{seg}/stop", {"from": back}),
            b.api("POST", f"/api/sessions/{seg}/stop"),
            b.api("DELETE", f"/api/sessions/{seg}"),
            b.get(f"/sessions/{seg}/connect"),
            b.post(f"/admin/sessions/{seg}/stop"),
        ):
            if not re.fullmatch(r"[0-9]{1,12}", job) and "/" not in job and job not in ("", ".", ".."):
                assert resp.status_code in (400, 403, 404, 405), (job, resp.status_code)
        for job_id, as_user in fake_scheduler.cancelled:
            assert as_user in ("alice", "carme-portal"), (job_id, as_user)  # bob never stops alice's session
        end_jobs(fake_scheduler)

    stop()


# --- reservations --------------------------------------------------------------------------------------------------

RESERVATION_FIELDS = ("gpus", "nodes", "start", "end", "purpose")


def local_time(days: int, hour: int) -> str:
    day = dt.datetime.now(dt.UTC).date() + dt.timedelta(days=days)
    return f"{day.isoformat()}T{hour:02d}:00"


times = st.one_of(
    st.datetimes(min_value=dt.datetime(1, 1, 1), max_value=dt.datetime(9999, 12, 31, 23, 59)).map(
        lambda d: d.isoformat(timespec="minutes")
    ),
    st.integers(min_value=-3, max_value=40).flatmap(
        lambda days: st.integers(min_value=0, max_value=23).map(lambda h: local_time(days, h))
    ),
    texts,
)


def open_requests(app: Flask) -> list[int]:
    from webui.extensions import db
    from webui.models import ReservationRequest

    with app.app_context():
        rows = db.session.query(ReservationRequest).filter(ReservationRequest.status.in_(("pending", "approved")))
        return [r.id for r in rows]


def test_fuzz_reservations(fuzz_app: Flask, monitor: ExecMonitor) -> None:
    alice = browser(fuzz_app, monitor, "alice")
    good = {"gpus": "1", "nodes": "1", "start": local_time(1, 10), "end": local_time(1, 12), "purpose": "course"}
    fields = {**good, "public": "1"}

    @fuzz_settings(150)
    @given(
        form=form_of(fields),
        start=st.one_of(st.none(), st.none(), st.none(), times),  # mostly the good times
        end=st.one_of(st.none(), st.none(), st.none(), times),
        cancel=path_segment(),
        revoke=texts,
        query=st.dictionaries(st.sampled_from(["view", "date", "x"]), st.one_of(times, texts), max_size=2),
    )
    @example(form={**good, "purpose": MARKS[0]}, start=None, end=None, cancel="1", revoke="", query={})
    @example(form=good, start="0001-01-01T00:00", end="0001-01-01T02:00", cancel="x", revoke="1", query={})
    @example(form=good, start="9999-12-31T20:00", end="9999-12-31T23:59", cancel="1", revoke="", query={})
    @example(form=good, start=None, end=None, cancel="1", revoke="", query={"date": "9999-12-31", "view": "month"})
    @example(form=good, start=None, end=None, cancel="1", revoke="", query={"date": "0001-01-01"})
    def reserve(
        form: dict[str, Any],
        start: str | None,
        end: str | None,
        cancel: str,
        revoke: str,
        query: dict[str, str],
    ) -> None:
        form = {**form, **({"start": start} if start is not None else {}), **({"end": end} if end is not None else {})}
        resp = alice.post("/reservations/request", form)
        assert resp.status_code in (302, 400, 409), resp.status_code
        if resp.status_code == 400:
            assert names_a_field(resp, RESERVATION_FIELDS), resp.get_data(as_text=True)[:2000]
        alice.post(f"/reservations/{quote(cancel, safe='')}/cancel")
        for request_id in open_requests(fuzz_app):  # given back (scontrol delete): the next request does not overlap
            assert alice.post(f"/reservations/{request_id}/cancel").status_code == 302
        alice.post("/reservations/feed", {"revoke": revoke})
        resp = alice.get("/reservations/", query_string=query)
        assert resp.status_code in (200, 400), resp.status_code
        if resp.status_code == 400:
            assert names_a_field(resp, ("view", "date")), resp.get_data(as_text=True)[:2000]

    reserve()
    commands = [list(args[1:3]) for _how, args, _kw in monitor.calls]
    assert ["create", "reservation"] in commands, "no reservation was ever created through scontrol"
    assert any(c[0] == "delete" for c in commands), "no reservation was ever given back through scontrol"
    pages = sweep(alice, USER_PAGES)
    assert "&lt;script&gt;fuzz(1)&lt;/script&gt;" in pages  # the stored purpose, shown escaped
    carol = browser(fuzz_app, monitor, "carol", admin=True)
    sweep(carol, ("/reservations/admin", "/reservations/", "/admin/audit"))


def test_fuzz_reservation_decisions(fuzz_app: Flask, monitor: ExecMonitor) -> None:
    """The administrator's approve/decline form, on requests left pending (auto-approval off)."""
    fuzz_app.config["RESERVATION_AUTO_APPROVE"] = False
    alice = browser(fuzz_app, monitor, "alice")
    carol = browser(fuzz_app, monitor, "carol", admin=True)
    for day in range(1, 8):
        form = {"gpus": "1", "nodes": "1", "start": local_time(day, 9), "end": local_time(day, 11), "purpose": "x"}
        assert alice.post("/reservations/request", form).status_code == 302

    @fuzz_settings(80)
    @given(
        request_id=st.one_of(st.integers(min_value=1, max_value=8).map(str), path_segment()),
        form=form_of({"action": "approve", "reason": "fine"}),
    )
    @example(request_id="1", form={"action": "decline", "reason": MARKS[1]})
    @example(request_id="2", form={"action": "approve", "reason": MARKS[2]})
    def decide(request_id: str, form: dict[str, Any]) -> None:
        resp = carol.post(f"/reservations/admin/{quote(request_id, safe='')}/decide", form)
        assert resp.status_code in (302, 308, 400, 404, 409), resp.status_code
        if resp.status_code == 400:
            assert names_a_field(resp, ("action", "reason")), resp.get_data(as_text=True)[:2000]

    decide()
    pages = sweep(carol, ("/reservations/admin", "/admin/audit"))
    assert "&#34;&gt;&lt;img src=x onerror=fuzz(2)&gt;" in pages  # the decline reason, escaped
    sweep(alice, USER_PAGES)


# --- administration ------------------------------------------------------------------------------------------------


def test_fuzz_admin_forms(fuzz_app: Flask, fake_scheduler: FakeScheduler, monitor: ExecMonitor) -> None:
    carol = browser(fuzz_app, monitor, "carol", admin=True)
    alice = browser(fuzz_app, monitor, "alice")
    news = {"title": "Maintenance", "body": "Tuesday"}
    image = {
        "name": "tf",
        "image": "/images/tf.sif",
        "kind": "container",
        "description": "TensorFlow",
        "allowed_apps": "jupyterlab code-server",
    }
    log_in_as(fuzz_app, fuzz_app.test_client(), "bob")  # bob has logged in: his TOTP can be reset, he can be unlocked
    users = st.one_of(st.sampled_from(["bob", "nobody"]), texts).filter(lambda u: u not in ("alice", "carol"))

    @fuzz_settings(120)
    @given(
        news_form=form_of(news),
        image_form=form_of(image),
        user=users,
        row=path_segment(),
    )
    @example(
        news_form={"title": MARKS[0], "body": MARKS[3]},
        image_form={**image, "description": MARKS[1], "image": MARKS[2]},
        user=MARKS[0],
        row="1",
    )
    def admin(
        news_form: dict[str, Any],
        image_form: dict[str, Any],
        user: str,
        row: str,
    ) -> None:
        resp = carol.post("/admin/news", news_form)
        assert resp.status_code in (302, 400), resp.status_code
        if resp.status_code == 400:
            assert names_a_field(resp, ("title", "body")), resp.get_data(as_text=True)[:2000]
        resp = carol.post("/admin/images", image_form)
        assert resp.status_code in (302, 400), resp.status_code
        if resp.status_code == 400:
            assert names_a_field(resp, tuple(image)), resp.get_data(as_text=True)[:2000]
        seg = quote(row, safe="")
        for url in (f"/admin/news/{seg}/delete", f"/admin/images/{seg}/toggle"):
            assert carol.post(url).status_code in (302, 308, 404, 405), url
        for action in ("totp-reset", "unlock"):
            assert carol.post(f"/admin/users/{quote(user, safe='')}/{action}").status_code in (302, 308, 404, 405)
        # a user never gets in
        assert alice.post("/admin/news", news_form).status_code == 403
        end_jobs(fake_scheduler)

    admin()
    pages = sweep(carol, ADMIN_PAGES)
    assert "&lt;script&gt;fuzz(1)&lt;/script&gt;" in pages  # stored (news title, audit), shown escaped
    sweep(alice, USER_PAGES)


# --- login ---------------------------------------------------------------------------------------------------------


def test_fuzz_login_and_totp(fuzz_app: Flask, monitor: ExecMonitor, monkeypatch: pytest.MonkeyPatch) -> None:
    """The password form (LDAP answered by a stand-in: only alice's right password binds) and the TOTP form."""

    def authenticate(config: Mapping[str, Any], username: str, password: str) -> LdapIdentity | None:
        ok = username == "alice" and password == "right-password"
        return LdapIdentity(username, frozenset(), False) if ok else None

    monkeypatch.setattr("webui.auth.views.authenticate", authenticate)
    fuzz_app.config["LOGIN_MAX_FAILURES"] = 10**6  # the lockout must not end the fuzz early (tested elsewhere)
    fuzz_app.config["LOGIN_USER_MAX_FAILURES"] = 10**6
    client = fuzz_app.test_client()
    visitor = Browser(client, monitor)

    def token_of(resp: Any) -> str:
        # each login step starts a new cookie session (session.clear()): its pages carry the token that goes with it
        match = re.search(r'name="csrf-token" content="([^"]+)"', resp.get_data(as_text=True))
        assert match, resp.get_data(as_text=True)[:500]
        return match.group(1)

    def local(resp: Any) -> None:
        if resp.status_code in (301, 302, 303, 307, 308):
            target = urlsplit(resp.headers["Location"])
            assert target.netloc in ("", "localhost") and target.scheme in ("", "https", "http"), target

    @fuzz_settings(150)
    @given(
        form=form_of({"username": "alice", "password": "right-password", "next": "/reservations/"}),
        code=texts,
        next_query=texts,
    )
    @example(form={"username": "alice", "password": "right-password", "next": "//evil.example/"}, code="000000",
             next_query="/\t/evil.example")  # fmt: skip
    @example(form={"username": MARKS[0], "password": MARKS[1]}, code=MARKS[0], next_query=MARKS[1])
    def login(form: dict[str, Any], code: str, next_query: str) -> None:
        resp = visitor.get("/auth/login", query_string={"next": next_query})
        assert resp.status_code == 200
        visitor.token = token_of(resp)
        resp = visitor.post("/auth/login", form)
        assert resp.status_code in (302, 400, 401, 429), resp.status_code
        local(resp)
        if resp.status_code == 400:
            assert names_a_field(resp, ("username", "password")), resp.get_data(as_text=True)[:2000]
        if resp.status_code == 302 and resp.headers["Location"].endswith("/auth/totp"):
            resp = visitor.get("/auth/totp")
            assert resp.status_code == 200
            visitor.token = token_of(resp)
            resp = visitor.post("/auth/totp", {"code": code})
            assert resp.status_code in (302, 400, 401, 429), resp.status_code
            local(resp)
            if resp.status_code == 400:
                assert names_a_field(resp, ("code",)), resp.get_data(as_text=True)[:2000]
        with client.session_transaction() as sess:  # back to a visitor for the next example
            sess.pop("pending", None)
            sess.pop("login", None)

    login()


# --- query strings, headers and the endpoints for nginx ------------------------------------------------------------

QUERY_KEYS = st.one_of(st.sampled_from(["next", "view", "date", "job", "ticket", "page"]), st.text(max_size=6))
queries = st.dictionaries(QUERY_KEYS, texts, max_size=3)


def test_fuzz_query_strings_and_headers(fuzz_app: Flask, fake_scheduler: FakeScheduler, monitor: ExecMonitor) -> None:
    from .conftest import add_session

    fuzz_app.config["APPS_ORIGIN"] = "https://*.apps.localhost"
    fuzz_app.config["PORTAL_URL"] = "https://localhost"
    alice = browser(fuzz_app, monitor, "alice")
    carol = browser(fuzz_app, monitor, "carol", admin=True)
    job = add_session(fuzz_app, fake_scheduler, "alice")
    pages = (*USER_PAGES, "/api/cluster", "/api/health", "/api/csrf-token", f"/sessions/{job}/connect")

    @fuzz_settings(60)
    @given(
        query=queries,
        original_uri=st.one_of(texts, texts.map(lambda t: f"/proxy/{job}/{t}"), st.just(f"/proxy/{job}/")).map(
            lambda uri: re.sub(r"[\r\n]", "", uri)  # no HTTP header carries a line break (nor does nginx send one)
        ),
        ical=st.tuples(path_segment(), path_segment()),
    )
    @example(query={"date": "9999-12-31", "view": "month", "next": MARKS[0]}, original_uri="/proxy/1/../x",
             ical=(MARKS[0], MARKS[1]))  # fmt: skip
    def look(query: dict[str, str], original_uri: str, ical: tuple[str, str]) -> None:
        for url in pages:
            path, _, fixed = url.partition("?")
            alice.get(path, query_string={**dict([fixed.split("=")] if fixed else []), **query})
        for url in ADMIN_PAGES:
            carol.get(url, query_string=query)
            assert alice.get(url, query_string=query).status_code in (403, 308)
        via = {"X-Carme-Via": "apps"}
        for b in (alice, carol):
            b.get("/api/proxy-auth", headers={**via, "X-Original-URI": original_uri})
            b.get("/api/app-enter", query_string=query, headers=via)
        alice.get(f"/reservations/ical/{quote(ical[0], safe='')}/{quote(ical[1], safe='')}.ics")

    look()


# --- regression tests for what the fuzzing found -------------------------------------------------------------------


@pytest.mark.parametrize(
    "query", ["date=9999-12-31&view=month", "date=9999-12-31", "date=0001-01-01", "date=0001-01-01&view=month"]
)
def test_calendar_dates_at_the_ends_of_the_calendar_are_400(fuzz_app: Flask, query: str) -> None:
    """The week and month grids (and their previous and next links) reach past 9999-12-31 or before 0001-01-01: a 400
    naming the field, not an OverflowError (a 500)."""
    client = fuzz_app.test_client()
    log_in_as(fuzz_app, client, "alice")
    resp = client.get(f"/reservations/?{query}")
    assert resp.status_code == 400
    assert "date: " in resp.get_data(as_text=True)


@pytest.mark.parametrize("zone", ["America/New_York", "Asia/Tokyo"])
@pytest.mark.parametrize(
    ("start", "end"), [("0001-01-01T00:00", "0001-01-01T02:00"), ("9999-12-31T20:00", "9999-12-31T23:59")]
)
def test_reservation_times_at_the_ends_of_the_calendar_are_400(
    fuzz_app: Flask, zone: str, start: str, end: str
) -> None:
    """A local time that has no UTC time (before year 1 or after 9999 once converted) is a 400 naming the field."""
    fuzz_app.config["RESERVATION_TIMEZONE"] = zone
    client = fuzz_app.test_client()
    log_in_as(fuzz_app, client, "alice")
    from .conftest import post

    resp = post(
        client, "/reservations/request", {"gpus": "1", "nodes": "1", "start": start, "end": end, "purpose": "x"}
    )
    assert resp.status_code == 400
    assert re.search(r"\b(start|end): ", resp.get_data(as_text=True))


@pytest.mark.parametrize("body", [b"[" * 3000, b'{"app":' * 3000])
def test_json_nested_deeper_than_the_decoder_goes_is_400(
    fuzz_app: Flask, fake_scheduler: FakeScheduler, body: bytes
) -> None:
    """json.loads raises RecursionError (not a ValueError) for deep nesting: a 400, not a 500."""
    client = fuzz_app.test_client()
    log_in_as(fuzz_app, client, "alice")
    token = client.get("/api/csrf-token").get_json()["csrf_token"]
    headers = {**REFERER, "X-CSRFToken": token}
    resp = client.post("/api/sessions", data=body, content_type="application/json", headers=headers)
    assert resp.status_code == 400 and resp.is_json
    assert resp.get_json()["error"].startswith("body: ")
    assert fake_scheduler.submitted == []


@pytest.mark.parametrize("job", ["²", "٣", "\uff11\uff12"])
def test_job_ids_in_other_digits_are_400(fuzz_app: Flask, fake_scheduler: FakeScheduler, job: str) -> None:
    """str.isdigit() accepts superscripts (int() then fails: a 500) and other scripts' digits: only 0-9 are job ids."""
    from .conftest import post

    client = fuzz_app.test_client()
    log_in_as(fuzz_app, client, "alice")
    token = client.get("/api/csrf-token").get_json()["csrf_token"]
    headers = {**REFERER, "X-CSRFToken": token}
    seg = quote(job, safe="")
    assert post(client, f"/sessions/{seg}/stop").status_code == 400
    assert client.get(f"/sessions/{seg}/connect").status_code == 400
    assert client.post(f"/api/sessions/{seg}/stop", headers=headers).status_code == 400
    fuzz_app.config["APPS_ORIGIN"] = "https://*.apps.localhost"
    resp = client.get(f"/api/app-enter?job={seg}&ticket=x", headers={"X-Carme-Via": "apps"})
    assert resp.status_code == 400
    assert fake_scheduler.cancelled == []


def test_row_ids_beyond_64_bits_are_404(fuzz_app: Flask) -> None:
    """Werkzeug's int converter takes any number of digits; SQLite raised OverflowError (a 500) for such an id."""
    from .conftest import post

    huge = "9" * 40
    client = fuzz_app.test_client()
    log_in_as(fuzz_app, client, "carol", admin=True)
    for url in (
        f"/admin/news/{huge}/delete",
        f"/admin/images/{huge}/toggle",
        f"/reservations/{huge}/cancel",
        f"/reservations/admin/{huge}/decide",
    ):
        assert post(client, url, {"action": "approve"}).status_code == 404, url
    assert post(client, f"/admin/news/{2**63 - 1}/delete").status_code == 404  # the largest id still reaches the view


def test_stopping_a_session_that_has_ended_is_not_a_503(
    fuzz_app: Flask, fake_scheduler: FakeScheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second Stop (or a retried API call), or a Stop after Slurm forgot the job, got Slurm's "Invalid job id" back
    as a 503. The session is over all the same: 200, and nothing asked of Slurm twice. A job that still runs and that
    Slurm refuses to cancel stays an error."""
    from webui.extensions import db
    from webui.models import PortalSession
    from webui.slurm.errors import SlurmError

    from .conftest import add_session

    client = fuzz_app.test_client()
    log_in_as(fuzz_app, client, "alice")
    token = client.get("/api/csrf-token").get_json()["csrf_token"]
    headers = {**REFERER, "X-CSRFToken": token}

    twice = add_session(fuzz_app, fake_scheduler, "alice")
    assert client.post(f"/api/sessions/{twice}/stop", headers=headers).status_code == 200
    assert client.delete(f"/api/sessions/{twice}", headers=headers).status_code == 200
    assert fake_scheduler.cancelled == [(twice, "alice")]

    forgotten = add_session(fuzz_app, fake_scheduler, "alice")
    del fake_scheduler.jobs[forgotten]  # ended, and purged by slurmctld, before the dashboard looked again
    assert client.post(f"/api/sessions/{forgotten}/stop", headers=headers).status_code == 200
    with fuzz_app.app_context():
        record = db.session.query(PortalSession).filter_by(job_id=forgotten).one()
        assert record.ended_at is not None and record.secret == ""

    running = add_session(fuzz_app, fake_scheduler, "alice")

    def refuse(job_id: int, *, as_user: str) -> None:
        raise SlurmError("Slurm reported: Access/permission denied")

    monkeypatch.setattr(fake_scheduler, "cancel", refuse)
    resp = client.post(f"/api/sessions/{running}/stop", headers=headers)
    assert resp.status_code == 503 and "permission denied" in resp.get_json()["error"]
    with fuzz_app.app_context():
        assert db.session.query(PortalSession).filter_by(job_id=running).one().ended_at is None
