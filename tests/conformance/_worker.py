"""Worker process: runs one CPython test.test_asyncio module against a target.

Started by run.py as ``python -X faulthandler _worker.py --module M --mode loop|task
--target snakeloop|stdlib|stdlib-py --events-fd N [...]``.  It

1. points asyncio at the target (policy substitution, see ``install_target``),
2. applies the shims documented in ``apply_shims``,
3. builds the selected test classes from selection.toml and filters them through
   exclusions.txt / network.txt (``plan_module``),
4. runs them with unittest and writes one JSON object per line to the events fd:
   ``plan`` (once), then ``start``/``result`` per test, then ``done``.

A test that hangs is killed by the parent (process group), which then starts a new worker with
``--skip-file`` listing the tests already done, so the module resumes after the hung test.
faulthandler dumps the stacks to stderr (the module's log) shortly before the parent's timeout.
"""

from __future__ import annotations

import argparse
import faulthandler
import gc
import importlib
import inspect
import json
import os
import signal
import sys
import threading
import time
import traceback
import types
import unittest
import warnings

import _data
from _pypy import let_pypys_test_package_import

# --------------------------------------------------------------------------- target


class Counters:
    """Per-test counts of loops created, reset before each test."""

    target_loops = 0  # loops made by the target factory
    stdlib_loops = 0  # stdlib BaseEventLoop instances made outside the factory (not TestLoop)


_in_factory = threading.local()


def seeded_loop_factory():
    """Seeded snakeloop loops: loop n of this worker gets ``derive_seed(root, "loop", n)``,
    the root from ``SNAKELOOP_CONFORMANCE_SEED`` (drawn and printed when unset)."""
    import itertools
    import random

    import snakeloop
    from snakeloop.seeding import derive_seed

    root = os.environ.get("SNAKELOOP_CONFORMANCE_SEED")
    if root is None:
        root = str(random.SystemRandom().getrandbits(64))
        os.environ["SNAKELOOP_CONFORMANCE_SEED"] = root
    print(f"snakeloop-seeded: root seed {root} (SNAKELOOP_CONFORMANCE_SEED)", file=sys.stderr)
    numbers = itertools.count()

    def new_event_loop():
        return snakeloop.new_event_loop(seed=derive_seed(int(root), "loop", next(numbers)))

    return new_event_loop


def resolve_target(name: str):
    """Return (loop_factory, Task, Future) for a target name."""
    import asyncio

    if name == "snakeloop":
        import snakeloop

        return snakeloop.new_event_loop, snakeloop.Task, snakeloop.Future
    if name == "snakeloop-seeded":
        import snakeloop

        return seeded_loop_factory(), snakeloop.Task, snakeloop.Future
    # The stdlib loop class that the default policy would build (asyncio.new_event_loop itself
    # would recurse into the substituted policy).
    stdlib_factory = default_policy_class()._loop_factory
    if name == "stdlib":
        return stdlib_factory, asyncio.Task, asyncio.Future
    if name == "stdlib-py":
        from asyncio import futures, tasks

        return stdlib_factory, tasks._PyTask, futures._PyFuture
    raise SystemExit(f"unknown target {name!r}")


# 3.14 deprecates the public policy names (reading ``asyncio.DefaultEventLoopPolicy`` warns, as
# do ``get/set_event_loop_policy``); asyncio itself and CPython's 3.14 tests use the private
# ones, so the worker does too there.  Before 3.14 the private names do not exist.
PRIVATE_POLICY_NAMES = sys.version_info >= (3, 14)


def default_policy_class():
    """The platform's default policy class, read without a deprecation warning."""
    import asyncio

    if PRIVATE_POLICY_NAMES:
        return asyncio.unix_events._DefaultEventLoopPolicy
    return asyncio.DefaultEventLoopPolicy


def reset_policy():
    """Drop the current policy, so that the next use makes a default one (the target's)."""
    import asyncio

    if PRIVATE_POLICY_NAMES:
        asyncio.events._set_event_loop_policy(None)
    else:
        asyncio.set_event_loop_policy(None)


