"""Damiao bridge: does its control loop keep its period, and do the motors keep getting commands?

The real damiao_bridge node drives the virtual OpenArm-class arm (7 emulated motors with the
layout and gains of config/openarm_class_damiao.yaml, MuJoCo behind them) on python-can's
in-process virtual bus, at each control rate of ``--rates`` (500 Hz and 1 kHz) for
``--seconds`` after a warm-up. A commander in a process of its own publishes
``sysid/joint_command`` at the control rate (a slow sine about where the arm is when it starts),
as a trajectory publisher would. The emulated motors share the bridge's process and its GIL (the virtual bus
only links buses of one process): they take CPU from the bridge's process that real motors
do not, so these figures are pessimistic for a real bus.

Figures per rate, over the measured window, from the bridge's ``loop_record`` (its cycle start
times, steady clock, and the age of every reply it published) and its command log:

* jitter: |t_k - t_(k-1) - T| over consecutive cycle starts t_k, T the nominal period:
  p50, p99 and max in ms and in % of T.
* overruns: cycles that started more than 2 T after the one before them, i.e. more than one
  period after they were due, so that a whole period passed without a cycle (the steady timer
  skips such periods, it does not run them back to back): count and % of the cycles. missed:
  periods of the window without a cycle, round((t_last - t_first) / T) + 1 - cycles.
* busy: how long a cycle took (replies read, a quarter period at most waited for missing
  ones, joint_states published, one frame per motor sent): p50, p99, ms.
* CPU of this process (bridge, executor, emulated motors) and of every other process of the
  machine but the busy loops and the commander (how loaded the machine was besides), in % of
  a core.
* feedback age: from a motor's reply (the bus time stamp of its frame) to the publication of
  the joint_states message carrying it: p50, p99, max over every joint of every message, ms.
* command gap: the longest time any motor went without a tracking frame (an MIT frame with
  kp > 0, which the bridge sends only while the joint's command is younger than
  command_timeout_s), from the send times in the command log, against command_timeout_s.
* faults latched by the bridge (a motor silent for 0.1 s counts as lost: the emulated motors
  answer from a thread of this process that a loaded machine starves, and a shorter timeout
  would measure that thread, not the bridge), and simulated time the emulator dropped (ms).

``--load N`` starts N busy loops (``python3 -c 'while True: pass'``) beside the run, killed at the
end. ``--fifo PRIO`` runs this process's threads (bridge, executor, emulator) at SCHED_FIFO
priority PRIO during each measurement (needs CAP_SYS_NICE or an rtprio limit), the busy loops
and the commander at normal priority: what a real-time scheduling setup of the bridge gives.

The figures are the machine's and its load's: no test asserts them.

Run: ``python bench/damiao_loop.py [--seconds 10] [--rates 500 1000] [--load 2] [--fifo 50]``.
"""
from __future__ import annotations

import argparse
import gc
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

# one DDS domain of its own, discovery on this machine only: the bench must not hear other runs
os.environ.setdefault("ROS_DOMAIN_ID", str(1 + os.getpid() % 100))
os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import mujoco  # noqa: E402
import numpy as np  # noqa: E402
import rclpy  # noqa: E402
import yaml  # noqa: E402
from rclpy.clock import Clock, ClockType  # noqa: E402
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor  # noqa: E402
from rclpy.node import Node  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

from sysid_core.damiao import protocol as dm  # noqa: E402
from sysid_core.damiao.emulator import VirtualDamiaoArm, emulated_motors  # noqa: E402
from sysid_core.damiao.loop_record import longest_gaps, percentiles, period_figures  # noqa: E402
from sysid_ros.damiao_bridge import DamiaoBridge  # noqa: E402

CONFIG = ROOT / "config" / "openarm_class_damiao.yaml"
MODEL = ROOT / "config" / "robots" / "openarm_class.xml"
POSE = (0.5, 0.4, 0.3, 1.0, 0.2, 0.3, 0.1)   # rad, inside every joint's limits, gravity-loaded
SWAY = (0.05, 0.5)                             # the commander's sine: rad, Hz
TIMESTEP = mujoco.MjModel.from_xml_path(str(MODEL)).opt.timestep   # of the emulator's physics, s
WARM_UP_S = 1.0
SILENT_S = 0.1                                 # of silence before the bridge takes a motor for lost
READ_EVERY_S = 1.0                             # loop_record is read this often (it keeps LOOP_RECORD_S)


