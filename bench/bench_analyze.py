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
Benchmark: manip-analyze end to end vs. a plain rosbags reader, on a real manip-sim bag.

Records (or reuses, ``--keep DIR``) a ``manip-sim --duration 120 --bag`` run with every topic
(about 600 k messages: /joint_states, /motor_states, /reference, /joint_commands,
/effort_controller/commands at 1 kHz and diagnostics), then times whole processes, several
interleaved repetitions, and prints medians (and min / max):

1. plain: a Python process that opens the bag with ``rosbags.rosbag2.Reader`` and deserializes
   every /joint_states message with ``typestore.deserialize_cdr`` (nothing else);
2. ``manip-analyze BAG --out DIR --quiet`` (report.md/json and the four PNG plots);
3. ``manip-analyze BAG --out DIR --quiet --no-plots``.

The ratios plain / manip-analyze are the figures of merit (targets: >= 5x without plots,
>= 3x with plots). The RMS error of joint1 from the plain loop is compared with the report.
Then one in-process run of the analysis is split into its stages (imports, open, read and
decode, analysis, report files, the plots) to show where the time goes, with the cost of
checking every MCAP chunk CRC (part of reading) measured on its own; that process imports
numpy itself, so its OpenBLAS thread pool is started as usual (``manip-analyze`` starts it
with one thread) and the stages run without the CLI's ``os._exit``.

Usage::

    .venv/bin/python bench/bench_analyze.py [--seconds 120] [--repeat 5]
                                            [--storage mcap|sqlite3|both] [--keep DIR]

Timings of whole processes include interpreter start-up and imports; on a loaded machine they
vary, so the load average is printed with the figures.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = Path(__file__).resolve().parents[1]

PLAIN = r"""
import sys
from rosbags.rosbag2 import Reader
from rosbags.typesys import get_typestore, Stores
ts = get_typestore(Stores.ROS2_JAZZY)
q, n = {}, 0
with Reader(sys.argv[1]) as reader:
    conns = [c for c in reader.connections if c.topic == '/joint_states']
    for conn, _, raw in reader.messages(connections=conns):
        msg = ts.deserialize_cdr(raw, conn.msgtype)
        st = msg.header.stamp
        q[st.sec * 1_000_000_000 + st.nanosec] = msg.position[0]
        n += 1
print(n)
"""

STAGES = r"""
import sys, time, json
c = time.perf_counter
t0 = c()
import numpy
t1 = c()
from pathlib import Path
from manip_control import bag_analysis as ba
from manip_control.bag_io import BagReader
t2 = c()
bag = sys.argv[1]
out = Path(sys.argv[2])
with BagReader(bag) as r:
    t3 = c()
    sel = ba.select_topics(r.topics)
    wanted = [getattr(sel, k) for k in ba.ROLES if getattr(sel, k)]
    raw = r.read_batches(wanted)
    t4 = c()
    del raw
    r.read_series(wanted)
    t5 = c()
with BagReader(bag) as r:
    tv0 = c()
    checked = r.verify()
    tv1 = c()
t6 = c()
report, run = ba.analyze(bag)
t7 = c()
ba.write_report(run, report, out, plots=False)
t8 = c()
files = ba.write_plots(run, report, out)
t9 = c()
print(json.dumps({'import numpy': t1 - t0,
                  'import manip_control.bag_analysis / bag_io (yaml, rosbags)': t2 - t1,
                  'open the bag (metadata, MCAP summary, typestore)': t3 - t2,
                  'read the raw messages of the 4 topics (MCAP: locate them)': t4 - t3,
                  'read + decode the 4 topics into arrays (chunk CRCs checked)': t5 - t4,
                  f'of which: CRC check of every chunk ({checked} chunks; 0 = sqlite3)':
                      tv1 - tv0,
                  'open + read + decode + all figures (analyze)': t7 - t6,
                  'report.json + report.md': t8 - t7,
                  f'{len(files)} plots (Pillow drawing, PNG)': t9 - t8}))
"""


