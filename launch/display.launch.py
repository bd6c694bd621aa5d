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
Show the arm in RViz: robot_state_publisher (URDF) + rviz2, driven by /joint_states.

    ros2 launch manip_control display.launch.py                       # shipped URDF
    ros2 launch manip_control display.launch.py model:=/path/arm.urdf  # e.g. from manip-urdf
    ros2 launch manip_control display.launch.py use_sim_time:=true     # lockstep (/clock)

Start the simulation (or the hardware) separately; it publishes /joint_states with the joint
names of the URDF (joint1, joint2 by default).
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.actions import OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node


def _nodes(context):
    share = get_package_share_directory('manip_control')
    model = LaunchConfiguration('model').perform(context) or os.path.join(
        share, 'urdf', 'manip_2r.urdf')
    with open(model, encoding='utf-8') as fh:
        description = fh.read()
    sim_time = LaunchConfiguration('use_sim_time').perform(context).lower() == 'true'
    rviz_config = os.path.join(share, 'rviz', 'manip_2r.rviz')
    rviz_args = ['-d', rviz_config] if os.path.isfile(rviz_config) else []
    return [
        Node(package='robot_state_publisher', executable='robot_state_publisher',
             parameters=[{'robot_description': description, 'use_sim_time': sim_time}],
             output='screen'),
        Node(package='rviz2', executable='rviz2', arguments=rviz_args,
             parameters=[{'use_sim_time': sim_time}], output='screen'),
    ]


def generate_launch_description():
    return LaunchDescription([
        DeclareLaunchArgument('model', default_value='',
                              description='URDF file (default: the installed manip_2r.urdf)'),
        DeclareLaunchArgument('use_sim_time', default_value='false',
                              description='use /clock (lockstep simulation)'),
        OpaqueFunction(function=_nodes),
    ])
