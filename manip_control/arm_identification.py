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
Identification of the dynamic parameters of any serial arm described by a URDF.

The model. For an :class:`~manip_control.arm_model.UrdfArm` with ``n`` joints the joint
torque is linear in the dynamic parameters::

    tau = M(q) qdd + C(q, qd) qd + g(q) + Ia qdd + fv qd + fc tanh(qd / eps)
        = Y(q, qd, qdd) pi                                                     [N·m]

with, per body ``i`` (the body moved by joint ``i``, locked links and links on fixed joints
included), the ten standard parameters of Pinocchio's ``Inertia.toDynamicParameters``::

    pi_i = [m, m cx, m cy, m cz, Ixx, Ixy, Iyy, Ixz, Iyz, Izz]
                                       [kg, kg·m (x3), kg·m^2 (x6)]

(``c`` the centre of mass and ``I`` the inertia about the origin of joint ``i``'s frame, in
that frame), then per joint the armature ``Ia_j = Jm N^2`` [kg·m^2] (column ``qdd_j`` in row
``j``), the viscous coefficient ``fv_j`` [N·m·s/rad] (column ``qd_j``) and the Coulomb level
``fc_j`` [N·m] (column ``tanh(qd_j / eps_j)``, ``eps_j`` [rad/s] known). ``P = 10 n + 3 n``
columns; the inertial block is Pinocchio's ``computeJointTorqueRegressor``.

Base parameters. Not every column is independent: some parameters never act (the first
body's mass on a vertical axis), others act only in fixed combinations. The identifiable
combinations are found numerically: ``W``, the regressor stacked over ``S`` random states
(``q`` uniform inside the position limits, ``qd``, ``qdd`` standard normal; default ``S =
max(200, 4 P)``), its columns scaled to unit norm (so that the decision does not depend on
units), is factorised by QR with column pivoting, ``W E = Q [R1 R2]``. Its rank
``r`` is the number of diagonal entries with ``|R_kk| > tol |R_00|``, ``tol = 1e-4``: a
combination that moves the torque by less than 1e-4 of the unit-norm columns is not
identifiable from measured data. The decision must have a margin (no entry within a factor
10 of ``tol``). On the eight fixture arms the last kept entry is above 0.2; the first
dropped one is below 1e-14 except for three near-degeneracies of the URDF geometries
(xarm7 4.7e-6, kinova 8.9e-10, so100 1.1e-11), which are dropped. Columns whose norm is
below 1e-12 of the largest (zero up to round-off) are dropped first. The first ``r``
pivoted columns are the independent ones, and ``W_dep = W_ind K`` with ``K = R1^-1 R2``, so::

    tau = Y_ind(q, qd, qdd) beta,     beta = pi_ind + K pi_dep                  (base)

Estimation. Ordinary least squares on the stacked rows ``A beta = b`` (``m`` equations, ``r``
unknowns), then (from a recording, :func:`identify_arm`) weighted by joint: each joint's rows
divided by the RMS of its OLS residual, ``A = W Y``, ``b = W tau``. ``beta^ = argmin
||b - A beta||``, residual variance
``s^2 = ||b - A beta^||^2 / (m - r)`` and standard errors ``se_k = sqrt(s^2 [(A^T A)^-1]_kk)``
(the textbook formula for independent, equal-variance errors, ``lags=0``). Filtered,
decimated residuals are correlated over about ``1 / cutoff``: from a recording the standard
errors are Newey-West's, ``(A^T A)^-1 S (A^T A)^-1`` with ``S`` the Bartlett-weighted sum of
the lagged products of ``g_k = sum_j a_kj e_kj`` over ``L`` rows (:func:`least_squares`).
The condition number reported is
that of ``A`` with its columns scaled to unit norm (unit-free; the same measure as the 2R
identification of :mod:`manip_control.identification`).

From a recording: :func:`prepare_arm` filters like the 2R's "parallel filtering": with ``F``
a zero-phase Butterworth low-pass (``sosfiltfilt``) and ``D`` the central difference,
``q_f = F q``, ``qd_f = F qd`` (or ``D q_f``), ``qdd_f = D qd_f``, then
``F[Y_ind(q_f, qd_f, qdd_f)] beta = F[tau]``; the ends (``5 / fc``) are trimmed and the rows
decimated to about ``4 fc``.

Writing the model back (:func:`identified_parameters`, :func:`write_identified_urdf`): the
base parameters fix ``r`` combinations of the ``P`` parameters. The completion chosen keeps the
prior's non-identifiable part: ``pi = pi0 + B^+ (beta^ - B pi0)``, ``B = [I K] E^T`` (the
minimum-norm change of the prior's parameters, in units scaled per parameter kind, that
reproduces ``beta^`` exactly), then checked for physical consistency (mass > 0, inertia about
the centre of mass positive definite and obeying the triangle inequalities). The change of
body ``i`` is added to the ``<inertial>`` of the link joint ``i`` moves (its frame is the
joint frame); links merged into the body keep their prior inertials.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
import math
from pathlib import Path
import sys
from typing import Any, Sequence
import xml.etree.ElementTree as ET

from manip_control.adaptation import _compiled
from manip_control.adaptation import BaseRegressor
from manip_control.arm_model import ArmModel
from manip_control.arm_model import ArmModelError
from manip_control.arm_model import read_urdf_file
from manip_control.arm_model import UrdfArm
from manip_control.bag_io import BagError
from manip_control.bag_io import BagReader
from manip_control.bag_io import BagWriter
from manip_control.bag_io import JOINT_STATE
from manip_control.bag_io import make_qos
from manip_control.identification_data import IdentificationError
from manip_control.identification_data import Prepared
from manip_control.identification_data import read_joint_states
from manip_control.identification_data import resample_uniform
from manip_control.model_analysis import urdf_friction
from manip_control.trajectories import SumOfSinusoids
import numpy as np
from rosbags.typesys import get_typestore
from rosbags.typesys import Stores
import yaml

#: Names of Pinocchio's ten standard parameters of one body, in order.
BODY_PARAMETERS = ('m', 'mx', 'my', 'mz', 'Ixx', 'Ixy', 'Iyy', 'Ixz', 'Iyz', 'Izz')
BODY_UNITS = ('kg', 'kg m', 'kg m', 'kg m') + ('kg m^2',) * 6
#: Per-joint parameters after the bodies: armature, viscous and Coulomb friction.
JOINT_PARAMETERS = ('Ia', 'fv', 'fc')
JOINT_UNITS = ('kg m^2', 'N m s/rad', 'N m')
#: Relative rank tolerance on the pivoted QR diagonal of the stacked regressor.
DEFAULT_RANK_TOL = 1e-4
DEFAULT_EPS = 0.01
DEFAULT_CUTOFF_HZ = 5.0


class ArmIdentificationError(ValueError):
    """The data or the model cannot give a trustworthy estimate; one line says why."""


# ------------------------------------------------------------------------------------------
# regressor


class ArmRegressor:
    """
    The full regressor ``Y(q, qd, qdd)`` of a URDF arm (module docstring), ``P = 13 n`` columns.

    Parameters
    ----------
    arm : UrdfArm
        The arm (joint order, gravity, bodies); its own Pinocchio ``Data`` is used.
    eps : float or sequence of n float
        Coulomb smoothing velocity per joint [rad/s], > 0.

    Attributes
    ----------
    names, units : tuple of str
        ``'<joint>.<param>'`` per column and its unit.

    """

    def __init__(self, arm: UrdfArm, eps: Any = DEFAULT_EPS):
        if not isinstance(arm, UrdfArm):
            raise ArmIdentificationError('identification needs a URDF arm (UrdfArm)')
        self.arm = arm
        self.n = arm.n
        eps = np.broadcast_to(np.asarray(eps, dtype=float), (arm.n,)).copy() \
            if np.ndim(eps) == 0 else np.asarray(eps, dtype=float)
        if eps.shape != (arm.n,) or not np.all(eps > 0.0) or not np.all(np.isfinite(eps)):
            raise ArmIdentificationError(f'eps: expected {arm.n} values > 0 [rad/s], got '
                                         f'{np.asarray(eps).tolist()}')
        self.eps = eps
        import pinocchio as pin
        self._pin = pin
        self._model = arm.pin_model
        self._data = arm.pin_model.createData()
        joints = arm.joint_names
        self.names = tuple(f'{j}.{p}' for j in joints for p in BODY_PARAMETERS) + \
            tuple(f'{j}.{p}' for p in JOINT_PARAMETERS for j in joints)
        self.units = BODY_UNITS * self.n + tuple(u for u in JOINT_UNITS for _ in joints)
        self.size = len(self.names)

    def __call__(self, q, qd, qdd, columns: np.ndarray | None = None) -> np.ndarray:
        """
        Full regressor for samples ``q, qd, qdd`` of shape (N, n): shape (N, n, P).

        ``Y[k] @ pi`` is the joint torque [N·m] of sample ``k``. With ``columns`` (indices
        into the P columns) only those, shape (N, n, len(columns)), without building the rest.
        """
        q, qd, qdd = (np.atleast_2d(np.asarray(x, dtype=float)) for x in (q, qd, qdd))
        n = self.n
        if q.shape[1] != n or qd.shape != q.shape or qdd.shape != q.shape:
            raise ArmIdentificationError(f'regressor: expected arrays of shape (N, {n}), got '
                                         f'{q.shape}, {qd.shape}, {qdd.shape}')
        rows = q.shape[0]
        cols = np.arange(self.size) if columns is None else np.asarray(columns, dtype=int)
        out = np.zeros((rows, n, cols.size))
        inertial = np.flatnonzero(cols < 10 * n)
        reg, model, data = self._pin.computeJointTorqueRegressor, self._model, self._data
        if inertial.size == 10 * n and np.array_equal(cols[:10 * n], np.arange(10 * n)):
            for k in range(rows):
                out[k, :, :10 * n] = reg(model, data, q[k], qd[k], qdd[k])
        elif inertial.size:
            src = cols[inertial]
            for k in range(rows):
                out[k, :, inertial] = reg(model, data, q[k], qd[k], qdd[k])[:, src].T
        signals = (qdd, qd, np.tanh(qd / self.eps))
        for pos, col in enumerate(cols):
            if col >= 10 * n:
                kind, j = divmod(int(col) - 10 * n, n)
                out[:, j, pos] = signals[kind][:, j]
        return out

    def parameters(self, arm: UrdfArm | None = None, fv: Any = 0.0, fc: Any = 0.0,
                   armature: Any = None) -> np.ndarray:
        """
        Full parameter vector ``pi`` (shape (P,)) of ``arm`` (default: the regressor's arm).

        Parameters
        ----------
        arm : UrdfArm, optional
            Source of the bodies and (unless ``armature`` is given) the armature; it must
            have the same joints.
        fv, fc : float or sequence of n float
            Viscous [N·m·s/rad] and Coulomb [N·m] friction per joint.
        armature : float or sequence of n float, optional
            Overrides the arm's armature [kg·m^2].

        """
        arm = self.arm if arm is None else arm
        if arm.joint_names != self.arm.joint_names:
            raise ArmIdentificationError(f'parameters: the arm has joints {arm.joint_names}, '
                                         f'the regressor {self.arm.joint_names}')
        model = arm.pin_model
        body = np.concatenate([np.asarray(model.inertias[i].toDynamicParameters(), float)
                               for i in range(1, self.n + 1)])
        ia = arm.armature if armature is None else armature
        extra = [np.broadcast_to(np.asarray(v, dtype=float), (self.n,))
                 for v in (ia, fv, fc)]
        return np.concatenate([body, *extra])

    def torque(self, pi: np.ndarray, q, qd, qdd) -> np.ndarray:
        """Return the joint torque ``Y pi`` [N·m], shape (N, n)."""
        return self(q, qd, qdd) @ np.asarray(pi, dtype=float)


