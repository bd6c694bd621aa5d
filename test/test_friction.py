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

"""Tests of manip_control.friction: viscous + smoothed Coulomb (+ Stribeck), Karnopp stiction."""

import dataclasses

from manip_control.dynamics import TwoLinkModel
from manip_control.friction import breakaway_torque
from manip_control.friction import friction_torque
from manip_control.friction import friction_torque_scalar
from manip_control.friction import karnopp_friction
from manip_control.friction import sliding_friction_scalar
from manip_control.parameters import ArmParameters
from manip_control.parameters import FrictionParameters
from manip_control.parameters import PlantParameters
from manip_control.plant import Plant
import numpy as np
import pytest

FR = (FrictionParameters(b=0.5, tau_c=0.8, eps=0.01),
      FrictionParameters(b=0.3, tau_c=0.4, eps=0.05))
FR_STRIBECK = FrictionParameters(b=0.2, tau_c=0.5, eps=1e-4, tau_s=0.3, v_s=0.1)

SPEEDS = np.concatenate([-np.logspace(-6, 2, 60), [0.0], np.logspace(-6, 2, 60)])


def _reference(v, b, tau_c, eps, tau_s=0.0, v_s=0.1):
    """Independent numpy evaluation of b v + (tau_c + tau_s exp(-(v/v_s)^2)) tanh(v/eps)."""
    v = np.asarray(v, dtype=float)
    return b * v + (tau_c + tau_s * np.exp(-np.square(v / v_s))) * np.tanh(v / eps)


@pytest.mark.parametrize('fr', FR + (FR_STRIBECK,))
def test_matches_independent_numpy_evaluation(fr):
    got = np.array([friction_torque_scalar(float(v), fr) for v in SPEEDS])
    ref = _reference(SPEEDS, fr.b, fr.tau_c, fr.eps, fr.tau_s, fr.v_s)
    assert np.allclose(got, ref, rtol=1e-13, atol=1e-15)


def test_vector_api_matches_reference_per_joint():
    rng = np.random.default_rng(0)
    for qd in rng.uniform(-2.0, 2.0, (50, 2)):
        got = friction_torque(qd, FR)
        assert got.shape == (2,) and got.dtype == np.float64
        for j in range(2):
            ref = _reference(qd[j], FR[j].b, FR[j].tau_c, FR[j].eps)
            assert got[j] == pytest.approx(float(ref), rel=1e-13, abs=1e-15)


@pytest.mark.parametrize('fr', FR + (FR_STRIBECK,))
def test_odd(fr):
    for v in SPEEDS:
        assert friction_torque_scalar(-v, fr) == -friction_torque_scalar(v, fr)
    assert friction_torque_scalar(0.0, fr) == 0.0


@pytest.mark.parametrize('fr', FR + (FR_STRIBECK,))
def test_smooth_across_zero(fr):
    # continuity: |f(h) - f(-h)| -> 0 with h
    for h in (1e-4, 1e-6, 1e-8):
        h = h * fr.eps
        assert abs(friction_torque_scalar(h, fr) - friction_torque_scalar(-h, fr)) < \
            4.0 * (fr.b + (fr.tau_c + fr.tau_s) / fr.eps) * h
    # continuous derivative: one-sided difference quotients on both sides agree with each
    # other and with the analytic slope at 0, f'(0) = b + (tau_c + tau_s) / eps
    slope0 = fr.b + (fr.tau_c + fr.tau_s) / fr.eps
    h = 1e-4 * fr.eps
    for v in (0.0, 1e-3 * fr.eps):
        right = (friction_torque_scalar(v + h, fr) - friction_torque_scalar(v, fr)) / h
        left = (friction_torque_scalar(v, fr) - friction_torque_scalar(v - h, fr)) / h
        assert right == pytest.approx(left, rel=1e-3)
        assert right == pytest.approx(slope0, rel=1e-3)
        assert left == pytest.approx(slope0, rel=1e-3)
    # the derivative, sampled densely through zero, has no jump
    v = np.linspace(-5 * fr.eps, 5 * fr.eps, 2001)
    f = np.array([friction_torque_scalar(float(x), fr) for x in v])
    d = np.diff(f) / np.diff(v)
    assert np.max(np.abs(np.diff(d))) < 0.02 * slope0


@pytest.mark.parametrize('fr', FR)
def test_tends_to_viscous_plus_coulomb_far_from_zero(fr):
    for v in (50 * fr.eps, 3.0, 40.0):
        assert friction_torque_scalar(v, fr) == pytest.approx(fr.b * v + fr.tau_c, rel=1e-12)
        assert friction_torque_scalar(-v, fr) == pytest.approx(-fr.b * v - fr.tau_c,
                                                               rel=1e-12)


def test_stribeck_adds_tau_s_at_low_speed_and_vanishes_at_high_speed():
    fr = FR_STRIBECK
    no_s = FrictionParameters(b=fr.b, tau_c=fr.tau_c, eps=fr.eps, tau_s=0.0, v_s=fr.v_s)
    # eps << v << v_s: the full breakaway level tau_c + tau_s
    v = 0.002
    assert friction_torque_scalar(v, fr) == pytest.approx(fr.b * v + fr.tau_c + fr.tau_s,
                                                          rel=1e-3)
    assert friction_torque_scalar(v, fr) - friction_torque_scalar(v, no_s) == \
        pytest.approx(fr.tau_s, rel=1e-3)
    assert friction_torque_scalar(-v, fr) == pytest.approx(-(fr.b * v + fr.tau_c + fr.tau_s),
                                                           rel=1e-3)
    # at v = v_s the extra term is tau_s / e
    assert friction_torque_scalar(fr.v_s, fr) - friction_torque_scalar(fr.v_s, no_s) == \
        pytest.approx(fr.tau_s * np.exp(-1.0), rel=1e-9)
    # v >> v_s: Stribeck term gone
    for v in (0.6, 2.0):
        assert friction_torque_scalar(v, fr) == pytest.approx(fr.b * v + fr.tau_c, rel=1e-9)
        assert friction_torque_scalar(v, fr) - friction_torque_scalar(v, no_s) < 1e-9


