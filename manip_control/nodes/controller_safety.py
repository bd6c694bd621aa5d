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
Safety layer of the controller node: parameters, input validation, watchdogs, safe commands,
lifecycle bookkeeping and diagnostics.

The ROS-free logic is :mod:`manip_control.safety`; :class:`ControllerSafety` binds it to the
(lifecycle) controller node, which keeps its topics, lockstep protocol and feedback law and
calls the helper at these points:

=============================  ==============================================================
node                           helper
=============================  ==============================================================
``__init__``                   declare :func:`safety_specs` with the node's own specs;
                               :func:`safety_from_values` validates them (ParameterError with
                               the ROS parameter name: exit 2 before anything is published)
``on_configure``               ``ControllerSafety(...)`` then :meth:`~ControllerSafety.create`
                               (diagnostics publisher, timers)
``on_activate``                :meth:`~ControllerSafety.activate`
``on_deactivate``              :meth:`~ControllerSafety.deactivate` (zero torque once)
``on_cleanup``/``on_shutdown``  :meth:`~ControllerSafety.release`
joint state callback           :meth:`~ControllerSafety.accept_joint_state` (None: refused)
reference callback             :meth:`~ControllerSafety.accept_reference` (None: refused)
each control step              :meth:`~ControllerSafety.command` with the feedback law
parameter callback             :meth:`~ControllerSafety.check_parameters` /
                               :meth:`~ControllerSafety.apply_parameters`
=============================  ==============================================================

Watchdogs run on the steady clock (sim time stops when the plant that publishes /clock dies
and restarts at zero with a new plant). The helper's watchdog timer (one control period)
evaluates the state watchdog, calls the node's ``before_check`` hook (lockstep: an unanswered
state does not age, a stale reference is replaced by the held one) and, while the states are
stale, publishes the safe command itself at the control rate: nothing else would (a hardware
driver keeps the last command otherwise, and a driver with its own command watchdog would
drop a hold sent once). In lockstep (``command_on_timeout`` false) a state timeout is only
reported: the plant owns the clock and takes nothing but the command of its current tick.

Diagnostics (``~/diagnostics`` = ``/controller/diagnostics``, diagnostic_msgs/DiagnosticArray)
are published at every mode transition, every reference hold / resume and at
``diagnostics_rate``: one status ``<node>: mode``, level OK (normal), WARN (inactive / no state
yet) or ERROR (a fault), message ``normal`` or ``safe: <reason> (<detail>)``, and the values
mode, reason, detail, safe_mode, hold_target, state_age_ms, safe_entries.<reason>,
refused.<input>.<reason>, refused_total, reference_held, reference_age_at_hold_ms,
non_finite_commands, safe_commands.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable, Mapping, Sequence

from manip_control.parameters import ParameterError
from manip_control.safety import map_joint_state
from manip_control.safety import map_reference
from manip_control.safety import Mode
from manip_control.safety import ReferenceSample
from manip_control.safety import ReferenceWatchdog
from manip_control.safety import Refusal
from manip_control.safety import RefusalCounter
from manip_control.safety import RefusalReason
from manip_control.safety import SafeReason
from manip_control.safety import safety_from_dict
from manip_control.safety import SafetyParameters
from manip_control.safety import SafetySupervisor
from manip_control.safety import validate_parameter_updates

PREFIX = 'safety.'
#: Largest joint-state stamp age [s] taken as real (older: clocks not synchronized).
MAX_STAMP_AGE = 10.0
SAFETY_FIELDS = tuple(SafetyParameters.__dataclass_fields__)
DIAGNOSTICS_TOPIC = '~/diagnostics'

__all__ = ['ControllerSafety', 'PREFIX', 'SAFETY_FIELDS', 'DIAGNOSTICS_TOPIC',
           'safety_specs', 'safety_from_values']

