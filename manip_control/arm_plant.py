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
The simulated arm with n joints, and an offline closed loop for it.

The plant is any :class:`~manip_control.arm_model.ArmModel` with per-joint DC motors, PI
current drives and gearboxes, and smooth friction.

State ``x = [q, qd, i, x_i]`` of length ``4 n`` (rad, rad/s, A, V), the layout of the 2R
plant's 8-vector generalised. The equations are those of :mod:`manip_control.plant`, joint by
joint (the motor of joint j drives joint j); the rigid body is the arm model, which carries
the rotor armature ``Jm N^2`` (build it with ``armature=`` and, where it applies,
``rotor_coupling=``)::

    i_ref = clamp(u / (N k_t), +-i_max)                        (u held over the period)
    V = clamp(Kp_i (i_ref - i) + x_i, +-V_max)
    dx_i/dt = Ki_i (i_ref - i) if |Kp_i (i_ref - i) + x_i| <= V_max else 0
    di/dt = (V - R i - k_e N qd) / L
    n = N k_t i                                   (motor torque referred to the joint)
    gear loss on the mesh torque (the rotors sit upstream of the gears):
      T = n - D qdd                 (T_j = N_j (k_t i_j - Jm_j ddtheta_mj), D = rotor_matrix)
      s = tanh(qd / eps),  k_f = 1 - eta,  k_b = 1 / eta_back - 1
      wa = (k_f + k_b) / 2,  wb = (k_f - k_b) / 2
      tau_gear = (wa |T| + wb T s) s = kappa(sigma) T,  kappa = (wa sigma + wb s) s,
          sigma = sign(T)
      tau_m = n - tau_gear
    ideal actuator: tau_m = clamp(u, +-torque_limit), di/dt = dx_i/dt = 0
    f = b qd + (tau_c + tau_s exp(-(qd / v_s)^2)) s                (smooth friction)
    equation of motion, solved with the loss (K = diag(kappa)):
      (M - K D) qdd = n - K n - f - C qd - g

``D`` is the model's :meth:`~manip_control.arm_model.ArmModel.rotor_matrix`: the armature
``Jm N^2`` on its diagonal and, for a rotor coupled to its carrying link, ``Jm N r^T`` in its
row (the 2R: ``[[Jr1, 0], [Jm2 N2, Jr2]]``), the rotors the rigid body carries. The loss
makes the equation implicit, exactly as in the 2R plant (:mod:`manip_control.plant`): for a
sign pattern ``sigma`` of the mesh torques it is linear, so ``qdd`` is one n x n solve; the
pattern is then checked (``sigma_j T_j >= 0`` for every joint whose loss depends on it,
``wa_j s_j != 0``). Pattern ``k`` is ``sign(n)`` with joint j flipped where bit j of ``k``
is set, tried for ``k = 0, 1, ..., 2^n - 1`` (the 2R plant's order for ``n = 2``; flips of a
joint whose loss does not depend on the sign are skipped: they repeat an earlier pattern);
the first consistent one is the solution, the first one if none is. ``sign(n)`` is almost
always right (the rotor torque ``D qdd`` is a few per cent of ``n``), so one solve per
evaluation is the rule. Where it is not (a small motor torque on a joint whose rotor
accelerates hard: ``T`` has the other sign), for ``n > 2`` the signs of the ``T`` found are
tried next, while they change (at most ``n`` solves; for one joint alone ``T`` has the sign
of the lossless mesh torque whatever ``sigma``, so this lands on the consistent pattern in
one more solve), before the binary order (``2^n`` solves at worst). Where the consistent
pattern is unique the order does not change the result. Without rotors, or with lossless gears,
``T = n`` and the loss is explicit (``qdd`` by ABA where the model allows it).

:func:`arm_plant_dynamics` is the reference right-hand side, written with the per-joint
functions of :mod:`manip_control.actuators` and :mod:`manip_control.friction` and a dense
solve; :meth:`ArmPlant.rhs` is the same arithmetic vectorised over the joints and compiled,
checked against it (smooth friction). The command is held over the control period
(zero-order hold), as in :mod:`manip_control.plant`.

Karnopp friction (``friction_model='karnopp'``, method ``'rk4'`` only, in Python): the 2R
plant's rules (:mod:`manip_control.plant`) for n joints. Sliding: ``f = b qd + (tau_c +
tau_s exp(-(qd/v_s)^2)) sign(qd)``; the joints at exactly zero velocity are held
(``qdd_S = 0``, their friction ``f_S = r_S - A_SF qdd_F`` with ``A_FF qdd_F = (r - f)_F``)
unless ``|f_j|`` exceeds the breakaway torque ``tau_c + tau_s``: then ``f_j`` is that
torque with the sign needed and the rest is solved again (inside the mesh rule's sign
search). After each RK4 sub-step a joint whose velocity changed sign or reached zero, or
whose initial acceleration brings it to zero within the sub-step, has an event: the
sub-step is redone up to the earliest crossing (one secant refinement), the joint stopped
by the impulse ``Delta qd_F = -qd_j (M_FF^-1 e_j) / (M_FF^-1)_jj`` over the moving joints
``F``, the rest of the sub-step integrated (at most ``MAX_EVENTS`` events); then the stick
band ``|qd_j| < v_stick`` stops a joint its friction can hold (the one implementation of
these rules, :func:`manip_control.friction.karnopp_substep_over`, which the 2R plant and its
kernel run too). For the 2R through its URDF this equals the 2R plant's compiled kernel to
round-off (tested).

Integration, two methods over one control period ``[t_k, t_k + T]``:

- ``'rk4'``: fixed-step classical RK4 on :meth:`ArmPlant.rhs`, ``substeps`` steps per period,
  one forward-dynamics (ABA) call per stage: ``4 substeps`` rigid-body calls per period
  (with the mesh rule, CRBA + RNEA and the solve above instead of ABA). Default 4 sub-steps,
  and 1 with ideal actuators and no friction: the rigid body alone is not stiff (the stiff
  terms are the drives' and the tanh of the friction, ``tau_c / eps`` over a light link's
  inertia), so RK4 at the control period is accurate there, as MuJoCo's RK4 is (the Panda
  swinging freely to 30 rad/s in 0.2 s: 9.5e-11 rad at 1 ms against DOP853 at rtol 1e-12,
  6.1e-13 at 4 sub-steps; tested).
  The default for ideal actuators.
- ``'multirate'`` (the default with motors): the motor plant is stiff (the PI current loop and
  the back-EMF coupling put eigenvalues near ``-1600 +- 1700j`` 1/s on the Panda of
  ``bench/bench_arm.py``), so RK4 needs short steps, but what is stiff is cheap (the per-joint
  motor, drive, gear and friction terms) and what is expensive is not stiff: the rigid-body
  terms ``M(q)`` and ``b(q, qd)`` change on the arm's time scale. The method writes
  ``qdd = M(q)^-1 (tau_net(i, qd) - b(q, qd))`` and integrates all ``4 n`` states with RK4,
  ``substeps`` (even) steps per period, in one compiled call, with ``M^-1`` and ``b`` taken as
  polynomials in time through rigid-body evaluations (CRBA + RNEA at zero acceleration; with
  the mesh rule each stage solves ``(I - M^-1 K D) qdd = M^-1 (n - K n - f - b)``):

  1. predictor: evaluate ``M, b`` at ``x_k``; integrate with them held constant, keeping the
     predicted states ``x~(t_k + T/2)`` and ``x~(t_k + T)``;
  2. corrector: evaluate ``M, b`` at those two states; integrate again from ``x_k`` with
     ``M^-1`` and ``b`` the quadratics through the three evaluations (nodes 0, T/2, T).

  Three rigid-body evaluations per period (six Pinocchio calls) instead of ``4 substeps``
  ABA calls. The stiff terms keep RK4's accuracy at ``T / substeps``. The slow terms are
  second order in ``T``: the predicted nodes are ``O(T^2)`` off, so the local error is
  ``O(T^3)`` and the global ``O(T^2)``, with a constant set by how fast ``M`` and ``b``
  change along the motion. Where motors drive the arm (speeds bounded by the back-EMF) the
  stiff terms dominate: checked against scipy's Radau at rtol 1e-10 in the tests (closed
  loop on the Panda with lossy gears and friction) it is more accurate than ``'rk4'`` with 4
  sub-steps, and as accurate as ``'rk4'`` with 8 where the drives saturate (DOP853); on an
  arm falling freely at tens of rad/s with ideal actuators the slow part shows (1e-6 rad
  over 0.2 s, tested, against 1e-10 for RK4), which is why ideal actuators default to
  ``'rk4'``. The method is a pure function of ``(x, u, T)``: nothing is carried from one
  call to the next.

