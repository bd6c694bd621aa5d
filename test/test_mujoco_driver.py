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
The MuJoCo driver at process level: ``ros2 launch manip_control hardware.launch.py mujoco:=true``.

The controller and the trajectory node of the package drive an arm simulated by MuJoCo (an
engine the package did not write) through the topics of a ros2_control robot. For the 2R, the
Panda and the xArm 7: a smooth reference (sinusoids inside the joint ranges, period 5 s) for
``RUN`` seconds, then Ctrl-C. Checked: the late RMS tracking error (``q`` of the driver's
joint states against the ``q_d`` the controller used for them, matched by stamp, from 6 s on:
after the start transient, more than one period of the reference) <= 2e-3 rad on every joint
and a fresh command for >= 90 % of the driver's ticks from the first command to the stop
(counted by the driver): the arm is tracked, never lost (a lost arm is off by tenths of a
radian). The goals are tighter (1e-3 rad, 99 %): the error meets its goal in quiet runs,
the command share not on every run: it
is 97.5-99.8 % on most runs, 91.6 % once on the quiet host (65-95 % on a slow host while the
driver's command-taking threads ran at normal scheduling; 89.2 % once in CI while the
controller paced its ticks by arrival). The xArm 7's URDF gives every joint 2-10 N m s/rad of
damping and 1 N m of dry friction, its wrist on an apparent inertia of 1.4e-4 kg m^2: its
joints are tracked through the defaults' ``joint_stiffness`` (docs/theory.md; without it
the wrist wandered by 1e-2 to 6e-2 rad RMS against MuJoCo's softer dry friction). No
velocity- or position-limit safe-mode entry and no hold timeout (the controller's
diagnostics); every process finishes cleanly and the last command the driver holds is zero.
12 s runs keep the three arms near 1 min.

Also: the driver's own refusals (a bad parameter: one line, exit 2; bad commands: counted,
never applied).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
import re
import signal
import subprocess
import sys
import time

from conftest import DOMAIN_ID, judge_real_time, StolenTime, ThreadedProbe
import numpy as np
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
URDF_DIR = ROOT.parent / 'shared' / 'fixtures' / 'urdf'
#: wall seconds of a tracking run after the first command
RUN = 12.0
#: start of the "late" window [s of reference time]
LATE = 6.0
FORBIDDEN = ('Traceback', '[FATAL]', 'process has died')


def _launch(ros2_ws, *args):
    return [ros2_ws.ros2, 'launch', 'manip_control', 'hardware.launch.py', *args]


def _params(ros2_ws, tmp_path: Path, urdf: str, summary: Path) -> Path:
    """Write a params file: the installed one of this arm kind plus the driver's section."""
    share = Path(ros2_ws.run([ros2_ws.ros2, 'pkg', 'prefix', 'manip_control']).stdout.strip())
    name = 'arm_hardware_params.yaml' if urdf else 'hardware_params.yaml'
    data = yaml.safe_load((share / 'share' / 'manip_control' / 'config' / name).read_text())
    if not urdf:
        # the 2R's file holds the home position: a sinusoid instead, period 5 s; and its
        # nominal model is 20 % light on purpose (a demo of model error): the simulated arm's
        # own masses instead, as a user enters the identified parameters of a real arm
        from manip_control.parameters import load_scenario
        arm = load_scenario('default').plant.arm
        data['/**/trajectory']['ros__parameters']['trajectory'] = (
            '{type: sinusoid, amplitude: [0.25, 0.25], omega: [1.2566, 1.2566], '
            'phase: [0.0, 0.785]}')
        data['/**/controller']['ros__parameters'].update(
            {'nominal.arm.m1': arm.m1, 'nominal.arm.m2': arm.m2})
    # the driver at real-time priority, as a robot's driver runs (root here; else a warning)
    data['/**/joint_state_broadcaster'] = {'ros__parameters': {
        'summary_file': str(summary), 'realtime_priority': 50}}
    path = tmp_path / 'params.yaml'
    path.write_text(yaml.safe_dump(data))
    return path


