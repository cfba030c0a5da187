# SPDX-License-Identifier: GPL-3.0-or-later
"""carme_runtime.slurmrest: the version slurmrestd offers, the bodies for it, and its records in Carme's dialect.

v0.0.38 records are the stored 22.05 samples (tests/runtime/data/); the newer shapes below follow the data_parser
(v0.0.40+) conventions: numbers as ``{"set", "infinite", "number"}``, states as lists, grouped partition fields.
Real captures from a Slurm 24.11 slurmrestd (tests/fixtures/slurmrestd/<version>/, tests/integration/
test_slurmrestd_trixie.py) are read by the same functions in :func:`test_captured_records_read`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from carme_runtime import slurmrest
from carme_runtime.slurmrest import SlurmRestApi

DATA = Path(__file__).parent / "data"
CAPTURED = Path(__file__).parents[1] / "fixtures" / "slurmrestd"


def num(n: int) -> dict[str, Any]:
    return {"set": True, "infinite": False, "number": n}


INF = {"set": False, "infinite": True, "number": 0}


def test_numbers_of_every_version() -> None:
    assert slurmrest.number(5) == 5 and slurmrest.number(num(7)) == 7 and slurmrest.number("9") == 9
    assert slurmrest.number(INF) == slurmrest.INFINITE
    assert slurmrest.number({"set": False, "infinite": False, "number": 3}, -1) == -1
    assert slurmrest.number(None, 4) == 4 and slurmrest.number(True, 2) == 2 and slurmrest.number("x") == 0


def test_the_newest_version_offered_and_supported_is_chosen() -> None:
    docs = {"/openapi/v3": {"paths": {f"/slurm/v0.0.{v}/jobs/": {} for v in (39, 40, 41, 42, 43)}}}
    assert slurmrest.choose_version(docs.get) == "v0.0.42"
    old = {"/openapi": {"paths": {"/slurm/v0.0.37/ping": {}, "/slurm/v0.0.38/ping": {}, "/slurmdb/v0.0.39/x": {}}}}
    assert slurmrest.choose_version(old.get) == "v0.0.38"  # 22.05: no /openapi/v3; slurmdb paths do not count
    pings = {"/slurm/v0.0.40/ping": {"pings": []}}
    assert slurmrest.choose_version(pings.get) == "v0.0.40"  # no OpenAPI document: the pings answer
    with pytest.raises(slurmrest.ApiVersionError, match="none of the API versions"):
        slurmrest.choose_version({"/openapi/v3": {"paths": {"/slurm/v0.0.39/jobs": {}}}}.get)


def test_the_setting() -> None:
    assert slurmrest.check_setting(" auto ") == "auto" and slurmrest.check_setting("v0.0.41") == "v0.0.41"
    for bad in ("v0.0.39", "0.0.41", "latest", ""):
        with pytest.raises(slurmrest.ApiVersionError):
            slurmrest.check_setting(bad)
    with pytest.raises(slurmrest.ApiVersionError):
        SlurmRestApi("v0.0.37")


def test_paths() -> None:
    api = SlurmRestApi("v0.0.41")
    assert api.path("jobs") == "/slurm/v0.0.41/jobs" and api.path("job/5") == "/slurm/v0.0.41/job/5"
    assert api.db_path("jobs?account=a") == "/slurmdb/v0.0.41/jobs?account=a"
    assert slurmrest.LEGACY_API.path("job/submit") == "/slurm/v0.0.38/job/submit" and slurmrest.LEGACY_API.legacy
    # coordinators: listed by 22.05 always, by 24.11 (tried on the Debian 13 demo) only with this query field
    assert api.accounts_path() == "/slurmdb/v0.0.41/accounts?WithCoordinators=true"
    assert slurmrest.LEGACY_API.accounts_path() == "/slurmdb/v0.0.38/accounts"


DIALECT = {
    "script": "#!/bin/bash\nexec carme-launch\n",
    "job": {
        "name": "carme-jupyterlab",
        "partition": "gpu",
        "time_limit": 60,
        "nodes": 2,
        "tasks": 2,
        "cpus_per_task": 4,
        "memory_per_node": 16000,
        "current_working_directory": "/home/alice",
        "environment": {"PATH": "/usr/bin", "CARME_APP": "jupyterlab"},
        "comment": "carme:v1;app=jupyterlab;state=submitted",
        "requeue": False,
        "gres": "gpu:1",
        "reservation": "carme-alice-3",
    },
}


def test_the_dialect_goes_to_22_05_as_it_is() -> None:
    assert slurmrest.LEGACY_API.submit_body(DIALECT) == DIALECT
    assert slurmrest.LEGACY_API.update_body({"time_limit": 90}) == {"time_limit": 90}


@pytest.mark.parametrize("version", ["v0.0.40", "v0.0.41", "v0.0.42"])
def test_the_dialect_becomes_a_data_parser_body(version: str) -> None:
    body = SlurmRestApi(version).submit_body(DIALECT)
    assert list(body) == ["job"]
    job = body["job"]
    assert job["script"] == DIALECT["script"]
    assert job["environment"] == ["PATH=/usr/bin", "CARME_APP=jupyterlab"]
    assert job["time_limit"] == num(60) and job["memory_per_node"] == num(16000)
    assert job["minimum_nodes"] == job["maximum_nodes"] == 2 and "nodes" not in job
    assert job["tres_per_node"] == "gres/gpu:1" and "gres" not in job
    assert job["requeue"] is False and job["reservation"] == "carme-alice-3" and job["tasks"] == 2
    assert SlurmRestApi(version).update_body({"time_limit": 90}) == {"time_limit": num(90)}


def test_a_22_05_job_reads_as_before() -> None:
    raw = json.loads((DATA / "squeue_node.json").read_text())["jobs"][0]
    rec = slurmrest.job_record(raw)
    assert rec["job_id"] == 41 and rec["job_state"] == "COMPLETING" and rec["user_id"] == 1001
    assert rec["start_time"] == 1795420801 and rec["time_limit"] == 60 and rec["nodes"] == "vm"
    assert rec["tres_alloc_str"].endswith("gres/gpu=1") and rec["end_time"] == 0


def test_a_data_parser_job_reads_in_the_dialect() -> None:
    raw = {
        "job_id": 7, "job_state": ["RUNNING", "COMPLETING"], "user_name": "alice", "user_id": 1001,
        "start_time": num(1_800_000_000), "end_time": num(1_800_003_600), "time_limit": num(60),
        "nodes": "node[1-2]", "tres_per_node": "gres/gpu:1", "comment": "carme:v1", "state_reason": "None",
    }  # fmt: skip
    rec = slurmrest.job_record(raw)
    assert rec["job_state"] == "RUNNING" and rec["start_time"] == 1_800_000_000 and rec["time_limit"] == 60
    assert rec["tres_per_node"] == "gres/gpu:1" and rec["tres_alloc_str"] == "" and rec["user_id"] == 1001
    assert slurmrest.job_record({"job_id": 8, "time_limit": INF})["time_limit"] == slurmrest.INFINITE


def test_nodes_partitions_reservations_of_both_shapes() -> None:
    old = slurmrest.node_record({"name": "n1", "state": "idle", "state_flags": ["DRAIN"], "gres": "gpu:4"})
    new = slurmrest.node_record({"name": "n1", "state": ["IDLE", "DRAIN"], "gres": "gpu:4"})
    assert (old["state"].lower(), old["state_flags"]) == (new["state"].lower(), new["state_flags"])
    assert new["state_flags"] == ["DRAIN"]
    legacy = {"name": "gpu", "nodes": "n[1-2]", "max_time_limit": 4294967295, "state": "UP", "flags": ["DEFAULT"]}
    grouped = {"name": "gpu", "nodes": {"configured": "n[1-2]", "total": 2}, "maximums": {"time": INF},
               "partition": {"state": ["UP"]}, "flags": ["DEFAULT"]}  # fmt: skip
    assert slurmrest.partition_record(legacy) == slurmrest.partition_record(grouped)
    limited = dict(grouped, maximums={"time": num(1440)})
    assert slurmrest.partition_record(limited)["max_time_limit"] == 1440
    res = {"name": "r", "start_time": num(10), "end_time": num(20), "users": "alice,bob", "node_count": num(1)}
    rec = slurmrest.reservation_record(res)
    assert (rec["start_time"], rec["end_time"], rec["users"], rec["node_count"]) == (10, 20, ["alice", "bob"], 1)


def test_accounting_jobs_of_both_shapes() -> None:
    legacy = json.loads((DATA / "sacct.json").read_text())["jobs"][0]
    rec = slurmrest.account_job_record(legacy)
    assert rec["time"]["start"] == legacy["time"]["start"] and isinstance(rec["state"]["current"], str)
    new = {"job_id": 9, "user": "alice", "state": {"current": ["COMPLETED"], "reason": "None"},
           "time": {"start": 100, "end": 460, "elapsed": 360, "limit": num(60)}, "comment": {"job": "c"},
           "tres": {"allocated": [{"type": "gres", "name": "gpu", "id": 1001, "count": 2}]},
           "stdout": "/h/o-%j"}  # fmt: skip
    rec = slurmrest.account_job_record(new)
    assert rec["state"]["current"] == "COMPLETED" and rec["time"]["elapsed"] == 360 and rec["std_out"] == "/h/o-%j"
    assert rec["tres"]["allocated"] == [{"type": "gres", "name": "gpu", "count": 2}]


def _captured() -> list[Path]:
    return sorted(CAPTURED.glob("v*/*.json"))


@pytest.mark.parametrize("path", _captured(), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_captured_records_read(path: Path) -> None:
    """Every record of a real capture reads into the dialect with the values Carme relies on."""
    doc = json.loads(path.read_text())
    readers = {"jobs": slurmrest.job_record, "nodes": slurmrest.node_record,
               "partitions": slurmrest.partition_record, "reservations": slurmrest.reservation_record}  # fmt: skip
    for key, read in readers.items():
        for raw in doc.get(key) or []:
            rec = read(raw)
            assert rec["name"] if key != "jobs" else rec["job_id"] > 0, (path, raw)
            for value in rec.values():
                assert not isinstance(value, dict), (path, key, rec)  # every number unwrapped
    if path.stem == "openapi":
        assert path.parent.name in slurmrest.offered_versions(doc)
