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
A fake hardware driver for the fault-injection tests (a test helper, not a test module).

Integrates the core plant (the default arm, ideal actuators clamped to 89 / 25 N m) in real
time at ``--rate``, publishes ``/joint_states`` (wall-clock stamps, the configured joints
plus extra ones, effort = the applied torque) and holds the last ``Float64MultiArray`` from
``/effort_controller/commands`` like ros2_control's ForwardCommandController (zero before the
first one; the newest command that arrived, never a backlog of older ones: a starved
driver that applied its queue in order would close the loop through a delay of its own
making). Faults on signals:

* ``SIGUSR1``: freeze -- from now on re-send the last JointState unchanged (same stamp);
* ``SIGUSR2``: one bad sample -- the next state carries ``q + --spike`` (the plant itself is
  unchanged);
* ``SIGHUP``: a step of the driver's clock -- from now on the stamps are ``--clock-step``
  seconds later (negative: earlier), as when NTP steps the driver's clock.

Above 500 Hz the states are published by a thread on an absolute schedule (an rclpy timer
does not keep such rates). ``--loss p`` drops each state with probability ``p`` (seeded by
``--seed``; the plant still steps: a lossy link, not a slow driver).

``--rogue`` makes it a rogue source instead: a constant state at ``--q0`` with fresh stamps,
commands logged but never applied. ``--node-name`` names its node.

``--urdf FILE`` drives any serial arm instead of the 2R: the URDF's movable joints, ideal
actuators clamped to its effort limits, no friction (:class:`manip_control.arm_plant.ArmPlant`,
RK4), ``--q0`` one value per joint (default: the middle of every range).

Every received command and every published state is written to ``--log``
(``cmd <monotonic s> <tau per joint>`` and ``seq <n>`` / ``state <monotonic s> <q per joint>
<qd per joint>``). A command's time is when the controller sent it (its DDS source timestamp,
on this host's monotonic clock), not when this process got to it, and ``n`` is its
publication sequence number, so a command this driver never got shows as a gap in ``n``.

    python test/fake_driver.py --rate 500 --q0 -1.5708 0 --log /tmp/driver.log
