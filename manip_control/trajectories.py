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
Joint-space reference trajectories for an n-joint arm (ROS-free, numpy/scipy only).

Every trajectory returns the desired joint position ``q_d`` [rad], velocity ``qd_d`` [rad/s]
and acceleration ``qdd_d`` [rad/s^2] at time ``t`` [s], and the three are exact derivatives
of each other (up to floating-point round-off):

* :class:`Sinusoid` -- ``q_d = offset + amplitude * sin(omega * t + phase)`` per joint;
* :class:`SumOfSinusoids` -- a sum of such terms per joint (excitation for identification);
* :class:`Quintic` -- point-to-point quintic with zero boundary velocity and acceleration;
* :class:`Waypoints` -- piecewise-quintic C2 path through timed waypoints;
* :class:`Hold` -- constant position.

Common interface (:class:`Trajectory`): ``sample(t) -> (q_d, qd_d, qdd_d)`` with three fresh
float64 arrays of shape ``(n_joints,)``; ``sample_many(t)`` with arrays of shape
``(len(t), n_joints)``; ``n_joints``; ``end_time``; ``bounds()``.

``sample`` is called at the control rate (1 kHz) from a Python loop, so it uses scalar ``math``
on precomputed Python floats (no scipy, no numpy ufuncs) and builds each output with one
``np.array`` call. Measured per call for n = 2 (CPython 3.11, numpy 2.4, best of repeats):
Hold ~0.5 us, Quintic ~1.3 us (~0.6 us while holding), Sinusoid ~1.3 us, Waypoints
~1.6-1.8 us independent of the number of waypoints (bisect), SumOfSinusoids with 5 terms
per joint ~2.8 us; evaluating a ``scipy.interpolate.CubicSpline`` and its two derivatives
costs ~12 us. ``sample_many`` is vectorised numpy (< 0.5 us per row).

The sinusoids' ``omega`` / ``omegas`` are angular frequencies in rad/s (not Hz; the keys
were called ``frequency`` / ``frequencies`` before, which read as Hz, and are refused with a
message saying so: :data:`RENAMED_KEYS`). Invalid data raise
:class:`TrajectoryError` (a ``ValueError``) whose message names the offending key, e.g.
``trajectory.times: must be strictly increasing (got 1.0 after 1.0)``.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence
import math
import numbers
from typing import Any, Callable, NamedTuple

import numpy as np

__all__ = [
    'TrajectoryError',
    'TrajectoryBounds',
    'Trajectory',
    'Sinusoid',
    'SumOfSinusoids',
    'Quintic',
    'Waypoints',
    'Hold',
    'TRAJECTORY_TYPES',
    'SEED_001_SINUSOID',
    'seed_001_sinusoid',
    'trajectory_from_config',
    'validate_limits',
]

Sample = tuple[np.ndarray, np.ndarray, np.ndarray]

#: Relative tolerance used by :func:`validate_limits` to absorb floating-point round-off.
LIMIT_RTOL = 1e-9


class TrajectoryError(ValueError):
    """Invalid trajectory data; the message names the offending key and the reason."""


class TrajectoryBounds(NamedTuple):
    """
    Per-joint bounds of a trajectory over all times, arrays of shape ``(n_joints,)``.

    Attributes
    ----------
    position_min, position_max : np.ndarray
        Smallest and largest ``q_d`` [rad].
    velocity_max : np.ndarray
        Largest ``|qd_d|`` [rad/s].
    acceleration_max : np.ndarray
        Largest ``|qdd_d|`` [rad/s^2].

    """

    position_min: np.ndarray
    position_max: np.ndarray
    velocity_max: np.ndarray
    acceleration_max: np.ndarray


# --------------------------------------------------------------------------------------------
# Validation helpers (run once, where data enter; never in sample()).
# --------------------------------------------------------------------------------------------

def _type_name(value: Any) -> str:
    return type(value).__name__


