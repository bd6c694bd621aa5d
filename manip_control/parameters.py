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
Physical, control and scenario parameters of the planar 2R arm, loaded from YAML.

Every parameter is SI (rad, m, kg, kg·m^2, s, N·m, A, V, Ω, H). The dataclasses are frozen
values; :func:`load_scenario` builds a :class:`Scenario` from a YAML file or mapping and
validates every field, raising :class:`ParameterError` with the parameter's path
(e.g. ``plant.motors[1].L``) and the reason.

Loading rules
-------------
* A whole section may be omitted: the documented defaults below are used; but a file with no
  settings at all (empty, or comments only) is refused.
* Inside a section that is given, every required key must be present (optional keys are
  marked "optional" in the field docs) and unknown keys are rejected.
* Numbers follow YAML 1.2: ``1.0e9`` and ``1e-3`` are floats (PyYAML's YAML 1.1 resolver
  alone would read an exponent without a sign as a string).
* Values loaded from a file or from ROS parameters are also checked against the plausible
  ranges of :data:`PLAUSIBLE_RANGES` (a bench-top to industrial 2R arm; see below), so that
  a typo such as ``l1: 1e9`` is refused instead of simulated. The dataclass constructors only
  check mathematical validity (a test may build a locked arm with ``I1 = 1e9``).

Plausible ranges (inclusive, SI units; :data:`PLAUSIBLE_RANGES`)
----------------------------------------------------------------
* ``scenario.control_rate`` [10, 20000] Hz (below 10 Hz there is no feedback control of an
  arm; above 20 kHz no node keeps up); ``scenario.duration`` at least one control period and
  at most 86400 s (one day).
