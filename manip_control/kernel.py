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
Compiled closed loop (numba): the whole 1 kHz tick loop of a scenario in machine code.

The kernel runs exactly the tick of :func:`manip_control.simulation.run_closed_loop` (see
DEVELOPERS.md, "Closed-loop semantics"): at ``t_k = k T`` the sensors measure ``y_k``, the
controller computes ``u_k`` from ``y_k`` and the reference ``r_k``, and the plant integrates
``[t_k, t_k + T]`` with ``u_k`` held, by classical RK4 with ``substeps`` steps. Every equation
is the one of the Python modules, written on scalars in the same order of operations:

* plant right-hand side -- :func:`manip_control.plant._make_rhs` (rigid body with rotors
  ``M(q) qdd + c + g + f(qd) = tau_m``, DC motor ``L di/dt = V - R i - k_e N qd``, PI drive
  with a clamped terminal voltage and conditional integration, actuator torque
  ``tau_m = N k_t i - tau_gear(T, qd)`` with the gear loss charged on the mesh torque
  ``T = N k_t i - D qdd`` and solved with the accelerations, or the clamped ideal torque;
  Karnopp friction with exact sticking: zero-velocity events located in each RK4 sub-step
  by the plants' own :func:`manip_control.friction.karnopp_substep_over`, compiled here);
* controller -- not a copy: :func:`manip_control.control.two_link_law`, the function the
  2R's :class:`~manip_control.control.Controller` runs, compiled here (computed torque or PD
  + gravity, friction feed-forward, inversion of the nominal gear, integral with
  anti-windup, torque limits);
* sensors -- :class:`manip_control.sensors.JointSensors` (noise, quantization
  ``round(q / res) res``, filtered backward-difference velocity).

The reference and the sensor noise do not depend on the state, so they are computed before
the loop, vectorised (``Trajectory.sample_many``; the noise is drawn from the sensor's seeded
generator in the order :class:`JointSensors` draws it). Parameters travel as flat float64
vectors whose layouts are the ``P_*`` / ``C_*`` / ``S_*`` indices below
(:func:`pack_plant`, :func:`pack_controller`, :func:`pack_sensors`).

