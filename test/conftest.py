"""Shared fixtures: paths of the bundled and test models; an isolated ROS 2 domain; MuJoCo's
gravity torque, an oracle independent of the regressor."""
import contextlib
import gc
import logging
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import mujoco
import numpy as np
import pytest

# Tests that start ROS 2 nodes must not hear other runs on this machine: one DDS domain per
# test session (valid ids 0-101 on Linux with default ports), discovery kept on localhost.
# Set before any test imports rclpy.
os.environ["ROS_DOMAIN_ID"] = str(1 + os.getpid() % 100)
os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"

ROOT = Path(__file__).resolve().parents[1]
ROBOTS = ROOT / "config" / "robots"
MODELS = Path(__file__).resolve().parent / "models"
BUNDLED = sorted(ROBOTS.glob("*.xml"))


def console_script(name: str) -> Path:
    """The installed console script ``name``: beside the interpreter in a venv (pip), else on
    PATH, else in ``<prefix>/lib/sysid_ros`` of a colcon workspace (where ``ros2 run`` finds it)."""
    candidates = [Path(sys.executable).with_name(name)]
    found = shutil.which(name)
    if found:
        candidates.append(Path(found))
    prefixes = os.environ.get("AMENT_PREFIX_PATH", "") + os.pathsep + os.environ.get("COLCON_PREFIX_PATH", "")
    candidates += [Path(p) / "lib" / "sysid_ros" / name for p in prefixes.split(os.pathsep) if p]
    for path in candidates:
        if path.is_file():
            return path
    raise FileNotFoundError(f"console script {name} not found in {[str(c) for c in candidates]}: install the package")


def source_environment() -> dict:
    """The environment of a child process that imports the tree under test first, with the rest
    of PYTHONPATH kept (in a colcon workspace it holds the installed package's metadata)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))}


def run_python(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
    """``python *args`` in a process of its own, from the repository root with the package
    importable; stdout and stderr captured as text."""
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env=source_environment())


def start_node(module: str, *ros_args: str) -> subprocess.Popen:
    """``python -m sysid_ros.<module> --ros-args *ros_args`` in a process of its own, as ``ros2
    run`` starts a node, from the repository root with the package importable; stdout and
    stderr merged, as text."""
    return subprocess.Popen([sys.executable, "-m", f"sysid_ros.{module}", "--ros-args", *ros_args], cwd=ROOT,
                            env=source_environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def interrupt(process: subprocess.Popen, timeout: float = 30.0) -> int:
    """Ctrl-C ``process``; its exit status (killed when it has not ended within ``timeout`` s)."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()


@contextlib.contextmanager
def emulator_answers_in_time():
    """While inside: the emulated Damiao motors, which answer from a thread of this process, get
    to run within a bridge's cycle, as sim_identify arranges it: the GIL handed over every 0.5 ms,
    and no full garbage collection over the whole test session's objects (tens of milliseconds,
    every thread stopped)."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
        sys.setswitchinterval(interval)


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="module")
def context():
    """An rclpy context of its own for one test module's nodes (rclpy imported only when asked for)."""
    import rclpy
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    yield ctx
    rclpy.shutdown(context=ctx)


@pytest.fixture
def log_of(caplog):
    """``with log_of(name, level):`` captures logger ``name``'s records into ``caplog``.

    pytest's handler is put on that logger itself, which stops propagating meanwhile: in a ROS
    workspace ``launch`` (imported by launch_testing's pytest plugin) installs a logger class
    whose loggers never propagate to the root logger, where caplog listens by default.
    """
    @contextlib.contextmanager
    def capture(name: str, level: int):
        logger = logging.getLogger(name)
        propagate = logger.propagate
        with caplog.at_level(level, logger=name):
            logger.addHandler(caplog.handler)
            logger.propagate = False
            try:
                yield caplog
            finally:
                logger.removeHandler(caplog.handler)
                logger.propagate = propagate
    return capture


def inverse_dynamics_mujoco(model: mujoco.MjModel, q, dq, ddq) -> np.ndarray:
    """Joint torques (N, n) from mj_inverse, sample by sample: an oracle independent of the regressor."""
    data = mujoco.MjData(model)
    out = np.empty_like(q)
    for i in range(q.shape[0]):
        data.qpos[:], data.qvel[:], data.qacc[:] = q[i], dq[i], ddq[i]
        mujoco.mj_inverse(model, data)
        out[i] = data.qfrc_inverse
    return out


def gravity_mujoco(model: mujoco.MjModel, q: np.ndarray) -> np.ndarray:
    """g(q) (N, n) from MuJoCo's RNE at rest: an oracle independent of the regressor."""
    data = mujoco.MjData(model)
    out = np.empty_like(q)
    for i, qi in enumerate(q):
        data.qpos[:], data.qvel[:] = qi, 0.0
        mujoco.mj_kinematics(model, data)
        mujoco.mj_comPos(model, data)
        mujoco.mj_rne(model, data, 0, out[i])
    return out
