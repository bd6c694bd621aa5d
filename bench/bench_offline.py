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
Benchmark: offline closed loop against MuJoCo in the same process, and the batch study.

Contenders, each 10 s of the seed-001 sinusoid at 1 kHz control, timed in interleaved rounds
(one run of each per round) and reported as real-time factors (simulated s per wall s):

* ``default``: this project's full plant (DC motors, PI current loops, friction, RK4 with 4
  sub-steps per period), computed torque -- ``simulation.run_closed_loop`` (compiled kernel),
  end to end (references, records, result arrays);
* ``seed001``: the same loop with ideal torque actuators;
* the same two on the Python path (``engine='python'``), for scale;
* MuJoCo (pip ``mujoco``, ``requirements-bench.txt``): the seed-001 arm as an MJCF model
  built here (two hinges about z, gravity -y, inertias about the link centres of mass), RK4
  at 1 kHz physics, computed torque in Python at 1 kHz from MuJoCo's own ``M``
  (``mj_fullM``) and bias forces (``qfrc_bias``), both evaluated at the current state
  (``mj_fwdPosition`` + ``mj_fwdVelocity``) before ``mj_step``;
* MuJoCo at 10 kHz physics (the same 1 kHz controller, 10 steps per control period).

Targets: ``default`` >= 1.5x and ``seed001`` >= 3x MuJoCo-at-1-kHz (medians). Then the
robustness study of ``manip-robustness --scenario default --runs 125`` (1000 runs x 10 s of
the full plant, all cores) against its 60 s target.

    .venv/bin/python bench/bench_offline.py [--rounds 5] [--batch-runs 125]
"""

import argparse
import dataclasses
import math
from pathlib import Path
import statistics
import sys
import time
import timeit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from manip_control.dynamics import TwoLinkModel  # noqa: E402
from manip_control.parameters import load_scenario  # noqa: E402
from manip_control.simulation import ClosedLoop  # noqa: E402
from manip_control.simulation import run_closed_loop  # noqa: E402
import numpy as np  # noqa: E402

DURATION = 10.0
RATE = 1000.0


def mjcf(arm, timestep: float) -> str:
    """MJCF of the seed-001 2R arm in the x-y plane (gravity -y), RK4, no contacts."""
    return f"""
<mujoco model="arm2r">
  <option timestep="{timestep}" integrator="RK4" gravity="0 {-arm.gravity} 0">
    <flag contact="disable"/>
  </option>
  <worldbody>
    <body name="link1">
      <joint name="joint1" type="hinge" axis="0 0 1"/>
      <inertial pos="{arm.lc1} 0 0" mass="{arm.m1}"
                diaginertia="{arm.I1 / 2} {arm.I1 / 2} {arm.I1}"/>
      <body name="link2" pos="{arm.l1} 0 0">
        <joint name="joint2" type="hinge" axis="0 0 1"/>
        <inertial pos="{arm.lc2} 0 0" mass="{arm.m2}"
                  diaginertia="{arm.I2 / 2} {arm.I2 / 2} {arm.I2}"/>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor joint="joint1" ctrllimited="false"/>
    <motor joint="joint2" ctrllimited="false"/>
  </actuator>