def _check_numeric_tree(value: Any, name: str) -> None:
    """Reject anything in a (nested) list that is not a real number (bool, str, None, ...)."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in 'iuf':
            raise TrajectoryError(f'{name}: must contain numbers, got array of {value.dtype}')
        return
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check_numeric_tree(item, f'{name}[{i}]')
        return
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TrajectoryError(f'{name}: must be a number, got {_type_name(value)} {value!r}')


def _float_array(value: Any, name: str) -> np.ndarray:
    """Convert a number / (nested) list / array to a finite float64 array (a copy)."""
    _check_numeric_tree(value, name)
    try:
        arr = np.array(value, dtype=np.float64)
    except (ValueError, TypeError):
        raise TrajectoryError(
            f'{name}: must be a number or a rectangular (nested) list of numbers') from None
    bad = np.argwhere(~np.isfinite(arr))
    if bad.shape[0]:
        idx = tuple(int(i) for i in bad[0])
        where = ''.join(f'[{i}]' for i in idx)
        raise TrajectoryError(f'{name}{where}: must be finite (got {arr[idx]})')
    return arr


def _scalar(value: Any, name: str) -> float:
    """Return ``value`` as a finite real number (bool and strings rejected)."""
    arr = _float_array(value, name)
    if arr.ndim != 0:
        raise TrajectoryError(f'{name}: must be a single number, got shape {arr.shape}')
    return float(arr)


def _check_n_joints(n_joints: Any, name: str = 'n_joints') -> int | None:
    if n_joints is None:
        return None
    if isinstance(n_joints, (bool, np.bool_)) or not isinstance(n_joints, numbers.Integral) \
            or n_joints < 1:
        raise TrajectoryError(f'{name}: must be a positive integer, got {n_joints!r}')
    return int(n_joints)


def _joint_vector(value: Any, name: str, n_joints: int | None) -> np.ndarray:
    """Return ``value`` as a finite 1-D vector with one entry per joint (no broadcasting)."""
    arr = _float_array(value, name)
    if arr.ndim != 1 or arr.size == 0:
        raise TrajectoryError(
            f'{name}: must be a list with one number per joint, got shape {arr.shape}')
    if n_joints is not None and arr.size != n_joints:
        raise TrajectoryError(
            f'{name}: expected {n_joints} values (one per joint), got {arr.size}')
    return arr


def _broadcast_joint_params(
        params: dict[str, Any], n_joints: int | None) -> tuple[int, dict[str, np.ndarray]]:
    """
    Parse parameters that are each a scalar (all joints) or one number per joint.

    ``params`` maps the full key name (used in messages) to the raw value. Returns the number
    of joints and the parameters broadcast to shape ``(n,)``.
    """
    arrays: dict[str, np.ndarray] = {}
    n, n_from = n_joints, 'n_joints'
    for name, value in params.items():
        arr = _float_array(value, name)
        if arr.ndim > 1:
            raise TrajectoryError(
                f'{name}: must be a number or a list with one number per joint, '
                f'got shape {arr.shape}')
        if arr.ndim == 1:
            if arr.size == 0:
                raise TrajectoryError(f'{name}: must not be empty')
            if n is None:
                n, n_from = arr.size, name
            elif arr.size != n:
                raise TrajectoryError(
                    f'{name}: expected {n} values (one per joint, from {n_from}), '
                    f'got {arr.size}')
        arrays[name] = arr
    if n is None:
        first = next(iter(params))
        raise TrajectoryError(
            f'{first}: cannot infer the number of joints when every parameter is a scalar; '
            'give a list or pass n_joints')
    return n, {k: np.broadcast_to(a, (n,)).astype(np.float64) for k, a in arrays.items()}


def _time_array(t: Any) -> np.ndarray:
    arr = np.atleast_1d(np.asarray(t, dtype=np.float64))
    if arr.ndim != 1:
        raise TrajectoryError(f't: must be a 1-D array of times, got shape {arr.shape}')
    return arr


def _readonly(arr: np.ndarray) -> np.ndarray:
    arr = np.array(arr, dtype=np.float64)
    arr.setflags(write=False)
    return arr


# --------------------------------------------------------------------------------------------
# Trajectories
# --------------------------------------------------------------------------------------------

class Trajectory:
    """
    Common interface of all joint-space reference trajectories.

    Subclasses implement :meth:`sample`, :meth:`sample_many`, :meth:`bounds` and set
    ``_n`` (number of joints) and ``_end_time``.
    """

    _n: int
    _end_time: float

    @property
    def n_joints(self) -> int:
        """Return the number of joints ``n`` (length of every sampled vector)."""
        return self._n

    @property
    def end_time(self) -> float:
        """
        Time [s] from which the reference is constant (``qd_d = qdd_d = 0``).

        ``math.inf`` for the periodic types (:class:`Sinusoid`, :class:`SumOfSinusoids`),
        ``0.0`` for :class:`Hold`.
        """
        return self._end_time

    def sample(self, t: float) -> Sample:
        """
        Evaluate the reference at time ``t``.

        Parameters
        ----------
        t : float
            Time [s].

        Returns
        -------
        q_d, qd_d, qdd_d : np.ndarray
            Fresh float64 arrays of shape ``(n_joints,)``: position [rad], velocity [rad/s]
            and acceleration [rad/s^2].

        """
        raise NotImplementedError

    def sample_many(self, t: Any) -> Sample:
        """
        Vectorised :meth:`sample`.

        Parameters
        ----------
        t : array_like, shape (N,)
            Times [s].

        Returns
        -------
        q_d, qd_d, qdd_d : np.ndarray
            Arrays of shape ``(N, n_joints)``; row ``k`` equals ``sample(t[k])``.

        """
        raise NotImplementedError

    def bounds(self) -> TrajectoryBounds:
        """Per-joint extremes of position, ``|velocity|`` and ``|acceleration|`` over all t."""
        raise NotImplementedError


class Sinusoid(Trajectory):
    r"""
    Per-joint sinusoid.

    .. math::

        q_{d,j}(t) &= o_j + A_j \sin(\omega_j t + \varphi_j) \\
        \dot q_{d,j}(t) &= A_j \omega_j \cos(\omega_j t + \varphi_j) \\
        \ddot q_{d,j}(t) &= -A_j \omega_j^2 \sin(\omega_j t + \varphi_j)

    Parameters
    ----------
    amplitude : float or sequence of float
        :math:`A_j` [rad]; a scalar applies to every joint. Any sign.
    omega : float or sequence of float
        Angular frequency :math:`\omega_j` [rad/s] (not Hz: the period is
        :math:`2\pi/\omega_j`), ``>= 0``.
    offset : float or sequence of float, optional
        :math:`o_j` [rad], default 0.
    phase : float or sequence of float, optional
        :math:`\varphi_j` [rad], default 0.
    n_joints : int, optional
        Number of joints; required only if every parameter is a scalar, otherwise checked
        against the list lengths.
    path : str, optional
        Prefix of the key names in error messages (default ``'trajectory'``).

    Attributes
    ----------
    amplitude, omega, offset, phase : np.ndarray
        Read-only, shape ``(n_joints,)`` (scalars broadcast).

    Raises
    ------
    TrajectoryError
        Non-numeric or non-finite values, inconsistent lengths, negative omega.

    """

    def __init__(self, amplitude: Any, omega: Any, offset: Any = 0.0, phase: Any = 0.0,
                 *, n_joints: int | None = None, path: str = 'trajectory') -> None:
        n_joints = _check_n_joints(n_joints)
        keys = ('amplitude', 'omega', 'offset', 'phase')
        n, p = _broadcast_joint_params(
            {f'{path}.{k}': v for k, v in zip(keys, (amplitude, omega, offset, phase))},
            n_joints)
        a, w, o, ph = (p[f'{path}.{k}'] for k in keys)
        neg = np.flatnonzero(w < 0)
        if neg.size:
            raise TrajectoryError(
                f'{path}.omega: must be >= 0 rad/s (got {w[neg[0]]} for joint index '
                f'{neg[0]})')
        self._n = n
        self._end_time = math.inf
        self.amplitude = _readonly(a)
        self.omega = _readonly(w)
        self.offset = _readonly(o)
        self.phase = _readonly(ph)
        # Hot-path data: plain Python floats.
        self._terms = [(float(o[j]), float(a[j]), float(w[j]), float(ph[j]),
                        float(a[j] * w[j]), float(a[j] * w[j] * w[j])) for j in range(n)]

    def sample(self, t: float) -> Sample:
        t = float(t)  # numpy scalars make the scalar math below several times slower
        sin, cos = math.sin, math.cos
        q, qd, qdd = [], [], []
        for o, a, w, ph, aw, aw2 in self._terms:
            x = w * t + ph
            s = sin(x)
            q.append(o + a * s)
            qd.append(aw * cos(x))
            qdd.append(-aw2 * s)
        return np.array(q), np.array(qd), np.array(qdd)

    def sample_many(self, t: Any) -> Sample:
        t = _time_array(t)
        x = np.multiply.outer(t, self.omega) + self.phase
        s = np.sin(x)
        aw = self.amplitude * self.omega
        return self.offset + self.amplitude * s, aw * np.cos(x), -(aw * self.omega) * s

    def bounds(self) -> TrajectoryBounds:
        a = np.abs(self.amplitude)
        w = self.omega
        still = w == 0.0
        const = self.offset + self.amplitude * np.sin(self.phase)
        return TrajectoryBounds(
            position_min=np.where(still, const, self.offset - a),
            position_max=np.where(still, const, self.offset + a),
            velocity_max=a * w,
            acceleration_max=a * w * w)


class SumOfSinusoids(Trajectory):
    r"""
    Per-joint sum of sinusoids (multisine excitation for parameter identification).

    .. math::

        q_{d,j}(t) &= o_j + \sum_k A_{jk} \sin(\omega_{jk} t + \varphi_{jk}) \\
        \dot q_{d,j}(t) &= \sum_k A_{jk}\omega_{jk} \cos(\omega_{jk} t + \varphi_{jk}) \\
        \ddot q_{d,j}(t) &= -\sum_k A_{jk}\omega_{jk}^2 \sin(\omega_{jk} t + \varphi_{jk})

    Parameters
    ----------
    amplitudes : sequence of sequence of float
        ``amplitudes[j]`` is the list of :math:`A_{jk}` [rad] of joint ``j``; joints may have
        different numbers of terms, an empty list keeps the joint at its offset.
    omegas : sequence of sequence of float
        Angular frequencies :math:`\omega_{jk}` [rad/s] (not Hz), ``>= 0``, same structure as
        ``amplitudes``.
    phases : sequence of sequence of float, optional
        :math:`\varphi_{jk}` [rad], same structure; default all 0.
    offset : float or sequence of float, optional
        :math:`o_j` [rad]; a scalar applies to every joint. Default 0.
    n_joints : int, optional
        Expected number of joints (checked against ``len(amplitudes)``).
    path : str, optional
        Prefix of the key names in error messages.

    Attributes
    ----------
    amplitudes, omegas, phases : tuple of np.ndarray
        Read-only per-joint term arrays.
    offset : np.ndarray
        Read-only, shape ``(n_joints,)``.

    Notes
    -----
    :meth:`bounds` uses :math:`\sum_k |A_{jk}|` (times :math:`\omega` or :math:`\omega^2`),
    the supremum for rationally independent frequencies and a conservative bound otherwise.

    """

    def __init__(self, amplitudes: Any, omegas: Any, phases: Any = None,
                 offset: Any = 0.0, *, n_joints: int | None = None,
                 path: str = 'trajectory') -> None:
        n_joints = _check_n_joints(n_joints)
        names = {'amplitudes': f'{path}.amplitudes', 'omegas': f'{path}.omegas',
                 'phases': f'{path}.phases'}
        lists = {'amplitudes': amplitudes, 'omegas': omegas, 'phases': phases}
        if phases is None:
            lists.pop('phases')
        rows: dict[str, list[np.ndarray]] = {}
        for key, value in lists.items():
            name = names[key]
            if not isinstance(value, (list, tuple, np.ndarray)):
                raise TrajectoryError(
                    f'{name}: must be a list with one list of numbers per joint, '
                    f'got {_type_name(value)}')
            if len(value) == 0:
                raise TrajectoryError(f'{name}: must not be empty (one list per joint)')
            if n_joints is not None and len(value) != n_joints:
                raise TrajectoryError(
                    f'{name}: expected {n_joints} lists (one per joint), got {len(value)}')
            if key != 'amplitudes' and len(value) != len(rows['amplitudes']):
                raise TrajectoryError(
                    f'{name}: expected {len(rows["amplitudes"])} lists (one per joint, as '
                    f'{names["amplitudes"]}), got {len(value)}')
            parsed = []
            for j, row in enumerate(value):
                arr = _float_array(row, f'{name}[{j}]')
                if arr.ndim != 1:
                    raise TrajectoryError(
                        f'{name}[{j}]: must be a list of numbers, got shape {arr.shape}')
                if key != 'amplitudes' and arr.size != rows['amplitudes'][j].size:
                    raise TrajectoryError(
                        f'{name}[{j}]: expected {rows["amplitudes"][j].size} values (as '
                        f'{names["amplitudes"]}[{j}]), got {arr.size}')
                if key == 'omegas' and np.any(arr < 0):
                    k = int(np.flatnonzero(arr < 0)[0])
                    raise TrajectoryError(f'{name}[{j}][{k}]: must be >= 0 rad/s (got {arr[k]})')
                parsed.append(arr)
            rows[key] = parsed
        n = len(rows['amplitudes'])
        if 'phases' not in rows:
            rows['phases'] = [np.zeros_like(a) for a in rows['amplitudes']]
        _, p = _broadcast_joint_params({f'{path}.offset': offset}, n)
        self._n = n
        self._end_time = math.inf
        self.offset = _readonly(p[f'{path}.offset'])
        self.amplitudes = tuple(_readonly(a) for a in rows['amplitudes'])
        self.omegas = tuple(_readonly(w) for w in rows['omegas'])
        self.phases = tuple(_readonly(ph) for ph in rows['phases'])
        # Padded (n, m) matrices for the vectorised path (zero-amplitude padding terms).
        m = max(1, max(a.size for a in self.amplitudes))
        self._A = np.zeros((n, m))
        self._W = np.zeros((n, m))
        self._P = np.zeros((n, m))
        for j in range(n):
            k = self.amplitudes[j].size
            self._A[j, :k] = self.amplitudes[j]
            self._W[j, :k] = self.omegas[j]
            self._P[j, :k] = self.phases[j]
        # Hot-path data: plain Python floats.
        self._joint_terms = [
            (float(self.offset[j]),
             [(float(a), float(w), float(ph), float(a * w), float(a * w * w))
              for a, w, ph in zip(self.amplitudes[j], self.omegas[j], self.phases[j])])
            for j in range(n)]

    def sample(self, t: float) -> Sample:
        t = float(t)  # numpy scalars make the scalar math below several times slower
        sin, cos = math.sin, math.cos
        q, qd, qdd = [], [], []
        for o, terms in self._joint_terms:
            qj, qdj, qddj = o, 0.0, 0.0
            for a, w, ph, aw, aw2 in terms:
                x = w * t + ph
                s = sin(x)
                qj += a * s
                qdj += aw * cos(x)
                qddj -= aw2 * s
            q.append(qj)
            qd.append(qdj)
            qdd.append(qddj)
        return np.array(q), np.array(qd), np.array(qdd)

    def sample_many(self, t: Any) -> Sample:
        t = _time_array(t)
        x = t[:, None, None] * self._W + self._P          # (N, n, m)
        s = np.sin(x)
        aw = self._A * self._W
        return (self.offset + (self._A * s).sum(axis=2), (aw * np.cos(x)).sum(axis=2),
                -(aw * self._W * s).sum(axis=2))

    def bounds(self) -> TrajectoryBounds:
        moving = self._W > 0.0
        const = self.offset + np.where(moving, 0.0, self._A * np.sin(self._P)).sum(axis=1)
        swing = np.where(moving, np.abs(self._A), 0.0).sum(axis=1)
        aw = np.abs(self._A) * self._W
        return TrajectoryBounds(const - swing, const + swing, aw.sum(axis=1),
                                (aw * self._W).sum(axis=1))


class Quintic(Trajectory):
    r"""
    Point-to-point quintic with zero velocity and acceleration at both ends.

    With :math:`T` the duration, :math:`s = (t - t_0)/T` clipped to :math:`[0, 1]` and
    :math:`\Delta = q_{goal} - q_{start}`:

    .. math::

        q_d &= q_{start} + \Delta\,(10 s^3 - 15 s^4 + 6 s^5) \\
        \dot q_d &= \Delta\,(30 s^2 - 60 s^3 + 30 s^4) / T \\
        \ddot q_d &= \Delta\,(60 s - 180 s^2 + 120 s^3) / T^2

    so ``q_d = q_start`` for ``t <= t_start`` and ``q_d = q_goal`` (exactly) for
    ``t >= t_start + duration``, with zero velocity and acceleration there. Peak speed
    :math:`15|\Delta|/(8T)` at :math:`s = 1/2`, peak acceleration
    :math:`10|\Delta|/(\sqrt{3}T^2)` at :math:`s = 1/2 \mp \sqrt{3}/6`.

    Parameters
    ----------
    q_start, q_goal : sequence of float
        Start and goal positions [rad], one per joint (config keys ``start``, ``goal``).
    duration : float
        Motion time :math:`T` [s], ``> 0``.
    t_start : float, optional
        Start time :math:`t_0` [s], default 0.
    n_joints : int, optional
        Expected number of joints.
    path : str, optional
        Prefix of the key names in error messages.

    Attributes
    ----------
    q_start, q_goal : np.ndarray
        Read-only, shape ``(n_joints,)``.
    duration, t_start : float

    """

    def __init__(self, q_start: Any, q_goal: Any, duration: Any, t_start: Any = 0.0, *,
                 n_joints: int | None = None, path: str = 'trajectory') -> None:
        n_joints = _check_n_joints(n_joints)
        q0 = _joint_vector(q_start, f'{path}.start', n_joints)
        q1 = _joint_vector(q_goal, f'{path}.goal', q0.size)
        T = _scalar(duration, f'{path}.duration')
        if T <= 0.0:
            raise TrajectoryError(f'{path}.duration: must be > 0 s (got {T})')
        if T * T == 0.0 or math.isinf(1.0 / (T * T)):
            raise TrajectoryError(f'{path}.duration: too small (got {T})')
        t0 = _scalar(t_start, f'{path}.t_start')
        self._n = q0.size
        self.q_start = _readonly(q0)
        self.q_goal = _readonly(q1)
        self.duration = T
        self.t_start = t0
        self._end_time = t0 + T
        delta = q1 - q0
        self._delta = _readonly(delta)
        self._terms = [(float(a), float(d)) for a, d in zip(q0, delta)]
        self._start_list = [float(v) for v in q0]
        self._goal_list = [float(v) for v in q1]
        self._inv_T = 1.0 / T
        self._inv_T2 = 1.0 / (T * T)

    def sample(self, t: float) -> Sample:
        t = float(t)
        if t >= self._end_time:
            return np.array(self._goal_list), np.zeros(self._n), np.zeros(self._n)
        t0 = self.t_start
        if t <= t0:
            return np.array(self._start_list), np.zeros(self._n), np.zeros(self._n)
        s = (t - t0) * self._inv_T
        s2 = s * s
        p = s2 * s * (10.0 + s * (-15.0 + 6.0 * s))
        dp = s2 * (30.0 + s * (-60.0 + 30.0 * s)) * self._inv_T
        ddp = s * (60.0 + s * (-180.0 + 120.0 * s)) * self._inv_T2
        q, qd, qdd = [], [], []
        for q0, d in self._terms:
            q.append(q0 + d * p)
            qd.append(d * dp)
            qdd.append(d * ddp)
        return np.array(q), np.array(qd), np.array(qdd)

    def sample_many(self, t: Any) -> Sample:
        t = _time_array(t)
        s = np.clip((t - self.t_start) / self.duration, 0.0, 1.0)
        s = np.where(t >= self._end_time, 1.0, s)[:, None]
        p = s ** 3 * (10.0 + s * (-15.0 + 6.0 * s))
        dp = s ** 2 * (30.0 + s * (-60.0 + 30.0 * s)) * self._inv_T
        ddp = s * (60.0 + s * (-180.0 + 120.0 * s)) * self._inv_T2
        q = self.q_start + self._delta * p
        q = np.where(s == 1.0, self.q_goal, q)   # exact goal after the motion
        return q, self._delta * dp, self._delta * ddp

    def bounds(self) -> TrajectoryBounds:
        d = np.abs(self._delta)
        return TrajectoryBounds(np.minimum(self.q_start, self.q_goal),
                                np.maximum(self.q_start, self.q_goal),
                                1.875 * d / self.duration,
                                10.0 / math.sqrt(3.0) * d / self.duration ** 2)


def _quintic_hermite(h: np.ndarray, p0: np.ndarray, v0: np.ndarray, a0: np.ndarray,
                     p1: np.ndarray, v1: np.ndarray, a1: np.ndarray) -> np.ndarray:
    r"""
    Power-basis coefficients ``c[..., 0:6]`` of quintics on :math:`\tau \in [0, h]`.

    :math:`q(\tau) = \sum_i c_i \tau^i` with :math:`q, \dot q, \ddot q` equal to
    ``(p0, v0, a0)`` at :math:`\tau = 0` and ``(p1, v1, a1)`` at :math:`\tau = h`.
    """
    d = p1 - p0
    c3 = (20.0 * d - (8.0 * v1 + 12.0 * v0) * h - (3.0 * a0 - a1) * h ** 2) / (2.0 * h ** 3)
    c4 = (-30.0 * d + (14.0 * v1 + 16.0 * v0) * h + (3.0 * a0 - 2.0 * a1) * h ** 2) \
        / (2.0 * h ** 4)
    c5 = (12.0 * d - 6.0 * (v1 + v0) * h - (a0 - a1) * h ** 2) / (2.0 * h ** 5)
    return np.stack([p0, v0, 0.5 * a0, c3, c4, c5], axis=-1)


class Waypoints(Trajectory):
    r"""
    C2 path through timed waypoints, piecewise quintic, holding the end waypoints.

    Between consecutive waypoints each joint follows a quintic
    :math:`q(\tau) = \sum_{i=0}^5 c_i \tau^i`, :math:`\tau = t - t_k \in [0, h_k]`, with
    :math:`\dot q = \sum i c_i \tau^{i-1}` and :math:`\ddot q = \sum i(i-1) c_i \tau^{i-2}`.
    Position, velocity and acceleration are continuous at every waypoint (C2), and velocity
    and acceleration are zero at the first and last waypoint, so the reference stays C2 when
    it holds ``positions[0]`` before ``times[0]`` and ``positions[-1]`` after ``times[-1]``.

    * ``velocities`` omitted: the interpolating quintic spline (C4 at interior waypoints)
      with :math:`\dot q = \ddot q = 0` at both ends
      (``scipy.interpolate.make_interp_spline(k=5)``). Two waypoints give exactly the
      :class:`Quintic` point-to-point motion.
    * ``velocities`` given: the path also passes through these velocities; the interior
      waypoint accelerations are chosen so that the jerk is continuous too (C3); this is a
      tridiagonal linear system.

    Parameters
    ----------
    times : sequence of float, shape (m,)
        Waypoint times [s], strictly increasing, ``m >= 2``.
    positions : sequence of sequence of float, shape (m, n)
        Waypoint positions [rad].
    velocities : sequence of sequence of float, shape (m, n), optional
        Waypoint velocities [rad/s]; the first and last rows must be zero.
    n_joints : int, optional
        Expected number of joints.
    path : str, optional
        Prefix of the key names in error messages.

    Attributes
    ----------
    times : np.ndarray
        Read-only, shape ``(m,)``.
    positions, knot_velocities, knot_accelerations : np.ndarray
        Read-only, shape ``(m, n_joints)``: position [rad], velocity [rad/s] and
        acceleration [rad/s^2] of the path at each waypoint.

    """

    def __init__(self, times: Any, positions: Any, velocities: Any = None, *,
                 n_joints: int | None = None, path: str = 'trajectory') -> None:
        n_joints = _check_n_joints(n_joints)
        ts = _float_array(times, f'{path}.times')
        if ts.ndim != 1:
            raise TrajectoryError(f'{path}.times: must be a list of numbers, got shape {ts.shape}')
        if ts.size < 2:
            raise TrajectoryError(f'{path}.times: need at least 2 waypoints, got {ts.size}')
        for k in range(1, ts.size):
            if not ts[k] > ts[k - 1]:
                raise TrajectoryError(
                    f'{path}.times: must be strictly increasing (got {ts[k]} after {ts[k - 1]})')
        m = ts.size
        pos = self._matrix(positions, f'{path}.positions', m, n_joints)
        n = pos.shape[1]
        h = np.diff(ts)[:, None]
        if velocities is not None:
            vel = self._matrix(velocities, f'{path}.velocities', m, n)
            for k in (0, m - 1):
                if np.any(vel[k] != 0.0):
                    raise TrajectoryError(
                        f'{path}.velocities[{k}]: must be zero at the first and last waypoint '
                        f'(the path holds there), got {vel[k].tolist()}')
        too_close = TrajectoryError(
            f'{path}.times: waypoints too close in time for their positions/velocities '
            '(non-finite path coefficients)')
        try:
            with np.errstate(all='ignore'):
                if velocities is None:
                    vel, acc = self._spline_knots(ts, pos)
                else:
                    acc = self._c3_accelerations(h, pos, vel)
                coef = _quintic_hermite(h, pos[:-1], vel[:-1], acc[:-1], pos[1:], vel[1:],
                                        acc[1:])
        except (ValueError, np.linalg.LinAlgError):
            raise too_close from None
        if not (np.all(np.isfinite(coef)) and np.all(np.isfinite(vel))
                and np.all(np.isfinite(acc))):
            raise too_close
        self._n = n
        self._end_time = float(ts[-1])
        self.times = _readonly(ts)
        self.positions = _readonly(pos)
        self.knot_velocities = _readonly(vel)
        self.knot_accelerations = _readonly(acc)
        self._coef = coef                                     # (m-1, n, 6)
        self._dcoef = coef[..., 1:] * np.arange(1, 6)          # (m-1, n, 5)
        self._ddcoef = coef[..., 2:] * np.array([2.0, 6.0, 12.0, 20.0])  # (m-1, n, 4)
        # Hot-path data: Python floats, per segment a list of per-joint 15-tuples.
        self._times_list = [float(v) for v in ts]
        self._first_list = [float(v) for v in pos[0]]
        self._last_list = [float(v) for v in pos[-1]]
        flat = np.concatenate((coef, self._dcoef, self._ddcoef), axis=2)  # (m-1, n, 15)
        self._seg_terms = [[tuple(float(v) for v in flat[k, j]) for j in range(n)]
                           for k in range(m - 1)]

    @staticmethod
    def _matrix(value: Any, name: str, m: int, n_joints: int | None) -> np.ndarray:
        arr = _float_array(value, name)
        if arr.ndim != 2 or arr.shape[1] == 0:
            raise TrajectoryError(
                f'{name}: must be a list of waypoints, each a list with one number per joint, '
                f'got shape {arr.shape}')
        if arr.shape[0] != m:
            raise TrajectoryError(
                f'{name}: expected {m} waypoints (one per time), got {arr.shape[0]}')
        if n_joints is not None and arr.shape[1] != n_joints:
            raise TrajectoryError(
                f'{name}: expected {n_joints} values per waypoint (one per joint), '
                f'got {arr.shape[1]}')
        return arr

    @staticmethod
    def _spline_knots(ts: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Knot velocities and accelerations of the clamped (v = a = 0) quintic spline."""
        from scipy.interpolate import make_interp_spline

        zero = np.zeros(pos.shape[1])
        spl = make_interp_spline(ts, pos, k=5, axis=0,
                                 bc_type=([(1, zero), (2, zero)], [(1, zero), (2, zero)]))
        vel = spl(ts, 1)
        acc = spl(ts, 2)
        vel[[0, -1]] = 0.0
        acc[[0, -1]] = 0.0
        return vel, acc

    @staticmethod
    def _c3_accelerations(h: np.ndarray, pos: np.ndarray, vel: np.ndarray) -> np.ndarray:
        r"""
        Interior knot accelerations making the quintic Hermite path's jerk continuous.

        Jerk at the start/end of a segment (length h, data p0 v0 a0 -> p1 v1 a1, Δ = p1-p0):
        :math:`j_0 = 60Δ/h^3 - (24v_1+36v_0)/h^2 - (9a_0-3a_1)/h`,
        :math:`j_1 = 60Δ/h^3 - (36v_1+24v_0)/h^2 + (9a_1-3a_0)/h`. Equating :math:`j_1` of
        segment k-1 and :math:`j_0` of segment k gives, with :math:`a_0 = a_{m-1} = 0`,
        :math:`-\frac{3}{h_{k-1}}a_{k-1} + 9(\frac{1}{h_{k-1}}+\frac{1}{h_k})a_k
        - \frac{3}{h_k}a_{k+1} = r_k` (strictly diagonally dominant).
        """
        m = pos.shape[0]
        acc = np.zeros_like(pos)
        if m <= 2:
            return acc
        from scipy.linalg import solve_banded

        d = np.diff(pos, axis=0)
        hl, hr = h[:-1], h[1:]                   # segments left/right of interior knots
        v_prev, v_k, v_next = vel[:-2], vel[1:-1], vel[2:]
        rhs = (60.0 * d[1:] / hr ** 3 - (24.0 * v_next + 36.0 * v_k) / hr ** 2
               - 60.0 * d[:-1] / hl ** 3 + (36.0 * v_k + 24.0 * v_prev) / hl ** 2)
        ab = np.zeros((3, m - 2))
        ab[0, 1:] = -3.0 / hr[:-1, 0]            # super-diagonal
        ab[1, :] = 9.0 * (1.0 / hl[:, 0] + 1.0 / hr[:, 0])
        ab[2, :-1] = -3.0 / hl[1:, 0]            # sub-diagonal
        acc[1:-1] = solve_banded((1, 1), ab, rhs)
        return acc

    def sample(self, t: float) -> Sample:
        t = float(t)
        ts = self._times_list
        if t >= ts[-1]:
            return np.array(self._last_list), np.zeros(self._n), np.zeros(self._n)
        if t <= ts[0]:
            return np.array(self._first_list), np.zeros(self._n), np.zeros(self._n)
        k = bisect_right(ts, t) - 1
        x = t - ts[k]
        q, qd, qdd = [], [], []
        for c0, c1, c2, c3, c4, c5, d1, d2, d3, d4, d5, e2, e3, e4, e5 in self._seg_terms[k]:
            q.append(c0 + x * (c1 + x * (c2 + x * (c3 + x * (c4 + x * c5)))))
            qd.append(d1 + x * (d2 + x * (d3 + x * (d4 + x * d5))))
            qdd.append(e2 + x * (e3 + x * (e4 + x * e5)))
        return np.array(q), np.array(qd), np.array(qdd)

    def sample_many(self, t: Any) -> Sample:
        t = _time_array(t)
        ts = self.times
        k = np.clip(np.searchsorted(ts, t, side='right') - 1, 0, ts.size - 2)
        x = (t - ts[k])[:, None, None]
        powers6 = x ** np.arange(6)
        q = (self._coef[k] * powers6).sum(axis=2)
        qd = (self._dcoef[k] * powers6[..., :5]).sum(axis=2)
        qdd = (self._ddcoef[k] * powers6[..., :4]).sum(axis=2)
        before, after = t <= ts[0], t >= ts[-1]
        q[before] = self.positions[0]
        q[after] = self.positions[-1]
        qd[before | after] = 0.0
        qdd[before | after] = 0.0
        return q, qd, qdd

    def bounds(self) -> TrajectoryBounds:
        n = self._n
        qmin = self.positions.min(axis=0).copy()
        qmax = self.positions.max(axis=0).copy()
        vmax = np.abs(self.knot_velocities).max(axis=0)
        amax = np.abs(self.knot_accelerations).max(axis=0)
        h = np.diff(self.times)
        for k in range(h.size):
            for j in range(n):
                c, dc, ddc = self._coef[k, j], self._dcoef[k, j], self._ddcoef[k, j]
                jerk = ddc[1:] * np.arange(1, 4)
                for poly, deriv, which in ((c, dc, 'q'), (dc, ddc, 'v'), (ddc, jerk, 'a')):
                    for x in _roots_in(deriv, h[k]):
                        val = float(np.polynomial.polynomial.polyval(x, poly))
                        if which == 'q':
                            qmin[j] = min(qmin[j], val)
                            qmax[j] = max(qmax[j], val)
                        elif which == 'v':
                            vmax[j] = max(vmax[j], abs(val))
                        else:
                            amax[j] = max(amax[j], abs(val))
        return TrajectoryBounds(qmin, qmax, vmax, amax)


