"""``loop.create_task`` keywords, compared with the stdlib loop on the running Python.

From 3.14 asyncio's ``create_task(coro, **kwargs)`` hands every keyword, as given, to the
task factory or to the Task (gh-128307): ``eager_start=True`` starts the task at once, a
factory sees exactly the keywords the caller passed, and the loop no longer names the task
a factory made.  Before 3.14 ``create_task`` takes ``name`` and ``context`` only.
"""

from __future__ import annotations

import asyncio
import contextvars

import pytest
from _loopkit import PY312, assert_same, outcome

VAR = contextvars.ContextVar("create_task_keywords", default="unset")


async def _answer() -> str:
    return VAR.get()


def _scenario(make_factory):
    """A scenario that creates tasks with each set of keywords and reports what happened."""

    def scenario(loop: asyncio.AbstractEventLoop):
        seen: list[list[str]] = []
        if make_factory is not None:
            loop.set_task_factory(make_factory(seen))
        results = []

        async def main():
            context = contextvars.copy_context()
            context.run(VAR.set, "given")
            for keywords in (
                {},
                {"name": None},
                {"name": "named"},
                {"context": context},
                {"eager_start": True},
                {"eager_start": False, "name": "lazy"},
                {"not_a_keyword": 1},
            ):
                coro = _answer()
                got = outcome(loop.create_task, coro, **keywords)
                if isinstance(got, tuple):
                    task = got[1]
                    results.append((sorted(keywords), task.done(), task.get_name()[:5]))
                    results.append(await task)
                else:
                    coro.close()
                    results.append((sorted(keywords), got))

        loop.run_until_complete(main())
        return results, seen

    return scenario


def _forwarding_factory(seen):
    def factory(loop, coro, **keywords):
        seen.append(sorted(keywords))
        return asyncio.Task(coro, loop=loop, **keywords)

    return factory


def _factory_of_its_own_keyword(seen):
    """A factory that takes a keyword no Task takes, as 3.14 allows."""

    def factory(loop, coro, *, not_a_keyword=None, **keywords):
        seen.append((not_a_keyword, sorted(keywords)))
        return asyncio.Task(coro, loop=loop, **keywords)

    return factory


@pytest.mark.parametrize(
    "make_factory",
    [None, _forwarding_factory, _factory_of_its_own_keyword],
    ids=["no-factory", "forwarding-factory", "factory-of-its-own"],
)
def test_create_task_keywords_as_on_asyncio(make_factory):
    results, _ = assert_same(_scenario(make_factory))[1]
    if make_factory is None and PY312:
        # Not vacuous: on every version with eager start, some keyword made a task.
        assert any(isinstance(r, str) for r in results)


@pytest.mark.parametrize("stdlib_futures", [False, True])
def test_eager_start_runs_the_first_step_at_once(stdlib_futures):
    """On 3.14, ``create_task(eager_start=True)`` finishes a task that never suspends
    before it returns, on either task kind; earlier versions refuse the keyword."""
    import snakeloop

    loop = snakeloop.new_event_loop(stdlib_futures=stdlib_futures)
    try:

        async def main():
            coro = _answer()
            got = outcome(loop.create_task, coro, eager_start=True)
            if not isinstance(got, tuple):
                coro.close()
                return got
            return got[1].done(), got[1].result()

        got = loop.run_until_complete(main())
    finally:
        loop.close()
    import sys

    if sys.version_info >= (3, 14):
        assert got == (True, "unset")
    else:
        assert got.type is TypeError


@pytest.mark.parametrize("on_deadlock", [None, "raise"], ids=["production", "test-mode"])
def test_a_factory_of_two_arguments_on_a_loop_that_records_task_sites(on_deadlock):
    """A test-mode or seeded loop records where each task was made, in front of
    ``create_task``: it must hand the factory the keywords it was given and no others
    (it passed ``name`` and ``context`` always, which a ``(loop, coro)`` factory refuses
    on 3.14, as in CPython's test_run_coroutine_threadsafe_task_factory_exception)."""
    from _loopkit import new_loop

    made = []

    def factory(loop, coro):
        task = asyncio.Task(coro, loop=loop)
        made.append(task)
        return task

    loop = new_loop("snakeloop", on_deadlock=on_deadlock)
    try:
        loop.set_task_factory(factory)

        async def main():
            return await loop.create_task(_answer())

        assert loop.run_until_complete(main()) == "unset"
        assert len(made) == 2  # main's task, and the one it made
    finally:
        loop.close()
