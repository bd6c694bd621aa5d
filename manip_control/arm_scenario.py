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
A runnable closed loop for any URDF arm, from the description alone.

What a URDF does not say, chosen here and documented in docs/arm_model.md:

* **drives** (:func:`motors_sized_for`): one geared DC motor per joint with a PI current
  loop, sized so that the peak joint torque ``eta N k_t i_max`` is 1.2x the URDF effort
  limit; the reflected rotor inertia ``Jm N^2`` is the joint's armature;
* **friction**: the URDF's ``<dynamics damping friction>`` (viscous, smoothed Coulomb);
* **reference** (:func:`reference_within_limits`): a sinusoid per joint about the middle of
  its range, with an amplitude that keeps it inside the position limits and below half the
  velocity limit;
* **gains** (:func:`gains_from_bandwidth`): ``Kp = wn^2``, ``Kd = 2 zeta wn``, the error
  dynamics ``e'' + Kd e' + Kp e = 0`` of computed torque with a perfect model.

:func:`run_urdf_closed_loop` puts them together; ``manip-offline --urdf FILE`` runs it.
"""

from __future__ import annotations

from dataclasses import dataclass
import math
from pathlib import Path
from typing import Sequence

from manip_control.adaptation import ADAPTIVE_CHECK_EVERY
from manip_control.adaptation import AdaptiveController
from manip_control.adaptation import AdaptiveLaw
from manip_control.arm_identification import adaptive_regressor
from manip_control.arm_identification import ArmIdentificationError
from manip_control.arm_identification import ArmRegressor
from manip_control.arm_identification import base_parameters
from manip_control.arm_identification import excitation_trajectory
from manip_control.arm_model import ArmModel
from manip_control.arm_model import ArmModelError
from manip_control.arm_model import JointLimits
from manip_control.arm_model import read_urdf_file
from manip_control.arm_model import UrdfArm
from manip_control.arm_plant import ArmPlant
from manip_control.arm_plant import ArmRun
from manip_control.arm_plant import run_arm_closed_loop
from manip_control.control import Controller
from manip_control.control import controller_parameters
from manip_control.hold_design import damped_joint_stiffness
from manip_control.hold_design import damped_joint_stiffness_limit
from manip_control.hold_design import pd_gravity_gains
from manip_control.model_analysis import urdf_friction
from manip_control.parameters import AdaptationParameters
from manip_control.parameters import FrictionParameters
from manip_control.parameters import MotorParameters
from manip_control.parameters import PayloadParameters
from manip_control.trajectories import Sinusoid
import numpy as np
import yaml

#: Gear ratio, rotor inertia [kg·m^2] and peak current [A] of the sized drives.
GEAR_RATIO = 100.0
ROTOR_INERTIA = 2e-6
PEAK_CURRENT = 10.0
#: Peak joint torque of a sized drive as a multiple of the URDF effort limit.
PEAK_TORQUE_FACTOR = 1.2
#: Default reference angular frequency [rad/s] (a 5 s period) and amplitude cap [rad].
REFERENCE_OMEGA = 2.0 * math.pi / 5.0
REFERENCE_AMPLITUDE = 0.25


def motors_sized_for(effort: Sequence[float], *, names: Sequence[str] | None = None,
                     gear_ratio: float = GEAR_RATIO,
                     eta: float = 0.9) -> list[MotorParameters]:
    r"""
    Return geared DC motors sized from the joints' effort limits.

    .. math::

        k_t = k_e = \frac{1.2\,\tau_{max}}{\eta N i_{max}}

    with ``N`` = ``gear_ratio``, ``i_max`` = 10 A, R = 0.5 ohm, L = 0.4 mH, a 48 V supply and
    a PI current loop of about 300 Hz bandwidth (``Kp_i = 2 pi 300 L``, ``Ki_i = Kp_i R / L``).

    Parameters
    ----------
    effort : sequence of float
        Joint torque limits [N·m], finite and > 0 (a URDF without ``<limit effort>`` has
        no size to give its drives).
    names : sequence of str, optional
        Joint names for the error messages (default: the indices).
    gear_ratio, eta : float
        Gear ratio and efficiency (forward and back-driven).

    Raises
    ------
    ArmModelError
        An effort limit that is missing (infinite), non-positive or not a number.

    """
    out = []
    for j, tau_max in enumerate(effort):
        tau_max = float(tau_max)
        if not (math.isfinite(tau_max) and tau_max > 0.0):
            name = names[j] if names is not None else str(j)
            raise ArmModelError(f'joint {name}: effort limit {tau_max} N·m cannot size a drive '
                                '(give <limit effort> in the URDF, or use ideal actuators)')
        k_t = PEAK_TORQUE_FACTOR * tau_max / (eta * gear_ratio * PEAK_CURRENT)
        L, R = 0.4e-3, 0.5
        kp_i = 2.0 * math.pi * 300.0 * L
        out.append(MotorParameters(R=R, L=L, k_t=k_t, k_e=k_t, N=gear_ratio, eta=eta,
                                   eta_back=eta, Jm=ROTOR_INERTIA, i_max=PEAK_CURRENT,
                                   V_max=48.0, Kp_i=kp_i, Ki_i=kp_i * R / L))
    return out


def reference_within_limits(limits: JointLimits, *, omega: float = REFERENCE_OMEGA,
                            amplitude: float = REFERENCE_AMPLITUDE) -> Sinusoid:
    r"""
    Return a sinusoid per joint about the middle of its range, inside its limits.

    .. math::

        q_{d,j}(t) = o_j + A_j \sin(\omega t + j\,\pi/4), \quad
        A_j = \min(A, \tfrac14 (u_j - l_j), \tfrac{v_j}{2\omega})

    ``o_j`` is the middle of ``[l_j, u_j]`` (0 for an unbounded joint).

    Parameters
    ----------
    limits : JointLimits
        The arm's limits (:attr:`ArmModel.limits`).
    omega : float
        Angular frequency [rad/s], > 0.
    amplitude : float
        Amplitude cap ``A`` [rad], > 0.

    """
    if not (omega > 0.0 and math.isfinite(omega)):
        raise ArmModelError(f'reference omega: must be > 0 rad/s (got {omega})')
    if not (amplitude > 0.0 and math.isfinite(amplitude)):
        raise ArmModelError(f'reference amplitude: must be > 0 rad (got {amplitude})')
    lo, hi = np.asarray(limits.lower, float), np.asarray(limits.upper, float)
    bounded = np.isfinite(lo) & np.isfinite(hi)
    offset, span = np.zeros(lo.size), np.full(lo.size, np.inf)
    offset[bounded] = 0.5 * (lo[bounded] + hi[bounded])
    span[bounded] = 0.25 * (hi[bounded] - lo[bounded])
    amp = np.minimum(np.minimum(span, 0.5 * np.asarray(limits.velocity, float) / omega),
                     amplitude)
    n = offset.size
    return Sinusoid(amp, omega, offset=offset, phase=np.arange(n) * (math.pi / 4.0),
                    n_joints=n)


def gains_from_bandwidth(n: int, omega_n: float = 20.0,
                         zeta: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """
    Computed-torque gains ``Kp = wn^2`` [1/s^2], ``Kd = 2 zeta wn`` [1/s] for ``n`` joints.

    ``omega_n`` [rad/s] and ``zeta`` must be > 0.
    """
    if not (omega_n > 0.0 and math.isfinite(omega_n)):
        raise ArmModelError(f'omega_n: must be > 0 rad/s (got {omega_n})')
    if not (zeta > 0.0 and math.isfinite(zeta)):
        raise ArmModelError(f'zeta: must be > 0 (got {zeta})')
    return np.full(n, omega_n * omega_n), np.full(n, 2.0 * zeta * omega_n)


#: Position envelope [rad] of a joint without position limits (continuous).
UNLIMITED_ENVELOPE = 2.0 * math.pi
#: Hold servo of the safe mode: natural frequency [rad/s] through the nominal mass matrix,
#: critically damped (``hold_kp = w^2``, ``hold_kd = 2 w``; :func:`safety.hold_torque`).
HOLD_OMEGA = 10.0
#: PD + gravity defaults: natural frequency [rad/s] on each joint's lightest apparent inertia.
PD_GRAVITY_OMEGA = 20.0
#: Time for the torque-rate limit to swing the full effort [s].
TORQUE_SWING_TIME = 0.04
#: Largest reference acceleration as a share of the effort over the diagonal inertia, and
#: its cap [rad/s^2].
ACCELERATION_SHARE = 0.5
ACCELERATION_CAP = 20.0
#: ``joint_stiffness_limit`` [N·m] of a joint without stiffness and without an effort limit
#: (no clamp of its own: the largest value the parameter takes).
UNCLAMPED_STIFFNESS = 1e4
#: Velocity limit [rad/s] of a joint whose description gives none.
UNLIMITED_VELOCITY = 10.0


def _velocity_limits(limits) -> np.ndarray:
    """Return the velocity limits [rad/s], ``UNLIMITED_VELOCITY`` where there is none."""
    return np.where(np.isfinite(limits.velocity), limits.velocity, UNLIMITED_VELOCITY)


#: What the nominal drives of :func:`control_defaults` describe.
NOMINAL_DRIVES = ('ideal', 'sized')


def control_defaults(arm: ArmModel, urdf: str = '', drives: str = 'ideal',
                     omega_n: float = 20.0, zeta: float = 1.0,
                     law: str = 'computed_torque', period: float = 1e-3,
                     damping: Sequence[float] | None = None) -> dict:
    """
    Per-joint controller and safety defaults for an arm known only from its description.

    * gains, ``law='computed_torque'``: :func:`gains_from_bandwidth` (``Kp = wn^2``,
      ``Kd = 2 zeta wn`` [1/s^2, 1/s]); ``law='pd_gravity'``:
      :func:`manip_control.hold_design.pd_gravity_gains` with ``PD_GRAVITY_OMEGA`` (``m_k w^2``,
      ``2 zeta w m_k`` [N·m/rad, N·m·s/rad] on the lightest apparent inertia ``m_k`` of joint
      ``k`` over its range: stable with loop delays of several periods on a coupled arm);
    * ``joint_stiffness``: :func:`manip_control.hold_design.damped_joint_stiffness` of the
      nominal viscous damping (``damping`` [N·m·s/rad] when given, else the URDF's) at the
      control ``period`` [s], on the joints where it dominates the law's own damping (0
      elsewhere, and on every joint without ``urdf`` or ``damping``);
    * ``joint_stiffness_limit``: :func:`manip_control.hold_design.damped_joint_stiffness_limit`
      (the stiffness drives a damped joint at a quarter of its velocity limit at most; the
      torque limit elsewhere, ``UNCLAMPED_STIFFNESS`` where the description gives none);
    * ``torque_limit``: the effort limits (``nan`` where the description gives none, so
      that a start without an explicit ``torque_limit`` is refused);
    * safety envelope: the position limits (``+-UNLIMITED_ENVELOPE`` for a joint without
      them) and the velocity limits (10 rad/s where none);
    * safe-mode hold: a critically damped ``HOLD_OMEGA`` servo through the nominal mass
      matrix, ``hold_kp = w^2`` [1/s^2], ``hold_kd = 2 w`` [1/s] on every joint;
    * ``torque_rate_limit``: the effort in ``TORQUE_SWING_TIME``;
    * ``reference_acceleration_limit``: ``ACCELERATION_SHARE`` of the effort over ``M_kk``,
      at most ``ACCELERATION_CAP``;
    * ``reference``: the trajectory configuration of :func:`reference_within_limits`;
    * nominal model: ``nominal_friction`` from the URDF's ``<dynamics>`` (zero without
      ``urdf``); with ``drives='sized'`` the drives that :func:`motors_sized_for` gives (the
      simulated plant's: ``rotor_inertia`` ``Jm N^2``, ``gear_ratio``, ``eta``,
      ``eta_back``), with ``'ideal'`` none (zeros, 100, ones, ones).

    Returns
    -------
    dict
        ``joints`` and lists of ``n`` floats keyed by the core field names (``kp``, ``kd``,
        ``joint_stiffness``, ``joint_stiffness_limit``, ``torque_limit``, ``position_lower``,
        ``position_upper``, ``velocity_limit``, ``hold_kp``, ``hold_kd``,
        ``torque_rate_limit``, ``reference_acceleration_limit``),
        and ``reference`` (a ``sinusoid`` trajectory configuration).

    """
    if drives not in NOMINAL_DRIVES:
        raise ArmModelError(f"nominal.drives: must be 'ideal' or 'sized' (got {drives!r})")
    if law not in ('computed_torque', 'pd_gravity'):
        raise ArmModelError(f"law: must be 'computed_torque' or 'pd_gravity' (got {law!r})")
    lim = arm.limits
    n = arm.n
    if law == 'pd_gravity':
        kp, kd = pd_gravity_gains(arm, PD_GRAVITY_OMEGA, zeta)
    else:
        kp, kd = gains_from_bandwidth(n, omega_n, zeta)
    friction = (_urdf_friction(urdf, arm.joint_names) if urdf
                else [FrictionParameters()] * n)
    rotor, ratio, eta = [0.0] * n, [GEAR_RATIO] * n, [1.0] * n
    if drives == 'sized':
        motors = motors_sized_for(lim.effort, names=arm.joint_names)
        rotor = [m.Jm * m.N * m.N for m in motors]
        ratio, eta = [m.N for m in motors], [m.eta for m in motors]
    if damping is None:
        damping = [f.b for f in friction]
    stiffness = damped_joint_stiffness(arm, damping, kd, law, armature=rotor, period=period)
    lower = np.where(np.isfinite(lim.lower), lim.lower, -UNLIMITED_ENVELOPE)
    upper = np.where(np.isfinite(lim.upper), lim.upper, UNLIMITED_ENVELOPE)
    effort = np.where(np.isfinite(lim.effort), lim.effort, np.nan)
    velocity = _velocity_limits(lim)
    inertia = np.diag(arm.mass_matrix(0.5 * (lower + upper))).copy()
    w = float(HOLD_OMEGA)
    accel = np.minimum(ACCELERATION_SHARE * effort / inertia, ACCELERATION_CAP)

    def floats(values) -> list:
        return [float(v) for v in values]

    return {'joints': list(arm.joint_names), 'kp': floats(kp), 'kd': floats(kd),
            'torque_limit': floats(effort), 'position_lower': floats(lower),
            'position_upper': floats(upper), 'velocity_limit': floats(velocity),
            'joint_stiffness': floats(stiffness),
            'joint_stiffness_limit': floats(damped_joint_stiffness_limit(
                stiffness, damping, velocity,
                np.where(np.isfinite(effort), effort, UNCLAMPED_STIFFNESS))),
            'hold_kp': [w * w] * n, 'hold_kd': [2.0 * w] * n,
            'torque_rate_limit': floats(np.where(np.isfinite(effort),
                                                 effort / TORQUE_SWING_TIME, 2000.0)),
            'reference_acceleration_limit': floats(np.where(np.isfinite(accel), accel,
                                                            ACCELERATION_CAP)),
            'reference': _sinusoid_config(reference_within_limits(lim)),
            'nominal_friction': friction, 'rotor_inertia': floats(rotor),
            'gear_ratio': floats(ratio), 'eta': floats(eta), 'eta_back': floats(eta)}


def plant_defaults(arm: ArmModel, urdf: str) -> dict:
    """
    Per-joint defaults of a simulated arm known only from its description.

    ``friction`` from the URDF's ``<dynamics>`` (:func:`_urdf_friction`), ``motors`` sized
    from the effort limits (:func:`motors_sized_for`; None when a joint has none: ideal
    actuators then), ``torque_limit`` the effort limits (``nan`` where none) and
    ``initial_position`` the middle of every range (0 for an unbounded joint).
    """
    lim = arm.limits
    try:
        motors = motors_sized_for(lim.effort, names=arm.joint_names)
    except ArmModelError:
        motors = None
    with np.errstate(invalid='ignore'):         # inf + -inf where a joint has no limits
        mid = np.where(np.isfinite(lim.lower) & np.isfinite(lim.upper),
                       0.5 * (lim.lower + lim.upper), 0.0)
    return {'joints': list(arm.joint_names),
            'friction': _urdf_friction(urdf, arm.joint_names), 'motors': motors,
            'torque_limit': [float(v) if math.isfinite(v) else math.nan for v in lim.effort],
            'initial_position': [float(v) for v in mid]}


def urdf_plant(urdf: str, joints: Sequence[str], friction: Sequence[FrictionParameters],
               motors: Sequence[MotorParameters] | None,
               torque_limit: Sequence[float] | None = None,
               substeps: int | None = None) -> ArmPlant:
    """
    Return the simulated arm of a URDF: its rigid body with the rotors' armature ``Jm N^2``.

    Parameters
    ----------
    urdf : str
        The URDF text.
    joints : sequence of str
        The simulated joints (the others held at their neutral position).
    friction, motors : sequences of n parameters
        Per joint; ``motors=None`` selects ideal actuators clamped at ``torque_limit``.
    torque_limit : sequence of n float, optional
        Ideal-actuator clamp [N·m] (default: the effort limits).
    substeps : int, optional
        Integration steps per control period (:class:`ArmPlant`).

    """
    armature = [m.Jm * m.N * m.N for m in motors] if motors is not None else 0.0
    arm = UrdfArm.from_string(urdf, list(joints), armature=armature)
    return ArmPlant(arm, friction, motors, torque_limit=torque_limit, substeps=substeps)


def _sinusoid_config(ref: Sinusoid) -> dict:
    """Return the trajectory configuration (``type: sinusoid``) of a sinusoid reference."""
    return {'type': 'sinusoid', 'amplitude': [float(v) for v in ref.amplitude],
            'omega': [float(v) for v in ref.omega], 'offset': [float(v) for v in ref.offset],
            'phase': [float(v) for v in ref.phase]}


@dataclass
class UrdfRun:
    """An offline URDF run and what it was made of."""

    arm: UrdfArm
    """The plant's true arm (with the drives' armature)."""
    urdf: str
    """The plant's description (URDF text)."""
    nominal: ArmModel
    """The controller's model."""
    plant: ArmPlant
    run: ArmRun
    kp: np.ndarray
    kd: np.ndarray
    controller: Controller | AdaptiveController
    """The feedback law (its drive inversion and friction feed-forward when compensating)."""
    law: AdaptiveLaw | None = None
    """The adaptive law, when the run adapted (its estimates after the run)."""
    true_base: np.ndarray | None = None
    """The plant's base parameters in ``law.names`` order (with ``law``)."""


