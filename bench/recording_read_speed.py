"""Reading recordings: how fast a rosbag2 bag of sensor_msgs/JointState and a CSV turn into a Recording.

A bag of ``--duration`` s at 1 kHz of a 7-joint arm (plus a 9-joint name list, as a driver
with a gripper publishes it, and a second topic at the same rate that the reader must skip)
is written with write_rosbag-like messages, MCAP and sqlite3, then read by read_rosbag; the
same samples as CSV by read_csv. Prints messages per second and the peak memory the read
added (tracemalloc), which should follow the samples kept, not the bag's size.

Run: ``make bench`` or ``python bench/recording_read_speed.py [--duration 60]``.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rosbags.rosbag2 import StoragePlugin, Writer  # noqa: E402
from rosbags.typesys import Stores, get_typestore  # noqa: E402

from sysid_core.identification import recording_files as rf  # noqa: E402

JOINT_STATE = "sensor_msgs/msg/JointState"


def write_bag(path: Path, count: int, storage) -> None:
    types = get_typestore(Stores.ROS2_JAZZY)
    js, header, stamp_t = (types.types[t] for t in (JOINT_STATE, "std_msgs/msg/Header", "builtin_interfaces/msg/Time"))
    string = types.types["std_msgs/msg/String"]
    names = [f"joint{j}" for j in range(1, 8)] + ["finger1", "finger2"]
    rng = np.random.default_rng(0)
    noise = types.serialize_cdr(string(data="x" * 200), "std_msgs/msg/String")
    with Writer(path, version=9, storage_plugin=storage) as writer:
        joints = writer.add_connection("/joint_states", JOINT_STATE, typestore=types)
        other = writer.add_connection("/diagnostics_text", "std_msgs/msg/String", typestore=types)
        for k in range(count):
            stamp = 1_700_000_000_000_000_000 + k * 1_000_000
            values = rng.standard_normal((3, 9))
            msg = js(header=header(stamp=stamp_t(sec=stamp // 10**9, nanosec=stamp % 10**9), frame_id=""),
                     name=names, position=values[0], velocity=values[1], effort=values[2])
            writer.write(joints, stamp, types.serialize_cdr(msg, JOINT_STATE))
            writer.write(other, stamp, noise)


def timed(label: str, count: int, read) -> None:
    """Time one read, then measure its peak memory in a second one (tracemalloc slows Python
    code several times over, so it must not run while timing)."""
    started = time.perf_counter()
    loaded = read()
    elapsed = time.perf_counter() - started
    tracemalloc.start()
    read()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    samples = loaded.recording.n_samples
    print(f"  {label:8s} {count} messages in {elapsed:6.2f} s: {count / elapsed:8.0f} messages/s; "
          f"{samples} samples kept; peak memory {peak / 1e6:6.1f} MB ({peak / samples:.0f} B per sample)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=60.0, help="recording length at 1 kHz, s (default 60)")
    args = parser.parse_args()
    count = int(args.duration * 1000)
    joints = [f"joint{j}" for j in range(1, 8)]
    print(f"{args.duration:g} s at 1 kHz, 7 of 9 joints kept, a second topic at the same rate:")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for name, storage in (("mcap", StoragePlugin.MCAP), ("sqlite3", StoragePlugin.SQLITE3)):
            write_bag(tmp / name, count, storage)
            size = sum(f.stat().st_size for f in (tmp / name).iterdir())
            print(f"  {name} bag: {size / 1e6:.1f} MB")
            timed(name, count, lambda n=name: rf.read_rosbag(tmp / n, joints))
        rf.write_csv(tmp / "r.csv", rf.read_rosbag(tmp / "mcap", joints).recording)
        timed("csv", count, lambda: rf.read_csv(tmp / "r.csv", joints))


if __name__ == "__main__":
    main()
