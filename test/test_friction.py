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
import math

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
    f, held = karnopp_friction([0.0, 0.0], r, M, STICK)
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


# --------------------------------------------------------------------------------------------
# Karnopp stiction against an independent event-driven reference

# joint 1 commands above and below its breakaway (3 N·m), joint 2 (1.5 N·m) driven mostly
# through the coupling; each held 0.25 s (horizontal plane: no gravity, W_in = u . dq exactly)
SCHEDULE = [(4.0, 0.0), (-1.0, 0.6), (3.5, -0.5), (-4.5, 1.7), (0.5, -1.0), (-3.2, 0.0),
            (0.0, 2.0), (2.0, -0.3)]
HOLD = 0.25


def _stick_plant():
    return PlantParameters(arm=ArmParameters(plane='horizontal'), actuator='ideal',
                           rotor_inertia=False, friction=STICK, friction_model='karnopp',
                           torque_limit=(50.0, 50.0))


def _event_reference(arm, schedule, hold, t_out):
    """
    Event-driven Karnopp/Coulomb reference: scipy solve_ivp (rtol 1e-11) between events.

    Written from the textbook 2R equations, independently of manip_control. Modes: a joint
    is stuck (velocity exactly 0, friction whatever holds it, up to F_s) or slides in a
    fixed direction d (friction b v + (tau_c + tau_s exp(-(v/v_s)^2)) d); events end a
    slide when its velocity reaches zero and a stick when the holding friction reaches F_s.
    """
    from scipy.integrate import solve_ivp

    m1, m2, l1, lc1, lc2, i1, i2 = arm.m1, arm.m2, arm.l1, arm.lc1, arm.lc2, arm.I1, arm.I2
    fs = [fr.tau_c + fr.tau_s for fr in STICK]

    def mass(q2):
        c = math.cos(q2)
        m12 = i2 + m2 * (lc2 ** 2 + l1 * lc2 * c)
        return np.array([[i1 + i2 + m1 * lc1 ** 2 + m2 * (l1 ** 2 + lc2 ** 2 + 2 * l1 * lc2 * c),
                          m12], [m12, i2 + m2 * lc2 ** 2]])

    def solve(x, u, mode):
        """Accelerations and the stuck joints' holding friction for a mode (d or 0)."""
        mm = mass(x[1])
        hs = m2 * l1 * lc2 * math.sin(x[1])
        r = np.array([u[0] + hs * (2 * x[2] * x[3] + x[3] ** 2), u[1] - hs * x[2] ** 2])
        f = np.zeros(2)
        for j, fr in enumerate(STICK):
            if mode[j]:
                v = x[2 + j]
                f[j] = fr.b * v + (fr.tau_c + fr.tau_s * math.exp(-(v / fr.v_s) ** 2)) * mode[j]
        free = [j for j in range(2) if mode[j]]
        qdd = np.zeros(2)
        if free:
            qdd[free] = np.linalg.solve(mm[np.ix_(free, free)], (r - f)[free])
        hold = r - mm @ qdd  # the friction the stuck joints need
        return qdd, hold

    def settle(x, u, mode):
        """Mode at a point where the joints with mode 0 are at rest (Karnopp's rule)."""
        mode = list(mode)
        while True:
            _, hold = solve(x, u, mode)
            broke = [j for j in range(2) if mode[j] == 0 and abs(hold[j]) > fs[j]]
            if not broke:
                return mode
            j = max(broke, key=lambda k: abs(hold[k]) - fs[k])
            mode[j] = 1.0 if hold[j] > 0 else -1.0

    x = np.zeros(4)
    mode = [0.0, 0.0]
    out = []
    t_out = list(t_out)
    for k, u in enumerate(schedule):
        t0, t1 = k * hold, (k + 1) * hold
        mode = settle(x, u, mode)
        t = t0
        while t < t1:
            evs = []
            for j in range(2):
                if mode[j]:
                    ev = (lambda jj, dj: lambda _t, y: y[2 + jj] * dj)(j, mode[j])
                else:
                    ev = (lambda jj: lambda _t, y: abs(solve(y, u, mode)[1][jj]) - fs[jj])(j)
                ev.terminal = True
                ev.direction = -1.0 if mode[j] else 1.0
                evs.append(ev)
            mask = [0.0 if m == 0 else 1.0 for m in mode]
            sol = solve_ivp(lambda _t, y: np.concatenate([y[2:] * mask,
                                                          solve(y, u, mode)[0]]),
                            (t, t1), x, method='DOP853', rtol=1e-11, atol=1e-13,
                            events=evs, dense_output=True)
            assert sol.success
            while t_out and t_out[0] <= sol.t[-1] + 1e-15:
                out.append(sol.sol(t_out.pop(0)))
            x = sol.y[:, -1].copy()
            t = sol.t[-1]
            if sol.status == 1:  # an event: stop the sliding joint or release the stuck one
                for j in range(2):
                    if len(sol.t_events[j]):
                        if mode[j]:
                            x[2 + j] = 0.0
                            mode[j] = 0.0
                mode = settle(x, u, mode)
    return np.array(out)


