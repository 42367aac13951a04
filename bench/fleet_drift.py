"""The fleet's drift test (sysid_core/fleet/drift.py) on synthetic fleets: false flags, delays, onsets.

A fleet is 12 robots x 7 joints, each identified on 14 consecutive days: each joint's Coulomb level
(1 N m) and viscous coefficient (0.1 N m s/rad) estimated with a Gaussian day-to-day scatter (relative to
the level), each reported with a standard deviation that is ``honest`` (equal to the scatter), ``unknown``
(NaN) or ``small`` (a tenth of it: what least squares on one recording reports when the scatter comes from
day to day). Everything goes through drift_flags, as sysid-fleet calls it. Printed:

- the fleet's pooled relative scatter (the floor drift_flags raises relative_floor to) against the truth;
- null fleets (constant friction): false flags per fleet against the design bound, with the relative floor
  pooled over the fleet (the default) and fixed at DriftConfig.relative_floor, for uniform scatters from
  1 % to 8 % and for fleets where one joint or one robot scatters more than the rest;
- rises: in each fleet six robots have one joint's friction rising from day D (D = 4 .. 10, cycling):
  a ramp of 10 %/day (the requirement: found within 2 days of D at 2 % scatter), 5 %/day, steps of 5 to
  50 %; the distribution of the delay (detected - D, days) and of the onset error (since - D, days),
  the rises never found, and the flags anywhere else (false).

Asserts nothing. Run: ``.venv/bin/python bench/fleet_drift.py [--fleets N] [--rises N]`` (about 6 minutes
with the defaults on a loaded 2-core machine).
"""
from __future__ import annotations

import argparse
import collections
import datetime
import time
from dataclasses import replace

import numpy as np

from sysid_core.fleet.drift import DriftConfig, drift_flags, relative_scatter
from sysid_core.fleet.summary import PeriodSummary

DAYS = 14
ROBOTS, JOINTS = 12, 7
SERIES_PER_FLEET = ROBOTS * JOINTS * 2
START = datetime.date(2024, 3, 1)
DATES = [START + datetime.timedelta(days=d) for d in range(DAYS)]
NAMES = tuple(f"j{j}" for j in range(JOINTS))
LEVEL = {"coulomb": 1.0, "viscous": 0.1}


def _fleet(rng, scatter, reported, rises=None):
    """PeriodSummary list of one fleet: ``scatter`` (ROBOTS, JOINTS) relative; ``rises`` {(robot, joint,
    term): relative change (DAYS,)} added to those levels."""
    rises = rises or {}
    out = []
    for r in range(ROBOTS):
        arrays = {}
        for term, level in LEVEL.items():
            shape = np.ones((DAYS, JOINTS))
            for (rr, j, t), change in rises.items():
                if rr == r and t == term:
                    shape[:, j] += change
            sd = scatter[r] * level
            shown = {"honest": sd, "unknown": np.full(JOINTS, np.nan), "small": 0.1 * sd}[reported]
            arrays[term] = (level * shape + sd * rng.standard_normal((DAYS, JOINTS)), shown)
        for d in range(DAYS):
            out.append(PeriodSummary(f"r{r}", DATES[d], NAMES, arrays["coulomb"][0][d], arrays["coulomb"][1],
                                     arrays["viscous"][0][d], arrays["viscous"][1], "good"))
    return out


def pooled_scatter(fleets: int, config: DriftConfig):
    """relative_scatter against the truth over ``fleets`` fleets of uniform 2 % scatter."""
    rng = np.random.default_rng(4)
    ratios = np.array([list(relative_scatter(_fleet(rng, np.full((ROBOTS, JOINTS), 0.02), "small"), config).values())
                       for _ in range(fleets)]) / 0.02
    print(f"Pooled relative scatter (relative_scatter) over {fleets} fleets of 2 % scatter, per joint name and "
          f"term ({ROBOTS} x {DAYS - 1} differences each): {ratios.mean():.3f} x the truth on average, standard "
          f"deviation {ratios.std():.3f} x the truth, range {ratios.min():.3f} .. {ratios.max():.3f}")


