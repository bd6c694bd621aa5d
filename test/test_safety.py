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
Unit tests of manip_control.safety (ROS-free).

Gravity torques are checked against the closed form written out here, and against a
central difference of the potential energy computed here from first principles, never
against the model under test.
"""

import array
import math
import time

from manip_control.arm_model import TwoLinkArm
from manip_control.dynamics import TwoLinkModel
from manip_control.parameters import ArmParameters
from manip_control.parameters import ParameterError
from manip_control.parameters import PlantParameters
from manip_control.plant import Plant
from manip_control.safety import clamp_torque
from manip_control.safety import decode_refusal
from manip_control.safety import hard_limit_defaults
from manip_control.safety import hard_limits_from_values
from manip_control.safety import hold_torque
from manip_control.safety import map_array_command
from manip_control.safety import map_joint_state
from manip_control.safety import map_reference
from manip_control.safety import Mode
from manip_control.safety import ramp_toward_zero
from manip_control.safety import ReferenceSample
from manip_control.safety import ReferenceWatchdog
from manip_control.safety import Refusal
from manip_control.safety import RefusalCounter
from manip_control.safety import RefusalReason
from manip_control.safety import SafeReason
from manip_control.safety import safety_from_dict
from manip_control.safety import SafetyParameters
from manip_control.safety import SafetySupervisor
from manip_control.safety import source_check
from manip_control.safety import SourceGuard
from manip_control.safety import validate_parameter_updates
import numpy as np
import pytest

J = ('joint1', 'joint2')
NAN, INF = float('nan'), float('inf')
R = RefusalReason


def validate_parameter_update(name, value, current=None):
    """Validate one runtime change as the controller does (a set of one)."""
    return validate_parameter_updates({name: value}, current)


def reason(res):
    assert isinstance(res, Refusal), res
    return res.reason


# --------------------------------------------------------------------------------------------
# joint states


def test_joint_state_in_order():
    res = map_joint_state(J, ['joint1', 'joint2'], [0.1, 0.2], [1.0, 2.0], [5.0, 6.0])
    assert res.position == (0.1, 0.2) and res.velocity == (1.0, 2.0) and res.effort is None
    assert all(type(v) is float for v in res.position + res.velocity)


def test_joint_state_reordered_and_extra_joints():
    res = map_joint_state(J, ['gripper', 'joint2', 'joint1'], [NAN, 0.2, 0.1],
                          [INF, 2.0, 1.0], [])
    # names matched by name; the extra joint (even with NaN/Inf values) is ignored
    assert res.position == (0.1, 0.2) and res.velocity == (1.0, 2.0)


@pytest.mark.parametrize('arr', [array.array('d', [0.1, 0.2]), np.array([0.1, 0.2]),
                                 (0.1, 0.2), [0, 1]])
def test_joint_state_accepts_any_numeric_sequence(arr):
    res = map_joint_state(J, J, arr, arr)
    assert not isinstance(res, Refusal)
    assert res.position == tuple(float(v) for v in arr)


def test_joint_state_effort_may_be_empty_but_not_wrong_length():
    assert not isinstance(map_joint_state(J, J, [0, 0], [0, 0], []), Refusal)
    res = map_joint_state(J, J, [0, 0], [0, 0], [1.0])
    assert reason(res) is R.LENGTH_MISMATCH and 'effort' in res.detail


def test_unused_field_nan_is_not_a_refusal():
    res = map_joint_state(J, J, [0, 0], [0, 0], [NAN, INF])
    assert res.position == (0.0, 0.0)


@pytest.mark.parametrize('kwargs,why,word', [
    ({'names': [], 'position': [], 'velocity': []}, R.EMPTY, 'no name'),
    ({'names': [], 'position': [0.0, 0.0], 'velocity': [0.0, 0.0]}, R.LENGTH_MISMATCH, '0 name'),
    ({'names': ['joint1'], 'position': [0.0], 'velocity': [0.0]}, R.MISSING_JOINT, 'joint2'),
    ({'names': ['a', 'b'], 'position': [0.0, 0.0], 'velocity': [0.0, 0.0]}, R.MISSING_JOINT,
     'joint1'),
    ({'names': list(J), 'position': [0.0], 'velocity': [0.0, 0.0]}, R.LENGTH_MISMATCH,
     '1 position'),
    ({'names': list(J), 'position': [0.0, 0.0, 0.0], 'velocity': [0.0, 0.0]}, R.LENGTH_MISMATCH,
     '3 position'),
    ({'names': list(J), 'position': [0.0, 0.0], 'velocity': [0.0]}, R.LENGTH_MISMATCH,
     '1 velocity'),
    ({'names': list(J), 'position': [0.0, 0.0], 'velocity': []}, R.LENGTH_MISMATCH, '0 velocity'),
    ({'names': list(J), 'position': [0.0, 0.0], 'velocity': [0.0, 0.0, 0.0]}, R.LENGTH_MISMATCH,
     '3 velocity'),
    ({'names': ['joint1', 'joint2', 'joint1'], 'position': [0.0] * 3, 'velocity': [0.0] * 3},
     R.DUPLICATE_NAME, 'joint1'),
    ({'names': list(J), 'position': [NAN, 0.0], 'velocity': [0.0, 0.0]}, R.NON_FINITE,
     "position of 'joint1'"),
    ({'names': list(J), 'position': [0.0, INF], 'velocity': [0.0, 0.0]}, R.NON_FINITE,
     "position of 'joint2'"),
    ({'names': list(J), 'position': [0.0, 0.0], 'velocity': [-INF, 0.0]}, R.NON_FINITE,
     "velocity of 'joint1'"),
    ({'names': list(J), 'position': [0.0, 0.0], 'velocity': [0.0, NAN]}, R.NON_FINITE,
     "velocity of 'joint2'"),
    ({'names': None, 'position': [0.0, 0.0], 'velocity': [0.0, 0.0]}, R.LENGTH_MISMATCH, '0 name'),
    ({'names': 'joint1', 'position': [0.0], 'velocity': [0.0]}, R.BAD_TYPE, 'name'),
    ({'names': list(J), 'position': 5.0, 'velocity': [0.0, 0.0]}, R.BAD_TYPE, 'position'),
    ({'names': [1, 2], 'position': [0.0, 0.0], 'velocity': [0.0, 0.0]}, R.BAD_TYPE, 'not a str'),
    ({'names': list(J), 'position': ['x', 0.0], 'velocity': [0.0, 0.0]}, R.BAD_TYPE,
     'not a number'),
    ({'names': list(J), 'position': [None, 0.0], 'velocity': [0.0, 0.0]}, R.BAD_TYPE,
     'not a number'),
])
def test_joint_state_refusals(kwargs, why, word):
    res = map_joint_state(J, **kwargs)
    assert reason(res) is why
    assert word in res.detail
    assert str(res).startswith(why.value + ': ')


def test_joint_state_as_command_by_name():
    res = map_joint_state(J, ['joint2', 'joint1'], [], [], [2.0, 1.0], fields=('effort',))
    assert res.effort == (1.0, 2.0) and res.position is None and res.velocity is None
    assert reason(map_joint_state(J, J, [0.0, 0.0], [], [], fields=('effort',))) \
        is R.LENGTH_MISMATCH
    assert reason(map_joint_state(J, J, [], [], [NAN, 0.0], fields=('effort',))) \
        is R.NON_FINITE


# --------------------------------------------------------------------------------------------
# array commands and references


def test_array_command():
    assert map_array_command([1.0, -2.0], 2) == (1.0, -2.0)
    assert map_array_command(array.array('d', [1.0, 2.0]), 2) == (1.0, 2.0)
    assert reason(map_array_command([], 2)) is R.EMPTY
    assert reason(map_array_command([1.0], 2)) is R.LENGTH_MISMATCH
    assert reason(map_array_command([1.0, 2.0, 3.0], 2)) is R.LENGTH_MISMATCH
    assert reason(map_array_command([NAN, 2.0], 2)) is R.NON_FINITE
    assert reason(map_array_command([1.0, -INF], 2)) is R.NON_FINITE
    assert reason(map_array_command('ab', 2)) is R.BAD_TYPE
    assert reason(map_array_command(3.0, 2)) is R.BAD_TYPE


def test_reference_mapping():
    res = map_reference(J, ['joint2', 'extra', 'joint1'], [2.0, 9.0, 1.0], [0.2, NAN, 0.1],
                        [])
    assert res == ReferenceSample((1.0, 2.0), (0.1, 0.2), (0.0, 0.0))
    assert map_reference(J, J, [1.0, 2.0]).qd == (0.0, 0.0)
    assert reason(map_reference(J, [], [])) is R.EMPTY
    assert reason(map_reference(J, J, [])) is R.LENGTH_MISMATCH
    assert reason(map_reference(J, J, [1.0, 2.0], [0.0])) is R.LENGTH_MISMATCH
    assert reason(map_reference(J, J, [1.0, 2.0], [], [0.0, 0.0, 0.0])) is R.LENGTH_MISMATCH
    assert reason(map_reference(J, ['joint1', 'x'], [1.0, 2.0])) is R.MISSING_JOINT
    assert reason(map_reference(J, ['joint1', 'joint1'], [1.0, 2.0])) is R.DUPLICATE_NAME
    res = map_reference(J, J, [1.0, 2.0], [0.0, 0.0], [0.0, INF])
    assert reason(res) is R.NON_FINITE and 'accelerations' in res.detail
    assert reason(map_reference(J, J, [NAN, 2.0])) is R.NON_FINITE


def test_refusal_counter_counts_and_throttles():
    c = RefusalCounter(throttle=1.0)
    nan = Refusal(R.NON_FINITE, 'x')
    short = Refusal(R.LENGTH_MISMATCH, 'y')
    line = c.record('/joint_states', nan, 10.0)
    assert line and '/joint_states' in line and 'non_finite' in line
    # another reason on the same input is reported at once, then throttled in its turn
    line = c.record('/joint_states', short, 10.5)
    assert line and 'length_mismatch' in line
    assert c.record('/joint_states', short, 10.6) is None
    assert c.record('/joint_states', nan, 10.9) is None
    assert c.record('/joint_states', nan, 10.95) is None
    assert c.record('/reference', nan, 10.9) is not None  # per input
    line = c.record('/joint_states', nan, 11.1)
    assert line and 'non_finite' in line and '2 more refused' in line
    assert c.counts['/joint_states'] == {'non_finite': 4, 'length_mismatch': 2}
    assert c.total('/joint_states') == 6 and c.total() == 7 and c.total('/x') == 0
    # a clock that jumps back (sim time restart) does not silence the log
    assert c.record('/joint_states', nan, 0.0) is not None
    c.reset()
    assert c.total() == 0


# --------------------------------------------------------------------------------------------
# parameters


def test_safety_defaults_and_overrides():
    sp = safety_from_dict({})
    assert sp == SafetyParameters() and sp.safe_mode == 'hold'
    sp = safety_from_dict({'safe_mode': 'zero', 'velocity_limit': [3, 4], 'state_timeout': 0.01})
    assert sp.velocity_limit == (3, 4) and sp.safe_mode == 'zero'
    assert safety_from_dict(None) == SafetyParameters()


@pytest.mark.parametrize('data,path', [
    ({'bogus': 1}, 'safety.bogus: unknown'),
    ([1, 2], 'safety: must be a mapping'),
    ({'safe_mode': 'brake'}, 'safety.safe_mode'),
    ({'state_timeout': 0.0}, 'safety.state_timeout: must be > 0'),
    ({'state_timeout': -1.0}, 'safety.state_timeout: must be > 0'),
    ({'state_timeout': 'fast'}, 'safety.state_timeout: must be a number'),
    ({'state_timeout': True}, 'safety.state_timeout: must be a number'),
    ({'state_timeout': float('nan')}, 'safety.state_timeout: must be finite'),
    ({'reference_timeout': 0}, 'safety.reference_timeout: must be > 0'),
    ({'velocity_limit': [1.0, 0.0]}, 'safety.velocity_limit[1]: must be > 0'),
    ({'velocity_limit': [1.0]}, 'safety.velocity_limit: must have 2'),
    ({'velocity_limit': 1.0}, 'safety.velocity_limit: must be a list'),
    ({'position_lower': [0.0, 'a']}, 'safety.position_lower[1]: must be a number'),
    ({'position_upper': [1.0, INF]}, 'safety.position_upper[1]: must be finite'),
    ({'position_lower': [1.0, -1.0], 'position_upper': [0.5, 1.0]},
     'safety.position_upper[0]: must exceed'),
    ({'position_margin': -0.1}, 'safety.position_margin: must be >= 0'),
    ({'position_margin': 2.0}, 'safety.position_upper[0]: must exceed'),
    ({'velocity_margin': -1.0}, 'safety.velocity_margin: must be >= 0'),
    ({'velocity_margin': 10.0}, 'safety.velocity_margin: must be <'),
    ({'hold_kp': [0.0, 1.0]}, 'safety.hold_kp[0]: must be > 0'),
    ({'hold_kd': [1.0, -1.0]}, 'safety.hold_kd[1]: must be > 0'),
    ({'latch_limits': 'yes'}, 'safety.latch_limits: must be true or false'),
    ({'stamp_age': 1}, 'safety.stamp_age: must be true or false'),
])
def test_safety_invalid_parameters(data, path):
    with pytest.raises(ParameterError) as exc:
        safety_from_dict(data)
    assert str(exc.value).startswith(path), str(exc.value)


@pytest.mark.parametrize('name,value', [
    ('state_timeout', 0.01), ('safety.state_timeout', 0.01),
    ('reference_timeout', 1.0), ('safe_mode', 'zero'), ('position_lower', [-1.0, -1.0]),
    ('position_upper', [1.0, 1.0]), ('velocity_limit', [1.0, 1.0]),
    ('latch_limits', True), ('stamp_age', False),
])
def test_runtime_update_accepted(name, value):
    assert validate_parameter_update(name, value) == (True, '')


@pytest.mark.parametrize('name,value,word', [
    ('state_timeout', 0.0, 'state_timeout: must be > 0'),
    ('safety.state_timeout', -1.0, 'state_timeout: must be > 0'),
    ('reference_timeout', NAN, 'reference_timeout: must be finite'),
    ('safe_mode', 'off', 'safe_mode: must be one of'),
    ('velocity_limit', [1.0, -1.0], 'velocity_limit[1]: must be > 0'),
    ('position_lower', [4.0, -1.0], 'position_upper[0]: must exceed position_lower[0]'),
    ('position_upper', [1.0, NAN], 'position_upper[1]: must be finite'),
    ('velocity_limit', [0.4, 1.0], 'velocity_margin: must be < velocity_limit[0]'),
    ('position_margin', 0.1, 'position_margin: not a runtime-changeable parameter'),
    ('hold_kp', [1.0, 1.0], 'hold_kp: not a runtime-changeable parameter'),
    ('kp', [1.0, 1.0], 'kp: not a runtime-changeable parameter'),
    ('latch_limits', 1, 'latch_limits: must be true or false'),
    ('law', 'pd_gravity', 'law: not a runtime-changeable parameter'),
])
def test_runtime_update_refused_with_reason(name, value, word):
    ok, why = validate_parameter_update(name, value)
    assert not ok and why.startswith(word), why


def test_runtime_updates_cross_checked_together():
    cur = SafetyParameters()
    # moving the whole envelope in one call is fine even though each half alone is not
    assert not validate_parameter_update('position_lower', [5.0, 5.0], cur)[0]
    assert validate_parameter_updates({'position_lower': [5.0, 5.0],
                                       'position_upper': [6.0, 6.0]}, cur) == (True, '')
    narrow = cur.replace(velocity_margin=0.9)
    ok, why = validate_parameter_update('velocity_limit', [0.8, 2.0], narrow)
    assert not ok and 'velocity_margin' in why


# --------------------------------------------------------------------------------------------
# supervisor


def make(**kw):
    sp = SafetyParameters(**{'state_timeout': 0.005, **kw})
    sup = SafetySupervisor(sp, J)
    return sup


def test_initial_and_activation_transitions():
    sup = make()
    assert sup.mode is Mode.SAFE and sup.reason is SafeReason.INACTIVE
    assert not sup.should_command
    # a state while inactive is remembered but does not arm anything
    assert sup.update_state(0.0, (0.0, 0.0), (0.0, 0.0)) is None
    tr = sup.activate(1.0)
    assert (tr.old_reason, tr.reason) == (SafeReason.INACTIVE, SafeReason.NO_STATE_YET)
    assert not sup.should_command and sup.last_q is None
    assert sup.check(5.0) is None  # no timeout before the first state
    tr = sup.update_state(5.0, (0.1, 0.2), (0.0, 0.0))
    assert tr.mode is Mode.NORMAL and tr.resumed and sup.should_command
    assert sup.check(5.001) is None
    tr = sup.deactivate(6.0)
    assert tr.reason is SafeReason.INACTIVE and not sup.should_command
    assert sup.deactivate(6.1) is None


def test_state_timeout_once_and_resume():
    sup = make()
    sup.activate(0.0)
    sup.update_state(0.0, (0.1, 0.2), (0.3, 0.4))
    assert sup.check(0.005) is None  # age == timeout is still fresh
    tr = sup.check(0.0051)
    assert tr.mode is Mode.SAFE and tr.reason is SafeReason.STATE_TIMEOUT
    assert 'timeout 5.0 ms' in tr.detail and str(tr).startswith('controller mode: safe')
    assert sup.check(0.006) is None and sup.check(1.0) is None  # logged once
    assert sup.hold_target == (0.1, 0.2)
    assert sup.entries == {'state_timeout': 1}
    tr = sup.update_state(1.0, (0.1, 0.2), (0.0, 0.0))
    assert tr.resumed and tr.old_reason is SafeReason.STATE_TIMEOUT
    assert sup.hold_target is None and str(tr) == \
        'controller mode: normal (resumed from state_timeout)'
    assert sup.state_age(1.002) == pytest.approx(0.002)


def test_position_limit_latches_until_inside_with_margin():
    sup = make(position_lower=(-1.0, -1.0), position_upper=(1.0, 1.0), position_margin=0.05)
    sup.activate(0.0)
    sup.update_state(0.0, (0.9, 0.0), (0.0, 0.0))
    tr = sup.update_state(0.001, (1.01, 0.0), (0.0, 0.0))
    assert tr.reason is SafeReason.POSITION_LIMIT and 'joint1 position 1.01 > upper' in tr.detail
    # hold target: last position projected 2 margins inside the envelope
    assert sup.hold_target == pytest.approx((0.9, 0.0))
    assert sup.update_state(0.002, (0.99, 0.0), (0.0, 0.0)) is None  # inside but in margin
    assert sup.update_state(0.003, (0.951, 0.0), (0.0, 0.0)) is None
    tr = sup.update_state(0.004, (0.95, 0.0), (0.0, 0.0))
    assert tr.resumed
    tr = sup.update_state(0.005, (0.0, -1.2), (0.0, 0.0))
    assert tr.reason is SafeReason.POSITION_LIMIT and 'joint2 position -1.2 < lower' in tr.detail
    assert sup.entries == {'position_limit': 2}


def test_velocity_limit_hysteresis():
    sup = make(velocity_limit=(2.0, 3.0), velocity_margin=0.5)
    sup.activate(0.0)
    sup.update_state(0.0, (0.0, 0.0), (0.0, 0.0))
    assert sup.update_state(0.001, (0.0, 0.0), (2.0, -3.0)) is None  # at the limit is inside
    tr = sup.update_state(0.002, (0.3, 0.0), (0.0, -3.1))
    assert tr.reason is SafeReason.VELOCITY_LIMIT and 'joint2 |velocity| 3.1' in tr.detail
    assert sup.hold_target == (0.3, 0.0)
    assert sup.update_state(0.003, (0.3, 0.0), (0.0, 2.6)) is None
    assert sup.update_state(0.004, (0.3, 0.0), (0.0, 2.5)).resumed


def test_latch_limits_until_reactivation():
    sup = make(velocity_limit=(2.0, 2.0), latch_limits=True)
    sup.activate(0.0)
    sup.update_state(0.0, (0.0, 0.0), (5.0, 0.0))
    assert sup.reason is SafeReason.VELOCITY_LIMIT
    assert sup.update_state(0.001, (0.0, 0.0), (0.0, 0.0)) is None
    assert sup.reason is SafeReason.VELOCITY_LIMIT
    sup.deactivate(0.002)
    sup.activate(0.003)
    assert sup.update_state(0.004, (0.0, 0.0), (0.0, 0.0)).mode is Mode.NORMAL


def test_reason_priority_and_hold_target_kept():
    sup = make(position_lower=(-1.0, -1.0), position_upper=(1.0, 1.0))
    sup.activate(0.0)
    sup.update_state(0.0, (0.5, 0.0), (0.0, 0.0))
    sup.update_state(0.001, (1.2, 0.0), (20.0, 0.0))  # both out: position wins
    assert sup.reason is SafeReason.POSITION_LIMIT
    target = sup.hold_target
    tr = sup.check(0.1)  # and a timeout beats both
    assert tr.old_reason is SafeReason.POSITION_LIMIT and tr.reason is SafeReason.STATE_TIMEOUT
    assert sup.hold_target == target
    tr = sup.update_state(0.2, (0.0, 0.0), (20.0, 0.0))
    assert tr.reason is SafeReason.VELOCITY_LIMIT and sup.hold_target == target
    assert sup.update_state(0.201, (0.0, 0.0), (0.0, 0.0)).resumed


def test_first_state_outside_envelope_is_held_where_it_is():
    sup = make(position_lower=(-1.0, -1.0), position_upper=(1.0, 1.0))
    sup.activate(0.0)
    tr = sup.update_state(0.0, (1.5, 0.0), (0.0, 0.0))
    assert tr.old_reason is SafeReason.NO_STATE_YET and tr.reason is SafeReason.POSITION_LIMIT
    assert sup.hold_target == (1.5, 0.0)  # no pull-back motion from an unknown situation


def test_non_finite_state_is_ignored():
    sup = make()
    sup.activate(0.0)
    assert sup.update_state(0.0, (NAN, 0.0), (0.0, 0.0)) is None
    assert sup.reason is SafeReason.NO_STATE_YET and sup.last_q is None


def test_status_values():
    sup = make()
    sup.activate(0.0)
    sup.update_state(0.0, (0.1, 0.2), (0.0, 0.0))
    sup.check(1.0)
    st = sup.status()
    assert st['mode'] == 'safe' and st['reason'] == 'state_timeout'
    assert st['hold_target'] == '0.1, 0.2' and st['safe_entries.state_timeout'] == '1'


# --------------------------------------------------------------------------------------------
# safe torques

ARM = ArmParameters()  # m = 3 / 2 kg, l = 1 m, lc = 0.5 m


def gravity_closed_form(q, m1=3.0, m2=2.0, l1=1.0, lc1=0.5, lc2=0.5, g0=9.81):
    """Spong et al. 6.4: g = dV/dq of V = m1 g lc1 s1 + m2 g (l1 s1 + lc2 s12)."""
    q1, q2 = q
    return np.array([(m1 * lc1 + m2 * l1) * g0 * math.cos(q1)
                     + m2 * lc2 * g0 * math.cos(q1 + q2), m2 * lc2 * g0 * math.cos(q1 + q2)])


def gravity_from_energy(q, m1=3.0, m2=2.0, l1=1.0, lc1=0.5, lc2=0.5, g0=9.81, h=1e-6):
    def V(a, b):
        return m1 * g0 * lc1 * math.sin(a) + m2 * g0 * (l1 * math.sin(a) + lc2 * math.sin(a + b))
    return np.array([(V(q[0] + h, q[1]) - V(q[0] - h, q[1])) / (2 * h),
                     (V(q[0], q[1] + h) - V(q[0], q[1] - h)) / (2 * h)])


LIM = (89.0, 25.0)
MODEL = TwoLinkArm(TwoLinkModel(ARM, (0.1, 0.05)))


@pytest.mark.parametrize('q', [(0.0, 0.0), (0.3, -0.7), (-1.2, 2.0), (math.pi / 2, 0.0)])
def test_gravity_hold_equals_closed_form(q):
    ref = gravity_closed_form(q)
    np.testing.assert_allclose(ref, gravity_from_energy(q), atol=1e-6)
    tau = hold_torque(MODEL, q, (0.0, 0.0), q, (100.0, 30.0), (40.0, 10.0), (1e3, 1e3))
    np.testing.assert_allclose(tau, ref, rtol=1e-12, atol=1e-12)


def mass_closed_form(q):
    """2R mass matrix from the lumped parameters (rotors on the diagonal)."""
    tl = TwoLinkModel(ARM, (0.1, 0.05))
    c2 = math.cos(q[1])
    return np.array([[tl.a + 2.0 * tl.b * c2, tl.d12 + tl.b * c2],
                     [tl.d12 + tl.b * c2, tl.d22]])


def hold_closed_form(q, qd, qh, kp, kd):
    """``c(q, qd) + g(q) + M(q) (Kp (q_hold - q) - Kd qd)`` of the 2R in closed form [N m]."""
    a = np.array(kp) * (np.array(qh) - q) - np.array(kd) * np.array(qd)
    h = TwoLinkModel(ARM, (0.1, 0.05)).b * math.sin(q[1])      # Spong et al. 6.4
    c = np.array([-h * (2.0 * qd[0] * qd[1] + qd[1] ** 2), h * qd[0] ** 2])
    return c + gravity_closed_form(q) + mass_closed_form(q) @ a


def test_hold_torque_through_the_mass_matrix_and_scaled_into_the_limits():
    q, qd, qh = (0.3, -0.2), (0.5, -1.0), (0.35, -0.1)
    kp, kd = (100.0, 30.0), (40.0, 10.0)
    np.testing.assert_allclose(hold_torque(MODEL, q, qd, qh, kp, kd, (1e3, 1e3)),
                               hold_closed_form(q, qd, qh, kp, kd), rtol=1e-12)
    # saturated: the feedback is scaled (its direction kept), one joint at its limit
    g = hold_closed_form(q, (-3.0, 3.0), q, (0.0, 0.0), (0.0, 0.0))    # c + g
    f = hold_closed_form(q, (-3.0, 3.0), qh, kp, kd) - g
    tau = np.array(hold_torque(MODEL, q, (-3.0, 3.0), qh, kp, kd, LIM))
    assert np.all(np.abs(tau) <= np.array(LIM) + 1e-12)
    assert np.isclose(np.abs(tau), LIM, rtol=1e-12).any()
    s = (tau - g) @ f / (f @ f)
    assert 0.0 < s < 1.0
    np.testing.assert_allclose(tau - g, s * f, rtol=1e-9, atol=1e-9)
    # the velocity terms and gravity alone above a limit: no feedback, they are clamped
    cg = hold_closed_form(q, qd, q, (0.0, 0.0), (0.0, 0.0))
    assert hold_torque(MODEL, q, qd, qh, kp, kd, (1.0, 1.0)) == clamp_torque(cg, (1.0, 1.0))
    assert hold_torque(MODEL, (NAN, 0.0), (0.0, 0.0), (0.0, 0.0), kp, kd, LIM) == (0.0, 0.0)
    assert hold_torque(MODEL, q, (NAN, 0.0), qh, kp, kd, LIM) == (0.0, 0.0)


def test_clamp_torque():
    assert clamp_torque((100.0, -100.0), LIM) == (89.0, -25.0)
    assert clamp_torque((1.0, -2.0), LIM) == (1.0, -2.0)
    assert clamp_torque((NAN, 1.0), LIM) == (0.0, 0.0)
    assert clamp_torque((1.0, INF), LIM) == (0.0, 0.0)


def test_safe_torque_per_reason():
    sup = make(position_lower=(-1.0, -1.0), position_upper=(1.0, 1.0))
    assert sup.safe_torque(MODEL, LIM) == (0.0, 0.0)  # inactive
    sup.activate(0.0)
    assert sup.safe_torque(MODEL, LIM) == (0.0, 0.0)  # no state yet
    sup.update_state(0.0, (0.5, 0.2), (0.0, 0.0))
    sup.update_state(0.001, (1.1, 0.2), (2.0, -1.0))  # position fault, moving
    kp, kd = np.array(sup.params.hold_kp), np.array(sup.params.hold_kd)
    qh = np.array([0.9, 0.2])  # 1.0 - 2 * 0.05
    ref = hold_closed_form((1.1, 0.2), (2.0, -1.0), qh, kp, kd)
    np.testing.assert_allclose(sup.safe_torque(MODEL, (1e3, 1e3)), ref, rtol=1e-12)
    sup.check(1.0)  # stale: pure gravity hold at the last position, no stale feedback
    assert sup.reason is SafeReason.STATE_TIMEOUT
    np.testing.assert_allclose(sup.safe_torque(MODEL, LIM), gravity_closed_form((1.1, 0.2)),
                               rtol=1e-12)
    assert make(safe_mode='zero').safe_torque(MODEL, LIM) == (0.0, 0.0)
    zs = make(safe_mode='zero')
    zs.activate(0.0)
    zs.update_state(0.0, (0.5, 0.2), (0.0, 0.0))
    zs.check(1.0)
    assert zs.is_safe and zs.safe_torque(MODEL, LIM) == (0.0, 0.0)


def test_hold_mode_holds_the_simulated_arm():
    """
    Hold the simulated arm: ideal-actuator plant, exact model, closed loop.

    A state timeout at rest keeps the arm where it was (pure gravity hold); a position fault
    brings it back just inside and the supervisor resumes.
    """
    plant_p = PlantParameters(actuator='ideal', rotor_inertia=False, torque_limit=(1e3, 1e3),
                              initial_position=(0.4, 0.3))
    T = 1e-3
    plant = Plant(plant_p, T)
    model = TwoLinkArm(TwoLinkModel(plant_p.arm))
    sup = make(position_lower=(-1.0, -1.0), position_upper=(0.38, 1.0))
    sup.activate(0.0)
    t = 0.0
    for k in range(2000):  # arm starts outside: held where it is
        t = k * T
        sup.update_state(t, plant.position, plant.velocity)
        plant.step(*sup.safe_torque(model, (1e3, 1e3)))
    assert sup.reason is SafeReason.POSITION_LIMIT
    np.testing.assert_allclose(plant.position, (0.4, 0.3), atol=1e-6)
    # from inside the envelope: a fault after an in-envelope sample pulls it back
    sup.set_params(sup.params.replace(position_upper=(0.45, 1.0)))
    sup.update_state(t, plant.position, plant.velocity)
    assert sup.mode is Mode.NORMAL
    sup.set_params(sup.params.replace(position_upper=(0.39, 1.0)))
    sup.update_state(t, plant.position, plant.velocity)
    assert sup.reason is SafeReason.POSITION_LIMIT
    assert sup.hold_target == pytest.approx((0.29, 0.3))
    resumed = None
    for k in range(3000):
        t += T
        tr = sup.update_state(t, plant.position, plant.velocity)
        if tr and tr.resumed:
            resumed = t
            break
        plant.step(*sup.safe_torque(model, (1e3, 1e3)))
    assert resumed is not None and plant.position[0] <= 0.34 + 1e-9
    # state timeout at rest: pure gravity hold keeps the arm still for a second
    q0 = plant.position
    plant.reset(q=q0, qd=(0.0, 0.0))
    sup.update_state(t, q0, (0.0, 0.0))
    sup.check(t + 1.0)
    assert sup.reason is SafeReason.STATE_TIMEOUT
    tau = sup.safe_torque(model, (1e3, 1e3))
    for _ in range(1000):
        plant.step(*tau)
    np.testing.assert_allclose(plant.position, q0, atol=1e-9)


def test_clamp_reference():
    sup = make(position_lower=(-1.0, -1.0), position_upper=(1.0, 1.0), velocity_limit=(2.0, 2.0))
    q, v, a, c = sup.clamp_reference((0.5, -0.5), (1.0, -1.0), (3.0, 4.0))
    assert (q, v, a, c) == ((0.5, -0.5), (1.0, -1.0), (3.0, 4.0), False)
    q, v, a, c = sup.clamp_reference((1.5, -0.5), (1.0, -5.0), (3.0, 4.0))
    assert q == pytest.approx((0.9, -0.5)) and v == (0.0, -1.5) and a == (0.0, 4.0) and c


# --------------------------------------------------------------------------------------------
# reference watchdog


def test_reference_watchdog_holds_last_position_with_zero_velocity():
    w = ReferenceWatchdog(0.125)
    assert w.get(0.0) == (None, None)
    s = ReferenceSample((0.1, 0.2), (1.0, 2.0), (3.0, 4.0))
    w.update(1.0, s)
    assert w.get(1.125) == (s, None)  # age == timeout: still live
    ref, note = w.get(1.1251)
    assert ref == ReferenceSample((0.1, 0.2), (0.0, 0.0), (0.0, 0.0))
    assert note.startswith('reference lost') and '0.1, 0.2' in note
    assert w.get(5.0) == (ref, None) and w.holding and w.hold_count == 1
    s2 = ReferenceSample((0.3, 0.4), (0.0, 0.0), (0.0, 0.0))
    w.update(5.0, s2)
    assert w.get(5.01) == (s2, 'reference resumed')
    assert w.get(5.02) == (s2, None)
    w.reset()
    assert w.get(6.0) == (None, None)


def test_reference_watchdog_stops_the_reference_smoothly():
    """With a deceleration: continuous position and velocity, then a hold where it stopped."""
    w = ReferenceWatchdog(0.1)
    s = ReferenceSample((0.1, 0.2, 0.3), (0.4, -2.0, 0.0), (1.0, 1.0, 1.0))
    w.update(1.0, s)
    a = (10.0, 5.0, 10.0)
    assert w.get(1.0999, a) == (s, None)
    ref, note = w.get(1.1 + 1e-9, a)           # the first stale tick: the last sample's q, qd
    assert note.startswith('reference lost')
    assert ref.q == pytest.approx(s.q, abs=1e-8) and ref.qd == pytest.approx(s.qd, abs=1e-7)
    assert ref.qdd == pytest.approx((-10.0, 5.0, 0.0))
    ref, _ = w.get(1.1 + 0.02, a)               # decelerating, by the kinematics of a stop
    assert ref.qd == pytest.approx((0.4 - 0.2, -2.0 + 0.1, 0.0))
    assert ref.q == pytest.approx((0.1 + 0.4 * 0.02 - 5.0 * 4e-4, 0.2 - 2.0 * 0.02 + 2.5 * 4e-4,
                                   0.3))
    ref, _ = w.get(10.0, a)                     # stopped: at the stopping point, held
    assert ref == ReferenceSample((0.1 + 0.4 * 0.04 / 2, 0.2 - 2.0 * 0.4 / 2, 0.3),
                                  (0.0, 0.0, 0.0), (0.0, 0.0, 0.0))
    # never a velocity step on the way, sampled at 1 kHz
    vs = [w.get(1.1 + k * 1e-3, a)[0].qd for k in range(1, 500)]
    steps = np.abs(np.diff(np.array(vs), axis=0)).max(axis=0)
    assert np.all(steps <= np.array(a) * 1e-3 + 1e-12), steps


def test_validators_never_raise_on_garbage():
    rng = np.random.default_rng(0)
    pool = [None, 3, 'ab', b'x', [], ['joint1'], ['joint2', 'joint1'], ['joint1', 'joint1'],
            [1.0, NAN], [INF], [0.0, 0.0], [0.0, 0.0, 0.0], ['a', 'b'], [None, None],
            {'joint1': 1.0}, np.zeros(2), array.array('d', [1.0, 2.0]), [True, False]]
    for _ in range(3000):
        args = [pool[rng.integers(len(pool))] for _ in range(4)]
        cmd = map_array_command(args[0], 2)
        if not isinstance(cmd, Refusal):
            assert len(cmd) == 2 and all(type(v) is float and math.isfinite(v) for v in cmd)
        for res in (map_joint_state(J, *args), map_reference(J, *args[:3]),
                    map_joint_state(J, *args, fields=('effort',))):
            if not isinstance(res, Refusal):
                vals = [v for part in res if part is not None for v in part]
                assert all(type(v) is float and math.isfinite(v) for v in vals)


def test_touch_keeps_an_unanswered_state_fresh():
    sup = make()
    sup.activate(0.0)
    assert sup.touch(0.0) is None and sup.last_state_time is None  # nothing to touch
    sup.update_state(0.0, (0.1, 0.2), (0.0, 0.0))
    assert sup.touch(0.5) is None and sup.mode is Mode.NORMAL
    assert sup.check(0.504) is None
    assert sup.check(0.506).reason is SafeReason.STATE_TIMEOUT
    assert sup.touch(0.507).resumed


def test_state_age_from_its_stamp():
    sup = make()
    sup.activate(0.0)
    sup.update_state(1.0, (0.1, 0.2), (0.0, 0.0))
    assert sup.mode is Mode.NORMAL
    sup.check(1.1)
    assert sup.reason is SafeReason.STATE_TIMEOUT
    # a backlog state processed late (stamped 80 ms before it was taken) is not fresh
    assert sup.update_state(1.1, (0.1, 0.2), (0.0, 0.0), age=0.08) is None
    assert sup.reason is SafeReason.STATE_TIMEOUT and sup.state_age(1.1) == pytest.approx(0.08)
    assert sup.update_state(1.101, (0.1, 0.2), (0.0, 0.0), age=0.002).resumed
    # the state time never goes backwards
    sup.update_state(1.102, (0.1, 0.2), (0.0, 0.0), age=1.0)
    assert sup.last_state_time == pytest.approx(1.099)


# --------------------------------------------------------------------------------------------
# bounded cost, source guard, hard limits


def test_name_matching_is_linear_and_big_messages_are_refused_early():
    from manip_control.safety import _name_index
    from manip_control.safety import MAX_NAMES
    names = [f'j{k}' for k in range(20000)] + ['joint1', 'joint2', 'j7']
    t0 = time.perf_counter()
    idx, early, late = _name_index(J, names, 'name')
    elapsed = time.perf_counter() - t0
    # one pass over 20,000 names takes milliseconds; the quadratic search took seconds
    assert early.reason is R.DUPLICATE_NAME and "'j7'" in early.detail
    assert elapsed < 0.5, elapsed
    res = map_joint_state(J, names, [0.0] * len(names), [0.0] * len(names))
    assert reason(res) is R.TOO_LARGE and str(MAX_NAMES) in res.detail
    ok = [f'j{k}' for k in range(MAX_NAMES - 2)] + ['joint2', 'joint1']
    assert map_joint_state(J, ok, [0.0] * (MAX_NAMES - 1) + [1.0],
                           [0.0] * MAX_NAMES).position == (1.0, 0.0)


def test_decode_refusal_reasons():
    assert decode_refusal('malformed JointState (too many entries (20000, at most 256))') \
        .reason is R.TOO_LARGE
    assert decode_refusal('reference without points').reason is R.EMPTY
    assert decode_refusal('malformed JointState (truncated)').reason is R.MALFORMED


def test_source_guard_locks_refuses_and_relocks():
    g = SourceGuard('joint_states', relock_after=0.5, hold=0.5)
    assert g.check(None, 0.0) is None                   # no sequence numbers: graph only
    assert g.check(100, 0.0) is None and g.check(101, 0.001) is None
    assert g.check(150, 0.002) is None                  # samples lost in between
    g.publishers = 2
    r = g.check(3, 0.003)                               # another writer's numbering
    assert r.reason is R.SECOND_SOURCE and '2 on the graph' in r.detail
    assert reason(g.check(150 + 5000, 0.004)) is R.SECOND_SOURCE    # a jump
    assert g.check(151, 0.005) is None                  # the locked writer goes on
    assert g.conflict(0.4) and not g.conflict(0.6)
    # the locked writer silent for less than relock_after: still refused
    assert reason(g.check(7, 0.3)) is R.SECOND_SOURCE
    # silent for longer (e.g. a restarted driver; the dead one may stay on the graph): the
    # new sequence is locked, and the old one refused if it comes back
    assert g.check(1, 1.2) is None and g.check(2, 1.201) is None and g.locks == 2
    assert reason(g.check(5152, 1.202)) is R.SECOND_SOURCE
    g.reset()
    assert g.check(9, 2.0) is None


def test_source_guard_takes_a_numbering_jump_of_the_one_matched_writer():
    """
    A reader stalled for over a second at 1 kHz loses more than ``max_gap`` samples.

    With exactly one writer matched (and on the graph) the jump is that loss, not another
    publisher (measured before: a controller stopped 1.2 s and 2.0 s refused its only plant's
    states as a second source, ramped to zero torque and stayed safe for 0.5 s); with two
    matched, or without the count, it stays a second source.
    """
    matched = [1]
    g = SourceGuard('joint_states', relock_after=0.5, hold=0.5)
    g.matched_now = lambda: matched[0]
    assert g.check(14566, 0.0) is None and g.check(14567, 0.001) is None
    assert g.check(15684, 0.002) is None and g.lost_jumps == 1      # 1116 lost in the reader
    assert g.check(15685, 0.003) is None and not g.conflict(0.003)
    assert reason(g.check(15000, 0.004)) is R.SECOND_SOURCE         # a step back: never loss
    matched[0] = 2                                                  # two writers matched
    assert reason(g.check(17000, 0.005)) is R.SECOND_SOURCE
    matched[0] = 1
    g.publishers = 2                                                # two on the graph
    assert reason(g.check(17000, 0.006)) is R.SECOND_SOURCE
    h = SourceGuard('joint_states', relock_after=0.5, hold=0.5)     # no count: as before
    assert h.check(1, 0.0) is None and reason(h.check(2000, 0.001)) is R.SECOND_SOURCE


def _limits(**kw):
    sp = SafetyParameters()
    data = hard_limit_defaults((25.0, 16.0), (10.0, 8.0), (0.0, 0.0), (89.0, 25.0), sp)
    data.update(kw)
    start = {'kp': (25.0, 16.0), 'kd': (10.0, 8.0), 'ki': (0.0, 0.0),
             'torque_limit': (89.0, 25.0)}
    return hard_limits_from_values(data, start, sp)


def test_hard_limits_default_to_the_start_values_and_name_the_bound():
    lim = _limits()
    assert lim.check_update('torque_limit', [89.0, 25.0]) == ''
    assert lim.check_update('torque_limit', [89.5, 1.0]) == (
        'torque_limit[0]: must be <= hard_limits.torque[0] = 89 (read-only, fixed at start; '
        'got 89.5)')
    assert 'hard_limits.kp_max[1] = 64' in lim.check_update('kp', [25.0, 65.0])
    assert 'hard_limits.kd_min[0] = 2.5' in lim.check_update('kd', [2.0, 8.0])
    assert 'hard_limits.ki_max[0] = 0' in lim.check_update('ki', [0.1, 0.0])
    assert 'hard_limits.state_timeout[1] = 0.02 s' in lim.check_update(
        'safety.state_timeout', 1e9)
    assert 'hard_limits.state_timeout[0] = 0.005 s' in lim.check_update(
        'safety.state_timeout', 0.001)
    assert lim.check_update('safety.state_timeout', 0.01) == ''
    assert 'hard_limits.position_lower[1]' in lim.check_update(
        'safety.position_lower', [0.0, -4.0])
    assert lim.check_update('safety.position_upper', [1.0, 1.0]) == ''     # tighter
    assert 'hard_limits.velocity[0] = 10' in lim.check_update(
        'safety.velocity_limit', [10.5, 1.0])
    assert 'cannot be switched off' in lim.check_update('safety.stamp_age', False)
    assert lim.check_update('safety.stamp_age', True) == ''
    assert lim.check_update('safety.safe_mode', 'zero') == ''
    assert lim.check_updates({'kp': [30.0, 16.0], 'torque_limit': [1e9, 1e9]}).startswith(
        'torque_limit[0]')


def test_hard_limits_refuse_a_start_outside_them():
    with pytest.raises(ParameterError, match=r'torque_limit\[0\]: must be <= '
                                             r'hard_limits.torque\[0\] = 50'):
        _limits(torque=[50.0, 30.0])
    with pytest.raises(ParameterError, match=r'hard_limits.state_timeout: min 0.5 must be'):
        _limits(state_timeout=[0.5, 0.1])
    with pytest.raises(ParameterError, match=r'hard_limits.velocity\[1\]: must be > 0'):
        _limits(velocity=[1.0, -1.0])


# --------------------------------------------------------------------------------------------
# ways out, named sources, gravity hold


def test_exit_ramp_moves_toward_zero_by_at_most_slope_dt():
    tau = (44.0, -9.8)
    slope, dt = (2000.0, 1000.0), 1e-3
    seen = [tau]
    while any(tau):
        tau = ramp_toward_zero(tau, slope, dt)
        seen.append(tau)
    # hand count: ceil(44 / 2) = 22 steps for joint 1, ceil(9.8 / 1) = 10 for joint 2
    assert len(seen) - 1 == 22 and seen[-1] == (0.0, 0.0)
    for a, b in zip(seen, seen[1:]):
        assert abs(b[0] - a[0]) <= 2.0 + 1e-12 and abs(b[1] - a[1]) <= 1.0 + 1e-12
        assert abs(b[0]) <= abs(a[0]) and abs(b[1]) <= abs(a[1])     # never away from zero
    assert seen[10][1] == 0.0 and seen[9][1] == pytest.approx(-0.8)
    assert ramp_toward_zero((math.nan, 1.0), slope, dt) == (0.0, 0.0)


def test_source_check_named_publisher_and_single_source():
    # no name: exactly one publisher may be locked; two (matched or on the graph) conflict
    assert source_check('', ['/driver'], 1) == ('', True)
    conflict, may_lock = source_check('', ['/driver', '/rogue'], 2)
    assert conflict.startswith('2 publishers') and '/rogue' in conflict and not may_lock
    assert source_check('', ['/driver'], 2)[0]              # matched before on the graph
    assert source_check('', [], 0) == ('', False)
    # a name: only that node (several of its publishers: a restarted driver) may be locked
    assert source_check('/jsb', ['/jsb'], 1) == ('', True)
    assert source_check('/jsb', ['/jsb', '/jsb'], 2) == ('', True)
    assert source_check('/jsb', ['/jsb', '/rogue'], 2) == ('', False)
    assert source_check('/jsb', ['/jsb'], 2) == ('', False)  # an unknown participant
    assert source_check('/jsb', ['/rogue'], 1) == ('', False)


def test_source_guard_with_a_named_publisher_refuses_without_conflict():
    g = SourceGuard('joint_states')
    g.expected, g.may_lock = '/jsb', False
    r = g.check(5, 0.0)                 # before discovery lists anyone: a start, not an error
    assert r is not None and r.reason is RefusalReason.SECOND_SOURCE and r.waiting
    assert 'only /jsb may publish' in r.detail and g.conflict(0.0) == ''
    g.publisher_names = ('/rogue',)                         # the rogue, alone on the graph
    r = g.check(6, 0.01)
    assert r is not None and not r.waiting
    g.publisher_names = ('/jsb',)
    g.may_lock = True                                       # the graph shows only /jsb
    assert g.check(1, 0.1) is None and g.check(2, 0.11) is None
    g.may_lock, g.publisher_names = False, ()               # a rogue appears (not listed yet)
    r = g.check(5000, 0.12)
    assert r is not None and not r.waiting                  # refused, counted, an error ...
    assert g.conflict(0.12) == '' and g.check(3, 0.13) is None  # ... no conflict
    assert g.check(4, 2.0) is None                          # the lock goes on after silence
    g.last_time = -10.0
    assert g.check(5001, 2.0) is not None                   # relock refused while not alone
    g2 = SourceGuard('joint_states')
    g2.graph_conflict = '2 publishers (/a, /b): no single source'
    r = g2.check(1, 0.0)
    assert r is not None and g2.conflict(0.0).endswith('no single source')


def test_a_silent_publisher_on_the_graph_is_not_a_second_source():
    """
    A killed / stopped driver stays on the graph and sends nothing: the new one is taken.

    Without ``state_publisher`` two publishers are a conflict while the new one is new; once
    only one of them has sent within the quiet window it is the source (relocked), and two
    that send are a conflict again.
    """
    names = ['/fake_driver', '/fake_driver']
    g = SourceGuard('joint_states', relock_after=0.5, hold=0.5)
    for k in range(100):                                    # driver A, then silent at 0.2 s
        assert g.check(5000 + k, k * 0.002) is None
    assert g.senders(0.1, 0.5) == 1 and g.senders(1.0, 0.5) == 0
    # driver B appeared at 1.0 s: within the quiet window nothing is known about it
    assert source_check('', names, 2)[0] and not source_check('', names, 2)[1]
    g.graph_conflict, g.may_lock = source_check('', names, 2)
    for k in range(1, 200):                                 # B's states, refused meanwhile
        assert reason(g.check(k, 1.0 + k * 0.002)) is R.SECOND_SOURCE
    now = 1.4
    assert g.senders(now, 0.5) == 1                         # only B sent within 0.5 s
    g.graph_conflict, g.may_lock = source_check('', names, 2, senders=g.senders(now, 0.5))
    assert g.graph_conflict == '' and g.may_lock
    assert g.check(200, 1.402) is None and g.locks == 2     # B locked (A silent > 0.5 s)
    assert g.check(201, 1.404) is None
    # A sends again (SIGCONT): its states are refused and two senders conflict
    assert reason(g.check(5100, 1.406)) is R.SECOND_SOURCE
    assert g.senders(1.41, 0.5) == 2
    conflict, may_lock = source_check('', names, 2, senders=g.senders(1.41, 0.5))
    assert conflict and not may_lock
    # the window after a rise: the state timeout after a silent locked source (a restart),
    # APPEAR_WINDOW next to a live one (a publisher whose first data is late)
    g2 = SourceGuard('joint_states')
    g2.graph_count(1, 0.0)
    assert g2.check(1, 0.0) is None
    g2.graph_count(2, 1.0)                                  # the locked one silent for 1 s
    assert g2.single_sender(1.04, 0.05) is None and g2.single_sender(1.06, 0.05) == 0
    # ... a restart: not a conflict meanwhile (the stale hold goes on, the states wait)
    assert g2.restarting(1.04, 0.05) and not g2.restarting(1.06, 0.05)
    assert g2.check(2, 1.1) is None
    g2.graph_count(3, 1.1)                                  # next to a live one
    assert g2.single_sender(1.11, 0.05) is None and g2.single_sender(3.0, 0.05) is None
    assert not g2.restarting(1.11, 0.05)                    # next to a live one: a conflict
    assert g2.check(3, 3.11) is None and g2.single_sender(3.12, 0.05) == 1
    # more senders than the guard tells apart: still more than one
    h = SourceGuard('joint_states')
    for k in range(10):
        h.check(10000 * (k + 1), 0.001 * k)
    assert h.senders(0.01, 0.5) == 4


def test_gravity_hold_timeout_is_validated_and_a_hard_limit():
    sp = safety_from_dict({'after_hold': 'gravity', 'gravity_hold_timeout': 5.0})
    assert sp.after_hold == 'gravity' and sp.gravity_hold_timeout == 5.0
    for bad in ({'after_hold': 'hold'}, {'gravity_hold_timeout': 0.0},
                {'gravity_hold_timeout': -1.0}, {'gravity_hold_timeout': 3601.0},
                {'gravity_hold_timeout': math.nan}):
        with pytest.raises(ParameterError, match=next(iter(bad))):
            safety_from_dict(bad)
    ok, why = validate_parameter_updates({'safety.gravity_hold_timeout': 2.0}, sp)
    assert ok, why
    ok, why = validate_parameter_updates({'safety.gravity_hold_timeout': -2.0}, sp)
    assert not ok and 'gravity_hold_timeout' in why
    ok, why = validate_parameter_updates({'safety.after_hold': 'zero'}, sp)
    assert not ok and 'not a runtime-changeable' in why
    d = hard_limit_defaults([25.0, 16.0], [10.0, 8.0], [0.0, 0.0], [89.0, 25.0], sp)
    assert d['gravity_hold_timeout'] == 5.0
    limits = hard_limits_from_values(d, {'kp': [25.0, 16.0], 'kd': [10.0, 8.0],
                                         'ki': [0.0, 0.0], 'torque_limit': [89.0, 25.0]}, sp)
    assert limits.check_update('safety.gravity_hold_timeout', 4.0) == ''
    why = limits.check_update('safety.gravity_hold_timeout', 6.0)
    assert 'hard_limits.gravity_hold_timeout = 5' in why
