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
Rigid-body dynamics of the planar 2R arm, with the rotors of its two joint motors.

``M(q) qdd + C(q, qd) qd + g(q) = tau``

Conventions: vertical plane, x right, y up, gravity (0, -g0); q1 counter-clockwise from +x,
q2 relative to link 1. With ``a0 = I1 + I2 + m1 lc1^2 + m2 (l1^2 + lc2^2)``,
``b = m2 l1 lc2``, ``d = I2 + m2 lc2^2`` (Spong, Hutchinson & Vidyasagar, *Robot Modeling
and Control*, 2nd ed., section 6.4)::

    M = [[a + 2 b cos q2, d12 + b cos q2],
         [d12 + b cos q2, d22           ]]
    a = a0 + Jr1 + c11,   d12 = d + c12,   d22 = d + Jr2
    h = -b sin q2
    C = [[h qd2, h (qd1 + qd2)],          (Christoffel symbols: Mdot - 2C is skew)
         [-h qd1, 0          ]]
    g = [(m1 lc1 + m2 l1) g0 cos q1 + m2 lc2 g0 cos(q1 + q2),
         m2 lc2 g0 cos(q1 + q2)]

Rotors (the motor placement convention of Spong et al., rotors as separate bodies):
motor i sits on link i-1 at joint i -- motor 1 on the base at joint 1, motor 2 on link 1 at
the elbow -- and its rotor turns at ``N_i qd_i`` relative to the body that carries it. The
rotor's mass is part of the carrying link's (m, lc, I); only its spin about the (parallel)
joint axis adds kinetic energy. Rotor 1 spins at ``N1 qd1``, rotor 2 at ``qd1 + N2 qd2`` in
the inertial frame::

    T_rotors = 1/2 Jm1 (N1 qd1)^2 + 1/2 Jm2 (qd1 + N2 qd2)^2

so M gains the constant matrix ``[[Jm1 N1^2 + Jm2, Jm2 N2], [Jm2 N2, Jm2 N2^2]]``: the
reflected inertias ``Jr = Jm N^2`` on the diagonal and the coupling ``c11 = Jm2``,
``c12 = Jm2 N2`` of rotor 2 riding on link 1. Constant terms of M add nothing to C.

Potential energy ``V = m1 g0 lc1 sin q1 + m2 g0 (l1 sin q1 + lc2 sin(q1 + q2))``.

