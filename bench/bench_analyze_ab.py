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
A/B benchmark: ``manip-analyze BAG --no-plots`` of another source tree against this one.

Usage::

    git archive <commit> | tar -x -C /tmp/before
    .venv/bin/python bench/bench_analyze_ab.py BAG /tmp/before [--repeat 9]

Runs ``python -m manip_control.bag_analysis BAG --out DIR --quiet --no-plots`` with
``PYTHONPATH`` set to each tree, alternating (interleaved repetitions), and prints the medians
(min, max) of the wall time and of the CPU time (user + sys of each child, from
``getrusage(RUSAGE_CHILDREN)``) with the load average. Under load, read the CPU time.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[1])
    ap.add_argument('bag')
    ap.add_argument('before', help='source tree of the code to compare with')
    ap.add_argument('--repeat', type=int, default=9)
    args = ap.parse_args()
    trees = {f'before ({args.before})': Path(args.before).resolve(), 'this tree': ROOT}
    env0 = {k: v for k, v in os.environ.items() if k != 'PYTHONDONTWRITEBYTECODE'}
    res: dict[str, tuple[list, list]] = {k: ([], []) for k in trees}
    loads = []
    with tempfile.TemporaryDirectory() as out:
        for _ in range(args.repeat):
            for k, (name, tree) in enumerate(trees.items()):
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                t0 = time.perf_counter()
                subprocess.run([sys.executable, '-m', 'manip_control.bag_analysis', args.bag,
                                '--out', f'{out}/{k}', '--quiet', '--no-plots'], cwd=tree,
                               env=dict(env0, PYTHONPATH=str(tree)), check=True,
                               capture_output=True)
                wall = time.perf_counter() - t0
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                res[name][0].append(wall)
                res[name][1].append(after.ru_utime - before.ru_utime
                                    + after.ru_stime - before.ru_stime)
            loads.append(os.getloadavg()[0])
    for name, (wall, cpu) in res.items():
        print(f'{name:30s} wall median {statistics.median(wall):.3f} s (min {min(wall):.3f}, '
              f'max {max(wall):.3f}); CPU median {statistics.median(cpu):.3f} s (min '
              f'{min(cpu):.3f}, max {max(cpu):.3f}), n={len(wall)}')
    print(f'load average (1 min) {min(loads):.2f} .. {max(loads):.2f} on {os.cpu_count()} cores')
    return 0


if __name__ == '__main__':
    sys.exit(main())
