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
Controller node: the core :class:`~manip_control.control.Controller` behind topics.

Subscribes
    ``joint_states`` (sensor_msgs/JointState, matched by joint name, extra joints ignored;
    real time: a best-effort reader, which takes reliable and best-effort publishers);
    ``reference`` (trajectory_msgs/JointTrajectory, one point: positions, velocities,
    accelerations, matched by name; several points: followed by their ``time_from_start``
    in real time).
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
    latest state and reference; ``trigger: state``: once per fresh joint state with the
    latest reference (before the first reference: a hold of the first measured position),
    at most about once per control period of the driver's stamps (a state stamped less than
    one period minus half a measured state period after the last ticked one is stored, not
    ticked; delivery jitter does not skip states). The real-time state
    reader keeps the last :data:`STATE_HISTORY_DEPTH` states; each callback takes all of
    them, checks the source of each in order, and validates and uses only the newest of the
    locked source: a late controller never ticks on old states (nor judges the driver's
    clock by their age), and a second publisher flooding ``joint_states`` does not push the
    driver's states out of the reader before they are read.

Runtime parameters: ``kp``, ``kd``, ``ki``, ``torque_limit`` and ``safety.*``
(``ros2 param set``); an invalid value is refused with the reason in the SetParametersResult,
a valid one is staged and takes effect at the next tick. Every other parameter is read-only.

Lifecycle and safety (:mod:`manip_control.nodes.controller_safety`, docs/safety.md):
a managed node. The parameters are validated at start (a bad one: one ``error:`` line, exit
code 2, nothing published); ``configure`` builds the controller, topics and the safety layer;
``activate`` starts commanding once a fresh joint state has arrived, from the measured state
(re-planned reference, torque-rate limit from the measured effort); ``deactivate`` ramps to
the hold and then to zero (real time) and stops commanding; ``cleanup`` / ``shutdown``
release everything.
``autostart`` (default true) configures and activates at start; with ``autostart:=false`` the
node waits for ``ros2 lifecycle set /controller configure`` / ``activate``. Inputs are
validated by :mod:`manip_control.safety` (refusals counted per reason); the joint-state
watchdog (fresh = advancing stamps younger than ``safety.state_timeout``), the position /
velocity envelope and the reference watchdog drive the safe mode (with a resume hysteresis
and a hold timeout), published on ``/controller/diagnostics`` and ``/diagnostics``.
Lockstep: a state the controller has not answered does not age; when the reference of a
pending state is later than ``safety.reference_timeout``, the tick runs with the held
reference (the last one brought to rest), so a dead trajectory node does not stall the loop.

Structure (for the safety layer): :meth:`ControllerNode.on_joint_state` /
:meth:`on_reference` convert messages and store them, :meth:`tick` runs one control step
(:meth:`compute` is the call into the core, :meth:`publish_command` the output).
"""

from __future__ import annotations

import functools
import gc
import math
import sys
import threading
import time
from typing import NamedTuple

from diagnostic_msgs.msg import DiagnosticArray
from diagnostic_msgs.msg import DiagnosticStatus
from diagnostic_msgs.msg import KeyValue
from manip_control.adaptation import AdaptedModel
from manip_control.adaptation import ADAPTIVE_CHECK_EVERY
from manip_control.adaptation import AdaptiveController
from manip_control.arm_identification import adaptive_regressor
from manip_control.arm_identification import ArmRegressor
from manip_control.arm_identification import base_parameters
from manip_control.control import check_gain_update
from manip_control.control import Controller
from manip_control.control import ControlOutput
from manip_control.nodes import cdr
from manip_control.nodes.common import callback_failed
from manip_control.nodes.common import data_qos
from manip_control.nodes.common import EXECUTOR_PRIORITY
from manip_control.nodes.common import extend_stop_bound
from manip_control.nodes.common import guarded
from manip_control.nodes.common import lock_memory
from manip_control.nodes.common import name_thread
from manip_control.nodes.common import owns_process
from manip_control.nodes.common import PUBLISH_DEPTH
from manip_control.nodes.common import retire
from manip_control.nodes.common import run_node
from manip_control.nodes.common import set_thread_realtime
from manip_control.nodes.common import set_threads_realtime
from manip_control.nodes.common import single_threaded_blas
from manip_control.nodes.common import steady_clock
from manip_control.nodes.common import SWITCH_INTERVAL
from manip_control.nodes.controller_safety import command_safety_from_values
from manip_control.nodes.controller_safety import ControllerSafety
from manip_control.nodes.controller_safety import RESTART_SETTLE
from manip_control.nodes.controller_safety import RESTART_SILENCE
from manip_control.nodes.controller_safety import safety_from_values
from manip_control.nodes.controller_safety import safety_specs
from manip_control.nodes.controller_safety import SILENT_PUBLISHER
from manip_control.nodes.parameter_proxy import ProxiedParameterServices
from manip_control.nodes.parameter_proxy import ProxyError
from manip_control.nodes.recorder_gate import RecorderGate
from manip_control.nodes.ros_params import ADAPTATION_COMMANDS
from manip_control.nodes.ros_params import arm_control_defaults
from manip_control.nodes.ros_params import arm_from_description
from manip_control.nodes.ros_params import coerce_parameter
from manip_control.nodes.ros_params import controller_all_specs
from manip_control.nodes.ros_params import controller_config
from manip_control.nodes.ros_params import controller_specs
from manip_control.nodes.ros_params import declare_parameters
from manip_control.nodes.ros_params import hard_limit_specs
from manip_control.nodes.ros_params import nominal_urdf_arm
from manip_control.nodes.ros_params import print_node_help
from manip_control.nodes.ros_params import RECORDER_WAIT
from manip_control.nodes.ros_params import RUNTIME_GAINS
from manip_control.nodes.ros_params import wants_help
from manip_control.nodes.sources import describe
from manip_control.nodes.sources import publishers
from manip_control.nodes.sources import sequence_number
from manip_control.nodes.sources import WithMessageInfo
from manip_control.parameters import ParameterError
from manip_control.safety import decode_refusal
from manip_control.safety import hard_limit_defaults
from manip_control.safety import HARD_LIMIT_DOC
from manip_control.safety import HARD_LIMIT_PREFIX
from manip_control.safety import hard_limits_from_values
from manip_control.safety import map_reference
from manip_control.safety import ramp_toward_zero
from manip_control.safety import ReferenceSample as SafetyReference
from manip_control.safety import Refusal
from manip_control.safety import RefusalReason
from manip_control.safety import source_check
from manip_control.safety import SourceGuard
from manip_control.safety import valid_node_name
from manip_control.safety import validate_parameter_updates
from manip_control.supervision import trajectory_from_points
from manip_control.supervision import TrajectoryError
from rcl_interfaces.msg import SetParametersResult
from rclpy.lifecycle import LifecycleNode
from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.parameter import Parameter
from rclpy.parameter_service import ParameterService
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory


#: Most points, and points x joint names, of a multi-point reference (bounded cost per
#: message: 100 points of 6 joints were deserialized and checked in 0.8 ms on the loaded
#: development machine, 1000 points of 2 joints in 8.4 ms).
MAX_TRAJECTORY_POINTS = 100
MAX_TRAJECTORY_VALUES = 2560


def locked(method):
    """Run a method under the node's lock (one step at a time with the control thread)."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)
    return wrapper


def _take(sub):
    """Take the next message waiting in a raw subscription's reader: ``(raw, info)`` or None."""
    try:
        with sub.handle:
            got = sub.handle.take_message(sub.msg_type, sub.raw)
    except Exception:  # noqa: BLE001 - destroyed, or an rclpy without it
        return None
    if got is None:
        return None
    return got[0], (got[1] if len(got) > 1 else None)


def _point_count(raw: bytes) -> int:
    """Return the number of points of a serialized JointTrajectory (0: does not decode)."""
    try:
        r = cdr._Reader(raw)
        r.stamp()
        r.string()
        r.strings()
        return r.u32()
    except Exception:  # noqa: BLE001 - the decoder has already accepted the message
        return 0


def best_effort_qos(depth: int = 100):
    """
    Return the QoS of the real-time joint-state reader.

    Best effort, volatile, keep last ``depth``.

    A best-effort reader matches reliable and best-effort (sensor-data) writers alike; a
    reliable reader gets nothing from a best-effort driver.
    """
    from rclpy.qos import DurabilityPolicy
    from rclpy.qos import HistoryPolicy
    from rclpy.qos import QoSProfile
    from rclpy.qos import ReliabilityPolicy
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=depth,
                      reliability=ReliabilityPolicy.BEST_EFFORT,
                      durability=DurabilityPolicy.VOLATILE)


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


