"""Bad input for data, theory, heads, multitoken and ranks: a clear error naming the argument, never a silent
wrong answer, a NaN or a hang.

First one test per defect that was fixed (the bad call, the exception, the argument named), then a property test
per public function: hypothesis replaces one argument of a valid call by a bad or extreme value (wrong types,
strings, None, bools, NaN/inf, scales 1e+-160 and beyond, negative or huge sizes, empty arrays, wrong shapes,
tensors that require grad) and requires either a valid result (finite, of the right shape) or an exception whose
message names that argument.
"""

import dataclasses
import math
import re
from functools import cache

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnsvm import data, heads, svm, theory
from attnsvm.experiments import relu_head as mt, svm_rank as ranks

COVERED = {
    "data.unit_rows", "data.random_problem", "data.planar_problem", "data.random_selection",
    "data.opposite_clusters_problem", "data.single_input_problem", "data.multi_input_problem",
    "data.loss_example_problem", "data.orthonormal_problem", "data.joint_training_problem",
    "data.equal_scores_problem", "data.Problem", "data.Problem.__getitem__", "data.Problem.repeat", "data.Problem.to",
    "theory.token_scores", "theory.optimal_tokens", "theory.correlation", "theory.margins", "theory.support_tokens",
    "theory.cosine", "theory.neighbour_selections", "theory.locally_optimal", "theory.convergence",
    "theory.sample_feasible",
    "heads.random_relu", "heads.lambda_threshold", "heads.lambda_optimum", "heads.Linear", "heads.ReLU",
    "heads.Lambda", *(f"heads.{head}.{method}" for head in ("Linear", "ReLU", "Lambda")
                      for method in ("value", "gradient", "value_and_gradient")),
    "experiments.relu_head.train_runs", "experiments.relu_head.select", "experiments.relu_head.passes_filter", "experiments.relu_head.largest_masked",
    "experiments.relu_head.search", "experiments.relu_head.stored_seeds", "experiments.relu_head.errors", "experiments.relu_head.norms", "experiments.relu_head.moved",
    "experiments.relu_head.token_pairs", "experiments.relu_head.token_fates", "experiments.relu_head.lambda_sweep", "experiments.relu_head.TokenPairs.project",
    "experiments.svm_rank.feasible_problems", "experiments.svm_rank.spectra", "experiments.svm_rank.grid",
}

ERRORS = (TypeError, ValueError, FloatingPointError, svm.SolverError)  # svm.InfeasibleSVM is a ValueError
FAST = settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
n, T, d = 2, 3, 3
P = data.random_problem(n, T, d, seed=0)
ALPHA = theory.optimal_tokens(P)
EYE = torch.eye(d, dtype=torch.float64)


@cache
def runs() -> mt.Runs:
    return mt.train_runs(4, mt.stored_seeds(4)[:2])


@cache
def exact_runs() -> mt.Runs:
    return mt.train_runs(4, mt.stored_seeds(4)[:2], eps=0)


# ------------------------------------------------------------------ one test per defect fixed

@pytest.mark.parametrize("lam", [1e-300, 1e-200, 1e-100, 1e-30, 1e-17, 1e-16, 1e-15, 1e-8, 1e-3, 0.1, 1.0, 10.0,
                                 1e8, 1e100, 1e200, 1e300, 1.7e308])
@pytest.mark.parametrize("values", [[1.0, 0.5, 0.2], [1.0, 1.0, 0.5], [1e-300, 0.0, -1e-300], [1e300, -1e300, 0.0],
                                    [1.0, 1.0 - 2**-52, 0.3], [0.7]])
def test_lambda_optimum_weights_sum_to_one_for_every_lam(values, lam):
    """heads.lambda_optimum([1, .5, .2], 1e-16) summed to 1.11 (u_t - theta lost every digit); 1e-300 gave 2e299."""
    s = heads.lambda_optimum(values, lam)
    assert torch.isfinite(s).all() and (s >= 0).all()
    assert abs(s.sum().item() - 1) < 1e-14


def test_lambda_threshold_for_tiny_lam_is_the_top_value():
    """It kept no token at all once 2 lam rounded away, and returned the mean (0.567) for lam = 1e-300."""
    assert heads.lambda_threshold([1.0, 0.5, 0.2], 1e-300).item() == 1.0
    assert heads.lambda_optimum([1.0, 0.5, 0.2], 1e-16).tolist() == [1.0, 0.0, 0.0]


def test_lambda_threshold_that_overflows_is_an_error_not_minus_infinity():
    with pytest.raises(FloatingPointError, match=r"\blam\b"):
        heads.lambda_threshold([1.0, 2.0], 1e308)


@pytest.mark.parametrize("lam", ["0.5", True, None, -1.0, math.nan])
def test_lambda_optimum_rejects_a_lam_that_is_not_a_number(lam):
    """lam='0' returned the linear head's answer (float('0') == 0), lam=True counted as 1."""
    with pytest.raises((TypeError, ValueError), match=r"^lam must"):
        heads.lambda_optimum([1.0, 0.5], lam)


def test_random_problem_does_not_iterate_a_string_seed():
    """seed='12' drew two problems, from seeds 1 and 2."""
    with pytest.raises(ValueError, match=r"^seed must be an integer"):
        data.random_problem(3, 4, 5, seed="12")


@pytest.mark.parametrize("seed, error, pattern", [
    ([1.5, 2], TypeError, r"^seed\[0\] must be an integer"), (["1"], TypeError, r"^seed\[0\] must be an integer"),
    ([3, -1], ValueError, r"^seed\[1\] must be an integer >= 0"), (2**64, ValueError, r"^seed must be an integer in"),
    (1.0, ValueError, r"^seed must be an integer"),
])
def test_random_problem_rejects_seeds_it_used_to_round_or_wrap(seed, error, pattern):
    with pytest.raises(error, match=pattern):
        data.random_problem(3, 4, 5, seed=seed)


@pytest.mark.parametrize("make", [lambda: theory.sample_feasible(3, 1, 5, count=1, seed=0),
                                  lambda: ranks.feasible_problems(3, 1, 5), lambda: ranks.grid([(3, 1, 5)])])
