"""Excitation trajectories: what the arm is asked to do so that every parameter shows up.

A multisine per joint (a few sinusoids with incommensurate frequencies and random
phases) never repeats within a typical recording, so the sampled states cover the
joint space densely, and its derivatives are exact, so a planned trajectory carries
its own reference accelerations.
"""
from __future__ import annotations

import numpy as np

from .trajectory import Trajectory

# Two frequencies closer than this (Hz) act as one sinusoid over a recording of a few tens of seconds.
MIN_SEPARATION_HZ = 0.01
# Half-range (rad, or m for slides) given to a joint without limits.
UNLIMITED_HALF_RANGE = 1.0
# Ratios f_i / f_j near p/q with p, q up to this make the sum periodic with a short period
# (the joint retraces the same path); such draws are rejected.
_MAX_RATIO_TERM = 4
_RATIO_TOLERANCE = 0.01
# p / q is correctly rounded: equal ratios give one float (fractions.Fraction would import decimal)
_SIMPLE_RATIOS = np.array(sorted({p / q for p in range(1, _MAX_RATIO_TERM + 1) for q in range(1, _MAX_RATIO_TERM + 1)}))
_MAX_DRAWS = 1000


def _limit_array(value, n: int, name: str, unit: str) -> np.ndarray:
    """A positive scalar or (n,) limit as (n,); inf when ``value`` is None."""
    if value is None:
        return np.full(n, np.inf)
    arr = np.broadcast_to(np.asarray(value, dtype=float), (n,)) if np.ndim(value) == 0 else np.asarray(value, dtype=float)
    if arr.shape != (n,):
        raise ValueError(f"{name} must be a scalar or have shape ({n},), got shape {arr.shape}")
    if np.any(np.isnan(arr)) or np.any(arr <= 0):
        raise ValueError(f"{name} must be > 0 {unit}, got {arr.tolist()}")
    return arr.copy()


def _validate_range(joint_range) -> np.ndarray:
    rng = np.asarray(joint_range, dtype=float)
    if rng.ndim != 2 or rng.shape[1] != 2 or rng.shape[0] == 0:
        raise ValueError(f"joint_range must have shape (n, 2) with n >= 1, got shape {rng.shape}")
    if np.any(np.isnan(rng)):
        raise ValueError("joint_range contains NaN")
    bad = np.flatnonzero(~(rng[:, 0] < rng[:, 1]))
    if bad.size:
        raise ValueError(f"joint_range needs lower < upper; joints {bad.tolist()} violate it: {rng[bad].tolist()}")
    return rng


def _center_and_half_range(rng: np.ndarray, center) -> tuple[np.ndarray, np.ndarray]:
    """Center (n,) and the largest symmetric excursion (n,) that stays inside the limits."""
    lower, upper = rng[:, 0], rng[:, 1]
    lo_fin, up_fin = np.isfinite(lower), np.isfinite(upper)
    if center is None:
        # one-sided limits: sit one unlimited half-range inside the finite bound
        with np.errstate(invalid="ignore"):  # the branches not selected may add -inf and inf
            center = np.select([lo_fin & up_fin, lo_fin, up_fin],
                               [0.5 * (lower + upper), lower + UNLIMITED_HALF_RANGE,
                                upper - UNLIMITED_HALF_RANGE], 0.0)
    else:
        center = np.asarray(center, dtype=float)
        if center.shape != lower.shape:
            raise ValueError(f"center must have shape {lower.shape}, got {center.shape}")
        outside = np.flatnonzero(~((center > lower) & (center < upper)))
        if outside.size:
            raise ValueError(f"center must lie strictly inside the joint range; joints {outside.tolist()} do not")
    room = np.minimum(center - lower, upper - center)
    # a joint with an open side gets the unlimited half-range, further bounded by its finite side
    half = np.where(lo_fin & up_fin, room, np.minimum(room, UNLIMITED_HALF_RANGE))
    return center, half


