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
Control-loop runs against ``test/fake_driver.py`` (a test helper, not a test module).

:class:`LoopRun` starts the fake driver (any URDF arm, 1 kHz, holds the last command) and the
controller node in real time (optionally the trajectory node with a sinusoid and busy loops
on the cores), and reads the driver's log: the command times (when the controller sent them)
and the states. Used by ``test/test_control_loop.py`` and ``bench/bench_loop.py``.

Run as a script it is the request client of a storm (a separate process, so that its own
work does not share the controller's process)::

    python test/loop_harness.py list_parameters 100000 /controller
    python test/loop_harness.py set_parameters 50000 /controller
    python test/loop_harness.py change_state 7 /controller     # active -> shutdown

It prints ``sent <monotonic s>`` (``lost <monotonic s>`` for a send that got no reply, see
:data:`RESEND_AFTER`) and ``reply <monotonic s> <what>``.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
import sys
import time

HERE = Path(__file__).resolve().parent
DRIVER = str(HERE / 'fake_driver.py')
FIXTURES = HERE.parents[1] / 'shared' / 'fixtures' / 'urdf'
PANDA = FIXTURES / 'panda.urdf'


def read_driver_log(path, n: int):
    """
    Return ``(cmds, states)`` of a fake-driver log for an ``n``-joint arm.

    ``cmds``: ``[(t, tau...)]`` (t: when the controller sent it, monotonic s);
    ``states``: ``[(t, q..., qd...)]``.
    """
    cmds, states = [], []
    for line in Path(path).read_text().splitlines():
        parts = line.split()
        try:
            if parts and parts[0] == 'cmd' and len(parts) == 2 + n:
                cmds.append(tuple(float(v) for v in parts[1:]))
            elif parts and parts[0] == 'state' and len(parts) == 2 + 2 * n:
                states.append(tuple(float(v) for v in parts[1:]))
        except ValueError:
            continue                # a line cut by the process's end
    return cmds, states


def gaps(cmds, t0: float, t1: float) -> list:
    """Return the intervals between consecutive commands sent within ``[t0, t1]`` [s]."""
    ts = sorted(c[0] for c in cmds if t0 <= c[0] <= t1)
    return [b - a for a, b in zip(ts, ts[1:])]


def max_step(cmds, t0: float, t1: float) -> float:
    """Return the largest change of any joint's torque between consecutive commands [N m]."""
    sel = [c[1:] for c in sorted(cmds) if t0 <= c[0] <= t1]
    return max((max(abs(a - b) for a, b in zip(x, y)) for x, y in zip(sel, sel[1:])),
               default=0.0)


def percentile(values, p: float) -> float:
    """Return the nearest-rank ``p`` percentile of ``values`` (0 when empty)."""
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(math.ceil(p / 100.0 * len(s))) - 1))]


def _yaml_str(text: str) -> str:
    return "'" + text.replace("'", "''").replace('\n', ' ') + "'"


