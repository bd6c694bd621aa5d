#!/usr/bin/env python3
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
Integrator accuracy: the fixed-step plant against tight-tolerance scipy solutions.

For the seed-001 scenario with the motor model on (10 s, 1 kHz zero-order hold), prints per
RK4 sub-step count:
* closed loop: max |q - q_ref| where the reference is the same closed loop with the plant ODE
  solved by Radau (rtol 1e-10) over each held period;
* open loop: the run's held commands replayed into Radau, max |q - q_ref| per second — the
  uncontrolled arm amplifies any difference about e^{4 t}, which this table shows;
* the same open-loop replay solved by DOP853 (rtol 1e-12) against Radau: the floor that two
  tight references reach by themselves.
Slow (a few minutes): it is a measurement, not a test.

    .venv/bin/python bench/integrator_accuracy.py [--substeps 1,2,4,8]
"""

import argparse
import dataclasses
from pathlib import Path
import sys
import time

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from manip_control.parameters import load_scenario  # noqa: E402
from manip_control.plant import plant_dynamics  # noqa: E402
from manip_control.simulation import ClosedLoop, run_closed_loop  # noqa: E402
import numpy as np  # noqa: E402
from scipy.integrate import solve_ivp  # noqa: E402


def replay(res, plant, method, rtol):
    x = np.zeros(8)
    out = [x]
    for k, t in enumerate(res.t):
        x = solve_ivp(plant_dynamics, (t, t + 1e-3), x, method=method, rtol=rtol, atol=1e-12,
                      args=(res.tau_cmd[k], plant)).y[:, -1]
        out.append(x)
    return np.array(out)


def closed_loop_radau(sc):
    loop = ClosedLoop(sc)
    x = np.zeros(8)
    qs = []
    for k in range(sc.n_ticks):
        t = k * sc.period
        r, rv, ra = loop.trajectory.sample(t)
        o = loop.controller.update(x[:2], x[2:4], r, rv, ra)
        qs.append(x[:2].copy())
        x = solve_ivp(plant_dynamics, (t, t + sc.period), x, method='Radau', rtol=1e-10,
                      atol=1e-12, args=(np.array(o.tau), sc.plant)).y[:, -1]
    return np.array(qs)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--substeps', default='1,2,4,8')
    args = p.parse_args()
    base = load_scenario('seed001')
    for sub in (int(s) for s in args.substeps.split(',')):
        plant = dataclasses.replace(base.plant, actuator='motor', rotor_inertia=True,
                                    substeps=sub)
        sc = dataclasses.replace(base, plant=plant)
        t0 = time.perf_counter()
        res = run_closed_loop(sc)
        wall = time.perf_counter() - t0
        cl = np.abs(res.q - closed_loop_radau(sc)).max()
        ol = replay(res, plant, 'Radau', 1e-10)
        err = np.abs(res.q - ol[:-1, :2]).max(axis=1)
        per_s = ' '.join(f'{err[(res.t >= s) & (res.t < s + 1)].max():.0e}' for s in range(10))
        print(f'substeps {sub}: run {wall:.2f} s; closed loop max |dq| {cl:.2e} rad; '
              f'open loop max |dq| per second: {per_s}')
        if sub == 4:
            dop = replay(res, plant, 'DOP853', 1e-12)
            floor = np.abs(dop[:, :2] - ol[:, :2]).max(axis=1)
            per_s = ' '.join(f'{floor[s * 1000:(s + 1) * 1000].max():.0e}' for s in range(10))
            print(f'  reference floor, open loop DOP853 vs Radau per second: {per_s}')


if __name__ == '__main__':
    main()
