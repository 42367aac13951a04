"""``sysid-sim-identify``: the sim_identify graph without ``ros2 launch``, in one process.

The same node classes and parameters as launch/sim_identify.launch.py, on one executor:
mujoco_sim (the truth model, faster than real time unless --realtime) -> trajectory_publisher
(the excitation, with the nominal model's feed-forward) -> identifier. Waits for the
excitation to finish, calls /sysid/identify through a real service client, prints the
result table and the errors against the truth model. Exit status 0 on success, 1 when the
run or the identification failed (the reason is printed), 2 for bad arguments.

With ``--damiao`` the arm is a virtual Damiao arm instead of mujoco_sim: the truth model
behind emulated DM-J motors (sysid_core.damiao.emulator) on python-can's in-process
``virtual`` bus, driven by the real damiao_bridge node, so every command and measurement
passes through the MIT-mode frames and their 16/12-bit quantisation. It runs in real time
(the bridge's control loop is a wall-clock one, as on hardware); the parameter file
defaults to config/<model>_damiao.yaml, whose damiao_bridge section also lays out the motors.
"""
from __future__ import annotations

import argparse
import gc
import io
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

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

from sysid_core.damiao.emulator import VirtualDamiaoArm, emulated_motors
from sysid_core.dynamics.model import load_robot
from sysid_core.errors import SysidError
from sysid_ros.damiao_bridge import DamiaoBridge
from sysid_ros.identifier import Identifier
from sysid_ros.mujoco_sim import MujocoSim
from sysid_ros.sim_graph import graph_parameters
from sysid_ros.trajectory_publisher import TrajectoryPublisher



def _config_dir() -> Path:
    """The package's config/: beside the package in a source tree (pip install -e, the
    repository), else the installed share directory (a colcon workspace: share/sysid_ros/config)."""
    beside = Path(__file__).resolve().parents[1] / "config"
    if beside.is_dir():
        return beside
    try:
        from ament_index_python.packages import PackageNotFoundError, get_package_share_directory
        return Path(get_package_share_directory("sysid_ros")) / "config"
    except (ImportError, PackageNotFoundError, ValueError):
        return beside  # named in the error when a file is missing


ROBOTS = _config_dir() / "robots"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sysid-sim-identify", description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=ROBOTS / "openarm_class.xml", help="nominal MJCF")
    parser.add_argument("--truth-model", type=Path, help="simulated MJCF (default: the nominal model)")
    parser.add_argument("--duration", type=float, default=20.0, help="excitation length, s (default 20)")
    parser.add_argument("--output-dir", type=Path, default=Path("sysid_output"), help="default ./sysid_output")
    parser.add_argument("--config", type=Path, help="parameter YAML of the nodes (default: config/<model>.yaml)")
    parser.add_argument("--realtime", action="store_true", help="simulate in real time (default: as fast as possible)")
    parser.add_argument("--timeout", type=float, help="wall-clock limit, s (default: 10 x duration + 60)")
    parser.add_argument("--damiao", action="store_true",
                        help="drive a virtual Damiao arm through damiao_bridge over a virtual CAN bus (real time)")
    return parser


def _sections(path: Path | None, model: Path, suffix: str = "") -> dict:
    """Per-node parameter dicts from a ROS 2 parameter file (``node: {ros__parameters: {...}}``)."""
    if path is None:
        guess = ROBOTS.parent / f"{model.stem}{suffix}.yaml"
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


def _spin_until(executor, condition, deadline: float, pause: float = 0.0) -> bool:
    """Spin until ``condition()`` or ``deadline`` (monotonic s); False on the deadline. ``pause`` s
    between spins: while a service call is pending this rclpy's spin_once returns at once (it runs
    the call's task again), and a loop without a pause holds the interpreter lock the answering
    node's worker thread needs."""
    while not condition():
        if time.monotonic() > deadline:
            return False
        executor.spin_once(timeout_sec=0.05)
        if pause:
            time.sleep(pause)
    return True


@dataclass(frozen=True)
class Outcome:
    """What a run produced: ``error`` is None on success. Times in s; counts of JointState samples."""

    error: str | None
    published: int = 0
    received: int = 0
    recorded: int = 0
    simulated_s: float = 0.0
    wall_s: float = 0.0
    summary: dict | None = None
    report: str = ""
    truth_mass: float = float("nan")
    truth_com: tuple = ()


