"""A joint's physics beyond the rigid bodies, and what the MuJoCo simulator adds to it.

Every MuJoCo joint may carry, besides the bodies it moves (all joint-space, N m for dq rad/s):

``armature`` I_a
    rotor inertia reflected through the gear: torque I_a ddq
``damping`` b
    viscous friction: b dq
``stiffness`` k
    a spring toward ``springref`` q_s (MJCF ``springref``; a gravity-balancing spring, an
    elastic transmission): k (q - q_s)
``frictionloss`` f
    dry friction: f sign(dq) on a real joint

Those are physics: they hold for data from hardware and from a simulator alike. Two more
effects are artefacts of MuJoCo itself and hold only where the data came from MuJoCo
(``MujocoPhysics``; ``None`` for hardware):

1. **frictionloss is a soft constraint.** MuJoCo does not apply f sign(dq): the dof gets a
   friction constraint whose force (``mj_constraintUpdate``; the same in ``mj_inverse`` and in
   forward simulation) is, as the torque the actuators must supply,

       tau_f = clip(D (ddq + B dq), -f, f)

   with D = 1/R, R = (1 - imp) / imp * dof_invweight0 (imp = solimp[0] since a friction
   constraint has zero violation; (solimp[0] + solimp[1]) / 2 when solimp[2] is 0 or both are
   equal), dof_invweight0 the diagonal of the inverse joint-space inertia at qpos0, and the
   reference damping B = 2 / (solimp[1] max(solref[0], 2 timestep)) (standard solref; the
   2-timestep floor unless the refsafe flag is disabled) or -solref[1] / solimp[1] (direct
   solref). Near rest the force is a steep linear function of the acceleration and velocity,
   not a step; it changes sign with ddq + B dq, not with dq (B is about 100/s by default).
   ``FrictionLossConstraint`` holds D and B; tau_f matches mj_inverse to round-off. In forward
   simulation with implicit damping (2.) the ddq the constraint sees is the one before the
   damping step (``MujocoPhysics.constraint_acceleration``): on a light wrist without
   armature (z1: 0.4 g m^2, damping 1 N m s/rad, h 1 ms) 3.4 times the integrator's.
2. **Implicit damping.** MuJoCo integrates joint damping implicitly with the Euler (unless the
   ``eulerdamp`` flag is disabled), implicit, implicitfast and discrete integrators: the
   damping acts at the end-of-step velocity dq + h ddq (h the timestep, ddq the step's
   acceleration), which reads as an extra armature h b in data from forward simulation. The
   discrete integrator treats the spring the same way (k at q + h (dq + h ddq)). ``mj_inverse``
   has no such effect (it takes ddq as given), nor has RK4.

gravcomp and the model's own actuators are not joint physics here: a simulated plant has them
disabled (simulation.py), and ``ideal_recording`` removes gravcomp before ``mj_inverse``.
"""
from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np

# MuJoCo's clamps and floors (engine_core_constraint.c: getsolparam, mj_makeImpedance)
_MIN_IMPEDANCE, _MAX_IMPEDANCE = 1e-4, 0.9999
_MIN_VALUE = 1e-15  # mjMINVAL

# MJCF spellings of mjtIntegrator, by value; the last only in MuJoCo versions that have it
INTEGRATORS = {int(mujoco.mjtIntegrator.mjINT_EULER): "Euler", int(mujoco.mjtIntegrator.mjINT_RK4): "RK4",
               int(mujoco.mjtIntegrator.mjINT_IMPLICIT): "implicit",
               int(mujoco.mjtIntegrator.mjINT_IMPLICITFAST): "implicitfast"}
if hasattr(mujoco.mjtIntegrator, "mjINT_DISCRETE"):
    INTEGRATORS[int(mujoco.mjtIntegrator.mjINT_DISCRETE)] = "discrete"
_IMPLICIT_DAMPING = ("implicit", "implicitfast", "discrete")


