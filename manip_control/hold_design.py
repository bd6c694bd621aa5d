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


r"""
Loop-delay margins of a joint-space servo, and gains sized from the arm's inertia coupling.

ROS-free (numpy only). Used at configuration time (never inside the control loop).

Delay margin
------------
About a pose at rest (gravity compensated, Coriolis zero at rest) a joint-space PD servo on
the arm ``M(q) qdd = tau`` is the linear loop

.. math::

    M \ddot e = u, \qquad u_k = -K_p e_{k-d} - K_d \dot e_{k-d}

with gain matrices ``Kp`` [N·m/rad] and ``Kd`` [N·m·s/rad], the command held over each
period ``T`` (zero-order hold) and computed from the state sampled ``d`` ticks earlier (loop
delay ``d T``). Exactly discretized over one period (``u`` constant)::

    e+ = e + T v + T^2/2 M^-1 u,      v+ = v + T M^-1 u

and the ``d`` commands in flight are part of the state. :func:`delay_margin` is the largest
``d`` whose closed-loop transition matrix has spectral radius < 1. For gains sized on the
diagonal of M (``Kd = diag(2 w M_kk)``) the light modes of a coupled arm see
``Kd / lambda_min(M)``, far above ``2 w``; for the hold through the nominal mass matrix
(:func:`manip_control.safety.hold_torque`: ``Kp = M^ diag(kp)``, ``Kd = M^ diag(kd)``)
every mode of the nominal arm sees ``kp`` [1/s^2], ``kd`` [1/s].

PD + gravity gains
------------------
:func:`pd_gravity_gains` sizes ``Kp = diag(m_k w^2)``, ``Kd = diag(2 zeta w m_k)`` on the
apparent inertia of joint ``k`` with every other joint free, ``m_k = 1 / (M^-1)_kk``, its
smallest value over the poses. Then ``Kd^1/2 M^-1 Kd^1/2`` has unit-scaled diagonal and
every mode's damping rate is at most ``n 2 zeta w`` (its trace), whatever the coupling; the
diagonal ``M_kk`` bounds nothing (``M_kk / lambda_min(M)`` is about 150 on the Panda).

Joints whose damping dominates
------------------------------
A joint whose own viscous damping ``b_k`` exceeds the law's damping gets little stiffness
from gains sized on its inertia. :func:`damped_joint_stiffness` sizes a torque-unit
stiffness ``K_k = b_k w`` for it (a first-order loop at ``w`` that leans on ``b_k``);
:func:`joint_delay_margins` gives each joint's margin with the plant's damping in the loop
(``delay_margin(..., damping=B)``: the plant feels ``-B v``).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from scipy.linalg import eigvals
from scipy.linalg import expm

__all__ = ['delay_margin', 'range_poses', 'hold_gain_matrices', 'hold_delay_margin',
           'pd_gravity_gains', 'gravity_stiffness', 'MAX_MARGIN_TICKS', 'apparent_inertia',
           'damped_joint_stiffness', 'damped_joint_stiffness_limit', 'joint_delay_margins',
           'DAMPED_JOINT_OMEGA', 'DAMPED_JOINT_SPEED_SHARE',
           'DAMPED_JOINT_STEP']

#: Largest delay [ticks] :func:`delay_margin` looks at.
MAX_MARGIN_TICKS = 400


def _discrete(mass: np.ndarray, stiffness: np.ndarray, period: float,
              damping: np.ndarray | None = None):
    """Exact zero-order-hold discretization ``(A, B)`` of ``e' = v, v' = M^-1 (u - G e - B v)``."""
    n = mass.shape[0]
    minv = np.linalg.inv(mass)
    c = np.zeros((3 * n, 3 * n))
    c[:n, n:2 * n] = np.eye(n)
    c[n:2 * n, :n] = -minv @ stiffness
    if damping is not None:
        c[n:2 * n, n:2 * n] = -minv @ damping
    c[n:2 * n, 2 * n:] = minv
    phi = expm(c * period)
    return phi[:2 * n, :2 * n], phi[:2 * n, 2 * n:]


def spectral_radius(mass, kp, kd, period: float, ticks: int, stiffness=None,
                    damping=None) -> float:
    """
    Spectral radius of the delayed loop of the module docstring, built in full.

    The state is ``(e, v)`` and the ``ticks`` commands in flight (size ``2n + n d``): the
    direct check of one delay (:func:`delay_margin` finds the margin in the frequency
    domain). Arguments as :func:`delay_margin`.
    """
    m = np.asarray(mass, dtype=float)
    n = m.shape[0]
    kp, kd = _matrix('kp', kp, n), _matrix('kd', kd, n)
    g = np.zeros((n, n)) if stiffness is None else _matrix('stiffness', stiffness, n)
    c = None if damping is None else _matrix('damping', damping, n)
    a, b = _discrete(m, g, period, c)
    k = np.hstack((kp - g, kd))                 # the gravity feed-forward of the sampled pose
    if ticks == 0:
        return float(np.max(np.abs(eigvals(a - b @ k, check_finite=False))))
    size = 2 * n + n * ticks
    z = np.zeros((size, size))
    z[:2 * n, :2 * n] = a
    z[:2 * n, 2 * n:3 * n] = b                  # the oldest command in flight acts now
    for i in range(ticks - 1):                  # the queue moves up by one
        r = 2 * n + i * n
        z[r:r + n, r + n:r + 2 * n] = np.eye(n)
    z[size - n:, :2 * n] = -k                   # the command from this sample, d ticks on
    return float(np.max(np.abs(eigvals(z, check_finite=False))))


def _matrix(name: str, value, n: int) -> np.ndarray:
    g = np.asarray(value, dtype=float)
    g = np.diag(g) if g.ndim == 1 else g
    if g.shape != (n, n):
        raise ValueError(f'{name}: must be {n} values or an {n}x{n} matrix '
                         f'(got shape {g.shape})')
    return g


def delay_margin(mass, kp, kd, period: float, max_ticks: int = MAX_MARGIN_TICKS,
                 stiffness=None, damping=None) -> int:
    """
    Largest loop delay [ticks] that keeps the linearized joint servo stable.

    Parameters
    ----------
    mass : (n, n) array_like
        Mass matrix of the arm at the pose [kg·m^2].
    kp, kd : (n, n) or (n,) array_like
        Stiffness [N·m/rad] and damping [N·m·s/rad] (a vector is a diagonal matrix).
    period : float
        Control period T [s], > 0.
    max_ticks : int
        Largest delay looked at.
    stiffness : (n, n) array_like, optional
        Gravity stiffness ``G = dg/dq`` at the pose [N·m/rad] (:func:`gravity_stiffness`;
        default zero). The plant feels ``-G e`` now, the gravity compensation computed at
        the sampled pose adds ``+G e`` ``d`` ticks late.
    damping : (n, n) or (n,) array_like, optional
        The plant's own viscous joint damping ``B`` [N·m·s/rad] (default zero): it feels
        ``-B v``, and no command compensates it.

    Returns
    -------
    int
        The largest ``d`` in ``[0, max_ticks]`` for which the loop of the module docstring
        (command from the state ``d`` ticks old, zero-order hold) has spectral radius < 1;
        -1 when it is unstable without delay.

    Notes
    -----
    With ``u`` computed at tick ``k`` and applied at ``k + d``, the closed loop's poles are
    the roots of ``det(I + z^-d L(z)) = 0`` with ``L(z) = K (zI - A)^-1 B``,
    ``K = [Kp - G, Kd]``. Stable at ``d = 0``, a pole reaches the unit circle first at the
    smallest ``d*`` for which an eigenvalue of ``L(exp(j theta))`` equals
    ``-exp(j theta d*)``: ``|lambda| = 1`` and ``theta d* = arg(lambda) - pi (mod 2 pi)``.
    The crossings are found on a log frequency grid and refined by bisection; the margin
    is ``ceil(d*) - 1``. :func:`spectral_radius` builds the delayed loop in full (a check).

    Raises
    ------
    ValueError
        ``period`` not > 0, or shapes that do not match ``mass``.

    """
    m = np.asarray(mass, dtype=float)
    n = m.shape[0]
    if m.ndim != 2 or m.shape != (n, n):
        raise ValueError(f'mass: must be a square matrix (got shape {m.shape})')
    if not period > 0.0:
        raise ValueError(f'period: must be > 0 s (got {period})')
    kp, kd = _matrix('kp', kp, n), _matrix('kd', kd, n)
    g = np.zeros((n, n)) if stiffness is None else _matrix('stiffness', stiffness, n)
    c = None if damping is None else _matrix('damping', damping, n)
    if spectral_radius(m, kp, kd, period, 0, g, c) >= 1.0:
        return -1
    a, b = _discrete(m, g, period, c)
    k = np.hstack((kp - g, kd))
    # the loop gain L(z) = K (zI - A)^-1 B on the unit circle, z = exp(j theta)
    theta = np.geomspace(1e-5, math.pi, _GRID)
    eye = np.eye(2 * n)
    zi = np.exp(1j * theta)[:, None, None] * eye - a
    lam = np.linalg.eigvals(k @ np.linalg.solve(zi, np.broadcast_to(b, zi.shape[:1] + b.shape)))
    mag = np.sort(np.abs(lam), axis=1) - 1.0
    best = math.inf
    for i, r in zip(*np.nonzero(np.sign(mag[:-1]) != np.sign(mag[1:]))):
        th = _crossing(a, b, k, theta[i], theta[i + 1], r)
        zc = np.linalg.solve(np.exp(1j * th) * eye - a, b)
        ev = np.linalg.eigvals(k @ zc)
        lc = ev[np.argmin(np.abs(np.abs(ev) - 1.0))]
        # a closed-loop pole on the unit circle: lambda = -exp(j theta d)
        best = min(best, ((np.angle(lc) - math.pi) % (2.0 * math.pi)) / th)
    return int(min(math.ceil(best) - 1, max_ticks)) if math.isfinite(best) else max_ticks


#: Frequency grid of :func:`delay_margin` (log-spaced over (0, pi] rad per tick).
_GRID = 6000


def _crossing(a, b, k, lo: float, hi: float, rank: int) -> float:
    """Refine the frequency where the ``rank``-th smallest ``|lambda(L)|`` crosses 1."""
    eye = np.eye(a.shape[0])

    def f(th):
        ev = np.linalg.eigvals(k @ np.linalg.solve(np.exp(1j * th) * eye - a, b))
        return np.sort(np.abs(ev))[rank] - 1.0

    flo = f(lo)
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        fm = f(mid)
        if (fm > 0.0) == (flo > 0.0):
            lo, flo = mid, fm
        else:
            hi = mid
    return 0.5 * (lo + hi)


def gravity_stiffness(arm, q, step: float = 1e-6) -> np.ndarray:
    """
    Return ``G = dg/dq`` of the arm's gravity torque at ``q`` [N·m/rad], shape (n, n).

    Central differences of :meth:`ArmModel.gravity` (``step`` [rad]), symmetrized (``G`` is
    the Hessian of the potential energy).
    """
    q = np.asarray(q, dtype=float)
    cols = []
    for k in range(q.size):
        dq = np.zeros(q.size)
        dq[k] = step
        cols.append((np.asarray(arm.gravity(q + dq)) - np.asarray(arm.gravity(q - dq)))
                    / (2.0 * step))
    g = np.array(cols).T
    return 0.5 * (g + g.T)


def range_poses(arm, count: int = 8, seed: int = 0) -> np.ndarray:
    """
    Poses across the joint ranges: the middle, then ``count - 1`` uniform random ones.

    A joint without position limits ranges over ``[-pi, pi]``. Returns ``(count, n)`` [rad].
    """
    lim = arm.limits
    lo = np.where(np.isfinite(lim.lower), lim.lower, -math.pi)
    hi = np.where(np.isfinite(lim.upper), lim.upper, math.pi)
    rng = np.random.default_rng(seed)
    rest = lo + (hi - lo) * rng.random((max(count - 1, 0), arm.n))
    return np.vstack((0.5 * (lo + hi), rest))


def hold_gain_matrices(nominal_mass, kp: Sequence[float], kd: Sequence[float]):
    """Return the hold's ``(M^ diag(kp), M^ diag(kd))`` [N·m/rad, N·m·s/rad]."""
    m = np.asarray(nominal_mass, dtype=float)
    return m * np.asarray(kp, dtype=float), m * np.asarray(kd, dtype=float)


