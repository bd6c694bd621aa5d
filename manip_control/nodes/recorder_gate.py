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
Hold a lockstep node's first output until a recorder in another process will record it.

DDS sends a sample only to the readers its writer has matched, and the two sides of a match
are found separately: the recorder reporting its subscriptions matched (its side) does not
mean that a publisher of another process has matched them (the writer's side). A sample
published in between is not delivered to the recorder: the bag misses it, without a word.

:class:`RecorderGate` reads the recorder's readiness topic (``matched N/N: /t1 /t2 ...``,
:mod:`manip_control.nodes.recorder_node`) and tells whether every publisher of the node on a
recorded topic has matched the recorder: the graph shows the recorder's subscription on the
topic, and the publisher has matched as many subscriptions as the graph shows (one DDS
discovery event updates both, so a publisher that has matched them all has matched the
recorder's).
"""

from __future__ import annotations

import time
from typing import Callable, Mapping

from rclpy.qos import DurabilityPolicy
from rclpy.qos import QoSProfile
from rclpy.qos import ReliabilityPolicy

#: QoS of the readiness topic: the recorder publishes a report only when it changes.
READY_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                       durability=DurabilityPolicy.TRANSIENT_LOCAL)


def format_ready(matched: list[str], wanted: int) -> str:
    """Return the recorder's readiness report: ``matched K/N: /t1 /t2 ...`` (K matched)."""
    return f'matched {len(matched)}/{wanted}: ' + ' '.join(matched)


def parse_ready(text: str) -> set[str] | None:
    """
    Return the recorded topics of a readiness report once all are matched, else None.

    ``text``: as :func:`format_ready` writes it; anything else (or K < N) gives None.
    """
    head, _, rest = text.partition(': ')
    try:
        k, n = (int(x) for x in head.removeprefix('matched ').split('/'))
    except ValueError:
        return None
    return set(rest.split()) if k == n and n > 0 else None


class RecorderGate:
    """
    Whether a recorder records what this node publishes from now on.

    Parameters
    ----------
    node : rclpy.node.Node
        The node whose publishers (``node.publishers``) are checked.
    ready_topic : str
        The recorder's readiness topic (e.g. ``recorder/ready``).
    timeout : float
        :meth:`ready` opens after this long [s, wall time] from its first call even if the
        publishers have not matched, with one warning naming them (a bag missing the first
        messages rather than a run that never starts).
    in_process : mapping, optional
        Topic -> readers of this process that take the topic from its publisher (a
        recorder's tap), added to the publisher's matched count.

    """

    def __init__(self, node, ready_topic: str, timeout: float,
                 in_process: Mapping[str, int] | None = None) -> None:
        from std_msgs.msg import String
        self.node = node
        self.timeout = float(timeout)
        self.in_process = in_process if in_process is not None else {}
        #: the recorded topics, once the recorder reported every one matched
        self.recorded: set[str] | None = None
        self.opened = False
        self._since: float | None = None
        self.subscription = node.create_subscription(String, ready_topic, self._on_ready,
                                                     READY_QOS)

    def _on_ready(self, msg) -> None:
        topics = parse_ready(msg.data)
        if topics is not None:
            self.recorded = topics

    def missing(self) -> list[str]:
        """
        Return what the recorder does not record yet: its report, or topics of this node.

        Empty when the recorder reported every topic matched and each publisher of the node
        on a recorded topic has matched the recorder's subscription.
        """
        if self.recorded is None:
            return ['the recorder readiness report']
        node = self.node
        recorders = {(i.node_name, i.node_namespace)
                     for i in node.get_publishers_info_by_topic(
                         self.subscription.topic_name)}
        out = []
        for pub in node.publishers:
            topic = pub.topic_name
            if topic not in self.recorded:
                continue
            subs = node.get_subscriptions_info_by_topic(topic)
            matched = pub.get_subscription_count() + self.in_process.get(topic, 0)
            if (not any((i.node_name, i.node_namespace) in recorders for i in subs)
                    or matched < len(subs)):
                out.append(topic)
        return out

    def ready(self, now: Callable[[], float] = time.monotonic) -> bool:
        """
        Tell whether the node may publish; once True, always True.

        True when :meth:`missing` is empty, or :attr:`timeout` after the first call (warned).
        """
        if self.opened:
            return True
        t = now()
        if self._since is None:
            self._since = t
        missing = self.missing()
        if missing and t - self._since <= self.timeout:
            return False
        if missing:
            self.node.get_logger().warning(
                f'the recorder has not matched {", ".join(missing)} within {self.timeout:g} s; '
                'going on (the bag may miss the first messages)')
        self.opened = True
        return True

    def destroy(self) -> None:
        """Destroy the readiness subscription."""
        self.node.destroy_subscription(self.subscription)
