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
MuJoCo driver: a simulated robot that behaves like a ros2_control robot (effort interface).

The arm of ``robot_description`` (URDF text; '' = the package's planar 2R) is simulated by
MuJoCo (:class:`manip_control.mujoco_arm.MujocoArm`), an engine this package did not write,
in wall-clock real time. The node (default name ``joint_state_broadcaster``, as ros2_control's
state broadcaster) behaves like a ros2_control robot with a ForwardCommandController:

Publishes
    ``joint_states`` (sensor_msgs/JointState, every tick at ``state_rate``: wall-clock stamp,
    the simulated joints in the URDF's chain order, position [rad], velocity [rad/s], effort =
    the torque applied over the last period [N m]).
Subscribes
    ``effort_controller/commands`` (std_msgs/Float64MultiArray, torque [N m] per joint in the
    same order). The newest command is applied at each tick and held until the next one, for
    ever (no watchdog unless ``command_timeout`` > 0); before the first, the arm is held still
    (``brake``; or falls under zero torque with ``brake:=false``). A command of the
    wrong length, with a non-finite value or malformed is refused (counted, logged at most
    once a second), never applied. Commands are clamped to the URDF's effort limits, as a
    drive does.

Payload: ``payload.mass`` > 0 adds that point mass to the body of the last joint (at
``payload.offset`` in its frame) at the tick ``payload.at_time / period`` (ticks since the
start, braked ones included), once (:meth:`MujocoArm.add_payload`); the summary has the tick.

Time: each tick steps the physics by one period ``1/state_rate`` on an absolute wall-clock
schedule, in a thread of its own (an rclpy timer does not keep 1 kHz). A starved driver is
late: a tick more than 5 periods late restarts the schedule, so its physics slows down rather
than skipping (each tick is one period of simulated time). Lockstep on /clock is not
provided: the package's lockstep protocol is the plant node's.

At exit (Ctrl-C, SIGTERM) the loop keeps running while commands still arrive (at most
``drain_time``), so the controller's last, zero, command is applied; then one summary line is
logged (and written as JSON to ``summary_file``): ticks, ticks with a fresh command (of all
ticks after the first command: ``command_ratio``; of the paced ones, at least half a period
after the previous state, as a catch-up tick after a stall leaves no controller time to
answer: ``paced_command_ratio``), the time from a state to the next command (a histogram in
0.1 ms bins, the last one open), refused commands, the last command, the largest joint speed
until the stop (``max_abs_velocity``) and after it (``max_abs_velocity_after_stop``: the arm
under the last command, zero torque included, until the driver ends: a simulated arm
without brakes falls then).

    ros2 run manip_control mujoco_driver --ros-args -p robot_description:="$(xacro arm.urdf)"
"""

from __future__ import annotations

import json
import math
import random
import sys
import threading
import time

from manip_control.arm_model import ArmModelError
from manip_control.mujoco_arm import MujocoArm
from manip_control.mujoco_arm import MujocoDivergedError
from manip_control.nodes import cdr
from manip_control.nodes.common import data_qos
from manip_control.nodes.common import EXECUTOR_PRIORITY
from manip_control.nodes.common import extend_stop_bound
from manip_control.nodes.common import owns_process
from manip_control.nodes.common import run_node
from manip_control.nodes.common import set_thread_realtime
from manip_control.nodes.common import set_threads_realtime
from manip_control.nodes.ros_params import declare_parameters
from manip_control.nodes.ros_params import ParamSpec
from manip_control.nodes.ros_params import print_node_help
from manip_control.nodes.ros_params import wants_help
from manip_control.parameters import load_scenario
from manip_control.parameters import ParameterError
from manip_control.parameters import payload_from_dict
from manip_control.parameters import payload_tick
from manip_control.urdf import urdf_from_scenario
import numpy as np
from rclpy.node import Node
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

INF = math.inf
RELIABILITIES = ('reliable', 'best_effort')
#: a tick later than this many periods restarts the schedule (no burst of catch-up ticks)
LATE_RESTART = 5
#: the counts of the command ratios, taken at the stop (the controller stops too)
STOP_COUNTS = ('ticks_after_first_command', 'ticks_with_command', 'paced_ticks',
               'paced_ticks_with_command')
_PER_JOINT = '; one value = every joint, else one per joint'


def driver_specs() -> list[ParamSpec]:
    """Parameters of the MuJoCo driver node."""
    return [
        ParamSpec('robot_description', '',
                  "URDF text of the arm (as robot_state_publisher takes it); '' = the "
                  "package's planar 2R (the default scenario's plant, with its rotor "
                  'inertia as armature and its friction)', 'URDF text or empty'),
        ParamSpec('initial_position', [math.nan],
                  'start pose per joint [rad or m]; [nan] = the middle of each joint range (0 '
                  'for a joint without one)',
                  'n finite values inside the URDF joint ranges'),
        ParamSpec('mass_scale', [1.0],
                  'factor on the mass and rotational inertia of the body moved by each joint '
                  '(a heavier or lighter arm than the URDF says)' + _PER_JOINT, 'each > 0'),
        ParamSpec('urdf_dynamics', True,
                  "simulate the URDF's <dynamics damping friction> (the controller's nominal "
                  'friction comes from them); damping and frictionloss add to them', ''),
        ParamSpec('damping', [0.0],
                  'extra viscous joint damping [N m s/rad]' + _PER_JOINT, 'each >= 0'),
        ParamSpec('frictionloss', [0.0],
                  'extra dry joint friction [N m] (MuJoCo frictionloss)' + _PER_JOINT,
                  'each >= 0'),
        ParamSpec('armature', [0.0],
                  'extra reflected rotor inertia on the inertia diagonal [kg m^2] (the 2R '
                  'has its rotors Jm N^2 already)' + _PER_JOINT, 'each >= 0'),
        ParamSpec('brake', True,
                  'the arm is held still (brakes on, zero effort reported) until the first '
                  'command, as a robot waits for its controller; false: it moves under zero '
                  'torque (falls) from the start', ''),
        ParamSpec('state_rate', 1000.0,
                  'physics tick and joint_states rate [Hz] (MuJoCo steps one period per tick)',
                  'in [1, 10000]', (1.0, 10000.0)),
        ParamSpec('integrator', 'implicitfast',
                  'MuJoCo integrator (implicitfast: the joint damping implicitly; RK4 diverged '
                  'on the xArm 7 with its URDF damping)',
                  'RK4, Euler, implicitfast or implicit'),
        ParamSpec('reliability', 'reliable', 'QoS reliability of joint_states',
                  'reliable or best_effort'),
        ParamSpec('loss_probability', 0.0,
                  'probability of dropping each joint_states message (a lossy link; the '
                  'physics still steps)', 'in [0, 1)', (0.0, 1.0)),
        ParamSpec('seed', 1, 'seed of the message-loss draws', '>= 0', (0, 2 ** 31 - 1)),
        ParamSpec('pause_at', 0.0,
                  'simulated time [s] at which the driver stalls once for pause_duration',
                  '>= 0', (0.0, INF)),
        ParamSpec('pause_duration', 0.0,
                  'length of the stall [s]: no physics, no joint_states (a driver that hangs); '
                  '0 = no stall', 'in [0, 60]', (0.0, 60.0)),
        ParamSpec('command_timeout', 0.0,
                  'watchdog [s]: no new command for this long means zero torque; 0 = hold '
                  'the last command for ever (ForwardCommandController)', '>= 0', (0.0, INF)),
        ParamSpec('realtime_priority', 0,
                  'SCHED_FIFO priority of the physics thread (1-99; 0 = normal scheduling); '
                  "Fast DDS's threads run one below, the executor that takes the commands at "
                  '1; one warning where not permitted', 'in [0, 99]', (0, 99)),
        ParamSpec('drain_time', 2.0,
                  'at exit, longest time [s] the loop keeps running while commands still '
                  'arrive (the controller stops with a zero command)', 'in [0, 30]',
                  (0.0, 30.0)),
        ParamSpec('payload.mass', 0.0,
                  'point mass [kg] added to the body of the last joint at payload.at_time (a '
                  'payload picked up: the controller is not told); 0 = none', '>= 0; '
                  'plausible range [0, 1000] kg', (0.0, 1000.0)),
        ParamSpec('payload.at_time', 0.0,
                  'when the payload is picked up [s since the driver started: ticks x period, '
                  'braked ticks included]', '>= 0; at most 86400 s', (0.0, 86400.0)),
        ParamSpec('payload.offset', [0.0, 0.0, 0.0],
                  "the payload's position in the last simulated link's frame [m]",
                  '3 finite values'),
        ParamSpec('summary_file', '',
                  "write the exit summary as JSON to this file; '' = only log it", ''),
    ]


def _two_link_description():
    """Return ``(urdf, defaults)`` of the package's planar 2R (the default scenario's plant)."""
    scenario = load_scenario('default')
    plant = scenario.plant
    # the URDF carries the friction as <dynamics>; the rotors cannot be in a URDF
    return urdf_from_scenario(scenario), {'armature': list(plant.reflected_inertia)}


class MujocoDriverNode(Node):
    """
    The MuJoCo driver as a ROS node (see the module docstring).

    Parameters
    ----------
    node_name : str
    parameter_overrides : list of rclpy Parameter, optional
    **kwargs
        Passed to ``rclpy.node.Node``.

    """

    def __init__(self, node_name: str = 'joint_state_broadcaster', *,
                 parameter_overrides=None, **kwargs):
        super().__init__(node_name, parameter_overrides=parameter_overrides, **kwargs)
        name = self.get_name()
        v = self.values = declare_parameters(self, driver_specs())

        def bad(param: str, reason: str) -> ParameterError:
            return ParameterError(f'parameter {param} (node {name}): {reason}')

        text = v['robot_description']
        defaults: dict = {}
        if not text:
            text, defaults = _two_link_description()
        for key, allowed in (('integrator', ('RK4', 'Euler', 'implicitfast', 'implicit')),
                             ('reliability', RELIABILITIES)):
            if v[key] not in allowed:
                raise bad(key, f'must be one of {", ".join(allowed)} (got {v[key]!r})')
        if not v['loss_probability'] < 1.0:
            raise bad('loss_probability', f'must be < 1 (got {v["loss_probability"]})')
        period = 1.0 / v['state_rate']
        options = {}
        for key in ('mass_scale', 'damping', 'frictionloss', 'armature'):
            value = v[key]
            options[key] = value[0] if len(value) == 1 else value
        if defaults:        # the 2R's rotors, plus any extra armature asked for
            try:
                options['armature'] = list(np.add(defaults['armature'], options['armature']))
            except ValueError:
                raise bad('armature', f'expected 1 or 2 values, got {v["armature"]}') from None
        try:
            arm = MujocoArm.from_urdf(text, mass_scale=options['mass_scale'],
                                      damping=options['damping'],
                                      frictionloss=options['frictionloss'],
                                      armature=options['armature'],
                                      urdf_dynamics=v['urdf_dynamics'], timestep=period,
                                      integrator=v['integrator'])
        except ArmModelError as exc:
            msg = str(exc)
            key = msg.split(':', 1)[0]
            if key in options:              # an option's message starts with its name
                raise bad(key, msg.split(': ', 1)[1]) from None
            raise bad('robot_description', msg) from None
        self.arm = arm
        self.n = n = arm.n
        lim = arm.urdf_arm.limits
        if not (len(v['initial_position']) == 1 and math.isnan(v['initial_position'][0])):
            q0 = np.array(v['initial_position'], dtype=float)
            if q0.shape != (n,) or not np.all(np.isfinite(q0)):
                raise bad('initial_position', f'expected {n} finite values (joints '
                          f'{", ".join(arm.joint_names)}), got {v["initial_position"]}')
            outside = [j for j, x in zip(arm.joint_names, q0.tolist())
                       if not lim.lower[arm.joint_names.index(j)] <= x
                       <= lim.upper[arm.joint_names.index(j)]]
            if outside:
                raise bad('initial_position', f'outside the URDF range of {", ".join(outside)}')
        else:
            finite = np.isfinite(lim.lower) & np.isfinite(lim.upper)
            q0 = np.where(finite, 0.5 * (lim.lower + lim.upper), 0.0)
        arm.set_state(q0)
        self.period = period
        try:
            payload = payload_from_dict({'mass': v['payload.mass'],
                                         'at_time': v['payload.at_time']}, 'payload')
        except ParameterError as exc:
            key, _, reason = str(exc).partition(': ')
            raise bad(key, reason) from None
        offset = np.array(v['payload.offset'], dtype=float)
        if offset.shape != (3,) or not np.all(np.isfinite(offset)):
            raise bad('payload.offset', f'expected 3 finite values [m], got '
                      f'{v["payload.offset"]}')
        self.payload = payload
        self._payload_offset = offset
        # the tick at which the payload is added (None: no payload)
        self._payload_tick = (payload_tick(payload.at_time, period) if payload.mass > 0.0
                              else None)
        self._effort = np.where(np.isfinite(lim.effort), lim.effort, INF)
        self._zero = (0.0,) * n
        # the newest command, replaced whole by the subscription (one reference: atomic)
        self._cmd = (self._zero, 0, 0.0)       # (tau, sequence number, monotonic arrival)
        self._applied_seq = 0
        self._published_at = -INF        # monotonic time of the last state published [s]
        # wall time from a state to the next command [0.1 ms bins, the last one open]
        self.answer_histogram = [0] * 51
        self._rng = random.Random(v['seed'])
        self.stats = {'ticks': 0, 'ticks_after_first_command': 0, 'ticks_with_command': 0,
                      'paced_ticks': 0, 'paced_ticks_with_command': 0,
                      'ticks_at_stop': None, 'commands': 0, 'refused': 0, 'states_lost': 0,
                      'late_restarts': 0, 'max_late_s': 0.0, 'pauses': 0,
                      'watchdog_zeroed_ticks': 0, 'max_abs_velocity': 0.0,
                      'applied_torque_limited_ticks': 0, 'diverged': False,
                      'payload_added_at_tick': None}
        self.last_refusal = ''
        self._at_stop = None
        self._max_speed_at_stop: float | None = None
        self._running = True

        from rclpy.qos import QoSProfile
        from rclpy.qos import ReliabilityPolicy
        if v['reliability'] == 'best_effort':
            state_qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.BEST_EFFORT)
        else:
            state_qos = data_qos(10)
        self._pub = self.create_publisher(JointState, 'joint_states', state_qos)
        self._encoder = cdr.JointStateEncoder(arm.joint_names)
        # depth 1: the newest command, as ros2_control's realtime buffer gives it (a starved
        # driver skips to it instead of applying a backlog late)
        self.create_subscription(Float64MultiArray, 'effort_controller/commands',
                                 self._on_command,
                                 QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE),
                                 raw=True)
        self.get_logger().info(arm.notes[0])
        watchdog = (f'watchdog {v["command_timeout"]:g} s' if v['command_timeout'] > 0.0
                    else 'no watchdog')
        self.get_logger().info(
            f'MuJoCo {arm.n}-joint arm ({", ".join(arm.joint_names)}) at '
            f'{v["state_rate"]:g} Hz wall-clock real time, q0 = '
            f'[{", ".join(f"{x:.4g}" for x in q0)}], {watchdog}')
        self._thread = threading.Thread(target=self._loop, name='mujoco_physics', daemon=True)
        self._thread.start()

    # -- commands -----------------------------------------------------------------------------
    def _on_command(self, raw: bytes) -> None:
        values, reason = cdr.decode_float64_array(raw)
        if reason is None and len(values) != self.n:
            reason = f'{len(values)} values for {self.n} joints'
        if reason is None and not all(math.isfinite(x) for x in values):
            reason = 'a non-finite value'
        if reason is not None:
            self.stats['refused'] += 1
            self.last_refusal = reason
            self.get_logger().warning(f'command refused ({reason}); {self.stats["refused"]} '
                                      'refused so far; the last valid command stays applied',
                                      throttle_duration_sec=1.0)
            return
        self.stats['commands'] += 1
        now = time.monotonic()
        self._cmd = (values, self.stats['commands'], now)
        age = now - self._published_at        # inf before the first state
        self.answer_histogram[int(age * 1e4) if age < 5e-3 else 50] += 1

    # -- the physics loop ---------------------------------------------------------------------
    def _set_priority(self) -> None:
        """
        Run the physics thread at ``realtime_priority``, and what feeds it just below.

        The commands are taken by the executor (the main thread) and delivered by Fast DDS's
        threads, and every thread shares the interpreter lock: at normal scheduling a busy
        host starved them and a command reached the physics thread a tick late (measured on
        a slow, otherwise idle 2-core host with the controller and a probe: 65-95 % of the
        ticks had a fresh command). As the controller does: Fast DDS's threads at one below,
        the executor at 1 (still preempted by the physics thread). Not the controller's 0.2 ms
        switch interval: with it the adaptive 2R's error after a payload pick-up grew 2-3x
        (the extra switches took the CPU that the normal-priority trajectory node needed).
        """
        prio = self.values['realtime_priority']
        if prio <= 0:
            return
        why = set_thread_realtime(prio)
        if why:
            self.get_logger().warning(f'realtime_priority {prio}: not permitted here ({why}); '
                                      'the physics runs with normal scheduling')
            return
        if prio > 1 and owns_process():
            part = "Fast DDS's threads"
            why = set_threads_realtime('dds.', prio - 1)[1]
            if not why:
                part = 'the executor that takes the commands'
                why = set_thread_realtime(EXECUTOR_PRIORITY, threading.main_thread().native_id)
            if why:
                self.get_logger().warning(
                    f'realtime_priority {prio}: the physics thread runs at it, but {part} '
                    f'could not be raised ({why}) and keep normal scheduling')

    def _loop(self) -> None:
        self._set_priority()
        period = self.period
        due = time.monotonic()
        stats = self.stats
        pause_at, pause_for = self.values['pause_at'], self.values['pause_duration']
        while self._running:
            due += period
            now = time.monotonic()
            if due > now:
                time.sleep(due - now)
            else:
                late = now - due
                stats['max_late_s'] = max(stats['max_late_s'], late)
                if late > LATE_RESTART * period:
                    stats['late_restarts'] += 1
                    due = now
            if pause_for > 0.0 and stats['pauses'] == 0 and self.arm.time >= pause_at:
                stats['pauses'] += 1
                self.get_logger().warning(f'pause: the driver stalls for {pause_for:g} s at '
                                          f't = {self.arm.time:.3f} s (pause_at)')
                time.sleep(pause_for)
                due = time.monotonic()
            try:
                self._tick()
            except Exception as exc:  # noqa: BLE001 - shutdown race, or a bug: say it, stop
                if self._running:
                    self.get_logger().error(f'physics loop stopped: {type(exc).__name__}: '
                                            f'{exc}')
                return

    def _tick(self) -> None:
        stats = self.stats
        tau, seq, arrived = self._cmd
        if seq:
            stats['ticks_after_first_command'] += 1
            # a tick at least half a period after the last state gave the controller time
            # to answer; a catch-up tick after a stall of the host did not
            paced = time.monotonic() - self._published_at >= 0.5 * self.period
            stats['paced_ticks'] += paced
            if seq != self._applied_seq:
                stats['ticks_with_command'] += 1
                stats['paced_ticks_with_command'] += paced
                self._applied_seq = seq
        timeout = self.values['command_timeout']
        if timeout > 0.0 and seq and time.monotonic() - arrived > timeout:
            tau = self._zero
            stats['watchdog_zeroed_ticks'] += 1
        applied = np.clip(tau, -self._effort, self._effort)
        if np.any(applied != tau):
            stats['applied_torque_limited_ticks'] += 1
        arm = self.arm
        if stats['ticks'] == self._payload_tick:
            arm.add_payload(self.payload.mass, self._payload_offset)
            stats['payload_added_at_tick'] = stats['ticks']
            self.get_logger().info(f'payload: {self.payload.mass:g} kg added to the last link '
                                   f'at t = {stats["ticks"] * self.period:.3f} s')
        if seq or not self.values['brake']:
            try:
                arm.step(applied)
            except MujocoDivergedError as exc:
                # a faulted robot: no more states (the controller's state watchdog acts)
                stats['diverged'] = True
                self.get_logger().error(f'{exc}: the driver stops publishing joint_states')
                self._running = False
                return
        stats['ticks'] += 1
        q, qd = arm.q, arm.qd
        speed = float(np.max(np.abs(qd)))
        if speed > stats['max_abs_velocity']:
            stats['max_abs_velocity'] = speed
        p = self.values['loss_probability']
        if p > 0.0 and self._rng.random() < p:
            stats['states_lost'] += 1
            return
        # before the publication: an answer may come before this thread runs again
        self._published_at = time.monotonic()
        self._pub.publish(self._encoder.encode(time.time_ns(), q, qd, applied))

    # -- exit ---------------------------------------------------------------------------------
    def drain(self, executor) -> None:
        """Keep stepping while commands still arrive (the controller's last zero command)."""
        # the command ratio counts the ticks until the stop (the controller stops too)
        self._at_stop = {k: self.stats[k] for k in STOP_COUNTS}
        self.stats['ticks_at_stop'] = self.stats['ticks']
        self._max_speed_at_stop = self.stats['max_abs_velocity']
        extend_stop_bound(self.values['drain_time'])
        end = time.monotonic() + self.values['drain_time']
        last, quiet_since = self.stats['commands'], time.monotonic()
        while time.monotonic() < end and time.monotonic() - quiet_since < 0.5:
            executor.spin_once(timeout_sec=0.05)
            if self.stats['commands'] != last:
                last, quiet_since = self.stats['commands'], time.monotonic()

    def summary(self) -> dict:
        """Return the run's counts (see the module docstring)."""
        s = dict(self.stats)
        s['joints'] = list(self.arm.joint_names)
        s['simulated_time_s'] = self.arm.time
        s['last_command'] = list(self._cmd[0])
        s['last_refusal'] = self.last_refusal
        at_stop = self._at_stop or {k: s[k] for k in STOP_COUNTS}
        after, fresh, paced, paced_fresh = (at_stop[k] for k in STOP_COUNTS)
        s['command_ratio'] = fresh / after if after else 0.0
        s['paced_command_ratio'] = paced_fresh / paced if paced else 0.0
        s['answer_histogram_0.1ms'] = list(self.answer_histogram)
        if self._max_speed_at_stop is not None:
            s['max_abs_velocity'] = self._max_speed_at_stop
            s['max_abs_velocity_after_stop'] = self.stats['max_abs_velocity']
        s['final_position'] = self.arm.q.tolist()
        return s

    def close(self) -> None:
        """Stop the physics thread, log the summary (and write ``summary_file``)."""
        self._running = False
        self._thread.join(1.0)
        s = self.summary()
        self.get_logger().info(
            f'summary: {s["ticks"]} ticks ({s["simulated_time_s"]:.3f} s simulated), '
            f'{100.0 * s["command_ratio"]:.2f} % of the ticks from the first command to the '
            f'stop had a fresh one ({100.0 * s["paced_command_ratio"]:.2f} % of the paced '
            f'ones), '
            f'{s["commands"]} commands, {s["refused"]} refused, {s["states_lost"]} states '
            f'dropped, {s["late_restarts"]} late restarts, max |qd| '
            f'{s["max_abs_velocity"]:.3g} rad/s until the stop'
            + (f' ({s["max_abs_velocity_after_stop"]:.3g} after it)'
               if 'max_abs_velocity_after_stop' in s else '') + ', last command '
            f'[{", ".join(f"{x:.4g}" for x in s["last_command"])}]')
        path = self.values['summary_file']
        if path:
            with open(path, 'w', encoding='utf-8') as fh:
                json.dump(s, fh)


def main(args=None) -> int:
    """``ros2 run manip_control mujoco_driver [--ros-args ...]``; ``--help`` lists parameters."""
    if wants_help(args):
        return print_node_help('mujoco_driver', __doc__, driver_specs())
    return run_node(MujocoDriverNode, args)


if __name__ == '__main__':
    sys.exit(main())
