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
Test the controller node over real DDS.

Joints matched by name, runtime gain changes (applied from the next tick, invalid ones
refused with the reason), bad inputs refused, time modes, the start-up re-plan.
"""

import math
from pathlib import Path
import time

import pytest

pytest.importorskip('rclpy')

from conftest import make_node  # noqa: E402, I100
from manip_control.control import Controller  # noqa: E402
from manip_control.nodes.controller_node import ControllerNode  # noqa: E402
from manip_control.nodes.ros_params import controller_specs  # noqa: E402
from manip_control.nodes.ros_params import ros_params_from_scenario  # noqa: E402
from manip_control.parameters import load_scenario  # noqa: E402
from manip_control.parameters import ParameterError  # noqa: E402
import numpy as np  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from rclpy.parameter_client import AsyncParameterClient  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from std_msgs.msg import Float64MultiArray  # noqa: E402
from trajectory_msgs.msg import JointTrajectory  # noqa: E402
from trajectory_msgs.msg import JointTrajectoryPoint  # noqa: E402

SCENARIO = load_scenario('default')


def _state(stamp_ns, names, q, qd):
    m = JointState(name=names, position=q, velocity=qd, effort=[0.0] * len(names))
    m.header.stamp.sec, m.header.stamp.nanosec = divmod(stamp_ns, 10 ** 9)
    return m


def _ref(stamp_ns, names, q, qd, qdd):
    m = JointTrajectory(joint_names=names)
    m.header.stamp.sec, m.header.stamp.nanosec = divmod(stamp_ns, 10 ** 9)
    m.points = [JointTrajectoryPoint(positions=q, velocities=qd, accelerations=qdd)]
    return m


COMMAND_TOPICS = ('/joint_commands', '/effort_controller/commands')


class Rig:
    """
    A controller node and the probe's publishers and subscriptions.

    Every controller node made is destroyed at the end of its test (:func:`_destroy_rigs`):
    a node left alive keeps its DDS participant on the graph after its context is shut down,
    and the next test's controller then sees a second publisher of its command topics (a
    source conflict: safe mode, the safe command at the control rate).
    """

    nodes: list = []

    def __init__(self, ctx, executor, probe, spin, base=None, **values):
        # no command publisher from an earlier test may still be on the graph
        assert spin(executor, 5.0, lambda: not any(probe.node.count_publishers(t)
                                                   for t in COMMAND_TOPICS)), \
            {t: probe.node.count_publishers(t) for t in COMMAND_TOPICS}
        vals = ros_params_from_scenario(SCENARIO)['controller'] if base is None else dict(base)
        # one state per test step: it must not go stale in between (a stale state means safe
        # mode and then resume_states fresh states to resume; see test_fault_injection)
        vals['safety.state_timeout'] = 10.0
        # nor may the reference: a test step that takes over 100 ms on a loaded machine (a
        # parameter service call) would otherwise be answered with the held reference
        vals['safety.reference_timeout'] = 10.0
        vals.update(values)
        self.node = make_node(ControllerNode, ctx, controller_specs(), vals)
        Rig.nodes.append(self.node)
        executor.add_node(self.node)
        executor.add_node(probe.node)
        self.ex, self.probe, self.spin = executor, probe, spin
        probe.sub(JointState, '/joint_commands')
        probe.sub(Float64MultiArray, '/effort_controller/commands')
        self.state_pub = probe.pub(JointState, '/joint_states')
        self.ref_pub = probe.pub(JointTrajectory, '/reference')
        assert spin(executor, 5.0, lambda: self.state_pub.get_subscription_count() >= 1
                    and self.ref_pub.get_subscription_count() >= 1
                    and self.node._cmd_pub.get_subscription_count() >= 1)

    def tick(self, stamp, state_names, q, qd, ref_names, r, rv, ra):
        m = self.probe.msgs
        n, k = len(m['/joint_commands']), len(m['/effort_controller/commands'])
        self.state_pub.publish(_state(stamp, state_names, q, qd))
        self.ref_pub.publish(_ref(stamp, ref_names, r, rv, ra))
        assert self.spin(self.ex, 5.0, lambda: len(m['/joint_commands']) > n
                         and len(m['/effort_controller/commands']) > k)
        return self.probe.msgs['/joint_commands'][-1]

    def set_params(self, *params):
        client = AsyncParameterClient(self.probe.node, 'controller')
        assert self.spin(self.ex, 5.0, client.services_are_ready)
        fut = client.set_parameters(list(params))
        assert self.spin(self.ex, 5.0, fut.done)
        return fut.result().results


@pytest.fixture(autouse=True)
def _destroy_rigs(ros_context, executor, probe, spin):
    """Destroy every controller node of the test; its commands leave the graph."""
    Rig.nodes = []
    try:
        yield
    finally:
        for node in Rig.nodes:
            if node in executor.get_nodes():
                executor.remove_node(node)
        # the events executor drops a removed node's timers and subscriptions at its next
        # spin, and runs what was already queued for them then: let it, before the nodes go
        spin(executor, 0.2)
        for node in Rig.nodes:
            node.destroy_node()
        Rig.nodes = []
        assert spin(executor, 5.0, lambda: not any(probe.node.count_publishers(t)
                                                   for t in COMMAND_TOPICS))


def test_lockstep_by_name_and_runtime_gains(ros_context, executor, probe, spin):
    # the state starts 0.3 rad from the reference: no start-up re-plan for this check of the
    # feedback law (test_lockstep_start_is_replanned_from_the_measured_position covers it)
    rig = Rig(ros_context, executor, probe, spin, **{'safety.reference_step_limit': 1.0})
    core = Controller(SCENARIO.controller, SCENARIO.period)
    # state with an extra joint and joint2 first; reference in the other order
    q, qd = {'joint1': 0.1, 'joint2': -0.2}, {'joint1': 0.5, 'joint2': 0.3}
    r, rv, ra = {'joint1': 0.0, 'joint2': 0.1}, {'joint1': 0.2, 'joint2': 0.0}, \
        {'joint1': -0.1, 'joint2': 0.4}
    sn = ['gripper', 'joint2', 'joint1']
    rn = ['joint2', 'joint1']

    def expected():
        j = ('joint1', 'joint2')
        return list(core.update([q[n] for n in j], [qd[n] for n in j], [r[n] for n in j],
                                [rv[n] for n in j], [ra[n] for n in j]).tau)

    def tick(stamp):
        return rig.tick(stamp, sn, [math.nan, q['joint2'], q['joint1']],
                        [math.inf, qd['joint2'], qd['joint1']], rn,
                        [r[j] for j in rn], [rv[j] for j in rn], [ra[j] for j in rn])

    cmd = tick(1_000_000)
    assert list(cmd.name) == ['joint1', 'joint2']
    assert cmd.header.stamp.nanosec == 1_000_000
    assert list(cmd.effort) == expected()
    assert list(cmd.position) == [r['joint1'], r['joint2']]
    assert list(cmd.velocity) == [rv['joint1'], rv['joint2']]
    assert list(probe.msgs['/effort_controller/commands'][-1].data) == list(cmd.effort)

    # valid change (integers accepted for doubles): applied from the next tick
    res = rig.set_params(Parameter('kp', value=[100, 50]),
                         Parameter('torque_limit', value=[5.0, 3.0]))
    assert all(x.successful for x in res), [x.reason for x in res]
    core.set_gains([100.0, 50.0], core.kd)
    core.set_torque_limit([5.0, 3.0])
    cmd = tick(2_000_000)
    assert list(cmd.effort) == expected()
    assert abs(cmd.effort[0]) <= 5.0 and abs(cmd.effort[1]) <= 3.0

    # invalid changes are refused with the reason; nothing changes
    for param, why in ((Parameter('kp', value=[-1.0, 2.0]), 'kp[0]: must be > 0'),
                       (Parameter('kd', value=[1.0]), 'kd: must have 2 elements'),
                       (Parameter('torque_limit', value=[math.nan, 1.0]),
                        'torque_limit[0]: must be finite'),
                       (Parameter('law', value='pd_gravity'), 'read-only'),
                       (Parameter('kp', value='fast'), 'Wrong parameter type')):
        res = rig.set_params(param)
        assert not res[0].successful and why in res[0].reason, res[0].reason
    assert list(rig.node.get_parameter('kp').value) == [100.0, 50.0]
    cmd = tick(3_000_000)
    assert list(cmd.effort) == expected()


def test_bad_inputs_are_refused_without_a_command(ros_context, executor, probe, spin):
    rig = Rig(ros_context, executor, probe, spin)
    names = ['joint1', 'joint2']
    ok_ref = _ref(5, names, [0.0, 0.0], [0.0, 0.0], [0.0, 0.0])
    for st in (_state(5, names, [math.nan, 0.0], [0.0, 0.0]),
               _state(5, ['joint1'], [0.0], [0.0]),
               _state(5, names, [0.0, 0.0, 1.0], [0.0, 0.0])):
        rig.state_pub.publish(st)
        rig.ref_pub.publish(ok_ref)
    assert spin(executor, 3.0, lambda: rig.node.refused_states == 3)
    rig.ref_pub.publish(_ref(6, names, [0.0, math.inf], [0.0, 0.0], [0.0, 0.0]))
    assert spin(executor, 3.0, lambda: rig.node.refused_references == 1)
    spin(executor, 0.2)
    assert probe.msgs['/joint_commands'] == [] and rig.node.ticks == 0
    # a good pair still works afterwards (the node did not crash)
    cmd = rig.tick(7, names, [0.0, 0.0], [0.0, 0.0], names, [0.0, 0.0], [0.0, 0.0],
                   [0.0, 0.0])
    assert all(math.isfinite(v) for v in cmd.effort) and rig.node.callback_errors == 0


def test_lockstep_start_is_replanned_from_the_measured_position(
        ros_context, executor, probe, spin):
    """
    Re-plan the reference from the measured position at the start.

    The first state is 0.5 rad from the reference: the reference in use starts at the
    measured position (zero error, zero blend velocity), so the first command is the
    feed-forward of the nominal model at rest there, not a tracking-error torque.
    """
    rig = Rig(ros_context, executor, probe, spin)
    names = ['joint1', 'joint2']
    core = Controller(SCENARIO.controller, SCENARIO.period)
    first = rig.tick(1_000_000, names, [0.5, 0.0], [0.0, 0.0], names, [0.0, 0.0], [0.0, 0.0],
                     [0.0, 0.0])
    assert list(first.position) == [0.5, 0.0] and list(first.velocity) == [0.0, 0.0]
    zero = (0.0, 0.0)
    want = core.update((0.5, 0.0), zero, (0.5, 0.0), zero, zero)
    assert list(first.effort) == pytest.approx(want.tau, abs=1e-9)
    step = Controller(SCENARIO.controller, SCENARIO.period).update((0.5, 0.0), zero, zero, zero,
                                                                   zero)
    assert abs(step.tau[0] - want.tau[0]) > 10.0      # what the step would have commanded
    # the blend moves the reference towards the requested one, smoothly (lockstep: sim time)
    later = rig.tick(101_000_000, names, [0.5, 0.0], [0.0, 0.0], names, [0.0, 0.0],
                     [0.0, 0.0], [0.0, 0.0])
    assert 0.0 < later.position[0] < 0.5 and later.velocity[0] < 0.0


def test_lockstep_resent_state_gets_the_same_command(ros_context, executor, probe, spin):
    rig = Rig(ros_context, executor, probe, spin, ki=[5.0, 5.0])
    names = ['joint1', 'joint2']
    args = (names, [0.3, 0.1], [0.0, 0.0], names, [0.0, 0.0], [0.0, 0.0], [0.0, 0.0])
    first = rig.tick(9, *args)
    again = rig.tick(9, *args)              # the plant re-sent tick 9 (start-up)
    assert list(again.effort) == list(first.effort) and rig.node.ticks == 1


@pytest.mark.parametrize('trigger', ['timer', 'state'])
def test_realtime_triggers(ros_context, executor, probe, spin, trigger):
    # the single state must not go stale during the test (a stale state means safe
    # mode, with the safe command published at the control rate; see test_fault_injection)
    rig = Rig(ros_context, executor, probe, spin, mode='realtime', trigger=trigger,
              **{'safety.state_timeout': 10.0})
    names = ['joint1', 'joint2']
    # each sent again until taken: one that arrives before the controller's graph lists its
    # publisher is refused (as at every start)
    assert _sent_until(spin, executor, lambda: rig.ref_pub.publish(
        _ref(1, names, [0.0, 0.0], [0.0, 0.0], [0.0, 0.0])),
        lambda: rig.node.reference is not None)
    # real time: a state counts only when fresh (wall-clock stamp, advancing)
    cmds = probe.msgs['/joint_commands']
    assert _sent_until(spin, executor, lambda: rig.state_pub.publish(
        _state(time.time_ns(), names, [0.1, 0.0], [0.0, 0.0])), lambda: len(cmds) >= 1)
    spin(executor, 0.3)
    n = len(cmds)
    if trigger == 'timer':
        assert n > 50            # free-running at 1 kHz on the held state
    else:
        assert n == rig.node.ticks      # one command per received state, and no other
        rig.state_pub.publish(_state(time.time_ns(), names, [0.1, 0.0], [0.0, 0.0]))
        assert spin(executor, 3.0, lambda: len(cmds) == n + 1)
        spin(executor, 0.1)
        assert len(cmds) == n + 1


def _sent_until(spin, executor, send, taken, seconds: float = 5.0) -> bool:
    """Send every 0.1 s until ``taken()`` (at most ``seconds``)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        send()
        if spin(executor, 0.1, taken):
            return True
    return taken()


