"""Whole-arm joint-torque regressor: tau (N, n) = Y (N, n, 10 nb) @ theta (10 nb,)."""
from __future__ import annotations

import threading
from functools import lru_cache, partial

import numpy as np

from .kinematics import Workspace, as_samples, forward_pass, joint_chains, joint_steps, run
from .rigid_body import body_regressor_blocks
from .tree import KinematicTree

# Samples per block: bounds the temporaries (about 6 kB per sample on a 7-DOF arm) while
# the Python overhead per block (a few hundred ufunc calls) stays small.
BLOCK = 8192
# Per thread, the Workspace of the last block size, kept between calls: paging in fresh
# temporaries on every call would cost a sixth of the whole computation.
_WORKSPACES = threading.local()
# A's stored entries per body and sample (mass 3, first moment 18, inertia 18), and the
# size up to which joint_torque_regressor evaluates A for all bodies at once
A_ENTRIES = 39
A_TOGETHER_BYTES = 4 << 20


def _workspace(size: int) -> Workspace:
    if getattr(_WORKSPACES, "size", None) != size:
        _WORKSPACES.size, _WORKSPACES.work = size, Workspace()
    return _WORKSPACES.work


@lru_cache(maxsize=32)
def _cached_steps(tree: KinematicTree):
    return joint_steps(tree)


def _as_index(joints: tuple):
    """A contiguous run of joints (always so on serial chains) as a slice: slabs copy faster."""
    if joints and joints == tuple(range(joints[0], joints[-1] + 1)):
        return slice(joints[0], joints[-1] + 1)
    return np.array(joints, dtype=int)


def _project(rows: np.ndarray, subspaces: np.ndarray, mass, first_moment, inertia) -> None:
    """rows (k, 10, B) = subspaces (k, 6, B) against a body's regressor A (6, 10, B) given by its blocks.

    A's structure: mass acts on the force rows 3-5, inertia on the moment rows 0-2; einsum
    contracts each block in one C loop straight into ``rows``, with no temporaries.
    """
    np.einsum("krn,rn->kn", subspaces[:, 3:], mass, out=rows[:, 0])
    np.einsum("krn,rcn->kcn", subspaces, first_moment, out=rows[:, 1:4])
    np.einsum("krn,rcn->kcn", subspaces[:, :3], inertia, out=rows[:, 4:])


def _constant_plan(motion: np.ndarray, mass, first_moment, inertia, work: Workspace) -> tuple:
    """How to write row (10, B) = constant motion (6,) against A: a sum over motion's non-zeros only.

    Per part of the row with terms, (index into row, ops); an op (kind, f, args) stands for
    f(*args, out=part) (kind 0), f(part, *args, out=part) (kind 1) or f() (kind 2). ``row``
    starts as zeros (a fresh np.zeros buffer): a part with no terms is left alone.
    """
    coef = [float(c) if c != 0.0 else None for c in motion]
    plan = []
    for index, part, terms in ((0, mass[0], [(coef[r], mass[r - 3]) for r in range(3, 6)]),
                               (slice(1, 4), first_moment[0], [(coef[r], first_moment[r]) for r in range(6)]),
                               (slice(4, 10), inertia[0], [(coef[r], inertia[r]) for r in range(3)])):
        terms = [(c, x) for c, x in terms if c is not None]
        if not terms:
            continue
        scratch = work.empty("row", part.shape)
        (c, x), ops = terms[0], []
        ops.append((0, np.positive, (x,)) if c == 1.0 else (0, np.negative, (x,)) if c == -1.0
                   else (0, np.multiply, (x, c)))
        for c, x in terms[1:]:
            if abs(c) == 1.0:
                ops.append((1, np.add if c > 0 else np.subtract, (x,)))
            else:
                ops.append((2, partial(np.multiply, x, c, out=scratch), ()))
                ops.append((1, np.add, (scratch,)))
        plan.append((index, tuple(ops)))
    return tuple(plan)


