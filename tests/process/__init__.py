"""Tests of subprocesses, pipes, fork and signals."""