def test_experiments_reject_one_token_per_sequence(make):
    """T=1 problems were accepted and gave NaN downstream."""
    with pytest.raises(ValueError, match=r"T must be an integer >= 2, got 1: .*no other token"):
        make()


@pytest.mark.parametrize("shape", [(0, 4, 5), (3, 0, 5), (3, 4, 0), (2, 0, 4, 5)])
def test_problem_rejects_no_sequences_tokens_or_coordinates(shape):
    """n = 0 problems were accepted at construction (NaN losses: a mean over no sequence)."""
    X = torch.zeros(shape)
    with pytest.raises(ValueError, match=r"^X must hold n >= 1 sequences of T >= 1 tokens"):
        data.Problem(X, torch.ones(shape[:-2]), torch.zeros(shape[:-3] + (shape[-3], shape[-1])),
                     torch.zeros(shape[-1]))


def test_problem_with_one_token_is_still_paper_A_model():
    """Chapter 6 builds a causal query with one candidate as a Problem (T = 1): the model is defined there, so
    construction accepts it; what needs a second token (local optimality, convergence) says so."""
    one = data.Problem(P.X[:, :1], P.Y, P.Z, P.v)
    assert one.T == 1 and theory.margins(one, EYE, [0, 0]).tolist() == [[0.0], [0.0]]
    with pytest.raises(ValueError, match=r"^problem has T=1 token per sequence"):
        theory.locally_optimal(one, [0, 0])
    with pytest.raises(ValueError, match=r"^problem has T=1 token per sequence"):
        theory.convergence(one, EYE)


