"""``sysid-sim-identify``: the sim_identify graph without ``ros2 launch``, in one process.

The same node classes and parameters as launch/sim_identify.launch.py, on one executor:
mujoco_sim (the truth model, faster than real time unless --realtime) -> trajectory_publisher
(the excitation, with the nominal model's feed-forward) -> identifier. Waits for the
excitation to finish, calls /sysid/identify through a real service client, prints the
result table and the errors against the truth model. Exit status 0 on success, 1 when the
run or the identification failed (the reason is printed), 2 for bad arguments.
"""
from __future__ import annotations

import argparse
import io
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import rclpy
import yaml
from rclpy.executors import SingleThreadedExecutor
from rclpy.experimental import EventsExecutor
from rclpy.logging import LoggingSeverity
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from std_msgs.msg import Bool, Float32
from std_srvs.srv import Trigger

from sysid_core.errors import SysidError
from sysid_core.model import load_robot
from sysid_ros.identifier import Identifier
from sysid_ros.mujoco_sim import MujocoSim
from sysid_ros.trajectory_publisher import TrajectoryPublisher

ROBOTS = Path(__file__).resolve().parents[1] / "config" / "robots"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sysid-sim-identify", description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=ROBOTS / "openarm_class.xml", help="nominal MJCF")
    parser.add_argument("--truth-model", type=Path, help="simulated MJCF (default: the nominal model)")
    parser.add_argument("--duration", type=float, default=20.0, help="excitation length, s (default 20)")
    parser.add_argument("--output-dir", type=Path, default=Path("sysid_output"), help="default ./sysid_output")
    parser.add_argument("--config", type=Path, help="parameter YAML of the nodes (default: config/<model>.yaml)")
    parser.add_argument("--realtime", action="store_true", help="simulate in real time (default: as fast as possible)")
    parser.add_argument("--timeout", type=float, help="wall-clock limit, s (default: 10 x duration + 60)")
    return parser


def _sections(path: Path | None, model: Path) -> dict:
    """Per-node parameter dicts from a ROS 2 parameter file (``node: {ros__parameters: {...}}``)."""
    if path is None:
        guess = ROBOTS.parent / f"{model.stem}.yaml"
        path = guess if guess.is_file() else None
    if path is None:
        return {}
    document = yaml.safe_load(path.read_text()) or {}
    return {node.lstrip("/"): (body or {}).get("ros__parameters", {}) for node, body in document.items()}


def _overrides(sections: dict, node: str, extra: dict) -> list:
    values = {**sections.get("/**", {}), **sections.get(node, {}), **extra}
    return [Parameter(name, value=value) for name, value in values.items()]


def _executor():
    """rclpy's events executor: about twice the message throughput of the default one, which
    is what lets a 1 kHz simulation with three subscribers run faster than real time. It
    enables faulthandler on sys.stderr, which fails where stderr has no file descriptor
    (a notebook, captured output): the default executor still works there, only slower."""
    try:
        return EventsExecutor()
    except io.UnsupportedOperation:
        print("warning: stderr has no file descriptor; using the slower default executor", file=sys.stderr)
        return SingleThreadedExecutor()


def _spin_until(executor, condition, deadline: float) -> bool:
    while not condition():
        if time.monotonic() > deadline:
            return False
        executor.spin_once(timeout_sec=0.05)
    return True


@dataclass(frozen=True)
class Outcome:
    """What a run produced: ``error`` is None on success. Times in s; counts of JointState samples."""

    error: str | None
    published: int = 0
    recorded: int = 0
    simulated_s: float = 0.0
    wall_s: float = 0.0
    summary: dict | None = None
    report: str = ""
    truth_mass: float = float("nan")
    truth_com: tuple = ()


