"""sysid_ros: the ROS 2 (rclpy) nodes around sysid_core: trajectory_publisher, mujoco_sim, identifier,
damiao_bridge, and sim_identify, which runs them in one process."""
