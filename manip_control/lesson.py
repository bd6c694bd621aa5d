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
The lesson of a run: what its late-window error is made of, beside figures that explain it.

It runs the scenario once more with a perfect nominal model
(:func:`manip_control.simulation.truth_nominal`) and puts the first-order ISS estimate and
the proven bound of the robustness study (:mod:`manip_control.robustness`) beside the run's
error; ``manip-offline`` and ``manip-sim`` end their summary with it.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

from manip_control.parameters import AdaptationParameters
from manip_control.parameters import Scenario
from manip_control.robustness import bound_assumptions
from manip_control.robustness import error_bound
from manip_control.robustness import iss_estimate
from manip_control.simulation import late_window
from manip_control.simulation import run_closed_loop
from manip_control.simulation import summarize
from manip_control.simulation import truth_nominal
from manip_control.trajectories import trajectory_from_config
import numpy as np


def _mismatch_text(scenario: Scenario) -> str:
    """Return e.g. ``m1 2.5 (true 3), m2 1.5 (true 2)``: how the nominal model is off."""
    nm, truth = scenario.controller.nominal, truth_nominal(scenario)
    parts = [f'{f.name} {getattr(nm.arm, f.name):g} (true {getattr(truth.arm, f.name):g})'
             for f in dataclasses.fields(nm.arm)
             if getattr(nm.arm, f.name) != getattr(truth.arm, f.name)]
    for name in ('friction', 'rotor_inertia', 'rotor_coupling', 'gear_ratio', 'eta',
                 'eta_back'):
        if getattr(nm, name) != getattr(truth, name) and (
                name != 'friction' or scenario.controller.friction_compensation):
            parts.append(name.replace('_', ' '))
    return ', '.join(parts) if parts else 'none'


def lesson(scenario: Scenario, late_max_error: Sequence[float],
           duration: float | None = None, engine: str = 'auto') -> dict:
    """
    Explain a run's error: the figures beside it that say what it is and why.

    Parameters
    ----------
    scenario : Scenario
        The run's scenario.
    late_max_error : sequence of 2 float
        The run's max |e| over :func:`late_window` [rad].
    duration : float, optional
        The run's simulated time [s] (default: the scenario's).
    engine : str
        Engine of the extra offline run (see :func:`run_closed_loop`).

    Returns
    -------
    dict
        ``window`` (:class:`LateWindow`), ``error`` (the given figures), ``mismatch`` (text,
        ``'none'`` for a perfect model: then no more), ``baseline``: late max |e| of one
        extra offline run of the same scenario with the nominal model set to the plant's
        truth (:func:`truth_nominal`): what the controller
        leaves without model error (drives, the hold, the start); ``estimate``: the
        first-order ISS estimate ``||h_j||_1 max |eta_j|`` of the rigid-body mismatch along
        the reference over the window (:func:`manip_control.robustness.iss_estimate`;
        ``None`` unless the law is computed torque); ``bound``: the proven bound of
        :func:`manip_control.robustness.error_bound` (``inf`` when its small-gain condition
        fails; ``None`` when the scenario is outside the proof, e.g. motor drives).

    """
    end = scenario.duration if duration is None else float(duration)
    window = late_window(scenario, end)
    ctrl = scenario.controller
    mismatch = _mismatch_text(scenario)
    out = {'window': window, 'error': [float(e) for e in late_max_error],
           'mismatch': mismatch, 'baseline': None, 'estimate': None, 'bound': None,
           'adaptive': bool(ctrl.adaptation.enabled)}
    if mismatch == 'none':
        return out
    # the baseline is computed torque with the truth: no adaptation
    base_sc = dataclasses.replace(scenario, controller=dataclasses.replace(
        ctrl, nominal=truth_nominal(scenario), adaptation=AdaptationParameters()))
    out['baseline'] = summarize(run_closed_loop(base_sc, end, engine),
                                window.start)['max_error_rad']
    if ctrl.law == 'computed_torque':
        traj = trajectory_from_config(dict(scenario.trajectory), 2)
        ref = traj.sample_many(np.linspace(window.start, window.end, 2000))
        out['estimate'] = iss_estimate(scenario, ctrl.nominal, ctrl.kp, ctrl.kd,
                                       reference=ref).tolist()
        if not bound_assumptions(scenario):
            out['bound'] = error_bound(scenario, reference=ref).bound.tolist()
    return out


def format_lesson(data: dict, joints: Sequence[str]) -> str:
    """Return the lesson's lines (see :func:`lesson`)."""
    def row(label, values):
        return f'  {label:<44}' + ''.join(f'{v:12.4g}' for v in values)

    lines = [f'lesson: late window {data["window"].describe()}']
    if data['baseline'] is None:
        lines.append("  nominal model = the plant's truth: no model error to explain")
        return '\n'.join(lines)
    lines += [f'  nominal model vs the plant: {data["mismatch"]}',
              f'  {"late-window max |e| [rad]":<44}' + ''.join(f'{j:>12}' for j in joints),
              row('this run', data['error']),
              row("perfect model (nominal = the plant's truth)", data['baseline'])]
    if data['estimate'] is not None:
        lines.append(row('ISS estimate of this mismatch (rigid body)', data['estimate']))
    bound = data.get('bound')
    if bound is not None and all(math.isfinite(b) for b in bound):
        lines.append(row('proven bound of this mismatch', bound))
    elif bound is not None:
        lines.append('  proven bound: none for this mismatch (its small-gain condition fails)')
    ratio = ' / '.join(f'{e / b:.3g}x' if b > 0 else 'inf' for e, b in
                       zip(data['error'], data['baseline']))
    lead = ('with adaptation (this run) the error is' if data.get('adaptive')
            else 'the model error makes the error')
    lines.append(f'  {lead} {ratio} that of the perfect model' + (
        '' if data['estimate'] is None else
        ';\n  the estimate is first order in e, not a strict bound (docs/identification.md)'))
    return '\n'.join(lines)
