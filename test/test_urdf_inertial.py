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
Bad inertial data in a URDF is refused where the URDF is read, in one line.

Each bad case is one edit of the Panda fixture's ``panda_link3`` (a moving body in the middle
of the chain), run through the core loader, the CLIs that take a URDF and the controller
node: one line naming the link and the field, exit code 2 or a refused start, no traceback.
Every fixture still loads (test_arm_model.py loads each one).
"""

from __future__ import annotations

import os
from pathlib import Path
import re
import subprocess
import sys

from manip_control.arm_model import UrdfArm
from manip_control.arm_model import UrdfError
import pytest

pytest.importorskip('pinocchio')

ROOT = Path(__file__).resolve().parents[1]
URDF_DIR = ROOT.parent / 'shared' / 'fixtures' / 'urdf'
PANDA = URDF_DIR / 'panda.urdf'
if not PANDA.is_file():
    pytest.fail(f'fixture {PANDA} absent (../shared must sit beside the project)',
                pytrace=False)
PANDA_TEXT = PANDA.read_text()
LINK3_INERTIA = ('<inertia ixx="0.037242" ixy="-0.004761" ixz="-0.011396" iyy="0.036155" '
                 'iyz="-0.012805" izz="0.01083"/>')
LINK3_MASS = '<mass value="3.228604"/>'
assert PANDA_TEXT.count(LINK3_INERTIA) == 1 and PANDA_TEXT.count(LINK3_MASS) == 1


def _panda(old: str, new: str) -> str:
    return PANDA_TEXT.replace(old, new)


def _inertia(**fields) -> str:
    values = dict(re.findall(r'(\w+)="([^"]*)"', LINK3_INERTIA))
    values.update(fields)
    attrs = ' '.join(f'{k}="{v}"' for k, v in values.items())
    return _panda(LINK3_INERTIA, f'<inertia {attrs}/>')


#: case -> (URDF text, what the one line must say after 'link panda_link3: ')
CASES = {
    'nan_ixx': (_inertia(ixx='nan'), '<inertia ixx="nan"> is not finite'),
    'inf_iyy': (_inertia(iyy='inf'), '<inertia iyy="inf"> is not finite'),
    'overflow_izz': (_inertia(izz='1e999'), '<inertia izz="1e999"> is not finite'),
    'negative_ixx': (_inertia(ixx='-5'), '<inertia ixx="-5"> is negative'),
    # positive moments, but an off-diagonal term makes one principal moment negative
    'not_psd': (_inertia(ixx='0.1', iyy='0.1', izz='0.1', ixy='0.2', ixz='0', iyz='0'),
                '<inertia> is not positive semi-definite (principal moments -0.1, 0.1, 0.3'),
    'triangle': (_inertia(ixx='0.01', iyy='0.01', izz='0.05', ixy='0', ixz='0', iyz='0'),
                 '<inertia izz="0.05"> is more than ixx + iyy (triangle inequality'),
    'triangle_rotated': (_inertia(ixx='0.03', iyy='0.03', izz='0.01', ixy='0.025', ixz='0',
                                  iyz='0'),
                         '<inertia> principal moments 0.005, 0.01, 0.055 kg m^2 break the '
                         'triangle inequality'),
    'zero_mass': (_panda(LINK3_MASS, '<mass value="0"/>'),
                  '<mass value="0"> with a non-zero <inertia>'),
    'negative_mass': (_panda(LINK3_MASS, '<mass value="-1.2"/>'),
                      '<mass value="-1.2"> is negative'),
    'nan_mass': (_panda(LINK3_MASS, '<mass value="NaN"/>'), '<mass value="NaN"> is not finite'),
    'typo_ixx': (_inertia(ixx='0.0372o2'), '<inertia ixx="0.0372o2"> is not a number'),
    'missing_izz': (_panda(' izz="0.01083"/>', '/>'), '<inertia> has no izz'),
    'nan_origin': (_panda('xyz="2.7518e-02 3.9252e-02 -6.6502e-02"',
                          'xyz="2.7518e-02 nan -6.6502e-02"'),
                   '<inertial>: <origin xyz="2.7518e-02 nan -6.6502e-02"> is not finite'),
}


def test_cases_edit_the_fixture():
    for name, (text, _) in CASES.items():
        assert text != PANDA_TEXT, name


def test_zero_mass_and_zero_inertia_on_a_moving_body_is_refused():
    both = _panda(LINK3_MASS, '<mass value="0"/>').replace(
        LINK3_INERTIA, '<inertia ixx="0" ixy="0" ixz="0" iyy="0" iyz="0" izz="0"/>')
    with pytest.raises(UrdfError) as info:
        UrdfArm.from_string(both)
    assert str(info.value) == ('robot_description: link panda_link3: <mass> must be > 0: '
                               'joint panda_joint3 moves it and neither it has mass')
    # a link without <inertial> that a joint moves, with a massless frame fixed to it
    text = """<robot name="r"><link name="base"/><link name="l1"/><link name="tip">
      <inertial><mass value="0"/><inertia ixx="0" ixy="0" ixz="0" iyy="0" iyz="0" izz="0"/>
      </inertial></link>
      <joint name="j1" type="revolute"><parent link="base"/><child link="l1"/>
        <limit effort="1" velocity="1"/></joint>
      <joint name="f" type="fixed"><parent link="l1"/><child link="tip"/></joint></robot>"""
    with pytest.raises(UrdfError, match=r'^robot_description: link l1: <mass> must be > 0: '
                                        r'joint j1 moves it and neither it nor the links '
                                        r'fixed to it \(tip\) has mass$'):
        UrdfArm.from_string(text)


def test_massless_frames_fixed_to_a_body_with_mass_are_accepted():
    """tool0-like frames (no <inertial>, or mass 0 and zero inertia) carry nothing."""
    text = """<robot name="r"><link name="base"/><link name="frame"/><link name="l1">
      <inertial><mass value="1"/><origin xyz="0.5 0 0"/>
        <inertia ixx="0.01" ixy="0" ixz="0" iyy="0.1" iyz="0" izz="0.1"/></inertial></link>
      <link name="tool0"><inertial><mass value="0"/>
        <inertia ixx="0" ixy="0" ixz="0" iyy="0" iyz="0" izz="0"/></inertial></link>
      <joint name="j1" type="revolute"><parent link="base"/><child link="frame"/>
        <axis xyz="0 1 0"/><limit effort="1" velocity="1"/></joint>
      <joint name="f1" type="fixed"><parent link="frame"/><child link="l1"/></joint>
      <joint name="f2" type="fixed"><parent link="l1"/><child link="tool0"/></joint></robot>"""
    arm = UrdfArm.from_string(text)
    assert arm.mass_matrix([0.0])[0, 0] == pytest.approx(0.1 + 0.25, rel=1e-12)
    # the triangle inequality holds with equality for a thin rod; rounding is tolerated
    rod = text.replace('ixx="0.01" ixy="0" ixz="0" iyy="0.1" iyz="0" izz="0.1"',
                       'ixx="0" ixy="0" ixz="0" iyy="0.1" iyz="0" izz="0.10000001"')
    assert UrdfArm.from_string(rod).n == 1


@pytest.mark.parametrize('case', sorted(CASES))
def test_core_loader_refuses_in_one_line(case):
    text, what = CASES[case]
    with pytest.raises(UrdfError) as info:
        UrdfArm.from_string(text, source='panda.urdf')
    message = str(info.value)
    assert '\n' not in message
    assert message.startswith(f'panda.urdf: link panda_link3: {what}'), message


def _run(module: str, *args, cwd=None):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, '-m', module, *args], capture_output=True, text=True,
                          timeout=300, env=env, cwd=cwd)


@pytest.fixture(scope='module')
def bad_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp('bad_urdf')
    files = {}
    for case, (text, _) in CASES.items():
        files[case] = folder / f'{case}.urdf'
        files[case].write_text(text)
    return files


@pytest.fixture(scope='module')
def panda_bag(tmp_path_factory):
    """Record a short Panda run (manip-offline --bag) for manip-analyze."""
    from manip_control import offline
    bag = tmp_path_factory.mktemp('panda_bag') / 'bag'
    assert offline.main(['--urdf', str(PANDA), '--duration', '0.05', '--actuator', 'ideal',
                         '--bag', str(bag)]) == 0
    return bag


def _cli(name: str, path: Path, tmp_path: Path, bag: Path) -> int:
    """Run a CLI's main in this process with the URDF ``path``; return its exit code."""
    if name == 'manip-offline':
        from manip_control import offline
        return offline.main(['--urdf', str(path), '--duration', '0.1'])
    if name == 'manip-identify':
        from manip_control import identification
        return identification.main([str(bag), '--urdf', str(path), '--out',
                                    str(tmp_path / 'out.urdf')])
    if name == 'manip-analyze':
        from manip_control import bag_analysis
        return bag_analysis.main([str(bag), '--urdf', str(path), '--no-plots', '--out',
                                  str(tmp_path / 'report')])
    pytest.importorskip('rclpy')
    from manip_control.nodes import sim
    code, outcome = sim.run(['--urdf', str(path), '--duration', '0.1', '--quiet'])
    assert outcome is None                      # refused before any node was made
    return code