def _roots_in(coef: np.ndarray, h: float) -> list[float]:
    """Candidate roots in (0, h) of the ascending-coefficient polynomial ``coef``."""
    c = np.trim_zeros(np.asarray(coef, dtype=np.float64), 'b')
    if c.size < 2:
        return []
    # Every root's real part is kept: a spurious point only adds a value the path really
    # takes, while a real double root computed with a tiny imaginary part is not lost.
    roots = np.polynomial.polynomial.polyroots(c)
    return [float(x) for x in roots.real if 0.0 < x < h]


class Hold(Trajectory):
    r"""
    Constant position: :math:`q_d = q_h`, :math:`\dot q_d = \ddot q_d = 0`.

    Parameters
    ----------
    position : sequence of float
        :math:`q_h` [rad], one per joint.
    n_joints : int, optional
        Expected number of joints.
    path : str, optional
        Prefix of the key names in error messages.

    """

    def __init__(self, position: Any, *, n_joints: int | None = None,
                 path: str = 'trajectory') -> None:
        n_joints = _check_n_joints(n_joints)
        pos = _joint_vector(position, f'{path}.position', n_joints)
        self._n = pos.size
        self._end_time = 0.0
        self.position = _readonly(pos)
        self._position_list = [float(v) for v in pos]

    def sample(self, t: float) -> Sample:
        return np.array(self._position_list), np.zeros(self._n), np.zeros(self._n)

    def sample_many(self, t: Any) -> Sample:
        t = _time_array(t)
        shape = (t.size, self._n)
        return (np.broadcast_to(self.position, shape).copy(), np.zeros(shape), np.zeros(shape))

    def bounds(self) -> TrajectoryBounds:
        z = np.zeros(self._n)
        return TrajectoryBounds(self.position.copy(), self.position.copy(), z, z.copy())


