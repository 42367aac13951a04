"""A recording being made from a stream of joint samples: what a recorder (the identifier node)
keeps of the messages it receives, and the Recording it hands to an identification at any
moment while the stream goes on.

``LiveRecording`` holds the latest samples in a ring allocated once (``SampleBuffer``), screens
each message on its own (screening: names, finite values, stamps) and counts what it refused,
by kind with the first and the last of each. ``snapshot`` turns the samples into one Recording
(a stretch of its own after each jump of the source's clock) with the counts at that moment;
``saved_recording`` counts a recording file the same way. A double-encoder arm's motor-side
positions (``add_motor``, a stream of their own, any subset of the joints per message) are
kept in a second ring, allocated at the first of them, and matched to the joint samples by stamp
at ``snapshot``: NaN where a joint's motor side came with no sample of that stamp (read at some
samples only, or lost). The effort is kept as received:
``joint_torque`` turns it into joint torque at identification time (``EFFORT_MODES``), so the
same samples can be identified again under another reading of the effort.
"""
from __future__ import annotations

import math
from array import array
import threading
from dataclasses import dataclass

import numpy as np

from ..dynamics.model import Robot
from ..errors import DataError
from . import screening
from .recording import Recording
from .recording_files import LoadedRecording

# what a message's effort field holds: joint torque (N m), motor current (A: times torque
# constant and gear ratio), or joint torque less the nominal model's gravity torque
EFFORT_MODES = ("torque", "current", "gravity_compensated")
# distinct name lists remembered; a driver uses one, so this only bounds abuse
MAX_NAME_LAYOUTS = 64
# samples per regressor evaluation for the gravity torque: the regressor holds n * 10 nb
# doubles per sample (3.9 kB for 7 joints), so memory stays ~40 MB
GRAVITY_CHUNK = 10_000
# what ``add`` reports besides screening's kinds: the recording's first sample had no stamp,
# its times (and those of every later sample) are receive times
RECEIVE_STAMPED = "receive-stamped"
_NS_PER_S = 1_000_000_000


class SampleBuffer:
    """The latest ``capacity`` joint samples, in one array preallocated at construction.

    Row layout: [stamp (s), then ``fields`` blocks of n values], columns in ``joint_names``
    order: by default q (n) rad, dq (n) rad/s, effort (n) as received. When full, each new
    sample overwrites the oldest.
    """

    def __init__(self, capacity: int, joint_names, fields: int = 3):
        self.joint_names = tuple(joint_names)
        self.fields = int(fields)
        self.data = np.zeros((int(capacity), 1 + self.fields * len(self.joint_names)))
        self.clear()

    @property
    def capacity(self) -> int:
        return self.data.shape[0]

    @property
    def nbytes(self) -> int:
        return self.data.nbytes

    def clear(self) -> None:
        self.head = 0  # row the next sample goes to
        self.size = 0
        self.overwritten = 0

    def next_row(self) -> np.ndarray:
        """The row (1 + fields n,) to fill with the next sample, a view into the buffer."""
        row = self.data[self.head]
        self.head = (self.head + 1) % self.capacity
        if self.size == self.capacity:
            self.overwritten += 1
        else:
            self.size += 1
        return row

    def append(self, rows: np.ndarray) -> None:
        """Write ``rows`` (m, 1 + fields n) as the next m samples, the oldest overwritten when full."""
        m, capacity = rows.shape[0], self.capacity
        self.overwritten += max(0, self.size + m - capacity)
        self.size = min(capacity, self.size + m)
        if m > capacity:  # only the newest capacity rows stay
            self.head = (self.head + m - capacity) % capacity
            rows, m = rows[-capacity:], capacity
        first = min(m, capacity - self.head)
        self.data[self.head:self.head + first] = rows[:first]
        self.data[:m - first] = rows[first:]
        self.head = (self.head + m) % capacity

    def chronological(self) -> tuple:
        """Copies of the samples, oldest first: time (N,) s, then each field (N, n) (q, dq,
        effort by default), each contiguous; one copy of the buffer in all (the recording goes on
        while they are used)."""
        start = (self.head - self.size) % self.capacity
        if start + self.size <= self.capacity:
            pieces = (self.data[start:start + self.size],)
        else:  # wrapped: the oldest rows are at the end
            pieces = (self.data[start:], self.data[:self.head])
        n = len(self.joint_names)
        columns = (0,) + tuple(slice(1 + f * n, 1 + (f + 1) * n) for f in range(self.fields))
        return tuple(np.concatenate([piece[:, c] for piece in pieces]) for c in columns)


