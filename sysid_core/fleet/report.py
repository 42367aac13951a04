"""``fleet.html``: one self-contained page of a fleet's identifications over time.

At the top the fleet summary (per robot: periods, good/doubtful/failed counts, drift flags) and every drift
flag; then one section per robot: its verdict per date (with the reasons, and the error of a failed
period), its drift flags, each joint's Coulomb level and viscous coefficient over time with a band of two
standard deviations either side, the flagged drifts' onset (``since``) and detection marked, and the
payload's mass and centre-of-mass distance from the terminal body's origin per period with their bands.

The page fetches nothing and runs no script: the charts are inline SVG drawn here (a polyline per
stretch of consecutive identified periods, a dot per value, the band a shaded polygon; a failed period's
date is a red cross on the time axis), the style sheet the identification report's. Every text is
escaped. Each chart's <svg> carries its axis mapping (data-x0/x1: the dates' ordinals, data-y0/y1: the
values, at the pixels data-px0/px1, data-py0/py1), so a reader can take values back from the drawing.
About 2 kB per chart: 12 robots x 14 dates x 7 joints make a page of about 0.5 MB.
"""
from __future__ import annotations

import datetime
from pathlib import Path

import numpy as np

from ..results.export import _atomic_write
from ..results.html_report import _STYLE, _e, _list, _p, _section, _table
from ..results.report import _g

WIDTH, HEIGHT = 380, 150  # px of one chart
LEFT, RIGHT, TOP, BOTTOM = 56, 10, 20, 24  # px of margin around the plot area
BAND_SIGMAS = 2.0  # the band is the value +- this many standard deviations
_LEVELS = ("good", "doubtful", "failed")
_TERMS = (("coulomb", "Coulomb", "N m"), ("viscous", "viscous", "N m s/rad"))

_EXTRA_STYLE = """
.charts{display:flex;flex-wrap:wrap;gap:.4em 1em;margin:.3em 0 .8em}
svg.chart{background:#fff;border:1px solid #e0e0e0;font-family:system-ui,Helvetica,Arial,sans-serif}
svg.chart .axis{stroke:#999;stroke-width:1}svg.chart .grid{stroke:#eee;stroke-width:1}
svg.chart text{font-size:10px;fill:#444}svg.chart text.title{font-size:11px;fill:#1d1d1f}
svg.chart .band{fill:#1f77b4;fill-opacity:.18;stroke:none}
svg.chart .series{fill:none;stroke:#1f77b4;stroke-width:1.5}svg.chart .point{fill:#1f77b4}
svg.chart .since{stroke:#e67e00;stroke-width:1.5;stroke-dasharray:4 3}svg.chart .detected{stroke:#c62828;stroke-width:1}
svg.chart .failed{stroke:#c62828;stroke-width:1.5}
section td:first-child{white-space:nowrap}
"""


# --------------------------------------------------------------------------- charts

def _fmt(x: float) -> str:
    """A pixel coordinate: two decimals (a hundredth of a pixel)."""
    return f"{x:.2f}"


class _Axes:
    """The mapping of one chart: dates (ordinals) to x pixels, values to y pixels (upwards)."""

    def __init__(self, x0: float, x1: float, y0: float, y1: float):
        if not x1 > x0:
            x0, x1 = x0 - 1.0, x1 + 1.0
        if not y1 > y0:
            pad = max(abs(y0) * 0.1, 1e-9)
            y0, y1 = y0 - pad, y1 + pad
        self.x0, self.x1, self.y0, self.y1 = x0, x1, y0, y1
        self.px0, self.px1 = float(LEFT), float(WIDTH - RIGHT)
        self.py0, self.py1 = float(HEIGHT - BOTTOM), float(TOP)  # y0 at the bottom

    def x(self, ordinal: float) -> float:
        return self.px0 + (ordinal - self.x0) / (self.x1 - self.x0) * (self.px1 - self.px0)

    def y(self, value: float) -> float:
        return self.py0 + (value - self.y0) / (self.y1 - self.y0) * (self.py1 - self.py0)

    def attributes(self) -> str:
        return (f'data-x0="{self.x0!r}" data-x1="{self.x1!r}" data-y0="{self.y0!r}" data-y1="{self.y1!r}" '
                f'data-px0="{self.px0!r}" data-px1="{self.px1!r}" data-py0="{self.py0!r}" data-py1="{self.py1!r}"')


