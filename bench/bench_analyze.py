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
Benchmark: manip-analyze end to end vs. a plain rosbags read-and-deserialize loop.

Generates a synthetic run (default 10 min at 1 kHz: /joint_states + /effort_controller/commands
+ /reference = 1.8 M messages) in a temporary directory with :class:`BagWriter` (messages
serialized with the rosbags Jazzy typestore), then times

1. the plain loop: ``rosbags.rosbag2.Reader`` over all messages + ``typestore.deserialize_cdr``;
2. ``manip-analyze BAG --out DIR`` as a subprocess (interpreter start, reading, analysis,
   report.md/report.json and the PNG plots included);

and prints messages/s for both and the ratio. The RMS tracking error computed from the plain
loop is compared with the report to show both read the same data.

Usage::

    .venv/bin/python bench/bench_analyze.py [--seconds 600] [--rate 1000]
                                            [--storage mcap|sqlite3|both] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rosbags.rosbag2 import Reader  # noqa: E402
from rosbags.typesys import Stores, get_typestore  # noqa: E402

from manip_control.bag_io import BagWriter  # noqa: E402

JS = 'sensor_msgs/msg/JointState'
F64 = 'std_msgs/msg/Float64MultiArray'
JT = 'trajectory_msgs/msg/JointTrajectory'


