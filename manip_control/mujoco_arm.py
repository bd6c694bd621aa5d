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
A serial arm simulated by MuJoCo (https://mujoco.org): a plant this package did not write.

:class:`MujocoArm` loads any URDF arm into MuJoCo and steps it under held joint torques::

    (M(q) + diag(armature)) qdd + C(q, qd) qd + g(q) = tau - damping qd - f_dry     [N·m]

with ``f_dry`` MuJoCo's dry friction (``frictionloss``, a friction constraint of at most
``frictionloss`` [N·m] per joint; a soft constraint: under a torque below that level the joint
still creeps, at about 1e-3 rad/s on a 0.005 kg·m^2 joint pushed at half the friction level
with the impedance :data:`SOLIMP_FRICTION` set here, the hardest MuJoCo allows). ``M``, ``C``,
``g`` are MuJoCo's own (its composite rigid body algorithm and RNE), so they check
:class:`manip_control.arm_model.UrdfArm` (Pinocchio) independently.

How the URDF becomes a MuJoCo model:

- The URDF is read by the package's own reading (:class:`~manip_control.arm_model.UrdfArm`:
  ``.xacro`` through xacro, the joint selection, limits and validation), so the joints, their
  order and the locked ones are exactly the controller's. Movable joints outside the
  selection (a Panda's fingers) are turned into fixed joints at the position ``UrdfArm``
  locks them at (its ``locked_joints``), so MuJoCo simulates the same ``n`` joints.
- ``<visual>`` and ``<collision>`` elements are removed (meshes are not needed and their
  ``package://`` paths rarely resolve); :attr:`MujocoArm.notes` says how many, once.
- Contacts, joint-limit and equality constraints are off (the joints move freely past their
  URDF range; a driver or a controller has to keep them in). Dry friction stays on.
- The URDF's ``<dynamics damping friction>`` (viscous [N·m·s/rad] and dry [N·m] friction) are
  used only with ``urdf_dynamics=True``; the ``damping`` and ``frictionloss`` given to
  :meth:`MujocoArm.from_urdf` are added to them (default: the rigid body alone).
- Gravity ``(0, 0, -9.81)`` m/s^2 in the URDF's root frame, as ``UrdfArm`` has it.

Errors: a URDF that cannot be read raises :class:`~manip_control.arm_model.UrdfError`, one that
MuJoCo cannot load :class:`MujocoLoadError` (a ``UrdfError``), bad options
:class:`~manip_control.arm_model.ArmModelError`; each message is one line naming the source.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence
import xml.etree.ElementTree as ET

from manip_control.arm_model import ArmModelError
from manip_control.arm_model import payload_mass
from manip_control.arm_model import payload_offset
from manip_control.arm_model import read_urdf_file
from manip_control.arm_model import UrdfArm
from manip_control.arm_model import UrdfError
import numpy as np

#: MuJoCo integrators by name (``MjOption.integrator``).
INTEGRATORS = ('RK4', 'Euler', 'implicitfast', 'implicit')
#: Constraint impedance (d0, dwidth) of the joints' dry friction (MuJoCo ``solimp``): MuJoCo's
#: largest (``mjMAXIMP``). A softer friction lets a light joint slide on below its friction
#: level (0.999: the xArm 7 wrist ran 3.8 mrad ahead of its reference at each reversal).
SOLIMP_FRICTION = (0.9999, 0.9999)


class MujocoLoadError(UrdfError):
    """MuJoCo cannot load the description; the message names it and gives MuJoCo's reason."""


class MujocoDivergedError(ArmModelError):
    """The simulation became unstable (NaN, Inf or huge acceleration); the state is lost."""


def _mujoco():
    try:
        import mujoco
    except ImportError as exc:  # pragma: no cover - a core dependency
        raise ArmModelError(f'the MuJoCo arm needs mujoco (pip install mujoco): {exc}') \
            from None
    return mujoco


def _one_line(text: Any) -> str:
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    return '; '.join(lines[:2]) if lines else type(text).__name__


def _per_joint(name: str, value: Any, n: int, *, positive: bool = False) -> np.ndarray:
    """Scalar or n finite values, >= 0 (> 0 if ``positive``), or ArmModelError naming ``name``."""
    try:
        arr = np.array(value, dtype=float)
    except (TypeError, ValueError):
        raise ArmModelError(f'{name}: expected a number or {n} numbers, got {value!r}') \
            from None
    if arr.ndim == 0:
        arr = np.full(n, float(arr))
    if arr.shape != (n,):
        raise ArmModelError(f'{name}: expected a number or {n} values (one per joint), '
                            f'got {arr.size}')
    bad = ~np.isfinite(arr) | ((arr <= 0.0) if positive else (arr < 0.0))
    if bad.any():
        raise ArmModelError(f'{name}: must be finite and {"> 0" if positive else ">= 0"} '
                            f'(got {arr.tolist()})')
    return arr


def _rotation_rpy(rpy: Sequence[float]) -> np.ndarray:
    """URDF fixed-axis roll-pitch-yaw -> rotation matrix ``Rz(y) Ry(p) Rx(r)``."""
    r, p, y = rpy
    cr, sr, cp, sp, cy, sy = (math.cos(r), math.sin(r), math.cos(p), math.sin(p),
                              math.cos(y), math.sin(y))
    return np.array([[cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
                     [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
                     [-sp, cp * sr, cp * cr]])


def _rpy(rot: np.ndarray) -> tuple[float, float, float]:
    """Rotation matrix -> URDF roll-pitch-yaw (inverse of :func:`_rotation_rpy`)."""
    pitch = math.atan2(-rot[2, 0], math.hypot(rot[0, 0], rot[1, 0]))
    if abs(math.cos(pitch)) > 1e-9:
        roll = math.atan2(rot[2, 1], rot[2, 2])
        yaw = math.atan2(rot[1, 0], rot[0, 0])
    else:  # gimbal lock: put the whole rotation about z into yaw
        roll = 0.0
        yaw = math.atan2(-rot[0, 1], rot[1, 1])
    return roll, pitch, yaw


def _axis_rotation(axis: np.ndarray, angle: float) -> np.ndarray:
    k = np.array([[0.0, -axis[2], axis[1]], [axis[2], 0.0, -axis[0]], [-axis[1], axis[0], 0.0]])
    return np.eye(3) + math.sin(angle) * k + (1.0 - math.cos(angle)) * (k @ k)


def _numbers(text: str | None, default: Sequence[float]) -> np.ndarray:
    return np.array([float(v) for v in text.split()]) if text else np.array(default, float)


def _lock_joint(elem, value: float) -> None:
    """Make a movable URDF joint a fixed one at position ``value`` [rad or m]."""
    origin = elem.find('origin')
    if origin is None:
        origin = ET.SubElement(elem, 'origin')
    xyz = _numbers(origin.get('xyz'), (0.0, 0.0, 0.0))
    rot = _rotation_rpy(_numbers(origin.get('rpy'), (0.0, 0.0, 0.0)))
    axis_elem = elem.find('axis')
    axis = _numbers(axis_elem.get('xyz') if axis_elem is not None else None, (1.0, 0.0, 0.0))
    axis = axis / np.linalg.norm(axis)
    if elem.get('type') == 'prismatic':
        xyz = xyz + rot @ (axis * value)     # the child frame slides along the axis
    else:
        rot = rot @ _axis_rotation(axis, value)
    origin.set('xyz', ' '.join(repr(float(v)) for v in xyz))
    origin.set('rpy', ' '.join(repr(float(v)) for v in _rpy(rot)))
    elem.set('type', 'fixed')
    for tag in ('axis', 'limit', 'dynamics', 'mimic', 'safety_controller', 'calibration'):
        for child in elem.findall(tag):
            elem.remove(child)


def mujoco_urdf(urdf: str, locked: Mapping[str, float] | None = None,
                source: str = 'robot_description') -> tuple[str, str]:
    """
    Return the URDF text MuJoCo loads, and a one-line note of what was left out.

    Visual and collision elements are removed, the joints in ``locked`` become fixed joints
    at their position, and a ``<mujoco><compiler>`` element keeps the inertials as given
    (``fusestatic``: links on fixed joints are merged into their parent body).

    Parameters
    ----------
    urdf : str
        URDF XML text.
    locked : mapping, optional
        Joint name -> position [rad or m] to lock it at.
    source : str
        Name of the description in messages.

    """
    try:
        root = ET.fromstring(urdf)
    except ET.ParseError as exc:
        raise UrdfError(f'{source}: not valid XML ({exc})') from None
    counts = {'visual': 0, 'collision': 0}
    for link in root.findall('link'):
        for tag in counts:
            for elem in link.findall(tag):
                link.remove(elem)
                counts[tag] += 1
    locked = dict(locked or {})
    for elem in root.findall('joint'):
        if elem.get('name') in locked:
            _lock_joint(elem, locked[elem.get('name')])
    for elem in root.findall('mujoco'):
        root.remove(elem)
    ext = ET.SubElement(root, 'mujoco')
    ET.SubElement(ext, 'compiler', {'discardvisual': 'true', 'fusestatic': 'true',
                                    'balanceinertia': 'false', 'boundmass': '0',
                                    'boundinertia': '0', 'angle': 'radian'})
    note = (f'{source}: {counts["visual"]} visual and {counts["collision"]} collision '
            'element(s) skipped (MuJoCo simulates the inertials only; contacts are off)')
    if locked:
        note += '; locked joints ' + ', '.join(f'{k}={v:g}' for k, v in locked.items())
    return ET.tostring(root, encoding='unicode'), note


class MujocoArm:
    """
    A serial arm simulated by MuJoCo, in the joint order of the package's ``UrdfArm``.

    Build it with :meth:`from_urdf`. The state is ``q`` [rad or m] and ``qd`` [rad/s or m/s],
    vectors of shape ``(n,)`` in :attr:`joint_names` order; :meth:`step` integrates it under a
    torque held for a duration (a zero-order hold, as a drive applies a command).

    Attributes
    ----------
    urdf_arm : UrdfArm
        The package's model of the same description (joint names, limits, locked joints).
    model, data : mujoco.MjModel, mujoco.MjData
        MuJoCo's model and its simulation state.
    notes : tuple of str
        What loading left out (one line each), for a caller to report once.

    """

    def __init__(self, *_args, **_kwargs):
        raise TypeError('use MujocoArm.from_urdf(path_or_text, ...)')

    @classmethod
    def from_urdf(cls, urdf: str | Path, joints: Sequence[str] | None = None, *,
                  mass_scale: Any = 1.0, damping: Any = 0.0, frictionloss: Any = 0.0,
                  armature: Any = 0.0, urdf_dynamics: bool = False,
                  timestep: float = 1e-3, integrator: str = 'implicitfast',
                  xacro_args: Mapping[str, str] | None = None,
                  source: str | None = None) -> 'MujocoArm':
        """
        Load an arm from a URDF / xacro file or from URDF text.

        Parameters
        ----------
        urdf : str or Path
            A ``Path``, a file name (``.urdf`` or ``.xacro``), or URDF XML text (a string that
            starts with ``<``, e.g. the ``robot_description`` parameter).
        joints : sequence of str, optional
            The simulated joints, in chain order (default: as ``UrdfArm`` selects them, the
            movable joints of the trunk); the other movable joints are locked where
            ``UrdfArm`` locks them.
        mass_scale : float or sequence of n float
            Factor ``f_i`` > 0 on the mass and the rotational inertia of the body moved by
            joint ``i`` (the centre of mass stays), as :meth:`UrdfArm.with_inertial_scale`.
        damping : float or sequence of n float
            Viscous joint damping ``b`` >= 0 [N·m·s/rad]: torque ``-b qd``.
        frictionloss : float or sequence of n float
            Dry friction >= 0 [N·m]: MuJoCo's friction-loss constraint, at most this torque.
        armature : float or sequence of n float
            Reflected rotor inertia >= 0 [kg·m^2] added to ``M``'s diagonal.
        urdf_dynamics : bool
            Also simulate the URDF's ``<dynamics damping friction>`` (as the controller's
            nominal friction has them); ``damping`` and ``frictionloss`` add to them.
        timestep : float
            MuJoCo's integration step [s], > 0.
        integrator : str
            One of :data:`INTEGRATORS`. Default ``'implicitfast'`` (the joint damping
            integrated implicitly): with RK4 at 1 ms the xArm 7 with its URDF damping
            diverged within 20 ms under 47 of 50 random effort-limited torques from
            mid-range, with implicitfast under none.
        xacro_args : mapping, optional
            xacro arguments for a ``.xacro`` file.
        source : str, optional
            Name of the description in messages (default: the file name, or
            ``robot_description``).

        Raises
        ------
        UrdfError
            The file cannot be read or the description is not a URDF arm (from ``UrdfArm``).
        MujocoLoadError
            MuJoCo refuses the description (one line: the source and MuJoCo's reason).
        ArmModelError
            An option out of range (names the option).

        """
        mujoco = _mujoco()
        if isinstance(urdf, Path) or (isinstance(urdf, str) and not urdf.lstrip()
                                      .startswith('<') and urdf.strip()):
            source = source or str(urdf)
            text = read_urdf_file(urdf, xacro_args)
        else:
            source = source or 'robot_description'
            text = urdf
        arm = UrdfArm.from_string(text, joints, source=source)
        n = arm.n
        scale = _per_joint('mass_scale', mass_scale, n, positive=True)
        damp = _per_joint('damping', damping, n)
        dry = _per_joint('frictionloss', frictionloss, n)
        arma = _per_joint('armature', armature, n)
        if isinstance(timestep, bool) or not isinstance(timestep, (int, float)) \
                or not math.isfinite(timestep) or timestep <= 0.0:
            raise ArmModelError(f'timestep: must be a finite number > 0 [s] (got {timestep!r})')
        if integrator not in INTEGRATORS:
            raise ArmModelError(f'integrator: {integrator!r} is not one of '
                                f'{", ".join(INTEGRATORS)}')
        xml, note = mujoco_urdf(text, arm.locked_joints, source)
        try:
            model = mujoco.MjModel.from_xml_string(xml)
        except Exception as exc:  # noqa: B902 - MuJoCo raises ValueError and others
            raise MujocoLoadError(f'{source}: MuJoCo cannot load it: {_one_line(exc)}') \
                from None
        names = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, j)
                 for j in range(model.njnt)]
        if sorted(names) != sorted(arm.joint_names) or model.nv != n or model.nq != n:
            raise MujocoLoadError(f'{source}: MuJoCo modelled the joints {names} (nq '
                                  f'{model.nq}, nv {model.nv}), expected {list(arm.joint_names)}')
        jids = [names.index(name) for name in arm.joint_names]
        qadr = np.array([model.jnt_qposadr[j] for j in jids], dtype=np.intp)
        vadr = np.array([model.jnt_dofadr[j] for j in jids], dtype=np.intp)
        # scale every body by the factor of the nearest joint that moves it
        for body in range(1, model.nbody):
            owner = body
            while owner > 0 and model.body_jntnum[owner] == 0:
                owner = int(model.body_parentid[owner])
            if owner == 0:
                continue
            f = scale[jids.index(int(model.body_jntadr[owner]))]
            model.body_mass[body] *= f
            model.body_inertia[body] *= f
        if urdf_dynamics:       # MuJoCo's own reading of <dynamics damping friction>
            damp = damp + model.dof_damping[vadr]
            dry = dry + model.dof_frictionloss[vadr]
        model.dof_damping[:] = 0.0
        model.dof_frictionloss[:] = 0.0
        model.dof_damping[vadr] = damp
        model.dof_frictionloss[vadr] = dry
        # friction loss is a soft constraint: below the friction level a joint creeps at a
        # rate ~ (1 - d) / m; MuJoCo's default d = 0.9 lets a light joint drift at rad/s
        model.dof_solimp[vadr, 0] = SOLIMP_FRICTION[0]
        model.dof_solimp[vadr, 1] = SOLIMP_FRICTION[1]
        model.dof_armature[vadr] = arma
        model.opt.timestep = float(timestep)
        model.opt.integrator = getattr(mujoco.mjtIntegrator, f'mjINT_{integrator.upper()}')
        off = mujoco.mjtDisableBit
        model.opt.disableflags |= (int(off.mjDSBL_CONTACT) | int(off.mjDSBL_LIMIT)
                                   | int(off.mjDSBL_EQUALITY))
        model.opt.gravity[:] = arm.gravity_field
        self = object.__new__(cls)
        self._mj = mujoco
        self.urdf_arm = arm
        self.model = model
        self.data = mujoco.MjData(model)
        self._scratch = mujoco.MjData(model)
        self._full = np.zeros((model.nv, model.nv))
        self._qadr, self._vadr = qadr, vadr
        self._tool_body = int(model.jnt_bodyid[jids[-1]])   # moved by the last joint
        # the usual case (MuJoCo's order is ours): slices, no fancy indexing in step()
        ident = (np.array_equal(qadr, np.arange(n)) and np.array_equal(vadr, np.arange(n)))
        self._qi = slice(0, n) if ident else qadr
        self._vi = slice(0, n) if ident else vadr
        self._tau = np.zeros(n)
        self._bad_acc = int(mujoco.mjtWarning.mjWARN_BADQACC)
        self._bad_seen = 0
        self.source = source
        self.notes = (note,)
        self.timestep = float(timestep)
        return self

    # -- state --------------------------------------------------------------------------------
    @property
    def n(self) -> int:
        """Return the number of simulated joints."""
        return self.urdf_arm.n

    @property
    def joint_names(self) -> tuple[str, ...]:
        """Return the joint names, the order of every vector here (``UrdfArm``'s order)."""
        return self.urdf_arm.joint_names

    @property
    def q(self) -> np.ndarray:
        """Return the joint positions [rad or m], shape ``(n,)`` (a copy)."""
        return self.data.qpos[self._qi].copy()

    @property
    def qd(self) -> np.ndarray:
        """Return the joint velocities [rad/s or m/s], shape ``(n,)`` (a copy)."""
        return self.data.qvel[self._vi].copy()

    @property
    def time(self) -> float:
        """Return the simulated time since the last :meth:`set_state` [s]."""
        return float(self.data.time)

    @property
    def tau(self) -> np.ndarray:
        """Return the torque applied by the last :meth:`step` [N·m], shape ``(n,)`` (a copy)."""
        return self._tau.copy()

    def _vec(self, name: str, x: Any) -> np.ndarray:
        arr = np.asarray(x, dtype=float)
        if arr.shape != (self.n,):
            raise ArmModelError(f'{name}: expected {self.n} values (one per joint of '
                                f'{self.source}), got shape {arr.shape}')
        if not np.all(np.isfinite(arr)):
            raise ArmModelError(f'{name}: must be finite (got {arr.tolist()})')
        return arr

    def set_state(self, q: Any, qd: Any = None) -> None:
        """
        Reset the simulation to positions ``q`` [rad or m] and velocities ``qd`` (default 0).

        The simulated time restarts at 0 and the applied torque at zero.
        """
        q = self._vec('q', q)
        qd = np.zeros(self.n) if qd is None else self._vec('qd', qd)
        self._mj.mj_resetData(self.model, self.data)
        self._bad_seen = 0
        self.data.qpos[self._qi] = q
        self.data.qvel[self._vi] = qd
        self._tau[:] = 0.0
        self._mj.mj_forward(self.model, self.data)

    def step(self, tau: Any, duration: float | None = None) -> None:
        """
        Apply joint torques ``tau`` [N·m] held for ``duration`` [s] (default one ``timestep``).

        ``duration`` is rounded to a whole number of MuJoCo steps (at least one); a duration
        that is not a multiple of ``timestep`` within 1e-6 of a step is refused.

        Raises
        ------
        ArmModelError
            ``tau`` of the wrong length or not finite, or a bad ``duration``.
        MujocoDivergedError
            The simulation became unstable (MuJoCo has reset its state).

        """
        tau = self._vec('tau', tau)
        steps = 1
        if duration is not None:
            ratio = duration / self.timestep
            steps = int(round(ratio))
            if not math.isfinite(ratio) or steps < 1 or abs(ratio - steps) > 1e-6:
                raise ArmModelError(f'duration: {duration!r} s is not a whole number of '
                                    f'MuJoCo steps of {self.timestep:g} s')
        self._tau[:] = tau
        self.data.qfrc_applied[self._vi] = tau
        mj_step, model, data = self._mj.mj_step, self.model, self.data
        for _ in range(steps):
            mj_step(model, data)
        # MuJoCo resets the state (to q = 0) on a NaN / Inf / huge acceleration: say so
        if data.warning[self._bad_acc].number != self._bad_seen:
            self._bad_seen = int(data.warning[self._bad_acc].number)
            raise MujocoDivergedError(f'{self.source}: the MuJoCo simulation diverged (NaN, '
                                      f'Inf or huge acceleration) before t = '
                                      f'{data.time:.4f} s; MuJoCo reset its state')

    def add_payload(self, mass: float, offset: Any = None) -> None:
        """
        Add a point mass ``mass`` [kg] to the body of the last joint, at ``offset`` [m].

        ``offset`` is in that body's frame, the frame of the last simulated link (default its
        origin; the links fixed to it, e.g. a hand, are merged into the body). The body's
        mass, centre of mass ``body_ipos`` and principal inertia ``body_inertia`` /
        ``body_iquat`` become those of the combined body (parallel-axis theorem), then
        ``mj_setConst`` recomputes the constants MuJoCo derives from them (subtree masses,
        the inverse weights of the friction constraints). The state and time go on: the mass
        moves with the tool from here (no impact). Not undone by :meth:`set_state`.

        Raises
        ------
        ArmModelError
            A negative or non-finite mass, or an offset that is not 3 finite numbers.

        """
        mj, model = self._mj, self.model
        mass, p = payload_mass(mass), payload_offset(offset)
        if mass == 0.0:
            return
        b = self._tool_body
        m, c = float(model.body_mass[b]), model.body_ipos[b].copy()
        rot = np.zeros(9)
        mj.mju_quat2Mat(rot, model.body_iquat[b])
        rot = rot.reshape(3, 3)
        inertia = rot @ np.diag(model.body_inertia[b]) @ rot.T     # about c, body frame
        total = m + mass
        com = (m * c + mass * p) / total
        for mk, r in ((m, c - com), (mass, p - com)):
            inertia += mk * (float(r @ r) * np.eye(3) - np.outer(r, r))
        principal, axes = np.linalg.eigh(inertia)
        if np.linalg.det(axes) < 0.0:
            axes[:, 0] = -axes[:, 0]
        quat = np.zeros(4)
        mj.mju_mat2Quat(quat, axes.flatten())
        model.body_mass[b] = total
        model.body_ipos[b] = com
        model.body_iquat[b] = quat
        model.body_inertia[b] = np.maximum(principal, 0.0)
        mj.mj_setConst(model, self._scratch)        # the scratch data: the state stays

    # -- MuJoCo's dynamics terms --------------------------------------------------------------
    def _at(self, q: Any):
        d = self._scratch
        d.qpos[self._qi] = self._vec('q', q)
        d.qvel[:] = 0.0
        d.qfrc_applied[:] = 0.0
        self._mj.mj_forward(self.model, d)
        return d

    def mass_matrix(self, q: Any) -> np.ndarray:
        """``M(q)`` [kg·m^2] (armature included), shape ``(n, n)``, MuJoCo's ``mj_fullM``."""
        d = self._at(q)
        self._mj.mj_fullM(self.model, d, self._full)
        return self._full[np.ix_(self._vadr, self._vadr)].copy()

    def gravity(self, q: Any) -> np.ndarray:
        """``g(q)`` [N·m], shape ``(n,)``: MuJoCo's bias force ``qfrc_bias`` at ``qd = 0``."""
        return self._at(q).qfrc_bias[self._vadr].copy()
