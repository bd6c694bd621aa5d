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
Tests of the model section of manip-analyze (manip_control.model_analysis, bag_analysis).

Exactness: bags of simulated runs with ideal actuators and a perfect model give residuals
<= 1 % of the effort RMS, for the package's 2R (checked against a closed form written here
from the physical parameters) and for every fixture URDF arm (ideal torques integrated with
scipy at tight tolerance; the torque actually applied is the reference). The foreign iiwa bag
runs from its own URDF; its residual is explained by gravity being off in that simulator and
by joints sitting at their velocity limits.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from manip_control import model_analysis as ma
from manip_control.arm_model import UrdfArm
from manip_control.bag_analysis import main
from manip_control.bag_io import BagWriter
from manip_control.parameters import load_scenario
from manip_control.parameters import scenario_from_dict
from manip_control.simulation import run_closed_loop
import numpy as np
import pytest
from rosbags.typesys import get_typestore
from rosbags.typesys import Stores
from scipy.integrate import solve_ivp

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / '..' / 'shared' / 'fixtures'
URDFS = sorted((FIXTURES / 'urdf').glob('*.urdf'))
IIWA = FIXTURES / 'real_bags' / 'iiwa_effort_humble'
TS = get_typestore(Stores.ROS2_JAZZY)
T = TS.types
JS = 'sensor_msgs/msg/JointState'
STRING = 'std_msgs/msg/String'


