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
Static checks of the launch files, which need neither ROS nor the launch libraries.

Every executable, parameter file and launch argument a launch file names must exist: the
files are parsed with ``ast``. What the launch files do when they run -- with the real
``ros2 launch`` on a colcon install of this tree -- is tested in test_launch_integration.py.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
import xml.etree.ElementTree as ET

from manip_control.nodes import ros_params as rp
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
LAUNCH_FILES = [ROOT / 'launch' / 'sim.launch.py', ROOT / 'launch' / 'hardware.launch.py']
ALLOWED_ACTIONS = {'DeclareLaunchArgument', 'Node', 'RegisterEventHandler'}
OUR_TOPICS = {'plant': {'joint_states', 'motor_states', 'joint_commands',
                        'effort_controller/commands'},
              'controller': {'joint_states', 'reference', 'joint_commands',
                             'effort_controller/commands'},
              'trajectory': {'reference'},
              'joint_state_broadcaster': {'joint_states', 'effort_controller/commands'}}


def _call_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call):
        f = node.func
        return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) \
            else None
    return None


def _const(node):
    return node.value if isinstance(node, ast.Constant) else None


def _kw(call: ast.Call, name: str):
    for k in call.keywords:
        if k.arg == name:
            return k.value
    return None


def _console_scripts() -> dict[str, str]:
    tree = ast.parse((ROOT / 'setup.py').read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values):
                if _const(k) == 'console_scripts':
                    out = {}
                    for item in v.elts:
                        name, _, target = _const(item).partition('=')
                        out[name.strip()] = target.strip()
                    return out
    raise AssertionError('no console_scripts in setup.py')


def _installed_share_dirs() -> set[str]:
    text = (ROOT / 'setup.py').read_text()
    return {d for d in ('config', 'launch', 'urdf', 'rviz') if f"glob('{d}/" in text}


def _exec_depends() -> set[str]:
    root = ET.parse(ROOT / 'package.xml').getroot()
    return {e.text for e in root.iter('exec_depend')}


def _node_parameter_names(node: str) -> set[str]:
    names = rp.node_parameter_names(node) | {'use_sim_time'}
    if node == 'joint_state_broadcaster':      # the MuJoCo driver (hardware.launch.py)
        from manip_control.nodes.mujoco_driver_node import driver_specs
        names |= {s.name for s in driver_specs()}
    if node == 'controller':
        try:
            from manip_control.nodes.controller_safety import safety_specs
            names |= {s.name for s in safety_specs()}
        except ImportError:
            pass
    return names


@pytest.fixture(params=LAUNCH_FILES, ids=lambda p: p.name)
def launch_file(request):
    return request.param


def _ld_elements(path: Path) -> list[ast.Call]:
    tree = ast.parse(path.read_text())
    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef)
             and n.name == 'generate_launch_description']
    assert len(funcs) == 1, 'generate_launch_description missing'
    returns = [n for n in ast.walk(funcs[0]) if isinstance(n, ast.Return)]
    assert len(returns) == 1
    call = returns[0].value
    assert _call_name(call) == 'LaunchDescription' and len(call.args) == 1
    assert isinstance(call.args[0], ast.List), 'one flat LaunchDescription([...])'
    # an action built before the list (to be referenced by an event handler) is resolved
    assigned = {t.id: n.value for n in funcs[0].body if isinstance(n, ast.Assign)
                for t in n.targets if isinstance(t, ast.Name)}
    return [assigned.get(e.id, e) if isinstance(e, ast.Name) else e
            for e in call.args[0].elts]


def test_one_flat_launch_description(launch_file):
    elements = _ld_elements(launch_file)
    names = [_call_name(e) for e in elements]
    assert set(names) <= ALLOWED_ACTIONS, names     # no groups, includes, nested descriptions
    text = launch_file.read_text()
    for forbidden in ('GroupAction', 'IncludeLaunchDescription', 'PushRosNamespace'):
        assert forbidden not in text