@pytest.mark.parametrize('qd', [np.zeros(3), np.zeros(1), np.zeros((2, 1)), np.zeros((1, 2)),
                                0.0, [[0.1, 0.2]]])
def test_friction_torque_rejects_wrong_shape(qd):
    with pytest.raises(ValueError, match='shape'):
        friction_torque(qd, FR)


# --------------------------------------------------------------------------------------------
# Karnopp stiction

STICK = (FrictionParameters(b=0.5, tau_c=2.0, eps=0.01, tau_s=1.0, v_s=0.1, v_stick=1e-3),
         FrictionParameters(b=0.3, tau_c=1.0, eps=0.01, tau_s=0.5, v_s=0.1, v_stick=1e-3))
M = np.array([[4.0, 1.5], [1.5, 1.0]])


def test_karnopp_both_stuck_hold_any_torque_below_breakaway():
    r = np.array([2.9, -1.4])  # breakaway levels 3.0 and 1.5
    f, held = karnopp_friction([0.0, 5e-4], r, M, STICK)
    np.testing.assert_array_equal(f, r)
    assert held == [True, True]
    assert breakaway_torque(STICK[0]) == 3.0


def test_karnopp_breakaway_and_the_other_joint_stays_stuck():
    r = np.array([3.3, 0.2])
    f, held = karnopp_friction([0.0, 0.0], r, M, STICK)
    assert f[0] == 3.0 and held == [False, True]  # joint 1 broke away at F_s
    # joint 2 held: its acceleration is zero, so its row gives f2 = r2 - M21 qdd1
    qdd1 = (r[0] - f[0]) / M[0, 0]
    assert f[1] == pytest.approx(r[1] - M[1, 0] * qdd1, rel=1e-14)
    qdd = np.linalg.solve(M, r - f)
    assert qdd[1] == pytest.approx(0.0, abs=1e-15) and qdd[0] > 0.0


def test_karnopp_sliding_joint_uses_the_sign_law():
    for v in (0.002, -0.3, 4.0):
        expected = 0.5 * v + (2.0 + 1.0 * np.exp(-(v / 0.1) ** 2)) * np.sign(v)
        assert sliding_friction_scalar(v, STICK[0]) == pytest.approx(expected, rel=1e-14)
    # joint 1 slides, joint 2 stuck: f1 from the law, f2 keeps qdd2 = 0
    r = np.array([10.0, 3.0])
    f, held = karnopp_friction([0.5, 0.0], r, M, STICK)
    assert held == [False, True]
    assert f[0] == pytest.approx(sliding_friction_scalar(0.5, STICK[0]), rel=1e-14)
    assert np.linalg.solve(M, r - f)[1] == pytest.approx(0.0, abs=1e-14)


def _flat_plant(model):
    """Horizontal plane, ideal torque: only the commanded torque and friction act."""
    arm = ArmParameters(plane='horizontal')
    return PlantParameters(arm=arm, actuator='ideal', rotor_inertia=False, friction=STICK,
                           friction_model=model)


def test_torque_below_breakaway_leaves_the_joint_at_rest():
    plant = Plant(_flat_plant('karnopp'), 1e-3)
    for _ in range(500):
        plant.step(0.95 * 3.0, 0.0)
    assert plant.position == (0.0, 0.0) and plant.velocity == (0.0, 0.0)
    # the smoothed model cannot hold it: the same torque makes the joint creep away
    smooth = Plant(_flat_plant('smooth'), 1e-3)
    for _ in range(500):
        smooth.step(0.95 * 3.0, 0.0)
    assert smooth.position[0] > 1e-3


def test_torque_above_breakaway_moves_the_joint_as_predicted():
    pl = _flat_plant('karnopp')
    plant = Plant(pl, 1e-3)
    tau = 3.6
    plant.step(tau, 0.0)
    # joint 2 stays stuck (its friction need |M21 qdd1| is below its breakaway), so joint 1
    # accelerates as a single body: M11 qdd1 = tau - F_s, then tau - tau_c - b v once sliding
    m11 = TwoLinkModel(pl.arm).inertia_matrix([0.0, 0.0])[0, 0]
    assert plant.velocity[1] == 0.0
    a_break = (tau - 3.0) / m11
    assert 0.5 * a_break * 1e-6 * 0.99 < plant.position[0] < 0.5 * (tau - 2.0) / m11 * 1e-6
    for _ in range(299):
        plant.step(tau, 0.0)
    assert plant.position[0] > 3e-3 and plant.position[1] == 0.0


def test_karnopp_option_is_validated():
    with pytest.raises(ValueError, match='friction_model'):
        PlantParameters(friction_model='lugre')
    with pytest.raises(ValueError, match='v_stick'):
        FrictionParameters(v_stick=0.0)
    assert dataclasses.replace(_flat_plant('karnopp'), friction_model='smooth')
