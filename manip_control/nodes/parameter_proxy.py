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
A node's parameter services, served by a helper process of their own.

rclpy turns a service request into Python objects while holding the interpreter lock, before
any callback can look at it: 7-10 ms for a ``list_parameters`` of 100 000 prefixes, 16-40 ms
for a ``set_parameters`` of 50 000 entries, during which no other thread of the process runs
Python, the controller's control thread included. So the controller serves its six parameter
services (``<node>/list_parameters``, ``get_parameters``, ``set_parameters``, ...) from this
helper process: it takes each request, refuses an oversized one at once
(:func:`~manip_control.nodes.common.request_refusal`; also more than
:data:`MAX_FORWARD_BYTES` serialized), and forwards the others over a socket to the node, which
answers them from its executor thread with rclpy's own parameter-service logic. A client
sees the same services, names and replies.

The helper (``python -m manip_control.nodes.parameter_proxy --node /ns/name --fd N``) is a
hidden node (``_<name>_parameters``, in the node's namespace); it ignores Ctrl-C and ends
when the socket closes: the node closed it, or its process died.
:class:`ProxiedParameterServices` starts it and answers it.
"""

from __future__ import annotations

import argparse
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

from manip_control.nodes.common import refused_response
from manip_control.nodes.common import release_context
from manip_control.nodes.common import request_refusal
from rcl_interfaces.srv import DescribeParameters
from rcl_interfaces.srv import GetParameters
from rcl_interfaces.srv import GetParameterTypes
from rcl_interfaces.srv import ListParameters
from rcl_interfaces.srv import SetParameters
from rcl_interfaces.srv import SetParametersAtomically
import rclpy
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter_service import ParameterService
from rclpy.qos import qos_profile_parameters
from rclpy.serialization import deserialize_message
from rclpy.serialization import serialize_message
from rclpy.signals import SignalHandlerOptions

#: The forwarded services: (name, type, rclpy ParameterService method that answers it).
SERVICES = (
    ('describe_parameters', DescribeParameters, '_describe_parameters_callback'),
    ('get_parameters', GetParameters, '_get_parameters_callback'),
    ('get_parameter_types', GetParameterTypes, '_get_parameter_types_callback'),
    ('list_parameters', ListParameters, '_list_parameters_callback'),
    ('set_parameters', SetParameters, '_set_parameters_callback'),
    ('set_parameters_atomically', SetParametersAtomically,
     '_set_parameters_atomically_callback'),
)
#: Largest serialized request forwarded to the node [bytes] (a parameter value can be a long
#: array: its conversion in the node would hold the interpreter lock as the storm did).
MAX_FORWARD_BYTES = 256 * 1024
#: Longest the helper waits for the node's answer [s]; then the client gets a refusal.
REPLY_TIMEOUT = 10.0
#: Longest the node waits for the helper to serve its services at start-up [s].
START_TIMEOUT = 30.0
#: Frame header on the socket: sequence number, service index, payload length [bytes].
_HEADER = struct.Struct('<IHI')
_READY = b'ready\n'


class ProxyError(RuntimeError):
    """The helper process could not be started or did not serve the services."""


def _send(sock: socket.socket, seq: int, index: int, payload: bytes) -> None:
    sock.sendall(_HEADER.pack(seq, index, len(payload)) + payload)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = sock.recv(left)
        if not chunk:
            raise EOFError('the other end closed the socket')
        chunks.append(chunk)
        left -= len(chunk)
    return b''.join(chunks)


def _recv(sock: socket.socket) -> tuple[int, int, bytes]:
    seq, index, size = _HEADER.unpack(_recv_exact(sock, _HEADER.size))
    if size > MAX_FORWARD_BYTES:
        raise EOFError(f'a frame of {size} bytes (at most {MAX_FORWARD_BYTES})')
    return seq, index, _recv_exact(sock, size)


class ProxiedParameterServices:
    """
    Start the helper process that serves ``node``'s parameter services, and answer it.

    ``node`` must be built with ``start_parameter_services=False``; the helper starts at once,
    and :meth:`wait_serving` waits for it (start-up work can go on meanwhile). Requests are
    answered in the node's executor thread (a task of ``node.executor``, held until the node
    is added to one), with rclpy's :class:`~rclpy.parameter_service.ParameterService` logic,
    so the replies are those of an in-process service.

    Raises
    ------
    ProxyError
        The helper process could not be started.

    """

    def __init__(self, node: Node):
        self._node = node
        # rclpy's answers without its services (those would take the requests here)
        self._logic = ParameterService.__new__(ParameterService)
        self._logic._node_weak_ref = lambda: self._node
        self._thread = None
        ours, theirs = socket.socketpair()
        try:
            self.process = subprocess.Popen(
                [sys.executable, '-m', 'manip_control.nodes.parameter_proxy',
                 '--node', node.get_fully_qualified_name(), '--fd', str(theirs.fileno())],
                pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
                # a terminal's Ctrl-C (the process group's) is the node's to act on: even
                # during the helper's imports it must not end the helper with a traceback
                start_new_session=True)
        except OSError as exc:
            ours.close()
            raise ProxyError(f'parameter services: cannot start their process ({exc})') \
                from exc
        finally:
            theirs.close()
        self._sock = ours
        self._send_lock = threading.Lock()

    def wait_serving(self, timeout: float = START_TIMEOUT) -> None:
        """
        Wait until the helper serves the services, then answer it (a thread of this process).

        Raises
        ------
        ProxyError
            The helper did not serve within ``timeout`` [s] (it is ended).

        """
        try:
            self._sock.settimeout(timeout)
            started = _recv_exact(self._sock, len(_READY)) == _READY
        except (OSError, EOFError):
            started = False
        if not started:
            self.close()
            raise ProxyError(f'parameter services: their process did not serve within '
                             f'{timeout:g} s')
        self._sock.settimeout(None)
        self._thread = threading.Thread(target=self._serve, name='parameter_link',
                                        daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        """Read the forwarded requests; each is answered by a task of the node's executor."""
        while True:
            try:
                seq, index, payload = _recv(self._sock)
            except (OSError, EOFError):
                return
            if index >= len(SERVICES):
                continue
            executor = self._node.executor
            while executor is None:         # not spun yet: answer once it is
                time.sleep(0.01)
                if self._sock.fileno() < 0:
                    return
                executor = self._node.executor
            executor.create_task(self._answer, seq, index, payload)

    def _answer(self, seq: int, index: int, payload: bytes) -> None:
        _, srv_type, method = SERVICES[index]
        try:
            request = deserialize_message(payload, srv_type.Request)
            reply = getattr(self._logic, method)(request, srv_type.Response())
        except Exception as exc:  # noqa: BLE001 - no request may end the node
            reply = refused_response(srv_type, f'request refused ({type(exc).__name__}: '
                                               f'{exc})')
        try:
            with self._send_lock:
                _send(self._sock, seq, index, serialize_message(reply))
        except OSError:
            pass                            # the helper is gone (the node is closing)

    def close(self, timeout: float = 2.0) -> None:
        """End the helper: close the socket (it exits), then wait ``timeout`` [s] or kill it."""
        if self._sock.fileno() < 0:
            return
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