@dataclass(frozen=True)
class RecordingCounts:
    """What became of the messages of a recording, at one moment.

    ``received`` messages since the recording started; ``recorded`` samples in the Recording
    handed over (stretches of fewer than 3 samples dropped); ``rejected`` messages refused and
    ``rejections`` kind -> {"count", and for a live recording "first" and "last": "message k:
    what"}; ``overwritten`` samples dropped when the buffer was full; ``stretches`` parts
    cut where the source's clock jumped; ``missing`` samples lost in the holes of the stamps,
    None for receive times (no holes to count). ``motor``: for a recording with motor-side
    positions, {"received", "rejected", "rejections" (as above), "matched": joint samples recorded
    with every joint's motor side}, else None.
    """

    received: int
    recorded: int
    rejected: int
    rejections: dict
    overwritten: int
    stretches: int
    missing: int | None
    motor: dict | None = None


class LiveRecording:
    """The latest ``capacity`` samples of a stream of joint-state messages, screened one by one.

    ``start`` names the joints to record (the model's) and allocates the buffer; each message
    is then handed to ``add``, which keeps it or refuses it on its own (screening's kinds),
    counting both. ``received``, ``rejected``, ``rejections`` (kind -> {"count", "first",
    "last"}), ``last_rejection``, ``receive_stamped`` and the buffer's ``stored`` and
    ``overwritten`` describe the recording so far; ``clear`` starts a new one. ``add_motor``
    takes the motor-side positions of a double-encoder arm, counted in ``motor_received``,
    ``motor_rejected`` and ``motor_rejections``.

    Thread safety: the receiving thread (``add``, ``refuse``, ``start``, ``clear``) and another
    one taking ``snapshot`` may run in parallel; ``lock`` guards the buffer and the counters.
    """

    def __init__(self, capacity: int):
        self.capacity = int(capacity)
        self.lock = threading.Lock()
        self.buffer: SampleBuffer | None = None
        self.motor: SampleBuffer | None = None  # allocated at the first motor-side message
        self._layouts = {}  # name tuple -> indices into [position|velocity|effort], or (kind, reason)
        self._forget()

    def _forget(self) -> None:
        """Counters and screening state of a new recording."""
        self.received = 0
        self.rejected = 0
        self.last_rejection = None
        self.rejections = {}  # kind -> {"count", "first", "last"} (screening's few kinds)
        self.receive_stamped = False
        self._last_ns = None  # stamp of the last sample kept, ns
        self.motor_received = 0
        self.motor_rejected = 0
        self.motor_rejections = {}
        self._last_motor_ns = None

    @property
    def joint_names(self) -> tuple | None:
        """The joints recorded, in buffer column order; None before ``start``."""
        return None if self.buffer is None else self.buffer.joint_names

    @property
    def last_stamp_ns(self) -> int | None:
        """The stamp of the last sample kept, ns; None before any."""
        return self._last_ns

    @property
    def stored(self) -> int:
        return 0 if self.buffer is None else self.buffer.size

    @property
    def overwritten(self) -> int:
        return 0 if self.buffer is None else self.buffer.overwritten

    def start(self, joint_names) -> None:
        """Record ``joint_names`` (n,): the buffer of ``capacity`` rows is allocated here, unless
        the current one already has these joints."""
        joint_names = tuple(joint_names)
        with self.lock:
            if self.buffer is None or self.buffer.joint_names != joint_names:
                self.buffer = self.motor = None  # freed before the next is allocated: one buffer in memory
                self.buffer = SampleBuffer(self.capacity, joint_names)
                self._layouts.clear()

    def clear(self) -> None:
        """Forget the samples and the counters; the joints and the buffer stay."""
        with self.lock:
            if self.buffer is not None:
                self.buffer.clear()
            if self.motor is not None:
                self.motor.clear()
            self._forget()

    def refuse(self, kind: str, detail: str) -> tuple[str, str]:
        """Count a message refused before it could be screened (e.g. screening.NO_MODEL before
        ``start``); returns (kind, "message k: detail") as ``add`` does."""
        with self.lock:
            self.received += 1
            return self._reject(kind, detail)

    def add(self, names: tuple, stamp_ns: int, position, velocity, effort, unstamped: bool = False):
        """Screen one message and keep its sample unless refused; only after ``start``.

        ``names`` (m,) the message's joint names (any order, extra joints ignored);
        ``stamp_ns`` its stamp, ns (the receive time when ``unstamped``: the message had
        none); ``position`` rad, ``velocity`` rad/s, ``effort`` (m,) each, array.array('d') as
        rclpy hands JointState's fields. Returns None when the sample was kept and there is
        nothing to say, else (kind, text): a refusal (screening's kinds, text "message k:
        what"; nothing kept), screening.NEW_STRETCH (kept: the clock jumped back, text
        "message k: stamps") or RECEIVE_STAMPED (kept: the recording's first sample, unstamped).
        """
        with self.lock:
            self.received += 1
            m = len(names)
            if len(position) != m or len(velocity) != m or len(effort) != m:
                return self._reject(*_incomplete(m, (len(position), len(velocity), len(effort))))
            layout = self._layouts.get(names)
            if layout is None:
                layout = self._layout(names)
            if isinstance(layout, tuple):
                return self._reject(*layout)
            last_ns = self._last_ns
            if last_ns is not None and unstamped != self.receive_stamped:
                return self._reject(screening.STAMP_KIND, "no header stamp in a recording of stamped messages"
                                    if unstamped else "a header stamp in a recording of unstamped messages "
                                    "(receive times)")
            # the fields joined as arrays, then one NumPy view (a few times faster than
            # np.concatenate on three buffers, and this runs at the sensor rate)
            joined = position + velocity + effort
            values = np.frombuffer(joined)[layout]
            # the plain sum is finite only when every value is (NaN and inf propagate; an
            # overflow only costs the exact check), several times cheaper than np.isfinite; it
            # spans the extra joints too, hence the exact check on the model's
            if not math.isfinite(sum(joined)):
                fault = screening.non_finite(values, self.buffer.joint_names)
                if fault:
                    return self._reject(screening.NON_FINITE, fault)
            event = None
            if last_ns is None:
                self.receive_stamped = unstamped
                if unstamped:
                    event = (RECEIVE_STAMPED, f"message {self.received}: no stamp, its receive time taken")
            elif not (stamp_ns > last_ns or (unstamped and stamp_ns == last_ns)):
                kind, detail = screening.stamp_fault(stamp_ns, last_ns, equal_allowed=unstamped)
                if kind != screening.NEW_STRETCH:
                    return self._reject(screening.STAMP_ORDER, detail)
                event = (kind, f"message {self.received}: {detail}")
            self._last_ns = stamp_ns
            row = self.buffer.next_row()
            seconds, ns = divmod(stamp_ns, _NS_PER_S)
            row[0] = seconds + 1e-9 * ns  # as sec + 1e-9 nanosec of a ROS stamp, to the bit
            row[1:] = values
            return event

    def add_block(self, names: tuple, stamp_ns: np.ndarray, position: np.ndarray, velocity: np.ndarray,
                  effort: np.ndarray, motor_position: np.ndarray | None = None) -> list:
        """Screen and keep a block of consecutive samples, each counted as a message; only after
        ``start``. ``names`` (m,) joint names of the columns; ``stamp_ns`` (k,) int64 stamps, ns;
        ``position`` rad, ``velocity`` rad/s, ``effort`` (k, m) each. A block whose samples are all
        finite and stamped after the last one kept, in increasing order, is kept at once; any
        other is screened sample by sample, as ``add`` does. ``motor_position`` (k, m) rad: the
        motor-side positions of the same samples, each row handed to ``add_motor``. Returns
        ``add``'s and ``add_motor``'s reports, in order.
        """
        motor_reports = [] if motor_position is None else [
            r for r in (self.add_motor(names, int(stamp_ns[i]), motor_position[i]) for i in range(stamp_ns.shape[0]))
            if r is not None]
        return self._add_block(names, stamp_ns, position, velocity, effort) + motor_reports

    def _add_block(self, names, stamp_ns, position, velocity, effort) -> list:
        k = stamp_ns.shape[0]
        with self.lock:
            layout = self._layouts.get(names)
            if layout is None:
                layout = self._layout(names)
            clean = (not isinstance(layout, tuple) and not self.receive_stamped and (self._last_ns is None or stamp_ns[0] > self._last_ns)
                     and bool(np.all(np.diff(stamp_ns) > 0)))
            if clean:
                values = np.concatenate((position, velocity, effort), axis=1)[:, layout]
                clean = bool(np.isfinite(values).all())
            if clean:
                rows = np.empty((k, 1 + values.shape[1]))
                seconds, ns = np.divmod(stamp_ns, _NS_PER_S)
                rows[:, 0] = seconds + 1e-9 * ns  # as ``add`` stamps a row, to the bit
                rows[:, 1:] = values
                self.buffer.append(rows)
                self.received += k
                self._last_ns = int(stamp_ns[-1])
                return []
        reports = (self.add(names, int(stamp_ns[i]), array("d", position[i]), array("d", velocity[i]),
                            array("d", effort[i])) for i in range(k))
        return [report for report in reports if report is not None]

    def add_motor(self, names: tuple, stamp_ns: int, position) -> tuple[str, str] | None:
        """Screen one motor-side message and keep it unless refused; only after ``start``.
        ``names`` (m,) the joints it carries (any subset of the recorded ones; others ignored),
        ``stamp_ns`` its header stamp, ns (the joint state it belongs to has the same), ``position``
        (m,) rad in joint units. Returns None when kept, else (kind, "motor-side message k: what")."""
        with self.lock:
            self.motor_received += 1
            if self.buffer is None:
                return self._reject_motor(screening.NO_MODEL, "no joints to record yet")
            if len(position) != len(names):
                return self._reject_motor(*_incomplete(len(names), (len(position), 1, 1)))
            twice = screening.duplicate_names(names)
            if twice:
                return self._reject_motor(screening.DUPLICATE_NAMES, twice)
            joints = self.buffer.joint_names
            where = {name: i for i, name in enumerate(names)}
            present = [j for j, name in enumerate(joints) if name in where]
            if not present:
                return self._reject_motor(screening.MISSING_JOINTS, f"names none of the recorded joints {list(joints)}")
            given = np.asarray(position, dtype=float)[[where[joints[j]] for j in present]]
            if not np.all(np.isfinite(given)):
                return self._reject_motor(screening.NON_FINITE, screening.non_finite(
                    given, tuple(joints[j] for j in present)) or "NaN or infinite values")
            if stamp_ns == 0 or (self._last_motor_ns is not None and stamp_ns <= self._last_motor_ns):
                return self._reject_motor(screening.STAMP_ORDER, "no header stamp (a motor-side position is matched "
                                          "to its joint state by stamp)" if stamp_ns == 0 else
                                          "a stamp not after the previous motor-side message's")
            if self.motor is None:
                self.motor = SampleBuffer(self.capacity, joints, fields=1)
            self._last_motor_ns = stamp_ns
            row = self.motor.next_row()
            seconds, ns = divmod(stamp_ns, _NS_PER_S)
            row[0] = seconds + 1e-9 * ns  # as ``add`` stamps a row, so the two match exactly
            row[1:] = np.nan
            row[1 + np.asarray(present)] = given
            return None

    def _reject_motor(self, kind: str, detail: str) -> tuple[str, str]:
        self.motor_rejected += 1
        reason = f"motor-side message {self.motor_received}: {detail}"
        entry = self.motor_rejections.setdefault(kind, {"count": 0, "first": reason})
        entry["count"] += 1
        entry["last"] = reason
        return kind, reason

    def _layout(self, names: tuple) -> np.ndarray | tuple:
        """Indices into a message's [position | velocity | effort] giving the buffer's q, dq,
        effort columns, or (kind, reason) when the names cannot serve the recording's joints;
        remembered for the next message with these names."""
        joints = self.buffer.joint_names
        where = {}
        for i, name in enumerate(names):
            where.setdefault(name, i)
        missing = [j for j in joints if j not in where]
        twice = screening.duplicate_names(names)
        if twice:  # which copy is meant? none is taken
            layout = (screening.DUPLICATE_NAMES, twice)
        elif missing:
            layout = (screening.MISSING_JOINTS, f"lacks the model joints {missing}")
        else:
            idx = np.array([where[j] for j in joints])
            m = len(names)
            layout = np.concatenate((idx, m + idx, 2 * m + idx))
        if len(self._layouts) >= MAX_NAME_LAYOUTS:
            self._layouts.clear()
        self._layouts[names] = layout
        return layout

    def _reject(self, kind: str, detail: str) -> tuple[str, str]:
        self.rejected += 1
        reason = f"message {self.received}: {detail}"
        self.last_rejection = reason
        entry = self.rejections.setdefault(kind, {"count": 0, "first": reason})
        entry["count"] += 1
        entry["last"] = reason
        return kind, reason

    def snapshot(self, min_samples: int, source: str) -> tuple[Recording, RecordingCounts]:
        """The samples as one Recording (every recorded joint, effort as received; a stretch of
        its own after each jump of the clock, receive times made send times) and the counts at
        that moment. DataError, naming ``source`` (the topic), when fewer than ``min_samples``
        (or none) were recorded; the recording goes on meanwhile and is left as it was."""
        with self.lock:
            if self.buffer is None or self.buffer.size == 0:
                hint = f", {self.rejected} rejected (last: {self.last_rejection})" if self.rejected else ""
                raise DataError(f"too few samples: none recorded from {source} ({self.received} received{hint})")
            time_s, q, dq, effort = self.buffer.chronological()
            joints = self.buffer.joint_names
            received, rejected, last = self.received, self.rejected, self.last_rejection
            rejections = {k: dict(v) for k, v in self.rejections.items()}
            overwritten, receive_stamped = self.buffer.overwritten, self.receive_stamped
            motor_q, motor = None, None
            if self.motor is not None and self.motor.size:
                motor_time, motor_values = self.motor.chronological()
                motor_q = _matched(time_s, motor_time, motor_values)
                motor = {"received": self.motor_received, "rejected": self.motor_rejected,
                         "rejections": {k: dict(v) for k, v in self.motor_rejections.items()},
                         "matched": int(np.isfinite(motor_q).all(axis=1).sum())}
        if len(time_s) < min_samples:
            hint = f", {rejected} rejected (last: {last})" if rejected else ""
            raise DataError(f"too few samples: {len(time_s)} recorded ({received} received{hint}), "
                            f"min_samples is {min_samples}: record longer")
        recording, starts = screening.joined_stretches(time_s, q, dq, effort, joints, receive_stamped, motor_q)
        # lost samples leave holes in the stamps of a steady source; receive times have none to count
        missing = None if receive_stamped else screening.missing_in_stretches(recording, starts)
        return recording, RecordingCounts(
            received=received, recorded=recording.n_samples, rejected=rejected, rejections=rejections,
            overwritten=overwritten, stretches=len(starts), missing=missing, motor=motor)