def hold_delay_margin(arm, kp: Sequence[float], kd: Sequence[float], period: float,
                      poses=None, plant=None, gravity: bool = True,
                      max_ticks: int = MAX_MARGIN_TICKS) -> int:
    """
    Loop-delay margin [ticks] of the safe hold of :func:`manip_control.safety.hold_torque`.

    Parameters
    ----------
    arm : ArmModel
        The controller's nominal model (``M^``).
    kp, kd : sequence of n float
        ``safety.hold_kp`` [1/s^2], ``safety.hold_kd`` [1/s].
    period : float
        Control period [s].
    poses : (p, n) array_like, optional
        Where to look (default :func:`range_poses`).
    plant : ArmModel, optional
        The arm held (default: the nominal one).
    gravity : bool
        Include the gravity stiffness (:func:`gravity_stiffness`; false: a horizontal arm).
    max_ticks : int
        Largest delay looked at.

    Returns
    -------
    int
        The smallest :func:`delay_margin` over the poses.

    """
    poses = range_poses(arm) if poses is None else np.atleast_2d(poses)
    plant = arm if plant is None else plant
    margins = []
    for q in poses:
        gp, gd = hold_gain_matrices(arm.mass_matrix(q), kp, kd)
        margins.append(delay_margin(plant.mass_matrix(q), gp, gd, period, max_ticks,
                                    gravity_stiffness(plant, q) if gravity else None))
    return min(margins)


