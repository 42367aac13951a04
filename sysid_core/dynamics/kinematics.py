"""Vectorised forward pass of recursive Newton-Euler, in body frames.

Arrays are component-major with samples last, (..., B), so every operation
works on contiguous sample vectors and the loops run over bodies and joints
only; callers pass blocks of a few thousand samples, which bounds the
temporaries and lets a Workspace reuse them. Each joint is one *step* from the
frame before it to the frame after it; for a hinge the step's rotation and translation are constant matrices
times the basis [1, sin(q - ref), cos(q - ref)], for a slide times
[1, q - ref, 0]. The geometry matches MuJoCo's ``mj_kinematics``: a body's
joints act in order, each about an axis and anchor fixed in the frame left by
the previous one, and a joint at its ``ref`` (qpos0) leaves the body at its
modelled pose.

Arm models are full of exact zeros (axis-aligned joints, right-angle fixed
rotations, anchors at the origin), so each entry of a step is evaluated as an
exact zero (skipped), a constant or a per-sample row, and a frame change costs
a few products instead of a dense 6x6 transform per sample. A joint's own
motion subspace is constant in its frame, so it is never stored: the next step
evaluates it directly from that step's few non-zero coefficients.

Spatial vectors are (angular; linear), Featherstone's convention, expressed in
the current body frame at its origin. The base accelerates by -gravity, so
accelerations carry gravity.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache, partial

import numpy as np

from .tree import HINGE, KinematicTree


def skew(x: np.ndarray) -> np.ndarray:
    """[x]_x (3, 3) of x (3,): [x]_x y = x cross y."""
    return np.array([[0.0, -x[2], x[1]], [x[2], 0.0, -x[0]], [-x[1], x[0], 0.0]])


class Workspace:
    """Temporaries reused from one block of samples to the next.

    ``empty(name, shape)`` returns the same uninitialised array whenever it is asked for the
    same name and shape. Large temporaries freed and allocated again for every block come
    back from the C allocator as fresh pages whose faults cost as much as the arithmetic;
    blocks of one size reuse the arrays, so each is paged in once per Workspace instead.
    Names only need to differ between arrays of one shape that are alive together.
    """

    def __init__(self):
        self._arrays = {}
        self.plan = None  # the caller's plan for these arrays (joint_torque_regressor's)

    def empty(self, name: str, shape: tuple, most: int | None = None) -> np.ndarray:
        """The array ``name`` of ``shape``; with ``most``, the first shape[0] of one of leading
        length ``most``, so that arrays of a name differing only in that length share memory."""
        full = tuple(shape) if most is None else (most, *shape[1:])
        key = (name, full)
        if key not in self._arrays:
            self._arrays[key] = _aligned_empty(full)
        return self._arrays[key] if most is None else self._arrays[key][:shape[0]]


def _aligned_empty(shape: tuple) -> np.ndarray:
    """np.empty(shape) (float64) starting on a 64-byte cache line.

    Why: memcpy (np.copyto between arrays) is an order of magnitude slower on some x86 CPUs
    when the destination lies 8 to 24 bytes past the source modulo 4096 (4k aliasing). Large
    arrays from the C allocator all start 16 bytes past a page boundary, and workspace rows
    are a multiple of 4096 bytes long, so copies between two arrays met that case often.
    Aligned arrays whose rows are whole cache lines keep every such distance a multiple of 64.
    """
    size = int(np.prod(shape))
    buffer = np.empty(size + 8)
    skip = (-buffer.ctypes.data % 64) // 8
    return buffer[skip:skip + size].reshape(shape)


def _sparse(coefficients: np.ndarray) -> tuple:
    """Entries (k, 3) on the basis [1, b1, b2] as None (an exact zero) or (c0, c1, c2) floats."""
    return tuple(tuple(row) if any(row) else None for row in coefficients.tolist())


# sin and cos by table and short polynomials: angle = k h + b with h = 2 pi / _TABLE_SIZE,
# |b| <= h / 2, sin = S_k cos b + C_k sin b and cos = C_k cos b - S_k sin b, with cos b and
# sin b to below 1e-17 by degree 4 and 3 polynomials (the table's 4096 entries, 64 kB, keep
# |b| small enough for a cubic). About 27 passes of simple ufuncs, a third of the time of
# np.sin + np.cos (scalar libm on most x86 builds); the error stays within an ulp or two of
# theirs. k = rint(angle / h) comes from adding _ROUND = 1.5 2^52, which rounds to an integer
# as rint does and leaves k mod 2^51 in the low bits: the table index without a conversion.
# h = _H_HIGH + _H_LOW: _H_HIGH has its low 22 bits zero, so k _H_HIGH is exact for
# |k| < 2^22; for |k| >= 2^20 (|angle| > 1600) or non-finite angles, np.sin and np.cos do the work.
_TABLE_BITS = 12
_TABLE_SIZE = 1 << _TABLE_BITS
_ROUND = 1.5 * 2.0 ** 52
_TWO_PI_LOW = 2.4492935982947064e-16  # 2 pi - float(2 pi)
_H = 2.0 * np.pi / _TABLE_SIZE  # exact: a power-of-two division
_H_HIGH = float(np.array(np.array(_H).view(np.int64) & ~np.int64((1 << 22) - 1)).view(np.float64))
_H_LOW = (_H - _H_HIGH) + _TWO_PI_LOW / _TABLE_SIZE
_TABLE_ANGLES = np.arange(_TABLE_SIZE) * _H_HIGH  # exact products
_TABLE_SIN = np.sin(_TABLE_ANGLES) + np.cos(_TABLE_ANGLES) * (np.arange(_TABLE_SIZE) * _H_LOW)
_TABLE_COS = np.cos(_TABLE_ANGLES) - np.sin(_TABLE_ANGLES) * (np.arange(_TABLE_SIZE) * _H_LOW)


def sin_cos(angle: np.ndarray, sin: np.ndarray, cos: np.ndarray, scratch: np.ndarray) -> None:
    """sin[...] = np.sin(angle), cos[...] = np.cos(angle) to an ulp or two, three times faster.

    scratch ``(5, *angle.shape)`` float64 is overwritten; sin and cos may be strided views.
    """
    k, b, tail, s_k, c_k = scratch
    np.multiply(angle, 1.0 / _H, out=k)
    np.add(k, _ROUND, out=k)  # _ROUND + rint(angle / h)
    index = tail.view(np.int64)
    np.bitwise_and(k.view(np.int64), _TABLE_SIZE - 1, out=index)  # k mod table size, also for k < 0
    np.subtract(k, _ROUND, out=k)
    if not (k.size and -2.0 ** 20 < k.min() and k.max() < 2.0 ** 20):  # huge, nan or inf
        np.sin(angle, out=sin)
        np.cos(angle, out=cos)
        return
    np.take(_TABLE_SIN, index, out=s_k)
    np.take(_TABLE_COS, index, out=c_k)
    np.multiply(k, _H_HIGH, out=b)
    np.subtract(angle, b, out=b)
    np.multiply(k, _H_LOW, out=tail)
    np.subtract(b, tail, out=b)  # |b| <= h / 2 + tiny
    square = np.multiply(b, b, out=k)
    # cos b - 1 = b^2 (-1/2 + b^2 / 24) into tail; sin b = b - b^3 / 6 into b
    np.multiply(square, 1.0 / 24.0, out=tail)
    tail -= 0.5
    tail *= square
    square *= -1.0 / 6.0
    square *= b
    b += square
    np.multiply(c_k, b, out=sin)
    np.multiply(s_k, tail, out=square)
    sin += square
    sin += s_k
    np.multiply(c_k, tail, out=cos)
    np.multiply(s_k, b, out=square)
    cos -= square
    cos += c_k


@dataclass(frozen=True, eq=False)
class JointStep:
    """Constants of one joint's step (frame before -> frame after), sparse.

    ``rotation`` (9 entries, row-major) and ``origin`` (3) are the step's rotation matrix and
    the new origin in the previous frame, each entry None (an exact zero) or its coefficients
    (c0, c1, c2) on the basis [1, sin(q - ref), cos(q - ref)] (hinge) or [1, q - ref, 0]
    (slide); the first joint of a body includes the body's fixed placement in its parent.
    ``motion`` (6,) is the joint's motion subspace in its own (after-step) frame;
    ``motion_terms`` its non-zeros (row, value) and ``cross_terms`` the non-zeros of
    V -> V x motion (spatial motion cross product) as (row, ((column, value), ...)).
    ``carried`` is None for a joint first in its chain, else the previous joint's (constant)
    motion subspace after this step: per component (6), its non-zeros (monomial, value) on
    the monomials [1, b1, b2, b1 b1, b1 b2, b2 b2] of this joint's basis.
    """

    rotation: tuple
    origin: tuple
    motion: np.ndarray
    motion_terms: tuple
    cross_terms: tuple
    carried: tuple | None


# monomial index of the product basis[a] * basis[b], basis = [1, b1, b2]
_PRODUCT = ((0, 1, 2), (1, 3, 4), (2, 4, 5))


def _carried(rotation: np.ndarray, origin: np.ndarray, motion: np.ndarray) -> tuple:
    """A constant motion vector (6,) after a step, on the monomials of JointStep.carried.

    rotation (3, 3, 3) and origin (3, 3) are the step's coefficients on [1, b1, b2]; as in
    _change_frame, w' = R^T w and v' = R^T (v + w x t), products of two basis rows at most.
    """
    coef = np.zeros((6, 6))
    w = motion[:3]
    # column b: w x origin[:, b], by np.cross's own formula (one call for the three)
    moment = np.array([w[1] * origin[2] - w[2] * origin[1], w[2] * origin[0] - w[0] * origin[2],
                       w[0] * origin[1] - w[1] * origin[0]])
    for a in range(3):
        coef[:3, _PRODUCT[0][a]] += rotation[:, :, a].T @ w
        coef[3:, _PRODUCT[0][a]] += rotation[:, :, a].T @ motion[3:]
        for b in range(3):
            coef[3:, _PRODUCT[a][b]] += rotation[:, :, a].T @ moment[:, b]
    return tuple(tuple((k, float(c)) for k, c in enumerate(row) if c != 0.0) for row in coef)


@lru_cache(maxsize=32)
def joint_steps(tree: KinematicTree) -> tuple:
    """The JointStep of every joint of ``tree``, in dof order (per tree, once)."""
    steps = [None] * tree.n_joints
    last_joint = {}  # body -> its last joint, the one before its children's first
    for b in range(tree.n_bodies):
        previous = last_joint.get(int(tree.parent[b]))
        for order, j in enumerate(tree.body_joints[b]):
            r_fix = tree.fixed_rotation[b] if order == 0 else np.eye(3)
            t_fix = tree.fixed_translation[b] if order == 0 else np.zeros(3)
            axis, anchor = tree.joint_axis[j], tree.joint_pos[j]
            rotation, origin, motion = np.zeros((3, 3, 3)), np.zeros((3, 3)), np.zeros(6)
            if tree.joint_type[j] == HINGE:
                k = skew(axis)
                # R = R_fix (E + sin K + (1 - cos) K^2); origin t = t_fix + R_fix d - R d.
                # E + K^2 = a a^T: an axis-aligned joint keeps its exact zeros.
                rotation = np.stack([r_fix @ (np.eye(3) + k @ k), r_fix @ k, -r_fix @ k @ k], axis=-1)
                origin = np.stack([t_fix - r_fix @ k @ k @ anchor, -r_fix @ k @ anchor,
                                   r_fix @ k @ k @ anchor], axis=-1)
                motion = np.concatenate([axis, np.cross(anchor, axis)])
            else:
                rotation[:, :, 0] = r_fix
                origin[:, 0] = t_fix
                origin[:, 1] = r_fix @ axis
                motion[3:] = axis
            s_w, s_v = skew(motion[:3]), skew(motion[3:])
            # (w, v) x (s_w, s_v) = (w x s_w, w x s_v + v x s_w) = -[[s_w]x, 0], [[s_v]x, [s_w]x]] (w, v)
            cross = -np.block([[s_w, np.zeros((3, 3))], [s_v, s_w]])
            steps[j] = JointStep(
                rotation=_sparse(rotation.reshape(9, 3)), origin=_sparse(origin), motion=motion,
                motion_terms=tuple((r, value) for r, value in enumerate(motion.tolist()) if value),
                cross_terms=tuple((r, tuple((c, value) for c, value in enumerate(row) if value))
                                  for r, row in enumerate(cross.tolist()) if any(row)),
                carried=None if previous is None else _carried(rotation, origin, steps[previous].motion))
            previous = int(j)
        last_joint[b] = previous
    return tuple(steps)


@lru_cache(maxsize=32)
def joint_chains(tree: KinematicTree) -> tuple:
    """Per moving body, the tuple of joints that move it, from the base down (dof indices)."""
    chains = []
    for b in range(tree.n_bodies):
        p = tree.parent[b]
        chains.append((() if p < 0 else chains[p]) + tuple(int(j) for j in tree.body_joints[b]))
    return tuple(chains)


@dataclass(frozen=True, eq=False)
class BodyPass:
    """One moving body's share of the forward pass over a block of B samples.

    Running ``ops`` (those of the bodies before it first) leaves in ``velocity`` (6, B) and
    ``acceleration`` (6, B) the body's spatial velocity (w; v) in rad/s and m/s and spatial
    acceleration with -gravity included, in its own frame at its origin, and in ``subspaces``
    (k - 1, 6, B) the motion subspaces of the first k - 1 of the k joints that move it, in the
    order of ``joint_chains(tree)``; the last one's is the constant ``JointStep.motion`` of
    that joint. The arrays belong to a slot of the Workspace that a later body takes over once
    no child of this one needs them: read them before the next body's ops run. ``reach``, a
    slice of the 6 components, covers every component of the subspaces that is not an exact
    zero: a joint's subspace one step down the chain is often zero in several (a hinge's
    carried into the next body's frame has no part along that body's joint axis).
    """

    ops: tuple
    velocity: np.ndarray
    acceleration: np.ndarray
    subspaces: np.ndarray
    reach: slice


@dataclass(frozen=True, eq=False)
class ForwardPlan:
    """The forward pass of recursive Newton-Euler over blocks of ``size`` samples, as operations.

    ``load`` puts a block's samples in place; then running each of ``bodies`` in order
    (BodyPass) gives the motion of that body. ``angle``, ``dq``, ``ddq`` (n, size), ``basis``
    (n, 2, size), ``trig`` (5, n, size) and ``root`` (2, 6, size) are the arrays ``load`` fills;
    ``root`` (the base at rest, accelerating by -gravity) only when ``gravity`` (3,), the
    gravity it holds (NaN before the first block), changes.
    """

    tree: KinematicTree
    size: int
    angle: np.ndarray
    dq: np.ndarray
    ddq: np.ndarray
    basis: np.ndarray
    trig: np.ndarray
    root: np.ndarray
    gravity: np.ndarray
    bodies: tuple

    def load(self, gravity, q: np.ndarray, dq: np.ndarray, ddq: np.ndarray) -> None:
        """Stage q, dq, ddq (count, n), count <= size, for the bodies' ops; gravity (3,) m/s^2.

        A block shorter than ``size`` is padded with q = ref, dq = ddq = 0: the padding
        samples are computed too, and ignored.
        """
        count, tree = q.shape[0], self.tree
        np.subtract(q.T, tree.joint_ref[:, None], out=self.angle[:, :count])
        np.copyto(self.dq[:, :count], dq.T)
        np.copyto(self.ddq[:, :count], ddq.T)
        if count < self.size:
            for array in (self.angle, self.dq, self.ddq):
                array[:, count:] = 0.0
        sin_cos(self.angle, self.basis[:, 0], self.basis[:, 1], self.trig)
        slide = tree.joint_type != HINGE
        if slide.any():
            self.basis[slide, 0] = self.angle[slide]
            self.basis[slide, 1] = 0.0
        gravity = np.asarray(gravity, dtype=float)
        if not np.array_equal(gravity, self.gravity):
            self.root[...] = 0.0
            self.root[1, 3:] = -gravity[:, None]
            self.gravity[...] = gravity


def as_samples(name: str, value, n: int) -> np.ndarray:
    """Validate ``value`` as (N, n) (or (n,), read as N = 1) and return it as float (N, n)."""
    arr = np.asarray(value, dtype=float)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[1] != n:
        raise ValueError(f"{name} must have shape (N, {n}) or ({n},), got {np.shape(value)}")
    return arr


def _entries(entries: tuple, rows: np.ndarray, ops: list, pool) -> list:
    """Values of sparse entries (see JointStep) on the basis [1, rows[0], rows[1]] (rows (2, B)).

    Each value is None (an exact zero), a float (a constant) or a (B,) row; a row that is not
    a basis row is a ``pool()`` row, written by operations appended to ``ops``.
    """
    values = []
    for entry in entries:
        if entry is None or entry[1] == entry[2] == 0.0:
            values.append(entry if entry is None else entry[0])
            continue
        c0, c1, c2 = entry
        if c2 == 0.0 or c1 == 0.0:
            c, row = (c1, rows[0]) if c2 == 0.0 else (c2, rows[1])
            if c == 1.0 and c0 == 0.0:
                value = row
            else:
                value = pool()
                ops.append(call(np.multiply, row, c, value))
        else:
            value, other = pool(), pool()
            ops.append(call(np.multiply, rows[0], c1, value))
            ops.append(call(np.multiply, rows[1], c2, other))
            ops.append(call(np.add, value, other, value))
        if c0 != 0.0:
            ops.append(call(np.add, value, c0, value))  # value is a new row here
        values.append(value)
    return values


def _negated(entry, ops: list, pool):
    """-entry (see _entries); a row's negation goes to a ``pool()`` row by an operation in ``ops``."""
    if entry is None or isinstance(entry, float):
        return None if entry is None else -entry
    row = pool()
    ops.append(call(np.negative, entry, row))
    return row


