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
The simulated 2R arm: rigid body + rotors + friction + DC motors with PI current drives.

State ``x = [q1, q2, qd1, qd2, i1, i2, x_i1, x_i2]`` (rad, rad/s, A, V); in ``ideal`` actuator
mode the current and integrator states stay zero. The command ``tau_cmd`` is held constant
(zero-order hold) over each control period. The right-hand side, in the order it is
computed (the reference :func:`plant_dynamics`, the inlined fast path of :class:`Plant` and
any compiled kernel implement exactly these equations)::

    rigid body + rotors (manip_control.dynamics; Jr = Jm N^2, rotor 2 rides on link 1):
      a = I1 + I2 + m1 lc1^2 + m2 (l1^2 + lc2^2) + Jr1 + c11,  b = m2 l1 lc2
      d = I2 + m2 lc2^2,  d12 = d + c12,  d22 = d + Jr2
      (Jr1, Jr2) = (Jm1 N1^2, Jm2 N2^2) if rotor_inertia else 0
      (c11, c12) = (Jm2, Jm2 N2) if rotor_inertia and rotor_coupling else 0
      M = [[a + 2 b cos q2, d12 + b cos q2], [d12 + b cos q2, d22]]
      c = [h (2 qd1 qd2 + qd2^2), -h qd1^2],  h = -b sin q2
      g = [G1 cos q1 + G2 cos(q1 + q2), G2 cos(q1 + q2)],  G1 = (m1 lc1 + m2 l1) g0,
          G2 = m2 lc2 g0
    drive and motor, per joint j (motor mode; manip_control.actuators):
      i_ref = clamp(tau_cmd / (N k_t), +-i_max)                   (held over the period)
      V = clamp(Kp_i (i_ref - i) + x_i, +-V_max)
      dx_i/dt = Ki_i (i_ref - i) if |Kp_i (i_ref - i) + x_i| <= V_max else 0
      di/dt = (V - R i - k_e N qd) / L
      n = N k_t i                                     (motor torque referred to the joint)
    gear loss on the mesh torque (the rotors sit upstream of the gears):
      T = n - D qdd,  D = [[Jr1, 0], [c12, Jr2]]      (T_j = N_j (k_t i_j - Jm_j ddtheta_mj))
      s = tanh(qd / eps),  k_f = 1 - eta,  k_b = 1 / eta_back - 1
      wa = (k_f + k_b) / 2,  wb = (k_f - k_b) / 2
      tau_gear = (wa |T| + wb T s) s = kappa(sigma) T,  kappa(sigma) = (wa sigma + wb s) s,
          sigma = sign(T)
      tau_m = n - tau_gear
    ideal mode: tau_m = clamp(tau_cmd, +-torque_limit) (no gear loss), di/dt = dx_i/dt = 0
    friction (manip_control.friction), per joint:
      smooth:  f = b qd + (tau_c + tau_s exp(-(qd/v_s)^2)) s
      karnopp: qd != 0: f = b qd + (tau_c + tau_s exp(-(qd/v_s)^2)) sign(qd);
               stuck joints (qd == 0 exactly): f solves (A^-1 (r - f))_j = 0, unless
               |f_j| would exceed the breakaway torque F_s = tau_c + tau_s: then
               f_j = F_s sign(f_j) and the joint slides (release exactly at breakaway)
    equation of motion, solved with the loss (kappa = diag(kappa_j)):
      (M - kappa D) qdd = (n - kappa n) - c - g - f =: r - f,   A = M - kappa D
      held joints: qdd_j = 0

