"""Tests of the core (``snakeloop._core``): the run loop, futures, tasks and handles."""
