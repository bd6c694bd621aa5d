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
The 2R plant's rigid-body model, initial state and mechanics (held joints of Karnopp friction).

Shared by the Python plant (:mod:`manip_control.plant`) and the compiled engine
(:mod:`manip_control.kernel`), which both build on them; the plant module re-exports both.
"""

from __future__ import annotations

import math

from manip_control.actuators import clamp
from manip_control.dynamics import TwoLinkModel
from manip_control.parameters import PlantParameters
import numpy as np


def plant_model(params: PlantParameters) -> TwoLinkModel:
    """Return the plant's rigid-body model: the arm with its rotors as configured."""
    return TwoLinkModel(params.arm, params.reflected_inertia, params.rotor_coupling_terms)


def initial_state(params: PlantParameters, q=None, qd=None) -> np.ndarray:
    """
    Return the initial state ``[q, qd, i, x_i]`` (defaults: the configured q0, qd0).

    With ``params.start_in_equilibrium`` in motor mode the currents hold the pose against
    gravity at rest, ``N k_t i = g(q)`` (clamped to ``+-i_max``), and the PI integrators
    carry the matching terminal voltage ``x_i = R i + k_e N qd``; otherwise both are zero.
    """
    q = params.initial_position if q is None else q
    qd = params.initial_velocity if qd is None else qd
    x = np.array([q[0], q[1], qd[0], qd[1], 0.0, 0.0, 0.0, 0.0], dtype=float)
    if params.actuator == 'motor' and params.start_in_equilibrium:
        g = plant_model(params).gravity_vector(x[0:2])
        for j, mo in enumerate(params.motors):
            i = clamp(g[j] / mo.torque_per_amp, mo.i_max)
            x[4 + j] = i
            x[6 + j] = mo.R * i + mo.k_e * mo.N * x[2 + j]
    return x


def two_link_mechanics(v1: float, v2: float, t1: float, t2: float, w1: tuple, w2: tuple,
                       fr1: float, fr2: float, a11: float, a12: float, a21: float,
                       a22: float, karnopp: bool, fs1: float, fs2: float) -> tuple:
    """
    Return the 2R's joint accelerations [rad/s^2] from ``A qdd = r - f``.

    The one implementation: the Python plant (:mod:`manip_control.plant`) calls it, the
    kernel compiles it (hence only floats, tuples and :mod:`math`).

    ``r_j = t_j + w_j`` is computed as ``t1 - w1[0] - w1[1] - w1[2]`` and
    ``t2 + w2[0] - w2[1]`` to keep the order of operations of the equations; ``fr`` the
    sliding friction; with ``karnopp`` a joint at exactly zero velocity is held unless the
    torque needed exceeds ``fs`` (breakaway).
    """
    r1 = t1 - w1[0] - w1[1] - w1[2]
    r2 = t2 + w2[0] - w2[1]
    held1 = held2 = False
    if karnopp:
        held1 = v1 == 0.0
        held2 = v2 == 0.0
        if held1 and held2:
            fr1, fr2 = r1, r2
            if abs(fr1) > fs1:
                fr1, held1 = math.copysign(fs1, fr1), False
            if abs(fr2) > fs2:
                fr2, held2 = math.copysign(fs2, fr2), False
            if held1 and held2:
                return 0.0, 0.0
        # one joint stuck (from the start, or the other broke away): hold it if it can be
        if held1:
            fr1 = r1 - a12 * ((r2 - fr2) / a22)
            if abs(fr1) > fs1:
                fr1, held1 = math.copysign(fs1, fr1), False
        elif held2:
            fr2 = r2 - a21 * ((r1 - fr1) / a11)
            if abs(fr2) > fs2:
                fr2, held2 = math.copysign(fs2, fr2), False
    r1 -= fr1
    r2 -= fr2
    idet = 1.0 / (a11 * a22 - a12 * a21)
    return (0.0 if held1 else (a22 * r1 - a12 * r2) * idet,
            0.0 if held2 else (a11 * r2 - a21 * r1) * idet)
