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
Benchmark: the cost of a limited tick of the torque-rate limit, ``TorqueRateLimiter.limit``.

A 7-joint arm (``--urdf``, default the Panda fixture) with the node's URDF defaults
(``arm_scenario.control_defaults``: the effort in 40 ms); each call asks a random step of 0.5-5x
the bound from the last command at a random pose, so every call is limited. Printed, in us
per call (wall time, ``perf_counter_ns``, p50 / p99 of ``--calls`` calls): the step scaled as
a whole (no mass matrix); the bounded step closest in acceleration as the node runs it (the
nominal mass matrix evaluated in the call, ``LIMITER_ITERATIONS`` iterations); and the same
solved to optimality. Beside them, the CPU time of a pure-Python loop of 1e7 additions (the
host's speed of the moment; it runs at two speeds).
"""

import argparse
from pathlib import Path
import sys
import time

from manip_control.arm_model import UrdfArm
from manip_control.arm_scenario import control_defaults
from manip_control.supervision import closest_bounded_step
from manip_control.supervision import TorqueRateLimiter
import numpy as np

URDF = Path(__file__).resolve().parents[2] / 'shared' / 'fixtures' / 'urdf' / 'panda.urdf'
REFERENCE = compile('s = 0\nfor i in range(10_000_000):\n    s += i\n', 'reference', 'exec')


def reference_loop() -> float:
    """CPU time [s] of a pure-Python loop of 1e7 additions."""
    t = time.process_time()
    exec(REFERENCE, {})
    return time.process_time() - t


def main() -> int:
    """Print the measured cost of limited ticks."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument('--urdf', type=Path, default=URDF)
    parser.add_argument('--calls', type=int, default=3000)
    args = parser.parse_args()
    if not args.urdf.is_file():
        print(f'error: --urdf: no such file: {args.urdf}', file=sys.stderr)
        return 2
    arm = UrdfArm.from_file(args.urdf)
    rate = np.array(control_defaults(arm)['torque_rate_limit'])
    dt = 1e-3
    rng = np.random.default_rng(0)
    lo, hi = arm.limits.lower, arm.limits.upper
    poses = [lo + (hi - lo) * rng.random(arm.n) for _ in range(args.calls)]
    steps = [rate * dt * rng.uniform(0.5, 5.0, arm.n) * rng.choice((-1.0, 1.0), arm.n)
             for _ in range(args.calls)]
    print(f'Python loop of 1e7 additions: {reference_loop():.2f} s CPU (before)')
    print(f'{args.urdf.name}: {arm.n} joints, {args.calls} limited calls each')

    def run(label, mass_of):
        limiter = TorqueRateLimiter(tuple(rate))
        times = []
        for q, step in zip(poses, steps):
            limiter.reset((0.0,) * arm.n)
            t = time.perf_counter_ns()
            limiter.limit(tuple(step), dt, mass_of(q))
            times.append(time.perf_counter_ns() - t)
        us = np.array(times) * 1e-3
        print(f'  {label:<48} p50 {np.percentile(us, 50):7.1f} us   '
              f'p99 {np.percentile(us, 99):7.1f} us')

    run('scaled as a whole (no mass matrix)', lambda q: None)
    run('closest in acceleration, as the node runs it', lambda q: (lambda: arm.mass_matrix(q)))
    times = []
    for q, step in zip(poses, steps):
        t = time.perf_counter_ns()
        closest_bounded_step(arm.mass_matrix(q), step, rate * dt)
        times.append(time.perf_counter_ns() - t)
    us = np.array(times) * 1e-3
    print(f'  {"closest in acceleration, solved to optimality":<48} p50 '
          f'{np.percentile(us, 50):7.1f} us   p99 {np.percentile(us, 99):7.1f} us')
    print(f'Python loop of 1e7 additions: {reference_loop():.2f} s CPU (after)')
    return 0


if __name__ == '__main__':
    sys.exit(main())
