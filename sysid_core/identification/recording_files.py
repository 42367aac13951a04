"""Recordings in files: rosbag2 bags of sensor_msgs/JointState (MCAP or sqlite3) and CSV.

Bags are read and written with the pure-Python ``rosbags`` package: no ROS installation.
A bag is read message by message, only its JointState topic: memory grows with the
samples kept, not with the bag's other topics.

Screening, the same for every source (:class:`JointStateLog`): a message or row is kept
when it carries every wanted joint once, with position, velocity and effort, all finite,
stamped after the last one kept. Anything else is dropped and counted by reason, never
silently; nothing usable at all is a DataError that gives the counts.

CSV layout (what :func:`write_csv` writes): optional ``#`` comment lines, a header
``time,<joint>_position,<joint>_velocity,<joint>_effort,...`` (columns in any order, other
columns ignored), then one row per sample; time in s, position rad (m), velocity rad/s
(m/s), effort N m (N), the joint torque. An arm with a motor-side encoder as well adds
``<joint>_motor_position`` for every joint: the motor's position in joint units (motor angle /
gear ratio, the joint's zero and sign), rad; the recording then carries ``motor_q``. An empty
cell there means not measured at that sample (NaN in ``motor_q``; a drive whose motor side is
read slower than its joint state).

Several files make one Recording of separate stretches (:func:`concatenate`): each file
after the first is shifted in time to start after a gap that ``filtering.prepare`` always
cuts at, so nothing is filtered or differentiated across a seam.
"""
from __future__ import annotations

import csv
import itertools
import math
import time as wall
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import DataError
from .filtering import MAX_GAP_PERIODS
from .recording import Recording

STAMPS = ("header", "receive")
JOINT_STATE = "sensor_msgs/msg/JointState"
FIELDS = ("position", "velocity", "effort")
CSV_CHUNK = 16384  # rows of a CSV parsed at once
MOTOR_FIELD = "motor_position"
# seconds between stretches, beyond the MAX_GAP_PERIODS sample periods prepare() cuts at
SEAM_S = 1.0


@dataclass(frozen=True, eq=False)
class LoadedRecording:
    """A Recording read from files, with its screening counts.

    ``recording`` in the wanted joints' order, time from 0 s at the first sample kept;
    ``messages`` messages (rows) read; ``dropped`` {reason: count}; ``stretches`` the index of
    each file's first sample in ``recording``; ``files`` the paths, in order; ``origins`` the
    stamp of each file's first sample kept, s on the stamps' own clock (epoch for a bridge's
    bags): add it to a stretch's times to line them up with other logs of that clock.
    """

    recording: Recording
    messages: int
    dropped: dict
    stretches: tuple = (0,)
    files: tuple = ()
    origins: tuple = ()

    def summary(self) -> str:
        """One line: samples kept, what was dropped and why."""
        kept = f"{self.recording.n_samples} samples of {len(self.recording.joint_names)} joints kept " \
               f"from {self.messages} messages"
        if len(self.files) > 1:
            kept += f" in {len(self.files)} files"
        if not self.dropped:
            return kept
        return kept + "; dropped: " + ", ".join(f"{count} {reason}" for reason, count in self.dropped.items())