:func:`unsupported` names any option the kernel does not implement; callers then use the
Python path. Without numba (not importable), or with the environment variable
``MANIP_CONTROL_KERNEL=0``, the kernel is not used and everything runs in Python. Compiled
code is cached on disk (``cache=True``, beside the source or in ``NUMBA_CACHE_DIR``): the
first use on a machine (or from another copy of the source) compiles for a few seconds of
CPU, later processes load it (about 0.5 s of CPU, mostly importing numba).
"""

from __future__ import annotations

import math
import os

from manip_control.actuators import gear_loss_weights
from manip_control.control import Controller
from manip_control.control import two_link_law
from manip_control.friction import karnopp_substep_over
from manip_control.plant_state import initial_state
from manip_control.plant_state import plant_model
from manip_control.plant_state import two_link_mechanics
from manip_control.trajectories import trajectory_from_config
import numpy as np

try:  # numba is a runtime dependency; the Python path is the fallback without it
    import numba
except ImportError:  # pragma: no cover - exercised only where numba is absent
    numba = None

#: Whether the compiled kernel is available in this interpreter.
AVAILABLE = numba is not None


def _jit(**options):
    """``numba.njit(cache=True, **options)``, or the plain function without numba."""
    def wrap(fn):
        if numba is None:  # pragma: no cover
            return fn
        return numba.njit(cache=True, **options)(fn)
    return wrap


# --------------------------------------------------------------------------------------------
# parameter vector layouts

# plant: rigid body, friction per joint, motors per joint, ideal limits, integrator
P_MOTOR, P_A, P_B, P_D12, P_D22, P_G1, P_G2, P_STRIBECK, P_KARNOPP = range(9)
P_FR1 = 9           # friction row of joint 1 (F_* offsets); joint 2 at P_FR1 + FR_SIZE
F_B, F_TC, F_EPS, F_TS, F_VS, F_VSTICK, F_FS = range(7)
FR_SIZE = 7
P_MO1 = P_FR1 + 2 * FR_SIZE   # motor row of joint 1 (M_* offsets); joint 2 at + MO_SIZE
M_R, M_IL, M_KEN, M_KP, M_KI, M_VMAX, M_KT, M_IMAX, M_WA, M_WB = range(10)
MO_SIZE = 10
P_LIM1 = P_MO1 + 2 * MO_SIZE
P_LIM2, P_SUBSTEPS, P_H = P_LIM1 + 1, P_LIM1 + 2, P_LIM1 + 3
P_JR1, P_JC2, P_JR2 = P_LIM1 + 4, P_LIM1 + 5, P_LIM1 + 6   # rotor matrix D (mesh torque)
P_SIZE = P_LIM1 + 7

# controller: Controller.law_constants (control.two_link_law), ending in the torque limits,
# the integral limits and the period
C_SIZE = 43
C_TL1, C_TL2, C_PERIOD = C_SIZE - 5, C_SIZE - 4, C_SIZE - 1

# sensors
S_IDEAL, S_RES, S_FILTERED, S_ALPHA, S_PERIOD, S_POS_NOISE, S_VEL_NOISE = range(7)
S_SIZE = 7

#: Columns of the per-tick records (see :class:`manip_control.simulation.SimulationResult`).
REC_SIZE = 23

#: Per-run figures accumulated by the loop (``stats`` rows), see :func:`closed_loop`.
(ST_LATE_MAX1, ST_LATE_MAX2, ST_LATE_SQ1, ST_LATE_SQ2, ST_MAX1, ST_MAX2, ST_TAU_MAX1,
 ST_TAU_MAX2, ST_TAU_SQ1, ST_TAU_SQ2, ST_I_MAX1, ST_I_MAX2, ST_V_MAX1, ST_V_MAX2, ST_SAT1,
 ST_SAT2, ST_LATE_N, ST_SAT_ANY) = range(18)
ST_FINAL = 18       # final plant state, 8 values
ST_SIZE = 26


def pack_plant(params, period: float) -> np.ndarray:
    """
    Pack the plant parameters into the kernel's flat vector (layout ``P_*``).

    Parameters
    ----------
    params : PlantParameters
        The true arm, friction, motors, actuator mode and sub-steps.
    period : float
        Control period [s]; the RK4 step is ``period / substeps``.

    """
    model = plant_model(params)
    f1, f2 = params.friction
    p = np.zeros(P_SIZE)
    p[P_MOTOR] = 1.0 if params.actuator == 'motor' else 0.0
    p[P_A:P_G2 + 1] = (model.a, model.b, model.d12, model.d22, model.g1, model.g2)
    p[P_STRIBECK] = 1.0 if (f1.tau_s or f2.tau_s) else 0.0
    p[P_KARNOPP] = 1.0 if params.friction_model == 'karnopp' else 0.0
    for j, fr in enumerate(params.friction):
        o = P_FR1 + j * FR_SIZE
        p[o:o + FR_SIZE] = (fr.b, fr.tau_c, fr.eps, fr.tau_s, fr.v_s,
                            fr.v_stick, fr.tau_c + fr.tau_s)
    for j, mo in enumerate(params.motors):
        o = P_MO1 + j * MO_SIZE
        # gear loss tau_gear = (wa |T| + wb T s) s on the mesh torque T = N k_t i - D qdd
        wa, wb = gear_loss_weights(mo)
        p[o:o + MO_SIZE] = (mo.R, 1.0 / mo.L, mo.k_e * mo.N, mo.Kp_i, mo.Ki_i, mo.V_max,
                            mo.torque_per_amp, mo.i_max, wa, wb)
    p[P_LIM1], p[P_LIM2] = params.torque_limit
    p[P_SUBSTEPS] = int(params.substeps)
    p[P_H] = float(period) / int(params.substeps)
    (p[P_JR1], p[P_JR2]), p[P_JC2] = params.reflected_inertia, params.rotor_coupling_terms[1]
    return p


def pack_controller(params, period: float) -> np.ndarray:
    """Pack the controller into the kernel's flat vector: its ``law_constants`` (``C_*``)."""
    return np.array(Controller(params, period).law_constants, dtype=np.float64)


def pack_sensors(params, period: float) -> np.ndarray:
    """Pack the sensor options into the kernel's flat vector (layout ``S_*``)."""
    s = np.zeros(S_SIZE)
    period = float(period)
    s[S_IDEAL] = 1.0 if params.ideal else 0.0
    s[S_RES] = 2.0 * math.pi / params.encoder_counts if params.encoder_counts else 0.0
    s[S_FILTERED] = 1.0 if params.velocity_source == 'filtered_difference' else 0.0
    tau = 1.0 / (2.0 * math.pi * params.velocity_cutoff_hz)
    s[S_ALPHA] = period / (period + tau)
    s[S_PERIOD] = period
    s[S_POS_NOISE] = 1.0 if params.position_noise_std else 0.0
    s[S_VEL_NOISE] = 1.0 if params.velocity_noise_std else 0.0
    return s


