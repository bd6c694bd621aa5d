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

"""Tests of manip_control.sensors: ideal, quantized, noisy and filtered-difference sensors."""

import math

from manip_control.parameters import SensorParameters
from manip_control.sensors import JointSensors
import numpy as np
import pytest

T = 1e-3


def _m(sensors, q1, q2, v1, v2):
    """One 2-joint measurement as a flat ``(q1, q2, qd1, qd2)``."""
    q, qd = sensors.measure((q1, q2), (v1, v2))
    return (*q, *qd)


def _run(sensors, states):
    return np.array([_m(sensors, *s) for s in states])


def _random_states(n, seed=1):
    rng = np.random.default_rng(seed)
    return np.column_stack([rng.uniform(-7.0, 7.0, (n, 2)), rng.uniform(-5.0, 5.0, (n, 2))])


def test_ideal_sensors_return_exact_state():
    sensors = JointSensors(SensorParameters(), T)
    states = _random_states(200)
    out = _run(sensors, states)
    assert np.array_equal(out, states)


@pytest.mark.parametrize('counts', [4096, 1000, 17])
def test_quantization_to_encoder_resolution(counts):
    sensors = JointSensors(SensorParameters(encoder_counts=counts), T)
    res = 2.0 * math.pi / counts
    states = _random_states(2000)
    out = _run(sensors, states)
    q_true, q_meas = states[:, :2], out[:, :2]
    steps = q_meas / res
    # every measured position is an integer multiple of the resolution ...
    assert np.max(np.abs(steps - np.round(steps))) < 1e-9
    # ... and the nearest one to the true position
    err = np.abs(q_meas - q_true)
    assert np.max(err) <= res / 2 * (1 + 1e-9)
    # the error really is a quantization error of that size (not exact, not smaller steps)
    assert np.max(err) > 0.45 * res
    assert np.mean(err) == pytest.approx(res / 4, rel=0.1)
    # velocity source 'true' without noise passes the simulated velocity through
    assert np.array_equal(out[:, 2:], states[:, 2:])


def test_quantization_exact_multiples_are_kept():
    counts = 360
    res = 2.0 * math.pi / counts
    sensors = JointSensors(SensorParameters(encoder_counts=counts), T)
    for k in (-400, -1, 0, 1, 7, 359, 1000):
        q1, q2, _, _ = _m(sensors, k * res, -k * res + 0.4 * res, 0.0, 0.0)
        assert q1 == pytest.approx(k * res, abs=1e-12)
        assert q2 == pytest.approx(-k * res, abs=1e-12)


def _noise_samples(params, n, state=(0.3, -1.2, 0.5, 2.0)):
    sensors = JointSensors(params, T)
    out = _run(sensors, [state] * n)
    return out - np.asarray(state)


N_NOISE = 40000


@pytest.mark.parametrize('sq,sv', [(1e-3, 0.0), (0.0, 0.02), (5e-4, 0.05)])
def test_noise_has_configured_std(sq, sv):
    params = SensorParameters(position_noise_std=sq, velocity_noise_std=sv, seed=11)
    noise = _noise_samples(params, N_NOISE)
    # The sample std of N Gaussian draws has a relative standard error 1/sqrt(2N) = 0.35 %;
    # a 2 % tolerance is about 6 standard errors (no false failures) while a 5 % error in
    # the configured std (e.g. variance instead of std, or a factor sqrt(2)) fails.
    rel = 2.0e-2
    for j, std in enumerate((sq, sq, sv, sv)):
        column = noise[:, j]
        if std == 0.0:
            assert np.all(column == 0.0)
            continue
        assert np.std(column) == pytest.approx(std, rel=rel)
        # zero mean: standard error std/sqrt(N) = 0.5 % of std; allow 6 of them
        assert abs(np.mean(column)) < 6.0 * std / math.sqrt(N_NOISE)
        # Gaussian: about 68.3 % within one std (binomial s.e. 0.23 %)
        inside = np.mean(np.abs(column) < std)
        assert inside == pytest.approx(0.6827, abs=0.015)
    # the two joints get independent noise
    for a, b in ((0, 1), (2, 3)):
        if np.std(noise[:, a]) > 0:
            assert abs(np.corrcoef(noise[:, a], noise[:, b])[0, 1]) < 6.0 / math.sqrt(N_NOISE)


def test_noise_reproducible_with_seed_and_different_with_another():
    params = SensorParameters(position_noise_std=1e-3, velocity_noise_std=1e-2, seed=5)
    a = _noise_samples(params, 500)
    b = _noise_samples(params, 500)
    c = _noise_samples(SensorParameters(position_noise_std=1e-3, velocity_noise_std=1e-2,
                                        seed=6), 500)
    assert np.array_equal(a, b)
    assert not np.any(np.all(a == c, axis=1))
    # reset restarts the sequence
    sensors = JointSensors(params, T)
    first = _run(sensors, [(0.0, 0.0, 0.0, 0.0)] * 50)
    sensors.reset()
    again = _run(sensors, [(0.0, 0.0, 0.0, 0.0)] * 50)
    assert np.array_equal(first, again)


