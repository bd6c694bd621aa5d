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
Adaptive computed torque (Slotine & Li) over the nominal model's base parameters, any arm.

The law (``e = q - q_d``, per joint ``Lambda = kp / kd`` [1/s])::

    qd_r  = qd_d - Lambda e              qdd_r = qdd_d - Lambda (qd - qd_d)
    s     = qd - qd_r                    [rad/s]
    tau   = tau0(q, qd, qd_r, qdd_r) + Y_SL(q, qd, qd_r, qdd_r) (theta^ - theta0) - K_D s
    theta^_dot = -Gamma (Y_SL^T s + sigma Gamma_s^-1 (theta^ - theta0))   (then bounded)

``tau0 = M0 qdd_r + C0(q, qd) qd_r + g0`` is the nominal model's own torque (every term it
has, rotor coupling included), ``theta0`` its base parameters, so ``tau = M^ qdd_r + C^ qd_r +
g^ - K_D s`` with the estimate ``theta^``. ``K_D = k M0(q_c) + diag((kd_j - k) M0_jj(q_gain))``
[N·m·s/rad], ``k = min_j kd_j``, ``q_c`` the configuration of the last check tick: then ``K_D s
= kd M0 (e_dot + Lambda e)`` is the computed-torque PD (``kd``, ``kp``) through the nominal
inertia, the full matrix (a coupled arm's light directions get no more gain than its heavy
ones). The base parameters and their regressor are the identification's: the
2R's closed form (:func:`manip_control.identification_data.regressor`, :data:`BASE_NAMES`)
through :func:`two_link_base_regressor`, a URDF arm's QR base
(:class:`manip_control.arm_identification.BaseParameters`) through
:func:`manip_control.arm_identification.adaptive_regressor`.

The two-velocity regressor. ``Y_SL(q, v, w, a) theta = M(q) a + C(q, v) w + g(q)`` with the
Christoffel ``C`` is not the identification regressor ``Y(q, qd, qdd)``; because ``C(q, v) w``
with Christoffel symbols is a symmetric bilinear form in ``(v, w)``, polarization gives it
from three evaluations of the identification regressor (gravity cancels in the difference)::

    Y_SL = Y(q, 0, a) + [Y(q, v + w, 0) - Y(q, v - w, 0)] / 4

and ``tau0`` likewise from the nominal inverse dynamics. Friction columns (viscous, Coulomb)
are not bilinear: they are zero in ``Y_SL``; with ``friction: true`` they take the
identification's columns at the reference velocity ``qd_d`` (the feed-forward form of
:mod:`manip_control.control`, which never destabilises an arm with less friction).

Discrete implementation (period ``T``; docs/adaptation.md has the proof and its limits). In
scaled coordinates ``theta = theta0 + scale phi``, ``scale_k = max(|theta0_k|, floor)``
(floors by unit, as the identification's completion: 1e-2 kg, 1e-3 kg m, 1e-4 kg m^2, 1e-2
N m s/rad, 1e-2 N m), ``Gamma = gamma diag(scale^2)``:

1. ``dphi = -T gamma (Ys^T s + sigma phi)``, ``Ys = Y_SL diag(scale)`` [N·m]; no gradient
   step while ``max|s| < dead_zone``; only the adapted columns move (the friction columns
   only with ``friction``, the gravity columns of a horizontal 2R never).
2. Rate bound ``|dphi_k| <= max_rate T``; projection ``|phi_k| <= bound_fraction`` (a box:
   with a diagonal ``Gamma`` the projection in the ``Gamma^-1`` metric is the clip, which
   never increases the Lyapunov function).
