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
The control loop under request storms and starvation (prints measured figures).

    .venv/bin/python bench/bench_loop.py [--busy 2] [--events storm,stop,stall]
        [--urdf ../shared/fixtures/urdf/panda.urdf] [--param realtime.priority=0]

Starts ``test/fake_driver.py`` (the arm at 1 kHz, holds the last command), the controller in
real time (``trigger: state``) and the trajectory node (sinusoid, 0.2 rad at 2 rad/s around
the middle of the ranges), each in its own process and ROS domain, plus ``--busy`` busy
loops. Then, each event 3 s after the previous one:

* ``storm``: one ``list_parameters`` with 100 000 prefixes and one ``set_parameters`` with
  50 000 entries (each from a separate client process);
* ``stop``: the controller process stopped (SIGSTOP) for 20, 50 and 200 ms, then SIGCONT;
* ``stall``: the driver stopped for 50 ms.

For each event: the command gaps (p50 / p99 / max) and the largest torque step between
consecutive commands, as the driver logged them, from 0.2 s before the event to 1 s after
it; and the largest deviation from the middle of the ranges and speed over the run.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
import random
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / 'test'))

from loop_harness import LoopRun  # noqa: E402
from loop_harness import PANDA  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    """Run the events and print the figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument('--busy', type=int, default=2)
    ap.add_argument('--events', default='storm,stop,stall')
    ap.add_argument('--urdf', default=str(PANDA))
    ap.add_argument('--driver-priority', type=int, default=60,
                    help='SCHED_FIFO priority of the driver (0: normal scheduling)')
    ap.add_argument('--param', action='append', default=[],
                    help='extra controller parameter name=value (YAML value)')
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix='bench_loop_'))
    env = dict(os.environ, ROS_DOMAIN_ID=str(random.randint(120, 200)),
               PYTHONUNBUFFERED='1')
    started = []

    def start(name, cmd):
        out = open(tmp / f'{name}.out', 'w')
        p = subprocess.Popen(cmd, env=env, cwd=str(ROOT), stdout=out, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True)
        p.out_path = tmp / f'{name}.out'
        started.append(p)
        return p

    extra = dict(p.split('=', 1) for p in args.param)
    run = LoopRun(start, tmp, Path(args.urdf), controller=extra, busy=args.busy,
                  driver_priority=args.driver_priority)
    try:
        run.run()
        run.wait_commands(3000)
        time.sleep(1.0)
        events = []
        for ev in args.events.split(','):
            if ev == 'storm':
                for kind, count in (('list_parameters', 100000), ('set_parameters', 50000)):
                    p = start(kind, [sys.executable, str(ROOT / 'test' / 'loop_harness.py'),
                                     kind, str(count), '/controller'])
                    p.wait(120)
                    lines = p.out_path.read_text().split('\n')
                    sent = [float(x.split()[1]) for x in lines if x.startswith('sent ')]
                    reply = [x for x in lines if x.startswith('reply ')]
                    t0 = sent[0] if sent else time.monotonic()
                    t1 = float(reply[0].split()[1]) if reply else time.monotonic()
                    events.append((f'{kind} x{count}', t0, t1,
                                   reply[0].split(None, 2)[2] if reply else 'no reply'))
                    time.sleep(2.0)
            elif ev == 'stop':
                for ms in (20, 50, 200):
                    pid = run.procs['controller'].pid
                    t0 = time.monotonic()
                    os.kill(pid, signal.SIGSTOP)
                    time.sleep(ms * 1e-3)
                    os.kill(pid, signal.SIGCONT)
                    events.append((f'controller stopped {ms} ms', t0, time.monotonic(), ''))
                    time.sleep(3.0)
            elif ev == 'stall':
                pid = run.procs['driver'].pid
                t0 = time.monotonic()
                os.kill(pid, signal.SIGSTOP)
                time.sleep(0.05)
                os.kill(pid, signal.SIGCONT)
                events.append(('driver stopped 50 ms', t0, time.monotonic(), ''))
                time.sleep(3.0)
        t_end = time.monotonic()
        cmds, states = run.read()
        print(f'{Path(args.urdf).name}: {run.n} joints, driver SCHED_FIFO '
              f'{args.driver_priority}, {args.busy} busy loops, load '
              f'{os.getloadavg()[0]:.1f}, params {extra or "default"}')
        for name, t0, t1, what in events:
            f = run.errors(cmds, states, t0 - 0.2, t1 + 1.0)
            print(f'  {name:30s} gap p50 {f["gap_p50"] * 1e3:6.2f} ms  p99 '
                  f'{f["gap_p99"] * 1e3:6.2f} ms  max {f["gap_max"] * 1e3:7.2f} ms  max step '
                  f'{f["max_step"]:6.2f} N m  (request {1e3 * (t1 - t0):.0f} ms) {what}')
        f = run.errors(cmds, states, events[0][1] - 1.0 if events else 0.0, t_end)
        print(f'  whole run: max |q - mid| {f["max_dev"]:.4f} rad, max |qd| '
              f'{f["max_speed"]:.3f} rad/s, {f["commands"]} commands')
    finally:
        for p in reversed(started):
            try:
                os.killpg(p.pid, signal.SIGINT)
                p.wait(10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        print(f'  logs in {tmp}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