def test_state_timeout_reports_the_gap_before_the_declaring_check(ros_context, executor, probe,
                                                                  spin):
    # the safety clock is driven by hand: checks 5 ms apart up to 15 ms after the state, then
    # none until 60 ms (a process not scheduled): the check at 60 ms declares the timeout and
    # reports the 45 ms since the check before it
    rig = Rig(ros_context, executor, probe, spin, mode='realtime', trigger='state',
              **{'safety.state_timeout': 0.02})
    safety = rig.node.safety
    clock = [1000.0]
    safety.now = lambda: clock[0]
    names = ['joint1', 'joint2']
    # sent again until taken: one that arrives before the controller's graph lists its
    # publisher is refused (as at every start)
    assert _sent_until(spin, executor, lambda: rig.ref_pub.publish(
        _ref(1, names, [0.0, 0.0], [0.0, 0.0], [0.0, 0.0])),
        lambda: rig.node.reference is not None)
    # received at 1000 s, counted from its stamp (the age it had on arrival)
    assert _sent_until(spin, executor, lambda: rig.state_pub.publish(
        _state(time.time_ns(), names, [0.1, 0.0], [0.0, 0.0])),
        lambda: safety.supervisor.last_state_time is not None)
    t_state = safety.supervisor.last_state_time
    assert 999.9 < t_state <= 1000.0
    assert safety.timeout_check_gap is None
    with rig.node._lock:        # the control thread's watchdog checks wait meanwhile
        for dt in (0.005, 0.010, 0.015, 0.060):
            clock[0] = t_state + dt
            safety.check()
        assert safety.supervisor.reason.value == 'state_timeout'
        assert safety.timeout_check_gap == pytest.approx(0.045)
        values = safety.diagnostics_values()
    assert values['state_timeout_check_gap_ms'] == '45.000'
    assert 'no valid joint state for 60.0 ms (timeout 20.0 ms)' in values['detail']
    safety.now = time.monotonic
    spin(executor, 0.2)