3. Consistency check of the candidate at the current ``q`` (with a check every
   ``check_every`` ticks on the fast path: at the ``q`` of the window's first tick): finite,
   inside the box, physical where the regressor says what that is (the 2R's:
   :func:`_two_link_physical`; a candidate outside is projected first,
   :meth:`AdaptiveLaw._project_physical`), and ``M^(q) = M0(q) + dM(q)`` (``dM``'s columns
   ``[Y(q, 0, e_j) - Y(q, 0, 0)] (theta^ - theta0)``) with ``M^ - 0.1 M0`` positive definite
   (Cholesky; a candidate failing it is projected first, :meth:`AdaptiveLaw.
   _project_inertia`). A failed
   check keeps the last valid estimate (or the nominal model, when that one fails at this
   ``q`` too, or after :data:`MAX_REJECTED` rejections in a row) and says why in
   :attr:`AdaptiveLaw.fallback_reason`.
4. Excitation: ``R <- exp(-T / forgetting_time) R + T Ys^T Ys`` (adapted columns), its
   eigen-decomposition every 0.1 s: a direction is excited when its eigenvalue exceeds
   ``excitation_threshold`` times the largest; a parameter is excited when at least 90 % of
   its unit vector lies in the excited subspace (:attr:`AdaptiveLaw.excited`). The gradient
   ``Ys^T s`` of one tick lies in the row space of that tick's ``Ys``, which the same tick
   adds to ``R``: the gradient moves the estimate only in directions excited at that tick
   (up to the per-component rate and box clips); only the sigma term (toward the nominal)
   moves the others, back to the nominal values.

API (ROS-free; the nodes hold one per controller)::

    reg = two_link_base_regressor(nominal)             # or arm_identification.adaptive_regressor
    law = AdaptiveLaw(model, reg, kp, kd, period, params)   # params: AdaptationParameters
    tau = law.update(q, qd, q_d, qd_d, qdd_d)          # torque + adaptation step, a buffer
    law.torque(...); law.adapt(hold=saturated)         # the two halves, for a limiter between
    law.freeze(True); law.reset()                      # hold / back to the nominal model
    law.estimates, law.nominal, law.names, law.excited, law.eigenvalues
    law.fallback_reason, law.fallbacks                 # None or why the last step was refused
    law.save(path)                                     # same files as manip-identify writes

Cost: everything is built once (buffers, scales, bounds) and compiled when the law is built
(numba: the adaptation step, :func:`_adaptation_step`, for every arm). The 2R's regressor
offers its torque and its consistency check as compiled kernels (``BaseRegressor.
torque_kernel``: :func:`_two_link_torque`, :func:`_two_link_check`, on the closed-form rows
:func:`_two_link_rows`): ``tau0 = Y_SL theta0 + D qdd_r``, with ``D`` the nominal model's
terms no base parameter carries (its rotor coupling), derived from the model's inverse
dynamics and checked against it when the law is built. A URDF arm's regressor offers its
rows into buffers (:class:`manip_control.arm_identification.PinocchioRows`: two Pinocchio
regressor calls per tick, ``n + 1`` per check, spread over the ticks between checks), and
the law computes ``tau0 = Y_SL theta0 + D qdd_r`` from them (``D`` checked as the 2R's),
the torque and the check compiled (bench/bench_adaptation.py, docs/benchmarks.md). A
regressor with neither takes the generic path: its rows and the model's inverse dynamics
in numpy.

:class:`AdaptiveController` wraps the law with the controller's friction feed-forward, gear
inversion and torque limit behind :meth:`control.Controller.update`'s interface (the offline
2R loop uses it when ``controller.adaptation.enabled``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
import math
from pathlib import Path
from typing import Callable, Sequence

from manip_control.arm_model import ArmModel
from manip_control.control import compiled_finish
from manip_control.control import ControlBuffer
from manip_control.control import ControlOutput
from manip_control.control import finish_constants
from manip_control.control import gear_inversion_constants
from manip_control.control import LIMIT_ROW
from manip_control.control import nominal_arm
from manip_control.identification_data import BASE_NAMES
from manip_control.identification_data import base_parameters
from manip_control.identification_data import BASE_UNITS
from manip_control.identification_data import nominal_from_estimate
from manip_control.identification_data import nominal_to_dict
from manip_control.identification_data import physical_from_base
from manip_control.identification_data import regressor as two_link_regressor
from manip_control.parameters import _nonnegative
from manip_control.parameters import _positive
from manip_control.parameters import _vector
from manip_control.parameters import AdaptationParameters
from manip_control.parameters import ControllerParameters
from manip_control.parameters import NominalModel
from manip_control.parameters import ParameterError
import numpy as np
import yaml

#: Floor of a parameter's scale per unit (as the identification's completion).
SCALE_FLOOR = {'kg': 1e-2, 'kg m': 1e-3, 'kg m^2': 1e-4, 'N m s/rad': 1e-2, 'N m': 1e-2}
#: ``lambda_min(M^(q))`` must be at least this fraction of ``lambda_min(M0(q))``.
MIN_EIGENVALUE_RATIO = 0.1
#: Ticks between the adaptive law's consistency checks (each costs n + 1 regressor
#: evaluations; bench/bench_adaptation.py): the controller node on every arm and the offline
#: loop of a URDF arm use it.
ADAPTIVE_CHECK_EVERY = 10
#: Half-space projections of an estimate whose ``M^`` is not positive definite enough, and the
#: margin they aim at (a fraction of ``x^T (1 - r) M0 x`` along the worst direction ``x``).
PROJECTION_STEPS = 4
PROJECTION_MARGIN = 0.05
#: Each physical-consistency constraint (:attr:`BaseRegressor.physical`) must exceed this
#: fraction of the nominal model's value: the split into a physical model
#: (:func:`two_link_nominal`) needs strict inequalities.
PHYSICAL_MARGIN = 0.01
#: Half-space projections onto the physical-consistency constraints per refused step.
PHYSICAL_PROJECTION_STEPS = 12
#: Rejected steps in a row after which the law returns to the nominal model.
MAX_REJECTED = 1000
#: Interval of the excitation analysis (eigen-decomposition of the information matrix) [s].
EXCITATION_INTERVAL = 0.1
#: A parameter is excited when this fraction of its unit vector lies in the excited subspace.
EXCITED_FRACTION = 0.9


@dataclass
class BaseRegressor:
    """
    The base parameters of a nominal model and their identification regressor.

    Attributes
    ----------
    names, units : tuple of str
        Per base parameter.
    theta0 : ndarray, shape (p,)
        The nominal model's base parameters.
    evaluate : callable
        ``evaluate(q, qd, qdd)`` for samples of shape (N, n) -> ``Y`` of shape (N, n, p).
    friction : ndarray of bool, shape (p,)
        The friction columns (viscous, Coulomb).
    fixed : ndarray of bool, shape (p,)
        Columns never adapted (e.g. gravity of a horizontal 2R).
    save : callable, optional
        ``save(theta, path, law) -> list of Path``: writes the estimate as manip-identify does.
    payload_change : callable, optional
        ``payload_change(mass, radius) -> (lower, upper)``: the range of the change of each
        base parameter that a point mass of at most ``mass`` [kg] within ``radius`` [m] of the
        last link's frame origin makes (None: the law cannot size its box for a payload).
    two_velocity : callable, optional
        ``two_velocity(q, qd, qd_r, qdd_r, qd_f, out)``: ``Y_SL`` (module docstring) with its
        friction columns at ``qd_f`` (None: zero) into ``out`` of shape (n, p), nothing
        allocated by this package (None: three :attr:`evaluate` rows).
    mass_rows : callable, optional
        ``mass_rows(q, out, row=None)``: ``Y_SL(q, 0, 0, e_j)`` for each joint ``j`` and
        ``Y_SL(q, 0, 0, 0)`` into ``out`` of shape (n + 1, n, p), the rows of the consistency
        check (with ``row``, only ``out[row]``: a law checking every few ticks spreads them). With
        :attr:`two_velocity` it makes the law's fast path: ``tau0 = Y_SL theta0 + D qdd_r``
        (no inverse dynamics per tick) and the check compiled (:func:`_mass_check`).
    torque_kernel : tuple, optional
        ``(torque, check, constants)``: the law's whole torque in one compiled call,
        ``torque(x, lam, kdm, scale, theta, rest, constants, friction, phi, ys, s, qd_r,
        qdd_r, tau)`` (:func:`_two_link_torque`), and its consistency check
        (:func:`_two_link_check`): the 2R's fastest path (None: the fast path above, or the
        rows of :attr:`evaluate` and the model's inverse dynamics and mass matrix per tick).
    physical : tuple, optional
        ``(constraints, constants, names, margins, project)``: the base parameters'
        physical consistency, a convex set containing every physical arm of these lengths,
        as concave constraints
        ``constraints(theta, scale, cand, constants, values, grad) -> min(values)``
        (compiled, :func:`_two_link_physical`) of the estimate ``theta + scale cand``:
        ``values`` >= 0 when consistent (each constraint less its margin, ``margins``),
        ``grad`` their gradients in ``cand``; ``names`` say each one in the law's messages;
        ``project(theta, scale, cand, constants, margins, movable, lower, upper, values,
        grad, steps) -> inside`` (compiled, :func:`_two_link_project`) the projection of
        :meth:`AdaptiveLaw._project_physical` (None: no check beyond ``M^(q) > 0`` at the
        check's ``q``; a URDF arm's).

    """

    names: tuple
    units: tuple
    theta0: np.ndarray
    evaluate: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]
    friction: np.ndarray
    fixed: np.ndarray
    save: Callable[..., list] | None = None
    payload_change: Callable[[float, float], tuple] | None = None
    two_velocity: Callable[..., None] | None = None
    mass_rows: Callable[..., None] | None = None
    torque_kernel: tuple | None = None
    physical: tuple | None = None

    @property
    def size(self) -> int:
        """Return the number of base parameters ``p``."""
        return len(self.names)


def parameter_scale(theta0: np.ndarray, units: Sequence[str]) -> np.ndarray:
    """Return ``scale_k = max(|theta0_k|, floor(unit_k))`` (:data:`SCALE_FLOOR`)."""
    return np.maximum(np.abs(np.asarray(theta0, float)), [SCALE_FLOOR.get(u, 1e-2)
                                                          for u in units])


def two_link_base_regressor(nominal: NominalModel,
                            controller: ControllerParameters | None = None) -> BaseRegressor:
    """
    Return the 2R's base parameters (:data:`BASE_NAMES`) of ``nominal`` and their regressor.

    ``a`` includes joint 1's reflected rotor inertia, ``Jr2`` is joint 2's; the nominal rotor
    coupling is not a base parameter (it stays in ``tau0``). In the horizontal plane the
    gravity columns are fixed. ``save`` writes ``{'controller': ...}`` with the estimate as
    ``controller.nominal`` (the file manip-identify writes; ``controller`` supplies the rest
    of the section, else only ``nominal`` is written).
    """
    eps = tuple(float(f.eps) for f in nominal.friction)
    theta0 = base_parameters(nominal.arm, nominal.rotor_inertia, nominal.friction)
    friction = np.zeros(len(BASE_NAMES), dtype=bool)
    friction[6:] = True
    fixed = np.zeros(len(BASE_NAMES), dtype=bool)
    if nominal.arm.gravity <= 0.0:
        fixed[4:6] = True

    def evaluate(q, qd, qdd):
        return two_link_regressor(q, qd, qdd, eps)

    kernels = _compiled()
    constants = np.array(eps, dtype=float)

    def two_velocity(q, qd, qd_r, qdd_r, qd_f, out):
        vec = [np.asarray(v, dtype=float) for v in (q, qd, qd_r, qdd_r)]
        f = vec[1] if qd_f is None else np.asarray(qd_f, dtype=float)
        kernels.rows(*vec, f, constants, qd_f is not None, out)

    def save(theta, path, law=None):
        nm = two_link_nominal(theta, nominal, _coupling_weights(law, nominal.arm))
        if controller is None:
            data = {'controller': {'nominal': nominal_to_dict(nm)}}
        else:
            section = _plain(dataclasses.asdict(dataclasses.replace(controller, nominal=nm)))
            section['nominal'] = nominal_to_dict(nm)
            data = {'controller': section}
        path = Path(path)
        path.write_text(f'# {_comment(law)}\n' + yaml.safe_dump(data, sort_keys=False),
                        encoding='utf-8')
        return [path]

    # the physical constraints' margins: a fraction of the nominal model's values
    arm = nominal.arm
    consts = np.zeros(4 + len(TWO_LINK_PHYSICAL))
    consts[:4] = arm.l1, arm.l2, arm.gravity, nominal.rotor_inertia[0]
    values = np.zeros(len(TWO_LINK_PHYSICAL))
    kernels.two_link_physical(theta0, np.ones_like(theta0), np.zeros_like(theta0), consts,
                              values, np.zeros((values.size, theta0.size)))
    consts[4:] = PHYSICAL_MARGIN * np.where(np.isfinite(values), np.maximum(values, 0.0), 0.0)
    consts[-1] = 0.0            # Jr2 >= 0 exactly: the split needs no strict inequality there
    return BaseRegressor(BASE_NAMES, BASE_UNITS, theta0, evaluate, friction, fixed, save,
                         payload_change=lambda mass, radius: two_link_payload_change(
                             nominal.arm, mass, radius),
                         two_velocity=two_velocity,
                         torque_kernel=(kernels.two_link_torque, kernels.two_link_check,
                                        constants),
                         physical=(kernels.two_link_physical, consts, TWO_LINK_PHYSICAL,
                                   consts[4:], kernels.two_link_project))


def two_link_payload_change(arm, mass: float, radius: float) -> tuple[np.ndarray, np.ndarray]:
    """
    Range of the change of the 2R's base parameters by a payload near the tip of link 2.

    A point mass ``m`` in ``[0, mass]`` [kg] on link 2's axis at ``x`` from joint 2, ``|x -
    l2| <= radius`` [m] (where the plant attaches its payload; the closed-form model has its
    centres of mass on the links' axes) adds ``m (l1^2 + x^2)`` to ``a``, ``m l1 x`` to ``b``,
    ``m x^2`` to ``d``, ``m l1 g0`` to ``G1`` and ``m x g0`` to ``G2``; rotor and friction
    parameters are unchanged. Returns ``(lower, upper)`` in :data:`BASE_NAMES` order.
    """
    l1, g0 = arm.l1, arm.gravity
    lo, hi = arm.l2 - radius, arm.l2 + radius
    # each change is m f(x): its extremes at m in {0, mass} and x at an end (or 0 for x^2)
    x2_lo = 0.0 if lo <= 0.0 <= hi else min(lo * lo, hi * hi)
    ranges = {0: (l1 * l1 + x2_lo, l1 * l1 + max(lo * lo, hi * hi)), 1: (l1 * lo, l1 * hi),
              2: (x2_lo, max(lo * lo, hi * hi)), 4: (l1 * g0, l1 * g0), 5: (lo * g0, hi * g0)}
    lower, upper = np.zeros(len(BASE_NAMES)), np.zeros(len(BASE_NAMES))
    for k, (f_lo, f_hi) in ranges.items():
        lower[k] = min(0.0, mass * f_lo)
        upper[k] = max(0.0, mass * f_hi)
    return lower, upper


def two_link_nominal(theta: Sequence[float], prior: NominalModel,
                     weights: tuple[float, float] = (1.0, 0.0)) -> NominalModel:
    """
    Physical nominal 2R model of a base-parameter estimate, keeping the prior's drives.

    ``m2 lc2`` is the mean of ``b / l1`` and ``G2 / g0`` with ``weights`` (an estimate that
    is not a physical arm may have the two differ; default: ``b`` alone), ``G1 / g0`` gives
    ``m1 lc1 + m2 l1`` (:func:`~manip_control.identification_data.physical_from_base`),
    split as :func:`~manip_control.identification_data.nominal_from_estimate` does; joint 1's
    rotor inertia, the rotor coupling, gears and efficiencies stay the prior's.

    Raises
    ------
    manip_control.identification_data.IdentificationError
        The estimate admits no physical split.

    """
    theta = np.array(theta, dtype=float)
    arm = prior.arm
    w_b, w_g = weights
    if w_g > 0.0 and arm.gravity > 0.0:
        theta[1] = (w_b * theta[1] + w_g * theta[5] * arm.l1 / arm.gravity) / (w_b + w_g)
    jr1 = float(prior.rotor_inertia[0])
    theta[0] -= jr1            # nominal_from_estimate lumps a's rotor into I1: keep it apart
    phi = physical_from_base(theta, prior.arm.l1, prior.arm.gravity)
    if prior.arm.gravity <= 0.0:
        phi = np.delete(phi, 4)
    nm = nominal_from_estimate(phi, prior)
    return dataclasses.replace(prior, arm=nm.arm, friction=nm.friction,
                               rotor_inertia=(jr1, nm.rotor_inertia[1]))


def _coupling_weights(law: 'AdaptiveLaw | None', arm) -> tuple[float, float]:
    """
    Weights of ``b / l1`` and ``G2 / g0`` in the saved ``m2 lc2``: the law's information.

    ``1 / var`` of each: ``var(theta_k) = scale_k^2 (R^-1)_kk`` (``R``, the information
    matrix of the adapted parameters in scaled coordinates, with a ridge), times the square
    of the factor to ``m2 lc2``: gravity, excited by any pose off the horizontal, usually
    knows ``m2 lc2`` far better than ``b``. Equal weights before any information; ``b``
    alone without a law.
    """
    if law is None:
        return 1.0, 0.0
    info = law.information[np.ix_(law.active, law.active)]
    if not info.any():
        return 1.0, 1.0
    # marginal, not conditional: b's column is nearly collinear with a's and d's, and R_kk
    # alone counts what those explain as b's; a ridge far below the largest eigenvalue
    # gives an unexcited direction a large variance instead of none
    ridge = 1e-9 * float(np.trace(info))
    cov = np.linalg.inv(info + ridge * np.eye(info.shape[0]))
    pos = np.cumsum(law.active) - 1                 # column k's index among the active ones
    weights = []
    for k, factor in ((1, arm.l1), (5, arm.gravity)):
        var = cov[pos[k], pos[k]] if law.active[k] else math.inf
        weights.append(factor ** 2 / (law.scale[k] ** 2 * var))
    return weights[0], weights[1]


def _plain(x):
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, float):
        return float(f'{x:.10g}')
    return x