def use_py_task_registry():
    """stdlib-py in task mode, 3.14+: asyncio's own helpers see the pure-Python tasks.

    From 3.14 on, asyncio's pure-Python Task registers with the pure-Python current_task()
    and all_tasks() only, so TaskGroup, timeout() and the tests' own calls would not find the
    running _PyTask.  CPython's Py* test classes swap the functions in for the same reason.
    Before 3.14 the pure-Python Task registers with the C functions as well.  The loop's own
    tasks are made pure-Python too (asyncio.Task, as those classes do): a C task made by the
    loop's default factory would be invisible to the pure-Python all_tasks().
    """
    import asyncio
    from asyncio import futures, tasks

    if sys.version_info < (3, 14):
        return
    for name in ("current_task", "all_tasks"):
        py = getattr(tasks, "_py_" + name)
        setattr(asyncio, name, py)
        setattr(tasks, name, py)
    asyncio.Task = tasks.Task = tasks._PyTask
    asyncio.Future = futures.Future = futures._PyFuture


def install_target(raw_factory):
    """Make asyncio's default policy build target loops; returns the counting factory.

    ``asyncio.set_event_loop_policy(None)`` (done before every test, and by CPython's tests
    and tearDownModule functions) makes asyncio instantiate ``asyncio.DefaultEventLoopPolicy``
    again, so replacing that class (and the platform module's alias) with a subclass whose
    ``_loop_factory`` is the target routes ``asyncio.new_event_loop()``, ``asyncio.run()``,
    ``asyncio.Runner`` and ``IsolatedAsyncioTestCase`` to the target.  Code that subclasses
    ``asyncio.DefaultEventLoopPolicy`` at call time (test_events) gets it too.
    """
    import asyncio
    from asyncio import base_events

    from test.test_asyncio import utils as test_utils

    def factory():
        if getattr(_in_factory, "active", False):
            raise RuntimeError(
                "the target loop factory re-entered itself (does it call asyncio.new_event_loop()?)"
            )
        _in_factory.active = True
        try:
            loop = raw_factory()
        finally:
            _in_factory.active = False
        Counters.target_loops += 1
        return loop

    base_policy = default_policy_class()
    policy_cls = type(
        "TargetEventLoopPolicy",
        (base_policy,),
        {"_loop_factory": staticmethod(factory), "__module__": __name__},
    )
    if PRIVATE_POLICY_NAMES:
        # 3.14+: asyncio makes its default policy from unix_events._DefaultEventLoopPolicy,
        # and its module __getattr__ answers asyncio.DefaultEventLoopPolicy (with the
        # deprecation warning) from that name as well.  test_utils bound its own alias at
        # import.
        asyncio.unix_events._DefaultEventLoopPolicy = policy_cls
        if getattr(test_utils, "DefaultEventLoopPolicy", None) is base_policy:
            test_utils.DefaultEventLoopPolicy = policy_cls
    else:
        asyncio.DefaultEventLoopPolicy = policy_cls
        for modname in ("unix_events", "windows_events"):
            mod = getattr(asyncio, modname, None)
            if mod is not None and getattr(mod, "DefaultEventLoopPolicy", None) is base_policy:
                mod.DefaultEventLoopPolicy = policy_cls
    reset_policy()

    # Diagnostic: count stdlib loops created outside the target factory.
    original_init = base_events.BaseEventLoop.__init__

    def counting_init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        if not getattr(_in_factory, "active", False) and not isinstance(self, test_utils.TestLoop):
            Counters.stdlib_loops += 1

    base_events.BaseEventLoop.__init__ = counting_init
    return factory


