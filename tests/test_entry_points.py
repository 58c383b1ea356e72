"""snakeloop.run, snakeloop.Runner, install(), loop_factory and ``python -m snakeloop``."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from _loopkit import PY312, Raised, capture_logs, outcome, snakeloop_module
from _policies import (
    POLICIES_DEPRECATED,
    get_policy,
    set_policy,
    snakeloop_policy_class,
    stdlib_policy_class,
)


def _snakeloop_root() -> str:
    """The directory this process imports snakeloop from (src/ or site-packages)."""
    return str(Path(snakeloop_module().__file__).resolve().parent.parent)


def _loop_is_snakeloop(loop) -> bool:
    return isinstance(loop, snakeloop_module().Loop)


@contextlib.contextmanager
def restored_policy():
    policy = get_policy()
    try:
        yield
    finally:
        set_policy(policy)


def install_snakeloop():
    """``snakeloop.install()``, which warns from 3.14 as asyncio's policy functions do."""
    if POLICIES_DEPRECATED:
        with pytest.warns(DeprecationWarning, match="'snakeloop.install' is deprecated"):
            return snakeloop_module().install()
    return snakeloop_module().install()


# Each entry point is exercised against the equivalent stdlib one.
RUNNERS = {
    "asyncio.run": lambda coro, **kw: asyncio.run(coro, **kw),
    "snakeloop.run": lambda coro, **kw: snakeloop_module().run(coro, **kw),
}


@pytest.fixture(params=sorted(RUNNERS))
def run(request):
    return RUNNERS[request.param]


# ---------------------------------------------------------------- snakeloop.run


def test_run_returns_value_on_snakeloop():
    async def main():
        return "value", _loop_is_snakeloop(asyncio.get_running_loop())

    assert snakeloop_module().run(main()) == ("value", True)


def test_run_returns_value(run):
    async def main():
        await asyncio.sleep(0)
        return 42

    assert run(main()) == 42


def test_run_propagates_exception(run):
    async def main():
        raise ArithmeticError("from main")

    with pytest.raises(ArithmeticError, match="from main"):
        run(main())


def test_run_cancels_leftover_tasks(run):
    log = []

    async def leftover():
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            log.append("leftover cancelled")
            raise

    async def main():
        asyncio.create_task(leftover())
        await asyncio.sleep(0)
        return "main done"

    assert run(main()) == "main done"
    assert log == ["leftover cancelled"]


def test_run_reports_leftover_task_errors_during_shutdown(run, asyncio_errors):
    async def stubborn():
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            raise ValueError("failed while being cancelled") from None

    async def main():
        asyncio.create_task(stubborn())
        await asyncio.sleep(0)

    with capture_logs() as logs:
        run(main())
    assert any("failed while being cancelled" in str(r.exc_info[1]) for r in logs.records)
    assert asyncio_errors


def test_shutdown_error_message_matches(asyncio_errors):
    def go(runner):
        async def stubborn():
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                raise ValueError("late") from None

        async def main():
            asyncio.create_task(stubborn(), name="stubborn")
            await asyncio.sleep(0)

        with capture_logs() as logs:
            runner(main())
        return [(lvl, text.splitlines()[0]) for lvl, text in logs.texts()]

    ref = go(RUNNERS["asyncio.run"])
    got = go(RUNNERS["snakeloop.run"])
    assert got == ref
    assert ref


def test_run_shuts_down_asyncgens(run):
    log = []

    async def agen():
        try:
            yield 1
            yield 2
        finally:
            log.append("agen closed")

    keep = []

    async def main():
        gen = agen()
        await gen.__anext__()
        keep.append(gen)  # alive past main(): only shutdown_asyncgens can close it
        return "ok"

    assert run(main()) == "ok"
    assert log == ["agen closed"]


def test_run_shuts_down_default_executor(run):
    threads = []

    async def main():
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, lambda: threads.append(threading.current_thread()))

    run(main())
    assert threads and not threads[0].is_alive()


@pytest.mark.parametrize("debug", [True, False, None])
def test_run_debug_flag(run, debug):
    async def main():
        return asyncio.get_running_loop().get_debug()

    kwargs = {} if debug is None else {"debug": debug}
    got = run(main(), **kwargs)
    expected = asyncio.run(main(), **kwargs)
    assert got == expected
    if debug is not None:
        assert got is debug


def test_run_closes_its_loop_and_unsets_it(run):
    loops = []

    async def main():
        loops.append(asyncio.get_running_loop())

    run(main())
    assert loops[0].is_closed()
    assert asyncio._get_running_loop() is None


def test_run_inside_running_loop():
    async def outer(runner):
        coro = asyncio.sleep(0)
        try:
            return outcome(runner, coro)
        finally:
            coro.close()

    ref = asyncio.run(outer(RUNNERS["asyncio.run"]))
    got = snakeloop_module().run(outer(RUNNERS["snakeloop.run"]))
    assert isinstance(ref, Raised) and isinstance(got, Raised)
    assert got.type is ref.type
    # Only the function's own name may differ in the message.
    assert got.message.split(" ", 1)[1] == ref.message.split(" ", 1)[1]


