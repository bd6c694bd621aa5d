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
Feedback laws for an arm of n joints, computed from the controller's own nominal model.

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
    tau = T + D^ v,   D^ = diag(Jr) + rotor coupling of the nominal rotors

so the gear passes ``eta`` when motoring (``T = y / eta`` at speed) and the link drives the
motor with ``1 / eta_back`` when back-driven (``T = eta_back y``). ``s`` is taken from the
reference velocity, ``tanh(qd_d / eps)`` with the nominal friction's ``eps``: a smooth
switch between the two efficiencies near zero power, continuous in the state and in time,
and not switched by velocity noise. The denominator is kept >= 0.05 (reached only for a
nominal ``eta_back`` below 1/2 near zero speed).

The nominal model is any :class:`~manip_control.arm_model.ArmModel` (the closed-form 2R or a
URDF arm); the laws use only its interface, and every per-joint value is a vector of its
``n`` joints.

Both laws then saturate the command per joint to ``+-torque_limit`` and report which joints
were saturated. The integral uses anti-windup: it is clamped to ``+-integral_limit`` and not
advanced on a joint whose command is saturated in the direction of the error.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Sequence

from manip_control.arm_model import ArmModel
from manip_control.arm_model import TwoLinkArm
from manip_control.friction import friction_torque_scalar
from manip_control.parameters import _nonnegative
from manip_control.parameters import _positive
from manip_control.parameters import _vector
from manip_control.parameters import ControllerParameters
from manip_control.parameters import NominalModel
from manip_control.parameters import ParameterError
import numpy as np


class ControlOutput(NamedTuple):
    """One controller tick's result, per joint in the model's joint order."""

    tau: tuple
    """Command after the limit [N·m], one float per joint."""
    saturated: tuple
    """Whether the limit acted, one bool per joint."""


def computed_torque(q, qd, q_d, qd_d, qdd_d, model: ArmModel, kp, kd) -> np.ndarray:
    """
    Computed-torque law without integral, friction or limits (reference form).

    ``tau = M^(q) (qdd_d - Kd (qd - qd_d) - Kp (q - q_d)) + c^(q, qd) + g^(q)`` [N·m]

    Parameters
    ----------
    q, qd : array_like, shape (n,)
        Measured joint position [rad] and velocity [rad/s].
    q_d, qd_d, qdd_d : array_like, shape (n,)
        Desired position, velocity, acceleration.
    model : ArmModel
        The nominal model.
    kp, kd : array_like, shape (n,)
        Diagonal gains [1/s^2], [1/s].

    """
    q, qd = np.asarray(q, float), np.asarray(qd, float)
    v = (np.asarray(qdd_d, float) - np.asarray(kd, float) * (qd - np.asarray(qd_d, float))
         - np.asarray(kp, float) * (q - np.asarray(q_d, float)))
    return model.inverse_dynamics(q, qd, v)


def pd_gravity(q, qd, q_d, model: ArmModel, kp, kd) -> np.ndarray:
    """PD + gravity compensation ``tau = g^(q) - Kp (q - q_d) - Kd qd`` [N·m]."""
    q, qd = np.asarray(q, float), np.asarray(qd, float)
    return (model.gravity(q) - np.asarray(kp, float) * (q - np.asarray(q_d, float))
            - np.asarray(kd, float) * qd)


def nominal_arm(nominal: NominalModel) -> ArmModel:
    """Return the closed-form 2R nominal model of ``nominal`` (arm, rotors, coupling)."""
    return TwoLinkArm.from_nominal(nominal)


