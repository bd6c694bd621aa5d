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
Fault injection on running nodes: invalid requests, ways out, rogue sources, driver restarts.

Real processes over DDS (the style of ``test_fault_injection.py``) against
``test/fake_driver.py``, which holds the last command forever and has no watchdog, so that a
missing final zero, a torque step or a torque left applied shows in its log. Run with ``-s``
for the figures (lines starting with ``[exits]``)::

    .venv/bin/python -m pytest -s test/test_fault_exits.py

* an invalid lifecycle request (``configure`` while active, unknown ids and labels) and bad
  parameter-service requests on every node: answered, nothing changes, no node ends;
* an unexpected exception in a control callback: a ramp to zero torque, the process lives;
* SIGTERM during the deactivation ramp, SIGINT while holding, the ``shutdown`` transition:
  the last command is zero, reached through the torque-rate limit within ``stop_time``;
* a rogue ``/joint_states`` publisher started before the driver: never normal while two
  publishers are matched, nothing commanded from either; with ``state_publisher`` the
  rogue's states are refused and counted;
* a driver restart longer than ``hold_timeout`` with ``after_hold: gravity``: the arm is held
  and control resumes; a restart within ``hold_timeout``: no torque step at the new driver.
"""

from __future__ import annotations

import math
import os
import signal
import sys
import time

import pytest

rclpy = pytest.importorskip('rclpy')

from test_fault_injection import _change_state  # noqa: E402, I100
from test_fault_injection import controller  # noqa: E402
from test_fault_injection import diag_dict  # noqa: E402
from test_fault_injection import DRIVER  # noqa: E402
from test_fault_injection import DRIVER_RATE  # noqa: E402
from test_fault_injection import HARDWARE  # noqa: E402
from test_fault_injection import HOLD_ZERO  # noqa: E402
from test_fault_injection import lifecycle_client  # noqa: E402
from test_fault_injection import MAX_STEP  # noqa: E402
from test_fault_injection import no_traceback  # noqa: E402
from test_fault_injection import read_log  # noqa: E402
from test_fault_injection import stop_driver  # noqa: E402
from test_fault_injection import trajectory  # noqa: E402
from test_fault_injection import wait_normal  # noqa: E402

FAULTY = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'faulty_controller.py')
STOP_TIME = 1.0                 # safety.stop_time default [s]
# Python processes on a loaded 2-core machine are scheduled late by up to this much
SCHED = 0.3
# the fake driver logs a command when its (Python, starved) executor takes it: at load 10 on
# 2 cores that came up to about 1 s after the controller published it
DRIVER_LAG = 1.5


#: state timeout of the invalid-request test [s]: above the scheduling delays (SCHED) of a
#: loaded machine, so that a state timeout there is a defect, not load
REQUEST_STATE_TIMEOUT = 0.5


def _stamp(msg) -> float:
    return msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9


def driver(procs, name, log, *extra):
    return procs.start(name, [sys.executable, DRIVER, '--log', str(log), '--rate',
                              str(DRIVER_RATE), *extra])


def figures(cmds, t0=-math.inf, t1=math.inf):
    """``(max |tau| per joint, max step per joint, n)`` of the commands in [t0, t1]."""
    sel = [c for c in cmds if t0 <= c[0] <= t1]
    if not sel:
        return (0.0, 0.0), (0.0, 0.0), 0
    peak = tuple(max(abs(c[j]) for c in sel) for j in (1, 2))
    steps = tuple(max((abs(b[j] - a[j]) for a, b in zip(sel, sel[1:])), default=0.0)
                  for j in (1, 2))
    return peak, steps, len(sel)


def safe_entries(d, but=()) -> int:
    return sum(int(v) for k, v in d.items()
               if k.startswith('safe_entries.') and k[len('safe_entries.'):] not in but)


def fmt(pair, unit='N m'):
    return f'{pair[0]:.2f} / {pair[1]:.2f} {unit}'


def start_loop(procs, tmp_path, *ctrl_extra, driver_extra=('--brake',), faulty=False):
    """Driver, controller (trigger state, 50 ms state timeout), hold trajectory; normal."""
    log = tmp_path / 'driver.log'
    drv = driver(procs, 'driver', log, *driver_extra)
    if faulty:
        ctrl = procs.start('controller', [sys.executable, FAULTY, '--ros-args', '-p',
                                          'mode:=realtime', *HARDWARE, *ctrl_extra])
    else:
        ctrl = controller(procs, 'controller', *HARDWARE, *ctrl_extra)
    traj = trajectory(procs, 'trajectory', '-p', HOLD_ZERO)
    return log, drv, ctrl, traj


def assert_ends_with_zero(cmds, t_event, what):
    """Check that the last command is zero, reached through the rate limit; return timing."""
    after = [c for c in cmds if c[0] >= t_event - 0.05]
    assert after, f'{what}: no command around the event'
    assert cmds[-1][1:] == (0.0, 0.0), f'{what}: torque left applied: {cmds[-3:]}'
    _, steps, _ = figures(cmds, t_event - 0.5)
    assert steps[0] <= MAX_STEP[0] and steps[1] <= MAX_STEP[1], (what, steps)
    first_zero = next(c[0] for c in after if c[1:] == (0.0, 0.0))
    return first_zero - t_event, steps


# --------------------------------------------------------------------------------------------
# invalid requests: answered, nothing changes, no node ends


def _param_abuse(probe, node_name):
    """Bad requests on every parameter service of ``node_name``; return how many answered."""
    from rcl_interfaces.msg import Parameter as ParamMsg
    from rcl_interfaces.msg import ParameterType
    from rcl_interfaces.msg import ParameterValue
    from rcl_interfaces.srv import DescribeParameters
    from rcl_interfaces.srv import GetParameters
    from rcl_interfaces.srv import GetParameterTypes
    from rcl_interfaces.srv import ListParameters
    from rcl_interfaces.srv import SetParameters
    from rcl_interfaces.srv import SetParametersAtomically
    names = ['no.such.parameter', '', 'a' * 300, 'kp', 'safety.hold_timeout', 'use_sim_time']
    bad_values = [ParameterValue(type=ParameterType.PARAMETER_STRING, string_value='x'),
                  ParameterValue(type=ParameterType.PARAMETER_DOUBLE_ARRAY,
                                 double_array_value=[float('nan')] * 3),
                  ParameterValue(type=200),
                  ParameterValue(type=ParameterType.PARAMETER_NOT_SET)]
    params = [ParamMsg(name=n, value=v) for n in names for v in bad_values]
    calls = [(GetParameters, 'get_parameters', GetParameters.Request(names=names)),
             (GetParameterTypes, 'get_parameter_types',
              GetParameterTypes.Request(names=names)),
             (DescribeParameters, 'describe_parameters',
              DescribeParameters.Request(names=names)),
             (ListParameters, 'list_parameters',
              ListParameters.Request(prefixes=['', '..', 'x' * 300], depth=2 ** 63)),
             (SetParameters, 'set_parameters', SetParameters.Request(parameters=params)),
             (SetParametersAtomically, 'set_parameters_atomically',
              SetParametersAtomically.Request(parameters=params))]
    answered = 0
    for typ, srv, req in calls:
        cli = probe.node.create_client(typ, f'/{node_name}/{srv}')
        assert cli.wait_for_service(10.0), srv
        probe.call(lambda: cli.call_async(req), f'{node_name} {srv}')
        answered += 1
        probe.node.destroy_client(cli)
    return answered


def _lifecycle_call(probe, transition_id=0, label=''):
    from lifecycle_msgs.srv import ChangeState
    cli = probe.node.create_client(ChangeState, '/controller/change_state')
    assert cli.wait_for_service(10.0)
    req = ChangeState.Request()
    req.transition.id = transition_id
    req.transition.label = label
    res = probe.call(lambda: cli.call_async(req), f'change_state {transition_id} {label!r}',
                     attempts=1, timeout=10.0)
    probe.node.destroy_client(cli)
    return res.success


def test_invalid_requests_are_answered_and_change_nothing(fi, tmp_path):
    """
    Invalid lifecycle and parameter requests: answered, nothing changes, nothing ends.

    ``configure`` (id 1) while active -- what a lifecycle manager or a mistyped service call
    sends -- used to raise RCLError inside the service callback and end the process (the
    driver got a step to zero, then nothing).

    Nothing changes includes the controller's mode: no safe-mode entry for any reason, a
    state timeout included (it used to be excused as the loaded machine's). This loop's state
    timeout is set above the scheduling delays of the loaded machine (:data:`SCHED`), so a
    state timeout here is states not taken for 0.5 s, not load. (An executor held up by a
    request is not seen this way: the controller takes the waiting state before it judges.)
    """
    from lifecycle_msgs.msg import Transition
    procs, make_probe = fi
    probe = make_probe(('diag',))
    log, drv, ctrl, traj = start_loop(procs, tmp_path, '-p',
                                      f'safety.state_timeout:={REQUEST_STATE_TIMEOUT}')
    plant = procs.node('plant', 'plant_node', '-p', 'mode:=realtime', '-r',
                       'joint_states:=/plant_states', '-r',
                       'effort_controller/commands:=/plant_cmds', '-r',
                       'joint_commands:=/plant_jcmds')
    wait_normal(probe, 60.0)
    time.sleep(1.0)
    entries0 = safe_entries(probe.last_diag())
    t0 = time.monotonic()
    invalid = [(Transition.TRANSITION_CONFIGURE, ''), (Transition.TRANSITION_ACTIVATE, ''),
               (Transition.TRANSITION_CLEANUP, ''), (Transition.TRANSITION_UNCONFIGURED_SHUTDOWN,
                                                     ''),
               (99, ''), (255, ''), (0, 'bogus'), (0, 'configure')]
    answers = [_lifecycle_call(probe, i, lab) for i, lab in invalid]
    t1 = time.monotonic()
    answered = sum(_param_abuse(probe, n) for n in ('controller', 'trajectory', 'plant'))
    # diagnostics the controller published (its wall-clock stamp) after the last request
    t_done = time.time() + 0.2
    d = probe.wait_for(lambda: next((diag_dict(m) for _, m in reversed(probe.get('diag'))
                                     if _stamp(m) > t_done), None),
                       30.0, 'controller diagnostics after the requests')
    assert answers == [False] * len(invalid), answers
    for p in (ctrl, traj, plant, drv):
        assert p.poll() is None, procs.output(p)
    assert d['mode'] == 'normal', d
    stop_driver(procs, drv)
    cmds, _ = read_log(log)
    peak, steps, n = figures(cmds, t0 - 0.2, t1 + 0.5)
    late = [c for c in cmds if c[0] > t1 + 0.2]
    print(f'\n[exits] invalid requests: {len(invalid)} invalid ChangeState requests on the '
          f'active controller answered success=false, {answered} bad parameter-service '
          f'requests answered (controller, trajectory, plant); every node alive, still '
          f'normal; around them {n} commands, max |tau| {fmt(peak)}, max step {fmt(steps)}, '
          f'safe-mode entries {safe_entries(d) - entries0}')
    assert late and abs(late[-1][1]) > 20.0, 'the controller stopped commanding'
    assert steps[0] <= MAX_STEP[0] and steps[1] <= MAX_STEP[1], steps
    # no safe mode from the requests, of any reason
    assert safe_entries(d) == entries0, d
    no_traceback(procs, ctrl, traj, plant)
    out, err = procs.output(ctrl)
    assert 'request refused' in out + err


def test_unexpected_exception_in_a_callback_ramps_to_zero(fi, tmp_path):
    """A bug raising in the feedback law: a ramp to zero torque, the process lives."""
    procs, make_probe = fi
    probe = make_probe(('diag',))
    log, drv, ctrl, traj = start_loop(procs, tmp_path, faulty=True)
    wait_normal(probe, 60.0)
    time.sleep(1.0)
    t0 = time.monotonic()
    os.kill(ctrl.pid, signal.SIGUSR1)
    t_err, d = probe.wait_for(
        lambda: probe.first_diag_after(t0, lambda d: d['level'] == 'ERROR'), 5.0,
        'the error reported')
    time.sleep(DRIVER_LAG + 1.0)        # the starved driver takes the ramp late
    alive = ctrl.poll() is None
    stop_driver(procs, drv)
    cmds, _ = read_log(log)
    t_zero, steps = assert_ends_with_zero(cmds, t0, 'exception')
    peak, _, _ = figures(cmds, t0 - 0.1)
    assert alive, procs.output(ctrl)
    assert d['reason'] == 'callback_error', d
    assert t_zero <= STOP_TIME + DRIVER_LAG, t_zero
    print(f'\n[exits] unexpected exception in the feedback law: ERROR callback_error '
          f'{(t_err - t0) * 1e3:.0f} ms after the fault (probe), zero torque at the driver '
          f'{t_zero * 1e3:.0f} ms after it through the rate limit (max step {fmt(steps)}, '
          f'max |tau| {fmt(peak)}); the process lives')


# --------------------------------------------------------------------------------------------
# ways out: the last command is zero, through the rate limit, within stop_time


@pytest.mark.parametrize('way', ['sigterm_during_ramp', 'sigint_holding', 'shutdown'])
def test_every_way_out_ends_with_zero_torque(fi, tmp_path, way):
    from lifecycle_msgs.msg import Transition
    procs, make_probe = fi
    probe = make_probe(('diag',))
    lifecycle_client(probe)
    log, drv, ctrl, traj = start_loop(procs, tmp_path)
    wait_normal(probe, 60.0)
    time.sleep(1.0)
    if way == 'sigterm_during_ramp':
        assert _change_state(probe, Transition.TRANSITION_DEACTIVATE)
        time.sleep(0.3)
        t0 = time.monotonic()
        os.killpg(ctrl.pid, signal.SIGTERM)
    elif way == 'sigint_holding':
        os.kill(drv.pid, signal.SIGUSR1)            # frozen driver: the controller holds
        probe.wait_for(lambda: probe.last_diag().get('reason') == 'state_timeout', 5.0,
                       'the hold')
        time.sleep(0.5)
        t0 = time.monotonic()
        os.killpg(ctrl.pid, signal.SIGINT)
    else:
        t0 = time.monotonic()
        assert _change_state(probe, Transition.TRANSITION_ACTIVE_SHUTDOWN)
    if way != 'shutdown':
        rc = procs.wait(ctrl, 10.0)
        t_exit = time.monotonic() - t0
        assert rc == 0, procs.output(ctrl)
    else:
        time.sleep(STOP_TIME + SCHED)
        t_exit = float('nan')
    time.sleep(DRIVER_LAG)              # the starved driver takes the last commands late
    stop_driver(procs, drv)
    cmds, _ = read_log(log)
    before = figures(cmds, t0 - 0.5, t0)
    t_zero, steps = assert_ends_with_zero(cmds, t0, way)
    print(f'\n[exits] {way}: last command before {fmt(before[0])} (max |tau|), zero at the '
          f'driver {t_zero * 1e3:.0f} ms after the event, max step {fmt(steps)} (limit '
          f'{fmt(MAX_STEP)}), last command {cmds[-1][1:]}, process exit '
          f'{t_exit * 1e3:.0f} ms after the event')
    # the controller ends its ramp within stop_time; the starved Python driver logs later
    assert t_zero <= STOP_TIME + DRIVER_LAG, t_zero
    no_traceback(procs, ctrl)


# --------------------------------------------------------------------------------------------
# sources: a rogue publisher that exists before the driver


ROGUE_Q = ('-0.6', '0.4')


def _rogue(procs, tmp_path, name='rogue'):
    return driver(procs, name, tmp_path / f'{name}.log', '--rogue', '--node-name', name,
                  '--q0', *ROGUE_Q)


def _first_state_time(path):
    return next(s[0] for s in read_log(path)[1])


def test_rogue_before_the_driver_no_state_publisher(fi, tmp_path):
    """
    Without ``state_publisher``: never normal while two publishers are matched.

    A rogue publishes a constant fake state before the driver starts (alone, it is the
    single publisher: trusted -- that is what ``state_publisher`` is for); then the driver:
    normal ends and the commands ramp to zero, nothing derived from either source; the rogue
    leaves: normal with the driver; a second rogue: normal ends once its match is seen.
    """
    procs, make_probe = fi
    probe = make_probe(('diag',))
    _rogue(procs, tmp_path)
    probe.wait_for(lambda: probe.node.count_publishers('/joint_states') >= 1, 60.0, 'rogue')
    ctrl = controller(procs, 'controller', *HARDWARE, '-p', 'safety.hold_timeout:=30.0')
    trajectory(procs, 'trajectory', '-p', HOLD_ZERO)
    wait_normal(probe, 60.0)
    log = tmp_path / 'driver.log'
    driver(procs, 'driver', log, '--brake')
    probe.wait_for(lambda: probe.last_diag().get('sources.joint_states.publishers') == '2',
                   60.0, 'two publishers seen')
    t_both = time.monotonic()
    time.sleep(2.0)
    both = [diag_dict(m) for t, m in probe.get('diag') if t >= t_both]
    # the rogue leaves (a clean exit): its publisher may be gone before its process has ended,
    # and the controller rightly resumes then, so 'both published' ends when the stop begins
    t_stop = time.monotonic()
    stop_driver(procs, procs.items[0])
    t_left = time.monotonic()
    t_norm, _ = probe.wait_for(
        lambda: probe.first_diag_after(t_left, lambda d: d['mode'] == 'normal'), 60.0,
        'normal after the rogue left')
    time.sleep(1.0)
    _rogue(procs, tmp_path, 'rogue2')
    # normal ends: a source conflict, or a state timeout when this process was not scheduled
    # until after the state timeout (it outranks the conflict; every state is refused then)
    t_safe, d = probe.wait_for(
        lambda: probe.first_diag_after(
            t_norm + 1.0, lambda d: d['mode'] != 'normal'
            and d.get('sources.joint_states.publishers') == '2'), 60.0,
        'normal ended by the second rogue')
    time.sleep(1.0)
    d_end = probe.last_diag()
    t_end = time.monotonic()
    for p in procs.items[2:]:
        stop_driver(procs, p)
    cmds, _ = read_log(log)
    t_first = _first_state_time(log)         # the logs are complete once the driver stopped
    t_conf, _ = probe.first_diag_after(
        t_first - 5.0, lambda d: d.get('mode') != 'normal'
        and d.get('sources.joint_states.publishers') == '2') or (math.nan, None)
    t_r2 = _first_state_time(tmp_path / 'rogue2.log')
    # the driver logs a command when it takes it, which under load is long after it was
    # published: judge the commands by their order. Those taken before the rogue was stopped were
    # published before; from the first zero after the driver's start on they must stay zero
    seq = [c for c in cmds if t_first <= c[0] < t_stop]
    k = next((i for i, c in enumerate(seq) if c[1:] == (0.0, 0.0)), None)
    assert k is not None, seq[-5:]
    _, ramp_steps, _ = figures(seq[1:k + 1])           # the ramp down (not its first one)
    peak_both, steps_both, n_both = figures(seq[k:])
    peak2, steps2, _ = figures(cmds, t_r2 - 0.2)
    z = [c[0] for c in cmds if c[0] > t_r2 and c[1:] == (0.0, 0.0)]
    print(f'\n[exits] rogue before the driver, no state_publisher: first state of the driver '
          f'-> safe diagnostics {(t_conf - t_first) * 1e3:.0f} ms (probe); ramp to zero in '
          f'{k} commands, max step {fmt(ramp_steps)}; while both published '
          f'({t_stop - t_both:.1f} s): never normal, then {n_both} commands, max |tau| '
          f'{fmt(peak_both)}; normal {t_norm - t_left:.2f} s '
          f'after the rogue left; a second rogue: safe diagnostics '
          f'{(t_safe - t_r2) * 1e3:.0f} ms after its first message (probe), zero torque at '
          f'the driver {(z[0] - t_r2) * 1e3 if z else float("nan"):.0f} ms after it, max '
          f'step {fmt(steps2)}; safe-mode entries {safe_entries(d_end)}')
    assert all(x.get('mode') != 'normal' for x in both), [x.get('_message') for x in both]
    assert peak_both == (0.0, 0.0), peak_both       # nothing derived from either source
    assert ramp_steps[0] <= MAX_STEP[0] and ramp_steps[1] <= MAX_STEP[1], ramp_steps
    assert steps2[0] <= MAX_STEP[0] and steps2[1] <= MAX_STEP[1], steps2
    # judged up to the stop: an exiting driver may lose its state publisher before its command
    # subscription, and the controller rightly resumes then on the rogue, the one publisher
    # left (as it resumed on the driver when the first rogue left)
    held = [c for c in cmds if c[0] < t_end]
    assert z and held[-1][1:] == (0.0, 0.0), (held[-5:], cmds[-5:])
    # the second rogue: seen and its states refused (the reason shown may be a state timeout:
    # every state is refused during a conflict)
    assert d_end.get('sources.joint_states.publishers') == '2', d_end
    assert d_end.get('mode') != 'normal', d_end
    assert all(diag_dict(m)['mode'] != 'normal' for t, m in probe.get('diag')
               if t_safe < t < t_end)
    no_traceback(procs, ctrl)


def test_rogue_with_state_publisher_refused_and_counted(fi, tmp_path):
    """
    With ``state_publisher:=/fake_driver``: another node's states are refused and counted.

    The rogue first: its states are refused, nothing is commanded; the driver alone: normal;
    a rogue appearing while normal: its states are refused and counted, control goes on
    from the driver's states (the rogue's constant state would command a large torque).
    """
    procs, make_probe = fi
    probe = make_probe(('diag',))
    rogue = _rogue(procs, tmp_path)
    probe.wait_for(lambda: probe.node.count_publishers('/joint_states') >= 1, 20.0, 'rogue')
    ctrl = controller(procs, 'controller', *HARDWARE, '-p', 'state_publisher:=/fake_driver')
    trajectory(procs, 'trajectory', '-p', HOLD_ZERO)
    probe.wait_for(lambda: int(probe.last_diag().get('refused.joint_states.second_source', 0))
                   > 50, 20.0, 'the rogue refused')
    assert all(diag_dict(m).get('mode') != 'normal' for t, m in probe.get('diag'))
    stop_driver(procs, rogue)
    log = tmp_path / 'driver.log'
    drv = driver(procs, 'driver', log, '--brake')
    wait_normal(probe, 60.0)
    time.sleep(1.0)
    n0 = int(probe.last_diag().get('refused.joint_states.second_source', 0))
    entries0 = safe_entries(probe.last_diag())
    rogue2 = _rogue(procs, tmp_path, 'rogue2')
    probe.wait_for(lambda: int(probe.last_diag().get('refused.joint_states.second_source', 0))
                   > n0 + 200, 20.0, 'the second rogue refused')
    time.sleep(1.0)
    d = probe.last_diag()
    stop_driver(procs, rogue2)
    stop_driver(procs, drv)
    cmds, states = read_log(log)
    rogue_cmds, _ = read_log(tmp_path / 'rogue.log')
    t_r2 = _first_state_time(tmp_path / 'rogue2.log')
    peak, steps, n = figures(cmds, t_r2 - 0.2)
    # the rogue never put the controller in safe mode (state timeouts of the loaded machine
    # may: safety.state_timeout is 50 ms against a Python driver)
    assert int(d.get('safe_entries.source_conflict', 0)) == 0, d
    assert all(c[1:] == (0.0, 0.0) for c in rogue_cmds), 'commanded from the rogue'
    assert steps[0] <= MAX_STEP[0] and steps[1] <= MAX_STEP[1], steps
    # how well the arm is held is not asserted: at load 15-25 on 2 cores the 500 Hz Python
    # loop flaps between state_timeout and normal (50 ms state timeout) and can lose the arm,
    # with or without a rogue; the rogue's states are shown unused by the counters above
    q_max = max(abs(s[1]) for s in states if s[0] > t_r2)
    no_traceback(procs, ctrl)
    print(f'\n[exits] state_publisher /fake_driver: the rogue alone refused, nothing '
          f'commanded; with the driver normal; a second rogue while normal: '
          f'{int(d["refused.joint_states.second_source"]) - n0} states refused and counted, '
          f'no source_conflict, safe-mode entries {safe_entries(d) - entries0}, max |tau| '
          f'{fmt(peak)}, max step {fmt(steps)}, max |q1| {q_max:.4f} rad')


# --------------------------------------------------------------------------------------------
# driver restarts


def test_driver_restart_longer_than_hold_timeout_gravity_hold(fi, tmp_path):
    """``after_hold: gravity``: a restart after hold_timeout finds the arm held; resumes."""
    procs, make_probe = fi
    probe = make_probe(('diag',))
    log, drv, ctrl, traj = start_loop(
        procs, tmp_path, '-p', 'safety.hold_timeout:=1.0', '-p', 'safety.after_hold:=gravity',
        '-p', 'safety.gravity_hold_timeout:=20.0', '-p', 'state_publisher:=/fake_driver')
    wait_normal(probe, 60.0)
    time.sleep(1.0)
    t0 = time.monotonic()
    stop_driver(procs, drv)
    probe.wait_for(lambda: probe.first_diag_after(t0, lambda d: d['reason'] == 'gravity_hold'),
                   10.0, 'the gravity hold after hold_timeout')
    time.sleep(0.5)
    log2 = tmp_path / 'driver2.log'
    t1 = time.monotonic()
    drv2 = driver(procs, 'driver2', log2, '--brake')
    t_norm, _ = probe.wait_for(
        lambda: probe.first_diag_after(t1, lambda d: d['mode'] == 'normal'), 90.0,
        'normal with the restarted driver')
    time.sleep(1.0)
    d = probe.last_diag()
    stop_driver(procs, drv2)
    cmds, states = read_log(log2)
    peak, steps, n = figures(cmds)
    q_min = min(s[1] for s in states)
    assert steps[0] <= MAX_STEP[0] and steps[1] <= MAX_STEP[1], steps
    # held, not fallen (latched zero torque: q1 -3.17 rad); the arm sags a little during the
    # 0.1 s of zero torque a restarted driver gets first and under heavy load
    assert q_min > -0.5, q_min
    assert int(d.get('hold_timeouts', 0)) >= 1, d
    no_traceback(procs, ctrl)
    print(f'\n[exits] driver away {t1 - t0:.1f} s (hold_timeout 1 s, after_hold gravity): '
          f'the new driver got the gravity hold, max |tau| {fmt(peak)}, max step {fmt(steps)} '
          f'(from its zero), lowest q1 {q_min:.4f} rad; normal {t_norm - t1:.2f} s after the '
          f'restart; safe-mode entries {safe_entries(d)}')


def test_driver_restart_within_hold_timeout_has_no_torque_step(fi, tmp_path):
    """A restart within hold_timeout: from the new driver's zero, every step within the limit."""
    procs, make_probe = fi
    probe = make_probe(('diag',))
    log, drv, ctrl, traj = start_loop(procs, tmp_path, '-p', 'safety.hold_timeout:=30.0',
                                      '-p', 'state_publisher:=/fake_driver')
    wait_normal(probe, 60.0)
    time.sleep(1.0)
    t0 = time.monotonic()
    stop_driver(procs, drv)
    probe.wait_for(lambda: probe.first_diag_after(t0, lambda d: d['reason'] == 'state_timeout'),
                   10.0, 'the hold')
    log2 = tmp_path / 'driver2.log'
    t1 = time.monotonic()
    drv2 = driver(procs, 'driver2', log2, '--brake')
    t_norm, _ = probe.wait_for(
        lambda: probe.first_diag_after(t1, lambda d: d['mode'] == 'normal'), 90.0,
        'normal with the restarted driver')
    time.sleep(1.0)
    d = probe.last_diag()
    stop_driver(procs, drv2)
    cmds, states = read_log(log2)
    # the driver holds zero before its first command: the first one is a step from zero
    peak, steps, n = figures([(t1, 0.0, 0.0)] + cmds)
    assert steps[0] <= MAX_STEP[0] and steps[1] <= MAX_STEP[1], (steps, cmds[:5])
    no_traceback(procs, ctrl)
    print(f'\n[exits] driver restart within hold_timeout ({t1 - t0:.1f} s away): first '
          f'command at the new driver {fmt(cmds[0][1:])}, max step {fmt(steps)} (from its '
          f'zero; limit {fmt(MAX_STEP)}); normal {t_norm - t1:.2f} s after the restart; '
          f'safe-mode entries {safe_entries(d)}')
