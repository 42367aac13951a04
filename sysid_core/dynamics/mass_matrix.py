"""The joint-space inertia matrix M(q) of a kinematic tree, for any standard parameters.

M(q) = sum_b J_b(q)^T I_b J_b(q): J_b (6, n) is body b's spatial velocity (angular; linear
velocity of its frame origin), in its own frame, per unit joint velocity, and I_b (6, 6) its
spatial inertia about that origin from theta_b = [m, h, I_o] (the project's parameter order):
angular momentum I_o w + h x v, linear momentum m v - h x w. Linear in theta, so it holds for
identified parameters no real body has (negative mass, indefinite inertia), which a physics
engine would refuse. The geometry is ``kinematics``' (MuJoCo's ``mj_kinematics``): a body's
joints act in order, each about an axis and anchor fixed in the frame the previous one left.

Batched over samples, samples last: a few element-wise NumPy operations on (3, 3, N) and
(6, k, N) arrays per joint and body (about 6 ms for 1461 samples of a 7-DOF arm, where M's
columns as regressor evaluations, one per unit acceleration at dq = 0 less gravity's, compute
the whole (N, n, 10 nb) regressor n + 1 times: about 40 ms).
"""
from __future__ import annotations

import numpy as np

from .kinematics import joint_chains, joint_steps, skew
from .tree import HINGE, KinematicTree


def _frames(tree: KinematicTree, q: np.ndarray) -> tuple:
    """Per joint, in the world and after the joint's step, the frame's rotation (3, 3, N) and
    origin (3, N); per body the same of its frame (the frame after its last joint). q (N, n).
    Each step is its JointStep's coefficients on [1, sin, cos] of the hinge's angle ([1, q, 0]
    of a slide's), the regressor's own geometry."""
    num = q.shape[0]
    steps = joint_steps(tree)
    joint_rotation, joint_origin = [None] * tree.n_joints, [None] * tree.n_joints
    body_rotation, body_origin = [None] * tree.n_bodies, [None] * tree.n_bodies
    for b in range(tree.n_bodies):
        p = tree.parent[b]
        rotation = np.broadcast_to(np.eye(3)[:, :, None], (3, 3, num)) if p < 0 else body_rotation[p]
        origin = np.zeros((3, num)) if p < 0 else body_origin[p]
        for j in tree.body_joints[b]:
            angle = q[:, j] - tree.joint_ref[j]
            basis = np.stack([np.ones(num), np.sin(angle), np.cos(angle)] if tree.joint_type[j] == HINGE
                             else [np.ones(num), angle, np.zeros(num)])
            step = (_dense(steps[j].rotation) @ basis).reshape(3, 3, num)
            shift = _dense(steps[j].origin) @ basis
            # samples last: every product is a few element-wise operations on (.., N) rows
            origin = origin + np.einsum("ijn,jn->in", rotation, shift)
            rotation = np.einsum("ijn,jkn->ikn", rotation, step)
            joint_rotation[j], joint_origin[j] = rotation, origin
        body_rotation[b], body_origin[b] = rotation, origin
    return joint_rotation, joint_origin, body_rotation, body_origin


def _dense(entries: tuple) -> np.ndarray:
    """(k, 3): a JointStep's sparse entries, None (an exact zero) as zeros."""
    return np.array([(0.0, 0.0, 0.0) if entry is None else entry for entry in entries])


def mass_matrix(tree: KinematicTree, parameters: np.ndarray, armature: np.ndarray, q: np.ndarray) -> np.ndarray:
    """M(q) (N, n, n) kg m^2 (kg for slides) at q (N, n) rad (m) of the standard ``parameters``
    (nb, 10) of the tree's moving bodies, plus diag(``armature`` (n,)); symmetric."""
    q = np.asarray(q, dtype=float)
    parameters = np.asarray(parameters, dtype=float).reshape(tree.n_bodies, 10)
    num, n = q.shape
    joint_rotation, joint_origin, body_rotation, body_origin = _frames(tree, q)
    # every joint's motion in the world (3, N): its axis and, for a hinge, a point on it
    axis = [np.einsum("ijn,j->in", joint_rotation[j], tree.joint_axis[j]) for j in range(n)]
    anchor = [joint_origin[j] + np.einsum("ijn,j->in", joint_rotation[j], tree.joint_pos[j]) for j in range(n)]
    mass = np.zeros((n, n, num))
    for b, joints in enumerate(joint_chains(tree)):
        theta = parameters[b]
        if not np.any(theta):
            continue
        # J_b (6, k, N) per joint of its chain: w and the velocity of the body's origin, in the
        # world (w x (origin - anchor) for a hinge), then in the body's frame (R_b^T per sample)
        angular, linear = np.zeros((3, len(joints), num)), np.empty((3, len(joints), num))
        for c, j in enumerate(joints):
            if tree.joint_type[j] == HINGE:
                angular[:, c] = axis[j]
                linear[:, c] = np.cross(axis[j], body_origin[b] - anchor[j], axis=0)
            else:
                linear[:, c] = axis[j]
        jacobian = np.concatenate([np.einsum("min,mcn->icn", body_rotation[b], angular),
                                   np.einsum("min,mcn->icn", body_rotation[b], linear)])
        h = skew(theta[1:4])
        spatial = np.block([[np.array([[theta[4], theta[5], theta[6]], [theta[5], theta[7], theta[8]],
                                       [theta[6], theta[8], theta[9]]]), h],
                            [-h, theta[0] * np.eye(3)]])
        momentum = np.tensordot(spatial, jacobian, axes=1)  # (6, k, N)
        index = np.array(joints)
        mass[index[:, None], index[None, :]] += np.einsum("acn,adn->cdn", jacobian, momentum)
    mass += np.asarray(armature, dtype=float)[:, None] * np.eye(n)[:, :, None]
    mass = mass.transpose(2, 0, 1)
    return 0.5 * (mass + np.swapaxes(mass, 1, 2))