def run_urdf_closed_loop(path: str, *, duration: float = 5.0, actuator: str = 'motor',
                         nominal_scale: float | Sequence[float] = 1.0,
                         omega_n: float = 20.0,
                         zeta: float = 1.0, joints: Sequence[str] | None = None,
                         control_rate: float = 1000.0, compensate: bool = True,
                         nominal_urdf: str | None = None,
                         excitation: bool = False,
                         payload: PayloadParameters | None = None,
                         payload_offset: Sequence[float] | None = None,
                         adaptation: AdaptationParameters | None = None) -> UrdfRun:
    """
    Run computed torque on a URDF arm, offline, with the defaults of this module.

    Parameters
    ----------
    path : str
        ``.urdf`` or ``.xacro`` file.
    duration : float
        Simulated time [s], > 0.
    actuator : {'motor', 'ideal'}
        Sized DC-motor drives (:func:`motors_sized_for`) or ideal torque sources clamped at
        the effort limits.
    nominal_scale : float or sequence of n float
        The controller's model has every link's mass and inertia times this factor, or the
        body of joint ``i`` times the ``i``-th (1: a perfect model).
    omega_n, zeta : float
        Closed-loop bandwidth [rad/s] and damping (:func:`gains_from_bandwidth`).
    joints : sequence of str, optional
        The modelled joints (default: the movable joints of the trunk, the rest locked).
    control_rate : float
        Control rate [Hz].
    compensate : bool
        Invert the nominal drives' gear loss, feed the nominal friction forward (the
        controller's drive inversion, :mod:`manip_control.control`; the nominal drives are the
        plant's) and give a stiffness to the joints whose damping dominates their inertia
        (:func:`manip_control.hold_design.damped_joint_stiffness`); False: the rigid-body law
        alone.
    nominal_urdf : str, optional
        The controller's model from another description of the same joints (e.g. the URDF
        that ``manip-identify --urdf`` wrote): its rigid body and ``<dynamics>`` friction,
        with the armature and the Coulomb smoothing of the parameters file beside it when
        there is one (``NAME.yaml``), else the plant's armature and 0.02 rad/s (default: the
        plant's description).
    excitation : bool
        Track the identification excitation of :func:`excitation_reference` instead of the
        sinusoid of :func:`reference_within_limits` (``manip-offline --excitation``: record
        a bag for ``manip-identify --urdf``).
    payload : PayloadParameters, optional
        A point mass the plant's last link picks up at ``at_time`` (the controller's model
        stays as it is; :func:`manip_control.arm_plant.run_arm_closed_loop`).
    payload_offset : sequence of 3 float, optional
        Where, in the last modelled link's frame [m] (default: its origin).
    adaptation : AdaptationParameters, optional
        When enabled: adaptive computed torque (:class:`manip_control.adaptation.AdaptiveLaw`
        over the nominal model's base parameters, the consistency check every
        :data:`~manip_control.adaptation.ADAPTIVE_CHECK_EVERY` ticks) instead of computed torque.

    Raises
    ------
    ArmModelError (and its subclasses), UrdfError
        Bad description, bad option, or an arm that cannot be sized.

    """
    if actuator not in ('motor', 'ideal'):
        raise ArmModelError(f"actuator: expected 'motor' or 'ideal' (got {actuator!r})")
    if not (duration > 0.0 and math.isfinite(duration)):
        raise ArmModelError(f'duration: must be > 0 s (got {duration})')
    scale = np.atleast_1d(np.asarray(nominal_scale, dtype=float))
    if not (np.all(scale > 0.0) and np.all(np.isfinite(scale))):
        raise ArmModelError(f'nominal scale: must be > 0 (got {nominal_scale})')
    text = read_urdf_file(path)
    bare = UrdfArm.from_string(text, joints, source=str(path))
    motors = (motors_sized_for(bare.limits.effort, names=bare.joint_names)
              if actuator == 'motor' else None)
    armature = ([m.Jm * m.N * m.N for m in motors] if motors is not None else 0.0)
    arm = UrdfArm.from_string(text, joints, armature=armature, source=str(path))
    friction = _urdf_friction(text, arm.joint_names)
    plant = ArmPlant(arm, friction, motors)
    nominal, nominal_friction = arm, friction
    if nominal_urdf is not None:
        other = read_urdf_file(nominal_urdf)
        nominal_armature, eps = _identified_extras(nominal_urdf, arm.joint_names)
        nominal = UrdfArm.from_string(
            other, arm.joint_names, source=str(nominal_urdf),
            armature=armature if nominal_armature is None else nominal_armature)
        nominal_friction = _urdf_friction(other, arm.joint_names, eps)
    if np.any(scale != 1.0):
        nominal = nominal.with_inertial_scale(nominal_scale)
    kp, kd = gains_from_bandwidth(arm.n, omega_n, zeta)
    trajectory = (excitation_reference(arm).trajectory if excitation
                  else reference_within_limits(arm.limits))
    stiffness = clamp = None
    if compensate:
        damping = [f.b for f in nominal_friction]
        stiffness = damped_joint_stiffness(nominal, damping, kd, period=1.0 / control_rate)
        clamp = damped_joint_stiffness_limit(stiffness, damping, _velocity_limits(arm.limits),
                                             plant.torque_limit)
    params = controller_parameters(nominal, kp, kd, plant.torque_limit,
                                   friction=nominal_friction if compensate else None,
                                   motors=motors if compensate else None,
                                   adaptation=adaptation, joint_stiffness=stiffness,
                                   joint_stiffness_limit=clamp)
    period = 1.0 / control_rate
    law = truth = None
    if adaptation is not None and adaptation.enabled:
        fv = [f.b for f in nominal_friction]
        fc = [f.tau_c for f in nominal_friction]
        base = base_parameters(ArmRegressor(nominal))
        # save() needs the URDF whose inertials the estimate changes: not a scaled model's
        source = (other if nominal_urdf is not None else text) if np.all(scale == 1.0) \
            else None
        reg = adaptive_regressor(base, fv, fc, source, str(nominal_urdf or path))
        controller = AdaptiveController(params, period, nominal, reg,
                                        check_every=ADAPTIVE_CHECK_EVERY)
        law = controller.law
        truth = base.of(base.regressor.parameters(arm, [f.b for f in friction],
                                                  [f.tau_c for f in friction]))
    else:
        controller = Controller(params, period, nominal)
    run = run_arm_closed_loop(plant, controller, trajectory, duration, control_rate,
                              payload=payload, payload_offset=payload_offset)
    return UrdfRun(arm, text, nominal, plant, run, kp, kd, controller, law, truth)


