# SPDX-License-Identifier: GPL-3.0-or-later
"""The carme_upgrade role (playbooks/upgrade_drain.yml, upgrade_fetch.yml, upgrade_finish.yml): its filters, and
the three playbooks run for real on this host with a local connection against stand-ins of sinfo, scontrol, squeue,
scancel and carme-portal that keep the nodes and jobs in a JSON file and log every call. Each is run twice: the
second run changes nothing in Slurm."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.roles.harness import REPO_ROOT
from tests.roles.harness import _ansible_bin
from tests.roles.harness import ansible_env
from tests.roles.harness import load_file

filters = load_file("roles/carme_upgrade/filter_plugins/carme_upgrade_filters.py", "carme_upgrade_filters")

FAKE = r"""#!{python}
import json, os, sys
from pathlib import Path
state_file = Path(__file__).parent / "state.json"
state = json.loads(state_file.read_text())
cmd, args = Path(sys.argv[0]).name, sys.argv[1:]
state["log"].append([cmd, *args] + ([os.environ.get("CARME_PORTAL_ACTOR", "")] if cmd == "carme-portal" else []))
kv = dict(a.split("=", 1) for a in args if "=" in a)
if cmd == "sinfo":
    for name, (st, reason) in state["nodes"].items():
        print(f"{name}|{st}|{reason}")
        print(f"{name}|{st}|{reason}")  # a second partition
elif cmd == "scontrol" and args[0] == "update":
    for name in kv["NodeName"].split(","):
        state["nodes"][name] = ["drained", kv["Reason"]] if kv["State"] == "DRAIN" else ["idle", ""]
elif cmd == "scontrol" and args[:2] == ["show", "job"]:
    for j in state["jobs"]:
        print(f"JobId={j['id']} JobName=x UserId=alice(1000) JobState={j['state']} Requeue={j['requeue']} "
              f"BatchFlag={j['batch']} Comment={j['comment']}")
    if not state["jobs"]:
        print("No jobs in the system")
elif cmd == "scontrol" and args[0] == "requeue":
    for j in state["jobs"]:
        if j["id"] in args[1].split(","):
            j["state"] = "PENDING"
elif cmd == "scancel":
    for j in state["jobs"]:
        if j["id"] in args:
            j["state"] = "CANCELLED"
elif cmd == "squeue":
    print("\n".join(j["id"] for j in state["jobs"] if j["state"] in ("RUNNING", "COMPLETING")))
elif cmd == "carme-portal" and args[0] == "reservations-sync":
    print("created reservation 3 (gpu-week, 2026-12-01T08:00 to 2026-12-05T18:00)")
