"""sysid-fleet: periods identified on a Dask cluster equal sysid-identify on the same files, a
killed worker loses nothing, the manifest is checked, and only the fleet command imports Dask."""
import datetime
import functools
import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest
import yaml

from conftest import ROBOTS, ROOT
from sysid_core import load_robot
from sysid_core.errors import SysidError
from sysid_core.excitation.multisine import multisine
from sysid_core.fleet.manifest import load_manifest, option_arguments
from sysid_core.identification.identify import IdentificationConfig, identify
from sysid_core.identification.parts import identify_parts
from sysid_core.identification.recording import Recording
from sysid_core.identification.recording_files import concatenate, read_recordings, write_csv, write_rosbag
from sysid_core.simulation import ideal_recording

START = datetime.date(2026, 11, 1)


def _noisy(truth, seed, duration, rate=250.0):
    """``duration`` s of the Panda-class arm with a payload, measured with noise (no ddq)."""
    rng = np.random.default_rng(seed)
    plan = multisine(truth.joint_range, duration, rate, seed=seed, max_velocity=1.5)
    rec = ideal_recording(truth.model, plan, truth.joint_names)
    return Recording(rec.time + 100.0 * seed, rec.q + 1e-4 * rng.standard_normal(rec.q.shape),
                     rec.dq + 2e-3 * rng.standard_normal(rec.q.shape),
                     rec.tau + 2e-2 * rng.standard_normal(rec.q.shape), rec.joint_names)


@pytest.fixture(scope="module")
def small_fleet(tmp_path_factory):
    """Two robots, three dates each; one date in two files, one robot's files as MCAP bags."""
    folder = tmp_path_factory.mktemp("fleet")
    truth = load_robot(ROBOTS / "panda_class_payload.xml")
    robots = []
    for r, robot in enumerate(("arm-a", "arm-b")):
        (folder / robot).mkdir()
        recordings = []
        for day in range(3):
            date = START + datetime.timedelta(days=day)
            pieces = [(4.0,), (2.5, 2.0), (4.0,)][day] if r == 0 else [(4.0,), (4.0,), (3.0, 2.0)][day]
            for k, duration in enumerate(pieces):
                recording = _noisy(truth, 1 + 10 * r + 3 * day + k, duration)
                if r == 1:
                    path = write_rosbag(folder / robot / f"day{day}-{k}", recording)
                else:
                    path = write_csv(folder / robot / f"day{day}-{k}.csv", recording)
                recordings.append({"path": str(path.relative_to(folder)), "date": date})
        robots.append({"id": robot, "model": str(ROBOTS / "panda_class.xml"), "recordings": recordings})
    manifest = folder / "manifest.yaml"
    manifest.write_text(yaml.safe_dump({"options": {"scope": "terminal"}, "robots": robots}))
    return manifest


@functools.lru_cache(maxsize=None)
def _robot(path):
    return load_robot(path)


def _alone(period):
    """What sysid-identify does with one period's files: read, join, hold out the last 20 %, identify."""
    robot = _robot(period.model.path)
    loaded = read_recordings(period.files, robot.joint_names)
    identification, validation = loaded.recording.split(0.2)
    return identify(robot, identification, IdentificationConfig(), validation=validation)


def _close(a, b, rtol=1e-9):
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * np.max(np.abs(b)))


def _assert_same(got, ref):
    _close(got.standard, ref.standard)
    _close(got.estimate.covariance, ref.estimate.covariance)
    _close(got.coulomb, ref.coulomb)
    _close(got.viscous, ref.viscous)
    for field in ("rmse_per_joint", "validation_rmse_per_joint", "condition_number"):
        _close(getattr(got.metrics, field), getattr(ref.metrics, field))
    assert got.metrics.n_samples == ref.metrics.n_samples
    assert (got.verdict.level, got.verdict.reasons) == (ref.verdict.level, ref.verdict.reasons)


def test_parts_in_any_split_equal_identify_on_the_joined_recording():
    """Blocks, stretches and the validation share cut anywhere: the stages in parts give identify's answer."""
    robot, truth = load_robot(ROBOTS / "panda_class.xml"), load_robot(ROBOTS / "panda_class_payload.xml")
    files = [_noisy(truth, seed, duration) for seed, duration in ((1, 3.0), (2, 1.0), (3, 4.0))]
    whole, starts = concatenate(files)
    identification, validation = whole.split(0.3)
    ref = identify(robot, identification, IdentificationConfig(), validation=validation)
    edges = list(starts) + [whole.n_samples]
    cut = identification.n_samples
    pieces = [whole.rows(slice(a, b)) for a, b in zip(edges[:-1], edges[1:])]
    heads = [p.rows(slice(0, min(max(cut - a, 0), p.n_samples))) for p, a in zip(pieces, edges)]
    tails = [p.rows(slice(min(max(cut - a, 0), p.n_samples), None)) for p, a in zip(pieces, edges)]
    _assert_same(identify_parts(robot, heads, validation=tails), ref)


