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
Unsteady drivers on the running nodes: state rates, lossy links, clock steps.

Real processes over DDS (the style of ``test_fault_injection.py``): the fake hardware driver
(``test/fake_driver.py``, holds the last command forever, no watchdog) at 100 Hz - 4 kHz, with
random loss, and with a step of its stamp clock; the controller with
``config/hardware_params.yaml`` (real time, ``trigger: state``, default safety settings) and a
hold reference at (0, 0). Run with ``-s`` to see the measured figures (lines starting with
``[driver]``)::

    .venv/bin/python -m pytest -s test/test_driver_faults.py
"""

from __future__ import annotations

import os
from pathlib import Path
import signal
import time

import pytest

rclpy = pytest.importorskip('rclpy')

from test_fault_injection import controller  # noqa: E402, I100
from test_fault_injection import diag_dict  # noqa: E402
from test_fault_injection import driver  # noqa: E402
from test_fault_injection import HOLD_ZERO  # noqa: E402
from test_fault_injection import MAX_STEP  # noqa: E402
from test_fault_injection import max_steps  # noqa: E402
from test_fault_injection import no_traceback  # noqa: E402
from test_fault_injection import read_log  # noqa: E402
from test_fault_injection import read_seqs  # noqa: E402
from test_fault_injection import stop_driver  # noqa: E402
from test_fault_injection import trajectory  # noqa: E402
from test_fault_injection import wait_normal  # noqa: E402

HARDWARE_PARAMS = str(Path(__file__).resolve().parents[1] / 'config' / 'hardware_params.yaml')
#: measurement window of the rate / loss runs [s]
WINDOW = 6.0


def _entries(d: dict) -> int:
    return sum(int(v) for k, v in d.items() if k.startswith('safe_entries.'))


def _count(d: dict, key: str) -> int:
    return int(d.get(key, '0') or 0)


def _run_driver(fi, tmp_path, rate: float, *extra, window: float = WINDOW, during=None):
    """
    Run driver + controller + hold reference; return figures over ``window`` s in normal mode.

    ``during(drv, t)`` is called at the start of the window (a fault to inject).
    """
    procs, make_probe = fi
    probe = make_probe(('diag',))
    log = tmp_path / 'driver.log'
    drv = driver(procs, 'driver', log, '--brake', *extra)
    ctrl = controller(procs, 'controller', '--params-file', HARDWARE_PARAMS)
    trajectory(procs, 'trajectory', '-p', HOLD_ZERO)
    wait_normal(probe, timeout=60.0)
    time.sleep(1.0)
    d0 = probe.last_diag()
    t0 = time.monotonic()
    if during is not None:
        during(drv, t0)
    time.sleep(window)
    t1 = time.monotonic()
    d1 = probe.last_diag()
    diags = [(t, diag_dict(m)) for t, m in probe.get('diag') if t0 <= t <= t1]
    stop_driver(procs, drv)
    no_traceback(procs, ctrl)
    assert ctrl.poll() is None
    cmds, states = read_log(log)
    window_cmds = [(c, n) for c, n in zip(cmds, read_seqs(log)) if t0 <= c[0] <= t1]
    cmds, seqs = [c for c, _ in window_cmds], [n for _, n in window_cmds]
    states = [s for s in states if t0 <= s[0] <= t1]
    text = Path(log).read_text()
    lost = sum(1 for line in text.splitlines() if line.startswith('lost ')
               and t0 <= float(line.split()[1]) <= t1)
    non_normal = sum(1 for _, d in diags if d.get('mode') != 'normal')
    # the driver's own stalls: cycles (published or dropped states) further apart than half
    # the state timeout in use (and than 2.5 periods) -- a Python driver on a loaded machine
    # stalls now and then; with the delivery and scheduling delays of a loaded machine on top,
    # such a stall may end in safe mode (the watchdog working, not chattering)
    timeout = float(d1.get('state_timeout_effective_ms') or 20.0) * 1e-3
    cycles = [float(line.split()[1]) for line in text.splitlines()
              if line.startswith(('state ', 'lost '))]
    cycles = [t for t in cycles if t0 - 0.1 <= t <= t1]
    intervals = [b - a for a, b in zip(cycles, cycles[1:])]
    late = _count(d1, 'watchdog_late') - _count(d0, 'watchdog_late')
    stall = max(0.5 * timeout, 2.5 / rate)
    return {
        'late': late, 'gaps': sum(1 for v in intervals if v > stall),
        'longest_gap': max(intervals, default=0.0),
        'entries': _entries(d1) - _entries(d0),
        'too_old': _count(d1, 'stale_states.too_old') - _count(d0, 'stale_states.too_old'),
        'stale': sum(_count(d1, k) - _count(d0, k) for k in d1 if k.startswith('stale_states.')),
        'rate': len(states) / window, 'lost': lost, 'sent': len(states),
        'cmds': len(cmds), 'steps': max_steps(cmds, seqs),
        'peak': tuple(max((abs(c[j]) for c in cmds), default=0.0) for j in (1, 2)),
        'speed': tuple(max((abs(s[j]) for s in states), default=0.0) for j in (3, 4)),
        'non_normal_diags': non_normal, 'diag': d1, 'diags': diags, 'cmd_list': cmds,
        'seq_list': seqs,
        'log': text,
    }


def _report(name, f):
    print(f'\n[driver] {name}: {f["sent"]} states in {WINDOW:g} s ({f["rate"]:.0f}/s, '
          f'{f["lost"]} dropped; driver stalls longer than half the timeout {f["gaps"]}, longest '
          f'{f["longest_gap"] * 1e3:.1f} ms; controller not scheduled for longer than the '
          f'timeout {f["late"]} times), safe-mode entries {f["entries"]}, states '
          f'refused as not fresh {f["stale"]} (too_old {f["too_old"]}), {f["cmds"]} commands, '
          f'max step '
          f'{f["steps"][0]:.3f} / {f["steps"][1]:.3f} N m, max |qd| {f["speed"][0]:.3f} / '
          f'{f["speed"][1]:.3f} rad/s; measured state period '
          f'{f["diag"].get("state_period_ms", "?")} ms, effective state timeout '
          f'{f["diag"].get("state_timeout_effective_ms", "?")} ms')


@pytest.mark.parametrize('rate', [100.0, 1000.0, 2000.0, 4000.0])
def test_driver_rates_run_without_a_safe_mode_entry(fi, tmp_path, rate):
    """
    A 100 Hz - 4 kHz driver: the newest state is used, no backlog, no safe-mode entry.

    The state timeout is counted in periods of the measured state rate (at least
    ``safety.state_timeout``), so a 100 Hz driver is not stale between two states; the reader
    keeps only the newest state, so a fast driver never builds a queue of old states.
    """
    f = _run_driver(fi, tmp_path, rate, '--rate', str(rate))
    _report(f'{rate:.0f} Hz driver', f)
    _check_steady(f)


def _check_steady(f, allowed=0):
    """
    No safe-mode entry beyond ``allowed`` unless the driver or the controller stalled.

    A stall of the Python driver longer than half the state timeout (its log), or of the
    controller longer than the timeout (its ``watchdog_late``), may end in safe mode on a
    loaded machine: one entry per stall is allowed; anything else is chattering. Refused states
    stay rare (no backlog of old states); every command within the torque-rate limit.
    """
    stalls = f['gaps'] + f['late']
    assert f['entries'] <= allowed + stalls, f['diag']
    assert f['stale'] <= 0.01 * f['sent'] + 5 * stalls, f['stale']
    assert f['steps'][0] <= MAX_STEP[0] and f['steps'][1] <= MAX_STEP[1], f['steps']
    if not stalls:
        # the arm held (the 2 kHz driver of the report: 2.7 rad/s on joint 2 while holding;
        # with friction compensation the hold limit-cycles at about 0.7 rad/s on joint 2)
        assert max(f['speed']) < 1.5, f['speed']


@pytest.mark.parametrize('loss, rate', [(0.05, 1000.0), (0.20, 1000.0), (0.20, 100.0)])
def test_lossy_driver_link(fi, tmp_path, loss, rate):
    """
    A best-effort driver link losing 5 % / 20 % of the states (random, independent).

    5 %: no safe-mode entry. 20 %: at most a few entries (at 100 Hz five states in a row are
    lost with probability 3.2e-4 per state: about one safe-mode episode a minute), every one
    a hold through the torque-rate limit (never unsafe), and the arm stays put.
    """
    f = _run_driver(fi, tmp_path, rate, '--rate', str(rate), '--best-effort', '--loss',
                    str(loss), '--seed', '7')
    _report(f'{rate:.0f} Hz best-effort driver losing {loss:.0%}', f)
    assert f['lost'] > 0.5 * loss * f['sent']
    _check_steady(f, 0 if loss <= 0.05 else 3)


@pytest.mark.parametrize('step', [0.5, -0.5, -0.01])
def test_driver_clock_step_is_one_event_then_control_resumes(fi, tmp_path, step):
    """
    A step of the driver's clock (NTP): one event, the offset re-estimated, control resumed.

    The 1 kHz driver's stamps jump by ``step`` while its states keep arriving: the controller
    reports one clock step in its diagnostics (``clock_steps``, ``clock_last_step_s``),
    re-estimates the offset from a run of consistent states and, after at most one safe-mode
    episode, commands normally again through the resume path (no hold timeout, no latched
    zero torque); every command stays within the torque-rate limit.
    """
    def inject(drv, t):
        os.kill(drv.pid, signal.SIGHUP)

    f = _run_driver(fi, tmp_path, 1000.0, '--rate', '1000', '--clock-step', str(step),
                    window=5.0, during=inject)
    d = f['diag']
    t_step = next(float(line.split()[1]) for line in f['log'].splitlines()
                  if line.startswith('step '))
    steps = _count(d, 'clock_steps')
    # the first normal diagnostics after the step's first non-normal one
    bad = [t for t, x in f['diags'] if t >= t_step and x.get('mode') != 'normal']
    back = [t for t, x in f['diags'] if bad and t > bad[0] and x.get('mode') == 'normal']
    # per command sent (the sequence numbers): a starved driver misses commands the
    # controller's publisher no longer keeps, and a change across them is not one step
    around = [(c, n) for c, n in zip(f['cmd_list'], f['seq_list'])
              if t_step - 0.2 <= c[0] <= t_step + 1.0]
    st = max_steps([c for c, _ in around], [n for _, n in around])
    print(f'\n[driver] driver clock step {step:+g} s at 1 kHz: {steps} clock step(s) reported '
          f'({d.get("clock_last_step_s")} s), offset now {d.get("clock_offset_s")} s; '
          f'safe-mode entries {f["entries"]}, states refused {f["stale"]}, '
          f'{"normal again after %.0f ms" % ((back[0] - bad[0]) * 1e3) if back else "no safe mode" if not bad else "NOT normal again"}; '  # noqa: E501
          f'hold timeouts {d.get("hold_timeouts")}; max step around it {st[0]:.3f} / '
          f'{st[1]:.3f} N m; final mode {d.get("mode")}')
    assert steps == 1, d
    assert abs(float(d['clock_last_step_s']) - step) < 0.01, d
    # normal again after the step's safe-mode episode, never a hold timeout; a later episode
    # (a stall of the Python driver on a loaded machine, counted in the bound below) may still
    # be resuming when the window ends
    assert back or not bad, d
    assert d['hold_timeouts'] == '0', d
    assert d['mode'] == 'normal' or f['entries'] > 1, d
    assert f['entries'] <= 1 + f['gaps'] + f['late'], d
    assert st[0] <= MAX_STEP[0] and st[1] <= MAX_STEP[1], st


# --------------------------------------------------------------------------------------------
# the first control tick after an install

FIRST_TICK = r"""
import json, os, sys, time
t0 = time.perf_counter()
import rclpy
from rclpy.parameter import Parameter
from rclpy.serialization import serialize_message
from sensor_msgs.msg import JointState
from manip_control.nodes.controller_node import ControllerNode
rclpy.init()
node = ControllerNode('controller', parameter_overrides=[
    Parameter('mode', value='realtime'), Parameter('trigger', value='state')])
