"""Seeded scheduling (issue 12, under way): io_order, io_delay, timer_ties, fingerprints, replay.

A race that asyncio can produce (two fds ready in one poll, handled in either
order) is found under some seed and replayed exactly; one that asyncio cannot
produce (reordering call_soon) is never reported.
"""

from __future__ import annotations

import asyncio
import socket

import pytest
from _loopkit import collect_unless_refcounted, run_under_snakeloop
from _race import bank

import snakeloop
from snakeloop.perturbation import IMPLEMENTED
from snakeloop.seeding import DEFAULT_DIMENSIONS, derive_seed, parse_perturb, parse_seed

pytestmark = pytest.mark.timeout(60)

DEFAULTS = tuple(name for name in DEFAULT_DIMENSIONS if name in IMPLEMENTED)


# -- the pieces ----------------------------------------------------------------------------


def test_seeds_parse_and_derive():
    assert parse_seed(7) == 7
    assert parse_seed("18446744073709551615") == 2**64 - 1
    assert 0 <= parse_seed("random") < 2**64
    with pytest.raises(ValueError, match="whole number from 0 to 2\\*\\*64-1"):
        parse_seed(-1)
    with pytest.raises(ValueError, match="'random' or 'draw'"):
        parse_seed("12a")
    with pytest.raises(TypeError, match="not float"):
        parse_seed(1.5)
    # A test's seed depends on the root and its node id only.
    first = derive_seed(42, "tests/test_a.py::test_one")
    assert first == derive_seed(42, "tests/test_a.py::test_one")
    assert first != derive_seed(42, "tests/test_a.py::test_two")
    assert first != derive_seed(43, "tests/test_a.py::test_one")
    assert first != derive_seed(42, "tests/test_a.py::test_one", 1)


def test_perturb_specs_name_the_mistake():
    assert parse_perturb(None, available=IMPLEMENTED) == dict.fromkeys(DEFAULTS, True)
    assert parse_perturb("none", available=IMPLEMENTED) == {}
    assert parse_perturb("io_delay", available=IMPLEMENTED) == {"io_delay": True}
    assert parse_perturb({"io_order": "full"}, available=IMPLEMENTED) == {"io_order": "full"}
    with pytest.raises(ValueError, match="unknown perturbation 'io_shuffle'"):
        parse_perturb("io_shuffle", available=IMPLEMENTED)
    # Every dimension is built now: a build without one refuses it by name.
    with pytest.raises(
        ValueError, match="'io_latency' is not available yet; this build has io_order"
    ):
        parse_perturb(["io_latency"], available=("io_order",))


def test_a_loop_says_its_seed_and_refuses_perturb_without_one():
    loop = snakeloop.new_event_loop(seed=5)
    try:
        assert loop.seed == 5
        assert loop.perturbation == dict.fromkeys(DEFAULTS, True)
        assert loop.schedule_trace() == []
        assert isinstance(loop.schedule_fingerprint(), str)
    finally:
        loop.close()
    plain = snakeloop.new_event_loop()
    try:
        assert (plain.seed, plain.perturbation, plain.schedule_fingerprint()) == (None, {}, None)
    finally:
        plain.close()
    with pytest.raises(ValueError, match="perturb= needs seed="):
        snakeloop.new_event_loop(perturb="io_order")


# -- a race asyncio can produce (_race.bank) -------------------------------------------


def run_seeded(main, seed, **options):
    loop = snakeloop.new_event_loop(seed=seed, **options)
    try:
        result = loop.run_until_complete(main())
        return result, loop.schedule_fingerprint()
    finally:
        loop.close()


def test_the_race_never_shows_without_a_seed():
    for _ in range(20):
        assert snakeloop.run(bank()) == 40


def test_a_seed_finds_the_race_and_replays_it_exactly():
    failing = None
    for seed in range(200):
        balance, fingerprint = run_seeded(bank, seed)
        if balance != 40:
            failing = seed, balance, fingerprint
            break
    assert failing is not None, "no seed in 200 reordered the two ready connections"
    seed, balance, fingerprint = failing
    assert balance == -20  # both withdrawals went through: what a slower machine can do
    for _ in range(10):
        assert run_seeded(bank, seed) == (balance, fingerprint)


