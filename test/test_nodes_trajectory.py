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
Trajectory node: reference samples on the tick grid, goals validated and followed.

Goals are rejected with the reason (the current motion continuing); accepted goals are
followed.
"""

import math

from builtin_interfaces.msg import Duration
from conftest import make_node
from manip_control.nodes.ros_params import trajectory_specs
from manip_control.nodes.trajectory_node import goal_to_trajectory
from manip_control.nodes.trajectory_node import GoalError
from manip_control.nodes.trajectory_node import TrajectoryNode
from manip_control.trajectories import trajectory_from_config
import numpy as np
import pytest
from rosgraph_msgs.msg import Clock
from std_msgs.msg import String
from trajectory_msgs.msg import JointTrajectory
from trajectory_msgs.msg import JointTrajectoryPoint

J = ['joint1', 'joint2']
LIMITS = [[-1.0, 1.0], [-2.0, 2.0]]
VLIM = [1.0, 1.0]


def goal(names, points, stamp_ns=0):
    """points: list of (t, positions[, velocities[, accelerations]])."""
    m = JointTrajectory(joint_names=names)
    m.header.stamp.sec, m.header.stamp.nanosec = divmod(stamp_ns, 10 ** 9)
    for p in points:
        t, pos = p[0], p[1]
        pt = JointTrajectoryPoint(positions=pos)
        if len(p) > 2:
            pt.velocities = p[2]
        if len(p) > 3:
            pt.accelerations = p[3]
        pt.time_from_start = Duration(sec=int(t), nanosec=int(round((t % 1) * 1e9)))
        m.points.append(pt)
    return m


def build(msg, now=0.0, current=(0.0, 0.0)):
    return goal_to_trajectory(msg, J, now, current, 0, LIMITS, VLIM)


def test_goal_by_name_starts_from_the_current_position():
    traj = build(goal(['joint2', 'joint1'], [(2.0, [0.5, 0.25])]), now=1.0,
                 current=(0.1, -0.1))
    q0, qd0, _ = traj.sample(1.0)
    np.testing.assert_allclose(q0, [0.1, -0.1])
    np.testing.assert_allclose(qd0, [0.0, 0.0])
    q1, qd1, _ = traj.sample(3.0)
    np.testing.assert_allclose(q1, [0.25, 0.5])     # reordered by name
    np.testing.assert_allclose(qd1, [0.0, 0.0])


def test_goal_with_velocities_and_a_point_at_now():
    traj = build(goal(J, [(0.0, [0.0, 0.0], [0.0, 0.0]), (1.0, [0.2, 0.1], [0.1, 0.0]),
                          (2.0, [0.3, 0.2], [0.0, 0.0])]))
    np.testing.assert_allclose(traj.sample(1.0)[1], [0.1, 0.0], atol=1e-12)
    single = build(goal(J, [(0.0, [0.3, 0.2])]), now=4.0)
    np.testing.assert_allclose(single.sample(10.0)[0], [0.3, 0.2])


@pytest.mark.parametrize('msg, why', [
    (goal(['joint1', 'wrist'], [(1.0, [0.0, 0.0])]), "unknown joint names ['wrist']"),
    (goal(['joint1'], [(1.0, [0.0])]), "missing joint names ['joint2']"),
    (goal(['joint1', 'joint2', 'joint1'], [(1.0, [0.0, 0.0, 0.0])]), 'repeated joint names'),
    (goal(J, []), 'no points'),
    (goal(J, [(1.0, [0.0, 0.0]), (1.0, [0.1, 0.1])]), 'times must be strictly increasing'),
    (goal(J, [(2.0, [0.0, 0.0]), (1.0, [0.1, 0.1])]), 'times must be strictly increasing'),
    (goal(J, [(1.0, [math.nan, 0.0])]), "points[0]: non_finite: positions of 'joint1' is nan"),
    (goal(J, [(1.0, [0.0, 0.0], [math.inf, 0.0])]),
     "points[0]: non_finite: velocities of 'joint1' is inf"),
    (goal(J, [(1.0, [0.0, 0.0], [0.0, 0.0], [math.nan, 0.0])]),
     "points[0]: non_finite: accelerations of 'joint1' is nan"),
    (goal(J, [(1.0, [0.0])]), 'points[0]: length_mismatch: 1 positions values for 2 joint_names'),
    (goal(J, [(1.0, [0.0, 0.0], [0.0, 0.0]), (2.0, [0.1, 0.1])]),
     'give velocities for all points or none'),
    (goal(J, [(1.0, [1.5, 0.0])]), 'joint1 position reaches 1.5 rad, above the upper limit'),
    (goal(J, [(1.0, [0.0, -2.5])]), 'joint2 position reaches -2.5 rad, below the lower'),
    (goal(J, [(0.1, [0.9, 0.0])]), 'joint1 speed reaches'),
    (goal(J, [(1.0, [0.1, 0.0], [0.5, 0.0])]), 'must be zero at the first and last waypoint'),
    (goal(J, [(1.0, [0.1, 0.0])], stamp_ns=500_000_000), 'is in the past'),
])
def test_invalid_goals_are_rejected_with_the_reason(msg, why):
    with pytest.raises(GoalError) as err:
        build(msg, now=1.0)
    assert why in str(err.value), str(err.value)


def test_goal_overshoot_between_waypoints_counts():
    # waypoints inside the limits, but the C2 path between them overshoots joint1's limit
    msg = goal(J, [(0.5, [0.99, 0.0]), (1.0, [-0.99, 0.0]), (1.5, [0.99, 0.0])])
    with pytest.raises(GoalError, match='joint1'):
        goal_to_trajectory(msg, J, 0.0, (0.0, 0.0), 0, LIMITS, [100.0, 100.0])


def test_node_follows_clock_rejects_bad_goals_and_accepts_good_ones(
        ros_context, executor, probe, spin):
    cfg = {'type': 'sinusoid', 'amplitude': [0.5, 0.3], 'omega': [0.5, 0.5]}
    node = make_node(TrajectoryNode, ros_context, trajectory_specs(), {
        'trajectory': str(cfg).replace("'", ''), 'limits.position_lower': [-1.0, -2.0],
        'limits.position_upper': [1.0, 2.0], 'limits.velocity': [1.0, 1.0]})
    executor.add_node(node)
    executor.add_node(probe.node)
    probe.sub(JointTrajectory, '/reference')
    probe.sub(String, '/trajectory/goal_status')
    refs, status = probe.msgs['/reference'], probe.msgs['/trajectory/goal_status']
    clock = probe.pub(Clock, '/clock')
    goals = probe.pub(JointTrajectory, '/trajectory/goal')
    assert spin(executor, 5.0, lambda: clock.get_subscription_count() >= 1
                and goals.get_subscription_count() >= 1
                and node._ref_pub.get_subscription_count() >= 1)
    original = trajectory_from_config(cfg, 2)

    def tick(k):
        n = len(refs)
        c = Clock()
        c.clock.sec, c.clock.nanosec = divmod(k * 1_000_000, 10 ** 9)
        clock.publish(c)
        assert spin(executor, 3.0, lambda: len(refs) > n)
        return refs[-1]

    r = tick(1234)
    assert r.header.stamp.nanosec == 234_000_000 and r.header.stamp.sec == 1
    q, qd, qdd = original.sample(1234 * 0.001)       # exactly the tick-grid time k*T
    assert list(r.points[0].positions) == q.tolist()
    assert list(r.points[0].velocities) == qd.tolist()
    assert list(r.points[0].accelerations) == qdd.tolist()
    # bad goals: rejected with the reason, the sinusoid goes on
    for bad, why in ((goal(['joint1', 'wrist'], [(1.0, [0.0, 0.0])]), 'unknown joint names'),
                     (goal(J, [(1.0, [5.0, 0.0])]), 'above the upper limit'),
                     (goal(J, [(1.0, [0.0, 0.0]), (0.5, [0.1, 0.0])]), 'strictly increasing')):
        goals.publish(bad)
        n = len(status)
        assert spin(executor, 3.0, lambda: len(status) > n)
        assert status[-1].data.startswith('rejected: ') and why in status[-1].data
    r = tick(1500)
    assert list(r.points[0].positions) == original.sample(1.5)[0].tolist()
    assert node.goals_rejected == 3 and node.goals_accepted == 0
    # a good goal: from the current desired position to [0.2, -0.4] in 2 s
    n = len(status)
    goals.publish(goal(['joint2', 'joint1'], [(2.0, [-0.4, 0.2])]))
    assert spin(executor, 3.0, lambda: len(status) > n)
    assert status[-1].data.startswith('accepted: ') and node.goals_accepted == 1
    r = tick(1500)
    np.testing.assert_allclose(r.points[0].positions, original.sample(1.5)[0], atol=1e-12)
    r = tick(3600)
    np.testing.assert_allclose(r.points[0].positions, [0.2, -0.4], atol=1e-12)
    assert list(r.points[0].velocities) == [0.0, 0.0]
    assert node.callback_errors == 0
