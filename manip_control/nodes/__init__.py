# Copyright 2026 manip_control contributors
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

"""
Thin rclpy adapters over the ROS-free core (one Node subclass per executable) and manip-sim.

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
