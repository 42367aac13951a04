"""Excite a simulated arm and identify it: trajectory_publisher -> mujoco_sim -> identifier.

    ros2 launch sysid_ros sim_identify.launch.py
    ros2 launch sysid_ros sim_identify.launch.py model:=/path/arm.xml truth_model:=/path/arm_payload.xml \
        config:=/path/params.yaml output_dir:=/tmp/sysid realtime:=false auto_identify:=true

``model`` is the arm as you believe it is (used for feed-forward and identification),
``truth_model`` the arm that is simulated (e.g. with the real payload). With
``realtime:=false`` the simulator runs as fast as it can and publishes /clock; every node
then follows simulated time. With ``auto_identify:=true`` the identifier runs as soon as
the excitation is done and logs the result table.
"""
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution, PythonExpression
from launch_ros.actions import Node
from launch_ros.substitutions import FindPackageShare


def generate_launch_description():
    share = FindPackageShare("sysid_ros")
    model = LaunchConfiguration("model")
    truth_model = LaunchConfiguration("truth_model")
    config = LaunchConfiguration("config")
    output_dir = LaunchConfiguration("output_dir")
    realtime = LaunchConfiguration("realtime")
    auto_identify = LaunchConfiguration("auto_identify")
    # nodes follow /clock when the simulator does not run in real time
    use_sim_time = PythonExpression(["'", realtime, "'.lower() not in ('true', '1')"])
    identify_on_done = PythonExpression(["'", auto_identify, "'.lower() in ('true', '1')"])

    return LaunchDescription([
        DeclareLaunchArgument("model", default_value=PathJoinSubstitution(
            [share, "config", "robots", "openarm_class.xml"]), description="nominal MJCF (identification)"),
        DeclareLaunchArgument("truth_model", default_value=PathJoinSubstitution(
            [share, "config", "robots", "openarm_class_payload.xml"]), description="simulated MJCF"),
        DeclareLaunchArgument("config", default_value=PathJoinSubstitution(
            [share, "config", "openarm_class.yaml"]), description="parameter file of the three nodes"),
        DeclareLaunchArgument("output_dir", default_value="sysid_output", description="params.json etc."),
        DeclareLaunchArgument("realtime", default_value="true", description="false: as fast as possible"),
        DeclareLaunchArgument("auto_identify", default_value="true", description="identify when done"),
        Node(package="sysid_ros", executable="mujoco_sim", name="mujoco_sim", output="screen",
             parameters=[config, {"model": truth_model, "realtime": PythonExpression(["not ", use_sim_time])}]),
        Node(package="sysid_ros", executable="trajectory_publisher", name="trajectory_publisher", output="screen",
             parameters=[config, {"model": model, "use_sim_time": use_sim_time}]),
        Node(package="sysid_ros", executable="identifier", name="identifier", output="screen",
             parameters=[config, {"model": model, "output_dir": output_dir, "use_sim_time": use_sim_time,
                                  "identify_on_done": identify_on_done}]),
    ])