def call(f, *args):
    """``f(*args)`` as an argument-less callable, what a plan records and ``run`` performs.

    Ufuncs are given their output as the last positional argument: out= costs a third more
    to dispatch, on calls whose work is a few microseconds. Float operands are stored as 0-d
    arrays, which NumPy does not have to convert again on every call.
    """
    return partial(f, *(np.array(a) if isinstance(a, float) else a for a in args))


def run(ops) -> None:
    """Perform recorded operations (argument-less callables) in order."""
    for op in ops:
        op()


def accumulate(out: np.ndarray, terms, scratch: np.ndarray, ops: list | None = None) -> None:
    """out += sum(coef * x for coef, x in terms), in place, using scratch (out's shape).

    A coef is None (an exact zero: the term is skipped), a float, or a (B,) row broadcast
    over x. A term costs one ufunc call when coef is +-1, two otherwise. With ``ops`` the
    calls are appended to it (bound to these very arrays) instead of performed.
    """
    todo = [] if ops is None else ops
    for coef, x in terms:
        if coef is None:
            continue
        if _unit(coef):
            todo.append(call(np.add if coef > 0 else np.subtract, out, x, out))
        else:
            todo.append(call(np.multiply, x, coef, scratch))
            todo.append(call(np.add, out, scratch, out))
    if ops is None:
        run(todo)


