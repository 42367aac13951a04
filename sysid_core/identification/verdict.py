"""Whether an identification can be trusted: good, doubtful or failed, and why.

Every result carries a verdict, computed here from what the run itself shows (``Evidence``):

- the **held-out fit**: the pooled relative torque RMSE on the validation recording (the
  identification data when there is none): 1 means the model explains nothing of the torque;
- the **uncertainty of what was asked for**: in the terminal scope the terminal body's mass
  (relative standard deviation) and centre of mass (standard deviation, mm); the full scope
  asks for a model that predicts the torques, which the held-out fit judges (many of its base
  parameters are poorly determined on any good run: friction of slow joints, small inertias);
- the **excitation**: the condition number of the base regressor with unit-norm columns (a
  warning only: some arms have base parameters that exist only because a published rotation
  is rounded, unidentifiable from any motion; the standard deviations say what it costs);
- the **motion against the noise**: per joint, the RMS of the filtered velocity over the
  velocity noise of the raw recording (a joint that does not move cannot be identified);
- **physical consistency** of what a model file would hold, and, where the consistent
  estimator or the full scope moved the estimate to make it physical, how far in its own
  standard deviations (data that contradict any real arm: a wrong nominal model, swapped or
  mis-scaled torques);
- the **data-quality notes** of the recording's source (Recording.quality_notes: tracking,
  saturation), which set the level directly.

The thresholds are module constants chosen from measured distributions of good runs on the
real-arm corpus and of deliberately bad ones (bench/verdict_thresholds.py prints both); the
verdict page of the manual (doc/concepts/verdict.md) lists them, and bench/README.md the
measurement.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

LEVELS = ("good", "doubtful", "failed")

# (doubtful above, failed above); chosen from bench/verdict_thresholds.py (good runs of 19 arms
# against five kinds of bad run), tabulated in doc/concepts/verdict.md and bench/README.md
RELATIVE_RMSE = (0.1, 0.4)
CONDITION_NUMBER = {"terminal": 200.0, "full": 1e3}  # doubtful above
MASS_RELATIVE_STD = (0.02, 0.1)
COM_STD_MM = (3.0, 20.0)
# the Mahalanobis distance of the consistent parameters over sqrt(number of base parameters): the
# RMS shift per base parameter in its standard deviations (about 1 when noise alone pushed the
# estimate outside the physical set)
CONSISTENCY_DISTANCE = (2.0, 5.0)
# per-joint motion: RMS filtered velocity over the raw velocity noise (below: doubtful; failed
# when every joint is below MOTION_SNR[1])
MOTION_SNR = (10.0, 3.0)


@dataclass(frozen=True, eq=False)
class Evidence:
    """The figures a verdict is computed from (SI units unless named otherwise).

    ``scope``; ``relative_rmse`` pooled torque RMSE over RMS torque, ``validated`` whether it is
    on held-out data; ``condition_number`` of the base regressor with unit-norm columns;
    ``joint_names`` (n,) and ``motion_snr`` (n,) RMS filtered velocity / raw velocity noise;
    ``mass_relative_std`` and ``com_std_mm`` of the terminal body (terminal scope, else None);
    ``base_relative_std_percent`` (r,) of the base parameters; ``inconsistent`` {body: reasons}
    of the parts a model file would hold; ``consistency_distance`` how far the physically
    consistent parameters are from the unconstrained estimate, in its standard deviations
    (Mahalanobis distance of the base parameters, None where no consistent step ran);
    ``finite`` whether every estimate is a number.
    """

    scope: str
    relative_rmse: float
    validated: bool
    condition_number: float
    joint_names: tuple
    motion_snr: np.ndarray
    base_relative_std_percent: np.ndarray
    mass_relative_std: float | None = None
    com_std_mm: float | None = None
    inconsistent: dict = field(default_factory=dict)
    consistency_distance: float | None = None
    finite: bool = True


@dataclass(frozen=True)
class Verdict:
    """``level`` good, doubtful or failed; ``reasons`` (str, ...) one line each, the worst first
    (empty for good); ``evidence`` what it was computed from."""

    level: str
    reasons: tuple
    evidence: Evidence | None = None

    def __post_init__(self):
        if self.level not in LEVELS:
            raise ValueError(f"verdict level must be one of {LEVELS}, got '{self.level}'")

    @property
    def trusted(self) -> bool:
        """True unless failed: a doubtful result is usable with its warnings."""
        return self.level != "failed"


def _grade(value, limits, higher_is_worse: bool = True) -> str | None:
    doubtful, failed = limits
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return None
    if higher_is_worse:
        return "failed" if value > failed else "doubtful" if value > doubtful else None
    return "failed" if value < failed else "doubtful" if value < doubtful else None


def judge(evidence: Evidence, notes=()) -> Verdict:
    """The verdict on ``evidence`` and the recording's quality ``notes`` (QualityNote, ...)."""
    found = []  # (level, reason)
    if not evidence.finite:
        found.append(("failed", "the estimate contains NaN or infinite values"))
    for body, reasons in evidence.inconsistent.items():
        found.append(("failed", f"body '{body}' is not physically consistent ({'; '.join(reasons)}): no model "
                                "file can hold it (--estimator consistent keeps every body realisable)"))
    rank = max(len(evidence.base_relative_std_percent), 1)
    shift = None if evidence.consistency_distance is None else evidence.consistency_distance / np.sqrt(rank)
    level = _grade(shift, CONSISTENCY_DISTANCE)
    if level:
        found.append((level, f"the nearest physically consistent parameters lie {shift:.3g} standard deviations per "
                             f"base parameter from what the data say (doubtful above {CONSISTENCY_DISTANCE[0]:g}, "
                             f"failed above {CONSISTENCY_DISTANCE[1]:g}): the data contradict a real arm (wrong "
                             "nominal model, torque scale or sign, joint order?)"))
    where = "held-out" if evidence.validated else "identification (no held-out data)"
    level = _grade(evidence.relative_rmse, RELATIVE_RMSE)
    if level:
        found.append((level, f"the model misses {100 * evidence.relative_rmse:.0f} % of the measured torque on the "
                             f"{where} data (doubtful above {100 * RELATIVE_RMSE[0]:.0f} %, failed above "
                             f"{100 * RELATIVE_RMSE[1]:.0f} %)"))
    limit = CONDITION_NUMBER[evidence.scope]
    if not evidence.condition_number <= limit:
        found.append(("doubtful", f"condition number {evidence.condition_number:.3g} (doubtful above {limit:g}): some "
                                  "base parameters are barely excited (see their relative standard deviations)"))
    snr = np.asarray(evidence.motion_snr, dtype=float)
    still = [j for j, s in zip(evidence.joint_names, snr) if s < MOTION_SNR[0]]
    if still:
        level = "failed" if np.all(snr < MOTION_SNR[1]) else "doubtful"
        worst = float(np.min(snr))
        found.append((level, f"{'no joint' if level == 'failed' else 'joints ' + ', '.join(still)} "
                             f"{'moves' if level == 'failed' else 'barely move'} above the velocity noise "
                             f"(velocity RMS / noise {worst:.2g} at worst, doubtful below {MOTION_SNR[0]:g})"))
    if evidence.mass_relative_std is not None:
        level = _grade(evidence.mass_relative_std, MASS_RELATIVE_STD)
        if level:
            found.append((level, f"the terminal mass has a relative standard deviation of "
                                 f"{100 * evidence.mass_relative_std:.3g} % (doubtful above "
                                 f"{100 * MASS_RELATIVE_STD[0]:g} %, failed above {100 * MASS_RELATIVE_STD[1]:g} %)"))
    if evidence.com_std_mm is not None:
        level = _grade(evidence.com_std_mm, COM_STD_MM)
        if level:
            found.append((level, f"the terminal centre of mass has a standard deviation of {evidence.com_std_mm:.3g} "
                                 f"mm (doubtful above {COM_STD_MM[0]:g} mm, failed above {COM_STD_MM[1]:g} mm)"))
    for note in notes:
        found.append((note.level, note.message))
    order = {"failed": 0, "doubtful": 1}
    found.sort(key=lambda item: order[item[0]])
    level = found[0][0] if found else "good"
    return Verdict(level, tuple(reason for _, reason in found), evidence)
