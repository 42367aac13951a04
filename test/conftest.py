"""Shared fixtures: paths of the bundled and test models; an isolated ROS 2 domain."""
import contextlib
import logging
import os
import subprocess
import sys
from pathlib import Path

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


def run_python(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
    """``python *args`` in a process of its own, from the repository root with the package
    importable; stdout and stderr captured as text."""
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


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
