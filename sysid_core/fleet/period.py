"""One period's identification (a robot's recordings of one date), as steps a cluster runs where
the data lie. Plain functions of picklable arguments; nothing here imports Dask.

The steps follow identification.parts: ``load_file`` (one file, on a worker), ``file_facts``,
``split_rows`` (where the held-out validation share starts), ``reduce_file``, then
``merge_parts`` in a tree, ``estimate_period``, ``file_residuals``, ``conclude_period``,
``file_validation`` and ``finish_period``. The answer is the one ``sysid-identify MODEL
--recording FILE ...`` gives for the period's files, to round-off. ``identify_period`` runs a
period whole in one step, for the options that need every sample in one place
(parts.parts_problem).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..dynamics.model import load_robot
from ..errors import DataError, SysidError
from ..identification.identify import (IdentificationResult, identify, structural_base_parameters,
                                       validation_sums)
from ..identification.parts import (Part, concluded_parts, correlation_residuals, estimated, finished,
                                    parts_problem, reduce_part, residual_blocks)
from ..identification.recording import Recording
from ..identification.recording_files import read_csv, read_rosbag
from ..identification.screening import lost_sample_notes, missing_in_stretches
from ..results.export import params_document
from .manifest import ModelSpec, Period
from .summary import PeriodSummary


@dataclass(frozen=True, eq=False)
class Outcome:
    """What a period gave: ``result`` (None when it could not be identified), the params.json
    ``document``, the ``summary`` for the fleet table, and ``error`` why not."""

    period: Period
    result: IdentificationResult | None
    document: dict | None
    summary: PeriodSummary
    error: str | None = None


@functools.lru_cache(maxsize=16)
def setup(spec: ModelSpec):
    """(robot, parsed options, IdentificationConfig, base parameters, why not in parts or None)
    of a robot's model and options, once per worker process."""
    from ..cli import _identification_config

    args = spec.arguments()
    robot = load_robot(spec.path, terminal_body=args.terminal_body, mesh_dir=args.mesh_dir)
    config = _identification_config(args)
    return robot, args, config, structural_base_parameters(robot, config), parts_problem(robot, config)


def load_file(period: Period, index: int) -> Recording:
    """The samples of the period's file ``index`` for the model's joints, effort gains applied."""
    robot, args, *_ = setup(period.model)
    path = Path(period.files[index])
    if path.suffix.lower() == ".csv":
        recording = read_csv(path, robot.joint_names).recording
    else:
        recording = read_rosbag(path, robot.joint_names, args.topic, args.stamps).recording
    from ..cli import _with_effort_gains

    return _with_effort_gains(args, recording.select(robot.joint_names))


def file_facts(period: Period, recording: Recording) -> tuple:
    """(samples, samples lost in the holes of its stamps, seconds from first to last) of one loaded file."""
    _, args, *_ = setup(period.model)
    missing = missing_in_stretches(recording, (0,)) if args.stamps == "header" else 0
    return recording.n_samples, missing, _seconds(recording, (0,))


def _seconds(recording: Recording, starts) -> float:
    """Recorded seconds: each stretch's last stamp less its first."""
    ends = (*starts[1:], recording.n_samples)
    time = np.asarray(recording.time, dtype=float)
    return float(sum(time[b - 1] - time[a] for a, b in zip(starts, ends) if b > a))


def split_rows(period: Period, facts: list) -> tuple:
    """Per file, the row where its validation share starts (its row count: none held out): the
    last --validation-fraction of the period's samples, as sysid-identify splits them."""
    _, args, *_ = setup(period.model)
    counts = [f[0] for f in facts]
    total = sum(counts)
    cut = total if args.validation_fraction <= 0 else int(round((1.0 - args.validation_fraction) * total))
    starts = np.concatenate(([0], np.cumsum(counts)))
    return tuple(int(min(max(cut - a, 0), c)) for a, c in zip(starts[:-1], counts))


def _notes(period: Period, facts: list) -> tuple:
    """The period's quality notes: samples lost from the stamps, as sysid-identify notes them."""
    _, args, *_ = setup(period.model)
    if args.stamps != "header":
        return ()
    return lost_sample_notes(sum(f[1] for f in facts), sum(f[0] for f in facts), ", ".join(period.files))


def reduce_file(period: Period, recording: Recording, rows: tuple, index: int) -> Part:
    """The Part of one file's identification share."""
    robot, _, config, base, _ = setup(period.model)
    return reduce_part(robot, config, base, recording.rows(slice(0, rows[index])))


