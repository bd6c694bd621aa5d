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
Test manip-sim and the closed loop over real DDS.

Lockstep == offline loop for every recorded field (within 1e-9), determinism, separate
processes on the default topics, bad configurations, real time.
"""

from dataclasses import replace
import json

import numpy as np
import pytest
import yaml

pytest.importorskip('rclpy')

from conftest import PYTHON, ROOT  # noqa: E402, I100
from diagnostic_msgs.msg import DiagnosticArray  # noqa: E402
from manip_control.actuators import current_reference  # noqa: E402
from manip_control.bag_io import BagReader  # noqa: E402
from manip_control.nodes import sim  # noqa: E402
from manip_control.parameters import load_scenario  # noqa: E402
from manip_control.simulation import run_closed_loop  # noqa: E402
from rosgraph_msgs.msg import Clock  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from trajectory_msgs.msg import JointTrajectory  # noqa: E402

TOL = {'rtol': 0.0, 'atol': 1e-9}
NOISY = {
    'scenario': {'name': 'noisy', 'duration': 2.0, 'control_rate': 1000.0},
    'plant': {'arm': {'m1': 3.0, 'm2': 2.0, 'l1': 1.0, 'l2': 1.0, 'lc1': 0.5, 'lc2': 0.5,
                      'I1': 0.2, 'I2': 0.1},
              'actuator': 'motor',
              'sensors': {'encoder_counts': 4096, 'position_noise_std': 1e-4,
                          'velocity_source': 'filtered_difference', 'velocity_cutoff_hz': 50.0,
                          'seed': 7}},
    'controller': {'law': 'computed_torque', 'kp': [25.0, 16.0], 'kd': [10.0, 8.0],
                   'ki': [2.0, 2.0], 'torque_limit': [89.0, 25.0],
                   'nominal': {'arm': {'m1': 2.5, 'm2': 1.5, 'l1': 1.0, 'l2': 1.0, 'lc1': 0.5,
                                       'lc2': 0.5, 'I1': 0.2, 'I2': 0.1}}},
}


def run_in_process(ctx, run_cfg, bag=None, storage='mcap'):
    runner = sim.SimRunner(run_cfg, bag=bag, storage=storage, context=ctx)
    try:
        return runner.execute()
    finally:
        runner.destroy()


def series(bag):
    with BagReader(bag) as r:
        return r.read_series(['/joint_states', '/joint_commands', '/reference',
                              '/motor_states', '/effort_controller/commands'])


LOCKSTEP_CONTRACT = (
    'lockstep over topics differs from the offline loop (run_closed_loop) in {field}: the '
    'nodes must reproduce the offline semantics tick by tick (DEVELOPERS.md, closed-loop '
    'semantics). A change to the controller node (tick, safety layer, input validation), the '
    'plant node or the trajectory node that alters what is published breaks this; the '
    'offline loop is the reference')


def _same(actual, expected, field, exact=False):
    msg = LOCKSTEP_CONTRACT.format(field=field)
    if exact:
        np.testing.assert_array_equal(actual, expected, err_msg=msg)
    else:
        np.testing.assert_allclose(actual, expected, err_msg=msg, **TOL)


def offline_current_reference(off):
    """Drive current references [A] of the offline commands (zeros for ideal actuators)."""
    plant = off.scenario.plant
    if plant.actuator == 'ideal':
        return np.zeros_like(off.tau_cmd)
    return np.array([[current_reference(u, m) for u, m in zip(row, plant.motors)]
                     for row in off.tau_cmd])


def assert_bag_equals_offline(bag, off):
    """Every per-tick field of every recorded topic equals the offline loop's record."""
    s = series(bag)
    n = len(off.t)
    ticks = np.round(off.t * 1e9).astype(np.int64)
    js, jc, ref, ms = (s['/joint_states'], s['/joint_commands'], s['/reference'],
                       s['/motor_states'])
    arr = s['/effort_controller/commands']
    for topic, x in (('/joint_states', js), ('/joint_commands', jc), ('/motor_states', ms)):
        assert len(x) == n, LOCKSTEP_CONTRACT.format(field=f'the {topic} count')
        assert list(x.names) == ['joint1', 'joint2'], (topic, x.names)
        _same(x.stamp_ns, ticks, f'{topic} header.stamp', exact=True)
    assert len(ref) == n and len(arr) == n
    # /joint_states: the measured state and the actuator torque at t_k (effort)
    _same(js.position, off.q_meas, '/joint_states position')
    _same(js.velocity, off.qd_meas, '/joint_states velocity')
    _same(js.effort, off.tau_joint_meas, '/joint_states effort')
    # /joint_commands and /effort_controller/commands: the command and the reference used
    _same(jc.effort, off.tau_cmd, '/joint_commands effort')
    _same(jc.position, off.q_d, '/joint_commands position (q_d)')
    _same(jc.velocity, off.qd_d, '/joint_commands velocity (qd_d)')
    _same(arr.data, off.tau_cmd, '/effort_controller/commands data')
    # /reference
    _same(ref.stamp_ns, ticks, '/reference header.stamp', exact=True)
    _same(ref.positions, off.q_d, '/reference positions')
    _same(ref.velocities, off.qd_d, '/reference velocities')
    _same(ref.accelerations, off.qdd_d, '/reference accelerations')
    # /motor_states: current, drive voltage (at t_k+), current reference
    _same(ms.position, off.current, '/motor_states position (current)')
    _same(ms.velocity, off.voltage, '/motor_states velocity (voltage)')
    _same(ms.effort, offline_current_reference(off), '/motor_states effort (current reference)')


