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
Feedback laws for the 2R arm, computed from the controller's own nominal model.

Tracking error ``e = q - q_d``, ``e_dot = qd - qd_d``, integral ``z = int e dt``.

Computed torque (inverse dynamics)::

    tau = M^(q) (qdd_d - Kd e_dot - Kp e - Ki z) + c^(q, qd) + g^(q) [+ f^(qd)]

With a perfect model the error obeys ``e_dd + Kd e_dot + Kp e = 0`` per joint
(``kp = wn^2``, ``kd = 2 zeta wn``). With a mismatched model the error is driven by
``M^-1 (M~ v + c~ + g~)`` and stays ultimately bounded (input-to-state stability).

PD + gravity compensation (torque-unit gains)::

    tau = g^(q) - Kp e - Kd qd - Ki z [+ f^(qd)]

Friction compensation (``friction_compensation``, default on) adds the nominal friction at
the *reference* velocity, ``f^(qd_d)``, a feed-forward: it does not depend on the measured
state, so an over-estimated friction is a bounded disturbance that the PD terms reject, never
a negative damping. (Taken from the measured velocity, the Coulomb term ``tau_c tanh(qd /
eps)`` has a slope ``tau_c / eps`` at rest -- 80 N·m·s/rad for 0.8 N·m over 0.01 rad/s --
far above the damping gain, and an arm with less friction than the nominal model
limit-cycles around its set point; test_control.py checks 0 % to 150 % of the nominal
Coulomb friction.) The price: at rest, and where the arm lags the reference, the real
friction is not cancelled, which the PD (and integral) terms take up.

Drive inversion (nominal ``eta`` / ``eta_back`` below 1). The plant's actuator torque is
``N k_t i - tau_gear(T)`` with the loss on the mesh torque ``T = N k_t i - D qdd`` (the rotors
sit upstream of the gears, :mod:`manip_control.plant`), ``tau_gear = kappa(sign T) T``,
``kappa(sigma) = (wa sigma + wb s) s``, ``s = tanh(qd / eps)``. For the law's torque
``tau*`` (the computed torque above, with friction) and its commanded acceleration ``v``
(zero for PD + gravity) the command ``n`` solves ``n - tau_gear(n - D^ v) = tau*``::

    y = tau* - D^ v                     (torque the gear must deliver to the links)
    T = y / (1 - kappa(sign y))         (exact: sign T = sign y since 1 - kappa > 0)
    tau = T + D^ v,   D^ = [[Jr1, 0], [c12, Jr2]] of the nominal rotors

so the gear passes ``eta`` when motoring (``T = y / eta`` at speed) and the link drives the
motor with ``1 / eta_back`` when back-driven (``T = eta_back y``). ``s`` is taken from the
reference velocity, ``tanh(qd_d / eps)`` with the nominal friction's ``eps``: a smooth
switch between the two efficiencies near zero power, continuous in the state and in time,
and not switched by velocity noise. The denominator is kept >= 0.05 (reached only for a
nominal ``eta_back`` below 1/2 near zero speed).

Both laws then saturate the command per joint to ``+-torque_limit`` and report which joints
were saturated. The integral uses anti-windup: it is clamped to ``+-integral_limit`` and not
advanced on a joint whose command is saturated in the direction of the error.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from manip_control.dynamics import TwoLinkModel
from manip_control.friction import friction_torque_scalar
from manip_control.parameters import _nonnegative
from manip_control.parameters import _positive
from manip_control.parameters import _vector
from manip_control.parameters import ControllerParameters
from manip_control.parameters import ParameterError
import numpy as np


class ControlOutput(NamedTuple):
    """One controller tick's result."""

    tau1: float
    """Joint 1 command after the limit [N·m]."""
    tau2: float
    """Joint 2 command after the limit [N·m]."""
    saturated1: bool
    saturated2: bool


