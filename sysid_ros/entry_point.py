"""The ``main()`` of every node executable: init, spin, and a clean exit on Ctrl-C or SIGTERM."""
from __future__ import annotations

import contextlib
import gc
import signal
import sys
import threading

import rclpy
from rclpy.exceptions import InvalidParameterTypeException, InvalidParameterValueException
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor

SHUTDOWN_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def spin_node(node_class, args=None) -> int:
    """Run one node until shutdown, or until its ``finished`` Future (if it has one) completes;
    returns the process exit status: that Future's result, else 0.

    One thread: rclpy's multi-threaded executor cannot keep up with a bursty 1 kHz
    subscription (test/test_node_processes.py); a node with long work (the identifier) does it
    in a thread of its own.

    A node whose constructor rejects its configuration (ValueError, or rclpy refusing a parameter
    override of the wrong type or value) ends the process with
    status 1 and the reason on one line, not a traceback; a Ctrl-C or SIGTERM during start-up
    ends it quietly, after the constructor's own clean-up. While the node is destroyed, further
    SIGINT/SIGTERM are ignored: pressing Ctrl-C twice must not cut a clean-up (the Damiao
    bridge disabling its motors) short.
    """
    rclpy.init(args=args)
    try:
        node = node_class()
    except (Exception, KeyboardInterrupt) as err:
        # A signal during start-up shows as KeyboardInterrupt or, once rclpy's signal thread
        # has shut the context down, as the next rclpy call failing (RCLError). Either way the
        # constructor has cleaned up after itself (the bridge disables what it enabled), and the
        # context's shutdown destroys a half-built node once more.
        interrupted = isinstance(err, (KeyboardInterrupt, ExternalShutdownException)) or not rclpy.ok()
        with _shutdown_signals_ignored():
            rclpy.try_shutdown()
        # a rejected configuration: ValueError from the node, or a parameter of the wrong type
        # (``-p duration:=10`` for a double) from rclpy
        if isinstance(err, (ValueError, InvalidParameterTypeException, InvalidParameterValueException)):
            print(f"error: {err}", file=sys.stderr, flush=True)
            sys.exit(1)
        if interrupted:
            return 0
        raise
    # what start-up built (models, plans, buffers) lives as long as the node: keep the
    # collector from scanning it again and again, pausing the node's timers each time
    gc.freeze()
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    finished = getattr(node, "finished", None)
    try:
        if finished is None:
            executor.spin()
        else:
            executor.spin_until_future_complete(finished)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception:
        # a SIGTERM can shut the context down while the executor builds its wait set (rclpy then
        # raises RCLError instead of ExternalShutdownException); anything else is a real error
        if rclpy.ok():
            raise
    finally:
        with _shutdown_signals_ignored():
            executor.shutdown()
            node.destroy_node()
            rclpy.try_shutdown()
    return finished.result() if finished is not None and finished.done() else 0


@contextlib.contextmanager
def _shutdown_signals_ignored():
    """SIG_IGN for SIGINT and SIGTERM inside the block (main thread only: elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    # Python's own table: rclpy's handler, installed from C, does not show there and is
    # gone after rclpy's shutdown anyway
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in SHUTDOWN_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
