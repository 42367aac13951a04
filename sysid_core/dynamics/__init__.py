"""Rigid-body dynamics of a fixed-base arm: model loading, the kinematic tree, the joint-torque
regressor, inertial parameters and joint friction laws. Imports nothing above ``sysid_core.errors``."""
