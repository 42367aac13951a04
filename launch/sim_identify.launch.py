"""Excite a simulated arm and identify it: trajectory_publisher -> mujoco_sim -> identifier.

    ros2 launch sysid_ros sim_identify.launch.py
    ros2 launch sysid_ros sim_identify.launch.py realtime:=false exit_when_done:=true
    ros2 launch sysid_ros sim_identify.launch.py model:=/path/arm.xml truth_model:=/path/arm_payload.xml \
        config:=/path/params.yaml output_dir:=/tmp/sysid namespace:=robot1

``model`` is the arm as you believe it is (used for feed-forward and identification),
``truth_model`` the arm that is simulated (e.g. with the real payload); the identifier
compares its result with it. With ``realtime:=false`` the simulator runs as fast as it can
and publishes the clock, which the trajectory_publisher follows. With ``auto_identify:=true``
the identifier runs as soon as the excitation is done (the simulator then pauses) and logs
the result table; ``exit_when_done:=true`` then ends the launch: exit status 0 when
updated_model.xml was written, 1 (with the identifier's reason in the log) when not.

Every name is relative to ``namespace``, the clock included (``/clock`` is remapped to
``<namespace>/clock``), so graphs under two namespaces identify two arms side by side.
"""
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, RegisterEventHandler, Shutdown
from launch.conditions import IfCondition
from launch.event_handlers import OnProcessExit
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution, PythonExpression
from launch_ros.actions import Node
from launch_ros.substitutions import FindPackageShare

ARGUMENTS = {  # name: (default, description); a default of None makes the argument required
    "model": ("config/robots/openarm_class.xml", "nominal MJCF of the arm: feed-forward and identification"),
    "truth_model": ("config/robots/openarm_class_payload.xml",
                    "MJCF that is simulated (the real arm, e.g. with its payload); the result is compared with it"),
    "config": ("config/openarm_class.yaml", "parameter file of the three nodes"),
    "output_dir": ("sysid_output", "directory of params.json, updated_model.xml and the figures"),
    "realtime": ("true", "true: simulate in real time; false: as fast as possible, the nodes follow its clock"),
    "auto_identify": ("true", "identify as soon as the excitation is done"),
    "exit_when_done": ("false", "with auto_identify: end the launch after the identification (exit status 0 "
                                "when updated_model.xml was written, 1 when not)"),
    "namespace": ("", "namespace of the three nodes, their topics, services and clock"),
}
SHARED = ("model", "truth_model", "config")  # defaults relative to the package's share directory


def _identification_ended(event, context):
    """End the launch with the identifier; a failed identification fails the launch (status 1)."""
    if event.returncode != 0 and not context.is_shutdown:  # not when Ctrl-C ended it
        raise RuntimeError(f"the identification failed (identifier exit status {event.returncode}); its log "
                           "above says why")
    return [Shutdown(reason="identification done")]


def generate_launch_description():
    share = FindPackageShare("sysid_ros")
    arg = {name: LaunchConfiguration(name) for name in ARGUMENTS}
    declared = [DeclareLaunchArgument(name, description=text, default_value=(
                    PathJoinSubstitution([share, default]) if name in SHARED else default))
                for name, (default, text) in ARGUMENTS.items()]
    is_true = (lambda value: PythonExpression(["'", value, "'.lower() in ('true', '1')"]))
    # the trajectory_publisher follows the simulated clock when the simulator does not run in
    # real time; the identifier needs no clock (the samples carry their stamps)
    use_sim_time = PythonExpression(["not ", is_true(arg["realtime"])])
    common = dict(package="sysid_ros", namespace=arg["namespace"], output="screen",
                  remappings=[("/clock", "clock")])

    identifier = Node(executable="identifier", name="identifier", **common, parameters=[arg["config"], {
        "model": arg["model"], "truth_model": arg["truth_model"], "output_dir": arg["output_dir"],
        "identify_on_done": is_true(arg["auto_identify"]), "exit_when_done": is_true(arg["exit_when_done"]),
        "simulated_physics": True}])  # the data come from MuJoCo's forward simulation
    return LaunchDescription(declared + [
        # the simulation starts once the trajectory_publisher and the identifier listen: the
        # recording misses no sample however slowly they start
        Node(executable="mujoco_sim", name="mujoco_sim", **common, parameters=[arg["config"], {
            "model": arg["truth_model"], "realtime": is_true(arg["realtime"]), "wait_for_subscribers": 2,
            # real time: 5 periods per wall-timer call, so a loaded machine keeps up with 1 kHz (the
            # other nodes live in other processes and take the bursts); as fast as possible: one
            # period per call, in step with the commands
            "steps_per_callback": PythonExpression(["5 if ", is_true(arg["realtime"]), " else 1"])}]),
        Node(executable="trajectory_publisher", name="trajectory_publisher", **common, parameters=[arg["config"], {
            "model": arg["model"], "use_sim_time": use_sim_time}]),
        identifier,
        RegisterEventHandler(OnProcessExit(target_action=identifier, on_exit=_identification_ended),
                             condition=IfCondition(arg["exit_when_done"])),
    ])