@dataclass(frozen=True)
class MujocoPhysics:
    """Where the data came from, when it was MuJoCo: which of its artefacts to model.

    ``timestep`` s: the MuJoCo step the data were computed with (the step forward simulation
    really took, or the model's for ``mj_inverse``: it sets frictionloss's reference damping);
    ``integrator`` the MJCF name (Euler, RK4, implicit, implicitfast, discrete); ``eulerdamp``
    False when the model disables Euler's implicit damping; ``simulated`` True for forward
    simulation (accelerations are the integrator's), False for ``mj_inverse`` at planned
    accelerations. An IdentificationConfig without one (``physics=None``) is hardware: a joint's
    frictionloss is f sign(dq) and nothing is delayed.
    """

    timestep: float
    integrator: str = "Euler"
    eulerdamp: bool = True
    simulated: bool = True

    def __post_init__(self):
        if not (np.isfinite(self.timestep) and self.timestep > 0):
            raise ValueError(f"MujocoPhysics.timestep must be > 0 s, got {self.timestep}")
        if self.integrator not in INTEGRATORS.values():
            raise ValueError(f"unknown MuJoCo integrator '{self.integrator}'; "
                             f"choose from {sorted(INTEGRATORS.values())}")

    @classmethod
    def inverse(cls, model: mujoco.MjModel, timestep: float | None = None) -> "MujocoPhysics":
        """Data from ``mj_inverse`` on ``model`` at planned accelerations (the ideal source), with
        the model's timestep set to ``timestep`` s (default its own)."""
        options = _options(model)
        if timestep is not None:
            options["timestep"] = float(timestep)
        return cls(**options, simulated=False)

    @classmethod
    def simulation(cls, model: mujoco.MjModel, timestep: float | None = None) -> "MujocoPhysics":
        """Data from forward simulation of ``model`` with steps of ``timestep`` s (default the
        model's own)."""
        options = _options(model)
        if timestep is not None:
            options["timestep"] = float(timestep)
        return cls(**options, simulated=True)

    @property
    def damping_delay(self) -> float:
        """s: joint damping acts at dq + damping_delay * ddq (the implicit integrators' end-of-step
        velocity), 0 where it acts at dq."""
        if not self.simulated:
            return 0.0
        implicit = self.integrator in _IMPLICIT_DAMPING or (self.integrator == "Euler" and self.eulerdamp)
        return self.timestep if implicit else 0.0

    def constraint_acceleration(self, ddq, mass, damping) -> np.ndarray:
        """The acceleration (N, n) rad/s^2 MuJoCo's constraint solver saw, for the integrator's
        ``ddq`` (N, n) (the data's) at joint-space inertia ``mass`` (N, n, n) kg m^2 and joint
        ``damping`` (n,) N m s/rad: it solves the explicit dynamics first and the implicit
        damping step then turns their acceleration a1 into ddq, (M + h b) ddq = M a1, so
        a1 = ddq + h M^-1 (b ddq). ddq itself where damping acts at dq."""
        ddq = np.asarray(ddq, dtype=float)
        damping = np.asarray(damping, dtype=float)
        if self.damping_delay == 0 or not np.any(damping):
            return ddq
        return ddq + self.damping_delay * np.linalg.solve(mass, (damping * ddq)[..., None])[..., 0]

    @property
    def spring_delay(self) -> float:
        """s: the spring acts at q + spring_delay * (dq + spring_delay * ddq) (the discrete
        integrator's end-of-step position), 0 where it acts at q."""
        return self.timestep if self.simulated and self.integrator == "discrete" else 0.0


def _options(model: mujoco.MjModel) -> dict:
    integrator = INTEGRATORS.get(int(model.opt.integrator))
    if integrator is None:
        raise ValueError(f"MuJoCo integrator {int(model.opt.integrator)} is not supported")
    eulerdamp = not model.opt.disableflags & int(mujoco.mjtDisableBit.mjDSBL_EULERDAMP)
    return {"timestep": float(model.opt.timestep), "integrator": integrator, "eulerdamp": bool(eulerdamp)}


