"""Every result carries a verdict: good, doubtful or failed, with reasons.

Junk runs (a million times the noise; an arm that does not move) and a
physically impossible result must fail: exit status 3, no updated_model.xml, params.json with
the failed verdict and its reasons. The figures behind the thresholds are measured by
bench/verdict_thresholds.py; here each criterion is checked on its own with evidence on
either side of it, and the pipeline end to end through the CLI.
"""
import json

import mujoco
import numpy as np
import pytest

from conftest import ROBOTS
from sysid_core.cli import main
from sysid_core.identification import verdict as v
from sysid_core.identification.recording import QualityNote, Recording

NOMINAL = str(ROBOTS / "openarm_class.xml")


def _evidence(**changes):
    good = dict(scope="terminal", relative_rmse=0.01, validated=True, condition_number=5.0, joint_names=("a", "b"),
                motion_snr=np.array([100.0, 80.0]), base_relative_std_percent=np.array([0.5, 2.0]),
                mass_relative_std=0.001, com_std_mm=0.2)
    good.update(changes)
    return v.Evidence(**good)


def test_a_clean_run_is_good():
    verdict = v.judge(_evidence())
    assert verdict.level == "good" and verdict.reasons == () and verdict.trusted


@pytest.mark.parametrize("changes, level, words", [
    ({"relative_rmse": 0.2}, "doubtful", "misses 20 %"),
    ({"relative_rmse": 0.9}, "failed", "misses 90 %"),
    ({"condition_number": 500.0}, "doubtful", "condition number 500"),
    ({"motion_snr": np.array([100.0, 4.0])}, "doubtful", "joints b barely move"),
    ({"motion_snr": np.array([0.2, 0.1])}, "failed", "no joint moves"),
    ({"mass_relative_std": 0.05}, "doubtful", "terminal mass"),
    ({"mass_relative_std": 0.5}, "failed", "terminal mass"),
    ({"com_std_mm": 5.0}, "doubtful", "centre of mass"),
    ({"com_std_mm": 50.0}, "failed", "centre of mass"),
    ({"inconsistent": {"link7": ["mass -1 kg is not positive"]}}, "failed", "--estimator consistent"),
    ({"finite": False}, "failed", "NaN"),
])
def test_each_criterion_sets_the_level_with_a_reason(changes, level, words):
    verdict = v.judge(_evidence(**changes))
    assert verdict.level == level
    assert words in verdict.reasons[0]


def test_consistency_distance_counts_in_standard_deviations_of_the_base_parameters():
    """Judged per base parameter: a distance of 8 is noise among 24 parameters (1.6 each), not
    among 4 (4 each); 30 among 24 is a contradiction."""
    def level(distance, rank):
        return v.judge(_evidence(consistency_distance=distance, base_relative_std_percent=np.ones(rank))).level
    assert level(8.0, 24) == "good" and level(8.0, 4) == "doubtful"
    far = v.judge(_evidence(consistency_distance=30.0, base_relative_std_percent=np.ones(24)))
    assert far.level == "failed" and "contradict a real arm" in far.reasons[0]


def test_quality_notes_of_the_recording_set_the_level_and_the_worst_comes_first():
    notes = (QualityNote("doubtful", "joint2 lagged 0.1 rad"), QualityNote("failed", "joint3 hit its limit"))
    verdict = v.judge(_evidence(relative_rmse=0.2), notes)
    assert verdict.level == "failed"
    assert verdict.reasons[0] == "joint3 hit its limit"
    assert "joint2 lagged 0.1 rad" in verdict.reasons
    with pytest.raises(ValueError):
        QualityNote("bad", "x")


def test_quality_notes_travel_with_the_recording():
    n = 10
    note = QualityNote("doubtful", "tracking")
    rec = Recording(np.arange(n) * 0.01, np.zeros((n, 1)), np.zeros((n, 1)), np.zeros((n, 1)), ("j",),
                    quality_notes=[note])
    head, tail = rec.split(0.3)
    assert head.quality_notes == tail.quality_notes == rec.select(("j",)).quality_notes == (note,)


def _cli(tmp_path, *extra):
    out = tmp_path / "out"
    status = main([NOMINAL, "--duration", "3", "--seed", "1", "--no-plots", "--output-dir", str(out), *extra])
    params = json.loads((out / "params.json").read_text())
    return status, params, out


@pytest.mark.parametrize("option, value", [("--noise-scale", "1e6"), ("--max-velocity", "1e-9")])
def test_junk_runs_fail_exit_3_and_write_no_model(tmp_path, capsys, option, value):
    """Two junk runs that, unjudged, would exit 0 with a written model (a link mass of 1.7e-13 kg)."""
    status, params, out = _cli(tmp_path, option, value)
    assert status == 3
    assert params["verdict"] == "failed" and params["verdict_reasons"]
    assert not (out / "updated_model.xml").exists()
    printed = capsys.readouterr()
    assert printed.out.splitlines()[[line.startswith("Verdict") for line in printed.out.splitlines()].index(True)] \
        .startswith("Verdict: FAILED")
    assert "identification failed, updated_model.xml not written" in printed.err


def test_a_good_run_says_so_first_and_names_the_estimator_asked_for(tmp_path, capsys):
    status, params, out = _cli(tmp_path, "--estimator", "consistent", "--source", "ideal")
    assert status == 0
    assert params["verdict"] == "good" and params["verdict_reasons"] == []
    assert params["estimator"] == "consistent" and params["base_estimator"] == "wls"
    assert params["physics"]["source"] == "mujoco" and params["physics"]["simulated"] is False
    report = capsys.readouterr().out
    assert "Verdict: GOOD" in report
    assert "estimator consistent" in (out / "updated_model.xml").read_text()
    mujoco.MjModel.from_xml_path(str(out / "updated_model.xml"))