def _js(ns, names, pos, vel, eff):
    stamp = T['builtin_interfaces/msg/Time'](sec=int(ns) // 10**9, nanosec=int(ns) % 10**9)
    return bytes(TS.serialize_cdr(T[JS](
        header=T['std_msgs/msg/Header'](stamp=stamp, frame_id=''), name=list(names),
        position=np.array(pos, float), velocity=np.array(vel, float),
        effort=np.array(eff, float)), JS))


def write_bag(path: Path, t, names, q, qd, tau, *, description=None, params=None) -> Path:
    """Write /joint_states (and /robot_description, params.yaml) of a run sampled at t [s]."""
    with BagWriter(path) as w:
        if description is not None:
            w.add_topic('/robot_description', STRING)
            w.write('/robot_description', 1, bytes(TS.serialize_cdr(T[STRING](
                data=description), STRING)))
        w.add_topic('/joint_states', JS)
        for k in range(len(t)):
            ns = 10**9 + int(round(t[k] * 1e9))
            w.write('/joint_states', ns, _js(ns, names, q[k], qd[k], tau[k]))
        if params is not None:
            w.write_params(params)
    return path


def _report(bag: Path, out: Path, *extra: str) -> dict:
    assert main([str(bag), '--out', str(out), '--quiet', *extra]) == 0
    return json.loads((out / 'report.json').read_text())


# ------------------------------------------------------------------------------------------
# the package's 2R


def closed_form_2r(arm: dict, motors: list, friction: list, q, qd, qdd):
    """
    Inverse dynamics of the 2R written out here from the physical parameters.

    Lagrange with rotors on the carrying links (motor 2 on link 1): kinetic energy of the
    links plus ``1/2 Jm1 (N1 qd1)^2 + 1/2 Jm2 (qd1 + N2 qd2)^2``; smooth friction.
    """
    keys = ('m1', 'm2', 'l1', 'lc1', 'lc2', 'I1', 'I2', 'g0')
    m1, m2, l1, lc1, lc2, i1, i2, g0 = (arm[k] for k in keys)
    jm1, n1 = motors[0]['Jm'], motors[0]['N']
    jm2, n2 = motors[1]['Jm'], motors[1]['N']
    c2, s2 = np.cos(q[:, 1]), np.sin(q[:, 1])
    m11 = (i1 + i2 + m1 * lc1 ** 2 + m2 * (l1 ** 2 + lc2 ** 2 + 2 * l1 * lc2 * c2)
           + jm1 * n1 ** 2 + jm2)
    m12 = i2 + m2 * (lc2 ** 2 + l1 * lc2 * c2) + jm2 * n2
    m22 = i2 + m2 * lc2 ** 2 + jm2 * n2 ** 2
    h = m2 * l1 * lc2 * s2
    tau1 = (m11 * qdd[:, 0] + m12 * qdd[:, 1] - h * (2 * qd[:, 0] * qd[:, 1] + qd[:, 1] ** 2)
            + (m1 * lc1 + m2 * l1) * g0 * np.cos(q[:, 0])
            + m2 * lc2 * g0 * np.cos(q[:, 0] + q[:, 1]))
    tau2 = (m12 * qdd[:, 0] + m22 * qdd[:, 1] + h * qd[:, 0] ** 2
            + m2 * lc2 * g0 * np.cos(q[:, 0] + q[:, 1]))
    tau = np.column_stack([tau1, tau2])
    fric = np.column_stack([f['b'] * qd[:, j] + f['tau_c'] * np.tanh(qd[:, j] / f['eps'])
                            for j, f in enumerate(friction)])
    return tau, fric


@pytest.fixture(scope='module')
def two_link_bag(tmp_path_factory):
    """Record an ideal-actuator computed-torque run of the 2R (perfect nominal model)."""
    d = load_scenario('default').to_dict()
    d['plant']['actuator'] = 'ideal'
    d['controller']['nominal'] = {
        'arm': d['plant']['arm'], 'friction': d['plant']['friction'],
        'rotor_inertia': [m['Jm'] * m['N'] ** 2 for m in d['plant']['motors']],
        'gear_ratio': [m['N'] for m in d['plant']['motors']], 'rotor_coupling': True}
    d['trajectory']['omega'] = [2.0, 3.0]
    scen = scenario_from_dict(d)
    res = run_closed_loop(scen, duration=6.0)
    bag = write_bag(tmp_path_factory.mktemp('r2') / 'bag', res.t, ['joint1', 'joint2'],
                    res.q_meas, res.qd_meas, res.tau_joint_meas, params=scen.to_dict())
    return bag, scen.to_dict(), res


def test_two_link_residual_within_one_percent(two_link_bag, tmp_path):
    bag, params, _ = two_link_bag
    rep = _report(bag, tmp_path / 'rep')
    mo = rep['model']
    assert mo['available'] and '2R closed form' in mo['source'], mo.get('reason')
    for name in ('joint1', 'joint2'):
        fig = mo['per_joint'][name]['measured']
        assert fig['effort_rms'] > 1.0
        assert fig['residual_fraction'] <= 0.01, (name, fig)
    assert (tmp_path / 'rep' / 'model.png').stat().st_size > 1000
    assert 'Model' in (tmp_path / 'rep' / 'report.md').read_text()


def test_two_link_model_torque_matches_closed_form(two_link_bag):
    """The analysis' model torque equals the closed form written here (1e-9 relative)."""
    bag, params, res = two_link_bag
    from manip_control.arm_model import TwoLinkArm
    from manip_control.bag_analysis import load_run
    from manip_control.bag_analysis import _choose_model
    run = load_run(bag)
    model, _, friction, _ = _choose_model(run, None, None)
    assert isinstance(model, TwoLinkArm)
    motion = ma.filter_motion(res.t, res.q_meas)
    tau_rb, _ = closed_form_2r(params['plant']['arm'], params['plant']['motors'],
                               params['plant']['friction'], motion.q, motion.qd, motion.qdd)

    def fric(v):            # the smooth friction law, at the full rate, then filtered
        return closed_form_2r(params['plant']['arm'], params['plant']['motors'],
                              params['plant']['friction'], v, v, v)[1]
    expected = tau_rb + motion.smooth_of_velocity(fric)
    got = ma.model_torque(model, motion, friction)
    assert np.max(np.abs(got - expected)) <= 1e-9 * np.max(np.abs(expected))
    # and the residual against the applied torque, computed here, is what the report says
    eff = motion.smooth(res.t, res.tau_joint_meas)[motion.keep]
    ours = np.sqrt(np.mean((eff - expected[motion.keep]) ** 2, axis=0))
    figs = ma.compare(motion.smooth(res.t, res.tau_joint_meas), got, motion.keep)
    assert np.allclose([f['residual_rms'] for f in figs], ours, rtol=1e-9, atol=1e-12)


# ------------------------------------------------------------------------------------------
# every fixture URDF arm


def joint_friction(urdf_text: str, names) -> tuple[np.ndarray, np.ndarray]:
    """``<dynamics damping friction>`` of the named joints (0 where absent), parsed here."""
    import xml.etree.ElementTree as ET
    root = ET.fromstring(urdf_text)
    b, c = np.zeros(len(names)), np.zeros(len(names))
    for j in root.findall('joint'):
        if j.get('name') in names and j.find('dynamics') is not None:
            k = list(names).index(j.get('name'))
            b[k] = float(j.find('dynamics').get('damping', 0.0))
            c[k] = float(j.find('dynamics').get('friction', 0.0))
    return b, c


def simulate_urdf(arm: UrdfArm, duration: float = 3.0, rate: float = 1000.0,
                  friction=None):
    """
    Ideal-torque run: a continuous computed-torque + PD law on a sinusoid inside the limits.

    ``tau = M(q) (qdd_r + Kp e + Kd ed) + b(q, qd) + f(qd)`` applied exactly (no hold) to an
    arm with joint friction ``f = b_v qd + tau_c tanh(qd / 0.01)`` (``friction = (b_v,
    tau_c)``), the state integrated with DOP853 at rtol 1e-10; returns t, q, qd and the
    applied tau at the samples.
    """
    n = arm.n
    bv, tc = friction if friction is not None else (np.zeros(n), np.zeros(n))

    def fric(qd):
        return bv * qd + tc * np.tanh(qd / 0.01)
    lo, hi = np.asarray(arm.limits.lower), np.asarray(arm.limits.upper)
    finite = np.isfinite(lo) & np.isfinite(hi)
    lo, hi = np.where(finite, lo, -2.0), np.where(finite, hi, 2.0)
    mid = 0.5 * (lo + hi)
    amp = np.minimum(0.25 * (hi - lo), 0.5)
    w = 2.0 + 0.37 * np.arange(n)
    phase = 0.7 * np.arange(n)
    kp, kd = 100.0, 20.0

    def ref(t):
        return (mid + amp * np.sin(w * t + phase), amp * w * np.cos(w * t + phase),
                -amp * w ** 2 * np.sin(w * t + phase))

    def torque(t, q, qd):
        qr, qdr, qddr = ref(t)
        return (arm.mass_matrix(q) @ (qddr + kp * (qr - q) + kd * (qdr - qd)) + arm.bias(q, qd)
                + fric(qd))

    def rhs(t, x):
        q, qd = x[:n], x[n:]
        return np.concatenate([qd, arm.forward_dynamics(q, qd, torque(t, q, qd) - fric(qd))])

    q0, qd0, _ = ref(0.0)
    x0 = np.concatenate([q0 + 0.05 * amp, qd0])
    t = np.arange(int(duration * rate) + 1) / rate
    sol = solve_ivp(rhs, (0.0, t[-1]), x0, method='DOP853', t_eval=t, rtol=1e-10, atol=1e-10)
    assert sol.success, sol.message
    q, qd = sol.y[:n].T, sol.y[n:].T
    tau = np.array([torque(tk, qk, vk) for tk, qk, vk in zip(t, q, qd)])
    return t, q, qd, tau


@pytest.mark.parametrize('urdf', URDFS, ids=[p.stem for p in URDFS])
def test_urdf_arm_residual_within_one_percent(urdf, tmp_path):
    text = urdf.read_text()
    arm = UrdfArm.from_string(text, source=str(urdf))
    t, q, qd, tau = simulate_urdf(arm, friction=joint_friction(text, arm.joint_names))
    bag = write_bag(tmp_path / 'bag', t, arm.joint_names, q, qd, tau, description=text)
    rep = _report(bag, tmp_path / 'rep', '--no-plots')
    mo = rep['model']
    assert mo['available'] and '/robot_description' in mo['source']
    assert mo['joints'] == list(arm.joint_names)
    for name in arm.joint_names:
        fig = mo['per_joint'][name]['measured']
        if fig['effort_rms'] < 1e-6:        # e.g. a joint with no load at all
            continue
        assert fig['residual_fraction'] <= 0.01, (urdf.stem, name, fig)
    # the same URDF given with --urdf, joints of the bag in another order
    perm = list(reversed(range(arm.n)))
    bag2 = write_bag(tmp_path / 'bag2', t, [arm.joint_names[k] for k in perm], q[:, perm],
                     qd[:, perm], tau[:, perm])
    rep2 = _report(bag2, tmp_path / 'rep2', '--no-plots', '--urdf', str(urdf))
    for name in arm.joint_names:
        a = rep['model']['per_joint'][name]['measured']['residual_rms']
        b = rep2['model']['per_joint'][name]['measured']['residual_rms']
        assert b == pytest.approx(a, rel=1e-9, abs=1e-12)


def test_gravity_fit_recovers_the_simulated_gravity(tmp_path):
    urdf = FIXTURES / 'urdf' / 'ur5.urdf'
    g = (1.5, -2.0, -9.0)
    arm = UrdfArm.from_file(urdf, gravity=g)
    t, q, qd, tau = simulate_urdf(arm, duration=2.0)      # ur5: its <dynamics> are all 0
    bag = write_bag(tmp_path / 'bag', t, arm.joint_names, q, qd, tau)
    rep = _report(bag, tmp_path / 'rep', '--no-plots', '--urdf', str(urdf))
    fit = rep['model']['gravity_fit']
    assert np.allclose(fit['vector'], g, atol=0.05), fit
    assert rep['model']['gravity'] == [0.0, 0.0, -9.81]
    rep = _report(bag, tmp_path / 'rep2', '--no-plots', '--urdf', str(urdf), '--gravity',
                  *map(str, g))
    for f in rep['model']['per_joint'].values():
        if f['measured']['effort_rms'] > 1e-6:
            assert f['measured']['residual_fraction'] <= 0.01


def test_missing_joint_and_bad_urdf_are_one_line_errors(tmp_path, capsys):
    panda = FIXTURES / 'urdf' / 'panda.urdf'
    assert main([str(IIWA), '--out', str(tmp_path / 'a'), '--quiet', '--urdf',
                 str(panda)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count('\n') == 0 and err.startswith('error: ')
    assert 'panda_joint1' in err and 'joint_a1' in err
    assert main([str(IIWA), '--out', str(tmp_path / 'b'), '--quiet', '--urdf',
                 str(tmp_path / 'nope.urdf')]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count('\n') == 0 and 'nope.urdf' in err and 'no such file' in err
    assert main([str(IIWA), '--out', str(tmp_path / 'c'), '--quiet', '--gravity', '0', '0',
                 'nan']) == 2
    err = capsys.readouterr().err.strip()
    assert err.count('\n') == 0 and '--gravity' in err


@pytest.mark.parametrize('f', [0.5, 1.0, 3.0])
def test_filter_has_no_delay(f):
    """
    Filtered sinusoid and derivatives: in phase with the exact ones, with the stated gain.

    Gain of the Gaussian low-pass ``exp(-(2 pi f sigma)^2 / 2)``, ``sigma = sqrt(ln 2) /
    (2 pi fc)``: 1/sqrt(2) at the cutoff; a delay of even one sample (1 ms) would give an
    error of ``w * 1e-3`` relative, far above the bound.
    """
    t = np.arange(0, 4.0, 1e-3)
    w = 2 * np.pi * f
    m = ma.filter_motion(t, np.sin(w * t)[:, None], cutoff_hz=10.0)
    sigma = math.sqrt(math.log(2.0)) / (2 * math.pi * 10.0)
    gain = math.exp(-0.5 * (w * sigma) ** 2)
    k = m.keep
    tk = m.t[k]
    assert np.max(np.abs(m.q[k, 0] - gain * np.sin(w * tk))) < 2e-4
    assert np.max(np.abs(m.qd[k, 0] - gain * w * np.cos(w * tk))) < 2e-4 * w
    assert np.max(np.abs(m.qdd[k, 0] + gain * w ** 2 * np.sin(w * tk))) < 2e-4 * w ** 2
    # the implementation's gain at the cutoff itself is 1/sqrt(2) (its sigma, not this one)
    at_cut = ma.filter_motion(t, np.sin(2 * np.pi * 10.0 * t)[:, None], cutoff_hz=10.0)
    amp = np.max(np.abs(at_cut.q[at_cut.keep, 0]))
    assert amp == pytest.approx(0.5 ** 0.5, abs=2e-3)


# ------------------------------------------------------------------------------------------
# the foreign bag


def test_iiwa_bag_from_its_own_urdf(tmp_path):
    """Finite figures and plots; the residual is explained by gravity off and velocity limits."""
    rep = _report(IIWA, tmp_path / 'rep')
    mo = rep['model']
    assert mo['available'] and mo['source'] == \
        'URDF recorded on /robot_description in the bag'
    assert mo['joints'] == [f'joint_a{k}' for k in range(1, 8)]
    assert 'measured' not in mo['per_joint']['joint_a1']       # effort is all zero there
    for name, e in mo['per_joint'].items():
        fig = e['command']
        assert all(math.isfinite(fig[k]) for k in ('effort_rms', 'residual_rms',
                                                   'residual_max_abs')), name
    assert (tmp_path / 'rep' / 'model.png').stat().st_size > 1000
    # the simulator ran without gravity: the best-fit field is ~0 (|g| 0.014 m/s^2 measured)
    fit = mo['gravity_fit']
    assert fit['magnitude'] < 0.1, fit
    # with the default gravity the arm "should" need 32 N·m at joint_a2 where 0 was commanded
    assert mo['per_joint']['joint_a2']['command']['residual_rms'] > 20.0
    # joints at their URDF velocity limit (the simulator clamps the speed there)
    share = mo['velocity_limit']['share_of_samples_at_limit']
    assert share['joint_a1'] > 0.05
    rep0 = _report(IIWA, tmp_path / 'rep0', '--no-plots', '--gravity', '0', '0', '0')
    per0 = rep0['model']['per_joint']
    assert per0['joint_a2']['command']['residual_rms'] < 1.0
    for name, e in per0.items():
        away = e['command_away_from_limits']
        assert away['residual_fraction'] < 0.35, (name, away)


# ------------------------------------------------------------------------------------------
# repeated stamps and sections that cannot run


@pytest.mark.parametrize('where', ['one', 'recovered_tail', 'back_in_time'])
def test_repeated_joint_state_stamps_are_merged_and_counted(two_link_bag, tmp_path, where):
    """
    Repeated stamps leave the figures as they were, and the report counts them.

    ``one``: a single state sent twice; ``recovered_tail``: the last 300 rows written again
    (the extra rows a recovered log can hold); ``back_in_time``: a state stamped like the
    one before it followed by the real one (sorted, then two rows share a stamp).
    """
    _, params, res = two_link_bag
    n = res.t.size
    if where == 'one':
        rows = np.insert(np.arange(n), 3000, 3000)
    elif where == 'recovered_tail':
        rows = np.concatenate([np.arange(n), np.arange(n - 300, n)])
    else:
        rows = np.arange(n)
    t = res.t[rows].copy()
    if where == 'back_in_time':
        t[2000] = t[1999]
    bag = write_bag(tmp_path / 'bag', t, ['joint1', 'joint2'], res.q_meas[rows],
                    res.qd_meas[rows], res.tau_joint_meas[rows], params=params)
    rep = _report(bag, tmp_path / 'rep', '--no-plots')
    mo = rep['model']
    assert mo['available'], mo
    expected = {'one': 1, 'recovered_tail': 300, 'back_in_time': 1}[where]
    assert mo['repeated_stamps'] == expected
    assert any(f'{expected} joint states repeat the time stamp' in x for x in rep['notes'])
    clean = _report(two_link_bag[0], tmp_path / 'clean', '--no-plots')['model']
    for name in ('joint1', 'joint2'):
        fig = mo['per_joint'][name]['measured']
        assert fig['residual_fraction'] <= 0.01, (name, fig)
        if where != 'back_in_time':         # exact copies: the very same figures
            ref = clean['per_joint'][name]['measured']
            assert fig['residual_rms'] == pytest.approx(ref['residual_rms'], rel=1e-9)


def test_a_model_section_that_cannot_run_leaves_the_rest_of_the_report(two_link_bag,
                                                                       tmp_path, capsys):
    """A run too short for the filter: the model section says it failed, the rest stands."""
    _, params, res = two_link_bag
    k = slice(0, 100)                # 0.1 s: shorter than the 10 Hz filter's transients
    bag = write_bag(tmp_path / 'bag', res.t[k], ['joint1', 'joint2'], res.q_meas[k],
                    res.qd_meas[k], res.tau_joint_meas[k], params=params)
    rep = _report(bag, tmp_path / 'rep', '--no-plots')
    mo = rep['model']
    assert mo['available'] is False and mo['failed'] is True
    assert 'too short' in mo['reason']
    assert any(x.startswith('MODEL SECTION FAILED: ') for x in rep['notes'])
    assert rep['timing']['state']['count'] == 100
    assert rep['measured_effort']['per_joint']['joint1']['rms'] == pytest.approx(
        float(np.sqrt(np.mean(res.tau_joint_meas[k, 0] ** 2))), rel=1e-12)
    md = (tmp_path / 'rep' / 'report.md').read_text()
    assert '**FAILED:**' in md and 'too short' in md
    # an impossible --cutoff asked for on the command line stays an error
    assert main([str(bag), '--out', str(tmp_path / 'x'), '--quiet', '--cutoff', '900']) == 2
    assert capsys.readouterr().err.startswith('error: --cutoff')


def test_a_run_without_gravity_gets_the_advice_to_try_gravity_zero(tmp_path):
    """A simulator without gravity: the best-fit field is ~0 and the report says so."""
    urdf = FIXTURES / 'urdf' / 'ur5.urdf'
    arm = UrdfArm.from_file(urdf, gravity=(0.0, 0.0, 0.0))
    t, q, qd, tau = simulate_urdf(arm, duration=2.0)
    bag = write_bag(tmp_path / 'bag', t, arm.joint_names, q, qd, tau)
    rep = _report(bag, tmp_path / 'rep', '--no-plots', '--urdf', str(urdf))
    fit = rep['model']['gravity_fit']
    assert fit['magnitude'] < 0.05, fit
    assert any(x.startswith('gravity appears off: try --gravity 0 0 0') for x in rep['notes'])
    md = (tmp_path / 'rep' / 'report.md').read_text()
    assert '**gravity appears off: try --gravity 0 0 0' in md
    rep = _report(bag, tmp_path / 'rep0', '--no-plots', '--urdf', str(urdf), '--gravity',
                  '0', '0', '0')
    assert not any('gravity appears off' in x for x in rep['notes'])
    # gravity on, though not the model's: no advice
    g = (1.5, -2.0, -9.0)
    arm = UrdfArm.from_file(urdf, gravity=g)
    t, q, qd, tau = simulate_urdf(arm, duration=2.0)
    bag = write_bag(tmp_path / 'bag_g', t, arm.joint_names, q, qd, tau)
    rep = _report(bag, tmp_path / 'rep_g', '--no-plots', '--urdf', str(urdf))
    assert not any('gravity appears off' in x for x in rep['notes'])