The :class:`TwoLinkModel` precomputes the lumped constants once; its methods are the fast
scalar paths used in the 1 kHz loop. The module-level functions are convenience wrappers.
"""

from __future__ import annotations

import math

from manip_control.parameters import ArmParameters
import numpy as np


class ShapeError(ValueError):
    """An array argument has the wrong shape or non-finite entries."""


def _vec2(name: str, x) -> np.ndarray:
    arr = np.asarray(x, dtype=float)
    if arr.shape != (2,):
        raise ShapeError(f'{name}: expected shape (2,), got {arr.shape}')
    return arr


class TwoLinkModel:
    """
    Lumped-parameter 2R model (arm + optional rotor inertia and rotor coupling).

    Parameters
    ----------
    arm : ArmParameters
    rotor_inertia : sequence of 2 float, optional
        Reflected rotor inertia ``Jr = Jm N^2`` per joint [kg·m^2], added to the diagonal
        of M.
    rotor_coupling : sequence of 2 float, optional
        ``(c11, c12) = (Jm2, Jm2 N2)`` [kg·m^2]: rotor 2 riding on link 1, added to M11 and
        to M12 (zeros: no coupling).

    Attributes
    ----------
    a, b, d12, d22 : float
        ``M = [[a + 2 b cos q2, d12 + b cos q2], [d12 + b cos q2, d22]]`` [kg·m^2].
    g1, g2 : float
        ``g = [g1 cos q1 + g2 cos(q1 + q2), g2 cos(q1 + q2)]`` [N·m].

    """

    def __init__(self, arm: ArmParameters, rotor_inertia=(0.0, 0.0),
                 rotor_coupling=(0.0, 0.0)):
        self.arm = arm
        self.rotor_inertia = (float(rotor_inertia[0]), float(rotor_inertia[1]))
        self.rotor_coupling = (float(rotor_coupling[0]), float(rotor_coupling[1]))
        m1, m2, l1, lc1, lc2 = arm.m1, arm.m2, arm.l1, arm.lc1, arm.lc2
        self.a0 = arm.I1 + arm.I2 + m1 * lc1 ** 2 + m2 * (l1 ** 2 + lc2 ** 2)
        self.b = m2 * l1 * lc2
        self.d = arm.I2 + m2 * lc2 ** 2
        self.a = self.a0 + self.rotor_inertia[0] + self.rotor_coupling[0]
        self.d12 = self.d + self.rotor_coupling[1]
        self.d22 = self.d + self.rotor_inertia[1]
        g0 = arm.gravity
        self.g1 = (m1 * lc1 + m2 * l1) * g0
        self.g2 = m2 * lc2 * g0

    # -- matrices ---------------------------------------------------------------------------
    def inertia_matrix(self, q) -> np.ndarray:
        """Inertia matrix M(q) [kg·m^2], shape (2, 2), symmetric positive definite."""
        c2 = math.cos(q[1])
        m12 = self.d12 + self.b * c2
        return np.array([[self.a + 2.0 * self.b * c2, m12], [m12, self.d22]])

    def coriolis_matrix(self, q, qd) -> np.ndarray:
        """Christoffel-form Coriolis/centrifugal matrix C(q, qd) [N·m·s/rad], shape (2, 2)."""
        h = -self.b * math.sin(q[1])
        return np.array([[h * qd[1], h * (qd[0] + qd[1])], [-h * qd[0], 0.0]])

    def coriolis_vector(self, q, qd) -> np.ndarray:
        """c(q, qd) = C(q, qd) qd [N·m], shape (2,)."""
        h = -self.b * math.sin(q[1])
        return np.array([h * (2.0 * qd[0] * qd[1] + qd[1] * qd[1]), -h * qd[0] * qd[0]])

    def gravity_vector(self, q) -> np.ndarray:
        """Gravity torque g(q) = dV/dq [N·m], shape (2,)."""
        c12 = math.cos(q[0] + q[1])
        return np.array([self.g1 * math.cos(q[0]) + self.g2 * c12, self.g2 * c12])

    # -- scalar fast paths ------------------------------------------------------------------
    def inverse_dynamics_scalar(self, q1, q2, qd1, qd2, qdd1, qdd2):
        """``tau = M qdd + C qd + g`` on plain floats, returns (tau1, tau2) [N·m]."""
        c2 = math.cos(q2)
        s2 = math.sin(q2)
        bc2 = self.b * c2
        m12 = self.d12 + bc2
        h = -self.b * s2
        g12 = self.g2 * math.cos(q1 + q2)
        tau1 = ((self.a + 2.0 * bc2) * qdd1 + m12 * qdd2 + h * (2.0 * qd1 * qd2 + qd2 * qd2)
                + self.g1 * math.cos(q1) + g12)
        tau2 = m12 * qdd1 + self.d22 * qdd2 - h * qd1 * qd1 + g12
        return tau1, tau2

    def forward_dynamics_scalar(self, q1, q2, qd1, qd2, tau1, tau2):
        """``qdd = M^-1 (tau - C qd - g)`` on plain floats, returns (qdd1, qdd2) [rad/s^2]."""
        c2 = math.cos(q2)
        s2 = math.sin(q2)
        bc2 = self.b * c2
        m11 = self.a + 2.0 * bc2
        m12 = self.d12 + bc2
        m22 = self.d22
        h = -self.b * s2
        g12 = self.g2 * math.cos(q1 + q2)
        r1 = tau1 - h * (2.0 * qd1 * qd2 + qd2 * qd2) - self.g1 * math.cos(q1) - g12
        r2 = tau2 + h * qd1 * qd1 - g12
        det = m11 * m22 - m12 * m12
        return (m22 * r1 - m12 * r2) / det, (m11 * r2 - m12 * r1) / det

    # -- vector API -------------------------------------------------------------------------
    def inverse_dynamics(self, q, qd, qdd) -> np.ndarray:
        """Joint torque ``tau = M(q) qdd + C(q, qd) qd + g(q)`` [N·m], shape (2,)."""
        return np.array(self.inverse_dynamics_scalar(q[0], q[1], qd[0], qd[1], qdd[0], qdd[1]))

    def forward_dynamics(self, q, qd, tau) -> np.ndarray:
        """Joint acceleration ``qdd = M(q)^-1 (tau - C qd - g)`` [rad/s^2], shape (2,)."""
        return np.array(self.forward_dynamics_scalar(q[0], q[1], qd[0], qd[1], tau[0], tau[1]))

    def kinetic_energy(self, q, qd) -> float:
        """``T = 1/2 qd^T M(q) qd`` [J] (rotor kinetic energy included)."""
        qd = np.asarray(qd, dtype=float)
        return 0.5 * float(qd @ self.inertia_matrix(q) @ qd)

    def potential_energy(self, q) -> float:
        """``V = m1 g0 lc1 sin q1 + m2 g0 (l1 sin q1 + lc2 sin(q1+q2))`` [J] (zero at y=0)."""
        arm = self.arm
        g0 = arm.gravity
        return (arm.m1 * g0 * arm.lc1 * math.sin(q[0])
                + arm.m2 * g0 * (arm.l1 * math.sin(q[0]) + arm.lc2 * math.sin(q[0] + q[1])))

    def total_energy(self, q, qd) -> float:
        """Mechanical energy ``T + V`` [J]."""
        return self.kinetic_energy(q, qd) + self.potential_energy(q)


def _model(arm: ArmParameters, rotor_inertia, rotor_coupling=(0.0, 0.0)) -> TwoLinkModel:
    return TwoLinkModel(arm, rotor_inertia, rotor_coupling)


def inertia_matrix(q, arm: ArmParameters, rotor_inertia=(0.0, 0.0),
                   rotor_coupling=(0.0, 0.0)) -> np.ndarray:
    """Inertia matrix M(q) [kg·m^2] of the arm; see the module docstring for the formula."""
    return _model(arm, rotor_inertia, rotor_coupling).inertia_matrix(_vec2('q', q))


def coriolis_matrix(q, qd, arm: ArmParameters) -> np.ndarray:
    """Christoffel-form C(q, qd) [N·m·s/rad] such that ``Mdot - 2C`` is skew-symmetric."""
    return _model(arm, (0.0, 0.0)).coriolis_matrix(_vec2('q', q), _vec2('qd', qd))


def gravity_vector(q, arm: ArmParameters) -> np.ndarray:
    """Gravity torque g(q) [N·m]."""
    return _model(arm, (0.0, 0.0)).gravity_vector(_vec2('q', q))


def inverse_dynamics(q, qd, qdd, arm: ArmParameters, rotor_inertia=(0.0, 0.0)) -> np.ndarray:
    """``tau = M(q) qdd + C(q, qd) qd + g(q)`` [N·m]."""
    return _model(arm, rotor_inertia).inverse_dynamics(_vec2('q', q), _vec2('qd', qd),
                                                       _vec2('qdd', qdd))


def forward_dynamics(q, qd, tau, arm: ArmParameters, rotor_inertia=(0.0, 0.0)) -> np.ndarray:
    """``qdd = M(q)^-1 (tau - C(q, qd) qd - g(q))`` [rad/s^2]."""
    return _model(arm, rotor_inertia).forward_dynamics(_vec2('q', q), _vec2('qd', qd),
                                                       _vec2('tau', tau))


def forward_kinematics(q, arm: ArmParameters) -> np.ndarray:
    """Elbow and tip positions [m], shape (2, 2): rows (x, y) of joint 2 and of the tip."""
    q = _vec2('q', q)
    x1, y1 = arm.l1 * math.cos(q[0]), arm.l1 * math.sin(q[0])
    return np.array([[x1, y1], [x1 + arm.l2 * math.cos(q[0] + q[1]),
                                y1 + arm.l2 * math.sin(q[0] + q[1])]])
