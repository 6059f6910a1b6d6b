"""Bad input for attnsvm.svm and attnsvm.nuclear: every call returns a valid result (finite, of the right shape) or
raises TypeError/ValueError/FloatingPointError/SolverError (InfeasibleSVM is a ValueError) naming an argument the
caller passed; the cvxpy solvers give the same answer however many calls came before."""

import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from attnsvm import data, svm, theory
from attnsvm.svm import _nuclear_svm as nuclear
from bad_input import ERRORS, check, names, options

COVERED = {"svm.constraint_matrix", "svm.att_svm", "svm.feasible", "svm.prompt_svm", "svm.general_svm",
           "svm.head_svm", "svm.GeneralSVM.combined", "svm._nuclear_svm.solve"}
n, T, d = 2, 3, 3  # d >= max(T - 1, n): the optimal tokens are feasible


def _problem(seed=0, batch=None):
    problem = data.random_problem(n, T, d, seed=seed, batch=batch)
    return problem.X.numpy(), problem.Z.numpy(), theory.optimal_tokens(problem).numpy(), problem.Y.numpy()


def _general(seed=3):
    """X, Z and the softmax probabilities of a W that keeps some tokens and masks others (both parts feasible)."""
    X, Z, _, _ = _problem()
    W = 12 * np.random.default_rng(seed).standard_normal((d, d))
    logits = np.einsum("ntd,de,ne->nt", X, W, Z)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    return X, Z, probs / probs.sum(-1, keepdims=True)


def _prompt(seed=4):
    """X, key, alpha of a feasible p-SVM: n (T - 1) = 4 constraints in R^5."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, T, 5)), rng.standard_normal((5, 5)), rng.integers(0, T, n)


def _pairs():
    X, Z, alpha, _ = _problem()
    deltas, queries = svm._attention._pairs(X, Z, alpha)
    return deltas[None], queries[None]


def _finite(*arrays):
    for array in arrays:
        assert isinstance(array, np.ndarray) and np.isfinite(array).all()


# ------------------------------------------------------------------ strategies of bad and extreme arguments

ODD = [None, "x", True, 3.5, [], [["a", "b"]], {"a": 1}, object()]


def _with(array, value):
    out = np.array(array, dtype=float)
    out.flat[out.size // 2] = value
    return out


def _scaled(array, factor):
    with np.errstate(over="ignore"):  # an entry may overflow to inf: the call must reject it
        return array * factor


def arrays(valid):
    """The valid array, or it scaled to extremes, with a NaN or inf, of another type, shape, dtype or device, or
    any float array of up to four dimensions."""
    return st.one_of(
        st.just(valid),
        st.sampled_from([1e-160, 1e-100, 1e100, 1e160, 0.0, -1.0]).map(lambda c: valid * c),
        st.integers(-320, 308).map(lambda k: _scaled(valid, 10.0**k)),
        hnp.arrays(np.float64, hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=4)),
        st.sampled_from([np.nan, np.inf, -np.inf]).map(lambda v: _with(valid, v)),
        st.sampled_from(ODD),
        st.sampled_from([valid.reshape(-1), valid[..., :0], valid[:0], valid[..., None], np.zeros((0,))]),
        st.sampled_from([torch.tensor(valid, requires_grad=True), torch.tensor(valid, dtype=torch.float32),
                         valid.astype(complex), valid > 0, valid.astype(np.int64),
                         torch.empty(valid.shape, device="meta")]),
    )


def indices(valid, upper):
    """Token indices: valid, out of range, non-integral, NaN, of the wrong shape or type."""
    return st.one_of(
        st.just(valid),
        st.sampled_from([valid + upper, valid - upper, valid + 0.5, _with(valid, np.nan), valid[:-1], valid[None],
                         valid.astype(float), torch.tensor(valid.astype(float), requires_grad=True),
                         valid.astype(str), valid > 0]),
        st.sampled_from(ODD),
    )


# ------------------------------------------------------------------ the defects of the issue, one test each

@pytest.mark.parametrize("norm", ["fro", "nuc"])
@pytest.mark.parametrize("scale_X,scale_Z", [(1e100, 1e100), (1e-100, 1e-100), (1e160, 1.0), (1e-160, 1.0),
                                             (1e200, 1e-200), (1e-3, 1e-3), (2.0**-7, 1.0), (1e3, 1.0)])
def test_att_svm_of_scaled_data_is_the_scaled_solution(norm, scale_X, scale_Z):
    """Before: X*1e100, Z*1e100 gave all-NaN; X, Z x1e-100 (a feasible problem) raised InfeasibleSVM; X*1e160 alone
    was 5e-4 off. The SVM of X a, Z b is W / (a b) exactly: the library solves data of extreme scale after a
    rescaling by powers of two (exact), which this checks to the solvers' accuracy."""
    X, Z, alpha, _ = _problem()
    c = scale_X * scale_Z
    tol = 1e-12 if norm == "fro" else 1e-6  # a nuclear-norm solution is accurate to about 1e-7
    W, lam = svm.att_svm(X, Z, alpha, norm=norm, return_multipliers=True)
    W_s = svm.att_svm(X * scale_X, Z * scale_Z, alpha, norm=norm)
    np.testing.assert_allclose(W_s * c, W, rtol=0, atol=tol * np.abs(W).max())
    assert svm.feasible(X * scale_X, Z * scale_Z, alpha)
    power = 1 if norm == "nuc" else 2  # lambda scales as W (nuclear) or as W^2 (Frobenius: W = A^T lambda)
    if abs(np.log10(c)) * power < 290:
        _, lam_s = svm.att_svm(X * scale_X, Z * scale_Z, alpha, norm=norm, return_multipliers=True)
        np.testing.assert_allclose(lam_s * c**power, lam, rtol=0, atol=tol * lam.max())
    else:  # the multipliers alone leave float64
        with pytest.raises(FloatingPointError, match=r"multipliers for X, Z would be about 2\^"):
            svm.att_svm(X * scale_X, Z * scale_Z, alpha, norm=norm, return_multipliers=True)


