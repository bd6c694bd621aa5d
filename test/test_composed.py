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
The ``composed`` executable: the nodes of sim.launch.py in one process, as a process.

Through ``python -m manip_control.nodes.composed`` (no ament index needed); the launch file's
``composed:=true`` runs it through the real ``ros2 launch`` in test_launch_integration.py.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
import sys

from conftest import PYTHON, ROOT, run_all
from manip_control.nodes.composed import split_node_arguments
from manip_control.parameters import ParameterError
import pytest

PARAMS = str(ROOT / 'config' / 'sim_params.yaml')
MODULE = [PYTHON, '-m', 'manip_control.nodes.composed']


def test_node_rules_go_to_their_node_only():
    argv = ['composed', '--ros-args', '--params-file', 'f.yaml', '-p', 'use_sim_time:=true',
            '-p', 'plant:duration:=3.0', '--param', "recorder:bag:='x'", '-r', '__ns:=/arm',
            '-r', 'plant:joint_states:=js', '-p', 'controller:kp:=[1.0, 2.0]']
    rest, own = split_node_arguments(argv)
    assert rest == ['composed', '--ros-args', '--params-file', 'f.yaml', '-p',
                    'use_sim_time:=true', '-r', '__ns:=/arm', '-r', 'plant:joint_states:=js']
    assert own == {'plant': ['--ros-args', '-p', 'duration:=3.0'],
                   'recorder': ['--ros-args', '-p', "bag:='x'"],
                   'controller': ['--ros-args', '-p', 'kp:=[1.0, 2.0]']}
    # outside --ros-args nothing is touched
    assert split_node_arguments(['composed', '-p', 'plant:x:=1']) == (
        ['composed', '-p', 'plant:x:=1'], {})


@pytest.mark.parametrize('argv, words', [
    (['-p', 'arm:duration:=1.0'], ("no node 'arm'", 'plant, controller')),
    (['-r', 'driver:joint_states:=js'], ("no node 'driver'",)),
    (['-r', '__node:=sim'], ('every node', 'plant:__node:=')),
])
def test_rules_that_cannot_apply_are_refused(argv, words):
    with pytest.raises(ParameterError) as err:
        split_node_arguments(['composed', '--ros-args', *argv])
    for w in words:
        assert w in str(err.value), err.value


@pytest.fixture(scope='module')
def refusals(tmp_path_factory):
    """Bad command lines, run at once: {key: (exit code, stdout, stderr)}."""
    import os
    tmp = tmp_path_factory.mktemp('composed_refusals')
    full = tmp / 'full'
    full.mkdir()
    (full / 'x').write_text('x')
    env = dict(os.environ, PYTHONUNBUFFERED='1', PYTHONPATH=str(ROOT))
    base = MODULE + ['--ros-args', '--params-file', PARAMS, '-p', 'use_sim_time:=true']
    return run_all({
        'foreign node': base + ['-p', 'arm:duration:=1.0'],
        'rename all': base + ['-r', '__node:=sim'],
        'bad value': base + ['-p', 'plant:arm.m1:=-1.0'],
        'wrong node': base + ['-p', 'trajectory:duration:=1.0'],
        'bag not empty': base + ['-p', f'recorder:bag:={full}'],
    }, env, 120)


@pytest.mark.parametrize('key, words', [
    ('foreign node', ("no node 'arm'",)),
    ('rename all', ('__node:=sim',)),
    ('bad value', ('arm.m1', 'plant')),
    ('wrong node', ('duration', 'trajectory', 'unknown parameter')),
    ('bag not empty', ('cannot create bag',)),
])
def test_bad_configuration_is_one_line(refusals, key, words):
    code, out, err = refusals[key]
    assert code == 2, (key, code, out, err)
    lines = [ln for ln in err.strip().splitlines() if ln.startswith('error:')]
    assert len(lines) == 1, err
    for w in words:
        assert w in lines[0], lines[0]
    assert 'Traceback' not in err, err


def _bag_counts(path: Path) -> Counter:
    from rosbags.highlevel import AnyReader
    from rosbags.typesys import get_typestore
    from rosbags.typesys import Stores
    counts: Counter = Counter()
    with AnyReader([path], default_typestore=get_typestore(Stores.ROS2_JAZZY)) as reader:
        for conn, _, _ in reader.messages():
            counts[conn.topic] += 1
    return counts


def test_composed_run_under_a_namespace_with_node_parameters(procs, tmp_path):
    """
    Node-prefixed parameters reach their node under a namespace; every tick is recorded.

    ``-p plant:duration:=1.0`` would stop the controller and trajectory as an unknown
    parameter if it reached them; rcl alone would not apply it to /ns/plant. The recorder
    records the loop's topics as the nodes resolve them (``/ns/...``) without ``topics``.
    """
    bag = tmp_path / 'bag'
    p = procs.start('composed', MODULE + [
        '--ros-args', '--params-file', PARAMS, '-p', 'use_sim_time:=true',
        '-p', 'plant:duration:=1.0', '-p', f'recorder:bag:={bag}', '-r', '__ns:=/ns'])
    rc = procs.wait(p, 180)
    out, err = procs.output(p)
    assert rc == 0, err[-4000:]
    assert 'Traceback' not in err and '[ERROR]' not in err, err
    assert 'run finished: 1000 ticks, 0 command timeouts' in err, err
    assert 'recorder in one process: 1000 ticks' in err, err
    counts = _bag_counts(bag)
    assert all(t.startswith('/ns/') for t in counts), counts
    for topic in ('joint_states', 'motor_states', 'reference', 'joint_commands',
                  'effort_controller/commands'):
        assert counts[f'/ns/{topic}'] >= 1000, counts
    assert counts['/ns/motor_states'] == 1000, counts
    assert counts['/ns/plant/diagnostics'] > 0 and counts['/ns/controller/diagnostics'] > 0


def test_help_starts_nothing():
    import subprocess
    import os
    done = subprocess.run(MODULE + ['--help'], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, ROS_DOMAIN_ID='notanumber'), cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith('usage: composed'), done.stdout
    assert 'NODE:NAME:=VALUE' in done.stdout


if __name__ == '__main__':
    sys.exit(pytest.main([__file__, '-q']))