def combine(out: np.ndarray, terms, scratch: np.ndarray, ops: list | None = None) -> None:
    """out = sum(coef * x for coef, x in terms), coefs and ``ops`` as in ``accumulate``; no terms: zeros."""
    todo = [] if ops is None else ops
    # a term with coefficient +-1 needs no product: put one first, and the first two terms go
    # into out in one binary call (x + y, x - y, y - x; c x + y in two), not a copy then an add:
    # every pass over out costs about as much as the arithmetic
    terms = sorted(((coef, x) for coef, x in terms if coef is not None), key=lambda term: not _unit(term[0]))
    if not terms:
        todo.append(call(np.copyto, out, 0.0))
    elif len(terms) == 1:
        coef, x = terms[0]
        if _unit(coef):
            todo.append(call(np.copyto, out, x) if coef > 0 else call(np.negative, x, out))
        else:
            todo.append(call(np.multiply, x, coef, out))
    else:
        (c1, x1), (c2, x2) = terms[:2]
        if not _unit(c1):  # no unit coefficient at all
            todo.append(call(np.multiply, x1, c1, out))
            accumulate(out, terms[1:], scratch, todo)
        else:
            if not _unit(c2):
                todo.append(call(np.multiply, x2, c2, scratch))
                c2, x2 = 1.0, scratch
            if c1 > 0:
                todo.append(call(np.add if c2 > 0 else np.subtract, x1, x2, out))
            elif c2 > 0:
                todo.append(call(np.subtract, x2, x1, out))
            else:  # -x - y
                todo.append(call(np.negative, x1, out))
                todo.append(call(np.subtract, out, x2, out))
            accumulate(out, terms[2:], scratch, todo)
    if ops is None:
        run(todo)