def test_lockstep_over_topics_equals_offline_default(ros_context, tmp_path):
    run_cfg = sim.load_run_config('default')
    bag = tmp_path / 'bag'
    out = run_in_process(ros_context, run_cfg, bag=bag)
    off = run_closed_loop(run_cfg.scenario)
    assert out.ticks == len(off.t) == 10000
    assert out.plant_counters['command_timeouts'] == 0
    assert_bag_equals_offline(bag, off)
    # the nodes' own records too (true state, joint torque)
    res = out.result
    for name in ('q', 'qd', 'tau_joint', 'saturated'):
        np.testing.assert_allclose(getattr(res, name), getattr(off, name), **TOL)
    np.testing.assert_allclose(res.final_state, off.final_state, **TOL)
    # the bag holds the resolved parameters: the run can be replayed offline
    assert load_scenario(yaml.safe_load((bag / 'params.yaml').read_text())) == \
        run_cfg.scenario
    summary = sim.tracking_summary(out)
    err = np.abs(off.error[off.t >= 5.0]).max(axis=0)
    np.testing.assert_allclose(summary['late_max_abs'], err, **TOL)


@pytest.mark.parametrize('config, duration, values', [
    ('seed004', 3.0, {'plant': {'command_source': 'effort_commands'}}),   # Float64MultiArray
    (NOISY, None, {}),                                                     # sensor noise, ki
])
def test_lockstep_equals_offline_other_scenarios(ros_context, tmp_path, config, duration,
                                                 values):
    if isinstance(config, dict):
        path = tmp_path / 'scenario.yaml'
        path.write_text(yaml.safe_dump(config))
        config = str(path)
    run_cfg = sim.load_run_config(config, duration=duration)
    for node, vals in values.items():
        run_cfg.values[node].update(vals)
    bag = tmp_path / 'bag'
    run_in_process(ros_context, run_cfg, bag=bag)
    assert_bag_equals_offline(bag, run_closed_loop(run_cfg.scenario))


def _sim_cmd(*args):
    return [PYTHON, '-m', 'manip_control.nodes.sim', '--quiet', *args]