def _comment(law: 'AdaptiveLaw | None') -> str:
    if law is None:
        return 'estimate of the adaptive law (manip_control.adaptation)'
    exc = [name for name, e in zip(law.names, law.excited) if e]
    return ('estimate of the adaptive law (manip_control.adaptation) after '
            f'{law.ticks * law.period:.6g} s; excited: {", ".join(exc) or "none"}')


def _adaptation_step(ys, s, phi, fixed, adapted, info, decay, period, gamma, sigma, dead_zone,
                     step, lower, upper, cand):
    """
    Take steps 1-2 and the information matrix of step 4 (module docstring) into ``cand``.

    ``ys`` (n, p): this tick's ``Ys``, its ``fixed`` columns zeroed here; ``adapted`` the
    other columns' indices: ``info`` is updated on their rows and columns only (the fixed
    ones stay as they are: zero in a law); ``s`` (n,); ``phi`` (p,) the estimate; ``step`` the
    rate bound ``max_rate T``. A NaN stays NaN through the clips (as ``np.clip`` keeps it).
    Returns whether every ``cand`` is finite. Compiled with numba where it is installed
    (:func:`_compiled`): one call per tick, nothing allocated.
    """
    n, p = ys.shape
    for k in fixed:
        for r in range(n):
            ys[r, k] = 0.0
    na = adapted.shape[0]
    for ii in range(na):
        i = adapted[ii]
        for jj in range(ii, na):
            j = adapted[jj]
            acc = 0.0
            for r in range(n):
                acc += ys[r, i] * ys[r, j]
            v = decay * info[i, j] + period * acc
            info[i, j] = v
            info[j, i] = v
    quiet = dead_zone > 0.0
    for r in range(n):
        if not abs(s[r]) < dead_zone:
            quiet = False
    gain = -period * gamma
    for k in range(p):
        g = 0.0
        if not quiet:
            for r in range(n):
                g += s[r] * ys[r, k]
        cand[k] = (g + sigma * phi[k]) * gain
    for k in fixed:
        cand[k] = 0.0
    finite = True
    for k in range(p):
        c = cand[k]
        if c == c:
            c = min(max(c, -step), step) + phi[k]
            if c == c:
                c = min(max(c, lower[k]), upper[k])
        cand[k] = c
        if not math.isfinite(c):
            finite = False
    return finite


def _two_link_rows(q, qd, w, a, f, eps, friction, out):
    """
    Write the 2R's ``Y_SL(q, qd, w, a)`` (:data:`BASE_NAMES` columns) into ``out`` (2, 10).

    The rows of :func:`~manip_control.identification_data.regressor` with ``C(q, qd) w``
    polarised (module docstring); the friction columns at the velocity ``f`` when
    ``friction``, else zero; ``eps`` the Coulomb terms' smoothing velocities [rad/s].
    Compiled with numba (:func:`_compiled`).
    """
    c2, s2, c12 = math.cos(q[1]), math.sin(q[1]), math.cos(q[0] + q[1])
    v1, v2, w1, w2, a1, a2 = qd[0], qd[1], w[0], w[1], a[0], a[1]
    f1 = f2 = f3 = f4 = 0.0
    if friction:
        f1, f3 = f[0], f[1]
        f2, f4 = math.tanh(f1 / eps[0]), math.tanh(f3 / eps[1])
    out[0, 0] = a1
    out[0, 1] = 2.0 * c2 * a1 + c2 * a2 - s2 * (v1 * w2 + v2 * w1 + v2 * w2)
    out[0, 2] = a2
    out[0, 3] = 0.0
    out[0, 4] = math.cos(q[0])
    out[0, 5] = c12
    out[0, 6] = f1
    out[0, 7] = f2
    out[0, 8] = 0.0
    out[0, 9] = 0.0
    out[1, 0] = 0.0
    out[1, 1] = c2 * a1 + s2 * v1 * w1
    out[1, 2] = a1 + a2
    out[1, 3] = a2
    out[1, 4] = 0.0
    out[1, 5] = c12
    out[1, 6] = 0.0
    out[1, 7] = 0.0
    out[1, 8] = f3
    out[1, 9] = f4


def _reference(x, lam, s, qd_r, qdd_r):
    """
    Write the tick's reference velocity and acceleration and the sliding variable.

    ``x`` (5, n): ``q, qd, q_d, qd_d, qdd_d``; ``qd_r = qd_d - lam (q - q_d)``, ``qdd_r = qdd_d -
    lam (qd - qd_d)``, ``s = qd - qd_r`` (module docstring). Compiled (:func:`_compiled`).
    """
    for k in range(x.shape[1]):
        qd_r[k] = x[3, k] - lam[k] * (x[0, k] - x[2, k])
        qdd_r[k] = x[4, k] - lam[k] * (x[1, k] - x[3, k])
        s[k] = x[1, k] - qd_r[k]


def _law_torque(ys, scale, theta, rest, phi, kdm, s, qdd_r, tau):
    """
    Write ``tau = Y_SL (theta + scale phi) + D qdd_r - K_D s`` and scale ``ys`` in place.

    ``kdm`` (n, n): ``K_D``.
    ``ys`` (n, p) holds ``Y_SL`` on entry and ``Ys = Y_SL diag(scale)`` on return; ``theta``
    the nominal base parameters with the friction entries zero (``tau0`` has no friction: the
    controller's finish adds its feed-forward); ``rest`` (n, n) the part ``D`` of the nominal
    inverse dynamics that no base parameter carries (``tau0 = Y_SL theta + D qdd_r``).
    Compiled (:func:`_compiled`).
    """
    n, p = ys.shape
    for r in range(n):
        t = 0.0
        for j in range(n):
            t += rest[r, j] * qdd_r[j] - kdm[r, j] * s[j]
        for c in range(p):
            y = ys[r, c]
            ys[r, c] = y * scale[c]
            t += y * theta[c] + ys[r, c] * phi[c]
        tau[r] = t


def _mass_check(rows, cand, scale, theta, rest, lower, upper, ratio, m):
    """
    Return whether the estimate ``theta + scale cand`` passes the consistency check.

    The check of :meth:`AdaptiveLaw._check` without its messages: finite, inside the box
    ``[lower, upper]``, and ``(1 - ratio) M0(q) + dM(q)`` positive definite (Cholesky of the
    symmetric part), the columns of ``M0`` and ``dM`` from ``rows`` (n + 1, n, p): ``Y_SL(q,
    0, 0, e_j)`` for each joint ``j`` and ``Y_SL(q, 0, 0, 0)`` (``M0`` plus ``rest``).
    ``m`` (n, n) is scratch. Compiled (:func:`_compiled`).
    """
    p = cand.shape[0]
    n = m.shape[0]
    for k in range(p):
        c = cand[k]
        if not math.isfinite(c):
            return False
        tol = 1e-12 * max(upper[k], -lower[k])
        if c - upper[k] > tol or lower[k] - c > tol:
            return False
    for j in range(n):
        for r in range(n):
            m0 = rest[r, j]
            dm = 0.0
            for c in range(p):
                d = rows[j, r, c] - rows[n, r, c]
                m0 += d * theta[c]
                dm += d * scale[c] * cand[c]
            m[r, j] = (1.0 - ratio) * m0 + dm
    for i in range(n):                  # Cholesky of the symmetric part, in place
        for j in range(i + 1):
            acc = 0.5 * (m[i, j] + m[j, i]) if i != j else m[i, i]
            for k in range(j):
                acc -= m[i, k] * m[j, k]
            if i == j:
                if not acc > 0.0:
                    return False
                m[i, i] = math.sqrt(acc)
            else:
                m[i, j] = acc / m[j, j]
    return True


def _mass_from_rows(rows, theta, rest, out):
    """
    Write the nominal ``M0(q)`` into ``out`` (n, n) from the check rows of ``q``.

    ``rows`` (n + 1, n, p): ``Y_SL(q, 0, 0, e_j)`` for each joint ``j`` and ``Y_SL(q, 0, 0,
    0)``; column ``j`` is ``(rows[j] - rows[n]) theta + rest[:, j]``. Compiled
    (:func:`_compiled`).
    """
    n, p = out.shape[0], theta.shape[0]
    for j in range(n):
        for r in range(n):
            acc = rest[r, j]
            for c in range(p):
                acc += (rows[j, r, c] - rows[n, r, c]) * theta[c]
            out[r, j] = acc


def _damping(k_mass, m0, extra, out):
    """``out = k_mass sym(m0) + diag(extra)``: the law's ``K_D`` (n, n). Compiled."""
    n = out.shape[0]
    for r in range(n):
        for j in range(n):
            out[r, j] = 0.5 * k_mass * (m0[r, j] + m0[j, r])
        out[r, r] += extra[r]