state_file.write_text(json.dumps(state))
"""


# -- the filters ----------------------------------------------------------------------------------------------
SINFO = (
    "n1|idle|none\nn2|mixed|none\nn3|drained|carme-upgrade: upgrade-1\nn4|draining|disk failed\n"
    "n3|drained|carme-upgrade: upgrade-1\n"
)


def test_nodes_to_drain_and_to_resume() -> None:
    assert filters.carme_upgrade_nodes_to_drain(SINFO, "carme-upgrade") == ["n1", "n2", "n4"]
    assert filters.carme_upgrade_nodes_drained(SINFO, "carme-upgrade") == ["n3"]  # not n4: another reason


def test_jobs_sessions_are_never_requeued() -> None:
    text = (
        "JobId=1 JobName=train JobState=RUNNING Requeue=1 BatchFlag=1 Comment=(null)\n"
        "JobId=2 JobName=carme-jupyter JobState=RUNNING Requeue=1 BatchFlag=1 Comment=carme:v1;app=jupyter\n"
        "JobId=3 JobName=srun JobState=RUNNING Requeue=1 BatchFlag=0 Comment=(null)\n"
        "JobId=4 JobName=held JobState=PENDING Requeue=1 BatchFlag=1 Comment=(null)\n"
    )
    jobs = {job["id"]: job for job in filters.carme_upgrade_jobs(text)}
    assert [jobs[i]["requeue"] for i in "1234"] == [True, False, False, True]
    assert jobs["2"]["session"] and jobs["2"]["running"] and jobs["4"]["pending"]
    assert filters.carme_upgrade_jobs("No jobs in the system\n") == []


def test_the_drain_reason_is_the_preflights() -> None:
    ours = yaml.safe_load((REPO_ROOT / "roles/carme_upgrade/defaults/main.yml").read_text())
    backups = yaml.safe_load((REPO_ROOT / "roles/carme_backup/defaults/main.yml").read_text())
    assert ours["carme_upgrade_drain_reason"] == backups["carme_backup_drain_reason"]


# -- the playbooks on this host ----------------------------------------------------------------------------------
@pytest.fixture
def fake(tmp_path: Path) -> Path:
    """A directory of stand-ins (state.json: nodes, jobs, the calls' log)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "fake.py"
    script.write_text(FAKE.replace("{python}", sys.executable))
    script.chmod(0o755)
    for name in ("sinfo", "scontrol", "squeue", "scancel", "carme-portal"):
        (bin_dir / name).symlink_to(script)
    return bin_dir


def set_state(fake: Path, nodes: dict[str, list[str]], jobs: list[dict[str, str]]) -> None:
    (fake / "state.json").write_text(json.dumps({"nodes": nodes, "jobs": jobs, "log": []}))


def read_state(fake: Path) -> dict[str, Any]:
    found: dict[str, Any] = json.loads((fake / "state.json").read_text())
    return found


def play(tmp_path: Path, fake: Path, playbook: str, **extravars: Any) -> subprocess.CompletedProcess[str]:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"slurm_controller": {"hosts": {"localhost": None}},
                                                              "portal": {"hosts": {"localhost": None}}}}}))  # fmt: skip
    variables = {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable, "ansible_become": False,
        "carme_upgrade_set": "upgrade-20261127T150000Z", "carme_upgrade_portal_cli": str(fake / "carme-portal"),
        "carme_upgrade_environment": {"PATH": f"{fake}:/usr/sbin:/usr/bin:/sbin:/bin"},
        "carme_upgrade_poll_interval": 1, "carme_upgrade_usage_settle": 0, **extravars,
    }  # fmt: skip
    argv = [_ansible_bin("ansible-playbook"), str(REPO_ROOT / "playbooks" / playbook), "-i", str(inventory),
            "-e", json.dumps(variables)]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, env=ansible_env(), timeout=300, check=False)


def job(job_id: str, state: str, requeue: str = "1", batch: str = "1", comment: str = "(null)") -> dict[str, str]:
    return {"id": job_id, "state": state, "requeue": requeue, "batch": batch, "comment": comment}


def test_drain_posts_the_notice_drains_and_ends_the_jobs(tmp_path: Path, fake: Path) -> None:
    set_state(
        fake,
        {"n1": ["idle", ""], "n2": ["mixed", ""], "n3": ["drained", "carme-upgrade: upgrade-20261127T150000Z"]},
        [job("1", "RUNNING"), job("2", "RUNNING", comment="carme:v1;app=jupyter;state=ready"),
         job("3", "RUNNING", requeue="0"), job("4", "PENDING")],
    )  # fmt: skip
    run = play(tmp_path, fake, "upgrade_drain.yml", carme_upgrade_drain_timeout=2, carme_upgrade_started=1795791659)
    assert run.returncode == 0, run.stdout + run.stderr
    found = read_state(fake)
    log = found["log"]
    post = next(call for call in log if call[0] == "carme-portal")
    assert post[1:3] == ["news-post", "upgrade"] and post[-1] == "carme-upgrade"
    assert "since 2026-11-27 15:00 UTC" in post[3] and "at 2026-11-27 15:01 UTC" in post[3]  # 15:00:59 + 2 s
    assert ["scontrol", "update", "NodeName=n1,n2", "State=DRAIN",
            "Reason=carme-upgrade: upgrade-20261127T150000Z"] in log  # fmt: skip
    assert ["scontrol", "requeue", "1"] in log and ["scancel", "2", "3"] in log  # the session and job 3 cancelled
    assert [j["state"] for j in found["jobs"]] == ["PENDING", "CANCELLED", "CANCELLED", "PENDING"]
    assert "2 job(s) pending, requeued ones among them" in " ".join(run.stdout.split())  # 4, and 1 requeued
    set_state(fake, found["nodes"], found["jobs"])
    again = play(tmp_path, fake, "upgrade_drain.yml", carme_upgrade_drain_timeout=0)
    assert again.returncode == 0, again.stdout + again.stderr
    assert [call[:2] for call in read_state(fake)["log"] if call[0] in ("scontrol", "scancel")] == [
        ["scontrol", "show"]]  # fmt: skip


