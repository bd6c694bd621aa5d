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
Record an excitation of a URDF arm and identify it from the command line (no Python).

The commands of docs/identification.md "From the command line" are run as written; the
identified base parameters are compared with the true ones, computed here from the fixture's
own numbers (its bodies, its ``<dynamics damping>``, no armature with ideal actuators).
"""

from __future__ import annotations

from pathlib import Path
import shlex
import xml.etree.ElementTree as ET

import numpy as np
import pytest
import yaml

pytest.importorskip('pinocchio')

from manip_control import arm_identification as ai  # noqa: E402, I100
from manip_control import identification  # noqa: E402
from manip_control import offline  # noqa: E402
from manip_control.arm_model import UrdfArm  # noqa: E402
from manip_control.bag_io import BagReader  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / 'shared'
PANDA = SHARED / 'fixtures' / 'urdf' / 'panda.urdf'
if not PANDA.is_file():
    pytest.fail(f'fixture {PANDA} absent (../shared must sit beside the project)',
                pytrace=False)


def _documented_commands() -> list[list[str]]:
    text = (ROOT / 'docs' / 'identification.md').read_text()
    section = text[text.index('### From the command line: record an excitation'):]
    start = section.index('```bash') + 7
    block = section[start:section.index('```', start)]
    lines = [ln.strip() for ln in block.strip().splitlines() if ln.strip()]
    return [[a.replace('../shared', str(SHARED)) for a in shlex.split(ln)] for ln in lines]


def test_documented_command_line_workflow(tmp_path, monkeypatch, capsys):
    commands = _documented_commands()
    assert [c[0] for c in commands] == ['manip-offline', 'manip-identify']
    assert '--excitation' in commands[0]
    monkeypatch.chdir(tmp_path)
    runners = {'manip-offline': offline.main, 'manip-identify': identification.main}
    for argv in commands:
        assert runners[argv[0]](argv[1:]) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    assert 'reference: the identification excitation' in out
    assert 'wrote runs/panda_exc/identified.urdf' in out
    # the bag holds the excitation: 10 s at 1 kHz, every joint moving
    with BagReader(tmp_path / 'runs' / 'panda_exc') as reader:
        stamps, _ = reader.read_raw(['/joint_states'])['/joint_states']
    assert len(stamps) == 10000
    # the true parameters: the fixture's bodies, its <dynamics damping>, no armature
    fitted = yaml.safe_load((tmp_path / 'runs' / 'panda_exc' / 'identified.yaml').read_text())
    arm = UrdfArm.from_file(PANDA, fitted['joints'])
    joints = {j.get('name'): j for j in ET.parse(PANDA).getroot().findall('joint')}
    damping = [float(joints[name].find('dynamics').get('damping')) for name in arm.joint_names]
    assert damping == [0.003] * 7
    reg = ai.ArmRegressor(arm, eps=fitted['friction']['eps'])
    base = ai.base_parameters(reg)
    truth = base.of(reg.parameters(fv=damping, fc=0.0))
    assert [b['name'] for b in fitted['base_parameters']] == list(base.names)
    estimate = np.array([b['estimate'] for b in fitted['base_parameters']])
    # measured 5.6e-6 and, per parameter above 1e-3 of the largest, at most 6.3e-4: clean
    # data leave only the filter and the integration; the nominal prior is 0 % off, so the
    # base estimates come from the data alone (least squares, no prior)
    assert np.linalg.norm(estimate - truth) / np.linalg.norm(truth) < 1e-4
    big = np.abs(truth) > 1e-3 * np.abs(truth).max()
    assert big.sum() >= 25
    assert np.max(np.abs(estimate - truth)[big] / np.abs(truth[big])) < 5e-3
    assert np.max(np.abs(estimate - truth)[~big]) < 1e-3 * np.abs(truth).max()


def test_excitation_stays_inside_the_limits_and_starts_at_rest():
    from manip_control.arm_scenario import EXCITATION
    from manip_control.arm_scenario import excitation_reference
    arm = UrdfArm.from_file(PANDA)
    exc = excitation_reference(arm)
    t = np.linspace(0.0, EXCITATION['period'], 2001)
    q, qd, qdd = exc.trajectory.sample_many(t)
    lim = arm.limits
    margin = EXCITATION['position_margin'] * (lim.upper - lim.lower)
    assert np.all(q >= lim.lower + margin - 1e-12) and np.all(q <= lim.upper - margin + 1e-12)
    assert np.all(np.abs(qd) <= 0.5 * lim.velocity + 1e-12)
    assert np.all(np.abs(qdd) <= EXCITATION['acceleration_limit'] + 1e-12)
    np.testing.assert_allclose(qd[0], 0.0, atol=1e-12)
    np.testing.assert_allclose(qdd[0], 0.0, atol=1e-9)
    assert np.all(np.ptp(q, axis=0) > 0.05)               # every joint moves


@pytest.mark.parametrize('args, pattern', [
    (['--excitation'], 'error: --excitation needs --urdf FILE'),
    (['--urdf', str(SHARED / 'fixtures' / 'urdf' / 'double_pendulum.urdf'), '--actuator',
      'ideal', '--excitation'], 'error: excitation: joint1 has no velocity limit'),
])
def test_excitation_refusals_are_one_line(args, pattern, capsys):
    assert offline.main(args) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(pattern), captured.err
