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

Joint stiffness (``joint_stiffness``, default 0): both laws add ``-K e`` per joint, a
stiffness in torque units [N·m/rad], for joints whose own viscous damping ``b`` dominates
their inertia. The gains above are sized on the inertia (``M^ Kp``, or ``Kp = m w^2``), so
such a joint's error ``m e'' + (m Kd + b) e' + m Kp e`` has a slow pole at ``m Kp / b`` and
almost no stiffness against its dry friction; ``K = b w`` gives it a first-order position
loop at ``w`` (:func:`manip_control.hold_design.damped_joint_stiffness`). Its torque is
clamped to ``joint_stiffness_limit`` [N·m] (default: the torque limit): on such a joint the
stiffness sets the speed, ``w e``, so an error of a few hundredths of a radian (a reference
step the safety layer lets through, a resume) would drive it at its velocity limit; the
clamp ``b v`` caps that speed at ``v``
(:func:`manip_control.hold_design.damped_joint_stiffness_limit`).

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

import functools
import math
import operator
import sys
from typing import NamedTuple, Sequence

from manip_control.arm_model import ArmModel
from manip_control.arm_model import TwoLinkArm
from manip_control.parameters import _nonnegative
from manip_control.parameters import _positive
from manip_control.parameters import _vector
from manip_control.parameters import AdaptationParameters
from manip_control.parameters import ControllerParameters
from manip_control.parameters import FrictionParameters
from manip_control.parameters import MotorParameters
from manip_control.parameters import NominalModel
from manip_control.parameters import ParameterError
import numpy as np


class ControlOutput(NamedTuple):
    """One controller tick's result, per joint in the model's joint order."""

    tau: tuple
    """Command after the limit [N·m], one float per joint."""
    saturated: tuple
    """Whether the limit acted, one bool per joint."""


# ControlOutput from a (tau, saturated) pair without the NamedTuple's Python-level __new__
# (half the cost, a tenth of the 2R tick)
_control_output = functools.partial(tuple.__new__, ControlOutput)


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


