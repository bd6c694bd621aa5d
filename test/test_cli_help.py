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
``--help`` and ``-h`` of every console script of setup.py, through the installed executables.

Each must print its usage and parameters and exit 0 without starting anything. The
processes run with ``ROS_DOMAIN_ID=notanumber``: any ``rclpy.init`` (so any node or DDS
participant) would fail with "failed to initialize rcl" and a non-zero exit code.
"""

from pathlib import Path
import re
import sys

from conftest import run_all
import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def console_scripts() -> dict[str, str]:
    """``{name: 'module:function'}`` of setup.py's console_scripts entry points."""
    text = (ROOT / 'setup.py').read_text()
    block = text[text.index("'console_scripts'"):]
    block = block[:block.index(']')]
    return dict(re.findall(r"'([\w.-]+)\s*=\s*([\w.]+:\w+)'", block))


SCRIPTS = console_scripts()
NODE_EXECUTABLES = ('plant', 'controller', 'trajectory', 'recorder')


def test_setup_py_lists_the_known_executables():
    for name in ('plant', 'controller', 'trajectory', 'recorder', 'sim', 'manip-sim',
                 'manip-offline', 'manip-analyze', 'manip-identify', 'manip-urdf',
                 'manip-robustness'):
        assert name in SCRIPTS, name


@pytest.fixture(scope='module')
def help_outputs(tmp_path_factory):
    """
    Run every script with --help and -h at once.

    Returns ``{(name, flag): (exit code, stdout, stderr)}``.
    """
    import os
    env = dict(os.environ, ROS_DOMAIN_ID='notanumber', PYTHONUNBUFFERED='1')
    missing = [n for n in SCRIPTS if not (BIN / n).exists()]
    assert not missing, f'not installed in {BIN} (pip install -e .): {missing}'
    return run_all({(name, flag): [BIN / name, flag]
                    for name in SCRIPTS for flag in ('--help', '-h')}, env, 120)


@pytest.mark.parametrize('flag', ['--help', '-h'])
@pytest.mark.parametrize('name', sorted(SCRIPTS))
def test_every_executable_answers_help_without_starting(help_outputs, name, flag):
    code, out, err = help_outputs[(name, flag)]
    assert code == 0, (name, flag, code, err[-2000:])
    assert out.strip().startswith('usage:'), out[:300]
    assert len(out.strip().splitlines()) >= 3
    assert 'rcl' not in err and 'Traceback' not in err, err


@pytest.mark.parametrize('name', NODE_EXECUTABLES)
def test_node_help_lists_every_declared_parameter(help_outputs, name):
    from manip_control.nodes import ros_params as rp
    out = help_outputs[(name, '--help')][1]
    names = rp.node_parameter_names(name)
    assert names
    for pname in names:
        assert re.search(rf'^  {re.escape(pname)} \((bool|integer|double|string|double array|'
                         rf'string array), default .*\)$', out, re.M), (name, pname)
    assert out == help_outputs[(name, '-h')][1]
