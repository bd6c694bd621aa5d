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
Watch a pytest process from outside; write its native stacks if a test hangs.

``python hang_watchdog.py PID HEARTBEAT SECONDS``: while process PID lives, when the file
HEARTBEAT (touched by the test session as each test starts) is older than SECONDS, every
thread's native stack of PID is written to stderr with gdb (when installed), once per
heartbeat. A deadlock inside a C extension that holds the GIL stops every Python-level
watchdog (pytest-timeout's thread among them); these stacks show where it is. The Python
stacks and the end of the run come from faulthandler in the test session itself.
"""

import os
from pathlib import Path
import re
import shutil
import subprocess
import sys
import time


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


#: frames of the interpreter itself (its eval loop and object calls): left out of the dump
_CPYTHON = re.compile(r' at (\./)?(Python|Objects|Include|Modules|Parser)/')


def _native_frames(gdb_output: str) -> str:
    """Keep each thread's header and its frames outside the interpreter (the innermost kept)."""
    lines = []
    for line in gdb_output.splitlines():
        if line.startswith('Thread '):
            lines.append(line)
        elif line.startswith('#') and (line.startswith('#0 ') or not _CPYTHON.search(line)):
            lines.append('  ' + line[:300])
    return '\n'.join(lines) + '\n'


def main(argv: list[str]) -> int:
    pid, heartbeat, limit = int(argv[1]), Path(argv[2]), float(argv[3])
    dumped_for = None
    while _alive(pid) and os.getppid() == pid:
        time.sleep(5.0)
        try:
            beat = heartbeat.stat().st_mtime
        except FileNotFoundError:
            continue
        if time.time() - beat < limit or dumped_for == beat:
            continue
        dumped_for = beat
        gdb = shutil.which('gdb')
        sys.stderr.write(f'\n+++ hang watchdog: no test has started for {limit:g} s; native '
                         f'stacks of pid {pid} follow +++\n')
        if gdb is None:
            sys.stderr.write('(gdb is not installed: no native stacks)\n')
        else:
            try:
                out = subprocess.run([gdb, '-p', str(pid), '-batch', '-ex',
                                      'thread apply all bt'], capture_output=True, text=True,
                                     timeout=120).stdout
            except subprocess.TimeoutExpired:
                out = '(gdb did not finish within 120 s)\n'
            sys.stderr.write(_native_frames(out))
        sys.stderr.flush()
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
