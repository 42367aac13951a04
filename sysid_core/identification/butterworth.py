"""Butterworth low-pass filters, designed and applied forward and backward (zero phase).

Why not ``scipy.signal``: importing it costs about a second of CPU (SciPy 1.17 parses the
docstrings of every function it exports, and it pulls in ``scipy.stats``), more than the
filtering of a 15 s recording and a third of a whole ``sysid-identify`` run; this module needs
only NumPy, and gives what ``scipy.signal.butter(..., output="sos")`` and ``sosfiltfilt``
give (the tests hold it to them).

A recursive filter is sequential in time, and a Python loop over samples is slow. So the
signal is cut into B blocks of L samples, and each step of the loop advances every block
(and every channel) by one sample at once: all blocks first run from a guessed state (their
inputs held), then each block's true starting state is carried from the block before it
(B small steps) and the difference's effect, a homogeneous response of two known sequences,
added (a matrix product). Both passes, forward and backward, run in that one layout; the
loop has L steps of one BLAS call each, with L ~ sqrt(samples).
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
    """(B, 2, P), in place of ``jumps``: the corrections d_b = carry @ d_{b-1} + jumps[b] of the
    blocks' starting states in the order they are filtered, d_0 = 0; jumps (B, 2, P) what the
    true start of block b differs from its guess by when block b - 1 started right, carry
    (2, 2) how a block's starting error reaches its end. One block after the other: a prefix
    scan would need carry's high powers, which lose digits where the poles near 1."""
    jumps[0] = 0.0
    for b in range(1, jumps.shape[0]):
        jumps[b] += carry @ jumps[b - 1]
    return jumps


# Samples as one opaque item each: a (T, P) signal's rows move between time order and the
# blocks' order in one strided copy of T items, several times faster than of T x P numbers.
def _rows_as_items(x: np.ndarray) -> np.ndarray:
    return x.view(np.dtype((np.void, x.dtype.itemsize * x.shape[-1])))[..., 0]


def _section(z: np.ndarray, section, source: int, level: np.ndarray, held: np.ndarray, forward: bool) -> int:
    """One second-order section over every block of z at once, forward in time or backward,
    from ``source``'s role to the other's; returns the role the output is in.

    z (L + 4, 2, B, P): z[2 + k, role, b] is sample k of block b less the block's ``level``
    (B, P); rows 0-1 and L+2..L+3 the two samples before and after it. ``held`` (P,): the value
    the signal held forever before its start (forward) or after its end (backward)."""
    length, blocks, channels = z.shape[0] - 4, z.shape[2], z.shape[3]
    target = 1 - source
    b0, b1, b2, _, a1, a2 = section
    rows = z.reshape(length + 4, 2, -1)
    step = level[:-1] - level[1:]  # a value of block b - 1 about block b's level
    # the inputs just before each block in the direction of travel (the neighbour's, re-levelled;
    # the held value at the signal's end) and its outputs there guessed equal to them, exact
    # for a constant: the correction left is the size of the filter's lag, not of the signal
    halo, near, inner = (slice(0, 2), [1, 0], slice(length, length + 2)) if forward else \
        (slice(length + 2, length + 4), [length + 2, length + 3], slice(2, 4))
    if forward:
        np.add(z[inner, source, :-1], step, out=z[halo, source, 1:])
        z[halo, source, 0] = held - level[0]
    else:
        np.subtract(z[inner, source, 1:], step, out=z[halo, source, :-1])
        z[halo, source, -1] = held - level[-1]
    z[halo, target] = z[halo, source]
    # one BLAS call per sample reads the six values it needs: three inputs, two earlier
    # outputs and (times 0) its own
    coefficients = np.zeros((3, 2))
    coefficients[:, source] = (b2, b1, b0) if forward else (b0, b1, b2)
    coefficients[:, target] = (-a2, -a1, 0.0) if forward else (0.0, -a1, -a2)
    coefficients = coefficients.reshape(6)
    if forward:
        for k in range(2, length + 2):
            np.dot(coefficients, rows[k - 2:k + 1].reshape(6, -1), out=rows[k, target])
    else:
        for k in range(length + 1, 1, -1):
            np.dot(coefficients, rows[k:k + 3].reshape(6, -1), out=rows[k, target])
    # each block's true state at its start less the guess, carried from the block before it in
    # the direction of travel, and what it adds along the block (a homogeneous response)
    response = _homogeneous(a1, a2, length)
    jumps = np.empty((blocks, 2, channels))
    ends = z[[length + 1, length] if forward else [2, 3], target]  # (2, B, P) the blocks' ends
    if forward:
        np.subtract((ends[:, :-1] + step).transpose(1, 0, 2), z[near, target, 1:].transpose(1, 0, 2),
                    out=jumps[1:])
        correction = _carried(jumps, response[[-1, -2]])
    else:
        np.subtract((ends[:, 1:] - step).transpose(1, 0, 2), z[near, target, :-1].transpose(1, 0, 2),
                    out=jumps[:-1])
        correction = _carried(jumps[::-1], response[[-1, -2]])[::-1]
        response = response[::-1]
    correction = correction.transpose(1, 0, 2).reshape(2, blocks * channels)
    for start in range(0, length, 32):  # a few rows at a time: the product stays in cache
        stop = min(start + 32, length)
        rows[2 + start:2 + stop, target] += response[start:stop] @ correction
    return target


