# SPDX-License-Identifier: GPL-3.0-or-later
"""The proxy reaches only the owner's app, on the live demo cluster (issue 11, adversarial).

Against the deployed portal (nginx + gunicorn + MariaDB + slurmrestd, sessions started by ``carme-launch``):

* bob, with a JupyterLab session on alice's node, rewrites his own job comment (``scontrol update``, as bob) to
  alice's front, then to slurmd's port 6818 and slurmctld's 6817: ``/proxy/<bob's job>/...`` then answers no 200
  and no 502 and shows nothing of Jupyter (before the fix: alice's Jupyter Server page, and a 502 from slurmd).
  With his comment restored, his own session answers again (the test is not passing for a trivial reason);
* ``/api/proxy-auth`` from outside, with alice's cookie and a forged ``X-Original-URI``, is a 404 under every
  spelling, and no answer carries an ``X-Carme-*`` header (it is nginx's internal ``auth_request`` target only);
* on alice's node, bob's direct connections to her published port get 403 from her session front, with or
  without a Jupyter token, and her JupyterLab and code-server listen on no TCP port at all (a Unix socket in her
  0700 directory, which bob cannot open);
* alice's TensorBoard (an app without authentication) answers her through the proxy; bob on the node gets 403
  from its front, and its own port does not exist in the node's network (it runs in alice's network namespace);
* the apps are served from their own origin: a script in a page of alice's app can read nothing of the portal's
  API, finds no portal API on its own origin, and its blind POST to stop her session is refused.

Uses the ``demo`` fixture (tests/fixtures/demo.py): skips without a demo unless ``CARME_E2E_REQUIRED=1``.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from dataclasses import field
from typing import Any

import pytest

from tests.fixtures.demo import BASE
from tests.fixtures.demo import Demo
from tests.fixtures.demo import apps_origin
from tests.fixtures.demo import connect
from tests.fixtures.demo import csrf_headers
from tests.fixtures.demo import job_comment
from tests.fixtures.demo import job_report
from tests.fixtures.demo import login
from tests.fixtures.demo import on_head
from tests.fixtures.demo import proxied
from tests.fixtures.demo import run

pytestmark = pytest.mark.e2e

NODE_PREFIX = os.environ.get("CARME_E2E_NODE_PREFIX", "carme-demo-")  # container = prefix + Slurm node name
READY_TIMEOUT_S = 300.0
SLURM_PORTS = (6817, 6818)  # slurmctld, slurmd


@dataclass
class Party:
    user: str
    page: Any = None
    job_id: int = 0
    node: str = ""
    host: str = ""
    port: int = 0
    jobs: list[int] = field(default_factory=list)

    @property
    def api(self) -> Any:
        return self.page.context.request


def comment_fields(job_id: int) -> dict[str, str]:
    return dict(kv.split("=", 1) for kv in job_comment(job_id).split(";") if "=" in kv)


def node_of(job_id: int) -> str:
    return on_head("squeue", "--noheader", "--format=%N", "--jobs", str(job_id)).stdout.strip()


def on_node(node: str, *argv: str, timeout: float = 60) -> Any:
    return run(["podman", "exec", NODE_PREFIX + node, *argv], timeout=timeout)


def as_bob_on(node: str, *argv: str) -> Any:
    return on_node(node, "runuser", "-u", "bob", "--", *argv)


# An HTTP GET as bob on a node (the node image has python3, not curl): prints the status code.
HTTP_GET = """
import sys, urllib.error, urllib.request
req = urllib.request.Request(sys.argv[1], headers=dict(h.split(": ", 1) for h in sys.argv[2:]))
try:
    print(urllib.request.urlopen(req, timeout=10).status)
except urllib.error.HTTPError as exc:
    print(exc.code)
