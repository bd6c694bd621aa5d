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
Tests of manip-analyze's adaptation section (the adaptive law's estimates in a bag).

A bag recorded by ``manip-sim --adapt`` (the controller's own messages, read back here with a
plain rosbags loop), a synthetic bag with known estimates, and bags without the topic.
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest import PYTHON
from manip_control import bag_analysis
from manip_control.bag_analysis import main
from manip_control.bag_io import BagWriter
import numpy as np
import pytest
from rosbags.rosbag2 import Reader
from rosbags.typesys import get_typestore
from rosbags.typesys import Stores
import yaml

TS = get_typestore(Stores.ROS2_JAZZY)
T = TS.types
JS, DA = 'sensor_msgs/msg/JointState', 'diagnostic_msgs/msg/DiagnosticArray'
NAMES = ['joint1', 'joint2']
T0 = 7 * 10**9                       # first joint state [ns]
PANDA = Path(__file__).resolve().parents[1] / '..' / 'shared' / 'fixtures' / 'urdf' / 'panda.urdf'


def _time(ns):
    return T['builtin_interfaces/msg/Time'](sec=int(ns) // 10**9, nanosec=int(ns) % 10**9)


def _header(ns):
    return T['std_msgs/msg/Header'](stamp=_time(ns), frame_id='')


def _js(ns):
    return bytes(TS.serialize_cdr(T[JS](
        header=_header(ns), name=NAMES, position=np.array([0.1, 0.2]),
        velocity=np.zeros(2), effort=np.array([1.0, 2.0])), JS))


def _status(name, values):
    return T['diagnostic_msgs/msg/DiagnosticStatus'](
        level=0, name=name, message='', hardware_id='controller',
        values=[T['diagnostic_msgs/msg/KeyValue'](key=k, value=v) for k, v in values.items()])


def _diag(ns, *statuses):
    return bytes(TS.serialize_cdr(T[DA](header=_header(ns), status=list(statuses)), DA))


def _write(path: Path, diag: dict[str, list[tuple[int, bytes]]]) -> Path:
    """Write 1 s of joint states at 1 kHz from T0 and the given DiagnosticArray topics."""
    with BagWriter(path) as w:
        w.add_topic('/joint_states', JS)
        for k in range(1000):
            w.write('/joint_states', T0 + k * 10**6, _js(T0 + k * 10**6))
        for topic, msgs in diag.items():
            w.add_topic(topic, DA)
            for recv, raw in msgs:
                w.write(topic, recv, raw)
    return path


def _report(bag: Path, out: Path, capsys) -> dict:
    assert main([str(bag), '--out', str(out), '--json', '--quiet']) == 0
    return json.loads(capsys.readouterr().out)


# 16 parameters: P0 has a zero nominal value, P1 never moves, P2..P15 move by up to 1..14 %
NOMINAL = [0.0, 2.0] + [0.5 * (k + 1) for k in range(2, 16)]
DEVIATION = [0.0, 0.0] + [0.01 * (k - 1) for k in range(2, 16)]
SHAPE = [0.0, 0.5, 1.0, 0.8, 0.6]     # of the deviation, per message: the largest is not last


def _estimate(i: int, k: int) -> float:
    return 0.01 * i if k == 0 else NOMINAL[k] * (1.0 + DEVIATION[k] * SHAPE[i])


def _values(i: int, reason: str = '', fallbacks: int = 0, garbage: bool = False) -> dict:
    v = {'adaptation': 'frozen' if i == 4 else 'adapting', 'adaptation.time_s': f'{0.1 * i:.3f}',
         'adaptation.excited': 'P2' if i == 4 else '',
         'adaptation.fallbacks': str(fallbacks), 'adaptation.fallback_reason': reason}
    for k in range(16):
        v[f'estimate.P{k}'] = 'garbage' if garbage and k == 3 else repr(_estimate(i, k))
        v[f'nominal.P{k}'] = repr(NOMINAL[k])
        v[f'excited.P{k}'] = 'true' if (i == 4 and k == 2) else 'false'
        v[f'unit.P{k}'] = 'kg m^2'
    return v


@pytest.fixture(scope='module')
def synthetic(tmp_path_factory):
    """Five adaptation messages (two stored out of stamp order) and one without estimates."""
    stamp = [T0 + 100_000_000 * (i + 1) for i in range(5)]
    other = _status('controller: safety', {'mode': 'normal'})
    msgs = [(stamp[0] + 1000, _diag(stamp[0], _status('controller: adaptation', _values(0)))),
            (stamp[1] + 1000, _diag(stamp[1], other, _status(
                'controller: adaptation', _values(1, garbage=True)))),
            (stamp[1] + 2000, _diag(stamp[1] + 50_000_000, other)),
            (stamp[2] + 1000, _diag(stamp[2], _status(
                'controller: adaptation', _values(2, 'refused: M^ not positive definite', 1)))),
            # the last stamp stored before the one before it: the analysis orders by stamp
            (stamp[3] + 1000, _diag(stamp[4], _status('controller: adaptation',
                                                      _values(4, '', 1)))),
            (stamp[3] + 2000, _diag(stamp[3], _status('controller: adaptation',
                                                      _values(3, '', 1))))]
    return _write(tmp_path_factory.mktemp('adapt') / 'synthetic', {'/controller/adaptation': msgs})


def test_synthetic_estimates_table_and_plot_selection(synthetic, tmp_path, capsys):
    ad = _report(synthetic, tmp_path / 'rep', capsys)['adaptation']
    assert ad['available'] and ad['topic'] == '/controller/adaptation'
    assert ad['samples'] == 5 and ad['skipped_messages'] == 1 and ad['bad_values'] == 1
    assert ad['names'] == [f'P{k}' for k in range(16)]
    assert ad['start_s'] == pytest.approx(0.1) and ad['end_s'] == pytest.approx(0.5)
    assert ad['state'] == 'frozen' and ad['law_time_s'] == pytest.approx(0.4)
    for k, name in enumerate(ad['names']):
        e = ad['per_parameter'][name]
        assert e['nominal'] == NOMINAL[k] and e['unit'] == 'kg m^2'
        assert e['first_estimate'] == _estimate(0, k)
        assert e['final_estimate'] == _estimate(4, k)          # the last by stamp
        if k == 0:
            assert e['change_pct'] is None                      # zero nominal: no ratio
        else:
            assert e['change_pct'] == pytest.approx(100 * DEVIATION[k] * SHAPE[4], abs=1e-9)
        assert e['excited'] == (k == 2)
    assert ad['excited_final'] == ['P2']
    assert ad['fallbacks'] == 1
    assert ad['last_fallback_reason'] == 'refused: M^ not positive definite'
    assert ad['last_fallback_s'] == pytest.approx(0.3)
    # the 12 that moved most (largest |estimate / nominal - 1| over the run), largest first
    assert ad['plotted'] == [f'P{k}' for k in range(15, 3, -1)]
    assert 'the 12 that moved most of the 14 that moved' in ad['plot_selection']
    assert 'nominal model' in ad['nominal_source']

    assert main([str(synthetic), '--out', str(tmp_path / 'md'), '--quiet']) == 0
    md = (tmp_path / 'md' / 'report.md').read_text()
    section = md.split('## Adaptation', 1)[1].split('## Plots', 1)[0]
    assert '| P0 | kg m^2 | 0 | 0 | 0.04 | n/a | no |' in section
    assert '| P2 | kg m^2 | 1.5 | 1.5 | 1.509 | 0.6 | yes |' in section
    assert 'Fallbacks: 1; the last reason (at 0.300 s): refused: M^ not positive' in section
    assert '![adaptation](adaptation.png)' in md
    png = tmp_path / 'md' / 'adaptation.png'
    assert png.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'

    capsys.readouterr()
    assert main([str(synthetic), '--quiet', '--no-plots']) == 0
    summary = capsys.readouterr().out
    line = next(x for x in summary.splitlines() if x.startswith('adaptation ('))
    assert line == ('adaptation (/controller/adaptation, 5 samples, frozen): excited P2; '
                    'largest change P15 +8.4 %, P14 +7.8 %, P13 +7.2 %; fallbacks 1')


def test_bag_without_the_adaptation_topic(tmp_path, capsys):
    # a controller's diagnostics carry adaptation.* keys but no estimates: not the topic
    diag = [(T0 + 10**8, _diag(T0 + 10**8, _status('controller', {
        'adaptation': 'adapting', 'adaptation.fallbacks': '0'})))]
    bag = _write(tmp_path / 'plain', {'/controller/diagnostics': diag})
    rep = _report(bag, tmp_path / 'rep', capsys)
    assert rep['adaptation']['available'] is False
    assert 'no diagnostic_msgs/msg/DiagnosticArray topic named like adaptation' in \
        rep['adaptation']['reason']
    assert not any('ADAPTATION' in n for n in rep['notes'])
    assert main([str(bag), '--out', str(tmp_path / 'md'), '--quiet']) == 0
    assert '## Adaptation' not in (tmp_path / 'md' / 'report.md').read_text()
    assert not (tmp_path / 'md' / 'adaptation.png').exists()
    assert (tmp_path / 'md' / 'tracking.png').exists()
    capsys.readouterr()
    assert main([str(bag), '--quiet', '--no-plots']) == 0
    assert 'adaptation' not in capsys.readouterr().out


def test_adaptation_topic_without_estimates_says_so(tmp_path, capsys):
    msgs = [(T0 + 10**8, _diag(T0 + 10**8, _status('controller: adaptation', {'x': '1'})))]
    bag = _write(tmp_path / 'empty', {'/controller/adaptation': msgs})
    rep = _report(bag, tmp_path / 'rep', capsys)
    assert rep['adaptation'] == {'available': False, 'topic': '/controller/adaptation',
                                 'reason': '/controller/adaptation: no message with '
                                           'estimate.* values'}
    assert main([str(bag), '--out', str(tmp_path / 'md'), '--quiet']) == 0
    md = (tmp_path / 'md' / 'report.md').read_text()
    assert '## Adaptation\n\nNot available: /controller/adaptation: no message with' in md


def _plain_messages(bag: Path, topic: str) -> list:
    """Decode ``topic`` with a plain rosbags loop: [(header stamp ns, {key: value})]."""
    out = []
    with Reader(bag) as reader:
        conns = [c for c in reader.connections if c.topic == topic]
        for conn, _, raw in reader.messages(connections=conns):
            msg = TS.deserialize_cdr(raw, conn.msgtype)
            st = next(s for s in msg.status if s.name.endswith(': adaptation'))
            stamp = msg.header.stamp.sec * 10**9 + msg.header.stamp.nanosec
            out.append((stamp, {kv.key: kv.value for kv in st.values}))
    return sorted(out, key=lambda m: m[0])


def test_manip_sim_adapt_bag_report(procs, tmp_path, capsys):
    """``manip-sim --adapt --bag``: the report's estimates are the recorded messages' values."""
    pytest.importorskip('rclpy')
    bag = tmp_path / 'adapt'
    p = procs.start('sim_adapt', [PYTHON, '-m', 'manip_control.nodes.sim', '--quiet', '--adapt',
                                  '--duration', '2.0', '--bag', str(bag)])
    assert procs.wait(p, 240) == 0, procs.output(p)
    msgs = _plain_messages(bag, '/controller/adaptation')
    # on a wall-clock timer: how many depends on the host's speed
    assert len(msgs) >= 2, len(msgs)
    first, last = msgs[0][1], msgs[-1][1]
    names = [k[len('estimate.'):] for k in last if k.startswith('estimate.')]
    assert 'G1' in names and 'G2' in names

    rep = _report(bag, tmp_path / 'rep', capsys)
    ad = rep['adaptation']
    assert ad['available'] and ad['samples'] == len(msgs) and ad['names'] == names
    for name in names:
        e = ad['per_parameter'][name]
        assert e['final_estimate'] == float(last[f'estimate.{name}'])
        assert e['first_estimate'] == float(first[f'estimate.{name}'])
        assert e['nominal'] == float(last[f'nominal.{name}'])
        assert e['unit'] == last[f'unit.{name}']
        assert e['excited'] == (last[f'excited.{name}'] == 'true')
    assert ad['fallbacks'] == int(last['adaptation.fallbacks'])
    assert ad['law_time_s'] == float(last['adaptation.time_s'])
    moved = [n for n in names if float(last[f'estimate.{n}']) != float(last[f'nominal.{n}'])]
    assert moved and set(ad['plotted']) <= set(names) and set(moved) <= set(ad['plotted'])
    png = tmp_path / 'rep' / 'adaptation.png'
    assert png.stat().st_size > 1000 and str(png) in rep['outputs']['plots']
    md = (tmp_path / 'rep' / 'report.md').read_text()
    assert '## Adaptation' in md and '| G1 | N m |' in md


def test_a_failing_adaptation_section_leaves_the_report_standing(synthetic, tmp_path, capsys,
                                                                 monkeypatch):
    def broken(*_):
        raise ValueError('bad message')
    monkeypatch.setattr(bag_analysis, '_adaptation_series', broken)
    rep = _report(synthetic, tmp_path / 'rep', capsys)
    assert rep['adaptation']['available'] is False and rep['adaptation']['failed']
    assert ('ADAPTATION SECTION FAILED: /controller/adaptation could not be read: ValueError: '
            'bad message (the other sections stand)') in rep['notes']
    assert rep['joints'] == NAMES and rep['timing']['state']['count'] == 1000


def test_manip_sim_urdf_adapt_nominal_values_against_the_urdf(procs, tmp_path, capsys):
    """
    A Panda run: the published nominal values are the URDF's base parameters plus the drives.

    The controller's nominal model adds its ``nominal.rotor_inertia`` (the sized drives'
    reflected rotor inertia, in ros_params.yaml) to the URDF's armature: exactly the
    parameters that differ, each by that inertia; every other one agrees with the URDF.
    """
    pytest.importorskip('rclpy')
    bag = tmp_path / 'panda'
    p = procs.start('sim_panda', [PYTHON, '-m', 'manip_control.nodes.sim', '--quiet', '--adapt',
                                  '--urdf', str(PANDA), '--duration', '0.3', '--bag', str(bag)])
    assert procs.wait(p, 240) == 0, procs.output(p)
    rotor = yaml.safe_load((bag / 'ros_params.yaml').read_text())
    rotor = next(v['ros__parameters']['nominal.rotor_inertia'] for k, v in rotor.items()
                 if k.endswith('controller'))
    assert len(set(rotor)) == 1 and rotor[0] > 0
    ad = _report(bag, tmp_path / 'rep', capsys)['adaptation']
    uc = ad['urdf_check']
    assert uc['available'] and 'robot_description in ros_params.yaml' in uc['source']
    assert uc['compared'] == len(ad['names']) and uc['not_in_urdf'] == []
    assert uc['differ'] and all(n.endswith('.Ia') or n.endswith('.Izz') for n in uc['differ'])
    for name in uc['differ']:
        e = ad['per_parameter'][name]
        assert e['nominal'] - e['urdf'] == pytest.approx(rotor[0], rel=1e-8), name
    md = (tmp_path / 'rep' / 'report.md').read_text()
    assert (f'{uc["compared"] - len(uc["differ"])} of {uc["compared"]} agree within 1e-06 '
            'relative') in md
    # --no-model leaves the URDF alone
    assert main([str(bag), '--out', str(tmp_path / 'nm'), '--no-model', '--quiet']) == 0
    assert 'urdf_check' not in json.loads((tmp_path / 'nm' / 'report.json').read_text())[
        'adaptation']


def test_urdf_check_with_no_names_in_common(synthetic):
    # (the CLI's model section refuses this URDF first: its joints are not in the bag)
    run = bag_analysis.load_run(synthetic)
    uc = bag_analysis.adaptation_section(run, urdf=str(PANDA))['urdf_check']
    assert uc['available'] is False and uc['source'] == f'--urdf {PANDA}'
    assert uc['reason'].startswith('no parameter name in common')
