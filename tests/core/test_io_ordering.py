"""Where readiness callbacks fall among ready callbacks and timers.

One iteration runs what was ready before the poll, then the callbacks of the
fds the poll reported, in the order it reported them, then the timers due by
then; whatever those schedule runs on the next iteration.  snakeloop takes
two shortcuts there (``_run_iterations``): a lone reader's callback runs
without the deque when nothing else is ready and no timer is due, and when
nothing was ready before the poll, the I/O callbacks run from a list of their
own, ahead of the deque.  Every case here runs on the stdlib loop too, and
must come out the same.

Each test registers its readers first and makes their fds readable from a
timer (``kick``), so that the poll that reports them happens with the ready
deque empty, or holding exactly what the test put there.
"""

from __future__ import annotations

import socket

import pytest
from _loopkit import run


class Trace(list):
    """A list that resolves ``done`` when ``last`` is appended to it.

    Nothing polls it: a callback that watched for the end would itself keep
    the ready deque busy, and the iterations under test need it empty.
    """

    def __init__(self, loop, last):
        super().__init__()
        self.last = last
        self.done = loop.create_future()

    def append(self, item):
        super().append(item)
        if item == self.last and not self.done.done():
            self.done.set_result(None)


@pytest.fixture
def pairs():
    made = []

    def make(n):
        new = [socket.socketpair() for _ in range(n)]
        for a, _ in new:
            a.setblocking(False)
        made.extend(new)
        return new

    yield make
    for a, b in made:
        a.close()
        b.close()


def kick_then_trace(loop, trace, kick):
    """Call ``kick`` from a timer, then run until the trace is complete."""
    loop.call_at(loop.time(), kick)
    run(loop, trace.done, 10)


def one_shot_reader(loop, sock, trace, name, *then, after=None):
    """A reader that consumes its byte, stops watching and records ``name``.

    It then schedules recording each of ``then``, and last calls ``after``
    (with ``name``), which may raise.
    """

    def reader():
        sock.recv(1)
        loop.remove_reader(sock)
        trace.append(name)
        for item in then:
            loop.call_soon(trace.append, item)
        if after is not None:
            after(name)

    loop.add_reader(sock, reader)


# These tests make fds readable and then check what one poll does with them.
# A seeded loop may see an fd's event one to three polls late (perturbation
# "io_delay"), as if its bytes had come later, which no program can tell apart;
# so they run on unseeded loops only, and what must hold under any seed is
# checked by the tests without the mark.
ONE_POLL = "checks what one poll does with fds that are readable at it; io_delay defers events"


def send_to_all(made):
    """Make the first socket of every pair readable."""
    for _, b in made:
        b.send(b"x")


def test_lone_reader_then_what_it_schedules(fake_loop, pairs):
    ((a, b),) = pairs(1)
    trace = Trace(fake_loop, "soon-from-reader")
    one_shot_reader(fake_loop, a, trace, "reader", "soon-from-reader")
    kick_then_trace(fake_loop, trace, lambda: b.send(b"x"))
    assert trace == ["reader", "soon-from-reader"]


@pytest.mark.unseeded(ONE_POLL)
def test_reader_runs_before_a_due_timer_and_both_before_what_they_schedule(fake_loop, pairs):
    ((a, b),) = pairs(1)
    trace = Trace(fake_loop, "soon-from-timer")
    one_shot_reader(fake_loop, a, trace, "reader", "soon-from-reader")

    def timer():
        trace.append("timer")
        fake_loop.call_soon(trace.append, "soon-from-timer")

    def kick():
        b.send(b"x")
        # Due on the next iteration, the one whose poll reports a.
        fake_loop.call_at(fake_loop.time(), timer)

    kick_then_trace(fake_loop, trace, kick)
    assert trace == ["reader", "timer", "soon-from-reader", "soon-from-timer"]


