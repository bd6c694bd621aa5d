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
Benchmark: the cost of one tick of the control law, ``control.Controller.update``.

Printed for each contender, in us per call:

* ``batch CPU``: the median over ``--rounds`` interleaved rounds of (the thread's CPU time
  of 1000 consecutive calls) / 1000 -- CPU time, so that the preemptions of a loaded machine
  do not count (speed gate: 2R <= 2.5 us);
* ``p50`` / ``p99``: wall time of ``--calls`` calls timed one by one with
  ``perf_counter_ns`` (they include the timer's own cost, printed as ``timer``; speed gate:
  7 joints p50 <= 12 us).

Contenders, each with the inputs a caller really passes (varying per call over 1000
precomputed random samples, so every sign branch runs):

* ``2R default``: the controller of ``config/default.yaml`` (computed torque, rotor
  coupling, friction feed-forward, gear inversion), inputs as tuples of floats (the offline
  loop), as lists (the controller node), and, where ``update`` takes ``out=``, with a
  preallocated output;
* ``7-joint Panda``: ``../shared/fixtures/urdf/panda.urdf`` (fingers locked) as the nominal
  model (armature 0.04 kg m^2), computed torque; ``full`` = friction feed-forward, gear
  inversion (eta 0.9) and an integral; ``plain`` = none of them (RNEA, gains and clamp only);
  ``full + stiffness``: ``full`` with a clamped ``joint_stiffness`` on every joint.
  Inputs as lists (the node) and as float64 arrays.

The speed of this host varies by 2x; the bench prints the CPU time of a pure-Python loop of
1e7 additions (before and after) and ``uptime`` beside the figures, so figures from different
runs can be compared. The gates were set in the fast state (that loop 0.6-0.8 s of CPU); read a
figure measured in the slow one (1.1-1.7 s) beside the loop's time of the same run.

    .venv/bin/python bench/bench_control.py [--rounds 50] [--calls 20000] [--urdf FILE]

