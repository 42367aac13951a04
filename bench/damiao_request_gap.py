"""Damiao bridge: how long the healthy motors go without a frame while a request meets a silent one.

The bridge runs enable, disable and clear_errors inside its control loop (one special frame per
cycle to the motors still to answer, the regular frame to every other motor), so a silent motor
must not leave the others without commands. This bench drives the virtual OpenArm-class arm
(config/openarm_class_damiao.yaml: 7 emulated motors, 250 Hz) through the real damiao_bridge on
python-can's virtual bus, silences joint4, calls each service and prints, over ``--repeats``
calls: the service's duration, the frames the silent motor got, and the longest gap between two
frames to any healthy motor (bus times), against the control period and against a baseline
("none": 0.15 s of plain tracking, every motor answering). A bridge that did the round trips
blocking would show a gap as long as the request.

The figures depend on the machine and its load (the emulator shares the process and its GIL).

Run: ``make bench`` or ``python bench/damiao_request_gap.py [--repeats 5]``.
"""
from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from pathlib import Path

# one DDS domain of its own, discovery on this machine only: the bench must not hear other runs
os.environ.setdefault("ROS_DOMAIN_ID", str(1 + os.getpid() % 100))
os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import can  # noqa: E402
import numpy as np  # noqa: E402
import rclpy  # noqa: E402
import yaml  # noqa: E402
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.node import Node  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

from sysid_core.damiao import protocol as dm  # noqa: E402
from sysid_core.damiao.emulator import VirtualDamiaoArm, emulated_motors  # noqa: E402
from sysid_ros.damiao_bridge import DamiaoBridge  # noqa: E402

CONFIG = ROOT / "config" / "openarm_class_damiao.yaml"
MODEL = ROOT / "config" / "robots" / "openarm_class.xml"
SILENT = 4          # can id of the motor that stops answering (joint4)
SPECIAL = {"enable": dm.enable_frame(), "disable": dm.disable_frame(), "clear_errors": dm.clear_error_frame()}


def addressed(arbitration_id: int, data: bytes) -> int:
    """The motor (can id) a frame from the host is for."""
    return data[0] | data[1] << 8 if arbitration_id == dm.MANAGEMENT_ID else arbitration_id


def measure(service: str, repeats: int) -> list:
    layout = yaml.safe_load(CONFIG.read_text())["damiao_bridge"]["ros__parameters"]
    channel = f"bench_gap_{os.getpid()}_{service}"
    # silence is noticed late here: the request, not the silence, meets the motor first
    layout.update(can_channel=channel, feedback_timeout_cycles=1000)
    motors = emulated_motors(layout)
    arm = VirtualDamiaoArm(str(MODEL), motors, channel=channel)
    arm.start()
    monitor = can.Bus(interface="virtual", channel=channel)
    context = rclpy.Context()
    rclpy.init(context=context)
    executor = SingleThreadedExecutor(context=context)
    bridge = DamiaoBridge(context=context, parameter_overrides=[Parameter(k, value=v) for k, v in layout.items()])
    probe = Node("bench_probe", context=context)
    executor.add_node(bridge)
    executor.add_node(probe)
    client = probe.create_client(Trigger, f"sysid/damiao/{'enable' if service == 'none' else service}")
    client.wait_for_service(timeout_sec=5.0)
    frames = []

    def spin(until):
        deadline = time.monotonic() + 10.0
        while not until() and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.002)
            while (msg := monitor.recv(timeout=0)) is not None:
                frames.append((msg.timestamp, addressed(msg.arbitration_id, bytes(msg.data)), bytes(msg.data)))

    results = []
    try:
        for _ in range(repeats):
            arm.set_silent(SILENT, False)
            for setup in (["clear_errors"] + (["disable"] if service == "enable" else []) +
                          (["enable"] if service != "enable" else [])):
                future = probe.create_client(Trigger, f"sysid/damiao/{setup}").call_async(Trigger.Request())
                spin(future.done)
            arm.set_silent(SILENT, service != "none")
            if service == "clear_errors":
                bridge.supervisor.lost(SILENT - 1, "silenced by the bench")
            frames.clear()
            called = time.time()
            if service == "none":            # the baseline: as long, no request
                spin(lambda: time.time() > called + 0.15)
            else:
                future = client.call_async(Trigger.Request())
                spin(future.done)
            answered = time.time()
            to_silent = sum(1 for _, motor, data in frames if motor == SILENT and data == SPECIAL.get(service))
            gaps = [np.diff([called] + [t for t, motor, _ in frames if motor == m and called <= t <= answered]
                            + [answered]).max() for m in layout["can_ids"] if m != SILENT]
            results.append((answered - called, to_silent, max(gaps)))
    finally:
        executor.remove_node(bridge)
        bridge.destroy_node()
        probe.destroy_node()
        executor.shutdown()
        rclpy.shutdown(context=context)
        monitor.shutdown()
        arm.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    sys.setswitchinterval(0.0005)   # the emulator thread shares the GIL, as sim_identify arranges
    gc.freeze()
    rate = yaml.safe_load(CONFIG.read_text())["damiao_bridge"]["ros__parameters"]["control_rate_hz"]
    print(f"virtual OpenArm-class arm, 7 motors at {rate:g} Hz (period {1e3 / rate:.1f} ms), joint{SILENT} silent; "
          f"{args.repeats} calls each (loaded machine: figures vary)")
    print(f"{'service':>13} | {'duration ms':>11} | {'frames to silent':>16} | {'longest gap to the others ms':>28}")
    for service in ("none", "enable", "disable", "clear_errors"):
        results = np.array(measure(service, args.repeats))
        print(f"{service:>13} | {np.median(results[:, 0]) * 1e3:11.0f} | {np.median(results[:, 1]):16.0f} | "
              f"median {np.median(results[:, 2]) * 1e3:5.1f}, max {results[:, 2].max() * 1e3:5.1f}")


if __name__ == "__main__":
    main()
