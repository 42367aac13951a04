"""spin_node, the main() of every node executable: Ctrl-C, SIGTERM and bad parameters.

Each case runs a small node in a process of its own that signals itself, so that the signal
handlers of rclpy and of pytest in this process are left alone.
"""
import textwrap

import pytest

from conftest import run_python

SCRIPT = textwrap.dedent("""
    import faulthandler, os, signal, sys, threading, time
    faulthandler.enable()  # a crash in native code shows every thread's stack in stderr
    faulthandler.dump_traceback_later(30, exit=True)  # a hang shows its stacks and ends
    from rclpy.node import Node
    from rclpy.parameter import Parameter
    from sysid_ros.entry_point import spin_node

    MODE = sys.argv[1]
    STOPPED_CLOCK = MODE == "stopped_clock"  # sim time with no /clock: the node's timer never fires

    class Probe(Node):
        def __init__(self):
            super().__init__("entry_point_probe", parameter_overrides=[
                Parameter("use_sim_time", value=STOPPED_CLOCK)])
            if MODE == "bad":
                raise ValueError("parameter 'joint_names' is empty")
            if MODE == "start":
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(2.0)
                print("constructor finished", flush=True)
            self.create_timer(0.05, self.stop)
            if STOPPED_CLOCK:
                print("spinning", flush=True)
                threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()

        def stop(self):
            print("spinning", flush=True)
            os.kill(os.getpid(), signal.SIGTERM if MODE == "sigterm" else signal.SIGINT)
            time.sleep(2.0)  # the signal interrupts this, or it returns and spin ends anyway

        def destroy_node(self):
            if MODE == "twice":
                os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C pressed again during the clean-up
                time.sleep(0.3)
            print("clean-up complete", flush=True)
            return super().destroy_node()

    spin_node(Probe, publishes_on_shutdown=STOPPED_CLOCK)
    print("main returned", flush=True)
""")


def run(tmp_path, mode):
    script = tmp_path / "probe.py"
    script.write_text(SCRIPT)
    return run_python(str(script), mode)


@pytest.mark.parametrize("mode", ["sigint", "sigterm"])
def test_a_signal_while_spinning_destroys_the_node_and_returns(tmp_path, mode):
    done = run(tmp_path, mode)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["spinning", "clean-up", "complete", "main", "returned"], done.stdout + done.stderr
    assert "Traceback" not in done.stderr


def test_a_node_that_publishes_on_shutdown_ends_on_ctrl_c_while_its_clock_stands_still(tmp_path):
    """trajectory_publisher on the sim time of a paused simulator: no timer of its own fires, yet
    Ctrl-C must reach Python's handler and destroy the node (its last safe command)."""
    done = run(tmp_path, "stopped_clock")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["spinning", "clean-up", "complete", "main", "returned"], done.stdout + done.stderr
    assert "Traceback" not in done.stderr


def test_a_second_ctrl_c_does_not_cut_the_clean_up_short(tmp_path):
    done = run(tmp_path, "twice")
    assert done.returncode == 0, done.stderr
    assert "clean-up complete" in done.stdout and "main returned" in done.stdout, done.stdout + done.stderr
    assert "Traceback" not in done.stderr


def test_ctrl_c_during_start_up_exits_quietly(tmp_path):
    done = run(tmp_path, "start")
    assert done.returncode == 0, done.stderr
    # the node never spins. Depending on which thread takes the signal, the constructor is
    # interrupted at once (KeyboardInterrupt) or its next rclpy call fails because rclpy's
    # signal thread shut the context down; and rclpy may destroy the half-built node when the
    # context shuts down. All of these end the same way.
    assert "spinning" not in done.stdout, done.stdout
    assert done.stdout.splitlines()[-1] == "main returned", done.stdout + done.stderr
    assert "Traceback" not in done.stderr


def test_a_rejected_configuration_exits_1_with_one_line(tmp_path):
    done = run(tmp_path, "bad")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == "error: parameter 'joint_names' is empty"
    assert "Traceback" not in done.stderr and "main returned" not in done.stdout
