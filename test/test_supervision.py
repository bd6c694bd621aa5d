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
Command supervision (ROS-free), against closed forms.

Fresh stamps, resume hysteresis, quintic re-plan, torque-rate limit, deactivation ramp,
multi-point references.
"""

import math

from manip_control.parameters import ParameterError
from manip_control.supervision import blend_duration
from manip_control.supervision import clamp_acceleration
from manip_control.supervision import closest_bounded_step
from manip_control.supervision import command_safety_from_dict
from manip_control.supervision import CommandSafetyParameters
from manip_control.supervision import quintic_blend
from manip_control.supervision import ReferenceBlend
from manip_control.supervision import ResumeGate
from manip_control.supervision import StampGate
from manip_control.supervision import stop_ramp
from manip_control.supervision import TorqueRateLimiter
from manip_control.supervision import trajectory_from_points
from manip_control.supervision import TrajectoryError
import numpy as np
import pytest

NOW = 1.7e9          # a wall-clock time [s]


def ns(t):
    return int(round(t * 1e9))


# --------------------------------------------------------------------------------------------
# parameters


@pytest.mark.parametrize('data, why', [
    ({'hold_timeout': 0.0}, 'safety.hold_timeout: must be > 0'),
    ({'stop_time': -1.0}, 'safety.stop_time: must be > 0'),
    ({'resume_states': 0}, 'safety.resume_states: must be an integer in [1, 100000]'),
    ({'resume_states': 2.5}, 'safety.resume_states: must be an integer'),
    ({'torque_rate_limit': [1.0, 0.0]}, 'safety.torque_rate_limit[1]: must be > 0'),
    ({'reference_acceleration_limit': [math.nan, 1.0]},
     'safety.reference_acceleration_limit[0]: must be finite'),
    ({'clock_offset': 1e7}, 'safety.clock_offset: must be within'),
    ({'max_clock_error': 0.0}, 'safety.max_clock_error: must be > 0'),
    ({'reference_step_limit': 0.0}, 'safety.reference_step_limit: must be > 0'),
    ({'bogus': 1.0}, 'bogus'),
])
def test_parameters_refused_with_the_name(data, why):
    with pytest.raises(ParameterError, match=None) as exc:
        command_safety_from_dict(data)
    assert why in str(exc.value), str(exc.value)


def test_default_rate_limit_is_above_what_the_default_run_needs():
    # the offline default run (the same commands as lockstep) against the closed form of the
    # limit: no command changes by more than rate * period
    from manip_control.parameters import load_scenario
    from manip_control.simulation import run_closed_loop
    sc = load_scenario('default')
    tau = run_closed_loop(sc, 1.0).tau_cmd
    need = np.abs(np.diff(tau, axis=0)).max(axis=0) / sc.period
    p = CommandSafetyParameters()
    assert need[0] < p.torque_rate_limit[0] and need[1] < p.torque_rate_limit[1], need


# --------------------------------------------------------------------------------------------
# fresh stamps


def test_stamp_gate_fresh_means_advancing_and_young_at_any_age():
    g = StampGate(0.02)
    assert g.check(ns(NOW - 0.001), NOW) == (None, pytest.approx(0.001, abs=1e-6))
    # the same stamp again (a frozen driver): not fresh, however recent
    assert g.check(ns(NOW - 0.001), NOW)[0] == 'not_advancing'
    assert g.check(ns(NOW - 0.002), NOW)[0] == 'not_advancing'
    # older than the timeout: not fresh, at any age (no upper escape)
    g.reset()
    for age in (0.021, 11.0, 3600.0, 1e6):
        assert g.check(ns(NOW - age), NOW)[0] == 'too_old', age
    assert g.check(0, NOW)[0] == 'unstamped'
    # from the future beyond the clock tolerance
    assert g.check(ns(NOW + 0.06), NOW)[0] == 'future'
    assert g.check(ns(NOW + 0.01), NOW)[0] is None
    assert g.counts == {'not_advancing': 2, 'too_old': 4, 'unstamped': 1, 'future': 1}


def test_stamp_gate_clock_offset_and_start_up_check():
    # a driver whose clock is one hour behind: refused, and the start-up check reports it
    g = StampGate(0.02)
    assert g.check(ns(NOW - 3600.0 - 0.001), NOW)[0] == 'too_old'
    msg = g.clock_problem()
    assert 'driver stamps are 3600.001 s behind' in msg and 'safety.clock_offset' in msg
    # with the offset set, the same driver is fresh and the report clears
    g = StampGate(0.02, clock_offset=-3600.0)
    why, age = g.check(ns(NOW - 3600.0 - 0.001), NOW)
    assert why is None and age == pytest.approx(0.001, abs=1e-6)
    assert g.clock_problem() == ''


def test_resume_gate_needs_n_consecutive_good_states():
    r = ResumeGate(3)
    assert r.good()                         # no fault: open
    r.fault()
    assert not r.good() and not r.good()
    r.bad()                                 # one bad state restarts the count
    assert not r.good() and not r.good()
    assert r.good() and not r.pending


# --------------------------------------------------------------------------------------------
# re-planned reference


def test_quintic_blend_closed_form_and_derivatives():
    assert quintic_blend(0.0) == (1.0, 0.0, 0.0) and quintic_blend(1.0) == (0.0, 0.0, 0.0)
    tau = np.linspace(0.0, 1.0, 2001)
    s = np.array([quintic_blend(t)[0] for t in tau])
    ds = np.array([quintic_blend(t)[1] for t in tau])
    dds = np.array([quintic_blend(t)[2] for t in tau])
    np.testing.assert_allclose(np.gradient(s, tau), ds, atol=2e-3)
    np.testing.assert_allclose(np.gradient(ds, tau), dds, atol=2e-2)
    # peak speed 1.875 at tau = 1/2, peak acceleration 10/sqrt(3) at tau = (3 -+ sqrt 3)/6
    assert abs(ds).max() == pytest.approx(1.875, rel=1e-6)
    t_a = (3.0 - math.sqrt(3.0)) / 6.0
    assert abs(quintic_blend(t_a)[2]) == pytest.approx(10.0 / math.sqrt(3.0), rel=1e-9)


def test_blend_starts_at_the_start_position_and_respects_its_limits():
    b = ReferenceBlend(0.5, 2.0)
    q_req = (0.0, 0.0)
    start = (-math.pi / 2, 0.0)
    T = b.start(10.0, start, q_req)
    assert T == pytest.approx(max(1.875 * math.pi / 2 / 0.5,
                                  math.sqrt(10 / math.sqrt(3) * math.pi / 2 / 2.0)))
    q, qd, qdd = b.apply(10.0, q_req, (0.0, 0.0), (0.0, 0.0))
    assert q == pytest.approx(start) and qd == (0.0, 0.0) and qdd == (0.0, 0.0)
    ts = np.linspace(10.0, 10.0 + T, 4001)
    out = np.array([b.apply(t, q_req, (0.0, 0.0), (0.0, 0.0)) for t in ts[:-1]])
    assert np.abs(out[:, 1, :]).max() <= 0.5 + 1e-9
    assert np.abs(out[:, 2, :]).max() <= 2.0 + 1e-9
    assert b.apply(10.0 + T, q_req, (0.1, 0.2), (0.0, 0.0)) == (q_req, (0.1, 0.2), (0.0, 0.0))
    assert not b.active


def test_blend_duration_closed_form():
    assert blend_duration((0.0, 0.0), 1.0, 1.0) == 0.0
    assert blend_duration((0.2, -1.0), 1.0, 100.0) == pytest.approx(1.875)
    assert blend_duration((0.0, 1.0), 100.0, 1.0) == pytest.approx(math.sqrt(10 / math.sqrt(3)))


def test_acceleration_clamp():
    assert clamp_acceleration((1.0, -2.0), (5.0, 5.0)) == ((1.0, -2.0), False)
    assert clamp_acceleration((1e6, -1e6), (50.0, 40.0)) == ((50.0, -40.0), True)


# --------------------------------------------------------------------------------------------
# torque commands


def test_torque_rate_limiter():
    lim = TorqueRateLimiter((2000.0, 1000.0))
    assert lim.limit((89.0, -25.0), 0.001) == ((89.0, -25.0), False)   # first: unchanged
    lim.reset((0.0, 0.0))
    out, limited = lim.limit((89.0, -25.0), 0.001)
    # the step is scaled as a whole: joint 1 at its bound, joint 2 along (direction kept)
    assert limited and out == pytest.approx((2.0, -25.0 * 2.0 / 89.0))
    out2, _ = lim.limit((89.0, -25.0), 0.001)
    assert out2[0] == pytest.approx(4.0) and out2[1] == pytest.approx(2.0 * out[1])
    out, limited = lim.limit((out2[0] + 0.5, out2[1] - 0.9), 0.001)
    assert not limited and lim.limited == 2


def test_torque_rate_limiter_keeps_the_direction_of_the_step():
    """Never beyond a joint's bound, and the command change stays parallel to the step asked."""
    rng = np.random.default_rng(3)
    rate = np.array([87.0, 87.0, 87.0, 87.0, 12.0, 12.0, 12.0]) / 0.04
    lim = TorqueRateLimiter(tuple(rate))
    last = np.zeros(7)
    lim.reset(tuple(last))
    for _ in range(2000):
        target = last + rng.normal(0.0, 20.0, 7)
        out, limited = lim.limit(tuple(target), 1e-3)
        step, asked = np.array(out) - last, target - last
        assert np.all(np.abs(step) <= rate * 1e-3 * (1 + 1e-12))
        cos = step @ asked / (np.linalg.norm(step) * np.linalg.norm(asked))
        assert cos == pytest.approx(1.0, abs=1e-12)
        assert limited == (not np.allclose(step, asked))
        last = np.array(out)


