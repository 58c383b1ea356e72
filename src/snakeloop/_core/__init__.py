"""The hot path: handles, Future/Task and the core loop.

Modules here import only the standard library and each other, so they can
be compiled from the same source.
"""