PANDA = Path(__file__).resolve().parents[2] / 'shared' / 'fixtures' / 'urdf' / 'panda.urdf'
PANDA_JOINTS = [f'panda_joint{k}' for k in range(1, 8)]


def _panda_rnea(q, qd, qdd):
    """Inverse dynamics of the Panda straight from Pinocchio, the fingers locked at 0."""
    import pinocchio as pin
    full = pin.buildModelFromXML(PANDA.read_text())
    locked = [full.getJointId(j) for j in ('panda_finger_joint1', 'panda_finger_joint2')]
    model = pin.buildReducedModel(full, locked, pin.neutral(full))
    return pin.rnea(model, model.createData(), np.array(q), np.array(qd), np.array(qdd))


def test_seven_joint_arm_from_robot_description(ros_context, executor, probe, spin):
    base = {'mode': 'lockstep', 'robot_description': PANDA.read_text(),
            'safety.reference_step_limit': 10.0}
    rig = Rig(ros_context, executor, probe, spin, base=base)
    node = rig.node
    assert node.joints == PANDA_JOINTS                  # the movable joints, chain order
    assert list(node.get_parameter('torque_limit').value) == [87.0] * 4 + [12.0] * 3
    assert list(node.get_parameter('safety.position_upper').value)[3] == -0.0698
    q = [0.1, -0.3, 0.2, -1.5, 0.1, 1.2, 0.3]
    qd = [0.05, -0.02, 0.01, 0.03, -0.04, 0.02, 0.01]
    r = [v + 0.01 for v in q]
    rv = [0.02] * 7
    ra = [0.1, -0.1, 0.05, 0.0, 0.2, -0.05, 0.1]
    # names in another order, with the fingers too: the command is in joints order
    names = PANDA_JOINTS[::-1] + ['panda_finger_joint1']
    cmd = rig.tick(1_000_000, names, q[::-1] + [0.01], qd[::-1] + [0.0], PANDA_JOINTS, r, rv,
                   ra)
    assert list(cmd.name) == PANDA_JOINTS
    a = np.array(ra) - 40.0 * (np.array(qd) - rv) - 400.0 * (np.array(q) - r)
    # + the friction feed-forward at the reference velocity: the fixture's <dynamics
    # damping="0.003" friction="0.0"> on every joint
    expected = _panda_rnea(q, qd, a) + 0.003 * np.array(rv)
    assert np.abs(expected).max() > 5.0                 # gravity of a real arm, not zeros
    np.testing.assert_allclose(cmd.effort, expected, rtol=1e-9, atol=1e-9)
    assert list(probe.msgs['/effort_controller/commands'][-1].data) == list(cmd.effort)

    # runtime changes are sized by the arm and stay inside the hard limits
    res = rig.set_params(Parameter('kp', value=[100.0, 50.0]))
    assert not res[0].successful and 'kp: must have 7 elements (got 2)' in res[0].reason
    res = rig.set_params(Parameter('torque_limit', value=[87.0] * 4 + [12.0, 12.0, 20.0]))
    assert not res[0].successful and 'hard_limits.torque[6] = 12' in res[0].reason
    res = rig.set_params(Parameter('torque_limit', value=[10.0] * 7))
    assert res[0].successful, res[0].reason
    cmd = rig.tick(2_000_000, PANDA_JOINTS, q, qd, PANDA_JOINTS, r, rv, ra)
    np.testing.assert_allclose(cmd.effort, np.clip(expected, -10.0, 10.0), rtol=1e-9,
                               atol=1e-9)