def controller_parameters(model: ArmModel, kp, kd, torque_limit, *,
                          friction: Sequence[FrictionParameters] | None = None,
                          motors: Sequence[MotorParameters] | None = None,
                          law: str = 'computed_torque',
                          adaptation: AdaptationParameters | None = None,
                          joint_stiffness: Sequence[float] | None = None,
                          joint_stiffness_limit: Sequence[float] | None = None
                          ) -> ControllerParameters:
    """
    Return the parameters of a :class:`Controller` on ``model`` from per-joint arrays.

    The nominal model's rotors are ``model``'s own (:meth:`~manip_control.arm_model.
    ArmModel.rotor_matrix`: the armature on the diagonal, a rotor riding on the previous link
    below it), so the drive inversion takes the same rotor torque the model's mass matrix
    holds.

    Parameters
    ----------
    model : ArmModel
        The controller's rigid body, with its armature.
    kp, kd : sequence of n float
        Gains [1/s^2], [1/s] (computed torque) or [N·m/rad], [N·m·s/rad] (PD + gravity).
    torque_limit : sequence of n float
        Command limit per joint [N·m] (``inf``: none).
    friction : sequence of n FrictionParameters, optional
        The nominal joint friction, fed forward at the reference velocity (default: none,
        nothing fed forward).
    motors : sequence of n MotorParameters, optional
        The nominal drives: their gear ratios and efficiencies are inverted (default: ideal
        actuators, nothing inverted).
    law : {'computed_torque', 'pd_gravity'}
        The feedback law.
    adaptation : AdaptationParameters, optional
        For :class:`manip_control.adaptation.AdaptiveController` (default: off).
    joint_stiffness : sequence of n float, optional
        Torque-unit stiffness per joint [N·m/rad] (default 0).
    joint_stiffness_limit : sequence of n float, optional
        Largest torque the stiffness adds per joint [N·m] (default: the torque limit).

    Raises
    ------
    ParameterError
        A per-joint list without ``model.n`` entries, a bad value, or rotors the inversion
        cannot take (a rotor coupled to a link other than the previous one).

    """
    n = model.n
    fcomp = friction is not None
    friction = tuple(friction) if fcomp else (FrictionParameters(),) * n
    rotor = np.asarray(model.rotor_matrix(), dtype=float)
    jr = tuple(float(v) for v in np.diag(rotor))
    coupled = bool(np.any(np.tril(rotor, -1)))
    if motors is not None:
        motors = tuple(motors)
        if len(motors) != n:
            raise ParameterError(f'motors: must have {n} entries, one per joint of the model '
                                 f'(got {len(motors)})')
        drives = {'gear_ratio': tuple(float(m.N) for m in motors),
                  'eta': tuple(float(m.eta) for m in motors),
                  'eta_back': tuple(float(m.eta_back) for m in motors)}
    else:
        drives = {'gear_ratio': tuple(max(1.0, jr[k] / rotor[k, k - 1]) if k and rotor[k, k - 1]
                                      else 1.0 for k in range(n)),
                  'eta': (1.0,) * n, 'eta_back': (1.0,) * n}
    nominal = NominalModel(friction=friction, rotor_inertia=jr, rotor_coupling=coupled,
                           **drives)
    if not np.allclose(rotor_matrix(nominal), rotor, rtol=1e-12, atol=0.0):
        raise ParameterError(f'model: its rotor matrix {rotor.tolist()} is not the armature '
                             'and previous-link coupling the drive inversion takes')
    # a joint without a limit (ideal actuators, no URDF effort): the largest float, as the
    # parameters take finite limits only
    limit = np.minimum(np.ravel(np.asarray(torque_limit, dtype=float)), sys.float_info.max)
    return ControllerParameters(
        law=law, nominal=nominal, kp=tuple(float(v) for v in np.ravel(kp)),
        kd=tuple(float(v) for v in np.ravel(kd)), ki=(0.0,) * n, integral_limit=(0.5,) * n,
        joint_stiffness=(0.0,) * n if joint_stiffness is None
        else tuple(float(v) for v in np.ravel(joint_stiffness)),
        joint_stiffness_limit=() if joint_stiffness_limit is None
        else tuple(float(v) for v in np.minimum(np.ravel(np.asarray(
            joint_stiffness_limit, dtype=float)), sys.float_info.max)),
        torque_limit=tuple(float(v) for v in limit),
        friction_compensation=fcomp,
        adaptation=AdaptationParameters() if adaptation is None else adaptation)


def _read_only(attr: str, doc: str) -> property:
    """Return a property that reads ``self.<attr>`` (a tuple) and cannot be set."""
    return property(operator.attrgetter(attr), doc=doc)