def _project_constant(row: np.ndarray, plan: tuple) -> None:
    """row (10, B) = a constant motion against A, by its _constant_plan."""
    for index, ops in plan:
        part = row[index]
        for kind, f, args in ops:
            if kind == 0:
                f(*args, out=part)
            elif kind == 1:
                f(part, *args, out=part)
            else:
                f()


def _regressor_plan(tree: KinematicTree, steps: tuple, motion, together: bool, work: Workspace) -> tuple:
    """Per body: (ops evaluating its A blocks, the blocks, its _constant_plan); A's ops once for all if together."""
    bodies, shared = [], []
    if together:
        every = body_regressor_blocks(motion.velocity, motion.acceleration, work, shared)
    for b, chain in enumerate(joint_chains(tree)):
        ops = []
        if together:
            blocks = every[0][:, b], every[1][:, :, b], every[2][:, :, b]
        else:
            blocks = body_regressor_blocks(motion.velocity[:, b], motion.acceleration[:, b], work, ops)
        bodies.append((tuple(ops), blocks, _constant_plan(steps[chain[-1]].motion, *blocks, work)))
    return tuple(shared), tuple(bodies)


def joint_torque_regressor(tree: KinematicTree, gravity, q, dq, ddq) -> np.ndarray:
    """Y of shape (N, n, 10 nb): one 10-column block per moving body, in model order.

    Columns of block b are [m, hx, hy, hz, Ixx, Ixy, Ixz, Iyy, Iyz, Izz] of body b about
    its origin in its frame; rows are joints in dof order; SI units, gravity (3,) in m/s^2.
    The result is a view of a joint-major buffer (samples last, where the work is
    contiguous); use np.ascontiguousarray(Y) where C order matters. Samples go in blocks of
    at most BLOCK; each calling thread keeps its temporaries (tens of MB) for the next call.
    """
    n = tree.n_joints
    q, dq, ddq = (as_samples(k, v, n) for k, v in (("q", q), ("dq", dq), ("ddq", ddq)))
    if not (q.shape == dq.shape == ddq.shape):
        raise ValueError(f"q, dq, ddq must have equal shapes, got {q.shape}, {dq.shape}, {ddq.shape}")
    steps = _cached_steps(tree)
    num = q.shape[0]
    # zeros: the blocks of joints that do not move a body are never written (nor paged in)
    out = np.zeros((n, 10 * tree.n_bodies, num))
    # blocks of one size (the last one overlaps its predecessor by < count samples), so
    # that every block reuses the temporaries in ``work``
    count = -(-num // BLOCK)
    size = -(-num // max(count, 1))
    work = _workspace(size)
    # per body: its last joint, and the joints above it as an index of out
    targets = [(chain[-1], _as_index(chain[:-1])) for chain in joint_chains(tree)]
    # A of all bodies in one go shares the per-call overhead between bodies; once A would
    # outgrow the caches, A body by body is projected while still cached (and needs nb
    # times less memory)
    together = A_ENTRIES * tree.n_bodies * size * 8 <= A_TOGETHER_BYTES
    for start in range(0, num, max(size, 1)):
        block = slice(min(start, num - size), min(start, num - size) + size)
        motion = forward_pass(tree, gravity, q[block], dq[block], ddq[block], steps, work)
        plan = work.regressor_plan
        if plan is None or plan[0] is not motion or plan[1] != together:
            plan = work.regressor_plan = (motion, together) + _regressor_plan(tree, steps, motion, together, work)
        shared, bodies = plan[2:]
        run(shared)
        for b, (subspaces, (last, above), (ops, blocks, constant)) in enumerate(zip(motion.subspaces, targets, bodies)):
            # torque on joint k from body b: k's motion subspace in b's frame against b's wrench
            run(ops)
            columns = slice(10 * b, 10 * b + 10)
            # the last joint's subspace is constant: only its non-zeros are worth a product
            _project_constant(out[last, columns, block], constant)
            if isinstance(above, slice):
                _project(out[above, columns, block], subspaces, *blocks)
            elif above.size:
                rows = work.empty("rows", (above.size, 10, size))
                _project(rows, subspaces, *blocks)
                out[above, columns, block] = rows
    return np.moveaxis(out, -1, 0)