class JointStateLog:
    """Joint states of the wanted joints, screened message by message; what the bag reader, the
    CSV reader (and a node's recorder) feed.

    ``joint_names`` the joints to keep, in this order; None takes the names of the first
    complete message. ``motor``: every sample carries the motor-side positions too (``add``'s
    ``motor_position``; NaN where a joint's was not measured at that sample, counted in
    ``motor_unmeasured``). Rows are stored in one array grown by doubling.
    """

    def __init__(self, joint_names=None, motor: bool = False):
        self.joint_names = None if joint_names is None else tuple(joint_names)
        self.motor = bool(motor)
        self.messages = 0
        self.motor_unmeasured = 0  # samples kept without every joint's motor-side position
        self.dropped: dict = {}
        self._stamps = np.empty(0, dtype=np.int64)
        self._rows = np.empty((0, 0))
        self._size = 0
        self._layouts: dict = {}
        self._incomplete: dict = {}

    def _drop(self, reason: str) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + 1

    def reject(self, reason: str) -> None:
        """Count a message dropped before it could be screened (``reason`` starts "with ...")."""
        self.messages += 1
        self._drop(reason)

    def _layout(self, names: tuple):
        """Indices of the wanted joints in a message's name list, or the reason it cannot serve."""
        layout = self._layouts.get(names)
        if layout is None:
            if len(set(names)) != len(names):
                layout = "with duplicate joint names"
            else:
                wanted = self.joint_names if self.joint_names is not None else names
                missing = [j for j in wanted if j not in names]
                layout = (f"without the joints {missing}" if missing
                          else np.array([names.index(j) for j in wanted]))
            if len(self._layouts) < 64:  # a recorder sees one or two name lists; bound abuse
                self._layouts[names] = layout
        return layout

    def add(self, stamp_ns: int, names, position, velocity, effort, motor_position=()) -> bool:
        """Screen one joint-state sample (stamp in ns; names (m,); position, velocity, effort
        and, for a ``motor`` log, motor_position (m,) each); True when kept, else counted in
        ``dropped``."""
        self.messages += 1
        names = tuple(names)
        m = len(names)
        sizes = (len(position), len(velocity), len(effort)) + ((len(motor_position),) if self.motor else ())
        if sizes != (m,) * len(sizes):
            empty = [f for f, s in zip(FIELDS + (MOTOR_FIELD,), sizes) if s == 0]
            self._drop(f"without {'/'.join(empty)} values" if empty else
                       f"with {'/'.join(FIELDS + (MOTOR_FIELD,) * self.motor)} lengths that differ from the names'")
            return False
        layout = self._layout(names)
        if isinstance(layout, str):
            self._drop(layout)
            return False
        if self.joint_names is None:
            self.joint_names = names
        values = np.concatenate([np.asarray(field, dtype=float)[layout] for field in
                                 (position, velocity, effort) + ((motor_position,) if self.motor else ())])
        n = layout.size
        if not np.all(np.isfinite(values[:3 * n])) or np.any(np.isinf(values[3 * n:])):
            self._drop("with NaN or infinite values")
            return False
        unmeasured = self.motor and bool(np.isnan(values[3 * n:]).any())
        if self._size and stamp_ns <= self._stamps[self._size - 1]:
            self._drop("with a stamp repeated or earlier than the previous one")
            return False
        if self._size == len(self._stamps):
            capacity = max(1024, 2 * self._size)
            self._stamps = np.resize(self._stamps, capacity)
            rows = np.empty((capacity, values.size))
            if self._size:
                rows[:self._size] = self._rows[:self._size]
            self._rows = rows
        self._stamps[self._size] = int(stamp_ns)
        self._rows[self._size] = values
        self._size += 1
        self.motor_unmeasured += unmeasured
        return True

    def extend(self, stamps: np.ndarray, values: np.ndarray) -> bool:
        """Add many samples of the log's own joints at once when every one of them passes the
        screening (``stamps`` (k,) ns increasing after the last kept one; ``values`` (k, 3n) or
        (k, 4n) position, velocity, effort [and motor position], all finite): True when added,
        False (nothing added or counted) otherwise: screen them one by one with ``add``."""
        stamps, values = np.asarray(stamps, dtype=np.int64), np.asarray(values, dtype=float)
        n = len(self.joint_names)
        if values.shape != (stamps.size, (4 if self.motor else 3) * n) or not np.all(np.isfinite(values)):
            return False
        if stamps.size == 0 or np.any(np.diff(stamps) <= 0) or (self._size and stamps[0] <= self._stamps[self._size - 1]):
            return stamps.size == 0
        needed = self._size + stamps.size
        if needed > len(self._stamps):
            capacity = max(1024, 2 * self._size, needed)
            self._stamps = np.resize(self._stamps, capacity)
            rows = np.empty((capacity, values.shape[1]))
            if self._size:
                rows[:self._size] = self._rows[:self._size]
            self._rows = rows
        self._stamps[self._size:needed] = stamps
        self._rows[self._size:needed] = values
        self._size = needed
        self.messages += stamps.size
        return True

    @property
    def n_samples(self) -> int:
        return self._size

    @property
    def origin(self) -> float:
        """The first sample's stamp, s (time 0 of ``recording``); NaN before any."""
        return self._stamps[0] * 1e-9 if self._size else math.nan

    def recording(self, what: str = "the recording") -> Recording:
        """The samples kept as a Recording, time in s from the first one; DataError when none."""
        if self._size == 0:
            counts = ", ".join(f"{c} {r}" for r, c in self.dropped.items()) or "none"
            raise DataError(f"no usable joint states in {what}: {self.messages} messages, dropped: {counts}")
        n = len(self.joint_names)
        rows = self._rows[:self._size]
        time_s = (self._stamps[:self._size] - self._stamps[0]) * 1e-9
        return Recording(time_s, rows[:, :n].copy(), rows[:, n:2 * n].copy(), rows[:, 2 * n:3 * n].copy(),
                         self.joint_names, motor_q=rows[:, 3 * n:].copy() if self.motor else None)


