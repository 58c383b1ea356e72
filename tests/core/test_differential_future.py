"""snakeloop.Future held against asyncio's pure-Python Future, operation by operation.

A Hypothesis state machine applies the same random sequence of operations to
a snakeloop Future on a snakeloop loop and to ``asyncio.futures._PyFuture``
on a stdlib loop, stepping both loops in lockstep, and requires identical
return values, exception types and messages, callback order and states.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import re

import pytest
from _loopkit import (
    ExceptionRecorder,
    FrozenHeapMixin,
    close_loop,
    future_class,
    machine_examples,
    new_loop,
    run_machine,
    run_once,
)
from _policies import get_policy, set_policy, stdlib_policy_class
from hypothesis import Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    rule,
)

VAR = contextvars.ContextVar("differential_future_var", default="unset")
_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")

EXCEPTION_KINDS = [
    "ValueError",
    "KeyError-class",
    "RuntimeError-empty",
    "StopIteration",
    "StopIteration-class",
    "CancelledError",
    "SystemExit",
    "Exception-args",
]


def make_exception(kind: str):
    """A fresh exception per side: tracebacks attach to the instance."""
    return {
        "ValueError": lambda: ValueError("bad value"),
        "KeyError-class": lambda: KeyError,
        "RuntimeError-empty": lambda: RuntimeError(),
        "StopIteration": lambda: StopIteration("stop"),
        "StopIteration-class": lambda: StopIteration,
        "CancelledError": lambda: asyncio.CancelledError("as exception"),
        "SystemExit": lambda: SystemExit(3),
        "Exception-args": lambda: Exception("a", 1),
    }[kind]()


class Side:
    """One implementation under test: its loop, futures, callbacks and trace."""

    def __init__(self, kind: str, future_cls=None) -> None:
        self.kind = kind
        self.loop = new_loop(kind)
        self.Future = future_cls or future_class(kind)
        self.handler = ExceptionRecorder()
        self.loop.set_exception_handler(self.handler)
        self.futs: list = []
        self.trace: list = []
        self._callbacks: dict[int, object] = {}

    def callback(self, k: int):
        fn = self._callbacks.get(k)
        if fn is None:
            side = self

            def fn(fut):
                side.trace.append(("cb", k, side.norm(fut), VAR.get(), side.snapshot(fut)))

            fn.__qualname__ = fn.__name__ = f"cb{k}"
            self._callbacks[k] = fn
        return fn

    def snapshot(self, fut) -> tuple:
        return (fut.done(), fut.cancelled(), self.call(fut.result))

    def norm(self, value):
        if value is self.loop:
            return "<loop>"
        for i, f in enumerate(self.futs):
            if value is f:
                return ("fut", i)
        if isinstance(value, BaseException):
            return ("exc", type(value), mask(str(value)), value.args if _plain(value) else None)
        if isinstance(value, (list, tuple)):
            return type(value)(self.norm(v) for v in value)
        if isinstance(value, type) and issubclass(value, BaseException):
            return ("exc-class", value)
        if isinstance(value, (int, str, bool, type(None), float)):
            return value
        return ("object", type(value).__name__, mask(repr(value)))

    def call(self, fn, *args, **kwargs):
        try:
            value = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - the outcome is compared
            cause = exc.__cause__
            return (
                "raise",
                type(exc),
                mask(str(exc)),
                None if cause is None else (type(cause), mask(str(cause))),
            )
        return ("ok", self.norm(value))

    def close(self) -> None:
        self.futs.clear()
        self._callbacks.clear()
        close_loop(self.loop)


def _plain(exc: BaseException) -> bool:
    return all(isinstance(a, (int, str, type(None))) for a in exc.args)


def mask(text: str) -> str:
    return _ADDRESS.sub("0x?", text)


class FutureMachine(FrozenHeapMixin, RuleBasedStateMachine):
    CANDIDATE = "snakeloop"
    CANDIDATE_FUTURE = None  # the loop kind's own Future class
    REFERENCE = "stdlib-py"

    futures = Bundle("futures")

    def __init__(self) -> None:
        super().__init__()
        self.ref = Side(self.REFERENCE)
        self.cand = Side(self.CANDIDATE, self.CANDIDATE_FUTURE)
        self.sides = (self.ref, self.cand)
        self.steps: list[str] = []

    # -- helpers

    def both(self, label: str, action) -> None:
        """Apply action(side) to both sides and compare the outcomes."""
        self.steps.append(label)
        results = [side.call(action, side) for side in self.sides]
        assert results[1] == results[0], self.explain(label, results)
        self.check_traces()

    def explain(self, label, results) -> str:
        return (
            f"divergence at {label!r}\n  {self.REFERENCE}: {results[0]!r}\n"
            f"  {self.CANDIDATE}: {results[1]!r}\n  steps so far: {self.steps!r}"
        )

    def check_traces(self) -> None:
        assert self.cand.trace == self.ref.trace, (
            f"callback traces differ\n  {self.REFERENCE}: {self.ref.trace!r}\n"
            f"  {self.CANDIDATE}: {self.cand.trace!r}\n  steps: {self.steps!r}"
        )

    # -- rules

    @rule(target=futures)
    def new_future(self):
        for side in self.sides:
            side.futs.append(side.Future(loop=side.loop))
        self.steps.append("new_future")
        return len(self.ref.futs) - 1

    @rule(f=futures, value=st.integers(min_value=0, max_value=3))
    def set_result(self, f, value):
        self.both(f"set_result({f}, {value})", lambda s: s.futs[f].set_result(value))

    @rule(f=futures, kind=st.sampled_from(EXCEPTION_KINDS))
    def set_exception(self, f, kind):
        self.both(
            f"set_exception({f}, {kind})",
            lambda s: s.futs[f].set_exception(make_exception(kind)),
        )

    @rule(f=futures, msg=st.sampled_from([None, "", "msg-a", "msg-b", 7]))
    def cancel(self, f, msg):
        if msg is None:
            self.both(f"cancel({f})", lambda s: s.futs[f].cancel())
        else:
            self.both(f"cancel({f}, {msg!r})", lambda s: s.futs[f].cancel(msg=msg))

    @rule(f=futures, k=st.integers(min_value=0, max_value=3), with_context=st.booleans())
    def add_done_callback(self, f, k, with_context):
        def action(s):
            if with_context:
                ctx = contextvars.copy_context()
                ctx.run(VAR.set, f"ctx{k}")
                return s.futs[f].add_done_callback(s.callback(k), context=ctx)
            return s.futs[f].add_done_callback(s.callback(k))

        self.both(f"add_done_callback({f}, cb{k}, ctx={with_context})", action)

    @rule(f=futures, k=st.integers(min_value=0, max_value=3))
    def remove_done_callback(self, f, k):
        self.both(
            f"remove_done_callback({f}, cb{k})",
            lambda s: s.futs[f].remove_done_callback(s.callback(k)),
        )

    @rule(
        f=futures,
        query=st.sampled_from(["result", "exception", "done", "cancelled", "get_loop"]),
    )
    def ask(self, f, query):
        self.both(f"{query}({f})", lambda s: getattr(s.futs[f], query)())

    @rule(f=futures, sends=st.integers(min_value=1, max_value=2))
    def await_protocol(self, f, sends):
        def action(s):
            fut = s.futs[f]
            it = fut.__await__()
            out = []
            try:
                for _ in range(sends):
                    yielded = next(it)
                    out.append(("yield", s.norm(yielded), fut._asyncio_future_blocking))
                    fut._asyncio_future_blocking = False
            except StopIteration as stop:
                out.append(("return", s.norm(stop.value)))
            finally:
                it.close()
            return out

        self.both(f"await_protocol({f}, sends={sends})", action)

    @rule(f=futures)
    def is_future(self, f):
        self.both(f"isfuture({f})", lambda s: asyncio.isfuture(s.futs[f]))

    @rule()
    def iterate(self):
        self.both("iterate", lambda s: run_once(s.loop))

    @rule(f=consumes(futures))
    def drop(self, f):
        # Forget the future: an exception nobody looked at gets logged when
        # it is collected (maybe later, if a queued callback still holds it).
        for side in self.sides:
            side.futs[f] = None
        gc.collect()
        self.steps.append(f"drop({f})")

    @invariant()
    def states_agree(self):
        for i, (a, b) in enumerate(zip(self.ref.futs, self.cand.futs, strict=True)):
            if a is None:
                continue
            assert (b.done(), b.cancelled()) == (a.done(), a.cancelled()), f"state of {i}"

    def teardown(self):
        for side in self.sides:
            side.close()
        gc.collect()
        ref = sorted(map(repr, self.ref.handler.summary()))
        cand = sorted(map(repr, self.cand.handler.summary()))
        assert cand == ref, (
            f"exception handler calls differ\n  {self.REFERENCE}: {ref}\n"
            f"  {self.CANDIDATE}: {cand}\n  steps: {self.steps!r}"
        )


FAST = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=machine_examples(120),
    stateful_step_count=35,
)


def test_future_differential():
    run_machine(FutureMachine, settings=FAST)


@pytest.mark.stress
def test_future_differential_stress():
    run_machine(
        FutureMachine,
        settings=settings(
            derandomize=False,
            database=None,
            deadline=None,
            max_examples=2000,
            stateful_step_count=80,
        ),
    )


# The machine must be able to fail: deliberately broken Futures are caught.


class _CancelAlwaysTrue(future_class("stdlib-py")):
    def cancel(self, msg=None):
        super().cancel(msg=msg)
        return True


class _CallbacksLifo(future_class("stdlib-py")):
    def add_done_callback(self, fn, *, context=None):
        super().add_done_callback(fn, context=context)
        self._callbacks.insert(0, self._callbacks.pop())


class _ForgetsMessage(future_class("stdlib-py")):
    def cancel(self, msg=None):
        return super().cancel()


@pytest.mark.parametrize("mutant", [_CancelAlwaysTrue, _CallbacksLifo, _ForgetsMessage])
def test_machine_catches_mutants(mutant):
    machine = type(
        "MutantMachine",
        (FutureMachine,),
        {
            "CANDIDATE": "stdlib-py",
            "CANDIDATE_FUTURE": mutant,
        },
    )
    with pytest.raises(AssertionError):
        run_machine(
            machine,
            settings=settings(FAST, max_examples=300, phases=[Phase.generate]),
        )


# ----------------------------------------------------- deterministic extras


@pytest.mark.parametrize("state", ["pending", "result", "exception", "cancelled", "callbacks"])
def test_future_repr_matches(state):
    reprs = []
    for kind in ("stdlib-py", "snakeloop"):
        loop = new_loop(kind)
        try:
            fut = future_class(kind)(loop=loop)
            if state == "result":
                fut.set_result([1, 2])
            elif state == "exception":
                fut.set_exception(ValueError("v"))
                fut.exception()
            elif state == "cancelled":
                fut.cancel("why")
            elif state == "callbacks":

                def on_done(f):
                    pass

                fut.add_done_callback(on_done)
                fut.add_done_callback(print)
            reprs.append(mask(repr(fut)))
            fut.cancel()
        finally:
            close_loop(loop)
    assert reprs[1] == reprs[0]


def test_future_class_getitem():
    fut_cls = future_class("snakeloop")
    assert fut_cls[int] is not None
    assert repr(fut_cls[int]).endswith("Future[int]")


def test_future_without_loop_outside_running_loop():
    """Future() with no loop and no running loop: compare with stdlib."""
    import warnings

    results = []
    for kind in ("stdlib-py", "snakeloop"):
        policy = get_policy()
        set_policy(stdlib_policy_class()())
        try:
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                try:
                    fut = future_class(kind)()
                except BaseException as exc:  # noqa: BLE001
                    results.append(("raise", type(exc), str(exc), [x.category for x in w]))
                else:
                    results.append(("ok", [x.category for x in w]))
                    loop = fut.get_loop()
                    fut.cancel()
                    del fut
                    loop.close()
                    asyncio.set_event_loop(None)
        finally:
            set_policy(policy)
    assert results[1] == results[0]