# --------------------------------------------------------------------------------------------
# Presets and construction from plain dicts (YAML)
# --------------------------------------------------------------------------------------------

#: Seed-001 reference: amplitude (0.5, 0.3) rad, omega 0.5 rad/s (period 12.57 s), offset 0.
SEED_001_SINUSOID: dict[str, Any] = {
    'type': 'sinusoid', 'amplitude': [0.5, 0.3], 'omega': [0.5, 0.5], 'offset': [0.0, 0.0],
}


def seed_001_sinusoid() -> Sinusoid:
    """Return the seed-001 reference (:data:`SEED_001_SINUSOID`) for the 2R arm."""
    return trajectory_from_config(SEED_001_SINUSOID, 2)  # type: ignore[return-value]


def _build_quintic(cfg: Mapping[str, Any], n: int, path: str) -> Trajectory:
    return Quintic(cfg['start'], cfg['goal'], cfg['duration'], cfg.get('t_start', 0.0),
                   n_joints=n, path=path)


#: ``type`` -> (required keys, optional keys, builder(cfg, n_joints, path)).
TRAJECTORY_TYPES: dict[str, tuple[tuple[str, ...], tuple[str, ...],
                                  Callable[[Mapping[str, Any], int, str], Trajectory]]] = {
    'sinusoid': (
        ('amplitude', 'omega'), ('offset', 'phase'),
        lambda c, n, p: Sinusoid(c['amplitude'], c['omega'], c.get('offset', 0.0),
                                 c.get('phase', 0.0), n_joints=n, path=p)),
    'sum_of_sinusoids': (
        ('amplitudes', 'omegas'), ('phases', 'offset'),
        lambda c, n, p: SumOfSinusoids(c['amplitudes'], c['omegas'], c.get('phases'),
                                       c.get('offset', 0.0), n_joints=n, path=p)),
    'quintic': (('start', 'goal', 'duration'), ('t_start',), _build_quintic),
    'waypoints': (
        ('times', 'positions'), ('velocities',),
        lambda c, n, p: Waypoints(c['times'], c['positions'], c.get('velocities'),
                                  n_joints=n, path=p)),
    'hold': (('position',), (), lambda c, n, p: Hold(c['position'], n_joints=n, path=p)),
}