def apply_shims():
    """Patch CPython's test helpers where they reach into stdlib-private loop/task state.

    Each shim changes nothing for stdlib loops/tasks (the control run proves the helpers still
    behave as before); it only lets the helpers work with a loop or Task that lacks asyncio's
    private attributes.
    """
    import asyncio
    from asyncio import futures

    from test.test_asyncio import utils as test_utils

    # 1. test_utils.TestCase.close_loop() (the cleanup of every test_utils.TestCase test that
    #    calls set_event_loop) reads ``loop._default_executor``.  For a loop without that
    #    attribute, shut the default executor down through the public
    #    shutdown_default_executor() and hand the original helper a stand-in that reports no
    #    executor, so its remaining steps (close the loop, wait for child-watcher threads)
    #    run unchanged.
    original_close_loop = test_utils.TestCase.__dict__["close_loop"].__func__

    def close_loop(loop):
        if hasattr(loop, "_default_executor"):
            return original_close_loop(loop)
        if not loop.is_closed():
            loop.run_until_complete(loop.shutdown_default_executor())
        stand_in = types.SimpleNamespace(_default_executor=None, close=loop.close)
        return original_close_loop(stand_in)

    test_utils.TestCase.close_loop = staticmethod(close_loop)

    # 2. test_utils.run_briefly() sets ``task._log_destroy_pending = False`` on the task it
    #    creates, to silence asyncio's "Task was destroyed but it is pending" log.  A Task
    #    class without that private attribute may refuse the assignment: tolerate that.
    def run_briefly(loop):
        async def once():
            pass

        coro = once()
        task = loop.create_task(coro)
        try:
            task._log_destroy_pending = False
        except AttributeError:
            pass
        try:
            loop.run_until_complete(task)
        finally:
            coro.close()

    test_utils.run_briefly = run_briefly

    # 3. test_utils.run_until() raises ``futures.TimeoutError`` when its predicate never
    #    becomes true; that name was removed from asyncio.futures in 3.11, so the helper
    #    would fail with AttributeError instead of TimeoutError.  Restore the alias.
    if not hasattr(futures, "TimeoutError"):
        futures.TimeoutError = asyncio.TimeoutError


# --------------------------------------------------------------------------- selection


def _bind_value(spec: str, task_cls, future_cls):
    import asyncio

    if spec == "Task":
        return task_cls
    if spec == "Future":
        return future_cls
    if spec == "Task(coro, loop=self.loop)":
        return lambda self, coro: task_cls(coro, loop=self.loop)
    if spec == "Future(loop=self.loop)":
        return lambda self: future_cls(loop=self.loop)
    if spec == "lambda: Future":
        return lambda self: future_cls
    if spec == "asyncio.current_task":
        return staticmethod(asyncio.current_task)
    # 3.14's BaseTaskTests call self.all_tasks() and self.current_task(): the functions that
    # see the tasks of the Task class under test.  asyncio's public ones see the C Task and
    # the tasks that register with them (snakeloop's).  From 3.14 on, asyncio's pure-Python
    # Task registers with the pure-Python functions only, as CPython's PyTask_PyFuture_Tests
    # binds them; before, it registered with the C ones as well.
    if spec in ("all_tasks", "current_task"):
        from asyncio import tasks

        if sys.version_info >= (3, 14) and task_cls is getattr(tasks, "_PyTask", None):
            return staticmethod(getattr(tasks, "_py_" + spec))
        return staticmethod(getattr(asyncio, spec))
    # test_free_threading's task factories (3.14+): (loop, coro, **kwargs) -> a task.
    if spec == "Task(coro, loop=loop, **kwargs)":
        return lambda self, loop, coro, **kwargs: task_cls(coro, loop=loop, **kwargs)
    if spec == "Task(coro, loop=loop, eager_start=True, **kwargs)":

        def eager(self, loop, coro, eager_start=True, **kwargs):
            return task_cls(coro, loop=loop, eager_start=eager_start, **kwargs)

        return eager
    raise ValueError(f"selection.toml: unknown bind value {spec!r}")


def _local_test_classes(mod) -> dict[str, type]:
    out = {}
    for name, obj in vars(mod).items():
        if (
            isinstance(obj, type)
            and issubclass(obj, unittest.TestCase)
            and obj.__module__ == mod.__name__
        ):
            out[name] = obj
    return out


def _make_class(mod, name, bases, ns):
    ns = dict(ns, __module__=mod.__name__, __qualname__=name)
    return type(name, tuple(bases), ns)


