"""Identify a real arm of Damiao motors: damiao_bridge -> trajectory_publisher -> identifier.

    ros2 launch sysid_ros damiao_identify.launch.py                 # first run: 20 % amplitude, 0.3 rad/s
    ros2 launch sysid_ros damiao_identify.launch.py model:=/path/arm.xml config:=/path/damiao_arm.yaml \
        can_channel:=can1 output_dir:=/tmp/sysid amplitude_fraction:=0.8 max_velocity:=1.0
    ros2 service call /sysid/start std_srvs/srv/Trigger      # the excitation starts only on request

``model`` is the arm as you believe it is: the excitation's feed-forward and the
identification use it. ``config`` holds the bus layout, gains and limits of every motor
(config/damiao_arm.yaml: an OpenArm-class arm, 8 motors). The bridge enables the motors at
start and disables them when it stops (Ctrl-C). Emergency stop from another terminal:
``ros2 service call /sysid/damiao/disable std_srvs/srv/Trigger``. With
``auto_identify:=true`` (default) the identifier runs when the excitation is done.
``namespace:=arm1`` moves the three nodes and their names (``/arm1/sysid/start``, ...).
``effort_gains_file:=effort_gains.json`` (from ``sysid-calibrate-effort``) makes the published
efforts true joint torques; ``ros2 service call /sysid/damiao/save_commands std_srvs/srv/Trigger``
saves the commands sent into ``output_dir``.
"""
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution, PythonExpression
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue
from launch_ros.substitutions import FindPackageShare


def generate_launch_description():
    share = FindPackageShare("sysid_ros")
    model = LaunchConfiguration("model")
    config = LaunchConfiguration("config")
    auto_identify = PythonExpression(["'", LaunchConfiguration("auto_identify"), "'.lower() in ('true', '1')"])
    namespace = LaunchConfiguration("namespace")

    return LaunchDescription([
        DeclareLaunchArgument("model", default_value=PathJoinSubstitution(
            [share, "config", "robots", "openarm_class.xml"]), description="nominal MJCF of the arm"),
        DeclareLaunchArgument("config", default_value=PathJoinSubstitution(
            [share, "config", "damiao_arm.yaml"]), description="bus layout, gains, limits, node parameters"),
        DeclareLaunchArgument("can_channel", default_value="can0", description="CAN interface of the arm"),
        DeclareLaunchArgument("output_dir", default_value="sysid_output",
                              description="directory of params.json, updated_model.xml and the figures"),
        DeclareLaunchArgument("auto_identify", default_value="true",
                              description="identify as soon as the excitation is done"),
        DeclareLaunchArgument("namespace", default_value="", description="namespace of the three nodes"),
        # cautious defaults for a first run; the identification run wants 0.8 and 1.0
        DeclareLaunchArgument("amplitude_fraction", default_value="0.2",
                              description="share of each joint's half-range the excitation sweeps"),
        DeclareLaunchArgument("max_velocity", default_value="0.3", description="rad/s, excitation and approach"),
        DeclareLaunchArgument("effort_gains_file", default_value="",
                              description="effort gain JSON of sysid-calibrate-effort (empty: reported efforts)"),
        Node(package="sysid_ros", executable="damiao_bridge", name="damiao_bridge", output="screen",
             namespace=namespace,
             parameters=[config, {"can_channel": LaunchConfiguration("can_channel"),
                                  "effort_gains_file": LaunchConfiguration("effort_gains_file"),
                                  "command_log_dir": LaunchConfiguration("output_dir")}]),
        Node(package="sysid_ros", executable="trajectory_publisher", name="trajectory_publisher", output="screen",
             namespace=namespace,
             parameters=[config, {"model": model,
                                  "amplitude_fraction": ParameterValue(LaunchConfiguration("amplitude_fraction"),
                                                                       value_type=float),
                                  "max_velocity": ParameterValue(LaunchConfiguration("max_velocity"),
                                                                 value_type=float)}]),
        Node(package="sysid_ros", executable="identifier", name="identifier", output="screen",
             namespace=namespace,
             parameters=[config, {"model": model, "output_dir": LaunchConfiguration("output_dir"),
                                  "identify_on_done": auto_identify}]),
    ])
