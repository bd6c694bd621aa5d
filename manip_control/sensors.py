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
Joint sensors: ideal, encoder quantization, Gaussian noise, filtered velocity.

Measured position ``q_m = quantize(q + n_q)`` with resolution ``2 pi / counts`` and
``n_q ~ N(0, position_noise_std^2)``. Measured velocity is either the simulated one plus
``N(0, velocity_noise_std^2)`` noise, or a backward difference of ``q_m`` through a first-order
low-pass ``v_k = v_{k-1} + alpha ((q_m,k - q_m,k-1)/T - v_{k-1})`` with
``alpha = T / (T + 1 / (2 pi f_c))``.
"""

from __future__ import annotations

import math
from typing import Sequence

from manip_control.parameters import SensorParameters
import numpy as np


class JointSensors:
    """
    Turns the simulated joint state into a measurement, one call per control tick.

    Parameters
    ----------
    params : SensorParameters
    period : float
        Sampling period [s] (the control period).
    n_joints : int, optional
        Number of joints (default 2).

    """

    def __init__(self, params: SensorParameters, period: float, n_joints: int = 2):
        self.params = params
        self.period = float(period)
        self.n = int(n_joints)
        self.ideal = params.ideal
        self._res = 2.0 * math.pi / params.encoder_counts if params.encoder_counts else 0.0
        tau = 1.0 / (2.0 * math.pi * params.velocity_cutoff_hz)
        self._alpha = self.period / (self.period + tau)
        self.reset()

    def reset(self) -> None:
        """Restart the noise sequence and the velocity filter."""
        self._rng = np.random.default_rng(self.params.seed)
        self._prev = None
        self._vel = [0.0] * self.n

    def measure(self, q: Sequence[float], qd: Sequence[float]) -> tuple[tuple, tuple]:
        """
        Measured ``(q, qd)`` [rad, rad/s] for the true state, one value per joint.

        Parameters
        ----------
        q, qd : sequence of n float
            True joint position [rad] and velocity [rad/s].

        """
        if self.ideal:
            return tuple(q), tuple(qd)
        p = self.params
        n = self.n
        q = [float(v) for v in q]
        if p.position_noise_std:
            noise = self._rng.normal(0.0, p.position_noise_std, n)
            q = [q[j] + noise[j] for j in range(n)]
        if self._res:
            q = [round(x / self._res) * self._res for x in q]
        if p.velocity_source == 'filtered_difference':
            if self._prev is None:
                self._vel = [float(v) for v in qd]
            else:
                a = self._alpha
                for j in range(n):
                    raw = (q[j] - self._prev[j]) / self.period
                    self._vel[j] += a * (raw - self._vel[j])
            self._prev = q
            v = list(self._vel)
        else:
            v = [float(x) for x in qd]
        if p.velocity_noise_std:
            noise = self._rng.normal(0.0, p.velocity_noise_std, n)
            v = [v[j] + noise[j] for j in range(n)]
        return tuple(q), tuple(v)
