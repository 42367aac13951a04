"""Rising friction across a fleet's identifications: a sequential one-sided test per robot, joint and term.

Each robot, joint and friction term (Coulomb level ``coulomb`` N m, viscous coefficient ``viscous`` N m s/rad)
makes one series: the identified value x_i and its standard deviation s_i on each date, in date order.
Periods whose verdict is "failed", and dates whose value is NaN, are left out of that series. Friction
that RISES beyond the scatter of its own history is flagged; falling friction never is (wear raises it).

The statistic. On each new date, for each window r = 1 .. R of the last r values (the new one and the
r - 1 before it), the window's mean is compared with the HISTORY: the values of the current regime (from the
series' first date, or from the date its last flag was raised) before the window. With the history's k values,
mean m, sample variance v, and s2 the mean of their s_i^2 (0 when none is known)::

    floor^2  = max((relative_floor * abs(m))^2, absolute_floor^2)
    sigma^2  = max(v, s2, floor^2)                   the scatter of one period's value about the level
    w        = max(sigma^2 - s2 + s_w^2, floor^2)    a window period's: the scatter the identifications' own
                                                     uncertainty does not explain, plus the window's own
                                                     (s_w^2 the mean s_i^2 in the window, s2 where unknown)
    z_r      = (mean of the window - m) / sqrt(w / r + sigma^2 / k)

The window's mean is the likelihood-ratio statistic of "the level moved up r periods ago" against "it has
not", so the last values' evidence adds up (a 5-spread step seen on two days gives z_2 = 5 / sqrt(1/2 + 1/k),
6 at k = 6, where a rule "two values each over c" asks each to pass on its own), and a rise that slips
under the threshold on its first day is not yet part of the history: for R periods it is compared again,
with the days after it, against the history before it. The floors say what a history cannot show: a quiet
history (a few values that happen to agree) must not make the test hair-trigger, so the spread is never
below the scatter the identifications report (s2), nor below ``relative_floor`` of the level, nor below the
absolute floor (``coulomb_floor`` N m, ``viscous_floor`` N m s/rad: the resolution of an identified
friction, so that a joint with about zero, or a slightly negative, level is not flagged for a rise of
nothing).

The fleet's own scatter. Least squares on one recording reports a standard deviation that knows nothing of
what changes from day to day (temperature, warm-up, the day's motion), so s2 is usually far below the
real scatter, and a fixed ``relative_floor`` is a guess. drift_flags therefore raises each series' relative
floor to the scatter the fleet itself shows for that joint name and term (relative_scatter: the differences
of consecutive values of every robot's series of that joint, robust to the few series that drift, taken
at an upper confidence limit so that it covers the real scatter in about 98 % of fleets). It pools all
dates of the fleet, so a later run with more dates can move a flag that was borderline.

Its null distribution. If the level is constant, the values are Gaussian about it with a scatter sigma0 and
independent from day to day, and the floors cover that scatter (sigma0^2 <= sigma^2), then the variance of
(mean of the window - m), sigma0^2 (1/r + 1/k), is at most the denominator's square: z_r is at most a
standard Gaussian variable, and it passes c_r = Phi^-1(1 - alpha_r) with a probability at most alpha_r. The
tail is Gaussian, not Student's t with k - 1 degrees of freedom, because the floors bound the spread from
below: a t tail at k = 4 (threshold 48 for 1e-5) would not see a rise of 5 spreads, and the requirement
below could not be met. The price: where the scatter exceeds every floor, sigma^2 is the history's v alone,
z_r is then Student-t-like with k - 1 degrees of freedom, and false flags are more frequent than designed.
Measured (bench/fleet_drift.py, 200 fleets of 168 constant series of 14 dates each): 0.000 to 0.015 false
flags per fleet with the pooled floor whatever the uniform scatter (1 to 8 %) and whether the reported
standard deviations are honest, unknown or ten times too small, and with one joint name scattering 5 %
among 2 %; 0.24 per fleet when one robot of the twelve scatters 4 % among 2 % (the pooling cannot see
a single robot's scatter; its history's v, with 3 to 13 degrees of freedom, is all the test has). With
the floor fixed at 2 % instead: 5.5 false flags per fleet at a 4 % scatter.

A flag. Any z_r > c_r raises a flag dated ``detected`` (the new date) whose ``statistic`` is the z_r that
passed its threshold by the most. No window is tested before the history before it holds ``min_history``
values. The false-alarm rate it is set for: a fleet of 12 robots x 7 joints x 2 terms = 168 series of 14
dates makes 10 + 9 + 8 + 7 + 6 = 40 tests per series with the defaults (R = 5, min_history = 4), each at
alpha_r = 1e-5 (c_r = 4.26): at most 40 x 1e-5 = 4e-4 false flags per series (the union of the tests; the
windows overlap, so fewer), 0.067 for the whole fleet under the null: one false flag in 15 such fleets at
worst. The same defaults find a level rising by 10 %/day from day D, with a day-to-day scatter of 2 % of
the level, within 2 days of D: on day D + 2 the rise is 20 % of the level, 10 spreads, and the window of
the last two values is 7.5 spreads above the history; on D + 1 a single value of 5 spreads passes c_1
when the history's spread is near the scatter. Measured through drift_flags (3000 such rises, D = 4 .. 10,
the floor pooled): 25 % found on D + 1, 74.5 % on D + 2, 2 (at D = 4, the shortest history) on D + 3; the
onset within 2 days of D for 2998.

``since``: the onset, estimated when the flag is raised from the regime's values up to ``detected`` (not
from later ones) by maximum likelihood (least squares, Gaussian errors of one
variance) over two shapes: a step up at a period (the level constant before it and, higher, after it;
``since`` is the first period on the higher level) and a ramp (the level constant up to a day, then rising
linearly with time; ``since`` is that day, the last on the old level, searched over every calendar day from
the regime's start to the day before ``detected``). The better fit of either shape wins (a tie goes to the
step: with one raised value both fit it exactly, the ramp's onset one period earlier than the step's).
After a flag the regime restarts at ``detected``: the level reached then is the new history, so a further
rise on top of it (a ramp going on, or a second step) is flagged again once the new history holds
``min_history`` values, its ``since`` after the last flag's (a rise whose onset is the last flag's own
is that rise going on: no new flag, and the history restarts at the level it has reached).
"""
from __future__ import annotations