def commander(rate: float, names: list) -> None:
    """The commander process: JointState on sysid/joint_command at ``rate`` Hz, a sine about
    the first joint_states it hears (the arm sags while nothing is tracked), until SIGTERM."""
    rclpy.init()
    node = Node("bench_commander")
    pub = node.create_publisher(JointState, "sysid/joint_command", 10)
    amplitude, frequency = SWAY
    centre = {}

    def hear(msg):
        if not centre and list(msg.name) == names:
            centre.update(q=np.array(msg.position), start=time.monotonic())

    def publish():
        if centre:
            phase = 2 * math.pi * frequency * (time.monotonic() - centre["start"])
            pub.publish(JointState(name=names, position=(centre["q"] + amplitude * math.sin(phase)).tolist(),
                                   velocity=[2 * math.pi * frequency * amplitude * math.cos(phase)] * len(names)))
    node.create_subscription(JointState, "joint_states", hear, 10)
    node.create_timer(1.0 / rate, publish, clock=Clock(clock_type=ClockType.STEADY_TIME))
    try:
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception:   # SIGTERM shuts the context down, possibly while the executor builds its wait set
        if rclpy.ok():
            raise
    finally:
        node.destroy_node()
        rclpy.try_shutdown()


def machine_cpu() -> float:
    """CPU time (s) the whole machine has spent busy since an arbitrary origin, every core:
    the steady clock times the cores, less their idle time (/proc/stat, measured when the
    kernel stops its tick, where busy time is only sampled at ticks)."""
    with open("/proc/stat") as stat:
        fields = [int(x) for x in stat.readline().split()[1:]]
    return time.monotonic() * os.cpu_count() - (fields[3] + fields[4]) / os.sysconf("SC_CLK_TCK")


