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
Tests of manip_control.actuators: DC motor armature, PI current drive, limits.

References are closed forms: a locked rotor (qd = 0) under a constant voltage V has
``i(t) = V/R (1 - exp(-R t / L))``; a PI current loop tuned by pole-zero cancellation
(``Kp_i = L wc``, ``Ki_i = R wc``) makes the locked-rotor current a first-order lag,
``i(t) = i_ref (1 - exp(-wc t))`` with ``x_i(t) = R i(t)``, as long as V stays below V_max.
"""

import math

from manip_control.actuators import clamp
from manip_control.actuators import current_derivative
from manip_control.actuators import current_reference
from manip_control.actuators import drive_voltage
from manip_control.actuators import gear_loss_torque
from manip_control.actuators import joint_torque
from manip_control.actuators import motor_derivatives
from manip_control.actuators import motor_torque
from manip_control.parameters import ArmParameters
from manip_control.parameters import DEFAULT_MOTORS
from manip_control.parameters import FrictionParameters
from manip_control.parameters import MotorParameters
from manip_control.parameters import PlantParameters
from manip_control.plant import Plant
import numpy as np
import pytest
from scipy.integrate import solve_ivp

WC = 2.0 * math.pi * 300.0


def _pi_motor(base: MotorParameters, wc: float = WC) -> MotorParameters:
    """Return the motor with an exactly pole-zero-cancelled PI current loop at bandwidth wc."""
    return MotorParameters(R=base.R, L=base.L, k_t=base.k_t, k_e=base.k_e, N=base.N,
                           eta=base.eta, Jm=base.Jm, i_max=base.i_max, V_max=base.V_max,
                           Kp_i=base.L * wc, Ki_i=base.R * wc)


def _step_closed_form(t, V, motor):
    return V / motor.R * (1.0 - np.exp(-motor.R * np.asarray(t) / motor.L))


def _rk4(f, y0, t_end, n):
    """Classical fixed-step Runge-Kutta 4 of dy/dt = f(y) over [0, t_end] in n steps."""
    h = t_end / n
    y = np.array(y0, dtype=float)
    out = [y.copy()]
    for _ in range(n):
        k1 = f(y)
        k2 = f(y + 0.5 * h * k1)
        k3 = f(y + 0.5 * h * k2)
        k4 = f(y + h * k3)
        y = y + h / 6.0 * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
        out.append(y.copy())
    return np.linspace(0.0, t_end, n + 1), np.array(out)


# --------------------------------------------------------------------------------------------
# armature equation, locked rotor


@pytest.mark.parametrize('motor', DEFAULT_MOTORS, ids=['joint1', 'joint2'])
@pytest.mark.parametrize('V', [12.0, -3.0])
def test_locked_rotor_current_step_solve_ivp(motor, V):
    t_end = 6.0 * motor.L / motor.R
    t_eval = np.linspace(0.0, t_end, 301)
    sol = solve_ivp(lambda t, y: [current_derivative(y[0], V, 0.0, motor)], (0.0, t_end),
                    [0.0], method='RK45', t_eval=t_eval, rtol=1e-11, atol=1e-12)
    assert sol.success
    ref = _step_closed_form(t_eval, V, motor)
    assert np.max(np.abs(sol.y[0] - ref)) < 1e-8 * abs(V / motor.R)
    # the time constant is L/R: 63.2 % of V/R after one L/R
    assert _step_closed_form(motor.L / motor.R, V, motor) == \
        pytest.approx(V / motor.R * (1 - math.exp(-1)))


@pytest.mark.parametrize('motor', DEFAULT_MOTORS, ids=['joint1', 'joint2'])
def test_locked_rotor_current_step_fixed_step_rk4(motor):
    V = 24.0
    tau = motor.L / motor.R
    t, y = _rk4(lambda y: np.array([current_derivative(y[0], V, 0.0, motor)]), [0.0],
                5.0 * tau, 500)
    ref = _step_closed_form(t, V, motor)
    # RK4 with h = tau/100: global error ~ (h/tau)^4 / 120 relative, far below 1e-9
    assert np.max(np.abs(y[:, 0] - ref)) < 1e-9 * V / motor.R


def test_current_derivative_back_emf_and_formula():
    mo = DEFAULT_MOTORS[0]
    # independent numbers: (10 - 0.3*2 - 0.07*100*1.5) / 3e-4
    assert current_derivative(2.0, 10.0, 1.5, mo) == pytest.approx(
        (10.0 - 0.6 - 10.5) / 3e-4, rel=1e-12)
    # stalled by back-EMF: V = k_e N qd gives zero derivative at i = 0
    assert current_derivative(0.0, 7.0, 1.0, mo) == pytest.approx(0.0, abs=1e-9)


def test_motor_torque():
    mo = DEFAULT_MOTORS[1]
    assert motor_torque(3.0, mo) == pytest.approx(100.0 * 0.05 * 3.0, rel=1e-12)
    assert motor_torque(-3.0, mo) == -motor_torque(3.0, mo)


# --------------------------------------------------------------------------------------------
# gearbox: direction-dependent efficiency

GEAR = MotorParameters(N=50.0, k_t=0.1, eta=0.8, eta_back=0.6)


@pytest.mark.parametrize('i', [2.0, -3.0])
def test_gear_passes_eta_forward_and_needs_1_over_eta_back_backward(i):
    eps = 0.01
    nk = 50.0 * 0.1 * i
    fast = 50 * eps  # tanh(50) = 1 to double precision
    # motor drives the load: speed in the direction of the torque
    forward = joint_torque(i, math.copysign(fast, i), GEAR, eps)
    assert forward == pytest.approx(0.8 * nk, rel=1e-12)
    # the load drives the motor: speed against the torque
    backward = joint_torque(i, -math.copysign(fast, i), GEAR, eps)
    assert backward == pytest.approx(nk / 0.6, rel=1e-12)
    # at rest the smoothed loss vanishes
    assert joint_torque(i, 0.0, GEAR, eps) == nk


def test_gear_loss_power_is_never_negative():
    eps = 0.01
    for i in np.linspace(-5.0, 5.0, 41):
        for qd in np.linspace(-0.1, 0.1, 81):
            loss = gear_loss_torque(motor_torque(i, GEAR), qd, GEAR, eps) * qd
            assert loss >= 0.0
            # equivalently: joint power <= motor power (motoring), >= (back-driven)
            assert joint_torque(i, qd, GEAR, eps) * qd <= motor_torque(i, GEAR) * qd + 1e-15


@pytest.mark.parametrize('i, rotor', [(2.0, 3.0), (-3.0, 4.0), (2.0, -1.0)])
def test_gear_loss_is_charged_on_the_mesh_torque(i, rotor):
    """The rotor's share of the motor torque never crosses the mesh (hand derivation)."""
    eps = 0.01
    nk = 50.0 * 0.1 * i
    mesh = nk - rotor
    for qd in (0.5, -0.5):
        tau = joint_torque(i, qd, GEAR, eps, rotor)
        # what reaches the link: eta T when the mesh power T qd is positive, T / eta_back else
        link = 0.8 * mesh if mesh * qd > 0.0 else mesh / 0.6
        assert tau - rotor == pytest.approx(link, rel=1e-12)


