"""Live payload tracking (``sysid_core.online.payload_tracking``) in a simulated pick-and-place
cell: what a call costs, how fast and how well a new payload is reported, and how often a
change is reported that did not happen.

The scenario is test/test_payload_tracking.py's (its ``Arm``): the model file is what the user
has, the plant is that arm with 30 % more armature, 40 % more friction loss, 20 % more damping
and a Stribeck excess of 30 % of the friction loss below 0.1 rad/s; MIT-mode tracking (PD at
8 Hz around the file's inverse dynamics, which knows no payload), 500 Hz, the default
measurement noise; the tracker runs on the LiveModel ``identify`` made from 30 s of multisine
on that plant. The cell (``simulation.pick_and_place``) is drawn per seed from the joint ranges.

Printed:

1. ``cost``: microseconds per sample and milliseconds per call of ``payload_step`` for batches
   of 1 to 64 samples (Panda class, 7 joints), over the first seconds of a cell.
2. ``payloads``: per arm, payload mass and seed, a part (centre drawn 0-2 cm aside and
   ``--reach`` beyond the flange, box of 3-10 cm) taken at the second pick: motion seconds (the
   pauses left out) from the change to the detection and to the report; the added mass's error
   (% of the part) and the added centre of mass's error (mm) at the report (what the tracker
   can see: the report less the identified terminal body); the reported body's centre of mass
   against the identified link plus the part (mm); against the file's link plus the part, the
   mass error in % of the part (the identification's split of the terminal mass, which no
   online estimate can see); the errors over the reported standard deviations (mass; centre
   of mass, the largest axis); the worst joint's tracking error over its refusal threshold.
3. ``false changes``: per arm and seed, ``--minutes`` of the cell without a change: detections
   (restarts of the estimator), reports, the largest test statistic over its threshold, the
   largest change size over min_change, and the largest of the smaller of the two (a detection
   needs both above 1).

Asserts nothing. Run:
``OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/payload_tracking.py [--seeds 3] [--minutes 10]
[--arms panda_class openarm_class]``
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "test"))

from sysid_core.errors import TrackingError  # noqa: E402
from sysid_core.online.payload_tracking import PayloadTrackingConfig, payload_start, payload_step  # noqa: E402
from sysid_core.simulation.pick_and_place import cell_poses  # noqa: E402
from test_payload_tracking import RATE, Arm, attached, track  # noqa: E402

# kg: the payloads tried per arm (within its rating: the OpenArm class is rated for 0.5 kg)
MASSES = {"panda_class": (0.5, 1.0, 2.0), "openarm_class": (0.25, 0.5)}
# m: how far beyond the flange the part's centre is drawn, per arm (the OpenArm class's wrist,
# PD-tracked at 8 Hz, leaves its plan by more than the refusal threshold beyond ~5 cm at 0.5 kg)
REACH = {"panda_class": (0.03, 0.10), "openarm_class": (0.02, 0.05)}
BATCHES = (1, 2, 4, 8, 16, 32, 64)


def cost(arm: Arm, config: PayloadTrackingConfig) -> None:
    print("\n== cost (Panda class, 7 joints, 500 Hz) ==")
    print(f"{'batch':>6} {'us/sample':>10} {'ms/call':>8} {'calls':>6}")
    _, run = arm.cell(12.0, seed=0)
    rec = run.recording
    for batch in BATCHES:
        samples = min(len(rec.time) - 1, 1000 * batch)
        state = payload_start(arm.model, config, rec.time[0], rec.q[0], rec.dq[0], rec.tau[0])
        calls = 0
        begin = time.perf_counter()
        for start in range(1, samples + 1, batch):
            stop = min(start + batch, samples + 1)
            state, _ = payload_step(arm.model, config, state, rec.time[start:stop], rec.q[start:stop],
                                    rec.dq[start:stop], rec.tau[start:stop])
            calls += 1
        elapsed = time.perf_counter() - begin
        print(f"{batch:>6} {1e6 * elapsed / samples:>10.1f} {1e3 * elapsed / calls:>8.3f} {calls:>6}")


def _com_z(estimate, std_theta, truth_com, identified) -> float:
    """The added centre of mass's largest per-axis error over its standard deviation (first order
    in the estimate's standard deviations, correlations left out)."""
    added = estimate - identified
    com = added[1:4] / added[0]
    std = np.sqrt(std_theta[1:4] ** 2 + (com * std_theta[0]) ** 2) / abs(added[0])
    return float(np.max(np.abs(com - truth_com) / std))