def test_reader_runs_before_a_timer_due_right_after_it(fake_loop, fake_clock, pairs):
    ((a, b),) = pairs(1)
    trace = Trace(fake_loop, "timer")

    def reader():
        a.recv(1)
        fake_loop.remove_reader(a)
        trace.append("reader")
        fake_loop.call_soon(trace.append, "soon-from-reader")
        # The clock moves while the reader runs: a timer that falls due now
        # was not due when the iteration looked, so it waits for the next.
        fake_clock.advance(1.0)

    fake_loop.add_reader(a, reader)

    def kick():
        b.send(b"x")
        fake_loop.call_at(fake_loop.time() + 0.5, trace.append, "timer")

    kick_then_trace(fake_loop, trace, kick)
    assert trace == ["reader", "soon-from-reader", "timer"]


def test_callbacks_ready_before_the_poll_run_before_the_reader(fake_loop, pairs):
    ((a, b),) = pairs(1)
    trace = Trace(fake_loop, "reader")
    one_shot_reader(fake_loop, a, trace, "reader")

    def kick():
        b.send(b"x")
        fake_loop.call_soon(trace.append, "soon")

    kick_then_trace(fake_loop, trace, kick)
    assert trace == ["soon", "reader"]


def test_reader_replaced_mid_batch_is_not_run_on_the_old_event(fake_loop, pairs):
    (a, a_peer), (b, b_peer) = pairs(2)
    trace = Trace(fake_loop, "new b")

    def reader_a():
        a.recv(1)
        fake_loop.remove_reader(a)
        trace.append("a")
        # Whichever of a and b the poll reported first, the old reader of b
        # must not run any more: the new one runs after the next poll.
        fake_loop.remove_reader(b)
        one_shot_reader(fake_loop, b, trace, "new b")
        # The new reader runs after the next poll, so after this.
        fake_loop.call_soon(trace.append, "soon-from-a")

    fake_loop.add_reader(a, reader_a)
    fake_loop.add_reader(b, trace.append, "old b")

    def kick():
        a_peer.send(b"x")
        b_peer.send(b"x")

    kick_then_trace(fake_loop, trace, kick)
    # The old reader of b does not consume: it runs on every poll that reports
    # b before a's reader replaces it (none, once or, when a's event is seen a
    # few polls late, several times), and never after that.
    replaced = trace.index("a")
    assert trace[:replaced] == ["old b"] * replaced
    assert trace[replaced:] == ["a", "soon-from-a", "new b"]


@pytest.mark.unseeded(ONE_POLL)
def test_several_readers_run_in_one_iteration_before_what_they_schedule(fake_loop, pairs):
    made = pairs(3)
    last = "soon-r2"
    trace = Trace(fake_loop, last)
    for i, (a, _) in enumerate(made):
        one_shot_reader(fake_loop, a, trace, f"r{i}", f"soon-r{i}")

    kick_then_trace(fake_loop, trace, lambda: send_to_all(made))
    readers = [t for t in trace if not t.startswith("soon")]
    assert sorted(readers) == ["r0", "r1", "r2"]
    # One poll reported all three, so all ran before anything they
    # scheduled, and what they scheduled runs in their order.  (Trace stops
    # at soon-r2, which is last only when r2 ran last.)
    soon = [f"soon-{name}" for name in readers]
    assert trace == readers + soon[: soon.index(last) + 1]


def test_several_readers_each_run_before_what_they_schedule(fake_loop, pairs):
    made = pairs(3)
    trace = Trace(fake_loop, None)
    expected = {f"soon-r{i}" for i in range(3)}

    def reader_done(name):
        fake_loop.call_soon(check_done)

    def check_done():
        if expected <= set(trace) and not trace.done.done():
            trace.done.set_result(None)

    for i, (a, _) in enumerate(made):
        one_shot_reader(fake_loop, a, trace, f"r{i}", f"soon-r{i}", after=reader_done)

    kick_then_trace(fake_loop, trace, lambda: send_to_all(made))
    readers = [t for t in trace if not t.startswith("soon")]
    assert sorted(readers) == ["r0", "r1", "r2"]
    # However the polls split and order them, each reader runs once, before
    # what it scheduled, and what they scheduled runs in their order.
    for name in readers:
        assert trace.index(name) < trace.index(f"soon-{name}")
    assert [t for t in trace if t.startswith("soon")] == [f"soon-{name}" for name in readers]


