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
The package's import structure: no import circles, imports at the top of the module.

Every module under ``manip_control/`` is parsed with :mod:`ast` (nothing is imported). The
graph has an edge ``a -> b`` for every import of ``b`` (or of a name of ``b``) in ``a``,
wherever it is written: at module level, inside a function, under ``if TYPE_CHECKING``.
A circle in that graph is a design fault even when an import inside a function keeps Python
from tripping over it: the two modules can then be neither understood nor tested apart.

An import inside a function is allowed only for the heavy or optional third-party modules of
:data:`DEFERRED`, so that the CLIs, ``--help`` and the ROS-free core start without them.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = 'manip_control'

#: Heavy or optional modules (third-party, or of this package and loading them) that a
#: function may import when it first needs them, and why.
DEFERRED = {
    'manip_control.kernel': 'the compiled engine: it imports numba (about a second); loaded '
                            'when a compiled step or loop first runs',
    'manip_control.arm_plant': 'the n-joint plant: it imports numba (about a second); loaded '
                               'when a node simulates a URDF arm',
    'manip_control.arm_scenario': 'URDF-arm defaults: through the plant and the adaptive law '
                                  'it imports numba (about a second), which the 2R nodes and '
                                  'every --help would pay',
    'manip_control.lesson': 'the summary at the end of a manip-sim run only: it loads the '
                            'robustness bounds, scipy and numba (seconds to import)',
    'numba': 'the compiled law of an n-joint controller only (about a second to import): the '
             '2R controller runs on floats and never needs it',
    'pinocchio': 'URDF arms only (most of a second to import)',
    'mujoco': 'the MuJoCo driver and comparisons only',
    'scipy': 'identification, robustness bounds and splines only; scipy.signal is the slowest '
             'import of the dependencies (seconds), which every CLI and --help would pay',
    'matplotlib': 'plots only (manip-robustness --plot); seconds to import',
    'PIL': 'the pictures of manip-analyze only',
    'xacro': 'xacro files only',
    'zstandard': 'compressed MCAP chunks only',
    'lz4': 'compressed MCAP chunks only',
    'ament_index_python': 'an installed share directory only (a source checkout has none)',
    # ROS 2: the core, its CLIs, the nodes' --help and the params-file checks run without a
    # ROS 2 environment (and with an invalid ROS_DOMAIN_ID: test_cli_help).
    'rclpy': 'ROS 2 runtime, needed only once a node starts',
    'rcl_interfaces': 'ROS 2 messages, needed only once a node starts',
    'diagnostic_msgs': 'ROS 2 messages, needed only once a node starts',
    'rosgraph_msgs': 'ROS 2 messages, needed only once a node starts',
    'sensor_msgs': 'ROS 2 messages, needed only once a node starts',
    'std_msgs': 'ROS 2 messages, needed only once a node starts',
    'trajectory_msgs': 'ROS 2 messages, needed only once a node starts',
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix('').parts)
    if parts[-1] == '__init__':
        parts.pop()
    return '.'.join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted((ROOT / PACKAGE).rglob('*.py'))}


def _imports(modules: dict[str, Path]):
    """
    Yield (module, line, full names imported, enclosing function or None) per import.

    ``import x.y`` imports ``x.y``; ``from x import a`` imports ``x.a`` (a module or a name in
    ``x``); relative imports are resolved against the importing module.
    """
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding='utf-8'), str(path))
        package = module.split('.') if path.name == '__init__.py' else module.split('.')[:-1]
        stack = [(tree, None)]
        while stack:
            node, function = stack.pop()
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.Import):
                    yield module, child.lineno, [a.name for a in child.names], function
                elif isinstance(child, ast.ImportFrom):
                    source = child.module
                    if child.level:
                        base = package[:len(package) - child.level + 1]
                        source = '.'.join(base + ([child.module] if child.module else []))
                    yield (module, child.lineno, [f'{source}.{a.name}' for a in child.names],
                           function)
                inner = (child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
                         else function)
                stack.append((child, inner))