"""

from __future__ import annotations

import argparse
import math
import random
import signal
import sys
import time


def main(argv=None) -> int:
    """Run the fake driver until SIGINT / SIGTERM."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument('--rate', type=float, default=500.0)
    ap.add_argument('--q0', type=float, nargs='+', default=None)
    ap.add_argument('--urdf', default='', help='drive this arm instead of the 2R')
    ap.add_argument('--extra-joints', type=int, default=4)
    ap.add_argument('--best-effort', action='store_true')
    ap.add_argument('--stamp-offset', type=float, default=0.0,
                    help='added to the wall-clock stamps [s] (a driver on another clock)')
    ap.add_argument('--spike', type=float, nargs='+', default=[4.0, 0.0])
    ap.add_argument('--brake', action='store_true',
                    help='the arm stays still (brakes on) until the first command arrives')
    ap.add_argument('--loss', type=float, default=0.0,
                    help='probability of dropping each state (a lossy link)')
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--clock-step', type=float, default=0.0,
                    help='step of the stamp clock on SIGHUP [s]')
    ap.add_argument('--node-name', default='fake_driver')
    ap.add_argument('--rogue', action='store_true',
                    help='a rogue source: publish a constant fake state at q0 (fresh stamps), '
                         'never apply a command')
    ap.add_argument('--command-delay', type=float, default=0.0,
                    help='subscribe to the commands this long [s] after the states start (a '
                    'driver whose states come before its command reader matches)')
    ap.add_argument('--log', required=True)
    args = ap.parse_args(argv)

    import rclpy
    from rclpy.executors import ExternalShutdownException
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import QoSProfile
    from rclpy.qos import ReliabilityPolicy
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64MultiArray

    from dataclasses import replace

    from manip_control.nodes.common import release_context
    from manip_control.parameters import load_scenario
    from manip_control.plant import Plant

    if args.urdf:
        plant = UrdfPlant(args.urdf, args.q0, 1.0 / args.rate)
        joints = plant.joints
    else:
        pp = replace(load_scenario('seed001').plant, actuator='ideal',
                     initial_position=tuple(args.q0 or (0.0, 0.0)),
                     initial_velocity=(0.0, 0.0), torque_limit=(89.0, 25.0))
        plant = Plant(pp, 1.0 / args.rate)
        joints = ['joint1', 'joint2']
    n = len(joints)
    import threading
    log_file = open(args.log, 'w', buffering=1 << 16)
    log_lock = threading.Lock()

    class _Log:
        # one lock for both threads (a text file object is not thread-safe)
        @staticmethod
        def write(text):
            with log_lock:
                log_file.write(text)

        @staticmethod
        def close():
            with log_lock:
                log_file.close()

    log = _Log()
    state = {'cmd': (0.0,) * n, 'taken': 0, 'freeze': False, 'spike': False, 'last': None,
             'brake': args.brake, 'offset': args.stamp_offset, 'step': False}
    rng = random.Random(args.seed)

    def on_usr1(signum, frame):
        state['freeze'] = True

    def on_usr2(signum, frame):
        state['spike'] = True

    def on_hup(signum, frame):
        state['step'] = True

    stopping = [False]

    def on_stop(signum, frame):
        stopping[0] = True

    signal.signal(signal.SIGUSR1, on_usr1)
    signal.signal(signal.SIGHUP, on_hup)
    signal.signal(signal.SIGUSR2, on_usr2)
    # SIGINT / SIGTERM end the spin here (not rclpy's handler): the commands already queued
    # are still taken and logged, however late a loaded host ran this executor
    from rclpy.signals import SignalHandlerOptions
    signal.signal(signal.SIGINT, on_stop)
    signal.signal(signal.SIGTERM, on_stop)
    rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
    node = rclpy.create_node(args.node_name)
    rel = ReliabilityPolicy.BEST_EFFORT if args.best_effort else ReliabilityPolicy.RELIABLE
    pub = node.create_publisher(JointState, '/joint_states',
                                QoSProfile(depth=10, reliability=rel))

    def on_cmd(msg, info):
        state['taken'] += 1
        if len(msg.data) == n and all(math.isfinite(v) for v in msg.data):
            now = time.monotonic()
            source = (info or {}).get('source_timestamp')
            sent = source * 1e-9 - (time.time() - now) if source else now
            seq = (info or {}).get('publication_sequence_number', 0)
            log.write(f'cmd {sent:.6f} ' + ' '.join(f'{v:.9g}' for v in msg.data)
                      + f'\nseq {seq}\n')

    def on_newest_cmd(msg):
        if len(msg.data) == n and all(math.isfinite(v) for v in msg.data):
            state['cmd'] = tuple(msg.data)
            state['brake'] = False

    def subscribe():
        # a deep reader queue: every command is logged even when this process is starved
        node.create_subscription(Float64MultiArray, '/effort_controller/commands', on_cmd,
                                 QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE))
        # the command applied is the newest that arrived, as ros2_control's realtime buffer
        # gives it: a starved driver skips to it instead of applying a backlog of old ones late
        node.create_subscription(Float64MultiArray, '/effort_controller/commands',
                                 on_newest_cmd,
                                 QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE))
    if args.command_delay <= 0.0:
        subscribe()
    names = list(joints) + [f'extra{k}' for k in range(args.extra_joints)]

    def tick():
        if stopping[0]:
            return
        if state['freeze'] and state['last'] is not None:
            pub.publish(state['last'])
            return
        if not state['brake'] and not args.rogue:
            plant.step(*state['cmd'])
        q, qd = plant.position, plant.velocity
        if state['step']:
            state['step'] = False
            state['offset'] += args.clock_step
            log.write(f'step {time.monotonic():.6f} {args.clock_step:.9g}\n')
        if args.loss > 0.0 and rng.random() < args.loss:
            log.write(f'lost {time.monotonic():.6f}\n')
            return
        m = JointState()
        t = time.time() + state['offset']
        m.header.stamp.sec = int(t)
        m.header.stamp.nanosec = int((t - int(t)) * 1e9)
        m.name = names
        pos = [float(v) for v in q]
        if state['spike']:
            state['spike'] = False
            for j, dq in enumerate(args.spike[:n]):
                pos[j] += dq
        m.position = pos + [0.0] * args.extra_joints
        m.velocity = list(qd) + [0.0] * args.extra_joints
        m.effort = list(plant.joint_torque()) + [0.0] * args.extra_joints
        pub.publish(m)
        state['last'] = m
        log.write(f'state {time.monotonic():.6f} '
                  + ' '.join(f'{v:.9g}' for v in list(pos) + list(qd)) + '\n')

    running = [True]

    def loop():
        # above 500 Hz an rclpy timer does not keep the rate: a thread on an absolute schedule
        # (a late cycle is not made up with a burst, as a real driver's cycle)
        dt = 1.0 / args.rate
        due = time.monotonic()
        while running[0] and rclpy.ok():
            due += dt
            now = time.monotonic()
            if due > now:
                time.sleep(due - now)
            elif now - due > 5 * dt:
                due = now
            try:
                tick()
            except Exception:  # noqa: BLE001 - shutdown race
                if running[0] and rclpy.ok():
                    raise

    from rclpy.clock import Clock
    from rclpy.clock import ClockType
    thread = None
    if args.rate > 500.0:
        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
    else:
        node.create_timer(1.0 / args.rate, tick, clock=Clock(clock_type=ClockType.STEADY_TIME))
    if args.command_delay > 0.0:
        def late_subscribe():
            late.cancel()
            log.write(f'subscribed {time.monotonic():.6f}\n')
            subscribe()
        late = node.create_timer(args.command_delay, late_subscribe,
                                 clock=Clock(clock_type=ClockType.STEADY_TIME))
    ex = SingleThreadedExecutor()
    ex.add_node(node)
    import gc
    # what is built lives as long as the driver: out of the collector's scans (a full
    # collection of a process with the arm model stopped every thread for 100-300 ms)
    gc.collect()
    gc.freeze()
    try:
        while rclpy.ok() and not stopping[0]:
            ex.spin_once(timeout_sec=0.1)
        running[0] = False
        taken, end = -1, time.monotonic() + 1.0
        # drain what is queued: until a round takes nothing (a live publisher: 1 s at most)
        while rclpy.ok() and taken != state['taken'] and time.monotonic() < end:
            taken = state['taken']
            for _ in range(20):
                ex.spin_once(timeout_sec=0.01)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        running[0] = False
        if thread is not None:
            thread.join(1.0)
        log.close()
        node.destroy_node()
        release_context()       # the participant goes now, not in the C library's exit
    return 0