def test_manifest_errors_say_what_and_where(tmp_path, small_fleet):
    good = yaml.safe_load(small_fleet.read_text())
    for key in list(good["robots"][0]["recordings"]):
        key["path"] = str((small_fleet.parent / key["path"]).resolve())
    cases = [
        ({"robots": []}, "needs 'robots:'"),
        ({**good, "extra": 1}, "unknown keys ['extra']"),
        ({**good, "options": {"no-such-option": 1}}, "'no-such-option' is not an option of sysid-identify"),
        ({**good, "options": {"recording": "x.csv"}}, "come from the manifest"),
        ({**good, "options": {"robust": "yes"}}, "is a flag"),
        ({**good, "options": {"scope": "everything"}}, "invalid choice"),
        ({**good, "robots": [good["robots"][0], good["robots"][0]]}, "given twice"),
        ({**good, "robots": [{**good["robots"][0], "id": "../up"}]}, "must be letters"),
        ({**good, "robots": [{**good["robots"][0], "model": "missing.xml"}]}, "not found"),
        ({**good, "robots": [{**good["robots"][0], "recordings": [{"path": "nowhere.csv", "date": START}]}]},
         "nowhere.csv not found"),
        ({**good, "robots": [{**good["robots"][0], "recordings": [
            {"path": good["robots"][0]["recordings"][0]["path"], "date": "1st of May"}]}]}, "not an ISO date"),
    ]
    for document, expected in cases:
        path = tmp_path / "manifest.yaml"
        path.write_text(yaml.safe_dump(document))
        with pytest.raises(SysidError) as err:
            load_manifest(path)
        assert expected in str(err.value), (expected, str(err.value))
    assert option_arguments({"robust": True, "cutoff": 8, "friction_model": "coulomb_viscous"}) == (
        "--robust", "--cutoff", "8", "--friction-model", "coulomb_viscous")


def test_manifest_periods_group_files_by_date(small_fleet):
    manifest = load_manifest(small_fleet)
    assert manifest.robots == ("arm-a", "arm-b")
    assert [(p.robot, p.date, len(p.files)) for p in manifest.periods] == [
        ("arm-a", START, 1), ("arm-a", START + datetime.timedelta(days=1), 2), ("arm-a", START + datetime.timedelta(days=2), 1),
        ("arm-b", START, 1), ("arm-b", START + datetime.timedelta(days=1), 1), ("arm-b", START + datetime.timedelta(days=2), 2)]


@pytest.fixture(scope="module")
def cluster():
    from sysid_core.fleet.cluster import connect
    with connect(workers=2) as client:
        yield client


def test_periods_on_two_workers_equal_each_robot_alone(small_fleet, cluster):
    from sysid_core.fleet.cluster import run_periods
    manifest = load_manifest(small_fleet)
    outcomes = run_periods(cluster, manifest.periods)
    assert [o.period for o in outcomes] == list(manifest.periods)
    for outcome in outcomes:
        assert outcome.error is None, outcome.error
        _assert_same(outcome.result, _alone(outcome.period))


def test_a_worker_killed_mid_run_loses_nothing_and_counts_nothing_twice(small_fleet, cluster):
    """The first period done, one worker process is killed while the others are in flight: every
    period still comes back, equal to the period identified alone (its sample count included)."""
    from sysid_core.fleet.cluster import run_periods
    manifest = load_manifest(small_fleet)
    pids = cluster.run(os.getpid)
    killed, held = [], []

    def done(outcome):
        if not killed:
            # the worker holding the most results of the periods in flight (their files' samples)
            holding = {worker: keys for worker, keys in cluster.has_what().items() if worker in pids}
            victim = max(holding, key=lambda worker: len(holding[worker]))
            held.extend(holding[victim])
            os.kill(pids[victim], signal.SIGKILL)
            killed.append(pids[victim])

    outcomes = run_periods(cluster, manifest.periods, window=4, done=done)
    assert killed and any(key.startswith("load-") for key in held), held  # it held files' samples when killed
    assert killed[0] not in cluster.run(os.getpid).values()  # the nanny started a new process
    for outcome in outcomes:
        assert outcome.error is None, outcome.error
        _assert_same(outcome.result, _alone(outcome.period))