def payloads(arm: Arm, name: str, config: PayloadTrackingConfig, seeds: int) -> None:
    print(f"\n== payloads: {name} ==")
    print(f"{'kg':>5} {'seed':>4} {'detect s':>8} {'report s':>8} {'(sim s)':>7} {'dm %':>6} {'dc mm':>6} "
          f"{'body dc':>7} {'file dm %':>9} {'z m':>5} {'z c':>5} {'track':>5}")
    link = arm.robot.nominal_parameters[arm.robot.terminal_index]
    for mass in MASSES[name]:
        for seed in range(seeds):
            gen = np.random.default_rng(1000 * seed + int(100 * mass))
            com = np.array([*gen.uniform(-0.02, 0.02, 2), gen.uniform(*REACH[name])])
            part = arm.part(mass, com, gen.uniform(0.03, 0.10, 3))
            arm.poses = cell_poses(arm.robot.joint_range, seed=seed)
            try:
                plan, run = arm.cell(40.0, attached(part), seed=seed)
            except TrackingError as exc:
                print(f"{mass:>5} {seed:>4} the plant did not follow the plan: {exc}")
                continue
            change = float(run.change_times[0])
            state, steps = track(arm.model, config, run.recording)
            detected = [s for _, s in steps if s.detected]
            reports = [s for t, s in steps if s.changed]
            tracking = float(np.max(run.quality.max_error / run.quality.tolerance))
            first_detection = next((t for t, s in steps if s.detected), None)
            detect = "-" if first_detection is None else f"{plan.motion_time(change, first_detection):.2f}"
            if not reports:
                print(f"{mass:>5} {seed:>4} {detect:>8} {'none':>8}   ({len(detected)} detections) "
                      f"track {tracking:.2f}")
                continue
            s = reports[0]
            added = s.payload - arm.identified
            truth_com = part[1:4] / part[0]
            whole = arm.identified + part
            body_error = np.linalg.norm(s.payload[1:4] / s.payload[0] - whole[1:4] / whole[0])
            print(f"{mass:>5} {seed:>4} {detect:>8} {plan.motion_time(change, s.report_time):>8.2f} "
                  f"{s.report_time - change:>7.2f} {100 * (added[0] - mass) / mass:>+6.2f} "
                  f"{1e3 * np.linalg.norm(added[1:4] / added[0] - truth_com):>6.2f} {1e3 * body_error:>7.2f} "
                  f"{100 * (s.payload[0] - link[0] - mass) / mass:>+9.2f} "
                  f"{(added[0] - mass) / s.payload_std[0]:>+5.1f} "
                  f"{_com_z(s.payload, s.payload_std, truth_com, arm.identified):>5.1f} {tracking:>5.2f}")


def false_changes(arm: Arm, name: str, config: PayloadTrackingConfig, seeds: int, minutes: float) -> None:
    print(f"\n== false changes: {name}, {minutes:g} minutes per seed ==")
    print(f"{'seed':>4} {'detections':>10} {'reports':>7} {'max T/thr':>9} {'max size/min':>12} {'max both':>8} "
          f"{'wall s':>6}")
    for seed in range(seeds):
        arm.poses = cell_poses(arm.robot.joint_range, seed=seed)
        begin = time.perf_counter()
        _, run = arm.cell(60.0 * minutes, seed=100 + seed)
        state, steps = track(arm.model, config, run.recording)
        ratio = np.array([s.statistic for _, s in steps])
        size = np.array([s.change_size for _, s in steps]) / config.min_change
        print(f"{seed:>4} {state.detections:>10} {state.reports:>7} {ratio.max():>9.2f} {size.max():>12.2f} "
              f"{np.minimum(ratio, size).max():>8.2f} {time.perf_counter() - begin:>6.1f}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--arms", nargs="+", default=["panda_class", "openarm_class"], choices=sorted(MASSES))
    args = parser.parse_args(argv)
    config = PayloadTrackingConfig(rate_hz=RATE)
    print(f"defaults: {config}; block {config.block_samples} samples, window {config.window_blocks} blocks")
    for name in args.arms:
        begin = time.perf_counter()
        arm = Arm(name + ".xml")
        print(f"\n{name}: identified in {time.perf_counter() - begin:.1f} s (simulation included); validation RMSE "
              f"per joint {np.round(arm.model.sigma, 4).tolist()} N m")
        if name == "panda_class":
            cost(arm, config)
        payloads(arm, name, config, args.seeds)
        false_changes(arm, name, config, args.seeds, args.minutes)


if __name__ == "__main__":
    main()
