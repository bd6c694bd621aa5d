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
Benchmark: how long a controller with a bad parameter takes from its error line to its exit.

``--n`` controllers (``mode:=realtime``, ``diagnostics_rate: 0.0``) are started at once, as
``test_fault_injection.py::test_invalid_parameter_files_exit_with_clear_error`` does, for
``--rounds`` rounds in a fresh ROS domain; each process's stderr is polled every 20 ms. Prints,
per round and over all, the median and largest time from the error line to the exit [s], how
many took ``EXIT_BOUND`` or longer (the exit deadline may have ended them), and every process
that did not exit 2 with one line. Add load (busy loops) beside it to see a loaded host.

    .venv/bin/python bench/bench_exit.py [--n 25] [--rounds 4]
"""

import argparse
import os
from pathlib import Path
import random
import signal
import subprocess
import sys
import tempfile
import time

ROOT = Path(__file__).resolve().parent.parent


def one_round(n: int, env: dict, params: Path, logs: Path) -> tuple[list, int]:
    """Start ``n`` controllers at once; return (error line to exit [s] each, bad exits)."""
    procs = []
    for k in range(n):
        err = open(logs / f'{k}.err', 'w+')
        procs.append((subprocess.Popen(
            [sys.executable, '-m', 'manip_control.nodes.controller_node', '--ros-args', '-p',
             'mode:=realtime', '--params-file', str(params)], env=env, cwd=str(ROOT),
            stdout=subprocess.DEVNULL, stderr=err, start_new_session=True), err))
    t_err, t_end = [None] * n, [None] * n
    t0 = time.monotonic()
    while any(t is None for t in t_end) and time.monotonic() - t0 < 120.0:
        now = time.monotonic()
        for k, (p, err) in enumerate(procs):
            if t_err[k] is None and os.fstat(err.fileno()).st_size:
                t_err[k] = now
            if t_end[k] is None and p.poll() is not None:
                t_end[k] = now
                t_err[k] = now if t_err[k] is None else t_err[k]
        time.sleep(0.02)
    bad = 0
    for k, (p, err) in enumerate(procs):
        if p.poll() is None:
            print(f'pid {p.pid} still running after 120 s: killed')
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        err.seek(0)
        text = err.read()
        err.close()
        if p.returncode != 2 or len(text.strip().splitlines()) != 1:
            bad += 1
            print(f'pid {p.pid}: exit code {p.returncode}\n{text[-2000:]}')
    return [e - s for s, e in zip(t_err, t_end) if s is not None and e is not None], bad


def main() -> int:
    from manip_control.nodes.common import EXIT_BOUND
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--n', type=int, default=25, help='controllers at once (default 25)')
    parser.add_argument('--rounds', type=int, default=4, help='rounds (default 4)')
    args = parser.parse_args()
    env = dict(os.environ, ROS_DOMAIN_ID=str(random.randint(101, 200)), PYTHONUNBUFFERED='1',
               RCUTILS_COLORIZED_OUTPUT='0', PYTHONPATH=str(ROOT))
    gaps, bad = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        params = Path(tmp) / 'params.yaml'
        params.write_text('controller:\n  ros__parameters:\n    diagnostics_rate: 0.0\n')
        for r in range(args.rounds):
            g, b = one_round(args.n, env, params, Path(tmp))
            gaps += g
            bad += b
            g.sort()
            print(f'round {r}: error line to exit median {g[len(g) // 2]:.2f} s, max '
                  f'{g[-1]:.2f} s', flush=True)
    gaps.sort()
    print(f'all {len(gaps)} exits: median {gaps[len(gaps) // 2]:.2f} s, max {gaps[-1]:.2f} s, '
          f'{sum(g >= EXIT_BOUND for g in gaps)} at EXIT_BOUND ({EXIT_BOUND:g} s) or later; '
          f'{bad} not exit 2 with one line; load {os.getloadavg()[0]:.1f}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