def _acceptable(freqs: np.ndarray) -> bool:
    """No two frequencies (k,) Hz coincide or sit near a simple rational ratio."""
    ratio = freqs[:, None] / freqs[None, :]
    pairs = np.triu(np.ones(ratio.shape, dtype=bool), 1)
    if np.any(np.abs(freqs[:, None] - freqs[None, :])[pairs] < MIN_SEPARATION_HZ):
        return False
    near = np.abs(ratio[pairs][:, None] / _SIMPLE_RATIOS[None, :] - 1.0) < _RATIO_TOLERANCE
    return not near.any()


def _draw_frequencies(gen: np.random.Generator, k: int, f_lo: float, f_hi: float) -> np.ndarray:
    for _ in range(_MAX_DRAWS):
        freqs = gen.uniform(f_lo, f_hi, size=k)
        if _acceptable(freqs):
            return freqs
    raise ValueError(f"could not draw {k} well-separated, incommensurate frequencies in "
                     f"[{f_lo}, {f_hi}] Hz; widen frequency_range or lower n_sines")


def multisine(joint_range, duration: float, sample_rate: float, seed=None, n_sines=(3, 5),
              frequency_range=(0.1, 0.6), amplitude_fraction: float = 0.8, max_velocity=None,
              max_acceleration=None, center=None) -> Trajectory:
    """Random multisine excitation, one independent sum of sinusoids per joint.

    q_j(t) = center_j + sum_k a_jk sin(2 pi f_jk t + phi_jk), with dq and ddq its exact
    analytic derivatives.

    joint_range: (n, 2) lower/upper limits, rad (m for slides); +-inf for unlimited joints.
    duration: s (> 0); sample_rate: Hz (> 0). time = arange(N) / sample_rate with
    N = round(duration * sample_rate) + 1, so t = 0 and t = duration are both samples.
    seed: anything ``np.random.default_rng`` accepts; equal seeds give identical trajectories.
    n_sines: (min, max), inclusive: the number of sinusoids is drawn per joint.
    frequency_range: (low, high) Hz; frequencies are drawn uniformly, rejecting pairs closer
    than MIN_SEPARATION_HZ or near a ratio p/q with p, q <= 4 (which would make the joint
    retrace a short periodic path).
    amplitude_fraction: in (0, 1]; the sampled peak of ``|q - center|`` is scaled to this fraction
    of the half-range (half the limit span, the room to the nearer limit when ``center`` (n,)
    is given, UNLIMITED_HALF_RANGE rad for unlimited joints).
    max_velocity (rad/s), max_acceleration (rad/s^2): scalars or (n,); the whole joint signal
    is scaled down further until its sampled peaks respect them.
    Returns a Trajectory with time (N,) s and q, dq, ddq (N, n).
    """
    rng = _validate_range(joint_range)
    n = rng.shape[0]
    if not np.isfinite(duration) or duration <= 0:
        raise ValueError(f"duration must be a finite number of seconds > 0, got {duration}")
    if not np.isfinite(sample_rate) or sample_rate <= 0:
        raise ValueError(f"sample_rate must be a finite number of Hz > 0, got {sample_rate}")
    k_lo, k_hi = (int(v) for v in n_sines)
    if not 1 <= k_lo <= k_hi:
        raise ValueError(f"n_sines must be (min, max) with 1 <= min <= max, got {tuple(n_sines)}")
    f_lo, f_hi = (float(v) for v in frequency_range)
    if not 0 < f_lo < f_hi:
        raise ValueError(f"frequency_range must be (low, high) Hz with 0 < low < high, got {tuple(frequency_range)}")
    if f_hi >= sample_rate / 2:
        raise ValueError(f"frequency_range upper bound {f_hi} Hz must be below the Nyquist "
                         f"frequency {sample_rate / 2} Hz of sample_rate {sample_rate} Hz")
    if not 0 < amplitude_fraction <= 1:
        raise ValueError(f"amplitude_fraction must be in (0, 1], got {amplitude_fraction}")
    v_max = _limit_array(max_velocity, n, "max_velocity", "rad/s")
    a_max = _limit_array(max_acceleration, n, "max_acceleration", "rad/s^2")
    center, half = _center_and_half_range(rng, center)

    num = int(round(duration * sample_rate)) + 1
    if num < 2:
        raise ValueError(f"duration {duration} s at {sample_rate} Hz gives fewer than 2 samples")
    time = np.arange(num) / sample_rate

    gen = np.random.default_rng(seed)
    # Unused sinusoid slots keep a zero amplitude so all joints share one (N, n, k) array.
    freq = np.zeros((n, k_hi))
    amp = np.zeros((n, k_hi))
    phase = np.zeros((n, k_hi))
    for j in range(n):
        k = int(gen.integers(k_lo, k_hi + 1))
        freq[j, :k] = _draw_frequencies(gen, k, f_lo, f_hi)
        phase[j, :k] = gen.uniform(0.0, 2 * np.pi, size=k)
        amp[j, :k] = gen.uniform(0.5, 1.0, size=k)

    omega = 2 * np.pi * freq                                   # (n, k) rad/s
    arg = omega[None] * time[:, None, None] + phase[None]     # (N, n, k) rad
    sin, cos = np.sin(arg), np.cos(arg)
    dev = np.einsum("tjk,jk->tj", sin, amp)
    vel = np.einsum("tjk,jk->tj", cos, amp * omega)
    acc = -np.einsum("tjk,jk->tj", sin, amp * omega ** 2)

    peaks = [np.max(np.abs(a), axis=0) for a in (dev, vel, acc)]
    if np.any(peaks[0] <= 0):
        raise ValueError("the sampled multisine is identically zero; increase duration or sample_rate")
    # Scale on the achieved sampled peaks (not the sum of amplitudes, which is far too conservative).
    scale = np.minimum.reduce([amplitude_fraction * half / peaks[0], v_max / peaks[1], a_max / peaks[2]])
    # at amplitude_fraction 1 the peak lands on the limit, where rounding of center + dev * scale
    # could cross it by one ulp: clip, which changes nothing beyond rounding
    q = np.clip(center + dev * scale, rng[:, 0], rng[:, 1])
    return Trajectory(time=time, q=q, dq=vel * scale, ddq=acc * scale)


