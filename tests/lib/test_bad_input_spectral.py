"""Bad input for svm.spectral_att_svm: every call returns a finite (d, d) array or raises one of the errors of
tests/lib/test_bad_input_svm.py naming an argument the caller passed."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsvm import svm
from bad_input import check, options
from test_bad_input_svm import ALPHA0, T, X0, Z0, _finite, arrays, indices

COVERED = {"svm.spectral_att_svm"}


@settings(max_examples=30, deadline=None)
@given(st.fixed_dictionaries({"X": arrays(X0), "Z": arrays(Z0), "alpha": indices(ALPHA0, T),
                              "solver": options("clarabel", ["scs", "SCS", "ipm", None, 0, "mosek"])}))
def test_spectral_att_svm_property(arguments):
    valid = {"X": X0, "Z": Z0, "alpha": ALPHA0, "solver": "clarabel"}

    def accept(result):
        d_ = np.shape(arguments["X"])[-1]
        assert result.shape == (d_, d_)
        _finite(result)
    check(svm.spectral_att_svm, arguments, valid, accept)