class ControlBuffer:
    """
    Preallocated output of :meth:`Controller.update` (``out=``), per joint in model order.

    Attributes
    ----------
    tau : ndarray, shape (n,)
        Command after the limit [N·m].
    saturated : ndarray of bool, shape (n,)
        Whether the limit acted.

    """

    __slots__ = ('tau', 'saturated')

    def __init__(self, n: int):
        self.tau = np.zeros(n)
        self.saturated = np.zeros(n, dtype=bool)


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

    Notes
    -----
    The law's implementation is chosen here, once, by the model: the closed-form 2R
    (:class:`~manip_control.arm_model.TwoLinkArm`) runs on Python floats (its scalar inverse
    dynamics); any other model runs on preallocated arrays, the per-joint arithmetic compiled
    with numba around one call of the model's inverse dynamics (or gravity). Both compute the
    law of the module docstring in the same order of operations.

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
        self._integral_limit = _vector('integral_limit', params.integral_limit, n,
                                       check=_nonnegative)
        self._joint_stiffness = _vector('joint_stiffness', params.joint_stiffness, n,
                                        check=_nonnegative)
        self._torque_limit = _vector('torque_limit', params.torque_limit, n, check=_positive)
        self._joint_stiffness_limit = _vector('joint_stiffness_limit',
                                              params.joint_stiffness_limit, n, check=_positive)
        self._fcomp = bool(params.friction_compensation)
        self._two_link = isinstance(self.model, TwoLinkArm)
        if self._two_link:
            # the closed form on floats (two_link_law): no array in the tick at all
            m, g = self.model.model, self._gear
            (jr1, _), (jc2, jr2) = g.rotor if g is not None else ((0.0, 0.0), (0.0, 0.0))
            self._law_model = (
                float(self._ct), float(self._fcomp), float(g is not None),
                m.a, m.b, m.d12, m.d22, m.g1, m.g2,
                *(float(v) for f in nm.friction for v in (f.b, f.tau_c, f.eps, f.tau_s, f.v_s)),
                *((g.wa[0], g.wb[0], g.wa[1], g.wb[1], jr1, jc2, jr2, *g.inv_eps) if g is not None
                  else (0.0,) * 9))
            self.update = self._update_two_link
        else:
            self._prepare_arrays()
            self.update = self._update_arrays
        self.set_gains(params.kp, params.kd, params.ki)
        self.reset()
        if not self._two_link:
            # compile (or load from numba's cache) now, never on the first tick
            self._update_arrays(self._x[0], self._x[0], self._x[0], self._x[0], self._x[0],
                                self.output())
            self.reset()

    def output(self) -> ControlBuffer:
        """Return a new preallocated output for ``update(..., out=...)``."""
        return ControlBuffer(self.n)

    def reset(self) -> None:
        """Zero the error integral."""
        if self._two_link:
            self._z = [0.0] * self.n
        else:
            self._z[:] = 0.0

    def set_gains(self, kp, kd, ki=None) -> None:
        """Change the gains (validated: kp, kd > 0, ki >= 0); takes effect on the next tick."""
        n = self.n
        kp = _vector('kp', kp, n, check=_positive)
        kd = _vector('kd', kd, n, check=_positive)
        ki = self._ki if ki is None else _vector('ki', ki, n, check=_nonnegative)
        self._kp, self._kd, self._ki = kp, kd, ki
        self._pack()

    def set_torque_limit(self, limit) -> None:
        """Change the per-joint command limit [N·m] (> 0); takes effect on the next tick."""
        self._torque_limit = _vector('torque_limit', limit, self.n, check=_positive)
        self._pack()

    kp = _read_only('_kp', 'The proportional gain per joint (change it with :meth:`set_gains`).')
    kd = _read_only('_kd', 'The derivative gain per joint (change it with :meth:`set_gains`).')
    ki = _read_only('_ki', 'The integral gain per joint (change it with :meth:`set_gains`).')
    torque_limit = _read_only('_torque_limit', 'The command limit per joint [N·m] (change it '
                              'with :meth:`set_torque_limit`).')
    integral_limit = _read_only('_integral_limit',
                                'The anti-windup clamp of the error integral per joint [rad·s].')
    joint_stiffness = _read_only('_joint_stiffness', 'The torque-unit stiffness per joint '
                                 '[N·m/rad] (fixed when the controller is built).')
    joint_stiffness_limit = _read_only('_joint_stiffness_limit', 'The largest torque the '
                                       'joint stiffness adds per joint [N·m] (fixed when the '
                                       'controller is built).')
    friction_compensation = _read_only('_fcomp', 'Whether the nominal friction is fed forward '
                                       '(fixed when the controller is built).')
    law_constants = _read_only('_constants', 'The constants of :func:`two_link_law` (the '
                               'closed-form 2R only).')

    def _pack(self) -> None:
        """Hand the gains and limits to the tick (one tuple store for the 2R: never torn)."""
        if self._two_link:
            self._constants = (*self._law_model, *self._kp, *self._kd, *self._ki,
                               *self._joint_stiffness, *self._joint_stiffness_limit,
                               *self._torque_limit,
                               *self._integral_limit, self.period)
        else:
            rows = self._rows
            rows[_R_KP], rows[_R_KD], rows[_R_KI] = self._kp, self._kd, self._ki
            rows[_R_LIMIT] = self._torque_limit

    def update(self, q: Sequence[float], qd: Sequence[float], q_d: Sequence[float],
               qd_d: Sequence[float], qdd_d: Sequence[float],
               out: ControlBuffer | None = None) -> ControlOutput | ControlBuffer:
        """
        One tick: command from the measured state and the reference sample.

        Parameters
        ----------
        q, qd : sequence of n float
            Measured position [rad] and velocity [rad/s] (tuples, lists or float arrays).
        q_d, qd_d, qdd_d : sequence of n float
            Desired position [rad], velocity [rad/s], acceleration [rad/s^2].
        out : ControlBuffer, optional
            Preallocated output (:meth:`output`): filled and returned, nothing allocated.

        Returns
        -------
        ControlOutput or ControlBuffer
            ``out`` when given, else a :class:`ControlOutput` of tuples.

        Notes
        -----
        The implementation chosen for the model when the controller was built is bound as
        the instance's ``update``; this method only forwards to it.

        """
        return self.update(q, qd, q_d, qd_d, qdd_d, out)

    # -- the closed-form 2R on floats --------------------------------------------------------
    def _update_two_link(self, q, qd, q_d, qd_d, qdd_d, out=None):
        z = self._z
        t1, t2, sat1, sat2, z[0], z[1] = two_link_law(q, qd, q_d, qd_d, qdd_d, z[0], z[1],
                                                      self._constants)
        if out is None:
            return _control_output(((t1, t2), (sat1, sat2)))
        tau, sat = out.tau, out.saturated
        tau[0] = t1
        tau[1] = t2
        sat[0] = sat1
        sat[1] = sat2
        return out

    # -- any model on arrays -----------------------------------------------------------------
    def _prepare_arrays(self) -> None:
        n = self.n
        self._servo, self._finish = _compiled()
        self._x = np.zeros((5, n))          # q, qd, q_d, qd_d, qdd_d of the tick
        self._e = np.zeros(n)
        self._a = np.zeros(n)
        self._z = np.zeros(n)
        self._buffer = self.output()        # for callers without out=
        self._rows, self._rotor, self._stribeck = finish_constants(
            self._friction, self._gear, self._integral_limit, self._joint_stiffness,
            self._joint_stiffness_limit)

    def _update_arrays(self, q, qd, q_d, qd_d, qdd_d, out=None):
        x = self._x
        x[0] = q
        x[1] = qd
        x[2] = q_d
        x[3] = qd_d
        x[4] = qdd_d
        e, a, z, rows = self._e, self._a, self._z, self._rows
        ct = self._ct
        self._servo(x, rows, z, ct, e, a)
        if ct:
            tau = self.model.inverse_dynamics(x[0], x[1], a)
        else:
            tau = self.model.gravity(x[0])
        buf = self._buffer if out is None else out
        self._finish(tau, x, e, a, z, rows, self._rotor, self.period, ct,
                     self._fcomp, self._stribeck, self._gear is not None,
                     buf.tau, buf.saturated)
        if out is None:
            return _control_output((tuple(buf.tau.tolist()), tuple(buf.saturated.tolist())))
        return out


