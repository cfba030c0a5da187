# SPDX-License-Identifier: GPL-3.0-or-later
"""Issue 31, one source of truth for limits: the portal reads a user's limits from Slurm's association and QOS
records (as slurmrestd v0.0.38 and v0.0.40+ print them), in Slurm's order, and keeps none of its own."""

from __future__ import annotations

from typing import Any

from flask import Flask

from webui.quota.limits import limits_of
from webui.quota.limits import user_limits
from webui.quota.usage import quota_view
from webui.slurm.limits import AssocLimits
from webui.slurm.limits import LimitReader
from webui.slurm.limits import QosLimits
from webui.slurm.limits import parse_association
from webui.slurm.limits import parse_qos

from .conftest import FakeScheduler
from .conftest import log_in_as
from .conftest import post
from .conftest import set_slurm_limits

INFINITE = 0xFFFFFFFF


def tres(count: int, kind: str = "gres", name: str = "gpu") -> list[dict[str, Any]]:
    return [{"type": kind, "name": name, "count": count}]


def v38_assoc(user: str, account: str, **limits: Any) -> dict[str, Any]:
    """An association as 22.05's slurmrestd (v0.0.38) prints it: plain numbers, unset ones absent."""
    return {
        "account": account,
        "user": user,
        "parent_account": limits.pop("parent", ""),
        "is_default": limits.pop("is_default", False),
        "default": {"qos": limits.pop("default_qos", "")},
        "max": {
            "jobs": {"active": limits.get("max_jobs"), "per": {"wall_clock": limits.get("wall")}},
            "tres": {
                "total": tres(limits["grp_gpus"]) if "grp_gpus" in limits else [],
                "group": {"minutes": tres(limits["grp_minutes"]) if "grp_minutes" in limits else []},
                "per": {"job": tres(limits["per_job"]) if "per_job" in limits else []},
            },
        },
    }


def num(value: int | None) -> dict[str, Any]:
    """A v0.0.40+ number: ``{"set", "infinite", "number"}``."""
    return {"set": value is not None, "infinite": False, "number": value or 0}


def test_v38_association_record() -> None:
    raw = v38_assoc("bob", "research", is_default=True, max_jobs=4, grp_gpus=2, grp_minutes=6000, default_qos="normal")
    a = parse_association(raw)
    assert a == AssocLimits(
        account="research",
        user="bob",
        is_default=True,
        default_qos="normal",
        gpu_minutes=6000,
        gpus_total=2,
        gpus_per_job=None,
        max_jobs=4,
        max_wall_minutes=None,
    )
    assert a.name == "bob@research"


def test_v40_association_record_with_unset_and_infinite_numbers() -> None:
    raw = {
        "account": "research",
        "user": "bob",
        "is_default": True,
        "max": {
            "jobs": {"active": num(3), "total": num(None), "per": {"wall_clock": num(120)}},
            "tres": {"per": {"job": tres(1)}, "group": {"minutes": tres(INFINITE)}, "total": []},
        },
    }
    a = parse_association(raw)
    assert (a.max_jobs, a.max_wall_minutes, a.gpus_per_job, a.gpu_minutes, a.gpus_total) == (3, 120, 1, None, None)
    assert parse_association({"account": "x", "max": {"jobs": {"active": {"infinite": True}}}}).max_jobs is None


def test_qos_record_both_shapes() -> None:
    v38 = {
        "name": "interactive",
        "limits": {
            "max": {
                "wall_clock": {"per": {"job": 480}},
                "tres": {"per": {"user": tres(1), "job": tres(2, "node", "")}},
                "jobs": {"active_jobs": {"per": {"user": 3}}},
            }
        },
    }
    assert parse_qos(v38) == QosLimits("interactive", max_wall_minutes=480, gpus_per_user=1, max_jobs_per_user=3)
    v41 = {"name": "normal", "limits": {"max": {"wall_clock": {"per": {"job": num(None)}}, "tres": {"per": {}}}}}
    assert parse_qos(v41) == QosLimits("normal")


