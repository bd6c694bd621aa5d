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


#: At most this many zero-velocity events are located per RK4 sub-step (Karnopp friction).
MAX_EVENTS = 4


def karnopp_substep_over(rk4, stop, rhs):
    """
    Return ``karnopp_substep(p, x, h, u, n, v_stick)`` over a plant's RK4 step, stop and rhs.

    The one implementation of the zero-velocity event rules of :mod:`manip_control.plant`'s
    docstring, for every plant of ``n`` joints whose state holds the joint velocities at
    ``x[n:2 n]``: the 2R plant and :class:`~manip_control.arm_plant.ArmPlant` run it in
    Python, the kernel compiles it with numba over its compiled callables (hence only
    indexing, arithmetic and the callables, which numba calls directly as closure constants).

    Parameters
    ----------
    rk4 : callable
        ``rk4(p, x, h, u) -> (state after one classical RK4 step of h [s], qdd [rad/s^2] of
        its first stage)``.
    stop : callable
        ``stop(p, x, j) -> state`` with joint ``j`` stopped by a stiction impulse.
    rhs : callable
        ``rhs(p, x, u) -> dx/dt``.

    Returns
    -------
    callable
        ``karnopp_substep(p, x, h, u, n, v_stick) -> (state, qdd)``: one RK4 sub-step of ``h``
        [s] from the state ``x`` with the held input ``u`` and the plant's constants ``p``
        (passed through to the callables) and the stick band ``v_stick`` [rad/s] per joint;
        the state after it and the accelerations of the first RK4 stage at ``x``.

    Notes
    -----
    After an RK4 step over the rest ``r`` of the sub-step, a joint whose velocity changed
    sign or became exactly zero (crossing ``theta = v0 / (v0 - v1)``), or whose initial
    acceleration brings it to zero within the step (``theta = -v0 / (qdd0 r)`` < 1), has an
    event; the earliest joint's step is redone to ``theta r`` (one secant refinement if that
    overshoots), the joint is stopped, and the rest is integrated (at most
    :data:`MAX_EVENTS` events). Then the stick band: a joint with ``0 < |qd_j| < v_stick_j``
    is stopped if the right-hand side at the stopped state holds it (``qdd_j == 0``).

    """
    def karnopp_substep(p, x, h, u, n, v_stick):
        rest = h
        events = 0
        y, acc = rk4(p, x, rest, u)
        first = acc
        while True:
            th = 2.0
            jc = -1
            for j in range(n):
                v0 = x[n + j]
                if v0 == 0.0:
                    continue
                ve = y[n + j]
                if ve == 0.0 or (ve > 0.0) != (v0 > 0.0):
                    te = v0 / (v0 - ve)
                    if te < th:
                        th = te
                        jc = j
                if v0 * acc[j] < 0.0:      # heading for zero: crossing time by the slope
                    te = -v0 / acc[j] / rest
                    if te < 1.0 and te < th:
                        th = te
                        jc = j
            if jc < 0 or events == MAX_EVENTS:
                x = y
                break
            events += 1
            if th < 1.0:
                hs = th * rest
                y = rk4(p, x, hs, u)[0]
                v0 = x[n + jc]
                ve = y[n + jc]
                if ve != 0.0 and (ve > 0.0) != (v0 > 0.0):     # overshot: one secant step
                    hs = hs * (v0 / (v0 - ve))
                    y = rk4(p, x, hs, u)[0]
            else:
                hs = rest
            x = stop(p, y, jc)
            rest = rest - hs
            if not rest > 0.0:
                break
            y, acc = rk4(p, x, rest, u)
        for j in range(n):      # stick band: a slow joint its friction can hold is stopped
            v = x[n + j]
            if v != 0.0 and -v_stick[j] < v < v_stick[j]:
                y = stop(p, x, j)
                if rhs(p, y, u)[n + j] == 0.0:
                    x = y
        return x, first

    return karnopp_substep
