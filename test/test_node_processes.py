"""The sim_identify graph as a user runs it: the three node executables in processes of their own.

No launch needed: each node is started like ``ros2 run`` starts it, with ``--ros-args``, under
a namespace (so every name must be relative, the clock remapped), with the parameters the launch
file gives them (``sysid_ros.sim_graph.graph_parameters``). As fast as possible, the run goes to
the simulator as a preview and the states come back in blocks. In real time, the simulator
publishes its 1 kHz states in bursts of 20 every 20 ms, the arrival pattern a loaded machine
gives a subscriber (it wakes to many queued messages at once): rclpy's multi-threaded executor
keeps a small share of such a stream. The trajectory_publisher
follows the simulated clock, as in the launch file, and the simulator may run a burst ahead of
its newest command: a loaded machine slows the run down but never cuts the excitation short. Every published state must be
recorded, the model written, and the graph must end by itself (exit_when_done) and cleanly.
"""
import json
import re
import signal
import subprocess
import sys
import threading
import time

import mujoco
import numpy as np
import pytest

from conftest import ROBOTS, ROOT
from sysid_ros.sim_graph import graph_parameters

NAMESPACE = "/sysid_processes"
CONFIG = ROOT / "config" / "openarm_class.yaml"
BURST = 20  # samples per simulator callback, one callback every BURST ms
TIMEOUT_S = 240.0  # a guard against hangs, not a speed target


class Process:
    """A node executable with its merged stdout/stderr collected in a thread."""

    def __init__(self, module: str, *ros_args: str):
        # the launch file's parameter file; -p overrides it
        command = [sys.executable, "-m", f"sysid_ros.{module}", "--ros-args", "-r", f"__ns:={NAMESPACE}",
                   "-r", "/clock:=clock", "--params-file", str(CONFIG), *ros_args]
        self.popen = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines = []
        self._reader = threading.Thread(target=lambda: self.lines.extend(self.popen.stdout), daemon=True)
        self._reader.start()

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def interrupt(self) -> int:
        """Ctrl-C; the exit status (the process is killed if it does not end within 30 s)."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGINT)
        try:
            return self.popen.wait(timeout=30.0)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            return self.popen.wait()
        finally:
            self._reader.join(timeout=5.0)


def _parameters(**values) -> list:
    return [arg for name, value in values.items()
            for arg in ("-p", f"{name}:={str(value).lower() if isinstance(value, bool) else value}")]


@pytest.mark.parametrize("realtime", [False, True])
def test_three_processes_record_every_published_state_and_end_by_themselves(tmp_path, realtime):
    nominal, truth = ROBOTS / "openarm_class.xml", ROBOTS / "openarm_class_payload.xml"
    parameters = graph_parameters(nominal, truth, tmp_path, realtime)
    parameters["identifier"].update(identify_on_done=True, exit_when_done=True, plots=False)
    parameters["trajectory_publisher"]["duration"] = 8.0
    if realtime:
        parameters["mujoco_sim"].update(steps_per_callback=BURST, command_lead_s=(BURST + 5) * 1e-3)
    processes = {node: Process(node, *_parameters(**values)) for node, values in parameters.items()}
    try:
        identifier = processes["identifier"].popen
        deadline = time.monotonic() + TIMEOUT_S
        while identifier.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert identifier.poll() is not None, "the identifier did not end by itself"
    finally:
        status = {name: process.interrupt() for name, process in processes.items()}
    output = {name: process.output for name, process in processes.items()}
    everything = "\n".join(output.values())
    assert status == {"identifier": 0, "trajectory_publisher": 0, "mujoco_sim": 0}, everything

    published = [int(n) for n in re.findall(r"after publishing (\d+) joint states", output["mujoco_sim"])]
    summary = json.loads(re.search(r"identify_on_done: (\{.*\})", output["identifier"]).group(1))
    assert len(published) == 1 and published[0] > 8 * 1000, output["mujoco_sim"]
    assert summary["recorded_samples"] == summary["received_samples"] == published[0], everything
    assert summary["missing_samples"] == 0 and summary["rejected_samples"] == 0

    written = tmp_path / "updated_model.xml"
    assert summary["updated_model"] == str(written)
    model = mujoco.MjModel.from_xml_path(str(written))
    payload = model.body("link7").id
    assert summary["verdict"] != "failed", summary
    assert abs(summary["truth"]["mass_error_percent"]) < 3.0 and summary["truth"]["com_error_mm"] < 5.0, summary
    assert np.isfinite(model.body_mass[payload])
    # clean ends: no traceback, no never-retrieved rclpy exception, no rosout complaint
    for name, text in output.items():
        for stray in ("Traceback", "never retrieved", "Failed to publish log message", "Destroyable"):
            assert stray not in text, f"{name}: {text}"