def computed_torque(q, qd, q_d, qd_d, qdd_d, model: TwoLinkModel, kp, kd) -> np.ndarray:
    """
    Computed-torque law without integral, friction or limits (reference form).

    ``tau = M^(q) (qdd_d - Kd (qd - qd_d) - Kp (q - q_d)) + c^(q, qd) + g^(q)`` [N·m]

    Parameters
    ----------
    q, qd : array_like, shape (2,)
        Measured joint position [rad] and velocity [rad/s].
    q_d, qd_d, qdd_d : array_like, shape (2,)
        Desired position, velocity, acceleration.
    model : TwoLinkModel
        The nominal model.
    kp, kd : array_like, shape (2,)
        Diagonal gains [1/s^2], [1/s].

    """
    q, qd = np.asarray(q, float), np.asarray(qd, float)
    v = (np.asarray(qdd_d, float) - np.asarray(kd, float) * (qd - np.asarray(qd_d, float))
         - np.asarray(kp, float) * (q - np.asarray(q_d, float)))
    return model.inertia_matrix(q) @ v + model.coriolis_vector(q, qd) + model.gravity_vector(q)


def pd_gravity(q, qd, q_d, model: TwoLinkModel, kp, kd) -> np.ndarray:
    """PD + gravity compensation ``tau = g^(q) - Kp (q - q_d) - Kd qd`` [N·m]."""
    q, qd = np.asarray(q, float), np.asarray(qd, float)
    return (model.gravity_vector(q) - np.asarray(kp, float) * (q - np.asarray(q_d, float))
            - np.asarray(kd, float) * qd)


class Controller:
    """
    Stateful controller (integral, limits, runtime-changeable gains).

    Parameters
    ----------
    params : ControllerParameters
    period : float
        Control period [s] (for the integral).

    """

    def __init__(self, params: ControllerParameters, period: float):
        self.params = params
        self.period = float(period)
        nm = params.nominal
        self.model = TwoLinkModel(nm.arm, nm.rotor_inertia, nm.rotor_coupling_terms)
        self._friction = nm.friction
        self._ct = params.law == 'computed_torque'
        self._gear = gear_inversion_constants(nm)
        self.set_gains(params.kp, params.kd, params.ki)
        self.set_torque_limit(params.torque_limit)
        self.integral_limit = tuple(float(v) for v in params.integral_limit)
        self.friction_compensation = bool(params.friction_compensation)
        self.reset()

    def reset(self) -> None:
        """Zero the error integral."""
        self._z1 = 0.0
        self._z2 = 0.0

    def set_gains(self, kp, kd, ki=None) -> None:
        """Change the gains (validated: kp, kd > 0, ki >= 0); takes effect on the next tick."""
        kp = _vector('kp', kp, check=_positive)
        kd = _vector('kd', kd, check=_positive)
        ki = self.ki if ki is None else _vector('ki', ki, check=_nonnegative)
        self.kp, self.kd, self.ki = kp, kd, ki

    def set_torque_limit(self, limit) -> None:
        """Change the per-joint command limit [N·m] (> 0)."""
        self.torque_limit = _vector('torque_limit', limit, check=_positive)

    def update(self, q1: float, q2: float, v1: float, v2: float,
               r1: float, r2: float, rv1: float, rv2: float,
               ra1: float, ra2: float) -> ControlOutput:
        """
        One tick: command from the measured state and the reference sample.

        Parameters are floats: measured q [rad], qd [rad/s]; desired q_d, qd_d, qdd_d.
        """
        e1, e2 = q1 - r1, q2 - r2
        kp1, kp2 = self.kp
        kd1, kd2 = self.kd
        ki1, ki2 = self.ki
        z1, z2 = self._z1, self._z2
        m = self.model
        if self._ct:
            a1 = ra1 - kd1 * (v1 - rv1) - kp1 * e1 - ki1 * z1
            a2 = ra2 - kd2 * (v2 - rv2) - kp2 * e2 - ki2 * z2
            t1, t2 = m.inverse_dynamics_scalar(q1, q2, v1, v2, a1, a2)
        else:
            a1 = a2 = 0.0
            c12 = math.cos(q1 + q2)
            t1 = m.g1 * math.cos(q1) + m.g2 * c12 - kp1 * e1 - kd1 * v1 - ki1 * z1
            t2 = m.g2 * c12 - kp2 * e2 - kd2 * v2 - ki2 * z2
        if self.friction_compensation:
            t1 += friction_torque_scalar(rv1, self._friction[0])
            t2 += friction_torque_scalar(rv2, self._friction[1])
        if self._gear is not None:
            t1, t2 = invert_gear(t1, t2, a1, a2, rv1, rv2, self._gear)
        l1, l2 = self.torque_limit
        s1 = t1 > l1 or t1 < -l1
        s2 = t2 > l2 or t2 < -l2
        if s1:
            t1 = l1 if t1 > 0.0 else -l1
        if s2:
            t2 = l2 if t2 > 0.0 else -l2
        # Anti-windup: no integration into a saturated direction (a positive error pushes
        # the command negative), then clamp the integral.
        if ki1 and not (s1 and (t1 < 0.0) == (e1 > 0.0)):
            zl = self.integral_limit[0]
            self._z1 = min(max(z1 + e1 * self.period, -zl), zl)
        if ki2 and not (s2 and (t2 < 0.0) == (e2 > 0.0)):
            zl = self.integral_limit[1]
            self._z2 = min(max(z2 + e2 * self.period, -zl), zl)
        return ControlOutput(t1, t2, s1, s2)