def test_drain_fails_when_a_job_does_not_end(tmp_path: Path, fake: Path) -> None:
    (fake / "scancel").unlink()
    (fake / "scancel").symlink_to("/bin/true")
    set_state(fake, {"n1": ["idle", ""]}, [job("7", "RUNNING", requeue="0")])
    run = play(tmp_path, fake, "upgrade_drain.yml", carme_upgrade_drain_timeout=0, carme_upgrade_cancel_timeout=2)
    assert run.returncode != 0 and "Wait until no job runs" in run.stdout


def test_finish_installs_the_history_syncs_resumes_and_removes_the_notice(tmp_path: Path, fake: Path) -> None:
    history = tmp_path / "slurm-history.json.gz"
    history.write_bytes(gzip.compress(b'{"jobs": []}'))
    set_state(fake, {"n1": ["drained", "carme-upgrade: upgrade-20261127T150000Z"], "n2": ["drained", "disk failed"],
                     "n3": ["idle", ""]}, [])  # fmt: skip
    variables = {"carme_upgrade_history_file": str(history), "carme_upgrade_history_version": "22.05.8",
                 "carme_webui_history_archive_dir": str(tmp_path / "history"), "carme_webui_group": "root"}  # fmt: skip
    run = play(tmp_path, fake, "upgrade_finish.yml", **variables)
    assert run.returncode == 0, run.stdout + run.stderr
    installed = tmp_path / "history" / "slurm-22.05.8.json.gz"
    assert installed.read_bytes() == history.read_bytes()
    assert stat.S_IMODE(installed.stat().st_mode) == 0o640 and installed.stat().st_uid == 0
    found = read_state(fake)
    assert ["carme-portal", "reservations-sync", "carme-upgrade"] in found["log"]
    assert ["scontrol", "update", "NodeName=n1", "State=RESUME"] in found["log"]
    assert found["log"][-1] == ["carme-portal", "news-remove", "upgrade", "carme-upgrade"]
    assert found["nodes"]["n2"] == ["drained", "disk failed"]  # not the upgrade's: left alone
    set_state(fake, found["nodes"], [])
    again = play(tmp_path, fake, "upgrade_finish.yml", **variables)
    assert again.returncode == 0 and "changed=2" in again.stdout  # sync (it prints "created"), news-remove; no resume


def test_finish_without_history(tmp_path: Path, fake: Path) -> None:
    set_state(fake, {"n1": ["idle", ""]}, [])
    run = play(tmp_path, fake, "upgrade_finish.yml", carme_upgrade_history=False)
    assert run.returncode == 0, run.stdout + run.stderr
    assert [call[1] for call in read_state(fake)["log"] if call[0] == "carme-portal"] == ["reservations-sync",
                                                                                          "news-remove"]  # fmt: skip


def test_fetch_copies_the_manifest_and_the_records(tmp_path: Path, fake: Path) -> None:
    set_dir = tmp_path / "backups" / "upgrade-20261127T150000Z"
    set_dir.mkdir(parents=True)
    (set_dir / "slurm-usage.json").write_text('{"month": "2026-11"}')
    (set_dir / "slurm-history.json.gz").write_bytes(b"h")
    (set_dir / "ldap.0.ldif.gz").write_bytes(b"l")
    parts = [{"name": name, "file": file, "host": "localhost",
              "sha256": hashlib.sha256((set_dir / file).read_bytes()).hexdigest()}
             for name, file in (("slurm-usage", "slurm-usage.json"), ("slurm-history", "slurm-history.json.gz"),
                                ("ldap", "ldap.0.ldif.gz"))]  # fmt: skip
    (set_dir / "manifest.json").write_text(json.dumps({"set": set_dir.name, "complete": True, "parts": parts}))
    local = tmp_path / "local"
    run = play(tmp_path, fake, "upgrade_fetch.yml", carme_backup_dir=str(tmp_path / "backups"),
               carme_upgrade_local_dir=str(local))  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert sorted(os.listdir(local)) == ["manifest.json", "slurm-history.json.gz", "slurm-usage.json"]
    (set_dir / "manifest.json").unlink()
    missing = play(tmp_path, fake, "upgrade_fetch.yml", carme_backup_dir=str(tmp_path / "backups"),
                   carme_upgrade_local_dir=str(local))  # fmt: skip
    assert missing.returncode != 0 and "is not complete: no" in missing.stdout
    optional = play(tmp_path, fake, "upgrade_fetch.yml", carme_backup_dir=str(tmp_path / "backups"),
                    carme_upgrade_local_dir=str(tmp_path / "none"), carme_upgrade_fetch_optional=True)  # fmt: skip
    assert optional.returncode == 0 and not (tmp_path / "none").exists()
