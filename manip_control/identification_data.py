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
Joint-state data for identification: reading it from a bag, uniform sampling, prepared fits.

The pieces that the 2R identification (:mod:`manip_control.identification`) and the
identification of any URDF arm (:mod:`manip_control.arm_identification`) share; both modules
build on this one (the first re-exports its names). Also the 2R's base parameters, their
regressor and the physical model of an estimate (equations: :mod:`manip_control.identification`),
which the adaptive law (:mod:`manip_control.adaptation`) shares without loading the
identification's filters (scipy.signal).
"""

from __future__ import annotations

from dataclasses import asdict
from dataclasses import dataclass
import math
from pathlib import Path
from typing import Sequence

from manip_control.bag_io import BagReader
from manip_control.bag_io import JOINT_STATE
from manip_control.parameters import ArmParameters
from manip_control.parameters import FrictionParameters
from manip_control.parameters import NominalModel
import numpy as np


class IdentificationError(ValueError):
    """The data cannot give a trustworthy estimate (not exciting, too short, inconsistent)."""


@dataclass
class Prepared:
    """Filtered, trimmed, decimated data used for a fit (n joints, r regressor columns)."""

    t: np.ndarray
    """Sample times [s], shape (N,)."""
    y: np.ndarray
    """Filtered regressor ``F[Y(q_f, qd_f, qdd_f)]``, shape (N, n, r) ((N, 2, 10) for the 2R)."""
    tau: np.ndarray
    """Filtered torque ``F[tau]`` [N m], shape (N, n)."""
    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray
    """Filtered q [rad], qd [rad/s] and qdd [rad/s^2] at the kept samples, shape (N, n)."""
    sample_rate: float
    cutoff_hz: float


def resample_uniform(t: np.ndarray, arrays: list[np.ndarray],
                     error: type[Exception] = IdentificationError):
    """
    Check (and if needed restore by linear interpolation) uniform sampling.

    Returns ``(t, arrays, h)``: the arrays unchanged when every step is within 1 % of the
    median step ``h`` [s], else interpolated onto ``t[0] + k h``. Raises ``error`` when the
    stamps do not strictly increase.
    """
    dt = np.diff(t)
    if dt.size == 0:
        raise error('at least two samples are needed')
    if np.any(dt <= 0.0):
        k = int(np.flatnonzero(dt <= 0.0)[0])
        raise error(f'time stamps must be strictly increasing (sample {k + 1}: '
                    f'{t[k + 1]:.9f} s after {t[k]:.9f} s)')
    h = float(np.median(dt))
    if np.max(np.abs(dt - h)) <= 0.01 * h:
        return t, arrays, h
    # the guard keeps the last sample when (t[-1] - t[0]) / h is an integer up to rounding
    grid = t[0] + h * np.arange(int(math.floor((t[-1] - t[0]) / h + 1e-9)) + 1)
    return grid, [np.column_stack([np.interp(grid, t, a[:, j]) for j in range(a.shape[1])])
                  for a in arrays], h


JOINT_STATES_TOPIC = '/joint_states'


@dataclass
class JointStateData:
    """Joint states read from a bag: stamps [s], q [rad], qd [rad/s] (or None), tau [N m]."""

    t: np.ndarray
    q: np.ndarray
    qd: np.ndarray | None
    tau: np.ndarray
    params: dict | None
    """The bag's ``params.yaml`` (the recorded scenario), if any."""