# A rest-to-rest quintic (zero end velocities and accelerations) peaks at this multiple of
# its mean speed |q_to - q_from| / T, half-way through.
QUINTIC_PEAK_SPEED = 1.875
# Shortest move between two poses (s): slower than any cap asks, gentle on the gearboxes.
MIN_TRANSITION_DURATION = 1.0
# Ramp from rest into the plan's first velocity, and from its last velocity back to rest (s),
# and the shortest ramp accepted when a joint limit forces a shorter one.
RAMP_DURATION = 0.5
MIN_RAMP_DURATION = 0.1
# Durations within this fraction of a sample period of a grid point count as on the grid.
_GRID_TOLERANCE = 1e-9


def _joint_vector(value, n: int | None, name: str) -> np.ndarray:
    arr = np.asarray(value, dtype=float)
    if arr.ndim != 1 or (n is not None and arr.shape != (n,)):
        raise ValueError(f"{name} must have shape ({'n' if n is None else n},), got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or infinite values")
    return arr


def _check_rate(sample_rate: float) -> float:
    if not np.isfinite(sample_rate) or sample_rate <= 0:
        raise ValueError(f"sample_rate must be a finite number of Hz > 0, got {sample_rate}")
    return float(sample_rate)


def transition(q_from, dq_from, q_to, dq_to, duration: float, sample_rate: float) -> Trajectory:
    """Quintic move per joint from (q_from, dq_from) to (q_to, dq_to), at rest in acceleration at both ends.

    q_from, q_to (n,) rad (m for slides); dq_from, dq_to (n,) rad/s. duration s (> 0) is
    rounded to the nearest whole number M >= 1 of sample periods; time = arange(M + 1) /
    sample_rate, so both ends are samples and hold the boundary values exactly.
    With tau = t / T, D = q_to - q_from, v0 = dq_from and v1 = dq_to::

        q = q_from + v0 T tau + (10 D - 6 v0 T - 4 v1 T) tau^3 + (-15 D + 8 v0 T + 7 v1 T) tau^4
            + (6 D - 3 v0 T - 3 v1 T) tau^5

    with dq and ddq its exact derivatives.
    Returns a Trajectory with time (M + 1,) s and q, dq, ddq (M + 1, n).
    """
    q0 = _joint_vector(q_from, None, "q_from")
    n = q0.shape[0]
    v0, q1, v1 = (_joint_vector(a, n, name) for a, name in ((dq_from, "dq_from"), (q_to, "q_to"), (dq_to, "dq_to")))
    rate = _check_rate(sample_rate)
    if not np.isfinite(duration) or duration <= 0:
        raise ValueError(f"duration must be a finite number of seconds > 0, got {duration}")
    periods = max(1, int(round(duration * rate)))
    big_t = periods / rate
    delta, s0, s1 = q1 - q0, v0 * big_t, v1 * big_t
    coef = np.stack([q0, s0, np.zeros(n), 10 * delta - 6 * s0 - 4 * s1,
                     -15 * delta + 8 * s0 + 7 * s1, 6 * delta - 3 * s0 - 3 * s1])   # (6, n)
    tau = np.arange(periods + 1) / periods
    powers = tau[:, None] ** np.arange(6)                                           # (M + 1, 6)
    q = powers @ coef
    dq = (powers[:, :5] * np.arange(1, 6)) @ coef[1:] / big_t
    ddq = (powers[:, :4] * np.array([2.0, 6.0, 12.0, 20.0])) @ coef[2:] / big_t ** 2
    # the polynomial meets the boundary values up to rounding; make the seams exact
    q[0], q[-1], dq[0], dq[-1], ddq[0], ddq[-1] = q0, q1, v0, v1, 0.0, 0.0
    return Trajectory(time=np.arange(periods + 1) / rate, q=q, dq=dq, ddq=ddq)