class ControllerNode(LifecycleNode):
    """
    The feedback controller as a ROS (lifecycle) node.

    Parameters
    ----------
    node_name : str
    parameter_overrides : list of rclpy Parameter, optional
    keep_history : bool
        Keep per-tick records in :attr:`history` and latencies in :attr:`latencies`.
    **kwargs
        Passed to ``rclpy.lifecycle.LifecycleNode``.

    Raises
    ------
    ParameterError
        A parameter is invalid (nothing has been published), or the autostart failed.

    """

    def __init__(self, node_name: str = 'controller', *, parameter_overrides=None,
                 keep_history: bool = False, **kwargs):
        # a process of its own takes the parameter requests (see parameter_proxy): rclpy
        # converts a request holding the interpreter lock, which stalled the control thread
        proxied = owns_process() and 'start_parameter_services' not in kwargs
        if proxied:
            kwargs['start_parameter_services'] = False
        super().__init__(node_name, parameter_overrides=parameter_overrides, **kwargs)
        self._parameter_proxy = None
        if proxied:
            try:
                self._parameter_proxy = ProxiedParameterServices(self)
            except ProxyError as exc:
                self._serve_parameters_here(str(exc))
        # an arm from robot_description sizes every per-joint default: read it first
        self.arm, self._urdf = arm_from_description(self, planar_2r='nominal.arm.')
        self._arm_defaults = (None if self.arm is None
                              else arm_control_defaults(self, self.arm, self._urdf))
        ad = self._arm_defaults
        self._specs = {s.name: s for s in controller_specs(ad) + safety_specs(ad)}
        self._specs.update({s.name: s for s in hard_limit_specs(self._hard_limit_defaults())})
        self.values = declare_parameters(self, list(self._specs.values()))
        # everything is validated at start: a bad configuration never publishes anything
        self._check_arm_limits(self.values)
        if self.values['adaptation.save_to'] or self.values['adaptation.reset']:
            name = 'save_to' if self.values['adaptation.save_to'] else 'reset'
            raise ParameterError(
                f'parameter adaptation.{name} (node {self.get_name()}): a runtime command '
                '(ros2 param set while the node runs); leave it unset at start')
        cfg = self.config = controller_config(self.values, self.get_name(), ad)
        rotors = cfg.controller.nominal.rotor_inertia
        if self.arm is not None and any(rotors):       # the nominal rotors ride on the joints
            self.arm = nominal_urdf_arm(self._urdf, self.arm.joint_names, rotors,
                                        self.get_name())
        self.safety_params = safety_from_values(self.values, self.get_name())
        try:
            self.hard_limits = hard_limits_from_values(
                {k: self.values[HARD_LIMIT_PREFIX + k] for k in HARD_LIMIT_DOC},
                {k: self.values[k] for k in ('kp', 'kd', 'ki', 'torque_limit')},
                self.safety_params)
        except ParameterError as exc:
            raise ParameterError(f'parameter {exc} (node {self.get_name()})') from None
        self.state_publisher = str(self.values['state_publisher'])
        if self.state_publisher and not valid_node_name(self.state_publisher):
            raise ParameterError(
                f'parameter state_publisher (node {self.get_name()}): must be empty or a '
                f'fully qualified node name such as /joint_state_broadcaster (got '
                f'{self.state_publisher!r})')
        self._sources = {'joint_states': SourceGuard('joint_states'),
                         'reference': SourceGuard('reference')}
        self._sources['joint_states'].expected = self.state_publisher
        # with a named publisher nothing is locked before the graph showed only that node
        self._sources['joint_states'].may_lock = not self.state_publisher
        self._matched = {'joint_states': 0, 'reference': 0}
        self._last_match_poll = -math.inf
        self._failed = ''               # an unexpected error: ramp to zero, then silent
        self._emergency_timer = None
        self._last_tau: tuple | None = None
        self._graph_timer = None
        self._recorder_gate: RecorderGate | None = None
        self._graph_report: dict[str, str] = {}
        self.command_params = command_safety_from_values(self.values, self.get_name())
        self.joints = list(cfg.joints)
        self._zero = [0.0] * len(self.joints)     # zero velocity / acceleration of a hold
        self.lockstep = cfg.mode == 'lockstep'
        self.period = cfg.period
        self.controller: Controller | AdaptiveController | None = None
        #: the adaptive law (adaptation.enabled), else None
        self.adaptation = None
        self._adaptation_pub = None
        self._adaptation_timer = None
        self._adaptation_reset_timer = None
        self._adaptation_fallbacks = 0
        self._adaptation_logged = -math.inf
        self.safety: ControllerSafety | None = None
        self._pending: dict[str, tuple] = {}
        #: one step at a time: the control thread (real time) and the executor's callbacks
        #: (parameters, lifecycle, graph, diagnostics; lockstep: everything) take it
        self._lock = threading.RLock()
        self.add_pre_set_parameters_callback(self._coerce_parameters)
        self.add_on_set_parameters_callback(self._check_parameters)

        self.state: StateSample | None = None
        self.reference: ReferenceSample | None = None
        self.trajectory = None              # a multi-point reference being followed
        self._idle_q: list | None = None    # no reference yet: hold the first measured q
        self._last_stamp: int | None = None
        self._last_used_state: int | None = None
        self._last_tick_stamp: int | None = None    # of the state ticked on (trigger: state)
        self.fresh_states = 0               # trigger: state: fresh states taken while active
        self.sampled_states = 0             # ... of them not ticked on (driver > control rate)
        self.ticks = 0
        self.published_commands = 0
        self.refused_states = 0
        self.refused_references = 0
        self.last_refusal = ''
        self.callback_errors = 0
        self.history: list | None = [] if keep_history else None
        self.latencies: list | None = [] if keep_history else None
        # Hot-path topics are published and taken as CDR bytes (see nodes/cdr.py).
        self._cmd_enc = cdr.JointStateEncoder(self.joints)
        self._array_enc = cdr.Float64ArrayEncoder(len(self.joints))
        self._cmd_raw = self._array_raw = b''
        self._array_pub = self._cmd_pub = None
        #: called with each command publisher once made (configure): a recorder of this
        #: process taps it (manip_control.nodes.recorder_node.RecorderNode.tap)
        self.publisher_hooks: list = []
        self._subs: list = []
        self._timer = None
        from rclpy.clock import Clock
        from rclpy.clock import ClockType
        self._wall = Clock(clock_type=ClockType.SYSTEM_TIME)
        self._loop_thread: threading.Thread | None = None
        self._loop_stop = False
        self._loop_gc = None
        self._loop_notes: list = []
        self._detached: list = []           # input subscriptions of the control thread
        self._loop_watchdog = -math.inf     # when the control thread last ran the watchdog
        self.spurious_wakeups = 0           # of the control thread (nothing to take)
        #: how the control thread is scheduled (diagnostics ``realtime``)
        self.realtime_status = ''
        from rclpy.task import Future
        #: completed after the shutdown transition: the process exits (run_node)
        self.done_future = Future()
        self._exit_timer = None
        if self._parameter_proxy is not None:
            try:
                self._parameter_proxy.wait_serving()
            except ProxyError as exc:
                self._parameter_proxy = None
                self._serve_parameters_here(str(exc))
        if self.values['autostart']:
            if self.trigger_configure() != TransitionCallbackReturn.SUCCESS:
                raise ParameterError(f'node {self.get_name()}: configure failed')
            if self.trigger_activate() != TransitionCallbackReturn.SUCCESS:
                raise ParameterError(f'node {self.get_name()}: activate failed')

    # -- lifecycle --------------------------------------------------------------------------
    def on_configure(self, state) -> TransitionCallbackReturn:
        """
        Validate the parameters; build the controller, the topics and the safety layer.

        Real time: then start the control thread (:meth:`_control_loop`).
        """
        with self._lock:
            result = self._configure()
        if result == TransitionCallbackReturn.SUCCESS and not self.lockstep:
            self._start_control_thread()
        return result

    def _configure(self) -> TransitionCallbackReturn:
        try:
            values = {name: self.get_parameter(name).value for name in self._specs}
            cfg = self.config = controller_config(values, self.get_name(), self._arm_defaults)
            sp = self.safety_params = safety_from_values(values, self.get_name())
            cp = self.command_params = command_safety_from_values(values, self.get_name())
        except ParameterError as exc:
            self.get_logger().error(f'configure failed: {exc}')
            return TransitionCallbackReturn.FAILURE
        try:
            self.controller = self._make_controller(cfg)
        except (ParameterError, ValueError) as exc:
            self.get_logger().error(f'configure failed: adaptation: {exc}')
            return TransitionCallbackReturn.FAILURE
        self._pending = {}
        qos = data_qos()
        self._readers = {'array': 0, 'joint': 0}
        # no matched / message-lost event callbacks on the inputs and the command publishers:
        # rmw_fastrtps (Jazzy) deadlocks when the executor takes such an event while a DDS
        # thread reports one on the same reader or writer (each holds the lock the other
        # needs; seen here: the executor and every DDS thread of the controller stopped). The
        # matched counts are polled instead (:meth:`_poll_matches`).
        self._array_pub = self.create_publisher(
            Float64MultiArray, 'effort_controller/commands', data_qos(PUBLISH_DEPTH))
        self._cmd_pub = self.create_publisher(
            JointState, 'joint_commands', data_qos(PUBLISH_DEPTH))
        for hook in self.publisher_hooks:
            hook(self._array_pub)
            hook(self._cmd_pub)
        # real time: a best-effort reader takes joint states from reliable and best-effort
        # (sensor-data) driver publishers alike; lockstep keeps the reliable one (no loss)
        state_qos = qos if self.lockstep else best_effort_qos(STATE_HISTORY_DEPTH)
        self._subs = [
            self.create_subscription(JointState, 'joint_states',
                                     WithMessageInfo(self.on_joint_state), state_qos, raw=True),
            self.create_subscription(JointTrajectory, 'reference',
                                     WithMessageInfo(self.on_reference), qos, raw=True)]
        for source, sub in zip(('joint_states', 'reference'), self._subs):
            # a numbering jump with one writer matched is loss, not a second source
            self._sources[source].matched_now = sub.get_publisher_count
        self._graph_timer = self.create_timer(GRAPH_CHECK_PERIOD, self.check_graph,
                                              clock=steady_clock())
        if self.lockstep and values['wait_for_recorder']:
            # the first command waits until the recorder's subscriptions are matched
            self._recorder_gate = RecorderGate(self, values['wait_for_recorder'],
                                               RECORDER_WAIT)
        if not self.lockstep:
            # real time: the control thread takes the inputs and ticks (both triggers)
            self._detach_inputs()
        # the safe hold and every hold path use the adapted model that was valid last
        model = (self.controller.model if self.adaptation is None
                 else AdaptedModel(self.adaptation))
        self.safety = ControllerSafety(
            self, self.joints, sp, model, self._torque_limit, self.period,
            self._publish_safe, float(values['diagnostics_rate']), command_params=cp,
            realtime=not self.lockstep)
        self.safety.on_resume = self._on_resume
        self.safety.more_values = self._node_values
        self.safety.readers = self._command_readers
        self.safety.reader_ids = self._command_reader_ids
        if self.lockstep:
            self.safety.trusted_states = 'lockstep: the plant'
        elif self.state_publisher:
            self.safety.trusted_states = f'only {self.state_publisher}'
        else:
            self.safety.trusted_states = ('any single publisher (state_publisher not set: the '
                                          'first one is taken for the driver)')
            self.get_logger().warning(
                'state_publisher is not set: any single publisher of the joint states is '
                'trusted (a node that publishes them before the driver is taken for it); set '
                "state_publisher to the driver's node (hardware.launch.py: "
                '/joint_state_broadcaster)')
        self.safety.before_check = self._before_watchdog
        self.safety.command_on_timeout = not self.lockstep
        if self.lockstep:
            # lockstep: the watchdog only reports and answers late references; a slower
            # timer costs less of the loop (the run is usually faster than real time)
            self.safety.watchdog_period = max(
                self.period, min(sp.state_timeout, sp.reference_timeout) / 4.0)
        else:
            # real time: the control thread runs the watchdog every period; the executor's
            # timer is its backup only (a timer callback costs the interpreter lock)
            self.safety.watchdog_period = WATCHDOG_BACKUP_PERIODS * self.period
        self.safety.on_transition = self._on_transition
        self.safety.timer_wrap = self._executor_side
        self.safety.create()
        self.get_logger().info(
            f'{cfg.controller.law} at {cfg.control_rate:g} Hz, {cfg.mode}'
            + ('' if self.lockstep else f' (trigger: {cfg.trigger})')
            + f'; safe mode {sp.safe_mode}, state timeout {sp.state_timeout * 1e3:g} ms')
        co = cfg.controller
        stiff = [(name, k, f.b, lim) for name, k, f, lim in zip(
            self.joints, co.joint_stiffness, co.nominal.friction, co.joint_stiffness_limit) if k]
        if stiff:
            # it leans on the joints' own damping: say which, once
            self.get_logger().info(
                'joint_stiffness ' + ', '.join(f'{name} {k:g} N m/rad up to {lim:g} N m (b {b:g})'
                                               for name, k, b, lim in stiff)
                + ': stable only with about the damping b of the nominal model (docs/theory.md)')
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state) -> TransitionCallbackReturn:
        """Arm: commands start with the first joint state received from now on."""
        with self._lock:
            return self._activate()

    def _activate(self) -> TransitionCallbackReturn:
        self._stop_emergency()
        self._failed = ''
        self.state = None
        self.reference = None
        self.trajectory = None
        self._idle_q = None
        self._last_stamp = None
        if self.adaptation is None:         # the estimates are kept (adaptation.reset)
            self.controller.reset()
        for guard in self._sources.values():
            guard.reset()
        self.safety.activate()
        return TransitionCallbackReturn.SUCCESS

    def on_deactivate(self, state) -> TransitionCallbackReturn:
        """Zero torque once, then no more commands."""
        with self._lock:
            self.safety.deactivate()
        return TransitionCallbackReturn.SUCCESS

    def on_cleanup(self, state) -> TransitionCallbackReturn:
        """Release everything configure created."""
        self._stop_control_thread()
        with self._lock:
            self._release()
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state) -> TransitionCallbackReturn:
        """
        Release everything (a ramp to zero torque first if it was commanding); then exit.

        The process ends (:attr:`done_future`) :data:`EXIT_AFTER_SHUTDOWN` after the
        transition, so that its reply and transition event go out first.
        """
        self._stop_control_thread()
        with self._lock:
            self._release()
        self.get_logger().info('shutdown: zero torque sent; the process exits')
        if self._exit_timer is None:
            self._exit_timer = self.create_timer(EXIT_AFTER_SHUTDOWN, self._exit_now,
                                                 clock=steady_clock())
        return TransitionCallbackReturn.SUCCESS

    def _exit_now(self) -> None:
        retire(self, self._exit_timer)
        if not self.done_future.done():
            self.done_future.set_result(True)

    def on_error(self, state) -> TransitionCallbackReturn:
        """Ramp to zero torque after a transition callback raised; the node ends finalized."""
        with self._lock:
            self.fail('a lifecycle transition raised an exception')
        return TransitionCallbackReturn.FAILURE

    def destroy_node(self):
        """Stop the control thread first (it uses the node's handles), then destroy."""
        self._stop_control_thread()
        if self._parameter_proxy is not None:
            self._parameter_proxy.close()
        # the control thread's inputs are not in the node's lists: left alive, they would keep
        # the node, and with it its DDS participant, alive after the context is shut down
        for sub in list(self._detached):
            self._destroy_detached(sub)
        return super().destroy_node()

    def _serve_parameters_here(self, why: str) -> None:
        """Serve the parameter services in this process (the helper failed: ``why``)."""
        self.get_logger().warning(f'{why}; served in this process instead: a very large '
                                  f'parameter request can delay the control loop')
        self._parameter_service = ParameterService(self)

    def close(self) -> None:
        """Process exit (Ctrl-C, SIGTERM, end of manip-sim): as shutdown."""
        self._stop_control_thread()
        with self._lock:
            self._release()

    # -- ways out: every one ends with zero torque reached through the rate limit -----------
    def on_callback_error(self, where: str, exc: BaseException) -> None:
        """Handle an unexpected exception in a callback (``guarded``, executor): :meth:`fail`."""
        self.fail(f'unexpected {type(exc).__name__} in {where}: {exc}')

    def fail(self, detail: str) -> None:
        """
        Stop commanding after an unexpected error: ramp to zero torque, then stay silent.

        Only the emergency ramp publishes from now on (every other command path is muted): the
        last published torque moves to zero at the torque-rate limit (:meth:`_exit_slope`),
        zero is published, and nothing more until a re-activation. Latched, reported as ERROR
        ``callback_error``.
        """
        if self._failed:
            return
        self._failed = detail or 'unexpected error'
        try:
            self.get_logger().error(f'controller: {self._failed}: ramping to zero torque; '
                                    f'deactivate and activate to command again')
        except Exception:  # noqa: BLE001
            pass
        safety = self.safety
        if safety is not None:
            safety.final = f'{self._failed}: zero torque until re-activation'
            safety.final_reason = 'callback_error'
        if self._cmd_pub is not None and self._last_tau is not None:
            self._emergency_timer = self.create_timer(self.period, self._emergency_tick,
                                                      clock=steady_clock())
            self._emergency_t = time.monotonic()
        try:
            if safety is not None:
                safety.publish_diagnostics()
        except Exception:  # noqa: BLE001
            pass

    def _exit_slope(self) -> tuple:
        """
        Per-joint slope of the exit ramp [N m/s].

        ``torque_rate_limit``, raised where needed so that the ramp from the last command
        ends within ``stop_time``: ``max(rate_j, |tau_j| / stop_time)``.
        """
        cp = self.command_params
        tau = self._last_tau or (0.0,) * len(self.joints)
        return tuple(max(r, abs(v) / cp.stop_time) for r, v in zip(cp.torque_rate_limit, tau))

    @locked
    def _emergency_tick(self) -> None:
        """Emergency ramp (steady timer, one period): toward zero, then zero once, then stop."""
        try:
            now = time.monotonic()
            dt = min(max(now - self._emergency_t, 0.0), 2.0 * self.period)
            self._emergency_t = now
            tau = ramp_toward_zero(self._last_tau or self._zero, self._exit_slope(), dt)
            self._publish_tau(tau)
            if not any(tau):
                self._stop_emergency()
                self.get_logger().info('controller: zero torque reached after the error')
        except Exception:  # noqa: BLE001 - nothing else can be done: stop trying
            self._stop_emergency()

    def _stop_emergency(self) -> None:
        if self._emergency_timer is not None:
            retire(self, self._emergency_timer)
            self._emergency_timer = None

    def _ramp_to_zero_now(self) -> None:
        """
        Blocking exit ramp: from the last published torque to zero at the rate limit.

        Used on every way out (process exit, shutdown, cleanup): publishes at the control
        period (sleeping between commands; signals are only flagged meanwhile) until zero is
        reached, in at most ``stop_time / period`` steps of one to two periods each (a late
        process ramps longer, never steps); zero is the last command. Nothing when the last
        published command is already zero or nothing was published, nor in lockstep (the
        simulated plant takes one command per tick; the safety layer sends zero once).
        """
        if (self._cmd_pub is None or self._last_tau is None or not any(self._last_tau)
                or self.lockstep):
            return                      # lockstep (simulation): zero once, as before
        self._stop_emergency()
        slope = self._exit_slope()
        # counted in steps, not bounded by the clock: each step moves at least one period's
        # worth, so zero comes within stop_time / period steps however late this process
        # runs (a deadline on the clock ended a starved ramp with a step to zero)
        steps = int(math.ceil(self.command_params.stop_time / self.period)) + 2
        extend_stop_bound(2.0 * steps * self.period)    # at most two periods a step
        last = time.monotonic()
        tau = self._last_tau
        try:
            while any(tau) and steps > 0:
                steps -= 1
                time.sleep(self.period)
                now = time.monotonic()
                dt = min(max(now - last, self.period), 2.0 * self.period)
                last = now
                tau = ramp_toward_zero(tau, slope, dt)
                self._publish_tau(tau)
            if any(tau):            # not reached: only if the slope could not get there
                self._publish_tau((0.0,) * len(self.joints))
        except Exception as exc:  # noqa: BLE001 - e.g. the context is already shut down
            print(f'error: controller: the exit ramp could not publish: {exc}', file=sys.stderr)
        self._wait_delivered()

    def _wait_delivered(self, timeout: float = 0.5) -> None:
        """
        Wait (bounded) until the driver acknowledged the commands published so far.

        A reliable writer that is destroyed (process exit) drops what its reader has not
        acknowledged yet: a starved driver then never gets the final zero (measured under
        load: the last command received was the ramp's 43 N m).
        """
        from rclpy.duration import Duration
        for pub in (self._array_pub, self._cmd_pub):
            if pub is None:
                continue
            try:
                pub.wait_for_all_acked(Duration(seconds=timeout))
            except Exception:  # noqa: BLE001 - context already gone
                pass

    def _publish_tau(self, tau) -> None:
        """Publish an exit / emergency command (stamped with the last state, hold = last q)."""
        safety = self.safety
        stamp = safety.last_stamp if safety is not None and safety.last_stamp else 0
        q = (safety.hold_target() if safety is not None
             else (0.0,) * len(self.joints))
        zero = [0.0] * len(tau)
        self.publish_command(stamp, ControlOutput(tuple(tau), (False,) * len(tau)),
                             ReferenceSample(0, list(q), zero, zero), emergency=True)
        if safety is not None:
            safety.last_command = tuple(tau)
            safety.limiter.reset(tau)

    def _release(self) -> None:
        self._ramp_to_zero_now()            # the torque reaches zero through the rate limit
        self._stop_emergency()
        if self.safety is not None:
            self.safety.release()           # zero torque once if it was commanding
            self.safety = None
            self._wait_delivered()
        for sub in self._subs:
            if sub in self._detached:
                self._destroy_detached(sub)
            else:
                retire(self, sub)
        for entity in (self._timer, self._graph_timer, self._adaptation_timer,
                       self._adaptation_reset_timer):
            retire(self, entity)
        self._subs = []
        for guard in self._sources.values():
            guard.matched_now = None
        if self._recorder_gate is not None:
            self._recorder_gate.destroy()
            self._recorder_gate = None
        self._timer = self._graph_timer = None
        self._adaptation_timer = self._adaptation_reset_timer = None
        for pub in (self._array_pub, self._cmd_pub, self._adaptation_pub):
            if pub is not None:
                self.destroy_publisher(pub)
        self._array_pub = self._cmd_pub = self._adaptation_pub = None

    # -- the control thread (real time) ----------------------------------------------------
    def _detach_inputs(self) -> None:
        """
        Take the input subscriptions away from the executor: the control thread waits on them.

        Their event handlers (rclpy's default: incompatible QoS) stay with the node.
        """
        for sub in self._subs:
            self._subscriptions.remove(sub)
            self._detached.append(sub)

    def _destroy_detached(self, sub) -> None:
        """Destroy an input subscription of the control thread (the thread has stopped)."""
        for handler in sub.event_handlers:
            try:
                self.remove_waitable(handler)
            except ValueError:
                pass
        self._detached.remove(sub)
        retired = getattr(self, '_retired_entities', None)
        if retired is None:
            retired = self._retired_entities = []
        retired.append(sub)             # never freed under a queued event callback
        try:
            sub.destroy()
        except Exception:  # noqa: BLE001 - already destroyed
            pass

    def _start_control_thread(self) -> None:
        """
        Start the control thread: real-time scheduling and locked memory where permitted.

        ``realtime.lock_memory``: ``mlockall`` for the process; ``realtime.priority``: the
        thread's SCHED_FIFO priority (set by the thread itself). Where the OS refuses either,
        one warning, and the loop runs anyway (normal scheduling).
        """
        if self._loop_thread is not None:
            return
        from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
        notes = []
        own = owns_process()        # else (an embedding process) only the thread changes
        if own and self.values['realtime.lock_memory'] and not _MEMORY['locked']:
            why = lock_memory()
            if why:
                notes.append(f'realtime.lock_memory: {why}')
            else:
                _MEMORY['locked'] = True
        # a thread waiting for the interpreter lock gets it within this [s], not the 5 ms
        # default, while a service call of the executor thread runs Python code
        sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL))
        if own:
            single_threaded_blas()          # no BLAS threads spinning beside the loop
        prio = int(self.values['realtime.priority'])
        if own and prio > 1 and threading.current_thread() is threading.main_thread():
            # the executor (this thread) shares the interpreter lock with the control thread:
            # descheduled by a normal process while holding it, it would hold the control
            # thread too; at the lowest real-time priority it is not, and the control thread
            # still preempts it
            why = set_thread_realtime(EXECUTOR_PRIORITY)
            if why:
                notes.append(f'executor thread: {why}')
        self._loop_notes = notes
        if own:
            # everything built so far lives as long as the process: out of the collector's
            # scans (a full collection of this process took 100-330 ms, every thread stopped).
            # Not in a process it does not own: a frozen cycle is never freed, and a node
            # kept that way keeps its DDS participant alive in that process
            gc.collect()
            gc.freeze()
        self._loop_stop = False
        self._loop_gc = _rclpy.GuardCondition(self.context.handle)
        self._loop_thread = threading.Thread(target=self._control_loop, name='control',
                                             daemon=True)
        self._loop_thread.start()

    def _stop_control_thread(self) -> None:
        """Stop the control thread and wait for it (never while holding the lock)."""
        thread = self._loop_thread
        if thread is None:
            return
        self._loop_stop = True
        try:
            self._loop_gc.trigger_guard_condition()
        except Exception:  # noqa: BLE001 - the context is gone: the wait returns anyway
            pass
        if thread is not threading.current_thread():
            thread.join(2.0)
        self._loop_thread = None
        try:
            # it holds the context (so its DDS participant); in use by a thread that did not
            # end yet, it goes when that thread leaves its wait
            self._loop_gc.destroy_when_not_in_use()
        except Exception:  # noqa: BLE001 - already destroyed
            pass

    def _control_loop(self) -> None:
        """
        Run the control thread: wait for an input or the next deadline, step under the lock.

        Each wake-up takes every reference waiting (in order: the tick uses the newest), then
        the joint states (``trigger: state``: a tick on the newest fresh one); ``trigger:
        timer`` ticks on an absolute schedule (a late tick is not made up with a burst);
        the safety watchdog runs every period. The executor serves services, parameters, the
        graph check and the diagnostics meanwhile; its watchdog timer runs only when this
        thread has not run the watchdog for :data:`WATCHDOG_BACKUP_PERIODS` periods.
        """
        from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
        name_thread('control')
        # embedded in a process it does not own (manip-sim, composed, tests), the process's
        # owner chooses the scheduling (manip-sim --rt-priority)
        prio = int(self.values['realtime.priority']) if owns_process() else 0
        why = set_thread_realtime(prio)
        if not why and prio > 1:
            # the DDS threads deliver the states: just below the control thread
            why = set_threads_realtime('dds.', prio - 1)[1]
        notes = list(self._loop_notes) + ([f'realtime.priority: {why}'] if why else [])
        self.realtime_status = (f'SCHED_FIFO {prio}' if prio > 0 and not why
                                else 'normal scheduling') + (
            ', memory locked' if _MEMORY['locked'] else '')
        if notes:
            self.get_logger().warning(
                'control thread: ' + '; '.join(notes) + f': running with '
                f'{self.realtime_status} (a busy host can delay ticks)')
        else:
            self.get_logger().info(f'control thread: {self.realtime_status}')
        period = int(round(self.period * 1e9))
        timer = self.config.trigger == 'timer'
        gc = self._loop_gc
        try:
            ws = _rclpy.WaitSet(2, 1, 0, 0, 0, 0, self.context.handle)
        except Exception as exc:  # noqa: BLE001 - the context is gone
            self.get_logger().error(f'control thread: no wait set ({exc})')
            return
        try:
            self._run_control_loop(ws, gc, period, timer)
        finally:
            ws.destroy_when_not_in_use()        # it holds the context, as the guard does

    def _run_control_loop(self, ws, gc, period: int, timer: bool) -> None:
        """Loop of :meth:`_control_loop` on its wait set ``ws`` and stop guard ``gc``."""
        state_sub, ref_sub = self._subs
        next_tick = next_watchdog = time.monotonic_ns() + period
        while not self._loop_stop:
            deadline = min(next_tick, next_watchdog) if timer else next_watchdog
            try:
                with state_sub.handle, ref_sub.handle, gc:
                    ws.clear_entities()
                    ws.add_subscription(state_sub.handle)
                    ws.add_subscription(ref_sub.handle)
                    ws.add_guard_condition(gc)
                    ws.wait(max(deadline - time.monotonic_ns(), 0))
            except Exception:  # noqa: BLE001 - destroyed or shut down: the thread ends
                if not self._loop_stop:
                    self.get_logger().error('control thread: inputs gone, stopping')
                return
            if (not ws.get_ready_entities('subscription')
                    and time.monotonic_ns() < deadline and not self._loop_stop):
                # woken with nothing to take (a DDS status not yet taken by the executor,
                # e.g. a lost best-effort state): no busy loop at real-time priority
                self.spurious_wakeups += 1
                time.sleep(SPURIOUS_WAIT)
                continue
            with self._lock:
                if self._loop_stop or self.safety is None:
                    continue
                try:
                    self._take_references()
                    now = time.monotonic_ns()
                    if timer:
                        self.on_joint_state()       # stored; the tick is on the schedule
                        if now >= next_tick:
                            next_tick += period
                            if next_tick <= now:    # late: no burst of catch-up ticks
                                next_tick = now + period
                            self._on_timer()
                    else:
                        self.on_joint_state()       # a tick on the newest fresh state
                    if now >= next_watchdog and self.safety is not None:
                        next_watchdog = now + period
                        self._loop_watchdog = time.monotonic()
                        self.safety.watchdog_tick()
                except Exception as exc:  # noqa: BLE001 - the thread must go on
                    callback_failed(self, 'control thread', exc)

    def _take_references(self) -> None:
        """Control thread: handle every reference waiting in the reader, in order."""
        sub = self._subs[1]
        for _ in range(REFERENCE_BACKLOG):
            got = _take(sub)
            if got is None:
                return
            self.on_reference(*got)

    def _executor_side(self, fn):
        """
        Wrap a safety-layer timer callback of the executor: under the lock.

        Real time, the watchdog timer is the control thread's backup: it runs only when
        the thread has not run the watchdog for :data:`WATCHDOG_BACKUP_PERIODS` periods.
        """
        backup = getattr(fn, '__name__', '') == 'watchdog_tick'

        def run():
            if (backup and self._loop_thread is not None and time.monotonic()
                    - self._loop_watchdog < WATCHDOG_BACKUP_PERIODS * self.period):
                return
            with self._lock:
                fn()
        return run

    def _torque_limit(self):
        return self.controller.torque_limit

    def _on_transition(self, tr) -> None:
        pass

    def _on_resume(self, why: str) -> None:
        if self.controller is not None and self.adaptation is None:
            self.controller.reset()         # clean resume: no error integral from before

    # -- input ------------------------------------------------------------------------------
    @guarded
    @locked
    def on_joint_state(self, raw: bytes | None = None, info=None) -> None:
        """
        Validate and store the measured state of the configured joints; maybe tick.

        ``raw`` None (the control thread): only the states waiting in the reader.
        """
        safety = self.safety
        if safety is None:
            return
        if self.lockstep:
            self._on_joint_state(safety, raw, info)
            return
        # real time: transition logs and diagnostics after the command (first-tick latency)
        safety.defer = True
        try:
            # the states behind it in the reader: each one source-checked in order (another
            # publisher's are refused and counted), only the newest of the locked source used
            # (an older one's age is the reader's backlog, not the driver's clock)
            newest = None
            if raw is not None:
                newest = (raw, info) if self._from_source('joint_states', info) else None
                if newest is None:
                    self.refused_states += 1
            for _ in range(STATE_HISTORY_DEPTH):
                got = self._take_state()
                if got is None:
                    break
                if self._from_source('joint_states', got[1]):
                    newest = got
                else:
                    self.refused_states += 1
            fresh = newest is not None and self._on_joint_state(safety, *newest, checked=True)
            if fresh and self.config.trigger == 'state':
                self.fresh_states += 1
                # one tick per fresh state, at most about one per control period of the
                # driver's stamps: a driver faster than control_rate is sampled (its newest
                # state), not queued. By stamp, not arrival: a state delivered late must not
                # make the next one look early (both ticks are needed, one per driver tick)
                stamp, last = self.state.stamp_ns, self._last_tick_stamp
                period = safety.stamps.rate.period
                if (period is None or last is None or stamp < last
                        or (stamp - last) * 1e-9 >= self.period - 0.5 * period):
                    self._last_tick_stamp = stamp
                    self.tick()
                else:
                    self.sampled_states += 1
        finally:
            safety.flush()

    def _take_state(self):
        """Take the next joint state waiting in the reader: ``(raw, info)`` or None."""
        if not self._subs:
            return None
        return _take(self._subs[0])

    def _on_joint_state(self, safety, raw: bytes, info, checked: bool = False) -> bool:
        """
        Validate and store one joint state; True when it is stored for a real-time tick.

        ``checked``: its source has been checked already (:meth:`_from_source`).
        """
        if not checked and not self._from_source('joint_states', info):
            self.refused_states += 1
            return False
        msg, reason = cdr.decode_joint_state(raw)
        if reason:
            safety.refuse('joint_states', *decode_refusal(reason))
            sample = None
        else:
            stamp, names, position, velocity, effort = msg
            sample = safety.accept_joint_state(stamp, names, position, velocity, effort,
                                               wall_stamp=not self.lockstep,
                                               seq=sequence_number(info))
        if sample is None:
            self.refused_states += 1
            self.last_refusal = 'joint state refused (see /controller/diagnostics)'
            return False
        if not safety.should_command:
            return False                    # inactive
        self.state = StateSample(stamp, list(sample.position), list(sample.velocity))
        if self.lockstep:
            if stamp == self._last_stamp:
                self._republish()           # the plant re-sent a tick: same answer again
            else:
                self._lockstep_try()
                if (self._last_stamp != stamp and self.reference is not None
                        and safety.held_reference() is not None):
                    self.tick()             # the reference is lost: answer with the hold
        return True

    @guarded
    @locked
    def on_reference(self, raw: bytes, info=None) -> None:
        """Validate and store the reference sample (by name); maybe tick (lockstep)."""
        safety = self.safety
        if safety is None:
            return
        if not self._from_source('reference', info):
            self.refused_references += 1
            return
        msg, reason = cdr.decode_reference(raw)
        if reason:
            safety.refuse('reference', *decode_refusal(reason))
            ref = None
        else:
            stamp = msg[0]
            n_points = _point_count(raw)
            if n_points > 1:
                self._take_trajectory(raw, n_points, len(msg[1]))
                return
            ref = safety.accept_reference(msg[1], msg[2], msg[3], msg[4])
        if ref is None:
            self.refused_references += 1
            self.last_refusal = 'reference refused (see /controller/diagnostics)'
            return
        self.reference = ReferenceSample(stamp, list(ref.q), list(ref.qd), list(ref.qdd))
        if self.trajectory is not None:
            self.trajectory = None
            self.get_logger().info('a single-point reference replaces the trajectory')
        safety.no_reference = False
        safety.reference_arrived(stamp * 1e-9 if self.lockstep else time.monotonic(),
                                 ref.q, ref.qd)
        if self.lockstep and stamp != self._last_stamp and safety.should_command:
            self._lockstep_try()

    def _refuse_trajectory(self, why, detail: str) -> None:
        self.safety.refuse('reference', why, detail)
        self.refused_references += 1
        self.last_refusal = 'reference refused (see /controller/diagnostics)'

    def _take_trajectory(self, raw: bytes, n_points: int, n_names: int = 0) -> None:
        """
        Take a multi-point JointTrajectory.

        Followed by its ``time_from_start`` (cubic Hermite through the points, from the
        reference in use), in real time; refused in lockstep (one point per tick) and when a
        point or the timing is invalid.
        """
        safety = self.safety
        if self.lockstep:
            self._refuse_trajectory(RefusalReason.LENGTH_MISMATCH,
                                    f'{n_points} trajectory points: multi-point references '
                                    f'are followed in real time only')
            return
        if n_points > MAX_TRAJECTORY_POINTS or n_points * n_names > MAX_TRAJECTORY_VALUES:
            # bounded cost: deserializing and checking a point costs about 8 us here
            self._refuse_trajectory(RefusalReason.TOO_LARGE,
                                    f'{n_points} trajectory points of {n_names} joints (at '
                                    f'most {MAX_TRAJECTORY_POINTS} points and '
                                    f'{MAX_TRAJECTORY_VALUES} point values)')
            return
        from rclpy.serialization import deserialize_message
        try:
            msg = deserialize_message(raw, JointTrajectory)
        except Exception as exc:  # noqa: BLE001 - any decoding error is a refusal
            self._refuse_trajectory(RefusalReason.MALFORMED, f'JointTrajectory: {exc}')
            return
        positions, velocities, times = [], [], []
        for k, pt in enumerate(msg.points):
            r = map_reference(self.joints, msg.joint_names, pt.positions, pt.velocities,
                              pt.accelerations)
            if isinstance(r, Refusal):
                self._refuse_trajectory(r.reason, f'points[{k}]: {r.detail}')
                return
            positions.append(r.q)
            velocities.append(r.qd if len(pt.velocities) else None)
            times.append(pt.time_from_start.sec + pt.time_from_start.nanosec * 1e-9)
        start = safety._last_used_q
        if start is None:
            start = tuple(self.state.q) if self.state is not None else positions[0]
        now = time.monotonic()
        stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        delay = stamp - self._wall.now().nanoseconds * 1e-9 if stamp > 0.0 else 0.0
        t0 = now + max(delay, 0.0)
        try:
            traj = trajectory_from_points(t0, start, times, positions, velocities)
        except TrajectoryError as exc:
            self._refuse_trajectory(RefusalReason.BAD_TYPE, str(exc))
            return
        self.trajectory = traj
        q0 = traj.sample(now)
        safety.references.update(safety.now(), SafetyReference(*q0))
        safety.no_reference = False
        self.reference = ReferenceSample(0, list(q0[0]), list(q0[1]), list(q0[2]))
        self.get_logger().info(
            f'following a {n_points}-point trajectory from the reference in use, '
            f'{traj.end - now:.3f} s to its last point')

    def _from_source(self, source: str, info) -> bool:
        """
        Check the message's source before any decoding.

        False (refused, counted, safe mode ``source_conflict``) when the message is not from
        the publisher the input is locked to (:class:`~manip_control.safety.SourceGuard`).
        """
        guard = self._sources[source]
        now = self.safety.now()
        locks = guard.locks
        refusal = guard.check(sequence_number(info), now)
        if refusal is None:
            if (guard.locks != locks and source == 'joint_states'
                    and RESTART_SILENCE <= guard.lock_silence < math.inf):
                self.safety.source_restarted()      # a new driver process's states
            return True
        self.safety.refuse(source, *refusal)
        conflict = guard.conflict(now)
        if conflict:        # with state_publisher, another node's states are only refused
            self.safety.set_source_fault(conflict)
        return False

    def _poll_matches(self, from_watchdog: bool = False) -> None:
        """
        Look at the matched counts of the inputs and of the command publishers; act on a change.

        Called every :data:`MATCH_POLL_PERIOD` from the watchdog hook (real time) and by the
        graph check: the counts are read from the endpoints (no DDS event is taken: see
        :meth:`on_configure`).
        ``from_watchdog``: the watchdog runs next anyway (no extra tick here).
        """
        subs = self._subs
        if len(subs) == 2:
            for source, sub in zip(('joint_states', 'reference'), subs):
                n = sub.get_publisher_count()
                if n != self._matched[source]:
                    self._on_matched(source, n, from_watchdog)
        for which, pub in (('array', self._array_pub), ('joint', self._cmd_pub)):
            if pub is not None:
                n = pub.get_subscription_count()
                if n != self._readers[which]:
                    self._on_command_matched(which, n)

    def _on_matched(self, source: str, count: int, from_watchdog: bool) -> None:
        """
        Judge the sources now: a publisher matched or left an input (DDS matched count).

        Without ``state_publisher``, a second matched publisher ends normal commands here,
        within a control period of the match, not at the next graph poll; the safety
        watchdog then ramps to zero.
        """
        self._matched[source] = count
        self.check_graph(poll=False)
        safety = self.safety
        if (not from_watchdog and safety is not None and safety.supervisor.source_fault
                and safety.supervisor.should_command and not self.lockstep):
            safety.watchdog_tick()      # the first command of the ramp to zero now

    def _on_command_matched(self, which: str, count: int) -> None:
        """
        Note a reader of the commands that matched or left (a driver started or stopped).

        When the last reader of both command topics left (the driver is gone), the safe
        command goes to zero through the rate limit (nobody holds it; a restarted driver
        starts from zero torque); when a reader matches again, zero is sent for
        :data:`RESTART_SETTLE` (the first samples to a new reader can be lost while it
        matches) and the hold then ramps up from zero: no torque step at the new driver.
        """
        left = count < self._readers[which]
        self._readers[which] = count
        safety = self.safety
        if safety is None:
            return
        total = sum(self._readers.values())
        if total == 0 and left:
            safety.driver_absent = True
            self.get_logger().warning('no reader of the commands left (the driver is gone): '
                                      'the safe command goes to zero torque')
        elif total > 0 and safety.driver_absent:
            safety.driver_absent = False
            safety.settle_until = safety.now() + RESTART_SETTLE
            self.get_logger().info('a reader of the commands again (a restarted driver): '
                                   f'zero torque for {RESTART_SETTLE:g} s, then the hold '
                                   'ramps up from zero')
        safety.reader_check()       # a new one while the states are stale: take it up

    def _command_readers(self) -> int:
        """Return the readers matched with the command publishers now (DDS matched count)."""
        return sum(p.get_subscription_count() for p in (self._array_pub, self._cmd_pub)
                   if p is not None)

    def _command_reader_ids(self) -> frozenset:
        """Return the ids (GIDs) of the readers of the command topics on the graph now."""
        ids = set()
        for pub in (self._array_pub, self._cmd_pub):
            if pub is not None:
                ids.update(bytes(info.endpoint_gid)
                           for info in self.get_subscriptions_info_by_topic(pub.topic_name))
        return frozenset(ids)

    @guarded
    @locked
    def check_graph(self, poll: bool = True) -> None:
        """
        Graph check (steady timer): the publishers of the inputs and of the command topics.

        The counts go to the diagnostics (``sources.*``; a change is logged once). Another
        publisher of a command topic (a second controller) is a source conflict (safe mode)
        while it is there; a conflict from another input publisher's data ends once its
        messages stopped for the guard's hold time. ``poll``: look at the matched counts
        first (:meth:`_poll_matches`; lockstep polls them only here).
        """
        safety = self.safety
        if safety is None:
            return
        if poll:
            self._poll_matches()
        report = {}
        # the resolved names (remapping, namespace) of this node's own topics
        inputs = dict(zip(('joint_states', 'reference'), (s.topic_name for s in self._subs)))
        now = safety.now()
        for source, guard in self._sources.items():
            infos = publishers(self, inputs.get(source, source))
            guard.graph_count(max(len(infos), self._matched[source]), now)
            guard.publisher_names = tuple(describe(i) for i in infos)
            report[f'sources.{source}.publishers'] = str(guard.publishers)
            # what DDS delivers: a writer's samples reach the reader only once it matched
            report[f'sources.{source}.matched'] = str(self._matched[source])
            if guard.lost_jumps:        # numbering jumps of the one writer (a stalled reader)
                report[f'sources.{source}.lost_jumps'] = str(guard.lost_jumps)
            if guard.publishers > 1:
                report[f'sources.{source}.names'] = ', '.join(guard.publisher_names)
            nodes = [f'{i.node_namespace.rstrip("/")}/{i.node_name}' for i in infos]
            # a publisher that sent nothing for SILENT_PUBLISHER while one other sends (a
            # killed or stopped driver still on the graph) is not a second source
            quiet = max(safety.state_timeout, SILENT_PUBLISHER)
            senders = guard.single_sender(now, quiet)
            conflict, guard.may_lock = source_check(
                guard.expected if not self.lockstep else '', nodes, self._matched[source],
                senders=senders)
            if conflict and senders is None and guard.restarting(now, quiet):
                # a publisher appeared after the states stopped (a restarted driver next to
                # its dead predecessor): its states wait until it is known to be the only one
                # that sends, and the stale hold goes on meanwhile (a conflict would ramp to
                # zero torque and drop the arm for the whole window)
                conflict, guard.may_lock = '', False
            if self.lockstep:
                conflict = ''       # lockstep: the plant is the clock; the sequence guard
                guard.may_lock = True
            elif guard.graph_conflict and not conflict and senders == 1:
                guard.last_refused = -math.inf  # what the conflict refused was the one sender's
            guard.graph_conflict = conflict
        ns = self.get_namespace().rstrip('/')
        others = set()
        for topic in (p.topic_name for p in (self._array_pub, self._cmd_pub) if p is not None):
            infos = publishers(self, topic)
            if len(infos) > 1:
                others.update(describe(i) for i in infos
                              if (i.node_name, i.node_namespace.rstrip('/'))
                              != (self.get_name(), ns))
                if not others:          # namesakes: another node with this node's name
                    others.add(f'{len(infos)} publishers of {topic}')
        report['sources.commands.other_publishers'] = ', '.join(sorted(others))
        if report != self._graph_report:
            self._graph_report = report
            lines = [f'{k}: {v}' for k, v in report.items()
                     if k.endswith('.names') or (k.endswith('other_publishers') and v)]
            if lines:
                self.get_logger().error('more than one publisher: ' + '; '.join(lines))
        safety.extra_values = report
        fault = ''
        if others:
            fault = f'another controller publishes the commands ({", ".join(sorted(others))})'
        for guard in self._sources.values():
            fault = fault or guard.conflict(now)
        safety.set_source_fault(fault)

    def _lockstep_try(self) -> None:
        st, ref = self.state, self.reference
        if st is not None and ref is not None and st.stamp_ns == ref.stamp_ns:
            self.tick()

    @guarded
    @locked
    def _on_timer(self) -> None:
        safety = self.safety
        if self.state is not None and safety is not None:
            safety.defer = True
            try:
                self.tick()
            finally:
                safety.flush()

    def _before_watchdog(self, now: float) -> None:
        """
        Run the safety watchdog hook (every period).

        Real time: the matched counts are looked at every :data:`MATCH_POLL_PERIOD`
        (:meth:`_poll_matches`) and a joint state waiting in the reader is taken first
        (:meth:`_take_pending_state`). Lockstep: a state the controller has not answered
        does not age, and it is answered
        with the held reference once its reference is later than
        ``safety.reference_timeout``.
        """
        if not self.lockstep:
            if now - self._last_match_poll >= MATCH_POLL_PERIOD:
                self._last_match_poll = now
                self._poll_matches(from_watchdog=True)
            self._take_pending_state()
            return
        st = self.state
        if st is None or st.stamp_ns == self._last_stamp or not self.safety.should_command:
            return
        self.safety.touch()
        if self.reference is not None and self.safety.held_reference() is not None:
            self.tick()

    def _take_pending_state(self) -> None:
        """
        Real time: take a joint state waiting in the reader before the watchdog judges.

        After this process was not scheduled for a while, the watchdog timer may run before
        the state callback although a fresh state is waiting: the state is taken first, so
        the age judged is that of the newest state that arrived, not of the last processed.
        """
        got = self._take_state()
        if got is not None:
            self.on_joint_state(*got)

    # -- the control step -------------------------------------------------------------------
    def tick(self) -> ControlOutput | None:
        """
        One control step with the stored state and reference: compute, publish.

        The reference is replaced by the watchdog's stop (from the last sample's position and
        velocity to rest at the reference acceleration limit) once it is older than
        ``safety.reference_timeout``, and kept inside the safety envelope; in safe
        mode the safe command replaces the feedback law. Nothing is published while the
        states are stale or before the first state (the safety layer commands then). While
        the restart window is open the readers of the commands are looked at first
        (:meth:`~manip_control.nodes.controller_safety.ControllerSafety.reader_check`): a
        restarted driver's new reader gets the take-up's zero instead of the law.
        """
        if self._pending:
            self._apply_pending()
        safety = self.safety
        if safety is None:
            return None
        if self._recorder_gate is not None and not self._recorder_gate.ready():
            return None                     # lockstep: the plant sends the tick again
        safety.check()
        if not safety.should_command or (safety.stale and not self.lockstep):
            return None                     # the safety watchdog commands while stale
        if safety.restarted_reader_taken_up(safety.now()):
            return None                     # states from a restarted driver: zero went first
        st, ref = self.state, self.reference
        t = st.stamp_ns * 1e-9 if self.lockstep else time.monotonic()
        if self.trajectory is not None:
            q, qd, qdd = self.trajectory.sample(t)
            safety.references.update(safety.now(), SafetyReference(q, qd, qdd))
            ref = ReferenceSample(st.stamp_ns, list(q), list(qd), list(qdd))
        elif ref is None:
            # no reference since the activation: hold the first measured position
            if self._idle_q is None:
                self._idle_q = list(st.q)
            ref = ReferenceSample(st.stamp_ns, self._idle_q, self._zero, self._zero)
        else:
            held = safety.held_reference()
            if held is not None:
                # the watchdog's stop, whole: a zero velocity here would step the velocity
                # error by the reference's speed at the timeout
                ref = ReferenceSample(ref.stamp_ns, list(held.q), list(held.qd), list(held.qdd))
        q_d, qd_d, qdd_d = safety.shape_reference(t, ref.q_d, ref.qd_d, ref.qdd_d, st.q)
        if q_d is not ref.q_d or qd_d is not ref.qd_d or qdd_d is not ref.qdd_d:
            ref = ReferenceSample(ref.stamp_ns, list(q_d), list(qd_d), list(qdd_d))
        result = []

        def law():
            out = self.compute(st, ref)
            result.append(out)
            return out.tau

        tau, normal = safety.command(law)
        if normal:
            out = result[0]
            if out.tau != tuple(tau):    # the torque-rate limit acted
                out = ControlOutput(tuple(tau), out.saturated)
        else:
            lim = self.controller.torque_limit
            out = ControlOutput(tuple(tau), tuple(abs(t) >= lk for t, lk in zip(tau, lim)))
            ref = ReferenceSample(ref.stamp_ns, list(safety.hold_target()), self._zero,
                                  self._zero)
        self.publish_command(st.stamp_ns, out, ref)
        self.ticks += 1
        self._last_stamp = st.stamp_ns
        if self.history is not None:
            fresh = st.stamp_ns != self._last_used_state
            if not self.lockstep:
                self.latencies.append((self._wall.now().nanoseconds - st.stamp_ns, fresh))
            self.history.append((st.stamp_ns * 1e-9, *st.q, *ref.q_d, *ref.qd_d, *ref.qdd_d,
                                 *out.tau, *out.saturated))
        self._last_used_state = st.stamp_ns
        return out

    def history_snapshot(self) -> tuple[list, list]:
        """Return copies of ``history`` and ``latencies`` taken together (between ticks)."""
        with self._lock:
            return list(self.history or ()), list(self.latencies or ())

    def compute(self, st: StateSample, ref: ReferenceSample) -> ControlOutput:
        """Call the core: the torque command after limits for a state and reference."""
        law = self.adaptation
        if law is None:
            return self.controller.update(st.q, st.qd, ref.q_d, ref.qd_d, ref.qdd_d)
        # no adaptation step on a state already used: its error is the reference's advance
        out = self.controller.update(st.q, st.qd, ref.q_d, ref.qd_d, ref.qdd_d,
                                     adapt=st.stamp_ns != self._last_used_state)
        if law.fallbacks != self._adaptation_fallbacks:
            self._adaptation_fallbacks = law.fallbacks
            now = time.monotonic()
            if now - self._adaptation_logged >= 1.0:
                self._adaptation_logged = now
                self.get_logger().warning(f'adaptation refused a step ({law.fallbacks} so '
                                          f'far): {law.fallback_reason}')
        return out

    # -- adaptation -------------------------------------------------------------------------
    def _make_controller(self, cfg) -> Controller | AdaptiveController:
        """Build the feedback law of the configuration: computed torque, PD + g, or adaptive."""
        co = cfg.controller
        self.adaptation = None
        if not co.adaptation.enabled:
            return Controller(co, cfg.period, self.arm)
        if self.arm is None:
            ctl = AdaptiveController(co, cfg.period, check_every=ADAPTIVE_CHECK_EVERY)
        elif not self.lockstep:
            # measured: against the MuJoCo Panda on a 2-core host, a 2 kg payload made the
            # adaptive law lose the arm (velocity and position limits) in real time
            raise ParameterError(
                'adaptation.enabled: not in real time on a URDF arm (the adaptive law lost the '
                'MuJoCo Panda after a payload pick-up on the test host; docs/adaptation.md); '
                'mode lockstep (manip-sim --adapt) or the 2R only')
        else:
            # the identification's base parameters and regressor of the nominal arm
            fr = co.nominal.friction
            base = base_parameters(ArmRegressor(self.arm))
            reg = adaptive_regressor(base, [f.b for f in fr], [f.tau_c for f in fr],
                                     self._urdf or None, 'robot_description')
            ctl = AdaptiveController(co, cfg.period, self.arm, reg,
                                     check_every=ADAPTIVE_CHECK_EVERY)
        self.adaptation = law = ctl.law
        # the excitation analysis (an eigen-decomposition) runs beside the publication, in the
        # executor's thread, on a copy: never in a tick
        law.excitation_in_loop = False
        law.freeze(bool(self.get_parameter('adaptation.freeze').value))   # may start frozen
        self._adaptation_fallbacks = 0
        self._adaptation_pub = self.create_publisher(DiagnosticArray, '~/adaptation', 10)
        rate = float(self.values['diagnostics_rate'])
        if rate > 0.0:
            self._adaptation_timer = self.create_timer(
                1.0 / rate, self._publish_adaptation, clock=steady_clock())
        self.get_logger().info(
            f'adaptation: {law.regressor.size} base parameters '
            f'({int(law.active.sum())} adapted); estimates on '
            f'{self.resolve_topic_name("~/adaptation")}')
        return ctl

    def _node_values(self) -> dict[str, str]:
        """Diagnostics key/values of the node: its input pacing and the adaptation."""
        return {'fresh_states': str(self.fresh_states),
                'sampled_states': str(self.sampled_states),
                'spurious_wakeups': str(self.spurious_wakeups), **self.adaptation_values()}

    def adaptation_values(self) -> dict[str, str]:
        """Return the law's state as diagnostics key/values (empty without adaptation)."""
        law = self.adaptation
        if law is None:
            return {}
        names = [n for n, e in zip(law.names, law.excited) if e]
        return {'adaptation': 'frozen' if law.frozen else 'adapting',
                'adaptation.time_s': f'{law.ticks * law.period:.3f}',
                'adaptation.excited': ', '.join(names),
                'adaptation.fallbacks': str(law.fallbacks),
                'adaptation.fallback_reason': law.fallback_reason or ''}

    def _publish_adaptation(self) -> None:
        """Publish the estimates: one status, per parameter its estimate, nominal, excited."""
        with self._lock:
            law, pub = self.adaptation, self._adaptation_pub
            if law is None or pub is None:
                return
            information = law.information.copy()
        analysis = law.excitation_of(information)
        with self._lock:
            if self.adaptation is not law:
                return
            law.set_excitation(*analysis)
            values = self.adaptation_values()
            est = law.estimates
            for k, name in enumerate(law.names):
                values[f'estimate.{name}'] = f'{est[k]:.10g}'
                values[f'nominal.{name}'] = f'{law.nominal[k]:.10g}'
                values[f'excited.{name}'] = str(bool(law.excited[k])).lower()
                values[f'unit.{name}'] = law.units[k]
        st = DiagnosticStatus()
        st.name = f'{self.get_name()}: adaptation'
        st.hardware_id = self.get_name()
        st.level = bytes([1 if values['adaptation.fallback_reason'] else 0])
        st.message = values['adaptation']
        st.values = [KeyValue(key=k, value=v) for k, v in values.items()]
        arr = DiagnosticArray()
        arr.header.stamp = self.get_clock().now().to_msg()
        arr.status = [st]
        pub.publish(arr)

    def _adaptation_command(self, name: str, value) -> str:
        """Run ``adaptation.freeze / reset / save_to``; return why it is refused, or ''."""
        law = self.adaptation
        if law is None:
            if not value:
                return ''                   # the default values: nothing to do
            return f'{name}: adaptation is not enabled (adaptation.enabled: false)'
        if name == 'adaptation.freeze':
            law.freeze(bool(value))
            self.get_logger().info(f'adaptation {"frozen" if value else "resumed"}')
        elif name == 'adaptation.reset' and value:
            law.reset()
            self._adaptation_fallbacks = 0
            self.get_logger().info('adaptation reset: the nominal model')
            if self._adaptation_reset_timer is None:
                self._adaptation_reset_timer = self.create_timer(0.05, self._reset_done)
        elif name == 'adaptation.save_to' and value:
            try:
                files = law.save(str(value))
            except (OSError, ValueError) as exc:
                return f'adaptation.save_to: {exc}'
            self.get_logger().info('adaptation: estimates written to '
                                   + ', '.join(str(f) for f in files))
        return ''

    def _reset_done(self) -> None:
        """Let ``adaptation.reset`` read false again after a reset."""
        timer, self._adaptation_reset_timer = self._adaptation_reset_timer, None
        retire(self, timer)
        self.set_parameters([Parameter('adaptation.reset', Parameter.Type.BOOL, False)])

    def publish_command(self, stamp: int, out: ControlOutput, ref: ReferenceSample,
                        emergency: bool = False) -> None:
        """
        Publish the command on joint_commands (stamped) and effort_controller/commands.

        After an unexpected error (:meth:`fail`) only the emergency ramp publishes.
        """
        if self._cmd_pub is None or (self._failed and not emergency):
            return
        tau = out.tau
        self._last_tau = tau
        self._cmd_raw = self._cmd_enc.encode(stamp, ref.q_d, ref.qd_d, tau)
        self._array_raw = self._array_enc.encode(tau)
        self._cmd_pub.publish(self._cmd_raw)
        self._array_pub.publish(self._array_raw)
        self.published_commands += 1

    def _publish_safe(self, tau, stamp, hold_q) -> None:
        """Publish a safety-layer command (hold / ramp / zero), stamped with the last state."""
        self.publish_command(stamp if stamp is not None else 0,
                             ControlOutput(tuple(tau), (False,) * len(tau)),
                             ReferenceSample(0, list(hold_q), self._zero, self._zero))

    def _republish(self) -> None:
        if self._cmd_pub is None or not self._cmd_raw or self._failed:
            return
        self._cmd_pub.publish(self._cmd_raw)
        self._array_pub.publish(self._array_raw)
        self.published_commands += 1

    # -- runtime parameters -----------------------------------------------------------------
    def _coerce_parameters(self, params: list) -> list:
        """Pre-set: accept integers for double gains (``ros2 param set kp "[30, 16]"``)."""
        return [coerce_parameter(self._specs[p.name], p) if p.name in self._specs else p
                for p in params]

    @locked
    def _check_parameters(self, params: list) -> SetParametersResult:
        """
        Validate runtime changes (core rules); stage valid ones for the next tick.

        ``use_sim_time`` is refused while active (the clock of the stamps, the watchdogs and
        the reference would change under a running loop). Under the node's lock: the control
        thread takes the staged gains and reads the safety settings between its ticks, never
        halfway through a change.
        """
        with self._lock:
            return self._check_parameters_locked(params)

    def _check_parameters_locked(self, params: list) -> SetParametersResult:
        for p in params:
            if (p.name == 'use_sim_time' and self.safety is not None
                    and self.safety.supervisor.active
                    and bool(p.value) != bool(self.get_parameter('use_sim_time').value)):
                return SetParametersResult(
                    successful=False,
                    reason='use_sim_time: cannot change while active (the clock of the '
                           'stamps and watchdogs would change under the running loop); '
                           'deactivate first')
        if self.safety is not None:
            ok, reason = self.safety.check_parameters(params)
        else:
            updates = {p.name: p.value for p in params if p.name.startswith('safety.')}
            ok, reason = validate_parameter_updates(updates, self.safety_params) \
                if updates else (True, '')
        if not ok:
            return SetParametersResult(successful=False, reason=reason)
        staged = {}
        for p in params:
            if p.name in ADAPTATION_COMMANDS:
                why = self._adaptation_command(p.name, p.value)
                if why:
                    return SetParametersResult(successful=False, reason=why)
                continue
            if p.name not in RUNTIME_GAINS:
                continue      # read-only ones are refused by rclpy before this callback
            if self.adaptation is not None and p.name != 'torque_limit':
                return SetParametersResult(
                    successful=False, reason=f'{p.name}: fixed while adapting (the '
                    'adaptive law is built with kp and kd; ki must stay 0)')
            try:
                staged[p.name] = check_gain_update(p.name, list(p.value), len(self.joints))
            except ParameterError as exc:
                return SetParametersResult(successful=False, reason=str(exc))
            except TypeError:
                return SetParametersResult(successful=False,
                                           reason=f'{p.name}: must be a list of numbers')
        limited = {p.name: _plain(p.value) for p in params
                   if p.name in RUNTIME_GAINS or p.name.startswith('safety.')}
        why = self.hard_limits.check_updates(limited)
        if why:
            return SetParametersResult(successful=False, reason=why)
        self._pending.update(staged)
        for name, value in staged.items():
            self.get_logger().info(f'{name} -> {list(value)} from the next tick')
        if self.safety is not None:
            self.safety.apply_parameters(params)
        return SetParametersResult(successful=True)

    def _apply_pending(self) -> None:
        pending, self._pending = self._pending, {}
        c = self.controller
        if c is None:
            return
        if 'kp' in pending or 'kd' in pending or 'ki' in pending:
            c.set_gains(pending.get('kp', c.kp), pending.get('kd', c.kd),
                        pending.get('ki', c.ki))
        if 'torque_limit' in pending:
            c.set_torque_limit(pending['torque_limit'])

    def foreign_messages(self) -> int:
        """Return how many input messages were refused as another publisher's."""
        return sum(guard.refused for guard in self._sources.values())

    def _check_arm_limits(self, values) -> None:
        """Refuse a start without a torque limit where the description gives no effort."""
        if self.arm is None:
            return
        for k, v in enumerate(values['torque_limit']):
            if not math.isfinite(v):
                raise ParameterError(
                    f'parameter torque_limit[{k}] (node {self.get_name()}): joint '
                    f'{self.arm.joint_names[k]} has no effort limit in robot_description; '
                    f'give torque_limit (one value per joint, N m)')

    def _hard_limit_defaults(self) -> dict:
        """Defaults of ``hard_limits.*``: from the start values (overrides, else defaults)."""
        overrides = getattr(self, '_parameter_overrides', None) or {}

        def start(name):
            p = overrides.get(name)
            return p.value if p is not None else self._specs[name].default
        try:
            sp = safety_from_values({n: start(n) for n in self._specs
                                     if n.startswith('safety.')}, self.get_name())
            return hard_limit_defaults(start('kp'), start('kd'), start('ki'),
                                       start('torque_limit'), sp)
        except (ParameterError, TypeError, ValueError):
            # an invalid start value: refused by name when it is declared and validated
            return hard_limit_defaults(*(self._specs[n].default for n in
                                         ('kp', 'kd', 'ki', 'torque_limit')),
                                       safety_from_values({n: s.default for n, s in
                                                           self._specs.items()
                                                           if n.startswith('safety.')},
                                                          self.get_name()))

    def counters(self) -> dict:
        """Counters of the run."""
        out = {'ticks': self.ticks, 'refused_states': self.refused_states,
               'refused_references': self.refused_references,
               'last_refusal': self.last_refusal, 'callback_errors': self.callback_errors}
        if self.safety is not None:
            out['mode'] = self.safety.supervisor.mode.value
            out['safe_commands'] = self.safety.safe_commands
        return out