import datetime
import math
from dataclasses import dataclass, replace

import numpy as np
from scipy.stats import norm

TERMS = ("coulomb", "viscous")
POOL_LEVEL = 20.0  # pooled scatter uses values above this many absolute floors


@dataclass(frozen=True)
class DriftConfig:
    """The test's settings. ``alphas`` (R,): the one-sided false-alarm probability of the test of the last
    r = 1 .. R periods' mean (a standard Gaussian's upper tail at its threshold); ``min_history`` periods of
    history before any test; ``relative_floor`` the least scatter of a period's value as a fraction of the
    level; ``coulomb_floor`` N m and ``viscous_floor`` N m s/rad the least scatter in absolute terms (for a
    level of about zero); ``pool_pairs`` the consecutive pairs of values a joint name needs across the fleet
    for drift_flags to raise ``relative_floor`` to the fleet's scatter (relative_scatter), None to keep
    ``relative_floor`` as it is."""

    alphas: tuple = (1e-5,) * 5
    min_history: int = 4
    relative_floor: float = 0.02
    coulomb_floor: float = 1e-3
    viscous_floor: float = 1e-4
    pool_pairs: int | None = 30

    def __post_init__(self):
        if not self.alphas or not all(0.0 < a < 0.5 for a in self.alphas):
            raise ValueError(f"alphas must be one or more probabilities in (0, 0.5), got {self.alphas}")
        if self.pool_pairs is not None and self.pool_pairs < 2:
            raise ValueError(f"pool_pairs must be 2 or more (or None), got {self.pool_pairs}")
        if self.min_history < 2:
            raise ValueError(f"min_history must be 2 or more, got {self.min_history}")
        if min(self.relative_floor, self.coulomb_floor, self.viscous_floor) < 0.0:
            raise ValueError("floors must not be negative")

    @property
    def thresholds(self) -> tuple:
        """c_r (R,): the z the mean of the last r periods must pass, r = 1 .. R."""
        return tuple(float(norm.isf(a)) for a in self.alphas)

    def floor(self, term: str) -> float:
        """The absolute floor of ``term`` ("coulomb" N m, "viscous" N m s/rad)."""
        return {"coulomb": self.coulomb_floor, "viscous": self.viscous_floor}[term]

    def false_flags_bound(self, periods: int) -> float:
        """At most this many false flags are expected in a series of ``periods`` dates under the null
        (constant level, Gaussian scatter within the floors): the sum of alpha_r over every test made."""
        return float(sum(a * max(0, periods - self.min_history - r + 1) for r, a in enumerate(self.alphas, 1)))