</mujoco>
"""


class MujocoLoop:
    """The seed-001 closed loop in MuJoCo: physics at ``physics_rate``, control at 1 kHz."""

    def __init__(self, mujoco, scenario, physics_rate: float):
        self.mj = mujoco
        self.model = mujoco.MjModel.from_xml_string(mjcf(scenario.plant.arm,
                                                         1.0 / physics_rate))
        self.data = mujoco.MjData(self.model)
        self.nstep = int(round(physics_rate / RATE))
        traj = scenario.trajectory
        self.amp = [float(a) for a in traj['amplitude']]
        self.freq = [float(w) for w in traj['omega']]
        self.kp = [float(k) for k in scenario.controller.kp]
        self.kd = [float(k) for k in scenario.controller.kd]

    def inertia_check(self, arm) -> float:
        """Max |M_mujoco - M_project| over a few poses (the same arm in both)."""
        ours = TwoLinkModel(arm)
        m = np.zeros((2, 2))
        worst = 0.0
        for q in ([0.0, 0.0], [0.4, -1.1], [-2.0, 2.5]):
            self.data.qpos[:] = q
            self.mj.mj_forward(self.model, self.data)
            self.mj.mj_fullM(self.model, self.data, m)
            worst = max(worst, float(np.abs(m - ours.inertia_matrix(q)).max()))
        return worst

    def run(self) -> float:
        """Simulate 10 s; return the late-window (t >= 5 s) max tracking error [rad]."""
        mj, model, data = self.mj, self.model, self.data
        mj.mj_resetData(model, data)
        m = np.zeros((2, 2))
        qpos, qvel, bias, ctrl = data.qpos, data.qvel, data.qfrc_bias, data.ctrl
        a1, a2 = self.amp
        w1, w2 = self.freq
        kp1, kp2 = self.kp
        kd1, kd2 = self.kd
        sin, cos = math.sin, math.cos
        fwd_pos, fwd_vel, full_m, step = (mj.mj_fwdPosition, mj.mj_fwdVelocity, mj.mj_fullM,
                                          mj.mj_step)
        nstep = self.nstep
        worst = 0.0
        n = int(round(DURATION * RATE))
        for k in range(n):
            t = k / RATE
            r1, r2 = a1 * sin(w1 * t), a2 * sin(w2 * t)
            rv1, rv2 = a1 * w1 * cos(w1 * t), a2 * w2 * cos(w2 * t)
            ra1, ra2 = -w1 * w1 * r1, -w2 * w2 * r2
            fwd_pos(model, data)
            fwd_vel(model, data)
            full_m(model, data, m)
            q1, q2 = qpos
            v1, v2 = qvel
            e1, e2 = q1 - r1, q2 - r2
            if t >= 5.0:
                worst = max(worst, abs(e1), abs(e2))
            u1 = ra1 - kd1 * (v1 - rv1) - kp1 * e1
            u2 = ra2 - kd2 * (v2 - rv2) - kp2 * e2
            (m11, m12), (m21, m22) = m
            b1, b2 = bias
            ctrl[0] = m11 * u1 + m12 * u2 + b1
            ctrl[1] = m21 * u1 + m22 * u2 + b2
            step(model, data, nstep)
        return worst


def timed(fn) -> float:
    """Return the wall time of ``fn()`` [s]."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def startup(baseline: str | None, rounds: int) -> None:
    """
    Print the wall and CPU time of whole ``manip-offline`` processes that run one tick.

    With a warm compiled-code cache, with an empty one (the first run on a machine: the
    kernel is compiled), and, given ``baseline`` (the root of another source tree, e.g. an
    older version from ``git archive``), of that tree's ``manip-offline``.
    """
    import os
    import resource
    import subprocess
    import tempfile

    def measure(env_extra: dict) -> tuple[float, float]:
        env = {**os.environ, **env_extra}
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, '-m', 'manip_control.offline', '--duration', '0.001'],
                       env=env, cwd=tempfile.gettempdir(), check=True,
                       stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        return wall, cpu

    kinds = {'warm cache': {}}
    if baseline:
        kinds['baseline tree'] = {'PYTHONPATH': str(Path(baseline).resolve())}
    results = {k: [] for k in (*kinds, 'empty cache (first run)')}
    measure({})  # make sure the cache is there
    for _ in range(rounds):
        for name, env in kinds.items():
            results[name].append(measure(env))
        with tempfile.TemporaryDirectory() as cache:
            results['empty cache (first run)'].append(measure({'NUMBA_CACHE_DIR': cache}))
    print(f'\nmanip-offline start-up (a 1-tick run, whole process), {rounds} rounds:')
    for name, values in results.items():
        walls = [w for w, _ in values]
        cpus = [c for _, c in values]
        print(f'  {name:24} wall median {statistics.median(walls):5.2f} s (best '
              f'{min(walls):5.2f}), CPU median {statistics.median(cpus):5.2f} s')


