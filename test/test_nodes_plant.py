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
Test the plant node over real DDS.

Commands by name, refusals counted, drive watchdog, lockstep timeouts with a missing
controller.
"""

import math

import pytest

pytest.importorskip('rclpy')

from conftest import make_node  # noqa: E402, I100
from diagnostic_msgs.msg import DiagnosticArray  # noqa: E402
from manip_control.nodes.plant_node import PlantNode  # noqa: E402
from manip_control.nodes.ros_params import plant_specs  # noqa: E402
from manip_control.parameters import DEFAULT_MOTORS  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from std_msgs.msg import Float64MultiArray  # noqa: E402

IDEAL = {'mode': 'realtime', 'actuator': 'ideal', 'torque_limit': [50.0, 50.0],
         'arm.plane': 'horizontal', 'command_timeout': 0.2}


def _cmd(names, effort):
    return JointState(name=names, effort=effort)


def _diag_values(probe):
    msgs = probe.msgs['/plant/diagnostics']
    assert msgs, 'no /plant/diagnostics'
    return {kv.key: kv.value for kv in msgs[-1].status[0].values}


def test_commands_matched_by_name_with_extra_joints(ros_context, executor, probe, spin):
    plant = make_node(PlantNode, ros_context, plant_specs(), IDEAL)
    executor.add_node(plant)
    executor.add_node(probe.node)
    probe.sub(JointState, '/joint_states')
    pub = probe.pub(JointState, '/joint_commands')
    assert spin(executor, 5.0, lambda: pub.get_subscription_count() >= 1)
    # extra joint first, joint2 before joint1: joint1 must get 1.5, joint2 -2.5
    cmd = _cmd(['gripper', 'joint2', 'joint1'], [99.0, -2.5, 1.5])

    def applied():
        pub.publish(cmd)
        states = probe.msgs['/joint_states']
        return bool(states) and list(states[-1].effort) == [1.5, -2.5]
    assert spin(executor, 5.0, applied)
    st = probe.msgs['/joint_states'][-1]
    assert list(st.name) == ['joint1', 'joint2'] and len(st.position) == 2
    assert plant.refused_commands == 0


def test_bad_commands_refused_counted_and_watchdog_zeroes_current(
        ros_context, executor, probe, spin):
    values = dict(IDEAL, actuator='motor')
    plant = make_node(PlantNode, ros_context, plant_specs(), values)
    executor.add_node(plant)
    executor.add_node(probe.node)
    probe.sub(JointState, '/motor_states')
    probe.sub(DiagnosticArray, '/plant/diagnostics')
    pub = probe.pub(JointState, '/joint_commands')
    assert spin(executor, 5.0, lambda: pub.get_subscription_count() >= 1)
    good = _cmd(['joint1', 'joint2'], [10.0, 5.0])
    i_ref = [10.0 / DEFAULT_MOTORS[0].torque_per_amp, 5.0 / DEFAULT_MOTORS[1].torque_per_amp]

    def running_with(ref):
        pub.publish(good)
        ms = probe.msgs['/motor_states']
        return bool(ms) and all(math.isclose(a, b) for a, b in zip(ms[-1].effort, ref))
    assert spin(executor, 5.0, lambda: running_with(i_ref))
    bad = [
        _cmd(['joint1', 'joint2'], [math.nan, 1.0]),          # NaN
        _cmd(['joint1', 'joint2'], [math.inf, 1.0]),          # Inf
        _cmd(['joint1', 'joint2'], [1.0, 2.0, 3.0]),          # wrong length
        _cmd(['joint1', 'joint2'], [1.0]),                    # wrong length
        _cmd(['joint1', 'elbow'], [1.0, 2.0]),                # joint2 missing
        _cmd(['joint1', 'joint1', 'joint2'], [1.0, 1.0, 2.0]),  # repeated
    ]
    for msg in bad:
        pub.publish(msg)
    assert spin(executor, 3.0, lambda: plant.refused_commands == len(bad))
    # the refused commands changed nothing; the last valid one is still held
    ms = probe.msgs['/motor_states']
    assert all(math.isclose(a, b) for a, b in zip(ms[-1].effort, i_ref))
    # stop commanding: after command_timeout (0.2 s) the drive gets a zero reference
    n0 = len(probe.msgs['/plant/diagnostics'])
    assert spin(executor, 3.0, lambda: list(probe.msgs['/motor_states'][-1].effort)
                == [0.0, 0.0])
    assert spin(executor, 3.0, lambda: len(probe.msgs['/plant/diagnostics']) > n0 + 1)
    diag = _diag_values(probe)
    assert diag['refused_commands'] == str(len(bad))
    assert int(diag['watchdog_trips']) >= 1 and diag['watchdog_active'] == 'True'
    assert diag['last_refusal'] == "duplicate_name: joint 'joint1' named more than once"
    assert diag['refused.joint_commands.non_finite'] == '2'
    assert diag['refused.joint_commands.length_mismatch'] == '2'
    assert diag['refused.joint_commands.missing_joint'] == '1'
    # commands come back: the watchdog releases
    assert spin(executor, 5.0, lambda: running_with(i_ref))
    assert plant.callback_errors == 0


def test_float64_array_commands_and_refusals(ros_context, executor, probe, spin):
    values = dict(IDEAL, command_source='effort_commands')
    plant = make_node(PlantNode, ros_context, plant_specs(), values)
    executor.add_node(plant)
    executor.add_node(probe.node)
    probe.sub(JointState, '/joint_states')
    pub = probe.pub(Float64MultiArray, '/effort_controller/commands')
    assert spin(executor, 5.0, lambda: pub.get_subscription_count() >= 1)
    for data in ([1.0], [1.0, 2.0, 3.0], [math.nan, 0.0], [0.0, -math.inf]):
        pub.publish(Float64MultiArray(data=data))
    assert spin(executor, 3.0, lambda: plant.refused_commands == 4)

    def applied():
        pub.publish(Float64MultiArray(data=[3.0, -4.0]))
        st = probe.msgs['/joint_states']
        return bool(st) and list(st[-1].effort) == [3.0, -4.0]
    assert spin(executor, 5.0, applied)


def test_lockstep_without_controller_times_out_and_goes_on(
        ros_context, executor, probe, spin):
    values = {'mode': 'lockstep', 'duration': 0.05, 'lockstep_timeout': 0.05,
              'startup_timeout': 0.3, 'wait_for_subscribers': 1}
    plant = make_node(PlantNode, ros_context, plant_specs(), values)
    executor.add_node(plant)
    executor.add_node(probe.node)
    probe.sub(JointState, '/joint_states')
    assert spin(executor, 10.0, lambda: plant.done)
    assert plant.k == 50 and plant.command_timeouts == 50
    states = probe.msgs['/joint_states']
    # tick 0 is re-sent while waiting for the first command, then one state per tick
    stamps = sorted({s.header.stamp.sec * 10 ** 9 + s.header.stamp.nanosec for s in states})
    assert stamps == [k * 1_000_000 for k in range(50)]
    assert plant.resends >= 1