def _runs(mask: np.ndarray) -> list:
    """[(start, stop), ...] of the stretches where ``mask`` (p,) is True."""
    runs, start = [], None
    for i, ok in enumerate(list(mask) + [False]):
        if ok and start is None:
            start = i
        elif not ok and start is not None:
            runs.append((start, i))
            start = None
    return runs


def _chart(title: str, unit: str, days: np.ndarray, values: np.ndarray, stds: np.ndarray, span: tuple,
           failed=(), marks=()) -> str:
    """One SVG chart of ``values`` (p,) with a band of BAND_SIGMAS ``stds`` (p,) over ``days`` (p,) ordinals
    (NaN values are gaps; NaN stds no band); ``span`` (first, last) ordinals of the x axis; ``failed``
    ordinals of failed periods (red crosses on the axis); ``marks`` [(ordinal, css class, label)] vertical
    lines."""
    days = np.asarray(days, dtype=float)
    values = np.asarray(values, dtype=float)
    stds = np.asarray(stds, dtype=float)
    shown = np.isfinite(values)
    banded = shown & np.isfinite(stds) & (stds >= 0.0)
    label = f"{title} [{unit}]"
    head = (f'<svg class="chart" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
            f'aria-label="{_e(label)}"')
    if not shown.any():
        return (head + f"><title>{_e(label)}</title>"
                f'<text class="title" x="{LEFT}" y="14">{_e(label)}</text>'
                f'<text x="{LEFT}" y="{HEIGHT // 2}">no identified value</text></svg>')
    low = np.concatenate([values[shown], values[banded] - BAND_SIGMAS * stds[banded]])
    high = np.concatenate([values[shown], values[banded] + BAND_SIGMAS * stds[banded]])
    lo, hi = float(np.min(low)), float(np.max(high))
    pad = 0.05 * (hi - lo)
    axes = _Axes(float(span[0]), float(span[1]), lo - pad, hi + pad)
    out = [head + f" {axes.attributes()}>", f"<title>{_e(label)}</title>",
           f'<text class="title" x="{LEFT}" y="13">{_e(label)}</text>']
    # a grid line and a label at the bottom, middle and top of the value axis
    for value in (axes.y0, 0.5 * (axes.y0 + axes.y1), axes.y1):
        y = _fmt(axes.y(value))
        out.append(f'<line class="grid" x1="{_fmt(axes.px0)}" x2="{_fmt(axes.px1)}" y1="{y}" y2="{y}"/>'
                   f'<text x="{LEFT - 4}" y="{y}" text-anchor="end" dominant-baseline="middle">'
                   f"{_e(_g(value, '.4g'))}</text>")
    out.append(f'<line class="axis" x1="{_fmt(axes.px0)}" x2="{_fmt(axes.px0)}" y1="{_fmt(axes.py0)}" '
               f'y2="{_fmt(axes.py1)}"/><line class="axis" x1="{_fmt(axes.px0)}" x2="{_fmt(axes.px1)}" '
               f'y1="{_fmt(axes.py0)}" y2="{_fmt(axes.py0)}"/>')
    first, last = (datetime.date.fromordinal(int(d)) for d in span)
    baseline = _fmt(axes.py0 + 14)
    out.append(f'<text x="{_fmt(axes.px0)}" y="{baseline}">{first.isoformat()}</text>')
    if last != first:
        out.append(f'<text x="{_fmt(axes.px1)}" y="{baseline}" text-anchor="end">{last.isoformat()}</text>')
    for start, stop in _runs(banded):
        upper = [f"{_fmt(axes.x(d))},{_fmt(axes.y(v + BAND_SIGMAS * s))}"
                 for d, v, s in zip(days[start:stop], values[start:stop], stds[start:stop])]
        lower = [f"{_fmt(axes.x(d))},{_fmt(axes.y(v - BAND_SIGMAS * s))}"
                 for d, v, s in zip(days[start:stop], values[start:stop], stds[start:stop])]
        out.append(f'<polygon class="band" points="{" ".join(upper + lower[::-1])}"/>')
    for start, stop in _runs(shown):
        points = " ".join(f"{_fmt(axes.x(d))},{_fmt(axes.y(v))}" for d, v in zip(days[start:stop], values[start:stop]))
        out.append(f'<polyline class="series" points="{points}"/>')
    out += [f'<circle class="point" cx="{_fmt(axes.x(d))}" cy="{_fmt(axes.y(v))}" r="2"/>'
            for d, v in zip(days[shown], values[shown])]
    for ordinal, css, text in marks:
        x = _fmt(axes.x(ordinal))
        date = datetime.date.fromordinal(int(ordinal)).isoformat()
        out.append(f'<line class="{css}" data-date="{date}" x1="{x}" x2="{x}" y1="{_fmt(axes.py0)}" '
                   f'y2="{_fmt(axes.py1)}"><title>{_e(text)}</title></line>')
    for ordinal in failed:
        x, y = axes.x(ordinal), axes.py0
        date = datetime.date.fromordinal(int(ordinal)).isoformat()
        out.append(f'<path class="failed" data-date="{date}" d="M{_fmt(x - 3)},{_fmt(y - 3)}L{_fmt(x + 3)},'
                   f'{_fmt(y + 3)}M{_fmt(x - 3)},{_fmt(y + 3)}L{_fmt(x + 3)},{_fmt(y - 3)}">'
                   f"<title>failed on {date}</title></path>")
    out.append("</svg>")
    return "".join(out)