def _two_link_constraint_names(h: str) -> list:
    return [f'm2 lc2 = {h} > 0',
            f'(a - Jr1 - d) l2 / l1^2 > m2 lc2 = {h} (I1 + m1 lc1^2 > 0 with lc2 <= l2)',
            f'(a - Jr1 - d) d / l1^2 > (m2 lc2)^2 = ({h})^2 (I1 + m1 lc1^2 > 0 with I2 >= 0)',
            f'G1 / g0 > m2 lc2 l1 / l2 = ({h}) l1 / l2 (m1 lc1 > 0 with lc2 <= l2)',
            f'G1 d / (g0 l1) > (m2 lc2)^2 = ({h})^2 (m1 lc1 > 0 with I2 >= 0)']


#: The 2R's physical-consistency constraints (:func:`_two_link_physical`), in order: those
#: of ``m2 lc2`` as ``b`` gives it, as ``G2`` gives it, then the rotor's.
TWO_LINK_PHYSICAL = tuple(_two_link_constraint_names('b / l1')
                          + _two_link_constraint_names('G2 / g0') + ['Jr2 >= 0'])


def _two_link_physical(theta, scale, cand, consts, values, grad):
    """
    Return the 2R's physical-consistency constraints of ``theta + scale cand``, their minimum.

    With ``A = a - Jr1 - d`` (``I1 + m1 lc1^2 + m2 l1^2``), ``h`` = ``m2 lc2``, ``P = G1 /
    g0`` (``m1 lc1 + m2 l1``), ``y = d / l1`` and ``z = A / l1``, all in kg m, the split of
    :func:`~manip_control.identification_data.nominal_from_estimate` exists iff ``h > 0``,
    ``A l2 / l1^2 > h``, ``y z > h^2`` and, with gravity, ``P > h l1 / l2``, ``y P > h^2``
    (:data:`TWO_LINK_PHYSICAL`). ``b`` and ``G2`` each give ``h`` (``b / l1``, ``G2 / g0``):
    the five constraints hold for both, so that any weighted mean of the two splits
    (:func:`two_link_nominal`); and a rotor inertia is not negative, ``Jr2 >= 0``. The
    products are second-order cones, ``y z >= h^2`` (``y, z >= 0``) as ``y + z - sqrt(4 h^2
    + (y - z)^2) >= 0``: every constraint is linear or concave, so the set is convex and a
    half-space tangent at any point contains it. ``values[i]`` (11,): constraint ``i`` minus
    its margin ``consts[4 + i]`` (``inf`` for the gravity ones of a horizontal arm);
    ``grad`` (11, p): the gradients in ``cand``. ``consts``: ``l1, l2, g0, Jr1`` [m, m,
    m/s^2, kg m^2] and the 11 margins. Compiled (:func:`_compiled`).
    """
    l1, l2, g0, jr1 = consts[0], consts[1], consts[2], consts[3]
    a = theta[0] + scale[0] * cand[0]
    d = theta[2] + scale[2] * cand[2]
    y, z = d / l1, (a - jr1 - d) / l1
    grad[:, :] = 0.0
    for src in range(2):
        i = 5 * src
        if src == 1 and not g0 > 0.0:
            for k in range(i, i + 5):
                values[k] = math.inf
            break
        col = 1 if src == 0 else 5            # h = b / l1 or G2 / g0
        dh = 1.0 / l1 if src == 0 else 1.0 / g0
        h = (theta[col] + scale[col] * cand[col]) * dh
        values[i] = h
        grad[i, col] = dh
        values[i + 1] = z * l2 / l1 - h
        grad[i + 1, 0], grad[i + 1, 2] = l2 / l1 ** 2, -l2 / l1 ** 2
        grad[i + 1, col] = -dh
        # the cone's gradient in (h, y, z): -4 h / r, 1 - (y - z) / r, 1 + (y - z) / r
        r = max(math.sqrt(4.0 * h * h + (y - z) ** 2), 1e-300)
        values[i + 2] = y + z - r
        grad[i + 2, 0] = (1.0 + (y - z) / r) / l1
        grad[i + 2, 2] = (-2.0 * (y - z) / r) / l1
        grad[i + 2, col] = -4.0 * h / r * dh
        if g0 > 0.0:
            p1 = (theta[4] + scale[4] * cand[4]) / g0
            values[i + 3] = p1 - h * l1 / l2
            grad[i + 3, 4] = 1.0 / g0
            grad[i + 3, col] = -dh * l1 / l2
            r = max(math.sqrt(4.0 * h * h + (y - p1) ** 2), 1e-300)
            values[i + 4] = y + p1 - r
            grad[i + 4, 2] = (1.0 - (y - p1) / r) / l1
            grad[i + 4, 4] = (1.0 + (y - p1) / r) / g0
            grad[i + 4, col] = -4.0 * h / r * dh
        else:
            values[i + 3] = values[i + 4] = math.inf
    values[10] = theta[3] + scale[3] * cand[3]
    grad[10, 3] = 1.0
    worst = math.inf
    for i in range(values.shape[0]):
        values[i] -= consts[4 + i]
        worst = min(worst, values[i])
        for k in range(grad.shape[1]):
            grad[i, k] *= scale[k]
    return worst


def _two_link_project(theta, scale, cand, consts, margin, movable, lower, upper, values,
                      grad, steps):
    """
    Project ``cand`` toward the 2R's physical set in place; return whether it is inside.

    :meth:`AdaptiveLaw._project_physical`'s steps on :func:`_two_link_physical`, with
    nothing allocated: each step moves the ``movable`` columns onto the tangent half-space
    of the violated constraint farthest away (aiming ``1e-3 margin`` past its margin), then
    clips to ``[lower, upper]``; at most ``steps`` steps. Compiled (:func:`_compiled`).
    """
    m, p = grad.shape
    for _ in range(steps):
        if _two_link_physical_in_kernel(theta, scale, cand, consts, values, grad) >= 0.0:
            return True
        far, row, row_norm2 = 0.0, -1, 0.0
        for i in range(m):
            if not values[i] < 0.0:
                continue
            norm2 = 0.0
            for k in range(p):
                if movable[k]:
                    norm2 += grad[i, k] * grad[i, k]
            if norm2 > 1e-200 and -values[i] / math.sqrt(norm2) > far:
                far, row, row_norm2 = -values[i] / math.sqrt(norm2), i, norm2
        if row < 0:                      # no violated constraint a step can reach
            return False
        step = (1e-3 * margin[row] + 1e-12 - values[row]) / row_norm2
        for k in range(p):
            c = cand[k] + step * grad[row, k] if movable[k] else cand[k]
            cand[k] = min(max(c, lower[k]), upper[k])
    return _two_link_physical_in_kernel(theta, scale, cand, consts, values, grad) >= 0.0


def _two_link_torque(x, lam, kdm, scale, theta, rest, eps, friction, phi, ys, s, qd_r,
                     qdd_r, tau):
    """
    Compute the 2R's torque of the law in one compiled call.

    :func:`_reference`, the closed-form rows :func:`_two_link_rows` (friction columns at
    ``qd_d`` when ``friction``), :func:`_law_torque`.
    """
    _reference_in_kernel(x, lam, s, qd_r, qdd_r)
    _rows_in_kernel(x[0], x[1], qd_r, qdd_r, x[3], eps, friction, ys)
    _law_torque_in_kernel(ys, scale, theta, rest, phi, kdm, s, qdd_r, tau)


def _two_link_check(q, cand, scale, theta, rest, eps, lower, upper, ratio, zero, unit, rows,
                    m):
    """
    Return whether the 2R estimate ``theta + scale cand`` passes the consistency check at ``q``.

    The closed-form rows ``Y_SL(q, 0, 0, e_j)``, ``Y_SL(q, 0, 0, 0)`` into ``rows`` (3, 2, p),
    then :func:`_mass_check`; ``zero`` (2,), ``unit`` (2, 2) the identity, ``m`` (2, 2) scratch.
    """
    n = m.shape[0]
    for j in range(n):
        _rows_in_kernel(q, zero, zero, unit[j], zero, eps, False, rows[j])
    _rows_in_kernel(q, zero, zero, zero, zero, eps, False, rows[n])
    return _mass_check_in_kernel(rows, cand, scale, theta, rest, lower, upper, ratio, m)


def _gather_columns(y, weight, pos, src, out, first):
    """
    ``out[:, pos[k]] (+)= weight * y[:, src[k]]``: base columns of a full regressor's rows.

    Overwrites with ``first``, else adds. Compiled (:func:`_compiled`): a URDF arm's rows
    (:class:`manip_control.arm_identification.PinocchioRows`) without a temporary.
    """
    n = out.shape[0]
    for k in range(pos.shape[0]):
        c, d = pos[k], src[k]
        for r in range(n):
            v = weight * y[r, d]
            out[r, c] = v if first else out[r, c] + v


def _joint_columns(out, pos, kind, joint, a, f, eps, friction):
    """
    Write the per-joint columns of a base regressor's rows into ``out`` (n, p).

    Column ``pos[k]`` of joint ``joint[k]``: armature (``kind`` 0, ``a_j``), viscous (1,
    ``f_j``) or Coulomb friction (2, ``tanh(f_j / eps_j)``), the friction ones zero unless
    ``friction``; every other row zero. Compiled (:func:`_compiled`).
    """
    n = out.shape[0]
    for k in range(pos.shape[0]):
        c, j = pos[k], joint[k]
        for r in range(n):
            out[r, c] = 0.0
        if kind[k] == 0:
            out[j, c] = a[j]
        elif friction:
            out[j, c] = f[j] if kind[k] == 1 else math.tanh(f[j] / eps[j])


# the kernels as the compiled ones call them: rebound to the compiled ones by _compiled()
_rows_in_kernel = _two_link_rows
_reference_in_kernel = _reference
_law_torque_in_kernel = _law_torque
_mass_check_in_kernel = _mass_check
_two_link_physical_in_kernel = _two_link_physical


@dataclass(frozen=True)
class _Kernels:
    step: Callable
    rows: Callable
    reference: Callable
    law_torque: Callable
    mass_check: Callable
    two_link_torque: Callable
    two_link_check: Callable
    gather_columns: Callable
    joint_columns: Callable
    mass_from_rows: Callable
    damping: Callable
    two_link_physical: Callable
    two_link_project: Callable


