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
    its age ``a = t_wall - (stamp - o)`` satisfies ``-max_clock_error <= a <= T``, at any age
    (there is no "implausible, so count from the arrival" escape). ``o`` is the driver's stamp
    clock minus this host's wall clock: ``safety.clock_offset`` at start; the offset measured
    at start-up is reported when states are refused for their age, so a driver on an
    unsynchronized clock is refused with the measured figure, never silently accepted.
State timeout in periods of the measured state rate
    ``T = max(state_timeout, min(n P, state_timeout_max))`` with ``n`` =
    ``state_timeout_periods`` and ``P`` the median stamp interval of the accepted states,
    divided by the difference of their publication sequence numbers when known (the
    driver's period even when the reader skipped or the link lost samples;
    :class:`StatePeriod`, over windows of 8 then 64 intervals, so up to 50 % loss does not
    move it); ``T`` changes only when the new value differs by more than 10 % (hysteresis).
Clock steps (:meth:`StampGate.check`)
    Once states have been accepted, a step of the driver's clock is a jump of the offset
    ``o_k = stamp_k - t_wall,k`` between two consecutive states, ``|o_k - o_{k-1}| > T/4``,
    arriving without a gap (``t_wall,k - t_wall,k-1 <= max(T, 0.1 s)``: a loaded host may
    not run the controller for tens of ms), followed by a run of ``clock_step_states``
    states whose stamps advance, are none of the last 65536 accepted stamps (a replay),
    deviate from ``o`` by more than ``T/4`` in the same direction, at most
    ``max_clock_step + T``, and agree with each other within ``T``. Within a run, a state
    with an accepted stamp (a backward step meets the stamps before it) is not counted and
    does not end the run; a state still on the stepped clock, arriving without a gap, but
    inconsistent with the run (a stall, a stamp not advancing) starts a new run, so one
    late state does not leave the step unconfirmed for good.
    Then ``o`` is re-estimated as the run's largest ``o_k`` (the least delayed state), the
    step is counted once and the run's last state is fresh; the controller resumes through
    its resume hysteresis. A frozen stream (stamps not advancing), a replay (stamps already
    accepted) and a stream that stopped for longer than ``max(T, 0.1 s)`` (a backlog
    delivered late) never start a run, so they never count as fresh.
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

from collections import deque
from dataclasses import dataclass
from dataclasses import fields
import math
from typing import Any, Callable, Mapping, Sequence

from manip_control.parameters import _build
from manip_control.parameters import _finite
from manip_control.parameters import _opt
from manip_control.parameters import _positive
from manip_control.parameters import _vector
from manip_control.parameters import ParameterError
import numpy as np

