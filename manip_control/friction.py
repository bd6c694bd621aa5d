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
Joint friction: viscous + Coulomb (+ Stribeck), smoothed (default) or with stiction.

``smooth`` (the default ``plant.friction_model``)::

    f(qd) = b qd + (tau_c + tau_s exp(-(qd / v_s)^2)) tanh(qd / eps)      [N·m]

The tanh smoothing (width ``eps`` [rad/s]) keeps the model C-infinity and odd, so fixed-step
integrators see no discontinuity at zero velocity; the price is that no torque is held at
rest: any net torque makes the joint creep at a speed of the order of ``eps``.

``karnopp`` (stiction with breakaway; D. Karnopp, "Computer simulation of stick-slip friction
in mechanical dynamic systems", J. Dyn. Sys. Meas. Control 107, 1985). A moving joint
(``qd != 0``) slides::

    f(qd) = b qd + (tau_c + tau_s exp(-(qd / v_s)^2)) sign(qd)

A joint at rest (``qd == 0`` exactly) is stuck: its friction takes the value that keeps its
acceleration at zero, as long as that value does not exceed the breakaway torque
``F_s = tau_c + tau_s``; above it the joint breaks away with ``f = F_s sign(force)``. For the
coupled arm the stuck joints' friction solves ``(A^-1 (r - f))_j = 0`` for every stuck
joint j, with ``r`` the net torque without friction and ``A`` the matrix of the equation of
motion ``A qdd = r - f`` (:func:`karnopp_friction`).

Stuck is exact: the integrator (:mod:`manip_control.plant`) brings a joint to exactly zero
velocity where its velocity crosses zero (the event is located within the RK4 sub-step and
the joint is stopped by a stiction impulse, which only removes kinetic energy) and keeps it
there while the torque needed to hold it is inside the breakaway band: no drift, and a stuck
joint's friction does no work. The stick band ``v_stick`` [rad/s] is where a joint that comes
to rest without its velocity crossing zero within a sub-step is stopped, if its friction can
hold it. Release is exact at breakaway, up to the RK4 stage at which the breakaway torque is
first exceeded (a quarter of a sub-step at most).
"""

from __future__ import annotations

import math

from manip_control.parameters import FrictionParameters
import numpy as np


def friction_torque_scalar(qd: float, fr: FrictionParameters) -> float:
    """Friction torque of one joint [N·m] at joint velocity ``qd`` [rad/s]."""
    level = fr.tau_c
    if fr.tau_s:
        level += fr.tau_s * math.exp(-(qd / fr.v_s) ** 2)
    return fr.b * qd + level * math.tanh(qd / fr.eps)


def breakaway_torque(fr: FrictionParameters) -> float:
    """Karnopp breakaway (static) friction ``F_s = tau_c + tau_s`` [N·m]."""
    return fr.tau_c + fr.tau_s


def sliding_friction_scalar(qd: float, fr: FrictionParameters) -> float:
    """Karnopp sliding friction ``b qd + (tau_c + tau_s exp(-(qd/v_s)^2)) sign(qd)`` [N·m]."""
    level = fr.tau_c + fr.tau_s * math.exp(-(qd / fr.v_s) ** 2)
    return fr.b * qd + math.copysign(level, qd) if qd != 0.0 else 0.0


def karnopp_friction(qd, rest, inertia, friction) -> tuple[np.ndarray, list[bool]]:
    """
    Return the Karnopp friction torques [N·m] of the coupled joints and which are held.

    Joints with ``qd_j == 0`` are stuck: their friction makes their acceleration zero,
    ``(A^-1 (r - f))_j = 0``, unless it would exceed ``F_s = tau_c + tau_s``; such a joint
    breaks away with ``f_j = F_s sign(f_j)`` and the others are solved again. Moving joints
    slide (:func:`sliding_friction_scalar`).

    Parameters
    ----------
    qd : array_like, shape (n,)
        Joint velocities [rad/s].
    rest : array_like, shape (n,)
        Net joint torque without friction ``r`` [N·m] (``tau_m - c - g`` without gear loss).
    inertia : array_like, shape (n, n)
        Matrix ``A`` of ``A qdd = r - f`` [kg·m^2]: the inertia matrix M(q), or with the
        gear loss on the mesh torque ``M - kappa D`` (not symmetric).
    friction : sequence of n FrictionParameters
        Per-joint friction parameters.

    Returns
    -------
    f : ndarray, shape (n,)
        Friction torques [N·m].
    held : list of n bool
        Joints held by stiction: their acceleration is exactly zero.

    """
    qd = np.asarray(qd, dtype=float)
    r = np.asarray(rest, dtype=float)
    m = np.asarray(inertia, dtype=float)
    n = len(friction)
    f = np.array([sliding_friction_scalar(v, fr) for v, fr in zip(qd, friction)])
    stuck = [j for j in range(n) if qd[j] == 0.0]
    while stuck:
        free = [k for k in range(n) if k not in stuck]
        # the free joints' accelerations with the stuck ones held: M_ff qdd_f = (r - f)_f
        qdd_f = (np.linalg.solve(m[np.ix_(free, free)], (r - f)[free]) if free
                 else np.zeros(0))
        # then each stuck joint's friction is what its row of M qdd = r - f leaves over
        f_s = r[stuck] - m[np.ix_(stuck, free)] @ qdd_f
        broken = [j for j, fj in zip(stuck, f_s) if abs(fj) > breakaway_torque(friction[j])]
        for j, fj in zip(stuck, f_s):
            f[j] = fj
        if not broken:
            break
        for j in broken:
            f[j] = math.copysign(breakaway_torque(friction[j]), f[j])
        stuck = [j for j in stuck if j not in broken]
    return f, [j in stuck for j in range(n)]


def friction_torque(qd, friction) -> np.ndarray:
    """
    Friction torque per joint [N·m].

    Parameters
    ----------
    qd : array_like, shape (n,)
        Joint velocities [rad/s].
    friction : sequence of n FrictionParameters
        Per-joint friction parameters.

    """
    qd = np.asarray(qd, dtype=float)
    if qd.shape != (len(friction),):
        raise ValueError(f'qd: expected shape ({len(friction)},), got {qd.shape}')
    return np.array([friction_torque_scalar(v, fr) for v, fr in zip(qd, friction)])
