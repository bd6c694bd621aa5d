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
Tests for manip_control.trajectories.

References are independent of the code under test: closed forms written out here, linear
solves of the boundary conditions, central finite differences of independently sampled
positions/velocities, and one-sided limits at the waypoints.
"""

import math

from manip_control.trajectories import Hold
from manip_control.trajectories import Quintic
from manip_control.trajectories import SEED_001_SINUSOID
from manip_control.trajectories import seed_001_sinusoid
from manip_control.trajectories import Sinusoid
from manip_control.trajectories import SumOfSinusoids
from manip_control.trajectories import Trajectory
from manip_control.trajectories import trajectory_from_config
from manip_control.trajectories import TrajectoryError
from manip_control.trajectories import validate_limits
from manip_control.trajectories import Waypoints
import numpy as np
import pytest

WP_TIMES = [0.5, 1.5, 2.0, 3.7, 4.0]
WP_POS = [[0.0, 0.2], [1.0, -0.5], [0.4, 0.1], [-0.3, 0.9], [0.2, 0.0]]
WP_VEL = [[0.0, 0.0], [0.5, -1.0], [-1.2, 0.8], [0.3, 0.0], [0.0, 0.0]]


def make_all() -> dict[str, Trajectory]:
    """One instance of every type, including n != 2 cases."""
    return {
        'sinusoid': seed_001_sinusoid(),
        'sinusoid_3j': Sinusoid([0.4, -0.2, 1.0], [1.3, 0.0, 2.0], [0.1, 0.5, -1.0],
                                [0.3, 1.0, -0.7]),
        'sum_of_sinusoids': SumOfSinusoids([[0.2, 0.05, 0.01], [0.3]],
                                           [[0.6, 1.7, 4.1], [0.9]],
                                           [[0.0, 1.0, 2.0], [0.4]], [0.1, -0.2]),
        'quintic': Quintic([0.1, -0.4], [1.2, 0.6], 1.7, t_start=0.6),
        'quintic_1j': Quintic([2.0], [-1.0], 0.8),
        'waypoints': Waypoints(WP_TIMES, WP_POS),
        'waypoints_vel': Waypoints(WP_TIMES, WP_POS, WP_VEL),
        'waypoints_3j': Waypoints([0.0, 1.0, 3.0], [[0, 0, 0], [1, 2, 3], [-1, 0, 1]]),
        'hold': Hold([0.3, -1.1]),
    }


ALL = make_all()
# Times covering before/at/after the active spans, the knots and random interior points.
RNG = np.random.default_rng(1)
TIMES = np.unique(np.concatenate([
    RNG.uniform(-1.0, 6.0, 300), np.array(WP_TIMES), [0.0, 0.6, 2.3, 1.0, 3.0, 5.0]]))


def sample_rows(traj: Trajectory, times) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rows = [traj.sample(float(t)) for t in times]
    return tuple(np.array([r[i] for r in rows]) for i in range(3))


# ------------------------------------------------------------------------------------------
# Interface
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize('name', sorted(ALL))
def test_sample_returns_fresh_float64_vectors(name):
    traj = ALL[name]
    n = traj.n_joints
    for t in (-1.0, 0.0, 0.7, 2.0, 10.0, np.float64(1.1), 3):
        out = traj.sample(t)
        assert isinstance(out, tuple) and len(out) == 3
        for a in out:
            assert isinstance(a, np.ndarray) and a.shape == (n,) and a.dtype == np.float64
        before = [a.copy() for a in traj.sample(t)]
        for a in out:          # mutating a result must not leak into the trajectory
            a[:] = 123.0
        for a, b in zip(traj.sample(t), before):
            np.testing.assert_array_equal(a, b)


def test_n_joints():
    expected = {'sinusoid': 2, 'sinusoid_3j': 3, 'sum_of_sinusoids': 2, 'quintic': 2,
                'quintic_1j': 1, 'waypoints': 2, 'waypoints_vel': 2, 'waypoints_3j': 3,
                'hold': 2}
    assert {k: v.n_joints for k, v in ALL.items()} == expected


@pytest.mark.parametrize('name', sorted(ALL))
def test_sample_many_matches_sample(name):
    traj = ALL[name]
    q, qd, qdd = traj.sample_many(TIMES)
    rq, rqd, rqdd = sample_rows(traj, TIMES)
    assert q.shape == (TIMES.size, traj.n_joints)
    np.testing.assert_allclose(q, rq, rtol=0, atol=1e-12)
    np.testing.assert_allclose(qd, rqd, rtol=0, atol=1e-11)
    np.testing.assert_allclose(qdd, rqdd, rtol=0, atol=1e-10)


def test_end_time():
    assert ALL['sinusoid'].end_time == math.inf
    assert ALL['sum_of_sinusoids'].end_time == math.inf
    assert ALL['quintic'].end_time == pytest.approx(0.6 + 1.7)
    assert ALL['waypoints'].end_time == 4.0
    assert ALL['hold'].end_time == 0.0


# ------------------------------------------------------------------------------------------
# Derivative consistency: central differences of independent samples
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize('name', sorted(ALL))
def test_derivatives_match_central_differences(name):
    traj = ALL[name]
    h = 1e-6
    for t in TIMES:
        qp, qdp, _ = traj.sample(t + h)
        qm, qdm, _ = traj.sample(t - h)
        _, qd, qdd = traj.sample(t)
        fd_v = (qp - qm) / (2 * h)
        fd_a = (qdp - qdm) / (2 * h)
        # Error: O(h^2 * next derivative) truncation, O(h * jerk jump) where a hold starts or
        # ends (the jerk jumps there, up to ~350 rad/s^3 here), O(eps/h) round-off. The
        # scale of these trajectories is O(1..100), so a wrong derivative is off by O(0.1+).
        np.testing.assert_allclose(fd_v, qd, rtol=0, atol=1e-6, err_msg=f't={t}')
        np.testing.assert_allclose(fd_a, qdd, rtol=0, atol=5e-4, err_msg=f't={t}')


# ------------------------------------------------------------------------------------------
# Sinusoid / sum of sinusoids: closed form
# ------------------------------------------------------------------------------------------

def test_seed_001_sinusoid_closed_form():
    traj = seed_001_sinusoid()
    assert trajectory_from_config(SEED_001_SINUSOID, 2).n_joints == 2
    for t in np.linspace(0.0, 40.0, 401):
        q, qd, qdd = traj.sample(t)
        np.testing.assert_allclose(q, [0.5 * math.sin(0.5 * t), 0.3 * math.sin(0.5 * t)],
                                   rtol=0, atol=1e-15)
        np.testing.assert_allclose(qd, [0.25 * math.cos(0.5 * t), 0.15 * math.cos(0.5 * t)],
                                   rtol=0, atol=1e-15)
        np.testing.assert_allclose(qdd, [-0.125 * math.sin(0.5 * t),
                                         -0.075 * math.sin(0.5 * t)], rtol=0, atol=1e-15)


def test_sinusoid_general_closed_form_and_scalar_broadcast():
    traj = Sinusoid([0.4, -0.2], 1.5, offset=[0.1, 0.2], phase=0.25)
    t = 0.83
    x = 1.5 * t + 0.25
    q, qd, qdd = traj.sample(t)
    np.testing.assert_allclose(q, [0.1 + 0.4 * math.sin(x), 0.2 - 0.2 * math.sin(x)],
                               atol=1e-15)
    np.testing.assert_allclose(qd, [0.6 * math.cos(x), -0.3 * math.cos(x)], atol=1e-15)
    np.testing.assert_allclose(qdd, [-0.9 * math.sin(x), 0.45 * math.sin(x)], atol=1e-15)
    assert Sinusoid(0.1, 1.0, n_joints=4).n_joints == 4


def test_sum_of_sinusoids_closed_form():
    traj = ALL['sum_of_sinusoids']
    for t in (0.0, 0.3, 2.9, 17.0):
        q, qd, qdd = traj.sample(t)
        a = [0.2, 0.05, 0.01]
        w = [0.6, 1.7, 4.1]
        p = [0.0, 1.0, 2.0]
        q0 = 0.1 + sum(ai * math.sin(wi * t + pi) for ai, wi, pi in zip(a, w, p))
        qd0 = sum(ai * wi * math.cos(wi * t + pi) for ai, wi, pi in zip(a, w, p))
        qdd0 = -sum(ai * wi ** 2 * math.sin(wi * t + pi) for ai, wi, pi in zip(a, w, p))
        x = 0.9 * t + 0.4
        np.testing.assert_allclose(q, [q0, -0.2 + 0.3 * math.sin(x)], atol=1e-14)
        np.testing.assert_allclose(qd, [qd0, 0.27 * math.cos(x)], atol=1e-14)
        np.testing.assert_allclose(qdd, [qdd0, -0.243 * math.sin(x)], atol=1e-14)


def test_sum_of_sinusoids_empty_joint_holds_offset():
    traj = SumOfSinusoids([[0.1], []], [[1.0], []], offset=[0.0, 0.7])
    q, qd, qdd = traj.sample(1.234)
    assert q[1] == 0.7 and qd[1] == 0.0 and qdd[1] == 0.0


# ------------------------------------------------------------------------------------------
# Quintic
# ------------------------------------------------------------------------------------------

def quintic_reference(q0, q1, T, t):
    """Solve the six boundary conditions for the coefficients (independent reference)."""
    A = np.array([[1, 0, 0, 0, 0, 0], [0, 1, 0, 0, 0, 0], [0, 0, 2, 0, 0, 0],
                  [1, T, T ** 2, T ** 3, T ** 4, T ** 5],
                  [0, 1, 2 * T, 3 * T ** 2, 4 * T ** 3, 5 * T ** 4],
                  [0, 0, 2, 6 * T, 12 * T ** 2, 20 * T ** 3]], dtype=float)
    c = np.linalg.solve(A, np.array([q0, 0, 0, q1, 0, 0], dtype=float))
    p = np.polynomial.Polynomial(c)
    return p(t), p.deriv(1)(t), p.deriv(2)(t)


def test_quintic_matches_boundary_value_solution():
    q0, q1, T, t0 = [0.1, -0.4], [1.2, 0.6], 1.7, 0.6
    traj = Quintic(q0, q1, T, t_start=t0)
    for t in np.linspace(t0, t0 + T, 37):
        q, qd, qdd = traj.sample(t)
        for j in range(2):
            ref = quintic_reference(q0[j], q1[j], T, t - t0)
            assert q[j] == pytest.approx(ref[0], abs=1e-12)
            assert qd[j] == pytest.approx(ref[1], abs=1e-11)
            assert qdd[j] == pytest.approx(ref[2], abs=1e-10)


def test_quintic_end_conditions_and_holds():
    q0 = np.array([0.1, -0.4])
    q1 = np.array([0.3, 0.7])    # 0.1 + (0.3 - 0.1) != 0.3 in floating point
    T = 2.0
    traj = Quintic(q0, q1, T)
    zero = np.zeros(2)
    q, qd, qdd = traj.sample(0.0)
    np.testing.assert_array_equal(q, q0)
    np.testing.assert_array_equal(qd, zero)
    np.testing.assert_array_equal(qdd, zero)
    q, qd, qdd = traj.sample(T)                      # exact at t = duration
    np.testing.assert_array_equal(q, q1)
    np.testing.assert_array_equal(qd, zero)
    np.testing.assert_array_equal(qdd, zero)
    for t in (T + 1e-9, T + 0.5, 1e6):               # holds the goal
        q, qd, qdd = traj.sample(t)
        np.testing.assert_array_equal(q, q1)
        np.testing.assert_array_equal(qd, zero)
        np.testing.assert_array_equal(qdd, zero)
    for t in (-1e-9, -3.0):                           # holds the start
        q, qd, qdd = traj.sample(t)
        np.testing.assert_array_equal(q, q0)
        np.testing.assert_array_equal(qd, zero)
        np.testing.assert_array_equal(qdd, zero)
    # Just inside the motion: continuous with the holds (no jump in any derivative).
    for t in (1e-7, T - 1e-7):
        q, qd, qdd = traj.sample(t)
        np.testing.assert_allclose(q, q0 if t < 1 else q1, atol=1e-12)
        np.testing.assert_allclose(qd, zero, atol=1e-11)
        np.testing.assert_allclose(qdd, zero, atol=1e-5)
    # Midpoint: half way, peak speed 15/8 * delta / T, zero acceleration.
    q, qd, qdd = traj.sample(T / 2)
    np.testing.assert_allclose(q, (q0 + q1) / 2, atol=1e-15)
    np.testing.assert_allclose(qd, 15 / 8 * (q1 - q0) / T, atol=1e-15)
    np.testing.assert_allclose(qdd, zero, atol=1e-14)


def test_quintic_exact_at_end_with_offset_start():
    traj = Quintic([0.1], [0.3], 0.2, t_start=0.1)
    q, qd, qdd = traj.sample(0.1 + 0.2)
    assert q[0] == 0.3 and qd[0] == 0.0 and qdd[0] == 0.0
    q, _, _ = traj.sample_many([0.1 + 0.2, 5.0])
    np.testing.assert_array_equal(q, [[0.3], [0.3]])


# ------------------------------------------------------------------------------------------
# Waypoints
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize('name', ['waypoints', 'waypoints_vel'])
def test_waypoints_pass_through_and_hold(name):
    traj = ALL[name]
    for t, p in zip(WP_TIMES, WP_POS):
        np.testing.assert_allclose(traj.sample(t)[0], p, rtol=0, atol=1e-13)
    zero = np.zeros(2)
    for t in (WP_TIMES[0], WP_TIMES[0] - 1e-9, -5.0):
        q, qd, qdd = traj.sample(t)
        np.testing.assert_array_equal(q, WP_POS[0])
        np.testing.assert_array_equal(qd, zero)
        np.testing.assert_array_equal(qdd, zero)
    for t in (WP_TIMES[-1], WP_TIMES[-1] + 1e-9, 100.0):
        q, qd, qdd = traj.sample(t)
        np.testing.assert_array_equal(q, WP_POS[-1])
        np.testing.assert_array_equal(qd, zero)
        np.testing.assert_array_equal(qdd, zero)


@pytest.mark.parametrize('name', ['waypoints', 'waypoints_vel', 'waypoints_3j'])
def test_waypoints_c2_from_both_sides(name):
    """q, qd, qdd have equal one-sided limits at every knot, including the end holds."""
    traj = ALL[name]
    for t in traj.times:
        for d in (1e-7, 1e-8):
            left = traj.sample(t - d)
            right = traj.sample(t + d)
            # A continuous derivative changes by at most 2d * max|next derivative| over
            # [t-d, t+d] (|qd| < 10, |qdd| < 100, |jerk| < 1500 here); a jump (a C1-only
            # construction) is O(1) and does not shrink with d.
            for k, scale in ((0, 20.0), (1, 200.0), (2, 3000.0)):
                np.testing.assert_allclose(left[k], right[k], rtol=0, atol=scale * d,
                                           err_msg=f'derivative {k} at t={t}, d={d}')


def test_waypoints_velocities_are_followed_and_jerk_is_continuous():
    traj = ALL['waypoints_vel']
    for t, v in zip(WP_TIMES, WP_VEL):
        np.testing.assert_allclose(traj.sample(t)[1], v, rtol=0, atol=1e-12)
    h = 1e-6
    for t in WP_TIMES[1:-1]:
        # one-sided jerk estimates by forward/backward differences of qdd
        jerk_left = (traj.sample(t - h)[2] - traj.sample(t - 2 * h)[2]) / h
        jerk_right = (traj.sample(t + 2 * h)[2] - traj.sample(t + h)[2]) / h
        # O(h * snap) error of the one-sided differences; a C2-only choice of the knot
        # accelerations gives jerk jumps of O(10..100) here.
        np.testing.assert_allclose(jerk_left, jerk_right, rtol=1e-3, atol=1e-3)


def test_waypoints_two_points_equal_quintic():
    wp = Waypoints([1.0, 3.0], [[0.0, 1.0], [2.0, -1.0]])
    qu = Quintic([0.0, 1.0], [2.0, -1.0], 2.0, t_start=1.0)
    for t in np.linspace(0.5, 3.5, 61):
        for a, b in zip(wp.sample(t), qu.sample(t)):
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)


def test_waypoints_equal_c4_quintic_spline():
    from scipy.interpolate import make_interp_spline
    z = np.zeros(2)
    spl = make_interp_spline(WP_TIMES, WP_POS, k=5, axis=0,
                             bc_type=([(1, z), (2, z)], [(1, z), (2, z)]))
    t = np.linspace(WP_TIMES[0], WP_TIMES[-1], 301)
    q, qd, qdd = ALL['waypoints'].sample_many(t)
    np.testing.assert_allclose(q, spl(t), atol=1e-12)
    np.testing.assert_allclose(qd, spl(t, 1), atol=1e-11)
    np.testing.assert_allclose(qdd, spl(t, 2), atol=1e-10)


# ------------------------------------------------------------------------------------------
# Bounds and limits
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize('name', sorted(ALL))
def test_bounds_enclose_and_match_dense_samples(name):
    traj = ALL[name]
    t = np.linspace(-1.0, 60.0, 200001)
    q, qd, qdd = traj.sample_many(t)
    b = traj.bounds()
    assert np.all(q.min(axis=0) >= b.position_min - 1e-12)
    assert np.all(q.max(axis=0) <= b.position_max + 1e-12)
    assert np.all(np.abs(qd).max(axis=0) <= b.velocity_max + 1e-12)
    assert np.all(np.abs(qdd).max(axis=0) <= b.acceleration_max + 1e-12)
    if name != 'sum_of_sinusoids':   # exact for every other type
        np.testing.assert_allclose(q.min(axis=0), b.position_min, atol=1e-4)
        np.testing.assert_allclose(q.max(axis=0), b.position_max, atol=1e-4)
        np.testing.assert_allclose(np.abs(qd).max(axis=0), b.velocity_max, atol=1e-3)
        np.testing.assert_allclose(np.abs(qdd).max(axis=0), b.acceleration_max, atol=1e-2)


def test_waypoint_bounds_include_overshoot_between_waypoints():
    traj = Waypoints([0.0, 1.0, 2.0], [[0.0], [1.0], [1.0]])
    b = traj.bounds()
    assert b.position_max[0] > 1.0 + 1e-3   # the spline overshoots the plateau


def test_validate_limits_accepts_and_rejects():
    traj = seed_001_sinusoid()     # |q| <= (0.5, 0.3), |qd| <= (0.25, 0.15)
    validate_limits(traj, [[-0.5, 0.5], [-0.3, 0.3]], [0.25, 0.15], [0.125, 0.075])
    with pytest.raises(TrajectoryError, match=r'joints\[1\] position reaches 0\.3 rad, above'):
        validate_limits(traj, [[-1, 1], [-1, 0.29]])
    with pytest.raises(TrajectoryError, match=r'shoulder position reaches -0\.5 rad, below'):
        validate_limits(traj, [[-0.49, 1], [-1, 1]], joint_names=['shoulder', 'elbow'])
    with pytest.raises(TrajectoryError, match=r'joints\[0\] speed reaches 0\.25 rad/s'):
        validate_limits(traj, velocity_limits=[0.2, 1.0])
    with pytest.raises(TrajectoryError, match=r'joints\[1\] acceleration reaches 0\.075'):
        validate_limits(traj, acceleration_limits=[1.0, 0.07])
    overshoot = Waypoints([0.0, 1.0, 2.0], [[0.0], [1.0], [1.0]])
    with pytest.raises(TrajectoryError,
                       match=r'joints\[0\] position reaches 1\.1\d* rad, above the upper'):
        validate_limits(overshoot, [[-1.0, 1.0]])   # waypoints within limits, path is not


@pytest.mark.parametrize('kwargs, match', [
    ({'position_limits': [[-1, 1]]}, r'position_limits: expected shape \(2, 2\)'),
    ({'position_limits': [[1, -1], [-1, 1]]}, r'position_limits\[0\]: lower'),
    ({'velocity_limits': [1.0, 0.0]}, r'velocity_limits\[1\]: must be > 0'),
    ({'velocity_limits': [1.0, float('nan')]}, r'velocity_limits\[1\]: must be finite'),
    ({'acceleration_limits': [1.0]}, r'acceleration_limits: expected shape \(2,\)'),
])
def test_validate_limits_rejects_bad_limits(kwargs, match):
    with pytest.raises(TrajectoryError, match=match):
        validate_limits(seed_001_sinusoid(), **kwargs)


# ------------------------------------------------------------------------------------------
# Config factory
# ------------------------------------------------------------------------------------------

def test_factory_builds_every_type():
    cfgs = {
        Sinusoid: {'type': 'sinusoid', 'amplitude': [0.5, 0.3], 'omega': [0.5, 0.5],
                   'offset': [0, 0]},
        SumOfSinusoids: {'type': 'sum_of_sinusoids', 'amplitudes': [[0.1, 0.2], [0.3]],
                         'omegas': [[1, 2], [3]], 'phases': [[0, 1], [2]],
                         'offset': 0.1},
        Quintic: {'type': 'quintic', 'start': [0, 0], 'goal': [1, 1], 'duration': 2.0,
                  't_start': 1},
        Waypoints: {'type': 'waypoints', 'times': [0, 1, 2],
                    'positions': [[0, 0], [1, 1], [0, 2]]},
        Hold: {'type': 'hold', 'position': [0.1, 0.2]},
    }
    for cls, cfg in cfgs.items():
        traj = trajectory_from_config(cfg, 2)
        assert type(traj) is cls and traj.n_joints == 2
    q, qd, qdd = trajectory_from_config(cfgs[Sinusoid], 2).sample(1.0)
    np.testing.assert_allclose(q, [0.5 * math.sin(0.5), 0.3 * math.sin(0.5)], atol=1e-15)
    q, _, _ = trajectory_from_config(cfgs[Quintic], 2).sample(2.0)
    np.testing.assert_allclose(q, [0.5, 0.5], atol=1e-15)
    q, _, _ = trajectory_from_config(
        dict(cfgs[Waypoints], velocities=[[0, 0], [1, 0], [0, 0]]), 2).sample(1.0)
    np.testing.assert_allclose(q, [1, 1], atol=1e-14)
    q, _, _ = trajectory_from_config(cfgs[Hold], 2).sample(9.0)
    np.testing.assert_array_equal(q, [0.1, 0.2])


def test_factory_path_prefix():
    with pytest.raises(TrajectoryError, match=r'^scenario\.reference\.duration: must be > 0'):
        trajectory_from_config({'type': 'quintic', 'start': [0, 0], 'goal': [1, 1],
                                'duration': 0}, 2, path='scenario.reference')


SIN = {'type': 'sinusoid', 'amplitude': [0.5, 0.3], 'omega': [0.5, 0.5]}
SOS = {'type': 'sum_of_sinusoids', 'amplitudes': [[0.1], [0.2]], 'omegas': [[1], [2]]}
QUI = {'type': 'quintic', 'start': [0, 0], 'goal': [1, 1], 'duration': 2.0}
WPT = {'type': 'waypoints', 'times': [0, 1, 2], 'positions': [[0, 0], [1, 1], [0, 2]]}
HLD = {'type': 'hold', 'position': [0, 0]}


def w(base, **changes):
    """Copy of a config with keys changed (value None removes the key)."""
    cfg = dict(base)
    for k, v in changes.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    return cfg


INVALID = [
    # (config, key named in the message, reason fragment)
    ([1, 2], 'trajectory', 'must be a mapping'),
    ({}, 'trajectory.type', 'missing required key'),
    ({'type': 'spline'}, 'trajectory.type', "unknown trajectory type 'spline'"),
    ({'type': 3}, 'trajectory.type', 'unknown trajectory type 3'),
    (w(SIN, amp=[1, 1]), 'trajectory.amp', 'unknown key'),
    (w(QUI, duration_s=2.0), 'trajectory.duration_s', 'unknown key'),
    (w(HLD, times=[0, 1]), 'trajectory.times', 'unknown key'),
    (w(SIN, omega=None), 'trajectory.omega', 'missing required key'),
    # the keys renamed because "frequency" reads as Hz: refused, saying what changed
    ({'type': 'sinusoid', 'amplitude': [0.5, 0.3], 'frequency': [0.5, 0.5]},
     'trajectory.frequency', 'renamed to omega, the angular frequency in rad/s'),
    (w(SIN, frequency=[0.5, 0.5]), 'trajectory.frequency', 'renamed to omega'),
    ({'type': 'sum_of_sinusoids', 'amplitudes': [[0.1], [0.2]], 'frequencies': [[1], [2]]},
     'trajectory.frequencies', 'renamed to omegas, the angular frequencies in rad/s'),
    (w(SOS, amplitudes=None), 'trajectory.amplitudes', 'missing required key'),
    (w(QUI, goal=None), 'trajectory.goal', 'missing required key'),
    (w(WPT, positions=None), 'trajectory.positions', 'missing required key'),
    (w(HLD, position=None), 'trajectory.position', 'missing required key'),
    # sinusoid values
    (w(SIN, amplitude=[0.5, 0.3, 0.1]), 'trajectory.amplitude', 'expected 2 values'),
    (w(SIN, omega=[0.5]), 'trajectory.omega', 'expected 2 values'),
    (w(SIN, offset=[[0, 0]]), 'trajectory.offset', 'got shape (1, 2)'),
    (w(SIN, phase=[]), 'trajectory.phase', 'must not be empty'),
    (w(SIN, amplitude=[0.5, float('nan')]), 'trajectory.amplitude[1]', 'must be finite'),
    (w(SIN, omega=float('inf')), 'trajectory.omega', 'must be finite'),
    (w(SIN, omega=[0.5, -0.5]), 'trajectory.omega', 'must be >= 0'),
    (w(SIN, amplitude='0.5'), 'trajectory.amplitude', 'must be a number'),
    (w(SIN, amplitude=[0.5, True]), 'trajectory.amplitude[1]', 'must be a number'),
    (w(SIN, offset=None) | {'offset': [0, None]}, 'trajectory.offset[1]', 'must be a number'),
    # sum of sinusoids values
    (w(SOS, amplitudes=[[0.1]]), 'trajectory.amplitudes', 'expected 2 lists'),
    (w(SOS, amplitudes=0.1), 'trajectory.amplitudes', 'one list of numbers per joint'),
    (w(SOS, omegas=[[1, 2], [2]]), 'trajectory.omegas[0]', 'expected 1 values'),
    (w(SOS, omegas=[[1], [-2]]), 'trajectory.omegas[1][0]', 'must be >= 0'),
    (w(SOS, phases=[[0]]), 'trajectory.phases', 'expected 2 lists'),
    (w(SOS, phases=[[0], [float('nan')]]), 'trajectory.phases[1][0]', 'must be finite'),
    (w(SOS, amplitudes=[[0.1], [[0.2]]]), 'trajectory.amplitudes[1]', 'must be a list'),
    (w(SOS, offset=[0, 0, 0]), 'trajectory.offset', 'expected 2 values'),
    # quintic values
    (w(QUI, duration=0.0), 'trajectory.duration', 'must be > 0'),
    (w(QUI, duration=-1.0), 'trajectory.duration', 'must be > 0'),
    (w(QUI, duration=float('nan')), 'trajectory.duration', 'must be finite'),
    (w(QUI, duration=[2.0]), 'trajectory.duration', 'single number'),
    (w(QUI, duration=1e-200), 'trajectory.duration', 'too small'),
    (w(QUI, duration='2'), 'trajectory.duration', 'must be a number'),
    (w(QUI, start=[0, 0, 0]), 'trajectory.start', 'expected 2 values'),
    (w(QUI, goal=[1]), 'trajectory.goal', 'expected 2 values'),
    (w(QUI, goal=1.0), 'trajectory.goal', 'one number per joint'),
    (w(QUI, start=[0, float('inf')]), 'trajectory.start[1]', 'must be finite'),
    (w(QUI, t_start=float('nan')), 'trajectory.t_start', 'must be finite'),
    # waypoints values
    (w(WPT, times=[0, 1, 1]), 'trajectory.times',
     'must be strictly increasing (got 1.0 after 1.0)'),
    (w(WPT, times=[0, 2, 1]), 'trajectory.times', 'must be strictly increasing'),
    (w(WPT, times=[0], positions=[[0, 0]]), 'trajectory.times', 'at least 2 waypoints'),
    (w(WPT, times=[[0, 1, 2]]), 'trajectory.times', 'got shape (1, 3)'),
    (w(WPT, times=[0, float('nan'), 2]), 'trajectory.times[1]', 'must be finite'),
    (w(WPT, times=[0, 1e-300, 1]), 'trajectory.times', 'too close in time'),
    (w(WPT, times=[0, 1e-300, 1], velocities=[[0, 0], [1, 1], [0, 0]]), 'trajectory.times',
     'too close in time'),
    (w(WPT, positions=[[0, 0], [1, 1]]), 'trajectory.positions', 'expected 3 waypoints'),
    (w(WPT, positions=[[0, 0, 0], [1, 1, 1], [0, 2, 2]]), 'trajectory.positions',
     'expected 2 values per waypoint'),
    (w(WPT, positions=[[0, 0], [1], [0, 2]]), 'trajectory.positions', 'rectangular'),
    (w(WPT, positions=[0, 1, 2]), 'trajectory.positions', 'got shape (3,)'),
    (w(WPT, positions=[[0, 0], [1, float('nan')], [0, 2]]), 'trajectory.positions[1][1]',
     'must be finite'),
    (w(WPT, velocities=[[0, 0], [1, 1]]), 'trajectory.velocities', 'expected 3 waypoints'),
    (w(WPT, velocities=[[0, 0], [1, 1], [0, 0.5]]), 'trajectory.velocities[2]',
     'must be zero at the first and last waypoint'),
    (w(WPT, velocities=[[0.1, 0], [1, 1], [0, 0]]), 'trajectory.velocities[0]',
     'must be zero at the first and last waypoint'),
    # hold values
    (w(HLD, position=[0, 0, 0]), 'trajectory.position', 'expected 2 values'),
    (w(HLD, position=[0, float('-inf')]), 'trajectory.position[1]', 'must be finite'),
]


@pytest.mark.parametrize('cfg, key, reason', INVALID,
                         ids=[f'{i}-{c[1]}' for i, c in enumerate(INVALID)])
def test_invalid_config_rejected_naming_key(cfg, key, reason):
    with pytest.raises(TrajectoryError) as info:
        trajectory_from_config(cfg, 2)
    msg = str(info.value)
    assert msg.startswith(key + ':'), msg
    assert reason in msg, msg
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize('n', [0, -1, 1.5, True, None])
def test_factory_rejects_bad_n_joints(n):
    with pytest.raises(TrajectoryError, match='n_joints'):
        trajectory_from_config(HLD, n)


def test_constructors_validate_too():
    with pytest.raises(TrajectoryError, match=r'^trajectory\.amplitude: cannot infer'):
        Sinusoid(0.5, 0.5)
    with pytest.raises(TrajectoryError, match=r'^trajectory\.goal: expected 2 values'):
        Quintic([0, 0], [1, 1, 1], 1.0)
    with pytest.raises(TrajectoryError, match=r'^trajectory\.times: must be strictly'):
        Waypoints([0, 2, 2], [[0], [1], [2]])
    with pytest.raises(TrajectoryError, match=r'^trajectory\.position: expected 3 values'):
        Hold([0, 0], n_joints=3)


def test_inputs_are_copied():
    pos = np.array([0.1, 0.2])
    traj = Hold(pos)
    pos[0] = 5.0
    np.testing.assert_array_equal(traj.sample(0.0)[0], [0.1, 0.2])
