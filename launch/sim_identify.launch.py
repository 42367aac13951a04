"""Excite a simulated arm and identify it: trajectory_publisher -> mujoco_sim -> identifier.

    ros2 launch sysid_ros sim_identify.launch.py
    ros2 launch sysid_ros sim_identify.launch.py realtime:=false exit_when_done:=true
    ros2 launch sysid_ros sim_identify.launch.py model:=/path/arm.xml truth_model:=/path/arm_payload.xml \
        config:=/path/params.yaml output_dir:=/tmp/sysid namespace:=robot1

``model`` is the arm as you believe it is (used for feed-forward and identification),
``truth_model`` the arm that is simulated (e.g. with the real payload); the identifier
compares its result with it. With ``realtime:=false`` the simulator runs as fast as it can
(the excitation sent ahead as a preview, the samples in state blocks), with ``realtime:=true``
at most at the wall clock's pace (a JointState per period, as the arm it stands in for); in
both it publishes the clock, which the trajectory_publisher follows. The nodes get the
parameters ``sysid-sim-identify`` gives them (``sysid_ros.sim_identify.graph_parameters``) over
the parameter file. With ``auto_identify:=true``
the identifier runs as soon as the excitation is done (the simulator then pauses) and logs
the result table; ``exit_when_done:=true`` then ends the launch: exit status 0 when
updated_model.xml was written, 1 (with the identifier's reason in the log) when not.

Every name is relative to ``namespace``, the clock included (``/clock`` is remapped to
``<namespace>/clock``), so graphs under two namespaces identify two arms side by side.
"""
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction, RegisterEventHandler, Shutdown
from launch.event_handlers import OnProcessExit
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.substitutions import FindPackageShare

from sysid_ros.sim_graph import graph_parameters

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


def _nodes(context):
    """The three nodes, their parameters resolved now that the arguments are known."""
    arg = {name: LaunchConfiguration(name).perform(context) for name in ARGUMENTS}
    truthy = {name: arg[name].lower() in ("true", "1") for name in ("realtime", "auto_identify", "exit_when_done")}
    parameters = graph_parameters(arg["model"], arg["truth_model"], arg["output_dir"], truthy["realtime"])
    parameters["identifier"].update(identify_on_done=truthy["auto_identify"], exit_when_done=truthy["exit_when_done"])
    common = dict(package="sysid_ros", namespace=arg["namespace"], output="screen", remappings=[("/clock", "clock")])
    nodes = {name: Node(executable=name, name=name, **common, parameters=[arg["config"], parameters[name]])
             for name in ("mujoco_sim", "trajectory_publisher", "identifier")}
    actions = list(nodes.values())
    if truthy["exit_when_done"]:
        actions.append(RegisterEventHandler(OnProcessExit(target_action=nodes["identifier"],
                                                          on_exit=_identification_ended)))
    return actions


def generate_launch_description():
    share = FindPackageShare("sysid_ros")
    declared = [DeclareLaunchArgument(name, description=text, default_value=(
                    PathJoinSubstitution([share, default]) if name in SHARED else default))
                for name, (default, text) in ARGUMENTS.items()]
    return LaunchDescription(declared + [OpaqueFunction(function=_nodes)])
