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
Rigid-body model of a serial arm with n joints: one interface, two implementations.

Every model answers for the joint-space equation of motion::

    M(q) qdd + C(q, qd) qd + g(q) = tau                                       [N·m]

with ``M`` the inertia matrix [kg·m^2] (rotor armature included), ``C`` the Coriolis and
centrifugal matrix in Christoffel form (so that ``Mdot - 2 C`` is skew-symmetric), ``g = dV/dq``
the gravity torque and ``b(q, qd) = C qd + g`` the bias torque. Vectors have shape ``(n,)``,
matrices ``(n, n)``, in the order of :attr:`ArmModel.joint_names`.

Implementations:

- :class:`TwoLinkArm` wraps the closed-form planar 2R of :mod:`manip_control.dynamics`
  (vertical plane, gravity ``(0, -g0)`` in its base frame); it is the default arm and its
  compiled kernel stays the fast path.
- :class:`UrdfArm` builds a Pinocchio model (https://github.com/stack-of-tasks/pinocchio) from
  a URDF (the ROS ``robot_description`` text, a file, or a ``.xacro`` file through the
  ``xacro`` package) and evaluates it with Pinocchio's algorithms: CRBA for ``M``, RNEA for
  inverse dynamics and the bias, ABA for forward dynamics, ``computeCoriolisMatrix`` and
  ``computeGeneralizedGravity``. The model is built once; each user (plant, controller,
  thread) takes its own workspace with :meth:`ArmModel.workspace`, which shares the model and
  owns its scratch data, as Pinocchio's ``Model`` / ``Data`` split intends.

Rotors. A motor with rotor inertia ``Jm`` [kg·m^2] behind a gear of ratio ``N`` turns at
``N qd_j`` relative to the body that carries it, the parent link of joint j (the motor
placement of Spong, Hutchinson & Vidyasagar, *Robot Modeling and Control*, 2nd ed., 6.4). Its
spin adds the kinetic energy ``1/2 Jm (a_j . w_p + N qd_j)^2``, with ``a_j`` the joint axis and
``w_p`` the parent's angular velocity. The ``armature`` ``Jm N^2`` (the reflected rotor
inertia) goes on the diagonal of ``M``. The coupling terms ``Jm (a_j . w_p)^2 / 2 +
Jm N qd_j (a_j . w_p)`` are constant in ``q`` exactly when every moving ancestor of joint j is
a prismatic joint or a revolute joint with its axis parallel to ``a_j`` (planar sub-chains,
the 2R among them): then ``a_j . w_p = r^T qd`` with ``r_k = a_k . a_j = +-1`` on those
ancestors, and ``M`` gains the constant matrix ``Jm (r r^T + N (e_j r^T + r e_j^T))``. That is
the coupling this module models (``rotor_coupling``); a joint whose coupling would depend on
``q`` (e.g. a Panda's second joint) is refused with a one-line error rather than modelled
wrongly. A constant addition to ``M`` adds nothing to ``C``.

URDF conventions. The joints are the URDF's movable joints (revolute, continuous, prismatic)
along the trunk of the tree: from the root link, follow the one child branch that holds
movable joints; where several do (a Panda's two fingers), the trunk ends and the branches are
locked. ``joints=[...]`` names another subset (in chain order); the joints left out are
locked at their position (``locked_positions``, default 0 clipped into the joint's limits)
with ``pinocchio.buildReducedModel``. A ``continuous`` joint is modelled as a revolute joint
without position limits, so every joint has one position coordinate (``nq = nv = n``) and ``q``
is the angle a ``sensor_msgs/JointState`` carries. Limits come from each joint's ``<limit>``:
position ``[lower, upper]`` [rad or m], ``velocity`` [rad/s or m/s], ``effort`` [N·m or N];
a missing attribute, or a value the URDF specification reads as "no limit" (``effort`` or
``velocity`` <= 0, ``lower >= upper``), gives an infinite limit and is listed in
:attr:`JointLimits.unspecified`, so that a caller that commands hardware can refuse to run
on it; ``limits={...}`` overrides any of the four. Gravity is ``(0, 0, -9.81)`` m/s^2 in the
URDF's root frame unless ``gravity=`` says otherwise.

Inertial data is checked where the URDF is read, before Pinocchio sees it (its parser drops a
NaN inertia with a printed message and keeps going): every ``<inertial>`` value and every
``<origin>`` must be a finite number, a mass >= 0, a massless link without rotational
inertia, and the inertia about the centre of mass positive semi-definite with principal
moments satisfying the triangle inequality ``l1 + l2 >= l3`` (to :data:`INERTIA_TOL` of the
largest); the body a movable joint moves (its child link and the links fixed to it) must have
mass > 0. Massless frames fixed to a body (a ``tool0``) carry nothing and are accepted.

Errors: a bad URDF raises :class:`UrdfError`, an unknown or misordered joint name
:class:`JointSelectionError`, a vector of the wrong length :class:`ArmShapeError`, every one a
:class:`ArmModelError` (a ``ValueError``) with a one-line message naming what is wrong.
"""

from __future__ import annotations

import abc
import copy
from dataclasses import dataclass
import math
from pathlib import Path
import re
from typing import Any, Mapping, Sequence
import xml.etree.ElementTree as ET

from manip_control.dynamics import TwoLinkModel
from manip_control.parameters import loaded_arm
from manip_control.parameters import NominalModel
from manip_control.parameters import PlantParameters
from manip_control.urdf import joint_limits
import numpy as np

#: Default gravity of a URDF arm [m/s^2], in the URDF's root frame (REP 103: z up).
DEFAULT_GRAVITY = (0.0, 0.0, -9.81)
#: URDF joint types that move and that this module models.
MOVABLE_TYPES = ('revolute', 'continuous', 'prismatic')
_REFUSED_TYPES = ('floating', 'planar')
_PARALLEL_TOL = 1e-9


class ArmModelError(ValueError):
    """Something about an arm model or its input is wrong; the message says what."""


class UrdfError(ArmModelError):
    """The URDF cannot be read or describes something this module does not model."""


class JointSelectionError(ArmModelError):
    """Unknown, repeated or misordered joint names."""


class ArmShapeError(ArmModelError):
    """A per-joint vector or a matrix has the wrong shape."""


def _one_line(text: Any) -> str:
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    return lines[0] if lines else type(text).__name__


def _readonly(values: Any) -> np.ndarray:
    arr = np.array(values, dtype=float)
    arr.setflags(write=False)
    return arr


@dataclass(frozen=True)
class JointLimits:
    """
    Per-joint limits, arrays of shape ``(n,)`` in joint order (read-only).

    Attributes
    ----------
    lower, upper : ndarray
        Position range [rad] (revolute) or [m] (prismatic); ``-inf`` / ``inf`` when none.
    velocity : ndarray
        Speed limit [rad/s] or [m/s], > 0; ``inf`` when none.
    effort : ndarray
        Torque [N·m] or force [N] limit, > 0; ``inf`` when none.
    unspecified : tuple of str
        ``'joint.field'`` for every limit that the description did not give (and is
        therefore infinite), e.g. ``('joint1.effort',)``.

    """

    lower: np.ndarray
    upper: np.ndarray
    velocity: np.ndarray
    effort: np.ndarray
    unspecified: tuple = ()

    FIELDS = ('lower', 'upper', 'velocity', 'effort')

    def with_overrides(self, overrides: Mapping[str, Any] | None,
                       joint_names: Sequence[str]) -> 'JointLimits':
        """
        Return a copy with some fields replaced.

        Parameters
        ----------
        overrides : mapping
            ``{'lower' | 'upper' | 'velocity' | 'effort': sequence of n float}``.
        joint_names : sequence of str
            The joints, for the lengths and the messages.

        Raises
        ------
        ArmModelError
            Unknown field, wrong length, non-finite velocity/effort or ``lower > upper``.

        """
        if not overrides:
            return self
        n = len(joint_names)
        values = {f: np.array(getattr(self, f)) for f in self.FIELDS}
        given = set()
        for key, value in overrides.items():
            if key not in self.FIELDS:
                raise ArmModelError(f'limits.{key}: unknown limit '
                                    f'(one of {", ".join(self.FIELDS)})')
            arr = _joint_vector(f'limits.{key}', value, n)
            if key in ('velocity', 'effort') and not np.all(arr > 0.0):
                k = int(np.flatnonzero(~(arr > 0.0))[0])
                raise ArmModelError(f'limits.{key}[{k}] ({joint_names[k]}): must be > 0 '
                                    f'(got {arr[k]})')
            values[key] = arr
            given.add(key)
        bad = np.flatnonzero(values['lower'] > values['upper'])
        if bad.size:
            k = int(bad[0])
            raise ArmModelError(f'limits: {joint_names[k]} has lower {values["lower"][k]} > '
                                f'upper {values["upper"][k]}')
        left = tuple(u for u in self.unspecified if u.rsplit('.', 1)[1] not in given)
        return JointLimits(*(_readonly(values[f]) for f in self.FIELDS), unspecified=left)


def _joint_vector(name: str, value: Any, n: int) -> np.ndarray:
    """Per-joint float vector of length n (finite), or ArmShapeError / ArmModelError."""
    try:
        arr = np.array(value, dtype=float)
    except (TypeError, ValueError):
        raise ArmModelError(f'{name}: expected {n} numbers, got {value!r}') from None
    if arr.ndim == 0:
        arr = np.full(n, float(arr))
    if arr.shape != (n,):
        raise ArmShapeError(f'{name}: expected {n} values (one per joint), got shape {arr.shape}')
    if np.any(np.isnan(arr)):
        raise ArmModelError(f'{name}: NaN in {arr.tolist()}')
    return arr


class ArmModel(abc.ABC):
    """
    The rigid-body model of an arm with :attr:`n` joints (see the module docstring).

    Attributes
    ----------
    n : int
        Number of joints (= degrees of freedom).
    joint_names : tuple of str
        Joint names in the order of every vector.
    limits : JointLimits
        Position, velocity and effort limits per joint.
    gravity_field : ndarray, shape (3,)
        Gravity acceleration [m/s^2] in the model's base frame.

    Notes
    -----
    The vector methods check only the shape of their arguments (an :class:`ArmShapeError`
    names the argument); they do not copy or validate values further, so they stay cheap
    enough for a 1 kHz loop. The arrays they return are the caller's to keep.

    """

    n: int
    joint_names: tuple
    limits: JointLimits
    gravity_field: np.ndarray

    def _vec(self, name: str, x: Any) -> np.ndarray:
        arr = np.asarray(x, dtype=float)
        if arr.shape != (self.n,):
            raise ArmShapeError(f'{name}: expected {self.n} values (one per joint: '
                                f'{", ".join(self.joint_names)}), got shape {arr.shape}')
        return arr

    # -- the interface -----------------------------------------------------------------------
    @abc.abstractmethod
    def mass_matrix(self, q) -> np.ndarray:
        """Inertia matrix ``M(q)`` [kg·m^2], shape (n, n), symmetric positive definite."""

    @abc.abstractmethod
    def coriolis_matrix(self, q, qd) -> np.ndarray:
        """Christoffel-form ``C(q, qd)`` [N·m·s/rad], shape (n, n): ``Mdot - 2 C`` is skew."""

    @abc.abstractmethod
    def gravity(self, q) -> np.ndarray:
        """Gravity torque ``g(q) = dV/dq`` [N·m], shape (n,)."""

    @abc.abstractmethod
    def bias(self, q, qd) -> np.ndarray:
        """Bias torque ``b(q, qd) = C(q, qd) qd + g(q)`` [N·m], shape (n,)."""

    @abc.abstractmethod
    def inverse_dynamics(self, q, qd, qdd) -> np.ndarray:
        """Joint torque ``tau = M(q) qdd + C(q, qd) qd + g(q)`` [N·m], shape (n,)."""

    @abc.abstractmethod
    def forward_dynamics(self, q, qd, tau) -> np.ndarray:
        """Joint acceleration ``qdd = M(q)^-1 (tau - C(q, qd) qd - g(q))`` [rad/s^2]."""

    @abc.abstractmethod
    def potential_energy(self, q) -> float:
        """Gravitational potential energy ``V(q)`` [J] (zero at the base frame's origin)."""

    def kinetic_energy(self, q, qd) -> float:
        """``T = 1/2 qd^T M(q) qd`` [J] (rotor spin included)."""
        qd = self._vec('qd', qd)
        return 0.5 * float(qd @ self.mass_matrix(q) @ qd)

    def total_energy(self, q, qd) -> float:
        """Mechanical energy ``T + V`` [J]."""
        return self.kinetic_energy(q, qd) + self.potential_energy(q)

    def workspace(self) -> 'ArmModel':
        """Return a model for another user: same arm, its own scratch data (thread-safe)."""
        return copy.copy(self)

    def with_payload(self, mass: float, offset: Any = None) -> 'ArmModel':
        """
        Return a copy whose last link carries a point mass ``mass`` [kg] at the tool.

        Raises
        ------
        ArmModelError
            This model cannot carry a payload, or a bad mass or offset.

        """
        raise ArmModelError(f'{type(self).__name__}: no payload model')

    def rotor_matrix(self) -> np.ndarray:
        """
        Rotor torque matrix ``D`` [kg·m^2], shape (n, n): ``D qdd`` accelerates the rotors.

        Row j is ``N_j Jm_j ddtheta_mj / qdd`` referred to joint j, so that the mesh torque of
        drive j is ``T_j = N_j k_t i_j - (D qdd)_j``: ``Jm N^2`` on the diagonal (the
        armature) and, for a rotor coupled to its carrier, ``Jm N r^T`` (module docstring).
        The default is a model without rotors (zeros).
        """
        return np.zeros((self.n, self.n))

    # -- names of the 2R model, so that the control laws take any ArmModel --------------------
    def inertia_matrix(self, q) -> np.ndarray:
        """Alias of :meth:`mass_matrix`."""
        return self.mass_matrix(q)

    def gravity_vector(self, q) -> np.ndarray:
        """Alias of :meth:`gravity`."""
        return self.gravity(q)

    def coriolis_vector(self, q, qd) -> np.ndarray:
        """``c(q, qd) = C(q, qd) qd = b(q, qd) - g(q)`` [N·m], shape (n,)."""
        return self.bias(q, qd) - self.gravity(q)


# ------------------------------------------------------------------------------------------
# the closed-form planar 2R


class TwoLinkArm(ArmModel):
    """
    The planar 2R of :mod:`manip_control.dynamics` behind the :class:`ArmModel` interface.

    Parameters
    ----------
    model : TwoLinkModel
        The closed-form model (arm, reflected rotor inertia, rotor coupling).
    joint_names : sequence of 2 str
        Names of joint 1 and joint 2.
    limits : JointLimits, optional
        Default: no limits (every field infinite and listed as unspecified).

    Notes
    -----
    The arm moves in its vertical plane: gravity ``(0, -g0, 0)`` in the base frame (zero for
    ``plane: horizontal``); :attr:`gravity_field` reports it, it is not configurable here.

    """

    def __init__(self, model: TwoLinkModel, joint_names: Sequence[str] = ('joint1', 'joint2'),
                 limits: JointLimits | None = None):
        names = tuple(str(j) for j in joint_names)
        if len(names) != 2 or len(set(names)) != 2:
            raise JointSelectionError(f'joint_names: the 2R needs 2 distinct names, got {names}')
        self.model = model
        self.n = 2
        self.joint_names = names
        self.gravity_field = _readonly((0.0, -model.arm.gravity, 0.0))
        if limits is None:
            inf = np.full(2, math.inf)
            limits = JointLimits(_readonly(-inf), _readonly(inf), _readonly(inf), _readonly(inf),
                                 tuple(f'{j}.{f}' for j in names for f in JointLimits.FIELDS))
        self.limits = limits

    @classmethod
    def from_plant(cls, plant: PlantParameters,
                   joint_names: Sequence[str] = ('joint1', 'joint2')) -> 'TwoLinkArm':
        """Build the simulated arm of ``plant`` (rotors as configured) with its URDF limits."""
        lim = joint_limits(plant)
        limits = JointLimits(_readonly([x.lower for x in lim]), _readonly([x.upper for x in lim]),
                             _readonly([x.velocity for x in lim]),
                             _readonly([x.effort for x in lim]))
        return cls(TwoLinkModel(plant.arm, plant.reflected_inertia, plant.rotor_coupling_terms),
                   joint_names, limits)

    @classmethod
    def from_nominal(cls, nominal: NominalModel,
                     joint_names: Sequence[str] = ('joint1', 'joint2'),
                     limits: JointLimits | None = None) -> 'TwoLinkArm':
        """Build the controller's nominal 2R model."""
        return cls(TwoLinkModel(nominal.arm, nominal.rotor_inertia,
                                nominal.rotor_coupling_terms), joint_names, limits)

    def with_payload(self, mass: float, offset: Any = None) -> 'TwoLinkArm':
        """
        Return the 2R with a point mass ``mass`` [kg] at the tip of link 2.

        Link 2's mass, centre of mass and inertia as
        :func:`manip_control.parameters.loaded_arm` (parallel-axis theorem); the rotors
        stay. ``offset`` must be None: the 2R's tool is the tip.
        """
        if offset is not None:
            raise ArmModelError('offset: the 2R carries its payload at the tip of link 2')
        mass = payload_mass(mass)
        m = self.model
        return TwoLinkArm(TwoLinkModel(loaded_arm(m.arm, mass), m.rotor_inertia,
                                       m.rotor_coupling), self.joint_names, self.limits)

    def mass_matrix(self, q) -> np.ndarray:
        """Inertia matrix ``M(q)`` [kg·m^2] in closed form."""
        return self.model.inertia_matrix(self._vec('q', q))

    def coriolis_matrix(self, q, qd) -> np.ndarray:
        """Christoffel-form ``C(q, qd)`` [N·m·s/rad] in closed form."""
        return self.model.coriolis_matrix(self._vec('q', q), self._vec('qd', qd))

    def gravity(self, q) -> np.ndarray:
        """Gravity torque ``g(q)`` [N·m] in closed form."""
        return self.model.gravity_vector(self._vec('q', q))

    def bias(self, q, qd) -> np.ndarray:
        """``C(q, qd) qd + g(q)`` [N·m] (inverse dynamics at zero acceleration)."""
        q, qd = self._vec('q', q), self._vec('qd', qd)
        return np.array(self.model.inverse_dynamics_scalar(q[0], q[1], qd[0], qd[1], 0.0, 0.0))

    def coriolis_vector(self, q, qd) -> np.ndarray:
        """``C(q, qd) qd`` [N·m] in closed form."""
        return self.model.coriolis_vector(self._vec('q', q), self._vec('qd', qd))

    def inverse_dynamics(self, q, qd, qdd) -> np.ndarray:
        """``tau = M qdd + C qd + g`` [N·m] in closed form."""
        try:    # unpacking checks the length without an array per argument (1 kHz loops)
            (q1, q2), (v1, v2), (a1, a2) = q, qd, qdd
        except (TypeError, ValueError):
            q, qd, qdd = self._vec('q', q), self._vec('qd', qd), self._vec('qdd', qdd)
            (q1, q2), (v1, v2), (a1, a2) = q, qd, qdd
        return np.array(self.model.inverse_dynamics_scalar(float(q1), float(q2), float(v1),
                                                           float(v2), float(a1), float(a2)))

    def forward_dynamics(self, q, qd, tau) -> np.ndarray:
        """``qdd = M^-1 (tau - C qd - g)`` [rad/s^2] in closed form."""
        q, qd, tau = self._vec('q', q), self._vec('qd', qd), self._vec('tau', tau)
        return np.array(self.model.forward_dynamics_scalar(q[0], q[1], qd[0], qd[1],
                                                           tau[0], tau[1]))

    def potential_energy(self, q) -> float:
        """``V = m1 g0 lc1 sin q1 + m2 g0 (l1 sin q1 + lc2 sin(q1 + q2))`` [J]."""
        return self.model.potential_energy(self._vec('q', q))

    def workspace(self) -> 'TwoLinkArm':
        """Return ``self``: the closed form keeps no scratch data, one object serves all."""
        return self

    def rotor_matrix(self) -> np.ndarray:
        """``D = [[Jr1, 0], [c12, Jr2]]`` [kg·m^2] (:func:`manip_control.plant.rotor_matrix`)."""
        jr1, jr2 = self.model.rotor_inertia
        return np.array([[jr1, 0.0], [self.model.rotor_coupling[1], jr2]])


# ------------------------------------------------------------------------------------------
# URDF arms on Pinocchio


def _pinocchio():
    try:
        import pinocchio
    except ImportError as exc:  # pragma: no cover - a dependency of the package
        raise ArmModelError(f'URDF arms need Pinocchio (pip install pin): {exc}') from None
    return pinocchio


@dataclass
class _UrdfJoint:
    name: str
    kind: str
    parent: str
    child: str
    element: Any


def _float_attr(elem, name: str, joint: str, source: str) -> float | None:
    text = elem.get(name) if elem is not None else None
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        raise UrdfError(f'{source}: joint {joint}: <limit {name}="{text}"> is not a number') \
            from None


def read_urdf_file(path: str | Path, mappings: Mapping[str, str] | None = None) -> str:
    """
    Return the URDF text of a ``.urdf`` file, or of a ``.xacro`` file processed by xacro.

    Parameters
    ----------
    path : str or Path
        The file. A name ending in ``.xacro`` is expanded with the ``xacro`` package.
    mappings : mapping, optional
        xacro arguments (``name:=value``).

    Raises
    ------
    UrdfError
        Unreadable file, xacro missing or failing (one line, naming the file).

    """
    path = Path(path)
    if path.suffix == '.xacro':
        try:
            import xacro
        except ImportError:
            raise UrdfError(f'{path}: a .xacro file needs the xacro package '
                            '(pip install xacro, or source ROS 2)') from None
        if not path.is_file():
            raise UrdfError(f'{path}: no such file')
        try:
            doc = xacro.process_file(str(path), mappings=dict(mappings or {}))
        except Exception as exc:  # noqa: B902 - xacro raises many kinds; all are one line here
            raise UrdfError(f'{path}: xacro failed: {_one_line(exc)}') from None
        return doc.toxml()
    try:
        return path.read_text(encoding='utf-8')
    except FileNotFoundError:
        raise UrdfError(f'{path}: no such file') from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UrdfError(f'{path}: cannot read ({_one_line(exc)})') from None


class UrdfArm(ArmModel):
    """
    A serial arm from its URDF, evaluated with Pinocchio (see the module docstring).

    Build it with :meth:`from_string` (the ``robot_description`` text) or :meth:`from_file`.

    Attributes
    ----------
    pin_model : pinocchio.Model
        The (reduced) model; shared by every :meth:`workspace`, never modified after
        construction.
    armature : ndarray, shape (n,)
        Reflected rotor inertia ``Jm N^2`` per joint [kg·m^2].
    gear_ratio : ndarray, shape (n,)
        ``N`` per joint (from the URDF ``<transmission>`` ``mechanicalReduction`` when given,
        else 1), used by the rotor coupling.
    rotor_coupling : ndarray of bool, shape (n,)
        Joints whose rotor coupling is in ``M``.
    coupling_matrix : ndarray, shape (n, n)
        The constant rotor-coupling part of ``M`` [kg·m^2].
    locked_joints : dict
        Movable URDF joints left out of the model -> the position they are locked at.
    source : str
        Where the description came from (for messages).

    """

    def __init__(self, *_args, **_kwargs):
        raise TypeError('use UrdfArm.from_string(text, ...) or UrdfArm.from_file(path, ...)')

    # -- construction --------------------------------------------------------------------------
    @classmethod
    def from_file(cls, path: str | Path, joints: Sequence[str] | None = None, *,
                  xacro_args: Mapping[str, str] | None = None, **kwargs) -> 'UrdfArm':
        """
        Load a ``.urdf`` file or a ``.xacro`` file (through the ``xacro`` package).

        Parameters are those of :meth:`from_string`, plus ``xacro_args`` (xacro mappings).
        """
        kwargs.setdefault('source', str(path))
        return cls.from_string(read_urdf_file(path, xacro_args), joints, **kwargs)

    @classmethod
    def from_string(cls, urdf: str, joints: Sequence[str] | None = None, *,
                    gravity: Sequence[float] = DEFAULT_GRAVITY,
                    armature: Any = 0.0,
                    gear_ratio: Any = None,
                    rotor_coupling: bool | Sequence[bool] = False,
                    limits: Mapping[str, Any] | None = None,
                    locked_positions: Mapping[str, float] | None = None,
                    source: str = 'robot_description') -> 'UrdfArm':
        """
        Build the model from URDF text (e.g. the ``robot_description`` parameter).

        Parameters
        ----------
        urdf : str
            The URDF XML.
        joints : sequence of str, optional
            The modelled joints, in chain order (default: the movable joints of the trunk).
        gravity : sequence of 3 float
            Gravity [m/s^2] in the URDF's root frame (default ``(0, 0, -9.81)``).
        armature : float or sequence of n float
            Reflected rotor inertia ``Jm N^2`` [kg·m^2] per joint, >= 0 (default 0).
        gear_ratio : float or sequence of n float, optional
            ``N`` per joint, > 0 (default: the URDF transmissions' reductions, else 1).
        rotor_coupling : bool or sequence of n bool
            Model the coupling of each joint's rotor with its carrying link (needs
            ``armature`` > 0 on that joint; refused where it would depend on q).
        limits : mapping, optional
            Overrides ``{'lower', 'upper', 'velocity', 'effort'}: sequence of n float``.
        locked_positions : mapping, optional
            Position [rad or m] of joints left out of ``joints`` (default 0 clipped into
            their limits).
        source : str
            Name of the description in error messages.

        Raises
        ------
        UrdfError, JointSelectionError, ArmShapeError, ArmModelError

        """
        pin = _pinocchio()
        if not isinstance(urdf, str) or not urdf.strip():
            raise UrdfError(f'{source}: empty robot description')
        root, urdf_joints, links = _parse_urdf(urdf, source)
        movable = [j for j in urdf_joints.values() if j.kind in MOVABLE_TYPES]
        if not movable:
            raise UrdfError(f'{source}: no movable joint (revolute, continuous or prismatic)')
        continuous = set()
        for j in movable:
            if j.kind == 'continuous':
                # one angle per joint, as sensor_msgs/JointState carries it
                j.element.set('type', 'revolute')
                lim = j.element.find('limit')
                if lim is None:
                    lim = ET.SubElement(j.element, 'limit')
                lim.set('lower', '-1e9')
                lim.set('upper', '1e9')
                for attr in ('effort', 'velocity'):
                    lim.set(attr, lim.get(attr, '0'))
                continuous.add(j.name)
        text = ET.tostring(root, encoding='unicode')
        try:
            full = pin.buildModelFromXML(text)
        except Exception as exc:  # noqa: B902 - Pinocchio's parser raises several kinds
            raise UrdfError(f'{source}: Pinocchio cannot build a model: {_one_line(exc)}') \
                from None
        order = [str(name) for name in list(full.names)[1:]]
        for name, jm in zip(order, list(full.joints)[1:]):
            if jm.nq != 1 or jm.nv != 1:
                raise UrdfError(f'{source}: joint {name}: {jm.shortname()} with nq={jm.nq}, '
                                f'nv={jm.nv} is not modelled (revolute, continuous and '
                                'prismatic joints only)')
        missing = [j.name for j in movable if j.name not in order]
        if missing:
            raise UrdfError(f'{source}: Pinocchio did not model the movable joint(s) '
                            f'{", ".join(missing)} (mimic joints are not supported)')
        selected = (_trunk(urdf_joints, links) if joints is None
                    else _check_selection(joints, order, source))
        locked_ids, q_ref, locked = [], pin.neutral(full), {}
        locked_positions = dict(locked_positions or {})
        for name in locked_positions:
            if name not in order:
                raise JointSelectionError(f'locked_positions: {name!r} is not a movable joint '
                                          f'of {source} ({", ".join(order)})')
            if name in selected:
                raise JointSelectionError(f'locked_positions: {name!r} is one of the modelled '
                                          'joints, not a locked one')
        for name in order:
            if name in selected:
                continue
            jid = full.getJointId(name)
            lo = float(full.lowerPositionLimit[full.idx_qs[jid]])
            hi = float(full.upperPositionLimit[full.idx_qs[jid]])
            value = float(locked_positions.get(name, min(max(0.0, lo), hi) if lo <= hi else 0.0))
            if not math.isfinite(value):
                raise ArmModelError(f'locked_positions.{name}: must be finite (got {value})')
            q_ref[full.idx_qs[jid]] = value
            locked_ids.append(jid)
            locked[name] = value
        model = pin.buildReducedModel(full, locked_ids, q_ref) if locked_ids else full
        names = tuple(str(name) for name in list(model.names)[1:])
        if names != tuple(selected):  # pragma: no cover - guards an assumption on Pinocchio
            raise UrdfError(f'{source}: Pinocchio ordered the joints {names}, expected '
                            f'{tuple(selected)}')
        self = object.__new__(cls)
        self.source = source
        self.n = len(names)
        self.joint_names = names
        self.locked_joints = locked
        try:
            g = np.array(gravity, dtype=float)
        except (TypeError, ValueError):
            g = np.zeros(0)
        if g.shape != (3,) or not np.all(np.isfinite(g)):
            raise ArmModelError(f'gravity: expected 3 finite numbers [m/s^2], got {gravity!r}')
        model.gravity.linear = g
        self.gravity_field = _readonly(g)
        self.limits = _urdf_limits(urdf_joints, names, continuous).with_overrides(limits, names)
        arm = _joint_vector('armature', armature, self.n)
        if not np.all(arm >= 0.0) or not np.all(np.isfinite(arm)):
            raise ArmModelError(f'armature: must be finite and >= 0 [kg m^2] (got {arm.tolist()})')
        if gear_ratio is None:
            ratios = _transmission_ratios(root)
            gear = np.array([ratios.get(name, 1.0) for name in names])
        else:
            gear = _joint_vector('gear_ratio', gear_ratio, self.n)
        if not np.all(gear > 0.0) or not np.all(np.isfinite(gear)):
            raise ArmModelError(f'gear_ratio: must be finite and > 0 (got {gear.tolist()})')
        coupling = np.zeros(self.n, dtype=bool)
        coupling[:] = rotor_coupling if isinstance(rotor_coupling, (bool, np.bool_)) else \
            [bool(c) for c in _joint_vector('rotor_coupling', rotor_coupling, self.n)]
        self.armature = _readonly(arm)
        self.gear_ratio = _readonly(gear)
        self.rotor_coupling = coupling
        self.rotor_coupling.setflags(write=False)
        # armature is part of Pinocchio's joint-space inertia in CRBA, RNEA and ABA
        model.armature = arm.copy()
        self.pin_model = model
        mat, rotor = _coupling_matrix(pin, model, names, arm, gear, coupling)
        self.coupling_matrix = _readonly(mat)
        self._rotor = _readonly(rotor)
        self._coupled = bool(coupling.any())
        self._pin = pin
        self._world = pin.Convention.WORLD      # ABA in the world frame: the faster variant
        self._data = model.createData()
        return self

    # -- the interface -------------------------------------------------------------------------
    def workspace(self) -> 'UrdfArm':
        """Return the same model with new Pinocchio ``Data``: one per user (thread, node)."""
        other = copy.copy(self)
        other._data = self.pin_model.createData()
        return other

    def rotor_matrix(self) -> np.ndarray:
        """``D = diag(armature)`` plus ``Jm N r^T`` in the rows of coupled rotors [kg·m^2]."""
        return self._rotor.copy()

    def mass_matrix(self, q) -> np.ndarray:
        """``M(q)`` [kg·m^2] by CRBA (armature included), plus the rotor coupling."""
        m = self._pin.crba(self.pin_model, self._data, self._vec('q', q))
        m = np.triu(m) + np.triu(m, 1).T      # CRBA fills the upper triangle
        if self._coupled:
            m += self.coupling_matrix
        return m

    def coriolis_matrix(self, q, qd) -> np.ndarray:
        """Christoffel-form ``C(q, qd)`` [N·m·s/rad] by ``computeCoriolisMatrix``."""
        return self._pin.computeCoriolisMatrix(self.pin_model, self._data, self._vec('q', q),
                                               self._vec('qd', qd)).copy()

    def gravity(self, q) -> np.ndarray:
        """``g(q)`` [N·m] by ``computeGeneralizedGravity``."""
        return self._pin.computeGeneralizedGravity(self.pin_model, self._data,
                                                   self._vec('q', q)).copy()

    def bias(self, q, qd) -> np.ndarray:
        """``C qd + g`` [N·m] by RNEA at zero acceleration (``nonLinearEffects``)."""
        return self._pin.nonLinearEffects(self.pin_model, self._data, self._vec('q', q),
                                          self._vec('qd', qd)).copy()

    def inverse_dynamics(self, q, qd, qdd) -> np.ndarray:
        """``tau = M qdd + C qd + g`` [N·m] by RNEA (armature and coupling included)."""
        qdd = self._vec('qdd', qdd)
        tau = self._pin.rnea(self.pin_model, self._data, self._vec('q', q),
                             self._vec('qd', qd), qdd).copy()
        if self._coupled:
            tau += self.coupling_matrix @ qdd
        return tau

    def forward_dynamics(self, q, qd, tau) -> np.ndarray:
        """``qdd = M^-1 (tau - C qd - g)`` [rad/s^2] by ABA (by CRBA + Cholesky if coupled)."""
        q, qd, tau = self._vec('q', q), self._vec('qd', qd), self._vec('tau', tau)
        if self._coupled:
            return np.linalg.solve(self.mass_matrix(q), tau - self.bias(q, qd))
        return self._pin.aba(self.pin_model, self._data, q, qd, tau, self._world).copy()

    def potential_energy(self, q) -> float:
        """``V = -sum_i m_i g . c_i(q)`` [J], ``c_i`` the body centres of mass."""
        return float(self._pin.computePotentialEnergy(self.pin_model, self._data,
                                                      self._vec('q', q)))

    # -- variants -----------------------------------------------------------------------------
    def with_payload(self, mass: float, offset: Any = None) -> 'UrdfArm':
        """
        Return a copy whose last link carries a point mass at the tool.

        The last modelled joint's body (its link and everything fixed to it, e.g. a hand)
        gets ``pin.Inertia(m_p, p, 0)`` added: the mass ``m_p`` at ``p = offset`` in that
        joint's frame (the frame of the last modelled link), so its spatial inertia becomes
        ``m' = m + m_p``, ``c' = (m c + m_p p) / m'`` and, about ``c'``,
        ``I' = I + m |c - c'|^2 - m (c - c') (c - c')^T + m_p |p - c'|^2 - m_p (p - c')
        (p - c')^T``. The model is copied (this one and its workspaces are unchanged).

        Parameters
        ----------
        mass : float
            Payload mass [kg], finite and >= 0.
        offset : sequence of 3 float, optional
            Its position in the last modelled link's frame [m] (default: the origin).

        Raises
        ------
        ArmModelError
            A negative or non-finite mass, or an offset that is not 3 finite numbers.

        """
        mass, p = payload_mass(mass), payload_offset(offset)
        pin = self._pin
        model = self.pin_model.copy()
        model.inertias[self.n] = model.inertias[self.n] + pin.Inertia(mass, p, np.zeros((3, 3)))
        other = copy.copy(self)
        other.pin_model = model
        other._data = model.createData()
        return other

    def with_inertial_scale(self, factors: Any, inertia_factors: Any = None) -> 'UrdfArm':
        """
        Return a copy whose body ``i`` (moved by joint ``i``) has mass and inertia times ``f_i``.

        The centre of mass stays; ``m -> f m``, ``I_c -> f I_c`` (a uniform density change),
        e.g. a controller's nominal model with masses off by +-20 %. Bodies of locked joints
        are part of the body of the joint that carries them.

        Parameters
        ----------
        factors : float or sequence of n float
            Mass scale per joint body, > 0 (and the rotational inertia's, unless given apart).
        inertia_factors : float or sequence of n float, optional
            Scale of the rotational inertia about the centre of mass per joint body, > 0
            (default: ``factors``).

        """
        f = _joint_vector('factors', factors, self.n)
        fi = f if inertia_factors is None else _joint_vector('inertia_factors',
                                                             inertia_factors, self.n)
        for name, v in (('factors', f), ('inertia_factors', fi)):
            if not np.all(v > 0.0) or not np.all(np.isfinite(v)):
                raise ArmModelError(f'{name}: must be finite and > 0 (got {v.tolist()})')
        pin = self._pin
        model = self.pin_model.copy()
        for i in range(1, self.n + 1):
            body = model.inertias[i]
            model.inertias[i] = pin.Inertia(body.mass * f[i - 1], body.lever.copy(),
                                            body.inertia * fi[i - 1])
        other = copy.copy(self)
        other.pin_model = model
        other._data = model.createData()
        return other


def payload_mass(mass: Any) -> float:
    """Return a payload mass [kg] checked finite and >= 0 (else ArmModelError)."""
    if isinstance(mass, bool) or not isinstance(mass, (int, float, np.floating)) \
            or not math.isfinite(mass) or mass < 0.0:
        raise ArmModelError(f'payload mass: must be a finite number >= 0 [kg] (got {mass!r})')
    return float(mass)


def payload_offset(offset: Any) -> np.ndarray:
    """Return a payload's position [m] in the last link's frame (None: its origin), checked."""
    try:
        p = np.zeros(3) if offset is None else np.array(offset, dtype=float)
    except (TypeError, ValueError):
        p = np.zeros(0)
    if p.shape != (3,) or not np.all(np.isfinite(p)):
        raise ArmModelError(f'offset: expected 3 finite numbers [m], got {offset!r}')
    return p


def _parse_urdf(text: str, source: str):
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise UrdfError(f'{source}: not valid XML ({exc})') from None
    if root.tag != 'robot':
        raise UrdfError(f'{source}: the root element is <{root.tag}>, not <robot>')
    links = {}
    for elem in root.findall('link'):
        name = elem.get('name')
        if not name:
            raise UrdfError(f'{source}: a <link> has no name')
        if name in links:
            raise UrdfError(f'{source}: link {name} is defined twice')
        links[name] = elem
    if not links:
        raise UrdfError(f'{source}: no <link>')
    joints: dict[str, _UrdfJoint] = {}
    for elem in root.findall('joint'):
        name = elem.get('name')
        jtype = elem.get('type')
        if not name:
            raise UrdfError(f'{source}: a <joint> has no name')
        if name in joints:
            raise UrdfError(f'{source}: joint {name} is defined twice')
        if jtype in _REFUSED_TYPES:
            raise UrdfError(f'{source}: joint {name} is {jtype}; only fixed-base arms with '
                            'revolute, continuous and prismatic joints are modelled')
        if jtype not in MOVABLE_TYPES + ('fixed',):
            raise UrdfError(f'{source}: joint {name} has unknown type {jtype!r}')
        parent, child = elem.find('parent'), elem.find('child')
        if parent is None or child is None or not parent.get('link') or not child.get('link'):
            raise UrdfError(f'{source}: joint {name} needs <parent link=...> and <child link=...>')
        for end in (parent.get('link'), child.get('link')):
            if end not in links:
                raise UrdfError(f'{source}: joint {name} refers to link {end}, which is not '
                                'defined')
        if jtype in MOVABLE_TYPES:
            lim = elem.find('limit')
            for attr in ('lower', 'upper', 'effort', 'velocity'):
                _float_attr(lim, attr, name, source)
            if jtype != 'continuous' and (lim is None or lim.get('effort') is None
                                          or lim.get('velocity') is None):
                raise UrdfError(f'{source}: joint {name}: a {jtype} joint needs <limit '
                                'effort=... velocity=...> (URDF specification)')
            axis = elem.find('axis')
            if axis is not None and axis.get('xyz') is not None:
                try:
                    a = [float(x) for x in axis.get('xyz').split()]
                except ValueError:
                    a = []
                if len(a) != 3 or not np.all(np.isfinite(a)) or np.linalg.norm(a) == 0.0:
                    raise UrdfError(f'{source}: joint {name}: <axis xyz="{axis.get("xyz")}"> '
                                    'is not a non-zero 3-vector')
        joints[name] = _UrdfJoint(name, jtype, parent.get('link'), child.get('link'), elem)
    children = [j.child for j in joints.values()]
    twice = sorted({c for c in children if children.count(c) > 1})
    if twice:
        raise UrdfError(f'{source}: link {twice[0]} is the child of more than one joint')
    roots = sorted(set(links) - set(children))
    if len(roots) != 1:
        raise UrdfError(f'{source}: the links must form one tree; roots: {", ".join(roots)}'
                        if roots else f'{source}: the joints form a loop')
    for name, joint in joints.items():
        _origin(joint.element, f'{source}: joint {name}')
    masses = {name: _check_inertial(elem, f'{source}: link {name}')
              for name, elem in links.items()}
    _check_moving_bodies(joints, masses, source)
    return root, joints, links


# A decimal number as URDF parsers read it (no '_' digit separators, no hex).
_NUMBER = re.compile(r'[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?')
_NON_FINITE = re.compile(r'[+-]?(nan|inf|infinity)', re.IGNORECASE)
#: Relative tolerance of the inertia checks (of the largest principal moment): rounding in a
#: description written with a few significant digits is not refused.
INERTIA_TOL = 1e-6
_INERTIA_FIELDS = ('ixx', 'ixy', 'ixz', 'iyy', 'iyz', 'izz')


def _number(text: str | None, what: str) -> float:
    """Return the finite number ``text``; UrdfError naming ``what`` if it is anything else."""
    value = (text or '').strip()
    if _NON_FINITE.fullmatch(value):
        raise UrdfError(f'{what} is not finite')
    if not _NUMBER.fullmatch(value):
        raise UrdfError(f'{what} is not a number')
    number = float(value)
    if not math.isfinite(number):       # 1e999
        raise UrdfError(f'{what} is not finite')
    return number


def _origin(elem, where: str) -> None:
    """Check the ``<origin xyz= rpy=>`` of a joint or an inertial: 3 finite numbers each."""
    origin = elem.find('origin')
    if origin is None:
        return
    for attr in ('xyz', 'rpy'):
        text = origin.get(attr)
        if text is None:
            continue
        what = f'{where}: <origin {attr}="{text}">'
        parts = text.split()
        if len(parts) != 3:
            raise UrdfError(f'{what} is not 3 numbers')
        for part in parts:
            _number(part, what)


def _check_inertial(link, where: str) -> float:
    """
    Check a link's ``<inertial>`` and return its mass [kg] (0 without one).

    Refused, naming the field: a value that is not a finite number, a missing ``<mass
    value>`` or ``<inertia>`` attribute, a negative mass, rotational inertia on a massless
    link, or an inertia about the centre of mass (``I_c`` [kg·m^2]) that is not positive
    semi-definite or whose principal moments ``l1 <= l2 <= l3`` break the triangle inequality
    ``l1 + l2 >= l3`` (every rigid body has ``l_i + l_j >= l_k``: ``l_i + l_j - l_k = 2
    int r_k^2 dm``), both up to :data:`INERTIA_TOL` of ``l3``.
    """
    inertials = link.findall('inertial')
    if not inertials:
        return 0.0
    if len(inertials) > 1:
        raise UrdfError(f'{where}: more than one <inertial>')
    inertial = inertials[0]
    _origin(inertial, f'{where}: <inertial>')
    mass_el, inertia_el = inertial.find('mass'), inertial.find('inertia')
    if mass_el is None or mass_el.get('value') is None:
        raise UrdfError(f'{where}: <inertial> needs <mass value=...> (URDF specification)')
    mass = _number(mass_el.get('value'), f'{where}: <mass value="{mass_el.get("value")}">')
    if mass < 0.0:
        raise UrdfError(f'{where}: <mass value="{mass_el.get("value")}"> is negative')
    if inertia_el is None:
        raise UrdfError(f'{where}: <inertial> needs <inertia ixx= ixy= ixz= iyy= iyz= izz=> '
                        '(URDF specification)')
    values = {}
    for attr in _INERTIA_FIELDS:
        text = inertia_el.get(attr)
        if text is None:
            raise UrdfError(f'{where}: <inertia> has no {attr} (URDF specification: all six)')
        values[attr] = _number(text, f'{where}: <inertia {attr}="{text}">')
    v = values
    inertia = np.array([[v['ixx'], v['ixy'], v['ixz']], [v['ixy'], v['iyy'], v['iyz']],
                        [v['ixz'], v['iyz'], v['izz']]])
    if mass == 0.0:
        if np.any(inertia != 0.0):
            raise UrdfError(f'{where}: <mass value="{mass_el.get("value")}"> with a non-zero '
                            '<inertia>: a massless link has no rotational inertia')
        return 0.0
    for attr in ('ixx', 'iyy', 'izz'):
        if v[attr] < 0.0:
            raise UrdfError(f'{where}: <inertia {attr}="{inertia_el.get(attr)}"> is negative '
                            '(a moment of inertia is >= 0)')
    lam = np.linalg.eigvalsh(inertia)
    tol = INERTIA_TOL * max(float(lam[2]), 0.0)
    moments = ', '.join(f'{x:.6g}' for x in lam)
    if lam[0] < -tol:
        raise UrdfError(f'{where}: <inertia> is not positive semi-definite (principal moments '
                        f'{moments} kg m^2)')
    if lam[0] + lam[1] < lam[2] - tol:
        diagonal = not (v['ixy'] or v['ixz'] or v['iyz'])
        if diagonal:
            big = max(('ixx', 'iyy', 'izz'), key=lambda k: v[k])
            rest = ' + '.join(k for k in ('ixx', 'iyy', 'izz') if k != big)
            raise UrdfError(f'{where}: <inertia {big}="{inertia_el.get(big)}"> is more than '
                            f'{rest} (triangle inequality; no rigid body has these moments)')
        raise UrdfError(f'{where}: <inertia> principal moments {moments} kg m^2 break the '
                        'triangle inequality l1 + l2 >= l3 (no rigid body has them)')
    return mass


def _check_moving_bodies(joints: Mapping[str, _UrdfJoint], masses: Mapping[str, float],
                         source: str) -> None:
    """
    Refuse a movable joint whose body has no mass.

    The body of a movable joint is its child link and every link fixed to it (through fixed
    joints). Massless links fixed to a body that has mass (a ``tool0`` frame) carry nothing and
    are accepted; a body of zero mass would leave its joint without inertia (a singular
    ``M(q)``), so it is refused even where the links further down the chain would keep ``M``
    regular (give such a link its mass).
    """
    fixed_children: dict[str, list[str]] = {}
    for j in joints.values():
        if j.kind == 'fixed':
            fixed_children.setdefault(j.parent, []).append(j.child)
    for j in joints.values():
        if j.kind not in MOVABLE_TYPES:
            continue
        body, todo = [], [j.child]
        while todo:
            link = todo.pop()
            body.append(link)
            todo.extend(fixed_children.get(link, []))
        if not sum(masses[link] for link in body) > 0.0:
            rigid = f' nor the links fixed to it ({", ".join(body[1:])})' if body[1:] else ''
            raise UrdfError(f'{source}: link {j.child}: <mass> must be > 0: joint {j.name} moves '
                            f'it and neither it{rigid} has mass')


def _trunk(joints: Mapping[str, _UrdfJoint], links: Mapping[str, Any]) -> list[str]:
    """Movable joints from the root along the single branch that holds movable joints."""
    by_parent: dict[str, list[_UrdfJoint]] = {}
    for j in joints.values():
        by_parent.setdefault(j.parent, []).append(j)

    def has_movable(joint: _UrdfJoint) -> bool:
        if joint.kind in MOVABLE_TYPES:
            return True
        return any(has_movable(c) for c in by_parent.get(joint.child, []))

    link = (set(links) - {j.child for j in joints.values()}).pop()
    trunk = []
    while True:
        branches = [j for j in by_parent.get(link, []) if has_movable(j)]
        if len(branches) != 1:
            return trunk
        if branches[0].kind in MOVABLE_TYPES:
            trunk.append(branches[0].name)
        link = branches[0].child


def _check_selection(joints: Sequence[str], order: Sequence[str], source: str) -> list[str]:
    if isinstance(joints, str):
        joints = [joints]
    names = [str(j) for j in joints]
    if not names:
        raise JointSelectionError('joints: empty list (name at least one movable joint)')
    unknown = [j for j in names if j not in order]
    if unknown:
        raise JointSelectionError(f'joints: {", ".join(unknown)} not a movable joint of '
                                  f'{source} (movable: {", ".join(order)})')
    if len(set(names)) != len(names):
        dup = sorted({j for j in names if names.count(j) > 1})
        raise JointSelectionError(f'joints: {", ".join(dup)} named more than once')
    chain = [j for j in order if j in names]
    if chain != names:
        raise JointSelectionError(f'joints: give them in chain order: {", ".join(chain)}')
    return names


def _urdf_limits(joints: Mapping[str, _UrdfJoint], names: Sequence[str],
                 continuous: set) -> JointLimits:
    lower, upper, velocity, effort, missing = [], [], [], [], []
    for name in names:
        lim = joints[name].element.find('limit')
        lo = None if name in continuous else _float_attr(lim, 'lower', name, '')
        hi = None if name in continuous else _float_attr(lim, 'upper', name, '')
        if name not in continuous and (lo is None or hi is None or not lo < hi):
            lo, hi = None, None     # URDF: lower = upper (or none) means no position limit
        if lo is None:
            missing += [f'{name}.lower', f'{name}.upper']
        lower.append(-math.inf if lo is None else lo)
        upper.append(math.inf if hi is None else hi)
        for field, out in (('velocity', velocity), ('effort', effort)):
            value = None if lim is None else _float_attr(lim, field, name, '')
            if value is None or not value > 0.0 or not math.isfinite(value):
                missing.append(f'{name}.{field}')
                value = math.inf
            out.append(value)
    return JointLimits(_readonly(lower), _readonly(upper), _readonly(velocity),
                       _readonly(effort), tuple(missing))


def _transmission_ratios(root) -> dict[str, float]:
    """Joint name -> ``mechanicalReduction`` of the URDF's simple transmissions."""
    out = {}
    for tr in root.iter('transmission'):
        joint = tr.find('joint')
        red = tr.find('actuator/mechanicalReduction')
        if red is None:
            red = tr.find('mechanicalReduction')
        if joint is None or red is None or not joint.get('name'):
            continue
        try:
            value = float(red.text)
        except (TypeError, ValueError):
            continue
        if math.isfinite(value) and value > 0.0:
            out[joint.get('name')] = value
    return out


def _coupling_matrix(pin, model, names, armature, gear, coupling):
    """
    Constant rotor-coupling part of M and the rotor matrix D (module docstring).

    Refuses q-dependent cases. ``D = diag(armature)``, plus ``Jm N r^T`` in row j of a
    coupled rotor (its acceleration is ``N qdd_j + r^T qdd``).
    """
    n = len(names)
    out = np.zeros((n, n))
    rotor = np.diag(np.asarray(armature, dtype=float))
    if not coupling.any():
        return out, rotor
    data = model.createData()
    jac = pin.computeJointJacobians(model, data, pin.neutral(model))
    axes = np.array(jac[3:6, :])       # world angular part: the axis of each revolute joint
    for j in (int(k) for k in np.flatnonzero(coupling)):
        name = names[j]
        a = axes[:, j]
        if np.linalg.norm(a) < 0.5:
            raise ArmModelError(f'rotor_coupling: joint {name} is prismatic; the rotor '
                                'coupling is modelled for revolute joints')
        if armature[j] == 0.0:
            raise ArmModelError(f'rotor_coupling: joint {name} has armature 0, no rotor to '
                                'couple')
        r = np.zeros(n)
        k = int(model.parents[j + 1])
        while k > 0:
            w = axes[:, k - 1]
            if np.linalg.norm(w) > 0.5:
                if np.linalg.norm(np.cross(w, a)) > _PARALLEL_TOL:
                    raise ArmModelError(
                        f'rotor_coupling: joint {name}: its axis is not parallel to that of '
                        f'joint {names[k - 1]}, so its rotor coupling depends on q and is not '
                        'modelled (set rotor_coupling per joint)')
                r[k - 1] = float(np.dot(w, a))
            k = int(model.parents[k])
        jm = armature[j] / gear[j] ** 2
        e = np.zeros(n)
        e[j] = 1.0
        out += jm * (np.outer(r, r) + gear[j] * (np.outer(e, r) + np.outer(r, e)))
        rotor[j] += jm * gear[j] * r
    return out, rotor
