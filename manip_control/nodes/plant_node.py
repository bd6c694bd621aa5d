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
Plant node: the simulated 2R arm (core :class:`~manip_control.plant.Plant`) behind topics.

Subscribes (``command_source`` parameter)
    ``joint_commands`` (sensor_msgs/JointState, effort by joint name, header.stamp = stamp of
    the joint state the command was computed from), or ``effort_controller/commands``
    (std_msgs/Float64MultiArray in ``joints`` order, what ros2_control's ForwardCommandController
    with interface ``effort`` takes).
Publishes
    ``joint_states`` (sensor_msgs/JointState: stamped, measured position [rad], velocity
    [rad/s], effort = actual actuator torque at the joint [N m]);
    ``motor_states`` (sensor_msgs/JointState per joint: position = motor current [A],
    velocity = drive terminal voltage [V], effort = current reference [A]);
    ``/clock`` (rosgraph_msgs/Clock, lockstep only);
    ``~/diagnostics`` and ``/diagnostics`` (diagnostic_msgs/DiagnosticArray, one status named
    ``<namespace/node>: simulated 2R arm`` with hardware_id ``manip_control/<namespace/node>``
    as diagnostic_aggregator expects: ticks, refused commands and why, command timeouts,
    watchdog trips; about once a second).

A non-finite state (a diverged integration, e.g. a step too long for the motor parameters) is
never published: the node logs one error line, reports it in diagnostics and exits with
code 2.

Lockstep (``mode: lockstep``): at tick k (``t_k = k T``) the node publishes ``/clock`` t_k and
the measured state stamped t_k, then waits for the command of tick k (a JointState command
with header.stamp == t_k, or the first Float64MultiArray after the state) and only then
integrates one period with it held. At start it waits for its subscribers
(``wait_for_subscribers``) and re-sends tick 0 (same content) every 0.1 s until the first
command arrives (discovery), at most ``startup_timeout``. If a command does not arrive within
``lockstep_timeout`` the last command is held, a warning is logged and the run goes on; while
commands stay missing later ticks wait at most 10 ms, so a missing node slows the run down
but never stops it.

Real time (``mode: realtime``): a wall-clock timer at ``control_rate``; each tick integrates
one period with the latest valid command held (zero-order hold), then publishes the state
stamped with the wall time. Drive watchdog: no valid command for ``command_timeout`` means a
zero torque command (zero current reference) until commands come back.

