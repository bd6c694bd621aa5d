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
Controller and trajectory against a hardware driver: wall time, free-running 1 kHz timers.

    ros2 launch manip_control hardware.launch.py [joint_states_topic:=/arm/joint_states] \
        [command_topic:=/arm/effort_controller/commands] [namespace:=arm] [headless:=false] \
        [state_publisher:=/arm/joint_state_broadcaster] [urdf:=/path/to/arm.urdf]

The controller reads sensor_msgs/JointState from ``joint_states_topic`` (matched by joint
name) and writes std_msgs/Float64MultiArray torque commands in ``joints`` order to
``command_topic`` (what ros2_control's ForwardCommandController with interface effort takes)
and the stamped sensor_msgs/JointState form to ``joint_commands_topic``. No /clock, no plant.
The topic arguments default to relative names, so ``namespace:=NS`` moves the nodes and
their topics under ``/NS`` (an absolute topic argument stays where it is).
headless:=false adds RViz (the driver is expected to run robot_state_publisher).
Only ``state_publisher`` (default ``/joint_state_broadcaster``) may publish the joint states:
the states of any other node are refused and counted (``''``: any single publisher).
``urdf:=FILE`` (a URDF or xacro file, through ``xacro``) gives any serial arm as the
``robot_description`` of the controller: its nominal model, joints and per-joint defaults
come from the description, the params file defaults to ``config/arm_hardware_params.yaml``
(nothing per joint) and no trajectory node starts: the controller holds the arm where it is
until a JointTrajectory arrives on ``reference_topic``.
``mujoco:=true`` also starts the MuJoCo driver (``mujoco_driver``, node
``joint_state_broadcaster``): a simulated robot on the same ``robot_description`` (the
planar 2R without ``urdf:=``) that publishes the joint states and holds the newest command,
with the trajectory node on by default; its parameters come from the params file's
``joint_state_broadcaster`` section.
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.conditions import IfCondition
from launch.conditions import UnlessCondition
from launch.substitutions import Command
from launch.substitutions import IfElseSubstitution
from launch.substitutions import LaunchConfiguration
from launch.substitutions import NotEqualsSubstitution
from launch.substitutions import PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue
from launch_ros.substitutions import FindPackageShare


def generate_launch_description():
    params_file = LaunchConfiguration('params_file')
    joint_states_topic = LaunchConfiguration('joint_states_topic')
    command_topic = LaunchConfiguration('command_topic')
    joint_commands_topic = LaunchConfiguration('joint_commands_topic')
    reference_topic = LaunchConfiguration('reference_topic')
    headless = LaunchConfiguration('headless')
    log_level = LaunchConfiguration('log_level')
    autostart = LaunchConfiguration('autostart')
    namespace = LaunchConfiguration('namespace')
    rviz_config = PathJoinSubstitution([FindPackageShare('manip_control'), 'rviz',
                                        'manip_2r.rviz'])
    ros_args = ['--ros-args', '--log-level', log_level]
    # our nodes stop cleanly (SIGTERM) even if ros2 launch itself is killed with SIGTERM
    stop_with_parent = {'MANIP_STOP_WITH_PARENT': '1'}
    sigterm_timeout = LaunchConfiguration('sigterm_timeout')
    urdf = LaunchConfiguration('urdf')
    arm_given = NotEqualsSubstitution(urdf, '')
    mujoco = LaunchConfiguration('mujoco')
    robot_description = ParameterValue(
        IfElseSubstitution(arm_given, Command(['xacro ', urdf]), ''), value_type=str)
    return LaunchDescription([
        DeclareLaunchArgument(
            'urdf', default_value='',
            description="URDF or xacro file of the arm (any serial arm: the controller's "
                        "robot_description); '' = the closed-form planar 2R of the params "
                        'file'),
        DeclareLaunchArgument(
            'params_file',
            default_value=PathJoinSubstitution([
                FindPackageShare('manip_control'), 'config',
                IfElseSubstitution(arm_given, 'arm_hardware_params.yaml',
                                   'hardware_params.yaml')]),
            description='ROS params file with controller and trajectory sections '
                        '(node_name: ros__parameters:); default hardware_params.yaml, '
                        'arm_hardware_params.yaml with urdf:='),
        DeclareLaunchArgument(
            'mujoco', default_value='false',
            description='true: also start the MuJoCo driver (a simulated robot on the same '
                        'robot_description, the 2R without urdf:=) as joint_state_broadcaster; '
                        "its parameters: the params file's joint_state_broadcaster section"),
        DeclareLaunchArgument(
            'trajectory',
            default_value=IfElseSubstitution(
                mujoco, 'true', IfElseSubstitution(arm_given, 'false', 'true')),
            description='start the trajectory node (the reference generator); default true, '
                        'false with urdf:= unless mujoco:=true (the controller then holds the '
                        'measured position until a JointTrajectory arrives on '
                        'reference_topic)'),
        DeclareLaunchArgument(
            'joint_states_topic', default_value='joint_states',
            description='sensor_msgs/JointState topic of the driver (read by the controller)'),
        DeclareLaunchArgument(
            'command_topic', default_value='effort_controller/commands',
            description='std_msgs/Float64MultiArray effort command topic of the driver '
                        '(ros2_control ForwardCommandController, interface effort)'),
        DeclareLaunchArgument(
            'joint_commands_topic', default_value='joint_commands',
            description='stamped sensor_msgs/JointState command topic (effort, q_d, qd_d)'),
        DeclareLaunchArgument(
            'reference_topic', default_value='reference',
            description='trajectory_msgs/JointTrajectory reference from trajectory to '
                        'controller'),
        DeclareLaunchArgument(
            'state_publisher', default_value='/joint_state_broadcaster',
            description='fully qualified node that publishes the joint states (the driver; '
                        'ros2_control: /joint_state_broadcaster, /NS/joint_state_broadcaster '
                        'under a namespace); states of any other node are refused; '
                        "'' = any single publisher"),
        DeclareLaunchArgument(
            'namespace', default_value='',
            description="namespace of the nodes and of the relative topic names; '' = none"),
        DeclareLaunchArgument(
            'headless', default_value='true',
            description='true: no GUI; false: also RViz'),
        DeclareLaunchArgument(
            'autostart', default_value='true',
            description='configure and activate the (lifecycle) controller at start; false: '
                        'bring it up by hand (ros2 lifecycle set /controller configure, then '
                        'activate)'),
        DeclareLaunchArgument(
            'sigterm_timeout', default_value='15',
            description='seconds a node gets to finish after SIGINT (the recorder closes its '
                        'bag) before launch escalates to SIGTERM'),
        DeclareLaunchArgument(
            'log_level', default_value='info',
            description='log level of the manip_control nodes (debug, info, warn, error)'),
        Node(package='manip_control', executable='controller', name='controller',
             namespace=namespace, output='screen',
             parameters=[params_file, {'use_sim_time': False, 'mode': 'realtime',
                                       'robot_description': robot_description,
                                       'autostart': ParameterValue(autostart,
                                                                   value_type=bool),
                                       'state_publisher': ParameterValue(
                                           LaunchConfiguration('state_publisher'),
                                           value_type=str)}],
             remappings=[('joint_states', joint_states_topic),
                         ('effort_controller/commands', command_topic),
                         ('joint_commands', joint_commands_topic),
                         ('reference', reference_topic)],
             arguments=ros_args, additional_env=stop_with_parent,
             sigterm_timeout=sigterm_timeout),
        Node(package='manip_control', executable='trajectory', name='trajectory',
             namespace=namespace, output='screen',
             parameters=[params_file, {'use_sim_time': False, 'mode': 'realtime',
                                       'robot_description': robot_description}],
             remappings=[('reference', reference_topic)],
             arguments=ros_args, additional_env=stop_with_parent,
             sigterm_timeout=sigterm_timeout,
             condition=IfCondition(LaunchConfiguration('trajectory'))),
        Node(package='manip_control', executable='mujoco_driver',
             name='joint_state_broadcaster', namespace=namespace, output='screen',
             parameters=[params_file, {'robot_description': robot_description}],
             remappings=[('joint_states', joint_states_topic),
                         ('effort_controller/commands', command_topic)],
             arguments=ros_args, additional_env=stop_with_parent,
             sigterm_timeout=sigterm_timeout, condition=IfCondition(mujoco)),
        Node(package='rviz2', executable='rviz2', name='rviz2', namespace=namespace,
             output='screen', arguments=['-d', rviz_config],
             condition=UnlessCondition(headless)),
    ])