# ------------------------------------------------------------------------------------------
# base parameters


@dataclass(frozen=True)
class BaseParameters:
    """
    The identifiable combinations ``beta = pi_ind + K pi_dep`` (module docstring).

    Attributes
    ----------
    regressor : ArmRegressor
        The full regressor.
    independent : ndarray of int, shape (r,)
        Columns of the full regressor that form the base regressor.
    dependent : ndarray of int, shape (P - r,)
        The other columns.
    k : ndarray, shape (r, P - r)
        ``W_dep = W_ind K`` (so ``beta = pi_ind + K pi_dep``).
    tolerance : float
        Relative rank tolerance used.
    gap : tuple of float
        ``(|R_(r-1)(r-1)| / |R_00|, |R_rr| / |R_00|)``: the last kept and the first dropped
        relative diagonal entry (the margin of the rank decision).

    """

    regressor: ArmRegressor
    independent: np.ndarray
    dependent: np.ndarray
    k: np.ndarray
    tolerance: float
    gap: tuple

    @property
    def rank(self) -> int:
        """Return the number of base parameters ``r``."""
        return int(self.independent.size)

    @property
    def names(self) -> tuple:
        """Return each base parameter's name: the independent column it is attached to."""
        return tuple(self.regressor.names[i] for i in self.independent)

    @property
    def units(self) -> tuple:
        """Return each base parameter's unit (that of its independent column)."""
        return tuple(self.regressor.units[i] for i in self.independent)

    @property
    def mapping(self) -> np.ndarray:
        """``B`` (shape (r, P)) with ``beta = B pi``."""
        b = np.zeros((self.rank, self.regressor.size))
        b[np.arange(self.rank), self.independent] = 1.0
        b[:, self.dependent] = self.k
        return b

    def of(self, pi: np.ndarray) -> np.ndarray:
        """Return the base parameters ``beta = pi_ind + K pi_dep`` of a full vector ``pi``."""
        pi = np.asarray(pi, dtype=float)
        return pi[self.independent] + self.k @ pi[self.dependent]

    def describe(self, index: int, threshold: float = 1e-9) -> str:
        """``'joint1.Izz + 1*joint2.Iyy - 0.333*...'``: the combination ``beta_index`` is."""
        terms = [self.regressor.names[self.independent[index]]]
        for c, j in zip(self.k[index], self.dependent):
            if abs(c) > threshold:
                terms.append(f'{c:+.6g}*{self.regressor.names[j]}')
        return ' '.join(terms)

    def regressor_of(self, q, qd, qdd) -> np.ndarray:
        """Return the base regressor ``Y_ind`` for samples of shape (N, n): shape (N, n, r)."""
        return self.regressor(q, qd, qdd, self.independent)


def random_states(arm: ArmModel, count: int, seed: int = 0):
    """
    Draw ``count`` random states ``(q, qd, qdd)``, each of shape (count, n).

    ``q`` uniform in the position limits (``+-pi`` where there are none), ``qd`` and ``qdd``
    standard normal [rad/s, rad/s^2].
    """
    rng = np.random.default_rng(seed)
    lo = np.where(np.isfinite(arm.limits.lower), arm.limits.lower, -math.pi)
    hi = np.where(np.isfinite(arm.limits.upper), arm.limits.upper, math.pi)
    q = rng.uniform(lo, hi, size=(count, arm.n))
    return q, rng.standard_normal((count, arm.n)), rng.standard_normal((count, arm.n))


def base_parameters(regressor: ArmRegressor, samples: int | None = None, seed: int = 0,
                    tol: float = DEFAULT_RANK_TOL) -> BaseParameters:
    """
    Find the base parameters by QR with column pivoting of the stacked regressor.

    Parameters
    ----------
    regressor : ArmRegressor
        The full regressor.
    samples : int, optional
        Random states stacked (default ``max(200, 4 P)``).
    seed : int
        Seed of the random states.
    tol : float
        Relative tolerance on ``|R_kk| / |R_00|`` (default 1e-4).

    Raises
    ------
    ArmIdentificationError
        The rank decision has no margin (an entry within a factor 10 of ``tol``).

    """
    from scipy.linalg import qr
    from scipy.linalg import solve_triangular
    p = regressor.size
    samples = max(200, 4 * p) if samples is None else int(samples)
    q, qd, qdd = random_states(regressor.arm, samples, seed)
    w = regressor(q, qd, qdd).reshape(-1, p)
    scale = np.linalg.norm(w, axis=0)
    # a column that never acts (zero up to round-off) is dependent with K = 0
    idle = scale <= 1e-12 * scale.max()
    w[:, idle] = 0.0
    scale[idle] = 1.0
    _, r_mat, perm = qr(w / scale, mode='economic', pivoting=True)
    diag = np.abs(np.diag(r_mat))
    rel = diag / diag[0]
    rank = int(np.sum(rel > tol))
    near = rel[(rel > tol * 1e-1) & (rel < tol * 1e1)]
    if near.size:
        raise ArmIdentificationError(f'base parameters: the rank decision is ambiguous '
                                     f'(relative QR diagonal {near[0]:.3g} near the tolerance '
                                     f'{tol:g})')
    ind, dep = np.sort(perm[:rank]), perm[rank:]
    # K from the pivoted triangle, then re-ordered to the sorted independent columns
    k = solve_triangular(r_mat[:rank, :rank], r_mat[:rank, rank:])
    k = k / scale[perm[:rank], None] * scale[perm[rank:]]     # back to unscaled columns
    order = np.argsort(perm[:rank])
    k = k[order]
    k[np.abs(k) < 1e-12 * max(1.0, float(np.max(np.abs(k), initial=0.0)))] = 0.0
    gap = (float(rel[rank - 1]), float(rel[rank]) if rank < p else 0.0)
    return BaseParameters(regressor, ind, np.asarray(dep), k, float(tol), gap)


# ------------------------------------------------------------------------------------------
# least squares


@dataclass
class ArmFit:
    """An ordinary least-squares fit ``tau = Y_ind beta`` (module docstring)."""

    names: tuple
    units: tuple
    estimate: np.ndarray
    """``beta^``, shape (r,)."""
    std_error: np.ndarray
    """Square root of the diagonal of :attr:`covariance`, shape (r,)."""
    covariance: np.ndarray
    """``s^2 (A^T A)^-1``, or Newey-West's with ``lags`` > 0 (:func:`least_squares`)."""
    condition_number: float
    """Of ``A`` with unit-norm columns."""
    residual_rms: np.ndarray
    """Per-joint RMS of ``tau - Y beta^`` [N·m], shape (n,)."""
    relative_residual: np.ndarray
    """Per-joint ``||tau - Y beta^|| / ||tau||``."""
    sigma: float
    """``s``: the residual standard deviation [N·m]."""
    equations: int
    """``m``: stacked equations (samples times joints)."""
    filter_sensitivity: np.ndarray | None = None
    """``|beta^(fc) - beta^(fc / 1.5)|``, shape (r,), when :func:`identify_arm` estimated
    the processing error (then it is part of :attr:`covariance` and :attr:`std_error`)."""

    def table(self, truth: np.ndarray | None = None) -> str:
        """Aligned text: name, estimate, standard error, relative error (and truth if given)."""
        head = f'{"parameter":<22} {"estimate":>13} {"std error":>11} {"rel":>9}'
        if truth is not None:
            head += f' {"true":>13}'
        lines = [head + '  unit']
        for k, (n, u, v, s) in enumerate(zip(self.names, self.units, self.estimate,
                                             self.std_error)):
            rel = f'{100 * s / abs(v):8.3g}%' if v != 0 else '      n/a'
            line = f'{n:<22} {v:13.6g} {s:11.3g} {rel:>9}'
            if truth is not None:
                line += f' {truth[k]:13.6g}'
            lines.append(line + f'  {u}')
        return '\n'.join(lines)


