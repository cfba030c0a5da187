# SPDX-License-Identifier: GPL-3.0-or-later
"""Chromium in a network namespace of its own (tests/fixtures/browser_netns.py, the ``demo`` fixture's browser)
loads and posts to a server on the host's loopback while podman networks come and go (issue 32).

No demo needed: a slow HTTPS server on 127.0.0.1:<free port> (each answer waits, so requests are in flight when the
addresses change), chromium in the namespace through the fixture's forwarder, and a thread that creates a podman
network, runs a container on it (netavark brings up a bridge with an address and a veth, then takes them down) and
removes it, again and again. The control: chromium in the host's namespace, under the same churn, loses requests
(net::ERR_NETWORK_CHANGED). ``-rP`` shows each run's numbers.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path

import pytest

from tests.fixtures.browser_netns import NETNS_DIR
from tests.fixtures.browser_netns import PREFIX
from tests.fixtures.browser_netns import chromium_in_netns
from tests.fixtures.browser_netns import ports_of
from tests.fixtures.browser_netns import remove_stale
from tests.fixtures.demo import CHROMIUM
from tests.fixtures.demo import CHROMIUM_ARGS

pytestmark = [pytest.mark.host, pytest.mark.slow]

ROUNDS = 30  # each: a page loaded (GET), its form posted (POST)
ANSWER_DELAY_S = 0.3
FORM = "<form method=post action=/posted><input name=n value=1><button>Post</button></form>"


# An HTTP/2 server over TLS, as the demo's nginx: chromium closes its HTTP/2 sessions, with every request in flight on
# them, when the host's addresses change (HTTP/1.1 requests already sent survive it). Node's http2, the node that
# Playwright brings; each answer waits ANSWER_DELAY_S.
H2_SERVER = """
const [key, cert, delay] = process.argv.slice(-3);
const fs = require("fs");
const server = require("http2").createSecureServer({key: fs.readFileSync(key), cert: fs.readFileSync(cert)});
server.on("stream", (stream, headers) => {
  let body = "";
  stream.on("error", () => {});
  stream.on("data", (chunk) => { body += chunk; });
  stream.on("end", () => setTimeout(() => {
    if (stream.closed) return;
    stream.respond({":status": 200, "content-type": "text/html"});
    stream.end(headers[":method"] === "POST" ? `<p id=posted>${body}</p>` : process.env.FORM);
  }, 1000 * Number(delay)));
});
server.on("sessionError", () => {});
server.listen(0, "127.0.0.1", () => console.log(server.address().port));
"""


@contextlib.contextmanager
def serve_h2(directory: Path) -> Iterator[int]:
    """The HTTP/2 server on 127.0.0.1 (a self-signed certificate made in ``directory``); its port."""
    from playwright._impl._driver import compute_driver_executable

    key, cert = directory / "key.pem", directory / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1"],
        capture_output=True, check=True,
    )  # fmt: skip
    node = compute_driver_executable()[0]
    argv = [str(node), "-e", H2_SERVER, str(key), str(cert), str(ANSWER_DELAY_S)]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env={**os.environ, "FORM": FORM}) as server:
        try:
            assert server.stdout is not None
            yield int(server.stdout.readline())
        finally:
            server.terminate()


@dataclass
class Browsing:
    """What chromium did: posts answered, and its failures in its own words (requestfailed, Playwright errors)."""

    posted: int = 0
    failures: list[str] = field(default_factory=list)
    online: bool | None = None


def browse(chromium: Path | str, base: str, rounds: int = ROUNDS) -> Browsing:
    """``rounds`` times: load ``base``'s form, post it and see the answer, in a fresh headless chromium."""
    from playwright.sync_api import Error
    from playwright.sync_api import sync_playwright

    seen = Browsing()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(chromium), headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(ignore_https_errors=True)
        page.on("requestfailed", lambda request: seen.failures.append(f"{request.method}: {request.failure}"))
        for n in range(rounds):
            try:
                page.goto(f"{base}/form?round={n}", timeout=15_000)
                seen.online = bool(page.evaluate("navigator.onLine")) if seen.online is None else seen.online
                with page.expect_navigation(timeout=15_000):
                    page.click("button")
                seen.posted += page.locator("#posted").count()
            except Error as exc:
                seen.failures.append(f"round {n}: {str(exc).splitlines()[0]}")
        browser.close()
    return seen


def tiny_rootfs(directory: Path) -> Path:
    """A container's root file system holding /bin/true and its libraries: no image needed."""
    true = Path(shutil.which("true") or "/bin/true")
    libraries = re.findall(r"(/\S+)", subprocess.run(["ldd", str(true)], capture_output=True, text=True).stdout)
    for source, target in [(str(true), "bin/true"), *((lib, lib.lstrip("/")) for lib in libraries)]:
        (directory / target).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, directory / target)
    return directory


