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
Configuration refusals through the installed command-line tools and node executables.

Every refusal is one ``error:`` line on stderr naming the parameter, exit code 2, nothing on
stdout (no summary), no traceback: empty or comment-only files, implausible magnitudes,
control rates out of range, durations shorter than one period, mixed-type lists in params
files, YAML 1.2 floats read as numbers, and a diverging (non-finite) plant state.
"""

from pathlib import Path
import sys

from conftest import run_all
import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent

SCENARIO_L1 = """\
plant:
  arm: {m1: 3.0, m2: 2.0, l1: 1.0e9, l2: 1.0, lc1: 0.5, lc2: 0.5, I1: 0.2, I2: 0.1}
  actuator: motor
"""
SCENARIO_SLOW_RATE = 'scenario: {name: slow, duration: 10.0, control_rate: 1.0e-3}\n'
# 100 Hz with 4 RK4 sub-steps: the 2.5 ms step is beyond the stability limit of the default
# motors' current loops (about 1 ms), the state becomes NaN within a few ticks
SCENARIO_DIVERGES = 'scenario: {name: diverges, duration: 1.0, control_rate: 100.0}\n'
PARAMS_MIXED = "/**/plant:\n  ros__parameters:\n    friction.b: [0.5, 'b']\n"
PARAMS_L1 = '/**/plant:\n  ros__parameters:\n    arm.l1: 1.0e9\n'


def _exe(name: str) -> str:
    path = BIN / name
    if not path.exists():
        pytest.fail(f'{path} is not installed (pip install -e . in the venv)')
    return str(path)


def _write_files(directory: Path) -> dict:
    """Write the tests' config files; returns name -> path."""
    texts = {'empty.yaml': '', 'comments.yaml': '# nothing set here\n\n  # indented\n',
             'l1.yaml': SCENARIO_L1, 'slow_rate.yaml': SCENARIO_SLOW_RATE,
             'diverges.yaml': SCENARIO_DIVERGES, 'mixed.yaml': PARAMS_MIXED,
             'params_l1.yaml': PARAMS_L1}
    out = {}
    for name, text in texts.items():
        out[name] = directory / name
        out[name].write_text(text)
    return out


@pytest.fixture
def files(tmp_path):
    """Write the test's config files; returns name -> path."""
    return _write_files(tmp_path)


def _fill(args, files):
    """Replace ``{name.yaml}`` placeholders by the written files' paths."""
    out = []
    for a in args:
        for name, path in files.items():
            a = a.replace('{' + name + '}', str(path))
        out.append(a)
    return out


def _check_refused(code, out, err, expected):
    lines = err.strip().splitlines()
    assert code == 2, (code, out, err)
    assert len(lines) == 1 and lines[0].startswith('error: '), err
    assert expected in lines[0], lines[0]
    assert 'Traceback' not in err and out.strip() == '', out
    return lines[0]