def _matched(time_s: np.ndarray, motor_time: np.ndarray, motor_values: np.ndarray) -> np.ndarray:
    """The motor-side positions (N, n) at the joint samples stamped ``time_s`` (N,) s: the row of
    ``motor_values`` (M, n) whose stamp ``motor_time`` (M,) s (increasing) is the same, NaN where
    none is."""
    out = np.full((time_s.shape[0], motor_values.shape[1]), np.nan)
    at = np.minimum(np.searchsorted(motor_time, time_s), max(motor_time.shape[0] - 1, 0))
    same = motor_time[at] == time_s
    out[same] = motor_values[at[same]]
    return out


def _incomplete(m: int, sizes: tuple) -> tuple[str, str]:
    """(INCOMPLETE, what) of a message with ``m`` names and ``sizes`` position/velocity/effort values."""
    empty = [f for f, s in zip(screening.FIELDS, sizes) if s == 0]
    return screening.INCOMPLETE, (f"no {'/'.join(empty)} values" if empty else
                                  f"position/velocity/effort have {sizes[0]}/{sizes[1]}/{sizes[2]} values for {m} "
                                  "names")


def saved_recording(loaded: LoadedRecording, min_samples: int, source: str) -> tuple[Recording, RecordingCounts]:
    """A recording file read (recording_files.read_recordings) as a live recording's snapshot:
    its stretches as the live recording had them (a saved one keeps its seams) and its counts.
    DataError, naming ``source`` (the file), with fewer than ``min_samples`` samples."""
    if loaded.recording.n_samples < min_samples:
        raise DataError(f"too few samples: {loaded.recording.n_samples} in {source}, min_samples is {min_samples}")
    r = loaded.recording
    recording, starts = screening.joined_stretches(r.time, r.q, r.dq, r.tau, r.joint_names)
    return recording, RecordingCounts(
        received=loaded.messages, recorded=recording.n_samples, rejected=sum(loaded.dropped.values()),
        rejections={reason: {"count": c} for reason, c in loaded.dropped.items()}, overwritten=0,
        stretches=len(starts), missing=screening.missing_in_stretches(recording, starts))


