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

"""The controller's parameter services in their helper process (``parameter_proxy``)."""

import os
from pathlib import Path
import signal
import socket
import time

import pytest

rclpy = pytest.importorskip('rclpy')

ROOT = Path(__file__).resolve().parents[1]


def test_a_helper_whose_node_is_gone_before_it_serves_ends_silently(procs):
    """
    A node refused at start-up (a bad parameter) closes the socket before the helper serves.

    The helper's ready message then met a closed socket, and its traceback followed the
    node's one-line refusal on the shared stderr.
    """
    import sys
    ours, theirs = socket.socketpair()
    p = procs.start('helper', [sys.executable, '-m', 'manip_control.nodes.parameter_proxy',
                               '--node', '/gone', '--fd', str(theirs.fileno())],
                    pass_fds=[theirs.fileno()])
    theirs.close()
    ours.close()
    assert procs.wait(p, 60) == 0, procs.output(p)
    assert procs.output(p) == ('', ''), procs.output(p)


def test_a_request_too_large_to_forward_is_refused_in_the_helper(ros_context):
    """A request within the entry bounds but above MAX_FORWARD_BYTES never reaches the node."""
    from manip_control.nodes.parameter_proxy import MAX_FORWARD_BYTES
    from manip_control.nodes.parameter_proxy import ParameterProxyNode
    from manip_control.nodes.parameter_proxy import SERVICES
    from rcl_interfaces.msg import Parameter
    from rcl_interfaces.msg import ParameterValue
    from rcl_interfaces.srv import SetParameters
    ours, theirs = socket.socketpair()
    node = ParameterProxyNode('/controller', theirs, context=ros_context)
    try:
        index = [name for name, _, _ in SERVICES].index('set_parameters')
        value = ParameterValue(type=9, string_array_value=['x' * 1000] * 300)
        reply = node._forward(index, SetParameters.Request(
            parameters=[Parameter(name='kp', value=value)]))
        assert len(reply.results) == 1 and not reply.results[0].successful
        assert f'(at most {MAX_FORWARD_BYTES})' in reply.results[0].reason, reply
        ours.setblocking(False)
        with pytest.raises(BlockingIOError):      # nothing was forwarded
            ours.recv(1)
    finally:
        node.destroy_node()
        ours.close()
        theirs.close()


def _children(pid: int) -> list:
    """Return the pids of ``pid``'s child processes (Linux /proc)."""
    found = []
    for task in Path(f'/proc/{pid}/task').iterdir():
        try:
            found += [int(c) for c in (task / 'children').read_text().split()]
        except OSError:
            continue
    return found


def _alive(pid: int) -> bool:
    """Return True while ``pid`` runs (a zombie counts as ended)."""
    try:
        return Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()[0] != 'Z'
    except OSError:
        return False


@pytest.mark.skipif(not Path('/proc/self/task').is_dir(), reason='needs Linux /proc')
@pytest.mark.parametrize('end', ['SIGINT', 'SIGKILL'])
def test_parameter_services_are_served_by_a_helper_that_ends_with_the_controller(
        procs, ros_domain_id, end):
    """
    The controller's parameter services live in its helper process, and answer as rclpy's.

    A client sees the services under the controller's name; a set and a refused set come back
    with the controller's own results, an oversized request with the refusal. The helper
    ends with the controller, when it exits and when it is killed.
    """
    from conftest import ThreadedProbe
    from rclpy.parameter import Parameter
    from rclpy.parameter_client import AsyncParameterClient
    ctrl = procs.node('controller', 'controller_node', '--params-file',
                      str(ROOT / 'config' / 'hardware_params.yaml'))
    probe = ThreadedProbe(ros_domain_id, 'param_probe', {})
    try:
        client = AsyncParameterClient(probe.node, 'controller')
        probe.wait_for(client.services_are_ready, 60.0, 'parameter services')
        probe.wait_for(lambda: {'controller', '_controller_parameters'}
                       <= set(probe.node.get_node_names()), 30.0, 'both nodes')
        helpers = [pid for pid in _children(ctrl.pid)
                   if b'parameter_proxy' in Path(f'/proc/{pid}/cmdline').read_bytes()]
        assert len(helpers) == 1, _children(ctrl.pid)
        own = probe.node.get_service_names_and_types_by_node('controller', '/')
        served = probe.node.get_service_names_and_types_by_node('_controller_parameters', '/')
        assert '/controller/set_parameters' in [n for n, _ in served], served
        assert '/controller/set_parameters' not in [n for n, _ in own], own
        assert '/controller/change_state' in [n for n, _ in own], own

        def set_param(name, value):
            return probe.call(lambda: client.set_parameters([Parameter(name, value=value)]),
                              f'set_parameters {name}').results[0]
        assert set_param('kp', [30.0, 20.0]).successful
        got = probe.call(lambda: client.get_parameters(['kp']), 'get kp').values[0]
        assert list(got.double_array_value) == [30.0, 20.0]
        refused = set_param('hard_limits.torque', [1.0, 1.0])
        assert not refused.successful and 'read-only' in refused.reason, refused
        big = [Parameter(f'p{i}', value=1.0) for i in range(2000)]
        reply = probe.call(lambda: client.set_parameters(big), 'set 2000').results
        assert len(reply) == 1 and 'at most 1024' in reply[0].reason, reply
    finally:
        probe.close()
    os.kill(ctrl.pid, getattr(signal, end))
    procs.wait(ctrl, 30)
    deadline = time.monotonic() + 10.0
    while _alive(helpers[0]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(helpers[0]), f'the helper outlived the controller ({end})'
    out, err = procs.output(ctrl)
    assert 'Traceback' not in out + err, out + err
