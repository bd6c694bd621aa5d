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

"""Control laws: cross-checks, perfect-model error dynamics, gravity-mismatch steady state."""

import dataclasses
import math

from manip_control.arm_model import TwoLinkArm
from manip_control.control import computed_torque
from manip_control.control import Controller
from manip_control.control import pd_gravity
from manip_control.dynamics import TwoLinkModel
from manip_control.parameters import ArmParameters
from manip_control.parameters import ControllerParameters
from manip_control.parameters import FrictionParameters
from manip_control.parameters import load_scenario
from manip_control.parameters import NominalModel
from manip_control.parameters import ParameterError
from manip_control.parameters import SensorParameters
from manip_control.simulation import run_closed_loop
import numpy as np
import pytest
from scipy.optimize import fsolve

ARM = ArmParameters()
RNG = np.random.default_rng(7)


def _ct(**kw):
    base = {'law': 'computed_torque', 'nominal': NominalModel(arm=ARM), 'kp': (25.0, 16.0),
            'kd': (10.0, 8.0), 'torque_limit': (1e6, 1e6), 'friction_compensation': False}
    base.update(kw)
    return ControllerParameters(**base)


@pytest.mark.parametrize('trial', range(10))
def test_scalar_update_matches_matrix_form(trial):
    q, qd, r, rv, ra = (RNG.uniform(-2, 2, 2) for _ in range(5))
    ctrl = Controller(_ct(), 1e-3)
    out = ctrl.update(q, qd, r, rv, ra)
    ref = computed_torque(q, qd, r, rv, ra, TwoLinkArm(TwoLinkModel(ARM)), (25.0, 16.0),
                          (10.0, 8.0))
    np.testing.assert_allclose(out.tau, ref, rtol=1e-12, atol=1e-12)
    pd = Controller(_ct(law='pd_gravity'), 1e-3).update(q, qd, r, rv, ra)
    ref = pd_gravity(q, qd, r, TwoLinkArm(TwoLinkModel(ARM)), (25.0, 16.0), (10.0, 8.0))
    np.testing.assert_allclose(pd.tau, ref, rtol=1e-12, atol=1e-12)


def test_friction_compensation_adds_the_nominal_friction():
    fr = (FrictionParameters(b=0.5, tau_c=0.8, eps=0.01), FrictionParameters(b=0.3, tau_c=0.4))
    nominal = NominalModel(arm=ARM, friction=fr)
    # the feed-forward is taken at the reference velocity (0.5, -1.0), not the measured one
    args = ((0.1, 0.2), (0.02, 0.3), (0.0, 0.0), (0.5, -1.0), (0.0, 0.0))
    on = Controller(_ct(nominal=nominal, friction_compensation=True), 1e-3).update(*args)
    off = Controller(_ct(nominal=nominal), 1e-3).update(*args)
    expected = (0.5 * 0.5 + 0.8 * math.tanh(0.5 / 0.01), -0.3 * 1.0 - 0.4 * math.tanh(100.0))
    np.testing.assert_allclose(np.subtract(on.tau, off.tau), expected, rtol=1e-12)


def test_perfect_model_error_follows_the_linear_error_dynamics():
    """Error obeys e'' + Kd e' + Kp e = 0: kp=25, kd=10 give e = (e0 + 5 e0 t) e^-5t."""
    sc = load_scenario('seed001')
    sc = dataclasses.replace(
        sc, control_rate=10000.0, duration=3.0,
        trajectory={'type': 'hold', 'position': [0.3, -0.2]},
        plant=dataclasses.replace(sc.plant, initial_position=(0.2, -0.1)),
        controller=dataclasses.replace(sc.controller, nominal=NominalModel(arm=sc.plant.arm)))
    res = run_closed_loop(sc)
    e0 = np.array([0.2 - 0.3, -0.1 + 0.2])
    t = res.t[:, None]
    wn = np.array([5.0, 4.0])  # kp = wn^2, kd = 2 wn (zeta = 1)
    expected = (e0 + wn * e0 * t) * np.exp(-wn * t)
    err = np.abs(res.error - expected).max()
    assert err < 2e-4 * np.abs(e0).max()  # zero-order hold at 10 kHz
    assert np.abs(res.error[-1]).max() < 1e-3


