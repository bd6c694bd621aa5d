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
Benchmark: the safe hold entered near the velocity limits, through the torque-rate limit.

For the Panda and the xarm7 fixtures (or ``--arms``), MuJoCo as the arm (the helpers of
``test/test_hold_design.py``): holds entered at ``--starts`` poses with every joint at 0.5-1.0x
its velocity limit (random signs, seeded), the commands in flight at the start the gravity
torque of the pose, ``--delay`` ticks of loop delay at 1 kHz, 1 s. Each start is run

* ``none``: without a torque-rate limit;
* ``clip``: through the limiter with each joint clipped to ``rate_k T`` (the former limiter:
  :class:`~manip_control.supervision.TorqueRateLimiter` without a mass matrix);
* ``coupled``: through the limiter as the node calls it (the nominal mass matrix of the
  sampled state: the bounded step closest in acceleration),

with the URDF arm's rate (the effort in 40 ms). Printed: the peak ``|qd_k| / velocity
limit_k`` per start, the largest ``|qd|`` at 1 s [rad/s], the largest step over its bound
``|tau_k - tau_(k-1)| / (rate_k T)``, and the cost of a limited call [us] over the commands
of a hold entry (:func:`call_cost`), with the host's speed (a Python loop of 1e7 additions);
then, for every fixture URDF, how much longer a ramp to a fixed command takes coupled than
clipped (:func:`ramp_ticks`).

    .venv/bin/python bench/bench_hold_rate_limit.py [--arms panda.urdf xarm7.urdf] \
        [--starts 3] [--seed 3] [--delay 5]
