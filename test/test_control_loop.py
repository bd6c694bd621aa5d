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
The controller's control loop: nothing stalls it, starvation does not lose the arm, ways out.

Real processes over DDS: ``test/fake_driver.py`` driving the 7-joint Panda fixture at 1 kHz
(holds the last command; SCHED_FIFO 60, as a robot's driver runs), the controller in real time
(control thread at ``realtime.priority`` 50) and the trajectory node (sinusoid), with two busy
loops on the two cores where stated. Command gaps and torque steps are measured from the
driver's log (the times the controller sent each command). Figures: ``bench/bench_loop.py``.
"""

import os
from pathlib import Path
import signal
import subprocess
import sys
import time

import pytest

rclpy = pytest.importorskip('rclpy')

from conftest import HostStalls  # noqa: E402, I100
from loop_harness import LoopRun  # noqa: E402
from loop_harness import PANDA  # noqa: E402

HARNESS = str(Path(__file__).resolve().parent / 'loop_harness.py')
#: Largest gap between two commands allowed around a request storm [s] (a quarter of the
#: 20 ms state timeout).
MAX_STORM_GAP = 0.005

needs_panda = pytest.mark.skipif(not PANDA.exists(), reason=f'fixture {PANDA} is missing')


def _client(procs, name, *args):
    """Run a client of the harness to its end; return ``(sent, reply_time, reply_text)``."""
    p = procs.start(name, [sys.executable, HARNESS, *map(str, args)])
    assert procs.wait(p, 180.0) == 0, procs.output(p)
    out = procs.output(p)[0].splitlines()
    sent = [float(x.split()[1]) for x in out if x.startswith('sent ')]
    lost = sum(x.startswith('lost ') for x in out)
    reply = [x.split(None, 2) for x in out if x.startswith('reply ')]
    assert sent and reply, out
    text = reply[0][2] if len(reply[0]) > 2 else ''
    if lost:
        # a request the server never saw (see loop_harness.RESEND_AFTER): sent again
        print(f'\n[loop] {name}: {lost} of {len(sent)} sends got no reply')
        if lost == len(sent):
            ctrl = [q for q in procs.items if q.name == 'controller']
            tail = procs.output(ctrl[-1])[1][-3000:] if ctrl else ''
            text += f' (controller stderr tail:\n{tail})'
    # the send that was answered (the last one)
    return sent[-1], float(reply[0][1]), text


# -- bounded requests (no ROS graph needed) ---------------------------------------------------
def test_oversized_parameter_requests_are_refused_unread():
    from manip_control.nodes.common import MAX_REQUEST_ENTRIES
    from manip_control.nodes.common import request_refusal
    from rcl_interfaces.msg import Parameter
    from rcl_interfaces.srv import GetParameters
    from rcl_interfaces.srv import ListParameters
    from rcl_interfaces.srv import SetParameters
    n = MAX_REQUEST_ENTRIES
    assert request_refusal(ListParameters.Request(prefixes=['kp'] * n)) == ''
    why = request_refusal(ListParameters.Request(prefixes=['kp'] * (n + 1)))
    assert why.startswith(f'{n + 1} prefixes in one request (at most {n})'), why
    assert 'names' in request_refusal(GetParameters.Request(names=['x'] * 100000))
    assert 'characters' in request_refusal(ListParameters.Request(prefixes=['x' * 70000]))
    req = SetParameters.Request(parameters=[Parameter(name='kp')] * (n + 1))
    assert 'parameters in one request' in request_refusal(req)
    assert request_refusal(SetParameters.Request(parameters=[Parameter(name='kp')])) == ''


def test_use_sim_time_is_refused_while_active(ros_context):
    from manip_control.nodes.controller_node import ControllerNode
    from manip_control.nodes.trajectory_node import TrajectoryNode
    from rclpy.parameter import Parameter
    ctrl = ControllerNode(parameter_overrides=[Parameter('mode', value='lockstep')],
                          context=ros_context)
    traj = TrajectoryNode(parameter_overrides=[Parameter('mode', value='lockstep')],
                          context=ros_context)
    try:
        assert ctrl.safety.supervisor.active
        for node in (ctrl, traj):
            res = node.set_parameters([Parameter('use_sim_time', value=True)])[0]
            assert not res.successful and 'use_sim_time: cannot change' in res.reason, \
                res.reason
            assert node.get_parameter('use_sim_time').value is False
            # the same value again is no change: accepted
            assert node.set_parameters([Parameter('use_sim_time', value=False)])[0].successful
        ctrl.trigger_deactivate()
        assert ctrl.set_parameters([Parameter('use_sim_time', value=True)])[0].successful
    finally:
        ctrl.close()
        ctrl.destroy_node()
        traj.destroy_node()


# -- the control thread against a driver ------------------------------------------------------
def _scheduling(pid: int) -> dict:
    """Return ``{thread name: (policy, priority)}`` of a process (from /proc)."""
    out = {}
    for task in Path(f'/proc/{pid}/task').iterdir():
        try:
            name = (task / 'comm').read_text().strip()
            fields = (task / 'stat').read_text().rsplit(')', 1)[1].split()
        except OSError:
            continue
        # fields after the name: state is [0]; rt_priority is stat field 40, policy 41
        out.setdefault(name, []).append((int(fields[38]), int(fields[37])))
    return out


#: Sends of one storm while the host itself stalls during it (see ``HostStalls``).
STORM_ATTEMPTS = 3


@needs_panda
def test_request_storms_do_not_stall_the_control_loop(procs, tmp_path):
    """
    Parameter request storms on the controller under two busy loops: its loop goes on.

    The requests are taken by the controller's parameter helper process (``parameter_proxy``):
    in the controller's own process, rclpy's conversion of the 100 000-prefix and 50 000-entry
    requests held the interpreter lock, and the control thread, for 14-57 ms under this load.

    The command gaps around each storm stay within the bounds, judged on a storm during which
    the host itself did not stall (``HostStalls``: a probe per CPU above every thread of the
    package; a stall of this host's hypervisor reaches 5 ms, measured here); a storm that met
    one is sent again, at most STORM_ATTEMPTS times. The replies and the refusal of the
    oversized request are checked on every one.
    """
    host = HostStalls(procs, tmp_path)
    run = LoopRun(procs.start, tmp_path, PANDA, busy=2, driver_priority=60).run()
    run.wait_commands(3000)
    time.sleep(1.0)
    ctrl = run.procs['controller']
    sched = _scheduling(ctrl.pid)
    assert (1, 50) in sched.get('control', []), sched          # SCHED_FIFO 50
    events = []
    for kind, count, bound in (('list_parameters', 1000, MAX_STORM_GAP),
                               ('set_parameters', 1000, MAX_STORM_GAP),
                               ('list_parameters', 100000, MAX_STORM_GAP),
                               ('set_parameters', 50000, MAX_STORM_GAP)):
        stalled = []
        for _ in range(STORM_ATTEMPTS):
            sent, replied, text = _client(procs, f'{kind}{count}', kind, count, '/controller')
            time.sleep(1.0)
            stalls = host.within(sent - 0.01, replied + 0.05)
            if not stalls:
                break
            stalled.append(max(length for _, length in stalls))
        events.append((f'{kind} x{count}', sent, replied, text, bound, stalled,
                       len(stalled) == STORM_ATTEMPTS))
    cmds, states = run.read()
    assert ctrl.poll() is None
    report = []
    for name, sent, replied, text, bound, stalled, unjudged in events:
        f = run.errors(cmds, states, sent, replied + 0.05)
        host_text = (f'; the host stalled during {len(stalled)} send(s) before (longest '
                     f'{1e3 * max(stalled):.1f} ms)' if stalled else '')
        report.append((f['gap_max'], bound, unjudged,
                       f'{name}: reply after {1e3 * (replied - sent):.0f} ms ({text}); '
                       f'command gap p50 {f["gap_p50"] * 1e3:.2f} ms, p99 '
                       f'{f["gap_p99"] * 1e3:.2f} ms, max {f["gap_max"] * 1e3:.2f} ms'
                       + host_text + (' (not judged)' if unjudged else '')))
    print('\n[loop] load %.1f\n' % os.getloadavg()[0] + '\n'.join(r[3] for r in report))
    assert 'refused' in events[3][3] and 'at most' in events[3][3], events[3]
    assert events[1][3].startswith('1000 results'), events[1]   # each unknown name answered
    out, err = procs.output(ctrl)
    assert 'list_parameters: 100000 prefixes in one request' in out + err
    assert 'Traceback' not in out + err
    for gap, bound, unjudged, line in report:
        assert unjudged or gap <= bound, line
    if all(r[2] for r in report):
        pytest.skip('no storm judged: the host stalled during every send\n'
                    + '\n'.join(r[3] for r in report))


@needs_panda
def test_starvation_does_not_lose_the_arm(procs, tmp_path):
    """
    Controller stopped 20 / 50 / 200 ms, driver 50 ms, trajectory node 150 ms: tracking goes on.

    The trajectory node's stop outlasts the reference timeout (100 ms): the controller stops
    the reference smoothly and follows it again when it returns.
    """
    run = LoopRun(procs.start, tmp_path, PANDA, busy=2, driver_priority=60).run()
    run.wait_commands(3000)
    time.sleep(1.0)
    events = []
    for who, ms in (('controller', 20), ('controller', 50), ('controller', 200),
                    ('driver', 50), ('trajectory', 150)):
        pid = run.procs[who].pid
        t0 = time.monotonic()
        os.kill(pid, signal.SIGSTOP)
        time.sleep(ms * 1e-3)
        os.kill(pid, signal.SIGCONT)
        events.append((f'{who} stopped {ms} ms', t0, time.monotonic()))
        time.sleep(2.0)
    t_end = time.monotonic()
    cmds, states = run.read()
    lines = []
    for name, t0, t1 in events:
        f = run.errors(cmds, states, t0 - 0.2, t1 + 1.0)
        lines.append(f'{name}: largest command gap {f["gap_max"] * 1e3:.1f} ms, max torque '
                     f'step {f["max_step"]:.2f} N m, max |q - mid| {f["max_dev"]:.3f} rad, '
                     f'max |qd| {f["max_speed"]:.3f} rad/s')
    whole = run.errors(cmds, states, events[0][1] - 1.0, t_end)
    # the long stop: the driver holds the last command for 200 ms, open loop; at the middle
    # of the Panda's ranges joints 1 and 3 are nearly coaxial (smallest eigenvalue of M
    # 0.006 kg m^2), so their counter-rotation drifts fast while nobody commands. What the
    # controller owes: brake what it finds when it runs again.
    _, t0, t1 = events[2]
    at_resume = run.errors(cmds, states, t1 - 0.002, t1 + 0.002)['max_speed']
    after = run.errors(cmds, states, t1 + 0.002, t1 + 1.0)['max_speed']
    settled = run.errors(cmds, states, t1 + 0.3, t1 + 1.0)['max_speed']
    lines.append(f'controller stopped 200 ms: max |qd| {at_resume:.3f} rad/s when it ran '
                 f'again, {after:.3f} after, {settled:.3f} from 0.3 s after')
    print('\n[loop] load %.1f\n' % os.getloadavg()[0] + '\n'.join(lines))
    # the sinusoid is 0.2 rad at 2 rad/s (0.4 rad/s) around the middle of the ranges: the
    # arm stays with it (Panda velocity limits 2.175-2.61 rad/s)
    assert whole['max_dev'] < 0.4, lines
    for name, e0, e1 in events:
        if name != 'controller stopped 200 ms':
            assert run.errors(cmds, states, e0 - 0.2, e1 + 1.0)['max_speed'] < 1.5, lines
    # braked within the few periods the torque-rate limit needs (measured: the first command
    # 1.5 ms after SIGCONT; the speed grew 1.0-1.5x while the braking torque ramped up)
    assert after < max(1.6 * at_resume, 1.5) and settled < 1.0, lines
    late = run.errors(cmds, states, t_end - 1.0, t_end)
    assert late['max_dev'] < 0.3 and late['gap_max'] < 0.05, late
    # never a torque step: the rate limit per elapsed time, from the last command sent
    assert whole['max_step'] <= 2e-3 * max(run.rate_limit) + 1e-6, (whole['max_step'], lines)
    out, err = procs.output(run.procs['controller'])
    assert 'hold_timeout' not in out + err and 'Traceback' not in out + err


@needs_panda
def test_realtime_refused_is_one_warning_and_the_loop_runs(procs, tmp_path):
    # without CAP_SYS_NICE / CAP_IPC_LOCK (and no real-time rlimit) the OS refuses both
    run = LoopRun(procs.start, tmp_path, PANDA, sinusoid=False,
                  controller={'realtime.priority': 40})
    run.node_args = (lambda module, _orig=run.node_args: [
        'setpriv', '--inh-caps=-sys_nice,-ipc_lock', '--bounding-set=-sys_nice,-ipc_lock',
        *_orig(module)])
    run.run()
    run.wait_commands(500)
    ctrl = run.procs['controller']
    out, err = procs.output(ctrl)
    lines = [x for x in (out + err).splitlines() if 'control thread:' in x]
    assert len(lines) == 1 and 'WARN' in lines[0], lines
    assert 'realtime.priority: SCHED_FIFO priority 40 refused' in lines[0], lines
    assert 'normal scheduling' in lines[0], lines
    assert all(p == (0, 0) for p in _scheduling(ctrl.pid).get('control', [])), \
        _scheduling(ctrl.pid)


@needs_panda
def test_shutdown_transition_ramps_to_zero_and_the_process_exits(procs, tmp_path):
    run = LoopRun(procs.start, tmp_path, PANDA).run()
    run.wait_commands(2000)
    time.sleep(0.5)
    ctrl = run.procs['controller']
    sent, replied, text = _client(procs, 'shutdown', 'change_state', 7, '/controller')
    assert text == 'success', text
    code = procs.wait(ctrl, 10.0)
    exited = time.monotonic()
    assert code == 0, procs.output(ctrl)
    time.sleep(0.5)
    cmds, _ = run.read()
    last = max(cmds)
    assert not any(last[1:]), last              # zero is the last command the driver got
    nonzero = [c[0] for c in cmds if any(c[1:])]
    zero_at = min(c[0] for c in cmds if not any(c[1:]) and c[0] > max(nonzero))
    step = run.errors(cmds, [], sent - 1.0, exited)['max_step']
    print(f'\n[loop] shutdown: zero {1e3 * (zero_at - sent):.0f} ms after the request was '
          f'sent ({1e3 * (replied - sent):.0f} ms to the reply), process exit '
          f'{exited - sent:.2f} s after it; max step {step:.2f} N m')
    assert zero_at - sent <= 0.52


@needs_panda
def test_ros2_lifecycle_shutdown_ends_the_process(procs, tmp_path, ros2_ws):
    """The user's way: ``ros2 lifecycle set /controller shutdown`` while active."""
    run = LoopRun(procs.start, tmp_path, PANDA).run()
    run.wait_commands(2000)
    ctrl = run.procs['controller']
    t0 = time.monotonic()
    hung = 0
    done = None
    attempts = []       # (s after t0, outcome, controller running)
    for _ in range(5):
        try:
            done = ros2_ws.run([ros2_ws.ros2, 'lifecycle', 'set', '/controller', 'shutdown'],
                               timeout=30.0)
        except subprocess.TimeoutExpired:
            # the tool waits for the reply without a timeout; its request can go out before
            # the controller's service reader matched it (the tool saw the service listed),
            # and then nobody answers. The controller got nothing: it is still running
            hung += 1
            attempts.append((round(time.monotonic() - t0, 2), 'hung', ctrl.poll() is None))
            assert ctrl.poll() is None, f'the controller exited but the tool got no reply: ' \
                f'{attempts}\n{procs.output(ctrl)[1][-3000:]}'
            continue
        attempts.append((round(time.monotonic() - t0, 2),
                         (done.stdout + done.stderr).strip()[-200:], ctrl.poll() is None))
        # a fresh CLI node may not have discovered the controller yet: it sent nothing
        if 'Node not found' not in done.stderr:
            break
        time.sleep(1.0)
    t_cli = time.monotonic()
    assert done is not None, f'ros2 lifecycle set hung {hung} times'
    assert 'Transitioning successful' in done.stdout, \
        f'attempts (s, outcome, controller running): {attempts}\n' \
        f'controller stderr tail:\n{procs.output(ctrl)[1][-3000:]}'
    code = procs.wait(ctrl, 10.0)
    exited = time.monotonic()
    assert code == 0, procs.output(ctrl)
    time.sleep(0.5)
    cmds, _ = run.read()
    assert not any(max(cmds)[1:]), max(cmds)    # zero is the last command the driver got
    nonzero = max(c[0] for c in cmds if any(c[1:]))
    step = run.errors(cmds, [], t0 - 1.0, exited)['max_step']
    print(f'\n[loop] ros2 lifecycle set shutdown ({hung} hung attempts): the tool took '
          f'{t_cli - t0:.2f} s, last '
          f'non-zero command {nonzero - t0:.2f} s after it started, process exit '
          f'{exited - t0:.2f} s after it; max step {step:.2f} N m')
    assert step <= 2e-3 * max(run.rate_limit) + 1e-6, step
