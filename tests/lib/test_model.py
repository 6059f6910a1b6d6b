"""attnsvm.model: logits x_it^T W z_i, softmax attention, outputs and losses, against straightforward formulas."""

import math

import mpmath
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsvm import data, model


def _problem_and_W(batch=None, seed=0, scale=1.0):
    problem = data.random_problem(3, 4, 5, seed=seed, batch=batch)
    gen = torch.Generator().manual_seed(seed + 100)
    lead = () if batch is None else (batch,)
    W = scale * torch.randn(lead + (5, 5), generator=gen, dtype=torch.float64)
    return problem, W


def _loop_logits(X, W, Z):
    n, T, _ = X.shape
    out = np.empty((n, T))
    for i in range(n):
        for t in range(T):
            out[i, t] = X[i, t] @ W @ Z[i]
    return out


def test_logits_equal_explicit_loop():
    problem, W = _problem_and_W()
    expected = _loop_logits(problem.X.numpy(), W.numpy(), problem.Z.numpy())
    np.testing.assert_allclose(model.logits(problem, W).numpy(), expected, rtol=1e-13, atol=1e-14)


def test_logits_batched_equal_per_instance_loop():
    problem, W = _problem_and_W(batch=4)
    got = model.logits(problem, W).numpy()
    assert got.shape == (4, 3, 4)
    for b in range(4):
        expected = _loop_logits(problem.X[b].numpy(), W[b].numpy(), problem.Z[b].numpy())
        np.testing.assert_allclose(got[b], expected, rtol=1e-13, atol=1e-14)


def test_logits_single_W_broadcasts_over_batch():
    problem, W = _problem_and_W(batch=4)
    shared = W[0]
    got = model.logits(problem, shared).numpy()
    for b in range(4):
        expected = _loop_logits(problem.X[b].numpy(), shared.numpy(), problem.Z[b].numpy())
        np.testing.assert_allclose(got[b], expected, rtol=1e-13, atol=1e-14)


def test_logits_accept_numpy_W():
    problem, W = _problem_and_W()
    assert torch.equal(model.logits(problem, W.numpy()), model.logits(problem, W))


def test_logits_transpose_convention():
    """x^T W z, not z^T W x: with a non-symmetric W the two differ."""
    problem = data.Problem([[[1.0, 0.0], [0.0, 1.0]]], [1.0], [[0.0, 1.0]], [1.0, 0.0])
    W = np.array([[0.0, 2.0], [0.0, 0.0]])  # x^T W z = 2 x_1 z_2
    np.testing.assert_array_equal(model.logits(problem, W).numpy(), [[2.0, 0.0]])


@pytest.mark.parametrize("batch", [None, 3])
def test_attention_is_a_probability_distribution_over_tokens(batch):
    problem, W = _problem_and_W(batch=batch, scale=3.0)
    s = model.attention(problem, W)
    assert s.shape == problem.X.shape[:-1]
    assert (s > 0).all()
    torch.testing.assert_close(s.sum(-1), torch.ones_like(s.sum(-1)), rtol=0, atol=1e-15)
    logits = model.logits(problem, W).numpy()
    expected = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    np.testing.assert_allclose(s.numpy(), expected, rtol=1e-12)


def test_token_values_are_v_dot_x():
    problem, _ = _problem_and_W()
    X, v = problem.X.numpy(), problem.v.numpy()
    expected = np.array([[X[i, t] @ v for t in range(4)] for i in range(3)])
    np.testing.assert_allclose(model.token_values(problem).numpy(), expected, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("batch", [None, 3])
def test_outputs_equal_attention_weighted_head(batch):
    problem, W = _problem_and_W(batch=batch)
    logits = model.logits(problem, W).numpy()
    s = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    u = np.einsum("...ntd,...d->...nt", problem.X.numpy(), problem.v.numpy())
    expected = (s * u).sum(-1)
    np.testing.assert_allclose(model.outputs(problem, W).numpy(), expected, rtol=1e-12, atol=1e-15)


LOSS_FORMULAS = {
    "logistic": lambda m: np.log1p(np.exp(-m)),
    "exponential": lambda m: np.exp(-m),
    "linear": lambda m: -m,
}


@pytest.mark.parametrize("kind", sorted(LOSS_FORMULAS))
@pytest.mark.parametrize("batch", [None, 3])
def test_loss_equals_formula(kind, batch):
    problem, W = _problem_and_W(batch=batch)
    f = model.outputs(problem, W).numpy()
    margin = problem.Y.numpy() * f
    expected = LOSS_FORMULAS[kind](margin).mean(-1)
    got = model.loss(problem, W, kind)
    assert got.shape == problem.batch_shape
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-13, atol=1e-15)


