"""attnsvm.theory: token scores, optimal tokens, correlation, margins, support tokens, local optimality."""

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from attnsvm import data, model, svm, theory, train

SETTINGS = settings(max_examples=40, derandomize=True, deadline=None)


def test_token_scores_are_label_times_head_value():
    problem = data.random_problem(3, 4, 5, seed=0, batch=2)
    X, Y, v = problem.X.numpy(), problem.Y.numpy(), problem.v.numpy()
    expected = np.empty((2, 3, 4))
    for b in range(2):
        for i in range(3):
            for t in range(4):
                expected[b, i, t] = Y[b, i] * (v[b] @ X[b, i, t])
    np.testing.assert_allclose(theory.token_scores(problem).numpy(), expected, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("batch", [None, 3])
def test_optimal_tokens_are_argmax_of_scores(batch):
    problem = data.random_problem(5, 6, 7, seed=1, batch=batch)
    opt = theory.optimal_tokens(problem)
    assert opt.shape == problem.batch_shape + (5,)
    np.testing.assert_array_equal(opt.numpy(), theory.token_scores(problem).numpy().argmax(-1))


# ---------------------------------------------------------------- correlation

matrices = arrays(np.float64, st.tuples(st.integers(1, 4), st.integers(1, 4)),
                  elements=st.floats(-100, 100, allow_nan=False, allow_infinity=False))


def _nonzero(A):
    return np.linalg.norm(A) > 1e-6


@SETTINGS
@given(A=matrices, seed=st.integers(0, 2**31 - 1))
def test_correlation_symmetric_and_bounded(A, seed):
    assume(_nonzero(A))
    B = np.random.default_rng(seed).standard_normal(A.shape)
    ab, ba = theory.correlation(A, B), theory.correlation(B, A)
    assert isinstance(ab, np.ndarray) and ab.shape == ()
    assert ab == ba
    assert -1.0 <= ab <= 1.0
    np.testing.assert_allclose(ab, (A * B).sum() / (np.linalg.norm(A) * np.linalg.norm(B)), rtol=1e-12, atol=1e-14)


@SETTINGS
@given(A=matrices, seed=st.integers(0, 2**31 - 1),
       a=st.floats(1e-3, 1e3), b=st.floats(1e-3, 1e3))
def test_correlation_invariant_to_positive_scaling(A, seed, a, b):
    assume(_nonzero(A))
    B = np.random.default_rng(seed).standard_normal(A.shape)
    base = theory.correlation(A, B)
    np.testing.assert_allclose(theory.correlation(a * A, B), base, rtol=0, atol=1e-13)
    np.testing.assert_allclose(theory.correlation(A, b * B), base, rtol=0, atol=1e-13)
    np.testing.assert_allclose(theory.correlation(a * A, b * B), base, rtol=0, atol=1e-13)


@SETTINGS
@given(A=matrices, c=st.floats(1e-3, 1e3))
def test_correlation_with_itself_and_its_negative(A, c):
    assume(_nonzero(A))
    for same in (theory.correlation(A, A), theory.correlation(A, c * A)):
        np.testing.assert_allclose(same, 1.0, rtol=0, atol=1e-14)
    for opposite in (theory.correlation(A, -A), theory.correlation(-c * A, A)):
        np.testing.assert_allclose(opposite, -1.0, rtol=0, atol=1e-14)


def test_correlation_of_parallel_matrices_stays_within_bounds():
    """A correlation is a cosine: it must never leave [-1, 1] (np.arccos of it would be NaN).

    For A = [[9.75, 9.75]], <A, A> = 190.125 exactly but ||A||_F^2 rounds to 190.12499999999997.
    """
    A = np.array([[9.75, 9.75]])
    assert theory.correlation(A, A) <= 1.0
    assert theory.correlation(A, 2 * A) <= 1.0
    assert theory.correlation(A, -A) >= -1.0
    assert not np.isnan(np.arccos(theory.correlation(A, A)))


@SETTINGS
@given(batch=st.tuples(st.integers(1, 3), st.integers(1, 3)), d=st.integers(1, 4), seed=st.integers(0, 2**31 - 1))
def test_correlation_batched_equals_per_instance(batch, d, seed):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal(batch + (d, d))
    B = rng.standard_normal(batch + (d, d))
    got = theory.correlation(A, B)
    assert got.shape == batch
    for index in np.ndindex(*batch):
        assert got[index] == pytest.approx(float(theory.correlation(A[index], B[index])), rel=1e-14, abs=1e-15)
    # a single matrix broadcasts against a batch
    shared = theory.correlation(A, B[(0,) * len(batch)])
    for index in np.ndindex(*batch):
        assert shared[index] == pytest.approx(float(theory.correlation(A[index], B[(0,) * len(batch)])),
                                              rel=1e-14, abs=1e-15)


def test_correlation_accepts_torch_and_numpy():
    A = torch.arange(1.0, 5.0, dtype=torch.float64).reshape(2, 2)
    B = np.array([[1.0, 0.0], [0.0, 1.0]])
    expected = 5.0 / (np.sqrt(30.0) * np.sqrt(2.0))
    np.testing.assert_allclose(theory.correlation(A, B), expected, rtol=1e-15)


@pytest.mark.parametrize("zero_first", [True, False])
def test_correlation_of_zero_matrix_raises(zero_first):
    Z, A = np.zeros((3, 3)), np.eye(3)
    with pytest.raises(ValueError, match="zero matrix"):
        theory.correlation(*((Z, A) if zero_first else (A, Z)))


def test_correlation_raises_if_any_batch_member_is_zero():
    A = np.stack([np.eye(2), np.zeros((2, 2))])
    with pytest.raises(ValueError, match="zero matrix"):
        theory.correlation(A, np.ones((2, 2)))


# ----------------------------------------------------- margins and support tokens

CASES = [((2, 3, 3), 0), ((4, 5, 6), 1), ((6, 8, 10), 2)]


def _alphas(problem, seed):
    rng = np.random.default_rng(seed)
    return [theory.optimal_tokens(problem).numpy(), rng.integers(0, problem.T, problem.batch_shape + (problem.n,))]


@pytest.mark.parametrize("shape,seed", CASES)
def test_margins_and_support_tokens_of_att_svm(shape, seed):
    problem = data.random_problem(*shape, seed=seed)
    n, T, _ = shape
    for alpha in _alphas(problem, seed):
        W, lam = svm.att_svm(problem.X, problem.Z, alpha, return_multipliers=True)
        margins = theory.margins(problem, W, alpha)
        assert margins.shape == (n, T)
        at_alpha = np.zeros((n, T), dtype=bool)
        at_alpha[np.arange(n), alpha] = True
        np.testing.assert_array_equal(margins[at_alpha], 0.0)
        assert margins[~at_alpha].min() >= 1 - 1e-9
        support = theory.support_tokens(problem, W, alpha)
        assert support.dtype == bool and support.shape == (n, T)
        np.testing.assert_array_equal(support, np.abs(margins - 1) <= theory.SUPPORT_TOL)
        assert not support[at_alpha].any()
        assert support.any()  # the minimum-norm solution touches at least one constraint
        assert support[lam > 0].all()  # complementary slackness: positive multipliers only on support tokens
        np.testing.assert_array_equal(support, lam > 0)  # generic data: strict complementarity


def test_margins_are_logit_differences():
    problem = data.random_problem(3, 4, 5, seed=0, batch=2)
    W = np.random.default_rng(0).standard_normal((2, 5, 5))
    alpha = np.array([[0, 1, 3], [2, 2, 0]])
    logits = np.einsum("bntd,bde,bne->bnt", problem.X.numpy(), W, problem.Z.numpy())
    chosen = np.take_along_axis(logits, alpha[..., None], axis=-1)
    np.testing.assert_allclose(theory.margins(problem, W, alpha), chosen - logits, rtol=1e-13, atol=1e-14)


def test_support_tokens_on_a_hand_built_instance():
    # one sequence, tokens e1, e2, -e2, query e1, alpha = 0: W = e1 e1^T, both other tokens have margin 1
    problem = data.Problem([[[1.0, 0.0], [0.0, 1.0], [0.0, -1.0]]], [1.0], [[1.0, 0.0]], [1.0, 0.0])
    W = np.array([[1.0, 0.0], [0.0, 0.0]])
    np.testing.assert_array_equal(theory.margins(problem, W, [0]), [[0.0, 1.0, 1.0]])
    np.testing.assert_array_equal(theory.support_tokens(problem, W, [0]), [[False, True, True]])
    np.testing.assert_array_equal(theory.support_tokens(problem, 2 * W, [0]), [[False, False, False]])


# --------------------------------------------------------------- local optimality

@pytest.mark.parametrize("shape,seed", [((4, 5, 6), 0), ((6, 8, 10), 1)])
def test_optimal_tokens_are_locally_optimal(shape, seed):
    problem = data.random_problem(*shape, seed=seed, batch=10)
    flags = theory.locally_optimal(problem, theory.optimal_tokens(problem))
    assert flags.dtype == bool and flags.shape == (10,)
    assert flags.all()


def test_locally_optimal_unbatched_returns_a_scalar_flag():
    problem = data.random_problem(4, 5, 6, seed=0)
    flag = theory.locally_optimal(problem, theory.optimal_tokens(problem))
    assert flag.shape == () and bool(flag)


def test_some_random_selections_are_not_locally_optimal():
    problem = data.random_problem(4, 5, 6, seed=0, batch=10)
    alpha = np.random.default_rng(1).integers(0, 5, (10, 4))
    assert svm.feasible(problem.X, problem.Z, alpha).all()  # not optimal although the SVM exists
    flags = theory.locally_optimal(problem, alpha)
    assert not flags.all()
    # check the definition by hand on one non-locally-optimal instance
    b = int(np.flatnonzero(~flags)[0])
    instance = problem[b]
    W = svm.att_svm(instance.X, instance.Z, alpha[b])
    support = theory.support_tokens(instance, W, alpha[b])
    gamma = theory.token_scores(instance).numpy()
    chosen = gamma[np.arange(4), alpha[b]][:, None]
    assert (support & (gamma >= chosen)).any()


def test_infeasible_selection_is_not_locally_optimal():
    problem = data.random_problem(5, 5, 2, seed=0, batch=20)
    alpha = np.random.default_rng(0).integers(0, 5, (20, 5))
    feasible = svm.feasible(problem.X, problem.Z, alpha)
    assert not feasible.all()
    flags = theory.locally_optimal(problem, alpha)
    assert not flags[~feasible].any()


def _planar_single_input(global_case):
    """Paper B's single-input example as a cross-attention problem in R^2: keys (-0.1, 1), (1, 0), (0, 0), query
    z = e1 (so that W z plays the role of p). The head gives scores (1, 0.9, 0) (local case: token 2 is locally
    optimal, its only support token (0, 0) scores less) or, up to a constant, (1, 0.9, 0.9) (global case: the
    support token ties with token 2, which is then not locally optimal)."""
    v = [0.9, 1.09] if not global_case else [0.0, 0.1]
    return data.Problem([[[-0.1, 1.0], [1.0, 0.0], [0.0, 0.0]]], [1.0], [[1.0, 0.0]], v)


@pytest.mark.parametrize("global_case,expected", [(False, [True, True, False]), (True, [True, False, False])])
def test_locally_optimal_on_the_planar_single_input_example(global_case, expected):
    problem = _planar_single_input(global_case)
    assert theory.optimal_tokens(problem).tolist() == [0]
    flags = [theory.locally_optimal(problem, [a]) for a in range(3)]
    assert all(flag.shape == () for flag in flags)
    assert [bool(flag) for flag in flags] == expected
    # token 2's SVM: W e1 = (1, 0); its support token is (0, 0) alone (margin 1; token 1 has margin 1.1)
    W = svm.att_svm(problem.X, problem.Z, [1])
    np.testing.assert_allclose(W @ [1.0, 0.0], [1.0, 0.0], rtol=0, atol=1e-12)
    np.testing.assert_array_equal(theory.support_tokens(problem, W, [1]), [[False, False, True]])


def test_locally_optimal_unbatched_infeasible_selection_is_false():
    problem = data.random_problem(5, 5, 2, seed=0, batch=20)
    alpha = np.random.default_rng(0).integers(0, 5, (20, 5))
    feasible = svm.feasible(problem.X, problem.Z, alpha)
    batched = theory.locally_optimal(problem, alpha)
    for b in range(6):  # instances 0-4 are infeasible, 5 is feasible
        flag = theory.locally_optimal(problem[b], alpha[b])
        assert flag.shape == () and flag.dtype == bool
        assert bool(flag) == bool(batched[b])
        if not feasible[b]:
            assert not flag
    assert not feasible[:5].any() and feasible[5]


def test_locally_optimal_batched_equals_per_instance():
    problem = data.random_problem(4, 5, 6, seed=2, batch=8)
    alpha = torch.as_tensor(np.random.default_rng(2).integers(0, 5, (8, 4)))
    alpha[::2] = theory.optimal_tokens(problem)[::2]  # half optimal (locally optimal), half random
    flags = theory.locally_optimal(problem, alpha)
    assert flags.shape == (8,) and flags.dtype == bool
    assert flags.any() and not flags.all()
    for b in range(8):
        assert bool(theory.locally_optimal(problem[b], alpha[b])) == bool(flags[b])


# ---------------------------------------------------------------- convergence classes

def _label_by_definition(problem, W, threshold):
    selection = model.attention(problem, W).argmax(-1).numpy()
    if not svm.feasible(problem.X, problem.Z, selection):
        return "none"
    if theory.correlation(W, svm.att_svm(problem.X, problem.Z, selection)) < threshold:
        return "none"
    if (selection == theory.optimal_tokens(problem).numpy()).all():
        return "global"
    return "local" if theory.locally_optimal(problem, selection) else "none"


def test_convergence_labels_of_gd_runs_follow_the_definitions():
    problem = data.random_problem(4, 5, 6, seed=0, batch=10)
    W = train.gd(problem, steps=1000, lr=0.1, record_every=1000).W[-1]
    labels = theory.convergence(problem, W)
    assert labels.shape == (10,) and labels.dtype.kind == "U"
    assert set(labels) <= {"global", "local", "none"}
    assert (labels == "global").sum() >= 5 and (labels == "local").any()  # this seed has both
    for b in range(10):
        assert labels[b] == _label_by_definition(problem[b], W[b], 0.99)
    # a stricter threshold can only turn labels into "none"
    strict = theory.convergence(problem, W, threshold=0.999999)
    assert ((strict == labels) | (strict == "none")).all() and (strict == "none").sum() > (labels == "none").sum()


def test_convergence_global_and_local_gd_runs_on_the_planar_single_input_example():
    """From W(0) = 0 GD selects the optimal token ("global"); from W(0) with W(0) z = (0, -1.5) (paper B's init) it
    converges to the locally-optimal token 2 ("local")."""
    problem = _planar_single_input(global_case=False)
    for init, expected in ((None, "global"), ([[0.0, 0.0], [-1.5, 0.0]], "local")):
        W = train.gd(problem, steps=1000, lr=0.1, init=init, record_every=1000).W[-1]
        label = theory.convergence(problem, W)
        assert label.shape == () and str(label) == expected


def test_convergence_of_constructed_directions():
    problem = _planar_single_input(global_case=False)
    for alpha, expected in (([0], "global"), ([1], "local")):
        W_mm = svm.att_svm(problem.X, problem.Z, alpha)
        for scale in (0.5, 1.0, 50.0):  # only the direction matters
            assert str(theory.convergence(problem, scale * W_mm)) == expected
    # the same direction is not "local" when the selection is not locally optimal
    tied = _planar_single_input(global_case=True)
    assert str(theory.convergence(tied, svm.att_svm(tied.X, tied.Z, [1]))) == "none"


def test_convergence_of_random_W_is_none():
    problem = data.random_problem(6, 8, 10, seed=0, batch=10)
    W = torch.randn(10, 10, 10, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    np.testing.assert_array_equal(theory.convergence(problem, W), ["none"] * 10)
    # but a W aligned with the SVM of the optimal tokens is "global"
    W_mm = svm.att_svm(problem.X, problem.Z, theory.optimal_tokens(problem))
    np.testing.assert_array_equal(theory.convergence(problem, 3 * W_mm), ["global"] * 10)


# ---------------------------------------------------------------- sampling feasible problems

def test_sample_feasible_when_every_draw_is_feasible():
    problems, alpha, draws = theory.sample_feasible(4, 5, 6, count=5, seed=0)
    assert problems.batch_shape == (5,) and alpha.shape == (5, 4) and draws == 5
    reference = data.random_problem(4, 5, 6, seed=0, batch=2000)
    assert torch.equal(problems.X, reference.X[:5]) and torch.equal(problems.Z, reference.Z[:5])
    assert torch.equal(alpha, theory.optimal_tokens(problems))


@pytest.mark.parametrize("selection", ["optimal", "random"])
def test_sample_feasible_keeps_the_feasible_draws_in_order(selection):
    """d = 2 < max(T - 1, n): many draws are infeasible. The result is the first `count` feasible draws, and `draws`
    counts the candidates up to the last one taken."""
    problems, alpha, draws = theory.sample_feasible(5, 5, 2, count=3, seed=0, selection=selection, max_draws=200)
    candidates = data.random_problem(5, 5, 2, seed=0, batch=200)
    if selection == "optimal":
        all_alpha = theory.optimal_tokens(candidates)
    else:
        all_alpha = data.random_selection(candidates, seed=1)
    feasible = np.flatnonzero(svm.feasible(candidates.X, candidates.Z, all_alpha))
    assert len(feasible) >= 3 and len(feasible) < 200
    assert problems.batch_shape == (3,) and draws == feasible[2] + 1
    assert torch.equal(problems.X, candidates.X[feasible[:3]])
    assert torch.equal(alpha, all_alpha[feasible[:3]])
    assert svm.feasible(problems.X, problems.Z, alpha).all()


def test_sample_feasible_returns_fewer_when_feasibility_is_rare():
    problems, alpha, draws = theory.sample_feasible(5, 5, 2, count=50, seed=0, selection="random", max_draws=40)
    assert draws == 40 and 0 < problems.batch_shape[0] < 50
    assert svm.feasible(problems.X, problems.Z, alpha).all()
    # none at all: an empty batch
    problems, alpha, draws = theory.sample_feasible(6, 6, 1, count=3, seed=0, max_draws=30)
    assert problems.batch_shape == (0,) and alpha.shape == (0, 6) and draws == 30


def test_sample_feasible_rejects_an_unknown_selection():
    with pytest.raises(ValueError, match=r"^selection='worst' is not supported"):
        theory.sample_feasible(4, 5, 6, count=2, seed=0, selection="worst")


@pytest.mark.parametrize("count", [0, -1])
def test_sample_feasible_rejects_a_bad_count(count):
    """count must be a positive integer."""
    with pytest.raises(ValueError, match=r"count must be an integer >= 1"):
        theory.sample_feasible(4, 5, 6, count=count, seed=0)