def test_gear_is_lossless_with_unit_efficiencies():
    ideal = MotorParameters(eta=1.0, eta_back=1.0)
    for i, qd in ((3.0, 1.0), (3.0, -1.0), (-2.0, 0.004)):
        assert joint_torque(i, qd, ideal, 0.01) == motor_torque(i, ideal)


# --------------------------------------------------------------------------------------------
# PI current drive


@pytest.mark.parametrize('base', DEFAULT_MOTORS, ids=['joint1', 'joint2'])
@pytest.mark.parametrize('frac', [0.7, -0.3])
def test_pi_drive_locked_rotor_follows_first_order_lag(base, frac):
    motor = _pi_motor(base)
    i_ref = frac * motor.i_max
    # the initial voltage Kp_i i_ref is the largest; it must not saturate for the closed form
    assert abs(motor.Kp_i * i_ref) < motor.V_max

    def rhs(t, y):
        return motor_derivatives(y[0], y[1], i_ref, 0.0, motor)

    t_end = 8.0 / WC
    t_eval = np.linspace(0.0, t_end, 401)
    sol = solve_ivp(rhs, (0.0, t_end), [0.0, 0.0], method='RK45', t_eval=t_eval,
                    rtol=1e-11, atol=1e-12)
    assert sol.success
    i_cf = i_ref * (1.0 - np.exp(-WC * t_eval))
    assert np.max(np.abs(sol.y[0] - i_cf)) < 1e-7 * abs(i_ref)
    # the integrator carries the steady-state voltage R i
    assert np.max(np.abs(sol.y[1] - motor.R * i_cf)) < 1e-7 * abs(motor.R * i_ref)


def test_default_drives_are_the_pole_zero_cancelled_ones():
    # the PI test above uses exact L wc, R wc; the defaults are those rounded to 4 digits
    for base in DEFAULT_MOTORS:
        exact = _pi_motor(base)
        assert base.Kp_i == pytest.approx(exact.Kp_i, rel=1e-3)
        assert base.Ki_i == pytest.approx(exact.Ki_i, rel=1e-3)


def test_plant_currents_follow_closed_form_with_nearly_locked_joints():
    """The Plant's own integrator: huge link inertia makes qd (and back-EMF) negligible."""
    motors = tuple(_pi_motor(m) for m in DEFAULT_MOTORS)
    params = PlantParameters(
        arm=ArmParameters(m1=3.0, m2=2.0, l1=1.0, l2=1.0, lc1=0.5, lc2=0.5, I1=1e9, I2=1e9,
                          plane='horizontal'),
        friction=(FrictionParameters(), FrictionParameters()),
        motors=motors, rotor_inertia=False, substeps=50, start_in_equilibrium=False)
    period = 1e-3
    plant = Plant(params, period)
    tau_cmd = (40.0, -10.0)
    i_ref = [t / (m.N * m.k_t) for t, m in zip(tau_cmd, motors)]
    for k in range(1, 6):
        plant.step(*tau_cmd)
        t = k * period
        for j in range(2):
            expected = i_ref[j] * (1.0 - math.exp(-WC * t))
            assert plant.current[j] == pytest.approx(expected, rel=1e-6, abs=1e-9)
        assert max(abs(v) for v in plant.velocity) < 1e-5


