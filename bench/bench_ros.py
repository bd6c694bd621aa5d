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

    .venv/bin/python bench/bench_ros.py [--duration 10] [--repeat 3] [--quick] [--no-realtime]

1. Lockstep, default scenario (full plant: DC motors + PI current drives, friction, rotor
   inertia), 1 kHz, side by side in the same run, each variant repeated (best and median):
   the three nodes in one process (manip-sim, EventsExecutor) and as three separate
   processes (what launch/sim.launch.py starts), each without and with the bag recorder
   (one more node in manip-sim, a fourth process beside the separate ones). Separate
   processes run with the nodes' default transport (UDPv4) and with Fast DDS's shared
   memory (``MANIP_PREFER_UDP=0``). And as a user starts them: ``ros2 launch manip_control
   sim.launch.py`` in a colcon workspace of this tree (built once, in a temporary
   directory), with ``composed:=true`` (the nodes in one process, the ``composed``
   executable) and without (one process per node), with the recorder. Real-time factor =
   simulated / wall time; CPU time per tick of every process (all its threads, DDS
   included), which tells where the time goes on a machine shared with other jobs.
2. The single-threaded executor in one process (``--executor single``), for comparison.
3. Where the time goes, per message: a ping-pong of serialized JointState messages between
   two processes (EventsExecutor, ``raw=True`` as the nodes use them): round trip and CPU per
   round trip of each process, reliable and best effort, over UDPv4 and over shared memory;
   and the recorder's per-message write path in one process (``BagWriter.write`` into MCAP,
   and the receive stamp from ``Clock.now()`` or from the rcl clock); and the longest
   ``publish()`` of a 1 kHz reliable publisher in the 4 s after its subscriber process is
   killed (SIGKILL), over UDPv4 and over Fast DDS's default (shared memory + UDPv4): the
   reason the nodes prefer UDPv4 was a 1 s stall there.
4. Real time, the same three nodes in one process (manip-sim --mode realtime), 1 kHz:
   controller ticks executed in the wall-clock window of the run against the ticks due at
   1 kHz, and latency from a joint-state publication (its header stamp, wall clock) to the
   command computed from it; for the controller triggers ``state`` (default) and ``timer``,
   with normal scheduling and with ``--rt-priority 20`` (SCHED_FIFO); late plant timer
   periods (caught up by integrating them).

Targets: lockstep RTF >= 4x for manip-sim with the recorder and for ``sim.launch.py
composed:=true`` with the recorder, >= 3x for the separate processes with the recorder; real
time >= 99 % of the controller ticks and p99 latency <= 1 ms. Each run uses its own ROS
domain.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
#: ROS domains of this benchmark: BASE_DOMAIN + 0 (one process), + 1 (separate processes),
#: + 2 (real time).
BASE_DOMAIN = 101 + os.getpid() % 80

from manip_control.nodes import sim  # noqa: E402
import rclpy  # noqa: E402

TICKS_PER_S = os.sysconf('SC_CLK_TCK')
#: Transport settings that the separate-process runs replace with their own.
TRANSPORT_VARS = ('FASTDDS_BUILTIN_TRANSPORTS', 'FASTRTPS_DEFAULT_PROFILES_FILE',
                  'FASTDDS_DEFAULT_PROFILES_FILE', 'MANIP_PREFER_UDP', 'ROS_LOCALHOST_ONLY',
                  'ROS_AUTOMATIC_DISCOVERY_RANGE')


def _domain(offset: int) -> str:
    return str(BASE_DOMAIN + offset)


def _cpu_self() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _cpu_of(pid: int) -> float:
    """CPU time [s] of a running process (all threads), from /proc."""
    fields = Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S


def _udp_datagrams() -> int:
    """UDP datagrams received on this host so far (/proc/net/snmp; all processes)."""
    lines = [ln.split() for ln in Path('/proc/net/snmp').read_text().splitlines()
             if ln.startswith('Udp:')]
    return int(dict(zip(lines[0][1:], lines[1][1:]))['InDatagrams'])


