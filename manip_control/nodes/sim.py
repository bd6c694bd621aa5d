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
manip-sim: plant, controller and trajectory nodes in one process, a scenario, a summary.

Usage::

    manip-sim [--config FILE|PRESET] [--duration S] [--mode lockstep|realtime]
              [--bag DIR [--storage mcap|sqlite3]] [--executor events|single]
              [--rt-priority N] [--quiet]

``--config`` takes a scenario file in the core format (``config/*.yaml``, or a preset name
such as ``seed001``; default ``default``) or a ROS params file (``node: ros__parameters:``
sections for plant / controller / trajectory, e.g. ``config/sim_params.yaml``). The three
nodes talk over DDS topics exactly as separate processes do; the lockstep result equals
:func:`manip_control.simulation.run_closed_loop` for the same scenario. Two things stay inside
the process: the plant's ``/clock`` publisher sets the sim-time clocks of the nodes as it
sends (:func:`drive_time_source`), and the recorder takes the loop's topics from their
publishers (:meth:`manip_control.nodes.recorder_node.RecorderNode.tap`).

``--bag DIR`` adds the recorder node (rosbag2, metadata version 8, MCAP by default) with the
resolved run parameters in ``DIR/params.yaml`` (scenario format, loadable by
``load_scenario``) and ``DIR/ros_params.yaml`` (the nodes' parameters).

Exit codes: 0 done, 2 bad configuration (one ``error: ...`` line, nothing published) or a
ROS domain shared with another participant that publishes the run's topics (checked before
the run's publishers exist and every 0.2 s during the run), 130 interrupted.

Discovery: unless ``ROS_AUTOMATIC_DISCOVERY_RANGE`` (or ``ROS_LOCALHOST_ONLY``) is set, the
process keeps DDS discovery on this host (``LOCALHOST``); all nodes are in the process.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from dataclasses import field
import gc
import os
from pathlib import Path
import signal
import sys
import time

from manip_control.adaptation import true_two_link_parameters
from manip_control.arm_model import ArmModelError
from manip_control.arm_model import read_urdf_file
from manip_control.nodes.cdr import decode_clock
from manip_control.nodes.common import callback_failed
from manip_control.nodes.common import defer_signals
from manip_control.nodes.common import end_signal_watch
from manip_control.nodes.common import error_exit
from manip_control.nodes.common import EXECUTORS
from manip_control.nodes.common import guard_services
from manip_control.nodes.common import init_keeping_context_on_signals
from manip_control.nodes.common import make_executor
from manip_control.nodes.common import release_context
from manip_control.nodes.common import retire
from manip_control.nodes.common import spin_once
from manip_control.nodes.common import spin_until
from manip_control.nodes.common import steady_clock
from manip_control.nodes.common import stop_requested
from manip_control.nodes.controller_node import ControllerNode
from manip_control.nodes.plant_node import PlantNode
from manip_control.nodes.recorder_node import RecorderNode
from manip_control.nodes.ros_params import controller_specs
from manip_control.nodes.ros_params import drives_following_plant
from manip_control.nodes.ros_params import is_params_document
from manip_control.nodes.ros_params import load_params_file
from manip_control.nodes.ros_params import MODES
from manip_control.nodes.ros_params import NODE_NAMES
from manip_control.nodes.ros_params import parameter_overrides
from manip_control.nodes.ros_params import plant_specs
from manip_control.nodes.ros_params import recorder_specs
from manip_control.nodes.ros_params import ros_params_from_scenario
from manip_control.nodes.ros_params import safety_specs
from manip_control.nodes.ros_params import scenario_from_ros
from manip_control.nodes.ros_params import STORAGES
from manip_control.nodes.ros_params import trajectory_specs
from manip_control.nodes.sources import DomainGuard
from manip_control.nodes.sources import DomainInUseError
from manip_control.nodes.sources import in_use
from manip_control.nodes.trajectory_node import TrajectoryNode
from manip_control.offline import format_adaptation
from manip_control.parameters import check_duration
from manip_control.parameters import load_scenario
from manip_control.parameters import ParameterError
from manip_control.parameters import read_yaml
from manip_control.parameters import resolve_config
from manip_control.parameters import Scenario
from manip_control.simulation import late_window
from manip_control.simulation import PlantStateError
from manip_control.simulation import SimulationResult
from manip_control.simulation import truth_nominal
import numpy as np

READY_TIMEOUT = 10.0
DRAIN_TIMEOUT = 5.0


# --------------------------------------------------------------------------------------------
# configuration

@dataclass
class RunConfig:
    """What to run: per-node ROS values and the scenario they describe."""

    name: str
    values: dict                    # node name -> {ros parameter: value}
    scenario: Scenario | None = None
    source: str = ''


def load_run_config(config: str | None, mode: str | None = None,
                    duration: float | None = None, urdf: str | None = None,
                    adapt: bool = False) -> RunConfig:
    """
    Read ``--config`` (scenario file / preset or ROS params file) and apply overrides.

    ``urdf``: any serial arm from its URDF (or xacro) file instead of the 2R scenario: the
    text is every node's ``robot_description``, ``--config`` a ROS params file (default
    ``config/arm_sim_params.yaml``). ``adapt``: the controller's ``adaptation.enabled``.
    """
    if duration is not None and not duration > 0.0:
        raise ParameterError(f'--duration: must be > 0 (got {duration})')
    path = resolve_config(config or ('arm_sim_params' if urdf else 'default'))
    data = read_yaml(path)
    text = ''
    if urdf:
        try:
            text = read_urdf_file(urdf)
        except ArmModelError as exc:
            raise ParameterError(f'--urdf {urdf}: {exc}') from None
        if not is_params_document(data):
            raise ParameterError(f'--config {path}: with --urdf, a ROS params file '
                                 '(node: ros__parameters:), e.g. config/arm_sim_params.yaml')
    if is_params_document(data):
        values = load_params_file(path)
        unknown_nodes = sorted(set(values) - set(NODE_NAMES) - {'recorder'})
        if unknown_nodes:
            raise ParameterError(f'params file {path}: unknown node section '
                                 f'{unknown_nodes[0]!r} (expected {", ".join(NODE_NAMES)})')
        values = {n: dict(values.get(n, {})) for n in NODE_NAMES}
        if text:
            for node in NODE_NAMES:
                values[node]['robot_description'] = text
        plant, controller = values['plant'], values['controller']
        if plant.get('robot_description') and controller.get('robot_description') \
                and 'nominal.drives' not in controller:
            # the controller inverts the drives the simulated plant has, unless told otherwise
            controller['nominal.drives'] = drives_following_plant(plant, str(urdf or path))
        _share_loop_keys(values)
        scenario = None
        name = Path(urdf).stem if urdf else path.stem
    else:
        scenario = load_scenario(path)
        if duration is not None:
            scenario = scenario.with_duration(duration, '--duration')
        values = ros_params_from_scenario(scenario, mode or 'lockstep')
        name = scenario.name
    for node in NODE_NAMES:
        if mode is not None:
            values[node]['mode'] = mode
    if adapt:
        values['controller']['adaptation.enabled'] = True
    if duration is not None:
        rate = values['plant'].get('control_rate', Scenario().control_rate)
        if isinstance(rate, (int, float)) and rate > 0:
            check_duration('--duration', duration, float(rate))
        values['plant']['duration'] = float(duration)
    return RunConfig(name, values, scenario, str(path))


#: Parameters every node of the loop must agree on.
LOOP_KEYS = ('joints', 'mode', 'control_rate')


def _share_loop_keys(values: dict) -> None:
    """
    Give a node whose section leaves out a loop key the value the other sections agree on.

    A params file written for the hardware (controller and trajectory in ``realtime``, no
    plant section) then runs as shipped, with the simulated plant in the same mode.
    Sections that disagree are left alone (:meth:`SimRunner._check_consistent` says how).
    """
    for key in LOOP_KEYS:
        given = [v[key] for v in values.values() if key in v]
        if given and all(repr(g) == repr(given[0]) for g in given):
            for v in values.values():
                v.setdefault(key, given[0])


# --------------------------------------------------------------------------------------------
# the run

@dataclass
class ArmRunInfo:
    """What the summary needs of a run of an arm from its URDF (the 2R's Scenario fields)."""

    name: str
    duration: float
    control_rate: float
    joints: tuple
    trajectory: dict
    late_window_start: float

    @property
    def period(self) -> float:
        """Control period [s]."""
        return 1.0 / self.control_rate


@dataclass
class JointRecord:
    """Per-tick records of a lockstep run of n joints (true q) for the summary."""

    t: np.ndarray
    error: np.ndarray
    tau_cmd: np.ndarray
    saturated: np.ndarray


@dataclass
class SimOutcome:
    """Everything a run produced (for the summary, tests and the benchmark)."""

    name: str
    mode: str
    scenario: Scenario | ArmRunInfo
    ticks: int
    wall_time: float
    plant_counters: dict
    controller_counters: dict
    published: dict = field(default_factory=dict)
    recorded: dict = field(default_factory=dict)
    result: object = None           # SimulationResult (lockstep)
    controller_history: np.ndarray | None = None
    latencies_ns: np.ndarray | None = None
    latency_fresh: np.ndarray | None = None
    interrupted: bool = False
    state_window_ns: tuple | None = None    # stamps of the first and last published state

    @property
    def simulated_time(self) -> float:
        return self.ticks * self.scenario.period

    @property
    def real_time_factor(self) -> float:
        return self.simulated_time / self.wall_time if self.wall_time > 0 else float('nan')


def _localhost_discovery() -> None:
    if 'ROS_AUTOMATIC_DISCOVERY_RANGE' not in os.environ and \
            'ROS_LOCALHOST_ONLY' not in os.environ:
        os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'


class SimRunner:
    """
    Build the nodes of a run in one process, run them, collect the outcome.

    Parameters
    ----------
    run : RunConfig
    bag : str or Path, optional
        Record to this bag directory.
    storage : str
        ``mcap`` or ``sqlite3``.
    executor : str
        ``events`` or ``single``.
    context : rclpy Context, optional
        An initialised context (default: the global one, initialised here if needed).

    """

    def __init__(self, run: RunConfig, bag=None, storage: str = 'mcap',
                 executor: str = 'events', context=None, share_sim_time: bool = True):
        import rclpy
        from rclpy.parameter import Parameter

        self.run = run
        self.context = context
        self._owns_context = False
        if context is None and not rclpy.ok():
            rclpy.init()
            self._owns_context = True
        kw = {'context': context} if context is not None else {}
        self.nodes = []
        self.recorder = None
        self.bag = bag
        self.domain_error: str | None = None
        sim_time = Parameter('use_sim_time', value=True)
        recording = bag is not None
        v = run.values
        try:
            plant_vals = dict(v['plant'])
            if plant_vals.get('mode', 'lockstep') == 'lockstep':
                plant_vals.setdefault('wait_for_subscribers', 2 if recording else 1)
            self.plant = PlantNode(parameter_overrides=parameter_overrides(
                plant_specs(), plant_vals), autostart=False, keep_history=True, **kw)
            self.nodes.append(self.plant)
            self.lockstep = self.plant.lockstep
            extra = [sim_time] if self.lockstep else []
            ctrl_vals = dict(v['controller'])
            if self.lockstep:
                ctrl_vals = lockstep_safety_defaults(ctrl_vals)
            if ctrl_vals.get('mode') == 'realtime' and not ctrl_vals.get('state_publisher'):
                # real time: the plant of this process is the driver; trust only it
                ctrl_vals['state_publisher'] = self.plant.get_fully_qualified_name()
            self.controller = ControllerNode(parameter_overrides=parameter_overrides(
                controller_specs(), ctrl_vals) + extra, keep_history=True, **kw)
            self.nodes.append(self.controller)
            self.trajectory = TrajectoryNode(parameter_overrides=parameter_overrides(
                trajectory_specs(), v['trajectory']) + extra, **kw)
            self.nodes.append(self.trajectory)
            self._check_consistent()
            self.resolved = {n.get_name(): _resolved_values(n) for n in self.nodes}
            self.urdf = bool(self.plant.values.get('robot_description'))
            if self.urdf:
                self.scenario = _arm_run_info(run.name, self.plant, self.trajectory)
            else:
                self.scenario = run.scenario or scenario_from_ros(self.resolved, name=run.name)
            if recording:
                rec_vals = {'bag': str(bag), 'storage': storage}
                self.recorder = RecorderNode(parameter_overrides=parameter_overrides(
                    recorder_specs(), rec_vals) + extra, **kw)
                self.nodes.append(self.recorder)
                self.recorder.set_run_parameters(
                    None if self.urdf else self.scenario.to_dict(), self.resolved)
                self._tap_recorder()
            self.shared_sim_time = share_sim_time and self.lockstep and share_time_source(
                self.trajectory, [n for n in (self.controller, self.recorder) if n is not None])
            if self.shared_sim_time:
                drive_time_source(self.plant._clock_pub, self.trajectory)
            self.executor = make_executor(executor, context=context)
            for n in self.nodes:
                guard_services(n)       # a bad request is answered, never raised
                self.executor.add_node(n)
        except BaseException:
            self.destroy()
            raise

    def _tap_recorder(self) -> None:
        """
        Let the recorder take the loop's topics from their publishers (see RecorderNode.tap).

        One process needs no DDS delivery to its own recorder: that halves the deliveries of a
        lockstep tick. The controller's command publishers are made anew when it is configured
        again (``ros2 lifecycle``): the tap moves to them.
        """
        rec = self.recorder
        wanted = set(rec.get_parameter('topics').value or [])

        def tap(pub) -> None:
            if pub is not None and pub.topic_name in wanted:
                rec.tap(pub)
                self.plant.in_process_readers[pub.topic_name] = 1
        for pub in (self.plant._state_pub, self.plant._motor_pub, self.trajectory._ref_pub,
                    self.controller._cmd_pub, self.controller._array_pub):
            tap(pub)
        self.controller.publisher_hooks.append(tap)
        if self.lockstep:
            rec.follow_clock(self.plant._clock_pub)

    def tapped(self, pub) -> bool:
        """Tell whether the recorder takes ``pub``'s topic from the publisher itself."""
        return self.recorder is not None and pub.topic_name in self.recorder.tapped_topics

    def _check_consistent(self) -> None:
        nodes = (self.plant, self.controller, self.trajectory)
        for key in LOOP_KEYS:
            vals = {n.get_name(): n.values[key] for n in nodes}
            if len({repr(x) for x in vals.values()}) > 1:
                fix = ('add --mode lockstep or --mode realtime to set it for all three' if
                       key == 'mode' else 'set it alike in every section of the params file')
                raise ParameterError(f'parameter {key}: must be the same for plant, controller '
                                     f'and trajectory (got {vals}): {fix}')

    def _wait_ready(self) -> None:
        """Spin until every connection of the loop (and the recorder) is matched."""
        def rec(pub) -> int:
            """Count the recorder's subscription to ``pub``'s topic (0 without one, or a tap)."""
            return 1 if self.recorder is not None and not self.tapped(pub) else 0
        state, ref, motor = self.plant._state_pub, self.trajectory._ref_pub, self.plant._motor_pub
        checks = [
            lambda: state.get_subscription_count() >= 1 + rec(state),
            lambda: self.plant._cmd_sub.get_publisher_count() >= 1,
            lambda: ref.get_subscription_count() >= 1 + rec(ref),
            # the recorder is motor_states' only subscriber: the writer's side of that match
            lambda: motor.get_subscription_count() >= rec(motor),
        ]
        if self.lockstep:
            checks.append(lambda: self.plant._clock_pub.get_subscription_count() >= 1)
        if self.recorder is not None:
            checks.append(self.recorder.all_matched)
        deadline = time.monotonic() + READY_TIMEOUT
        while not all(c() for c in checks):
            if time.monotonic() > deadline:
                raise RuntimeError('the nodes did not connect within '
                                   f'{READY_TIMEOUT:g} s (DDS discovery)')
            spin_once(self.executor, 0.01)

    def execute(self) -> SimOutcome:
        """Run until the plant has simulated its duration (or Ctrl-C)."""
        from rclpy.executors import ExternalShutdownException
        from rclpy.task import Future
        interrupted = False
        self._wait_ready()
        # another participant publishing the run's topics (a second simulation, a driver,
        # a bag replay): stop with an error rather than mixing its messages into the run
        guard = DomainGuard(self.plant, dict.fromkeys(run_topics(self.lockstep), 1))
        end = Future()
        self.plant.done_future.add_done_callback(lambda _: end.set_result(True))

        def check_domain():
            # a foreign publisher counts once its messages arrive (refused by the
            # controller as another publisher's): a killed process stays on the graph
            if (self.domain_error is None and self.controller.foreign_messages()
                    and guard.foreign()):
                try:
                    guard.check()
                except DomainInUseError as exc:
                    self.domain_error = str(exc)
                    if not end.done():
                        end.set_result(False)
        timer = self.plant.create_timer(DOMAIN_CHECK_PERIOD, check_domain,
                                        clock=steady_clock())
        check_domain()
        t0 = time.perf_counter()
        self.plant.start()
        try:
            spin_until(self.executor, end, self.context)
        except (KeyboardInterrupt, ExternalShutdownException):
            interrupted = True
        defer_signals()         # from here on a signal only flags: the bag is finished first
        retire(self.plant, timer)
        check_domain()          # a participant discovered during the last period
        if not self.plant.done_future.done() and self.domain_error is None:
            interrupted = True
        wall = (self.plant.wall_end or time.perf_counter()) - (self.plant.wall_start or t0)
        if not self.lockstep:
            for node in (self.controller, self.trajectory):
                timer = getattr(node, '_timer', None)
                if timer is not None:
                    timer.cancel()
        published = self._published()
        recorded = {}
        if self.recorder is not None:
            self._drain(published)
            self.recorder.close()
            recorded = self.recorder.counts()
        return self._outcome(wall, published, recorded, interrupted)

    def _published(self) -> dict:
        """Messages published per topic, keyed by the resolved name (namespace, remapping)."""
        p, c = self.plant.published, self.controller.published_commands
        return {self.plant._state_pub.topic_name: p['joint_states'],
                self.plant._motor_pub.topic_name: p['motor_states'],
                self.trajectory._ref_pub.topic_name: self.trajectory.published,
                self.controller._cmd_pub.topic_name: c,
                self.controller._array_pub.topic_name: c}

    def _drain(self, published: dict) -> None:
        deadline = time.monotonic() + DRAIN_TIMEOUT
        while time.monotonic() < deadline:
            counts = self.recorder.counts()
            if all(counts.get(t, 0) >= n for t, n in published.items() if t in counts):
                break
            spin_once(self.executor, 0.01, interruptible=False)

    def _outcome(self, wall, published, recorded, interrupted) -> SimOutcome:
        sc = self.scenario
        n = len(self.plant.joints)
        # one snapshot of both: a real-time control thread may still tick (one row more in
        # the later one: "shapes (191,) (192,)" in a 0.2 s run)
        history, latencies = self.controller.history_snapshot()
        ch = np.array(history, dtype=float).reshape(-1, 1 + 6 * n)
        lat = fresh = None
        if latencies:
            arr = np.array(latencies, dtype=np.int64).reshape(-1, 2)
            lat, fresh = arr[:, 0], arr[:, 1].astype(bool)
        result = None
        if self.lockstep and self.plant.history:
            ph = np.array(self.plant.history, dtype=float)
            result = (_joint_record(ph, ch, n) if self.urdf else
                      _simulation_result(sc, ph, ch, self.plant.plant.state))
        window = (self.plant.first_tick_ns, self.plant.tick_stamp_ns) \
            if self.plant.first_tick_ns is not None else None
        return SimOutcome(self.run.name, 'lockstep' if self.lockstep else 'realtime', sc,
                          self.plant.k, wall, self.plant.counters(),
                          self.controller.counters(), published, recorded, result, ch, lat,
                          fresh, interrupted, window)

    def destroy(self) -> None:
        """Destroy the nodes and executor (and the context when created here)."""
        for n in self.nodes:                  # e.g. the recorder finishes its bag
            close = getattr(n, 'close', None)
            if close is not None:
                try:
                    close()
                except Exception:  # noqa: BLE001 - best effort on teardown
                    pass
        ex = getattr(self, 'executor', None)
        for n in self.nodes:
            if ex is not None:
                try:
                    ex.remove_node(n)
                except Exception:  # noqa: BLE001
                    pass
            n.destroy_node()
        self.nodes = []
        if ex is not None:
            ex.shutdown()
            self.executor = None
        if self._owns_context:
            release_context()
            self._owns_context = False


#: Discovery time given to other participants before manip-sim creates its publishers [s]:
#: on the loaded 2-core machine a running simulation was found after 0.15-2.2 s, sometimes
#: later (Fast DDS announces a participant again every 3 s).
DOMAIN_DISCOVERY_WAIT = 3.2
#: With other nodes on the domain: how long their set must stay unchanged, and the longest
#: wait of the check [s].
DOMAIN_SETTLE = 1.0
DOMAIN_DISCOVERY_MAX = 5.0
#: Real time: the longest wait for a listed, silent publisher of the run's topics to leave
#: the graph [s] (a killed process's entry expires with its DDS lease, about 20 s).
DOMAIN_STALE_MAX = 25.0
#: Period of the check for other publishers of the run's topics during a run [s].
DOMAIN_CHECK_PERIOD = 0.2


def run_topics(lockstep: bool) -> list[str]:
    """Return the topics the simulation publishes (one publisher each)."""
    topics = ['/joint_states', '/motor_states', '/reference', '/joint_commands',
              '/effort_controller/commands']
    return topics + (['/clock'] if lockstep else [])


def check_domain_free(mode: str) -> None:
    """
    Raise DomainInUseError when another participant already uses the run's topics.

    Runs before any publisher of the run exists: a node without publishers spins for
    discovery, counts the publishers of the run's topics on the graph and listens to
    ``/joint_states``, ``/reference`` and ``/clock``: it refuses when such publishers exist
    *and* their messages arrive (a process killed a moment ago stays on the graph until its
    DDS lease expires, about 20 s, without sending anything: then it goes on with a warning),
    or when another manip-sim is in its own check (two started at once). It waits
    :data:`DOMAIN_DISCOVERY_WAIT` on an empty domain and, while other nodes are being
    discovered or silent publishers are there, until the node set has been stable for
    :data:`DOMAIN_SETTLE` (at most :data:`DOMAIN_DISCOVERY_MAX`). In real time the controller
    refuses its inputs while a second publisher of them is listed, so a silent one is waited
    for until it leaves the graph (at most :data:`DOMAIN_STALE_MAX`, then refused); in
    lockstep the run goes on with a warning.
    """
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import QoSProfile
    from rclpy.qos import ReliabilityPolicy
    from rosgraph_msgs.msg import Clock
    from sensor_msgs.msg import JointState
    from trajectory_msgs.msg import JointTrajectory
    node = rclpy.create_node('manip_sim_domain_check')
    ex = SingleThreadedExecutor()
    ex.add_node(node)
    guard = DomainGuard(node, dict.fromkeys(run_topics(mode == 'lockstep'), 0))
    heard: dict = {}
    qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.BEST_EFFORT)
    for topic, typ in (('/joint_states', JointState), ('/reference', JointTrajectory),
                       ('/clock', Clock)):
        node.create_subscription(
            typ, topic, lambda _msg, t=topic: heard.__setitem__(t, heard.get(t, 0) + 1), qos,
            raw=True)
    own = (node.get_name(), node.get_namespace())
    found: list = []
    limit = DOMAIN_DISCOVERY_MAX
    try:
        start = changed = time.monotonic()
        seen: set = set()
        while True:
            spin_once(ex, 0.05)
            now = time.monotonic()
            others = set(node.get_node_names_and_namespaces()) - {own}
            if any(name == own[0] for name, _ in others):
                raise in_use('another manip-sim is starting there')
            found = guard.foreign()
            if found and heard:
                raise in_use(f'{found[0]}, sending ({", ".join(sorted(heard))})')
            if others != seen:
                seen, changed = others, now
            if now - start >= limit or (
                    now - start >= DOMAIN_DISCOVERY_WAIT and not found
                    and (not seen or now - changed >= DOMAIN_SETTLE)):
                if found and mode != 'lockstep' and limit < DOMAIN_STALE_MAX:
                    limit = DOMAIN_STALE_MAX
                    print(f'note: {found[0]} on the graph sent nothing for '
                          f'{DOMAIN_DISCOVERY_MAX:g} s (a stopped or killed process still '
                          'listed); in real time the controller refuses a second publisher '
                          f'of its inputs: waiting up to {DOMAIN_STALE_MAX:g} s for it to '
                          'leave', file=sys.stderr, flush=True)
                    continue
                break
    finally:
        ex.remove_node(node)
        ex.shutdown()
        node.destroy_node()
    if found and mode != 'lockstep':
        raise in_use(f'{found[0]}, still listed after {limit:g} s')
    if found:
        print(f'warning: {found[0]} on the graph sent nothing for {DOMAIN_DISCOVERY_MAX:g} s '
              '(a stopped or killed process still listed); going on', file=sys.stderr,
              flush=True)


def share_time_source(source, nodes) -> bool:
    """
    Drive the sim-time clocks of ``nodes`` from the time source of ``source`` (one process).

    Every node with ``use_sim_time`` has its own ``/clock`` subscription (rclpy's
    TimeSource): in one process that is one more delivery, deserialization and clock update
    per node and tick for the same message. Here the other nodes' own subscriptions are
    dropped and their clocks attached to ``source``'s time source, which sets every attached
    clock from each ``/clock`` message (the same values, so nothing else changes). Returns
    False (nothing changed) where rclpy's time source is not reachable.
    """
    main = getattr(source, '_time_source', None)
    if main is None or not hasattr(main, 'attach_clock'):
        return False
    for node in nodes:
        own = getattr(node, '_time_source', None)
        if own is None or not hasattr(own, 'detach_node'):
            continue
        own.detach_node()                 # destroys its /clock subscription
        main.attach_clock(node.get_clock())
    return True


def drive_time_source(clock_publisher, source) -> bool:
    """
    Set the sim-time clocks of ``source``'s time source as ``clock_publisher`` sends ``/clock``.

    In one process the plant's ``/clock`` need not travel through DDS to the time source of
    the nodes (:func:`share_time_source`): its publisher hands each time to the time source
    as it sends it, and the time source's own subscription is dropped. The clocks take the
    same values as from the subscription, and take them before any message sent after the
    clock is delivered. Returns False (nothing changed) where rclpy's time source is not
    reachable.
    """
    from rosgraph_msgs.msg import Clock
    main = getattr(source, '_time_source', None)
    if clock_publisher is None or main is None or not hasattr(main, 'clock_callback'):
        return False
    main.detach_node()                  # destroys its /clock subscription
    msg = Clock()
    stamp = msg.clock
    send = clock_publisher.publish

    def publish(raw) -> None:
        send(raw)
        t_ns, _ = decode_clock(raw)
        if t_ns is None:
            return
        try:
            stamp.sec, stamp.nanosec = divmod(t_ns, 1_000_000_000)
            main.clock_callback(msg)
        except Exception as exc:  # noqa: BLE001 - never stops the plant's tick
            callback_failed(source, 'clock', exc)
    clock_publisher.publish = publish
    return True


#: Wall-time safety watchdogs of the controller in lockstep [s] (see docs/ros.md).
LOCKSTEP_SAFETY_TIMEOUT = 5.0


def lockstep_safety_defaults(values: dict) -> dict:
    """
    Return the controller values with the wall-time safety watchdogs of lockstep.

    Both watchdogs are set to :data:`LOCKSTEP_SAFETY_TIMEOUT` unless given.

    In lockstep the controller waits for the plant by design, so a stall of the process (the
    machine busy with other work) must not look like a dead plant: the watchdogs act on wall
    time and would change the commands, making the run non-deterministic. The loop's liveness
    is the plant's ``lockstep_timeout``; the long watchdogs still catch a dead plant.
    """
    known = {s.name for s in safety_specs()}
    out = dict(values)
    for key in ('safety.state_timeout', 'safety.reference_timeout'):
        if key in known:
            out.setdefault(key, LOCKSTEP_SAFETY_TIMEOUT)
    return out


def _resolved_values(node) -> dict:
    out = {}
    for name in node.values:
        value = node.get_parameter(name).value
        out[name] = list(value) if isinstance(value, (list, tuple)) or hasattr(
            value, 'tolist') else value
    return out


def _arm_run_info(name: str, plant, trajectory) -> ArmRunInfo:
    """Run facts of an arm from its URDF: late window from half the run, at most 5 s."""
    duration = plant.config.duration
    return ArmRunInfo(name, duration, plant.config.control_rate, tuple(plant.joints),
                      dict(trajectory.config.trajectory),
                      min(Scenario().late_window_start, 0.5 * duration))


def _joint_record(ph: np.ndarray, ch: np.ndarray, n: int) -> JointRecord:
    """
    Summary records of n joints from the nodes' histories.

    Plant rows ``(t, q, qd, q_meas, qd_meas, tau, tau_joint, i, V)`` and controller rows
    ``(t, q_meas, q_d, qd_d, qdd_d, tau, saturated)``, n values each.
    """
    k = min(len(ph), len(ch))
    ph, ch = ph[:k], ch[:k]
    return JointRecord(ph[:, 0], ph[:, 1:1 + n] - ch[:, 1 + n:1 + 2 * n],
                       ch[:, 1 + 4 * n:1 + 5 * n], ch[:, 1 + 5 * n:1 + 6 * n].astype(bool))


def _simulation_result(scenario: Scenario, ph: np.ndarray, ch: np.ndarray, final_state):
    """Build a SimulationResult (the offline record type) from the nodes' histories."""
    n = min(len(ph), len(ch))
    ph, ch = ph[:n], ch[:n]
    return SimulationResult(
        scenario=scenario, t=ph[:, 0], q=ph[:, 1:3], qd=ph[:, 3:5], q_meas=ph[:, 5:7],
        qd_meas=ph[:, 7:9], q_d=ch[:, 3:5], qd_d=ch[:, 5:7], qdd_d=ch[:, 7:9],
        tau_cmd=ph[:, 9:11], tau_joint=ph[:, 11:13], current=ph[:, 13:15],
        voltage=ph[:, 15:17], saturated=ch[:, 11:13].astype(bool),
        final_state=np.asarray(final_state))


# --------------------------------------------------------------------------------------------
# summary

def tracking_summary(out: SimOutcome) -> dict:
    """
    Return the per-joint tracking figures of a run.

    Error ``e = q - q_d`` [rad] (true q in lockstep, the measured q the controller used in
    real time), command and saturation.
    """
    sc = out.scenario
    if out.result is not None:
        t, e = out.result.t, out.result.error
        tau, sat = out.result.tau_cmd, out.result.saturated
        source = 'true q'
    else:
        ch = out.controller_history
        if ch is None or len(ch) == 0:
            return {}
        n = (ch.shape[1] - 1) // 6
        t = ch[:, 0] - ch[0, 0]
        e = ch[:, 1:1 + n] - ch[:, 1 + n:1 + 2 * n]
        tau, sat = ch[:, 1 + 4 * n:1 + 5 * n], ch[:, 1 + 5 * n:1 + 6 * n].astype(bool)
        source = 'measured q'
    if len(t) == 0:
        return {}
    window = late_window(sc, out.simulated_time)
    late = t >= window.start
    s = {
        'error_source': source,
        'late_window': window,
        'rms': np.sqrt(np.mean(e ** 2, axis=0)),
        'max_abs': np.max(np.abs(e), axis=0),
        'late_max_abs': np.max(np.abs(e[late]), axis=0) if late.any() else None,
        'late_rms': np.sqrt(np.mean(e[late] ** 2, axis=0)) if late.any() else None,
        'final_abs': np.abs(e[-1]),
        'tau_max_abs': np.max(np.abs(tau), axis=0),
        'saturated_pct': 100.0 * np.mean(sat, axis=0),
    }
    if out.latencies_ns is not None and len(out.latencies_ns) and out.state_window_ns:
        lat = out.latencies_ns[out.latency_fresh] if out.latency_fresh.any() else \
            out.latencies_ns
        s['latency_ms'] = {'p50': np.percentile(lat, 50) * 1e-6,
                           'p99': np.percentile(lat, 99) * 1e-6, 'max': lat.max() * 1e-6,
                           'fresh_pct': 100.0 * out.latency_fresh.mean()}
        # controller ticks executed in the wall-clock window of the run, against the ticks
        # due in it at the control rate
        period_ns = 1e9 / sc.control_rate
        first, last = out.state_window_ns
        ch = out.controller_history
        compute_ns = np.round(ch[:, 0] * 1e9).astype(np.int64) + out.latencies_ns
        end = last + period_ns
        done = int(np.count_nonzero((compute_ns >= first) & (compute_ns < end)))
        expected = int(round((end - first) / period_ns))
        s['controller_ticks'] = (done, max(expected, 1))
    return s


def format_summary(out: SimOutcome, s: dict, joints) -> str:
    """Return the text manip-sim prints."""
    sc = out.scenario
    lines = [f'manip-sim: {out.name} | {out.mode} | {out.simulated_time:.3f} s simulated '
             f'({out.ticks} ticks at {sc.control_rate:g} Hz) in {out.wall_time:.2f} s wall, '
             f'real-time factor {out.real_time_factor:.2f}x'
             + (' | INTERRUPTED' if out.interrupted else '')]
    if not s:
        lines.append('no ticks ran')
        return '\n'.join(lines)
    width = max([12] + [len(j) + 1 for j in joints])

    def row(label, arr, fmt='{:.5f}'):
        return f'  {label:<34}' + ''.join(f'{fmt.format(v):>{width}}' for v in arr)

    lines.append(f'tracking error e = q - q_d [rad] ({s["error_source"]})'.ljust(36)
                 + ''.join(f'{j:>{width}}' for j in joints))
    lines.append(row('RMS', s['rms']))
    lines.append(row('max |e|', s['max_abs']))
    if s['late_max_abs'] is not None:
        start = s['late_window'].start
        lines.append(row(f'RMS for t >= {start:.4g} s', s['late_rms']))
        lines.append(row(f'max |e| for t >= {start:.4g} s', s['late_max_abs']))
    lines.append(row('|e| at the end', s['final_abs']))
    lines.append(row('max |tau_cmd| [N m]', s['tau_max_abs'], '{:.3f}'))
    lines.append(row('saturated [% of ticks]', s['saturated_pct'], '{:.2f}'))
    pc = out.plant_counters
    late = (f', {pc["missed_ticks"]} late timer periods caught up' if out.mode == 'realtime'
            else '')
    lines.append(f'plant: {pc["command_timeouts"]} command timeouts, {pc["refused_commands"]} '
                 f'refused commands, {pc["watchdog_trips"]} watchdog trips{late}; controller: '
                 f'{out.controller_counters["ticks"]} ticks')
    if 'latency_ms' in s:
        lat = s['latency_ms']
        done, expected = s['controller_ticks']
        lines.append(f'real time: controller ticks {done}/{expected} '
                     f'({100.0 * done / expected:.2f} %), state->command latency p50 '
                     f'{lat["p50"]:.3f} ms, p99 {lat["p99"]:.3f} ms, max {lat["max"]:.3f} ms')
    if out.recorded:
        total = sum(out.recorded.values())
        lines.append(f'bag: {total} messages: ' + ', '.join(
            f'{t} {n}' for t, n in out.recorded.items()))
    return '\n'.join(lines)


def lesson_text(out: SimOutcome, s: dict, joints) -> str:
    """
    Return the lines that explain the run's late-window error.

    The perfect-model baseline (one extra offline run) and the ISS estimate beside it
    (:func:`manip_control.lesson.lesson`).
    """
    # the lesson runs the robustness bounds (scipy, numba): not for --help or a node's start
    from manip_control.lesson import format_lesson
    from manip_control.lesson import lesson
    try:
        data = lesson(out.scenario, s['late_max_abs'], out.simulated_time)
    except PlantStateError as exc:
        return f'lesson: the perfect-model run failed ({exc})'
    return format_lesson(data, joints)


# --------------------------------------------------------------------------------------------
# CLI

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog='manip-sim',
        description='Run the plant, controller and trajectory ROS 2 nodes in one process on a '
                    'scenario and print the tracking summary.')
    p.add_argument('--config', default=None, metavar='FILE',
                   help='scenario file or preset name (config/*.yaml core format, e.g. '
                        'seed001), or a ROS params file (node: ros__parameters:); '
                        'default: the default scenario')
    p.add_argument('--urdf', default=None, metavar='FILE',
                   help='simulate any serial arm from its URDF (or xacro) file: every node '
                        'gets it as robot_description; --config is then a ROS params file '
                        '(default config/arm_sim_params.yaml)')
    p.add_argument('--duration', type=float, default=None, metavar='S',
                   help='simulated time [s] (default: the scenario duration)')
    p.add_argument('--mode', choices=MODES, default=None,
                   help='lockstep (default: deterministic, as fast as possible) or realtime '
                        '(wall clock, free-running timers)')
    p.add_argument('--bag', default=None, metavar='DIR',
                   help='record a rosbag2 bag (metadata version 8) with params.yaml to DIR')
    p.add_argument('--storage', choices=STORAGES, default='mcap',
                   help='bag storage (default mcap)')
    p.add_argument('--executor', choices=EXECUTORS, default='events',
                   help='rclpy executor (default events: rclpy.experimental.EventsExecutor)')
    p.add_argument('--rt-priority', type=int, default=0, metavar='N',
                   help='run the process with SCHED_FIFO priority N (1-99; needs the '
                        'privilege; 0 = normal scheduling, the default)')
    p.add_argument('--adapt', action='store_true',
                   help="adaptive computed torque: the controller's adaptation.enabled "
                        '(docs/adaptation.md); the estimates are printed at the end and '
                        'published on /controller/adaptation (recorded with --bag)')
    p.add_argument('--quiet', action='store_true', help='no node log lines')
    return p


def set_realtime_priority(priority: int) -> None:
    """
    Run this process with SCHED_FIFO at ``priority``.

    Set before rclpy starts its DDS threads, which inherit it. Raises ParameterError if not
    permitted.
    """
    if priority == 0:
        return
    if not 1 <= priority <= 99:
        raise ParameterError(f'--rt-priority: must be in 1..99 (got {priority})')
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
    except (OSError, AttributeError) as exc:
        raise ParameterError(f'--rt-priority: SCHED_FIFO not permitted here ({exc})') from None


def run(argv=None) -> tuple[int, SimOutcome | None]:
    """manip-sim without sys.exit: ``(exit code, outcome)``."""
    from rclpy.utilities import remove_ros_args

    argv = list(sys.argv[1:] if argv is None else argv)
    ros_args = argv[argv.index('--ros-args'):] if '--ros-args' in argv else []
    args = build_parser().parse_args(remove_ros_args(['manip-sim'] + argv)[1:])
    try:
        cfg = load_run_config(args.config, args.mode, args.duration, args.urdf, args.adapt)
        set_realtime_priority(args.rt_priority)
    except ParameterError as exc:
        return error_exit(str(exc)), None
    if args.bag is not None:
        bag = Path(args.bag)
        if bag.exists() and (not bag.is_dir() or any(bag.iterdir())):
            return error_exit(f'--bag {bag}: exists and is not an empty directory'), None
    _localhost_discovery()
    if args.quiet:
        ros_args = ros_args or ['--ros-args']
        ros_args += ['--log-level', 'warn']
    try:
        previous = init_keeping_context_on_signals(['manip-sim'] + ros_args)
    except Exception as exc:  # noqa: BLE001 - malformed --ros-args
        return error_exit(str(exc).splitlines()[0]), None
    runner = None
    try:
        try:
            check_domain_free(args.mode or cfg.values['plant'].get('mode', 'lockstep'))
        except DomainInUseError as exc:
            return error_exit(str(exc)), None
        try:
            runner = SimRunner(cfg, bag=args.bag, storage=args.storage,
                               executor=args.executor)
        except ParameterError as exc:
            return error_exit(str(exc)), None
        # what is built lives as long as this process: out of the collector's scans (a full
        # collection stopped every thread, the control thread too, for 100-330 ms)
        gc.collect()
        gc.freeze()
        outcome = runner.execute()
        if runner.domain_error:
            return error_exit(runner.domain_error), outcome
        if runner.plant.exit_code:     # a non-finite state stopped the plant: no summary
            return error_exit(runner.plant.failure, runner.plant.exit_code), outcome
        summary = tracking_summary(outcome)
        print(format_summary(outcome, summary, runner.scenario.joints), flush=True)
        if summary.get('late_max_abs') is not None and not runner.urdf:
            print(lesson_text(outcome, summary, runner.scenario.joints), flush=True)
        law = runner.controller.adaptation
        if law is not None:
            truth = (true_two_link_parameters(truth_nominal(cfg.scenario))
                     if cfg.scenario is not None else None)
            print(format_adaptation(law, truth), flush=True)
        if args.bag is not None:
            print(f'bag written to {args.bag}', flush=True)
        return (130 if outcome.interrupted or stop_requested() else 0), outcome
    except KeyboardInterrupt:
        return 130, None
    except Exception as exc:  # noqa: BLE001 - e.g. discovery failure, bag errors
        return error_exit(f'{type(exc).__name__}: {exc}', 1), None
    finally:
        defer_signals()
        if runner is not None:
            runner.destroy()
        release_context()
        end_signal_watch()
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def main(argv=None) -> int:
    """Console script ``manip-sim`` (also ``ros2 run manip_control sim``)."""
    code, _ = run(argv)
    return code


if __name__ == '__main__':
    sys.exit(main())