# --------------------------------------------------------------------------------------------
# limits


def test_clamp():
    assert clamp(3.0, 2.0) == 2.0
    assert clamp(-3.0, 2.0) == -2.0
    assert clamp(1.5, 2.0) == 1.5
    assert clamp(-2.0, 2.0) == -2.0


@pytest.mark.parametrize('motor', DEFAULT_MOTORS, ids=['joint1', 'joint2'])
def test_current_reference_scales_and_clamps_at_i_max(motor):
    kt_joint = motor.N * motor.k_t  # the drive converts through the ideal transmission
    assert current_reference(10.0, motor) == pytest.approx(10.0 / kt_joint, rel=1e-12)
    assert current_reference(-10.0, motor) == pytest.approx(-10.0 / kt_joint, rel=1e-12)
    assert current_reference(0.0, motor) == 0.0
    edge = kt_joint * motor.i_max
    assert current_reference(edge * 0.999, motor) == pytest.approx(0.999 * motor.i_max)
    assert current_reference(edge * 1.001, motor) == motor.i_max
    assert current_reference(1e6, motor) == motor.i_max
    assert current_reference(-1e6, motor) == -motor.i_max


def test_drive_voltage_clamps_at_v_max_and_reports_saturation():
    mo = DEFAULT_MOTORS[0]
    # unsaturated: Kp (i_ref - i) + x
    v, sat = drive_voltage(5.0, 2.0, 1.0, mo)
    assert v == pytest.approx(mo.Kp_i * 3.0 + 1.0, rel=1e-12) and sat is False
    # saturated high and low (by the proportional part, by the integrator)
    v, sat = drive_voltage(15.0, -80.0, 0.0, mo)
    assert v == mo.V_max and sat is True
    v, sat = drive_voltage(0.0, 0.0, -60.0, mo)
    assert v == -mo.V_max and sat is True
    # just inside the limit
    v, sat = drive_voltage(0.0, 0.0, mo.V_max - 1e-6, mo)
    assert v == pytest.approx(mo.V_max - 1e-6) and sat is False


def test_integrator_frozen_while_saturated():
    mo = DEFAULT_MOTORS[1]
    # saturated: dx = 0, and the armature sees V_max
    i, x, i_ref, qd = 1.0, 45.0, 6.0, 0.2
    assert mo.Kp_i * (i_ref - i) + x > mo.V_max
    di, dx = motor_derivatives(i, x, i_ref, qd, mo)
    assert dx == 0.0
    assert di == pytest.approx((mo.V_max - mo.R * i - mo.k_e * mo.N * qd) / mo.L, rel=1e-12)
    di, dx = motor_derivatives(-i, -x, -i_ref, -qd, mo)
    assert dx == 0.0
    assert di == pytest.approx((-mo.V_max + mo.R * i + mo.k_e * mo.N * qd) / mo.L, rel=1e-12)
    # not saturated: dx = Ki (i_ref - i)
    di, dx = motor_derivatives(1.0, 2.0, 3.0, 0.1, mo)
    assert dx == pytest.approx(mo.Ki_i * 2.0, rel=1e-12)
    v = mo.Kp_i * 2.0 + 2.0
    assert di == pytest.approx((v - mo.R * 1.0 - mo.k_e * mo.N * 0.1) / mo.L, rel=1e-12)


def test_saturated_step_response_integrator_stays_put():
    """Large step with a low bus: V pinned at V_max while the current rises as V_max/R."""
    base = DEFAULT_MOTORS[0]
    motor = MotorParameters(R=base.R, L=base.L, k_t=base.k_t, k_e=base.k_e, N=base.N,
                            eta=base.eta, Jm=base.Jm, i_max=base.i_max, V_max=2.0,
                            Kp_i=base.Kp_i, Ki_i=base.Ki_i)
    i_ref = motor.i_max  # Kp_i * 15 = 8.5 V > 2 V: saturated from the start
    t_end = 0.2 * motor.L / motor.R
    t_eval = np.linspace(0.0, t_end, 51)
    sol = solve_ivp(lambda t, y: motor_derivatives(y[0], y[1], i_ref, 0.0, motor),
                    (0.0, t_end), [0.0, 0.0], t_eval=t_eval, rtol=1e-11, atol=1e-12)
    assert sol.success
    # still saturated at the end (so the closed form below applies throughout)
    assert motor.Kp_i * (i_ref - sol.y[0, -1]) > motor.V_max
    assert np.all(sol.y[1] == 0.0)
    assert np.max(np.abs(sol.y[0] - _step_closed_form(t_eval, motor.V_max, motor))) < 1e-8
