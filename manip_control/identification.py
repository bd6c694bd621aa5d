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
Least-squares identification of the 2R arm's dynamic parameters from recorded runs.

The rigid-body dynamics plus joint friction are linear in a set of base parameters
(:mod:`manip_control.dynamics`, :mod:`manip_control.friction`)::

    tau = M(q) qdd + C(q, qd) qd + g(q) + f(qd) = Y(q, qd, qdd) theta

    theta = [a, b, d, Jr2, G1, G2, bv1, tc1, bv2, tc2]
    a  = I1 + I2 + m1 lc1^2 + m2 (l1^2 + lc2^2) + Jr1      [kg m^2]
    b  = m2 l1 lc2                                          [kg m^2]
    d  = I2 + m2 lc2^2                                      [kg m^2]
    Jr2 = reflected rotor inertia of joint 2 (M22 = d + Jr2) [kg m^2]
    G1 = (m1 lc1 + m2 l1) g0,  G2 = m2 lc2 g0               [N m]
    bv_j, tc_j = viscous [N m s/rad] and Coulomb [N m] friction of joint j

with ``c2 = cos q2``, ``s2 = sin q2``, ``C1 = cos q1``, ``C12 = cos(q1 + q2)``,
``T_j = tanh(qd_j / eps_j)`` (the Coulomb smoothing ``eps`` is assumed known)::

    Y = [[qdd1, 2 c2 qdd1 + c2 qdd2 - s2 (2 qd1 qd2 + qd2^2), qdd2,        0,    C1, C12,
          qd1, T1, 0,   0 ],
         [0,    c2 qdd1 + s2 qd1^2,                          qdd1 + qdd2, qdd2, 0,  C12,
          0,   0,  qd2, T2]]

Every column is independent for a trajectory that moves both joints through a range of q2
(joint 2's torque sees ``d + Jr2`` on ``qdd2`` while joint 1's sees ``d``, so ``d`` and
``Jr2`` separate). ``Jr1`` is not separable from ``I1``: both only appear in ``a``. In the
horizontal plane (g0 = 0) the G columns are dropped.

The physical model adds one relation the free regressor does not know: ``b / l1 = G2 / g0
= m2 lc2``. For the nominal model the data are therefore fitted a second time with that
constraint (``phi = [a, m2 lc2, d, Jr2, m1 lc1 + m2 l1, bv1, tc1, bv2, tc2]``, with the
known ``l1`` and ``g0``) and ``phi`` is mapped to physical parameters by
:func:`nominal_from_estimate` (the lengths kept, the prior's centre-of-mass distances kept
when they are consistent, ``Jr1`` lumped into ``I1``). That nominal model reproduces the
constrained estimate's M, c and g exactly.

Acceleration and filtering ("parallel filtering"): with ``F`` a zero-phase Butterworth
low-pass (``scipy.signal.sosfiltfilt``, default 5 Hz) and ``D`` the central difference,
``q_f = F q``, ``qd_f = F qd``, ``qdd_f = D qd_f``; then the same ``F`` is applied to both
sides, ``F[Y(q_f, qd_f, qdd_f)] theta = F[tau]``, which keeps them consistent where ``Y`` is
sharp (Coulomb friction at velocity reversals). Ends (filter transients, ``5 / fc``) are
trimmed and the rows decimated to about ``4 fc``.

Estimator: ordinary least squares, then weighted least squares with each joint's rows
divided by its OLS residual standard deviation. Standard errors are
``sqrt(diag(sigma^2 (Y^T W Y)^-1))``; they treat the (filtered, decimated) residuals as
white, so they are indicative, not rigorous.

Excitation check: the condition number of the regressor with its columns scaled to unit
norm (unit-free, it measures how close the columns are to being linearly dependent). Above
``max_condition`` (default 100) the identification refuses and names the worst-excited
combination of parameters.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from dataclasses import field
import math
from pathlib import Path
import sys
from typing import Sequence