def sensor_noise(params, n: int) -> np.ndarray:
    """
    Draw the sensors' Gaussian noise for ``n`` ticks, shape (n, 4): position, velocity.

    Drawn from ``default_rng(seed)`` in :class:`JointSensors`' order (per tick: position
    noise if on, then velocity noise if on), so the values are those of the tick-by-tick
    sensors.
    """
    noise = np.zeros((n, 4))
    sp, sv = params.position_noise_std, params.velocity_noise_std
    if not (sp or sv):
        return noise
    rng = np.random.default_rng(params.seed)
    if sp and sv:
        noise[:] = rng.normal(0.0, np.array([sp, sp, sv, sv]), (n, 4))
    elif sp:
        noise[:, 0:2] = rng.normal(0.0, sp, (n, 2))
    else:
        noise[:, 2:4] = rng.normal(0.0, sv, (n, 2))
    return noise


def references(trajectory, n: int, period: float) -> np.ndarray:
    """Sample the reference at ``t_k = k T``: shape (n, 6), ``q_d``, ``qd_d``, ``qdd_d``."""
    t = np.arange(n) * float(period)
    q, qd, qdd = trajectory.sample_many(t)
    return np.ascontiguousarray(np.hstack([q, qd, qdd]), dtype=np.float64)


def unsupported(scenario) -> str | None:
    """
    Why the kernel cannot run ``scenario`` (a short reason), or None when it can.

    The kernel implements every option of the plant, controller and sensors of this
    version but ``plant.payload`` (a mass picked up during the run); that, anything else
    (e.g. a plant option added later and not yet ported) and a missing numba make
    :func:`manip_control.simulation.run_closed_loop` use the Python path.
    """
    if scenario.controller.adaptation.enabled:
        return 'controller.adaptation.enabled: the adaptive law runs on the Python loop only'
    return plant_unsupported(scenario.plant)


# --------------------------------------------------------------------------------------------
# compiled scalar functions (same equations and order of operations as the Python modules)


@_jit()
def _rhs(x0, x1, v1, v2, i1, i2, s1, s2, u1, u2, p):
    """Plant derivative; ``u`` is the current reference [A] or the clamped torque [N·m]."""
    f = P_FR1
    g = P_FR1 + FR_SIZE
    sg1 = math.tanh(v1 / p[f + F_EPS])
    sg2 = math.tanh(v2 / p[g + F_EPS])
    motor = p[P_MOTOR] != 0.0
    if motor:
        o = P_MO1
        e = u1 - i1
        vt = p[o + M_KP] * e + s1
        if vt > p[o + M_VMAX]:
            vt, dx1 = p[o + M_VMAX], 0.0
        elif vt < -p[o + M_VMAX]:
            vt, dx1 = -p[o + M_VMAX], 0.0
        else:
            dx1 = p[o + M_KI] * e
        di1 = (vt - p[o + M_R] * i1 - p[o + M_KEN] * v1) * p[o + M_IL]
        n1 = p[o + M_KT] * i1
        o = P_MO1 + MO_SIZE
        e = u2 - i2
        vt = p[o + M_KP] * e + s2
        if vt > p[o + M_VMAX]:
            vt, dx2 = p[o + M_VMAX], 0.0
        elif vt < -p[o + M_VMAX]:
            vt, dx2 = -p[o + M_VMAX], 0.0
        else:
            dx2 = p[o + M_KI] * e
        di2 = (vt - p[o + M_R] * i2 - p[o + M_KEN] * v2) * p[o + M_IL]
        n2 = p[o + M_KT] * i2
    else:
        di1 = di2 = dx1 = dx2 = 0.0
        n1, n2 = u1, u2
    b = p[P_B]
    c2 = math.cos(x1)
    bc2 = b * c2
    m11 = p[P_A] + 2.0 * bc2
    m12 = p[P_D12] + bc2
    d22 = p[P_D22]
    h = -b * math.sin(x1)
    g12 = p[P_G2] * math.cos(x0 + x1)
    w11 = h * (2.0 * v1 * v2 + v2 * v2)
    w12 = p[P_G1] * math.cos(x0)
    w21 = h * v1 * v1
    karnopp = p[P_KARNOPP] != 0.0
    if karnopp:
        fr1 = 0.0
        fr2 = 0.0
        if v1 != 0.0:
            fr1 = p[f + F_B] * v1 + math.copysign(
                p[f + F_TC] + p[f + F_TS] * math.exp(-(v1 / p[f + F_VS]) ** 2), v1)
        if v2 != 0.0:
            fr2 = p[g + F_B] * v2 + math.copysign(
                p[g + F_TC] + p[g + F_TS] * math.exp(-(v2 / p[g + F_VS]) ** 2), v2)
    elif p[P_STRIBECK] != 0.0:
        fr1 = p[f + F_B] * v1 + (p[f + F_TC] + p[f + F_TS] * math.exp(
            -(v1 / p[f + F_VS]) ** 2)) * sg1
        fr2 = p[g + F_B] * v2 + (p[g + F_TC] + p[g + F_TS] * math.exp(
            -(v2 / p[g + F_VS]) ** 2)) * sg2
    else:
        fr1 = p[f + F_B] * v1 + p[f + F_TC] * sg1
        fr2 = p[g + F_B] * v2 + p[g + F_TC] * sg2
    fs1 = p[f + F_FS]
    fs2 = p[g + F_FS]
    wa1 = p[P_MO1 + M_WA]
    wb1 = p[P_MO1 + M_WB]
    wa2 = p[P_MO1 + MO_SIZE + M_WA]
    wb2 = p[P_MO1 + MO_SIZE + M_WB]
    la1 = wa1 * sg1
    la2 = wa2 * sg2
    if motor and (la1 != 0.0 or la2 != 0.0):
        jr1 = p[P_JR1]
        jc2 = p[P_JC2]
        jr2 = p[P_JR2]
        g1 = 1.0 if n1 >= 0.0 else -1.0
        g2 = 1.0 if n2 >= 0.0 else -1.0
        first1 = first2 = 0.0
        found = False
        for k in range(4):
            sn1 = -g1 if k == 1 or k == 3 else g1
            sn2 = -g2 if k >= 2 else g2
            k1 = (wa1 * sn1 + wb1 * sg1) * sg1
            k2 = (wa2 * sn2 + wb2 * sg2) * sg2
            qa1, qa2 = _mechanics(v1, v2, n1 - k1 * n1, n2 - k2 * n2, (w11, w12, g12),
                                  (w21, g12), fr1, fr2, m11 - k1 * jr1, m12, m12 - k2 * jc2,
                                  d22 - k2 * jr2, karnopp, fs1, fs2)
            if k == 0:
                first1, first2 = qa1, qa2
            if (((n1 - jr1 * qa1) * sn1 >= 0.0 or la1 == 0.0)
                    and ((n2 - jc2 * qa1 - jr2 * qa2) * sn2 >= 0.0 or la2 == 0.0)):
                found = True
                break
        if not found:
            qa1, qa2 = first1, first2
    else:
        qa1, qa2 = _mechanics(v1, v2, n1, n2, (w11, w12, g12), (w21, g12), fr1, fr2, m11, m12,
                              m12, d22, karnopp, fs1, fs2)
    return v1, v2, qa1, qa2, di1, di2, dx1, dx2