def least_squares(y: np.ndarray, tau: np.ndarray, names: Sequence[str],
                  units: Sequence[str], weights: np.ndarray | None = None,
                  lags: int = 0) -> ArmFit:
    """
    Least squares of ``tau = y beta`` with standard errors and condition number.

    Ordinary least squares, or with ``weights`` ``w_j`` per joint the weighted problem whose
    rows of joint ``j`` are multiplied by ``w_j`` (then ``s^2``, the standard errors and the
    condition number are those of the weighted rows ``A = W Y``, ``b = W tau``).

    Parameters
    ----------
    y : ndarray, shape (N, n, r)
        Base regressor rows.
    tau : ndarray, shape (N, n)
        Joint torques [N·m].
    names, units : sequence of r str
        Name and unit of each base parameter.
    weights : ndarray, shape (n,), optional
        Row weight per joint (e.g. ``1 / sigma_j``), > 0.
    lags : int
        0: the classical covariance ``s^2 (A^T A)^-1`` (independent, equal-variance
        errors). ``L > 0``: the Newey-West (HAC) covariance for residuals correlated in time
        and across joints, ``(A^T A)^-1 S (A^T A)^-1`` with ``g_k = sum_j a_kj e_kj`` per
        sample and ``S = sum_{|l| <= L} (1 - |l| / (L + 1)) sum_k g_k g_(k-l)^T``.

    Raises
    ------
    ArmIdentificationError
        Fewer equations than unknowns, a column that is zero (a parameter not excited at
        all), or a rank-deficient regressor.

    """
    y = np.asarray(y, dtype=float)
    tau = np.asarray(tau, dtype=float)
    rows, n, r = y.shape
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=float)
    if w.shape != (n,) or not np.all(w > 0.0) or not np.all(np.isfinite(w)):
        raise ArmIdentificationError(f'weights: expected {n} finite values > 0')
    a = (y * w[None, :, None]).reshape(rows * n, r)
    b = (tau * w).reshape(rows * n)
    if a.shape[0] <= r:
        raise ArmIdentificationError(f'too few samples: {rows} samples x {n} joints = '
                                     f'{a.shape[0]} equations for {r} base parameters')
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise ArmIdentificationError('the data contain non-finite values')
    norms = np.linalg.norm(a, axis=0)
    dead = [names[k] for k in range(r) if not norms[k] > 0.0]
    if dead:
        raise ArmIdentificationError(f'the data do not excite {", ".join(dead[:3])}'
                                     f'{" ..." if len(dead) > 3 else ""} at all (regressor '
                                     'column is zero)')
    scaled = a / norms
    q_mat, r_mat = np.linalg.qr(scaled)          # then the SVD of the small triangle
    u, sv, vt = np.linalg.svd(r_mat)
    cond = float(sv[0] / sv[-1]) if sv[-1] > 0.0 else math.inf
    if not cond < 1e12:
        worst = np.argsort(-np.abs(vt[-1]))[:3]
        raise ArmIdentificationError(
            'the data are rank-deficient (scaled regressor condition number '
            f'{cond:.3g}); undetermined combination of {", ".join(names[i] for i in worst)}: '
            'record an excitation run that moves every joint')
    # solve in the scaled coordinates (better conditioned), then unscale
    z = vt.T @ ((u.T @ (q_mat.T @ b)) / sv)
    beta = z / norms
    res = b - a @ beta
    dof = a.shape[0] - r
    s2 = float(res @ res) / dof
    inv_scaled = (vt.T / sv ** 2) @ vt
    if lags > 0:
        g = (scaled * res[:, None]).reshape(rows, n, r).sum(axis=1)      # (rows, r)
        meat = g.T @ g
        for lag in range(1, int(lags) + 1):
            cross = g[lag:].T @ g[:-lag]
            meat += (1.0 - lag / (lags + 1.0)) * (cross + cross.T)
        cov = inv_scaled @ meat @ inv_scaled / np.outer(norms, norms)
    else:
        cov = s2 * inv_scaled / np.outer(norms, norms)
    res_j = res.reshape(rows, n) / w                 # unweighted residual [N m]
    rms = np.sqrt(np.mean(res_j ** 2, axis=0))
    rel = np.linalg.norm(res_j, axis=0) / np.maximum(np.linalg.norm(tau, axis=0), 1e-300)
    return ArmFit(tuple(names), tuple(units), beta, np.sqrt(np.diag(cov)), cov, cond, rms,
                  rel, math.sqrt(s2), int(a.shape[0]))


# ------------------------------------------------------------------------------------------
# from a recording


