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
Shared test fixtures: a session-unique ROS_DOMAIN_ID, rclpy contexts, process helpers.

The domain id (1..100, never 0) is reserved for this pytest process with a lock file, so
concurrent test runs on one machine never share a domain, and put into ``os.environ`` at
import, before any rclpy.init in this process; every subprocess started through
:class:`Processes` inherits it. DDS discovery is kept on this host
(``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST``, over UDPv4 on 127.0.0.1 as the nodes do it)
unless the caller set it.

``ros2_env`` (session) is the environment of a ROS 2 user after ``colcon build
--symlink-install`` of this working tree and ``source install/setup.bash``: ``ros2 launch
manip_control ...``, ``ros2 run manip_control ...`` and ``FindPackageShare`` resolve through
the ament index of that install, whose files link back to the working tree (the code under
test). Tests that need it are skipped, with the reason, where colcon or the ``ros2`` tools are
missing. At the end of the session the ``ros2`` daemon of the domain is stopped.

``ros_context`` gives each test its own initialised rclpy Context (nodes take
``context=ctx``); ``procs`` starts processes in their own process groups and always stops
them (SIGINT, then SIGKILL) at the end of the test, pass or fail.
"""

from __future__ import annotations

import faulthandler
import functools
import math
import os
from pathlib import Path
import shutil
import signal
import subprocess
import sys
import threading
import time

from manip_control.nodes.common import prefer_udp_transport
import pytest

ROOT = Path(__file__).resolve().parent.parent
#: The fixture URDFs of real arms (read there, never copied).
URDF_DIR = ROOT.parent / 'shared' / 'fixtures' / 'urdf'
PYTHON = sys.executable
#: The shared fixtures (URDFs, robot bags, ros2 tools), read in place (DEVELOPERS.md).
SHARED_FIXTURES = ROOT.parent / 'shared' / 'fixtures'


def reserve_domain_id() -> tuple[int, object]:
    """
    Reserve a ROS_DOMAIN_ID in 1..100 for this process (an flock held until it exits).

    Starts at a pid-derived id and takes the first one that no other running test process
    holds; falls back to the pid-derived id if none is free. Closing the returned file
    releases the id (None: nothing to release).
    """
    import fcntl
    import tempfile
    lock_dir = Path(tempfile.gettempdir()) / 'manip_control_ros_domains'
    lock_dir.mkdir(exist_ok=True)
    start = os.getpid() % 100
    for i in range(100):
        domain = 1 + (start + i) % 100
        fh = open(lock_dir / f'{domain}.lock', 'w')
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.close()
            continue
        return domain, fh
    return 1 + start, None


DOMAIN_ID, _DOMAIN_LOCK = reserve_domain_id()
os.environ['ROS_DOMAIN_ID'] = str(DOMAIN_ID)
os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
# this process and every process the tests start take the transport the node executables
# take (manip_control.nodes.common.prefer_udp_transport): with LOCALHOST, UDPv4 on 127.0.0.1
# through a Fast DDS profile, never shared memory (a killed peer can stall a publisher there)
prefer_udp_transport()


#: A test (setup, call, teardown) running longer than this [s] is hung: faulthandler writes every
#: thread's Python stack and ends the run. Its watchdog is a C thread; pytest-timeout's is a
#: Python thread, which a deadlock holding the GIL stops too.
HANG_TIMEOUT = 600.0
#: ... and, this long [s] after the test started, hang_watchdog.py writes the native stacks.
HANG_NATIVE_STACKS = 540.0
_HANG = {}


def pytest_configure(config):
    """Arm the hang detection and the stop of the tests' processes on SIGTERM."""
    import tempfile
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _stop_on_sigterm)
    # the hang detection: the real stderr (before capture), a heartbeat, the watchdog
    _HANG['fd'] = os.dup(2)
    # the heartbeat file is made when the first test starts (collection is not judged)
    _HANG['dir'] = tempfile.mkdtemp(prefix='manip_control_hang_')
    path = _HANG['heartbeat'] = os.path.join(_HANG['dir'], 'heartbeat')
    _HANG['watchdog'] = subprocess.Popen(
        [PYTHON, str(Path(__file__).with_name('hang_watchdog.py')), str(os.getpid()), path,
         str(HANG_NATIVE_STACKS)], stdin=subprocess.DEVNULL, stdout=_HANG['fd'],
        stderr=_HANG['fd'])


