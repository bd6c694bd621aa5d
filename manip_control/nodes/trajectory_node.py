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
Trajectory node: the reference generator (core :mod:`manip_control.trajectories`).

Publishes
    ``reference`` (trajectory_msgs/JointTrajectory: header.stamp = sample time, joint_names,
    one point with positions [rad], velocities [rad/s], accelerations [rad/s^2]);
    ``~/goal_status`` (std_msgs/String: ``accepted: ...`` or ``rejected: <reason>`` per goal).
Subscribes
    ``~/goal`` (trajectory_msgs/JointTrajectory: timed waypoints, joints matched by name);
    ``/clock`` in lockstep (one reference per clock tick, stamped with it).

Time base: the trajectory time is the sim time in lockstep (``t_k = k T``, the same floats as
:func:`manip_control.simulation.run_closed_loop`) and the wall time since the first sample in
real time (a free-running timer at ``control_rate``).

Goals: ``header.stamp`` zero means "start now", otherwise the start time. Each point's
``time_from_start`` must be >= 0 and strictly increasing; positions are required, velocities
optional (all points or none; zero at the last point), accelerations are ignored (the path is
a C2 piecewise quintic through the waypoints, :class:`~manip_control.trajectories.Waypoints`).
If the first point is later than now, the motion starts from the current desired position
(at rest). A goal with unknown, missing or repeated joint names, no points, non-increasing
times, non-finite values, or a path beyond ``limits.*`` (checked over the whole path, so
overshoot between waypoints counts) is rejected with the reason logged and published on
``~/goal_status``; the current motion continues.
"""

from __future__ import annotations

import sys

from manip_control.nodes import cdr
from manip_control.nodes.common import data_qos
from manip_control.nodes.common import guarded
from manip_control.nodes.common import PUBLISH_DEPTH
from manip_control.nodes.common import run_node
from manip_control.nodes.common import steady_clock
from manip_control.nodes.recorder_gate import RecorderGate
from manip_control.nodes.ros_params import arm_control_defaults
from manip_control.nodes.ros_params import arm_from_description
from manip_control.nodes.ros_params import declare_parameters
from manip_control.nodes.ros_params import print_node_help
from manip_control.nodes.ros_params import RECORDER_WAIT
from manip_control.nodes.ros_params import trajectory_config
from manip_control.nodes.ros_params import trajectory_specs
from manip_control.nodes.ros_params import wants_help
from manip_control.safety import map_reference
from manip_control.safety import Refusal
from manip_control.trajectories import Hold
from manip_control.trajectories import Trajectory
from manip_control.trajectories import trajectory_from_config
from manip_control.trajectories import TrajectoryError
from manip_control.trajectories import validate_limits
from manip_control.trajectories import Waypoints
from rclpy.node import Node
from rosgraph_msgs.msg import Clock
from std_msgs.msg import String
from trajectory_msgs.msg import JointTrajectory


class GoalError(ValueError):
    """A goal that cannot be accepted; the message is the reason."""


def goal_to_trajectory(msg: JointTrajectory, joints, now: float, current_position,
                       origin_ns: int, position_limits, velocity_limits) -> Trajectory:
    """
    Validate a JointTrajectory goal and build the new reference (trajectory time).

    Parameters
    ----------
    msg : JointTrajectory
        The goal: joint names, timed points with positions (and optionally velocities).
    joints : sequence of str
        Configured joint names (the order of the result).
    now : float
        Current trajectory time [s].
    current_position : sequence of float
        Current desired position, the start of a goal whose first point is later than now.
    origin_ns : int
        ROS time [ns] of trajectory time 0 (for goals with a non-zero header.stamp).
    position_limits : list of [lower, upper]
        Position limits per joint [rad]; the whole path must stay inside.
    velocity_limits : list of float
        Speed limits per joint [rad/s].

    Raises
    ------
    GoalError
        With the reason.

    """
    names = list(msg.joint_names)
    joints = list(joints)
    unknown = [n for n in names if n not in joints]
    if unknown:
        raise GoalError(f'unknown joint names {unknown} (configured: {joints})')
    missing = [j for j in joints if j not in names]
    if missing:
        raise GoalError(f'missing joint names {missing}')
    if len(set(names)) != len(names):
        raise GoalError(f'repeated joint names in {names}')
    if not msg.points:
        raise GoalError('no points')
    with_vel = len(msg.points[0].velocities) > 0
    times, positions, velocities = [], [], []
    for k, pt in enumerate(msg.points):
        t = pt.time_from_start.sec + pt.time_from_start.nanosec * 1e-9
        if t < 0.0:
            raise GoalError(f'points[{k}].time_from_start: must be >= 0 (got {t} s)')
        if times and not t > times[-1]:
            raise GoalError(f'points[{k}].time_from_start: times must be strictly increasing '
                            f'(got {t} s after {times[-1]} s)')
        times.append(t)
        # the point check of every JointTrajectory input (the controller's /reference too)
        point = map_reference(joints, names, pt.positions, pt.velocities, pt.accelerations)
        if isinstance(point, Refusal):
            raise GoalError(f'points[{k}]: {point}')
        positions.append(list(point.q))
        if (len(pt.velocities) > 0) != with_vel:
            raise GoalError(f'points[{k}].velocities: give velocities for all points or none')
        if with_vel:
            velocities.append(list(point.qd))
    start_ns = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
    start = now if start_ns == 0 else (start_ns - origin_ns) * 1e-9
    if start < now - 1e-9:
        raise GoalError(f'header.stamp: start time {start:.6f} s is in the past '
                        f'(now {now:.6f} s); use 0 for "now"')
    times = [start + t for t in times]
    if times[0] > now + 1e-9:
        times.insert(0, now)
        positions.insert(0, [float(v) for v in current_position])
        if with_vel:
            velocities.insert(0, [0.0] * len(joints))
    try:
        if len(times) == 1:
            if with_vel and any(velocities[0]):
                raise GoalError('points[0].velocities: a single point must have zero velocity')
            traj = Hold(positions[0], n_joints=len(joints), path='goal')
        else:
            traj = Waypoints(times, positions, velocities if with_vel else None,
                             n_joints=len(joints), path='goal')
        validate_limits(traj, position_limits, velocity_limits, joint_names=joints,
                        path='goal')
    except TrajectoryError as exc:
        raise GoalError(str(exc)) from None
    return traj


class TrajectoryNode(Node):
    """
    The reference generator as a ROS node.

    Parameters
    ----------
    node_name : str
    parameter_overrides : list of rclpy Parameter, optional
    **kwargs
        Passed to ``rclpy.node.Node``.

    """

    def __init__(self, node_name: str = 'trajectory', *, parameter_overrides=None, **kwargs):
        super().__init__(node_name, parameter_overrides=parameter_overrides, **kwargs)
        # an arm from robot_description sizes the joints, limits and initial reference
        arm, urdf = arm_from_description(self)
        arm_defaults = None if arm is None else arm_control_defaults(self, arm, urdf)
        self.values = declare_parameters(self, trajectory_specs(arm_defaults))
        cfg = self.config = trajectory_config(self.values, self.get_name(), arm_defaults)
        self.joints = list(cfg.joints)
        self.lockstep = cfg.mode == 'lockstep'
        self.period = cfg.period
        self.rate = cfg.control_rate
        self.trajectory: Trajectory = trajectory_from_config(cfg.trajectory, len(self.joints))
        self.goals_accepted = 0
        self.goals_rejected = 0
        self.last_rejection = ''
        self.published = 0
        self.callback_errors = 0
        self.time = 0.0                 # trajectory time of the last sample [s]
        self._origin_ns: int | None = 0 if self.lockstep else None

        qos = data_qos()
        self._ref_pub = self.create_publisher(JointTrajectory, 'reference',
                                              data_qos(PUBLISH_DEPTH))
        self._status_pub = self.create_publisher(String, '~/goal_status', 10)
        self.create_subscription(JointTrajectory, '~/goal', self._on_goal, 10)
        self._encoder = cdr.ReferenceEncoder(self.joints)   # raw CDR publish (nodes/cdr.py)
        self._recorder_gate = None
        if self.lockstep:
            self.create_subscription(Clock, '/clock', self._on_clock, qos, raw=True)
            if self.values['wait_for_recorder']:
                # the first reference waits until the recorder's subscription is matched
                self._recorder_gate = RecorderGate(self, self.values['wait_for_recorder'],
                                                   RECORDER_WAIT)
        else:
            from rclpy.clock import Clock as RclClock
            from rclpy.clock import ClockType
            self._wall = RclClock(clock_type=ClockType.SYSTEM_TIME)
            self._timer = self.create_timer(self.period, self._on_timer, clock=steady_clock())
        self.add_on_set_parameters_callback(self._check_parameters)
        self.get_logger().info(f'{cfg.trajectory.get("type")} reference at '
                               f'{cfg.control_rate:g} Hz, {cfg.mode}')

    def _check_parameters(self, params: list):
        """Refuse a runtime change of ``use_sim_time``: the node publishes on its time base."""
        from rcl_interfaces.msg import SetParametersResult
        for p in params:
            if (p.name == 'use_sim_time'
                    and bool(p.value) != bool(self.get_parameter('use_sim_time').value)):
                return SetParametersResult(
                    successful=False,
                    reason='use_sim_time: cannot change while the node publishes (its time '
                           'base is chosen at start by mode); restart the node to change it')
        return SetParametersResult(successful=True)

    # -- sampling ---------------------------------------------------------------------------
    def sample_time(self, t_ns: int) -> float:
        """Trajectory time of a lockstep clock stamp: ``k T`` exactly when on the tick grid."""
        k = round(t_ns * 1e-9 * self.rate)
        if abs(round(k * self.period * 1e9) - t_ns) <= 1:
            return k * self.period
        return t_ns * 1e-9

    def publish_sample(self, t: float, t_ns: int) -> None:
        """Sample at trajectory time ``t`` and publish it stamped ``t_ns``."""
        q, qd, qdd = self.trajectory.sample(t)
        self._ref_pub.publish(self._encoder.encode(t_ns, q.tolist(), qd.tolist(),
                                                   qdd.tolist()))
        self.time = t
        self.published += 1

    @guarded
    def _on_clock(self, raw: bytes) -> None:
        t_ns, reason = cdr.decode_clock(raw)
        if reason:
            self.get_logger().warning(f'/clock ignored ({reason})', throttle_duration_sec=1.0)
            return
        if self._recorder_gate is not None and not self._recorder_gate.ready():
            return                      # the plant sends tick 0 again
        self.publish_sample(self.sample_time(t_ns), t_ns)

    @guarded
    def _on_timer(self) -> None:
        now = self._wall.now().nanoseconds
        if self._origin_ns is None:
            self._origin_ns = now
        self.publish_sample((now - self._origin_ns) * 1e-9, now)

    # -- goals ------------------------------------------------------------------------------
    def _now(self) -> float:
        if self.lockstep or self._origin_ns is None:
            return self.time
        return (self._wall.now().nanoseconds - self._origin_ns) * 1e-9

    @guarded
    def _on_goal(self, msg: JointTrajectory) -> None:
        now = self._now()
        current = self.trajectory.sample(now)[0]
        try:
            traj = goal_to_trajectory(msg, self.joints, now, current, self._origin_ns or 0,
                                      self.config.position_limits,
                                      self.config.velocity_limits)
        except GoalError as exc:
            self.goals_rejected += 1
            self.last_rejection = str(exc)
            self.get_logger().error(f'goal rejected: {exc}; the current motion continues')
            self._status_pub.publish(String(data=f'rejected: {exc}'))
            return
        self.trajectory = traj
        self.goals_accepted += 1
        end = traj.end_time
        text = (f'accepted: {len(msg.points)} point(s), motion from t = {now:.3f} s to '
                f't = {max(end, now):.3f} s')
        self.get_logger().info(f'goal {text}')
        self._status_pub.publish(String(data=text))


def main(args=None) -> int:
    """``ros2 run manip_control trajectory [--ros-args ...]``; ``--help`` lists parameters."""
    if wants_help(args):
        return print_node_help('trajectory', __doc__, trajectory_specs())
    return run_node(TrajectoryNode, args)


if __name__ == '__main__':
    sys.exit(main())
