"""Both encoders of DM-J*-2EC motors, read while MIT control runs: schedule, pairing, unwrapping.

A 2EC motor has an encoder on the rotor and one on the output shaft. Two read-only float32
registers carry them: RID 80 ``p_m``, the motor-side position (rotor angle / gear ratio, output
radians, multi-turn), and RID 81 ``xout``, the output shaft's single-turn angle (its range is
not documented: anything within one turn of ``p_m`` will do, it is unwrapped). Their
difference is the transmission's deflection delta = q_link - q_motor. Read frames are slow and
cost bus time, so ``DualEncoderReader`` reads them the way a busy bus allows:

* **At most one read request per control cycle**, after that cycle's MIT frames (0x7FF is the
  lowest priority id, so a read never delays a command). Motors take turns (round robin); one
  motor's pair is read in two consecutive cycles, RID 80 then RID 81, and pairs start at
  n * ``rate_hz`` per second, so every motor gets a pair at ``rate_hz``. The budget is met when
  2 n ``rate_hz`` <= the control rate; ``DualEncoderReader`` refuses any rate above that.
* **Pairing.** The two registers are sampled a cycle apart, while the arm moves: p_m is carried
  to the moment xout was sampled by the motion the feedback frames (motor side on a 2EC)
  showed between the two replies, so delta holds the deflection of one instant, not the
  distance the arm travelled in a cycle. Should the feedback be link side after all, the
  carried motion is the link's instead: the error is then the change of delta within a cycle.
* **Unwrapping.** xout is moved by whole turns to the one nearest that p_m.
* **Lost replies.** A read unanswered ``timeout_cycles`` cycles after it was sent is given up
  and counted (``reads_lost``); its pair is dropped (``pairs_dropped``). A reply that comes
  after that, or that no read asked for, is counted (``replies_unexpected``) and ignored. The
  control loop never waits for a register.

Bus load (classic CAN 2.0A, 8 data bytes, at 1 Mbit/s: 1 bit = 1 us). A frame is 108 bits plus
3 of interframe space, 111 bits before stuffing; the stuff bits make 111-135 (about 120
typical). A read is two frames (request, reply), so both registers of a motor are four:
444-540 us of bus per motor per sample. MIT control is two frames (command, reply) per motor
per cycle. ``bus_load`` gives the figures for any layout:

* 7 motors at 500 Hz: 7000 frames/s, 78-95 % of the bus before any read; reading at 10 Hz per
  motor adds 280 frames/s, +3.1-3.8 %. The one-read-per-cycle ceiling there is 35.7 Hz per
  motor, +11-13.5 %: a scheduling bound, more than that bus can carry.
* 8 motors at 400 Hz (config/damiao_arm.yaml): 71-86 %; at 10 Hz +3.6-4.3 %.
* 7 motors at 250 Hz (the virtual arm's file): 39-47 %; at 10 Hz +3.1-3.8 %.

10 Hz per motor is the rate recommended for hardware: the deflection follows the torque the
joint transmits, which an excitation changes at a couple of hertz at most (multisines of up to
about 2 Hz) and gravity not at all while the arm holds still, so 10 Hz resolves it, for under
4.5 % of the bus on these arms. Faster reads need a lower control rate or a second bus: the
ceiling is control rate / (2 n) per motor, and the bus should stay well below 100 %.
"""
from __future__ import annotations

import math

import numpy as np

from .protocol import RID_MOTOR_POSITION, RID_OUTPUT_POSITION

FRAME_BITS = (111, 120, 135)
"""Bits on the bus of one classic 8-byte standard frame: no stuff bits, typical, worst case."""

_EPS = 1e-9          # cycles: a pair due at an exact cycle boundary starts on it despite rounding


def unwrap_near(angle: float, reference: float) -> float:
    """``angle`` (rad) plus the whole number of turns that brings it nearest ``reference`` (rad)."""
    return angle + 2.0 * math.pi * round((reference - angle) / (2.0 * math.pi))