def test_every_argument_is_declared_described_and_used(launch_file):
    tree = ast.parse(launch_file.read_text())
    declared = {}
    used = set()
    for node in ast.walk(tree):
        name = _call_name(node)
        if name == 'DeclareLaunchArgument':
            arg = _const(node.args[0])
            desc = _const(_kw(node, 'description'))
            assert isinstance(arg, str) and isinstance(desc, str) and len(desc) > 10, arg
            assert _kw(node, 'default_value') is not None, f'{arg}: no default'
            declared[arg] = desc
        elif name == 'LaunchConfiguration':
            used.add(_const(node.args[0]))
    assert used <= set(declared), f'undeclared: {used - set(declared)}'
    assert set(declared) <= used, f'declared but unused: {set(declared) - used}'
    assert {'headless', 'namespace'} <= set(declared)


def test_executables_and_packages_exist(launch_file):
    scripts = _console_scripts()
    depends = _exec_depends()
    nodes = [e for e in _ld_elements(launch_file) if _call_name(e) == 'Node']
    assert nodes
    for n in nodes:
        pkg, exe = _const(_kw(n, 'package')), _const(_kw(n, 'executable'))
        assert pkg and exe
        if pkg == 'manip_control':
            assert exe in scripts, f'{exe} is not a console script of setup.py'
            module, _, func = scripts[exe].partition(':')
            assert (ROOT / (module.replace('.', '/') + '.py')).is_file()
            if _rclpy_available():
                assert callable(getattr(importlib.import_module(module), func))
        else:
            assert pkg in depends, f'{pkg} is not an exec_depend of package.xml'


def _rclpy_available() -> bool:
    try:
        import rclpy  # noqa: F401
        return True
    except ImportError:
        return False


def _alternatives(parts) -> list[list]:
    """Every path a list of path elements names (both branches of an IfElseSubstitution)."""
    paths: list[list] = [[]]
    for p in parts:
        if _call_name(p) == 'IfElseSubstitution':
            options = [_const(p.args[1]), _const(p.args[2])]
        else:
            options = [_const(p)]
        paths = [path + [o] for path in paths for o in options]
    return paths


def test_package_files_exist_and_are_installed(launch_file):
    tree = ast.parse(launch_file.read_text())
    share = _installed_share_dirs()
    found = 0
    for node in ast.walk(tree):
        if _call_name(node) == 'PathJoinSubstitution':
            parts = node.args[0].elts
            if _call_name(parts[0]) == 'FindPackageShare':
                assert _const(parts[0].args[0]) == 'manip_control'
                for rel in _alternatives(parts[1:]):
                    assert all(isinstance(r, str) for r in rel)
                    assert (ROOT.joinpath(*rel)).is_file(), rel
                    assert rel[0] in share, f'{rel[0]}/ is not installed by setup.py'
                    found += 1
    assert found >= 2


def _params_files(launch_file) -> list[Path]:
    tree = ast.parse(launch_file.read_text())
    out = []
    for node in ast.walk(tree):
        if _call_name(node) == 'PathJoinSubstitution':
            for rel in _alternatives(node.args[0].elts[1:]):
                if rel and rel[0] == 'config':
                    out.append(ROOT.joinpath(*rel))
    return out


def _composed_parameters(call: ast.Call) -> dict[str, set[str]]:
    """Per node, the names given to it as ``-p NODE:NAME:=...`` in ``ros_arguments``."""
    out: dict[str, set[str]] = {}
    items = getattr(_kw(call, 'ros_arguments'), 'elts', [])
    for flag, item in zip(items, items[1:]):
        if _const(flag) != '-p':
            continue
        text = _const(item.elts[0]) if isinstance(item, ast.List) else _const(item)
        node, _, rest = text.partition(':')
        out.setdefault(node, set()).add(rest.partition(':=')[0])
    return out


def _inline_keys(call: ast.Call) -> set[str]:
    return {_const(k) for item in getattr(_kw(call, 'parameters'), 'elts', [])
            if isinstance(item, ast.Dict) for k in item.keys}