def main() -> int:
    """Run the contenders in interleaved rounds, print the figures; 1 if a target is missed."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    p.add_argument('--rounds', type=int, default=5, help='interleaved rounds (default 5)')
    p.add_argument('--batch-runs', type=int, default=125,
                   help='runs per level and gain set of the robustness study (default 125: '
                        '4 levels x 2 gain sets x 125 = 1000 runs); 0 skips it')
    p.add_argument('--python-path', action='store_true',
                   help='also time the Python path of the loop (slow)')
    p.add_argument('--startup', action='store_true',
                   help='also time manip-offline start-up (warm and empty compiled-code cache)')
    p.add_argument('--baseline', metavar='DIR', default=None,
                   help='with --startup: also the start-up of the source tree DIR')
    args = p.parse_args()
    if args.rounds < 1:
        print('error: --rounds: must be >= 1', file=sys.stderr)
        return 2
    default = dataclasses.replace(load_scenario('default'), duration=DURATION)
    seed001 = dataclasses.replace(load_scenario('seed001'), duration=DURATION)
    contenders = {
        'project default (full plant)': lambda: run_closed_loop(default),
        'project seed001 (ideal torque)': lambda: run_closed_loop(seed001),
    }
    if args.python_path:
        contenders['  Python path, default'] = lambda: run_closed_loop(default, engine='python')
        contenders['  Python path, seed001'] = lambda: run_closed_loop(seed001, engine='python')
    try:
        import mujoco
    except ImportError:
        mujoco = None
        print('MuJoCo is not installed (pip install -r requirements-bench.txt): no anchor')
    if mujoco is not None:
        mj1 = MujocoLoop(mujoco, seed001, 1000.0)
        mj10 = MujocoLoop(mujoco, seed001, 10000.0)
        print(f'MuJoCo {mujoco.__version__}: max |M_mujoco - M_project| = '
              f'{mj1.inertia_check(seed001.plant.arm):.1e} kg m^2; late-window max |e| '
              f'(own model, 1 kHz) {mj1.run():.2e} rad at 1 kHz physics, '
              f'{mj10.run():.2e} rad at 10 kHz')
        contenders['MuJoCo RK4 1 kHz physics'] = mj1.run
        contenders['MuJoCo RK4 10 kHz physics'] = mj10.run
    for fn in contenders.values():  # warm-up: compiled-code cache load, first allocations
        fn()
    walls = {name: [] for name in contenders}
    for _ in range(args.rounds):
        for name, fn in contenders.items():
            walls[name].append(timed(fn))
    print(f'\n{DURATION:g} s at 1 kHz control, {args.rounds} interleaved rounds '
          f'(real-time factor = simulated s / wall s)')
    print(f'{"contender":34} {"best":>8} {"median":>8} {"us/tick":>8}')
    median = {}
    for name, w in walls.items():
        median[name] = DURATION / statistics.median(w)
        print(f'{name:34} {DURATION / min(w):7.1f}x {median[name]:7.1f}x '
              f'{statistics.median(w) / (DURATION * RATE) * 1e6:8.2f}')
    ok = True
    anchor = median.get('MuJoCo RK4 1 kHz physics')
    if anchor:
        print('\nratio to MuJoCo RK4 at 1 kHz (medians):')
        for name, target in (('project default (full plant)', 1.5),
                             ('project seed001 (ideal torque)', 3.0)):
            ratio = median[name] / anchor
            met = ratio >= target
            ok &= met
            print(f'  {name:32} {ratio:6.2f}x  (target >= {target:g}x: '
                  f'{"met" if met else "NOT met"})')
        print(f'  {"MuJoCo RK4 10 kHz physics":32} '
              f'{median["MuJoCo RK4 10 kHz physics"] / anchor:6.2f}x')
    loop = ClosedLoop(default, compiled=False)
    fast = ClosedLoop(default)
    n = 20000
    print('\nPython path, cost of each part of a tick (default scenario):')
    for name, fn in {
        'plant.step': lambda: loop.plant.step(40.0, 9.0),
        'plant.step (compiled)': lambda: fast.plant.step(40.0, 9.0),
        'controller.update': lambda: loop.controller.update((0.1, 0.2), (0.3, 0.4), (0.1, 0.2),
                                                            (0.3, 0.4), (0.5, 0.6)),
        'trajectory.sample': lambda: loop.trajectory.sample(0.3),
        'sensors.measure': lambda: loop.sensors.measure((0.1, 0.2), (0.3, 0.4)),
    }.items():
        print(f'  {name:22s} {timeit.timeit(fn, number=n) / n * 1e6:6.2f} us/call')
    if args.batch_runs > 0:
        from manip_control.robustness import run_study
        total = 4 * 2 * args.batch_runs
        t0 = time.perf_counter()
        results = run_study(default, runs=args.batch_runs)
        wall = time.perf_counter() - t0
        met = wall <= 60.0 * total / 1000.0
        ok &= met
        print(f'\nrobustness study, full plant: {len(results)} runs x {DURATION:g} s in '
              f'{wall:.1f} s ({wall / len(results) * 1e3:.1f} ms per run, all cores; target '
              f'1000 runs <= 60 s: {"met" if met else "NOT met"})')
    if args.startup:
        startup(args.baseline, 3)
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main())
