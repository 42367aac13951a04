"""Whole-arm joint-torque regressor: tau (N, n) = Y (N, n, 10 nb) @ theta (10 nb,)."""
from __future__ import annotations

import threading
from functools import lru_cache

import numpy as np

from .kinematics import Workspace, as_samples, forward_plan, joint_chains, joint_steps, run
from .rigid_body import body_regressor_blocks
from .tree import KinematicTree

# Samples go in blocks of BLOCK, the last (or only) one of the smallest size of a fixed
# ladder that holds the rest: a block's NumPy calls are planned once per tree and size, and
# a call uses at most two sizes. BLOCK bounds the temporaries (about 2.1 kB per sample of a
# block on a 7-DOF arm) while the Python overhead per block (several hundred ufunc calls)
# stays small against the work. The ladder: multiples of BLOCK / 8 (a last block wastes
# less than BLOCK / 8 samples), below that powers of two down to SMALLEST.
BLOCK = 8192
SMALLEST = 64
# Per thread, the Workspace and plan of the last KEPT block sizes (for the last tree), kept
# between calls: paging in fresh temporaries on every call would cost as much as the
# computation. KEPT bounds the memory a thread keeps, whatever the calls' sample counts.
KEPT = 3
_WORKSPACES = threading.local()


@lru_cache(maxsize=32)
def _zero_blocks(tree: KinematicTree) -> tuple:
    """(joint, columns) of Y that are zero by structure, runs of the bodies the joint does not
    move merged: the blocks ``joint_torque_regressor`` never writes."""
    blocks = []
    for j in range(tree.n_joints):
        free = np.flatnonzero(~tree.support[j])
        for bodies in np.split(free, np.flatnonzero(np.diff(free) > 1) + 1) if free.size else ():
            blocks.append((j, slice(10 * int(bodies[0]), 10 * int(bodies[-1]) + 10)))
    return tuple(blocks)


def _result(tree: KinematicTree, shape: tuple, out) -> np.ndarray:
    """The (n, 10 nb, N) buffer the result is written into, its structurally zero blocks
    (_zero_blocks) zero; the caller writes all the others. ``out``: an earlier result of this
    tree for N samples (the (N, n, 10 nb) view it was returned as) to write over, those blocks
    cleared again (whatever was written in them since); None: fresh zeros."""
    if out is None:
        return np.zeros(shape)
    buffer = np.moveaxis(out, 0, -1) if isinstance(out, np.ndarray) else None
    if buffer is None or buffer.shape != shape or buffer.dtype != np.float64 or not buffer.flags.c_contiguous \
            or not buffer.flags.writeable:
        raise ValueError(f"out must be an earlier result of this regressor for {shape[-1]} samples: an "
                         f"({shape[-1]}, {shape[0]}, {shape[1]}) float64 view of a joint-major buffer, got "
                         f"{getattr(out, 'shape', type(out).__name__)}")
    for j, columns in _zero_blocks(tree):
        buffer[j, columns] = 0.0
    return buffer


def _as_index(joints: tuple):
    """A contiguous run of joints (always so on serial chains) as a slice: slabs copy faster."""
    if joints and joints == tuple(range(joints[0], joints[-1] + 1)):
        return slice(joints[0], joints[-1] + 1)
    return np.array(joints, dtype=int)


def _projection(subspaces: np.ndarray, reach: slice, mass, first_moment, inertia) -> tuple:
    """The operands of rows (k, 10, B) = subspaces (k, 6, B) against a body's regressor A
    (6, 10, B) given by its blocks, cut to the components ``reach`` covers (BodyPass.reach).

    A's structure: mass acts on the force rows 3-5, inertia on the moment rows 0-2. Per block
    of columns, (index into a row, subspace components (k, r, B), A's rows (r, ..., B)); a
    block that no reached component acts on has None for both: its columns are zero.
    """
    lo, hi = reach.start, reach.stop
    parts = []
    # per block: its columns, the first and last + 1 of A's rows it reads, its array, A's row of array[0]
    for index, first, last, rows, row0 in ((0, max(lo, 3), hi, mass, 3), (slice(1, 4), lo, hi, first_moment, 0),
                                           (slice(4, 10), lo, min(hi, 3), inertia, 0)):
        parts.append((index, subspaces[:, first:last], rows[first - row0:last - row0]) if first < last
                     else (index, None, None))
    return tuple(parts)