def _mismatch_controller(law, kp, kd):
    nominal = NominalModel(arm=dataclasses.replace(ARM, m1=2.5, m2=1.5))
    return _ct(law=law, nominal=nominal, kp=kp, kd=kd)


@pytest.mark.parametrize('law,kp,kd', [('pd_gravity', (60.0, 30.0), (20.0, 8.0)),
                                       ('computed_torque', (25.0, 16.0), (10.0, 8.0))])
def test_gravity_mismatch_steady_state_error(law, kp, kd):
    """
    Set-point hold with wrong masses: the error settles where the law balances delta_g.

    PD + gravity: ``Kp e = -delta_g(q_d + e)``; computed torque: ``M^(q) Kp e = -delta_g(q)``
    with ``delta_g = g - g^`` (solved here with fsolve, independently of the simulation).
    """
    q_d = np.array([0.4, 0.3])
    sc = load_scenario('seed001')
    sc = dataclasses.replace(sc, duration=12.0, trajectory={'type': 'hold',
                                                            'position': q_d.tolist()},
                             plant=dataclasses.replace(sc.plant, initial_position=(0.4, 0.3)),
                             controller=_mismatch_controller(law, kp, kd))
    res = run_closed_loop(sc)
    true = TwoLinkModel(sc.plant.arm)
    nom = TwoLinkModel(sc.controller.nominal.arm)

    def balance(e):
        q = q_d + e
        dg = true.gravity_vector(q) - nom.gravity_vector(q)
        if law == 'pd_gravity':
            return np.asarray(kp) * e + dg
        return nom.inertia_matrix(q) @ (np.asarray(kp) * e) + dg

    e_inf = fsolve(balance, np.zeros(2), xtol=1e-13)
    assert np.abs(e_inf).min() > 1e-3  # a real offset, not zero
    np.testing.assert_allclose(res.error[-1], e_inf, atol=1e-6)


def test_torque_limit_saturates_and_reports():
    ctrl = Controller(_ct(torque_limit=(5.0, 2.0)), 1e-3)
    out = ctrl.update((0.0, 0.0), (0.0, 0.0), (0.0, 0.0), (0.0, 0.0), (0.0, 0.0))
    assert out.tau == (5.0, 2.0)  # gravity at q = 0 exceeds both limits
    assert out.saturated == (True, True)
    zero = (0.0, 0.0)
    small = Controller(_ct(), 1e-3).update((0.0, 1.5707963), zero, (0, 1.5707963), zero, zero)
    assert not small.saturated[1]


def test_integral_action_removes_gravity_mismatch_offset():
    ctrl_params = dataclasses.replace(_mismatch_controller('pd_gravity', (60.0, 30.0),
                                                           (20.0, 8.0)),
                                      ki=(80.0, 40.0), integral_limit=(1.0, 1.0))
    sc = load_scenario('seed001')
    sc = dataclasses.replace(sc, duration=20.0,
                             trajectory={'type': 'hold', 'position': [0.4, 0.3]},
                             plant=dataclasses.replace(sc.plant, initial_position=(0.4, 0.3)),
                             controller=ctrl_params)
    res = run_closed_loop(sc)
    assert np.abs(res.error[-1]).max() < 1e-4


def test_anti_windup_clamps_the_integral():
    ctrl = Controller(_ct(ki=(10.0, 10.0), integral_limit=(0.05, 0.05),
                          torque_limit=(1e6, 1e6)), 1e-3)
    for _ in range(2000):  # 2 s of a 1 rad error would integrate to 2 rad s
        ctrl.update((1.0, 1.0), (0, 0), (0, 0), (0, 0), (0, 0))
    assert ctrl._z == pytest.approx([0.05, 0.05])
    sat = Controller(_ct(ki=(10.0, 10.0), torque_limit=(1.0, 1.0)), 1e-3)
    for _ in range(100):  # saturated in the direction of the error: no integration
        sat.update((1.0, 1.0), (0, 0), (0, 0), (0, 0), (0, 0))
    assert sat._z == [0.0, 0.0]


