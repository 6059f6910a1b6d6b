"""attnsvm.book.exercises.check: the student's result next to the expected one."""

import numpy as np

from attnsvm.book import exercises


def _unimplemented(x):
    raise NotImplementedError


def test_check_reports_each_outcome(capsys):
    exercises.check("good", lambda x: x + 1e-17, np.ones(3), expected=np.ones(3), tol=1e-10)
    exercises.check("bad", lambda x: 2 * x, np.ones(3), expected=np.ones(3), tol=1e-10)
    exercises.check("todo", _unimplemented, np.ones(3), expected=np.ones(3))
    exercises.check("shape", lambda x: x[:2], np.ones(3), expected=np.ones(3))
    lines = capsys.readouterr().out.splitlines()
    # A correct result prints no round-off digits (they differ between processors).
    assert lines[0] == "good: correct (max abs difference within the tolerance 1e-10)."
    assert lines[1] == "bad: not yet correct (max abs difference 1.0e+00, tolerance 1e-10)."
    assert lines[2].startswith("todo: not implemented yet")
    assert lines[3] == "shape: wrong shape (2,), expected (3,)."
