"""train.gd(rule="official"): paper A's update (local_converge.ipynb) against a plain re-implementation of its loop.

Paper A's loop, per problem: autograd of the mean logistic loss through softmax (plus eps (||K||^2 + ||Q||^2) for
(K, Q)), every parameter's gradient divided by its norm + eps, eps = torch.finfo(torch.double).eps, then an SGD
step with lr 0.1. Its nn.Linear weights are the transposes of the book's: W = weight^T, K = key^T, Q = query^T.
"""

import numpy as np
import pytest
import torch

from attnsvm import data, model, theory, train

EPS = torch.finfo(torch.double).eps


def _paper_loop(problem, params, steps, lr=0.1):
    """One problem, written as paper A's notebook writes it (its model's forward, its loss, its update)."""
    X, Y, z, v = problem.X, problem.Y, problem.Z, problem.v
    if len(params) == 1:
        leaves = [params[0].T.clone().requires_grad_(True)]  # nn.Linear weight: W = weight^T
    else:
        leaves = [params[1].T.clone().requires_grad_(True), params[0].T.clone().requires_grad_(True)]  # query, key
    path = []
    for _ in range(steps + 1):
        if len(leaves) == 1:
            path.append(leaves[0].detach().T.clone())
            scores = z[:, None, :] @ (X @ leaves[0].T).transpose(-2, -1)  # z^T (X weight^T)^T
        else:
            query, key = leaves
            path.append(query.detach().T.mm(key.detach()).T.clone())  # the notebook's W = (query^T key)^T
            scores = (z[:, None, :] @ query.T) @ (X @ key.T).transpose(-2, -1)
        out = (torch.softmax(scores, dim=-1) @ X @ v).view(-1)
        loss = torch.log(1 + torch.exp(-Y * out)).mean()
        if len(leaves) == 2:
            loss = loss + EPS * (leaves[1].norm() ** 2 + leaves[0].norm() ** 2)
        grads = torch.autograd.grad(loss, leaves)
        with torch.no_grad():
            for p, g in zip(leaves, grads):
                p -= lr * g / (g.norm() + EPS)
    return torch.stack(path)


@pytest.mark.parametrize("param", ["W", "KQ"])
def test_official_rule_matches_paper_As_loop(param):
    """1500 steps on 3 small problems, through saturation and the stall. On W the two loops give the same iterates
    to 1e-10 of ||W|| (round-off: their orders of summation differ). On (K, Q) they agree to 1e-10 until softmax
    saturates (step ~100 here); from then on the ridge's gradient keeps the normalized steps lr long and the
    iterates hover, a motion that amplifies round-off, so the two loops stay within 1e-2 of ||W|| of each other,
    not closer (3e-3 measured)."""
    problem = data.random_problem(3, 4, 5, seed=3, batch=3)
    steps = 1500
    run = train.gd(problem, param=param, steps=steps, lr=0.1, init="uniform", seed=4, rule="official")
    params = (run.W[0],) if param == "W" else (run.K[0], run.Q[0])
    for b in range(3):
        reference = _paper_loop(problem[b], [p[b] for p in params], steps)
        error = ((run.W[:, b] - reference).flatten(1).abs().max(1).values / reference.norm(dim=(-2, -1)))
        early = error[:101].max()
        assert early < 1e-10, f"problem {b}: relative difference {early:.1e} in the first 100 steps"
        assert error.max() < (1e-10 if param == "W" else 1e-2), f"problem {b}: relative difference {error.max():.1e}"
    # the runs do reach the regime the rule is about: the probabilities off the selected token fall below 1e-12
    assert run.probs[-1].sort(-1).values[..., -2].max() < 1e-12


@pytest.mark.parametrize("engine", ["compiled", "torch"])
def test_official_rule_with_exact_gradients(engine):
    """rule="official", gradient="exact": paper A's step with the library's exact gradient (on W, the compiled loop
    runs it); until softmax saturates it is the official loop's, and it stalls at the same place."""
    problem = data.random_problem(3, 4, 5, seed=3, batch=3)
    official = train.gd(problem, steps=1500, lr=0.1, init="uniform", rule="official", record_every=100)
    exact = train.gd(problem, steps=1500, lr=0.1, init="uniform", rule="official", gradient="exact",
                     record_every=100, engine=engine)
    plain = train.gd(problem, steps=1500, lr=0.1, init="uniform", record_every=100)
    torch.testing.assert_close(exact.W[:4], official.W[:4], rtol=0, atol=1e-9)  # the first 300 steps
    size = {name: run.W.norm(dim=(-2, -1)) for name, run in [("official", official), ("exact", exact), ("plain", plain)]}
    assert ((size["exact"][-1] - size["official"][-1]).abs() < 0.01 * size["official"][-1]).all()
    assert theory.correlation(exact.W[-1], official.W[-1]).min() > 0.999
    for name in ["official", "exact"]:  # both stall: over the last 500 steps they grow < 1/5 of the plain run
        assert ((size[name][-1] - size[name][-6]) < 0.2 * (size["plain"][-1] - size["plain"][-6])).all()


