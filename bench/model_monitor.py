"""The live model monitor: its cost per sample at a driver's batch sizes, and the statistics its
defaults come from.

The arm is test/test_model_monitor.py's: the OpenArm-class 7-joint arm in MuJoCo at 1 kHz with
its armature 30 % above its model file's, a Stribeck friction excess the file does not have and
the project's default measurement noise, tracked by PD + feed-forward; the model is identified
from a 10 s multisine of it (validated on 5 s), as the tests do.

Speed (default): a new 1 kHz recording of that plant fed to ``monitor_step`` in batches of 1, 2,
4, 8, 16 and 64 samples, as a node feeds what arrived since its last call. Per batch size: the
wall time per call (median over the calls after a second of warm-up, and the best) and per
sample (median and 90th percentile), and whether the median per sample meets ``--budget``
(default 0.2 ms: a fifth of a 1 kHz period, the rest left to the node and the middleware).
Then where a call's time goes at the smallest and the largest batch: the one regressor call
(8N rows: the prediction, the observer's bias and the momentum's 6N rows), the joints' own
terms (2N rows) and the rest (filters, observer, contact, drift, the noise estimate).

``--defaults``: what the defaults of monitor.MonitorConfig rest on, for K = 20 (the default)
and 50 1/s, over 30 s multisines of seeds 5-9 (up to 1.5 rad/s) with the identified model:

* the observer's estimate over its spread s_j (the band / contact_k) once the band is known,
  per joint the largest |external_j| / s_j, and over all joints the largest held for 1 and for
  3 samples in a row; how much the momentum's noise widens s_j over sigma_j (s_j / sigma_j,
  at the run's end, joints 1-4 and 5-7);
* the running RMSE over sigma_j (10 s window, the default; 2 s too) on 40 s of other motion
  with the right model and with 0.1, 0.2 and 0.5 kg under the flange that the model does not
  know (min and max per joint after two windows);
* the delay from the first MuJoCo contact to the contact flag, for the tests' sphere at a
  sweep of 2 s (1.1 rad/s) and 8 s (0.28 rad/s);
* the tests' wrench (8.8 N on the wrist's link for 1 s): per joint the peak of J^T F and the
  largest error of the estimate against it through the observer's filter, over the peak;
* payload runs of 15 s: when ``holds`` first turns False.

Prints tables; asserts nothing. Wall times are figures of the machine and its load: run the
speed part on an idle machine.
Run: ``.venv/bin/python bench/model_monitor.py [--batches 1 2 4 8 16 64] [--samples 3000]
[--budget 0.2] [--defaults]``.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import mujoco
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "test"))  # the tests' plant, runs and sweep

from sysid_core.identification.identify import IdentificationConfig, identify  # noqa: E402
from sysid_core.online.live_model import live_model  # noqa: E402
from sysid_core.online.monitor import MonitorConfig, monitor_start, monitor_step  # noqa: E402
from sysid_core.excitation.multisine import multisine  # noqa: E402
from test_model_monitor import RATE, ROBOT, ROBOTS, _monitor, _plant, _run, _sweep, _tracked  # noqa: E402

SEEDS = (5, 6, 7, 8, 9)
PAYLOADS = (0.1, 0.2, 0.5)
RMSE_RUN_S = 40.0


def _identified():
    plant = _plant()
    result = identify(ROBOT, _tracked(plant, 1, 10.0), IdentificationConfig(), validation=_tracked(plant, 2, 5.0))
    return plant, live_model(ROBOT, result)


def _calls(model, config, recording, batch: int, samples: int) -> np.ndarray:
    """Wall times (s) of the monitor_step calls over ``samples`` samples in batches of ``batch``,
    after one second of warm-up (the noise estimate's first blocks, caches)."""
    warm = int(RATE)
    state = monitor_start(model, config, recording.time[0], recording.q[0], recording.dq[0], recording.tau[0])
    times = []
    end = min(len(recording.time), warm + samples)
    for start in range(1, end, batch):
        part = slice(start, min(start + batch, end))
        t0 = time.perf_counter()
        state, _ = monitor_step(model, config, state, recording.time[part], recording.q[part], recording.dq[part],
                                recording.tau[part])
        if start >= warm and part.stop - part.start == batch:
            times.append(time.perf_counter() - t0)
    return np.array(times)


def _parts(model, recording, batch: int, repeats: int = 200) -> tuple:
    """Median wall times (s) of the regressor call (8 batch rows, with its product by the
    parameters) and of the joints' own terms (2 batch rows) the monitor makes per call."""
    q, dq = recording.q[1000:1000 + batch], recording.dq[1000:1000 + batch]
    rows8 = (np.vstack([q] * 8), np.vstack([dq] * 8), np.vstack([dq] * 8))
    rows2 = (np.vstack([q, q]), np.vstack([dq, dq]), np.vstack([dq, dq]))
    theta = model.parameters.reshape(-1)
    regressor, joint = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        model.robot.regressor(*rows8) @ theta
        t1 = time.perf_counter()
        model.joint_torque(*rows2)
        joint.append(time.perf_counter() - t1)
        regressor.append(t1 - t0)
    return float(np.median(regressor)), float(np.median(joint))


def speed(args) -> None:
    plant, model = _identified()
    recording = _tracked(plant, 3, 1.0 + args.samples / RATE + 0.1)
    config = MonitorConfig(RATE)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"model: config/robots/openarm_class.xml ({ROBOT.n_joints} joints), identified; stream at {RATE:g} Hz; "
          f"numpy {np.__version__}, python {sys.version.split()[0]}, load average {load:.2f}")
    print(f"budget: {args.budget:g} ms per sample\n")
    print(f"{'batch':>6s} {'calls':>6s} {'median ms/call':>15s} {'best ms/call':>13s} {'median ms/sample':>17s} "
          f"{'p90 ms/sample':>14s} {'meets':>6s}")
    met = []
    for batch in args.batches:
        times = _calls(model, config, recording, batch, args.samples)
        per_sample = np.median(times) / batch * 1e3
        met.append((batch, per_sample <= args.budget))
        print(f"{batch:6d} {len(times):6d} {np.median(times) * 1e3:15.3f} {times.min() * 1e3:13.3f} "
              f"{per_sample:17.4f} {np.quantile(times, 0.9) / batch * 1e3:14.4f} "
              f"{'yes' if met[-1][1] else 'no':>6s}", flush=True)
    meeting = [b for b, ok in met if ok and all(o for c, o in met if c >= b)]
    print(f"\nthe median meets {args.budget:g} ms/sample from batch size {meeting[0]} on" if meeting else
          f"\nno batch size meets {args.budget:g} ms/sample")
    print("\nwhere a call's time goes (medians):")
    for batch in (min(args.batches), max(args.batches)):
        times = _calls(model, config, recording, batch, min(args.samples, 1000))
        regressor, joint = _parts(model, recording, batch)
        total = float(np.median(times))
        print(f"  batch {batch:3d}: call {total * 1e3:.3f} ms = regressor {regressor * 1e3:.3f} ms + joint terms "
              f"{joint * 1e3:.3f} ms + the rest {(total - regressor - joint) * 1e3:.3f} ms")


