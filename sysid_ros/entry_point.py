"""The ``main()`` of every node executable: init, spin, and a clean exit on Ctrl-C or SIGTERM."""
from __future__ import annotations

import contextlib
import gc
import signal
import sys
import threading

import rclpy
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor, SingleThreadedExecutor
from rclpy.signals import SignalHandlerOptions

SHUTDOWN_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def spin_node(node_class, args=None, threads: int = 1, publishes_on_shutdown: bool = False) -> None:
    """Run one node until shutdown; ``threads`` > 1 lets its callback groups run in parallel.

    rclpy's own signal handlers shut the context down on SIGINT/SIGTERM, before the node is
    destroyed: a node that must still publish in ``destroy_node`` (a last command that leaves
    the arm safe) sets ``publishes_on_shutdown``. Python's handlers then take the signals (both
    raise KeyboardInterrupt in the main thread, which the executor sees when a wait returns: such
    a node needs a timer) and the context is shut down only after ``destroy_node``.

    A node whose constructor rejects its configuration (ValueError) ends the process with
    status 1 and the reason on one line, not a traceback; a Ctrl-C or SIGTERM during start-up
    ends it quietly, after the constructor's own clean-up. While the node is destroyed, further
    SIGINT/SIGTERM are ignored: pressing Ctrl-C twice must not cut a clean-up (the Damiao
    bridge disabling its motors) short.
    """
    if publishes_on_shutdown:
        rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.default_int_handler)
    else:
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
        if isinstance(err, ValueError):
            print(f"error: {err}", file=sys.stderr, flush=True)
            sys.exit(1)
        if interrupted:
            return
        raise
    # what start-up built (models, plans, buffers) lives as long as the node: keep the
    # collector from scanning it again and again, pausing the node's timers each time
    gc.freeze()
    executor = MultiThreadedExecutor(num_threads=threads) if threads > 1 else SingleThreadedExecutor()
    executor.add_node(node)
    try:
        executor.spin()
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