@pytest.mark.parametrize('kp,kd,ki,match', [((0.0, 1.0), (1, 1), None, r'kp\[0\]: must be > 0'),
                                            ((1, 1), (1, -2), None, r'kd\[1\]: must be > 0'),
                                            ((1, 1), (1, 1), (-1, 0), r'ki\[0\]: must be >= 0'),
                                            ((1, math.nan), (1, 1), None, 'finite'),
                                            ((1, 2, 3), (1, 1), None, 'kp: must have 2')])
def test_invalid_runtime_gains_are_refused(kp, kd, ki, match):
    ctrl = Controller(_ct(), 1e-3)
    with pytest.raises(ParameterError, match=match):
        ctrl.set_gains(kp, kd, ki)
    assert ctrl.kp == (25.0, 16.0)  # unchanged


def test_gains_from_wn_zeta_in_config():
    from manip_control.parameters import controller_from_dict
    co = controller_from_dict({'law': 'computed_torque', 'nominal': {'arm': {
        'm1': 3, 'm2': 2, 'l1': 1, 'l2': 1, 'lc1': 0.5, 'lc2': 0.5, 'I1': 0.2, 'I2': 0.1}},
        'wn': [5.0, 4.0], 'zeta': [1.0, 0.7], 'torque_limit': [50, 20]})
    assert co.kp == (25.0, 16.0)
    assert co.kd == pytest.approx((10.0, 5.6))


# --------------------------------------------------------------------------------------------
# friction feed-forward robust to over-estimation, drive inversion

def _hardware_like(coulomb_scale: float, friction_model: str):
    """
    Build the controller of config/hardware_params.yaml against its own nominal arm.

    Ideal torque actuators (a simulator or driver taking effort commands), exact sensors,
    the nominal rotors and viscous friction, the nominal Coulomb friction scaled by
    ``coulomb_scale``; a motion with rests, then a hold from 4.5 s.
    """
    sc = load_scenario('default')
    nominal = dataclasses.replace(sc.controller.nominal, eta=(1.0, 1.0), eta_back=(1.0, 1.0))
    friction = tuple(dataclasses.replace(f, tau_c=f.tau_c * coulomb_scale)
                     for f in nominal.friction)
    plant = dataclasses.replace(
        sc.plant, arm=nominal.arm, actuator='ideal', friction=friction,
        friction_model=friction_model, torque_limit=sc.controller.torque_limit,
        sensors=SensorParameters())
    traj = {'type': 'waypoints', 'times': [0.0, 1.5, 2.5, 4.5],
            'positions': [[0.0, 0.0], [0.4, -0.3], [0.4, -0.3], [-0.2, 0.3]]}
    return dataclasses.replace(sc, plant=plant, duration=10.0, trajectory=traj,
                               controller=dataclasses.replace(sc.controller, nominal=nominal))


@pytest.mark.parametrize('friction_model', ['smooth', 'karnopp'])
def test_friction_compensation_never_limit_cycles_with_0_to_150_percent_coulomb(friction_model):
    """No oscillation at the final hold whatever the true Coulomb friction (0 % to 150 %)."""
    for scale in (0.0, 0.25, 0.5, 1.0, 1.5):
        res = run_closed_loop(_hardware_like(scale, friction_model))
        # speed envelope over the 1 s windows from 7 s: a limit cycle keeps it up (the
        # measured-velocity feed-forward cycled at 0.57 rad/s with no Coulomb friction);
        # the smoothed plant friction may creep (no stiction) but slower and slower
        env = [np.abs(res.qd[(res.t >= t0) & (res.t < t0 + 1.0)]).max() for t0 in (7, 8, 9)]
        print(f'{friction_model} Coulomb x{scale:g}: max |qd| per second from 7 s '
              f'{", ".join(f"{v:.1e}" for v in env)} rad/s, final |e| '
              f'{np.abs(res.error[-1]).max():.1e} rad')
        assert env[2] < 1e-2, f'Coulomb x{scale}: still moving at {env[2]:.3g} rad/s'
        assert env[1] <= env[0] * 1.001 + 1e-12 and env[2] <= env[1] * 1.001 + 1e-12
        assert np.abs(res.error[-1]).max() < 0.15


