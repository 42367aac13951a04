"""The simulated graph's own parameters, shared by ``sysid-sim-identify`` and sim_identify.launch.py.

Light on purpose (no rclpy, no MuJoCo): the launch file imports it.
"""

# as fast as possible: periods per state block (a message per period costs several MuJoCo steps)
STATE_BLOCK = 20
# real time: periods per wall-timer call, so a loaded machine keeps up with 1 kHz
REALTIME_BURST = 5


def graph_parameters(model, truth_model, output_dir, realtime: bool) -> dict:
    """Per node, the parameters the MuJoCo graph sets over the parameter file, as
    launch/sim_identify.launch.py sets them: the trajectory_publisher follows the simulator's
    clock (so the simulator waits for commands it would otherwise overtake, in real time too) and
    sends its run ahead as a preview; as fast as possible, the samples travel in state blocks of
    STATE_BLOCK periods (real time keeps a JointState per period, as the arm it stands in for).
    The simulation starts once the other two listen, so no sample is missed."""
    blocks = not realtime
    return {
        "mujoco_sim": {"model": str(truth_model), "realtime": realtime, "wait_for_subscribers": 2,
                       "steps_per_callback": REALTIME_BURST if realtime else STATE_BLOCK, "state_blocks": blocks},
        "trajectory_publisher": {"model": str(model), "use_sim_time": True},
        # the identifier needs no clock: the samples carry their stamps
        "identifier": {"model": str(model), "truth_model": str(truth_model), "output_dir": str(output_dir),
                       "simulated_physics": True, "state_blocks": blocks},
    }
