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
launch_testing test of launch/sim.launch.py: the three nodes as separate processes on sim
time exchange messages and the plant finishes its run.

Runs where launch_ros and launch_testing are importable (a sourced ROS 2 distribution with
the package built by colcon); skipped otherwise, with the reason. Run it with
``launch_test test/test_launch_integration.py`` or plain pytest (launch_testing's plugin).
"""

import os
import unittest

import pytest

pytest.importorskip('launch_ros', reason='launch_ros is not importable (no ROS 2 '
                    'distribution here: rclpy comes from PyPI wheels without launch); '
                    'the static checks of the launch files are in test_launch.py')
pytest.importorskip('launch_testing', reason='launch_testing is not importable')

import launch  # noqa: E402
import launch_testing.actions  # noqa: E402
import launch_testing.asserts  # noqa: E402
from launch.actions import IncludeLaunchDescription  # noqa: E402
from launch.launch_description_sources import PythonLaunchDescriptionSource  # noqa: E402

LAUNCH = os.path.join(os.path.dirname(__file__), '..', 'launch', 'sim.launch.py')


@pytest.mark.launch_test
def generate_test_description():
    sim = IncludeLaunchDescription(
        PythonLaunchDescriptionSource(LAUNCH),
        launch_arguments={'duration': '2.0', 'headless': 'true'}.items())
    return launch.LaunchDescription([sim, launch_testing.actions.ReadyToTest()])


class TestSimLaunch(unittest.TestCase):

    def test_plant_finishes_the_run_without_timeouts(self, proc_output):
        proc_output.assertWaitFor('run finished: 2000 ticks, 0 command timeouts',
                                  timeout=120, stream='stderr')

    def test_joint_states_flow(self):
        import rclpy
        from sensor_msgs.msg import JointState
        rclpy.init()
        try:
            node = rclpy.create_node('launch_probe')
            got = []
            node.create_subscription(JointState, '/joint_states', got.append, 100)
            end = node.get_clock().now().nanoseconds + 60 * 10 ** 9
            while not got and node.get_clock().now().nanoseconds < end:
                rclpy.spin_once(node, timeout_sec=0.1)
            self.assertTrue(got, 'no /joint_states')
            self.assertEqual(list(got[0].name), ['joint1', 'joint2'])
        finally:
            rclpy.shutdown()


@launch_testing.post_shutdown_test()
class TestShutdown(unittest.TestCase):

    def test_exit_codes(self, proc_info):
        # 0: the plant finished; -2 / -15: the others stopped by launch (SIGINT / SIGTERM)
        launch_testing.asserts.assertExitCodes(proc_info, allowable_exit_codes=[0, -2, -15])