def one_process(duration: float, bag: bool, executor: str = 'events',
                share_sim_time: bool = True) -> dict:
    """manip-sim's runner in this process: RTF and CPU per tick of the process."""
    os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'     # as manip-sim does
    os.environ['ROS_DOMAIN_ID'] = _domain(0)
    ctx = rclpy.Context()
    rclpy.init(context=ctx, args=['bench', '--ros-args', '--log-level', 'warn'])
    cfg = sim.load_run_config('default', duration=duration)
    with tempfile.TemporaryDirectory() as tmp:
        runner = sim.SimRunner(cfg, bag=Path(tmp) / 'bag' if bag else None, executor=executor,
                               context=ctx, share_sim_time=share_sim_time)
        try:
            c0 = _cpu_self()
            out = runner.execute()
            cpu = _cpu_self() - c0
        finally:
            runner.destroy()
            rclpy.try_shutdown(context=ctx)
    rec = sum(out.recorded.get(t, 0) for t in out.published)
    return {'rtf': out.real_time_factor, 'ticks': out.ticks,
            'cpu_us': {'manip-sim': 1e6 * cpu / max(out.ticks, 1)},
            'timeouts': out.plant_counters['command_timeouts'],
            'recorded': f'{rec}/{sum(out.published.values())}' if bag else ''}


def separate_processes(duration: float, bag: bool, transport: str) -> dict:
    """
    Plant, controller, trajectory (and recorder) as processes with config/sim_params.yaml.

    ``transport``: ``udp`` (the nodes' default when nothing chose one) or ``shm`` (Fast DDS's
    default, shared memory between processes of the host). CPU of every process between the
    plant's start line and its end line.
    """
    params = str(ROOT / 'config' / 'sim_params.yaml')
    env = {k: v for k, v in os.environ.items() if k not in TRANSPORT_VARS}
    env.update(PYTHONUNBUFFERED='1', ROS_DOMAIN_ID=_domain(1),
               ROS_AUTOMATIC_DISCOVERY_RANGE='SUBNET', PYTHONPATH=str(ROOT))
    if transport == 'shm':
        env['MANIP_PREFER_UDP'] = '0'
    py = sys.executable
    sim_time = ['-p', 'use_sim_time:=true']
    udp0 = _udp_datagrams()
    with tempfile.TemporaryDirectory() as tmp:
        cmds = {}
        if bag:
            cmds['recorder'] = ['recorder_node', '-p', f'bag:={tmp}/bag', *sim_time]
        cmds['controller'] = ['controller_node', '--params-file', params, *sim_time]
        cmds['trajectory'] = ['trajectory_node', '--params-file', params, *sim_time]
        cmds['plant'] = ['plant_node', '--params-file', params, '-p', f'duration:={duration}',
                         '-p', f'wait_for_subscribers:={2 if bag else 1}']
        procs, logs = {}, {}
        try:
            for name, (mod, *args) in cmds.items():
                logs[name] = open(Path(tmp) / f'{name}.log', 'w+')
                procs[name] = subprocess.Popen(
                    [py, '-m', f'manip_control.nodes.{mod}', '--ros-args', *args], env=env,
                    cwd=ROOT, stdout=subprocess.DEVNULL, stderr=logs[name])
            plant_log = Path(tmp) / 'plant.log'
            c0 = c1 = None
            deadline = time.monotonic() + 600
            while procs['plant'].poll() is None and time.monotonic() < deadline:
                text = plant_log.read_text()
                if c0 is None and 'lockstep at' in text:
                    c0 = {n: _cpu_of(p.pid) for n, p in procs.items()}
                if c0 is not None and 'run finished' in text:
                    c1 = {n: _cpu_of(p.pid) for n, p in procs.items() if p.poll() is None}
                    break
                time.sleep(0.02)
            procs['plant'].wait(60)
        finally:
            for p in procs.values():
                if p.poll() is None:
                    p.send_signal(2)
            for p in procs.values():
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    p.kill()
            for f in logs.values():
                f.close()
        err = (Path(tmp) / 'plant.log').read_text()
        rec_log = (Path(tmp) / 'recorder.log').read_text() if bag else ''
    m = re.search(r'run finished: (\d+) ticks, (\d+) command timeouts.*?([\d.]+) s wall, '
                  r'real-time factor ([\d.]+)x', err)
    if not m or c0 is None or c1 is None:
        return {'error': err[-1500:]}
    ticks = int(m.group(1))
    udp = (_udp_datagrams() - udp0) / max(ticks, 1)
    bag_m = re.search(r'bag \S+: (\d+) messages', rec_log)
    return {'rtf': float(m.group(4)), 'ticks': ticks, 'timeouts': int(m.group(2)),
            'cpu_us': {n: 1e6 * (c1[n] - c0[n]) / max(ticks, 1) for n in c1},
            'recorded': (f'{bag_m.group(1)} in the bag' if bag_m else '')
            + (f'; {udp:.1f} UDP datagrams per tick' if transport == 'udp' else '')}


