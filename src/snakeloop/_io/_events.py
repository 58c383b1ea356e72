"""Readiness bits shared by every backend and the loop."""

READABLE = 1
WRITABLE = 2