# --------------------------------------------------------------------------- sections

def _counts(periods: list) -> dict:
    return {level: sum(p.verdict == level for p in periods) for level in _LEVELS}


def _flag_text(flag) -> str:
    return f"{flag.joint} {flag.term} since {flag.since.isoformat()}"


def _fleet_section(robots: dict, flags: dict, ids: dict) -> str:
    rows, classes = [], []
    for robot, periods in robots.items():
        counts = _counts(periods)
        found = flags.get(robot, [])
        rows.append([robot, "; ".join(_flag_text(f) for f in found) or "none", len(periods), counts["good"],
                     counts["doubtful"], counts["failed"]])
        classes.append("poor" if found else "")
    body = [_table(["robot", "drift flags (joint, term, since)", "periods", "good", "doubtful", "failed"], rows,
                   text_columns=2, row_classes=classes)]
    flagged = [(robot, f) for robot in robots for f in flags.get(robot, [])]
    if flagged:
        body.append("<h3>Drift flags</h3>")
        body.append(_table(["robot", "joint", "term", "since", "detected", "z"],
                           [[robot, f.joint, f.term, f.since.isoformat(), f.detected.isoformat(),
                             _g(f.statistic, ".3g")] for robot, f in flagged], text_columns=5))
    else:
        body.append(_p("No friction rose beyond its history's scatter.", "note"))
    body.append(_p("A drift flag: a joint's Coulomb or viscous friction rose beyond the scatter of its own "
                   "history (failed periods left out); since is when the rise began, detected the date it "
                   "was found, z the rise in predicted spreads.", "note muted"))
    links = " ".join(f'<a href="#{ids[robot]}">{_e(robot)}</a>' for robot in robots)
    body.append(f"<nav>{links}</nav>")
    return _section("fleet", "Fleet summary", body)


def _verdict_table(periods: list) -> str:
    rows = [[p.date.isoformat(), p.verdict, "; ".join(p.reasons), p.error or "", p.params, p.samples,
             _g(p.hours, ".3g")] for p in periods]
    table = _table(["date", "verdict", "reasons", "error", "params.json", "samples", "hours"], rows,
                   text_columns=5, row_classes=["poor" if p.verdict == "failed" else "" for p in periods])
    for level in ("doubtful", "failed"):
        table = table.replace(f"<td>{level}</td>", f'<td class="level-{level}">{level}</td>')
    return table