def prepare_arm(base: BaseParameters, t, q, qd, tau, *, cutoff_hz: float = DEFAULT_CUTOFF_HZ,
                order: int = 4, trim_s: float | None = None, velocity: str = 'measured',
                torque_offset: float = 0.0) -> Prepared:
    """
    Filter the base regressor and the torque alike ("parallel filtering", module docstring).

    Parameters
    ----------
    base : BaseParameters
        The base parameters (and through them the arm and the Coulomb ``eps``).
    t : array_like, shape (N,)
        Sample times [s] (uniform; jitter above 1 % of the period is interpolated away).
    q, qd, tau : array_like, shape (N, n)
        Measured position [rad], velocity [rad/s] (None with ``velocity='position'``) and
        applied joint torque [N·m], in the arm's joint order.
    cutoff_hz : float
        Butterworth cutoff [Hz] (about 5-10x the excitation's highest frequency).
    order : int
        Butterworth order (doubled by the forward-backward pass).
    trim_s : float, optional
        Time dropped at each end [s] (default ``5 / cutoff_hz``).
    velocity : str
        ``'measured'`` or ``'position'`` (differentiate the filtered position).
    torque_offset : float
        Time [s] at which the effort stamped ``t_k`` acts, relative to ``t_k``: 0 for an
        instantaneous torque (a torque sensor, the motor plant's actual torque), ``-T/2`` for
        a command held over the period before the stamp (this package's ideal-actuator
        ``/joint_states``: effort ``u_(k-1)``), ``+T/2`` for one held over the period after
        it. The efforts are interpolated linearly onto ``t_k - torque_offset``'s grid:
        ``tau(t_k) = interp(t_k, t + torque_offset, effort)``. A half-period misalignment
        biases the estimate by the phase lag it causes (about 1 % on the Panda study).

    Raises
    ------
    ArmIdentificationError
        Shapes, non-finite values, too few samples, cutoff above Nyquist, zero torque.

    """
    from scipy.signal import butter
    from scipy.signal import sosfiltfilt
    n = base.regressor.n
    if velocity not in ('measured', 'position'):
        raise ArmIdentificationError(f"velocity: 'measured' or 'position' (got {velocity!r})")
    t = np.asarray(t, dtype=float).ravel()
    if qd is None:
        if velocity == 'measured':
            raise ArmIdentificationError('the data have no velocity; use velocity=position')
        qd = np.zeros((t.size, n))
    arrays = [np.asarray(x, dtype=float) for x in (q, qd, tau)]
    for name, a in zip(('q', 'qd', 'tau'), arrays):
        if a.shape != (t.size, n):
            raise ArmIdentificationError(f'{name}: expected shape ({t.size}, {n}), got '
                                         f'{a.shape}')
        if not np.all(np.isfinite(a)):
            raise ArmIdentificationError(f'{name}: contains non-finite values')
    if t.size < 50:
        raise ArmIdentificationError(f'too few samples ({t.size}); record an excitation run '
                                     'of tens of seconds at the control rate')
    for j in range(n):
        if not np.any(arrays[2][:, j]):
            raise ArmIdentificationError(f'the effort of {base.regressor.arm.joint_names[j]} '
                                         'is zero throughout: no applied torque recorded')
    t, arrays, h = resample_uniform(t, arrays, ArmIdentificationError)
    fs = 1.0 / h
    if not 0.0 < cutoff_hz < 0.5 * fs:
        raise ArmIdentificationError(f'cutoff {cutoff_hz:g} Hz must be in (0, {0.5 * fs:g}) '
                                     f'Hz (Nyquist of the {fs:g} Hz samples)')
    trim_s = 5.0 / cutoff_hz if trim_s is None else float(trim_s)
    trim = int(math.ceil(trim_s * fs))
    step = max(1, int(fs // (4.0 * cutoff_hz)))
    sl = slice(trim, t.size - trim, step)
    if t[sl].size * n <= base.rank:
        raise ArmIdentificationError(
            f'run too short ({t[-1] - t[0]:.3g} s): {t[sl].size} samples after trimming '
            f'{trim_s:g} s at each end, {t[sl].size * n} equations for {base.rank} base '
            'parameters')
    q, qd, tau = arrays
    if not math.isfinite(torque_offset) or abs(torque_offset) > 10.0 * h:
        raise ArmIdentificationError(f'torque offset {torque_offset:g} s: must be within 10 '
                                     f'sample periods ({10.0 * h:g} s)')
    if torque_offset != 0.0:
        tau = np.column_stack([np.interp(t, t + torque_offset, tau[:, j]) for j in range(n)])
    sos = butter(order, cutoff_hz, fs=fs, output='sos')
    q_f = sosfiltfilt(sos, q, axis=0)
    qd_f = np.gradient(q_f, h, axis=0) if velocity == 'position' else \
        sosfiltfilt(sos, qd, axis=0)
    qdd_f = np.gradient(qd_f, h, axis=0)
    y_raw = base.regressor_of(q_f, qd_f, qdd_f).reshape(t.size, -1)
    keep = np.arange(t.size)[sl]
    y = np.empty((keep.size, y_raw.shape[1]))
    for c in range(0, y_raw.shape[1], 32):          # in column blocks: bounded extra memory
        y[:, c:c + 32] = sosfiltfilt(sos, y_raw[:, c:c + 32], axis=0)[keep]
    del y_raw
    tau_f = sosfiltfilt(sos, tau, axis=0)
    return Prepared(t[sl], y.reshape(keep.size, n, base.rank), tau_f[sl], q_f[sl],
                    qd_f[sl], qdd_f[sl], fs, float(cutoff_hz))


@dataclass
class ArmIdentification:
    """The result of :func:`identify_arm`."""

    base: BaseParameters
    fit: ArmFit
    prepared: Prepared

    @property
    def beta(self) -> np.ndarray:
        """Return the estimated base parameters."""
        return self.fit.estimate


def identify_arm(base: BaseParameters, t, q, qd, tau, *, cutoff_hz: float = DEFAULT_CUTOFF_HZ,
                 max_condition: float = math.inf, trim_s: float | None = None,
                 velocity: str = 'measured', torque_offset: float = 0.0,
                 weighted: bool = True, lags: int | None = None,
                 filter_sensitivity: bool = True) -> ArmIdentification:
    """
    Estimate the base parameters from a recorded run (:func:`prepare_arm` + least squares).

    Ordinary least squares; with ``weighted`` (default) a second pass weights each joint's
    rows by ``1 / sigma_j``, ``sigma_j`` the RMS of that joint's OLS residual, so that the
    joints with large torques do not drown the small ones (as the 2R identification does).
    The standard errors are those of the weighted problem, by default with the Newey-West
    covariance over ``lags`` rows (default: the rows per ``1 / cutoff_hz``, 4 with the
    default decimation): the filtered residuals are band-limited to the cutoff, so
    neighbouring rows are correlated and the classical formula is not honest (on the Panda
    study, 20 noise draws: 91 % of the estimates within 2 classical standard errors of the
    truth, 95 % within 2 of these; ``lags=0`` gives the classical ones).

    Both describe the noise only. What remains on noise-free data is a deterministic
    processing error (the filter, the differences and the held torque around the fast
    friction reversals at zero velocity), mostly in the span of the regressor, hence
    invisible in the residual and not shrinking with the run's length: on a 120 s noise-free
    Panda run the Newey-West errors alone held 29 % of the truths within 2 of them (median
    ``|z|`` 3.5). With ``filter_sensitivity`` (default) the processing error is estimated
    as the change of the estimate when the same data are identified with the cutoff divided
    by 1.5, ``dbeta = beta^(fc) - beta^(fc / 1.5)``, and added as a systematic term:
    ``cov = cov_NW + dbeta dbeta^T`` (docs/identification.md, "Estimator").

    Raises
    ------
    ArmIdentificationError
        Bad or too little data; the scaled regressor's condition number above
        ``max_condition`` (not exciting enough).

    """
    prep = prepare_arm(base, t, q, qd, tau, cutoff_hz=cutoff_hz, trim_s=trim_s,
                       velocity=velocity, torque_offset=torque_offset)
    if lags is None:
        row_rate = 1.0 / float(np.median(np.diff(prep.t))) if prep.t.size > 1 else 0.0
        lags = max(1, int(round(row_rate / cutoff_hz)))
    fit = least_squares(prep.y, prep.tau, base.names, base.units, lags=lags)
    if weighted:
        sigma = fit.residual_rms
        sigma = np.where(sigma > 0.0, sigma, max(float(np.max(sigma)), 1e-300))
        fit = least_squares(prep.y, prep.tau, base.names, base.units, weights=1.0 / sigma,
                            lags=lags)
    if not fit.condition_number <= max_condition:
        raise ArmIdentificationError(
            f'the data do not excite the parameters: scaled regressor condition number '
            f'{fit.condition_number:.4g} > {max_condition:g}; record an excitation run '
            '(arm_identification.excitation_trajectory)')
    if filter_sensitivity:
        # the same identification with a lower cutoff: its change measures the processing
        # error that the residual cannot show (module docstring, identify_arm)
        try:
            other = identify_arm(base, t, q, qd, tau, cutoff_hz=cutoff_hz / 1.5,
                                 trim_s=trim_s, velocity=velocity,
                                 torque_offset=torque_offset, weighted=weighted,
                                 filter_sensitivity=False).fit
        except ArmIdentificationError:
            other = None            # (too short for the wider trim): noise part only
        if other is not None:
            delta = fit.estimate - other.estimate
            cov = fit.covariance + np.outer(delta, delta)
            fit = dataclasses.replace(fit, covariance=cov, std_error=np.sqrt(np.diag(cov)),
                                      filter_sensitivity=np.abs(delta))
    return ArmIdentification(base, fit, prep)


# ------------------------------------------------------------------------------------------
# excitation


@dataclass
class Excitation:
    """An excitation trajectory and what it gives (:func:`excitation_trajectory`)."""

    trajectory: Any
    """:class:`~manip_control.trajectories.SumOfSinusoids` with ``n`` joints."""
    period: float
    """Period of the series [s]."""
    condition_number: float
    """Scaled condition number of the base regressor sampled over one period."""
    samples: int
    """Samples of one period used for :attr:`condition_number`."""
    bounds: Any
    """The trajectory's guaranteed bounds (``TrajectoryBounds``)."""
    peak_torque: np.ndarray
    """Largest ``|tau|`` of the prior model along the samples [N·m], shape (n,)."""
    candidates: int
    """Random candidates drawn; the one with the smallest condition number is kept."""

    def to_config(self) -> dict:
        """
        Return the trajectory as a scenario ``trajectory:`` mapping (plain data for YAML).

        ``{'type': 'sum_of_sinusoids', 'amplitudes', 'omegas', 'phases', 'offset'}``, read
        back by :func:`manip_control.trajectories.trajectory_from_config`.
        """
        traj = self.trajectory
        return {'type': 'sum_of_sinusoids',
                'amplitudes': [[float(v) for v in a] for a in traj.amplitudes],
                'omegas': [[float(v) for v in w] for w in traj.omegas],
                'phases': [[float(v) for v in p] for p in traj.phases],
                'offset': [float(v) for v in traj.offset]}


def excitation_trajectory(base: BaseParameters, *, period: float = 10.0, harmonics: int = 5,
                          position_margin: float = 0.1, velocity_fraction: float = 0.5,
                          acceleration_limit: Any = None, candidates: int = 20,
                          samples: int = 500, seed: int = 0) -> Excitation:
    """
    Finite Fourier series per joint inside the joint limits, best of random candidates.

    Per joint ``j``, with ``w = 2 pi / period`` and harmonics ``l = 1..L``::

        q_j(t) = c_j + sum_l (a_jl / (w l)) sin(w l t) - (b_jl / (w l)) cos(w l t)
        qd_j(t) = sum_l a_jl cos(w l t) + b_jl sin(w l t)

    (Swevers et al., IEEE Trans. Robot. Autom. 13(5), 1997), a
    :class:`~manip_control.trajectories.SumOfSinusoids` with amplitudes
    ``A_jl = sqrt(a^2 + b^2) / (w l)`` [rad]. The coefficients are drawn standard normal
    (divided by ``l``), then projected onto ``sum_l a_jl = 0`` and ``sum_l l b_jl = 0`` so
    that the motion starts at rest (``qd(0) = qdd(0) = 0``), then scaled per joint until its
    guaranteed bounds (``sum_l A_jl w^k l^k``, the supremum over all t) fit:
    ``|q - c| <= (1 - 2 m) (upper - lower) / 2`` about the middle ``c`` of the limits
    (``m = position_margin``; +-pi where there is no limit),
    ``|qd| <= velocity_fraction * velocity limit`` and ``|qdd| <= acceleration_limit``.
    Of ``candidates`` draws, the one whose base regressor (``samples`` points of one period)
    has the smallest scaled condition number is kept.

    Parameters
    ----------
    base : BaseParameters
        Base parameters of the arm (its limits, its regressor).
    period : float
        Period [s] (fundamental ``1 / period`` Hz).
    harmonics : int
        ``L``, >= 2.
    position_margin : float
        Fraction of each joint's range kept free at each end, in [0, 0.5).
    velocity_fraction : float
        Fraction of the URDF velocity limit, in (0, 1] (the limit must be finite).
    acceleration_limit : float or sequence of n float, optional
        [rad/s^2]; default none.
    candidates, samples, seed : int
        Random draws, samples per period for the condition number, random seed.

    Raises
    ------
    ArmIdentificationError
        Bad arguments or a joint without a velocity limit.

    """
    arm = base.regressor.arm
    n = arm.n
    if not (period > 0.0 and math.isfinite(period)):
        raise ArmIdentificationError(f'period: must be > 0 s (got {period})')
    if int(harmonics) != harmonics or harmonics < 2:
        raise ArmIdentificationError(f'harmonics: must be an integer >= 2 (got {harmonics})')
    if not 0.0 <= position_margin < 0.5:
        raise ArmIdentificationError(f'position_margin: must be in [0, 0.5) (got '
                                     f'{position_margin})')
    if not 0.0 < velocity_fraction <= 1.0:
        raise ArmIdentificationError(f'velocity_fraction: must be in (0, 1] (got '
                                     f'{velocity_fraction})')
    vmax = np.asarray(arm.limits.velocity, dtype=float) * velocity_fraction
    if not np.all(np.isfinite(vmax)):
        j = int(np.flatnonzero(~np.isfinite(vmax))[0])
        raise ArmIdentificationError(f'{arm.joint_names[j]} has no velocity limit in the URDF; '
                                     'give one (limits=...) before generating an excitation')
    amax = np.full(n, math.inf) if acceleration_limit is None else \
        np.broadcast_to(np.asarray(acceleration_limit, dtype=float), (n,))
    if not np.all(amax > 0.0):
        raise ArmIdentificationError('acceleration_limit: must be > 0 rad/s^2')
    lo = np.where(np.isfinite(arm.limits.lower), arm.limits.lower, -math.pi)
    hi = np.where(np.isfinite(arm.limits.upper), arm.limits.upper, math.pi)
    centre = 0.5 * (lo + hi)
    room = (1.0 - 2.0 * position_margin) * 0.5 * (hi - lo)
    w = 2.0 * math.pi / period
    ell = np.arange(1, int(harmonics) + 1, dtype=float)
    rng = np.random.default_rng(seed)
    t = np.arange(int(samples)) * (period / int(samples))
    best = None
    for _ in range(max(1, int(candidates))):
        a = rng.standard_normal((n, ell.size)) / ell
        b = rng.standard_normal((n, ell.size)) / ell
        a -= a.mean(axis=1, keepdims=True)                       # qd(0) = sum a = 0
        b -= np.outer(b @ ell, ell) / float(ell @ ell)           # qdd(0) ~ sum l b = 0
        mag = np.hypot(a, b)                                     # |qd| amplitude per term
        sup_q = (mag / (w * ell)).sum(axis=1)
        sup_v = mag.sum(axis=1)
        sup_a = (mag * w * ell).sum(axis=1)
        scale = np.minimum(np.minimum(room / sup_q, vmax / sup_v), amax / sup_a)
        a, b = a * scale[:, None], b * scale[:, None]
        amp = np.hypot(a, b) / (w * ell)
        phase = np.arctan2(-b, a)
        traj = SumOfSinusoids(amp.tolist(), [list(w * ell)] * n, phase.tolist(),
                              centre.tolist(), n_joints=n, path='excitation')
        q, qd, qdd = traj.sample_many(t)
        y = base.regressor_of(q, qd, qdd).reshape(-1, base.rank)
        norms = np.linalg.norm(y, axis=0)
        if np.any(norms == 0.0):
            continue
        sv = np.linalg.svd(np.linalg.qr(y / norms, mode='r'), compute_uv=False)
        cond = float(sv[0] / sv[-1]) if sv[-1] > 0.0 else math.inf
        if best is None or cond < best[0]:
            best = (cond, traj, q, qd, qdd)
    if best is None:
        raise ArmIdentificationError('excitation: no candidate excites every base parameter')
    cond, traj, q, qd, qdd = best
    tau = np.array([arm.inverse_dynamics(q[k], qd[k], qdd[k]) for k in range(len(t))])
    return Excitation(traj, float(period), cond, int(samples), traj.bounds(),
                      np.max(np.abs(tau), axis=0), max(1, int(candidates)))


# ------------------------------------------------------------------------------------------
# the identified model: completion, consistency, URDF


def _parameter_scale(regressor: ArmRegressor, prior: np.ndarray) -> np.ndarray:
    """Per-parameter scale of the completion: ``|prior|`` with a floor per kind of unit."""
    floor = {'kg': 1e-2, 'kg m': 1e-3, 'kg m^2': 1e-4, 'N m s/rad': 1e-2, 'N m': 1e-2}
    return np.maximum(np.abs(prior), [floor[u] for u in regressor.units])


def pseudo_inertia(pi_body: np.ndarray) -> np.ndarray:
    """
    Return the 4x4 pseudo-inertia ``J = [[1/2 tr(I_o) 1 - I_o, h], [h^T, m]]`` of one body.

    ``h = m c`` [kg·m], ``I_o`` the inertia about the frame origin [kg·m^2]. The ten
    parameters are physical exactly when ``J`` is positive definite (Wensing, Kim, Slotine,
    IEEE RA-L 3(1), 2018): mass > 0 and the inertia about the centre of mass positive
    definite with strict triangle inequalities.
    """
    p = np.asarray(pi_body, dtype=float)
    ixx, ixy, iyy, ixz, iyz, izz = p[4:10]
    i_o = np.array([[ixx, ixy, ixz], [ixy, iyy, iyz], [ixz, iyz, izz]])
    j = np.empty((4, 4))
    j[:3, :3] = 0.5 * np.trace(i_o) * np.eye(3) - i_o
    j[:3, 3] = j[3, :3] = p[1:4]
    j[3, 3] = p[0]
    return j


def complete_parameters(base: BaseParameters, beta: np.ndarray, prior: np.ndarray,
                        fixed_parts: np.ndarray | None = None,
                        margin: float = 1e-3) -> np.ndarray:
    """
    Full parameters ``pi`` with base values ``beta``, physical, as close to the prior as can be.

    Among all ``pi`` with ``B pi = beta`` (``pi = pi_p + N z``, ``N`` a basis of the null
    space of ``B``), minimise the relative change ``sum_k ((pi_k - pi0_k) / s_k)^2``,
    ``s_k = max(|pi0_k|, floor)`` (floors 0.01 kg, 1e-3 kg·m, 1e-4 kg·m^2, 0.01 for the
    friction coefficients), subject to every body being physical: the smallest eigenvalue of
    the pseudo-inertia (:func:`pseudo_inertia`) of ``pi_i - fixed_parts_i`` at least
    ``margin`` times that of the prior's (SLSQP from the unconstrained minimum
    ``pi0 + S (B S)^+ (beta - B pi0)``, which is kept when it is physical). Components that
    no base parameter contains stay at the prior's values.

    Parameters
    ----------
    base : BaseParameters
        The base parameters (``B``).
    beta : ndarray, shape (r,)
        Identified base parameters.
    prior : ndarray, shape (P,)
        The prior's full parameters (:meth:`ArmRegressor.parameters`).
    fixed_parts : ndarray, shape (n, 10), optional
        Per body, the parameters of the parts that keep their prior values (links rigidly
        attached to the joint's child link); the rest must be physical on its own.
    margin : float
        Fraction of the prior's smallest pseudo-inertia eigenvalue to keep, per body.

    Raises
    ------
    ArmIdentificationError
        No physical completion found (the estimate itself is not physical).

    """
    from scipy.linalg import null_space
    from scipy.optimize import minimize
    b_mat = base.mapping
    n = base.regressor.n
    prior = np.asarray(prior, dtype=float)
    beta = np.asarray(beta, dtype=float)
    fixed = np.zeros((n, 10)) if fixed_parts is None else np.asarray(fixed_parts, float)
    s = _parameter_scale(base.regressor, prior)
    bs = b_mat * s
    pi_p = prior + s * (np.linalg.pinv(bs) @ (beta - b_mat @ prior))
    null = s[:, None] * null_space(bs)             # B (pi_p + null z) = beta for every z
    floor = np.array([margin * max(np.linalg.eigvalsh(
        pseudo_inertia(prior[10 * i:10 * i + 10] - fixed[i]))[0], 0.0) for i in range(n)])

    def lam(pi):
        return np.array([np.linalg.eigvalsh(pseudo_inertia(pi[10 * i:10 * i + 10]
                                                           - fixed[i]))[0]
                         for i in range(n)]) - floor

    if np.all(lam(pi_p) >= 0.0) or null.shape[1] == 0:
        pi = pi_p
    else:
        def cost(z):
            d = (pi_p + null @ z - prior) / s
            return float(d @ d)

        def grad(z):
            return 2.0 * null.T @ ((pi_p + null @ z - prior) / s ** 2)

        res = minimize(cost, np.zeros(null.shape[1]), jac=grad, method='SLSQP',
                       constraints=[{'type': 'ineq', 'fun': lambda z: lam(pi_p + null @ z)}],
                       options={'maxiter': 500, 'ftol': 1e-12})
        pi = pi_p + null @ res.x
    bad = [i for i in range(n) if body_consistency(pi[10 * i:10 * i + 10] - fixed[i])]
    if bad:
        i = bad[0]
        raise ArmIdentificationError(
            f'no physical completion of the identified base parameters: body of '
            f'{base.regressor.arm.joint_names[i]}: '
            f'{body_consistency(pi[10 * i:10 * i + 10] - fixed[i])}')
    return pi


def clamp_joint_parameters(pi: np.ndarray, joint_names: Sequence[str]):
    """
    Set negative armature, viscous or Coulomb coefficients to 0 (URDF and plant need >= 0).

    Returns ``(pi, notes)``: the clamped copy and one line per clamped value (an estimate of
    a true zero comes out slightly negative with noise; a clearly negative one means the
    model does not fit the data, and the fit's residual says so).
    """
    pi = np.array(pi, dtype=float)
    n = len(joint_names)
    notes = []
    for k, (label, unit) in enumerate(zip(JOINT_PARAMETERS, JOINT_UNITS)):
        for j, name in enumerate(joint_names):
            idx = (10 + k) * n + j
            if pi[idx] < 0.0:
                notes.append(f'{name}.{label} = {pi[idx]:.4g} {unit} < 0, set to 0')
                pi[idx] = 0.0
    return pi, notes


def body_consistency(pi_body: np.ndarray) -> str | None:
    """
    Say why the ten parameters of one body are not physical, or None if they are.

    Physical: mass > 0 and the rotational inertia about the centre of mass ``I_c = I_o -
    m (|c|^2 1 - c c^T)`` has eigenvalues ``l_k > 0`` obeying the triangle inequalities
    ``l_i <= l_j + l_k``.
    """
    pi_body = np.asarray(pi_body, dtype=float)
    m = pi_body[0]
    if not m > 0.0:
        return f'mass {m:.6g} kg <= 0'
    c = pi_body[1:4] / m
    ixx, ixy, iyy, ixz, iyz, izz = pi_body[4:10]
    i_o = np.array([[ixx, ixy, ixz], [ixy, iyy, iyz], [ixz, iyz, izz]])
    i_c = i_o - m * (float(c @ c) * np.eye(3) - np.outer(c, c))
    lam = np.linalg.eigvalsh(i_c)
    tol = 1e-12 * max(1.0, float(np.max(np.abs(lam))))
    if lam[0] <= 0.0:
        return f'inertia about the centre of mass not positive definite (eigenvalues ' \
               f'{", ".join(f"{v:.4g}" for v in lam)} kg m^2)'
    if lam[2] > lam[0] + lam[1] + tol:
        return f'inertia eigenvalues {", ".join(f"{v:.4g}" for v in lam)} kg m^2 violate ' \
               'the triangle inequality'
    return None


def _urdf_inertial_parameters(link) -> np.ndarray:
    """Ten parameters of a URDF ``<link>``'s ``<inertial>`` about the link frame."""
    import pinocchio as pin
    inertial = link.find('inertial')
    if inertial is None:
        return np.zeros(10)
    mass_el = inertial.find('mass')
    m = float(mass_el.get('value', 0.0)) if mass_el is not None else 0.0
    origin = inertial.find('origin')
    xyz = np.zeros(3)
    rpy = np.zeros(3)
    if origin is not None:
        xyz = np.array([float(v) for v in origin.get('xyz', '0 0 0').split()])
        rpy = np.array([float(v) for v in origin.get('rpy', '0 0 0').split()])
    el = inertial.find('inertia')
    get = (lambda k: float(el.get(k, 0.0))) if el is not None else (lambda k: 0.0)
    i_c = np.array([[get('ixx'), get('ixy'), get('ixz')],
                    [get('ixy'), get('iyy'), get('iyz')],
                    [get('ixz'), get('iyz'), get('izz')]])
    rot = pin.rpy.rpyToMatrix(*rpy)
    return np.asarray(pin.Inertia(m, xyz, rot @ i_c @ rot.T).toDynamicParameters(), float)


def identified_urdf(urdf: str, regressor: ArmRegressor, pi: np.ndarray,
                    comment: str = '') -> str:
    """
    URDF text of the prior ``urdf`` with the inertial and friction parameters ``pi``.

    For each modelled joint ``i``: the change ``pi_i - pi0_i`` of its body is added to the
    ``<inertial>`` of the joint's child link (its frame is the joint frame; links rigidly
    attached to it keep theirs), written about the new centre of mass with ``rpy = 0``;
    ``<dynamics damping="fv" friction="fc">`` takes the identified friction. The armature has
    no URDF element: it goes into the comment and the YAML file beside the URDF.

    Raises
    ------
    ArmIdentificationError
        A link's resulting inertial is not physical (:func:`body_consistency`).

    """
    import pinocchio as pin
    n = regressor.n
    pi = np.asarray(pi, dtype=float)
    prior = regressor.parameters()
    root = ET.fromstring(urdf)
    links = {el.get('name'): el for el in root.findall('link')}
    joints = {el.get('name'): el for el in root.findall('joint')}
    for i, name in enumerate(regressor.arm.joint_names):
        joint = joints[name]
        link = links[joint.find('child').get('link')]
        change = pi[10 * i:10 * i + 10] - prior[10 * i:10 * i + 10]
        new = _urdf_inertial_parameters(link) + change
        why = body_consistency(new)
        if why is not None:
            raise ArmIdentificationError(f'identified model not physical: link '
                                         f'{link.get("name")} (moved by {name}): {why}')
        body = pin.Inertia.FromDynamicParameters(new)
        inertial = link.find('inertial')
        if inertial is not None:
            link.remove(inertial)
        inertial = ET.SubElement(link, 'inertial')
        c = np.asarray(body.lever, float)
        ET.SubElement(inertial, 'origin', xyz=' '.join(repr(float(v)) for v in c),
                      rpy='0 0 0')
        ET.SubElement(inertial, 'mass', value=repr(float(body.mass)))
        i_c = np.asarray(body.inertia, float)
        ET.SubElement(inertial, 'inertia', **{
            k: repr(float(i_c[a, b])) for k, (a, b) in
            (('ixx', (0, 0)), ('ixy', (0, 1)), ('ixz', (0, 2)), ('iyy', (1, 1)),
             ('iyz', (1, 2)), ('izz', (2, 2)))})
        dyn = joint.find('dynamics')
        if dyn is None:
            dyn = ET.SubElement(joint, 'dynamics')
        dyn.set('damping', repr(float(pi[11 * n + i])))
        dyn.set('friction', repr(float(pi[12 * n + i])))
    if comment:
        root.insert(0, ET.Comment(' ' + comment.replace('--', '- -') + ' '))
    ET.indent(root)
    return '<?xml version="1.0"?>\n' + ET.tostring(root, encoding='unicode') + '\n'


class FrictionArm(ArmModel):
    """
    An arm model plus joint friction ``f = fv qd + fc tanh(qd / eps)`` in its inverse dynamics.

    ``inverse_dynamics(q, qd, qdd) = M qdd + C qd + g + f(qd)`` [N·m]: with it, the computed
    torque of :func:`~manip_control.arm_plant.run_arm_closed_loop` feeds the model's friction
    forward at the measured velocity. Every other method is the rigid body's.

    Parameters
    ----------
    arm : ArmModel
        The rigid body.
    fv, fc, eps : sequence of n float
        Viscous [N·m·s/rad], Coulomb [N·m] and smoothing velocity [rad/s] per joint.

    """

    def __init__(self, arm: ArmModel, fv: Any, fc: Any, eps: Any):
        self.arm = arm
        self.n = arm.n
        self.joint_names = arm.joint_names
        self.limits = arm.limits
        self.gravity_field = arm.gravity_field
        self.fv, self.fc, self.eps = (np.broadcast_to(np.asarray(v, float), (arm.n,)).copy()
                                      for v in (fv, fc, eps))

    def workspace(self) -> 'FrictionArm':
        """Return the same model on a workspace of the rigid body."""
        return FrictionArm(self.arm.workspace(), self.fv, self.fc, self.eps)

    def friction(self, qd) -> np.ndarray:
        """Return the friction torque ``fv qd + fc tanh(qd / eps)`` [N·m]."""
        return self.fv * qd + self.fc * np.tanh(qd / self.eps)

    def mass_matrix(self, q) -> np.ndarray:
        """Return the rigid body's ``M(q)``."""
        return self.arm.mass_matrix(q)

    def coriolis_matrix(self, q, qd) -> np.ndarray:
        """Return the rigid body's ``C(q, qd)``."""
        return self.arm.coriolis_matrix(q, qd)

    def gravity(self, q) -> np.ndarray:
        """Return the rigid body's ``g(q)``."""
        return self.arm.gravity(q)

    def bias(self, q, qd) -> np.ndarray:
        """Return ``C qd + g + f(qd)`` [N·m]."""
        return self.arm.bias(q, qd) + self.friction(self._vec('qd', qd))

    def inverse_dynamics(self, q, qd, qdd) -> np.ndarray:
        """Return ``M qdd + C qd + g + f(qd)`` [N·m]."""
        return self.arm.inverse_dynamics(q, qd, qdd) + self.friction(self._vec('qd', qd))

    def forward_dynamics(self, q, qd, tau) -> np.ndarray:
        """Return ``M^-1 (tau - C qd - g - f(qd))`` [rad/s^2]."""
        net = np.asarray(tau, float) - self.friction(self._vec('qd', qd))
        return self.arm.forward_dynamics(q, qd, net)

    def potential_energy(self, q) -> float:
        """Return the rigid body's ``V(q)`` [J]."""
        return self.arm.potential_energy(q)


def urdf_fixed_parts(urdf: str, regressor: ArmRegressor) -> np.ndarray:
    """
    Per body, the parameters of what is not the joint's child link, shape (n, 10).

    The prior's body parameters minus those of the child link's ``<inertial>`` (links on
    fixed or locked joints that Pinocchio merged into the body); :func:`identified_urdf`
    changes the child link only, so these parts keep their prior values.
    """
    root = ET.fromstring(urdf)
    links = {el.get('name'): el for el in root.findall('link')}
    joints = {el.get('name'): el for el in root.findall('joint')}
    prior = regressor.parameters()
    out = np.zeros((regressor.n, 10))
    for i, name in enumerate(regressor.arm.joint_names):
        link = links[joints[name].find('child').get('link')]
        out[i] = prior[10 * i:10 * i + 10] - _urdf_inertial_parameters(link)
    return out


# ------------------------------------------------------------------------------------------
# files


def model_yaml(regressor: ArmRegressor, pi: np.ndarray, ident: ArmIdentification,
               urdf_name: str, source: str) -> dict:
    """
    Return the parameters file written beside the identified URDF (plain data for YAML).

    ``armature`` [kg·m^2] and ``friction`` (``viscous`` [N·m·s/rad], ``coulomb`` [N·m],
    ``eps`` [rad/s]) per joint complete the URDF (:func:`load_identified_model` reads them
    back); ``base_parameters`` lists each estimate with its standard error and the combination
    of URDF parameters it stands for.
    """
    n = regressor.n
    fit, base = ident.fit, ident.base

    def flt(v):
        return [float(f'{x:.12g}') for x in np.asarray(v, float)]
    return {
        'urdf': urdf_name,
        'source': source,
        'joints': list(regressor.arm.joint_names),
        'gravity': flt(regressor.arm.gravity_field),
        'armature': flt(pi[10 * n:11 * n]),
        'friction': {'viscous': flt(pi[11 * n:12 * n]), 'coulomb': flt(pi[12 * n:13 * n]),
                     'eps': flt(regressor.eps)},
        'fit': {'condition_number': float(f'{fit.condition_number:.6g}'),
                'residual_rms': flt(fit.residual_rms),
                'relative_residual': flt(fit.relative_residual),
                'sigma': float(f'{fit.sigma:.6g}'), 'equations': fit.equations,
                'cutoff_hz': ident.prepared.cutoff_hz,
                'rank_tolerance': base.tolerance},
        'base_parameters': [
            {'name': name, 'unit': unit, 'estimate': float(f'{v:.12g}'),
             'std_error': float(f'{se:.6g}'), 'combination': base.describe(k)}
            for k, (name, unit, v, se) in enumerate(zip(fit.names, fit.units, fit.estimate,
                                                        fit.std_error))],
    }


def load_identified_model(path) -> FrictionArm:
    """
    Load an identified model (the YAML file :func:`model_yaml` wrote and its URDF).

    Returns the :class:`FrictionArm` (URDF rigid body with the armature, plus friction).

    Raises
    ------
    ArmIdentificationError
        Unreadable or incomplete file.

    """
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding='utf-8'))
        urdf = path.parent / data['urdf']
        arm = UrdfArm.from_file(urdf, data['joints'], gravity=data['gravity'],
                                armature=data['armature'])
        fr = data['friction']
        return FrictionArm(arm, fr['viscous'], fr['coulomb'], fr['eps'])
    except (OSError, KeyError, TypeError, yaml.YAMLError) as exc:
        raise ArmIdentificationError(f'{path}: not an identified model '
                                     f'({type(exc).__name__}: {exc})') from None