class _MujocoSource:
    """mujoco_sim as the arm; ``published`` samples, ``simulated_s`` of physics."""

    def __init__(self, args, sections, parameters: dict):
        self.node = MujocoSim(parameter_overrides=_overrides(sections, "mujoco_sim", parameters["mujoco_sim"]))
        self.simulated_s = 0.0
        self._stopped = False

    published = property(lambda self: self.node.published)

    def stop(self):
        """Destroy the node; idempotent."""
        if not self._stopped:
            self._stopped = True
            self.simulated_s = self.node.sim_time
            self.node.destroy_node()


class _DamiaoSource:
    """The virtual Damiao arm (emulated motors, MuJoCo) behind a DamiaoBridge on a virtual bus."""

    def __init__(self, args, sections, parameters: dict, subscribers: int = 2):
        truth_path = parameters["mujoco_sim"]["model"]
        layout = sections.get("damiao_bridge")
        if not layout:
            raise ValueError("--damiao needs a parameter file with a damiao_bridge section laying out the "
                             "motors (e.g. config/openarm_class_damiao.yaml)")
        motors = emulated_motors(layout)
        # The emulated motors answer from a thread of this process. Python hands the GIL to a
        # waiting thread only every switch interval (5 ms by default), longer than the bridge's
        # 3-cycle (6 ms) feedback deadline: a busy executor would make healthy motors look lost.
        sys.setswitchinterval(0.0005)
        # a channel of its own: python-can's virtual buses of one process meet by channel name
        channel = f"sysid_damiao_{os.getpid()}_{time.monotonic_ns()}"
        self.arm = VirtualDamiaoArm(truth_path, motors, channel=channel)
        self.arm.start()
        try:
            self.node = DamiaoBridge(parameter_overrides=_overrides(sections, "damiao_bridge", {
                "can_interface": "virtual", "can_channel": channel}))
        except BaseException:
            self.arm.stop()
            raise
        # The bridge publishes from its first cycle; what it sends before DDS has matched the
        # identifier's subscription never arrives. Wait for the match (discovery runs in DDS
        # threads, not the executor) so that the sample counts can be compared.
        deadline = time.monotonic() + 5.0
        while self.node.count_subscribers("joint_states") < subscribers and time.monotonic() < deadline:
            time.sleep(0.01)

        self._stopped = False

    published = property(lambda self: self.node.published)
    simulated_s = property(lambda self: self.arm.sim_time)

    def stop(self):
        """Destroy the bridge (it disables the motors), then stop the emulator; idempotent."""
        if not self._stopped:
            self._stopped = True
            self.node.destroy_node()
            self.arm.stop()
            if self.arm.error:
                print(f"warning: virtual Damiao arm: {self.arm.error}", file=sys.stderr)


