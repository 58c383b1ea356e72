"""Virtual time and deadlines that fall between two clock ticks.

A ``VirtualClock`` jumps to the tick nearest the earliest timer, and the core
fires every timer due within one resolution.  A deadline computed as a float
sum (``0.001 + 0.05 == 0.051000000000000004``) lies just above its tick: the
timer fires while ``loop.time()`` (0.051) still reads before it.  Code that
re-arms until ``loop.time() >= deadline`` (anyio's cancel scopes, trio-style
deadlines) re-arms at the same deadline; when the nearest tick is the current
one, the clock moves one tick on, so the deadline is reached.  (Before that
rule the loop spun at 0.051 for ever: these tests were strict xfails.)
"""

from __future__ import annotations

import asyncio
import threading

import anyio


def run_with_watchdog(loop, coro, seconds=0.5):
    """``loop.run_until_complete(coro)``; the loop is stopped after ``seconds`` of real time.

    Returns ("done", result) or ("stopped", None): a livelocked loop still runs its
    threadsafe callbacks, so the watchdog's stop() gets through.
    """
    watchdog = threading.Timer(seconds, loop.call_soon_threadsafe, (loop.stop,))
    watchdog.start()
    try:
        return "done", loop.run_until_complete(coro)
    except RuntimeError as exc:
        if "stopped before Future completed" not in str(exc):
            raise
        return "stopped", None
    finally:
        watchdog.cancel()
        watchdog.join()


def test_a_deadline_on_a_tick_is_reached(virtual_loop):
    # The control: 0.05 from 0.0 is a tick, and the re-arming timer ends at once.
    loop = virtual_loop

    async def main():
        deadline = loop.time() + 0.05
        fired = loop.create_future()

        def check():
            if loop.time() >= deadline:
                fired.set_result(loop.time())
            else:
                loop.call_at(deadline, check)

        loop.call_at(deadline, check)
        return await fired

    assert run_with_watchdog(loop, main()) == ("done", 0.05)


def test_a_deadline_between_ticks_is_reached(virtual_loop):
    loop = virtual_loop
    rearmed = []

    async def main():
        await asyncio.sleep(0.001)
        deadline = loop.time() + 0.05  # 0.051000000000000004: above the tick 0.051
        fired = loop.create_future()

        def check():
            if fired.done():
                return  # the watchdog stopped the test
            if loop.time() >= deadline:
                fired.set_result(loop.time())
            else:
                rearmed.append(loop.time())
                loop.call_at(deadline, check)

        loop.call_at(deadline, check)
        try:
            return await fired
        finally:
            if not fired.done():
                fired.cancel()

    outcome = run_with_watchdog(loop, main())
    assert outcome[0] == "done", f"livelock: re-armed {len(rearmed)} times at {rearmed[-1]}"
    assert outcome[1] >= 0.051000000000000004


def test_anyio_move_on_after_a_deadline_between_ticks(virtual_loop):
    # anyio's CancelScope._timeout re-arms while loop.time() < its deadline.
    async def main():
        await anyio.sleep(0.001)
        with anyio.move_on_after(0.05) as scope:
            await anyio.sleep_forever()
        return scope.cancelled_caught, anyio.current_time()

    outcome = run_with_watchdog(virtual_loop, main())
    assert outcome[0] == "done", "livelock: the cancel scope's deadline was never reached"
    cancelled, now = outcome[1]
    assert cancelled and now >= 0.051000000000000004
