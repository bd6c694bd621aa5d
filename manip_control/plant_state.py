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
The 2R plant's rigid-body model and initial state, from its parameters.

Shared by the Python plant (:mod:`manip_control.plant`) and the compiled engine
(:mod:`manip_control.kernel`), which both build on them; the plant module re-exports both.
"""

from __future__ import annotations

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
