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

The domain id is derived from the pytest process id (1..100, never 0) and put into
``os.environ`` at import, before any rclpy.init in this process; every subprocess started
through :class:`Processes` inherits it. DDS discovery is kept on this host
(``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST``) unless the caller set it.

``ros_context`` gives each test its own initialised rclpy Context (nodes take
``context=ctx``); ``procs`` starts processes in their own process groups and always stops
them (SIGINT, then SIGKILL) at the end of the test, pass or fail.
"""

from __future__ import annotations

import os
from pathlib import Path
import signal
import subprocess
import sys
import time

import pytest

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable

DOMAIN_ID = 1 + os.getpid() % 100
os.environ['ROS_DOMAIN_ID'] = str(DOMAIN_ID)
os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
# Node processes started by the tests pick UDPv4 like the node executables do (see
# manip_control.nodes.common.prefer_udp_transport); the test process itself too.
os.environ.setdefault('FASTDDS_BUILTIN_TRANSPORTS', 'UDPv4')


@pytest.fixture(scope='session')
def ros_domain_id() -> int:
    """The ROS_DOMAIN_ID of this test session (also in os.environ)."""
    return DOMAIN_ID


@pytest.fixture
def ros_env() -> dict:
    """Environment for subprocesses: this session's domain, unbuffered Python output."""
    env = dict(os.environ)
    env['ROS_DOMAIN_ID'] = str(DOMAIN_ID)
    env['PYTHONUNBUFFERED'] = '1'
    env['RCUTILS_COLORIZED_OUTPUT'] = '0'
    env.setdefault('PYTHONPATH', str(ROOT))
    return env


@pytest.fixture
def ros_context():
    """A fresh initialised rclpy Context for one test, shut down afterwards."""
    rclpy = pytest.importorskip('rclpy')
    ctx = rclpy.Context()
    rclpy.init(context=ctx, domain_id=DOMAIN_ID)
    try:
        yield ctx
    finally:
        rclpy.try_shutdown(context=ctx)


class Processes:
    """Processes of one test, each in its own process group; :meth:`stop_all` always runs."""

    def __init__(self, env: dict, log_dir: Path):
        self.env = env
        self.log_dir = log_dir
        self.items: list[subprocess.Popen] = []

    def start(self, name: str, args: list[str], **kwargs) -> subprocess.Popen:
        """Start ``args`` (a list) with stdout/stderr to ``<log_dir>/<name>.out|err``."""
        out = open(self.log_dir / f'{name}.out', 'w')
        err = open(self.log_dir / f'{name}.err', 'w')
        p = subprocess.Popen(args, env=kwargs.pop('env', self.env), cwd=str(ROOT), stdout=out,
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
        """Exit code of ``p`` (killed and failed if it does not end within ``timeout``)."""
        try:
            return p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.stop(p)
            out, err = self.output(p)
            pytest.fail(f'{p.name} did not end within {timeout} s\n{out}\n{err}')

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
        for p in reversed(self.items):
            try:
                self.stop(p)
            finally:
                for f in p._files:
                    f.close()


@pytest.fixture
def procs(ros_env, tmp_path):
    """Start processes in a test; they are always stopped afterwards."""
    manager = Processes(ros_env, tmp_path)
    try:
        yield manager
    finally:
        manager.stop_all()


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
    """``spin(executor, seconds, until=None)``: see :func:`spin_for`."""
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


@pytest.fixture
def probe(ros_context):
    """A :class:`Probe` node in this test's context."""
    p = Probe(ros_context)
    try:
        yield p
    finally:
        p.destroy()


def make_node(cls, ctx, node_specs, values: dict, **kwargs):
    """Build one of the package's nodes in ``ctx`` with parameter values."""
    from manip_control.nodes.ros_params import parameter_overrides
    return cls(context=ctx, parameter_overrides=parameter_overrides(node_specs, values),
               **kwargs)


@pytest.fixture
def executor(ros_context):
    """An EventsExecutor of this test's context (nodes added by the test)."""
    from manip_control.nodes.common import make_executor
    ex = make_executor('events', context=ros_context)
    try:
        yield ex
    finally:
        for n in list(ex.get_nodes()):
            ex.remove_node(n)
        ex.shutdown()