#: The excitation of :func:`excitation_reference`: period [s], harmonics, position margin
#: (fraction of the range at each end), fraction of the velocity limits, |qdd| cap [rad/s^2]
#: (the choices of bench/bench_identify_arm.py, docs/identification.md).
EXCITATION = {'period': 10.0, 'harmonics': 5, 'position_margin': 0.1,
              'velocity_fraction': 0.5, 'acceleration_limit': 3.0}


def excitation_reference(arm: UrdfArm, seed: int = 0):
    """
    Return the identification excitation of an arm (:data:`EXCITATION`, random ``seed``).

    A finite Fourier series per joint that starts at rest, stays inside the URDF position
    limits (10 % margins), half the velocity limits and 3 rad/s^2, chosen among random
    candidates for the best-conditioned base regressor
    (:func:`manip_control.arm_identification.excitation_trajectory`).

    Raises
    ------
    ArmModelError
        A joint without a velocity limit (the excitation cannot be sized).

    """
    try:
        return excitation_trajectory(base_parameters(ArmRegressor(arm)), seed=seed,
                                     **EXCITATION)
    except ArmIdentificationError as exc:
        raise ArmModelError(f'excitation: {exc}') from None


def joint_effort(result: UrdfRun) -> np.ndarray:
    """
    Return the actuator torque at the joints at each tick [N·m], shape (K, n).

    What a driver reports as ``effort``: with motors the drives' torque at ``t_k``, the gear
    loss on the mesh torque at the state's accelerations (:meth:`ArmPlant.joint_torque`);
    with ideal actuators the command held up to ``t_k`` (the one of tick ``k - 1``; the
    first tick's own at ``k = 0``), as the plant node publishes it.
    """
    run = result.run
    if run.current is not None:
        n = run.q.shape[1]
        x = np.zeros(4 * n)
        out = np.empty_like(run.q)
        for k in range(run.q.shape[0]):
            x[:n], x[n:2 * n], x[2 * n:3 * n] = run.q[k], run.qd[k], run.current[k]
            out[k] = result.plant.joint_torque(x)
        return out
    return np.vstack((run.tau[:1], run.tau[:-1]))