#: The process exits this long after the shutdown transition [s]: its reply must reach the
#: client first (a reliable reply still in flight when the process ended never arrived, and
#: ``ros2 lifecycle set``, which waits without a timeout, hung; 0.1 s was too short in full
#: test runs). Zero torque was sent and acknowledged before.
EXIT_AFTER_SHUTDOWN = 1.0
#: The executor's watchdog timer runs when the control thread has not for this many periods.
WATCHDOG_BACKUP_PERIODS = 3
#: Most references handled at one wake-up of the control thread (the reader keeps 100).
REFERENCE_BACKLOG = 200
#: Pause after a wake-up of the control thread with nothing to take [s].
SPURIOUS_WAIT = 1e-4
#: The process memory is locked once (``realtime.lock_memory``).
_MEMORY = {'locked': False}

#: Period of the graph check of the input and command topics [s] (steady clock).
GRAPH_CHECK_PERIOD = 0.1
#: Real time: period of the look at the matched counts of the inputs and command publishers
#: [s] (four count queries in the control thread); a new or lost publisher or reader is acted
#: on within this much of its match.
MATCH_POLL_PERIOD = 0.005

#: Joint states the real-time reader keeps (taken all at each callback, see the module
#: docstring): a 10 kHz flood from a second publisher then needs 5 ms of controller latency
#: to push a driver state out unread.
STATE_HISTORY_DEPTH = 50


def _plain(value):
    if isinstance(value, (list, tuple)) or hasattr(value, 'tolist'):
        return list(value)
    return value


def main(args=None) -> int:
    """``ros2 run manip_control controller [--ros-args ...]``; ``--help`` lists parameters."""
    if wants_help(args):
        return print_node_help('controller', __doc__, controller_all_specs())
    return run_node(ControllerNode, args)


if __name__ == '__main__':
    sys.exit(main())
