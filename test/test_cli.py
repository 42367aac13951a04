"""sysid-identify end to end: files written, errors reported without tracebacks."""
import json

import mujoco
import numpy as np
import pytest

from conftest import MODELS, ROBOTS
from sysid_core.cli import main

NOMINAL = str(ROBOTS / "openarm_class.xml")
TRUTH = str(ROBOTS / "openarm_class_payload.xml")


@pytest.fixture(scope="module")
def run_output(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli")
    motors = ["DM8009"] * 2 + ["DM4340"] * 2 + ["DM4310"] * 3
    args = [NOMINAL, "--truth-model", TRUTH, "--duration", "8", "--seed", "2", "--output-dir", str(out),
            "--export-damiao"] + [x for m in motors for x in ("--motor-type", m)]
    return main(args), out


def test_cli_writes_params_model_and_damiao_csv(run_output, capsys):
    status, out = run_output
    assert status == 0
    params = json.loads((out / "params.json").read_text())
    for key in ("joint_name", "mass", "center_of_mass_moment", "inertia_tensor", "coulomb_friction",
                "viscous_friction", "rmse", "condition_number", "n_base_params", "scope", "base_parameters",
                "rmse_per_joint", "validation_rmse", "truth", "error"):
        assert key in params
    assert params["joint_name"] == "joint7"
    # 0.25 kg link + 0.5 kg payload: the composite mass within 3 % with default noise
    assert abs(params["error"]["mass_percent"]) < 3.0
    model = mujoco.MjModel.from_xml_path(str(out / "updated_model.xml"))
    link7 = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, "link7")
    assert model.body_mass[link7] == pytest.approx(params["mass"], rel=1e-6)
    lines = (out / "damiao_trajectory.csv").read_text().splitlines()
    assert lines[0].startswith("# motor_type=DM8009,can_id=1,mode=MIT")
    header = [line for line in lines if line.startswith("time,")][0]
    assert header.split(",")[:4] == ["time", "j0_pos", "j0_vel", "j0_tau"]
    rows = np.array([[float(x) for x in line.split(",")] for line in lines if line[0].isdigit()])
    assert np.abs(rows[:, 3::3]).max() > 0.1  # feed-forward torques, not zeros
    for png in ("torque_fit.png", "residuals.png", "parameters.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"
    # the relative validation error per joint, alongside the absolute one
    assert set(params["validation_relative_rmse_per_joint"]) == set(params["rmse_per_joint"])
    assert all(0 < v < 0.5 for v in params["validation_relative_rmse_per_joint"].values())


def test_cli_no_plots(tmp_path):
    assert main([NOMINAL, "--duration", "4", "--source", "ideal", "--no-plots", "--output-dir", str(tmp_path)]) == 0
    assert (tmp_path / "params.json").is_file() and not list(tmp_path.glob("*.png"))


@pytest.mark.parametrize("args, pattern", [
    ([str(MODELS / "bad" / "free_joint.xml")], "only hinge and slide"),
    (["/nonexistent/arm.xml"], "model file not found"),
    ([NOMINAL, "--export-damiao", "--motor-type", "DM4310"], "one --motor-type per joint: 7 joints, 1 given"),
    ([NOMINAL, "--export-damiao"] + ["--motor-type", "DM9999"] * 7, "unknown"),
    ([NOMINAL, "--truth-model", str(ROBOTS / "panda_class.xml"), "--duration", "1"], None),
])
def test_cli_bad_input_exit_code_and_message(args, pattern, capsys, tmp_path):
    status = main(args + ["--output-dir", str(tmp_path)])
    err = capsys.readouterr().err
    if pattern is None:  # same joint names, different arm: runs, but must not crash
        assert status in (0, 3)
        return
    assert status == 2
    assert err.startswith("error:") and "Traceback" not in err
    assert pattern.lower() in err.lower()
