"""The docstring examples (`pytest --doctest-modules lib/attnsvm`) run as a chapter does after `attnsvm.setup()`:
float64 by default, one thread, every seed 0."""

import pytest

import attnsvm


@pytest.fixture(autouse=True)
def _numerics():
    attnsvm._session._numerics()
