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
A probe of the host's own stalls: a thread on one CPU that wakes every millisecond.

It runs at a real-time priority above the package's threads; each wake-up later than
``--min-late`` is logged. Nothing of the package can delay it (it preempts the control thread
and the driver), so a late wake-up is the host's: its hypervisor took the CPU (steal) or its
kernel did not switch. Tests of millisecond bounds run one per CPU and do not judge a window
with such a stall.

    python test/host_stall_probe.py --cpu 0 --log stalls0.txt

Log lines: ``<monotonic time of the due wake-up [s]> <lateness [s]>``.
"""

import argparse
import os
import time


def main(argv=None) -> int:
    """Pin to ``--cpu``, take SCHED_FIFO ``--priority``, log late wake-ups until killed."""
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--cpu', type=int, required=True)
    ap.add_argument('--log', required=True)
    ap.add_argument('--priority', type=int, default=80)
    ap.add_argument('--period', type=float, default=1e-3, help='wake-up period [s]')
    ap.add_argument('--min-late', type=float, default=1e-3, help='lateness logged [s]')
    a = ap.parse_args(argv)
    os.sched_setaffinity(0, {a.cpu})
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(a.priority))
    with open(a.log, 'w', encoding='ascii') as log:
        log.write(f'start {time.monotonic():.6f}\n')
        log.flush()
        due = time.monotonic()
        while True:
            due += a.period
            now = time.monotonic()
            if due > now:
                time.sleep(due - now)
                now = time.monotonic()
            late = now - due
            if late > a.min_late:
                log.write(f'{due:.6f} {late:.6f}\n')
                log.flush()
                due = now           # one line per stall, not one per period missed


if __name__ == '__main__':
    raise SystemExit(main())
