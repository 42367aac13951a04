"""Simulation speed: how well the virtual Damiao arm keeps real time.

These are figures of the machine and of its load, so they live here and not in the tests
(which check the behaviour: every sample arrives, the real-time loops never run ahead of the
wall clock, lost time is counted). How fast the MuJoCo graph simulates is bench/graph_speed.py.

1. ``sysid-sim-identify --damiao``: the graph behind damiao_bridge, python-can's virtual
   bus and the emulated motors, in real time (250 Hz, config/openarm_class_damiao.yaml). Of
   interest: JointState cycles published per wall second against the control rate.
2. The emulator's real-time thread alone under a 500 Hz host (7 MIT commands every 2 ms):
   the fraction of wall time it simulates, the time it had to drop, and the share of a core
   it takes.

Run: ``make bench`` or ``python bench/simulation_speed.py [--duration 20]``.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import tempfile
import time
from pathlib import Path

# one DDS domain of its own, discovery on this machine only: the bench must not hear other runs
os.environ.setdefault("ROS_DOMAIN_ID", str(1 + os.getpid() % 100))
os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import can  # noqa: E402

from sysid_core.damiao import protocol as dm  # noqa: E402
from sysid_core.damiao.emulator import EmulatedMotor, VirtualDamiaoArm  # noqa: E402
from sysid_core.damiao.protocol import MitCommand, motor_limits  # noqa: E402
from sysid_core.dynamics.model import load_robot  # noqa: E402

ROBOTS = ROOT / "config" / "robots"
OPENARM_MOTORS = ("DM8009", "DM8009", "DM4340", "DM4340", "DM4310", "DM4310", "DM4310")


def sim_identify_damiao(duration: float) -> None:
    from sysid_ros import sim_identify as graph

    with tempfile.TemporaryDirectory() as out:
        argv = ["--model", str(ROBOTS / "openarm_class.xml"), "--truth-model", str(ROBOTS / "openarm_class_payload.xml"),
                "--duration", str(duration), "--output-dir", out, "--damiao"]
        with contextlib.redirect_stdout(io.StringIO()):  # its progress lines
            outcome = graph.run(graph.build_parser().parse_args(argv))
    if outcome.error:
        print(f"  failed: {outcome.error}")
        return
    mass_error = outcome.summary["mass"] / outcome.truth_mass - 1
    print(f"  {outcome.simulated_s:.1f} s simulated in {outcome.wall_s:.1f} s wall: "
          f"wall/simulated {outcome.wall_s / outcome.simulated_s:.2f}")
    print(f"  JointState published {outcome.published}, received {outcome.received} "
          f"({outcome.published / outcome.wall_s:.0f} per wall second); mass error {100 * mass_error:+.2f} %")


def emulator_under_a_host(seconds: float) -> None:
    robot = load_robot(ROBOTS / "openarm_class.xml")
    model = robot.model
    can_ids = list(range(1, 8))
    motors = [EmulatedMotor(joint_name=name, motor_type=kind, can_id=i, master_id=0x10 + i)
              for i, name, kind in zip(can_ids, robot.joint_names, OPENARM_MOTORS)]
    limits = [motor_limits(kind) for kind in OPENARM_MOTORS]
    # damping only at rest: the arm sags slowly, which is irrelevant to the timing
    payloads = [dm.encode_mit(MitCommand(0.0, 0.0, 0.0, 1.0, 0.0), lim) for lim in limits]
    channel = f"bench-{os.getpid()}"
    host = can.Bus(interface="virtual", channel=channel)
    arm = VirtualDamiaoArm(model, motors, channel=channel)
    try:
        wall0, cpu0 = time.perf_counter(), time.process_time()
        arm.start()
        for cid in can_ids:
            host.send(can.Message(arbitration_id=cid, data=dm.enable_frame(), is_extended_id=False))
        period, t_next = 0.002, time.perf_counter()
        for _ in range(int(seconds / period)):
            for cid, data in zip(can_ids, payloads):
                host.send(can.Message(arbitration_id=cid, data=data, is_extended_id=False))
            while host.recv(timeout=0) is not None:
                pass
            t_next += period
            time.sleep(max(0.0, t_next - time.perf_counter()))
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    finally:
        arm.stop()
        host.shutdown()
    stats = arm.stats()
    dt = model.opt.timestep
    print(f"  {seconds:.0f} s wall: simulated {100 * arm.sim_time / wall:.1f} % of it, dropped "
          f"{stats['dropped_steps'] * dt * 1e3:.0f} ms in {stats['overruns']} overruns; step "
          f"{stats['mean_step_cost_s'] * 1e6:.0f} us mean, {stats['max_step_cost_s'] * 1e3:.1f} ms max; "
          f"emulator thread busy {100 * stats['busy_fraction']:.0f} %, process CPU {100 * cpu / wall:.0f} % of a core")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=20.0, help="excitation length, s (default 20)")
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} cores, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("1. sysid-sim-identify --damiao, real time (virtual Damiao arm, 250 Hz)")
    sim_identify_damiao(args.duration)
    print("2. virtual Damiao arm alone, 500 Hz host")
    emulator_under_a_host(5.0)


if __name__ == "__main__":
    main()
