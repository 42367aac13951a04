"""Butterworth low-pass filters, designed and applied forward and backward (zero phase).

Why not ``scipy.signal``: importing it costs about a second of CPU (SciPy 1.17 parses the
docstrings of every function it exports, and it pulls in ``scipy.stats``), more than the
filtering of a 15 s recording and half of a whole ``sysid-identify`` run; this module needs
only NumPy, and gives what ``scipy.signal.butter(..., output="sos")`` and ``sosfiltfilt``
give (the tests hold it to them).

A recursive filter is sequential in time, and a Python loop over samples is slow. So the
signal is cut into B blocks of L samples, and each step of the loop advances every block
(and every channel) by one sample at once: all blocks first run from a zero filter state,
then each block's true starting state is carried from the block before (B small steps),
and its effect, a homogeneous response of two known sequences, is added (a matrix
product). The loop has L steps of one BLAS call each, with L ~ sqrt(samples).
"""
from __future__ import annotations

import numpy as np


def lowpass_sections(order: int, cutoff_hz: float, sample_rate: float) -> np.ndarray:
    """Digital Butterworth low-pass of ``order`` with its -3 dB point at ``cutoff_hz``, for
    samples at ``sample_rate`` Hz: second-order sections (ceil(order/2), 6) in SciPy's layout
    [b0, b1, b2, 1, a1, a2], each of unit gain at 0 Hz, the poles nearest the unit circle last.

    The analog prototype's poles, at the cutoff pre-warped for the bilinear transform, mapped
    to z; every zero is at z = -1. ValueError unless 0 < cutoff_hz < sample_rate / 2."""
    if int(order) != order or order < 1:
        raise ValueError(f"filter order must be an integer >= 1, got {order}")
    if not np.isfinite(sample_rate) or sample_rate <= 0:
        raise ValueError(f"sample_rate must be > 0 Hz, got {sample_rate}")
    nyquist = sample_rate / 2
    if not 0 < cutoff_hz < nyquist:
        raise ValueError(f"cutoff {cutoff_hz} Hz must be in (0, {nyquist}) Hz, the Nyquist "
                         f"frequency of {sample_rate} Hz sampling")
    order = int(order)
    warped = 2.0 * sample_rate * np.tan(np.pi * cutoff_hz / sample_rate)
    # left half-plane poles of the prototype, upper half and the real one (odd order)
    k = np.arange(order // 2 + order % 2)
    analog = warped * np.exp(1j * np.pi * (2 * k + order + 1) / (2 * order))
    poles = (2.0 * sample_rate + analog) / (2.0 * sample_rate - analog)
    sections = []
    for pole in poles[np.argsort(np.abs(poles))]:
        if abs(pole.imag) > 1e-12 * abs(pole):  # a conjugate pair, zeros -1, -1
            a1, a2 = -2.0 * pole.real, abs(pole) ** 2
            gain = (1.0 + a1 + a2) / 4.0
            sections.append([gain, 2.0 * gain, gain, 1.0, a1, a2])
        else:  # the real pole of an odd order, zero -1
            a1 = -pole.real
            gain = (1.0 + a1) / 2.0
            sections.append([gain, gain, 0.0, 1.0, a1, 0.0])
    return np.array(sections)


def _block_length(samples: int) -> int:
    """Samples per block L: the loop over a block's samples costs a BLAS call per step, the
    carry from block to block a small product per block: L ~ sqrt(samples) balances them."""
    return max(16, int(np.sqrt(samples)))


def _homogeneous(a1: float, a2: float, length: int) -> np.ndarray:
    """(length, 2): y[k] = -a1 y[k-1] - a2 y[k-2] from (y[-1], y[-2]) = (1, 0) and (0, 1)."""
    out = np.empty((length, 2))
    for column, (y1, y2) in enumerate(((1.0, 0.0), (0.0, 1.0))):
        values = []  # Python floats: a few hundred scalar steps, cheaper than NumPy's per call
        for _ in range(length):
            y1, y2 = -a1 * y1 - a2 * y2, y1
            values.append(y1)
        out[:, column] = values
    return out


def _carried(jumps: np.ndarray, carry: np.ndarray) -> np.ndarray:
    """(B, 2, P): the corrections d_b = carry @ d_{b-1} + jumps[b] of every block's starting
    state, d_0 = 0; jumps (B, 2, P) what the true start of block b differs from its guess by
    when block b - 1 started right, carry (2, 2) how a block's starting error reaches its end.
    One block after the other: a prefix scan would need carry's high powers, which lose
    digits where the poles near 1."""
    state = jumps
    state[0] = 0.0
    for b in range(1, state.shape[0]):
        state[b] += carry @ state[b - 1]
    return state


# Samples as one opaque item each: a (T, P) signal's rows move between time order and the
# blocks' order in one strided copy of T items, several times faster than of T x P numbers.
def _rows_as_items(x: np.ndarray) -> np.ndarray:
    return x.view(np.dtype((np.void, x.dtype.itemsize * x.shape[-1])))[..., 0]


def _causal(x: np.ndarray, sections: np.ndarray) -> np.ndarray:
    """The cascade of ``sections`` run over x (T, P), rows contiguous, along axis 0 from the
    steady state of its first sample (what it would be after that value had been held forever:
    SciPy's ``sosfilt_zi`` scaled by x[0]). Returns (T, P)."""
    total, channels = x.shape
    length = _block_length(total)
    blocks = -(-total // length)
    full = total // length
    # z[2 + k, role, b] is sample k of block b (rows 0, 1: the two before it); role 0 and 1
    # take turns as a section's input and output, so one BLAS call reads the six values a
    # sample of the recursion needs: three inputs, two earlier outputs and the output itself
    z = np.zeros((length + 2, 2, blocks, channels))
    _rows_as_items(z[2:, 0, :full]).T[...] = _rows_as_items(x[:full * length]).reshape(full, length)
    if full < blocks:  # the last block's tail holds the last value: it never reaches earlier samples
        z[2:, 0, -1] = x[-1]
        z[2:2 + total - full * length, 0, -1] = x[full * length:]
    # Every section passes a constant unchanged (unit gain at 0 Hz), so each block is filtered
    # about its own first value: the recursion's terms are then the size of the signal's change
    # within a block, not of its level, and so are its rounding errors (near-1 poles amplify them)
    level = z[2, 0].copy()  # (B, P)
    z[2:, 0] -= level
    step = level[:-1] - level[1:]  # a value of block b - 1 about block b's level
    steady = x[0] - level[0]  # where the first block starts: the first sample held forever
    rows = z.reshape(length + 2, 2, blocks * channels)
    for number, (b0, b1, b2, _, a1, a2) in enumerate(sections):
        source, target = number % 2, 1 - number % 2
        # the inputs before each block: the previous block's last two, the steady value for
        # the first; its outputs guessed equal to them (exact if the input had been constant):
        # the guess leaves a correction the size of the filter's lag, not of the signal, so
        # the homogeneous responses it is carried with cancel little
        np.add(z[-2:, source, :-1], step, out=z[:2, source, 1:])
        z[:2, source, 0] = steady
        z[:2, target] = z[:2, source]
        coefficients = np.zeros((3, 2))
        coefficients[:, source] = (b2, b1, b0)
        coefficients[:2, target] = (-a2, -a1)
        coefficients = coefficients.reshape(6)
        for k in range(2, length + 2):
            np.dot(coefficients, rows[k - 2:k + 1].reshape(6, -1), out=rows[k, target])
        # each block's true state (y[-1], y[-2]) at its start less the guess, carried from
        # the block before, and what it adds along the block
        response = _homogeneous(a1, a2, length)
        jumps = np.empty((blocks, 2, channels))
        np.subtract((z[[-1, -2], target, :-1] + step).transpose(1, 0, 2), z[[1, 0], target, 1:].transpose(1, 0, 2),
                    out=jumps[1:])
        correction = _carried(jumps, response[[-1, -2]]).transpose(1, 0, 2).reshape(2, -1)
        for start in range(0, length, 32):  # a few rows at a time: the product stays in cache
            rows[2 + start:2 + start + 32, target] += response[start:start + 32] @ correction
    z[2:, len(sections) % 2] += level
    out = np.empty((blocks * length, channels))
    _rows_as_items(out).reshape(blocks, length)[...] = _rows_as_items(z[2:, len(sections) % 2]).T
    return out[:total]


def zero_phase(x, sections: np.ndarray, pad_before: int, pad_after: int) -> np.ndarray:
    """``sections`` run forward then backward over x (N, ...) along axis 0, SciPy's
    ``sosfiltfilt``: odd-extension padding of ``pad_before`` and ``pad_after`` samples (0 at
    an edge inside a longer signal, where the filter starts from its steady state and the
    margin around the block absorbs the transient), each pass from the steady state of its
    first sample. Returns (N, ...) float, in x's unit; the phase cancels, the gain is squared."""
    x = np.asarray(x, dtype=float)
    num = x.shape[0]
    if pad_before >= num or pad_after >= num:
        raise ValueError(f"padding of {max(pad_before, pad_after)} samples needs a longer signal than {num}")
    flat = x.reshape(num, -1)
    ext = np.empty((pad_before + num + pad_after, flat.shape[1]))
    ext[pad_before:pad_before + num] = flat
    if pad_before:
        ext[:pad_before] = 2.0 * flat[0] - flat[pad_before:0:-1]
    if pad_after:
        ext[pad_before + num:] = 2.0 * flat[-1] - flat[-2:-pad_after - 2:-1]
    forward = _causal(ext, sections)
    backward = _causal(forward[::-1], sections)[::-1]
    return backward[pad_before:pad_before + num].reshape(x.shape)