#: The 2R's mechanics with Karnopp's held joints (the Python plant's function), compiled.
_mechanics = _jit(inline='always')(two_link_mechanics)


@_jit()
def _input(tau1, tau2, p):
    """Return the held input for a torque command: ``i_ref`` [A] or the clamped torque."""
    if p[P_MOTOR] != 0.0:
        o1 = P_MO1
        o2 = P_MO1 + MO_SIZE
        u1 = tau1 / p[o1 + M_KT]
        lim = p[o1 + M_IMAX]
        u1 = lim if u1 > lim else (-lim if u1 < -lim else u1)
        u2 = tau2 / p[o2 + M_KT]
        lim = p[o2 + M_IMAX]
        u2 = lim if u2 > lim else (-lim if u2 < -lim else u2)
        return u1, u2
    l1 = p[P_LIM1]
    l2 = p[P_LIM2]
    return min(max(tau1, -l1), l1), min(max(tau2, -l2), l2)


@_jit()
def _rk4(p, x, h, u):
    """One classical RK4 step of length ``h`` from the 8-tuple ``x``; new state, ``k1`` qdd."""
    u1, u2 = u
    h2 = 0.5 * h
    h6 = h / 6.0
    x0, x1, x2, x3, x4, x5, x6, x7 = x
    k1 = _rhs(x0, x1, x2, x3, x4, x5, x6, x7, u1, u2, p)
    k2 = _rhs(x0 + h2 * k1[0], x1 + h2 * k1[1], x2 + h2 * k1[2], x3 + h2 * k1[3],
              x4 + h2 * k1[4], x5 + h2 * k1[5], x6 + h2 * k1[6], x7 + h2 * k1[7], u1, u2, p)
    k3 = _rhs(x0 + h2 * k2[0], x1 + h2 * k2[1], x2 + h2 * k2[2], x3 + h2 * k2[3],
              x4 + h2 * k2[4], x5 + h2 * k2[5], x6 + h2 * k2[6], x7 + h2 * k2[7], u1, u2, p)
    k4 = _rhs(x0 + h * k3[0], x1 + h * k3[1], x2 + h * k3[2], x3 + h * k3[3],
              x4 + h * k3[4], x5 + h * k3[5], x6 + h * k3[6], x7 + h * k3[7], u1, u2, p)
    return ((x0 + h6 * (k1[0] + 2.0 * (k2[0] + k3[0]) + k4[0]),
             x1 + h6 * (k1[1] + 2.0 * (k2[1] + k3[1]) + k4[1]),
             x2 + h6 * (k1[2] + 2.0 * (k2[2] + k3[2]) + k4[2]),
             x3 + h6 * (k1[3] + 2.0 * (k2[3] + k3[3]) + k4[3]),
             x4 + h6 * (k1[4] + 2.0 * (k2[4] + k3[4]) + k4[4]),
             x5 + h6 * (k1[5] + 2.0 * (k2[5] + k3[5]) + k4[5]),
             x6 + h6 * (k1[6] + 2.0 * (k2[6] + k3[6]) + k4[6]),
             x7 + h6 * (k1[7] + 2.0 * (k2[7] + k3[7]) + k4[7])), (k1[2], k1[3]))