class Controller:
    """
    Stateful controller (integral, limits, runtime-changeable gains) for n joints.

    Parameters
    ----------
    params : ControllerParameters
        Law, gains and limits; every per-joint list has one entry per joint of ``model``.
    period : float
        Control period [s] (for the integral).
    model : ArmModel, optional
        The nominal rigid-body model (default: the closed-form 2R of ``params.nominal``).

    Raises
    ------
    ParameterError
        When a per-joint list of ``params`` does not have ``model.n`` entries.

    """

    def __init__(self, params: ControllerParameters, period: float,
                 model: ArmModel | None = None):
        self.params = params
        self.period = float(period)
        nm = params.nominal
        self.model = nominal_arm(nm) if model is None else model
        self.n = n = self.model.n
        if len(nm.friction) != n:
            raise ParameterError(f'controller.nominal.friction: must have {n} entries, one '
                                 f'per joint of the model (got {len(nm.friction)})')
        self._friction = tuple(nm.friction)
        self._ct = params.law == 'computed_torque'
        self._gear = gear_inversion_constants(nm)
        self.set_gains(params.kp, params.kd, params.ki)
        self.set_torque_limit(params.torque_limit)
        self.integral_limit = _vector('integral_limit', params.integral_limit, n,
                                      check=_nonnegative)
        self.friction_compensation = bool(params.friction_compensation)
        self.reset()

    def reset(self) -> None:
        """Zero the error integral."""
        self._z = [0.0] * self.n

    def set_gains(self, kp, kd, ki=None) -> None:
        """Change the gains (validated: kp, kd > 0, ki >= 0); takes effect on the next tick."""
        n = self.n
        kp = _vector('kp', kp, n, check=_positive)
        kd = _vector('kd', kd, n, check=_positive)
        ki = self.ki if ki is None else _vector('ki', ki, n, check=_nonnegative)
        self.kp, self.kd, self.ki = kp, kd, ki

    def set_torque_limit(self, limit) -> None:
        """Change the per-joint command limit [N·m] (> 0)."""
        self.torque_limit = _vector('torque_limit', limit, self.n, check=_positive)

    def update(self, q: Sequence[float], qd: Sequence[float], q_d: Sequence[float],
               qd_d: Sequence[float], qdd_d: Sequence[float]) -> ControlOutput:
        """
        One tick: command from the measured state and the reference sample.

        Parameters
        ----------
        q, qd : sequence of n float
            Measured position [rad] and velocity [rad/s].
        q_d, qd_d, qdd_d : sequence of n float
            Desired position [rad], velocity [rad/s], acceleration [rad/s^2].

        """
        n = self.n
        kp, kd, ki, z = self.kp, self.kd, self.ki, self._z
        e = [q[k] - q_d[k] for k in range(n)]
        if self._ct:
            a = [qdd_d[k] - kd[k] * (qd[k] - qd_d[k]) - kp[k] * e[k] - ki[k] * z[k]
                 for k in range(n)]
            tau = self.model.inverse_dynamics(q, qd, a).tolist()
        else:
            a = None
            g = self.model.gravity(q)
            tau = [float(g[k]) - kp[k] * e[k] - kd[k] * qd[k] - ki[k] * z[k]
                   for k in range(n)]
        if self.friction_compensation:
            fr = self._friction
            for k in range(n):
                tau[k] += friction_torque_scalar(qd_d[k], fr[k])
        if self._gear is not None:
            tau = invert_gear(tau, a if a is not None else [0.0] * n, qd_d, self._gear)
        lim, zl, dt = self.torque_limit, self.integral_limit, self.period
        sat = [False] * n
        for k in range(n):
            t, lk = tau[k], lim[k]
            if t > lk or t < -lk:
                sat[k] = True
                tau[k] = t = lk if t > 0.0 else -lk
            # Anti-windup: no integration into a saturated direction (a positive error
            # pushes the command negative), then clamp the integral.
            if ki[k] and not (sat[k] and (t < 0.0) == (e[k] > 0.0)):
                z[k] = min(max(z[k] + e[k] * dt, -zl[k]), zl[k])
        return ControlOutput(tuple(tau), tuple(sat))


#: Floor of the gear inversion's denominator ``1 - kappa``.
GEAR_INVERSION_FLOOR = 0.05