def process_cpu(pid: int) -> float:
    """CPU time (s) process ``pid`` has spent so far, all its threads."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def set_policy(policy: int, priority: int) -> None:
    """Scheduling policy of every thread of this process (threads made later inherit the caller's)."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setscheduler(int(tid), policy, os.sched_param(priority))
        except ProcessLookupError:   # a thread that ended meanwhile
            pass


def measure(rate: float, seconds: float, fifo: int, hogs: list) -> dict:
    """Run the bridge at ``rate`` Hz for ``seconds`` after the warm-up; its figures (see the docstring)."""
    layout = yaml.safe_load(CONFIG.read_text())["damiao_bridge"]["ros__parameters"]
    channel = f"bench_loop_{os.getpid()}_{int(rate)}"
    # SILENT_S of silence before a motor counts as lost (see the docstring), not the config's 20 ms
    layout.update(can_channel=channel, control_rate_hz=rate, feedback_timeout_cycles=math.ceil(SILENT_S * rate))
    motors = emulated_motors(layout)
    arm = VirtualDamiaoArm(str(MODEL), motors, channel=channel, initial_positions=POSE)
    arm.start()
    context = rclpy.Context()
    rclpy.init(context=context)
    executor = SingleThreadedExecutor(context=context)
    bridge = DamiaoBridge(context=context, parameter_overrides=[Parameter(k, value=v) for k, v in layout.items()])
    probe = Node("bench_probe", context=context)
    clear = probe.create_client(Trigger, "sysid/damiao/clear_errors")
    executor.add_node(bridge)
    executor.add_node(probe)
    child = subprocess.Popen([sys.executable, __file__, "--commander", str(rate), *layout["joint_names"]])
    record = bridge.loop_record
    starts, busy, ages = [], [], []
    cleared = 0
    try:
        if fifo:
            set_policy(os.SCHED_FIFO, fifo)
        # warm-up: the commander's first commands tracked, then WARM_UP_S more; a motor that
        # looked silent meanwhile (the start of a loaded run) is cleared
        deadline = time.monotonic() + 60.0
        tracked_since = None
        while tracked_since is None or time.monotonic() < tracked_since + WARM_UP_S:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the bridge did not track the commander within 60 s: faults {bridge.faults}")
            if any(bridge.faults):
                future = clear.call_async(Trigger.Request())
                executor.spin_until_future_complete(future, timeout_sec=5.0)
                cleared += 1
                tracked_since = None
            elif tracked_since is None and bridge.tracking.all():
                tracked_since = time.monotonic()
            executor.spin_once(timeout_sec=0.01)
        gc.collect()
        gc.freeze()
        cycle, message = record.cycles, record.messages
        ours = [os.getpid(), child.pid, *(hog.pid for hog in hogs)]

        def others_cpu():
            """CPU time of every process but this one, the commander and the busy loops, s."""
            return machine_cpu() - sum(process_cpu(pid) for pid in ours)
        dropped, begin, cpu, others = arm.stats()["dropped_steps"], time.time(), time.process_time(), others_cpu()
        end = time.monotonic() + seconds
        read = time.monotonic() + READ_EVERY_S
        while True:
            now = time.monotonic()
            if now >= read or now >= end:
                start, took = record.cycles_since(cycle)
                starts.append(start)
                busy.append(took)
                ages.append(record.ages_since(message))
                cycle, message = record.cycles, record.messages
                read = now + READ_EVERY_S
                if now >= end:
                    break
            executor.spin_once(timeout_sec=0.01)
        finish = time.time()
        cpu = (time.process_time() - cpu) / (finish - begin)
        others = (others_cpu() - others) / (finish - begin)
        times, frames, mit = bridge._log_snapshot()
        tracking = np.column_stack([mit[:, j].astype(bool) & (dm.decode_mit_payloads(frames[:, j], limits)[:, 2] > 0)
                                    for j, limits in enumerate(bridge.arm.limits)])
        gaps = longest_gaps(times, tracking, begin, finish)
        dropped = (arm.stats()["dropped_steps"] - dropped) * TIMESTEP
        faults = [f"{name}: {fault}" for name, fault in zip(bridge.arm.joint_names, bridge.faults) if fault]
    finally:
        if fifo:
            set_policy(os.SCHED_OTHER, 0)
        child.terminate()
        child.wait(timeout=10)
        for node in (bridge, probe):
            executor.remove_node(node)
            node.destroy_node()
        executor.shutdown()
        rclpy.shutdown(context=context)
        arm.stop()
        gc.unfreeze()
    figures = period_figures(np.concatenate(starts), 1.0 / rate)
    figures.update(busy=np.concatenate(busy), age=np.concatenate(ages), gap=float(gaps.max()),
                   gap_joint=layout["joint_names"][int(gaps.argmax())], timeout=float(layout["command_timeout_s"]),
                   dropped=dropped, faults=faults, cleared=cleared, cpu=cpu, others=others)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="measured per rate, s (default 10)")
    parser.add_argument("--rates", type=float, nargs="+", default=[500.0, 1000.0], help="control rates, Hz")
    parser.add_argument("--load", type=int, default=0, help="busy loops started beside the run (default 0)")
    parser.add_argument("--fifo", type=int, default=0, help="SCHED_FIFO priority of this process while measuring")
    parser.add_argument("--commander", type=float, help=argparse.SUPPRESS)
    args, names = parser.parse_known_args()
    if args.commander:
        commander(args.commander, names)
        return
    if names:
        parser.error(f"unrecognized arguments: {' '.join(names)}")
    # the emulator thread shares the GIL with the bridge, as sim_identify arranges
    sys.setswitchinterval(0.0005)
    python = shutil.which("python3") or sys.executable
    hogs = [subprocess.Popen([python, "-c", "while True: pass"]) for _ in range(args.load)]
    try:
        time.sleep(0.5 if hogs else 0.0)
        print(f"virtual OpenArm-class arm, 7 motors; bridge and emulated motors in this process, commander in its "
              f"own; {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}, {args.load} busy loops beside, "
              + (f"SCHED_FIFO {args.fifo}" if args.fifo else "normal scheduling") + f"; {args.seconds:g} s per rate")
        results = {rate: measure(rate, args.seconds, args.fifo, hogs) for rate in args.rates}
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    print("\nperiod: jitter |t_k - t_(k-1) - T| in ms (% of T); overruns (% of cycles); missed periods (% of the "
          "periods); cycle duration; CPU of this process (bridge, emulated motors) and of every other process on "
          "the machine but the busy loops and the commander, in % of a core")
    print(f"{'rate Hz':>7} | {'cycles':>6} | {'jitter p50':>14} | {'jitter p99':>14} | {'jitter max':>14} | "
          f"{'overruns':>14} | {'missed':>14} | {'busy p50 / p99 ms':>17} | {'CPU':>5} | others")
    for rate, f in results.items():
        period = 1.0 / rate
        jitter = " | ".join(f"{j * 1e3:6.3f} ({100 * j / period:3.0f} %)" for j in percentiles(f["jitter"]))
        counts = (f"{f['overruns']:5d} ({100 * f['overruns'] / f['cycles']:4.2f} %) | "
                  f"{f['missed']:5d} ({100 * f['missed'] / f['expected']:4.2f} %)")
        busy = " / ".join(f"{b * 1e3:7.3f}" for b in percentiles(f["busy"], (50, 99)))
        print(f"{rate:7.0f} | {f['cycles']:6d} | {jitter} | {counts} | {busy} | {100 * f['cpu']:3.0f} % | "
              f"{100 * f['others']:3.0f} %")
    print("\nfeedback age: reply to publication; longest time a motor went without a tracking frame, against "
          "command_timeout_s; faults latched (cleared during the warm-up); simulated time the emulator dropped")
    print(f"{'rate Hz':>7} | {'feedback age p50 / p99 / max ms':>31} | {'without a tracking frame':>36} | "
          f"{'faults':>6} | dropped")
    for rate, f in results.items():
        age = " / ".join(f"{a * 1e3:7.3f}" for a in percentiles(f["age"]))
        verdict = "within" if f["gap"] <= f["timeout"] else "BEYOND"
        gap = f"{f['gap'] * 1e3:.1f} ms ({f['gap_joint']}), {verdict} {f['timeout'] * 1e3:.0f} ms"
        print(f"{rate:7.0f} | {age:>31} | {gap:>36} | {len(f['faults']):2d} ({f['cleared']}) | "
              f"{f['dropped'] * 1e3:.0f} ms" + "".join(f"\n        {fault}" for fault in f["faults"]))


if __name__ == "__main__":
    main()
