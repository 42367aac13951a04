"""A fleet's periods identified on a Dask cluster (dask.distributed): the only module of the
package that imports Dask.

Each period is a small task graph (fleet.period): one task per file reads it and keeps its
samples in the worker's memory; the tasks that need them (its reduced form, its residuals, its
validation sums) run on that worker, so a file is read once and only summaries (a reduced form is
a few hundred kB) travel. The files' reduced forms merge in a binary tree, whose depth grows with
the logarithm of the file count. A worker lost mid-run loses the results it held: the scheduler
computes them again from their inputs elsewhere (the tasks are pure functions), so nothing is lost
or counted twice. At most ``window`` periods are in flight, which bounds what the workers hold.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable

import dask
from dask.distributed import Client, LocalCluster, as_completed

from ..errors import SysidError
from ..identification.parts import merge_parts
from . import period as steps
from .manifest import Period


# Set in each local worker before it starts. Dask sets MALLOC_TRIM_THRESHOLD_, which turns off glibc's
# adaptive mmap threshold: every array above 128 kB is then mapped and unmapped afresh, and an
# identification's blocks ran 45 % slower. Arrays up to 32 MiB (glibc's own adaptive ceiling) come
# from the heap again; Dask's trimming still returns freed memory to the system.
WORKER_ENVIRON = {"MALLOC_MMAP_THRESHOLD_": 32 << 20}


def _merge_tree(client: Client, parts: list, key: str):
    """The parts' futures merged pairwise, in order, level by level."""
    level = 0
    while len(parts) > 1:
        merged = [client.submit(merge_parts, a, b, key=f"merge-{key}-{level}-{k}", pure=False)
                  for k, (a, b) in enumerate(zip(parts[0::2], parts[1::2]))]
        parts = merged + parts[len(parts) - len(parts) % 2:]
        level += 1
    return parts[0]


def submit_period(client: Client, period: Period):
    """The future of one period's steps.Outcome."""
    key = period.key.replace("/", "-")
    *_, problem = steps.setup(period.model)
    if problem is not None:
        return client.submit(steps.identify_period, period, key=f"period-{key}", pure=False)
    files = range(len(period.files))
    loaded = [client.submit(steps.load_file, period, k, key=f"load-{key}-{k}", pure=False) for k in files]
    facts = [client.submit(steps.file_facts, period, r, key=f"facts-{key}-{k}", pure=False)
             for k, r in enumerate(loaded)]
    rows = client.submit(steps.split_rows, period, facts, key=f"rows-{key}", pure=False)
    parts = [client.submit(steps.reduce_file, period, r, rows, k, key=f"reduce-{key}-{k}", pure=False)
             for k, r in enumerate(loaded)]
    merged = _merge_tree(client, parts, key)
    estimate = client.submit(steps.estimate_period, period, merged, key=f"estimate-{key}", pure=False)
    residuals = [client.submit(steps.file_residuals, period, r, rows, k, merged, estimate,
                               key=f"residuals-{key}-{k}", pure=False) for k, r in enumerate(loaded)]
    result = client.submit(steps.conclude_period, period, merged, estimate, residuals, key=f"conclude-{key}",
                           pure=False)
    sums = [client.submit(steps.file_validation, period, r, rows, k, result, key=f"validation-{key}-{k}",
                          pure=False) for k, r in enumerate(loaded)]
    return client.submit(steps.finish_period, period, result, merged, sums, facts, key=f"period-{key}",
                         pure=False)


@contextlib.contextmanager
def connect(scheduler: str | None = None, workers: int | None = None):
    """A Client of the cluster at ``scheduler`` (an address), or of a LocalCluster of ``workers``
    processes (default: one per core) with one thread each (the numerical libraries' own threads
    stay at one per worker)."""
    if scheduler is not None:
        with Client(scheduler) as client:
            yield client
        return
    with dask.config.set({f"distributed.nanny.pre-spawn-environ.{name}": value for name, value in WORKER_ENVIRON.items()}), \
            LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        yield client


def run_periods(client: Client, periods, window: int | None = None,
                done: Callable[[steps.Outcome], None] | None = None) -> list:
    """Every period's steps.Outcome, in the order of ``periods``; ``done`` is called with each as it
    completes. A period whose steps raise gets a failed Outcome saying why; the others go on."""
    periods = list(periods)
    if window is None:
        window = 2 * max(1, len(client.scheduler_info().get("workers", {}))) + 2
    outcomes: dict = {}
    pending = iter(range(len(periods)))
    futures = {}
    for number in pending:
        futures[submit_period(client, periods[number])] = number
        if len(futures) >= window:
            break
    queue = as_completed(list(futures))
    for future in queue:
        number = futures.pop(future)
        try:
            outcome = future.result()
        except SysidError as err:  # a period's data: recorded, the fleet goes on
            outcome = steps.failed_outcome(periods[number], str(err))
        except Exception as err:  # anything else too, named
            outcome = steps.failed_outcome(periods[number], f"{type(err).__name__}: {err}")
        outcomes[number] = outcome
        if done is not None:
            done(outcome)
        following = next(pending, None)
        if following is not None:
            new = submit_period(client, periods[following])
            futures[new] = following
            queue.add(new)
    return [outcomes[k] for k in range(len(periods))]