def test_official_rule_stalls_where_the_exact_engine_keeps_moving():
    """E4.1 sizes (n=6, T=8, d=10), 3000 steps: paper A's W steps shrink below lr / 10 once the gradient is below eps
    and its (K, Q) iterates stop growing (the ridge holds them), while the exact engine's steps stay lr long."""
    problem = data.random_problem(6, 8, 10, seed=5, batch=4)
    kw = dict(steps=3000, lr=0.1, init="uniform", record_every=1000)
    for param in ["W", "KQ"]:
        official = train.gd(problem, param=param, rule="official", gradient="exact", **kw)
        exact = train.gd(problem, param=param, **kw)
        grow_official = official.W[-1].norm(dim=(-2, -1)) - official.W[-2].norm(dim=(-2, -1))
        grow_exact = exact.W[-1].norm(dim=(-2, -1)) - exact.W[-2].norm(dim=(-2, -1))
        assert (grow_official < 0.05 * grow_exact).all(), param
    parked = train.gd(problem, rule="official", **kw).W[-1]  # paper A's loop itself (autograd), on W
    official_step = train.gd(problem, steps=1, lr=0.1, init=parked, rule="official")
    step = (official_step.W[1] - parked).norm(dim=(-2, -1))
    assert (step < 0.01).all() and (step > 0).all()
    exact_step = train.gd(problem, steps=1, lr=0.1, init=parked)
    torch.testing.assert_close((exact_step.W[1] - exact_step.W[0]).norm(dim=(-2, -1)),
                               torch.full((4,), 0.1, dtype=torch.float64), rtol=1e-9, atol=0)


def test_ridge_adds_its_gradient_to_each_factor():
    """ridge > 0 (a large one, so that it matters): each step is -lr g / (||g|| + eps) with g the autograd
    gradient of L + ridge (||K||^2 + ||Q||^2), with the exact gradient of L as with autograd's."""
    problem = data.random_problem(3, 4, 5, seed=2, batch=2)
    ridge, eps = 0.03, 0.05
    for gradient in ["exact", "autograd"]:
        traj = train.gd(problem, param="KQ", steps=4, lr=0.1, init="uniform", eps=eps, ridge=ridge,
                        gradient=gradient)
        for k in range(4):
            K, Q = traj.K[k].clone().requires_grad_(True), traj.Q[k].clone().requires_grad_(True)
            risk = model.loss(problem, K @ Q.transpose(-2, -1)).sum() + ridge * ((K * K).sum() + (Q * Q).sum())
            grads = torch.autograd.grad(risk, [K, Q])
            for got, p, g in zip((traj.K[k + 1], traj.Q[k + 1]), (K, Q), grads):
                want = p.detach() - 0.1 * g / (g.norm(dim=(-2, -1), keepdim=True) + eps)
                torch.testing.assert_close(got, want, rtol=0, atol=1e-14)


def test_official_rule_ends_near_a_stationary_point_of_the_ridged_loss():
    """(K, Q), official rule, then smaller steps: the point reached satisfies grad L(W) Q = -2 eps K and
    grad L(W)^T K = -2 eps Q to 1e-2 of 2 eps ||K||, and is balanced (K^T K = Q^T Q)."""
    problem = data.random_problem(6, 8, 10, seed=5, batch=4)
    run = train.gd(problem, param="KQ", steps=2000, lr=0.1, init="uniform", rule="official", gradient="exact",
                   record_every=2000)
    K, Q = run.K[-1], run.Q[-1]
    for lr in (0.01, 0.001):
        run = train.gd(problem, param="KQ", steps=1000, lr=lr, init=(K, Q), rule="official", gradient="exact",
                       record_every=1000)
        K, Q = run.K[-1], run.Q[-1]
    G = train.loss_gradient(problem, K @ Q.transpose(-2, -1))
    for g, p in ((G @ Q + 2 * EPS * K, K), (G.transpose(-2, -1) @ K + 2 * EPS * Q, Q)):
        assert (g.norm(dim=(-2, -1)) < 1e-2 * 2 * EPS * p.norm(dim=(-2, -1))).all()
    gap = (K.transpose(-2, -1) @ K - Q.transpose(-2, -1) @ Q).norm(dim=(-2, -1))
    assert (gap < 1e-2 * K.norm(dim=(-2, -1)) ** 2).all()


