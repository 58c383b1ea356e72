"""Virtual time inside the real loop: jumps beside real sockets, threads and children.

Each scenario runs on snakeloop's own Task and on the C ``asyncio.Task``
(``stdlib_futures=True``).  Wall-clock bounds are loose (a busy 2-core
machine); virtual-time bounds are exact.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import snakeloop
from snakeloop import DeadlockError, StallError, VirtualClock, VirtualTimeoutError
from snakeloop.virtualtime import autojump_paused, external, wait_all_tasks_blocked

TASK_KINDS = pytest.mark.parametrize("stdlib_futures", [False, True], ids=["snake", "ctask"])


def run_virtual(main, *, stdlib_futures=False, **clock_options):
    clock = VirtualClock(**clock_options)
    return snakeloop.run(main(), clock=clock, stdlib_futures=stdlib_futures)


# -- jumps beside real I/O -------------------------------------------------------------


@TASK_KINDS
def test_an_hour_of_sleep_beside_a_loopback_echo_takes_no_real_time(stdlib_futures):
    async def main():
        loop = asyncio.get_running_loop()
        handler_done = asyncio.Event()

        async def echo(reader, writer):
            while data := await reader.read(1024):
                writer.write(data)
                await writer.drain()
            writer.close()
            await writer.wait_closed()
            handler_done.set()

        server = await asyncio.start_server(echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)

        async def chat():
            replies = []
            for i in range(200):
                writer.write(b"ping %d\n" % i)
                replies.append(await reader.readline())
                await asyncio.sleep(18)  # 200 x 18 s = one hour
            return replies

        started = loop.time()
        sleeper = asyncio.create_task(asyncio.sleep(3600, "slept"))
        replies = await chat()
        assert await sleeper == "slept"
        writer.close()
        await writer.wait_closed()
        await handler_done.wait()
        server.close()
        await server.wait_closed()
        return replies, loop.time() - started

    wall = time.monotonic()
    replies, virtual = run_virtual(main, stdlib_futures=stdlib_futures)
    wall = time.monotonic() - wall
    assert replies == [b"ping %d\n" % i for i in range(200)]
    assert virtual == 3600.0
    assert wall < 1.0


@TASK_KINDS
def test_timeouts_fire_at_exact_virtual_times(stdlib_futures):
    async def main():
        loop = asyncio.get_running_loop()
        seen = {}
        try:
            await asyncio.wait_for(asyncio.sleep(10), 2.5)
        except TimeoutError:
            seen["wait_for"] = loop.time()
        try:
            async with asyncio.timeout(1.25):
                await asyncio.Event().wait()
        except TimeoutError:
            seen["timeout"] = loop.time()
        queue: asyncio.Queue[int] = asyncio.Queue()
        try:
            await asyncio.wait_for(queue.get(), 0.5)
        except TimeoutError:
            seen["queue"] = loop.time()
        order = []
        async with asyncio.TaskGroup() as group:
            for delay in (3, 1, 2):
                group.create_task(asyncio.sleep(delay)).add_done_callback(
                    lambda _, d=delay: order.append((d, loop.time()))
                )
        seen["taskgroup"] = order
        fired = loop.create_future()
        loop.call_at(loop.time() + 7.75, lambda: fired.set_result(loop.time()))
        seen["call_at"] = await fired
        return seen

    seen = run_virtual(main, stdlib_futures=stdlib_futures)
    assert seen == {
        "wait_for": 2.5,
        "timeout": 3.75,
        "queue": 4.25,
        "taskgroup": [(1, 5.25), (2, 6.25), (3, 7.25)],
        "call_at": 15.0,
    }


def test_timers_never_fire_early_and_time_never_goes_back():
    delays = [((i * 7919) % 1000) / 137.0 for i in range(300)]

    async def main():
        loop = asyncio.get_running_loop()
        seen = []
        done = loop.create_future()

        def fire(when):
            seen.append((when, loop.time()))
            if len(seen) == len(delays):
                done.set_result(None)

        for delay in delays:
            when = loop.time() + delay
            loop.call_at(when, fire, when)
        await done
        return seen, loop.get_clock().resolution

    seen, resolution = run_virtual(main)
    readings = [now for _, now in seen]
    assert readings == sorted(readings)
    for when, now in seen:
        # Deadlines are read to the nearest tick, as the loop fires every timer
        # due within one clock resolution.
        assert now >= round(when / resolution) * resolution - 1e-12
        assert now - when < resolution


@TASK_KINDS
def test_tls_and_udp_over_loopback_in_virtual_time(stdlib_futures):
    import ssl

    certs = pytest.importorskip("test.test_asyncio.utils")
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(certs.SIGNED_CERTFILE)
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.load_verify_locations(certs.SIGNING_CA)

    async def main():
        loop = asyncio.get_running_loop()
        handled = asyncio.Event()

        async def greet(reader, writer):
            await asyncio.sleep(600)  # a slow server: ten virtual minutes
            writer.write(b"hello " + await reader.readline())
            await writer.drain()
            writer.close()
            await writer.wait_closed()
            handled.set()

        server = await asyncio.start_server(greet, "127.0.0.1", 0, ssl=server_ctx)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=client_ctx, server_hostname="localhost"
        )
        writer.write(b"tls\n")
        greeting = await asyncio.wait_for(reader.readline(), 601)
        tls_at = loop.time()
        writer.close()
        await writer.wait_closed()
        await handled.wait()
        server.close()
        await server.wait_closed()

        received = loop.create_future()

        class Echo(asyncio.DatagramProtocol):
            def connection_made(self, transport):
                self.transport = transport

            def datagram_received(self, data, addr):
                loop.call_later(30, self.transport.sendto, data.upper(), addr)

        class Client(asyncio.DatagramProtocol):
            def datagram_received(self, data, addr):
                received.set_result((data, loop.time()))

        echo, _ = await loop.create_datagram_endpoint(Echo, local_addr=("127.0.0.1", 0))
        client, _ = await loop.create_datagram_endpoint(
            Client, remote_addr=echo.get_extra_info("sockname")
        )
        client.sendto(b"udp")
        datagram = await asyncio.wait_for(received, 31)
        client.close()
        echo.close()
        return greeting, tls_at, datagram

    wall = time.monotonic()
    greeting, tls_at, datagram = run_virtual(main, stdlib_futures=stdlib_futures)
    assert greeting == b"hello tls\n"
    assert tls_at == 600.0
    assert datagram == (b"UDP", 630.0)
    assert time.monotonic() - wall < 2.0


# -- what holds the jump --------------------------------------------------------------


@TASK_KINDS
def test_an_executor_job_holds_the_jump(stdlib_futures):
    async def main():
        loop = asyncio.get_running_loop()
        sleeper = asyncio.create_task(asyncio.sleep(5))
        # 0.2 s of real work: virtual time must not jump to the sleeper's 5 s meanwhile.
        done_at = await loop.run_in_executor(None, lambda: time.sleep(0.2) or loop.time())
        assert not sleeper.done()
        await sleeper
        return done_at, loop.time()

    assert run_virtual(main, stdlib_futures=stdlib_futures) == (0.0, 5.0)


def test_to_thread_holds_the_jump():
    async def main():
        loop = asyncio.get_running_loop()
        result = await asyncio.wait_for(asyncio.to_thread(time.sleep, 0.2), 1.0)
        return result, loop.time()

    assert run_virtual(main) == (None, 0.0)


@TASK_KINDS
def test_a_child_process_holds_the_jump(stdlib_futures):
    async def main():
        loop = asyncio.get_running_loop()
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            "import time; time.sleep(0.2); print('done')",
            stdout=subprocess.PIPE,
        )
        out = await asyncio.wait_for(proc.communicate(), 1.0)
        return out[0], proc.returncode, loop.time()

    assert run_virtual(main, stdlib_futures=stdlib_futures) == (b"done\n", 0, 0.0)


def _outside_server(reply_after: float):
    """A TCP server in a plain thread: a peer outside the loop, answering after a real delay."""
    import socket

    listener = socket.create_server(("127.0.0.1", 0))

    def serve():
        conn, _ = listener.accept()
        with conn:
            request = conn.recv(100)
            time.sleep(reply_after)
            try:
                conn.sendall(b"re: " + request)
            except OSError:
                pass  # the client gave up and closed first

    thread = threading.Thread(target=serve)
    thread.start()
    return listener, thread


@pytest.mark.parametrize(
    ("reply_after", "expected"),
    [(0.1, (b"re: ping\n", 0.0)), (0.6, ("timed out", 5.0))],
    ids=["reply-within-the-window", "reply-after-the-window"],
)
def test_a_request_to_an_outside_peer_holds_time_for_the_reply_window(reply_after, expected):
    listener, thread = _outside_server(reply_after)

    async def main():
        loop = asyncio.get_running_loop()
        reader, writer = await asyncio.open_connection(*listener.getsockname())
        writer.write(b"ping\n")
        try:
            outcome = await asyncio.wait_for(reader.readline(), 5.0), loop.time()
        except TimeoutError:
            # Past reply_window (0.25 s) the socket no longer holds time: the
            # documented limit; external() or external_time="real" cover it.
            outcome = "timed out", loop.time()
        writer.close()
        await writer.wait_closed()
        return outcome

    try:
        assert run_virtual(main) == expected
    finally:
        thread.join()
        listener.close()


def test_external_block_holds_the_jump():
    async def main():
        loop = asyncio.get_running_loop()
        answer = loop.create_future()
        # A thread the loop knows nothing of: only the external() mark holds time.
        threading.Timer(0.2, loop.call_soon_threadsafe, (answer.set_result, "late")).start()
        with external("a thread of the test"):
            result = await asyncio.wait_for(answer, 1.0)
        return result, loop.time()

    assert run_virtual(main) == ("late", 0.0)


def test_without_a_mark_an_unknown_thread_does_not_hold_time():
    async def main():
        loop = asyncio.get_running_loop()
        answer = loop.create_future()

        def answer_late():
            if not answer.done():
                answer.set_result("late")

        timer = threading.Timer(0.2, loop.call_soon_threadsafe, (answer_late,))
        timer.start()
        try:
            await asyncio.wait_for(answer, 1.0)
        except TimeoutError:
            outcome = "timed out", loop.time()
        timer.join()
        return outcome

    # The documented hazard (trio #456): time jumps while an unmarked thread works.
    assert run_virtual(main) == ("timed out", 1.0)


def test_autojump_paused_lets_time_follow_real_time():
    async def main():
        loop = asyncio.get_running_loop()
        wall = time.monotonic()
        with autojump_paused():
            await asyncio.sleep(0.1)
        return loop.time(), time.monotonic() - wall

    virtual, wall = run_virtual(main)
    assert virtual >= 0.1
    assert wall >= 0.09


def test_external_time_real_lets_timers_fire_during_outside_work():
    async def main():
        loop = asyncio.get_running_loop()
        ticks = []

        async def ticker():
            for _ in range(3):
                await asyncio.sleep(0.05)
                ticks.append(loop.time())

        job = loop.run_in_executor(None, time.sleep, 0.4)
        await ticker()
        assert not job.done()
        await job
        return ticks

    ticks = run_virtual(main, external_time="real")
    assert len(ticks) == 3 and ticks[-1] < 0.4


# -- end and stall ---------------------------------------------------------------------


@TASK_KINDS
def test_end_stops_with_virtual_timeout_error(stdlib_futures):
    async def main():
        await asyncio.sleep(30)
        await asyncio.sleep(3600)

    with pytest.raises(VirtualTimeoutError) as info:
        run_virtual(main, stdlib_futures=stdlib_futures, end=60.0)
    message = str(info.value)
    assert message.startswith("snakeloop: virtual time reached end=60.0 (")
    assert "s real) and the test is still running; 1 tasks pending:\n" in message
    assert isinstance(info.value, TimeoutError)
    assert "main" in info.value.report


def test_frozen_time_raises_stall_error_naming_the_work():
    release = threading.Event()

    def stuck_job():
        release.wait(5)

    async def main():
        loop = asyncio.get_running_loop()
        await asyncio.wait_for(loop.run_in_executor(None, stuck_job), 10)

    try:
        with pytest.raises(StallError) as info:
            run_virtual(main, stall_timeout=0.2)
    finally:
        release.set()
    message = str(info.value)
    assert message.startswith(
        "snakeloop: virtual time has been frozen for 0.2 s of real time waiting on "
        "external work:\n  executor job "
    )
    assert "stuck_job (running 0." in message
    assert message.endswith(
        "Use VirtualClock(external_time='real') to let virtual time follow real time, "
        "mark the work with snakeloop.testing.external(), or raise stall_timeout."
    )


# -- deadlocks ---------------------------------------------------------------------------


@TASK_KINDS
def test_a_deadlock_raises_with_the_await_chain(stdlib_futures):
    async def consume(queue):
        return await queue.get()  # line: CONSUME

    async def main():
        queue: asyncio.Queue[int] = asyncio.Queue()
        consumer = asyncio.create_task(consume(queue), name="consumer")
        return await consumer

    with pytest.raises(DeadlockError) as info:
        run_virtual(main, stdlib_futures=stdlib_futures)
    message = str(info.value)
    assert message.startswith("snakeloop: deadlock: ")
    assert "Task 'consumer'" in message
    line = consume.__code__.co_firstlineno + 1
    assert f"test_virtual_time.py:{line} in " in message
    assert "asyncio/queues.py:" in message
    assert info.value.report in message


def test_threads_older_than_the_loop_do_not_hide_a_deadlock(asyncio_errors):
    # A pool left by an earlier test, or the runner's own threads: they cannot know this loop.
    leftover_done = threading.Event()
    leftover = threading.Thread(target=leftover_done.wait, name="leftover")
    leftover.start()

    async def main():
        await asyncio.Event().wait()

    try:
        with pytest.raises(DeadlockError):
            run_virtual(main)
        # on_deadlock="log" still ignores them: the loop logs and waits, and is not stalled.
        loop = snakeloop.new_event_loop(clock=VirtualClock(stall_timeout=0.2), on_deadlock="log")
        try:
            rescued = loop.create_future()
            handler = _OnLog(lambda: loop.call_soon_threadsafe(rescued.set_result, "logged"))
            logging.getLogger("snakeloop").addHandler(handler)
            try:
                assert loop.run_until_complete(rescued) == "logged"
            finally:
                logging.getLogger("snakeloop").removeHandler(handler)
        finally:
            loop.close()
    finally:
        leftover_done.set()
        leftover.join()


class _OnLog(logging.Handler):
    def __init__(self, action):
        super().__init__(logging.ERROR)
        self.action = action

    def emit(self, record):
        self.action()


def test_a_thread_the_program_started_can_still_wake_it():
    async def main():
        loop = asyncio.get_running_loop()
        woken = asyncio.Event()
        # No timer, no job: only this thread, started by the program, can wake the loop.
        threading.Timer(0.2, loop.call_soon_threadsafe, (woken.set,)).start()
        await woken.wait()
        return loop.time()

    assert run_virtual(main) == 0.0


def test_a_wait_for_a_signal_is_not_a_deadlock():
    async def main():
        loop = asyncio.get_running_loop()
        got = loop.create_future()
        loop.add_signal_handler(signal.SIGUSR1, got.set_result, "signalled")
        # Another process sends it: the loop neither started nor watches that process.
        sender = subprocess.Popen(
            [sys.executable, "-c", f"import os, time; time.sleep(0.2); os.kill({os.getpid()}, 10)"]
        )
        try:
            return await got
        finally:
            loop.remove_signal_handler(signal.SIGUSR1)
            await asyncio.to_thread(sender.wait)

    assert run_virtual(main) == "signalled"


def test_production_loop_logs_a_deadlock_once_and_keeps_waiting(tmp_path):
    script = tmp_path / "stuck.py"
    script.write_text(
        textwrap.dedent(
            """
            import asyncio, logging, signal, snakeloop
            logging.basicConfig(format="%(levelname)s %(name)s %(message)s")
            signal.setitimer(signal.ITIMER_REAL, 2.0)  # SIGALRM's default action ends us

            async def waiter(event):
                await event.wait()

            async def main():
                await asyncio.create_task(waiter(asyncio.Event()), name="waiter")

            snakeloop.run(main())
            """
        )
    )
    proc = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "SNAKELOOP_DEADLOCK": ""},
    )
    assert proc.returncode == -signal.SIGALRM
    assert proc.stderr.count("ERROR snakeloop snakeloop: deadlock: ") == 1
    assert "Task 'waiter'" in proc.stderr


def test_on_deadlock_raise_works_on_a_real_clock_too():
    async def main():
        await asyncio.Event().wait()

    with pytest.raises(DeadlockError):
        snakeloop.run(main(), on_deadlock="raise")


# -- wait_all_tasks_blocked ---------------------------------------------------------------


def test_wait_all_tasks_blocked_wakes_before_time_jumps():
    async def main():
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[int] = asyncio.Queue()
        got = []

        async def worker():
            while True:
                got.append(await queue.get())

        task = asyncio.create_task(worker())
        sleeper = asyncio.create_task(asyncio.sleep(10))
        for i in range(3):
            queue.put_nowait(i)
        await wait_all_tasks_blocked()
        seen = list(got), loop.time(), sleeper.done()
        task.cancel()
        sleeper.cancel()
        return seen

    assert run_virtual(main) == ([0, 1, 2], 0.0, False)


def test_wait_all_tasks_blocked_on_a_real_clock():
    async def main():
        loop = asyncio.get_running_loop()
        done = []

        async def chain(n):
            for _ in range(n):
                await asyncio.sleep(0)
            done.append(n)

        for n in (5, 1, 3):
            asyncio.create_task(chain(n))
        await wait_all_tasks_blocked(0.01)
        return sorted(done), loop._virtual_time is None

    assert snakeloop.run(main()) == ([1, 3, 5], True)


# -- entry points ---------------------------------------------------------------------------


def test_python_m_snakeloop_virtual_time(tmp_path):
    script = tmp_path / "sleepy.py"
    script.write_text(
        "import asyncio\n"
        "async def main():\n"
        "    await asyncio.sleep(86400)\n"
        "    print(asyncio.get_running_loop().time())\n"
        "asyncio.run(main())\n"
    )
    wall = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "snakeloop", "--virtual-time", str(script)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "86400.0\n"
    assert time.monotonic() - wall < 30


def test_loop_factory_with_asyncio_run():
    async def main():
        await asyncio.sleep(120)
        return asyncio.get_running_loop().time()

    if sys.version_info >= (3, 12):
        assert asyncio.run(main(), loop_factory=snakeloop.loop_factory(clock=VirtualClock())) == 120
    with asyncio.Runner(loop_factory=snakeloop.loop_factory(clock=VirtualClock(start=5))) as r:
        assert r.run(main()) == 125.0
