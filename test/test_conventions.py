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

"""Repository conventions that no linter checks: code and docs describe themselves."""

from pathlib import Path
import re
import subprocess

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: A reference to the issue tracker: the word issue followed by a number (space, #, - or _).
ISSUE_REFERENCE = re.compile(r'\bissues?[ _#-]*\d+', re.IGNORECASE)


def _tracked_text_files() -> list[Path]:
    try:
        out = subprocess.run(['git', 'ls-files'], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip('not a git checkout: the tracked files are unknown')
    suffixes = {'.py', '.md', '.yaml', '.xml', '.cfg', '.txt', '.urdf', '.rviz'}
    return [ROOT / name for name in out.split()
            if Path(name).suffix in suffixes or Path(name).name in {'Makefile', 'run'}]


def test_no_issue_numbers_in_code_docs_or_test_names():
    hits = []
    for path in _tracked_text_files():
        if not path.is_file():
            continue
        for number, line in enumerate(path.read_text(errors='replace').splitlines(), 1):
            if ISSUE_REFERENCE.search(line):
                hits.append(f'{path.relative_to(ROOT)}:{number}: {line.strip()}')
    assert not hits, 'issue numbers (say what the code does instead):\n' + '\n'.join(hits)