#: The colcon workspace of the launched variants (built once per benchmark run).
_WORKSPACE: dict = {}


def _workspace() -> dict | None:
    """
    Environment of ``source install/setup.bash`` in a colcon workspace of this tree.

    Built once (``colcon build --symlink-install``, as the README's ROS route) in a temporary
    directory removed at exit; None (with the reason in ``_WORKSPACE['error']``) where colcon
    or the ``ros2`` tools are missing or the build fails.
    """
    if _WORKSPACE:
        return _WORKSPACE.get('env')
    import atexit
    import shutil
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get('PATH', '')])
    if not (shutil.which('colcon', path=path) and shutil.which('ros2', path=path)):
        _WORKSPACE['error'] = 'colcon or ros2 not installed'
        return None
    tmp = tempfile.TemporaryDirectory(prefix='bench_ros_ws_')
    atexit.register(tmp.cleanup)
    ws = Path(tmp.name)
    (ws / 'src').mkdir()
    (ws / 'src' / 'manip_control').symlink_to(ROOT, target_is_directory=True)
    env = dict(os.environ, PATH=path, ROS_LOG_DIR=str(ws / 'ros_log'))
    done = subprocess.run(['bash', '-c', 'colcon build --symlink-install --event-handlers '
                           'console_direct- > build.log 2>&1 && source install/setup.bash '
                           '&& env -0'], cwd=ws, env=env, capture_output=True, timeout=900)
    if done.returncode != 0:
        _WORKSPACE['error'] = f'colcon build failed: {(ws / "build.log").read_text()[-500:]}'
        return None
    sourced = dict(item.split('=', 1) for item in done.stdout.decode().split('\0')
                   if '=' in item)
    _WORKSPACE.update(env=sourced, path=ws)
    return sourced


