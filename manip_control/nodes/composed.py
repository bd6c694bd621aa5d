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
composed: plant, controller, trajectory (and recorder) in one process on one executor.

The Python counterpart of a component container (rclpy has none, and launch_ros's
``ComposableNodeContainer`` needs one): ``sim.launch.py composed:=true`` starts this
executable instead of one process per node. It builds the same node classes as the separate
executables (``PlantNode``, ``ControllerNode``, ``TrajectoryNode``, ``RecorderNode``) in one
process and runs them with manip-sim's machinery (:class:`manip_control.nodes.sim.SimRunner`:
one EventsExecutor, the plant's ``/clock`` publisher setting every sim-time clock of the
process, the recorder taking the loop's topics from their publishers, the plant started
once every connection of the loop and the recorder's are matched). Each node takes its
parameters from the process's ROS arguments as a separate process would take them:

* ``--params-file FILE``: a section applies to the node whose name it matches, as rcl
  matches it (``/**/plant`` under any namespace, ``/**`` to every node);
* ``-p NAME:=VALUE``: every node; ``-p NODE:NAME:=VALUE`` (NODE one of plant, controller,
  trajectory, recorder): that node only, whatever its namespace (rcl itself would apply
  ``plant:duration:=3.0`` to ``/plant`` only, not under a namespace);
* ``-r __ns:=/NS`` and remappings ``FROM:=TO``: every node; ``NODE:FROM:=TO``: that node;
  ``-r NODE:__node:=NAME`` renames one node (a plain ``__node`` remapping, which would give
  the four nodes one name, is refused);
* ``--log-level``: every node.

The recorder is part of the process when its ``bag`` parameter is set
(``-p recorder:bag:=DIR``); without ``topics`` it records the loop's topics as the nodes
resolve them (namespace and remappings applied). The run ends when the plant has simulated
``duration`` (exit code 0; 2 if the plant stopped on a non-finite state), or on Ctrl-C /
SIGTERM (exit code 0, as the separate node executables: what was published is recorded and
the bag is closed). Bad configuration: one ``error:`` line, exit code 2, nothing published.
"""

from __future__ import annotations

import re
import sys
import time

from manip_control.nodes.common import _rcl_message
from manip_control.nodes.common import defer_signals
from manip_control.nodes.common import end_signal_watch
from manip_control.nodes.common import error_exit
from manip_control.nodes.common import init_keeping_context_on_signals
from manip_control.nodes.common import log_transport_note
from manip_control.nodes.common import make_executor
from manip_control.nodes.common import release_context
from manip_control.nodes.common import spin_once
from manip_control.nodes.controller_node import ControllerNode
from manip_control.nodes.plant_node import PlantNode
from manip_control.nodes.recorder_node import RecorderNode
from manip_control.nodes.ros_params import check_params_files
from manip_control.nodes.ros_params import scenario_from_ros
from manip_control.nodes.ros_params import wants_help
from manip_control.nodes.sim import _arm_run_info
from manip_control.nodes.sim import _resolved_values
from manip_control.nodes.sim import drive_time_source
from manip_control.nodes.sim import share_time_source
from manip_control.nodes.sim import SimOutcome
from manip_control.nodes.sim import SimRunner
from manip_control.nodes.trajectory_node import TrajectoryNode
from manip_control.parameters import ParameterError

#: The nodes of the process, by the names a ``NODE:`` prefix of a ROS argument may give.
NODES = ('plant', 'controller', 'trajectory', 'recorder')
#: What the recorder records by default: (node that publishes it, its name in that node).
RECORDED = (('plant', 'joint_states'), ('controller', 'effort_controller/commands'),
            ('controller', 'joint_commands'), ('trajectory', 'reference'),
            ('plant', 'motor_states'), ('controller', '~/diagnostics'),
            ('plant', '~/diagnostics'))
#: Wall time the recorder gets to subscribe to every recorded topic [s].
SUBSCRIBE_TIMEOUT = 10.0

USAGE = """\
usage: composed [-h] [--ros-args [--params-file FILE]... [-p [NODE:]NAME:=VALUE]...
                [-r [NODE:]FROM:=TO]... [--log-level LEVEL]]

Plant, controller, trajectory (and, with -p recorder:bag:=DIR, the recorder) in one process
on one executor: what sim.launch.py composed:=true starts. The same node classes and
parameters as the separate executables (ros2 run manip_control plant --help, controller
--help, trajectory --help, recorder --help list them).

ROS arguments:
  --params-file FILE    params file; a section applies to the node it names, as for a
                        separate process (/**/plant: the plant under any namespace)
  -p NAME:=VALUE        a parameter of every node
  -p NODE:NAME:=VALUE   a parameter of one node (NODE: plant, controller, trajectory,
                        recorder), under any namespace
  -r __ns:=/NS          the namespace of every node (/clock stays global)
  -r [NODE:]FROM:=TO    a remapping of every node (of one node)