def test_other_solvers_of_scaled_data():
    X, Z, alpha, Y = _problem()
    for norm, solver in (("fro", "clarabel"), ("nuc", "clarabel")):
        W = svm.att_svm(X, Z, alpha, norm=norm, solver=solver)
        np.testing.assert_allclose(svm.att_svm(X * 1e150, Z, alpha, norm=norm, solver=solver) * 1e150, W, rtol=0,
                                   atol=1e-6 * np.abs(W).max())
    XP, KEY, AP = _prompt()
    p = svm.prompt_svm(XP, KEY, AP)
    np.testing.assert_allclose(svm.prompt_svm(XP * 1e-120, KEY * 1e-120, AP) * 1e-240, p, rtol=1e-12)
    v, support = svm.head_svm(X, Y, alpha)
    v_s, support_s = svm.head_svm(X * 1e200, Y, alpha)
    np.testing.assert_allclose(v_s * 1e200, v, rtol=1e-12)
    np.testing.assert_array_equal(support_s, support)
    XG, ZG, probs = _general()
    general, scaled = svm.general_svm(XG, ZG, probs), svm.general_svm(XG * 1e-100, ZG * 1e-100, probs)
    np.testing.assert_allclose(scaled.W_fin * 1e-200, general.W_fin, rtol=0, atol=1e-10 * np.abs(general.W_fin).max())
    np.testing.assert_allclose(scaled.W_mm * 1e-200, general.W_mm, rtol=0, atol=1e-10 * np.abs(general.W_mm).max())
    deltas, queries = _pairs()
    W, y, _ = nuclear.solve(deltas, queries)
    W_s, y_s, converged = nuclear.solve(deltas * 1e200, queries * 1e100)
    assert converged.all()
    np.testing.assert_allclose(W_s * 1e300, W, rtol=0, atol=1e-6 * np.abs(W).max())


@pytest.mark.parametrize("scale", [1e-160, 1e160])
def test_att_svm_that_float64_cannot_hold_raises(scale):
    """X, Z both x1e-160: W ~ 1e320 overflows; both x1e160: W ~ 1e-320 would lose its digits."""
    X, Z, alpha, _ = _problem()
    with pytest.raises(FloatingPointError, match=r"solution for these X, Z would be .*outside the range of float64"):
        svm.att_svm(X * scale, Z * scale, alpha)