#: Floor of the gear inversion's denominator ``1 - kappa``.
GEAR_INVERSION_FLOOR = 0.05


def gear_inversion_constants(nominal) -> tuple | None:
    """
    Constants of :func:`invert_gear` for a nominal model, or None when its gears are ideal.

    Returns ``(wa1, wb1, wa2, wb2, jr1, jc2, jr2, 1/eps1, 1/eps2)``: loss weights
    ``wa = (k_f + k_b) / 2``, ``wb = (k_f - k_b) / 2`` (``k_f = 1 - eta``,
    ``k_b = 1 / eta_back - 1``), the nominal rotor matrix ``D^ = [[jr1, 0], [jc2, jr2]]``
    [kg·m^2] and the inverse smoothing velocities of the nominal friction [s/rad].
    """
    w = []
    for eta, eta_back in zip(nominal.eta, nominal.eta_back):
        kf = 1.0 - float(eta)
        kb = 1.0 / float(eta_back) - 1.0
        w += [0.5 * (kf + kb), 0.5 * (kf - kb)]
    if w[0] == 0.0 and w[2] == 0.0:
        return None
    jr1, jr2 = (float(v) for v in nominal.rotor_inertia)
    jc2 = nominal.rotor_coupling_terms[1]
    return (w[0], w[1], w[2], w[3], jr1, jc2, jr2, 1.0 / nominal.friction[0].eps,
            1.0 / nominal.friction[1].eps)


def invert_gear(t1: float, t2: float, a1: float, a2: float, rv1: float, rv2: float,
                gear: tuple) -> tuple[float, float]:
    """
    Command ``n`` [N·m] whose gear output is ``tau*`` at acceleration ``v`` (module docstring).

    Parameters
    ----------
    t1, t2 : float
        The law's joint torque ``tau*`` [N·m] (on the arm with its rotors).
    a1, a2 : float
        The law's commanded acceleration ``v`` [rad/s^2] (zero for PD + gravity).
    rv1, rv2 : float
        Reference velocity [rad/s]: ``s = tanh(qd_d / eps)``.
    gear : tuple
        :func:`gear_inversion_constants`.

    """
    wa1, wb1, wa2, wb2, jr1, jc2, jr2, ie1, ie2 = gear
    ro1 = jr1 * a1
    ro2 = jc2 * a1 + jr2 * a2
    s1 = math.tanh(rv1 * ie1)
    s2 = math.tanh(rv2 * ie2)
    y1 = t1 - ro1
    y2 = t2 - ro2
    k1 = 1.0 - (wa1 * (1.0 if y1 >= 0.0 else -1.0) + wb1 * s1) * s1
    k2 = 1.0 - (wa2 * (1.0 if y2 >= 0.0 else -1.0) + wb2 * s2) * s2
    return (y1 / max(k1, GEAR_INVERSION_FLOOR) + ro1,
            y2 / max(k2, GEAR_INVERSION_FLOOR) + ro2)


def check_gain_update(name: str, value) -> tuple[float, float]:
    """Validate a runtime gain/limit update; raises ParameterError naming the reason."""
    checks = {'kp': _positive, 'kd': _positive, 'ki': _nonnegative,
              'torque_limit': _positive, 'wn': _positive, 'zeta': _positive}
    if name not in checks:
        raise ParameterError(f'{name}: not a runtime-changeable gain')
    return _vector(name, value, check=checks[name])
