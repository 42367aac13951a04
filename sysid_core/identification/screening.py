"""Screening joint samples as they arrive: one bad sample is refused on its own, with what was
wrong (which value, which stamp), so it never spoils the samples around it.

A recorder (the identifier node) keeps a sample when its message names every joint once and
its position, velocity and effort are finite, stamped after the last sample kept. A stamp that
repeats or steps back a little is a duplicated or out-of-order message: refused. A step back
by more than CLOCK_JUMP_S is the source's clock starting again (a driver restarted, a
simulation reset) or the previous sample was stamped far in the future: the recording goes on
in a new stretch (NEW_STRETCH), and no sample after it is refused for it; ``joined_stretches``
cuts the recording there.
"""
from __future__ import annotations

import numpy as np

from ..errors import DataError
from .filtering import missing_samples
from .receive_times import send_times
from .recording import QualityNote, Recording
from .recording_files import concatenate

# seconds a stamp may step back and still be one message out of order (refused); a longer
# step back starts a new stretch of the recording
CLOCK_JUMP_S = 1.0

# share of the samples a steady source sent that never arrived, above which the verdict is
# doubtful (the rows that did arrive are fine, but a link that drops samples may also delay
# or reorder them) and failed (most of the run is missing)
LOST_DOUBTFUL, LOST_FAILED = 0.01, 0.5

# kinds of refusal (the counters' keys)
NO_MODEL = "no model"
INCOMPLETE = "incomplete message"
MISSING_JOINTS = "missing joints"
DUPLICATE_NAMES = "duplicate joint names"
NON_FINITE = "non-finite value"
STAMP_ORDER = "stamp not after the last"
STAMP_KIND = "stamped and unstamped messages mixed"
NEW_STRETCH = "new stretch"

FIELDS = ("position", "velocity", "effort")


def duplicate_names(names) -> str | None:
    """Why a JointState's ``names`` cannot be read (a name given twice), or None."""
    seen, twice = set(), []
    for name in names:
        if name in seen and name not in twice:
            twice.append(name)
        seen.add(name)
    return f"joint names {twice} appear more than once" if twice else None


def non_finite(values: np.ndarray, joint_names) -> str | None:
    """Which value of ``values`` (3n,) [position | velocity | effort] of ``joint_names`` (n,) is
    NaN or infinite (the first one), or None when all are finite."""
    finite = np.isfinite(values)
    if finite.all():
        return None
    k = int(np.argmin(finite))
    n = len(joint_names)
    return f"{FIELDS[k // n]} of {joint_names[k % n]} is {values[k]}"


def stamp_fault(stamp_ns: int, last_ns: int | None, equal_allowed: bool = False) -> tuple[str, str] | None:
    """(kind, detail) when a sample stamped ``stamp_ns`` cannot follow the last one kept,
    stamped ``last_ns`` (None: nothing kept yet): (STAMP_ORDER, ...) when it repeats (unless
    ``equal_allowed``: receive times of a batch) or steps back by at most CLOCK_JUMP_S,
    (NEW_STRETCH, ...) when it steps back further; None when it follows."""
    if last_ns is None or stamp_ns > last_ns or (equal_allowed and stamp_ns == last_ns):
        return None
    back = (last_ns - stamp_ns) * 1e-9
    detail = f"stamp {stamp_ns * 1e-9:.9f} s is {back:.9g} s before the last kept {last_ns * 1e-9:.9f} s"
    if back > CLOCK_JUMP_S:
        return NEW_STRETCH, detail
    return STAMP_ORDER, "stamp repeated" if back == 0 else detail


def joined_stretches(time_s, q, dq, effort, joint_names, receive_stamped: bool = False,
                     motor_q=None) -> tuple[Recording, tuple]:
    """A recorder's samples as one Recording: ``time_s`` (N,) s, ``q``, ``dq``, ``effort`` (N, n)
    in ``joint_names`` order, as screened (increasing within a stretch), and the motor-side
    positions ``motor_q`` (N, n) when recorded. Split where the time
    steps back (a new stretch began; equal ``receive_stamped`` times are one batch) or leaps
    ahead by more than CLOCK_JUMP_S (a pause, or a sample stamped far ahead: no samples lost
    there to count or bridge); each stretch's receive times turned into send times
    (receive_times); stretches of fewer than 3 samples dropped (a lone sample stamped far off);
    the rest joined with seams (recording_files.concatenate). Returns (recording, index of each
    stretch's first sample). DataError when nothing is left."""
    step = np.diff(np.asarray(time_s, dtype=float))
    back = step < 0 if receive_stamped else step <= 0
    edges = [0, *(np.flatnonzero(back | (step > CLOCK_JUMP_S)) + 1).tolist(), len(time_s)]
    pieces = []
    for a, b in zip(edges[:-1], edges[1:]):
        if b - a < 3:
            continue
        t = np.asarray(time_s[a:b], dtype=float)
        if receive_stamped:
            try:
                t = send_times(t)
            except ValueError:  # a batch received all at once: no rate to measure
                continue
        pieces.append(Recording(t, q[a:b], dq[a:b], effort[a:b], tuple(joint_names),
                                motor_q=None if motor_q is None else motor_q[a:b]))
    if not pieces:
        raise DataError(f"too few samples: no stretch of 3 or more among the {len(time_s)} recorded")
    if len(pieces) == 1:
        return pieces[0], (0,)
    return concatenate(pieces)


def missing_in_stretches(recording: Recording, starts) -> int:
    """Samples lost in the holes of each stretch's stamps (filtering.missing_samples), summed:
    ``recording`` and ``starts`` as ``joined_stretches`` returns them (the seams are no holes)."""
    ends = (*starts[1:], recording.n_samples)
    return sum(missing_samples(recording.time[a:b]) for a, b in zip(starts, ends))


def lost_sample_notes(missing: int, recorded: int, topic: str) -> tuple:
    """The quality note (QualityNote, ...) of ``missing`` samples lost of ``missing + recorded``
    sent on ``topic``: none up to LOST_DOUBTFUL of them, doubtful up to LOST_FAILED, failed above."""
    share = missing / max(missing + recorded, 1)
    if share <= LOST_DOUBTFUL:
        return ()
    level = "failed" if share > LOST_FAILED else "doubtful"
    return (QualityNote(level, f"{missing} of {missing + recorded} samples ({100 * share:.1f} %) sent on {topic} "
                               "never arrived (holes in their stamps)"),)