def test_general_svm_with_an_unsatisfiable_finite_part_raises():
    """Before: returned a W_fin without checking its residual. Two identical tokens kept with different
    probabilities: no W gives them different logits."""
    X, Z, probs = _general()
    keep = np.flatnonzero(probs[0] >= 1e-3)
    if len(keep) < 2:
        probs[0] = [0.5, 0.4999, 0.0001][:T]
        keep = np.arange(2)
    X = X.copy()
    X[0, keep[1]] = X[0, keep[0]]
    probs[0, keep] = probs[0, keep].sum() * np.array([0.7, 0.3] + [0.0] * (len(keep) - 2))
    with pytest.raises(svm.InfeasibleSVM, match=r"finite part .* no solution.*probs"):
        svm.general_svm(X, Z, probs)


@pytest.mark.parametrize("labels", [[2.0, -1.0], [0.0, 1.0], [1.0, 0.5]])
def test_head_svm_rejects_labels_other_than_plus_minus_one(labels):
    """Before: any Y was accepted (Y = 2 silently halved v)."""
    X, _, alpha, _ = _problem()
    with pytest.raises(ValueError, match=r"Y must hold labels \+1 or -1"):
        svm.head_svm(X, np.array(labels), alpha)


def test_nuclear_solve_rejects_a_zero_constraint():
    """Before: converged=True with ||W||_* = 1e258 and margin 0 (x_alpha = x_t: the problem is infeasible)."""
    deltas, queries = _pairs()
    deltas[0, 1] = 0
    with pytest.raises(ValueError, match=r"deltas\[0, 1\] is zero.*infeasible"):
        nuclear.solve(deltas, queries)
    queries[0, 2] = 0
    with pytest.raises(ValueError, match=r"queries\[0, 2\] is zero"):
        nuclear.solve(_pairs()[0], queries)


def test_nuclear_solve_reports_no_convergence_where_a_margin_is_short():
    """A delta of size 1e-200 next to ones of size 1: numerically a zero constraint, which W cannot meet."""
    deltas, queries = _pairs()
    deltas[0, 1] *= 1e-200
    W, y, converged = nuclear.solve(deltas, queries)
    assert not converged[0] and np.isfinite(W).all()


@pytest.mark.parametrize("call", [
    lambda X, Z, a: svm.att_svm(X, Z, a), lambda X, Z, a: svm.feasible(X, Z, a),
    lambda X, Z, a: svm.constraint_matrix(X, Z, a), lambda X, Z, a: svm.prompt_svm(X, np.eye(d), a)])
def test_one_token_per_sequence_is_rejected(call):
    X, Z, _, _ = _problem()
    with pytest.raises(ValueError, match=r"X must hold T >= 2 tokens per sequence .*T=1"):
        call(X[:, :1], Z, np.zeros(n, int))


@pytest.mark.parametrize("call", [
    lambda X, Z, a: svm.att_svm(X, Z, a), lambda X, Z, a: svm.feasible(X, Z, a),
    lambda X, Z, a: svm.constraint_matrix(X, Z, a), lambda X, Z, a: svm.prompt_svm(X, np.eye(d), a),
    lambda X, Z, a: svm.head_svm(X, np.ones(0), a), lambda X, Z, a: svm.general_svm(X, Z, np.ones((0, T)) / T)])
def test_no_sequences_are_rejected(call):
    """Before: n = 0 gave numpy's "cannot reshape array of size 0"."""
    X, Z, _, _ = _problem()
    with pytest.raises(ValueError, match=r"X must hold n >= 1 sequences"):
        call(X[:0], Z[:0], np.zeros(0, int))


def test_general_svm_rejects_a_single_token():
    X, Z, probs = _general()
    with pytest.raises(ValueError, match=r"X must hold .*T >= 2 tokens"):
        svm.general_svm(X[:, :1], Z, np.ones((n, 1)))


