"""sysid-identify end to end: files written, errors reported without tracebacks."""
import json
import signal
import subprocess
import sys
from pathlib import Path

import mujoco
import numpy as np
import pytest

from conftest import MODELS, ROBOTS, ROOT, console_script, source_environment
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


def test_cli_process_imports_no_gl_backend():
    """The command line renders nothing: its process leaves MuJoCo without a GL backend, so
    GLFW (whose import starts a Python subprocess) is never imported; importing the package
    alone does not import MuJoCo, and load_robot is still there."""
    env = {k: v for k, v in source_environment().items() if k != "MUJOCO_GL"}
    code = ("import os, sys, sysid_core; print('mujoco' in sys.modules); import sysid_core.cli; "
            "print(os.environ['MUJOCO_GL'], 'glfw' in sys.modules, sysid_core.load_robot.__module__)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert run.stdout.split() == ["False", "disable", "False", "sysid_core.dynamics.model"], run.stderr


def test_a_filtered_identification_imports_no_scipy(tmp_path):
    """Importing SciPy's linalg costs about 0.2 s and its signal module about a second (SciPy
    1.17): sysid-identify on simulated data (filtered, consistent estimate, verdict, model
    written) runs on NumPy alone; only an excitation design or a nonlinear friction fit loads it."""
    code = ("import sys; from sysid_core.cli import main; "
            f"status = main([{NOMINAL!r}, '--duration', '6', '--source', 'sim', '--no-plots', "
            f"'--output-dir', {str(tmp_path)!r}]); "
            "print(status, sorted({m.split('.')[0] for m in sys.modules} & {'scipy', 'sympy'}))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env=source_environment(), timeout=300)
    assert run.stdout.split("\n")[-2:] == ["0 []", ""], run.stdout[-2000:] + run.stderr[-2000:]


# --- bad input through the console script ---------------------------------------------------------

SCRIPT = console_script("sysid-identify")
PLANAR = str(MODELS / "planar_2r.xml")


def start_cli(*args):
    """``sysid-identify *args`` in a process of its own (the installed console script)."""
    return subprocess.Popen([str(SCRIPT), *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=ROOT, env=source_environment(),
                            # Ctrl-C as a terminal delivers it, even under a runner that ignores
                            # SIGINT (colcon test does; a child inherits the ignoring)
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def run_cli(*runs, timeout=120):
    """Run each argument list of ``runs`` at once (each one a process); [(status, stdout, stderr)]."""
    processes = [start_cli(*args) for args in runs]
    results = []
    for process in processes:
        out, err = process.communicate(timeout=timeout)
        results.append((process.returncode, out, err))
    return results


def assert_refused(result, *patterns):
    """Exit 2, one line on stderr naming the reason, no traceback, nothing simulated."""
    status, out, err = result
    assert status == 2, (status, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in err, err
    for pattern in patterns:
        assert pattern in lines[0], (pattern, lines[0])
    assert "Recording data" not in out and "Generating" not in out, out


def test_sizes_and_bad_options_exit_2_before_any_work(tmp_path):
    sizes, rate, options = run_cli(
        # 1e9 s would take thousands of TiB; 1e7 Hz, simulated with 0.1 us steps, about 20 GiB
        [NOMINAL, "--duration", "1e9", "--output-dir", tmp_path],
        [NOMINAL, "--sample-rate", "1e7", "--output-dir", tmp_path],
        [NOMINAL, "--coulomb-smoothing", "nan", "--seed", "-1", "--output-dir", tmp_path])
    assert_refused(sizes, "1e+09 s at 1000 Hz (1e+12 samples of 7 joints, 31 parameters) needs about",
                   "TiB of memory to identify; this machine has", "shorten --duration")
    assert_refused(rate, "1.5e+08 samples", "of memory to identify", "lower --sample-rate")
    assert_refused(options, "--coulomb-smoothing must be a finite number >= 0, got nan",
                   "--seed must be an integer >= 0, got -1")


@pytest.mark.parametrize("args, pattern", [
    (["--sample-rate", "1e7", "--source", "ideal"], "GiB of memory to identify"),
    (["--duration", "0"], "--duration must be a finite number > 0, got 0"),
    (["--duration", "inf"], "--duration must be a finite number > 0, got inf"),
    (["--sample-rate", "-5"], "--sample-rate must be a finite number > 0, got -5"),
    (["--max-velocity", "nan"], "--max-velocity must be a finite number > 0, got nan"),
    (["--excitation-time-limit", "0"], "--excitation-time-limit must be a finite number > 0"),
    (["--cutoff", "0"], "--cutoff must be a finite number > 0"),
    (["--cutoff", "500"], "--cutoff 500 Hz must be below half the sample rate (500 Hz)"),
    (["--noise-scale=-1"], "--noise-scale must be a finite number >= 0, got -1"),
])
def test_every_numeric_option_is_checked(tmp_path, capsys, args, pattern):
    status = main([NOMINAL, "--output-dir", str(tmp_path)] + args)
    captured = capsys.readouterr()
    assert_refused((status, captured.out, captured.err), pattern)


def test_the_memory_estimate_bounds_what_an_identification_takes(tmp_path, monkeypatch):
    import tracemalloc
    from sysid_core import cli
    from sysid_core.dynamics.friction import JointModel
    from sysid_core.dynamics.model import load_robot
    from sysid_core.identification.identify import IdentificationConfig
    robot = load_robot(NOMINAL)
    config = IdentificationConfig(scope="full", joint_model=JointModel(("coulomb", "viscous"), 0.0))
    # oracle: the peak of what Python and NumPy allocate for a full-scope run of 8 s at 1 kHz
    tracemalloc.start()
    cli.main([NOMINAL, "--duration", "8", "--scope", "full", "--source", "ideal", "--no-plots",
              "--output-dir", str(tmp_path)])
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    estimate = cli.memory_needed(robot, config, 8001)
    assert peak <= estimate <= 3 * peak
    # and a machine with less than that refuses the run up front, with the numbers
    monkeypatch.setattr(cli, "available_memory", lambda: estimate // 2)
    with pytest.raises(cli.SysidError, match=r"needs about .* MiB of memory to identify; this machine has .* MiB"):
        cli.check_size(robot, config, 8.0, 1000.0)


def test_an_output_dir_that_cannot_be_written_is_found_first(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    model = tmp_path / "updated_model.xml"
    model.write_text(Path(PLANAR).read_text())
    under_a_file, a_file, over_the_input = run_cli([PLANAR, "--output-dir", blocker / "out"],
                                                   [PLANAR, "--output-dir", blocker],
                                                   [model, "--output-dir", tmp_path])
    assert_refused(under_a_file, f"--output-dir {blocker / 'out'} cannot be written: Not a directory")
    assert_refused(a_file, f"--output-dir {blocker} is a file, not a directory")
    # an output that would replace an input: refused, the input untouched
    assert_refused(over_the_input, "writes updated_model.xml there, which is the model")
    assert model.read_text() == Path(PLANAR).read_text()


def planar_plan(scale=1.0, **derivatives):
    from sysid_core.dynamics.model import load_robot
    from sysid_core.excitation.multisine import multisine
    from sysid_core.excitation.trajectory import Trajectory
    plan = multisine(load_robot(PLANAR).joint_range, 4.0, 200.0, seed=3, max_velocity=1.0)
    fields = dict(time=plan.time, q=scale * plan.q, dq=scale * plan.dq, ddq=scale * plan.ddq)
    fields.update({k: v(fields[k]) for k, v in derivatives.items()})
    return Trajectory(**fields)


def test_a_trajectory_the_arm_cannot_play_is_refused(tmp_path, capsys):
    from sysid_core.excitation.trajectory import save_trajectory
    cases = {
        "ten_times": (planar_plan(scale=10.0), ["joint 'joint1' reaches", "outside its limits [-3.14, 3.14]",
                                                "(and 1 more joints)"]),
        "dq_doubled": (planar_plan(dq=lambda dq: 2 * dq), ["dq of joint", "is not the derivative of its q",
                                                            "200 Hz"]),
        "dq_reversed": (planar_plan(dq=lambda dq: dq[::-1]), ["dq of joint", "is not the derivative of its q"]),
        "ddq_zero": (planar_plan(ddq=lambda ddq: np.zeros_like(ddq)), ["ddq of joint",
                                                                       "is not the derivative of its dq"]),
    }
    paths = {name: save_trajectory(tmp_path / f"{name}.csv", plan, ["joint1", "joint2"])
             for name, (plan, _) in cases.items()}
    # a plan ten times too large and a doubled dq through the console script, the variants in this process
    through_script = ("ten_times", "dq_doubled")
    results = dict(zip(through_script, run_cli(*[[PLANAR, "--trajectory", paths[name], "--sample-rate", "200",
                                                   "--output-dir", tmp_path / "out"] for name in through_script])))
    for name in cases:
        if name not in results:
            status = main([PLANAR, "--trajectory", str(paths[name]), "--sample-rate", "200",
                           "--output-dir", str(tmp_path / "out")])
            captured = capsys.readouterr()
            results[name] = (status, captured.out, captured.err)
    for name, (_, patterns) in cases.items():
        assert_refused(results[name], f"--trajectory {paths[name]}", *patterns)
        assert "Replaying" not in results[name][1]
    # the same trajectory unchanged is replayed
    good = save_trajectory(tmp_path / "good.json", planar_plan(), ["joint1", "joint2"])
    assert main([PLANAR, "--trajectory", str(good), "--sample-rate", "200", "--source", "ideal", "--no-plots",
                 "--output-dir", str(tmp_path / "out")]) == 0
    assert "Replaying" in capsys.readouterr().out


def test_a_failed_run_leaves_no_file_of_a_previous_run(tmp_path, capsys):
    out = tmp_path / "out"
    assert main([PLANAR, "--duration", "3", "--source", "ideal", "--export-damiao", "--motor-type", "DM4310",
                 "--motor-type", "DM4310", "--output-dir", str(out)]) == 0
    written = {p.name for p in out.iterdir()}
    assert written == {"params.json", "updated_model.xml", "damiao_trajectory.csv", "torque_fit.png",
                       "residuals.png", "parameters.png", "report.html"}
    previous = (out / "params.json").read_text()
    # a run that fails before writing anything leaves the previous run whole
    assert main([PLANAR, "--seed", "-2", "--output-dir", str(out)]) == 2
    assert {p.name for p in out.iterdir()} == written and (out / "params.json").read_text() == previous
    # a run that writes and then fails (the arm barely moves: verdict failed, no updated
    # model): only its own params.json, nothing of the first run
    capsys.readouterr()
    (status, stdout, err), = run_cli([PLANAR, "--duration", "3", "--source", "sim", "--max-velocity", "1e-9",
                                      "--no-plots", "--output-dir", out])
    assert status == 3, (stdout, err)
    assert {p.name for p in out.iterdir()} == {"params.json", "report.html"}
    assert json.loads((out / "params.json").read_text())["source"] == "sim"


def test_ctrl_c_prints_one_line_and_exits_130(tmp_path):
    process = start_cli(NOMINAL, "--duration", "60", "--output-dir", tmp_path)
    for line in process.stdout:                # interrupt it in the middle of the simulation
        if "identification run:" in line:
            break
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 130, (out, err)
    assert err.strip().splitlines() == ["sysid-identify: interrupted"]
    assert not list(tmp_path.iterdir())        # nothing written


def test_cli_friction_from_bad_file_is_refused_before_any_work(tmp_path, capsys):
    """--friction-from: a file that is missing, not JSON, or where this run would clear it."""
    out = tmp_path / "out"
    assert main([NOMINAL, "--friction-from", str(tmp_path / "none.json"), "--output-dir", str(out)]) == 2
    assert "none.json: cannot be read" in capsys.readouterr().err
    garbled = tmp_path / "garbled.json"
    garbled.write_text("{not json")
    assert main([NOMINAL, "--friction-from", str(garbled), "--output-dir", str(out)]) == 2
    assert "not a JSON file" in capsys.readouterr().err
    # a sweep's file in the output directory would be cleared with the previous run's outputs
    out.mkdir(exist_ok=True)
    (out / "friction_sweep.json").write_text("{}")
    assert main([NOMINAL, "--friction-from", str(out / "friction_sweep.json"), "--output-dir", str(out)]) == 2
    assert "which is --friction-from it reads" in capsys.readouterr().err
    assert (out / "friction_sweep.json").read_text() == "{}"
    assert not (out / "params.json").exists()