@_jit()
def _stop(p, x, j):
    """Stop joint ``j`` by a stiction impulse (:func:`manip_control.plant._stop`)."""
    x0, x1, v1, v2, x4, x5, x6, x7 = x
    b = p[P_B]
    bc2 = b * math.cos(x1)
    if j == 0:
        v2 = v2 + v1 * ((p[P_D12] + bc2) / p[P_D22]) if v2 != 0.0 else 0.0
        v1 = 0.0
    else:
        v1 = v1 + v2 * ((p[P_D12] + bc2) / (p[P_A] + 2.0 * bc2)) if v1 != 0.0 else 0.0
        v2 = 0.0
    return (x0, x1, v1, v2, x4, x5, x6, x7)


@_jit()
def _rhs_at(p, x, u):
    """Plant derivative at the 8-tuple ``x`` with the held input ``u`` (a pair)."""
    return _rhs(x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], u[0], u[1], p)


#: The zero-velocity events of Karnopp friction (the plants' function), compiled.
_karnopp_substep = _jit()(karnopp_substep_over(_rk4, _stop, _rhs_at))


@_jit()
def _period_step(x, u1, u2, p):
    """
    Advance ``x`` (8-tuple) over one control period with ``u`` held: RK4, sub-steps.

    Returns the new state and the accelerations ``qdd`` at ``x`` (the first RK4 stage).
    """
    h = p[P_H]
    if p[P_KARNOPP] != 0.0:
        u = (u1, u2)
        v_stick = (p[P_FR1 + F_VSTICK], p[P_FR1 + FR_SIZE + F_VSTICK])
        x, (a1, a2) = _karnopp_substep(p, x, h, u, 2, v_stick)
        for _ in range(int(p[P_SUBSTEPS]) - 1):
            x = _karnopp_substep(p, x, h, u, 2, v_stick)[0]
        return x, a1, a2
    h2 = 0.5 * h
    h6 = h / 6.0
    x0, x1, x2, x3, x4, x5, x6, x7 = x
    a1 = a2 = 0.0
    for m in range(int(p[P_SUBSTEPS])):
        k1 = _rhs(x0, x1, x2, x3, x4, x5, x6, x7, u1, u2, p)
        if m == 0:
            a1 = k1[2]
            a2 = k1[3]
        k2 = _rhs(x0 + h2 * k1[0], x1 + h2 * k1[1], x2 + h2 * k1[2], x3 + h2 * k1[3],
                  x4 + h2 * k1[4], x5 + h2 * k1[5], x6 + h2 * k1[6], x7 + h2 * k1[7], u1, u2,
                  p)
        k3 = _rhs(x0 + h2 * k2[0], x1 + h2 * k2[1], x2 + h2 * k2[2], x3 + h2 * k2[3],
                  x4 + h2 * k2[4], x5 + h2 * k2[5], x6 + h2 * k2[6], x7 + h2 * k2[7], u1, u2,
                  p)
        k4 = _rhs(x0 + h * k3[0], x1 + h * k3[1], x2 + h * k3[2], x3 + h * k3[3],
                  x4 + h * k3[4], x5 + h * k3[5], x6 + h * k3[6], x7 + h * k3[7], u1, u2, p)
        x0 += h6 * (k1[0] + 2.0 * (k2[0] + k3[0]) + k4[0])
        x1 += h6 * (k1[1] + 2.0 * (k2[1] + k3[1]) + k4[1])
        x2 += h6 * (k1[2] + 2.0 * (k2[2] + k3[2]) + k4[2])
        x3 += h6 * (k1[3] + 2.0 * (k2[3] + k3[3]) + k4[3])
        x4 += h6 * (k1[4] + 2.0 * (k2[4] + k3[4]) + k4[4])
        x5 += h6 * (k1[5] + 2.0 * (k2[5] + k3[5]) + k4[5])
        x6 += h6 * (k1[6] + 2.0 * (k2[6] + k3[6]) + k4[6])
        x7 += h6 * (k1[7] + 2.0 * (k2[7] + k3[7]) + k4[7])
    return (x0, x1, x2, x3, x4, x5, x6, x7), a1, a2


#: The controller's law (the same function the 2R's Controller runs), compiled.
_law = _jit()(two_link_law)