t_active = time.perf_counter()
published = []
publish = node.publish_command


def timed_publish(*args):
    publish(*args)
    published.append((time.perf_counter(), time.thread_time()))


node.publish_command = timed_publish
ticks = []
for k in range(200):
    m = JointState()
    t = time.time()
    m.header.stamp.sec, m.header.stamp.nanosec = int(t), int((t - int(t)) * 1e9)
    m.name, m.position, m.velocity, m.effort = ['joint1', 'joint2'], [0.0] * 2, [0.0] * 2, []
    raw = serialize_message(m)
    w0, c0 = time.perf_counter(), time.thread_time()
    node.on_joint_state(raw, None)
    if published and published[-1][0] >= w0:
        ticks.append(((published[-1][0] - w0) * 1e3, (published[-1][1] - c0) * 1e3))
    time.sleep(0.001)
print(json.dumps({'start_s': t_active - t0, 'ticks': ticks,
                  'modules': sorted(m for m in ('numba', 'manip_control.kernel')
                                    if m in sys.modules)}))
node.destroy_node()
rclpy.try_shutdown()
"""


def test_first_control_tick_after_a_fresh_install_meets_the_period(ros_env, tmp_path):
    """
    The first control tick of a freshly installed controller meets the 1 ms period.

    A fresh interpreter with an empty numba cache (``NUMBA_CACHE_DIR``) and no byte-code cache
    (``PYTHONPYCACHEPREFIX`` a new directory): the controller (real time, ``trigger: state``)
    configures and activates, then gets joint states; the CPU time from a state's arrival to
    its command being published must be within the period from the very first tick
    (transition logs and diagnostics are sent after the command). The controller uses no
    compiled code (neither numba nor the kernel is imported), so nothing compiles once it is
    active.
    """
    import json
    import subprocess
    env = dict(ros_env, NUMBA_CACHE_DIR=str(tmp_path / 'numba'),
               PYTHONPYCACHEPREFIX=str(tmp_path / 'pycache'))
    os.makedirs(env['NUMBA_CACHE_DIR'])
    out = subprocess.run([__import__('sys').executable, '-c', FIRST_TICK], env=env,
                         capture_output=True, text=True, timeout=120,
                         cwd=str(Path(__file__).resolve().parents[1]))
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    ticks = r['ticks']
    assert len(ticks) > 100
    first_wall, first_cpu = ticks[0]
    later_cpu = sorted(c for _, c in ticks[10:])
    print(f'\n[driver] fresh install (empty numba and byte-code caches): start to active '
          f'{r["start_s"]:.2f} s; first tick {first_cpu:.3f} ms CPU / {first_wall:.3f} ms wall '
          f'from the state to the published command; ticks 10-{len(ticks)}: median '
          f'{later_cpu[len(later_cpu) // 2]:.3f} ms CPU; compiled modules imported: '
          f'{r["modules"] or "none"}; numba cache files: '
          f'{len(os.listdir(env["NUMBA_CACHE_DIR"]))}')
    assert first_cpu <= 1.0, ticks[:5]
    assert r['modules'] == [] and os.listdir(env['NUMBA_CACHE_DIR']) == []


@pytest.mark.parametrize('rate, timeout_ms', [(100.0, 50.0), (1000.0, 20.0)])
def test_frozen_driver_is_still_caught_within_the_timeout_in_use(fi, tmp_path, rate, timeout_ms):
    """
    The timeout in periods of the measured rate keeps the frozen-driver guarantee.

    Default settings (``state_timeout`` 20 ms, 5 periods): a driver that freezes (re-sends
    its last state) puts the controller in safe mode within the timeout in use -- 50 ms at
    100 Hz, 20 ms at 1 kHz -- plus one control period (and the scheduling tolerance of the
    loaded machine); it never becomes normal on the re-sent states.
    """
    import re
    from test_fault_injection import assert_timeout_declared_on_time
    freeze = []

    def inject(drv, t):
        freeze.append(time.monotonic())
        os.kill(drv.pid, signal.SIGUSR1)

    f = _run_driver(fi, tmp_path, rate, '--rate', str(rate), window=1.0, during=inject)
    safe = [(t, x) for t, x in f['diags'] if x.get('reason') == 'state_timeout']
    assert safe, f['diag']
    t_safe, d = safe[0]
    age_ms = float(re.search(r'for ([0-9.]+) ms', d['detail']).group(1))
    used = float(re.search(r'timeout ([0-9.]+) ms', d['detail']).group(1))
    assert all(x.get('mode') != 'normal' for t, x in f['diags'] if t > t_safe)
    print(f'\n[driver] frozen {rate:.0f} Hz driver: safe after {age_ms:.1f} ms without a fresh '
          f'state (timeout in use {used:g} ms; controller), freeze -> safe diagnostics '
          f'{(t_safe - freeze[0]) * 1e3:.1f} ms (probe); never normal again')
    # the timeout in use follows the driver's measured period (a loaded machine slows the
    # Python driver down): max(20 ms, min(5 P, 100 ms)), within the 10 % hysteresis
    period = float(f['diag']['state_period_ms'])
    expect = max(20.0, min(5.0 * period, 100.0))
    assert abs(used - expect) <= 0.11 * expect, (used, period)
    if rate == 100.0:
        assert abs(used - timeout_ms) <= 0.25 * timeout_ms, d['detail']
    # the controller cannot see the freeze before it is scheduled: the first check after the
    # deadline declares it
    assert_timeout_declared_on_time(d)


# --------------------------------------------------------------------------------------------
# a restarted driver: taken up from zero through the rate limit

#: Longest time from the restarted driver's first state to normal commands [s] (a Python
#: driver and controller starting on a loaded 2-core machine; measured figures with ``-s``)
TAKE_UP = 30.0
#: The longest a restarted driver may receive the hold before its zero [s]: the gap between
#: a DDS match and its report (get_subscription_count) on a loaded host
RESTART_GAP = 0.005


@pytest.mark.parametrize('how, named, late_reader', [
    ('kill', True, False), ('kill', False, False), ('stop', False, False), ('kill', True, True)])
def test_restarted_driver_is_taken_up_from_zero(fi, tmp_path, how, named, late_reader):
    """
    A driver killed (SIGKILL) or stopped (SIGSTOP) and a new one started after hold_timeout.

    ``after_hold: gravity``: the controller sends the gravity hold of the last pose while the
    old driver is silent. The new driver holds zero torque before its first command: the first
    command it gets must be zero (within one rate-limit step of it), every later step within
    the torque-rate limit, and it is taken up (normal commands) within :data:`TAKE_UP` of its
    first state, also while the old participant is still on the graph (a stopped process
    stays there and sends nothing; a killed one until its DDS lease ends) and without
    ``state_publisher`` (the silent publisher is not a second source), and the arm does not
    fall while the new one is taken up. ``late_reader``: the new driver subscribes to the
    commands 1 s after its states start (the controller has commanded on its states by then).
    """
    from test_fault_injection import DRIVER_STATE_TIMEOUT
    procs, make_probe = fi
    probe = make_probe(('diag',))
    log = tmp_path / 'driver.log'
    drv = driver(procs, 'driver', log, '--brake')
    extra = ('-p', 'state_publisher:=/fake_driver') if named else ()
    ctrl = controller(procs, 'controller', '-p', 'trigger:=state', '-p',
                      f'safety.state_timeout:={DRIVER_STATE_TIMEOUT}',
                      '-p', 'safety.hold_timeout:=1.0', '-p', 'safety.after_hold:=gravity',
                      '-p', 'safety.gravity_hold_timeout:=60.0', *extra)
    trajectory(procs, 'trajectory', '-p', HOLD_ZERO)
    wait_normal(probe, 60.0)
    time.sleep(1.0)
    t0 = time.monotonic()
    os.kill(drv.pid, signal.SIGKILL if how == 'kill' else signal.SIGSTOP)
    probe.wait_for(lambda: probe.first_diag_after(t0, lambda d: d['reason'] == 'gravity_hold'),
                   20.0, 'the gravity hold after hold_timeout')
    time.sleep(0.5)
    log2 = tmp_path / 'driver2.log'
    t1 = time.monotonic()
    drv2 = driver(procs, 'driver2', log2, '--brake',
                  *(('--command-delay', '1.0') if late_reader else ()))
    t_norm, _ = probe.wait_for(
        lambda: probe.first_diag_after(t1, lambda d: d['mode'] == 'normal'), 90.0,
        'normal with the restarted driver')
    time.sleep(1.0)
    d = probe.last_diag()
    stop_driver(procs, drv2)
    if how == 'stop':
        os.kill(drv.pid, signal.SIGKILL)
    no_traceback(procs, ctrl)
    assert ctrl.poll() is None
    # the publishers the controller saw while taking the new driver up
    on_graph = max(int(x.get('sources.joint_states.publishers') or 0)
                   for t, x in [(t, diag_dict(m)) for t, m in probe.get('diag')]
                   if t1 <= t <= t_norm)
    cmds, states = read_log(log2)
    seqs = read_seqs(log2)
    t_first = states[0][0]
    # DDS reports a reader's match after it has started delivering to it: under load the
    # hold sent in that gap reaches the new driver (docs/safety.md). Bounded here: at most
    # the commands of RESTART_GAP, then zero; everything after within the rate limit
    gap = []
    if abs(cmds[0][1]) > MAX_STEP[0] or abs(cmds[0][2]) > MAX_STEP[1]:
        zero_at = next((k for k, c in enumerate(cmds) if c[1:] == (0.0, 0.0)), len(cmds))
        gap, cmds, seqs = cmds[:zero_at], cmds[zero_at:], seqs[zero_at:]
        assert cmds and cmds[0][0] - gap[0][0] <= RESTART_GAP, (gap[:3], cmds[:2])
    steps = max_steps(cmds, seqs)
    first = cmds[0][1:]
    q_min = min(s[1] for s in states)
    source = ('state_publisher /fake_driver' if named else 'no state_publisher') + (
        ', its command reader 1 s after its states' if late_reader else '')
    print(f'\n[driver] driver {how} ({source}), restarted {t1 - t0:.1f} s later: '
          f'hold commands before the zero {len(gap)}'
          + (f' ({(gap[-1][0] - gap[0][0]) * 1e3:.1f} ms)' if gap else '')
          + '; publishers on the graph '
          f'{on_graph}; first command at the new driver {first[0]:.3f} / {first[1]:.3f} N m, '
          f'max step {steps[0]:.3f} / {steps[1]:.3f} N m (limit {MAX_STEP[0]:.3f} / '
          f'{MAX_STEP[1]:.3f}); normal {t_norm - t_first:.2f} s after its first state; lowest '
          f'q1 {q_min:.3f} rad; safe-mode entries {_entries(d)}')
    assert abs(first[0]) <= MAX_STEP[0] and abs(first[1]) <= MAX_STEP[1], cmds[:3]
    assert steps[0] <= MAX_STEP[0] and steps[1] <= MAX_STEP[1], steps
    assert t_norm - t_first <= TAKE_UP, (t_norm, t_first)
    # the arm does not fall meanwhile: no zero-torque conflict while the dead predecessor
    # is still on the graph (it fell to q1 = -2.9 rad in 2 of 3 runs when it was one; the
    # zero of the take-up and the ramp after it let it sag, -0.51 rad at most seen)
    assert q_min > -1.0, q_min
    if how == 'stop':
        assert on_graph >= 2, on_graph      # the stopped driver was still on the graph