def test_lockstep_determinism_two_processes(procs, tmp_path):
    scenario = tmp_path / 'noisy.yaml'
    scenario.write_text(yaml.safe_dump(NOISY))
    runs = []
    for k in range(2):   # one after the other, two separate processes
        p = procs.start(f'sim{k}', _sim_cmd('--config', str(scenario),
                                            '--bag', str(tmp_path / f'b{k}')))
        assert procs.wait(p, 120) == 0, procs.output(p)
        runs.append(p)
    out, _ = procs.output(runs[0])
    assert 'manip-sim: noisy | lockstep | 2.000 s simulated (2000 ticks' in out
    raws = []
    for k in range(2):
        with BagReader(tmp_path / f'b{k}') as r:
            raws.append(r.read_raw(['/joint_states', '/joint_commands']))
    for topic in ('/joint_states', '/joint_commands'):
        (t0, d0), (t1, d1) = raws[0][topic], raws[1][topic]
        assert len(d0) == 2000
        np.testing.assert_array_equal(t0, t1)
        assert d0 == d1, f'{topic}: the two runs differ'


def test_separate_processes_on_the_default_topics(procs, ros_context, executor, probe, spin):
    params = str(ROOT / 'config' / 'sim_params.yaml')
    executor.add_node(probe.node)
    probe.sub(JointState, '/joint_states', depth=5000)
    # the plant waits for 2 joint_states subscribers: the controller and this probe
    plant = procs.node('plant', 'plant_node', '--params-file', params, '-p', 'duration:=2.0',
                       '-p', 'wait_for_subscribers:=2')
    ctrl = procs.node('controller', 'controller_node', '--params-file', params, '-p',
                      'use_sim_time:=true')
    traj = procs.node('trajectory', 'trajectory_node', '--params-file', params, '-p',
                      'use_sim_time:=true')
    assert spin(executor, 60.0, lambda: plant.poll() is not None), procs.output(plant)
    assert plant.returncode == 0, procs.output(plant)
    spin(executor, 1.0, lambda: len(probe.msgs['/joint_states']) >= 2000)
    assert ctrl.poll() is None and traj.poll() is None       # still running, no crash
    states = probe.msgs['/joint_states']
    stamps = [m.header.stamp.sec * 10 ** 9 + m.header.stamp.nanosec for m in states]
    first = {}
    for s, m in zip(stamps, states):        # tick 0 may have been re-sent at start-up
        first.setdefault(s, m)
    assert sorted(first) == [round(k * 1e6) for k in range(2000)]
    off = run_closed_loop(replace(load_scenario('default'), duration=2.0))
    q = np.array([list(first[s].position) for s in sorted(first)])
    np.testing.assert_allclose(q, off.q_meas, **TOL)
    assert 'run finished: 2000 ticks, 0 command timeouts' in procs.output(plant)[1]


def test_node_alone_with_remapping(procs, ros_context, executor, probe, spin):
    executor.add_node(probe.node)
    probe.sub(JointState, '/arm/joint_states')
    probe.sub(DiagnosticArray, '/arm_plant/diagnostics')
    procs.node('plant', 'plant_node', '-p', 'mode:=realtime', '-r',
               'joint_states:=/arm/joint_states', '-r', '__node:=arm_plant')
    assert spin(executor, 30.0, lambda: len(probe.msgs['/arm/joint_states']) > 10
                and probe.msgs['/arm_plant/diagnostics'])