@pytest.mark.parametrize("arg", [1, None, "coro"])
def test_run_rejects_non_coroutines(arg):
    ref = outcome(RUNNERS["asyncio.run"], arg)
    got = outcome(RUNNERS["snakeloop.run"], arg)
    assert got == ref
    assert isinstance(got, Raised)


# ---------------------------------------------------------------------- Runner


def test_runner_runs_several_coroutines_on_one_loop():
    mod = snakeloop_module()

    async def which():
        return asyncio.get_running_loop()

    with mod.Runner() as runner:
        first = runner.run(which())
        second = runner.run(which())
        assert first is second is runner.get_loop()
        assert _loop_is_snakeloop(first)
    assert first.is_closed()


def test_runner_shares_context_between_runs():
    var = contextvars.ContextVar("var", default=0)

    async def bump():
        var.set(var.get() + 1)
        return var.get()

    with snakeloop_module().Runner() as runner:
        assert [runner.run(bump()) for _ in range(3)] == [1, 2, 3]


def test_runner_closed():
    ref_runner = asyncio.Runner()
    ref_runner.get_loop()  # initialise, so that close() really closes
    ref_runner.close()
    got_runner = snakeloop_module().Runner()
    got_runner.get_loop()
    got_runner.close()
    coro1, coro2 = asyncio.sleep(0), asyncio.sleep(0)
    try:
        ref = outcome(ref_runner.run, coro1)
        got = outcome(got_runner.run, coro2)
    finally:
        coro1.close()
        coro2.close()
    assert got == ref
    assert isinstance(got, Raised)


def test_runner_debug():
    async def debug():
        return asyncio.get_running_loop().get_debug()

    with snakeloop_module().Runner(debug=True) as runner:
        assert runner.run(debug()) is True


def test_runner_with_custom_factory():
    made = []

    def factory():
        loop = snakeloop_module().new_event_loop()
        made.append(loop)
        return loop

    async def main():
        return asyncio.get_running_loop()

    with snakeloop_module().Runner(loop_factory=factory) as runner:
        assert runner.run(main()) is made[0]


def test_asyncio_runner_with_snakeloop_factory():
    async def main():
        await asyncio.sleep(0)
        return asyncio.get_running_loop()

    with asyncio.Runner(loop_factory=snakeloop_module().new_event_loop) as runner:
        loop = runner.run(main())
        assert _loop_is_snakeloop(loop)
    assert loop.is_closed()


def test_asyncio_run_loop_factory():
    async def main():
        return _loop_is_snakeloop(asyncio.get_running_loop())

    coro = main()
    if PY312:
        assert asyncio.run(coro, loop_factory=snakeloop_module().new_event_loop) is True
    else:
        # asyncio.run() grew loop_factory in 3.12; on 3.11 asyncio.Runner is the way.
        with pytest.raises(TypeError):
            asyncio.run(coro, loop_factory=snakeloop_module().new_event_loop)
        coro.close()


def test_new_event_loop_options():
    mod = snakeloop_module()
    loop = mod.new_event_loop()
    try:
        assert isinstance(loop, mod.Loop)
        assert isinstance(loop, asyncio.AbstractEventLoop)
        assert not loop.is_running() and not loop.is_closed()
    finally:
        loop.close()


# ---------------------------------------------------------------- install()


def test_install_makes_asyncio_run_use_snakeloop():
    async def main():
        return _loop_is_snakeloop(asyncio.get_running_loop())

    with restored_policy():
        assert asyncio.run(main()) is False
        install_snakeloop()
        assert isinstance(get_policy(), snakeloop_policy_class())
        assert asyncio.run(main()) is True
        loop = asyncio.new_event_loop()
        try:
            assert _loop_is_snakeloop(loop)
        finally:
            loop.close()
    assert asyncio.run(main()) is False


def test_import_is_silent_with_warnings_as_errors():
    """Importing snakeloop and its pytest plugin warns of nothing (3.14 deprecates the
    policy names that snakeloop's policy is built on)."""
    code = "import snakeloop, snakeloop.testing.pytest_plugin, snakeloop.__main__"
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=_snakeloop_root(),
    )
    assert (done.returncode, done.stderr) == (0, "")


def _warnings_of(action) -> list[tuple[type[Warning], str]]:
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        action()
    return [(w.category, w.filename) for w in caught]


def test_policy_names_warn_where_asyncios_do():
    """``snakeloop.EventLoopPolicy`` and ``snakeloop.install()`` warn on the versions where
    ``asyncio.DefaultEventLoopPolicy`` and ``asyncio.set_event_loop_policy()`` do, with the
    same category, pointing at the caller."""
    mod = snakeloop_module()
    stdlib_read = _warnings_of(lambda: asyncio.DefaultEventLoopPolicy)
    own_read = _warnings_of(lambda: mod.EventLoopPolicy)
    assert own_read == stdlib_read
    assert [category for category, _ in own_read] == (
        [DeprecationWarning] if POLICIES_DEPRECATED else []
    )
    with restored_policy():
        stdlib_set = _warnings_of(lambda: asyncio.set_event_loop_policy(None))
        own_set = _warnings_of(mod.install)
    assert own_set == stdlib_set
    assert ("EventLoopPolicy" in mod.__all__) is ("DefaultEventLoopPolicy" in asyncio.__all__)


