"""sysid_ros: ROS 2 (rclpy) nodes around sysid_core (the nodes are added in the next issue)."""