def test_urdf_defaults_follow_the_law(ros_context):
    """
    law: pd_gravity from a URDF: gains per joint in N m/rad from the arm, not 400 / 40.

    ``m_k w^2``, ``2 w m_k`` (w 20 rad/s) with ``m_k`` the smallest ``1 / (M^-1)_kk`` over
    the poses of ``range_poses``, M straight from Pinocchio; the hold gains are a bandwidth
    through the mass matrix, the same for every joint.
    """
    import pinocchio as pin
    from manip_control.arm_model import UrdfArm
    from manip_control.hold_design import range_poses
    full = pin.buildModelFromXML(PANDA.read_text())
    locked = [full.getJointId(j) for j in ('panda_finger_joint1', 'panda_finger_joint2')]
    model = pin.buildReducedModel(full, locked, pin.neutral(full))
    data = model.createData()
    m = np.min([1.0 / np.diag(np.linalg.inv(pin.crba(model, data, q)))
                for q in range_poses(UrdfArm.from_file(PANDA))], axis=0)
    node = make_node(ControllerNode, ros_context, controller_specs(),
                     {'robot_description': PANDA.read_text(), 'law': 'pd_gravity',
                      'autostart': False})
    np.testing.assert_allclose(node.get_parameter('kp').value, 400.0 * m, rtol=1e-9)
    np.testing.assert_allclose(node.get_parameter('kd').value, 40.0 * m, rtol=1e-9)
    assert list(node.get_parameter('safety.hold_kp').value) == [100.0] * 7
    assert list(node.get_parameter('safety.hold_kd').value) == [20.0] * 7
    node = make_node(ControllerNode, ros_context, controller_specs(),
                     {'robot_description': PANDA.read_text(), 'autostart': False})
    assert list(node.get_parameter('kp').value) == [400.0] * 7


