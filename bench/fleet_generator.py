"""The generated fleet (test/fleet_generator.py): how long it takes to make, how long a day takes to
identify, and how well each joint's friction is seen from day to day.

Generates the default fleet (12 robots x 14 days, the generator's defaults unless given) into a
temporary directory (removed at the end), then identifies every robot on every date in this process, as sysid-fleet
does for one period: the date's files read with read_recordings, the last 20 % held out for
validation, identify() with the default IdentificationConfig (terminal scope, consistent
estimator, a real arm's joint physics) on the model file of the manifest.

Printed: the generation's wall time; per robot its arm, model format, files, verdicts, payload
mass error (%), the median and largest identification wall time of a day (the identification
alone; the reading of its files apart), the largest recorded torque in torque scales (within
fleet_generator.TORQUE_RANGE: the torque field never saturates); per joint, for Coulomb (C) and viscous (V) friction,
over the dates:

``bias``    mean of identified / actual - 1, %
``spread``  standard deviation of identified / actual over the dates, % (the day-to-day noise a drift
            test sees; the actual level divides out a drift's rise)
``std``     median of the reported standard deviation (the base parameter's) over the actual level, %
``z``       largest |identified - actual| / reported standard deviation

A joint is marked ``*`` when either spread is above WELL_DETERMINED_SPREAD (the day-to-day noise
the drift test is designed for). For a drifting joint, its identified level on the last date over
the first, against the truth's. Asserts nothing.

Run: ``OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/fleet_generator.py [robots days seconds rate_hz]``
(about a minute on a quiet 2-core machine; without OPENBLAS_NUM_THREADS=1 BLAS threads fight
for the cores and a day's identification takes several times longer on a busy machine).
"""
from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "test"))

from fleet_generator import generate_fleet  # noqa: E402
from sysid_core.dynamics.model import load_robot  # noqa: E402
from sysid_core.identification.identify import IdentificationConfig, identify  # noqa: E402
from sysid_core.identification.recording_files import read_recordings  # noqa: E402

VALIDATION = 0.2
WELL_DETERMINED_SPREAD = 2.0  # %


def _std(result, name: str) -> float:
    """The reported standard deviation of the base parameter ``name``, NaN if it is not one."""
    names = result.base.names
    return float(result.estimate.std[names.index(name)]) if name in names else np.nan


def main(arguments) -> None:
    kwargs = {}
    for key, value in zip(("robots", "days", "seconds", "rate_hz"), arguments):
        kwargs[key] = int(value) if key in ("robots", "days") else float(value)
    with tempfile.TemporaryDirectory(prefix="fleet_bench_") as work:  # the default fleet is ~260 MB
        started = time.perf_counter()
        fleet = generate_fleet(Path(work) / "fleet", **kwargs)
        generation = time.perf_counter() - started
        size = sum(p.stat().st_size for p in fleet.directory.rglob("*") if p.is_file())
        print(f"fleet: {len(fleet.robots)} robots x {len(fleet.dates)} days, {fleet.seconds:g} s at {fleet.rate_hz:g} "
              f"Hz a day; generated in {generation:.1f} s, {size / 1e6:.0f} MB", flush=True)
        _identify_all(fleet)


def _identify_all(fleet) -> None:
    """Every robot on every date identified and reported (the module docstring's table)."""
    all_times, poor, counts = [], [], {}
    for truth in fleet.robots:
        robot = load_robot(truth.model)
        found = {"coulomb": [], "viscous": []}
        stds = {"coulomb": [], "viscous": []}
        times, reads, verdicts, mass, peak = [], [], [], [], 0.0
        for files in truth.recordings:
            began = time.perf_counter()
            recording = read_recordings(files, robot.joint_names).recording
            reads.append(time.perf_counter() - began)
            peak = max(peak, float(np.max(np.abs(recording.tau) / truth.scale)))
            head, tail = recording.split(VALIDATION)
            began = time.perf_counter()
            result = identify(robot, head, IdentificationConfig(), validation=tail)
            times.append(time.perf_counter() - began)
            verdicts.append(result.verdict.level)
            for term in found:
                found[term].append(getattr(result, term))
                stds[term].append([_std(result, f"{j}.{term}") for j in robot.joint_names])
            added = result.terminal_parameters[0] - robot.nominal_parameters[robot.terminal_index][0]
            mass.append(100.0 * (added - truth.payload[0]) / truth.payload[0])
        all_times += times
        for level in verdicts:
            counts[level] = counts.get(level, 0) + 1
        kind = "bag" if truth.recordings[0][0].suffix != ".csv" else "csv"
        print(f"\n{truth.id} {truth.arm} ({truth.model.suffix[1:]}, {kind}) verdicts "
              f"{ {v: verdicts.count(v) for v in sorted(set(verdicts))} } payload mass error % mean "
              f"{np.mean(mass):+.2f} max |{np.max(np.abs(mass)):.2f}|; identify {np.median(times):.3f} s median, "
              f"{np.max(times):.3f} s max; reading {np.median(reads):.3f} s; peak |torque| {peak:.2f} torque scales")
        print(f"  {'joint':22s} {'C bias':>7s} {'spread':>7s} {'std':>6s} {'z':>5s}   {'V bias':>7s} {'spread':>7s} "
              f"{'std':>6s} {'z':>5s}")
        rows = {}
        for term, actual in (("coulomb", truth.daily_coulomb), ("viscous", truth.daily_viscous)):
            ratio = np.asarray(found[term]) / actual
            std = np.asarray(stds[term])
            rows[term] = (100 * (ratio.mean(0) - 1), 100 * ratio.std(0), 100 * np.median(std / actual, 0),
                          np.max(np.abs(np.asarray(found[term]) - actual) / std, 0))
        for j, name in enumerate(truth.joint_names):
            cells = [f"{rows[t][0][j]:+7.2f} {rows[t][1][j]:7.2f} {rows[t][2][j]:6.2f} {rows[t][3][j]:5.1f}"
                     for t in ("coulomb", "viscous")]
            mark = "*" if max(rows["coulomb"][1][j], rows["viscous"][1][j]) > WELL_DETERMINED_SPREAD else " "
            drift = truth.drift is not None and truth.drift.joint == name
            if mark == "*":
                poor.append(f"{truth.id}/{name}")
            print(f"  {name:21s}{mark} {cells[0]}   {cells[1]}" + ("  <- drift" if drift else ""))
        if truth.drift is not None:
            j = truth.joint_names.index(truth.drift.joint)
            term = truth.drift.term
            actual = truth.daily_coulomb if term == "coulomb" else truth.daily_viscous
            print(f"  drift {truth.drift.joint} {term} since {truth.drift.since}: last/first date identified "
                  f"{found[term][-1][j] / found[term][0][j]:.3f}, actual {actual[-1, j] / actual[0, j]:.3f}")
    print(f"\nidentification of a day: median {np.median(all_times):.3f} s, max {np.max(all_times):.3f} s; "
          f"verdicts {counts}")
    print(f"joints with a day-to-day spread above {WELL_DETERMINED_SPREAD} %: " + (", ".join(poor) or "none"))


if __name__ == "__main__":
    main(sys.argv[1:])
