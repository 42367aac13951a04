"""sysid_core: identification of robot-arm dynamics, pure Python (no ROS).

Typical use::

    from sysid_core import load_robot
    robot = load_robot("arm.xml")
    Y = robot.regressor(q, dq, ddq)      # (N, n_joints, 10 * n_bodies)
"""
from .errors import DataError, IdentificationError, ModelError, SysidError

__all__ = ["load_robot", "Robot", "SysidError", "ModelError", "DataError", "IdentificationError"]


def __getattr__(name: str):
    # Robot and load_robot on first use: they import MuJoCo, and ``sysid_core.cli`` sets
    # MuJoCo's GL backend before MuJoCo is first imported (importing this package must not)
    if name in ("Robot", "load_robot"):
        from .dynamics import model
        return getattr(model, name)
    raise AttributeError(f"module 'sysid_core' has no attribute {name!r}")
