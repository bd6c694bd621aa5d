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
Cost of the input checks per message (prints measured figures; not a timed test).

    .venv/bin/python bench/bench_inputs.py

1. A 20,000-name JointState with a duplicate name, as CDR bytes: the controller's path
   (decode, refusal) -- refused at the name count, before any name is decoded -- against
   decoding every name and matching them in one pass (what the size cap saves), and against
   the former quadratic duplicate search (on 2,000 names; it grows with the square).
2. A valid 2-joint JointState and a 256-name one with the configured joints last: decode
   and validation (the 1 kHz path, and the largest accepted message).
3. A message of a second publisher: the per-message source check and refusal counting.
4. The real-time controller's look at the matched counts of its two inputs and two command
   publishers (rclpy count queries, every 5 ms in the control thread), on a configured and
   active controller node.

Figures are the median of repeated runs (minimum for the long ones) on this machine.
"""

from __future__ import annotations

import itertools
import statistics
import time

from manip_control.nodes import cdr
from manip_control.safety import _name_index
from manip_control.safety import decode_refusal
from manip_control.safety import map_joint_state
from manip_control.safety import MAX_NAMES
from manip_control.safety import RefusalCounter
from manip_control.safety import SourceGuard

J = ('joint1', 'joint2')


def timed(fn, repeat: int) -> list[float]:
    """Run ``fn`` ``repeat`` times; return the durations [s]."""
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def controller_path(raw: bytes):
    """Decode a JointState and validate it as the controller does."""
    msg, reason = cdr.decode_joint_state(raw)
    if reason:
        return decode_refusal(reason)
    _, names, pos, vel, eff = msg
    return map_joint_state(J, names, pos, vel, eff)


def quadratic_duplicate(names):
    """Return the first duplicate with the former search (a slice per name)."""
    return next((nm for k, nm in enumerate(names) if nm in names[:k]), None)


def main() -> None:
    """Print the figures."""
    names = [f'j{k}' for k in range(20000)] + list(J) + ['j7']
    zeros = [0.0] * len(names)
    raw = cdr.encode_joint_state(1, names, zeros, zeros, [])
    print(f'20,000-name JointState ({len(raw) / 1e3:.0f} kB of CDR), duplicate name at the end')
    res = controller_path(raw)
    t = timed(lambda: controller_path(raw), 200)
    print(f'  controller path (decode + validate): {res.reason.value}, median '
          f'{statistics.median(t) * 1e6:.1f} us')
    t = timed(lambda: _decode_all_names(raw), 5)
    print(f'  without the size cap, decoding the names alone: min {min(t) * 1e3:.1f} ms')
    t = timed(lambda: _name_index(J, names, 'name'), 5)
    print(f'  one-pass name matching of all 20,003 names: min {min(t) * 1e3:.2f} ms')
    short = names[:2000] + ['j7']
    t = timed(lambda: quadratic_duplicate(short), 3)
    print(f'  former quadratic duplicate search, 2,001 names only: min {min(t) * 1e3:.1f} ms '
          f'(x100 for 20,000)')

    ok = cdr.encode_joint_state(1, list(J), [0.1, 0.2], [0.0, 0.0], [])
    t = timed(lambda: controller_path(ok), 20000)
    print(f'2-joint JointState, decode + validate: median {statistics.median(t) * 1e6:.2f} us')
    big = [f'j{k}' for k in range(MAX_NAMES - 2)] + ['joint2', 'joint1']
    raw_big = cdr.encode_joint_state(2, big, [0.0] * MAX_NAMES, [0.0] * MAX_NAMES, [])
    assert controller_path(raw_big).position == (0.0, 0.0)
    t = timed(lambda: controller_path(raw_big), 2000)
    print(f'{MAX_NAMES}-name JointState (largest accepted), decode + validate: median '
          f'{statistics.median(t) * 1e6:.1f} us, max {max(t) * 1e6:.1f} us')

    guard, counter = SourceGuard('joint_states'), RefusalCounter()
    guard.check(5000, 0.0)
    guard.publishers = 2
    seqs = itertools.cycle(range(1, 4000))     # another writer's numbering

    def second_source():
        r = guard.check(next(seqs), 0.001)
        counter.record('joint_states', r, 0.001)
    t = timed(second_source, 100000)
    print(f'message of a second publisher: source check + refusal count median '
          f'{statistics.median(t) * 1e6:.2f} us (before any decoding)')
    match_poll()
    # the host's speed of the moment, as the other benchmarks print it (module-level loop)
    t = time.process_time()
    exec(compile('s = 0\nfor i in range(10 ** 7):\n    s += i\n', '<additions>', 'exec'), {})
    print(f'(a Python loop of 1e7 additions: {time.process_time() - t:.2f} s CPU)')


def match_poll() -> None:
    """Time the real-time controller's look at its matched counts (section 4)."""
    import rclpy
    from manip_control.nodes.controller_node import ControllerNode
    from manip_control.nodes.controller_node import MATCH_POLL_PERIOD
    from manip_control.nodes.ros_params import controller_specs
    from manip_control.nodes.ros_params import parameter_overrides
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    node = ControllerNode(context=ctx, parameter_overrides=parameter_overrides(
        controller_specs(), {'mode': 'realtime', 'autostart': False}))
    try:
        node.trigger_configure()
        node.trigger_activate()
        with node._lock:
            t = timed(lambda: node._poll_matches(from_watchdog=True), 20000)
        med = statistics.median(t)
        print(f'matched-count look of the real-time controller (4 endpoints): median '
              f'{med * 1e6:.2f} us, every {MATCH_POLL_PERIOD * 1e3:g} ms: '
              f'{med / MATCH_POLL_PERIOD * 100:.3f} % of the control thread')
    finally:
        node.destroy_node()
        rclpy.try_shutdown(context=ctx)


def _decode_all_names(raw: bytes) -> list:
    """Decode the name sequence of a JointState without the size cap."""
    r = cdr._Reader(raw)
    r.stamp()
    r.string()
    n = r.u32()
    return [r.string() for _ in range(n)]


if __name__ == '__main__':
    main()