def _panda_mass_matrices(count, seed):
    from conftest import URDF_DIR
    from manip_control.arm_model import UrdfArm
    arm = UrdfArm.from_file(URDF_DIR / 'panda.urdf')
    rng = np.random.default_rng(seed)
    lo, hi = arm.limits.lower, arm.limits.upper
    return [arm.mass_matrix(lo + (hi - lo) * rng.random(arm.n)) for _ in range(count)]


def test_closest_bounded_step_agrees_with_scipy_bounded_least_squares():
    """The step closest in acceleration, ``min |M^-1 (x - d)|`` in the box, as scipy's BVLS."""
    from scipy.optimize import lsq_linear
    rng = np.random.default_rng(5)
    for mass in _panda_mass_matrices(60, 5):
        step = rng.normal(0.0, 1.0, 7) * rng.choice([0.1, 1.0, 10.0], 7)
        bound = rng.uniform(0.05, 2.0, 7)
        x = closest_bounded_step(mass, step, bound)
        a = np.linalg.inv(mass)
        ref = lsq_linear(a, a @ step, bounds=(-bound, bound), method='bvls', tol=1e-14).x
        assert np.all(np.abs(x) <= bound)

        def cost(v):
            return float(np.sum((a @ (v - step)) ** 2))
        assert cost(x) == pytest.approx(cost(ref), rel=1e-9, abs=1e-12)
        # every iterate is bounded and no worse than the uniformly scaled step
        scaled = step / max(1.0, float(np.max(np.abs(step) / bound)))
        for iterations in (1, 2, 3):
            xi = closest_bounded_step(mass, step, bound, iterations)
            assert np.all(np.abs(xi) <= bound)
            assert cost(xi) <= cost(scaled) * (1 + 1e-12) + 1e-15
    inside = np.array([0.1, -0.2])
    assert np.array_equal(closest_bounded_step(np.eye(2), inside, np.ones(2)), inside)


