"""The two ways to pass data to the attention SVMs: arrays, ``att_svm(X, Z, alpha)``, or an ``attnsvm.data.Problem``
that carries them, ``att_svm(problem, alpha)``. One helper reads both, so that every solver takes a Problem the same
way and says the same thing about a wrong mix."""

from __future__ import annotations

from typing import Any

from ..data import Problem, Sequences

__all__: list[str] = []


def _unpack(caller: str, X: Any, middle: Any, last: Any, *, field: str | None, middle_name: str, last_name: str,
            min_T: int = 2) -> tuple[Any, Any, Any]:
    """(X, middle, last) for ``caller(X, middle, last)`` with arrays or ``caller(problem, last)`` with a Problem,
    whose attribute ``field`` ("Z" or "Y") gives the middle argument (``last`` may come positionally, in the place
    of ``middle``, or by its name). With ``field=None`` the problem stands for X alone: ``caller(problem, middle,
    last)``.

    The arrays are returned as they are (the solver validates them, naming them). A Problem without the field
    (paper B's prompt problems have no queries Z) or with fewer than ``min_T`` tokens per sequence is refused
    (ValueError); so are a middle argument passed besides the problem, a Problem in another place than the first
    and a missing argument (TypeError, naming it).
    """
    problem = X if isinstance(X, Problem) else None
    if problem is None and isinstance(X, Sequences):  # e.g. causal.SequenceProblem
        raise TypeError(f"X is a {type(X).__name__}: {caller} takes an attnsvm.data.Problem or arrays (the causal "
                        f"Att-SVMs are causal.att_svm)")
    first = f"{caller}(problem, {middle_name}, {last_name})" if field is None else f"{caller}(problem, {last_name})"
    forms = f"{caller}(X, {middle_name}, {last_name}) with arrays, or {first} with an attnsvm.data.Problem"
    if problem is not None and field is not None:
        if middle is not None and isinstance(last, str):
            raise TypeError(f"{first} takes its options by keyword: got {last!r} in the place of a third argument; "
                            f"pass e.g. {caller}(problem, {last_name}, norm={last!r})")
        if middle is not None and last is not None:
            raise TypeError(f"{first} takes {middle_name} from the problem (problem.{field}): got a Problem and both "
                            f"{middle_name} and {last_name}; pass {forms}")
        middle, last = getattr(problem, field), (last if middle is None else middle)
        if middle is None:  # only Z may be None (paper B's prompt model)
            raise ValueError(f"problem.Z is None (paper B's prompt model: one trained query p, no queries z_i), and "
                             f"{caller} needs the queries z_i; the prompt model's SVM is svm.prompt_svm(problem, key, "
                             f"alpha), or pass arrays: {caller}(X, Z, {last_name})")
    for name, value in ((middle_name, middle), (last_name, last)):
        if isinstance(value, Problem):
            raise TypeError(f"{name} is a Problem: a Problem comes first, pass {forms}")
        if value is None:
            raise TypeError(f"{name} is missing (None): pass {forms}")
    if problem is not None:
        if problem.T < min_T:
            raise ValueError(f"problem holds T={problem.T} token per sequence: {caller} needs T >= {min_T} (a token "
                             f"to separate the selected one from)")
        X = problem.X
    return X, middle, last
