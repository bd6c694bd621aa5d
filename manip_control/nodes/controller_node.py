"""Controller node: the core :class:`~manip_control.control.Controller` behind topics.

Subscribes
    ``joint_states`` (sensor_msgs/JointState, matched by joint name, extra joints ignored);
    ``reference`` (trajectory_msgs/JointTrajectory, one point: positions, velocities,
    accelerations, matched by name).
Publishes
    ``effort_controller/commands`` (std_msgs/Float64MultiArray, torque command after limits
    in ``joints`` order) and ``joint_commands`` (sensor_msgs/JointState: header.stamp = stamp
    of the joint state the command was computed from, effort = command after limits,
    position / velocity = the q_d / qd_d used).

When a tick runs
    lockstep: when the joint state of stamp s and the reference of stamp s have both arrived
    (once per stamp; a re-sent state of an already computed stamp gets the same command
    again, so the plant's start-up re-sends are idempotent);
    realtime, ``trigger: timer``: a free-running wall timer at ``control_rate`` with the
    latest state and reference; ``trigger: state``: once per received joint state with the
    latest reference.

Runtime parameters: ``kp``, ``kd``, ``ki``, ``torque_limit`` (``ros2 param set``); an invalid
value is refused with the reason in the SetParametersResult, a valid one is staged and takes
effect at the next tick. Every other parameter is read-only.

Structure (for the safety layer of issue 6): :meth:`ControllerNode.on_joint_state` /
:meth:`on_reference` convert messages and store them, :meth:`tick` runs one control step
(:meth:`compute` is the call into the core, :meth:`publish_command` the output).
"""

from __future__ import annotations

import sys
from typing import NamedTuple

from rcl_interfaces.msg import SetParametersResult
from rclpy.node import Node
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory

from manip_control.control import ControlOutput, Controller, check_gain_update
from manip_control.nodes import cdr
from manip_control.nodes.common import data_qos, guarded, run_node, steady_clock
from manip_control.nodes.messages import NameMatcher, joint_state_values, reference_values
from manip_control.nodes.ros_params import (
    RUNTIME_GAINS,
    coerce_parameter,
    controller_config,
    controller_specs,
    declare_parameters,
)
from manip_control.parameters import ParameterError


class StateSample(NamedTuple):
    """Measured joint state in the controller's joint order."""

    stamp_ns: int
    q: list
    qd: list


class ReferenceSample(NamedTuple):
    """Reference sample in the controller's joint order."""

    stamp_ns: int
    q_d: list
    qd_d: list
    qdd_d: list