#: ``(type, old key)`` -> the message refusing it: keys renamed because they misled.
RENAMED_KEYS: dict[tuple[str, str], str] = {
    ('sinusoid', 'frequency'): 'renamed to omega, the angular frequency in rad/s (same value; '
                               'Hz = omega / (2 pi))',
    ('sum_of_sinusoids', 'frequencies'): 'renamed to omegas, the angular frequencies in rad/s '
                                         '(same values; Hz = omega / (2 pi))',
}


def trajectory_from_config(cfg: Mapping[str, Any], n_joints: int, *,
                           path: str = 'trajectory') -> Trajectory:
    """
    Build a trajectory from a plain dict (e.g. parsed YAML).

    Parameters
    ----------
    cfg : Mapping
        ``{'type': <type>, ...}`` with the keys of that type (units: rad, rad/s, s):

        * ``sinusoid``: ``amplitude``, ``omega`` [rad/s], optional ``offset``, ``phase``
          -- each a number (all joints) or a list with one number per joint;
        * ``sum_of_sinusoids``: ``amplitudes``, ``omegas`` [rad/s], optional ``phases`` (each a
          list of per-joint lists), optional ``offset``;
        * ``quintic``: ``start``, ``goal`` (per-joint lists), ``duration`` [s] > 0, optional
          ``t_start`` [s];
        * ``waypoints``: ``times`` (strictly increasing, >= 2), ``positions`` (list of
          per-joint lists), optional ``velocities`` (same shape, zero at both ends);
        * ``hold``: ``position``.
    n_joints : int
        Number of joints of the arm; every vector must have this length.
    path : str, optional
        Key path of ``cfg`` used as prefix in error messages (default ``'trajectory'``).

    Returns
    -------
    Trajectory

    Raises
    ------
    TrajectoryError
        Not a mapping; missing, unknown or non-string ``type``; unknown or missing keys; any
        invalid value. The message starts with the offending key path, e.g.
        ``trajectory.duration: must be > 0 s (got 0.0)``.

    """
    n = _check_n_joints(n_joints)
    if n is None:
        raise TrajectoryError('n_joints: must be a positive integer, got None')
    if not isinstance(cfg, Mapping):
        raise TrajectoryError(f'{path}: must be a mapping with a "type" key, '
                              f'got {_type_name(cfg)}')
    if 'type' not in cfg:
        raise TrajectoryError(f'{path}.type: missing required key (one of '
                              f'{", ".join(TRAJECTORY_TYPES)})')
    kind = cfg['type']
    if not isinstance(kind, str) or kind not in TRAJECTORY_TYPES:
        raise TrajectoryError(f'{path}.type: unknown trajectory type {kind!r} (expected one of '
                              f'{", ".join(TRAJECTORY_TYPES)})')
    required, optional, build = TRAJECTORY_TYPES[kind]
    allowed = ('type',) + required + optional
    for key in cfg:
        if (kind, key) in RENAMED_KEYS:
            raise TrajectoryError(f'{path}.{key}: {RENAMED_KEYS[(kind, key)]}')
        if key not in allowed:
            raise TrajectoryError(f'{path}.{key}: unknown key for type {kind!r} (allowed: '
                                  f'{", ".join(allowed)})')
    for key in required:
        if key not in cfg:
            raise TrajectoryError(f'{path}.{key}: missing required key for type {kind!r}')
    return build(cfg, n, path)