# ------------------------------------------------------------------------------------------
# command line (manip-identify --urdf FILE BAG)


def read_bag_description(bag) -> str:
    """
    Return the URDF recorded in ``bag`` on a ``std_msgs/String`` topic ``*robot_description``.

    The last non-empty message of the shortest such topic name (``/robot_description`` before
    ``/ns/robot_description``), as robot_state_publisher latches it.

    Raises
    ------
    ArmIdentificationError
        The bag holds no such topic or message.

    """
    string = 'std_msgs/msg/String'
    with BagReader(bag) as reader:
        names = sorted((n for n, i in reader.topics.items() if i.msgtype == string
                        and n.lower().rstrip('/').endswith('robot_description')), key=len)
        if not names:
            raise ArmIdentificationError(f'{bag}: no robot_description topic (std_msgs/String);'
                                         ' give --urdf FILE')
        msgs = reader.read_series([names[0]])[names[0]]
    texts = [getattr(m, 'data', None) for _, m in msgs]
    texts = [x for x in texts if isinstance(x, str) and x.strip()]
    if not texts:
        raise ArmIdentificationError(f'{bag}: {names[0]} holds no URDF text; give --urdf FILE')
    return texts[-1]


def main_urdf(args) -> int:
    """
    ``manip-identify --urdf FILE BAG``: identify any URDF arm from a bag (exit 2 on errors).

    ``args`` are those of :func:`manip_control.identification.build_parser`.
    """
    try:
        if args.record:
            raise ArmIdentificationError('--record simulates the 2R scenario; record a URDF '
                                         'arm with bench/bench_identify_arm.py or a real run')
        if not (args.eps > 0.0 and math.isfinite(args.eps)):
            raise ArmIdentificationError(f'--eps: must be > 0 rad/s (got {args.eps})')
        if not (args.cutoff > 0.0 and math.isfinite(args.cutoff)):
            raise ArmIdentificationError(f'--cutoff: must be > 0 Hz (got {args.cutoff})')
        max_cond = 1000.0 if args.max_condition is None else args.max_condition
        if Path(args.out or 'identified.urdf').suffix.lower() in ('.yaml', '.yml'):
            # the parameters file goes beside the URDF with the suffix .yaml: it would
            # overwrite the URDF
            raise ArmIdentificationError(f'--out {args.out}: give the path of the URDF to '
                                         'write (e.g. identified.urdf); its parameters file '
                                         'goes beside it as .yaml')
        if args.urdf and args.urdf_from_bag:
            raise ArmIdentificationError('give --urdf FILE or --urdf-from-bag, not both')
        if not Path(args.bag).exists():
            raise ArmIdentificationError(f'{args.bag}: no such bag')
        if args.urdf_from_bag:
            text = read_bag_description(args.bag)
            args.urdf = f"{args.bag}'s /robot_description"
        else:
            text = read_urdf_file(args.urdf)
        armature = args.armature[0] if len(args.armature) == 1 else args.armature
        arm = UrdfArm.from_string(text, args.joints, gravity=args.gravity,
                                  armature=armature, source=str(args.urdf))
        data = read_joint_states(args.bag, arm.joint_names, args.topic)
        velocity = args.velocity
        if data.qd is None and velocity == 'measured':
            print(f'note: {args.topic} has no velocity; differentiating the position')
            velocity = 'position'
        reg = ArmRegressor(arm, eps=args.eps)
        base = base_parameters(reg)
        print(f'{args.bag}: {args.topic}, {len(data.t)} samples over {data.t[-1]:.3f} s; '
              f'{args.urdf}: {arm.n} joints ({", ".join(arm.joint_names)}), gravity '
              f'{" ".join(f"{g:g}" for g in arm.gravity_field)} m/s^2, eps {args.eps:g} rad/s')
        print(f'{reg.size} parameters, {base.rank} base parameters (pivoted QR, relative '
              f'tolerance {base.tolerance:g}; last kept {base.gap[0]:.2g}, first dropped '
              f'{base.gap[1]:.2g})')
        ident = identify_arm(base, data.t, data.q, data.qd, data.tau, cutoff_hz=args.cutoff,
                             max_condition=max_cond, velocity=velocity,
                             torque_offset=args.torque_offset)
        fit = ident.fit
        print(f'\nregressor condition number {fit.condition_number:.4g} (columns scaled to '
              f'unit norm; limit {max_cond:g}), {fit.equations} equations')
        print('fit residual RMS [N m]: ' + ', '.join(
            f'{j} {r:.3g} ({100 * f:.2g} %)' for j, r, f in
            zip(arm.joint_names, fit.residual_rms, fit.relative_residual)))
        if fit.filter_sensitivity is not None:
            how = (f'Newey-West over 1 / cutoff combined with the processing error, the '
                   f'change at cutoff {args.cutoff / 1.5:.3g} Hz')
        else:
            how = ('Newey-West over 1 / cutoff: the noise only, not the processing error (the '
                   f'run is too short to identify at {args.cutoff / 1.5:.3g} Hz)')
        print('\nbase parameters (least squares weighted per joint by 1 / its OLS residual '
              f'RMS; standard errors: {how}; docs/identification.md):')
        print(fit.table())
        poor = [f'{j} {100 * f:.3g} %' for j, f in zip(arm.joint_names, fit.relative_residual)
                if f > 0.1]
        if poor:
            print(f'\nwarning: the model explains the torques poorly (relative residual '
                  f'{", ".join(poor)}): check --gravity, the joint names and what the effort '
                  'is (joint torque, in N m)')
        fr0 = urdf_friction(text, arm.joint_names)
        prior = reg.parameters(fv=fr0.b, fc=fr0.tau_c)
        pi = complete_parameters(base, fit.estimate, prior, urdf_fixed_parts(text, reg))
        pi, notes = clamp_joint_parameters(pi, arm.joint_names)
        for line in notes:
            print(f'note: {line}')
        n = arm.n
        print('\narmature [kg m^2]: ' + ' '.join(f'{v:.4g}' for v in pi[10 * n:11 * n]))
        print('viscous [N m s/rad]: ' + ' '.join(f'{v:.4g}' for v in pi[11 * n:12 * n]))
        print('Coulomb [N m]: ' + ' '.join(f'{v:.4g}' for v in pi[12 * n:13 * n]))
        out = Path(args.out or 'identified.urdf')
        side = out.with_suffix('.yaml')
        comment = (f'Identified by manip-identify from {args.bag} (prior {args.urdf}); '
                   f'armature and friction eps in {side.name}')
        new_text = identified_urdf(text, reg, pi, comment)
        # check: the written model reproduces the identified one on the data
        new_arm = UrdfArm.from_string(new_text, arm.joint_names, gravity=args.gravity,
                                      armature=pi[10 * n:11 * n], source=str(out))
        beta_new = base.of(reg.parameters(new_arm, fv=pi[11 * n:12 * n],
                                          fc=pi[12 * n:13 * n]))
        prep = ident.prepared
        fitted = prep.y @ fit.estimate
        written = prep.y @ beta_new
        err = float(np.max(np.abs(written - fitted)))
        print(f'\nwritten model vs identified one on the data: max |tau difference| '
              f'{err:.3g} N m')
        resid = float(np.sqrt(np.mean((prep.tau - fitted) ** 2)))
        if err > resid:
            # the completion is exact up to the clamping of negative friction / armature
            print(f'warning: the written model departs from the fit by more than the '
                  f'residual RMS of the fit ({resid:.3g} N m)'
                  + (f': from the parameters set to 0 above ({len(notes)})' if notes else '')
                  + '; check --gravity, --eps and what the effort is')
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(new_text, encoding='utf-8')
            side.write_text(f'# {comment}\n' + yaml.safe_dump(
                model_yaml(reg, pi, ident, out.name, str(args.bag)), sort_keys=False,
                default_flow_style=None, width=99), encoding='utf-8')
        except OSError as exc:
            raise ArmIdentificationError(f'{out}: cannot write ({exc.strerror})') from None
        print(f'wrote {out} and {side}')
    except (ArmIdentificationError, ArmModelError, IdentificationError, BagError) as exc:
        print(f'error: {exc}', file=sys.stderr)
        return 2
    return 0