class GearInversion(NamedTuple):
    """Constants of :func:`invert_gear` (:func:`gear_inversion_constants`)."""

    wa: tuple
    """Loss weight ``(k_f + k_b) / 2`` per joint."""
    wb: tuple
    """Loss weight ``(k_f - k_b) / 2`` per joint."""
    rotor: tuple
    """Rows of the nominal rotor matrix ``D^`` [kg·m^2], lower triangular."""
    inv_eps: tuple
    """Inverse smoothing velocity of the nominal friction per joint [s/rad]."""


def rotor_matrix(nominal: NominalModel) -> tuple:
    """
    Rows of the nominal rotor matrix ``D^`` [kg·m^2] (torque ``D^ qdd`` the rotors take).

    ``D^_kk = Jr_k`` (reflected rotor inertia) and, with ``rotor_coupling``, the rotor of
    joint k riding on link k-1 adds ``D^_k,k-1 = Jr_k / N_k`` (axes parallel, as in the
    planar 2R).
    """
    jr = [float(v) for v in nominal.rotor_inertia]
    n = len(jr)
    rows = []
    for k in range(n):
        row = [0.0] * n
        row[k] = jr[k]
        if nominal.rotor_coupling and k > 0:
            row[k - 1] = jr[k] / float(nominal.gear_ratio[k])
        rows.append(tuple(row))
    return tuple(rows)


def gear_inversion_constants(nominal: NominalModel) -> GearInversion | None:
    """
    Constants of :func:`invert_gear` for a nominal model, or None when its gears are ideal.

    Loss weights ``wa = (k_f + k_b) / 2``, ``wb = (k_f - k_b) / 2`` (``k_f = 1 - eta``,
    ``k_b = 1 / eta_back - 1``) per joint, the nominal rotor matrix (:func:`rotor_matrix`)
    and the inverse smoothing velocities of the nominal friction [s/rad].
    """
    wa, wb = [], []
    for eta, eta_back in zip(nominal.eta, nominal.eta_back):
        kf = 1.0 - float(eta)
        kb = 1.0 / float(eta_back) - 1.0
        wa.append(0.5 * (kf + kb))
        wb.append(0.5 * (kf - kb))
    if not any(wa):
        return None
    return GearInversion(tuple(wa), tuple(wb), rotor_matrix(nominal),
                         tuple(1.0 / fr.eps for fr in nominal.friction))


def invert_gear(tau: Sequence[float], accel: Sequence[float], qd_ref: Sequence[float],
                gear: GearInversion) -> list:
    """
    Command ``n`` [N·m] whose gear output is ``tau*`` at acceleration ``v`` (module docstring).

    Parameters
    ----------
    tau : sequence of n float
        The law's joint torque ``tau*`` [N·m] (on the arm with its rotors).
    accel : sequence of n float
        The law's commanded acceleration ``v`` [rad/s^2] (zero for PD + gravity).
    qd_ref : sequence of n float
        Reference velocity [rad/s]: ``s = tanh(qd_d / eps)``.
    gear : GearInversion
        :func:`gear_inversion_constants`.

    """
    out = []
    for k, row in enumerate(gear.rotor):
        ro = 0.0
        for j in range(k + 1):
            if row[j]:
                ro += row[j] * accel[j]
        s = math.tanh(qd_ref[k] * gear.inv_eps[k])
        y = tau[k] - ro
        kappa = 1.0 - (gear.wa[k] * (1.0 if y >= 0.0 else -1.0) + gear.wb[k] * s) * s
        out.append(y / max(kappa, GEAR_INVERSION_FLOOR) + ro)
    return out


def check_gain_update(name: str, value, n: int = 2) -> tuple[float, ...]:
    """Validate a runtime gain/limit update for n joints; raises ParameterError naming why."""
    checks = {'kp': _positive, 'kd': _positive, 'ki': _nonnegative,
              'torque_limit': _positive, 'wn': _positive, 'zeta': _positive}
    if name not in checks:
        raise ParameterError(f'{name}: not a runtime-changeable gain')
    return _vector(name, value, n, check=checks[name])