def estimate_period(period: Period, part: Part):
    """(reduced form, estimate) of the period's merged Part."""
    robot, _, config, *_ = setup(period.model)
    return estimated(robot, config, part)


def file_residuals(period: Period, recording: Recording, rows: tuple, index: int, part: Part, estimate) -> list:
    """The residuals of one file's share of the blocks the correlation time is measured on."""
    robot, _, config, base, _ = setup(period.model)
    return correlation_residuals(robot, config, base, recording.rows(slice(0, rows[index])), estimate[1].values,
                                 residual_blocks(part)[index])


def conclude_period(period: Period, part: Part, estimate, residuals: list) -> IdentificationResult:
    robot, _, config, base, _ = setup(period.model)
    return concluded_parts(robot, config, base, part, estimate[0], estimate[1], residuals)


def file_validation(period: Period, recording: Recording, rows: tuple, index: int,
                    result: IdentificationResult):
    """validation_sums of one file's validation share (None when it has none)."""
    robot, *_ = setup(period.model)
    held = recording.rows(slice(rows[index], None))
    return None if held.n_samples < 2 else validation_sums(robot, result, held, whole=False)


def finish_period(period: Period, result: IdentificationResult, part: Part, sums: list, facts: list) -> Outcome:
    """The period's Outcome: validation figures, verdict, params.json document and summary."""
    robot, args, *_ = setup(period.model)
    held = [s for s in sums if s is not None]
    result = finished(robot, result, part, held if args.validation_fraction > 0 else None, _notes(period, facts))
    return _outcome(period, robot, args, result, sum(f[2] for f in facts))


def identify_period(period: Period) -> Outcome:
    """The whole period in one step: its files read here, joined and identified by identify()."""
    from ..cli import read_recorded

    robot, args, config, *_ = setup(period.model)
    try:
        recording, loaded, _ = read_recorded(args, robot, period.files)
        identification, validation = (recording.split(args.validation_fraction) if args.validation_fraction > 0
                                      else (recording, None))
        result = identify(robot, identification, config, validation=validation)
    except (DataError, SysidError, ValueError) as err:
        return failed_outcome(period, str(err))
    return _outcome(period, robot, args, result, _seconds(recording, loaded.stretches))


def _outcome(period: Period, robot, args, result: IdentificationResult, seconds: float) -> Outcome:
    document = params_document(result, robot, source=", ".join(period.files), payload_frame=args.payload_frame)
    return Outcome(period, result, document, summarise(period, robot, result, seconds))


def failed_outcome(period: Period, error: str) -> Outcome:
    """The Outcome of a period that could not be identified, saying why."""
    robot, *_ = setup(period.model)
    nan = np.full(robot.n_joints, np.nan)
    summary = PeriodSummary(period.robot, period.date, robot.joint_names, nan, nan, nan, nan, "failed", (error,),
                            error=error)
    return Outcome(period, None, None, summary, error)


def standard_std(result: IdentificationResult) -> np.ndarray:
    """Standard deviations (p,) of the identified standard parameters ``result.standard``: the base
    estimate's covariance through the map back, theta = nominal + P^+ (beta - P nominal)."""
    spread = np.linalg.pinv(result.base.projection)
    return np.sqrt(np.maximum(np.einsum("ij,jk,ik->i", spread, result.estimate.covariance, spread), 0.0))


def summarise(period: Period, robot, result: IdentificationResult, seconds: float) -> PeriodSummary:
    """The fleet table's figures of one identified period, ``seconds`` of recording."""
    std = dict(zip(result.column_names, standard_std(result)))
    joint_std = (lambda term: np.array([std.get(f"{j}.{term}", np.nan) for j in robot.joint_names]))
    verdict = result.verdict
    evidence = verdict.evidence
    mass = mass_std = com = None
    if result.scope == "terminal":
        body = result.terminal_parameters
        mass = float(body[0])
        com = body[1:4] / mass if mass > 0 else np.full(3, np.nan)
        mass_std = None if evidence.mass_relative_std is None else evidence.mass_relative_std * mass
    return PeriodSummary(
        period.robot, period.date, robot.joint_names, np.asarray(result.coulomb, dtype=float), joint_std("coulomb"),
        np.asarray(result.viscous, dtype=float), joint_std("viscous"), verdict.level, tuple(verdict.reasons),
        mass, mass_std, com, evidence.com_std_mm, int(result.metrics.n_samples), seconds / 3600.0,
        f"{period.key}/params.json")

