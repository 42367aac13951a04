"""The kinematic tree of a fixed-base arm as constant arrays: what the regressor works on.

Built from a MuJoCo model by ``model.load_robot``; read by ``kinematics`` and ``regressor``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# joint types (KinematicTree.joint_type)
HINGE, SLIDE = 0, 1


@dataclass(frozen=True, eq=False)
class KinematicTree:
    """Constant geometry of the moving bodies, in model order.

    Per moving body b (nb of them): ``parent[b]`` index of the moving parent or -1 for the
    world; ``fixed_rotation[b]`` (3, 3) and ``fixed_translation[b]`` (3,) place the body frame,
    with its joints at their reference positions, in the parent's frame (the world for -1).
    Per joint j (n of them, MuJoCo dof order): ``joint_body``, ``joint_type`` (HINGE/SLIDE),
    ``joint_axis`` (3,) and ``joint_pos`` (3,) in the body frame, ``joint_ref`` (qpos0).
    ``support[j, b]`` is True when joint j moves body b.
    """

    parent: np.ndarray
    fixed_rotation: np.ndarray
    fixed_translation: np.ndarray
    joint_body: np.ndarray
    joint_type: np.ndarray
    joint_axis: np.ndarray
    joint_pos: np.ndarray
    joint_ref: np.ndarray
    support: np.ndarray
    body_joints: tuple = field(default=())

    @property
    def n_bodies(self) -> int:
        return len(self.parent)

    @property
    def n_joints(self) -> int:
        return len(self.joint_body)