"""

import argparse
from pathlib import Path
import sys
import time

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / 'test'))

import numpy as np  # noqa: E402
import test_hold_design as th  # noqa: E402


def run(name, kind, starts, seed, delay):
    """Return (peaks, final max |qd|, largest step / bound) of ``starts`` holds."""
    arm, sim = th.arm_of(name)
    lim = th.effort(arm)
    rate = np.array(th.rate_limiter(arm).rate)
    peaks, finals, steps = [], [], []
    for q0, qd0 in th.moving_states(arm, starts, seed):
        limiter = None if kind == 'none' else th.rate_limiter(arm)
        mass = arm.mass_matrix if kind == 'coupled' else None
        v = th.run_delayed(sim, q0, qd0, th.mass_hold(arm, q0, lim), delay, 1000,
                           arm.gravity(q0), limiter, mass, steps)
        peaks.append(np.max(np.abs(v) / arm.limits.velocity))
        finals.append(np.abs(v[-1]).max() if len(v) > 1000 else np.inf)
    return peaks, max(finals), np.max(np.array(steps) / (rate * th.T))


def call_cost(name, seed, delay):
    """
    Microseconds per call of the limiter over the commands of a hold entry, replayed.

    The commands asked and the sampled states of the first start's ``coupled`` run are
    recorded, then replayed through the limiter: the limited calls (the mass matrix given),
    the same calls with each joint clipped (no mass matrix), the mass matrix alone
    (Pinocchio's CRBA, what the node adds to a limited tick) and :func:`hold_torque` on the
    same states (the rest of a hold tick); the best of 5 replays of each. Returns
    ``(coupled, clipped)``, the times of their limited calls [us], and the mean times of the
    mass matrix and of the hold torque [us].
    """
    arm, sim = th.arm_of(name)
    lim = th.effort(arm)
    q0, qd0 = next(th.moving_states(arm, 1, seed))
    law = th.mass_hold(arm, q0, lim)
    asked = []

    def recording(k, q, qd):
        tau = law(k, q, qd)
        asked.append((tau, q.copy(), qd.copy()))
        return tau
    th.run_delayed(sim, q0, qd0, recording, delay, 300, arm.gravity(q0), th.rate_limiter(arm),
                   arm.mass_matrix)
    masses = [arm.mass_matrix(q) for _, q, _ in asked]

    def replay(mass):
        lim_ = th.rate_limiter(arm)
        lim_.reset(tuple(arm.gravity(q0)))
        times = []
        for (tau, _, _), m in zip(asked, masses):
            t0 = time.perf_counter()
            _, limited = lim_.limit(tau, th.T, mass=m if mass else None)
            if limited:
                times.append(time.perf_counter() - t0)
        return 1e6 * np.array(times)
    # the best of 5 replays: the host's load only adds
    coupled = min((replay(True) for _ in range(5)), key=np.mean)
    clipped = min((replay(False) for _ in range(5)), key=np.mean)
    t_mass = t_hold = np.inf
    for _ in range(5):
        t0 = time.perf_counter()
        for _, q, _ in asked:
            arm.mass_matrix(q)
        t_mass = min(t_mass, 1e6 * (time.perf_counter() - t0) / len(asked))
        t0 = time.perf_counter()
        for _, q, qd in asked:
            th.hold_torque(arm, q, qd, q0, [100.0] * arm.n, [20.0] * arm.n, lim)
        t_hold = min(t_hold, 1e6 * (time.perf_counter() - t0) / len(asked))
    return coupled, clipped, t_mass, t_hold


def ramp_ticks(name, poses=8, seed=1):
    """
    Return the ticks to reach a fixed command through the limiter, clipped and coupled.

    Three ramps at each of ``poses`` poses ``q``: gravity ``g(q)`` to zero (the end of a
    hold), zero to ``g(q)`` (an activation from zero measured effort), and ``g(q)`` plus up
    to half the effort at random to zero (the effort: what the rate swings in 40 ms where
    none is given); the mass matrix at ``q`` held. Returns the worst ratio of coupled to
    clipped ticks and the ticks of that ramp.
    """
    arm, _ = th.arm_of(name)
    # the effort, or what the rate swings in 40 ms where the URDF gives none
    swing = np.array(th.rate_limiter(arm).rate) * 0.04
    rng = np.random.default_rng(seed)
    worst = (0.0, 0, 0)
    for q in th.range_poses(arm, poses):
        g, zero = arm.gravity(q), np.zeros(arm.n)
        kick = np.clip(g + 0.5 * swing * rng.uniform(-1.0, 1.0, arm.n), -swing, swing)
        for start, target in ((g, zero), (zero, g), (kick, zero)):
            ticks = []
            for mass in (None, arm.mass_matrix(q)):
                limiter = th.rate_limiter(arm)
                limiter.reset(tuple(start))
                k = 1
                while limiter.limit(tuple(target), th.T, mass=mass)[1] and k < 100000:
                    k += 1
                ticks.append(k)
            worst = max(worst, (ticks[1] / ticks[0], ticks[0], ticks[1]))
    return worst


def main():
    """Print the figures."""
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[1])
    ap.add_argument('--arms', nargs='*', default=['panda.urdf', 'xarm7.urdf'])
    ap.add_argument('--starts', type=int, default=3)
    ap.add_argument('--seed', type=int, default=3)
    ap.add_argument('--delay', type=int, default=5)
    ap.add_argument('--ramp-arms', nargs='*', default=th.FIXTURES,
                    help='arms of the ramp figure (default: every fixture URDF)')
    a = ap.parse_args()
    t0 = time.perf_counter()
    s = 0
    for i in range(10 ** 7):
        s += i
    print(f'host: python loop of 1e7 additions {time.perf_counter() - t0:.2f} s')
    print('arm limiter peaks(|qd|/limit per start) final_max_|qd|[rad/s] max_step/bound')
    for name in a.arms:
        for kind in ('none', 'clip', 'coupled'):
            peaks, final, step = run(name, kind, a.starts, a.seed, a.delay)
            step_txt = '-' if kind == 'none' else f'{step:.3f}'
            print(f'{name} {kind} {" / ".join(f"{p:.2f}" for p in peaks)} {final:.3f} '
                  f'{step_txt}', flush=True)
        coupled, clipped, mass, hold = call_cost(name, a.seed, a.delay)
        print(f'{name} limited calls of a hold entry: coupled {len(coupled)}, mean '
              f'{coupled.mean():.0f} us, median {np.median(coupled):.0f} us '
              f'(clipped: {len(clipped)}, mean {clipped.mean():.0f} us) + the mass matrix '
              f'{mass:.0f} us; hold_torque {hold:.0f} us', flush=True)
    for name in a.ramp_arms:
        ratio, clip, coupled = ramp_ticks(name)
        print(f'{name} ramps to a fixed command: coupled / clipped ticks at most {ratio:.2f} '
              f'({coupled} against {clip})', flush=True)


if __name__ == '__main__':
    main()