def simulate_and_identify(args) -> Outcome:
    """Run the graph described by the parsed command line ``args``; see the module docstring."""
    truth_path = args.truth_model or args.model
    for path in (truth_path, args.model):  # a bad model is an argument error, before anything starts
        load_robot(path)
    damiao = getattr(args, "damiao", False)
    sections = _sections(args.config, args.model, "_damiao" if damiao else "")
    parameters = graph_parameters(args.model, truth_path, args.output_dir, args.realtime)
    parameters["trajectory_publisher"]["duration"] = args.duration
    if damiao:
        # the virtual Damiao arm keeps wall time and sends JointStates, its steps are its own
        parameters["trajectory_publisher"]["use_sim_time"] = False
        parameters["identifier"].update(simulated_physics=False, state_blocks=False)
    deadline = time.monotonic() + (args.timeout or 10.0 * args.duration + 60.0)

    nodes = [TrajectoryPublisher(parameter_overrides=_overrides(sections, "trajectory_publisher",
                                                                parameters["trajectory_publisher"])),
             Identifier(parameter_overrides=_overrides(sections, "identifier", parameters["identifier"]))]
    identifier = nodes[1]
    # the arm last: the bridge enables the motors, and their feedback loop should start spinning at once
    try:
        source = (_DamiaoSource if damiao else _MujocoSource)(args, sections, parameters)
    except BaseException:
        for node in nodes:
            node.destroy_node()
        raise
    # the table is printed below; the node's own copy of it in the log would repeat it
    identifier.get_logger().set_level(LoggingSeverity.WARN)
    client = Node("sysid_sim_identify")
    state = {"done": False, "progress": -1}
    latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
    client.create_subscription(Bool, "sysid/done", lambda msg: state.update(done=msg.data), latched)

    def on_progress(msg):
        tenth = int(msg.data * 10)
        if tenth > state["progress"]:
            state["progress"] = tenth
            print(f"  excitation: {msg.data:4.0%}", flush=True)
    client.create_subscription(Float32, "sysid/progress", on_progress, 10)

    # the objects built so far live until the end: a full collection scanning them stalls every
    # node (and the emulated motors) for tens of milliseconds
    gc.freeze()
    executor = _executor()
    for node in [source.node] + nodes + [client]:
        executor.add_node(node)
    try:
        print(f"Simulating {truth_path} {'in real time' if args.realtime or damiao else 'as fast as possible'}"
              f"{' behind emulated Damiao motors on a virtual CAN bus' if damiao else ''}; "
              f"identifying with {args.model}", flush=True)
        started = time.monotonic()
        if not _spin_until(executor, lambda: state["done"], deadline):
            return Outcome(f"the excitation did not finish in time (progress {max(state['progress'], 0) * 10} %)")
        wall = time.monotonic() - started
        # stop the arm, then let every sample in flight arrive: none may be lost
        executor.remove_node(source.node)
        source.stop()
        _spin_until(executor, lambda: identifier.received >= source.published, time.monotonic() + 5.0)
        counts = dict(published=source.published, received=identifier.received, recorded=identifier.stored,
                      simulated_s=source.simulated_s, wall_s=wall)

        trigger = client.create_client(Trigger, "sysid/identify")
        if not trigger.wait_for_service(timeout_sec=10.0):
            return Outcome(f"{trigger.srv_name} is not available", **counts)
        future = trigger.call_async(Trigger.Request())
        if not _spin_until(executor, future.done, deadline, pause=0.002):
            return Outcome(f"{trigger.srv_name} did not answer in time", **counts)
        response = future.result()
        if not response.success:
            return Outcome(_failure(response.message), **counts)
        summary = json.loads(response.message)
        return Outcome(None, summary=summary, report=identifier.last_report, truth_mass=summary["truth"]["mass"],
                       truth_com=tuple(summary["truth"]["center_of_mass"]), **counts)
    finally:
        executor.shutdown()
        for node in nodes + [client]:
            node.destroy_node()
        source.stop()


def _failure(message: str) -> str:
    """One line from a failed identify answer: its reason, or the verdict of the result summary."""
    try:
        summary = json.loads(message)
    except ValueError:
        return message
    reasons = summary.get("updated_model_error") or "; ".join(summary["verdict_reasons"])
    return f"identification verdict {summary['verdict']}, no model written: {reasons}"


def _print(outcome: Outcome, args) -> None:
    if outcome.published:
        print(f"Excitation done: {outcome.simulated_s:.1f} s simulated in {outcome.wall_s:.1f} s wall "
              f"(wall/simulated {outcome.wall_s / max(outcome.simulated_s, 1e-9):.2f}); "
              f"{outcome.published} samples published, {outcome.recorded} recorded"
              + (f" ({outcome.received - outcome.recorded} rejected)" if outcome.received > outcome.recorded else ""))
    if outcome.error is not None:
        print(f"error: {outcome.error}", file=sys.stderr)
        return
    mass, truth = outcome.summary["mass"], outcome.summary["truth"]
    print(outcome.report)
    print(f"\nTruth ({(args.truth_model or args.model).name}): mass {outcome.truth_mass:.4f} kg, identified "
          f"{mass:.4f} kg ({100 * (mass - outcome.truth_mass) / outcome.truth_mass:+.2f} %); "
          f"centre of mass error {truth['com_error_mm']:.2f} mm")
    print(f"Results in {args.output_dir}/")


def run(args) -> Outcome:
    """``simulate_and_identify(args)`` between rclpy.init and shutdown of the default context.

    ``args`` as parsed by ``build_parser()``; bad files raise SysidError, OSError or ValueError.
    """
    rclpy.init()
    interval = sys.getswitchinterval()  # --damiao shortens it for its emulated motors' thread
    try:
        return simulate_and_identify(args)
    finally:
        rclpy.try_shutdown()
        sys.setswitchinterval(interval)


# exit status, as sysid-identify's: bad input 2; no trusted model (a failed verdict, a run that
# gave nothing to identify) 3; interrupted 130
EXIT_OK, EXIT_BAD_INPUT, EXIT_FAILED, EXIT_INTERRUPTED = 0, 2, 3, 130


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        outcome = run(args)
    except (SysidError, OSError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    _print(outcome, args)
    return EXIT_OK if outcome.error is None else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