def _tracking(probe: ThreadedProbe, stop_ns: int):
    """RMS and max of ``q - q_d`` from LATE on to the Ctrl-C, matched by stamp; samples."""
    def stamp(m):
        return m.header.stamp.sec * 1_000_000_000 + m.header.stamp.nanosec

    q = {stamp(m): np.array(m.position) for _, m in probe.get('states')}
    cmds = [m for _, m in probe.get('cmds')]
    t0 = stamp(cmds[0])
    # to the Ctrl-C: after it the controller ramps to zero torque and stops tracking
    err = np.array([q[stamp(m)] - np.array(m.position) for m in cmds
                    if stamp(m) in q and stamp(m) - t0 >= LATE * 1e9 and stamp(m) < stop_ns])
    return np.sqrt(np.mean(err ** 2, axis=0)), np.abs(err).max(axis=0), len(err)


def _diag_values(probe: ThreadedProbe) -> dict:
    msgs = [m for _, m in probe.get('diag')]
    assert msgs, 'no controller diagnostics'
    for st in msgs[-1].status:
        return {kv.key: kv.value for kv in st.values}
    return {}


ARMS = {'2r': '', 'panda': 'panda.urdf', 'xarm7': 'xarm7.urdf'}


def _launch_and_stop(ros2_ws, ros2_procs, params: Path, urdf: str, seconds: float, collect):
    """
    ``hardware.launch.py mujoco:=true`` for ``seconds`` after the first command, then Ctrl-C.

    Return ``(collect(probe, stop_ns), text, steal)``: what ``collect`` took from the probe
    of /joint_states, /joint_commands and /controller/diagnostics (``stop_ns``: the Ctrl-C
    on the driver's clock), the launch's output, the steal share of the run (``StolenTime``).
    Asserts a clean exit without a traceback, FATAL or dead process.
    """
    from diagnostic_msgs.msg import DiagnosticArray
    from sensor_msgs.msg import JointState
    probe = ThreadedProbe(DOMAIN_ID, 'mujoco_probe', {
        'states': (JointState, '/joint_states'), 'cmds': (JointState, '/joint_commands'),
        'diag': (DiagnosticArray, '/controller/diagnostics', 100)}, executor='events')
    try:
        p = ros2_procs.start('mujoco_launch', _launch(
            ros2_ws, 'mujoco:=true', f'params_file:={params}',
            *([f'urdf:={urdf}'] if urdf else [])))
        probe.wait_for(lambda: probe.get('cmds'), 120, 'the first /joint_commands')
        stolen = StolenTime()
        time.sleep(seconds)
        steal = stolen.share()
        stop_ns = time.time_ns()                # the driver stamps its states on this clock
        os.killpg(p.pid, signal.SIGINT)                      # Ctrl-C
        rc = ros2_procs.wait(p, 60)
        out, err = ros2_procs.output(p)
        probe.caught_up(('states', 'cmds'))
        got = collect(probe, stop_ns)
    finally:
        probe.close()
    text = out + '\n' + err
    assert rc == 0, text[-5000:]
    for bad in FORBIDDEN:
        assert bad not in text, text[-5000:]
    return got, text, steal


#: tracking runs made before the real-time figures are left unjudged (each one starved)
TRACKING_ATTEMPTS = 3


