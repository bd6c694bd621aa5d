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
Command supervision of the controller: fresh states, smooth starts, bounded safe mode.

ROS-free (no rclpy) building blocks that the controller node's safety layer
(:mod:`manip_control.nodes.controller_safety`) combines with the mode supervisor of
:mod:`manip_control.safety`. All times are seconds on a clock chosen by the caller.

Fresh states (:class:`StampGate`)
    A joint state counts as fresh only if its stamp is later than the last accepted one and
    its age ``a = t_wall - (stamp - clock_offset)`` satisfies
    ``-max_clock_error <= a <= state_timeout``, at any age (there is no "implausible, so
    count from the arrival" escape). ``clock_offset`` is the driver's stamp clock minus this
    host's wall clock, a parameter; the offset measured at start-up is reported when states
    are refused for their age, so a driver on an unsynchronized clock is refused with the
    measured figure, never silently accepted.
Resume hysteresis (:class:`ResumeGate`)
    After a fault, normal mode needs ``resume_states`` consecutive fresh, advancing,
    in-envelope states.
Re-planned reference (:class:`ReferenceBlend`)
    On activation, on a resume and when a reference jumps by more than ``step_limit``, the
    reference in use starts from the measured position (or the reference in use) and blends
    into the requested one with a quintic offset: ``r_used(t) = r(t) + D s(tau)``,
    ``tau = (t - t0) / T``, ``s = 1 - (10 tau^3 - 15 tau^4 + 6 tau^5)`` (s = 1 -> 0 with zero
    slope and curvature at both ends), ``T = max(1.875 |D| / v_max, sqrt(5.7735 |D| / a_max))``
    so that the blend's own speed stays below ``v_max`` and its acceleration below ``a_max``.
Torque-rate limit (:class:`TorqueRateLimiter`)
    ``|tau_k - tau_{k-1}| <= rate * dt`` per joint on every published command.
Deactivation ramp (:func:`stop_ramp`)
    From the command at deactivation to the hold over the first half of ``stop_time``, then
    from the hold to zero over the second half.
Multi-point references (:class:`TrajectoryBuffer`)
    A JointTrajectory with several points is followed by its ``time_from_start``: piecewise
    cubic Hermite interpolation between the points, starting from the reference in use.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import fields
import math
from typing import Any, Mapping, Sequence

from manip_control.parameters import _build
from manip_control.parameters import _finite
from manip_control.parameters import _opt
from manip_control.parameters import _positive
from manip_control.parameters import _vector
from manip_control.parameters import ParameterError

__all__ = ['CommandSafetyParameters', 'command_safety_from_dict', 'StampGate', 'ResumeGate',
           'quintic_blend', 'blend_duration', 'ReferenceBlend', 'TorqueRateLimiter',
           'stop_ramp', 'TrajectoryBuffer', 'trajectory_from_points', 'TrajectoryError',
           'clamp_acceleration']

#: Peak speed of the quintic blend ``s`` per unit of offset and of 1/T.
QUINTIC_PEAK_SPEED = 1.875
#: Peak acceleration of the quintic blend per unit of offset and of 1/T^2 (10 / sqrt(3)).
QUINTIC_PEAK_ACCELERATION = 10.0 / math.sqrt(3.0)


# --------------------------------------------------------------------------------------------
# parameters


@dataclass(frozen=True)
class CommandSafetyParameters:
    """
    Settings of the command supervision (``safety.*`` ROS parameters, fixed at start).

    Attributes
    ----------
    clock_offset : float
        Driver stamp clock minus this host's wall clock [s] (0: synchronized clocks or the
        same host), finite, ``|clock_offset| <= 1e6``.
    max_clock_error : float
        Tolerance on the clock offset [s], > 0: a state stamped further in the future than
        this is refused (default 0.05 s).
    resume_states : int
        Consecutive fresh, advancing, in-envelope states needed to leave safe mode after a
        fault, >= 1 (default 10).
    hold_timeout : float
        Longest safe hold [s], > 0: then zero torque, latched until re-activation
        (default 2 s).
    stop_time : float
        Deactivation ramp [s], > 0: current command -> hold over the first half, hold -> zero
        over the second (default 1 s).
    torque_rate_limit : tuple of 2 float
        Real time: largest torque change per joint [N·m/s], > 0 (default 2000, 1000: full
        default torque in 45 / 25 ms).
    reference_acceleration_limit : tuple of 2 float
        Largest reference acceleration used [rad/s^2], > 0; larger ones are clamped and
        counted (default 5, 10: what the default arm can follow within its torque limits,
        about 27 / 6.5 N·m of inertial torque on top of gravity; the shipped trajectories
        need at most 1.2 / 3.3).
    reference_step_limit : float
        A requested reference position further than this from the reference in use (or from
        the measured position at a start) is re-planned [rad], > 0 (default 0.02).
    replan_velocity : float
        Peak speed of a re-plan blend [rad/s], > 0 (default 0.5).
    replan_acceleration : float
        Peak acceleration of a re-plan blend [rad/s^2], > 0 (default 2).

    """

    clock_offset: float = _opt(0.0)
    max_clock_error: float = _opt(0.05)
    resume_states: int = _opt(10)
    hold_timeout: float = _opt(2.0)
    stop_time: float = _opt(1.0)
    torque_rate_limit: tuple = _opt((2000.0, 1000.0))
    reference_acceleration_limit: tuple = _opt((5.0, 10.0))
    reference_step_limit: float = _opt(0.02)
    replan_velocity: float = _opt(0.5)
    replan_acceleration: float = _opt(2.0)

    def __post_init__(self):
        _validate(self, 'safety')


def _validate(p: CommandSafetyParameters, path: str) -> None:
    off = _finite(f'{path}.clock_offset', p.clock_offset)
    if abs(off) > 1.0e6:
        raise ParameterError(f'{path}.clock_offset: must be within +-1e6 s (got {off})')
    _positive(f'{path}.max_clock_error', p.max_clock_error)
    n = p.resume_states
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 100000:
        raise ParameterError(f'{path}.resume_states: must be an integer in [1, 100000] '
                             f'(got {n!r})')
    for name in ('hold_timeout', 'stop_time', 'reference_step_limit', 'replan_velocity',
                 'replan_acceleration'):
        _positive(f'{path}.{name}', getattr(p, name))
    _vector(f'{path}.torque_rate_limit', p.torque_rate_limit, check=_positive)
    _vector(f'{path}.reference_acceleration_limit', p.reference_acceleration_limit,
            check=_positive)


COMMAND_SAFETY_FIELDS = tuple(f.name for f in fields(CommandSafetyParameters))


def command_safety_from_dict(data: Mapping[str, Any] | None,
                             path: str = 'safety') -> CommandSafetyParameters:
    """
    Build and validate :class:`CommandSafetyParameters` (unknown keys rejected).

    Raises
    ------
    ParameterError
        Naming the parameter (e.g. ``safety.hold_timeout``) and the reason.

    """
    p = _build(CommandSafetyParameters, {} if data is None else dict(data), path)
    _validate(p, path)
    return p


# --------------------------------------------------------------------------------------------
# fresh states


class StampGate:
    """
    Freshness of joint-state stamps: advancing and younger than the timeout, at any age.

    Parameters
    ----------
    timeout : float
        Largest age of a fresh state [s] (the state watchdog's ``state_timeout``).
    clock_offset : float
        Driver stamp clock minus this host's wall clock [s].
    max_clock_error : float
        Largest tolerated negative age (a stamp from the future) [s].

    """

    NOT_ADVANCING = 'not_advancing'
    TOO_OLD = 'too_old'
    FUTURE = 'future'
    UNSTAMPED = 'unstamped'

    def __init__(self, timeout: float, clock_offset: float = 0.0,
                 max_clock_error: float = 0.05):
        self.timeout = float(timeout)
        self.clock_offset = float(clock_offset)
        self.max_clock_error = float(max_clock_error)
        self.counts: dict[str, int] = {}
        self.reset()

    def reset(self) -> None:
        """Forget the last stamp and the start-up offset measurement (activation)."""
        self.last_stamp: int | None = None
        self.accepted_since_reset = 0
        self.measured_offset: float | None = None

    def check(self, stamp_ns: int, wall_now: float,
              use_age: bool = True) -> tuple[str | None, float]:
        """
        Check one stamp [ns] at ``wall_now`` [s] (this host's wall clock).

        Returns ``(why, age)``: ``why`` None for a fresh state (then recorded as the last
        stamp), or one of ``not_advancing``, ``too_old``, ``future``, ``unstamped``
        (counted); ``age = wall_now - (stamp - clock_offset)`` [s]. With ``use_age`` false
        only the advance of the stamp is checked (a driver whose clock cannot be related to
        this host's) and the age returned is 0.
        """
        if stamp_ns <= 0:
            return self._refuse(self.UNSTAMPED), math.inf
        offset = stamp_ns * 1e-9 - wall_now
        age = -(offset - self.clock_offset)
        if self.last_stamp is not None and stamp_ns <= self.last_stamp:
            return self._refuse(self.NOT_ADVANCING), age
        if not use_age:
            self.last_stamp = stamp_ns
            self.accepted_since_reset += 1
            return None, 0.0
        if age > self.timeout:
            if self.accepted_since_reset == 0:
                self.measured_offset = offset
            return self._refuse(self.TOO_OLD), age
        if age < -self.max_clock_error:
            if self.accepted_since_reset == 0:
                self.measured_offset = offset
            return self._refuse(self.FUTURE), age
        self.last_stamp = stamp_ns
        self.accepted_since_reset += 1
        if self.accepted_since_reset == 1:
            self.measured_offset = offset
        return None, age

    def _refuse(self, why: str) -> str:
        self.counts[why] = self.counts.get(why, 0) + 1
        return why

    def clock_problem(self) -> str:
        """
        Describe an implausible clock offset measured at start-up in one line.

        Non-empty while no state was fresh since :meth:`reset` and the last one was refused
        for its age; else ``''``.
        """
        if self.accepted_since_reset or self.measured_offset is None:
            return ''
        off = self.measured_offset
        return (f'driver stamps are {abs(off):.3f} s {"behind" if off < 0 else "ahead of"} '
                f"this host's wall clock; expected offset {self.clock_offset:g} s within "
                f'-{self.timeout:g} / +{self.max_clock_error:g} s: synchronize the clocks or '
                f'set safety.clock_offset')


class ResumeGate:
    """
    Hysteresis for leaving safe mode: ``n`` consecutive good states after a fault.

    :meth:`fault` arms the gate; :meth:`good` counts a good state and returns True once the
    gate opens; :meth:`bad` restarts the count.
    """

    def __init__(self, n: int):
        self.n = int(n)
        self.pending = False
        self.count = 0

    def fault(self) -> None:
        """Record a fault: the next resume needs ``n`` good states."""
        self.pending = True
        self.count = 0

    def bad(self) -> None:
        """Record a refused or out-of-envelope state: start counting again."""
        self.count = 0

    def good(self) -> bool:
        """Count one good state; True when the gate is (now) open."""
        if not self.pending:
            return True
        self.count += 1
        if self.count >= self.n:
            self.pending = False
            return True
        return False

    def reset(self) -> None:
        """Open (activation)."""
        self.pending = False
        self.count = 0


# --------------------------------------------------------------------------------------------
# re-planned reference


def quintic_blend(tau: float) -> tuple[float, float, float]:
    """
    Return ``(s, ds/dtau, d2s/dtau2)`` of ``s = 1 - (10 tau^3 - 15 tau^4 + 6 tau^5)``.

    ``s`` falls from 1 at ``tau <= 0`` to 0 at ``tau >= 1`` with zero slope and curvature at
    both ends.
    """
    if tau <= 0.0:
        return 1.0, 0.0, 0.0
    if tau >= 1.0:
        return 0.0, 0.0, 0.0
    t2 = tau * tau
    t3 = t2 * tau
    return (1.0 - (10.0 * t3 - 15.0 * t3 * tau + 6.0 * t3 * t2),
            -(30.0 * t2 - 60.0 * t3 + 30.0 * t2 * t2),
            -(60.0 * tau - 180.0 * t2 + 120.0 * t3))


def blend_duration(delta: Sequence[float], v_max: float, a_max: float) -> float:
    """
    Duration [s] of a quintic blend over the offsets ``delta`` [rad].

    ``T = max_j max(1.875 |D_j| / v_max, sqrt(5.7735 |D_j| / a_max))``: the blend's peak
    speed ``1.875 |D| / T`` stays <= ``v_max`` [rad/s] and its peak acceleration
    ``5.7735 |D| / T^2`` <= ``a_max`` [rad/s^2].
    """
    d = max(abs(float(v)) for v in delta)
    return max(QUINTIC_PEAK_SPEED * d / v_max, math.sqrt(QUINTIC_PEAK_ACCELERATION * d / a_max))


class ReferenceBlend:
    """
    Offset blend from a start position into the requested reference.

    ``r_used(t) = r(t) + D s((t - t0) / T)`` (see the module docstring).

    Parameters
    ----------
    v_max, a_max : float
        Peak speed [rad/s] and acceleration [rad/s^2] of the blend itself.

    """

    def __init__(self, v_max: float, a_max: float):
        self.v_max = float(v_max)
        self.a_max = float(a_max)
        self.count = 0
        self.reset()

    def reset(self) -> None:
        """No blend in progress."""
        self.delta: tuple | None = None
        self.t0 = 0.0
        self.duration = 0.0

    @property
    def active(self) -> bool:
        """Return True while a blend is in progress."""
        return self.delta is not None

    def start(self, t: float, start_q: Sequence[float], q_req: Sequence[float]) -> float:
        """Blend from ``start_q`` into the requested ``q_req`` from ``t``; the duration [s]."""
        self.delta = tuple(float(a) - float(b) for a, b in zip(start_q, q_req))
        self.t0 = float(t)
        self.duration = blend_duration(self.delta, self.v_max, self.a_max)
        self.count += 1
        if self.duration <= 0.0:
            self.reset()
        return self.duration

    def apply(self, t: float, q, qd, qdd) -> tuple[tuple, tuple, tuple]:
        """Return the reference in use at ``t`` for the requested ``(q, qd, qdd)``."""
        if self.delta is None:
            return q, qd, qdd
        tau = (t - self.t0) / self.duration
        if tau >= 1.0:
            self.reset()
            return q, qd, qdd
        s, ds, dds = quintic_blend(tau)
        T = self.duration
        d = self.delta
        return (tuple(q[k] + d[k] * s for k in range(len(d))),
                tuple(qd[k] + d[k] * ds / T for k in range(len(d))),
                tuple(qdd[k] + d[k] * dds / (T * T) for k in range(len(d))))


def clamp_acceleration(qdd: Sequence[float], limit: Sequence[float]) -> tuple[tuple, bool]:
    """Return ``(qdd clamped to +-limit, clamped)`` [rad/s^2] (``qdd`` itself when inside)."""
    a0, a1 = qdd[0], qdd[1]
    l0, l1 = limit[0], limit[1]
    if -l0 <= a0 <= l0 and -l1 <= a1 <= l1:        # the 1 kHz path
        return qdd, False
    return (min(max(a0, -l0), l0), min(max(a1, -l1), l1)), True


# --------------------------------------------------------------------------------------------
# torque commands


class TorqueRateLimiter:
    """
    Per-joint torque-rate limit ``|tau_k - tau_{k-1}| <= rate * dt`` [N·m].

    Parameters
    ----------
    rate : sequence of float
        Largest rate of change per joint [N·m/s].

    """

    def __init__(self, rate: Sequence[float]):
        self.rate = tuple(float(r) for r in rate)
        self.limited = 0
        self.last: tuple | None = None

    def reset(self, value: Sequence[float] | None = None) -> None:
        """Start again from ``value`` [N·m] (None: the next command passes unchanged)."""
        self.last = None if value is None else tuple(float(v) for v in value)

    def limit(self, tau: Sequence[float], dt: float) -> tuple[tuple, bool]:
        """Return ``(tau limited, limited)`` for a command ``dt`` [s] after the last one."""
        tau = tuple(float(v) for v in tau)
        last = self.last
        if last is None:
            self.last = tau
            return tau, False
        out = []
        limited = False
        for k, v in enumerate(tau):
            step = self.rate[k] * dt
            lo, hi = last[k] - step, last[k] + step
            if v < lo or v > hi:
                v = lo if v < lo else hi
                limited = True
            out.append(v)
        out = tuple(out)
        self.last = out
        if limited:
            self.limited += 1
        return out, limited


def stop_ramp(elapsed: float, duration: float, tau0: Sequence[float],
              hold: Sequence[float]) -> tuple | None:
    """
    Return the deactivation command ``elapsed`` [s] into a ramp of ``duration`` [s].

    First half: ``(1 - u) tau0 + u hold`` with ``u = 2 elapsed / duration``; second half:
    ``(1 - u) hold`` with ``u = 2 elapsed / duration - 1``; None once the ramp is over
    (the final command is zero torque).
    """
    if elapsed >= duration:
        return None
    u = 2.0 * max(elapsed, 0.0) / duration
    if u <= 1.0:
        return tuple((1.0 - u) * a + u * b for a, b in zip(tau0, hold))
    u -= 1.0
    return tuple((1.0 - u) * b for b in hold)


# --------------------------------------------------------------------------------------------
# multi-point references


class TrajectoryError(ValueError):
    """A multi-point reference that cannot be followed (the reason names the field)."""


class TrajectoryBuffer:
    """
    A multi-point reference followed by its ``time_from_start``.

    Piecewise cubic Hermite through the knots ``(t_i, q_i, v_i)``: position and velocity
    continuous, acceleration from the cubic. Before the first knot the reference is the first
    knot's position, after the last one the last position with zero velocity.

    Parameters
    ----------
    t0 : float
        Time of ``time_from_start = 0`` [s] on the caller's clock.
    times : sequence of float
        Knot times from ``t0`` [s], strictly increasing, the first >= 0.
    positions : sequence of sequences
        Knot positions [rad] (one per joint).
    velocities : sequence of sequences
        Knot velocities [rad/s].

    """

    def __init__(self, t0: float, times, positions, velocities):
        self.t0 = float(t0)
        self.times = [float(t) for t in times]
        self.q = [tuple(p) for p in positions]
        self.v = [tuple(p) for p in velocities]
        self.end = self.t0 + self.times[-1]
        self._k = 0

    def finished(self, t: float) -> bool:
        """Return True once ``t`` is past the last knot."""
        return t >= self.end

    def sample(self, t: float) -> tuple[tuple, tuple, tuple]:
        """Return ``(q, qd, qdd)`` at ``t`` [s]."""
        s = t - self.t0
        times = self.times
        n = len(times)
        if s < times[0]:
            z = (0.0,) * len(self.q[0])
            return self.q[0], z, z
        if s >= times[-1]:
            z = (0.0,) * len(self.q[-1])
            return self.q[-1], z, z
        k = self._k if self._k < n - 1 and times[self._k] <= s else 0
        while times[k + 1] < s:
            k += 1
        self._k = k
        h = times[k + 1] - times[k]
        u = (s - times[k]) / h
        u2, u3 = u * u, u * u * u
        h00, h10, h01, h11 = 2 * u3 - 3 * u2 + 1, u3 - 2 * u2 + u, -2 * u3 + 3 * u2, u3 - u2
        d00, d10, d01, d11 = 6 * u2 - 6 * u, 3 * u2 - 4 * u + 1, -6 * u2 + 6 * u, 3 * u2 - 2 * u
        e00, e10, e01, e11 = 12 * u - 6, 6 * u - 4, -12 * u + 6, 6 * u - 2
        qa, qb, va, vb = self.q[k], self.q[k + 1], self.v[k], self.v[k + 1]
        q = tuple(h00 * qa[j] + h10 * h * va[j] + h01 * qb[j] + h11 * h * vb[j]
                  for j in range(len(qa)))
        qd = tuple((d00 * qa[j] + d01 * qb[j]) / h + d10 * va[j] + d11 * vb[j]
                   for j in range(len(qa)))
        qdd = tuple((e00 * qa[j] + e01 * qb[j]) / (h * h) + (e10 * va[j] + e11 * vb[j]) / h
                    for j in range(len(qa)))
        return q, qd, qdd


def trajectory_from_points(t0: float, start_q: Sequence[float], times: Sequence[float],
                           positions: Sequence[Sequence[float]],
                           velocities: Sequence[Sequence[float] | None]) -> TrajectoryBuffer:
    """
    Build a :class:`TrajectoryBuffer` from the reference in use through the points.

    The trajectory starts at ``start_q`` (at rest) at ``t0`` and then follows the points.

    Points without velocities get ``(q_{i+1} - q_{i-1}) / (t_{i+1} - t_{i-1})`` inside and
    zero at the last point.

    Raises
    ------
    TrajectoryError
        Times not finite, negative or not strictly increasing; a knot at ``t = 0`` whose
        position differs from ``start_q`` (a step).

    """
    ts = [float(t) for t in times]
    for k, t in enumerate(ts):
        if not math.isfinite(t) or t < 0.0:
            raise TrajectoryError(f'points[{k}].time_from_start: must be finite and >= 0 '
                                  f'(got {t})')
        if k and t <= ts[k - 1]:
            raise TrajectoryError(f'points[{k}].time_from_start: must be later than '
                                  f'points[{k - 1}] ({t} <= {ts[k - 1]})')
    knots_t = [0.0] + ts
    knots_q = [tuple(float(v) for v in start_q)] + [tuple(p) for p in positions]
    if ts[0] == 0.0:
        if any(abs(a - b) > 1e-9 for a, b in zip(knots_q[0], knots_q[1])):
            raise TrajectoryError('points[0].time_from_start: 0 with a position away from the '
                                  'reference in use (a step)')
        knots_t, knots_q = knots_t[1:], knots_q[1:]
        given = list(velocities)
    else:
        given = [(0.0,) * len(knots_q[0])] + list(velocities)
    n = len(knots_t)
    vel = []
    for k in range(n):
        if given[k] is not None:
            vel.append(tuple(float(v) for v in given[k]))
        elif k == n - 1 or k == 0:
            vel.append((0.0,) * len(knots_q[k]))
        else:
            dt = knots_t[k + 1] - knots_t[k - 1]
            vel.append(tuple((b - a) / dt for a, b in zip(knots_q[k - 1], knots_q[k + 1])))
    return TrajectoryBuffer(t0, knots_t, knots_q, vel)
