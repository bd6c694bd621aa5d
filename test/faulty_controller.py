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
The controller node with an injectable bug (a test helper, not a test module).

``python test/faulty_controller.py --ros-args ...`` runs
:func:`manip_control.nodes.controller_node.main` unchanged, except that after ``SIGUSR1``
every call of the feedback law (``ControllerNode.compute``) raises ``RuntimeError``: an
unexpected exception inside a control callback of the running process, as a bug would raise
it. The fault-injection tests check that it ends in a ramp to zero torque, not in a dead
process holding the last torque.

``FAULTY_HANG`` makes the process's DDS teardown hang (600 s, holding the interpreter lock,
as a native call does): ``teardown`` in rclpy's context shutdown (after ``close()``), ``exit``
in the interpreter's exit (an object released then, as the DDS participant is). The tests
check that a start error still exits 2, within ``EXIT_BOUND``.
"""

import ctypes
import os
import signal
import sys

from manip_control.nodes import controller_node
import rclpy

BROKEN = {'on': False}


def _broken_compute(original):
    def compute(self, st, ref):
        if BROKEN['on']:
            raise RuntimeError('injected fault in the feedback law')
        return original(self, st, ref)
    return compute


#: How long an injected hang lasts [s]
HANG = 600


def _hang(*args, **kwargs):
    ctypes.PyDLL(None).sleep(HANG)     # PyDLL: the interpreter lock stays held


class _HangsWhenReleased:

    def __del__(self):
        _hang()


def main() -> int:
    """Run the controller; SIGUSR1 breaks its feedback law; FAULTY_HANG hangs its teardown."""
    global _RELEASED_AT_EXIT
    signal.signal(signal.SIGUSR1, lambda signum, frame: BROKEN.update(on=True))
    hang = os.environ.get('FAULTY_HANG', '')
    if hang == 'teardown':
        rclpy.try_shutdown = _hang
    elif hang == 'exit':
        _RELEASED_AT_EXIT = _HangsWhenReleased()
    elif hang:
        raise SystemExit(f'FAULTY_HANG: teardown or exit (got {hang!r})')
    node_class = controller_node.ControllerNode
    node_class.compute = _broken_compute(node_class.compute)
    return controller_node.main(sys.argv)


if __name__ == '__main__':
    sys.exit(main())