def _unit(coef) -> bool:
    """Whether a coefficient (see ``accumulate``) is the float +1 or -1."""
    return isinstance(coef, float) and abs(coef) == 1.0


def _change_frame(state: np.ndarray, rot: list, origin: list, out: np.ndarray, work: Workspace, ops: list,
                  pool, most: int, at_rest: bool = False) -> None:
    """Motion vectors state (m, 6, B) into a frame with orientation rot, origin ``origin``.

    ``rot`` is the 3x3 nested list and ``origin`` the 3 entries of the step (see _entries).
    Writes the first m rows of ``out``: v' = R^T (v + w x t), w' = R^T w, the velocity of
    the point at the new origin. Temporaries are the first m of ``most`` rows (m <= most),
    shared by every state height. ``at_rest``: the state is the base's (ForwardPlan.root),
    whose only non-zero is the linear acceleration: the rest is written as zeros, not turned.
    """
    m, num = state.shape[0], state.shape[-1]
    target = out[:m].reshape(m, 2, 3, num)
    w, v = state[:, :3], state[:, 3:]
    if at_rest:
        ops.append(call(np.copyto, out[0], 0.0))
        ops.append(call(np.copyto, out[1, :3], 0.0))
        scratch = pool()
        for r in range(3):
            combine(out[1, 3 + r], [(rot[c][r], v[1, c]) for c in range(3)], scratch, ops)
        return
    t = origin
    # w x t = M w with M = -[t]x; components of v + M w that M leaves alone are read in place
    negated = [_negated(entry, ops, pool) for entry in t]
    cross = ((None, t[2], negated[1]), (negated[2], None, t[0]), (t[1], negated[0], None))
    linear, moved = [v[:, c] for c in range(3)], False
    for c in range(3):
        terms = [(coef, w[:, d]) for d, coef in enumerate(cross[c]) if coef is not None]
        if terms:
            linear[c], moved = work.empty(f"moved {c}", (m, num), most), True
            combine(linear[c], terms, work.empty("scratch", (m, num), most), ops)
            ops.append(call(np.add, linear[c], v[:, c], linear[c]))
    if not moved:
        # no translation: both halves of each pair in one call per term
        pairs = state.reshape(m, 2, 3, num)
        halves = [(target, [pairs[:, :, c] for c in range(3)])]
    else:
        halves = [(target[:, 0], [w[:, c] for c in range(3)]), (target[:, 1], linear)]
    for dest, sources in halves:
        scratch = work.empty("scratch", dest[..., 0, :].shape, most)
        for r in range(3):
            combine(dest[..., r, :], [(rot[c][r], sources[c]) for c in range(3)], scratch, ops)