class UrdfPlant:
    """An arm from a URDF with ideal actuators, the 2R plant's interface for this driver."""

    def __init__(self, path: str, q0, period: float):
        import numpy as np

        from manip_control.arm_model import UrdfArm
        from manip_control.arm_plant import ArmPlant

        arm = UrdfArm.from_file(path)
        self.joints = list(arm.joint_names)
        self.n = arm.n
        if q0 is None:
            lim = arm.limits
            q0 = np.where(np.isfinite(lim.lower) & np.isfinite(lim.upper),
                          0.5 * (lim.lower + lim.upper), 0.0)
        if len(q0) != self.n:
            raise SystemExit(f'--q0: {self.n} values for {path} (got {len(q0)})')
        # 4 RK4 sub-steps per period (its rate's period, 2 ms by default), as before the
        # plant's default for ideal actuators without friction became one step
        self._plant = ArmPlant(arm, substeps=4)
        self._limit = self._plant.torque_limit
        self._x = self._plant.initial_state(np.asarray(q0, float))
        self._tau = np.zeros(self.n)
        self._period = period

    def step(self, *tau) -> None:
        import numpy as np
        self._tau = np.clip(np.asarray(tau, float), -self._limit, self._limit)
        self._x = self._plant.step(self._x, self._tau, self._period)

    @property
    def position(self):
        return self._x[:self.n].tolist()

    @property
    def velocity(self):
        return self._x[self.n:2 * self.n].tolist()

    def joint_torque(self):
        return self._tau.tolist()


if __name__ == '__main__':
    sys.exit(main())