def write_arm_bag(path, t, joint_names: Sequence[str], q, qd, tau, *,
                  description: str | None = None, topic: str = '/joint_states',
                  storage: str = 'mcap'):
    """
    Record samples of an arm as ``sensor_msgs/JointState`` (the recorder's contract).

    Header stamp ``t_k`` [s], position [rad], velocity [rad/s] and effort = the applied joint
    torque [N·m], serialized with the ROS 2 Jazzy typestore through
    :class:`manip_control.bag_io.BagWriter`; ``description`` (the URDF) goes on
    ``/robot_description`` (``std_msgs/String``) first, as robot_state_publisher's latched
    message would. Returns the bag path.
    """
    store = get_typestore(Stores.ROS2_JAZZY)
    types = store.types
    joint_state = types['sensor_msgs/msg/JointState']
    header = types['std_msgs/msg/Header']
    stamp_type = types['builtin_interfaces/msg/Time']
    names = list(joint_names)
    q, qd, tau = (np.asarray(x, dtype=float) for x in (q, qd, tau))
    with BagWriter(path, storage=storage) as writer:
        if description is not None:
            string = 'std_msgs/msg/String'
            writer.add_topic('/robot_description', string,
                             qos=make_qos('reliable', 'transient_local', depth=1))
            writer.write('/robot_description', 0, bytes(store.serialize_cdr(
                types[string](data=description), string)))
        writer.add_topic(topic, JOINT_STATE, qos=make_qos('reliable', 'volatile', depth=10))
        for k in range(len(t)):
            ns = int(round(float(t[k]) * 1e9))
            msg = joint_state(header=header(stamp=stamp_type(sec=ns // 1_000_000_000,
                                                             nanosec=ns % 1_000_000_000),
                                            frame_id=''),
                              name=names, position=q[k].copy(), velocity=qd[k].copy(),
                              effort=tau[k].copy())
            writer.write(topic, ns, bytes(store.serialize_cdr(msg, JOINT_STATE)))
    return Path(path)


