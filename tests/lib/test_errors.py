"""Bad input: every public entry point raises an exception whose message names the offending argument."""

import numpy as np
import pytest
import torch

import attnsvm
from attnsvm import data, model, svm, theory, train

n, T, d = 3, 4, 5


@pytest.fixture
def arrays():
    problem = data.random_problem(n, T, d, seed=0)
    return problem.X.numpy().copy(), problem.Y.numpy().copy(), problem.Z.numpy().copy(), problem.v.numpy().copy()


@pytest.fixture
def problem():
    return data.random_problem(n, T, d, seed=0)


def _with(array, index, value):
    out = np.array(array, dtype=np.float64)
    out[index] = value
    return out


# ------------------------------------------------------------------ data

def test_problem_rejects_2d_X(arrays):
    X, Y, Z, v = arrays
    with pytest.raises(ValueError, match=r"X must have shape \(\.\.\., n, T, d\)"):
        data.Problem(X[0], Y, Z, v)


@pytest.mark.parametrize("name,bad,pattern", [
    ("Y", np.ones(n + 1), r"Y must have shape \(3,\)"),
    ("Y", np.ones((n, 1)), r"Y must have shape \(3,\)"),
    ("Z", np.ones((n, d + 1)), r"Z must have shape \(3, 5\)"),
    ("Z", np.ones(d), r"Z must have shape \(3, 5\)"),
    ("v", np.ones(d - 1), r"v must have shape \(5,\)"),
    ("v", np.ones((2, d)), r"v must have shape \(5,\)"),
])
def test_problem_rejects_wrong_shapes(arrays, name, bad, pattern):
    kwargs = dict(zip("XYZv", arrays))
    kwargs[name] = bad
    with pytest.raises(ValueError, match=pattern):
        data.Problem(**kwargs)


def test_batched_problem_rejects_a_head_of_the_wrong_batch():
    problem = data.random_problem(n, T, d, seed=0, batch=4)
    with pytest.raises(ValueError, match=r"v must have shape \(4, 5\)"):
        data.Problem(problem.X, problem.Y, problem.Z, problem.v[:3])


@pytest.mark.parametrize("position", range(4))
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_problem_rejects_non_finite_input(arrays, position, value):
    name = "XYZv"[position]
    args = list(arrays)
    args[position] = _with(args[position], (0,) * args[position].ndim, value)
    with pytest.raises(ValueError, match=rf"^{name} contains 1 NaN or infinite entries"):
        data.Problem(*args)


@pytest.mark.parametrize("labels", [[0.0, 1.0, 1.0], [1.0, -1.0, 2.0], [0.5, 1.0, -1.0]])
def test_problem_rejects_labels_outside_plus_minus_one(arrays, labels):
    X, _, Z, v = arrays
    with pytest.raises(ValueError, match=r"Y must hold labels in \{-1, \+1\}"):
        data.Problem(X, np.array(labels), Z, v)


@pytest.mark.parametrize("bad,error", [("tokens", TypeError), ([["a", "b"]], TypeError), (None, TypeError),
                                       (np.ones((3, 4, 5), dtype=complex), TypeError),
                                       (np.ones((3, 4, 5), dtype=bool), TypeError)])
def test_problem_rejects_non_numeric_X(arrays, bad, error):
    _, Y, Z, v = arrays
    with pytest.raises(error, match=r"^X must"):
        data.Problem(bad, Y, Z, v)


@pytest.mark.parametrize("kwargs,name", [
    (dict(n=0, T=T, d=d), "n"), (dict(n=n, T=-1, d=d), "T"), (dict(n=n, T=T, d=2.5), "d"),
    (dict(n=n, T=T, d=d, batch=0), "batch"), (dict(n=True, T=T, d=d), "n"),
])
def test_random_problem_rejects_bad_sizes(kwargs, name):
    with pytest.raises(ValueError, match=rf"^{name} must be an integer >= 1"):
        data.random_problem(seed=0, **kwargs)


@pytest.mark.parametrize("kwargs,pattern", [(dict(T=1), r"^T must be an integer >= 2"),
                                            (dict(n=0), r"^n must be an integer >= 1")])
