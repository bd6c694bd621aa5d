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
Benchmark: URDF arms (Panda fixture) on the n-joint plant, against MuJoCo on the same URDF.

Printed with ``uptime`` (the load) and the time of a Python loop of 1e7 additions (the
host's speed reference) before and after. The contenders of each line run in interleaved
rounds (``--rounds``, default 5) and the median CPU time is printed (on a loaded machine the
process's CPU time is the closer estimate of what a quiet machine does); ``--before REV``
adds the plant of git revision REV to each line, side by side in the same run:

* ``closed loop, motors``: :func:`manip_control.arm_plant.run_arm_closed_loop` on the
  7-joint Panda (fingers locked) with DC motors, PI current drives and lossy gears per joint
  (efficiency 0.9, the loss on the mesh torque; sized in this script: peak torque 1.2x the
  URDF effort), smooth friction, 1 kHz control, computed torque from a perfect model (one
  RNEA per tick); real-time factor = simulated s / CPU s (target >= 10x). Two integrators:
  the default ``multirate`` (8 RK4 sub-steps in one compiled pass, three rigid-body
  evaluations per period) and ``rk4`` with 4 sub-steps.
* ``ideal torque``: the same URDF with all 9 joints (fingers free, as MuJoCo models them),
  ideal actuators, no friction, a held torque per tick, the plant with its default options
  (one RK4 step of 1 ms per tick, 4 ABA calls, for ideal actuators without friction) and
  with 4 RK4 sub-steps; against MuJoCo (``mujoco`` from requirements-bench.txt) loading the
  same URDF (visual and collision geometry removed, contacts and joint limits disabled, RK4,
  1 ms), stepped from Python with the same torques in ``qfrc_applied``. Target: ours >= 0.5x
  MuJoCo's rate with the default options. The two trajectories are compared (max |q|
  difference over the first second).
* ``computed-torque tick``: :meth:`manip_control.control.Controller.update` for 7 joints
  (``inverse_dynamics(q, qd, qdd_d - Kd e_dot - Kp e)``, the friction feed-forward, the drive
  inversion and the torque clamp, into a preallocated output), 20,000 ticks timed one by
  one; p50 / p99 / max in us (target p99 <= 100 us).

    .venv/bin/python bench/bench_arm.py [--duration 5] [--urdf ../shared/fixtures/urdf/...]
        [--rounds 5] [--before REV]
        [--breakdown]    (the CPU time of each part of a closed-loop tick)
"""

import argparse
import os
from pathlib import Path
import subprocess
import sys
import time

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from manip_control.arm_model import UrdfArm  # noqa: E402
from manip_control.arm_plant import ArmPlant  # noqa: E402
from manip_control.arm_plant import run_arm_closed_loop  # noqa: E402
from manip_control.control import Controller  # noqa: E402
from manip_control.control import controller_parameters  # noqa: E402
from manip_control.mujoco_arm import mujoco_urdf  # noqa: E402
from manip_control.parameters import FrictionParameters  # noqa: E402
from manip_control.parameters import MotorParameters  # noqa: E402
from manip_control.trajectories import Sinusoid  # noqa: E402
import numpy as np  # noqa: E402

PANDA = Path(__file__).resolve().parents[2] / 'shared' / 'fixtures' / 'urdf' / 'panda.urdf'
Q0 = np.array([0.0, -0.4, 0.0, -2.0, 0.0, 1.6, 0.8])


def motors_for(arm: UrdfArm) -> list:
    """Geared DC motors, peak torque ``eta N k_t i_max`` = 1.2x each joint's URDF effort."""
    out = []
    for effort in arm.limits.effort:
        k_t = 1.2 * effort / (0.9 * 100.0 * 10.0)
        out.append(MotorParameters(R=0.5, L=0.4e-3, k_t=k_t, k_e=k_t, N=100.0, eta=0.9,
                                   Jm=2e-5, i_max=10.0, V_max=48.0, Kp_i=0.754, Ki_i=942.5,
                                   eta_back=0.9))
    return out


def load() -> str:
    """Return the load average line of ``uptime``."""
    try:
        return subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()
    except OSError:
        return 'load %.2f %.2f %.2f' % os.getloadavg()


def plant_class(rev: str | None):
    """
    Return ``ArmPlant``, or the one of git revision ``rev`` (``--before``), loaded from a file.

    The old module is written to a temporary directory and imported under another name, so
    that numba can cache it; it imports the rest of the package from this tree.
    """
    if rev is None:
        return ArmPlant
    import importlib.util
    import tempfile
    root = Path(__file__).resolve().parents[1]
    src = subprocess.run(['git', '-C', str(root), 'show', f'{rev}:manip_control/arm_plant.py'],
                         capture_output=True, text=True, check=True).stdout
    path = Path(tempfile.mkdtemp(prefix='bench_arm_')) / 'arm_plant_before.py'
    path.write_text(src)
    spec = importlib.util.spec_from_file_location('arm_plant_before', path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.ArmPlant


def _medians(contenders, rounds):
    """Run each ``(label, fn)`` once per round, interleaved; median CPU s per contender."""
    cpu = {label: [] for label, _fn in contenders}
    for _ in range(rounds):
        for label, fn in contenders:
            c0 = time.process_time()
            fn()
            cpu[label].append(time.process_time() - c0)
    return {label: float(np.median(v)) for label, v in cpu.items()}


def bench_closed_loop(urdf: Path, duration: float, rounds: int, before: str | None) -> None:
    arm = UrdfArm.from_file(urdf, armature=0.04)
    traj = Sinusoid(0.2, 1.5, offset=Q0[:arm.n], phase=np.arange(arm.n) * 0.5)
    wn = 20.0
    fr = [FrictionParameters(b=0.2, tau_c=0.3, eps=0.02)] * arm.n
    plants = [('multirate x8 (default)', ArmPlant(arm, fr, motors_for(arm))),
              ('rk4 x4', ArmPlant(arm, fr, motors_for(arm), substeps=4, method='rk4'))]
    if before:
        old = plant_class(before)
        plants += [(f'{before}: multirate x8 (default)', old(arm, fr, motors_for(arm))),
                   (f'{before}: rk4 x4', old(arm, fr, motors_for(arm), substeps=4,
                                             method='rk4'))]
    late = {}

    def runner(label, plant):
        def fn():
            law = Controller(controller_parameters(arm, np.full(arm.n, wn * wn),
                                                   np.full(arm.n, 2 * wn), plant.torque_limit),
                             1e-3, arm)
            run = run_arm_closed_loop(plant, law, traj, duration)
            late[label] = np.abs(run.error[run.t >= duration / 2]).max()
        return fn

    med = _medians([(label, runner(label, plant)) for label, plant in plants], rounds)
    for label, cpu in med.items():
        print(f'closed loop, motors, lossy gears ({arm.n} joints, 1 kHz, {label}): '
              f'{duration / cpu:.2f}x real time on CPU time, median of {rounds} '
              f'(target >= 10x); late max |e| {late[label]:.2e} rad')


def bench_ideal_vs_mujoco(urdf: Path, duration: float, rounds: int,
                          before: str | None) -> None:
    try:
        import mujoco
    except ImportError:
        print('ideal torque vs MuJoCo: skipped (pip install -r requirements-bench.txt)')
        return
    full = UrdfArm.from_file(urdf)                   # trunk: fingers locked
    names = full.joint_names + tuple(full.locked_joints)
    arm = UrdfArm.from_file(urdf, names)             # every movable joint, as MuJoCo has
    lim = np.full(arm.n, 1e9)
    plant = ArmPlant(arm, torque_limit=lim)          # the default options
    plants = [(f'ours, default ({plant.method} x{plant.substeps})', plant),
              ('ours, rk4 x4', ArmPlant(arm, torque_limit=lim, substeps=4))]
    if before:
        old = plant_class(before)(arm, torque_limit=lim)
        plants.append((f'{before}, default (rk4 x{old.substeps})', old))
    xml, _ = mujoco_urdf(urdf.read_text(), source=str(urdf))
    m = mujoco.MjModel.from_xml_string(xml)
    m.opt.timestep = 1e-3
    m.opt.integrator = mujoco.mjtIntegrator.mjINT_RK4
    off = mujoco.mjtDisableBit
    m.opt.disableflags |= int(off.mjDSBL_CONTACT) | int(off.mjDSBL_CONSTRAINT)
    m.dof_damping[:] = 0.0
    m.dof_frictionloss[:] = 0.0
    m.dof_armature[:] = 0.0
    d = mujoco.MjData(m)
    assert m.nv == arm.n, (m.nv, arm.n)
    mj_names = [mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_JOINT, j) for j in range(m.njnt)]
    perm = [mj_names.index(j) for j in arm.joint_names]   # our order -> MuJoCo's dof index
    q0 = np.concatenate((Q0, [0.02, 0.02]))[:arm.n]
    ticks = int(round(duration * 1000))
    g0 = arm.gravity(q0)
    taus = [g0 + 2.0 * np.sin(0.003 * k + np.arange(arm.n)) for k in range(ticks)]

    def ours(pl):
        def fn():
            x = np.concatenate((q0, np.zeros(arm.n), np.zeros(2 * arm.n)))
            for u in taus:
                x = pl.step(x, u, 1e-3)
        return fn

    def theirs():
        mujoco.mj_resetData(m, d)
        d.qpos[perm] = q0
        for u in taus:
            d.qfrc_applied[perm] = u
            mujoco.mj_step(m, d)

    med = _medians([(label, ours(pl)) for label, pl in plants] + [('MuJoCo', theirs)], rounds)
    # untimed cross-check over the first second (the free 9-joint arm is chaotic: over
    # longer runs the two integrations part as any two round-off paths would)
    x = np.concatenate((q0, np.zeros(arm.n), np.zeros(2 * arm.n)))
    mujoco.mj_resetData(m, d)
    d.qpos[perm] = q0
    diff = 0.0
    for u in taus[:1000]:
        x = plant.step(x, u, 1e-3)
        d.qfrc_applied[perm] = u
        mujoco.mj_step(m, d)
        diff = max(diff, np.abs(x[:arm.n] - d.qpos[perm]).max())
    mj = med.pop('MuJoCo')
    print(f'ideal torque ({arm.n} joints, 1 kHz, {duration:.1f} s, CPU time, median of '
          f'{rounds} interleaved rounds): MuJoCo RK4 stepped from Python {mj / ticks * 1e6:.1f} '
          f'us per tick ({duration / mj:.1f}x real time)')
    for label, cpu in med.items():
        print(f'  {label:<32s} {cpu / ticks * 1e6:6.1f} us per tick, ours / MuJoCo = '
              f'{mj / cpu:.2f} (target >= 0.5 with the default options)')
    print(f'  max |q_ours - q_mujoco| over the first 1 s (default options) {diff:.2e} rad')


def additions() -> float:
    """Return the CPU seconds of a Python loop of 1e7 additions: the speed reference."""
    code = compile('s = 0\nfor i in range(10 ** 7):\n    s += i\n', '<additions>', 'exec')
    c0 = time.process_time()
    exec(code, {})              # at module level (globals), as the reference is quoted
    return time.process_time() - c0


def bench_tick(urdf: Path, ticks: int = 20000) -> None:
    arm = UrdfArm.from_file(urdf, armature=0.04)
    n = arm.n
    motors = motors_for(arm)
    law = Controller(controller_parameters(
        arm, np.full(n, 400.0), np.full(n, 40.0), arm.limits.effort,
        friction=[FrictionParameters(b=0.2, tau_c=0.3, eps=0.02)] * n, motors=motors), 1e-3, arm)
    update, buf = law.update, law.output()
    traj = Sinusoid(0.2, 1.5, offset=Q0[:n], phase=np.arange(n) * 0.5)
    rng = np.random.default_rng(0)
    samples = [traj.sample(k * 1e-3) for k in range(ticks)]
    states = [(s[0] + rng.normal(0, 1e-3, n), s[1] + rng.normal(0, 1e-2, n)) for s in samples]
    for label, clock in (('wall', time.perf_counter_ns), ('thread CPU', time.thread_time_ns)):
        out = np.empty(ticks)
        for k in range(ticks):
            (r, rv, ra), (q, qd) = samples[k], states[k]
            t0 = clock()
            update(q, qd, r, rv, ra, buf)
            out[k] = clock() - t0
        us = out / 1e3
        print(f'computed-torque tick ({n} joints, Controller.update: RNEA, friction, drive '
              f'inversion, clamp; {ticks} ticks, {label} '
              f'clock): p50 {np.percentile(us, 50):.1f} us, p99 {np.percentile(us, 99):.1f} '
              f'us, max {us.max():.1f} us (target p99 <= 100 us)')


def bench_breakdown(urdf: Path, rounds: int = 40, calls: int = 300) -> None:
    """
    Print the CPU time of each part of a closed-loop tick, in us.

    The parts are timed in turn, ``calls`` calls each, for ``rounds`` rounds; each figure is
    the part's fastest round (interleaving puts every part under the same load).
    """
    from manip_control import arm_plant
    import pinocchio as pin
    arm = UrdfArm.from_file(urdf, armature=0.04)
    model = arm.pin_model
    data = model.createData()
    n = arm.n
    fr = [FrictionParameters(b=0.2, tau_c=0.3, eps=0.02)] * n
    plant = ArmPlant(arm, fr, motors_for(arm))
    rk4 = ArmPlant(arm, fr, motors_for(arm), substeps=4, method='rk4')
    traj = Sinusoid(0.2, 1.5, offset=Q0[:n], phase=np.arange(n) * 0.5)
    ctrl = arm.workspace()
    law = Controller(controller_parameters(arm, np.full(n, 400.0), np.full(n, 40.0),
                                           plant.torque_limit, friction=fr,
                                           motors=motors_for(arm)), 1e-3, arm)
    buf = law.output()
    x = plant.initial_state(Q0[:n])
    q, qd, u = x[:n], x[n:2 * n], arm.gravity(Q0[:n])
    r, rv, ra = traj.sample(0.1)
    ts = np.arange(100) * 1e-3
    p, st, mo = plant._params, plant._stribeck, plant._is_motor
    for node in range(3):
        plant._evaluate(x, node)

    def pass_(nodes, sub):
        return lambda: arm_plant._multirate_pass(
            x, u, n, p, st, mo, plant._mats, plant._biases, nodes, 1e-3, sub, plant._minv,
            plant._k, plant._xs, plant._work, plant._x_half, plant._x_end, plant._mesh,
            *plant._rnz, plant._mm, plant._mv)

    parts = [('reference (sample_many, per tick)', lambda: traj.sample_many(ts), 100),
             ('inverse_dynamics (RNEA)', lambda: ctrl.inverse_dynamics(q, qd, ra), 1),
             ('Controller.update (RNEA + the compiled law around it)',
              lambda: law.update(q, qd, r, rv, ra, buf), 1),
             ('multirate: one rigid-body evaluation (CRBA + NLE)',
              lambda: plant._evaluate(x, 1), 1),
             ('  of which pin.crba', lambda: pin.crba(model, data, q), 1),
             ('  of which pin.nonLinearEffects', lambda: pin.nonLinearEffects(
                 model, data, q, qd), 1),
             (f'multirate: predictor pass ({plant._pred_sub} RK4 steps, compiled)',
              pass_(1, plant._pred_sub), 1),
             (f'multirate: corrector pass ({plant.substeps} RK4 steps, compiled)',
              pass_(3, plant.substeps), 1),
             ('multirate: plant.step', lambda: plant.step(x, u, 1e-3), 1),
             ('rk4: one pin.aba (world convention)', lambda: pin.aba(
                 model, data, q, qd, u, pin.Convention.WORLD), 1),
             ('rk4 x4: plant.step', lambda: rk4.step(x, u, 1e-3), 1)]
    best = [np.inf] * len(parts)
    for _ in range(rounds):
        for i, (_label, fn, per) in enumerate(parts):
            c0 = time.process_time()
            for _ in range(calls):
                fn()
            best[i] = min(best[i], (time.process_time() - c0) / calls / per)
    print(f'per-tick costs, CPU time, fastest of {rounds} interleaved rounds of {calls} calls '
          f'({load()}):')
    for (label, _fn, _per), sec in zip(parts, best):
        print(f'  {label:<52s} {sec * 1e6:6.1f} us')


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--urdf', type=Path, default=PANDA)
    p.add_argument('--duration', type=float, default=5.0, help='simulated seconds per run')
    p.add_argument('--breakdown', action='store_true',
                   help='also print the CPU time of each part of a closed-loop tick')
    p.add_argument('--rounds', type=int, default=5,
                   help='interleaved rounds per contender (the median is printed)')
    p.add_argument('--before', metavar='REV',
                   help='also run the plant of git revision REV side by side (its '
                        'manip_control/arm_plant.py)')
    args = p.parse_args()
    if not args.urdf.is_file():
        print(f'error: {args.urdf}: no such file', file=sys.stderr)
        return 2
    if args.rounds < 1:
        print(f'error: --rounds: must be >= 1 (got {args.rounds})', file=sys.stderr)
        return 2
    print(f'{args.urdf.name}; before: {load()}; a Python loop of 1e7 additions: '
          f'{additions():.2f} s CPU')
    try:
        bench_closed_loop(args.urdf, args.duration, args.rounds, args.before)
        bench_ideal_vs_mujoco(args.urdf, args.duration, args.rounds, args.before)
    except subprocess.CalledProcessError as exc:
        print(f'error: --before {args.before}: {exc.stderr.strip()}', file=sys.stderr)
        return 2
    bench_tick(args.urdf)
    if args.breakdown:
        bench_breakdown(args.urdf)
    print(f'after: {load()}; a Python loop of 1e7 additions: {additions():.2f} s CPU')
    return 0


if __name__ == '__main__':
    sys.exit(main())
