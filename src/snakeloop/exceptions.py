"""The errors of snakeloop's own features: virtual time and deadlock detection.

Each carries ``report``, the await-chain report of the loop's tasks at the
moment it was raised ("" when there were none), so that a test runner can
show it beside the traceback without formatting anything again.
"""

from __future__ import annotations

__all__ = ["DeadlockError", "StallError", "VirtualTimeoutError"]


class DeadlockError(RuntimeError):
    """No task can ever make progress: nothing is ready, due or able to wake the loop."""

    def __init__(self, message: str, report: str = "") -> None:
        super().__init__(message)
        self.report = report


class StallError(RuntimeError):
    """Virtual time stayed frozen past ``stall_timeout`` waiting on outside work."""

    def __init__(self, message: str, report: str = "") -> None:
        super().__init__(message)
        self.report = report


class VirtualTimeoutError(TimeoutError):
    """Virtual time reached the clock's ``end`` while the program was still running."""

    def __init__(self, message: str, report: str = "") -> None:
        super().__init__(message)
        self.report = report