def generate(paths: dict[str, Path], seconds: float, rate: float) -> int:
    """Write the same synthetic run into one bag per storage; returns the message count."""
    ts = get_typestore(Stores.ROS2_JAZZY)
    T = ts.types
    Time, Header = T['builtin_interfaces/msg/Time'], T['std_msgs/msg/Header']
    Dur = T['builtin_interfaces/msg/Duration']
    JointState, Float64MultiArray = T[JS], T[F64]
    Layout = T['std_msgs/msg/MultiArrayLayout']
    JointTrajectory, Point = T[JT], T['trajectory_msgs/msg/JointTrajectoryPoint']
    names = ['joint1', 'joint2']
    n = int(round(seconds * rate))
    period = int(round(1e9 / rate))
    rng = np.random.default_rng(1)
    jitter = rng.normal(0.0, 20e3, size=n).astype(np.int64)   # 20 µs receive jitter
    writers = {s: BagWriter(p, storage=s).open() for s, p in paths.items()}
    for w in writers.values():
        for topic, typ in (('/joint_states', JS), ('/reference', JT),
                           ('/effort_controller/commands', F64)):
            w.add_topic(topic, typ)
        w.write_params({'control_rate': rate, 'joints': names,
                        'controller': {'torque_limit': [89.0, 25.0]}})
    empty = np.zeros(0)
    zero = Dur(sec=0, nanosec=0)
    layout = Layout(dim=[], data_offset=0)
    ser = ts.serialize_cdr
    for k in range(n):
        t = k * period
        tk = k / rate
        stamp = Time(sec=t // 1_000_000_000, nanosec=t % 1_000_000_000)
        qd = np.array([0.5 * math.sin(tk), 0.3 * math.cos(0.5 * tk)])
        vd = np.array([0.5 * math.cos(tk), -0.15 * math.sin(0.5 * tk)])
        err = np.array([1e-3 * math.sin(7.0 * tk), -2e-3 * math.cos(3.0 * tk)])
        q = qd - err
        u = np.array([10.0 * math.sin(tk), 5.0 * math.cos(tk)])
        hdr = Header(stamp=stamp, frame_id='')
        raw_js = ser(JointState(header=hdr, name=names, position=q, velocity=vd,
                                effort=u), JS)
        raw_ref = ser(JointTrajectory(header=hdr, joint_names=names, points=[
            Point(positions=qd, velocities=vd, accelerations=empty, effort=empty,
                  time_from_start=zero)]), JT)
        raw_cmd = ser(Float64MultiArray(layout=layout, data=u), F64)
        recv = t + 50_000 + int(jitter[k])
        for w in writers.values():
            w.write('/joint_states', recv, raw_js)
            w.write('/reference', recv + 10_000, raw_ref)
            w.write('/effort_controller/commands', recv + 200_000, raw_cmd)
    for w in writers.values():
        w.close()
    return 3 * n


def plain_loop(bag: Path) -> tuple[float, int, float]:
    """rosbags Reader + deserialize_cdr over every message; returns (s, count, rms e1)."""
    ts = get_typestore(Stores.ROS2_JAZZY)
    t0 = time.perf_counter()
    count = 0
    q: dict[int, float] = {}
    ref: dict[int, float] = {}
    with Reader(bag) as reader:
        for conn, _, raw in reader.messages():
            msg = ts.deserialize_cdr(raw, conn.msgtype)
            count += 1
            if conn.topic == '/joint_states':
                st = msg.header.stamp
                q[st.sec * 1_000_000_000 + st.nanosec] = msg.position[0]
            elif conn.topic == '/reference':
                st = msg.header.stamp
                ref[st.sec * 1_000_000_000 + st.nanosec] = msg.points[0].positions[0]
    elapsed = time.perf_counter() - t0
    e = np.array([ref[k] - v for k, v in q.items() if k in ref])
    return elapsed, count, float(np.sqrt(np.mean(e ** 2)))


def analyze_cli(bag: Path, out: Path) -> tuple[float, dict]:
    """Run manip-analyze as a subprocess; returns (wall time s, report)."""
    cmd = [sys.executable, '-m', 'manip_control.bag_analysis', str(bag), '--out', str(out),
           '--quiet']
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f'manip-analyze failed ({proc.returncode}): {proc.stderr}')
    return elapsed, json.loads((out / 'report.json').read_text())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--seconds', type=float, default=600.0)
    ap.add_argument('--rate', type=float, default=1000.0)
    ap.add_argument('--storage', choices=('mcap', 'sqlite3', 'both'), default='both')
    ap.add_argument('--keep', metavar='DIR',
                    help='keep the bags and reports in DIR (and reuse bags generated there '
                         'with the same --seconds/--rate)')
    args = ap.parse_args()
    storages = ['mcap', 'sqlite3'] if args.storage == 'both' else [args.storage]
    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix='bench_analyze_'))
    base.mkdir(parents=True, exist_ok=True)
    try:
        paths = {s: base / f'run_{s}' for s in storages}
        stamp = base / 'bench.json'
        wanted = {'seconds': args.seconds, 'rate': args.rate}
        reuse = (args.keep and stamp.is_file() and json.loads(stamp.read_text()) == wanted
                 and all((p / 'metadata.yaml').is_file() for p in paths.values()))
        if reuse:
            print(f'reusing the bags in {base}')
        else:
            for p in paths.values():
                if p.exists():
                    shutil.rmtree(p)
            stamp.unlink(missing_ok=True)
            t0 = time.perf_counter()
            n = generate(paths, args.seconds, args.rate)
            stamp.write_text(json.dumps(wanted))
            print(f'generated {n} messages per bag ({args.seconds:g} s at {args.rate:g} Hz) '
                  f'in {time.perf_counter() - t0:.1f} s')
        for storage, bag in paths.items():
            size = sum(f.stat().st_size for f in bag.iterdir()) / 1e6
            t_plain, count, rms_plain = plain_loop(bag)
            t_cli, report = analyze_cli(bag, base / f'report_{storage}')
            rms_cli = report['tracking']['per_joint']['joint1']['rms']
            print(f'[{storage}] {size:.0f} MB, {count} messages')
            print(f'  plain rosbags read+deserialize: {t_plain:7.2f} s  '
                  f'{count / t_plain:10.0f} msg/s')
            print(f'  manip-analyze end to end:       {t_cli:7.2f} s  '
                  f'{count / t_cli:10.0f} msg/s')
            print(f'  ratio: {t_plain / t_cli:.2f}x   (RMS e joint1: plain {rms_plain:.9g}, '
                  f'report {rms_cli:.9g})')
            if not math.isclose(rms_plain, rms_cli, rel_tol=1e-9):
                print('  MISMATCH between the plain loop and the report', file=sys.stderr)
                return 1
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
