"""The ``main()`` of every node executable: init, spin, and a clean exit on Ctrl-C or SIGTERM."""
from __future__ import annotations

import gc
import sys

import rclpy
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor, SingleThreadedExecutor


def spin_node(node_class, args=None, threads: int = 1) -> None:
    """Run one node until shutdown; ``threads`` > 1 lets its callback groups run in parallel.

    A node whose constructor rejects its configuration (ValueError) ends the process with
    status 1 and the reason on one line, not a traceback.
    """
    rclpy.init(args=args)
    try:
        node = node_class()
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        rclpy.try_shutdown()
        sys.exit(1)
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
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()