# numba's cache checks only the stamp of this file, but the cached code embeds functions of
# control.py (the law), friction.py (the Karnopp events) and plant_state.py (the mechanics):
# _source_stamp returns their stamps as they were when the cache was compiled.
_SOURCE_STAMP = tuple(float(v) for fn in (two_link_law, karnopp_substep_over,
                                          two_link_mechanics)
                      for st in (os.stat(fn.__code__.co_filename),)
                      for v in (st.st_mtime, st.st_size))


@_jit()
def _source_stamp():
    """Return the ``(mtime, size)`` of the files above this code was built with."""
    return _SOURCE_STAMP


@_jit()
def _drive_voltage(i_ref, i, xi, p, o):
    """Return the PI drive terminal voltage after the clamp [V] (motor row at ``p[o:]``)."""
    v = p[o + M_KP] * (i_ref - i) + xi
    lim = p[o + M_VMAX]
    return lim if v > lim else (-lim if v < -lim else v)


@_jit()
def _joint_torque(i, v, p, o, eps, rotor):
    """
    Return the actuator torque ``N k_t i - tau_gear(T, qd)`` [N·m], ``T = N k_t i - rotor``.

    ``rotor`` is the rotor torque ``(D qdd)_j`` [N·m] (motor row at ``p[o:]``).
    """
    nk = p[o + M_KT] * i
    mesh = nk - rotor
    s = math.tanh(v / eps)
    return nk - (p[o + M_WA] * abs(mesh) + p[o + M_WB] * mesh * s) * s


@_jit(nogil=True)
def _loop(x0, p, c, s, ref, noise, late_k, rec, stats):
    """
    Run the closed loop from state ``x0``; record into ``rec`` when it has rows.

    ``stats`` (``ST_SIZE``) receives the run's figures: late-window (``k >= late_k``)
    max |e| and sum of e^2, whole-run max |e|, max |tau_cmd| and sum of tau_cmd^2, max |i|,
    max |V|, saturated tick counts, the late-window tick count, and the final state.
    """
    n = ref.shape[0]
    record = rec.shape[0] > 0
    x = (x0[0], x0[1], x0[2], x0[3], x0[4], x0[5], x0[6], x0[7])
    motor = p[P_MOTOR] != 0.0
    # controller constants
    tl1, tl2, period = c[C_TL1], c[C_TL2], c[C_PERIOD]
    z1 = 0.0
    z2 = 0.0
    # sensors
    ideal = s[S_IDEAL] != 0.0
    res = s[S_RES]
    filtered = s[S_FILTERED] != 0.0
    alpha = s[S_ALPHA]
    speriod = s[S_PERIOD]
    pos_noise = s[S_POS_NOISE] != 0.0
    vel_noise = s[S_VEL_NOISE] != 0.0
    prev1 = prev2 = 0.0
    fv1 = fv2 = 0.0
    for i in range(ST_SIZE):
        stats[i] = 0.0
    u1 = u2 = 0.0
    for k in range(n):
        # 1. measurement y_k
        if ideal:
            y1, y2, w1, w2 = x[0], x[1], x[2], x[3]
        else:
            y1, y2 = x[0], x[1]
            if pos_noise:
                y1 = y1 + noise[k, 0]
                y2 = y2 + noise[k, 1]
            if res != 0.0:
                y1 = np.rint(y1 / res) * res
                y2 = np.rint(y2 / res) * res
            if filtered:
                if k == 0:
                    fv1, fv2 = x[2], x[3]
                else:
                    fv1 += alpha * ((y1 - prev1) / speriod - fv1)
                    fv2 += alpha * ((y2 - prev2) / speriod - fv2)
                prev1, prev2 = y1, y2
                w1, w2 = fv1, fv2
            else:
                w1, w2 = x[2], x[3]
            if vel_noise:
                w1 = w1 + noise[k, 2]
                w2 = w2 + noise[k, 3]
        # 2. reference r_k
        r1, r2, rv1, rv2, ra1, ra2 = ref[k, 0], ref[k, 1], ref[k, 2], ref[k, 3], ref[k, 4], \
            ref[k, 5]
        # 3. controller u_k
        t1, t2, _, _, z1, z2 = _law((y1, y2), (w1, w2), (r1, r2), (rv1, rv2), (ra1, ra2), z1,
                                    z2, c)
        # 4. plant over [t_k, t_k + T] with u_k held
        u1, u2 = _input(t1, t2, p)
        xk = x
        x, qa1, qa2 = _period_step(x, u1, u2, p)
        # telemetry at t_k+ (new command applied), figures
        if motor:
            tj1 = _joint_torque(xk[4], xk[2], p, P_MO1, p[P_FR1 + F_EPS], p[P_JR1] * qa1)
            tj2 = _joint_torque(xk[5], xk[3], p, P_MO1 + MO_SIZE, p[P_FR1 + FR_SIZE + F_EPS],
                                p[P_JC2] * qa1 + p[P_JR2] * qa2)
            vv1 = _drive_voltage(u1, xk[4], xk[6], p, P_MO1)
            vv2 = _drive_voltage(u2, xk[5], xk[7], p, P_MO1 + MO_SIZE)
        else:
            tj1, tj2 = u1, u2
            vv1 = vv2 = 0.0
        q_e1 = abs(xk[0] - r1)
        q_e2 = abs(xk[1] - r2)
        if k >= late_k:
            stats[ST_LATE_MAX1] = max(stats[ST_LATE_MAX1], q_e1)
            stats[ST_LATE_MAX2] = max(stats[ST_LATE_MAX2], q_e2)
            stats[ST_LATE_SQ1] += q_e1 * q_e1
            stats[ST_LATE_SQ2] += q_e2 * q_e2
            stats[ST_LATE_N] += 1.0
        stats[ST_MAX1] = max(stats[ST_MAX1], q_e1)
        stats[ST_MAX2] = max(stats[ST_MAX2], q_e2)
        stats[ST_TAU_MAX1] = max(stats[ST_TAU_MAX1], abs(t1))
        stats[ST_TAU_MAX2] = max(stats[ST_TAU_MAX2], abs(t2))
        stats[ST_TAU_SQ1] += t1 * t1
        stats[ST_TAU_SQ2] += t2 * t2
        stats[ST_I_MAX1] = max(stats[ST_I_MAX1], abs(xk[4]))
        stats[ST_I_MAX2] = max(stats[ST_I_MAX2], abs(xk[5]))
        stats[ST_V_MAX1] = max(stats[ST_V_MAX1], abs(vv1))
        stats[ST_V_MAX2] = max(stats[ST_V_MAX2], abs(vv2))
        if abs(t1) >= tl1:
            stats[ST_SAT1] += 1.0
        if abs(t2) >= tl2:
            stats[ST_SAT2] += 1.0
        if record:
            rk = rec[k]
            rk[0] = k * period
            rk[1], rk[2], rk[3], rk[4] = xk[0], xk[1], xk[2], xk[3]
            rk[5], rk[6], rk[7], rk[8] = y1, y2, w1, w2
            rk[9], rk[10], rk[11], rk[12], rk[13], rk[14] = r1, r2, rv1, rv2, ra1, ra2
            rk[15], rk[16], rk[17], rk[18] = t1, t2, tj1, tj2
            rk[19], rk[20], rk[21], rk[22] = xk[4], xk[5], vv1, vv2
    stats[ST_SAT_ANY] = 1.0 if (stats[ST_SAT1] + stats[ST_SAT2]) > 0.0 else 0.0
    for i in range(8):
        stats[ST_FINAL + i] = x[i]


