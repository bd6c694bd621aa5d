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

"""The judge of real-time runs: the steal share it reads and the runs it judges or skips."""

import conftest
import pytest


def _counters(user, system, idle, steal):
    # user nice system idle iowait irq softirq steal guest guest_nice [clock ticks]
    return [user, 0, system, idle, 0, 0, 0, steal, 5, 0]


def test_the_steal_share_is_steal_over_all_cpu_time(monkeypatch):
    readings = iter([_counters(100, 50, 1000, 10), _counters(160, 70, 1100, 30)])
    monkeypatch.setattr(conftest, 'cpu_times', lambda: next(readings))
    # 60 user + 20 system + 100 idle + 20 steal; guest time is inside user, not added
    assert conftest.StolenTime().share() == pytest.approx(20 / 200)


def test_the_host_counters_are_read():
    values = conftest.cpu_times()
    assert len(values) >= 8 and all(v >= 0 for v in values)
    assert 0.0 <= conftest.StolenTime().share() <= 1.0


@pytest.fixture
def no_wait(monkeypatch):
    waits = []
    monkeypatch.setattr(conftest, 'wait_for_no_steal', lambda: waits.append(1))
    return waits


def test_the_first_run_without_steal_is_judged(no_wait):
    steals = iter([0.05, 0.002, 0.0])
    runs = []

    def run():
        runs.append(1)
        return len(runs), next(steals)
    assert conftest.judge_real_time(run, 3, 'the arm') == 2
    assert len(runs) == 2 and len(no_wait) == 2


def test_every_run_starved_skips_saying_what_was_measured(no_wait):
    steals = iter([0.05, 0.2])
    with pytest.raises(pytest.skip.Exception, match=r'the arm: .* 5\.0 %, 20\.0 % .* 2 runs'):
        conftest.judge_real_time(lambda: (None, next(steals)), 2, 'the arm')


def test_a_failing_run_fails_whatever_its_steal(no_wait):
    def run():
        raise AssertionError('the last command was not zero')
    with pytest.raises(AssertionError, match='not zero'):
        conftest.judge_real_time(run, 3, 'the arm')


def test_host_stalls_are_those_overlapping_the_window(tmp_path):
    stalls = object.__new__(conftest.HostStalls)        # the logs without the probes
    stalls.logs = [tmp_path / 'cpu0.txt', tmp_path / 'cpu1.txt']
    stalls.logs[0].write_text('start 10.0\n10.500000 0.002000\n11.000000 0.004000\n')
    stalls.logs[1].write_text('start 10.0\n10.990000 0.015000\n')
    assert stalls.within(10.503, 10.9) == []            # ended before the window
    assert stalls.within(10.501, 10.9) == [(10.5, 0.002)]
    assert stalls.within(11.001, 11.002) == [(10.99, 0.015), (11.0, 0.004)]
    assert stalls.within(11.1, 12.0) == []


def test_the_stall_probe_logs_a_stop_of_its_process(procs, tmp_path):
    """SIGSTOP of a probe for 50 ms: its next wake-up is logged about 50 ms late."""
    import os
    import signal
    import time
    stalls = conftest.HostStalls(procs, tmp_path)
    time.sleep(0.3)
    probe = [p for p in procs.items if p.name == 'host_stall_probe0'][0]
    t0 = time.monotonic()
    os.kill(probe.pid, signal.SIGSTOP)
    time.sleep(0.05)
    os.kill(probe.pid, signal.SIGCONT)
    time.sleep(0.3)
    longest = max(length for _, length in stalls.within(t0, time.monotonic()))
    assert 0.045 <= longest <= 0.5, longest