def test_planar_problem_rejects_bad_sizes(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        data.planar_problem(seed=0, **kwargs)


# ------------------------------------------------------------------ model

MODEL_FUNCTIONS = [model.logits, model.attention, model.outputs, model.loss, train.loss_gradient]


@pytest.mark.parametrize("function", MODEL_FUNCTIONS)
@pytest.mark.parametrize("shape", [(d + 1, d + 1), (d, d + 1), (d,), ()])
def test_model_rejects_W_of_wrong_shape(problem, function, shape):
    with pytest.raises(ValueError, match=r"W must have shape \(\.\.\., 5, 5\)"):
        function(problem, np.ones(shape))


@pytest.mark.parametrize("function", [model.logits, train.loss_gradient])
def test_model_rejects_W_with_a_batch_shape_that_does_not_match_the_problem(function):
    batched = data.random_problem(n, T, d, seed=0, batch=3)
    with pytest.raises(ValueError, match=r"\bW\b"):
        function(batched, np.ones((4, d, d)))


@pytest.mark.parametrize("function", MODEL_FUNCTIONS)
@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_model_rejects_non_finite_W(problem, function, value):
    with pytest.raises(ValueError, match=r"^W contains 1 NaN or infinite entries"):
        function(problem, _with(np.zeros((d, d)), (1, 2), value))


@pytest.mark.parametrize("function", [model.loss, train.loss_gradient])
def test_unknown_loss_is_rejected(problem, function):
    with pytest.raises(ValueError, match=r"^loss='hinge' is not supported: choose one of 'logistic', 'exponential'"):
        function(problem, np.zeros((d, d)), "hinge")


# ------------------------------------------------------------------ theory

ALPHA_FUNCTIONS = {
    "margins": lambda p, a: theory.margins(p, np.eye(d), a),
    "support_tokens": lambda p, a: theory.support_tokens(p, np.eye(d), a),
    "locally_optimal": theory.locally_optimal,
    "att_svm": lambda p, a: svm.att_svm(p.X, p.Z, a),
    "feasible": lambda p, a: svm.feasible(p.X, p.Z, a),
}


@pytest.mark.parametrize("function", ALPHA_FUNCTIONS.values(), ids=ALPHA_FUNCTIONS.keys())
@pytest.mark.parametrize("alpha,error,pattern", [
    ([0, 1], ValueError, r"alpha must have shape \(3,\)"),
    ([[0, 1, 2]], ValueError, r"alpha must have shape \(3,\)"),
    (0, ValueError, r"alpha must have shape \(3,\)"),
    ([0, 1, T], ValueError, r"alpha holds token indices outside \[0, 3\]"),
    ([0, -1, 2], ValueError, r"alpha holds token indices outside \[0, 3\]"),
    ([0, 1.5, 2], TypeError, r"alpha must hold integer token indices"),
    ([0, np.nan, 2], TypeError, r"alpha must hold integer token indices"),
    (np.array([True, False, True]), TypeError, r"alpha must hold integer token indices"),
    (["0", "1", "2"], TypeError, r"alpha must hold integer token indices"),
])
def test_bad_alpha_is_rejected(problem, function, alpha, error, pattern):
    with pytest.raises(error, match=pattern):
        function(problem, alpha)


def test_batched_alpha_must_have_the_batch_shape():
    batched = data.random_problem(n, T, d, seed=0, batch=2)
    with pytest.raises(ValueError, match=r"alpha must have shape \(2, 3\)"):
        theory.locally_optimal(batched, [0, 1, 2])
    with pytest.raises(ValueError, match=r"alpha must have shape \(2, 3\)"):
        svm.att_svm(batched.X, batched.Z, [0, 1, 2])


def test_integral_float_alpha_is_accepted(problem):
    np.testing.assert_array_equal(theory.margins(problem, np.eye(d), np.array([0.0, 1.0, 2.0])),
                                  theory.margins(problem, np.eye(d), [0, 1, 2]))


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_margins_reject_non_finite_W(problem, value):
    with pytest.raises(ValueError, match=r"^W contains"):
        theory.margins(problem, _with(np.eye(d), (0, 0), value), [0, 1, 2])


@pytest.mark.parametrize("A,B,pattern", [
    (np.ones(3), np.ones((3, 3)), r"A and B must be matrices"),
    (np.ones((3, 3)), np.ones(3), r"A and B must be matrices"),
    (_with(np.ones((3, 3)), (0, 0), np.nan), np.ones((3, 3)), r"^A contains 1 NaN"),
    (np.ones((3, 3)), _with(np.ones((3, 3)), (2, 1), np.inf), r"^B contains 1 NaN"),
    (np.zeros((3, 3)), np.ones((3, 3)), r"zero matrix"),
])
def test_correlation_rejects_bad_input(A, B, pattern):
    with pytest.raises(ValueError, match=pattern):
        theory.correlation(A, B)


def test_correlation_rejects_matrices_of_different_shapes():
    with pytest.raises(ValueError, match=r"\bA\b.*\bB\b"):
        theory.correlation(np.ones((3, 3)), np.ones((4, 4)))


# ------------------------------------------------------------------ svm

def test_att_svm_rejects_2d_X(problem):
    with pytest.raises(ValueError, match=r"X must have shape \(\.\.\., n, T, d\)"):
        svm.att_svm(problem.X[0], problem.Z, [0, 1, 2])


@pytest.mark.parametrize("function", [svm.att_svm, svm.feasible])
def test_att_svm_rejects_a_single_token(problem, function):
    with pytest.raises(ValueError, match=r"X must hold T >= 2 tokens per sequence.*T=1"):
        function(problem.X[:, :1], problem.Z, [0, 0, 0])


@pytest.mark.parametrize("function", [svm.att_svm, svm.feasible])
@pytest.mark.parametrize("Z_shape", [(n, d + 1), (n + 1, d), (d,), (2, n, d)])
def test_att_svm_rejects_Z_of_wrong_shape(problem, function, Z_shape):
    with pytest.raises(ValueError, match=r"Z must have shape \(3, 5\)"):
        function(problem.X, np.ones(Z_shape), [0, 1, 2])


@pytest.mark.parametrize("function", [svm.att_svm, svm.feasible])
@pytest.mark.parametrize("name", ["X", "Z"])
@pytest.mark.parametrize("value", [np.nan, -np.inf])
def test_att_svm_rejects_non_finite_input(problem, function, name, value):
    X, Z = problem.X.numpy(), problem.Z.numpy()
    if name == "X":
        X = _with(X, (1, 2, 3), value)
    else:
        Z = _with(Z, (2, 4), value)
    with pytest.raises(ValueError, match=rf"^{name} contains 1 NaN or infinite entries"):
        function(X, Z, [0, 1, 2])


@pytest.mark.parametrize("norm", ["frobenius", "nuclear", "l1", None])
def test_att_svm_rejects_unknown_norm(problem, norm):
    with pytest.raises(ValueError, match=r"^norm=.* is not supported: choose one of 'fro', 'nuc'"):
        svm.att_svm(problem.X, problem.Z, [0, 1, 2], norm=norm)


@pytest.mark.parametrize("norm,solver,options", [
    ("fro", "mosek", "'nnls', 'clarabel'"), ("fro", "scs", "'nnls', 'clarabel'"),
    ("nuc", "nnls", "'ipm', 'clarabel', 'scs'"), ("nuc", "CLARABEL", "'ipm', 'clarabel', 'scs'"),
])
def test_att_svm_rejects_unknown_solver(problem, norm, solver, options):
    with pytest.raises(ValueError, match=rf"^solver='{solver}' is not supported: choose one of {options}"):
        svm.att_svm(problem.X, problem.Z, [0, 1, 2], norm=norm, solver=solver)


def test_infeasible_svm_is_importable_from_the_package_root():
    assert attnsvm.InfeasibleSVM is svm.InfeasibleSVM
    assert issubclass(attnsvm.InfeasibleSVM, ValueError)
    error = attnsvm.InfeasibleSVM("message", [2, 5])
    assert error.instances == (2, 5) and str(error) == "message"


# ------------------------------------------------------------------ train

@pytest.mark.parametrize("option,value", [("param", "QK"), ("loss", "hinge"), ("gradient", "numeric"),
                                          ("init", "normal"), ("init", "ones")])
def test_gd_rejects_unknown_options(problem, option, value):
    with pytest.raises(ValueError, match=rf"^{option}='{value}' is not supported: choose one of"):
        train.gd(problem, steps=1, lr=0.1, **{option: value})


@pytest.mark.parametrize("init", ["normal", "ones"])
def test_gd_rejects_unknown_init_for_KQ(problem, init):
    with pytest.raises(ValueError, match=rf"^init='{init}' is not supported"):
        train.gd(problem, param="KQ", steps=1, lr=0.1, init=init)


@pytest.mark.parametrize("steps", [-1, 2.5, "10", None, True])
def test_gd_rejects_bad_steps(problem, steps):
    with pytest.raises(ValueError, match=r"^steps must be an integer >= 0"):
        train.gd(problem, steps=steps, lr=0.1)


@pytest.mark.parametrize("lr", [0, 0.0, -0.1, np.nan, np.inf, "fast", None])
def test_gd_rejects_bad_lr(problem, lr):
    with pytest.raises(ValueError, match=r"^lr must be a (finite|positive) number"):
        train.gd(problem, steps=1, lr=lr)


@pytest.mark.parametrize("record_every", [0, -3, 1.0, None])
def test_gd_rejects_bad_record_every(problem, record_every):
    with pytest.raises(ValueError, match=r"^record_every must be an integer >= 1"):
        train.gd(problem, steps=1, lr=0.1, record_every=record_every)


@pytest.mark.parametrize("m", [0, -1, 1.5])
def test_gd_rejects_bad_width(problem, m):
    with pytest.raises(ValueError, match=r"^m must be an integer >= 1"):
        train.gd(problem, param="KQ", steps=1, lr=0.1, m=m)


def test_gd_rejects_initial_W_of_wrong_shape_or_values(problem):
    with pytest.raises(ValueError, match=r"^init must have shape \(5, 5\)"):
        train.gd(problem, steps=1, lr=0.1, init=np.zeros((4, 4)))
    batched = data.random_problem(n, T, d, seed=0, batch=2)
    with pytest.raises(ValueError, match=r"^init must have shape \(2, 5, 5\)"):
        train.gd(batched, steps=1, lr=0.1, init=np.zeros((d, d)))
    with pytest.raises(ValueError, match=r"^init contains 1 NaN"):
        train.gd(problem, steps=1, lr=0.1, init=_with(np.zeros((d, d)), (0, 0), np.nan))


def test_gd_rejects_bad_initial_K_Q(problem):
    K = np.ones((d, 2))
    with pytest.raises(ValueError, match=r"init for param=\"KQ\" must be \"uniform\" or a pair \(K0, Q0\)"):
        train.gd(problem, param="KQ", steps=1, lr=0.1, init=K)
    with pytest.raises(ValueError, match=r"init for param=\"KQ\" must be \"uniform\" or a pair"):
        train.gd(problem, param="KQ", steps=1, lr=0.1, init=(K, K, K))
    with pytest.raises(ValueError, match=r"^init\[0\] \(K0\) must have shape \(5, 2\)"):
        train.gd(problem, param="KQ", steps=1, lr=0.1, init=(np.ones((d + 1, 2)), K))
    with pytest.raises(ValueError, match=r"^init\[1\] \(Q0\) must have shape \(5, 2\)"):
        train.gd(problem, param="KQ", steps=1, lr=0.1, init=(K, np.ones((d, 3))))
    with pytest.raises(ValueError, match=r"^init\[1\] \(Q0\) contains 1 NaN"):
        train.gd(problem, param="KQ", steps=1, lr=0.1, init=(K, _with(K, (0, 0), np.nan)))


@pytest.mark.parametrize("value", [0, -2, 1.5, "2"])
def test_setup_rejects_bad_loop_threads(value):
    before = attnsvm._session._loop_threads
    with pytest.raises((TypeError, ValueError), match=r"^loop_threads must be an integer >= 1"):
        attnsvm.setup(loop_threads=value)
    assert attnsvm._session._loop_threads == before  # nothing set


def test_setup_rejects_bad_threads():
    dtype, threads = torch.get_default_dtype(), torch.get_num_threads()
    try:
        with pytest.raises(ValueError, match=r"^threads must be an integer >= 1"):
            attnsvm.setup(threads=0)
    finally:  # setup() sets the default dtype before it checks `threads`: leave the process as it was
        torch.set_default_dtype(dtype)
        torch.set_num_threads(threads)