@dataclass(frozen=True)
class DriftFlag:
    """A rise of ``term`` ("coulomb" or "viscous") friction of ``joint``: it began on ``since`` and was
    found on ``detected``, where the last values' mean stood ``statistic`` predicted spreads (z) above the
    history's."""

    joint: str
    term: str
    since: datetime.date
    detected: datetime.date
    statistic: float


def _prefix(values: np.ndarray, stds: np.ndarray) -> tuple:
    """Running sums (lists of p + 1 floats) for _z: of the values less the first (so that a level far
    above its scatter loses no digits to cancellation), of their squares, of the known s_i^2 and of
    their count."""
    y = values - values[0]
    known = np.isfinite(stds)
    sums = [np.concatenate([[0.0], np.cumsum(a)]).tolist()
            for a in (y, y * y, np.where(known, stds, 0.0) ** 2, known.astype(float))]
    return values[0], sums


def _z(prefix: tuple, start: int, first: int, end: int, floor: float, config: DriftConfig) -> float:
    """z of the mean of the window first .. end - 1 against the history start .. first - 1 (positions
    in a series whose running sums are ``prefix``; see the module docstring)."""
    offset, (sy, syy, sss, sn) = prefix
    k, r = first - start, end - first
    total = sy[first] - sy[start]
    m = total / k
    v = max((syy[first] - syy[start] - total * m) / (k - 1), 0.0)
    count = sn[first] - sn[start]
    s2 = (sss[first] - sss[start]) / count if count > 0 else 0.0
    floor2 = max((config.relative_floor * (m + offset)) ** 2, floor * floor)
    sigma2 = max(v, s2, floor2)
    own = (sss[end] - sss[first] + (r - (sn[end] - sn[first])) * s2) / r  # unknown s_i taken as s2
    w = max(sigma2 - s2 + own, floor2)
    spread = math.sqrt(w / r + sigma2 / k)
    rise = (sy[end] - sy[first]) / r - m
    return rise / spread if spread > 0.0 else (math.inf if rise > 0.0 else 0.0)


def _onset(days: np.ndarray, values: np.ndarray) -> int:
    """The day (ordinal) a rise began, by least squares over a step up at a period and a ramp from a
    day: ``days`` (p,) ordinals in order, ``values`` (p,), the rise seen at the last."""
    last = days.size - 1
    best_sse, best_day = math.inf, int(days[last])
    for j in range(1, last + 1):  # step: positions >= j on the higher level
        before, after = values[:j], values[j:]
        if after.mean() <= before.mean():
            continue
        sse = float(np.sum((before - before.mean()) ** 2) + np.sum((after - after.mean()) ** 2))
        if sse < best_sse:
            best_sse, best_day = sse, int(days[j])
    for day in range(int(days[0]), int(days[last])):  # ramp: level until ``day``, linear after
        g = np.maximum(days - day, 0).astype(float)
        design = np.column_stack([np.ones_like(g), g])
        coef, *_ = np.linalg.lstsq(design, values, rcond=None)
        if coef[1] <= 0.0:
            continue
        sse = float(np.sum((values - design @ coef) ** 2))
        if sse < best_sse * (1.0 - 1e-9):  # strictly better: a tie (rounding apart) stays a step
            best_sse, best_day = sse, day
    return best_day