@dataclass(frozen=True, eq=False)
class FrictionLossConstraint:
    """MuJoCo's frictionloss constraint of n dofs, as the torque the actuators must supply.

    ``impedance`` (n,) imp; ``width`` (n,) solimp[1] (clamped as MuJoCo does); ``timeconst``
    (n,) solref[0] s (standard format when > 0); ``direct_damping`` (n,) -solref[1] / solimp[1]
    1/s (direct format, used when timeconst <= 0); ``refsafe`` whether MuJoCo floors timeconst
    at two timesteps. The regularisation D = weight(invweight0) depends on the arm's inertia at
    qpos0 through ``invweight0`` (n,) 1/(kg m^2): the model's, or one recomputed from identified
    parameters (``Robot.inverse_inertia_diagonal``).
    """

    impedance: np.ndarray
    width: np.ndarray
    timeconst: np.ndarray
    direct_damping: np.ndarray
    refsafe: bool = True

    @classmethod
    def from_model(cls, model: mujoco.MjModel) -> "FrictionLossConstraint":
        solimp = np.array(model.dof_solimp, dtype=float)
        solref = np.array(model.dof_solref, dtype=float)
        low = np.clip(solimp[:, 0], _MIN_IMPEDANCE, _MAX_IMPEDANCE)
        high = np.clip(solimp[:, 1], _MIN_IMPEDANCE, _MAX_IMPEDANCE)
        flat = (low == high) | (solimp[:, 2] <= _MIN_VALUE)
        impedance = np.where(flat, 0.5 * (low + high), low)
        refsafe = not model.opt.disableflags & int(mujoco.mjtDisableBit.mjDSBL_REFSAFE)
        return cls(impedance=impedance, width=high, timeconst=solref[:, 0],
                   direct_damping=-solref[:, 1] / np.maximum(high, _MIN_VALUE), refsafe=bool(refsafe))

    def weight(self, invweight0) -> np.ndarray:
        """D (n,) N m s^2/rad: the constraint's stiffness against acceleration."""
        resistance = np.maximum((1.0 - self.impedance) * np.asarray(invweight0, dtype=float) / self.impedance,
                                _MIN_VALUE)
        return 1.0 / resistance

    def reference_damping(self, timestep: float) -> np.ndarray:
        """B (n,) 1/s at a simulation timestep of ``timestep`` s."""
        timeconst = np.maximum(self.timeconst, 2.0 * timestep) if self.refsafe else self.timeconst
        standard = 2.0 / np.maximum(self.width * timeconst, _MIN_VALUE)
        return np.where(self.timeconst > 0, standard, self.direct_damping)

    def shape(self, dq, ddq, level, invweight0, timestep: float) -> np.ndarray:
        """clip(D (ddq + B dq) / level, -1, 1) (N, n): the constraint torque per unit friction level.

        ``level`` (n,) N m the friction level that sets where the force saturates; where it is
        0 the shape is sign(ddq + B dq), the limit. level * shape is MuJoCo's torque."""
        demand = self.weight(invweight0) * (np.asarray(ddq, dtype=float)
                                            + self.reference_damping(timestep) * np.asarray(dq, dtype=float))
        level = np.asarray(level, dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(level > 0, np.clip(demand / np.where(level > 0, level, 1.0), -1.0, 1.0), np.sign(demand))

    def parts(self, dq, ddq, level, invweight0, timestep: float) -> tuple:
        """The constraint torque level * shape split where it saturates: (saturated, linear),
        each (N, n): sign(ddq + B dq) where ``|D (ddq + B dq)| >= level``, else 0; ddq + B dq where
        it does not, else 0. The torque is level * saturated + D * linear: the level acts only
        in the first, the arm's inertia (through D) only in the second, which is what a
        linearisation in both needs (identify's passes)."""
        motion = np.asarray(ddq, dtype=float) + self.reference_damping(timestep) * np.asarray(dq, dtype=float)
        saturated = np.abs(self.weight(invweight0) * motion) >= np.asarray(level, dtype=float)
        return np.where(saturated, np.sign(motion), 0.0), np.where(saturated, 0.0, motion)
