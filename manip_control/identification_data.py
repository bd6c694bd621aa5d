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
build on this one (the first re-exports its names).
"""

from __future__ import annotations

from dataclasses import dataclass
import math
from pathlib import Path
from typing import Sequence

from manip_control.bag_io import BagReader
from manip_control.bag_io import JOINT_STATE
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