def _run_schedule(pl, period):
    plant = Plant(pl, period, compiled=False)
    n_hold = int(round(HOLD / period))
    xs = [plant.state]
    us = []
    for u in SCHEDULE:
        for _ in range(n_hold):
            plant.step(*u)
            xs.append(plant.state)
            us.append(u)
    return np.array(xs), np.array(us)


@pytest.mark.parametrize('v_stick', [1e-3, 1e-6])
def test_karnopp_stuck_joints_do_not_drift_and_friction_never_gives_energy(v_stick):
    pl = _stick_plant()
    pl = dataclasses.replace(pl, friction=tuple(dataclasses.replace(f, v_stick=v_stick)
                                                for f in pl.friction))
    period = 1e-3
    xs, us = _run_schedule(pl, period)
    model = TwoLinkModel(pl.arm)
    # 1. stuck joints do not drift at all (velocity exactly zero, position constant)
    stuck_ticks = 0
    worst_drift = 0.0
    for j in range(2):
        still = (xs[:-1, 2 + j] == 0.0) & (xs[1:, 2 + j] == 0.0)
        stuck_ticks += int(still.sum())
        drift = np.abs(np.diff(xs[:, j]))[still] / period
        worst_drift = max(worst_drift, drift.max(initial=0.0))
    assert stuck_ticks > 1000            # both joints really stick, for long
    assert worst_drift <= 1e-9
    # 2. the friction's dissipated energy W_in - dT never decreases (W_in = u . dq exactly)
    kinetic = np.array([model.kinetic_energy(x[0:2], x[2:4]) for x in xs])
    work = np.concatenate([[0.0], np.cumsum(np.sum(us * np.diff(xs[:, 0:2], axis=0), axis=1))])
    dissipated = work - (kinetic - kinetic[0])
    steps = np.diff(dissipated)
    print(f'v_stick {v_stick:g}: stuck ticks {stuck_ticks}, drift {worst_drift:.1e} rad/s, '
          f'min dissipation step {steps.min():.1e} J, dissipated {dissipated[-1]:.3f} J')
    assert steps.min() >= -1e-12, f'dissipated energy decreased by {-steps.min():.3g} J'
    assert dissipated[-1] > 0.5


def test_karnopp_agrees_with_an_event_driven_reference():
    """With a narrow stick band the stick/slip motion is the exact (event-driven) one."""
    pl = _stick_plant()
    pl = dataclasses.replace(pl, friction=tuple(dataclasses.replace(f, v_stick=1e-6)
                                                for f in pl.friction))
    period = 1e-3
    xs, _ = _run_schedule(pl, period)
    t = np.arange(len(xs)) * period
    ref = _event_reference(pl.arm, SCHEDULE, HOLD, t)
    pos_err = np.abs(ref[:, 0:2] - xs[:, 0:2]).max()
    vel_err = np.abs(ref[:, 2:4] - xs[:, 2:4]).max()
    stuck_ref = np.abs(ref[:, 2:4]) < 1e-9
    stuck_sim = xs[:, 2:4] == 0.0
    mismatch = int((stuck_ref != stuck_sim).sum())
    print(f'karnopp vs event reference: max |dq| {pos_err:.2e} rad, max |dqd| {vel_err:.2e} '
          f'rad/s, stuck-flag mismatches {mismatch} of {stuck_ref.size} samples, '
          f'{int(stuck_ref.sum())} stuck')
    assert stuck_ref.sum() > 1000
    assert pos_err < 1e-6
    assert vel_err < 1e-5
    assert mismatch == 0
