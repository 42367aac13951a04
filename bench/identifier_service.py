"""The identifier node on a full buffer: ``sysid/identify`` answer time and the node's peak memory.

The target: on a full 10-minute buffer (600000 samples at 1 kHz, the default
``buffer_capacity``) the service answers in under 5 s and the node's peak memory stays under
1 GB. The node runs in a process of its own (this script with ``--node``): an ``Identifier``
for the OpenArm-class arm (7 joints) whose buffer is filled directly with a 10-minute
recording (MuJoCo's inverse dynamics along a multisine, with sensor noise: every sample goes
through the filters, as JointState carries no acceleration) and then spun like the
executable does. Publishing 600000 JointState messages would time DDS, not identification.
This process calls ``sysid/identify`` over DDS (std_srvs/Trigger) and reports the answer's
wall time, the node's own ``elapsed_s`` and ``snapshot_s``, and the node's resident size
(VmRSS) before the call and its peak (VmHWM, from /proc) after it.

Run: ``python bench/identifier_service.py [--runs N]``; prints figures, asserts nothing.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARM = ROOT / "config" / "robots" / "openarm_class.xml"
RATE = 1000.0
SAMPLES = 600_000


def _status_mb(pid: int, field: str) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":")) / 1e3


def make_data(directory: Path) -> None:
    """10 minutes at 1 kHz, noisy q, dq, tau (no ddq) as .npy files."""
    import numpy as np

    from sysid_core import load_robot
    from sysid_core.excitation.multisine import multisine
    from sysid_core.simulation import ideal_recording

    robot = load_robot(ARM)
    plan = multisine(robot.joint_range, SAMPLES / RATE, RATE, seed=0, max_velocity=1.5)
    rec = ideal_recording(robot.model, plan)
    rng = np.random.default_rng(0)
    rows = np.empty((rec.n_samples, 1 + 3 * robot.n_joints))
    rows[:, 0] = rec.time
    rows[:, 1:] = np.hstack([rec.q + 1e-4 * rng.standard_normal(rec.q.shape),
                             rec.dq + 2e-3 * rng.standard_normal(rec.q.shape),
                             rec.tau + 2e-2 * rng.standard_normal(rec.q.shape)])
    np.save(directory / "rows.npy", rows[:SAMPLES])
    (directory / "joints.json").write_text(json.dumps(list(rec.joint_names)))


def node(directory: str) -> None:
    """The identifier node with its buffer full of the recording; prints 'ready' and spins."""
    import numpy as np
    import rclpy

    from sysid_ros.identifier import Identifier

    from sysid_ros.entry_point import spin_node

    loaded = [np.load(Path(directory) / "rows.npy")]  # handed over and dropped: one copy, in the buffer
    joints = json.loads((Path(directory) / "joints.json").read_text())

    class Filled(Identifier):
        """The identifier with its buffer filled as _on_joint_state would, message by message."""

        def __init__(self, **kwargs):
            super().__init__(parameter_overrides=[
                rclpy.parameter.Parameter("model", value=str(ARM)),
                rclpy.parameter.Parameter("plots", value=False),
                rclpy.parameter.Parameter("buffer_capacity", value=SAMPLES),
                rclpy.parameter.Parameter("output_dir", value=str(Path(directory) / "out"))], **kwargs)
            rows = loaded.pop()
            live = self.live_recording
            with live.lock:
                buffer = live.buffer
                assert list(buffer.joint_names) == joints, (buffer.joint_names, joints)
                buffer.append(rows)
                live.received = SAMPLES
            del rows
            print("ready", flush=True)

    # spun as the executable spins it (one thread, the identification in a thread of its own)
    spin_node(Filled)


def call(pid: int) -> dict:
    """One sysid/identify call over DDS: wall time to the answer and the node's memory."""
    import rclpy
    from std_srvs.srv import Trigger

    client_node = rclpy.create_node("identifier_service_bench")
    try:
        client = client_node.create_client(Trigger, "sysid/identify")
        if not client.wait_for_service(timeout_sec=60.0):
            raise RuntimeError("sysid/identify did not appear within 60 s")
        rss = _status_mb(pid, "VmRSS")
        start = time.perf_counter()
        future = client.call_async(Trigger.Request())
        rclpy.spin_until_future_complete(client_node, future, timeout_sec=300.0)
        wall = time.perf_counter() - start
        response = future.result()
        peak = _status_mb(pid, "VmHWM")
    finally:
        client_node.destroy_node()
    summary = json.loads(response.message) if response.message.startswith("{") else {"error": response.message}
    return {"wall": wall, "rss_before": rss, "peak": peak, "success": response.success, "summary": summary}


def main(argv) -> None:
    runs = int(argv[argv.index("--runs") + 1]) if "--runs" in argv else 2
    os.environ.setdefault("ROS_DOMAIN_ID", str(1 + os.getpid() % 100))
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    import rclpy

    print(f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}, load average "
          f"{os.getloadavg()[0]:.1f}, {os.cpu_count()} cores; {SAMPLES} samples in the buffer, OpenArm class")
    with tempfile.TemporaryDirectory() as tmp:
        make_data(Path(tmp))
        rclpy.init()
        try:
            for run in range(runs):  # a fresh node each run: VmHWM is the process's peak
                proc = subprocess.Popen([sys.executable, __file__, "--node", tmp], stdout=subprocess.PIPE, text=True)
                try:
                    if proc.stdout.readline().strip() != "ready":
                        raise RuntimeError("the identifier node did not start")
                    r = call(proc.pid)
                finally:
                    proc.terminate()
                    proc.wait(timeout=30)
                s = r["summary"]
                print(f"run {run + 1}: answer {r['wall']:.2f} s (target < 5; node's elapsed_s {s.get('elapsed_s')}, "
                      f"snapshot_s {s.get('snapshot_s')}), node peak {r['peak']:.0f} MB (target < 1000; "
                      f"{r['rss_before']:.0f} MB before the call), success {r['success']}, verdict "
                      f"{s.get('verdict')}, mass {s.get('mass')}, rows {s.get('n_samples')} (decimation "
                      f"{s.get('decimation')}){'' if 'error' not in s else ', ' + s['error']}")
        finally:
            rclpy.try_shutdown()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--node":
        node(sys.argv[2])
    else:
        main(sys.argv[1:])