def test_io_order_alone_finds_it_and_none_never_does():
    found = {run_seeded(bank, seed, perturb="io_order")[0] for seed in range(60)}
    assert found == {40, -20}
    assert {run_seeded(bank, seed, perturb="none")[0] for seed in range(60)} == {40}


# -- a race asyncio cannot produce -------------------------------------------------------


async def deposit_then_audit():
    """simloop's example: call_soon(deposit); call_soon(audit) always audits after the deposit."""
    loop = asyncio.get_running_loop()
    account = {"balance": 0}
    seen = []
    ready = loop.create_future()
    a, b = socket.socketpair()
    try:
        a.setblocking(False)
        b.setblocking(False)
        loop.add_reader(a, lambda: (a.recv(10), ready.done() or ready.set_result(None)))
        b.send(b"x")  # I/O in the same iterations, for the perturbation to act on
        loop.call_soon(lambda: account.__setitem__("balance", 1))
        loop.call_soon(lambda: seen.append(account["balance"]))
        await ready
        loop.remove_reader(a)
    finally:
        a.close()
        b.close()
    return seen


def test_call_soon_order_is_never_perturbed():
    for seed in range(300):
        result, _ = run_seeded(
            deposit_then_audit, seed, perturb="all", clock=snakeloop.VirtualClock()
        )
        assert result == [1]


def test_callbacks_keep_fifo_order_under_every_seed():
    async def fifo():
        loop = asyncio.get_running_loop()
        order = []
        pairs = [socket.socketpair() for _ in range(4)]
        try:
            for i, (a, b) in enumerate(pairs):
                a.setblocking(False)
                loop.add_reader(a, lambda i=i, a=a: (a.recv(10), order.append(("io", i))))
                b.send(b"x")
            for i in range(20):
                loop.call_soon(order.append, ("soon", i))
            for _ in range(10):
                await asyncio.sleep(0)
            for a, _ in pairs:
                loop.remove_reader(a)
        finally:
            for a, b in pairs:
                a.close()
                b.close()
        return order

    for seed in range(200):
        order, _ = run_seeded(fifo, seed)
        soon = [i for kind, i in order if kind == "soon"]
        assert soon == list(range(20))  # the FIFO, whatever the I/O did
        assert sorted(i for kind, i in order if kind == "io") == [0, 1, 2, 3]
        # Callbacks queued before the first poll ran before any I/O callback.
        assert order[:20] == [("soon", i) for i in range(20)]


def test_virtual_time_does_not_jump_while_io_is_held():
    async def echo_with_timeout():
        loop = asyncio.get_running_loop()
        a, b = socket.socketpair()
        try:
            a.setblocking(False)
            b.setblocking(False)
            for i in range(50):
                # The reader waits first, so that its readiness goes through the poll.
                recv = asyncio.ensure_future(asyncio.wait_for(loop.sock_recv(b, 10), 1.0))
                for _ in range(3):
                    await asyncio.sleep(0)
                await loop.sock_sendall(a, b"%d" % i)
                # Held I/O is not idleness: the 1 s timeout must never fire.
                assert await recv == b"%d" % i
            return loop.time(), loop.schedule_trace()
        finally:
            a.close()
            b.close()

    held = 0
    for seed in range(30):
        (now, trace), _ = run_seeded(
            echo_with_timeout, seed, perturb="io_order,io_delay", clock=snakeloop.VirtualClock()
        )
        assert now == 0.0
        held += sum(1 for decision in trace if decision.kind == "io_delay")
    assert held > 50  # the readiness was held back, many times


# -- timer ties ----------------------------------------------------------------------------


async def three_ties_and_a_later_timer():
    loop = asyncio.get_running_loop()
    fired = []
    done = loop.create_future()
    when = loop.time() + 1
    for name in "abc":
        loop.call_at(when, fired.append, name)
    loop.call_at(when + 1, lambda: done.set_result(None))
    loop.call_at(when + 0.5, fired.append, "later")
    await done
    return fired