def _discrete_filter_response(amp, w, T, alpha, n, v0):
    """
    Return the closed-form output of the filtered backward difference.

    The filter is v_k = v_{k-1} + alpha ((q_k - q_{k-1})/T - v_{k-1}), v_0 = v0, driven by
    q_k = amp sin(w k T).

    Steady state: the transfer function H(z) = alpha (1 - z^-1) / (T (1 - (1 - alpha) z^-1))
    at z = exp(j w T) applied to the input phasor; transient: (v0 - p_0) (1 - alpha)^k.
    """
    z = np.exp(1j * w * T)
    H = alpha * (1.0 - 1.0 / z) / (T * (1.0 - (1.0 - alpha) / z))
    k = np.arange(n)
    p = amp * np.imag(H * np.exp(1j * w * k * T))
    return p + (v0 - p[0]) * (1.0 - alpha) ** k, H


@pytest.mark.parametrize('fc,f', [(100.0, 5.0), (20.0, 10.0), (300.0, 2.0)])
def test_filtered_difference_velocity_matches_discrete_first_order_lag(fc, f):
    params = SensorParameters(velocity_source='filtered_difference', velocity_cutoff_hz=fc)
    sensors = JointSensors(params, T)
    amp1, amp2, w = 0.7, -0.3, 2.0 * math.pi * f
    n = 3000
    t = np.arange(n) * T
    q1, q2 = amp1 * np.sin(w * t), amp2 * np.sin(w * t)
    qd1, qd2 = amp1 * w * np.cos(w * t), amp2 * w * np.cos(w * t)
    out = _run(sensors, np.column_stack([q1, q2, qd1, qd2]))
    # positions untouched
    assert np.array_equal(out[:, 0], q1) and np.array_equal(out[:, 1], q2)
    tau = 1.0 / (2.0 * math.pi * fc)
    alpha = T / (T + tau)
    for j, amp in enumerate((amp1, amp2)):
        expected, _ = _discrete_filter_response(amp, w, T, alpha, n, amp * w)
        # exact to round-off (the recursion accumulates ~n ulp)
        assert np.max(np.abs(out[:, 2 + j] - expected)) < 1e-10 * abs(amp) * w
    # Independently of the discrete algebra: in steady state the velocity is the true
    # derivative through a first-order lag of time constant tau, delayed by the half sample
    # of the backward difference: gain 1/sqrt(1 + (w tau)^2), phase -(atan(w tau) + w T/2).
    # The backward-Euler discretisation of the lag departs from this by about
    # (w T)(w tau)/2 relative, the half-sample delay model by O((w T)^2); the tolerance is
    # twice the sum of these leading terms.
    ss = t > 10 * tau + 0.2
    gain = 1.0 / math.sqrt(1.0 + (w * tau) ** 2)
    phase = -(math.atan(w * tau) + w * T / 2.0)
    for j, amp in enumerate((amp1, amp2)):
        approx = amp * w * gain * np.cos(w * t[ss] + phase)
        tol = abs(amp) * w * ((w * T) ** 2 + (w * T) * (w * tau))
        assert np.max(np.abs(out[ss, 2 + j] - approx)) < tol
        # the lag is really there: the error against the true derivative has the size of
        # the lag's (a filter without lag, or with another cutoff, would not match)
        err = np.max(np.abs(out[ss, 2 + j] - amp * w * np.cos(w * t[ss])))
        lag_err = abs(amp) * w * abs(1.0 - gain * np.exp(1j * phase))
        assert abs(err - lag_err) < tol


def test_filtered_difference_first_sample_uses_true_velocity():
    params = SensorParameters(velocity_source='filtered_difference')
    sensors = JointSensors(params, T)
    assert _m(sensors, 0.1, 0.2, 1.5, -2.5) == (0.1, 0.2, 1.5, -2.5)
    # constant position afterwards: velocity decays geometrically with factor 1 - alpha
    alpha = T / (T + 1.0 / (2.0 * math.pi * 100.0))
    for k in range(1, 20):
        _, _, v1, v2 = _m(sensors, 0.1, 0.2, 99.0, 99.0)
        assert v1 == pytest.approx(1.5 * (1 - alpha) ** k, rel=1e-12)
        assert v2 == pytest.approx(-2.5 * (1 - alpha) ** k, rel=1e-12)


def test_filtered_difference_of_ramp_converges_to_slope_of_quantized_position():
    counts = 100000
    params = SensorParameters(velocity_source='filtered_difference', encoder_counts=counts,
                              velocity_cutoff_hz=20.0)
    sensors = JointSensors(params, T)
    slope = 0.8
    vals = [_m(sensors, slope * k * T, -slope * k * T, 0.0, 0.0) for k in range(2000)]
    v = np.array(vals)[:, 2:]
    # after 2 s (>> tau = 8 ms) the average of the last 0.5 s is the slope
    assert np.mean(v[-500:, 0]) == pytest.approx(slope, rel=1e-3)
    assert np.mean(v[-500:, 1]) == pytest.approx(-slope, rel=1e-3)


def test_seven_joints_quantized_and_noisy_per_joint():
    counts = 4096
    res = 2.0 * math.pi / counts
    params = SensorParameters(encoder_counts=counts, velocity_noise_std=0.01, seed=3)
    sensors = JointSensors(params, T, n_joints=7)
    q_true = np.linspace(-1.0, 1.0, 7)
    qd_true = np.zeros(7)
    q, qd = sensors.measure(q_true, qd_true)
    assert len(q) == len(qd) == 7
    assert np.all(np.abs(np.array(q) - q_true) <= res / 2 + 1e-15)
    np.testing.assert_allclose(np.array(q) / res, np.round(np.array(q) / res), atol=1e-9)
    # the velocity noise is drawn per joint from the seeded sequence
    expected = np.random.default_rng(3).normal(0.0, 0.01, 7)
    np.testing.assert_array_equal(qd, expected)