def simulate_and_identify(args) -> Outcome:
    """Run the graph described by the parsed command line ``args``; see the module docstring."""
    truth_path = args.truth_model or args.model
    truth = load_robot(truth_path)
    load_robot(args.model)  # a bad nominal model is an argument error, before anything starts
    sections = _sections(args.config, args.model)
    sim_time = not args.realtime
    deadline = time.monotonic() + (args.timeout or 10.0 * args.duration + 60.0)

    nodes = [
        MujocoSim(parameter_overrides=_overrides(sections, "mujoco_sim", {
            "model": str(truth_path), "realtime": args.realtime})),
        TrajectoryPublisher(parameter_overrides=_overrides(sections, "trajectory_publisher", {
            "model": str(args.model), "duration": args.duration, "use_sim_time": sim_time})),
        Identifier(parameter_overrides=_overrides(sections, "identifier", {
            "model": str(args.model), "output_dir": str(args.output_dir), "use_sim_time": sim_time})),
    ]
    sim, _, identifier = nodes
    # the table is printed below; the node's own copy of it in the log would repeat it
    identifier.get_logger().set_level(LoggingSeverity.WARN)
    client = Node("sysid_sim_identify")
    state = {"done": False, "progress": -1}
    latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
    client.create_subscription(Bool, "/sysid/done", lambda msg: state.update(done=msg.data), latched)

    def on_progress(msg):
        tenth = int(msg.data * 10)
        if tenth > state["progress"]:
            state["progress"] = tenth
            print(f"  excitation: {msg.data:4.0%}", flush=True)
    client.create_subscription(Float32, "/sysid/progress", on_progress, 10)

    executor = _executor()
    for node in nodes + [client]:
        executor.add_node(node)
    try:
        print(f"Simulating {truth_path} {'in real time' if args.realtime else 'as fast as possible'}; "
              f"identifying with {args.model}", flush=True)
        started = time.monotonic()
        if not _spin_until(executor, lambda: state["done"], deadline):
            return Outcome(f"the excitation did not finish in time (progress {max(state['progress'], 0) * 10} %)")
        wall = time.monotonic() - started
        # stop the simulator, then let every sample in flight arrive: none may be lost
        executor.remove_node(sim)
        _spin_until(executor, lambda: identifier.received >= sim.published, time.monotonic() + 5.0)
        counts = dict(published=sim.published, recorded=identifier.stored,
                      simulated_s=sim.published / sim.get_parameter("rate_hz").value, wall_s=wall)

        trigger = client.create_client(Trigger, "/sysid/identify")
        if not trigger.wait_for_service(timeout_sec=10.0):
            return Outcome("/sysid/identify is not available", **counts)
        future = trigger.call_async(Trigger.Request())
        if not _spin_until(executor, future.done, deadline):
            return Outcome("/sysid/identify did not answer in time", **counts)
        response = future.result()
        if not response.success:
            return Outcome(response.message, **counts)
        summary = json.loads(response.message)
        true_body = truth.nominal_parameters[truth.body_names.index(summary["terminal_body"])]
        return Outcome(None, summary=summary, report=identifier.last_report, truth_mass=float(true_body[0]),
                       truth_com=tuple(true_body[1:4] / true_body[0]), **counts)
    finally:
        executor.shutdown()
        for node in nodes + [client]:
            node.destroy_node()


def _print(outcome: Outcome, args) -> None:
    if outcome.published:
        print(f"Excitation done: {outcome.simulated_s:.1f} s simulated in {outcome.wall_s:.1f} s wall "
              f"(wall/simulated {outcome.wall_s / max(outcome.simulated_s, 1e-9):.2f}); "
              f"{outcome.published} samples published, {outcome.recorded} recorded")
    if outcome.error is not None:
        print(f"error: {outcome.error}", file=sys.stderr)
        return
    mass = outcome.summary["mass"]
    com_error = np.linalg.norm(np.array(outcome.summary["center_of_mass"]) - outcome.truth_com)
    print(outcome.report)
    print(f"\nTruth ({(args.truth_model or args.model).name}): mass {outcome.truth_mass:.4f} kg, identified "
          f"{mass:.4f} kg ({100 * (mass - outcome.truth_mass) / outcome.truth_mass:+.2f} %); "
          f"centre of mass error {1000 * com_error:.2f} mm")
    print(f"Results in {args.output_dir}/")


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    rclpy.init()
    try:
        outcome = simulate_and_identify(args)
        _print(outcome, args)
        return 0 if outcome.error is None else 1
    except (SysidError, OSError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    finally:
        rclpy.try_shutdown()


if __name__ == "__main__":
    sys.exit(main())