def pytest_unconfigure(config):
    watchdog = _HANG.pop('watchdog', None)
    if watchdog is not None:
        watchdog.kill()
        watchdog.wait()
    if 'dir' in _HANG:
        shutil.rmtree(_HANG.pop('dir'), ignore_errors=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Time each test for :data:`HANG_TIMEOUT`; tell the watchdog that a test started."""
    if 'heartbeat' in _HANG:
        Path(_HANG['heartbeat']).touch()
    faulthandler.dump_traceback_later(HANG_TIMEOUT, exit=True, file=_HANG.get('fd', 2))
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def pytest_collection_modifyitems(config, items):
    """
    Run the linters first, whatever the selection.

    ament_flake8 checks files in a fork-based process pool; a fork of this process once
    rclpy tests have left DDS threads in it can deadlock on a lock such a thread held.
    """
    items.sort(key=lambda item: item.get_closest_marker('linter') is None)
    if not (SHARED_FIXTURES / 'urdf').is_dir():
        # without them a module's fixture list is empty (zero cases, silently) and its other
        # tests fail on a missing file: skip the modules that use them, with the reason
        skip = pytest.mark.skip(reason=f'{SHARED_FIXTURES}/urdf is absent: this module reads '
                                'the shared fixtures (../shared/fixtures beside the tree)')
        for item in items:
            if _uses_shared_fixtures(str(item.fspath)):
                item.add_marker(skip)


@functools.lru_cache(maxsize=None)
def _uses_shared_fixtures(path: str) -> bool:
    """Whether the test module at ``path`` names ``../shared/fixtures``."""
    try:
        text = Path(path).read_text(encoding='utf-8')
    except OSError:
        return False
    return "'shared' / 'fixtures'" in text or 'shared/fixtures' in text


def pytest_report_header(config):
    """Say once, at the top, when the shared fixtures are missing."""
    if not (SHARED_FIXTURES / 'urdf').is_dir():
        return (f'shared fixtures: {SHARED_FIXTURES}/urdf is ABSENT; the tests of the modules '
                'that read them are skipped')
    return None


@pytest.fixture(scope='session')
def ros_domain_id() -> int:
    """Return the ROS_DOMAIN_ID of this test session (also in os.environ)."""
    return DOMAIN_ID


@pytest.fixture
def ros_env() -> dict:
    """
    Environment for subprocesses: this session's domain, unbuffered Python output.

    Not ``PYTHONFAULTHANDLER``: with it, 6 of 24 SIGTERM exits of a commanding controller
    (``test_fault_exits.py -k sigterm_during_ramp``) ended in ``malloc_consolidate():
    unaligned fastbin chunk detected`` (SIGABRT), 0 of 6 without it.
    """
    env = dict(os.environ)
    env['ROS_DOMAIN_ID'] = str(DOMAIN_ID)
    env['PYTHONUNBUFFERED'] = '1'
    env['RCUTILS_COLORIZED_OUTPUT'] = '0'
    env.setdefault('PYTHONPATH', str(ROOT))
    return env


def end_context(ctx) -> None:
    """
    Shut ``ctx`` down and release its DDS participant now.

    ``try_shutdown`` alone leaves the participant alive until the garbage collector takes
    the Context: a full run of the suite held 20 of them in this process, each answering
    every discovery of the domain, and new processes' services were then matched too late
    for their first requests (``ros2 lifecycle set`` hung, a storm got no reply).
    """
    from manip_control.nodes.common import release_context
    release_context(ctx)    # nodes in reference cycles hold the participant until collected


@pytest.fixture
def ros_context():
    """Give a fresh initialised rclpy Context for one test, shut down afterwards."""
    rclpy = pytest.importorskip('rclpy')
    ctx = rclpy.Context()
    rclpy.init(context=ctx, domain_id=DOMAIN_ID)
    try:
        yield ctx
    finally:
        for node in _NODES_OF_CONTEXT.pop(id(ctx), []):
            try:
                node.destroy_node()
            except Exception:  # noqa: BLE001 - destroyed by the test already
                pass
        end_context(ctx)


#: the process managers of the running tests (stopped by :func:`_stop_on_sigterm`)
_LIVE_PROCESSES: list = []


def _stop_on_sigterm(signum, frame):
    """
    Stop the running tests' processes, then end as SIGTERM would have ended the session.

    A runner's time limit (``timeout``, a CI job's) ends pytest with SIGTERM, which runs no
    fixture teardown: the processes a test started, each in its own session, would outlive
    the run and publish on its ROS domain (measured: a launched controller, driver and
    trajectory kept running after ``timeout 40 pytest ...``).
    """
    for manager in list(_LIVE_PROCESSES):
        manager.stop_all()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


class Processes:
    """Processes of one test, each in its own process group; :meth:`stop_all` always runs."""

    def __init__(self, env: dict, log_dir: Path):
        self.env = env
        self.log_dir = log_dir
        self.items: list[subprocess.Popen] = []
        _LIVE_PROCESSES.append(self)

    def start(self, name: str, args: list[str], **kwargs) -> subprocess.Popen:
        """Start ``args`` (a list) with stdout/stderr to ``<log_dir>/<name>.out|err``."""
        out = open(self.log_dir / f'{name}.out', 'w')
        err = open(self.log_dir / f'{name}.err', 'w')
        p = subprocess.Popen(args, env=kwargs.pop('env', self.env),
                             cwd=kwargs.pop('cwd', str(ROOT)), stdout=out,
                             stderr=err, stdin=subprocess.DEVNULL, start_new_session=True,
                             **kwargs)
        p.name = name
        p.out_path = Path(out.name)
        p.err_path = Path(err.name)
        p._files = (out, err)
        self.items.append(p)
        return p

    def node(self, name: str, module: str, *ros_args: str) -> subprocess.Popen:
        """Start ``python -m manip_control.nodes.<module> --ros-args ...``."""
        args = [PYTHON, '-m', f'manip_control.nodes.{module}']
        if ros_args:
            args += ['--ros-args', *ros_args]
        return self.start(name, args)

    @staticmethod
    def output(p: subprocess.Popen) -> tuple[str, str]:
        """(stdout, stderr) written so far."""
        for f in p._files:
            f.flush()
        return p.out_path.read_text(), p.err_path.read_text()

    def wait(self, p: subprocess.Popen, timeout: float) -> int:
        """
        Exit code of ``p`` (killed and failed if it does not end within ``timeout``).

        The failure shows where the hung process waited (:func:`hung_process_stacks`).
        """
        try:
            return p.wait(timeout)
        except subprocess.TimeoutExpired:
            native = hung_process_stacks(p)
            self.stop(p)
            out, err = self.output(p)
            pytest.fail(f'{p.name} did not end within {timeout} s\n{out}\n{err}\n{native}')

    def stop(self, p: subprocess.Popen, sig=signal.SIGINT, grace: float = 5.0) -> None:
        """Signal the process group, then SIGKILL it after ``grace`` seconds."""
        if p.poll() is None:
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                pass
            try:
                p.wait(grace)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(5)
        # the group may hold children that outlived the leader
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def stop_all(self) -> None:
        if self in _LIVE_PROCESSES:
            _LIVE_PROCESSES.remove(self)
        while self.items:
            p = self.items.pop()
            try:
                self.stop(p)
            finally:
                for f in p._files:
                    f.close()


def hung_process_stacks(p: subprocess.Popen) -> str:
    """
    Return the threads (name, state, kernel wait) and native stacks of the hung process ``p``.

    The native stacks come from gdb where it is installed (at most 60 s).
    """
    from hang_watchdog import _native_frames
    lines = [f'+++ {p.name} (pid {p.pid}) hung; its threads: tid name state wait +++']
    task_dir = Path(f'/proc/{p.pid}/task')
    for tid in sorted(os.listdir(task_dir)) if task_dir.exists() else []:
        try:
            comm = (task_dir / tid / 'comm').read_text().strip()
            state = (task_dir / tid / 'stat').read_text().rsplit(') ', 1)[1].split()[0]
            wchan = (task_dir / tid / 'wchan').read_text().strip() or '-'
        except OSError:
            continue
        lines.append(f'  {tid} {comm} {state} {wchan}')
    gdb = shutil.which('gdb')
    if gdb is not None:
        try:
            out = subprocess.run([gdb, '-p', str(p.pid), '-batch', '-ex', 'thread apply all bt'],
                                 capture_output=True, text=True, timeout=60).stdout
            lines.append('native stacks (gdb):\n' + _native_frames(out))
        except subprocess.TimeoutExpired:
            lines.append('(gdb did not finish within 60 s)')
    return '\n'.join(lines)


@pytest.fixture
def procs(ros_env, tmp_path):
    """Start processes in a test; they are always stopped afterwards."""
    manager = Processes(ros_env, tmp_path)
    try:
        yield manager
    finally:
        manager.stop_all()


def run_all(commands: dict, env: dict, timeout: float) -> dict:
    """
    Run short commands at once, each in its own session, and collect their results.

    ``commands`` maps a key to an argument list; returns ``{key: (exit code, stdout,
    stderr)}``, the exit code None for a command killed after ``timeout`` s. No command
    outlives the call.
    """
    runs = {key: subprocess.Popen([str(a) for a in args], env=env, cwd=str(ROOT),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  stdin=subprocess.DEVNULL, text=True, start_new_session=True)
            for key, args in commands.items()}
    out = {}
    try:
        for key, p in runs.items():
            try:
                stdout, stderr = p.communicate(timeout=timeout)
                out[key] = (p.returncode, stdout, stderr)
            except subprocess.TimeoutExpired:
                p.kill()
                stdout, stderr = p.communicate()
                out[key] = (None, stdout, stderr)
    finally:
        for p in runs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
    return out


def cpu_times() -> list[int]:
    """Return the host's CPU time counters (the first line of /proc/stat) [clock ticks]."""
    with open('/proc/stat', encoding='ascii') as fh:
        return [int(x) for x in fh.readline().split()[1:]]