def read_joint_states(bag: str | Path, joints: Sequence[str] = ('joint1', 'joint2'),
                      topic: str = JOINT_STATES_TOPIC) -> JointStateData:
    """
    Read position, velocity and effort (actual joint torque) of the joints from a bag.

    Uses :class:`manip_control.bag_io.BagReader`. Time is the header stamp (the bag receive
    time if the stamps are all zero). Messages missing a value of either joint are dropped;
    a velocity that is absent altogether gives ``qd = None``.

    Raises
    ------
    manip_control.bag_io.BagError
        Unreadable bag.
    IdentificationError
        No such topic, joints missing, no effort.

    """
    with BagReader(bag) as reader:
        if topic not in reader.topics:
            have = ', '.join(sorted(reader.topics)) or 'none'
            raise IdentificationError(f'{bag}: no topic {topic} (topics: {have})')
        info = reader.topics[topic]
        if info.msgtype != JOINT_STATE:
            raise IdentificationError(f'{bag}: {topic} is {info.msgtype}, not {JOINT_STATE}')
        series = reader.read_series([topic])[topic]
        params = reader.params
    joints = list(joints)
    missing = [j for j in joints if j not in series.names]
    if missing:
        raise IdentificationError(f'{bag}: {topic} has no joint {missing[0]!r} (joints: '
                                  f'{", ".join(series.names) or "none"}); pass --joints')
    cols = [series.names.index(j) for j in joints]
    stamp = series.stamp_ns if np.any(series.stamp_ns) else series.recv_ns
    t = stamp.astype(np.float64) * 1e-9
    q, qd, tau = (np.asarray(a, float)[:, cols] if a.size
                  else np.full((len(t), len(joints)), np.nan)
                  for a in (series.position, series.velocity, series.effort))
    if np.all(np.isnan(tau)):
        raise IdentificationError(f'{bag}: {topic} carries no effort (joint torque) for '
                                  f'{", ".join(joints)}; identification needs the applied torque')
    no_velocity = bool(np.all(np.isnan(qd)))
    ok = np.all(np.isfinite(q), axis=1) & np.all(np.isfinite(tau), axis=1)
    if not no_velocity:
        ok &= np.all(np.isfinite(qd), axis=1)
    if np.count_nonzero(ok) < 2:
        bad = [j for c, j in enumerate(joints)
               if not np.any(np.isfinite(q[:, c]) & np.isfinite(tau[:, c])
                             & (no_velocity | np.isfinite(qd[:, c])))]
        raise IdentificationError(
            f'{bag}: {topic}: fewer than 2 messages with finite position, velocity and effort '
            f'for every joint' + (f' (none for {", ".join(bad)})' if bad else ''))
    order = np.argsort(t[ok], kind='stable')
    t, q, tau = t[ok][order], q[ok][order], tau[ok][order]
    qd = None if no_velocity else qd[ok][order]
    keep = np.concatenate(([True], np.diff(t) > 0.0))     # drop repeated stamps
    t, q, tau = t[keep], q[keep], tau[keep]
    qd = None if qd is None else qd[keep]
    return JointStateData(t - t[0] if t.size else t, q, qd, tau, params)


# --------------------------------------------------------------------------------------------
# the 2R's base parameters and regressor (identification and the adaptive law share them)

#: Names of the free base parameters, in column order of :func:`regressor`.
BASE_NAMES = ('a', 'b', 'd', 'Jr2', 'G1', 'G2', 'bv1', 'tc1', 'bv2', 'tc2')
#: Units of :data:`BASE_NAMES`.
BASE_UNITS = ('kg m^2', 'kg m^2', 'kg m^2', 'kg m^2', 'N m', 'N m', 'N m s/rad', 'N m',
              'N m s/rad', 'N m')


def base_parameters(arm: ArmParameters, rotor_inertia=(0.0, 0.0),
                    friction: Sequence[FrictionParameters] | None = None) -> np.ndarray:
    """
    Compute the true base parameters ``theta`` (order :data:`BASE_NAMES`) of a physical arm.

    Parameters
    ----------
    arm : ArmParameters
        Masses [kg], lengths and CoM distances [m], inertias about the CoM [kg m^2].
    rotor_inertia : sequence of 2 float
        Reflected rotor inertia ``Jm N^2`` per joint [kg m^2].
    friction : sequence of 2 FrictionParameters, optional
        Joint friction (Stribeck terms are not part of the model); default none.

    """
    m1, m2, l1, lc1, lc2 = arm.m1, arm.m2, arm.l1, arm.lc1, arm.lc2
    g0 = arm.gravity
    fr = friction or (FrictionParameters(), FrictionParameters())
    return np.array([
        arm.I1 + arm.I2 + m1 * lc1 ** 2 + m2 * (l1 ** 2 + lc2 ** 2) + rotor_inertia[0],
        m2 * l1 * lc2,
        arm.I2 + m2 * lc2 ** 2,
        rotor_inertia[1],
        (m1 * lc1 + m2 * l1) * g0,
        m2 * lc2 * g0,
        fr[0].b, fr[0].tau_c, fr[1].b, fr[1].tau_c])


