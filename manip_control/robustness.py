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
Monte Carlo robustness of computed-torque tracking against nominal-model errors.

Each run draws relative errors ``delta ~ U[-s, s]`` for the nominal ``m1, m2, I1, I2`` (the
lengths, CoM distances, rotor inertia and friction are the plant's), simulates the scenario
offline and records the late-window maximum tracking error ``max |q - q_d|``. Runs are
seeded (``numpy.random.SeedSequence``) and simulated together by
:func:`manip_control.simulation.run_batch` (the compiled kernel on every core); the same
parameter draws are used for every gain set.

Two figures stand beside the measured errors (docs/identification.md derives both):

* the **estimate** (:func:`iss_estimate`): with computed torque ``tau = M^ v + c^ + g^``
  and ``v = qdd_d - Kd e_dot - Kp e`` the error obeys ``e_dd + kd e_dot + kp e = eta``,
  ``eta = M^-1 (M~ v + c~ + g~)`` (``~`` = nominal - true), so ``|e_j| <= ||h_j||_1 sup
  |eta_j|`` after the transient, ``h(s) = 1 / (s^2 + kd s + kp)``. Evaluated along the
  reference (``q = q_d``, ``v = qdd_d``: first order in the error) it is linear in the
  parameter error and divided by ``S^2`` when ``wn -> S wn``; it is *not* a bound (it
  leaves out the initial error state, the feedback part of ``v`` and the hold), and runs
  exceed it by up to about 10 %;
* the **bound** (:func:`error_bound`): proven for the held, sampled loop of the rigid body
  with ideal actuators and exact measurements, for every draw of a level at once, by
  interval arithmetic over an error envelope that reproduces itself. It is loose (2-3x the
  worst run) and the proof gives none once the mismatch is large (small-gain condition).

For any serial arm, ``manip-robustness --urdf FILE`` (:func:`run_urdf_study`) draws one
relative error per joint's body, applied to its mass and rotational inertia together
(``UrdfArm.with_inertial_scale``), runs the offline n-joint loop
(:func:`manip_control.arm_scenario.run_urdf_closed_loop`: ideal actuators by default, so that
the model error alone moves the arm off its reference) with gains from the bandwidth
``wn`` (set A) and ``S wn`` (set B), and records the late-window (second half) error, the
runs spread over worker processes as the 2R's are. The estimate and the bound are the 2R's
(n/a there).

With ``--adapt`` (``adapt=True``) every draw is also run with adaptive computed torque
(:mod:`manip_control.adaptation`, the default adaptation settings) from the same wrong nominal
model and gain set A's gains: the gain set ``adaptive`` (estimate and bound n/a: the
adaptive loop is not the fixed-model loop they are derived for). The 2R's adaptive runs take
the Python loop (:func:`manip_control.simulation.run_batch` runs them in processes), a URDF
arm's the offline n-joint loop with the law. ``adaptation.png`` shows the distribution of the
late-window error per joint over the draws with and without adaptation (empirical CDF), and
the table is followed by one line per level: median and 90th percentile of both, and the
share of draws adaptation improves.

``manip-robustness`` shows a progress bar on stderr (when it is a terminal; ``--quiet``
hides it), prints a table (per gain set and mismatch level: runs, median and max
late-window error, max estimate, bound, and the ratios) and writes ``robustness.png``
(error, estimate and bound vs mismatch size, two gain sets) and ``robustness.csv``.
"""

from __future__ import annotations

import argparse
from concurrent.futures import ProcessPoolExecutor
import csv
import dataclasses
from dataclasses import dataclass
import functools
import math
import multiprocessing
import os
from pathlib import Path
import sys
import time
from typing import Callable, Sequence, TextIO

from manip_control.arm_model import ArmModelError
from manip_control.arm_model import read_urdf_file
from manip_control.arm_model import UrdfArm
from manip_control.arm_scenario import gains_from_bandwidth
from manip_control.arm_scenario import run_urdf_closed_loop
from manip_control.arm_scenario import summarize_urdf_run
from manip_control.dynamics import TwoLinkModel
from manip_control.parameters import AdaptationParameters
from manip_control.parameters import ControllerParameters
from manip_control.parameters import load_scenario
from manip_control.parameters import NominalModel
from manip_control.parameters import ParameterError
from manip_control.parameters import Scenario
from manip_control.plant import initial_state
from manip_control.plant import plant_model
from manip_control.simulation import late_window
from manip_control.simulation import run_batch
from manip_control.simulation import run_closed_loop
from manip_control.simulation import truth_nominal
from manip_control.trajectories import trajectory_from_config
import numpy as np

PERTURBED = ('m1', 'm2', 'I1', 'I2')
DEFAULT_LEVELS = (0.05, 0.1, 0.15, 0.2)
DEFAULT_RUNS = 10
DEFAULT_GAIN_SCALE = 2.0
#: The gain set of the adaptive runs (gain set A's gains, adaptive computed torque).
ADAPTIVE = 'adaptive'


@dataclass(frozen=True)
class RunSpec:
    """One Monte Carlo run: gain set, level and relative errors of :data:`PERTURBED`."""

    gain_set: str
    level: float
    index: int
    delta: tuple
    kp: tuple
    kd: tuple

    @property
    def mismatch(self) -> float:
        """Size of the parameter error ``max |delta|``."""
        return float(np.max(np.abs(self.delta)))


@dataclass
class RunResult:
    """One run's late-window error beside the estimate and the bound of its level."""

    spec: RunSpec
    error: tuple
    """Late-window max |e| per joint [rad]."""
    estimate: tuple
    """First-order ISS estimate per joint [rad] (not a bound: runs exceed it)."""
    bound: tuple
    """Proven bound per joint for every draw of the level and gain set [rad] (``inf``:
    the proof gives none; ``nan``: the scenario is outside the proof)."""
    saturated: bool


def perturbed_nominal(scenario: Scenario, delta: Sequence[float]) -> NominalModel:
    """
    Return the plant's true model with ``m1, m2, I1, I2`` scaled by ``1 + delta``.

    Everything else (lengths, CoM distances, friction, rotor inertia and coupling, gear
    ratios and efficiencies) is the plant's (:func:`manip_control.simulation.truth_nominal`).
    """
    truth = truth_nominal(scenario)
    values = {name: getattr(truth.arm, name) * (1.0 + d) for name, d in zip(PERTURBED, delta)}
    return dataclasses.replace(truth, arm=dataclasses.replace(truth.arm, **values))


@functools.lru_cache(maxsize=64)
def h_l1_norm(kp: float, kd: float) -> float:
    """``||h||_1`` of ``h(s) = 1 / (s^2 + kd s + kp)`` (= 1/kp when critically/overdamped)."""
    zeta = kd / (2.0 * math.sqrt(kp))
    if zeta >= 1.0:
        return 1.0 / kp
    wn = math.sqrt(kp)
    wd = wn * math.sqrt(1.0 - zeta * zeta)
    t = np.linspace(0.0, 40.0 / (zeta * wn), 400001)
    h = np.exp(-zeta * wn * t) * np.sin(wd * t) / wd
    return float(np.sum(np.abs(h)) * (t[1] - t[0]))


def iss_estimate(scenario: Scenario, nominal: NominalModel, kp, kd,
                 n_samples: int = 2000, reference=None) -> np.ndarray:
    """
    Per-joint first-order ISS estimate ``||h_j||_1 max_t |eta_j(t)|`` [rad] (not a bound).

    ``eta = M^-1 (M~ qdd_d + c~ + g~)`` at ``q = q_d``, ``qd = qd_d`` over the late window.
    ``reference`` may pass the samples ``(q, qd, qdd)`` of :func:`late_reference` (they
    depend on the scenario only).
    """
    plant = scenario.plant
    true = plant_model(plant)
    nom = TwoLinkModel(nominal.arm, nominal.rotor_inertia, nominal.rotor_coupling_terms)
    q, qd, qdd = late_reference(scenario, n_samples) if reference is None else reference
    eta = _mismatch_acceleration(nom, true, q, qd, qdd)
    norms = np.array([h_l1_norm(float(kp[j]), float(kd[j])) for j in range(2)])
    return norms * np.abs(eta).max(axis=0)