def gravity_torque(robot: Robot, q: np.ndarray) -> np.ndarray:
    """The nominal model's gravity torque g(q) (N, n) N m for q (N, n) rad in robot joint order."""
    theta = robot.nominal_parameters.reshape(-1)
    out = np.empty_like(q)
    zeros = np.zeros((min(GRAVITY_CHUNK, len(q)), robot.n_joints))
    for start in range(0, len(q), GRAVITY_CHUNK):
        block = q[start:start + GRAVITY_CHUNK]
        still = zeros[:len(block)]
        out[start:start + len(block)] = robot.regressor(block, still, still) @ theta
    return out


def joint_torque(measured: Recording, robot: Robot, effort_mode: str, torque_constants=None,
                 gear_ratios=None) -> np.ndarray:
    """The joint torque (N, n) N m the effort ``measured.tau`` (robot joint order) stands for
    under ``effort_mode`` (EFFORT_MODES): itself; current (A) times ``torque_constants`` (N m/A)
    times ``gear_ratios`` (unset: 1), one per joint; or itself plus the nominal model's gravity
    torque. ValueError when 'current' lacks a value per joint."""
    tau = measured.tau
    if effort_mode == "current":
        n = robot.n_joints
        constants = torque_constants or []
        ratios = gear_ratios or [1.0] * n
        for name, values in (("torque_constants", constants), ("gear_ratios", ratios)):
            if len(values) != n:
                raise ValueError(f"effort_mode 'current' needs {name} with one value per model joint "
                                 f"{list(robot.joint_names)}, got {len(values)}")
        return tau * np.asarray(constants) * np.asarray(ratios)
    if effort_mode == "gravity_compensated":
        return tau + gravity_torque(robot, measured.q)
    return tau