def test_default_loss_is_logistic():
    problem, W = _problem_and_W(batch=2)
    assert torch.equal(model.loss(problem, W), model.loss(problem, W, "logistic"))


def test_loss_at_zero_W_uses_the_mean_token():
    """At W = 0 attention is uniform: f_i = mean_t v^T x_it."""
    problem, _ = _problem_and_W()
    f = problem.X.numpy().mean(1) @ problem.v.numpy()
    np.testing.assert_allclose(model.outputs(problem, np.zeros((5, 5))).numpy(), f, rtol=1e-13, atol=1e-15)
    expected = np.log1p(np.exp(-problem.Y.numpy() * f)).mean()
    np.testing.assert_allclose(float(model.loss(problem, np.zeros((5, 5)))), expected, rtol=1e-13)


def test_softmax_tends_to_hardmax_as_W_scales_up():
    problem, W = _problem_and_W(batch=4, seed=5)
    logits = model.logits(problem, W).numpy()
    top = logits.argmax(-1)
    hard = np.zeros_like(logits)
    np.put_along_axis(hard, top[..., None], 1.0, axis=-1)
    ordered = np.sort(logits, axis=-1)
    gap = (ordered[..., -1] - ordered[..., -2]).min()
    assert gap > 1e-3  # generic data: the argmax is unique
    errors = []
    for c in [1.0, 10.0, 100.0, 1e3, 1e4, 1e6]:
        s = model.attention(problem, c * W).numpy()
        assert np.isfinite(s).all()
        error = np.abs(s - hard).max()
        # 1 - s_top = sum_{t != top} s_t <= (T - 1) exp(-c gap)
        assert error <= (problem.T - 1) * math.exp(-c * gap) + 1e-15
        errors.append(error)
    assert all(b <= a for a, b in zip(errors, errors[1:]))
    assert errors[0] > 1e-3 and errors[-1] == 0.0


# ------------------------------------------------------------------ Loss(value, derivative, excess)

MP_LOSSES = {
    "logistic": lambda m: mpmath.log1p(mpmath.exp(-m)),
    "exponential": lambda m: mpmath.exp(-m),
    "linear": lambda m: -m,
}


def _mp_excess(kind, x, delta):
    """l(x - delta) - l(x) in 60-digit arithmetic, from the float64 inputs taken as exact."""
    with mpmath.workdps(60):
        x, delta = mpmath.mpf(float(x)), mpmath.mpf(float(delta))
        return float(MP_LOSSES[kind](x - delta) - MP_LOSSES[kind](x))


def test_losses_are_named_tuples_of_value_derivative_log_slope_excess():
    for kind, entry in model.LOSSES.items():
        assert isinstance(entry, model.Loss) and entry._fields == ("value", "derivative", "log_slope", "excess")

        x = torch.linspace(-5, 5, 11, dtype=torch.float64, requires_grad=True)
        (grad,) = torch.autograd.grad(entry.value(x).sum(), x)
        torch.testing.assert_close(entry.derivative(x.detach()), grad, rtol=1e-14, atol=1e-15)
        assert (entry.derivative(x.detach()) < 0).all()  # decreasing losses

