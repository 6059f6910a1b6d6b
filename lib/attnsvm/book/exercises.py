"""Self-checks for the book's coding exercises: the student sees their result next to the expected one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["check"]


def check(name: str, function: Callable[..., ArrayLike], *args: Any, expected: ArrayLike,
          tol: float = 1e-6) -> None:
    r"""Call ``function(*args)`` and print whether it matches ``expected`` (max abs difference :math:`\le` tol).

    A correct result is reported without its difference, which is round-off and differs between processors (the
    book's stored outputs must not); a wrong one with it; a function that raises NotImplementedError is reported
    as not implemented yet.

    Parameters
    ----------
    name : str
        What is checked, as printed.
    function : Callable
        The student's function.
    *args : object
        Its arguments.
    expected : ArrayLike
        The expected result.
    tol : float, default=1e-06
        The largest absolute difference accepted.

    Examples
    --------
    >>> from attnsvm.book import exercises
    >>> exercises.check("square", lambda x: x**2, 3.0, expected=9.0)
    square: correct (max abs difference within the tolerance 1e-06).
    >>> exercises.check("square", lambda x: x**3, 3.0, expected=9.0)
    square: not yet correct (max abs difference 1.8e+01, tolerance 1e-06).
    """
    try:
        result = np.asarray(function(*args), dtype=float)
    except NotImplementedError:
        print(f"{name}: not implemented yet - complete the function above and run this cell again.")
        return
    expected = np.asarray(expected, dtype=float)
    if result.shape != expected.shape:
        print(f"{name}: wrong shape {result.shape}, expected {expected.shape}.")
        return
    error = float(np.max(np.abs(result - expected))) if result.size else 0.0
    if error <= tol:
        print(f"{name}: correct (max abs difference within the tolerance {tol:.0e}).")
    else:
        print(f"{name}: not yet correct (max abs difference {error:.1e}, tolerance {tol:.0e}).")