def two_link_law(q: Sequence[float], qd: Sequence[float], q_d: Sequence[float],
                 qd_d: Sequence[float], qdd_d: Sequence[float], z1: float, z2: float,
                 k: Sequence[float]) -> tuple:
    """
    One tick of the law (module docstring) for the closed-form 2R, on floats.

    The one implementation of the 2R's law: :class:`Controller` runs it in Python, the
    compiled closed loop (:mod:`manip_control.kernel`) compiles it with numba (hence only
    floats, tuples and :mod:`math`). The rigid body is the nominal model's closed form,
    ``tau = M^ a + C^ qd + g^`` (:meth:`~manip_control.dynamics.TwoLinkModel.
    inverse_dynamics_scalar`), ``a = qdd_d - Kd e_dot - Kp e - Ki z``.

    Parameters
    ----------
    q, qd : pair of float
        Measured position [rad] and velocity [rad/s].
    q_d, qd_d, qdd_d : pair of float
        Reference position [rad], velocity [rad/s], acceleration [rad/s^2].
    z1, z2 : float
        Error integral before the tick [rad·s].
    k : sequence of 43 float
        :attr:`Controller.law_constants`: computed torque, friction feed-forward and gear
        inversion (1.0 or 0.0); the nominal 2R's ``a, b, d12, d22, g1, g2``; its friction
        ``b, tau_c, eps, tau_s, v_s`` per joint; the gear inversion's ``wa, wb`` per joint,
        ``D^`` (``Jr1, Jc2, Jr2``) and ``1/eps`` per joint (:func:`gear_inversion_constants`);
        ``kp, kd, ki, joint_stiffness, joint_stiffness_limit, torque_limit, integral_limit``
        per joint; the period [s].

    Returns
    -------
    tuple
        ``(tau1, tau2, sat1, sat2, z1, z2)``: the command after the limit [N·m], whether the
        limit acted, the error integral after the tick [rad·s].

    """
    (q1, q2), (v1, v2), (r1, r2), (rv1, rv2), (ra1, ra2) = q, qd, q_d, qd_d, qdd_d
    (ct, fcomp, gear, ma, mb, md12, md22, mg1, mg2, b1, c1, ep1, st1, vs1, b2, c2, ep2, st2,
     vs2, wa1, wb1, wa2, wb2, jr1, jc2, jr2, ie1, ie2, kp1, kp2, kd1, kd2, ki1, ki2, ks1, ks2,
     kl1, kl2, l1, l2, zl1, zl2, period) = k
    e1 = q1 - r1
    e2 = q2 - r2
    if ct:
        a1 = ra1 - kd1 * (v1 - rv1) - kp1 * e1 - ki1 * z1
        a2 = ra2 - kd2 * (v2 - rv2) - kp2 * e2 - ki2 * z2
        bc2 = mb * math.cos(q2)
        m12 = md12 + bc2
        h = -mb * math.sin(q2)
        g12 = mg2 * math.cos(q1 + q2)
        t1 = ((ma + 2.0 * bc2) * a1 + m12 * a2 + h * (2.0 * v1 * v2 + v2 * v2)
              + mg1 * math.cos(q1) + g12)
        t2 = m12 * a1 + md22 * a2 - h * v1 * v1 + g12
    else:
        a1 = a2 = 0.0
        g12 = mg2 * math.cos(q1 + q2)
        t1 = mg1 * math.cos(q1) + g12 - kp1 * e1 - kd1 * v1 - ki1 * z1
        t2 = g12 - kp2 * e2 - kd2 * v2 - ki2 * z2
    if ks1:
        t1 -= min(max(ks1 * e1, -kl1), kl1)
    if ks2:
        t2 -= min(max(ks2 * e2, -kl2), kl2)
    if fcomp:
        if st1:
            c1 += st1 * math.exp(-(rv1 / vs1) ** 2)
        if st2:
            c2 += st2 * math.exp(-(rv2 / vs2) ** 2)
        t1 += b1 * rv1 + c1 * math.tanh(rv1 / ep1)
        t2 += b2 * rv2 + c2 * math.tanh(rv2 / ep2)
    if gear:
        ro1 = jr1 * a1
        ro2 = jc2 * a1 + jr2 * a2
        s1 = math.tanh(rv1 * ie1)
        s2 = math.tanh(rv2 * ie2)
        y1 = t1 - ro1
        y2 = t2 - ro2
        k1 = 1.0 - (wa1 * (1.0 if y1 >= 0.0 else -1.0) + wb1 * s1) * s1
        k2 = 1.0 - (wa2 * (1.0 if y2 >= 0.0 else -1.0) + wb2 * s2) * s2
        t1 = y1 / max(k1, GEAR_INVERSION_FLOOR) + ro1
        t2 = y2 / max(k2, GEAR_INVERSION_FLOOR) + ro2
    sat1 = t1 > l1 or t1 < -l1
    sat2 = t2 > l2 or t2 < -l2
    if sat1:
        t1 = l1 if t1 > 0.0 else -l1
    if sat2:
        t2 = l2 if t2 > 0.0 else -l2
    # Anti-windup: no integration into a saturated direction (a positive error pushes
    # the command negative), then clamp the integral.
    if ki1 and not (sat1 and (t1 < 0.0) == (e1 > 0.0)):
        z1 = min(max(z1 + e1 * period, -zl1), zl1)
    if ki2 and not (sat2 and (t2 < 0.0) == (e2 > 0.0)):
        z2 = min(max(z2 + e2 * period, -zl2), zl2)
    return t1, t2, sat1, sat2, z1, z2