def series_drifts(dates, values, stds, joint: str = "", term: str = "coulomb",
                  config: DriftConfig = DriftConfig()) -> list:
    """The DriftFlags of one series: ``dates`` (p,) datetime.date, ``values`` (p,) and ``stds`` (p,) of
    ``term`` friction of ``joint`` (N m or N m s/rad; NaN values are left out, NaN stds unknown), in any
    order (dates distinct). Returns the flags in date order."""
    dates = list(dates)
    values = np.asarray(values, dtype=float).reshape(-1)
    stds = np.asarray(stds, dtype=float).reshape(-1)
    if not (len(dates) == values.size == stds.size):
        raise ValueError(f"dates, values and stds differ in length: {len(dates)}, {values.size}, {stds.size}")
    days = np.array([d.toordinal() for d in dates], dtype=np.int64)
    if np.unique(days).size != days.size:
        raise ValueError(f"{joint} {term}: two periods on one date")
    keep = np.isfinite(values)
    order = np.argsort(days[keep], kind="stable")
    days, values, stds = days[keep][order], values[keep][order], stds[keep][order]
    if days.size == 0:
        return []
    floor = config.floor(term)
    thresholds = config.thresholds
    prefix = _prefix(values, stds)
    flags = []
    start = 0  # the regime's first position
    for i in range(days.size):
        best = None  # (z - c_r, z) of the window that passes its threshold by the most
        for r, c in enumerate(thresholds, 1):
            first = i - r + 1  # the window is first .. i, the history start .. first - 1
            if first - start < config.min_history:
                break
            z = _z(prefix, start, first, i + 1, floor, config)
            if z > c and (best is None or z - c > best[0]):
                best = (z - c, z)
        if best is None:
            continue
        since = _onset(days[start:i + 1], values[start:i + 1])
        if flags and since <= flags[-1].since.toordinal():
            start = i  # the flagged rise going on from the level it reached when flagged: no new onset
            continue
        flags.append(DriftFlag(joint, term, datetime.date.fromordinal(since),
                               datetime.date.fromordinal(int(days[i])), best[1]))
        # the level reached when flagged is the next history: a ramp going on is flagged again
        # only once it has risen beyond that level as a new rise would
        start = i
    return flags


def _fleet_series(summaries) -> dict:
    """{robot: [(joint, term, dates, values (p,), stds (p,)), ...]} in name order, each robot's series in
    its joint order then TERMS order, from the periods not "failed" (sorted by date). Raises ValueError
    when a robot has two periods on one date."""
    by_robot = {}
    for summary in summaries:
        by_robot.setdefault(summary.robot, []).append(summary)
    fleet = {}
    for robot in sorted(by_robot):
        periods = sorted(by_robot[robot], key=lambda p: p.date)
        dates = [p.date for p in periods]
        if len(set(dates)) != len(dates):
            raise ValueError(f"robot {robot!r} has two periods on one date")
        used = [p for p in periods if p.verdict != "failed"]
        joints = []
        for p in used:
            joints += [j for j in p.joint_names if j not in joints]
        series = []
        for joint in joints:
            rows = [(p, list(p.joint_names).index(joint)) for p in used if joint in p.joint_names]
            for term in TERMS:
                series.append((joint, term, [p.date for p, _ in rows],
                               np.array([np.asarray(getattr(p, term), dtype=float)[j] for p, j in rows]),
                               np.array([np.asarray(getattr(p, term + "_std"), dtype=float)[j] for p, j in rows])))
        fleet[robot] = series
    return fleet


