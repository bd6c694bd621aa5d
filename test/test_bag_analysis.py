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
Tests of manip-analyze (manip_control.bag_analysis).

Synthetic runs with known signals,
on the real iiwa fixture (figures recomputed with a plain rosbags loop) and for CLI errors.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
import shutil
import sqlite3
import subprocess
import sys

from manip_control import bag_analysis
from manip_control.bag_analysis import main
from manip_control.bag_analysis import mechanical_energy
from manip_control.bag_io import BagWriter
import numpy as np
import pytest
from rosbags.rosbag2 import Reader
from rosbags.typesys import get_typestore
from rosbags.typesys import Stores

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / '..' / 'shared' / 'fixtures' / 'real_bags' / 'iiwa_effort_humble'
TS = get_typestore(Stores.ROS2_JAZZY)
T = TS.types
JS, F64, JT = ('sensor_msgs/msg/JointState', 'std_msgs/msg/Float64MultiArray',
               'trajectory_msgs/msg/JointTrajectory')
NAMES = ['joint1', 'joint2']


def _time(ns):
    return T['builtin_interfaces/msg/Time'](sec=int(ns) // 10**9, nanosec=int(ns) % 10**9)


def _js(ns, names, pos, vel, eff):
    return bytes(TS.serialize_cdr(T[JS](
        header=T['std_msgs/msg/Header'](stamp=_time(ns), frame_id=''), name=list(names),
        position=np.asarray(pos, float), velocity=np.asarray(vel, float),
        effort=np.asarray(eff, float)), JS))


def _f64(data):
    return bytes(TS.serialize_cdr(T[F64](
        layout=T['std_msgs/msg/MultiArrayLayout'](dim=[], data_offset=0),
        data=np.asarray(data, float)), F64))


def _jt(ns, names, pos, vel):
    pt = T['trajectory_msgs/msg/JointTrajectoryPoint'](
        positions=np.asarray(pos, float), velocities=np.asarray(vel, float),
        accelerations=np.zeros(0), effort=np.zeros(0),
        time_from_start=T['builtin_interfaces/msg/Duration'](sec=0, nanosec=0))
    return bytes(TS.serialize_cdr(T[JT](
        header=T['std_msgs/msg/Header'](stamp=_time(ns), frame_id=''),
        joint_names=list(names), points=[pt]), JT))


def write_run(path: Path, *, stamps, recv, q, qd, tau, ref=None, cmds=None, js_cmds=None,
              motor=None, params=None, storage='mcap', chunk_size=None) -> Path:
    """
    Write a synthetic run.

    ref = (stamps, recv, q_d, qd_d); cmds = (recv, u);
    js_cmds = (stamps, recv, u, q_d, qd_d); motor = (stamps, recv, i, v, i_ref).
    """
    options = {} if chunk_size is None else {'chunk_size': chunk_size}
    with BagWriter(path, storage=storage, **options) as w:
        w.add_topic('/joint_states', JS)
        for k in range(len(stamps)):
            w.write('/joint_states', int(recv[k]), _js(stamps[k], NAMES, q[k], qd[k], tau[k]))
        if ref is not None:
            w.add_topic('/reference', JT)
            for s, r, p, v in zip(*ref):
                w.write('/reference', int(r), _jt(s, NAMES, p, v))
        if cmds is not None:
            w.add_topic('/effort_controller/commands', F64)
            for r, u in zip(*cmds):
                w.write('/effort_controller/commands', int(r), _f64(u))
        if js_cmds is not None:
            w.add_topic('/joint_commands', JS)
            for s, r, u, p, v in zip(*js_cmds):
                w.write('/joint_commands', int(r), _js(s, NAMES, p, v, u))
        if motor is not None:
            w.add_topic('/motor_states', JS)
            for s, r, i, v, ir in zip(*motor):
                w.write('/motor_states', int(r), _js(s, NAMES, i, v, ir))
        if params is not None:
            w.write_params(params)
    return path


ARM = {'m1': 3.0, 'm2': 2.0, 'l1': 1.0, 'l2': 0.8, 'lc1': 0.5, 'lc2': 0.4, 'I1': 0.2,
       'I2': 0.1, 'g0': 9.81, 'plane': 'vertical'}
MOTORS = [{'Jm': 1e-5, 'N': 100.0, 'i_max': 15.0}, {'Jm': 5e-6, 'N': 50.0, 'i_max': 6.0}]


@pytest.fixture(scope='module')
def tracking_run(tmp_path_factory):
    """
    Record a tracking run with known signals.

    3 s at 1 kHz, sinusoidal reference, known error e = q - q_d, F64 commands with a
    clipped joint, motor telemetry, 250 µs command latency.
    """
    n = 3000
    k = np.arange(n)
    t = k / 1000.0
    stamps = 5 * 10**9 + k * 1_000_000
    recv = stamps + 80_000
    q_d = np.column_stack([0.5 * np.sin(2 * np.pi * 0.5 * t), 0.3 * np.cos(2 * np.pi * t)])
    qd_d = np.column_stack([0.5 * np.pi * np.cos(np.pi * t), -0.6 * np.pi * np.sin(2 * np.pi * t)])
    e = np.column_stack([0.01 * np.sin(2 * np.pi * 3 * t), 0.002 + 0.001 * np.cos(10 * np.pi * t)])
    e[2500, 0] = 0.05            # one spike inside the late window
    e[100, 1] = -0.08            # one spike before it
    q = q_d + e
    qd = qd_d + 0.01
    tau = np.column_stack([20 * np.sin(t), 5 * np.cos(3 * t)])
    u = np.column_stack([60 * np.sin(2 * np.pi * t), np.clip(30 * np.sin(4 * np.pi * t), -25, 25)])
    cmd_recv = recv[10:] + 250_000        # first command answers state 10
    cur = u / 7.0
    motor = (stamps, recv + 5_000, cur, 12 * np.tanh(u / 20), cur * 1.01)
    params = {'control_rate': 1000.0, 'late_window_start': 2.0, 'joints': NAMES,
              'controller': {'torque_limit': [89.0, 25.0]},
              'plant': {'arm': ARM, 'motors': MOTORS, 'rotor_inertia': True}}
    path = write_run(tmp_path_factory.mktemp('runs') / 'track', stamps=stamps, recv=recv, q=q,
                     qd=qd, tau=tau, ref=(stamps, recv + 10_000, q_d, qd_d),
                     cmds=(cmd_recv, u[10:]), motor=motor, params=params)
    return {'path': path, 't': t, 'e': e, 'u': u[10:], 'tau': tau, 'qd': qd, 'q': q,
            'cur': cur, 'params': params, 'stamps': stamps, 'recv': recv}


def run_json(args, capsys) -> dict:
    assert main([*args, '--json', '--quiet']) == 0
    return json.loads(capsys.readouterr().out)


def test_tracking_figures_exact(tracking_run, tmp_path, capsys):
    r = tracking_run
    rep = run_json([str(r['path']), '--out', str(tmp_path / 'rep')], capsys)
    assert rep['joints'] == NAMES
    assert rep['topics'] == {'joint_states': '/joint_states',
                             'commands': '/effort_controller/commands',
                             'reference': '/reference', 'motor': '/motor_states'}
    tr = rep['tracking']
    assert tr['available'] and tr['exact_stamp_matches'] == 3000 and tr['interpolated'] == 0
    assert tr['late_window_start_s'] == 2.0 and 'late_window_start' in tr['late_window_source']
    late = r['t'] >= 2.0
    for j, name in enumerate(NAMES):
        ej = r['e'][:, j]
        got = tr['per_joint'][name]
        assert got['rms'] == pytest.approx(math.sqrt(np.mean(ej ** 2)), rel=1e-12, abs=1e-15)
        assert got['max_abs'] == pytest.approx(np.max(np.abs(ej)), rel=1e-12)
        assert got['late_max_abs'] == pytest.approx(np.max(np.abs(ej[late])), rel=1e-12)
        assert got['point_to_point'] is None          # a sinusoid does not end constant
    assert tr['per_joint']['joint1']['late_max_abs'] == pytest.approx(0.05, rel=1e-9)
    assert tr['per_joint']['joint2']['max_abs'] == pytest.approx(0.08, rel=1e-9)
    assert tr['per_joint']['joint2']['late_max_abs'] < 0.0031
    # --transient overrides params.yaml
    rep2 = run_json([str(r['path']), '--out', str(tmp_path / 'rep2'), '--transient', '2.6'],
                    capsys)
    assert rep2['tracking']['per_joint']['joint1']['late_max_abs'] == pytest.approx(
        np.max(np.abs(r['e'][r['t'] >= 2.6, 0])), rel=1e-12)
    assert (tmp_path / 'rep' / 'report.md').is_file()
    for png in ('tracking.png', 'error.png', 'effort.png', 'timing.png'):
        assert (tmp_path / 'rep' / png).stat().st_size > 1000
    on_disk = json.loads((tmp_path / 'rep' / 'report.json').read_text())
    assert on_disk['tracking'] == tr


def test_effort_motor_latency_power(tracking_run, tmp_path, capsys):
    r = tracking_run
    rep = run_json([str(r['path']), '--out', str(tmp_path / 'rep')], capsys)
    ef = rep['commanded_effort']
    assert ef['limit'] == [89.0, 25.0] and 'controller.torque_limit' in ef['limit_source']
    u = r['u']
    for j, name in enumerate(NAMES):
        got = ef['per_joint'][name]
        assert got['peak_abs'] == pytest.approx(np.max(np.abs(u[:, j])), rel=1e-12)
        assert got['rms'] == pytest.approx(math.sqrt(np.mean(u[:, j] ** 2)), rel=1e-12)
    assert ef['per_joint']['joint1']['fraction_at_limit'] == 0.0
    at_limit = np.count_nonzero(np.abs(u[:, 1]) >= 25.0) / len(u)
    assert at_limit > 0.3
    assert ef['per_joint']['joint2']['fraction_at_limit'] == pytest.approx(at_limit, abs=1e-12)
    mo = rep['motor']['per_joint']
    assert mo['joint1']['current_peak_abs'] == pytest.approx(np.max(np.abs(r['cur'][:, 0])))
    assert mo['joint2']['i_max'] == 6.0
    la = rep['timing']['latency']
    assert la['answered_states'] == 2990 and la['unanswered_states'] == 0
    for key in ('p50', 'p99', 'max', 'min'):
        assert la['latency_s'][key] == pytest.approx(250e-6, abs=1e-12)
    tm = rep['timing']['state']
    assert tm['rate_hz'] == pytest.approx(1000.0, rel=1e-12)
    assert tm['gaps'] == 0 and tm['dropped_ticks'] == 0 and tm['jitter_max_s'] < 1e-12
    assert tm['nominal_source'] == 'params.yaml control_rate'
    # power and work with tau from joint_states effort
    p = np.sum(r['tau'] * r['qd'], axis=1)
    pw = rep['power']
    assert pw['peak_w'] == pytest.approx(p.max(), rel=1e-12)
    assert pw['mean_w'] == pytest.approx(p.mean(), rel=1e-12)
    assert pw['work_j'] == pytest.approx(np.trapezoid(p, r['t']), rel=1e-9)
    assert pw['mechanical_energy']['initial_j'] == pytest.approx(
        energy_from_kinematics(r['q'][:1], r['qd'][:1])[0], rel=1e-12)


def energy_from_kinematics(q, qd):
    """T + V from link centre-of-mass velocities (independent of the M(q) formula)."""
    a = ARM
    q1, q2, w1, w2 = q[:, 0], q[:, 1], qd[:, 0], qd[:, 1]
    v1 = a['lc1'] * w1
    x2d = -a['l1'] * np.sin(q1) * w1 - a['lc2'] * np.sin(q1 + q2) * (w1 + w2)
    y2d = a['l1'] * np.cos(q1) * w1 + a['lc2'] * np.cos(q1 + q2) * (w1 + w2)
    jr = [m['Jm'] * m['N'] ** 2 for m in MOTORS]
    kin = (0.5 * a['m1'] * v1 ** 2 + 0.5 * a['I1'] * w1 ** 2
           + 0.5 * a['m2'] * (x2d ** 2 + y2d ** 2) + 0.5 * a['I2'] * (w1 + w2) ** 2
           + 0.5 * jr[0] * w1 ** 2 + 0.5 * jr[1] * w2 ** 2)
    y1 = a['lc1'] * np.sin(q1)
    y2 = a['l1'] * np.sin(q1) + a['lc2'] * np.sin(q1 + q2)
    return kin + a['g0'] * (a['m1'] * y1 + a['m2'] * y2)


def test_mechanical_energy_model_hook():
    rng = np.random.default_rng(0)
    q, qd = rng.normal(size=(50, 2)), rng.normal(size=(50, 2))
    params = {'plant': {'arm': ARM, 'motors': MOTORS}}
    np.testing.assert_allclose(mechanical_energy(params, q, qd), energy_from_kinematics(q, qd),
                               rtol=1e-12)
    assert mechanical_energy(None, q, qd) is None
    assert mechanical_energy(params, np.zeros((3, 7)), np.zeros((3, 7))) is None


def test_point_to_point_settling_overshoot_steady_state(tmp_path, capsys):
    n = 5000
    k = np.arange(n)
    t = k / 1000.0
    stamps = k * 1_000_000
    q_d = np.column_stack([np.where(k >= 1000, 1.0, 0.0), np.full(n, 0.5)])
    q1 = np.zeros(n)
    up = (k >= 1000) & (k <= 1500)
    q1[up] = 1.1 * (t[up] - 1.0) / 0.5
    down = (k > 1500) & (k < 2000)
    q1[down] = 1.1 - 0.1 * (t[down] - 1.5) / 0.5
    q1[k >= 2000] = 1.001
    q = np.column_stack([q1, np.full(n, 0.5)])
    path = write_run(tmp_path / 'p2p', stamps=stamps, recv=stamps + 1000, q=q,
                     qd=np.zeros((n, 2)), tau=np.zeros((n, 2)),
                     ref=(stamps, stamps + 2000, q_d, np.zeros((n, 2))), storage='sqlite3')
    rep = run_json([str(path), '--out', str(tmp_path / 'rep')], capsys)
    tr = rep['tracking']
    assert tr['point_to_point'] is True
    p1 = tr['per_joint']['joint1']['point_to_point']
    assert p1['move_start_s'] == pytest.approx(1.0, abs=1e-12)
    assert p1['amplitude'] == pytest.approx(1.0, abs=1e-12)
    assert p1['overshoot_pct'] == pytest.approx(10.0, rel=1e-9)
    # |q - 1| > 2 % while t < 1.9 on the way down: settled 0.9 s after the move start
    assert p1['settled'] is True
    assert p1['settling_time_s'] == pytest.approx(0.9, abs=1.5e-3)
    assert p1['steady_state_error'] == pytest.approx(0.001, abs=1e-12)
    p2 = tr['per_joint']['joint2']['point_to_point']
    assert p2['settling_time_s'] is None and p2['steady_state_error'] == 0.0
    # the late window defaults to the final 50 % without params.yaml
    assert tr['late_window_start_s'] == pytest.approx(0.5 * 4.999)
    assert rep['commanded_effort']['available'] is False


def test_timing_gaps_jitter_and_joint_state_commands(tmp_path, capsys):
    n_ticks = 3000
    ticks = np.array([k for k in range(n_ticks) if not (1000 <= k <= 1004 or k == 2000)])
    stamps = 10**9 + ticks * 1_000_000
    recv = stamps + 100_000
    recv[[500, 1500]] += 300_000                      # two late deliveries
    n = len(ticks)
    q = np.column_stack([np.sin(ticks / 1000.0), np.cos(ticks / 1000.0)])
    e = 1e-3 * np.column_stack([np.ones(n), -np.ones(n)])
    keep = np.ones(n, bool)
    keep[[7, 8, 9]] = False                           # three ticks without a command
    cmd = (stamps[keep], recv[keep] + 150_000, np.full((keep.sum(), 2), 2.0),
           (q + e)[keep], np.zeros((keep.sum(), 2)))
    path = write_run(tmp_path / 'timing', stamps=stamps, recv=recv, q=q, qd=np.zeros((n, 2)),
                     tau=np.zeros((n, 2)), js_cmds=cmd, params={'control_rate': 1000.0})
    rep = run_json([str(path), '--out', str(tmp_path / 'rep')], capsys)
    assert rep['topics']['commands'] == '/joint_commands'
    st = rep['timing']['state']
    assert st['time_base'] == 'header' and st['count'] == n
    assert st['gaps'] == 2 and st['dropped_ticks'] == 6
    assert st['max_gap_s'] == pytest.approx(6e-3)
    assert [g['t_s'] for g in st['gap_list']] == pytest.approx([0.999, 1.999])
    assert st['jitter_p50_s'] == 0.0 and st['jitter_max_s'] == pytest.approx(5e-3)
    dev = np.abs(np.diff(recv) / 1e9 - 1e-3)
    sr = rep['timing']['state_receive']
    assert sr['jitter_max_s'] == pytest.approx(dev.max(), abs=1e-12)
    assert sr['jitter_p99_s'] == pytest.approx(np.percentile(dev, 99), abs=1e-12)
    assert sr['gaps'] == 2
    la = rep['timing']['latency']
    assert la['matched_commands'] == n - 3 and la['unmatched_commands'] == 0
    assert la['latency_s']['max'] == pytest.approx(150e-6, abs=1e-12)
    assert la['latency_s']['min'] == pytest.approx(150e-6, abs=1e-12)
    # without a /reference, the positions of the JointState commands are q_d
    tr = rep['tracking']
    assert '/joint_commands' in tr['source'] and tr['samples'] == n
    assert tr['exact_stamp_matches'] == n - 3 and tr['interpolated'] == 3
    assert tr['per_joint']['joint1']['rms'] == pytest.approx(1e-3, rel=1e-6)  # 3 interpolated
    # on the receive time base the gaps are still found
    rep_r = run_json([str(path), '--out', str(tmp_path / 'rr'), '--time', 'receive'], capsys)
    assert rep_r['time_base'] == 'receive' and rep_r['timing']['state']['gaps'] == 2


def test_csv_keeps_every_joint_state_row(tracking_run, tmp_path, capsys):
    r = tracking_run
    out = tmp_path / 'rep'
    assert main([str(r['path']), '--out', str(out), '--csv', '--no-plots', '--quiet']) == 0
    assert f'report: {out}' in capsys.readouterr().out
    with open(out / 'timeseries.csv') as fh:
        rows = list(csv.reader(fh))
    header, body = rows[0], rows[1:]
    assert header[:2] == ['t', 'q_joint1']
    for col in ('q_d_joint2', 'e_joint1', 'u_joint2', 'i_joint1', 'v_joint2', 'i_ref_joint1'):
        assert col in header
    # every joint state is a row; the commands start with state 10 (header time base: a
    # command takes its state's stamp), so their cells are empty before it, no other cell is
    assert len(body) == 3000
    u_cols = [header.index('u_joint1'), header.index('u_joint2')]
    for k, row in enumerate(body):
        for c, cell in enumerate(row):
            assert (cell == '') == (k < 10 and c in u_cols), (k, c, cell)
    data = np.array([[float(c) if c else np.nan for c in row] for row in body])
    np.testing.assert_allclose(data[:, 0], r['t'], atol=1e-12)
    np.testing.assert_allclose(data[10:, header.index('u_joint2')], r['u'][:, 1], rtol=1e-9)
    np.testing.assert_allclose(data[:, header.index('e_joint1')], r['e'][:, 0], rtol=1e-8,
                               atol=1e-15)
    assert not (out / 'tracking.png').exists()


def test_summary_and_default_out_for_bare_file(tracking_run, tmp_path, capsys):
    (mcap,) = tracking_run['path'].glob('*.mcap')
    bare = tmp_path / 'copy.mcap'
    bare.write_bytes(mcap.read_bytes())
    assert main([str(bare), '--quiet', '--no-plots']) == 0
    out = capsys.readouterr().out
    assert 'joints (2): joint1, joint2' in out and 'tracking error' in out
    assert (tmp_path / 'copy_report' / 'report.json').is_file()


def _plain_fixture():
    """Independent figures of the iiwa fixture from a plain rosbags loop."""
    ts = get_typestore(Stores.ROS2_HUMBLE)
    states, cmds = [], []
    with Reader(FIXTURE) as reader:
        for c, t, raw in reader.messages():
            if c.topic == '/joint_states':
                m = ts.deserialize_cdr(raw, c.msgtype)
                states.append((t, m.header.stamp.sec * 10**9 + m.header.stamp.nanosec,
                               list(m.name)))
            elif c.topic == '/effort_controller/commands':
                cmds.append((t, list(ts.deserialize_cdr(raw, c.msgtype).data)))
    return states, cmds


def test_iiwa_fixture_report(tmp_path, capsys):
    if not FIXTURE.is_dir():
        pytest.skip(f'fixture {FIXTURE} absent (shared/ must sit beside the project)')
    rep = run_json([str(FIXTURE), '--out', str(tmp_path / 'rep')], capsys)
    states, cmds = _plain_fixture()
    assert rep['joints'] == states[0][2] == [f'joint_a{k}' for k in range(1, 8)]
    assert rep['topics']['joint_states'] == '/joint_states'
    assert rep['topics']['commands'] == '/effort_controller/commands'
    assert rep['topics']['reference'] is None and rep['tracking']['available'] is False
    assert {s['topic'] for s in rep['bag']['skipped']} == {'/dynamic_joint_states'}
    assert rep['bag']['metadata_version'] == 5
    # rates: header stamps for the states, receive times for the commands
    st, cm = rep['timing']['state'], rep['timing']['command']
    assert st['count'] == len(states) == 696 and cm['count'] == len(cmds) == 512
    hs = [s[1] for s in states]
    assert st['rate_hz'] == pytest.approx((len(hs) - 1) / ((hs[-1] - hs[0]) / 1e9), rel=1e-12)
    rs = [s[0] for s in states]
    assert rep['timing']['state_receive']['rate_hz'] == pytest.approx(
        (len(rs) - 1) / ((rs[-1] - rs[0]) / 1e9), rel=1e-12)
    cr = [c[0] for c in cmds]
    assert cm['rate_hz'] == pytest.approx((len(cr) - 1) / ((cr[-1] - cr[0]) / 1e9), rel=1e-12)
    periods = np.diff(rs) / 1e9
    med = float(np.median(periods))
    assert rep['timing']['state_receive']['gaps'] == int(np.sum(periods > 1.5 * med))
    # the stamps are Gazebo sim time (3.5 s over 10 s of wall-clock receive time): no dropped
    # ticks are derived from receive times, the note says why
    assert rep['clocks']['same_clock'] is False
    assert rep['clocks']['header_per_receive_rate'] == pytest.approx(
        (hs[-1] - hs[0]) / (rs[-1] - rs[0]), rel=1e-12)
    assert rep['timing']['state_receive']['dropped_ticks'] is None
    assert rep['timing']['command']['dropped_ticks'] is None
    assert 'different clocks' in ' '.join(rep['notes'])
    assert rep['timing']['state']['dropped_ticks'] == 0
    # effort statistics per joint
    u = np.array([c[1] for c in cmds])
    for j, name in enumerate(rep['joints']):
        got = rep['commanded_effort']['per_joint'][name]
        assert got['peak_abs'] == pytest.approx(max(abs(x) for x in u[:, j]), rel=1e-12)
        assert got['rms'] == pytest.approx(math.sqrt(sum(x * x for x in u[:, j]) / len(u)),
                                           rel=1e-12)
        assert got['fraction_at_limit'] == 'unknown'
    assert rep['commanded_effort']['limit'] == 'unknown'
    # the driver reports no torque: flagged, and the power comes from the commanded effort
    assert rep['measured_effort']['all_zero'] is True
    assert 'effort is zero throughout' in ' '.join(rep['notes'])
    pw = rep['power']
    assert pw['from_commanded_effort'] is True and 'COMMANDED' in pw['torque_source']
    vel = {}
    ts = get_typestore(Stores.ROS2_HUMBLE)
    with Reader(FIXTURE) as reader:
        for c, _, raw in reader.messages():
            if c.topic == '/joint_states':
                m = ts.deserialize_cdr(raw, c.msgtype)
                vel[m.header.stamp.sec * 10**9 + m.header.stamp.nanosec] = list(m.velocity)
    # a command takes the stamp of the latest state received at or before it; each state's
    # torque is the last command with a stamp at or before the state's (zero-order hold)
    cmd_stamps = []
    k = -1
    for recv_c, u in cmds:
        while k + 1 < len(states) and states[k + 1][0] <= recv_c:
            k += 1
        if k >= 0:
            cmd_stamps.append((states[k][1], u))
    cmd_stamps.sort(key=lambda x: x[0])
    powers = []
    i = -1
    for _, stamp, _ in sorted(states, key=lambda s: s[1]):
        while i + 1 < len(cmd_stamps) and cmd_stamps[i + 1][0] <= stamp:
            i += 1
        if i >= 0:
            powers.append(sum(a * b for a, b in zip(cmd_stamps[i][1], vel[stamp])))
    assert pw['peak_w'] == pytest.approx(max(powers), rel=1e-9)
    assert pw['mean_w'] == pytest.approx(sum(powers) / len(powers), rel=1e-9)
    # latency: each state (from the one before the first command, up to the last command)
    # to the next command, when that command arrives before the next state
    lat = []
    first = max(i for i, s in enumerate(rs) if s <= cr[0]) if rs[0] <= cr[0] else 0
    for i in range(first, len(rs)):
        if rs[i] > cr[-1]:
            break
        nxt = next((c for c in cr if c >= rs[i]), None)
        if nxt is not None and (i + 1 == len(rs) or nxt < rs[i + 1]):
            lat.append((nxt - rs[i]) / 1e9)
    la = rep['timing']['latency']
    assert la['answered_states'] == len(lat) > 300
    assert la['latency_s']['mean'] == pytest.approx(sum(lat) / len(lat), rel=1e-9)
    assert la['latency_s']['max'] == pytest.approx(max(lat), rel=1e-12)
    assert la['latency_s']['p50'] == pytest.approx(float(np.median(lat)), rel=1e-12)
    # the fixture directory was left untouched
    assert sorted(p.name for p in FIXTURE.iterdir()) == ['metadata.yaml', 'my_bag_1_0.db3']


def test_fixture_summary_without_out_leaves_fixture_alone(capsys, monkeypatch):
    """
    Without --out, a report that cannot be written is a warning and the summary is printed.

    The write failure is created here (a mocked refusal), whatever the fixture's own mode and
    whoever runs the test: the fixture directory is never written to.
    """
    if not FIXTURE.is_dir():
        pytest.skip(f'fixture {FIXTURE} absent (shared/ must sit beside the project)')
    attempts = []

    def refuse(run, report, out_dir, **kwargs):
        attempts.append(out_dir)
        raise PermissionError(13, 'Permission denied')
    monkeypatch.setattr(bag_analysis, '_writable', lambda path: True)
    monkeypatch.setattr(bag_analysis, 'write_report', refuse)
    before = sorted(p.name for p in FIXTURE.iterdir())
    assert main([str(FIXTURE), '--quiet']) == 0
    captured = capsys.readouterr()
    assert 'joints (7)' in captured.out and '/dynamic_joint_states' in captured.out
    assert 'report not written' in captured.err and attempts == [FIXTURE / 'report']
    assert sorted(p.name for p in FIXTURE.iterdir()) == before


def test_read_only_bag_directory_gets_no_report_even_as_root(tracking_run, tmp_path, capsys):
    """A bag directory without write permission bits is left alone (root ignores the bits)."""
    bag = tmp_path / 'ro'
    shutil.copytree(tracking_run['path'], bag)
    bag.chmod(0o555)
    try:
        assert main([str(bag), '--quiet', '--no-plots']) == 0
        captured = capsys.readouterr()
        assert 'report not written' in captured.err and 'tracking error' in captured.out
        assert not (bag / 'report').exists()
    finally:
        bag.chmod(0o755)


def test_no_test_writes_into_the_shared_fixtures():
    """
    Check that no analysis of a fixture in this suite can write beside ../shared.

    Every call names its own --out, or mocks the write.
    """
    import re
    for path in sorted(Path(__file__).parent.glob('test_*.py')):
        text = path.read_text()
        for m in re.finditer(r'main\(\[str\(FIXTURE\)(?P<rest>[^\]]*)\]', text):
            line = text[:m.start()].count('\n') + 1
            body = text[text.rfind('\ndef ', 0, m.start()):m.start()]
            assert '--out' in m.group('rest') or "'write_report', refuse" in body, \
                f'{path.name}:{line}: the analysis of a fixture without --out'


def test_cli_errors(tmp_path, capsys, tracking_run):
    def err(args):
        code = main([*args, '--quiet'])
        text = capsys.readouterr().err
        assert code == 2
        assert text.startswith('error: ') and 'Traceback' not in text
        return text

    assert str(tmp_path / 'missing') in err([str(tmp_path / 'missing')])
    (tmp_path / 'notes.txt').write_text('x')
    assert 'not a rosbag2 bag' in err([str(tmp_path / 'notes.txt')])
    (tmp_path / 'empty').mkdir()
    assert 'not a rosbag2 bag' in err([str(tmp_path / 'empty')])
    # truncated storage file
    bad = tmp_path / 'bad'
    bad.mkdir()
    (src,) = tracking_run['path'].glob('*.mcap')
    (bad / 'metadata.yaml').write_text((tracking_run['path'] / 'metadata.yaml').read_text())
    (bad / src.name).write_bytes(src.read_bytes()[:20000])
    assert src.name in err([str(bad)])
    # a bag without joint states
    nojs = tmp_path / 'nojs'
    with BagWriter(nojs) as w:
        w.add_topic('/effort_controller/commands', F64)
        w.write('/effort_controller/commands', 1, _f64([1.0]))
    assert 'no joint-state topic' in err([str(nojs)])
    path = str(tracking_run['path'])
    assert 'no topic /nope' in err([path, '--joint-states', '/nope', '--out', str(tmp_path)])
    assert 'expected' in err([path, '--reference', '/joint_states', '--out', str(tmp_path)])
    assert '--torque-limit' in err([path, '--torque-limit', '1,2,3', '--out', str(tmp_path)])
    assert '--rate' in err([path, '--rate', '-5', '--out', str(tmp_path)])
    with pytest.raises(SystemExit) as info:
        main([path, '--time', 'sometimes'])
    assert info.value.code == 2


def test_cli_subprocess_error_exit_code(tmp_path):
    proc = subprocess.run([sys.executable, '-m', 'manip_control.bag_analysis',
                           str(tmp_path / 'no_such_bag')], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.startswith('error: ') and 'no_such_bag' in proc.stderr
    assert 'Traceback' not in proc.stderr and proc.stdout == ''


def test_cli_subprocess_writes_everything_before_it_exits(tracking_run, tmp_path):
    """Run as a program the CLI ends with os._exit: the JSON on a pipe and the files are whole."""
    out = tmp_path / 'rep'
    proc = subprocess.run([sys.executable, '-m', 'manip_control.bag_analysis',
                           str(tracking_run['path']), '--out', str(out), '--json', '--quiet'],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    printed = json.loads(proc.stdout)
    assert printed == json.loads((out / 'report.json').read_text())
    assert len(printed['outputs']['plots']) == 4
    for png in printed['outputs']['plots']:
        assert Path(png).read_bytes().endswith(b'IEND\xaeB`\x82')
    assert (out / 'report.md').read_text().endswith('\n')


def test_topic_overrides_and_disable(tracking_run, tmp_path, capsys):
    rep = run_json([str(tracking_run['path']), '--out', str(tmp_path / 'r'), '--reference',
                    'none', '--motor', 'none', '--torque-limit', '30'], capsys)
    assert rep['topics']['reference'] is None and rep['topic_selection']['reference'] == \
        'disabled'
    assert rep['tracking']['available'] is False and rep['motor']['available'] is False
    assert rep['commanded_effort']['limit'] == [30.0, 30.0]
    assert rep['commanded_effort']['per_joint']['joint2']['fraction_at_limit'] == 0.0


def test_progress_on_long_bags(capsys, monkeypatch):
    monkeypatch.setattr(bag_analysis, 'PROGRESS_MIN_MESSAGES', 10)
    prog = bag_analysis._Progress('reading x', enabled=True)
    for done in (0, 5, 10):
        prog(done, 10)
    prog.done()
    err = capsys.readouterr().err
    assert '\rreading x:   0%' in err and '100%' in err and err.endswith('\n')


def test_float64_command_latency_counts_unanswered_states(tmp_path, capsys):
    """Commands answer every other state only: the odd states are 'unanswered'."""
    n = 1000
    k = np.arange(n)
    stamps = 10**9 + k * 1_000_000
    recv = stamps + 50_000
    z = np.zeros((n, 2))
    answered = k[(k % 2 == 0) & (k >= 100)]            # commands start with state 100
    cmds = (recv[answered] + 300_000, np.ones((len(answered), 2)))
    path = write_run(tmp_path / 'half', stamps=stamps, recv=recv, q=z, qd=z, tau=z, cmds=cmds)
    la = run_json([str(path), '--out', str(tmp_path / 'r')], capsys)['timing']['latency']
    # states 100..998 are in the command span (the last command follows state 998)
    assert la['states_in_command_span'] == 899
    assert la['answered_states'] == len(answered) == 450
    assert la['unanswered_states'] == 449
    assert la['latency_s']['max'] == pytest.approx(300e-6, abs=1e-12)
    assert la['latency_s']['min'] == pytest.approx(300e-6, abs=1e-12)


def test_core_modules_do_not_import_rclpy():
    code = ('import sys, manip_control.bag_io, manip_control.bag_analysis; '
            'sys.exit(1 if "rclpy" in sys.modules else 0)')
    proc = subprocess.run([sys.executable, '-c', code], cwd=ROOT, capture_output=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_plots_titled_unclipped_at_100_dpi(tracking_run, tmp_path, capsys):
    """Four PNGs at 100 dpi with a title line, labels in the margins, data inside the axes."""
    from PIL import Image
    out = tmp_path / 'rep'
    assert main([str(tracking_run['path']), '--out', str(out), '--quiet']) == 0
    capsys.readouterr()
    for name in ('tracking.png', 'error.png', 'effort.png', 'timing.png'):
        img = Image.open(out / name)
        assert img.info['dpi'][0] >= 99.9, name
        dark = np.asarray(img.convert('L')) < 128
        h, w = dark.shape
        assert w >= 900 and h >= 360
        assert dark[:40, w // 4:3 * w // 4].any(), f'{name}: no title'
        assert dark[:, :60].any(), f'{name}: no y labels in the left margin'
        assert dark[-40:, :].any(), f'{name}: no x label at the bottom'
        # nothing touches the image border (no clipped text or lines)
        assert not (dark[0].any() or dark[-1].any() or dark[:, 0].any() or dark[:, -1].any())
    md = (out / 'report.md').read_text()
    assert '![tracking](tracking.png)' in md


def test_nice_ticks_and_labels():
    assert bag_analysis._nice_ticks(0.0, 120.0) == [0.0, 25.0, 50.0, 75.0, 100.0]
    assert bag_analysis._nice_ticks(-0.53, 0.55) == pytest.approx([-0.5, -0.25, 0.0, 0.25, 0.5])
    assert bag_analysis._tick_text([-0.5, -0.25, 0.0, 0.25, 0.5]) == \
        ['-0.50', '-0.25', '0.00', '0.25', '0.50']
    assert bag_analysis._tick_text([0.0, 1.0, 2.0]) == ['0', '1', '2']


# ---------------------------------------------------------------------------------------------
# damaged data, clocks and labels


def test_corrupt_mcap_stops_with_one_line_or_is_marked_with_skip_corrupt(tracking_run,
                                                                         tmp_path, capsys):
    r = tracking_run
    bag = write_run(tmp_path / 'bag', stamps=r['stamps'], recv=r['recv'], q=r['q'],
                    qd=r['qd'], tau=r['tau'], chunk_size=50_000)     # several chunks
    (f,) = bag.glob('*.mcap')
    raw = bytearray(f.read_bytes())
    value = r['q'][1500, 0]
    at = raw.find(np.float64(value).tobytes())
    assert at > 0
    raw[at + 7] ^= 0x40                      # one flipped exponent bit in a position
    f.write_bytes(bytes(raw))
    code = main([str(bag), '--out', str(tmp_path / 'r1'), '--quiet', '--no-plots'])
    err = capsys.readouterr().err
    assert code == 2 and err.count('\n') == 1 and err.startswith('error: ')
    assert 'chunk' in err and 'CRC' in err and 'bag time' in err
    rep = run_json([str(bag), '--out', str(tmp_path / 'r2'), '--skip-corrupt'], capsys)
    (bad,) = rep['bag']['corrupt']
    assert 'chunk' in bad and 'DAMAGED DATA LEFT OUT' in rep['notes'][0]
    assert 0 < rep['timing']['state']['count'] < 3000
    q = rep['measured_effort']['per_joint']['joint1']
    assert q['peak_abs'] <= np.abs(r['tau'][:, 0]).max()


def test_absurd_values_of_a_corrupt_sqlite_file_are_excluded_and_reported(tracking_run,
                                                                          tmp_path, capsys):
    """sqlite3 has no checksums: a flipped exponent bit shows as a reported, excluded value."""
    r = tracking_run
    bag = tmp_path / 'sq'
    write_run(bag, stamps=r['stamps'], recv=r['recv'], q=r['q'], qd=r['qd'], tau=r['tau'],
              storage='sqlite3')
    (db,) = bag.glob('*.db3')
    con = sqlite3.connect(db)
    rowid, data = con.execute('SELECT id, data FROM messages ORDER BY id LIMIT 1 OFFSET 1500'
                              ).fetchone()
    data = bytearray(data)
    at = data.find(np.float64(r['q'][1500, 0]).tobytes())
    assert at > 0
    data[at + 7] ^= 0x40
    con.execute('UPDATE messages SET data = ? WHERE id = ?', (bytes(data), rowid))
    con.commit()
    con.close()
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter('error')          # no numpy RuntimeWarning either
        rep = run_json([str(bag), '--out', str(tmp_path / 'rep')], capsys)
    (pr,) = rep['bag']['data_problems']
    assert pr['topic'] == '/joint_states' and pr['field'] == 'position' and pr['values'] == 1
    assert any('DAMAGED VALUES EXCLUDED' in n for n in rep['notes'])
    eff = rep['measured_effort']['per_joint']['joint1']
    assert eff['rms'] == pytest.approx(math.sqrt(np.mean(r['tau'][:, 0] ** 2)), rel=1e-12)


def test_energy_names_its_clock_and_warns_when_the_clocks_disagree(tmp_path, capsys):
    n = 2000
    k = np.arange(n)
    stamps = 10**9 + k * 1_000_000
    recv = 10**9 + k * 2_000_000                # receive clock runs at half the rate
    t = k / 1000.0
    q = np.column_stack([np.sin(t), np.cos(t)])
    qd = np.column_stack([np.cos(t), -np.sin(t)])
    tau = np.full((n, 2), 2.0)
    path = write_run(tmp_path / 'clk', stamps=stamps, recv=recv, q=q, qd=qd, tau=tau)
    rep = run_json([str(path), '--out', str(tmp_path / 'r')], capsys)
    pw = rep['power']
    assert pw['clock'].startswith('header time') and pw['other_clock'] == 'receive'
    assert pw['work_other_clock_j'] == pytest.approx(2 * pw['work_j'], rel=1e-9)
    assert 'clock_note' in pw and any('receive time it would be' in x for x in rep['notes'])
    rep = run_json([str(path), '--out', str(tmp_path / 'r2'), '--time', 'receive'], capsys)
    assert rep['power']['clock'].startswith('receive time') and 'clock_note' in rep['power']
    # same clocks: no caveat
    path = write_run(tmp_path / 'same', stamps=stamps, recv=stamps + 1000, q=q, qd=qd, tau=tau)
    rep = run_json([str(path), '--out', str(tmp_path / 'r3')], capsys)
    assert 'clock_note' not in rep['power']


def test_tracking_plot_title_names_a_reference_only_when_there_is_one(tracking_run, tmp_path,
                                                                      capsys, monkeypatch):
    titles = []
    real = bag_analysis._Canvas

    class Spy(real):

        def __init__(self, w, h, title):
            titles.append(title)
            super().__init__(w, h, title)
    monkeypatch.setattr(bag_analysis, '_Canvas', Spy)
    assert main([str(tracking_run['path']), '--out', str(tmp_path / 'a'), '--quiet']) == 0
    assert 'reference q_d' in titles[0]
    titles.clear()
    assert main([str(tracking_run['path']), '--out', str(tmp_path / 'b'), '--quiet',
                 '--reference', 'none']) == 0
    capsys.readouterr()
    assert 'reference q_d' not in titles[0] and 'no reference' in titles[0]


def test_joint_states_with_extra_fields_are_analysed(tmp_path, capsys):
    from rosbags.typesys import get_types_from_msg
    definition = TS.generate_msgdef(JS, ros_version=2)[0].replace(
        'float64[] effort', 'float64[] effort\nfloat64[] temperature', 1)
    store = get_typestore(Stores.EMPTY)
    store.register(get_types_from_msg(definition, JS))
    C = store.types
    path = tmp_path / 'extra'
    with BagWriter(path) as w:
        w.add_topic('/joint_states', JS, msgdef=definition)
        for k in range(1000):
            ns = 10**9 + k * 10**6
            msg = C[JS](header=C['std_msgs/msg/Header'](
                stamp=C['builtin_interfaces/msg/Time'](sec=ns // 10**9, nanosec=ns % 10**9),
                frame_id=''), name=NAMES, position=np.array([0.001 * k, 0.0]),
                velocity=np.array([1.0, 0.0]), effort=np.array([2.0, 0.0]),
                temperature=np.array([40.0, 41.0]))
            w.write('/joint_states', ns, bytes(store.serialize_cdr(msg, JS)))
    rep = run_json([str(path), '--out', str(tmp_path / 'r')], capsys)
    assert rep['timing']['state']['count'] == 1000
    assert rep['measured_effort']['per_joint']['joint1']['rms'] == pytest.approx(2.0)


# ---------------------------------------------------------------------------------------------
# joints listed in different orders by different topics (matched by name, never by position)

ABC = ['arm_a', 'arm_b', 'arm_c']
#: per joint, by name: tracking error [rad], commanded effort [N·m], motor current [A]
ERR = {'arm_a': 0.01, 'arm_b': -0.02, 'arm_c': 0.04}
CMD = {'arm_a': 3.0, 'arm_b': -5.0, 'arm_c': 7.0}
AMP = {'arm_a': 1.5, 'arm_b': -2.5, 'arm_c': 4.0}


def _ordered_run(path: Path, orders: dict, switch: int | None = None, f64: bool = False
                 ) -> Path:
    """
    Write three joints that each topic lists in its own order.

    States, commands, reference and motor topics list them in the order ``orders[topic]``
    (after message ``switch``: the reverse of that order).

    Every value is a function of the joint's name (``ERR``, ``CMD``, ``AMP``); with ``f64``
    the commands are a Float64MultiArray in ``orders['cmd']`` order given by params.yaml.
    """
    n = 1000
    k = np.arange(n)
    stamps = 10**9 + k * 1_000_000
    recv = stamps + 50_000
    t = k / 1000.0
    q_d = {nm: (j + 1) * 0.1 * np.sin(2 * np.pi * t) for j, nm in enumerate(ABC)}

    def order(topic, i):
        o = orders[topic]
        return o[::-1] if switch is not None and i >= switch else o
    with BagWriter(path) as w:
        w.add_topic('/joint_states', JS)
        w.add_topic('/reference', JT)
        w.add_topic('/motor_states', JS)
        w.add_topic('/effort_controller/commands' if f64 else '/joint_commands',
                    F64 if f64 else JS)
        for i in range(n):
            o = order('state', i)
            w.write('/joint_states', int(recv[i]), _js(
                stamps[i], o, [q_d[nm][i] + ERR[nm] for nm in o], [0.0] * 3, [0.0] * 3))
            o = order('ref', i)
            w.write('/reference', int(recv[i]),
                    _jt(stamps[i], o, [q_d[nm][i] for nm in o], [0.0] * 3))
            o = order('motor', i)
            w.write('/motor_states', int(recv[i]), _js(stamps[i], o, [AMP[nm] for nm in o],
                                                       [0.0] * 3, [0.0] * 3))
            o = order('cmd', i)
            if f64:
                w.write('/effort_controller/commands', int(recv[i]) + 10_000,
                        _f64([CMD[nm] for nm in o]))
            else:
                w.write('/joint_commands', int(recv[i]) + 10_000, _js(
                    stamps[i], o, [q_d[nm][i] for nm in o], [0.0] * 3, [CMD[nm] for nm in o]))
        if f64:
            w.write_params({'joints': orders['cmd']})
    return path


@pytest.mark.parametrize('case', ['orders', 'switch_mid_bag', 'float64_commands'])
def test_joints_in_different_orders_are_matched_by_name(tmp_path, capsys, case):
    orders = {'state': ABC, 'cmd': ['arm_c', 'arm_a', 'arm_b'],
              'ref': ['arm_b', 'arm_c', 'arm_a'], 'motor': ['arm_c', 'arm_b', 'arm_a']}
    path = _ordered_run(tmp_path / 'bag', orders, switch=500 if case == 'switch_mid_bag'
                        else None, f64=case == 'float64_commands')
    rep = run_json([str(path), '--out', str(tmp_path / 'rep'), '--no-plots'], capsys)
    assert sorted(rep['joints']) == ABC
    assert rep['topics']['reference'] == '/reference'
    for nm in ABC:
        tr = rep['tracking']['per_joint'][nm]
        assert tr['mean'] == pytest.approx(ERR[nm], abs=1e-12), nm
        assert tr['max_abs'] == pytest.approx(abs(ERR[nm]), abs=1e-12), nm
        u = rep['commanded_effort']['per_joint'][nm]
        assert u['mean'] == pytest.approx(CMD[nm], abs=1e-12), nm
        assert u['peak_abs'] == pytest.approx(abs(CMD[nm]), abs=1e-12), nm
        mo = rep['motor']['per_joint'][nm]
        assert mo['current_peak_abs'] == pytest.approx(abs(AMP[nm]), abs=1e-12), nm
    assert rep['tracking']['exact_stamp_matches'] == 1000


def test_other_clock_work_is_what_a_run_on_that_clock_gives(tmp_path, capsys):
    """
    Header stamps on sim time, receive times on a slower wall clock, power from commands.

    The command answering state k arrives after it: on the header clock it acts at state
    k's stamp, on the receive clock from the next state on. Both works are computed here
    independently; each run's "other clock" figure must be the other run's work.
    """
    n = 2000
    k = np.arange(n)
    stamps = 10**9 + k * 1_000_000
    recv = 500 * 10**9 + k * 2_200_000 + (k % 7) * 50_000     # another clock, jittered
    t = k / 1000.0
    qd = np.column_stack([np.cos(3 * t), 2.0 * np.sin(5 * t)])
    q = np.column_stack([np.sin(3 * t) / 3, -0.4 * np.cos(5 * t)])
    u = np.column_stack([4.0 + 3.0 * np.sin(7 * t), -2.0 + np.cos(11 * t)])
    path = write_run(tmp_path / 'clk', stamps=stamps, recv=recv, q=q, qd=qd,
                     tau=np.zeros((n, 2)), cmds=(recv + 300_000, u))
    # independent: header clock, u_k with state k; receive clock, u_(k-1) with state k
    p_h = np.sum(u * qd, axis=1)
    w_header = float(np.sum(0.5 * (p_h[1:] + p_h[:-1]) * np.diff(stamps) / 1e9))
    p_r = np.sum(u[:-1] * qd[1:], axis=1)
    w_receive = float(np.sum(0.5 * (p_r[1:] + p_r[:-1]) * np.diff(recv[1:]) / 1e9))
    rep_h = run_json([str(path), '--out', str(tmp_path / 'h'), '--no-plots'], capsys)
    rep_r = run_json([str(path), '--out', str(tmp_path / 'r'), '--no-plots', '--time',
                      'receive'], capsys)
    assert rep_h['power']['from_commanded_effort'] and rep_r['power']['from_commanded_effort']
    assert rep_h['power']['work_j'] == pytest.approx(w_header, rel=1e-12)
    assert rep_r['power']['work_j'] == pytest.approx(w_receive, rel=1e-12)
    assert rep_h['power']['work_other_clock_j'] == pytest.approx(w_receive, rel=1e-12)
    assert rep_r['power']['work_other_clock_j'] == pytest.approx(w_header, rel=1e-12)


def test_skip_corrupt_counts_are_of_what_was_read(tracking_run, tmp_path, capsys):
    """The header and the topic list give the messages read, not the whole file's."""
    r = tracking_run
    bag = write_run(tmp_path / 'bag', stamps=r['stamps'], recv=r['recv'], q=r['q'],
                    qd=r['qd'], tau=r['tau'], chunk_size=50_000,
                    ref=(r['stamps'], r['recv'] + 10_000, r['q'] - r['e'], r['qd']))
    (f,) = bag.glob('*.mcap')
    raw = bytearray(f.read_bytes())
    at = raw.find(np.float64(r['q'][1500, 0]).tobytes())
    raw[at + 7] ^= 0x40
    f.write_bytes(bytes(raw))
    rep = run_json([str(bag), '--out', str(tmp_path / 'rep'), '--skip-corrupt', '--no-plots'],
                   capsys)
    # read independently: the messages of the chunks whose CRC holds
    from mcap.reader import make_reader
    import zlib
    kept = {'/joint_states': 0, '/reference': 0}
    with open(f, 'rb') as fh:
        summary = make_reader(fh).get_summary()
    for ci in summary.chunk_indexes:
        chunk = raw[ci.chunk_start_offset:ci.chunk_start_offset + ci.chunk_length]
        head = 9 + 8 + 8 + 8 + 4
        (n,) = np.frombuffer(bytes(chunk[head:head + 4]), '<u4')
        at = head + 4 + int(n)
        (size,) = np.frombuffer(bytes(chunk[at:at + 8]), '<u8')
        (crc,) = np.frombuffer(bytes(chunk[9 + 24:9 + 28]), '<u4')
        if zlib.crc32(bytes(chunk[at + 8:at + 8 + int(size)])) != crc:
            continue
        for cid, off in ci.message_index_offsets.items():
            (nbytes,) = np.frombuffer(bytes(raw[off + 11:off + 15]), '<u4')
            kept[summary.channels[cid].topic] += int(nbytes) // 16
    assert 0 < kept['/joint_states'] < 3000
    assert rep['timing']['state']['count'] == kept['/joint_states']
    counts = {t['name']: t['count'] for t in rep['bag']['topics']}
    assert counts == kept
    assert rep['bag']['message_count'] == sum(kept.values())
    assert any('the message counts of this report are of what was read' in x
               for x in rep['notes'])
    md = (tmp_path / 'rep' / 'report.md').read_text()
    assert f'{sum(kept.values())} messages' in md