def test_torque_rate_limiter_with_the_mass_matrix_brakes_in_acceleration():
    """Given ``M``, a limited step is the bounded one closest in acceleration, never beyond."""
    rate = np.array([87.0, 87.0, 87.0, 87.0, 12.0, 12.0, 12.0]) / 0.04
    rng = np.random.default_rng(8)
    for mass in _panda_mass_matrices(20, 8):
        lim = TorqueRateLimiter(tuple(rate))
        lim.reset((0.0,) * 7)
        target = rng.normal(0.0, 20.0, 7)
        out, limited = lim.limit(tuple(target), 1e-3, lambda: mass)
        assert limited and np.all(np.abs(out) <= rate * 1e-3 * (1 + 1e-12))
        scaled_lim = TorqueRateLimiter(tuple(rate))
        scaled_lim.reset((0.0,) * 7)
        scaled, _ = scaled_lim.limit(tuple(target), 1e-3)
        a = np.linalg.inv(mass)
        assert (np.linalg.norm(a @ (np.array(out) - target))
                <= np.linalg.norm(a @ (np.array(scaled) - target)) * (1 + 1e-12))
    # a mass matrix that cannot be had: the scaled step
    lim = TorqueRateLimiter((2000.0, 1000.0))
    lim.reset((0.0, 0.0))
    out, _ = lim.limit((89.0, -25.0), 0.001, lambda: None)
    assert out == pytest.approx((2.0, -25.0 * 2.0 / 89.0))