OFFLINE_CASES = [
    (['--config', '{empty.yaml}'], 'empty (no settings'),
    (['--config', '{comments.yaml}'], 'empty (no settings'),
    (['--config', '{l1.yaml}'], 'plant.arm.l1: must be in [0.001, 5] m'),
    (['--config', '{slow_rate.yaml}'], 'scenario.control_rate: must be in [10, 20000] Hz'),
    (['--duration', '0.0004'], '--duration: must be at least one control period (0.001 s'),
    (['--config', '{diverges.yaml}'], 'plant state not finite at t = '),
]
SIM_CASES = [
    (['--config', '{comments.yaml}'], 'empty (no settings'),
    (['--config', '{l1.yaml}'], 'plant.arm.l1: must be in [0.001, 5] m'),
    (['--config', '{slow_rate.yaml}'], 'scenario.control_rate: must be in [10, 20000] Hz'),
    (['--duration', '0.0004'], '--duration: must be at least one control period'),
    (['--config', 'config/sim_params.yaml', '--duration', '0.0004'],
     '--duration: must be at least one control period'),
    (['--config', '{mixed.yaml}'],
     'parameter friction.b (section /**/plant of params file'),
    (['--config', '{params_l1.yaml}'], 'parameter arm.l1 (node plant): must be in [0.001, 5'),
]
NODE_CASES = [
    ('plant', ['--params-file', '{mixed.yaml}'],
     'parameter friction.b (section /**/plant of params file'),
    ('plant', ['--params-file', '{comments.yaml}'], 'empty (no settings'),
    ('plant', ['--params-file', '{params_l1.yaml}'], 'parameter arm.l1 (node plant): must be in'),
    ('plant', ['-p', 'control_rate:=0.001'], 'parameter control_rate (node plant): must be in'),
    ('plant', ['-p', 'duration:=0.0004'],
     'parameter duration (node plant): must be at least one control period'),
    ('controller', ['-p', 'kp:=[1.0e12, 16.0]'], 'parameter kp[0] (node controller): must be in'),
    ('trajectory', ['-p', 'control_rate:=1000000.0'],
     'parameter control_rate (node trajectory): must be in'),
]
CASES = ([(f'offline-{k}', ['manip-offline', *a], e) for k, (a, e) in enumerate(OFFLINE_CASES)]
         + [(f'sim-{k}', ['manip-sim', '--quiet', *a], e) for k, (a, e) in enumerate(SIM_CASES)]
         + [(f'{x}-{k}', [x, '--ros-args', *a], e) for k, (x, a, e) in enumerate(NODE_CASES)])


@pytest.fixture(scope='module')
def refusals(tmp_path_factory):
    """
    Run every refusal case at once (they end by themselves within seconds).

    Returns ``{case id: (exit code, stdout, stderr)}``.
    """
    import os
    files = _write_files(tmp_path_factory.mktemp('configs'))
    env = dict(os.environ, PYTHONUNBUFFERED='1', RCUTILS_COLORIZED_OUTPUT='0')
    commands = {}
    for case, args, _ in CASES:
        args = _fill(args, files)
        commands[case] = [_exe(args[0]), *args[1:]]
    return run_all(commands, env, 180)


@pytest.mark.parametrize('case, expected', [(c, e) for c, _, e in CASES],
                         ids=[c for c, _, _ in CASES])
def test_refused_in_one_line_with_exit_code_2(refusals, case, expected):
    """manip-offline, manip-sim and the node executables: one line naming it, exit 2."""
    _check_refused(*refusals[case], expected)


def test_manip_sim_stops_on_a_non_finite_plant_state(procs, files):
    p = procs.start('sim', [_exe('manip-sim'), '--quiet', '--config',
                            str(files['diverges.yaml'])])
    code = procs.wait(p, 120.0)
    out, err = procs.output(p)
    assert code == 2, (out, err)
    last = err.strip().splitlines()[-1]       # the nodes' own ERROR log lines come before
    assert last.startswith('error: plant state not finite at t = '), err
    assert 'the integration diverged' in last
    assert out.strip() == '' and 'Traceback' not in err, out


def test_plant_node_never_publishes_a_non_finite_state(procs, probe, executor, spin):
    from sensor_msgs.msg import JointState
    probe.sub(JointState, '/joint_states')
    probe.pub(JointState, '/joint_commands')     # the plant starts once both are matched
    executor.add_node(probe.node)
    p = procs.start('plant', [_exe('plant'), '--ros-args', '-p', 'control_rate:=100.0',
                              '-p', 'duration:=5.0', '-p', 'wait_for_subscribers:=1',
                              '-p', 'startup_timeout:=2.0', '-p', 'lockstep_timeout:=0.001'])
    spin(executor, 30.0, until=lambda: p.poll() is not None)
    spin(executor, 0.5)
    code = procs.wait(p, 10.0)
    out, err = procs.output(p)
    assert code == 2, (out, err)
    assert '[plant]: plant state not finite at t = ' in err
    states = probe.msgs['/joint_states']
    assert states, err                   # it ran, then stopped on the bad state
    for msg in states:
        values = list(msg.position) + list(msg.velocity) + list(msg.effort)
        assert all(v == v and abs(v) != float('inf') for v in values), values