from manip_control.arm_identification import main_urdf
from manip_control.bag_io import BagError
from manip_control.bag_io import BagWriter
from manip_control.bag_io import JOINT_STATE
from manip_control.bag_io import make_qos
from manip_control.bag_io import read_params
from manip_control.identification_data import BASE_NAMES
from manip_control.identification_data import base_parameters  # noqa: F401 - re-exported
from manip_control.identification_data import BASE_UNITS
from manip_control.identification_data import IdentificationError
from manip_control.identification_data import JOINT_STATES_TOPIC
from manip_control.identification_data import nominal_from_estimate
from manip_control.identification_data import nominal_to_dict
from manip_control.identification_data import physical_from_base  # noqa: F401 - re-exported
from manip_control.identification_data import Prepared
from manip_control.identification_data import read_joint_states
from manip_control.identification_data import regressor
from manip_control.identification_data import resample_uniform
from manip_control.parameters import load_scenario
from manip_control.parameters import NominalModel
from manip_control.parameters import ParameterError
from manip_control.parameters import Scenario
from manip_control.simulation import run_closed_loop
import numpy as np
from rosbags.typesys import get_typestore
from rosbags.typesys import Stores
from scipy.signal import butter
from scipy.signal import sosfiltfilt
import yaml

#: Names of the physically constrained parameters ``phi``.
PHYS_NAMES = ('a', 'm2lc2', 'd', 'Jr2', 'm1lc1+m2l1', 'bv1', 'tc1', 'bv2', 'tc2')
PHYS_UNITS = ('kg m^2', 'kg m', 'kg m^2', 'kg m^2', 'kg m', 'N m s/rad', 'N m', 'N m s/rad',
              'N m')
_GRAVITY_COLUMNS = (4, 5)

DEFAULT_CUTOFF_HZ = 5.0
DEFAULT_MAX_CONDITION = 100.0


# --------------------------------------------------------------------------------------------
# model side


def constraint_matrix(l1: float, g0: float) -> np.ndarray:
    """``T`` with ``theta = T phi`` (``b = l1 m2lc2``, ``G2 = g0 m2lc2``, ``G1 = g0 p1``)."""
    t = np.zeros((len(BASE_NAMES), len(PHYS_NAMES)))
    t[0, 0] = 1.0            # a
    t[1, 1] = l1             # b = l1 * m2 lc2
    t[5, 1] = g0             # G2 = g0 * m2 lc2
    t[2, 2] = 1.0            # d
    t[3, 3] = 1.0            # Jr2
    t[4, 4] = g0             # G1 = g0 * (m1 lc1 + m2 l1)
    for k in range(4):       # friction
        t[6 + k, 5 + k] = 1.0
    return t


# --------------------------------------------------------------------------------------------
# signal processing


