"""asyncio's event loop policy, read and set without the warnings it gives from 3.14.

From 3.14 asyncio deprecates ``get_event_loop_policy()``, ``set_event_loop_policy()`` and
``DefaultEventLoopPolicy``; the private functions beneath them stay silent.  The tests'
own bookkeeping (the leak guard, restoring a policy) goes through these, so that only a
test about the deprecation itself sees the warnings.
"""

from __future__ import annotations

import asyncio
import sys

POLICIES_DEPRECATED = sys.version_info >= (3, 14)


def get_policy() -> asyncio.AbstractEventLoopPolicy:
    if POLICIES_DEPRECATED:
        return asyncio.events._get_event_loop_policy()
    return asyncio.get_event_loop_policy()


def set_policy(policy: asyncio.AbstractEventLoopPolicy | None) -> None:
    if POLICIES_DEPRECATED:
        asyncio.events._set_event_loop_policy(policy)
    else:
        asyncio.set_event_loop_policy(policy)


def stdlib_policy_class() -> type[asyncio.AbstractEventLoopPolicy]:
    if POLICIES_DEPRECATED:
        return asyncio.unix_events._DefaultEventLoopPolicy
    return asyncio.DefaultEventLoopPolicy


def snakeloop_policy_class() -> type[asyncio.AbstractEventLoopPolicy]:
    """snakeloop's policy class, read without the warning ``snakeloop.EventLoopPolicy``
    gives from 3.14."""
    from snakeloop.runner import EventLoopPolicy

    return EventLoopPolicy