class ControllerNode(Node):
    """The feedback controller as a ROS node.

    Parameters
    ----------
    node_name : str
    parameter_overrides : list of rclpy Parameter, optional
    keep_history : bool
        Keep per-tick records in :attr:`history` and latencies in :attr:`latencies`.
    **kwargs
        Passed to ``rclpy.node.Node``.
    """

    def __init__(self, node_name: str = 'controller', *, parameter_overrides=None,
                 keep_history: bool = False, **kwargs):
        super().__init__(node_name, parameter_overrides=parameter_overrides, **kwargs)
        self._specs = {s.name: s for s in controller_specs()}
        self.values = declare_parameters(self, list(self._specs.values()))
        cfg = self.config = controller_config(self.values, self.get_name())
        self.joints = list(cfg.joints)
        self.lockstep = cfg.mode == 'lockstep'
        self.period = cfg.period
        self.controller = Controller(cfg.controller, cfg.period)
        self._matcher_state = NameMatcher(self.joints)
        self._matcher_ref = NameMatcher(self.joints)
        self._pending: dict[str, tuple] = {}
        self.add_pre_set_parameters_callback(self._coerce_parameters)
        self.add_on_set_parameters_callback(self._check_parameters)

        self.state: StateSample | None = None
        self.reference: ReferenceSample | None = None
        self._last_stamp: int | None = None
        self._last_used_state: int | None = None
        self.ticks = 0
        self.published_commands = 0
        self.refused_states = 0
        self.refused_references = 0
        self.last_refusal = ''
        self.callback_errors = 0
        self.history: list | None = [] if keep_history else None
        self.latencies: list | None = [] if keep_history else None

        qos = data_qos()
        self._array_pub = self.create_publisher(Float64MultiArray, 'effort_controller/commands',
                                                qos)
        self._cmd_pub = self.create_publisher(JointState, 'joint_commands', qos)
        # Hot-path topics are published and taken as CDR bytes (see nodes/cdr.py).
        self._cmd_enc = cdr.JointStateEncoder(self.joints)
        self._array_enc = cdr.Float64ArrayEncoder(len(self.joints))
        self._cmd_raw = self._array_raw = b''
        self.create_subscription(JointState, 'joint_states', self.on_joint_state, qos,
                                 raw=True)
        self.create_subscription(JointTrajectory, 'reference', self.on_reference, qos,
                                 raw=True)
        self._timer = None
        if not self.lockstep and cfg.trigger == 'timer':
            self._timer = self.create_timer(self.period, self._on_timer, clock=steady_clock())
        from rclpy.clock import Clock, ClockType
        self._wall = Clock(clock_type=ClockType.SYSTEM_TIME)
        self.get_logger().info(
            f'{cfg.controller.law} at {cfg.control_rate:g} Hz, {cfg.mode}'
            + ('' if self.lockstep else f' (trigger: {cfg.trigger})'))

    # -- input ------------------------------------------------------------------------------
    @guarded
    def on_joint_state(self, raw: bytes) -> None:
        """Store the measured state of the configured joints (by name); maybe tick."""
        msg, reason = cdr.decode_joint_state(raw)
        if not reason:
            stamp, names, position, velocity, _ = msg
            vals, reason = joint_state_values(names, position, velocity, self._matcher_state)
        if reason:
            self.refused_states += 1
            self._warn_refused('joint state', reason)
            return
        self.state = StateSample(stamp, vals[0], vals[1])
        if self.lockstep:
            if stamp == self._last_stamp:
                self._republish()           # the plant re-sent a tick: same answer again
            else:
                self._lockstep_try()
        elif self.config.trigger == 'state':
            if self.reference is not None:
                self.tick()

    @guarded
    def on_reference(self, raw: bytes) -> None:
        """Store the reference sample (by name); maybe tick (lockstep)."""
        msg, reason = cdr.decode_reference(raw)
        if not reason:
            stamp = msg[0]
            vals, reason = reference_values(msg[1], msg[2], msg[3], msg[4], self._matcher_ref)
        if reason:
            self.refused_references += 1
            self._warn_refused('reference', reason)
            return
        self.reference = ReferenceSample(stamp, *vals)
        if self.lockstep and stamp != self._last_stamp:
            self._lockstep_try()

    def _warn_refused(self, what: str, reason: str) -> None:
        self.last_refusal = f'{what}: {reason}'
        self.get_logger().warning(f'{what} ignored ({reason})', throttle_duration_sec=1.0)

    def _lockstep_try(self) -> None:
        st, ref = self.state, self.reference
        if st is not None and ref is not None and st.stamp_ns == ref.stamp_ns:
            self.tick()

    @guarded
    def _on_timer(self) -> None:
        if self.state is not None and self.reference is not None:
            self.tick()

    # -- the control step -------------------------------------------------------------------
    def tick(self) -> ControlOutput:
        """One control step with the stored state and reference: compute, publish."""
        if self._pending:
            self._apply_pending()
        st, ref = self.state, self.reference
        out = self.compute(st, ref)
        self.publish_command(st.stamp_ns, out, ref)
        self.ticks += 1
        self._last_stamp = st.stamp_ns
        if self.history is not None:
            fresh = st.stamp_ns != self._last_used_state
            if not self.lockstep:
                self.latencies.append((self._wall.now().nanoseconds - st.stamp_ns, fresh))
            self.history.append((st.stamp_ns * 1e-9, st.q[0], st.q[1], ref.q_d[0], ref.q_d[1],
                                 ref.qd_d[0], ref.qd_d[1], ref.qdd_d[0], ref.qdd_d[1],
                                 out.tau1, out.tau2, out.saturated1, out.saturated2))
        self._last_used_state = st.stamp_ns
        return out

    def compute(self, st: StateSample, ref: ReferenceSample) -> ControlOutput:
        """The call into the core: torque command after limits for a state and reference."""
        q, qd = st.q, st.qd
        return self.controller.update(q[0], q[1], qd[0], qd[1], ref.q_d[0], ref.q_d[1],
                                      ref.qd_d[0], ref.qd_d[1], ref.qdd_d[0], ref.qdd_d[1])

    def publish_command(self, stamp: int, out: ControlOutput, ref: ReferenceSample) -> None:
        """Publish the command on joint_commands (stamped) and effort_controller/commands."""
        tau = (out.tau1, out.tau2)
        self._cmd_raw = self._cmd_enc.encode(stamp, ref.q_d, ref.qd_d, tau)
        self._array_raw = self._array_enc.encode(tau)
        self._cmd_pub.publish(self._cmd_raw)
        self._array_pub.publish(self._array_raw)
        self.published_commands += 1

    def _republish(self) -> None:
        self._cmd_pub.publish(self._cmd_raw)
        self._array_pub.publish(self._array_raw)
        self.published_commands += 1

    # -- runtime parameters -----------------------------------------------------------------
    def _coerce_parameters(self, params: list) -> list:
        """Pre-set: accept integers for double gains (``ros2 param set kp "[30, 16]"``)."""
        return [coerce_parameter(self._specs[p.name], p) if p.name in self._specs else p
                for p in params]

    def _check_parameters(self, params: list) -> SetParametersResult:
        """Validate runtime changes (core rules); stage valid ones for the next tick."""
        staged = {}
        for p in params:
            if p.name not in RUNTIME_GAINS:
                continue      # read-only ones are refused by rclpy before this callback
            try:
                staged[p.name] = check_gain_update(p.name, list(p.value))
            except ParameterError as exc:
                return SetParametersResult(successful=False, reason=str(exc))
            except TypeError:
                return SetParametersResult(successful=False,
                                           reason=f'{p.name}: must be a list of numbers')
        self._pending.update(staged)
        for name, value in staged.items():
            self.get_logger().info(f'{name} -> {list(value)} from the next tick')
        return SetParametersResult(successful=True)

    def _apply_pending(self) -> None:
        pending, self._pending = self._pending, {}
        c = self.controller
        if 'kp' in pending or 'kd' in pending or 'ki' in pending:
            c.set_gains(pending.get('kp', c.kp), pending.get('kd', c.kd),
                        pending.get('ki', c.ki))
        if 'torque_limit' in pending:
            c.set_torque_limit(pending['torque_limit'])

    def counters(self) -> dict:
        """Counters of the run."""
        return {'ticks': self.ticks, 'refused_states': self.refused_states,
                'refused_references': self.refused_references,
                'last_refusal': self.last_refusal, 'callback_errors': self.callback_errors}


def main(args=None) -> int:
    """``ros2 run manip_control controller [--ros-args ...]``."""
    return run_node(ControllerNode, args)


if __name__ == '__main__':
    sys.exit(main())