_DOC = {
    'safe_mode': ('safe-mode command: hold (gravity-compensated hold with damping at the last '
                  'measured position; pure gravity hold while states are stale) or zero '
                  '(zero torque)', 'hold or zero'),
    'state_timeout': ('joint-state watchdog [s]: older states mean safe mode', '> 0'),
    'reference_timeout': ('reference watchdog [s]: older references mean holding the last '
                          'reference position with zero velocity', '> 0'),
    'position_lower': ('lower position limit per joint [rad]; below it means safe mode',
                       'finite, upper - lower > 4 position_margin'),
    'position_upper': ('upper position limit per joint [rad]; above it means safe mode',
                       'finite, upper - lower > 4 position_margin'),
    'velocity_limit': ('speed limit per joint [rad/s]; |qd| above it means safe mode',
                       'each > 0'),
    'position_margin': ('hysteresis [rad]: after a position fault, resume once every joint is '
                        'this far inside the limits (the hold target is 2x inside)', '>= 0'),
    'velocity_margin': ('hysteresis [rad/s]: after a velocity fault, resume once every |qd| '
                        '<= velocity_limit - velocity_margin', '>= 0, < velocity_limit'),
    'hold_kp': ('hold stiffness per joint [N m/rad]', 'each > 0'),
    'hold_kd': ('hold damping per joint [N m s/rad]', 'each > 0'),
    'latch_limits': ('position / velocity faults stay latched until the next activation',
                     ''),
    'stamp_age': ('real time: count a joint state\'s age from its header stamp (wall clock) '
                  'when plausible, so late / backlogged states are not fresh; false when the '
                  'driver\'s clock is not synchronized with this host', ''),
}


def safety_specs() -> list:
    """
    ROS parameter specs (:class:`manip_control.nodes.ros_params.ParamSpec`) of the safety
    layer: ``safety.<field>`` (changeable at runtime, validated), ``diagnostics_rate`` and
    ``autostart`` (read-only).
    """
    from manip_control.nodes.ros_params import ParamSpec
    defaults = SafetyParameters()
    specs = []
    for name in SAFETY_FIELDS:
        value = getattr(defaults, name)
        if isinstance(value, tuple):
            value = [float(v) for v in value]
        desc, cons = _DOC[name]
        specs.append(ParamSpec(PREFIX + name, value, desc + '; changeable at runtime', cons,
                               None, False))
    specs.append(ParamSpec('diagnostics_rate', 10.0,
                           'rate of the periodic /controller/diagnostics [Hz] (transitions '
                           'are published at once)', '> 0', (0.0, 1.0e4)))
    specs.append(ParamSpec('autostart', True,
                           'configure and activate at start (lifecycle); false: wait for '
                           '`ros2 lifecycle set` (hardware bring-up by hand)', ''))
    return specs


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple)) or type(value).__name__ in ('array', 'ndarray'):
        return tuple(value)
    return value


def safety_from_values(values: Mapping[str, Any], node: str = 'controller'
                       ) -> SafetyParameters:
    """
    Validated :class:`SafetyParameters` from the node's ROS values.

    Raises
    ------
    ParameterError
        ``parameter safety.velocity_limit[1] (node controller): must be > 0 (got -1.0)``.

    """
    from manip_control.nodes.ros_params import ros_parameter_error
    data = {name: _plain(values[PREFIX + name]) for name in SAFETY_FIELDS
            if values.get(PREFIX + name) is not None}
    rate = values.get('diagnostics_rate', 10.0)
    if not (isinstance(rate, (int, float)) and not isinstance(rate, bool)
            and math.isfinite(rate) and rate > 0.0):
        raise ParameterError(f'parameter diagnostics_rate (node {node}): must be > 0 '
                             f'(got {rate!r})')
    try:
        return safety_from_dict(data, 'safety')
    except ParameterError as exc:
        raise ros_parameter_error(node, exc) from None