The loss makes the equation implicit: ``T`` depends on ``qdd`` through the rotor
accelerations. For a given sign pattern ``sigma`` of the mesh torques the loss is linear in
``T``, so ``qdd`` follows from one 2x2 solve with ``A``; the pattern is then checked
(``sigma_j T_j >= 0`` for every joint whose loss depends on it, ``wa_j s_j != 0``). The
patterns are tried in the order: the signs of ``n`` (almost always right: the rotor torque
``D qdd`` is a few per cent of ``n``), joint 1 flipped, joint 2 flipped, both flipped; the
first consistent one is the solution. For a single joint it is unique when
``Jr_j max(k_f, k_b) < M_jj``, always true for ``eta_back > 1/2`` since ``M_jj >= Jr_j``
(the left side is then strictly increasing in ``qdd_j``); for the coupled pair uniqueness is
not proven, and were no pattern consistent (a self-locking gear driving a much lighter
link), the first one is used. Without rotor inertia ``T = n`` and the loss is
explicit.

Payload (``params.payload``, mass ``m_p`` > 0): at the first control tick ``t_k >= at_time``
the point mass is attached at the tip of link 2 and the step goes on with the arm of
:func:`loaded_parameters` (``m2``, ``lc2``, ``I2`` of
:func:`manip_control.parameters.loaded_arm`); q and qd are continuous (no impact);
:meth:`Plant.reset` detaches it. :func:`plant_dynamics` is time-invariant: give it the
loaded parameters for the time after the pick-up. The compiled kernel does not implement it
(:func:`manip_control.kernel.plant_unsupported` names it, so the Python step runs).

Initial state (:func:`initial_state`): ``q0``, ``qd0`` from the parameters; currents and
integrators zero, or, with ``start_in_equilibrium`` (default) in motor mode, the values that
hold ``q0`` at rest: ``i = clamp(g_j(q0) / (N k_t), +-i_max)``, ``x_i = R i + k_e N qd0``
(then ``di/dt = 0`` and, with ``i_ref = i``, ``dx_i/dt = 0``; the gear loss and the smooth
friction vanish at rest, so ``qdd = 0`` when ``qd0 = 0``).

Integration is fixed-step classical Runge-Kutta 4 with ``substeps`` steps per control period:
deterministic, and accurate for the current loop's time constants (about 0.5 ms for the
default drives) at the default 4 sub-steps of 0.25 ms (see test_plant.py, which compares a
10 s run with a Radau solution at rtol 1e-10).

