"""model_monitor as a process at 1 kHz: does it keep up, with what latency, at what CPU cost.

The OpenArm-class arm (7 joints) is identified from a simulated excitation (params.json and the
updated model written to a scratch directory); a second simulated run of ``--seconds`` at
``--rate`` Hz is then published as joint_states, paced by the wall clock in bursts of
``--burst`` samples (a driver's stream as a loaded machine delivers it), to
``python -m sysid_ros.model_monitor`` in a process of its own (its default batch_size 8, the
payload tracked or not). Printed per case: joint states published, predictions received (every
sample must get one), the latency from a sample's publication to its prediction's arrival
(median, p99, max), and the monitor process's CPU time over the stream's wall time.

Run: ``.venv/bin/python bench/monitor_node.py [--seconds 20] [--rate 1000] [--burst 5]``.
Asserts nothing; figures depend on the machine and its load (the load average is printed).
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("ROS_DOMAIN_ID", str(1 + os.getpid() % 100))
os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")

import rclpy  # noqa: E402
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402

from sysid_core.dynamics.model import load_robot  # noqa: E402
from sysid_core.excitation.multisine import multisine  # noqa: E402
from sysid_core.identification.identify import IdentificationConfig, identify  # noqa: E402
from sysid_core.results.export import params_document, write_params_json  # noqa: E402
from sysid_core.results.urdf_export import write_updated_robot  # noqa: E402
from sysid_core.simulation import simulate  # noqa: E402

ROBOTS = ROOT / "config" / "robots"


def _identified(directory: Path, rate: float, seconds: float):
    robot = load_robot(ROBOTS / "openarm_class.xml")
    truth = load_robot(ROBOTS / "openarm_class_payload.xml")
    run = simulate(truth.model, multisine(robot.joint_range, 10.0, rate, seed=1, max_velocity=1.0),
                   nominal=robot.model, seed=0)
    result = identify(robot, run.recording, IdentificationConfig())
    write_params_json(directory / "params.json", params_document(result, robot, "simulation"))
    write_updated_robot(directory, robot, result)
    work = simulate(truth.model, multisine(robot.joint_range, seconds, rate, seed=3, max_velocity=1.0),
                    nominal=robot.model, seed=2).recording
    return directory / "params.json", work


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _case(params: Path, work, rate: float, burst: int, track_payload: bool) -> None:
    namespace = f"/bench_monitor_{os.getpid()}_{int(track_payload)}"
    process = subprocess.Popen([sys.executable, "-m", "sysid_ros.model_monitor", "--ros-args", "-r",
                                f"__ns:={namespace}", "-p", f"params:={params}",
                                "-p", f"track_payload:={str(track_payload).lower()}"],
                               cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    node = rclpy.create_node("bench_probe", namespace=namespace)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    sent, arrived = {}, []
    node.create_subscription(JointState, "sysid/predicted_effort", lambda msg: arrived.append(
        (msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec, time.monotonic())), 10000)
    states = node.create_publisher(JointState, "joint_states", 1000)
    try:
        deadline = time.monotonic() + 60.0
        while states.get_subscription_count() == 0 and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.1)
        names = list(work.joint_names)
        count = len(work.time)
        start, cpu_start = time.monotonic(), _cpu_seconds(process.pid)
        index = 0
        while index < count:
            due = min(count, int((time.monotonic() - start) * rate) + 1)
            if due - index >= burst or due == count:
                for i in range(index, due):
                    msg = JointState(name=names, position=work.q[i].tolist(), velocity=work.dq[i].tolist(),
                                     effort=work.tau[i].tolist())
                    stamp = int(round((100.0 + work.time[i]) * 1e9))
                    msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp, 1_000_000_000)
                    sent[stamp] = time.monotonic()
                    states.publish(msg)
                index = due
            executor.spin_once(timeout_sec=0.0005)
        wall = time.monotonic() - start
        end = time.monotonic() + 3.0
        while len(arrived) < count - 1 and time.monotonic() < end:
            executor.spin_once(timeout_sec=0.05)
        cpu = _cpu_seconds(process.pid) - cpu_start
    finally:
        process.terminate()
        process.wait(timeout=30.0)
        executor.shutdown()
        node.destroy_node()
    latency = np.array([received - sent[stamp] for stamp, received in arrived if stamp in sent]) * 1e3
    print(f"  payload tracked {str(track_payload):5s}  published {count:6d}  predictions {len(arrived):6d}  "
          f"latency ms median {np.median(latency):6.2f} p99 {np.percentile(latency, 99):6.2f} "
          f"max {latency.max():7.2f}  monitor CPU {100.0 * cpu / wall:5.1f} % of one core over {wall:.1f} s",
          flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="stream length, s (default 20)")
    parser.add_argument("--rate", type=float, default=1000.0, help="joint_states rate, Hz (default 1000)")
    parser.add_argument("--burst", type=int, default=5, help="samples published at once (default 5)")
    args = parser.parse_args()
    rclpy.init()
    try:
        with tempfile.TemporaryDirectory() as scratch:
            params, work = _identified(Path(scratch), args.rate, args.seconds)
            print(f"OpenArm class, 7 joints, {args.rate:g} Hz in bursts of {args.burst}; load average "
                  f"{os.getloadavg()[0]:.2f}")
            for track in (False, True):
                _case(params, work, args.rate, args.burst, track)
    finally:
        rclpy.shutdown()


if __name__ == "__main__":
    main()