# --------------------------------------------------------------------------- rosbag2

def _typestore():
    from rosbags.typesys import Stores, get_typestore
    # sensor_msgs/JointState is the same message in every ROS 2 distribution
    return get_typestore(Stores.ROS2_JAZZY)


def read_rosbag(path, joint_names=None, topic: str = "/joint_states", stamps: str = "header",
                motor_topic: str | None = None) -> LoadedRecording:
    """The JointState messages on ``topic`` of a rosbag2 bag (a bag directory, or its .mcap
    or .db3 file), screened (JointStateLog) into a Recording of ``joint_names``.

    ``stamps``: "header" uses each message's header stamp (when the driver sampled it;
    messages stamped 0 are dropped and counted), "receive" the time the recorder received
    it. ``motor_topic``: a second JointState topic whose positions are the motor-side encoders'
    (in joint units), each message stamped like the joint state it belongs to (header stamps
    only: a driver publishes both from one reading, or reads the motor side at some samples
    only); a joint state without a motor-side message of its stamp, or a joint that message does
    not name, has NaN there (not measured; counted in the log's ``motor_unmeasured``). DataError for an
    unreadable bag, a missing topic, another message type.
    """
    from rosbags.rosbag2 import Reader

    if stamps not in STAMPS:
        raise ValueError(f"stamps must be one of {STAMPS}, got '{stamps}'")
    if motor_topic is not None and stamps != "header":
        raise DataError("a motor-side topic is matched to the joint states by header stamp: use --stamps header")
    path = Path(path)
    log = JointStateLog(joint_names, motor=motor_topic is not None)
    try:
        with Reader(path) as reader:
            deserialize = _typestore().deserialize_cdr
            motor = None
            if motor_topic is not None:
                motor = _motor_positions(reader, _connections(reader, path, motor_topic), deserialize,
                                         log.joint_names)
            for _, received_ns, raw in reader.messages(connections=_connections(reader, path, topic)):
                msg = deserialize(raw, JOINT_STATE)
                if stamps == "header":
                    stamp = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
                    if stamp == 0:
                        log.reject("with a zero header stamp (the driver does not stamp: try --stamps receive)")
                        continue
                else:
                    stamp = received_ns
                if motor is None:
                    log.add(stamp, msg.name, msg.position, msg.velocity, msg.effort)
                    continue
                stamps_ns, names, positions = motor
                at = int(np.searchsorted(stamps_ns, stamp))
                if at == stamps_ns.size or stamps_ns[at] != stamp:  # not measured with this one
                    log.add(stamp, msg.name, msg.position, msg.velocity, msg.effort, [math.nan] * len(msg.name))
                    continue
                by_name = dict(zip(names, positions[at]))
                log.add(stamp, msg.name, msg.position, msg.velocity, msg.effort,
                        [by_name.get(name, math.nan) for name in msg.name])
    except DataError:
        raise
    except Exception as err:  # rosbags raises its own, OSError, ValueError, KeyError for a broken bag
        raise DataError(f"cannot read bag {path}: {type(err).__name__}: {' '.join(str(err).split())}") from None
    return LoadedRecording(log.recording(f"{topic} of {path}"), log.messages, dict(log.dropped), (0,), (path,),
                           (log.origin,))