def regressor(q: np.ndarray, qd: np.ndarray, qdd: np.ndarray,
              eps: Sequence[float] = (0.01, 0.01)) -> np.ndarray:
    """
    Regressor ``Y`` with ``tau = Y theta``, shape (N, 2, 10) for samples of shape (N, 2).

    Parameters
    ----------
    q, qd, qdd : ndarray, shape (N, 2)
        Joint position [rad], velocity [rad/s], acceleration [rad/s^2].
    eps : sequence of 2 float
        Coulomb smoothing velocity of ``tanh(qd / eps)`` per joint [rad/s].

    """
    q, qd, qdd = (np.atleast_2d(np.asarray(x, dtype=float)) for x in (q, qd, qdd))
    n = q.shape[0]
    c2, s2 = np.cos(q[:, 1]), np.sin(q[:, 1])
    c1, c12 = np.cos(q[:, 0]), np.cos(q[:, 0] + q[:, 1])
    v1, v2 = qd[:, 0], qd[:, 1]
    a1, a2 = qdd[:, 0], qdd[:, 1]
    y = np.zeros((n, 2, len(BASE_NAMES)))
    y[:, 0, 0] = a1
    y[:, 0, 1] = 2.0 * c2 * a1 + c2 * a2 - s2 * (2.0 * v1 * v2 + v2 * v2)
    y[:, 0, 2] = a2
    y[:, 0, 4] = c1
    y[:, 0, 5] = c12
    y[:, 0, 6] = v1
    y[:, 0, 7] = np.tanh(v1 / eps[0])
    y[:, 1, 1] = c2 * a1 + s2 * v1 * v1
    y[:, 1, 2] = a1 + a2
    y[:, 1, 3] = a2
    y[:, 1, 5] = c12
    y[:, 1, 8] = v2
    y[:, 1, 9] = np.tanh(v2 / eps[1])
    return y


def physical_from_base(theta: np.ndarray, l1: float, g0: float) -> np.ndarray:
    """Return the constrained parameters ``phi`` implied by a consistent ``theta``."""
    theta = np.asarray(theta, dtype=float)
    p2 = theta[1] / l1
    p1 = theta[4] / g0 if g0 > 0 else float('nan')
    return np.array([theta[0], p2, theta[2], theta[3], p1, *theta[6:10]])