class StolenTime:
    """
    The share of the host's CPU time that its hypervisor ran elsewhere, over a stretch.

    ``steal`` in /proc/stat: time this virtual machine's CPUs wanted to run and did not. No
    process of the machine causes it, and while it lasts every thread waits, one at real-time
    priority included: this host has phases with several percent of it, in which a thread
    at real-time priority alone wakes up to 5 ms late (measured here). Tests of real-time
    figures (a share of 1 kHz ticks) measure it over their run and judge the figures only
    when it stayed below what a 1 kHz loop survives.
    """

    def __init__(self):
        self.start = cpu_times()

    def share(self) -> float:
        """Return steal / all CPU time since this object was made (0 when nothing passed)."""
        delta = [b - a for a, b in zip(self.start, cpu_times())]
        total = sum(delta[:8])          # user .. steal (guest time is inside user)
        return delta[7] / total if total > 0 else 0.0


#: The most steal a run's real-time figures are judged at. Measured with the 2R against
#: MuJoCo: at most 0.3 % of steal, 97-99 % of the driver's ticks had a fresh command; at
#: 5.3 %, 85 % (the driver's own real-time thread was 5 ms late 29 times).
MAX_STEAL = 0.01
#: How long to wait for a phase of this host without steal before a real-time run [s].
QUIET_WAIT = 90.0
#: Busy work that probes the hypervisor: steal accrues only while a CPU wants to run.
_BUSY_SECOND = 'import time\nt = time.monotonic()\nwhile time.monotonic() - t < 1.0:\n    pass'


