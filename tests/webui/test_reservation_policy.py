# SPDX-License-Identifier: GPL-3.0-or-later
"""The reservation policy (issue 16), pure: hard limits are refused naming the field, the budget decides between
approval and an administrator, overlaps with the user's own reservations are refused, a month's end splits."""

from __future__ import annotations

import datetime as dt

import pytest

from webui.reservations.policy import APPROVE
from webui.reservations.policy import PENDING
from webui.reservations.policy import PolicyRefused
from webui.reservations.policy import ReservationPolicy
from webui.reservations.policy import Window
from webui.reservations.policy import decide
from webui.reservations.policy import reserved_gpu_hours

UTC = dt.UTC
NOW = dt.datetime(2026, 11, 24, 9, 0, tzinfo=UTC)
POLICY = ReservationPolicy(
    max_gpus=2, max_nodes=2, max_reserved_gpu_hours_per_month=10, max_days_ahead=14, min_minutes=30, max_minutes=480
)


def window(day: int, start: int, end: int, gpus: int = 1, month: int = 11) -> Window:
    return Window(
        dt.datetime(2026, month, day, start, tzinfo=UTC), dt.datetime(2026, month, day, end, tzinfo=UTC), gpus
    )


def run(request: Window, *, nodes: int = 1, own: list[Window] | None = None, used: float | None = 0.0,
        budget: float = 100.0, policy: ReservationPolicy = POLICY) -> str:  # fmt: skip
    return decide(policy, request, nodes, NOW, own=own or [], used_gpu_hours=used, budget_gpu_hours=budget).outcome


def refused(request: Window, **kwargs: object) -> tuple[str, str]:
    with pytest.raises(PolicyRefused) as info:
        run(request, **kwargs)  # type: ignore[arg-type]
    return info.value.field, info.value.message


def test_a_request_within_every_limit_and_the_budget_is_approved_at_once() -> None:
    assert run(window(25, 10, 12)) == APPROVE


def test_hard_limits_are_refused_naming_the_field() -> None:
    assert refused(window(25, 10, 12, gpus=3))[0] == "gpus"
    assert refused(window(25, 10, 12, gpus=0))[0] == "gpus"
    assert refused(window(25, 10, 12, gpus=1), nodes=2) == ("gpus", "must be at least one per node")
    assert refused(window(25, 10, 12), nodes=3)[0] == "nodes"
    assert refused(window(25, 10, 10))[0] == "end"  # shorter than 30 minutes
    assert refused(Window(NOW + dt.timedelta(days=1), NOW + dt.timedelta(days=1, hours=9), 1))[0] == "end"


def test_look_ahead_the_past_and_a_start_just_now() -> None:
    field, message = refused(window(9, 10, 12, month=12))  # 15 days ahead
    assert field == "start" and "14 days ahead" in message
    assert run(window(8, 8, 10, month=12)) == APPROVE  # 13 days 23 hours ahead
    assert refused(window(24, 6, 8))[0] == "start"  # in the past
    just_now = Window(NOW - dt.timedelta(minutes=2), NOW + dt.timedelta(hours=1), 1)
    assert run(just_now) == APPROVE  # the form's clock may lag a little


def test_overlap_with_the_users_own_reservation_or_request_is_refused_touching_is_not() -> None:
    own = [window(25, 10, 12)]
    field, message = refused(window(25, 11, 13), own=own)
    assert field == "start" and "2026-11-25 10:00" in message
    assert run(window(25, 12, 14), own=own) == APPROVE  # back to back
    assert run(window(25, 8, 10), own=own) == APPROVE


def test_over_the_reserved_budget_goes_to_an_administrator() -> None:
    own = [window(26, 8, 12, gpus=2)]  # 8 reserved GPU-hours
    assert run(window(25, 10, 11, gpus=2), own=own) == APPROVE  # 10: at the limit
    result = decide(POLICY, window(25, 10, 12, gpus=2), 1, NOW, own=own, used_gpu_hours=0.0, budget_gpu_hours=100)
    assert result.outcome == PENDING and "12.0 reserved GPU-hours in November 2026 exceed the 10" in result.reason


def test_used_plus_reserved_over_the_monthly_budget_goes_to_an_administrator() -> None:
    assert run(window(25, 10, 12, gpus=2), used=97.0, budget=100.0) == PENDING  # 97 + 4
    assert run(window(25, 10, 12, gpus=2), used=96.0, budget=100.0) == APPROVE  # 96 + 4 = 100
    assert run(window(25, 10, 12), used=None) == PENDING  # an unknown usage is never taken as none


def test_usage_counts_only_in_the_current_month_and_a_month_end_splits_the_hours() -> None:
    # December: this month's usage does not count there
    assert run(window(2, 10, 12, month=12), used=99.0, budget=100.0) == APPROVE
    across = Window(dt.datetime(2026, 11, 30, 20, tzinfo=UTC), dt.datetime(2026, 12, 1, 4, tzinfo=UTC), 2)
    assert reserved_gpu_hours([across], NOW) == pytest.approx(8.0)  # 4 h x 2 GPUs in November
    assert reserved_gpu_hours([across], dt.datetime(2026, 12, 5, tzinfo=UTC)) == pytest.approx(8.0)
    full_december = [Window(dt.datetime(2026, 12, 1, 4, tzinfo=UTC), dt.datetime(2026, 12, 1, 6, tzinfo=UTC), 1)]
    # 8 in November + 2 would still fit, but December already holds 2 + 8 > 10
    heavy = [*full_december, Window(dt.datetime(2026, 12, 2, tzinfo=UTC), dt.datetime(2026, 12, 2, 1, tzinfo=UTC), 2)]
    assert run(across, own=heavy) == PENDING
    assert run(across, own=full_december) == APPROVE


def test_without_auto_approval_every_valid_request_waits_and_invalid_ones_are_still_refused() -> None:
    manual = ReservationPolicy(auto_approve=False)
    assert run(window(25, 10, 12), policy=manual) == PENDING
    assert refused(window(25, 10, 12, gpus=9), policy=manual)[0] == "gpus"
