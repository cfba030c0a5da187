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
    points: str  # "x,y x,y ..." for <polyline points=...>


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


def line_chart(
    title: str,
    points: Sequence[Point],
    series: Sequence[Series],
    since: dt.datetime,
    until: dt.datetime,
    summary: str,
) -> Chart:
    """The chart of ``series`` over ``[since, until)``: x is time, y from 0 to a round maximum."""
    y_max = _nice_max(max((s[3](p) for p in points for s in series), default=0.0))
    span = (until - since).total_seconds() or 1.0
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x_of(when: dt.datetime) -> float:
        return round(LEFT + plot_w * (when - since).total_seconds() / span, 1)

    def y_of(value: float) -> float:
        return round(TOP + plot_h * (1 - value / y_max), 1)

    lines = tuple(
        Line(label, colour, dashed, " ".join(f"{x_of(p.time)},{y_of(value(p))}" for p in points))
        for label, colour, dashed, value in series
    )
    y_ticks = tuple((y_of(v), f"{v:g}") for v in (0.0, y_max / 2, y_max))
    length = until - since
    x_ticks = tuple((x_of(t), _time_label(t, length)) for t in (since, since + length / 2, until))
    return Chart(title, summary, lines, y_ticks, x_ticks)


__all__ = ["Chart", "Line", "Series", "line_chart"]
