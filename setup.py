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

from glob import glob

from setuptools import find_packages
from setuptools import setup

package_name = 'manip_control'

setup(
    name=package_name,
    version='0.1.0',
    packages=find_packages(exclude=['test']),
    data_files=[
        ('share/ament_index/resource_index/packages', ['resource/' + package_name]),
        ('share/' + package_name, ['package.xml']),
        ('share/' + package_name + '/launch', glob('launch/*.launch.py')),
        ('share/' + package_name + '/config', glob('config/*.yaml')),
        ('share/' + package_name + '/urdf', glob('urdf/*.urdf')),
        ('share/' + package_name + '/rviz', glob('rviz/*.rviz')),
    ],
    install_requires=['setuptools', 'numpy', 'scipy', 'PyYAML', 'rosbags', 'matplotlib',
                      'mcap', 'numba', 'pillow', 'pin', 'mujoco'],
    zip_safe=True,
    maintainer='manip_control maintainers',
    maintainer_email='manip_control@example.com',
    description='Planar 2R arm simulation and computed-torque control for ROS 2.',
    license='Apache-2.0',
    tests_require=['pytest'],
    entry_points={
        'console_scripts': [
            # ROS executables (ros2 run manip_control <name>)
            'plant = manip_control.nodes.plant_node:main',
            'controller = manip_control.nodes.controller_node:main',
            'trajectory = manip_control.nodes.trajectory_node:main',
            'recorder = manip_control.nodes.recorder_node:main',
            'sim = manip_control.nodes.sim:main',
            'composed = manip_control.nodes.composed:main',
            'mujoco_driver = manip_control.nodes.mujoco_driver_node:main',
            # command-line tools
            'manip-sim = manip_control.nodes.sim:main',
            'manip-offline = manip_control.offline:main',
            'manip-analyze = manip_control.bag_analysis:main',
            'manip-bag = manip_control.bag_tool:main',
            'manip-identify = manip_control.identification:main',
            'manip-urdf = manip_control.urdf:main',
            'manip-robustness = manip_control.robustness:main',
        ],
    },
)
