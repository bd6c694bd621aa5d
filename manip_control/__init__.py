"""manip_control: planar 2R arm simulation and computed-torque control (ROS-free core)."""