def late_reference(scenario: Scenario, n_samples: int = 2000):
    """``(q_d, qd_d, qdd_d)`` at ``n_samples`` times over the late window, shapes (n, 2)."""
    traj = trajectory_from_config(dict(scenario.trajectory), 2)
    window = late_window(scenario)
    t = np.linspace(window.start, window.end, n_samples)
    return traj.sample_many(t)


def _matrices(m: TwoLinkModel, q, qd):
    """M (N, 2, 2), c (N, 2), g (N, 2) of the closed form, vectorised over samples."""
    c2, s2 = np.cos(q[:, 1]), np.sin(q[:, 1])
    m12 = m.d12 + m.b * c2
    mm = np.empty((len(q), 2, 2))
    mm[:, 0, 0] = m.a + 2.0 * m.b * c2
    mm[:, 0, 1] = mm[:, 1, 0] = m12
    mm[:, 1, 1] = m.d22
    h = -m.b * s2
    c = np.column_stack([h * (2.0 * qd[:, 0] * qd[:, 1] + qd[:, 1] ** 2), -h * qd[:, 0] ** 2])
    c12 = np.cos(q[:, 0] + q[:, 1])
    g = np.column_stack([m.g1 * np.cos(q[:, 0]) + m.g2 * c12, m.g2 * c12])
    return mm, c, g


def _mismatch_acceleration(nom: TwoLinkModel, true: TwoLinkModel, q, qd, qdd) -> np.ndarray:
    """``eta = M^-1 (M~ qdd + c~ + g~)`` per sample, shape (N, 2)."""
    m_n, c_n, g_n = _matrices(nom, q, qd)
    m_t, c_t, g_t = _matrices(true, q, qd)
    rhs = np.einsum('nij,nj->ni', m_n - m_t, qdd) + (c_n - c_t) + (g_n - g_t)
    return np.linalg.solve(m_t, rhs[..., None])[..., 0]


# --------------------------------------------------------------------------------------------
# A proven bound (docs/identification.md, "A proven bound")

@dataclass
class BoundResult:
    """
    Proven bound on the late-window error of a computed-torque run, and the estimate.

    Attributes
    ----------
    bound : ndarray, shape (2,)
        ``max_k E_j(t_k)`` over the ticks of the late window [rad]: an upper bound on
        ``|e_j(t_k)|`` there, proven for the rigid-body model with ideal actuators and
        exact measurements as long as no command saturates; ``inf`` when the small-gain
        condition of the proof fails (then there is no bound from it).
    estimate : ndarray, shape (2,)
        The first-order estimate ``||h_j||_1 max |eta_j|`` along the reference (no proof).
    assumptions : tuple of str
        What of the scenario is outside the proof (``()`` when all of it is inside).
    iterations : int
        Fixed-point iterations used.

    """

    bound: np.ndarray
    estimate: np.ndarray
    assumptions: tuple
    iterations: int

    @property
    def proven(self) -> bool:
        """Whether :attr:`bound` is a finite proven bound for this scenario."""
        return not self.assumptions and bool(np.all(np.isfinite(self.bound)))


def _icos(lo: np.ndarray, hi: np.ndarray) -> tuple:
    """Range of ``cos`` over ``[lo, hi]`` (elementwise)."""
    clo, chi = np.cos(lo), np.cos(hi)
    out_lo, out_hi = np.minimum(clo, chi), np.maximum(clo, chi)
    top = 2.0 * np.pi * np.ceil(lo / (2.0 * np.pi))              # a maximum inside
    bottom = np.pi + 2.0 * np.pi * np.ceil((lo - np.pi) / (2.0 * np.pi))
    return np.where(bottom <= hi, -1.0, out_lo), np.where(top <= hi, 1.0, out_hi)


def _imul(a, b) -> tuple:
    """Interval product of ``a = (lo, hi)`` and ``b = (lo, hi)``."""
    p = (a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1])
    return (np.minimum(np.minimum(p[0], p[1]), np.minimum(p[2], p[3])),
            np.maximum(np.maximum(p[0], p[1]), np.maximum(p[2], p[3])))


def _iadd(*terms) -> tuple:
    return sum(t[0] for t in terms), sum(t[1] for t in terms)


def _isq(a) -> tuple:
    """Range of ``x^2`` over ``a``."""
    zero = (a[0] <= 0.0) & (a[1] >= 0.0)
    return (np.where(zero, 0.0, np.minimum(a[0] ** 2, a[1] ** 2)),
            np.maximum(a[0] ** 2, a[1] ** 2))


class _CosFunction:
    """
    A smooth function ``f(c)`` of ``c = cos q2`` with its range over intervals of ``c``.

    The range over ``[lo, hi]`` is the extreme of ``f`` at the ends and at the interior
    critical points (located once on a grid of 2e-5 over [-1, 1]; their values are widened
    by ``1e-6 max |f|``, far above the grid's error).
    """

    def __init__(self, f):
        self.f = f
        c = np.linspace(-1.0, 1.0, 100001)
        y = f(c)
        self.pad = 1e-6 * float(np.abs(y).max()) + 1e-300
        d = np.diff(y)
        d = np.where(np.abs(d) < 1e-3 * self.pad, 0.0, d)       # round-off: flat
        sd = np.sign(d)
        idx = np.flatnonzero((sd[1:] != sd[:-1]) & (sd[1:] != 0.0)) + 1
        if len(idx) > 8 or np.all(sd == 0.0):
            # (nearly) constant or wiggly: its global range, which holds on any interval
            idx = np.array([int(np.argmin(y)), int(np.argmax(y))])
            self.global_range = (float(y.min()) - self.pad, float(y.max()) + self.pad)
        else:
            self.global_range = None
        self.crit = c[idx]
        self.crit_val = y[idx]

    def over(self, lo, hi) -> tuple:
        """Return ``(min, max)`` of ``f`` over ``[lo, hi]`` (arrays, ``-1 <= lo <= hi <= 1``)."""
        if self.global_range is not None:
            return (np.full(np.shape(lo), self.global_range[0]),
                    np.full(np.shape(lo), self.global_range[1]))
        a, b = self.f(lo), self.f(hi)
        out_lo, out_hi = np.minimum(a, b), np.maximum(a, b)
        for cp, v in zip(self.crit, self.crit_val):
            inside = (lo <= cp) & (cp <= hi)
            out_lo = np.where(inside, np.minimum(out_lo, v - self.pad), out_lo)
            out_hi = np.where(inside, np.maximum(out_hi, v + self.pad), out_hi)
        return out_lo, out_hi


@functools.lru_cache(maxsize=64)
def _zoh_kernels(kp: float, kd: float, period: float, n: int) -> tuple:
    """
    Powers of the held loop ``x_{k+1} = A x_k + w_k`` of ``e_dd = -kd e_dot_k - kp e_k + d``.

    ``A = [[1 - kp T^2/2, T - kd T^2/2], [-kp T, 1 - kd T]]``; returns ``P`` (n + 1, 2, 2)
    with ``P[k] = A^k``, and the kernels ``Ke[k] = |P_k[0,0]| T^2/2 + |P_k[0,1]| T``,
    ``Kv[k] = |P_k[1,0]| T^2/2 + |P_k[1,1]| T`` that bound the effect of ``|d| <= 1``
    held over one period on ``e`` and ``e_dot`` k periods later.
    """
    t = period
    a = np.array([[1.0 - kp * t * t / 2.0, t - kd * t * t / 2.0], [-kp * t, 1.0 - kd * t]])
    p = np.empty((n + 1, 2, 2))
    p[0] = np.eye(2)
    # powers by blocks of 64: P[64 m + j] = A^j A^(64 m)
    small = np.empty((64, 2, 2))
    small[0] = np.eye(2)
    for j in range(1, 64):
        small[j] = a @ small[j - 1]
    big = small[63] @ a
    block = np.eye(2)
    for m in range(0, n + 1, 64):
        k = min(64, n + 1 - m)
        p[m:m + k] = small[:k] @ block
        block = big @ block
    ke = np.abs(p[:, 0, 0]) * t * t / 2.0 + np.abs(p[:, 0, 1]) * t
    kv = np.abs(p[:, 1, 0]) * t * t / 2.0 + np.abs(p[:, 1, 1]) * t
    for x in (p, ke, kv):
        x.flags.writeable = False
    return p, ke, kv