# the median of a chi-square variable with one degree of freedom: median(d^2) / (2 * this) estimates the
# variance of one value from differences d of two
_CHI2_1_MEDIAN = 0.454936423119572


def _pooled(fleet: dict, config: DriftConfig) -> dict:
    """{(joint, term): relative scatter} pooled over the fleet (see relative_scatter)."""
    groups = {}  # (joint, term) -> relative differences of consecutive values
    for series in fleet.values():
        for joint, term, _, values, _ in series:
            finite = values[np.isfinite(values)]
            a, b = finite[:-1], finite[1:]
            level = 0.5 * (np.abs(a) + np.abs(b))
            usable = level > POOL_LEVEL * config.floor(term)  # about zero, a relative scatter means nothing
            groups.setdefault((joint, term), []).append((b - a)[usable] / level[usable])
    by_key = {key: np.concatenate(d) for key, d in groups.items()}
    by_term = {term: np.concatenate([d for (_, t), d in by_key.items() if t == term] or [np.empty(0)])
               for term in TERMS}

    def estimate(d):
        # the upper confidence limit of the median of d^2, two binomial standard errors above it (distribution
        # free), so that the floor covers the scatter in about 98 % of fleets rather than half of them
        squares = np.sort(d ** 2)
        rank = min(squares.size - 1, int(math.ceil(0.5 * squares.size + math.sqrt(squares.size))) - 1)
        return math.sqrt(float(squares[rank]) / (2.0 * _CHI2_1_MEDIAN))

    scatter = {}
    for (joint, term), d in by_key.items():
        if d.size >= config.pool_pairs:
            scatter[(joint, term)] = estimate(d)
        elif by_term[term].size >= config.pool_pairs:
            scatter[(joint, term)] = estimate(by_term[term])
        else:
            scatter[(joint, term)] = math.nan
    return scatter


def relative_scatter(summaries, config: DriftConfig = DriftConfig()) -> dict:
    """{(joint, term): the day-to-day scatter of that joint's ``term`` friction relative to its level,
    pooled over the fleet} (NaN where the fleet has too few values). From the differences of consecutive
    values of every robot's series of that joint name (robots of one model share their joint names), or
    of every joint when those number fewer than ``config.pool_pairs``: the median of their squares over
    twice a chi-square(1) variable's median, robust to the few series that drift. Values of a level below
    POOL_LEVEL times the absolute floor are left out. drift_flags raises ``relative_floor`` to it."""
    return _pooled(_fleet_series(summaries), config)


def drift_flags(summaries, config: DriftConfig = DriftConfig()) -> dict:
    """Rising friction per robot: {robot: [DriftFlag, ...]} over every robot of ``summaries`` (an iterable
    of PeriodSummary, any order), robots in name order, each robot's flags by detection date, then joint
    (in the robot's joint order), then term; an empty list when nothing is flagged. Periods whose verdict is
    "failed" are left out, and NaN values of one joint and term. With ``config.pool_pairs`` set, each
    series' relative floor is the larger of ``config.relative_floor`` and the fleet's relative_scatter of
    its joint and term. Raises ValueError when a robot has two periods on one date."""
    fleet = _fleet_series(summaries)
    scatter = _pooled(fleet, config) if config.pool_pairs else {}
    result = {}
    for robot, series in fleet.items():
        flags = []
        for rank, (joint, term, dates, values, stds) in enumerate(series):
            pooled = scatter.get((joint, term), math.nan)
            own = replace(config, relative_floor=max(config.relative_floor, pooled)) if pooled > 0 else config
            flags += [(f.detected, rank, f) for f in series_drifts(dates, values, stds, joint, term, own)]
        result[robot] = [f for *_, f in sorted(flags, key=lambda t: t[:2])]
    return result