# --------------------------------------------------------------------------------------------
# Limits
# --------------------------------------------------------------------------------------------

def validate_limits(traj: Trajectory, position_limits: Any = None, velocity_limits: Any = None,
                    acceleration_limits: Any = None, *,
                    joint_names: Sequence[str] | None = None, path: str = 'trajectory') -> None:
    r"""
    Check a trajectory against joint limits over its whole time axis.

    Uses :meth:`Trajectory.bounds`, which is exact for every type (including overshoot of a
    :class:`Waypoints` path between waypoints) except :class:`SumOfSinusoids`, where it is
    the conservative :math:`\sum |A|` bound. A relative tolerance of :data:`LIMIT_RTOL`
    absorbs round-off, so a waypoint exactly on a limit passes.

    Parameters
    ----------
    traj : Trajectory
        The reference to check.
    position_limits : array_like, shape (n, 2), optional
        Per joint ``[lower, upper]`` [rad], ``lower < upper``.
    velocity_limits : array_like, shape (n,), optional
        Per joint maximum ``|qd_d|`` [rad/s], ``> 0``.
    acceleration_limits : array_like, shape (n,), optional
        Per joint maximum ``|qdd_d|`` [rad/s^2], ``> 0``.
    joint_names : sequence of str, optional
        Names used in messages instead of ``joints[j]``.
    path : str, optional
        Prefix of the messages.

    Raises
    ------
    TrajectoryError
        A limit is exceeded (message names the joint, the reached value and the limit) or a
        limit argument is malformed.

    """
    n = traj.n_joints
    names = [f'joints[{j}]' for j in range(n)] if joint_names is None else list(joint_names)
    if len(names) != n:
        raise TrajectoryError(f'joint_names: expected {n} names, got {len(names)}')
    b = traj.bounds()

    def over(value: float, limit: float) -> bool:
        return value > limit + LIMIT_RTOL * max(1.0, abs(limit))

    if position_limits is not None:
        lim = _float_array(position_limits, 'position_limits')
        if lim.shape != (n, 2):
            raise TrajectoryError(f'position_limits: expected shape ({n}, 2) '
                                  f'(per joint [lower, upper]), got {lim.shape}')
        for j in range(n):
            lo, hi = lim[j]
            if not lo < hi:
                raise TrajectoryError(f'position_limits[{j}]: lower {lo} must be < upper {hi}')
            if over(lo, b.position_min[j]):
                raise TrajectoryError(
                    f'{path}: {names[j]} position reaches {b.position_min[j]:.6g} rad, below '
                    f'the lower limit {lo:.6g} rad')
            if over(b.position_max[j], hi):
                raise TrajectoryError(
                    f'{path}: {names[j]} position reaches {b.position_max[j]:.6g} rad, above '
                    f'the upper limit {hi:.6g} rad')
    for arg, reached, what, unit in ((velocity_limits, b.velocity_max, 'speed', 'rad/s'),
                                     (acceleration_limits, b.acceleration_max,
                                      'acceleration', 'rad/s^2')):
        if arg is None:
            continue
        key = 'velocity_limits' if what == 'speed' else 'acceleration_limits'
        lim = _float_array(arg, key)
        if lim.shape != (n,):
            raise TrajectoryError(f'{key}: expected shape ({n},), got {lim.shape}')
        for j in range(n):
            if not lim[j] > 0.0:
                raise TrajectoryError(f'{key}[{j}]: must be > 0, got {lim[j]}')
            if over(reached[j], lim[j]):
                raise TrajectoryError(
                    f'{path}: {names[j]} {what} reaches {reached[j]:.6g} {unit}, above the '
                    f'limit {lim[j]:.6g} {unit}')
