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
manip-analyze: tracking, effort and loop-timing report of a recorded run (rosbag2).

``manip-analyze BAG [--out DIR] [--json] [--csv] [--time header|receive]``

Topics are found by type and name (see DEVELOPERS.md, topic contract) or chosen with
``--joint-states``, ``--commands``, ``--reference``, ``--motor`` (``none`` disables a role):

* joint states: ``sensor_msgs/JointState`` named like ``joint_states``;
* commands: ``sensor_msgs/JointState`` named like ``*command*`` (``/joint_commands``; its
  header stamp is the stamp of the state it answers), else ``std_msgs/Float64MultiArray``
  named like ``*command*`` (``/effort_controller/commands``, columns in joint order);
* reference: ``trajectory_msgs/JointTrajectory`` (``/reference``; every point is a sample at
  header stamp + time_from_start), else the positions of JointState commands;
* motor: ``sensor_msgs/JointState`` named like ``*motor*`` (position = current [A],
  velocity = terminal voltage [V], effort = current reference [A]).

Figures (all SI; times in s relative to the first joint state):

* tracking error ``e = q - q_d`` [rad] per joint: RMS, max |e|, late-window max |e|
  (window from ``--transient``, else ``late_window_start`` in params.yaml, else the final 50 %);
  for a reference that ends constant (point-to-point): 2 % settling time, overshoot [%] and
  steady-state error (mean e over the final 10 % of the run, inside the final hold);
* commanded effort u [N·m]: peak |u|, RMS, fraction of samples with |u| at the limit;
  measured effort (joint_states effort) peak / RMS; motor current / voltage peaks;
* timing: rates, period jitter |T_k - T_nom| (p50 / p99 / max), gaps (T_k > 1.5 T_nom) and
  dropped ticks (sum of round(T_k / T_nom) - 1 over gaps), state-to-command latency;
* power ``P = sum_j tau_j qd_j`` [W] and actuator work ``W = int P dt`` [J]; mechanical energy
  ``T + V`` [J] of the 2R arm when params.yaml has the model (``plant.arm``);
* model (``--urdf FILE``, else the URDF on ``/robot_description``, else the 2R plant of
  params.yaml; ``--gravity``, ``--cutoff``, ``--no-model``): per joint the inverse-dynamics
  torque of the zero-phase filtered motion against the filtered measured and held commanded
  effort (residual RMS, max, fraction of the effort RMS), the gravity field and joint friction
  that best explain the residual, joints at their velocity limits; computed by
  :mod:`manip_control.model_analysis`;
