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
The outputs README.md shows are what its commands print today.

README.md shows the lesson of ``manip-offline --config default`` and the per-joint table of
``manip-offline --urdf ../shared/fixtures/urdf/panda.urdf`` (the 7-joint example). Both runs
are deterministic; each is run here as README.md writes it (from the repository root, so the
relative URDF path is the one printed) and every line of the shown block, except a ``...``
line, must be a line of the output. A change that moves a figure makes README.md say so.
"""

from pathlib import Path
import re

from manip_control.offline import main as offline_main
import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / 'README.md'
PANDA = '../shared/fixtures/urdf/panda.urdf'        # as README.md writes it


def _blocks(text: str) -> list[list[str]]:
    """Return the fenced code blocks of ``text``, each as its lines."""
    return [block.splitlines() for block in re.findall(r'^```[^\n]*\n(.*?)^```', text,
                                                       re.M | re.S)]


def _shown(first: str) -> list[str]:
    """Return the README block whose first line starts with ``first`` (exactly one)."""
    found = [b for b in _blocks(README.read_text(encoding='utf-8')) if b and
             b[0].startswith(first)]
    assert len(found) == 1, f'README.md: {len(found)} blocks start with {first!r}'
    return [line for line in found[0] if line.strip() != '...']


def _printed(capsys, monkeypatch, argv: list[str]) -> list[str]:
    monkeypatch.chdir(ROOT)
    assert offline_main(argv) == 0
    return capsys.readouterr().out.splitlines()


def _missing(shown: list[str], printed: list[str]) -> list[str]:
    return [line for line in shown if line.rstrip() not in {p.rstrip() for p in printed}]


def test_readme_lesson_is_what_manip_offline_default_prints(capsys, monkeypatch):
    text = README.read_text(encoding='utf-8')
    assert 'manip-offline --config default' in text
    shown = _shown('lesson:')
    assert len(shown) >= 7, shown
    missing = _missing(shown, _printed(capsys, monkeypatch, ['--config', 'default']))
    assert not missing, f'README.md shows lines manip-offline --config default no longer ' \
                        f'prints: {missing}'


def test_readme_seven_joint_example_is_what_manip_offline_urdf_prints(capsys, monkeypatch):
    if not (ROOT / PANDA).is_file():
        pytest.skip(f'{PANDA} is absent (the shared fixtures beside the tree)')
    text = README.read_text(encoding='utf-8')
    assert f'\n.venv/bin/manip-offline --urdf {PANDA}\n' in text
    shown = _shown(f'{PANDA}: 7 joints')
    assert sum(line.lstrip().startswith('panda_joint') for line in shown) == 7, shown
    missing = _missing(shown, _printed(capsys, monkeypatch, ['--urdf', PANDA]))
    assert not missing, f'README.md shows lines manip-offline --urdf {PANDA} no longer ' \
                        f'prints: {missing}'