def _fmt(values) -> str:
    return " ".join(f"{v:5.2f}" for v in values)


def defaults() -> None:
    plant, model = _identified()
    sigma = model.sigma
    print(f"validation RMSE sigma_j (N m): {' '.join(f'{v:.4f}' for v in sigma)}\n")
    runs = {seed: _tracked(plant, seed, 30.0) for seed in SEEDS}
    for gain in (20.0, 50.0):
        config = MonitorConfig(RATE, observer_gain=gain)
        print(f"K = {gain:g} 1/s, contact_k {config.contact_k:g}: |external_j| / s_j without contact")
        print(f"  {'seed':>4s}  {'max per joint':<41s} {'1 sample':>8s} {'3 in a row':>10s}  "
              f"{'s/sigma joints 1-4':<23s} {'contact':>7s}")
        for seed, rec in runs.items():
            out, _, state = _monitor(model, config, rec.time, rec.q, rec.dq, rec.tau)
            known = np.isfinite(out["band"][:, 0])
            ratio = np.abs(out["external"][known]) / (out["band"][known] / config.contact_k)
            worst = ratio.max(axis=1)
            held = np.minimum(np.minimum(worst[2:], worst[1:-1]), worst[:-2])
            widened = state.band / config.contact_k / sigma
            print(f"  {seed:4d}  {_fmt(ratio.max(axis=0)):<41s} {worst.max():8.2f} {held.max():10.2f}  "
                  f"{_fmt(widened[:4]):<23s} {int(out['contact'].sum()):7d}", flush=True)
    print(f"\nrunning RMSE / sigma_j after two windows of {RMSE_RUN_S:g} s runs (min .. max per joint)")
    cases = [("right model", plant, SEEDS[0])] + [(f"+{kg:g} kg", _plant(ROBOTS / "openarm_class_payload.xml", kg), 12)
                                                  for kg in PAYLOADS]
    records = {name: _tracked(arm, seed, RMSE_RUN_S) for name, arm, seed in cases}
    for window in (10.0, 2.0):
        config = MonitorConfig(RATE, drift_window_s=window)
        for name, arm, seed in cases:
            rec = records[name]
            rmse, state, stride = [], monitor_start(model, config, rec.time[0], rec.q[0], rec.dq[0], rec.tau[0]), 20
            for start in range(1, len(rec.time), stride):
                part = slice(start, start + stride)
                state, _ = monitor_step(model, config, state, rec.time[part], rec.q[part], rec.dq[part], rec.tau[part])
                rmse.append(state.rmse / sigma)
            rmse = np.array(rmse)[int(2 * window * RATE / stride):]
            print(f"  window {window:g} s, {name:<12s} min {_fmt(rmse.min(axis=0))}   max {_fmt(rmse.max(axis=0))}",
                  flush=True)
    print("\ncollision: first MuJoCo contact to the contact flag (default settings)")
    for duration in (2.0, 8.0):
        q_des, dq_des, ddq_des, pose = _sweep(duration)
        data = mujoco.MjData(ROBOT.model)
        data.qpos[:] = pose
        data.qpos[0] = 0.7
        mujoco.mj_kinematics(ROBOT.model, data)
        centre = data.site_xpos[mujoco.mj_name2id(ROBOT.model, mujoco.mjtObj.mjOBJ_SITE, "flange_site")].copy()
        time_, q, dq, tau, _, first = _run(_plant(obstacle=(centre, 0.04)), q_des, dq_des, ddq_des, 31, contacts=True,
                                           after_contact=0.1)
        out, _, _ = _monitor(model, MonitorConfig(RATE), time_, q, dq, tau)
        flagged = time_[1:][out["contact"]]
        speed_ = dq[int(round(first * RATE)), 0]
        print(f"  sweep {duration:g} s: contact at {first:.3f} s (joint 1 at {speed_:.2f} rad/s), flagged at "
              f"{flagged[0]:.3f} s: {1e3 * (flagged[0] - first):.1f} ms")
    config = MonitorConfig(RATE)
    plan = multisine(ROBOT.joint_range, 4.0, RATE, seed=21, max_velocity=1.0)
    force = np.array([5.0, -4.0, 6.0, 0.0, 0.0, 0.0])

    def wrench(t):
        s = t - 1.5
        return force * np.sin(np.pi * s) ** 2 if 0.0 <= s <= 1.0 else 0.0 * force

    body = mujoco.mj_name2id(plant, mujoco.mjtObj.mjOBJ_BODY, "link7")
    time_, q, dq, tau, truth, _ = _run(plant, plan.q, plan.dq, plan.ddq, 22, wrench, body)
    out, _, _ = _monitor(model, config, time_, q, dq, tau)
    decay = np.exp(-config.observer_gain / RATE)
    lagged = np.zeros_like(truth)
    for k in range(1, len(truth)):
        lagged[k] = decay * lagged[k - 1] + (1.0 - decay) * truth[k - 1]
    window = (time_[1:] >= 1.5) & (time_[1:] <= 2.5 + 3.0 / config.observer_gain)
    peak = np.abs(truth).max(axis=0)
    error = np.abs(out["external"] - lagged[1:])[window].max(axis=0)
    print(f"\nwrench {np.linalg.norm(force[:3]):.2f} N on link7: peak J^T F (N m) {_fmt(peak)}")
    print(f"  max error (N m)        {_fmt(error)}\n  error / peak           {_fmt(error / peak)}")
    print("\npayload runs (15 s, seed 12): holds first False at")
    for kg in (0.1, 0.2, 0.5):
        rec = _tracked(_plant(ROBOTS / "openarm_class_payload.xml", kg), 12, 15.0)
        _, ends, _ = _monitor(model, config, rec.time, rec.q, rec.dq, rec.tau)
        broken = [t - rec.time[0] for t, holds, _ in ends if not holds]
        print(f"  +{kg:g} kg: {broken[0]:.3f} s" if broken else f"  +{kg:g} kg: never")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8, 16, 64], help="batch sizes, samples")
    parser.add_argument("--samples", type=int, default=3000, help="timed samples per batch size (default 3000)")
    parser.add_argument("--budget", type=float, default=0.2, help="ms per sample to keep up with (default 0.2)")
    parser.add_argument("--defaults", action="store_true", help="the statistics the defaults rest on, not speed")
    args = parser.parse_args()
    defaults() if args.defaults else speed(args)


if __name__ == "__main__":
    main()