options:
  -h, --help            show this help and exit (nothing is started)

Ends by itself when the plant has simulated `duration` (exit code 0), or on Ctrl-C / SIGTERM
(exit code 0, the bag closed); bad configuration: one error line, exit code 2.
"""

_NODE_RULE = re.compile(r'^(?P<node>[A-Za-z_]\w*):(?P<rule>[^:=][^:]*:=.*)$', re.S)


def split_node_arguments(argv: list[str]) -> tuple[list[str], dict[str, list[str]]]:
    """
    Split ``-p NODE:NAME:=VALUE`` rules off the ROS arguments of ``argv``.

    Returns the arguments for ``rclpy.init`` (every other argument, unchanged) and, per node,
    its own ROS arguments (``['--ros-args', '-p', 'NAME:=VALUE', ...]``) for the node's
    ``cli_args``. Raises ParameterError for a rule naming a node that is not in the process
    and for a ``__node`` remapping without a node prefix.
    """
    out: list[str] = []
    own: dict[str, list[str]] = {}
    inside = False
    k = 0
    while k < len(argv):
        arg = argv[k]
        if arg == '--ros-args':
            inside = True
        elif arg == '--':
            inside = False
        elif inside and arg in ('-p', '--param', '-r', '--remap') and k + 1 < len(argv):
            value = argv[k + 1]
            m = _NODE_RULE.match(value)
            if arg in ('-r', '--remap'):
                if value.split(':=', 1)[0] == '__node':
                    raise ParameterError(
                        f'{arg} {value}: would give every node of the process that name; '
                        'rename one node with NODE:__node:=NAME (e.g. plant:__node:=arm_plant)')
                if m and m.group('node') not in NODES:
                    raise ParameterError(f'{arg} {value}: no node {m.group("node")!r} in this '
                                         f'process (nodes: {", ".join(NODES)})')
            elif m:
                if m.group('node') not in NODES:
                    raise ParameterError(f'{arg} {value}: no node {m.group("node")!r} in this '
                                         f'process (nodes: {", ".join(NODES)})')
                own.setdefault(m.group('node'), ['--ros-args']).extend(
                    ['-p', m.group('rule')])
                k += 2
                continue
            out.extend([arg, value])
            k += 2
            continue
        out.append(arg)
        k += 1
    return out, own


def _uses_sim_time(node) -> bool:
    try:
        return bool(node.get_parameter('use_sim_time').value)
    except Exception:  # noqa: BLE001 - not declared
        return False


class ComposedRunner(SimRunner):
    """
    The nodes of the launch in one process, configured by the process's ROS arguments.

    Unlike manip-sim's :class:`SimRunner` (which builds the nodes from a scenario), every
    value comes from the command line as it would for the separate executables; nothing is
    overridden here, and no per-tick history is kept (a launch may run for hours).

    Parameters
    ----------
    node_args : dict
        Per node, its own ROS arguments (:func:`split_node_arguments`).
    executor : str
        ``events`` or ``single``.
    context : rclpy Context, optional
        An initialised context (default: the global one).

    """

    def __init__(self, node_args: dict | None = None, executor: str = 'events', context=None):
        node_args = node_args or {}
        self.run = None
        self.context = context
        self._owns_context = False
        self.nodes = []
        self.recorder = None
        self.bag = None
        self.domain_error: str | None = None
        kw = {'context': context} if context is not None else {}
        try:
            self.plant = PlantNode(autostart=False, cli_args=node_args.get('plant'), **kw)
            self.nodes.append(self.plant)
            self.lockstep = self.plant.lockstep
            self.controller = ControllerNode(cli_args=node_args.get('controller'), **kw)
            self.nodes.append(self.controller)
            self.trajectory = TrajectoryNode(cli_args=node_args.get('trajectory'), **kw)
            self.nodes.append(self.trajectory)
            self._check_consistent()
            self.resolved = {'plant': _resolved_values(self.plant),
                             'controller': _resolved_values(self.controller),
                             'trajectory': _resolved_values(self.trajectory)}
            # an arm from its URDF (robot_description) has no 2R scenario: its run facts only
            self.urdf = bool(self.plant.values.get('robot_description'))
            if self.urdf:
                self.scenario = _arm_run_info('composed', self.plant, self.trajectory)
            else:
                self.scenario = scenario_from_ros(self.resolved, name='composed')
            rec_args = node_args.get('recorder')
            rec_values = self._recorder_values(rec_args, kw)
            if rec_values.get('bag'):
                if 'topics' not in rec_values:
                    rec_args = list(rec_args or ['--ros-args']) + [
                        '-p', 'topics:=' + repr(self.recorded_topics())]
                self.recorder = RecorderNode(cli_args=rec_args, **kw)
                self.nodes.append(self.recorder)
                self.bag = self.recorder.bag_path
                self.recorder.set_run_parameters(
                    None if self.urdf else self.scenario.to_dict(), self.resolved)
                self._tap_recorder()
            # one time source (the trajectory's) drives every sim-time clock, set by the plant's
            # /clock publisher as it sends (no /clock delivery inside the process)
            followers = [n for n in (self.plant, self.controller, self.recorder)
                         if n is not None and _uses_sim_time(n)]
            self.shared_sim_time = _uses_sim_time(self.trajectory) and share_time_source(
                self.trajectory, followers)
            if self.shared_sim_time and self.lockstep:
                drive_time_source(self.plant._clock_pub, self.trajectory)
            self.executor = make_executor(executor, context=context)
            for n in self.nodes:
                self.executor.add_node(n)
        except BaseException:
            self.destroy()
            raise

    @staticmethod
    def _recorder_values(rec_args, kw) -> dict:
        """
        Return the values given to the recorder, as rcl resolves them for it.

        From a node of the recorder's name, namespace and arguments that is destroyed at once:
        whether to record at all (``bag``) is known before the recorder opens its bag.
        """
        from rclpy.node import Node
        probe = Node('recorder', cli_args=rec_args, start_parameter_services=False,
                     enable_rosout=False, **kw)
        try:
            return {name: p.value for name, p in probe._parameter_overrides.items()}
        finally:
            probe.destroy_node()

    def recorded_topics(self) -> list[str]:
        """Absolute names of the loop's topics, as the nodes resolve them."""
        owner = {'plant': self.plant, 'controller': self.controller,
                 'trajectory': self.trajectory}
        return [owner[n].resolve_topic_name(t) for n, t in RECORDED]

    def _wait_ready(self) -> None:
        """Wait until the recorder subscribes to every recorded topic not tapped, as manip-sim."""
        if self.recorder is not None:
            name = self.recorder.get_name()
            ns = self.recorder.get_namespace()
            tapped = self.recorder.tapped_topics       # taken from their publishers
            topics = [t for t in self.recorder.get_parameter('topics').value if t not in tapped]
            published = {t for t, _ in self.recorder.get_topic_names_and_types()}

            def subscribed(topic):
                return any(i.node_name == name and i.node_namespace == ns
                           for i in self.recorder.get_subscriptions_info_by_topic(topic))
            deadline = time.monotonic() + SUBSCRIBE_TIMEOUT
            while not all(subscribed(t) for t in topics if t in published):
                if time.monotonic() > deadline:
                    missing = [t for t in topics if t in published and not subscribed(t)]
                    raise RuntimeError(f'the recorder did not subscribe to {", ".join(missing)} '
                                       f'within {SUBSCRIBE_TIMEOUT:g} s')
                spin_once(self.executor, 0.01)
                published = {t for t, _ in self.recorder.get_topic_names_and_types()}
        super()._wait_ready()

    def _drain(self, published: dict) -> None:
        """
        Stop the loop, then let the recorder take what was published (``published``).

        Only the recorder is left on the executor: after Ctrl-C the plant would otherwise go
        on ticking while the recorder drains its queues, publishing what the bag may miss.
        Events already queued for the other nodes may still run (measured: one more command
        or state), so ``published`` is brought up to date in place (the outcome reports it)
        until a drain ends with nothing new published; each drain also lets the recorder take
        whatever else already arrived (the plant's last diagnostics).
        """
        for node in self.nodes:
            if node is not self.recorder:
                self.executor.remove_node(node)
        for _ in range(10):
            super()._drain(published)
            # until nothing new came for 0.1 s: the events still queued run here, and what a
            # tapped publisher sends in them is recorded at once
            self.recorder.drain(self.executor)
            now = self._published()
            if now == published:
                break
            published.update(now)

    def _outcome(self, wall, published, recorded, interrupted) -> SimOutcome:
        window = (self.plant.first_tick_ns, self.plant.tick_stamp_ns) \
            if self.plant.first_tick_ns is not None else None
        return SimOutcome('composed', 'lockstep' if self.lockstep else 'realtime',
                          self.scenario, self.plant.k, wall, self.plant.counters(),
                          self.controller.counters(), published, recorded,
                          interrupted=interrupted, state_window_ns=window)


