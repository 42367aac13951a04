"""Excitation trajectories: what the arm is asked to do so that every parameter shows up.

A multisine per joint (a few sinusoids with incommensurate frequencies and random
phases) never repeats within a typical recording, so the sampled states cover the
joint space densely, and its derivatives are exact, so a planned trajectory carries
its own reference accelerations.
"""
from __future__ import annotations

from fractions import Fraction

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
_SIMPLE_RATIOS = np.array(sorted({float(Fraction(p, q)) for p in range(1, _MAX_RATIO_TERM + 1)
                                  for q in range(1, _MAX_RATIO_TERM + 1)}))
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
    amplitude_fraction: in (0, 1]; the sampled peak of |q - center| is scaled to this fraction
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
