# SPDX-License-Identifier: GPL-3.0-or-later
"""Security issue #27, items 8, 9 and 10c, tried on the live demo's nodes as bob, a user of the cluster (adversarial).

8. bob binds Unix sockets at ``/tmp/agent.sock`` and ``/tmp/agent.plugin.sock`` (Zabbix agent 2's old control and
   plugin sockets) and at the paths the agent's configuration names now, while the agent is stopped; root restarts it:
   it is active and stays so, answers ``zabbix_agent2 -R help``, and its control socket is outside /tmp and not
   writable by bob (before the fix the agent failed to start: ``remove /tmp/agent.sock: operation not permitted``);
9. 25 wrong password binds for alice from a node (``ldapwhoami`` to the node's own LDAP URI, StartTLS as its sssd
   connects) do not lock her out: her portal login's password step still succeeds (before the fix 22 of them made her
   right password fail for 900 s); bob's bind from the node with alice's right password is refused, while the same
   bind from the head (the portal's host) is accepted;
10c. bob, in a job of his own on the other node, opens 300 idle TCP connections to alice's session front: while he
   holds them, her requests through the proxy answer 200 within 3 s, and the front has not let his node keep
   hundreds of idle connections (before the fix it held every one, up to its 30 s head timeout).

Uses the ``demo`` fixture (tests/fixtures/demo.py): skips without a demo unless ``CARME_E2E_REQUIRED=1``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.test_promises_proxy_e2e import UNIX_CONNECT
from tests.e2e.test_promises_proxy_e2e import as_bob_on
from tests.e2e.test_promises_proxy_e2e import comment_fields
from tests.e2e.test_promises_proxy_e2e import node_of
from tests.e2e.test_promises_proxy_e2e import on_node
from tests.fixtures.demo import HEAD
from tests.fixtures.demo import LDAP_BASE
from tests.fixtures.demo import NODE_PREFIX
from tests.fixtures.demo import Demo
from tests.fixtures.demo import connect
from tests.fixtures.demo import fresh_account
from tests.fixtures.demo import login
from tests.fixtures.demo import on_head
from tests.fixtures.demo import password_of
from tests.fixtures.demo import proxied
from tests.fixtures.demo import start_jupyterlab
from tests.fixtures.demo import submit_password
from tests.fixtures.demo import wait_session_ready

pytestmark = pytest.mark.e2e

NODE = "node1"  # Slurm node name; the container is NODE_PREFIX + NODE


def first_line(proc: subprocess.Popen[bytes], timeout: float) -> dict[str, Any]:
    """The first line a background command printed (a JSON object), waiting at most ``timeout`` seconds."""
    assert proc.stdout is not None
    deadline, data = time.monotonic() + timeout, b""
    while b"\n" not in data and time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
        chunk = os.read(proc.stdout.fileno(), 65536) if ready else b""
        if ready and not chunk:
            break
        data += chunk
    if b"\n" not in data:
        proc.kill()
        _, err = proc.communicate(timeout=10)
        raise AssertionError(
            f"no answer from {proc.args!r} in {timeout:.0f} s: {data!r} {(err or b'').decode()[-800:]}"
        )
    line: dict[str, Any] = json.loads(data.split(b"\n", 1)[0])
    return line


def finish(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """Wait for a background command to end (killed after ``timeout`` seconds); its pipes closed."""
    try:
        proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate(timeout=10)


# --- 8: the agent's sockets -------------------------------------------------------------------------------------

AGENT_CONF = "/etc/zabbix/zabbix_agent2.conf"
OLD_PATHS = ("/tmp/agent.sock", "/tmp/agent.plugin.sock")  # agent 2's defaults, which the role used to keep

# Run as bob: binds a listening Unix socket at each path given, prints what it got, then holds them.
HOLDER = """
import json, os, socket, sys, time
out, held = {"pid": os.getpid(), "bound": [], "failed": {}}, []
for path in sys.argv[2:]:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.bind(path)
        s.listen(1)
        held.append(s)
        out["bound"].append(path)
    except OSError as exc:
        out["failed"][path] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out), flush=True)
time.sleep(float(sys.argv[1]))
"""


def agent_setting(node: str, name: str, default: str) -> str:
    conf = on_node(node, "cat", AGENT_CONF)
    assert conf.returncode == 0, conf.stderr
    found = re.findall(rf"^{name}=(.*)$", conf.stdout, re.M)
    return found[-1].strip() if found else default


def agent_state(node: str) -> tuple[str, str]:
    shown = on_node(node, "systemctl", "show", "zabbix-agent2", "--property=ActiveState,MainPID").stdout
    props = dict(line.split("=", 1) for line in shown.split() if "=" in line)
    return props.get("ActiveState", ""), props.get("MainPID", "")


def stays_active(node: str) -> tuple[str, str]:
    """The agent's state once it settled: active within 15 s, and still active with the same process 5 s later."""
    deadline = time.monotonic() + 15
    while (state := agent_state(node))[0] != "active" and time.monotonic() < deadline:
        time.sleep(1)
    time.sleep(5)
    again = agent_state(node)
    return again if again == state else ("unsteady", f"{state} then {again}")


