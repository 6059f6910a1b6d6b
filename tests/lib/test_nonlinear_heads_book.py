"""Chapter 5's helpers: the lambda-head's water level and its batched values of lam, the E5.2 sweep, the token
pairs and the span S_fin of the lemma, and the comparison of paper A's step with exact steps (`norms`, `moved`,
`token_fates`)."""

import dataclasses

import numpy as np
import pytest
import torch

from attnsvm import data, heads, svm, train
from attnsvm.experiments import relu_head as mt


def test_lambda_threshold_is_the_water_level():
    u = torch.randn(5, 2, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    for lam in (0.05, 0.4, 3.0):
        theta = heads.lambda_threshold(u, lam)
        torch.testing.assert_close(torch.clamp(u - theta[..., None], min=0).sum(-1),
                                   torch.full((5, 2), 2 * lam, dtype=torch.float64), rtol=0, atol=1e-12)
        s = heads.lambda_optimum(u, lam)
        assert torch.equal(s > 0, u > theta[..., None])
    u = torch.tensor([1.0, 0.5, 0.0], dtype=torch.float64)  # Exercise 5.2: theta = 0.8, 0.25, -1/6
    for lam, theta in ((0.1, 0.8), (0.5, 0.25), (1.0, -1 / 6)):
        assert abs(heads.lambda_threshold(u, lam).item() - theta) < 1e-15
    with pytest.raises(ValueError, match="lam"):
        heads.lambda_threshold(u, 0.0)


def test_lambda_head_takes_one_lam_per_problem():
    gen = torch.Generator().manual_seed(1)
    v = torch.randn(4, 5, generator=gen, dtype=torch.float64)
    a = torch.randn(3, 4, 2, 5, generator=gen, dtype=torch.float64)  # (L, batch, n, d)
    lams = [0.0, 0.3, 2.0]
    batched = heads.Lambda(v.expand(3, 4, 5), torch.tensor(lams, dtype=torch.float64)[:, None])
    for k, lam in enumerate(lams):
        one = heads.Lambda(v, lam)
        torch.testing.assert_close(batched.value(a)[k], one.value(a[k]), rtol=0, atol=0)
        torch.testing.assert_close(batched.gradient(a)[k], one.gradient(a[k]), rtol=0, atol=0)
    with pytest.raises(ValueError, match="lam"):
        heads.Lambda(v, torch.tensor([0.5, -1.0]))
    with pytest.raises(ValueError, match="lam"):
        heads.Lambda(v, -0.5)


def test_lambda_sweep_is_one_run_per_lam_trained_together():
    lams = [0.0, 0.5, 2.0]
    sweep = mt.lambda_sweep(lams, batch=3, seed=4, steps=60)
    assert list(sweep) == lams
    problem = data.orthonormal_problem(6, seed=4, batch=3)
    u = (problem.X @ problem.v[:, None, :, None])[..., 0]
    for lam, runs in sweep.items():
        head = heads.Lambda(problem.v, lam) if lam else None
        alone = train.gd(problem, steps=60, lr=0.1, head=head, record_every=60)
        torch.testing.assert_close(runs.s, alone.probs[-1], rtol=0, atol=1e-13)
        torch.testing.assert_close(runs.optimum, heads.lambda_optimum(u, lam), rtol=0, atol=0)
        torch.testing.assert_close(runs.u, u, rtol=0, atol=0)
        assert torch.equal(runs.predicted, runs.optimum > 0) and torch.equal(runs.selected, runs.s >= 1e-3)
    torch.testing.assert_close(sweep[0.0].theta, u.amax(-1), rtol=0, atol=0)  # lam = 0: the top value
    with pytest.raises(ValueError, match="distinct"):
        mt.lambda_sweep([0.5, 0.5], batch=2, steps=5)
    with pytest.raises(ValueError, match=r"lams\[1\]"):
        mt.lambda_sweep([0.5, -1.0], batch=2, steps=5)


def test_lambda_sweep_gets_the_selected_set_of_water_filling():
    sweep = mt.lambda_sweep([0.0, 1.0], batch=20, seed=0)
    for runs in sweep.values():
        assert (runs.selected == runs.predicted).all(-1).double().mean() >= 0.9
        assert (runs.s - runs.optimum).abs().max() < 0.05


@pytest.fixture(scope="module")
def one_run():
    runs = mt.train_runs(6, mt.stored_seeds(6)[:1])
    X, Z, s = runs.problem.X[0].numpy(), runs.problem.Z[0].numpy(), runs.trajectory.probs[-1, 0].numpy()
    return runs, X, Z, s, svm.general_svm(X, Z, s)


def test_token_pairs_give_the_logit_differences_and_the_projection_onto_S_fin(one_run):
    runs, X, Z, s, general = one_run
    pairs = mt.token_pairs(X, Z, general.relevant)
    O = general.relevant
    assert all(O[i, t] and O[i, tau] and t != tau for i, t, tau in pairs.inside)
    assert all(O[i, t] and not O[i, tau] for i, t, tau in pairs.apart)
    assert len(pairs.inside) == sum(k * (k - 1) for k in O.sum(1))
    W = np.random.default_rng(2).standard_normal((X.shape[2],) * 2)
    for i, t, tau in pairs.inside + pairs.apart:
        assert abs(np.sum(pairs.A[i, t, tau] * W) - (X[i, t] - X[i, tau]) @ W @ Z[i]) < 1e-12
    P = pairs.project(W)
    np.testing.assert_allclose(pairs.project(P), P, atol=1e-12)  # a projection
    np.testing.assert_allclose(np.sum(pairs.project(W) * (W - P)), 0, atol=1e-12)  # orthogonal
    for pair in pairs.inside:  # Pi W solves the same equations as W
        assert abs(np.sum(pairs.A[pair] * (W - P))) < 1e-12
    np.testing.assert_allclose(pairs.project(runs.trajectory.W[-1, 0].numpy()), general.W_fin, atol=1e-10)
    assert np.abs(pairs.project(general.W_mm)).max() < 1e-10  # W_mm is orthogonal to S_fin
    with pytest.raises(ValueError, match="relevant"):
        mt.token_pairs(X, Z, general.relevant[:, :2])


def test_norms_and_moved(one_run):
    runs = one_run[0]
    W = runs.trajectory.W
    torch.testing.assert_close(mt.norms(runs), W.norm(dim=(-2, -1)), rtol=0, atol=0)
    torch.testing.assert_close(mt.moved(runs, back=5), (W[-1] - W[-6]).norm(dim=(-2, -1)), rtol=0, atol=0)
    assert (mt.moved(runs) <= 10 + 1e-12).all()  # 100 steps of length at most 0.1
    with pytest.raises(ValueError, match="back"):
        mt.moved(runs, back=len(W))


def _with_probs(runs, probs):
    return dataclasses.replace(runs, trajectory=dataclasses.replace(runs.trajectory, probs=probs), svms={})


def test_token_fates_follow_each_token():
    runs = mt.train_runs(4, mt.stored_seeds(4)[:2])
    records = len(runs.trajectory.steps)
    paper = torch.full((records, 2, 3, 4), 0.25, dtype=torch.float64)
    exact = paper.clone()
    paper[-1, 0, 1] = torch.tensor([0.5, 0.3, 0.2 - 1e-8, 1e-8])  # tokens 0, 1, 2 kept
    exact[-10:, 0, 1, 2] = torch.logspace(-1, -5, 10, dtype=torch.float64)  # token 2 leaving, falling, in transit
    exact[-1, 0, 1, 1] = 1e-4  # token 1 leaving too, not falling throughout
    exact[3, 1, 0, 3], exact[5, 1, 0, 3] = 1e-15, 1e-9  # run 1: a token revived
    fates = mt.token_fates(_with_probs(runs, paper), _with_probs(runs, exact))
    assert fates.leaving.sum() == 2 and fates.leaving[0, 1, 1] and fates.leaving[0, 1, 2]
    assert fates.falling.sum() == 1 and fates.falling[0, 1, 2]
    assert fates.left.tolist() == [True, False] and fates.in_transit.tolist() == [True, False]
    assert fates.revived.tolist() == [False, True]
    assert sorted(fates.kept_weight.tolist()) == pytest.approx([0.2 - 1e-8, 0.3])
    with pytest.raises(ValueError, match="same runs"):
        mt.token_fates(runs, mt.select(runs, [True, False]))