* adaptation (a ``diagnostic_msgs/DiagnosticArray`` topic named like ``adaptation``, the
  controller's ``~/adaptation``): per base parameter the nominal value, first and final
  estimate, change [%] of the nominal value, excited at the end; fallbacks; ``adaptation.png``.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from dataclasses import field
import json
import math
import os
from pathlib import Path
import sys
from typing import Any

from manip_control.arm_identification import ArmRegressor
from manip_control.arm_identification import base_parameters
from manip_control.arm_model import ArmModelError
from manip_control.arm_model import DEFAULT_GRAVITY
from manip_control.arm_model import read_urdf_file
from manip_control.arm_model import TwoLinkArm
from manip_control.arm_model import UrdfArm
from manip_control.bag_io import ArraySeries
from manip_control.bag_io import BagError
from manip_control.bag_io import BagReader
from manip_control.bag_io import FLOAT64_MULTI_ARRAY
from manip_control.bag_io import JOINT_STATE
from manip_control.bag_io import JOINT_TRAJECTORY
from manip_control.bag_io import JointStateSeries
from manip_control.bag_io import TopicInfo
from manip_control.bag_io import TrajectorySeries
from manip_control.bag_storage import ns_text
from manip_control.model_analysis import compare
from manip_control.model_analysis import DEFAULT_CUTOFF_HZ
from manip_control.model_analysis import filter_motion
from manip_control.model_analysis import fit_gravity
from manip_control.model_analysis import JointFriction
from manip_control.model_analysis import model_torque
from manip_control.model_analysis import ModelAnalysisError
from manip_control.model_analysis import urdf_friction
from manip_control.parameters import ParameterError
from manip_control.parameters import plant_from_dict
import numpy as np
import yaml

STRING = 'std_msgs/msg/String'
DIAGNOSTIC_ARRAY = 'diagnostic_msgs/msg/DiagnosticArray'
#: Largest number of parameters drawn in adaptation.png (the ones that moved most).
ADAPTATION_PLOT_LINES = 12

__all__ = ['AnalysisError', 'select_topics', 'load_run', 'analyze_run', 'analyze',
           'write_report', 'write_csv', 'render_markdown', 'render_summary',
           'mechanical_energy', 'main']

ROLES = ('joint_states', 'commands', 'reference', 'motor')
GAP_FACTOR = 1.5            # a period longer than GAP_FACTOR * nominal is a gap
SETTLING_BAND = 0.02        # 2 % settling band
HOLD_FRACTION = 0.10        # a reference "ends constant" if its final hold is >= 10 % of the run
STEADY_FRACTION = 0.10      # steady-state error: mean over the final 10 % of the run
PROGRESS_MIN_MESSAGES = 100_000
#: A decoded value beyond this magnitude (SI units: rad, rad/s, N·m, A, V) or infinite is
#: damage (e.g. a flipped exponent bit in a file without checksums), not a measurement.
ABSURD = 1e6
#: Work on the header and on the receive clock "disagree" beyond this fraction.
CLOCK_WORK_TOLERANCE = 0.05
#: A joint is "at its velocity limit" within this fraction of the limit.
VELOCITY_LIMIT_TOL = 0.005
ZERO_EFFORT_NOTE = 'effort is zero throughout — the driver does not report torque'


class AnalysisError(Exception):
    """The bag has no usable data for the analysis (e.g. no joint-state topic)."""


# ---------------------------------------------------------------------------------------------
# topic selection


@dataclass
class Selection:
    """Topic chosen for each role (None: absent or disabled) and how it was chosen."""

    joint_states: str | None = None
    commands: str | None = None
    reference: str | None = None
    motor: str | None = None
    how: dict = field(default_factory=dict)


def _rank(name: str, preferred: tuple[str, ...], words: tuple[str, ...]) -> tuple:
    low = name.lower()
    return (0 if low in preferred else 1,
            0 if any(low.endswith(w) for w in words) else 1,
            len(name), name)


def select_topics(topics: dict[str, TopicInfo], overrides: dict[str, str | None] | None = None
                  ) -> Selection:
    """
    Choose the joint-state, command, reference and motor topics of a bag.

    ``overrides`` maps a role to a topic name, or to ``'none'`` to disable the role.
    Raises :class:`AnalysisError` if an override names a missing or undecodable topic.
    """
    overrides = overrides or {}
    sel = Selection()
    usable = {n: i for n, i in topics.items() if i.decodable}

    def of_type(msgtype: str) -> list[str]:
        with_data = [n for n, i in usable.items() if i.msgtype == msgtype and i.count > 0]
        return with_data

    js = of_type(JOINT_STATE)
    motor = [n for n in js if 'motor' in n.lower()]
    js_cmd = [n for n in js if ('command' in n.lower() or 'cmd' in n.lower()) and n not in motor]
    states = [n for n in js if n not in motor and n not in js_cmd
              and 'dynamic' not in n.lower()]
    named_states = [n for n in states if 'joint_state' in n.lower()]
    auto = {
        'joint_states': (sorted(named_states or (states if len(states) == 1 else []),
                                key=lambda n: _rank(n, ('/joint_states',), ('joint_states',)))),
        'motor': sorted(motor, key=lambda n: _rank(n, ('/motor_states',), ('motor_states',))),
    }
    f64_cmd = [n for n in of_type(FLOAT64_MULTI_ARRAY)
               if 'command' in n.lower() or 'cmd' in n.lower()]
    auto['commands'] = (
        sorted(js_cmd, key=lambda n: _rank(n, ('/joint_commands',), ('joint_commands',)))
        + sorted(f64_cmd, key=lambda n: _rank(n, ('/effort_controller/commands',),
                                              ('effort_controller/commands', '/commands'))))
    traj = of_type(JOINT_TRAJECTORY)
    auto['reference'] = sorted(traj, key=lambda n: (0 if 'reference' in n.lower() else 1,
                                                    len(n), n))
    for role in ROLES:
        want = overrides.get(role)
        if want is not None and str(want).lower() == 'none':
            sel.how[role] = 'disabled'
            continue
        if want is not None:
            if want not in topics:
                raise AnalysisError(f'--{role.replace("_", "-")}: no topic {want} in the bag '
                                    f'(topics: {", ".join(sorted(topics))})')
            info = topics[want]
            if not info.decodable:
                raise AnalysisError(f'--{role.replace("_", "-")}: topic {want} cannot be '
                                    f'decoded ({info.reason})')
            allowed = {'joint_states': (JOINT_STATE,), 'motor': (JOINT_STATE,),
                       'commands': (JOINT_STATE, FLOAT64_MULTI_ARRAY),
                       'reference': (JOINT_TRAJECTORY,)}[role]
            if info.msgtype not in allowed:
                raise AnalysisError(f'--{role.replace("_", "-")}: topic {want} has type '
                                    f'{info.msgtype}, expected {" or ".join(allowed)}')
            setattr(sel, role, want)
            sel.how[role] = 'flag'
            continue
        cands = [c for c in auto[role] if c not in
                 {getattr(sel, r) for r in ROLES if r != role}]
        if cands:
            setattr(sel, role, cands[0])
            sel.how[role] = 'auto'
    return sel


# ---------------------------------------------------------------------------------------------
# parameters


def _ros_parameter(bag: str, node: str, name: str) -> Any:
    """
    Return a node's parameter from ``ros_params.yaml`` beside a bag, or None.

    The resolved ROS parameters this package's recorder writes (``node: ros__parameters:``);
    a missing or unreadable file gives None.
    """
    path = Path(bag) / 'ros_params.yaml'
    if not path.is_file():
        return None
    try:
        data = yaml.safe_load(path.read_text(encoding='utf-8'))
    except (OSError, yaml.YAMLError):
        return None
    if not isinstance(data, dict):
        return None
    for key, section in data.items():
        if str(key).rpartition('/')[2] == node and isinstance(section, dict):
            values = section.get('ros__parameters')
            if isinstance(values, dict):
                return values.get(name)
    return None


def _lookup(params: dict | None, *paths: str) -> Any:
    """First value found at one of the dotted ``paths`` (also under a top-level 'scenario')."""
    if not isinstance(params, dict):
        return None
    for path in paths:
        for root in (params, params.get('scenario')):
            node: Any = root
            for key in path.split('.'):
                if isinstance(node, dict) and key in node:
                    node = node[key]
                else:
                    node = None
                    break
            if node is not None:
                return node
    return None


def _per_joint(value: Any, n: int) -> list[float] | None:
    """Return a scalar or a list of n numbers as n positive floats, else None."""
    try:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            vals = [float(value)] * n
        elif isinstance(value, (list, tuple)) and len(value) == n:
            vals = [float(v) for v in value]
        elif isinstance(value, str):
            parts = [float(p) for p in value.replace(';', ',').split(',') if p.strip()]
            vals = parts * n if len(parts) == 1 else parts
        else:
            return None
    except (TypeError, ValueError):
        return None
    if len(vals) != n or not all(math.isfinite(v) and v > 0 for v in vals):
        return None
    return vals


def mechanical_energy(params: dict | None, q: np.ndarray, qd: np.ndarray) -> np.ndarray | None:
    """
    Mechanical energy ``T + V`` [J] of the planar 2R arm, or None without a model.

    ``T = 1/2 qd^T M(q) qd`` with ``M = [[a + 2 b cos q2, d + b cos q2], [d + b cos q2,
    d + Jr2]]``, ``a = I1 + I2 + m1 lc1^2 + m2 (l1^2 + lc2^2) + Jr1``, ``b = m2 l1 lc2``,
    ``d = I2 + m2 lc2^2``, ``Jr = Jm N^2`` (if ``plant.rotor_inertia``), and
    ``V = g (m1 lc1 sin q1 + m2 (l1 sin q1 + lc2 sin(q1 + q2)))``, ``g = g0`` in the vertical
    plane, 0 in the horizontal one (same model as :mod:`manip_control.dynamics`).

    This is the model hook: it needs ``plant.arm`` (m1, m2, l1, l2, lc1, lc2, I1, I2) in the
    run parameters and exactly 2 joints.
    """
    arm = _lookup(params, 'plant.arm')
    if not isinstance(arm, dict) or q.shape[1] != 2:
        return None
    try:
        m1, m2, l1, lc1, lc2, i1, i2 = (float(arm[k]) for k in
                                        ('m1', 'm2', 'l1', 'lc1', 'lc2', 'I1', 'I2'))
        g0 = float(arm.get('g0', 9.81))
    except (KeyError, TypeError, ValueError):
        return None
    g = g0 if str(arm.get('plane', 'vertical')) == 'vertical' else 0.0
    jr = [0.0, 0.0]
    motors = _lookup(params, 'plant.motors')
    if _lookup(params, 'plant.rotor_inertia') is not False and isinstance(motors, list) \
            and len(motors) == 2:
        try:
            jr = [float(m.get('Jm', 0.0)) * float(m.get('N', 1.0)) ** 2 for m in motors]
        except (AttributeError, TypeError, ValueError):
            jr = [0.0, 0.0]
    a = i1 + i2 + m1 * lc1 ** 2 + m2 * (l1 ** 2 + lc2 ** 2) + jr[0]
    b = m2 * l1 * lc2
    d = i2 + m2 * lc2 ** 2
    c2 = np.cos(q[:, 1])
    m11 = a + 2.0 * b * c2
    m12 = d + b * c2
    m22 = d + jr[1]
    kin = 0.5 * (m11 * qd[:, 0] ** 2 + 2.0 * m12 * qd[:, 0] * qd[:, 1] + m22 * qd[:, 1] ** 2)
    pot = g * (m1 * lc1 * np.sin(q[:, 0])
               + m2 * (l1 * np.sin(q[:, 0]) + lc2 * np.sin(q[:, 0] + q[:, 1])))
    return kin + pot


# ---------------------------------------------------------------------------------------------
# loading


@dataclass
class RunData:
    """Decoded topics of one run on a common time base (int64 ns; ``t0_ns`` = first state)."""

    bag: str
    time_base: str
    selection: Selection
    bag_info: dict
    params: dict | None
    joints: list[str]
    t0_ns: int
    state: JointStateSeries
    state_t: np.ndarray
    command: ArraySeries | JointStateSeries | None = None
    command_t: np.ndarray | None = None
    command_u: np.ndarray | None = None           # (Nc, J) commanded effort in joint order
    ref_source: str | None = None
    ref_t: np.ndarray | None = None                # (S,) ns
    ref_q: np.ndarray | None = None                # (S, J)
    ref_qd: np.ndarray | None = None
    motor: JointStateSeries | None = None
    motor_t: np.ndarray | None = None
    notes: list[str] = field(default_factory=list)
    robot_description: str | None = None           # last message on /robot_description
    robot_description_topic: str | None = None
    adaptation: dict | None = None                 # _adaptation_series of the adaptation topic
    # filled by the analysis
    q_d: np.ndarray | None = None                  # reference aligned to the states
    qd_d: np.ndarray | None = None
    error: np.ndarray | None = None
    model_series: dict | None = None               # model section arrays (for the plot)

    def rel(self, t_ns: np.ndarray) -> np.ndarray:
        """Seconds since the first joint state."""
        return (np.asarray(t_ns, np.int64) - self.t0_ns) / 1e9


def _cols(src_names: list[str], joints: list[str], values: np.ndarray) -> np.ndarray:
    """Reorder (N, len(src_names)) columns into joint order (NaN for missing joints)."""
    out = np.full((values.shape[0], len(joints)), np.nan)
    idx = {n: j for j, n in enumerate(src_names)}
    for j, name in enumerate(joints):
        if name in idx and idx[name] < values.shape[1]:
            out[:, j] = values[:, idx[name]]
    return out


class _Progress:
    r"""Plain ``\r`` percentage on stderr for long bags."""

    def __init__(self, label: str, enabled: bool) -> None:
        self.label = label
        self.enabled = enabled
        self.last = -1
        self.shown = False

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled or total < PROGRESS_MIN_MESSAGES:
            return
        pct = int(100 * done / max(total, 1))
        if pct != self.last:
            self.last = pct
            self.shown = True
            sys.stderr.write(f'\r{self.label}: {pct:3d}%')
            sys.stderr.flush()

    def done(self) -> None:
        if self.shown:
            sys.stderr.write('\n')
            sys.stderr.flush()
            self.shown = False


def _screen(series, problems: list[dict]) -> None:
    """
    Exclude damaged values of a decoded series (infinite, or beyond ``ABSURD``), in place.

    Each affected field is listed in ``problems`` (topic, field, count, first receive time);
    NaN stays NaN (a message without that joint or array).
    """
    fields = {JointStateSeries: ('position', 'velocity', 'effort'), ArraySeries: ('data',),
              TrajectorySeries: ('positions', 'velocities', 'accelerations', 'effort')}
    for cls, names in fields.items():
        if not isinstance(series, cls):
            continue
        for name in names:
            arr = getattr(series, name)
            with np.errstate(invalid='ignore'):
                bad = np.isinf(arr) | (np.abs(arr) > ABSURD)
            n = int(bad.sum())
            if not n:
                continue
            rows = np.flatnonzero(bad.any(axis=1))
            if isinstance(series, TrajectorySeries):
                first = int(series.recv_ns[series.sample_msg[rows[0]]])
            else:
                first = int(series.recv_ns[rows[0]])
            arr = np.array(arr, float)          # never write into a view of the file
            arr[bad] = np.nan
            setattr(series, name, arr)
            problems.append({'topic': series.topic, 'field': name, 'values': n,
                             'messages': int(rows.size), 'first_receive_ns': first})


def _description_topic(topics: dict[str, TopicInfo]) -> str | None:
    """Return the ``std_msgs/String`` topic named like ``robot_description`` (or None)."""
    cands = [n for n, i in topics.items() if i.decodable and i.msgtype == STRING
             and i.count > 0 and n.lower().rstrip('/').endswith('robot_description')]
    return sorted(cands, key=len)[0] if cands else None


def _adaptation_topic(topics: dict[str, TopicInfo]) -> str | None:
    """Return the ``DiagnosticArray`` topic named like ``adaptation`` (or None)."""
    cands = [n for n, i in topics.items() if i.decodable and i.msgtype == DIAGNOSTIC_ARRAY
             and i.count > 0 and n.lower().rstrip('/').endswith('adaptation')]
    return sorted(cands, key=len)[0] if cands else None


def _number(text: Any) -> float:
    """Parse a published figure; NaN for anything that is not a finite number."""
    try:
        v = float(text)
    except (TypeError, ValueError):
        return math.nan
    return v if math.isfinite(v) else math.nan


def _adaptation_series(topic: str, msgs: list, use_header: bool) -> dict:
    """
    Decode the adaptive law's messages (``DiagnosticArray``) into arrays.

    Of each message the status carrying ``estimate.NAME`` keys is read (the controller
    publishes one); a message without such a status is counted in ``skipped``. Parameters are
    in the order they first appear; a value that is missing or not a finite number is NaN
    (counted in ``bad_values``). Times: the header stamps on the header time base when any
    is nonzero, else the receive times [ns]; sorted.
    """
    rows: list[tuple[int, int, dict]] = []
    names: list[str] = []
    seen: set[str] = set()
    skipped = 0
    for recv, msg in msgs:
        kv = None
        for st in getattr(msg, 'status', None) or []:
            values = {str(x.key): str(x.value) for x in (getattr(st, 'values', None) or [])}
            if any(k.startswith('estimate.') for k in values):
                kv = values
                break
        if kv is None:
            skipped += 1
            continue
        stamp = getattr(getattr(msg, 'header', None), 'stamp', None)
        stamp_ns = (int(stamp.sec) * 10**9 + int(stamp.nanosec)) if stamp is not None else 0
        rows.append((stamp_ns, int(recv), kv))
        for k in kv:
            name = k[len('estimate.'):]
            if k.startswith('estimate.') and name not in seen:
                seen.add(name)
                names.append(name)
    stamps = np.array([r[0] for r in rows], np.int64)
    recv = np.array([r[1] for r in rows], np.int64)
    base = 'header' if use_header and stamps.any() else 'receive'
    t = stamps if base == 'header' else recv
    order = np.argsort(t, kind='stable')
    rows = [rows[k] for k in order]
    n, p = len(rows), len(names)
    est, nom = np.full((n, p), np.nan), np.full((n, p), np.nan)
    for i, (_, _, kv) in enumerate(rows):
        for k, name in enumerate(names):
            est[i, k] = _number(kv.get(f'estimate.{name}'))
            nom[i, k] = _number(kv.get(f'nominal.{name}'))
    bad = int(np.isnan(est).sum() + np.isnan(nom).sum())
    last = rows[-1][2] if rows else {}
    units = {name: next((kv[f'unit.{name}'] for _, _, kv in reversed(rows)
                         if f'unit.{name}' in kv), '') for name in names}
    t = t[order]
    reasons = [(int(t[i]), kv['adaptation.fallback_reason']) for i, (_, _, kv) in enumerate(rows)
               if kv.get('adaptation.fallback_reason')]
    return {'topic': topic, 'time_base': base, 't_ns': t, 'names': names,
            'units': units, 'estimate': est, 'nominal': nom,
            'excited': {name: last.get(f'excited.{name}') == 'true' for name in names},
            'state': last.get('adaptation'), 'law_time_s': _number(last.get('adaptation.time_s')),
            'fallbacks': _number(last.get('adaptation.fallbacks')),
            'last_fallback': reasons[-1] if reasons else None,
            'skipped': skipped, 'bad_values': bad}


def load_run(bag: str | Path, *, overrides: dict | None = None, time_base: str = 'header',
             progress=None, skip_corrupt: bool = False, read_description: bool = True
             ) -> RunData:
    """
    Open ``bag``, pick topics and decode them onto one time base.

    ``skip_corrupt``: MCAP chunks failing their CRC are left out (listed in
    ``bag_info['corrupt']`` and in the notes) instead of stopping with :class:`BagError`.
    ``read_description``: also read the URDF recorded on ``/robot_description``
    (``std_msgs/String``, the last message) into :attr:`RunData.robot_description`.
    """
    if time_base not in ('header', 'receive'):
        raise AnalysisError(f'--time: expected header or receive, got {time_base!r}')
    with BagReader(bag, skip_corrupt=skip_corrupt) as reader:
        sel = select_topics(reader.topics, overrides)
        info = {
            'path': str(bag),
            'storage': reader.storage,
            'metadata_version': reader.metadata_version,
            'message_count': reader.message_count,
            'duration_s': (reader.end_ns - reader.start_ns) / 1e9 if reader.message_count
            else 0.0,
            'topics': [{'name': t.name, 'type': t.msgtype, 'count': t.count,
                        'role': next((r for r in ROLES if getattr(sel, r) == t.name), None)}
                       for t in reader.topics.values()],
            'skipped': [{'topic': t, 'type': reader.topics[t].msgtype, 'reason': r}
                        for t, r in reader.skipped.items()],
            'params_file': reader.params is not None,
            'recovered': reader.recovered,
        }
        if reader.recovered:
            info['recovered_reason'] = reader.recovered_reason
            info['recovered_end_ns'] = int(reader.end_ns)
        if sel.joint_states is None:
            js = [t for t, i in reader.topics.items() if i.msgtype == JOINT_STATE]
            raise AnalysisError(
                f'{bag}: no joint-state topic (sensor_msgs/msg/JointState named like '
                f'joint_states with messages) found; JointState topics: {js or "none"}; '
                'choose one with --joint-states')
        wanted = [getattr(sel, r) for r in ROLES if getattr(sel, r)]
        desc_topic = _description_topic(reader.topics) if read_description else None
        if desc_topic is not None:
            wanted.append(desc_topic)
        adapt_topic = _adaptation_topic(reader.topics)
        if adapt_topic is not None:
            wanted.append(adapt_topic)
        series = reader.read_series(wanted, progress)
        adapt_msgs = series.pop(adapt_topic) if adapt_topic is not None else None
        description = None
        if desc_topic is not None:
            msgs = series.pop(desc_topic)
            texts = [getattr(m, 'data', None) for _, m in msgs]
            texts = [x for x in texts if isinstance(x, str) and x.strip()]
            description = texts[-1] if texts else None
        if skip_corrupt:
            reader.verify()            # every damaged chunk, also of topics not read
        lost = reader.lost_messages()
        if lost:
            # the totals of what was read, not of the whole file
            info['message_count'] = reader.message_count - sum(lost.values())
            for entry in info['topics']:
                entry['count'] -= lost.get(entry['name'], 0)
            info['left_out_messages'] = lost
        params = reader.params
        decode_errors = dict(reader.decode_errors)
        file_notes = list(reader.notes)
        corrupt = [c.describe() for c in reader.corrupt]
    info['decode_errors'] = decode_errors
    info['notes'] = file_notes
    info['corrupt'] = corrupt
    problems: list[dict] = []
    for item in series.values():
        _screen(item, problems)
    info['data_problems'] = problems

    state: JointStateSeries = series[sel.joint_states]
    if len(state) == 0:
        raise AnalysisError(f'{bag}: joint-state topic {sel.joint_states} has no decodable '
                            'messages')
    notes: list[str] = []
    use_header = time_base == 'header'
    if use_header and not state.stamp_ns.any():
        notes.append('joint-state header stamps are all zero: using receive time')
        use_header = False
    base = 'header' if use_header else 'receive'
    state_t = state.stamp_ns if use_header else state.recv_ns
    if (np.diff(state_t) < 0).any():
        order = np.argsort(state_t, kind='stable')
        notes.append(f'{int((np.diff(state_t) < 0).sum())} joint states out of order on the '
                     f'{base} time base (sorted)')
        state = JointStateSeries(state.topic, state.msgtype, state.recv_ns[order],
                                 state.stamp_ns[order], state.names, state.position[order],
                                 state.velocity[order], state.effort[order],
                                 state.decode_errors, state.decode_stats)
        state_t = state_t[order]
    joints = list(state.names)
    for c in corrupt:
        notes.insert(0, f'DAMAGED DATA LEFT OUT (--skip-corrupt): {c}')
    if info.get('left_out_messages'):
        lost = info['left_out_messages']
        notes.insert(len(corrupt), (
            f'{sum(lost.values())} messages left out in damaged chunks ('
            + ', '.join(f'{t} {n}' for t, n in lost.items()) + '); the message counts of '
            'this report are of what was read'))
    for pr in problems:
        notes.insert(len(corrupt), (
            f'DAMAGED VALUES EXCLUDED: {pr["topic"]} {pr["field"]}: {pr["values"]} values in '
            f'{pr["messages"]} messages are infinite or beyond {ABSURD:g} in magnitude (first '
            f'at bag time {ns_text(pr["first_receive_ns"])} s); the file may be corrupt '
            '(sqlite3 files carry no checksums)'))
    notes.extend(file_notes)
    for topic, n_bad in decode_errors.items():
        notes.append(f'{topic}: {n_bad} of {reader.topics[topic].count} messages could not be '
                     'decoded with their stored definition (left out)')
    run = RunData(str(bag), base, sel, info, params, joints, int(state_t[0]), state, state_t,
                  notes=notes, robot_description=description,
                  robot_description_topic=desc_topic if description else None)
    if info['recovered']:
        end_rel = (int(state_t[-1]) - int(state_t[0])) / 1e9
        notes.insert(0, f'recovered bag: {info["recovered_reason"]}; the data read ends at '
                        f'{end_rel:.3f} s (last joint state; bag time '
                        f'{ns_text(info["recovered_end_ns"])} s)')
        info['recovered_end_s'] = end_rel

    # commands
    if sel.commands:
        run.command = series[sel.commands]
        run.command_t, run.command_u = _command_series(run.command, state, joints, params,
                                                       use_header, notes)

    # reference
    if sel.reference:
        ref: TrajectorySeries = series[sel.reference]
        if len(ref.sample_msg):
            t = ref.sample_times_ns(base)
            order = np.argsort(t, kind='stable')
            run.ref_t = t[order]
            run.ref_q = _cols(ref.joint_names, joints, ref.positions[order])
            run.ref_qd = _cols(ref.joint_names, joints, ref.velocities[order])
            run.ref_source = sel.reference
    elif (isinstance(run.command, JointStateSeries)
          and np.isfinite(run.command.position).any()):
        cmd = run.command
        order = np.argsort(run.command_t, kind='stable')
        run.ref_t = run.command_t[order]
        run.ref_q = _cols(cmd.names, joints, cmd.position)[order]
        run.ref_qd = _cols(cmd.names, joints, cmd.velocity)[order]
        run.ref_source = f'{sel.commands} (position = q_d)'

    if adapt_msgs is not None:
        try:
            run.adaptation = _adaptation_series(adapt_topic, adapt_msgs, use_header)
        except (AttributeError, TypeError, ValueError, IndexError) as exc:
            # a section that cannot run says so; it never takes the rest of the report with it
            run.adaptation = {'topic': adapt_topic, 'failed': f'{type(exc).__name__}: {exc}'}

    # motor
    if sel.motor:
        mot: JointStateSeries = series[sel.motor]
        run.motor = mot
        run.motor_t = mot.stamp_ns if use_header and mot.stamp_ns.any() else mot.recv_ns
    return run


def _command_series(cmd, state: JointStateSeries, joints: list[str], params: dict | None,
                    use_header: bool, notes: list[str] | None = None
                    ) -> tuple[np.ndarray, np.ndarray]:
    """
    Return the times [ns] and efforts (joint order) of the commands on one time base.

    JointState commands carry their own stamp; a Float64MultiArray command answers the
    latest state received before it and gets that state's stamp on the header time base.
    ``notes`` (when given) receives what was mapped by position or left out.
    """
    notes = [] if notes is None else notes
    if isinstance(cmd, JointStateSeries):
        t = cmd.stamp_ns if use_header and cmd.stamp_ns.any() else cmd.recv_ns
        return t, _cols(cmd.names, joints, cmd.effort)
    width = cmd.data.shape[1]
    order_names = _lookup(params, 'joints')
    if (isinstance(order_names, list) and len(order_names) == width
            and set(order_names) <= set(joints)):
        u = _cols(list(order_names), joints, cmd.data)
    else:
        u = _cols(joints[:width], joints, cmd.data)
        if width != len(joints):
            notes.append(f'{cmd.topic} has {width} values per message for '
                         f'{len(joints)} joints; mapped by position')
    if not use_header:
        return cmd.recv_ns, u
    # a command answers the latest state received before it: give it that stamp
    k = np.searchsorted(state.recv_ns, cmd.recv_ns, side='right') - 1
    t = np.where(k >= 0, state.stamp_ns[np.clip(k, 0, None)], np.iinfo(np.int64).min)
    keep = k >= 0
    if not keep.all():
        notes.append(f'{int((~keep).sum())} commands before the first joint state '
                     'ignored on the header time base')
    return t[keep], u[keep]


# ---------------------------------------------------------------------------------------------
# statistics


def _f(x: Any) -> float | None:
    """JSON-friendly float (None for NaN / inf / missing)."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def _dist(values: np.ndarray) -> dict | None:
    v = np.asarray(values, float)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return None
    p50, p99 = np.percentile(v, [50, 99])
    return {'n': int(v.size), 'mean': _f(v.mean()), 'min': _f(v.min()), 'p50': _f(p50),
            'p99': _f(p99), 'max': _f(v.max())}


def _timing(t_ns: np.ndarray, nominal: float | None, nominal_source: str, base: str,
            t0_ns: int, no_drops: str | None = None) -> dict:
    """
    Rate, period jitter, gaps and dropped ticks of one message stream.

    ``no_drops`` (a reason) leaves ``dropped_ticks`` out: periods on a clock other than the
    one the ticks run on do not count missed ticks.
    """
    n = int(len(t_ns))
    out: dict[str, Any] = {'count': n, 'time_base': base}
    if n < 2:
        out.update({'rate_hz': None, 'nominal_period_s': nominal})
        return out
    dt = np.diff(t_ns).astype(np.float64) / 1e9
    span = (int(t_ns[-1]) - int(t_ns[0])) / 1e9
    positive = dt[dt > 0]
    if nominal is None:
        nominal = float(np.median(positive)) if positive.size else None
        nominal_source = 'median period'
    out.update({
        'span_s': span,
        'rate_hz': (n - 1) / span if span > 0 else None,
        'nominal_period_s': nominal,
        'nominal_source': nominal_source,
        'period_mean_s': float(dt.mean()),
        'period_std_s': float(dt.std()),
        'period_min_s': float(dt.min()),
        'period_max_s': float(dt.max()),
        'nonpositive_periods': int((dt <= 0).sum()),
    })
    if not nominal:
        return out
    dev = np.abs(dt - nominal)
    p50, p99 = np.percentile(dev, [50, 99])
    gaps = np.flatnonzero(dt > GAP_FACTOR * nominal)
    dropped = int(np.sum(np.rint(dt[gaps] / nominal) - 1)) if gaps.size else 0
    out.update({
        'jitter_p50_s': float(p50), 'jitter_p99_s': float(p99), 'jitter_max_s': float(dev.max()),
        'gaps': int(gaps.size),
        'dropped_ticks': dropped if no_drops is None else None,
        'max_gap_s': float(dt[gaps].max()) if gaps.size else None,
        'gap_list': [{'t_s': (int(t_ns[i]) - t0_ns) / 1e9, 'period_s': float(dt[i])}
                     for i in gaps[:10]],
    })
    if no_drops is not None:
        out['dropped_ticks_note'] = no_drops
    return out


def _clocks(run: RunData) -> dict:
    """
    Compare the header clock of the joint states with the bag's receive clock.

    Different clocks (the stamps are on sim time while the recorder stamped wall time, or the
    other way round) show as an offset of more than an hour or spans differing by more than 5 %.
    Receive-time periods then do not measure missed ticks of the loop.
    """
    st = run.state
    out: dict[str, Any] = {'same_clock': True}
    if len(st) < 2 or not st.stamp_ns.any():
        return out
    offset = (int(st.stamp_ns[0]) - int(st.recv_ns[0])) / 1e9
    h_span = (int(st.stamp_ns.max()) - int(st.stamp_ns.min())) / 1e9
    r_span = (int(st.recv_ns[-1]) - int(st.recv_ns[0])) / 1e9
    ratio = h_span / r_span if r_span > 0 else None
    same = abs(offset) < 3600.0 and (ratio is None or abs(ratio - 1.0) <= 0.05)
    out.update({'same_clock': same, 'header_minus_receive_s': offset,
                'header_span_s': h_span, 'receive_span_s': r_span,
                'header_per_receive_rate': ratio})
    if not same:
        out['note'] = (f'header stamps and receive times run on different clocks ({h_span:.3f} s '
                       f'of header time over {r_span:.3f} s of receive time, offset '
                       f'{offset:.3f} s; e.g. stamps on sim time, recorder on wall time): '
                       'receive-time periods are transport timing, not missed ticks, so no '
                       'dropped ticks are counted on receive time')
    return out


def _align(ref_t: np.ndarray, ref_v: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, int]:
    """
    Return the reference values at times ``t`` and the number of exact stamp matches.

    Exact stamp match, else linear interpolation inside the reference span, else NaN.
    Values have shape (N, J).
    """
    # unique times (keep the last sample of a repeated stamp)
    keep = np.ones(len(ref_t), bool)
    keep[:-1] = ref_t[1:] != ref_t[:-1]
    rt, rv = ref_t[keep], ref_v[keep]
    if rt.size == 0:
        return np.full((len(t), rv.shape[1]), np.nan), 0
    pos = np.searchsorted(rt, t)
    posc = np.clip(pos, 0, rt.size - 1)
    exact = rt[posc] == t
    if exact.all():                         # every stamp matched (the usual recording)
        return rv[posc].astype(float, copy=False), int(exact.size)
    out = np.full((len(t), rv.shape[1]), np.nan)
    out[exact] = rv[posc[exact]]
    inner = ~exact & (pos > 0) & (pos < rt.size)
    if inner.any():
        a = pos[inner] - 1
        b = pos[inner]
        frac = ((t[inner] - rt[a]).astype(np.float64) / (rt[b] - rt[a]).astype(np.float64))
        out[inner] = rv[a] + frac[:, None] * (rv[b] - rv[a])
    return out, int(exact.sum())


def _zoh(src_t: np.ndarray, src_v: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Zero-order hold: value of the last sample at or before each time (NaN before the first)."""
    k = np.searchsorted(src_t, t, side='right') - 1
    out = src_v[np.clip(k, 0, None)].astype(float, copy=True)
    out[k < 0] = np.nan
    return out


def _point_to_point(t: np.ndarray, qd_ref: np.ndarray, q: np.ndarray, valid: np.ndarray,
                    run_span: float) -> dict | None:
    """Settling time, overshoot and steady-state error for a reference that ends constant."""
    tv, r, y = t[valid], qd_ref[valid], q[valid]
    if tv.size < 3:
        return None
    final = r[-1]
    tol = 1e-9 * max(1.0, float(np.ptp(r)))
    moving = np.abs(r - final) > tol
    i_h = int(np.flatnonzero(moving)[-1] + 1) if moving.any() else 0
    hold = tv[-1] - tv[i_h]
    if hold < HOLD_FRACTION * run_span:
        return None
    out: dict[str, Any] = {'target': _f(final), 'hold_start_s': _f(tv[i_h])}
    # steady-state error over the final 10 % of the run, inside the hold
    t_ss = max(tv[-1] - STEADY_FRACTION * run_span, tv[i_h])
    ss = tv >= t_ss
    out['steady_state_error'] = _f(np.mean(y[ss] - final))
    if i_h == 0:
        out.update({'move_start_s': None, 'amplitude': 0.0, 'settling_time_s': None,
                    'overshoot_pct': None, 'settled': None})
        return out
    # start of the last move: the first sample that differs from the previous constant
    # stretch (sample 0 if the reference moves from the start)
    steps = np.abs(np.diff(r[:i_h + 1])) > tol
    still = np.flatnonzero(~steps)
    i_m = min(int(still[-1]) + 2, i_h) if still.size else 0
    amp = float(final - y[i_m])
    out.update({'move_start_s': _f(tv[i_m]), 'amplitude': _f(amp)})
    if abs(amp) < 1e-9:
        out.update({'settling_time_s': None, 'overshoot_pct': None, 'settled': None})
        return out
    after = slice(i_m, None)
    dev = np.abs(y[after] - final)
    outside = np.flatnonzero(dev > SETTLING_BAND * abs(amp))
    if outside.size == 0:
        settling, settled = 0.0, True
    elif outside[-1] + 1 < dev.size:
        settling, settled = float(tv[i_m + outside[-1] + 1] - tv[i_m]), True
    else:
        settling, settled = None, False
    over = float(np.max(np.sign(amp) * (y[after] - final)))
    out.update({'settling_time_s': _f(settling), 'settled': settled,
                'overshoot_pct': max(0.0, over) / abs(amp) * 100.0})
    return out


# ---------------------------------------------------------------------------------------------
# analysis


def analyze_run(run: RunData, *, transient: float | None = None,
                torque_limit: str | float | list | None = None,
                rate: float | None = None, model: dict | None = None) -> dict:
    """
    All report figures of a loaded run (a JSON-ready dict). Fills ``run.q_d/error``.

    ``model``: options of the model section (:func:`model_section`: ``urdf``, ``gravity``,
    ``cutoff_hz``, ``enabled``); default: the model the bag itself describes.
    """
    joints = run.joints
    nj = len(joints)
    st = run.state
    t = run.rel(run.state_t)
    span = float(t[-1] - t[0]) if t.size > 1 else 0.0
    params = run.params
    report: dict[str, Any] = {
        'bag': run.bag_info,
        'time_base': run.time_base,
        'topics': {r: getattr(run.selection, r) for r in ROLES},
        'topic_selection': run.selection.how,
        'joints': joints,
        'duration_s': span,
        'notes': list(run.notes),
    }

    # nominal period
    nominal, nominal_src = None, 'median period'
    if rate:
        nominal, nominal_src = 1.0 / float(rate), '--rate'
    else:
        pr = _lookup(params, 'control_rate')
        if isinstance(pr, (int, float)) and pr > 0:
            nominal, nominal_src = 1.0 / float(pr), 'params.yaml control_rate'

    # ---- tracking
    late_start, late_src = None, None
    if transient is not None:
        late_start, late_src = float(transient), '--transient'
    else:
        lw = _lookup(params, 'late_window_start')
        if isinstance(lw, (int, float)) and not isinstance(lw, bool):
            late_start, late_src = float(lw), 'params.yaml late_window_start'
    if late_start is None or late_start >= span:
        if late_start is not None:
            report['notes'].append(f'late window start {late_start:g} s is after the end of '
                                   'the run: using the final 50 %')
        late_start, late_src = 0.5 * span, 'final 50 % of the run'

    tracking: dict[str, Any] = {'available': False, 'source': run.ref_source}
    if run.ref_t is not None and run.ref_t.size:
        q_d, exact = _align(run.ref_t, run.ref_q, run.state_t)
        qd_d, _ = _align(run.ref_t, run.ref_qd, run.state_t)
        e = st.position - q_d
        run.q_d, run.qd_d, run.error = q_d, qd_d, e
        aligned = np.isfinite(e).all(axis=1) if nj else np.zeros(len(t), bool)
        tracking.update({
            'available': bool(aligned.any()),
            'error_definition': 'e = q - q_d [rad]',
            'samples': int(aligned.sum()),
            'exact_stamp_matches': exact,
            'interpolated': int(aligned.sum()) - min(exact, int(aligned.sum())),
            'late_window_start_s': late_start,
            'late_window_source': late_src,
        })
        late = aligned & (t >= late_start)
        ref_valid = np.isfinite(q_d).all(axis=1)
        per: dict[str, Any] = {}
        p2p_all = True
        for j, name in enumerate(joints):
            ej = e[aligned, j]
            entry: dict[str, Any] = {
                'rms': _f(np.sqrt(np.mean(ej ** 2))) if ej.size else None,
                'max_abs': _f(np.max(np.abs(ej))) if ej.size else None,
                'late_max_abs': _f(np.max(np.abs(e[late, j]))) if late.any() else None,
                'mean': _f(np.mean(ej)) if ej.size else None,
            }
            p2p = _point_to_point(t, q_d[:, j], st.position[:, j],
                                  ref_valid & np.isfinite(st.position[:, j]), span)
            if p2p is None:
                p2p_all = False
            entry['point_to_point'] = p2p
            per[name] = entry
        tracking['point_to_point'] = p2p_all
        tracking['per_joint'] = per
    else:
        tracking['reason'] = 'no reference topic (trajectory_msgs/JointTrajectory) in the bag'
    report['tracking'] = tracking

    # ---- efforts
    limit_vals, limit_src = None, 'unknown'
    if torque_limit is not None:
        limit_vals = _per_joint(torque_limit, nj)
        limit_src = '--torque-limit'
        if limit_vals is None:
            raise AnalysisError(f'--torque-limit: expected one positive number or {nj} '
                                f'(got {torque_limit!r})')
    else:
        for path in ('controller.torque_limit', 'torque_limit', 'plant.torque_limit'):
            limit_vals = _per_joint(_lookup(params, path), nj)
            if limit_vals is not None:
                limit_src = f'params.yaml {path}'
                break
        if limit_vals is None:      # an arm from its URDF: the nodes' resolved parameters
            limit_vals = _per_joint(_ros_parameter(run.bag, 'controller', 'torque_limit'), nj)
            if limit_vals is not None:
                limit_src = 'ros_params.yaml controller torque_limit'
    effort: dict[str, Any] = {'source': run.selection.commands,
                              'limit_source': limit_src,
                              'limit': limit_vals if limit_vals is not None else 'unknown'}
    if run.command_u is not None and len(run.command_u):
        per = {}
        for j, name in enumerate(joints):
            u = run.command_u[:, j]
            u = u[np.isfinite(u)]
            if not u.size:
                per[name] = None
                continue
            entry = {'peak_abs': _f(np.max(np.abs(u))), 'rms': _f(np.sqrt(np.mean(u ** 2))),
                     'mean': _f(u.mean())}
            if limit_vals is not None:
                lim = limit_vals[j]
                entry['fraction_at_limit'] = float(np.mean(np.abs(u) >= lim * (1 - 1e-9)))
            else:
                entry['fraction_at_limit'] = 'unknown'
            per[name] = entry
        effort['per_joint'] = per
        effort['available'] = True
    else:
        effort['available'] = False
    report['commanded_effort'] = effort
    meas = {}
    for j, name in enumerate(joints):
        u = st.effort[:, j]
        u = u[np.isfinite(u)]
        meas[name] = ({'peak_abs': _f(np.max(np.abs(u))), 'rms': _f(np.sqrt(np.mean(u ** 2)))}
                      if u.size else None)
    report['measured_effort'] = {'source': f'{st.topic} effort', 'per_joint': meas,
                                 'all_zero': _effort_all_zero(st.effort)}
    if report['measured_effort']['all_zero']:
        report['measured_effort']['note'] = ZERO_EFFORT_NOTE
        report['notes'].append(f'{st.topic}: {ZERO_EFFORT_NOTE}')

    # ---- motor
    if run.motor is not None and len(run.motor):
        mot = run.motor
        cur = _cols(mot.names, joints, mot.position)
        volt = _cols(mot.names, joints, mot.velocity)
        iref = _cols(mot.names, joints, mot.effort)
        imax = _per_joint([m.get('i_max') if isinstance(m, dict) else None
                           for m in (_lookup(params, 'plant.motors') or [])], nj)
        per = {}
        for j, name in enumerate(joints):
            c = cur[:, j][np.isfinite(cur[:, j])]
            v = volt[:, j][np.isfinite(volt[:, j])]
            r = iref[:, j][np.isfinite(iref[:, j])]
            entry = {
                'current_peak_abs': _f(np.max(np.abs(c))) if c.size else None,
                'current_rms': _f(np.sqrt(np.mean(c ** 2))) if c.size else None,
                'voltage_peak_abs': _f(np.max(np.abs(v))) if v.size else None,
                'current_ref_peak_abs': _f(np.max(np.abs(r))) if r.size else None,
            }
            if imax is not None and r.size:
                entry['i_max'] = imax[j]
                entry['fraction_current_ref_at_limit'] = float(
                    np.mean(np.abs(r) >= imax[j] * (1 - 1e-9)))
            per[name] = entry
        report['motor'] = {'available': True, 'source': mot.topic, 'per_joint': per}
    else:
        report['motor'] = {'available': False}

    # ---- timing
    clocks = _clocks(run)
    report['clocks'] = clocks
    no_drops = None
    if not clocks['same_clock']:
        no_drops = ('receive clock differs from the header clock (sim time): periods on it '
                    'are not missed ticks')
        report['notes'].append(clocks['note'])
    timing: dict[str, Any] = {
        'state': _timing(run.state_t, nominal, nominal_src, run.time_base, run.t0_ns,
                         no_drops if run.time_base == 'receive' else None)}
    if run.time_base == 'header':
        timing['state_receive'] = _timing(st.recv_ns, nominal, nominal_src, 'receive',
                                          int(st.recv_ns[0]), no_drops)
    if run.command is not None and len(run.command):
        cmd = run.command
        if isinstance(cmd, JointStateSeries):
            cbase = run.time_base if cmd.stamp_ns.any() else 'receive'
            ct = cmd.stamp_ns if cbase == 'header' else cmd.recv_ns
        else:
            cbase, ct = 'receive', cmd.recv_ns
        timing['command'] = _timing(ct, nominal, nominal_src, cbase,
                                    run.t0_ns if cbase == run.time_base else int(ct[0]),
                                    no_drops if cbase == 'receive' else None)
        timing['latency'] = _latency(run)
    report['timing'] = timing

    # ---- power and energy
    report['power'] = _power(run, t)
    if report['power'].get('clock_note'):
        report['notes'].append(report['power']['clock_note'])

    # ---- model
    try:
        report['model'] = model_section(run, report, **(model or {}))
    except (ValueError, ArithmeticError, IndexError, np.linalg.LinAlgError) as exc:
        # a section that cannot run says so; it never takes the rest of the report with it
        why = f'{type(exc).__name__}: {exc}'
        report['model'] = {'available': False, 'failed': True, 'reason': why,
                           'note': f'MODEL SECTION FAILED: {why} (the other sections stand)'}
        run.model_series = None
    if report['model'].get('note'):
        report['notes'].append(report['model']['note'])

    # ---- adaptation
    opts = model or {}
    report['adaptation'] = adaptation_section(run, urdf=opts.get('urdf'),
                                              check=opts.get('enabled', True))
    if report['adaptation'].get('failed'):
        report['notes'].append(f'ADAPTATION SECTION FAILED: {report["adaptation"]["reason"]} '
                               '(the other sections stand)')
    return report


#: What the nominal values of the adaptation section are.
NOMINAL_SOURCE = ('published by the controller with each estimate: the base parameters of its '
                  'nominal model, built from its description (the URDF on robot_description, '
                  "or the 2R's nominal.arm.* parameters) and its nominal.* drive parameters; "
                  'not an independent reference')


def _plot_order(rel: np.ndarray, limit: int = ADAPTATION_PLOT_LINES) -> tuple[list[int], str]:
    """
    Return the columns of ``rel`` = estimate / nominal (samples x parameters) to plot, and why.

    The parameters that moved, largest ``max |rel - 1|`` first, at most ``limit``; a
    parameter whose nominal value is zero (no ratio) or whose estimate never moved is left out.
    """
    dev = np.abs(rel - 1.0)
    dev = np.where(np.isfinite(dev), dev, 0.0).max(axis=0, initial=0.0)
    moved = [k for k in np.argsort(-dev, kind='stable').tolist() if dev[k] > 0.0]
    shown = moved[:limit]
    why = f'{len(shown)} of {rel.shape[1]} parameters'
    if len(moved) > limit:
        why += f': the {limit} that moved most of the {len(moved)} that moved'
    elif len(moved) < rel.shape[1]:
        why += '; the others never moved or have a zero nominal value'
    return shown, why


#: A published nominal value "agrees" with the URDF's within this relative tolerance (the
#: controller publishes 10 significant digits).
URDF_CHECK_TOL = 1e-6


def _urdf_check(run: RunData, names: list[str], nominal: np.ndarray,
                urdf: str | None) -> dict:
    """
    Compare the published nominal values with the base parameters of the run's URDF.

    The URDF: ``--urdf FILE``, else the controller's ``robot_description`` in
    ``ros_params.yaml``, else the one recorded on ``/robot_description``. Its base parameters
    (:func:`manip_control.arm_identification.base_parameters` of the URDF's bodies and
    armature, friction from its ``<dynamics>``, default gravity) are matched by name; a value
    agrees within ``URDF_CHECK_TOL`` relative (1e-12 absolute for zero).
    """
    if urdf is not None:
        try:
            text, source = read_urdf_file(urdf), f'--urdf {urdf}'
        except ArmModelError as exc:
            return {'available': False, 'reason': f'--urdf: {exc}'}
    else:
        text = _ros_parameter(run.bag, 'controller', 'robot_description')
        source = "the controller's robot_description in ros_params.yaml"
        if not (isinstance(text, str) and text.strip()):
            text, source = run.robot_description, \
                f'the URDF recorded on {run.robot_description_topic}'
    if not text:
        return {'available': False, 'reason': 'no URDF (pass --urdf FILE)'}
    try:
        arm = UrdfArm.from_string(text, source=source)
        fr = urdf_friction(text, arm.joint_names)
        reg = ArmRegressor(arm)
        base = base_parameters(reg)
        theta = base.of(reg.parameters(fv=fr.b, fc=fr.tau_c))
    except (ArmModelError, ModelAnalysisError, ValueError, ArithmeticError) as exc:
        return {'available': False, 'source': source, 'reason': f'{type(exc).__name__}: {exc}'}
    urdf_values = dict(zip(base.names, theta.tolist()))
    common = [n for n in names if n in urdf_values]
    if not common:
        return {'available': False, 'source': source, 'reason': 'no parameter name in common '
                f'(the URDF\'s: {", ".join(base.names[:3])}, ...)'}
    nom = dict(zip(names, nominal.tolist()))
    differ = [n for n in common if not abs(nom[n] - urdf_values[n])
              <= URDF_CHECK_TOL * max(abs(nom[n]), abs(urdf_values[n]), 1e-12 / URDF_CHECK_TOL)]
    return {'available': True, 'source': source, 'values': {n: urdf_values[n] for n in common},
            'compared': len(common), 'not_in_urdf': [n for n in names if n not in urdf_values],
            'differ': differ}


def adaptation_section(run: RunData, *, urdf: str | None = None, check: bool = True) -> dict:
    """
    Return the adaptation section: the adaptive law's estimates as the controller published them.

    Per base parameter ``NAME``: nominal value, first and final estimate (the first and the
    last message), change ``100 (final / nominal - 1)`` [%] (None for a zero nominal value),
    excited at the end (the last message's ``excited.NAME``); the fallbacks count and the last
    reason. Without an adaptation topic: ``{'available': False, 'reason': ...}``.
    ``check`` (a URDF arm, the model section not disabled): ``urdf_check``, the nominal values
    against the base parameters of the run's URDF (:func:`_urdf_check`; ``urdf``: its file).
    """
    ad = run.adaptation
    if ad is None:
        return {'available': False, 'reason': 'no diagnostic_msgs/msg/DiagnosticArray topic '
                'named like adaptation in the bag (the controller publishes one when '
                'adaptation.enabled is true)'}
    if ad.get('failed'):
        return {'available': False, 'failed': True, 'topic': ad['topic'],
                'reason': f'{ad["topic"]} could not be read: {ad["failed"]}'}
    est, nom = ad['estimate'], ad['nominal']
    if not len(ad['t_ns']):
        return {'available': False, 'topic': ad['topic'], 'reason': f'{ad["topic"]}: no '
                'message with estimate.* values'}
    names = ad['names']
    final_nom = nom[-1]
    with np.errstate(divide='ignore', invalid='ignore'):
        change = np.where(final_nom != 0.0, 100.0 * (est[-1] / final_nom - 1.0), np.nan)
    changed_nominal = [n for k, n in enumerate(names)
                       if np.unique(nom[np.isfinite(nom[:, k]), k]).size > 1]
    lf = ad['last_fallback']
    per = {name: {'unit': ad['units'][name], 'nominal': _f(final_nom[k]),
                  'first_estimate': _f(est[0, k]), 'final_estimate': _f(est[-1, k]),
                  'change_pct': _f(change[k]), 'excited': ad['excited'][name]}
           for k, name in enumerate(names)}
    rel_t = run.rel(ad['t_ns'])
    with np.errstate(divide='ignore', invalid='ignore'):
        ratio = np.where(nom != 0.0, est / nom, np.nan)
    shown, why = _plot_order(ratio)
    out = {
        'available': True, 'topic': ad['topic'], 'time_base': ad['time_base'],
        'samples': int(len(rel_t)), 'start_s': float(rel_t[0]), 'end_s': float(rel_t[-1]),
        'law_time_s': _f(ad['law_time_s']), 'state': ad['state'], 'names': names,
        'per_parameter': per,
        'excited_final': [n for n in names if ad['excited'][n]],
        'fallbacks': None if math.isnan(ad['fallbacks']) else int(ad['fallbacks']),
        'last_fallback_reason': lf[1] if lf else None,
        'last_fallback_s': float(run.rel(np.array([lf[0]]))[0]) if lf else None,
        'nominal_source': NOMINAL_SOURCE,
        'plotted': [names[k] for k in shown], 'plot_selection': why,
        'skipped_messages': ad['skipped'], 'bad_values': ad['bad_values'],
    }
    if changed_nominal:
        out['nominal_changed'] = changed_nominal
    if check and (urdf is not None or run.robot_description
                  or _ros_parameter(run.bag, 'controller', 'robot_description')):
        out['urdf_check'] = _urdf_check(run, names, final_nom, urdf)
        for name, value in out['urdf_check'].get('values', {}).items():
            per[name]['urdf'] = value
    return out


def _choose_model(run: RunData, urdf: str | None, gravity) -> tuple:
    """
    Choose the arm model of the analysis: ``(model, source, friction, gravity_source)``.

    ``--urdf FILE`` first, else the URDF recorded on ``/robot_description``, else the 2R
    closed form of the plant in ``params.yaml`` (this package's own runs). Returns
    ``(None, reason, None, None)`` when there is none. Raises AnalysisError for a model
    asked for that cannot be built.
    """
    g = DEFAULT_GRAVITY if gravity is None else tuple(float(x) for x in gravity)
    g_src = 'default (0, 0, -9.81) m/s^2' if gravity is None else '--gravity'
    if gravity is not None and (len(g) != 3 or not all(math.isfinite(x) for x in g)):
        raise AnalysisError(f'--gravity: expected 3 finite numbers [m/s^2], got {gravity}')
    text, source = None, None
    if urdf is not None:
        try:
            text = read_urdf_file(urdf)
        except ArmModelError as exc:
            raise AnalysisError(f'--urdf: {exc}') from None
        source = f'--urdf {urdf}'
    elif run.robot_description:
        text, source = run.robot_description, \
            f'URDF recorded on {run.robot_description_topic} in the bag'
    if text is not None:
        name = urdf if urdf is not None else run.robot_description_topic
        try:
            model = UrdfArm.from_string(text, gravity=g, source=str(name))
        except ArmModelError as exc:
            raise AnalysisError(f'model ({source}): {exc}') from None
        try:
            friction = urdf_friction(text, model.joint_names)
        except ModelAnalysisError as exc:
            raise AnalysisError(f'model ({source}): {exc}') from None
        return model, source, friction, g_src
    plant = _lookup(run.params, 'plant')
    if isinstance(plant, dict) and isinstance(plant.get('arm'), dict):
        if gravity is not None:
            raise AnalysisError('--gravity: the 2R closed form takes its gravity from '
                                'params.yaml (plant.arm.g0, plane); pass --urdf to use another')
        try:
            pl = plant_from_dict(plant)
        except ParameterError as exc:
            raise AnalysisError(f'params.yaml: {exc}') from None
        names = _lookup(run.params, 'joints')
        names = tuple(names) if isinstance(names, list) and len(names) == 2 else \
            ('joint1', 'joint2')
        model = TwoLinkArm.from_plant(pl, names)
        fr = pl.friction
        friction = JointFriction(np.array([f.b for f in fr]), np.array([f.tau_c for f in fr]),
                                 np.array([f.eps for f in fr]),
                                 'params.yaml plant.friction (smooth law)',
                                 np.array([f.tau_s for f in fr]), np.array([f.v_s for f in fr]))
        src = ('2R closed form of the plant in params.yaml (rigid body'
               + (', rotor inertia' if pl.rotor_inertia else '')
               + (' and coupling' if pl.rotor_inertia and pl.rotor_coupling else '')
               + ', friction)')
        return model, src, friction, 'params.yaml (vertical plane)' \
            if pl.arm.plane == 'vertical' else 'params.yaml (horizontal plane: none)'
    return None, ('no model: pass --urdf FILE (the bag has no /robot_description and no 2R '
                  'plant in params.yaml)'), None, None


def _friction_fit(residual: np.ndarray, qd: np.ndarray, eps: float = 0.01) -> list[dict]:
    """Per joint: viscous ``b`` and Coulomb ``tau_c`` fitted to a residual (least squares)."""
    out = []
    for j in range(residual.shape[1]):
        r, v = residual[:, j], qd[:, j]
        if not np.isfinite(r).all() or not np.any(np.abs(v) > eps):
            out.append(None)
            continue
        a = np.column_stack([v, np.tanh(v / eps)])
        (b, tc), *_ = np.linalg.lstsq(a, r, rcond=None)
        left = r - a @ np.array([b, tc])
        out.append({'b': float(b), 'tau_c': float(tc),
                    'residual_rms_after': float(np.sqrt(np.mean(left ** 2)))})
    return out


def model_section(run: RunData, report: dict, *, urdf: str | None = None, gravity=None,
                  cutoff_hz: float | None = None, enabled: bool = True) -> dict:
    """
    Inverse-dynamics torque of the recorded motion against the measured / commanded effort.

    The computation is :mod:`manip_control.model_analysis` (filter, batch inverse dynamics,
    residuals, gravity fit); this function chooses the model and the data and fills
    ``run.model_series`` for the plot.
    """
    if not enabled:
        return {'available': False, 'reason': 'disabled (--no-model)'}
    try:
        model, source, friction, g_src = _choose_model(run, urdf, gravity)
        if model is None:
            return {'available': False, 'reason': source}
        missing = [j for j in model.joint_names if j not in run.joints]
        if missing:
            raise AnalysisError(f'model ({source}): joint(s) {", ".join(missing)} of the model '
                                f'not in {run.state.topic} (its joints: '
                                f'{", ".join(run.joints)})')
    except AnalysisError as exc:
        if urdf is not None or gravity is not None:
            raise                   # asked for on the command line: an error
        # the bag's own description is unusable: the rest of the report stands
        return {'available': False, 'reason': str(exc),
                'note': f'no model section: {exc}'}
    idx = [run.joints.index(j) for j in model.joint_names]
    st = run.state
    cutoff = DEFAULT_CUTOFF_HZ if cutoff_hz is None else float(cutoff_hz)
    rows = np.isfinite(st.position[:, idx]).any(axis=1)
    held = None
    if run.command_u is not None and len(run.command_u):
        order = np.argsort(run.command_t, kind='stable')
        held = _zoh(run.command_t[order], run.command_u[order], run.state_t[rows])[:, idx]
    # samples that share one time stamp (a repeated or re-sent state, extra rows of a
    # recovered log) are averaged into one: the filter needs strictly increasing times
    tv, (q, vel, meas, held), repeats = _merge_repeats(
        run.rel(run.state_t[rows]), st.position[rows][:, idx], st.velocity[rows][:, idx],
        st.effort[rows][:, idx], held)
    try:
        motion = filter_motion(tv, q, cutoff_hz=cutoff)
    except ModelAnalysisError as exc:
        if cutoff_hz is not None and str(exc).startswith('--cutoff'):
            raise AnalysisError(str(exc)) from None     # the option asked for is impossible
        return {'available': False, 'failed': True, 'reason': str(exc),
                'repeated_stamps': repeats,
                'note': f'MODEL SECTION FAILED: {exc} (the other sections stand)'}
    tau_model = model_torque(model, motion, friction)
    grid = motion.t
    keep = np.zeros(grid.size, bool)
    keep[motion.keep] = True
    out: dict[str, Any] = {
        'available': True, 'source': source, 'joints': list(model.joint_names),
        'gravity': [float(x) for x in model.gravity_field], 'gravity_source': g_src,
        'friction': (friction.source if friction is not None and friction.nonzero else 'none'),
        'definition': 'tau_model = M(q) qdd + C(q, qd) qd + g(q) + f(qd) from the filtered '
                      'positions; residual = F(effort) - tau_model [N·m]',
        'filter': {'kind': 'zero-phase Gaussian low-pass FIR (symmetric kernel, sigma '
                           f'{motion.sigma * 1e3:.3g} ms, -3 dB at the cutoff): no delay',
                   'cutoff_hz': cutoff, 'derivatives': 'central differences of the filtered '
                   'position (numpy.gradient)',
                   'joint_state_period_s': motion.period / motion.step,
                   'figures_every_s': motion.period,
                   'resampled': motion.resampled, 'transient_left_out_s': motion.trim_s},
        'samples': int(keep.sum()),
        'repeated_stamps': repeats,
    }
    if repeats:
        out['note'] = (f'model section: {repeats} joint states repeat the time stamp of the '
                       'one before them; each group sharing a stamp is averaged into one '
                       'sample')
    series: dict[str, Any] = {'t': grid, 'model': tau_model, 'keep': keep,
                              'joints': list(model.joint_names)}
    # samples where a joint sits at its velocity limit (a simulator clamps the speed there,
    # so the torque does not produce the model's acceleration): flagged, and left out of a
    # second set of figures and of the fits, with the filter's reach (1 / fc) around them
    vlim = np.asarray(model.limits.velocity, float)
    clamped = np.zeros(grid.size, bool)
    at_limit: dict[str, float] = {}
    if np.isfinite(vel).any() and np.isfinite(vlim).any():
        for j, name in enumerate(model.joint_names):
            ok = np.isfinite(vel[:, j])
            if not np.isfinite(vlim[j]) or not ok.any():
                continue
            hit = np.abs(vel[:, j]) >= (1.0 - VELOCITY_LIMIT_TOL) * vlim[j]
            if hit.any():
                at_limit[name] = float(hit.mean())
                near = np.interp(grid, tv[ok], hit[ok].astype(float)) > 0.0
                clamped |= near
        if clamped.any():
            reach = int(math.ceil(1.0 / (cutoff * motion.period)))
            clamped = np.convolve(clamped, np.ones(2 * reach + 1), mode='same') > 0.0
    free = keep & ~clamped
    if at_limit:
        out['velocity_limit'] = {
            'share_of_samples_at_limit': at_limit,
            'definition': f'|recorded velocity| >= {1 - VELOCITY_LIMIT_TOL:g} x the '
                          'URDF velocity limit; figures "away from limits" leave out those '
                          'samples and 1 / fc around them',
            'samples_away_from_limits': int(free.sum())}
    # the effort the model is compared with: measured, and the held command
    have_meas = np.isfinite(meas).any() and not report['measured_effort'].get('all_zero')
    per: dict[str, Any] = {name: {} for name in model.joint_names}
    if have_meas:
        eff_f = motion.smooth(tv, meas)
        series['measured'] = eff_f
        for name, fig in zip(model.joint_names, compare(eff_f, tau_model, keep)):
            per[name]['measured'] = fig
        if at_limit and free.sum() >= 2:
            for name, fig in zip(model.joint_names, compare(eff_f, tau_model, free)):
                per[name]['measured_away_from_limits'] = fig
    else:
        out['measured_note'] = ('the joint states carry no effort' if not
                                np.isfinite(meas).any() else ZERO_EFFORT_NOTE)
    cmd_f = None
    if held is not None:
        started = np.isfinite(held).all(axis=1)
        if started.any():
            cmd_f = motion.smooth(tv, held)
            t_first = float(tv[started][0])
            ckeep = keep & (grid >= t_first + motion.trim_s)
            series['command'] = cmd_f
            series['command_keep'] = ckeep
            out['command'] = {'source': run.selection.commands,
                              'alignment': 'held from its stamp until the next command '
                                           '(zero-order hold), then filtered like the effort',
                              'from_s': t_first + motion.trim_s,
                              'samples': int(ckeep.sum())}
            if ckeep.sum() >= 2:
                for name, fig in zip(model.joint_names, compare(cmd_f, tau_model, ckeep)):
                    per[name]['command'] = fig
            if at_limit and (ckeep & free).sum() >= 2:
                for name, fig in zip(model.joint_names,
                                     compare(cmd_f, tau_model, ckeep & free)):
                    per[name]['command_away_from_limits'] = fig
    # velocity check: D F q against F qd of the recorded velocity
    if np.isfinite(vel).any():
        vel_f = motion.smooth(tv, vel)
        dv = (motion.qd - vel_f)[keep]
        for j, name in enumerate(model.joint_names):
            if np.isfinite(dv[:, j]).all():
                per[name]['velocity_check_rms'] = float(np.sqrt(np.mean(dv[:, j] ** 2)))
    out['per_joint'] = per
    # what explains the residual: gravity fit and friction fit on the best effort signal
    target, tkeep, tname = (series.get('measured'), keep, 'measured effort') if have_meas \
        else (cmd_f, series.get('command_keep'), 'commanded effort')
    if tkeep is not None and at_limit:
        tkeep = tkeep & free
        tname += ' away from velocity limits'
    if target is not None and tkeep is not None and tkeep.sum() >= 20:
        sub = _Sub(motion, tkeep)
        gfit = fit_gravity(model, sub, target, friction)
        if gfit is not None:
            gfit['effort'] = tname
            out['gravity_fit'] = gfit
            advice = _gravity_off(gfit)
            if advice:
                gfit['advice'] = advice
                out['note'] = '; '.join(x for x in (out.get('note'), advice) if x)
        res = (target - tau_model)[tkeep]
        fits = _friction_fit(res, motion.qd[tkeep])
        out['friction_fit'] = {'effort': tname, 'per_joint': dict(zip(model.joint_names, fits))}
    run.model_series = series
    return out


def _merge_repeats(t: np.ndarray, *arrays: np.ndarray | None
                   ) -> tuple[np.ndarray, list, int]:
    """
    Average the samples that share one time: ``(unique t, averaged arrays, repeats)``.

    ``t`` is sorted; each array has one row per time (None passes through). A row's value
    is the mean of the finite values of its group (NaN when there is none); ``repeats`` is
    the number of rows merged into an earlier one.
    """
    first = np.ones(t.size, bool)
    first[1:] = t[1:] != t[:-1]
    if first.all():
        return t, list(arrays), 0
    starts = np.flatnonzero(first)
    out = []
    for a in arrays:
        if a is None:
            out.append(None)
            continue
        ok = np.isfinite(a)
        total = np.add.reduceat(np.where(ok, a, 0.0), starts, axis=0)
        n = np.add.reduceat(ok.astype(np.int64), starts, axis=0)
        out.append(np.where(n > 0, total / np.maximum(n, 1), np.nan))
    return t[starts], out, int(t.size - starts.size)


#: The best-fit gravity is "near zero" below this fraction of the model's |g| ...
GRAVITY_OFF_FRACTION = 0.1
#: ... and the model's gravity "explains the efforts badly" when the residual RMS with it
#: is this many times the residual RMS with the fitted field (over all joints).
GRAVITY_OFF_RESIDUAL_RATIO = 3.0


def _gravity_off(fit: dict) -> str | None:
    """Advice when the efforts look like a run without gravity (e.g. a simulator's), else None."""
    g_model = float(np.linalg.norm(fit['model_vector']))
    if not g_model > 0.0 or fit['magnitude'] >= GRAVITY_OFF_FRACTION * g_model:
        return None
    fitted = [x for x in fit['residual_rms'] if x is not None]
    with_model = [x for x in fit['residual_rms_model_gravity'] if x is not None]
    if not fitted:
        return None
    r_fit = math.sqrt(sum(x * x for x in fitted))
    r_model = math.sqrt(sum(x * x for x in with_model))
    if not r_model > GRAVITY_OFF_RESIDUAL_RATIO * r_fit:
        return None
    return ('gravity appears off: try --gravity 0 0 0 (the best-fit gravity is '
            f'{fit["magnitude"]:.3g} m/s^2 against {g_model:.3g} in the model; the residual '
            f'RMS is {r_model:.3g} N·m with the gravity of the model, {r_fit:.3g} N·m with '
            'the fitted one)')


class _Sub:
    """A motion restricted to a boolean mask of its grid (for :func:`fit_gravity`)."""

    def __init__(self, motion, mask: np.ndarray) -> None:
        self.t, self.q, self.qd, self.qdd = motion.t, motion.q, motion.qd, motion.qdd
        self.keep = np.flatnonzero(mask)
        self._motion = motion

    def smooth(self, t, values):
        return self._motion.smooth(t, values)

    def smooth_of_velocity(self, func):
        return self._motion.smooth_of_velocity(func)


def _latency(run: RunData) -> dict:
    """State-to-command latency on receive times [s]."""
    st, cmd = run.state, run.command
    s_recv = st.recv_ns
    if isinstance(cmd, JointStateSeries) and cmd.stamp_ns.any():
        # commands carry the stamp of the state they answer
        order = np.argsort(st.stamp_ns, kind='stable')
        stamps = st.stamp_ns[order]
        pos = np.clip(np.searchsorted(stamps, cmd.stamp_ns), 0, max(len(stamps) - 1, 0))
        match = stamps[pos] == cmd.stamp_ns
        lat = (cmd.recv_ns[match] - s_recv[order][pos[match]]) / 1e9
        return {'method': 'command header stamp == state header stamp; receive-time '
                          'difference',
                'matched_commands': int(match.sum()),
                'unmatched_commands': int((~match).sum()),
                'latency_s': _dist(lat)}
    c_recv = cmd.recv_ns
    k = np.searchsorted(c_recv, s_recv, side='left')      # next command at or after the state
    has_next = k < len(c_recv)
    first_cmd = c_recv[0]
    prev = np.searchsorted(s_recv, first_cmd, side='right') - 1   # state before the 1st command
    in_span = (np.arange(len(s_recv)) >= max(prev, 0)) & (s_recv <= c_recv[-1])
    nxt_state = np.append(s_recv[1:], np.iinfo(np.int64).max)
    cand = in_span & has_next
    kk = np.clip(k, 0, len(c_recv) - 1)
    answered = cand & (c_recv[kk] < nxt_state)
    lat = (c_recv[kk[answered]] - s_recv[answered]) / 1e9
    return {'method': 'each state to the next command (receive times), for states in the '
                      'command span whose next command arrives before the next state',
            'states_in_command_span': int(in_span.sum()),
            'answered_states': int(answered.sum()),
            'unanswered_states': int((in_span & ~answered).sum()),
            'latency_s': _dist(lat)}


def _effort_all_zero(effort: np.ndarray) -> bool:
    """Tell whether the joint states carry effort values that are all exactly 0."""
    vals = effort[np.isfinite(effort)]
    return bool(vals.size) and not vals.any()


def _power(run: RunData, t: np.ndarray) -> dict:
    st = run.state
    tau, src = st.effort, f'{st.topic} effort'
    commanded = False
    if run.command_u is not None and len(run.command_u) and (
            not np.isfinite(tau).any() or _effort_all_zero(tau)):
        order = np.argsort(run.command_t, kind='stable')
        tau = _zoh(run.command_t[order], run.command_u[order], run.state_t)
        why = ('the joint states carry no effort' if not np.isfinite(st.effort).any()
               else 'the joint-state effort is zero throughout')
        src = (f'COMMANDED effort {run.selection.commands} (zero-order hold), because {why}')
        commanded = True
    qd = st.velocity
    p = np.nansum(tau * qd, axis=1)
    ok = np.isfinite(tau).any(axis=1) & np.isfinite(qd).any(axis=1)
    out: dict[str, Any] = {'definition': 'P = sum_j tau_j * qd_j [W]', 'torque_source': src,
                           'from_commanded_effort': commanded}
    if ok.sum() < 2:
        out['available'] = False
        return out
    tp, pp = t[ok], p[ok]
    work = np.concatenate([[0.0], np.cumsum(0.5 * (pp[1:] + pp[:-1]) * np.diff(tp))])
    pos = np.clip(pp, 0, None)
    out.update({'available': True, 'peak_w': _f(pp.max()), 'min_w': _f(pp.min()),
                'mean_w': _f(pp.mean()), 'work_j': _f(work[-1]),
                'positive_work_j': _f(np.sum(0.5 * (pos[1:] + pos[:-1]) * np.diff(tp))),
                'clock': f'{run.time_base} time of {st.topic}'})
    # the work as a run on the other clock computes it (states in that clock's order, the
    # command held on it): a disagreement is a caveat on the work
    other = 'receive' if run.time_base == 'header' else 'header'
    if st.stamp_ns.any():
        w_other = _work_on_clock(run, other == 'header', commanded)
        out['work_other_clock_j'] = _f(w_other)
        out['other_clock'] = other
        scale = max(abs(float(work[-1])), abs(w_other))
        if scale > 0 and abs(float(work[-1]) - w_other) > CLOCK_WORK_TOLERANCE * scale:
            out['clock_note'] = (
                f'the work is integrated over {run.time_base} time: '
                f'{float(work[-1]):.4g} J; over {other} time it would be {w_other:.4g} J '
                f'(the clocks disagree by more than {100 * CLOCK_WORK_TOLERANCE:g} %); header '
                'time is when the data were sampled, receive time when the recorder got them')
    energy = mechanical_energy(run.params, st.position, st.velocity)
    if energy is not None and np.isfinite(energy).any():
        e = energy[np.isfinite(energy)]
        out['mechanical_energy'] = {'definition': 'T + V of the 2R model in params.yaml [J]',
                                    'initial_j': _f(e[0]), 'final_j': _f(e[-1]),
                                    'min_j': _f(e.min()), 'max_j': _f(e.max()),
                                    'dissipated_j': _f(work[-1] - (e[-1] - e[0]))}
    else:
        out['mechanical_energy'] = None
    return out


def _work_on_clock(run: RunData, use_header: bool, commanded: bool) -> float:
    """Work [J] ``sum_k (P_k + P_k-1) / 2 (t_k - t_k-1)`` with every time on one clock."""
    st = run.state
    t_ns = st.stamp_ns if use_header else st.recv_ns
    order = np.argsort(t_ns, kind='stable')
    t_ns, qd = t_ns[order], st.velocity[order]
    tau = st.effort[order]
    if commanded:
        ct, cu = _command_series(run.command, st, run.joints, run.params, use_header)
        corder = np.argsort(ct, kind='stable')
        tau = _zoh(ct[corder], cu[corder], t_ns)
    p = np.nansum(tau * qd, axis=1)
    ok = np.isfinite(tau).any(axis=1) & np.isfinite(qd).any(axis=1)
    tp = (t_ns[ok] - t_ns[ok][0]) / 1e9 if ok.any() else t_ns[:0] / 1e9
    pp = p[ok]
    return float(np.sum(0.5 * (pp[1:] + pp[:-1]) * np.diff(tp)))


def analyze(bag: str | Path, *, overrides: dict | None = None, time_base: str = 'header',
            transient: float | None = None, torque_limit=None, rate: float | None = None,
            progress=None, skip_corrupt: bool = False,
            model: dict | None = None) -> tuple[dict, RunData]:
    """Load and analyse a bag: returns (report dict, RunData). ``model``: see model_section."""
    enabled = (model or {}).get('enabled', True)
    run = load_run(bag, overrides=overrides, time_base=time_base, progress=progress,
                   skip_corrupt=skip_corrupt, read_description=enabled)
    return analyze_run(run, transient=transient, torque_limit=torque_limit, rate=rate,
                       model=model), run


# ---------------------------------------------------------------------------------------------
# rendering


def _fmt(x: Any, unit: str = '', scale: float = 1.0, digits: int = 4) -> str:
    if x is None:
        return 'n/a'
    if isinstance(x, str):
        return x
    if isinstance(x, bool):
        return 'yes' if x else 'no'
    v = float(x) * scale
    return f'{v:.{digits}g}{(" " + unit) if unit else ""}'


def _timing_lines(name: str, tm: dict) -> list[str]:
    if not tm or tm.get('rate_hz') is None:
        return [f'| {name} | {tm.get("count", 0) if tm else 0} | n/a | | | | | |']
    return [f'| {name} ({tm["time_base"]}) | {tm["count"]} | {_fmt(tm["rate_hz"])} | '
            f'{_fmt(tm.get("nominal_period_s"), "ms", 1e3)} | '
            f'{_fmt(tm.get("jitter_p50_s"), "µs", 1e6)} | '
            f'{_fmt(tm.get("jitter_p99_s"), "µs", 1e6)} | '
            f'{_fmt(tm.get("jitter_max_s"), "µs", 1e6)} | '
            f'{tm.get("gaps", "n/a")} / {_drops(tm)} |']


def _drops(tm: dict) -> str:
    """Format dropped ticks ('n/a (other clock)' where they are not counted)."""
    if tm.get('dropped_ticks') is not None:
        return str(tm['dropped_ticks'])
    return 'n/a (other clock)' if tm.get('dropped_ticks_note') else 'n/a'


def render_markdown(report: dict, plots: list[str] | None = None) -> str:
    """report.md text."""
    b = report['bag']
    lines = [f'# Run report: `{b["path"]}`', '',
             f'- storage: {b["storage"]}, metadata version: {b["metadata_version"]}, '
             f'{b["message_count"]} messages, {b["duration_s"]:.3f} s',
             f'- time base: **{report["time_base"]}**; joints ({len(report["joints"])}): '
             + ', '.join(f'`{j}`' for j in report['joints'])]
    for role, topic in report['topics'].items():
        lines.append(f'- {role.replace("_", " ")}: '
                     + (f'`{topic}` ({report["topic_selection"].get(role)})' if topic
                        else f'none ({report["topic_selection"].get(role, "not found")})'))
    if b['skipped']:
        lines.append('- skipped topics: ' + '; '.join(f'`{s["topic"]}` ({s["reason"]})'
                                                      for s in b['skipped']))
    for note in report['notes']:
        lines.append(f'- note: {note}')
    tr = report['tracking']
    lines += ['', '## Tracking', '']
    if tr['available']:
        lines += [f'Reference: `{tr["source"]}`; {tr["samples"]} samples '
                  f'({tr["exact_stamp_matches"]} exact stamp matches). Error e = q - q_d. '
                  f'Late window from {tr["late_window_start_s"]:.3g} s '
                  f'({tr["late_window_source"]}).', '',
                  '| joint | RMS [rad] | max abs [rad] | late max abs [rad] | settling 2 % [s] '
                  '| overshoot [%] | steady-state error [rad] |',
                  '|---|---|---|---|---|---|---|']
        for name, e in tr['per_joint'].items():
            p = e.get('point_to_point') or {}
            settle = p.get('settling_time_s')
            if p and p.get('settled') is False:
                settle = 'not settled'
            lines.append(f'| {name} | {_fmt(e["rms"])} | {_fmt(e["max_abs"])} | '
                         f'{_fmt(e["late_max_abs"])} | {_fmt(settle)} | '
                         f'{_fmt(p.get("overshoot_pct"), digits=3)} | '
                         f'{_fmt(p.get("steady_state_error"))} |')
        if not tr.get('point_to_point'):
            lines += ['', 'The reference does not end constant on every joint: settling / '
                      'overshoot / steady-state figures only where it does.']
    else:
        lines.append(f'Not available: {tr.get("reason", "no aligned reference samples")}.')
    ef = report['commanded_effort']
    lines += ['', '## Effort', '']
    if ef['available']:
        lim = ef['limit']
        lines += [f'Commanded effort from `{ef["source"]}`; limit: '
                  + (', '.join(f'{v:g}' for v in lim) + f' N·m ({ef["limit_source"]})'
                     if isinstance(lim, list) else 'unknown'), '',
                  '| joint | peak abs u [N·m] | RMS u [N·m] | time at limit | peak abs measured '
                  '[N·m] | RMS measured [N·m] |', '|---|---|---|---|---|---|']
        for name in report['joints']:
            e = ef['per_joint'].get(name) or {}
            m = report['measured_effort']['per_joint'].get(name) or {}
            fr = e.get('fraction_at_limit')
            frs = f'{100 * fr:.2f} %' if isinstance(fr, float) else _fmt(fr)
            lines.append(f'| {name} | {_fmt(e.get("peak_abs"))} | {_fmt(e.get("rms"))} | {frs} '
                         f'| {_fmt(m.get("peak_abs"))} | {_fmt(m.get("rms"))} |')
        if report['measured_effort'].get('all_zero'):
            lines += ['', f'**Measured effort: {ZERO_EFFORT_NOTE}** (power below uses the '
                      'commanded effort).']
    else:
        lines.append('No command topic.')
    mo = report['motor']
    if mo['available']:
        lines += ['', f'Motor telemetry `{mo["source"]}`:', '',
                  '| joint | peak abs current [A] | RMS current [A] | peak abs voltage [V] | '
                  'peak abs current ref [A] |', '|---|---|---|---|---|']
        for name, e in mo['per_joint'].items():
            lines.append(f'| {name} | {_fmt(e["current_peak_abs"])} | {_fmt(e["current_rms"])} '
                         f'| {_fmt(e["voltage_peak_abs"])} | '
                         f'{_fmt(e["current_ref_peak_abs"])} |')
    tm = report['timing']
    lines += ['', '## Timing', '',
              '| stream | messages | rate [Hz] | nominal period | jitter p50 | jitter p99 | '
              'jitter max | gaps / dropped ticks |', '|---|---|---|---|---|---|---|---|']
    lines += _timing_lines('joint states', tm['state'])
    if 'state_receive' in tm:
        lines += _timing_lines('joint states', tm['state_receive'])
    if 'command' in tm:
        lines += _timing_lines('commands', tm['command'])
    if 'latency' in tm:
        la = tm['latency']
        d = la.get('latency_s')
        lines += ['', f'State-to-command latency ({la["method"]}): '
                  + (f'mean {_fmt(d["mean"], "ms", 1e3)}, p50 {_fmt(d["p50"], "ms", 1e3)}, '
                     f'p99 {_fmt(d["p99"], "ms", 1e3)}, max {_fmt(d["max"], "ms", 1e3)} '
                     f'over {d["n"]} samples' if d else 'no samples')
                  + (f'; {la["unanswered_states"]} states without a command before the next '
                     'state' if 'unanswered_states' in la else
                     f'; {la["unmatched_commands"]} commands without a matching state')
                  + '.']
    pw = report['power']
    lines += ['', '## Power', '']
    if pw.get('available'):
        lines.append(f'P = Σ τ·qd from {pw["torque_source"]}: peak {_fmt(pw["peak_w"], "W")}, '
                     f'mean {_fmt(pw["mean_w"], "W")}, work {_fmt(pw["work_j"], "J")} '
                     f'(positive work {_fmt(pw["positive_work_j"], "J")}), integrated over '
                     f'the {pw["clock"]}.')
        if pw.get('clock_note'):
            lines.append(f'**Clock caveat:** {pw["clock_note"]}.')
        me = pw.get('mechanical_energy')
        if me:
            lines.append(f'Mechanical energy T + V: initial {_fmt(me["initial_j"], "J")}, final '
                         f'{_fmt(me["final_j"], "J")}, range {_fmt(me["min_j"], "J")} .. '
                         f'{_fmt(me["max_j"], "J")}; work minus energy change '
                         f'{_fmt(me["dissipated_j"], "J")}.')
        else:
            lines.append('Mechanical energy: no model in params.yaml.')
    else:
        lines.append('Not available (no effort and velocity).')
    lines += _model_markdown(report.get('model') or {'available': False})
    lines += _adaptation_markdown(report.get('adaptation') or {'available': False})
    if plots:
        lines += ['', '## Plots', ''] + [f'![{Path(p).stem}]({Path(p).name})' for p in plots]
    return '\n'.join(lines) + '\n'


def _adaptation_markdown(ad: dict) -> list[str]:
    """Return the Adaptation section's lines (none for a bag without an adaptation topic)."""
    if not ad.get('available'):
        return ['', '## Adaptation', '', f'Not available: {ad["reason"]}.'] if ad.get('topic') \
            else []
    lines = ['', '## Adaptation', '',
             f'Estimates of the adaptive law from `{ad["topic"]}`: {ad["samples"]} samples, '
             f'{ad["start_s"]:.3f} .. {ad["end_s"]:.3f} s ({ad["time_base"]} time; the law\'s '
             f'own time at the last one {_fmt(ad["law_time_s"], "s")}), state at the end: '
             f'{ad["state"] or "n/a"}. Final = the last message. Nominal values: '
             f'{ad["nominal_source"]}.', '',
             '| parameter | unit | nominal | first estimate | final estimate | change [%] | '
             'excited at the end |', '|---|---|---|---|---|---|---|']
    for name, e in ad['per_parameter'].items():
        lines.append(f'| {name} | {e["unit"]} | {_fmt(e["nominal"], digits=6)} | '
                     f'{_fmt(e["first_estimate"], digits=6)} | '
                     f'{_fmt(e["final_estimate"], digits=6)} | '
                     f'{_fmt(e["change_pct"], digits=3)} | {_fmt(e["excited"])} |')
    uc = ad.get('urdf_check')
    if uc and uc['available']:
        lines += ['', f'Nominal values against the base parameters of {uc["source"]} (its '
                  'bodies, armature and <dynamics> friction): '
                  f'{uc["compared"] - len(uc["differ"])} of {uc["compared"]} agree within '
                  f'{URDF_CHECK_TOL:g} relative'
                  + (f'; not in the URDF\'s base: {", ".join(uc["not_in_urdf"])}'
                     if uc['not_in_urdf'] else '')
                  + ('.' if not uc['differ'] else
                     "; the others (expected where the controller's nominal.* drive and "
                     "friction parameters are not the URDF's):"), '']
        if uc['differ']:
            lines += ['| parameter | nominal | URDF | nominal - URDF |', '|---|---|---|---|']
            per = ad['per_parameter']
            for name in uc['differ']:
                nv, uv = per[name]['nominal'], per[name]['urdf']
                lines.append(f'| {name} | {_fmt(nv, digits=6)} | {_fmt(uv, digits=6)} | '
                             f'{_fmt(None if nv is None else nv - uv, digits=6)} |')
    elif uc:
        lines += ['', f'Nominal values against the URDF: not checked ({uc["reason"]}).']
    fb = ad['fallbacks']
    lines += ['', f'Fallbacks: {"n/a" if fb is None else fb}'
              + (f'; the last reason (at {ad["last_fallback_s"]:.3f} s): '
                 f'{ad["last_fallback_reason"]}' if ad['last_fallback_reason'] else '') + '.']
    if ad.get('nominal_changed'):
        lines.append('**The nominal value changed during the run** for '
                     + ', '.join(ad['nominal_changed']) + ' (the table shows the last one).')
    if ad['skipped_messages'] or ad['bad_values']:
        lines.append(f'{ad["skipped_messages"]} messages without estimates left out; '
                     f'{ad["bad_values"]} values missing or not finite numbers.')
    lines.append(f'Plot adaptation.png: estimate / nominal over time, {ad["plot_selection"]}.')
    return lines


def _pct(x: Any) -> str:
    return 'n/a' if x is None else f'{100 * x:.3g} %'


def _model_markdown(mo: dict) -> list[str]:
    lines = ['', '## Model', '']
    if mo.get('failed'):
        return lines + [f'**FAILED:** {mo.get("reason")} (the other sections stand).']
    if not mo.get('available'):
        return lines + [f'Not available: {mo.get("reason", "no model")}.']
    fi = mo['filter']
    g = mo['gravity']
    lines += [f'Model: {mo["source"]}; gravity ({g[0]:g}, {g[1]:g}, {g[2]:g}) m/s^2 '
              f'({mo["gravity_source"]}); friction: {mo["friction"]}.',
              f'Velocity and acceleration: {fi["kind"]}, cutoff {fi["cutoff_hz"]:g} Hz, '
              f'{fi["derivatives"]}; the same filter F on every effort; '
              f'{fi["transient_left_out_s"]:.3g} s left out at each end'
              + (' (samples interpolated onto a uniform grid)' if fi['resampled'] else '')
              + f'. Residual = F(effort) − τ_model over {mo["samples"]} samples.', '',
              '| joint | vs | effort RMS [N·m] | residual RMS [N·m] | max abs [N·m] | '
              'RMS / effort RMS |', '|---|---|---|---|---|---|']
    kinds = {'measured': 'measured', 'command': 'command',
             'measured_away_from_limits': 'measured, away from velocity limits',
             'command_away_from_limits': 'command, away from velocity limits'}
    for name, e in mo['per_joint'].items():
        for kind, label in kinds.items():
            f = e.get(kind)
            if f:
                lines.append(f'| {name} | {label} | {_fmt(f["effort_rms"])} | '
                             f'{_fmt(f["residual_rms"])} | {_fmt(f["residual_max_abs"])} | '
                             f'{_pct(f["residual_fraction"])} |')
    if mo.get('measured_note'):
        lines += ['', f'Measured effort not compared: {mo["measured_note"]}.']
    vl = mo.get('velocity_limit')
    if vl:
        lines += ['', 'Joints at their velocity limit (share of samples): '
                  + ', '.join(f'{n} {100 * x:.3g} %' for n, x in
                              vl['share_of_samples_at_limit'].items())
                  + f' ({vl["definition"]}; {vl["samples_away_from_limits"]} samples left).']
    gf = mo.get('gravity_fit')
    if gf:
        v = gf['vector']
        ang = gf.get('angle_to_model_deg')
        lines += ['', f'Gravity that best explains the {gf["effort"]} (least squares over '
                  f'{gf["samples"]} samples): ({v[0]:.3g}, {v[1]:.3g}, {v[2]:.3g}) m/s^2, '
                  f'|g| = {gf["magnitude"]:.3g}'
                  + (f", {ang:.3g} deg from the model's" if ang is not None else '')
                  + '; residual RMS per joint with it: '
                  + ', '.join(_fmt(x) for x in gf['residual_rms'])
                  + " N·m (with the model's gravity: "
                  + ', '.join(_fmt(x) for x in gf['residual_rms_model_gravity']) + ' N·m).']
        if gf.get('advice'):
            lines += ['', f'**{gf["advice"]}.**']
    ff = mo.get('friction_fit')
    if ff:
        parts = [f'{n}: b {_fmt(f["b"])}, τc {_fmt(f["tau_c"])} → {_fmt(f["residual_rms_after"])}'
                 for n, f in ff['per_joint'].items() if f]
        if parts:
            lines += ['', f'Viscous b [N·m·s/rad] and Coulomb τc [N·m] fitted to the residual '
                      f'against the {ff["effort"]}, residual RMS after [N·m]: '
                      + '; '.join(parts) + '.']
    return lines


def render_summary(report: dict) -> str:
    """Short human-readable summary for the terminal."""
    b = report['bag']
    lines = [f'bag: {b["path"]} ({b["storage"]}, {b["message_count"]} messages, '
             f'{b["duration_s"]:.2f} s)',
             f'joints ({len(report["joints"])}): {", ".join(report["joints"])}',
             'topics: ' + ', '.join(f'{r}={t or "-"}' for r, t in report['topics'].items())]
    if b['skipped']:
        lines.append('skipped: ' + ', '.join(f'{s["topic"]} ({s["type"]})' for s in b['skipped']))
    tr = report['tracking']
    if tr['available']:
        lines.append(f'tracking error e = q - q_d (late window from '
                     f'{tr["late_window_start_s"]:.3g} s):')
        for name, e in tr['per_joint'].items():
            p = e.get('point_to_point') or {}
            extra = ''
            if p.get('amplitude'):
                extra = (f', settling {_fmt(p.get("settling_time_s"), "s")}, overshoot '
                         f'{_fmt(p.get("overshoot_pct"), "%", digits=3)}')
            if p:
                extra += f', steady-state {_fmt(p.get("steady_state_error"), "rad")}'
            lines.append(f'  {name}: RMS {_fmt(e["rms"], "rad")}, max {_fmt(e["max_abs"], "rad")}'
                         f', late max {_fmt(e["late_max_abs"], "rad")}{extra}')
    else:
        lines.append('tracking: n/a (' + tr.get('reason', 'no aligned reference') + ')')
    ef = report['commanded_effort']
    if ef['available']:
        lines.append(f'commanded effort ({ef["source"]}, limit '
                     f'{ef["limit"] if isinstance(ef["limit"], str) else ef["limit"]}):')
        for name, e in ef['per_joint'].items():
            if e:
                fr = e['fraction_at_limit']
                frs = f'{100 * fr:.2f} %' if isinstance(fr, float) else fr
                lines.append(f'  {name}: peak {_fmt(e["peak_abs"], "N·m")}, RMS '
                             f'{_fmt(e["rms"], "N·m")}, at limit {frs}')
    if report['motor']['available']:
        for name, e in report['motor']['per_joint'].items():
            lines.append(f'  motor {name}: peak current {_fmt(e["current_peak_abs"], "A")}, '
                         f'peak voltage {_fmt(e["voltage_peak_abs"], "V")}')
    tm = report['timing']
    for key, label in (('state', 'joint states'), ('state_receive', 'joint states'),
                       ('command', 'commands')):
        s = tm.get(key)
        if s and s.get('rate_hz') is not None:
            lines.append(f'{label} [{s["time_base"]}]: {s["count"]} msgs, '
                         f'{_fmt(s["rate_hz"], "Hz")}, jitter p50/p99/max '
                         f'{_fmt(s.get("jitter_p50_s"), "", 1e6)}/'
                         f'{_fmt(s.get("jitter_p99_s"), "", 1e6)}/'
                         f'{_fmt(s.get("jitter_max_s"), "µs", 1e6)}, gaps {s.get("gaps")}, '
                         f'dropped ticks {_drops(s)}')
    la = tm.get('latency')
    if la and la.get('latency_s'):
        d = la['latency_s']
        lines.append(f'state->command latency: p50 {_fmt(d["p50"], "ms", 1e3)}, p99 '
                     f'{_fmt(d["p99"], "ms", 1e3)}, max {_fmt(d["max"], "ms", 1e3)} '
                     f'({d["n"]} samples)')
    pw = report['power']
    if pw.get('available'):
        lines.append(f'power: peak {_fmt(pw["peak_w"], "W")}, work {_fmt(pw["work_j"], "J")} '
                     f'(over {pw["clock"]})')
    mo = report.get('model') or {}
    if mo.get('available'):
        lines.append(f'model: {mo["source"]} (cutoff {mo["filter"]["cutoff_hz"]:g} Hz); '
                     'residual RMS / effort RMS:')
        for name, e in mo['per_joint'].items():
            parts = [f'{k} {_fmt(e[k]["residual_rms"], "N·m")} '
                     f'({_pct(e[k]["residual_fraction"])})' for k in ('measured', 'command')
                     if e.get(k)]
            if parts:
                lines.append(f'  {name}: ' + ', '.join(parts))
        gf = mo.get('gravity_fit')
        if gf:
            lines.append(f'  best-fit gravity |g| {gf["magnitude"]:.3g} m/s^2 '
                         f'({", ".join(f"{x:.3g}" for x in gf["vector"])})')
    elif mo:
        lines.append(f'model: {"FAILED" if mo.get("failed") else "n/a"} ({mo.get("reason")})')
    ad = report.get('adaptation') or {}
    if ad.get('available'):
        moved = sorted(((abs(e['change_pct']), n, e['change_pct'])
                        for n, e in ad['per_parameter'].items() if e['change_pct']),
                       reverse=True)[:3]
        lines.append(f'adaptation ({ad["topic"]}, {ad["samples"]} samples, {ad["state"]}): '
                     f'excited {", ".join(ad["excited_final"]) or "none"}; largest change '
                     + (', '.join(f'{n} {c:+.3g} %' for _, n, c in moved) or 'none')
                     + f'; fallbacks {"n/a" if ad["fallbacks"] is None else ad["fallbacks"]}')
    elif ad.get('topic'):
        lines.append(f'adaptation: n/a ({ad["reason"]})')
    for note in report['notes']:
        lines.append(f'note: {note}')
    return '\n'.join(lines)


def _decimate(t: np.ndarray, y: np.ndarray, max_points: int = 2000):
    """Min/max envelope decimation for plotting long series."""
    n = len(t)
    if n <= max_points:
        return t, y
    k = int(math.ceil(n / (max_points // 2)))
    m = (n // k) * k
    tt = t[:m].reshape(-1, k)
    yy = y[:m].reshape(-1, k)
    with np.errstate(invalid='ignore'):
        lo = np.nanmin(yy, axis=1) if np.isfinite(yy).any() else yy[:, 0]
        hi = np.nanmax(yy, axis=1) if np.isfinite(yy).any() else yy[:, 0]
    ts = np.repeat(tt[:, 0], 2)
    ys = np.empty(2 * len(lo))
    ys[0::2], ys[1::2] = lo, hi
    return ts, ys


PLOT_DPI = 100
_COLORS = ((31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40))
_BLACK = (0, 0, 0)
#: Twelve distinguishable line colours (the four above first).
_PLOT_COLORS = _COLORS + ((148, 103, 189), (140, 86, 75), (227, 119, 194), (127, 127, 127),
                          (188, 189, 34), (23, 190, 207), (0, 0, 128), (128, 0, 0))
_GRAY = (120, 120, 120)
#: Figure margins [px at PLOT_DPI]: room for tick labels, axis labels and the title.
_MARGINS = {'left': 100, 'right': 25, 'bottom': 60, 'top': 50, 'hspace': 45, 'wspace': 100}


def _nice_ticks(lo: float, hi: float, target: int = 5) -> list[float]:
    """Return round tick values (1, 2, 2.5, 5 x 10^k steps) covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo] if math.isfinite(lo) else []
    raw = (hi - lo) / target
    mag = 10.0 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9)
    ticks = [k * step for k in range(first, int(math.floor(hi / step + 1e-9)) + 1)]
    return [0.0 if abs(t) < step * 1e-9 else t for t in ticks]


def _tick_text(values: list[float]) -> list[str]:
    """Format tick values with the decimals their spacing needs."""
    if len(values) < 2:
        return [f'{v:g}' for v in values]
    step = min(abs(b - a) for a, b in zip(values, values[1:]))
    big = max(abs(v) for v in values)
    if big >= 1e5 or (big and big < 1e-3):
        return [f'{v:.3g}' for v in values]
    decimals = max(0, -int(math.floor(math.log10(step) + 1e-9))) if step else 0
    if step and round(step * 10 ** decimals, 6) % 1:       # e.g. 2.5 steps
        decimals += 1
    return [f'{v:.{decimals}f}' for v in values]


class _Canvas:
    """
    A small PNG plotter on Pillow: panels with lines, histograms, ticks, labels, legends.

    Lines are drawn as per-pixel-column envelopes (first, min, max, last value of the samples
    falling in each column), so a million samples cost a few array reductions and one
    polyline; text uses Pillow's bundled FreeType font. About 10-30 ms per figure.
    """

    def __init__(self, width_in: float, height_in: float, title: str) -> None:
        from PIL import Image
        from PIL import ImageDraw
        from PIL import ImageFont
        self.w = int(round(width_in * PLOT_DPI))
        self.h = int(round(height_in * PLOT_DPI))
        self.img = Image.new('RGB', (self.w, self.h), (255, 255, 255))
        self.draw = ImageDraw.Draw(self.img)
        self.font = ImageFont.load_default(size=12)
        self.small = ImageFont.load_default(size=10)
        self.title_font = ImageFont.load_default(size=13)
        self._image = Image
        self._image_draw = ImageDraw
        self.draw.text((self.w / 2, 12), title, fill=_BLACK, font=self.title_font, anchor='ma')

    def grid(self, rows: int, cols: int) -> list[list[tuple[int, int, int, int]]]:
        """Return pixel boxes (x0, y0, x1, y1) of a rows x cols panel grid."""
        m = _MARGINS
        pw = (self.w - m['left'] - m['right'] - m['wspace'] * (cols - 1)) / cols
        ph = (self.h - m['top'] - m['bottom'] - m['hspace'] * (rows - 1)) / rows
        return [[(int(m['left'] + c * (pw + m['wspace'])), int(m['top'] + r * (ph + m['hspace'])),
                  int(m['left'] + c * (pw + m['wspace']) + pw),
                  int(m['top'] + r * (ph + m['hspace']) + ph)) for c in range(cols)]
                for r in range(rows)]

    def vtext(self, x: float, y: float, text: str) -> None:
        """Draw ``text`` rotated by 90 degrees, centred vertically on ``y``, right of ``x``."""
        box = self.font.getbbox(text)
        im = self._image.new('L', (box[2] + 2, box[3] + 4), 0)
        self._image_draw.Draw(im).text((1, 1), text, fill=255, font=self.font)
        im = im.rotate(90, expand=True)
        self.img.paste(_BLACK, (int(x), int(y - im.size[1] / 2)), im)

    def save(self, path: Path) -> None:
        """Write the PNG (PLOT_DPI recorded, fast compression)."""
        self.img.save(path, 'PNG', dpi=(PLOT_DPI, PLOT_DPI), compress_level=1)


class _Panel:
    """One axes of a :class:`_Canvas`: data limits, then lines / bars, then the frame."""

    def __init__(self, canvas: _Canvas, box: tuple[int, int, int, int], xlim: tuple,
                 ylim: tuple, log_y: bool = False) -> None:
        self.c = canvas
        self.box = box
        self.log_y = log_y
        x0, x1 = xlim
        if not x1 > x0:
            x0, x1 = x0 - 0.5, x0 + 0.5
        y0, y1 = ylim
        if not (math.isfinite(y0) and math.isfinite(y1)):
            y0, y1 = 0.0, 1.0
        if not y1 > y0:
            y0, y1 = y0 - max(abs(y0) * 0.05, 0.5), y0 + max(abs(y0) * 0.05, 0.5)
        else:
            pad = 0.05 * (y1 - y0)
            y0, y1 = (y0, y1 + pad * 2) if log_y else (y0 - pad, y1 + pad)
        self.xlim, self.ylim = (x0, x1), (y0, y1)
        self.legend: list[tuple[str, tuple]] = []

    def px(self, x: np.ndarray) -> np.ndarray:
        x0, y0, x1, _ = self.box
        return x0 + (np.asarray(x, float) - self.xlim[0]) / (self.xlim[1] - self.xlim[0]) * \
            (x1 - x0)

    def py(self, y: np.ndarray) -> np.ndarray:
        _, y0, _, y1 = self.box
        return y1 - (np.asarray(y, float) - self.ylim[0]) / (self.ylim[1] - self.ylim[0]) * \
            (y1 - y0)

    def line(self, x: np.ndarray, y: np.ndarray, color: tuple, label: str | None = None) -> None:
        """Draw y(x) (x ascending) as a per-pixel-column envelope; NaN samples break it."""
        x = np.asarray(x, float)
        y = np.asarray(y, float)
        ok = np.isfinite(x) & np.isfinite(y)
        if label:
            self.legend.append((label, color))
        if not ok.any():
            return
        if ok.all():
            runs: list = [slice(None)]
        else:
            idx = np.flatnonzero(ok)
            runs = np.split(idx, np.flatnonzero(np.diff(idx) > 1) + 1)
        for run in runs:
            cols = np.floor(self.px(x[run])).astype(np.int64)
            rows = self.py(y[run])
            starts = np.flatnonzero(np.r_[True, cols[1:] != cols[:-1]])
            ends = np.r_[starts[1:], len(cols)] - 1
            pts = np.empty((len(starts), 4, 2))
            pts[:, :, 0] = cols[starts, None]
            pts[:, 0, 1] = rows[starts]
            pts[:, 1, 1] = np.minimum.reduceat(rows, starts)
            pts[:, 2, 1] = np.maximum.reduceat(rows, starts)
            pts[:, 3, 1] = rows[ends]
            flat = pts.reshape(-1, 2)
            if len(flat) == 4 and (flat[:, 1] == flat[0, 1]).all():
                flat = flat[:1]
            if len(flat) == 1:
                self.c.draw.point((float(flat[0, 0]), float(flat[0, 1])), fill=color)
            else:
                self.c.draw.line(flat.ravel().tolist(), fill=color, width=1)

    def bars(self, counts: np.ndarray, edges: np.ndarray, color: tuple) -> None:
        """Draw one bar per non-empty bin (its height log10 of the count with log_y)."""
        bottom = self.py(self.ylim[0])
        for n, a, b in zip(counts.tolist(), edges[:-1].tolist(), edges[1:].tolist()):
            if n <= 0:
                continue
            top = self.py(math.log10(n) if self.log_y else n)
            xa, xb = self.px(a), self.px(b)
            self.c.draw.rectangle((float(xa), float(top), max(float(xb) - 1, float(xa)),
                                   float(bottom)), fill=color)

    def vline(self, x: float) -> None:
        """Draw a dotted vertical line at ``x``."""
        px = float(self.px(x))
        _, y0, _, y1 = self.box
        if self.box[0] <= px <= self.box[2]:
            for y in range(y0, y1, 4):
                self.c.draw.line((px, y, px, min(y + 1, y1)), fill=_BLACK)

    def finish(self, ylabel: str, xlabel: str | None, x_ticklabels: bool = True) -> None:
        """Frame, ticks, tick labels, axis labels and legend."""
        d, font = self.c.draw, self.c.font
        x0, y0, x1, y1 = self.box
        d.rectangle((x0, y0, x1, y1), outline=_BLACK)
        for t in _nice_ticks(*self.xlim):
            px = float(self.px(t))
            d.line((px, y1, px, y1 + 4), fill=_BLACK)
        if x_ticklabels:
            ticks = _nice_ticks(*self.xlim)
            for t, s in zip(ticks, _tick_text(ticks)):
                d.text((float(self.px(t)), y1 + 6), s, fill=_BLACK, font=font, anchor='ma')
        if self.log_y:
            yt = [float(k) for k in range(math.ceil(self.ylim[0]), math.floor(self.ylim[1]) + 1)]
            labels = [f'1e{int(k)}' if abs(k) > 3 else f'{10 ** k:g}' for k in yt]
        else:
            yt = _nice_ticks(*self.ylim)
            labels = _tick_text(yt)
        for t, s in zip(yt, labels):
            py = float(self.py(t))
            d.line((x0 - 4, py, x0, py), fill=_BLACK)
            d.text((x0 - 6, py), s, fill=_BLACK, font=font, anchor='rm')
        widest = max((font.getbbox(s)[2] for s in labels), default=0)
        self.c.vtext(max(2, x0 - 12 - widest - 16), (y0 + y1) / 2, ylabel)
        if xlabel:
            d.text(((x0 + x1) / 2, y1 + 24), xlabel, fill=_BLACK, font=font, anchor='ma')
        if self.legend:
            small = self.c.small
            wide = max(small.getbbox(s)[2] for s, _ in self.legend) + 34
            lx, ly = x1 - wide - 6, y0 + 6
            d.rectangle((lx, ly, x1 - 6, ly + 14 * len(self.legend) + 4), fill=(255, 255, 255),
                        outline=_GRAY)
            for k, (s, color) in enumerate(self.legend):
                yy = ly + 9 + 14 * k
                d.line((lx + 4, yy, lx + 24, yy), fill=color, width=2)
                d.text((lx + 28, yy), s, fill=_BLACK, font=small, anchor='lm')


def _limits(*arrays: np.ndarray) -> tuple[float, float]:
    vals = [np.asarray(a, float) for a in arrays if a is not None and np.size(a)]
    lo = min((float(np.nanmin(v)) for v in vals if np.isfinite(v).any()), default=math.nan)
    hi = max((float(np.nanmax(v)) for v in vals if np.isfinite(v).any()), default=math.nan)
    return lo, hi


def write_plots(run: RunData, report: dict, out_dir: Path) -> list[str]:
    """
    Write tracking, error, effort and timing PNGs; return their paths.

    Each figure carries the bag name in its title and axis labels with units, is drawn at
    ``PLOT_DPI`` with fixed margins that leave room for every label, and is rendered by a
    small Pillow plotter (:class:`_Canvas`): lines as per-pixel-column min/max envelopes,
    histograms as bars with log-scale counts. No matplotlib: its import and layout alone cost
    about 1 s of CPU, several times the whole analysis.
    """
    files: list[str] = []
    t = run.rel(run.state_t)
    nj = len(run.joints)
    rows = max(nj, 1)
    bag = Path(run.bag_info['path']).name or run.bag_info['path']
    height = 1.7 * rows + 1.1
    xlim = (float(t[0]), float(t[-1])) if t.size else (0.0, 1.0)

    def save(canvas, name):
        path = out_dir / name
        canvas.save(path)
        files.append(str(path))

    def panels(canvas, cols=1):
        return canvas.grid(rows, cols)

    title = (f'{bag}: joint position q and reference q_d' if run.q_d is not None
             else f'{bag}: joint position q (no reference in the bag)')
    cv = _Canvas(9.0, height, title)
    boxes = panels(cv)
    for j, name in enumerate(run.joints):
        qd = run.q_d[:, j] if run.q_d is not None else None
        p = _Panel(cv, boxes[j][0], xlim, _limits(run.state.position[:, j], qd))
        p.line(t, run.state.position[:, j], _COLORS[0], 'q')
        if qd is not None:
            p.line(t, qd, _COLORS[1], 'q_d')
        p.finish(f'{name} [rad]', 't [s]' if j == nj - 1 else None, j == nj - 1)
    save(cv, 'tracking.png')

    if run.error is not None:
        cv = _Canvas(9.0, height, f'{bag}: tracking error e = q - q_d (dotted: late window '
                                  'start)')
        boxes = panels(cv)
        for j, name in enumerate(run.joints):
            p = _Panel(cv, boxes[j][0], xlim, _limits(run.error[:, j]))
            p.line(t, run.error[:, j], _COLORS[0])
            p.vline(report['tracking']['late_window_start_s'])
            p.finish(f'e {name} [rad]', 't [s]' if j == nj - 1 else None, j == nj - 1)
        save(cv, 'error.png')

    has_motor = run.motor is not None and len(run.motor)
    all_zero = report['measured_effort'].get('all_zero')
    measured = np.isfinite(run.state.effort).any() and not all_zero
    if run.command_u is not None or measured or has_motor:
        ncol = 2 if has_motor else 1
        title = 'commanded and measured joint torque' + (', motor current' if has_motor
                                                         else '')
        if all_zero:
            title += ' (measured effort is zero throughout: not drawn)'
        cv = _Canvas(9.0 + 3.0 * (ncol - 1), height, f'{bag}: {title}')
        boxes = panels(cv, ncol)
        ct = run.rel(run.command_t) if run.command_u is not None else None
        for j, name in enumerate(run.joints):
            u = run.command_u[:, j] if run.command_u is not None else None
            tau = run.state.effort[:, j] if measured else None
            p = _Panel(cv, boxes[j][0], xlim, _limits(u, tau))
            if u is not None:
                order = np.argsort(ct, kind='stable')
                p.line(ct[order], u[order], _COLORS[0], 'u (command)')
            if tau is not None:
                p.line(t, tau, _COLORS[1], 'measured')
            last = j == nj - 1
            p.finish(f'{name} [N·m]', 't [s]' if last else None, last)
            if has_motor:
                cur = _cols(run.motor.names, run.joints, run.motor.position)[:, j]
                mt = run.rel(run.motor_t)
                order = np.argsort(mt, kind='stable')
                p = _Panel(cv, boxes[j][1], xlim, _limits(cur))
                p.line(mt[order], cur[order], _COLORS[0])
                p.finish(f'{name} current [A]', 't [s]' if last else None, last)
        save(cv, 'effort.png')

    ms = run.model_series
    if ms is not None:
        mj = ms['joints']
        rows_m = len(mj)
        cv = _Canvas(9.0, 1.7 * rows_m + 1.1,
                     f'{bag}: effort and inverse-dynamics model (filtered; transients left out)')
        boxes = cv.grid(rows_m, 1)
        tm = ms['t']
        kp = ms['keep']
        xl = (float(tm[kp][0]), float(tm[kp][-1])) if kp.any() else xlim
        for j, name in enumerate(mj):
            curves = [(ms['model'][:, j], _COLORS[2], 'model')]
            if 'measured' in ms:
                curves.insert(0, (ms['measured'][:, j], _COLORS[1], 'measured'))
            if 'command' in ms:
                c = np.where(ms['command_keep'], ms['command'][:, j], np.nan)
                curves.insert(0, (c, _COLORS[0], 'command'))
            shown = [np.where(kp, y, np.nan) for y, _, _ in curves]
            p = _Panel(cv, boxes[j][0], xl, _limits(*shown))
            for y, (_, color, label) in zip(shown, curves):
                p.line(tm, y, color, label)
            last = j == rows_m - 1
            p.finish(f'{name} [N·m]', 't [s]' if last else None, last)
        save(cv, 'model.png')

    ad, sec = run.adaptation, report.get('adaptation') or {}
    if ad is not None and sec.get('plotted'):
        cols = [ad['names'].index(n) for n in sec['plotted']]
        with np.errstate(divide='ignore', invalid='ignore'):
            ratio = ad['estimate'][:, cols] / ad['nominal'][:, cols]
        at = run.rel(ad['t_ns'])
        cv = _Canvas(9.0, 4.6, f'{bag}: adaptive estimates / nominal ({sec["plot_selection"]})')
        (box,), = cv.grid(1, 1)
        p = _Panel(cv, box, (min(xlim[0], float(at[0])), max(xlim[1], float(at[-1]))),
                   _limits(ratio, np.ones(1)))
        for k, name in enumerate(sec['plotted']):
            p.line(at, ratio[:, k], _PLOT_COLORS[k % len(_PLOT_COLORS)], name)
        p.finish('estimate / nominal', 't [s]')
        save(cv, 'adaptation.png')

    cv = _Canvas(10.0, 3.6, f'{bag}: loop timing')
    (b1, b2), = _Canvas.grid(cv, 1, 2)
    dt = np.diff(run.state_t) / 1e6
    lat = _latency_samples(run) if run.command is not None else None
    for box, values, xlabel in ((b1, dt, f'joint-state period [ms] ({run.time_base} time)'),
                                (b2, lat * 1e3 if lat is not None else np.zeros(0),
                                 'state-to-command latency [ms] (receive time)')):
        values = values[np.isfinite(values)]
        if values.size:
            lo, hi = float(values.min()), float(values.max())
            if hi <= lo:
                lo, hi = lo - 0.5 * max(abs(lo), 1e-3), hi + 0.5 * max(abs(hi), 1e-3)
            counts, edges = np.histogram(values, bins=100, range=(lo, hi))
            top = math.log10(max(int(counts.max()), 1))
            p = _Panel(cv, box, (lo, hi), (0.0, max(top, 1.0)), log_y=True)
            p.bars(counts, edges, _COLORS[0])
        else:
            p = _Panel(cv, box, (0.0, 1.0), (0.0, 1.0), log_y=True)
        p.finish('count (log scale)', xlabel)
    save(cv, 'timing.png')
    return files


def _latency_samples(run: RunData) -> np.ndarray | None:
    st, cmd = run.state, run.command
    if isinstance(cmd, JointStateSeries) and cmd.stamp_ns.any():
        order = np.argsort(st.stamp_ns, kind='stable')
        stamps = st.stamp_ns[order]
        pos = np.clip(np.searchsorted(stamps, cmd.stamp_ns), 0, max(len(stamps) - 1, 0))
        match = stamps[pos] == cmd.stamp_ns
        return (cmd.recv_ns[match] - st.recv_ns[order][pos[match]]) / 1e9
    c = cmd.recv_ns
    k = np.searchsorted(c, st.recv_ns, side='left')
    ok = k < len(c)
    nxt = np.append(st.recv_ns[1:], np.iinfo(np.int64).max)
    kk = np.clip(k, 0, len(c) - 1)
    ok &= c[kk] < nxt
    return (c[kk[ok]] - st.recv_ns[ok]) / 1e9


def write_csv(run: RunData, path: Path) -> int:
    """
    All series resampled onto the joint-state times; returns the number of rows.

    Columns: ``t`` [s since the first state], then per joint ``q``, ``qd``, ``tau`` (measured),
    ``q_d``, ``qd_d``, ``e``, ``u`` (command, zero-order hold), ``i``, ``v``, ``i_ref`` (motor,
    zero-order hold) when present. Reference values are matched by stamp or interpolated; gaps
    inside a series are held. Every joint state is a row: a column whose series has not
    started yet (e.g. commands before the first command) is left empty there.
    """
    t = run.rel(run.state_t)
    cols: list[tuple[str, np.ndarray]] = [('t', t)]
    st = run.state
    per_joint: list[tuple[str, np.ndarray]] = [('q', st.position), ('qd', st.velocity),
                                               ('tau', st.effort)]
    if run.q_d is None and run.ref_t is not None:
        run.q_d, _ = _align(run.ref_t, run.ref_q, run.state_t)
        run.qd_d, _ = _align(run.ref_t, run.ref_qd, run.state_t)
        run.error = st.position - run.q_d
    if run.q_d is not None:
        per_joint += [('q_d', run.q_d), ('qd_d', run.qd_d), ('e', run.error)]
    if run.command_u is not None and len(run.command_u):
        order = np.argsort(run.command_t, kind='stable')
        per_joint.append(('u', _zoh(run.command_t[order], run.command_u[order], run.state_t)))
    if run.motor is not None and len(run.motor):
        order = np.argsort(run.motor_t, kind='stable')
        mt = run.motor_t[order]
        for label, arr in (('i', run.motor.position), ('v', run.motor.velocity),
                           ('i_ref', run.motor.effort)):
            per_joint.append((label, _zoh(mt, _cols(run.motor.names, run.joints, arr)[order],
                                          run.state_t)))
    for label, arr in per_joint:
        for j, name in enumerate(run.joints):
            col = arr[:, j]
            if np.isfinite(col).any():
                cols.append((f'{label}_{name}', col))
    data = np.column_stack([c for _, c in cols])
    # hold the last finite value forward inside each column; empty before its first value
    finite = np.isfinite(data)
    idx = np.where(finite, np.arange(len(data))[:, None], -1)
    np.maximum.accumulate(idx, axis=0, out=idx)
    filled = np.take_along_axis(data, np.clip(idx, 0, None), axis=0)
    filled[idx < 0] = np.nan
    header = ','.join(name for name, _ in cols)
    with open(path, 'w', encoding='utf-8') as fh:
        fh.write(header + '\n')
        if len(filled):
            text = '\n'.join(','.join(row) for row in
                             np.char.mod('%.10g', filled).tolist())
            fh.write(text.replace('nan', '') + '\n')
    return int(len(filled))


def _json_clean(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _json_clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_clean(v) for v in obj]
    if isinstance(obj, (np.floating, float)):
        return _f(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    return obj


def write_report(run: RunData, report: dict, out_dir: Path, *, plots: bool = True,
                 csv: bool = False) -> dict[str, Any]:
    """Write report.json, report.md, PNG plots (and timeseries.csv) to ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    files: dict[str, Any] = {}
    plot_files = write_plots(run, report, out_dir) if plots else []
    if csv:
        csv_path = out_dir / 'timeseries.csv'
        files['csv_rows'] = write_csv(run, csv_path)
        files['csv'] = str(csv_path)
    files['plots'] = plot_files
    report['outputs'] = {'dir': str(out_dir), **files}
    (out_dir / 'report.json').write_text(json.dumps(_json_clean(report), indent=2) + '\n',
                                         encoding='utf-8')
    (out_dir / 'report.md').write_text(render_markdown(report, plot_files), encoding='utf-8')
    return files


def _writable(path: Path) -> bool:
    """
    Tell whether ``path`` (or its nearest existing parent) is writable by permission bits.

    Checks the mode bits as well as ``os.access`` so that a read-only fixture is left alone
    even when running as root.
    """
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        mode = probe.stat().st_mode
    except OSError:
        return False
    return os.access(probe, os.W_OK) and bool(mode & 0o222)


def default_out_dir(bag: Path) -> Path:
    """BAG/report for a bag directory, ``<file stem>_report`` beside a bare storage file."""
    return bag / 'report' if bag.is_dir() else bag.with_name(bag.stem + '_report')


# ---------------------------------------------------------------------------------------------
# CLI


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog='manip-analyze',
        description='Tracking, effort and loop-timing report of a recorded rosbag2 run.')
    p.add_argument('bag', help='bag directory or bare .db3 / .mcap file')
    p.add_argument('--out', metavar='DIR', help='report directory (default: BAG/report, or '
                   '<stem>_report beside a bare file)')
    p.add_argument('--json', action='store_true', help='print the JSON report to stdout')
    p.add_argument('--csv', action='store_true',
                   help='also write timeseries.csv (all topics on the joint-state times)')
    p.add_argument('--time', choices=('header', 'receive'), default='header',
                   help='time base: message header stamps (default) or bag receive times')
    for role in ROLES:
        p.add_argument(f'--{role.replace("_", "-")}', metavar='TOPIC', default=None,
                       help=f'{role.replace("_", " ")} topic (default: auto; "none" disables)')
    p.add_argument('--transient', type=float, metavar='S', default=None,
                   help='late window starts S seconds after the first state (default: '
                        'params.yaml late_window_start, else the final 50%%)')
    p.add_argument('--torque-limit', metavar='N·m', default=None,
                   help='command limit, one value or one per joint (comma separated); '
                        'default: params.yaml')
    p.add_argument('--rate', type=float, metavar='HZ', default=None,
                   help='nominal loop rate (default: params.yaml control_rate, else the '
                        'median period)')
    p.add_argument('--urdf', metavar='FILE', default=None,
                   help='arm model for the model section (.urdf or .xacro); default: the URDF '
                        'recorded on /robot_description, else the 2R plant of params.yaml')
    p.add_argument('--gravity', nargs=3, type=float, metavar=('X', 'Y', 'Z'), default=None,
                   help='gravity of a URDF model in its root frame [m/s^2] (default 0 0 -9.81)')
    p.add_argument('--cutoff', type=float, metavar='HZ', default=None,
                   help="zero-phase low-pass cutoff for the model section's derivatives "
                        '(default 10 Hz)')
    p.add_argument('--no-model', action='store_true', help='skip the model section')
    p.add_argument('--no-plots', action='store_true', help='skip the PNG plots')
    p.add_argument('--skip-corrupt', action='store_true',
                   help='analyse the rest when MCAP chunks fail their CRC (the report lists '
                        'what was left out); default: stop with an error naming the chunk')
    p.add_argument('--quiet', action='store_true', help='no progress output')
    return p


def main(argv: list[str] | None = None) -> int:
    """
    Entry point of ``manip-analyze``; returns the exit code (0 ok, 2 error).

    Run as the program (``argv`` None: the ``manip-analyze`` script, ``python -m``) the process
    ends here once the report files are written and closed and stdout / stderr are flushed:
    ``os._exit`` leaves out the interpreter's teardown (freeing every module and the arrays
    of a large bag), which has nothing left to write. Called with an argument list (tests,
    other code) it returns the code.
    """
    code = _run(argv)
    if argv is None:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (OSError, ValueError):     # closed or broken pipe: the normal exit reports it
            return code
        # Everything is done: the report files were written and closed by _run (write_text and
        # with-blocks), the bag reader closed, stdout / stderr flushed above.
        os._exit(code)
    return code


def _run(argv: list[str] | None) -> int:
    args = _parser().parse_args(argv)
    bag = Path(args.bag)
    overrides = {r: getattr(args, r) for r in ROLES if getattr(args, r) is not None}
    progress = _Progress(f'reading {bag.name}', enabled=not args.quiet)
    try:
        if not bag.exists():
            raise BagError(f'{bag}: no such file or directory')
        if args.rate is not None and not args.rate > 0:
            raise AnalysisError(f'--rate: must be > 0 (got {args.rate})')
        try:
            model = {'urdf': args.urdf, 'gravity': args.gravity, 'cutoff_hz': args.cutoff,
                     'enabled': not args.no_model}
            if args.no_model and (args.urdf or args.gravity):
                raise AnalysisError('--no-model: cannot be combined with --urdf / --gravity')
            report, run = analyze(bag, overrides=overrides, time_base=args.time,
                                  transient=args.transient, torque_limit=args.torque_limit,
                                  rate=args.rate, progress=progress,
                                  skip_corrupt=args.skip_corrupt, model=model)
        finally:
            progress.done()
        out_dir = Path(args.out) if args.out else default_out_dir(bag)
        written = True
        try:
            if not args.out and not _writable(out_dir):
                raise PermissionError(13, 'the bag location is read-only')
            write_report(run, report, out_dir, plots=not args.no_plots, csv=args.csv)
        except OSError as exc:
            if args.out:
                raise AnalysisError(f'cannot write the report to {out_dir}: '
                                    f'{exc.strerror or exc}') from None
            written = False
            print(f'warning: report not written to {out_dir} ({exc.strerror or exc}); '
                  'use --out DIR', file=sys.stderr)
        if args.json:
            print(json.dumps(_json_clean(report), indent=2))
        elif not args.out:
            print(render_summary(report))
            if written:
                print(f'report: {out_dir}')
        else:
            print(f'report: {out_dir}')
        return 0
    except (BagError, AnalysisError) as exc:
        print(f'error: {exc}', file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print('error: interrupted', file=sys.stderr)
        return 2
    except BrokenPipeError:          # the reader of stdout stopped (| head): not an error
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        except (OSError, ValueError):
            pass
        return 0
    except Exception as exc:  # noqa: BLE001 - the CLI contract is "never a traceback"
        if os.environ.get('MANIP_DEBUG'):
            raise
        print(f'error: unexpected failure analysing {bag}: {type(exc).__name__}: {exc} '
              '(set MANIP_DEBUG=1 for a traceback)', file=sys.stderr)
        return 2


if __name__ == '__main__':  # pragma: no cover
    sys.exit(main())