# -- the helper process ------------------------------------------------------------------------
class ParameterProxyNode(Node):
    """The hidden node of the helper process: serves ``target``'s services, forwards them."""

    def __init__(self, target: str, sock: socket.socket, **kwargs):
        namespace, name = target.rsplit('/', 1)
        super().__init__(f'_{name}_parameters', namespace=namespace or '/',
                         start_parameter_services=False, **kwargs)
        self._sock = sock
        self._seq = 0
        for index, (service, srv_type, _) in enumerate(SERVICES):
            self.create_service(srv_type, f'{target}/{service}', self._forwarder(index),
                                qos_profile=qos_profile_parameters)

    def _forward(self, index: int, request):
        """Refuse ``request`` or forward it, and return the node's reply."""
        service, srv_type, _ = SERVICES[index]
        why = request_refusal(request)
        payload = b''
        if not why:
            payload = serialize_message(request)
            if len(payload) > MAX_FORWARD_BYTES:
                why = f'a request of {len(payload)} bytes (at most {MAX_FORWARD_BYTES}): refused'
        if why:
            self.get_logger().error(f'service {service}: {why}', throttle_duration_sec=1.0)
            return refused_response(srv_type, why)
        self._seq = (self._seq + 1) % 2**32
        try:
            _send(self._sock, self._seq, index, payload)
            deadline = time.monotonic() + REPLY_TIMEOUT
            while True:
                self._sock.settimeout(max(deadline - time.monotonic(), 1e-3))
                seq, _, reply = _recv(self._sock)
                if seq == self._seq:            # an older one came after its timeout
                    return deserialize_message(reply, srv_type.Response)
        except socket.timeout:
            why = f'the node did not answer within {REPLY_TIMEOUT:g} s'
        except (OSError, EOFError):
            why = 'the node is closing'
        self.get_logger().error(f'service {service}: {why}', throttle_duration_sec=1.0)
        return refused_response(srv_type, why)

    def _forwarder(self, index: int):
        service, srv_type, _ = SERVICES[index]

        def forward(request, response):
            try:
                return self._forward(index, request)
            except Exception as exc:  # noqa: BLE001 - no request may end the services
                why = f'request refused ({type(exc).__name__}: {exc})'
                self.get_logger().error(f'service {service}: {why}',
                                        throttle_duration_sec=1.0)
                return refused_response(srv_type, why)
        return forward


def main(args=None) -> int:
    """Serve ``--node``'s parameter services, forwarded over the socket ``--fd``."""
    parser = argparse.ArgumentParser(prog='parameter_proxy',
                                     description=__doc__.strip().split('\n')[0])
    parser.add_argument('--node', required=True, help='fully qualified node name')
    parser.add_argument('--fd', type=int, required=True, help='socket to the node')
    opts = parser.parse_args(args)
    signal.signal(signal.SIGINT, signal.SIG_IGN)    # a Ctrl-C sent to it: the node decides
    sock = socket.socket(fileno=opts.fd)
    rclpy.init(args=[], signal_handler_options=SignalHandlerOptions.NO)
    node = ParameterProxyNode(opts.node, sock)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    poller = select.poll()
    poller.register(sock, select.POLLRDHUP | select.POLLHUP | select.POLLERR)
    try:
        sock.sendall(_READY)
    except OSError:                     # the node is gone already
        poller = None
    while poller is not None and rclpy.ok() and not poller.poll(0):
        executor.spin_once(timeout_sec=0.1)
    # the participant leaves the graph now (announced), not at a lease's end: a client does
    # not call services that nobody serves any more
    executor.shutdown()
    node.destroy_node()
    release_context()
    return 0


if __name__ == '__main__':
    sys.exit(main())
