"""attnsvm.tensor's studies for chapter 7 (E7.3 gap_study, E7.4 attention_study): each entry equals the
library call it stands for, the brackets are ordered, and bad arguments are named."""

import numpy as np
import pytest
import torch

import attnsvm.tensor as tensor


def test_gap_study_entries_are_the_calls_they_stand_for():
    sizes, radii = [2, 4], [4.0, 5.0]
    study = tensor.gap_study(sizes, radii, batch=3, points=4, iterations=3, starts=2, steps=3)
    assert study.sampled.shape == study.found.shape == study.ours.shape == (2, 2, 3)
    assert study.log10_M.shape == (2, 2)
    i, k, T, R = 1, 0, 4, 4.0  # T = 4, R = 4
    instance = tensor.random_instance(T, 3, R, seed=T, batch=3)
    estimate = tensor.empirical_lipschitz(instance, R, loss="paper", points=4, iterations=3, seed=int(R))
    found = tensor.max_hessian_norm(instance, R, loss="paper", starts=2, steps=3, seed=int(R)).value
    assert torch.equal(study.sampled[i, k], torch.maximum(estimate.pairs, estimate.power))
    assert torch.equal(study.found[i, k], found)
    assert torch.equal(study.ours[i, k], tensor.lipschitz_bound(*instance, loss="paper"))
    assert study.log10_M[i, k] == tensor.log10_bound(T, R)
    assert (study.sampled <= study.ours).all() and (study.found <= study.ours).all()


def test_attention_study_entries_and_linear_check():
    radii = [1.0, 3.0]
    result = tensor.attention_study(radii, "logistic", batch=4, h_norm=1.0, starts=2, steps=3)
    assert all(t.shape == (2, 4) for t in result)
    R = 3.0
    instance = tensor.random_instance(5, 3, R, seed=3, batch=4, h_norm=1.0)
    found = tensor.max_hessian_norm(instance, R, loss="logistic", starts=2, steps=3, seed=3).value
    assert torch.equal(result.found[1], found)
    assert torch.equal(result.ours[1], tensor.lipschitz_bound(*instance, loss="logistic"))
    linear = tensor.lipschitz_bound(*instance, loss="logistic", attention="linear")
    assert torch.equal(result.linear[1], linear)
    kw = dict(loss="logistic", attention="linear", starts=2, seed=3, origin=False)
    assert torch.equal(result.linear_found[1], tensor.max_hessian_norm(instance, R, steps=3, **kw).value)
    assert torch.equal(result.linear_start[1], tensor.max_hessian_norm(instance, R, steps=0, **kw).value)
    assert (result.linear_start <= result.linear * (1 + 1e-12)).all()
    assert (result.linear_found <= result.linear * (1 + 1e-12)).all()
    assert (result.found <= result.ours).all()


def test_attention_study_linear_constant_is_exact_for_squared_loss():
    result = tensor.attention_study([2.0], "squared", batch=3, starts=1, steps=1)
    instance = tensor.random_instance(5, 3, 2.0, seed=2, batch=3)
    Ah = (instance.h[:, None, :] @ instance.Aj)[:, 0]  # A_j0^T h
    torch.testing.assert_close(result.linear[0], 2 * Ah.norm(dim=-1) ** 2, rtol=1e-12, atol=0)


@pytest.mark.parametrize("call, match", [
    (lambda: tensor.gap_study([2], [3.0], batch=1), "R must be >= 4"),
    (lambda: tensor.gap_study([], [4.0]), "sizes must not be empty"),
    (lambda: tensor.gap_study([2.5], [4.0]), "sizes must be an integer"),
    (lambda: tensor.gap_study([2], "4"), "radii must be a list"),
    (lambda: tensor.attention_study([1.0], "hinge"), "loss"),
    (lambda: tensor.attention_study([-1.0], "logistic"), "radii must be a finite number > 0"),
])
def test_bad_arguments_are_named(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()


def test_gap_study_orders_brackets_like_the_chapter():
    """On a small grid the bracket is ordered and the gap to M is astronomically large."""
    study = tensor.gap_study([2], [4.0], batch=4, points=8, iterations=5, starts=4, steps=20)
    assert (study.sampled <= study.ours).all()
    assert np.all(study.log10_M - np.log10(study.ours.amax(-1).numpy()) > 90)