_COMPILED: list = []


def _compiled() -> _Kernels:
    """
    Return the law's kernels compiled with numba (or the Python ones where numba is absent).

    The adaptation step, the reference, the torque and the consistency check of every arm,
    the 2R's closed-form rows and its one-call torque and check, and the column gathers of a
    URDF arm's rows; compiled once per process (numba's cache on disk) when the first law or
    base regressor is built.
    """
    global _rows_in_kernel, _reference_in_kernel, _law_torque_in_kernel, _mass_check_in_kernel
    global _two_link_physical_in_kernel
    if not _COMPILED:
        py = (_adaptation_step, _two_link_rows, _reference, _law_torque, _mass_check,
              _two_link_torque, _two_link_check, _gather_columns, _joint_columns,
              _mass_from_rows, _damping, _two_link_physical, _two_link_project)
        try:  # numba is a runtime dependency; without it the same functions run in Python
            import numba
        except ImportError:  # pragma: no cover - exercised only where numba is absent
            _COMPILED.append(_Kernels(*py))
            return _COMPILED[0]
        jit = numba.njit(cache=True)
        # the callees first: a compiled kernel binds the globals it calls when compiled
        step, rows, ref, torque, check = (jit(f) for f in py[:5])
        _rows_in_kernel, _reference_in_kernel = rows, ref
        _law_torque_in_kernel, _mass_check_in_kernel = torque, check
        physical = _two_link_physical_in_kernel = jit(_two_link_physical)
        _COMPILED.append(_Kernels(step, rows, ref, torque, check,
                                  *(jit(f) for f in py[5:11]), physical,
                                  jit(_two_link_project)))
    return _COMPILED[0]