@contextlib.contextmanager
def podman_churn(rootfs: Path) -> Iterator[list[str]]:
    """Until the ``with`` ends, a thread creates a podman network, runs a container on it and removes the network,
    again and again; yields the cycles' outcomes ("ok" or what failed)."""
    cycles: list[str] = []
    stop = threading.Event()

    def churn() -> None:
        while not stop.is_set():
            network = f"h-e2enet-{os.getpid()}-{len(cycles)}"
            steps = [
                ["podman", "network", "create", network],
                ["podman", "run", "--rm", "--network", network, "--rootfs", str(rootfs), "/bin/true"],
                ["podman", "network", "rm", "-f", network],
            ]
            results = [subprocess.run(step, capture_output=True, text=True, timeout=60) for step in steps]
            failed = [f"{' '.join(r.args[:3])}: {r.stderr.strip()}" for r in results if r.returncode]
            cycles.append("; ".join(failed) or "ok")

    thread = threading.Thread(target=churn, name="podman-churn", daemon=True)
    thread.start()
    try:
        yield cycles
    finally:
        stop.set()
        thread.join()


def requirements() -> str | None:
    """Why this host cannot run these tests, or None."""
    if os.geteuid() != 0:
        return "needs root (ip netns, nsenter)"
    for program in (CHROMIUM, "podman", "ip", "nsenter", "ldd", "openssl"):
        if shutil.which(program) is None:
            return f"{program} missing"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[dev]')"
    return None


@pytest.fixture
def host() -> None:
    why = requirements()
    if why:
        pytest.skip(why)


def browse_under_churn(tmp_path: Path, in_netns: bool, rounds: int) -> Browsing:
    """``browse`` the HTTP/2 server while podman networks come and go, chromium in a namespace or in the host's."""
    with contextlib.ExitStack() as stack:
        port = stack.enter_context(serve_h2(tmp_path))
        chromium = stack.enter_context(chromium_in_netns(CHROMIUM, [port])) if in_netns else CHROMIUM
        cycles = stack.enter_context(podman_churn(tiny_rootfs(tmp_path / "rootfs")))
        started = time.monotonic()
        seen = browse(chromium, f"https://127.0.0.1:{port}", rounds)
        took = time.monotonic() - started
    print(f"in_netns={in_netns}: {seen.posted}/{rounds} posted in {took:.0f} s, {len(cycles)} podman cycles")
    print(f"{len(seen.failures)} failures: {seen.failures}")
    assert cycles and set(cycles) == {"ok"}, cycles
    return seen


def test_ports_of_the_portal_and_the_apps_origin() -> None:
    assert ports_of("https://127.0.0.1:8443", "https://*.apps.localhost:8444", "https://127.0.0.1:8443/x") == [
        8443,
        8444,
    ]
    assert ports_of("http://localhost", "https://localhost") == [80, 443]


def test_chromium_in_the_namespace_loads_from_the_hosts_loopback(host: None, tmp_path: Path) -> None:
    """No route out of the namespace: chromium loads and posts all the same, by address and by the localhost names
    (chromium resolves *.localhost itself; the forwarder's ::1 falls back to 127.0.0.1), and counts itself online."""
    with serve_h2(tmp_path) as port, chromium_in_netns(CHROMIUM, [port]) as chromium:
        netns = Path(chromium.read_text().split("--net=")[1].split()[0])
        assert netns.exists()
        for base in ("127.0.0.1", "localhost", "j1-abc.apps.localhost"):
            seen = browse(chromium, f"https://{base}:{port}", rounds=2)
            assert (seen.posted, seen.failures, seen.online) == (2, [], True), (base, seen)
    assert not netns.exists(), "the namespace outlived its with"


def test_a_dead_sessions_namespace_is_removed(host: None) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    name = f"{PREFIX}{gone.pid}-0"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        assert name in remove_stale()
        assert not (NETNS_DIR / name).exists()
    finally:
        subprocess.run(["ip", "netns", "delete", name], capture_output=True, check=False)


def test_no_request_fails_while_podman_networks_come_and_go(host: None, tmp_path: Path) -> None:
    seen = browse_under_churn(tmp_path, in_netns=True, rounds=ROUNDS)
    assert (seen.posted, seen.failures) == (ROUNDS, [])


def test_the_control_in_the_hosts_namespace_loses_requests(host: None, tmp_path: Path) -> None:
    """The same churn aborts chromium's requests in the host's namespace: what the namespace is for."""
    seen = browse_under_churn(tmp_path, in_netns=False, rounds=10)
    assert any("net::ERR_NETWORK_CHANGED" in failure for failure in seen.failures), seen
