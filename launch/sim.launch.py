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
Simulation: plant, controller and trajectory as separate processes on sim time (lockstep).

    ros2 launch manip_control sim.launch.py [duration:=10.0] [bag:=runs/r1] [namespace:=arm]
        [headless:=false] [composed:=true] [urdf:=/path/to/arm.urdf]

The plant owns /clock and steps one control period only after the command of the tick has
arrived (deterministic, as fast as the loop allows). When the plant has simulated ``duration``
and exits, the whole launch shuts down (every other node is stopped with SIGINT and finishes
cleanly; the recorder closes its bag). With ``duration:=0`` it runs until Ctrl-C.
``bag:=DIR`` adds the recorder; the plant's first tick, the controller's first command and
the trajectory's first reference then wait until the recorder has matched every topic it
records and the node's own recorded publishers have matched the recorder, so the bag holds
every topic from tick 0. ``namespace:=NS`` puts every
node and topic under ``/NS`` (/clock stays global). ``headless:=false`` adds
robot_state_publisher and RViz showing the arm. ``composed:=true`` runs the same nodes with the
same parameters, remappings and namespace in one process on one executor (the ``composed``
executable, rclpy's stand-in for a component container): no message crosses a process
boundary, so a tick costs far less CPU and the loop runs faster (docs/ros.md).
``urdf:=FILE`` (a URDF or xacro file, through ``xacro``) simulates any serial arm: it is the
``robot_description`` of the plant, the controller and the trajectory (rigid body through
Pinocchio, drives sized from the effort limits, friction from ``<dynamics>``, a sinusoid
reference inside the joint limits; docs/arm_model.md), the params file defaults to
``config/arm_sim_params.yaml`` (nothing per joint); ``composed:=true`` works for it too.
"""

from typing import List

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.actions import EmitEvent
from launch.actions import RegisterEventHandler
from launch.conditions import IfCondition
from launch.conditions import UnlessCondition
from launch.event_handlers import OnProcessExit
from launch.events import Shutdown
from launch.substitutions import Command
from launch.substitutions import IfElseSubstitution
from launch.substitutions import LaunchConfiguration
from launch.substitutions import NotEqualsSubstitution
from launch.substitutions import PathJoinSubstitution
from launch.substitutions import PythonExpression
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue
from launch_ros.substitutions import FindPackageShare

#: Topics the recorder records (relative to the namespace).
RECORDED = ('joint_states', 'effort_controller/commands', 'joint_commands', 'reference',
            'motor_states', 'controller/diagnostics', 'plant/diagnostics')


def generate_launch_description():
    params_file = LaunchConfiguration('params_file')
    duration = LaunchConfiguration('duration')
    headless = LaunchConfiguration('headless')
    bag = LaunchConfiguration('bag')
    log_level = LaunchConfiguration('log_level')
    autostart = LaunchConfiguration('autostart')
    namespace = LaunchConfiguration('namespace')
    composed = LaunchConfiguration('composed')
    urdf = LaunchConfiguration('urdf')
    arm_given = NotEqualsSubstitution(urdf, '')
    robot_description = ParameterValue(
        IfElseSubstitution(arm_given, Command(['xacro ', urdf]), ''), value_type=str)
    # the controller inverts the drives the simulated plant has unless the file says otherwise
    drives_file = PythonExpression(
        ["__import__('manip_control.nodes.ros_params', fromlist=['_'])"
         ".drives_params_file(r'''", params_file, "''', r'''", urdf, "''')"])
    model_2r = PathJoinSubstitution([FindPackageShare('manip_control'), 'urdf',
                                     'manip_2r.urdf'])
    rviz_config = PathJoinSubstitution([FindPackageShare('manip_control'), 'rviz',
                                        'manip_2r.rviz'])
    ros_args = ['--ros-args', '--log-level', log_level]
    # our nodes stop cleanly (SIGTERM) even if ros2 launch itself is killed with SIGTERM
    stop_with_parent = {'MANIP_STOP_WITH_PARENT': '1'}
    sigterm_timeout = LaunchConfiguration('sigterm_timeout')
    recording = PythonExpression(["'", bag, "' != ''"])
    # the recorder takes absolute topic names: /NS/<topic>, or /<topic> without a namespace
    recorded = PythonExpression(["[('/' + '", namespace, "'.strip('/') + '/' + t)"
                                 ".replace('//', '/') for t in ", repr(RECORDED), ']'])
    # the controller, + the recorder's subscription when recording
    wait_for_subscribers = PythonExpression(['2 if ', recording, ' else 1'])
    # each node's first message waits until the recorder's subscription has matched it (one
    # process: the recorder takes the topics from the publishers themselves)
    wait_for_recorder = PythonExpression(['"recorder/ready" if ', recording, ' else ""'])
    plant = Node(
        package='manip_control', executable='plant', name='plant', namespace=namespace,
        output='screen',
        parameters=[params_file, {
            'use_sim_time': True, 'mode': 'lockstep', 'robot_description': robot_description,
            'duration': ParameterValue(duration, value_type=float),
            'wait_for_subscribers': ParameterValue(wait_for_subscribers, value_type=int),
            # and for the recorder to match every recorded topic (relative: any namespace)
            'wait_for_recorder': wait_for_recorder}],
        arguments=ros_args, additional_env=stop_with_parent, sigterm_timeout=sigterm_timeout,
        condition=UnlessCondition(composed))
    # composed:=true: the same nodes in one process. The parameters every node gets above are
    # given to all; a node's own ones as NODE:NAME:=VALUE, which `composed` hands to that node
    # only (under any namespace); params_file sections apply by node name as for a process.
    one_process = Node(
        package='manip_control', executable='composed', namespace=namespace, output='screen',
        parameters=[params_file, drives_file, {'use_sim_time': True, 'mode': 'lockstep',
                                               'robot_description': robot_description}],
        ros_arguments=['--log-level', log_level,
                       '-p', ['plant:duration:=', duration],
                       '-p', ['plant:wait_for_subscribers:=', wait_for_subscribers],
                       '-p', ['controller:autostart:=', autostart],
                       '-p', ["recorder:bag:='", bag, "'"],
                       '-p', ['recorder:topics:=', recorded]],
        additional_env=stop_with_parent, sigterm_timeout=sigterm_timeout,
        condition=IfCondition(composed))
    return LaunchDescription([
        DeclareLaunchArgument(
            'urdf', default_value='',
            description='URDF or xacro file of the arm to simulate (any serial arm: the '
                        "robot_description of the nodes); '' = the closed-form planar 2R of "
                        'the params file'),
        DeclareLaunchArgument(
            'params_file',
            default_value=PathJoinSubstitution([
                FindPackageShare('manip_control'), 'config',
                IfElseSubstitution(arm_given, 'arm_sim_params.yaml', 'sim_params.yaml')]),
            description='ROS params file with plant, controller and trajectory sections '
                        '(node_name: ros__parameters:); default sim_params.yaml, '
                        'arm_sim_params.yaml with urdf:='),
        DeclareLaunchArgument(
            'duration', default_value='0.0',
            description='simulated time to run [s], then the launch shuts down; 0 = until '
                        'stopped (Ctrl-C) (overrides the file)'),
        DeclareLaunchArgument(
            'namespace', default_value='',
            description="namespace of every node and topic (/clock stays global); '' = none"),
        DeclareLaunchArgument(
            'headless', default_value='true',
            description='true: no GUI; false: also robot_state_publisher and RViz showing the '
                        'arm'),
        DeclareLaunchArgument(
            'bag', default_value='',
            description='record a rosbag2 bag (MCAP) into this directory from the first tick; '
                        "'' = no recording"),
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
        DeclareLaunchArgument(
            'composed', default_value='false',
            description='true: the same nodes, parameters, remappings and namespace in one '
                        'process on one executor (the composed executable; less CPU per tick, '
                        'faster in lockstep); false: one process per node'),
        plant,
        # the plant exits when it has simulated `duration`: end the whole launch
        RegisterEventHandler(OnProcessExit(
            target_action=plant,
            on_exit=[EmitEvent(event=Shutdown(reason='the plant finished the run'))])),
        one_process,
        RegisterEventHandler(OnProcessExit(
            target_action=one_process,
            on_exit=[EmitEvent(event=Shutdown(reason='the plant finished the run'))])),
        Node(package='manip_control', executable='controller', name='controller',
             namespace=namespace, output='screen',
             parameters=[params_file, drives_file,
                         {'use_sim_time': True, 'mode': 'lockstep',
                          'robot_description': robot_description,
                          'wait_for_recorder': wait_for_recorder,
                          'autostart': ParameterValue(autostart, value_type=bool)}],
             arguments=ros_args, additional_env=stop_with_parent,
             sigterm_timeout=sigterm_timeout, condition=UnlessCondition(composed)),
        Node(package='manip_control', executable='trajectory', name='trajectory',
             namespace=namespace, output='screen',
             parameters=[params_file, {'use_sim_time': True, 'mode': 'lockstep',
                                       'robot_description': robot_description,
                                       'wait_for_recorder': wait_for_recorder}],
             arguments=ros_args, additional_env=stop_with_parent,
             sigterm_timeout=sigterm_timeout, condition=UnlessCondition(composed)),
        Node(package='manip_control', executable='recorder', name='recorder',
             namespace=namespace, output='screen',
             parameters=[{'use_sim_time': True, 'bag': bag,
                          'topics': ParameterValue(recorded, value_type=List[str])}],
             arguments=ros_args, additional_env=stop_with_parent,
             sigterm_timeout=sigterm_timeout,
             condition=IfCondition(PythonExpression(
                 [recording, " and '", composed, "'.lower() not in ('true', '1')"]))),
        Node(package='robot_state_publisher', executable='robot_state_publisher',
             name='robot_state_publisher', namespace=namespace, output='screen',
             parameters=[{'use_sim_time': True,
                          'robot_description': ParameterValue(Command([
                              'xacro ', IfElseSubstitution(arm_given, urdf, model_2r)]),
                              value_type=str)}],
             condition=UnlessCondition(headless)),
        Node(package='rviz2', executable='rviz2', name='rviz2', namespace=namespace,
             output='screen', arguments=['-d', rviz_config],
             parameters=[{'use_sim_time': True}], condition=UnlessCondition(headless)),
    ])
