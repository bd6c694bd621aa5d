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
Plumbing shared by the nodes: executor, main() wrapper, QoS, guarded callbacks, clocks.

Executor
--------
:func:`make_executor` returns ``rclpy.experimental.EventsExecutor`` (C++ event queue; in a
ping-pong of two JointState topics on this machine it measured about 50 us per round trip
against about 350 us for ``SingleThreadedExecutor``, see docs/ros.md) and falls back to the
``SingleThreadedExecutor`` where the events executor is not available. ``MANIP_EXECUTOR=single``
forces the single-threaded one.

"""

from __future__ import annotations

import atexit
import ctypes
import faulthandler
import functools
import gc
import os
import signal
import sys
import tempfile
import threading
import time
import traceback

from manip_control.nodes.ros_params import check_params_files
from manip_control.parameters import ParameterError

EXECUTORS = ('events', 'single')


def make_executor(kind: str | None = None, context=None):
    """Return an rclpy executor: ``'events'`` (default) or ``'single'``."""
    kind = kind or os.environ.get('MANIP_EXECUTOR', 'events')
    if kind not in EXECUTORS:
        raise ValueError(f'executor: must be one of {", ".join(EXECUTORS)} (got {kind!r})')
    if kind == 'events':
        try:
            from rclpy.experimental import EventsExecutor
            return EventsExecutor(context=context)
        except ImportError:  # pragma: no cover - older rclpy
            pass
    from rclpy.executors import SingleThreadedExecutor
    return SingleThreadedExecutor(context=context)


#: Slice of one blocking executor call [s] (see :func:`spin_until`).
SPIN_SLICE = 0.1


def spin_until(executor, future=None, context=None) -> None:
    """
    Spin until ``future`` is done or the context shuts down (Ctrl-C, SIGTERM).

    Always spins in slices of :data:`SPIN_SLICE`: with the rclpy 7.1 EventsExecutor,
    ``spin()`` and ``spin_until_future_complete`` without a timeout neither fire timers nor
    return on a signal (measured here); with a timeout both work.

    Ctrl-C / SIGTERM (with :func:`init_keeping_context_on_signals`) only flag the stop while
    this loop spins, so no callback is interrupted half-way; the signal watcher thread
    (:func:`_watch_stop_signals`) ends the spin at once, which raises KeyboardInterrupt here,
    outside every callback. A busy executor (the
    lockstep loop of manip-sim always has work queued) does not return at the end of a slice
    (measured: it ran on for the whole run), so a steady timer of the first node completes
    the awaited future once a stop is flagged.
    """
    import rclpy
    from rclpy.task import Future
    if future is None:
        future = Future()
    wait = Future()
    future.add_done_callback(lambda _: wait.done() or wait.set_result(True))

    def on_stop_check():
        if _STOP['requested'] and not wait.done():
            wait.set_result(False)
    signalled = []

    def wake():                         # the signal watcher thread: end the spin now
        signalled.append(True)
        if not wait.done():
            wait.set_result(False)
        executor.wake()
    nodes = executor.get_nodes()
    timer = nodes[0].create_timer(SPIN_SLICE, on_stop_check, clock=steady_clock()) \
        if nodes else None
    _STOP['spinning'] = True
    _STOP['wake'] = wake
    try:
        while not wait.done() and rclpy.ok(context=context) and not _STOP['requested']:
            try:
                executor.spin_until_future_complete(wait, timeout_sec=SPIN_SLICE)
            except (KeyboardInterrupt, SystemExit):
                raise
            except Exception as exc:  # noqa: BLE001 - a callback's error must not end a node
                from rclpy.executors import ExternalShutdownException
                if isinstance(exc, ExternalShutdownException) or not rclpy.ok(context=context):
                    raise
                for node in nodes:
                    callback_failed(node, 'executor', exc)
    finally:
        with _WAKE_LOCK:                # waits for a wake() under way (see _wake_the_spin)
            _STOP['wake'] = None
        _STOP['spinning'] = False
        if timer is not None:
            retire(nodes[0], timer)
    if signalled:                       # whether or not the Python handler has run yet
        _STOP['requested'] = True
    if _STOP['requested'] and not future.done():
        raise KeyboardInterrupt


#: History of the publishers of the recorded data topics [samples]: what a reliable reader
#: that the host did not run for a while can still get resent. 2 s at 1 kHz, 0.5 s at the
#: 4 kHz a lockstep loop can reach: with 100, a standalone recorder stopped for 140 ms lost
#: ticks. Readers bound their own backlog (their depth), so no reader acts on more old data.
PUBLISH_DEPTH = 2000
#: Longest a node waits at exit for its reliable readers to acknowledge what it published,
#: over all its publishers together [s] (:func:`wait_acknowledged`): a recorder behind on a
#: loaded host then still gets the run's last messages; below launch's SIGTERM timeout (5 s).
EXIT_ACK_WAIT = 4.0


def wait_acknowledged(publishers, total: float) -> list:
    """
    Wait until every reader acknowledged each publisher's messages, ``total`` [s] for all.

    A reliable writer that is destroyed (process exit) drops what its readers have not
    acknowledged. ``publishers`` may hold None. Returns the topics still not acknowledged at
    the deadline (a stopped or dead reader), in order; a publisher whose context is gone is
    skipped.
    """
    from rclpy.duration import Duration
    deadline = time.monotonic() + total
    late = []
    for pub in publishers:
        if pub is None:
            continue
        left = max(0.0, deadline - time.monotonic())
        try:
            if not pub.wait_for_all_acked(Duration(seconds=left)):
                late.append(pub.topic_name)
        except Exception:  # noqa: BLE001 - context already gone
            pass
    return late


def data_qos(depth: int = 100):
    """
    Return the QoS of the data topics: reliable, volatile, keep last ``depth``.

    Reliable so that lockstep and the recorder lose nothing. A subscription keeps ``depth``
    samples; a publisher of a recorded topic keeps :data:`PUBLISH_DEPTH`, the samples that a
    reader which was not run for a while (a bag recorder on a loaded host) can still get
    resent, without blocking the publisher.
    """
    from rclpy.qos import DurabilityPolicy
    from rclpy.qos import HistoryPolicy
    from rclpy.qos import QoSProfile
    from rclpy.qos import ReliabilityPolicy
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=depth,
                      reliability=ReliabilityPolicy.RELIABLE,
                      durability=DurabilityPolicy.VOLATILE)


def steady_clock():
    """Return a steady (monotonic) rclpy clock for wall-time timers (not following /clock)."""
    from rclpy.clock import Clock
    from rclpy.clock import ClockType
    return Clock(clock_type=ClockType.STEADY_TIME)


def retire(node, entity) -> None:
    """
    Destroy a timer or subscription of ``node`` while an executor may spin; keep the object.

    rclpy's events executor (Jazzy) holds a plain pointer to the Python object in a callback it
    queued before it saw the removal, and may still run that callback: kept alive for the
    node's life, the object is destroyed but never freed under it.
    """
    if entity is None:
        return
    retired = getattr(node, '_retired_entities', None)
    if retired is None:
        retired = node._retired_entities = []
    retired.append(entity)
    from rclpy.timer import Timer
    if isinstance(entity, Timer):
        node.destroy_timer(entity)
    else:
        node.destroy_subscription(entity)


def guarded(method):
    """
    Decorate a callback so that an unexpected exception is logged, counted, never raised.

    Bad input is handled explicitly by each callback; this is the last line of defence that
    keeps a node alive (``No node may ever crash on bad input``).
    """
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - a callback must never kill the node
            callback_failed(self, method.__name__, exc)
            return None
    return wrapper


def callback_failed(node, where: str, exc: BaseException) -> None:
    """
    Count and log an unexpected exception of a callback; tell the node (``on_callback_error``).

    The controller's hook ramps its torque to zero (an unexpected error means its state can
    no longer be trusted); other nodes only count and log. Never raises.
    """
    node.callback_errors = getattr(node, 'callback_errors', 0) + 1
    try:
        node.get_logger().error(
            f'{where}: unexpected {type(exc).__name__}: {exc}\n'
            + ''.join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=4)),
            throttle_duration_sec=1.0)
    except Exception:  # noqa: BLE001 - logging during shutdown
        pass
    hook = getattr(node, 'on_callback_error', None)
    if hook is not None:
        try:
            hook(where, exc)
        except Exception:  # noqa: BLE001 - the hook is the last line of defence itself
            pass


#: Most entries of one parameter-service request (names, prefixes, parameters): a request
#: costs time per entry (``list_parameters`` matches every parameter against every prefix;
#: ``set_parameters`` runs the checks once per entry), so a larger one is refused before any
#: of that work. The largest node declares a few hundred parameters (``ros2 param dump``
#: asks for all of them at once).
MAX_REQUEST_ENTRIES = 1024
#: Most characters of all the names or prefixes of one parameter-service request.
MAX_REQUEST_CHARS = 65536


def request_refusal(request) -> str:
    """
    Return why a parameter-service request is too large ('' when it is not).

    Checks the entry count (:data:`MAX_REQUEST_ENTRIES`) and the total length of the names
    or prefixes (:data:`MAX_REQUEST_CHARS`) of ``list_parameters`` (``prefixes``),
    ``get_parameters`` / ``describe_parameters`` / ``get_parameter_types`` (``names``) and
    ``set_parameters`` / ``set_parameters_atomically`` (``parameters``); other requests pass.
    """
    for field in ('prefixes', 'names', 'parameters'):
        items = getattr(request, field, None)
        if items is None:
            continue
        n = len(items)
        if n > MAX_REQUEST_ENTRIES:
            return (f'{n} {field} in one request (at most {MAX_REQUEST_ENTRIES}): refused '
                    f'unread')
        chars = sum(len(getattr(v, 'name', v)) for v in items)
        if chars > MAX_REQUEST_CHARS:
            return (f'{field} of {chars} characters in one request (at most '
                    f'{MAX_REQUEST_CHARS}): refused unread')
    return ''


def refused_response(srv_type, reason: str):
    """Return the reply of a refused request: empty, or ``successful: false`` and ``reason``."""
    reply = srv_type.Response()
    if hasattr(reply, 'results'):               # set_parameters: one result says why
        from rcl_interfaces.msg import SetParametersResult
        reply.results = [SetParametersResult(successful=False, reason=reason)]
    elif hasattr(reply, 'result') and hasattr(reply.result, 'successful'):
        reply.result.successful = False         # set_parameters_atomically
        reply.result.reason = reason
    if hasattr(reply, 'success'):
        reply.success = False
    return reply


def _guard_service(node, srv) -> None:
    """
    Wrap one service callback: an exception answers a default (``success: false``) reply.

    A parameter request larger than :func:`request_refusal` allows is answered at once,
    refused with the reason (logged once a second; ``set_parameters``: in the result).
    """
    callback = srv.callback
    if getattr(callback, '_manip_guarded', False):
        return
    name = srv.srv_name

    def safe(request, response):
        try:
            why = request_refusal(request)
            if why:
                node.refused_requests = getattr(node, 'refused_requests', 0) + 1
                node.get_logger().error(f'service {name}: {why}', throttle_duration_sec=1.0)
                return refused_response(srv.srv_type, why)
            return callback(request, response)
        except Exception as exc:  # noqa: BLE001 - no request may end a node
            node.service_errors = getattr(node, 'service_errors', 0) + 1
            try:
                node.get_logger().error(
                    f'service {name}: request refused ({type(exc).__name__}: '
                    f'{str(exc).strip().splitlines()[0] if str(exc).strip() else ""})',
                    throttle_duration_sec=1.0)
            except Exception:  # noqa: BLE001
                pass
            reply = srv.srv_type.Response()
            if hasattr(reply, 'success'):
                reply.success = False
            return reply
    safe._manip_guarded = True
    srv.callback = safe


def guard_services(node) -> int:
    """
    Make every service of ``node`` answer instead of raising; return how many were wrapped.

    Covers the services rclpy creates itself (parameters, lifecycle ``change_state`` etc.):
    rclpy 7.1 raises ``RCLError`` out of the executor for a lifecycle transition that is not
    valid in the current state (e.g. ``configure`` while active), which ended the process.
    Such a request is now answered ``success: false`` with one log line and changes nothing.
    """
    n = 0
    for srv in list(node.services):
        _guard_service(node, srv)
        n += 1
    return n


#: SCHED_FIFO priority of the executor thread of a process whose loop runs in a real-time
#: thread: it shares the interpreter lock with that loop, and descheduled by a normal process
#: while holding it, it would hold the loop too; at the lowest real-time priority it is not,
#: and the loop's thread still preempts it.
EXECUTOR_PRIORITY = 1
#: Interpreter switch interval while a real-time loop runs [s] (the default is 5 ms): a
#: thread waiting for the interpreter lock gets it this soon.
SWITCH_INTERVAL = 2e-4


def set_thread_realtime(priority: int, thread_id: int = 0) -> str:
    """
    Run a thread with ``SCHED_FIFO`` at ``priority`` (1-99; 0: leave it).

    ``thread_id``: the thread's native id; 0, the calling thread (Linux applies
    ``sched_setscheduler`` to a thread). Returns '' when done (or nothing asked), else why
    the OS refused it (the thread keeps its normal scheduling).
    """
    if priority <= 0:
        return ''
    try:
        os.sched_setscheduler(int(thread_id), os.SCHED_FIFO, os.sched_param(int(priority)))
    except (OSError, AttributeError, ValueError) as exc:
        return f'SCHED_FIFO priority {priority} refused ({exc})'
    return ''


def set_threads_realtime(prefix: str, priority: int) -> tuple[int, str]:
    """
    Run this process's threads whose OS name starts with ``prefix`` with ``SCHED_FIFO``.

    E.g. ``'dds.'``: Fast DDS's reception and event threads, which deliver the joint states
    to the control thread (at normal scheduling a busy host delivered them tens of ms late).
    Returns ``(threads set, why the OS refused one or '')``.
    """
    done, why = 0, ''
    try:
        tasks = os.listdir('/proc/self/task')
    except OSError as exc:
        return 0, str(exc)
    for tid in tasks:
        try:
            with open(f'/proc/self/task/{tid}/comm', encoding='utf-8') as f:
                if not f.read().startswith(prefix):
                    continue
            os.sched_setscheduler(int(tid), os.SCHED_FIFO, os.sched_param(int(priority)))
            done += 1
        except (OSError, AttributeError, ValueError) as exc:
            why = why or f'SCHED_FIFO priority {priority} refused ({exc})'
    return done, why


def name_thread(name: str) -> None:
    """Give the calling thread an OS name (``ps -L``, ``top -H``, /proc; Linux only)."""
    try:
        ctypes.CDLL(None).prctl(15, name.encode()[:15], 0, 0, 0)    # 15 = PR_SET_NAME
    except (OSError, AttributeError):
        pass


#: set-thread-count functions of the OpenBLAS builds numpy and scipy load (the scipy-openblas
#: wheels prefix and suffix their symbols)
BLAS_THREAD_SETTERS = ('scipy_openblas_set_num_threads64_', 'scipy_openblas_set_num_threads',
                       'openblas_set_num_threads64_', 'openblas_set_num_threads')


def single_threaded_blas() -> int:
    """
    Run the OpenBLAS libraries loaded in this process on one thread; return how many were set.

    numpy's small matrix products in a control tick gain nothing from BLAS threads, which spin
    on the other cores: measured on the Panda's adaptive tick (2 cores), 312 us of process CPU
    per 96 us tick with the default threads against 114 us with one, and the p99 of a tick
    4.2 ms against 0.3 ms. ``OPENBLAS_NUM_THREADS`` does the same when set before numpy loads.
    """
    done = 0
    libs = set()
    try:
        with open('/proc/self/maps', encoding='utf-8') as f:
            for line in f:
                path = line.split()[-1] if len(line.split()) >= 6 else ''
                if 'openblas' in path.lower() and '.so' in path:
                    libs.add(path)
    except OSError:
        return 0
    for path in sorted(libs):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for name in BLAS_THREAD_SETTERS:
            fn = getattr(lib, name, None)
            if fn is not None:
                fn(1)
                done += 1
                break
    return done


def lock_memory() -> str:
    """
    Lock the process's memory, present and future (``mlockall(MCL_CURRENT | MCL_FUTURE)``).

    A locked page is never paged out, so a control tick never waits for the disk. Returns ''
    when done, else why the OS refused it.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.mlockall(1 | 2) != 0:           # MCL_CURRENT | MCL_FUTURE
            return f'mlockall refused ({os.strerror(ctypes.get_errno())})'
    except (OSError, AttributeError) as exc:
        return f'mlockall not available ({exc})'
    return ''