def test_stop_ramp_to_the_hold_then_to_zero():
    tau0, hold = (10.0, -4.0), (30.0, 6.0)
    assert stop_ramp(0.0, 1.0, tau0, hold) == pytest.approx(tau0)
    assert stop_ramp(0.25, 1.0, tau0, hold) == pytest.approx((20.0, 1.0))
    assert stop_ramp(0.5, 1.0, tau0, hold) == pytest.approx(hold)
    assert stop_ramp(0.75, 1.0, tau0, hold) == pytest.approx((15.0, 3.0))
    assert stop_ramp(1.0, 1.0, tau0, hold) is None


# --------------------------------------------------------------------------------------------
# multi-point references


def test_trajectory_starts_from_the_reference_in_use_and_follows_time_from_start():
    # three points, the first 5 s in the future: never the first point at once
    traj = trajectory_from_points(100.0, (0.0, 0.0), [5.0, 6.0, 7.0],
                                  [(1.0, 0.5), (1.5, 0.5), (2.0, 0.0)], [None, None, None])
    q, qd, qdd = traj.sample(100.0)
    assert q == pytest.approx((0.0, 0.0)) and qd == pytest.approx((0.0, 0.0))
    q, _, _ = traj.sample(102.5)
    assert 0.0 < q[0] < 1.0
    assert traj.sample(105.0)[0] == pytest.approx((1.0, 0.5))
    assert traj.sample(106.0)[0] == pytest.approx((1.5, 0.5))
    assert traj.sample(106.0)[1] == pytest.approx((0.5, -0.25))   # central difference
    assert traj.sample(108.0) == ((2.0, 0.0), (0.0, 0.0), (0.0, 0.0))
    assert traj.finished(107.0) and not traj.finished(106.9)


def test_trajectory_hermite_against_the_closed_form_cubic():
    # one segment from (q=0, v=0) to (q=1, v=0) over 2 s: q = 3 u^2 - 2 u^3, u = t / 2
    traj = trajectory_from_points(0.0, (0.0, 0.0), [2.0], [(1.0, -1.0)], [(0.0, 0.0)])
    for t in np.linspace(0.0, 2.0, 17)[:-1]:
        u = t / 2.0
        q, qd, qdd = traj.sample(t)
        assert q[0] == pytest.approx(3 * u ** 2 - 2 * u ** 3, abs=1e-12)
        assert qd[0] == pytest.approx((6 * u - 6 * u ** 2) / 2.0, abs=1e-12)
        assert qdd[0] == pytest.approx((6 - 12 * u) / 4.0, abs=1e-12)
        assert q[1] == pytest.approx(-q[0], abs=1e-12)