# ------------------------------------------------------------------------------------------
# the adaptive law's regressor (manip_control.adaptation)


#: ``1 / (2 sqrt 2)``: the velocity scale of :meth:`PinocchioRows.two_velocity`'s first call.
_HALF_SQRT_HALF = 0.5 * math.sqrt(0.5)


class PinocchioRows:
    """
    The adaptive law's rows of a URDF arm's base regressor, written into the caller's buffers.

    ``Y_SL(q, v, w, a)`` (two Pinocchio regressor calls, :meth:`two_velocity`) and the
    consistency check's rows ``Y(q, 0, e_j)``, ``Y(q, 0, 0)`` (n + 1
    calls), each call's base columns gathered by a compiled kernel from the Pinocchio data's
    own regressor matrix: no array of this package per call (the binding still returns a
    copy of each call's matrix). Built once per law (:func:`adaptive_regressor`).

    Parameters
    ----------
    base : BaseParameters
        The base parameters whose columns the rows hold.

    """

    def __init__(self, base: BaseParameters):
        reg = base.regressor
        n = self.n = reg.n
        self._pin = reg._pin
        self._model = reg._model
        self._data = reg._model.createData()
        cols = np.asarray(base.independent, dtype=np.int64)
        inertial = cols < 10 * n
        self._pos = np.flatnonzero(inertial).astype(np.int64)
        self._src = cols[inertial]
        kind, joint = np.divmod(cols[~inertial] - 10 * n, n)
        self._joint_pos = np.flatnonzero(~inertial).astype(np.int64)
        self._kind, self._joint = kind.astype(np.int64), joint.astype(np.int64)
        self._eps = np.asarray(reg.eps, dtype=float)
        self._zero = np.zeros(n)
        self._unit = np.eye(n)
        self._plus = np.zeros(n)
        self._minus = np.zeros(n)
        self._half = np.zeros(n)
        kernels = _compiled()
        self._gather, self._columns = kernels.gather_columns, kernels.joint_columns
        # the matrix Pinocchio writes each call into: read in place, never its returned copy
        self._y = self._data.jointTorqueRegressor
        q = np.linspace(-0.5, 0.5, n)
        back = self._pin.computeJointTorqueRegressor(self._model, self._data, q, q, q)
        if self._y.shape != (n, 10 * n) or not np.array_equal(back, self._y):
            raise ArmIdentificationError('the Pinocchio data does not expose the regressor it '
                                         'writes (jointTorqueRegressor)')

    def two_velocity(self, q, qd, qd_r, qdd_r, qd_f, out) -> None:
        """
        Write ``Y_SL(q, qd, qd_r, qdd_r)``, friction at ``qd_f`` (None: zero), into ``out``.

        Two regressor calls: with ``Q(x) = C(q, x) x`` (quadratic, ``C`` Christoffel)
        ``Q((v + w) / 2) - Q((v - w) / 2) = C(q, v) w``, so ``Y_SL(q, v, w, a) = 2 Y(q, (v +
        w) / (2 sqrt 2), a / 2) - Y(q, (v - w) / 2, 0)`` (gravity ``2 g - g``).
        """
        reg, model, data, y = self._pin.computeJointTorqueRegressor, self._model, self._data, \
            self._y
        gather, pos, src, plus, minus = self._gather, self._pos, self._src, self._plus, \
            self._minus
        np.add(qd, qd_r, out=plus)
        plus *= _HALF_SQRT_HALF
        np.subtract(qd, qd_r, out=minus)
        minus *= 0.5
        np.multiply(qdd_r, 0.5, out=self._half)
        reg(model, data, q, plus, self._half)
        gather(y, 2.0, pos, src, out, True)
        reg(model, data, q, minus, self._zero)
        gather(y, -1.0, pos, src, out, False)
        self._columns(out, self._joint_pos, self._kind, self._joint, qdd_r,
                      self._zero if qd_f is None else qd_f, self._eps, qd_f is not None)

    def mass_rows(self, q, out, row: int | None = None) -> None:
        """
        Write ``Y(q, 0, e_j)`` for each joint ``j``, then ``Y(q, 0, 0)``, into ``out``.

        ``out`` has the shape (n + 1, n, p). With ``row`` only that one (``j = row``; ``n``:
        the last), one Pinocchio call.
        """
        reg, model, data, y = self._pin.computeJointTorqueRegressor, self._model, self._data, \
            self._y
        zero, unit = self._zero, self._unit
        for j in range(self.n + 1) if row is None else (row,):
            a = unit[j] if j < self.n else zero
            reg(model, data, q, zero, a)
            self._gather(y, 1.0, self._pos, self._src, out[j], True)
            self._columns(out[j], self._joint_pos, self._kind, self._joint, a, zero, self._eps,
                          False)