def test_composed_node_gets_every_parameter_of_the_separate_nodes(launch_file):
    """composed:=true: the one process gets what each separate node gets, node by node."""
    elements = [e for e in _ld_elements(launch_file) if _call_name(e) == 'Node'
                and _const(_kw(e, 'package')) == 'manip_control']
    composed = [e for e in elements if _const(_kw(e, 'executable')) == 'composed']
    if not composed:
        pytest.skip(f'{launch_file.name} has no composed variant')
    (call,) = composed
    assert _kw(call, 'name') is None, 'a node name would rename every node of the process'
    shared = _inline_keys(call)
    own = _composed_parameters(call)
    for node in own:
        assert node in ('plant', 'controller', 'trajectory', 'recorder'), node
        assert own[node] <= _node_parameter_names(node), (node, own[node])
    for key in shared:
        assert any(key in _node_parameter_names(n) for n in ('plant', 'controller',
                                                             'trajectory')), key
    separate = {_const(_kw(e, 'name')): e for e in elements if e is not call}
    assert set(separate) == {'plant', 'controller', 'trajectory', 'recorder'}
    # one process waits for its recorder itself (composed's and manip-sim's readiness checks)
    by_the_process = {n: {'wait_for_recorder'} for n in ('plant', 'controller', 'trajectory')}
    for name, e in separate.items():
        missing = _inline_keys(e) - shared - own.get(name, set()) - by_the_process.get(name, set())
        assert not missing, f'composed: {name} does not get {missing}'
        # the same params file, namespace and ROS arguments
        files = [ast.dump(x) for x in getattr(_kw(e, 'parameters'), 'elts', [])
                 if isinstance(x, ast.Name)]
        assert all(f in [ast.dump(x) for x in _kw(call, 'parameters').elts] for f in files)
        assert ast.dump(_kw(e, 'namespace')) == ast.dump(_kw(call, 'namespace'))


def test_params_files_match_the_nodes(launch_file):
    nodes = {}
    for e in _ld_elements(launch_file):
        if _call_name(e) == 'Node' and _const(_kw(e, 'package')) == 'manip_control' and \
                _const(_kw(e, 'executable')) != 'composed':
            nodes[_const(_kw(e, 'name'))] = e
    files = _params_files(launch_file)
    assert len(files) == 2              # the 2R's and, with urdf:=, the arm's
    for file in files:
        data = yaml.safe_load(file.read_text())
        # sections keyed /**/<node> apply under any namespace (the launch `namespace` argument)
        sections = {k.rpartition('/')[2] for k in data if k.rpartition('/')[2] != '**'}
        # the recorder and the MuJoCo driver run on their defaults
        assert sections == set(nodes) - {'recorder', 'joint_state_broadcaster'}, \
            (file.name, set(data), set(nodes))
        values = rp.load_params_file(file)
        for name in sections:
            unknown = set(values[name]) - _node_parameter_names(name)
            assert not unknown, f'{file.name}: {name}: unknown {unknown}'
    # the in-line parameters and remappings of each node exist too
    for name, call in nodes.items():
        for item in getattr(_kw(call, 'parameters'), 'elts', []):
            if isinstance(item, ast.Dict):
                keys = {_const(k) for k in item.keys}
                assert keys <= _node_parameter_names(name), (name, keys)
        for item in getattr(_kw(call, 'remappings'), 'elts', []):
            src = _const(item.elts[0])
            assert src in OUR_TOPICS.get(name, set()), (name, src)


def test_params_files_are_valid_configurations(launch_file):
    files = {f.name.startswith('arm_'): f for f in _params_files(launch_file)}
    values = rp.load_params_file(files[False])                      # the 2R's
    rp.controller_config(values['controller'])
    rp.trajectory_config(values['trajectory'])
    if values['plant']:
        rp.plant_config(values['plant'])
    # the arm's (urdf:=), with the defaults of a 7-joint arm from its URDF
    pytest.importorskip('pinocchio')
    from manip_control.arm_model import UrdfArm
    from manip_control.arm_scenario import control_defaults
    from manip_control.arm_scenario import plant_defaults
    panda = ROOT.parent / 'shared' / 'fixtures' / 'urdf' / 'panda.urdf'
    arm = UrdfArm.from_file(panda)
    values = rp.load_params_file(files[True])
    drives = values['controller'].get('nominal.drives', 'ideal')
    defaults = control_defaults(arm, panda.read_text(), drives)
    assert len(rp.controller_config(values['controller'], 'controller',
                                    defaults).controller.kp) == 7
    assert len(rp.trajectory_config(values['trajectory'], 'trajectory', defaults).joints) == 7
    if values['plant']:
        cfg = rp.plant_config(values['plant'], 'plant', plant_defaults(arm, panda.read_text()))
        assert len(cfg.plant.initial_position) == 7
