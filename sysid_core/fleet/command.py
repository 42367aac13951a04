"""``sysid-fleet``: every robot of a manifest identified per date on a Dask cluster, the friction
trends of each joint, and the joints whose friction rises.

Outputs in --output-dir: ``<robot>/<date>/params.json`` (what ``sysid-identify MODEL --recording
FILE ...`` writes for that period's files, with the updated model beside it), ``fleet.csv`` (one
row per robot, date and joint), ``drift.json`` ({robot: [{joint, term, since, detected,
statistic}]}) and ``fleet_report.html``. Exit status 0 when every period was identified and
trusted, 3 when some could not be (listed), 2 for a manifest or option error.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from ..errors import SysidError
from .manifest import load_manifest


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sysid-fleet",
        description="Identify every robot of a manifest per date on a Dask cluster, and flag joints whose "
                    "friction rises over the dates.")
    parser.add_argument("manifest", type=Path, help="the fleet's manifest (YAML: options, robots with id, model "
                                                    "and recordings by date)")
    parser.add_argument("--output-dir", type=Path, required=True,
                        help="where <robot>/<date>/params.json, fleet.csv, drift.json and fleet_report.html go")
    parser.add_argument("--scheduler", metavar="ADDRESS",
                        help="a running Dask scheduler (tcp://host:8786) whose workers see the manifest's files at "
                             "the same paths (default: a local cluster on this machine)")
    parser.add_argument("--workers", type=int, metavar="N",
                        help="worker processes of the local cluster (default: one per core)")
    return parser


def _write_period(output_dir: Path, outcome) -> None:
    """A period's params.json and updated model, in place of whatever an earlier run left there."""
    from ..cli import _write_model_files, clear_previous_outputs
    from ..results.export import write_params_json
    from .period import setup

    folder = output_dir / outcome.period.key
    folder.mkdir(parents=True, exist_ok=True)
    clear_previous_outputs(folder)
    if outcome.result is None:
        (folder / "error.txt").write_text(outcome.error + "\n")
        return
    (folder / "error.txt").unlink(missing_ok=True)
    write_params_json(folder / "params.json", outcome.document)
    robot, args, *_ = setup(outcome.period.model)
    _write_model_files(argparse.Namespace(**dict(vars(args), output_dir=folder)), robot, outcome.result)


def _line(outcome, number: int, total: int) -> str:
    summary = outcome.summary
    text = f"[{number}/{total}] {outcome.period.robot} {outcome.period.date}: "
    if outcome.result is None:
        return text + f"not identified: {outcome.error}"
    payload = "" if summary.mass is None else f", payload {summary.mass:.3f} kg"
    return text + f"{summary.verdict}{payload}" + (f" ({summary.reasons[0]})" if summary.reasons else "")


def run(args: argparse.Namespace) -> int:
    from .cluster import connect, run_periods  # the only import of Dask, here
    from .drift import drift_flags
    from .report import write_fleet_report
    from .table import write_fleet_csv

    started = time.perf_counter()
    if args.workers is not None and args.workers < 1:
        raise SysidError(f"--workers must be at least 1, got {args.workers}")
    if args.workers is not None and args.scheduler is not None:
        raise SysidError("--workers sizes the local cluster: with --scheduler the cluster has its own")
    manifest = load_manifest(args.manifest)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    total = len(manifest.periods)
    print(f"{args.manifest}: {len(manifest.robots)} robots, {total} periods")
    finished = []

    def done(outcome):
        _write_period(args.output_dir, outcome)
        finished.append(outcome)
        print(_line(outcome, len(finished), total), flush=True)

    with connect(args.scheduler, args.workers) as client:
        outcomes = run_periods(client, manifest.periods, done=done)
    summaries = [o.summary for o in outcomes]
    write_fleet_csv(args.output_dir / "fleet.csv", summaries)
    flags = drift_flags(summaries)
    (args.output_dir / "drift.json").write_text(json.dumps(
        {robot: [{"joint": f.joint, "term": f.term, "since": f.since.isoformat(), "detected": f.detected.isoformat(),
                  "statistic": float(f.statistic)} for f in found] for robot, found in flags.items()}, indent=2) + "\n")
    write_fleet_report(args.output_dir / "fleet_report.html", summaries, flags, title=f"Fleet: {args.manifest.name}")
    for robot, found in flags.items():
        for flag in found:
            print(f"drift: {robot} {flag.joint} {flag.term} friction rising since {flag.since} "
                  f"(found {flag.detected})")
    bad = [o for o in outcomes if o.result is None or o.summary.verdict == "failed"]
    hours = sum(o.summary.hours for o in outcomes)
    print(f"{total - len(bad)} of {total} periods identified ({hours:.2f} recorded hours) in "
          f"{time.perf_counter() - started:.1f} s; results in {args.output_dir}/")
    if bad:
        print("not identified or failed: " + ", ".join(o.period.key for o in bad), file=sys.stderr)
        return 3
    return 0


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except KeyboardInterrupt:
        print("sysid-fleet: interrupted", file=sys.stderr)
        return 130
    except (SysidError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