def _add_joint_motion(state: np.ndarray, step: JointStep, dq: np.ndarray, ddq: np.ndarray, ops: list, pool,
                      at_rest: bool = False) -> None:
    """The joint's own motion: V += s dq, dV += s ddq + (V x s) dq with the new V.

    state (m, 6, B) with velocity and acceleration in rows 0 and 1, dq and ddq (B,); only
    the non-zeros of the joint's constants cost anything. ``at_rest``: V was zero, so the
    new V is s dq and V x s vanishes.
    """
    velocity, acceleration = state[0], state[1]
    scratch = pool()
    for r, value in step.motion_terms:
        accumulate(velocity[r], [(value, dq)], scratch, ops)
        accumulate(acceleration[r], [(value, ddq)], scratch, ops)
    scaled = {1.0: dq}  # |value| * dq per distinct |value| of the cross product; signs by subtracting
    for r, terms in () if at_rest else step.cross_terms:
        for c, value in terms:
            if abs(value) not in scaled:
                scaled[abs(value)] = pool()
                ops.append(call(np.multiply, dq, abs(value), scaled[abs(value)]))
            ops.append(call(np.multiply, velocity[c], scaled[abs(value)], scratch))
            ops.append(call(np.add if value > 0 else np.subtract, acceleration[r], scratch, acceleration[r]))