#: Longest the DDS teardown after a node's start error may take [s]: once in
#: :func:`run_node` and once more for the interpreter's exit. Past it the process ends with
#: its exit code (:func:`arm_exit_deadline`). A controller that had printed its parameter
#: error once hung in the interpreter's exit until it was killed (1 of about 1000 started 25
#: at a time on a loaded host). Error line to exit of 25 such controllers started at once
#: beside two busy loops (load 34-50): median 2.4 s, max 3.8 s (100 exits; 4.0 s and 7.9 s
#: with the previous run_node, measured right after; bench/bench_exit.py): far below it.
EXIT_BOUND = 10.0


class _Timespec(ctypes.Structure):
    _fields_ = [('tv_sec', ctypes.c_long), ('tv_nsec', ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [('it_interval', _Timespec), ('it_value', _Timespec)]


class _Sigevent(ctypes.Structure):
    """glibc's ``struct sigevent`` for ``SIGEV_THREAD`` (64 bytes on 64-bit Linux)."""

    _fields_ = [('sigev_value', ctypes.c_void_p), ('sigev_signo', ctypes.c_int),
                ('sigev_notify', ctypes.c_int), ('sigev_notify_function', ctypes.c_void_p),
                ('sigev_notify_attributes', ctypes.c_void_p), ('_pad', ctypes.c_byte * 32)]


#: The armed exit timer (``timer_t``) or None; the code and whether the interpreter's exit
#: is bounded (:func:`bound_interpreter_exit`).
_EXIT_TIMER: dict = {'id': None, 'code': 0, 'at_exit': False}


def _libc_timers():
    libc = ctypes.CDLL(None, use_errno=True)
    if not hasattr(libc, 'timer_create'):       # glibc before 2.34: in librt
        libc = ctypes.CDLL('librt.so.1', use_errno=True)
    libc.timer_create.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    libc.timer_settime.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                                   ctypes.c_void_p]
    libc.timer_delete.argtypes = [ctypes.c_void_p]
    return libc


def arm_exit_deadline(seconds: float, code: int) -> str:
    """
    End the process with ``_exit(code)`` in ``seconds`` unless disarmed first.

    A POSIX timer (``CLOCK_MONOTONIC``) whose expiry starts a thread that calls libc's
    ``_exit(code)`` (``SIGEV_THREAD``; the ``union sigval`` argument is passed in the first
    integer register on the 64-bit Linux ABIs, where ``_exit`` reads its ``int``). No Python
    runs in it, so it also ends a process whose main thread waits in native code while
    holding the interpreter lock (a DDS participant's teardown), or hangs in the
    interpreter's own exit, where no Python thread runs any more. One timer at a time:
    arming again replaces it; :func:`disarm_exit_deadline` cancels it.

    Returns '' when armed, else why not (not 64-bit Linux, or the OS refused the timer).
    """
    disarm_exit_deadline()
    if not sys.platform.startswith('linux') or ctypes.sizeof(ctypes.c_void_p) != 8:
        return 'exit deadline: only on 64-bit Linux'
    try:
        libc = _libc_timers()
        event = _Sigevent(sigev_value=int(code), sigev_notify=2,      # 2 = SIGEV_THREAD
                          sigev_notify_function=ctypes.cast(libc._exit, ctypes.c_void_p).value)
        timer = ctypes.c_void_p()
        if libc.timer_create(1, ctypes.byref(event), ctypes.byref(timer)) != 0:  # MONOTONIC
            return f'exit deadline: timer_create refused ({os.strerror(ctypes.get_errno())})'
        whole = int(max(seconds, 1e-3))
        spec = _Itimerspec(it_value=_Timespec(whole, int((max(seconds, 1e-3) - whole) * 1e9)))
        if libc.timer_settime(timer, 0, ctypes.byref(spec), None) != 0:
            libc.timer_delete(timer)
            return f'exit deadline: timer_settime refused ({os.strerror(ctypes.get_errno())})'
    except (OSError, AttributeError) as exc:
        return f'exit deadline: not available ({exc})'
    _EXIT_TIMER['id'] = timer
    return ''


def disarm_exit_deadline() -> None:
    """Cancel the timer of :func:`arm_exit_deadline` (nothing when none is armed)."""
    timer, _EXIT_TIMER['id'] = _EXIT_TIMER['id'], None
    if timer is not None:
        _libc_timers().timer_delete(timer)


def _bound_interpreter_exit() -> None:
    """``atexit``: flush the output, then the rest of the exit has :data:`EXIT_BOUND`."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    arm_exit_deadline(EXIT_BOUND, _EXIT_TIMER['code'])


def bound_interpreter_exit(code: int) -> None:
    """
    Give the interpreter's exit :data:`EXIT_BOUND`, then end the process with ``code``.

    Armed by an ``atexit`` handler (after the output is flushed), so a process that goes on
    after this call is not ended: only its exit is bounded, where the DDS participant of a
    context that was shut down is destroyed (a controller once hung there).
    """
    _EXIT_TIMER['code'] = code
    if not _EXIT_TIMER['at_exit']:
        _EXIT_TIMER['at_exit'] = True
        atexit.register(_bound_interpreter_exit)


def release_context(context=None) -> None:
    """
    Shut ``context`` (rclpy's default when None) down and destroy its DDS participant now.

    ``try_shutdown`` alone leaves the participant and rmw's graph-listener thread alive
    while anything holds the context: a node in a reference cycle, or one the controller
    froze out of the collector (``gc.freeze``). The participant then outlived the
    interpreter and was destroyed by Fast DDS's static factory among the C library's exit
    handlers, with its receive and listener threads still running: a controller died there
    after its final zero torque (``malloc_consolidate(): unaligned fastbin chunk detected``,
    exit -6 or -11; 1 Ctrl-C in 20 under load). Unfreezing and collecting the cycles and
    destroying the context ends those threads here, in order.
    """
    import rclpy
    from rclpy.utilities import get_default_context
    ctx = context if context is not None else get_default_context(shutting_down=True)
    rclpy.try_shutdown(context=ctx)
    gc.unfreeze()           # the process is ending: frozen cycles may go now
    gc.collect()
    ctx.destroy()
    gc.collect()


def error_exit(message: str, code: int = 2) -> int:
    """Print ``error: message`` to stderr (one line, no traceback) and return ``code``."""
    print(f'error: {message}', file=sys.stderr, flush=True)
    return code


#: Stop state shared with the signal handler: a stop was requested; spin_until is spinning;
#: the process is closing (signals are only flagged from then on); ``wake`` ends the running
#: spin_until at once (set while it spins, called by the signal watcher thread); the watcher
#: thread is installed (once per process).
_STOP = {'requested': False, 'spinning': False, 'deferred': False, 'wake': None,
         'watching': False, 'bounded': False}
#: Held while the watcher thread calls ``_STOP['wake']`` and while spin_until retires it.
_WAKE_LOCK = threading.Lock()
#: The watcher thread and its pipe (ended by :func:`end_signal_watch`).
_WATCHER: dict = {'thread': None, 'read_fd': None, 'write_fd': None}
#: A byte no signal number has: tells the watcher thread to end.
_END_WATCH = 0

#: A node process closes within this long after Ctrl-C / SIGTERM [s] (its own waits are
#: bounded: the plant's acknowledgements 2.5 s, the controller's ramp to zero); past it the
#: stack of every thread goes to stderr and the process exits 1, before ``ros2 launch``
#: escalates to SIGTERM (15 s) and SIGKILL: a stop that hangs is reported, and where.
STOP_BOUND = 12.0


def _bound_the_stop() -> None:
    """
    Arm :data:`STOP_BOUND` once, at the first stop signal of a one-node process.

    faulthandler's watchdog is a C thread: it dumps and exits even while the main thread
    waits in native code (a DDS teardown) holding the interpreter lock.
    """
    if _STOP['bounded'] or not _PROCESS['own']:
        return
    _STOP['bounded'] = True
    _arm_stop_dump(STOP_BOUND)


def extend_stop_bound(seconds: float) -> None:
    """
    Let a stop under way take ``seconds`` more than :data:`STOP_BOUND` from now.

    For a wait whose length the user sets: the controller's exit ramp, which must reach zero
    torque before the process may end.
    """
    if _STOP['bounded']:
        _arm_stop_dump(seconds + STOP_BOUND)


def _arm_stop_dump(seconds: float) -> None:
    try:    # arming again replaces the timer
        faulthandler.dump_traceback_later(seconds, exit=True, file=sys.__stderr__)
    except (RuntimeError, ValueError, AttributeError):     # no usable stderr
        pass


def _watch_stop_signals() -> None:
    """
    Make Ctrl-C / SIGTERM end :func:`spin_until` within a millisecond, not a spin slice.

    Python runs a signal handler only when the main thread executes Python code; a node's
    main thread waits in the executor's C code (its control loop has a thread of its own), so
    the stop was seen at the next :data:`SPIN_SLICE` (measured: 7-94 ms after SIGINT with a
    busy control thread). The C-level handler also writes the signal number to a wakeup fd;
    a daemon thread reading it ends the spin, and the main thread, back in Python, runs the
    handler. Installed once per process, and only if nobody else (an asyncio loop) uses the
    wakeup fd.
    """
    if _STOP['watching']:
        return
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    try:
        previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    except ValueError:                  # not the main thread
        os.close(read_fd)
        os.close(write_fd)
        return
    if previous != -1:                  # somebody else's: give it back
        signal.set_wakeup_fd(previous)
        os.close(read_fd)
        os.close(write_fd)
        return
    _STOP['watching'] = True
    stops = {int(signal.SIGINT), int(signal.SIGTERM)}

    def watch():
        while True:
            try:
                data = os.read(read_fd, 64)
            except OSError:
                return
            if not data or _END_WATCH in data:
                return
            if not stops.intersection(data):
                continue
            _bound_the_stop()
            _wake_the_spin()

    thread = threading.Thread(target=watch, name='stop_signals', daemon=True)
    _WATCHER.update(thread=thread, read_fd=read_fd, write_fd=write_fd)
    thread.start()


def _wake_the_spin() -> None:
    """
    End the running :func:`spin_until` (in the watcher thread), holding nothing of it after.

    ``wake`` holds the executor. Kept by this thread until the next signal, it was the last
    reference there, and a signal during the interpreter's exit made this thread destroy the
    executor: its C++ destructor cannot take the interpreter lock then, and the process
    aborted (``terminate called without an active exception``, exit -6). Under the lock,
    spin_until retires ``wake`` only after a call under way has dropped it here.
    """
    with _WAKE_LOCK:
        wake = _STOP['wake']
        try:
            if wake is not None:
                wake()
        finally:
            del wake


def end_signal_watch(timeout: float = 1.0) -> None:
    """
    End the watcher thread of :func:`_watch_stop_signals` (waiting up to ``timeout`` [s]).

    Called when a node process has closed: no thread of this package then runs Python in the
    interpreter's exit. Ctrl-C / SIGTERM still reach the Python handlers.
    """
    thread, read_fd, write_fd = _WATCHER['thread'], _WATCHER['read_fd'], _WATCHER['write_fd']
    if thread is None:
        return
    try:
        previous = signal.set_wakeup_fd(-1)
    except ValueError:                  # not the main thread
        return
    if previous != write_fd:            # somebody else's since: give it back
        signal.set_wakeup_fd(previous)
        return
    try:
        os.write(write_fd, bytes([_END_WATCH]))
    except OSError:
        pass
    thread.join(timeout)
    _WATCHER.update(thread=None, write_fd=None, read_fd=None)
    _STOP['watching'] = False
    if not thread.is_alive():
        os.close(read_fd)
        os.close(write_fd)


def stop_requested() -> bool:
    """Return True once Ctrl-C or SIGTERM has been received (after the handlers are set)."""
    return _STOP['requested']


def defer_signals() -> None:
    """
    Only flag Ctrl-C / SIGTERM from now on: the process is closing.

    Called before ``close()`` / ``destroy_node()`` so that a signal arriving while a node
    finishes (e.g. the plant in ``wait_for_all_acked``, the recorder finishing its bag) cannot
    raise KeyboardInterrupt in the middle of it.
    """
    _STOP['deferred'] = True


def spin_once(executor, timeout_sec: float, interruptible: bool = True) -> None:
    """
    Run one executor step with Ctrl-C / SIGTERM only flagged during it.

    Raises KeyboardInterrupt after the step (outside every callback) when a stop has been
    requested and ``interruptible`` is true; with ``interruptible=False`` (draining after a
    stop) the caller checks :func:`stop_requested` itself.
    """
    _STOP['spinning'] = True
    try:
        executor.spin_once(timeout_sec=timeout_sec)
    finally:
        _STOP['spinning'] = False
    if interruptible and _STOP['requested']:
        raise KeyboardInterrupt


def _on_stop_signal(signum, frame):
    """
    Handle SIGINT / SIGTERM: flag the stop; raise KeyboardInterrupt only outside the spin.

    Inside :func:`spin_until` an exception raised here would interrupt whichever callback is
    running (rclpy logs it as FATAL with a traceback), so only the flag is set. Signals after
    the first one (a terminal's Ctrl-C reaches ``ros2 launch`` and its nodes, then launch
    sends SIGINT again) are ignored while the node closes; closing is bounded in time.
    """
    if _STOP['requested']:
        return
    _STOP['requested'] = True
    _bound_the_stop()
    if not (_STOP['spinning'] or _STOP['deferred']):
        raise KeyboardInterrupt


#: Environment variable set by the launch files: ``1`` = get SIGTERM (and stop cleanly) when
#: the parent process (``ros2 launch``) dies.
STOP_WITH_PARENT_ENV = 'MANIP_STOP_WITH_PARENT'


def _stop_with_parent() -> None:
    """
    Ask Linux for a SIGTERM when the parent process dies, if the launch file asked for it.

    ``ros2 launch`` sent SIGTERM exits at once without stopping its processes (upstream
    launch logs "using SIGTERM can result in orphaned processes"); with this request
    (``prctl(PR_SET_PDEATHSIG, SIGTERM)``) the nodes still get their SIGTERM and close
    cleanly: the recorder finishes its bag.
    """
    if os.environ.get(STOP_WITH_PARENT_ENV) != '1' or not sys.platform.startswith('linux'):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGTERM), 0, 0, 0)     # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:                               # the parent died before the request
        _STOP['requested'] = True


#: Environment variable: ``0`` keeps Fast DDS's own default transports (no UDPv4 preference).
PREFER_UDP_ENV = 'MANIP_PREFER_UDP'
#: Settings through which the user (or the ROS set-up) chooses the DDS transport: when any
#: of them is set, the nodes leave the transport alone.
USER_TRANSPORT_SETTINGS = ('FASTDDS_BUILTIN_TRANSPORTS', 'FASTRTPS_DEFAULT_PROFILES_FILE',
                           'FASTDDS_DEFAULT_PROFILES_FILE', 'RMW_FASTRTPS_USE_QOS_FROM_XML')
#: Fast DDS loads this file from the working directory by itself.
DEFAULT_PROFILES_XML = 'DEFAULT_FASTRTPS_PROFILES.xml'
#: The INFO line of the transport choice, logged once by the first node of the process.
TRANSPORT_NOTE: dict = {'text': None, 'logged': False}


#: Fast DDS profile of the LOCALHOST case: UDPv4 on the loopback interface only, no shared
#: memory (the loopback restriction keeps discovery and data on this host, as LOCALHOST does).
LOOPBACK_UDP_PROFILE = """<?xml version="1.0" encoding="UTF-8" ?>
<!-- written by manip_control: UDPv4 on 127.0.0.1 only (see manip_control.nodes.common) -->
<profiles xmlns="http://www.eprosima.com/XMLSchemas/fastRTPS_Profiles">
  <transport_descriptors>
    <transport_descriptor>
      <transport_id>manip_control_loopback_udp</transport_id>
      <type>UDPv4</type>
      <interfaceWhiteList><address>127.0.0.1</address></interfaceWhiteList>
    </transport_descriptor>
  </transport_descriptors>
  <participant profile_name="manip_control_loopback_udp" is_default_profile="true">
    <rtps>
      <userTransports><transport_id>manip_control_loopback_udp</transport_id></userTransports>
      <useBuiltinTransports>false</useBuiltinTransports>
    </rtps>
  </participant>
</profiles>
"""


def loopback_udp_profile() -> str | None:
    """
    Return the path of :data:`LOOPBACK_UDP_PROFILE` written for this user (None: not writable).

    One file per user in the temporary directory, replaced atomically when its text differs.
    """
    path = os.path.join(tempfile.gettempdir(), f'manip_control_loopback_udp_{os.getuid()}.xml')
    try:
        with open(path, encoding='utf-8') as f:
            if f.read() == LOOPBACK_UDP_PROFILE:
                return path
    except OSError:
        pass
    try:
        fd, tmp = tempfile.mkstemp(prefix='.manip_control_loopback_udp_', suffix='.xml',
                                   dir=os.path.dirname(path))
        with os.fdopen(fd, 'w', encoding='utf-8') as f:
            f.write(LOOPBACK_UDP_PROFILE)
        os.replace(tmp, path)
    except OSError:
        return None
    return path


def prefer_udp_transport(environ=None) -> str | None:
    """
    Use Fast DDS's UDPv4 transport unless the user chose the transport; return the note.

    With the shared-memory transport (part of Fast DDS's default), a publisher whose
    subscriber process was killed can block for the port health check, which stalls the whole
    executor -- watchdogs and commands included. Measured on this machine: a killed plant was
    noticed by the controller after 1003.7 ms instead of 20 ms, and, on a loaded machine with
    ``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST``, a controller whose plant was killed ran no
    check for 1915 ms; over UDPv4 on loopback the same fault tests gave 20-21 ms. The
    preference is announced once and easy to turn off. Nothing is set when something else
    chose the transport:

    * ``MANIP_PREFER_UDP=0`` turns the preference off;
    * any of :data:`USER_TRANSPORT_SETTINGS` set, or a ``DEFAULT_FASTRTPS_PROFILES.xml`` in
      the working directory, is the user's choice and is never overridden;
    * ``RMW_IMPLEMENTATION`` other than Fast DDS: not applicable.

    Otherwise ``FASTDDS_BUILTIN_TRANSPORTS=UDPv4``; with ``ROS_AUTOMATIC_DISCOVERY_RANGE=
    LOCALHOST`` (or ``ROS_LOCALHOST_ONLY=1``) rmw_fastrtps would install its own localhost
    transports, shared memory included, and ignore that variable, so the process instead
    takes :data:`LOOPBACK_UDP_PROFILE` (``FASTRTPS_DEFAULT_PROFILES_FILE``) with the
    ``SUBNET`` range: UDPv4 on 127.0.0.1 only, so discovery and data stay on this host as
    with LOCALHOST, and peers that do use LOCALHOST (``ros2`` tools) still match.

    Returns
    -------
    str or None
        The INFO line to log once (None when the transport was left alone).

    """
    env = os.environ if environ is None else environ
    if env.get(PREFER_UDP_ENV, '1').strip() == '0':
        return None
    if 'fastrtps' not in env.get('RMW_IMPLEMENTATION', 'rmw_fastrtps_cpp'):
        return None
    if any(env.get(name) for name in USER_TRANSPORT_SETTINGS):
        return None
    if os.path.exists(DEFAULT_PROFILES_XML):
        return None
    off = (f'{PREFER_UDP_ENV}=0 or your own FASTDDS_BUILTIN_TRANSPORTS / profile keeps yours')
    if (env.get('ROS_AUTOMATIC_DISCOVERY_RANGE', '').upper() == 'LOCALHOST'
            or env.get('ROS_LOCALHOST_ONLY', '') == '1'):
        path = loopback_udp_profile()
        if path is None:
            return None
        env['FASTRTPS_DEFAULT_PROFILES_FILE'] = path
        env['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'SUBNET'
        env.pop('ROS_LOCALHOST_ONLY', None)     # (deprecated) it would force LOCALHOST
        return ('DDS transport: UDPv4 only, on 127.0.0.1 (discovery range LOCALHOST kept by '
                f'the profile {path}: shared memory to a killed peer stalled the executor); '
                + off)
    env['FASTDDS_BUILTIN_TRANSPORTS'] = 'UDPv4'
    return ('DDS transport: UDPv4 only (FASTDDS_BUILTIN_TRANSPORTS=UDPv4 set by manip_control: '
            'shared memory to a killed peer stalled the executor for 1 s); ' + off)


def log_transport_note(node) -> None:
    """Log the transport choice of this process once (INFO), through ``node``'s logger."""
    if TRANSPORT_NOTE['text'] and not TRANSPORT_NOTE['logged']:
        TRANSPORT_NOTE['logged'] = True
        node.get_logger().info(TRANSPORT_NOTE['text'])


def init_keeping_context_on_signals(args=None, context=None) -> dict:
    """
    Call ``rclpy.init`` without rclpy's signal handlers.

    Ctrl-C and SIGTERM end :func:`spin_until` with KeyboardInterrupt (see
    :func:`_on_stop_signal`) instead of shutting the context down, so a node can still publish
    in ``close()`` (e.g. a last zero-torque command) before the shutdown.

    Returns the previous Python handlers ``{signum: handler}`` (to restore them).
    """
    import rclpy
    from rclpy.signals import SignalHandlerOptions
    note = prefer_udp_transport()
    if note:
        TRANSPORT_NOTE['text'] = note
    rclpy.init(args=args, context=context, signal_handler_options=SignalHandlerOptions.NO)
    previous = {signal.SIGINT: signal.getsignal(signal.SIGINT),
                signal.SIGTERM: signal.getsignal(signal.SIGTERM)}
    _STOP['requested'] = _STOP['deferred'] = False
    signal.signal(signal.SIGINT, _on_stop_signal)
    signal.signal(signal.SIGTERM, _on_stop_signal)
    _watch_stop_signals()
    _stop_with_parent()
    return previous


#: Set by :func:`run_node`: the node owns its process (process-wide real-time settings).
_PROCESS = {'own': False}


def owns_process() -> bool:
    """Return True inside :func:`run_node` (one node per process: ``ros2 run``, launch)."""
    return _PROCESS['own']


def run_node(factory, args=None) -> int:
    """
    Init rclpy, build the node (ParameterError -> exit 2 with one message), spin, clean up.

    ``factory()`` builds the node; its ``done_future`` (an rclpy Future, when present) ends
    the spin with exit code 0 when completed (or the node's ``exit_code`` when it has one).
    The ``--params-file`` files are read first (a bad one: one line naming the parameter).
    Ctrl-C / SIGTERM end it with 0 too. The node's ``drain(executor)`` (when present: take what
    already arrived) and then its ``close()`` run before the node is destroyed.

    The context is then destroyed (:func:`release_context`): the DDS participant and its
    threads end before ``run_node`` returns, never in the C library's exit handlers; so does
    the signal watcher thread (:func:`end_signal_watch`).

    A node whose constructor raised is destroyed too (never closed: it never commanded). After
    such a start error the teardown (the node, the context) and, after ``run_node``
    returned, the interpreter's exit each end the process with ``code`` after
    :data:`EXIT_BOUND` if they have not finished by then (:func:`arm_exit_deadline`): a
    start error exits 2, whatever the DDS state.
    """
    import rclpy
    from rclpy.executors import ExternalShutdownException

    try:    # before rcl parses them: one line naming the parameter (mixed lists, empty file)
        check_params_files(args)
    except ParameterError as exc:
        return error_exit(str(exc))
    try:
        init_keeping_context_on_signals(args)
    except Exception as exc:  # noqa: BLE001 - e.g. a malformed --params-file
        return error_exit(_rcl_message(exc))
    node = None
    built = None            # a node whose constructor raised: destroyed, never closed
    executor = None
    code = 1                # an exception that escapes run_node: the interpreter's exit code
    _PROCESS['own'] = True
    try:
        try:
            node = factory()
        except ParameterError as exc:
            built = _node_under_construction(exc)
            code = error_exit(str(exc))
        except Exception as exc:  # noqa: BLE001 - rcl errors while creating the node
            built = _node_under_construction(exc)
            code = error_exit(_rcl_message(exc))
        if node is not None:
            log_transport_note(node)
            guard_services(node)
            executor = make_executor()
            executor.add_node(node)
            spin_until(executor, getattr(node, 'done_future', None))
            code = getattr(node, 'exit_code', 0)    # e.g. 2: the plant stopped on a bad state
    except (KeyboardInterrupt, ExternalShutdownException) as exc:
        if node is None and built is None:
            built = _node_under_construction(exc)
        code = 0
    finally:
        defer_signals()                 # a signal now must not interrupt close()
        if node is not None:
            try:
                drain = getattr(node, 'drain', None)
                if drain is not None and executor is not None and rclpy.ok():
                    drain(executor)
                close = getattr(node, 'close', None)
                if close is not None:
                    close()
            except Exception as exc:  # noqa: BLE001 - report, but still shut down
                print(f'error: {exc}', file=sys.stderr)
                code = 1
        # a start error (nothing was ever commanded): the DDS teardown must not hold the exit
        started = node is not None
        if not started:
            arm_exit_deadline(EXIT_BOUND, code)
        try:
            if node is not None:
                if executor is not None:
                    try:
                        executor.remove_node(node)
                    except Exception:  # noqa: BLE001
                        pass
                node.destroy_node()
            if built is not None:
                _destroy_built(built)
            if executor is not None:
                try:
                    executor.shutdown()
                except Exception:  # noqa: BLE001
                    pass
            # nothing here may hold the participant (bound methods hold their node)
            node = built = executor = drain = close = None
            release_context()
        finally:
            disarm_exit_deadline()
            if not started:             # what is left goes in the interpreter's exit
                bound_interpreter_exit(code)
            if _STOP['requested']:
                # asked to stop, and stopped: a later signal (launch sends SIGINT again after
                # a terminal's Ctrl-C) must not end the process in the interpreter's exit,
                # where Python has put the default action back (exit code -2, "died"); the
                # exit is bounded instead, as after a start error
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                bound_interpreter_exit(code)
            end_signal_watch()
    return code


def _node_under_construction(exc: BaseException):
    """
    Return the rclpy node whose constructor raised ``exc`` (None when there is none).

    That node exists (its DDS entities too) but never reached :func:`run_node`: left to the
    garbage collector, its entities would be destroyed in no order at the interpreter's exit,
    the case rclpy's ``destroy_node`` avoids by destroying them first.
    """
    from rclpy.node import Node
    tb = exc.__traceback__
    # not the first frame, the caller's own (run_node, still running): reading its locals
    # leaves a snapshot on it that holds ``exc``, its traceback and so the node and its
    # DDS participant until the process exits
    tb = tb.tb_next if tb is not None else None
    while tb is not None:
        candidate = tb.tb_frame.f_locals.get('self')
        if isinstance(candidate, Node):
            return candidate
        tb = tb.tb_next
    return None


def _destroy_built(node) -> None:
    """Destroy a node whose constructor raised; rclpy's own way when the subclass's cannot."""
    from rclpy.node import Node
    try:
        node.destroy_node()         # e.g. the controller stops its control thread first
        return
    except Exception:  # noqa: BLE001 - attributes the constructor did not set yet
        pass
    try:
        Node.destroy_node(node)
    except Exception:  # noqa: BLE001 - rclpy's constructor itself failed half-way
        pass


def _rcl_message(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else type(exc).__name__
    return f'{first}' + (f' ({text[1].strip()})' if len(text) > 1 else '')