def _connections(reader, path: Path, topic: str) -> list:
    """The bag's connections of ``topic``; DataError when there are none or they are no JointState."""
    connections = [c for c in reader.connections if c.topic == topic]
    if not connections:
        topics = sorted({f"{c.topic} ({c.msgtype})" for c in reader.connections})
        raise DataError(f"bag {path} has no topic {topic}; its topics: {', '.join(topics) or 'none'}")
    types = sorted({c.msgtype for c in connections})
    if types != [JOINT_STATE]:
        raise DataError(f"topic {topic} in {path} carries {', '.join(types)}, not {JOINT_STATE}")
    return connections


def _motor_positions(reader, connections, deserialize, joint_names) -> tuple:
    """(stamps (M,) int64 ns, sorted; joint names (m,); positions (M, m) rad) of the motor-side
    messages, in the joint order of the first one; a message naming other joints counts as
    missing (NaN). Kept as arrays: an hour at 1 kHz is 3.6 million rows."""
    stamps, rows, names = [], [], None
    for _, _, raw in reader.messages(connections=connections):
        msg = deserialize(raw, JOINT_STATE)
        if names is None:
            names = tuple(joint_names) if joint_names is not None else tuple(msg.name)
        position = dict(zip(msg.name, msg.position)) if len(msg.position) == len(msg.name) else {}
        stamps.append(msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec)
        rows.append([position.get(name, math.nan) for name in names])
    stamps_ns = np.asarray(stamps, dtype=np.int64)
    order = np.argsort(stamps_ns, kind="stable")
    return stamps_ns[order], names or (), np.asarray(rows, dtype=float).reshape(len(stamps), -1)[order]