def zero_phase(x, sections: np.ndarray, pad_before: int, pad_after: int) -> np.ndarray:
    """``sections`` run forward then backward over x (N, ...) along axis 0, SciPy's
    ``sosfiltfilt``: odd-extension padding of ``pad_before`` and ``pad_after`` samples (0 at
    an edge inside a longer signal, where the filter starts from its steady state and the
    margin around the block absorbs the transient), each pass from the steady state of its
    first sample (what it would be after that value had been held forever: SciPy's
    ``sosfilt_zi`` scaled by it). Returns (N, ...) float, in x's unit; the phase cancels, the
    gain is squared."""
    x = np.asarray(x, dtype=float)
    num = x.shape[0]
    if pad_before >= num or pad_after >= num:
        raise ValueError(f"padding of {max(pad_before, pad_after)} samples needs a longer signal than {num}")
    flat = x.reshape(num, -1)
    total, channels = pad_before + num + pad_after, flat.shape[1]
    ext = np.empty((total, channels))
    ext[pad_before:pad_before + num] = flat
    if pad_before:
        ext[:pad_before] = 2.0 * flat[0] - flat[pad_before:0:-1]
    if pad_after:
        ext[pad_before + num:] = 2.0 * flat[-1] - flat[-2:-pad_after - 2:-1]

    length = _block_length(total)
    blocks, full = -(-total // length), total // length
    z = np.zeros((length + 4, 2, blocks, channels))
    samples = z[2:length + 2]
    _rows_as_items(samples[:, 0, :full]).T[...] = _rows_as_items(ext[:full * length]).reshape(full, length)
    last = total - full * length - 1 if full < blocks else length - 1  # the last sample's row in the last block
    if full < blocks:
        samples[:last + 1, 0, -1] = ext[full * length:]
    # Every section passes a constant unchanged (unit gain at 0 Hz), so each block is filtered
    # about its own first value: the recursion's terms are then the size of the signal's change
    # within a block, not of its level, and so are its rounding errors (near-1 poles amplify them)
    level = samples[0, 0].copy()
    samples[:, 0] -= level
    role = 0
    for section in sections:
        role = _section(z, section, role, level, ext[0], forward=True)
    # backward from the last output held: the last block's rows beyond the signal hold it too
    held = samples[last, role, -1] + level[-1]
    samples[last + 1:, role, -1] = samples[last, role, -1]
    for section in sections[::-1]:
        role = _section(z, section, role, level, held, forward=False)
    samples[:, role] += level
    out = np.empty((blocks * length, channels))
    _rows_as_items(out).reshape(blocks, length)[...] = _rows_as_items(samples[:, role]).T
    return out[pad_before:pad_before + num].reshape(x.shape)
