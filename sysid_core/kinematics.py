"""Vectorised forward pass of recursive Newton-Euler, in body frames.

Arrays are component-major with samples last, (..., N), so every operation
works on contiguous sample vectors and the loops run over bodies and joints
only. Each joint is one *step* from the frame before it to the frame after
it; for a hinge the step's rotation and translation are constant matrices times
the basis [1, sin(q - ref), 1 - cos(q - ref)], for a slide times
[1, q - ref, 0], so composing a step is a single small GEMM over all samples.
The geometry matches MuJoCo's ``mj_kinematics``: a body's joints act in order,
each about an axis and anchor fixed in the frame left by the previous one, and
a joint at its ``ref`` (qpos0) leaves the body at its modelled pose.

Spatial vectors are (angular; linear), Featherstone's convention, expressed in
the current body frame at its origin. The base accelerates by -gravity, so
accelerations carry gravity.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .model import HINGE, KinematicTree


def _skew(x: np.ndarray) -> np.ndarray:
    return np.array([[0.0, -x[2], x[1]], [x[2], 0.0, -x[0]], [-x[1], x[0], 0.0]])


@dataclass(frozen=True, eq=False)
class JointSteps:
    """Per joint j, constants of its step (frame before -> frame after).

    ``rotation[j]`` (9, 3) and ``translation[j]`` (3, 3) map the basis (3, N) to the step's
    rotation (row-major 3x3 per sample) and the new origin in the previous frame; the first
    joint of a body includes the body's fixed placement in its parent. ``motion[j]`` (6,) is
    the joint's motion subspace in its own (after-step) frame, and ``cross_matrix[j]`` (6, 6)
    the constant matrix of V -> V x motion[j] (spatial motion cross product).
    """

    rotation: np.ndarray
    translation: np.ndarray
    motion: np.ndarray
    cross_matrix: np.ndarray


def joint_steps(tree: KinematicTree) -> JointSteps:
    """Precompute the constant step matrices of every joint of ``tree``."""
    n = tree.n_joints
    rotation = np.zeros((n, 9, 3))
    translation = np.zeros((n, 3, 3))
    motion = np.zeros((n, 6))
    cross_matrix = np.zeros((n, 6, 6))
    for b in range(tree.n_bodies):
        for order, j in enumerate(tree.body_joints[b]):
            r_fix = tree.fixed_rotation[b] if order == 0 else np.eye(3)
            t_fix = tree.fixed_translation[b] if order == 0 else np.zeros(3)
            axis, anchor = tree.joint_axis[j], tree.joint_pos[j]
            if tree.joint_type[j] == HINGE:
                k = _skew(axis)
                # R = R_fix (E + sin K + (1 - cos) K^2); origin t = t_fix + R_fix d - R d
                rotation[j] = np.stack([r_fix, r_fix @ k, r_fix @ k @ k], axis=-1).reshape(9, 3)
                translation[j] = np.stack([t_fix, -r_fix @ k @ anchor, -r_fix @ k @ k @ anchor], axis=-1)
                motion[j] = np.concatenate([axis, np.cross(anchor, axis)])
            else:
                rotation[j, :, 0] = r_fix.reshape(9)
                translation[j, :, 0] = t_fix
                translation[j, :, 1] = r_fix @ axis
                motion[j, 3:] = axis
            s_w, s_v = _skew(motion[j, :3]), _skew(motion[j, 3:])
            # (w, v) x (s_w, s_v) = (w x s_w, w x s_v + v x s_w) = -[[s_w]x, 0], [[s_v]x, [s_w]x]] (w, v)
            cross_matrix[j] = -np.block([[s_w, np.zeros((3, 3))], [s_v, s_w]])
    return JointSteps(rotation, translation, motion, cross_matrix)


@dataclass(frozen=True, eq=False)
class BodyMotion:
    """Motion of one moving body over N samples, in its own frame at its origin.

    ``velocity`` (6, N) spatial velocity (w; v) in rad/s and m/s; ``acceleration`` (6, N)
    spatial acceleration with -gravity included; ``subspaces`` (k, 6, N) the motion
    subspaces of the k joints that move the body, in the order of ``joints`` (k,).
    """

    velocity: np.ndarray
    acceleration: np.ndarray
    subspaces: np.ndarray
    joints: np.ndarray


def as_samples(name: str, value, n: int) -> np.ndarray:
    """Validate ``value`` as (N, n) (or (n,), read as N = 1) and return it as float (N, n)."""
    arr = np.asarray(value, dtype=float)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[1] != n:
        raise ValueError(f"{name} must have shape (N, {n}) or ({n},), got {np.shape(value)}")
    return arr


def _small_product(matrix: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """matrix (a, b) @ columns (b, N) for a small constant matrix.

    einsum's own loop, not BLAS: a multi-threaded BLAS spends more on waking its threads
    than on a (9, 3) product, and stalls badly on a busy machine.
    """
    return np.einsum("ab,bn->an", matrix, columns)


def _change_frame(state: np.ndarray, rot: np.ndarray, origin: np.ndarray, out: np.ndarray) -> None:
    """Motion vectors state (m, 6, N) into a frame with orientation rot (3, 3, N), origin (3, N).

    Writes the first m rows of ``out``: v' = R^T (v + w x t), w' = R^T w, the velocity of
    the point at the new origin.
    """
    w, v, t = state[:, :3], state[:, 3:], origin
    moved = np.empty_like(state)
    moved[:, :3] = w
    moved[:, 3] = v[:, 0] + w[:, 1] * t[2] - w[:, 2] * t[1]
    moved[:, 4] = v[:, 1] + w[:, 2] * t[0] - w[:, 0] * t[2]
    moved[:, 5] = v[:, 2] + w[:, 0] * t[1] - w[:, 1] * t[0]
    m = state.shape[0]
    pairs = moved.reshape(m, 2, 3, -1)
    target = out[:m].reshape(m, 2, 3, -1)
    for i in range(3):
        np.multiply(rot[0, i], pairs[:, :, 0], out=target[:, :, i])
        target[:, :, i] += rot[1, i] * pairs[:, :, 1]
        target[:, :, i] += rot[2, i] * pairs[:, :, 2]


def forward_pass(tree: KinematicTree, gravity, q, dq, ddq, steps: JointSteps | None = None) -> list:
    """BodyMotion of every moving body, in model order, for q, dq, ddq of shape (N, n)."""
    n = tree.n_joints
    q, dq, ddq = (as_samples(k, v, n) for k, v in (("q", q), ("dq", dq), ("ddq", ddq)))
    if not (q.shape == dq.shape == ddq.shape):
        raise ValueError(f"q, dq, ddq must have equal shapes, got {q.shape}, {dq.shape}, {ddq.shape}")
    steps = joint_steps(tree) if steps is None else steps
    num = q.shape[0]
    angle, dq_t, ddq_t = (q - tree.joint_ref).T, dq.T, ddq.T
    basis = np.empty((n, 3, num))
    basis[:, 0] = 1.0
    hinge = tree.joint_type == HINGE
    basis[hinge, 1] = np.sin(angle[hinge])
    basis[hinge, 2] = 1.0 - np.cos(angle[hinge])
    basis[~hinge, 1] = angle[~hinge]
    basis[~hinge, 2] = 0.0
    # state rows: velocity, acceleration, then the motion subspaces of the joints above
    root = np.zeros((2, 6, num))
    root[1, 3:] = -np.asarray(gravity, dtype=float)[:, None]
    states, joint_lists = [], []
    for b in range(tree.n_bodies):
        p = tree.parent[b]
        state = root if p < 0 else states[p]
        joints = [] if p < 0 else list(joint_lists[p])
        for j in tree.body_joints[b]:
            rows = state.shape[0]
            new = np.empty((rows + 1, 6, num))
            rot = _small_product(steps.rotation[j], basis[j]).reshape(3, 3, num)
            _change_frame(state, rot, _small_product(steps.translation[j], basis[j]), new)
            s = steps.motion[j][:, None]
            new[0] += s * dq_t[j]
            new[1] += s * ddq_t[j] + _small_product(steps.cross_matrix[j], new[0]) * dq_t[j]
            new[rows] = s
            state = new
            joints.append(j)
        states.append(state)
        joint_lists.append(np.array(joints))
    return [BodyMotion(st[0], st[1], st[2:], jt) for st, jt in zip(states, joint_lists)]
