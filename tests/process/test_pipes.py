"""connect_read_pipe / connect_write_pipe, on snakeloop and on the stdlib loop.

Every scenario runs on both loops (the ``any_loop`` fixture) and checks what
asyncio promises: the protocol's callback sequence, flow control, EOF,
broken pipes reported through ``connection_lost`` and the exact errors.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import stat
import sys
import tty

import pytest
from _loopkit import collect_unless_refcounted, run_within


class Recorder(asyncio.Protocol):
    """Records every protocol callback in order."""

    def __init__(self, loop):
        self.events = []
        self.data = bytearray()
        self.transport = None
        self.done = loop.create_future()

    def connection_made(self, transport):
        self.transport = transport
        self.events.append("made")

    def data_received(self, data):
        if not self.events or self.events[-1] != "data":
            self.events.append("data")
        self.data += data

    def eof_received(self):
        self.events.append("eof")

    def pause_writing(self):
        self.events.append("pause")

    def resume_writing(self):
        self.events.append("resume")

    def connection_lost(self, exc):
        self.events.append(("lost", type(exc).__name__ if exc else None))
        if not self.done.done():
            self.done.set_result(exc)


run = run_within(10)


async def connect_reader(loop, fd_or_file):
    pipe = fd_or_file if hasattr(fd_or_file, "fileno") else open(fd_or_file, "rb", 0)
    return await loop.connect_read_pipe(lambda: Recorder(loop), pipe)


async def connect_writer(loop, fd_or_file):
    pipe = fd_or_file if hasattr(fd_or_file, "fileno") else open(fd_or_file, "wb", 0)
    return await loop.connect_write_pipe(lambda: Recorder(loop), pipe)


# -- reading ---------------------------------------------------------------


def test_read_to_eof(any_loop):
    loop = any_loop
    r, w = os.pipe()

    async def main():
        tr, proto = await connect_reader(loop, r)
        assert isinstance(tr, asyncio.ReadTransport)
        assert proto.events == ["made"]
        assert tr.is_reading()
        assert tr.get_extra_info("pipe").fileno() == r
        os.write(w, b"hello ")
        os.write(w, b"world")
        os.close(w)
        exc = await proto.done
        await asyncio.sleep(0)
        return exc, proto, tr

    exc, proto, tr = run(loop, main())
    assert exc is None
    assert bytes(proto.data) == b"hello world"
    assert proto.events == ["made", "data", "eof", ("lost", None)]
    assert tr.is_closing()
    assert not tr.is_reading()


def test_read_pipe_is_nonblocking_and_closed_after(any_loop):
    loop = any_loop
    r, w = os.pipe()

    async def main():
        tr, proto = await connect_reader(loop, r)
        assert not os.get_blocking(r)
        os.close(w)
        await proto.done
        await asyncio.sleep(0)

    run(loop, main())
    with pytest.raises(OSError):
        os.fstat(r)


def test_pause_resume_reading(any_loop):
    loop = any_loop
    r, w = os.pipe()

    async def main():
        tr, proto = await connect_reader(loop, r)
        tr.pause_reading()
        tr.pause_reading()  # idempotent
        assert not tr.is_reading()
        os.write(w, b"abc")
        for _ in range(10):
            await asyncio.sleep(0)
        assert proto.data == b""
        tr.resume_reading()
        tr.resume_reading()  # idempotent
        assert tr.is_reading()
        while len(proto.data) < 3:
            await asyncio.sleep(0)
        tr.close()
        tr.pause_reading()  # closing: no-op, no error
        tr.resume_reading()
        assert not tr.is_reading()
        await proto.done
        os.close(w)
        return proto

    proto = run(loop, main())
    assert proto.data == b"abc"
    assert proto.events == ["made", "data", ("lost", None)]


def test_pause_reading_in_connection_made(any_loop):
    loop = any_loop
    r, w = os.pipe()

    class Pausing(Recorder):
        def connection_made(self, transport):
            super().connection_made(transport)
            transport.pause_reading()

    async def main():
        tr, proto = await loop.connect_read_pipe(lambda: Pausing(loop), open(r, "rb", 0))
        os.write(w, b"x")
        for _ in range(5):
            await asyncio.sleep(0)
        assert proto.data == b""
        tr.resume_reading()
        while not proto.data:
            await asyncio.sleep(0)
        tr.close()
        await proto.done
        os.close(w)

    run(loop, main())


def test_close_read_pipe(any_loop):
    loop = any_loop
    r, w = os.pipe()

    async def main():
        tr, proto = await connect_reader(loop, r)
        tr.close()
        tr.close()
        assert tr.is_closing()
        exc = await proto.done
        os.close(w)
        return exc, proto

    exc, proto = run(loop, main())
    assert exc is None
    assert proto.events == ["made", ("lost", None)]


def test_read_socket_as_pipe(any_loop):
    loop = any_loop
    a, b = socket.socketpair()

    async def main():
        tr, proto = await connect_reader(loop, a.detach())
        b.sendall(b"via socket")
        b.close()
        await proto.done
        return proto

    proto = run(loop, main())
    assert proto.data == b"via socket"
    assert proto.events == ["made", "data", "eof", ("lost", None)]


def test_read_fifo(any_loop, tmp_path):
    loop = any_loop
    path = tmp_path / "fifo"
    os.mkfifo(path)
    rfd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    wfd = os.open(path, os.O_WRONLY)

    async def main():
        tr, proto = await connect_reader(loop, rfd)
        os.write(wfd, b"fifo data")
        os.close(wfd)
        await proto.done
        return proto

    proto = run(loop, main())
    assert proto.data == b"fifo data"
    assert proto.events[-2:] == ["eof", ("lost", None)]


def test_read_pty_eio_is_eof(any_loop):
    loop = any_loop
    master, slave = os.openpty()

    async def main():
        tr, proto = await connect_reader(loop, master)
        os.write(slave, b"tty")
        while len(proto.data) < 3:
            await asyncio.sleep(0)
        # Closing the slave makes reads on the master fail with EIO on Linux.
        os.close(slave)
        return await proto.done, proto

    exc, proto = run(loop, main())
    assert proto.data == b"tty"
    # EIO is how a PTY says EOF: no exception-handler report (the fixture
    # fails the test on one), connection_lost gets the OSError.
    if exc is not None:
        assert isinstance(exc, OSError)


def test_read_pipe_rejects_regular_files(any_loop, tmp_path):
    loop = any_loop
    path = tmp_path / "f"
    path.write_bytes(b"data")
    f = open(path, "rb")
    try:
        with pytest.raises(ValueError, match=r"^Pipe transport is for pipes/sockets only\.$"):
            run(loop, loop.connect_read_pipe(asyncio.Protocol, f))
    finally:
        f.close()


def test_write_pipe_rejects_regular_files(any_loop, tmp_path):
    loop = any_loop
    f = open(tmp_path / "f", "wb")
    try:
        with pytest.raises(
            ValueError, match=r"^Pipe transport is only for pipes, sockets and character devices$"
        ):
            run(loop, loop.connect_write_pipe(asyncio.BaseProtocol, f))
    finally:
        f.close()


# -- writing ---------------------------------------------------------------


def test_write_and_close(any_loop):
    loop = any_loop
    r, w = os.pipe()

    async def main():
        tr, proto = await connect_writer(loop, w)
        assert isinstance(tr, asyncio.WriteTransport)
        assert tr.can_write_eof()
        assert tr.get_write_buffer_size() == 0
        assert tr.get_write_buffer_limits() == (16384, 65536)
        tr.write(b"abc")
        tr.write(bytearray(b"def"))
        tr.write(memoryview(b"ghi"))
        tr.write(b"")
        tr.close()
        assert tr.is_closing()
        exc = await proto.done
        return exc, proto

    exc, proto = run(loop, main())
    assert exc is None
    assert proto.events == ["made", ("lost", None)]
    assert os.read(r, 100) == b"abcdefghi"
    assert os.read(r, 100) == b""  # EOF: the write end is closed
    os.close(r)


def test_flow_control_and_drain_on_close(any_loop):
    loop = any_loop
    r, w = os.pipe()
    payload = os.urandom(1 << 20)

    async def main():
        tr, proto = await connect_writer(loop, w)
        tr.write(payload)
        # The pipe takes at most 64 KiB: the rest is buffered and the
        # protocol paused exactly once.
        assert tr.get_write_buffer_size() > 65536
        assert proto.events == ["made", "pause"]
        tr.write(b"tail")
        assert proto.events == ["made", "pause"]
        tr.close()  # flushes first
        received = bytearray()
        reader_done = loop.create_future()

        def on_readable():
            chunk = os.read(r, 1 << 16)
            if chunk:
                received.extend(chunk)
            else:
                loop.remove_reader(r)
                reader_done.set_result(None)

        loop.add_reader(r, on_readable)
        await reader_done
        await proto.done
        return proto, bytes(received)

    proto, received = run(loop, main())
    assert received == payload + b"tail"
    assert proto.events == ["made", "pause", "resume", ("lost", None)]
    os.close(r)


def test_set_write_buffer_limits(any_loop):
    loop = any_loop
    r, w = os.pipe()

    async def main():
        tr, proto = await connect_writer(loop, w)
        tr.set_write_buffer_limits(high=100, low=10)
        assert tr.get_write_buffer_limits() == (10, 100)
        tr.set_write_buffer_limits(high=100)
        assert tr.get_write_buffer_limits() == (25, 100)
        with pytest.raises(ValueError):
            tr.set_write_buffer_limits(high=0, low=1)
        tr.abort()
        await proto.done

    run(loop, main())
    os.close(r)


def test_write_eof(any_loop):
    loop = any_loop
    r, w = os.pipe()

    async def main():
        tr, proto = await connect_writer(loop, w)
        tr.write(b"x")
        tr.write_eof()
        tr.write_eof()  # once is enough
        await proto.done
        return proto

    proto = run(loop, main())
    assert proto.events == ["made", ("lost", None)]
    assert os.read(r, 10) == b"x"
    assert os.read(r, 10) == b""
    os.close(r)


def test_abort_drops_buffer(any_loop):
    loop = any_loop
    r, w = os.pipe()

    async def main():
        tr, proto = await connect_writer(loop, w)
        tr.write(b"y" * (1 << 20))
        assert tr.get_write_buffer_size() > 0
        tr.abort()
        assert tr.get_write_buffer_size() == 0
        exc = await proto.done
        return exc, proto

    exc, proto = run(loop, main())
    assert exc is None
    assert proto.events == ["made", "pause", ("lost", None)]
    os.close(r)


def test_reader_gone_with_empty_buffer(any_loop):
    # The write end turns "readable" (an error condition) when the reader
    # closes: connection_lost(None) arrives without any write failing.
    loop = any_loop
    r, w = os.pipe()

    async def main():
        tr, proto = await connect_writer(loop, w)
        os.close(r)
        return await proto.done, proto

    exc, proto = run(loop, main())
    assert exc is None
    assert proto.events == ["made", ("lost", None)]


def test_reader_gone_with_pending_data(any_loop):
    loop = any_loop
    r, w = os.pipe()

    async def main():
        tr, proto = await connect_writer(loop, w)
        tr.write(b"z" * (1 << 20))
        os.close(r)
        return await proto.done, proto

    exc, proto = run(loop, main())
    assert isinstance(exc, BrokenPipeError)
    assert proto.events[0] == "made"
    assert proto.events[-1] == ("lost", "BrokenPipeError")


def test_broken_pipe_on_write_is_not_raised(any_loop):
    # The reader goes away before the loop could notice: the write itself
    # meets EPIPE, which must end in connection_lost(exc), not raise.
    loop = any_loop
    r, w = os.pipe()

    async def main():
        tr, proto = await connect_writer(loop, w)
        await asyncio.sleep(0)
        # Close the read end and write before the loop sees the error event.
        os.close(r)
        tr.write(b"data")
        return await proto.done, proto, tr

    exc, proto, tr = run(loop, main())
    assert isinstance(exc, BrokenPipeError)
    assert proto.events == ["made", ("lost", "BrokenPipeError")]


def test_writes_after_loss_are_dropped_and_logged(any_loop, caplog):
    loop = any_loop
    r, w = os.pipe()

    async def main():
        tr, proto = await connect_writer(loop, w)
        tr.close()
        await proto.done
        with caplog.at_level(logging.WARNING, logger="asyncio"):
            for _ in range(8):
                tr.write(b"late")
        return tr

    tr = run(loop, main())
    warnings_logged = [
        r for r in caplog.records if "pipe closed by peer or os.write(pipe, data)" in r.message
    ]
    assert len(warnings_logged) == 3  # from the 6th write on, as asyncio
    assert tr.get_write_buffer_size() == 0
    os.close(r)


def test_write_rejects_str(any_loop):
    loop = any_loop
    r, w = os.pipe()

    async def main():
        tr, proto = await connect_writer(loop, w)
        with pytest.raises(AssertionError):
            tr.write("text")
        tr.close()
        await proto.done

    if sys.flags.optimize and loop.__class__.__module__.startswith("asyncio"):
        pytest.skip("asyncio checks with assert")
    run(loop, main())
    os.close(r)


def test_write_pty_and_dev_null(any_loop):
    loop = any_loop
    master, slave = os.openpty()
    tty.setraw(slave)

    async def main():
        tr, proto = await connect_writer(loop, slave)
        tr.write(b"to the tty")
        got = b""
        while len(got) < 10:
            await asyncio.sleep(0)
            try:
                got += os.read(master, 100)
            except BlockingIOError:
                pass
        tr.close()
        await proto.done
        null_tr, null_proto = await loop.connect_write_pipe(
            lambda: Recorder(loop), open(os.devnull, "wb", 0)
        )
        assert stat.S_ISCHR(os.fstat(null_tr.get_extra_info("pipe").fileno()).st_mode)
        null_tr.write(b"x" * 100000)
        null_tr.close()
        await null_proto.done
        return got

    os.set_blocking(master, False)
    assert run(loop, main()) == b"to the tty"
    os.close(master)


def test_bidirectional_socketpair(any_loop):
    loop = any_loop
    a, b = socket.socketpair()

    async def main():
        wt, wp = await connect_writer(loop, os.dup(a.fileno()))
        rt, rp = await connect_reader(loop, a.detach())
        wt.write(b"ping")
        assert b.recv(4) == b"ping"
        b.sendall(b"pong")
        while len(rp.data) < 4:
            await asyncio.sleep(0)
        rt.close()
        wt.close()
        await rp.done
        await wp.done
        b.close()
        return rp

    assert run(loop, main()).data == b"pong"


# -- lifecycle -------------------------------------------------------------


def test_connection_lost_exactly_once(any_loop):
    loop = any_loop
    r, w = os.pipe()
    counts = {"lost": 0}

    class Counting(Recorder):
        def connection_lost(self, exc):
            counts["lost"] += 1
            super().connection_lost(exc)

    async def main():
        tr, proto = await loop.connect_read_pipe(lambda: Counting(loop), open(r, "rb", 0))
        os.close(w)
        tr.close()
        tr.close()
        await proto.done
        for _ in range(5):
            await asyncio.sleep(0)
        tr.close()

    run(loop, main())
    assert counts["lost"] == 1


def test_unclosed_transport_warns(any_loop):
    loop = any_loop
    r, w = os.pipe()

    async def main():
        # Protocols that keep no reference: no cycle, so each transport is
        # finalized by the del below, before its pipe file object.
        rt, _ = await loop.connect_read_pipe(asyncio.Protocol, open(r, "rb", 0))
        wt, _ = await loop.connect_write_pipe(asyncio.BaseProtocol, open(w, "wb", 0))
        return rt, wt

    rt, wt = run(loop, main())
    loop.close()
    # After the loop closed, the repr still says the pipe is open.
    assert "open" in repr(rt)
    assert "open" in repr(wt)
    with pytest.warns(ResourceWarning, match="unclosed transport") as record:
        del rt, wt
        # Without reference counting a finalizer runs at a collection, and what the object
        # held waits for the next one: the task that returned the transports has one too.
        collect_unless_refcounted()
    assert len([w for w in record if "unclosed transport" in str(w.message)]) == 2


def test_repr_states(loop):
    r, w = os.pipe()

    async def main():
        rt, rp = await connect_reader(loop, r)
        wt, wp = await connect_writer(loop, w)
        assert f"fd={r}" in repr(rt) and "polling" in repr(rt)
        rt.pause_reading()
        assert "idle" in repr(rt)
        assert "idle" in repr(wt) and "bufsize=0" in repr(wt)
        wt.write(b"q" * (1 << 20))
        assert "polling" in repr(wt)
        wt.abort()
        rt.close()
        assert "closing" in repr(rt)
        await rp.done
        await wp.done
        assert "closed" in repr(rt) and "closed" in repr(wt)

    run(loop, main())


def test_connect_cancelled_closes_transport(any_loop):
    loop = any_loop
    r, w = os.pipe()

    async def main():
        proto = Recorder(loop)
        task = loop.create_task(loop.connect_read_pipe(lambda: proto, open(r, "rb", 0)))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await proto.done
        return proto

    proto = run(loop, main())
    assert proto.events[-1] == ("lost", None)
    os.close(w)


def test_exception_in_data_received_goes_to_handler(any_loop, loop_errors):
    loop = any_loop
    r, w = os.pipe()

    class Failing(Recorder):
        def data_received(self, data):
            raise ZeroDivisionError

    async def main():
        tr, proto = await loop.connect_read_pipe(lambda: Failing(loop), open(r, "rb", 0))
        os.write(w, b"x")
        while not len(loop_errors):
            await asyncio.sleep(0)
        tr.close()
        await proto.done
        os.close(w)

    run(loop, main())
    assert isinstance(loop_errors[0]["exception"], ZeroDivisionError)


def test_differential_event_sequences():
    """The same scripted session gives the same callback sequence on both loops."""
    from _loopkit import loop_ctx

    def scenario(loop):
        r, w = os.pipe()
        r2, w2 = os.pipe()

        async def main():
            rt, rp = await connect_reader(loop, r)
            wt, wp = await connect_writer(loop, w2)
            os.write(w, b"1")
            while not rp.data:
                await asyncio.sleep(0)
            rt.pause_reading()
            os.write(w, b"2")
            os.close(w)
            await asyncio.sleep(0.01)
            rt.resume_reading()
            await rp.done
            wt.write(b"a" * 200000)
            os.close(r2)
            await wp.done
            return rp.events, bytes(rp.data), wp.events

        return loop.run_until_complete(main())

    results = []
    for kind in ("stdlib", "snakeloop"):
        with loop_ctx(kind) as lp:
            results.append(scenario(lp))
    assert results[0] == results[1]