def test_tensors_that_require_grad_are_accepted():
    """Before: "Can't call numpy() on Tensor that requires grad"."""
    X, Z, alpha, Y = _problem()
    Xg, Zg = torch.tensor(X, requires_grad=True), torch.tensor(Z, requires_grad=True)
    np.testing.assert_array_equal(svm.att_svm(Xg, Zg, alpha), svm.att_svm(X, Z, alpha))
    np.testing.assert_array_equal(svm.att_svm(Xg, Zg, alpha, norm="nuc"), svm.att_svm(X, Z, alpha, norm="nuc"))
    assert svm.feasible(Xg, Zg, alpha)
    np.testing.assert_array_equal(svm.constraint_matrix(Xg, Zg, alpha), svm.constraint_matrix(X, Z, alpha))
    XP, KEY, AP = _prompt()
    XPg, KEYg = torch.tensor(XP, requires_grad=True), torch.tensor(KEY, requires_grad=True)
    np.testing.assert_array_equal(svm.prompt_svm(XPg, KEYg, AP), svm.prompt_svm(XP, KEY, AP))
    np.testing.assert_array_equal(svm.head_svm(Xg, torch.tensor(Y, requires_grad=True), alpha)[0],
                                  svm.head_svm(X, Y, alpha)[0])
    Xs, Zs, probs = _general()
    general = svm.general_svm(torch.tensor(Xs, requires_grad=True), Zs, torch.tensor(probs, requires_grad=True))
    np.testing.assert_array_equal(general.combined(torch.ones(d, d, requires_grad=True)),
                                  svm.general_svm(Xs, Zs, probs).combined(np.ones((d, d))))
    deltas, queries = _pairs()
    np.testing.assert_array_equal(nuclear.solve(torch.tensor(deltas, requires_grad=True), queries)[0],
                                  nuclear.solve(deltas, queries)[0])


@pytest.mark.parametrize("norm,solver", [("fro", "clarabel"), ("nuc", "clarabel"), ("nuc", "scs")])
def test_cvxpy_solvers_do_not_depend_on_earlier_calls(norm, solver):
    """Before: a cached cvxpy problem (and SCS's warm start) carried each call's state into the next. Now A, then
    B, then A again gives A's first answer to the bit."""
    XA, ZA, alphaA, _ = _problem(1, batch=3)
    XB, ZB, alphaB, _ = _problem(2, batch=2)
    first = svm.att_svm(XA, ZA, alphaA, norm=norm, solver=solver, return_multipliers=True)
    for _ in range(2):
        svm.att_svm(XB, ZB, alphaB, norm=norm, solver=solver, return_multipliers=True)
        again = svm.att_svm(XA, ZA, alphaA, norm=norm, solver=solver, return_multipliers=True)
        np.testing.assert_array_equal(again[0], first[0])
        np.testing.assert_array_equal(again[1], first[1])
    cold = dict(warm_start=False) if solver == "scs" else {}  # SCS chains the instances of one call unless told
    independent = svm.att_svm(XA, ZA, alphaA, norm=norm, solver=solver, options=cold)
    np.testing.assert_array_equal(svm.att_svm(XA[1], ZA[1], alphaA[1], norm=norm, solver=solver, options=cold),
                                  independent[1])


def test_the_ipm_fallback_to_clarabel_does_not_depend_on_earlier_calls(monkeypatch):
    monkeypatch.setattr(nuclear, "MAX_ITER", 2)  # no convergence: every instance goes to Clarabel
    XA, ZA, alphaA, _ = _problem(1, batch=2)
    XB, ZB, alphaB, _ = _problem(2, batch=2)
    first = svm.att_svm(XA, ZA, alphaA, norm="nuc")
    svm.att_svm(XB, ZB, alphaB, norm="nuc")
    np.testing.assert_array_equal(svm.att_svm(XA, ZA, alphaA, norm="nuc"), first)