def write_rosbag(path, recording: Recording, topic: str = "/joint_states", storage: str = "mcap",
                 start_ns: int | None = None, motor_topic: str = "motor_states") -> Path:
    """Write ``recording`` as a rosbag2 bag directory ``path`` (which must not exist) of
    sensor_msgs/JointState messages on ``topic``, ``storage`` "mcap" or "sqlite3"; a recording
    with motor-side positions also gets them on ``motor_topic``, position only, same stamps,
    naming at each sample the joints whose motor side was measured (none: no message).

    Header stamps (and receive times) are ``start_ns`` + time; by default the recording's
    own times when they are wall-clock stamps (after 2001), else the current time.
    """
    from rosbags.rosbag2 import StoragePlugin, Writer

    plugins = {"mcap": StoragePlugin.MCAP, "sqlite3": StoragePlugin.SQLITE3}
    if storage not in plugins:
        raise ValueError(f"storage must be one of {list(plugins)}, got '{storage}'")
    path = Path(path)
    if path.exists():
        raise DataError(f"{path} exists already: a bag is written to a new directory")
    time_s = np.asarray(recording.time, dtype=float)
    if start_ns is None:
        start_ns = 0 if time_s.size and time_s[0] > 1e9 else wall.time_ns() - int(round(time_s[0] * 1e9))
    stamps = start_ns + np.round(time_s * 1e9).astype(np.int64)
    typestore = _typestore()
    types = typestore.types
    joint_state, header, stamp_type = types[JOINT_STATE], types["std_msgs/msg/Header"], types["builtin_interfaces/msg/Time"]
    names = list(recording.joint_names)
    q, dq, tau = (np.asarray(a, dtype=float) for a in (recording.q, recording.dq, recording.tau))
    with Writer(path, version=9, storage_plugin=plugins[storage]) as writer:
        connection = writer.add_connection(topic, JOINT_STATE, typestore=typestore)
        motor = None
        if recording.motor_q is not None:
            motor = writer.add_connection(motor_topic, JOINT_STATE, typestore=typestore)
            motor_q, empty = np.asarray(recording.motor_q, dtype=float), np.zeros(0)
            measured = np.isfinite(motor_q)
        for k, stamp in enumerate(stamps.tolist()):
            stamped = header(stamp=stamp_type(sec=stamp // 1_000_000_000, nanosec=stamp % 1_000_000_000), frame_id="")
            msg = joint_state(header=stamped, name=names, position=q[k], velocity=dq[k], effort=tau[k])
            writer.write(connection, stamp, typestore.serialize_cdr(msg, JOINT_STATE))
            if motor is not None and measured[k].any():
                msg = joint_state(header=stamped, name=[j for j, m in zip(names, measured[k]) if m],
                                  position=motor_q[k, measured[k]], velocity=empty, effort=empty)
                writer.write(motor, stamp, typestore.serialize_cdr(msg, JOINT_STATE))
    return path


# --------------------------------------------------------------------------- CSV

def read_csv(path, joint_names=None) -> LoadedRecording:
    """A recording CSV (layout in the module docstring), screened like bag messages: rows with
    an empty or non-numeric cell, NaN, or a time not after the previous row's are dropped
    and counted. DataError for a missing file, header or column."""
    path = Path(path)
    try:
        with path.open(newline="") as f:
            lines = (line for line in f if line.strip() and not line.lstrip().startswith("#"))
            reader = csv.reader(lines)
            header = [h.strip() for h in next(reader, [])]
            if "time" not in header:
                raise DataError(f"{path}: no header with a 'time' column (expected time,<joint>_position,"
                                f"<joint>_velocity,<joint>_effort,...; got {header[:6]})")
            # a joint's motor-side column is no joint of its own
            available = [h[:-len("_position")] for h in header if h.endswith("_position") and not (
                h.endswith(f"_{MOTOR_FIELD}") and f"{h[:-len(MOTOR_FIELD) - 1]}_position" in header)]
            wanted = tuple(joint_names) if joint_names is not None else tuple(available)
            missing = [f"{j}_{f}" for j in wanted for f in FIELDS if f"{j}_{f}" not in header]
            if missing or not wanted:
                raise DataError(f"{path}: the columns {missing or ['<joint>_position', '...']} are missing; "
                                f"joints in the file: {available}")
            motor = [j for j in wanted if f"{j}_{MOTOR_FIELD}" in header]
            if motor and len(motor) != len(wanted):
                raise DataError(f"{path}: motor-side positions for {motor} only; a double-encoder recording needs "
                                f"{[f'{j}_{MOTOR_FIELD}' for j in wanted if j not in motor]} as well")
            fields = FIELDS + ((MOTOR_FIELD,) if motor else ())
            time_col = header.index("time")
            cols = [[header.index(f"{j}_{f}") for j in wanted] for f in fields]
            log = JointStateLog(wanted, motor=bool(motor))
            columns = [time_col] + [c for group in cols for c in group]
            # chunks of clean rows in bulk (NumPy's parser, the same values); any chunk with a row
            # the screening would look at twice (a bad cell, NaN, a stamp out of order) row by row
            while chunk := list(itertools.islice(lines, CSV_CHUNK)):
                try:
                    table = np.loadtxt(chunk, delimiter=",", usecols=columns, ndmin=2)
                except (ValueError, IndexError):
                    table = None
                if table is not None and np.all(np.isfinite(table[:, 0])) and log.extend(
                        np.round(table[:, 0] * 1e9).astype(np.int64), table[:, 1:]):
                    continue
                for row in csv.reader(chunk):
                    try:
                        t = float(row[time_col])
                        values = [[float(row[c]) for c in group] for group in cols[:3]]
                        # an empty motor-side cell: not measured at that sample
                        values += [[float(row[c]) if row[c].strip() else math.nan for c in group]
                                   for group in cols[3:]]
                    except (ValueError, IndexError):
                        log.reject("with a missing or non-numeric value")
                        continue
                    if not math.isfinite(t):
                        log.reject("with NaN or infinite values")
                        continue
                    log.add(int(round(t * 1e9)), wanted, *values)
    except OSError as err:
        raise DataError(f"cannot read {path}: {err.strerror or err}") from None
    except UnicodeDecodeError:
        raise DataError(f"{path} is not a text CSV file") from None
    return LoadedRecording(log.recording(str(path)), log.messages, dict(log.dropped), (0,), (path,), (log.origin,))


def write_csv(path, recording: Recording) -> Path:
    """Write ``recording`` as a recording CSV; values to 17 significant digits (exact round trip)."""
    path = Path(path)
    names = recording.joint_names
    fields = FIELDS + ((MOTOR_FIELD,) if recording.motor_q is not None else ())
    header = ["time"] + [f"{j}_{f}" for j in names for f in fields]
    signals = [np.asarray(a, dtype=float) for a in (recording.q, recording.dq, recording.tau, recording.motor_q)
               if a is not None]
    # per joint: position, velocity, effort (and motor position)
    table = np.column_stack([np.asarray(recording.time, dtype=float)] +
                            [a[:, j] for j in range(len(names)) for a in signals])
    with path.open("w", newline="") as f:
        f.write(",".join(header) + "\n")
        np.savetxt(f, table, delimiter=",", fmt="%.17g")
    return path


# --------------------------------------------------------------------------- several files

def concatenate(recordings) -> tuple[Recording, tuple]:
    """One Recording of several, each a stretch of its own: (recording, index of each one's
    first sample). Every stretch after the first starts SEAM_S plus MAX_GAP_PERIODS of the
    longest median sample period after the previous one ends, a gap filtering.prepare cuts at.
    Joints must match (select them first)."""
    recordings = list(recordings)
    names = recordings[0].joint_names
    for r in recordings[1:]:
        if r.joint_names != names:
            raise DataError(f"recordings with different joints cannot be joined: {list(names)} and {list(r.joint_names)}")
    periods = [float(np.median(np.diff(r.time))) for r in recordings if r.n_samples > 1]
    gap = SEAM_S + 2 * MAX_GAP_PERIODS * max(periods, default=0.0)
    times, starts, end = [], [], None
    count = 0
    for r in recordings:
        t = np.asarray(r.time, dtype=float)
        shift = 0.0 if end is None else end + gap - t[0]
        times.append(t + shift)
        end = times[-1][-1]
        starts.append(count)
        count += r.n_samples
    motor = [r.motor_q is not None for r in recordings]
    if any(motor) and not all(motor):
        raise DataError("recordings with and without motor-side positions cannot be joined")
    join = (lambda field_name: np.concatenate([np.asarray(getattr(r, field_name), dtype=float) for r in recordings]))
    return Recording(np.concatenate(times), join("q"), join("dq"), join("tau"), names,
                     motor_q=join("motor_q") if all(motor) else None), tuple(starts)


def read_recordings(paths, joint_names, topic: str = "/joint_states", stamps: str = "header",
                    motor_topic: str | None = None) -> LoadedRecording:
    """Bags and CSV files (by name: a .csv file is a CSV, anything else a bag) as one
    LoadedRecording of ``joint_names``, each file a stretch of its own (concatenate); bags with
    their motor-side positions from ``motor_topic`` when given (CSV files carry theirs as
    columns)."""
    loaded = []
    for path in (Path(p) for p in paths):
        if not path.exists():
            raise DataError(f"recording not found: {path}")
        loaded.append(read_csv(path, joint_names) if path.suffix.lower() == ".csv"
                      else read_rosbag(path, joint_names, topic, stamps, motor_topic))
    recording, starts = concatenate([item.recording for item in loaded])
    dropped: dict = {}
    for item in loaded:
        for reason, count in item.dropped.items():
            dropped[reason] = dropped.get(reason, 0) + count
    return LoadedRecording(recording, sum(i.messages for i in loaded), dropped, starts,
                           tuple(p for i in loaded for p in i.files), tuple(o for i in loaded for o in i.origins))
