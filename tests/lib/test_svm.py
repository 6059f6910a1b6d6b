"""attnsvm.svm: the Att-SVM solvers, checked by their optimality (KKT) conditions, against each other and by hand."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import attnsvm
import reference as ref

from attnsvm import data, svm, theory

# (n, T, d) with d >= max(T - 1, n): every selection is feasible for generic data
SHAPES = [(2, 3, 3), (4, 5, 6), (6, 8, 10), (15, 15, 20)]


def _instance(shape, seed, which):
    """(problem, X, Z, alpha) with alpha the optimal tokens ("opt") or uniformly random tokens ("random")."""
    problem = data.random_problem(*shape, seed=seed)
    if which == "opt":
        alpha = theory.optimal_tokens(problem).numpy()
    else:
        alpha = np.random.default_rng(seed).integers(0, shape[1], shape[0])
    return problem, problem.X.numpy(), problem.Z.numpy(), alpha


def _check_frobenius_kkt(X, Z, alpha, W, lam, rtol=1e-10, active=0.0, margin_tol=1e-12):
    """KKT conditions of min ||W||_F^2 / 2. The defaults hold nnls to machine precision (its active set is polished);
    for an interior-point solver pass looser tolerances and `active`: multipliers above active * max(lam) count as
    positive (it leaves tiny positive multipliers on inactive constraints)."""
    T = X.shape[-2]
    off = ref.off_alpha(alpha, T)
    assert W.shape == X.shape[:-3] + (X.shape[-1],) * 2
    assert lam.shape == alpha.shape + (T,)
    assert (lam >= 0).all()
    assert (lam[~off] == 0).all()
    scale = np.linalg.norm(W)
    assert np.abs(ref.combination(lam, X, Z, alpha) - W).max() <= rtol * scale  # stationarity: W = A^T lambda
    margins = ref.margins(X, Z, alpha, W)
    assert margins[off].min() >= 1 - margin_tol  # primal feasibility
    # complementary slackness: lambda_it (margin_it - 1) = 0
    assert np.abs(lam * (margins - 1))[off].max() <= margin_tol * max(1.0, lam.max())
    assert (np.abs(margins[lam > active * lam.max()] - 1) <= margin_tol).all()


# ------------------------------------------------------------------ Frobenius

@pytest.mark.parametrize("which", ["opt", "random"])
@pytest.mark.parametrize("shape", SHAPES)
def test_frobenius_kkt_conditions(shape, which):
    _, X, Z, alpha = _instance(shape, 0, which)
    W, lam = svm.att_svm(X, Z, alpha, return_multipliers=True)
    assert isinstance(W, np.ndarray) and isinstance(lam, np.ndarray)
    _check_frobenius_kkt(X, Z, alpha, W, lam)
    np.testing.assert_array_equal(svm.att_svm(X, Z, alpha), W)  # same W without the multipliers


@st.composite
def feasible_shapes(draw):
    n = draw(st.integers(1, 5))
    T = draw(st.integers(2, 6))
    d = draw(st.integers(max(T - 1, n), max(T - 1, n) + 2))
    return n, T, d


@settings(max_examples=40, derandomize=True, deadline=None)
@given(shape=feasible_shapes(), seed=st.integers(0, 2**31 - 1), which=st.sampled_from(["opt", "random"]))
def test_frobenius_kkt_property(shape, seed, which):
    _, X, Z, alpha = _instance(shape, seed, which)
    W, lam = svm.att_svm(X, Z, alpha, return_multipliers=True)
    _check_frobenius_kkt(X, Z, alpha, W, lam)
    n, _, d = shape
    singular = np.linalg.svd(W, compute_uv=False)
    assert (singular > 1e-7 * singular[0]).sum() <= min(n, d)


@pytest.mark.parametrize("which", ["opt", "random"])
@pytest.mark.parametrize("shape", SHAPES)
def test_nnls_agrees_with_clarabel(shape, which):
    _, X, Z, alpha = _instance(shape, 1, which)
    W, lam = svm.att_svm(X, Z, alpha, return_multipliers=True)
    W_cvx, lam_cvx = svm.att_svm(X, Z, alpha, solver="clarabel", return_multipliers=True)
    assert np.abs(W - W_cvx).max() <= 1e-6 * np.linalg.norm(W)
    _check_frobenius_kkt(X, Z, alpha, W_cvx, lam_cvx, rtol=1e-6, active=1e-6, margin_tol=1e-6)


@pytest.mark.parametrize("shape", SHAPES)
def test_frobenius_rank_at_most_min_n_d(shape):
    n, _, d = shape
    for which in ("opt", "random"):
        _, X, Z, alpha = _instance(shape, 2, which)
        singular = np.linalg.svd(svm.att_svm(X, Z, alpha), compute_uv=False)
        assert (singular > 1e-7 * singular[0]).sum() <= min(n, d)


def test_frobenius_rank_bounded_by_n_when_d_is_larger():
    # W = sum_i w_i z_i^T has rank <= n: with n = 2 < d = 8, at most 2 non-zero singular values
    _, X, Z, alpha = _instance((2, 4, 8), 0, "random")
    singular = np.linalg.svd(svm.att_svm(X, Z, alpha), compute_uv=False)
    assert (singular > 1e-7 * singular[0]).sum() == 2


# ------------------------------------------------------------------ nuclear

@pytest.mark.parametrize("which", ["opt", "random"])
@pytest.mark.parametrize("shape", SHAPES)
def test_nuclear_solution_is_optimal(shape, which):
    _, X, Z, alpha = _instance(shape, 0, which)
    W, lam = svm.att_svm(X, Z, alpha, norm="nuc", return_multipliers=True)
    off = ref.off_alpha(alpha, shape[1])
    assert (lam >= 0).all() and (lam[~off] == 0).all()
    nuclear = np.linalg.norm(W, "nuc")
    G = ref.combination(lam, X, Z, alpha)
    # G = A^T lambda is a subgradient of the nuclear norm at W: ||G||_op <= 1 and <G, W> = ||W||_*
    assert np.linalg.norm(G, 2) <= 1 + 1e-6
    assert abs((G * W).sum() - nuclear) <= 1e-6 * nuclear
    assert ref.margins(X, Z, alpha, W)[off].min() >= 1 - 1e-6
    # each solution is optimal for its own norm
    W_fro = svm.att_svm(X, Z, alpha)
    assert nuclear <= np.linalg.norm(W_fro, "nuc") * (1 + 1e-7)
    assert np.linalg.norm(W_fro) <= np.linalg.norm(W) * (1 + 1e-12)


@pytest.mark.parametrize("solver", ["clarabel", "scs"])
@pytest.mark.parametrize("shape", [(4, 5, 6), (6, 8, 10), (10, 5, 8)])
def test_ipm_agrees_with_cvxpy_solvers_on_nuclear(shape, solver):
    _, X, Z, alpha = _instance(shape, 0, "opt")
    W = svm.att_svm(X, Z, alpha, norm="nuc")  # the library's interior-point method
    W_other = svm.att_svm(X, Z, alpha, norm="nuc", solver=solver)
    nuclear = np.linalg.norm(W, "nuc")
    assert abs(nuclear - np.linalg.norm(W_other, "nuc")) <= 1e-7 * nuclear
    assert np.abs(W - W_other).max() <= 1e-4 * np.linalg.norm(W)


def test_ipm_batch_equals_single_solves():
    problem = data.random_problem(5, 6, 8, seed=3, batch=6)
    alpha = theory.optimal_tokens(problem)
    W = svm.att_svm(problem.X, problem.Z, alpha, norm="nuc")
    for b in range(6):
        single = svm.att_svm(problem.X[b], problem.Z[b], alpha[b], norm="nuc")
        assert np.abs(W[b] - single).max() <= 1e-6 * np.linalg.norm(single)


# ------------------------------------------------------- batching and invariances

@pytest.mark.parametrize("norm", ["fro", "nuc"])
def test_batched_equals_loop(norm):
    problem = data.random_problem(3, 4, 5, seed=4, batch=(4 if norm == "fro" else 2))
    X, Z = problem.X.numpy(), problem.Z.numpy()
    alpha = np.random.default_rng(4).integers(0, 4, problem.batch_shape + (3,))
    W, lam = svm.att_svm(X, Z, alpha, norm=norm, return_multipliers=True)
    assert W.shape == problem.batch_shape + (5, 5) and lam.shape == problem.batch_shape + (3, 4)
    tol = 1e-12 if norm == "fro" else 1e-6  # an interior-point SDP solution is accurate to about 1e-6
    for b in range(problem.batch_shape[0]):
        W_b, lam_b = svm.att_svm(X[b], Z[b], alpha[b], norm=norm, return_multipliers=True)
        np.testing.assert_allclose(W[b], W_b, rtol=0, atol=tol * np.linalg.norm(W_b))
        np.testing.assert_allclose(lam[b], lam_b, rtol=0, atol=tol * max(1.0, lam_b.max()))


def test_two_batch_dimensions_and_torch_input():
    problem = data.random_problem(2, 3, 3, seed=5, batch=6)
    X = problem.X.reshape(2, 3, 2, 3, 3)
    Z = problem.Z.reshape(2, 3, 2, 3)
    alpha = theory.optimal_tokens(problem).reshape(2, 3, 2)  # a torch tensor
    W = svm.att_svm(X, Z, alpha)
    assert W.shape == (2, 3, 3, 3)
    flat = svm.att_svm(problem.X, problem.Z, theory.optimal_tokens(problem))
    np.testing.assert_array_equal(W.reshape(6, 3, 3), flat)


@pytest.mark.parametrize("c", [0.01, 0.5, 3.0, 100.0])
@pytest.mark.parametrize("norm", ["fro", "nuc"])
def test_scaling_queries_scales_solution_inversely(norm, c):
    _, X, Z, alpha = _instance((4, 5, 6), 3, "random")
    W = svm.att_svm(X, Z, alpha, norm=norm)
    W_scaled = svm.att_svm(X, c * Z, alpha, norm=norm)
    # the nuclear-norm minimizer is weakly determined: its norm is accurate to ~1e-10, its entries to ~1e-6
    tol = 1e-10 if norm == "fro" else 1e-4
    assert np.abs(W_scaled - W / c).max() <= tol * np.linalg.norm(W / c)
    np.testing.assert_allclose(np.linalg.norm(W_scaled, norm), np.linalg.norm(W, norm) / c, rtol=1e-8)


def test_solution_does_not_depend_on_token_order():
    """Permuting the tokens of a sequence (and alpha with them) permutes nothing in W."""
    _, X, Z, alpha = _instance((3, 5, 6), 6, "random")
    perm = np.array([4, 2, 0, 3, 1])
    inverse = np.argsort(perm)
    W = svm.att_svm(X, Z, alpha)
    W_perm = svm.att_svm(X[:, perm], Z, inverse[alpha])
    np.testing.assert_allclose(W_perm, W, rtol=0, atol=1e-12 * np.linalg.norm(W))


# ------------------------------------------------------------------ feasibility

def _infeasible_case():
    problem = data.random_problem(5, 5, 2, seed=0, batch=20)
    alpha = np.random.default_rng(0).integers(0, 5, (20, 5))
    return problem.X.numpy(), problem.Z.numpy(), alpha


def test_infeasible_batch_raises_with_instances_and_advice():
    X, Z, alpha = _infeasible_case()
    feasible = svm.feasible(X, Z, alpha)
    assert feasible.shape == (20,) and feasible.dtype == bool
    assert feasible.any() and not feasible.all()  # this seed mixes both kinds
    with pytest.raises(attnsvm.InfeasibleSVM, match="(?i)increase d") as info:
        svm.att_svm(X, Z, alpha)
    assert info.value.instances == tuple(int(b) for b in np.flatnonzero(~feasible))
    assert "max(T-1, n) = 5" in str(info.value)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("norm", ["fro", "nuc"])
def test_feasible_agrees_with_att_svm_per_instance(norm):
    X, Z, alpha = _infeasible_case()
    feasible = svm.feasible(X, Z, alpha)
    for b in range(8):  # both kinds occur among the first 8 instances
        if feasible[b]:
            W = svm.att_svm(X[b], Z[b], alpha[b], norm=norm)
            assert ref.margins(X[b], Z[b], alpha[b], W)[ref.off_alpha(alpha[b], 5)].min() >= 1 - 1e-6
        else:
            with pytest.raises(attnsvm.InfeasibleSVM, match="(?i)increase d") as info:
                svm.att_svm(X[b], Z[b], alpha[b], norm=norm)
            assert info.value.instances == (0,)
    assert feasible[:8].any() and not feasible[:8].all()


def test_unbatched_feasible_is_a_scalar_flag():
    X, Z, alpha = _infeasible_case()
    flags = [svm.feasible(X[b], Z[b], alpha[b]) for b in range(4)]
    assert all(flag.shape == () for flag in flags)


def test_d_at_least_max_T_minus_1_n_makes_every_selection_feasible():
    for (n, T, d), seed in [((4, 5, 4), 0), ((6, 8, 7), 1), ((5, 3, 5), 2)]:
        problem = data.random_problem(n, T, d, seed=seed, batch=30)
        alpha = np.random.default_rng(seed).integers(0, T, (30, n))
        assert svm.feasible(problem.X, problem.Z, alpha).all()
        W = svm.att_svm(problem.X, problem.Z, alpha)
        assert ref.margins(problem.X.numpy(), problem.Z.numpy(), alpha, W)[ref.off_alpha(alpha, T)].min() >= 1 - 1e-9


def test_identical_tokens_are_infeasible():
    # the selected token equals another one: no W separates them
    X = np.array([[[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]]])
    Z = np.array([[1.0, 0.0]])
    assert not svm.feasible(X, Z, [0])
    assert svm.feasible(X, Z, [2])
    with pytest.raises(attnsvm.InfeasibleSVM) as info:
        svm.att_svm(X, Z, [0], norm="nuc")
    assert info.value.instances == (0,)


# ------------------------------------------------------------------ by hand

@pytest.mark.parametrize("norm", ["fro", "nuc"])
def test_single_constraint_by_hand(norm):
    # tokens e1, e2, query e1, alpha = 0: min ||W|| s.t. W11 - W21 >= 1 gives W = (e1 - e2) e1^T / 2 in both norms
    X = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    Z = np.array([[1.0, 0.0]])
    W, lam = svm.att_svm(X, Z, [0], norm=norm, return_multipliers=True)
    expected = np.array([[0.5, 0.0], [-0.5, 0.0]])
    tol = 1e-15 if norm == "fro" else 1e-7
    np.testing.assert_allclose(W, expected, rtol=0, atol=tol)
    # Frobenius: W = lambda (e1 - e2) e1^T, lambda = 1/2; nuclear: lambda = 1/||(e1 - e2) e1^T||_op = 1/sqrt(2)
    np.testing.assert_allclose(lam, [[0.0, 0.5 if norm == "fro" else 2 ** -0.5]], rtol=0, atol=tol)


def test_two_active_constraints_by_hand():
    # tokens e1, e2, -e2, query e1, alpha = 0: w1 - w2 >= 1 and w1 + w2 >= 1 for w = W e1, so W = e1 e1^T
    X = np.array([[[1.0, 0.0], [0.0, 1.0], [0.0, -1.0]]])
    Z = np.array([[1.0, 0.0]])
    W, lam = svm.att_svm(X, Z, [0], return_multipliers=True)
    np.testing.assert_allclose(W, [[1.0, 0.0], [0.0, 0.0]], rtol=0, atol=1e-15)
    np.testing.assert_allclose(lam, [[0.0, 0.5, 0.5]], rtol=0, atol=1e-15)


def test_two_sequences_by_hand():
    # sequence 1: tokens (e1, e2), query e1; sequence 2: tokens (e2, e1), query e2; alpha = (0, 0)
    # constraints W11 - W21 >= 1 and W22 - W12 >= 1: W = [[1, -1], [-1, 1]] / 2, rank one, in both norms
    X = np.array([[[1.0, 0.0], [0.0, 1.0]], [[0.0, 1.0], [1.0, 0.0]]])
    Z = np.eye(2)
    expected = np.array([[0.5, -0.5], [-0.5, 0.5]])
    np.testing.assert_allclose(svm.att_svm(X, Z, [0, 0]), expected, rtol=0, atol=1e-15)
    np.testing.assert_allclose(svm.att_svm(X, Z, [0, 0], solver="clarabel"), expected, rtol=0, atol=1e-8)
    np.testing.assert_allclose(svm.att_svm(X, Z, [0, 0], norm="nuc"), expected, rtol=0, atol=1e-7)


def test_constraint_matrix_kronecker_identity():
    """Row kron(x_alpha - x_t, z) of A times vec(W) (row-major) is the margin (x_alpha - x_t)^T W z."""
    _, X, Z, alpha = _instance((3, 4, 5), 7, "random")
    W = np.random.default_rng(7).standard_normal((5, 5))
    A = svm.constraint_matrix(X, Z, alpha)
    assert A.shape == (3 * 3, 25)
    margins = ref.margins(X, Z, alpha, W)
    np.testing.assert_allclose(A @ W.reshape(-1), margins[ref.off_alpha(alpha, 4)], rtol=1e-12, atol=1e-14)


# ------------------------------------------------------------------ a Problem in place of its arrays

def _general_probs(problem, seed=1):
    """Attention probabilities of a large random W: some tokens kept, others masked."""
    W = 10 * np.random.default_rng(seed).standard_normal((problem.d, problem.d))
    return attnsvm.model.attention(problem, W).numpy()


@pytest.mark.parametrize("norm", ["fro", "nuc"])
def test_a_problem_gives_the_result_of_its_arrays(norm):
    """att_svm(problem, alpha) is att_svm(problem.X, problem.Z, alpha) to the bit; so for every solver."""
    problems = data.random_problem(3, 4, 5, seed=2, batch=3)
    alpha = theory.optimal_tokens(problems)
    for solution, expected in [
            (svm.att_svm(problems, alpha, norm=norm), svm.att_svm(problems.X, problems.Z, alpha, norm)),
            (svm.att_svm(problems, alpha=alpha, norm=norm, return_multipliers=True),
             svm.att_svm(problems.X, problems.Z, alpha, norm=norm, return_multipliers=True)),
            (svm.feasible(problems, alpha), svm.feasible(problems.X, problems.Z, alpha)),
            (svm.constraint_matrix(problems[1], alpha[1]),
             svm.constraint_matrix(problems.X[1], problems.Z[1], alpha[1]))]:
        for got, want in zip(*(value if isinstance(value, tuple) else (value,) for value in (solution, expected))):
            np.testing.assert_array_equal(got, want)
    problem = problems[0]
    key = np.random.default_rng(3).standard_normal((5, 5))
    np.testing.assert_array_equal(svm.prompt_svm(problems, key, alpha), svm.prompt_svm(problems.X, key, alpha))
    v, support = svm.head_svm(problem, alpha[0])
    v_arrays, support_arrays = svm.head_svm(problem.X, problem.Y, alpha[0])
    np.testing.assert_array_equal(v, v_arrays)
    np.testing.assert_array_equal(support, support_arrays)
    probs = _general_probs(problem)
    general, general_arrays = svm.general_svm(problem, probs), svm.general_svm(problem.X, problem.Z, probs)
    for name in ("relevant", "W_fin", "W_mm"):
        np.testing.assert_array_equal(getattr(general, name), getattr(general_arrays, name))


PROBLEM = data.random_problem(2, 3, 3, seed=0)
ALPHA = theory.optimal_tokens(PROBLEM)


@pytest.mark.parametrize("call,pattern", [
    (lambda: svm.att_svm(PROBLEM, PROBLEM.Z, ALPHA), r"takes Z from the problem \(problem.Z\)"),
    (lambda: svm.att_svm(PROBLEM, ALPHA, "nuc"), r"takes its options by keyword.*norm='nuc'"),
    (lambda: svm.att_svm(PROBLEM), r"^alpha is missing"),
    (lambda: svm.att_svm(PROBLEM.X, ALPHA), r"^alpha is missing.*att_svm\(X, Z, alpha\) with arrays"),
    (lambda: svm.att_svm(PROBLEM.X, PROBLEM, ALPHA), r"^Z is a Problem: a Problem comes first"),
    (lambda: svm.att_svm(PROBLEM.X, None, ALPHA), r"^Z is missing"),
    (lambda: svm.feasible(PROBLEM, PROBLEM.Z, ALPHA), r"takes Z from the problem"),
    (lambda: svm.constraint_matrix(PROBLEM.X, ALPHA), r"^alpha is missing"),
    (lambda: svm.head_svm(PROBLEM, PROBLEM.Y, ALPHA), r"takes Y from the problem \(problem.Y\)"),
    (lambda: svm.general_svm(PROBLEM, PROBLEM.Z, np.full((2, 3), 1 / 3)), r"takes Z from the problem"),
    (lambda: svm.prompt_svm(PROBLEM, None, ALPHA), r"^key is missing.*prompt_svm\(problem, key, alpha\)"),
    (lambda: svm.att_svm(attnsvm.causal.SequenceProblem(PROBLEM.X, PROBLEM.X), ALPHA),
     r"X is a SequenceProblem: .*causal.att_svm"),
])
def test_a_wrong_mix_of_problem_and_arrays_is_a_type_error(call, pattern):
    with pytest.raises(TypeError, match=pattern):
        call()


def test_a_problem_without_queries_or_tokens_to_separate_is_refused_by_name():
    prompt = data.Problem(PROBLEM.X, PROBLEM.Y, None, PROBLEM.v)  # paper B's model: no queries z_i
    for call in (lambda: svm.att_svm(prompt, ALPHA), lambda: svm.feasible(prompt, ALPHA),
                 lambda: svm.general_svm(prompt, np.full((2, 3), 1 / 3))):
        with pytest.raises(ValueError, match=r"^problem.Z is None .*svm.prompt_svm\(problem, key, alpha\)"):
            call()
    wide = data.random_problem(2, 3, 5, seed=0)
    wide_prompt = data.Problem(wide.X, wide.Y, None, wide.v)
    np.testing.assert_array_equal(svm.prompt_svm(wide_prompt, np.eye(5), [0, 1]),  # the prompt model's own SVM
                                  svm.prompt_svm(wide.X, np.eye(5), [0, 1]))
    one = data.random_problem(2, 1, 3, seed=0)
    with pytest.raises(ValueError, match=r"^problem holds T=1 token per sequence: att_svm needs T >= 2"):
        svm.att_svm(one, [0, 0])
    with pytest.raises(ValueError, match=r"^problem holds T=1 token per sequence: prompt_svm needs T >= 2"):
        svm.prompt_svm(one, np.eye(3), [0, 0])
    v, support = svm.head_svm(one, [0, 0])  # the head's SVM needs no second token
    assert v.shape == (3,) and support.dtype == bool