def friction_velocity_change(fr, ref_lo, ref_hi, v):
    """
    ``sup |f(x_d) - f(x)|`` [N·m] over ``x_d`` in ``[ref_lo, ref_hi]`` and ``|x - x_d| <= v``.

    ``f(x) = b x + (tau_c + tau_s exp(-(x / v_s)^2)) tanh(x / eps)`` (friction.py). Viscous:
    ``b v``. Coulomb: ``tau_c (tanh((x_d + v) / eps) - tanh(x_d / eps))``, whose largest
    value over ``x_d`` is at ``x_d = -v / 2`` (mirror: ``+v / 2`` for ``x = x_d - v``), so it
    is taken at the point of the interval nearest to that (at most ``2 tau_c``, about
    ``tau_c v / eps`` for a small ``v``). Stribeck: ``tau_s min(L v, 2)`` with its Lipschitz
    constant ``L = 1 / eps + sqrt(2 / e) / v_s``. Arrays broadcast.
    """
    v = np.asarray(v, dtype=float)

    def up(x):
        return np.tanh((x + v) / fr.eps) - np.tanh(x / fr.eps)

    coul = np.maximum(up(np.clip(-0.5 * v, ref_lo, ref_hi)),
                      up(np.clip(0.5 * v, ref_lo, ref_hi) - v))
    out = fr.b * v + fr.tau_c * coul
    if fr.tau_s:
        lip = 1.0 / fr.eps + math.sqrt(2.0 / math.e) / fr.v_s
        out = out + fr.tau_s * np.minimum(lip * v, 2.0)
    return out


def bound_assumptions(scenario: Scenario) -> tuple:
    """Return what of ``scenario`` the proof of :func:`error_bound` does not cover."""
    plant, ctrl = scenario.plant, scenario.controller
    out = []
    if ctrl.law != 'computed_torque':
        out.append(f'law {ctrl.law}')
    if plant.actuator != 'ideal':
        out.append('motor drives')
    s = plant.sensors
    if s.encoder_counts or s.position_noise_std or s.velocity_noise_std or \
            s.velocity_source != 'true':
        out.append('sensor quantization, noise or filtering')
    if any(k != 0.0 for k in ctrl.ki):
        out.append('integral action')
    if any(k != 0.0 for k in ctrl.joint_stiffness):
        out.append('joint stiffness')
    if plant.friction_model != 'smooth':
        out.append(f'{plant.friction_model} friction')
    return tuple(out)


def _model_difference(a: TwoLinkModel, b: TwoLinkModel) -> tuple:
    """Return ``a - b`` in the closed form's coefficients ``(a, b, d12, d22, g1, g2)``."""
    return (a.a - b.a, a.b - b.b, a.d12 - b.d12, a.d22 - b.d22, a.g1 - b.g1, a.g2 - b.g2)