def _project(rows: np.ndarray, parts: tuple) -> None:
    """rows (k, 10, C) = subspaces against A by their _projection (C <= B: the first C samples).

    einsum contracts each block in one C loop straight into ``rows``, with no temporaries.
    """
    count = rows.shape[-1]
    for index, subspaces, blocks in parts:
        if subspaces is None:
            rows[:, index] = 0.0
            continue
        if count < subspaces.shape[-1]:
            subspaces, blocks = subspaces[..., :count], blocks[..., :count]
        np.einsum("krn,r...n->k...n", subspaces, blocks, out=rows[:, index])


def _constant_plan(motion: np.ndarray, mass, first_moment, inertia, work: Workspace) -> tuple:
    """How to write row (10, C) = constant motion (6,) against A: a sum over motion's non-zeros only.

    Per part of the row, (index into row, terms, scratch): part = sum(coef * x) over the
    terms (coef a float, x an array of the block's full size B, cut to the row's C samples),
    scratch an array of x's shape; a part with no terms is zero (terms () and scratch None).
    """
    coef = [float(c) for c in motion]
    plan = []
    for index, terms in ((0, [(coef[r], mass[r - 3]) for r in range(3, 6)]),
                         (slice(1, 4), [(coef[r], first_moment[r]) for r in range(6)]),
                         (slice(4, 10), [(coef[r], inertia[r]) for r in range(3)])):
        terms = tuple((c, x) for c, x in terms if c != 0.0)
        plan.append((index, terms, work.empty("row", terms[0][1].shape) if terms else None))
    return tuple(plan)


def _project_constant(row: np.ndarray, plan: tuple) -> None:
    """row (10, C) = a constant motion against A, by its _constant_plan."""
    count = row.shape[-1]
    for index, terms, scratch in plan:
        if not terms:
            row[index] = 0.0
            continue
        part, scratch = row[index], scratch[..., :count]
        (c, x), rest = terms[0], terms[1:]
        if c == 1.0:  # a copy, not np.positive: that is half as fast
            np.copyto(part, x[..., :count])
        elif c == -1.0:
            np.negative(x[..., :count], out=part)
        else:
            np.multiply(x[..., :count], c, out=part)
        for c, x in rest:
            if abs(c) == 1.0:
                (np.add if c > 0 else np.subtract)(part, x[..., :count], out=part)
            else:
                np.multiply(x[..., :count], c, out=scratch)
                np.add(part, scratch, out=part)


def _regressor_plan(tree: KinematicTree, size: int, work: Workspace) -> tuple:
    """The forward plan for blocks of ``size`` samples and, per body, (ops, projection,
    constant plan, last joint, joints above, rows): running ops (the body's share of the
    forward pass, then the rows of its A that are read) leaves what the projections of the
    joints above the last one (_projection) and of the last one (_constant_plan) read;
    ``above`` indexes the output's rows, and ``rows`` (k - 1, 10, size) stages them when they
    are not a slice (trees)."""
    steps = joint_steps(tree)
    forward = forward_plan(tree, steps, size, work)
    bodies = []
    for body, chain in zip(forward.bodies, joint_chains(tree)):
        ops, motion = list(body.ops), steps[chain[-1]].motion
        # A's rows that the projections read: those the subspaces reach, the last joint's non-zeros
        read = set(range(body.reach.start, body.reach.stop)) | {r for r in range(6) if motion[r] != 0.0}
        blocks = body_regressor_blocks(body.velocity, body.acceleration, work, ops, rows=read)
        constant = _constant_plan(motion, *blocks, work)
        projection = _projection(body.subspaces, body.reach, *blocks)
        above = _as_index(chain[:-1])
        rows = None if isinstance(above, slice) or not above.size else work.empty(
            "rows", (above.size, 10, size), tree.n_joints)
        bodies.append((tuple(ops), projection, constant, chain[-1], above, rows))
    return forward, tuple(bodies)


