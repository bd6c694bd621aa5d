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
Safety layer of the controller node.

Parameters, input validation, watchdogs, safe commands, lifecycle bookkeeping and
diagnostics.

The ROS-free logic is :mod:`manip_control.safety` (validation, mode supervisor, safe
torques) and :mod:`manip_control.supervision` (fresh stamps, resume hysteresis, re-planned
references, torque-rate limit, deactivation ramp); :class:`ControllerSafety` binds them to the
(lifecycle) controller node, which keeps its topics, lockstep protocol and feedback law and
calls the helper at these points:

=============================  ==============================================================
node                           helper
=============================  ==============================================================
``__init__``                   declare :func:`safety_specs` with the node's own specs;
                               :func:`safety_from_values` and
                               :func:`command_safety_from_values` validate them
                               (ParameterError with the ROS parameter name: exit 2 before
                               anything is published)
``on_configure``               ``ControllerSafety(...)`` then :meth:`~ControllerSafety.create`
                               (diagnostics publishers, timers)
``on_activate``                :meth:`~ControllerSafety.activate`
``on_deactivate``              :meth:`~ControllerSafety.deactivate` (ramp to zero)
``on_cleanup``/``on_shutdown``  :meth:`~ControllerSafety.release`
joint state callback           :meth:`~ControllerSafety.accept_joint_state` (None: refused or
                               not fresh)
reference callback             :meth:`~ControllerSafety.accept_reference` (None: refused),
                               :meth:`~ControllerSafety.reference_arrived` (step detection)
each control step              :meth:`~ControllerSafety.shape_reference`, then
                               :meth:`~ControllerSafety.command` with the feedback law
parameter callback             :meth:`~ControllerSafety.check_parameters` /
                               :meth:`~ControllerSafety.apply_parameters`
=============================  ==============================================================

Watchdogs run on the steady clock (sim time stops when the plant that publishes /clock dies
and restarts at zero with a new plant). The helper's watchdog timer (one control period)
evaluates the state watchdog and the hold timeout, calls the node's ``before_check`` hook
(lockstep: an unanswered state does not age, a stale reference is replaced by the held one),
publishes the safe command itself at the control rate while the states are stale (a hardware
driver keeps the last command otherwise, and a driver with its own command watchdog would
drop a hold sent once), and the deactivation ramp. In lockstep (``command_on_timeout`` false)
a state timeout is only reported: the plant owns the clock and takes nothing but the command
of its current tick.

Real time against a driver (``realtime``): a joint state is used only when fresh (its stamp
advances and is younger than ``state_timeout`` on this host's wall clock, with
``safety.clock_offset``); every command passes the per-joint torque-rate limit, which starts
at the measured effort of the first state after activation (zero if the driver reports none);
``deactivate`` ramps to the hold and then to zero over ``safety.stop_time``. Lockstep is the
deterministic simulation protocol that reproduces the offline loop: stamps are sim time, there
is no torque-rate limit and ``deactivate`` sends zero torque once.

After a fault (state timeout, envelope), normal commands need ``safety.resume_states``
consecutive fresh in-envelope states (meanwhile: the hold), and then the reference is
re-planned from the measured position; a hold (safe mode or resume) lasts at most
``safety.hold_timeout``, then zero torque is commanded, latched until re-activation.

