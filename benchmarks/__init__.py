"""snakeloop's micro-benchmarks: ``python -m benchmarks`` from the repository root."""