def wait_for_no_steal(limit: float = QUIET_WAIT) -> float:
    """
    Wait (at most ``limit`` s) until both CPUs busy for a second see at most MAX_STEAL.

    Return the steal share of the last probe. An idle host shows no steal whatever its
    hypervisor does, hence the busy second (a process per CPU), then a pause of 2 s.
    """
    deadline = time.monotonic() + limit
    while True:
        stolen = StolenTime()
        busy = [subprocess.Popen([sys.executable, '-c', _BUSY_SECOND])
                for _ in range(os.cpu_count() or 1)]
        for b in busy:
            b.wait()
        share = stolen.share()
        if share <= MAX_STEAL or time.monotonic() > deadline:
            return share
        time.sleep(2.0)


class HostStalls:
    """
    The host's own stalls, logged by one ``host_stall_probe.py`` per CPU (started here).

    Each probe wakes every millisecond at SCHED_FIFO 80, above every thread of the package:
    a late wake-up is the host's (its hypervisor, its kernel), never the code under test's.
    :meth:`within` tells whether a stretch of ``time.monotonic()`` had one, so a test of a
    millisecond bound judges only stretches without.
    """

    def __init__(self, procs, log_dir: Path):
        self.logs = [log_dir / f'host_stalls{cpu}.txt' for cpu in range(os.cpu_count() or 1)]
        for cpu, log in enumerate(self.logs):
            procs.start(f'host_stall_probe{cpu}', [
                sys.executable, str(Path(__file__).with_name('host_stall_probe.py')),
                '--cpu', str(cpu), '--log', str(log)])
        deadline = time.monotonic() + 30.0
        while not all(log.exists() and log.read_text() for log in self.logs):
            assert time.monotonic() < deadline, 'the host stall probes did not start'
            time.sleep(0.05)

    def within(self, t0: float, t1: float) -> list[tuple[float, float]]:
        """Return the stalls ``(start, length)`` [s] that overlap ``[t0, t1]`` (monotonic)."""
        out = []
        for log in self.logs:
            for line in log.read_text().splitlines()[1:]:
                due, late = map(float, line.split())
                if due < t1 and due + late > t0:
                    out.append((due, late))
        return sorted(out)