@_jit(nogil=True)
def _loop_many(x0s, ps, cs, s, ref, noise, late_k, stats):
    """:func:`_loop` for each row of ``x0s``/``ps``/``cs`` (no records); fills ``stats``."""
    empty = np.zeros((0, REC_SIZE))
    for j in range(x0s.shape[0]):
        _loop(x0s[j], ps[j], cs[j], s, ref, noise, late_k, empty, stats[j])


@_jit()
def _rhs_vec(x, tau, p):
    """Plant derivative for a torque command ``tau`` (2,) at state ``x`` (8,), shape (8,)."""
    u1, u2 = _input(tau[0], tau[1], p)
    d = _rhs(x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], u1, u2, p)
    out = np.empty(8)
    for i in range(8):
        out[i] = d[i]
    return out


@_jit()
def _step_vec(x, tau1, tau2, p):
    """One control period from ``x`` (8,) with the torque command held; new state (8,)."""
    u1, u2 = _input(tau1, tau2, p)
    y = _period_step((x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7]), u1, u2, p)[0]
    out = np.empty(8)
    for i in range(8):
        out[i] = y[i]
    return out


@_jit()
def _step_held(x0, x1, x2, x3, x4, x5, x6, x7, u1, u2, p):
    """One control period from the state floats with the held input ``u``; an 8-tuple."""
    return _period_step((x0, x1, x2, x3, x4, x5, x6, x7), u1, u2, p)[0]


if _source_stamp() != _SOURCE_STAMP:     # they changed since the cache was written: drop it
    for _stale in list(globals().values()):
        if isinstance(_stale, numba.core.dispatcher.Dispatcher):
            _stale.recompile()


# --------------------------------------------------------------------------------------------
# Python entry points