"""


def bob_gets(node: str, url: str, *headers: str) -> Any:
    return as_bob_on(node, "python3", "-c", HTTP_GET, url, *headers)


def start_session(party: Party, app: str = "jupyterlab", image: str = "jupyter") -> int:
    body = {"app": app, "image": image, "gpus": 0, "time_minutes": 20}
    resp = party.api.post(f"{BASE}/api/sessions", data=body, headers=csrf_headers(party.page.context))
    assert resp.status == 201, resp.text()
    job_id = int(resp.json()["job_id"])
    party.jobs.append(job_id)
    return job_id


def wait_ready(party: Party, job_id: int) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        views = party.api.get(f"{BASE}/api/sessions").json()["sessions"]
        view = next((v for v in views if v["job_id"] == job_id), None)
        if view is not None and view["ready"]:
            return
        state = view["state"] if view else "gone"
        if time.monotonic() >= deadline:
            report = job_report(job_id)
            pytest.fail(f"{party.user}'s job {job_id} not ready after {READY_TIMEOUT_S:.0f} s: {view}\n{report}")
        assert state not in ("gone", "FAILED", "CANCELLED", "COMPLETED", "TIMEOUT"), state
        time.sleep(3)


def publish(party: Party, job_id: int) -> None:
    connect(party.api, job_id)
    fields = comment_fields(job_id)
    party.job_id, party.node = job_id, node_of(job_id)
    party.host, party.port = fields["host"], int(fields["port"])


@contextlib.contextmanager
def only_node(node: str) -> Iterator[None]:
    """Drain every other compute node, so that the next session lands on ``node``; resume them afterwards."""
    nodes = on_head("sinfo", "--noheader", "--Node", "--format=%N").stdout.split()
    others = sorted({n for n in nodes if n != node})
    for other in others:
        on_head("scontrol", "update", f"NodeName={other}", "State=DRAIN", "Reason=carme-e2e-proxy")
    try:
        yield
    finally:
        for other in others:
            on_head("scontrol", "update", f"NodeName={other}", "State=RESUME")


@pytest.fixture(scope="module")
def parties(demo: Demo) -> Iterator[tuple[Party, Party]]:
    """alice's and bob's JupyterLab sessions, started through the portal, on the same node."""
    alice, bob = Party("alice"), Party("bob")
    for user in ("alice", "bob"):
        on_head("scancel", "--user", user)  # leftovers of an interrupted run
    try:
        alice.page, _ = login(demo, "alice")
        bob.page, _ = login(demo, "bob")
        job = start_session(alice)
        wait_ready(alice, job)
        publish(alice, job)
        with only_node(alice.node):
            job = start_session(bob)
            wait_ready(bob, job)
        publish(bob, job)
        assert bob.node == alice.node, "bob's session must share alice's node for this test"
        yield alice, bob
    finally:
        for party in (alice, bob):
            for job in party.jobs:
                on_head("scancel", str(job))
            if party.page is not None:
                party.page.context.close()


def rewrite_comment(bob: Party, host: str, port: int) -> None:
    comment = f"carme:v1;app=jupyterlab;host={host};port={port};state=ready"
    done = on_head("runuser", "-u", "bob", "--", "scontrol", "update", f"JobId={bob.job_id}", f"Comment={comment}")
    assert done.returncode == 0, done.stderr  # a user may edit their own job's comment: the attack is real
    assert comment_fields(bob.job_id)["port"] == str(port)


def status_started(party: Party) -> str | None:
    """The `started` time of the Jupyter server that answers /api/status through the proxy (None: no 200)."""
    resp = party.api.get(proxied(party.job_id, "api/status"), max_redirects=0)
    return str(resp.json().get("started")) if resp.status == 200 else None


def assert_reaches_nothing(bob: Party, what: str, own_started: str) -> None:
    # Each portal worker keeps its own snapshot of Slurm, seconds old: until every worker has seen the rewritten
    # comment, the proxy may still go to bob's own, proven endpoint. Any 200 in that window must come from bob's own
    # server (its `started` time), never alice's; then six refusals in a row mean every worker has moved on.
    deadline = time.monotonic() + 45
    refused = 0
    while refused < 6:
        started = status_started(bob)
        if started is None:
            refused += 1
        else:
            assert started == own_started, f"{what}: /api/status answered by another server (started {started})"
            refused = 0
        assert time.monotonic() < deadline, f"{what}: the proxy still answers bob's own app 45 s after the rewrite"
        time.sleep(1)
    for path in ("api/status", "api/contents", "lab"):
        for _ in range(3):
            resp = bob.api.get(proxied(bob.job_id, path), max_redirects=0)
            text = resp.text().lower()
            assert resp.status != 200, f"{what}: /{path} answered 200: {text[:300]}"
            assert resp.status != 502, f"{what}: /{path} reached something that is not an app (502)"
            assert "jupyter" not in text, f"{what}: /{path} shows Jupyter: {text[:300]}"
            assert resp.status in (302, 403, 404), f"{what}: /{path}: {resp.status}"
            time.sleep(1)


def test_bobs_comment_pointing_at_alice_or_slurm_reaches_nothing(parties: tuple[Party, Party]) -> None:
    alice, bob = parties
    own = (bob.host, bob.port)
    own_started = status_started(bob)
    assert own_started is not None, "bob's own session does not answer through the proxy"
    assert own_started != status_started(alice), "bob's and alice's servers cannot be told apart"
    try:
        rewrite_comment(bob, alice.host, alice.port)
        assert_reaches_nothing(bob, "comment naming alice's port", own_started)
        for port in SLURM_PORTS:
            rewrite_comment(bob, alice.host, port)
            assert_reaches_nothing(bob, f"comment naming port {port}", own_started)
    finally:
        rewrite_comment(bob, *own)
    deadline = time.monotonic() + 30
    while (status := bob.api.get(proxied(bob.job_id, "api/status"), max_redirects=0).status) != 200:
        assert time.monotonic() < deadline, f"bob's session does not answer again after the restore: {status}"
        time.sleep(2)
    # alice's session was never disturbed
    assert alice.api.get(proxied(alice.job_id, "api/status"), max_redirects=0).status == 200


@pytest.mark.parametrize(
    "path", ["/api/proxy-auth", "/api/proxy-auth/", "/api//proxy-auth", "/api/proxy%2Dauth", "/api/proxy-auth?x=1"]
)
def test_proxy_auth_is_not_reachable_from_outside(parties: tuple[Party, Party], path: str) -> None:
    alice, _bob = parties
    for base in (BASE, apps_origin(alice.job_id)):  # neither the portal's origin nor a session's has it
        headers = {"X-Original-URI": f"/proxy/{alice.job_id}/lab", "X-Carme-Via": "apps"}
        resp = alice.api.get(base + path, headers=headers, max_redirects=0)
        assert resp.status == 404, (base, path, resp.status)
        assert not [h for h in resp.headers if h.lower().startswith("x-carme-")], resp.headers
        # and with curl, without any cookie
        curl = run(["curl", "-sk", "-o", "/dev/null", "-w", "%{http_code}", base + path])
        assert curl.stdout.strip() == "404", (base, path, curl.stdout, curl.stderr)


def test_bob_on_the_node_is_refused_by_alices_front(parties: tuple[Party, Party]) -> None:
    alice, bob = parties
    base = f"http://{alice.host}:{alice.port}/proxy/{alice.job_id}"
    for extra in ([], ["Authorization: token not-the-secret"], ["X-Carme-Front: 00"]):
        code = bob_gets(bob.node, base + "/api/status", *extra)
        assert code.stdout.strip() == "403", (extra, code.stdout, code.stderr)


# Connects to a Unix socket as the calling user; prints "connected" or the exception's class name.
UNIX_CONNECT = """
import socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1])
    print("connected")