def judge_real_time(run, attempts: int, what: str):
    """
    Return ``run()``'s result from a run on a host that its hypervisor did not starve.

    ``run()`` asserts what must hold on any host (clean exit, zero torque at the end, no
    refusal) and returns ``(result, steal)``, the steal share measured over its real-time
    stretch. A run with more than MAX_STEAL is not judged on its real-time figures: after a
    wait for a phase without steal, the run is made again, ``attempts`` times in all; when
    every one was starved the test is skipped, saying what was measured.
    """
    starved = []
    for _ in range(attempts):
        wait_for_no_steal()
        result, steal = run()
        if steal <= MAX_STEAL:
            if starved:
                print(f'\n[real time] {what}: judged on a run with {100 * steal:.2f} % steal; '
                      'the runs before had '
                      f'{", ".join(f"{100 * x:.1f} %" for x in starved)}')
            return result
        starved.append(steal)
    pytest.skip(f'{what}: real-time figures not judged: the hypervisor of this host took '
                f'{", ".join(f"{100 * x:.1f} %" for x in starved)} of its CPU time in '
                f'{attempts} runs (at most {100 * MAX_STEAL:g} % is judged)')


def spin_for(executor, seconds: float, until=None) -> bool:
    """Spin ``executor`` for up to ``seconds``; stop early when ``until()`` is true."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if until is not None and until():
            return True
        executor.spin_once(timeout_sec=0.01)
    return until() if until is not None else True


@pytest.fixture
def spin():
    """Return :func:`spin_for` (executor, seconds, until=None)."""
    return spin_for


class Probe:
    """A test-side node: typed subscriptions that keep every message, publishers."""

    def __init__(self, ctx, name: str = 'probe'):
        import rclpy
        self.node = rclpy.create_node(name, context=ctx)
        self.msgs: dict[str, list] = {}

    def sub(self, msg_type, topic: str, depth: int = 1000):
        from rclpy.qos import QoSProfile
        from rclpy.qos import ReliabilityPolicy
        self.msgs[topic] = []
        qos = QoSProfile(depth=depth, reliability=ReliabilityPolicy.RELIABLE)
        return self.node.create_subscription(msg_type, topic, self.msgs[topic].append, qos)

    def pub(self, msg_type, topic: str, depth: int = 100):
        return self.node.create_publisher(msg_type, topic, depth)

    def destroy(self) -> None:
        self.node.destroy_node()


class ThreadedProbe:
    """
    A test-side node in its own context, spun in a background thread.

    Every message of ``subs`` (key -> (type, topic)) is kept with its arrival time
    (time.monotonic) under ``data[key]``, and the time its publisher sent it (the DDS source
    timestamp, system clock [s]) under ``sent[key]``; deep reader queues, so that a lagging
    probe does not lose the samples it measures.
    """

    def __init__(self, domain_id: int, name: str, subs: dict, executor: str = 'single'):
        import rclpy

        from manip_control.nodes.common import make_executor
        from manip_control.nodes.sources import WithMessageInfo
        self.ctx = rclpy.Context()
        rclpy.init(context=self.ctx, domain_id=domain_id)
        self.node = rclpy.create_node(name, context=self.ctx)
        self.lock = threading.Lock()
        self.data = {key: [] for key in subs}
        self.sent = {key: [] for key in subs}
        for key, (typ, topic, *depth) in subs.items():
            # depth 1: only the newest message at each take (a probe that lags behind a 1 kHz
            # topic on a loaded machine reads what is published now, not a backlog)
            self.node.create_subscription(
                typ, topic, WithMessageInfo(functools.partial(self._rec, key)),
                depth[0] if depth else 20000)
        # 'events': the events executor (about a seventh of the cost per message), for a
        # probe that must keep up with a 1 kHz topic on a busy machine
        self.ex = make_executor(executor, context=self.ctx)
        self.ex.add_node(self.node)
        self.thread = threading.Thread(target=self._spin, daemon=True)
        self.thread.start()

    def _spin(self):
        try:
            while self.ctx.ok():
                self.ex.spin_once(timeout_sec=0.05)
        except Exception:  # noqa: BLE001 - shutdown race
            pass

    def _rec(self, key, msg, info):
        with self.lock:
            self.data[key].append((time.monotonic(), msg))
            self.sent[key].append(info['source_timestamp'] * 1e-9 if info else math.nan)

    def sent_times(self, key):
        """Return a copy of the send times of ``key`` (source timestamps, system clock [s])."""
        with self.lock:
            return list(self.sent[key])

    def last_sent(self, key) -> float:
        """Return the send time of the last message of ``key`` (-inf: none yet)."""
        with self.lock:
            return self.sent[key][-1] if self.sent[key] else -math.inf

    def get(self, key):
        """Return a copy of ``[(arrival time, message), ...]`` of ``key``."""
        with self.lock:
            return list(self.data[key])

    def describe(self) -> str:
        """Return what a timed-out wait adds to its message (nothing here)."""
        return ''

    def caught_up(self, keys, quiet: float = 0.5, timeout: float = 30.0) -> None:
        """
        Wait until no message of ``keys`` came for ``quiet`` s (at most ``timeout`` s).

        After its publishers ended: a probe starved by real-time processes may still hold part
        of a 1 kHz topic in its reader queues.
        """
        end = time.monotonic() + timeout
        last, since = None, time.monotonic()
        while time.monotonic() < end:
            with self.lock:
                now = tuple(len(self.data[k]) for k in keys)
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= quiet:
                return
            time.sleep(0.05)

    def wait_for(self, pred, timeout, what):
        """Return the first true ``pred()`` within ``timeout`` s, else fail naming ``what``."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            r = pred()
            if r:
                return r
            time.sleep(0.002)
        raise AssertionError(f'timed out after {timeout} s waiting for {what}{self.describe()}')

    def call(self, send, what: str, attempts: int = 3, timeout: float = 5.0):
        """
        Return the result of the service call that ``send()`` starts (a future).

        A request sent just after the server was discovered can be lost while the DDS
        response path is still matching, so an idempotent call is sent again, as a user
        would retry ``ros2 param set``.
        """
        for _ in range(attempts - 1):
            fut = send()
            end = time.monotonic() + timeout
            while time.monotonic() < end and not fut.done():
                time.sleep(0.002)
            if fut.done():
                return fut.result()
        fut = send()
        self.wait_for(fut.done, timeout, what)
        return fut.result()

    def close(self):
        """Stop spinning, then destroy the node."""
        import rclpy
        # Stop the spinning thread before destroying anything it waits on: destroying the
        # node under a concurrent spin_once, or an unbounded executor shutdown, can deadlock.
        rclpy.try_shutdown(context=self.ctx)
        self.thread.join(5)
        self.ex.shutdown(timeout_sec=5)
        self.node.destroy_node()
        self.ctx.destroy()
        import gc
        gc.collect()        # see end_context