def nominal_from_estimate(phi: Sequence[float], prior: NominalModel,
                          eps: Sequence[float] | None = None) -> NominalModel:
    """
    Physical :class:`NominalModel` reproducing the constrained estimate's M, c, g.

    Choices (the split is not unique; M, c, g and the friction are): the link lengths
    ``l1``, ``l2``, ``g0`` and the plane come from ``prior``; ``lc2`` is the prior's if the
    result is valid, otherwise the middle of the valid interval
    ``(max(m2lc2 l1 / p1, m2lc2 l1^2 / (a - d)), min(l2, d / m2lc2)]`` (``m1 lc1 > 0``,
    ``I1 + m1 lc1^2 > 0``, ``I2 >= 0``); then ``m2 = m2lc2 / lc2``,
    ``I2 = d - m2lc2 lc2``; ``lc1`` likewise (valid interval ``(0, min(l1, R / p1')]``
    with ``p1' = p1 - m2 l1`` and ``R = a - d - m2 l1^2``), ``m1 = p1' / lc1``,
    ``I1 = R - p1' lc1`` and ``Jr1 = 0`` (joint 1's rotor inertia is lumped into ``I1``).
    A negative ``Jr2`` or friction estimate (noise around zero) is set to 0.

    In the horizontal plane ``p1 = m1 lc1 + m2 l1`` is not observable: the prior's ``m1``
    and ``lc1`` are kept (``m1`` reduced if ``I1`` would become negative).

    Parameters
    ----------
    phi : sequence of 9 float (8 without gravity)
        Constrained estimate in :data:`PHYS_NAMES` order.
    prior : NominalModel
        Source of the lengths, gravity, plane, Coulomb ``eps`` and the preferred
        centre-of-mass distances.
    eps : sequence of 2 float, optional
        Coulomb smoothing velocities (default: the prior's).

    Raises
    ------
    IdentificationError
        The estimate admits no physically valid split (e.g. ``d <= 0`` or ``m2lc2 <= 0``).

    """
    arm0 = prior.arm
    g0 = arm0.gravity
    phi = [float(v) for v in phi]
    if g0 > 0.0:
        a, p2, d, jr2, p1, bv1, tc1, bv2, tc2 = phi
    else:
        a, p2, d, jr2, bv1, tc1, bv2, tc2 = phi
        p1 = None
    l1, l2 = arm0.l1, arm0.l2
    if not (p2 > 0.0 and d > 0.0):
        raise IdentificationError(f'estimate not physical: m2*lc2 = {p2:.4g} kg m and '
                                  f'd = {d:.4g} kg m^2 must both be > 0')
    if p1 is not None and p1 <= 0.0:
        raise IdentificationError(f'estimate not physical: m1*lc1 + m2*l1 = {p1:.4g} kg m '
                                  'must be > 0')
    if not a - d > 0.0:
        raise IdentificationError(f'estimate not physical: a - d = {a - d:.4g} kg m^2 '
                                  '(I1 + m1 lc1^2 + m2 l1^2) must be > 0')
    # lc2 sets m2 = m2lc2 / lc2: above lo2 it leaves m1 lc1 = p1 - m2 l1 > 0 and
    # I1 + m1 lc1^2 = a - d - m2 l1^2 > 0, up to hi2 it leaves I2 >= 0
    lo2 = p2 * l1 ** 2 / (a - d)
    if p1 is not None:
        lo2 = max(lo2, p2 * l1 / p1)
    hi2 = min(l2, d / p2)
    if not lo2 < hi2:
        raise IdentificationError(
            f'estimate not physical: no lc2 in (0, l2] gives m1*lc1 > 0, I1 + m1 lc1^2 > 0 '
            f'and I2 >= 0 (needs {lo2:.4g} < lc2 <= {hi2:.4g} m)')
    lc2 = arm0.lc2 if lo2 < arm0.lc2 <= hi2 else 0.5 * (lo2 + hi2)
    m2 = p2 / lc2
    i2 = max(0.0, d - p2 * lc2)
    r1 = a - d - m2 * l1 ** 2       # = I1 + m1 lc1^2 (+ Jr1), > 0 but for rounding
    if r1 <= 0.0:
        raise IdentificationError(f'estimate not physical: a - d - m2 l1^2 = {r1:.4g} '
                                  'kg m^2 must be > 0')
    if p1 is not None:
        p1r = p1 - m2 * l1           # m1 lc1
        hi1 = min(l1, r1 / p1r)
        lc1 = arm0.lc1 if arm0.lc1 <= hi1 else 0.5 * hi1
        m1 = p1r / lc1
    else:
        lc1 = arm0.lc1
        m1 = min(arm0.m1, 0.5 * r1 / lc1 ** 2)
    i1 = max(0.0, r1 - m1 * lc1 ** 2)
    arm = ArmParameters(m1=m1, m2=m2, l1=l1, l2=l2, lc1=lc1, lc2=lc2, I1=i1, I2=i2,
                        g0=arm0.g0, plane=arm0.plane)
    eps = tuple(eps) if eps is not None else (prior.friction[0].eps, prior.friction[1].eps)
    friction = (FrictionParameters(b=max(0.0, bv1), tau_c=max(0.0, tc1), eps=eps[0]),
                FrictionParameters(b=max(0.0, bv2), tau_c=max(0.0, tc2), eps=eps[1]))
    return NominalModel(arm=arm, friction=friction, rotor_inertia=(0.0, max(0.0, jr2)))


def nominal_to_dict(nominal: NominalModel) -> dict:
    """Plain data of a nominal model (the ``controller.nominal`` mapping of a scenario)."""

    def plain(x):
        if isinstance(x, dict):
            return {k: plain(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [plain(v) for v in x]
        if isinstance(x, float):
            return float(f'{x:.10g}')
        return x

    data = plain(asdict(nominal))
    for fr in data['friction']:
        fr.pop('tau_s', None)
        fr.pop('v_s', None)
    return data