except OSError as exc:
    print(type(exc).__name__)
"""


def assert_only_alice_reaches(node: str, job_id: int, program: str) -> None:
    """isolation = "socket": the app (``program``) has no TCP port on the node; bob cannot open its Unix socket."""
    conn = json.loads(on_node(node, "cat", f"/home/alice/.carme/sessions/{job_id}.json").stdout)
    assert conn["isolation"] == "socket" and conn["app_port"] is None, conn
    sock = conn["app_socket"]
    assert on_node(node, "stat", "-c", "%a %U", os.path.dirname(sock)).stdout.split() == ["700", "alice"]
    assert as_bob_on(node, "python3", "-c", UNIX_CONNECT, sock).stdout.strip() == "PermissionError"
    assert on_node(node, "runuser", "-u", "alice", "--", "python3", "-c", UNIX_CONNECT, sock).stdout.strip() == (
        "connected"
    )
    pids = on_node(node, "pgrep", "-u", "alice", "-f", program).stdout.split()
    assert pids, f"no {program} process of alice's on {node}"
    # every TCP socket in LISTEN state on the node, by inode, against the sockets the app's processes hold
    listen = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in on_node(node, "cat", table).stdout.splitlines()[1:]:
            parts = line.split()
            if len(parts) > 9 and parts[3] == "0A":
                listen.add(parts[9])
    for pid in pids:
        fds = on_node(node, "find", f"/proc/{pid}/fd", "-lname", "socket:*", "-printf", "%l\\n").stdout.split()
        held = {fd[len("socket:[") : -1] for fd in fds}
        assert not held & listen, f"{program} (pid {pid}) listens on a TCP port on {node}"


def test_alices_jupyterlab_has_no_port_bob_could_reach(parties: tuple[Party, Party]) -> None:
    alice, bob = parties
    assert_only_alice_reaches(alice.node, alice.job_id, "jupyter-lab")
    # bob, on the same node, finds only the front (403 without the key, as above)
    assert bob.node == alice.node


def tensorboard_offered(party: Party) -> bool:
    page = party.api.get(f"{BASE}/sessions/new").text()
    return 'value="tensorboard"' in page


@pytest.fixture(scope="module")
def tensorboard(parties: tuple[Party, Party]) -> int:
    """alice's TensorBoard session (an app without authentication of its own), connected."""
    alice, _bob = parties
    assert tensorboard_offered(alice), "the demo offers no TensorBoard (inventories/demo: carme_webui_images)"
    job = start_session(alice, app="tensorboard")  # on whichever node has room: bob is a user on every node
    wait_ready(alice, job)
    connect(alice.api, job)
    return job


