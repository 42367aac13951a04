"""sysid_core: identification of robot-arm dynamics, pure Python (no ROS).

Typical use::

    from sysid_core import load_robot
    robot = load_robot("arm.xml")
    Y = robot.regressor(q, dq, ddq)      # (N, n_joints, 10 * n_bodies)
"""
from .dynamics.model import Robot, load_robot
from .errors import DataError, IdentificationError, ModelError, SysidError

__all__ = ["load_robot", "Robot", "SysidError", "ModelError", "DataError", "IdentificationError"]