def plant_rhs(x, tau, packed_plant: np.ndarray) -> np.ndarray:
    """
    Compiled plant derivative ``dx/dt`` [state units / s] for a torque command ``tau``.

    The same function as :func:`manip_control.plant.plant_dynamics` (which it is tested
    against); ``packed_plant`` from :func:`pack_plant`.
    """
    return _rhs_vec(np.ascontiguousarray(x, dtype=np.float64),
                    np.ascontiguousarray(tau, dtype=np.float64), packed_plant)


def plant_step(x, tau1: float, tau2: float, packed_plant: np.ndarray) -> np.ndarray:
    """Compiled :meth:`manip_control.plant.Plant.step`: the state after one held period."""
    return _step_vec(np.ascontiguousarray(x, dtype=np.float64), float(tau1), float(tau2),
                     packed_plant)


def plant_unsupported(params) -> str | None:
    """
    Why the kernel cannot integrate plant ``params`` (a short reason), or None.

    The environment variable ``MANIP_CONTROL_KERNEL=0`` disables the kernel everywhere.
    """
    if not AVAILABLE:
        return 'numba is not importable'
    if os.environ.get('MANIP_CONTROL_KERNEL', '1').strip() == '0':
        return 'disabled by MANIP_CONTROL_KERNEL=0'
    payload = getattr(params, 'payload', None)
    if payload is not None and payload.mass > 0.0:
        return 'plant.payload (a mass picked up during the run) is not compiled'
    return None


def stepper(params, period: float):
    """
    Return a compiled period step for :class:`manip_control.plant.Plant`, or None.

    The callable ``step(x, u1, u2) -> tuple`` advances the state sequence ``x`` (8 floats)
    over one period with the held input ``u`` (current reference [A] or clamped torque
    [N·m], as ``Plant.input_for`` returns it): the same RK4 as ``Plant.step``, in machine
    code. None when :func:`plant_unsupported` names a reason. The compiled code is loaded
    (or compiled, the first time on a machine) here, not at the first step.
    """
    if plant_unsupported(params) is not None:
        return None
    packed = pack_plant(params, period)
    step = _step_held

    def held_step(x, u1, u2):
        return step(x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], u1, u2, packed)

    held_step((0.0,) * 8, 0.0, 0.0)
    return held_step


class Packed:
    """
    A scenario's kernel inputs: packed parameters, initial state, references and noise.

    Parameters
    ----------
    scenario : Scenario
    duration : float, optional
        Simulated time [s] (default: the scenario's).

    """

    def __init__(self, scenario, duration: float | None = None):
        period = scenario.period
        self.n = int(round((scenario.duration if duration is None else duration) / period))
        self.plant = pack_plant(scenario.plant, period)
        self.controller = pack_controller(scenario.controller, period)
        self.sensors = pack_sensors(scenario.plant.sensors, period)
        self.x0 = initial_state(scenario.plant)
        traj = trajectory_from_config(dict(scenario.trajectory), 2)
        self.ref = references(traj, self.n, period)
        self.noise = sensor_noise(scenario.plant.sensors, self.n)
        late = np.arange(self.n) * period >= scenario.late_window_start
        self.late_k = int(np.argmax(late)) if late.any() else 0


def closed_loop(scenario, duration: float | None = None,
                record: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """
    Run ``scenario``'s closed loop in the kernel.

    Returns
    -------
    records : ndarray, shape (n, REC_SIZE) (or (0, REC_SIZE) when ``record`` is false)
        Per-tick records in the column order of
        :func:`manip_control.simulation.run_closed_loop`.
    stats : ndarray, shape (ST_SIZE,)
        Run figures (``ST_*`` indices), with the final state at ``ST_FINAL``.

    """
    pk = Packed(scenario, duration)
    rec = np.zeros((pk.n if record else 0, REC_SIZE))
    stats = np.zeros(ST_SIZE)
    _loop(pk.x0, pk.plant, pk.controller, pk.sensors, pk.ref, pk.noise, pk.late_k, rec, stats)
    return rec, stats


def closed_loop_many(x0s: np.ndarray, plants: np.ndarray, controllers: np.ndarray,
                     shared: Packed) -> np.ndarray:
    """
    Run many closed loops that share references, sensors and timing (no records).

    Parameters
    ----------
    x0s : ndarray, shape (N, 8)
        Initial states.
    plants, controllers : ndarray, shape (N, P_SIZE) and (N, C_SIZE)
        Packed parameters per run.
    shared : Packed
        Supplies the references, sensors, noise, number of ticks and late-window start.

    Returns
    -------
    ndarray, shape (N, ST_SIZE)
        The figures of each run (``ST_*``). The GIL is released while it runs.

    """
    stats = np.zeros((x0s.shape[0], ST_SIZE))
    _loop_many(np.ascontiguousarray(x0s), np.ascontiguousarray(plants),
               np.ascontiguousarray(controllers), shared.sensors, shared.ref, shared.noise,
               shared.late_k, stats)
    return stats