def _loop_class(mod, name, entry, factory):
    """Build one loop-mode class from a selection.toml ``[M.loop.build.NAME]`` entry."""
    from test.test_asyncio import utils as test_utils

    how = entry.get("how", "factory")
    bases = [getattr(mod, b, None) for b in entry.get("from", [name])]
    if any(b is None for b in bases):
        return None  # not in this Python version
    if how == "keep":
        return bases[0]
    if how == "factory":
        if not any(issubclass(b, unittest.TestCase) for b in bases):
            bases.append(test_utils.TestCase)
        if entry.get("record_shutdown_asyncgens"):

            def new_loop(self):
                loop = factory()
                loop.shutdown_ag_run = False
                real_shutdown = loop.shutdown_asyncgens

                async def shutdown_asyncgens():
                    loop.shutdown_ag_run = True
                    await real_shutdown()

                loop.shutdown_asyncgens = shutdown_asyncgens
                return loop
        else:

            def new_loop(self):
                return factory()

        return _make_class(mod, name, bases, {"create_event_loop": new_loop, "new_loop": new_loop})
    if how == "setup":
        # Run the setUp chain above the class that hard-codes its loop, then use the target.
        owner = next(k for k in bases[0].__mro__ if "setUp" in vars(k))

        def setUp(self):
            super(owner, self).setUp()
            self.loop = factory()
            if hasattr(self, "set_event_loop"):  # test_utils.TestCase: closes it too
                self.set_event_loop(self.loop)
            else:  # a plain unittest.TestCase (3.14's UnixPipeObjectSupportTests)
                self.addCleanup(self.loop.close)

        return _make_class(mod, name, bases, {"setUp": setUp})
    if how == "loop_factory":
        # An IsolatedAsyncioTestCase whose class attribute loop_factory (3.13+) names a
        # stdlib loop (3.14's test_taskgroups: asyncio.EventLoop) bypasses the policy.
        # Before 3.13 the attribute is ignored and the policy gives the target anyway.
        task_factory = entry.get("task_factory")
        if task_factory is None:
            loop_factory = factory
        else:
            import asyncio

            set_up_tasks = getattr(asyncio, task_factory)

            def loop_factory():
                loop = factory()
                loop.set_task_factory(set_up_tasks)
                return loop

        return _make_class(mod, name, bases, {"loop_factory": staticmethod(loop_factory)})
    raise ValueError(f"selection.toml: {mod.__name__}.{name}: unknown how={how!r}")


def _task_class(mod, name, entry, task_cls, future_cls):
    """Build one task-mode class from a ``[M.task.build.NAME]`` entry."""
    from test.test_asyncio import utils as test_utils

    bases = [getattr(mod, b, None) for b in entry["from"]]
    if any(b is None for b in bases):
        return None
    testcase = entry.get("testcase")
    bases.append(getattr(unittest, testcase) if testcase else test_utils.TestCase)
    ns = {k: _bind_value(v, task_cls, future_cls) for k, v in entry.get("bind", {}).items()}
    cls = _make_class(mod, name, bases, ns)
    if entry.get("decorate"):
        cls = getattr(mod, entry["decorate"])(cls)
    return cls


def _source(cls, method: str) -> str:
    try:
        return inspect.getsource(getattr(cls, method))
    except (OSError, TypeError):
        return ""


