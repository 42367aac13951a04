"""Identification of data held in parts: several files, on several machines.

``identify`` runs in stages, and all but the first need only small summaries of the data; this
module runs the stages on parts of the data (a file, or the share of one a validation split leaves),
each part read and reduced where it lies:

1. ``reduce_part``: one part's Part: the reduced form of its equations (estimation.ReducedForm, the
   QR triangles identify builds block by block), the cross product of a quantised velocity, the
   torque's sum of squares, the velocity's spread and noise levels, and how many prepared blocks
   the part holds. Memory is a few blocks, as in identify.
2. ``merge_parts``: two parts' Parts as one (a before b): the triangles stacked and factorised
   again, the sums added. Merging in any tree gives the same Part to round-off.
3. ``estimated``: the estimate from the merged Part.
4. ``correlation_residuals``: each part's residuals on the blocks identify measures the residual's
   correlation time on (``residual_blocks`` says which blocks of which part).
5. ``concluded_parts``: the result (consistent standard parameters, the fit).
6. ``identify.validation_sums`` on each validation part, then ``finished``: validation figures
   and the verdict.

The answer equals identify's on the parts joined (recording_files.concatenate: each file a
stretch of its own) to round-off (test_fleet), for the options ``parts_problem`` accepts. The
others read every sample again at each iteration of a search (a nonlinear friction law, robust
weighting, MuJoCo's frictionloss constraint): they need one recording in one place (identify).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..dynamics.model import Robot
from ..errors import DataError
from .base_parameters import BaseParameters
from .estimation import Estimate, ReducedForm, estimate_reduced
from .filtering import MIN_SAMPLES
from .identify import (IdentificationConfig, IdentificationResult, _base_estimator, _contract, _friction_models,
                       _Spread, _Stream, _uses_constraint, check_sample_count, concluded, correlation_blocks, judged,
                       reduce_stream, structural_base_parameters, validated, validation_sums, velocity_noise,
                       velocity_noise_levels, widened)
from .recording import Recording


@dataclass(frozen=True, eq=False)
class Part:
    """What the identification keeps of one part of the data (or of several merged), in memory
    independent of its length: ``reduced`` the reduced form of its equations, ``cross`` their cross
    product (n, r + 1, r + 1) for a quantised velocity or None, ``torque_sq`` (n,) N^2 m^2 the
    measured torque's sum of squares, ``motion`` the prepared velocity's running spread,
    ``sizes`` one tuple per part of its prepared blocks' rows (in order), ``noise`` the raw
    velocity's noise levels (n,) rad/s of its stretches (identify.velocity_noise_levels)."""

    reduced: ReducedForm
    cross: np.ndarray | None
    torque_sq: np.ndarray
    motion: _Spread
    sizes: tuple
    noise: tuple

    @property
    def count(self) -> int:
        """Prepared rows in all."""
        return int(sum(sum(s) for s in self.sizes))


def parts_problem(robot: Robot, config: IdentificationConfig) -> str | None:
    """Why ``config`` cannot be identified in parts (None: it can)."""
    if config.robust:
        return "robust weighting reweights every sample at each iteration"
    models = _friction_models(robot, config)
    if models is not None and any(m.free for m in models):
        return "a friction law with nonlinear parameters is searched over samples of the whole recording"
    if _uses_constraint(robot, config):
        return "MuJoCo's frictionloss constraint is linearised again over every sample at each pass"
    return None


def _check(robot: Robot, config: IdentificationConfig) -> None:
    problem = parts_problem(robot, config)
    if problem is not None:
        raise ValueError(f"this identification cannot run in parts: {problem}")


def reduce_part(robot: Robot, config: IdentificationConfig, base: BaseParameters, recording: Recording) -> Part:
    """The Part of ``recording``, one part of the identification data (any length, none included);
    ``base`` identify.structural_base_parameters(robot, config)."""
    _check(robot, config)
    recording = recording.select(robot.joint_names)
    n = robot.n_joints
    if recording.n_samples < 2:
        return Part(ReducedForm.empty(n, base.rank), None, np.zeros(n), _Spread(n), ((),), ())
    stream = _Stream(robot, config, recording, whole=False)
    reduced, cross, torque_sq, motion = reduce_stream(stream, base)
    return Part(reduced, cross, torque_sq, motion, (tuple(stream.sizes),),
                tuple(velocity_noise_levels(recording, config.filter)))