@pytest.mark.parametrize('values,match', [
    ({'robot_description': '<robot name="x"><link name="a"/>'},
     r'parameter robot_description \(node controller\): .*'),
    ({'joints': ['panda_joint1', 'elbow']}, r'parameter robot_description .*elbow'),
])
def test_bad_robot_description_is_refused_by_name(ros_context, values, match):
    vals = {'robot_description': PANDA.read_text(), **values}
    with pytest.raises(ParameterError, match=match) as err:
        make_node(ControllerNode, ros_context, controller_specs(), vals)
    assert '\n' not in str(err.value)


PENDULUM = """<robot name="pendulum">
  <link name="base"/>
  <link name="arm">
    <inertial><origin xyz="0 0 -0.5"/><mass value="2.0"/>
      <inertia ixx="0.05" ixy="0" ixz="0" iyy="0.05" iyz="0" izz="0.01"/></inertial>
  </link>
  <joint name="swing" type="continuous">
    <parent link="base"/><child link="arm"/><axis xyz="0 1 0"/>
  </joint>
</robot>"""


def test_joint_without_effort_limit_needs_a_torque_limit(ros_context):
    vals = {'robot_description': PENDULUM}
    with pytest.raises(ParameterError, match=r'^parameter torque_limit\[0\] \(node controller\): '
                                             r'joint swing has no effort limit in '
                                             r'robot_description; give torque_limit') as err:
        make_node(ControllerNode, ros_context, controller_specs(), vals)
    assert '\n' not in str(err.value)
    node = make_node(ControllerNode, ros_context, controller_specs(),
                     {**vals, 'torque_limit': [15.0], 'autostart': False})
    assert node.joints == ['swing']
    assert list(node.get_parameter('torque_limit').value) == [15.0]
    # a continuous joint: the safety envelope is +-2 pi
    assert list(node.get_parameter('safety.position_upper').value) == [2.0 * math.pi]