def test_tensorboard_is_reachable_only_through_its_front(parties: tuple[Party, Party], tensorboard: int) -> None:
    alice, bob = parties
    job = tensorboard
    resp = alice.api.get(proxied(job), max_redirects=0)
    assert resp.status == 200 and "tensorboard" in resp.text().lower(), (resp.status, resp.text()[:300])
    fields = comment_fields(job)
    front = f"http://{fields['host']}:{fields['port']}/proxy/{job}/"
    node = node_of(job)
    for extra in ([], ["X-Carme-Front: 00"]):
        code = bob_gets(node, front, *extra)
        assert code.stdout.strip() == "403", (extra, code.stdout, code.stderr)
    # bob through the portal: no apps cookie for alice's session, and Connect refuses him
    assert bob.api.get(proxied(job), max_redirects=0).status == 302
    assert bob.api.get(f"{BASE}/sessions/{job}/connect", max_redirects=0).status == 403


def test_tensorboard_has_no_port_on_the_node_at_all(parties: tuple[Party, Party], tensorboard: int) -> None:
    """isolation = "netns": TensorBoard's 127.0.0.1:<port> is in alice's own network namespace, not the node's."""
    _alice, _bob = parties
    job = tensorboard
    node = node_of(job)
    conn = json.loads(on_node(node, "cat", f"/home/alice/.carme/sessions/{job}.json").stdout)
    app_port = int(conn["app_port"])
    listening = [line.split()[3] for line in on_node(node, "ss", "-H", "-ltn").stdout.splitlines() if line.split()]
    assert not [a for a in listening if a.endswith(f":{app_port}")], f"port {app_port} listens on the node: {listening}"
    for url in (f"http://127.0.0.1:{app_port}/proxy/{job}/", f"http://localhost:{app_port}/proxy/{job}/"):
        code = bob_gets(node, url)
        assert code.stdout.strip() != "200" and code.returncode != 0, (url, code.stdout, code.stderr)
        assert "refused" in code.stderr.lower(), code.stderr
    # TensorBoard itself runs as alice, in a network namespace other than the node's
    pids = on_node(node, "pgrep", "-u", "alice", "-f", "tensorboard").stdout.split()
    assert pids, "no TensorBoard process of alice's on the node"
    node_ns = on_node(node, "readlink", "/proc/1/ns/net").stdout.strip()
    app_ns = {on_node(node, "readlink", f"/proc/{pid}/ns/net").stdout.strip() for pid in pids}
    assert node_ns not in app_ns, (node_ns, app_ns)


