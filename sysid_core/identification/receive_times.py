"""Send times of messages stamped only when they were received.

A driver that does not stamp its JointState messages publishes them at a steady rate, but a
loaded machine delivers them in batches: dozens arrive within microseconds, then nothing for
tens of milliseconds. Taken as sample times, the receive times would read as runs of repeated
samples between gaps of lost ones. No message can be received before it was sent, and a
steady source sends one per period T, so each message was sent at the latest

    s_k = min(r_k, s_{k+1} - T),   s_N = r_N,

the backward pass of ``send_times``: a batch is spread back over the time it waited, at the
nominal rate, while a real pause (nothing sent) stays a gap: no batch follows it to fill it.
The last batch before a pause (or the end) keeps its delay: nothing after it says how long it
waited, so a few samples there may stand apart as a short stretch of their own.
T is the source's rate measured over the whole recording (``nominal_period``).
"""
from __future__ import annotations

import numpy as np

# receive intervals longer than this split the recording when the rate is measured: the
# source paused (a batch of a loaded machine waits tens of milliseconds, not this long)
PAUSE_S = 0.5


def nominal_period(receive_s) -> float:
    """The source's period (s) from receive times ``receive_s`` (N,) s, non-decreasing: the
    least-squares slope of time against message index, pooled over the stretches between
    pauses longer than PAUSE_S (batching moves single messages, not the slope). ValueError
    when no stretch has 3 messages spread over time."""
    r = np.asarray(receive_s, dtype=float)
    edges = np.concatenate(([0], np.flatnonzero(np.diff(r) > PAUSE_S) + 1, [r.size]))
    covariance = variance = 0.0
    for a, b in zip(edges[:-1], edges[1:]):
        if b - a < 3:
            continue
        k = np.arange(b - a, dtype=float)
        k -= k.mean()
        covariance += float(k @ (r[a:b] - r[a:b].mean()))
        variance += float(k @ k)
    if not variance or not covariance > 0:
        raise ValueError("receive times too few or all equal: the source's rate cannot be measured")
    return covariance / variance


def send_times(receive_s, period: float | None = None) -> np.ndarray:
    """The latest send times (N,) s of messages received at ``receive_s`` (N,) s from a source
    sending one per ``period`` s (default ``nominal_period``): the backward pass of the module
    docstring, vectorised as s_k = k T + min_{j >= k} (r_j - j T). Strictly increasing."""
    r = np.asarray(receive_s, dtype=float)
    if r.size < 2:
        return r.copy()
    period = nominal_period(r) if period is None else float(period)
    k = np.arange(r.size) * period
    return np.minimum.accumulate((r - k)[::-1])[::-1] + k