def transition_duration(q_from, q_to, max_velocity) -> float:
    """Duration (s) of a rest-to-rest ``transition`` whose peak speed stays within max_velocity.

    The peak speed of joint j is ``QUINTIC_PEAK_SPEED |q_to_j - q_from_j| / T``, so
    ``T = max(MIN_TRANSITION_DURATION, max_j 1.875 |q_to_j - q_from_j| / max_velocity_j)``.
    q_from, q_to (n,) rad; max_velocity rad/s, a scalar or (n,), > 0.
    """
    q0 = _joint_vector(q_from, None, "q_from")
    q1 = _joint_vector(q_to, q0.shape[0], "q_to")
    v_max = _limit_array(max_velocity, q0.shape[0], "max_velocity", "rad/s")
    return float(max(MIN_TRANSITION_DURATION, np.max(QUINTIC_PEAK_SPEED * np.abs(q1 - q0) / v_max)))


def _ramp_periods(q, v, joint_range, rate: float) -> int:
    """Sample periods of a ramp between rest and velocity v (n,) at q (n,); 0 if v is all zero.

    The ramp to rest travels v T / 2 beyond q in the direction of v (its velocity falls
    monotonically): with ``joint_range`` it is shortened so that this stays inside the limits,
    down to MIN_RAMP_DURATION. Rounded down to the grid, so it never travels further.
    """
    if not np.any(v):
        return 0
    duration = RAMP_DURATION
    if joint_range is not None:
        room = np.where(v > 0, joint_range[:, 1] - q, q - joint_range[:, 0])
        moving = v != 0
        with np.errstate(invalid="ignore"):  # inf room on unlimited joints
            duration = min(duration, float(np.min(2 * np.maximum(room[moving], 0.0) / np.abs(v[moving]))))
        duration = max(duration, MIN_RAMP_DURATION)
    return max(1, int(np.floor(duration * rate + _GRID_TOLERANCE)))