# rows of Controller._rows: gains, limits, nominal friction and gear-inversion constants
(_R_KP, _R_KD, _R_KI, _R_LIMIT, _R_ZLIM, _R_B, _R_TC, _R_EPS, _R_TS, _R_VS, _R_WA, _R_WB,
 _R_IEPS, _R_KS, _R_KSL) = range(15)
_ROWS = 15
#: The row of the torque limit in :func:`finish_constants`' rows.
LIMIT_ROW = _R_LIMIT


def _servo_py(x, rows, z, ct, e, a):
    """``e = q - q_d``; computed torque: ``a = qdd_d - Kd (qd - qd_d) - Kp e - Ki z``."""
    kp, kd, ki = rows[_R_KP], rows[_R_KD], rows[_R_KI]
    for k in range(x.shape[1]):
        e[k] = x[0, k] - x[2, k]
        if ct:
            a[k] = x[4, k] - kd[k] * (x[1, k] - x[3, k]) - kp[k] * e[k] - ki[k] * z[k]
        else:
            a[k] = 0.0


def _finish_py(tau, x, e, a, z, rows, rotor, period, ct, fcomp, stribeck, gear, out, sat):
    """
    Finish the law after the rigid body, joint by joint on floats, into ``out`` / ``sat``.

    ``tau`` is ``M^ a + c^ + g^`` (computed torque) or ``g^`` (PD + gravity, whose PD terms
    are added here); then the joint stiffness, the friction feed-forward, the gear inversion
    (:func:`invert_gear`), the limit and the integral with anti-windup, as
    :func:`two_link_law` does for the 2R. Returns whether any joint's torque was limited.
    """
    kp, kd, ki, lim, zl = rows[_R_KP], rows[_R_KD], rows[_R_KI], rows[_R_LIMIT], rows[_R_ZLIM]
    limited = False
    for k in range(x.shape[1]):
        t = tau[k]
        if not ct:
            t = t - kp[k] * e[k] - kd[k] * x[1, k] - ki[k] * z[k]
        if rows[_R_KS, k] != 0.0:
            lk = rows[_R_KSL, k]
            t = t - min(max(rows[_R_KS, k] * e[k], -lk), lk)
        if fcomp:
            v = x[3, k]
            level = rows[_R_TC, k]
            if stribeck and rows[_R_TS, k] != 0.0:
                level += rows[_R_TS, k] * math.exp(-(v / rows[_R_VS, k]) ** 2)
            t += rows[_R_B, k] * v + level * math.tanh(v / rows[_R_EPS, k])
        if gear:
            ro = 0.0
            for j in range(k + 1):
                if rotor[k, j] != 0.0:
                    ro += rotor[k, j] * a[j]
            s = math.tanh(x[3, k] * rows[_R_IEPS, k])
            y = t - ro
            kappa = 1.0 - (rows[_R_WA, k] * (1.0 if y >= 0.0 else -1.0) + rows[_R_WB, k] * s) * s
            t = y / max(kappa, GEAR_INVERSION_FLOOR) + ro
        lk = lim[k]
        hit = t > lk or t < -lk
        if hit:
            t = lk if t > 0.0 else -lk
        out[k] = t
        sat[k] = hit
        limited = limited or hit
        # Anti-windup: no integration into a saturated direction (a positive error pushes
        # the command negative), then clamp the integral.
        if ki[k] != 0.0 and not (hit and (t < 0.0) == (e[k] > 0.0)):
            z[k] = min(max(z[k] + e[k] * period, -zl[k]), zl[k])
    return limited


