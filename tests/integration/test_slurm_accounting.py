# SPDX-License-Identifier: GPL-3.0-or-later
"""The ``slurm_accounting`` module (roles/slurm) against a real slurmdbd (``host_slurm``).

Its users' ``admin_level`` is what lets the portal's Slurm identity stop any session for a portal admin: the test
proves the level is applied, idempotent and dry-run in check mode, that a bad level fails before anything is written,
and that the level is what Slurm itself checks: dave cannot cancel alice's job through slurmrestd until he is an
Operator. dave is the user no other test cancels with; his level is reset at the end.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fixtures.hostslurm import ACCOUNT
from tests.fixtures.hostslurm import CLUSTER
from tests.fixtures.hostslurm import HostSlurm
from tests.roles.harness import ModuleRun
from tests.roles.harness import run_module
from webui.projects import accounting
from webui.projects.accounting import Sacctmgr
from webui.slurm.client import API
from webui.slurm.client import SlurmClient
from webui.slurm.errors import SlurmError
from webui.slurm.jwt_tokens import TokenSource
from webui.slurm.records import parse_projects

pytestmark = [pytest.mark.host, pytest.mark.slow]

OPERATOR = "dave"
SERVICES = "carmetestsvc"


def apply(cluster: HostSlurm, users: list[dict[str, Any]], *, check: bool = False) -> ModuleRun:
    """Run the module through real Ansible against the fixture's slurmdbd."""
    args = {
        "cluster": CLUSTER,
        "accounts": [{"name": SERVICES, "qos": ["normal"], "default_qos": "normal"}],
        "users": users,
        "purge_users": False,
    }
    return run_module("slurm", "slurm_accounting", args, check=check, env={"SLURM_CONF": str(cluster.slurm_conf)})


def admin_level(cluster: HostSlurm, user: str) -> str:
    return cluster.run(["sacctmgr", "-n", "-P", "show", "user", user, "format=adminlevel"]).stdout.strip()