def summary_line(out: SimOutcome, nodes, recorder_path=None) -> str:
    """Return the line the process logs at the end: ticks, real-time factor, recorded counts."""
    text = (f'{", ".join(nodes)} in one process: {out.ticks} ticks, '
            f'{out.simulated_time:.3f} s simulated in {out.wall_time:.2f} s wall, real-time '
            f'factor {out.real_time_factor:.2f}x' + (' (interrupted)' if out.interrupted
                                                     else ''))
    if recorder_path is not None:
        rec = ', '.join(f'{t} {out.recorded.get(t, 0)}/{n}' for t, n in out.published.items())
        text += f'; recorded/published into {recorder_path}: {rec}'
    return text


def main(args=None) -> int:
    """``ros2 run manip_control composed --ros-args ...`` (sim.launch.py composed:=true)."""
    from rclpy.logging import get_logger
    argv = list(sys.argv if args is None else args)
    if wants_help(argv):
        sys.stdout.write(USAGE)
        sys.stdout.flush()
        return 0
    try:
        check_params_files(argv)
        argv, node_args = split_node_arguments(argv)
    except ParameterError as exc:
        return error_exit(str(exc))
    try:
        init_keeping_context_on_signals(argv)
    except Exception as exc:  # noqa: BLE001 - e.g. a malformed --params-file
        return error_exit(_rcl_message(exc))
    runner = None
    code = 0
    try:
        try:
            runner = ComposedRunner(node_args)
        except ParameterError as exc:
            return error_exit(str(exc))
        except Exception as exc:  # noqa: BLE001 - rcl errors while creating a node
            return error_exit(_rcl_message(exc))
        log_transport_note(runner.plant)
        outcome = runner.execute()
        if runner.domain_error:
            code = error_exit(runner.domain_error)
        elif runner.plant.exit_code:    # a non-finite state stopped the plant (logged)
            code = runner.plant.exit_code
        else:
            get_logger('composed').info(summary_line(
                outcome, [n.get_name() for n in runner.nodes],
                runner.bag if runner.recorder is not None else None))
    except KeyboardInterrupt:           # stopped before the run started
        code = 0
    except Exception as exc:  # noqa: BLE001 - discovery, the recorder's bag (write errors)
        code = error_exit(f'{type(exc).__name__}: {exc}', 1)
    finally:
        defer_signals()                 # a signal now must not interrupt close()
        if runner is not None:
            runner.destroy()
        release_context()
        end_signal_watch()
    return code


if __name__ == '__main__':
    sys.exit(main())