def merge_parts(a: Part, b: Part) -> Part:
    """One Part of ``a``'s data followed by ``b``'s."""
    cross = b.cross if a.cross is None else a.cross if b.cross is None else a.cross + b.cross
    return Part(a.reduced.merged(b.reduced), cross, a.torque_sq + b.torque_sq, a.motion.merged(b.motion),
                a.sizes + b.sizes, a.noise + b.noise)


def estimated(robot: Robot, config: IdentificationConfig, part: Part) -> tuple[ReducedForm, Estimate]:
    """(the reduced form the estimate is made on, the estimate) of a merged Part of all the
    identification data; DataError for too few samples, as identify."""
    _check(robot, config)
    check_sample_count(robot, config, part.count)
    reduced = part.reduced if part.cross is None else part.reduced.crossed(part.cross)
    return reduced, estimate_reduced(reduced, _base_estimator(config), config.ridge_alpha)


def residual_blocks(part: Part) -> list:
    """For each part of a merged Part, in order, the numbers of its prepared blocks the residual's
    correlation time is measured on (a set; None: all its rows), as identify picks them."""
    chosen = correlation_blocks(part.count, sum(len(s) for s in part.sizes))
    out, offset = [], 0
    for sizes in part.sizes:
        out.append(None if chosen is None else {b - offset for b in chosen if offset <= b < offset + len(sizes)})
        offset += len(sizes)
    return out


def correlation_residuals(robot: Robot, config: IdentificationConfig, base: BaseParameters, recording: Recording,
                          values: np.ndarray, blocks) -> list:
    """The residuals (B, n) N m of the base estimate ``values`` (r,) on one part's ``blocks`` (its
    entry of residual_blocks), in order."""
    recording = recording.select(robot.joint_names)
    if recording.n_samples < 2 or blocks == set():
        return []
    stream = _Stream(robot, config, recording, whole=False)
    return [target - _contract(columns, values) for _, columns, target in stream.columns(base, select=blocks)]


def concluded_parts(robot: Robot, config: IdentificationConfig, base: BaseParameters, part: Part,
                    reduced: ReducedForm, est: Estimate, residuals: list) -> IdentificationResult:
    """The result from the merged Part, its estimate (``estimated``) and every part's
    correlation_residuals in order (a list of lists): no validation, no verdict yet."""
    est = widened(est, [r for piece in residuals for r in piece])
    return concluded(robot, config, base, est, reduced, part.torque_sq)


def finished(robot: Robot, result: IdentificationResult, part: Part, validation_sums=None,
             notes: tuple = ()) -> IdentificationResult:
    """``result`` with its validation figures from the validation parts' identify.validation_sums
    (a list; None: no validation) and its verdict, ``notes`` the data's QualityNotes."""
    if validation_sums is not None:
        residual_sq, torque_sq, count = (sum(s[k] for s in validation_sums) for k in range(3))
        if count < MIN_SAMPLES:
            raise DataError(f"only {count} validation samples remain after filtering; at least {MIN_SAMPLES} "
                            "are needed: hold out a larger share")
        result = validated(result, residual_sq, torque_sq, count)
    return judged(robot, result, velocity_noise(list(part.noise), robot.n_joints), part.motion.rms, notes)


def identify_parts(robot: Robot, parts, config: IdentificationConfig = IdentificationConfig(),
                   validation=(), notes: tuple = ()) -> IdentificationResult:
    """identify() on data given in parts (Recordings, each a stretch of its own), the stages run
    here one after another (the fleet runs them on a cluster); ``validation`` the validation
    data in parts (empty: none)."""
    parts, validation = list(parts), list(validation)
    base = structural_base_parameters(robot, config)
    reduced_parts = [reduce_part(robot, config, base, p) for p in parts]
    merged = reduced_parts[0]
    for other in reduced_parts[1:]:
        merged = merge_parts(merged, other)
    reduced, est = estimated(robot, config, merged)
    residuals = [correlation_residuals(robot, config, base, p, est.values, blocks)
                 for p, blocks in zip(parts, residual_blocks(merged))]
    result = concluded_parts(robot, config, base, merged, reduced, est, residuals)
    sums = [validation_sums(robot, result, v, whole=False) for v in validation if v.n_samples >= 2]
    return finished(robot, result, merged, sums if validation else None, notes)
