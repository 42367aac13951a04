"""Supervision of an arm of Damiao motors: which frame each motor gets, which faults are latched.

A state machine without bus or clock, so every rule below is testable alone: the bridge node
feeds it the status of every feedback frame it accepts (``feedback``), reports motors that
went silent (``lost``), starts requests (``start``) and calls ``cycle`` once per control
period, which names the special frame (enable, disable, clear error) that replaces a motor's
regular frame (MIT command, or state refresh while disabled) this period. Every motor gets
exactly one frame per period whatever is going on, so a motor that does not answer never holds
the others up, and each reply answers one frame.

Rules:

* **Faults latch.** A joint's fault is set by a fault status (0x8..0xE) or a status the
  protocol does not define (0x2..0x7, 0xF) at any time; by any status other than enabled
  (0x1) from a motor that confirmed its enable while the arm is enabled (a motor that left
  enable by itself: "disabled" from a motor that should drive is a limp joint); by silence
  (``lost``); by a request the motor did not complete. Only a CLEAR request removes it, joint by
  joint, once the motor answered the clear error frame and, the arm being enabled, confirmed a
  new enable. A motor that reports "enabled" again by itself stays faulted.
* **Tracking** (a joint following its command: kp > 0 toward its position target, or, for a
  joint commanded without one, its velocity target and feed-forward with kp = 0) is allowed
  (``may_track``) only while the arm is enabled, no request runs, no fault is latched anywhere
  and every motor confirmed its enable: one limp joint in a stiff arm swings the rest
  unpredictably, and a feed-forward meant for the whole arm (gravity compensation) is wrong
  for an arm with a limp joint.
* **Which joints track** (``tracked_joints``, each cycle): those whose command is younger than
  the command timeout and arrived after tracking was last allowed, and, when a command has a
  position target, lies within the largest position error of the measured position. A
  command's position may be NaN: no position target (the joint floats, kp = 0, on its velocity
  target and feed-forward); it has no position to be far from. Every other joint gets damping
  only.
* **Requests.** ENABLE (every motor; refused while a fault is latched or a request runs),
  DISABLE (every motor; interrupts a running request: it must always get through), CLEAR (the
  faulted motors: clear error, then enable if the arm is enabled). A request sends its frame
  every cycle to each motor that has not settled yet, at most ``request_cycles`` times per
  step; a motor still unsettled then fails the request and its joint is faulted.

Replies are attributed by state, not by frame: a reply to a frame sent before a request may
still arrive after it (status "disabled" after an enable frame went out), so only the state a
request asks for settles it, and the motor's replies come in the order of its frames.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .protocol import (FAULT_STATUSES, FRAME_LENGTH, POSITION_BITS, STATUS, STATUS_DISABLED, STATUS_ENABLED,
                       Feedback, MotorLimits, clear_error_frame, decode_feedback, disable_frame, enable_frame,
                       measured_feedback, resolution, status_text)

ENABLE, DISABLE, CLEAR = "enable", "disable", "clear_errors"

# the special frame (payload) sent in each step of a request
FRAMES = {ENABLE: enable_frame(), DISABLE: disable_frame(), CLEAR: clear_error_frame()}


def is_fault_status(status: int) -> bool:
    """A fault (0x8..0xE) or a status the protocol does not define: never a state to drive in."""
    return status in FAULT_STATUSES or status not in STATUS


@dataclass(eq=False)
class Request:
    """One enable, disable or clear request and, once ``done``, its outcome.

    ``joints``: the joints it asked; ``failed``: joint -> reason for those it could not bring
    to the state asked; ``refused``: why it did not start (nothing was sent), or ''.
    """

    kind: str
    joints: tuple
    done: bool = False
    failed: dict = field(default_factory=dict)
    refused: str = ""
    # per pending joint: step (ENABLE, DISABLE or CLEAR), frames left, frame sent in this step,
    # answered in this step
    _step: dict = field(default_factory=dict)
    _left: dict = field(default_factory=dict)
    _sent: set = field(default_factory=set)
    _answered: set = field(default_factory=set)
    # joints that never answered during the whole request
    _ever_answered: set = field(default_factory=set)

    @property
    def silent(self) -> list:
        """Joints that never answered during the request (sorted)."""
        return sorted(set(self.joints) - self._ever_answered)

    @property
    def succeeded(self) -> bool:
        return self.done and not self.failed and not self.refused


class Supervisor:
    """Fault latch and request sequencing for ``joint_names`` (n,) motors.

    ``request_cycles``: frames a request sends a motor per step before giving up on it.
    Public state: ``enabled`` (the arm is meant to drive), ``status`` (n,) last status
    reported (-1 before any), ``faults`` (n,) latched reason per joint or None,
    ``confirmed`` (n,) bool (the motor confirmed its enable since the arm was enabled),
    ``request`` (the running Request or None).
    """

    def __init__(self, joint_names, request_cycles: int):
        if request_cycles < 1:
            raise ValueError(f"request_cycles must be >= 1, got {request_cycles}")
        self.names = tuple(joint_names)
        n = len(self.names)
        self.request_cycles = int(request_cycles)
        self.enabled = False
        self.status = np.full(n, -1)
        self.faults: list = [None] * n
        self.confirmed = np.zeros(n, dtype=bool)
        self.request: Request | None = None
        self._news: list = []

    # --- what the node reads ----------------------------------------------------------------

    @property
    def faulted(self) -> np.ndarray:
        """(n,) bool: joints with a latched fault."""
        return np.array([f is not None for f in self.faults], dtype=bool)

    @property
    def may_track(self) -> bool:
        """True when commands may be tracked (kp > 0) on any joint."""
        return self.enabled and self.request is None and self.confirmed.all() and not self.faulted.any()

    def describe(self, joints) -> str:
        """'joint2 (over-current), joint3 (no answer)': each joint with its fault or status."""
        return ", ".join(f"{self.names[j]} ({self.faults[j] or self._status_text(j)})" for j in joints)

    def _status_text(self, j: int) -> str:
        return "no feedback yet" if self.status[j] < 0 else status_text(int(self.status[j]))

    # --- events -----------------------------------------------------------------------------

    def feedback(self, j: int, status: int) -> None:
        """An accepted feedback frame of joint ``j`` reporting ``status``."""
        status = int(status)
        self.status[j] = status
        request = self.request
        if request is not None and j in request._step:
            request._ever_answered.add(j)
            if j in request._sent:
                request._answered.add(j)
                self._settle(request, j, status)
        if is_fault_status(status):
            self._latch(j, f"fault 0x{status:X} ({status_text(status)})")
        elif self.enabled and self.confirmed[j] and status != STATUS_ENABLED:
            self._latch(j, f"left enable by itself: reports {status_text(status)}")

    def lost(self, j: int, reason: str) -> None:
        """Joint ``j`` went silent: latched, unless a request is asking it (the request then
        latches it when it gives up)."""
        if self.request is None or j not in self.request._step:
            self._latch(j, reason)

    def new_faults(self) -> list:
        """[(joint, reason)] of the faults latched since the last call (each logged once)."""
        news, self._news = self._news, []
        return news

    def start(self, kind: str) -> Request:
        """Start an ENABLE, DISABLE or CLEAR request; returns it (``done`` at once when refused
        or when there is nothing to do)."""
        n = len(self.names)
        running = self.request
        if kind == DISABLE:
            if running is not None:
                for j in list(running._step):
                    running.failed[j] = "interrupted by disable"
                self._finish(running)
            self.enabled = False
            self.confirmed[:] = False
            return self._begin(Request(DISABLE, tuple(range(n))), range(n), DISABLE)
        if kind not in (ENABLE, CLEAR):
            raise ValueError(f"unknown request {kind!r}; expected {ENABLE}, {DISABLE} or {CLEAR}")
        if running is not None:
            return Request(kind, (), done=True, refused=f"busy: {running.kind} still in progress, try again")
        faulted = [j for j in range(n) if self.faults[j] is not None]
        if kind == ENABLE:
            if faulted:
                return Request(kind, (), done=True, refused=f"faults latched: {self.describe(faulted)}; "
                                                           f"call {CLEAR} first")
            self.enabled = True
            return self._begin(Request(ENABLE, tuple(range(n))), range(n), ENABLE)
        if not faulted:
            return Request(CLEAR, (), done=True)
        self.confirmed[faulted] = False
        return self._begin(Request(CLEAR, tuple(faulted)), faulted, CLEAR)

    def cycle(self) -> dict:
        """One control period: gives up on motors whose step ran out of frames, and returns
        {joint: payload} for the motors that get a special frame this period (FRAMES values);
        every other motor gets its regular frame."""
        request = self.request
        if request is None:
            return {}
        frames = {}
        for j in list(request._step):
            if request._left[j] == 0:
                self._give_up(request, j)
                continue
            request._left[j] -= 1
            request._sent.add(j)
            frames[j] = FRAMES[request._step[j]]
        if not request._step:
            self._finish(request)
        return frames

    # --- internals --------------------------------------------------------------------------

    def _latch(self, j: int, reason: str) -> None:
        if self.faults[j] is None:
            self.faults[j] = reason
            self._news.append((j, reason))

    def _begin(self, request: Request, joints, step: str) -> Request:
        self.request = request
        for j in joints:
            self._enter(request, j, step)
        return request

    def _enter(self, request: Request, j: int, step: str) -> None:
        request._step[j] = step
        request._left[j] = self.request_cycles
        request._sent.discard(j)
        request._answered.discard(j)

    def _settle(self, request: Request, j: int, status: int) -> None:
        step = request._step[j]
        if step == ENABLE:
            if status == STATUS_ENABLED:
                self.confirmed[j] = True
                if request.kind == CLEAR:
                    self.faults[j] = None
                del request._step[j]
            elif is_fault_status(status):
                request.failed[j] = f"fault 0x{status:X} ({status_text(status)})"
                del request._step[j]
        elif step == DISABLE:
            if status != STATUS_ENABLED:
                del request._step[j]
        elif status in (STATUS_DISABLED, STATUS_ENABLED):   # CLEAR: the error is gone
            if self.enabled:
                self._enter(request, j, ENABLE)
            else:
                self.faults[j] = None
                del request._step[j]

    def _give_up(self, request: Request, j: int) -> None:
        step = request._step.pop(j)
        what = {ENABLE: "enable", DISABLE: "disable", CLEAR: "clear error"}[step]
        if j not in request._answered:
            reason = f"no answer to {what} ({self.request_cycles} frames)"
        else:
            reason = f"did not {what}: reports {status_text(int(self.status[j]))}"
        request.failed[j] = reason
        if request.kind == CLEAR:   # still faulted: say why now
            self.faults[j] = None
        self._latch(j, reason)

    def _finish(self, request: Request) -> None:
        request._step.clear()
        request.done = True
        if self.request is request:
            self.request = None


def tracked_joints(may_track: bool, received, armed_at: float, now: float, timeout: float, q_command, q_measured,
                   lower, upper, max_error: float) -> tuple[np.ndarray, np.ndarray]:
    """Which joints follow their command this cycle (the rest get damping only).

    ``may_track`` (``Supervisor.may_track``); ``received`` (n,) s when each joint's command
    arrived (-inf: never); ``armed_at`` s when tracking was last allowed (commands received
    before are stale); ``now`` s on the same clock; ``timeout`` s a command is followed for;
    ``q_command`` (n,) rad the commanded positions (NaN: no position target); ``q_measured``
    (n,) rad; ``lower``/``upper`` (n,) rad the joint limits a target is clamped to;
    ``max_error`` rad the largest distance between a (clamped) target and the measured position
    that is tracked (0: no check). Returns (tracked (n,) bool, far (n,) bool: fresh commands
    not tracked for being farther than ``max_error``)."""
    tracked = may_track & (np.asarray(received) >= armed_at) & (now - np.asarray(received) <= timeout)
    if max_error <= 0:
        return tracked, np.zeros_like(tracked)
    q_command = np.asarray(q_command, dtype=float)
    target = ~np.isnan(q_command)
    # a joint without a position target is compared with itself: never far
    goal = np.minimum(np.maximum(np.where(target, q_command, q_measured), lower), upper)
    far = tracked & target & (np.abs(goal - q_measured) > max_error)
    return tracked & ~far, far


# --- believing a feedback frame -----------------------------------------------------------

FEEDBACK_LATENCY_S = 0.05
"""s a frame may wait in adapter and kernel buffers, so between the receipt of two frames
the motor may have moved for this much longer than the time between them."""


def screen_feedback(data: bytes, can_id: int, limits: MotorLimits, previous: float | None = None,
                    elapsed: float = 0.0) -> tuple[Feedback | None, str]:
    """Decode ``data`` as a feedback frame of motor ``can_id``, if it can be one.

    Returns (Feedback, '') or (None, the reason it cannot be). Checked: 8 bytes; the motor-id
    nibble of byte 0 equals the low 4 bits of ``can_id``; with ``previous`` (motor-side
    position of the last accepted frame, rad) and ``elapsed`` (s since it was received), a
    position no farther from it than VMAX * (elapsed + FEEDBACK_LATENCY_S) plus two steps
    of the 16-bit position: no motor turns faster than its VMAX range (its velocity would
    not even encode). Noise on a feedback id passes these checks 1 time in 16 or less; what
    passes is taken as the motor's word, and a status it carries latches a fault like any.
    """
    if len(data) != FRAME_LENGTH:
        return None, f"{len(data)} bytes, not {FRAME_LENGTH}"
    nibble = data[0] & 0xF
    if nibble != can_id & 0xF:
        return None, f"motor id nibble 0x{nibble:X}, expected 0x{can_id & 0xF:X}"
    feedback = measured_feedback(decode_feedback(data, limits), limits)  # half an LSB up: see there
    if previous is not None:
        reach = limits.vmax * (max(elapsed, 0.0) + FEEDBACK_LATENCY_S) \
            + 2 * resolution(-limits.pmax, limits.pmax, POSITION_BITS)
        if abs(feedback.position - previous) > reach:
            return None, (f"position {feedback.position:+.3f} rad is {abs(feedback.position - previous):.3f} rad "
                          f"from the last one {elapsed * 1e3:.1f} ms earlier, more than VMAX "
                          f"{limits.vmax:g} rad/s allows")
    return feedback, ""