def apparent_inertia(arm, poses=None) -> np.ndarray:
    """
    Return the inertia each joint shows with the others free, at its lightest [kg·m^2].

    ``m_k = min 1 / (M^-1)_kk`` over the poses (default :func:`range_poses`), shape (n,).
    """
    poses = range_poses(arm) if poses is None else np.atleast_2d(poses)
    return np.min([1.0 / np.diag(np.linalg.inv(arm.mass_matrix(q))) for q in poses], axis=0)


def pd_gravity_gains(arm, omega_n: float = 20.0, zeta: float = 1.0,
                     poses=None) -> tuple[np.ndarray, np.ndarray]:
    """
    Per-joint PD + gravity gains of an arm: ``(Kp [N·m/rad], Kd [N·m·s/rad])``.

    ``Kp_k = m_k omega_n^2``, ``Kd_k = 2 zeta omega_n m_k`` with ``m_k`` of
    :func:`apparent_inertia` over the poses: the inertia joint ``k`` shows with the other
    joints free, at its lightest (see the module docstring). ``omega_n`` [rad/s] and
    ``zeta`` > 0.
    """
    if not (omega_n > 0.0 and math.isfinite(omega_n)):
        raise ValueError(f'omega_n: must be > 0 rad/s (got {omega_n})')
    if not (zeta > 0.0 and math.isfinite(zeta)):
        raise ValueError(f'zeta: must be > 0 (got {zeta})')
    apparent = apparent_inertia(arm, poses)
    return apparent * omega_n * omega_n, apparent * 2.0 * zeta * omega_n


