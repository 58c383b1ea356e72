"""The default executor: what shutdown_default_executor reports, and where."""

from __future__ import annotations

import asyncio
import threading
import warnings

import pytest
from _loopkit import PY313, run


@pytest.mark.skipif(
    not PY313, reason="3.11 has no timeout, and 3.12 waits for the threads before it applies it"
)
def test_shutdown_timeout_warning_names_the_caller(any_loop):
    # asyncio's warning points at the line that awaited
    # shutdown_default_executor(), not into the loop's own code.
    release = threading.Event()

    async def main():
        fut = any_loop.run_in_executor(None, release.wait, 30)
        await asyncio.sleep(0.01)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            await any_loop.shutdown_default_executor(timeout=0.05)
        release.set()
        await fut
        return [(w.category, w.filename) for w in caught]

    try:
        caught = run(any_loop, main(), timeout=30)
    finally:
        release.set()
    assert caught == [(RuntimeWarning, __file__)]
