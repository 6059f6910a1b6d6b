"""What the bad-input suites (tests/lib/test_bad_input_*.py) share: a call must either succeed with a result
the suite accepts or raise a clear error that names an argument the caller changed."""

import re

import hypothesis.strategies as st

from attnsvm import svm

ERRORS = (TypeError, ValueError, FloatingPointError, svm.SolverError)  # svm.InfeasibleSVM is a ValueError


def names(message: str, arguments) -> bool:
    """Whether `message` names one of `arguments` as a word."""
    return any(re.search(rf"(?<![A-Za-z_]){re.escape(name)}(?![A-Za-z_])", message) for name in arguments)


def check(call, arguments: dict, valid: dict, accept, errors: tuple = ERRORS) -> None:
    """Run call(**arguments): with every argument valid it must succeed; otherwise it succeeds with a result that
    `accept` takes, or raises one of `errors` naming an argument that differs from `valid`."""
    changed = [name for name in arguments if arguments[name] is not valid[name]]
    try:
        result = call(**arguments)
    except errors as error:
        assert changed, f"valid arguments raised {error!r}"
        assert names(str(error), changed), f"{type(error).__name__} names none of {changed}: {error}"
        return
    accept(result)


def options(valid, others):
    """The valid value or one of `others`."""
    return st.one_of(st.just(valid), st.sampled_from(others))