def launched(duration: float, bag: bool, composed: bool) -> dict:
    """
    ``ros2 launch manip_control sim.launch.py [composed:=true] duration:=D [bag:=DIR]``.

    In the colcon workspace of :func:`_workspace`, with the transport the nodes choose when
    nothing is set (as :func:`separate_processes`). RTF is the plant's (first tick to the
    end, its ``run finished`` line); CPU per tick of every process launch started, and of
    ``ros2 launch`` itself, between the plant's start line and its end line.
    """
    sourced = _workspace()
    if sourced is None:
        return {'error': _WORKSPACE['error']}
    env = {k: v for k, v in sourced.items() if k not in TRANSPORT_VARS}
    env.update(PYTHONUNBUFFERED='1', ROS_DOMAIN_ID=_domain(5),
               ROS_AUTOMATIC_DISCOVERY_RANGE='SUBNET', RCUTILS_COLORIZED_OUTPUT='0')
    with tempfile.TemporaryDirectory() as tmp:
        args = ['ros2', 'launch', 'manip_control', 'sim.launch.py', f'duration:={duration}',
                f'composed:={str(composed).lower()}'] + ([f'bag:={tmp}/bag'] if bag else [])
        log_path = Path(tmp) / 'launch.log'
        t0 = time.perf_counter()
        with open(log_path, 'w') as log:
            p = subprocess.Popen(args, env=env, cwd=tmp, stdout=log, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, start_new_session=True)
            c0 = c1 = None
            pids: dict = {}
            deadline = time.monotonic() + 600
            try:
                while p.poll() is None and time.monotonic() < deadline:
                    text = log_path.read_text()
                    pids = {m.group(1): int(m.group(2)) for m in re.finditer(
                        r'\[INFO\] \[([\w-]+)-\d+\]: process started with pid \[(\d+)\]',
                        text)}
                    pids['launch'] = p.pid
                    if c0 is None and 'lockstep at' in text:
                        c0 = {n: _cpu_of(q) for n, q in pids.items()}
                    if c0 is not None and 'run finished' in text:
                        c1 = {n: _cpu_of(q) for n, q in pids.items()
                              if n in c0 and Path(f'/proc/{q}').exists()}
                        break
                    time.sleep(0.02)
                p.wait(120)
            finally:
                if p.poll() is None:
                    os.killpg(p.pid, 2)
                    p.wait(30)
        total = time.perf_counter() - t0
        text = log_path.read_text()
    m = re.search(r'run finished: (\d+) ticks, (\d+) command timeouts.*?([\d.]+) s wall, '
                  r'real-time factor ([\d.]+)x', text)
    if not m or c0 is None or c1 is None or p.returncode != 0:
        return {'error': f'exit code {p.returncode}: {text[-1500:]}'}
    ticks = int(m.group(1))
    rec = re.search(r'recorded/published into \S+: (.*)', text)
    if rec:
        pairs = re.findall(r'(\d+)/(\d+)', rec.group(1))
        recorded = (f'{sum(int(a) for a, _ in pairs)}/{sum(int(b) for _, b in pairs)}'
                    if pairs else '')
    else:
        bag_m = re.search(r'bag \S+: (\d+) messages', text)
        recorded = f'{bag_m.group(1)} in the bag' if bag_m else ''
    return {'rtf': float(m.group(4)), 'ticks': ticks, 'timeouts': int(m.group(2)),
            'cpu_us': {n: 1e6 * (c1[n] - c0[n]) / max(ticks, 1) for n in c1},
            'recorded': recorded + f'; launch to exit {total:.1f} s'}


VARIANTS = [
    ('one process (manip-sim)', lambda d: one_process(d, False)),
    ('one process + recorder', lambda d: one_process(d, True)),
    ('launch composed:=true + recorder', lambda d: launched(d, True, True)),
    ('launch composed:=true', lambda d: launched(d, False, True)),
    ('launch, separate processes + recorder', lambda d: launched(d, True, False)),
    ('one process + recorder, /clock per node', lambda d: one_process(d, True,
                                                                      share_sim_time=False)),
    ('3 processes, UDPv4', lambda d: separate_processes(d, False, 'udp')),
    ('3 processes + recorder, UDPv4', lambda d: separate_processes(d, True, 'udp')),
    ('3 processes, shared memory', lambda d: separate_processes(d, False, 'shm')),
    ('3 processes + recorder, shared memory', lambda d: separate_processes(d, True, 'shm')),
]


