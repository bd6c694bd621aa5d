"""Safety glue of the controller node: parameters, input validation, watchdog, safe commands,
lifecycle bookkeeping and diagnostics (issue 6).

The ROS-free logic lives in :mod:`manip_control.safety`; this module binds it to an rclpy node
through :class:`ControllerSafety`, a helper the (lifecycle) controller node owns. The node
keeps its own topics, lockstep protocol and feedback law; it calls:

============================  ===============================================================
node event                    helper call
============================  ===============================================================
``__init__``                  ``ControllerSafety.declare_parameters(node)``
``on_configure``              ``safety = ControllerSafety(node, joints, model, torque_limit,
                              period, publish_command)``; ``safety.configure()`` (raises
                              ParameterError naming ``safety.<name>``)
``on_activate``               ``safety.activate()``
``on_deactivate``             ``safety.deactivate(stamp)`` (publishes zero torque once)
``on_cleanup``/``on_shutdown``  ``safety.cleanup()``
/joint_states callback        ``sample = safety.accept_joint_state(msg)`` (None if refused)
/reference callback           ``ref = safety.accept_reference(msg)`` (None if refused)
computing a command           ``tau, normal = safety.command(sample, normal_fn)`` where
                              ``normal_fn()`` returns the feedback law's (tau1, tau2)
reference to use              ``ref = safety.reference(fallback_q)``
parameter callback            ``safety.check_parameters(params)`` -> (ok, reason)
============================  ===============================================================

The helper owns a steady-clock watchdog timer (one control period): when the node is in safe
mode and no state arrives, the timer publishes the safe command itself through the node's
``publish_command(tau, stamp, ref)`` so that a dead plant / driver still gets safe commands
(a hardware driver keeps the last command otherwise). Watchdogs run on the steady clock:
sim time stops when the plant that publishes /clock dies, and starts again at zero when a
new plant comes up.

Diagnostics (``/controller/diagnostics``, diagnostic_msgs/DiagnosticArray) are published on
every mode transition and at ``diagnostics_rate`` (default 10 Hz): one status named
``<node name>: mode`` with level OK (normal), WARN (inactive / waiting for the first state)
or ERROR (a fault), the message ``normal`` or ``safe: <reason> (<detail>)`` and key/values:
mode, reason, detail, safe_mode, hold_target, state_age_ms, safe_entries.<reason>,
refused.<input>.<reason>, refused_total, reference_held, reference_age_at_hold_ms,
non_finite_commands, commands.
"""

from __future__ import annotations

import math
import time
from typing import Callable, Sequence

from rclpy.clock import Clock, ClockType
from rclpy.parameter import Parameter
from rcl_interfaces.msg import ParameterDescriptor, SetParametersResult

from manip_control.parameters import ParameterError
from manip_control.safety import (Mode, ReferenceSample, ReferenceWatchdog, Refusal,
                                  RefusalCounter, SafeReason, SafetyParameters,
                                  SafetySupervisor, map_joint_state_message,
                                  map_trajectory_message, safety_from_dict,
                                  validate_parameter_updates)

PREFIX = 'safety.'
SAFETY_FIELDS = tuple(SafetyParameters.__dataclass_fields__)
DIAGNOSTICS_TOPIC = '/controller/diagnostics'

__all__ = ['ControllerSafety', 'PREFIX', 'SAFETY_FIELDS', 'DIAGNOSTICS_TOPIC',
           'read_safety_parameters', 'unknown_parameter_overrides']