:func:`run_arm_closed_loop` is the offline closed loop with the semantics of
:func:`manip_control.simulation.run_closed_loop` (sample the state at ``t_k``, reference,
command after the limit, integrate over the period) for ideal sensors, with the nodes'
:class:`manip_control.control.Controller` as the law (computed torque ``tau = M^(q) (qdd_d -
Kd e_dot - Kp e) + b^(q, qd)`` in one RNEA call, then friction feed-forward, drive inversion
and limit).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
import math
from typing import Sequence

from manip_control.actuators import current_reference
from manip_control.actuators import drive_voltage
from manip_control.actuators import gear_loss_weights
from manip_control.actuators import motor_torque
from manip_control.arm_model import ArmModel
from manip_control.arm_model import ArmModelError
from manip_control.arm_model import ArmShapeError
from manip_control.friction import friction_torque_scalar
from manip_control.friction import karnopp_substep_over
from manip_control.parameters import FrictionParameters
from manip_control.parameters import MotorParameters
from manip_control.parameters import payload_tick
from manip_control.parameters import PayloadParameters
import numpy as np

try:  # numba is a runtime dependency; without it the same function runs in Python
    import numba
except ImportError:  # pragma: no cover - exercised only where numba is absent
    numba = None


class ArmPlant:
    """
    An n-joint plant: arm model + motors (or ideal actuators) + smooth friction.

    Parameters
    ----------
    model : ArmModel
        The true rigid body (with its armature). The plant takes its own workspace.
    friction : sequence of n FrictionParameters, optional
        Per joint (default: none).
    motors : sequence of n MotorParameters, optional
        Per joint; ``None`` selects ideal actuators.
    torque_limit : sequence of n float, optional
        Ideal-actuator clamp [N·m] (default: the model's effort limits).
    substeps : int, optional
        RK4 steps per control period, >= 1 (even for ``'multirate'``); default 8 for
        ``'multirate'``, 4 for ``'rk4'``, 1 for ``'rk4'`` with ideal actuators and no
        friction (the rigid body alone is not stiff; module docstring).
    method : {'multirate', 'rk4'}, optional
        The integrator (module docstring); default ``'multirate'`` with motors, ``'rk4'``
        with ideal actuators or Karnopp friction.
    friction_model : {'smooth', 'karnopp'}, optional
        ``'karnopp'``: exact stiction as in the 2R plant (module docstring), ``'rk4'`` only,
        in Python (not compiled).

    Raises
    ------
    ArmModelError
        Lists of the wrong length, non-positive limits or substeps, an odd number of
        substeps for ``'multirate'``, an unknown method or friction model, Karnopp friction
        with ``'multirate'``.

    """

    def __init__(self, model: ArmModel, friction: Sequence[FrictionParameters] | None = None,
                 motors: Sequence[MotorParameters] | None = None,
                 torque_limit: Sequence[float] | None = None, substeps: int | None = None,
                 method: str | None = None, friction_model: str = 'smooth'):
        n = model.n
        self.model = model.workspace()
        self.n = n
        friction = tuple(friction) if friction is not None else (FrictionParameters(),) * n
        if len(friction) != n:
            raise ArmShapeError(f'friction: expected {n} entries (one per joint), got '
                                f'{len(friction)}')
        self.friction = friction
        self.motors = None if motors is None else tuple(motors)
        if self.motors is not None and len(self.motors) != n:
            raise ArmShapeError(f'motors: expected {n} entries (one per joint), got '
                                f'{len(self.motors)}')
        lim = model.limits.effort if torque_limit is None else torque_limit
        self.torque_limit = np.array(lim, dtype=float)
        if self.torque_limit.shape != (n,):
            raise ArmShapeError(f'torque_limit: expected {n} values, got shape '
                                f'{self.torque_limit.shape}')
        if not np.all(self.torque_limit > 0.0):
            raise ArmModelError(f'torque_limit: must be > 0 (got {self.torque_limit.tolist()})')
        if friction_model not in ('smooth', 'karnopp'):
            raise ArmModelError(f"friction_model: must be 'smooth' or 'karnopp' (got "
                                f'{friction_model!r})')
        self.karnopp = friction_model == 'karnopp'
        if method is None:
            method = 'rk4' if self.motors is None or self.karnopp else 'multirate'
        if method not in ('rk4', 'multirate'):
            raise ArmModelError(f"method: must be 'multirate' or 'rk4' (got {method!r})")
        if self.karnopp and method == 'multirate':
            raise ArmModelError("friction_model: 'karnopp' needs method 'rk4' (the multirate "
                                'step does not locate the stick events)')
        self.method = method
        if substeps is None:
            frictionless = all(f.b == 0.0 and f.tau_c == 0.0 and f.tau_s == 0.0
                               for f in friction)
            substeps = (8 if method == 'multirate' else
                        1 if self.motors is None and frictionless and not self.karnopp
                        else 4)
        if int(substeps) != substeps or substeps < 1:
            raise ArmModelError(f'substeps: must be an integer >= 1 (got {substeps})')
        if method == 'multirate' and substeps % 2:
            raise ArmModelError(f"substeps: must be even for method 'multirate' (got "
                                f'{substeps}): the corrector needs the state at mid-period')
        self.substeps = int(substeps)
        # the predictor only places the rigid-body evaluations: half the steps (>= 2, even)
        self._pred_sub = max(2, 2 * (self.substeps // 4))
        fr = friction
        self._b = np.array([f.b for f in fr])
        self._tau_c = np.array([f.tau_c for f in fr])
        self._tau_s = np.array([f.tau_s for f in fr])
        self._v_s = np.array([f.v_s for f in fr])
        self._eps = np.array([f.eps for f in fr])
        self._v_stick = np.array([f.v_stick for f in fr])
        self._stribeck = bool(np.any(self._tau_s))
        zeros = np.zeros(n)
        self._ktn = self._i_max = self._v_max = self._kp_i = self._ki_i = zeros
        self._r = self._inv_l = self._ken = self._g_sum = self._g_dif = zeros
        # Pinocchio's ABA straight on the plant's own Data (no coupling term to add)
        self._aba = None
        if getattr(self.model, '_coupled', True) is False:
            self._aba = self.model._pin.aba
            self._world = self.model._pin.Convention.WORLD     # the faster variant of ABA
            self._pin_model, self._pin_data = self.model.pin_model, self.model._data
        if self.motors is not None:
            m = self.motors
            self._ktn = np.array([mo.N * mo.k_t for mo in m])
            self._i_max = np.array([mo.i_max for mo in m])
            self._v_max = np.array([mo.V_max for mo in m])
            self._kp_i = np.array([mo.Kp_i for mo in m])
            self._ki_i = np.array([mo.Ki_i for mo in m])
            self._r = np.array([mo.R for mo in m])
            self._inv_l = np.array([1.0 / mo.L for mo in m])
            self._ken = np.array([mo.k_e * mo.N for mo in m])
            kf = np.array([1.0 - mo.eta for mo in m])
            kb = np.array([1.0 / mo.eta_back - 1.0 for mo in m])
            self._g_sum = 0.5 * (kf + kb) * self._ktn
            self._g_dif = 0.5 * (kf - kb) * self._ktn

        self._wa = self._wb = zeros
        if self.motors is not None:
            self._wa = np.array([0.5 * (1.0 - mo.eta + 1.0 / mo.eta_back - 1.0) for mo in m])
            self._wb = np.array([0.5 * (1.0 - mo.eta - 1.0 / mo.eta_back + 1.0) for mo in m])
        self._params = np.ascontiguousarray(np.array(
            [self._b, self._tau_c, self._tau_s, self._v_s, self._eps, self._ktn, self._i_max,
             self._v_max, self._kp_i, self._ki_i, self._r, self._inv_l, self._ken,
             self._g_sum, self._g_dif, self.torque_limit, self._wa, self._wb], dtype=float))
        self._is_motor = self.motors is not None
        # the gear loss on the mesh torque T = N k_t i - D qdd is implicit in qdd where a
        # lossy gear drives a rotor; elsewhere T = N k_t i and the loss is explicit
        self._rotor = np.ascontiguousarray(self.model.rotor_matrix(), dtype=float)
        if self._rotor.shape != (n, n) or not np.all(np.isfinite(self._rotor)):
            raise ArmModelError(f'model: rotor_matrix() must be {n}x{n} finite values')
        self._mesh = bool(self._is_motor and np.any(self._wa > 0.0)
                          and np.any(self._rotor != 0.0))
        nz = np.nonzero(self._rotor)           # D by its nonzero entries (mostly diagonal)
        self._rnz = (nz[0].astype(np.int64), nz[1].astype(np.int64),
                     np.ascontiguousarray(self._rotor[nz]))
        # scratch of the mesh solve: the matrix, and rhs, y, first solution, s, kappa_0
        self._mm = np.zeros((n, n))
        self._mv = np.zeros((6, n))
        # scratch of step(): the stage state and the four RK4 slopes (one plant per thread)
        self._xs = np.empty(4 * n)
        self._k = np.zeros((4, 4 * n))
        self._zero = np.zeros(4 * n)
        self._xq, self._xv = self._xs[:n], self._xs[n:2 * n]
        self._rows = tuple(self._k[s, n:2 * n] for s in range(4))
        # scratch of the multirate step: M and b at the nodes 0, T/2, T, M^-1, the predicted
        # states at T/2 and T, the result
        self._mats = np.zeros((3, n, n))
        self._biases = np.zeros((3, n))
        self._minv = np.zeros((4, n, n))
        self._work = np.zeros(2 * n)
        self._x_half = np.zeros(4 * n)
        self._x_end = np.zeros(4 * n)
        if self._aba is None:
            self._evaluate = self._evaluate_model
        else:
            self._crba, self._nle = self.model._pin.crba, self.model._pin.nonLinearEffects
            self._evaluate = self._evaluate_pin
        # compile (or load from numba's cache) now, not on the first step of a loop
        _stage(self._zero, self._zero, 0.0, self._xs, np.zeros(n), n, self._params,
               self._stribeck, self._is_motor, self._k[0])
        _combine(self._zero, *self._k, 0.0, self._k[1])
        _stage_after(self._zero, self._k[0], np.zeros(n), 0.0, self._xs, np.zeros(n), n,
                     self._params, self._stribeck, self._is_motor, self._k[1])
        _combine_after(self._zero, *self._k, np.zeros(n), 0.0, self._xs.copy(), True, self._xs,
                       np.zeros(n), n, self._params, self._stribeck, self._is_motor)
        self._k[:] = 0.0
        if method == 'multirate':
            self._mats[:] = np.eye(n)
            _multirate_pass(self._zero, np.zeros(n), n, self._params, self._stribeck,
                            self._is_motor, self._mats, self._biases, 1, 1e-3, 2, self._minv,
                            self._k, self._xs, self._work, self._x_half, self._x_end,
                            self._mesh, *self._rnz, self._mm, self._mv)
            self._k[:] = 0.0
        if self._mesh:
            _mesh_accel(np.eye(n), False, self._zero, np.zeros(n), n, self._params,
                        *self._rnz, np.zeros(n), self._mm, self._mv)

    def with_payload(self, mass: float, offset=None) -> 'ArmPlant':
        """
        Return this plant with a point mass ``mass`` [kg] on its last link (the plant only).

        The rigid body is :meth:`ArmModel.with_payload` of this plant's (a copied model: this
        plant, and any controller's nominal model, are unchanged); drives, friction and
        limits are the same. The copy shares this plant's scratch arrays: use the two from
        one thread (as :func:`run_arm_closed_loop` and :class:`HeldArmPlant` do).

        Raises
        ------
        ArmModelError
            A bad mass or offset, or a model without a payload model.

        """
        other = copy.copy(self)
        other.model = self.model.with_payload(mass, offset)
        if self._aba is not None:
            other._pin_model, other._pin_data = other.model.pin_model, other.model._data
            other._evaluate = other._evaluate_pin
        else:
            other._evaluate = other._evaluate_model
        return other

    @property
    def state_size(self) -> int:
        """``4 n``: ``[q, qd, i, x_i]``."""
        return 4 * self.n

    def initial_state(self, q0, qd0=None, start_in_equilibrium: bool = True) -> np.ndarray:
        """
        State at rest (or moving at ``qd0``) with the drives holding ``q0`` against gravity.

        ``i = clamp(g_j(q0) / (N k_t), +-i_max)``, ``x_i = R i + k_e N qd0`` with
        ``start_in_equilibrium`` (motors only), else zero currents and integrators.
        """
        n = self.n
        q0 = self.model._vec('q0', q0)
        qd0 = np.zeros(n) if qd0 is None else self.model._vec('qd0', qd0)
        x = np.zeros(4 * n)
        x[:n], x[n:2 * n] = q0, qd0
        if self.motors is not None and start_in_equilibrium:
            i = np.clip(self.model.gravity(q0) / self._ktn, -self._i_max, self._i_max)
            x[2 * n:3 * n] = i
            x[3 * n:] = self._r * i + self._ken * qd0
        return x

    def motor_torque(self, qd: np.ndarray, current: np.ndarray,
                     rotor_torque: np.ndarray | float = 0.0) -> np.ndarray:
        """
        Actuator torque at the joints ``n - tau_gear(T)`` [N·m] of the drives (motors only).

        ``n = N k_t i``, ``T = n - rotor_torque`` the mesh torque, ``tau_gear = (wa |T| + wb T
        s) s``, ``s = tanh(qd / eps)``: the gear loss of the module docstring. ``qd``
        [rad/s], ``current`` [A] and ``rotor_torque`` ``D qdd`` [N·m] (zero: the loss on
        ``n``) have shape (n,) or (K, n); :meth:`joint_torque` evaluates ``D qdd`` at a state.
        """
        if self.motors is None:
            raise ArmModelError('motor_torque: the plant has ideal actuators')
        qd, i = np.asarray(qd, dtype=float), np.asarray(current, dtype=float)
        s = np.tanh(qd / self._eps)
        nk = self._ktn * i
        mesh = nk - np.asarray(rotor_torque, dtype=float)
        return nk - (self._wa * np.abs(mesh) + self._wb * mesh * s) * s

    def joint_torque(self, x: np.ndarray) -> np.ndarray:
        """
        Actuator torque at the joints [N·m] in state ``x`` (shape (4n,)), motors only.

        :meth:`motor_torque` with the rotor torque ``D qdd`` at the accelerations of ``x``
        (they do not depend on the command, which enters only the drives' derivatives).
        """
        if self.motors is None:
            raise ArmModelError('joint_torque: the plant has ideal actuators')
        n = self.n
        x = np.ascontiguousarray(x, dtype=float)
        rotor = 0.0
        if self._mesh:
            rotor = self._rotor @ self.rhs(x, np.zeros(n))[n:2 * n]
        return self.motor_torque(x[n:2 * n], x[2 * n:3 * n], rotor)

    def rhs(self, x: np.ndarray, u: np.ndarray) -> np.ndarray:
        """``dx/dt`` at state ``x`` (shape (4n,)) under the held command ``u`` [N·m] (n,)."""
        n = self.n
        out = np.empty(4 * n)
        x = np.ascontiguousarray(x, dtype=float)
        u = np.ascontiguousarray(u, dtype=float)
        if u.shape != (n,) or x.shape != (4 * n,):
            raise ArmShapeError(f'rhs: expected x of shape ({4 * n},) and u of shape ({n},), '
                                f'got {x.shape} and {u.shape}')
        _actuators(x, u, n, self._params, self._stribeck, self._is_motor, out)
        if self.karnopp:
            out[n:2 * n] = self._karnopp_accel(x, out[n:2 * n])
            return out
        if self._mesh:
            self._accel(x, out)
        elif self._aba is not None:
            out[n:2 * n] = self._aba(self._pin_model, self._pin_data, x[:n], x[n:2 * n],
                                     out[n:2 * n], self._world)
        else:
            out[n:2 * n] = self.model.forward_dynamics(x[:n], x[n:2 * n], out[n:2 * n])
        return out

    def _accel(self, xs: np.ndarray, k: np.ndarray) -> None:
        """Replace the net torque in ``k[n:2n]`` by the acceleration at state ``xs``."""
        n = self.n
        if self._mesh:
            self._evaluate(xs, 0)
            net = self._work[n:2 * n]
            np.subtract(k[n:2 * n], self._biases[0], out=net)
            _mesh_accel(self._mats[0], False, xs, net, n, self._params, *self._rnz,
                        k[n:2 * n], self._mm, self._mv)
        elif self._aba is not None:
            k[n:2 * n] = self._aba(self._pin_model, self._pin_data, xs[:n], xs[n:2 * n],
                                   k[n:2 * n], self._world)
        else:
            k[n:2 * n] = self.model.forward_dynamics(xs[:n], xs[n:2 * n], k[n:2 * n])

    def _evaluate_pin(self, x: np.ndarray, node: int) -> None:
        """Store ``M(q)`` (CRBA) and ``b(q, qd)`` (RNEA, zero acceleration) at ``node``."""
        n = self.n
        q, qd = x[:n], x[n:2 * n]
        self._mats[node] = self._crba(self._pin_model, self._pin_data, q)
        self._biases[node] = self._nle(self._pin_model, self._pin_data, q, qd)

    def _evaluate_model(self, x: np.ndarray, node: int) -> None:
        """Store ``M(q)`` and ``b(q, qd)`` at ``node`` through the model's interface."""
        n = self.n
        q, qd = x[:n], x[n:2 * n]
        self._mats[node] = self.model.mass_matrix(q)
        self._biases[node] = self.model.bias(q, qd)

    # -- Karnopp friction (the 2R plant's rules, n joints, in Python) -----------------------
    def _karnopp_accel(self, x: np.ndarray, net: np.ndarray) -> np.ndarray:
        """
        Accelerations at ``x`` with Karnopp friction, from ``_actuators``' smooth ``net``.

        ``net + f_smooth`` is the actuator torque at the signs of ``N k_t i`` (the clamped
        command for ideal actuators); the sliding friction is ``b qd + level sign(qd)``
        (zero at ``qd = 0``), the held joints' friction follows from :meth:`_stick`, inside
        the mesh rule's sign search where it applies (the 2R plant's
        ``plant_state.two_link_mechanics`` in the loop over the patterns).
        """
        n = self.n
        q, v = x[:n], x[n:2 * n]
        s = np.tanh(v / self._eps)
        level = self._tau_c + (self._tau_s * np.exp(-(v / self._v_s) ** 2)
                               if self._stribeck else 0.0)
        tau0 = net + (self._b * v + level * s)
        slide = np.where(v != 0.0, self._b * v + np.copysign(level, v), 0.0)
        m, bias = self.model.mass_matrix(q), self.model.bias(q, v)
        if not self._mesh:
            return self._stick(v, tau0 - bias, m, slide)
        nk = self._ktn * x[2 * n:3 * n]
        first = None
        for sigma in _mesh_sign_patterns(nk, self._wa * s):
            kappa = (self._wa * sigma + self._wb * s) * s
            qdd = self._stick(v, nk - kappa * nk - bias, m - kappa[:, None] * self._rotor,
                              slide)
            first = qdd if first is None else first
            mesh = nk - self._rotor @ qdd
            if np.all((sigma * mesh >= 0.0) | (self._wa * s == 0.0)):
                return qdd
        return first

    def _stick(self, v: np.ndarray, r: np.ndarray, a: np.ndarray,
               slide: np.ndarray) -> np.ndarray:
        """
        Solve ``a qdd = r - f`` with the joints at ``v == 0`` held unless they break away.

        Held joints: ``qdd_S = 0``, the free ones ``a_FF qdd_F = (r - f)_F``, and the held
        friction ``f_S = r_S - a_SF qdd_F``; a held joint whose ``|f_j|`` exceeds the
        breakaway torque ``tau_c + tau_s`` slides with ``f_j = +-(tau_c + tau_s)`` (the sign
        of the torque needed), and the others are solved again, until none breaks away
        (the 2R plant's rule, joint sets for joint pairs).
        """
        held = v == 0.0
        f = slide.copy()
        if not held.any():
            return np.linalg.solve(a, r - f)
        breakaway = self._tau_c + self._tau_s
        while True:
            free = ~held
            qdd = np.zeros(self.n)
            if free.any():
                qdd[free] = np.linalg.solve(a[np.ix_(free, free)], (r - f)[free])
            f_held = r[held] - a[np.ix_(held, free)] @ qdd[free]
            idx = np.flatnonzero(held)
            f[idx] = f_held
            over = np.abs(f_held) > breakaway[held]
            if not over.any():
                return qdd
            go = idx[over]
            f[go] = np.copysign(breakaway[go], f_held[over])
            held[go] = False

    def _stop(self, x: np.ndarray, j: int) -> np.ndarray:
        """
        Stop joint ``j`` by a stiction impulse at that joint (the 2R plant's ``_stop``).

        ``qd_F += -qd_j (M_FF^-1 e_j) / (M_FF^-1)_jj`` over the moving joints ``F`` (``j``
        among them): the joints at rest (stuck) stay at rest, ``qd_j`` becomes exactly 0.
        """
        n = self.n
        y = x.copy()
        v = y[n:2 * n]
        free = v != 0.0
        free[j] = True
        idx = np.flatnonzero(free)
        k = int(np.flatnonzero(idx == j)[0])
        mi = np.linalg.inv(self.model.mass_matrix(y[:n])[np.ix_(idx, idx)])
        v[idx] += -v[j] * mi[:, k] / mi[k, k]
        v[j] = 0.0
        v[~free] = 0.0
        return y

    def _rk4_rhs(self, x: np.ndarray, h: float, u: np.ndarray):
        """One RK4 step of ``rhs`` over ``h``; the new state and the first stage's ``qdd``."""
        n = self.n
        k1 = self.rhs(x, u)
        k2 = self.rhs(x + 0.5 * h * k1, u)
        k3 = self.rhs(x + 0.5 * h * k2, u)
        k4 = self.rhs(x + h * k3, u)
        return x + (h / 6.0) * (k1 + 2.0 * (k2 + k3) + k4), k1[n:2 * n]

    def step(self, x: np.ndarray, u, period: float) -> np.ndarray:
        """
        Integrate ``x`` over one control period with ``u`` held (``method``, ``substeps``).

        ``'rk4'``: the same arithmetic as RK4 on :meth:`rhs`,
        ``x + h/6 (k1 + 2 (k2 + k3) + k4)``, with the stage states and the actuator terms
        computed in one compiled call per stage. ``'multirate'``: the predictor-corrector of
        the module docstring, two compiled passes and three rigid-body evaluations.
        """
        n = self.n
        u = np.ascontiguousarray(u, dtype=float)
        x = np.ascontiguousarray(x, dtype=float)
        # the compiled passes index without bounds checks: a wrong shape must not get there
        if u.shape != (n,) or x.shape != (4 * n,):
            raise ArmShapeError(f'step: expected x of shape ({4 * n},) and u of shape ({n},), '
                                f'got {x.shape} and {u.shape}')
        if self.karnopp:
            h = period / self.substeps
            for _ in range(self.substeps):
                x = _karnopp_substep(self, x, h, u, n, self._v_stick)[0]
            return x
        if self.method == 'multirate':
            ev, p, st, mo, sub = self._evaluate, self._params, self._stribeck, self._is_motor, \
                self.substeps
            mats, biases, minv, k, xs, work = (self._mats, self._biases, self._minv, self._k,
                                               self._xs, self._work)
            half, end = self._x_half, self._x_end
            mesh, (rk, rm, rv), mm, mv = self._mesh, self._rnz, self._mm, self._mv
            ev(x, 0)
            _multirate_pass(x, u, n, p, st, mo, mats, biases, 1, period, self._pred_sub, minv, k,
                            xs, work, half, end, mesh, rk, rm, rv, mm, mv)
            ev(half, 1)
            ev(end, 2)
            out = np.empty(4 * n)
            _multirate_pass(x, u, n, p, st, mo, mats, biases, 3, period, sub, minv, k, xs, work,
                            half, out, mesh, rk, rm, rv, mm, mv)
            return out
        h = period / self.substeps
        hh = 0.5 * h
        h6 = h / 6.0
        xs, (k1, k2, k3, k4) = self._xs, self._k
        p, st, mo, zero = self._params, self._stribeck, self._is_motor, self._zero
        if self._aba is not None and not self._mesh:
            # ABA on persistent views of the stage state and the net torque; its result goes
            # into the slope by the next compiled call (one Python call less per stage)
            aba, model, data, world = self._aba, self._pin_model, self._pin_data, self._world
            xq, xv, (r1, r2, r3, r4) = self._xq, self._xv, self._rows
            _stage(x, zero, 0.0, xs, u, n, p, st, mo, k1)
            for m in range(self.substeps):
                a = aba(model, data, xq, xv, r1, world)
                _stage_after(x, k1, a, hh, xs, u, n, p, st, mo, k2)
                a = aba(model, data, xq, xv, r2, world)
                _stage_after(x, k2, a, hh, xs, u, n, p, st, mo, k3)
                a = aba(model, data, xq, xv, r3, world)
                _stage_after(x, k3, a, h, xs, u, n, p, st, mo, k4)
                a = aba(model, data, xq, xv, r4, world)
                new = np.empty(4 * n)
                _combine_after(x, k1, k2, k3, k4, a, h6, new, m + 1 < self.substeps, xs, u, n,
                               p, st, mo)
                x = new
            return x
        accel = self._accel
        for _ in range(self.substeps):
            _stage(x, zero, 0.0, xs, u, n, p, st, mo, k1)
            accel(xs, k1)
            _stage(x, k1, hh, xs, u, n, p, st, mo, k2)
            accel(xs, k2)
            _stage(x, k2, hh, xs, u, n, p, st, mo, k3)
            accel(xs, k3)
            _stage(x, k3, h, xs, u, n, p, st, mo, k4)
            accel(xs, k4)
            new = np.empty(4 * n)
            _combine(x, k1, k2, k3, k4, h6, new)
            x = new
        return x


# Karnopp friction's zero-velocity events over the plant's RK4 step, impulse and rhs
_karnopp_substep = karnopp_substep_over(ArmPlant._rk4_rhs, ArmPlant._stop, ArmPlant.rhs)


def _actuators_py(x, u, n, p, stribeck, motor, out):
    """
    Fill ``out`` with ``qd``, the net joint torque ``tau_m - f`` and the motor derivatives.

    The equations of the module docstring, joint by joint on floats (compiled with numba
    when it is importable, the same function run by Python otherwise). ``out[n:2n]`` holds
    the net torque, which the caller replaces by the acceleration. ``p`` holds one row per
    parameter (:attr:`ArmPlant._params`).
    """
    b, tau_c, tau_s, v_s, eps = p[0], p[1], p[2], p[3], p[4]
    ktn, i_max, v_max, kp_i, ki_i = p[5], p[6], p[7], p[8], p[9]
    r, inv_l, ken, g_sum, g_dif, limit = p[10], p[11], p[12], p[13], p[14], p[15]
    for j in range(n):
        qd = x[n + j]
        s = math.tanh(qd / eps[j])
        level = tau_c[j]
        if stribeck:
            level += tau_s[j] * math.exp(-(qd / v_s[j]) ** 2)
        f = b[j] * qd + level * s
        if motor:
            i = x[2 * n + j]
            i_ref = min(max(u[j] / ktn[j], -i_max[j]), i_max[j])
            err = i_ref - i
            v_raw = kp_i[j] * err + x[3 * n + j]
            v = min(max(v_raw, -v_max[j]), v_max[j])
            out[2 * n + j] = (v - r[j] * i - ken[j] * qd) * inv_l[j]
            out[3 * n + j] = 0.0 if abs(v_raw) > v_max[j] else ki_i[j] * err
            tau = ktn[j] * i - (g_sum[j] * abs(i) * s + g_dif[j] * i * s * s)
        else:
            tau = min(max(u[j], -limit[j]), limit[j])
            out[2 * n + j] = 0.0
            out[3 * n + j] = 0.0
        out[j] = qd
        out[n + j] = tau - f


def _jit(fn):
    return fn if numba is None else numba.njit(cache=True)(fn)


_actuators = _jit(_actuators_py)


def _stage_py(x0, k, c, xs, u, n, p, stribeck, motor, out):
    """RK4 stage: ``xs = x0 + c k``, then the actuator terms at ``xs`` into ``out``."""
    for i in range(4 * n):
        xs[i] = x0[i] + c * k[i]
    _actuators(xs, u, n, p, stribeck, motor, out)


def _combine_py(x0, k1, k2, k3, k4, h6, out):
    """RK4 update ``out = x0 + h/6 (k1 + 2 (k2 + k3) + k4)``."""
    for i in range(x0.shape[0]):
        out[i] = x0[i] + h6 * (k1[i] + 2.0 * (k2[i] + k3[i]) + k4[i])


def _stage_after_py(x0, k, acc, c, xs, u, n, p, stribeck, motor, out):
    """``k[n:2n] = acc`` (the stage's accelerations), then :func:`_stage_py` from ``k``."""
    for i in range(n):
        k[n + i] = acc[i]
    for i in range(4 * n):
        xs[i] = x0[i] + c * k[i]
    _actuators(xs, u, n, p, stribeck, motor, out)


def _combine_after_py(x0, k1, k2, k3, k4, acc, h6, out, more, xs, u, n, p, stribeck, motor):
    """
    ``k4[n:2n] = acc``, the RK4 update into ``out``; with ``more`` the next step's first stage.

    That stage is :func:`_stage_py` at ``out`` into ``k1`` (``xs = out``).
    """
    for i in range(n):
        k4[n + i] = acc[i]
    for i in range(x0.shape[0]):
        out[i] = x0[i] + h6 * (k1[i] + 2.0 * (k2[i] + k3[i]) + k4[i])
    if more:
        for i in range(4 * n):
            xs[i] = out[i]
        _actuators(xs, u, n, p, stribeck, motor, k1)


_stage = _jit(_stage_py)
_combine = _jit(_combine_py)
_stage_after = _jit(_stage_after_py)
_combine_after = _jit(_combine_after_py)


def _solve_py(a, b, n):
    """Solve ``a y = b`` in place (``b`` becomes ``y``): Gaussian elimination, partial pivoting."""
    for c in range(n):
        piv = c
        big = abs(a[c, c])
        for r in range(c + 1, n):
            if abs(a[r, c]) > big:
                big = abs(a[r, c])
                piv = r
        if piv != c:
            for k in range(c, n):
                a[c, k], a[piv, k] = a[piv, k], a[c, k]
            b[c], b[piv] = b[piv], b[c]
        inv = 1.0 / a[c, c]
        for r in range(c + 1, n):
            f = a[r, c] * inv
            if f != 0.0:
                for k in range(c + 1, n):
                    a[r, k] -= f * a[c, k]
                b[r] -= f * b[c]
    for c in range(n - 1, -1, -1):
        acc = b[c]
        for k in range(c + 1, n):
            acc -= a[c, k] * b[k]
        b[c] = acc / a[c, c]


_solve = _jit(_solve_py)


def _mesh_try_py(pat, g, inverse, x, net, n, p, rk, rm, rv, mat, mv):
    """
    Solve for the sign pattern ``pat`` (bit j set: joint j flipped from ``sign(n_j)``).

    The accelerations go to ``mv[1]``, the mesh torques ``T = n - D qdd`` to ``mv[0]``;
    return the mask of the joints whose loss depends on the sign and whose ``T`` has the
    other sign (0: the pattern is consistent). ``mv[3]``, ``mv[4]`` hold ``s`` and
    ``kappa_0`` (:func:`_mesh_accel_py`).
    """
    ktn, wa, wb = p[5], p[16], p[17]
    rhs, y, sv, k0, kap = mv[0], mv[1], mv[3], mv[4], mv[5]
    for j in range(n):
        nk = ktn[j] * x[2 * n + j]
        sg = 1.0 if nk >= 0.0 else -1.0
        if (pat >> j) & 1:
            sg = -sg
        kap[j] = (wa[j] * sg + wb[j] * sv[j]) * sv[j]
        rhs[j] = net[j] + (k0[j] - kap[j]) * nk
    if inverse:
        for i in range(n):
            acc = 0.0
            for m in range(n):
                acc += g[i, m] * rhs[m]
                mat[i, m] = 0.0
            y[i] = acc
            mat[i, i] = 1.0
        for e in range(rk.shape[0]):
            k, m, w = rk[e], rm[e], kap[rk[e]] * rv[e]
            for i in range(n):
                mat[i, m] -= g[i, k] * w
    else:
        for i in range(n):
            y[i] = rhs[i]
            for m in range(n):
                mat[i, m] = g[i, m] if i <= m else g[m, i]
        for e in range(rk.shape[0]):
            mat[rk[e], rm[e]] -= kap[rk[e]] * rv[e]
    _solve(mat, y, n)
    for j in range(n):
        rhs[j] = ktn[j] * x[2 * n + j]
    for e in range(rk.shape[0]):
        rhs[rk[e]] -= rv[e] * y[rm[e]]
    bad = 0
    for j in range(n):
        if wa[j] * sv[j] == 0.0:
            continue
        sg = 1.0 if ktn[j] * x[2 * n + j] >= 0.0 else -1.0
        if (pat >> j) & 1:
            sg = -sg
        if sg * rhs[j] < 0.0:
            bad |= 1 << j
    return bad


_mesh_try = _jit(_mesh_try_py)


def _mesh_accel_py(g, inverse, x, net, n, p, rk, rm, rv, qdd, mat, mv):
    """
    Accelerations with the gear loss on the mesh torque: ``(M - K D) qdd = r`` into ``qdd``.

    ``net`` is ``n - kappa_0 n - f - b`` (``n = N k_t i``, ``kappa_0`` at the signs of
    ``n``: what :func:`_actuators` computes, minus the bias ``b``). ``g`` is ``M`` (upper
    triangle read) when ``inverse`` is False, else ``M^-1`` (full), and the system is then
    solved as ``(I - M^-1 K D) qdd = M^-1 r``. ``D`` is given by its nonzero entries
    ``D[rk[e], rm[e]] = rv[e]`` (diagonal, plus the coupled rotors' rows: the products cost
    ``n nnz``, not ``n^3``). The sign patterns of the mesh torques are tried in the order of
    the module docstring; the first consistent one is the result (the first pattern's if none
    is). Scratch: ``mat`` (n, n), ``mv`` (6, n).
    """
    eps, ktn, wa, wb = p[4], p[5], p[16], p[17]
    y, first, sv, k0 = mv[1], mv[2], mv[3], mv[4]
    loss = 0
    for j in range(n):
        v = math.tanh(x[n + j] / eps[j])
        sv[j] = v
        sg = 1.0 if x[2 * n + j] * ktn[j] >= 0.0 else -1.0
        k0[j] = (wa[j] * sg + wb[j] * v) * v
        if wa[j] * v != 0.0:
            loss |= 1 << j
    bad = _mesh_try(0, g, inverse, x, net, n, p, rk, rm, rv, mat, mv)
    if bad != 0:
        for j in range(n):
            first[j] = y[j]
        pat = 0
        if n > 2:       # the signs of the T found, while they change (at most n solves)
            for _ in range(n):
                new = 0
                for j in range(n):
                    sg = 1.0 if ktn[j] * x[2 * n + j] >= 0.0 else -1.0
                    if (loss >> j) & 1 and sg * mv[0, j] < 0.0:
                        new |= 1 << j
                if new == pat:
                    break
                pat = new
                bad = _mesh_try(pat, g, inverse, x, net, n, p, rk, rm, rv, mat, mv)
                if bad == 0:
                    break
        if bad != 0:    # the binary order; flips of joints without a sign-dependent loss
            for pat in range(1, 1 << n):       # repeat an earlier pattern: skipped
                if pat & ~loss:
                    continue
                bad = _mesh_try(pat, g, inverse, x, net, n, p, rk, rm, rv, mat, mv)
                if bad == 0:
                    break
        if bad != 0:
            for j in range(n):
                y[j] = first[j]
    for j in range(n):
        qdd[j] = y[j]


_mesh_accel = _jit(_mesh_accel_py)


def _spd_inverse_py(m, out):
    """``out = m^-1`` for a symmetric positive definite ``m`` (upper triangle read), Cholesky."""
    n = m.shape[0]
    for i in range(n):                   # out holds L (lower) with m = L L^T
        for j in range(i + 1):
            acc = m[j, i]
            for k in range(j):
                acc -= out[i, k] * out[j, k]
            if i == j:
                out[i, i] = math.sqrt(acc)
            else:
                out[i, j] = acc / out[j, j]
    for i in range(n):                   # L^-1, in place (lower triangle)
        out[i, i] = 1.0 / out[i, i]
        for j in range(i):
            acc = 0.0
            for k in range(j, i):
                acc -= out[i, k] * out[k, j]
            out[i, j] = acc * out[i, i]
    for i in range(n):                   # m^-1 = L^-T L^-1, lower triangle, then mirrored
        for j in range(i + 1):
            acc = 0.0
            for k in range(i, n):
                acc += out[k, i] * out[k, j]
            out[i, j] = acc
    for i in range(n):
        for j in range(i + 1, n):
            out[i, j] = out[j, i]


_spd_inverse = _jit(_spd_inverse_py)


def _multirate_pass_py(x0, u, n, p, stribeck, motor, mats, biases, nodes, period, substeps,
                       minv, k, xs, work, x_half, x_end, mesh, rk, rm, rv, mm, mv):
    """
    RK4 over one period with ``qdd = M^-1(s) (tau_net - b(s))``, ``M^-1``, ``b`` interpolated.

    ``nodes`` = 1: ``M^-1``, ``b`` constant (from ``mats[0]``, ``biases[0]``). ``nodes`` = 3:
    quadratics in ``s = (t - t_k) / T`` through ``s = 0, 1/2, 1`` (rows 0, 1, 2 of ``mats``
    and ``biases``). The state at ``T/2`` goes to ``x_half``, the end state to ``x_end``.
    Scratch: ``minv`` (4, n, n) (the inverses, then ``M^-1(s)``), ``k`` (4, 4n) (the
    slopes), ``xs`` (4n) (the stage state), ``work`` (2n) (``b(s)``, the net torque).
    ``mesh``: the gear loss on the mesh torque (:func:`_mesh_accel` with ``M^-1(s)``,
    ``D``'s nonzeros ``rk``, ``rm``, ``rv``, scratch ``mm``, ``mv``).
    """
    size = 4 * n
    for a in range(nodes):
        _spd_inverse(mats[a], minv[a])
    mi = minv[3]
    b_s = work[:n]
    net = work[n:2 * n]
    for i in range(n):
        b_s[i] = biases[0, i]
        for j in range(n):
            mi[i, j] = minv[0, i, j]
    h = period / substeps
    ds = 1.0 / substeps
    x = x_end
    for i in range(size):
        x[i] = x0[i]
    s_now = 0.0
    for m in range(substeps):
        if 2 * m == substeps:
            for i in range(size):
                x_half[i] = x[i]
        s0 = m * ds
        for stage in range(4):
            if stage == 0:
                c, s = 0.0, s0
            elif stage == 3:
                c, s = h, s0 + ds
            else:
                c, s = 0.5 * h, s0 + 0.5 * ds
            if stage == 0:
                for i in range(size):
                    xs[i] = x[i]
            else:
                for i in range(size):
                    xs[i] = x[i] + c * k[stage - 1, i]
            out = k[stage]
            _actuators(xs, u, n, p, stribeck, motor, out)
            if nodes == 3 and s != s_now:     # M^-1 and b at s: Lagrange through 0, 1/2, 1
                s_now = s
                w0 = (2.0 * s - 1.0) * (s - 1.0)
                w1 = 4.0 * s * (1.0 - s)
                w2 = s * (2.0 * s - 1.0)
                for i in range(n):
                    b_s[i] = w0 * biases[0, i] + w1 * biases[1, i] + w2 * biases[2, i]
                    for j in range(n):
                        mi[i, j] = w0 * minv[0, i, j] + w1 * minv[1, i, j] + w2 * minv[2, i, j]
            for j in range(n):
                net[j] = out[n + j] - b_s[j]
            if mesh:
                _mesh_accel(mi, True, xs, net, n, p, rk, rm, rv, out[n:2 * n], mm, mv)
                continue
            for i in range(n):
                acc = 0.0
                for j in range(n):
                    acc += mi[i, j] * net[j]
                out[n + i] = acc
        h6 = h / 6.0
        for i in range(size):
            x[i] += h6 * (k[0, i] + 2.0 * (k[1, i] + k[2, i]) + k[3, i])


_multirate_pass = _jit(_multirate_pass_py)


def arm_plant_dynamics(t: float, x: np.ndarray, u: np.ndarray, plant: ArmPlant) -> np.ndarray:
    """
    Return the reference ``dx/dt = f(t, x, u, params)``, joint by joint.

    Written with the per-joint functions of :mod:`manip_control.actuators` and
    :mod:`manip_control.friction`.

    Parameters
    ----------
    t : float
        Time [s] (unused: the plant is time-invariant).
    x : ndarray, shape (4 n,)
        ``[q, qd, i, x_i]``.
    u : ndarray, shape (n,)
        Joint torque command [N·m].
    plant : ArmPlant
        Model, motors, friction, limits.

    """
    n = plant.n
    q, qd = x[:n], x[n:2 * n]
    dx = np.zeros(4 * n)
    tau = np.zeros(n)
    nk = np.zeros(n)
    for j in range(n):
        fr = plant.friction[j]
        if plant.motors is None:
            tau[j] = min(max(u[j], -plant.torque_limit[j]), plant.torque_limit[j])
        else:
            mo = plant.motors[j]
            i, xi = x[2 * n + j], x[3 * n + j]
            i_ref = current_reference(u[j], mo)
            v, saturated = drive_voltage(i_ref, i, xi, mo)
            dx[2 * n + j] = (v - mo.R * i - mo.k_e * mo.N * qd[j]) / mo.L
            dx[3 * n + j] = 0.0 if saturated else mo.Ki_i * (i_ref - i)
            nk[j] = motor_torque(i, mo)
            tau[j] = nk[j]
        tau[j] -= friction_torque_scalar(qd[j], fr)
    dx[:n] = qd
    if plant.motors is None:
        dx[n:2 * n] = plant.model.forward_dynamics(q, qd, tau)
        return dx
    # the gear loss on the mesh torque T = nk - D qdd, one sign pattern of T at a time
    rotors = plant.model.rotor_matrix()
    weights = np.array([gear_loss_weights(mo) for mo in plant.motors])
    s = np.array([math.tanh(v / fr.eps) for v, fr in zip(qd, plant.friction)])
    inertia, bias = plant.model.mass_matrix(q), plant.model.bias(q, qd)
    first = None
    for sigma in _mesh_sign_patterns(nk, weights[:, 0] * s):
        kappa = (weights[:, 0] * sigma + weights[:, 1] * s) * s
        qdd = np.linalg.solve(inertia - kappa[:, None] * rotors, tau - kappa * nk - bias)
        first = qdd if first is None else first
        mesh = nk - rotors @ qdd
        if np.all((sigma * mesh >= 0.0) | (weights[:, 0] * s == 0.0)):
            break
    else:   # no consistent pattern (module docstring): the first one
        qdd = first
    dx[n:2 * n] = qdd
    return dx


def _mesh_sign_patterns(nk: np.ndarray, loss: np.ndarray):
    """
    Yield the sign patterns of the mesh torques in the binary order.

    Pattern ``k`` is ``sign(nk)`` with joint j flipped where bit j of ``k`` is set, for
    ``k = 0 .. 2^n - 1``, skipping flips of a joint whose loss does not depend on the sign
    (``loss_j = wa_j s_j == 0``: that pattern equals one tried before). The compiled path
    tries the signs of the ``T`` found first for ``n > 2`` (module docstring): the same
    result wherever the consistent pattern is unique.
    """
    base = np.where(nk >= 0.0, 1.0, -1.0)
    for k in range(1 << len(nk)):
        flips = np.array([(k >> j) & 1 for j in range(len(nk))], dtype=bool)
        if np.any(flips & (loss == 0.0)):
            continue
        yield np.where(flips, -base, base)


#: Ticks of reference sampled at once by :func:`run_arm_closed_loop`.
_REFERENCE_BLOCK = 1000


class ArmStateError(ArmModelError):
    """The simulated state became non-finite (the closed loop diverged)."""


class HeldArmPlant:
    """
    An :class:`ArmPlant` with its state, stepped one control period at a time.

    The plant of the ROS plant node for an arm from its URDF, with the interface of the 2R
    :class:`manip_control.plant.Plant` sized by the arm: :attr:`_x` is ``[q, qd, i, x_i]``
    (the 2R's layout for ``n = 2``), :meth:`step` takes one command per joint, and the
    ``*_at(x)`` telemetry evaluates a state under the command held now (after :meth:`step`,
    for the state it started from: the values at ``t_k+``).

    Parameters
    ----------
    plant : ArmPlant
    period : float
        Control period [s] (zero-order hold).
    q0 : sequence of n float
        Initial position [rad] (the drives hold it against gravity when
        ``start_in_equilibrium``).
    start_in_equilibrium : bool
    qd0 : sequence of n float, optional
        Initial velocity [rad/s] (default: at rest).
    payload : PayloadParameters, optional
        A point mass the last link picks up at the first step at or after ``at_time``
        (simulated time, ``steps * period``) and carries from then on (default: none).
    payload_offset : sequence of 3 float, optional
        Its position in the last modelled link's frame [m] (default: the origin).

    """

    def __init__(self, plant: ArmPlant, period: float, q0,
                 start_in_equilibrium: bool = True, qd0=None,
                 payload: PayloadParameters | None = None, payload_offset=None):
        self.plant = plant
        self.n = plant.n
        self.period = float(period)
        self._x = plant.initial_state(q0, qd0, start_in_equilibrium=start_in_equilibrium)
        self._u = np.zeros(self.n)
        self._limit = plant.torque_limit
        self.steps = 0
        self._payload_step = None
        self._loaded = None
        if payload is not None and payload.mass > 0.0:
            # built now, not in a tick
            self._loaded = plant.with_payload(payload.mass, payload_offset)
            self._payload_step = payload_tick(payload.at_time, self.period)

    @property
    def payload_attached(self) -> bool:
        """Whether the payload is on the arm now."""
        return self._loaded is not None and self.plant is self._loaded

    def step(self, *tau: float) -> None:
        """Hold the command ``tau`` [N·m] (one per joint) for one period and integrate."""
        if self.steps == self._payload_step:
            self.plant = self._loaded
        self._u = np.array(tau, dtype=float)
        self._x = self.plant.step(self._x, self._u, self.period)
        self.steps += 1

    @property
    def position(self) -> tuple:
        """Joint positions [rad]."""
        return tuple(self._x[:self.n].tolist())

    @property
    def velocity(self) -> tuple:
        """Joint velocities [rad/s]."""
        return tuple(self._x[self.n:2 * self.n].tolist())

    def current_reference(self) -> tuple:
        """Return the drives' current references under the held command [A] (0 if ideal)."""
        p = self.plant
        if p.motors is None:
            return (0.0,) * self.n
        return tuple(np.clip(self._u / p._ktn, -p._i_max, p._i_max).tolist())

    def joint_torque_at(self, x) -> tuple:
        """Actuator torque at the joints [N·m] in state ``x`` (ideal: the clamped command)."""
        p = self.plant
        if p.motors is None:
            return tuple(np.clip(self._u, -self._limit, self._limit).tolist())
        return tuple(p.joint_torque(x).tolist())

    def drive_voltage_at(self, x) -> tuple:
        """Return the PI drives' terminal voltages [V] in state ``x`` (held command, clamped)."""
        n, p = self.n, self.plant
        if p.motors is None:
            return (0.0,) * n
        i_ref = np.clip(self._u / p._ktn, -p._i_max, p._i_max)
        v = p._kp_i * (i_ref - x[2 * n:3 * n]) + x[3 * n:]
        return tuple(np.clip(v, -p._v_max, p._v_max).tolist())


@dataclass
class ArmRun:
    """Samples of an offline run at the control ticks ``t_k`` (arrays, one row per tick)."""

    t: np.ndarray
    """Tick times [s], shape (K,)."""
    q: np.ndarray
    """Joint positions at ``t_k`` [rad], shape (K, n)."""
    qd: np.ndarray
    """Joint velocities at ``t_k`` [rad/s], shape (K, n)."""
    q_d: np.ndarray
    """Reference positions [rad], shape (K, n)."""
    tau: np.ndarray
    """Commands after the limit [N·m], shape (K, n)."""
    current: np.ndarray | None = None
    """Motor currents at ``t_k`` [A], shape (K, n); None with ideal actuators."""

    @property
    def error(self) -> np.ndarray:
        """Tracking error ``q - q_d`` [rad], shape (K, n)."""
        return self.q - self.q_d


def run_arm_closed_loop(plant: ArmPlant, controller, trajectory, duration: float,
                        control_rate: float = 1000.0, x0: np.ndarray | None = None,
                        payload: PayloadParameters | None = None,
                        payload_offset=None) -> ArmRun:
    """
    Run a controller on an n-joint plant, offline (ideal sensors, zero-order hold).

    At tick ``k``: ``x_k`` sampled; ``(q_d, qd_d, qdd_d) = trajectory.sample(t_k)``;
    ``tau = controller.update(q, qd, q_d, qd_d, qdd_d)`` (the law, its friction feed-forward,
    drive inversion and torque limit); the plant integrates over ``[t_k, t_k + T]`` with
    ``tau`` held.

    Parameters
    ----------
    plant : ArmPlant
        The simulated arm.
    controller : Controller or AdaptiveController
        The feedback law on the controller's own model (:class:`manip_control.control.
        Controller`, built with :func:`manip_control.control.controller_parameters`; or
        :class:`manip_control.adaptation.AdaptiveController`): anything with ``n``,
        ``output()`` and ``update(q, qd, q_d, qd_d, qdd_d, out)``. Its state (integral,
        estimates) carries over from the run.
    trajectory : Trajectory
        Reference with ``n`` joints (:mod:`manip_control.trajectories`).
    duration : float
        Simulated time [s]; ``round(duration * control_rate)`` ticks.
    control_rate : float
        Control rate [Hz]; the controller's own period (its integral and estimates step
        with it) must be ``1 / control_rate``.
    x0 : ndarray, optional
        Initial state (default: at rest on the reference's start, drives holding it).
    payload : PayloadParameters, optional
        A point mass the plant's last link picks up at the first tick ``t_k >= at_time``
        (:meth:`ArmPlant.with_payload`; the controller's model does not get it): from that
        tick on the loaded plant integrates (default: none). ``plant`` itself is not changed.
    payload_offset : sequence of 3 float, optional
        The payload's position in the last link's frame [m] (default: its origin).

    """
    n = plant.n
    if not callable(getattr(controller, 'update', None)):
        raise TypeError(f'controller: expected a Controller (got {type(controller).__name__})')
    if controller.n != n or trajectory.n_joints != n:
        raise ArmShapeError(f'the controller has {controller.n} joints and the trajectory '
                            f'{trajectory.n_joints}; the plant has {n}')
    if not (control_rate > 0.0 and math.isfinite(control_rate)):
        raise ArmModelError(f'control_rate: must be > 0 Hz (got {control_rate})')
    period = 1.0 / control_rate
    if not math.isclose(controller.period, period, rel_tol=1e-9):
        raise ArmModelError(f'control_rate: {control_rate:g} Hz, but the controller steps '
                            f'with a period of {controller.period:g} s')
    ticks = int(round(duration * control_rate)) if math.isfinite(duration) else 0
    if ticks < 2:
        raise ArmModelError(f'duration: {duration} s at {control_rate:g} Hz is {ticks} '
                            'control tick(s); at least 2 are needed')
    if x0 is None:
        x0 = plant.initial_state(trajectory.sample(0.0)[0])
    x = np.array(x0, dtype=float)
    if x.shape != (4 * n,) or not np.all(np.isfinite(x)):
        raise ArmShapeError(f'x0: expected {4 * n} finite values [q, qd, i, x_i], got shape '
                            f'{x.shape}')
    ts = np.arange(ticks) * period
    states = np.empty((ticks, 3 * n))           # [q, qd, i] at each tick: one row copy a tick
    refs, taus = np.empty((ticks, n)), np.empty((ticks, n))
    update, out = controller.update, controller.output()
    tau = out.tau
    step = plant.step
    pick_up, loaded = -1, None
    if payload is not None and payload.mass > 0.0:
        loaded = plant.with_payload(payload.mass, payload_offset)
        pick_up = payload_tick(payload.at_time, period)
    for k0 in range(0, ticks, _REFERENCE_BLOCK):
        # the reference ahead of the ticks, a block at a time (sample_many == sample per row)
        k1 = min(ticks, k0 + _REFERENCE_BLOCK)
        r_q, r_v, r_a = (np.ascontiguousarray(a, dtype=float)
                         for a in trajectory.sample_many(ts[k0:k1]))
        refs[k0:k1] = r_q
        for k in range(k0, k1):
            states[k] = x[:3 * n]
            j = k - k0
            update(x[:n], x[n:2 * n], r_q[j], r_v[j], r_a[j], out)
            taus[k] = tau
            if k == pick_up:
                step = loaded.step
            x = step(x, tau, period)
            # a diverged loop stops here (a NaN passes the clamp): never a NaN result
            if not math.isfinite(x.sum()):
                raise ArmStateError(f'the state is not finite at t = {ts[k] + period:.6g} s: '
                                    'the loop diverged (gains too high for the control rate, '
                                    'or a wrong model)')
    qs, qds = np.ascontiguousarray(states[:, :n]), np.ascontiguousarray(states[:, n:2 * n])
    current = np.ascontiguousarray(states[:, 2 * n:]) if plant.motors is not None else None
    return ArmRun(ts, qs, qds, refs, taus, current)
