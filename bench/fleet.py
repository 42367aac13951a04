"""sysid-fleet's throughput: recorded hours identified per wall-clock hour, on 1 and 2 workers of a
LocalCluster and in one process, on a generated fleet (test/fleet_generator.py), and what travels
between the machines.

    .venv/bin/python bench/fleet.py                        # 12 robots x 14 days, 60 s a day at 200 Hz
    .venv/bin/python bench/fleet.py --robots 4 --days 5    # a quick look

Prints per run the wall time (the cluster's start and its workers' first load of each model
separate: a standing cluster pays them once), throughput and speed-up; that every period
equals the single-process identification (largest relative difference of the standard parameters);
the drift flags against the generator's truth; and, for a period of many files, the size of a reduced
form (what a worker sends) against its file's, and the merge tree's depth. The single process runs
with one BLAS thread, as each worker does, so that the figures compare scheduling, not BLAS threads.
"""
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse  # noqa: E402
import pickle  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "test"))

from fleet_generator import generate_fleet  # noqa: E402
from sysid_core.fleet.cluster import connect, run_periods  # noqa: E402
from sysid_core.fleet.drift import drift_flags  # noqa: E402
from sysid_core.fleet.manifest import load_manifest  # noqa: E402
from sysid_core.fleet.period import identify_period, load_file, reduce_file, setup  # noqa: E402


def _single_process(periods) -> tuple:
    """Every period as sysid-identify would run it (read, join, split, identify), one after another."""
    started = time.perf_counter()
    outcomes = [identify_period(p) for p in periods]
    return outcomes, time.perf_counter() - started


def _warm(models) -> None:
    """A worker's first use of each model: its imports, the model loaded, its base parameters."""
    for model in models:
        setup(model)


def _cluster(periods, workers: int) -> tuple:
    """(outcomes, seconds to start the cluster and warm its workers, seconds to identify)."""
    started = time.perf_counter()
    with connect(workers=workers) as client:
        client.wait_for_workers(workers)
        client.run(_warm, sorted({p.model for p in periods}, key=str))
        ready = time.perf_counter()
        outcomes = run_periods(client, periods)
        done = time.perf_counter()
    return outcomes, ready - started, done - ready


def _largest_difference(outcomes, reference) -> float:
    worst = 0.0
    for got, ref in zip(outcomes, reference):
        if got.result is None or ref.result is None:
            return float("nan")
        a, b = got.result.standard, ref.result.standard
        worst = max(worst, float(np.max(np.abs(a - b)) / np.max(np.abs(b))))
    return worst


def _travel(periods) -> None:
    """What a worker sends for one file (a Part) against what it reads, and the merge tree's depth."""
    period = max(periods, key=lambda p: len(p.files))
    recording = load_file(period, 0)
    part = reduce_file(period, recording, (recording.n_samples,), 0)
    size = Path(period.files[0]).stat().st_size if Path(period.files[0]).is_file() else \
        sum(f.stat().st_size for f in Path(period.files[0]).rglob("*") if f.is_file())
    print(f"\none file of {recording.n_samples} samples: {size / 1e6:.2f} MB on disk, "
          f"{recording.q.nbytes * 3 / 1e6:.2f} MB in memory; its reduced form {len(pickle.dumps(part)) / 1e3:.0f} kB "
          "(independent of the file's length)")
    for files in (1, 2, 14, 100, 1000):
        print(f"  {files:5d} files in a period: a merge tree {int(np.ceil(np.log2(files))) if files > 1 else 0} "
              "merges deep")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--robots", type=int, default=12)
    parser.add_argument("--days", type=int, default=14)
    parser.add_argument("--seconds", type=float, default=60.0, help="recorded seconds per robot and day")
    parser.add_argument("--rate", type=float, default=200.0, help="sample rate, Hz")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as scratch:
        started = time.perf_counter()
        fleet = generate_fleet(Path(scratch) / "fleet", robots=args.robots, days=args.days, seconds=args.seconds,
                               rate_hz=args.rate)
        print(f"generated {args.robots} robots x {args.days} days x {args.seconds:g} s at {args.rate:g} Hz in "
              f"{time.perf_counter() - started:.1f} s")
        periods = load_manifest(fleet.manifest).periods
        for model in {p.model for p in periods}:  # models loaded before timing, as a worker keeps them
            setup(model)
        reference, single = _single_process(periods)
        hours = sum(o.summary.hours for o in reference)
        print(f"{len(periods)} periods, {hours:.3f} recorded hours\n")
        print(f"{'run':>18} {'start s':>8} {'wall s':>8} {'hours/hour':>11} {'speed-up':>9} {'max rel diff':>13}")
        print(f"{'single process':>18} {'':>8} {single:8.1f} {hours * 3600 / single:11.0f} {'':>9} {'':>13}")
        walls = {}
        for workers in args.workers:
            outcomes, start, wall = _cluster(periods, workers)
            walls[workers] = wall
            base = walls.get(1)
            print(f"{f'{workers} worker' + ('s' if workers > 1 else ''):>18} {start:8.1f} {wall:8.1f} "
                  f"{hours * 3600 / wall:11.0f} {'' if base is None else f'{base / wall:9.2f}':>9} "
                  f"{_largest_difference(outcomes, reference):13.1e}")
        flags = drift_flags([o.summary for o in reference])
        print("\ndrift (truth: since; found: since, detected):")
        for truth in fleet.robots:
            found = [f"{f.joint} {f.term} since {f.since} detected {f.detected}" for f in flags[truth.id]]
            expected = "none" if truth.drift is None else f"{truth.drift.joint} {truth.drift.term} since " \
                                                           f"{truth.drift.since}"
            print(f"  {truth.id}: truth {expected}; found {'; '.join(found) or 'none'}")
        _travel(periods)


if __name__ == "__main__":
    main()