def plan_module(module, mode, selection, factory, task_cls, future_cls, network):
    """Return a plan: tests to run and everything that is not run, with reasons."""
    mod = importlib.import_module(_data.ID_PREFIX + module)
    spec = selection[module]
    version = sys.version_info[:2]
    exclusions = _data.PatternList.load(_data.EXCLUSIONS_FILE, version)
    network_list = _data.PatternList.load(_data.NETWORK_FILE, version)
    module_network = _data.module_is_network(selection, module)
    loader = unittest.TestLoader()

    plan = {"tests": [], "excluded": [], "deferred": [], "unclassified": []}
    local = _local_test_classes(mod)

    # Completeness check: every local class with tests is accounted for somewhere.
    accounted = set(spec.get("skip", {}))
    for m in ("loop", "task"):
        section = spec.get(m, {})
        accounted.update(section.get("keep", []))
        for bname, entry in section.get("build", {}).items():
            accounted.add(bname)
            accounted.update(entry.get("from", []))
    # Excluded classes that no mode builds are reported once, by the module's first mode.
    report_here = mode == _data.modes_of(selection, module)[0]
    for cname, cls in sorted(local.items()):
        names = loader.getTestCaseNames(cls)
        if cname in accounted or not names:
            continue
        excl = exclusions.match(f"{module}.{cname}")
        if excl is None:
            plan["unclassified"].append(cname)
        elif report_here:
            plan["excluded"].extend([f"{module}.{cname}.{n}", excl.reason] for n in names)

    section = spec.get(mode, {})
    classes = []  # (cls, only_if_source_contains)
    if mode == "loop":
        for cname in section.get("keep", []):
            if cname in local:
                classes.append((local[cname], None))
        for bname, entry in section.get("build", {}).items():
            cls = _loop_class(mod, bname, entry, factory)
            if cls is not None:
                classes.append((cls, entry.get("only_if_source_contains")))
    else:
        for bname, entry in section.get("build", {}).items():
            cls = _task_class(mod, bname, entry, task_cls, future_cls)
            if cls is not None:
                classes.append((cls, None))

    for cls, needle in classes:
        for method in loader.getTestCaseNames(cls):
            if needle and needle not in _source(cls, method):
                continue
            test = cls(method)
            tid = _data.short_id(test.id())
            excl = exclusions.match(tid)
            if excl is not None:
                plan["excluded"].append([tid, excl.reason])
            elif not network and (module_network or tid in network_list):
                plan["deferred"].append(tid)
            else:
                plan["tests"].append(test)
    return plan


# --------------------------------------------------------------------------- running


class EventResult(unittest.TestResult):
    """Reports each test's outcome as JSON events."""

    RANK = {"pass": 0, "skip": 1, "fail": 2, "error": 3}

    def __init__(self, emit, timeout, reset_policy):
        super().__init__()
        self.emit = emit
        self.timeout = timeout
        self.reset_policy = reset_policy
        self.current = None

    def startTest(self, test):
        super().startTest(test)
        if self.reset_policy:
            reset_policy()
        Counters.target_loops = Counters.stdlib_loops = 0
        tid = _data.short_id(test.id())
        self.current = {
            "id": tid,
            "outcome": None,
            "message": "",
            "traceback": "",
            "t0": time.monotonic(),
        }
        self.emit({"ev": "start", "id": tid})
        print(f"\n=== start {tid}", file=sys.stderr, flush=True)
        if self.timeout:
            faulthandler.dump_traceback_later(max(1.0, self.timeout - 5), exit=False)

    def _record(self, test, outcome, err=None, message=""):
        cur = self.current
        if cur is None or cur["id"] != _data.short_id(test.id()):
            return
        if cur["outcome"] is not None and self.RANK[cur["outcome"]] >= self.RANK[outcome]:
            return
        cur["outcome"] = outcome
        if err is not None:
            text = self._exc_info_to_string(err, test)
            cur["traceback"] = text[-4000:]
            lines = [ln for ln in text.strip().splitlines() if ln.strip()]
            cur["message"] = (lines[-1] if lines else "")[:300]
        else:
            cur["message"] = message[:300]

    def addSuccess(self, test):
        self._record(test, "pass")

    def addFailure(self, test, err):
        self._record(test, "fail", err)

    def addError(self, test, err):
        if self.current is None or not isinstance(test, unittest.TestCase):
            # A class or module fixture (setUpClass, tearDownModule) failed.
            self.emit(
                {
                    "ev": "fixture_error",
                    "id": str(test),
                    "traceback": self._exc_info_to_string(err, test)[-4000:],
                }
            )
            return
        self._record(test, "error", err)

    def addSkip(self, test, reason):
        self._record(test, "skip", message=str(reason))

    def addExpectedFailure(self, test, err):
        # CPython's own @expectedFailure: counts as passing, as in CPython's runner.
        self._record(test, "pass", message="expected failure (CPython @expectedFailure)")

    def addUnexpectedSuccess(self, test):
        self._record(test, "fail", message="unexpected success of a CPython @expectedFailure")

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            failed = issubclass(err[0], test.failureException)
            self._record(test, "fail" if failed else "error", err)

    def stopTest(self, test):
        # Collect the test's garbage now, so that a finalizer's warning (an
        # unclosed transport's ResourceWarning) lands in this test's log and
        # not inside a later test's warnings.catch_warnings().  Without it,
        # test_subprocess's test_kill_issue43884 (its killed shell's
        # grandchild still holds stdout when the test closes the loop) made
        # test_popen_error_with_stdin_pipe fail whenever the collector
        # happened to run there.
        gc.collect()
        super().stopTest(test)
        faulthandler.cancel_dump_traceback_later()
        cur, self.current = self.current, None
        if cur is None:
            return
        self.emit(
            {
                "ev": "result",
                "id": cur["id"],
                "outcome": cur["outcome"] or "error",
                "message": cur["message"],
                "traceback": cur["traceback"],
                "target_loops": Counters.target_loops,
                "stdlib_loops": Counters.stdlib_loops,
                "seconds": round(time.monotonic() - cur["t0"], 3),
            }
        )