Commands with NaN/Inf, a wrong length, or missing joint names are refused, counted and the
reason logged; a refused command changes nothing.
"""

from __future__ import annotations

import math
import sys
import time

from diagnostic_msgs.msg import DiagnosticArray
from diagnostic_msgs.msg import DiagnosticStatus
from diagnostic_msgs.msg import KeyValue
from manip_control.nodes import cdr
from manip_control.nodes.common import data_qos
from manip_control.nodes.common import EXIT_ACK_WAIT
from manip_control.nodes.common import guarded
from manip_control.nodes.common import PUBLISH_DEPTH
from manip_control.nodes.common import run_node
from manip_control.nodes.common import steady_clock
from manip_control.nodes.common import wait_acknowledged
from manip_control.nodes.recorder_gate import RecorderGate
from manip_control.nodes.ros_params import arm_from_description
from manip_control.nodes.ros_params import arm_plant_defaults
from manip_control.nodes.ros_params import declare_parameters
from manip_control.nodes.ros_params import held_urdf_plant
from manip_control.nodes.ros_params import plant_config
from manip_control.nodes.ros_params import plant_specs
from manip_control.nodes.ros_params import print_node_help
from manip_control.nodes.ros_params import wants_help
from manip_control.plant import Plant
from manip_control.safety import decode_refusal
from manip_control.safety import map_array_command
from manip_control.safety import map_joint_state
from manip_control.safety import Refusal
from manip_control.safety import RefusalCounter
from manip_control.sensors import JointSensors
from rclpy.node import Node
from rclpy.task import Future
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

#: Wait per tick [s] while commands are missing after a lockstep timeout.
DEGRADED_WAIT = 0.01
#: Re-send period of tick 0 until the first command arrives [s].
RESEND_PERIOD = 0.1
#: Readiness must hold this long before tick 0 is sent [s] (lets discovery settle).
SETTLE_TIME = 0.1
SUPERVISION_PERIOD = 0.005
DIAGNOSTICS_PERIOD = 1.0


def _floats(x) -> list:
    """Return the plant state as a list of floats (2R plant: a list, ArmPlant: an array)."""
    return x.tolist() if hasattr(x, 'tolist') else list(x)


class PlantNode(Node):
    """
    The simulated arm as a ROS node.

    Parameters
    ----------
    node_name : str
    parameter_overrides : list of rclpy Parameter, optional
        Values that override the defaults (and the command line).
    autostart : bool
        Start ticking right away (lockstep: after the start-up wait). With False, call
        :meth:`start` (manip-sim starts the plant once every node is connected).
    keep_history : bool
        Keep per-tick records in :attr:`history` (manip-sim builds its summary from them).
    **kwargs
        Passed to ``rclpy.node.Node`` (``context``, ``cli_args``, ``namespace``, ...).

    """

    def __init__(self, node_name: str = 'plant', *, parameter_overrides=None,
                 autostart: bool = True, keep_history: bool = False, **kwargs):
        super().__init__(node_name, parameter_overrides=parameter_overrides, **kwargs)
        # Validate everything before creating any publisher: a bad configuration publishes
        # nothing (ParameterError propagates to main(), which exits with code 2).
        # an arm from robot_description sizes every per-joint default: read it first
        arm, urdf = arm_from_description(self)
        defaults = None if arm is None else arm_plant_defaults(arm, urdf)
        self.values = declare_parameters(self, plant_specs(defaults))
        cfg = self.config = plant_config(self.values, self.get_name(), defaults)
        self.joints = list(cfg.joints)
        self.n = n = len(self.joints)
        self.lockstep = cfg.mode == 'lockstep'
        self.period = cfg.period
        self.n_ticks = cfg.n_ticks
        if arm is None:
            self.plant = Plant(cfg.plant, cfg.period)
        else:
            self.plant = held_urdf_plant(urdf, self.joints, cfg.plant, cfg.period,
                                         self.get_name())
        self.sensors = JointSensors(cfg.plant.sensors, cfg.period, n)
        self._payload_pending = cfg.plant.payload.mass > 0.0     # logged once, when attached
        self.refusals = RefusalCounter(throttle=1.0)
        self._stamped = cfg.command_source == 'joint_commands'

        # counters (exposed in ~/diagnostics and the summary)
        self.published = {'joint_states': 0, 'motor_states': 0, 'clock': 0}
        self.refused_commands = 0
        self.last_refusal = ''
        self.stale_commands = 0
        self.command_timeouts = 0
        self.watchdog_trips = 0
        self.resends = 0
        self.missed_ticks = 0
        self.callback_errors = 0
        self.history: list | None = [] if keep_history else None
        self.done_future = Future()
        self.exit_code = 0              # 2 after a non-finite state (see _stop_not_finite)
        self.failure = ''

        qos = data_qos()
        # recorded: kept for a recorder that lags (the controller's reader takes the newest)
        self._state_pub = self.create_publisher(JointState, 'joint_states',
                                                data_qos(PUBLISH_DEPTH))
        self._motor_pub = self.create_publisher(JointState, 'motor_states',
                                                data_qos(PUBLISH_DEPTH))
        self._clock_pub = self.create_publisher(Clock, '/clock', qos) if self.lockstep else None
        self._diag_pub = self.create_publisher(DiagnosticArray, '~/diagnostics', 10)
        # and on the standard topic that diagnostic_aggregator and rqt_robot_monitor read
        self._std_diag_pub = self.create_publisher(DiagnosticArray, '/diagnostics', 10)
        # Hot-path topics are published and taken as CDR bytes (see nodes/cdr.py).
        if self._stamped:
            self._cmd_sub = self.create_subscription(JointState, 'joint_commands',
                                                     self._on_joint_command, qos, raw=True)
        else:
            self._cmd_sub = self.create_subscription(Float64MultiArray,
                                                     'effort_controller/commands',
                                                     self._on_array_command, qos, raw=True)
        # readers of this process that take a topic from its publisher, not through DDS (a
        # recorder's tap): topic -> count, added to the publisher's subscription count
        self.in_process_readers: dict[str, int] = {}
        ready_topic = self.values.get('wait_for_recorder') or ''
        self._recorder_gate = None
        if ready_topic and self.lockstep:
            self._recorder_gate = RecorderGate(self, ready_topic, self.config.startup_timeout,
                                               self.in_process_readers)
        self._state_enc = cdr.JointStateEncoder(self.joints)
        self._state_raw = b''
        self._clock_raw = b''

        self.k = 0                      # index of the tick whose state was published last
        self.first_tick_ns: int | None = None
        self._phase = 'idle'            # idle -> starting -> waiting -> done (lockstep)
        self._tick_ns = 0
        self._tick_wall = 0.0
        self._start_wall = 0.0
        self._ready_since = None
        self._got_first = False
        self._degraded = False
        self._last_send = 0.0
        self._last_cmd = (0.0,) * n
        self._latest_cmd: tuple | None = None
        self._latest_wall = 0.0
        self._watchdog_active = False
        self._wall_clock = None
        self.wall_start = None
        self.wall_end = None

        steady = steady_clock()
        self._diag_timer = self.create_timer(DIAGNOSTICS_PERIOD, self._publish_diagnostics,
                                             clock=steady)
        self._timer = None
        if autostart:
            self.start()

    # -- public -----------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        """Return True once ``duration`` has been simulated."""
        return self._phase == 'done'

    @property
    def tick_stamp_ns(self) -> int:
        """Stamp of the last published state [ns]."""
        return self._tick_ns

    def start(self) -> None:
        """Begin the run (lockstep: wait for subscribers, then tick 0)."""
        if self._phase != 'idle':
            return
        self._start_wall = time.monotonic()
        self.wall_start = time.perf_counter()
        if self.lockstep:
            self._phase = 'starting'
            self._timer = self.create_timer(SUPERVISION_PERIOD, self._supervise,
                                            clock=steady_clock())
            self.get_logger().info(
                f'lockstep at {1.0 / self.period:g} Hz'
                + (f' for {self.config.duration:g} s' if self.n_ticks else '')
                + f', commands from {self._cmd_sub.topic_name}; waiting for subscribers')
        else:
            from rclpy.clock import Clock as RclClock
            from rclpy.clock import ClockType
            self._wall_clock = RclClock(clock_type=ClockType.SYSTEM_TIME)
            self._phase = 'running'
            self._timer = self.create_timer(self.period, self._realtime_tick,
                                            clock=steady_clock())
            self.get_logger().info(
                f'real time at {1.0 / self.period:g} Hz, watchdog '
                f'{self.config.command_timeout:g} s, commands from {self._cmd_sub.topic_name}')

    # -- ticks ------------------------------------------------------------------------------
    def _publish_tick(self, t_ns: int) -> None:
        """Measure the state of tick ``self.k`` and publish it (with /clock in lockstep)."""
        x = self.plant._x
        n = self.n
        xs = _floats(x)
        if not math.isfinite(sum(xs[:3 * n])):
            self._stop_not_finite(t_ns, xs)
            return
        q, qd = self.sensors.measure(xs[:n], xs[n:2 * n])
        tj = self.plant.joint_torque_at(x)
        if self.first_tick_ns is None:
            self.first_tick_ns = t_ns
        self._tick_ns = t_ns
        if self._clock_pub is not None:
            self._clock_raw = cdr.encode_clock(t_ns)
            self._clock_pub.publish(self._clock_raw)
            self.published['clock'] += 1
        self._state_raw = self._state_enc.encode(t_ns, q, qd, tj)
        self._meas = (q, qd)
        self._tick_wall = time.monotonic()
        self._state_pub.publish(self._state_raw)
        self.published['joint_states'] += 1

    def _resend_tick(self) -> None:
        """Publish the current tick again, unchanged (idempotent for the other nodes)."""
        if self._clock_pub is not None:
            self._clock_pub.publish(self._clock_raw)
            self.published['clock'] += 1
        self._state_pub.publish(self._state_raw)
        self.published['joint_states'] += 1
        self.resends += 1
        self._last_send = time.monotonic()

    def _apply(self, tau, publish: bool = True) -> None:
        """Integrate one period with ``tau`` [N·m] held; publish the motor telemetry."""
        plant = self.plant
        x = plant._x
        plant.step(*tau)
        if self._payload_pending and plant.payload_attached:
            self._payload_pending = False
            self.get_logger().info(f'payload: {self.config.plant.payload.mass:g} kg picked up '
                                   f'at t = {self.k * self.period:.3f} s (the plant only)')
        if not publish:
            self.k += 1
            return
        # Telemetry at t_k+ (the new command applied), as simulation.run_closed_loop records.
        n = self.n
        xs = _floats(x)
        cur = xs[2 * n:3 * n]
        volt = plant.drive_voltage_at(x)
        self._motor_pub.publish(self._state_enc.encode(self._tick_ns, cur, volt,
                                                       plant.current_reference()))
        self.published['motor_states'] += 1
        if self.history is not None:
            tj = plant.joint_torque_at(x)
            q, qd = self._meas
            self.history.append((self._tick_ns * 1e-9, *xs[:2 * n], *q, *qd, *tau, *tj, *cur,
                                 *volt))
        self.k += 1

    def _finish(self) -> None:
        self._phase = 'done'
        self.wall_end = time.perf_counter()
        if self._timer is not None:
            self._timer.cancel()
        self._publish_diagnostics()
        wall = self.wall_end - self.wall_start
        self.get_logger().info(
            f'run finished: {self.k} ticks, {self.command_timeouts} command timeouts, '
            f'{self.refused_commands} refused commands; {wall:.3f} s wall, real-time factor '
            f'{self.k * self.period / wall:.2f}x')
        if not self.done_future.done():
            self.done_future.set_result(True)

    def _stop_not_finite(self, t_ns: int, x) -> None:
        """Stop on a non-finite state (a diverged integration): never publish it; exit 2."""
        n = self.n

        def vec(part):
            return '[' + ', '.join(f'{v:.6g}' for v in x[part * n:(part + 1) * n]) + ']'
        self.failure = (
            f'plant state not finite at t = {self.k * self.period:.6f} s (tick {self.k}: '
            f'q = {vec(0)}, qd = {vec(1)}, i = {vec(2)}): the integration diverged; nothing '
            'more is published. Check control_rate and substeps (the step is 1 / (control_rate '
            'substeps)) and the motor and friction parameters')
        self.exit_code = 2
        self.get_logger().error(self.failure)
        self._finish()

    def _lockstep_next(self) -> None:
        if self.n_ticks and self.k >= self.n_ticks:
            self._finish()
            return
        self._publish_tick(int(round(self.k * self.period * 1e9)))

    def _recorder_ready(self) -> bool:
        """
        Tell whether the recorder (if waited for) records every topic from the next message.

        Both sides of the match (:class:`~manip_control.nodes.recorder_gate.RecorderGate`):
        the recorder reports every subscription matched, and each of this node's publishers
        of a recorded topic has matched the recorder's.
        """
        return self._recorder_gate is None or not self._recorder_gate.missing()

    def _readers(self, pub) -> int:
        """Readers of ``pub``: its DDS subscriptions and the in-process ones."""
        return pub.get_subscription_count() + self.in_process_readers.get(pub.topic_name, 0)

    @guarded
    def _supervise(self) -> None:
        """Lockstep supervision (steady timer): start-up, re-sends, command timeouts."""
        now = time.monotonic()
        if self._phase == 'starting':
            ready = (self._readers(self._state_pub) >= self.config.wait_for_subscribers
                     and self._cmd_sub.get_publisher_count() >= 1
                     and self._recorder_ready())
            if ready and self._ready_since is None:
                self._ready_since = now
            elif not ready:
                self._ready_since = None
            timed_out = now - self._start_wall > self.config.startup_timeout
            if (ready and now - self._ready_since >= SETTLE_TIME) or timed_out:
                if not ready:
                    self.get_logger().warning(
                        'starting without subscribers/command publisher'
                        + ('' if self._recorder_ready() else
                           ' (the recorder has not matched every recorded topic: the bag may '
                           'miss the first ticks)')
                        + f' after {self.config.startup_timeout:g} s')
                self._phase = 'waiting'
                self._first_wall = now
                self._last_send = now
                self._lockstep_next()
            return
        if self._phase != 'waiting':
            return
        if not self._got_first:
            if now - self._first_wall > self.config.startup_timeout:
                self.get_logger().warning(
                    f'no command for tick 0 within {self.config.startup_timeout:g} s; holding '
                    'a zero command and going on')
                self._got_first = True
                self._timeout()
            elif now - self._last_send >= RESEND_PERIOD:
                self._resend_tick()
            return
        limit = DEGRADED_WAIT if self._degraded else self.config.lockstep_timeout
        if now - self._tick_wall > limit:
            self._timeout()

    def _timeout(self) -> None:
        self.command_timeouts += 1
        if not self._degraded:
            self._degraded = True
            self.get_logger().warning(
                f'no command for t = {self._tick_ns * 1e-9:.6f} s within the timeout; holding '
                f'the last command {list(self._last_cmd)} and going on (waiting at most '
                f'{DEGRADED_WAIT * 1e3:g} ms per tick until commands come back)')
        self._apply(self._last_cmd)
        self._lockstep_next()

    @guarded
    def _realtime_tick(self) -> None:
        """
        Real time: integrate the periods elapsed since the last tick, publish the state.

        A late timer (the process did not get the CPU in time) is caught up by integrating
        every elapsed period with the held command (the arm does not wait), counted in
        ``missed_ticks``; only the current state is published.
        """
        if self._phase != 'running':
            return
        now = time.monotonic()
        due = int((time.perf_counter() - self.wall_start) / self.period) - 1
        if self.published['joint_states'] > 0:
            steps = max(1, due - self.k)
            if self.n_ticks:
                steps = min(steps, self.n_ticks - self.k)
            self.missed_ticks += steps - 1
            cmd = self._latest_cmd
            if cmd is None or now - self._latest_wall > self.config.command_timeout:
                if not self._watchdog_active:
                    self._watchdog_active = True
                    self.watchdog_trips += 1
                    if cmd is not None:
                        self.get_logger().warning(
                            f'watchdog: no valid command for {self.config.command_timeout:g} '
                            's; zero torque command (zero current) until commands come back')
                cmd = (0.0,) * self.n
            elif self._watchdog_active:
                self._watchdog_active = False
                self.get_logger().info('watchdog: commands are back')
            for _ in range(steps - 1):
                self._apply(cmd, publish=False)
            self._apply(cmd)
            if self.n_ticks and self.k >= self.n_ticks:
                self._finish()
                return
        self._publish_tick(self._wall_clock.now().nanoseconds)

    # -- commands ---------------------------------------------------------------------------
    def _refuse(self, source: str, refusal: Refusal) -> None:
        """Count a refused command (per reason) and log it, throttled, in the common wording."""
        self.refused_commands += 1
        self.last_refusal = str(refusal)
        line = self.refusals.record(source, refusal, time.monotonic())
        if line:
            self.get_logger().warning(f'{line}; {self.refused_commands} refused so far')

    @guarded
    def _on_joint_command(self, raw: bytes) -> None:
        msg, reason = cdr.decode_joint_state(raw)
        if reason:
            self._refuse('joint_commands', decode_refusal(reason))
            return
        stamp, names, position, velocity, effort = msg
        sample = map_joint_state(self.joints, names, position, velocity, effort,
                                 fields=('effort',))
        if sample.__class__ is Refusal:
            self._refuse('joint_commands', sample)
            return
        vals = sample.effort
        if self.lockstep:
            if self._phase != 'waiting' or stamp != self._tick_ns:
                self.stale_commands += 1
                return
            self._accept_lockstep(vals)
        else:
            self._latest_cmd = tuple(vals)
            self._latest_wall = time.monotonic()

    @guarded
    def _on_array_command(self, raw: bytes) -> None:
        data, reason = cdr.decode_float64_array(raw)
        if reason:
            self._refuse('effort_commands', decode_refusal(reason))
            return
        vals = map_array_command(data, len(self.joints))
        if vals.__class__ is Refusal:
            self._refuse('effort_commands', vals)
            return
        if self.lockstep:
            if self._phase != 'waiting':
                self.stale_commands += 1
                return
            self._accept_lockstep(vals)
        else:
            self._latest_cmd = tuple(vals)
            self._latest_wall = time.monotonic()

    def _accept_lockstep(self, vals) -> None:
        self._got_first = True
        if self._degraded:
            self._degraded = False
            self.get_logger().info('commands are back; lockstep resumes')
        self._last_cmd = tuple(vals)
        self._apply(self._last_cmd)
        self._lockstep_next()

    def close(self) -> None:
        """
        Before the process exits: let the last messages reach their (reliable) readers.

        A reliable writer destroyed at exit drops what its readers have not acknowledged: a
        recorder running behind (a loaded host) needs seconds, not a fraction of one, so all
        publishers share :data:`EXIT_ACK_WAIT`; a reader still behind then is named in a
        warning.
        """
        late = wait_acknowledged((self._state_pub, self._motor_pub, self._clock_pub,
                                  self._diag_pub, self._std_diag_pub), EXIT_ACK_WAIT)
        if late:
            self.get_logger().warning(
                f'exit: a reader had not acknowledged the last messages of {", ".join(late)} '
                f'after {EXIT_ACK_WAIT:g} s: a stopped or slow subscriber (a recorder) misses '
                'them')

    # -- diagnostics ------------------------------------------------------------------------
    def counters(self) -> dict:
        """Counters of the run (also in ~/diagnostics)."""
        return {
            'mode': self.config.mode, 'ticks': self.k,
            'refused_commands': self.refused_commands, 'last_refusal': self.last_refusal,
            'stale_commands': self.stale_commands, 'command_timeouts': self.command_timeouts,
            'watchdog_trips': self.watchdog_trips, 'watchdog_active': self._watchdog_active,
            'resends': self.resends, 'missed_ticks': self.missed_ticks,
            'callback_errors': self.callback_errors,
            **{f'refused.{source}.{why}': n for source, per in
               sorted(self.refusals.counts.items()) for why, n in sorted(per.items())},
        }

    @guarded
    def _publish_diagnostics(self) -> None:
        c = self.counters()
        st = DiagnosticStatus()
        # diagnostic_updater's convention: '<node>: <task>'; the namespace keeps two arms apart
        fqn = self.get_fully_qualified_name().lstrip('/')
        st.name = f'{fqn}: simulated 2R arm'
        st.hardware_id = f'manip_control/{fqn}'
        warn = self._watchdog_active or self._degraded
        st.level = (DiagnosticStatus.ERROR if self.failure else
                    DiagnosticStatus.WARN if warn else DiagnosticStatus.OK)
        st.message = (self.failure if self.failure else
                      'watchdog: zero torque' if self._watchdog_active else
                      'commands missing (lockstep timeouts)' if self._degraded else 'ok')
        st.values = [KeyValue(key=k, value=str(v)) for k, v in c.items()]
        arr = DiagnosticArray()
        arr.header.stamp = self.get_clock().now().to_msg()
        arr.status = [st]
        self._diag_pub.publish(arr)
        self._std_diag_pub.publish(arr)


def main(args=None) -> int:
    """``ros2 run manip_control plant [--ros-args ...]``; ``--help`` lists the parameters."""
    if wants_help(args):
        return print_node_help('plant', __doc__, plant_specs())
    return run_node(PlantNode, args)


if __name__ == '__main__':
    sys.exit(main())
