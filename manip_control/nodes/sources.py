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
Who publishes on a topic: message info per message and the ROS graph.

* :class:`WithMessageInfo` wraps a subscription callback so that it gets the message info
  (``publication_sequence_number``, timestamps) on every rclpy 7 executor: rclpy picks the
  "message + info" calling convention from the callback's signature; the
  SingleThreadedExecutor then calls ``cb(msg, info)``, the EventsExecutor ``cb((msg, info))``.
  rclpy 7 does not expose the publisher GID per message, so the per-message source check
  (:class:`manip_control.safety.SourceGuard`) uses the writer's sequence number.
* :func:`publishers` lists the publishers of a topic from the graph (node name and GID).
* :class:`DomainGuard` is the check of ``manip-sim`` that no other participant publishes on
  its topics (another simulation, a robot driver, a bag replay on the same ROS domain).
"""

from __future__ import annotations

import inspect
import os
from typing import Callable

__all__ = ['WithMessageInfo', 'sequence_number', 'publishers', 'describe', 'DomainGuard',
           'DomainInUseError']

_TWO_ARGS = inspect.Signature([
    inspect.Parameter('msg', inspect.Parameter.POSITIONAL_ONLY),
    inspect.Parameter('info', inspect.Parameter.POSITIONAL_ONLY)])


class WithMessageInfo:
    """
    A subscription callback ``fn(msg, info)`` that every rclpy 7 executor calls with the info.

    ``info`` is rclpy's message-info dict (``publication_sequence_number`` etc.) or None.
    """

    __signature__ = _TWO_ARGS

    def __init__(self, fn: Callable):
        self.fn = fn

    def __call__(self, *args):
        """Unpack ``(msg, info)`` given as two arguments or as one tuple."""
        if len(args) == 1:
            pair = args[0]
            if type(pair) is tuple and len(pair) == 2:
                return self.fn(pair[0], pair[1])
            return self.fn(pair, None)
        return self.fn(args[0], args[1])


def sequence_number(info) -> int | None:
    """Return the publication sequence number in a message-info dict (None: unsupported)."""
    if not info:
        return None
    seq = info.get('publication_sequence_number')
    return seq if type(seq) is int else None


def describe(info) -> str:
    """Return ``/ns/node (gid 01.0f.…)`` for a TopicEndpointInfo."""
    gid = '.'.join(f'{b:02x}' for b in list(info.endpoint_gid)[:16])
    if info.node_name == '_NODE_NAME_UNKNOWN_':     # the node not discovered yet
        return f'a participant (gid {gid})'
    ns = info.node_namespace.rstrip('/')
    return f'{ns}/{info.node_name} (gid {gid})'


def publishers(node, topic: str) -> list:
    """List the publishers of ``topic`` (TopicEndpointInfo; the name resolved as the node's)."""
    from rclpy.expand_topic_name import expand_topic_name
    full = expand_topic_name(topic, node.get_name(), node.get_namespace())
    return list(node.get_publishers_info_by_topic(full))


class DomainInUseError(RuntimeError):
    """Another participant publishes on the topics of this run (one-line message)."""


class DomainGuard:
    """
    Refuse to share a ROS domain: count the publishers of the run's topics on the graph.

    Parameters
    ----------
    node : rclpy node
        Any node of the run (its graph view is the participant's).
    expected : mapping topic -> int
        How many publishers this process itself has on each topic.

    """

    def __init__(self, node, expected: dict):
        self.node = node
        self.expected = dict(expected)

    def foreign(self) -> list[str]:
        """List ``'/joint_states: 2 publishers (…)'`` for each topic with more than expected."""
        out = []
        for topic, n in self.expected.items():
            if self.node.count_publishers(topic) > n:
                infos = publishers(self.node, topic)
                if len(infos) > n:
                    out.append(f'{topic}: {len(infos)} publishers '
                               f'({", ".join(describe(i) for i in infos)})')
        return out

    def check(self) -> None:
        """
        Raise :class:`DomainInUseError` when another participant publishes on the topics.

        The message names the topic, the publishers and the domain, and says what to do.
        """
        found = self.foreign()
        if found:
            raise in_use(found[0])


def in_use(what: str) -> DomainInUseError:
    """Return the error for a ROS domain in use (``what`` says by whom)."""
    domain = os.environ.get('ROS_DOMAIN_ID', '0') or '0'
    return DomainInUseError(
        f'ROS domain {domain} is already in use: {what}; another simulation, driver or bag '
        'replay publishes there. Stop it or run with ROS_DOMAIN_ID set to a free domain')