#: Bandwidth [rad/s] of the position loop that :func:`damped_joint_stiffness` gives a joint
#: whose own viscous damping dominates its inertia (``K_k / b_k``), at most.
DAMPED_JOINT_OMEGA = 150.0
#: ... and at most this per control period (``K T / b``): 150 rad/s at 1 kHz, 15 rad/s at
#: 100 Hz, so that the sampled loop keeps its margin in ticks at any rate.
DAMPED_JOINT_STEP = 0.15


def _servo_gains(inertia: np.ndarray, kp, kd, law: str) -> tuple[np.ndarray, np.ndarray]:
    """Return the law's own feedback gains in torque units (``m_k kp_k, m_k kd_k`` or as is)."""
    kp, kd = np.asarray(kp, dtype=float), np.asarray(kd, dtype=float)
    if law == 'computed_torque':
        return inertia * kp, inertia * kd
    if law == 'pd_gravity':
        return kp, kd
    raise ValueError(f"law: must be 'computed_torque' or 'pd_gravity' (got {law!r})")


def damped_joint_stiffness(arm, damping: Sequence[float], kd: Sequence[float],
                           law: str = 'computed_torque', omega: float = DAMPED_JOINT_OMEGA,
                           poses=None, armature: Sequence[float] | float = 0.0,
                           period: float = 1e-3) -> np.ndarray:
    """
    Return an arm's ``joint_stiffness`` [N·m/rad]: ``b_k w`` where damping dominates, else 0.

    A joint whose viscous damping ``b_k`` exceeds the law's own damping (``m_k kd_k`` for
    computed torque, ``kd_k`` for PD + gravity; ``m_k`` of :func:`apparent_inertia`) has
    almost no position stiffness from the law: its error ``m e'' + (m kd + b) e' + m kp e``
    has a slow pole at ``m kp / b``, and its dry friction leaves an error
    ``tau_c / (m kp)``. A torque-unit stiffness ``K = b w`` gives it a first-order position
    loop at ``w = min(omega, DAMPED_JOINT_STEP / period)`` [rad/s] that leans on ``b`` for
    its damping
    (:func:`joint_delay_margins` has the loop-delay margin). The law's own damping cannot be
    raised instead: over one period such a joint is a velocity source (``m / b << T``), and a
    velocity gain near ``b`` makes the sampled loop oscillate.

    Parameters
    ----------
    arm : ArmModel
        The controller's nominal model.
    damping : sequence of n float
        Nominal viscous damping per joint [N·m·s/rad].
    kd : sequence of n float
        The law's derivative gains (computed torque [1/s], PD + gravity [N·m·s/rad]).
    law : {'computed_torque', 'pd_gravity'}
        The law the gains are for.
    omega : float
        The damped joints' position bandwidth [rad/s], > 0.
    poses : (p, n) array_like, optional
        Where to look for the lightest inertia (default :func:`range_poses`).
    armature : sequence of n float
        Rotor inertia the controller's model adds to ``arm``'s diagonal [kg·m^2]: added to
        ``m_k`` (a lower bound of the apparent inertia with the rotors).
    period : float
        Control period [s], > 0.

    """
    if not (omega > 0.0 and math.isfinite(omega)):
        raise ValueError(f'omega: must be > 0 rad/s (got {omega})')
    if not (period > 0.0 and math.isfinite(period)):
        raise ValueError(f'period: must be > 0 s (got {period})')
    w = min(omega, DAMPED_JOINT_STEP / period)
    b = np.asarray(damping, dtype=float)
    inertia = apparent_inertia(arm, poses) + np.asarray(armature, dtype=float)
    _, own = _servo_gains(inertia, np.zeros(arm.n), kd, law)
    return np.where(b > own, b * w, 0.0)