@pytest.mark.parametrize('cli', ['manip-offline', 'manip-identify', 'manip-analyze',
                                 'manip-sim'])
@pytest.mark.parametrize('case', sorted(CASES))
def test_clis_refuse_in_one_line(case, cli, bad_files, panda_bag, tmp_path, capsys):
    path = bad_files[case]
    assert _cli(cli, path, tmp_path, panda_bag) == 2
    captured = capsys.readouterr()
    assert 'Traceback' not in captured.err
    errors = [ln for ln in captured.err.splitlines() if ln.strip()]
    assert len(errors) == 1 and errors[0].startswith('error: '), captured.err
    assert f'{path}: link panda_link3: {CASES[case][1]}' in errors[0], errors[0]
    assert not (tmp_path / 'out.urdf').exists() and not (tmp_path / 'report').exists()


def test_offline_process_refuses_without_traceback(bad_files):
    p = _run('manip_control.offline', '--urdf', str(bad_files['nan_ixx']), '--duration', '0.1')
    assert p.returncode == 2 and 'Traceback' not in p.stderr and p.stdout == ''
    assert p.stderr.strip().splitlines() == [
        f'error: {bad_files["nan_ixx"]}: link panda_link3: <inertia ixx="nan"> is not finite']


@pytest.mark.parametrize('case', ['nan_ixx', 'negative_ixx', 'zero_mass', 'negative_mass'])
def test_controller_node_refuses_the_description(case, ros_context):
    """The node's start fails on the URDF, not later on a parameter derived from it."""
    pytest.importorskip('rclpy')
    from conftest import make_node
    from manip_control.nodes.controller_node import ControllerNode
    from manip_control.nodes.ros_params import controller_specs
    from manip_control.parameters import ParameterError
    with pytest.raises(ParameterError) as info:
        make_node(ControllerNode, ros_context, controller_specs(),
                  {'robot_description': CASES[case][0]})
    message = str(info.value)
    assert '\n' not in message
    assert message.startswith('parameter robot_description (node controller): '
                              f'robot_description: link panda_link3: {CASES[case][1]}'), message


def test_controller_process_exits_2_without_publishing(bad_files, tmp_path):
    """``ros2 run manip_control controller`` with a bad description: one line, exit 2."""
    pytest.importorskip('rclpy')
    import yaml
    params = tmp_path / 'params.yaml'
    params.write_text(yaml.safe_dump({'controller': {'ros__parameters': {
        'robot_description': CASES['nan_ixx'][0], 'mode': 'realtime'}}}))
    p = _run('manip_control.nodes.controller_node', '--ros-args', '--params-file', str(params))
    assert p.returncode == 2, p.stderr[-2000:]
    assert 'Traceback' not in p.stderr
    lines = [ln for ln in p.stderr.splitlines() if 'panda_link3' in ln]
    assert len(lines) == 1 and '<inertia ixx="nan"> is not finite' in lines[0], p.stderr
