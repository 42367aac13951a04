"""The model at work beside the simulated arm: sim_identify.launch.py's three nodes plus model_monitor.

    ros2 launch sysid_ros monitor.launch.py
    ros2 launch sysid_ros monitor.launch.py output_dir:=/tmp/sysid namespace:=robot1
    ros2 launch sysid_ros monitor.launch.py params:=/path/params.json auto_identify:=false

mujoco_sim, trajectory_publisher and identifier run as sim_identify.launch.py runs them (every
argument of it is taken here and passed on), and model_monitor watches the same joint states. It
starts on the nominal ``model`` (contact and drift are not judged: a model file carries no
validation figure) and, once the identifier publishes its result, monitors with the identified
model in ``output_dir``/params.json: predicted and external torque, contact, the running RMSE
against the validation's, the payload tracked live. ``params`` names an earlier identification to
monitor with from the start instead. ``ros2 service call sysid/start std_srvs/srv/Trigger`` plays
the excitation again under the identified model's watch. Keep ``realtime`` true (the default) to
watch the arm as it would run: a simulation many times faster than real time outruns the
monitor, which then works through its queue after the excitation.
"""
import importlib.util
from pathlib import Path

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, IncludeLaunchDescription, OpaqueFunction
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.substitutions import FindPackageShare

SIM_IDENTIFY = Path(__file__).resolve().with_name("sim_identify.launch.py")
_spec = importlib.util.spec_from_file_location("sim_identify_launch", SIM_IDENTIFY)
sim_identify = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sim_identify)

ARGUMENTS = {
    **sim_identify.ARGUMENTS,
    "params": ("", "params.json to monitor with (default: the identifier's, <output_dir>/params.json, once written)"),
    "track_payload": ("true", "track the terminal body's payload live"),
}


def _monitor(context):
    arg = {name: LaunchConfiguration(name).perform(context) for name in ARGUMENTS}
    realtime = arg["realtime"].lower() in ("true", "1")
    parameters = {"params": arg["params"] or str(Path(arg["output_dir"]) / "params.json"), "model": arg["model"],
                  # as fast as possible the simulator sends state blocks, in real time a JointState per period
                  "state_blocks": not realtime, "track_payload": arg["track_payload"].lower() in ("true", "1")}
    return [Node(package="sysid_ros", executable="model_monitor", name="model_monitor", namespace=arg["namespace"],
                 output="screen", remappings=[("/clock", "clock")], parameters=[parameters])]


def generate_launch_description():
    share = FindPackageShare("sysid_ros")
    declared = [DeclareLaunchArgument(name, description=text, default_value=(
                    PathJoinSubstitution([share, default]) if name in sim_identify.SHARED else default))
                for name, (default, text) in ARGUMENTS.items()]
    graph = IncludeLaunchDescription(PythonLaunchDescriptionSource(str(SIM_IDENTIFY)), launch_arguments={
        name: LaunchConfiguration(name) for name in sim_identify.ARGUMENTS}.items())
    return LaunchDescription(declared + [graph, OpaqueFunction(function=_monitor)])