def test_policy_new_event_loop():
    mod = snakeloop_module()
    policy = snakeloop_policy_class()()
    loop = policy.new_event_loop()
    try:
        assert isinstance(loop, mod.Loop)
    finally:
        loop.close()


def test_policy_get_event_loop_without_loop_in_main_thread():
    """``get_event_loop()`` with no loop set: 3.14 raises, as its policy no longer makes
    a loop; 3.12 and 3.13 make one with a DeprecationWarning."""
    import warnings

    results = {}
    for name, policy in (
        ("stdlib", stdlib_policy_class()()),
        ("snakeloop", snakeloop_policy_class()()),
    ):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = outcome(policy.get_event_loop)
        if isinstance(got, tuple):
            got[1].close()
            policy.set_event_loop(None)
            got = ("loop", type(got[1]).__name__ == "Loop")
        results[name] = (got, [w.category for w in caught])
    # Each loop of its own kind; otherwise the same outcome and the same warnings.
    stdlib_outcome = ("loop", True) if results["stdlib"][0] == ("loop", False) else None
    assert results["snakeloop"] == (stdlib_outcome or results["stdlib"][0], results["stdlib"][1])
    if sys.version_info >= (3, 14):
        assert isinstance(results["snakeloop"][0], Raised)
        assert results["snakeloop"][0].type is RuntimeError


def test_policy_in_thread_without_loop():
    """get_event_loop() in a non-main thread raises like the stdlib policy."""
    results = {}

    def worker(name, policy):
        results[name] = outcome(policy.get_event_loop)

    for name, policy in (
        ("stdlib", stdlib_policy_class()()),
        ("snakeloop", snakeloop_policy_class()()),
    ):
        th = threading.Thread(target=worker, args=(name, policy), name="policy-check")
        th.start()
        th.join()
    assert results["snakeloop"] == results["stdlib"]


# ------------------------------------------------------ python -m snakeloop

SCRIPT = textwrap.dedent(
    """
    import asyncio, json, sys

    async def main():
        loop = asyncio.get_running_loop()
        await asyncio.sleep(0)
        return {
            "loop": type(loop).__module__.split(".")[0] + "." + type(loop).__name__,
            "argv": sys.argv,
            "name": __name__,
        }

    report = asyncio.run(main())
    print(json.dumps(report))
    sys.stdout.flush()
    sys.exit(int(sys.argv[-1]) if sys.argv[-1].isdigit() else 0)
    """
)


def _run_module(args, cwd):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [_snakeloop_root()] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    env.pop("PYTHONASYNCIODEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "snakeloop", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_python_m_snakeloop_runs_script(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(SCRIPT)
    proc = _run_module([str(script), "hello", "3"], tmp_path)
    assert proc.returncode == 3, proc.stderr
    report = json.loads(proc.stdout)
    assert report["loop"] == "snakeloop.Loop"
    assert report["argv"] == [str(script), "hello", "3"]
    assert report["name"] == "__main__"


def test_python_m_snakeloop_exit_zero(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(SCRIPT)
    proc = _run_module([str(script)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["argv"] == [str(script)]


def test_python_m_snakeloop_script_error(tmp_path):
    script = tmp_path / "bad.py"
    script.write_text(
        "import asyncio\nasync def m():\n    raise KeyError('kaput')\nasyncio.run(m())\n"
    )
    proc = _run_module([str(script)], tmp_path)
    assert proc.returncode == 1
    assert "KeyError: 'kaput'" in proc.stderr


def test_python_m_snakeloop_script_imports_siblings(tmp_path):
    (tmp_path / "helper_mod.py").write_text("VALUE = 'sibling'\n")
    script = tmp_path / "prog.py"
    script.write_text("import helper_mod\nprint(helper_mod.VALUE)\n")
    proc = _run_module([str(script)], tmp_path / "..")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "sibling"


def test_python_m_snakeloop_module_mode(tmp_path):
    pkg = tmp_path / "demo_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "app.py").write_text(SCRIPT)
    proc = _run_module(["-m", "demo_pkg.app", "x", "5"], tmp_path)
    assert proc.returncode == 5, proc.stderr
    report = json.loads(proc.stdout)
    assert report["loop"] == "snakeloop.Loop"
    assert report["argv"][1:] == ["x", "5"]
    assert report["name"] == "__main__"


def test_python_m_snakeloop_without_arguments(tmp_path):
    proc = _run_module([], tmp_path)
    assert proc.returncode != 0
    assert "usage" in proc.stderr.lower()