@pytest.mark.parametrize('arm', list(ARMS))
def test_controller_tracks_the_mujoco_arm(arm, ros2_ws, ros2_procs, tmp_path):
    """
    Computed torque against the MuJoCo arm, launched as for hardware, ended by Ctrl-C.

    On every run: a clean exit of every process, zero torque last, nothing refused, no limit
    reached. On a run that this host's hypervisor did not starve (see ``judge_real_time``):
    the late tracking error within 1e-2 rad and a fresh command at 90 % of the driver's ticks.
    """
    urdf = str(URDF_DIR / ARMS[arm]) if ARMS[arm] else ''
    attempt = [0]

    def run():
        attempt[0] += 1
        run_dir = tmp_path / f'run{attempt[0]}'
        run_dir.mkdir()
        summary = run_dir / 'driver.json'
        params = _params(ros2_ws, run_dir, urdf, summary)
        (rms, peak, samples, diag), text, steal = _launch_and_stop(
            ros2_ws, ros2_procs, params, urdf, RUN,
            lambda probe, stop_ns: (*_tracking(probe, stop_ns), _diag_values(probe)))
        for name in ('controller', 'trajectory', 'mujoco_driver'):
            assert re.search(rf'\[INFO\] \[{name}-\d+\]: process has finished cleanly', text), \
                f'{name} did not finish cleanly:\n{text[-5000:]}'
        s = json.loads(summary.read_text())
        rms_text = ' '.join(f'{x:.1e}' for x in rms)
        print(f'\n[mujoco] {arm}: steal {100 * steal:.2f} %, late RMS [{rms_text}] rad, max '
              f'{peak.max():.2e} rad over {samples} samples; command ratio '
              f'{100 * s["command_ratio"]:.2f} % of {s["ticks_after_first_command"]} ticks '
              f'(to the stop {s["ticks_at_stop"]}), {100 * s["paced_command_ratio"]:.2f} % of '
              f'the {s["paced_ticks"]} paced ones, late restarts {s["late_restarts"]}; '
              f'max |qd| {s["max_abs_velocity"]:.2f} rad/s until the stop, '
              f'{s["max_abs_velocity_after_stop"]:.2f} after it; safe entries '
              f'{({k: v for k, v in diag.items() if k.startswith("safe_entries")})}'
              f', hold timeouts {diag.get("hold_timeouts")}, states not ticked on '
              f'{diag.get("sampled_states")} of {diag.get("fresh_states")}; command answered '
              f'after [0.1 ms bins] {s["answer_histogram_0.1ms"]}')
        assert s['last_command'] == [0.0] * len(s['joints']), s['last_command']
        assert s['refused'] == 0, s
        for reason in ('velocity_limit', 'position_limit'):
            assert int(diag.get(f'safe_entries.{reason}', 0)) == 0, diag
        assert int(diag.get('hold_timeouts', 0)) == 0, diag
        return (s, rms, samples), steal

    s, rms, samples = judge_real_time(run, TRACKING_ATTEMPTS, f'the MuJoCo {arm}')
    assert samples >= 1000, samples
    # twice the goal: 20 runs under two busy loops were at most 1.6e-3 rad (docs/benchmarks.md)
    assert np.all(rms <= 2e-3), rms
    assert s['command_ratio'] >= 0.90, s


def _driver(ros2_ws, procs, *params):
    return procs.start('driver', [ros2_ws.ros2, 'run', 'manip_control', 'mujoco_driver',
                                  '--ros-args', *[a for p in params for a in ('-p', p)]])


@pytest.mark.parametrize('param, needle', [
    ('mass_scale:=[0.0]', 'parameter mass_scale (node joint_state_broadcaster): must be '),
    ('state_rate:=0.0', 'parameter state_rate (node joint_state_broadcaster): '),
    ('reliability:=sometimes', 'parameter reliability (node joint_state_broadcaster): '),
    ('initial_position:=[1.0]', 'parameter initial_position (node joint_state_broadcaster): '
                                'expected 2 finite values'),
    ('robot_description:=<robot name="x"><link name="a"/></robot>',
     'parameter robot_description (node joint_state_broadcaster): '),
])
def test_bad_parameter_is_one_line_and_exit_2(param, needle, ros2_ws, ros2_procs):
    p = _driver(ros2_ws, ros2_procs, param)
    rc = ros2_procs.wait(p, 60)
    out, err = ros2_procs.output(p)
    assert rc == 2, (out, err)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith('error: ' + needle), err


def test_bad_commands_are_refused_and_counted_never_applied(
        ros2_ws, ros2_procs, tmp_path, probe, executor, spin):
    """Wrong length, NaN: refused (counted, logged); the last valid command stays applied."""
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64MultiArray
    summary = tmp_path / 'driver.json'
    probe.sub(JointState, '/joint_states', depth=10)
    pub = probe.pub(Float64MultiArray, '/effort_controller/commands')
    executor.add_node(probe.node)
    p = _driver(ros2_ws, ros2_procs, f'summary_file:={summary}', 'initial_position:=[0.0, 0.0]')
    states = probe.msgs['/joint_states']
    assert spin(executor, 60, until=lambda: states), ros2_procs.output(p)
    # hold the 2R still with its gravity torque, then send bad commands
    from manip_control.mujoco_arm import MujocoArm
    from manip_control.parameters import load_scenario
    from manip_control.urdf import urdf_from_scenario
    g = MujocoArm.from_urdf(urdf_from_scenario(load_scenario('default'))).gravity([0.0, 0.0])
    for _ in range(20):
        pub.publish(Float64MultiArray(data=[float(x) for x in g]))
        spin(executor, 0.05)
    for bad in ([1.0], [math.nan, 0.0], [0.0, math.inf], [1.0, 2.0, 3.0]):
        pub.publish(Float64MultiArray(data=bad))
        spin(executor, 0.2)
    spin(executor, 0.5)
    last = states[-1]
    assert list(last.effort) == pytest.approx(list(g), abs=1e-12), last.effort
    ros2_procs.stop(p)
    s = json.loads(summary.read_text())
    assert s['refused'] == 4, s
    assert s['last_command'] == pytest.approx(list(g), abs=1e-12)
    out, err = ros2_procs.output(p)
    assert 'command refused' in out + err