@pytest.mark.parametrize('times, positions, why', [
    ([1.0, 1.0], [(0.0, 0.0), (1.0, 1.0)], 'points[1].time_from_start: must be later'),
    ([2.0, 1.0], [(0.0, 0.0), (1.0, 1.0)], 'points[1].time_from_start: must be later'),
    ([-1.0, 1.0], [(0.0, 0.0), (1.0, 1.0)], 'points[0].time_from_start: must be finite'),
    ([0.0, 1.0], [(0.5, 0.0), (1.0, 1.0)], 'a step'),
])
def test_trajectory_refusals(times, positions, why):
    with pytest.raises(TrajectoryError) as exc:
        trajectory_from_points(0.0, (0.0, 0.0), times, positions, [None] * len(times))
    assert why in str(exc.value)


def test_stamp_gate_without_the_age_still_needs_advancing_stamps():
    g = StampGate(0.02)
    assert g.check(ns(NOW - 3600.0), NOW, use_age=False) == (None, 0.0)
    assert g.check(ns(NOW - 3600.0), NOW, use_age=False)[0] == 'not_advancing'


# --------------------------------------------------------------------------------------------
# state timeout in periods of the measured rate; clock steps


def _stream(gate, t0, n, rate, offset=0.0, delay=2e-4, jitter=0.0, seed=0, loss=0.0):
    """
    Feed ``n`` states of a driver at ``rate`` [Hz] from wall time ``t0``; the results.

    The driver stamps each state with its clock when it publishes (a few us of jitter, as
    a clock read in a real driver's loop); ``jitter`` is extra arrival delay.
    """
    rng = np.random.default_rng(seed)
    out = []
    base = ns(t0)
    for k in range(n):
        rel = k / rate + 1e-5 * rng.random()           # [s] from t0 (exact in ns below)
        if loss and rng.random() < loss:
            continue
        arrive = t0 + rel + delay + (jitter * rng.random() if jitter else 0.0)
        out.append(gate.check(base + ns(rel + offset), arrive)[0])
    return out


@pytest.mark.parametrize('rate, expect', [(100.0, 0.05), (1000.0, 0.02), (2000.0, 0.02),
                                          (4000.0, 0.02), (10.0, 0.1)])
def test_state_timeout_in_periods_of_the_measured_rate(rate, expect):
    # T = max(state_timeout, min(5 P, 0.1 s))
    g = StampGate(0.02, periods=5.0, timeout_max=0.1)
    assert g.timeout == 0.02
    _stream(g, NOW, 200, rate, loss=0.2, seed=3)      # 20 % loss does not move the median
    assert g.rate.period == pytest.approx(1.0 / rate, rel=0.01)    # (stamp jitter)
    assert g.timeout == pytest.approx(expect, rel=1e-3)
    g.set_base_timeout(0.5)                            # safety.state_timeout at runtime
    assert g.timeout == 0.5


def test_state_timeout_hysteresis():
    g = StampGate(0.02, periods=5.0, timeout_max=0.1)
    _stream(g, NOW, 100, 100.0)
    assert g.timeout == pytest.approx(0.05, rel=1e-3)
    # 95 Hz: 5 P = 52.6 ms, within 10 % of 50 ms: unchanged; 80 Hz: 62.5 ms: changed
    _stream(g, NOW + 10.0, 200, 95.0)
    assert g.timeout == pytest.approx(0.05, rel=1e-3)
    _stream(g, NOW + 20.0, 200, 80.0)
    assert g.timeout == pytest.approx(0.0625, rel=1e-3)


@pytest.mark.parametrize('step', [0.5, -0.5, -0.01, 0.01])
def test_clock_step_is_detected_once_and_the_offset_re_estimated(step):
    g = StampGate(0.02, step_states=20, max_step=1.0)
    assert set(_stream(g, NOW, 500, 1000.0, jitter=2e-3)) == {None}
    # the driver's clock steps: its stamps jump by `step` while the states keep arriving
    res = _stream(g, NOW + 0.5, 1000, 1000.0, offset=step, jitter=2e-3, seed=1)
    assert g.steps == 1 and g.last_step == pytest.approx(step, abs=3e-3)
    k = res.index(None)
    assert all(r is None for r in res[k:]), res[k:]     # fresh again, for good
    assert k <= 20 + 1
    assert 'driver clock step' in g.step_note
    # a frozen stream after the step is still never fresh
    frozen = ns(NOW + 0.5 + 999 / 1000.0 + step)
    assert g.check(frozen, NOW + 2.0)[0] == 'not_advancing'
    assert all(g.check(frozen, NOW + 2.0 + k * 1e-3)[0] is not None for k in range(100))
    assert g.steps == 1