def record(bag: Path, seconds: float, storage: str) -> None:
    """Record a manip-sim run with every topic."""
    cmd = [sys.executable, '-m', 'manip_control.nodes.sim', '--quiet', '--duration',
           f'{seconds:g}', '--bag', str(bag), '--storage', storage]
    env = dict(os.environ)
    # a domain of its own unless one is chosen (other runs on this machine use domain 0)
    env.setdefault('ROS_DOMAIN_ID', str(60 + os.getpid() % 40))
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f'manip-sim failed ({proc.returncode}): {proc.stderr[-2000:]}')
    print(f'recorded {bag} ({storage}, {seconds:g} s simulated) in '
          f'{time.perf_counter() - t0:.1f} s')


CPU: dict[str, list[float]] = {}
#: Child environment: Python may cache compiled modules (__pycache__), as in any installed
#: package; with PYTHONDONTWRITEBYTECODE every run would compile manip_control again.
ENV = {k: v for k, v in os.environ.items() if k != 'PYTHONDONTWRITEBYTECODE'}


def timed(cmd: list[str], label: str | None = None) -> tuple[float, str]:
    """Run ``cmd``; return (wall time [s], stdout); its CPU time (user + sys) goes to CPU."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=ENV)
    elapsed = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f'{cmd} failed ({proc.returncode}): {proc.stderr[-2000:]}')
    if label is not None:
        CPU.setdefault(label, []).append(after.ru_utime - before.ru_utime
                                         + after.ru_stime - before.ru_stime)
    return elapsed, proc.stdout


def rms_plain(bag: Path) -> float:
    """RMS of e = q - q_d for joint1 from a plain rosbags loop (stamp-matched)."""
    from rosbags.rosbag2 import Reader
    from rosbags.typesys import get_typestore
    from rosbags.typesys import Stores
    ts = get_typestore(Stores.ROS2_JAZZY)
    q, ref = {}, {}
    with Reader(bag) as reader:
        conns = [c for c in reader.connections if c.topic in ('/joint_states', '/reference')]
        for conn, _, raw in reader.messages(connections=conns):
            msg = ts.deserialize_cdr(raw, conn.msgtype)
            st = msg.header.stamp
            key = st.sec * 1_000_000_000 + st.nanosec
            if conn.topic == '/joint_states':
                q[key] = msg.position[0]
            else:
                ref[key] = msg.points[0].positions[0]
    e = [q[k] - ref[k] for k in q if k in ref]
    return math.sqrt(sum(x * x for x in e) / len(e))


PANDA = ROOT / '..' / 'shared' / 'fixtures' / 'urdf' / 'panda.urdf'

MODEL_STAGES = r"""
import sys, time, json
from manip_control import bag_analysis as ba
run = ba.load_run(sys.argv[1], read_description=False)
report = ba.analyze_run(run, model={'enabled': False})
c = time.perf_counter
t0 = c()
mo = ba.model_section(run, report, urdf=sys.argv[2])
t1 = c()
print(json.dumps({'model_section_s': t1 - t0, 'samples': mo['samples']}))
"""


def write_model_bag(bag: Path, seconds: float, rate: float = 1000.0) -> None:
    """
    Write a 7-joint Panda run: sinusoids inside the limits, effort = RNEA + URDF damping.

    Written with ``BagWriter`` (MCAP): ``/joint_states`` only, header stamp = receive time.
    """
    import numpy as np
    from rosbags.typesys import get_typestore
    from rosbags.typesys import Stores
    from manip_control.arm_model import UrdfArm
    from manip_control.bag_io import BagWriter
    from manip_control.model_analysis import batch_inverse_dynamics
    from manip_control.model_analysis import urdf_friction
    arm = UrdfArm.from_file(PANDA)
    lo, hi = np.asarray(arm.limits.lower), np.asarray(arm.limits.upper)
    mid, amp = 0.5 * (lo + hi), 0.2 * (hi - lo)
    w = 1.0 + 0.3 * np.arange(arm.n)
    t = np.arange(int(seconds * rate)) / rate
    ph = np.outer(t, w)
    q = mid + amp * np.sin(ph)
    qd = amp * w * np.cos(ph)
    qdd = -amp * w ** 2 * np.sin(ph)
    tau = batch_inverse_dynamics(arm, q, qd, qdd)
    tau += urdf_friction(PANDA.read_text(), arm.joint_names).torque(qd)   # its <dynamics>
    ts = get_typestore(Stores.ROS2_JAZZY)
    T = ts.types
    js = 'sensor_msgs/msg/JointState'
    names = list(arm.joint_names)
    with BagWriter(bag) as w_:
        w_.add_topic('/joint_states', js)
        for k in range(t.size):
            ns = 10**9 + k * int(round(1e9 / rate))
            msg = T[js](header=T['std_msgs/msg/Header'](
                stamp=T['builtin_interfaces/msg/Time'](sec=ns // 10**9, nanosec=ns % 10**9),
                frame_id=''), name=names, position=q[k].copy(), velocity=qd[k].copy(),
                effort=tau[k].copy())
            w_.write('/joint_states', ns, bytes(ts.serialize_cdr(msg, js)))


def model_bench(args) -> int:
    """Time the model section on a 120 s, 1 kHz, 7-joint bag: with and without it."""
    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix='bench_model_'))
    base.mkdir(parents=True, exist_ok=True)
    bag = base / f'panda_{args.seconds:g}s_1khz'
    if (bag / 'metadata.yaml').is_file():
        print(f'reusing {bag}')
    else:
        if bag.exists():
            shutil.rmtree(bag)
        t0 = time.perf_counter()
        write_model_bag(bag, args.seconds)
        print(f'wrote {bag} ({args.seconds:g} s at 1 kHz, 7 joints) in '
              f'{time.perf_counter() - t0:.1f} s')
    py = sys.executable
    runs = {
        'manip-analyze --no-plots --no-model':
            [py, '-m', 'manip_control.bag_analysis', str(bag), '--out', str(base / 'r0'),
             '--quiet', '--no-plots', '--no-model'],
        'manip-analyze --no-plots --urdf panda.urdf':
            [py, '-m', 'manip_control.bag_analysis', str(bag), '--out', str(base / 'r1'),
             '--quiet', '--no-plots', '--urdf', str(PANDA)],
        'manip-analyze --urdf panda.urdf (all plots)':
            [py, '-m', 'manip_control.bag_analysis', str(bag), '--out', str(base / 'r2'),
             '--quiet', '--urdf', str(PANDA)],
    }
    times: dict[str, list[float]] = {k: [] for k in runs}
    loads = []
    CPU.clear()
    for _ in range(args.repeat):
        for name, cmd in runs.items():
            times[name].append(timed(cmd, name)[0])
        loads.append(os.getloadavg()[0])
    for title, data in (('wall time', times), ('CPU time (user + sys)', CPU)):
        med = {k: statistics.median(v) for k, v in data.items()}
        print(f'  {title}:')
        for name, v in data.items():
            print(f'    {name:50s} median {med[name]:6.3f} s  (min {min(v):.3f}, '
                  f'max {max(v):.3f}, n={len(v)})')
        names = list(runs)
        print(f'    the model section adds {med[names[1]] - med[names[0]]:.3f} s '
              f'({title}, medians; target <= 1 s)')
    stage = json.loads(timed([py, '-c', MODEL_STAGES, str(bag), str(PANDA)])[1])
    print(f'  in-process: model_section {stage["model_section_s"]:.3f} s for '
          f'{stage["samples"]} samples')
    rep = json.loads((base / 'r1' / 'report.json').read_text())
    worst = max(e['measured']['residual_fraction'] for e in rep['model']['per_joint'].values())
    print(f'  exact-torque bag: worst residual RMS / effort RMS {100 * worst:.3g} %')
    print(f'  load average (1 min) during the runs: {min(loads):.2f} .. {max(loads):.2f} on '
          f'{os.cpu_count()} cores')
    if not args.keep:
        shutil.rmtree(base, ignore_errors=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[1])
    ap.add_argument('--seconds', type=float, default=120.0)
    ap.add_argument('--repeat', type=int, default=5)
    ap.add_argument('--storage', choices=('mcap', 'sqlite3', 'both'), default='mcap')
    ap.add_argument('--keep', metavar='DIR',
                    help='keep the bags in DIR and reuse them when recorded with the same '
                         '--seconds')
    ap.add_argument('--model', action='store_true',
                    help='instead: time the model section (--urdf) on a synthetic 7-joint '
                         'Panda bag at 1 kHz against the same analysis without it')
    args = ap.parse_args()
    if args.model:
        return model_bench(args)
    storages = ['mcap', 'sqlite3'] if args.storage == 'both' else [args.storage]
    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix='bench_analyze_'))
    base.mkdir(parents=True, exist_ok=True)
    ok = True
    try:
        for storage in storages:
            bag = base / f'sim_{args.seconds:g}s_{storage}'
            if (bag / 'metadata.yaml').is_file():
                print(f'reusing {bag}')
            else:
                if bag.exists():
                    shutil.rmtree(bag)
                record(bag, args.seconds, storage)
            meta = json.loads(timed([sys.executable, '-m', 'manip_control.bag_analysis',
                                     str(bag), '--out', str(base / 'probe'), '--json',
                                     '--quiet', '--no-plots'])[1])
            count = meta['bag']['message_count']
            size = sum(f.stat().st_size for f in bag.iterdir()) / 1e6
            print(f'[{storage}] {bag.name}: {size:.0f} MB, {count} messages, '
                  f'{meta["timing"]["state"]["count"]} joint states, '
                  f'{len(meta["bag"]["topics"])} topics')
            runs = {
                'plain rosbags loop (deserialize every /joint_states)':
                    [sys.executable, '-c', PLAIN, str(bag)],
                'manip-analyze (report + 4 plots)':
                    [sys.executable, '-m', 'manip_control.bag_analysis', str(bag), '--out',
                     str(base / f'rep_{storage}'), '--quiet'],
                'manip-analyze --no-plots':
                    [sys.executable, '-m', 'manip_control.bag_analysis', str(bag), '--out',
                     str(base / f'rep_{storage}_np'), '--quiet', '--no-plots'],
            }
            times: dict[str, list[float]] = {k: [] for k in runs}
            loads = []
            CPU.clear()
            for _ in range(args.repeat):                  # interleaved repetitions
                for name, cmd in runs.items():
                    times[name].append(timed(cmd, name)[0])
                loads.append(os.getloadavg()[0])
            for title, data in (('wall time', times), ('CPU time (user + sys)', CPU)):
                med = {k: statistics.median(v) for k, v in data.items()}
                print(f'  {title}:')
                for name, v in data.items():
                    print(f'    {name:55s} median {med[name]:6.3f} s  (min {min(v):.3f}, '
                          f'max {max(v):.3f}, n={len(v)})')
                plain = med['plain rosbags loop (deserialize every /joint_states)']
                r_plots = plain / med['manip-analyze (report + 4 plots)']
                r_np = plain / med['manip-analyze --no-plots']
                print(f'    ratio plain / manip-analyze ({title}): {r_np:.2f}x without plots '
                      f'(target >= 5), {r_plots:.2f}x with plots (target >= 3)')
            print(f'  load average (1 min) during the runs: {min(loads):.2f} .. '
                  f'{max(loads):.2f} on {os.cpu_count()} cores')
            rep = json.loads((base / f'rep_{storage}' / 'report.json').read_text())
            rms_cli = rep['tracking']['per_joint']['joint1']['rms']
            rms_ref = rms_plain(bag)
            print(f'  RMS e joint1: plain loop {rms_ref:.12g}, report {rms_cli:.12g}')
            if not math.isclose(rms_ref, rms_cli, rel_tol=1e-9):
                print('  MISMATCH between the plain loop and the report', file=sys.stderr)
                ok = False
            stage_runs = [json.loads(timed([sys.executable, '-c', STAGES, str(bag),
                                            str(base / 'stages')])[1]) for _ in range(5)]
            start = [timed([sys.executable, '-c', 'pass'])[0] for _ in range(5)]
            print('  where the time goes (wall time inside one process, median of 5):')
            print(f'    {"interpreter start-up":55s} {statistics.median(start):6.3f} s')
            for key in stage_runs[0]:
                print(f'    {key:55s} {statistics.median(s[key] for s in stage_runs):6.3f} s')
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main())