def excitation_with_approach_and_rest(q_now, plan: Trajectory, sample_rate: float, max_velocity,
                                      joint_range=None) -> tuple[Trajectory, slice]:
    """The whole profile an arm plays: reach the plan from rest, play it, come back to rest.

    Segments, on one uniform grid at ``sample_rate`` Hz starting at t = 0:

    1. approach: rest-to-rest ``transition`` from q_now (n,) rad to a pre-start pose, its
       duration from ``transition_duration`` with ``max_velocity`` (rad/s, scalar or (n,)),
       rounded up to the grid;
    2. launch: ``transition`` from rest at the pre-start pose to the plan's first state
       (q, dq); the pre-start pose q0 - dq0 T / 2 is where that quintic naturally starts,
       so its speed rises monotonically from 0 to dq0 and it never overshoots (a single
       quintic from rest straight into a moving start swings back by up to ~0.2 dq0 T,
       and T grows with the approach distance);
    3. the plan, every sample unchanged;
    4. rest: ``transition`` from the plan's last state (q1, dq1) to q1 + dq1 T / 2 with zero
       velocity, where the decelerating quintic naturally ends (monotone speed).

    Launch and rest last RAMP_DURATION s, shortened when ``joint_range`` (n, 2) is given so
    that they stay inside the limits (not below MIN_RAMP_DURATION); they are left out for a
    plan that starts (ends) at rest. Accelerations step at the seams with the plan (the
    quintics start and end with zero acceleration); positions and velocities are continuous.

    plan: a Trajectory sampled at ``sample_rate`` (its own time offset is ignored).
    Returns (profile, excitation) with profile a Trajectory (N,) / (N, n) and ``excitation``
    the slice of profile samples that are the plan: profile.q[excitation] == plan.q.
    """
    rate = _check_rate(sample_rate)
    plan_time = np.asarray(plan.time, dtype=float)
    if plan_time.ndim != 1 or plan_time.shape[0] < 2:
        raise ValueError("plan needs at least 2 samples")
    num = plan_time.shape[0]
    plan_q, plan_dq, plan_ddq = (np.asarray(a, dtype=float) for a in (plan.q, plan.dq, plan.ddq))
    n = plan_q.shape[1] if plan_q.ndim == 2 else -1
    for name, arr in (("q", plan_q), ("dq", plan_dq), ("ddq", plan_ddq)):
        if arr.shape != (num, n):
            raise ValueError(f"plan {name} has shape {arr.shape}, expected ({num}, n)")
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"plan {name} contains NaN or infinite values")
    if np.max(np.abs(np.diff(plan_time) * rate - 1.0)) > 1e-6:
        raise ValueError(f"plan is not sampled uniformly at sample_rate {rate} Hz")
    q_now = _joint_vector(q_now, n, "q_now")
    rng = None if joint_range is None else _validate_range(joint_range)
    if rng is not None and rng.shape[0] != n:
        raise ValueError(f"joint_range has {rng.shape[0]} rows for a plan of {n} joints")
    zero = np.zeros(n)

    q0, v0, q1, v1 = plan_q[0], plan_dq[0], plan_q[-1], plan_dq[-1]
    launch_periods = _ramp_periods(q0, -v0, rng, rate)
    q_pre = q0 - v0 * (launch_periods / rate) / 2
    approach_periods = max(1, int(np.ceil(transition_duration(q_now, q_pre, max_velocity) * rate - _GRID_TOLERANCE)))
    segments = [transition(q_now, zero, q_pre, zero, approach_periods / rate, rate)]
    if launch_periods:
        launch = transition(q_pre, zero, q0, v0, launch_periods / rate, rate)
        segments.append(Trajectory(launch.time, launch.q[1:], launch.dq[1:], launch.ddq[1:]))
    # the plan's first sample replaces the last sample of the segment before it (equal values)
    last = segments[-1]
    segments[-1] = Trajectory(last.time, last.q[:-1], last.dq[:-1], last.ddq[:-1])
    start = sum(s.q.shape[0] for s in segments)
    segments.append(Trajectory(plan_time, plan_q, plan_dq, plan_ddq))
    rest_periods = _ramp_periods(q1, v1, rng, rate)
    if rest_periods:
        rest = transition(q1, v1, q1 + v1 * (rest_periods / rate) / 2, zero, rest_periods / rate, rate)
        segments.append(Trajectory(rest.time, rest.q[1:], rest.dq[1:], rest.ddq[1:]))

    q, dq, ddq = (np.concatenate([getattr(s, name) for s in segments]) for name in ("q", "dq", "ddq"))
    profile = Trajectory(time=np.arange(q.shape[0]) / rate, q=q, dq=dq, ddq=ddq)
    return profile, slice(start, start + num)
