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
Tracking against the MuJoCo driver under load: ``hardware.launch.py mujoco:=true`` runs.

For each arm (``2r``, or a URDF file) and each driver priority (``rt``: every thread of the
driver process SCHED_FIFO 50 with ``chrt -a -f -p 50``, as a robot's driver runs; ``normal``),
with ``--busy`` busy loops (``yes > /dev/null``, killed by PID afterwards): a 20 s smooth
reference (the trajectory node's sinusoids), then Ctrl-C. Prints per run: the late RMS
tracking error per joint (``q`` of /joint_states against the ``q_d`` of /joint_commands,
matched by stamp, from 6 s on), the command ratio (ticks with a fresh command, counted by the
driver), the largest joint speed until the Ctrl-C (the driver's), the controller's safe-mode
entries and hold timeouts, the host load, and what the host itself took: the hypervisor's
steal share of the CPU time over the run (/proc/stat) and the stalls of a probe thread at
SCHED_FIFO 80 on each CPU (``test/host_stall_probe.py``, above every thread of a run: a late
wake-up of it is the host's, not the package's). Short runs (``--duration 3 --repeat 20``) look at
the start: the arm's largest speed while the controller takes up the reference.

Run in a sourced workspace of this tree (``source install/setup.bash``), as root for chrt:

    python bench/bench_mujoco_load.py --arms 2r ../shared/fixtures/urdf/panda.urdf --busy 2
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
import signal
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import yaml

LATE = 6.0
#: A host stall counted in a run: the probe thread woke this late [s].
STALL = 2e-3
PROBE = Path(__file__).resolve().parents[1] / 'test' / 'host_stall_probe.py'


def _cpu_times() -> list[int]:
    with open('/proc/stat', encoding='ascii') as fh:
        return [int(x) for x in fh.readline().split()[1:]]


def _steal(since: list[int]) -> float:
    """Return the steal share of the CPU time since ``since`` (``_cpu_times()``)."""
    delta = [b - a for a, b in zip(since, _cpu_times())]
    return delta[7] / max(1, sum(delta[:8]))


def _stalls(logs: list[Path], t0: float, t1: float) -> list[float]:
    """Return the probes' late wake-ups [s] above STALL due within ``[t0, t1]``."""
    out = []
    for log in logs:
        for line in log.read_text().splitlines()[1:]:
            due, late = map(float, line.split())
            if t0 <= due <= t1 and late >= STALL:
                out.append(late)
    return sorted(out)


def _stamp(m) -> int:
    return m.header.stamp.sec * 1_000_000_000 + m.header.stamp.nanosec


class _Probe:
    """The bench's own subscriber: states, stamped commands, diagnostics."""

    def __init__(self, domain: int):
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.experimental import EventsExecutor
        from sensor_msgs.msg import JointState
        self.ctx = rclpy.Context()
        rclpy.init(context=self.ctx, domain_id=domain)
        self.node = rclpy.create_node('bench_probe', context=self.ctx)
        self.q, self.cmds, self.diag = {}, [], []
        self.node.create_subscription(JointState, '/joint_states',
                                      lambda m: self.q.__setitem__(_stamp(m), m.position),
                                      20000)
        self.node.create_subscription(JointState, '/joint_commands', self.cmds.append, 20000)
        self.node.create_subscription(DiagnosticArray, '/controller/diagnostics',
                                      self.diag.append, 100)
        self.ex = EventsExecutor(context=self.ctx)
        self.ex.add_node(self.node)
        self.thread = threading.Thread(target=self._spin, daemon=True)
        self.thread.start()

    def _spin(self):
        try:
            while self.ctx.ok():
                self.ex.spin_once(timeout_sec=0.05)
        except Exception:  # noqa: BLE001 - shutdown race
            pass

    def close(self):
        import rclpy
        rclpy.try_shutdown(context=self.ctx)
        self.thread.join(5)


def _params(urdf: str, summary: Path, tmp: Path, controller: dict) -> Path:
    share = subprocess.run(['ros2', 'pkg', 'prefix', 'manip_control'], capture_output=True,
                           text=True, check=True).stdout.strip()
    name = 'arm_hardware_params.yaml' if urdf else 'hardware_params.yaml'
    data = yaml.safe_load(Path(share, 'share', 'manip_control', 'config', name).read_text())
    if not urdf:    # as test_mujoco_driver: a sinusoid and the simulated arm's own masses
        from manip_control.parameters import load_scenario
        arm = load_scenario('default').plant.arm
        data['/**/trajectory']['ros__parameters']['trajectory'] = (
            '{type: sinusoid, amplitude: [0.25, 0.25], omega: [1.2566, 1.2566], '
            'phase: [0.0, 0.785]}')
        data['/**/controller']['ros__parameters'].update(
            {'nominal.arm.m1': arm.m1, 'nominal.arm.m2': arm.m2})
    data['/**/controller']['ros__parameters'].update(controller)
    data['/**/joint_state_broadcaster'] = {'ros__parameters': {'summary_file': str(summary)}}
    path = tmp / 'params.yaml'
    path.write_text(yaml.safe_dump(data))
    return path


def run(urdf: str, rt: bool, duration: float, domain: int, controller: dict,
        stall_logs: list[Path]) -> dict:
    """Run one launch; return the measured figures."""
    tmp = Path(tempfile.mkdtemp(prefix='bench_mujoco_'))
    summary = tmp / 'driver.json'
    params = _params(urdf, summary, tmp, controller)
    probe = _Probe(domain)
    args = ['ros2', 'launch', 'manip_control', 'hardware.launch.py', 'mujoco:=true',
            f'params_file:={params}'] + ([f'urdf:={urdf}'] if urdf else [])
    log = open(tmp / 'launch.log', 'w')
    p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                         env={**os.environ, 'ROS_DOMAIN_ID': str(domain)})
    try:
        end = time.monotonic() + 180
        while not probe.cmds and time.monotonic() < end:
            time.sleep(0.1)
        if rt:
            pids = subprocess.run(['pgrep', '-g', str(p.pid), '-f', 'mujoco_driver'],
                                  capture_output=True, text=True).stdout.split()
            for pid in pids:
                subprocess.run(['chrt', '-a', '-f', '-p', '50', pid], check=True)
        t0, since = time.monotonic(), _cpu_times()
        time.sleep(duration)
        load, steal, stalls = (os.getloadavg()[0], _steal(since),
                               _stalls(stall_logs, t0, time.monotonic()))
        os.killpg(p.pid, signal.SIGINT)
        p.wait(90)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        log.close()
        probe.close()
    text = (tmp / 'launch.log').read_text(errors='replace')
    cmds = list(probe.cmds)
    t0 = _stamp(cmds[0])
    err = np.array([np.subtract(probe.q[_stamp(m)], m.position) for m in cmds
                    if _stamp(m) in probe.q and _stamp(m) - t0 >= LATE * 1e9])
    diag = {}
    if probe.diag:
        diag = {kv.key: kv.value for kv in probe.diag[-1].status[0].values}
    (tmp / 'controller_diagnostics.json').write_text(json.dumps(diag, indent=1))
    s = json.loads(summary.read_text()) if summary.is_file() else {}
    return {'rms': np.sqrt(np.mean(err ** 2, axis=0)) if len(err) else None,
            'max': float(np.abs(err).max()) if len(err) else None, 'samples': len(err),
            'ratio': s.get('command_ratio'), 'ticks': s.get('ticks_after_first_command'),
            'last_command_zero': s.get('last_command') == [0.0] * len(s.get('joints', [])),
            'safe': {k[13:]: v for k, v in diag.items() if k.startswith('safe_entries.')},
            'hold_timeouts': diag.get('hold_timeouts'), 'load': load, 'steal': steal,
            'stalls': stalls,
            'peak_speed': s.get('max_abs_velocity'),
            'clean': p.returncode == 0 and 'Traceback' not in text, 'log': str(tmp)}


def main() -> int:
    """Run every arm x priority; print one line per run."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument('--arms', nargs='+', default=['2r'])
    ap.add_argument('--priorities', nargs='+', default=['rt', 'normal'],
                    choices=['rt', 'normal'])
    ap.add_argument('--busy', type=int, default=2, help='busy loops (yes > /dev/null)')
    ap.add_argument('--duration', type=float, default=20.0)
    ap.add_argument('--repeat', type=int, default=1)
    ap.add_argument('--domain', type=int, default=77)
    ap.add_argument('--controller', nargs='*', default=[], metavar='NAME=VALUE',
                    help='controller parameters to set (VALUE in YAML), e.g. '
                         '"joint_stiffness_limit=[50, 50, 30, 30, 30, 20, 20]"')
    args = ap.parse_args()
    controller = {}
    for item in args.controller:
        name, sep, value = item.partition('=')
        if not sep or not name:
            ap.error(f'--controller: expected NAME=VALUE (got {item!r})')
        controller[name] = yaml.safe_load(value)
    busy = [subprocess.Popen(['yes'], stdout=subprocess.DEVNULL) for _ in range(args.busy)]
    probe_dir = Path(tempfile.mkdtemp(prefix='bench_host_stalls_'))
    logs = [probe_dir / f'cpu{cpu}.txt' for cpu in range(os.cpu_count() or 1)]
    probes = [subprocess.Popen([sys.executable, str(PROBE), '--cpu', str(cpu), '--log',
                                str(log), '--min-late', str(STALL)])
              for cpu, log in enumerate(logs)]
    try:
        for _ in range(args.repeat):
            for arm in args.arms:
                for prio in args.priorities:
                    r = run('' if arm == '2r' else arm, prio == 'rt', args.duration,
                            args.domain, controller, logs)
                    rms = ('none' if r['rms'] is None else
                           '[' + ' '.join(f'{x:.1e}' for x in r['rms']) + ']')
                    ratio = 'none' if r['ratio'] is None else f'{100 * r["ratio"]:.2f} %'
                    print(f'{Path(arm).stem} driver {prio}, {args.busy} busy loops, load '
                          f'{r["load"]:.1f}, steal {100 * r["steal"]:.2f} %, host stalls '
                          f'{len(r["stalls"])} (longest '
                          f'{1e3 * max(r["stalls"], default=0.0):.1f} ms): late RMS {rms} '
                          f'rad (max {r["max"]}), commands '
                          f'{ratio} of {r["ticks"]} ticks, max |qd| {r["peak_speed"]} rad/s '
                          f'until the stop, safe entries {r["safe"]}, hold '
                          f'timeouts {r["hold_timeouts"]}, last command zero '
                          f'{r["last_command_zero"]}, clean exit {r["clean"]} ({r["log"]})',
                          flush=True)
    finally:
        for b in busy + probes:
            b.kill()
            b.wait()
    alive = [b.pid for b in busy if b.poll() is None]
    print(f'busy loops killed: {len(busy) - len(alive)} of {len(busy)}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