@pytest.fixture
def probe(ros_context):
    """Give a :class:`Probe` node in this test's context."""
    p = Probe(ros_context)
    try:
        yield p
    finally:
        p.destroy()


#: nodes made by :func:`make_node`, per context (``id``): destroyed when the context ends
_NODES_OF_CONTEXT: dict = {}


def make_node(cls, ctx, node_specs, values: dict, **kwargs):
    """
    Build one of the package's nodes in ``ctx`` with parameter values.

    The node is destroyed at the end of the test (the ``ros_context`` fixture): a node left
    alive keeps its DDS participant and its publishers on the graph after its context is shut
    down, and a later test's controller or manip-sim rightly sees a second publisher there.
    """
    from manip_control.nodes.ros_params import parameter_overrides
    node = cls(context=ctx, parameter_overrides=parameter_overrides(node_specs, values),
               **kwargs)
    _NODES_OF_CONTEXT.setdefault(id(ctx), []).append(node)
    return node


@pytest.fixture
def executor(ros_context):
    """
    Give a SingleThreadedExecutor of this test's context (nodes added by the test).

    Not the events executor the node executables spin (they are tested with it as processes):
    rclpy's events executor (Jazzy) can still run a callback queued for a timer or a
    subscription after it was removed, and this process lives for the whole session.
    """
    from manip_control.nodes.common import make_executor
    ex = make_executor('single', context=ros_context)
    try:
        yield ex
    finally:
        for n in list(ex.get_nodes()):
            ex.remove_node(n)
        ex.shutdown(timeout_sec=5)