def null_fleets(fleets: int, config: DriftConfig):
    print(f"Null fleets: {fleets} fleets of {SERIES_PER_FLEET} series x {DAYS} days each, constant friction")
    print(f"  design bound (scatter within the floors): {config.false_flags_bound(DAYS) * SERIES_PER_FLEET:.4f} "
          "false flags per fleet")
    rng = np.random.default_rng(1)
    uniform = lambda x: np.full((ROBOTS, JOINTS), x)
    one_joint = uniform(0.02)
    one_joint[:, 6] = 0.05
    one_robot = uniform(0.02)
    one_robot[ROBOTS - 1] = 0.04
    cases = [("2 %", uniform(0.02), "honest"), ("2 %", uniform(0.02), "unknown"), ("2 %", uniform(0.02), "small"),
             ("1 %", uniform(0.01), "small"), ("4 %", uniform(0.04), "small"), ("8 %", uniform(0.08), "small"),
             ("2 %, joint j6 5 %", one_joint, "small"), ("2 %, robot r11 4 %", one_robot, "small")]
    for label, scatter, reported in cases:
        for pooled in (True, False):
            own = config if pooled else replace(config, pool_pairs=None)
            t0 = time.perf_counter()
            flags = sum(sum(len(f) for f in drift_flags(_fleet(rng, scatter, reported), own).values())
                        for _ in range(fleets))
            wall = time.perf_counter() - t0
            print(f"  scatter {label:18s} std {reported:7s} {'pooled' if pooled else 'fixed '} floor: "
                  f"{flags:4d} false flags in {fleets} fleets = {flags / fleets:.3f} per fleet "
                  f"({wall / fleets:.2f} s per fleet)")


def _rises(config, shape_of, label, rises, scatter=0.02, reported="honest"):
    """Fleets with six rising series each until ``rises`` rises were seen; prints the delays."""
    rng = np.random.default_rng(2)
    days = np.arange(DAYS)
    delay, onset = collections.Counter(), collections.Counter()
    late = collections.Counter()  # D of the rises found later than 2 days, or never
    false = never = seen = 0
    while seen < rises:
        plan = {}
        for r in range(6):
            day = config.min_history + (seen + r) % (DAYS - config.min_history - 3)  # 3 days after D at least
            plan[(r, (seen + r) % JOINTS, ("coulomb", "viscous")[r % 2])] = (day, shape_of(days, day))
        flags = drift_flags(_fleet(rng, np.full((ROBOTS, JOINTS), scatter), reported,
                                   {k: v[1] for k, v in plan.items()}), config)
        for robot, found in flags.items():
            r = int(robot[1:])
            for f in found:
                key = (r, int(f.joint[1:]), f.term)
                if key not in plan or f.detected < DATES[plan[key][0]]:
                    false += 1
        for (r, j, term), (day, _) in plan.items():
            found = [f for f in flags[f"r{r}"] if f.joint == f"j{j}" and f.term == term and f.detected >= DATES[day]]
            if not found:
                never += 1
                late[day] += 1
                continue
            delay[(found[0].detected - DATES[day]).days] += 1
            onset[(found[0].since - DATES[day]).days] += 1
            if (found[0].detected - DATES[day]).days > 2:
                late[day] += 1
        seen += len(plan)
    fmt = lambda counter: ", ".join(f"{k:+d}: {counter[k]}" for k in sorted(counter))
    print(f"  {label} (scatter {100 * scatter:.0f} %, std {reported}): delay {{{fmt(delay)}}}; since - D "
          f"{{{fmt(onset)}}}; never {never} of {seen}; later than 2 days or never, by D: "
          f"{{{', '.join(f'{k}: {late[k]}' for k in sorted(late))}}}; false flags elsewhere {false}")


def rises(count: int, config: DriftConfig):
    print(f"Rises from day D (D = {config.min_history}..{DAYS - 4}), {count} of each kind; delay = detected - D in "
          "days")
    ramp = lambda rate: (lambda days, d: rate * np.maximum(days - d, 0))
    for reported in ("honest", "small"):
        _rises(config, ramp(0.10), "ramp 10 %/day", count, reported=reported)
    _rises(config, ramp(0.05), "ramp 5 %/day", count)
    for size in (0.05, 0.10, 0.20, 0.50):
        _rises(config, lambda days, d, size=size: size * (days >= d), f"step {100 * size:.0f} %", count)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fleets", type=int, default=200)
    parser.add_argument("--rises", type=int, default=3000)
    args = parser.parse_args()
    config = DriftConfig()
    print(f"DriftConfig defaults: {config}; thresholds {', '.join(f'{c:.3f}' for c in config.thresholds)}")
    pooled_scatter(args.fleets, config)
    null_fleets(args.fleets, config)
    rises(args.rises, config)


if __name__ == "__main__":
    main()