def test_only_the_fleet_command_imports_dask():
    code = ("import importlib, pkgutil, sys\n"
            "import sysid_core, sysid_ros\n"
            "for pkg in (sysid_core, sysid_ros):\n"
            "    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
            "        if m.name not in ('sysid_core.fleet.cluster', 'sysid_core.cli.__main__'):\n"
            "            importlib.import_module(m.name)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def _numbers_equal(got, ref, where="", rtol=1e-9, atol=0.0):
    """Every number of two params.json documents equal to ``rtol`` (or ``atol``); the rest equal.
    A misfit (a fit's RMSE, the consistency distance) is a small difference of sums of squares on
    the scale of the torque or of the estimate, so its round-off is relative to that scale, not to
    itself: those figures (N m, or unitless) are held to 1e-9 absolute."""
    if isinstance(ref, dict):
        assert set(got) == set(ref), where
        for key in ref:
            _numbers_equal(got[key], ref[key], f"{where}.{key}", rtol, 1e-9 if "rmse" in key or "distance" in key else atol)
    elif isinstance(ref, list) and ref and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in ref):
        np.testing.assert_allclose(got, ref, rtol=rtol, atol=max(atol, rtol * np.max(np.abs(ref))), err_msg=where)
    elif isinstance(ref, list):
        assert len(got) == len(ref), where
        for k, (a, b) in enumerate(zip(got, ref)):
            _numbers_equal(a, b, f"{where}[{k}]", rtol, atol)
    elif isinstance(ref, float):
        assert got == pytest.approx(ref, rel=rtol, abs=atol), where
    else:
        assert got == ref, where


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """The generated fleet: 12 arms of six corpus models, 14 days of 20 s at 200 Hz, three wearing."""
    import fleet_generator
    return fleet_generator.generate_fleet(tmp_path_factory.mktemp("generated") / "fleet")


@pytest.fixture(scope="module")
def generated_run(generated, tmp_path_factory):
    from sysid_core.fleet.command import main
    out = tmp_path_factory.mktemp("generated_run")
    assert main([str(generated.manifest), "--output-dir", str(out), "--workers", "2"]) == 0
    return out


def test_a_generated_fleet_flags_every_wearing_joint_within_two_days_and_nothing_else(generated, generated_run):
    drift = json.loads((generated_run / "drift.json").read_text())
    assert set(drift) == {truth.id for truth in generated.robots}
    assert sum(truth.drift is not None for truth in generated.robots) == 3
    for truth in generated.robots:
        flags = drift[truth.id]
        if truth.drift is None:
            assert flags == [], f"{truth.id}: a false flag {flags}"
            continue
        assert flags, f"{truth.id}: {truth.drift.joint} {truth.drift.term} rising from {truth.drift.since} not found"
        assert {(f["joint"], f["term"]) for f in flags} == {(truth.drift.joint, truth.drift.term)}, flags
        first = min(flags, key=lambda f: f["detected"])
        since, detected = (datetime.date.fromisoformat(first[k]) for k in ("since", "detected"))
        assert abs((since - truth.drift.since).days) <= 2, (truth.id, first, truth.drift.since)
        assert 0 <= (detected - truth.drift.since).days <= 2, (truth.id, first, truth.drift.since)


def test_a_generated_fleet_gives_each_period_what_the_robot_alone_gives(generated, generated_run):
    """A period's params.json equals identify() on that period's files alone (read, joined, the
    last 20 % held out): every period of the URDF robot, of the robot with a date in two files and of
    the robot recorded in bags, the first period of the others; the table has a row per period."""
    from sysid_core.fleet.table import read_fleet_csv
    from sysid_core.results.export import params_document
    manifest = load_manifest(generated.manifest)
    summaries = read_fleet_csv(generated_run / "fleet.csv")
    assert [(s.robot, s.date) for s in summaries] == [(p.robot, p.date) for p in manifest.periods]
    assert all(s.verdict == "good" for s in summaries)
    import fleet_generator
    every = {f"arm-{k + 1:02d}" for k in (*fleet_generator.URDF_ROBOTS, *fleet_generator.BAG_ROBOTS,
                                         fleet_generator.SPLIT[0])}
    checked = [p for p in manifest.periods if p.robot in every or p.date == generated.dates[0]]
    assert len(checked) == 3 * len(generated.dates) + len(generated.robots) - 3
    for period in checked:
        written = json.loads((generated_run / period.key / "params.json").read_text())
        robot = _robot(period.model.path)
        alone = params_document(_alone(period), robot, source=", ".join(period.files))
        _numbers_equal(written, alone, period.key)


def test_a_period_s_params_json_is_what_sysid_identify_writes(generated, generated_run, tmp_path):
    """The period of two files, through the sysid-identify command itself."""
    from sysid_core.cli import main as sysid_identify
    period = max(load_manifest(generated.manifest).periods, key=lambda p: len(p.files))
    assert len(period.files) == 2
    assert sysid_identify([period.model.path, "--recording", *period.files, "--scope", "terminal",
                           "--output-dir", str(tmp_path), "--no-plots"]) == 0
    _numbers_equal(json.loads((generated_run / period.key / "params.json").read_text()),
                   json.loads((tmp_path / "params.json").read_text()))
    for name in ("updated_model.xml", "updated_model.urdf"):
        assert (generated_run / period.key / name).exists() == (tmp_path / name).exists()