# --------------------------------------------------------------------------------------------
# the real ROS 2 tools: a colcon workspace of this working tree, the `ros2` command

VENV_BIN = Path(sys.executable).parent
NO_ROS2 = ('the ros2 command is not installed: no sourced ROS 2 distribution, and the ROS 2 '
           'Python tools of ../shared/ros2_python are not in this environment (make setup '
           'installs them when that folder exists)')
NO_COLCON = 'colcon is not installed (requirements-core.txt: colcon-core, colcon-ros)'


def which(name: str) -> str | None:
    """Path of the executable ``name``: this Python's environment first, then PATH."""
    exe = VENV_BIN / name
    if exe.is_file() and os.access(exe, os.X_OK):
        return str(exe)
    return shutil.which(name)


class Workspace:
    """A colcon workspace whose ``src/manip_control`` is this working tree."""

    def __init__(self, path: Path, env: dict):
        self.path = path
        #: environment after ``source install/setup.bash`` (+ this session's domain)
        self.env = env
        self.ros2 = which('ros2')

    def run(self, args: list[str], timeout: float = 60.0, **kwargs):
        """Run ``args`` (e.g. ``['ros2', 'param', 'get', ...]``) in the sourced workspace."""
        return subprocess.run(args, env=kwargs.pop('env', self.env), cwd=kwargs.pop(
            'cwd', str(ROOT)), capture_output=True, text=True, timeout=timeout,
            stdin=subprocess.DEVNULL, **kwargs)