def import_graph() -> dict[str, set[str]]:
    """Return the intra-package import graph: module -> modules it imports."""
    modules = _modules()
    graph = {module: set() for module in modules}
    for module, _, names, _ in _imports(modules):
        for name in names:
            # x.a is the module x.a, or a name in the module x
            target = name if name in modules else name.rsplit('.', 1)[0]
            if target in modules and target != module:
                graph[module].add(target)
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """
    Return the circles of ``graph``: a shortest one through each module that is on one.

    Tarjan's algorithm finds the groups of modules that all reach each other; a breadth-first
    search in a group gives a shortest circle through each of its modules, as
    ``[a, b, a]``. Rotations of a circle already found are left out.
    """
    index, low, on_stack, stack, groups = {}, {}, set(), [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    circles, seen = [], set()
    for group in groups:
        for start in sorted(group):
            circle = _shortest_circle(graph, group, start)
            key = frozenset(zip(circle, circle[1:]))
            if key not in seen:
                seen.add(key)
                circles.append(circle)
    return circles


def _shortest_circle(graph: dict[str, set[str]], group: set[str], start: str) -> list[str]:
    parent = {start: None}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph[v] & group):
            if w == start:
                circle = [start]
                while v != start:
                    circle.insert(1, v)
                    v = parent[v]
                return circle + [start]
            if w not in parent:
                parent[w] = v
                queue.append(w)
    raise AssertionError(f'{start} is on no circle of its group')


def _deferred(name: str) -> bool:
    """Tell whether ``name`` (a module or a name in one) is in :data:`DEFERRED` or below."""
    parts = name.split('.')
    return any('.'.join(parts[:k]) in DEFERRED for k in range(1, len(parts) + 1))


def test_import_circles_are_found():
    """The check itself: a circle through an import inside a function is named."""
    graph = {'a': {'b'}, 'b': {'c'}, 'c': {'a', 'd'}, 'd': set(), 'e': set()}
    assert import_circles(graph) == [['a', 'b', 'c', 'a']]
    graph = {'a': {'b'}, 'b': {'a', 'c'}, 'c': {'b'}}
    assert import_circles(graph) == [['a', 'b', 'a'], ['c', 'b', 'c']]
    assert import_circles({'a': {'b'}, 'b': set()}) == []


def test_no_import_circles():
    circles = import_circles(import_graph())
    assert not circles, 'import circles (imports inside functions included):\n' + '\n'.join(
        ' -> '.join(circle) for circle in circles)


def test_imports_inside_functions_only_defer_heavy_optional_modules():
    modules = _modules()
    found = []
    for module, line, names, function in _imports(modules):
        if function is None:
            continue
        path = modules[module].relative_to(ROOT).as_posix()
        left = [name for name in names if not _deferred(name)]
        if left:
            found.append(f'{path}:{line} ({function}): import of {left[0]}')
    found.sort()
    assert not found, (
        f'{len(found)} imports inside functions of modules that are neither heavy nor optional '
        '(import them at the top of the module; test_imports.DEFERRED lists the exceptions):\n'
        + '\n'.join(found))


def test_the_controller_and_trajectory_nodes_load_no_compiler():
    """
    The controller and trajectory processes never load numba (llvmlite) or scipy.

    The nodes run no compiled engine: loading one costs a second at every start, and a
    controller process that had loaded numba (through an import of arm_scenario) died at
    exit with heap corruption (``malloc_consolidate(): unaligned fastbin chunk``, SIGABRT) in
    1 of 2 MuJoCo Panda runs; without it, 3 of 3 were clean.
    """
    import subprocess
    import sys
    code = ('import sys, manip_control.nodes.controller_node, '
            'manip_control.nodes.trajectory_node; '
            "print(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'numba', 'llvmlite', 'scipy'}))")
    done = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                          cwd=str(ROOT), timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == '[]', done.stdout
