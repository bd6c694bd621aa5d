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
Benchmark: the cost of one tick of the adaptive law (:mod:`manip_control.adaptation`).

Printed in us per call: the median over ``--rounds`` rounds of (the process's CPU time of
``--calls`` consecutive calls) / calls (CPU time: the preemptions of a loaded machine do not
count), for

* ``2R AdaptiveLaw.update``: the default scenario's law (10 base parameters, the
  consistency check every tick), and ``2R
  AdaptiveController.update`` (the law, friction feed-forward, gear inversion and limit: what
  the offline loop calls; and with the check every 10 ticks, as the node runs it, with the
  2R's torque in one compiled call and on the generic path: the rows of three regressor
  evaluations and the model's inverse dynamics in numpy), beside the
  computed-torque ``Controller.update`` of the same scenario;
* ``Panda AdaptiveLaw.update``: ``../shared/fixtures/urdf/panda.urdf`` (7 joints, armature
  0.04 kg m^2, its QR base parameters), the check every tick (``check_every 1``) and every
  10 ticks, and the latter on the generic path (the identification regressor's rows and the
  model's inverse dynamics and mass matrix in numpy) beside it; the excitation analysis out
  of these ticks (its BLAS threads would count in the process CPU);
* the Panda's tick as the node runs it (check every 10 ticks): the distribution of the wall
  time of single calls (p50, p90, p99, max over ``--calls`` calls) with the excitation
  analysis (an eigen-decomposition every 0.1 s) in the tick, as offline, and outside it
  (``excitation_in_loop`` false), as the node does; then with one BLAS thread
  (:func:`manip_control.nodes.common.single_threaded_blas`, as the controller node sets it in
  real time), with the process CPU per call beside.

Inputs vary per call over 1000 precomputed random samples. The host's speed varies by 2x:
the CPU time of a Python loop of 1e7 additions is printed before and after, with ``uptime``.
Run: ``.venv/bin/python bench/bench_adaptation.py``.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
import os
from pathlib import Path
import time

from manip_control.adaptation import ADAPTIVE_CHECK_EVERY
from manip_control.adaptation import AdaptiveController
from manip_control.adaptation import AdaptiveLaw
from manip_control.adaptation import two_link_base_regressor
from manip_control.control import Controller
from manip_control.control import nominal_arm
from manip_control.nodes.common import single_threaded_blas
from manip_control.parameters import load_scenario
import numpy as np

REFERENCE = compile('s = 0\nfor i in range(10_000_000):\n    s += i\n', 'reference', 'exec')
PANDA = Path(__file__).resolve().parent.parent.parent / 'shared' / 'fixtures' / 'urdf' / \
    'panda.urdf'


def reference_loop() -> float:
    """CPU time [s] of a pure-Python loop of 1e7 additions (the host's speed of the moment)."""
    c0 = time.process_time()
    exec(REFERENCE, {})
    return time.process_time() - c0


def samples(n: int, count: int = 1000, seed: int = 0) -> list:
    """
    Return ``count`` random ``(q, qd, q_d, qd_d, qdd_d)`` of n joints as lists.

    A tracking arm: ``q``, ``qd`` within 0.01 rad, rad/s of the reference (errors as large
    as the reference's own make the law refuse most steps, a path a tracking run rarely takes).
    """
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1.0, 1.0, (count, 5, n))
    x[:, 2] = x[:, 0] + 0.01 * x[:, 2]
    x[:, 1] = x[:, 3] + 0.01 * x[:, 1]
    return [[row.tolist() for row in s] for s in x]


def per_call(fn, inputs: list, calls: int, rounds: int) -> float:
    """Median over rounds of the CPU time per call [us]."""
    out = []
    m = len(inputs)
    for _ in range(rounds):
        c0 = time.process_time()
        for k in range(calls):
            fn(*inputs[k % m])
        out.append((time.process_time() - c0) / calls * 1e6)
    return float(np.median(out))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    p.add_argument('--calls', type=int, default=2000)
    p.add_argument('--rounds', type=int, default=5)
    args = p.parse_args()
    print(f'Python loop of 1e7 additions: {reference_loop():.2f} s CPU (before)')
    print('uptime:', os.popen('uptime').read().strip())
    sc = load_scenario('default')
    ctrl = sc.controller
    x2 = samples(2)
    reg2 = two_link_base_regressor(ctrl.nominal)
    law = AdaptiveLaw(nominal_arm(ctrl.nominal), reg2, ctrl.kp, ctrl.kd, sc.period,
                      ctrl.adaptation)
    every = ADAPTIVE_CHECK_EVERY
    node = AdaptiveController(ctrl, sc.period, check_every=every)
    generic = AdaptiveController(ctrl, sc.period, regressor=replace(
        two_link_base_regressor(ctrl.nominal, ctrl), two_velocity=None, torque_kernel=None),
        check_every=every)
    ac = AdaptiveController(ctrl, sc.period)
    ct = Controller(ctrl, sc.period)
    rows = [('2R Controller.update (computed torque)', ct.update, x2),
            ('2R AdaptiveLaw.update', law.update, x2),
            ('2R AdaptiveController.update', ac.update, x2),
            (f'2R AdaptiveController.update (check_every {every}, the node)', node.update, x2),
            ('  the same, generic path (no compiled torque)', generic.update, x2)]
    if PANDA.exists():
        from manip_control.arm_identification import adaptive_regressor
        from manip_control.arm_identification import ArmRegressor
        from manip_control.arm_identification import base_parameters
        from manip_control.arm_model import UrdfArm
        arm = UrdfArm.from_file(PANDA, armature=0.04)
        reg = adaptive_regressor(base_parameters(ArmRegressor(arm)))
        xp = samples(arm.n)
        for every in (1, 10):
            lp = AdaptiveLaw(arm, reg, [400.0] * arm.n, [40.0] * arm.n, sc.period,
                             ctrl.adaptation, check_every=every)
            lp.excitation_in_loop = False
            rows.append((f'Panda AdaptiveLaw.update (check_every {every}, '
                         f'{reg.size} base parameters)', lp.update, xp))
        slow = AdaptiveLaw(arm, replace(reg, two_velocity=None, mass_rows=None),
                           [400.0] * arm.n, [40.0] * arm.n, sc.period, ctrl.adaptation,
                           check_every=10)
        slow.excitation_in_loop = False
        rows.append(('  the same, generic path (numpy rows, inverse dynamics)', slow.update, xp))
    for name, fn, xs in rows:
        for s in xs[:50]:
            fn(*s)
        print(f'{name:<62} {per_call(fn, xs, args.calls, args.rounds):9.1f} us')
    if PANDA.exists():
        for in_loop, blas in ((True, 'default'), (False, 'default'), (False, 'one')):
            if blas == 'one':
                single_threaded_blas()      # as the controller node does in real time
            lp = AdaptiveLaw(arm, reg, [400.0] * arm.n, [40.0] * arm.n, sc.period,
                             ctrl.adaptation, check_every=10)
            lp.excitation_in_loop = in_loop
            wall = []
            for k in range(max(args.calls, 1000)):
                t0 = time.perf_counter()
                lp.update(*xp[k % len(xp)])
                wall.append(time.perf_counter() - t0)
            p50, p90, p99, top = np.percentile(np.array(wall) * 1e6, [50, 90, 99, 100])
            cpu = per_call(lp.update, xp, args.calls, args.rounds)
            where = 'in the tick' if in_loop else 'outside the tick'
            print(f'Panda tick, excitation analysis {where}, BLAS threads {blas}: wall p50 '
                  f'{p50:.0f} us, p90 {p90:.0f} us, p99 {p99:.0f} us, max {top:.0f} us; '
                  f'process CPU {cpu:.0f} us')
    print(f'Python loop of 1e7 additions: {reference_loop():.2f} s CPU (after)')


if __name__ == '__main__':
    main()
