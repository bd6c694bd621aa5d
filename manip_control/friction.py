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
Joint friction: viscous + smoothed Coulomb, with an optional Stribeck term.

``f(qd) = b qd + (tau_c + tau_s exp(-(qd / v_s)^2)) tanh(qd / eps)``  [N·m]

The tanh smoothing (width ``eps`` [rad/s]) keeps the model C-infinity and odd, so fixed-step
integrators see no discontinuity at zero velocity.
"""

from __future__ import annotations

import math

from manip_control.parameters import FrictionParameters
import numpy as np


def friction_torque_scalar(qd: float, fr: FrictionParameters) -> float:
    """Friction torque of one joint [N·m] at joint velocity ``qd`` [rad/s]."""
    level = fr.tau_c
    if fr.tau_s:
        level += fr.tau_s * math.exp(-(qd / fr.v_s) ** 2)
    return fr.b * qd + level * math.tanh(qd / fr.eps)


def friction_torque(qd, friction) -> np.ndarray:
    """
    Friction torque per joint [N·m].

    Parameters
    ----------
    qd : array_like, shape (n,)
        Joint velocities [rad/s].
    friction : sequence of n FrictionParameters

    """
    qd = np.asarray(qd, dtype=float)
    if qd.shape != (len(friction),):
        raise ValueError(f'qd: expected shape ({len(friction)},), got {qd.shape}')
    return np.array([friction_torque_scalar(v, fr) for v, fr in zip(qd, friction)])