class AdaptiveLaw:
    """
    The adaptive law of the module docstring, built once, stepped at the control period.

    Parameters
    ----------
    model : ArmModel
        The nominal model (``tau0``, ``M0``).
    regressor : BaseRegressor
        Its base parameters and regressor (same joints, same order).
    kp, kd : sequence of n float
        Computed-torque gains [1/s^2], [1/s]: ``Lambda = kp / kd``, ``K_D = k M0(q_c) +
        diag((kd - k) M0_jj(q_gain))``, ``k = min kd`` (module docstring).
    period : float
        Control period ``T`` [s].
    params : AdaptationParameters, optional
        Gains and robustness settings (default: :class:`AdaptationParameters`'s).
    q_gain : sequence of n float, optional
        Configuration of ``M0`` for ``K_D``'s diagonal part and, until the first check, its
        full part (default: zero, clipped into the joint limits).
    check_every : int
        Ticks between consistency checks (default 1). Above 1 the torque keeps the last
        checked estimate while the law integrates, and the integrated estimate is checked
        and taken (or refused) every ``check_every`` ticks: the check costs ``n + 1``
        regressor evaluations (a 7-joint arm: bench/bench_adaptation.py). On the fast path
        (a regressor with ``mass_rows``) they are spread, one per tick, over the window, all
        at the configuration of its first tick: the check of a window's estimate is at a
        ``q`` at most ``check_every - 1`` ticks old, and no tick pays for the whole check.

    Raises
    ------
    ParameterError
        A gain or the period is not valid, or the regressor does not match the model.

    """

    def __init__(self, model: ArmModel, regressor: BaseRegressor, kp, kd, period: float,
                 params: AdaptationParameters | None = None, q_gain=None,
                 check_every: int = 1):
        self.model = model
        self.n = n = model.n
        self.period = _positive('period', period)
        self.params = params = AdaptationParameters() if params is None else params
        kp = np.array(_vector('kp', kp, n, check=_positive))
        kd = np.array(_vector('kd', kd, n, check=_positive))
        self.regressor = regressor
        self.names, self.units = tuple(regressor.names), tuple(regressor.units)
        p = regressor.size
        self.nominal = np.array(regressor.theta0, dtype=float)
        self.nominal.setflags(write=False)
        zero = np.zeros((1, n))
        shape = np.shape(regressor.evaluate(zero, zero, zero))
        if shape != (1, n, p) or self.nominal.shape != (p,) or len(self.units) != p:
            raise ParameterError(f'regressor: expected {n} joints and {p} base parameters '
                                 f'(Y of shape (1, {n}, {p}), theta0 of {p}); got Y '
                                 f'{shape}, theta0 {self.nominal.shape}')
        if q_gain is None:
            q_gain = np.clip(np.zeros(n), model.limits.lower, model.limits.upper)
        m0 = np.array(model.mass_matrix(np.asarray(q_gain, dtype=float)), dtype=float)
        self.lam = kp / kd
        # K_D = k_mass M0(q_c) + diag((kd - k_mass) M0_jj(q_gain)), k_mass = min kd, M0 at the
        # last check's configuration q_c: the full matrix, not its diagonal alone, so that a
        # coupled arm's light directions get no more gain than its heavy ones
        self.k_mass = float(np.min(kd))
        self._kd_extra = (kd - self.k_mass) * np.diag(m0)
        self._m0 = m0
        #: ``K_D`` [N·m·s/rad], (n, n), refreshed at every check tick
        self.kdm = np.zeros((n, n))
        self.scale = parameter_scale(self.nominal, self.units)
        self.active = ~np.asarray(regressor.fixed, bool)
        self._friction = np.flatnonzero(np.asarray(regressor.friction, bool))
        if not params.friction:
            self.active[self._friction] = False
        self._fixed = np.flatnonzero(~self.active)
        self._adapted = np.flatnonzero(self.active)
        self.bound = float(params.bound_fraction)
        # the box in scaled coordinates: +-bound_fraction, plus what a payload can change
        self.lower = np.full(p, -self.bound)
        self.upper = np.full(p, self.bound)
        if params.payload_mass > 0.0:
            if regressor.payload_change is None:
                raise ParameterError('adaptation.payload_mass: this regressor gives no payload '
                                     'change of its base parameters (payload_change)')
            lo, hi = regressor.payload_change(params.payload_mass, params.payload_radius)
            self.lower += np.asarray(lo, float) / self.scale
            self.upper += np.asarray(hi, float) / self.scale
        self._decay = math.exp(-self.period / params.forgetting_time)
        self._every = max(1, int(round(EXCITATION_INTERVAL / self.period)))
        # regressor rows: (q, 0, qdd_r), (q, qd + qd_r, 0), (q, qd - qd_r, 0)[, (q, qd_d, 0)]
        # for the torque, then (q, 0, e_j), (q, 0, 0) for the check of the same tick
        self._rows = rows = 4 if params.friction and self._friction.size else 3
        self._q = np.zeros((rows + n + 1, n))
        self._v = np.zeros((rows + n + 1, n))
        self._a = np.zeros((rows + n + 1, n))
        self._a[rows:rows + n] = np.eye(n)
        self._yc = None                   # the check rows evaluated with this tick's torque
        self._chol = np.zeros((n, n))
        self._ys = np.zeros((n, p))
        self._s = np.zeros(n)
        #: the last tick's ``q, qd, q_d, qd_d, qdd_d`` (5, n)
        self.x = np.zeros((5, n))
        self._qnow = self.x[0]
        self.qd_r = np.zeros(n)
        self.qdd_r = np.zeros(n)
        self.tau = np.zeros(n)
        self._phi = np.zeros(p)           # the integrated estimate (scaled coordinates)
        self._phi_cmd = np.zeros(p)       # the last checked one: the torque's
        self._cand = np.zeros(p)
        self._kernels = kernels = _compiled()
        kernels.damping(self.k_mass, self._m0, self._kd_extra, self.kdm)
        self._step = kernels.step
        # the fast path where the regressor offers its rows into buffers: tau0 = Y_SL theta0 +
        # D qdd_r, compiled around the rows; the 2R's whole torque in one compiled call
        self._kernel = self._check_kernel = self._fast = None
        self._yrows = np.zeros((n + 1, n, p))
        # the fast path's check rows of the current window, one row per tick, at _q_window
        self._window_rows = np.zeros((n + 1, n, p))
        self._q_window = np.zeros(n)
        self._rows_done = 0
        if regressor.torque_kernel is not None or (regressor.two_velocity is not None
                                                   and regressor.mass_rows is not None):
            theta = self.nominal.copy()
            theta[self._friction] = 0.0          # tau0 has no friction (the finish adds it)
            rest = self._rest_inertia(theta)
            self._fast = (theta, rest, np.zeros((n, n)))
        if regressor.torque_kernel is not None:
            kernel, check, constants = regressor.torque_kernel
            self._kernel = (kernel, theta, rest, constants)
            self._check_kernel = (check, theta, rest, constants, np.zeros(n), np.eye(n),
                                  self._yrows, np.zeros((n, n)))
        self._physical = regressor.physical
        if self._physical is not None:
            count = len(self._physical[2])
            self._phys_values, self._phys_grad = np.zeros(count), np.zeros((count, p))
            self._phys_theta = self.nominal.copy()      # writeable: one compiled signature
            # compile (or load) the projection now, never on the step that first needs it
            self._physical[4](self._phys_theta, self.scale, np.zeros(p), self._physical[1],
                              self._physical[3], self.active, -np.ones(p), np.ones(p),
                              self._phys_values, self._phys_grad, 1)
        self.check_every = max(1, int(check_every))
        # the fast path's check rows are spread over the ticks of a window (_window_row)
        self._spread = (self._fast is not None and self._check_kernel is None
                        and self.check_every > 1)
        #: analyse the excitation in :meth:`adapt` every 0.1 s (an eigen-decomposition of the
        #: p x p information matrix: 4-38 ms for the Panda's 48 adapted parameters on a loaded
        #: 2-core host); a real-time loop sets it false and analyses a copy elsewhere
        self.excitation_in_loop = True
        self.information = np.zeros((p, p))
        self.eigenvalues = np.zeros(p)
        self.excited = np.zeros(p, dtype=bool)
        self.excited_fraction = np.zeros(p)
        self.frozen = False
        # compile (or load from numba's cache) now, never on the first tick
        self._step(np.zeros((n, p)), np.zeros(n), np.zeros(p), self._fixed, self._adapted,
                   np.zeros((p, p)),
                   1.0, 1.0, 0.0, 0.0, 0.0, 1.0, self.lower, self.upper, np.zeros(p))
        if self._fast is not None:
            self.torque(self.x[0], self.x[1], self.x[2], self.x[3], self.x[4])
            self._check(self._cand, self._qnow)
            kernels.mass_from_rows(self._yrows, self._fast[0], self._fast[1], np.zeros((n, n)))
        self.reset()

    # -- state ---------------------------------------------------------------------------------
    def reset(self) -> None:
        """Return to the nominal model: estimate, information matrix, fallback state."""
        self._phi[:] = 0.0
        self._phi_cmd[:] = 0.0
        self.information[:] = 0.0
        self.eigenvalues[:] = 0.0
        self.excited[:] = False
        self.excited_fraction[:] = 0.0
        self.fallback_reason: str | None = None
        self.fallbacks = 0
        self._rejected = 0
        self.ticks = 0
        self._rows_done = 0
        self._have_step = False

    def freeze(self, frozen: bool = True) -> None:
        """Stop (or resume) adapting; the torque keeps the current estimate."""
        self.frozen = bool(frozen)

    @property
    def estimates(self) -> np.ndarray:
        """Return the current estimate ``theta^`` (a copy), in :attr:`names` order."""
        return self.nominal + self.scale * self._phi_cmd

    def set_estimate(self, theta, q=None) -> bool:
        """
        Replace the estimate after the consistency check (at ``q``, default the last tick's).

        Returns False (and sets :attr:`fallback_reason`, the estimate unchanged) when the
        check fails; True when the estimate was taken.
        """
        theta = np.asarray(theta, dtype=float)
        if theta.shape != self.nominal.shape:
            raise ParameterError(f'theta: expected {self.nominal.size} values, got '
                                 f'{theta.shape}')
        q = self._qnow if q is None else np.asarray(q, dtype=float)
        cand = (theta - self.nominal) / self.scale
        why = self._check(cand, q)
        if why is not None:
            self._fallback(why, q)
            return False
        self._phi[:] = cand
        self._phi_cmd[:] = cand
        return True

    # -- the tick ------------------------------------------------------------------------------
    def update(self, q, qd, q_d, qd_d, qdd_d, hold: bool = False) -> np.ndarray:
        """
        One tick: the torque with the current estimate, then one adaptation step.

        Parameters
        ----------
        q, qd : sequence of n float
            Measured position [rad] and velocity [rad/s] (finite: the safety layer's check).
        q_d, qd_d, qdd_d : sequence of n float
            Reference position, velocity, acceleration.
        hold : bool
            Skip the adaptation step (e.g. the command was saturated).

        Returns
        -------
        ndarray, shape (n,)
            The rigid-body torque [N·m] (the law's buffer: copy it to keep it).

        """
        tau = self.torque(q, qd, q_d, qd_d, qdd_d)
        self.adapt(hold)
        return tau

    def torque(self, q, qd, q_d, qd_d, qdd_d) -> np.ndarray:
        """``tau = tau0 + Y_SL (theta^ - theta0) - K_D s`` [N·m] into :attr:`tau`."""
        x, lam = self.x, self.lam
        x[0] = q
        x[1] = qd
        x[2] = q_d
        x[3] = qd_d
        x[4] = qdd_d
        qd_r, qdd_r, s, r, ys = self.qd_r, self.qdd_r, self._s, self._rows, self._ys
        self._have_step = True
        if self._kernel is not None:
            kernel, theta, rest, constants = self._kernel
            kernel(x, lam, self.kdm, self.scale, theta, rest, constants, r == 4,
                   self._phi_cmd, ys, s, qd_r, qdd_r, self.tau)
            self._yc = None                      # the check evaluates its own rows
            return self.tau
        if self._fast is not None:
            theta, rest, _ = self._fast
            k = self._kernels
            k.reference(x, lam, s, qd_r, qdd_r)
            self.regressor.two_velocity(x[0], x[1], qd_r, qdd_r, x[3] if r == 4 else None, ys)
            k.law_torque(ys, self.scale, theta, rest, self._phi_cmd, self.kdm, s, qdd_r,
                         self.tau)
            self._yc = None
            return self.tau
        qn, qd = x[0], x[1]
        np.subtract(x[3], lam * (qn - x[2]), out=qd_r)
        np.subtract(x[4], lam * (qd - x[3]), out=qdd_r)
        np.subtract(qd, qd_r, out=s)
        qq, vv, aa = self._q, self._v, self._a
        np.add(qd, qd_r, out=vv[1])
        np.subtract(qd, qd_r, out=vv[2])
        check = (self.ticks + 1) % self.check_every == 0 and not (self.frozen)
        end = qq.shape[0] if check else r
        qq[:end] = qn
        aa[0] = qdd_r
        if r == 4:
            vv[3] = x[3]
        y = self.regressor.evaluate(qq[:end], vv[:end], aa[:end])
        self._yc = y[r:] if check else None
        np.subtract(y[1], y[2], out=ys)
        ys *= 0.25
        ys += y[0]
        ys[:, self._friction] = 0.0
        if r == 4:
            ys[:, self._friction] = y[3][:, self._friction]
        idyn = self.model.inverse_dynamics
        tau = self.tau
        tau[:] = idyn(qn, vv[0], qdd_r)
        tau += 0.25 * (idyn(qn, vv[1], aa[1]) - idyn(qn, vv[2], aa[2]))
        ys *= self.scale                     # Ys: scaled columns, [N·m] per unit of phi
        tau += ys @ self._phi_cmd
        tau -= self.kdm @ s
        return tau

    def _rest_inertia(self, theta: np.ndarray) -> np.ndarray:
        """
        Return ``D`` with ``tau0 = Y_SL theta + D qdd_r``: the model's terms no base parameter has.

        ``D = tau0(q, 0, 0, e_j) - Y_SL(q, 0, 0, e_j) theta`` per column (the 2R: its rotor
        coupling), then checked at random points of the joint range against the model's
        inverse dynamics polarised (module docstring).

        Raises
        ------
        ParameterError
            The regressor's rows and the model's inverse dynamics differ by more than
            ``D qdd_r`` (the compiled torque would not be the law's).

        """
        n, model, rows = self.n, self.model, self.regressor.two_velocity
        if rows is None:
            raise ParameterError('regressor: a compiled torque needs the closed-form rows '
                                 '(two_velocity)')
        y = np.zeros((n, self.nominal.size))
        zero = np.zeros(n)
        q0 = np.clip(zero, model.limits.lower, model.limits.upper)
        rest = np.zeros((n, n))
        for j, a in enumerate(np.eye(n)):
            rows(q0, zero, zero, a, None, y)
            rest[:, j] = model.inverse_dynamics(q0, zero, a) - y @ theta
        rng = np.random.default_rng(0)
        lo = np.maximum(model.limits.lower, -np.pi)
        hi = np.minimum(model.limits.upper, np.pi)
        for _ in range(8):
            q = rng.uniform(lo, hi)
            v, w, a = rng.normal(size=(3, n))
            rows(q, v, w, a, None, y)
            want = (model.inverse_dynamics(q, zero, a) + 0.25 * (
                model.inverse_dynamics(q, v + w, zero) - model.inverse_dynamics(q, v - w, zero)))
            off = float(np.max(np.abs(y @ theta + rest @ a - want)))
            if not off <= 1e-9 * (1.0 + float(np.max(np.abs(want)))):
                raise ParameterError("regressor: its rows differ from the model's inverse "
                                     f'dynamics by {off:.3g} N m at q = {q.tolist()}')
        return rest

    def adapt(self, hold: bool = False) -> bool:
        """
        One adaptation step from the last :meth:`torque` (module docstring, steps 1-4).

        Returns True when the estimate took the step, False when held, frozen or refused.
        """
        if not self._have_step:
            return False
        self._have_step = False
        self.ticks += 1
        if self.frozen or hold:
            if self.ticks % self.check_every == 0:
                self._rows_done = 0             # a window ends with its check tick
                self._refresh_damping(self._qnow, None)
            return False
        prm, phi, cand = self.params, self._phi, self._cand
        finite = self._step(self._ys, self._s, phi, self._fixed, self._adapted, self.information,
                            self._decay, self.period, prm.gamma, prm.sigma, prm.dead_zone,
                            prm.max_rate * self.period, self.lower, self.upper, cand)
        if self.excitation_in_loop and self.ticks % self._every == 0:
            self._excitation()
        if self.ticks % self.check_every:
            if self._spread:
                self._window_row(1)
            if not finite:                         # never integrate a non-finite step
                self._fallback('estimate not finite', self._qnow)
                phi[:] = self._phi_cmd
                return False
            phi[:] = cand                          # checked at the next check tick
            return True
        q, yc = self._qnow, self._yc
        if self._spread:
            q, yc = self._q_window, self._window_rows
            self._window_row(self.n + 1)                # the rows still missing
            self._rows_done = 0
        why = self._check(cand, q, yc)
        for _ in range(2):                # the two projections may undo each other's work
            if why is None or not why.startswith(('estimate not physical', 'mass matrix')):
                break
            if why.startswith('estimate not physical'):
                self._project_physical(cand)
                why = self._check(cand, q, yc)
            if why is not None and why.startswith('mass matrix'):
                self._project_inertia(cand, q, yc)
                why = self._check(cand, q, yc)
        # K_D at this tick's q: from the check's rows where they are of this q (the 2R's, a
        # URDF arm's fast path checking every tick), else the model's mass matrix
        self._refresh_damping(self._qnow, (yc if yc is not None else self._yrows)
                              if self._fast is not None and not self._spread else None)
        if why is not None:
            self._fallback(why, q)
            phi[:] = self._phi_cmd
            return False
        phi[:] = cand
        self._phi_cmd[:] = cand
        self._rejected = 0
        return True

    def _refresh_damping(self, q: np.ndarray, rows: np.ndarray | None) -> None:
        """``K_D`` at ``q``: ``M0(q)`` from the check rows of ``q`` or the model's CRBA (None)."""
        if rows is not None:
            self._kernels.mass_from_rows(rows, self._fast[0], self._fast[1], self._m0)
        else:
            self._m0[:] = self.model.mass_matrix(q)
        self._kernels.damping(self.k_mass, self._m0, self._kd_extra, self.kdm)

    # -- checks --------------------------------------------------------------------------------
    def _window_row(self, count: int) -> None:
        """
        Evaluate up to ``count`` more of the window's check rows at the window's configuration.

        The window's first row fixes its configuration (this tick's ``q``); every row of a
        window is at that one ``q``, whatever ticks were held or frozen in between.
        """
        n = self.n
        if self._rows_done == 0:
            self._q_window[:] = self._qnow
        if count >= n + 1 - self._rows_done:
            if self._rows_done == 0:
                self.regressor.mass_rows(self._q_window, self._window_rows)
            else:
                for j in range(self._rows_done, n + 1):
                    self.regressor.mass_rows(self._q_window, self._window_rows, j)
            self._rows_done = n + 1
            return
        for j in range(self._rows_done, self._rows_done + count):
            self.regressor.mass_rows(self._q_window, self._window_rows, j)
        self._rows_done += count

    def _check(self, cand: np.ndarray, q: np.ndarray, yc: np.ndarray | None = None
               ) -> str | None:
        """
        Why the estimate ``theta0 + scale cand`` is not acceptable at ``q``, or None.

        ``M^(q) - r M0(q)`` must be positive definite (Cholesky), ``r`` =
        :data:`MIN_EIGENVALUE_RATIO`: the estimate's inertia is at least ``r`` times the
        nominal one in every direction. ``yc``: the rows ``Y(q, 0, e_j)``, ``Y(q, 0, 0)``
        when the torque of this tick evaluated them.
        """
        kc, fast, phys = self._check_kernel, self._fast, self._physical
        passed = False
        if kc is not None:                # the 2R, compiled
            passed = kc[0](q, cand, self.scale, kc[1], kc[2], kc[3], self.lower, self.upper,
                           MIN_EIGENVALUE_RATIO, *kc[4:])
        elif fast is not None:
            if yc is None:
                yc = self._yrows
                self.regressor.mass_rows(q, yc)
            passed = self._kernels.mass_check(yc, cand, self.scale, fast[0], fast[1],
                                              self.lower, self.upper, MIN_EIGENVALUE_RATIO,
                                              fast[2])
        if passed and (phys is None or self._physical_margin(cand) >= 0.0):
            return None                   # compiled; the messages below on a failure
        if not np.all(np.isfinite(cand)):
            return 'estimate not finite'
        out = np.maximum(cand - self.upper, self.lower - cand)
        if np.any(out > 1e-12 * np.maximum(self.upper, -self.lower)):
            k = int(np.argmax(out))
            return (f'estimate of {self.names[k]} outside its bounds '
                    f'[{self.lower[k]:g}, {self.upper[k]:g}] x {self.scale[k]:.3g}')
        if phys is not None and self._physical_margin(cand) < 0.0:
            k = int(np.argmin(self._phys_values))
            return (f'estimate not physical: {phys[2][k]} is missed by '
                    f'{-self._phys_values[k]:.3g} (its margin included)')
        n = self.n
        if yc is None:
            yc = self._mass_regressor(q)
        dtheta = self.scale * cand
        dm = (yc[:n] - yc[n]) @ dtheta          # row j: column j of dM
        m0 = self.model.mass_matrix(q)
        chol = self._chol
        np.multiply(m0, 1.0 - MIN_EIGENVALUE_RATIO, out=chol)
        chol += 0.5 * (dm + dm.T)
        try:
            np.linalg.cholesky(chol)
        except np.linalg.LinAlgError:
            lo = float(np.linalg.eigvalsh(m0 + 0.5 * (dm + dm.T))[0])
            return (f'mass matrix of the estimate not positive definite enough at q = '
                    f'{np.round(q, 4).tolist()} (lambda_min {lo:.3g} kg m^2; it must '
                    f'exceed {MIN_EIGENVALUE_RATIO:g} x M0 in every direction)')
        return None

    def _physical_margin(self, cand: np.ndarray) -> float:
        """Evaluate the physical constraints of ``cand`` into their buffers; return the least."""
        phys = self._physical
        return phys[0](self._phys_theta, self.scale, cand, phys[1], self._phys_values,
                       self._phys_grad)

    def _mass_regressor(self, q: np.ndarray) -> np.ndarray:
        """Return the rows ``Y(q, 0, e_j)``, ``Y(q, 0, 0)`` that give ``dM`` per phi."""
        if self.regressor.mass_rows is not None:
            self.regressor.mass_rows(q, self._yrows)
            return self._yrows
        r = self._rows
        qq = self._q[r:]
        qq[:] = q
        return self.regressor.evaluate(qq, self._v[r:], self._a[r:])

    def _project_inertia(self, cand: np.ndarray, q: np.ndarray,
                         yc: np.ndarray | None = None) -> None:
        """
        Move ``cand`` (in place) into ``M^(q) - r M0(q) > 0`` by projections on half-spaces.

        With ``x`` the eigenvector of the lowest eigenvalue ``w`` of ``A(phi) = (1 - r) M0 +
        dM(phi)`` (symmetric part), ``x^T A x = x^T (1 - r) M0 x + a . phi`` is affine in
        ``phi`` (``a_k = x^T dM_k x``, ``dM_k`` the change of ``M^`` per unit of ``phi_k``):
        the half-space ``a . phi >= w_margin - (x^T A(cand) x - a . cand)`` contains the convex
        set ``{phi: A(phi) >= margin}`` and, with it, the true parameters. The Euclidean
        projection in ``phi`` (the ``Gamma^-1`` metric) onto a convex set containing the truth
        never moves the estimate away from it; then the box clip, at most
        :data:`PROJECTION_STEPS` times. The caller checks the result.
        """
        n = self.n
        if yc is None:
            yc = self._mass_regressor(q)
        d = (yc[:n] - yc[n]) * self.scale            # [j, i, k]: M^'s column j, row i per phi_k
        d[:, :, self._fixed] = 0.0
        m0 = (1.0 - MIN_EIGENVALUE_RATIO) * self.model.mass_matrix(q)
        for _ in range(PROJECTION_STEPS):
            dm = d @ cand                            # [j, i]
            w, v = np.linalg.eigh(m0 + 0.5 * (dm + dm.T))
            x = v[:, 0]
            margin = PROJECTION_MARGIN * float(x @ m0 @ x)
            if w[0] >= margin:
                return
            a = np.einsum('i,jik,j->k', x, d, x)
            aa = float(a @ a)
            if not aa > 0.0:
                return
            cand += ((margin - w[0]) / aa) * a
            np.clip(cand, self.lower, self.upper, out=cand)

    def _project_physical(self, cand: np.ndarray) -> None:
        """
        Move ``cand`` (in place) toward the physical set by projections on half-spaces.

        Each step takes the constraint farthest from holding (:attr:`BaseRegressor.physical`)
        that ``cand``'s adapted columns can change, its tangent half-space at ``cand`` (it
        contains the convex set, the true parameters with it) aiming 0.1 % of its margin
        past the margin, then the box clip: as :meth:`_project_inertia`, never away from a
        truth that meets the margins. At most :data:`PHYSICAL_PROJECTION_STEPS`, compiled
        and allocating nothing (the regressor's ``project``); the caller checks the result.
        """
        _, consts, _, margin, project = self._physical
        project(self._phys_theta, self.scale, cand, consts, margin, self.active, self.lower,
                self.upper, self._phys_values, self._phys_grad, PHYSICAL_PROJECTION_STEPS)

    def _fallback(self, why: str, q: np.ndarray) -> None:
        """Refuse a step: keep the last valid estimate, or the nominal model if it fails too."""
        self.fallbacks += 1
        self._rejected += 1
        t = f't = {self.ticks * self.period:.6g} s'
        if self._rejected >= MAX_REJECTED:
            self._phi_cmd[:] = 0.0
            self._rejected = 0
            self.fallback_reason = (f'{t}: {why}; {MAX_REJECTED} steps refused in a row: '
                                    'back to the nominal model')
        elif self._check(self._phi_cmd, q) is not None:
            self._phi_cmd[:] = 0.0
            self.fallback_reason = (f'{t}: {why}; the last valid estimate fails here too: '
                                    'back to the nominal model')
        else:
            self.fallback_reason = f'{t}: {why}; kept the last valid estimate'
        self._phi[:] = self._phi_cmd

    def _excitation(self) -> None:
        """Eigen-decomposition of the information matrix: excited directions and parameters."""
        self.set_excitation(*self.excitation_of(self.information))

    def excitation_of(self, information: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """
        Return the eigenvalues (descending, padded to p) and each parameter's excited fraction.

        ``information`` is :attr:`information` or a copy of it: a thread other than the control
        loop's may analyse a copy (:attr:`excitation_in_loop` false) and hand the result to
        :meth:`set_excitation`; the eigen-decomposition then never delays a tick.
        """
        act = self.active
        w, v = np.linalg.eigh(information[np.ix_(act, act)])
        top = float(w[-1]) if w.size else 0.0
        keep = w > self.params.excitation_threshold * top if top > 0.0 else w > np.inf
        eig = np.zeros(self.nominal.size)
        eig[:w.size] = w[::-1]
        frac = np.zeros(self.nominal.size)
        frac[act] = np.sum(v[:, keep] ** 2, axis=1)
        return eig, frac

    def set_excitation(self, eigenvalues: np.ndarray, fraction: np.ndarray) -> None:
        """Take an analysis of :meth:`excitation_of`: eigenvalues, excited fractions and flags."""
        self.eigenvalues[:] = eigenvalues
        self.excited_fraction[:] = fraction
        self.excited[:] = fraction >= EXCITED_FRACTION

    def excited_projector(self) -> np.ndarray:
        """Projector onto the excited subspace in scaled coordinates ``phi``, shape (p, p)."""
        act = self.active
        sub = self.information[np.ix_(act, act)]
        w, v = np.linalg.eigh(sub)
        top = float(w[-1]) if w.size else 0.0
        keep = w > self.params.excitation_threshold * top if top > 0.0 else w > np.inf
        p = np.zeros((self.nominal.size, self.nominal.size))
        p[np.ix_(act, act)] = v[:, keep] @ v[:, keep].T
        return p

    # -- output --------------------------------------------------------------------------------
    def table(self, truth: Sequence[float] | None = None) -> str:
        """Aligned text: name, nominal, estimate, (true,) excited, unit."""
        head = f'  {"parameter":<14}{"nominal":>12}{"estimate":>12}'
        head += f'{"true":>12}' if truth is not None else ''
        lines = [head + f'{"excited":>9}  unit']
        est = self.estimates
        for k, name in enumerate(self.names):
            row = f'  {name:<14}{self.nominal[k]:>12.5g}{est[k]:>12.5g}'
            if truth is not None:
                row += f'{float(truth[k]):>12.5g}'
            exc = 'yes' if self.excited[k] else ('no' if self.active[k] else 'fixed')
            lines.append(row + f'{exc:>9}  {self.units[k]}')
        return '\n'.join(lines)

    def save(self, path) -> list:
        """Write the estimate as manip-identify writes an identified model; return the files."""
        if self.regressor.save is None:
            raise ParameterError('save: this regressor has no file format')
        return self.regressor.save(self.estimates, path, self)


class AdaptiveController:
    """
    :class:`AdaptiveLaw` behind :meth:`manip_control.control.Controller.update`'s interface.

    After the law's rigid-body torque: the nominal friction feed-forward at ``qd_d`` (with
    ``friction_compensation``), the gear inversion of :func:`manip_control.control.invert_gear`
    with the law's acceleration ``qdd_r``, and the torque limit. The adaptation step is
    skipped on a tick whose command is saturated (the applied torque is not the law's).

    Parameters
    ----------
    params : ControllerParameters
        Gains, limits, nominal model and ``adaptation``; ``law`` must be computed torque.
    period : float
        Control period [s].
    model : ArmModel, optional
        The nominal model (default: the closed-form 2R of ``params.nominal``).
    regressor : BaseRegressor, optional
        Default: :func:`two_link_base_regressor` of ``params.nominal``.
    check_every : int
        Ticks between the law's consistency checks (:class:`AdaptiveLaw`).

    """

    def __init__(self, params: ControllerParameters, period: float,
                 model: ArmModel | None = None, regressor: BaseRegressor | None = None,
                 check_every: int = 1):
        if params.law != 'computed_torque':
            raise ParameterError('controller.law: the adaptive law replaces computed torque '
                                 f'(got {params.law!r})')
        self.params = params
        self.period = float(period)
        nm = params.nominal
        self.model = nominal_arm(nm) if model is None else model
        self.n = n = self.model.n
        if regressor is None:
            regressor = two_link_base_regressor(nm, params)
        self.law = AdaptiveLaw(self.model, regressor, params.kp, params.kd, period,
                               params.adaptation, check_every=check_every)
        if len(nm.friction) != n:
            raise ParameterError(f'controller.nominal.friction: must have {n} entries, one '
                                 f'per joint of the model (got {len(nm.friction)})')
        self._gear = gear_inversion_constants(nm)
        self.friction_compensation = bool(params.friction_compensation)
        # the controller's finish (friction feed-forward, gear inversion, limit) on arrays,
        # compiled; no integral (ki zero)
        self._finish = compiled_finish()
        stiffness = _vector('joint_stiffness', params.joint_stiffness, n, check=_nonnegative)
        clamp = _vector('joint_stiffness_limit', params.joint_stiffness_limit, n,
                        check=_positive)
        self._rows, self._rotor, self._stribeck = finish_constants(nm.friction, self._gear,
                                                                   [0.0] * n, stiffness, clamp)
        # the finish needs e = q - q_d only for the joint stiffness (no integral here)
        self._stiff = bool(np.any(stiffness))
        self._e = np.zeros(n)
        self._z = np.zeros(n)
        self._buffer = self.output()        # for callers without out=
        self.set_torque_limit(params.torque_limit)

    def output(self) -> ControlBuffer:
        """Return a new preallocated output for ``update(..., out=...)``."""
        return ControlBuffer(self.n)

    def reset(self) -> None:
        """Return the law to the nominal model."""
        self.law.reset()

    def set_torque_limit(self, limit) -> None:
        """Replace the torque limit per joint [N·m] (each > 0), from the next tick."""
        self.torque_limit = _vector('torque_limit', limit, self.n, check=_positive)
        self._rows[LIMIT_ROW] = self.torque_limit

    def update(self, q: Sequence[float], qd: Sequence[float], q_d: Sequence[float],
               qd_d: Sequence[float], qdd_d: Sequence[float],
               out: ControlBuffer | None = None, adapt: bool = True
               ) -> ControlOutput | ControlBuffer:
        """
        One tick (see :meth:`manip_control.control.Controller.update`).

        ``adapt`` false: the torque of the law without an adaptation step, for a tick whose
        state is not new (a real-time loop that got no state since its last tick: the error
        then holds the reference's advance since that state, not the arm's tracking error).
        """
        law = self.law
        tau = law.torque(q, qd, q_d, qd_d, qdd_d)
        if self._stiff:
            np.subtract(law.x[0], law.x[2], out=self._e)
        buf = self._buffer if out is None else out
        limited = self._finish(tau, law.x, self._e, law.qdd_r, self._z, self._rows, self._rotor,
                               self.period, True, self.friction_compensation, self._stribeck,
                               self._gear is not None, buf.tau, buf.saturated)
        law.adapt(hold=limited or not adapt)
        if out is None:
            return ControlOutput(tuple(buf.tau.tolist()), tuple(buf.saturated.tolist()))
        return out


class AdaptedModel(ArmModel):
    """
    The nominal model with the adaptive law's last checked estimate: what the safety layer uses.

    Every term is the nominal model's plus the identification regressor times ``dtheta =
    theta^ - theta0`` (the rigid-body columns; friction is not part of an :class:`ArmModel`)::

        g^(q)     = g0(q)     + Y(q, 0, 0) dtheta
        b^(q, qd) = b0(q, qd) + Y(q, qd, 0) dtheta
        M^(q) e_j = M0(q) e_j + [Y(q, 0, e_j) - Y(q, 0, 0)] dtheta
        C^(q, qd) e_j = C0(q, qd) e_j + [Y(q, qd + e_j, 0) - Y(q, qd - e_j, 0)] dtheta / 4

    (the last by polarization, as the law's two-velocity regressor). It reads the law's
    estimate at each call, so the safe hold and the hold after a lost reference use the model
    that was valid last; the estimate is checked (positive-definite ``M^``) before the law
    takes it. With the nominal estimate every call is the nominal model's. ``potential_energy``
    is the nominal model's (the regressor gives torques, not energies).

    Parameters
    ----------
    law : AdaptiveLaw
        The law whose estimate to use (read, never changed).

    """

    def __init__(self, law: 'AdaptiveLaw'):
        self.law = law
        self.nominal_model = model = law.model
        self.n = n = model.n
        self.joint_names = model.joint_names
        self.limits = model.limits
        self.gravity_field = model.gravity_field
        self._rigid = ~np.asarray(law.regressor.friction, bool)
        self._eye = np.eye(n)

    def workspace(self) -> 'AdaptedModel':
        """Return the same view (the law's model is used by the law's thread only)."""
        return self

    def delta(self) -> np.ndarray:
        """Return ``dtheta``: the checked estimate minus the nominal, friction columns zero."""
        law = self.law
        d = law.estimates - law.nominal
        d[~self._rigid] = 0.0
        return d

    def _rows(self, q, v, a, d) -> np.ndarray:
        return self.law.regressor.evaluate(q, v, a) @ d

    def mass_matrix(self, q) -> np.ndarray:
        """Return ``M^(q)`` [kg·m^2] (symmetric)."""
        q = self._vec('q', q)
        m = self.nominal_model.mass_matrix(q)
        d = self.delta()
        if not d.any():
            return m
        n = self.n
        qq = np.broadcast_to(q, (n + 1, n))
        aa = np.vstack([self._eye, np.zeros((1, n))])
        r = self._rows(qq, np.zeros((n + 1, n)), aa, d)
        dm = (r[:n] - r[n]).T                   # column j: [Y(q, 0, e_j) - Y(q, 0, 0)] d
        return m + 0.5 * (dm + dm.T)

    def coriolis_matrix(self, q, qd) -> np.ndarray:
        """Return ``C^(q, qd)`` [N·m·s/rad]."""
        q, qd = self._vec('q', q), self._vec('qd', qd)
        c = self.nominal_model.coriolis_matrix(q, qd)
        d = self.delta()
        if not d.any():
            return c
        n = self.n
        vv = np.vstack([qd + self._eye, qd - self._eye])
        r = self._rows(np.broadcast_to(q, (2 * n, n)), vv, np.zeros((2 * n, n)), d)
        return c + 0.25 * (r[:n] - r[n:]).T

    def gravity(self, q) -> np.ndarray:
        """Return ``g^(q)`` [N·m]."""
        q = self._vec('q', q)
        g = self.nominal_model.gravity(q)
        d = self.delta()
        if not d.any():
            return g
        z = np.zeros((1, self.n))
        return g + self._rows(q[None, :], z, z, d)[0]

    def bias(self, q, qd) -> np.ndarray:
        """Return ``b^(q, qd) = C^(q, qd) qd + g^(q)`` [N·m]."""
        q, qd = self._vec('q', q), self._vec('qd', qd)
        b = self.nominal_model.bias(q, qd)
        d = self.delta()
        if not d.any():
            return b
        return b + self._rows(q[None, :], qd[None, :], np.zeros((1, self.n)), d)[0]

    def inverse_dynamics(self, q, qd, qdd) -> np.ndarray:
        """Return ``M^ qdd + b^`` [N·m]."""
        return self.mass_matrix(q) @ self._vec('qdd', qdd) + self.bias(q, qd)

    def forward_dynamics(self, q, qd, tau) -> np.ndarray:
        """Return ``M^^-1 (tau - b^)`` [rad/s^2]."""
        return np.linalg.solve(self.mass_matrix(q), self._vec('tau', tau) - self.bias(q, qd))

    def potential_energy(self, q) -> float:
        """Return the nominal model's ``V(q)`` [J]."""
        return self.nominal_model.potential_energy(q)


def true_two_link_parameters(nominal: NominalModel) -> np.ndarray:
    """Return the base parameters (:data:`BASE_NAMES`) of a 2R model (e.g. the plant's truth)."""
    return base_parameters(nominal.arm, nominal.rotor_inertia, nominal.friction)
