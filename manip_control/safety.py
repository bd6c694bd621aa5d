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
Controller-side safety: input validation, safe-mode supervision and safe torques.

ROS-free (no rclpy): the nodes feed plain sequences and timestamps in, and get plain floats,
enums and transition records out. Everything here is deterministic and unit-tested without
processes.

Input validation
----------------
:func:`map_joint_state` maps a JointState-like message (``name``, ``position``, ``velocity``,
``effort``) onto the configured joint order, or returns a :class:`Refusal` with a specific
:class:`RefusalReason`. Rules (checked in this order):

1. all sequences must be sequences (of str for names, of numbers for values) -> ``bad_type``;
2. no names and no values -> ``empty``;
3. a name given twice -> ``duplicate_name`` (the message is ambiguous);
4. every value array must be empty or as long as ``name``, and every array the consumer uses
   (``fields``) must be as long as ``name`` -> ``length_mismatch``;
5. every configured joint must be named -> ``missing_joint``; names are matched by name,
   order does not matter, extra joints are ignored;
6. the used values of the configured joints must be finite -> ``non_finite`` (NaN/Inf in an
   ignored extra joint or an unused field is not a reason to drop the message).

:func:`map_array_command` does the same for a ``Float64MultiArray`` command (length equal to
the number of joints, finite), :func:`map_reference` for one trajectory point (positions
required; empty velocities / accelerations mean zero). The controller (joint states,
references, every point of a multi-point reference) and the plant (JointState and
Float64MultiArray commands) use these functions; :func:`decode_refusal` turns a CDR decoder
error into a refusal. :class:`RefusalCounter` counts refusals per input and reason and
throttles the error log, in one wording (``ignoring <input> message: <reason>: <detail>``).

Bounded cost: names are matched in one pass (a dict, linear time), and a message with more
than :data:`MAX_NAMES` names or values is refused (``too_large``) before any per-name work
(the CDR decoders refuse it before decoding the names). :class:`SourceGuard` refuses, before
any decoding, messages that do not come from the publisher an input is locked to
(``second_source``).

Hard limits
-----------
:class:`HardLimits` holds the read-only bounds fixed at start (``hard_limits.*`` parameters)
that runtime parameter changes cannot cross (:meth:`HardLimits.check_update` names the
bound).

Supervision
-----------
:class:`SafetySupervisor` is a two-mode state machine, ``NORMAL`` and ``SAFE``, the latter
with a :class:`SafeReason`. Active conditions, highest priority first:

* ``inactive`` -- lifecycle node not active (zero torque, the node does not command);
* ``no_state_yet`` -- active, but no valid joint state has arrived since activation (the node
  does not command; "activate starts commanding only once a fresh joint state has arrived");
* ``state_timeout`` -- the last accepted state is older than ``state_timeout``
  (``now - t_last > state_timeout``); clears on the next accepted state;
* ``position_limit`` -- a joint left ``[position_lower, position_upper]``; **latched** until
  every joint is back inside the envelope shrunk by ``position_margin``;
* ``velocity_limit`` -- ``|qd_j| > velocity_limit_j``; latched until every
  ``|qd_j| <= velocity_limit_j - velocity_margin``.

With ``latch_limits`` true, the two envelope faults instead stay latched until the next
activation (operator re-arm). Every change of (mode, reason) is returned once as a
:class:`Transition` so that the node logs exactly once per transition.

Safe torque (``safe_mode``)
---------------------------
``zero``: ``tau = 0``. ``hold``: gravity-compensated hold with damping at the hold target,
through the nominal mass matrix (:func:`hold_torque`; ``Kp_h`` [1/s^2], ``Kd_h`` [1/s])::

    tau = c^(q, qd) + g^(q) + s M^(q) (Kp_h (q_hold - q) - Kd_h qd)   (fresh states)
    tau = g^(q_last)                                       (state timeout: q, qd unknown)

``q_hold`` is captured when the supervisor enters SAFE: the last measured position, projected
into the position envelope shrunk by ``2 * position_margin`` -- so a position fault brings the
arm back just inside and the controller resumes -- unless no in-envelope state was ever seen
since activation (the arm started outside): then it is held where it is. On a state timeout the
measured q and qd are unknown; any feedback term computed from the stale sample would be a
constant open-loop torque that never decays (a stale ``-Kd qd`` keeps pushing after the arm has
stopped), so only the gravity feed-forward at the last known position remains, which is the
torque that keeps a still arm still. The command is always clamped to ``+-torque_limit`` and
replaced by zeros if it is not finite.

Reference watchdog
------------------
:class:`ReferenceWatchdog`: when no reference arrived for ``reference_timeout``, the controller
brings the last reference to a stop at the reference acceleration limit (continuous in
position and velocity) and holds where it stopped.

All times are seconds on one clock chosen by the node (the controller node uses a steady
clock for the watchdogs: sim time freezes when the plant that publishes /clock dies).

"""

from __future__ import annotations

import array
from dataclasses import dataclass
from dataclasses import fields
from enum import Enum
import math
import re
from typing import Any, Callable, Mapping, NamedTuple, Sequence

from manip_control.parameters import _build
from manip_control.parameters import _choice
from manip_control.parameters import _finite
from manip_control.parameters import _nonnegative
from manip_control.parameters import _opt
from manip_control.parameters import _positive
from manip_control.parameters import _vector
from manip_control.parameters import ParameterError

__all__ = [
    'RefusalReason', 'Refusal', 'JointSample', 'ReferenceSample',
    'map_joint_state', 'map_array_command', 'map_reference', 'RefusalCounter',
    'decode_refusal', 'SourceGuard', 'MAX_NAMES', 'MAX_SEQUENCE_GAP',
    'SafetyParameters', 'safety_from_dict', 'SAFE_MODES',
    'Mode', 'SafeReason', 'Transition', 'SafetySupervisor', 'ReferenceWatchdog',
    'hold_torque', 'clamp_torque', 'validate_parameter_updates',
    'RUNTIME_PARAMETERS', 'HardLimits', 'HARD_LIMIT_DOC', 'HARD_LIMIT_PREFIX',
    'GAIN_RANGE_FACTOR', 'hard_limit_defaults', 'hard_limits_from_values', 'RUNTIME_SAFETY',
    'ramp_toward_zero', 'source_check', 'valid_node_name', 'AFTER_HOLD', 'MAX_SENDERS',
    'APPEAR_WINDOW',
]


# --------------------------------------------------------------------------------------------
# input validation


class RefusalReason(str, Enum):
    """Why an input message was ignored."""

    EMPTY = 'empty'
    """No names and no values (or no trajectory point / no data)."""
    BAD_TYPE = 'bad_type'
    """A field is not a sequence, a name is not a string or a value is not a number."""
    DUPLICATE_NAME = 'duplicate_name'
    """A joint name appears more than once."""
    LENGTH_MISMATCH = 'length_mismatch'
    """An array's length differs from the number of names (or joints)."""
    MISSING_JOINT = 'missing_joint'
    """A configured joint is not in the message."""
    NON_FINITE = 'non_finite'
    """A used value is NaN or infinite."""
    MALFORMED = 'malformed'
    """The serialized message could not be decoded (raw subscriptions)."""
    TOO_LARGE = 'too_large'
    """More than :data:`MAX_NAMES` names or values (bounded cost per message)."""
    SECOND_SOURCE = 'second_source'
    """Not from the publisher the input is locked to (see :class:`SourceGuard`)."""


class Refusal(NamedTuple):
    """
    A refused input: the reason and a human-readable detail naming the field.

    ``waiting``: refused only until discovery completes (the input's publisher is not on the
    graph yet and nothing was taken from it): counted as any refusal, logged as news, not as
    an error.
    """

    reason: RefusalReason
    detail: str
    waiting: bool = False

    def __str__(self) -> str:
        return f'{self.reason.value}: {self.detail}'


class JointSample(NamedTuple):
    """Values of the configured joints in configured order (None for fields not requested)."""

    position: tuple | None
    velocity: tuple | None
    effort: tuple | None


class ReferenceSample(NamedTuple):
    """One reference sample in configured joint order: q_d [rad], qd_d [rad/s], qdd_d."""

    q: tuple
    qd: tuple
    qdd: tuple


_SEQ_TYPES = (list, tuple, array.array)


def _seq_len(value: Any) -> int | None:
    """len() of a non-string sequence (list, tuple, array.array, ndarray), else None."""
    if type(value) in _SEQ_TYPES:       # the 1 kHz path: no ABC checks
        return len(value)
    if value is None:
        return 0
    if isinstance(value, (str, bytes, Mapping)):
        return None
    try:
        return len(value)
    except TypeError:
        return None