def _urdf_friction(urdf: str, joints: Sequence[str],
                   eps: Sequence[float] | None = None) -> list[FrictionParameters]:
    """Viscous and smoothed Coulomb friction per joint from ``<dynamics>`` (eps 0.02 rad/s)."""
    fr = urdf_friction(urdf, joints, eps=0.02)
    eps = [0.02] * len(joints) if eps is None else eps
    return [FrictionParameters(b=float(b), tau_c=float(c), eps=float(e))
            for b, c, e in zip(fr.b, fr.tau_c, eps)]


def _identified_extras(urdf_path: str, joints: Sequence[str]):
    """
    Return ``(armature, eps)`` per joint from the parameters file beside an identified URDF.

    ``manip-identify --urdf`` writes ``NAME.yaml`` beside ``NAME.urdf`` with what a URDF cannot
    hold: the armature [kg·m^2] and the Coulomb smoothing ``eps`` [rad/s] its friction was
    fitted with. ``(None, None)`` when there is no such file for this URDF.
    """
    side = Path(urdf_path).with_suffix('.yaml')
    if not side.is_file():
        return None, None
    try:
        data = yaml.safe_load(side.read_text(encoding='utf-8'))
        if not isinstance(data, dict) or data.get('urdf') != Path(urdf_path).name:
            return None, None
        index = [list(data['joints']).index(j) for j in joints]
        armature = [float(data['armature'][k]) for k in index]
        eps = [float(data['friction']['eps'][k]) for k in index]
    except (OSError, yaml.YAMLError, KeyError, ValueError, TypeError, IndexError) as exc:
        raise ArmModelError(f'{side}: not the parameters file of {Path(urdf_path).name} '
                            f'({type(exc).__name__}: {exc})') from None
    return armature, eps


def summarize_urdf_run(result: UrdfRun) -> dict:
    """
    Return the per-joint figures of a run.

    Whole-run and late-window (second half) max |e| [rad], RMS error [rad], peak |tau| [N·m]
    and its fraction of the limit (None for a joint without one).
    """
    run = result.run
    late = run.t >= 0.5 * (run.t[-1] + (run.t[1] - run.t[0] if run.t.size > 1 else 0.0))
    err = np.abs(run.error)
    peak = np.abs(run.tau).max(axis=0)
    return {
        'joints': list(result.arm.joint_names),
        'duration_s': float(run.t.size * (run.t[1] - run.t[0])) if run.t.size > 1 else 0.0,
        'max_error_rad': err.max(axis=0).tolist(),
        'late_max_error_rad': err[late].max(axis=0).tolist(),
        'rms_error_rad': np.sqrt(np.mean(run.error ** 2, axis=0)).tolist(),
        'peak_torque_nm': peak.tolist(),
        # None where the joint has no limit (ideal actuators on a URDF without one)
        'peak_torque_fraction': [float(p / lim) if math.isfinite(lim) else None
                                 for p, lim in zip(peak, result.plant.torque_limit)],
    }