# What a page of alice's own app (a notebook output, an extension, a TensorBoard plugin) could try with the browser:
# read the portal's API with alice's cookie, stop one of her sessions, find the cookie.
APP_PAGE_SCRIPT = """async ([portal, job]) => {
  const out = {};
  const read = async (url) => {
    try { const r = await fetch(url, {credentials: "include"}); return "status " + r.status; }
    catch (e) { return "blocked"; }
  };
  out.sessions = await read(portal + "/api/sessions");
  out.csrf = await read(portal + "/api/csrf-token");
  out.local_sessions = await read("/api/sessions");
  out.local_csrf = await read("/api/csrf-token");
  try {
    const stop = await fetch(portal + "/api/sessions/" + job + "/stop",
                             {method: "POST", credentials: "include", mode: "no-cors"});
    out.stop = stop.type;
  } catch (e) { out.stop = "error " + e.message; }
  out.csp = document.querySelector("meta[http-equiv=Content-Security-Policy]") ? "meta" : "none";
  out.cookie = document.cookie;
  out.origin = location.origin;
  return out;
}"""


def test_a_script_in_alices_app_cannot_call_the_portal(parties: tuple[Party, Party]) -> None:
    alice, _bob = parties
    page = alice.page.context.new_page()
    try:
        # JupyterLab's own page (an HTML page whose CSP does not restrict connect-src; Jupyter's API answers carry
        # "default-src 'none'", which would block every fetch for a reason that is not the one under test)
        loaded = page.goto(proxied(alice.job_id, "lab"), wait_until="domcontentloaded")
        assert loaded is not None and loaded.status == 200, loaded and loaded.status
        csp = loaded.headers.get("content-security-policy", "")
        assert "connect-src" not in csp and "default-src" not in csp, csp
        out = page.evaluate(APP_PAGE_SCRIPT, [BASE, alice.job_id])
    finally:
        page.close()
    assert out["origin"] == apps_origin(alice.job_id) and out["origin"] != BASE, out
    assert out["sessions"] == "blocked" and out["csrf"] == "blocked", out  # another origin: nothing readable
    assert out["local_sessions"] == "status 404" and out["local_csrf"] == "status 404", out  # no portal API here
    assert out["stop"] == "opaque", out
    assert "carme" not in out["cookie"], out
    # the blind POST changed nothing: the portal refused it (Sec-Fetch-Site: same-site), the session still runs
    log = on_head("grep", "-h", f"POST /api/sessions/{alice.job_id}/stop", "/var/log/nginx/access.log").stdout
    assert log.strip() and '" 403 ' in log.strip().splitlines()[-1], log[-500:]
    assert on_head("squeue", "--noheader", "--jobs", str(alice.job_id)).stdout.strip(), "alice's session was stopped"
    assert alice.api.get(proxied(alice.job_id, "api/status"), max_redirects=0).status == 200


def test_code_server_opens_signed_in_for_alice_only(parties: tuple[Party, Party], tensorboard: int) -> None:
    """code-server (``--auth none`` behind the session front, served at / behind the front's strip_prefix) through
    the apps' origin: the workbench opens with no password page, and only through alice's front."""
    alice, bob = parties
    on_head("scancel", str(tensorboard))  # the portal's default policy allows alice two sessions
    deadline = time.monotonic() + 60
    while on_head("squeue", "--noheader", "--jobs", str(tensorboard)).stdout.strip():
        assert time.monotonic() < deadline, "the TensorBoard session does not end"
        time.sleep(2)
    page = alice.page.context.new_page()
    try:
        page.goto(f"{BASE}/sessions/new")
        assert page.query_selector('select[name=app] option[value="code-server"]'), "the demo offers no code-server"
        job = start_session(alice, app="code-server", image="code-server")
        wait_ready(alice, job)
        view = next(v for v in alice.api.get(f"{BASE}/api/sessions").json()["sessions"] if v["job_id"] == job)
        assert not view.get("password"), view  # nothing to copy by hand
        page.goto(f"{BASE}/sessions/{job}/connect")
        assert page.url.startswith(f"{apps_origin(job)}/proxy/{job}/"), page.url  # on the apps' origin
        page.wait_for_selector(".monaco-workbench", timeout=120_000)  # the workbench, over its websocket
        assert page.query_selector("input[type=password]") is None  # no login page on the way
        fields = comment_fields(job)
        front = f"http://{fields['host']}:{fields['port']}/proxy/{job}/"
        assert bob_gets(node_of(job), front).stdout.strip() == "403"
        assert_only_alice_reaches(node_of(job), job, "code-server")
        assert bob.api.get(f"{BASE}/sessions/{job}/connect", max_redirects=0).status == 403
    finally:
        page.close()
