# SPDX-License-Identifier: GPL-3.0-or-later
"""Line charts as plain geometry for ``utilisation/_chart.html`` to draw as inline SVG (no script, no library)."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable
from collections.abc import Sequence
from dataclasses import dataclass

from webui.utilisation.series import Point

WIDTH, HEIGHT = 720, 240
LEFT, RIGHT, TOP, BOTTOM = 44, 12, 12, 28


@dataclass(frozen=True)
class Line:
    label: str
    colour: str
    dashed: bool
    segments: tuple[str, ...]  # each "x,y x,y ..." for one <polyline points=...>: a gap in the samples splits it


@dataclass(frozen=True)
class Chart:
    title: str
    summary: str
    lines: tuple[Line, ...]
    y_ticks: tuple[tuple[float, str], ...]
    x_ticks: tuple[tuple[float, str], ...]
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    bottom: float = HEIGHT - BOTTOM
    right: float = WIDTH - RIGHT
    top: int = TOP


#: a series: label, colour, dashed, the value of a point
Series = tuple[str, str, bool, Callable[[Point], float]]


def _nice_max(value: float) -> float:
    if value <= 1:
        return 1.0
    step = 10 ** math.floor(math.log10(value))
    return float(math.ceil(value / step) * step)


def _time_label(when: dt.datetime, span: dt.timedelta) -> str:
    if span <= dt.timedelta(days=1):
        return when.strftime("%H:%M")
    return when.strftime("%d %b" if span > dt.timedelta(days=2) else "%d %b %H:%M")


def _runs(points: Sequence[Point], step: float) -> list[list[Point]]:
    """The points split where two in a row are more than ``step`` seconds apart."""
    runs: list[list[Point]] = []
    for p in points:
        if runs and (p.time - runs[-1][-1].time).total_seconds() <= step:
            runs[-1].append(p)
        else:
            runs.append([p])
    return runs


def line_chart(
    title: str,
    points: Sequence[Point],
    series: Sequence[Series],
    since: dt.datetime,
    until: dt.datetime,
    summary: str,
    step: float = 150.0,
) -> Chart:
    """The chart of ``series`` over ``[since, until)``: x is time, y from 0 to a round maximum; points more than
    ``step`` seconds apart are not joined."""
    y_max = _nice_max(max((s[3](p) for p in points for s in series), default=0.0))
    span = (until - since).total_seconds() or 1.0
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x_of(when: dt.datetime) -> float:
        return round(LEFT + plot_w * (when - since).total_seconds() / span, 1)

    def y_of(value: float) -> float:
        return round(TOP + plot_h * (1 - value / y_max), 1)

    runs = _runs(points, step)
    lines = tuple(
        Line(label, colour, dashed, tuple(" ".join(f"{x_of(p.time)},{y_of(value(p))}" for p in run) for run in runs))
        for label, colour, dashed, value in series
    )
    y_ticks = tuple((y_of(v), f"{v:g}") for v in (0.0, y_max / 2, y_max))
    length = until - since
    x_ticks = tuple((x_of(t), _time_label(t, length)) for t in (since, since + length / 2, until))
    return Chart(title, summary, lines, y_ticks, x_ticks)


__all__ = ["Chart", "Line", "Series", "line_chart"]