Diagnostics (``~/diagnostics`` = ``/controller/diagnostics`` and the standard
``/diagnostics``, diagnostic_msgs/DiagnosticArray) are published at every transition, every
reference hold / resume and at ``diagnostics_rate``: one status ``<node>: mode`` (hardware_id
:data:`HARDWARE_ID`), level OK only while the feedback law commands with a live reference,
WARN or ERROR with the reason otherwise (:meth:`ControllerSafety.status`); message ``normal``
or ``<mode>: <reason> (<detail>)``, and the values mode, reason, detail, safe_mode,
hold_target, state_age_ms, safe_entries.<reason>, refused.<input>.<reason>, refused_total,
reference_held, reference_age_at_hold_ms, non_finite_commands, safe_commands, hold_timeouts,
resume_count, stale_states.<why>, reference_limited.<why>, reference_replans.<why>,
torque_rate_limited, last_command; in real time also state_period_ms (the measured period of
the driver's states), state_timeout_effective_ms (the state timeout in use), clock_offset_s
(the driver clock offset in use), clock_last_step_s and clock_steps (confirmed steps of the
driver's clock), watchdog_late (watchdog runs more than the state timeout apart: this process
was not scheduled, the host is overloaded), state_timeout_check_gap_ms (the time between the
check that declared the last state timeout and the check before it: a timeout declared later
than state_timeout + one period with a gap this long was the host's scheduling).
"""

from __future__ import annotations

import math
import time
from typing import Callable, Sequence

from manip_control.nodes.common import retire
from manip_control.nodes.ros_params import command_safety_from_values
from manip_control.nodes.ros_params import plain_value as _plain
from manip_control.nodes.ros_params import SAFETY_FIELDS
from manip_control.nodes.ros_params import safety_from_values
from manip_control.nodes.ros_params import SAFETY_PREFIX as PREFIX
from manip_control.nodes.ros_params import safety_specs
from manip_control.safety import hold_torque
from manip_control.safety import map_joint_state
from manip_control.safety import map_reference
from manip_control.safety import Mode
from manip_control.safety import ReferenceSample
from manip_control.safety import ReferenceWatchdog
from manip_control.safety import Refusal
from manip_control.safety import RefusalCounter
from manip_control.safety import RefusalReason
from manip_control.safety import SafeReason
from manip_control.safety import SafetyParameters
from manip_control.safety import SafetySupervisor
from manip_control.safety import validate_parameter_updates
from manip_control.supervision import clamp_acceleration
from manip_control.supervision import closest_bounded_step
from manip_control.supervision import CommandSafetyParameters
from manip_control.supervision import LIMITER_ITERATIONS
from manip_control.supervision import ReferenceBlend
from manip_control.supervision import ResumeGate
from manip_control.supervision import StampGate
from manip_control.supervision import stop_ramp
from manip_control.supervision import TorqueRateLimiter
import numpy as np

#: Most names a joint-name mismatch lists per kind (the rest counted).
MISMATCH_NAMES = 10


def _some(names: Sequence[str]) -> str:
    """Return ``a, b, c`` for at most :data:`MISMATCH_NAMES` names, ``... (N in all)`` beyond."""
    if len(names) <= MISMATCH_NAMES:
        return ', '.join(names)
    return f'{", ".join(names[:MISMATCH_NAMES])}, ... ({len(names)} in all)'


DIAGNOSTICS_TOPIC = '~/diagnostics'
#: The standard diagnostics topic read by diagnostic_aggregator and rqt_robot_monitor.
STANDARD_DIAGNOSTICS_TOPIC = '/diagnostics'
#: ``hardware_id`` of the controller's diagnostic status.
HARDWARE_ID = 'manip_control/controller'
#: Zero torque to a new reader of the commands after the driver was gone or fell silent [s]
#: (the first samples to a reader that is still matching can be lost: the first one it gets
#: is zero).
RESTART_SETTLE = 0.1
#: No state taken for this long [s]: a new reader of the commands is a restarted driver
#: (:meth:`ControllerSafety.reader_check`); as long as a new state publisher must wait
#: (``SourceGuard.relock_after``). Shorter silences are a late driver or a starved host.
RESTART_SILENCE = 0.5
#: A second publisher of the joint states that sent nothing for this long [s] while one other
#: sends is not a second source (a killed or stopped driver whose DDS lease has not ended).
#: Far longer than a starved driver's pause, so that a publisher that merely stalls never
#: hands the input over to another one that sends.
SILENT_PUBLISHER = 1.0
#: After the joint states resumed from a new publisher (a new sequence) following
#: :data:`RESTART_SILENCE`, a reader of the commands never seen before that matches within
#: this long [s] is the restarted driver's: its states came before its command reader
#: matched, so it got commands before any zero (:meth:`ControllerSafety.reader_check`).
RESTART_WINDOW = 2.0
#: A matched count that rose with no new reader on the graph yet is looked at again for this
#: long [s] (the graph and the matched count are updated by different DDS callbacks).
READER_ID_WAIT = 0.1

__all__ = ['ControllerSafety', 'PREFIX', 'SAFETY_FIELDS', 'DIAGNOSTICS_TOPIC',
           'STANDARD_DIAGNOSTICS_TOPIC', 'HARDWARE_ID', 'safety_specs', 'safety_from_values',
           'command_safety_from_values', 'RESTART_SETTLE', 'RESTART_SILENCE',
           'RESTART_WINDOW']


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
    command_params : CommandSafetyParameters, optional
        Freshness, resume, hold-timeout, ramp and reference-shaping settings.
    realtime : bool
        Against a driver in real time (stamps checked for freshness, torque-rate limit,
        deactivation ramp); False in lockstep (see the module docstring).

    """

    def __init__(self, node, joints: Sequence[str], params: SafetyParameters, model,
                 torque_limit: Callable[[], Sequence[float]], period: float,
                 publish: Callable, diagnostics_rate: float = 10.0,
                 now: Callable[[], float] = time.monotonic,
                 command_params: CommandSafetyParameters | None = None,
                 realtime: bool = True):
        self.node = node
        self.joints = tuple(joints)
        self.params = params
        self.cmd = command_params or CommandSafetyParameters()
        self.realtime = bool(realtime)
        self.model = model
        self.torque_limit = torque_limit
        self.period = float(period)
        self.publish = publish
        self.diagnostics_rate = float(diagnostics_rate)
        self.now = now
        self.wall = time.time
        self.supervisor = SafetySupervisor(params, self.joints)
        self.references = ReferenceWatchdog(params.reference_timeout)
        self.refusals = RefusalCounter(throttle=1.0)
        cp = self.cmd
        self.stamps = StampGate(params.state_timeout, cp.clock_offset, cp.max_clock_error,
                                cp.state_timeout_periods, cp.state_timeout_max,
                                cp.clock_step_states if self.realtime else 0,
                                cp.max_clock_step)
        self.resume = ResumeGate(cp.resume_states)
        self.limiter = TorqueRateLimiter(cp.torque_rate_limit)
        if self.realtime:
            # the first call of the bounded step loads numpy's linear algebra (measured 0.7 ms
            # against 0.15 ms warm, on a 2R): here, not in the first braking tick
            n = len(self.joints)
            closest_bounded_step(np.eye(n), np.full(n, 2.0), np.ones(n), LIMITER_ITERATIONS)
        self.blend = ReferenceBlend(cp.replan_velocity, cp.replan_acceleration)
        self.non_finite_commands = 0
        self.safe_commands = 0
        self.last_stamp = None
        self.last_command: tuple | None = None
        self._last_command_time: float | None = None
        self.before_check: Callable[[float], None] | None = None
        self.command_on_timeout = True
        self.watchdog_period = self.period
        self.on_transition: Callable | None = None
        self.on_resume: Callable[[str], None] | None = None
        #: extra non-commanding conditions reported by the node: key -> (level, detail)
        self.conditions: dict[str, tuple[int, str]] = {}
        self.no_reference = False
        self.final = ''                 # hold timeout: zero torque until re-activation
        self.final_reason = 'hold_timeout'
        #: after_hold gravity: (since, pose) of the gravity hold after the hold timeout
        self.gravity_hold: tuple | None = None
        #: no reader of the commands (the driver is gone): the safe command is zero
        self.driver_absent = False
        #: a restarted driver: zero torque until then (steady time) [s]
        self.settle_until = -math.inf
        #: who may publish the joint states (set by the node; diagnostics
        #: ``sources.joint_states.trusted``)
        self.trusted_states = ''
        #: callable returning the number of readers of the commands (set by the node): a new
        #: one while the states are stale is a restarted driver (:meth:`reader_check`)
        self.readers: Callable[[], int] | None = None
        self._readers_seen = 0
        #: callable returning the ids of the readers of the commands on the graph (set by the
        #: node): tells a restarted driver's reader from one that matched again
        self.reader_ids: Callable[[], frozenset] | None = None
        self._known_readers: frozenset = frozenset()
        #: the states resumed from a new publisher: a new reader until then is a restarted
        #: driver's (steady time) [s]
        self.restart_window_until = -math.inf
        self._reader_rise_until = -math.inf
        #: the joint states cannot be matched: the detail (see :meth:`_name_mismatch`)
        self._mismatch = ''
        self._mismatch_names: tuple | None = None
        self.hold_timeouts = 0
        self.hold_q: tuple | None = None
        self._inside_q: tuple | None = None     # last in-envelope measured position
        self._hold_since: float | None = None
        self._holding = False
        self._first_state = False
        self._replan = ''               # why the next reference is re-planned from q measured
        self._stop: tuple | None = None     # deactivation ramp: (t0, tau0)
        self.counts: dict[str, int] = {}
        self._ref_prev: tuple | None = None  # last requested reference (t, q, qd)
        self._last_used_q: tuple | None = None
        self._diag_pub = None
        self._std_diag_pub = None
        self._timers: list = []
        #: wraps each timer callback (the node's lock, the watchdog as a backup of its
        #: control thread)
        self.timer_wrap: Callable = lambda fn: fn
        self._last_nf_log = -math.inf
        self.extra_values: dict[str, str] = {}     # input sources (graph check)
        #: more key/values of the node (the adaptive law's state): a callable or None
        self.more_values: Callable[[], dict] | None = None
        #: set by the node during a control step: transition logs and diagnostics wait until
        #: the command is out (:meth:`flush`), so a transition does not delay the command
        self.defer = False
        self._deferred: list = []
        self._last_watchdog: float | None = None
        self._last_check: float | None = None
        #: time between the check that declared the last state timeout and the check before
        #: it [s] (None before the first state timeout)
        self.timeout_check_gap: float | None = None

    def _count(self, key: str) -> None:
        self.counts[key] = self.counts.get(key, 0) + 1

    # -- lifecycle ---------------------------------------------------------------------------
    def _steady_timer(self, period, callback):
        from rclpy.clock import Clock
        from rclpy.clock import ClockType
        timer = self.node.create_timer(period, self.timer_wrap(callback),
                                       clock=Clock(clock_type=ClockType.STEADY_TIME))
        self._timers.append(timer)
        return timer

    def create(self) -> None:
        """Configure: the diagnostics publishers and the watchdog / diagnostics timers."""
        from diagnostic_msgs.msg import DiagnosticArray
        self._diag_pub = self.node.create_publisher(DiagnosticArray, DIAGNOSTICS_TOPIC, 10)
        self._std_diag_pub = self.node.create_publisher(DiagnosticArray,
                                                        STANDARD_DIAGNOSTICS_TOPIC, 10)
        self._steady_timer(self.watchdog_period, self.watchdog_tick)
        self._steady_timer(1.0 / self.diagnostics_rate, self.publish_diagnostics)
        self.publish_diagnostics()

    def activate(self) -> None:
        """Arm: commands start with the first fresh joint state received from now on."""
        self.references.reset()
        self.last_stamp = None
        self.stamps.reset()
        self.resume.reset()
        self.blend.reset()
        self.final = ''
        self.final_reason = 'hold_timeout'
        self.gravity_hold = None
        self.hold_q = None
        self._inside_q = None
        self._hold_since = None
        self._holding = False
        self._first_state = True
        self._replan = ''
        self._ref_prev = None
        self._last_used_q = None
        self.no_reference = True
        self._readers_seen = self.readers() if self.readers is not None else 0
        self._known_readers = self.reader_ids() if self.reader_ids is not None else frozenset()
        self.restart_window_until = self._reader_rise_until = -math.inf
        if self._stop is None:
            self.limiter.reset(None)     # set from the first state's measured effort
        else:
            self._stop = None            # re-activated during the ramp: go on from its command
            self._first_state = False
        self._log(self.supervisor.activate(self.now()))

    def deactivate(self) -> None:
        """
        Stop commanding.

        Real time: ramp from the current command to the hold and then to zero over
        ``stop_time`` (watchdog timer); lockstep: zero torque once.
        """
        was_commanding = self.supervisor.should_command
        ramp = was_commanding and self.realtime and self.last_command is not None
        if ramp:
            self._stop = (self.now(), self.last_command, self._stop_hold_q())
            self.node.get_logger().info(
                f'deactivate: ramping to the hold and then to zero over '
                f'{self.cmd.stop_time:g} s')
        self._log(self.supervisor.deactivate(self.now()))
        if was_commanding and not ramp:
            self._emit((0.0,) * len(self.joints), limit=False)

    def _stop_hold_q(self):
        sup = self.supervisor
        return sup.last_q if sup.last_q is not None else (0.0,) * len(self.joints)

    def release(self) -> None:
        """
        Release everything (cleanup, shutdown, process exit).

        Deactivate if active; a ramp still running ends with zero torque at once; destroy the
        timers and the publishers.
        """
        if self.supervisor.active:
            was = self.supervisor.should_command
            self._log(self.supervisor.deactivate(self.now()))
            if was:
                self._emit((0.0,) * len(self.joints), limit=False)
        elif self._stop is not None:
            self._emit((0.0,) * len(self.joints), limit=False)
        self._stop = None
        for timer in self._timers:
            retire(self.node, timer)
        self._timers = []
        for pub in (self._diag_pub, self._std_diag_pub):
            if pub is not None:
                self.node.destroy_publisher(pub)
        self._diag_pub = self._std_diag_pub = None

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
            self.stamps.set_base_timeout(self.params.state_timeout)
            if self.realtime:
                self.supervisor.timeout_override = self.stamps.timeout
            self.node.get_logger().info(
                'safety parameters: ' + ', '.join(f'{k} -> {v}' for k, v in changes.items()))

    # -- inputs --------------------------------------------------------------------------------
    def _refused(self, source: str, refusal: Refusal) -> None:
        line = self.refusals.record(source, refusal, time.monotonic())
        # two call sites: rclpy refuses one call site that logs at two severities
        if line and refusal.waiting:
            self.node.get_logger().info(line)
        elif line:
            self.node.get_logger().error(line)

    def set_source_fault(self, detail: str) -> None:
        """Set (``detail``) or clear (``''``) the input-source conflict (safe mode)."""
        if detail != self.supervisor.source_fault:
            self._log(self.supervisor.set_source_fault(self.now(), detail))

    def refuse(self, source: str, reason: RefusalReason, detail: str,
               waiting: bool = False) -> None:
        """Count (and log, throttled) a refused ``source`` message (see ``Refusal``)."""
        self._refused(source, Refusal(reason, detail, waiting))

    def accept_joint_state(self, stamp, names, position, velocity, effort=(),
                           wall_stamp: bool = False, seq: int | None = None):
        """
        Validate a joint state (decoded JointState fields) and feed the supervisor.

        Returns the :class:`~manip_control.safety.JointSample` or None (refused or not
        fresh, counted). With ``wall_stamp`` (real time) the state must be fresh
        (:class:`~manip_control.supervision.StampGate`: its stamp advances and its age from
        the stamp, with ``safety.clock_offset``, is within ``state_timeout``); a state that is
        not fresh is counted (``stale_states.<why>``) and not used, so the watchdog runs out.
        """
        sample = map_joint_state(self.joints, names, position, velocity, effort)
        if isinstance(sample, Refusal):
            if sample.reason is RefusalReason.MISSING_JOINT:
                self._name_mismatch(names)
            self._refused('joint_states', sample)
            return None
        if self._mismatch:
            self._mismatch = ''
            self._mismatch_names = None
            self.report('joint_names')
        age = 0.0
        if wall_stamp:
            stamps = self.stamps
            steps = stamps.steps
            why, age = stamps.check(stamp, self.wall(), self.params.stamp_age, seq)
            if stamps.steps != steps:
                self._clock_step()
            if why is not None:
                self._count(f'stale_states.{why}')
                self.resume.bad()
                return None
            age = max(age, 0.0)
            self.supervisor.timeout_override = stamps.timeout
        self.last_stamp = stamp
        sup = self.supervisor
        if self._inside(sample.position, sample.velocity):
            self._inside_q = tuple(sample.position)
        self._log(sup.update_state(self.now(), sample.position, sample.velocity, age))
        if sup.active:
            if self._first_state and sup.should_command:
                self._first_state = False
                self._start_from_state(names, position, velocity, effort)
            if self.resume.pending and self.hold_q is None:
                self.hold_q = self._capture_hold()
            if sup.mode is Mode.NORMAL:
                if self.resume.pending and not self.final and self.resume.good():
                    self._resumed(f'resumed after {self.cmd.resume_states} fresh states')
            else:
                self.resume.bad()
        return sample

    def _name_mismatch(self, names) -> None:
        """
        Name the joints a state lacks and the ones it has that are not configured, once.

        One error (per name list, until a state matches) and the diagnostics (ERROR
        ``joint_names``, value ``joint_names_mismatch``): the description or ``joints`` does
        not match the driver's ``/joint_states``.
        """
        key = tuple(names)
        if key == self._mismatch_names:
            return
        self._mismatch_names = key
        have = set(key)
        want = set(self.joints)
        missing = [j for j in self.joints if j not in have]
        unexpected = [n for n in key if n not in want]
        self._mismatch = (f'{len(missing)} of the {len(self.joints)} configured joints '
                          f'missing from the joint states: {_some(missing)}; names there that '
                          f'are not configured: {_some(unexpected) or "none"}')
        text = (f'joint states cannot be matched to the configured joints (robot_description '
                f'/ joints): {self._mismatch}')
        log = self.node.get_logger()
        self._io(lambda: log.error(text))
        self.report('joint_names', 2, self._mismatch)

    def _clock_step(self) -> None:
        """Report a confirmed step of the driver's clock (once per step)."""
        self._count('clock_steps')
        log, note = self.node.get_logger(), self.stamps.step_note
        self._io(lambda: log.warning(f'controller: {note}'))
        self._io(self.publish_diagnostics)

    @property
    def state_timeout(self) -> float:
        """Return the state timeout in use [s] (in periods of the measured state rate)."""
        return self.supervisor.state_timeout

    def _inside(self, q, qd) -> bool:
        p = self.params
        return all(p.position_lower[k] <= q[k] <= p.position_upper[k]
                   and abs(qd[k]) <= p.velocity_limit[k] for k in range(len(q)))

    def _capture_hold(self) -> tuple | None:
        """
        Return the hold target of a fault.

        The last in-envelope measured position (so a single bad sample does not move it)
        projected into the envelope shrunk by ``2 position_margin``; the last measured
        position if none was inside since the activation.
        """
        sup = self.supervisor
        if self._inside_q is None:
            return sup.last_q
        p = self.params
        m = 2.0 * p.position_margin
        return tuple(min(max(v, p.position_lower[k] + m), p.position_upper[k] - m)
                     for k, v in enumerate(self._inside_q))

    def _start_from_state(self, names, position, velocity, effort) -> None:
        """First state after activation: re-plan from it; the rate limit starts at its effort."""
        self._replan = 'start'
        self._holding = False
        if not self.realtime or self.limiter.last is not None:
            return
        full = map_joint_state(self.joints, names, position, velocity, effort,
                               fields=('position', 'velocity', 'effort'))
        tau0 = (0.0,) * len(self.joints) if isinstance(full, Refusal) else full.effort
        lim = self.torque_limit()
        self.limiter.reset([min(max(v, -m), m) for v, m in zip(tau0, lim)])

    def _resumed(self, why: str) -> None:
        self._holding = False
        self._hold_since = None
        self.gravity_hold = None
        self.hold_q = None
        self._replan = 'resume'
        log = self.node.get_logger()
        self._io(lambda: log.info(f'controller: normal commands again ({why})'))
        if self.on_resume is not None:
            self.on_resume(why)
        self._io(self.publish_diagnostics)

    def accept_reference(self, names, positions, velocities=(), accelerations=()):
        """
        Validate one reference point and feed the reference watchdog.

        Returns the :class:`~manip_control.safety.ReferenceSample` or None (refused, counted).
        """
        ref = map_reference(self.joints, names, positions, velocities, accelerations)
        if isinstance(ref, Refusal):
            self._refused('reference', ref)
            return None
        self.references.update(self.now(), ref)
        return ref

    def reference_arrived(self, t: float, q, qd) -> None:
        """
        Take note of a new requested reference at ``t`` [s].

        A step (further than
        ``safety.reference_step_limit`` from where the previous one was heading, or from the
        reference in use after a gap) is re-planned from the reference in use.
        """
        prev = self._ref_prev
        self._ref_prev = (t, tuple(q), tuple(qd))
        if self._last_used_q is None:
            return
        dt = math.inf if prev is None else t - prev[0]
        if dt > self.params.reference_timeout or dt < 0.0:
            # the first reference (the hold of the measured position was in use) or one
            # after a gap: compare with the reference in use
            expect = self._last_used_q
        else:
            expect = tuple(a + v * dt for a, v in zip(prev[1], prev[2]))
        lim = self.cmd.reference_step_limit
        if any(abs(a - b) > lim for a, b in zip(q, expect)):
            self._replan = 'step'

    def shape_reference(self, t: float, q_d, qd_d, qdd_d, q_meas):
        """
        Return the reference to use at ``t`` [s] for the requested one.

        Its acceleration is clamped to
        ``reference_acceleration_limit``, kept inside the envelope, and re-planned (quintic
        blend) from the measured position on a start / resume, or from the reference in use
        on a step. Counted in the diagnostics. Returns ``(q, qd, qdd)``.
        """
        qdd_d, clamped = clamp_acceleration(qdd_d, self.cmd.reference_acceleration_limit)
        if clamped:
            self._count('reference_limited.acceleration')
        q_d, qd_d, qdd_d, clamped = self.supervisor.clamp_reference(q_d, qd_d, qdd_d)
        if clamped:
            self._count('reference_limited.envelope')
        why, self._replan = self._replan, ''
        if why:
            start = q_meas if why in ('start', 'resume') else self._last_used_q
            if start is not None and any(abs(a - b) > self.cmd.reference_step_limit
                                         for a, b in zip(start, q_d)):
                dur = self.blend.start(t, start, q_d)
                self._count(f'reference_replans.{why}')
                log = self.node.get_logger()
                text = (f're-planning the reference ({why}) from '
                        f'({", ".join(f"{v:.4g}" for v in start)}) over {dur:.3g} s')
                self._io(lambda: log.info(text))
            elif why in ('start', 'resume'):
                self.blend.reset()
        q_d, qd_d, qdd_d = self.blend.apply(t, q_d, qd_d, qdd_d)
        self._last_used_q = tuple(q_d)
        return q_d, qd_d, qdd_d

    def held_reference(self) -> ReferenceSample | None:
        """
        Return the held reference, or None.

        The stopping reference of :class:`~manip_control.safety.ReferenceWatchdog` (from the
        last sample's position and velocity to rest at ``reference_acceleration_limit``)
        when no reference arrived for ``reference_timeout``; None while references are fresh
        or before the first one. Logs the hold and the resume once.
        """
        ref, note = self.references.get(self.now(), self.cmd.reference_acceleration_limit)
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
        Return ``(q_d, qd_d, qdd_d, clamped)``: the reference kept inside the envelope.

        The same objects when inside.
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

    @property
    def normal(self) -> bool:
        """Return True while the feedback law commands (normal, resumed, no hold timeout)."""
        return (self.supervisor.mode is Mode.NORMAL and not self.resume.pending
                and not self.final)

    def check(self) -> None:
        """Evaluate the watchdog and the hold timeout now (logs a transition once)."""
        now = self.now()
        last, self._last_check = self._last_check, now
        transition = self.supervisor.check(now)
        if (transition is not None and transition.reason is SafeReason.STATE_TIMEOUT
                and last is not None):
            # how long before this check the previous one ran: a state timeout declared late
            # is the host not running this process, not a check that missed the deadline
            self.timeout_check_gap = now - last
        self._log(transition)
        self._check_hold(now)

    def _check_hold(self, now: float) -> None:
        sup = self.supervisor
        holding = sup.active and sup.should_command and not self.normal and not self.final
        if holding and not self._holding:
            self._holding = True
            self._hold_since = now
        elif not holding:
            self._holding = False
        gh = self.gravity_hold
        if gh is not None and not self.final and (
                not holding or now - gh[0] > self.params.gravity_hold_timeout):
            self.gravity_hold = None
            if holding:
                self.final = (f'gravity hold longer than gravity_hold_timeout '
                              f'{self.params.gravity_hold_timeout:g} s: zero torque until '
                              f're-activation')
                self.node.get_logger().error(f'controller: {self.final}')
                self.publish_diagnostics()
            return
        if (self._holding and self._hold_since is not None and gh is None
                and now - self._hold_since > self.cmd.hold_timeout):
            self.hold_timeouts += 1
            why = sup.reason.value if sup.is_safe else 'resuming'
            self._holding = False
            if self.params.after_hold == 'gravity' and sup.last_q is not None:
                pose = self._inside_q if self._inside_q is not None else sup.last_q
                self.gravity_hold = (now, tuple(pose))
                self.node.get_logger().error(
                    f'controller: safe hold ({why}) longer than hold_timeout '
                    f'{self.cmd.hold_timeout:g} s: gravity torque at the last good pose '
                    f'({", ".join(f"{v:.4g}" for v in pose)}) for at most '
                    f'{self.params.gravity_hold_timeout:g} s, then zero torque')
            else:
                self.final = (f'safe hold ({why}) longer than hold_timeout '
                              f'{self.cmd.hold_timeout:g} s: zero torque until re-activation')
                self.node.get_logger().error(f'controller: {self.final}')
            self.publish_diagnostics()

    def touch(self) -> None:
        """Lockstep: the last state is unanswered, so it does not age."""
        self._log(self.supervisor.touch(self.now()))

    # -- outputs -------------------------------------------------------------------------------
    def command(self, normal_fn: Callable[[], Sequence[float]]) -> tuple[tuple, bool]:
        """
        Return the command of this control step.

        ``normal_fn()`` in normal mode when it is finite,
        the safe torque otherwise, through the torque-rate limit (real time). Returns
        ``(tau, normal)`` with one torque per joint.
        """
        self.check()
        if self.normal:
            tau = tuple(normal_fn())
            if len(tau) == len(self.joints) and all(math.isfinite(t) for t in tau):
                return self._shape(tau), True
            self.non_finite_commands += 1
            now = time.monotonic()
            if now - self._last_nf_log >= 1.0:
                self._last_nf_log = now
                self.node.get_logger().error(
                    f'feedback law returned a non-finite torque ({", ".join(map(str, tau))}); '
                    f'sending the safe command instead ({self.non_finite_commands} so far)')
        self.safe_commands += 1
        return self._shape(self.safe_torque(), braking=True), False

    def _shape(self, tau, braking: bool = False) -> tuple:
        """
        Apply the torque-rate limit (real time) and record the command.

        ``braking``: a safety-layer command (hold, ramp): a limited step is the bounded one
        closest in joint acceleration through the nominal mass matrix (on a hold entry from
        speed the scaled step let the xarm7 reach 1.31x its velocity limit in MuJoCo); the
        feedback law's steps (the start and resume ramps of a still arm) are scaled, at no
        cost.
        """
        now = self.now()
        if self.realtime:
            last_t = self._last_command_time
            if last_t is None:
                dt = self.period
            else:
                dt = min(max(now - last_t, 0.0), 2.0 * self.period)
            tau, limited = self.limiter.limit(tau, dt, self._mass_now if braking else None)
            if limited:
                self._count('torque_rate_limited')
        self.last_command = tuple(tau)
        self._last_command_time = now
        return tau

    def _mass_now(self):
        """
        Return the nominal mass matrix at the last state, or None (the limiter then scales).

        Evaluated only on a tick whose torque step the rate limit must cut: the bounded step
        is then chosen closest in joint acceleration (a hold entry brakes every joint).
        """
        q = self.supervisor.last_q
        if q is None or self.model is None:
            return None
        try:
            mass = np.asarray(self.model.mass_matrix(q), float)
        except Exception:  # noqa: BLE001 - a model that fails here: the scaled step
            return None
        return mass if mass.shape == (len(q), len(q)) and np.all(np.isfinite(mass)) else None

    def _emit(self, tau, limit: bool = True) -> None:
        tau = self._shape(tau, braking=True) if limit else tuple(tau)
        if not limit:
            self.last_command = tau
            self.limiter.reset(tau)
        self.publish(tau, self.last_stamp, self.hold_target())

    def safe_torque(self) -> tuple:
        """
        Return the safe-mode torque for the current state [N·m] (clamped, finite).

        Zero after a hold timeout, with ``safe_mode: zero``, inactive or before the first
        state; the gravity hold at the last measured position while states are stale;
        otherwise the damped hold ``g^(q) + s M^(q) (Kp_h (q_hold - q) - Kd_h qd)`` at the
        hold target (:meth:`hold_target`; :func:`~manip_control.safety.hold_torque`).
        """
        sup = self.supervisor
        zero = (0.0,) * len(self.joints)
        if (self.final or self.params.safe_mode == 'zero' or sup.last_q is None
                or sup.source_fault or self.driver_absent or self.now() < self.settle_until
                or sup.reason in (SafeReason.INACTIVE, SafeReason.NO_STATE_YET)):
            # a source conflict: nothing derived from either source (ramp to zero)
            return zero
        lim = self.torque_limit()
        q = sup.last_q
        if (sup.reason is SafeReason.STATE_TIMEOUT
                or sup.state_age(self.now()) > self.state_timeout):
            # q and qd unknown: no feedback on a stale sample (a constant open-loop torque)
            return hold_torque(self.model, q, zero, q, zero, zero, lim)
        p = self.params
        target = self.hold_q if self.hold_q is not None else q
        return hold_torque(self.model, q, sup.last_qd, target, p.hold_kp, p.hold_kd, lim)

    def hold_target(self):
        """
        Return the position reported with a safe command.

        The hold target, else the last measured position (zeros before any state).
        """
        sup = self.supervisor
        if self.hold_q is not None and sup.reason is not SafeReason.STATE_TIMEOUT:
            return self.hold_q
        return sup.last_q if sup.last_q is not None else (0.0,) * len(self.joints)

    def watchdog_tick(self) -> None:
        """
        Run the safety watchdog (steady timer, one control period).

        The node's ``before_check`` hook, the watchdog,
        the safe command while states are stale (if :attr:`command_on_timeout`), and the
        deactivation ramp.
        """
        now = self.now()
        last, self._last_watchdog = self._last_watchdog, now
        late = last is not None and now - last > self.state_timeout and self.realtime
        if late:
            # this process was not scheduled for longer than the state timeout (counted,
            # diagnostics): the states the driver sent meanwhile may not be delivered yet (a
            # host that stops this thread stops the DDS threads just below it too), so the
            # state watchdog judges at the next run, one period later, not on the host's
            # stall (no command is sent on the old state meanwhile: a tick checks itself)
            self._count('watchdog_late')
        if self.before_check is not None:
            self.before_check(now)
        if not late:
            self.check()
        if self.restarted_reader_taken_up(now):
            return                      # a restarted driver's late reader: zero sent
        if self._stop is not None:
            self._stop_tick()
            return
        sup = self.supervisor
        if sup.should_command and self.command_on_timeout and (
                self.stale or sup.source_fault
                or ((self.final or self.gravity_hold is not None)
                    and self.now() - (self._last_command_time or -math.inf)
                    >= 0.9 * self.period)):
            # stale states, a source conflict (states refused), a hold timeout: the
            # watchdog commands (a tick may not come)
            if not self.stale:
                self.safe_commands += 1
                self._emit(self.safe_torque())
                return
            # stale: a new reader of the commands is a restarted driver, which must get zero
            # first. DDS cannot publish to "the readers matched now", so the count is read
            # as close to the send as this code can (after the torque and its limit), and
            # again after it: a reader that matched in between gets the zero next, at once
            tau = self._shape(self.safe_torque(), braking=True)
            if self.reader_check():
                return                  # a restarted driver: zero sent
            self.safe_commands += 1
            self.publish(tau, self.last_stamp, self.hold_target())
            if self.reader_check():
                self._count('reader_matched_during_send')

    def restarted_reader_taken_up(self, now: float) -> bool:
        """
        Within the restart window, look at the command readers (:meth:`reader_check`).

        True when a restarted driver's reader was taken up just now: it got zero first, so
        neither this watchdog nor this tick may send it a law command (a torque step).
        """
        return now < self.restart_window_until and self.reader_check()

    def reader_check(self) -> bool:
        """
        Look at the readers of the commands; True when a new one was taken up.

        A reader more than at the last look while no state was taken for
        :data:`RESTART_SILENCE` (the driver commanded is silent, not merely late) is taken
        for a restarted driver, which holds zero torque at start (:meth:`take_up`). Called
        before every command the watchdog sends while the states are stale (the matched
        count is read synchronously, so the new reader's first command is the zero) and when
        the matched count of the command publishers rises (looked at every few ms).

        Within :data:`RESTART_WINDOW` after the states resumed from a new publisher
        (:meth:`source_restarted`) a reader whose id was never seen is taken up too: the
        restarted driver's states came first. One seen before (a stalled driver whose reader
        matched again, or a driver that only re-created its state publisher) is not: that
        driver still applies the last command, and zero would be a step.
        """
        if self.readers is None:
            return False
        n = self.readers()
        new, self._readers_seen = n > self._readers_seen, n
        sup = self.supervisor
        if not (sup.should_command and self.command_on_timeout):
            return False
        now = self.now()
        if new and self.stale and sup.state_age(now) > RESTART_SILENCE:
            self._note_readers()
            self.take_up()
            return True
        if new:
            self._reader_rise_until = now + READER_ID_WAIT
        if now >= self._reader_rise_until:
            return False
        if now >= self.restart_window_until:
            if new:
                self._note_readers()
            return False
        # a new reader while the window is open: the graph may show its id a little later
        if self.reader_ids is None:
            return False
        ids = self.reader_ids()
        if not ids - self._known_readers:
            return False
        self._known_readers = self._known_readers | ids
        self.restart_window_until = self._reader_rise_until = -math.inf
        self._count('late_reader_take_ups')
        self.take_up()
        return True

    def _note_readers(self) -> None:
        """Remember the readers of the commands on the graph now (seen: not a restart)."""
        if self.reader_ids is not None:
            self._known_readers = self._known_readers | self.reader_ids()

    def source_restarted(self) -> None:
        """
        Open the restart window: the joint states resumed from a new publisher.

        A restarted driver (its states continue no sequence heard before): its reader of the
        commands may match only now, after commands were sent on its states; a reader never
        seen that matches within :data:`RESTART_WINDOW` is taken up from zero
        (:meth:`reader_check`).
        """
        self.restart_window_until = self.now() + RESTART_WINDOW
        self._count('state_source_restarts')

    def take_up(self) -> None:
        """
        Take up a restarted driver: zero torque now, for :data:`RESTART_SETTLE`, then ramps.

        The command goes to zero at once, not through the rate limit: the hold it replaces
        was sent to a driver that has sent nothing for :data:`RESTART_SILENCE` (a killed or
        stopped driver stays on the graph until its DDS lease ends), and the new driver must
        get zero first. Afterwards every command starts from that zero through
        the torque-rate limit.
        """
        self.settle_until = self.now() + RESTART_SETTLE
        self._count('driver_take_ups')
        self._emit((0.0,) * len(self.joints), limit=False)
        log = self.node.get_logger()
        self._io(lambda: log.warning(
            'a new reader of the commands after the joint states stopped (a restarted '
            f'driver): zero torque now and for {RESTART_SETTLE:g} s, then ramping up from '
            'zero through the torque-rate limit'))
        self._io(self.publish_diagnostics)

    def _stop_tick(self) -> None:
        t0, tau0, q_hold = self._stop
        sup = self.supervisor
        lim = self.torque_limit()
        q = sup.last_q if sup.last_q is not None else q_hold
        if sup.state_age(self.now()) <= self.state_timeout and sup.last_qd is not None:
            p = self.params
            hold = hold_torque(self.model, q, sup.last_qd, q_hold, p.hold_kp, p.hold_kd, lim)
        else:
            zero = (0.0,) * len(self.joints)
            hold = hold_torque(self.model, q, zero, q, zero, zero, lim)
        tau = stop_ramp(self.now() - t0, self.cmd.stop_time, tau0, hold)
        if tau is None:
            # zero through the rate limit: the limited command may lag the ramp (a late
            # process), and a step to zero at the deadline is what the ramp is there to
            # avoid; done once zero has been sent
            self._emit((0.0,) * len(self.joints))
            if any(self.last_command):
                return
            self._stop = None
            self.node.get_logger().info('deactivate: ramp done, zero torque')
            self.publish_diagnostics()
            return
        self._emit(tau)

    # -- logging and diagnostics ---------------------------------------------------------
    def _io(self, fn: Callable[[], None]) -> None:
        """Log / publish diagnostics now, or after the command when :attr:`defer` is set."""
        if self.defer:
            self._deferred.append(fn)
        else:
            fn()

    def flush(self) -> None:
        """Do the logging and diagnostics deferred during a control step (:attr:`defer`)."""
        self.defer = False
        pending, self._deferred = self._deferred, []
        for fn in pending:
            fn()

    def _log(self, transition) -> None:
        if transition is None:
            return
        log = self.node.get_logger()
        text = str(transition)
        if transition.mode is Mode.NORMAL and self.final:
            # the inputs are valid again, but the latched zero torque stays: never log
            # "normal" while not commanding
            old = transition.old_reason.value if transition.old_reason is not None else ''
            self._io(lambda: log.warning(
                f'controller inputs valid again ({old} cleared); zero torque stays latched '
                f'until re-activation ({self.final_reason})'))
        elif transition.mode is Mode.NORMAL:
            self._io(lambda: log.info(text))
        elif transition.reason in (SafeReason.INACTIVE, SafeReason.NO_STATE_YET):
            self._io(lambda: log.info(text))
        else:
            self._io(lambda: log.error(text))
            if self.supervisor.active:
                if transition.reason is SafeReason.STATE_TIMEOUT:
                    # contact lost: the hold is the first measured position when fresh states
                    # come back (a restarted driver may be anywhere)
                    self.hold_q = None
                elif not self.resume.pending or self.hold_q is None:
                    self.hold_q = self._capture_hold()
                self.resume.fault()
        if self.on_transition is not None:
            self.on_transition(transition)
        self._io(self.publish_diagnostics)

    def report(self, key: str, level: int = 1, detail: str = '') -> None:
        """
        Report (``detail`` non-empty) or clear a non-commanding condition of the node.

        E.g. a refused second source: WARN (1) or ERROR (2) in the diagnostics while it lasts.
        """
        old = self.conditions.get(key)
        if detail:
            self.conditions[key] = (int(level), detail)
        else:
            self.conditions.pop(key, None)
        if old != self.conditions.get(key):
            self.publish_diagnostics()

    def status(self) -> tuple[int, str, str]:
        """
        Return ``(level, reason, detail)`` of the diagnostics.

        Level 0 (OK) only while the feedback law commands with a live reference; every other
        state is WARN (1) or ERROR (2) with its reason.
        """
        sup = self.supervisor
        if self._stop is not None:
            left = self.cmd.stop_time - (self.now() - self._stop[0])
            return 1, 'stopping', f'deactivation ramp to zero torque ({left:.3f} s left)'
        if not sup.active:
            return 1, SafeReason.INACTIVE.value, sup.detail
        if self.final:
            return 2, self.final_reason, self.final
        if self.gravity_hold is not None:
            left = self.params.gravity_hold_timeout - (self.now() - self.gravity_hold[0])
            return 2, 'gravity_hold', (f'hold longer than hold_timeout: gravity torque at the '
                                       f'last good pose ({max(left, 0.0):.3f} s left)')
        if sup.reason is SafeReason.NO_STATE_YET:
            if self._mismatch:
                return 2, 'joint_names', self._mismatch
            clock = self.stamps.clock_problem() if self.realtime else ''
            if clock:
                return 2, 'clock_offset', clock
            return 1, sup.reason.value, sup.detail
        if sup.is_safe:
            return 2, sup.reason.value, sup.detail
        if self.resume.pending:
            return 1, 'resuming', (f'{self.resume.count} of {self.resume.n} fresh in-envelope '
                                   f'states; holding')
        if self.conditions:
            key, (level, detail) = max(self.conditions.items(), key=lambda kv: kv[1][0])
            return max(level, 1), key, detail
        if self.no_reference:
            return 1, 'no_reference', ('no reference received since the activation: holding '
                                       'the measured position')
        if self.references.holding:
            return 1, 'reference_held', 'reference lost: brought to rest and held'
        return 0, 'none', ''

    def diagnostics_values(self) -> dict[str, str]:
        """Key/value strings of the diagnostics status."""
        sup = self.supervisor
        values = sup.status()
        level, reason, detail = self.status()
        values['mode'] = 'normal' if self.normal and self._stop is None else 'safe'
        values['reason'] = reason
        values['detail'] = detail
        values['level'] = ('OK', 'WARN', 'ERROR')[level]
        holding = sup.should_command and not self.normal and not self.final
        values['hold_target'] = (', '.join(f'{v:.6g}' for v in self.hold_target())
                                 if holding else '')
        age = sup.state_age(self.now())
        values['state_age_ms'] = f'{age * 1e3:.3f}' if math.isfinite(age) else 'inf'
        gap = self.timeout_check_gap
        values['state_timeout_check_gap_ms'] = '' if gap is None else f'{gap * 1e3:.3f}'
        if self.realtime:
            st = self.stamps
            values['state_period_ms'] = ('' if st.rate.period is None
                                         else f'{st.rate.period * 1e3:.4g}')
            values['state_timeout_effective_ms'] = f'{self.state_timeout * 1e3:.4g}'
            values['clock_offset_s'] = f'{st.offset:.6f}'
            values['clock_last_step_s'] = ('' if st.last_step is None
                                           else f'{st.last_step:+.6f}')
        for source, per in sorted(self.refusals.counts.items()):
            for why, n in sorted(per.items()):
                values[f'refused.{source}.{why}'] = str(n)
        values['refused_total'] = str(self.refusals.total())
        values['joint_names_mismatch'] = self._mismatch
        values['sources.joint_states.trusted'] = self.trusted_states
        values['reference_held'] = str(self.references.holding).lower()
        age = self.references.hold_age
        values['reference_age_at_hold_ms'] = '' if age is None else f'{age * 1e3:.3f}'
        values['non_finite_commands'] = str(self.non_finite_commands)
        values['safe_commands'] = str(self.safe_commands)
        values.update(self.extra_values)
        if self.more_values is not None:
            values.update(self.more_values())
        values['hold_timeouts'] = str(self.hold_timeouts)
        values['resume_count'] = f'{self.resume.count}/{self.resume.n}'
        left = (self.blend.t0 + self.blend.duration - self._blend_clock()
                if self.blend.active else 0.0)
        values['replan_remaining_s'] = f'{max(left, 0.0):.3f}'
        for key, n in sorted(self.counts.items()):
            values[key] = str(n)
        if self.last_command is not None:
            values['last_command'] = ', '.join(f'{v:.6g}' for v in self.last_command)
        return values

    def _blend_clock(self) -> float:
        """Return the blend's clock: steady time (real time), last state stamp (lockstep)."""
        if self.realtime:
            return self.now()
        return (self.last_stamp or 0) * 1e-9

    def diagnostics_message(self):
        """Return the DiagnosticArray describing the current mode."""
        from diagnostic_msgs.msg import DiagnosticArray
        from diagnostic_msgs.msg import DiagnosticStatus
        from diagnostic_msgs.msg import KeyValue
        st = DiagnosticStatus()
        st.name = f'{self.node.get_name()}: mode'
        st.hardware_id = HARDWARE_ID
        level, reason, detail = self.status()
        st.level = bytes([level])
        if not level:
            st.message = 'normal'
        else:
            mode = 'normal' if self.normal and self._stop is None else 'safe'
            st.message = f'{mode}: {reason} ({detail})'
        st.values = [KeyValue(key=k, value=v) for k, v in self.diagnostics_values().items()]
        arr = DiagnosticArray()
        arr.header.stamp = self.node.get_clock().now().to_msg()
        arr.status = [st]
        return arr

    def publish_diagnostics(self) -> None:
        """Publish the diagnostics now (no-op before :meth:`create` / after release)."""
        if self._diag_pub is not None:
            msg = self.diagnostics_message()
            self._diag_pub.publish(msg)
            if self._std_diag_pub is not None:
                self._std_diag_pub.publish(msg)
