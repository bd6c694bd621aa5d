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
The tracking error a payload pick-up causes under computed torque (offline, measured).

For each run: the same loop with and without the payload (identical until the pick-up),
and per joint the max |e| over the second before the pick-up, the max |e| after it, the max
|e| over the last 0.5 s, and the payload's share of the error, ``max_j |e_payload -
e_none|``, at a few times after the pick-up (the rise of the step). Runs:

- the Panda fixture (``--urdf``), perfect-model computed torque (omega_n 20 rad/s), ideal
  and motor drives, ``--mass`` kg at ``--at`` s (default 2 kg at 2 s, 4 s);
- the 2R ``default`` scenario (Python loop: the kernel does not compile the payload),
  ``--mass-2r`` kg at 5 s of 10 s.

    python bench/bench_payload.py
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
import subprocess
import time

from manip_control.arm_scenario import run_urdf_closed_loop
from manip_control.parameters import load_scenario
from manip_control.parameters import PayloadParameters
from manip_control.simulation import run_closed_loop
import numpy as np

#: times after the pick-up [s] at which the payload's share of the error is printed
RISE = (0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
PANDA = Path(__file__).resolve().parents[2] / 'shared' / 'fixtures' / 'urdf' / 'panda.urdf'


def _report(name, t, e_bare, e_load, at):
    share = np.abs(e_load - e_bare)           # what the payload adds to the error
    e_bare, e_load = np.abs(e_bare), np.abs(e_load)
    before = (t >= at - 1.0) & (t < at)
    after = t >= at
    late = t >= t[-1] - 0.5
    fmt = ' '.join
    print(f'{name}')
    print('  max |e| 1 s before        [rad] ' + fmt(f'{v:.3g}' for v in e_load[before].max(0)))
    print('  max |e| after, no payload [rad] ' + fmt(f'{v:.3g}' for v in e_bare[after].max(0)))
    print('  max |e| after, payload    [rad] ' + fmt(f'{v:.3g}' for v in e_load[after].max(0)))
    print('  max |e| last 0.5 s        [rad] ' + fmt(f'{v:.3g}' for v in e_load[late].max(0)))
    steps = [(dt, share[np.argmin(np.abs(t - (at + dt)))].max()) for dt in RISE]
    print('  payload share max_j |e_payload - e_none| at t_pick + '
          + ', '.join(f'{dt:g} s: {v:.3g}' for dt, v in steps) + ' rad')


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    p.add_argument('--urdf', default=str(PANDA))
    p.add_argument('--mass', type=float, default=2.0)
    p.add_argument('--at', type=float, default=2.0)
    p.add_argument('--duration', type=float, default=4.0)
    p.add_argument('--mass-2r', type=float, default=1.0)
    args = p.parse_args()
    print(subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip())
    t0 = time.perf_counter()
    x = 0
    for i in range(10 ** 7):
        x += i
    print(f'reference loop of 1e7 additions: {time.perf_counter() - t0:.2f} s')
    payload = PayloadParameters(args.mass, args.at)
    for actuator in ('ideal', 'motor'):
        bare = run_urdf_closed_loop(args.urdf, duration=args.duration, actuator=actuator)
        load = run_urdf_closed_loop(args.urdf, duration=args.duration, actuator=actuator,
                                    payload=payload)
        _report(f'{Path(args.urdf).name}, {actuator} drives, {args.mass:g} kg at {args.at:g} s '
                f'(Kp {bare.kp[0]:g}, Kd {bare.kd[0]:g})', bare.run.t, bare.run.error,
                load.run.error, args.at)
    scenario = load_scenario('default')
    loaded = dataclasses.replace(scenario, plant=dataclasses.replace(
        scenario.plant, payload=PayloadParameters(args.mass_2r, 5.0)))
    bare = run_closed_loop(scenario, engine='python')
    load = run_closed_loop(loaded, engine='python')
    _report(f'2R default scenario (its own nominal model), {args.mass_2r:g} kg at 5 s',
            bare.t, bare.q - bare.q_d, load.q - load.q_d, 5.0)
    print(subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip())
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