@pytest.mark.filterwarnings("ignore:Solution may be inaccurate")  # cvxpy's, before the SolverError
@pytest.mark.parametrize("bad,error,pattern", [
    (dict(options="fast", solver="scs", norm="nuc"), TypeError, r"options must be a dict"),
    (dict(options={"solver": "SCS"}, solver="clarabel"), ValueError, r"options must not name the solver"),
    (dict(options={"warm_start": "no"}, solver="scs", norm="nuc"), TypeError, r"options\['warm_start'\]"),
    (dict(options={"max_iter": -1}, solver="clarabel"), ValueError, r"options .* were refused by clarabel"),
    (dict(options={"max_iter": 1}, solver="clarabel"), svm.SolverError, r"other options than"),
    (dict(norm=np.array(["fro"])), ValueError, r"norm=.* is not supported"),
    (dict(solver=["nnls"]), ValueError, r"solver=.* is not supported"),
    (dict(return_multipliers="yes"), TypeError, r"return_multipliers must be True or False"),
])
def test_att_svm_rejects_bad_settings(bad, error, pattern):
    X, Z, alpha, _ = _problem()
    with pytest.raises(error, match=pattern):
        svm.att_svm(X, Z, alpha, **bad)


@pytest.mark.parametrize("threshold", [0, -1e-3, 1.5, np.nan, np.inf, "0.1", None, True])
def test_general_svm_rejects_bad_thresholds(threshold):
    """Before: threshold 0 took log(0) (NaN), threshold > max probs indexed an empty set (IndexError)."""
    X, Z, probs = _general()
    with pytest.raises((TypeError, ValueError), match=r"threshold"):
        svm.general_svm(X, Z, probs, threshold=threshold)


@pytest.mark.parametrize("probs", [lambda p: -p, lambda p: 2 * p, lambda p: np.log(p + 1e-12)])
def test_general_svm_rejects_what_are_not_probabilities(probs):
    X, Z, p = _general()
    with pytest.raises(ValueError, match=r"probs must hold attention probabilities"):
        svm.general_svm(X, Z, probs(p))


def test_combined_rejects_a_bad_W_gd():
    general = svm.general_svm(*_general())
    with pytest.raises(ValueError, match=r"W_gd must have shape \(3, 3\)"):
        general.combined(np.ones(3))  # before: numpy's broadcast error
    with pytest.raises(ValueError, match=r"W_gd contains 1 NaN"):
        general.combined(_with(np.ones((d, d)), np.nan))  # before: an all-NaN W_SVMeq
    with pytest.raises(FloatingPointError, match=r"W_gd"):
        general.combined(np.full((d, d), 1.7e308))


def test_relaxed_must_hold_booleans():
    X, key, alpha = _prompt()
    with pytest.raises(TypeError, match=r"relaxed must hold booleans"):
        svm.prompt_svm(X, key, alpha, relaxed=["yes", "no"])  # before: both True
    with pytest.raises(ValueError, match=r"relaxed must have shape \(2,\)"):
        svm.prompt_svm(X, key, alpha, relaxed=[True])


def test_problems_too_large_are_refused_before_any_work():
    with pytest.raises(ValueError, match=r"X asks for .* bytes for the constraint matrix"):
        svm.att_svm(np.ones((1, 2, 20_000)), np.ones((1, 20_000)), [0])
    with pytest.raises(ValueError, match=r"deltas asks for .* floating-point operations"):
        nuclear.solve(np.ones((1, 3000, 2)), np.ones((1, 3000, 2)))
    with pytest.raises(ValueError, match=r"X asks for .* floating-point operations"):
        svm.att_svm(np.ones((60, 51, 2)), np.ones((60, 2)), np.zeros(60, int), norm="nuc")


def test_an_empty_batch_gives_empty_results():
    X, Z, alpha, _ = _problem(batch=2)
    assert svm.att_svm(X[:0], Z[:0], alpha[:0]).shape == (0, d, d)
    W, lam = svm.att_svm(X[:0], Z[:0], alpha[:0], norm="nuc", return_multipliers=True)
    assert W.shape == (0, d, d) and lam.shape == (0, n, T)
    assert svm.feasible(X[:0], Z[:0], alpha[:0]).shape == (0,)
    assert svm.prompt_svm(X[:0], np.eye(d), alpha[:0]).shape == (0, d)