def _pick(values, idx, field_name: str, joints) -> tuple | Refusal:
    """Float values at ``idx``; a Refusal if one is not a number or not finite."""
    out = []
    for j, i in zip(joints, idx):
        v = values[i]
        if type(v) is float:            # the 1 kHz path
            if v - v != 0.0:            # NaN or +-inf
                return Refusal(RefusalReason.NON_FINITE, f'{field_name} of {j!r} is {v}')
            out.append(v)
            continue
        if isinstance(v, (str, bytes, bool)):
            return Refusal(RefusalReason.BAD_TYPE, f'{field_name} of {j!r} is not a number')
        try:
            v = float(v)
        except (TypeError, ValueError):
            return Refusal(RefusalReason.BAD_TYPE, f'{field_name} of {j!r} is not a number')
        if not math.isfinite(v):
            return Refusal(RefusalReason.NON_FINITE, f'{field_name} of {j!r} is {v}')
        out.append(v)
    return tuple(out)


#: Most names (and values per array) a message may carry; larger ones are refused before any
#: per-name work, so that one message costs at most a few hundred microseconds.
MAX_NAMES = 256

_NAME_CACHE: dict = {}
_NAME_CACHE_MAX_KEY = 64                # longer name lists are matched but not cached


def _name_index(joints: tuple, names: list, names_key: str):
    """
    Match ``names`` against the configured joints in one pass (linear time).

    Returns ``(idx, early, late)``: the configured joints' indices, or the refusal found
    before the length checks (``bad_type``, ``duplicate_name``) / after them
    (``missing_joint``). Cached per (joints, names) for short lists: a stream repeats one
    name list.
    """
    key = (joints, tuple(names)) if len(names) <= _NAME_CACHE_MAX_KEY else None
    hit = _NAME_CACHE.get(key) if key is not None else None
    if hit is not None:
        return hit
    result = None
    where: dict = {}
    for k, nm in enumerate(names):
        if type(nm) is not str:
            result = (None, Refusal(RefusalReason.BAD_TYPE,
                                    f'{names_key} entry {nm!r} is not a string'), None)
            break
        if where.setdefault(nm, k) != k:
            result = (None, Refusal(RefusalReason.DUPLICATE_NAME,
                                    f'joint {nm!r} named more than once'), None)
            break
    if result is None:
        missing = [j for j in joints if j not in where]
        if missing:
            result = (None, None, Refusal(RefusalReason.MISSING_JOINT,
                                          f'joint {missing[0]!r} missing'))
        else:
            result = ([where[j] for j in joints], None, None)
    if key is not None:
        if len(_NAME_CACHE) > 256:
            _NAME_CACHE.clear()
        _NAME_CACHE[key] = result
    return result


def _map_named(joints: Sequence[str], names, arrays: dict, used: Sequence[str],
               names_key: str = 'name') -> dict | Refusal:
    """
    Map named arrays onto ``joints``: the common core of the message validators.

    ``arrays`` maps a field name to its sequence; every array must be empty or as long as
    ``names``, the ``used`` ones must be as long as ``names`` and finite for ``joints``.
    Returns ``{field: tuple of floats in joints order}`` for the used fields, or a Refusal.
    """
    n = _seq_len(names)
    if n is None:
        return Refusal(RefusalReason.BAD_TYPE, f'{names_key} is not a sequence of strings')
    lens = {}
    for key, arr in arrays.items():
        m = _seq_len(arr)
        if m is None:
            return Refusal(RefusalReason.BAD_TYPE, f'{key} is not a sequence of numbers')
        lens[key] = m
    if n == 0 and not any(lens.values()):
        return Refusal(RefusalReason.EMPTY, f'no {names_key} and no values')
    if n > MAX_NAMES or max(lens.values(), default=0) > MAX_NAMES:
        return Refusal(RefusalReason.TOO_LARGE,
                       f'{max(n, *lens.values())} entries (at most {MAX_NAMES})')
    try:
        idx, early, late = _name_index(
            joints if type(joints) is tuple else tuple(joints),
            [] if names is None else list(names), names_key)
    except TypeError:                   # unhashable entries
        return Refusal(RefusalReason.BAD_TYPE, f'{names_key} is not a sequence of strings')
    if early is not None:
        return early
    for key, m in lens.items():
        if m != n and (m != 0 or key in used):
            return Refusal(RefusalReason.LENGTH_MISMATCH,
                           f'{m} {key} values for {n} {names_key} entries')
    if late is not None:
        return late
    out = {}
    for key in used:
        vals = _pick(arrays[key], idx, key, joints)
        if vals.__class__ is Refusal:
            return vals
        out[key] = vals
    return out


def map_joint_state(joints: Sequence[str], names, position=(), velocity=(), effort=(), *,
                    fields: Sequence[str] = ('position', 'velocity')
                    ) -> JointSample | Refusal:
    """
    Map a JointState-like message onto ``joints`` (the configured order).

    Parameters
    ----------
    joints : sequence of str
        Configured joint names, in the order the consumer uses.
    names : sequence of str
        The message's ``name``.
    position, velocity, effort : sequence of float
        The message's arrays; each must be empty or as long as ``names``.
    fields : sequence of str
        The arrays the consumer needs (subset of position, velocity, effort); they must be
        present (as long as ``names``) and finite for the configured joints. A plant taking
        JointState commands uses ``fields=('effort',)``.

    Returns
    -------
    JointSample or Refusal
        The requested fields in configured order (other fields None), or why the message is
        refused (see the module docstring for the rules).

    """
    out = _map_named(joints, names,
                     {'position': position, 'velocity': velocity, 'effort': effort}, fields)
    if isinstance(out, Refusal):
        return out
    return JointSample(out.get('position'), out.get('velocity'), out.get('effort'))


def map_array_command(data, n_joints: int) -> tuple | Refusal:
    """
    Validate a Float64MultiArray command: exactly ``n_joints`` finite values [N·m].

    Returns the values as a tuple of floats, or a Refusal (``empty``, ``length_mismatch``,
    ``bad_type``, ``non_finite``). The layout is ignored, as by ros2_control's
    ForwardCommandController.
    """
    m = _seq_len(data)
    if m is None:
        return Refusal(RefusalReason.BAD_TYPE, 'data is not a sequence of numbers')
    if m == 0:
        return Refusal(RefusalReason.EMPTY, 'no data')
    if m != n_joints:
        return Refusal(RefusalReason.LENGTH_MISMATCH, f'{m} values for {n_joints} joints')
    return _pick(data, range(n_joints), 'data', [f'[{k}]' for k in range(n_joints)])


def map_reference(joints: Sequence[str], joint_names, positions, velocities=(),
                  accelerations=()) -> ReferenceSample | Refusal:
    """
    Map one JointTrajectory point onto ``joints``.

    ``positions`` must be as long as ``joint_names``; ``velocities`` and ``accelerations``
    may be empty (meaning zero) or as long as ``joint_names``. Names are matched by name,
    extra joints ignored; the used values must be finite.
    """
    arrays = {'positions': positions, 'velocities': velocities,
              'accelerations': accelerations}
    used = ['positions'] + [k for k in ('velocities', 'accelerations')
                            if _seq_len(arrays[k])]
    out = _map_named(joints, joint_names, arrays, used, names_key='joint_names')
    if isinstance(out, Refusal):
        return out
    zeros = (0.0,) * len(joints)
    return ReferenceSample(out['positions'], out.get('velocities', zeros),
                           out.get('accelerations', zeros))


class RefusalCounter:
    """
    Counts refused messages per input and reason, and throttles their error log.

    The log is throttled per input and reason: a flood of one kind of bad message gives one
    line a second, and a different reason on the same input is reported at once (not hidden
    behind the line of another one).

    Parameters
    ----------
    throttle : float
        Minimum time between two log lines of one input and reason [s] (on the caller's
        clock).

    """

    def __init__(self, throttle: float = 1.0):
        self.throttle = float(throttle)
        self.counts: dict[str, dict[str, int]] = {}
        self._last_log: dict[tuple[str, str], float] = {}
        self._suppressed: dict[tuple[str, str], int] = {}

    def record(self, source: str, refusal: Refusal, now: float) -> str | None:
        """
        Count one refusal; return the log line to print now, or None if throttled.

        The line names the input and the reason, and how many refusals of that reason were
        not logged since its previous line.
        """
        per = self.counts.setdefault(source, {})
        key = refusal.reason.value
        per[key] = per.get(key, 0) + 1
        kind = (source, key)
        last = self._last_log.get(kind)
        if last is not None and now - last < self.throttle and now >= last:
            self._suppressed[kind] = self._suppressed.get(kind, 0) + 1
            return None
        self._last_log[kind] = now
        skipped = self._suppressed.pop(kind, 0)
        more = f' ({skipped} more refused since the last report)' if skipped else ''
        return f'ignoring {source} message: {refusal}{more}'

    def total(self, source: str | None = None) -> int:
        """Return the refusals of one input (all inputs when ``source`` is None)."""
        if source is not None:
            return sum(self.counts.get(source, {}).values())
        return sum(sum(v.values()) for v in self.counts.values())

    def reset(self) -> None:
        """Forget all counts."""
        self.counts.clear()
        self._last_log.clear()
        self._suppressed.clear()