def test_timers_of_one_deadline_fire_in_every_order_and_others_keep_theirs():
    orders = set()
    for seed in range(120):
        fired, _ = run_seeded(three_ties_and_a_later_timer, seed, clock=snakeloop.VirtualClock())
        assert fired[3] == "later"  # a later deadline never overtakes
        orders.add("".join(fired[:3]))
    assert orders == {"abc", "acb", "bac", "bca", "cab", "cba"}
    assert snakeloop.run(three_ties_and_a_later_timer(), clock=snakeloop.VirtualClock()) == [
        "a",
        "b",
        "c",
        "later",
    ]
    assert run_seeded(
        three_ties_and_a_later_timer, 3, perturb="io_order", clock=snakeloop.VirtualClock()
    )[0] == ["a", "b", "c", "later"]


def test_a_tie_is_drawn_among_the_timers_that_can_still_run():
    """A cancelled timer of the deadline takes no place in the draw: every build
    draws the same count, so one seed gives one schedule everywhere."""

    async def main():
        loop = asyncio.get_running_loop()
        fired = []
        when = loop.time() + 1
        handles = [loop.call_at(when, fired.append, name) for name in "abc"]
        handles[1].cancel()
        loop.call_at(when, fired.append, "d")
        await asyncio.sleep(2)
        return fired

    orders = set()
    for seed in range(60):
        loop = snakeloop.new_event_loop(
            seed=seed, perturb="timer_ties", clock=snakeloop.VirtualClock()
        )
        try:
            fired = loop.run_until_complete(main())
            draws = [d.detail for d in loop.schedule_trace() if d.kind == "timer_ties"]
        finally:
            loop.close()
        # a: nothing to draw; b: among a and b; c: among a, b and c; d, once b
        # is cancelled: among a, c and d.
        assert [draw.split()[-1] for draw in draws] == ["2", "3", "3"], draws
        assert sorted(fired) == ["a", "c", "d"]
        orders.add("".join(fired))
    assert orders == {"acd", "adc", "cad", "cda", "dac", "dca"}


class _TimerOwner:
    def tick(self):
        pass


def _tied_timers_fire_or_are_cancelled(loop):
    """Weak references to the owners of four tied timers, one of them cancelled, all gone by."""
    import weakref

    owners = [_TimerOwner() for _ in range(4)]
    refs = [weakref.ref(owner) for owner in owners]
    when = loop.time() + 1
    handles = [loop.call_at(when, owner.tick) for owner in owners]
    handles[1].cancel()
    del handles, owners
    loop.run_until_complete(asyncio.sleep(2))
    return refs


def test_tied_timers_that_fired_or_were_cancelled_are_not_kept_by_the_loop():
    # Compiled, a loop perturbing timer_ties keeps each deadline's timers in an
    # index of its own: a timer that left the heap must leave it too, or its
    # callback (here, its owner) outlives it.  The collector is off, so only
    # references count (without reference counting, a collection shows what is held).
    import gc

    loop = snakeloop.new_event_loop(seed=3, perturb="timer_ties", clock=snakeloop.VirtualClock())
    gc.disable()
    try:
        refs = _tied_timers_fire_or_are_cancelled(loop)
        collect_unless_refcounted()
        assert [ref() for ref in refs] == [None, None, None, None]
    finally:
        gc.enable()
        loop.close()


# -- python -m snakeloop --seed ------------------------------------------------------------


def test_a_script_that_dies_under_a_seed_prints_how_to_replay_it(tmp_path):
    import inspect
    import re

    script = tmp_path / "racy.py"
    script.write_text(
        "import asyncio, socket\n\n" + inspect.getsource(bank) + "\n\nasync def main():\n"
        "    balance = await bank()\n"
        "    assert balance == 40, f'overdrawn: {balance}'\n\n"
        "asyncio.run(main())\n"
    )

    def run(*args, env=None):
        return run_under_snakeloop(script, *args, env=env)

    for seed in range(40):
        first = run("--seed", str(seed))
        if first.returncode:
            break
    else:
        pytest.fail("no seed in 40 made the script fail")
    assert "AssertionError: overdrawn: -20" in first.stderr
    line = re.search(
        r"snakeloop: this run used seed=(\d+) perturb=(\S+) fingerprint=(\w+); ", first.stderr
    )
    assert line is not None, first.stderr
    assert line.group(1) == str(seed)
    assert line.group(2) == ",".join(DEFAULTS)
    assert f"replay: SNAKELOOP_SEED={seed} python -m snakeloop {script}" in first.stderr
    again = run(env={"SNAKELOOP_SEED": str(seed)})
    assert again.returncode == 1
    assert f"fingerprint={line.group(3)};" in again.stderr
    assert "AssertionError: overdrawn: -20" in again.stderr


