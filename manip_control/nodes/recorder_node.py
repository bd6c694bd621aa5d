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
Recorder node: a rosbag2 bag of the run, written without rosbag2 (mcap / sqlite3).

Subscribes to ``topics`` with ``raw=True`` (reliable, keep last ``qos_depth``) and writes the
serialized CDR bytes as they come, stamped with the receive time of the node clock (sim time
under ``use_sim_time``, as ``ros2 bag record --use-sim-time``), into a bag with metadata
version 8, MCAP by default (``storage: sqlite3`` on request), via
:class:`manip_control.bag_io.BagWriter`.

Beside ``metadata.yaml`` the bag directory gets the resolved parameters of the run:

* ``params.yaml`` -- the scenario in the core format (``load_scenario`` reads it, so the run
  can be replayed offline and checked);
* ``ros_params.yaml`` -- the nodes' ROS parameters (``node: ros__parameters:`` form; usable as
  ``--params-file``).

Standalone, the node fetches them from the parameter services of ``params_from`` (default
plant, controller, trajectory) once those nodes appear; manip-sim hands them over directly.
Types of the default topics are known; other topics are subscribed when a publisher appears
(type from the graph). The bag is finished (metadata written) on shutdown (Ctrl-C, SIGTERM).

Readiness: the node publishes on ``~/ready`` (``std_msgs/String``, reliable, transient local)
the recorded topics whose subscription has matched every publisher in the graph, as
``matched K/N: /t1 /t2 ...``, each time that changes, until all N are matched. Lockstep nodes
with ``wait_for_recorder: recorder/ready`` wait for ``matched N/N``, and for their own
publishers to match the recorder (:mod:`manip_control.nodes.recorder_gate`), before their
first message, so that the bag holds every topic from tick 0 in every launch form
(namespaces, remappings, one process).

