"""Tier R reliability tests (see shared/reliability-plan.md for the IDs)."""