BAD_PARAMS = {
    'plant_value.yaml': ('plant', 'plant:\n  ros__parameters:\n    arm.m1: -3.0\n',
                         'parameter arm.m1 (node plant)'),
    'plant_unknown.yaml': ('plant', 'plant:\n  ros__parameters:\n    arm.mass1: 3.0\n',
                           'parameter arm.mass1 (node plant): unknown parameter'),
    'plant_type.yaml': ('plant', "plant:\n  ros__parameters:\n    arm.m1: 'heavy'\n",
                        'parameter arm.m1 (node plant): must be a number'),
    'plant_joint.yaml': ('plant', 'plant:\n  ros__parameters:\n    motors.R: [0.3]\n',
                         'parameter motors.R (node plant): must have 2 elements'),
    'plant_yaml.yaml': ('plant', 'plant:\n  ros__parameters: [\n', 'not valid YAML'),
    'traj_limit.yaml': ('trajectory', 'trajectory:\n  ros__parameters:\n    trajectory: '
                        "'{type: sinusoid, amplitude: [4.0, 0.1], omega: 1.0}'\n",
                        'parameter trajectory (node trajectory): joint1 position reaches'),
    'traj_unknown.yaml': ('trajectory', 'trajectory:\n  ros__parameters:\n    rate: 5.0\n',
                          'parameter rate (node trajectory): unknown parameter'),
    'ctrl_gain.yaml': ('controller', 'controller:\n  ros__parameters:\n    kd: [1.0, -2.0]\n',
                       'parameter kd[1] (node controller): must be > 0'),
}
BAD_SCENARIO = 'plant:\n  arm: {m1: -1.0, m2: 2.0, l1: 1.0, l2: 1.0, lc1: 0.5, lc2: 0.5, ' \
    'I1: 0.2, I2: 0.1}\n  actuator: motor\n'


def test_bad_configuration_stops_with_one_message(procs, ros_context, executor, probe, spin,
                                                  tmp_path):
    executor.add_node(probe.node)
    for topic, typ in (('/joint_states', JointState), ('/clock', Clock),
                       ('/reference', JointTrajectory), ('/motor_states', JointState)):
        probe.sub(typ, topic)
    modules = {'plant': 'plant_node', 'trajectory': 'trajectory_node',
               'controller': 'controller_node'}
    started = []
    for fname, (node, text, expected) in BAD_PARAMS.items():
        (tmp_path / fname).write_text(text)
        p = procs.node(fname, modules[node], '--params-file', str(tmp_path / fname))
        started.append((p, expected))
    (tmp_path / 'bad_scenario.yaml').write_text(BAD_SCENARIO)
    (tmp_path / 'bad_ros.yaml').write_text(BAD_PARAMS['plant_unknown.yaml'][1])
    for name, args, expected in (
            ('sim_scenario', ['--config', str(tmp_path / 'bad_scenario.yaml')],
             'error: plant.arm.m1: must be > 0'),
            ('sim_ros', ['--config', str(tmp_path / 'bad_ros.yaml')],
             'error: parameter arm.mass1 (node plant): unknown parameter'),
            ('sim_missing', ['--config', 'no_such_preset'], 'error: config: no such file'),
            ('sim_duration', ['--duration', '-1'], 'error: --duration: must be > 0')):
        started.append((procs.start(name, _sim_cmd(*args)), expected))
    for p, expected in started:
        code = procs.wait(p, 60)
        out, err = procs.output(p)
        assert code == 2, (p.name, code, out, err)
        errors = [line for line in err.splitlines() if line.startswith('error: ')]
        assert len(errors) == 1 and expected in errors[0], (p.name, err)
        assert 'Traceback' not in err
    spin(executor, 0.5)
    assert all(not msgs for msgs in probe.msgs.values()), \
        {t: len(m) for t, m in probe.msgs.items()}


def test_realtime_run(ros_context):
    run_cfg = sim.load_run_config('default', mode='realtime', duration=2.0)
    out = run_in_process(ros_context, run_cfg)
    assert out.mode == 'realtime' and out.ticks == 2000
    s = sim.tracking_summary(out)
    assert s['error_source'] == 'measured q'
    done, expected = s['controller_ticks']
    assert done > 0.5 * expected                 # functional check; figures in bench/
    assert np.all(s['max_abs'] < 0.4)    # mass mismatch: 0.2 / 0.33 rad in lockstep
    assert out.plant_counters['refused_commands'] == 0
    text = sim.format_summary(out, s, ('joint1', 'joint2'))
    assert 'real time: controller ticks' in text and 'latency' in text


PANDA = ROOT.parent / 'shared' / 'fixtures' / 'urdf' / 'panda.urdf'


