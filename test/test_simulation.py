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

"""Offline closed loop: the seed-001 lesson figures, convergence, summaries and the CLI."""

import dataclasses
import json
import subprocess
import sys

from manip_control.lesson import format_lesson
from manip_control.lesson import lesson
from manip_control.offline import main as offline_main
from manip_control.parameters import load_scenario
from manip_control.parameters import NominalModel
from manip_control.simulation import format_summary
from manip_control.simulation import late_window
from manip_control.simulation import reference_period
from manip_control.simulation import run_batch
from manip_control.simulation import run_closed_loop
from manip_control.simulation import summarize
import numpy as np
import pytest


def test_seed001_mismatch_stays_bounded_at_the_lesson_figures():
    """Lesson: with ideal torque, max |e| after 5 s is about 0.13 / 0.25 rad."""
    res = run_closed_loop(load_scenario('seed001'))
    late = res.t >= 5.0
    bound = np.abs(res.error[late]).max(axis=0)
    print('seed-001 mismatch late-window max |e|:', bound)
    np.testing.assert_allclose(bound, [0.13, 0.25], atol=0.01)
    # bounded: the late window is no worse than the 2.5-5 s window (no growth)
    mid = (res.t >= 2.5) & (res.t < 5.0)
    assert np.all(bound <= np.abs(res.error[mid]).max(axis=0) * 1.05)


def test_seed001_perfect_model_converges():
    sc = load_scenario('seed001')
    sc = dataclasses.replace(sc, controller=dataclasses.replace(
        sc.controller, nominal=NominalModel(arm=sc.plant.arm)))
    res = run_closed_loop(sc)
    late = np.abs(res.error[res.t >= 5.0]).max()
    early = np.abs(res.error[res.t < 1.0]).max()
    print(f'seed-001 perfect model: max |e| first second {early:.2e}, late {late:.2e}')
    assert late < 1e-3  # only the 1 kHz zero-order-hold residual remains
    assert late < early / 10


def test_default_scenario_full_plant_tracks_and_uses_the_motors():
    res = run_closed_loop(load_scenario('default'))
    s = summarize(res)
    assert all(0.0 < e < 0.35 for e in s['max_error_rad'])
    assert all(i > 0.5 for i in s['peak_current_A'])
    assert s['saturation_time_s'] == [0.0, 0.0]
    text = format_summary(s)
    assert 'joint1' in text and 'max |e| (late)' in text


def test_summary_figures_are_those_of_the_records():
    res = run_closed_loop(load_scenario('seed001'), duration=6.0)
    s = summarize(res, late_window_start=5.0)
    late = res.t >= 5.0
    e = res.q[late] - res.q_d[late]
    assert s['rms_error_rad'] == pytest.approx(np.sqrt((e ** 2).mean(axis=0)).tolist())
    assert s['max_error_rad'] == pytest.approx(np.abs(e).max(axis=0).tolist())
    assert s['ticks'] == 6000


def test_records_follow_the_tick_semantics():
    sc = load_scenario('seed001')
    res = run_closed_loop(sc, duration=0.01)
    np.testing.assert_allclose(res.t, np.arange(10) * 1e-3)
    # reference sampled at t_k, first state is the initial state
    np.testing.assert_allclose(res.q_d[:, 0], 0.5 * np.sin(0.5 * res.t), atol=1e-15)
    np.testing.assert_array_equal(res.q[0], [0.0, 0.0])


def test_offline_cli_json(capsys):
    assert offline_main(['--config', 'seed001', '--duration', '6', '--json']) == 0
    out = json.loads(capsys.readouterr().out)
    assert out['ticks'] == 6000 and out['real_time_factor'] > 0
    assert len(out['lesson']['baseline']) == 2 and len(out['lesson']['estimate']) == 2


@pytest.mark.parametrize('argv,needle', [(['--config', 'no_such_preset'], 'no such file'),
                                         (['--duration', '-1'], '--duration: must be > 0')])
def test_offline_cli_bad_input_is_a_clear_error(argv, needle, capsys):
    assert offline_main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith('error:') and needle in err