Karnopp friction: stuck is exact (velocity held at exactly zero). The stuck flag is that
zero itself rather than an extra state: ``qd_j == 0.0`` exactly only happens at a stop (the
RK4 stages of a held joint add exact zeros), so the state stays ``[q, qd, i, x_i]`` for the
kernel, the ROS nodes and the records, and a state set from outside is classified the same
way. The right-hand side is
discontinuous where a joint's velocity reaches zero, so the integrator locates that event:
after each RK4 sub-step, a joint whose velocity changed sign (or became exactly zero), or
whose initial acceleration brings it to zero within the sub-step (``-v0 / qdd0 < h``: the
RK4 stages would straddle the discontinuity and can hide the crossing), has an event; the
sub-step is redone up to the crossing time ``theta h`` (``theta = v0 / (v0 - v1)`` or
``-v0 / (qdd0 h)``, the earliest joint's; one secant refinement if that overshoots), and
the crossing joint is stopped by a
stiction impulse at its joint, ``Delta qd = -qd_j M^-1 e_j / (M^-1)_jj`` (it removes the
kinetic energy ``qd_j^2 / (2 (M^-1)_jj)`` and nothing else; when the other joint is stuck,
only ``qd_j`` is set to zero), then the rest of the sub-step is integrated from there (at
most four events per sub-step). A stopped joint stays at zero velocity exactly (its
acceleration is zero in every RK4 stage) until the torque needed to hold it exceeds the
breakaway torque at a right-hand-side evaluation. The stick band ``v_stick`` catches a
joint that comes to rest without crossing zero within a sub-step: at each sub-step end a
joint with ``0 < |qd_j| < v_stick`` is stopped by the same impulse if its friction can hold
it there (the right-hand side at the stopped state holds it). Every velocity jump removes
kinetic energy, and a stuck joint's friction does no work (its velocity is zero), so the
friction dissipates energy at all times, up to the RK4 error of the smooth pieces.
"""

from __future__ import annotations

import dataclasses
import functools
import math

from manip_control.actuators import current_reference
from manip_control.actuators import drive_voltage
from manip_control.actuators import gear_loss_weights
from manip_control.actuators import joint_torque
from manip_control.actuators import motor_torque
from manip_control.friction import friction_torque
from manip_control.friction import karnopp_friction
from manip_control.friction import karnopp_substep_over
from manip_control.parameters import loaded_arm
from manip_control.parameters import payload_tick
from manip_control.parameters import PlantParameters
from manip_control.plant_state import initial_state
from manip_control.plant_state import plant_model
from manip_control.plant_state import two_link_mechanics
import numpy as np


STATE_SIZE = 8


def rotor_matrix(params: PlantParameters) -> np.ndarray:
    """
    Rotor torque matrix ``D`` [kg·m^2]: ``D qdd`` is the motor torque that accelerates rotors.

    ``D = [[Jr1, 0], [c12, Jr2]]`` with ``Jr = Jm N^2`` and ``c12 = Jm2 N2`` (rotor 2 turns
    at ``qd1 + N2 qd2``), zeros where the plant leaves the rotors out; the mesh torque
    referred to the joint is ``T = N k_t i - D qdd``.
    """
    jr1, jr2 = params.reflected_inertia
    return np.array([[jr1, 0.0], [params.rotor_coupling_terms[1], jr2]])


def _sign_patterns(n):
    """Yield the mesh-torque sign patterns in the order they are tried (module docstring)."""
    g = np.where(np.asarray(n) >= 0.0, 1.0, -1.0)
    yield g
    for flip in ((-1.0, 1.0), (1.0, -1.0), (-1.0, -1.0)):
        yield g * flip


def plant_dynamics(t: float, x: np.ndarray, u: np.ndarray, params: PlantParameters) -> np.ndarray:
    """
    Plant state derivative ``dx/dt = f(t, x, u, params)`` (reference implementation).

    Written with the vector API of :mod:`manip_control.dynamics` and the per-joint functions
    of :mod:`manip_control.actuators` and :mod:`manip_control.friction`, independently of
    the inlined fast path used by :class:`Plant`, so that each checks the other. The
    equations are listed in the module docstring.

    Parameters
    ----------
    t : float
        Time [s] (unused: the plant is time-invariant).
    x : ndarray, shape (8,)
        State ``[q, qd, i, x_i]``.
    u : ndarray, shape (2,)
        Joint torque command [N·m], held over the control period.
    params : PlantParameters
        The true arm, rotors, friction and motors.

    """
    model, rotors, wa, wb = _reference_constants(params)
    q, qd, cur, xi = x[0:2], x[2:4], x[4:6], x[6:8]
    dx = np.zeros(STATE_SIZE)
    inertia = model.inertia_matrix(q)
    bias = model.coriolis_vector(q, qd) + model.gravity_vector(q)
    dx[0:2] = qd
    if params.actuator == 'motor':
        n = np.zeros(2)
        for j, mo in enumerate(params.motors):
            i_ref = current_reference(u[j], mo)
            v, saturated = drive_voltage(i_ref, cur[j], xi[j], mo)
            dx[4 + j] = (v - mo.R * cur[j] - mo.k_e * mo.N * qd[j]) / mo.L
            dx[6 + j] = 0.0 if saturated else mo.Ki_i * (i_ref - cur[j])
            n[j] = motor_torque(cur[j], mo)
        s = np.array([math.tanh(v / fr.eps) for v, fr in zip(qd, params.friction)])
        smooth = (None if params.friction_model == 'karnopp'
                  else friction_torque(qd, params.friction))
        first = None
        for sigma in _sign_patterns(n):
            kappa = (wa * sigma + wb * s) * s
            qdd = _accelerations(qd, n - kappa * n - bias, inertia - kappa[:, None] * rotors,
                                 params, smooth)
            mesh = n - rotors @ qdd
            if first is None:
                first = qdd
            if all(sigma[j] * mesh[j] >= 0.0 or wa[j] * s[j] == 0.0 for j in range(2)):
                break
        else:  # no consistent pattern (ill-posed, see the module docstring): the first one
            qdd = first
    else:
        tau_m = np.clip(u, -np.asarray(params.torque_limit), np.asarray(params.torque_limit))
        qdd = _accelerations(qd, tau_m - bias, inertia, params)
    dx[2:4] = qdd
    return dx


@functools.lru_cache(maxsize=16)
def _reference_constants(params: PlantParameters):
    """Model, rotor matrix and gear loss weights of :func:`plant_dynamics` (cached)."""
    weights = [gear_loss_weights(mo) for mo in params.motors]
    return (plant_model(params), rotor_matrix(params), np.array([w[0] for w in weights]),
            np.array([w[1] for w in weights]))


def _accelerations(qd, rest, matrix, params: PlantParameters, smooth=None) -> np.ndarray:
    """
    Solve ``matrix qdd = rest - f`` with the configured friction (held joints: zero).

    ``smooth``: the smooth friction torques when already computed.
    """
    if params.friction_model == 'karnopp':
        fric, held = karnopp_friction(qd, rest, matrix, params.friction)
    else:
        fric = friction_torque(qd, params.friction) if smooth is None else smooth
        held = None
    b = rest - fric
    (m00, m01), (m10, m11) = matrix.tolist()
    det = m00 * m11 - m01 * m10
    qdd = np.array([(m11 * b[0] - m01 * b[1]) / det, (m00 * b[1] - m10 * b[0]) / det])
    if held is not None:
        qdd[held] = 0.0  # a joint held by stiction does not accelerate
    return qdd


def _make_rhs(params: PlantParameters):
    """Build the inlined scalar right-hand side used by :class:`Plant` (the hot path)."""
    model = plant_model(params)
    a, b, d12, d22, G1, G2 = model.a, model.b, model.d12, model.d22, model.g1, model.g2
    f1, f2 = params.friction
    b1, tc1, e1, ts1, vs1 = f1.b, f1.tau_c, f1.eps, f1.tau_s, f1.v_s
    b2, tc2, e2, ts2, vs2 = f2.b, f2.tau_c, f2.eps, f2.tau_s, f2.v_s
    fs1, fs2 = tc1 + ts1, tc2 + ts2
    stribeck = bool(ts1 or ts2)
    karnopp = params.friction_model == 'karnopp'
    m1, m2 = params.motors
    R1, iL1, kn1, kp1, ki1, vm1, kt1 = (m1.R, 1.0 / m1.L, m1.k_e * m1.N, m1.Kp_i, m1.Ki_i,
                                        m1.V_max, m1.torque_per_amp)
    R2, iL2, kn2, kp2, ki2, vm2, kt2 = (m2.R, 1.0 / m2.L, m2.k_e * m2.N, m2.Kp_i, m2.Ki_i,
                                        m2.V_max, m2.torque_per_amp)
    # gear loss tau_gear = kappa T, kappa = (wa sigma + wb s) s, T = n - D qdd
    wa1, wb1 = gear_loss_weights(m1)
    wa2, wb2 = gear_loss_weights(m2)
    jr1, jr2 = params.reflected_inertia
    jc2 = params.rotor_coupling_terms[1]
    cos, sin, tanh, exp, copysign = math.cos, math.sin, math.tanh, math.exp, math.copysign
    motor = params.actuator == 'motor'
    mech = two_link_mechanics

    def rhs(q1, q2, v1, v2, i1, i2, x1, x2, u1, u2):
        # u is the current reference [A] in motor mode, the clamped torque [N·m] in ideal mode.
        s1 = tanh(v1 / e1)
        s2 = tanh(v2 / e2)
        if motor:
            e = u1 - i1
            vt = kp1 * e + x1
            if vt > vm1:
                vt, dx1 = vm1, 0.0
            elif vt < -vm1:
                vt, dx1 = -vm1, 0.0
            else:
                dx1 = ki1 * e
            di1 = (vt - R1 * i1 - kn1 * v1) * iL1
            e = u2 - i2
            vt = kp2 * e + x2
            if vt > vm2:
                vt, dx2 = vm2, 0.0
            elif vt < -vm2:
                vt, dx2 = -vm2, 0.0
            else:
                dx2 = ki2 * e
            di2 = (vt - R2 * i2 - kn2 * v2) * iL2
            n1 = kt1 * i1
            n2 = kt2 * i2
        else:
            di1 = di2 = dx1 = dx2 = 0.0
            n1, n2 = u1, u2
        c2 = cos(q2)
        bc2 = b * c2
        m11 = a + 2.0 * bc2
        m12 = d12 + bc2
        h = -b * sin(q2)
        g12 = G2 * cos(q1 + q2)
        w1 = (h * (2.0 * v1 * v2 + v2 * v2), G1 * cos(q1), g12)
        w2 = (h * v1 * v1, g12)
        if karnopp:
            fr1 = (b1 * v1 + copysign(tc1 + ts1 * exp(-(v1 / vs1) ** 2), v1)
                   if v1 != 0.0 else 0.0)
            fr2 = (b2 * v2 + copysign(tc2 + ts2 * exp(-(v2 / vs2) ** 2), v2)
                   if v2 != 0.0 else 0.0)
        elif stribeck:
            fr1 = b1 * v1 + (tc1 + ts1 * exp(-(v1 / vs1) ** 2)) * s1
            fr2 = b2 * v2 + (tc2 + ts2 * exp(-(v2 / vs2) ** 2)) * s2
        else:
            fr1 = b1 * v1 + tc1 * s1
            fr2 = b2 * v2 + tc2 * s2
        la1 = wa1 * s1
        la2 = wa2 * s2
        if motor and (la1 != 0.0 or la2 != 0.0):
            g1 = 1.0 if n1 >= 0.0 else -1.0
            g2 = 1.0 if n2 >= 0.0 else -1.0
            for k in range(4):
                sg1 = -g1 if k == 1 or k == 3 else g1
                sg2 = -g2 if k >= 2 else g2
                k1 = (wa1 * sg1 + wb1 * s1) * s1
                k2 = (wa2 * sg2 + wb2 * s2) * s2
                qa1, qa2 = mech(v1, v2, n1 - k1 * n1, n2 - k2 * n2, w1, w2, fr1, fr2,
                                m11 - k1 * jr1, m12, m12 - k2 * jc2, d22 - k2 * jr2,
                                karnopp, fs1, fs2)
                if k == 0:
                    first1, first2 = qa1, qa2
                if (((n1 - jr1 * qa1) * sg1 >= 0.0 or la1 == 0.0)
                        and ((n2 - jc2 * qa1 - jr2 * qa2) * sg2 >= 0.0 or la2 == 0.0)):
                    break
            else:
                qa1, qa2 = first1, first2
        else:
            qa1, qa2 = mech(v1, v2, n1, n2, w1, w2, fr1, fr2, m11, m12, m12, d22,
                            karnopp, fs1, fs2)
        return v1, v2, qa1, qa2, di1, di2, dx1, dx2

    return rhs


def _rk4(p, x, h, u):
    """One classical RK4 step of length ``h`` from the 8-tuple ``x``; new state, ``k1`` qdd."""
    f = p[0]
    u1, u2 = u
    h2 = 0.5 * h
    h6 = h / 6.0
    x0, x1, x2, x3, x4, x5, x6, x7 = x
    k1 = f(x0, x1, x2, x3, x4, x5, x6, x7, u1, u2)
    k2 = f(x0 + h2 * k1[0], x1 + h2 * k1[1], x2 + h2 * k1[2], x3 + h2 * k1[3],
           x4 + h2 * k1[4], x5 + h2 * k1[5], x6 + h2 * k1[6], x7 + h2 * k1[7], u1, u2)
    k3 = f(x0 + h2 * k2[0], x1 + h2 * k2[1], x2 + h2 * k2[2], x3 + h2 * k2[3],
           x4 + h2 * k2[4], x5 + h2 * k2[5], x6 + h2 * k2[6], x7 + h2 * k2[7], u1, u2)
    k4 = f(x0 + h * k3[0], x1 + h * k3[1], x2 + h * k3[2], x3 + h * k3[3],
           x4 + h * k3[4], x5 + h * k3[5], x6 + h * k3[6], x7 + h * k3[7], u1, u2)
    return ((x0 + h6 * (k1[0] + 2.0 * (k2[0] + k3[0]) + k4[0]),
             x1 + h6 * (k1[1] + 2.0 * (k2[1] + k3[1]) + k4[1]),
             x2 + h6 * (k1[2] + 2.0 * (k2[2] + k3[2]) + k4[2]),
             x3 + h6 * (k1[3] + 2.0 * (k2[3] + k3[3]) + k4[3]),
             x4 + h6 * (k1[4] + 2.0 * (k2[4] + k3[4]) + k4[4]),
             x5 + h6 * (k1[5] + 2.0 * (k2[5] + k3[5]) + k4[5]),
             x6 + h6 * (k1[6] + 2.0 * (k2[6] + k3[6]) + k4[6]),
             x7 + h6 * (k1[7] + 2.0 * (k2[7] + k3[7]) + k4[7])), (k1[2], k1[3]))


def _stop(p, x, j):
    """
    Stop joint ``j`` by a stiction impulse at that joint: ``qd += -qd_j M^-1 e_j / M^-1_jj``.

    When the other joint is at rest (stuck) only ``qd_j`` is set to zero.
    """
    _, a, b, d12, d22 = p
    x0, x1, v1, v2, x4, x5, x6, x7 = x
    bc2 = b * math.cos(x1)
    if j == 0:
        v2 = v2 + v1 * ((d12 + bc2) / d22) if v2 != 0.0 else 0.0
        v1 = 0.0
    else:
        v1 = v1 + v2 * ((d12 + bc2) / (a + 2.0 * bc2)) if v1 != 0.0 else 0.0
        v2 = 0.0
    return (x0, x1, v1, v2, x4, x5, x6, x7)


def _rhs_at(p, x, u):
    """Return the right-hand side ``p[0]`` at the 8-tuple ``x`` with the held input ``u``."""
    return p[0](x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], u[0], u[1])


_karnopp_substep = karnopp_substep_over(_rk4, _stop, _rhs_at)


def loaded_parameters(params: PlantParameters) -> PlantParameters:
    """Return the plant after its payload's pick-up: link 2 carries the point mass at its tip."""
    return dataclasses.replace(params, arm=loaded_arm(params.arm, params.payload.mass))


def _compiled_stepper(params: PlantParameters, period: float):
    """Return the kernel's compiled period step for ``params`` (None when unsupported)."""
    from manip_control import kernel    # numba: about 1 s to import, only when compiled
    return kernel.stepper(params, period)


def _impulse_constants(params: PlantParameters, rhs) -> tuple:
    """Return ``(rhs, a, b, d12, d22)``: the Karnopp sub-step's rhs and stop impulse."""
    model = plant_model(params)
    return (rhs, model.a, model.b, model.d12, model.d22)


class Plant:
    """
    Fixed-step simulation of the true arm with zero-order-held torque commands.

    Parameters
    ----------
    params : PlantParameters
        The true arm, friction, motors and sensors.
    period : float
        Control period [s] over which each command is held.
    compiled : bool, optional
        Integrate with the compiled period step of :func:`manip_control.kernel.stepper`
        (the same RK4 in machine code, about 10x faster) when the kernel supports the
        parameters (default); False always uses the Python step below.

    """

    def __init__(self, params: PlantParameters, period: float, *, compiled: bool = True):
        if not period > 0.0 or not math.isfinite(period):
            raise ValueError(f'period: must be a finite value > 0 (got {period})')
        self.params = params
        self.period = float(period)
        self.substeps = int(params.substeps)
        self._h = self.period / self.substeps
        self._rhs = _make_rhs(params)
        self._motor = params.actuator == 'motor'
        self._motors = params.motors
        self._limits = tuple(float(v) for v in params.torque_limit)
        self._compiled_step = _compiled_stepper(params, self.period) if compiled else None
        self._karnopp = params.friction_model == 'karnopp'
        self._impulse = _impulse_constants(params, self._rhs)
        self._v_stick = tuple(fr.v_stick for fr in params.friction)
        self._rotors = (params.reflected_inertia, params.rotor_coupling_terms[1])
        # the payload swaps the rigid-body constants at its tick (reset() swaps them back)
        self._unloaded = (self._rhs, self._impulse)
        self._payload_tick = None
        if params.payload.mass > 0.0:
            self._payload_tick = payload_tick(params.payload.at_time, self.period)
            loaded = loaded_parameters(params)
            rhs = _make_rhs(loaded)
            self._loaded = (rhs, _impulse_constants(loaded, rhs))
        self.reset()

    @property
    def payload_attached(self) -> bool:
        """Whether the payload is attached now (params.payload, at its first tick)."""
        return self._rhs is not self._unloaded[0]

    def reset(self, q=None, qd=None) -> None:
        """
        Reset to ``q`` / ``qd`` (defaults: the configured initial state).

        Currents and drive integrators start as :func:`initial_state` says (holding the pose
        with ``start_in_equilibrium``, else zero); the held input is the matching current
        reference (zero in ideal mode) until the first :meth:`step`.
        """
        self._x = [float(v) for v in initial_state(self.params, q, qd)]
        self._u = (self._x[4], self._x[5]) if self._motor else (0.0, 0.0)
        self.time = 0.0
        self.steps = 0
        self._rhs, self._impulse = self._unloaded

    # -- state access -----------------------------------------------------------------------
    @property
    def state(self) -> np.ndarray:
        """Full state ``[q1, q2, qd1, qd2, i1, i2, x_i1, x_i2]``."""
        return np.array(self._x)

    @state.setter
    def state(self, x) -> None:
        x = np.asarray(x, dtype=float)
        if x.shape != (STATE_SIZE,) or not np.all(np.isfinite(x)):
            raise ValueError(f'state: expected {STATE_SIZE} finite values, got {x.shape}')
        self._x = [float(v) for v in x]

    @property
    def position(self) -> tuple[float, float]:
        """Joint positions [rad]."""
        return self._x[0], self._x[1]

    @property
    def velocity(self) -> tuple[float, float]:
        """Joint velocities [rad/s]."""
        return self._x[2], self._x[3]

    @property
    def current(self) -> tuple[float, float]:
        """Motor currents [A] (zeros in ideal mode)."""
        return self._x[4], self._x[5]

    def input_for(self, tau_cmd1: float, tau_cmd2: float) -> tuple[float, float]:
        """Return the held input for a torque command: i_ref [A] or the clamped torque [N·m]."""
        if self._motor:
            m1, m2 = self._motors
            return current_reference(tau_cmd1, m1), current_reference(tau_cmd2, m2)
        l1, l2 = self._limits
        return (min(max(tau_cmd1, -l1), l1), min(max(tau_cmd2, -l2), l2))

    def joint_torque(self) -> tuple[float, float]:
        """Actual actuator torque at the joints now [N·m] (before friction)."""
        return self.joint_torque_at(self._x)

    def joint_torque_at(self, x) -> tuple[float, float]:
        """
        Return the actuator torque [N·m] on the arm at state ``x`` or the held one (ideal).

        Motor mode: ``N k_t i - tau_gear(T, qd)`` with the mesh torque ``T = N k_t i - D qdd``
        at the accelerations ``qdd`` of state ``x`` (module docstring).
        """
        if self._motor:
            m1, m2 = self._motors
            f1, f2 = self.params.friction
            d = self._rhs(x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], self._u[0],
                          self._u[1])
            (jr1, jr2), jc2 = self._rotors
            return (joint_torque(x[4], x[2], m1, f1.eps, jr1 * d[2]),
                    joint_torque(x[5], x[3], m2, f2.eps, jc2 * d[2] + jr2 * d[3]))
        return self._u

    def drive_voltage(self) -> tuple[float, float]:
        """Drive terminal voltages now [V] for the held current reference (0 in ideal mode)."""
        return self.drive_voltage_at(self._x)

    def drive_voltage_at(self, x) -> tuple[float, float]:
        """Drive voltages [V] for state ``x`` and the held current reference."""
        if not self._motor:
            return 0.0, 0.0
        m1, m2 = self._motors
        return (drive_voltage(self._u[0], x[4], x[6], m1)[0],
                drive_voltage(self._u[1], x[5], x[7], m2)[0])

    def current_reference(self) -> tuple[float, float]:
        """Return the drive's current references now [A] (zeros in ideal mode)."""
        return self._u if self._motor else (0.0, 0.0)

    # -- integration ------------------------------------------------------------------------
    def step(self, tau_cmd1: float, tau_cmd2: float) -> None:
        """Advance one control period with the torque command held (zero-order hold)."""
        u1, u2 = self._u = self.input_for(tau_cmd1, tau_cmd2)
        if self.steps == self._payload_tick:
            self._rhs, self._impulse = self._loaded
        if self._compiled_step is not None:
            self._x = list(self._compiled_step(self._x, u1, u2))
            self.steps += 1
            self.time = self.steps * self.period
            return
        f = self._rhs
        h = self._h
        if self._karnopp:
            p, u, v_stick = self._impulse, (u1, u2), self._v_stick
            x = tuple(self._x)
            for _ in range(self.substeps):
                x = _karnopp_substep(p, x, h, u, 2, v_stick)[0]
            self._x = list(x)
            self.steps += 1
            self.time = self.steps * self.period
            return
        h2 = 0.5 * h
        h6 = h / 6.0
        x0, x1, x2, x3, x4, x5, x6, x7 = self._x
        for _ in range(self.substeps):
            k1 = f(x0, x1, x2, x3, x4, x5, x6, x7, u1, u2)
            k2 = f(x0 + h2 * k1[0], x1 + h2 * k1[1], x2 + h2 * k1[2], x3 + h2 * k1[3],
                   x4 + h2 * k1[4], x5 + h2 * k1[5], x6 + h2 * k1[6], x7 + h2 * k1[7], u1, u2)
            k3 = f(x0 + h2 * k2[0], x1 + h2 * k2[1], x2 + h2 * k2[2], x3 + h2 * k2[3],
                   x4 + h2 * k2[4], x5 + h2 * k2[5], x6 + h2 * k2[6], x7 + h2 * k2[7], u1, u2)
            k4 = f(x0 + h * k3[0], x1 + h * k3[1], x2 + h * k3[2], x3 + h * k3[3],
                   x4 + h * k3[4], x5 + h * k3[5], x6 + h * k3[6], x7 + h * k3[7], u1, u2)
            x0 += h6 * (k1[0] + 2.0 * (k2[0] + k3[0]) + k4[0])
            x1 += h6 * (k1[1] + 2.0 * (k2[1] + k3[1]) + k4[1])
            x2 += h6 * (k1[2] + 2.0 * (k2[2] + k3[2]) + k4[2])
            x3 += h6 * (k1[3] + 2.0 * (k2[3] + k3[3]) + k4[3])
            x4 += h6 * (k1[4] + 2.0 * (k2[4] + k3[4]) + k4[4])
            x5 += h6 * (k1[5] + 2.0 * (k2[5] + k3[5]) + k4[5])
            x6 += h6 * (k1[6] + 2.0 * (k2[6] + k3[6]) + k4[6])
            x7 += h6 * (k1[7] + 2.0 * (k2[7] + k3[7]) + k4[7])
        self._x = [x0, x1, x2, x3, x4, x5, x6, x7]
        self.steps += 1
        self.time = self.steps * self.period
