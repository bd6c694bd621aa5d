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
Benchmark: offline closed loop, 10 s at 1 kHz control with the full motor + friction plant.

Prints the real-time factor (simulated seconds per wall-clock second) of
``simulation.run_closed_loop`` for the default scenario (RK4, 4 sub-steps per 1 ms period,
computed torque, sinusoid), best and median of several runs, plus the cost of each part of a
tick. Target: >= 20x real time on one core.

    .venv/bin/python bench/bench_offline.py [--runs 5] [--config default]
"""

import argparse
import statistics
import sys
import time
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from manip_control.parameters import load_scenario  # noqa: E402
from manip_control.simulation import ClosedLoop, run_closed_loop  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--runs', type=int, default=5)
    p.add_argument('--config', default='default')
    args = p.parse_args()
    sc = load_scenario(args.config)
    print(f'scenario {sc.name}: {sc.duration} s at {sc.control_rate:g} Hz, actuator '
          f'{sc.plant.actuator}, {sc.plant.substeps} RK4 sub-steps per period')
    walls = []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        run_closed_loop(sc)
        walls.append(time.perf_counter() - t0)
    rtf = [sc.duration / w for w in walls]
    print(f'real-time factor: best {max(rtf):.1f}x, median {statistics.median(rtf):.1f}x '
          f'({args.runs} runs; per tick {min(walls) / sc.n_ticks * 1e6:.1f} us)')
    loop = ClosedLoop(sc)
    n = 20000
    parts = {
        'plant.step': lambda: loop.plant.step(40.0, 9.0),
        'controller.update': lambda: loop.controller.update(0.1, 0.2, 0.3, 0.4, 0.1, 0.2,
                                                            0.3, 0.4, 0.5, 0.6),
        'trajectory.sample': lambda: loop.trajectory.sample(0.3),
        'sensors.measure': lambda: loop.sensors.measure(0.1, 0.2, 0.3, 0.4),
    }
    for name, fn in parts.items():
        print(f'  {name:20s} {timeit.timeit(fn, number=n) / n * 1e6:6.2f} us/call')


if __name__ == '__main__':
    main()