def test_gear_inversion_delivers_the_law_torque_through_the_nominal_gear():
    """Hand derivation: at speed the gear passes eta forward, 1/eta_back backward."""
    eta, eta_back = (0.8, 0.9), (0.7, 0.6)
    rotors = (0.1, 0.05)
    nominal = NominalModel(arm=ARM, rotor_inertia=rotors, rotor_coupling=True,
                           gear_ratio=(100.0, 50.0), eta=eta, eta_back=eta_back)
    ideal = NominalModel(arm=ARM, rotor_inertia=rotors, rotor_coupling=True,
                         gear_ratio=(100.0, 50.0))
    jc2 = rotors[1] / 50.0
    for trial in range(40):
        q = RNG.uniform(-2, 2, 2)
        qd = RNG.uniform(-2, 2, 2)
        r = RNG.uniform(-2, 2, 2)
        rv = np.where(RNG.uniform(size=2) < 0.5, -1.0, 1.0) * RNG.uniform(1.0, 3.0, 2)
        ra = RNG.uniform(-20, 20, 2)
        args = (q, qd, r, rv, ra)
        out = Controller(_ct(nominal=nominal), 1e-3).update(*args)
        ref = Controller(_ct(nominal=ideal), 1e-3).update(*args)
        a = ra - np.array([10.0, 8.0]) * (qd - rv) - np.array([25.0, 16.0]) * (q - r)
        rotor = np.array([rotors[0] * a[0], jc2 * a[0] + rotors[1] * a[1]])
        y = np.array(ref.tau) - rotor   # torque the gear must hand the links
        mesh = np.array(out.tau) - rotor
        for j in range(2):
            motoring = y[j] * rv[j] > 0.0          # |rv| >= 100 eps: tanh = 1 to 1e-87
            expected = y[j] / eta[j] if motoring else y[j] * eta_back[j]
            assert mesh[j] == pytest.approx(expected, rel=1e-12, abs=1e-12)
    # at rest (qd_d = 0) nothing is inverted: the loss vanishes there
    rest = ((0.1, 0.2), (0.0, 0.0), (0.1, 0.2), (0.0, 0.0), (0.0, 0.0))
    out = Controller(_ct(nominal=nominal), 1e-3).update(*rest)
    ref = Controller(_ct(nominal=ideal), 1e-3).update(*rest)
    assert out.tau == ref.tau


def test_default_run_with_true_masses_shows_the_drive_inverted():
    """The default nominal model inverts the drive: only the masses are left to the lesson."""
    sc = load_scenario('default')
    nominal = sc.controller.nominal
    assert nominal.rotor_coupling and nominal.eta == (0.85, 0.85)
    assert nominal.eta_back == tuple(m.eta_back for m in sc.plant.motors)
    assert nominal.rotor_inertia == tuple(m.Jm * m.N ** 2 for m in sc.plant.motors)
    assert nominal.friction == sc.plant.friction
    true = dataclasses.replace(sc, controller=dataclasses.replace(
        sc.controller, nominal=dataclasses.replace(nominal, arm=sc.plant.arm)))
    no_gear = dataclasses.replace(true, controller=dataclasses.replace(
        true.controller, nominal=dataclasses.replace(true.controller.nominal, eta=(1.0, 1.0),
                                                     eta_back=(1.0, 1.0))))
    # after the start transient (the reference starts at speed): the late window, t >= 5 s
    runs = [run_closed_loop(s) for s in (true, no_gear)]
    inverted, not_inverted = (np.abs(r.error[r.t >= 5.0]).max(axis=0) for r in runs)
    print(f'true masses: late max |e| {inverted} with the gear inverted, {not_inverted} without')
    assert (inverted < 0.01).all()
    assert (not_inverted > 0.05).all()