def test_bad_seed_options_name_the_mistake():
    import subprocess
    import sys

    for args, message in [
        (["--seed", "x1", "s.py"], "a seed is a whole number"),
        (["--perturb", "io_order", "s.py"], "--perturb needs --seed"),
        (["--seed"], "--seed needs a value"),
        (["--fast", "s.py"], "unknown option --fast"),
    ]:
        proc = subprocess.run(
            [sys.executable, "-m", "snakeloop", *args], capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 2
        assert message in proc.stderr


# -- other threads' callbacks --------------------------------------------------------------


async def two_threads_post(count=40):
    import threading

    loop = asyncio.get_running_loop()
    seen = []
    done = asyncio.Event()

    def post(name):
        for i in range(count):
            loop.call_soon_threadsafe(seen.append, (name, i))
        loop.call_soon_threadsafe(done.set)

    threads = [threading.Thread(target=post, args=(name,)) for name in "ab"]
    for thread in threads:
        thread.start()
    while len(seen) < 2 * count:
        await asyncio.sleep(0.001)
    for thread in threads:
        thread.join()
    # The loop's own calls go straight on, in order with call_soon.
    mine = []
    loop.call_soon_threadsafe(mine.append, 1)
    loop.call_soon(mine.append, 2)
    await asyncio.sleep(0)
    return seen, mine


def test_other_threads_calls_are_deferred_in_each_threads_order():
    deferred = 0
    for seed in range(40):
        loop = snakeloop.new_event_loop(seed=seed, perturb="threadsafe")
        try:
            seen, mine = loop.run_until_complete(two_threads_post())
            deferred += sum(1 for d in loop.schedule_trace() if d.kind == "threadsafe")
        finally:
            loop.close()
        for name in "ab":
            assert [i for n, i in seen if n == name] == list(range(40))
        assert mine == [1, 2]
    assert deferred > 100  # callbacks were held back, often


def test_executor_results_arrive_and_held_callbacks_stop_time_from_jumping():
    import time as _time

    async def main():
        loop = asyncio.get_running_loop()
        results = []
        for _ in range(20):
            results.append(await asyncio.wait_for(loop.run_in_executor(None, _time.sleep, 0), 5))
        return results, loop.time()

    for seed in range(20):
        (results, now), _ = run_seeded(
            main, seed, perturb="threadsafe", clock=snakeloop.VirtualClock()
        )
        assert results == [None] * 20
        assert now == 0.0


def test_epoch_moves_where_virtual_time_starts():
    starts = set()
    for seed in range(10):
        loop = snakeloop.new_event_loop(seed=seed, perturb="epoch", clock=snakeloop.VirtualClock())
        try:
            starts.add(loop.time())
            assert 10_000 <= loop.time() <= 200_000
            assert loop.run_until_complete(asyncio.sleep(5, "slept")) == "slept"
        finally:
            loop.close()
    assert len(starts) == 10
    with pytest.raises(ValueError, match="give the loop a VirtualClock"):
        snakeloop.new_event_loop(seed=1, perturb="epoch")


def test_signal_handlers_are_deferred_in_the_order_the_signals_came():
    import os
    import signal

    async def main():
        loop = asyncio.get_running_loop()
        got = []
        done = loop.create_future()

        def handler(name):
            got.append(name)
            if len(got) == 2:
                done.set_result(None)

        loop.add_signal_handler(signal.SIGUSR1, handler, "usr1")
        loop.add_signal_handler(signal.SIGUSR2, handler, "usr2")
        try:
            os.kill(os.getpid(), signal.SIGUSR1)
            os.kill(os.getpid(), signal.SIGUSR2)
            await asyncio.wait_for(done, 5)
        finally:
            loop.remove_signal_handler(signal.SIGUSR1)
            loop.remove_signal_handler(signal.SIGUSR2)
        return got

    deferred = 0
    for seed in range(20):
        loop = snakeloop.new_event_loop(seed=seed, perturb="signals")
        try:
            assert loop.run_until_complete(main()) == ["usr1", "usr2"]
            deferred += sum(1 for d in loop.schedule_trace() if d.kind == "signals")
        finally:
            loop.close()
    assert deferred > 5


# -- replay, decision by decision ------------------------------------------------------------


def record(main, seed, **options):
    loop = snakeloop.new_event_loop(seed=seed, **options)
    try:
        result = loop.run_until_complete(main())
        return result, loop.schedule_fingerprint(), loop.schedule_trace()
    finally:
        loop.close()


def test_a_replay_with_every_peer_inside_matches_its_recording():
    from snakeloop.seeding import ReplayDivergenceWarning

    result, fingerprint, trace = record(bank, 7)
    assert trace  # decisions were made
    # Warnings are errors in this suite: a divergence would fail the test here.
    again = record(bank, 7, replay=trace)
    assert again[:2] == (result, fingerprint)
    with pytest.warns(ReplayDivergenceWarning, match=r"^snakeloop: replay of seed 8 diverged at"):
        record(bank, 8, replay=trace)  # another seed's choices: not this recording


def test_a_replay_that_ends_early_is_not_called_a_replay():
    from snakeloop.seeding import ReplayDivergenceWarning

    _, _, trace = record(bank, 7)
    longer = [*trace, trace[-1]]
    loop = snakeloop.new_event_loop(seed=7, replay=longer)
    loop.run_until_complete(bank())
    with pytest.warns(ReplayDivergenceWarning, match="ended after"):
        loop.close()
    assert "ended after" in loop.schedule_divergence()
    with pytest.raises(ValueError, match="replay= needs seed="):
        snakeloop.new_event_loop(replay=trace)


# -- Hypothesis ----------------------------------------------------------------------------


def test_hypothesis_seeds_the_draws_of_each_example():
    from hypothesis import given, settings
    from hypothesis import seed as hypothesis_seed
    from hypothesis import strategies as st

    from snakeloop.testing._hypothesis import _hypothesis_setup_hook

    _hypothesis_setup_hook()  # what Hypothesis's entry point does when installed

    def drawn_seeds():
        seen = []

        @hypothesis_seed(5)
        @settings(max_examples=8, database=None, derandomize=False)
        @given(st.random_module())  # Hypothesis varies, and replays, registered randoms
        def example(_):
            loop = snakeloop.new_event_loop(seed="draw")
            try:
                seen.append(loop.seed)
            finally:
                loop.close()

        example()
        return seen

    first = drawn_seeds()
    assert len(set(first)) > 1  # each example draws its own
    assert drawn_seeds() == first  # and Hypothesis gives the same example the same seed


# -- shutdown ----------------------------------------------------------------------------


async def leave_tasks_behind(count, cancelled):
    async def linger(index):
        try:
            await asyncio.sleep(3600)
        finally:
            cancelled.append(index)

    for index in range(count):
        asyncio.create_task(linger(index))
    await asyncio.sleep(0)


@pytest.mark.parametrize("stdlib_futures", [False, True], ids=["snake-tasks", "c-tasks"])
def test_leftover_tasks_are_cancelled_in_the_order_they_were_made(stdlib_futures):
    # asyncio.Runner cancels them in a set's order, which follows their addresses; on a
    # seeded loop that would make the shutdown of a replay differ from its recording.
    for seed in range(5):
        cancelled = []
        snakeloop.run(leave_tasks_behind(60, cancelled), seed=seed, stdlib_futures=stdlib_futures)
        assert cancelled == list(range(60))


def test_a_leftover_that_fails_on_cancel_is_reported_as_asyncio_reports_it():
    async def main():
        async def refuses():
            try:
                await asyncio.sleep(3600)
            finally:
                raise ValueError("refused")  # noqa: B012

        asyncio.get_running_loop().set_exception_handler(
            lambda loop, context: seen.append((context["message"], repr(context["exception"])))
        )
        asyncio.create_task(refuses())
        await asyncio.sleep(0)

    seen = []
    asyncio.run(main())
    stdlib = list(seen)
    seen.clear()
    snakeloop.run(main(), seed=1)
    assert (
        seen
        == stdlib
        == [("unhandled exception during asyncio.run() shutdown", "ValueError('refused')")]
    )