@pytest.mark.parametrize('config', sorted(p.name for p in (ROOT / 'config').glob('*.yaml')))
def test_every_shipped_config_runs_as_shipped(config, capfd):
    # no flag but a shorter duration: hardware_params.yaml (controller and trajectory in real
    # time, no plant section) runs with the simulated plant in its mode; the arm_*.yaml files
    # are for an arm given by its URDF
    arm = ['--urdf', str(PANDA)] if config.startswith('arm_') else []
    code, out = sim.run(['--config', str(ROOT / 'config' / config), '--duration', '0.2',
                         '--quiet', *arm])
    err = capfd.readouterr().err
    assert code == 0, err
    assert out.ticks == 200 and not out.interrupted


def test_disagreeing_modes_say_which_flag_to_add(tmp_path, capfd):
    params = tmp_path / 'mixed.yaml'
    params.write_text('/**/plant:\n  ros__parameters:\n    mode: lockstep\n'
                      '/**/controller:\n  ros__parameters:\n    mode: realtime\n')
    code, _ = sim.run(['--config', str(params), '--duration', '0.2', '--quiet'])
    err = capfd.readouterr().err
    assert code == 2 and 'parameter mode: must be the same' in err
    assert 'add --mode lockstep or --mode realtime' in err and len(err.splitlines()) == 1
    code, out = sim.run(['--config', str(params), '--duration', '0.2', '--quiet',
                         '--mode', 'lockstep'])
    assert code == 0 and out.mode == 'lockstep'


def test_manip_sim_takes_a_ros_params_file(capfd):
    # run() with the global context: uses its own init/shutdown
    code, out = sim.run(['--config', str(ROOT / 'config' / 'sim_params.yaml'),
                         '--duration', '0.3', '--quiet'])
    assert code == 0 and out.ticks == 300
    assert out.scenario == replace(load_scenario('default'), name='sim_params', duration=0.3)
    printed = capfd.readouterr().out
    assert 'manip-sim: sim_params | lockstep | 0.300 s simulated (300 ticks' in printed


def test_manip_sim_urdf_runs_records_and_summarises_seven_joints(procs, tmp_path):
    """``manip-sim --urdf panda.urdf``: a 7-joint computed-torque run, recorded, summarised."""
    bag = tmp_path / 'panda'
    p = procs.start('sim_urdf', _sim_cmd('--urdf', str(PANDA), '--duration', '2.0',
                                         '--bag', str(bag)))
    assert procs.wait(p, 240) == 0, procs.output(p)
    out, err = procs.output(p)
    assert 'manip-sim: panda | lockstep | 2.000 s simulated (2000 ticks' in out, out + err
    header = next(line for line in out.splitlines() if line.startswith('tracking error'))
    assert header.split()[-7:] == [f'panda_joint{k}' for k in range(1, 8)], header
    late = next(line for line in out.splitlines() if line.strip().startswith('max |e| for'))
    worst = max(float(v) for v in late.split()[-7:])
    assert worst < 0.01, late                   # the arm on its reference
    with BagReader(bag) as r:
        raw = r.read_raw(['/joint_states', '/joint_commands', '/motor_states'])
    for topic, (stamps, _) in raw.items():
        assert len(stamps) >= 2000, (topic, len(stamps))
    assert 'bag: ' in out and 'Traceback' not in out + err
    # manip-analyze reads the 7-joint bag as it is
    rep = procs.start('analyze', [PYTHON, '-m', 'manip_control.bag_analysis', str(bag),
                                  '--out', str(tmp_path / 'rep'), '--json', '--no-plots'])
    assert procs.wait(rep, 240) == 0, procs.output(rep)
    report = json.loads(procs.output(rep)[0])
    assert report['joints'] == [f'panda_joint{k}' for k in range(1, 8)]
    late = [j['late_max_abs'] for j in report['tracking']['per_joint'].values()]
    assert len(late) == 7 and max(late) < 0.01, late
    # the effort limit of a URDF run: the controller's, from ros_params.yaml
    assert report['commanded_effort']['limit'] == [87.0] * 4 + [12.0] * 3