def _ros_value(value):
    """A ROS parameter value as plain Python (arrays -> tuples)."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)) or type(value).__name__ == 'array':
        return tuple(value)
    return value


def read_safety_parameters(node) -> SafetyParameters:
    """Build :class:`SafetyParameters` from the node's ``safety.*`` parameters.

    Raises
    ------
    ParameterError
        Naming the parameter (``safety.velocity_limit[1]: must be > 0 (got -1.0)``).
    """
    data = {}
    for name in SAFETY_FIELDS:
        if node.has_parameter(PREFIX + name):
            value = _ros_value(node.get_parameter(PREFIX + name).value)
            if value is not None:
                data[name] = value
    return safety_from_dict(data, 'safety')


def unknown_parameter_overrides(node, known: Sequence[str]) -> list[str]:
    """Names given to the node (params file, command line) that it does not declare.

    rclpy silently drops undeclared overrides; a controller must not (a typo would leave a
    limit at its default).
    """
    overrides = getattr(node, '_parameter_overrides', {}) or {}
    known = set(known) | {'use_sim_time', 'start_type_description_service'}
    return sorted(n for n in overrides if n not in known)


class ControllerSafety:
    """The controller node's safety state (see the module docstring for the call sequence).

    Parameters
    ----------
    node : rclpy.node.Node
        The controller (lifecycle) node.
    joints : sequence of 2 str
        Configured joint names (command order).
    model : TwoLinkModel
        The controller's nominal model (gravity for the hold).
    torque_limit : callable or sequence of 2 float
        The command limit [N·m] (a callable is read at each use, so runtime changes apply).
    period : float
        Control period [s] (the watchdog timer period).
    publish_command : callable(tau, stamp, ref)
        Publishes a torque command (tuple of 2 floats [N·m]); ``stamp`` is the header stamp of
        the last joint state (builtin_interfaces/Time or None) and ``ref`` the
        ReferenceSample in use (or None).
    now : callable, optional
        Steady time source [s] (default ``time.monotonic``).
    """

    def __init__(self, node, joints, model, torque_limit, period: float,
                 publish_command: Callable, now: Callable[[], float] = time.monotonic):
        self.node = node
        self.joints = tuple(joints)
        self.model = model
        self._torque_limit = torque_limit
        self.period = float(period)
        self.publish_command = publish_command
        self.now = now
        self.params = SafetyParameters()
        self.supervisor = SafetySupervisor(self.params, self.joints)
        self.references = ReferenceWatchdog(self.params.reference_timeout)
        self.refusals = RefusalCounter(throttle=1.0)
        self.non_finite_commands = 0
        self.commands = 0
        self.last_stamp = None
        self.diagnostics_rate = 10.0
        self._diag_pub = None
        self._timer = None
        self._diag_timer = None
        self._last_log_nf = -math.inf
        self.on_transition: Callable | None = None

    # -- parameters --------------------------------------------------------------------------
    @staticmethod
    def declare_parameters(node) -> list[str]:
        """Declare ``safety.*`` (dynamically typed, validated by :meth:`configure`) and
        ``diagnostics_rate``; returns the declared names."""
        names = []
        desc = ParameterDescriptor(dynamic_typing=True)
        defaults = SafetyParameters()
        for name in SAFETY_FIELDS:
            default = getattr(defaults, name)
            if isinstance(default, tuple):
                default = list(default)
            node.declare_parameter(PREFIX + name, default, desc)
            names.append(PREFIX + name)
        node.declare_parameter('diagnostics_rate', 10.0, desc)
        names.append('diagnostics_rate')
        return names

    @property
    def torque_limit(self):
        lim = self._torque_limit
        return lim() if callable(lim) else lim

    def load_parameters(self) -> SafetyParameters:
        """Read and validate ``safety.*`` and ``diagnostics_rate``; raises ParameterError."""
        params = read_safety_parameters(self.node)
        rate = _ros_value(self.node.get_parameter('diagnostics_rate').value) \
            if self.node.has_parameter('diagnostics_rate') else 10.0
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) \
                or not math.isfinite(rate) or rate <= 0.0:
            raise ParameterError(f'diagnostics_rate: must be a number > 0 (got {rate!r})')
        self.diagnostics_rate = float(rate)
        return params

    def check_parameters(self, params: Sequence[Parameter]) -> tuple[bool, str]:
        """Validate runtime updates of ``safety.*`` / ``diagnostics_rate`` (others pass)."""
        updates = {}
        for p in params:
            if p.name.startswith(PREFIX):
                if p.name[len(PREFIX):] not in SAFETY_FIELDS:
                    return False, f'{p.name}: unknown parameter'
                updates[p.name] = _ros_value(p.value)
            elif p.name == 'diagnostics_rate':
                v = p.value
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0.0 \
                        or not math.isfinite(v):
                    return False, f'diagnostics_rate: must be a number > 0 (got {v!r})'
        if not updates:
            return True, ''
        return validate_parameter_updates(updates, self.params)

    def apply_parameters(self, params: Sequence[Parameter]) -> None:
        """Apply already validated runtime updates (call after :meth:`check_parameters`)."""
        changes = {p.name[len(PREFIX):]: _ros_value(p.value) for p in params
                   if p.name.startswith(PREFIX)}
        if changes:
            self.params = self.params.replace(**changes)
            self.supervisor.set_params(self.params)
            self.references.timeout = self.params.reference_timeout
        for p in params:
            if p.name == 'diagnostics_rate':
                self.diagnostics_rate = float(p.value)
                if self._diag_timer is not None:
                    self.node.destroy_timer(self._diag_timer)
                    self._diag_timer = self._make_timer(1.0 / self.diagnostics_rate,
                                                        self.publish_diagnostics)

    def parameter_callback(self, params: Sequence[Parameter]) -> SetParametersResult:
        """An ``add_on_set_parameters_callback`` callback for the safety parameters only."""
        ok, reason = self.check_parameters(params)
        if not ok:
            self.node.get_logger().warn(f'refused parameter update: {reason}')
            return SetParametersResult(successful=False, reason=reason)
        self.apply_parameters(params)
        return SetParametersResult(successful=True)

    # -- lifecycle ---------------------------------------------------------------------------
    def _make_timer(self, period, callback):
        return self.node.create_timer(period, callback,
                                      clock=Clock(clock_type=ClockType.STEADY_TIME))

    def configure(self, params: SafetyParameters | None = None) -> None:
        """Load the parameters (raises ParameterError), create the diagnostics publisher."""
        from diagnostic_msgs.msg import DiagnosticArray
        self.params = params if params is not None else self.load_parameters()
        self.supervisor = SafetySupervisor(self.params, self.joints)
        self.references = ReferenceWatchdog(self.params.reference_timeout)
        self.refusals.reset()
        self.non_finite_commands = 0
        self.commands = 0
        if self._diag_pub is None:
            self._diag_pub = self.node.create_publisher(DiagnosticArray, DIAGNOSTICS_TOPIC, 10)
        if self._diag_timer is None:
            self._diag_timer = self._make_timer(1.0 / self.diagnostics_rate,
                                                self.publish_diagnostics)

    def activate(self) -> None:
        """Arm: commands start with the first joint state received from now on."""
        self.references.reset()
        self.last_stamp = None
        self._log(self.supervisor.activate(self.now()))
        if self._timer is None:
            self._timer = self._make_timer(self.period, self.watchdog_tick)

    def deactivate(self) -> None:
        """Publish zero torque once (if commanding) and stop commanding."""
        was_commanding = self.supervisor.should_command
        self._log(self.supervisor.deactivate(self.now()))
        if self._timer is not None:
            self.node.destroy_timer(self._timer)
            self._timer = None
        if was_commanding:
            self.publish_command((0.0, 0.0), self.last_stamp, None)

    def cleanup(self) -> None:
        """Release timers and the diagnostics publisher (deactivating first if active)."""
        if self.supervisor.active:
            self.deactivate()
        for attr in ('_timer', '_diag_timer'):
            timer = getattr(self, attr)
            if timer is not None:
                self.node.destroy_timer(timer)
                setattr(self, attr, None)
        if self._diag_pub is not None:
            self.node.destroy_publisher(self._diag_pub)
            self._diag_pub = None

    # -- inputs --------------------------------------------------------------------------------
    def _refused(self, source: str, refusal: Refusal) -> None:
        line = self.refusals.record(source, refusal, time.monotonic())
        if line:
            self.node.get_logger().error(line)

    def accept_joint_state(self, msg, source: str = 'joint_states'):
        """Validate a JointState; feed the supervisor. Returns the JointSample or None."""
        sample = map_joint_state_message(self.joints, msg)
        if isinstance(sample, Refusal):
            self._refused(source, sample)
            return None
        self.last_stamp = getattr(getattr(msg, 'header', None), 'stamp', None)
        self._log(self.supervisor.update_state(self.now(), sample.position, sample.velocity))
        return sample

    def accept_reference(self, msg, source: str = 'reference'):
        """Validate a one-point JointTrajectory; feed the reference watchdog."""
        ref = map_trajectory_message(self.joints, msg)
        if isinstance(ref, Refusal):
            self._refused(source, ref)
            return None
        self.references.update(self.now(), ref)
        return ref

    def reference(self, fallback_q=None) -> ReferenceSample | None:
        """The reference to track now: the latest one, or the held last position once it is
        older than ``reference_timeout``; before any reference, ``fallback_q`` at rest (None
        if not given). Clamped into the envelope (see SafetySupervisor.clamp_reference)."""
        ref, note = self.references.get(self.now())
        if note:
            # one call site per severity: rclpy refuses a severity change at a call site
            if note.startswith('reference lost'):
                self.node.get_logger().warning(note)
            else:
                self.node.get_logger().info(note)
            self.publish_diagnostics()
        if ref is None:
            if fallback_q is None:
                return None
            ref = ReferenceSample(tuple(fallback_q), (0.0, 0.0), (0.0, 0.0))
        q, v, a, _ = self.supervisor.clamp_reference(ref.q, ref.qd, ref.qdd)
        return ReferenceSample(q, v, a)

    # -- outputs -------------------------------------------------------------------------------
    def command(self, normal_fn: Callable[[], Sequence[float]]) -> tuple[tuple, bool]:
        """The command to publish now: ``normal_fn()`` in normal mode (checked finite and
        clamped), the safe torque otherwise. Returns ``(tau, normal)``; call only when
        :attr:`should_command`."""
        self._log(self.supervisor.check(self.now()))
        lim = self.torque_limit
        if self.supervisor.mode is Mode.NORMAL:
            tau = normal_fn()
            t1, t2 = float(tau[0]), float(tau[1])
            if math.isfinite(t1) and math.isfinite(t2):
                self.commands += 1
                return (min(max(t1, -lim[0]), lim[0]), min(max(t2, -lim[1]), lim[1])), True
            self.non_finite_commands += 1
            now = time.monotonic()
            if now - self._last_log_nf >= 1.0:
                self._last_log_nf = now
                self.node.get_logger().error(
                    f'feedback law returned a non-finite torque ({t1}, {t2}); sending the '
                    f'safe command instead ({self.non_finite_commands} so far)')
        self.commands += 1
        return self.supervisor.safe_torque(self.model, lim), False

    @property
    def should_command(self) -> bool:
        """Active and a joint state has arrived since activation."""
        return self.supervisor.should_command

    @property
    def is_normal(self) -> bool:
        return self.supervisor.mode is Mode.NORMAL

    def watchdog_tick(self) -> None:
        """Steady timer, one control period: evaluate the watchdog; in safe mode with stale
        states keep publishing the safe command (nothing else publishes then)."""
        self._log(self.supervisor.check(self.now()))
        sup = self.supervisor
        if sup.reason is SafeReason.STATE_TIMEOUT and sup.should_command:
            self.commands += 1
            self.publish_command(sup.safe_torque(self.model, self.torque_limit),
                                 self.last_stamp, None)

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
        values['commands'] = str(self.commands)
        return values

    def diagnostics_message(self):
        """The DiagnosticArray describing the current mode."""
        from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
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
        """Publish the diagnostics now (no-op before configure / after cleanup)."""
        if self._diag_pub is not None:
            self._diag_pub.publish(self.diagnostics_message())


# --------------------------------------------------------------------------------------------
# A self-contained lifecycle controller using the helper above. The fault-injection tests run
# it (``python -m manip_control.nodes.controller_safety``) when the package's controller node
# is not a lifecycle node yet; it follows the DEVELOPERS.md topic contract.


def _make_lifecycle_controller():
    from rclpy.lifecycle import LifecycleNode, TransitionCallbackReturn
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64MultiArray
    from trajectory_msgs.msg import JointTrajectory

    from manip_control.control import Controller
    from manip_control.parameters import load_scenario

    class SafeLifecycleController(LifecycleNode):
        """Lifecycle controller: configure loads the scenario (``config``) and the safety
        parameters, activate commands once a fresh state arrived (event-driven: one command
        per joint state), deactivate sends zero torque once."""

        def __init__(self):
            super().__init__('controller')
            desc = ParameterDescriptor(dynamic_typing=True)
            self.declare_parameter('config', 'default', desc)
            self.declare_parameter('autostart', False, desc)
            self._declared = ['config', 'autostart']
            self._declared += ControllerSafety.declare_parameters(self)
            self.safety = None
            self.ctrl = None
            self._subs = []
            self._pubs = []
            self.add_on_set_parameters_callback(self._on_params)
            # fail fast: a bad configuration stops the node at start, before publishing
            self._load()

        def _load(self):
            unknown = unknown_parameter_overrides(self, self._declared)
            if unknown:
                raise ParameterError(f'{unknown[0]}: unknown parameter')
            cfg = self.get_parameter('config').value
            if not isinstance(cfg, str):
                raise ParameterError(f'config: must be a file name or preset (got {cfg!r})')
            scenario = load_scenario(cfg)
            return scenario, read_safety_parameters(self)

        def _on_params(self, params):
            if self.safety is None:
                return SetParametersResult(successful=True)
            return self.safety.parameter_callback(params)

        def on_configure(self, state):
            try:
                scenario, sp = self._load()
            except ParameterError as exc:
                self.get_logger().error(f'configure failed: {exc}')
                return TransitionCallbackReturn.FAILURE
            self.scenario = scenario
            self.joints = tuple(scenario.joints)
            self.ctrl = Controller(scenario.controller, scenario.period)
            self.safety = ControllerSafety(self, self.joints, self.ctrl.model,
                                           lambda: self.ctrl.torque_limit, scenario.period,
                                           self._publish)
            self.safety.configure(sp)
            self.safety.on_transition = self._on_transition
            self._cmd_pub = self.create_publisher(Float64MultiArray,
                                                  '/effort_controller/commands', 10)
            self._jc_pub = self.create_publisher(JointState, '/joint_commands', 10)
            self._pubs = [self._cmd_pub, self._jc_pub]
            self._subs = [self.create_subscription(JointState, '/joint_states', self._on_state,
                                                   10),
                          self.create_subscription(JointTrajectory, '/reference', self._on_ref,
                                                   10)]
            return TransitionCallbackReturn.SUCCESS

        def _on_transition(self, tr):
            if tr.resumed:
                self.ctrl.reset()

        def on_activate(self, state):
            self.ctrl.reset()
            self.safety.activate()
            return TransitionCallbackReturn.SUCCESS

        def on_deactivate(self, state):
            self.safety.deactivate()
            return TransitionCallbackReturn.SUCCESS

        def _release(self):
            if self.safety is not None:
                self.safety.cleanup()
            for s in self._subs:
                self.destroy_subscription(s)
            for p in self._pubs:
                self.destroy_publisher(p)
            self._subs, self._pubs = [], []
            self.safety = None

        def on_cleanup(self, state):
            self._release()
            return TransitionCallbackReturn.SUCCESS

        def on_shutdown(self, state):
            self._release()
            return TransitionCallbackReturn.SUCCESS

        def _on_ref(self, msg):
            self.safety.accept_reference(msg)

        def _on_state(self, msg):
            sample = self.safety.accept_joint_state(msg)
            if sample is None or not self.safety.should_command:
                return
            q, v = sample.position, sample.velocity
            ref = self.safety.reference(q)

            def normal():
                out = self.ctrl.update(q[0], q[1], v[0], v[1], ref.q[0], ref.q[1], ref.qd[0],
                                       ref.qd[1], ref.qdd[0], ref.qdd[1])
                return out.tau1, out.tau2
            tau, _ = self.safety.command(normal)
            self._publish(tau, msg.header.stamp, ref)

        def _publish(self, tau, stamp, ref):
            if not self._pubs:
                return
            m = Float64MultiArray()
            m.data = [float(tau[0]), float(tau[1])]
            self._cmd_pub.publish(m)
            jc = JointState()
            if stamp is not None:
                jc.header.stamp = stamp
            jc.name = list(self.joints)
            jc.effort = m.data
            if ref is not None:
                jc.position = [float(x) for x in ref.q]
                jc.velocity = [float(x) for x in ref.qd]
            self._jc_pub.publish(jc)

    return SafeLifecycleController


def main(args=None) -> int:
    """Run the self-contained lifecycle controller; exit 2 with one line on a bad config."""
    import sys

    import rclpy
    from rclpy.executors import ExternalShutdownException

    rclpy.init(args=args)
    try:
        node = _make_lifecycle_controller()()
    except ParameterError as exc:
        print(f'error: {exc}', file=sys.stderr)
        rclpy.try_shutdown()
        return 2
    try:
        if node.get_parameter('autostart').value is True:
            from rclpy.lifecycle import TransitionCallbackReturn as R
            if node.trigger_configure() != R.SUCCESS or node.trigger_activate() != R.SUCCESS:
                print('error: could not configure and activate the controller',
                      file=sys.stderr)
                return 2
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