def error_bound(scenario: Scenario, nominal: NominalModel | None = None, kp=None, kd=None,
                reference=None, spread: float | None = None, max_iterations: int = 50,
                cell: int = 10) -> BoundResult:
    r"""
    Proven bound on the late-window tracking error of a computed-torque run.

    Over each control period the plant ``M(q) qdd + n(q, qd) = tau_k`` is driven by the
    held command ``tau_k = M^(q_k) v_k + n^(q_k, qd_k)``, ``v_k = qdd_d(t_k) - Kd e_dot_k
    - Kp e_k``, so per joint ``e_dd = -kd e_dot_k - kp e_k + d(t)`` with

    .. math::

        d = \eta_k + \rho(t) + \ddot q_d(t_k) - \ddot q_d(t), \qquad
        \eta_k = M_k^{-1}(\tilde M_k v_k + \tilde n_k) = \hat M_k^{-1}(\tilde M_k
        \ddot q_k + \tilde n_k)

    (``~`` = nominal - true; ``rho`` the change of ``M^-1 (tau_k - n)`` within the period;
    with friction compensation, applied at the reference velocity, ``n~`` holds
    ``f^(qd_d) - f(qd)``, bounded with :func:`friction_velocity_change`).
    Exactly, ``x_{k+1} = A x_k + w_k`` with ``|w_k| <= (T^2/2, T) sup |d|``, so
    ``|e_k| <= |(A^k x_0)_e| + sum_i Ke[k-1-i] dbar_i`` (:func:`_zoh_kernels`). ``dbar`` is
    bounded by interval arithmetic over the envelope ``|e_i| <= E_i``, ``|e_dot_i| <= V_i``
    around the reference, ``E``, ``V`` are iterated to a fixed point and the bound holds by
    induction over the ticks once the envelope reproduces itself strictly. The derivation
    is in docs/identification.md.

    Parameters
    ----------
    scenario : Scenario
        Plant (the truth), controller, trajectory, rate, duration and initial state.
    nominal : NominalModel, optional
        The controller's model (default: the scenario's).
    kp, kd : sequence of 2 float, optional
        Gains (default: the scenario's).
    reference : tuple, optional
        ``(q_d, qd_d, qdd_d)`` over the late window for the estimate (see
        :func:`late_reference`).
    spread : float, optional
        Bound every nominal model whose ``m1, m2, I1, I2`` are the plant's times
        ``1 + delta``, ``|delta| <= spread`` (the draws of a study level; the other fields
        as in ``nominal``, which should then be :func:`perturbed_nominal` at zero) instead
        of ``nominal`` alone. The estimate stays that of ``nominal``.
    max_iterations : int
        Fixed-point iterations before giving up (bound ``inf``).
    cell : int
        ``eta`` is bounded over groups of this many ticks at once (faster, a little looser).

    Returns
    -------
    BoundResult

    """
    plant, ctrl = scenario.plant, scenario.controller
    nominal = ctrl.nominal if nominal is None else nominal
    kp = np.asarray(ctrl.kp if kp is None else kp, dtype=float)
    kd = np.asarray(ctrl.kd if kd is None else kd, dtype=float)
    estimate = iss_estimate(scenario, nominal, kp, kd, reference=reference)
    assumptions = bound_assumptions(scenario)
    period = scenario.period
    n = scenario.n_ticks
    t = np.arange(n) * period
    late = t >= late_window(scenario).start - 1e-12
    true = plant_model(plant)
    nom = TwoLinkModel(nominal.arm, nominal.rotor_inertia, nominal.rotor_coupling_terms)
    traj = trajectory_from_config(dict(scenario.trajectory), 2)
    q_d, qd_d, qdd_d = traj.sample_many(t)
    tb = traj.bounds()
    fine = np.arange(10 * n + 3) * (period / 10.0) - period / 10.0
    jerk = 1.1 * np.abs(np.diff(traj.sample_many(fine)[2], axis=0)).max(axis=0) / \
        (period / 10.0)                    # sup |qddd_d|: differences, 10 % margin
    x0 = initial_state(plant)
    e0 = np.array([x0[0] - q_d[0, 0], x0[1] - q_d[0, 1]])
    ed0 = np.array([x0[2] - qd_d[0, 0], x0[3] - qd_d[0, 1]])
    kern = [_zoh_kernels(float(kp[j]), float(kd[j]), period, n) for j in range(2)]
    free = [np.abs(kern[j][0][:n] @ np.array([e0[j], ed0[j]])) for j in range(2)]
    comp = bool(ctrl.friction_compensation)
    fn, fp = nominal.friction, plant.friction
    # functions of c = cos q2: true M^-1, Delta = M^-1 M~, and the gravity / Coriolis
    # coefficients of M^-1 n~ (grouped by their trigonometric factor)
    A, B, D12, D22 = true.a, true.b, true.d12, true.d22

    def det(c):
        return (A + 2.0 * B * c) * D22 - (D12 + B * c) ** 2

    def minv(j, k):
        if (j, k) == (0, 0):
            return lambda c: D22 / det(c)
        if (j, k) == (1, 1):
            return lambda c: (A + 2.0 * B * c) / det(c)
        return lambda c: -(D12 + B * c) / det(c)

    # the mismatch as weighted directions: nominal - true = sum_p delta_p u_p, |delta_p| <=
    # w_p; eta is linear in it, so |eta_j| <= sum_p w_p |X_pj| + |friction part|
    if spread is None:
        directions = [(_model_difference(nom, true), 1.0)]
    else:
        directions = []
        for name in PERTURBED:
            arm = dataclasses.replace(nominal.arm, **{name: 2.0 * getattr(nominal.arm, name)})
            unit = TwoLinkModel(arm, nominal.rotor_inertia, nominal.rotor_coupling_terms)
            directions.append((_model_difference(unit, nom), float(spread)))
    F = {}
    for j in range(2):
        for k in range(2):
            F['minv', j, k] = _CosFunction(minv(j, k))
    for p, (u, _) in enumerate(directions):
        da, db, dd12, dd22, dg1, dg2 = u
        mt = {(0, 0): lambda c, da=da, db=db: da + 2.0 * db * c,
              (0, 1): lambda c, dd12=dd12, db=db: dd12 + db * c,
              (1, 1): lambda c, dd22=dd22: dd22 + 0.0 * c}
        mt[1, 0] = mt[0, 1]
        for j in range(2):
            for k in range(2):
                F['delta', p, j, k] = _CosFunction(
                    lambda c, j=j, k=k, mt=mt: minv(j, 0)(c) * mt[0, k](c)
                    + minv(j, 1)(c) * mt[1, k](c))
            F['alpha', p, j] = _CosFunction(lambda c, j=j, g=dg1: minv(j, 0)(c) * g)
            F['beta', p, j] = _CosFunction(
                lambda c, j=j, g=dg2: (minv(j, 0)(c) + minv(j, 1)(c)) * g)
            F['gam1', p, j] = _CosFunction(lambda c, j=j, b=db: -b * minv(j, 0)(c))
            F['gam2', p, j] = _CosFunction(lambda c, j=j, b=db: b * minv(j, 1)(c))
    det_min = float(det(np.linspace(-1.0, 1.0, 100001)).min()) * (1.0 - 1e-6)
    if not det_min > 0.0:
        raise ParameterError('plant: inertia matrix not positive definite')
    minv_max = np.array([[D22, abs(D12) + abs(B)], [abs(D12) + abs(B), A + 2.0 * abs(B)]]) \
        / det_min

    def law(f, sign, qd):
        """Interval of ``sign f(qd)`` over the interval ``qd``."""
        ones = np.ones_like(qd[0])
        coul = (sign * f.tau_c * np.tanh(qd[0] / f.eps), sign * f.tau_c * np.tanh(qd[1] / f.eps))
        coul = (np.minimum(*coul), np.maximum(*coul))
        visc = (sign * f.b * qd[0], sign * f.b * qd[1])
        visc = (np.minimum(*visc), np.maximum(*visc))
        return _iadd(visc, coul, (-f.tau_s * ones, f.tau_s * ones))

    def friction_mismatch(j, qd, ref, v):
        """
        Interval of the friction the plant sees beyond the command's at the tick.

        Without compensation ``-f_j(qd)`` over the box. With it the controller adds the
        nominal friction at the reference velocity, so the plant sees ``f^_j(qd_d) -
        f_j(qd) = (f^_j - f_j)(qd_d) + (f_j(qd_d) - f_j(qd))``: the model's error at the
        reference, plus the friction's change over the velocity error ``|qd - qd_d| <= V``
        (:func:`friction_velocity_change`), which is not zero when ``f^ = f``.
        """
        a, b = fn[j], fp[j]
        if not comp:
            return law(b, -1.0, qd)
        if (a.b, a.tau_c, a.eps, a.tau_s, a.v_s) == (b.b, b.tau_c, b.eps, b.tau_s, b.v_s):
            model = (np.zeros_like(ref[0]), np.zeros_like(ref[0]))
        else:
            model = _iadd(law(a, 1.0, ref), law(b, -1.0, ref))
        change = friction_velocity_change(b, ref[0], ref[1], v)
        return model[0] - change, model[1] + change

    # eta is bounded over cells of `cell` ticks at once (the hull of the ticks' boxes)
    n_cells = -(-n // cell)

    def cells(x, how):
        pad = np.concatenate([x, np.repeat(x[-1:], n_cells * cell - n, axis=0)])
        return how(pad.reshape(n_cells, cell, 2), axis=1)

    ref = [(cells(r, np.min), cells(r, np.max)) for r in (q_d, qd_d, qdd_d)]

    def eta_at_ticks(E, V):
        E, V = cells(E, np.max), cells(V, np.max)
        (q_lo, q_hi), (qd_lo, qd_hi), (a_lo, a_hi) = ref
        q = [(q_lo[:, j] - E[:, j], q_hi[:, j] + E[:, j]) for j in range(2)]
        qd = [(qd_lo[:, j] - V[:, j], qd_hi[:, j] + V[:, j]) for j in range(2)]
        fb = [kd[j] * V[:, j] + kp[j] * E[:, j] for j in range(2)]
        v = [(a_lo[:, j] - fb[j], a_hi[:, j] + fb[j]) for j in range(2)]
        c2 = _icos(*q[1])
        s2 = _icos(q[1][0] - 0.5 * np.pi, q[1][1] - 0.5 * np.pi)
        c1 = _icos(*q[0])
        c12 = _icos(q[0][0] + q[1][0], q[0][1] + q[1][1])
        cor1 = _iadd(_imul((2.0, 2.0), _imul(qd[0], qd[1])), _isq(qd[1]))
        cor2 = _isq(qd[0])
        fm = [friction_mismatch(j, qd[j], (qd_lo[:, j], qd_hi[:, j]), V[:, j])
              for j in range(2)]
        out = []
        for j in range(2):
            r = _iadd(_imul(F['minv', j, 0].over(*c2), fm[0]),
                      _imul(F['minv', j, 1].over(*c2), fm[1]))
            total = np.maximum(np.abs(r[0]), np.abs(r[1]))
            for p, (_, weight) in enumerate(directions):
                x = _iadd(_imul(F['delta', p, j, 0].over(*c2), v[0]),
                          _imul(F['delta', p, j, 1].over(*c2), v[1]),
                          _imul(F['alpha', p, j].over(*c2), c1),
                          _imul(F['beta', p, j].over(*c2), c12),
                          _imul(s2, _iadd(_imul(F['gam1', p, j].over(*c2), cor1),
                                          _imul(F['gam2', p, j].over(*c2), cor2))))
                total = total + weight * np.maximum(np.abs(x[0]), np.abs(x[1]))
            out.append(total)
        return np.repeat(np.column_stack(out), cell, axis=0)[:n]

    def within_period(E, V, eta):
        """
        ``sup |rho| + T sup |qddd_d|`` per tick and joint: the change within each period.

        Per tick (from that tick's envelope), not from the envelope's largest value over
        the run: a global maximum (the initial transient) would feed every late tick and
        keep a small mismatch's envelope from reproducing itself.
        """
        base = kd * V + kp * E + eta + jerk * period        # |e_dd| without rho, (n, 2)
        qdm = np.abs(tb.velocity_max) + V

        def rho(acc):          # acc: bound on |e_dd|, (n, 2)
            qddm = np.abs(tb.acceleration_max) + acc
            qdx = qdm + acc * period
            z = abs(B) * qdx[:, 1:2] * period * np.column_stack(
                [2.0 * qddm[:, 0] + qddm[:, 1], qddm[:, 0]])
            dn1 = (abs(B) * (qdx[:, 1] * (2.0 * qdx[:, 0] * qdx[:, 1] + qdx[:, 1] ** 2)
                             + 2.0 * qddm[:, 0] * qdx[:, 1] + 2.0 * qdx[:, 0] * qddm[:, 1]
                             + 2.0 * qdx[:, 1] * qddm[:, 1])
                   + abs(true.g1) * qdx[:, 0] + abs(true.g2) * (qdx[:, 0] + qdx[:, 1]))
            dn2 = (abs(B) * (qdx[:, 1] * qdx[:, 0] ** 2 + 2.0 * qdx[:, 0] * qddm[:, 0])
                   + abs(true.g2) * (qdx[:, 0] + qdx[:, 1]))
            dn = np.column_stack([dn1, dn2])
            for j, f in enumerate(fp):
                dn[:, j] += (f.b + (f.tau_c + 2.0 * f.tau_s) / f.eps
                             + 2.0 * f.tau_s / f.v_s) * qddm[:, j]
            return (z + period * dn) @ minv_max.T

        r0 = rho(np.zeros_like(E))
        r1 = np.stack([rho(np.broadcast_to(np.eye(2)[k], E.shape)) - r0 for k in range(2)],
                      axis=2)                                   # (n, 2, 2), column k
        lhs = np.eye(2) - r1
        if np.any(np.linalg.det(lhs) <= 0.0):
            return None
        inv = np.linalg.inv(lhs)
        if np.any(inv < -1e-12):
            return None
        acc = np.einsum('nij,nj->ni', inv, base + r0)          # |e_dd| <= acc
        # rho is quadratic in acc (terms of order T^2): make acc >= base + rho(acc) hold
        for _ in range(20):
            need = base + rho(acc)
            if np.all(need <= acc):
                break
            acc = np.maximum(acc, need) * (1.0 + 1e-6)
        else:
            return None
        return rho(acc) + jerk * period

    from scipy.signal import fftconvolve

    def envelope(E, V):
        """Return the envelope that (E, V) implies, or None (no bound)."""
        eta = eta_at_ticks(E, V)
        extra = within_period(E, V, eta)
        if extra is None:
            return None
        dbar = eta + extra
        new_e, new_v = np.empty((n, 2)), np.empty((n, 2))
        for j in range(2):
            _, ke, kv = kern[j]
            new_e[:, j] = free[j][:, 0]
            new_v[:, j] = free[j][:, 1]
            # tick k sees w_i, i < k, through A^(k-1-i)
            new_e[1:, j] += np.maximum(fftconvolve(dbar[:, j], ke)[:n - 1], 0.0)
            new_v[1:, j] += np.maximum(fftconvolve(dbar[:, j], kv)[:n - 1], 0.0)
        return new_e, new_v

    # Any (E, V) whose implied envelope is strictly inside it gives a bound (the implied
    # one). Search: one pass from zero, then twice that; if it holds, shrink while it does,
    # else grow until it does (or no bound).
    bound = np.full(2, math.inf)
    it = 1
    first = envelope(np.zeros((n, 2)), np.zeros((n, 2)))
    if first is not None:
        E, V = 2.0 * first[0] + 1e-12, 2.0 * first[1] + 1e-12
        held = False
        for it in range(2, max_iterations + 1):
            new = envelope(E, V)
            ok = new is not None and np.all(new[0] < E) and np.all(new[1] < V)
            if ok:
                previous = bound
                bound = new[0][late].max(axis=0)
                held = True
                if np.all(bound > 0.99 * previous):
                    break          # shrinking no longer pays
                E, V = new[0] * 1.02 + 1e-12, new[1] * 1.02 + 1e-12
            elif held or new is None or np.any(new[0] > math.pi) or \
                    not np.all(np.isfinite(new[0])):
                break              # keep the last bound that held (if any)
            else:
                E = np.maximum(E, new[0]) * 1.05 + 1e-12
                V = np.maximum(V, new[1]) * 1.05 + 1e-12
    return BoundResult(bound=bound, estimate=estimate, assumptions=assumptions, iterations=it)


def run_scenario(scenario: Scenario, nominal: NominalModel, kp, kd,
                 adapt: bool = False) -> Scenario:
    """``scenario`` with the controller's nominal model and gains replaced [, adaptive]."""
    ctrl = dataclasses.replace(scenario.controller, nominal=nominal, kp=tuple(kp),
                               kd=tuple(kd))
    if adapt:
        ctrl = dataclasses.replace(
            ctrl, adaptation=dataclasses.replace(ctrl.adaptation, enabled=True))
    return dataclasses.replace(scenario, controller=ctrl)


def single_run(scenario: Scenario, nominal: NominalModel, kp, kd) -> tuple:
    """
    One run on its own (:func:`run_closed_loop`): late-window max |e| per joint, saturated.

    The study computes the same figures for all runs at once with
    :func:`manip_control.simulation.run_batch`; this is the one-run reference.
    """
    result = run_closed_loop(run_scenario(scenario, nominal, kp, kd))
    late = result.t >= late_window(scenario).start
    err = np.abs(result.error[late]).max(axis=0)
    return tuple(float(e) for e in err), bool(result.saturated.any())


def gain_sets(controller: ControllerParameters, scale: float,
              adapt: bool = False) -> dict[str, tuple]:
    """Gain set ``A`` (the scenario's), ``B`` (``wn`` scaled by ``scale``), [``adaptive``]."""
    kp, kd = tuple(controller.kp), tuple(controller.kd)
    gains = {'A': (kp, kd),
             'B': (tuple(scale * scale * k for k in kp), tuple(scale * k for k in kd))}
    if adapt:
        gains[ADAPTIVE] = (kp, kd)
    return gains


def make_specs(levels: Sequence[float], runs: int, seed: int,
               gains: dict[str, tuple], size: int = len(PERTURBED)) -> list[RunSpec]:
    """Return all runs: per level and run index one seeded draw of ``size`` errors."""
    specs = []
    for li, level in enumerate(levels):
        for r in range(runs):
            rng = np.random.default_rng(np.random.SeedSequence([seed, li, r]))
            delta = tuple(float(x) for x in rng.uniform(-level, level, size))
            for name, (kp, kd) in gains.items():
                specs.append(RunSpec(name, float(level), r, delta, kp, kd))
    return specs


def run_study(scenario: Scenario, levels: Sequence[float] = DEFAULT_LEVELS,
              runs: int = DEFAULT_RUNS, seed: int = 0, jobs: int | None = None,
              gain_scale: float = DEFAULT_GAIN_SCALE,
              progress: Callable[[int, int], None] | None = None,
              with_bound: bool = True, adapt: bool = False) -> list[RunResult]:
    """
    Run the Monte Carlo study (see the module docstring); deterministic for a seed.

    Parameters
    ----------
    scenario : Scenario
        Computed-torque scenario; its plant is the truth around which the nominal is drawn.
    levels : sequence of float
        Mismatch levels ``s`` in (0, 1): relative errors drawn from ``U[-s, s]``.
    runs : int
        Runs per level (and per gain set).
    seed : int
        Base seed.
    jobs : int, optional
        Threads running the compiled kernel, or processes on the Python path (default:
        number of CPUs, at most 8). Results do not depend on it.
    gain_scale : float
        ``S`` of gain set B (``wn -> S wn``).
    progress : callable, optional
        ``progress(done, total)`` as runs finish.
    with_bound : bool
        Compute the proven bound of each level and gain set (:func:`error_bound` with
        ``spread``; a few seconds each); otherwise ``nan``.
    adapt : bool
        Run every draw with adaptive computed torque too (gain set :data:`ADAPTIVE`: gain
        set A's gains; estimate and bound ``nan``), on the Python loop.

    """
    if scenario.controller.law != 'computed_torque':
        raise ParameterError('controller.law: the robustness study needs computed_torque '
                             f'(got {scenario.controller.law})')
    _check_study(levels, runs, gain_scale)
    if jobs is not None and jobs < 1:
        raise ParameterError(f'jobs: must be >= 1 (got {jobs})')
    specs = make_specs(levels, runs, seed, gain_sets(scenario.controller, gain_scale, adapt))
    nominals = [perturbed_nominal(scenario, s.delta) for s in specs]
    batch = run_batch([run_scenario(scenario, nm, s.kp, s.kd, s.gain_set == ADAPTIVE)
                       for s, nm in zip(specs, nominals)], jobs=jobs, progress=progress)
    reference = late_reference(scenario)
    bounds = {}
    centre = perturbed_nominal(scenario, (0.0,) * len(PERTURBED))
    for spec in specs:
        key = (spec.gain_set, spec.level)
        if key not in bounds:
            if with_bound and spec.gain_set != ADAPTIVE and not bound_assumptions(scenario):
                b = error_bound(scenario, centre, spec.kp, spec.kd, reference=reference,
                                spread=spec.level).bound
                bounds[key] = tuple(float(x) for x in b)
            else:
                bounds[key] = (math.nan, math.nan)
    results = []
    for i, (spec, nm) in enumerate(zip(specs, nominals)):
        est = ((math.nan, math.nan) if spec.gain_set == ADAPTIVE else
               iss_estimate(scenario, nm, spec.kp, spec.kd, reference=reference))
        results.append(RunResult(spec, tuple(float(e) for e in batch.late_max_error[i]),
                                 tuple(float(p) for p in est),
                                 bounds[(spec.gain_set, spec.level)], bool(batch.saturated[i])))
    return results


def _check_study(levels: Sequence[float], runs: int, gain_scale: float) -> None:
    if not levels or any(not 0.0 < s < 1.0 for s in levels):
        raise ParameterError(f'levels: each must be in (0, 1) (got {list(levels)})')
    if runs < 1:
        raise ParameterError(f'runs: must be >= 1 (got {runs})')
    if not gain_scale > 0.0:
        raise ParameterError(f'gain_scale: must be > 0 (got {gain_scale})')


def urdf_gain_sets(n: int, omega_n: float, scale: float,
                   adapt: bool = False) -> dict[str, tuple]:
    """Gain set ``A`` (bandwidth ``omega_n`` [rad/s]), ``B`` (``scale omega_n``) [, adaptive]."""
    sets = (('A', omega_n), ('B', scale * omega_n)) + (((ADAPTIVE, omega_n),) if adapt else ())
    return {name: tuple(tuple(float(k) for k in g) for g in gains_from_bandwidth(n, w))
            for name, w in sets}


def _urdf_run_figures(args: tuple) -> tuple[tuple[float, ...], bool]:
    """One run of :func:`run_urdf_study` (a worker's task): late max error, saturated."""
    path, duration, actuator, scale, omega_n, adapt = args
    run = run_urdf_closed_loop(path, duration=duration, actuator=actuator,
                               nominal_scale=scale, omega_n=omega_n,
                               adaptation=AdaptationParameters(enabled=True) if adapt else None)
    late = summarize_urdf_run(run)['late_max_error_rad']
    limit = np.asarray(run.plant.torque_limit, dtype=float)
    saturated = bool(np.any(np.abs(run.run.tau) >= limit * (1.0 - 1e-12)))
    return tuple(float(e) for e in late), saturated


def run_urdf_study(path: str, levels: Sequence[float] = DEFAULT_LEVELS,
                   runs: int = DEFAULT_RUNS, seed: int = 0,
                   gain_scale: float = DEFAULT_GAIN_SCALE, *, duration: float = 5.0,
                   actuator: str = 'ideal', omega_n: float = 20.0, jobs: int | None = None,
                   progress: Callable[[int, int], None] | None = None, adapt: bool = False
                   ) -> tuple[list[RunResult], dict[str, tuple]]:
    """
    Run the Monte Carlo study on an arm from its URDF; deterministic for a seed.

    Each run's nominal model has body ``i`` (moved by joint ``i``) with mass and rotational
    inertia times ``1 + delta_i``, ``delta_i ~ U[-s, s]``; the plant is the description
    itself. The computed-torque loop runs offline for ``duration`` [s]
    (:func:`manip_control.arm_scenario.run_urdf_closed_loop`, reference inside the joint
    limits); the error is the late-window (second half) max ``|q - q_d|`` per joint [rad].

    Parameters
    ----------
    path : str
        ``.urdf`` or ``.xacro`` file.
    levels, runs, seed, gain_scale, progress
        As :func:`run_study`.
    duration : float
        Simulated time per run [s].
    actuator : {'ideal', 'motor'}
        Ideal torque sources (the model error alone) or the sized DC-motor drives.
    omega_n : float
        Bandwidth of gain set A [rad/s] (``Kp = wn^2``, ``Kd = 2 wn``).
    jobs : int, optional
        Worker processes (default: the number of CPUs, at most 8; 1: in this process). The
        results do not depend on it: each run is a function of its draw alone.
    adapt : bool
        Run every draw with adaptive computed torque too (gain set :data:`ADAPTIVE`, gain
        set A's bandwidth; the law's default settings).

    Returns
    -------
    results : list of RunResult
        Estimate and bound ``nan`` (the 2R's only).
    gains : dict
        ``{'A': (kp, kd), 'B': (kp, kd)}`` (and ``'adaptive'``).

    Raises
    ------
    ParameterError
        Bad study option.
    ArmModelError, UrdfError
        Bad description or run option.

    """
    _check_study(levels, runs, gain_scale)
    n = UrdfArm.from_string(read_urdf_file(path), None, source=str(path)).n
    gains = urdf_gain_sets(n, omega_n, gain_scale, adapt)
    bandwidth = {'A': omega_n, 'B': gain_scale * omega_n, ADAPTIVE: omega_n}
    specs = make_specs(levels, runs, seed, gains, size=n)
    if jobs is not None and jobs < 1:
        raise ParameterError(f'jobs: must be >= 1 (got {jobs})')
    jobs = max(1, min(int(jobs or min(8, os.cpu_count() or 1)), len(specs)))
    nan = (math.nan,) * n
    work = [(str(path), duration, actuator, tuple(1.0 + d for d in spec.delta),
             bandwidth[spec.gain_set], spec.gain_set == ADAPTIVE) for spec in specs]
    results = []

    def collect(figures) -> None:
        for late, saturated in figures:
            results.append(RunResult(specs[len(results)], late, nan, nan, saturated))
            if progress is not None:
                progress(len(results), len(specs))

    if jobs == 1:
        collect(map(_urdf_run_figures, work))
    else:
        # spawned workers (each loads Pinocchio and the compiled plant once); small chunks
        # keep the progress moving and the cores busy to the end
        ctx = multiprocessing.get_context('spawn')
        with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
            collect(pool.map(_urdf_run_figures, work,
                             chunksize=max(1, len(work) // (8 * jobs))))
    return results, gains


class ProgressBar:
    """
    A one-line progress bar ``[#####.....] done/total runs, elapsed, ETA`` on a stream.

    Silent when ``enabled`` is false or the stream is not a terminal. Use as
    ``progress(done, total)`` and call :meth:`close` at the end.
    """

    def __init__(self, stream: TextIO | None = None, enabled: bool = True,
                 width: int = 30, min_interval: float = 0.1):
        self.stream = sys.stderr if stream is None else stream
        isatty = getattr(self.stream, 'isatty', None)
        self.enabled = bool(enabled and isatty is not None and isatty())
        self.width = width
        self.min_interval = min_interval
        self._t0 = time.perf_counter()
        self._last = -math.inf
        self._shown = False

    def __call__(self, done: int, total: int) -> None:
        """Redraw for ``done`` of ``total`` runs (throttled to ``min_interval``)."""
        if not self.enabled:
            return
        now = time.perf_counter()
        if done < total and now - self._last < self.min_interval:
            return
        self._last = now
        elapsed = now - self._t0
        frac = done / total if total else 1.0
        fill = int(round(frac * self.width))
        eta = f', ETA {elapsed / frac - elapsed:4.0f} s' if 0 < done < total else ''
        self.stream.write(f'\r[{"#" * fill}{"." * (self.width - fill)}] {done}/{total} runs, '
                          f'{elapsed:5.1f} s{eta}   ')
        self.stream.flush()
        self._shown = True

    def close(self) -> None:
        """End the bar's line."""
        if self._shown:
            self.stream.write('\n')
            self.stream.flush()
            self._shown = False


@dataclass
class LevelSummary:
    """Figures of one gain set and mismatch level (maxima over joints and runs)."""

    gain_set: str
    level: float
    runs: int
    median_error: float
    max_error: float
    max_estimate: float
    bound: float
    """Proven bound for every draw of the level (``inf``: none; ``nan``: not applicable)."""

    @property
    def estimate_ratio(self) -> float:
        """Measured max / estimate max (runs exceed the estimate: it is not a bound)."""
        return self.max_error / self.max_estimate if self.max_estimate > 0 else math.inf

    @property
    def ratio(self) -> float:
        """Measured max / proven bound (<= 1 always; ``nan`` without a bound)."""
        return self.max_error / self.bound if self.bound > 0 else math.nan


def summarize(results: Sequence[RunResult]) -> list[LevelSummary]:
    """Per gain set and level: median / max of ``max_j e_j``, max estimate, the bound."""
    out = []
    keys = sorted({(r.spec.gain_set, r.spec.level) for r in results})
    for gs, level in keys:
        sel = [r for r in results if r.spec.gain_set == gs and r.spec.level == level]
        err = np.array([max(r.error) for r in sel])
        est = np.array([max(r.estimate) for r in sel])
        out.append(LevelSummary(gs, level, len(sel), float(np.median(err)), float(err.max()),
                                float(est.max()), float(max(sel[0].bound))))
    return out


def _bound_text(value: float) -> str:
    if math.isnan(value):
        return 'n/a'
    return 'none' if math.isinf(value) else f'{value:.4g}'


def _gain_text(gains: Sequence[float]) -> str:
    """``a/b/...`` per joint, or one value when every joint has it."""
    if len(set(gains)) == 1:
        return f'{gains[0]:g}'
    return '/'.join(f'{k:g}' for k in gains)


def format_table(summary: Sequence[LevelSummary], gains: dict[str, tuple]) -> str:
    """Return the study's table: measured error, the estimate and the proven bound."""
    lines = [f'{"gains":<24} {"mismatch":>8} {"runs":>5} {"median |e|":>11} {"max |e|":>10} '
             f'{"estimate":>10} {"max/est":>8} {"bound":>10} {"max/bound":>9}']
    for s in summary:
        kp, kd = gains[s.gain_set]
        label = f'{s.gain_set} kp={_gain_text(kp)} kd={_gain_text(kd)}'
        ratio = f'{s.ratio:9.2f}' if np.isfinite(s.bound) else f'{"-":>9}'
        if math.isnan(s.max_estimate):
            est = f'{"n/a":>10} {"-":>8}'
        else:
            est = f'{s.max_estimate:10.4g} {s.estimate_ratio:8.2f}'
        lines.append(f'{label:<24} {100 * s.level:7.1f}% {s.runs:5d} {s.median_error:11.4g} '
                     f'{s.max_error:10.4g} {est} {_bound_text(s.bound):>10} {ratio}')
    return '\n'.join(lines)


def write_csv(path: Path, results: Sequence[RunResult], perturbed: Sequence[str] = PERTURBED,
              joints: Sequence[str] = ('joint1', 'joint2')) -> None:
    """One row per run: its draws (``delta_<perturbed>``), errors, estimates, bounds."""
    with path.open('w', newline='') as fh:
        w = csv.writer(fh)
        w.writerow(['gain_set', 'level', 'run', *[f'delta_{n}' for n in perturbed],
                    'mismatch', *[f'{what}_{j}' for what in ('error', 'estimate', 'bound')
                                  for j in joints], 'saturated'])
        for r in results:
            s = r.spec
            w.writerow([s.gain_set, s.level, s.index, *[f'{d:.6g}' for d in s.delta],
                        f'{s.mismatch:.6g}', *[f'{e:.6g}' for e in r.error],
                        *[f'{p:.6g}' for p in r.estimate], *[f'{b:.6g}' for b in r.bound],
                        int(r.saturated)])


def plot(path: Path, results: Sequence[RunResult], gains: dict[str, tuple],
         title: str, perturbed: str = 'm1, m2, I1, I2') -> None:
    """
    Plot the late-window error, the estimate and the proven bound vs mismatch size (PNG).

    Dots: error per run; rings: the first-order estimate per run; per gain set, the
    per-level maxima joined by lines (solid: measured, dashed: estimate) and the proven
    bound of each level as a dotted line with squares (where the proof gives one).
    """
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=110)
    colours = {'A': 'tab:blue', 'B': 'tab:red', ADAPTIVE: 'tab:green'}
    for gs, (kp, kd) in gains.items():
        sel = [r for r in results if r.spec.gain_set == gs]
        if not sel:
            continue
        c = colours.get(gs, None)
        x = np.array([100 * r.spec.mismatch for r in sel])
        ax.plot(x, [max(r.error) for r in sel], 'o', ms=4, color=c, alpha=0.6)
        ax.plot(x, [max(r.estimate) for r in sel], 'o', ms=6, mfc='none', color=c, alpha=0.5)
        levels = sorted({r.spec.level for r in sel})
        emax = [max(max(r.error) for r in sel if r.spec.level == lv) for lv in levels]
        pmax = [max(max(r.estimate) for r in sel if r.spec.level == lv) for lv in levels]
        bnd = [max(next(r.bound for r in sel if r.spec.level == lv)) for lv in levels]
        lv = [100 * v for v in levels]
        gl = f'kp={_gain_text(kp)}, kd={_gain_text(kd)}'
        ax.plot([0] + lv, [0] + emax, '-', color=c, label=f'{gs} ({gl}): max measured')
        if not all(math.isnan(v) for v in pmax):
            ax.plot([0] + lv, [0] + pmax, '--', color=c,
                    label=f'{gs}: max estimate (first order, not a bound)')
        shown = [(x1, b) for x1, b in zip(lv, bnd) if np.isfinite(b)]
        if shown:
            ax.plot(*zip(*shown), 's:', color=c, ms=5,
                    label=f'{gs}: proven bound, every draw of the level')
    ax.set_xlabel(f'nominal-parameter error  max |delta| over {perturbed}  [%]')
    ax.set_ylabel('late-window max |q - q_d|  [rad]')
    ax.set_title(title)
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc='upper left')
    if any(math.isfinite(e) for r in results for e in r.estimate):
        fig.text(0.01, 0.01, 'dots: measured per run; rings: ISS estimate per run (first '
                 'order: runs exceed it); squares: proven bound (none where the proof gives '
                 'none)', fontsize=7)
    else:
        fig.text(0.01, 0.01, 'dots: measured per run; lines: the maximum of each level',
                 fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def adaptation_comparison(results: Sequence[RunResult],
                          perfect: Sequence[float] | None = None) -> str:
    """
    Per level, the late-window error with and without adaptation over the same draws.

    ``max_j e_j`` of each draw with gain set A's computed torque and with adaptive computed
    torque (same gains, same wrong nominal model): median, 90th percentile, and the share of
    draws whose error adaptation lowers; with ``perfect`` (gain set A's computed torque with
    the plant's own model, per joint [rad]) the share of adaptive draws within 2x of it on
    every joint.
    """
    lines = [f'{"mismatch":>8} {"draws":>6} {"median |e| A":>13} {"adaptive":>10} '
             f'{"p90 |e| A":>10} {"adaptive":>10} {"improved":>9}'
             + (f' {"<= 2x perfect":>14}' if perfect is not None else '')]
    for level in sorted({r.spec.level for r in results if r.spec.gain_set == ADAPTIVE}):
        fixed = {r.spec.index: r.error for r in results
                 if r.spec.gain_set == 'A' and r.spec.level == level}
        adapted = {r.spec.index: r.error for r in results
                   if r.spec.gain_set == ADAPTIVE and r.spec.level == level}
        keys = sorted(set(fixed) & set(adapted))
        a = np.array([max(fixed[k]) for k in keys])
        b = np.array([max(adapted[k]) for k in keys])
        line = (f'{100 * level:7.1f}% {len(keys):6d} {np.median(a):13.4g} '
                f'{np.median(b):10.4g} {np.percentile(a, 90):10.4g} '
                f'{np.percentile(b, 90):10.4g} {100 * np.mean(b < a):8.1f}%')
        if perfect is not None:
            per_joint = np.array([adapted[k] for k in keys])
            within = np.all(per_joint <= 2.0 * np.asarray(perfect), axis=1)
            line += f' {100 * np.mean(within):13.1f}%'
        lines.append(line)
    if perfect is not None:
        lines.append("perfect model (computed torque, gain set A, the plant's own model): "
                     + ' / '.join(f'{e:.4g}' for e in perfect) + ' rad')
    return '\n'.join(lines)


def plot_adaptation(path: Path, results: Sequence[RunResult], title: str,
                    joints: Sequence[str] = ('joint1', 'joint2'),
                    perfect: Sequence[float] | None = None) -> None:
    """
    Plot the distribution of the late-window error with and without adaptation (PNG).

    One panel per joint: the empirical CDF over every draw (all levels) of computed torque
    with gain set A and of adaptive computed torque with the same gains and draws; with
    ``perfect``, computed torque with the plant's own model as a vertical line.
    """
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    n = len(joints)
    cols = min(n, 4)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.6 * rows), dpi=110,
                             squeeze=False)
    for j, name in enumerate(joints):
        ax = axes[j // cols][j % cols]
        for gs, label, colour in (('A', 'computed torque (A)', 'tab:blue'),
                                  (ADAPTIVE, 'adaptive (A gains)', 'tab:green')):
            e = np.sort([r.error[j] for r in results if r.spec.gain_set == gs])
            if e.size:
                ax.step(e, np.arange(1, e.size + 1) / e.size, where='post', color=colour,
                        label=f'{label}: median {np.median(e):.2g} rad')
        if perfect is not None:
            ax.axvline(perfect[j], color='0.3', ls='--', lw=1,
                       label=f'perfect model: {perfect[j]:.2g} rad')
        ax.set_xscale('log')
        ax.set_title(name, fontsize=9)
        ax.set_xlabel('late-window max |q - q_d|  [rad]')
        ax.set_ylabel('share of draws')
        ax.set_ylim(0.0, 1.0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc='lower right')
    for j in range(n, rows * cols):
        axes[j // cols][j % cols].set_visible(False)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _levels(text: str) -> list[float]:
    try:
        return [float(v) for v in text.split(',') if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f'not a comma-separated list of numbers: {text!r}')


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog='manip-robustness',
        description='Monte Carlo over nominal-parameter errors (m1, m2, I1, I2 ~ U[-s, s] '
                    'relative) for computed-torque tracking: late-window error vs the '
                    'ISS-style bound, for the scenario gains and scaled gains.')
    p.add_argument('--scenario', default='seed001', metavar='NAME|FILE',
                   help='computed-torque scenario; its plant is the truth (default seed001)')
    p.add_argument('--levels', type=_levels, default=list(DEFAULT_LEVELS),
                   help='mismatch levels s, comma-separated (default 0.05,0.1,0.15,0.2)')
    p.add_argument('--runs', type=int, default=DEFAULT_RUNS,
                   help=f'runs per level and gain set (default {DEFAULT_RUNS})')
    p.add_argument('--seed', type=int, default=0, help='base seed (default 0)')
    p.add_argument('--jobs', type=int, default=None,
                   help='parallel workers (default: CPU count, at most 8)')
    p.add_argument('--gain-scale', type=float, default=DEFAULT_GAIN_SCALE,
                   help='gain set B scales wn by this (kp by its square; default 2)')
    p.add_argument('--out', default='robustness', metavar='DIR',
                   help='output directory for robustness.png and robustness.csv '
                        '(default ./robustness)')
    p.add_argument('--quiet', action='store_true',
                   help='no progress bar (it is shown only when stderr is a terminal)')
    p.add_argument('--urdf', default=None, metavar='FILE',
                   help='any serial arm: the study on this URDF (or xacro), one error per '
                        "joint's body (mass and inertia), instead of --scenario")
    p.add_argument('--duration', type=float, default=5.0,
                   help='with --urdf: simulated time per run [s] (default 5; late window: '
                        'the second half)')
    p.add_argument('--actuator', choices=('ideal', 'motor'), default='ideal',
                   help='with --urdf: ideal torque sources (the model error alone; default) '
                        'or the sized DC-motor drives')
    p.add_argument('--omega-n', type=float, default=20.0,
                   help='with --urdf: bandwidth of gain set A [rad/s] (default 20)')
    p.add_argument('--adapt', action='store_true',
                   help="run every draw with adaptive computed torque too (gain set A's "
                        'gains, the same wrong nominal model; the Python loop): the '
                        'comparison table and adaptation.png')
    return p


def _write_outputs(out_dir: str, results: Sequence[RunResult], gains: dict[str, tuple],
                   title: str, saturation_note: str,
                   perturbed: tuple = (PERTURBED, 'm1, m2, I1, I2'),
                   joints: Sequence[str] = ('joint1', 'joint2'),
                   perfect: Sequence[float] | None = None) -> Path:
    """Write robustness.csv, robustness.png [, adaptation.png] into ``out_dir``; print tables."""
    out = Path(out_dir)
    adaptive = ADAPTIVE in gains
    try:
        out.mkdir(parents=True, exist_ok=True)
        write_csv(out / 'robustness.csv', results, perturbed[0], joints)
        plot(out / 'robustness.png', results, gains, title, perturbed=perturbed[1])
        if adaptive:
            plot_adaptation(out / 'adaptation.png', results,
                            f'{title.split(":")[0]}: late-window error with and without '
                            'adaptation, same draws', joints, perfect)
    except OSError as exc:
        raise ParameterError(f'{out}: cannot write ({exc.strerror})') from None
    print(format_table(summarize(results), gains))
    if adaptive:
        print('with and without adaptation (max over joints per draw; gain set A):')
        print(adaptation_comparison(results, perfect))
    sat = sum(r.saturated for r in results)
    if sat:
        print(f'note: {sat} runs hit the torque limit{saturation_note}')
    return out


def _written(out: Path, adapt: bool) -> str:
    names = ('robustness.png', 'robustness.csv') + (('adaptation.png',) if adapt else ())
    return ', '.join(str(out / name) for name in names)


def _main_urdf(args) -> None:
    """Run the study on a URDF arm (``--urdf``): header, table, CSV and plot."""
    if args.jobs is not None and args.jobs < 1:
        raise ParameterError(f'--jobs: must be >= 1 (got {args.jobs})')
    try:
        arm = UrdfArm.from_string(read_urdf_file(args.urdf), None, source=str(args.urdf))
        _check_study(args.levels, args.runs, args.gain_scale)
        n = len(args.levels) * args.runs * (3 if args.adapt else 2)
        print(f'{args.urdf}: {arm.n} joints, {n} runs ({args.runs} per level and gain set), '
              f'{args.duration:g} s each ({args.actuator} actuators), late window from '
              f'{0.5 * args.duration:g} s')
        t0 = time.perf_counter()
        bar = ProgressBar(sys.stderr, enabled=not args.quiet)
        try:
            results, gains = run_urdf_study(
                args.urdf, args.levels, args.runs, args.seed, args.gain_scale,
                duration=args.duration, actuator=args.actuator, omega_n=args.omega_n,
                jobs=args.jobs, progress=bar, adapt=args.adapt)
        finally:
            bar.close()
    except ArmModelError as exc:
        raise ParameterError(str(exc)) from None
    elapsed = time.perf_counter() - t0
    perfect = None
    if args.adapt:
        perfect = _urdf_run_figures((str(args.urdf), args.duration, args.actuator,
                                     (1.0,) * arm.n, args.omega_n, False))[0]
    out = _write_outputs(args.out, results, gains,
                         f'{Path(args.urdf).stem}: computed torque under nominal-model error',
                         '', perturbed=(arm.joint_names, "each joint's body mass and inertia"),
                         joints=arm.joint_names, perfect=perfect)
    print('estimate and bound: the planar 2R study only (--scenario)')
    print(f'{n} runs in {elapsed:.1f} s; wrote {_written(out, args.adapt)}')


def main(argv: Sequence[str] | None = None) -> int:
    """``manip-robustness`` entry point; returns the exit code (2 on any error)."""
    args = build_parser().parse_args(argv)
    if args.urdf is not None:
        try:
            _main_urdf(args)
        except ParameterError as exc:
            print(f'error: {exc}', file=sys.stderr)
            return 2
        return 0
    try:
        scenario = load_scenario(args.scenario)
        if args.jobs is not None and args.jobs < 1:
            raise ParameterError(f'--jobs: must be >= 1 (got {args.jobs})')
        gains = gain_sets(scenario.controller, args.gain_scale, args.adapt)
        n = len(args.levels) * args.runs * len(gains)
        print(f'{scenario.name}: {n} runs ({args.runs} per level and gain set), '
              f'{scenario.duration:g} s each, late window from {scenario.late_window_start:g} s')
        t0 = time.perf_counter()
        bar = ProgressBar(sys.stderr, enabled=not args.quiet)
        try:
            results = run_study(scenario, args.levels, args.runs, args.seed, args.jobs,
                                args.gain_scale, progress=bar, adapt=args.adapt)
        finally:
            bar.close()
        elapsed = time.perf_counter() - t0
        perfect = None
        if args.adapt:
            kp, kd = gains['A']
            perfect = single_run(scenario, perturbed_nominal(scenario, (0.0,) * len(PERTURBED)),
                                 kp, kd)[0]
        out = _write_outputs(args.out, results, gains,
                             f'{scenario.name}: computed torque under nominal-parameter error',
                             ' (the bound assumes no saturation)', perfect=perfect)
        outside = bound_assumptions(scenario)
        print('estimate: first order in e along the reference, not a bound (runs exceed it); '
              'bound: proven for every draw of a level (docs/identification.md), '
              + (f'n/a here ({", ".join(outside)} outside the proof)' if outside else
                 '"none" where its small-gain condition fails'))
        print(f'{n} runs in {elapsed:.1f} s; wrote {_written(out, args.adapt)}')
    except ParameterError as exc:
        print(f'error: {exc}', file=sys.stderr)
        return 2
    return 0


if __name__ == '__main__':  # pragma: no cover
    sys.exit(main())
