"""Figures next to params.json: what they show is the data and the model's prediction."""
import numpy as np
import pytest

from conftest import ROBOTS
from sysid_core import load_robot
from sysid_core.dynamics.friction import JointModel
from sysid_core.excitation.multisine import multisine
from sysid_core.identification.identify import IdentificationConfig, identify
from sysid_core.results.plots import MAX_POINTS, parameter_figure, torque_figure, write_plots
from sysid_core.simulation import ideal_recording

matplotlib = pytest.importorskip("matplotlib")


@pytest.fixture(scope="module")
def identified():
    nominal = load_robot(ROBOTS / "openarm_class.xml")
    truth = load_robot(ROBOTS / "openarm_class_payload.xml")
    plan = multisine(nominal.joint_range, 5.0, 200.0, seed=2, max_velocity=1.0)
    check = multisine(nominal.joint_range, 3.0, 200.0, seed=20, max_velocity=1.0)
    record = (lambda p: ideal_recording(truth.model, p, truth.joint_names))
    config = IdentificationConfig(joint_model=JointModel(("viscous",)))
    recording, validation = record(plan), record(check)
    return nominal, truth, identify(nominal, recording, config, validation=validation), recording, validation


def test_torque_figure_shows_measured_and_predicted(identified):
    nominal, _, result, _, validation = identified
    figure = torque_figure(nominal, result, validation, "check")
    assert len(figure.axes) == nominal.n_joints
    # oracle for the measured line: the recording's torques (mj_inverse of the truth model along
    # the plan, exact accelerations: only the filter's trimmed ends are dropped)
    trim = round(result.config.filter.trim_s * 200.0)
    truth_tau = validation.tau[trim:-trim]
    for j, ax in enumerate(figure.axes):
        measured, predicted = (line.get_ydata() for line in ax.lines[:2])
        np.testing.assert_allclose(measured, truth_tau[:, j], atol=1e-12)
        # friction loss is the only thing the identified model gets wrong here
        assert np.sqrt(np.mean((predicted - measured) ** 2)) < 0.5
    assert len(figure.axes[0].lines[0].get_xdata()) <= MAX_POINTS


def test_parameter_figure_marks_poorly_determined_parameters(identified):
    _, _, result, _, _ = identified
    figure = parameter_figure(result)
    bars = figure.axes[1].patches
    assert len(bars) == result.base.rank
    red = [bar.get_height() for bar in bars if bar.get_facecolor()[:3] == matplotlib.colors.to_rgb("tab:red")]
    assert len(red) == int(np.sum(result.estimate.relative_std > 10.0))


def test_write_plots_writes_three_pngs(identified, tmp_path):
    nominal, _, result, recording, validation = identified
    paths = write_plots(tmp_path / "out", nominal, result, recording, validation)
    assert [p.name for p in paths] == ["torque_fit.png", "residuals.png", "parameters.png"]
    for path in paths:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        height, width = matplotlib.image.imread(path).shape[:2]
        assert height > 200 and width > 400
