"""find_seed() and replay(): a failing seed found, and run again to the same schedule."""

from __future__ import annotations

import subprocess
import sys

import pytest
from _race import bank

from snakeloop.testing import find_seed, replay

pytestmark = pytest.mark.timeout(60)


async def overdrawn():
    balance = await bank()
    if balance != 40:
        raise AssertionError(f"overdrawn: {balance}")
    return balance


def test_find_seed_returns_the_first_failing_seed():
    seed = find_seed(overdrawn)
    assert seed is not None
    for earlier in range(seed):
        assert replay(overdrawn, earlier)[0] == 40
    with pytest.raises(AssertionError, match="overdrawn: -20"):
        replay(overdrawn, seed)


def test_find_seed_passes_the_loop_options_and_returns_none():
    assert find_seed(overdrawn, seeds=range(40), perturb="none") is None
    assert find_seed(overdrawn, seeds=[]) is None


def test_replay_gives_the_result_and_the_same_fingerprint_each_time():
    for seed in range(5):
        result, fingerprint = replay(bank, seed, perturb="io_delay")
        assert result in (40, -20)
        assert replay(bank, seed, perturb="io_delay") == (result, fingerprint)
        # Another perturbation, another schedule.
        assert replay(bank, seed, perturb="io_order")[1] != fingerprint


def test_a_replayed_failure_carries_its_seed_and_fingerprint():
    seed = find_seed(overdrawn)
    notes = []
    for _ in range(3):
        with pytest.raises(AssertionError) as caught:
            replay(overdrawn, seed)
        notes.append(caught.value.__notes__)
    assert notes[0] == notes[1] == notes[2]
    [note] = notes[0]
    assert note.startswith(f"snakeloop: seed={seed} fingerprint=")
    assert len(note.rpartition("=")[2]) == 32


def test_importing_the_testing_package_does_not_import_pytest():
    code = "import sys, snakeloop.testing; print('pytest' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