def lockstep_side_by_side(duration: float, repeat: int, only: str = '') -> list[str]:
    """Every variant ``repeat`` times, interleaved (the machine's load changes meanwhile)."""
    variants = [(name, fn) for name, fn in VARIANTS
                if any(part in name for part in only.split('|'))]
    results: dict[str, list] = {name: [] for name, _ in variants}
    one_process(0.2, True)          # warm-up: imports, compiled kernels, first discovery
    for _ in range(repeat):
        for name, fn in variants:
            results[name].append(fn(duration))
    rows = [f'  {"variant":<40}{"RTF best":>9}{"median":>8}  CPU per tick [us] (median) '
            'per process; command timeouts; recorded']
    for name, runs in results.items():
        ok = [r for r in runs if 'rtf' in r]
        if not ok:
            rows.append(f'  {name:<40} failed: {runs[-1].get("error", "")[-600:]}')
            continue
        rtf = [r['rtf'] for r in ok]
        cpu = {p: statistics.median(r['cpu_us'][p] for r in ok if p in r['cpu_us'])
               for p in ok[0]['cpu_us']}
        cpu_text = ', '.join(f'{p} {v:.0f}' for p, v in cpu.items())
        if len(cpu) > 1:
            cpu_text += f' (total {sum(cpu.values()):.0f})'
        rows.append(f'  {name:<40}{max(rtf):8.2f}x{statistics.median(rtf):7.2f}x  {cpu_text}; '
                    f'timeouts {max(r["timeouts"] for r in ok)}; {ok[-1]["recorded"]}'
                    + (f'  [{len(runs) - len(ok)} failed]' if len(ok) < len(runs) else ''))
    return rows


def single_executor(duration: float) -> list[str]:
    """Run one process with the single-threaded executor; return the figure row."""
    r = one_process(duration, False, executor='single')
    return [f'  one process, SingleThreadedExecutor     {r["rtf"]:8.2f}x  CPU per tick '
            f'{r["cpu_us"]["manip-sim"]:.0f} us']


def realtime(duration: float) -> list[str]:
    """
    Run manip-sim --mode realtime in a subprocess per variant; return the figure rows.

    One process per variant (SCHED_FIFO is per process); its summary line has the figures.
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
                env = dict(os.environ, ROS_DOMAIN_ID=_domain(2))
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


PING_PONG = """
import os, resource, sys, time
import rclpy
from rclpy.experimental import EventsExecutor
from rclpy.qos import QoSProfile, ReliabilityPolicy
from rclpy.serialization import serialize_message
from rclpy.task import Future
from sensor_msgs.msg import JointState
role, n, reliable = sys.argv[1], int(sys.argv[2]), sys.argv[3] == 'reliable'
qos = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE if reliable
                 else ReliabilityPolicy.BEST_EFFORT)
rclpy.init()
node = rclpy.create_node('ping_' + role)
ex = EventsExecutor()
ex.add_node(node)
cpu = lambda: sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
if role == 'echo':
    pub = node.create_publisher(JointState, 'pong', qos)
    node.create_subscription(JointState, 'ping', pub.publish, qos, raw=True)
    stop = Future()
    node.create_subscription(JointState, 'ping_stop', lambda m: stop.set_result(cpu()), qos,
                             raw=True)
    node.create_subscription(JointState, 'ping_start', lambda m: print(cpu(), flush=True),
                             qos, raw=True)
    while not stop.done():
        ex.spin_until_future_complete(stop, timeout_sec=0.1)
    print(stop.result(), flush=True)
else:
    raw = serialize_message(JointState(name=['joint1', 'joint2'], position=[1.0, 2.0],
                                       velocity=[3.0, 4.0], effort=[5.0, 6.0]))
    pub = node.create_publisher(JointState, 'ping', qos)
    start = node.create_publisher(JointState, 'ping_start', qos)
    stop = node.create_publisher(JointState, 'ping_stop', qos)
    count, t, done = [0], {}, Future()
    def on_pong(msg):
        count[0] += 1
        if count[0] == 200:
            start.publish(raw)
            t['t0'], t['c0'] = time.perf_counter(), cpu()
        if count[0] == n + 200:
            t['t1'], t['c1'] = time.perf_counter(), cpu()
            done.set_result(True)
            return
        pub.publish(raw)
    node.create_subscription(JointState, 'pong', on_pong, qos, raw=True)
    while not (pub.get_subscription_count() and node.count_publishers('pong')
               and stop.get_subscription_count() and start.get_subscription_count()):
        ex.spin_once(timeout_sec=0.05)
    time.sleep(0.3)
    pub.publish(raw)
    while not done.done():
        ex.spin_until_future_complete(done, timeout_sec=0.1)
    stop.publish(raw)
    time.sleep(0.2)
    print((t['t1'] - t['t0']) / n * 1e6, (t['c1'] - t['c0']) / n * 1e6, flush=True)