def test_slurms_order_qos_then_the_user_then_the_accounts_above() -> None:
    assocs = [
        AssocLimits("research", "bob", is_default=True, default_qos="interactive", gpus_per_job=4, gpu_minutes=600),
        AssocLimits("research", "", parent_account="physics", max_jobs=7, max_wall_minutes=600, gpus_total=3),
        AssocLimits("physics", "", parent_account="root", max_wall_minutes=60, gpus_total=2),
        AssocLimits("root", "", max_jobs=1),
        AssocLimits("vision", "bob", max_jobs=1),  # another of bob's associations, not his default
    ]
    qos = {"interactive": QosLimits("interactive", max_wall_minutes=480, gpus_per_user=1)}
    lim = limits_of("bob", assocs, qos, None)  # the association's default QOS
    assert (lim.account, lim.qos) == ("research", "interactive")
    assert lim.time_minutes.value == 480 and lim.time_minutes.source == "QOS interactive MaxWall"
    assert lim.gpus_per_session.slurm == "QOS interactive MaxTRESPerUser=gres/gpu=1"  # the smallest cap
    assert lim.sessions.slurm == "association research MaxJobs=7"  # the account's, above bob's (none), not root's
    assert lim.gpu_minutes.slurm == "association bob@research GrpTRESMins=gres/gpu=600"
    assert lim.gpu_hours_per_month == 10.0
    lim = limits_of("bob", assocs, qos, "normal")  # SESSION_QOS names a QOS without limits
    assert lim.time_minutes.slurm == "association research MaxWallDurationPerJob=600"
    assert lim.gpus_per_session.slurm == "association physics GrpTRES=gres/gpu=2"
    nobody = limits_of("eve", assocs, qos, None)
    assert nobody.account is None and nobody.gpus_per_session.value is None
    assert nobody.gpus_per_session.slurm == "no limit in Slurm"


class Client:
    """What LimitReader asks: the service user sees alice only (PrivateData=users)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None]] = []

    def associations(self, user: str, *, of_user: str | None = None) -> list[dict[str, Any]]:
        self.calls.append((user, of_user))
        if of_user is None:
            return [v38_assoc("alice", "research", max_jobs=2)]
        return [v38_assoc(of_user, "research", max_jobs=5)]

    def qos(self, user: str) -> list[dict[str, Any]]:
        self.calls.append((user, "qos"))
        return [{"name": "normal"}]


def test_reader_caches_and_asks_a_missing_user_with_their_own_token() -> None:
    client = Client()
    reader = LimitReader(client, "carme-portal", ttl=60)
    assert [a.max_jobs for a in reader.associations_of("alice")] == [2]
    assert [a.max_jobs for a in reader.associations_of("bob")] == [5]
    assert [a.max_jobs for a in reader.associations_of("bob")] == [5]
    assert reader.qos_limits() == reader.qos_limits() == {"normal": QosLimits("normal")}
    assert client.calls == [("carme-portal", None), ("bob", "bob"), ("carme-portal", "qos")]


def test_no_limit_in_slurm_is_said_and_nothing_is_refused_for_it(
    app: Flask, client: Any, fake_scheduler: FakeScheduler
) -> None:
    log_in_as(app, client, "alice")
    page = client.get("/").get_data(as_text=True)
    assert page.count("no limit") >= 4 and "budget: no limit" in page
    resp = post(client, "/sessions/new", {"app": "jupyterlab", "image": "pytorch", "gpus": "2", "time_minutes": "30"})
    assert resp.status_code == 302 and len(fake_scheduler.submitted) == 1


def test_a_used_budget_refuses_a_gpu_session_quoting_slurm(app: Flask, fake_scheduler: FakeScheduler) -> None:
    set_slurm_limits(fake_scheduler, "alice", gpu_minutes=60)  # 1 GPU-hour; the fake has used 1.5
    with app.test_request_context("/"):
        view = quota_view("alice")
        assert (view["limit_gpu_hours"], view["left_gpu_hours"], view["percent"]) == (1.0, 0.0, 100)
        assert user_limits("alice").gpu_minutes.slurm == "association alice@research GrpTRESMins=gres/gpu=60"
    client = app.test_client()
    log_in_as(app, client, "alice")
    form = {"app": "jupyterlab", "image": "pytorch", "gpus": "1", "time_minutes": "30"}
    resp = post(client, "/sessions/new", form)
    said = resp.get_data(as_text=True)
    assert resp.status_code == 400 and "GPU budget for this month is used up (1.5 of 1 GPU-hours" in said
    assert "Slurm: association alice@research GrpTRESMins=gres/gpu=60" in said
    assert post(client, "/sessions/new", {**form, "gpus": "0"}).status_code == 302  # CPU-only still starts