def max_rate(n: int, control_rate_hz: float) -> float:
    """The highest motor_states rate (Hz per motor) that one read per control cycle allows for
    ``n`` motors: two registers per motor per sample."""
    return control_rate_hz / (2.0 * n)


def bus_load(n: int, control_rate_hz: float, rate_hz: float, bitrate: float = 1e6) -> dict:
    """Share of a classic CAN bus at ``bitrate`` bit/s taken by MIT control of ``n`` motors at
    ``control_rate_hz`` (a command and a reply per motor per cycle) and by reading both encoders
    of each motor at ``rate_hz`` (four frames). {"mit": (3,), "reads": (3,)} fractions, for
    frames of FRAME_BITS bits (no stuffing, typical, worst case)."""
    bits = np.asarray(FRAME_BITS, dtype=float)
    return {"mit": 2.0 * n * control_rate_hz * bits / bitrate, "reads": 4.0 * n * rate_hz * bits / bitrate}


class _Pair:
    """One motor's pair of reads in flight: per RID the cycle it was sent, its value and the
    motor-side feedback position (motor units) of the cycle the reply came in."""

    __slots__ = ("sent", "values", "feedback")

    def __init__(self):
        self.sent, self.values, self.feedback = {}, {}, {}


class DualEncoderReader:
    """The schedule and bookkeeping of reading RID 80 and RID 81 of ``n`` motors.

    ``directions`` (n,) +1/-1: joint = direction * motor position + offset (``arm.DamiaoArm``),
    so a deflection in joint units is direction times the motor's (the offset cancels).
    ``rate_hz`` > 0: pairs per second per motor; ``control_rate_hz``: cycles per second;
    ``timeout_cycles`` >= 1: cycles a read may wait for its reply. ValueError when the rate
    needs more than one read per cycle, or for values out of range.

    Each control cycle, in this order: ``reply`` for every register reply read off the bus,
    ``end_receive`` once the cycle's replies are in (returns the completed deflections),
    ``request`` when the cycle's frames are sent (returns the read to send, if any).
    Counters: ``cycles``, ``reads_sent``, ``reads_lost``, ``replies_unexpected``,
    ``pairs_started``, ``pairs_completed``, ``pairs_dropped``.
    """

    def __init__(self, directions, rate_hz: float, control_rate_hz: float, timeout_cycles: int):
        self.directions = np.asarray(directions, dtype=float)
        n = self.n = len(self.directions)
        if n == 0 or not np.all(np.isin(self.directions, (-1.0, 1.0))):
            raise ValueError(f"directions must be +1 or -1 for each of at least one motor, got {directions!r}")
        if not (math.isfinite(control_rate_hz) and control_rate_hz > 0):
            raise ValueError(f"the control rate must be a finite number > 0 Hz, got {control_rate_hz}")
        if not (math.isfinite(rate_hz) and rate_hz > 0):
            raise ValueError(f"motor_states_hz must be a finite number > 0 (0 turns the reads off), got {rate_hz}")
        ceiling = max_rate(n, control_rate_hz)
        if rate_hz > ceiling * (1.0 + 1e-9):
            raise ValueError(
                f"motor_states_hz {rate_hz:g} needs {2 * n * rate_hz:g} register reads a second (RID 80 and 81 of "
                f"{n} motors), more than the one read per control cycle ({control_rate_hz:g} Hz) the bus "
                f"budget allows: at most {ceiling:g} Hz at this control rate (10 Hz is recommended)")
        if int(timeout_cycles) < 1:
            raise ValueError(f"timeout_cycles must be >= 1, got {timeout_cycles}")
        self.rate_hz, self.control_rate_hz = float(rate_hz), float(control_rate_hz)
        self.timeout_cycles = int(timeout_cycles)
        # pairs started per cycle (<= 1/2: a pair takes two cycles, one read each)
        self._pairs_per_cycle = n * self.rate_hz / self.control_rate_hz
        self._pairs: dict = {}            # joint -> _Pair in flight
        self._arrived: list = []          # (joint, rid, value) since the last end_receive
        self._second: int | None = None   # joint whose RID 81 is read next cycle
        self._next = 0                    # joint whose pair starts next
        self.cycles = self.reads_sent = self.reads_lost = self.replies_unexpected = 0
        self.pairs_started = self.pairs_completed = self.pairs_dropped = 0

    def pairs_due(self, cycles: int) -> int:
        """Pairs started in the first ``cycles`` cycles (the first starts in cycle 0)."""
        return 0 if cycles <= 0 else math.floor((cycles - 1) * self._pairs_per_cycle + _EPS) + 1

    # --- each cycle -------------------------------------------------------------------------

    def reply(self, joint: int, rid: int, value: float) -> bool:
        """A register reply of motor ``joint`` read off the bus; False (counted) when no read of
        it is waiting: late after being given up, a duplicate, or nobody asked."""
        pair = self._pairs.get(joint)
        if (pair is None or rid not in pair.sent or rid in pair.values
                or any(j == joint and r == rid for j, r, _ in self._arrived)):
            self.replies_unexpected += 1
            return False
        self._arrived.append((joint, rid, float(value)))
        return True

    def end_receive(self, motor_positions) -> dict:
        """The cycle's replies are in: ``motor_positions`` (n,) the motors' latest feedback
        positions, motor units, rad. Returns {joint: deflection q_link - q_motor, joint units,
        rad} of the pairs completed now; gives up on reads that waited too long."""
        for joint, rid, value in self._arrived:
            pair = self._pairs[joint]
            pair.values[rid] = value
            pair.feedback[rid] = float(motor_positions[joint])
        self._arrived.clear()
        done = {}
        for joint in list(self._pairs):
            pair = self._pairs[joint]
            if len(pair.values) == 2:
                # p_m carried to xout's instant by the motion the feedback showed in between
                motor = pair.values[RID_MOTOR_POSITION] + (pair.feedback[RID_OUTPUT_POSITION]
                                                           - pair.feedback[RID_MOTOR_POSITION])
                link = unwrap_near(pair.values[RID_OUTPUT_POSITION], motor)
                done[joint] = float(self.directions[joint] * (link - motor))
                del self._pairs[joint]
                self.pairs_completed += 1
            elif any(rid not in pair.values and self.cycles - sent >= self.timeout_cycles
                     for rid, sent in pair.sent.items()):
                self._drop(joint)
        return done

    def request(self) -> tuple[int, int] | None:
        """The read to send this cycle, (joint, rid), or None; call once per cycle, after the
        cycle's MIT frames."""
        read = None
        if self._second is not None:
            joint, self._second = self._second, None
            if joint in self._pairs:            # not dropped meanwhile
                read = (joint, RID_OUTPUT_POSITION)
        elif self.pairs_due(self.cycles + 1) > self.pairs_started:
            joint = self._next
            self._next = (joint + 1) % self.n
            if joint in self._pairs:            # the last one still waits: a new round replaces it
                self._drop(joint)
            self._pairs[joint] = _Pair()
            self.pairs_started += 1
            self._second = joint
            read = (joint, RID_MOTOR_POSITION)
        if read is not None:
            self._pairs[read[0]].sent[read[1]] = self.cycles
            self.reads_sent += 1
        self.cycles += 1
        return read

    def _drop(self, joint: int) -> None:
        pair = self._pairs.pop(joint)
        self.reads_lost += sum(rid not in pair.values for rid in pair.sent)
        self.pairs_dropped += 1

    def in_flight(self) -> int:
        """Pairs started and neither completed nor dropped yet."""
        return len(self._pairs)

    def counters(self) -> dict:
        """The counters by name, for diagnostics."""
        return {name: getattr(self, name) for name in (
            "reads_sent", "reads_lost", "replies_unexpected", "pairs_started", "pairs_completed", "pairs_dropped")}