#: Speed at which the joint stiffness may drive a damped joint, as a share of its velocity
#: limit (:func:`damped_joint_stiffness_limit`): an error step then moves the joint at a
#: quarter of its limit on top of the reference's own speed.
DAMPED_JOINT_SPEED_SHARE = 0.25


def damped_joint_stiffness_limit(stiffness: Sequence[float], damping: Sequence[float],
                                 velocity_limit: Sequence[float], torque_limit: Sequence[float],
                                 share: float = DAMPED_JOINT_SPEED_SHARE) -> np.ndarray:
    """
    Return an arm's ``joint_stiffness_limit`` [N·m]: ``b_k share v_k`` where ``K_k > 0``.

    On a joint whose damping dominates, the stiffness ``K = b w`` sets the speed: a torque
    ``K e`` moves it at ``K e / b = w e``, so an error of ``v / w`` (0.021 rad for 3.14 rad/s
    at 150 rad/s) reaches the velocity limit ``v``. Clamping ``|K e|`` at ``b share v`` caps
    that speed at ``share v`` whatever the error (a reference step the safety layer lets
    through, a resume, a stalled loop); errors below ``share v / w`` (5 mrad at 1 kHz) are
    not touched. On a joint without stiffness the clamp does nothing: the torque limit there.

    Parameters
    ----------
    stiffness : sequence of n float
        ``joint_stiffness`` [N·m/rad] (:func:`damped_joint_stiffness`).
    damping : sequence of n float
        Nominal viscous damping per joint [N·m·s/rad].
    velocity_limit : sequence of n float
        Velocity limits [rad/s], > 0.
    torque_limit : sequence of n float
        Command limits [N·m], > 0.
    share : float
        Share of the velocity limit, in (0, 1].

    """
    if not 0.0 < share <= 1.0:
        raise ValueError(f'share: must be in (0, 1] (got {share})')
    k = np.asarray(stiffness, dtype=float)
    clamp = np.asarray(damping, dtype=float) * share * np.asarray(velocity_limit, dtype=float)
    limit = np.asarray(torque_limit, dtype=float)
    return np.where((k > 0.0) & (clamp > 0.0), np.minimum(clamp, limit), limit)


def joint_delay_margins(arm, damping: Sequence[float], kp: Sequence[float],
                        kd: Sequence[float], joint_stiffness: Sequence[float], period: float,
                        law: str = 'computed_torque', poses=None) -> np.ndarray:
    """
    Loop-delay margin [ticks] of each joint's servo alone, with its own damping.

    Joint ``k`` as ``m_k e'' + b_k e' = u`` (``m_k`` of :func:`apparent_inertia`, ``b_k``
    the plant's damping: pass a fraction of the nominal one to see how much the margin
    leans on it) under the law's feedback in torque units plus ``joint_stiffness``:
    :func:`delay_margin` of that scalar loop, per joint, shape (n,).
    """
    inertia = apparent_inertia(arm, poses)
    gp, gd = _servo_gains(inertia, kp, kd, law)
    gp = gp + np.asarray(joint_stiffness, dtype=float)
    b = np.asarray(damping, dtype=float)
    return np.array([delay_margin([[inertia[k]]], [gp[k]], [gd[k]], period,
                                  damping=[b[k]]) for k in range(arm.n)])