def _carry(step: JointStep, basis: np.ndarray, out: np.ndarray, work: Workspace, ops: list) -> None:
    """out (6, B) = the previous joint's motion subspace after this step (JointStep.carried).

    basis (2, B) are this joint's basis rows b1, b2. A constant vector needs only its few
    non-zeros on the step's monomials, not a frame change of a full row of the state.
    """
    monomials = [None, basis[0], basis[1], None, None, None]
    scratch = work.empty("carry", basis[0].shape)
    for r, terms in enumerate(step.carried):
        for k, _ in terms:
            if monomials[k] is None and k > 0:  # a product, formed once when first needed
                a, b = ((1, 1), (1, 2), (2, 2))[k - 3]
                product = work.empty(f"monomial {k}", scratch.shape)
                ops.append(call(np.multiply, monomials[a], monomials[b], product))
                monomials[k] = product
        varying = [(c, monomials[k]) for k, c in terms if k > 0]
        constant = sum(c for k, c in terms if k == 0)
        if varying or not constant:
            combine(out[r], varying, scratch, ops)
            if constant:
                ops.append(call(np.add, out[r], constant, out[r]))
        else:  # a constant component: one fill
            ops.append(call(np.copyto, out[r], constant))


def _slots(tree: KinematicTree) -> tuple:
    """Per moving body, the slot (an index) holding its state, as few slots as the tree allows.

    A body's state is needed until its last child has taken its own from it; then its slot
    is free for the next body. A serial chain needs two.
    """
    last_use = list(range(tree.n_bodies))
    for b in range(tree.n_bodies):
        if tree.parent[b] >= 0:
            last_use[tree.parent[b]] = max(last_use[tree.parent[b]], b)
    slots, holder = [], []  # holder[s]: the body whose state slot s holds
    for b in range(tree.n_bodies):
        free = [s for s, owner in enumerate(holder) if last_use[owner] < b]
        slot = free[0] if free else len(holder)
        holder[slot:slot + 1] = [b]
        slots.append(slot)
    return tuple(slots)


