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
Benchmark of the ROS 2 loop (prints measured figures; not a timed test).

    .venv/bin/python bench/bench_ros.py [--duration 10] [--quick]

1. Lockstep, plant + controller + trajectory in one process (manip-sim), 1 kHz, the default
   scenario (full plant: DC motors + PI current drives, friction, rotor inertia):
   real-time factor with rclpy.experimental.EventsExecutor and with SingleThreadedExecutor,
   and with the bag recorder added.
2. Real time, the same three nodes in one process (manip-sim --mode realtime), 1 kHz:
   controller ticks executed in the wall-clock window of the run against the ticks due at
   1 kHz, and latency from a joint-state publication (its header stamp, wall clock) to the
   command computed from it; for the controller triggers ``state`` (default) and ``timer``,
   with normal scheduling and with ``--rt-priority 20`` (SCHED_FIFO, as a real-time
   controller is deployed); late plant timer periods (caught up by integrating them).
3. Lockstep with the three nodes as separate processes (as launch/sim.launch.py starts
   them): real-time factor from the plant's own wall-time measurement.

Targets: lockstep RTF >= 2x; real time >= 99 % of the controller ticks and p99
latency <= 1 ms. Each run uses its own ROS domain (DDS discovery kept on this host).
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
os.environ.setdefault('ROS_DOMAIN_ID', str(101 + os.getpid() % 90))

import rclpy  # noqa: E402

from manip_control.nodes import sim  # noqa: E402


def _run(run_cfg, executor='events', bag=None):
    ctx = rclpy.Context()
    rclpy.init(context=ctx, args=['bench', '--ros-args', '--log-level', 'warn'])
    runner = sim.SimRunner(run_cfg, bag=bag, executor=executor, context=ctx)
    try:
        return runner.execute()
    finally:
        runner.destroy()
        rclpy.try_shutdown(context=ctx)


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def lockstep(duration: float) -> list[str]:
    """
    RTF = simulated / wall time; also simulated / CPU time of the process (all its threads,
    DDS included), which a machine shared with other jobs does not change.
    """
    rows = []
    for executor, bag in (('events', False), ('single', False), ('events', True)):
        cfg = sim.load_run_config('default', duration=duration)
        with tempfile.TemporaryDirectory() as tmp:
            c0 = _cpu()
            out = _run(cfg, executor, Path(tmp) / 'bag' if bag else None)
            cpu = _cpu() - c0
        label = f'{executor:<6} executor' + (' + recorder (MCAP)' if bag else '')
        rows.append(f'  {label:<36} {out.ticks:>6} ticks  {out.wall_time:6.2f} s wall  '
                    f'RTF {out.real_time_factor:5.2f}x  | {cpu:6.2f} s CPU  '
                    f'sim/CPU {out.simulated_time / cpu:5.2f}x  (timeouts '
                    f'{out.plant_counters["command_timeouts"]})')
    return rows


def realtime(duration: float) -> list[str]:
    """
    manip-sim --mode realtime in a subprocess per variant (own process: SCHED_FIFO is
    per process); the summary line has the figures.
    """
    import yaml
    rows = []
    base = yaml.safe_load((ROOT / 'config' / 'sim_params.yaml').read_text())
    with tempfile.TemporaryDirectory() as tmp:
        for trigger in ('state', 'timer'):
            params = yaml.safe_load(yaml.safe_dump(base))
            params['/**/controller']['ros__parameters']['trigger'] = trigger
            path = Path(tmp) / f'{trigger}.yaml'
            path.write_text(yaml.safe_dump(params))
            for prio in (0, 20):
                env = dict(os.environ, ROS_DOMAIN_ID=str(int(os.environ['ROS_DOMAIN_ID']) + 2))
                cmd = [sys.executable, '-m', 'manip_control.nodes.sim', '--quiet', '--mode',
                       'realtime', '--duration', str(duration), '--config', str(path),
                       '--rt-priority', str(prio)]
                res = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT,
                                     timeout=600)
                m = re.search(r'real time: controller ticks (\d+)/(\d+) \(([\d.]+) %\), '
                              r'state->command latency p50 ([\d.]+) ms, p99 ([\d.]+) ms, '
                              r'max ([\d.]+) ms', res.stdout)
                late = re.search(r'(\d+) late timer periods', res.stdout)
                sched = f'SCHED_FIFO {prio}' if prio else 'normal sched.'
                if not m:
                    rows.append(f'  trigger {trigger:<6} {sched:<14} failed: '
                                f'{(res.stdout + res.stderr)[-500:]}')
                    continue
                rows.append(f'  trigger {trigger:<6} {sched:<14} controller ticks '
                            f'{m.group(1)}/{m.group(2)} ({float(m.group(3)):6.2f} %)  latency '
                            f'p50 {m.group(4)} ms  p99 {m.group(5)} ms  max {m.group(6)} ms  '
                            f'(plant: {late.group(1) if late else "?"} late periods)')
    return rows


def processes(duration: float) -> list[str]:
    params = str(ROOT / 'config' / 'sim_params.yaml')
    env = dict(os.environ, PYTHONUNBUFFERED='1',
               ROS_DOMAIN_ID=str(int(os.environ['ROS_DOMAIN_ID']) + 1))
    py = sys.executable
    procs = []
    try:
        plant = subprocess.Popen(
            [py, '-m', 'manip_control.nodes.plant_node', '--ros-args', '--params-file', params,
             '-p', f'duration:={duration}'], env=env, stderr=subprocess.PIPE, text=True,
            cwd=ROOT)
        procs.append(plant)
        for mod in ('controller_node', 'trajectory_node'):
            procs.append(subprocess.Popen(
                [py, '-m', f'manip_control.nodes.{mod}', '--ros-args', '--params-file',
                 params, '-p', 'use_sim_time:=true'], env=env, stderr=subprocess.DEVNULL,
                cwd=ROOT))
        _, err = plant.communicate(timeout=600)
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
                p.wait(10)
    m = re.search(r'run finished: (\d+) ticks, (\d+) command timeouts.*?([\d.]+) s wall, '
                  r'real-time factor ([\d.]+)x', err)
    if not m:
        return ['  separate processes: no result\n' + err[-2000:]]
    return [f'  3 processes (events executor each)  {m.group(1):>6} ticks  '
            f'{float(m.group(3)):7.2f} s wall  RTF {float(m.group(4)):5.2f}x  '
            f'(timeouts {m.group(2)})']


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--duration', type=float, default=10.0, help='simulated seconds per run')
    ap.add_argument('--quick', action='store_true', help='2 s runs')
    args = ap.parse_args()
    d = 2.0 if args.quick else args.duration
    print(f'bench_ros: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start, '
          f'rclpy {rclpy.__file__.split("site-packages")[0][-30:]}..., {d:g} s per run')
    print('1. lockstep, 3 nodes in one process, 1 kHz, default scenario (full plant):')
    print('\n'.join(lockstep(d)))
    print('2. real time, 3 nodes in one process, 1 kHz (manip-sim --mode realtime):')
    print('\n'.join(realtime(d)))
    print('3. lockstep, 3 nodes as separate processes (sim_params.yaml), 1 kHz:')
    print('\n'.join(processes(d)))
    print(f'load average at end {os.getloadavg()[0]:.2f}')


if __name__ == '__main__':
    main()