* ``arm``: m1, m2 [0.001, 1000] kg; l1, l2 [0.001, 5] m; I1, I2 [0, 10000] kg m^2
  (1000 kg x (5 m)^2 / 12 = 2083); g0 [0, 25] m/s^2 (up to Jupiter's surface).
* ``friction``: b [0, 10000] N m s/rad; tau_c, tau_s [0, 10000] N m (the largest industrial
  joint torques); eps, v_s [1e-5, 10] rad/s; v_stick [1e-6, 1] rad/s.
* ``motors``: R [0.001, 100] ohm; L [1e-6, 1] H; k_t [1e-4, 100] N m/A; k_e [1e-4, 100]
  V s/rad; N [1, 1000] (direct drive to multi-stage gearing); eta, eta_back [0.05, 1];
  Jm [0, 0.01] kg m^2 (a large industrial servo); i_max [0.001, 1000] A; V_max [0.1, 1000] V
  (industrial DC buses are at most about 800 V); Kp_i [1e-4, 10000] V/A; Ki_i [0, 1e7]
  V/(A s).
* ``plant``: torque_limit [0.001, 10000] N m; initial_position [-100, 100] rad;
  initial_velocity [-100, 100] rad/s; substeps [1, 1000].
* ``plant.payload``: mass [0, 1000] kg (0 = none); at_time [0, 86400] s.
* ``sensors``: encoder_counts [0, 2^31 - 1]; position_noise_std [0, 1] rad;
  velocity_noise_std [0, 100] rad/s; velocity_cutoff_hz [0.01, 100000] Hz.
* ``controller``: kp (0, 1e6] (1/s^2 or N m/rad); kd (0, 20000] (1/s or N m s/rad);
  ki [0, 1e7] (1/s^3 or N m/(rad s)); integral_limit [0, 100] rad s; joint_stiffness
  [0, 1e6] N m/rad; joint_stiffness_limit [0.001, 10000] N m; torque_limit [0.001, 10000]
  N m; wn (0, 1000] rad/s; zeta (0, 10];
  nominal.rotor_inertia [0, 10000] kg m^2; nominal.gear_ratio [1, 1000]; nominal.eta,
  nominal.eta_back [0.05, 1] (and the nominal arm and friction as above); adaptation.gamma
  [0, 1e6] 1/(N m rad), bound_fraction (0, 10], sigma [0, 1e6] N m rad/s, dead_zone
  [0, 100] rad/s, max_rate (0, 1000] 1/s, forgetting_time (0, 1e5] s, payload_mass
  [0, 1000] kg, payload_radius (0, 10] m.
* trajectory node: position limits [-100, 100] rad; velocity limits (0, 100] rad/s.

Defaults
--------
The default arm is the seed-001 arm (m = 3 / 2 kg, l = 1 m, lc = l/2, I = 0.2 / 0.1 kg·m^2).
The default motors are geared brushed DC motors sized to hold the arm horizontally with
about 2x margin: joint 1 peak 15 A x 5.95 N·m/A = 89 N·m against a 44.1 N·m static gravity
load, joint 2 peak 6 A x 4.25 N·m/A = 25.5 N·m against 9.8 N·m. The PI current loops are
tuned by pole-zero cancellation, ``Kp_i = L*wc``, ``Ki_i = R*wc``, for a 300 Hz
(wc = 1885 rad/s) current bandwidth.

"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from dataclasses import field
from dataclasses import fields
import math
from pathlib import Path
import re
import sys
from typing import Any, Mapping

from manip_control.trajectories import trajectory_from_config
from manip_control.trajectories import TrajectoryError
import yaml


class ParameterError(ValueError):
    """An invalid, unknown or missing parameter; the message names it and says why."""


# --------------------------------------------------------------------------------------------
# validation helpers


def _finite(path: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ParameterError(f'{path}: must be a number (got {value!r})')
    value = float(value)
    if not math.isfinite(value):
        raise ParameterError(f'{path}: must be finite (got {value})')
    return value


def _positive(path: str, value: Any) -> float:
    value = _finite(path, value)
    if value <= 0.0:
        raise ParameterError(f'{path}: must be > 0 (got {value})')
    return value


def _nonnegative(path: str, value: Any) -> float:
    value = _finite(path, value)
    if value < 0.0:
        raise ParameterError(f'{path}: must be >= 0 (got {value})')
    return value


def _vector(path: str, value: Any, n: int = 2, check=_finite) -> tuple[float, ...]:
    if isinstance(value, (str, bytes)) or not hasattr(value, '__len__'):
        raise ParameterError(f'{path}: must be a list of {n} numbers (got {value!r})')
    if len(value) != n:
        raise ParameterError(f'{path}: must have {n} elements (got {len(value)})')
    return tuple(check(f'{path}[{k}]', v) for k, v in enumerate(value))


#: Plausible ranges of configured values, ``{section: {field: (low, high, unit)}}``, inclusive
#: (documented in the module docstring). A field that must be > 0 keeps that strict check;
#: these bounds only remove magnitudes no bench-top to industrial 2R arm has.
PLAUSIBLE_RANGES: dict[str, dict[str, tuple[float, float, str]]] = {
    'scenario': {'control_rate': (10.0, 20000.0, 'Hz'), 'duration': (0.0, 86400.0, 's')},
    'arm': {'m1': (1e-3, 1e3, 'kg'), 'm2': (1e-3, 1e3, 'kg'),
            'l1': (1e-3, 5.0, 'm'), 'l2': (1e-3, 5.0, 'm'),
            'I1': (0.0, 1e4, 'kg m^2'), 'I2': (0.0, 1e4, 'kg m^2'),
            'g0': (0.0, 25.0, 'm/s^2')},
    'friction': {'b': (0.0, 1e4, 'N m s/rad'), 'tau_c': (0.0, 1e4, 'N m'),
                 'tau_s': (0.0, 1e4, 'N m'), 'eps': (1e-5, 10.0, 'rad/s'),
                 'v_s': (1e-5, 10.0, 'rad/s'), 'v_stick': (1e-6, 1.0, 'rad/s')},
    'motors': {'R': (1e-3, 100.0, 'ohm'), 'L': (1e-6, 1.0, 'H'),
               'k_t': (1e-4, 100.0, 'N m/A'), 'k_e': (1e-4, 100.0, 'V s/rad'),
               'N': (1.0, 1000.0, ''), 'eta': (0.05, 1.0, ''), 'eta_back': (0.05, 1.0, ''),
               'Jm': (0.0, 0.01, 'kg m^2'),
               'i_max': (1e-3, 1000.0, 'A'), 'V_max': (0.1, 1000.0, 'V'),
               'Kp_i': (1e-4, 1e4, 'V/A'), 'Ki_i': (0.0, 1e7, 'V/(A s)')},
    'plant': {'torque_limit': (1e-3, 1e4, 'N m'), 'initial_position': (-100.0, 100.0, 'rad'),
              'initial_velocity': (-100.0, 100.0, 'rad/s'), 'substeps': (1, 1000, '')},
    'payload': {'mass': (0.0, 1e3, 'kg'), 'at_time': (0.0, 86400.0, 's')},
    'sensors': {'encoder_counts': (0, 2 ** 31 - 1, ''),
                'position_noise_std': (0.0, 1.0, 'rad'),
                'velocity_noise_std': (0.0, 100.0, 'rad/s'),
                'velocity_cutoff_hz': (0.01, 1e5, 'Hz')},
    'controller': {'kp': (0.0, 1e6, ''), 'kd': (0.0, 2e4, ''), 'ki': (0.0, 1e7, ''),
                   'integral_limit': (0.0, 100.0, 'rad s'), 'torque_limit': (1e-3, 1e4, 'N m'),
                   'joint_stiffness': (0.0, 1e6, 'N m/rad'),
                   'joint_stiffness_limit': (1e-3, 1e4, 'N m'), 'wn': (0.0, 1000.0, 'rad/s'),
                   'zeta': (0.0, 10.0, '')},
    'nominal': {'rotor_inertia': (0.0, 1e4, 'kg m^2'), 'gear_ratio': (1.0, 1000.0, ''),
                'eta': (0.05, 1.0, ''), 'eta_back': (0.05, 1.0, '')},
    'adaptation': {'gamma': (0.0, 1e6, '1/(N m rad)'), 'bound_fraction': (0.0, 10.0, ''),
                   'sigma': (0.0, 1e6, 'N m rad/s'), 'dead_zone': (0.0, 100.0, 'rad/s'),
                   'max_rate': (0.0, 1000.0, '1/s'), 'forgetting_time': (0.0, 1e5, 's'),
                   'excitation_threshold': (0.0, 1.0, ''), 'payload_mass': (0.0, 1e3, 'kg'),
                   'payload_radius': (0.0, 10.0, 'm')},
    'trajectory': {'position_limit': (-100.0, 100.0, 'rad'),
                   'velocity_limit': (0.0, 100.0, 'rad/s')},
}


def check_plausible(path: str, value: Any, section: str, name: str) -> None:
    """
    Refuse ``value`` (a number or a per-joint sequence) outside ``PLAUSIBLE_RANGES``.

    Raises
    ------
    ParameterError
        ``path[k]: must be in [low, high] unit (plausible range ...; got v)``.

    """
    bounds = PLAUSIBLE_RANGES.get(section, {}).get(name)
    if bounds is None or isinstance(value, (bool, str)):
        return
    lo, hi, unit = bounds
    items = (list(enumerate(value)) if isinstance(value, (list, tuple))
             else [(None, value)])
    for k, v in items:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
            where = path if k is None else f'{path}[{k}]'
            unit_text = f' {unit}' if unit else ''
            raise ParameterError(f'{where}: must be in [{lo:g}, {hi:g}]{unit_text} (plausible '
                                 f'range for a 2R arm; got {v!r})')


def _check_ranges(obj: Any, section: str, path: str) -> None:
    """Check every field of ``obj`` that has a plausible range in ``section``."""
    for name in PLAUSIBLE_RANGES[section]:
        if hasattr(obj, name):
            check_plausible(f'{path}.{name}', getattr(obj, name), section, name)


def _choice(path: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ParameterError(f'{path}: must be one of {", ".join(choices)} (got {value!r})')
    return value


def _mapping_keys(path: str, data: Any, required: set[str], optional: set[str]) -> None:
    if not isinstance(data, Mapping):
        raise ParameterError(f'{path}: must be a mapping (got {type(data).__name__})')
    prefix = '' if path == '<root>' else f'{path}.'  # top-level keys are their own path
    unknown = sorted(set(data) - required - optional, key=str)
    if unknown:
        raise ParameterError(f'{prefix}{unknown[0]}: unknown parameter')
    missing = sorted(required - set(data))
    if missing:
        raise ParameterError(f'{prefix}{missing[0]}: missing required parameter')


def _field_names(cls) -> tuple[set[str], set[str]]:
    """Split a dataclass's fields into required and optional (metadata optional=True)."""
    required, optional = set(), set()
    for f in fields(cls):
        (optional if f.metadata.get('optional') else required).add(f.name)
    return required, optional


def _opt(default, **kw):
    return field(default=default, metadata={'optional': True, **kw})


# --------------------------------------------------------------------------------------------
# parameter dataclasses


@dataclass(frozen=True)
class ArmParameters:
    """
    Rigid-body parameters of the planar 2R arm.

    Assumptions: planar links rotating about z, point joints, each link's inertia ``I`` taken
    about its own centre of mass on the link axis at distance ``lc`` from its proximal joint
    (Spong, Hutchinson & Vidyasagar, *Robot Modeling and Control*, 2nd ed., section 6.4).

    Attributes
    ----------
    m1, m2 : float
        Link masses [kg], > 0.
    l1, l2 : float
        Link lengths [m], > 0.
    lc1, lc2 : float
        Distance from the proximal joint to the link's centre of mass [m], in (0, l].
    I1, I2 : float
        Link inertia about its centre of mass, z axis [kg·m^2], >= 0.
    g0 : float
        Gravity magnitude [m/s^2], >= 0 (optional, default 9.81).
    plane : str
        ``'vertical'`` (gravity along -y) or ``'horizontal'`` (no gravity) (optional).

    """

    m1: float = 3.0
    m2: float = 2.0
    l1: float = 1.0
    l2: float = 1.0
    lc1: float = 0.5
    lc2: float = 0.5
    I1: float = 0.2
    I2: float = 0.1
    g0: float = _opt(9.81)
    plane: str = _opt('vertical')

    def __post_init__(self):
        _validate_arm(self, 'arm')

    @property
    def gravity(self) -> float:
        """Effective gravity along -y [m/s^2]: g0 in the vertical plane, 0 in the horizontal."""
        return self.g0 if self.plane == 'vertical' else 0.0


def _validate_arm(arm: ArmParameters, path: str) -> None:
    for name in ('m1', 'm2', 'l1', 'l2'):
        _positive(f'{path}.{name}', getattr(arm, name))
    for name in ('I1', 'I2', 'g0'):
        _nonnegative(f'{path}.{name}', getattr(arm, name))
    for lc, l in (('lc1', 'l1'), ('lc2', 'l2')):
        v = _finite(f'{path}.{lc}', getattr(arm, lc))
        if not 0.0 < v <= getattr(arm, l):
            raise ParameterError(f'{path}.{lc}: must be in (0, {l}] = (0, {getattr(arm, l)}] '
                                 f'(got {v})')
    _choice(f'{path}.plane', arm.plane, ('vertical', 'horizontal'))


@dataclass(frozen=True)
class FrictionParameters:
    """
    Joint friction ``f(qd) = b*qd + (tau_c + tau_s*exp(-(qd/v_s)^2)) * tanh(qd/eps)``.

    That is the ``smooth`` friction model (the default, ``plant.friction_model``). The
    ``karnopp`` model (stiction) keeps the same sliding law with ``sign(qd)`` for the tanh
    and holds a joint whose speed is below ``v_stick`` with any friction torque up to the
    breakaway level ``tau_c + tau_s`` (see :mod:`manip_control.friction`).

    Attributes
    ----------
    b : float
        Viscous coefficient [N·m·s/rad], >= 0.
    tau_c : float
        Coulomb level [N·m], >= 0.
    eps : float
        Smoothing velocity of the tanh [rad/s], > 0.
    tau_s : float
        Extra Stribeck (breakaway) torque [N·m], >= 0 (optional, default 0 = off).
    v_s : float
        Stribeck velocity [rad/s], > 0 (optional, default 0.1).
    v_stick : float
        Karnopp stick band: a joint with ``|qd| < v_stick`` [rad/s] is stuck unless the
        torque on it exceeds the breakaway level, > 0 (optional, default 0.001; used only
        by the ``karnopp`` friction model).

    """

    b: float = 0.0
    tau_c: float = 0.0
    eps: float = 0.01
    tau_s: float = _opt(0.0)
    v_s: float = _opt(0.1)
    v_stick: float = _opt(0.001)

    def __post_init__(self):
        _validate_friction(self, 'friction')


def _validate_friction(fr: FrictionParameters, path: str) -> None:
    for name in ('b', 'tau_c', 'tau_s'):
        _nonnegative(f'{path}.{name}', getattr(fr, name))
    _positive(f'{path}.eps', fr.eps)
    _positive(f'{path}.v_s', fr.v_s)
    _positive(f'{path}.v_stick', fr.v_stick)


@dataclass(frozen=True)
class MotorParameters:
    """
    Brushed DC motor, gearbox and PI current drive of one joint.

    ``L di/dt = V - R i - k_e N qd``. The drive runs a continuous PI current loop
    ``V = clamp(Kp_i (i_ref - i) + x_i, +-V_max)``, ``dx_i/dt = Ki_i (i_ref - i)`` while V
    is not saturated, with ``i_ref = clamp(tau_cmd / (N k_t), +-i_max)`` (the drive
    converts the torque command through the ideal transmission). The gearbox passes
    ``eta N k_t i`` to the joint when the motor drives the load and ``N k_t i / eta_back``
    when the load drives the motor; the loss is a load-dependent Coulomb friction, smoothed
    with the joint friction's ``eps`` (see :mod:`manip_control.actuators`).

    Attributes
    ----------
    R : float
        Armature resistance [Ω], > 0.
    L : float
        Armature inductance [H], > 0.
    k_t : float
        Torque constant [N·m/A], > 0.
    k_e : float
        Back-EMF constant [V·s/rad], > 0 (equal to k_t in SI for an ideal motor).
    N : float
        Gear ratio (motor turns per joint turn), >= 1.
    eta : float
        Forward gearbox efficiency (motor drives the load), in (0, 1].
    Jm : float
        Rotor inertia at the motor shaft [kg·m^2], >= 0; the joint sees ``Jm*N^2``.
    i_max : float
        Drive current limit [A], > 0.
    V_max : float
        Drive voltage limit (bus) [V], > 0.
    Kp_i : float
        Current-loop proportional gain [V/A], > 0.
    Ki_i : float
        Current-loop integral gain [V/(A·s)], >= 0.
    eta_back : float
        Backward gearbox efficiency (the load drives the motor), in (0, 1] (optional,
        default 0.85, as ``eta``: spur and planetary gears lose about as much both ways;
        a friction-dominated mesh such as a worm has about ``2 - 1/eta``; a self-locking
        gear is not represented).

    """

    R: float = 0.3
    L: float = 0.3e-3
    k_t: float = 0.07
    k_e: float = 0.07
    N: float = 100.0
    eta: float = 0.85
    Jm: float = 1.0e-5
    i_max: float = 15.0
    V_max: float = 48.0
    Kp_i: float = 0.5655
    Ki_i: float = 565.5
    eta_back: float = _opt(0.85)

    def __post_init__(self):
        _validate_motor(self, 'motor')

    @property
    def torque_per_amp(self) -> float:
        """Joint torque per ampere through the ideal transmission ``N k_t`` [N·m/A]."""
        return self.N * self.k_t

    @property
    def reflected_inertia(self) -> float:
        """Rotor inertia seen at the joint ``Jm N^2`` [kg·m^2]."""
        return self.Jm * self.N ** 2

    @property
    def peak_torque(self) -> float:
        """Joint torque at the current limit driving the load ``eta N k_t i_max`` [N·m]."""
        return self.eta * self.N * self.k_t * self.i_max


def _validate_motor(mo: MotorParameters, path: str) -> None:
    for name in ('R', 'L', 'k_t', 'k_e', 'i_max', 'V_max', 'Kp_i'):
        _positive(f'{path}.{name}', getattr(mo, name))
    for name in ('Jm', 'Ki_i'):
        _nonnegative(f'{path}.{name}', getattr(mo, name))
    if _finite(f'{path}.N', mo.N) < 1.0:
        raise ParameterError(f'{path}.N: must be >= 1 (got {mo.N})')
    if not 0.0 < _finite(f'{path}.eta', mo.eta) <= 1.0:
        raise ParameterError(f'{path}.eta: must be in (0, 1] (got {mo.eta})')
    if not 0.0 < _finite(f'{path}.eta_back', mo.eta_back) <= 1.0:
        raise ParameterError(f'{path}.eta_back: must be in (0, 1] (got {mo.eta_back})')


DEFAULT_MOTORS = (
    MotorParameters(),
    MotorParameters(R=0.8, L=0.5e-3, k_t=0.05, k_e=0.05, N=100.0, eta=0.85, Jm=5.0e-6,
                    i_max=6.0, V_max=48.0, Kp_i=0.9425, Ki_i=1508.0),
)


@dataclass(frozen=True)
class SensorParameters:
    """
    Joint sensors. Ideal (exact state) by default.

    Attributes
    ----------
    encoder_counts : int
        Encoder counts per joint revolution; positions are quantized to ``2*pi/counts``
        (0 = no quantization) (optional).
    position_noise_std : float
        Standard deviation of additive Gaussian position noise [rad] (optional, 0 = off).
    velocity_noise_std : float
        Standard deviation of additive Gaussian velocity noise [rad/s] (optional, 0 = off).
    velocity_source : str
        ``'true'`` (the simulated velocity, plus noise) or ``'filtered_difference'``
        (backward difference of the measured position through a first-order low-pass with
        cutoff ``velocity_cutoff_hz``) (optional).
    velocity_cutoff_hz : float
        Low-pass cutoff for the differentiated velocity [Hz], > 0 (optional, default 100).
    seed : int
        Seed of the noise generator (optional, default 0).

    """

    encoder_counts: int = _opt(0)
    position_noise_std: float = _opt(0.0)
    velocity_noise_std: float = _opt(0.0)
    velocity_source: str = _opt('true')
    velocity_cutoff_hz: float = _opt(100.0)
    seed: int = _opt(0)

    def __post_init__(self):
        _validate_sensors(self, 'sensors')

    @property
    def ideal(self) -> bool:
        """Tell whether the measurement equals the simulated state."""
        return (self.encoder_counts == 0 and self.position_noise_std == 0.0
                and self.velocity_noise_std == 0.0 and self.velocity_source == 'true')


def _int(path: str, value: Any, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ParameterError(f'{path}: must be an integer (got {value!r})')
    if value < minimum:
        raise ParameterError(f'{path}: must be >= {minimum} (got {value})')
    return value


def _validate_sensors(se: SensorParameters, path: str) -> None:
    _int(f'{path}.encoder_counts', se.encoder_counts)
    _nonnegative(f'{path}.position_noise_std', se.position_noise_std)
    _nonnegative(f'{path}.velocity_noise_std', se.velocity_noise_std)
    _choice(f'{path}.velocity_source', se.velocity_source, ('true', 'filtered_difference'))
    _positive(f'{path}.velocity_cutoff_hz', se.velocity_cutoff_hz)
    _int(f'{path}.seed', se.seed)


@dataclass(frozen=True)
class PayloadParameters:
    """
    A point mass that the tool picks up during the run (the plant only, never the controller).

    At the first control tick ``t_k >= at_time`` the mass is attached at the tool: for the 2R
    at the tip of link 2 (distance ``l2`` along it), for an arm from its URDF at the origin of
    the last modelled link's frame plus ``offset``. It moves with the tool from then on (no
    impact: the joint velocities are continuous). The 2R's link 2 then has (parallel-axis
    theorem, ``m_p`` the payload)::

        m2' = m2 + m_p,   lc2' = (m2 lc2 + m_p l2) / m2'
        I2' = I2 + m2 (lc2' - lc2)^2 + m_p (l2 - lc2')^2

    Attributes
    ----------
    mass : float
        Payload mass [kg], >= 0 (0 = no payload; optional, default 0).
    at_time : float
        Simulated time of the pick-up [s], >= 0 (optional, default 0).

    """

    mass: float = _opt(0.0)
    at_time: float = _opt(0.0)

    def __post_init__(self):
        _validate_payload(self, 'payload')


def _validate_payload(pa: PayloadParameters, path: str) -> None:
    _nonnegative(f'{path}.mass', pa.mass)
    _nonnegative(f'{path}.at_time', pa.at_time)


def payload_tick(at_time: float, period: float) -> int:
    """Index ``k`` of the first control tick ``k T >= at_time`` [s] (the payload's pick-up)."""
    return max(0, math.ceil(at_time / period - 1e-9))


def loaded_arm(arm: ArmParameters, mass: float) -> ArmParameters:
    """
    Return the 2R arm with a point mass ``mass`` [kg] at the tip of link 2.

    ``m2' = m2 + m_p``, ``lc2' = (m2 lc2 + m_p l2) / m2'``,
    ``I2' = I2 + m2 (lc2' - lc2)^2 + m_p (l2 - lc2')^2`` (about the new centre of mass);
    link 1 is unchanged. ``mass = 0`` returns ``arm`` itself.
    """
    mass = _nonnegative('payload.mass', mass)
    if mass == 0.0:
        return arm
    m2 = arm.m2 + mass
    lc2 = (arm.m2 * arm.lc2 + mass * arm.l2) / m2
    inertia = arm.I2 + arm.m2 * (lc2 - arm.lc2) ** 2 + mass * (arm.l2 - lc2) ** 2
    return dataclasses.replace(arm, m2=m2, lc2=lc2, I2=inertia)


@dataclass(frozen=True)
class PlantParameters:
    """
    The simulated (true) arm: rigid body, friction, actuators and sensors.

    Attributes
    ----------
    arm : ArmParameters
    friction : tuple of 2 FrictionParameters (optional, default b = 0.5 / 0.3 N·m·s/rad,
        tau_c = 0.8 / 0.4 N·m, eps = 0.01 rad/s)
    motors : tuple of 2 MotorParameters (optional, default DEFAULT_MOTORS)
        Also used in ``ideal`` mode for the reflected rotor inertia ``Jm N^2``.
    actuator : str
        ``'motor'`` (DC motor + PI current drive) or ``'ideal'`` (tau_m = clamp(tau_cmd)).
    torque_limit : tuple of 2 float
        Ideal-actuator torque clamp [N·m], > 0 (optional, default 89 / 25; the motor mode
        is limited by i_max and V_max instead).
    rotor_inertia : bool
        Add the rotors' spin inertia ``Jm N^2`` to the diagonal of M (optional, default
        true).
    rotor_coupling : bool
        With ``rotor_inertia``: also the kinetic coupling of rotor 2, which rides on link 1
        (``Jm2`` added to M11, ``Jm2 N2`` to M12; see :mod:`manip_control.dynamics`)
        (optional, default true).
    friction_model : str
        ``'smooth'`` (tanh-smoothed Coulomb, the default) or ``'karnopp'`` (stiction with
        breakaway, see :mod:`manip_control.friction`) (optional).
    start_in_equilibrium : bool
        Motor plants only: start the currents and the drives' PI integrators at the values
        that hold the initial pose against gravity, ``N k_t i = g(q0)``,
        ``x_i = R i + k_e N qd0``, instead of at zero (optional, default true; no effect
        in ``ideal`` mode).
    sensors : SensorParameters (optional)
    initial_position, initial_velocity : tuple of 2 float
        Initial joint state [rad], [rad/s] (optional, default zeros).
    substeps : int
        Integrator sub-steps per control period, >= 1 (optional, default 4).
    payload : PayloadParameters
        A point mass picked up at the tip of link 2 at a given time (optional, default
        none).

    """

    arm: ArmParameters = field(default_factory=ArmParameters)
    friction: tuple = _opt((FrictionParameters(b=0.5, tau_c=0.8, eps=0.01),
                            FrictionParameters(b=0.3, tau_c=0.4, eps=0.01)))
    motors: tuple = _opt(DEFAULT_MOTORS)
    actuator: str = 'motor'
    torque_limit: tuple = _opt((89.0, 25.0))
    rotor_inertia: bool = _opt(True)
    rotor_coupling: bool = _opt(True)
    friction_model: str = _opt('smooth')
    start_in_equilibrium: bool = _opt(True)
    sensors: SensorParameters = _opt(SensorParameters())
    initial_position: tuple = _opt((0.0, 0.0))
    initial_velocity: tuple = _opt((0.0, 0.0))
    substeps: int = _opt(4)
    payload: PayloadParameters = _opt(PayloadParameters())

    def __post_init__(self):
        _validate_plant(self, 'plant')

    @property
    def reflected_inertia(self) -> tuple[float, float]:
        """Diagonal rotor inertia added to M [kg·m^2] (zeros when rotor_inertia is false)."""
        if not self.rotor_inertia:
            return (0.0, 0.0)
        return tuple(m.reflected_inertia for m in self.motors)

    @property
    def rotor_coupling_terms(self) -> tuple[float, float]:
        """``(Jm2, Jm2 N2)`` added to M11 and M12 [kg·m^2] (zeros when off)."""
        if not (self.rotor_inertia and self.rotor_coupling):
            return (0.0, 0.0)
        m2 = self.motors[1]
        return (float(m2.Jm), float(m2.Jm * m2.N))


def _validate_plant(pl: PlantParameters, path: str) -> None:
    _validate_arm(pl.arm, f'{path}.arm')
    _validate_joint_list(f'{path}.friction', pl.friction, FrictionParameters, _validate_friction)
    _validate_joint_list(f'{path}.motors', pl.motors, MotorParameters, _validate_motor)
    _choice(f'{path}.actuator', pl.actuator, ('motor', 'ideal'))
    _vector(f'{path}.torque_limit', pl.torque_limit, check=_positive)
    for name in ('rotor_inertia', 'rotor_coupling', 'start_in_equilibrium'):
        if not isinstance(getattr(pl, name), bool):
            raise ParameterError(f'{path}.{name}: must be true or false')
    _choice(f'{path}.friction_model', pl.friction_model, ('smooth', 'karnopp'))
    _validate_sensors(pl.sensors, f'{path}.sensors')
    _vector(f'{path}.initial_position', pl.initial_position)
    _vector(f'{path}.initial_velocity', pl.initial_velocity)
    _int(f'{path}.substeps', pl.substeps, minimum=1)
    if not isinstance(pl.payload, PayloadParameters):
        raise ParameterError(f'{path}.payload: must be a PayloadParameters')
    _validate_payload(pl.payload, f'{path}.payload')


def _validate_joint_list(path, items, cls, validate, n=2):
    if not isinstance(items, (tuple, list)) or len(items) != n:
        raise ParameterError(f'{path}: must be a list of {n} entries, one per joint')
    for k, item in enumerate(items):
        if not isinstance(item, cls):
            raise ParameterError(f'{path}[{k}]: must be a {cls.__name__}')
        validate(item, f'{path}[{k}]')


@dataclass(frozen=True)
class NominalModel:
    """
    The controller's own model of the arm (may differ from the plant's true one).

    Attributes
    ----------
    arm : ArmParameters
    friction : tuple of 2 FrictionParameters
        Used for friction compensation when enabled (optional, default zero friction).
    rotor_inertia : tuple of 2 float
        Reflected rotor inertia ``Jm N^2`` per joint [kg·m^2], >= 0 (optional, default 0).
    rotor_coupling : bool
        Include the coupling of rotor 2 riding on link 1: ``Jm2 = Jr2 / N2^2`` added to
        M11 and ``Jm2 N2 = Jr2 / N2`` to M12 (optional, default false: the diagonal-only
        rotor model common in computed-torque controllers).
    gear_ratio : tuple of 2 float
        Gear ratios ``N`` per joint, >= 1, used by ``rotor_coupling`` (optional, default
        100 / 100, the default motors').
    eta, eta_back : tuple of 2 float
        Gear efficiencies per joint in (0, 1], forward (motor drives the load) and backward
        (load drives the motor), as the plant's motors (optional, default 1 / 1: an ideal
        gear, nothing inverted). Below 1 the computed-torque command inverts the gear loss
        on the mesh torque (:mod:`manip_control.control`).

    The parts of the nominal model are switchable: ``rotor_inertia`` zeros (no rotors),
    ``rotor_coupling`` false, ``eta``/``eta_back`` ones (no gear inversion), and the
    controller's ``friction_compensation`` false (no friction feed-forward).

    """

    arm: ArmParameters = field(default_factory=ArmParameters)
    friction: tuple = _opt((FrictionParameters(), FrictionParameters()))
    rotor_inertia: tuple = _opt((0.0, 0.0))
    rotor_coupling: bool = _opt(False)
    gear_ratio: tuple = _opt((100.0, 100.0))
    eta: tuple = _opt((1.0, 1.0))
    eta_back: tuple = _opt((1.0, 1.0))

    def __post_init__(self):
        _validate_nominal(self, 'nominal')

    @property
    def n_joints(self) -> int:
        """Return the number of joints: the entries of ``friction`` (of every per-joint list)."""
        return _length('nominal.friction', self.friction)

    @property
    def rotor_coupling_terms(self) -> tuple[float, float]:
        """``(Jm2, Jm2 N2) = (Jr2 / N2^2, Jr2 / N2)`` for M11, M12 [kg·m^2] (zeros when off)."""
        if not self.rotor_coupling:
            return (0.0, 0.0)
        jr2, n2 = float(self.rotor_inertia[1]), float(self.gear_ratio[1])
        return (jr2 / (n2 * n2), jr2 / n2)


def _length(path: str, value: Any) -> int:
    if isinstance(value, (str, bytes)) or not hasattr(value, '__len__') or not len(value):
        raise ParameterError(f'{path}: must be a list of numbers, one per joint (got {value!r})')
    return len(value)


def _validate_nominal(nm: NominalModel, path: str) -> None:
    # the number of joints from friction: a list of per-joint entries, built from per-joint
    # arrays whose lengths the loaders check against the joints
    n = _length(f'{path}.friction', nm.friction)
    _validate_arm(nm.arm, f'{path}.arm')
    _validate_joint_list(f'{path}.friction', nm.friction, FrictionParameters,
                         _validate_friction, n)
    _vector(f'{path}.rotor_inertia', nm.rotor_inertia, n, check=_nonnegative)
    if not isinstance(nm.rotor_coupling, bool):
        raise ParameterError(f'{path}.rotor_coupling: must be true or false')
    for k, g in enumerate(_vector(f'{path}.gear_ratio', nm.gear_ratio, n)):
        if g < 1.0:
            raise ParameterError(f'{path}.gear_ratio[{k}]: must be >= 1 (got {g})')
    for name in ('eta', 'eta_back'):
        for k, e in enumerate(_vector(f'{path}.{name}', getattr(nm, name), n)):
            if not 0.0 < e <= 1.0:
                raise ParameterError(f'{path}.{name}[{k}]: must be in (0, 1] (got {e})')


@dataclass(frozen=True)
class AdaptationParameters:
    """
    Adaptive computed torque over the nominal model's base parameters (see adaptation.py).

    Attributes
    ----------
    enabled : bool
        Run the adaptive law instead of computed torque (optional, default false).
    gamma : float
        Adaptation gain [1/(N·m·rad)]: ``Gamma = gamma diag(scale^2)``, ``scale_k =
        max(|theta0_k|, floor)`` (optional, default 2).
    bound_fraction : float
        Each estimate is kept in ``theta0_k +- bound_fraction scale_k`` (optional, default 0.5).
    sigma : float
        Sigma-modification toward the nominal values [N·m·rad/s] (optional, default 0.005).
    dead_zone : float
        No gradient step while ``max |s| <`` this [rad/s] (optional, default 0: off).
    max_rate : float
        Largest change of an estimate per second, in units of its ``scale`` [1/s]
        (optional, default 1).
    forgetting_time : float
        Time constant of the information matrix's forgetting [s] (optional, default 5).
    excitation_threshold : float
        A direction is excited when its eigenvalue of the information matrix exceeds this
        fraction of the largest (optional, default 0.01).
    friction : bool
        Adapt the viscous and Coulomb friction too (optional, default false).
    payload_mass : float
        Largest payload [kg] the law must be able to learn: the box grows by what a point
        mass of at most this much, within ``payload_radius`` of the tool, changes in each base
        parameter (optional, default 0: the box alone).
    payload_radius : float
        Largest distance [m] of that payload from the tool: a URDF arm's last link's frame
        origin, the 2R's tip of link 2 along the link (optional, default 0.2).

    """

    enabled: bool = _opt(False)
    gamma: float = _opt(2.0)
    bound_fraction: float = _opt(0.5)
    sigma: float = _opt(0.005)
    dead_zone: float = _opt(0.0)
    max_rate: float = _opt(1.0)
    forgetting_time: float = _opt(5.0)
    excitation_threshold: float = _opt(1e-2)
    friction: bool = _opt(False)
    payload_mass: float = _opt(0.0)
    payload_radius: float = _opt(0.2)

    def __post_init__(self):
        _validate_adaptation(self, 'adaptation')


def _validate_adaptation(ad: AdaptationParameters, path: str) -> None:
    for name in ('enabled', 'friction'):
        if not isinstance(getattr(ad, name), bool):
            raise ParameterError(f'{path}.{name}: must be true or false')
    _nonnegative(f'{path}.gamma', ad.gamma)
    _positive(f'{path}.bound_fraction', ad.bound_fraction)
    _nonnegative(f'{path}.sigma', ad.sigma)
    _nonnegative(f'{path}.dead_zone', ad.dead_zone)
    _positive(f'{path}.max_rate', ad.max_rate)
    _positive(f'{path}.forgetting_time', ad.forgetting_time)
    _nonnegative(f'{path}.payload_mass', ad.payload_mass)
    _positive(f'{path}.payload_radius', ad.payload_radius)
    if not 0.0 < _finite(f'{path}.excitation_threshold', ad.excitation_threshold) < 1.0:
        raise ParameterError(f'{path}.excitation_threshold: must be in (0, 1) (got '
                             f'{ad.excitation_threshold})')


@dataclass(frozen=True)
class ControllerParameters:
    """
    Feedback law, its gains and limits.

    Attributes
    ----------
    law : str
        ``'computed_torque'``: ``tau = M^(q)(qdd_d - Kd e_dot - Kp e - Ki int e) + c^ + g^ + f^``;
        ``'pd_gravity'``: ``tau = g^(q) - Kp e - Kd qd - Ki int e`` (torque-unit gains).
        ``e = q - q_d``.
    nominal : NominalModel
    kp, kd : tuple of 2 float
        Gains: for computed torque in 1/s^2 and 1/s; for pd_gravity in N·m/rad and
        N·m·s/rad. Either kp/kd or wn/zeta must be given (not both).
    wn, zeta : tuple of 2 float
        Per-joint natural frequency [rad/s] and damping ratio: ``kp = wn^2``,
        ``kd = 2 zeta wn`` (computed-torque error dynamics).
    ki : tuple of 2 float
        Integral gain (optional, default 0 = off) [1/s^3 or N·m/(rad·s)].
    integral_limit : tuple of 2 float
        Anti-windup clamp on the integral of the error [rad·s] (optional, default 0.5).
    joint_stiffness : tuple of 2 float
        Torque-unit position stiffness added to either law, ``-K e`` [N·m/rad], for joints
        whose own viscous damping dominates their inertia
        (:func:`manip_control.hold_design.damped_joint_stiffness`; optional, default 0 on
        every joint).
    joint_stiffness_limit : tuple of 2 float
        Largest torque the joint stiffness adds, ``|K e|`` clamped to it [N·m], > 0
        (:func:`manip_control.hold_design.damped_joint_stiffness_limit`; optional, default
        the torque limit).
    torque_limit : tuple of 2 float
        Command saturation [N·m], > 0.
    friction_compensation : bool
        Add the nominal friction ``f^(qd)`` to the command (optional, default true).
    adaptation : AdaptationParameters
        Adaptive computed torque (optional, default off).

    """

    law: str = 'computed_torque'
    nominal: NominalModel = field(default_factory=NominalModel)
    kp: tuple = (25.0, 16.0)
    kd: tuple = (10.0, 8.0)
    ki: tuple = _opt((0.0, 0.0))
    integral_limit: tuple = _opt((0.5, 0.5))
    joint_stiffness: tuple = _opt(())
    joint_stiffness_limit: tuple = _opt(())
    torque_limit: tuple = (89.0, 25.0)
    friction_compensation: bool = _opt(True)
    adaptation: AdaptationParameters = _opt(AdaptationParameters())

    def __post_init__(self):
        _validate_controller(self, 'controller')


def _validate_controller(co: ControllerParameters, path: str) -> None:
    _choice(f'{path}.law', co.law, ('computed_torque', 'pd_gravity'))
    _validate_nominal(co.nominal, f'{path}.nominal')
    n = co.nominal.n_joints
    _vector(f'{path}.kp', co.kp, n, check=_positive)
    _vector(f'{path}.kd', co.kd, n, check=_positive)
    _vector(f'{path}.ki', co.ki, n, check=_nonnegative)
    _vector(f'{path}.integral_limit', co.integral_limit, n, check=_nonnegative)
    if isinstance(co.joint_stiffness, tuple) and not co.joint_stiffness:
        # not given: none on any joint, however many the nominal model has
        object.__setattr__(co, 'joint_stiffness', (0.0,) * n)
    _vector(f'{path}.joint_stiffness', co.joint_stiffness, n, check=_nonnegative)
    _vector(f'{path}.torque_limit', co.torque_limit, n, check=_positive)
    if isinstance(co.joint_stiffness_limit, tuple) and not co.joint_stiffness_limit:
        # not given: the torque limit, no clamp of its own
        object.__setattr__(co, 'joint_stiffness_limit', tuple(co.torque_limit))
    _vector(f'{path}.joint_stiffness_limit', co.joint_stiffness_limit, n, check=_positive)
    if not isinstance(co.friction_compensation, bool):
        raise ParameterError(f'{path}.friction_compensation: must be true or false')
    if not isinstance(co.adaptation, AdaptationParameters):
        raise ParameterError(f'{path}.adaptation: must be a mapping')
    _validate_adaptation(co.adaptation, f'{path}.adaptation')
    if co.adaptation.enabled:
        if co.law != 'computed_torque':
            raise ParameterError(f'{path}.adaptation.enabled: the adaptive law replaces '
                                 f'computed torque; {path}.law must be computed_torque')
        if any(co.ki):
            raise ParameterError(f'{path}.adaptation.enabled: the adaptive law has no '
                                 f'integral term; set {path}.ki to 0')


def gains_from_frequency(wn, zeta) -> tuple[tuple[float, float], tuple[float, float]]:
    """
    Computed-torque gains ``kp = wn^2``, ``kd = 2 zeta wn`` per joint.

    Parameters
    ----------
    wn : sequence of 2 float
        Natural frequencies [rad/s], > 0.
    zeta : sequence of 2 float
        Damping ratios, > 0.

    """
    wn = _vector('wn', wn, check=_positive)
    zeta = _vector('zeta', zeta, check=_positive)
    return (tuple(w * w for w in wn), tuple(2.0 * z * w for w, z in zip(wn, zeta)))


@dataclass(frozen=True)
class Scenario:
    """
    One run: rates, duration, plant, controller and trajectory.

    Attributes
    ----------
    name : str
    duration : float
        Simulated time [s], > 0.
    control_rate : float
        Controller rate [Hz], > 0 (the plant's zero-order-hold period is its inverse).
    late_window_start : float
        Start of the "late window" for error bounds [s], >= 0 (optional, default 5).
    joints : tuple of 2 str
        Joint names (optional, default ``joint1``, ``joint2``).
    plant : PlantParameters
    controller : ControllerParameters
    trajectory : dict
        Trajectory description for :func:`manip_control.trajectories.trajectory_from_config`.

    """

    name: str = 'default'
    duration: float = 10.0
    control_rate: float = 1000.0
    late_window_start: float = _opt(5.0)
    joints: tuple = _opt(('joint1', 'joint2'))
    plant: PlantParameters = field(default_factory=PlantParameters)
    controller: ControllerParameters = field(default_factory=ControllerParameters)
    trajectory: dict = field(default_factory=lambda: {
        'type': 'sinusoid', 'amplitude': [0.5, 0.3], 'omega': [0.5, 0.5],
        'offset': [0.0, 0.0]})

    def __post_init__(self):
        rate = _positive('scenario.control_rate', self.control_rate)
        if _positive('scenario.duration', self.duration) * rate < 0.5:
            raise ParameterError(f'scenario.duration: must be at least one control period '
                                 f'({1.0 / rate:g} s) (got {self.duration:g})')

    @property
    def period(self) -> float:
        """Control period [s]."""
        return 1.0 / self.control_rate

    def with_duration(self, duration: Any, path: str = '--duration') -> 'Scenario':
        """Return this scenario with another duration, checked by :func:`check_duration`."""
        return dataclasses.replace(self, duration=check_duration(path, duration,
                                                                 self.control_rate))

    @property
    def n_ticks(self) -> int:
        """Return the number of control ticks in the run."""
        return int(round(self.duration * self.control_rate))

    def to_dict(self) -> dict:
        """
        Return the fully resolved scenario as plain YAML-able data (for load_scenario).

        Laid out like a scenario file: top-level ``scenario`` (name, duration, control_rate,
        late_window_start, joints), ``plant``, ``controller`` and ``trajectory``.
        """
        data = _plain(dataclasses.asdict(self))
        top = {k: data.pop(k) for k in _SCENARIO_KEYS}
        return {'scenario': top, **data}


_SCENARIO_KEYS = ('name', 'duration', 'control_rate', 'late_window_start', 'joints')


def check_duration(path: str, duration: Any, control_rate: float) -> float:
    """
    Check a run duration [s]: finite, at least one control period, at most one day.

    A duration shorter than one period (``1 / control_rate``) would run no tick at all.

    Raises
    ------
    ParameterError
        Naming ``path`` (e.g. ``scenario.duration`` or ``--duration``).

    """
    duration = _positive(path, duration)
    period = 1.0 / control_rate
    if duration * control_rate < 1.0 - 1e-9:
        raise ParameterError(f'{path}: must be at least one control period ({period:g} s at '
                             f'{control_rate:g} Hz) (got {duration:g})')
    check_plausible(path, duration, 'scenario', 'duration')
    return duration


_SCENARIO_REQUIRED = ('name', 'duration', 'control_rate')


def _plain(obj):
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    return obj


# --------------------------------------------------------------------------------------------
# building from mappings


def _build(cls, data: Any, path: str, sub: Mapping[str, Any] | None = None):
    """Build dataclass ``cls`` from ``data`` checking keys; ``sub`` converts nested fields."""
    required, optional = _field_names(cls)
    _mapping_keys(path, data, required, optional)
    kwargs = {}
    for key, value in data.items():
        if sub and key in sub:
            value = sub[key](value, f'{path}.{key}')
        elif isinstance(value, list):
            value = tuple(value)
        kwargs[key] = value
    try:
        obj = object.__new__(cls)
        for f in fields(cls):
            if f.name in kwargs:
                val = kwargs[f.name]
            elif f.default is not dataclasses.MISSING:
                val = f.default
            else:
                val = f.default_factory()
            object.__setattr__(obj, f.name, val)
    except TypeError as exc:  # pragma: no cover - defensive
        raise ParameterError(f'{path}: {exc}') from None
    return obj


def build_joint_list(cls, validate, section: str, value: Any, path: str, n: int) -> tuple:
    """Build and validate ``n`` per-joint dataclasses (friction, motors) from mappings."""
    if not isinstance(value, list) or len(value) != n:
        raise ParameterError(f'{path}: must be a list of {n} entries, one per joint')
    items = tuple(_build(cls, v, f'{path}[{k}]') for k, v in enumerate(value))
    for k, item in enumerate(items):
        validate(item, f'{path}[{k}]')
        _check_ranges(item, section, f'{path}[{k}]')
    return items


def _joint_list(cls, validate, section: str | None = None, any_length: bool = False):
    def convert(value, path):
        if not isinstance(value, list) or not value or (len(value) != 2 and not any_length):
            raise ParameterError(f'{path}: must be a list of 2 entries, one per joint')
        items = tuple(_build(cls, v, f'{path}[{k}]') for k, v in enumerate(value))
        for k, item in enumerate(items):
            validate(item, f'{path}[{k}]')
            if section is not None:
                _check_ranges(item, section, f'{path}[{k}]')
        return items
    return convert


def arm_from_dict(data: Any, path: str = 'arm') -> ArmParameters:
    """Build and validate :class:`ArmParameters` from a mapping."""
    arm = _build(ArmParameters, data, path)
    _validate_arm(arm, path)
    _check_ranges(arm, 'arm', path)
    return arm


def _sensors_from_dict(data, path):
    se = _build(SensorParameters, data, path)
    _validate_sensors(se, path)
    _check_ranges(se, 'sensors', path)
    return se


def nominal_from_dict(data: Any, path: str = 'nominal') -> NominalModel:
    """Build and validate a :class:`NominalModel` from a mapping."""
    nm = _build(NominalModel, data, path, {
        'arm': arm_from_dict,
        'friction': _joint_list(FrictionParameters, _validate_friction, 'friction', True)})
    _validate_nominal(nm, path)
    _check_ranges(nm, 'nominal', path)
    return nm


def payload_from_dict(data: Any, path: str = 'payload') -> PayloadParameters:
    """Build and validate :class:`PayloadParameters` from a mapping (plausible ranges too)."""
    pa = _build(PayloadParameters, data, path)
    _validate_payload(pa, path)
    _check_ranges(pa, 'payload', path)
    return pa


def plant_from_dict(data: Any, path: str = 'plant') -> PlantParameters:
    """Build and validate :class:`PlantParameters` from a mapping."""
    pl = _build(PlantParameters, data, path, {
        'arm': arm_from_dict,
        'friction': _joint_list(FrictionParameters, _validate_friction, 'friction'),
        'motors': _joint_list(MotorParameters, _validate_motor, 'motors'),
        'sensors': _sensors_from_dict,
        'payload': payload_from_dict})
    _validate_plant(pl, path)
    _check_ranges(pl, 'plant', path)
    return pl


def adaptation_from_dict(data: Any, path: str = 'adaptation') -> AdaptationParameters:
    """Build and validate :class:`AdaptationParameters` from a mapping."""
    ad = _build(AdaptationParameters, data, path)
    _validate_adaptation(ad, path)
    _check_ranges(ad, 'adaptation', path)
    return ad


def controller_from_dict(data: Any, path: str = 'controller') -> ControllerParameters:
    """Build and validate :class:`ControllerParameters`; accepts wn/zeta instead of kp/kd."""
    if isinstance(data, Mapping) and ('wn' in data or 'zeta' in data):
        data = dict(data)
        if 'kp' in data or 'kd' in data:
            raise ParameterError(f'{path}: give either kp/kd or wn/zeta, not both')
        if 'wn' not in data or 'zeta' not in data:
            missing = 'wn' if 'wn' not in data else 'zeta'
            raise ParameterError(f'{path}.{missing}: missing (wn and zeta go together)')
        wn = _vector(f'{path}.wn', data.pop('wn'), check=_positive)
        zeta = _vector(f'{path}.zeta', data.pop('zeta'), check=_positive)
        check_plausible(f'{path}.wn', wn, 'controller', 'wn')
        check_plausible(f'{path}.zeta', zeta, 'controller', 'zeta')
        data['kp'], data['kd'] = gains_from_frequency(wn, zeta)
    for name, none in (('joint_stiffness', '0 for none'),
                       ('joint_stiffness_limit', 'in N m')):
        if isinstance(data, Mapping) and isinstance(data.get(name), (list, tuple)) \
                and not data[name]:
            raise ParameterError(f'{path}.{name}: an empty list (give one value per joint, '
                                 f'{none}, or leave it out)')
    co = _build(ControllerParameters, data, path, {'nominal': nominal_from_dict,
                                                   'adaptation': adaptation_from_dict})
    _validate_controller(co, path)
    _check_ranges(co, 'controller', path)
    return co


def scenario_from_dict(data: Any, path: str = '') -> Scenario:
    """
    Build and validate a :class:`Scenario` from a mapping (the YAML document).

    Top-level keys: ``scenario`` (name, duration, control_rate, late_window_start, joints),
    ``plant``, ``controller``, ``trajectory``; each may be omitted to use the defaults.
    """
    if data is None:
        data = {}
    _mapping_keys(path or '<root>', data, set(),
                  {'scenario', 'plant', 'controller', 'trajectory'})
    top = data.get('scenario', {})
    if not isinstance(top, Mapping):
        raise ParameterError('scenario: must be a mapping')
    unknown = sorted(set(top) - set(_SCENARIO_KEYS), key=str)
    if unknown:
        raise ParameterError(f'scenario.{unknown[0]}: unknown parameter')
    if 'scenario' in data:  # a given section must have its required keys (loading rules)
        missing = [k for k in _SCENARIO_REQUIRED if k not in top]
        if missing:
            raise ParameterError(f'scenario.{missing[0]}: missing required parameter')
    base = Scenario()
    name = top.get('name', base.name)
    if not isinstance(name, str) or not name:
        raise ParameterError(f'scenario.name: must be a non-empty string (got {name!r})')
    rate = _positive('scenario.control_rate', top.get('control_rate', base.control_rate))
    check_plausible('scenario.control_rate', rate, 'scenario', 'control_rate')
    duration = check_duration('scenario.duration', top.get('duration', base.duration), rate)
    late = _nonnegative('scenario.late_window_start',
                        top.get('late_window_start', base.late_window_start))
    joints = top.get('joints', list(base.joints))
    if (not isinstance(joints, (list, tuple)) or len(joints) != 2
            or not all(isinstance(j, str) and j for j in joints) or joints[0] == joints[1]):
        raise ParameterError(f'scenario.joints: must be 2 distinct non-empty names '
                             f'(got {joints!r})')
    plant = plant_from_dict(data['plant']) if 'plant' in data else PlantParameters()
    controller = (controller_from_dict(data['controller']) if 'controller' in data
                  else ControllerParameters())
    if controller.nominal.n_joints != 2:
        raise ParameterError(f'controller.nominal.friction: must be a list of 2 entries, one '
                             f'per joint of the planar 2R (got {controller.nominal.n_joints})')
    trajectory = data.get('trajectory', base.trajectory)
    if not isinstance(trajectory, Mapping):
        raise ParameterError('trajectory: must be a mapping')
    # Validate the trajectory description now so a bad file fails at load time.
    try:
        trajectory_from_config(dict(trajectory), 2)
    except TrajectoryError as exc:
        raise ParameterError(str(exc)) from None
    return Scenario(name=name, duration=duration, control_rate=rate, late_window_start=late,
                    joints=tuple(joints), plant=plant, controller=controller,
                    trajectory=_plain(dict(trajectory)))


CONFIG_DIR_NAME = 'config'


def config_search_path() -> list[Path]:
    """
    Directories searched for preset files, in order.

    The installed share directory (ament index, or ``<prefix>/share/manip_control/config``
    for a pip install) and the source checkout's ``config/``.
    """
    dirs = []
    try:
        from ament_index_python.packages import get_package_share_directory
        dirs.append(Path(get_package_share_directory('manip_control')) / CONFIG_DIR_NAME)
    except Exception:  # noqa: BLE001 - ament index absent or package not installed there
        pass
    dirs.append(Path(sys.prefix) / 'share' / 'manip_control' / CONFIG_DIR_NAME)
    dirs.append(Path(__file__).resolve().parent.parent / CONFIG_DIR_NAME)
    return dirs


def resolve_config(name_or_path: str | Path) -> Path:
    """Find a scenario file: an existing path, or a preset name such as ``seed001``."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    candidates = [path.name] if path.suffix else [f'{path.name}.yaml', path.name]
    for directory in config_search_path():
        for cand in candidates:
            if (directory / cand).is_file():
                return directory / cand
    raise ParameterError(f'config: no such file or preset {str(name_or_path)!r}')


def load_scenario(source: str | Path | Mapping | None = None) -> Scenario:
    """
    Load and validate a scenario from a YAML file, a preset name or a mapping.

    ``None`` gives the default scenario (preset ``default``).
    """
    if isinstance(source, Mapping):
        return scenario_from_dict(source)
    return scenario_from_dict(read_yaml(resolve_config('default' if source is None
                                                       else source)))


class YamlLoader(yaml.SafeLoader):
    """
    PyYAML's safe loader that also reads YAML 1.2 floats: ``1.0e9``, ``1e-3``, ``2E+5``.

    PyYAML resolves plain scalars by YAML 1.1, where an exponent needs a dot and a sign; a
    ``1.0e9`` would be the string ``'1.0e9'``. ROS (rcl's parameter parser) and YAML 1.2 read
    it as a number, and so does this loader.
    """


YamlLoader.add_implicit_resolver(
    'tag:yaml.org,2002:float',
    re.compile(r'^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$'),
    list('-+0123456789.'))


def yaml_load(text: str) -> Any:
    """Parse YAML text with :class:`YamlLoader` (YAML 1.2 floats)."""
    return yaml.load(text, Loader=YamlLoader)  # noqa: S506 - a SafeLoader subclass


def read_yaml(path: Path, what: str = 'config') -> Any:
    """
    Parse a YAML file (YAML 1.2 floats, see :class:`YamlLoader`).

    Unreadable, invalid or empty (comment-only) files raise ParameterError naming the file.
    """
    try:
        text = Path(path).read_text()
        data = yaml_load(text)
    except yaml.YAMLError as exc:
        first = ' '.join(str(exc).split())
        raise ParameterError(f'{what} {path}: not valid YAML ({first})') from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, 'strerror', None) or str(exc)
        raise ParameterError(f'{what} {path}: cannot read ({reason})') from None
    if data is None:
        raise ParameterError(f'{what} {path}: empty (no settings, only comments or blank '
                             'lines); give at least one section')
    return data