def test_offline_cli_bad_yaml_file_no_traceback(tmp_path):
    bad = tmp_path / 'bad.yaml'
    bad.write_text('plant:\n  arm: {m1: -3, m2: 2, l1: 1, l2: 1, lc1: .5, lc2: .5, I1: .2, '
                   'I2: .1}\n  actuator: motor\n')
    proc = subprocess.run([sys.executable, '-m', 'manip_control.offline', '--config', str(bad)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert 'plant.arm.m1: must be > 0' in proc.stderr
    assert 'Traceback' not in proc.stderr


# -- batch simulation -------------------------------------------------------------------------

def _batch_scenarios():
    """Parameter sets that differ in the true arm, friction, motors, nominal model and gains."""
    base = dataclasses.replace(load_scenario('default'), duration=6.0)
    rng = np.random.default_rng(4)
    out = []
    for k in range(4):
        pl, ct = base.plant, base.controller
        arm = dataclasses.replace(pl.arm, m1=pl.arm.m1 * (1 + 0.1 * rng.uniform(-1, 1)),
                                  I2=pl.arm.I2 * (1 + 0.2 * rng.uniform(-1, 1)))
        friction = tuple(dataclasses.replace(f, b=f.b * rng.uniform(0.5, 1.5),
                                             tau_c=f.tau_c * rng.uniform(0.5, 1.5))
                         for f in pl.friction)
        motors = tuple(dataclasses.replace(m, R=m.R * rng.uniform(0.8, 1.2)) for m in pl.motors)
        nominal = dataclasses.replace(ct.nominal, arm=dataclasses.replace(
            ct.nominal.arm, m2=ct.nominal.arm.m2 * (1 + 0.2 * rng.uniform(-1, 1))))
        out.append(dataclasses.replace(
            base, plant=dataclasses.replace(pl, arm=arm, friction=friction, motors=motors),
            controller=dataclasses.replace(ct, nominal=nominal, kp=(25.0 + 10 * k, 16.0))))
    out.append(dataclasses.replace(base, duration=11.5))   # late window [6.5, 11.5]: a period
    out.append(dataclasses.replace(load_scenario('seed001'), duration=6.0))   # another group
    out.append(dataclasses.replace(load_scenario('seed004'), duration=3.0))   # and another
    return out


@pytest.fixture(scope='module')
def batch_scenarios():
    return _batch_scenarios()


def test_batch_equals_single_runs(batch_scenarios):
    done = []
    batch = run_batch(batch_scenarios, jobs=2, progress=lambda d, n: done.append((d, n)))
    assert len(batch) == len(batch_scenarios)
    for i, sc in enumerate(batch_scenarios):
        single = run_closed_loop(sc)
        ref, got = summarize(single), batch.summary(i)
        assert got.keys() == ref.keys()
        for key, value in ref.items():
            if key in ('rms_error_rad', 'rms_torque_cmd_Nm'):   # sums in another order
                np.testing.assert_allclose(got[key], value, rtol=1e-12, atol=0.0)
            else:
                assert got[key] == value, (i, key)
        np.testing.assert_array_equal(batch.final_state[i], single.final_state)
        assert batch.saturated[i] == single.saturated.any()
    assert done[0] == (0, len(batch_scenarios)) and done[-1] == (len(batch_scenarios),) * 2
    assert [d for d, _ in done] == sorted(d for d, _ in done)


def test_batch_does_not_depend_on_jobs_or_engine(batch_scenarios):
    few = batch_scenarios[:2]
    one = run_batch(few, jobs=1)
    two = run_batch(few, jobs=2)
    slow = run_batch(few, jobs=1, engine='python')
    for name in ('late_max_error', 'max_error_whole_run', 'peak_current', 'final_state'):
        np.testing.assert_array_equal(getattr(one, name), getattr(two, name))
        np.testing.assert_allclose(getattr(slow, name), getattr(one, name), rtol=0.0,
                                   atol=1e-12)


def test_offline_cli_engines_agree(capsys):
    outs = []
    for engine in ('python', 'kernel'):
        assert offline_main(['--config', 'default', '--duration', '0.5', '--json',
                             '--engine', engine]) == 0
        outs.append(json.loads(capsys.readouterr().out))
    for key in ('max_error_whole_run_rad', 'peak_current_A', 'peak_voltage_V'):
        np.testing.assert_allclose(outs[0][key], outs[1][key], rtol=1e-12)
    assert outs[0]['engine'] == 'python' and outs[1]['engine'] == 'kernel'


@pytest.mark.parametrize('trajectory, period', [
    ({'type': 'sinusoid', 'amplitude': [0.5, 0.3], 'omega': [0.5, 0.5]}, 4.0 * np.pi),
    ({'type': 'sinusoid', 'amplitude': [0.5, 0.3], 'omega': [1.0, 1.5]}, 4.0 * np.pi),
    ({'type': 'sinusoid', 'amplitude': [0.5, 0.0], 'omega': [2.0, 1.5]}, np.pi),
    ({'type': 'sinusoid', 'amplitude': [0.5, 0.3], 'omega': [1.0, np.sqrt(2.0)]}, None),
    ({'type': 'sinusoid', 'amplitude': [0.5, 0.3], 'omega': 0.0}, None),
    ({'type': 'sum_of_sinusoids', 'amplitudes': [[0.1, 0.2], [0.3]],
      'omegas': [[0.628319, 1.884956], [1.256637]]}, 10.0),
    ({'type': 'quintic', 'start': [0, 0], 'goal': [1, 1], 'duration': 2.0}, None),
    ({'type': 'hold', 'position': [0.0, 0.0]}, None),
])
def test_reference_period(trajectory, period):
    got = reference_period(trajectory)
    assert got == (None if period is None else pytest.approx(period, rel=1e-5))


def test_late_window_is_whole_periods_of_the_reference():
    default = load_scenario('default')           # omega 2 pi / 5: a 5 s period
    w = late_window(default)
    assert (w.start, w.end, w.periods) == (5.0, 10.0, 1)
    assert w.period == pytest.approx(5.0, rel=1e-12)
    assert 'whole period (5 s)' in w.describe()
    w = late_window(default, 11.5)               # not [5, 11.5]: that would weigh part of a cycle
    assert w.start == pytest.approx(6.5) and w.periods == 1
    w = late_window(default, 16.0)
    assert w.start == pytest.approx(6.0) and w.periods == 2
    w = late_window(load_scenario('seed001'))    # a 12.6 s period does not fit: the start stays
    assert (w.start, w.periods) == (5.0, 0) and 'shorter than one period' in w.describe()
    w = late_window(load_scenario('seed004'))
    assert (w.start, w.periods, w.period) == (5.0, 0, None)
    # summarize() uses it: the figures of t >= 6.5 s for an 11.5 s run
    res = run_closed_loop(load_scenario('default'), duration=11.5)
    s = summarize(res)
    late = res.t >= 6.5
    assert s['late_window_start_s'] == pytest.approx(6.5)
    assert s['max_error_rad'] == np.abs(res.error[late]).max(axis=0).tolist()


def test_lesson_puts_the_perfect_model_and_the_estimate_beside_the_error():
    sc = load_scenario('seed001')
    s = summarize(run_closed_loop(sc))
    data = lesson(sc, s['max_error_rad'])
    assert data['mismatch'] == 'm1 2.5 (true 3), m2 1.5 (true 2)'
    # the baseline is the run whose nominal model is the true arm (built here by hand)
    perfect = dataclasses.replace(sc, controller=dataclasses.replace(
        sc.controller, nominal=NominalModel(arm=sc.plant.arm)))
    assert data['baseline'] == summarize(run_closed_loop(perfect))['max_error_rad']
    assert all(b < e / 100 for b, e in zip(data['baseline'], data['error']))
    # the estimate is of the right size (the robustness study checks it more closely)
    assert all(0.7 < e / p < 1.3 for e, p in zip(data['error'], data['estimate']))
    text = format_lesson(data, sc.joints)
    assert 'perfect model' in text and 'ISS estimate' in text and 'not a strict bound' in text
    assert len(text.splitlines()) <= 9
    none = lesson(perfect, s['max_error_rad'])
    assert none['mismatch'] == 'none' and none['baseline'] is None
    assert 'no model error' in format_lesson(none, sc.joints)


def test_offline_cli_prints_the_lesson(capsys):
    assert offline_main(['--config', 'default']) == 0
    text = capsys.readouterr().out
    assert 'lesson: late window t in [5, 10] s = 1 whole period (5 s)' in text
    assert 'nominal model vs the plant: m1 2.5 (true 3), m2 1.5 (true 2)' in text
    assert "perfect model (nominal = the plant's truth)" in text
