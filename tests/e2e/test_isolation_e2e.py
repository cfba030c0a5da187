# SPDX-License-Identifier: GPL-3.0-or-later
"""Users are walls apart in the browser too (issue 27, items 1 to 5 and 10b), on the live demo, as bob would try.

A session has its own origin (``https://<job>-<tag>.apps.localhost:8444``, webui/sessions/app_origin.py). alice and bob
each run a JupyterLab session started through the portal; bob, a user of the same cluster, tries:

1. the Connect link of his session, captured without following it, opened in alice's browser: refused there (it was
   made for his browser), and his app is never shown to her; his own browser still gets in with it;
2. a script in a page of one session against another session open in the same browser (alice's own JupyterLab
   page and her second session, whose apps cookie the browser holds: the position bob's page would need, which (1)
   denies him): reading its files, a blind POST writing one, a websocket and an iframe: all refused by the proxy,
   no file appears; and alice opening bob's session's URL lands on the portal's refusal (in 1);
3. his own server in place of his app (``srun --overlap`` in his job, on his app's socket), which echoes what it
   receives: no cookie named like Carme's reaches it, whatever copies, case and spacing the Cookie header holds;
4. the same server setting cookies for the portal's names and for parent domains: the portal's cookie is untouched,
   and a parent-domain cookie is kept to his session's host by nginx;
5. the token that JupyterLab writes into alice's /lab page, used on her front from a node: 403 (the front's key is
   not derived from anything a page shows);
10b. ``/proxy/<job>`` without its slash goes to that session's Connect link, not to ``/sessions//connect``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.e2e.test_promises_proxy_e2e import bob_gets
from tests.e2e.test_promises_proxy_e2e import comment_fields
from tests.e2e.test_promises_proxy_e2e import node_of
from tests.e2e.test_promises_proxy_e2e import on_node
from tests.fixtures.demo import BASE
from tests.fixtures.demo import HEAD
from tests.fixtures.demo import Demo
from tests.fixtures.demo import apps_origin
from tests.fixtures.demo import connect
from tests.fixtures.demo import login
from tests.fixtures.demo import on_head
from tests.fixtures.demo import proxied
from tests.fixtures.demo import run
from tests.fixtures.demo import start_jupyterlab
from tests.fixtures.demo import wait_session_ready

pytestmark = pytest.mark.e2e


@dataclass
class User:
    name: str
    page: Any = None
    job: int = 0

    @property
    def api(self) -> Any:
        return self.page.context.request


@pytest.fixture(scope="module")
def pair(demo: Demo) -> Iterator[tuple[User, User]]:
    alice, bob = User("alice"), User("bob")
    try:
        for user in (alice, bob):
            user.page, _ = login(demo, user.name)
            user.job = start_jupyterlab(user.page)
        for user in (alice, bob):
            wait_session_ready(user.api, user.job)
            connect(user.api, user.job)
        yield alice, bob
    finally:
        for user in (alice, bob):
            if user.job:
                on_head("scancel", str(user.job))
            if user.page is not None:
                user.page.context.close()


def location(resp: Any) -> str:
    assert resp.status == 302, (resp.status, resp.url)
    where = str(resp.headers["location"])
    return where if where.startswith("https://") else BASE + where


def captured_ticket(bob: User) -> str:
    """bob walks his own Connect link hop by hop, as a script would, and keeps the last link: its one-time ticket."""
    start = location(bob.api.get(f"{BASE}/sessions/{bob.job}/connect", max_redirects=0))
    back = location(bob.api.get(start, max_redirects=0))  # his browser now holds the bind cookie
    enter = location(bob.api.get(back, max_redirects=0))
    assert "/.carme/enter?" in enter and "ticket=" in enter, enter
    return enter


def app_cookies(user: User, job: int) -> list[dict[str, Any]]:
    return [c for c in user.page.context.cookies([apps_origin(job)]) if c["name"] == "__Host-carme_app"]


def test_a_connect_link_opens_nothing_in_another_browser(pair: tuple[User, User]) -> None:
    alice, bob = pair
    link = captured_ticket(bob)
    page = alice.page.context.new_page()
    try:
        shown = page.goto(link)
        assert shown is not None and shown.status == 403, shown and shown.status
        assert "another browser" in page.inner_text("body"), page.inner_text("body")[:300]
        assert not app_cookies(alice, bob.job), "alice's browser got an apps cookie for bob's session"
        # with bob's session URL itself, alice is sent to the portal, which refuses: never bob's app
        shown = page.goto(proxied(bob.job, "lab"))
        assert page.url.startswith(f"{BASE}/sessions/{bob.job}/connect"), page.url
        assert shown is not None and shown.status == 403, shown and shown.status
    finally:
        page.close()
    # the positive control: bob's own link, in bob's own browser, opens his app
    fresh = captured_ticket(bob)
    done = bob.api.get(fresh)
    assert done.status == 200 and done.url.startswith(proxied(bob.job)), (done.status, done.url)


# What a page on one session's origin could try with the browser against another session.
SIBLING_SCRIPT = """async ([target, job, marker]) => {
  const out = {};
  const base = target + "/proxy/" + job + "/";
  try { const r = await fetch(base + "api/contents/?" + marker, {credentials: "include"});
        out.read = "status " + r.status; } catch (e) { out.read = "blocked"; out.read_error = String(e); }
  try { const r = await fetch(base + "api/contents/PWNED_BY_BOB.txt?" + marker,
          {method: "POST", credentials: "include", mode: "no-cors", body: '{"type": "file"}'});
        out.post = r.type; } catch (e) { out.post = "error"; out.post_error = String(e); }
  out.ws = await new Promise((done) => {
    const ws = new WebSocket(base.replace("https:", "wss:") + "api/events/subscribe?" + marker);
    ws.onopen = () => { done("open"); ws.close(); };
    ws.onerror = () => done("refused");
    setTimeout(() => done("timeout"), 10000);
  });
  out.frame = await new Promise((done) => {
    const f = document.createElement("iframe");
    f.onload = () => { try { done(f.contentDocument ? "readable" : "opaque"); } catch (e) { done("opaque"); } };
    f.src = base + "lab?" + marker;
    document.body.appendChild(f);
    setTimeout(() => done("timeout"), 10000);
  });
  out.cookie = document.cookie;
  out.origin = location.origin;
  return out;
}"""


def test_a_page_of_one_session_cannot_use_another_session(pair: tuple[User, User]) -> None:
    """A script in a page of one session (alice's own JupyterLab page, as any app output could run) against another
    session open in the same browser, whose apps cookie the browser holds: nothing readable, nothing done."""
    alice, _bob = pair
    other = start_jupyterlab(alice.page)
    try:
        wait_session_ready(alice.api, other)
        connect(alice.api, other)  # the browser holds the other session's cookie: the strongest case
        marker = f"probe-{uuid.uuid4().hex[:12]}"
        page = alice.page.context.new_page()
        try:
            loaded = page.goto(proxied(alice.job, "lab"), wait_until="domcontentloaded")
            assert loaded is not None and loaded.status == 200, loaded and loaded.status
            out = page.evaluate(SIBLING_SCRIPT, [apps_origin(other), other, marker])
        finally:
            page.close()
        assert out["origin"] == apps_origin(alice.job) != apps_origin(other), out
        assert out["read"] == "blocked" and out["ws"] == "refused" and out["frame"] == "opaque", out
        assert out["post"] == "opaque" and "carme" not in out["cookie"], out
        # what reached nginx from that page: every request for the other session refused by the proxy (403)
        log = on_head("grep", "-h", marker, "/var/log/nginx/access.log").stdout.strip().splitlines()
        assert log, "nothing of the page's requests reached nginx"
        assert all('" 403 ' in line for line in log), log
        home = on_node(node_of(other), "runuser", "-u", "alice", "--", "sh", "-c", "test -e ~/PWNED_BY_BOB.txt")
        assert home.returncode != 0, "the blind POST wrote a file"
        assert alice.api.get(proxied(other, "api/status"), max_redirects=0).status == 200  # still fine itself
    finally:
        on_head("scancel", str(other))


def test_the_token_in_alices_pages_does_not_open_her_front(pair: tuple[User, User]) -> None:
    alice, _bob = pair
    page = alice.api.get(proxied(alice.job, "lab"), max_redirects=0)
    assert page.status == 200, page.status
    tokens = set(re.findall(r'"token":\s*"([^"]+)"', page.text())) | {"any-guess-" + "x" * 32}
    fields = comment_fields(alice.job)
    front = f"http://{fields['host']}:{fields['port']}/proxy/{alice.job}/api/contents"
    node = "node2" if node_of(alice.job) == "node1" else "node1"  # bob on any node
    for token in sorted(tokens):
        key = hmac.new(token.encode(), f"carme-front-v1|{alice.job}".encode(), hashlib.sha256).hexdigest()
        for headers in ([f"X-Carme-Front: {key}"], [f"X-Carme-Front: {key}", f"Authorization: token {token}"]):
            got = bob_gets(node, front, *headers)
            assert got.stdout.strip() == "403", (headers, got.stdout, got.stderr)


def test_proxy_without_its_slash_goes_to_that_sessions_connect(pair: tuple[User, User]) -> None:
    alice, _bob = pair
    url = proxied(alice.job).rstrip("/")
    out = run(["curl", "-sk", "-o", "/dev/null", "-w", "%{http_code} %{redirect_url}", url])
    code, _, where = out.stdout.strip().partition(" ")
    assert code == "302" and where == f"{BASE}/sessions/{alice.job}/connect", out.stdout


# bob's own server in place of his app (run as bob in his job by srun --overlap): it takes over his app's Unix
# socket, answers each request with the request head it got, and sets cookies that would matter to the portal.
ECHO_SERVER = r"""
import os, socket, sys, time
path = sys.argv[1]
os.unlink(path)
srv = socket.socket(socket.AF_UNIX)
srv.bind(path)
srv.listen(16)
srv.settimeout(5)
end = time.monotonic() + 80
while time.monotonic() < end:
    try:
        conn, _ = srv.accept()
    except socket.timeout:
        continue
    head = b""
    while b"\r\n\r\n" not in head and len(head) < 65536:
        data = conn.recv(4096)
        if not data:
            break
        head += data
    body = head.split(b"\r\n\r\n")[0]
    cookies = [
        "carme_session=bob-app; Path=/", "__Host-carme_session=bob-app; Path=/; Secure",
        "tossed=1; Domain=apps.localhost; Path=/", "tossed_up=1; Domain=localhost; Path=/",
    ]
    out = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n"
    out += "".join(f"Set-Cookie: {c}\r\n" for c in cookies)
    conn.sendall(out.encode() + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    conn.close()
"""


def bobs_server(bob: User) -> subprocess.Popen[str]:
    info_path = f"/home/bob/.carme/sessions/{bob.job}.json"
    info = json.loads(on_node(node_of(bob.job), "cat", info_path).stdout)
    sock = info["app_socket"]
    argv = ["podman", "exec", HEAD, "runuser", "-u", "bob", "--", "srun", f"--jobid={bob.job}", "--overlap"]
    argv += ["timeout", "90", "python3", "-c", ECHO_SERVER, sock]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while bob.api.get(proxied(bob.job, "echo"), max_redirects=0).status != 200:
        if proc.poll() is not None:
            raise AssertionError(f"bob's server ended: {proc.communicate()}")
        assert time.monotonic() < deadline, "bob's server does not answer through his session"
        time.sleep(1)
    return proc


def test_bobs_own_app_gets_no_carme_cookie_and_sets_none(pair: tuple[User, User]) -> None:
    _alice, bob = pair
    portal_before = {c["name"]: c["value"] for c in bob.page.context.cookies([BASE])}
    proc = bobs_server(bob)
    try:
        value = app_cookies(bob, bob.job)[0]["value"]
        sent = [
            f"Cookie: carme_session=decoy;  CARME_SESSION=x; __Host-carme_app={value}; theme=dark",
            "Cookie: __Host-carme_session=copy; carme_app =y;__host-carme_bind=z",
        ]
        argv = ["curl", "-sk", "--http1.1", proxied(bob.job, "echo")]
        got = run([*argv, *[a for h in sent for a in ("-H", h)]])
        seen = [line for line in got.stdout.splitlines() if line.lower().startswith("cookie:")]
        assert seen and "theme=dark" in seen[0], got.stdout
        assert not [line for line in seen if "carme" in line.lower()], seen
        # the same server setting cookies, in bob's browser: nothing for the portal, nothing beyond his host
        page = bob.page.context.new_page()
        try:
            page.goto(proxied(bob.job, "echo"))
        finally:
            page.close()
    finally:
        proc.kill()
        proc.communicate(timeout=30)
    host = apps_origin(bob.job).split("//", 1)[1].split(":")[0]
    for cookie in bob.page.context.cookies():
        assert cookie["domain"].lstrip(".") in (host, "127.0.0.1"), cookie
    portal_after = {c["name"]: c["value"] for c in bob.page.context.cookies([BASE])}
    assert portal_after == portal_before, (portal_before, portal_after)
    assert bob.api.get(f"{BASE}/api/sessions").status == 200  # still bob, logged in as before
