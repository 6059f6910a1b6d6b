"""The notation page is executable: every row of its tables that names code (the column "code") has a check here
that runs that code on a small problem and asserts the relation the row states, and every check belongs to a row.

The page is book_src/notation.md. A check is registered under the row's code cell, verbatim: a row added to the
page without a check, or a row whose code cell was changed or removed, fails `test_every_code_row_has_a_check`.
Only the code cell is tracked: a change to a row's symbol or meaning alone fails nothing, so whoever changes it
must update the row's check to assert the new meaning. For each SVM row the check compares the returned solution's
norm with the optimal value of an independent cvxpy solve (`svm_value`).
"""

import math
import re
from itertools import product
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
import torch

import attnsvm  # noqa: F401  (first: the CPU code paths)
from attnsvm import causal, data, heads, linear, model, svm, tensor, theory, train

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "book_src" / "notation.md"
TOL = 1e-12


def code_rows(text: str) -> dict[str, list[str]]:
    """{code cell: the row's cells} for every row of a table whose second column is headed "code" and whose
    code cell is not empty."""
    rows, header = {}, None
    for line in text.splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
        elif not set(line) <= set("|- ") and len(header) > 1 and header[1] == "code" and "`" in cells[1]:
            assert cells[1] not in rows, f"two rows name the same code {cells[1]}"
            rows[cells[1]] = cells
    return rows


ROWS = code_rows(PAGE.read_text())
CHECKS = {}


def check(code: str):
    def register(function):
        assert code not in CHECKS, code
        CHECKS[code] = function
        return function
    return register


# ------------------------------------------------------------------ the small problems

def small(n: int = 3, T: int = 4, d: int = 4, seed: int = 0) -> data.Problem:
    """A random problem with d >= max(T - 1, n): every selection's Att-SVM is feasible (generic data)."""
    return data.random_problem(n, T, d, seed=seed)