def main(argv=None):
    let_pypys_test_package_import()
    p = argparse.ArgumentParser()
    p.add_argument("--module", required=True)
    p.add_argument("--mode", choices=("loop", "task"), required=True)
    p.add_argument("--target", required=True)
    p.add_argument("--events-fd", type=int, required=True)
    p.add_argument("--network", action="store_true")
    p.add_argument("--skip-file")
    p.add_argument("--test-timeout", type=float, default=60.0)
    p.add_argument("-k", action="append", default=[])
    p.add_argument("--plan-only", action="store_true")
    args = p.parse_args(argv)

    # A worker started from a background job inherits SIGINT=SIG_IGN, so Python installs no
    # KeyboardInterrupt handler and asyncio.Runner does not install its own: the test_runners
    # interrupt tests would hang.  Restore the interactive default.
    if signal.getsignal(signal.SIGINT) in (signal.SIG_IGN, signal.SIG_DFL, None):
        signal.signal(signal.SIGINT, signal.default_int_handler)

    events = os.fdopen(args.events_fd, "w", buffering=1, encoding="utf-8")

    def emit(obj):
        events.write(json.dumps(obj) + "\n")
        events.flush()

    try:
        selection = _data.load_selection()
        raw_factory, task_cls, future_cls = resolve_target(args.target)
        if args.target == "stdlib-py" and args.mode == "task":
            use_py_task_registry()
        factory = install_target(raw_factory)
        apply_shims()
        plan = plan_module(
            args.module, args.mode, selection, factory, task_cls, future_cls, args.network
        )
    except unittest.SkipTest as e:
        emit({"ev": "module_skip", "reason": str(e)})
        emit({"ev": "done"})
        return 0
    except BaseException:
        emit({"ev": "module_error", "traceback": traceback.format_exc()[-4000:]})
        return 3

    tests = plan["tests"]
    if args.k:

        def wanted(tid):
            return any(k in tid for k in args.k)

        tests = [t for t in tests if wanted(_data.short_id(t.id()))]
        plan["excluded"] = [e for e in plan["excluded"] if wanted(e[0])]
        plan["deferred"] = [tid for tid in plan["deferred"] if wanted(tid)]
    emit(
        {
            "ev": "plan",
            "ids": [_data.short_id(t.id()) for t in tests],
            "excluded": plan["excluded"],
            "deferred": plan["deferred"],
            "unclassified": plan["unclassified"],
        }
    )
    if args.plan_only:
        emit({"ev": "done"})
        return 0

    done = set()
    if args.skip_file:
        with open(args.skip_file, encoding="utf-8") as f:
            done = set(json.load(f))
    suite = unittest.TestSuite(t for t in tests if _data.short_id(t.id()) not in done)

    warnings.simplefilter("default")
    result = EventResult(emit, args.test_timeout, reset_policy=True)
    suite.run(result)
    emit({"ev": "done"})
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: leftover threads or loops of a test must not hang the exit.
    os._exit(code)