@pytest.mark.parametrize("scale", [1e160, 1e-160])
def test_correlation_and_cosine_of_extreme_scales(scale):
    """correlation(A * 1e160, B) was NaN (inf / inf), cosine(a * 1e-160, b) 'of a zero vector' (underflow)."""
    gen = torch.Generator().manual_seed(0)
    A, B = torch.randn(2, 4, 3, 3, generator=gen, dtype=torch.float64)
    np.testing.assert_allclose(theory.correlation(A * scale, B), theory.correlation(A, B), rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(theory.cosine(A[..., 0] * scale, B[..., 0]), theory.cosine(A[..., 0], B[..., 0]),
                               rtol=1e-14, atol=1e-15)


def test_unit_rows_of_extreme_scales():
    """unit_rows(x * 1e200) returned zeros (the norm overflowed), unit_rows(x * 1e-200) NaN."""
    x = torch.tensor([[3.0, 4.0]], dtype=torch.float64)
    for scale in (1e200, 1e-200, 1.0):
        torch.testing.assert_close(data.unit_rows(x * scale), torch.tensor([[0.6, 0.8]], dtype=torch.float64))
    with pytest.raises(ValueError, match=r"^tensor has a row of zeros"):
        data.unit_rows(torch.zeros(2, 3))


def test_tokens_times_1e160_overflow_with_an_error_naming_the_arguments():
    """Tokens x1e160 gave NaN margins (inf - inf) without an error."""
    big = data.Problem(P.X * 1e160, P.Y, P.Z, P.v)
    with pytest.raises(FloatingPointError, match=r"\bW\b.*\bproblem|\bproblem\b.*\bW\b"):
        theory.margins(big, EYE * 1e160, ALPHA)
    with pytest.raises(FloatingPointError, match=r"\bW\b.*\bproblem|\bproblem\b.*\bW\b"):
        theory.convergence(big, EYE * 1e160)
    with pytest.raises(FloatingPointError, match=r"\bX\b.*\bZ\b"):
        mt.token_pairs(P.X * 1e160, P.Z * 1e160, torch.ones(n, T, dtype=torch.bool))


def test_heads_overflow_is_an_error():
    """Lambda(v, 1e300).value(a * 1e10) returned -inf."""
    with pytest.raises(FloatingPointError, match=r"\ba\b"):
        heads.Lambda(torch.ones(3), 1e300).value(torch.ones(2, 3) * 1e10)
    with pytest.raises(FloatingPointError, match=r"\blams\b"):
        mt.lambda_sweep([1e308], batch=2, steps=2)


@pytest.mark.parametrize("head", ["relu", "lambda", 3, np.ones(3)])
def test_a_head_given_by_name_is_rejected_clearly(head):
    """head='relu' met an AttributeError ('str' object has no attribute 'value_and_gradient') deep in training;
    heads._as_head is the check for the functions that take a head."""
    with pytest.raises(TypeError, match=r"^head must be None .* heads\.random_relu"):
        heads._as_head(head, 3)
    with pytest.raises(ValueError, match=r"^head acts on R\^3 but the tokens are in R\^4"):
        heads._as_head(heads.random_relu(3, seed=0), 4)


@pytest.mark.parametrize("make, pattern", [
    (lambda: heads.Linear("abc"), r"^v must"), (lambda: heads.Linear(torch.ones(())), r"^v must have shape"),
    (lambda: heads.ReLU(torch.ones(3)), r"^V must have shape"), (lambda: heads.Lambda(torch.ones(3), True), r"^lam"),
    (lambda: heads.random_relu(3, seed=0, batch=0), r"^batch must"),
    (lambda: heads.random_relu(3, seed=0).value(torch.ones(2, 4)), r"^a must have shape \(\.\.\., n, 3\)"),
])
def test_heads_check_their_parameters(make, pattern):
    """Linear('abc') was accepted, batch=0 gave an unbatched head, a wrong `a` met a matmul error."""
    with pytest.raises((TypeError, ValueError), match=pattern):
        make()


def test_what_is_not_a_device_is_refused_by_name():
    with pytest.raises(TypeError, match=r"^device must be None or 'cpu', got 3"):
        data.random_problem(2, 3, 3, seed=0, device=3)


@pytest.mark.parametrize("device", ["cuda", "meta", torch.device("meta")])
def test_devices_other_than_the_cpu_are_refused_by_name(device):
    with pytest.raises(ValueError, match=r"^device=.* attnsvm computes on the CPU"):
        data.random_problem(2, 3, 3, seed=0, device=device)
    with pytest.raises(ValueError, match=r"^device="):
        P.to(device)


def test_tensors_that_require_grad_are_accepted():
    """margins, correlation and cosine called .numpy() on a tensor that requires grad."""
    W = EYE.clone().requires_grad_()
    assert theory.margins(P, W, ALPHA).shape == (n, T)
    assert theory.correlation(W, EYE) == pytest.approx(1.0)
    assert theory.cosine(W[0], EYE[0]) == pytest.approx(1.0)
    grad = data.Problem(P.X.clone().requires_grad_(), P.Y, P.Z, P.v)
    assert theory.locally_optimal(grad, ALPHA).dtype == bool


@pytest.mark.parametrize("make, error, pattern", [
    (lambda: data.single_input_problem(global_case="no"), TypeError, r"^global_case must be True or False"),
    (lambda: data.joint_training_problem(tight=None), TypeError, r"^tight must be True or False"),
    (lambda: data.equal_scores_problem(3, 4, 5, seed=0, delta=-1.0), ValueError, r"^delta must"),
    (lambda: data.planar_problem(seed=0, spread=math.nan), ValueError, r"^spread must"),
    (lambda: data.planar_problem(seed=0, spread=1.7e308), FloatingPointError, r"\bspread\b"),
    (lambda: data.loss_example_problem("a"), TypeError, r"^C must be a finite number"),
    (lambda: data.loss_example_problem(math.inf), ValueError, r"^C must be a finite number"),
    (lambda: data.orthonormal_problem(4, seed=0, batch=0), ValueError, r"^batch must"),
    (lambda: data.random_selection("problem", seed=0), TypeError, r"^problem must be an attnsvm\.data\.Problem"),
    (lambda: data.random_problem(10**5, 10**3, 10**3, seed=0), ValueError, r"bytes of memory"),
    (lambda: P.repeat(10**12), ValueError, r"^copies asks for"),
])
def test_problem_builders_name_their_bad_arguments(make, error, pattern):
    """global_case='no' built the global case, tight=None the loose one, delta=-1 a problem outside Assumption B.2,
    spread=nan or C=inf blamed X ('X contains NaN'), batch=0 was unbatched, huge sizes exhausted memory."""
    with pytest.raises(error, match=pattern):
        make()


def test_indexing_a_problem_addresses_the_batch_only():
    """problem[0, 1] on a batch (2,) indexed a sequence and a coordinate of v, then failed with 'X must have shape'."""
    batch = data.random_problem(2, 3, 3, seed=0, batch=2)
    with pytest.raises(IndexError, match=r"^index \(0, 1\) does not select problems of the batch shape \(2,\)"):
        batch[0, 1]
    with pytest.raises(IndexError, match=r"^index 5 does not select"):
        batch[5]
    assert torch.equal(batch[..., 1].X, batch.X[1]) and batch[torch.tensor([True, False])].batch_shape == (1,)


@pytest.mark.parametrize("make, error, pattern", [
    (lambda: theory.neighbour_selections([0], 10**9), ValueError, r"^alpha and T asks for"),
    (lambda: theory.neighbour_selections(3, 4), ValueError, r"^alpha must have shape \(n,\)"),
    (lambda: theory.neighbour_selections([[0, 1], [1]], 4), TypeError, r"^alpha must be an array"),
    (lambda: theory.sample_feasible(2, 3, 3, count=1, seed=0, max_draws=10**9), ValueError, r"^max_draws asks for"),
    (lambda: theory.sample_feasible(2, 3, 3, count=1, seed="0"), TypeError, r"^seed must be an integer"),
    (lambda: theory.convergence(P, EYE, threshold="high"), TypeError, r"^threshold must be a finite number"),
    (lambda: theory.convergence(P, EYE, threshold=2.0), ValueError, r"^threshold must be a correlation in"),
    (lambda: theory.locally_optimal(data.multi_input_problem(), [0, 0, 0], key=np.eye(2)), ValueError,
     r"^key must have shape \(3, 3\)"),
    (lambda: theory.token_scores(P.X), TypeError, r"^problem must be an attnsvm\.data\.Problem"),
    (lambda: theory.cosine(np.ones(3), np.ones(4)), ValueError, r"^a and b must be vectors of the same length"),
])
def test_theory_names_its_bad_arguments(make, error, pattern):
    """neighbour_selections([0], 10**9) built a billion tensors, a scalar or ragged alpha met numpy's errors,
    sample_feasible(max_draws=10**9) tried to allocate the problems, threshold='high' failed in a comparison,
    a key of the wrong shape in a matmul, token_scores(X) with an AttributeError."""
    with pytest.raises(error, match=pattern):
        make()


def test_convergence_accepts_one_W_for_a_batch():
    """convergence(batch, W (d, d)) failed with an IndexError (np.asarray(W)[feasible])."""
    batch = data.random_problem(2, 3, 3, seed=0, batch=3)
    assert theory.convergence(batch, EYE).shape == (3,)


@pytest.mark.parametrize("make, error, pattern", [
    (lambda: mt.train_runs(3, [1.5]), TypeError, r"^seeds\[0\] must be an integer"),
    (lambda: mt.train_runs(3, ["1"]), TypeError, r"^seeds\[0\] must be an integer"),
    (lambda: mt.train_runs(3, "12"), ValueError, r"^seeds must be a non-empty list"),
    (lambda: mt.train_runs(3, [1], eps=-1.0), ValueError, r"^eps must"),
    (lambda: mt.train_runs(10**5, [1]), ValueError, r"^seeds \(their number\) and d asks for"),
    (lambda: mt.stored_seeds("10"), ValueError, r"^d must be an integer"),
    (lambda: mt.select(runs(), [1, 0]), ValueError, r"^keep must be a bool array of shape \(2,\)"),
    (lambda: mt.select("runs", [True, False]), TypeError, r"^runs must be the Runs"),
    (lambda: mt.norms(None), TypeError, r"^runs must be the Runs"),
    (lambda: mt.token_fates(runs(), "exact"), TypeError, r"^exact must be the Runs"),
    (lambda: mt.token_pairs(P.X, P.Z, np.ones((n, T))), TypeError, r"^relevant must be a boolean mask"),
    (lambda: mt.token_pairs(P.X.requires_grad_(False)[:, :0], P.Z, np.ones((n, 0), bool)), ValueError,
     r"^need X \(n, T, d\) with n, T, d >= 1"),
    (lambda: mt.token_pairs(torch.ones(200, 80, 1), torch.ones(200, 1), torch.ones(200, 80, dtype=torch.bool)),
     ValueError, r"^X asks for"),
    (lambda: mt.lambda_sweep("0.5"), ValueError, r"^lams must be a non-empty list"),
    (lambda: mt.lambda_sweep([0.5, True]), TypeError, r"^lams\[1\] must be a finite number"),
    (lambda: mt.lambda_sweep([0.5], steps=10**12), ValueError, r"^steps asks for"),
    (lambda: mt.search(4, 1, workers=10**6), ValueError, r"^workers asks for"),
    (lambda: mt.search(4, 1, workers="two"), ValueError, r"^workers must be an integer >= 1"),
    (lambda: mt.search(4, 10**6, chunk=8, max_candidates=8), ValueError, r"\bcount=1000000\b.*\bmax_candidates=8\b"),
    (lambda: mt.search(4, 1, start=-1), ValueError, r"^start must be an integer >= 0"),
])
def test_multitoken_names_its_bad_arguments(make, error, pattern):
    """seeds [1.5] and ['1'] were silently rounded or parsed, stored_seeds('10') answered, keep=[1, 0] was cast to
    bool, relevant of floats too, lams='0.5' was iterated, a search that cannot succeed never ended."""
    with pytest.raises(error, match=pattern):
        make()


def test_token_pairs_project_checks_W():
    pairs = mt.token_pairs(P.X, P.Z, torch.ones(n, T, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"^W must have shape \(3, 3\)"):
        pairs.project(np.ones((2, 2)))
    assert pairs.project(EYE.clone().requires_grad_()).shape == (3, 3)


@pytest.mark.parametrize("make, error, pattern", [
    (lambda: ranks.grid([("a", "b", "c")]), ValueError, r"^points\[0\]=\('a', 'b', 'c'\): n must be an integer"),
    (lambda: ranks.grid([(2, 1, 3)]), ValueError, r"^points\[0\]=\(2, 1, 3\): T must be an integer >= 2"),
    (lambda: ranks.grid("abc"), ValueError, r"^points must be a non-empty list"),
    (lambda: ranks.grid([(2, 3, 3)], count=0), ValueError, r"^count must"),
    (lambda: ranks.grid([(2, 3, 3)], workers=10**6), ValueError, r"^workers asks for"),
    (lambda: ranks.grid([(2, 3, 3)], workers="two"), ValueError, r"^workers must be an integer >= 1"),
    (lambda: ranks.feasible_problems(2, 3, 3, max_draws=10**12), ValueError, r"^max_draws asks for"),
    (lambda: ranks.spectra(10**6, 10**3, 10**3), ValueError, r"chunk \(or max_draws\), n, T and d asks for"),
])
def test_ranks_names_its_bad_arguments(make, error, pattern):
    """A bad point or count failed inside a worker process (or not at all for ('a', 'b', 'c')), a huge max_draws
    ran for hours, huge sizes exhausted memory."""
    with pytest.raises(error, match=pattern):
        make()


# ------------------------------------------------------------------ defects the bad-input census found (tools/bad_input_census.py)

META = torch.tensor([0.5], dtype=torch.float64).to("meta")


@pytest.mark.parametrize("make, error, pattern", [
    (lambda: heads.Linear([1.0, -1.0]).gradient(torch.tensor([[math.nan, 1.0]], dtype=torch.float64)), ValueError,
     r"^a contains 1 NaN"),
    (lambda: heads.ReLU(EYE[:2, :2]).gradient(torch.tensor([[math.inf, 1.0]], dtype=torch.float64)), ValueError,
     r"^a contains 1 NaN"),
    (lambda: data.loss_example_problem(0.0), ValueError, r"^C must be a finite number > 0, got 0.0"),
    (lambda: data.loss_example_problem(-1.0), ValueError, r"^C must be a finite number > 0, got -1.0"),
    (lambda: theory.sample_feasible(10**12, 3, 2, count=2, seed=0), ValueError, r"^max_draws, n, T and d asks for"),
    (lambda: theory.sample_feasible(4, 3, 10**12, count=2, seed=0), ValueError, r"^max_draws, n, T and d asks for"),
    (lambda: mt.search(4, 10**12, chunk=8), ValueError, r"^count=1000000000000 .* max_candidates=1000000\b"),
    (lambda: mt.lambda_sweep(META, batch=4, steps=100), ValueError, r"^lams is on the device 'meta'"),
    (lambda: mt.token_pairs(P.X, P.Z, torch.ones(n, T, dtype=torch.bool).to("meta")), ValueError,
     r"^relevant is on the device 'meta'"),
    (lambda: ranks.grid([(10**6, 10**3, 10**3)], count=2), ValueError,
     r"^points\[0\]=\(1000000, 1000, 1000\): chunk \(or max_draws\), n, T and d asks for"),
])
def test_census_defects_name_their_argument(make, error, pattern):
    """The gradient of a Linear or ReLU head ignored NaN in a (a finite result), C <= 0 built a problem whose first
    token is optimal, huge n/T/d blamed max_draws alone, search(count=10**12) ran for hours before giving up, 'meta'
    tensors met torch's NotImplementedError, a grid point too large to hold did not say which point."""
    with pytest.raises(error, match=pattern):
        make()


# ------------------------------------------------------------------ property tests

BAD_SCALARS = [None, True, False, "3", "abc", b"3", 1.5, -1, 0, -2.5, math.nan, math.inf, -math.inf, 10**12,
               2**70, -10**12, 1e-300, 1e300, 1e-160, 1e160, [], [1, 2], (3,), {}, np.float64(2.0), np.int64(-2),
               np.int64(2), torch.tensor(2), object()]


def scalars(*valid):
    """A valid value, or a bad or extreme scalar."""
    return st.one_of(st.sampled_from(valid), st.sampled_from(BAD_SCALARS))


def numbers(*valid):
    """A valid number, or any float (NaN, inf, subnormal, huge) or bad scalar."""
    return st.one_of(st.sampled_from(valid), st.floats(allow_nan=True, allow_infinity=True),
                     st.sampled_from(BAD_SCALARS))


def sizes(*valid):
    """A valid size, a small integer (some valid, some not) or a bad scalar (huge, negative, not an int)."""
    return st.one_of(st.sampled_from(valid), st.integers(-2, 4), st.sampled_from(BAD_SCALARS))


@st.composite
def arrays(draw, value, *, integers: bool = False):
    """`value` (an array), or a corrupted copy: rescaled to an extreme, with NaN or inf, of another shape or dtype,
    empty, a string, a ragged list, None, or as a tensor that requires grad."""
    base = np.array(value.detach().numpy() if torch.is_tensor(value) else value, dtype=np.float64)
    kind = draw(st.sampled_from(["valid", "scaled", "nan", "inf", "shape", "empty", "string", "bool", "complex",
                                 "ragged", "grad", "list", "none", "scalar", "float"]))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    if kind == "valid":
        return value
    if kind == "scaled":
        with np.errstate(over="ignore"):  # 1e308 overflows some entries to inf: also bad input
            return base * draw(st.sampled_from([1e160, 1e-160, 1e300, 1e-300, 1e308, 0.0, -1.0]))
    if kind in ("nan", "inf"):
        base = base.copy()
        if base.size:
            base.flat[rng.integers(base.size)] = np.nan if kind == "nan" else -np.inf
        return base
    if kind == "shape":
        shape = tuple(draw(st.lists(st.integers(0, 4), max_size=4)))
        return rng.integers(0, 3, shape) if integers else rng.standard_normal(shape)
    if kind == "empty":
        return np.zeros(base.shape[:-1] + (0,)) if base.ndim else np.zeros(0)
    if kind == "string":
        return draw(st.sampled_from(["abc", np.full(base.shape, "a")]))
    if kind == "bool":
        return base > 0
    if kind == "complex":
        return base + 1j
    if kind == "ragged":
        return [[1.0, 2.0], [3.0]]
    if kind == "grad":
        return torch.tensor(base, requires_grad=True)
    if kind == "list":
        return base.tolist()
    if kind == "none":
        return None
    if kind == "float":
        return base + 0.5
    return draw(st.sampled_from([0.0, 1.0, -3]))


@st.composite
def problems(draw, valid: data.Problem = P):
    """`valid`, or a problem with extreme tokens, without queries, with one token, requiring grad, batched, or not
    a Problem at all."""
    kind = draw(st.sampled_from(["valid", "scaled", "prompt", "single", "grad", "batched", "object", "none"]))
    if kind == "valid":
        return valid
    if kind == "scaled":
        scale = draw(st.sampled_from([1e160, 1e-160, 1e300, 1e-300]))
        return data.Problem(valid.X * scale, valid.Y, valid.Z, valid.v)
    if kind == "prompt":
        return data.Problem(valid.X, valid.Y, None, valid.v)
    if kind == "single":
        return data.Problem(valid.X[..., :1, :], valid.Y, valid.Z, valid.v)
    if kind == "grad":
        return data.Problem(valid.X.clone().requires_grad_(), valid.Y, valid.Z, valid.v.clone().requires_grad_())
    if kind == "batched":
        return data.random_problem(valid.n, valid.T, valid.d, seed=1, batch=2)
    return draw(st.sampled_from([None, valid.X, "problem", 3]))


def finite(value) -> bool:
    """Whether every number in `value` (tensors, arrays, problems, result classes, containers) is finite."""
    if isinstance(value, data.Problem):
        return all(finite(part) for part in (value.X, value.Y, value.Z, value.v) if part is not None)
    if torch.is_tensor(value):
        return not value.is_floating_point() or bool(torch.isfinite(value.detach()).all())
    if isinstance(value, np.ndarray):
        return value.dtype.kind not in "fc" or bool(np.isfinite(value).all())
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(finite(item) for item in value.values())
    if isinstance(value, (list, tuple)):
        return all(finite(item) for item in value)
    if dataclasses.is_dataclass(value):
        return all(finite(getattr(value, f.name)) for f in dataclasses.fields(value) if f.compare)
    return True


def outcome(function, arguments: dict, bad: str, names=(), valid=lambda result, args: True):
    """Call function(**arguments), whose argument `bad` was replaced: a valid result (finite, `valid`) or an
    exception naming `bad` (or one of `names`: arguments whose meaning depends on it)."""
    try:
        result = function(**arguments)
    except ERRORS as err:
        named = [name for name in (bad,) + tuple(names) if re.search(rf"(?<![A-Za-z_]){re.escape(name)}\b", str(err))]
        assert named, f"{type(err).__name__} for a bad {bad}={arguments[bad]!r} does not name it: {err}"
        return None
    assert finite(result), f"non-finite result for {bad}={arguments[bad]!r}"
    assert valid(result, arguments), f"wrong result for {bad}={arguments[bad]!r}: {result!r}"
    return result


def replace_one(draw, valid: dict, strategies: dict) -> tuple[dict, str]:
    """`valid` with one argument, chosen by hypothesis, drawn from its strategy."""
    name = draw(st.sampled_from(sorted(strategies)))
    return {**valid, name: draw(strategies[name])}, name


def batch_of(problem) -> tuple:
    return problem.batch_shape if isinstance(problem, data.Problem) else ()


# ---- data

@FAST
@given(st.data())
def test_property_problem(draw):
    valid = dict(X=P.X, Y=P.Y, Z=P.Z, v=P.v, device=None)
    strategies = {name: arrays(getattr(P, name)) for name in "XYZv"}
    strategies["device"] = scalars(None, "cpu", "cuda", "meta", "gpu", 0)
    args, bad = replace_one(draw.draw, valid, strategies)
    outcome(lambda **a: data.Problem(a["X"], a["Y"], a["Z"], a["v"], device=a["device"]), args, bad,
            names=("X", "Y", "Z", "v"), valid=lambda p, a: isinstance(p, data.Problem) and p.X.dtype == torch.float64)


@FAST
@given(st.data())
def test_property_problem_methods(draw):
    batch = data.random_problem(2, 3, 3, seed=0, batch=3)
    index = draw.draw(st.one_of(st.integers(-5, 5), st.sampled_from(
        [slice(0, 2), (0, 1), ..., None, "a", 1.5, [0, 2], [5], torch.tensor([True, False, True]),
         np.array([True]), (slice(None), 0), torch.tensor(1)])))
    try:
        assert batch[index].X.shape[-3:] == (2, 3, 3)
    except IndexError as err:
        assert "index" in str(err)
    outcome(lambda copies: P.repeat(copies), {"copies": draw.draw(sizes(2))}, "copies",
            valid=lambda p, a: p.batch_shape == (a["copies"],))
    outcome(lambda device: P.to(device), {"device": draw.draw(scalars("cpu", torch.device("cpu"), "cuda", "meta"))},
            "device", valid=lambda p, a: p.X.device.type == "cpu")


@FAST
@given(arrays(torch.tensor([[3.0, 4.0], [1.0, -1.0]])))
def test_property_unit_rows(tensor):
    outcome(data.unit_rows, {"tensor": tensor}, "tensor",
            valid=lambda r, a: torch.allclose(r.norm(dim=-1), torch.ones(r.shape[:-1], dtype=r.dtype)))


@FAST
@given(st.data())
def test_property_random_problem(draw):
    valid = dict(n=2, T=3, d=2, seed=0, batch=None, device=None)
    strategies = dict(n=sizes(2), T=sizes(3), d=sizes(2), batch=sizes(None, 2),
                      seed=st.one_of(scalars(0, 5, [1, 2], np.array([3, 4])), st.lists(scalars(1), max_size=3)),
                      device=scalars(None, "cpu", "cuda", "meta"))
    args, bad = replace_one(draw.draw, valid, strategies)
    outcome(lambda **a: data.random_problem(a["n"], a["T"], a["d"], seed=a["seed"], batch=a["batch"],
                                            device=a["device"]), args, bad,
            names=("n", "T", "d", "batch", "seed"), valid=lambda p, a: p.X.shape[-3:] == (a["n"], a["T"], a["d"]))


@FAST
@given(st.data())
def test_property_planar_and_prompt_problems(draw):
    cases = {
        "planar": (data.planar_problem, dict(seed=0, n=2, T=3, spread=0.5),
                   dict(seed=scalars(0, 2**62), n=sizes(2), T=sizes(3), spread=numbers(0.5, 0.0))),
        "opposite": (data.opposite_clusters_problem, dict(seed=1, spread=0.3),
                     dict(seed=scalars(1), spread=numbers(0.3))),
        "multi": (data.multi_input_problem, dict(seed=0, spread=0.2), dict(seed=scalars(0), spread=numbers(0.2))),
        "single": (data.single_input_problem, dict(global_case=True), dict(global_case=scalars(True, False))),
        "joint": (data.joint_training_problem, dict(tight=True), dict(tight=scalars(True, False, np.bool_(True)))),
        "loss": (data.loss_example_problem, dict(C=2.0), dict(C=numbers(2.0, -3.0))),
    }
    function, valid, strategies = cases[draw.draw(st.sampled_from(sorted(cases)))]
    args, bad = replace_one(draw.draw, valid, strategies)
    outcome(function, args, bad, valid=lambda p, a: isinstance(p, data.Problem))


@FAST
@given(st.data())
def test_property_random_selection(draw):
    args, bad = replace_one(draw.draw, dict(problem=P, seed=0), dict(problem=problems(), seed=scalars(0, 7)))
    outcome(data.random_selection, args, bad,
            valid=lambda s, a: s.shape == a["problem"].batch_shape + (a["problem"].n,) and (s < a["problem"].T).all())


@FAST
@given(st.data())
def test_property_orthonormal_and_equal_scores_problems(draw):
    if draw.draw(st.booleans()):
        args, bad = replace_one(draw.draw, dict(T=4, seed=0, batch=None),
                                dict(T=sizes(4), seed=scalars(0), batch=sizes(None, 2)))
        outcome(lambda **a: data.orthonormal_problem(a["T"], seed=a["seed"], batch=a["batch"]), args, bad,
                names=("T", "batch"), valid=lambda p, a: p.X.shape[-2:] == (a["T"], a["T"]))
    else:
        args, bad = replace_one(draw.draw, dict(n=2, T=3, d=2, seed=0, batch=None, delta=0.1),
                                dict(n=sizes(2), T=sizes(3), d=sizes(2), seed=scalars(0), batch=sizes(None, 2),
                                     delta=numbers(0.0, 0.1)))
        outcome(lambda **a: data.equal_scores_problem(a["n"], a["T"], a["d"], seed=a["seed"], batch=a["batch"],
                                                      delta=a["delta"]), args, bad,
                names=("n", "T", "d", "batch"), valid=lambda p, a: p.X.shape[-3:] == (a["n"], a["T"], a["d"]))


# ---- theory

@FAST
@given(problems())
def test_property_token_scores_and_optimal_tokens(problem):
    outcome(theory.token_scores, {"problem": problem}, "problem",
            valid=lambda s, a: s.shape == a["problem"].batch_shape + (a["problem"].n, a["problem"].T))
    outcome(theory.optimal_tokens, {"problem": problem}, "problem",
            valid=lambda s, a: s.shape == a["problem"].batch_shape + (a["problem"].n,))


@FAST
@given(st.data())
def test_property_correlation_and_cosine(draw):
    A = torch.randn(2, 3, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    args, bad = replace_one(draw.draw, dict(A=A, B=A.flip(0)), dict(A=arrays(A), B=arrays(A)))
    outcome(theory.correlation, args, bad, valid=lambda r, a: ((np.abs(r) <= 1) & (np.ndim(r) >= 0)).all())
    args, bad = replace_one(draw.draw, dict(a=A[0, 0], b=A[1, 0]), dict(a=arrays(A[0, 0]), b=arrays(A[0, 0])))
    outcome(theory.cosine, args, bad, valid=lambda r, a: (np.abs(r) <= 1).all())


@FAST
@given(st.data())
def test_property_margins_and_support_tokens(draw):
    strategies = dict(problem=problems(), W=arrays(EYE), alpha=arrays(ALPHA, integers=True))
    for function in (theory.margins, theory.support_tokens):
        args, bad = replace_one(draw.draw, dict(problem=P, W=EYE, alpha=ALPHA), strategies)
        outcome(function, args, bad, names=("W", "alpha") if bad == "problem" else (),
                valid=lambda r, a: r.shape[-2:] == (a["problem"].n, a["problem"].T))


@FAST
@given(st.data())
def test_property_neighbour_selections(draw):
    args, bad = replace_one(draw.draw, dict(alpha=[0, 2], T=3), dict(alpha=arrays(np.array([0, 2]), integers=True),
                                                                     T=sizes(3)))
    outcome(theory.neighbour_selections, args, bad, names=("alpha", "T"),
            valid=lambda r, a: r.shape == (len(a["alpha"]) * (a["T"] - 1), len(a["alpha"])))


@FAST
@given(st.data())
def test_property_locally_optimal(draw):
    strategies = dict(problem=problems(), alpha=arrays(ALPHA, integers=True), norm=scalars("fro", "nuc", "l1"),
                      key=st.one_of(st.none(), arrays(EYE)))
    args, bad = replace_one(draw.draw, dict(problem=P, alpha=ALPHA, norm="fro", key=None), strategies)
    outcome(lambda **a: theory.locally_optimal(a["problem"], a["alpha"], norm=a["norm"], key=a["key"]), args, bad,
            names=("alpha", "key") if bad == "problem" else ("problem",) if bad == "key" else (),
            valid=lambda r, a: r.dtype == bool and r.shape == a["problem"].batch_shape)


@FAST
@given(st.data())
def test_property_convergence(draw):
    strategies = dict(problem=problems(), W=arrays(EYE), threshold=numbers(0.99, -1.0))
    args, bad = replace_one(draw.draw, dict(problem=P, W=EYE, threshold=0.99), strategies)
    outcome(lambda **a: theory.convergence(a["problem"], a["W"], threshold=a["threshold"]), args, bad,
            names=("W",) if bad == "problem" else (),
            valid=lambda r, a: r.shape == a["problem"].batch_shape and set(r.ravel()) <= {"global", "local", "none"})


@FAST
@given(st.data())
def test_property_sample_feasible(draw):
    valid = dict(n=2, T=3, d=3, count=2, seed=0, max_draws=40, selection="optimal")
    strategies = dict(n=sizes(2), T=sizes(3), d=sizes(3), count=sizes(2), seed=scalars(0, 2**62),
                      max_draws=sizes(40), selection=scalars("optimal", "random", "best"))
    args, bad = replace_one(draw.draw, valid, strategies)
    outcome(lambda **a: theory.sample_feasible(a["n"], a["T"], a["d"], count=a["count"], seed=a["seed"],
                                               max_draws=a["max_draws"], selection=a["selection"]), args, bad,
            names=("n", "T", "d", "max_draws"),
            valid=lambda r, a: len(r[1]) <= a["count"] and r[2] <= a["max_draws"])


# ---- heads

@FAST
@given(st.data())
def test_property_head_classes(draw):
    v, V = torch.ones(3, dtype=torch.float64), EYE
    kind = draw.draw(st.sampled_from(["Linear", "ReLU", "Lambda"]))
    if kind == "Linear":
        args, bad = replace_one(draw.draw, dict(v=v), dict(v=arrays(v)))
        head = outcome(heads.Linear, args, bad)
    elif kind == "ReLU":
        args, bad = replace_one(draw.draw, dict(V=V), dict(V=arrays(V)))
        head = outcome(heads.ReLU, args, bad)
    else:
        args, bad = replace_one(draw.draw, dict(v=v, lam=0.5), dict(v=arrays(v), lam=numbers(0.5, 0.0)))
        head = outcome(heads.Lambda, args, bad)
    if head is None:
        return
    a = torch.full((2, head.d), 0.3, dtype=torch.float64)
    for method in (head.value, head.gradient, head.value_and_gradient):
        outcome(method, {"a": draw.draw(arrays(a))}, "a")


@FAST
@given(st.data())
def test_property_random_relu(draw):
    args, bad = replace_one(draw.draw, dict(d=3, seed=0, batch=None),
                            dict(d=sizes(3), seed=scalars(0), batch=sizes(None, 2)))
    outcome(lambda **a: heads.random_relu(a["d"], seed=a["seed"], batch=a["batch"]), args, bad, names=("d", "batch"),
            valid=lambda h, a: h.V.shape[-2:] == (a["d"], a["d"]))


@FAST
@given(st.data())
def test_property_lambda_threshold_and_optimum(draw):
    u = torch.tensor([[1.0, 0.5, 0.2], [0.1, 0.1, -2.0]], dtype=torch.float64)
    strategies = dict(values=arrays(u), lam=numbers(0.5, 1e-300, 1e300))
    args, bad = replace_one(draw.draw, dict(values=u, lam=0.5), strategies)
    outcome(heads.lambda_threshold, args, bad, valid=lambda t, a: t.shape == np.shape(a["values"])[:-1])
    outcome(heads.lambda_optimum, args, bad,
            valid=lambda s, a: (s >= 0).all() and torch.allclose(s.sum(-1), torch.ones((), dtype=s.dtype),
                                                                  rtol=0, atol=1e-13))


# ---- multitoken

@FAST
@given(st.data())
def test_property_train_runs(draw):
    strategies = dict(d=st.one_of(sizes(3), st.just(10**5)), seeds=st.one_of(
        arrays(np.array([1]), integers=True), st.lists(scalars(1, 2), max_size=2)), eps=numbers(0.0, mt.EPS))
    args, bad = replace_one(draw.draw, dict(d=3, seeds=[1], eps=mt.EPS), strategies)
    outcome(lambda **a: mt.train_runs(a["d"], a["seeds"], eps=a["eps"]), args, bad, names=("seeds", "d"),
            valid=lambda r, a: r.trajectory.W.shape[-2:] == (a["d"], a["d"]))


@FAST
@given(st.data())
def test_property_runs_functions(draw):
    valid = runs()
    bad_runs = st.one_of(st.just(valid), st.sampled_from([None, "runs", valid.problem, valid.trajectory, 3]))
    function = draw.draw(st.sampled_from(["passes_filter", "largest_masked", "errors", "norms", "moved", "select",
                                          "token_fates"]))
    if function == "select":
        keep = np.array([True, False])
        args, bad = replace_one(draw.draw, dict(runs=valid, keep=keep), dict(runs=bad_runs, keep=arrays(keep)))
        outcome(mt.select, args, bad, valid=lambda r, a: len(r.seeds) == int(np.sum(a["keep"])))
    elif function == "moved":
        args, bad = replace_one(draw.draw, dict(runs=valid, back=1), dict(runs=bad_runs, back=sizes(1, 5)))
        outcome(mt.moved, args, bad, valid=lambda r, a: r.shape == (2,))
    elif function == "token_fates":
        other = st.one_of(st.just(exact_runs()), st.sampled_from([None, "exact", mt.select(valid, [True, False])]))
        args, bad = replace_one(draw.draw, dict(paper=valid, exact=exact_runs()), dict(paper=other, exact=other))
        outcome(mt.token_fates, args, bad, names=("paper", "exact"), valid=lambda r, a: r.left.shape == (2,))
    else:
        outcome(getattr(mt, function), {"runs": draw.draw(bad_runs)}, "runs")


@FAST
@given(st.data())
def test_property_search_and_stored_seeds(draw):
    valid = dict(d=4, count=1, start=1, chunk=8, workers=1, max_candidates=16)
    strategies = dict(d=sizes(4, 10**6), count=sizes(1, 10**6), start=scalars(1, 0, 2**62), chunk=sizes(8, 10**9),
                      workers=scalars(1), max_candidates=sizes(16))
    args, bad = replace_one(draw.draw, valid, strategies)
    outcome(lambda **a: mt.search(a["d"], a["count"], start=a["start"], chunk=a["chunk"], workers=a["workers"],
                                  max_candidates=a["max_candidates"]), args, bad,
            names=("count", "max_candidates", "d", "chunk"), valid=lambda r, a: len(r[0]) == a["count"])
    outcome(mt.stored_seeds, {"d": draw.draw(sizes(4, 6))}, "d", valid=lambda r, a: len(r) > 0)


@FAST
@given(st.data())
def test_property_token_pairs(draw):
    relevant = np.array([[True, True, False], [True, False, False]])
    strategies = dict(X=arrays(P.X), Z=arrays(P.Z), relevant=arrays(relevant))
    args, bad = replace_one(draw.draw, dict(X=P.X, Z=P.Z, relevant=relevant), strategies)
    pairs = outcome(mt.token_pairs, args, bad, names=("X", "Z", "relevant"),
                    valid=lambda r, a: r.basis.shape[1] == np.shape(a["X"])[-1] ** 2)
    if pairs is not None:
        W = np.eye(pairs.basis.shape[1] and round(pairs.basis.shape[1] ** 0.5))
        outcome(pairs.project, {"W": draw.draw(arrays(W))}, "W", valid=lambda r, a: r.shape == W.shape)


@FAST
@given(st.data())
def test_property_lambda_sweep(draw):
    valid = dict(lams=[0.0, 0.5], batch=2, seed=0, T=3, steps=10)
    strategies = dict(lams=st.one_of(arrays(np.array([0.0, 0.5])), st.lists(numbers(0.5, 1e300), max_size=3)),
                      batch=sizes(2), seed=scalars(0), T=sizes(3), steps=sizes(10, 10**12))
    args, bad = replace_one(draw.draw, valid, strategies)
    outcome(lambda **a: mt.lambda_sweep(a["lams"], batch=a["batch"], seed=a["seed"], T=a["T"], steps=a["steps"]),
            args, bad, names=("lams", "batch", "T"), valid=lambda r, a: len(r) == len(a["lams"]))


# ---- ranks

@FAST
@given(st.data())
def test_property_feasible_problems_and_spectra(draw):
    valid = dict(n=2, T=3, d=3, count=2, max_draws=40, chunk=20)
    strategies = dict(n=sizes(2), T=sizes(3), d=sizes(3), count=sizes(2), max_draws=sizes(40, 10**12),
                      chunk=sizes(20, 10**12))
    args, bad = replace_one(draw.draw, valid, strategies)
    names = ("n", "T", "d", "chunk", "max_draws", "count")
    outcome(lambda **a: ranks.feasible_problems(a["n"], a["T"], a["d"], count=a["count"], max_draws=a["max_draws"],
                                                chunk=a["chunk"]), args, bad, names=names,
            valid=lambda r, a: len(r[1]) <= a["count"] and r[2] <= a["max_draws"])
    outcome(lambda **a: ranks.spectra(a["n"], a["T"], a["d"], count=a["count"], max_draws=a["max_draws"],
                                      chunk=a["chunk"]), args, bad, names=names,
            valid=lambda r, a: r.values.shape[0] == 2 and r.values.shape[2] == a["d"])


@FAST
@given(st.data())
def test_property_grid(draw):
    valid = dict(points=[(2, 3, 3)], count=2, max_draws=40, chunk=20, workers=1)
    strategies = dict(points=st.one_of(st.just([(2, 3, 3)]), scalars([(2, 3, 3)]),
                                       st.lists(st.tuples(sizes(2), sizes(3), sizes(3)), max_size=2)),
                      count=sizes(2), max_draws=sizes(40, 10**12), chunk=sizes(20), workers=scalars(1))
    args, bad = replace_one(draw.draw, valid, strategies)
    outcome(lambda **a: ranks.grid(a["points"], count=a["count"], max_draws=a["max_draws"], chunk=a["chunk"],
                                   workers=a["workers"]), args, bad, names=("points", "chunk", "max_draws", "count"),
            valid=lambda r, a: len(r) >= 1)
