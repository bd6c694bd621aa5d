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
Check that package.xml and setup.py declare exactly what the package uses.

Imports are read with :mod:`ast` from the package, the launch files and the tests; ROS
packages started by the launch files (``package='...'``) and the ``ros2 <verb>`` commands the
tests run count as uses too. Each third-party import maps to its rosdep key (keys as in
rosdistro's ``rosdep/python.yaml`` and the Jazzy distribution file). package.xml is parsed
with catkin_pkg, as rosdep and colcon do.
"""

import ast
from pathlib import Path
import re
import sys

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: Top-level import name -> rosdep key. A new import must be added here and to package.xml.
IMPORT_TO_KEY = {
    # ROS 2 packages (the key is the package name).
    'ament_copyright': 'ament_copyright',
    'ament_flake8': 'ament_flake8',
    'ament_index_python': 'ament_index_python',
    'ament_pep257': 'ament_pep257',
    'builtin_interfaces': 'builtin_interfaces',
    'diagnostic_msgs': 'diagnostic_msgs',
    'launch': 'launch',
    'launch_ros': 'launch_ros',
    'launch_testing': 'launch_testing',
    'launch_testing_ros': 'launch_testing_ros',
    'lifecycle_msgs': 'lifecycle_msgs',
    'rcl_interfaces': 'rcl_interfaces',
    'rclpy': 'rclpy',
    'rosgraph_msgs': 'rosgraph_msgs',
    'rosidl_runtime_py': 'rosidl_runtime_py',
    'sensor_msgs': 'sensor_msgs',
    'std_msgs': 'std_msgs',
    'trajectory_msgs': 'trajectory_msgs',
    'xacro': 'xacro',
    # System / pip dependencies (rosdep keys).
    'PIL': 'python3-pil',
    'apsw': 'python3-rosbags-pip',  # rosbags' sqlite3 driver, installed with it
    'catkin_pkg': 'python3-catkin-pkg',
    'matplotlib': 'python3-matplotlib',
    'mcap': 'mcap-ros2-support',  # the key installs mcap with its ROS 2 decoder
    'mcap_ros2': 'mcap-ros2-support',
    'mujoco': 'python3-mujoco-pip',  # the mujoco wheels on PyPI
    'lz4': 'mcap-ros2-support',  # mcap's chunk codecs, installed with it
    'zstandard': 'mcap-ros2-support',
    'numba': 'python3-numba',
    'numpy': 'python3-numpy',
    'pinocchio': 'pinocchio',  # the pin wheels on PyPI
    'psutil': 'python3-psutil',
    'pytest': 'python3-pytest',
    'rosbags': 'python3-rosbags-pip',
    'scipy': 'python3-scipy',
    'yaml': 'python3-yaml',
}

#: rosdep key -> PyPI distribution, for the pure-Python run-time dependencies that setup.py's
#: install_requires must list (ROS packages come from the distribution, not from pip).
KEY_TO_PYPI = {
    'mcap-ros2-support': 'mcap',
    'python3-matplotlib': 'matplotlib',
    'python3-mujoco-pip': 'mujoco',
    'python3-numba': 'numba',
    'python3-numpy': 'numpy',
    'pinocchio': 'pin',
    'python3-pil': 'pillow',
    'python3-psutil': 'psutil',
    'python3-rosbags-pip': 'rosbags',
    'python3-scipy': 'scipy',
    'python3-yaml': 'PyYAML',
}

ROS2_VERB = re.compile(
    r'\bros2[\'"]?\s*,?\s*[\'"]?'
    r'(launch|run|topic|param|node|lifecycle|service|pkg|interface|action)\b')
LAUNCHED_PACKAGE = re.compile(r'package\s*=\s*[\'"]([A-Za-z0-9_]+)[\'"]')


def _files(*patterns: str) -> list[Path]:
    return sorted(p for pattern in patterns for p in ROOT.glob(pattern))


def _imports(files: list[Path]) -> dict[str, set[str]]:
    """Return top-level absolute import names (``pytest.importorskip`` too) -> files."""
    found: dict[str, set[str]] = {}
    for path in files:
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and node.func.attr == 'importorskip' and node.args
                  and isinstance(node.args[0], ast.Constant)):
                names = [node.args[0].value]
            else:
                continue
            for name in names:
                found.setdefault(name.split('.')[0], set()).add(path.name)
    return found


def _third_party(found: dict[str, set[str]]) -> dict[str, set[str]]:
    local = {'manip_control', 'conftest'} | {p.stem for p in _files('test/*.py')}
    return {m: f for m, f in found.items()
            if m not in sys.stdlib_module_names and m not in local}


def _keys(found: dict[str, set[str]]) -> dict[str, set[str]]:
    unknown = {m: sorted(f) for m, f in found.items() if m not in IMPORT_TO_KEY}
    assert not unknown, (
        f'imports with no rosdep key in IMPORT_TO_KEY (add the key here and to package.xml): '
        f'{unknown}')
    keys: dict[str, set[str]] = {}
    for module, files in found.items():
        keys.setdefault(IMPORT_TO_KEY[module], set()).update(files)
    return keys


@pytest.fixture(scope='module')
def package():
    catkin_pkg = pytest.importorskip('catkin_pkg.package')
    return catkin_pkg.parse_package(str(ROOT / 'package.xml'))


def _names(deps) -> set[str]:
    return {d.name for d in deps}


def _runtime_keys() -> dict[str, set[str]]:
    code = _files('manip_control/**/*.py', 'launch/*.py')
    keys = _keys(_third_party(_imports(code)))
    for path in _files('launch/*.py'):
        for pkg in LAUNCHED_PACKAGE.findall(path.read_text()):
            if pkg != 'manip_control':
                keys.setdefault(pkg, set()).add(path.name)
    return keys


def _test_keys() -> dict[str, set[str]]:
    tests = _files('test/*.py')
    keys = _keys(_third_party(_imports(tests)))
    for path in tests:
        for verb in ROS2_VERB.findall(path.read_text()):
            keys.setdefault('ros2' + verb, set()).add(path.name)
    return keys


def test_package_xml_is_valid(package):
    package.validate()
    assert package.name == 'manip_control'
    assert package.licenses == ['Apache-2.0']
    assert (ROOT / 'LICENSE').is_file()


def test_every_runtime_import_is_an_exec_depend(package):
    declared = _names(package.exec_depends) | _names(package.build_export_depends)
    missing = {k: sorted(f) for k, f in _runtime_keys().items() if k not in declared}
    assert not missing, f'used at run time but not <exec_depend> in package.xml: {missing}'


def test_every_test_import_is_declared(package):
    declared = _names(package.exec_depends) | _names(package.test_depends)
    missing = {k: sorted(f) for k, f in _test_keys().items() if k not in declared}
    assert not missing, f'used by the tests but not <test_depend> in package.xml: {missing}'


def test_no_unused_dependency(package):
    used_at_runtime = set(_runtime_keys())
    used = used_at_runtime | set(_test_keys())
    unused_exec = sorted(_names(package.exec_depends) - used_at_runtime)
    unused_test = sorted(_names(package.test_depends) - used)
    assert not unused_exec, f'<exec_depend> not used by the package or launch files: {unused_exec}'
    assert not unused_test, f'<test_depend> not used by the tests: {unused_test}'


def _install_requires() -> set[str]:
    tree = ast.parse((ROOT / 'setup.py').read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == 'install_requires':
            return {re.split(r'[<>=!~ \[;]', ast.literal_eval(elt))[0]
                    for elt in node.value.elts}
    raise AssertionError('setup.py has no install_requires')


def test_install_requires_lists_the_pure_python_runtime_dependencies():
    wanted = {KEY_TO_PYPI[k] for k in _runtime_keys() if k in KEY_TO_PYPI}
    missing = sorted(wanted - _install_requires())
    assert not missing, f'setup.py install_requires lacks {missing}'
