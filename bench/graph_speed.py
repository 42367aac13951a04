"""Graph speed: the simulated ROS graph against a plain MuJoCo loop doing the same work, in the same run.

The plain loop is the floor for a Python simulation: per control period the computed-torque
law (mass matrix at q, a PD in acceleration, the feed-forward), measurement noise and
``mj_step``, nothing else. Each graph figure is its wall time per simulated second divided by
the plain loop's: a ratio of the machine's own figures, comparable across machines.

1. ``sysid-sim-identify`` as fast as possible (one process, rclpy's events executor): the
   trajectory_publisher sends the run ahead as a preview, mujoco_sim publishes state blocks.
2. The same three nodes in three processes, as ``ros2 launch sysid_ros sim_identify.launch.py
   realtime:=false`` starts them (the launch file's parameters, ``ros2 run``-style).
3. The three processes in real time at 1 kHz: the share of late control periods (simulated more
   than one wall-timer call after they were due, or given up), as mujoco_sim counts them.

Each run reports the samples published and recorded (every one must be) and the payload's mass
error against the truth model. Run: ``python bench/graph_speed.py [--duration 20] [--runs 3]``
(``make bench`` runs every bench). The figures depend on the machine and on its load: run it on
an otherwise idle machine, or with ``--load 2`` beside two busy loops.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# one DDS domain of its own, discovery on this machine only: the bench must not hear other runs
os.environ.setdefault("ROS_DOMAIN_ID", str(1 + os.getpid() % 100))
os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from sysid_core.dynamics.model import load_robot  # noqa: E402
from sysid_core.excitation.multisine import excitation_with_approach_and_rest, multisine  # noqa: E402
from sysid_core.simulation import ComputedTorque, MeasurementNoise, measure, plant_model, simulation_timing, step  # noqa: E402

ROBOTS = ROOT / "config" / "robots"
NOMINAL, TRUTH = ROBOTS / "openarm_class.xml", ROBOTS / "openarm_class_payload.xml"
CONFIG = ROOT / "config" / "openarm_class.yaml"
RATE = 1000.0
LOG_STAMP = re.compile(r"\[(?:INFO|WARN)\] \[(\d+\.\d+)\] \[mujoco_sim\]: (.*)")


def plain_loop(simulated_s: float) -> float:
    """Wall seconds per simulated second of the plain loop on the truth model."""
    truth, nominal = load_robot(TRUTH), load_robot(NOMINAL)
    plan = multisine(nominal.joint_range, simulated_s, RATE, seed=0, max_velocity=1.0)
    start = np.clip(np.zeros(nominal.n_joints), *nominal.joint_range.T)
    profile, _ = excitation_with_approach_and_rest(start, plan, RATE, 1.0, nominal.joint_range)
    feedforward = nominal.inverse_dynamics(profile.q, profile.dq, profile.ddq)
    timing = simulation_timing(truth.model, RATE)
    model = plant_model(truth.model, timing)
    import mujoco
    data = mujoco.MjData(model)
    data.qpos[:] = profile.q[0]
    control = ComputedTorque(truth.model, RATE).feedback_torque
    noise, rng = MeasurementNoise(), np.random.default_rng(0)
    samples = profile.time.shape[0]
    began = time.perf_counter()
    for i in range(samples):
        q, dq = data.qpos.copy(), data.qvel.copy()
        tau = control(q, dq, profile.q[i], profile.dq[i], feedforward[i])
        measure(q, noise.q_std, 0.0, rng), measure(dq, noise.dq_std, 0.0, rng), measure(tau, noise.tau_std, 0.0, rng)
        step(model, data, tau, timing.substeps)
    return (time.perf_counter() - began) / (samples / RATE)


def in_process(duration: float) -> dict:
    from sysid_ros import sim_identify as graph
    with tempfile.TemporaryDirectory() as out:
        argv = ["--model", str(NOMINAL), "--truth-model", str(TRUTH), "--duration", str(duration), "--output-dir", out]
        with contextlib.redirect_stdout(io.StringIO()):
            outcome = graph.run(graph.build_parser().parse_args(argv))
    if outcome.error:
        return {"error": outcome.error}
    return {"wall_per_s": outcome.wall_s / outcome.simulated_s, "published": outcome.published,
            "recorded": outcome.recorded, "mass_error": outcome.summary["mass"] / outcome.truth_mass - 1}


def three_processes(duration: float, realtime: bool) -> dict:
    """The launch file's graph in three processes; figures from the simulator's and identifier's logs."""
    from sysid_ros.sim_graph import graph_parameters
    with tempfile.TemporaryDirectory() as out:
        parameters = graph_parameters(NOMINAL, TRUTH, out, realtime)
        parameters["trajectory_publisher"]["duration"] = duration
        parameters["identifier"].update(identify_on_done=True, exit_when_done=True, plots=False)
        processes = {}
        for node, values in parameters.items():
            args = [a for name, value in values.items() for a in ("-p", f"{name}:={_ros_value(value)}")]
            processes[node] = subprocess.Popen(
                [sys.executable, "-m", f"sysid_ros.{node}", "--ros-args", "--params-file", str(CONFIG), *args],
                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            identifier_log, _ = processes["identifier"].communicate(timeout=30 * duration + 120)
        finally:
            for process in processes.values():
                if process.poll() is None:
                    process.send_signal(2)
            logs = {node: process.communicate(timeout=30)[0] if node != "identifier" else identifier_log
                    for node, process in processes.items()}
    sim_log = logs["mujoco_sim"]
    stamps = {}
    for stamp, text in LOG_STAMP.findall(sim_log):
        if "simulation started" in text:
            stamps["start"] = float(stamp)
        elif "simulation paused" in text and "pause" not in stamps:
            stamps["pause"] = float(stamp)
            simulated = float(re.search(r"paused at ([\d.]+) s", text).group(1))
            late = re.search(r"(\d+) of (\d+) periods late", text)
    found = re.search(r"identify_on_done: (\{.*\})", identifier_log)
    if not found or "pause" not in stamps:
        return {"error": "the graph did not finish: " + (identifier_log + sim_log)[-2000:]}
    summary = json.loads(found.group(1))
    published = int(re.search(r"after publishing (\d+) joint states", sim_log).group(1))
    result = {"wall_per_s": (stamps["pause"] - stamps["start"]) / simulated, "published": published,
              "recorded": summary["recorded_samples"], "mass_error": summary["truth"]["mass_error_percent"] / 100}
    if late:
        result["late"] = (int(late.group(1)), int(late.group(2)))
    return result


def _ros_value(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=20.0, help="excitation, s (default 20)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each graph (default 3)")
    parser.add_argument("--load", type=int, default=0, help="busy loops beside the bench (default 0)")
    args = parser.parse_args()
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.load)]
    try:
        plain = min(plain_loop(args.duration + 4.0) for _ in range(3))
        print(f"plain loop: {plain * 1e3:.1f} ms wall per simulated second ({1 / plain:.0f}x real time); "
              f"{os.cpu_count()} CPUs, {args.load} busy loops beside")
        print(f"{'graph':<34} {'wall/sim s':>10} {'x plain':>8} {'x real time':>11} {'published':>9} "
              f"{'recorded':>9} {'mass err':>8} {'late periods':>13}")
        for name, run in (("sysid-sim-identify", lambda: in_process(args.duration)),
                          ("3 processes, realtime:=false", lambda: three_processes(args.duration, False)),
                          ("3 processes, realtime:=true", lambda: three_processes(args.duration, True))):
            for _ in range(args.runs):
                r = run()
                if "error" in r:
                    print(f"{name:<34} failed: {r['error']}")
                    continue
                late = f"{r['late'][0]} ({100 * r['late'][0] / r['late'][1]:.2f} %)" if "late" in r else "-"
                print(f"{name:<34} {r['wall_per_s']:>10.3f} {r['wall_per_s'] / plain:>8.2f} "
                      f"{1 / r['wall_per_s']:>11.1f} {r['published']:>9} {r['recorded']:>9} "
                      f"{100 * r['mass_error']:>+7.2f}% {late:>13}", flush=True)
    finally:
        for process in busy:
            process.kill()


if __name__ == "__main__":
    main()