@pytest.mark.unseeded(ONE_POLL)
def test_several_readers_run_before_a_due_timer(fake_loop, pairs):
    made = pairs(2)
    trace = Trace(fake_loop, "soon-from-timer")
    for i, (a, _) in enumerate(made):
        one_shot_reader(fake_loop, a, trace, f"r{i}", f"soon-r{i}")

    def timer():
        trace.append("timer")
        fake_loop.call_soon(trace.append, "soon-from-timer")

    def kick():
        send_to_all(made)
        fake_loop.call_at(fake_loop.time(), timer)

    kick_then_trace(fake_loop, trace, kick)
    readers = trace[:2]
    assert sorted(readers) == ["r0", "r1"]
    soon = [f"soon-{name}" for name in readers]
    assert trace == readers + ["timer"] + soon + ["soon-from-timer"]


@pytest.mark.unseeded(ONE_POLL)
def test_reader_cancelling_a_timer_due_in_its_iteration(fake_loop, pairs):
    made = pairs(2)
    trace = Trace(fake_loop, "soon")
    timer = None

    for i, (a, _) in enumerate(made):
        one_shot_reader(fake_loop, a, trace, f"r{i}", "soon", after=lambda name: timer.cancel())

    def kick():
        nonlocal timer
        send_to_all(made)
        timer = fake_loop.call_at(fake_loop.time(), trace.append, "timer")

    kick_then_trace(fake_loop, trace, kick)
    # The timer was queued behind the readers, cancelled, and skipped.
    assert sorted(trace[:2]) == ["r0", "r1"]
    assert trace[2:] == ["soon", "soon"]


@pytest.mark.unseeded(ONE_POLL)
def test_reader_raising_does_not_stop_the_batch(fake_loop, pairs):
    made = pairs(2)
    trace = Trace(fake_loop, "soon")
    errors = []
    fake_loop.set_exception_handler(lambda loop, context: errors.append(context["exception"]))

    def fail(name):
        raise ZeroDivisionError(name)

    for i, (a, _) in enumerate(made):
        one_shot_reader(fake_loop, a, trace, f"r{i}", "soon", after=fail)

    kick_then_trace(fake_loop, trace, lambda: send_to_all(made))
    assert sorted(trace[:2]) == ["r0", "r1"]
    assert trace[2:] == ["soon", "soon"]
    assert sorted(str(e) for e in errors) == ["r0", "r1"]


def test_reader_of_a_socket_written_by_a_callback_runs_after_what_it_scheduled(fake_loop, pairs):
    # asyncio polls before each batch, so the write is seen by the next
    # iteration's poll, whose batch starts with what the writer scheduled.
    # (A loop that polled after its ready callbacks, as libuv does, would
    # run the reader first.)
    ((a, b),) = pairs(1)
    trace = Trace(fake_loop, "reader")
    one_shot_reader(fake_loop, a, trace, "reader")

    def writer():
        b.send(b"x")
        trace.append("writer")
        fake_loop.call_soon(trace.append, "soon-from-writer")

    kick_then_trace(fake_loop, trace, writer)
    assert trace == ["writer", "soon-from-writer", "reader"]


@pytest.mark.unseeded(ONE_POLL)
def test_keyboard_interrupt_in_a_reader_keeps_the_rest_of_the_batch(fake_loop, pairs):
    made = pairs(2)
    trace = Trace(fake_loop, "after")
    interrupted = False

    def interrupt_once(name):
        nonlocal interrupted
        if not interrupted:
            interrupted = True
            raise KeyboardInterrupt

    for i, (a, _) in enumerate(made):
        one_shot_reader(fake_loop, a, trace, f"r{i}", after=interrupt_once)

    with pytest.raises(KeyboardInterrupt):
        kick_then_trace(fake_loop, trace, lambda: send_to_all(made))
    assert len(trace) == 1
    # The other reader was already in the interrupted iteration's batch: it
    # runs first when the loop runs again, before anything scheduled since.
    fake_loop.call_soon(trace.append, "after")
    run(fake_loop, trace.done, 10)
    assert sorted(trace[:2]) == ["r0", "r1"]
    assert trace[2:] == ["after"]
