"""Thin rclpy adapters over the ROS-free core (one Node subclass per executable) and manip-sim.

Modules
-------
ros_params      ROS parameter specs (descriptors) and ROS <-> core dict conversion
messages        message <-> float conversion at the edge (joint matching by name)
common          shared node plumbing: executor choice, main() wrapper, QoS, guarded callbacks
plant_node      the simulated arm (publishes /joint_states, /motor_states, /clock in lockstep)
controller_node the feedback controller (computes /joint_commands, /effort_controller/commands)
trajectory_node the reference generator (/reference; validated goals on ~/goal)
recorder_node   rosbag2 recorder (raw CDR bytes, MCAP or sqlite3, params.yaml)
sim             manip-sim: the nodes in one process, a scenario for --duration, a summary
"""