"""


def ping_pong(transport: str, reliable: bool, n: int = 5000) -> str:
    """Round trip [us] and CPU per round trip [us] of each of the two processes."""
    env = {k: v for k, v in os.environ.items() if k not in TRANSPORT_VARS}
    env.update(ROS_DOMAIN_ID=_domain(3), ROS_AUTOMATIC_DISCOVERY_RANGE='SUBNET',
               FASTDDS_BUILTIN_TRANSPORTS='UDPv4' if transport == 'udp' else 'SHM')
    qos = 'reliable' if reliable else 'best_effort'
    echo = subprocess.Popen([sys.executable, '-c', PING_PONG, 'echo', str(n), qos], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        ping = subprocess.run([sys.executable, '-c', PING_PONG, 'ping', str(n), qos], env=env,
                              capture_output=True, text=True, timeout=300)
        out, _ = echo.communicate(timeout=30)
    finally:
        if echo.poll() is None:
            echo.kill()
    try:
        rt, ping_cpu = (float(v) for v in ping.stdout.split())
        c0, c1 = (float(v) for v in out.split()[:2])
    except ValueError:
        return f'  {transport} {qos}: failed {ping.stderr[-300:]}'
    echo_cpu = (c1 - c0) / n * 1e6
    return (f'  {"UDPv4" if transport == "udp" else "shared memory":<14}{qos:<12} round trip '
            f'{rt:6.0f} us; CPU per round trip: pinger {ping_cpu:4.0f} us, echo '
            f'{echo_cpu:4.0f} us')


KILLED_PEER_SUB = """
import rclpy
from rclpy.experimental import EventsExecutor
from rclpy.task import Future
from sensor_msgs.msg import JointState
rclpy.init()
n = rclpy.create_node('peer_sub')
n.create_subscription(JointState, 'peer', lambda m: None, 100, raw=True)
ex = EventsExecutor()
ex.add_node(n)
while True:
    ex.spin_until_future_complete(Future(), timeout_sec=0.1)
"""
KILLED_PEER = """
import signal, subprocess, sys, time
import rclpy
from rclpy.qos import QoSProfile
from rclpy.serialization import serialize_message
from sensor_msgs.msg import JointState
sub = subprocess.Popen([sys.executable, '-c', sys.argv[1]])
rclpy.init()
node = rclpy.create_node('peer_pub')
pub = node.create_publisher(JointState, 'peer', QoSProfile(depth=100))
raw = serialize_message(JointState(name=['a', 'b'], position=[1.0, 2.0]))
while pub.get_subscription_count() < 1:
    time.sleep(0.05)
def longest(seconds):
    worst, at, t_start = 0.0, 0.0, time.monotonic()
    while time.monotonic() < t_start + seconds:
        t0 = time.perf_counter()
        pub.publish(raw)
        d = time.perf_counter() - t0
        if d > worst:
            worst, at = d, time.monotonic() - t_start
        time.sleep(0.001)
    return worst, at