class LoopRun:
    """
    Fake driver + controller (+ trajectory) in real time on an URDF arm.

    Parameters
    ----------
    start : callable(name, args) -> Popen
        Starts a process (``conftest.Processes.start``).
    tmp : Path
        Directory of the parameter file and the driver log.
    urdf : Path
    controller : dict
        Extra controller parameters (YAML values).
    sinusoid : bool
        Start the trajectory node with a sinusoid around the middle of the joint ranges
        (else: the controller holds the first measured position).
    busy : int
        Busy loops to start (``while True: pass``), one process each.
    driver_rate : float
        States per second of the driver [Hz].
    driver_priority : int
        SCHED_FIFO priority of the driver process (``chrt``; 0: normal scheduling), as a
        robot's driver runs.

    """

    def __init__(self, start, tmp: Path, urdf: Path = PANDA, controller: dict | None = None,
                 sinusoid: bool = True, busy: int = 0, driver_rate: float = 1000.0,
                 driver_priority: int = 0):
        from manip_control.arm_model import UrdfArm
        self.start = start
        self.tmp = Path(tmp)
        self.urdf = Path(urdf)
        arm = UrdfArm.from_file(str(urdf))
        self.n = arm.n
        lo, hi = arm.limits.lower, arm.limits.upper
        self.mid = [float(0.5 * (a + b)) if math.isfinite(a) and math.isfinite(b) else 0.0
                    for a, b in zip(lo, hi)]
        self.log = self.tmp / 'driver.log'
        from manip_control.arm_scenario import TORQUE_SWING_TIME
        #: the controller's default torque-rate limit per joint [N m/s]
        self.rate_limit = [float(e) / TORQUE_SWING_TIME for e in arm.limits.effort]
        text = self.urdf.read_text()
        ctrl = {'mode': 'realtime', 'control_rate': 1000.0, 'trigger': 'state',
                'state_publisher': '/fake_driver', **(controller or {})}
        lines = ['/**/controller:', '  ros__parameters:',
                 f'    robot_description: {_yaml_str(text)}']
        lines += [f'    {k}: {v!r}' if isinstance(v, str) else f'    {k}: {v}'
                  for k, v in ctrl.items()]
        amp = [0.2] * self.n
        traj = (f'{{type: sinusoid, amplitude: {amp}, omega: {[2.0] * self.n}, '
                f'offset: {self.mid}}}')
        lines += ['/**/trajectory:', '  ros__parameters:',
                  f'    robot_description: {_yaml_str(text)}', '    mode: realtime',
                  '    control_rate: 1000.0', f'    trajectory: {_yaml_str(traj)}']
        self.params = self.tmp / 'loop_params.yaml'
        self.params.write_text('\n'.join(lines) + '\n')
        self.sinusoid = sinusoid
        self.busy = busy
        self.driver_rate = driver_rate
        self.driver_priority = driver_priority
        self.procs = {}

    def node_args(self, module: str) -> list:
        """Return the command line of a node with the run's parameter file."""
        return [sys.executable, '-m', f'manip_control.nodes.{module}', '--ros-args',
                '--params-file', str(self.params)]

    def run(self):
        """Start the busy loops, the driver, the controller (and the trajectory node)."""
        for k in range(self.busy):
            self.procs[f'busy{k}'] = self.start(f'busy{k}',
                                                [sys.executable, '-c', 'while True: pass'])
        rt = ['chrt', '-f', str(self.driver_priority)] if self.driver_priority else []
        self.procs['driver'] = self.start(
            'driver', [*rt, sys.executable, DRIVER, '--urdf', str(self.urdf), '--rate',
                       str(self.driver_rate), '--extra-joints', '0', '--q0',
                       *map(str, self.mid), '--brake', '--log', str(self.log)])
        self.procs['controller'] = self.start('controller', self.node_args('controller_node'))
        if self.sinusoid:
            self.procs['trajectory'] = self.start('trajectory',
                                                  self.node_args('trajectory_node'))
        return self

    def read(self):
        """Return ``(cmds, states)`` from the driver's log so far."""
        return read_driver_log(self.log, self.n)

    def wait_commands(self, count: int = 2000, timeout: float = 90.0) -> float:
        """Wait until the driver logged ``count`` commands; return the monotonic time."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.log.exists() and self.log.read_text().count('\ncmd ') >= count:
                return time.monotonic()
            for name, p in self.procs.items():
                if p.poll() is not None:
                    raise AssertionError(f'{name} ended (exit {p.returncode})')
            time.sleep(0.2)
        raise AssertionError(f'fewer than {count} commands within {timeout} s')

    def errors(self, cmds, states, t0: float, t1: float) -> dict:
        """Figures of ``[t0, t1]``: largest |q - mid| and |qd| per run, command gaps."""
        st = [s for s in states if t0 <= s[0] <= t1]
        n = self.n
        g = gaps(cmds, t0, t1)
        return {
            'max_dev': max((max(abs(s[1 + j] - self.mid[j]) for j in range(n)) for s in st),
                           default=math.nan),
            'max_speed': max((max(abs(v) for v in s[1 + n:]) for s in st), default=math.nan),
            'gap_p50': percentile(g, 50), 'gap_p99': percentile(g, 99),
            'gap_max': max(g, default=math.inf), 'commands': len(g) + 1 if g else 0,
            'max_step': max_step(cmds, t0, t1),
        }


#: A request without a reply after this long [s] is sent again (at most ATTEMPTS times in
#: all): a client only knows its own side of the match, and a request sent before the
#: server's reader matched this client's writer is dropped unseen (``ros2 lifecycle set``
#: then waits forever). A reply lost after the request was handled shows as a refused or
#: unanswered repeat, never as success.
RESEND_AFTER = 10.0
ATTEMPTS = 4


def _call(cli_node, client, req):
    """Send ``req`` until it is answered; print each send and loss; return the reply or None."""
    import rclpy
    for _ in range(ATTEMPTS):
        print(f'sent {time.monotonic():.6f}', flush=True)
        future = client.call_async(req)
        rclpy.spin_until_future_complete(cli_node, future, timeout_sec=RESEND_AFTER)
        if future.done() and future.result() is not None:
            return future.result()
        client.remove_pending_request(future)
        print(f'lost {time.monotonic():.6f}', flush=True)
    return None


def change_state(transition: int, node: str) -> int:
    """Ask ``node`` for a lifecycle transition; print the send and reply times."""
    import rclpy
    from lifecycle_msgs.srv import ChangeState
    rclpy.init()
    cli_node = rclpy.create_node('lifecycle_client')
    client = cli_node.create_client(ChangeState, f'{node}/change_state')
    if not client.wait_for_service(timeout_sec=30.0):
        print('error: no service', flush=True)
        return 2
    # the server must also have discovered this client's reply reader, or DDS drops the reply
    # (rmw_fastrtps waits at most 100 ms for it): give discovery time on a loaded host
    time.sleep(1.0)
    req = ChangeState.Request()
    req.transition.id = transition
    res = _call(cli_node, client, req)
    print(f'reply {time.monotonic():.6f} '
          f'{"no reply" if res is None else "success" if res.success else "refused"}',
          flush=True)
    cli_node.destroy_node()
    rclpy.try_shutdown()
    return 0


def request(kind: str, count: int, node: str) -> int:
    """Send one oversized parameter request to ``node``; print the send and reply times."""
    if kind == 'change_state':
        return change_state(count, node)
    import rclpy
    from rcl_interfaces.msg import Parameter
    from rcl_interfaces.msg import ParameterType
    from rcl_interfaces.srv import ListParameters
    from rcl_interfaces.srv import SetParameters
    rclpy.init()
    cli_node = rclpy.create_node('storm')
    if kind == 'list_parameters':
        srv = ListParameters
        req = ListParameters.Request(prefixes=[f'p{k}' for k in range(count)], depth=0)
    else:
        srv = SetParameters
        req = SetParameters.Request()
        for k in range(count):
            p = Parameter(name=f'safety.unknown_{k}')
            p.value.type = ParameterType.PARAMETER_DOUBLE
            p.value.double_value = 1.0
            req.parameters.append(p)
    client = cli_node.create_client(srv, f'{node}/{kind}')
    if not client.wait_for_service(timeout_sec=30.0):
        print('error: no service', flush=True)
        return 2
    time.sleep(1.0)     # discovery of this client's reply reader (see change_state)
    res = _call(cli_node, client, req)
    if res is None:
        what = 'no reply'
    elif kind == 'list_parameters':
        what = f'{len(res.result.names)} names'
    else:
        refused = [r.reason for r in res.results if not r.successful]
        what = (f'{len(res.results)} results, {len(refused)} refused: '
                + (refused[0] if refused else ''))
    print(f'reply {time.monotonic():.6f} {what}', flush=True)
    cli_node.destroy_node()
    rclpy.try_shutdown()
    return 0


if __name__ == '__main__':
    os.environ.setdefault('PYTHONUNBUFFERED', '1')
    sys.exit(request(sys.argv[1], int(sys.argv[2]), sys.argv[3]))
