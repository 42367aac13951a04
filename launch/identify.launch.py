"""The identifier alone, for a robot that already publishes joint_states with effort.

    ros2 launch sysid_ros identify.launch.py model:=/path/arm.xml config:=/path/params.yaml
    ros2 service call /sysid/identify std_srvs/srv/Trigger

Remap the input with ``joint_states:=/my_robot/joint_states``; ``namespace:=robot1`` moves the
node, its services (``/robot1/sysid/identify``) and its default input (``/robot1/joint_states``).
Effort semantics (joint torque, motor current, gravity-compensated torque) are parameters in
the config.
"""
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.substitutions import FindPackageShare


def generate_launch_description():
    share = FindPackageShare("sysid_ros")
    return LaunchDescription([
        DeclareLaunchArgument("model", description="nominal MJCF of the arm (required)"),
        DeclareLaunchArgument("config", default_value=PathJoinSubstitution(
            [share, "config", "openarm_class.yaml"]), description="parameter file (its identifier section)"),
        DeclareLaunchArgument("output_dir", default_value="sysid_output",
                              description="directory of params.json, updated_model.xml and the figures"),
        DeclareLaunchArgument("joint_states", default_value="joint_states",
                              description="input topic (relative names resolve in the namespace)"),
        DeclareLaunchArgument("namespace", default_value="", description="namespace of the node"),
        DeclareLaunchArgument("use_sim_time", default_value="false",
                              description="true: the node clock follows /clock (only unstamped messages need it)"),
        Node(package="sysid_ros", executable="identifier", name="identifier", output="screen",
             namespace=LaunchConfiguration("namespace"),
             parameters=[LaunchConfiguration("config"), {
                 "model": LaunchConfiguration("model"),
                 "output_dir": LaunchConfiguration("output_dir"),
                 "use_sim_time": LaunchConfiguration("use_sim_time")}],
             remappings=[("joint_states", LaunchConfiguration("joint_states"))]),
    ])