def decode_refusal(reason: str) -> Refusal:
    """
    Return the :class:`Refusal` for a CDR decoder's error (``manip_control.nodes.cdr``).

    ``too many entries`` -> ``too_large``, ``without points`` -> ``empty``, anything else ->
    ``malformed``; the detail is the decoder's text.
    """
    if 'too many entries' in reason:
        return Refusal(RefusalReason.TOO_LARGE, reason)
    if 'without points' in reason:
        return Refusal(RefusalReason.EMPTY, reason)
    return Refusal(RefusalReason.MALFORMED, reason)


#: Largest forward jump of the publication sequence number still taken as the same publisher
#: (messages lost in between); a larger jump or any step back is another publisher.
MAX_SEQUENCE_GAP = 1000
#: Most sequences (publishers) a guard tells apart at once (:meth:`SourceGuard.senders`).
MAX_SENDERS = 4
#: A publisher that appears next to a live locked one conflicts for this long even before it
#: sends [s] (:meth:`SourceGuard.single_sender`).
APPEAR_WINDOW = 2.0


class SourceGuard:
    """
    One publisher per input, recognised per message by its publication sequence number.

    A DDS writer numbers its samples 1, 2, 3, ...; messages of one publisher therefore arrive
    with increasing numbers (gaps when samples were lost), while a second publisher's numbers
    step back or jump. The guard locks onto the publisher of the first message and refuses
    every message whose number does not continue the locked sequence
    (``last < seq <= last + max_gap``) as ``second_source``.

    It locks anew (a restarted publisher, e.g. a new driver process) only when the locked
    sequence has been silent for ``relock_after`` seconds: the graph cannot decide it, since a
    killed publisher stays on the graph until its DDS lease expires (20 s with Fast DDS). Two
    live publishers are never mixed: one of them is locked, the other refused.
    :attr:`publishers` (the count on the graph, kept up to date by the node) only names them
    in the refusal.

    :meth:`conflict` reports a data conflict (another publisher's messages arrived) until
    ``hold`` seconds after the last refused one: the controller stays in safe mode meanwhile.

    Every message, taken or refused, is also sorted into the sequences heard (at most
    :data:`MAX_SENDERS`, each continuing ``last < seq <= last + max_gap``): :meth:`senders`
    counts those heard within a window, so that a publisher that sends nothing (a killed or
    stopped driver still on the graph until its DDS lease ends) is told from one that sends
    (:func:`source_check`).

    Parameters
    ----------
    name : str
        Input name for the details (``joint_states``).
    relock_after : float
        Silence of the locked sequence [s] after which a single remaining publisher is taken.
    hold : float
        How long a conflict lasts after the last message of another publisher [s].
    max_gap : int
        See :data:`MAX_SEQUENCE_GAP`.

    """

    def __init__(self, name: str, relock_after: float = 0.5, hold: float = 0.5,
                 max_gap: int = MAX_SEQUENCE_GAP):
        self.name = name
        self.relock_after = float(relock_after)
        self.hold = float(hold)
        self.max_gap = int(max_gap)
        self.publishers = 1
        self.publisher_names: tuple = ()
        self.last_seq: int | None = None
        self.last_time = -math.inf
        self.last_refused = -math.inf
        self.refused = 0
        self.locks = 0
        #: silence of the input before the last lock [s] (inf: the first after a reset)
        self.lock_silence = math.inf
        self._detail = ''
        #: a new sequence may be locked (set from the graph by the node, :func:`source_check`)
        self.may_lock = True
        #: non-empty while the publishers of the input conflict (:func:`source_check`)
        self.graph_conflict = ''
        #: the node that must publish the input ('' any single one); with it, a refused
        #: message is only counted (the locked source is the named node's)
        self.expected = ''
        #: the reader's matched publisher count now (set by the node; None: unknown). A
        #: forward jump beyond ``max_gap`` while exactly one publisher is matched is samples
        #: this reader lost (its process was not scheduled and its queue overflowed), not
        #: another publisher: counted in :attr:`lost_jumps` and taken
        self.matched_now: Callable[[], int] | None = None
        self.lost_jumps = 0
        #: the sequences heard: [last seq, last arrival] (see :meth:`senders`)
        self._heard: list = []
        self._hit: list | None = None       # the sequence the last message continued
        #: when the number of publishers on the graph last rose [s] (:meth:`graph_count`)
        self.rose = -math.inf
        self._rose_live = False
        #: a publisher that appears next to a live locked one conflicts for this long [s]
        #: even before it sends (its first data came up to 1.5 s after its match under load)
        self.appear_window = APPEAR_WINDOW

    def reset(self) -> None:
        """Forget the locked publisher (activation): the next message locks."""
        self.last_seq = None
        self.last_time = self.last_refused = -math.inf
        self._detail = ''

    def check(self, seq: int | None, now: float) -> Refusal | None:
        """
        Refusal for a message with publication sequence number ``seq`` received at ``now``.

        None (accepted) when it continues the locked sequence or locks a new one. ``seq``
        None (an RMW without sequence numbers) is accepted: only the graph check applies.
        """
        if seq is not None:
            self._hear(seq, now)
        if self.graph_conflict:
            self.refused += 1
            self.last_refused = now
            self._detail = self.graph_conflict
            return Refusal(RefusalReason.SECOND_SOURCE, self._detail)
        if seq is None:
            return None if self.may_lock else self._refuse_unlocked(now)
        last = self.last_seq
        if last is not None and last < seq <= last + self.max_gap:
            self.last_seq, self.last_time = seq, now
            return None
        if (last is not None and seq > last and self.publishers <= 1
                and self.matched_now is not None and self.matched_now() == 1):
            # one writer: the numbers in between were lost in this reader (a stalled process)
            self.lost_jumps += 1
            self.last_seq, self.last_time = seq, now
            return None
        if last is None or now - self.last_time > self.relock_after:
            if not self.may_lock:
                return self._refuse_unlocked(now)
            self.lock_silence = now - self.last_time
            self.last_seq, self.last_time = seq, now
            self.locks += 1
            return None
        self.refused += 1
        self.last_refused = now
        self._detail = (f'sequence number {seq} does not continue {last}: another publisher '
                        f'({self.publishers} on the graph'
                        + (f': {", ".join(self.publisher_names)}' if self.publisher_names
                           else '') + ')')
        return Refusal(RefusalReason.SECOND_SOURCE, self._detail)

    def _hear(self, seq: int, now: float) -> None:
        """Sort a message into the sequences heard (the one it continues, else a new one)."""
        h = self._hit
        if h is not None and h[0] < seq <= h[0] + self.max_gap:     # the 1 kHz path
            h[0], h[1] = seq, now
            return
        best = None
        for h in self._heard:
            if h[0] < seq <= h[0] + self.max_gap and (best is None or h[0] > best[0]):
                best = h
        if best is None:
            if len(self._heard) >= MAX_SENDERS:
                self._heard.remove(min(self._heard, key=lambda h: h[1]))
            best = [seq, now]
            self._heard.append(best)
        best[0], best[1] = seq, now
        self._hit = best

    def graph_count(self, count: int, now: float) -> None:
        """Note the number of publishers on the graph; a rise starts an appearance window."""
        if count > self.publishers:
            self.rose = now
            self._rose_live = now - self.last_time <= self.relock_after
        self.publishers = count

    def single_sender(self, now: float, quiet: float) -> int | None:
        """
        Return the senders heard within ``quiet`` [s], or None while a new one may still send.

        None within ``quiet`` of a rise of the publishers on the graph, or within
        :attr:`appear_window` when the rise came while the locked sequence was live (another
        publisher next to the driver); after a rise while it was silent (a restarted driver
        next to its dead predecessor), ``quiet`` is enough.
        """
        window = max(self.appear_window, quiet) if self._rose_live else quiet
        if now - self.rose <= window:
            return None
        return self.senders(now, quiet)

    def restarting(self, now: float, quiet: float) -> bool:
        """
        Return True within ``quiet`` [s] of a rise of the publishers that came while silent.

        A publisher that appears while the locked sequence has been silent for
        ``relock_after`` (a restarted driver next to its dead predecessor, which stays on the
        graph until its DDS lease ends) is not yet a conflict: its messages wait (refused)
        until :meth:`single_sender` can tell whether it is the only one that sends.
        """
        return not self._rose_live and now - self.rose <= quiet

    def senders(self, now: float, window: float) -> int:
        """Return how many sequences (publishers) were heard within ``window`` [s] of ``now``."""
        return sum(1 for h in self._heard if now - h[1] <= window)

    def _refuse_unlocked(self, now: float) -> Refusal:
        """Refuse a message that may not be locked (another node publishes too)."""
        self.refused += 1
        names = ', '.join(self.publisher_names) or 'not on the graph yet'
        want = f'only {self.expected} may publish' if self.expected else 'no single publisher'
        # a start: data can arrive before discovery lists its publisher (every launch)
        waiting = self.last_seq is None and not self.publisher_names
        return Refusal(RefusalReason.SECOND_SOURCE,
                       f'not taken: {want} ({self.publishers} publishers: {names})', waiting)

    def conflict(self, now: float) -> str:
        """
        Return the conflict detail, else ``''``.

        While the publishers conflict (:attr:`graph_conflict`), and until ``hold`` after the
        last message of another publisher -- unless the input names its publisher
        (:attr:`expected`): then the other messages are only refused and counted.
        """
        if self.graph_conflict:
            return f'{self.name}: {self.graph_conflict}'
        if not self.expected and now - self.last_refused <= self.hold:
            return f'{self.name}: {self._detail}'
        return ''