@pytest.mark.parametrize("options, match", [
    (dict(rule="paper"), "rule='paper' is not supported"),
    (dict(rule="official", eps=1e-16), 'rule="official" fixes eps'),
    (dict(rule="official", param="KQ", ridge=1e-16), 'rule="official" fixes ridge'),
    (dict(rule="official", normalized=False), 'rule="official" fixes normalized'),
    (dict(ridge=1e-16), 'ridge=1e-16 applies to param="KQ" only'),
    (dict(param="KQ", ridge=-1.0), "ridge must be a finite number >= 0"),
    (dict(rule="official", engine="compiled"), 'engine="compiled" cannot run this training: .*exact gradient only'),
    (dict(rule="official", param="KQ", engine="compiled"),
     'engine="compiled" cannot run this training: .*exact gradient only'),
])
def test_bad_options_name_the_argument(options, match):
    problem = data.random_problem(3, 4, 5, seed=1)
    with pytest.raises(ValueError, match=match):
        train.gd(problem, steps=2, lr=0.1, **options)


def test_official_eps_is_float64_machine_epsilon():
    assert train.OFFICIAL_EPS == np.finfo(np.float64).eps == 2.0 ** -52


def _three_passes(problem, params, kind, head, ridge, values=None):
    """The autograd gradient, then the outputs by a second forward pass and the attention by a third."""
    with torch.enable_grad():
        leaves = [w.detach().requires_grad_(True) for w in params]
        W = leaves[0] if len(leaves) == 1 else leaves[0] @ leaves[1].transpose(-2, -1)
        risk = model._risk(model.LOSSES[kind], problem, model._outputs(problem, W, head)).sum()
        if ridge:
            risk = risk + ridge * sum((w * w).sum() for w in leaves)
        grads = torch.autograd.grad(risk, leaves)
    W = params[0] if len(params) == 1 else params[0] @ params[1].transpose(-2, -1)
    return grads, model._outputs(problem, W, head), model._attention(problem, W)


@pytest.mark.parametrize("run", ["gd W", "gd KQ", "gd head", "mirror W", "mirror KQ", "polyak W"])
def test_the_autograd_loops_take_one_forward_pass_with_the_same_bits(run, monkeypatch):
    """Every torch loop on autograd's gradient takes the gradient, the outputs and the attention from one forward
    pass (`_descent._autograd_gradient`): one softmax per gradient (gd, mirror descent), and bit for bit what three
    separate passes give, through saturation."""
    from attnsvm import heads
    from attnsvm.train import _descent, _mirror, _step_sizes

    problem = data.random_problem(n=3, T=4, d=4, seed=7, batch=3)
    start = torch.randn((3, 4, 4), dtype=torch.float64, generator=torch.Generator().manual_seed(8))
    other = torch.randn((3, 4, 4), dtype=torch.float64, generator=torch.Generator().manual_seed(9))
    kind, param = run.split()
    init = (start, other) if param == "KQ" else start
    if kind == "gd":
        options = dict(rule="official") if param != "head" else dict(gradient="autograd", engine="torch",
                                                                    head=heads.random_relu(4, seed=3))
        go = lambda: train.gd(problem, param="KQ" if param == "KQ" else "W", steps=600, lr=0.5, init=init,
                              record_every=50, **options)
    elif kind == "mirror":
        go = lambda: train.mirror_descent(problem, p=1.75, steps=600, lr=0.5, param=param, init=init,
                                          record_every=50, rule="official")
    else:
        go = lambda: train.polyak(problem, steps=200, init=start, record_every=20, gradient="autograd",
                                  engine="torch")
    calls = dict(gradient=0, softmax=0)

    def counted(name, function):
        def call(*args, **kwargs):
            calls[name] += 1
            return function(*args, **kwargs)
        return call
    with monkeypatch.context() as patched:  # raising=True: a loop that stops calling them fails here
        gradient = counted("gradient", _descent._autograd_gradient)
        for module in (_descent, _mirror, _step_sizes):
            patched.setattr(module, "_autograd_gradient", gradient)
        patched.setattr(_descent, "_attention", counted("softmax", _descent._attention))
        patched.setattr(model, "_attention", counted("softmax", model._attention))
        one = go()
    assert calls["gradient"] >= 200 and (kind == "polyak" or calls["softmax"] == calls["gradient"]), calls
    assert float(one.probs[-1].min()) < 1e-12  # saturated: autograd's gradient is round-off there
    for module in (_descent, _mirror, _step_sizes):
        monkeypatch.setattr(module, "_autograd_gradient", _three_passes)
    three = go()
    assert all(torch.equal(getattr(one, name), getattr(three, name)) for name in ("W", "probs", "loss"))
    if param == "KQ":
        assert torch.equal(one.K, three.K) and torch.equal(one.Q, three.Q)