class ControllerSafety:
    """
    The controller node's safety state (see the module docstring for the call sequence).

    Parameters
    ----------
    node : rclpy node
        The controller node (timers, publisher, logger, clock).
    joints : sequence of 2 str
        Configured joint names (command order).
    params : SafetyParameters
    model : TwoLinkModel
        The controller's nominal model (gravity for the hold).
    torque_limit : callable returning 2 floats
        The current command limit [N·m] (read at each use: runtime changes apply).
    period : float
        Control period [s] (the default watchdog timer period, :attr:`watchdog_period`).
    publish : callable(tau, stamp, hold_q)
        Publishes a safe / zero command: ``tau`` 2 floats [N·m], ``stamp`` the stamp of the
        last accepted state (as given to :meth:`accept_joint_state`, or None), ``hold_q`` the
        position reported with it (:meth:`hold_target`).
    diagnostics_rate : float
        Periodic diagnostics [Hz].
    now : callable
        Steady time [s] (default ``time.monotonic``).

    """

    def __init__(self, node, joints: Sequence[str], params: SafetyParameters, model,
                 torque_limit: Callable[[], Sequence[float]], period: float,
                 publish: Callable, diagnostics_rate: float = 10.0,
                 now: Callable[[], float] = time.monotonic):
        self.node = node
        self.joints = tuple(joints)
        self.params = params
        self.model = model
        self.torque_limit = torque_limit
        self.period = float(period)
        self.publish = publish
        self.diagnostics_rate = float(diagnostics_rate)
        self.now = now
        self.supervisor = SafetySupervisor(params, self.joints)
        self.references = ReferenceWatchdog(params.reference_timeout)
        self.refusals = RefusalCounter(throttle=1.0)
        self.non_finite_commands = 0
        self.safe_commands = 0
        self.last_stamp = None
        self.before_check: Callable[[float], None] | None = None
        self.command_on_timeout = True
        self.watchdog_period = self.period
        self.on_transition: Callable | None = None
        self._diag_pub = None
        self._timers: list = []
        self._last_nf_log = -math.inf

    # -- lifecycle ---------------------------------------------------------------------------
    def _steady_timer(self, period, callback):
        from rclpy.clock import Clock
        from rclpy.clock import ClockType
        timer = self.node.create_timer(period, callback,
                                       clock=Clock(clock_type=ClockType.STEADY_TIME))
        self._timers.append(timer)
        return timer

    def create(self) -> None:
        """Configure: the diagnostics publisher and the watchdog / diagnostics timers."""
        from diagnostic_msgs.msg import DiagnosticArray
        self._diag_pub = self.node.create_publisher(DiagnosticArray, DIAGNOSTICS_TOPIC, 10)
        self._steady_timer(self.watchdog_period, self.watchdog_tick)
        self._steady_timer(1.0 / self.diagnostics_rate, self.publish_diagnostics)
        self.publish_diagnostics()

    def activate(self) -> None:
        """Arm: commands start with the first joint state received from now on."""
        self.references.reset()
        self.last_stamp = None
        self._log(self.supervisor.activate(self.now()))

    def deactivate(self) -> None:
        """Publish zero torque once (if commanding) and stop commanding."""
        was_commanding = self.supervisor.should_command
        self._log(self.supervisor.deactivate(self.now()))
        if was_commanding:
            self.publish((0.0, 0.0), self.last_stamp, self.hold_target())

    def release(self) -> None:
        """Cleanup / shutdown: deactivate if active, destroy the timers and the publisher."""
        if self.supervisor.active:
            self.deactivate()
        for timer in self._timers:
            self.node.destroy_timer(timer)
        self._timers = []
        if self._diag_pub is not None:
            self.node.destroy_publisher(self._diag_pub)
            self._diag_pub = None

    # -- parameters --------------------------------------------------------------------------
    def check_parameters(self, params) -> tuple[bool, str]:
        """Validate runtime updates of ``safety.*`` (other parameters pass)."""
        updates = {p.name: _plain(p.value) for p in params if p.name.startswith(PREFIX)}
        if not updates:
            return True, ''
        ok, reason = validate_parameter_updates(updates, self.params)
        return ok, (reason if ok or reason.startswith(PREFIX) else PREFIX + reason)

    def apply_parameters(self, params) -> None:
        """Apply validated runtime updates of ``safety.*``."""
        changes = {p.name[len(PREFIX):]: _plain(p.value) for p in params
                   if p.name.startswith(PREFIX)}
        if changes:
            self.params = self.params.replace(**changes)
            self.supervisor.set_params(self.params)
            self.references.timeout = self.params.reference_timeout
            self.node.get_logger().info(
                'safety parameters: ' + ', '.join(f'{k} -> {v}' for k, v in changes.items()))

    # -- inputs --------------------------------------------------------------------------------
    def _refused(self, source: str, refusal: Refusal) -> None:
        line = self.refusals.record(source, refusal, time.monotonic())
        if line:
            self.node.get_logger().error(line)

    def refuse(self, source: str, reason: RefusalReason, detail: str) -> None:
        """Count (and log, throttled) a refused ``source`` message."""
        self._refused(source, Refusal(reason, detail))

    def accept_joint_state(self, stamp, names, position, velocity, effort=(),
                           wall_stamp: bool = False):
        """
        Validate a joint state (decoded JointState fields) and feed the supervisor.

        Returns the :class:`~manip_control.safety.JointSample` or None (refused, counted).
        ``stamp`` [ns] is kept for the safe commands' header; with ``wall_stamp`` (real time)
        and ``safety.stamp_age`` its age against the wall clock (when between 0 and
        :data:`MAX_STAMP_AGE`) counts for the watchdog.
        """
        sample = map_joint_state(self.joints, names, position, velocity, effort)
        if isinstance(sample, Refusal):
            self._refused('joint_states', sample)
            return None
        self.last_stamp = stamp
        age = 0.0
        if wall_stamp and self.params.stamp_age and stamp:
            age = time.time() - stamp * 1e-9
            if not 0.0 < age <= MAX_STAMP_AGE:
                age = 0.0               # not the same clock: count from the arrival
        self._log(self.supervisor.update_state(self.now(), sample.position, sample.velocity,
                                               age))
        return sample

    def accept_reference(self, names, positions, velocities=(), accelerations=()):
        """
        Validate one reference point and feed the reference watchdog; the
        :class:`~manip_control.safety.ReferenceSample` or None (refused, counted).
        """
        ref = map_reference(self.joints, names, positions, velocities, accelerations)
        if isinstance(ref, Refusal):
            self._refused('reference', ref)
            return None
        self.references.update(self.now(), ref)
        return ref

    def held_reference(self) -> ReferenceSample | None:
        """
        The held reference (last position, zero velocity and acceleration) when no
        reference arrived for ``reference_timeout``; None while references are fresh or
        before the first one. Logs the hold and the resume once.
        """
        ref, note = self.references.get(self.now())
        if note:
            # one call site per severity: rclpy refuses a severity change at a call site
            if note.startswith('reference lost'):
                self.node.get_logger().warning(note)
            else:
                self.node.get_logger().info(note)
            self.publish_diagnostics()
        return ref if self.references.holding else None

    def clamp_reference(self, q_d, qd_d, qdd_d):
        """
        ``(q_d, qd_d, qdd_d, clamped)``: the reference kept inside the envelope (the same
        objects when inside).
        """
        return self.supervisor.clamp_reference(q_d, qd_d, qdd_d)

    # -- state -------------------------------------------------------------------------------
    @property
    def should_command(self) -> bool:
        """Active and a valid joint state has arrived since activation."""
        return self.supervisor.should_command

    @property
    def stale(self) -> bool:
        """Safe mode because of the state watchdog (the watchdog timer commands then)."""
        return self.supervisor.reason is SafeReason.STATE_TIMEOUT

    def check(self) -> None:
        """Evaluate the watchdog now (logs a transition once)."""
        self._log(self.supervisor.check(self.now()))

    def touch(self) -> None:
        """Lockstep: the last state is unanswered, so it does not age."""
        self._log(self.supervisor.touch(self.now()))

    # -- outputs -------------------------------------------------------------------------------
    def command(self, normal_fn: Callable[[], Sequence[float]]) -> tuple[tuple, bool]:
        """
        The command of this control step: ``normal_fn()`` in normal mode when it is finite,
        the safe torque otherwise. Returns ``((tau1, tau2), normal)``.
        """
        self.check()
        if self.supervisor.mode is Mode.NORMAL:
            tau = normal_fn()
            t1, t2 = tau[0], tau[1]
            if math.isfinite(t1) and math.isfinite(t2):
                return (t1, t2), True
            self.non_finite_commands += 1
            now = time.monotonic()
            if now - self._last_nf_log >= 1.0:
                self._last_nf_log = now
                self.node.get_logger().error(
                    f'feedback law returned a non-finite torque ({t1}, {t2}); sending the '
                    f'safe command instead ({self.non_finite_commands} so far)')
        self.safe_commands += 1
        return self.safe_torque(), False

    def safe_torque(self) -> tuple[float, float]:
        """The safe-mode torque for the current reason [N·m] (clamped, finite)."""
        return self.supervisor.safe_torque(self.model, self.torque_limit())

    def hold_target(self):
        """
        The position reported with a safe command: the hold target, else the last
        measured position (zeros before any state).
        """
        sup = self.supervisor
        if sup.is_safe and sup.hold_target is not None \
                and sup.reason is not SafeReason.STATE_TIMEOUT:
            return sup.hold_target
        return sup.last_q if sup.last_q is not None else (0.0,) * len(self.joints)

    def watchdog_tick(self) -> None:
        """
        Steady timer, one control period: the node's ``before_check`` hook, the watchdog,
        and the safe command while states are stale (if :attr:`command_on_timeout`).
        """
        if self.before_check is not None:
            self.before_check(self.now())
        self.check()
        if self.stale and self.supervisor.should_command and self.command_on_timeout:
            self.safe_commands += 1
            self.publish(self.safe_torque(), self.last_stamp, self.hold_target())

    # -- logging and diagnostics ---------------------------------------------------------
    def _log(self, transition) -> None:
        if transition is None:
            return
        log = self.node.get_logger()
        if transition.mode is Mode.NORMAL:
            log.info(str(transition))
        elif transition.reason in (SafeReason.INACTIVE, SafeReason.NO_STATE_YET):
            log.info(str(transition))
        else:
            log.error(str(transition))
        if self.on_transition is not None:
            self.on_transition(transition)
        self.publish_diagnostics()

    def diagnostics_values(self) -> dict[str, str]:
        """Key/value strings of the diagnostics status."""
        sup = self.supervisor
        values = sup.status()
        age = sup.state_age(self.now())
        values['state_age_ms'] = f'{age * 1e3:.3f}' if math.isfinite(age) else 'inf'
        for source, per in sorted(self.refusals.counts.items()):
            for why, n in sorted(per.items()):
                values[f'refused.{source}.{why}'] = str(n)
        values['refused_total'] = str(self.refusals.total())
        values['reference_held'] = str(self.references.holding).lower()
        age = self.references.hold_age
        values['reference_age_at_hold_ms'] = '' if age is None else f'{age * 1e3:.3f}'
        values['non_finite_commands'] = str(self.non_finite_commands)
        values['safe_commands'] = str(self.safe_commands)
        return values

    def diagnostics_message(self):
        """The DiagnosticArray describing the current mode."""
        from diagnostic_msgs.msg import DiagnosticArray
        from diagnostic_msgs.msg import DiagnosticStatus
        from diagnostic_msgs.msg import KeyValue
        sup = self.supervisor
        st = DiagnosticStatus()
        st.name = f'{self.node.get_name()}: mode'
        st.hardware_id = 'manip_control'
        if sup.mode is Mode.NORMAL:
            st.level = DiagnosticStatus.OK
            st.message = 'normal'
        else:
            st.level = (DiagnosticStatus.WARN if sup.reason in (SafeReason.INACTIVE,
                                                                SafeReason.NO_STATE_YET)
                        else DiagnosticStatus.ERROR)
            st.message = f'safe: {sup.reason.value} ({sup.detail})'
        st.values = [KeyValue(key=k, value=v) for k, v in self.diagnostics_values().items()]
        arr = DiagnosticArray()
        arr.header.stamp = self.node.get_clock().now().to_msg()
        arr.status = [st]
        return arr

    def publish_diagnostics(self) -> None:
        """Publish the diagnostics now (no-op before :meth:`create` / after release)."""
        if self._diag_pub is not None:
            self._diag_pub.publish(self.diagnostics_message())