before, _ = longest(1.0)
sub.send_signal(signal.SIGKILL)
sub.wait()
after, at = longest(4.0)
print(before * 1e3, after * 1e3, at, flush=True)
"""


def killed_peer(transport: str) -> str:
    """Measure the longest publish() [ms] of a 1 kHz publisher around a SIGKILL of its reader."""
    env = {k: v for k, v in os.environ.items() if k not in TRANSPORT_VARS}
    env.update(ROS_DOMAIN_ID=_domain(4), ROS_AUTOMATIC_DISCOVERY_RANGE='SUBNET',
               FASTDDS_BUILTIN_TRANSPORTS=transport)
    res = subprocess.run([sys.executable, '-c', KILLED_PEER, KILLED_PEER_SUB], env=env,
                         capture_output=True, text=True, timeout=120)
    try:
        before, after, at = (float(v) for v in res.stdout.split())
    except ValueError:
        return f'  killed subscriber, {transport}: failed {res.stderr[-300:]}'
    return (f'  killed subscriber, {transport:<8} longest publish(): {before:6.1f} ms before the '
            f'kill, {after:7.1f} ms in the 4 s after it ({at:.2f} s after)')


def write_path(n: int = 20000) -> list[str]:
    """Measure the recorder's per-message cost in one process: bag write, receive stamp."""
    from manip_control.bag_io import BagWriter
    from rclpy.clock import Clock
    from rclpy.clock import ClockType
    from rclpy.serialization import serialize_message
    from sensor_msgs.msg import JointState
    raw = serialize_message(JointState(name=['joint1', 'joint2'], position=[1.0, 2.0],
                                       velocity=[3.0, 4.0], effort=[5.0, 6.0]))
    rows = []
    for storage in ('mcap', 'sqlite3'):
        with tempfile.TemporaryDirectory() as tmp:
            w = BagWriter(Path(tmp) / 'bag', storage)
            w.open()
            w.add_topic('/joint_states', 'sensor_msgs/msg/JointState')
            write = w.write
            t0 = time.perf_counter()
            for k in range(n):
                write('/joint_states', k * 1_000_000, raw)
            dt = time.perf_counter() - t0
            w.close()
        rows.append(f'  BagWriter.write ({storage}){"":<14}{dt / n * 1e6:6.1f} us per message')
    clock = Clock(clock_type=ClockType.ROS_TIME)
    now = clock.handle.get_now
    for label, fn in (('Clock.now().nanoseconds', lambda: clock.now().nanoseconds),
                      ('clock.handle.get_now().nanoseconds', lambda: now().nanoseconds)):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        rows.append(f'  {label:<36}{(time.perf_counter() - t0) / n * 1e6:6.1f} us')
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument('--duration', type=float, default=10.0, help='simulated seconds per run')
    ap.add_argument('--repeat', type=int, default=3, help='runs of each lockstep variant')
    ap.add_argument('--quick', action='store_true', help='2 s runs, 1 repeat')
    ap.add_argument('--no-realtime', action='store_true', help='skip the real-time runs')
    ap.add_argument('--only', default='', metavar='TEXT',
                    help='only the lockstep variants whose name contains TEXT (or one of '
                         'TEXT1|TEXT2|...; section 1 only)')
    args = ap.parse_args()
    d = 2.0 if args.quick else args.duration
    repeat = 1 if args.quick else max(1, args.repeat)
    print(f'bench_ros: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start, '
          f'{d:g} s per run, {repeat} runs per lockstep variant')
    print('1. lockstep, default scenario (full plant), 1 kHz: one process vs separate '
          'processes (sim.launch.py)')
    print('\n'.join(lockstep_side_by_side(d, repeat, args.only)))
    if args.only:
        return
    print('2. lockstep, one process, single-threaded executor:')
    print('\n'.join(single_executor(d)))
    print('3. where the time goes: per message (ping-pong of two processes; recorder path)')
    for transport in ('udp', 'shm'):
        for reliable in (True, False):
            print(ping_pong(transport, reliable))
    print('\n'.join(write_path()))
    for transport in ('UDPv4', 'DEFAULT'):
        print(killed_peer(transport))
    if not args.no_realtime:
        print('4. real time, 3 nodes in one process, 1 kHz (manip-sim --mode realtime):')
        print('\n'.join(realtime(d)))
    print(f'load average at end {os.getloadavg()[0]:.2f}')


if __name__ == '__main__':
    main()
