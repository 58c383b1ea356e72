"""anyio's cancel scopes, memory object streams and synchronisation primitives.

Each test runs under ``anyio.run()`` (asyncio backend) on snakeloop and on the
stdlib loop, plainly and under blockbuster (the ``anyio_run`` fixture of this
directory's conftest).

anyio's asyncio backend makes two promises that depend on how the loop's tasks
and futures look from the outside:

* a cancel scope does not cancel a task whose awaited future already has its
  result (``Task._fut_waiter`` is done): the task wakes up with the result, so
  an ``Event.set()``, a memory-stream item or a lock handed over in the same
  loop iteration as the cancellation is never lost;
* ``send_nowait()`` skips a receiver whose task has a pending cancellation
  (its ``_fut_waiter`` was cancelled), so the item goes to the buffer or the
  sender gets ``WouldBlock`` instead of the item vanishing with the receiver.

Both look at the waiter with ``isinstance(waiter, asyncio.Future)``.  The
races below happen "in the same iteration": the two calls are made one after
the other, with no checkpoint between them.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable

import anyio
import pytest
from _loopkit import is_virtual
from anyio.lowlevel import checkpoint


async def until(condition: Callable[[], bool], limit: int = 1000) -> None:
    """Let the other tasks run until ``condition()`` holds."""
    for _ in range(limit):
        if condition():
            return
        await checkpoint()
    raise AssertionError(f"not reached after {limit} checkpoints")


# -- memory object streams ---------------------------------------------------------


def test_receiver_cancelled_while_parked(anyio_run):
    async def main():
        send, receive = anyio.create_memory_object_stream[str](0)
        outcome = []
        with send, receive:
            async with anyio.create_task_group() as tg:
                scope = anyio.CancelScope()

                async def receiver():
                    with scope:
                        outcome.append(await receive.receive())
                    outcome.append(scope.cancelled_caught)

                tg.start_soon(receiver)
                await until(lambda: receive.statistics().tasks_waiting_receive == 1)
                scope.cancel()
            assert outcome == [True]
            assert receive.statistics().tasks_waiting_receive == 0
            # Nobody is waiting any more: an unbuffered send cannot go through.
            with pytest.raises(anyio.WouldBlock):
                send.send_nowait("late")
            # The stream still works for the next receiver.
            async with anyio.create_task_group() as tg:
                tg.start_soon(send.send, "next")
                assert await receive.receive() == "next"

    anyio_run(main)


def test_sender_cancelled_while_parked(anyio_run):
    async def main():
        send, receive = anyio.create_memory_object_stream[str](0)
        with send, receive:
            async with anyio.create_task_group() as tg:
                scope = anyio.CancelScope()
                outcome = []

                async def sender():
                    with scope:
                        await send.send("withdrawn")
                        outcome.append("sent")
                    outcome.append(scope.cancelled_caught)

                tg.start_soon(sender)
                await until(lambda: send.statistics().tasks_waiting_send == 1)
                scope.cancel()
            assert outcome == [True]
            assert send.statistics().tasks_waiting_send == 0
            # The cancelled send took its item back with it.
            with pytest.raises(anyio.WouldBlock):
                receive.receive_nowait()

    anyio_run(main)


@pytest.mark.parametrize("order", ["send-then-cancel", "cancel-then-send"])
def test_item_sent_to_a_receiver_being_cancelled_is_not_lost(anyio_run, order):
    async def main():
        send, receive = anyio.create_memory_object_stream[str](1)
        received = []
        with send, receive:
            async with anyio.create_task_group() as tg:
                scope = anyio.CancelScope()

                async def receiver():
                    with scope:
                        received.append(await receive.receive())

                tg.start_soon(receiver)
                await until(lambda: receive.statistics().tasks_waiting_receive == 1)
                # The same iteration: no checkpoint between the two calls.
                if order == "send-then-cancel":
                    send.send_nowait("item")
                    scope.cancel()
                else:
                    scope.cancel()
                    send.send_nowait("item")
            buffered = []
            with pytest.raises(anyio.WouldBlock):
                while True:
                    buffered.append(receive.receive_nowait())
        assert received + buffered == ["item"]
        if order == "send-then-cancel":
            # The receiver's wake-up was already due: it got the item, not the cancellation.
            assert (received, scope.cancelled_caught) == (["item"], False)
        else:
            # The receiver was cancelled first: the item waited in the buffer.
            assert (buffered, scope.cancelled_caught) == (["item"], True)

    anyio_run(main)


@pytest.mark.parametrize("buffer_size", [0, 1])
def test_send_nowait_to_natively_cancelled_receiver(anyio_run, buffer_size):
    """A receiver task cancelled with ``Task.cancel()`` (not a cancel scope)."""

    async def main():
        send, receive = anyio.create_memory_object_stream[str](buffer_size)
        received = []
        with send, receive:

            async def receiver():
                received.append(await receive.receive())

            task = asyncio.get_running_loop().create_task(receiver())
            await until(lambda: receive.statistics().tasks_waiting_receive == 1)
            task.cancel()
            if buffer_size:
                send.send_nowait("item")
            else:
                with pytest.raises(anyio.WouldBlock):  # the only receiver is going away
                    send.send_nowait("item")
            with pytest.raises(asyncio.CancelledError):
                await task
            assert received == []
            assert receive.statistics().tasks_waiting_receive == 0
            if buffer_size:
                assert receive.receive_nowait() == "item"

    anyio_run(main)


def test_sender_cancelled_while_its_item_is_taken(anyio_run):
    """A parked sender whose item is taken in the same iteration as its cancellation."""

    async def main():
        send, receive = anyio.create_memory_object_stream[str](0)
        outcome = []
        with send, receive:
            async with anyio.create_task_group() as tg:
                scope = anyio.CancelScope()

                async def sender():
                    with scope:
                        await send.send("item")
                        outcome.append("sent")

                tg.start_soon(sender)
                await until(lambda: send.statistics().tasks_waiting_send == 1)
                item = receive.receive_nowait()
                scope.cancel()
        # The item was delivered, so the send succeeded: no cancellation, no duplicate.
        assert (item, outcome, scope.cancelled_caught) == ("item", ["sent"], False)

    anyio_run(main)


def test_stream_closed_under_parked_tasks(anyio_run):
    async def main():
        send, receive = anyio.create_memory_object_stream[int](0)
        errors = []

        async def receiver(stream):
            try:
                await stream.receive()
            except Exception as exc:
                errors.append(type(exc))

        with receive, receive.clone() as clone:
            async with anyio.create_task_group() as tg:
                tg.start_soon(receiver, receive)
                tg.start_soon(receiver, clone)
                await until(lambda: receive.statistics().tasks_waiting_receive == 2)
                send.close()  # the only sender: the receivers see the end of the stream
        assert errors == [anyio.EndOfStream, anyio.EndOfStream]

        send, receive = anyio.create_memory_object_stream[int](0)

        async def sender(item):
            try:
                await send.send(item)
            except Exception as exc:
                errors.append(type(exc))

        errors.clear()
        with send:
            async with anyio.create_task_group() as tg:
                tg.start_soon(sender, 1)
                await until(lambda: send.statistics().tasks_waiting_send == 1)
                receive.close()  # the only receiver: the parked sender's item cannot go
            await sender(2)
        assert errors == [anyio.BrokenResourceError, anyio.BrokenResourceError]

    anyio_run(main)


# -- events, conditions and locks -----------------------------------------------------


@pytest.mark.parametrize("order", ["set-then-cancel", "cancel-then-set"])
def test_event_set_racing_a_cancel_scope(anyio_run, order):
    async def main():
        event = anyio.Event()
        outcome = []
        async with anyio.create_task_group() as tg:
            scope = anyio.CancelScope()

            async def waiter():
                with scope:
                    await event.wait()
                    outcome.append("woken")
                outcome.append("cancelled" if scope.cancelled_caught else "left")

            tg.start_soon(waiter)
            await until(lambda: event.statistics().tasks_waiting == 1)
            if order == "set-then-cancel":
                event.set()
                scope.cancel()
            else:
                scope.cancel()
                event.set()
        if order == "set-then-cancel":
            assert outcome == ["woken", "left"]
        else:
            assert outcome == ["cancelled"]
        assert event.is_set() and event.statistics().tasks_waiting == 0

    anyio_run(main)


def test_condition_notify_racing_a_cancel_scope(anyio_run):
    """The notified (first) waiter is being cancelled: the notification is not lost."""

    async def main():
        condition = anyio.Condition()
        woken = []
        scopes = {name: anyio.CancelScope() for name in ("first", "second")}

        async def waiter(name):
            with scopes[name]:
                async with condition:
                    await condition.wait()
                    woken.append(name)

        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter, "first")
            await until(lambda: condition.statistics().tasks_waiting == 1)
            tg.start_soon(waiter, "second")
            await until(lambda: condition.statistics().tasks_waiting == 2)
            async with condition:
                condition.notify(1)
                scopes["first"].cancel()
            await until(lambda: bool(woken))
            scopes["second"].cancel()
        # The first waiter was already woken when its scope was cancelled.
        assert woken == ["first"]
        assert not condition.locked()

    anyio_run(main)


@pytest.mark.parametrize("order", ["release-then-cancel", "cancel-then-release"])
def test_lock_handoff_racing_a_cancel_scope(anyio_run, order):
    async def main():
        lock = anyio.Lock()
        outcome = []
        await lock.acquire()
        async with anyio.create_task_group() as tg:
            scope = anyio.CancelScope()

            async def contender():
                with scope:
                    async with lock:
                        outcome.append("acquired")
                outcome.append("cancelled" if scope.cancelled_caught else "left")

            tg.start_soon(contender)
            await until(lambda: lock.statistics().tasks_waiting == 1)
            if order == "release-then-cancel":
                lock.release()  # hands the lock over to the contender
                scope.cancel()
            else:
                scope.cancel()
                lock.release()
        if order == "release-then-cancel":
            assert outcome == ["acquired", "left"]
        else:
            assert outcome == ["cancelled"]
        # Nobody holds the lock now, whatever happened.
        assert not lock.locked() and lock.statistics().tasks_waiting == 0
        lock.acquire_nowait()
        lock.release()

    anyio_run(main)


# The scope's deadline, 0.004 + 0.05, lies between two virtual ticks
# (tests/test_virtual_deadlines.py).
def test_semaphore_and_capacity_limiter_under_cancellation(anyio_run_vt):
    async def main():
        semaphore = anyio.Semaphore(2)
        limiter = anyio.CapacityLimiter(2)
        peak = {"semaphore": 0, "limiter": 0}
        inside = {"semaphore": 0, "limiter": 0}

        async def worker(kind, guard, delay):
            async with guard:
                inside[kind] += 1
                peak[kind] = max(peak[kind], inside[kind])
                try:
                    await anyio.sleep(delay)
                finally:
                    inside[kind] -= 1

        async with anyio.create_task_group() as tg:
            for i in range(8):
                tg.start_soon(worker, "semaphore", semaphore, 0.001 * (i % 3))
                tg.start_soon(worker, "limiter", limiter, 0.001 * (i % 3))
        assert peak == {"semaphore": 2, "limiter": 2}

        # Waiters cancelled while queued give nothing away and take nothing.
        with anyio.move_on_after(0.05) as scope:
            async with anyio.create_task_group() as tg:
                for _ in range(6):
                    tg.start_soon(worker, "semaphore", semaphore, math.inf)
                    tg.start_soon(worker, "limiter", limiter, math.inf)
        assert scope.cancelled_caught
        assert semaphore.value == 2 and semaphore.statistics().tasks_waiting == 0
        assert limiter.borrowed_tokens == 0 and limiter.statistics().tasks_waiting == 0

    anyio_run_vt(main)


# -- cancel scopes and timeouts -------------------------------------------------------


# 0.07 + 0.02 lies between two virtual ticks (tests/test_virtual_deadlines.py).
def test_move_on_after_and_fail_after(anyio_run_vt):
    async def main():
        virtual = is_virtual(asyncio.get_running_loop())
        start = anyio.current_time()
        with anyio.move_on_after(0.05) as scope:
            await anyio.sleep(10)
        elapsed = anyio.current_time() - start
        assert scope.cancelled_caught and scope.cancel_called
        if virtual:
            assert elapsed == 0.05
        else:
            assert 0.05 <= elapsed < 5, elapsed

        with pytest.raises(TimeoutError):
            with anyio.fail_after(0.02):
                await anyio.Event().wait()

        # A deadline in the past cancels at the first checkpoint.
        reached = []
        with anyio.move_on_after(-1) as scope:
            reached.append("before")
            await checkpoint()
            reached.append("after")
        assert reached == ["before"] and scope.cancelled_caught

        # The outer (earlier) deadline wins; the inner scope does not raise.
        with anyio.move_on_after(0.02) as outer:
            with anyio.fail_after(5) as inner:
                await anyio.sleep(10)
        assert outer.cancelled_caught and not inner.cancelled_caught

        # A deadline that did not expire leaves the body alone.
        with anyio.fail_after(5) as scope:
            await anyio.sleep(0.001)
        assert not scope.cancel_called

    anyio_run_vt(main)


def test_shielded_scope_and_task_group_cancellation(anyio_run_vt):
    async def main():
        virtual = is_virtual(asyncio.get_running_loop())
        steps = []
        start = anyio.current_time()
        with anyio.move_on_after(0.02) as outer:
            with anyio.CancelScope(shield=True):
                await anyio.sleep(0.1)  # the outer deadline passes meanwhile
                steps.append("shielded sleep done")
            steps.append("after the shield")
            await checkpoint()
            steps.append("never")
        assert steps == ["shielded sleep done", "after the shield"]
        assert outer.cancelled_caught
        if virtual:
            assert (start, anyio.current_time()) == (0.0, 0.1)
        else:
            assert anyio.current_time() - start >= 0.1

        cancelled = []

        async def child(n):
            try:
                await anyio.sleep(10)
            except anyio.get_cancelled_exc_class():
                cancelled.append(n)
                raise

        async with anyio.create_task_group() as tg:
            for n in range(5):
                tg.start_soon(child, n)
            await until(lambda: len(asyncio.all_tasks()) >= 6)
            await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
        assert sorted(cancelled) == [0, 1, 2, 3, 4]

        # A failing child cancels its siblings, and the error comes out as a group.
        async def fail():
            await anyio.sleep(0.01)
            raise ValueError("child failed")

        with pytest.raises(ExceptionGroup) as caught:
            async with anyio.create_task_group() as tg:
                tg.start_soon(child, "sibling")
                tg.start_soon(fail)
        assert [repr(exc) for exc in caught.value.exceptions] == ["ValueError('child failed')"]
        assert "sibling" in cancelled

    anyio_run_vt(main)