@contextlib.contextmanager
def bob_holds(node: str, paths: list[str]) -> Iterator[dict[str, Any]]:
    """bob's listening sockets at ``paths`` on the node, for the block; his holder killed (by pid) and the socket
    files he made removed afterwards."""
    argv = ["podman", "exec", NODE_PREFIX + node, "runuser", "-u", "bob", "--", "timeout", "120"]
    proc = subprocess.Popen(
        [*argv, "python3", "-u", "-c", HOLDER, "110", *paths], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    held: dict[str, Any] = {}
    try:
        held = first_line(proc, 30)
        yield held
    finally:
        if held.get("pid"):
            on_node(node, "kill", str(held["pid"]))
        finish(proc, 10)
        for path in held.get("bound", []):  # only bob's own files (the agent's, if any, stay)
            on_node(node, "find", path, "-maxdepth", "0", "-type", "s", "-user", "bob", "-delete")


def test_bob_squatting_the_agents_sockets_does_not_stop_it(demo: Demo) -> None:
    control = agent_setting(NODE, "ControlSocket", "/tmp/agent.sock")
    plugin = agent_setting(NODE, "PluginSocket", "/tmp/agent.plugin.sock")
    paths = list(dict.fromkeys([*OLD_PATHS, control, plugin]))
    assert on_node(NODE, "systemctl", "stop", "zabbix-agent2").returncode == 0  # the restart's window, held open
    try:
        with bob_holds(NODE, paths) as held:
            assert "/tmp/agent.sock" in held["bound"], f"bob could not even squat /tmp/agent.sock: {held}"
            on_node(NODE, "systemctl", "restart", "zabbix-agent2", timeout=90)
            state = stays_active(NODE)
            log = on_node(NODE, "journalctl", "-u", "zabbix-agent2", "-n", "15", "--no-pager").stdout
            assert state[0] == "active", f"the agent is {state} with bob's sockets at {held['bound']}:\n{log}"
            runtime = on_node(NODE, "zabbix_agent2", "-c", AGENT_CONF, "-R", "help", timeout=30)
            assert runtime.returncode == 0, f"-R help: {runtime.stdout}{runtime.stderr}"
            assert not control.startswith("/tmp/"), f"the control socket is in the shared /tmp: {control}"
            assert on_node(NODE, "test", "-S", control).returncode == 0, f"no control socket at {control}"
            assert control not in held["bound"], held
            for path in (control, os.path.dirname(control)):
                assert as_bob_on(NODE, "test", "-w", path).returncode != 0, f"bob may write {path}"
            reached = as_bob_on(NODE, "python3", "-c", UNIX_CONNECT, control).stdout.strip()
            assert reached != "connected", f"bob connects to the agent's control socket {control}"
    finally:
        if agent_state(NODE)[0] != "active":  # leave the agent running (bob's files are gone by now)
            on_node(NODE, "systemctl", "restart", "zabbix-agent2", timeout=90)


# --- 9: LDAP binds from a node ----------------------------------------------------------------------------------

# Run as bob: N wrong binds as DN to URI with the TLS options that follow; prints each exit status.
WRONG_BINDS = """n=$1 uri=$2 dn=$3; shift 3; i=0
while [ "$i" -lt "$n" ]; do ldapwhoami -x "$@" -H "$uri" -D "$dn" -w wrong >/dev/null 2>&1; echo $?; i=$((i+1)); done"""


def node_ldap(node: str) -> tuple[str, list[str]]:
    """The LDAP URI the node's sssd uses and the options for the same kind of connection (-ZZ for StartTLS)."""
    conf = on_node(node, "cat", "/etc/sssd/sssd.conf").stdout
    uri = re.search(r"^ldap_uri\s*=\s*([^,\s]+)", conf, re.M)
    assert uri, "no ldap_uri in the node's sssd.conf"
    start_tls = re.search(r"^ldap_id_use_start_tls\s*=\s*true", conf, re.M | re.I)
    return uri.group(1), ["-ZZ"] if start_tls and uri.group(1).startswith("ldap://") else []


@pytest.fixture
def alice_unlocked() -> Iterator[str]:
    fresh_account("alice")  # no lock or failure count left by an earlier run
    try:
        yield "alice"
    finally:
        fresh_account("alice")


def test_wrong_binds_from_a_node_lock_nobody_out(demo: Demo, alice_unlocked: str) -> None:
    user = alice_unlocked
    dn = f"uid={user},ou=people,{LDAP_BASE}"
    uri, tls = node_ldap(NODE)
    binds = as_bob_on(NODE, "sh", "-c", WRONG_BINDS, "sh", "25", uri, dn, *tls)
    statuses = binds.stdout.split()
    assert statuses == ["49"] * 25, f"bob's wrong binds from {NODE} ({uri} {tls}): {statuses} {binds.stderr}"

    page = demo.context().new_page()  # alice's password step, without resetting anything first
    try:
        answer = submit_password(page, user, password_of(user))
        assert answer.status in (200, 302), f"alice's right password refused: {answer.status} {page.content()[:500]}"
        page.wait_for_selector("input[name=code]", timeout=20_000)  # on to the TOTP step
        demo.steps.shot(page, "alice-password-accepted-after-binds-from-a-node")
    finally:
        page.context.close()

    right = as_bob_on(NODE, "ldapwhoami", "-x", *tls, "-H", uri, "-D", dn, "-w", password_of(user))
    assert right.returncode == 49 and "Invalid credentials" in right.stderr, (
        f"bob's bind as alice with her right password from {NODE}: rc {right.returncode} {right.stdout}{right.stderr}"
    )
    portal_host = on_head("ldapwhoami", "-x", "-ZZ", "-D", dn, "-w", password_of(user))
    assert portal_host.returncode == 0, f"alice's bind from the head fails: {portal_host.stderr}"


# --- 10c: a flood of idle connections to alice's front ----------------------------------------------------------

FLOOD_SIZE = 300
IDLE_HELD_MAX = FLOOD_SIZE // 10  # what the front may let one peer keep open without the front key (the fix: 8)
ANSWER_WITHIN_S = 3.0

# Run as bob in his job: opens N connections to HOST:PORT and sends nothing; 3 s later prints how many the front
# still holds open, then keeps them for HOLD seconds (the job is cancelled sooner).
FLOOD = """
import json, os, socket, sys, time
host, port, count, hold = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
conns, failed = [], 0
for _ in range(count):
    try:
        conns.append(socket.create_connection((host, port), timeout=5))
    except OSError:
        failed += 1
time.sleep(3)
def held(s):
    s.setblocking(False)
    try:
        s.recv(1)
    except BlockingIOError:
        return True
    except OSError:
        return False
    return False
job = os.environ.get("SLURM_JOB_ID", "")
print(json.dumps({"job": job, "connected": len(conns), "failed": failed, "open": sum(map(held, conns))}), flush=True)
time.sleep(hold)
"""


@contextlib.contextmanager
def bobs_flood(node: str, host: str, port: int) -> Iterator[dict[str, Any]]:
    """bob's job on ``node`` holding FLOOD_SIZE idle connections to host:port; cancelled afterwards."""
    srun = ["runuser", "-u", "bob", "--", "timeout", "90", "srun", f"--nodelist={node}", "--mem=100", "--time=3"]
    argv = ["podman", "exec", HEAD, *srun, "--chdir=/tmp", "python3", "-u", "-c", FLOOD]
    proc = subprocess.Popen(
        [*argv, host, str(port), str(FLOOD_SIZE), "60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    flood: dict[str, Any] = {}
    try:
        flood = first_line(proc, 75)
        yield flood
    finally:
        if flood.get("job"):
            on_head("scancel", str(flood["job"]))
        finish(proc, 30)


def timed_status(api: Any, job_id: int) -> tuple[int, float]:
    began = time.monotonic()
    status = api.get(proxied(job_id, "api/status"), max_redirects=0, timeout=30_000).status
    return status, round(time.monotonic() - began, 2)


def test_a_flood_of_idle_connections_does_not_delay_alices_front(demo: Demo) -> None:
    page, _ = login(demo, "alice")
    api, job = page.context.request, 0
    try:
        job = start_jupyterlab(page, time_minutes=15)
        wait_session_ready(api, job)
        connect(api, job)
        assert timed_status(api, job)[0] == 200, "alice's session does not answer through the proxy"
        fields, node = comment_fields(job), node_of(job)
        other = next(n for n in ("node1", "node2") if n != node)
        with bobs_flood(other, fields["host"], int(fields["port"])) as flood:
            assert flood["connected"] + flood["failed"] == FLOOD_SIZE, flood
            answers = []
            for _ in range(5):
                answers.append(timed_status(api, job))
                time.sleep(0.5)
            assert all(s == 200 for s, _ in answers), f"alice's requests during bob's flood {flood}: {answers}"
            slowest = max(t for _, t in answers)
            assert slowest < ANSWER_WITHIN_S, f"alice waited {slowest} s during bob's flood {flood}: {answers}"
            assert flood["open"] <= IDLE_HELD_MAX, f"alice's front keeps {flood['open']} of bob's idle connections"
        assert timed_status(api, job)[0] == 200
    finally:
        if job:
            on_head("scancel", str(job))
        page.context.close()
