"""Whole-arm joint-torque regressor: tau (N, n) = Y (N, n, 10 nb) @ theta (10 nb,)."""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from .kinematics import forward_pass, joint_steps
from .model import KinematicTree
from .rigid_body import body_regressor_blocks


@lru_cache(maxsize=32)
def _cached_steps(tree: KinematicTree):
    return joint_steps(tree)


def _as_index(joints: np.ndarray):
    """A contiguous run of joints (always so on serial chains) as a slice: slabs copy faster."""
    if joints.size and np.all(np.diff(joints) == 1):
        return slice(int(joints[0]), int(joints[-1]) + 1)
    return joints


def joint_torque_regressor(tree: KinematicTree, gravity, q, dq, ddq) -> np.ndarray:
    """Y of shape (N, n, 10 nb): one 10-column block per moving body, in model order.

    Columns of block b are [m, hx, hy, hz, Ixx, Ixy, Ixz, Iyy, Iyz, Izz] of body b about
    its origin in its frame; rows are joints in dof order; SI units, gravity (3,) in m/s^2.
    The result is a view of a joint-major buffer (samples last, where the work is
    contiguous); use np.ascontiguousarray(Y) where C order matters.
    """
    bodies = forward_pass(tree, gravity, q, dq, ddq, _cached_steps(tree))
    num = bodies[0].velocity.shape[1]
    out = np.zeros((tree.n_joints, 10 * tree.n_bodies, num))
    for b, body in enumerate(bodies):
        # torque on joint k from body b: k's motion subspace in b's frame against b's wrench
        mass, first_moment, inertia = body_regressor_blocks(body.velocity, body.acceleration)
        index = _as_index(body.joints)
        rows = out[index, 10 * b:10 * b + 10]
        s = body.subspaces  # (k, 6, N)
        # A's structure: mass acts on the force rows 3-5, inertia on the moment rows 0-2;
        # einsum contracts in one C loop straight into the output, with no temporaries
        np.einsum("krn,rn->kn", s[:, 3:], mass, out=rows[:, 0])
        np.einsum("krn,rcn->kcn", s, first_moment, out=rows[:, 1:4])
        np.einsum("krn,rcn->kcn", s[:, :3], inertia, out=rows[:, 4:])
        if not isinstance(index, slice):
            out[index, 10 * b:10 * b + 10] = rows
    return np.moveaxis(out, -1, 0)