def test_a_lost_reference_is_stopped_from_its_velocity(ros_context, executor, probe, spin):
    """
    The law gets the watchdog's whole stop: its position, velocity and acceleration.

    A reference moving at 1 rad/s on joint 1 stops arriving; the state keeps coming. After
    ``reference_timeout`` (50 ms) the commands' reference decelerates from 1 rad/s at the
    reference acceleration limit (5 rad/s^2 on joint 1: 0.2 s to rest) and stops 0.1 rad on,
    continuous in velocity. The node had passed the stop's position on with zero velocity,
    a step of the velocity error by the reference's speed that lost a loaded Panda.
    """
    rig = Rig(ros_context, executor, probe, spin, **{'safety.reference_timeout': 0.05})
    names = ['joint1', 'joint2']
    stamp, q = 1_000_000, 0.0
    for _ in range(5):                  # a moving reference, tracked exactly
        last = rig.tick(stamp, names, [q, 0.0], [1.0, 0.0], names, [q, 0.0], [1.0, 0.0],
                        [0.0, 0.0])
        stamp += 1_000_000
        q += 0.001
    assert last.velocity[0] == pytest.approx(1.0)
    q_last = last.position[0]
    time.sleep(0.07)                    # past the timeout, well before the stop's end

    def state_only(stamp):
        m = probe.msgs['/joint_commands']
        n = len(m)
        rig.state_pub.publish(_state(stamp, names, [q, 0.0], [1.0, 0.0]))
        assert spin(executor, 5.0, lambda: len(m) > n), 'no command for a state alone'
        return m[-1]
    held = state_only(stamp)
    assert 0.0 < held.velocity[0] < 1.0, list(held.velocity)
    assert held.position[0] > q_last
    time.sleep(0.3)                     # past the stop's end
    rest = state_only(stamp + 1_000_000)
    assert rest.velocity[0] == 0.0
    assert rest.position[0] == pytest.approx(q_last + 1.0 / (2.0 * 5.0), abs=1e-9)