def random_W(d: int = 4, seed: int = 1, scale: float = 1.0) -> torch.Tensor:
    return scale * torch.randn(d, d, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def close(a, b, tol: float = TOL) -> bool:
    a, b = (torch.as_tensor(np.asarray(x, dtype=float)) if not torch.is_tensor(x) else x.double() for x in (a, b))
    return bool(torch.allclose(a, b, rtol=tol, atol=tol))


def constraint_margins(problem: data.Problem, W, alpha) -> np.ndarray:
    """The margins (x_{i alpha_i} - x_it)^T W z_i of the tokens t != alpha_i, written out (n, T - 1)."""
    X, Z, W = problem.X.numpy(), problem.Z.numpy(), np.asarray(W)
    out = []
    for i, a in enumerate(np.asarray(alpha)):
        out.append([(X[i, a] - X[i, t]) @ W @ Z[i] for t in range(problem.T) if t != a])
    return np.array(out)


def manual_attention(problem: data.Problem, W: torch.Tensor) -> torch.Tensor:
    return torch.stack([torch.softmax(problem.X[i] @ W @ problem.Z[i], 0) for i in range(problem.n)])


def manual_outputs(problem: data.Problem, W: torch.Tensor) -> torch.Tensor:
    return torch.stack([problem.v @ problem.X[i].T @ torch.softmax(problem.X[i] @ W @ problem.Z[i], 0)
                        for i in range(problem.n)])


def logistic(x: torch.Tensor) -> torch.Tensor:
    return torch.log1p(torch.exp(-x))


def svm_value(pairs, d: int, norm, equalities=(), soft: float | None = None) -> float:
    """An independent solve (cvxpy, Clarabel) of min ||W|| s.t. delta^T W z >= 1 for each (delta, z) of pairs and
    delta^T W z = 0 for each of equalities; soft=C: min ||W|| + C sum xi with delta^T W z >= 1 - xi, xi >= 0.
    norm: "fro", "nuc", "spec" or an exponent p (entrywise). Returns the optimal value."""
    import cvxpy as cp
    W = cp.Variable((d, d))
    value = {"fro": lambda: cp.norm(W, "fro"), "nuc": lambda: cp.normNuc(W), "spec": lambda: cp.sigma_max(W)}.get(
        norm, lambda: cp.pnorm(cp.vec(W, order="C"), norm))()
    margin = lambda delta, z: cp.sum(cp.multiply(np.outer(delta, z), W))  # noqa: E731
    constraints = [margin(delta, z) == 0 for delta, z in equalities]
    if soft is None:
        constraints += [margin(delta, z) >= 1 for delta, z in pairs]
    else:
        xi = cp.Variable(len(pairs), nonneg=True)
        constraints += [margin(delta, z) >= 1 - xi[c] for c, (delta, z) in enumerate(pairs)]
        value = value + soft * cp.sum(xi)
    problem = cp.Problem(cp.Minimize(value), constraints)
    problem.solve(solver="CLARABEL")
    assert problem.status == "optimal", problem.status
    return float(problem.value)


def selection_pairs(problem: data.Problem, alpha) -> list:
    X, Z = problem.X.numpy(), problem.Z.numpy()
    return [(X[i, a] - X[i, t], Z[i]) for i, a in enumerate(np.asarray(alpha)) for t in range(problem.T) if t != a]


def is_optimal(value: float, reference: float, tol: float = 1e-5) -> bool:
    """The library's optimal value agrees with the independent solve's (solver tolerance)."""
    return abs(value - reference) <= tol * max(1.0, reference)


# ------------------------------------------------------------------ data and model

@check("`problem.n`, `problem.T`, `problem.d`")
def _():
    problem = data.random_problem(3, 5, 7, seed=0)
    assert (problem.n, problem.T, problem.d) == tuple(problem.X.shape) == (3, 5, 7)


@check("`X[i]`, `X[i, t]`")
def _():
    problem, W = small(), random_W()
    logits = model.logits(problem, W)
    for i in range(problem.n):
        assert problem.X[i].shape == (problem.T, problem.d)  # X_i: T tokens (rows) of dimension d
        assert close(logits[i], problem.X[i] @ W @ problem.Z[i])  # row t of X_i is token t: the logits X_i W z_i
        for t in range(problem.T):
            assert abs(logits[i, t] - problem.X[i, t] @ W @ problem.Z[i]) < TOL


@check("`Z[i]`")
def _():
    problem, W = small(), random_W()
    Z = problem.Z.clone()
    Z[1] = 2 * Z[1]  # the query of sequence 1 only
    doubled = model.logits(data.Problem(problem.X, problem.Y, Z, problem.v), W)
    logits = model.logits(problem, W)
    assert close(doubled[1], 2 * logits[1]) and close(doubled[[0, 2]], logits[[0, 2]])


@check("`Y[i]`")
def _():
    problem, W = small(), random_W()
    assert problem.Y.shape == (problem.n,) and set(problem.Y.tolist()) <= {-1.0, 1.0}
    assert close(model.loss(problem, W), logistic(problem.Y * manual_outputs(problem, W)).mean())


@check("`v`")
def _():
    problem, W = small(), random_W()
    s = manual_attention(problem, W)
    assert problem.v.shape == (problem.d,)
    assert close(model.outputs(problem, W), (s * (problem.X @ problem.v)).sum(-1))


@check('`train.gd(..., param="KQ", m=m)`')
def _():
    problem = small()
    run = train.gd(problem, param="KQ", m=2, steps=4, lr=0.1, record_every=2)
    assert run.K.shape == run.Q.shape == (3, problem.d, 2) and run.W.shape == (3, problem.d, problem.d)
    assert close(run.W, run.K @ run.Q.mT)
    assert close(run.loss, model.loss(problem, run.W))  # the risk of W = K Q^T


@check("`model.attention`")
def _():
    problem, W = small(), random_W()
    s = model.attention(problem, W)
    assert close(s, manual_attention(problem, W)) and close(s, torch.softmax(model.logits(problem, W), -1))


@check("`model.outputs`")
def _():
    problem, W = small(), random_W()
    assert close(model.outputs(problem, W), manual_outputs(problem, W))


@check("`model.LOSSES`")
def _():
    x = torch.linspace(-5, 5, 101, dtype=torch.float64)
    formulas = {"logistic": torch.log1p(torch.exp(-x)), "exponential": torch.exp(-x), "linear": -x}
    assert set(model.LOSSES) == set(formulas)
    for name, value in formulas.items():
        assert close(model.LOSSES[name].value(x), value), name


@check("`model.loss`")
def _():
    problem, W = small(), random_W()
    f = manual_outputs(problem, W)
    assert close(model.loss(problem, W), logistic(problem.Y * f).mean())
    assert close(model.loss(problem, W, loss="exponential"), torch.exp(-problem.Y * f).mean())


@check("`train.loss_gradient`")
def _():
    problem, W = small(), random_W()
    leaf = W.clone().requires_grad_(True)
    logistic(problem.Y * manual_outputs(problem, leaf)).mean().backward()
    assert close(train.loss_gradient(problem, W), leaf.grad, 1e-10)
    # saturated: at 400 W the softmax is one-hot to double precision; reference in 400-digit arithmetic
    import mpmath
    mpmath.mp.dps = 400  # the gaps reach e^-300: 60 digits would lose them beside 1
    W_big = 400 * W
    X, Z, Y, v = (a.numpy() for a in (problem.X, problem.Z, problem.Y, problem.v))
    exact = np.zeros((problem.d, problem.d))
    for i in range(problem.n):
        logits = [mpmath.mpf(float(x)) for x in X[i] @ W_big.numpy() @ Z[i]]
        top = max(logits)
        weights = [mpmath.exp(u - top) for u in logits]
        s = [w / sum(weights) for w in weights]
        h = [mpmath.mpf(float(x)) for x in X[i] @ v]
        f = sum(a * b for a, b in zip(s, h))
        dloss = -1 / (1 + mpmath.exp(Y[i] * f)) * Y[i] / problem.n  # d l(Y f) / d f, over n
        for t in range(problem.T):  # d f / d W = sum_t s_t (h_t - f) x_t z^T
            exact += float(dloss * s[t] * (h[t] - f)) * np.outer(X[i, t], Z[i])
    mpmath.mp.dps = 15
    G = train.loss_gradient(problem, W_big).numpy()
    assert np.linalg.norm(exact) < 1e-40  # saturated: the gradient is far below round-off of plain arithmetic
    assert np.linalg.norm(G - exact) <= 1e-9 * np.linalg.norm(exact)


# ------------------------------------------------------------------ the theory's objects

@check("`theory.token_scores`")
def _():
    problem = small()
    gamma = theory.token_scores(problem)
    assert close(gamma, problem.Y[:, None] * (problem.X @ problem.v))


@check("`theory.optimal_tokens`")
def _():
    problem = small()
    assert torch.equal(theory.optimal_tokens(problem), theory.token_scores(problem).argmax(-1))
    ties = data.Problem([[[1.0], [1.0], [0.0]]], [1.0], [[1.0]], [1.0])  # tokens 0 and 1 tie for the best
    assert theory.optimal_tokens(ties).tolist() == [0]


@check("`run.selection()`")
def _():
    problem = small()
    run = train.gd(problem, steps=50, lr=0.1, record_every=25)
    assert torch.equal(run.selection(), model.attention(problem, run.W[-1]).argmax(-1))


def _is_frobenius_svm(problem: data.Problem, alpha) -> None:
    """svm.att_svm's W is the Frobenius Att-SVM of alpha: every margin >= 1, and KKT holds (W = sum of multipliers
    times constraint matrices, multipliers >= 0 and zero off the margin-one constraints): optimal, the problem being
    convex."""
    W, lam = svm.att_svm(problem.X, problem.Z, alpha, return_multipliers=True)
    mu = constraint_margins(problem, W, alpha)
    assert mu.min() >= 1 - 1e-9 and abs(mu.min() - 1) < 1e-7
    X, Z, alpha = problem.X.numpy(), problem.Z.numpy(), np.asarray(alpha)
    built = sum(lam[i, t] * np.outer(X[i, alpha[i]] - X[i, t], Z[i])
                for i in range(problem.n) for t in range(problem.T))
    assert (lam >= -1e-12).all() and np.allclose(W, built, atol=1e-7)
    full = theory.margins(problem, W, alpha)
    assert np.all(np.abs(lam * (full - 1))[np.arange(problem.T)[None] != alpha[:, None]] < 1e-7)


@check("`svm.att_svm(X, Z, alpha)`")
def _():
    _is_frobenius_svm(small(), [1, 2, 3])


@check("`svm.att_svm(X, Z, opt)`")
def _():
    problem = small()
    _is_frobenius_svm(problem, theory.optimal_tokens(problem).numpy())


@check('`svm.att_svm(X, Z, alpha, norm="nuc")`')
def _():
    problem, alpha = small(), [1, 2, 3]
    W_nuc = svm.att_svm(problem.X, problem.Z, alpha, norm="nuc")
    W_fro = svm.att_svm(problem.X, problem.Z, alpha)
    assert constraint_margins(problem, W_nuc, alpha).min() >= 1 - 1e-9
    nuclear = lambda W: np.linalg.norm(W, "nuc")  # noqa: E731
    assert nuclear(W_nuc) <= nuclear(W_fro) * (1 + 1e-7)  # the smallest in its own norm
    assert np.linalg.norm(W_fro) <= np.linalg.norm(W_nuc) * (1 + 1e-9)
    assert is_optimal(nuclear(W_nuc), svm_value(selection_pairs(problem, alpha), 4, "nuc"))  # the least


@check("`theory.margins`")
def _():
    problem, W, alpha = small(), random_W(), np.array([1, 2, 3])
    mu = theory.margins(problem, W, alpha)
    X, Z = problem.X.numpy(), problem.Z.numpy()
    for i in range(problem.n):
        for t in range(problem.T):
            assert abs(mu[i, t] - (X[i, alpha[i]] - X[i, t]) @ W.numpy() @ Z[i]) < TOL
        assert mu[i, alpha[i]] == 0


@check("`theory.support_tokens`")
def _():
    problem, alpha = small(), np.array([1, 2, 3])
    W = svm.att_svm(problem.X, problem.Z, alpha)
    support = theory.support_tokens(problem, W, alpha)
    mu = theory.margins(problem, W, alpha)
    expected = (np.abs(mu - 1) < 1e-6) & (np.arange(problem.T)[None] != alpha[:, None])
    assert support.any() and np.array_equal(support, expected)


@check("`theory.correlation`")
def _():
    A, B = random_W(seed=1), random_W(seed=2)
    expected = float((A * B).sum() / (A.norm() * B.norm()))
    assert abs(theory.correlation(A, B) - expected) < TOL and abs(theory.correlation(A, 3 * A) - 1) < TOL


@check("`train.optimal_loss`")
def _():
    # (1/n) sum_i l(gamma_{i opt_i}), a lower bound of the loss
    problem = small()
    L_star = train.optimal_loss(problem)
    assert close(L_star, logistic(theory.token_scores(problem).amax(-1)).mean())
    Ws = torch.randn(200, 4, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    assert (model.loss(problem, Ws * torch.logspace(-1, 2, 200, dtype=torch.float64)[:, None, None]) > L_star).all()
    # feasible Att-SVM of the optimal tokens: the infimum, approached along c W_mm
    opt = theory.optimal_tokens(problem)
    W_mm = torch.as_tensor(svm.att_svm(problem.X, problem.Z, opt))
    assert svm.feasible(problem.X, problem.Z, opt)
    gaps = [float(train.log_loss_gap(problem, c * W_mm)) for c in (10, 100, 1000)]
    assert gaps[0] > gaps[1] > gaps[2] < math.log(1e-300)  # L(c W_mm) - L* -> 0
    # Chapter 1's infeasible example: L* = l(1) = 0.3133 < log 2 = 0.6931, the minimum of the loss (at W = 0)
    two = data.Problem(torch.tensor([[[1.0], [-1.0]], [[1.0], [-1.0]]]), torch.tensor([1.0, -1.0]),
                       torch.ones(2, 1), torch.ones(1))
    assert not svm.feasible(two.X, two.Z, theory.optimal_tokens(two))
    L_star_two = float(train.optimal_loss(two))
    assert abs(L_star_two - math.log1p(math.exp(-1))) < TOL and round(L_star_two, 4) == 0.3133
    losses = model.loss(two, torch.linspace(-50, 50, 10001, dtype=torch.float64)[:, None, None])
    assert losses.min() >= math.log(2) - TOL and abs(model.loss(two, torch.zeros(1, 1)) - math.log(2)) < TOL
    assert losses.min() - L_star_two > 0.37  # L* is not the infimum here


# ------------------------------------------------------------------ training

@check("`train.gd(...).W[j]`")
def _():
    problems = data.random_problem(3, 4, 4, seed=0, batch=2)
    run = train.gd(problems, steps=10, lr=0.1, record_every=4)
    assert run.steps.tolist() == [0, 4, 8, 10] and run.W.shape == (4, 2, 4, 4)  # records first, then the batch
    for j, k in enumerate(run.steps):
        assert close(run.W[j], train.gd(problems, steps=int(k), lr=0.1).W[-1], 1e-12)  # W[j] is W(steps[j])
    assert not close(run.W[1], train.gd(problems, steps=1, lr=0.1).W[-1], 1e-6)  # and not W(1)


@check("`lr`")
def _():
    problem, W0 = small(), random_W(scale=0.3)
    step = train.gd(problem, steps=1, lr=0.05, init=W0).W
    assert abs(torch.linalg.matrix_norm(step[1] - step[0]) - 0.05) < TOL  # normalized: a step of length lr
    plain = train.gd(problem, steps=1, lr=0.05, init=W0, normalized=False).W
    assert close(plain[1], W0 - 0.05 * train.loss_gradient(problem, W0), 1e-12)


@check("`train.lipschitz_W`")
def _():
    problem = small()
    L_W = float(train.lipschitz_W(problem))
    generator = torch.Generator().manual_seed(4)
    for scale in (0.1, 1.0, 10.0):
        W1, W2 = (scale * torch.randn(4, 4, dtype=torch.float64, generator=generator) for _ in range(2))
        change = torch.linalg.matrix_norm(train.loss_gradient(problem, W1) - train.loss_gradient(problem, W2))
        assert change <= L_W * torch.linalg.matrix_norm(W1 - W2)


@check("`train.OFFICIAL_EPS`")
def _():
    assert train.OFFICIAL_EPS == np.finfo(np.float64).eps == 2.0**-52 and f"{train.OFFICIAL_EPS:.1e}" == "2.2e-16"
    problem, W0 = small(), random_W(scale=0.3)
    run = train.gd(problem, steps=1, lr=0.05, init=W0, eps=train.OFFICIAL_EPS, engine="torch")
    G = train.loss_gradient(problem, W0)
    expected = W0 - 0.05 * G / (torch.linalg.matrix_norm(G) + train.OFFICIAL_EPS)
    assert close(run.W[1], expected, 1e-12)


# ------------------------------------------------------------------ chapters 2 to 7

@check("`train.regularization_path`")
def _():
    problem = small()
    path = train.regularization_path(problem, [0.5, 2.0], steps=100)
    directions_mm = torch.as_tensor(np.stack([svm.att_svm(problem.X, problem.Z, list(alpha))  # every selection's
                                              for alpha in product(range(problem.T), repeat=problem.n)]))
    for R, W in zip(path.radii, path.W):
        assert torch.linalg.matrix_norm(W) <= R * (1 + 1e-9)
        directions = torch.randn(300, 4, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
        ball = R * directions / torch.linalg.matrix_norm(directions)[:, None, None]  # points of the sphere
        assert model.loss(problem, W) <= model.loss(problem, ball).min() + 1e-9
        candidates = R * directions_mm / torch.linalg.matrix_norm(directions_mm)[:, None, None]
        assert model.loss(problem, W) <= model.loss(problem, candidates).min() + 1e-9  # R W_mm_a / ||W_mm_a||
        G = train.loss_gradient(problem, W)  # first-order optimality on the ball: G = -lambda W, lambda > 0
        tangent = G - (G * W).sum() * W / (W * W).sum()
        assert abs(W.norm() - R) < 1e-9 and (G * W).sum() < 0 and tangent.norm() < 1e-6 * G.norm()


@check("`train.gd_prompt`")
def _():
    problem, key = small(), random_W(seed=6)
    run = train.gd_prompt(problem, key, steps=4, lr=0.1, init=torch.full((4,), 0.3, dtype=torch.float64),
                          record_every=2)
    for j in range(len(run.steps)):
        s = torch.softmax(problem.X @ key @ run.p[j], -1)  # S(X W p)
        f = (s * (problem.X @ problem.v)).sum(-1)  # <X v, S(X W p)>
        assert close(run.probs[j], s) and close(run.loss[j], logistic(problem.Y * f).mean())


@check("`svm.prompt_svm(problem, key, alpha)`")
def _():
    from scipy.optimize import nnls
    problem, key, alpha = small(), random_W(seed=6).numpy(), [1, 2, 3]
    p = svm.prompt_svm(problem, key, alpha)
    keys = problem.X.numpy() @ key  # x~_it = W^T x_it, as rows
    rows = np.array([keys[i, a] - keys[i, t] for i, a in enumerate(alpha) for t in range(problem.T) if t != a])
    margins = rows @ p
    assert margins.min() >= 1 - 1e-9 and abs(margins.min() - 1) < 1e-7
    active = rows[np.abs(margins - 1) < 1e-6]  # least norm: p is a non-negative combination of the active rows
    weights, residual = nnls(active.T, p)
    assert residual < 1e-7 * np.linalg.norm(p)


@check("`train.gd_joint`")
def _():
    problem, key = small(), random_W(seed=6)
    start = torch.full((4,), 0.3, dtype=torch.float64)
    run = train.gd_joint(problem, key, steps=4, lr=0.1, init_p=start, init_v=start, record_every=2)
    for j in range(len(run.steps)):
        s = torch.softmax(problem.X @ key @ run.p[j], -1)
        f = (s * (problem.X @ run.v[j])).sum(-1)  # <X v, S(X W p)> with the trained v
        assert close(run.loss[j], logistic(problem.Y * f).mean())
    assert not close(run.v[-1], run.v[0], 1e-3)  # the head is trained


@check("`heads.Linear`, `heads.ReLU`, `heads.Lambda`")
def _():
    problem, W = small(), random_W()
    a = manual_attention(problem, W)[..., None].mul(problem.X).sum(-2)  # a_i = X_i^T s_i
    V = torch.randn(4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(7))
    for head, h in [(heads.Linear(problem.v), a @ problem.v), (heads.ReLU(V), torch.relu(a @ V).sum(-1)),
                    (heads.Lambda(problem.v, 0.5), a @ problem.v - 0.5 * (a * a).sum(-1))]:
        assert close(model.outputs(problem, W, head=head), h), head


@check("`heads.lambda_threshold`")
def _():
    u, lam = torch.tensor([1.0, 0.5, 0.0], dtype=torch.float64), 0.5
    theta = heads.lambda_threshold(u, lam)
    s = torch.clamp(u - theta, min=0) / (2 * lam)
    assert abs(s.sum() - 1) < TOL and close(heads.lambda_optimum(u, lam), s)
    assert abs(theta - 0.25) < TOL  # Chapter 5's exercise: lambda = 0.5 gives theta = 0.25


def _general(problem):
    W_gd = random_W(seed=8, scale=10.0)
    return W_gd, model.attention(problem, W_gd), svm.general_svm(problem, model.attention(problem, W_gd))


@check("`svm.general_svm`")
def _():
    problem = data.random_problem(n=3, T=4, d=4, seed=1)
    _, probs, general = _general(problem)
    assert np.array_equal(general.relevant, (probs >= 1e-3).numpy())  # O_i
    X, Z = problem.X.numpy(), problem.Z.numpy()
    for i in range(problem.n):
        kept = np.flatnonzero(general.relevant[i])
        for t in kept:
            for tau in kept:  # W_fin sets the log-ratios inside O_i
                ratio = (X[i, t] - X[i, tau]) @ general.W_fin @ Z[i]
                assert abs(ratio - math.log(probs[i, t] / probs[i, tau])) < 1e-7
    rows, targets = [], []  # the least-norm solution of these equations, by least squares
    for i in range(problem.n):
        kept = np.flatnonzero(general.relevant[i])
        for t in kept[1:]:
            rows.append(np.outer(X[i, t] - X[i, kept[0]], Z[i]).ravel())
            targets.append(math.log(probs[i, t] / probs[i, kept[0]]))
    least = np.linalg.lstsq(np.array(rows), np.array(targets), rcond=None)[0].reshape(4, 4)
    assert len(rows) >= 1 and np.allclose(general.W_fin, least, atol=1e-7)


@check("`svm.general_svm(...).combined(W)`")
def _():
    problem = data.random_problem(n=3, T=4, d=4, seed=1)
    W_gd, _, general = _general(problem)
    W_fin, W_mm, W = general.W_fin, general.W_mm, W_gd.numpy()
    omega = np.sum((W - W_fin) * W_mm) / np.sum(W_mm * W_mm)
    assert np.allclose(general.combined(W_gd), W_fin + omega * W_mm, atol=1e-9)


def _causal_problem():
    return causal.random_problem(n=2, T=4, d=8, seed=0)


@check("`causal.SequenceProblem`")
def _():
    problem, W = _causal_problem(), random_W(d=8)
    assert isinstance(problem, causal.SequenceProblem) and problem.P == problem.K == 4
    logits, f = causal.logits(problem, W), causal.outputs(problem, W)
    for i in range(problem.n):
        for j in range(problem.P):
            for t in range(problem.T):
                expected = problem.X[i, t] @ W @ problem.X[i, j] if t <= j else -torch.inf  # causal: t <= j
                assert logits[i, j, t] == expected or abs(logits[i, j, t] - expected) < TOL
            s = torch.softmax(problem.X[i, : j + 1] @ W @ problem.X[i, j], 0)
            assert abs(f[i, j] - s @ problem.X[i, : j + 1] @ problem.V[i, j]) < TOL  # with its own head v_ij


@check("`causal.scores`, `causal.optimal_tokens`, `causal.margins`")
def _():
    problem, W = _causal_problem(), random_W(d=8)
    gamma, opt = causal.scores(problem), causal.optimal_tokens(problem)
    mu = causal.margins(problem, W)
    X, V = problem.X, problem.V
    for i in range(problem.n):
        for j in range(problem.P):
            assert close(gamma[i, j, : j + 1], X[i, : j + 1] @ V[i, j])  # gamma_ijt = v_ij^T x_it
            assert opt[i, j] == gamma[i, j, : j + 1].argmax()
            for t in range(problem.T):  # a margin for t <= j other than the optimal token, NaN elsewhere
                assert np.isnan(mu[i, j, t]) == (t > j or t == opt[i, j]), (i, j, t)
                if not np.isnan(mu[i, j, t]):
                    assert abs(mu[i, j, t] - (X[i, opt[i, j]] - X[i, t]) @ W @ X[i, j]) < TOL
    assert (~np.isnan(mu)).sum() >= 8


@check("`causal.att_svm(problem)`")
def _():
    problem = _causal_problem()
    W = causal.att_svm(problem)
    mu = causal.margins(problem, W)
    assert np.nanmin(mu) >= 1 - 1e-9 and abs(np.nanmin(mu) - 1) < 1e-7
    assert is_optimal(np.linalg.norm(W), svm_value(_causal_pairs(problem), 8, "fro"))  # the least ||W||_F


def _causal_pairs(problem):
    """The causal constraints (x_{i opt_ij} - x_it, x_ij) for t <= j other than the optimal token."""
    X, opt = problem.X.numpy(), causal.optimal_tokens(problem).numpy()
    return [(X[i, opt[i, j]] - X[i, t], X[i, j]) for i in range(problem.n) for j in range(problem.P)
            for t in range(j + 1) if t != opt[i, j]]


def _soft_objective(problem, W, C):
    mu = causal.margins(problem, W)
    return np.linalg.norm(W) + C * np.nansum(np.maximum(0.0, 1 - mu))


@check('`causal.att_svm(problem, C=C, objective="norm")`')
def _():
    problem = _causal_problem()
    C = 0.5 * float(causal.penalty_threshold(problem))
    W_soft = causal.att_svm(problem, C=C, objective="norm")
    value = _soft_objective(problem, W_soft, C)
    W_hard = causal.att_svm(problem)
    generator = np.random.default_rng(9)
    others = [W_hard, np.zeros((8, 8))] + [W_soft + 0.01 * generator.standard_normal((8, 8)) for _ in range(50)]
    assert all(value <= _soft_objective(problem, W, C) + 1e-7 for W in others)  # min ||W||_F + C sum xi
    assert is_optimal(value, svm_value(_causal_pairs(problem), 8, "fro", soft=C))  # the minimum


@check("`causal.penalty_threshold`")
def _():
    problem = _causal_problem()
    C_star = float(causal.penalty_threshold(problem))
    W_hard = causal.att_svm(problem)
    above = causal.att_svm(problem, C=1.1 * C_star, objective="norm")
    below = causal.att_svm(problem, C=0.9 * C_star, objective="norm")
    assert np.allclose(above, W_hard, atol=1e-5) and not np.allclose(below, W_hard, atol=1e-3)


@check("`causal.synthetic_language`")
def _():
    language = causal.synthetic_language(V=7, d=5, seed=0)
    assert language.V == 7 and language.embeddings.shape == (7, 5)  # N tokens, called V in code
    assert language.transition.shape == (7, 7) and close(language.transition.sum(-1), torch.ones(7))


def _paper_c_block(problem, i):
    """Sequence i in paper C's form: A1 with the query z_i as row j0 = 0, A2 = A3 = X_i."""
    A1 = problem.X[i].clone()
    A1[0] = problem.Z[i]
    return tensor.row_block(A1, problem.X[i], 0)


@check("`tensor.vec(W.T)`, `tensor.row_block`")
def _():
    problem, W = small(), random_W()
    x = tensor.vec(W.T)
    assert close(x, W.T.reshape(-1))  # row by row
    for i in range(problem.n):
        assert close(_paper_c_block(problem, i) @ x, model.logits(problem, W)[i])  # A_j0 x = the logits


@check("`tensor.loss`")
def _():
    problem, W = small(), random_W()
    x = tensor.vec(W.T)
    risks = []
    for i in range(problem.n):
        Aj, h, b = _paper_c_block(problem, i), problem.X[i] @ problem.v, problem.Y[i]
        psi = (torch.softmax(Aj @ x, -1) * h).sum()  # <f(x), h>
        value = tensor.loss(Aj, x, h, b, loss="logistic")
        assert close(value, logistic(b * psi))
        risks.append(value)
    assert close(torch.stack(risks).mean(), model.loss(problem, W))


@check("`tensor.lipschitz_bound`")
def _():
    Aj, h, b = tensor.random_instance(T=5, d=3, R=4.0, seed=0)
    L = tensor.lipschitz_bound(Aj, h, b, loss="logistic")
    generator = torch.Generator().manual_seed(10)
    for scale in (0.1, 1.0, 10.0):
        x = scale * torch.randn(9, dtype=torch.float64, generator=generator)
        assert torch.linalg.matrix_norm(tensor.hessian(Aj, x, h, b, loss="logistic"), ord=2) <= L


# ------------------------------------------------------------------ Part II

@check("`train.dual_norm(G, q)`")
def _():
    G = random_W(seed=11)
    for q in (1.0, 1.5, 2.0, 3.0):
        assert abs(train.dual_norm(G, q) - (G.abs() ** q).sum() ** (1 / q)) < 1e-12
    assert train.dual_norm(G, math.inf) == G.abs().max()


@check("`svm.att_svm(X, Z, alpha, norm=p)`")
def _():
    problem, alpha = small(), [1, 2, 3]
    solutions = {p: svm.att_svm(problem.X, problem.Z, alpha, norm=p) for p in (1.75, 2, 3)}
    norm = lambda W, p: (np.abs(W) ** p).sum() ** (1 / p)  # noqa: E731
    for p, W in solutions.items():
        assert constraint_margins(problem, W, alpha).min() >= 1 - 1e-9
        assert all(norm(W, p) <= norm(other, p) * (1 + 1e-6) for other in solutions.values())
    assert np.allclose(solutions[2], svm.att_svm(problem.X, problem.Z, alpha), atol=1e-6)  # p = 2: W_mm
    for p, W in solutions.items():  # each the least in its own norm
        assert is_optimal(norm(W, p), svm_value(selection_pairs(problem, alpha), 4, p)), p


@check("`train.mirror_descent`")
def _():
    problem, W0, p, lr = small(), random_W(scale=0.5), 3.0, 0.1
    q = p / (p - 1)
    run = train.mirror_descent(problem, p=p, steps=2, lr=lr, init=W0)
    theta = torch.sign(run.W) * run.W.abs() ** (p - 1)  # the dual variable
    for k in range(2):
        G = train.loss_gradient(problem, run.W[k])
        assert close(theta[k + 1] - theta[k], -lr * G / train.dual_norm(G, q), 1e-10)
        assert abs(train.dual_norm(theta[k + 1] - theta[k], q) - lr) < 1e-12


@check("`train.sign_descent`")
def _():
    problem, W0 = small(), random_W(scale=0.5)
    run = train.sign_descent(problem, steps=1, lr=0.1, init=W0)
    assert close(run.W[1], W0 - 0.1 * torch.sign(train.loss_gradient(problem, W0)))


@check("`train.polyak`")
def _():
    problem = small()
    run = train.polyak(problem, steps=2)
    for k in range(2):
        W = run.W[k]
        G = train.loss_gradient(problem, W)
        h = (model.loss(problem, W) - train.optimal_loss(problem)) / torch.linalg.matrix_norm(G)
        assert close(run.W[k + 1], W - h * G / torch.linalg.matrix_norm(G), 1e-10)


@check("`train.log_loss_gap`")
def _():
    problem, W = small(), random_W()
    plain = model.loss(problem, W) - train.optimal_loss(problem)
    assert abs(train.log_loss_gap(problem, W) - torch.log(plain)) < 1e-10


@check("`train.log_attention_gap`")
def _():
    problem, W = small(), random_W()
    opt = theory.optimal_tokens(problem)
    s = model.attention(problem, W)
    s_opt = s.gather(-1, opt[:, None])[:, 0]
    gaps = train.log_attention_gap(problem, W)  # default: the optimal tokens
    assert close(gaps, torch.log(1 - s_opt), 1e-10)
    sigma = s_opt.min()  # sigma(W)
    assert abs(torch.exp(gaps.max()) - (1 - sigma)) < 1e-12


def _ntp():
    return causal.ntp_problem([[1, 2, 3, 0], [2, 1, 3, 0], [1, 2, 4, 0], [3, 4, 1, 2]], [1, 2, 2, 4], d=8, seed=1)


@check("`causal.ntp_problem`")
def _():
    problem = _ntp()
    assert problem.K == 5 and problem.embeddings.shape == (5, 8)  # K tokens 0..4, e_a = embeddings[a]
    assert close(problem.X, problem.embeddings[problem.ids])  # x_it = e_(id of position t)
    assert close(problem.queries, problem.X[:, -1])  # the query is the last token


@check("`causal.ntp_probabilities`")
def _():
    problem, W = _ntp(), random_W(d=8)
    s = torch.softmax(torch.einsum("itd,de,ie->it", problem.X, W, problem.X[:, -1]), -1)
    assert close(causal.ntp_attention(problem, W), s)
    p = causal.ntp_probabilities(problem, W)
    for i in range(problem.n):
        for a in range(problem.K):
            assert abs(p[i, a] - s[i][problem.ids[i] == a].sum()) < TOL


@check("`causal.ntp_loss`")
def _():
    problem, W = _ntp(), random_W(d=8)
    p = causal.ntp_probabilities(problem, W)
    assert close(causal.ntp_loss(problem, W), -torch.log(p[torch.arange(problem.n), problem.labels]).mean())


def _edges(problem):
    edges = {}
    for i in range(problem.n):
        ids, y = problem.ids[i].tolist(), int(problem.labels[i])
        edges.setdefault(ids[-1], set()).update((y, x) for x in ids if x != y)
    return edges


@check("`causal.priority_graphs`")
def _():
    problem = _ntp()
    graphs = causal.priority_graphs(problem)
    expected = _edges(problem)
    assert set(graphs) == set(expected)
    for q, graph in graphs.items():  # an edge y_i -> x for each other token x of a sequence ending in q
        assert set(graph.edges) == expected[q]


@check("`causal.retrieved`")
def _():
    problem = _ntp()
    graphs = causal.priority_graphs(problem)
    retrieved = causal.retrieved(problem)
    for i in range(problem.n):
        graph = graphs[int(problem.ids[i, -1])]
        component = next(c for c in nx.strongly_connected_components(graph) if int(problem.labels[i]) in c)
        assert retrieved[i].tolist() == [int(token) in component for token in problem.ids[i]]


@check("`causal.graph_svm`")
def _():
    problem = _ntp()
    W = causal.graph_svm(problem)
    E = problem.embeddings.numpy()
    components = causal.priority_components(problem)
    for q, graph in causal.priority_graphs(problem).items():
        same = {token: k for k, component in enumerate(components[q]) for token in component}
        for y, x in graph.edges:
            gap = (E[y] - E[x]) @ W @ E[q]
            assert abs(gap) < 1e-7 if same[y] == same[x] else gap >= 1 - 1e-7  # equal inside, >= 1 across
    assert any(len(component) > 1 for component in components[0])  # an equality to keep
    equal, across = [], []
    for q, graph in causal.priority_graphs(problem).items():
        same = {token: k for k, component in enumerate(components[q]) for token in component}
        for y, x in graph.edges:
            (equal if same[y] == same[x] else across).append((E[y] - E[x], E[q]))
    assert is_optimal(np.linalg.norm(W), svm_value(across, 8, "fro", equalities=equal))  # the least ||W||_F


@check("`causal.finite_part`")
def _():
    problem = _ntp()
    W_fin = torch.as_tensor(causal.finite_part(problem))
    basis = torch.as_tensor(causal.finite_subspace(problem))  # orthonormal basis of S_fin
    assert basis.shape[0] >= 1
    inside = torch.einsum("kde,k->de", basis, torch.einsum("kde,de->k", basis, W_fin))
    assert close(inside, W_fin, 1e-10)  # W_fin lies in S_fin
    mask = causal.retrieved(problem)
    leaf = W_fin.clone().requires_grad_(True)
    causal.ntp_loss(problem, leaf, mask=mask).backward()
    assert torch.einsum("kde,de->k", basis, leaf.grad).abs().max() < 1e-8  # L_fin stationary on S_fin
    for direction in basis:  # and minimal along it (convex)
        for step in (-0.1, 0.1):
            assert causal.ntp_loss(problem, W_fin + step * direction, mask=mask) >= causal.ntp_loss(
                problem, W_fin, mask=mask)


@check("`train.diagonal_gd`")
def _():
    problem = data.random_problem(n=5, T=2, d=12, seed=1)
    ones = torch.ones(12, dtype=torch.float64)
    run = train.diagonal_gd(problem, factorized=True, steps=20, lr=0.1, init=(0.1 * ones, 0.0 * ones),
                            record_every=10)
    kappa, rho = torch.diagonal(run.K, dim1=-2, dim2=-1), torch.diagonal(run.Q, dim1=-2, dim2=-1)
    assert close(run.K, torch.diag_embed(kappa)) and close(run.Q, torch.diag_embed(rho))
    assert close(run.W, torch.diag_embed(kappa * rho))  # W = diag(kappa * rho) = K Q^T
    assert close(run.loss, model.loss(problem, run.W))
    direct = train.diagonal_gd(problem, factorized=False, steps=20, lr=0.1, record_every=10)
    assert close(direct.W, torch.diag_embed(torch.diagonal(direct.W, dim1=-2, dim2=-1)))  # W = diag(w)


@check("`svm.diagonal_features`")
def _():
    problem = small()
    w = torch.arange(1.0, 5.0, dtype=torch.float64)
    phi = svm.diagonal_features(problem)
    assert close(phi, problem.X * problem.Z[:, None])  # x_it * z_i
    assert close(phi @ w, model.logits(problem, torch.diag(w)))


@check("`svm.diagonal_svm`")
def _():
    problem = data.random_problem(n=5, T=2, d=12, seed=1)
    alpha = theory.optimal_tokens(problem)
    w2, w1 = svm.diagonal_svm(problem, alpha), svm.diagonal_svm(problem, alpha, norm=1)
    w_plus = svm.diagonal_svm(problem, alpha, norm=1, nonnegative=True)
    for w in (w2, w1, w_plus):
        assert constraint_margins(problem, np.diag(w), alpha.numpy()).min() >= 1 - 1e-7
    assert np.abs(w1).sum() <= np.abs(w2).sum() and np.linalg.norm(w2) <= np.linalg.norm(w1)
    assert (w_plus >= 0).all() and np.abs(w1).sum() <= w_plus.sum() * (1 + 1e-9)
    W_fro = svm.att_svm(problem.X, problem.Z, alpha)
    assert np.linalg.norm(W_fro) <= np.linalg.norm(w2) * (1 + 1e-9)  # diagonal matrices are a restriction
    import cvxpy as cp
    phi, a = svm.diagonal_features(problem).numpy(), alpha.numpy()
    rows = np.array([phi[i, a[i]] - phi[i, t] for i in range(problem.n) for t in range(problem.T) if t != a[i]])
    for w, p, nonnegative in ((w2, 2, False), (w1, 1, False), (w_plus, 1, True)):  # independent solves
        x = cp.Variable(12, nonneg=nonnegative)
        reference = cp.Problem(cp.Minimize(cp.norm(x, p)), [rows @ x >= 1])
        reference.solve(solver="CLARABEL")
        assert is_optimal(np.linalg.norm(w, p), reference.value), (p, nonnegative)


@check("`svm.spectral_att_svm`")
def _():
    problem, alpha = small(), [1, 2, 3]
    W2 = svm.spectral_att_svm(problem.X, problem.Z, alpha)
    W_fro = svm.att_svm(problem.X, problem.Z, alpha)
    assert constraint_margins(problem, W2, alpha).min() >= 1 - 1e-7
    assert np.linalg.norm(W2, 2) <= np.linalg.norm(W_fro, 2) * (1 + 1e-6)  # smallest spectral norm
    assert is_optimal(np.linalg.norm(W2, 2), svm_value(selection_pairs(problem, alpha), 4, "spec"))


@check("`model.min_margin`")
def _():
    problem, W, alpha = small(), random_W(), [1, 2, 3]
    assert abs(model.min_margin(problem, W, alpha) - constraint_margins(problem, W, alpha).min()) < TOL


# ------------------------------------------------------------------ the prelude (linear classifiers)

def linear_data(n: int = 6, d: int = 3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    return linear.separable(n, d, seed=seed)


@check("`linear.separable`")
def _():
    X, y = linear_data()
    assert X.shape == (6, 3) and y.shape == (6,) and set(y.tolist()) <= {-1.0, 1.0}
    assert abs(np.linalg.norm(X, axis=1).max() - 1) < TOL  # R = max_i ||x_i||, scaled to one


@check("`linear.margins`")
def _():
    X, y = linear_data()
    w = np.array([0.3, -1.2, 2.0])
    assert close(linear.margins(X, y, w), [y[i] * X[i] @ w for i in range(len(y))])


@check("`linear.normalized_margin`")
def _():
    X, y = linear_data()
    w = np.array([0.3, -1.2, 2.0])
    assert close(linear.normalized_margin(X, y, w), min(y[i] * X[i] @ w for i in range(len(y))) / np.linalg.norm(w))


@check("`linear.svm`")
def _():
    import cvxpy as cp
    X, y = linear_data()
    sol = linear.svm(X, y)
    m = y * (X @ sol.w)
    assert m.min() > 1 - 1e-9 and close(sol.w, (sol.alpha * y) @ X) and (sol.alpha >= 0).all()
    assert (sol.support == (np.abs(m - 1) <= 1e-9)).all() and close(sol.margin, 1 / np.linalg.norm(sol.w))
    w = cp.Variable(3)
    value = cp.Problem(cp.Minimize(cp.norm(w)), [cp.multiply(y, X @ w) >= 1]).solve(solver="CLARABEL")
    assert is_optimal(float(np.linalg.norm(sol.w)), value)


@check("`linear.log_loss`")
def _():
    X, y = linear_data()
    w = np.array([0.3, -1.2, 2.0])
    m = y * (X @ w)
    assert close(np.exp(linear.log_loss(X, y, w)), np.exp(-m).mean())
    assert close(np.exp(linear.log_loss(X, y, w, loss="logistic")), np.log1p(np.exp(-m)).mean())


@check("`linear.weights`")
def _():
    X, y = linear_data()
    w = np.array([0.3, -1.2, 2.0])
    q = linear.weights(X, y, w, loss="logistic")
    grad = linear.gradient(X, y, w, loss="logistic")
    direction = (q * y) @ X
    assert close(q.sum(), 1.0) and (q > 0).all()
    assert close(-grad / np.linalg.norm(grad), direction / np.linalg.norm(direction))


@check("`linear.smoothness`")
def _():
    X, y = linear_data()
    w0 = np.array([0.1, 0.2, -0.1])
    beta = float(linear.smoothness(X, y, w0))
    assert close(beta, np.linalg.norm(X, axis=1).max() ** 2 * np.exp(-y * (X @ w0)).mean())
    for w in (w0, 0.5 * w0):  # points of the sublevel set {L <= L(w0)}: the Hessian is below beta_0
        assert np.linalg.eigvalsh(linear.hessian(X, y, w)).max() <= beta


@check("`linear.gd(X, y, lr=eta, steps=...).w[j]`")
def _():
    X, y = linear_data()
    eta = 0.5
    run = linear.gd(X, y, lr=eta, steps=6, record_every=3)
    w = np.zeros(3)
    for t in range(7):
        if t in run.steps.tolist():
            assert close(run.w[run.steps.tolist().index(t)], w)
        w = w - eta * linear.gradient(X, y, w)
    assert run.steps.tolist() == [0, 3, 6]


@check("`linear.offset`")
def _():
    X, y = linear_data(d=4)
    sol, c = linear.svm(X, y), 0.25
    w_tilde = linear.offset(X, y, c)
    S = np.flatnonzero(sol.support)
    assert len(S) < X.shape[1]  # fewer support vectors than dimensions: "least norm" is a real condition
    alpha = c * np.exp(-linear.margins(X, y, w_tilde)[S])  # (H): m_i(w_tilde) = log(c / alpha_i) on S
    assert close(alpha @ (y[S, None] * X[S]), sol.w, 1e-9) and (alpha > 0).all()
    assert close(w_tilde, np.linalg.pinv(y[S, None] * X[S]) @ (y[S] * (X[S] @ w_tilde)), 1e-9)  # least norm


@check("`linear.residual`")
def _():
    X, y = linear_data()
    w, t = np.array([[0.3, -1.2, 2.0], [1.0, 0.0, 1.0]]), np.array([1.0, 20.0])
    assert close(linear.residual(X, y, w, t), w - np.log(t)[:, None] * linear.svm(X, y).w)


# ------------------------------------------------------------------ the tests

def test_the_page_has_code_rows():
    assert len(ROWS) >= 40, sorted(ROWS)


def test_every_code_row_has_a_check():
    assert not set(ROWS) - set(CHECKS), f"rows of the notation page without a check: {sorted(set(ROWS) - set(CHECKS))}"
    assert not set(CHECKS) - set(ROWS), f"checks without a row on the notation page: {sorted(set(CHECKS) - set(ROWS))}"


def test_the_row_parser_reads_only_code_columns():
    text = ("| symbol | code | meaning |\n|---|---|---|\n| $a$ | `f(x)` | a |\n| $b$ | | b |\n\n"
            "| symbol | meaning | elsewhere |\n|---|---|---|\n| $c$ | `not code` | c |\n")
    assert list(code_rows(text)) == ["`f(x)`"]


@pytest.mark.parametrize("code", sorted(CHECKS))
def test_row(code):
    CHECKS[code]()