def test_help_lists_the_parameters():
    done = subprocess.run([sys.executable, '-m', 'manip_control.nodes.mujoco_driver_node',
                           '--help'], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    for name in ('robot_description', 'mass_scale', 'pause_duration', 'loss_probability',
                 'reliability', 'state_rate', 'command_timeout', 'realtime_priority'):
        assert name in done.stdout


def _window_errors(probe: ThreadedProbe, start: float, end: float) -> np.ndarray:
    """``q - q_d`` [rad] for reference time in [start, end) s, matched by stamp: (N, n)."""
    def stamp(m):
        return m.header.stamp.sec * 1_000_000_000 + m.header.stamp.nanosec

    q = {stamp(m): np.array(m.position) for _, m in probe.get('states')}
    cmds = [m for _, m in probe.get('cmds')]
    t0 = stamp(cmds[0])
    return np.array([q[stamp(m)] - np.array(m.position) for m in cmds if stamp(m) in q
                     and start * 1e9 <= stamp(m) - t0 < end * 1e9])


#: the adaptive run: wall seconds after the first command; the payload's pick-up time [s of
#: the driver's ticks, which start before the controller's first command: here 9-14 s of
#: reference time for a start-up of 0-5 s]; the windows judged [s of reference time]
ADAPT_RUN, ADAPT_PAYLOAD_AT = 26.0, 14.0
ADAPT_LEARNT, ADAPT_RECOVERED = (5.0, 9.0), (19.0, 25.0)


def _arm_run(ros2_ws, ros2_procs, tmp_path, controller: dict, driver: dict, seconds: float,
             urdf: str = ''):
    """Launch an arm against the MuJoCo driver: the windows' errors, texts, steal share."""
    params = _params(ros2_ws, tmp_path, urdf, tmp_path / 'driver.json')
    data = yaml.safe_load(params.read_text())
    data['/**/controller']['ros__parameters'].update(controller)
    data['/**/joint_state_broadcaster']['ros__parameters'].update(driver)
    params.write_text(yaml.safe_dump(data))

    def collect(probe, stop_ns):
        windows = [_window_errors(probe, *w) for w in (ADAPT_LEARNT, ADAPT_RECOVERED)]
        cmds = [m.header.stamp for _, m in probe.get('cmds')]
        # what the probe got, for a window short of samples
        seen = (f'[probe] {len(probe.get("states"))} states, {len(cmds)} commands, command '
                f'stamps {cmds[0].sec}-{cmds[-1].sec} s')
        return windows, _diag_values(probe), seen
    (windows, diag, seen), text, steal = _launch_and_stop(ros2_ws, ros2_procs, params, urdf,
                                                          seconds, collect)
    return windows, diag, text + '\n' + seen, steal


#: diagnostics that tell a state timeout's cause (the host's scheduling or the driver's states)
TIMING_DIAGNOSTICS = ('state_timeout_check_gap_ms', 'watchdog_late', 'stale_states',
                      'state_period_ms', 'state_timeout_effective_ms')


def test_adaptive_controller_on_a_heavier_mujoco_arm_picking_up_a_payload(
        ros2_ws, ros2_procs, tmp_path):
    """
    The MuJoCo 2R 20 % heavier than the controller's model, then a 1 kg payload: adaptive.

    The law is told to expect the payload (``adaptation.payload_mass: 1``): without it the
    box of its estimates is too narrow for the 20 % plus the payload, ``G1`` sits on its
    bound after the pick-up and the error stays at 3-7x the baseline's (measured under load).

    Against the perfect-model baseline (computed torque with the simulated arm's own masses,
    no payload; same reference, same windows), in real time against the independent engine:
    the adaptive controller on the wrong model tracks within 2x of it once it has learnt
    (ADAPT_LEARNT) and again after the pick-up (ADAPT_RECOVERED), enters no safe mode,
    refuses no step, and ends cleanly with zero torque.

    Judged per joint on the 90th percentile of ``|q - q_d|`` in each window (the RMS is
    printed beside it): the host's scheduling stalls of a real-time run on two shared cores
    disturb part of a window (in CI a window lost 19 % of its commands and its RMS was ten
    times the baseline's, 2.1e-3 against 2.1e-4 rad), while a law that has not learnt the
    20 % is off in all of its samples (computed torque on the same wrong model, measured:
    p90 0.093 / 0.18 rad against the baseline's 3.3e-4 / 1.2e-3 rad). The errors and the safe
    modes are judged on a pair of runs that this host's hypervisor did not starve (see
    ``judge_real_time``); the clean exit, the zero torque last and the learning on every one.
    """
    attempt = [0]

    def p90(err):
        return np.percentile(np.abs(err), 90, axis=0)

    def fmt(err):
        rms = np.sqrt(np.mean(err ** 2, axis=0))
        return (f"p90 [{' '.join(f'{v:.1e}' for v in p90(err))}] "
                f"RMS [{' '.join(f'{v:.1e}' for v in rms)}]")

    def events(d):
        # what the safety layer did (non-zero counts), for a run that tracked worse than usual
        return {k: v for k, v in d.items() if k.startswith(TIMING_DIAGNOSTICS)
                or (k.startswith(('reference', 'refused', 'resume', 'torque_rate', 'safe_'))
                    and v not in ('', '0', 'false', 'False'))}

    def run():
        attempt[0] += 1
        base_dir = tmp_path / f'baseline{attempt[0]}'
        adapt_dir = tmp_path / f'adaptive{attempt[0]}'
        base_dir.mkdir()
        adapt_dir.mkdir()
        (base_learnt, base_late), base_diag, _, base_steal = _arm_run(
            ros2_ws, ros2_procs, base_dir, {}, {}, ADAPT_RUN)
        (learnt, late), diag, text, steal = _arm_run(
            ros2_ws, ros2_procs, adapt_dir, {'adaptation.enabled': True,
                                             'adaptation.payload_mass': 1.0},
            {'mass_scale': [1.2], 'payload.mass': 1.0, 'payload.at_time': ADAPT_PAYLOAD_AT},
            ADAPT_RUN)
        s = json.loads((adapt_dir / 'driver.json').read_text())
        print(f'\n[mujoco] events: baseline {events(base_diag)}; adaptive {events(diag)}')
        print(f'\n[mujoco] adaptive 2R x1.2 (steal {100 * base_steal:.2f} / '
              f'{100 * steal:.2f} %): |e| per joint [rad], perfect model / adaptive: '
              f'{ADAPT_LEARNT} s: {fmt(base_learnt)} / {fmt(learnt)}; after the 1 kg payload, '
              f'{ADAPT_RECOVERED} s: {fmt(base_late)} / {fmt(late)}; samples '
              f'{len(base_learnt)} {len(base_late)} {len(learnt)} {len(late)}; command ratio '
              f'{100 * s["command_ratio"]:.2f} %; safe entries '
              f'{({k: v for k, v in diag.items() if k.startswith("safe_entries")})} '
              f'{({k: v for k, v in diag.items() if k.startswith(TIMING_DIAGNOSTICS)})}; '
              f'fallbacks {diag.get("adaptation.fallbacks")}; excited '
              f'{diag.get("adaptation.excited")!r}')
        assert 'payload: 1 kg added' in text and 'adaptation: 10 base parameters' in text, \
            text[-3000:]
        assert diag.get('adaptation') == 'adapting', diag
        assert int(diag.get('adaptation.fallbacks', -1)) == 0, diag
        assert s['last_command'] == [0.0] * len(s['joints']), s['last_command']
        return (base_learnt, base_late, learnt, late, diag, text), max(base_steal, steal)

    base_learnt, base_late, learnt, late, diag, text = judge_real_time(
        run, 2, 'the adaptive MuJoCo 2R')
    assert min(map(len, (base_learnt, base_late, learnt, late))) >= 1000, text[-6000:]
    assert not any(int(v) for k, v in diag.items() if k.startswith('safe_entries.')), diag
    assert np.all(p90(learnt) <= 2.0 * p90(base_learnt)), (p90(learnt), p90(base_learnt))
    assert np.all(p90(late) <= 2.0 * p90(base_late)), (p90(late), p90(base_late))