@pytest.fixture(scope='session')
def ros2_ws(tmp_path_factory):
    """
    Build this working tree the README's ROS way, once per session.

    ``colcon build --symlink-install`` in a fresh workspace, then ``source
    install/setup.bash``.
    Skips where the ``ros2`` command or colcon is missing; fails if the build fails. The
    ``ros2`` daemon of this session's domain is stopped at the end.
    """
    if which('ros2') is None:
        pytest.skip(NO_ROS2)
    if which('colcon') is None:
        pytest.skip(NO_COLCON)
    ws = tmp_path_factory.mktemp('ros_ws')
    (ws / 'src').mkdir()
    (ws / 'src' / 'manip_control').symlink_to(ROOT, target_is_directory=True)
    env = dict(os.environ)
    env['PATH'] = f'{VENV_BIN}{os.pathsep}{env.get("PATH", "")}'
    env['ROS_LOG_DIR'] = str(ws / 'ros_log')
    script = ('colcon build --symlink-install --event-handlers console_direct- '
              '> colcon_build.log 2>&1 && source install/setup.bash && env -0')
    done = subprocess.run(['bash', '-c', script], cwd=ws, env=env, capture_output=True,
                          timeout=600, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        log = (ws / 'colcon_build.log').read_text(errors='replace')
        pytest.fail(f'colcon build failed ({done.returncode}):\n{log[-4000:]}\n'
                    f'{done.stderr.decode(errors="replace")[-2000:]}')
    sourced = {}
    for item in done.stdout.decode(errors='replace').split('\0'):
        key, sep, value = item.partition('=')
        if sep and key not in ('_', 'PWD', 'OLDPWD', 'SHLVL'):
            sourced[key] = value
    sourced.update(ROS_DOMAIN_ID=str(DOMAIN_ID), PYTHONUNBUFFERED='1',
                   RCUTILS_COLORIZED_OUTPUT='0')
    workspace = Workspace(ws, sourced)
    try:
        yield workspace
    finally:
        subprocess.run([workspace.ros2, 'daemon', 'stop'], env=sourced, capture_output=True,
                       timeout=60, stdin=subprocess.DEVNULL)


@pytest.fixture
def ros2_procs(ros2_ws, tmp_path):
    """Like ``procs``, in the environment of the sourced workspace (``ros2 launch ...``)."""
    manager = Processes(ros2_ws.env, tmp_path)
    try:
        yield manager
    finally:
        manager.stop_all()


@pytest.fixture
def fi(procs, ros_domain_id):
    """``procs, make_probe`` for the fault tests: the process manager and a probe factory."""
    from test_fault_injection import Probe
    probes = []

    def make(topics=('diag', 'cmds')):
        probes.append(Probe(ros_domain_id, topics))
        return probes[-1]

    try:
        yield procs, make
    finally:
        for p in probes:
            p.close()
