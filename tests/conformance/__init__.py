"""Conformance runner: CPython's test.test_asyncio against snakeloop (see README.md)."""