# --------------------------------------------------------------------------------------------
# parameters

SAFE_MODES = ('hold', 'zero')
#: What follows a hold longer than ``hold_timeout`` (``safety.after_hold``).
AFTER_HOLD = ('zero', 'gravity')
#: Longest ``safety.gravity_hold_timeout`` [s].
MAX_GRAVITY_HOLD = 3600.0


@dataclass(frozen=True)
class SafetyParameters:
    """
    Controller safety settings (all optional; the defaults suit the simulated default arm).

    Attributes
    ----------
    safe_mode : str
        ``'hold'`` (gravity-compensated hold with damping) or ``'zero'`` (zero torque).
    state_timeout : float
        Joint-state watchdog [s], > 0 (default 0.02 s = 20 periods at 1 kHz).
    reference_timeout : float
        Reference watchdog [s], > 0 (default 0.1 s).
    position_lower, position_upper : tuple of n float
        Position envelope [rad], one per joint (their number n sets every list's length),
        finite, ``upper - lower > 4 position_margin`` (default +-pi).
    velocity_limit : tuple of n float
        ``|qd|`` envelope [rad/s], > 0 (default 10).
    position_margin : float
        Hysteresis [rad], >= 0: resume once inside the envelope shrunk by this (default 0.05).
    velocity_margin : float
        Hysteresis [rad/s], >= 0, < every velocity limit (default 0.5).
    hold_kp : tuple of n float
        Hold stiffness per joint through the nominal mass matrix [1/s^2], > 0 (default 100:
        ``w^2`` of a 10 rad/s servo; see :func:`hold_torque`).
    hold_kd : tuple of n float
        Hold damping per joint through the nominal mass matrix [1/s], > 0 (default 20:
        ``2 w``, critically damped).
    latch_limits : bool
        Envelope faults stay latched until re-activation (default false).
    stamp_age : bool
        Real time: count a joint state's age from its header stamp (wall clock) when that is
        plausible (0 to 10 s old), not from its arrival, so a backlog of old states is not
        fresh (default true; false when the driver's clock is not synchronized).
    after_hold : str
        What follows a hold longer than ``hold_timeout``: ``'zero'`` (zero torque, latched
        until re-activation; default) or ``'gravity'`` (the gravity torque ``g^(q_last)`` of
        the last good pose, open loop, for at most ``gravity_hold_timeout``, then zero).
    gravity_hold_timeout : float
        Longest gravity hold after the hold timeout [s], in (0, 3600] (default 10 s).

    """

    safe_mode: str = _opt('hold')
    state_timeout: float = _opt(0.02)
    reference_timeout: float = _opt(0.1)
    position_lower: tuple = _opt((-math.pi, -math.pi))
    position_upper: tuple = _opt((math.pi, math.pi))
    velocity_limit: tuple = _opt((10.0, 10.0))
    position_margin: float = _opt(0.05)
    velocity_margin: float = _opt(0.5)
    hold_kp: tuple = _opt((100.0, 100.0))
    hold_kd: tuple = _opt((20.0, 20.0))
    latch_limits: bool = _opt(False)
    stamp_age: bool = _opt(True)
    after_hold: str = _opt('zero')
    gravity_hold_timeout: float = _opt(10.0)

    def __post_init__(self):
        _validate_safety(self, 'safety')

    @property
    def n_joints(self) -> int:
        """Return the number of joints: the length of ``position_lower`` (of every list)."""
        lower = self.position_lower
        if isinstance(lower, (str, bytes)) or not hasattr(lower, '__len__'):
            raise ParameterError(f'safety.position_lower: must be a list of numbers, one per '
                                 f'joint (got {lower!r})')
        return len(lower)

    def replace(self, **changes) -> 'SafetyParameters':
        """Return a validated copy with some fields changed (lists become tuples)."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data.update({k: tuple(v) if isinstance(v, list) else v for k, v in changes.items()})
        return SafetyParameters(**data)


def _validate_safety(sp: SafetyParameters, path: str, n: int | None = None) -> None:
    _choice(f'{path}.safe_mode', sp.safe_mode, SAFE_MODES)
    _positive(f'{path}.state_timeout', sp.state_timeout)
    _positive(f'{path}.reference_timeout', sp.reference_timeout)
    n = sp.n_joints if n is None else n
    lo = _vector(f'{path}.position_lower', sp.position_lower, n)
    hi = _vector(f'{path}.position_upper', sp.position_upper, n)
    vl = _vector(f'{path}.velocity_limit', sp.velocity_limit, n, check=_positive)
    pm = _nonnegative(f'{path}.position_margin', sp.position_margin)
    vm = _nonnegative(f'{path}.velocity_margin', sp.velocity_margin)
    for k in range(n):
        if not hi[k] - lo[k] > 4.0 * pm:
            raise ParameterError(
                f'{path}.position_upper[{k}]: must exceed position_lower[{k}] by more than '
                f'4 * position_margin = {4.0 * pm} (got lower {lo[k]}, upper {hi[k]})')
        if not vm < vl[k]:
            raise ParameterError(f'{path}.velocity_margin: must be < velocity_limit[{k}] = '
                                 f'{vl[k]} (got {vm})')
    _vector(f'{path}.hold_kp', sp.hold_kp, n, check=_positive)
    _vector(f'{path}.hold_kd', sp.hold_kd, n, check=_positive)
    _choice(f'{path}.after_hold', sp.after_hold, AFTER_HOLD)
    _gravity_hold_check(f'{path}.gravity_hold_timeout', sp.gravity_hold_timeout)
    for name in ('latch_limits', 'stamp_age'):
        if not isinstance(getattr(sp, name), bool):
            raise ParameterError(f'{path}.{name}: must be true or false '
                                 f'(got {getattr(sp, name)!r})')


def safety_from_dict(data: Any, path: str = 'safety',
                     n_joints: int | None = None) -> SafetyParameters:
    """
    Build and validate :class:`SafetyParameters` from a mapping (unknown keys rejected).

    ``n_joints``: the number of joints every per-joint list must have (default: the length
    of ``position_lower``).

    Raises
    ------
    ParameterError
        Naming the parameter (e.g. ``safety.velocity_limit[1]``) and the reason.

    """
    sp = _build(SafetyParameters, {} if data is None else data, path)
    _validate_safety(sp, path, n_joints)
    return sp


# --------------------------------------------------------------------------------------------
# runtime parameter updates


def _scalar_check(check):
    def run(name, value):
        return check(name, value)
    return run


def _vec_check(check):
    def run(name, value, n=2):
        return _vector(name, value, n, check=check)
    return run


def _gravity_hold_check(name, value):
    v = _positive(name, value)
    if v > MAX_GRAVITY_HOLD:
        raise ParameterError(f'{name}: must be <= {MAX_GRAVITY_HOLD:g} s (got {v!r})')
    return v


def _safe_mode_check(name, value):
    return _choice(name, value, SAFE_MODES)


def _bool_check(name, value):
    if not isinstance(value, bool):
        raise ParameterError(f'{name}: must be true or false (got {value!r})')
    return value


#: Runtime-changeable ``safety.*`` parameters and their single-value checks (the node checks
#: the gains with :func:`manip_control.control.check_gain_update`).
RUNTIME_PARAMETERS = {
    'safe_mode': _safe_mode_check,
    'state_timeout': _scalar_check(_positive),
    'reference_timeout': _scalar_check(_positive),
    'position_lower': _vec_check(_finite),
    'position_upper': _vec_check(_finite),
    'velocity_limit': _vec_check(_positive),
    'latch_limits': _bool_check,
    'stamp_age': _bool_check,
    'gravity_hold_timeout': _gravity_hold_check,
}

_PER_JOINT_CHECKS = tuple(RUNTIME_PARAMETERS[k]
                          for k in ('position_lower', 'position_upper', 'velocity_limit'))

_SAFETY_KEYS = {f.name for f in fields(SafetyParameters)}

#: The ``safety.*`` settings changeable at runtime (inside the hard limits, see
#: :class:`HardLimits`); the others (hold gains, hysteresis margins) are fixed at start.
RUNTIME_SAFETY = frozenset(RUNTIME_PARAMETERS)


def validate_parameter_updates(updates: Mapping[str, Any],
                               current: SafetyParameters | None = None
                               ) -> tuple[bool, str]:
    """
    Validate a set of runtime parameter changes applied together.

    Parameters
    ----------
    updates : mapping
        Parameter name (optionally prefixed ``safety.``) -> new value.
    current : SafetyParameters, optional
        The safety settings in force, for the cross-checks (lower < upper, margins).

    Returns
    -------
    (ok, reason)
        ``(True, '')`` or ``(False, 'velocity_limit[1]: must be > 0 (got -1.0)')``.

    """
    safety_changes = {}
    for name, value in updates.items():
        key = name[len('safety.'):] if name.startswith('safety.') else name
        check = RUNTIME_PARAMETERS.get(key)
        if check is None:
            return False, f'{name}: not a runtime-changeable parameter'
        try:
            if check in _PER_JOINT_CHECKS:
                value = check(key, value, (current or SafetyParameters()).n_joints)
            else:
                value = check(key, value)
        except ParameterError as exc:
            return False, str(exc)
        if key in _SAFETY_KEYS:
            safety_changes[key] = value
    if safety_changes:
        try:
            (current or SafetyParameters()).replace(**safety_changes)
        except ParameterError as exc:
            return False, str(exc).removeprefix('safety.')
    return True, ''


# --------------------------------------------------------------------------------------------
# hard limits: read-only bounds fixed at start

#: Tuning room of the runtime gains when ``hard_limits.<gain>_min`` / ``_max`` are not given:
#: the start value divided / multiplied by this factor.
GAIN_RANGE_FACTOR = 4.0

#: The read-only hard limits of the controller: name -> (description, rule). Runtime changes
#: (``ros2 param set``) of the limited parameters must stay inside them; each defaults to the
#: start value of the parameter it bounds (gains: a factor :data:`GAIN_RANGE_FACTOR` around
#: it), so by default the runtime can only tighten what the start configuration allowed.
HARD_LIMIT_DOC = {
    'torque': ('largest torque_limit per joint [N m] (default: the start torque_limit)',
               'each > 0, >= torque_limit'),
    'kp_min': ('smallest kp per joint (default: start kp / 4)', 'each > 0, <= kp'),
    'kp_max': ('largest kp per joint (default: start kp * 4)', 'each >= kp'),
    'kd_min': ('smallest kd per joint (default: start kd / 4)', 'each > 0, <= kd'),
    'kd_max': ('largest kd per joint (default: start kd * 4)', 'each >= kd'),
    'ki_max': ('largest ki per joint (default: start ki * 4; 0 keeps integral action off)',
               'each >= ki'),
    'state_timeout': ('[min, max] of safety.state_timeout [s] (default: [start / 4, start])',
                      '0 < min <= state_timeout <= max'),
    'reference_timeout': ('[min, max] of safety.reference_timeout [s] (default: '
                          '[start / 4, start])', '0 < min <= reference_timeout <= max'),
    'position_lower': ('lowest safety.position_lower per joint [rad] (default: the start '
                       'value)', 'finite, <= safety.position_lower'),
    'position_upper': ('highest safety.position_upper per joint [rad] (default: the start '
                       'value)', 'finite, >= safety.position_upper'),
    'velocity': ('largest safety.velocity_limit per joint [rad/s] (default: the start value)',
                 'each > 0, >= safety.velocity_limit'),
    'stamp_age': ('true: safety.stamp_age cannot be switched off at runtime (default: the '
                  'start safety.stamp_age)', ''),
    'gravity_hold_timeout': ('largest safety.gravity_hold_timeout [s] (default: the start '
                             'value)', '> 0, >= safety.gravity_hold_timeout'),
}

HARD_LIMIT_PREFIX = 'hard_limits.'


@dataclass(frozen=True)
class HardLimits:
    """
    Read-only bounds of the runtime-changeable controller parameters (see HARD_LIMIT_DOC).

    Attributes
    ----------
    torque : tuple of n float
        Largest ``torque_limit`` [N·m].
    kp_min, kp_max, kd_min, kd_max, ki_max : tuple of n float
        Gain ranges (units of the law's gains).
    state_timeout, reference_timeout : tuple (min, max)
        Timeout ranges [s].
    position_lower, position_upper : tuple of n float
        Outermost position envelope [rad].
    velocity : tuple of n float
        Largest ``velocity_limit`` [rad/s].
    stamp_age : bool
        The stamp-age check cannot be switched off.
    latch_limits : bool
        The start value of ``safety.latch_limits`` (true: it cannot be switched off).
    gravity_hold_timeout : float
        Largest ``safety.gravity_hold_timeout`` [s].

    """

    torque: tuple
    kp_min: tuple
    kp_max: tuple
    kd_min: tuple
    kd_max: tuple
    ki_max: tuple
    state_timeout: tuple
    reference_timeout: tuple
    position_lower: tuple
    position_upper: tuple
    velocity: tuple
    stamp_age: bool
    latch_limits: bool = False
    gravity_hold_timeout: float = MAX_GRAVITY_HOLD

    def check_update(self, name: str, value: Any) -> str:
        """
        Return ``''`` when ``name = value`` is inside the hard limits, else the refusal.

        ``value`` is already checked by the core rules. The refusal names the bound, e.g.
        ``torque_limit[0]: must be <=
        hard_limits.torque[0] = 89.0 (read-only, fixed at start; got 1e+09)``.
        """
        key = name.removeprefix('safety.')
        hp = HARD_LIMIT_PREFIX
        fixed = 'read-only, fixed at start'
        if key in ('stamp_age', 'latch_limits'):
            on = self.stamp_age if key == 'stamp_age' else self.latch_limits
            bound = f'{hp}stamp_age' if key == 'stamp_age' else 'the start value'
            if on and value is False:
                return f'{name}: cannot be switched off at runtime ({bound} is true; {fixed})'
            return ''
        if key == 'gravity_hold_timeout':
            v, hi = float(value), self.gravity_hold_timeout
            if v > hi:
                return f'{name}: must be <= {hp}{key} = {hi:g} s ({fixed}; got {v:g})'
            return ''
        if key in ('state_timeout', 'reference_timeout'):
            lo, hi = getattr(self, key)
            v = float(value)
            if v < lo:
                return f'{name}: must be >= {hp}{key}[0] = {lo:g} s ({fixed}; got {v:g})'
            if v > hi:
                return f'{name}: must be <= {hp}{key}[1] = {hi:g} s ({fixed}; got {v:g})'
            return ''
        rules = {'torque_limit': ((None, 'torque'),), 'kp': (('kp_min', 'kp_max'),),
                 'kd': (('kd_min', 'kd_max'),), 'ki': ((None, 'ki_max'),),
                 'position_lower': (('position_lower', None),),
                 'position_upper': ((None, 'position_upper'),),
                 'velocity_limit': ((None, 'velocity'),)}
        if key not in rules:
            return ''
        (lo_name, hi_name), = rules[key]
        for k, v in enumerate(value):
            v = float(v)
            if lo_name is not None and v < getattr(self, lo_name)[k]:
                b = getattr(self, lo_name)[k]
                return f'{name}[{k}]: must be >= {hp}{lo_name}[{k}] = {b:g} ({fixed}; got {v:g})'
            if hi_name is not None and v > getattr(self, hi_name)[k]:
                b = getattr(self, hi_name)[k]
                return f'{name}[{k}]: must be <= {hp}{hi_name}[{k}] = {b:g} ({fixed}; got {v:g})'
        return ''

    def check_updates(self, updates: Mapping[str, Any]) -> str:
        """Return the first refusal of a set of updates (:meth:`check_update`), or ``''``."""
        for name, value in updates.items():
            why = self.check_update(name, value)
            if why:
                return why
        return ''


def hard_limit_defaults(kp, kd, ki, torque_limit, safety: SafetyParameters) -> dict:
    """
    Return the defaults of the ``hard_limits.*`` parameters from the start configuration.

    Returns ``{name: value}`` (without the prefix; lists of floats, a bool for stamp_age).
    """
    f = GAIN_RANGE_FACTOR
    return {
        'torque': [float(v) for v in torque_limit],
        'kp_min': [float(v) / f for v in kp], 'kp_max': [float(v) * f for v in kp],
        'kd_min': [float(v) / f for v in kd], 'kd_max': [float(v) * f for v in kd],
        'ki_max': [float(v) * f for v in ki],
        'state_timeout': [safety.state_timeout / f, safety.state_timeout],
        'reference_timeout': [safety.reference_timeout / f, safety.reference_timeout],
        'position_lower': [float(v) for v in safety.position_lower],
        'position_upper': [float(v) for v in safety.position_upper],
        'velocity': [float(v) for v in safety.velocity_limit],
        'stamp_age': bool(safety.stamp_age),
        'gravity_hold_timeout': float(safety.gravity_hold_timeout),
    }


def hard_limits_from_values(values: Mapping[str, Any], start: Mapping[str, Any],
                            safety: SafetyParameters) -> HardLimits:
    """
    Validate the ``hard_limits.*`` values and the start configuration against them.

    Parameters
    ----------
    values : mapping
        ``{name without prefix: value}`` of the hard limits.
    start : mapping
        Start values of ``kp``, ``kd``, ``ki``, ``torque_limit``.
    safety : SafetyParameters
        Start safety settings.

    Raises
    ------
    ParameterError
        Naming the parameter and the bound, e.g. ``hard_limits.torque[0]: must be >=
        torque_limit[0] = 89.0 (got 50.0)``.

    """
    hp = HARD_LIMIT_PREFIX
    n = safety.n_joints
    vec = {}
    for key in ('torque', 'kp_min', 'kp_max', 'kd_min', 'kd_max', 'velocity'):
        vec[key] = _vector(hp + key, values[key], n, check=_positive)
    vec['ki_max'] = _vector(hp + 'ki_max', values['ki_max'], n, check=_nonnegative)
    for key in ('position_lower', 'position_upper'):
        vec[key] = _vector(hp + key, values[key], n, check=_finite)
    for key in ('state_timeout', 'reference_timeout'):
        rng = values[key]
        if _seq_len(rng) != 2:
            raise ParameterError(f'{hp}{key}: must be [min, max] (got {rng!r})')
        lo = _positive(f'{hp}{key}[0]', rng[0])
        hi = _positive(f'{hp}{key}[1]', rng[1])
        if lo > hi:
            raise ParameterError(f'{hp}{key}: min {lo:g} must be <= max {hi:g}')
        vec[key] = (lo, hi)
    if not isinstance(values['stamp_age'], bool):
        raise ParameterError(f'{hp}stamp_age: must be true or false '
                             f'(got {values["stamp_age"]!r})')
    ght = _gravity_hold_check(hp + 'gravity_hold_timeout',
                              values.get('gravity_hold_timeout', MAX_GRAVITY_HOLD))
    limits = HardLimits(
        vec['torque'], vec['kp_min'], vec['kp_max'], vec['kd_min'], vec['kd_max'],
        vec['ki_max'], vec['state_timeout'], vec['reference_timeout'], vec['position_lower'],
        vec['position_upper'], vec['velocity'], values['stamp_age'], bool(safety.latch_limits),
        ght)
    for name, value in (('torque_limit', start['torque_limit']), ('kp', start['kp']),
                        ('kd', start['kd']), ('ki', start['ki']),
                        ('safety.state_timeout', safety.state_timeout),
                        ('safety.reference_timeout', safety.reference_timeout),
                        ('safety.position_lower', safety.position_lower),
                        ('safety.position_upper', safety.position_upper),
                        ('safety.velocity_limit', safety.velocity_limit),
                        ('safety.stamp_age', safety.stamp_age),
                        ('safety.gravity_hold_timeout', safety.gravity_hold_timeout)):
        why = limits.check_update(name, value)
        if why:
            raise ParameterError(why.replace('read-only, fixed at start; ', ''))
    return limits


# --------------------------------------------------------------------------------------------
# torques


def ramp_toward_zero(tau, slope, dt: float) -> tuple:
    """
    Return ``tau`` moved toward zero by at most ``slope * dt`` per joint [N·m].

    ``tau_j' = sign(tau_j) max(|tau_j| - slope_j dt, 0)``: the exit ramp (process exit, an
    unexpected error) never steps the torque by more than ``slope_j dt`` and ends at exactly
    zero. A non-finite entry becomes zero.
    """
    out = []
    for v, r in zip(tau, slope):
        v = float(v)
        if not math.isfinite(v):
            out.append(0.0)
            continue
        m = max(abs(v) - float(r) * dt, 0.0)
        out.append(m if v > 0.0 else -m)
    return tuple(out)


def valid_node_name(name: str) -> bool:
    """Tell whether ``name`` is a fully qualified ROS node name (``/ns/node``)."""
    return bool(re.fullmatch(r'(/[A-Za-z_][A-Za-z0-9_]*)+', name))


def source_check(expected: str, publishers: Sequence[str], matched: int, *,
                 senders: int | None = None) -> tuple[str, bool]:
    """
    Judge the publishers of an input: ``(conflict, may_lock)``.

    Parameters
    ----------
    expected : str
        Fully qualified node that must publish the input (``/joint_state_broadcaster``);
        ``''``: any single publisher.
    publishers : sequence of str
        Fully qualified node names of the publishers on the ROS graph (``''`` or
        ``'_NODE_NAME_UNKNOWN_'`` for a participant whose node is not known yet).
    matched : int
        Publishers matched with the reader (DDS matched status); more than the graph lists
        count as unknown nodes.
    senders : int, optional
        How many of them sent within the quiet window (:meth:`SourceGuard.senders`), and
        none appeared within it; None: unknown (an RMW without sequence numbers, or a
        publisher appeared within the window).

    Returns
    -------
    conflict : str
        Non-empty (the detail) when nothing derived from the input may be commanded:
        without ``expected``, more than one publisher is matched or on the graph, unless
        exactly one of them sends (``senders == 1``): the others have sent nothing for the
        quiet window (a killed or stopped driver whose DDS lease has not ended), and the one
        that sends is the input's source. Two that send are never trusted.
    may_lock : bool
        Whether a new message sequence may be taken as the input's source now: without
        ``expected``, exactly one publisher; with it, every publisher (matched and on the
        graph) is the expected node (a restarted driver whose dead predecessor is still on
        the graph has the same name).

    """
    names = list(publishers)
    n = max(len(names), int(matched))
    if not expected:
        if n > 1 and senders == 1:
            return '', True
        if n > 1:
            return (f'{n} publishers ({", ".join(names) or "not on the graph yet"}): no '
                    f'single source', False)
        return '', n == 1
    foreign = [p for p in names if p != expected]
    unknown = max(int(matched) - len(names), 0)
    own = len(names) - len(foreign)
    return '', own >= 1 and not foreign and not unknown


def clamp_torque(tau, limit) -> tuple:
    """Clamp each joint to ``+-limit`` [N·m]; all zeros if any entry is not finite."""
    t = [float(v) for v in tau]
    if not all(math.isfinite(v) for v in t):
        return (0.0,) * len(t)
    return tuple(min(max(v, -lk), lk) for v, lk in zip(t, limit))


def hold_torque(model, q, qd, q_hold, kp, kd, limit) -> tuple:
    r"""
    Gravity-compensated hold through the nominal mass matrix, damping dominant, bounded.

    .. math::

        a = K_{p,h} (q_{hold} - q) - K_{d,h} \dot q, \qquad
        \tau = \hat c(q, \dot q) + \hat g(q) + s \, \hat M(q) \, a

    with the per-joint bandwidth ``kp`` [1/s^2] and ``kd`` [1/s], the nominal model's mass
    matrix ``M^``, velocity terms ``c^`` and gravity ``g^`` (:class:`ArmModel`, ``bias``). On
    the nominal arm every joint then follows ``qdd_k = s a_k``, whatever the inertia coupling
    and the speed: a light mode of a coupled arm
    sees the same bandwidth as a heavy one (a per-joint gain sized on the diagonal ``M_kk``
    puts ``Kd / lambda_min(M)`` on the light mode). ``s`` in [0, 1] is the largest factor
    that keeps every ``|tau_k| <= limit_k``: the feedback is scaled, not clipped per joint,
    so a saturated joint does not turn the acceleration of the others (0 when ``c^ + g^``
    alone exceeds a limit; then it is clamped). ``qd = 0`` and ``q_hold = q`` give
    the pure gravity hold ``g^(q)``. All zeros if anything is not finite [N·m].
    """
    n = len(q)
    # the velocity terms c(q, qd) too: a coasting coupled arm throws its energy into the
    # light joints, and the hold must not leave that to the (scaled) feedback
    g = model.bias(q, qd) if any(qd) else model.gravity(q)
    a = [kp[k] * (q_hold[k] - q[k]) - kd[k] * qd[k] for k in range(n)]
    if not any(a):
        return clamp_torque(g, limit)
    if not all(math.isfinite(v) for v in a):
        return (0.0,) * n
    f = model.mass_matrix(q) @ a
    s = 1.0
    for k in range(n):
        gk, fk, lk = float(g[k]), float(f[k]), limit[k]
        if abs(gk) >= lk:               # gravity alone saturates: no feedback
            s = 0.0
        elif abs(gk + s * fk) > lk:     # |g_k + s f_k| is convex in s: shrink s to the bound
            s = min(s, ((lk if fk > 0.0 else -lk) - gk) / fk)
    return clamp_torque([g[k] + s * f[k] for k in range(n)], limit)


# --------------------------------------------------------------------------------------------
# supervisor


class Mode(str, Enum):
    """Controller mode."""

    NORMAL = 'normal'
    SAFE = 'safe'


class SafeReason(str, Enum):
    """Why the controller is in safe mode (``NONE`` in normal mode)."""

    NONE = 'none'
    INACTIVE = 'inactive'
    NO_STATE_YET = 'no_state_yet'
    STATE_TIMEOUT = 'state_timeout'
    POSITION_LIMIT = 'position_limit'
    VELOCITY_LIMIT = 'velocity_limit'
    SOURCE_CONFLICT = 'source_conflict'


class Transition(NamedTuple):
    """A change of (mode, reason), reported once."""

    time: float
    old_mode: Mode
    old_reason: SafeReason
    mode: Mode
    reason: SafeReason
    detail: str

    @property
    def resumed(self) -> bool:
        """Whether this is a return to normal from safe (reset the integral, etc.)."""
        return self.mode is Mode.NORMAL and self.old_mode is Mode.SAFE

    def __str__(self) -> str:
        if self.mode is Mode.NORMAL:
            return f'controller mode: normal (resumed from {self.old_reason.value})'
        return f'controller mode: safe ({self.reason.value}: {self.detail})'


class SafetySupervisor:
    """
    Joint-state watchdog, position/velocity envelope and safe torque (see module doc).

    Parameters
    ----------
    params : SafetyParameters
    joints : sequence of 2 str
        Joint names (for the transition details).

    Notes
    -----
    Feed every accepted (validated) joint state with :meth:`update_state` and call
    :meth:`check` periodically (at least once per control period) and before every command.
    Both return a :class:`Transition` when the (mode, reason) changed, else None.

    """

    def __init__(self, params: SafetyParameters | None = None,
                 joints: Sequence[str] = ('joint1', 'joint2')):
        self.params = params or SafetyParameters()
        self.joints = tuple(joints)
        self.mode = Mode.SAFE
        self.reason = SafeReason.INACTIVE
        self.detail = 'not activated'
        self.active = False
        self.last_q: tuple | None = None
        self.last_qd: tuple | None = None
        self.last_state_time: float | None = None
        self.hold_target: tuple | None = None
        self.safe_since: float | None = None
        self.entries: dict[str, int] = {}
        self.last_transition: Transition | None = None
        self._pos_fault = ''
        self._vel_fault = ''
        self._seen_inside = False
        self._timed_out = False
        self.source_fault = ''
        #: the state timeout in use [s] when set (in periods of the measured state rate,
        #: :class:`~manip_control.supervision.StampGate`); else ``params.state_timeout``
        self.timeout_override: float | None = None

    @property
    def state_timeout(self) -> float:
        """Return the state timeout in use [s]."""
        t = self.timeout_override
        return self.params.state_timeout if t is None else t

    # -- configuration ------------------------------------------------------------------------
    def set_params(self, params: SafetyParameters) -> None:
        """Replace the settings; takes effect at the next state / check."""
        self.params = params

    # -- lifecycle ---------------------------------------------------------------------------
    def activate(self, now: float) -> Transition | None:
        """
        Arm the supervisor: SAFE(no_state_yet) until an accepted state arrives.

        Clears latched envelope faults and forgets the last state (it may be from before).
        """
        self.active = True
        self.last_q = self.last_qd = self.last_state_time = None
        self._pos_fault = self._vel_fault = ''
        self._seen_inside = False
        self._timed_out = False
        return self._evaluate(now)

    def deactivate(self, now: float) -> Transition | None:
        """Disarm: SAFE(inactive)."""
        self.active = False
        return self._evaluate(now)

    # -- inputs --------------------------------------------------------------------------------
    def update_state(self, now: float, q, qd, age: float = 0.0) -> Transition | None:
        """
        Feed an accepted joint state (positions [rad], velocities [rad/s]) received at ``now``.

        ``age`` [s] is how old the state already was when it arrived (from its stamp, when the
        clocks allow): the watchdog counts from ``now - age``, so a backlog of old states
        processed late (a starved process) does not look fresh. Non-finite values are ignored
        (the caller should have refused them).
        """
        q = tuple(float(v) for v in q)
        qd = tuple(float(v) for v in qd)
        if not (all(math.isfinite(v) for v in q) and all(math.isfinite(v) for v in qd)):
            return self._evaluate(now)
        t = now - age if age > 0.0 else now
        if self.last_state_time is not None and t < self.last_state_time:
            t = self.last_state_time
        self.last_q, self.last_qd, self.last_state_time = q, qd, t
        if self.active:
            self._update_envelope(self.last_q, self.last_qd)
        return self._evaluate(now)

    def check(self, now: float) -> Transition | None:
        """Evaluate the watchdog at ``now``; returns the transition if the mode changed."""
        return self._evaluate(now)

    def set_source_fault(self, now: float, detail: str) -> Transition | None:
        """
        Set (non-empty ``detail``) or clear the input-source conflict (``source_conflict``).

        Another publisher's data arrived on an input (:class:`SourceGuard`); the controller
        holds until the conflict has been over for the guard's hold time.
        """
        self.source_fault = detail
        return self._evaluate(now)

    def touch(self, now: float) -> Transition | None:
        """
        Count the last accepted state as received at ``now``.

        Lockstep: a state the controller has not answered yet does not age -- the plant is
        waiting for us.
        """
        if self.last_state_time is not None:
            self.last_state_time = now
        return self._evaluate(now)

    # -- queries -----------------------------------------------------------------------------
    @property
    def is_safe(self) -> bool:
        """Whether the supervisor is in safe mode (any reason)."""
        return self.mode is Mode.SAFE

    @property
    def should_command(self) -> bool:
        """Whether the node publishes commands (active and a state has arrived)."""
        return self.reason not in (SafeReason.INACTIVE, SafeReason.NO_STATE_YET)

    def state_age(self, now: float) -> float:
        """Age of the last accepted state [s] (inf when none)."""
        return math.inf if self.last_state_time is None else now - self.last_state_time

    def safe_torque(self, model, torque_limit) -> tuple:
        """
        Return the safe-mode command [N·m] for the current reason (see the module doc).

        Parameters
        ----------
        model : ArmModel
            The controller's nominal model (for ``g^``).
        torque_limit : sequence of n float
            Per-joint clamp [N·m].

        """
        p = self.params
        zero = (0.0,) * len(self.joints)
        if (p.safe_mode == 'zero' or self.last_q is None
                or self.reason in (SafeReason.INACTIVE, SafeReason.NO_STATE_YET)):
            return zero
        q = self.last_q
        if self.reason is SafeReason.STATE_TIMEOUT:
            return hold_torque(model, q, zero, q, zero, zero, torque_limit)
        target = self.hold_target if self.hold_target is not None else q
        return hold_torque(model, q, self.last_qd, target, p.hold_kp, p.hold_kd, torque_limit)

    def clamp_reference(self, q_d, qd_d, qdd_d) -> tuple[tuple, tuple, tuple, bool]:
        """
        Keep a reference inside the envelope.

        q_d goes into the envelope shrunk by ``2 position_margin`` (with zero velocity and
        acceleration on a clamped joint), qd_d to ``+-(velocity_limit - velocity_margin)``.
        Returns (q_d, qd_d, qdd_d, clamped).
        """
        p = self.params
        m = 2.0 * p.position_margin
        lo, hi, vl, vm = p.position_lower, p.position_upper, p.velocity_limit, p.velocity_margin
        n = len(q_d)
        if all(lo[k] + m <= q_d[k] <= hi[k] - m and -(vl[k] - vm) <= qd_d[k] <= vl[k] - vm
               for k in range(n)):
            return q_d, qd_d, qdd_d, False          # the 1 kHz path: inside, unchanged
        q, v, a = list(q_d), list(qd_d), list(qdd_d)
        clamped = False
        for k in range(n):
            lo, hi = p.position_lower[k] + m, p.position_upper[k] - m
            if q[k] < lo or q[k] > hi:
                q[k] = lo if q[k] < lo else hi
                v[k] = a[k] = 0.0
                clamped = True
            vmax = p.velocity_limit[k] - p.velocity_margin
            if v[k] > vmax or v[k] < -vmax:
                v[k] = vmax if v[k] > 0.0 else -vmax
                clamped = True
        return tuple(q), tuple(v), tuple(a), clamped

    def status(self) -> dict[str, str]:
        """Key/value strings for diagnostics."""
        return {
            'mode': self.mode.value,
            'reason': self.reason.value,
            'detail': self.detail,
            'safe_mode': self.params.safe_mode,
            'hold_target': ('' if self.hold_target is None
                            else ', '.join(f'{v:.6g}' for v in self.hold_target)),
            **{f'safe_entries.{k}': str(v) for k, v in sorted(self.entries.items())},
        }

    # -- internals ---------------------------------------------------------------------------
    def _update_envelope(self, q, qd) -> None:
        p = self.params
        lo, hi, vl = p.position_lower, p.position_upper, p.velocity_limit
        pm, vm = p.position_margin, p.velocity_margin
        n = len(q)
        out = ''
        for k in range(n):
            if q[k] < lo[k]:
                out = f'{self.joints[k]} position {q[k]:.6g} < lower limit {lo[k]:.6g}'
                break
            if q[k] > hi[k]:
                out = f'{self.joints[k]} position {q[k]:.6g} > upper limit {hi[k]:.6g}'
                break
        if out:
            self._pos_fault = out
        elif self._pos_fault and not p.latch_limits:
            if all(lo[k] + pm <= q[k] <= hi[k] - pm for k in range(n)):
                self._pos_fault = ''
        if not out:
            self._seen_inside = True
        vout = ''
        for k in range(n):
            if abs(qd[k]) > vl[k]:
                vout = (f'{self.joints[k]} |velocity| {abs(qd[k]):.6g} > limit {vl[k]:.6g}')
                break
        if vout:
            self._vel_fault = vout
        elif self._vel_fault and not p.latch_limits:
            if all(abs(qd[k]) <= vl[k] - vm for k in range(n)):
                self._vel_fault = ''

    def _conditions(self, now: float) -> tuple[SafeReason, str]:
        if not self.active:
            return SafeReason.INACTIVE, 'not active'
        if self.last_state_time is None:
            return SafeReason.NO_STATE_YET, 'waiting for the first valid joint state'
        age = now - self.last_state_time
        timeout = self.state_timeout
        if age > timeout:
            return SafeReason.STATE_TIMEOUT, (
                f'no valid joint state for {age * 1e3:.1f} ms '
                f'(timeout {timeout * 1e3:.1f} ms)')
        if self.source_fault:
            return SafeReason.SOURCE_CONFLICT, self.source_fault
        if self._pos_fault:
            return SafeReason.POSITION_LIMIT, self._pos_fault
        if self._vel_fault:
            return SafeReason.VELOCITY_LIMIT, self._vel_fault
        return SafeReason.NONE, ''

    def _evaluate(self, now: float) -> Transition | None:
        reason, detail = self._conditions(now)
        mode = Mode.NORMAL if reason is SafeReason.NONE else Mode.SAFE
        if mode is self.mode and reason is self.reason:
            if mode is Mode.SAFE and reason is not SafeReason.STATE_TIMEOUT:
                self.detail = detail
            return None
        old_mode, old_reason = self.mode, self.reason
        if mode is Mode.SAFE:
            if old_mode is Mode.NORMAL or self.hold_target is None:
                self.hold_target = self._capture_hold_target()
                self.safe_since = now
            if reason not in (SafeReason.INACTIVE, SafeReason.NO_STATE_YET):
                self.entries[reason.value] = self.entries.get(reason.value, 0) + 1
        else:
            self.hold_target = None
            self.safe_since = None
        self.mode, self.reason, self.detail = mode, reason, detail
        tr = Transition(now, old_mode, old_reason, mode, reason, detail)
        self.last_transition = tr
        return tr

    def _capture_hold_target(self) -> tuple | None:
        if self.last_q is None:
            return None
        if not self._seen_inside:
            return self.last_q
        p = self.params
        m = 2.0 * p.position_margin
        return tuple(min(max(v, p.position_lower[k] + m), p.position_upper[k] - m)
                     for k, v in enumerate(self.last_q))


class ReferenceWatchdog:
    """
    Bring the reference to a smooth stop when it stops arriving.

    Until ``timeout`` the last sample is used as it is; after it, the reference decelerates
    from the last sample's position and velocity at ``a_k`` per joint (when given, else it
    holds the last position with zero velocity)::

        t' = age - timeout,  T_k = |qd_k| / a_k
        q_k(t') = q_k + qd_k t' - sign(qd_k) a_k t'^2 / 2   (t' < T_k; then q_k + qd_k T_k / 2)

    continuous in position and velocity: a reference that stops moving at once would step
    the velocity error by ``qd_k``, and on a coupled arm the limited torque that answers
    such a step has driven a light direction of the mass matrix past its velocity limit.

    Parameters
    ----------
    timeout : float
        Maximum age of the last reference [s] before stopping it.

    """

    def __init__(self, timeout: float):
        self.timeout = float(timeout)
        self.reset()

    def reset(self) -> None:
        """Forget the last reference."""
        self.last: ReferenceSample | None = None
        self.last_time: float | None = None
        self.holding = False
        self.hold_count = 0
        self.hold_age: float | None = None

    def update(self, now: float, sample: ReferenceSample) -> None:
        """Feed an accepted reference sample received at ``now``."""
        self.last = ReferenceSample(tuple(sample.q), tuple(sample.qd), tuple(sample.qdd))
        self.last_time = now

    def get(self, now: float, deceleration: Sequence[float] | None = None
            ) -> tuple[ReferenceSample | None, str | None]:
        """
        Return the reference to use at ``now`` and a log line when the hold changed.

        Returns ``(None, None)`` before the first reference. After ``timeout`` without a
        new sample: the stopping reference (``deceleration`` [rad/s^2] per joint; None: the
        last position with zero velocity) and, once, ``'reference lost ...'``; when samples
        return, once, ``'reference resumed'``.
        """
        if self.last is None:
            return None, None
        age = now - self.last_time
        stale = age > self.timeout
        note = None
        if stale != self.holding:
            self.holding = stale
            if stale:
                self.hold_count += 1
                self.hold_age = age
                note = (f'reference lost for {age * 1e3:.1f} ms (timeout '
                        f'{self.timeout * 1e3:.1f} ms): stopping it from the last reference '
                        f'position {", ".join(f"{v:.6g}" for v in self.last.q)}')
            else:
                note = 'reference resumed'
        if stale:
            return self._stopping(age - self.timeout, deceleration), note
        return self.last, note

    def _stopping(self, t: float, deceleration) -> ReferenceSample:
        last = self.last
        n = len(last.q)
        if deceleration is None:
            z = (0.0,) * n
            return ReferenceSample(last.q, z, z)
        q, qd, qdd = [], [], []
        for k in range(n):
            v, a = float(last.qd[k]), float(deceleration[k])
            if v == 0.0 or not a > 0.0:
                q.append(last.q[k])
                qd.append(0.0)
                qdd.append(0.0)
                continue
            sgn = 1.0 if v > 0.0 else -1.0
            stop = abs(v) / a
            if t < stop:
                q.append(last.q[k] + v * t - 0.5 * sgn * a * t * t)
                qd.append(v - sgn * a * t)
                qdd.append(-sgn * a)
            else:
                q.append(last.q[k] + 0.5 * v * stop)
                qd.append(0.0)
                qdd.append(0.0)
        return ReferenceSample(tuple(q), tuple(qd), tuple(qdd))