def rest_cancel(cluster: HostSlurm, user: str, job_id: int) -> tuple[int, str]:
    request = urllib.request.Request(
        f"{cluster.restd_url}{API}/job/{job_id}", method="DELETE", headers=cluster.rest_headers(user)
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            body = response.read().decode()
            errors = json.loads(body or "{}").get("errors") or []
            return (500 if errors else response.status), body
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture
def cluster(host_slurm: HostSlurm) -> Iterator[HostSlurm]:
    try:
        yield host_slurm
    finally:
        host_slurm.run(["sacctmgr", "-i", "modify", "user", "where", f"name={OPERATOR}", "set", "AdminLevel=None"])
        host_slurm.run(
            ["sacctmgr", "-i", "delete", "user", "where", f"name={OPERATOR}", f"account={SERVICES}"], check=False
        )
        host_slurm.run(["sacctmgr", "-i", "delete", "account", SERVICES], check=False)
        host_slurm.run(["scancel", "-u", "alice"], check=False)


def test_admin_level_is_applied_idempotent_and_what_slurm_checks(cluster: HostSlurm) -> None:
    job = cluster.sbatch("alice", "sleep 300", f"--account={ACCOUNT}")
    code, body = rest_cancel(cluster, OPERATOR, job)
    assert code != 200, f"dave (no admin level) cancelled alice's job: {body}"
    assert cluster.job_state(job) in ("PENDING", "RUNNING", "CONFIGURING")

    operator = [{"name": OPERATOR, "account": SERVICES, "admin_level": "Operator"}]
    run = apply(cluster, operator, check=True)
    assert run.rc == 0, run.output
    assert run.result["changed"] and ["sacctmgr", "-i", "modify", "user", "where", f"name={OPERATOR}", "set",
                                  "AdminLevel=Operator"] in run.result["commands"]  # fmt: skip
    assert admin_level(cluster, OPERATOR) == "None", "check mode must not write"

    run = apply(cluster, operator)
    assert run.rc == 0 and run.result["changed"], run.output
    assert run.result["diff"]["after"]["admin_level"] == {OPERATOR: "Operator"}
    assert admin_level(cluster, OPERATOR) == "Operator"

    run = apply(cluster, operator)
    assert run.rc == 0 and not run.result["changed"], f"second run changed something: {run.result.get('commands')}"

    code, body = rest_cancel(cluster, OPERATOR, job)
    assert code == 200, body
    assert cluster.wait_job(job, timeout=60) == "CANCELLED"


def test_a_bad_admin_level_fails_naming_the_user_and_writes_nothing(cluster: HostSlurm) -> None:
    users = [{"name": OPERATOR, "account": SERVICES, "admin_level": "root"}]
    run = apply(cluster, users)
    assert run.rc != 0
    assert f"users[0] ({OPERATOR}): admin_level must be one of None, Operator, Administrator" in run.output
    assert SERVICES not in cluster.run(["sacctmgr", "-n", "-P", "show", "account", "format=account"]).stdout


def coordinators(cluster: HostSlurm, account: str) -> list[str]:
    shown = cluster.run(["sacctmgr", "-n", "-P", "show", "account", account, "withcoord", "format=coordinators"])
    return sorted(c for c in shown.stdout.strip().split(",") if c)


def test_coordinators_are_exactly_the_declared_ones_idempotent_and_checked(cluster: HostSlurm) -> None:
    """A project's managers are its account's coordinators (issue 31): added, removed, unchanged on a second run."""
    users = [{"name": u, "account": SERVICES} for u in ("alice", "bob", OPERATOR)]

    def accounts(names: list[str] | None) -> list[dict[str, Any]]:
        return [{"name": SERVICES, "qos": ["normal"], "default_qos": "normal", "coordinators": names}]

    def run(names: list[str] | None) -> ModuleRun:
        args = {"cluster": CLUSTER, "accounts": accounts(names), "users": users, "purge_users": False}
        return run_module("slurm", "slurm_accounting", args, env={"SLURM_CONF": str(cluster.slurm_conf)})

    try:
        first = run(["alice", "bob"])
        assert first.rc == 0 and coordinators(cluster, SERVICES) == ["alice", "bob"], first.output
        again = run(["bob", "alice"])
        assert again.rc == 0 and not again.result["changed"], again.result.get("commands")
        swapped = run(["bob", OPERATOR])
        assert swapped.rc == 0 and coordinators(cluster, SERVICES) == ["bob", OPERATOR], swapped.output
        assert swapped.result["diff"]["after"]["coordinators"] == {SERVICES: ["bob", OPERATOR]}
        kept = run(None)  # not declared: left as they are
        assert kept.rc == 0 and not kept.result["changed"] and coordinators(cluster, SERVICES) == ["bob", OPERATOR]
        bad = run(["alice;rm"])
        assert bad.rc != 0 and f"accounts[0] ({SERVICES}).coordinators: not a user name: 'alice;rm'" in bad.output
    finally:
        for user in ("alice", "bob"):
            where = ["where", f"name={user}", f"account={SERVICES}"]
            cluster.run(["sacctmgr", "-i", "delete", "user", *where], check=False)


def test_the_portal_creates_a_project_and_changes_its_members_as_an_operator(cluster: HostSlurm) -> None:
    """What webui.projects.accounting sends, run as an Operator (the portal's Slurm identity), on a real slurmdbd:
    the project reads back as the portal's own with its budget, manager and members, and bob's plain sbatch in it
    runs."""
    level = ["sacctmgr", "-i", "modify", "user", "where", f"name={OPERATOR}", "set"]
    cluster.run([*level, "AdminLevel=Operator"])
    portal = Sacctmgr(("runuser", "-u", OPERATOR, "--", "sacctmgr"), str(cluster.slurm_conf))
    name = "carmeproj"
    client = SlurmClient(cluster.restd_url, TokenSource(str(cluster.jwt_key)), timeout=30)
    try:
        portal.sacctmgr(accounting.create_argv(name, "Portal test", 600, ["normal"]))
        portal.sacctmgr(accounting.member_argv(name, "alice", add=True))
        portal.sacctmgr(accounting.coordinator_argv(name, "alice"))
        portal.sacctmgr(accounting.member_argv(name, "bob", add=True))
        with pytest.raises(SlurmError):  # there already: refused, not silently taken
            portal.sacctmgr(accounting.create_argv(name, "Portal test", 600, ["normal"]))
        projects = parse_projects(client.accounts(OPERATOR), client.associations(OPERATOR))
        (made,) = [p for p in projects if p.name == name]
        assert (made.source, made.gpu_minutes, made.managers, made.members) == (
            "portal",
            600,
            ("alice",),
            ("alice", "bob"),
        )
        assert next(p for p in projects if p.name == ACCOUNT).source == "inventory"
        job = cluster.sbatch("bob", "true", f"--account={name}")
        assert cluster.wait_job(job, timeout=120) == "COMPLETED"
        portal.sacctmgr(accounting.member_argv(name, "bob", add=False))
        portal.sacctmgr(accounting.budget_argv(name, 2400))  # an approved allocation request
        projects = parse_projects(client.accounts(OPERATOR), client.associations(OPERATOR))
        changed = next(p for p in projects if p.name == name)
        assert (changed.members, changed.gpu_minutes) == (("alice",), 2400)
    finally:
        cluster.run(["sacctmgr", "-i", "delete", "account", name], check=False)
        cluster.run([*level, "AdminLevel=None"])


def test_an_ended_project_takes_no_new_job_from_the_portal_or_the_inventory(cluster: HostSlurm) -> None:
    """Issue 31's end date on a real slurmdbd: the tick's ``GrpSubmitJobs=0`` (run as an Operator) makes Slurm refuse
    bob's sbatch into the portal's account; the slurm role's accounting does the same for an inventory account with
    ``GrpSubmitJobs: 0`` (an ended declared project) and lifts it again with ``-1`` (its end date moved on)."""
    level = ["sacctmgr", "-i", "modify", "user", "where", f"name={OPERATOR}", "set"]
    cluster.run([*level, "AdminLevel=Operator"])
    portal = Sacctmgr(("runuser", "-u", OPERATOR, "--", "sacctmgr"), str(cluster.slurm_conf))
    name, declared = "carmeended", "carmeinvend"
    try:
        portal.sacctmgr(accounting.create_argv(name, "Ended test", 600, ["normal"]))
        portal.sacctmgr(accounting.member_argv(name, "bob", add=True))
        portal.sacctmgr(accounting.submit_argv(name, 0))
        refused = cluster.run(["sbatch", f"--account={name}", "--wrap=true"], user="bob", check=False)
        assert refused.returncode != 0 and "Job violates accounting/QOS policy" in refused.stderr

        def declare(jobs: int) -> ModuleRun:
            account = {"name": declared, "qos": ["normal"], "default_qos": "normal", "GrpSubmitJobs": jobs}
            user = {"name": "bob", "account": declared, "qos": ["normal"], "default_qos": "normal"}
            args = {"cluster": CLUSTER, "accounts": [account], "users": [user], "purge_users": False}
            return run_module("slurm", "slurm_accounting", args, env={"SLURM_CONF": str(cluster.slurm_conf)})

        run = declare(0)
        assert run.rc == 0 and run.result["changed"], run.output
        refused = cluster.run(["sbatch", f"--account={declared}", "--wrap=true"], user="bob", check=False)
        assert refused.returncode != 0 and "Job violates accounting/QOS policy" in refused.stderr
        run = declare(-1)
        assert run.rc == 0 and run.result["changed"], run.output
        job = cluster.sbatch("bob", "true", f"--account={declared}")
        assert cluster.wait_job(job, timeout=120) == "COMPLETED"
    finally:
        for account in (name, declared):
            cluster.run(["sacctmgr", "-i", "delete", "user", "where", "name=bob", f"account={account}"], check=False)
            cluster.run(["sacctmgr", "-i", "delete", "account", account], check=False)
        cluster.run([*level, "AdminLevel=None"])