__all__ = ['CommandSafetyParameters', 'command_safety_from_dict', 'StampGate', 'StatePeriod',
           'ResumeGate',
           'quintic_blend', 'blend_duration', 'ReferenceBlend', 'TorqueRateLimiter',
           'closest_bounded_step',
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
    torque_rate_limit : tuple of n float
        Real time: largest torque change per joint [N·m/s], > 0 (default 2000, 1000: full
        default torque in 45 / 25 ms).
    reference_acceleration_limit : tuple of n float
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
    state_timeout_periods : float
        The state timeout in periods of the measured state rate, >= 1 (default 5):
        ``T = max(state_timeout, min(n P, state_timeout_max))``.
    state_timeout_max : float
        Ceiling of the rate-derived part of the state timeout [s], > 0 (default 0.1).
    clock_step_states : int
        Consecutive consistent states that confirm a step of the driver's clock, after which
        the clock offset is re-estimated; 0: never re-estimate (default 20).
    max_clock_step : float
        Largest clock step re-estimated [s], > 0 (default 1); larger ones stay refused.

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
    state_timeout_periods: float = _opt(5.0)
    state_timeout_max: float = _opt(0.1)
    clock_step_states: int = _opt(20)
    max_clock_step: float = _opt(1.0)

    def __post_init__(self):
        _validate(self, 'safety')


def _validate(p: CommandSafetyParameters, path: str, n: int | None = None) -> None:
    off = _finite(f'{path}.clock_offset', p.clock_offset)
    if abs(off) > 1.0e6:
        raise ParameterError(f'{path}.clock_offset: must be within +-1e6 s (got {off})')
    _positive(f'{path}.max_clock_error', p.max_clock_error)
    resume = p.resume_states
    if isinstance(resume, bool) or not isinstance(resume, int) or not 1 <= resume <= 100000:
        raise ParameterError(f'{path}.resume_states: must be an integer in [1, 100000] '
                             f'(got {resume!r})')
    k = p.clock_step_states
    if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= 100000:
        raise ParameterError(f'{path}.clock_step_states: must be an integer in [0, 100000] '
                             f'(got {k!r})')
    periods = _finite(f'{path}.state_timeout_periods', p.state_timeout_periods)
    if periods < 1.0:
        raise ParameterError(f'{path}.state_timeout_periods: must be >= 1 (got {periods})')
    for name in ('hold_timeout', 'stop_time', 'reference_step_limit', 'replan_velocity',
                 'replan_acceleration', 'state_timeout_max', 'max_clock_step'):
        _positive(f'{path}.{name}', getattr(p, name))
    rate = p.torque_rate_limit
    if n is None:       # the joints: given, else the length of torque_rate_limit
        n = len(rate) if hasattr(rate, '__len__') and not isinstance(rate, str) and rate else 2
    _vector(f'{path}.torque_rate_limit', rate, n, check=_positive)
    _vector(f'{path}.reference_acceleration_limit', p.reference_acceleration_limit, n,
            check=_positive)


COMMAND_SAFETY_FIELDS = tuple(f.name for f in fields(CommandSafetyParameters))


def command_safety_from_dict(data: Mapping[str, Any] | None, path: str = 'safety',
                             n_joints: int | None = None) -> CommandSafetyParameters:
    """
    Build and validate :class:`CommandSafetyParameters` (unknown keys rejected).

    ``n_joints``: the length of every per-joint list (default: that of torque_rate_limit).

    Raises
    ------
    ParameterError
        Naming the parameter (e.g. ``safety.hold_timeout``) and the reason.

    """
    p = _build(CommandSafetyParameters, {} if data is None else dict(data), path)
    _validate(p, path, n_joints)
    return p


# --------------------------------------------------------------------------------------------
# fresh states


class StatePeriod:
    """
    Period of the joint states from their stamps: the median interval of a window.

    The first estimate after 8 intervals, then one per 64; a lost state doubles one interval,
    so the median holds up to 50 % loss. Intervals are of consecutive accepted stamps [s].
    """

    FIRST = 8
    WINDOW = 64

    def __init__(self):
        self.period: float | None = None
        self._window: list[float] = []

    def reset(self) -> None:
        """Forget the estimate."""
        self.period = None
        self._window = []

    def add(self, interval: float) -> bool:
        """Add one stamp interval [s]; True when a new estimate is ready."""
        if not interval > 0.0:
            return False
        w = self._window
        w.append(interval)
        if len(w) >= (self.FIRST if self.period is None else self.WINDOW):
            w.sort()
            n = len(w)
            self.period = w[n // 2] if n % 2 else 0.5 * (w[n // 2 - 1] + w[n // 2])
            self._window = []
            return True
        return False


class StampGate:
    """
    Freshness of joint-state stamps: advancing and younger than the timeout, at any age.

    Parameters
    ----------
    timeout : float
        Smallest state timeout [s] (``safety.state_timeout``); the timeout in use,
        :attr:`timeout`, is ``max(timeout, min(periods P, timeout_max))`` with ``P`` the
        measured state period.
    clock_offset : float
        Driver stamp clock minus this host's wall clock [s] (the start value of the estimate
        :attr:`offset`).
    max_clock_error : float
        Largest tolerated negative age (a stamp from the future) [s].
    periods : float
        The state timeout in state periods (``safety.state_timeout_periods``).
    timeout_max : float
        Ceiling of the rate-derived timeout [s].
    step_states : int
        States confirming a clock step (0: no re-estimation).
    max_step : float
        Largest clock step re-estimated [s].

    """

    NOT_ADVANCING = 'not_advancing'
    TOO_OLD = 'too_old'
    FUTURE = 'future'
    UNSTAMPED = 'unstamped'
    #: accepted stamps remembered to recognise a replay
    HISTORY = 65536
    #: a clock step must show between two states arriving at most max(timeout, GAP) apart [s]
    GAP = 0.1

    def __init__(self, timeout: float, clock_offset: float = 0.0,
                 max_clock_error: float = 0.05, periods: float = 5.0,
                 timeout_max: float = 0.1, step_states: int = 0, max_step: float = 1.0):
        self.base_timeout = float(timeout)
        self.timeout = float(timeout)
        self.clock_offset = float(clock_offset)
        self.offset = float(clock_offset)
        self.max_clock_error = float(max_clock_error)
        self.periods = float(periods)
        self.timeout_max = float(timeout_max)
        self.step_states = int(step_states)
        self.max_step = float(max_step)
        self.rate = StatePeriod()
        self.counts: dict[str, int] = {}
        self.steps = 0
        self.last_step: float | None = None
        self.step_note = ''
        self._seen: set = set()
        self._seen_order = deque()
        self._prev: tuple | None = None       # (wall, offset) of the previous state
        self._run: list | None = None         # [count, sign, min_o, max_o, last_stamp, wall]
        self.reset()

    def reset(self) -> None:
        """Forget the last stamp and the start-up offset measurement (activation)."""
        self.last_stamp: int | None = None
        self.accepted_since_reset = 0
        self.measured_offset: float | None = None
        self._prev = None
        self._run = None
        self._last_seq: int | None = None

    def set_base_timeout(self, timeout: float) -> None:
        """Set ``safety.state_timeout`` (runtime change) and the timeout in use."""
        self.base_timeout = float(timeout)
        self._update_timeout(force=True)

    def _update_timeout(self, force: bool = False) -> None:
        p = self.rate.period
        t = self.base_timeout if p is None else max(
            self.base_timeout, min(self.periods * p, self.timeout_max))
        if force or abs(t - self.timeout) > 0.1 * self.timeout:
            self.timeout = t

    def check(self, stamp_ns: int, wall_now: float, use_age: bool = True,
              seq: int | None = None) -> tuple[str | None, float]:
        """
        Check one stamp [ns] at ``wall_now`` [s] (this host's wall clock).

        Returns ``(why, age)``: ``why`` None for a fresh state (then recorded as the last
        stamp), or one of ``not_advancing``, ``too_old``, ``future``, ``unstamped``
        (counted); ``age = wall_now - (stamp - offset)`` [s]. With ``use_age`` false
        only the advance of the stamp is checked (a driver whose clock cannot be related to
        this host's) and the age returned is 0. A confirmed clock step re-estimates
        :attr:`offset` (:attr:`steps`, :attr:`last_step`, :attr:`step_note`). ``seq`` is the
        publisher's sequence number of the sample when known: the state period is then
        ``(stamp - last stamp) / (seq - last seq)``, the driver's own period even when this
        reader skipped samples (it keeps only the newest) or the link lost some.
        """
        if stamp_ns <= 0:
            return self._refuse(self.UNSTAMPED), math.inf
        offset = stamp_ns * 1e-9 - wall_now
        age = self.offset - offset
        last = self.last_stamp
        if last is not None and stamp_ns <= last:
            why = self.NOT_ADVANCING
        elif not use_age:
            why = None
        elif age > self.timeout:
            why = self.TOO_OLD
        elif age < -self.max_clock_error:
            why = self.FUTURE
        else:
            why = None
        stepped = False
        if self.step_states and self.accepted_since_reset:
            stepped = self._step(stamp_ns, wall_now, offset, age)
            if stepped:
                why = None                      # a confirmed step: this state is fresh
                age = self.offset - offset
        self._prev = (wall_now, offset)
        if why is not None:
            if why in (self.TOO_OLD, self.FUTURE) and self.accepted_since_reset == 0:
                self.measured_offset = offset
            return self._refuse(why), age
        if last is not None and self._run is None and stamp_ns > last and not stepped:
            n = 1
            if seq is not None and self._last_seq is not None and seq > self._last_seq:
                n = seq - self._last_seq
            if self.rate.add((stamp_ns - last) * 1e-9 / n):
                self._update_timeout()
        self._last_seq = seq
        self.last_stamp = stamp_ns
        self.accepted_since_reset += 1
        if self.accepted_since_reset == 1:
            self.measured_offset = offset
        seen = self._seen
        seen.add(stamp_ns)
        order = self._seen_order
        order.append(stamp_ns)
        if len(order) > self.HISTORY:
            seen.discard(order.popleft())
        return None, (age if use_age else 0.0)

    def _step(self, stamp_ns: int, wall: float, offset: float, age: float) -> bool:
        """Follow a possible clock step; True when this state confirms one."""
        dev = -age                              # offset - self.offset
        thr = 0.25 * self.timeout
        cand = thr < abs(dev) <= self.max_step + self.timeout
        seen = stamp_ns in self._seen           # a stamp already accepted: a replay
        run = self._run
        prev = self._prev
        joined = prev is not None and wall - prev[0] <= max(self.timeout, self.GAP)
        if run is not None:
            follows = cand and (dev > 0.0) == run[1]
            if follows and seen:
                # a backward step meets a stamp accepted before it: not counted, but the
                # run of the stepped clock goes on (never fresh: only unseen stamps count)
                return False
            if (follows and stamp_ns > run[4]
                    and max(run[3], offset) - min(run[2], offset) <= self.timeout):
                run[0] += 1
                run[2] = min(run[2], offset)
                run[3] = max(run[3], offset)
                run[4] = stamp_ns
                run[5] = wall
            elif follows and joined:
                # still on the stepped clock without a gap, but not consistent with the run
                # (a stall spread the offsets, a stamp not advancing): a new run from here
                self._run = [1, run[1], offset, offset, stamp_ns, wall]
                return False
            else:
                run = self._run = None
        if run is None:
            if cand and not seen and joined and abs(offset - prev[1]) > thr:
                self._run = [1, dev > 0.0, offset, offset, stamp_ns, wall]
            return False
        if run[0] < self.step_states:
            return False
        new = run[3]
        step = new - self.offset
        self.offset = new
        self.steps += 1
        self.last_step = step
        self.step_note = (f'driver clock step of {step:+.6f} s: offset re-estimated from '
                          f'{run[0]} consistent states (now {new:+.6f} s)')
        self._run = None
        if self.last_stamp is not None and stamp_ns <= self.last_stamp:
            self.last_stamp = None              # a backward step: the stamps advance from here
        return True

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
                f"this host's wall clock; expected offset {self.offset:g} s within "
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
    if all(-lk <= a <= lk for a, lk in zip(qdd, limit)):        # the 1 kHz path
        return qdd, False
    return tuple(min(max(a, -lk), lk) for a, lk in zip(qdd, limit)), True


# --------------------------------------------------------------------------------------------
# torque commands


#: Active-set iterations of the rate limiter's bounded step in a control tick: each iterate
#: is in the box and no farther from the step asked than the uniformly scaled step; measured
#: on hold entries (MuJoCo Panda and xarm7, 0.5-1.0x the velocity limits, 5 ms delay), 3 give
#: the velocity peaks of the exact solution (0.93 / 0.94x on the xarm7; 2: 0.96 / 0.94x, 1:
#: 1.08 / 1.04x) at a fraction of the exact solution's cost (bench/bench_rate_limit.py).
LIMITER_ITERATIONS = 3


def closest_bounded_step(mass: np.ndarray, step: np.ndarray, bound: np.ndarray,
                         iterations: int = 0) -> np.ndarray:
    """
    Return the torque step within ``|x_k| <= bound_k`` closest to ``step`` in acceleration.

    Minimises ``|M^-1 (x - step)|^2`` over the box: of the torque changes the rate limit
    allows, the one whose joint accelerations differ least from those ``step`` asks for. A
    strictly convex QP, solved by a primal active set from the uniformly scaled step (which
    is feasible); every iterate stays in the box, so an early end (the iteration cap, a
    numerical failure) still returns a bounded step.

    Parameters
    ----------
    mass : ndarray, shape (n, n)
        Mass matrix ``M(q)`` [kg·m^2] (symmetric positive definite).
    step : ndarray, shape (n,)
        Requested torque change [N·m].
    bound : ndarray, shape (n,)
        Largest change per joint [N·m], > 0.
    iterations : int
        Most active-set iterations; 0: until optimal (at most ``4 n + 4``).

    Returns
    -------
    ndarray, shape (n,)
        The bounded step [N·m].

    """
    step = np.asarray(step, float)
    bound = np.asarray(bound, float)
    ratio = np.abs(step) / bound
    worst = float(ratio.max())
    if worst <= 1.0:
        return step.copy()
    x = step / worst                                    # the uniformly scaled step
    active = ratio >= worst * (1.0 - 1e-12)             # its limiting joints, at their bounds
    tol_move = 1e-12 * float(bound.max())
    try:
        minv = np.linalg.inv(mass)
        hessian = minv.T @ minv
        tol_mult = -1e-12 * float(np.abs(hessian).max()) * float(bound.max())
        for _ in range(iterations or 4 * len(step) + 4):
            f = np.flatnonzero(~active)
            a = np.flatnonzero(active)
            move = np.zeros_like(x)
            if len(f):
                rows = hessian[f]
                rhs = rows[:, a] @ (step[a] - x[a])
                move[f] = step[f] + np.linalg.solve(rows[:, f], rhs) - x[f]
            if len(f) == 0 or np.max(np.abs(move)) <= tol_move:
                # optimal on this active set: release the bound with the most negative
                # multiplier (at +b_k it is -g_k, at -b_k it is g_k; g the gradient)
                mult = (hessian[a] @ (step - x)) * np.sign(x[a])
                k = int(np.argmin(mult)) if len(a) else -1
                if k < 0 or mult[k] >= tol_mult:
                    break
                active[a[k]] = False
                continue
            mf = move[f]
            edge = np.where(mf > 0.0, bound[f], -bound[f])
            with np.errstate(divide='ignore', invalid='ignore'):
                reach = np.where(mf != 0.0, (edge - x[f]) / mf, np.inf)
            k = int(np.argmin(reach))
            if reach[k] >= 1.0:
                x = x + move
                continue
            x = x + max(float(reach[k]), 0.0) * move
            x[f[k]] = edge[k]
            active[f[k]] = True
    except (np.linalg.LinAlgError, ValueError):
        pass                                            # x: the last bounded iterate
    if not np.all(np.isfinite(x)):
        x = step / worst                                # the uniformly scaled step
    return np.clip(x, -bound, bound)


class TorqueRateLimiter:
    """
    Per-joint torque-rate limit ``|tau_k - tau_{k-1}| <= rate_k dt`` [N·m].

    A step ``d = tau - tau_{k-1}`` beyond the bound of some joint is not clipped joint by
    joint: clipped, a braking step whose large entries (heavy joints) are cut while its small
    ones (light joints) pass gives a net torque in a light direction of the mass matrix;
    entering the safe hold from 0.5-1.0x the velocity limits with 5 ms of loop delay, that
    drove the Panda to 3.6x its velocity limit in MuJoCo. Given the arm's mass matrix, the
    limited step is the bounded one closest to ``d`` in joint acceleration
    (:func:`closest_bounded_step`, :data:`LIMITER_ITERATIONS` iterations: 0.87-0.95x the
    velocity limits on those hold entries); without it, ``d`` scaled as a whole, ``s d`` with
    ``s = min_k rate_k dt / |d_k|``, which keeps the torque's direction (the xarm7 still
    reached 1.31x its velocity limit that way).

    Parameters
    ----------
    rate : sequence of float
        Largest rate of change per joint [N·m/s].

    """

    def __init__(self, rate: Sequence[float]):
        self.rate = tuple(float(r) for r in rate)
        self._rate = np.array(self.rate)
        self.limited = 0
        self.last: tuple | None = None

    def reset(self, value: Sequence[float] | None = None) -> None:
        """Start again from ``value`` [N·m] (None: the next command passes unchanged)."""
        self.last = None if value is None else tuple(float(v) for v in value)

    def limit(self, tau: Sequence[float], dt: float,
              mass: Callable[[], np.ndarray | None] | None = None) -> tuple[tuple, bool]:
        """
        Return ``(tau limited, limited)`` for a command ``dt`` [s] after the last one.

        ``mass``: returns the arm's mass matrix now (or None), called only when a step must
        be limited.
        """
        tau = tuple(float(v) for v in tau)
        last = self.last
        if last is None:
            self.last = tau
            return tau, False
        scale = 1.0
        for k, v in enumerate(tau):
            step = self.rate[k] * dt
            d = abs(v - last[k])
            if d > step:
                scale = min(scale, step / d)
        if scale >= 1.0:
            self.last = tau
            return tau, False
        m = mass() if mass is not None else None
        if m is not None:
            bound = self._rate * dt
            x = closest_bounded_step(m, np.subtract(tau, last), bound, LIMITER_ITERATIONS)
            out = tuple(float(a + b) for a, b in zip(last, x))
        else:
            out = tuple(a + scale * (v - a) for a, v in zip(last, tau))
        out = tuple(min(max(v, a - r * dt), a + r * dt)     # rounding
                    for v, a, r in zip(out, last, self.rate))
        self.last = out
        self.limited += 1
        return out, True


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