def forward_plan(tree: KinematicTree, steps: tuple, size: int, work: Workspace) -> ForwardPlan:
    """The forward pass for blocks of ``size`` samples, its joint loop recorded as operations.

    Everything that does not depend on the samples is done here once: the loop over bodies
    and joints appends its ufunc calls, bound to arrays of ``work``, to per-body lists that
    the caller then only has to run (see ForwardPlan). ``steps`` are joint_steps(tree).
    Bodies' states share a few slots (as many as bodies alive together, two on a serial
    chain), so the memory per sample does not grow with the number of bodies.
    """
    n, num = tree.n_joints, size
    angle, dq_t, ddq_t = (work.empty(name, (n, num)) for name in ("angle", "dq", "ddq"))
    basis = work.empty("basis", (n, 2, num))  # the basis rows after the constant 1, per joint
    chains = joint_chains(tree)
    # state rows: velocity, acceleration, then the motion subspaces of the joints above the
    # current one (whose own subspace is constant and never stored)
    most = 1 + max(map(len, chains))
    slots = _slots(tree)
    slot = work.empty("body states", (1 + max(slots), most, 6, num))
    root = work.empty("root", (2, 6, num))
    bodies, final, nonzero = [], {}, {-1: ()}  # nonzero: per body, per subspace, its non-zero components
    for b in range(tree.n_bodies):
        p, ops = tree.parent[b], []
        state, components = root if p < 0 else final[p], nonzero[int(p)]
        for order, j in enumerate(tree.body_joints[b]):
            taken = iter(range(1 << 30))

            def pool():
                return work.empty(f"pool {next(taken)}", (num,))

            step, rows = steps[j], state.shape[0]
            rows_after = rows if step.carried is None else rows + 1
            last = order == len(tree.body_joints[b]) - 1
            # a body's joints before its last alternate between two buffers of their own
            new = slot[slots[b], :rows_after] if last else work.empty(f"joint state {order % 2}", (rows_after, 6, num),
                                                                      most)
            rot = _entries(step.rotation, basis[j], ops, pool)
            origin = _entries(step.origin, basis[j], ops, pool)
            at_rest = p < 0 and order == 0  # moving off the base
            _change_frame(state, [rot[0:3], rot[3:6], rot[6:9]], origin, new, work, ops, pool, most, at_rest)
            components = (range(6),) * len(components)  # a frame change mixes them
            if step.carried is not None:
                _carry(step, basis[j], new[rows], work, ops)
                components += (tuple(r for r, terms in enumerate(step.carried) if terms),)
            _add_joint_motion(new, step, dq_t[j], ddq_t[j], ops, pool, at_rest)
            state = new
        final[b], nonzero[b] = state, components
        reached = sorted(set().union(*components))
        reach = slice(reached[0], reached[-1] + 1) if reached else slice(0, 0)
        bodies.append(BodyPass(tuple(ops), state[0], state[1], state[2:], reach))
    # sin_cos's scratch, needed before any body's ops run: the slots' memory when large enough
    trig = (slot.reshape(-1)[:5 * n * num].reshape(5, n, num) if slot.size >= 5 * n * num
            else work.empty("sin cos", (5, n, num)))
    return ForwardPlan(tree, size, angle, dq_t, ddq_t, basis, trig, root, np.full(3, np.nan), tuple(bodies))
