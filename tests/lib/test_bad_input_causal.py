"""Bad and extreme input for `attnsvm.causal` (with the soft-margin SVMs of `attnsvm.svm` that it runs on) and
`attnsvm.tensor` (issue 21, "Bad input").

Part 1: one test per defect fixed, the exact bad call and the exact error (or, where the input is valid after all,
the valid result). Part 2: one hypothesis property per public function (and the methods a user calls): one
argument of an otherwise valid, small call is replaced by a bad or extreme value (wrong type, string, None, bool,
NaN/inf, scales 1e+-160 and 1e+-300, negative or huge sizes, empty or wrongly shaped arrays, tensors that require
grad or live on another device), and the call must either return a valid result (finite where it promises
finite values) or raise TypeError/ValueError/FloatingPointError/SolverError naming that argument. An
InfeasibleSVM is a valid answer about the input (the hard-margin SVM does not exist), not an argument error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnsvm import causal, data, svm, tensor

COVERED = {
    "causal.synthetic_language", "causal.next_token_problems", "causal.next_token_problem", "causal.random_problem",
    "causal.candidates", "causal.scores", "causal.optimal_tokens", "causal.separation_mask", "causal.logits",
    "causal.attention", "causal.outputs", "causal.loss", "causal.weight_gradient", "causal.loss_gradient",
    "causal.gd", "causal.margins", "causal.att_svm", "causal.feasible", "causal.penalty_threshold",
    "causal.violations", "causal.total_slack", "causal.combine", "causal.selects_optimal", "causal.preference_cycle",
    "causal.conflicts", "causal.max_positive_margins", "svm.soft_margin_svm", "svm.penalty_threshold",
    "tensor.vec", "tensor.mat", "tensor.kron", "tensor.kron_logits", "tensor.row_block", "tensor.u", "tensor.alpha",
    "tensor.f", "tensor.h", "tensor.attention_row", "tensor.loss", "tensor.gradient", "tensor.hessian",
    "tensor.paper_gradient", "tensor.log10_bound", "tensor.lipschitz_bound", "tensor.random_instance",
    "tensor.sample_ball", "tensor.into_ball", "tensor.ratios", "tensor.hessian_norm", "tensor.empirical_lipschitz",
    "tensor.max_hessian_norm", "tensor.descend", "tensor.gap_study", "tensor.attention_study",
}

CLEAR = (TypeError, ValueError, FloatingPointError, svm.SolverError)

# small valid inputs: a feasible causal problem (n=2 sequences of T=3 tokens in R^3) and a tensor instance
P = causal.random_problem(2, 3, 3, seed=0)
PB = causal.random_problem(2, 3, 3, seed=0, batch=2)
W = torch.tensor([[0.5, -0.2, 0.1], [0.1, 0.3, -0.4], [0.0, 0.2, 0.6]], dtype=torch.float64)
ALPHA = causal.optimal_tokens(P)
LAM = torch.full((2, 3, 3), 0.5, dtype=torch.float64)
LANG = causal.synthetic_language(4, 3, seed=0, successors=2)
INST = tensor.random_instance(3, 2, 4.0, seed=0)  # A_j0 (3, 4), h (3,), b ()
X0 = tensor.sample_ball(INST.Aj, 4.0, 2, seed=1)  # (2, 4)
ROWS = torch.tensor([[1.0, 0.2], [0.3, 1.0], [0.5, 0.5]], dtype=torch.float64)  # feasible constraints a_c^T w >= 1
PAIR = (ROWS, torch.tensor([[1.0], [0.5], [2.0]], dtype=torch.float64))  # Kronecker rows: W (2, 1)


def _names(message: str, name: str) -> bool:
    """Whether `message` mentions `name` as a word (so that "x" is not found inside "exceeds")."""
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", message) is not None


# ------------------------------------------------------------------ part 1: one test per defect fixed

def test_into_ball_refuses_a_negative_radius_instead_of_flipping_the_sign():
    with pytest.raises(ValueError, match=r"R must be a finite number > 0, got -1"):
        tensor.into_ball(INST.Aj, X0 * 10, -1)
    with pytest.raises(TypeError, match=r"R must be a finite number > 0"):
        tensor.into_ball(INST.Aj, X0, "4")


def test_causal_att_svm_refuses_a_constraint_system_beyond_two_gib_before_building_it():
    big = causal.random_problem(40, 40, 5, seed=0)
    for call in (lambda: causal.att_svm(big), lambda: causal.feasible(big), lambda: causal.penalty_threshold(big),
                 lambda: causal.att_svm(big, C=1.0, objective="norm")):
        with pytest.raises(ValueError, match=r"problem \(n=40, T=40, K=40: 31200 separation constraints in one "
                                             r"instance\) asks for .* bytes .* use fewer or shorter sequences"):
            call()


def test_tensors_that_require_grad_work_where_the_solvers_leave_torch():
    X = P.X.clone().requires_grad_(True)
    graded = causal.SequenceProblem(X, P.V)
    np.testing.assert_array_equal(causal.att_svm(graded), causal.att_svm(P))
    np.testing.assert_array_equal(causal.margins(P, W.clone().requires_grad_(True)), causal.margins(P, W))
    np.testing.assert_array_equal(causal.combine(P, LAM.clone().requires_grad_(True)), causal.combine(P, LAM))
    counts, witness = causal.max_positive_margins(graded, return_W=True)
    np.testing.assert_array_equal(witness, causal.max_positive_margins(P, return_W=True)[1])
    ascent = tensor.max_hessian_norm(tensor.Instance(INST.Aj.clone().requires_grad_(True), INST.h, INST.b), 4.0,
                                     starts=2, steps=3)
    assert torch.isfinite(ascent.value).all()


def test_alpha_on_another_device_is_named():
    with pytest.raises(ValueError, match=r"alpha is on the device 'meta'"):
        causal.separation_mask(P, torch.empty((2, 3), dtype=torch.int64, device="meta"))


def test_degenerate_problems_are_refused_where_the_math_needs_them():
    with pytest.raises(ValueError, match=r"X must hold n >= 1 sequences .* mean over the sequences"):
        causal.SequenceProblem(torch.zeros(0, 3, 2), torch.zeros(0, 3, 2))
    with pytest.raises(ValueError, match=r"X must hold .* d >= 1"):
        causal.SequenceProblem(torch.zeros(2, 3, 0), torch.zeros(2, 3, 0))
    one = causal.SequenceProblem(torch.randn(3, 1, 2), torch.randn(3, 1, 2))  # the model is defined for T = 1
    assert torch.equal(causal.attention(one, torch.eye(2)), torch.ones(3, 1, 1, dtype=torch.float64))
    for call in (causal.att_svm, causal.feasible, causal.penalty_threshold):
        with pytest.raises(ValueError, match=r"problem has T = 1 token per sequence: .* there are none"):
            call(one)
    with pytest.raises(ValueError, match=r"T must be an integer >= 2 .* no other token"):
        causal.random_problem(2, 1, 3, seed=0)
    with pytest.raises(ValueError, match=r"T must be an integer >= 2 \(a next token to predict\)"):
        causal.next_token_problems(2, 1, 3, seeds=[0])


def test_overflowing_scores_logits_and_outputs_raise_instead_of_nan():
    with pytest.raises(ValueError, match=r"X and V are too large: their token scores .* overflow"):
        causal.SequenceProblem(P.X * 1e160, P.V * 1e160)
    with pytest.raises(FloatingPointError, match=r"attention logits .* W or the problem's tokens are too large"):
        causal.attention(causal.SequenceProblem(P.X * 1e160, P.V * 1e-160), W)
    with pytest.raises(FloatingPointError, match=r"logits A_j0 x .* Aj or x is too large"):
        tensor.f(INST.Aj * 1e160, X0 * 1e160)
    with pytest.raises(FloatingPointError, match=r"u\(x\) = exp\(A_j0 x\) .* scale Aj or x down"):
        tensor.u(INST.Aj, X0 * 1e3)
    with pytest.raises(FloatingPointError, match=r"the loss is not finite .* Aj, x, h or b is too large"):
        tensor.loss(INST.Aj, X0, INST.h * 1e160, INST.b * 1e160, loss="squared")
    X = 1 + 0.1 * torch.randn(2, 3, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    with pytest.raises(FloatingPointError, match=r"dL/dW .*\(use weight_gradient"):  # exp(3000): the loss's slope
        causal.loss_gradient(causal.SequenceProblem(X, -1000 * torch.ones(2, 3, 3)), W, "exponential")
    with pytest.raises(FloatingPointError, match=r"lam or the problem's tokens are too large"):
        causal.combine(P, torch.full((2, 3, 3), 1.7e308, dtype=torch.float64))


def test_badly_scaled_svms_raise_instead_of_returning_a_wrong_or_nan_solution():
    with pytest.raises(ValueError, match=r"problem's tokens have entries up to .*e\+99: .* rescale the tokens"):
        causal.att_svm(causal.SequenceProblem(P.X * 1e100, P.V * 1e-100))
    scaled = causal.random_problem(2, 3, 6, seed=0)  # at 1e10 NNLS returned a feasible, 5% suboptimal W
    with pytest.raises(svm.SolverError, match=r"hard-margin .* not optimal to tolerance .* rescale its tokens"):
        causal.att_svm(causal.SequenceProblem(scaled.X * 1e10, scaled.V))
    # a tiny penalty is solved, not refused: every multiplier at C (each margin below 1), W = C * sum of the A's
    W, lam = causal.att_svm(causal.SequenceProblem(P.X * 1e3, P.V), C=1e-13, return_multipliers=True)
    assert np.isfinite(W).all() and np.allclose(lam[lam > 0], 1e-13, rtol=1e-12, atol=0)


def test_gd_refuses_runaway_requests_and_reports_divergence():
    with pytest.raises(ValueError, match=r"steps asks for 1e\+12 gradient steps"):
        causal.gd(P, steps=10**12, lr=0.1)
    with pytest.raises(ValueError, match=r"steps / record_every asks for 1e\+08 recorded iterates"):
        causal.gd(P, steps=10**8, lr=0.1, record_every=1)
    for engine in ("compiled", "torch"):
        with pytest.raises(FloatingPointError, match=r"gd diverged at step \d+ .* lower lr \(got 1e\+308\)"):
            causal.gd(P, steps=10, lr=1e308, engine=engine)


@pytest.mark.parametrize("call, error, match", [
    (lambda: causal.gd(P, steps=2, lr=0.1, normalized=None), TypeError, r"normalized must be True or False"),
    (lambda: causal.gd(P, steps=2, lr=0.1, normalized="no"), TypeError, r"normalized must be True or False"),
    (lambda: causal.gd(P, steps=2, lr="0.1"), TypeError, r"lr must be a finite number > 0, got '0.1'"),
    (lambda: causal.gd(P, steps=2, lr=0.1, seed="3"), TypeError, r"seed must be an integer >= 0"),
    (lambda: causal.gd(P, steps=2, lr=0.1, engine="numba"), ValueError, r"engine='numba' is not supported"),
    (lambda: causal.gd(P, steps=2, lr=0.1, engine=None), TypeError, r"engine must be one of"),
    (lambda: causal.random_problem(2, 3, 4, seed="12"), TypeError, r"seed must be an integer >= 0, got '12'"),
    (lambda: causal.synthetic_language(5, 3, seed="1"), TypeError, r"seed must be an integer >= 0"),
    (lambda: causal.next_token_problems(2, 3, 4, seeds="12"), TypeError, r"seeds must be a list of integer seeds"),
    (lambda: causal.next_token_problems(2, 3, 4, seeds=[0, "1"]), TypeError, r"seeds\[1\] must be an integer"),
    (lambda: LANG.sample(2, 3, seed=1.5), TypeError, r"seed must be an integer >= 0"),
    (lambda: causal.att_svm(P, C=True), TypeError, r"C must be a finite number > 0, got True"),
    (lambda: causal.att_svm(P, return_multipliers="no"), TypeError, r"return_multipliers must be True or False"),
    (lambda: causal.max_positive_margins(P, return_W=None), TypeError, r"return_W must be True or False"),
    (lambda: tensor.max_hessian_norm(INST, 4.0, origin="no"), TypeError, r"origin must be True or False"),
    (lambda: causal.loss(P, W, np.array(["logistic"])), TypeError, r"loss must be one of"),
    (lambda: causal.candidates(data.random_problem(2, 3, 3, seed=0)), TypeError,
     r"problem must be a causal.SequenceProblem"),
    (lambda: causal.SequenceProblem(P.X, P.V, device="cuda"), ValueError, r"device='cuda' is not supported"),
    (lambda: causal.random_problem(2, 3, 4, seed=0, causal="yes"), TypeError, r"causal must be True or False"),
    (lambda: tensor.random_instance(3, 2, 4.0, seed="1"), TypeError, r"seed must be an integer >= 0, got '1'"),
    (lambda: tensor.random_instance(3, 2, "4", seed=0), TypeError, r"R must be a finite number > 0, got '4'"),
    (lambda: tensor.log10_bound("5", 4.0), TypeError, r"T must be a number or an array of numbers"),
    (lambda: tensor.log10_bound(True, 4.0), TypeError, r"T must be a number"),
    (lambda: tensor.gap_study([2], ["4"], batch=1, points=2, starts=1, steps=1), TypeError, r"radii must be a finite"),
    (lambda: tensor.loss(INST.Aj, X0, INST.h, INST.b, loss=np.array(["logistic"])), TypeError, r"loss must be one"),
])
def test_wrong_types_are_refused_instead_of_silently_accepted(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_sequence_problem_indexing_addresses_the_batch_only():
    with pytest.raises(IndexError, match=r"index \(0, 1\) does not select problems of the batch shape \(2,\)"):
        PB[0, 1]  # before: it indexed the sequences and failed deep in the constructor
    with pytest.raises(IndexError, match=r"selects no problem"):
        PB[2:]
    assert torch.equal(PB[1].X, PB.X[1]) and PB[:1].batch_shape == (1,)


def test_language_checks_its_distributions():
    with pytest.raises(ValueError, match=r"transition must hold probabilities"):
        causal.Language(LANG.embeddings, LANG.start, LANG.transition * 2)
    with pytest.raises(ValueError, match=r"start must have shape \(4,\)"):
        causal.Language(LANG.embeddings, LANG.start[:2], LANG.transition)


def test_log10_bound_and_studies_refuse_radii_beyond_float64_and_the_seed_range():
    with pytest.raises(FloatingPointError, match=r"log10 M .* R is too large"):
        tensor.log10_bound(5, 1e160)
    with pytest.raises(ValueError, match=r"radii must hold radii below 2\*\*62"):
        tensor.gap_study([2], [1e30], batch=1, points=2, iterations=1, starts=1, steps=1)
    with pytest.raises(ValueError, match=r"sizes, radii, d, batch, points, iterations, starts and steps asks for"):
        tensor.gap_study([10**6], [4.0])


def test_mat_of_an_empty_vector_names_x():
    with pytest.raises(ValueError, match=r"x must be a vector \(\.\.\., p q\) with p q >= 1 entries"):
        tensor.mat(torch.zeros(0))


def test_shapes_that_do_not_broadcast_are_named():
    with pytest.raises(ValueError, match=r"batch shapes do not broadcast \(Aj \(\), x \(2,\), h \(\), b \(3,\)\)"):
        tensor.loss(INST.Aj, X0, INST.h, torch.ones(3))  # before: torch's RuntimeError on the sizes 2 and 3
    with pytest.raises(ValueError, match=r"batch shapes do not broadcast \(A1 \(2,\), A2 \(3,\)\)"):
        tensor.kron(torch.zeros(2, 3, 3), torch.zeros(3, 2, 2))
    with pytest.raises(ValueError, match=r"A1 and A2 \(their Kronecker product\) asks for"):
        tensor.kron(torch.zeros(1000, 10, 10), torch.zeros(100, 100))


def test_ball_and_ratio_functions_refuse_degenerate_input_instead_of_nan():
    with pytest.raises(ValueError, match=r"Aj is zero .* pass a nonzero A_j0"):
        tensor.sample_ball(torch.zeros(3, 4), 4.0, 2, seed=0)
    with pytest.raises(ValueError, match=r"x1 and x2 coincide"):
        tensor.ratios(lambda z: z, X0, X0)
    with pytest.raises(TypeError, match=r"function must be a callable"):
        tensor.ratios(3, X0, X0 + 1)
    with pytest.raises(ValueError, match=r"close=1e-300 gives close pairs lost in round-off"):
        tensor.empirical_lipschitz(INST, 4.0, points=2, iterations=1, close=1e-300)


def test_hessian_norm_of_functions_without_curvature_or_without_x():
    assert torch.equal(tensor.hessian_norm(lambda z: (2 * z).sum(-1), X0), torch.zeros(2, dtype=torch.float64))
    with pytest.raises(TypeError, match=r"function must return a real torch tensor computed from x"):
        tensor.hessian_norm(lambda z: torch.ones(()), X0)
    with pytest.raises(ValueError, match=r"iterations asks for 1e\+12 power iterations"):
        tensor.hessian_norm(lambda z: (z ** 2).sum(-1), X0, iterations=10**12)


def test_instances_may_be_plain_triples_and_other_values_are_named():
    estimate = tensor.empirical_lipschitz(tuple(INST), 4.0, points=2, iterations=1)
    assert torch.isfinite(estimate.pairs).all()
    with pytest.raises(TypeError, match=r"instance must be a tensor.Instance"):
        tensor.descend(None, X0[0], lr=0.1, steps=1)
    with pytest.raises(ValueError, match=r"x0 must have shape \(\.\.\., 4\)"):
        tensor.descend(INST, X0[0, :3], lr=0.1, steps=1)


def test_diverging_searches_name_the_step_size():
    with pytest.raises(FloatingPointError, match=r"the ascent diverged .* lower lr"):
        tensor.max_hessian_norm(INST, 4.0, lr=1e300, starts=2, steps=3)
    with pytest.raises(FloatingPointError, match=r"descend diverged at step \d+ .* lower lr"):
        tensor.descend(INST, X0[0], lr=1e306, steps=5, loss="squared", attention="linear")


def test_census_defects_name_their_argument():
    """The bad-input census: selects_optimal(problem, None) answered "all True" (None compared the optimal tokens
    with themselves); tokens x 1e-160 made att_svm and penalty_threshold infeasible, and tokens x 1e160 made gd and
    descend diverge, with messages that blamed lr or "tiny tokens" without naming the problem or instance."""
    with pytest.raises(TypeError, match=r"^alpha is missing \(None\)"):
        causal.selects_optimal(P, None)
    tiny = causal.SequenceProblem(P.X * 1e-160, P.V * 1e-160)
    with pytest.raises(svm.InfeasibleSVM, match=r"rescale the problem's tokens"):
        causal.att_svm(tiny)
    with pytest.raises(svm.InfeasibleSVM, match=r"rescale the problem's tokens"):
        causal.penalty_threshold(tiny)
    for engine in ("compiled", "torch"):
        with pytest.raises(FloatingPointError, match=r"^gd diverged at step \d+ .*lower lr .*the problem's tokens"):
            causal.gd(causal.SequenceProblem(P.X * 1e160, P.V), steps=20, lr=0.5, engine=engine)
    huge = tensor.Instance(INST.Aj * 1e160, INST.h, INST.b)
    with pytest.raises(FloatingPointError, match=r"^descend diverged at step \d+ .*lower lr .*\binstance\b"):
        tensor.descend(huge, torch.zeros(4, dtype=torch.float64), lr=0.1, steps=5)


# ------------------------------------------------------------------ part 2: hypothesis, one property per function

NUMBERS = [None, "0.5", "abc", True, False, float("nan"), float("inf"), -float("inf"), -1.0, 0.0, -1e-300, 1e-300,
           1e-160, 1e160, 1e300, 1.5, [1.0], np.float64(0.25), object()]
INTEGERS = [None, "3", True, -1, 0, 1.5, 2.0, 10**15, 2**70, np.int64(2), [2], object()]
FLAGS = [None, "no", "yes", 0, 1, np.bool_(True), [True], object()]
OPTIONS = [None, 3, "", "hinge", "relu", ["logistic"], np.array(["logistic"]), object()]
SEEDS = [None, "12", -1, 1.5, True, 2**70, 2**63, np.int64(3), [1, 2], object()]
LISTS = [None, "4", 4.0, [], [0], [-1.0], ["a"], [4.0, float("nan")], [1e300], [2**70], [3.0], [[4.0]], {4.0: 1},
         np.array([4.0]), torch.tensor([5.0])]


def _arrays(valid) -> st.SearchStrategy:
    """Bad and extreme variants of a valid array: scaled, non-finite, reshaped, empty, of a wrong dtype, on another
    device, requiring grad (valid), or not an array at all."""
    v = torch.as_tensor(valid, dtype=torch.float64)
    nan, inf = v.clone().flatten(), v.clone().flatten()
    nan[0], inf[-1] = float("nan"), float("inf")
    variants = [v * s for s in (1e-300, 1e-160, 1e160, 1e300, -1e300)] + [
        nan.reshape(v.shape), inf.reshape(v.shape), v.clone().requires_grad_(True), v[..., None], v.flatten(),
        v.tolist(), v.numpy().astype(np.float32), v.to(torch.complex128), v > 0, v.to(torch.int64),
        torch.empty(v.shape, device="meta"), None, "abc", 3, True, [["a", "b"]]]
    if v.ndim:
        variants += [v[..., :0], v[..., 0], v.new_zeros((0,) + v.shape[1:]), torch.cat([v, v], -1)]
    return st.sampled_from(variants)


def _problems(problem) -> st.SearchStrategy:
    """Bad and extreme problems: other types, huge or tiny tokens, T = 1, a batch, tokens that require grad."""
    return st.sampled_from([
        None, "problem", problem.X, data.random_problem(2, 3, 3, seed=0),
        causal.SequenceProblem(problem.X * 1e100, problem.V * 1e-100),
        causal.SequenceProblem(problem.X * 1e-160, problem.V), causal.SequenceProblem(problem.X * 1e60, problem.V),
        causal.SequenceProblem(problem.X[..., :1, :], problem.V[..., :1, :]),
        causal.SequenceProblem(problem.X.clone().requires_grad_(True), problem.V),
        causal.SequenceProblem(problem.X, problem.V, causal=False), PB,
        causal.SequenceProblem(torch.zeros_like(problem.X), problem.V)])


def _pairs() -> st.SearchStrategy:
    """Kronecker rows (deltas, queries): valid, mismatched, overflowing, tiny, or with a part that is no array."""
    deltas, queries = PAIR
    return st.sampled_from([
        PAIR, list(PAIR), (deltas, queries[:2]), (deltas * 1e160, queries), (deltas * 1e-300, queries),
        (deltas, queries * float("nan")), (deltas, "abc"), (deltas, queries, queries), (deltas[:, :0], queries),
        (deltas.to(torch.complex128), queries), (deltas[:0], queries[:0]), (None, None)])


def _groups() -> st.SearchStrategy:
    """Slack groups of the 3 constraints of ROWS: valid, or of a wrong shape, dtype or type."""
    return st.sampled_from([None, [0, 0, 1], np.array([2, 2, 2]), torch.tensor([0, 1, 2]), [-1, 5, 5], [0, 1],
                            [[0, 0, 1]], [0.5, 1.5, 0.5], [True, False, True], "abc", 3, object(),
                            torch.empty(3, device="meta")])


def _instances() -> st.SearchStrategy:
    Aj, h, b = INST
    return st.sampled_from([
        None, "instance", (Aj, h), tuple(INST), [Aj, h, b], tensor.Instance(Aj * 1e300, h, b),
        tensor.Instance(Aj, h * 1e300, b), tensor.Instance(Aj, h, b * 1e300), tensor.Instance(Aj * 1e-300, h, b),
        tensor.Instance(Aj, h[:-1], b), tensor.Instance(torch.zeros_like(Aj), h, b),
        tensor.Instance(Aj, h * float("nan"), b), tensor.Instance(Aj.clone().requires_grad_(True), h, b),
        tensor.Instance(Aj, h, torch.ones(5, dtype=torch.float64)), tensor.Instance(Aj[None], h[None], b[None]),
        tensor.Instance(Aj[:0], h[:0], b), tensor.Instance(Aj, h, "b")])


def _functions() -> st.SearchStrategy:
    return st.sampled_from([
        None, "f", 3, lambda z: None, lambda z: "abc", lambda z: z * float("nan"), lambda z: (z ** 2).sum(-1) * 1e300,
        lambda z: torch.exp(z * 1e3).sum(-1), lambda z: z.sum(), lambda z: torch.zeros(()), lambda z: z.detach() * 2,
        lambda z: np.asarray(z.detach()), lambda z: (z ** 3).sum(-1), lambda z: z[..., :1] * 2])


def _finite(value) -> bool:
    """Every float tensor or array in `value` (nested in tuples, NamedTuples and dataclasses) is finite."""
    if value is None or isinstance(value, (bool, int, np.bool_, np.integer)):
        return True
    if isinstance(value, (float, np.floating)):
        return bool(np.isfinite(value))
    if torch.is_tensor(value):
        return not value.is_floating_point() or bool(torch.isfinite(value.detach()).all())
    if isinstance(value, np.ndarray):
        return value.dtype.kind not in "fc" or bool(np.isfinite(value).all())
    if isinstance(value, (tuple, list)):
        return all(_finite(part) for part in value)
    if hasattr(value, "__dataclass_fields__"):
        return all(_finite(getattr(value, name)) for name in value.__dataclass_fields__)
    return True


def _no_nan_no_plus_inf(value) -> bool:
    """Finite or -inf (scores and logits off the candidates)."""
    value = value.detach()
    return not bool(torch.isnan(value).any() or (value == torch.inf).any())


def _gradient_ok(grad) -> bool:
    """(direction, log_scale, LogitGradient), as train.weight_gradient's: finite, and log scales -inf at worst (a
    gradient exactly 0)."""
    direction, log_scale, logit = grad
    return (_finite(direction) and _no_nan_no_plus_inf(log_scale) and _no_nan_no_plus_inf(logit.log_scale)
            and all(_finite(part) for part in (logit.direction, logit.probs, logit.outputs))
            and _no_nan_no_plus_inf(logit.log_slopes))


@dataclass
class Spec:
    """A public function: call(**arguments), valid small arguments, and the bad values to try per argument."""

    call: Callable
    valid: Callable[[], dict]
    pools: dict
    check: Callable = _finite
    names: dict = field(default_factory=dict)  # argument -> the name its errors must mention (default: itself)
    adapt: Callable = lambda arguments, argument: arguments  # noqa: E731 (arguments that follow a replaced one)


def _follow_problem(arguments: dict, argument: str) -> dict:
    """With another problem, the default selection (alpha=None) and multipliers of its shape."""
    problem = arguments["problem"]
    if argument == "problem":
        arguments["alpha"] = None
        if "lam" in arguments and isinstance(problem, causal.SequenceProblem):
            arguments["lam"] = torch.full(problem.batch_shape + (problem.n, problem.K, problem.T), 0.5)
    return arguments


def _problem_spec(function, *, W_arg=False, alpha=False, check=_finite, **extra) -> Spec:
    """A causal function of (problem[, W][, alpha], **extra)."""
    def valid():
        arguments = {"problem": P}
        if W_arg:
            arguments["W"] = W
        if alpha:
            arguments["alpha"] = ALPHA
        return dict(arguments, **{name: value for name, (value, _) in extra.items()})
    pools = {"problem": _problems(P)}
    if W_arg:
        pools["W"] = _arrays(W)
    if alpha:
        pools["alpha"] = st.sampled_from([None, "abc", 1.5, -1, ALPHA + 5, ALPHA.double(), ALPHA.double() + 0.5,
                                          ALPHA[None], ALPHA[..., :1], torch.full_like(ALPHA, 2), ALPHA.tolist(),
                                          ALPHA.numpy(), ALPHA.bool(), torch.empty((2, 3), device="meta"),
                                          ALPHA.double().requires_grad_(True)])
    pools.update({name: pool for name, (_, pool) in extra.items()})
    return Spec(lambda **a: function(**a), valid, pools, check, adapt=_follow_problem if alpha else Spec.adapt)


def _kinds(options) -> st.SearchStrategy:
    return st.sampled_from(OPTIONS + list(options))


SPECS = {
    # ---------------------------------------------------------------- causal: data
    "causal.Language": Spec(
        lambda **a: causal.Language(**a),
        lambda: {"embeddings": LANG.embeddings, "start": LANG.start, "transition": LANG.transition},
        {"embeddings": _arrays(LANG.embeddings), "start": _arrays(LANG.start), "transition": _arrays(LANG.transition)}),
    "causal.Language.sample": Spec(
        lambda **a: LANG.sample(**a), lambda: {"n": 2, "T": 3, "seed": 0},
        {"n": st.sampled_from(INTEGERS), "T": st.sampled_from(INTEGERS), "seed": st.sampled_from(SEEDS)}),
    "causal.synthetic_language": Spec(
        lambda **a: causal.synthetic_language(**a), lambda: {"V": 4, "d": 3, "seed": 0, "successors": 2},
        {"V": st.sampled_from(INTEGERS), "d": st.sampled_from(INTEGERS), "seed": st.sampled_from(SEEDS),
         "successors": st.sampled_from(INTEGERS)}),
    "causal.next_token_problems": Spec(
        lambda **a: causal.next_token_problems(**a),
        lambda: {"n": 2, "T": 3, "d": 3, "V": 4, "successors": 2, "seeds": [0, 1]},
        {"n": st.sampled_from(INTEGERS), "T": st.sampled_from(INTEGERS), "d": st.sampled_from(INTEGERS),
         "V": st.sampled_from(INTEGERS), "successors": st.sampled_from(INTEGERS),
         "seeds": st.sampled_from(SEEDS + [[], range(3), "12", np.array([[1]]), [0, -1], [0, "1"]])}),
    "causal.next_token_problem": Spec(
        lambda **a: causal.next_token_problem(**a), lambda: {"X": P.X}, {"X": _arrays(P.X)}),
    "causal.random_problem": Spec(
        lambda **a: causal.random_problem(**a), lambda: {"n": 2, "T": 3, "d": 3, "seed": 0, "batch": None,
                                                         "causal": True},
        {"n": st.sampled_from(INTEGERS), "T": st.sampled_from(INTEGERS), "d": st.sampled_from(INTEGERS),
         "seed": st.sampled_from(SEEDS), "batch": st.sampled_from(INTEGERS), "causal": st.sampled_from(FLAGS)}),
    "causal.SequenceProblem": Spec(
        lambda **a: causal.SequenceProblem(**a), lambda: {"X": P.X, "V": P.V, "causal": True, "device": None},
        {"X": _arrays(P.X), "V": _arrays(P.V), "causal": st.sampled_from(FLAGS),
         "device": st.sampled_from(["cuda", "meta", "gpu", 3, "cpu", torch.device("cpu"), True])}),
    "causal.SequenceProblem.__getitem__": Spec(
        lambda **a: a["problem"][a["index"]], lambda: {"problem": PB, "index": 0},
        {"index": st.sampled_from([5, -5, (0, 0), (0, 1, 2), "a", 1.5, None, slice(0, 0), [0, 1], [0, 7],
                                   torch.tensor([True, False]), Ellipsis, (Ellipsis, 0)])}),
    # ---------------------------------------------------------------- causal: candidates and the model
    "causal.candidates": _problem_spec(causal.candidates),
    "causal.scores": _problem_spec(causal.scores, check=_no_nan_no_plus_inf),
    "causal.optimal_tokens": _problem_spec(causal.optimal_tokens),
    "causal.separation_mask": _problem_spec(causal.separation_mask, alpha=True),
    "causal.selects_optimal": _problem_spec(causal.selects_optimal, alpha=True),
    "causal.logits": _problem_spec(causal.logits, W_arg=True, check=_no_nan_no_plus_inf),
    "causal.attention": _problem_spec(causal.attention, W_arg=True),
    "causal.outputs": _problem_spec(causal.outputs, W_arg=True),
    "causal.loss": _problem_spec(causal.loss, W_arg=True, loss=("logistic", _kinds(("exponential",)))),
    "causal.weight_gradient": _problem_spec(causal.weight_gradient, W_arg=True, check=_gradient_ok,
                                            loss=("logistic", _kinds(("exponential",)))),
    "causal.loss_gradient": _problem_spec(causal.loss_gradient, W_arg=True,
                                          loss=("logistic", _kinds(("exponential",)))),
    "causal.gd": _problem_spec(
        causal.gd, steps=(3, st.sampled_from(INTEGERS)), lr=(0.1, st.sampled_from(NUMBERS)),
        normalized=(True, st.sampled_from(FLAGS)), init=(None, st.one_of(_arrays(W), _kinds(("zeros", "uniform")))),
        seed=(0, st.sampled_from(SEEDS)), record_every=(1, st.sampled_from(INTEGERS)),
        loss=("logistic", _kinds(("exponential",)))),
    # ---------------------------------------------------------------- causal: the Att-SVM
    "causal.margins": _problem_spec(causal.margins, W_arg=True, alpha=True,
                                    check=lambda r: not np.isinf(r).any()),  # NaN off the constraints
    "causal.violations": _problem_spec(causal.violations, W_arg=True, alpha=True),
    "causal.total_slack": _problem_spec(causal.total_slack, W_arg=True, alpha=True),
    "causal.combine": Spec(
        lambda **a: causal.combine(**a), lambda: {"problem": P, "lam": LAM, "alpha": None},
        {"problem": _problems(P), "lam": _arrays(LAM), "alpha": st.sampled_from([ALPHA + 9, "abc", ALPHA[None]])},
        adapt=_follow_problem),
    "causal.att_svm": _problem_spec(
        causal.att_svm, alpha=True, C=(None, st.sampled_from(NUMBERS)),
        objective=("squared", _kinds(("norm",))), slack=("constraint", _kinds(("token",))),
        return_multipliers=(False, st.sampled_from(FLAGS))),
    "causal.feasible": _problem_spec(causal.feasible, alpha=True),
    "causal.penalty_threshold": _problem_spec(causal.penalty_threshold, alpha=True,
                                              slack=("constraint", _kinds(("token",)))),
    "causal.preference_cycle": _problem_spec(causal.preference_cycle, alpha=True,
                                             check=lambda r: r is None or isinstance(r, list)),
    "causal.conflicts": _problem_spec(causal.conflicts, alpha=True),
    "causal.max_positive_margins": _problem_spec(causal.max_positive_margins, alpha=True,
                                                 return_W=(True, st.sampled_from(FLAGS))),
    # ---------------------------------------------------------------- svm: the SVMs of a user's own rows
    "svm.soft_margin_svm": Spec(
        lambda **a: svm.soft_margin_svm(**a),
        lambda: {"rows": ROWS, "C": 1.0, "objective": "squared", "groups": None, "return_multipliers": True},
        {"rows": st.one_of(_arrays(ROWS), _pairs()), "C": st.sampled_from(NUMBERS),
         "objective": _kinds(svm.OBJECTIVES), "groups": _groups(), "return_multipliers": st.sampled_from(FLAGS)}),
    "svm.penalty_threshold": Spec(
        lambda **a: svm.penalty_threshold(**a), lambda: {"rows": ROWS, "groups": None},
        {"rows": st.one_of(_arrays(ROWS), _pairs()), "groups": _groups()}),
    # ---------------------------------------------------------------- tensor: vec, mat, Kronecker
    "tensor.vec": Spec(lambda **a: tensor.vec(**a), lambda: {"X": W}, {"X": _arrays(W)}),
    "tensor.mat": Spec(lambda **a: tensor.mat(**a), lambda: {"x": X0, "rows": None},
                       {"x": _arrays(X0), "rows": st.sampled_from(INTEGERS + [3, 4])}),
    "tensor.kron": Spec(lambda **a: tensor.kron(**a), lambda: {"A1": W, "A2": W[:2]},
                        {"A1": _arrays(W), "A2": _arrays(W[:2])}),
    "tensor.kron_logits": Spec(lambda **a: tensor.kron_logits(**a), lambda: {"A1": W, "A2": W[:2], "X": W},
                               {"A1": _arrays(W), "A2": _arrays(W[:2]), "X": _arrays(W)}),
    "tensor.row_block": Spec(lambda **a: tensor.row_block(**a), lambda: {"A1": W, "A2": W[:2], "j0": 1},
                             {"A1": _arrays(W), "A2": _arrays(W[:2]), "j0": st.sampled_from(INTEGERS + [3, -1])}),
    # ---------------------------------------------------------------- tensor: paper C's functions
    "tensor.u": Spec(lambda **a: tensor.u(**a), lambda: {"Aj": INST.Aj, "x": X0},
                     {"Aj": _arrays(INST.Aj), "x": _arrays(X0)}),
    "tensor.alpha": Spec(lambda **a: tensor.alpha(**a), lambda: {"Aj": INST.Aj, "x": X0},
                         {"Aj": _arrays(INST.Aj), "x": _arrays(X0)}),
    "tensor.f": Spec(lambda **a: tensor.f(**a), lambda: {"Aj": INST.Aj, "x": X0},
                     {"Aj": _arrays(INST.Aj), "x": _arrays(X0)}),
    "tensor.h": Spec(lambda **a: tensor.h(**a), lambda: {"A3": W, "Y": W[:, :2], "i0": 1},
                     {"A3": _arrays(W), "Y": _arrays(W[:, :2]), "i0": st.sampled_from(INTEGERS + [2, -1])}),
    "tensor.attention_row": Spec(lambda **a: tensor.attention_row(**a),
                                 lambda: {"Aj": INST.Aj, "x": X0, "attention": "softmax"},
                                 {"Aj": _arrays(INST.Aj), "x": _arrays(X0),
                                  "attention": _kinds(tensor.ATTENTIONS)}),
    "tensor.paper_gradient": Spec(lambda **a: tensor.paper_gradient(**a),
                                  lambda: {"Aj": INST.Aj, "x": X0, "h": INST.h, "b": INST.b},
                                  {"Aj": _arrays(INST.Aj), "x": _arrays(X0), "h": _arrays(INST.h),
                                   "b": _arrays(INST.b)}),
    "tensor.log10_bound": Spec(lambda **a: tensor.log10_bound(**a), lambda: {"T": 5, "R": 4.0},
                               {"T": st.sampled_from(INTEGERS + NUMBERS), "R": st.sampled_from(NUMBERS + [5, 1e154])}),
    "tensor.lipschitz_bound": Spec(
        lambda **a: tensor.lipschitz_bound(**a),
        lambda: {"Aj": INST.Aj, "h": INST.h, "b": INST.b, "loss": "logistic", "attention": "softmax"},
        {"Aj": _arrays(INST.Aj), "h": _arrays(INST.h), "b": _arrays(INST.b), "loss": _kinds(tensor.LOSSES),
         "attention": _kinds(tensor.ATTENTIONS)}),
    # ---------------------------------------------------------------- tensor: instances, the ball, estimates
    "tensor.random_instance": Spec(
        lambda **a: tensor.random_instance(**a),
        lambda: {"T": 3, "d": 2, "R": 4.0, "seed": 0, "batch": None, "h_norm": None},
        {"T": st.sampled_from(INTEGERS), "d": st.sampled_from(INTEGERS), "R": st.sampled_from(NUMBERS),
         "seed": st.sampled_from(SEEDS), "batch": st.sampled_from(INTEGERS), "h_norm": st.sampled_from(NUMBERS)}),
    "tensor.sample_ball": Spec(
        lambda **a: tensor.sample_ball(**a), lambda: {"Aj": INST.Aj, "R": 4.0, "count": 3, "seed": 0},
        {"Aj": _arrays(INST.Aj), "R": st.sampled_from(NUMBERS), "count": st.sampled_from(INTEGERS),
         "seed": st.sampled_from(SEEDS)}),
    "tensor.into_ball": Spec(
        lambda **a: tensor.into_ball(**a), lambda: {"Aj": INST.Aj, "x": X0 * 3, "R": 4.0},
        {"Aj": _arrays(INST.Aj), "x": _arrays(X0), "R": st.sampled_from(NUMBERS)}),
    "tensor.ratios": Spec(
        lambda **a: tensor.ratios(**a), lambda: {"function": lambda z: z ** 2, "x1": X0, "x2": X0 * 0.5},
        {"function": _functions(), "x1": _arrays(X0), "x2": _arrays(X0 * 0.5)}),
    "tensor.hessian_norm": Spec(
        lambda **a: tensor.hessian_norm(**a),
        lambda: {"function": lambda z: (z ** 4).sum(-1), "x": X0, "iterations": 3, "seed": 0},
        {"function": _functions(), "x": _arrays(X0), "iterations": st.sampled_from(INTEGERS),
         "seed": st.sampled_from(SEEDS)}),
    "tensor.empirical_lipschitz": Spec(
        lambda **a: tensor.empirical_lipschitz(**a),
        lambda: {"instance": INST, "R": 4.0, "loss": "logistic", "attention": "softmax", "points": 2,
                 "iterations": 2, "seed": 0, "close": 1e-4},
        {"instance": _instances(), "R": st.sampled_from(NUMBERS), "loss": _kinds(tensor.LOSSES),
         "attention": _kinds(tensor.ATTENTIONS), "points": st.sampled_from(INTEGERS),
         "iterations": st.sampled_from(INTEGERS), "seed": st.sampled_from(SEEDS), "close": st.sampled_from(NUMBERS)}),
    "tensor.max_hessian_norm": Spec(
        lambda **a: tensor.max_hessian_norm(**a),
        lambda: {"instance": INST, "R": 4.0, "loss": "logistic", "attention": "softmax", "starts": 2, "steps": 3,
                 "lr": 0.05, "seed": 0, "origin": True},
        {"instance": _instances(), "R": st.sampled_from(NUMBERS), "loss": _kinds(tensor.LOSSES),
         "attention": _kinds(tensor.ATTENTIONS), "starts": st.sampled_from(INTEGERS),
         "steps": st.sampled_from(INTEGERS), "lr": st.sampled_from(NUMBERS), "seed": st.sampled_from(SEEDS),
         "origin": st.sampled_from(FLAGS)}),
    "tensor.descend": Spec(
        lambda **a: tensor.descend(**a),
        lambda: {"instance": INST, "x0": X0[0], "lr": 0.1, "steps": 3, "loss": "logistic", "attention": "softmax"},
        {"instance": _instances(), "x0": _arrays(X0[0]), "lr": st.sampled_from(NUMBERS),
         "steps": st.sampled_from(INTEGERS), "loss": _kinds(tensor.LOSSES), "attention": _kinds(tensor.ATTENTIONS)}),
    "tensor.gap_study": Spec(
        lambda **a: tensor.gap_study(**a),
        lambda: {"sizes": [2], "radii": [4.0], "d": 2, "batch": 1, "loss": "paper", "points": 2, "iterations": 1,
                 "starts": 1, "steps": 1},
        {"sizes": st.sampled_from(LISTS), "radii": st.sampled_from(LISTS), "d": st.sampled_from(INTEGERS),
         "batch": st.sampled_from(INTEGERS), "loss": _kinds(tensor.LOSSES), "points": st.sampled_from(INTEGERS),
         "iterations": st.sampled_from(INTEGERS), "starts": st.sampled_from(INTEGERS),
         "steps": st.sampled_from(INTEGERS)}),
    "tensor.attention_study": Spec(
        lambda **a: tensor.attention_study(**a),
        lambda: {"radii": [1.0], "loss": "logistic", "T": 2, "d": 2, "batch": 1, "h_norm": None, "starts": 1,
                 "steps": 1},
        {"radii": st.sampled_from(LISTS), "loss": _kinds(tensor.LOSSES), "T": st.sampled_from(INTEGERS),
         "d": st.sampled_from(INTEGERS), "batch": st.sampled_from(INTEGERS), "h_norm": st.sampled_from(NUMBERS),
         "starts": st.sampled_from(INTEGERS), "steps": st.sampled_from(INTEGERS)}),
}
for _name in ("loss", "gradient", "hessian"):
    SPECS[f"tensor.{_name}"] = Spec(
        (lambda function: lambda **a: function(**a))(getattr(tensor, _name)),
        lambda: {"Aj": INST.Aj, "x": X0, "h": INST.h, "b": INST.b, "loss": "logistic", "attention": "softmax"},
        {"Aj": _arrays(INST.Aj), "x": _arrays(X0), "h": _arrays(INST.h), "b": _arrays(INST.b),
         "loss": _kinds(tensor.LOSSES), "attention": _kinds(tensor.ATTENTIONS)})


def test_every_covered_function_has_a_property():
    assert {name for name in SPECS if name.count(".") == 1 and name[name.index(".") + 1].islower()} == COVERED


@pytest.mark.parametrize("function", sorted(SPECS))
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(data=st.data())
def test_bad_or_extreme_argument_gives_a_valid_result_or_an_error_naming_it(function, data):
    spec = SPECS[function]
    argument = data.draw(st.sampled_from(sorted(spec.pools)), label="argument")
    value = data.draw(spec.pools[argument], label="value")
    arguments = spec.adapt(dict(spec.valid(), **{argument: value}), argument)
    try:
        result = spec.call(**arguments)
    except svm.InfeasibleSVM:
        return  # a valid answer: no W separates the selection
    except CLEAR as err:
        name = spec.names.get(argument, argument)
        assert _names(str(err), name), f"{function}({argument}={value!r}): {type(err).__name__} without {name!r}: {err}"
        return
    except IndexError as err:
        assert function.endswith("__getitem__"), f"{function}({argument}={value!r}): IndexError {err}"
        return
    assert spec.check(result), f"{function}({argument}={value!r}) returned an invalid result: {result!r}"
