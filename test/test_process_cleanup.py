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

"""A test session ended by SIGTERM (a runner's time limit) stops the processes it started."""

import os
from pathlib import Path
import signal
import subprocess
import sys
import time

from conftest import PYTHON

HERE = Path(__file__).resolve().parent

#: a session of the test process manager: a child in its own session, then wait for SIGTERM
SESSION = """
import os, signal, sys, time
from pathlib import Path
import conftest
signal.signal(signal.SIGTERM, conftest._stop_on_sigterm)
manager = conftest.Processes(dict(os.environ), Path(sys.argv[1]))
child = manager.start('sleeper', [sys.executable, '-c', 'import time; time.sleep(600)'])
Path(sys.argv[1], 'pid').write_text(str(child.pid))
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for this purpose (its parent, the session, may not have reaped it)
    return Path(f'/proc/{pid}/stat').read_text().split(') ')[1][0] != 'Z'


def test_sigterm_stops_the_processes_of_the_session(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(HERE)] + [p for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p]))
    session = subprocess.Popen([PYTHON, '-c', SESSION, str(tmp_path)], env=env,
                               stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        pid_file = tmp_path / 'pid'
        deadline = time.monotonic() + 60.0
        while not pid_file.exists() and time.monotonic() < deadline:
            assert session.poll() is None, 'the session ended before starting its child'
            time.sleep(0.05)
        child = int(pid_file.read_text())
        assert _alive(child)
        session.send_signal(signal.SIGTERM)
        assert session.wait(30) == -signal.SIGTERM          # ended as SIGTERM ends it
        deadline = time.monotonic() + 10.0
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child), 'the child outlived the session'
    finally:
        if session.poll() is None:
            os.killpg(session.pid, signal.SIGKILL)
        if pid_file.exists():
            try:
                os.killpg(int(pid_file.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_the_session_handler_is_installed():
    assert signal.getsignal(signal.SIGTERM).__name__ == '_stop_on_sigterm'
    assert sys.modules['conftest']._LIVE_PROCESSES is not None