def adaptive_regressor(base: BaseParameters, fv: Any = 0.0, fc: Any = 0.0,
                       urdf: str | None = None, urdf_name: str = 'adapted.urdf'
                       ) -> BaseRegressor:
    """
    Return the base parameters of a URDF arm for :class:`~manip_control.adaptation.AdaptiveLaw`.

    ``theta0`` is ``base.of(pi0)`` of the arm's own parameters (bodies, armature) with the
    friction ``fv`` [N·m·s/rad], ``fc`` [N·m]; the regressor is :meth:`BaseParameters.
    regressor_of` (the identification's). With ``urdf`` (the arm's URDF text), ``save(path)``
    writes the identified URDF and the parameters file beside it as ``manip-identify --urdf``
    does (:func:`complete_parameters`, :func:`identified_urdf`; the ``fit`` section holds the
    adaptation's state instead of a least-squares fit).
    """
    reg = base.regressor
    n = reg.n
    prior = reg.parameters(fv=fv, fc=fc)
    theta0 = base.of(prior)
    names = base.names
    friction = np.array([nm.endswith(('.fv', '.fc')) for nm in names])

    def save(theta, path, law=None):
        if urdf is None:
            raise ArmIdentificationError('save: the adaptive regressor was built without '
                                         'the URDF text')
        pi = complete_parameters(base, theta, prior, urdf_fixed_parts(urdf, reg))
        pi, notes = clamp_joint_parameters(pi, reg.arm.joint_names)   # as manip-identify
        path = Path(path)
        side = path.with_suffix('.yaml')
        comment = ('adapted by manip_control.adaptation' if law is None else
                   f'adapted by manip_control.adaptation over {law.ticks * law.period:.6g} s')
        path.write_text(identified_urdf(urdf, reg, pi, comment), encoding='utf-8')

        def flt(v):
            return [float(f'{x:.12g}') for x in np.asarray(v, float)]
        data = {
            'urdf': path.name, 'source': urdf_name, 'joints': list(reg.arm.joint_names),
            'gravity': flt(reg.arm.gravity_field), 'armature': flt(pi[10 * n:11 * n]),
            'friction': {'viscous': flt(pi[11 * n:12 * n]), 'coulomb': flt(pi[12 * n:13 * n]),
                         'eps': flt(reg.eps)},
            'fit': {'adaptation': True, 'rank_tolerance': base.tolerance, 'notes': notes},
            'base_parameters': [
                {'name': name, 'unit': unit, 'estimate': float(f'{v:.12g}'),
                 'excited': bool(law.excited[k]) if law is not None else None,
                 'combination': base.describe(k)}
                for k, (name, unit, v) in enumerate(zip(names, base.units, theta))]}
        side.write_text(f'# {comment}\n' + yaml.safe_dump(data, sort_keys=False),
                        encoding='utf-8')
        return [path, side]

    rows = PinocchioRows(base)
    return BaseRegressor(names, base.units, theta0, base.regressor_of, friction,
                         np.zeros(len(names), dtype=bool), save,
                         lambda mass, radius: payload_change(base, mass, radius),
                         two_velocity=rows.two_velocity, mass_rows=rows.mass_rows)


def payload_change(base: BaseParameters, mass: float, radius: float
                   ) -> tuple[np.ndarray, np.ndarray]:
    """
    Range of the change of each base parameter by a payload on the last link.

    A point mass ``m`` [kg] at ``p`` (``|p| <= radius`` [m]) in the last link's frame adds
    to that link's parameters (about the frame origin, as the regressor has them)::

        dm = m in [0, mass]           d(m c) = m p, each in [-mass r, mass r]
        dI = m (|p|^2 1 - p p^T):     diagonal in [0, mass r^2], off-diagonal in
                                      [-mass r^2 / 2, mass r^2 / 2]

    and the base parameters by ``B dpi`` (:attr:`BaseParameters.mapping`): interval
    arithmetic over those ranges gives, per base parameter, the lowest and the highest
    change (a box that contains every such payload; armature and friction unchanged).

    Returns
    -------
    lower, upper : ndarray, shape (r,)
        In each base parameter's unit (kg, kg m, kg m^2).

    """
    reg = base.regressor
    last = reg.arm.joint_names[-1] + '.'
    lo, hi = np.zeros(reg.size), np.zeros(reg.size)
    mr, mr2 = mass * radius, mass * radius * radius
    for i, name in enumerate(reg.names):
        if not name.startswith(last):
            continue
        kind = name[len(last):]
        if kind == 'm':
            hi[i] = mass
        elif kind in ('mx', 'my', 'mz'):
            lo[i], hi[i] = -mr, mr
        elif kind in ('Ixx', 'Iyy', 'Izz'):
            hi[i] = mr2
        elif kind in ('Ixy', 'Ixz', 'Iyz'):
            lo[i], hi[i] = -0.5 * mr2, 0.5 * mr2
    b = base.mapping
    pos, neg = np.maximum(b, 0.0), np.minimum(b, 0.0)
    return pos @ lo + neg @ hi, pos @ hi + neg @ lo