@pytest.mark.parametrize("call", [
    lambda p, alpha: svm.att_svm(p, alpha), lambda p, alpha: svm.att_svm(p.X, p.Z, alpha),
    lambda p, alpha: svm.constraint_matrix(p, alpha), lambda p, alpha: svm.feasible(p, alpha),
    lambda p, alpha: svm.head_svm(p, alpha), lambda p, alpha: svm.prompt_svm(p, np.eye(d), alpha),
])
def test_alpha_on_the_meta_device_is_named(call):
    """The bad-input census: a 'meta' alpha met torch's NotImplementedError ("Cannot copy out of meta tensor")."""
    problem = data.random_problem(n, T, d, seed=0)
    with pytest.raises(ValueError, match=r"^alpha is on the device 'meta'"):
        call(problem, theory.optimal_tokens(problem).to("meta"))


def test_hard_margin_of_tiny_rows_names_rows():
    """The bad-input census: rows x 1e-160 (a solution of norm 1e160, beyond MAX_NORM) raised InfeasibleSVM without
    saying which argument to rescale."""
    with pytest.raises(svm.InfeasibleSVM, match=r"\brows\b.*rescale them"):
        svm.penalty_threshold(np.array([[1.0, 0.0], [0.0, 2.0]]) * 1e-160)


# ------------------------------------------------------------------ property tests, one per public function

X0, Z0, ALPHA0, Y0 = _problem()
XG, ZG, PROBS = _general()
GENERAL = svm.general_svm(XG, ZG, PROBS)
DELTAS, QUERIES = _pairs()


@settings(max_examples=30, deadline=None)
@given(st.fixed_dictionaries({"X": arrays(X0), "Z": arrays(Z0), "alpha": indices(ALPHA0, T),
                              "norm": options("fro", ["nuc", "NUC", None, 1]),
                              "solver": options(None, ["clarabel", "scs", "ipm", "mosek", 0]),
                              "return_multipliers": options(False, [True, np.bool_(True), "yes", None, 1]),
                              "options": options(None, [{}, {"max_iter": 50}, {"eps_abs": 1e-4}, "fast", {1: 2},
                                                        {"solver": "SCS"}, {"warm_start": "x"}])}))
def test_att_svm_property(arguments):
    valid = {"X": X0, "Z": Z0, "alpha": ALPHA0, "norm": "fro", "solver": None, "return_multipliers": False,
             "options": None}

    def accept(result):  # the shapes follow X's (another valid X may have been drawn)
        n_, T_, d_ = np.shape(arguments["X"])
        W, lam = result if isinstance(result, tuple) else (result, np.zeros((n_, T_)))
        assert W.shape == (d_, d_) and lam.shape == (n_, T_)
        _finite(W, lam)
    check(svm.att_svm, arguments, valid, accept)


@settings(max_examples=30, deadline=None)
@given(st.fixed_dictionaries({"X": arrays(X0), "Z": arrays(Z0), "alpha": indices(ALPHA0, T)}))
def test_feasible_property(arguments):
    def accept(result):
        assert isinstance(result, np.ndarray) and result.dtype == bool and result.shape == ()
    check(svm.feasible, arguments, {"X": X0, "Z": Z0, "alpha": ALPHA0}, accept)


@settings(max_examples=30, deadline=None)
@given(st.fixed_dictionaries({"X": arrays(X0), "Z": arrays(Z0), "alpha": indices(ALPHA0, T)}))
def test_constraint_matrix_property(arguments):
    def accept(result):  # (n (T - 1), d^2) for the shapes passed (T may differ from the valid X's)
        n_, T_, d_ = np.shape(arguments["X"])
        assert result.shape == (n_ * (T_ - 1), d_ * d_)
        _finite(result)
    check(svm.constraint_matrix, arguments, {"X": X0, "Z": Z0, "alpha": ALPHA0}, accept)


XP, KEY0, AP = _prompt()
RELAXED0 = np.array([False, True])


