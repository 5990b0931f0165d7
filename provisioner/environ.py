"""The process environment, copied whole even while another thread changes it."""

from __future__ import annotations

import os


def copy_environ() -> dict[str, str]:
    """A copy of ``os.environ`` that a concurrent change cannot break.

    ``dict(os.environ)`` lists the keys and then looks each one up, so a key another thread removes in
    between raises ``KeyError`` (pytest removes ``PYTEST_CURRENT_TEST`` after every test while a lab
    starts in a worker thread: the CI run of 39ce828 failed so). A key gone by its lookup is left out.
    """
    return {key: value for key in list(os.environ) if (value := os.environ.get(key)) is not None}
