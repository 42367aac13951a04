"""Seeded multistart with warm starts, on one or two processes, within a wall-clock budget.

A local search from one starting point ends in a local optimum of the design criterion; a few
of them from different points find a better one. The search runs in rounds of two local
searches. The first of each round starts from a fresh random point; the second from the best
point found before the round, perturbed (a warm start: the neighbourhood of a good design holds
better ones more often than a random point does), or from a random point while there is none.
Each start has its own seed, derived from the search's seed and its index, so the same seed
gives the same starts in the same order whatever the number of processes: a search ended by
``max_restarts`` (not by the clock) returns the same result on one process or two.

With two processes the second search of each round runs in one helper process while the first
runs here. The helper is spawned (not forked: safe inside a ROS node's threads) and gets the
problem once, pickled; if it cannot start or fails, its searches run here instead. A local
search stops at the deadline and returns the best point it has seen.

The problem is duck-typed: ``start(gen, incumbent) -> x0`` and
``local_search(x0, max_iterations, deadline) -> (start_x, start_value, best_x, best_value,
iterations, evaluations, message)``, raising OutOfTime past ``deadline`` (``time.monotonic``
s, which all processes share) from ``start``.
"""
from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import pickle
import time
from dataclasses import dataclass

import numpy as np

ROUND = 2


def search_workers(time_limit_s: float) -> int:
    """Processes worth giving a search of ``time_limit_s`` s: 2 when this process may run on two
    cores and the budget is at least 20 s (a helper takes a few seconds to start: it imports
    NumPy, SciPy and MuJoCo and unpickles the problem), else 1."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return 2 if cores >= 2 and time_limit_s >= 20.0 else 1


class OutOfTime(Exception):
    """The wall-clock budget is spent: the problem stops evaluating."""


@dataclass(frozen=True, eq=False)
class LocalResult:
    """One local search: its start and the best feasible point it saw (value inf, x None when
    it saw none), SLSQP iterations, criterion evaluations, and how the optimizer ended."""

    index: int
    start_x: np.ndarray | None
    start_value: float
    best_x: np.ndarray | None
    best_value: float
    iterations: int
    evaluations: int
    message: str


_PROBLEM = None  # in a helper process: the problem, unpickled once


def _initialise(payload: bytes) -> None:
    global _PROBLEM
    _PROBLEM = pickle.loads(payload)


def _one(problem, index: int, entropy: int, incumbent, deadline: float, max_iterations: int) -> LocalResult:
    gen = np.random.default_rng([entropy, index])
    try:
        start = problem.start(gen, incumbent)
    except OutOfTime:
        return LocalResult(index, None, np.inf, None, np.inf, 0, 0, "out of time before the start")
    return LocalResult(index, *problem.local_search(start, max_iterations, deadline))


def _remote(index: int, entropy: int, incumbent, deadline: float, max_iterations: int) -> LocalResult:
    _PROBLEM.deadline = deadline
    return _one(_PROBLEM, index, entropy, incumbent, deadline, max_iterations)


def run(problem, seed, deadline: float, max_restarts: int | None, max_iterations: int,
        workers: int = 1) -> list[LocalResult]:
    """Local searches from seeded starts until ``deadline`` (time.monotonic() s) or
    ``max_restarts`` searches. workers: 1 (here only) or 2 (here and one helper process).
    Returns every search's LocalResult in start order (at least one)."""
    if workers not in (1, 2):
        raise ValueError(f"workers must be 1 or 2, got {workers}")
    entropy = int(np.random.SeedSequence(seed).entropy)
    results: list[LocalResult] = []
    pool = None
    try:
        index = 0
        while max_restarts is None or index < max_restarts:
            if time.monotonic() >= deadline and results:
                break
            incumbent = _incumbent(results)
            indices = [i for i in range(index, index + ROUND) if max_restarts is None or i < max_restarts]
            index += len(indices)
            remote = None
            if workers == 2 and len(indices) == 2:
                if pool is None:
                    pool = _helper(problem)
                if pool is not None:
                    try:
                        remote = pool.submit(_remote, indices[1], entropy, _warm(indices[1], incumbent),
                                             deadline, max_iterations)
                    except Exception:  # a helper that cannot take work: carry on alone
                        pool = _shutdown(pool)
            round_results = [_one(problem, indices[0], entropy, _warm(indices[0], incumbent), deadline,
                                  max_iterations)]
            if len(indices) == 2:
                outcome = None
                if remote is not None:
                    try:
                        outcome = remote.result()
                    except Exception:
                        pool = _shutdown(pool)
                if outcome is None:
                    outcome = _one(problem, indices[1], entropy, _warm(indices[1], incumbent), deadline,
                                   max_iterations)
                round_results.append(outcome)
            results.extend(round_results)
    finally:
        _shutdown(pool)
    return results


def _warm(index: int, incumbent):
    """The incumbent for the second search of a round, None (a random start) otherwise."""
    return incumbent if index % ROUND == 1 else None


def _incumbent(results: list[LocalResult]):
    """The best feasible point found so far (x), or None."""
    found = [r for r in results if r.best_x is not None]
    return min(found, key=lambda r: (r.best_value, r.index)).best_x if found else None


def _helper(problem):
    """A pool of one spawned process holding ``problem``, or None when it cannot be made."""
    try:
        payload = pickle.dumps(problem)
        return concurrent.futures.ProcessPoolExecutor(
            max_workers=1, mp_context=multiprocessing.get_context("spawn"), initializer=_initialise,
            initargs=(payload,))
    except Exception:
        return None


def _shutdown(pool):
    if pool is not None:
        pool.shutdown(wait=True, cancel_futures=True)
    return None