def test_joint_stiffness_default_follows_the_start_values(ros_context):
    """
    The xArm 7's ``joint_stiffness`` default: ``b w`` at the node's rate and nominal damping.

    At 1 kHz with the URDF's damping: 150 rad/s times it (every joint of this arm); at 100 Hz
    a tenth (the sampled loop keeps its margin in ticks); with a ``nominal.friction.b`` start
    value, that damping, and 0 on a joint given none.
    """
    xarm = PANDA.parent / 'xarm7.urdf'
    text = xarm.read_text()
    b = [10.0, 10.0, 5.0, 5.0, 5.0, 2.0, 2.0]

    def stiffness(**values):
        node = make_node(ControllerNode, ros_context, controller_specs(),
                         {'robot_description': text, 'autostart': False, **values})
        return list(node.get_parameter('joint_stiffness').value)
    assert stiffness() == pytest.approx([150.0 * v for v in b])
    assert stiffness(control_rate=100.0) == pytest.approx([15.0 * v for v in b])
    lower = [8.0] + b[1:6] + [0.0]
    assert stiffness(**{'nominal.friction.b': lower}) == pytest.approx(
        [150.0 * v for v in lower])


def test_joint_stiffness_limit_default_caps_the_speed_it_drives(ros_context):
    """
    The xArm 7's ``joint_stiffness_limit`` default: ``b`` times a quarter of its velocity limit.

    Read-only, as the stiffness. The URDF gives 3.14 rad/s on every joint: 0.785 ``b``; with a
    ``nominal.friction.b`` start value of 0 on the wrist (no stiffness there), its torque limit.
    """
    from rclpy.parameter import Parameter
    text = (PANDA.parent / 'xarm7.urdf').read_text()
    b = [10.0, 10.0, 5.0, 5.0, 5.0, 2.0, 2.0]

    def node_of(**values):
        return make_node(ControllerNode, ros_context, controller_specs(),
                         {'robot_description': text, 'autostart': False, **values})
    node = node_of()
    assert list(node.get_parameter('joint_stiffness_limit').value) == pytest.approx(
        [0.785 * v for v in b])
    result = node.set_parameters([Parameter('joint_stiffness_limit',
                                            value=[100.0] * 7)])[0]
    assert not result.successful and 'joint_stiffness_limit' in result.reason, result.reason
    effort = list(node.get_parameter('torque_limit').value)
    node = node_of(**{'nominal.friction.b': b[:6] + [0.0]})
    clamp = list(node.get_parameter('joint_stiffness_limit').value)
    assert clamp == pytest.approx([0.785 * v for v in b[:6]] + [effort[6]])