@pytest.mark.parametrize("kind", ["logistic", "exponential", "linear"])
def test_log_slope_is_the_log_of_minus_the_derivative_even_where_it_underflows(kind):
    entry = model.LOSSES[kind]
    x = torch.linspace(-30, 30, 61, dtype=torch.float64)
    torch.testing.assert_close(entry.log_slope(x), torch.log(-entry.derivative(x)), rtol=1e-12, atol=1e-12)
    far = torch.tensor([800.0, 5000.0], dtype=torch.float64)  # -l'(x) underflows to 0 for the first two losses
    expected = {"logistic": -far, "exponential": -far, "linear": torch.zeros(2, dtype=torch.float64)}[kind]
    torch.testing.assert_close(entry.log_slope(far), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind", sorted(MP_LOSSES))
def test_loss_excess_equals_the_difference_for_moderate_delta(kind):
    x = torch.linspace(-15, 15, 31, dtype=torch.float64)[:, None]
    delta = torch.tensor([-2.0, -0.3, 0.01, 0.5, 3.0], dtype=torch.float64)
    entry = model.LOSSES[kind]
    naive = entry.value(x - delta) - entry.value(x)
    excess = entry.excess(*torch.broadcast_tensors(x, delta))
    # the naive difference is accurate to the round-off of the two values it subtracts
    scale = entry.value(x - delta).abs() + entry.value(x).abs()
    assert ((excess - naive).abs() <= 8 * torch.finfo(torch.float64).eps * scale).all()


@pytest.mark.parametrize("kind", sorted(MP_LOSSES))
def test_loss_excess_broadcasts_like_the_difference(kind):
    """excess(x, delta) has the broadcast shape of l(x - delta) - l(x)."""
    x = torch.tensor([[-1.0], [0.0], [2.0]], dtype=torch.float64)
    delta = torch.tensor([-2.0, -0.3, 0.01, 0.5, 3.0], dtype=torch.float64)
    entry = model.LOSSES[kind]
    assert entry.excess(x, delta).shape == (entry.value(x - delta) - entry.value(x)).shape == (3, 5)


def test_logistic_loss_value_is_accurate_for_very_negative_margins():
    """log(1 + exp(-x)) is accurate for very negative margins too (torch's softplus would drop exp(x) past -20)."""
    x = torch.tensor([-20.01, -25.0, -30.0], dtype=torch.float64)
    got = model.LOSSES["logistic"].value(x).numpy()
    with mpmath.workdps(40):
        reference = [float(MP_LOSSES["logistic"](mpmath.mpf(float(value)))) for value in x]
    np.testing.assert_allclose(got, reference, rtol=1e-14, atol=0)


@settings(max_examples=60, derandomize=True, deadline=None)
@given(kind=st.sampled_from(sorted(MP_LOSSES)), x=st.floats(-30, 30),
       exponent=st.floats(-25, 0.5), sign=st.sampled_from([-1.0, 1.0]))
def test_loss_excess_is_accurate_against_mpmath(kind, x, exponent, sign):
    delta = sign * 10.0**exponent
    got = float(model.LOSSES[kind].excess(torch.tensor(x, dtype=torch.float64), torch.tensor(delta, dtype=torch.float64)))
    reference = _mp_excess(kind, x, delta)
    assert abs(got - reference) <= 1e-12 * abs(reference)


@pytest.mark.parametrize("kind", sorted(MP_LOSSES))
@pytest.mark.parametrize("x", [-3.0, 0.0, 2.0, 25.0])
def test_loss_excess_resolves_a_tiny_delta_where_the_difference_is_zero(kind, x):
    x_t, delta = torch.tensor(x, dtype=torch.float64), torch.tensor(1e-20, dtype=torch.float64)
    entry = model.LOSSES[kind]
    if kind != "linear" or x != 0.0:  # -(0 - 1e-20) - 0 is exact
        assert entry.value(x_t - delta) - entry.value(x_t) == 0  # x - 1e-20 rounds to x
    got = float(entry.excess(x_t, delta))
    reference = _mp_excess(kind, x, 1e-20)
    assert reference > 0 and abs(got - reference) <= 1e-12 * reference
