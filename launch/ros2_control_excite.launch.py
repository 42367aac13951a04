"""Excite a ros2_control arm through a forward_command_controller (or a joint_trajectory_controller).

    ros2 launch sysid_ros ros2_control_excite.launch.py                      # positions, model from /robot_description
    ros2 launch sysid_ros ros2_control_excite.launch.py model:=/path/arm.urdf output:=joint_trajectory
    ros2 service call /sysid/start std_srvs/srv/Trigger                     # the config does not autostart
    ros2 service call /sysid/stop std_srvs/srv/Trigger                      # stop and hold the measured pose

Only trajectory_publisher runs: record with ``ros2 bag record /joint_states`` meanwhile and identify
offline (``sysid-identify``), or start identify.launch.py beside it. The controller must be
active before ``sysid/start``; the node refuses to start while nothing subscribes to its commands.
Joint order, effort gains and the excitation are in the parameter file (``config``).
"""
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.substitutions import FindPackageShare


def generate_launch_description():
    share = FindPackageShare("sysid_ros")
    return LaunchDescription([
        DeclareLaunchArgument("model", default_value="", description=(
            "nominal model of the arm (URDF or MJCF file); empty: the URDF robot_state_publisher publishes "
            "on robot_description")),
        DeclareLaunchArgument("output", default_value="forward_position", description=(
            "forward_position (Float64MultiArray of positions on <controller>/commands), forward_effort "
            "(of torques: feed-forward and a PD on joint_states; set effort_kp/effort_kd in the config), "
            "joint_trajectory (one JointTrajectory on <controller>/joint_trajectory)")),
        DeclareLaunchArgument("controller", default_value="", description=(
            "name of the controller; empty: forward_position_controller, forward_effort_controller or "
            "joint_trajectory_controller as output says")),
        DeclareLaunchArgument("config", default_value=PathJoinSubstitution(
            [share, "config", "ros2_control_arm.yaml"]), description=(
            "trajectory_publisher's parameter file (excitation, controller_joints, effort gains)")),
        DeclareLaunchArgument("use_sim_time", default_value="false", description=(
            "true: follow /clock (a simulated ros2_control arm)")),
        Node(package="sysid_ros", executable="trajectory_publisher", name="trajectory_publisher", output="screen",
             parameters=[LaunchConfiguration("config"), {
                 "model": LaunchConfiguration("model"),
                 "output": LaunchConfiguration("output"),
                 "controller": LaunchConfiguration("controller"),
                 "use_sim_time": LaunchConfiguration("use_sim_time")}]),
    ])
