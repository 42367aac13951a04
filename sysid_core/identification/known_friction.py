"""Identification with each joint's friction known beforehand, from a friction sweep.

The friction is measured first, on constant-speed moves where it is the only velocity-dependent
torque (``excitation.friction_sweep``, ``friction_curve``), and the link dynamics are then
identified on the excitation with the friction known. "Fix" mode: the sweep's law f_j(dq_j) of
every joint, evaluated at each sample's velocity, is subtracted from the measured torque, and
the rigid bodies (and the other joint terms: armature, springs) are identified from what is
left, with no friction columns and none of the model file's friction (its frictionloss and
damping would count the friction twice). The result then carries the sweep's laws as its
friction, so every torque it predicts, the RMSE and the validation included, is rigid body plus
sweep friction; the relative RMSE is measured against the measured torque.

Nothing is estimated of the friction here: its standard deviations are the sweep's, and those
of the rigid-body parameters are conditional on it. A law is only known where the sweep
measured it: a sample beyond the sweep's fastest point by more than the sweep's own step
between its two fastest speeds (``KnownFriction.reach``) extrapolates it, and a joint that has
more than EXTRAPOLATED_SHARE of its samples there gets a doubtful quality note.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..dynamics import friction
from ..dynamics.model import Robot
from ..errors import DataError
from .filtering import prepare
from .identify import IdentificationConfig, IdentificationResult, identify
from .recording import QualityNote, Recording
from .verdict import judge

# share of a joint's samples beyond the sweep's fastest point above which the verdict is told
# the law was extrapolated (a reporting threshold: the share itself is in params.json)
EXTRAPOLATED_SHARE = 0.01


@dataclass(frozen=True, eq=False)
class KnownFriction:
    """Every joint's friction, known: ``joint_names`` (n,); ``frictions`` (n,) JointFriction;
    ``std`` (n,) {parameter: standard deviation (SI) or None where not determined}; ``speed``
    (n,) rad/s the fastest speed the law was measured at; ``reach`` (n,) rad/s the speed up to
    which it counts as measured: ``speed`` times the ratio of the two fastest measured speeds
    (no further beyond the last point than between the last two); ``source`` where it came
    from (the sweep's file)."""

    joint_names: tuple
    frictions: tuple
    std: tuple
    speed: np.ndarray
    reach: np.ndarray
    source: str

    def select(self, joint_names) -> "KnownFriction":
        """The joints ``joint_names`` in that order; DataError naming those it lacks."""
        joint_names = tuple(joint_names)
        missing = [j for j in joint_names if j not in self.joint_names]
        if missing:
            raise DataError(f"{self.source}: no friction for the joints {missing} (it has {list(self.joint_names)})")
        k = [self.joint_names.index(j) for j in joint_names]
        return KnownFriction(joint_names, tuple(self.frictions[i] for i in k), tuple(self.std[i] for i in k),
                             np.asarray(self.speed, dtype=float)[k], np.asarray(self.reach, dtype=float)[k],
                             self.source)


def from_sweep(swept, joint_names, source: str, laws=None) -> KnownFriction:
    """The KnownFriction of ``joint_names`` from a sweep read back (results.friction_report.
    read_friction_sweep: SweptJoint per joint): each joint's chosen law, or ``laws`` (n,) names
    when given. DataError, never a fallback: a joint of the model missing from the sweep, a
    sweep of other joints, no chosen law, a law the sweep did not fit."""
    by_name = {s.joint: s for s in swept}
    joint_names = tuple(joint_names)
    missing = [j for j in joint_names if j not in by_name]
    if missing:
        other = "" if set(joint_names) & set(by_name) else " (a sweep of another arm?)"
        raise DataError(f"{source}: the sweep has no friction for the model's joints {missing}: it swept "
                        f"{list(by_name)}{other}")
    frictions, std, speed, reach = [], [], [], []
    for k, name in enumerate(joint_names):
        s = by_name[name]
        law = s.chosen if laws is None else laws[k]
        if law is None:
            raise DataError(f"{source}: joint '{name}' has no chosen friction law (none qualified): name one the "
                            "sweep fitted with --friction-model")
        curve = s.laws.get(law)
        if curve is None or isinstance(curve, str):
            fitted = [n for n, c in s.laws.items() if not isinstance(c, str)]
            why = "not in the sweep" if curve is None else f"not fitted: {curve}"
            raise DataError(f"{source}: joint '{name}': friction law '{law}' {why}; the sweep fitted {fitted}")
        frictions.append(curve.friction)
        std.append(dict(curve.std))
        speeds = np.unique(np.abs(s.velocity))
        speed.append(float(speeds[-1]))
        reach.append(float(speeds[-1] ** 2 / speeds[-2]) if speeds.size > 1 and speeds[-2] > 0 else float(speeds[-1]))
    return KnownFriction(joint_names, tuple(frictions), tuple(std), np.array(speed), np.array(reach), source)


def without_model_friction(robot: Robot) -> Robot:
    """``robot`` with no friction of its own (frictionloss and damping 0): what is identified
    once the known friction has been taken out of the torque."""
    return replace(robot, frictionloss=np.zeros(robot.n_joints), damping=np.zeros(robot.n_joints))


def friction_velocity(recording: Recording, from_position: bool = False) -> np.ndarray:
    """The velocity (N, n) rad/s the known laws are evaluated at: the measured one, or with
    ``from_position`` the derivative of the measured position (for a drive whose velocity
    lags, as FilterConfig.velocity_from_position)."""
    if not from_position:
        return np.asarray(recording.dq, dtype=float)
    return np.gradient(np.asarray(recording.q, dtype=float), np.asarray(recording.time, dtype=float), axis=0)


def subtract_known(recording: Recording, known: KnownFriction, from_position: bool = False) -> Recording:
    """``recording`` (its joints in ``known``'s order) with each joint's known friction
    f_j(dq_j) N m subtracted from its torque."""
    recording = recording.select(known.joint_names)
    tau = np.asarray(recording.tau, dtype=float) - friction.friction_torque(
        friction_velocity(recording, from_position), known.frictions)
    return replace(recording, tau=tau)


def extrapolated_share(recording: Recording, known: KnownFriction, from_position: bool = False) -> np.ndarray:
    """Per joint (n,): the share of the samples faster than ``known.reach`` (where the law is
    extrapolated)."""
    dq = friction_velocity(recording.select(known.joint_names), from_position)
    return np.mean(np.abs(dq) > known.reach, axis=0)


def _torque_rms(recording: Recording, config: IdentificationConfig) -> np.ndarray:
    """RMS (n,) N m of the torque as the identification sees it (filtered, trimmed, decimated)."""
    return np.sqrt(np.mean(np.asarray(prepare(recording, config.filter).tau) ** 2, axis=0))


def _relative(rmse_per_joint, rms) -> tuple:
    """(per joint (n,), pooled) RMSE over the measured torque's RMS."""
    rmse_per_joint = np.asarray(rmse_per_joint, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        per_joint = np.where(rms > 0, rmse_per_joint / rms, np.inf)
    total = float(np.sqrt(np.mean(rms ** 2)))
    return per_joint, float(np.sqrt(np.mean(rmse_per_joint ** 2))) / total if total > 0 else float("inf")


def identification_config(config: IdentificationConfig) -> IdentificationConfig:
    """``config`` without friction: no coulomb or viscous columns, the default law (unused)."""
    terms = tuple(t for t in config.joint_model.terms if t not in ("coulomb", "viscous"))
    return replace(config, joint_model=friction.JointModel(terms, config.joint_model.smoothing),
                   friction_models=friction.FrictionSelection())


def identify_with_known_friction(robot: Robot, recording: Recording, config: IdentificationConfig,
                                 known: KnownFriction, validation: Recording | None = None
                                 ) -> IdentificationResult:
    """Identify ``robot`` from ``recording`` (and report on ``validation``) with every joint's
    friction fixed at ``known`` (see the module's docstring). ``config`` as for identify; its
    friction choices (coulomb/viscous terms, friction laws) give way to the known laws, and
    velocity_from_position to which velocity they are evaluated at.

    The result is identify's on the torque less the known friction, with ``friction`` the known
    laws (``coulomb``/``viscous`` their levels), ``config`` what was identified (no friction
    columns), the relative RMSE (training and validation) against the measured torque, and the
    verdict judged on those, with a doubtful note for each joint whose samples go beyond the
    sweep's speeds on more than EXTRAPOLATED_SHARE of them. Predictions of the rigid part come
    from ``without_model_friction(robot)`` with the result; add friction.friction_torque(dq,
    result.friction) for the whole torque."""
    known = known.select(robot.joint_names)
    recording = recording.select(robot.joint_names)
    bare_config = identification_config(config)
    from_position = config.filter.velocity_from_position
    held = None if validation is None else validation.select(robot.joint_names)
    result = identify(without_model_friction(robot), subtract_known(recording, known, from_position), bare_config,
                      validation=None if held is None else subtract_known(held, known, from_position))

    # the residuals are those of rigid body plus known friction against the measured torque;
    # only the scale they are compared with changes: the measured torque, not what was left of it
    metrics = result.metrics
    relative, pooled = _relative(metrics.rmse_per_joint, _torque_rms(recording, bare_config))
    metrics = replace(metrics, relative_rmse_per_joint=relative, relative_rmse=pooled)
    if held is not None:
        relative, pooled = _relative(metrics.validation_rmse_per_joint, _torque_rms(held, bare_config))
        metrics = replace(metrics, validation_relative_rmse_per_joint=relative, validation_relative_rmse=pooled)
    notes = list(recording.quality_notes) + ([] if held is None else
                                             [n for n in held.quality_notes if n not in recording.quality_notes])
    for data, what in ((recording, "identification"), (held, "validation")):
        if data is None:
            continue
        for name, share, speed, reach in zip(robot.joint_names, extrapolated_share(data, known, from_position),
                                             known.speed, known.reach):
            if share > EXTRAPOLATED_SHARE:
                notes.append(QualityNote("doubtful", f"{name}: {share:.1%} of the {what} samples are faster than "
                                                     f"{reach:.3g} rad/s, well beyond the friction sweep's fastest "
                                                     f"point ({speed:.3g} rad/s): its law is extrapolated there; "
                                                     "sweep up to the excitation's speed"))
    evidence = result.verdict.evidence
    evidence = replace(evidence, relative_rmse=metrics.validation_relative_rmse if evidence.validated
                       else metrics.relative_rmse)
    return replace(result, metrics=metrics, friction=tuple(known.frictions),
                   coulomb=np.array([f.coulomb_level for f in known.frictions]),
                   viscous=np.array([f.viscous_level for f in known.frictions]),
                   verdict=judge(evidence, tuple(notes)))