def _planned(tree: KinematicTree, size: int) -> tuple:
    """This thread's plan for ``tree`` and blocks of ``size``; a new tree gets fresh arrays."""
    if not hasattr(_WORKSPACES, "by_size"):
        _WORKSPACES.by_size = {}
    kept = _WORKSPACES.by_size
    work = kept.pop(size, None)  # re-inserted last: the dict's order is the order of use
    if work is None or work.plan[0].tree is not tree:
        work = Workspace()
        work.plan = _regressor_plan(tree, size, work)
    kept[size] = work
    while len(kept) > KEPT:
        del kept[next(iter(kept))]
    return work.plan


def ladder_size(rest: int) -> int:
    """The smallest block size of the ladder (see BLOCK) holding ``rest`` <= BLOCK samples."""
    step = BLOCK // 8
    if rest > step:
        return -(-rest // step) * step
    size = step
    while size // 2 >= max(rest, SMALLEST):
        size //= 2
    return size


def block_schedule(num: int) -> list:
    """The blocks (start, size) that cover num samples: full BLOCKs, then the rest in one
    block of ``ladder_size(rest)``; that one ends at num (overlapping its predecessor) when
    num >= BLOCK, else it is padded past num."""
    full, rest = divmod(num, BLOCK)
    starts = [(k * BLOCK, BLOCK) for k in range(full)]
    if rest:
        size = ladder_size(rest)
        starts.append((max(num - size, 0), size))
    return starts


def joint_torque_regressor(tree: KinematicTree, gravity, q, dq, ddq, out=None) -> np.ndarray:
    """Y of shape (N, n, 10 nb): one 10-column block per moving body, in model order.

    Columns of block b are [m, hx, hy, hz, Ixx, Ixy, Ixz, Iyy, Iyz, Izz] of body b about
    its origin in its frame; rows are joints in dof order; SI units, gravity (3,) in m/s^2.
    The result is a view of a joint-major buffer (samples last, where the work is
    contiguous); use np.ascontiguousarray(Y) where C order matters. Samples go in blocks
    (see ``block_schedule``); each calling thread keeps its temporaries (tens of MB) and plans for
    the next call. ``out``: an earlier result for as many samples to overwrite and return, for
    callers that evaluate block after block: a fresh result's memory is paged in while it is
    written, about a quarter of a call (7 joints, 15 000 samples). ValueError if it is not one.
    """
    n = tree.n_joints
    q, dq, ddq = (as_samples(k, v, n) for k, v in (("q", q), ("dq", dq), ("ddq", ddq)))
    if not (q.shape == dq.shape == ddq.shape):
        raise ValueError(f"q, dq, ddq must have equal shapes, got {q.shape}, {dq.shape}, {ddq.shape}")
    num = q.shape[0]
    # the blocks of joints that do not move a body are never written (nor paged in when fresh)
    out = _result(tree, (n, 10 * tree.n_bodies, num), out)
    for start, size in block_schedule(num):
        forward, bodies = _planned(tree, size)
        block = slice(start, min(start + size, num))
        forward.load(gravity, q[block], dq[block], ddq[block])
        count = block.stop - start
        for b, (ops, projection, constant, last, above, rows) in enumerate(bodies):
            # torque on joint k from body b: k's motion subspace in b's frame against b's wrench
            run(ops)
            columns = slice(10 * b, 10 * b + 10)
            # the last joint's subspace is constant: only its non-zeros are worth a product
            _project_constant(out[last, columns, block], constant)
            if isinstance(above, slice):
                _project(out[above, columns, block], projection)
            elif above.size:
                _project(rows[..., :count], projection)
                out[above, columns, block] = rows[..., :count]
    return np.moveaxis(out, -1, 0)