def _robot_section(robot: str, key: str, periods: list, found: list) -> str:
    span = (periods[0].date.toordinal(), periods[-1].date.toordinal())
    used = [p for p in periods if p.verdict != "failed"]
    failed = [p.date.toordinal() for p in periods if p.verdict == "failed"]
    # every period is a point of the time axis; a failed one, or one without the value, a gap in the line
    days = np.array([p.date.toordinal() for p in periods], dtype=float)
    counts = _counts(periods)
    body = [_p(f"{len(periods)} periods from {periods[0].date.isoformat()} to {periods[-1].date.isoformat()}: "
               f"{counts['good']} good, {counts['doubtful']} doubtful, {counts['failed']} failed.", "note"),
            "<h3>Verdict per date</h3>", _verdict_table(periods)]
    if found:
        body += ["<h3>Drift flags</h3>",
                 _list([f"{f.joint}: {f.term} friction rising since {f.since.isoformat()} (found "
                        f"{f.detected.isoformat()}, z {_g(f.statistic, '.3g')})" for f in found])]
    joints = []
    for p in used:
        joints += [j for j in p.joint_names if j not in joints]
    if joints:
        body.append("<h3>Friction per joint</h3>")
        body.append(_p(f"Each identified value with a band of {BAND_SIGMAS:g} standard deviations either side; "
                       "dashed: the onset of a flagged rise, solid: its detection; crosses: failed periods.",
                       "note muted"))
    for joint in joints:
        charts = []
        for term, label, unit in _TERMS:
            values, stds = [], []
            for p in periods:
                names = list(p.joint_names)
                j = names.index(joint) if joint in names and p.verdict != "failed" else None
                values.append(np.nan if j is None else float(np.asarray(getattr(p, term), dtype=float)[j]))
                stds.append(np.nan if j is None else float(np.asarray(getattr(p, term + "_std"), dtype=float)[j]))
            marks = []
            for f in found:
                if f.joint == joint and f.term == term:
                    marks += [(f.since.toordinal(), "since", f"rising since {f.since.isoformat()}"),
                              (f.detected.toordinal(), "detected", f"found {f.detected.isoformat()}")]
            charts.append(_chart(f"{joint}: {label} friction", unit, days, np.array(values), np.array(stds), span,
                                 failed, marks))
        body.append(f'<div class="charts">{"".join(charts)}</div>')
    if any(p.mass is not None for p in used):
        def number(p, value, scale=1.0):  # NaN for a failed period or a missing value
            return np.nan if p.verdict == "failed" or value is None else scale * float(value)
        mass = np.array([number(p, p.mass) for p in periods])
        mass_std = np.array([number(p, p.mass_std) for p in periods])
        com = np.array([number(p, None if p.com is None else np.linalg.norm(p.com), 1000.0) for p in periods])
        com_std = np.array([number(p, p.com_std_mm) for p in periods])
        body += ["<h3>Payload</h3>",
                 f'<div class="charts">{_chart("payload mass", "kg", days, mass, mass_std, span, failed)}'
                 f'{_chart("payload centre of mass, distance from the origin", "mm", days, com, com_std, span, failed)}'
                 "</div>",
                 _p("The band of the centre of mass is its standard deviation (com_std_mm) either side of its "
                    "distance from the terminal body's origin.", "note muted")]
    return _section(key, f"Robot {robot}", body)


# --------------------------------------------------------------------------- the page

def fleet_report(summaries, flags: dict, title: str = "Fleet") -> str:
    """The page as one HTML string (see write_fleet_report)."""
    robots = {}
    for summary in sorted(summaries, key=lambda s: (s.robot, s.date)):
        robots.setdefault(summary.robot, []).append(summary)
    for robot in flags:
        robots.setdefault(robot, [])
    robots = {robot: robots[robot] for robot in sorted(robots)}
    ids = {robot: f"robot-{i}" for i, robot in enumerate(robots)}  # ids from positions: names may be anything
    dates = [s.date for periods in robots.values() for s in periods]
    span = f"{min(dates).isoformat()} to {max(dates).isoformat()}" if dates else "no period"
    sections = [_robot_section(robot, ids[robot], periods, list(flags.get(robot, [])))
                for robot, periods in robots.items() if periods]
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)}</title>",
        f"<style>{_STYLE}{_EXTRA_STYLE}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        _p(f"{len(robots)} robots, {len(dates)} identifications, {span}.", "muted"),
        _fleet_section(robots, flags, ids),
        *sections,
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


def write_fleet_report(path, summaries, flags: dict, title: str = "Fleet") -> Path:
    """Write ``fleet.html`` (one self-contained file, see the module docstring) of ``summaries``
    (PeriodSummary, any order) and ``flags`` ({robot: [DriftFlag, ...]}, as drift_flags returns them);
    ``title`` heads the page. The file is replaced atomically. Returns its path."""
    path = Path(path)
    _atomic_write(path, fleet_report(summaries, flags, title).encode("utf-8"))
    return path