@settings(max_examples=30, deadline=None)
@given(st.fixed_dictionaries({"X": arrays(XP), "key": arrays(KEY0), "alpha": indices(AP, T),
                              "relaxed": options(None, [RELAXED0, [True, True], [1, 0], "yes", RELAXED0[:1],
                                                        torch.tensor(RELAXED0)])}))
def test_prompt_svm_property(arguments):
    def accept(result):
        assert result.shape == np.shape(arguments["X"])[-1:]
        _finite(result)
    check(svm.prompt_svm, arguments, {"X": XP, "key": KEY0, "alpha": AP, "relaxed": None}, accept)


@settings(max_examples=30, deadline=None)
@given(st.fixed_dictionaries({"X": arrays(X0), "Y": arrays(Y0), "alpha": indices(ALPHA0, T)}))
def test_head_svm_property(arguments):
    def accept(result):
        v, support = result
        n_, _, d_ = np.shape(arguments["X"])
        assert v.shape == (d_,) and support.shape == (n_,) and support.dtype == bool
        _finite(v)
    check(svm.head_svm, arguments, {"X": X0, "Y": Y0, "alpha": ALPHA0}, accept)


@settings(max_examples=30, deadline=None)
@given(st.fixed_dictionaries({"X": arrays(XG), "Z": arrays(ZG), "probs": arrays(PROBS),
                              "threshold": options(1e-3, [0.0, -1.0, 2.0, np.nan, 1e-300, 0.5, "x", None, True])}))
def test_general_svm_property(arguments):
    def accept(result):
        n_, T_, d_ = np.shape(arguments["X"])
        assert result.relevant.shape == (n_, T_) and result.W_fin.shape == result.W_mm.shape == (d_, d_)
        _finite(result.W_fin, result.W_mm)
    check(svm.general_svm, arguments, {"X": XG, "Z": ZG, "probs": PROBS, "threshold": 1e-3}, accept)


@settings(max_examples=30, deadline=None)
@given(st.fixed_dictionaries({"W_gd": arrays(np.ones((d, d)))}))
def test_combined_property(arguments):
    def accept(result):
        assert result.shape == (d, d)
        _finite(result)
    check(GENERAL.combined, arguments, {"W_gd": np.ones((d, d))}, accept)


@settings(max_examples=30, deadline=None)
@given(st.fixed_dictionaries({"deltas": arrays(DELTAS), "queries": arrays(QUERIES)}))
def test_nuclear_solve_property(arguments):
    def accept(result):
        W, y, converged = result
        B, K, d_ = np.shape(arguments["deltas"])
        assert W.shape == (B, d_, d_) and y.shape == (B, K) and converged.shape == (B,)
        _finite(W, y)
    check(nuclear.solve, arguments, {"deltas": DELTAS, "queries": QUERIES}, accept)


PROBLEM0 = data.random_problem(n, T, d, seed=0)  # X0, Z0, ALPHA0 are its arrays


@settings(max_examples=30, deadline=None)
@given(st.fixed_dictionaries({"alpha": indices(ALPHA0, T), "norm": options("fro", ["nuc", "NUC", None, 1]),
                              "return_multipliers": options(False, [True, "yes", None])}))
def test_att_svm_of_a_problem_property(arguments):
    """att_svm(problem, alpha, ...): the Problem form names alpha and the options as the array form does."""
    def accept(result):
        W, lam = result if isinstance(result, tuple) else (result, np.zeros((n, T)))
        assert W.shape == (d, d) and lam.shape == (n, T)
        _finite(W, lam)
    check(lambda **a: svm.att_svm(PROBLEM0, **a), arguments,
           {"alpha": ALPHA0, "norm": "fro", "return_multipliers": False}, accept)


@settings(max_examples=20, deadline=None)
@given(st.fixed_dictionaries({"alpha": indices(ALPHA0, T)}))
def test_feasible_and_head_svm_of_a_problem_property(arguments):
    def accept(result):
        assert isinstance(result, (np.ndarray, tuple))
    check(lambda **a: svm.feasible(PROBLEM0, **a), arguments, {"alpha": ALPHA0}, accept)
    check(lambda **a: svm.head_svm(PROBLEM0, **a), arguments, {"alpha": ALPHA0}, accept)