Exit status 0 when both gates are met (inputs as lists, as the controller node passes them),
1 when not, 2 on a bad option.
"""

import argparse
import inspect
import os
from pathlib import Path
import statistics
import subprocess
import sys
import time

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from manip_control.arm_model import ArmModelError  # noqa: E402
from manip_control.arm_model import UrdfArm  # noqa: E402
from manip_control.control import Controller  # noqa: E402
from manip_control.parameters import ControllerParameters  # noqa: E402
from manip_control.parameters import FrictionParameters  # noqa: E402
from manip_control.parameters import load_scenario  # noqa: E402
from manip_control.parameters import NominalModel  # noqa: E402
from manip_control.parameters import ParameterError  # noqa: E402
import numpy as np  # noqa: E402

PANDA = Path(__file__).resolve().parents[2] / 'shared' / 'fixtures' / 'urdf' / 'panda.urdf'
SAMPLES = 1000
POSE = np.array([0.0, -0.4, 0.0, -2.0, 0.0, 1.6, 0.8])   # the 7-joint arm's inputs centre


def load() -> str:
    """Return the load average line of ``uptime``."""
    try:
        return subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()
    except OSError:
        return 'load %.2f %.2f %.2f' % os.getloadavg()


#: The host's reference: a module-level loop of 1e7 integer additions (global names, as
#: ``python -c``), 0.6-0.8 s of CPU on this host's fast state and 1.1-1.7 s on its slow one.
REFERENCE = compile('s = 0\nfor i in range(10_000_000):\n    s += i\n', 'reference', 'exec')


def reference_loop() -> float:
    """CPU time [s] of a pure-Python loop of 1e7 additions (the host's speed of the moment)."""
    c0 = time.process_time()
    exec(REFERENCE, {})
    return time.process_time() - c0


def panda_controller(urdf: Path, full: bool, stiff: bool = False) -> Controller:
    """
    Return computed torque on the 7-joint Panda; ``full``: friction, gear, integral.

    ``stiff``: a clamped joint stiffness on every joint too (300 N·m/rad up to 1.5 N·m).
    """
    arm = UrdfArm.from_file(urdf, armature=0.04)
    n = arm.n
    fr = FrictionParameters(b=0.2, tau_c=0.3, eps=0.02)
    eta = 0.9 if full else 1.0
    nominal = NominalModel(friction=(fr,) * n, rotor_inertia=(0.04,) * n,
                           gear_ratio=(100.0,) * n, eta=(eta,) * n, eta_back=(eta,) * n)
    params = ControllerParameters(law='computed_torque', nominal=nominal, kp=(400.0,) * n,
                                  kd=(40.0,) * n, ki=((100.0,) if full else (0.0,)) * n,
                                  integral_limit=(0.05,) * n,
                                  torque_limit=tuple(float(e) for e in arm.limits.effort),
                                  friction_compensation=full,
                                  joint_stiffness=((300.0,) if stiff else (0.0,)) * n,
                                  joint_stiffness_limit=(1.5,) * n)
    return Controller(params, 1e-3, arm)


def samples(n: int, kind: str, q0: np.ndarray) -> list:
    """Return random inputs ``(q, qd, q_d, qd_d, qdd_d)`` as tuples, lists or arrays."""
    rng = np.random.default_rng(1)
    out = []
    for _ in range(SAMPLES):
        q = q0 + rng.uniform(-0.3, 0.3, n)
        row = (q, rng.uniform(-1, 1, n), q + rng.uniform(-0.05, 0.05, n),
               rng.uniform(-1, 1, n), rng.uniform(-3, 3, n))
        if kind == 'tuple':
            row = tuple(tuple(v.tolist()) for v in row)
        elif kind == 'list':
            row = tuple(v.tolist() for v in row)
        else:
            row = tuple(np.array(v) for v in row)
        out.append(row)
    return out


def contender(ctrl: Controller, kind: str, use_out: bool):
    """Return ``call(i)``: one ``update`` with sample ``i % SAMPLES``."""
    rows = samples(ctrl.n, kind, np.full(ctrl.n, 0.3) if ctrl.n == 2 else POSE)
    update = ctrl.update
    if use_out:
        buf = ctrl.output()

        def call(i):
            update(*rows[i % SAMPLES], out=buf)
    else:
        def call(i):
            update(*rows[i % SAMPLES])
    return call


def batch(call, calls: int = SAMPLES) -> float:
    """CPU time of the thread per call [us] over ``calls`` consecutive calls."""
    t0 = time.thread_time()
    for i in range(calls):
        call(i)
    return (time.thread_time() - t0) / calls * 1e6


def one_by_one(call, calls: int) -> np.ndarray:
    """Wall time [us] of each of ``calls`` calls, timed one by one."""
    clock = time.perf_counter_ns
    out = np.empty(calls)
    for i in range(calls):
        t0 = clock()
        call(i)
        out[i] = clock() - t0
    return out * 1e-3


def main() -> int:
    """Print the figures; return 0 (gates met), 1 (not met) or 2 (bad option)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument('--rounds', type=int, default=50)
    parser.add_argument('--calls', type=int, default=20000)
    parser.add_argument('--urdf', type=Path, default=PANDA,
                        help='the 7-joint arm (default: ../shared/fixtures/urdf/panda.urdf)')
    args = parser.parse_args()
    if args.rounds < 1 or args.calls < 100:
        print('error: --rounds must be >= 1 and --calls >= 100', file=sys.stderr)
        return 2
    has_out = 'out' in inspect.signature(Controller.update).parameters
    print(load())
    print(f'Python loop of 1e7 additions: {reference_loop():.2f} s CPU (before)')
    default = load_scenario('default')
    two = Controller(default.controller, default.period)
    try:
        full, plain = panda_controller(args.urdf, True), panda_controller(args.urdf, False)
        stiff = panda_controller(args.urdf, True, stiff=True)
    except (ArmModelError, ParameterError) as exc:
        print(f'error: --urdf: {exc}', file=sys.stderr)
        return 2
    if full.n != len(POSE):
        print(f'error: --urdf: {args.urdf} has {full.n} joints; this bench times a '
              f'{len(POSE)}-joint arm', file=sys.stderr)
        return 2
    cases = {'2R default, tuples': contender(two, 'tuple', False),
             '2R default, lists': contender(two, 'list', False)}
    if has_out:
        cases['2R default, tuples, out='] = contender(two, 'tuple', True)
    cases[f'{full.n}-joint Panda full, lists'] = contender(full, 'list', False)
    cases[f'{full.n}-joint Panda full, arrays'] = contender(full, 'array', False)
    cases[f'{stiff.n}-joint Panda full + stiffness, lists'] = contender(stiff, 'list', False)
    if has_out:
        cases[f'{full.n}-joint Panda full, arrays, out='] = contender(full, 'array', True)
    cases[f'{plain.n}-joint Panda plain, lists'] = contender(plain, 'list', False)
    if has_out:
        cases[f'{plain.n}-joint Panda plain, arrays, out='] = contender(plain, 'array', True)
    for call in cases.values():       # warm up (first calls, caches)
        batch(call)
    rounds = {name: [] for name in cases}
    for _ in range(args.rounds):
        for name, call in cases.items():
            rounds[name].append(batch(call))
    clock = time.perf_counter_ns
    timer = np.median([-(clock() - clock()) for _ in range(10000)]) * 1e-3
    print(f'\nController.update, us per call (batch CPU: median of {args.rounds} rounds x '
          f'{SAMPLES} calls; p50 / p99: wall time of {args.calls} calls timed one by one, '
          f'timer {timer:.3f} us included); update takes out=: {has_out}')
    print(f'{"contender":40} {"batch CPU":>12} {"p50":>7} {"p99":>7}')
    p50 = {}
    for name, call in cases.items():
        each = one_by_one(call, args.calls)
        p50[name] = np.percentile(each, 50)
        print(f'{name:40} {statistics.median(rounds[name]):12.2f} '
              f'{p50[name]:7.2f} {np.percentile(each, 99):7.2f}')
    two_r = statistics.median(rounds['2R default, lists'])
    seven = p50[f'{full.n}-joint Panda full, lists']
    print(f'\ngates (inputs as lists, as the controller node passes them): 2R batch CPU '
          f'{two_r:.2f} us (<= 2.5: {"met" if two_r <= 2.5 else "NOT met"}); {full.n}-joint '
          f'full p50 {seven:.2f} us (<= 12: {"met" if seven <= 12.0 else "NOT met"})')
    print(f'Python loop of 1e7 additions: {reference_loop():.2f} s CPU (after)')
    print(load())
    return 0 if two_r <= 2.5 and seven <= 12.0 else 1


if __name__ == '__main__':
    sys.exit(main())
