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
Joint matching by name and value checks at the edge of the nodes.

Called at 1 kHz on the fields decoded by :mod:`manip_control.nodes.cdr`, so everything is
scalar Python and never raises on bad input: functions return ``(values, None)`` or
``(None, reason)``. Extra names in a message are ignored; a missing or repeated configured
joint, an array whose length differs from the names, or a non-finite value is an error.
"""

from __future__ import annotations

import math
from typing import Sequence

_isfinite = math.isfinite


def stamp_ns(stamp) -> int:
    """builtin_interfaces/Time -> integer nanoseconds."""
    return stamp.sec * 1_000_000_000 + stamp.nanosec


def set_stamp(stamp, ns: int) -> None:
    """Write integer nanoseconds into a builtin_interfaces/Time (in place)."""
    sec, nsec = divmod(int(ns), 1_000_000_000)
    stamp.sec = sec
    stamp.nanosec = nsec


class NameMatcher:
    """
    Index of each configured joint in a message's name list, cached per name list.

    Parameters
    ----------
    joints : sequence of str
        The configured joint names, in the node's order.

    """

    def __init__(self, joints: Sequence[str]):
        self.joints = tuple(joints)
        self._names: list | None = None
        self._result: tuple = (None, 'no names')

    def match(self, names) -> tuple[list[int] | None, str | None]:
        """``(indices, None)`` or ``(None, reason)`` for a message's name list."""
        if names == self._names:
            return self._result
        names = list(names)
        idx = []
        reason = None
        for j in self.joints:
            count = names.count(j)
            if count == 0:
                reason = f'joint {j} missing (got names {names})'
                break
            if count > 1:
                reason = f'joint {j} appears {count} times'
                break
            idx.append(names.index(j))
        self._names = names
        self._result = (None, reason) if reason else (idx, None)
        return self._result


def pick(seq, idx: list[int], n: int, field: str) -> tuple[list | None, str | None]:
    """Values of the configured joints from an array of ``n`` (= number of names) values."""
    if len(seq) != n:
        return None, f'{field} has {len(seq)} values for {n} names'
    out = [seq[i] for i in idx]
    for v in out:
        if not _isfinite(v):
            return None, f'{field} not finite ({v})'
    return out, None


def joint_state_values(names, position, velocity, matcher: NameMatcher):
    """Measured ``(q, qd)`` of the configured joints: ``((q, qd), None)`` or ``(None, why)``."""
    idx, reason = matcher.match(names)
    if reason:
        return None, reason
    n = len(names)
    q, reason = pick(position, idx, n, 'position')
    if reason:
        return None, reason
    qd, reason = pick(velocity, idx, n, 'velocity')
    if reason:
        return None, reason
    return (q, qd), None


def joint_command_values(names, effort, matcher: NameMatcher):
    """Torque command of the configured joints from a JointState's ``effort``, by name."""
    idx, reason = matcher.match(names)
    if reason:
        return None, reason
    return pick(effort, idx, len(names), 'effort')


def array_command_values(data, n: int):
    """Torque command from Float64MultiArray data (``joints`` order, exactly n values)."""
    if len(data) != n:
        return None, f'data has {len(data)} values, expected {n} (one per joint)'
    out = list(data)
    for v in out:
        if not _isfinite(v):
            return None, f'data not finite ({v})'
    return out, None


def reference_values(names, positions, velocities, accelerations, matcher: NameMatcher):
    """
    ``(q_d, qd_d, qdd_d)`` of the configured joints from a reference point.

    Empty velocities / accelerations are zeros.
    """
    idx, reason = matcher.match(names)
    if reason:
        return None, reason
    n = len(names)
    q, reason = pick(positions, idx, n, 'positions')
    if reason:
        return None, reason
    out = [q]
    for field, seq in (('velocities', velocities), ('accelerations', accelerations)):
        if len(seq) == 0:
            out.append([0.0] * len(idx))
            continue
        vals, reason = pick(seq, idx, n, field)
        if reason:
            return None, reason
        out.append(vals)
    return tuple(out), None
