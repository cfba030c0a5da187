# SPDX-License-Identifier: GPL-3.0-or-later
"""webui.slurm.listing: slurmrestd's big lists decoded record by record, and the heap given back after."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from webui.slurm.listing import decode_listing
from webui.slurm.listing import trim_heap

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "slurmrestd"


def ids(rec: dict[str, Any]) -> int:
    return int(rec["job_id"])


@pytest.mark.parametrize("indent", [None, 2, "\t"])
def test_the_same_as_json_loads_on_slurmrestd_answers(indent: int | str | None) -> None:
    for path in sorted(FIXTURES.glob("*/jobs.json")):
        doc = json.loads(path.read_text())
        text = json.dumps(doc, indent=indent)
        members, items = decode_listing(text, "jobs", dict)
        assert items == [j for j in doc["jobs"] if isinstance(j, dict)], path
        assert members == {k: v for k, v in doc.items() if k != "jobs"}, path


@pytest.mark.parametrize(
    ("text", "members", "items"),
    [
        ("{}", {}, []),
        (' { "jobs" : [ ] } ', {}, []),
        ('{"jobs": [{"job_id": 1}, 7, null, {"job_id": 2}], "errors": []}', {"errors": []}, [1, 2]),
        ('{"jobs": null, "last_update": {"number": 5}}', {"jobs": None, "last_update": {"number": 5}}, []),
        ('{"meta": {"jobs": [{"job_id": 9}]}, "jobs": [{"job_id": 3}]}', {"meta": {"jobs": [{"job_id": 9}]}}, [3]),
    ],
)
def test_members_and_records(text: str, members: dict[str, Any], items: list[int]) -> None:
    assert decode_listing(text, "jobs", ids) == (members, items)


@pytest.mark.parametrize(
    "text",
    ["", "[]", "{", '{"jobs": [{"job_id": 1}', '{"jobs": [{"job_id": 1},]}', '{"a": 1,}', '{"a" 1}', "{} x", "{a: 1}"],
)
def test_what_is_not_one_object_is_a_json_decode_error(text: str) -> None:
    with pytest.raises(json.JSONDecodeError):
        decode_listing(text, "jobs", ids)


def test_an_error_of_the_parser_goes_through() -> None:
    def bad(rec: dict[str, Any]) -> int:
        raise ValueError("not a job")

    with pytest.raises(ValueError, match="not a job") as caught:
        decode_listing('{"jobs": [{"job_id": 1}]}', "jobs", bad)
    assert not isinstance(caught.value, json.JSONDecodeError)


# In a fresh interpreter: a job list the size of slurmrestd 24.11's for 10,000 jobs, a small record kept of each job
# (as the portal keeps its parsed jobs), the answer's text freed; the resident set after that, json.loads then the
# parse against decode_listing.
_PROBE = """
import json, sys
sys.path.insert(0, sys.argv[1])
from webui.slurm.listing import decode_listing, trim_heap
def rss_kb():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
record = {"name": "x" * 40, "comment": "carme:v1;state=ready", "nodes": "node1", "job_state": ["RUNNING"]}
jobs = [dict(record, job_id=i, more={str(k): str(i) * 50 for k in range(60)}) for i in range(10000)]
text = json.dumps({"jobs": jobs})
del jobs
keep = lambda j: (j["job_id"], j["job_state"][0], j["name"] + str(j["job_id"]), {"nodes": j["nodes"] + "x"})
if sys.argv[2] == "json.loads":
    doc = json.loads(text)
    kept = [keep(j) for j in doc["jobs"]]
    del doc
else:
    kept = decode_listing(text, "jobs", keep)[1]
del text
trim_heap()
print(rss_kb(), len(kept))
"""


def resident_after(how: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, str(REPO), how], capture_output=True, text=True, check=True, timeout=120
    ).stdout.split()
    assert out[1] == "10000"
    return int(out[0])


def test_a_big_list_leaves_little_behind() -> None:
    loads, listing = resident_after("json.loads"), resident_after("decode_listing")
    assert listing < loads * 0.6, (listing, loads)


def test_trim_heap_can_be_called_again_and_again() -> None:
    assert trim_heap() in (True, False)
    assert trim_heap() in (True, False)