def test_replayed_or_late_streams_never_count_as_fresh():
    g = StampGate(0.02, step_states=20, max_step=1.0)
    _stream(g, NOW, 1000, 1000.0)
    # the driver re-sends its last 0.5 s (stamps already accepted), without a gap
    old = sorted(g._seen)[-500:]
    replay = [g.check(s, NOW + 1.0 + k / 1000.0)[0] for k, s in enumerate(old)]
    assert None not in replay and g.steps == 0
    # a stream that stopped and comes back 0.3 s late (a backlog delivered at once)
    g2 = StampGate(0.02, step_states=20, max_step=1.0)
    _stream(g2, NOW, 1000, 1000.0)
    late = _stream(g2, NOW + 1.0, 500, 1000.0, delay=0.3)
    assert None not in late and g2.steps == 0
    # a step larger than max_clock_step stays refused
    g3 = StampGate(0.02, step_states=20, max_step=1.0)
    _stream(g3, NOW, 500, 1000.0)
    big = _stream(g3, NOW + 0.5, 500, 1000.0, offset=-2.0)
    assert None not in big and g3.steps == 0
    # without re-estimation (clock_step_states 0): the former behaviour
    g4 = StampGate(0.02, step_states=0)
    _stream(g4, NOW, 500, 1000.0)
    assert None not in _stream(g4, NOW + 0.5, 500, 1000.0, offset=0.5)
    # at start-up nothing is re-estimated: the clock-offset report stands
    g5 = StampGate(0.02, step_states=20)
    assert None not in _stream(g5, NOW, 100, 1000.0, offset=-3600.0)
    assert 'behind' in g5.clock_problem() and g5.steps == 0


@pytest.mark.parametrize('upset', ['met', 'stall', 'frozen', 'replay'])
def test_clock_step_run_survives_one_upset_state(upset):
    # a backward step meets an accepted stamp, or one state of the run is processed 30 ms
    # late: the step is still confirmed; a frozen or replayed stream still never is
    g = StampGate(0.02, step_states=20, max_step=1.0)
    old = [ns(NOW + k * 1e-3 + 1e-6 * (k % 7)) for k in range(1000)]
    assert {g.check(s, NOW + k * 1e-3 + 2e-4)[0] for k, s in enumerate(old)} == {None}
    res = []
    for j in range(1000, 2000):
        s, arrive = ns(NOW + j * 1e-3 - 0.5 + 1e-6 * (j % 5)), NOW + j * 1e-3 + 2e-4
        if upset == 'met' and j == 1005:
            s = old[j - 500]
        elif upset == 'stall' and j == 1008:
            arrive += 0.03
        elif upset == 'frozen' and j >= 1005:
            s = ns(NOW + 1005e-3 - 0.5)
        elif upset == 'replay':
            s = old[j - 1000]
        res.append(g.check(s, arrive)[0])
    if upset in ('frozen', 'replay'):
        assert None not in res and g.steps == 0
    else:
        assert g.steps == 1 and g.last_step == pytest.approx(-0.5, abs=1e-3)
        k = res.index(None)
        assert k <= 40 and all(r is None for r in res[k:])


def test_clock_step_under_load_jitter_has_no_false_steps():
    # arrival jitter up to 8 ms (a loaded host) without a step: never a step, always fresh
    g = StampGate(0.02, step_states=20, max_step=1.0)
    res = _stream(g, NOW, 20000, 1000.0, jitter=8e-3, seed=5)
    assert g.steps == 0 and set(res) == {None}