def finish_constants(friction: Sequence, gear: GearInversion | None,
                     integral_limit: Sequence[float],
                     joint_stiffness: Sequence[float] | None = None,
                     joint_stiffness_limit: Sequence[float] | None = None) -> tuple:
    """
    Return ``(rows, rotor, stribeck)``: the constants of the compiled finish of the law.

    ``rows`` (15, n): gains, limits (the caller fills ``kp, kd, ki`` and the torque limit),
    the joint stiffness (default 0) and its torque limit (default none), the nominal friction
    and the gear inversion's constants per joint; ``rotor`` (n, n): the nominal rotor matrix
    ``D^``; ``stribeck``: whether any joint has a Stribeck term.
    """
    n = len(friction)
    rows = np.zeros((_ROWS, n))
    rows[_R_ZLIM] = integral_limit
    if joint_stiffness is not None:
        rows[_R_KS] = joint_stiffness
    rows[_R_KSL] = math.inf if joint_stiffness_limit is None else joint_stiffness_limit
    rows[_R_B] = [f.b for f in friction]
    rows[_R_TC] = [f.tau_c for f in friction]
    rows[_R_EPS] = [f.eps for f in friction]
    rows[_R_TS] = [f.tau_s for f in friction]
    rows[_R_VS] = [f.v_s for f in friction]
    rotor = np.zeros((n, n))
    if gear is not None:
        rows[_R_WA], rows[_R_WB], rows[_R_IEPS] = gear.wa, gear.wb, gear.inv_eps
        rotor[:] = gear.rotor
    return rows, rotor, any(f.tau_s for f in friction)


def compiled_finish():
    """
    Return the finish of the law on arrays (:func:`_finish_py`), compiled with numba.

    ``finish(tau, x, e, a, z, rows, rotor, period, ct, fcomp, stribeck, gear, out, sat)``:
    ``x`` (5, n) the tick's ``q, qd, q_d, qd_d, qdd_d``, ``a`` the law's acceleration,
    ``rows``, ``rotor``, ``stribeck`` of :func:`finish_constants`; returns whether any joint's
    torque was limited.
    """
    return _compiled()[1]


_COMPILED: list = []


def _compiled() -> tuple:
    """
    Return ``(servo, finish)``: the helpers compiled with numba, or the Python ones without it.

    numba is imported here, on the first controller of a model other than the closed-form 2R,
    not with this module: importing it costs about 0.3 s of CPU that the 2R path never needs.
    """
    if not _COMPILED:
        try:  # numba is a runtime dependency; without it the same functions run in Python
            import numba
            jit = numba.njit(cache=True)
            _COMPILED[:] = jit(_servo_py), jit(_finish_py)
        except ImportError:  # pragma: no cover - exercised only where numba is absent
            _COMPILED[:] = _servo_py, _finish_py
    return tuple(_COMPILED)


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