def prepare(t, q, qd, tau, *, eps: Sequence[float] = (0.01, 0.01),
            cutoff_hz: float = DEFAULT_CUTOFF_HZ, order: int = 4, trim_s: float | None = None,
            velocity: str = 'measured') -> Prepared:
    """
    Filter the regressor and the torque alike ("parallel filtering").

    With ``F`` a zero-phase Butterworth low-pass (``sosfiltfilt``) and ``D`` the central
    difference: ``q_f = F q``, ``qd_f = F qd`` (or ``D q_f`` with ``velocity='position'``),
    ``qdd_f = D qd_f``; then both sides of ``Y theta = tau`` get the same filter:
    ``F[Y(q_f, qd_f, qdd_f)] theta = F[tau]``. The second pass keeps the two sides
    consistent where the regressor is nonlinear and sharp (the Coulomb ``tanh`` at velocity
    reversals), and removes the residual noise of ``qdd_f``.

    Parameters
    ----------
    t : array_like, shape (N,)
        Sample times [s] (uniform; jitter above 1 % of the period is interpolated away).
    q, qd, tau : array_like, shape (N, 2)
        Measured joint position [rad], velocity [rad/s] and applied joint torque [N m].
        ``qd`` may be None with ``velocity='position'``.
    eps : sequence of 2 float
        Coulomb smoothing velocities [rad/s].
    cutoff_hz : float
        Butterworth cutoff [Hz]: about 5-10x the excitation's highest frequency and below the
        Nyquist frequency.
    order : int
        Butterworth order (the forward-backward pass doubles it).
    trim_s : float, optional
        Time dropped at both ends (filter transients) [s]; default ``5 / cutoff_hz``.
    velocity : str
        ``'measured'`` (filter the recorded velocity) or ``'position'`` (differentiate the
        filtered position; for recordings without or with poor velocity).

    """
    if velocity not in ('measured', 'position'):
        raise IdentificationError(f"velocity: must be 'measured' or 'position' "
                                  f'(got {velocity!r})')
    t = np.asarray(t, dtype=float).ravel()
    if qd is None:
        if velocity == 'measured':
            raise IdentificationError('the data have no velocity; use velocity=position')
        qd = np.zeros((t.size, 2))
    arrays = [np.asarray(x, dtype=float) for x in (q, qd, tau)]
    for name, a in zip(('q', 'qd', 'tau'), arrays):
        if a.shape != (t.size, 2):
            raise IdentificationError(f'{name}: expected shape ({t.size}, 2), got {a.shape}')
        if not np.all(np.isfinite(a)):
            raise IdentificationError(f'{name}: contains non-finite values')
    if t.size < 50:
        raise IdentificationError(f'too few samples ({t.size}); need a run of several '
                                  'seconds at the control rate')
    for j in range(2):
        if not np.any(arrays[2][:, j]):
            raise IdentificationError(f'the torque (effort) of joint {j + 1} is zero '
                                      'throughout: the recording carries no applied torque')
    t, arrays, h = resample_uniform(t, arrays)
    fs = 1.0 / h
    if not 0.0 < cutoff_hz < 0.5 * fs:
        raise IdentificationError(f'cutoff {cutoff_hz} Hz must be in (0, {0.5 * fs:g}) Hz '
                                  f'(Nyquist of the {fs:g} Hz samples)')
    trim_s = 5.0 / cutoff_hz if trim_s is None else float(trim_s)
    trim = int(math.ceil(trim_s * fs))
    step = max(1, int(fs // (4.0 * cutoff_hz)))
    sl = slice(trim, t.size - trim, step)
    if t[sl].size < 20:
        raise IdentificationError(f'run too short ({t[-1] - t[0]:.3g} s) after trimming '
                                  f'{trim_s:g} s of filter transient at each end')
    q, qd, tau = arrays
    sos = butter(order, cutoff_hz, fs=fs, output='sos')
    q_f = sosfiltfilt(sos, q, axis=0)
    if velocity == 'position':
        qd_f = np.gradient(q_f, h, axis=0)
    else:
        qd_f = sosfiltfilt(sos, qd, axis=0)
    qdd_f = np.gradient(qd_f, h, axis=0)
    y = sosfiltfilt(sos, regressor(q_f, qd_f, qdd_f, eps), axis=0)
    tau_f = sosfiltfilt(sos, tau, axis=0)
    return Prepared(t[sl], y[sl], tau_f[sl], q_f[sl], qd_f[sl], qdd_f[sl], fs, cutoff_hz)


# --------------------------------------------------------------------------------------------
# estimation


@dataclass
class LeastSquaresFit:
    """One (weighted) least-squares fit ``tau = Y theta``."""

    names: tuple
    units: tuple
    estimate: np.ndarray
    std_error: np.ndarray
    condition_number: float
    residual_rms: np.ndarray
    """Per-joint RMS of the unweighted residual [N m]."""
    relative_residual: np.ndarray
    """Per-joint ``||tau - Y theta|| / ||tau||``."""
    weakest: str
    """The worst-excited parameter combination (smallest singular direction)."""

    def table(self) -> str:
        """Aligned text table: name, estimate, standard error, relative standard error."""
        lines = [f'{"parameter":<12} {"estimate":>13} {"std error":>11} {"rel":>8}  unit']
        for n, u, v, s in zip(self.names, self.units, self.estimate, self.std_error):
            rel = f'{100 * s / abs(v):7.3f}%' if v != 0 else '     n/a'
            lines.append(f'{n:<12} {v:13.6g} {s:11.3g} {rel:>8}  {u}')
        return '\n'.join(lines)


def _weakest(vt_row: np.ndarray, names) -> str:
    order = np.argsort(-np.abs(vt_row))
    terms = [f'{vt_row[k]:+.2f}*{names[k]}' for k in order[:3] if abs(vt_row[k]) > 0.1]
    return ' '.join(terms)


def _fit(y: np.ndarray, tau: np.ndarray, names, units) -> LeastSquaresFit:
    """OLS then per-joint weighted LS on rows ``y`` (N, 2, p), ``tau`` (N, 2)."""
    n, _, p = y.shape
    y2 = y.reshape(2 * n, p)
    t2 = tau.reshape(2 * n)
    norms = np.linalg.norm(y2, axis=0)
    dead = [names[k] for k in range(p) if norms[k] == 0.0]
    if dead:
        raise IdentificationError(f'the data do not excite {", ".join(dead)} at all '
                                  '(regressor column is zero)')
    ys = y2 / norms
    sv = np.linalg.svd(ys, compute_uv=False)
    cond = float(sv[0] / sv[-1]) if sv[-1] > 0 else math.inf
    theta, *_ = np.linalg.lstsq(y2, t2, rcond=None)
    res = (t2 - y2 @ theta).reshape(n, 2)
    sigma = np.sqrt(np.mean(res ** 2, axis=0))
    sigma = np.where(sigma > 0, sigma, 1.0)
    w = np.tile(1.0 / sigma, n)
    yw, tw = y2 * w[:, None], t2 * w
    theta, *_ = np.linalg.lstsq(yw, tw, rcond=None)
    rw = tw - yw @ theta
    dof = max(1, yw.shape[0] - p)
    s2 = float(rw @ rw) / dof
    ysw = yw / np.linalg.norm(yw, axis=0)
    _, _, vt = np.linalg.svd(ysw, full_matrices=False)
    cov = s2 * np.linalg.pinv(yw.T @ yw)
    res = (t2 - y2 @ theta).reshape(n, 2)
    rel = np.linalg.norm(res, axis=0) / np.maximum(np.linalg.norm(tau, axis=0), 1e-300)
    return LeastSquaresFit(tuple(names), tuple(units), theta, np.sqrt(np.diag(cov)), cond,
                           np.sqrt(np.mean(res ** 2, axis=0)), rel, _weakest(vt[-1], names))


@dataclass
class IdentificationResult:
    """Free base-parameter fit, physically constrained fit and the data used."""

    base: LeastSquaresFit
    """Fit of the free base parameters :data:`BASE_NAMES` (without G1, G2 if g0 = 0)."""
    physical: LeastSquaresFit
    """Fit of ``phi`` (:data:`PHYS_NAMES`) with ``b = l1 m2lc2``, ``G2 = g0 m2lc2``."""
    l1: float
    g0: float
    eps: tuple
    prepared: Prepared = field(repr=False)

    @property
    def theta(self) -> np.ndarray:
        """Return the free base-parameter estimate as a 10-vector (G1 = G2 = 0 if g0 = 0)."""
        return _expand(self.base.estimate, self.g0)

    @property
    def consistency(self) -> float:
        """Relative disagreement of ``m2 lc2`` from ``b / l1`` and from ``G2 / g0``."""
        if self.g0 <= 0.0:
            return 0.0
        th = self.theta
        p_b, p_g = th[1] / self.l1, th[5] / self.g0
        return abs(p_b - p_g) / max(abs(p_g), 1e-300)


def _expand(est: np.ndarray, g0: float) -> np.ndarray:
    if g0 > 0.0:
        return np.asarray(est, dtype=float)
    full = np.zeros(len(BASE_NAMES))
    keep = [k for k in range(len(BASE_NAMES)) if k not in _GRAVITY_COLUMNS]
    full[keep] = est
    return full


def identify(t, q, qd, tau, *, l1: float, g0: float, eps: Sequence[float] = (0.01, 0.01),
             cutoff_hz: float = DEFAULT_CUTOFF_HZ, max_condition: float = DEFAULT_MAX_CONDITION,
             trim_s: float | None = None, velocity: str = 'measured') -> IdentificationResult:
    """
    Estimate the base parameters from a recorded run.

    Parameters
    ----------
    t : array_like, shape (N,)
        Sample times [s].
    q, qd : array_like, shape (N, 2)
        Measured joint position [rad] and velocity [rad/s].
    tau : array_like, shape (N, 2)
        Applied (actuator) joint torque [N m] -- not the command, when they differ.
    l1 : float
        Known length of link 1 [m] (for the constrained fit).
    g0 : float
        Gravity [m/s^2] along -y of the arm plane; 0 for a horizontal arm.
    eps : sequence of 2 float
        Coulomb smoothing velocity per joint [rad/s] (assumed known).
    cutoff_hz, trim_s, velocity
        See :func:`prepare`.
    max_condition : float
        Refuse when the column-scaled regressor's condition number exceeds this.

    Raises
    ------
    IdentificationError
        Bad or too little data, or the data do not excite the parameters.

    """
    if not (l1 > 0.0 and math.isfinite(l1)):
        raise IdentificationError(f'l1: must be > 0 (got {l1})')
    if not (g0 >= 0.0 and math.isfinite(g0)):
        raise IdentificationError(f'g0: must be >= 0 (got {g0})')
    eps = tuple(float(e) for e in eps)
    if len(eps) != 2 or not all(e > 0.0 for e in eps):
        raise IdentificationError(f'eps: must be 2 values > 0 (got {eps})')
    prep = prepare(t, q, qd, tau, eps=eps, cutoff_hz=cutoff_hz, trim_s=trim_s,
                   velocity=velocity)
    y = prep.y
    tmat = constraint_matrix(l1, g0)
    if g0 > 0.0:
        y_base, names, units = y, BASE_NAMES, BASE_UNITS
        y_phys, pnames, punits = y @ tmat, PHYS_NAMES, PHYS_UNITS
    else:
        keep = [k for k in range(len(BASE_NAMES)) if k not in _GRAVITY_COLUMNS]
        y_base = y[:, :, keep]
        names = tuple(BASE_NAMES[k] for k in keep)
        units = tuple(BASE_UNITS[k] for k in keep)
        pkeep = [k for k in range(len(PHYS_NAMES)) if k != 4]   # m1lc1+m2l1 unobservable
        y_phys = (y @ tmat)[:, :, pkeep]
        pnames = tuple(PHYS_NAMES[k] for k in pkeep)
        punits = tuple(PHYS_UNITS[k] for k in pkeep)
    base = _fit(y_base, prep.tau, names, units)
    if not base.condition_number <= max_condition:
        raise IdentificationError(
            f'the data do not excite the parameters: regressor condition number '
            f'{base.condition_number:.3g} > {max_condition:g} (columns scaled to unit norm); '
            f'worst-determined combination {base.weakest}. Record an excitation run '
            '(e.g. config/excitation.yaml) that moves both joints over a wide range of q2 '
            'with varied speeds and accelerations')
    phys = _fit(y_phys, prep.tau, pnames, punits)
    return IdentificationResult(base, phys, float(l1), float(g0), eps, prep)


# --------------------------------------------------------------------------------------------
# mapping to a physical nominal model


def scenario_with_nominal(scenario: Scenario, nominal: NominalModel) -> dict:
    """Return the scenario's plain data with ``controller.nominal`` replaced."""
    data = scenario.to_dict()
    data['controller']['nominal'] = nominal_to_dict(nominal)
    return data


# --------------------------------------------------------------------------------------------
# bags


def write_joint_states_bag(result, path: str | Path, joints: Sequence[str] = ('joint1',
                                                                              'joint2'),
                           topic: str = JOINT_STATES_TOPIC, storage: str = 'mcap',
                           params: dict | None = None) -> Path:
    """
    Record a :class:`~manip_control.simulation.SimulationResult` as ``/joint_states``.

    Same contract as the ROS recorder: ``sensor_msgs/JointState`` with header stamp ``t_k``,
    position and velocity the *measured* state and effort the actual actuator torque,
    serialized with the ROS 2 Jazzy typestore and written through
    :class:`manip_control.bag_io.BagWriter` (with ``params.yaml`` = the scenario).
    """
    store = get_typestore(Stores.ROS2_JAZZY)
    types = store.types
    JointState = types['sensor_msgs/msg/JointState']
    Header = types['std_msgs/msg/Header']
    Time = types['builtin_interfaces/msg/Time']
    names = list(joints)
    writer = BagWriter(path, storage=storage)
    with writer:
        writer.add_topic(topic, JOINT_STATE, qos=make_qos('reliable', 'volatile', depth=10))
        writer.write_params(params if params is not None else result.scenario.to_dict())
        serialize = store.serialize_cdr
        for k in range(len(result.t)):
            ns = int(round(result.t[k] * 1e9))
            msg = JointState(header=Header(stamp=Time(sec=ns // 1_000_000_000,
                                                      nanosec=ns % 1_000_000_000),
                                           frame_id=''),
                             name=names, position=result.q_meas[k].copy(),
                             velocity=result.qd_meas[k].copy(),
                             effort=result.tau_joint[k].copy())
            writer.write(topic, ns, serialize(msg, JOINT_STATE))
    return Path(path)


# --------------------------------------------------------------------------------------------
# command line


def _format_nominal(nm: NominalModel) -> str:
    a = nm.arm
    return (f'  arm: m1={a.m1:.6g} kg, m2={a.m2:.6g} kg, l1={a.l1:g} m, l2={a.l2:g} m, '
            f'lc1={a.lc1:.6g} m, lc2={a.lc2:.6g} m, I1={a.I1:.6g} kg m^2, I2={a.I2:.6g} kg m^2\n'
            f'  rotor_inertia: [{nm.rotor_inertia[0]:.6g}, {nm.rotor_inertia[1]:.6g}] kg m^2\n'
            f'  friction: b=[{nm.friction[0].b:.6g}, {nm.friction[1].b:.6g}] N m s/rad, '
            f'tau_c=[{nm.friction[0].tau_c:.6g}, {nm.friction[1].tau_c:.6g}] N m, '
            f'eps=[{nm.friction[0].eps:g}, {nm.friction[1].eps:g}] rad/s')


def _summary_comment(res: IdentificationResult, source: str) -> str:
    lines = [f'Identified by manip-identify from {source}',
             f'regressor condition number {res.base.condition_number:.4g} (columns scaled), '
             f'relative residual joint1 {res.base.relative_residual[0]:.3g}, '
             f'joint2 {res.base.relative_residual[1]:.3g}',
             'base parameters (estimate +- standard error):']
    lines += ['  ' + ln for ln in res.base.table().splitlines()]
    return ''.join(f'# {ln}\n' for ln in lines)


def _dump_yaml(path: Path, data: dict, comment: str) -> None:
    text = comment + yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=99)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding='utf-8')
    except OSError as exc:
        raise IdentificationError(f'{path}: cannot write ({exc.strerror})') from None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog='manip-identify',
        description='Least-squares identification of the 2R arm dynamic parameters (inertia, '
                    'gravity, viscous + Coulomb friction) from the /joint_states of a '
                    'rosbag2 recording (position, velocity, effort = actual joint torque). '
                    'Writes a controller section with the identified nominal model. With '
                    '--urdf FILE: any serial arm, its base inertial parameters, armature and '
                    'friction; writes the identified URDF and a parameters file.')
    p.add_argument('bag', help='rosbag2 directory or .mcap/.db3 file')
    p.add_argument('--scenario', metavar='NAME|FILE',
                   help='prior scenario: link lengths, gravity, Coulomb eps, preferred CoM '
                        'distances and the controller the result is written into (default: '
                        "the bag's params.yaml if it holds a scenario, else 'default'); its "
                        'plant section is never used')
    p.add_argument('--topic', default=JOINT_STATES_TOPIC, help='joint state topic')
    p.add_argument('--urdf', metavar='FILE',
                   help='identify the arm described by this URDF (.urdf or .xacro) instead '
                        'of the 2R scenario model')
    p.add_argument('--urdf-from-bag', action='store_true',
                   help='like --urdf, with the URDF recorded on /robot_description in BAG')
    p.add_argument('--joints', nargs='+', metavar='NAME',
                   help="joint names (default: the scenario's; with --urdf the URDF's trunk)")
    p.add_argument('--gravity', nargs=3, type=float, metavar=('X', 'Y', 'Z'),
                   default=(0.0, 0.0, -9.81),
                   help='with --urdf: gravity in the URDF root frame [m/s^2] '
                        '(default 0 0 -9.81)')
    p.add_argument('--eps', type=float, default=0.01, metavar='RAD_S',
                   help='with --urdf: Coulomb smoothing velocity of tanh(qd/eps) '
                        '(default 0.01 rad/s)')
    p.add_argument('--torque-offset', type=float, default=0.0, metavar='S',
                   help='with --urdf: when the effort stamped t acts, relative to t [s]: 0 '
                        'for a measured torque, -T/2 for a command held over the period '
                        'before the stamp (default 0)')
    p.add_argument('--armature', type=float, nargs='+', default=[0.0], metavar='KG_M2',
                   help='with --urdf: prior reflected rotor inertia per joint (one value or '
                        'one per joint; default 0)')
    p.add_argument('--cutoff', type=float, default=DEFAULT_CUTOFF_HZ, metavar='HZ',
                   help='zero-phase low-pass cutoff for the filtered derivative '
                        f'(default {DEFAULT_CUTOFF_HZ:g} Hz)')
    p.add_argument('--max-condition', type=float, default=None,
                   help='refuse above this regressor condition number '
                        f'(default {DEFAULT_MAX_CONDITION:g}; with --urdf 1000)')
    p.add_argument('--velocity', choices=('measured', 'position'), default='measured',
                   help='use the recorded velocity or differentiate the position')
    p.add_argument('--out', default=None, metavar='FILE',
                   help='controller section with the identified nominal model '
                        '(default identified_nominal.yaml); with --urdf the identified URDF '
                        '(default identified.urdf; its parameters go to the same name with '
                        '.yaml)')
    p.add_argument('--write-scenario', metavar='FILE',
                   help='also write the full prior scenario with the identified nominal model')
    p.add_argument('--record', metavar='CONFIG',
                   help='first simulate scenario CONFIG offline and record its /joint_states '
                        'into BAG (which must not exist), then identify from it')
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """``manip-identify`` entry point; returns the exit code (2 on any error)."""
    args = build_parser().parse_args(argv)
    if args.urdf or args.urdf_from_bag:
        return main_urdf(args)
    if args.out is None:
        args.out = 'identified_nominal.yaml'
    if args.max_condition is None:
        args.max_condition = DEFAULT_MAX_CONDITION
    try:
        if args.cutoff <= 0 or not math.isfinite(args.cutoff):
            raise IdentificationError(f'--cutoff: must be > 0 (got {args.cutoff})')
        if args.record:
            if Path(args.bag).exists():
                raise IdentificationError(f'{args.bag}: exists; --record writes a new bag')
            rec_scenario = load_scenario(args.record)
            print(f'recording {rec_scenario.name} ({rec_scenario.duration:g} s) offline '
                  f'into {args.bag}')
            write_joint_states_bag(run_closed_loop(rec_scenario), args.bag,
                                   rec_scenario.joints)
        prior_src = args.scenario
        prior = None
        if prior_src is None:
            params = read_params(args.bag) if Path(args.bag).exists() else None
            if isinstance(params, dict):
                try:
                    prior = load_scenario(params)
                    prior_src = f"{args.bag}'s params.yaml"
                except ParameterError:
                    prior = None
            if prior is None:
                prior_src = 'default'
        if prior is None:
            prior = load_scenario(prior_src)
        if args.joints and len(args.joints) != 2:
            raise IdentificationError(f'--joints: the 2R takes 2 names (got '
                                      f'{len(args.joints)}); for other arms give --urdf')
        joints = tuple(args.joints) if args.joints else prior.joints
        data = read_joint_states(args.bag, joints, args.topic)
        velocity = args.velocity
        if data.qd is None and velocity == 'measured':
            print(f'note: {args.topic} has no velocity; differentiating the position')
            velocity = 'position'
        nm0 = prior.controller.nominal
        eps = (nm0.friction[0].eps, nm0.friction[1].eps)
        g0 = nm0.arm.gravity
        print(f'{args.bag}: {args.topic}, {len(data.t)} samples over {data.t[-1]:.3f} s; '
              f'prior {prior_src} (l1 = {nm0.arm.l1:g} m, l2 = {nm0.arm.l2:g} m, '
              f'g0 = {g0:g} m/s^2, eps = {eps[0]:g}/{eps[1]:g} rad/s)')
        res = identify(data.t, data.q, data.qd, data.tau, l1=nm0.arm.l1, g0=g0, eps=eps,
                       cutoff_hz=args.cutoff, max_condition=args.max_condition,
                       velocity=velocity)
        print(f'\nregressor condition number {res.base.condition_number:.4g} '
              f'(columns scaled to unit norm; limit {args.max_condition:g})')
        print(f'fit residual RMS joint1 {res.base.residual_rms[0]:.4g} N m '
              f'({100 * res.base.relative_residual[0]:.3g} % of the torque), '
              f'joint2 {res.base.residual_rms[1]:.4g} N m '
              f'({100 * res.base.relative_residual[1]:.3g} %)')
        print('\nbase parameters (free fit, standard errors assume white residuals):')
        print(res.base.table())
        if g0 > 0:
            print(f'\nconsistency: m2*lc2 from b/l1 and from G2/g0 differ by '
                  f'{100 * res.consistency:.3g} %')
        print('\nphysically constrained fit (b = l1 m2lc2, G2 = g0 m2lc2):')
        print(res.physical.table())
        nominal = nominal_from_estimate(res.physical.estimate, nm0, eps)
        print('\nnominal model (lengths kept; see docs/identification.md for the split):')
        print(_format_nominal(nominal))
        comment = _summary_comment(res, str(args.bag))
        scenario_data = scenario_with_nominal(prior, nominal)
        out = Path(args.out)
        _dump_yaml(out, {'controller': scenario_data['controller']},
                   comment + '# Controller section of a scenario file; load with '
                   'manip_control.parameters.load_scenario\n# (or merge into a scenario).\n')
        print(f'\nwrote {out}')
        if args.write_scenario:
            path = Path(args.write_scenario)
            _dump_yaml(path, scenario_data,
                       comment + f'# Scenario {prior.name} with the identified nominal '
                       'model.\n')
            print(f'wrote {path}')
    except (IdentificationError, ParameterError, BagError) as exc:
        print(f'error: {exc}', file=sys.stderr)
        return 2
    return 0


if __name__ == '__main__':  # pragma: no cover
    sys.exit(main())