Durability: the writer closes an MCAP chunk (commits a sqlite3 transaction) when it holds
1 MiB or every ``flush_period`` (1 s of wall time, also from a timer when no message comes),
so a killed recorder loses at most the last chunk or the last second; the bag directory is
then read without ``metadata.yaml`` (``manip-analyze`` recovers it,
``manip-bag reindex DIR`` writes the metadata). A write error (full disk, file-size limit,
permissions) is logged once at once; the recorder goes on counting what it cannot record,
``metadata.yaml`` counts what the file holds, and shutdown reports how many messages were not
recorded and from when, with exit code 1. The per-message path stores the raw bytes only (no
deserialization).
"""

from __future__ import annotations

from collections import deque
import importlib
from pathlib import Path
import sys
import time

from manip_control.bag_io import BagWriter
from manip_control.bag_io import make_qos
from manip_control.bag_io import qos_from_profile
from manip_control.bag_io import RecordingError
from manip_control.nodes.cdr import decode_clock
from manip_control.nodes.common import data_qos
from manip_control.nodes.common import extend_stop_bound
from manip_control.nodes.common import guarded
from manip_control.nodes.common import PUBLISH_DEPTH
from manip_control.nodes.common import run_node
from manip_control.nodes.common import spin_once
from manip_control.nodes.common import steady_clock
from manip_control.nodes.recorder_gate import format_ready
from manip_control.nodes.ros_params import declare_parameters
from manip_control.nodes.ros_params import DEFAULT_RECORD_TOPICS
from manip_control.nodes.ros_params import NODE_NAMES
from manip_control.nodes.ros_params import params_yaml
from manip_control.nodes.ros_params import print_node_help
from manip_control.nodes.ros_params import recorder_specs
from manip_control.nodes.ros_params import scenario_from_ros
from manip_control.nodes.ros_params import SPECS
from manip_control.nodes.ros_params import STORAGES
from manip_control.nodes.ros_params import wants_help
from manip_control.parameters import ParameterError
from rclpy.node import Node
from rclpy.parameter import parameter_value_to_python

ROS_PARAMS_FILE = 'ros_params.yaml'
#: How often [s of wall time] the recorder checks its matching until every topic is matched.
READY_PERIOD = 0.02
#: Longest time [s of wall time] recorded data stays in memory before it reaches the file.
FLUSH_PERIOD = 1.0
#: How often [s of wall time] the publishers of a tapped topic are counted on the graph.
TAP_WATCH_PERIOD = 0.1
#: Tapped messages kept to recognise their copies on a topic that also has outside publishers.
TAP_RECENT = 1000


def message_class(msgtype: str):
    """``'sensor_msgs/msg/JointState'`` -> the rclpy message class."""
    pkg, _, name = msgtype.rpartition('/')
    module = importlib.import_module(pkg.replace('/', '.'))
    return getattr(module, name)


class RecorderNode(Node):
    """
    Records topics into a rosbag2 bag.

    Parameters
    ----------
    node_name : str
    parameter_overrides : list of rclpy Parameter, optional
    **kwargs
        Passed to ``rclpy.node.Node``.

    """

    def __init__(self, node_name: str = 'recorder', *, parameter_overrides=None, **kwargs):
        super().__init__(node_name, parameter_overrides=parameter_overrides, **kwargs)
        self.values = declare_parameters(self, recorder_specs(), reject_unknown=False)
        v = self.values
        if v['storage'] not in STORAGES:
            raise ParameterError(f'parameter storage (node {self.get_name()}): must be one of '
                                 f'{", ".join(STORAGES)} (got {v["storage"]!r})')
        topics = list(v['topics'] or [])
        for t in topics:
            if not t.startswith('/'):
                raise ParameterError(f'parameter topics (node {self.get_name()}): {t!r} is not '
                                     'an absolute topic name')
        bag = v['bag'] or time.strftime('runs/bag_%Y%m%d_%H%M%S')
        self.bag_path = Path(bag)
        self.writer = BagWriter(self.bag_path, v['storage'], flush_period=FLUSH_PERIOD)
        self.writer.open()
        self._closed = False
        self.failure_logged = False
        self._depth = int(v['qos_depth'])
        self._wanted = topics
        self._subs: dict = {}
        self._taps: dict = {}           # tapped topic -> _Tap
        self._tap_watch = None
        self._clock_ns: int | None = None   # the last /clock this process published [ns]
        self.callback_errors = 0
        self.write_errors = 0
        self._run_params: dict | None = None
        self._ros_values: dict = {}
        self._param_clients: dict = {}
        self._pending_nodes = [n for n in (v['params_from'] or []) if n]
        for topic in topics:
            if topic in DEFAULT_RECORD_TOPICS:
                self._subscribe(topic, DEFAULT_RECORD_TOPICS[topic])
        self._discovery = self.create_timer(0.5, self._discover, clock=steady_clock())
        from rclpy.qos import DurabilityPolicy
        from rclpy.qos import QoSProfile
        from rclpy.qos import ReliabilityPolicy
        from std_msgs.msg import String
        self._ready_msg = String
        self._ready_pub = self.create_publisher(String, '~/ready', QoSProfile(
            depth=1, reliability=ReliabilityPolicy.RELIABLE,
            durability=DurabilityPolicy.TRANSIENT_LOCAL))
        self._ready_text = ''
        self._readiness = self.create_timer(READY_PERIOD, self._announce,
                                            clock=steady_clock())
        self._flusher = self.create_timer(FLUSH_PERIOD / 4, self._flush_if_due,
                                          clock=steady_clock())
        self.get_logger().info(f'recording {len(topics)} topics to {self.bag_path} '
                               f'({v["storage"]})')

    # -- topics -----------------------------------------------------------------------------
    def _subscribe(self, topic: str, msgtype: str) -> None:
        try:
            cls = message_class(msgtype)
        except (ImportError, AttributeError, ValueError) as exc:
            self.get_logger().error(f'{topic}: cannot record type {msgtype} ({exc})')
            self._subs[topic] = None
            return
        offered = [qos_from_profile(info.qos_profile)
                   for info in self.get_publishers_info_by_topic(topic)]
        if not offered:
            offered = [qos_from_profile(data_qos(PUBLISH_DEPTH)) if 'diagnostics' not in topic
                       else make_qos('reliable', 'volatile', depth=10)]
        self.writer.add_topic(topic, msgtype, qos=offered)
        self._subs[topic] = self.create_subscription(cls, topic, self._on_message(topic),
                                                     data_qos(self._depth), raw=True)

    def _on_message(self, topic: str):
        """Return the callback that records a serialized message of ``topic`` as it comes."""
        record = self.record
        # the rcl clock itself: about 1 us per message against 7 us for Clock.now(), which
        # builds a Time object (measured here; it is the same time, sim time included)
        now = self.get_clock().handle.get_now

        def on_message(raw: bytes) -> None:
            record(topic, now().nanoseconds, raw)
        return on_message

    def record(self, topic: str, stamp_ns: int, raw) -> None:
        """Write one serialized message; an error is logged and counted, never raised."""
        try:
            self.writer.write(topic, stamp_ns, raw)
        except RecordingError as exc:
            self._log_failure(exc)
        except Exception as exc:  # noqa: BLE001 - e.g. after close(); never crash
            self.write_errors += 1
            self.get_logger().error(f'{topic}: not recorded ({exc})',
                                    throttle_duration_sec=1.0)

    def tap(self, publisher) -> None:
        """
        Record what ``publisher`` (of this process, serialized messages) publishes, as it does.

        Replaces the subscription to the publisher's topic: the message is written after the
        publisher has sent it, stamped with :meth:`receive_time_ns`; a recording error is
        logged and counted and never reaches the publishing node. The topic must be one of
        ``topics``. Tapping a topic again (a node that made a new publisher for it) moves the
        tap to the new publisher.
        """
        topic = publisher.topic_name
        if topic not in self._wanted:
            raise ValueError(f'{topic} is not recorded by {self.get_name()}')
        old = self._taps.get(topic)
        if old is not None:             # a new publisher of the topic (e.g. reconfigured)
            old.remove()
            self._taps[topic] = _Tap(self, topic, publisher, old)
            return
        sub = self._subs.get(topic)
        if sub is not None:
            self.destroy_subscription(sub)
        if topic not in self.writer.topics:
            self.writer.add_topic(topic, _msgtype(publisher.msg_type),
                                  qos=[qos_from_profile(publisher.qos_profile)])
        self._taps[topic] = _Tap(self, topic, publisher)
        self._subs[topic] = None
        if self._tap_watch is None:
            self._tap_watch = self.create_timer(TAP_WATCH_PERIOD, self._watch_taps,
                                                clock=steady_clock())

    @property
    def tapped_topics(self) -> set:
        """Return the topics taken from their publishers in this process (:meth:`tap`)."""
        return set(self._taps)

    def follow_clock(self, publisher) -> None:
        """
        Stamp tapped messages with the last ``/clock`` that ``publisher`` (in process) sent.

        For a lockstep run, whose time is the ``/clock`` of its plant.
        """
        send = publisher.publish

        def publish(raw) -> None:
            send(raw)
            t_ns, _ = decode_clock(raw)
            if t_ns is not None:
                self._clock_ns = t_ns
        publisher.publish = publish

    def receive_time_ns(self) -> int:
        """
        Return the stamp of a tapped message [ns]: the node clock's now.

        In a lockstep process (:meth:`follow_clock`), the last ``/clock`` it published: the
        node clock follows ``/clock`` only when its delivery runs, after the messages that the
        publisher of the clock sends in the same tick. Never raises (the system time if the
        clock cannot be read, counted in ``callback_errors``).
        """
        if self._clock_ns is not None:
            return self._clock_ns
        try:
            return self.get_clock().handle.get_now().nanoseconds
        except Exception:  # noqa: BLE001 - never stops the publisher (e.g. while shutting down)
            self.callback_errors += 1
            return time.time_ns()

    @guarded
    def _watch_taps(self) -> None:
        """Subscribe to a tapped topic as well once a publisher outside the taps appears."""
        for topic, tap in self._taps.items():
            if tap.shared is None and self.count_publishers(topic) > 1:
                tap.share()

    def _log_failure(self, exc: Exception) -> None:
        if not self.failure_logged:
            self.failure_logged = True
            self.get_logger().error(f'{exc}; recording goes on counting the lost messages')

    def _flush_if_due(self) -> None:
        try:
            self.writer.flush_if_due()
        except RecordingError as exc:
            self._log_failure(exc)
        except Exception:  # noqa: BLE001 - e.g. after close()
            pass

    @guarded
    def _discover(self) -> None:
        missing = [t for t in self._wanted if t not in self._subs]
        if missing:
            types = dict(self.get_topic_names_and_types())
            for topic in missing:
                if types.get(topic):
                    self._subscribe(topic, types[topic][0])
        if self._pending_nodes:
            self._fetch_parameters()

    def all_matched(self) -> bool:
        """Tell whether every subscription is matched with every publisher in the graph."""
        for topic, sub in self._subs.items():
            tap = self._taps.get(topic)
            if tap is not None:
                sub = tap.shared      # its own publisher needs no match
                if sub is not None and sub.get_publisher_count() < self.count_publishers(topic):
                    return False
            elif sub is not None and sub.get_publisher_count() < self.count_publishers(topic):
                return False
        return True

    def matched_topics(self) -> list[str]:
        """Return the recorded topics whose subscription matched every publisher (>= 1)."""
        out = []
        for topic in self._wanted:
            if topic in self._taps:
                out.append(topic)
                continue
            sub = self._subs.get(topic)
            if sub is not None and sub.get_publisher_count() >= max(
                    1, self.count_publishers(topic)):
                out.append(topic)
        return out

    @guarded
    def _announce(self) -> None:
        """Publish the matched topics on ``~/ready`` when they change; stop when all are."""
        matched = self.matched_topics()
        text = format_ready(matched, len(self._wanted))
        if text != self._ready_text:
            self._ready_text = text
            self._ready_pub.publish(self._ready_msg(data=text))
        if len(matched) == len(self._wanted):
            self._readiness.cancel()
            self.get_logger().info(f'every recorded topic matched ({len(matched)})')

    def counts(self) -> dict:
        """Messages received per topic (recorded, or counted as lost after a write error)."""
        return self.writer.counts

    # -- run parameters ---------------------------------------------------------------------
    def set_run_parameters(self, scenario: dict, ros_values: dict) -> None:
        """Hand over the resolved parameters (manip-sim) and write them now."""
        self._run_params = scenario
        self._ros_values = ros_values
        self._pending_nodes = []
        self._write_params()

    def _fetch_parameters(self) -> None:
        from rclpy.parameter_client import AsyncParameterClient
        for node in list(self._pending_nodes):
            client = self._param_clients.get(node)
            if client is None:
                client = AsyncParameterClient(self, node)
                self._param_clients[node] = client
            if getattr(client, '_busy', False) or not client.services_are_ready():
                continue
            client._busy = True
            client.list_parameters(callback=lambda fut, n=node: self._on_list(n, fut))

    def _on_list(self, node: str, fut) -> None:
        client = self._param_clients[node]
        try:
            names = list(fut.result().result.names)
        except Exception as exc:  # noqa: BLE001 - service went away
            self.get_logger().warning(f'cannot list the parameters of {node}: {exc}')
            client._busy = False
            return
        client.get_parameters(names, callback=lambda f, n=node, k=names: self._on_get(n, k, f))

    def _on_get(self, node: str, names: list, fut) -> None:
        client = self._param_clients[node]
        try:
            values = [parameter_value_to_python(v) for v in fut.result().values]
        except Exception as exc:  # noqa: BLE001
            self.get_logger().warning(f'cannot get the parameters of {node}: {exc}')
            client._busy = False
            return
        self._ros_values[node] = {k: (list(v) if isinstance(v, (list, tuple)) else v)
                                  for k, v in zip(names, values)}
        if node in self._pending_nodes:
            self._pending_nodes.remove(node)
        self.get_logger().info(f'parameters of {node} fetched')
        if not self._pending_nodes:
            self._write_params()

    def _write_params(self) -> None:
        """Write params.yaml (scenario) and ros_params.yaml (nodes) into the bag directory."""
        ros = {}
        for node, vals in self._ros_values.items():
            known = {s.name for s in SPECS[node]()} if node in SPECS else None
            ros[node] = {k: v for k, v in vals.items()
                         if known is None or k in known or k == 'use_sim_time'}
        scenario = self._run_params
        # an arm from its URDF has no 2R scenario: ros_params.yaml (with the URDF) describes it
        urdf_run = any(v.get('robot_description') for v in ros.values())
        if scenario is None and not urdf_run and any(n in ros for n in NODE_NAMES):
            try:
                scenario = scenario_from_ros(ros, name='recorded').to_dict()
            except ParameterError as exc:
                self.get_logger().warning(f'params.yaml not written: {exc}')
        if scenario is not None:
            self.writer.write_params(scenario)
        if ros:
            (self.bag_path / ROS_PARAMS_FILE).write_text(params_yaml(
                ros, header='Resolved ROS parameters of the recorded run (--params-file).'))

    # -- shutdown ---------------------------------------------------------------------------
    def drain(self, executor, quiet: float = 0.1, limit: float = 5.0) -> None:
        """
        Record what already arrived before the stop (at most ``limit`` s).

        On Ctrl-C every process of a launch stops at once; messages already in this process's
        reader queues would otherwise be lost. Spins until nothing new came for ``quiet`` s.
        A recorder that the host starved can hold seconds of messages there (with 1 s, one
        stopped about 1000 ticks behind on a loaded host lost them); 5 s stays within
        launch's ``sigterm_timeout`` (15 s).
        """
        extend_stop_bound(limit)
        end = time.monotonic() + limit
        last, last_change = sum(self.counts().values()), time.monotonic()
        while time.monotonic() < end and time.monotonic() - last_change < quiet:
            spin_once(executor, 0.01, interruptible=False)
            now = sum(self.counts().values())
            if now != last:
                last, last_change = now, time.monotonic()

    def close(self) -> None:
        """Finish the bag (metadata.yaml); write the parameters fetched so far."""
        if self._closed:
            return
        self._closed = True
        for tap in self._taps.values():
            tap.remove()
        if self._pending_nodes and self._ros_values:
            self._write_params()
        elif self._pending_nodes:
            self.get_logger().warning(
                f'no parameters from {", ".join(self._pending_nodes)}: params.yaml not written')
        try:
            self.writer.close()
        except RecordingError as exc:
            self.get_logger().error(str(exc))
            raise
        total = sum(self.writer.durable.values())
        self.get_logger().info(f'bag {self.bag_path}: {total} messages')

    def destroy_node(self) -> None:
        try:
            self.close()
        finally:
            super().destroy_node()


def _msgtype(cls) -> str:
    """Return the type name of an rclpy message class (``'sensor_msgs/msg/JointState'``)."""
    return f'{cls.__module__.split(".")[0]}/msg/{cls.__name__}'


class _Tap:
    """
    The recording of one publisher of the recorder's process (see :meth:`RecorderNode.tap`).

    ``shared`` is the subscription taken once the topic also has publishers outside the
    process; from then on the tapped messages are remembered (``recent``) so that their DDS
    copies are dropped: DDS delivers a publisher's messages in order, so the first remembered
    message equal to a delivered one is its original, and those before it were sent before
    the subscription matched and will not come.
    """

    def __init__(self, recorder: RecorderNode, topic: str, publisher, before=None) -> None:
        self.recorder = recorder
        self.topic = topic
        self.publisher = publisher
        self.shared = before.shared if before is not None else None
        self.recent: deque | None = before.recent if before is not None else None
        self.dropped = before.dropped if before is not None else 0
        self._send = publisher.publish
        record = recorder.record        # never raises: the publishing node goes on
        stamp = recorder.receive_time_ns
        send = self._send

        def publish(raw) -> None:
            send(raw)
            record(topic, stamp(), raw)
            recent = self.recent
            if recent is not None:
                recent.append(bytes(raw))
        publisher.publish = publish

    def share(self) -> None:
        """Subscribe to the topic too (a publisher outside the process is on the graph)."""
        rec = self.recorder
        rec.get_logger().info(f'{self.topic}: {rec.count_publishers(self.topic)} publishers; '
                              'recording the ones outside this process through a subscription')
        self.recent = deque(maxlen=TAP_RECENT)
        record = rec._on_message(self.topic)

        def on_message(raw: bytes) -> None:
            recent = self.recent
            if raw in recent:           # a tapped message: recorded already
                while recent.popleft() != raw:
                    pass
                self.dropped += 1
                return
            record(raw)
        self.shared = rec.create_subscription(self.publisher.msg_type, self.topic, on_message,
                                              data_qos(rec._depth), raw=True)

    def remove(self) -> None:
        """Stop recording the publisher (it publishes as before)."""
        if self.publisher.publish is not self._send:
            self.publisher.publish = self._send


def main(args=None) -> int:
    """``ros2 run manip_control recorder [--ros-args -p bag:=DIR ...]``; ``--help``: params."""
    if wants_help(args):
        return print_node_help('recorder', __doc__, recorder_specs())
    return run_node(RecorderNode, args)


if __name__ == '__main__':
    sys.exit(main())
