"""A straightforward reference implementation, written the way a first implementation would be: one problem at a
time in a Python loop, gradients by autograd through softmax, and a cvxpy problem rebuilt for every solve with one
constraint per token pair. It is correct (before softmax saturates) and slow; `run.py` times it against the
library on the same data."""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import torch


def att_svm(X: np.ndarray, Z: np.ndarray, alpha: np.ndarray, norm: str = "fro") -> np.ndarray | None:
    """The Att-SVM of one problem (X (n, T, d), Z (n, d)), or None if infeasible: cvxpy + Clarabel."""
    n, T, d = X.shape
    W = cp.Variable((d, d))
    constraints = [(X[i, alpha[i]] - X[i, t]) @ W @ Z[i] >= 1 for i in range(n) for t in range(T) if t != alpha[i]]
    objective = cp.norm(W, "fro") if norm == "fro" else cp.normNuc(W)
    problem = cp.Problem(cp.Minimize(objective), constraints)
    problem.solve(solver=cp.CLARABEL)
    return W.value if problem.status == cp.OPTIMAL else None


def _loss(X, Y, Z, v, W, V=None):
    """Logistic loss of one problem, by the book: softmax attention, a linear head v or a ReLU head V."""
    s = torch.softmax(torch.einsum("ntd,de,ne->nt", X, W, Z), dim=-1)
    f = (s * (X @ v)).sum(-1) if V is None else torch.relu((s[:, :, None] * X).sum(1) @ V).sum(-1)
    return torch.nn.functional.softplus(-Y * f).mean()


def gd(X, Y, Z, v, *, steps: int, lr: float, W0=None, K0=None, Q0=None, V=None, eps: float = 0.0) -> torch.Tensor:
    """Normalized gradient descent (steps -lr g / (||g|| + eps)) on W (given W0) or on (K, Q) (given K0, Q0) for
    ONE problem, with the linear head v or the ReLU head V; returns the iterates W(k) (steps + 1, d, d)."""
    params = [p.clone().requires_grad_(True) for p in ((W0,) if W0 is not None else (K0, Q0))]
    weights = (lambda: params[0]) if W0 is not None else (lambda: params[0] @ params[1].T)
    iterates = []
    for _ in range(steps + 1):
        W = weights()
        iterates.append(W.detach().clone())
        grads = torch.autograd.grad(_loss(X, Y, Z, v, W, V), params)
        with torch.no_grad():
            for p, g in zip(params, grads):
                norm = g.norm()
                if norm > 0:
                    p -= lr * g / (norm + eps)
    return torch.stack(iterates)


def mirror_descent(X, Y, Z, v, *, p: float, steps: int, lr: float, W0=None, K0=None, Q0=None,
                   eps: float = 2.220446049250313e-16) -> torch.Tensor:
    """The authors' loop of normalized mirror descent with potential ||.||_p^p for ONE problem, on W (given W0) or
    on (K, Q) (given K0, Q0, with the ridge eps (||K||^2 + ||Q||^2)): autograd's gradient g, divided by its dual
    norm ||g||_q + eps (q = p / (p - 1)), then w' = sign(w)|w|^(p-1) - lr g, w = sign(w')|w'|^(1/(p-1)) for each
    parameter; returns the iterates W(k) (steps + 1, d, d)."""
    params = [w.clone() for w in ((W0,) if W0 is not None else (K0, Q0))]
    q = p / (p - 1)
    iterates = []
    for _ in range(steps + 1):
        leaves = [w.clone().requires_grad_(True) for w in params]
        W = leaves[0] if W0 is not None else leaves[0] @ leaves[1].T
        iterates.append(W.detach().clone())
        loss = _loss(X, Y, Z, v, W)
        if W0 is None:
            loss = loss + eps * sum((w * w).sum() for w in leaves)
        grads = torch.autograd.grad(loss, leaves)
        with torch.no_grad():
            for k, g in enumerate(grads):
                norm = torch.linalg.vector_norm(g, q) + eps
                g = g / norm if norm > 0 else g  # (eps = 0 and a zero gradient, e.g. of Q at K = 0)
                dual = torch.sign(params[k]) * params[k].abs() ** (p - 1) - lr * g
                params[k] = torch.sign(dual) * dual.abs() ** (1 / (p - 1))
    return torch.stack(iterates)


def lp_svm(X: np.ndarray, Z: np.ndarray, alpha: np.ndarray, p: float) -> np.ndarray | None:
    """The entrywise lp Att-SVM of one problem by cvxpy's pnorm + Clarabel (one constraint per token pair)."""
    n, T, d = X.shape
    W = cp.Variable((d, d))
    constraints = [(X[i, alpha[i]] - X[i, t]) @ W @ Z[i] >= 1 for i in range(n) for t in range(T) if t != alpha[i]]
    problem = cp.Problem(cp.Minimize(cp.pnorm(cp.vec(W, order="C"), p)), constraints)
    problem.solve(solver=cp.CLARABEL)
    return W.value if problem.status == cp.OPTIMAL else None


def polyak(X, Y, Z, v, *, steps: int, W0=None) -> torch.Tensor:
    """Polyak steps W <- W - (L - L*) / ||g||_F^2 g on W for ONE problem, L and g by autograd through softmax and
    L* = mean l(max_t Y_i v^T x_it) as a number (a step is skipped where L - L* <= 0 or g = 0); returns the
    iterates W(k) (steps + 1, d, d)."""
    W = torch.zeros(X.shape[-1], X.shape[-1], dtype=X.dtype) if W0 is None else W0.clone()
    L_star = torch.nn.functional.softplus(-(Y[:, None] * (X @ v)).amax(-1)).mean()
    iterates = []
    for _ in range(steps + 1):
        iterates.append(W.clone())
        leaf = W.clone().requires_grad_(True)
        loss = _loss(X, Y, Z, v, leaf)
        (g,) = torch.autograd.grad(loss, leaf)
        gap, squared = loss.detach() - L_star, (g * g).sum()
        if gap > 0 and squared > 0:
            W = W - gap / squared * g
    return torch.stack(iterates)


def diagonal_gd(X, Y, Z, v, *, steps: int, lr: float, k0, q0) -> torch.Tensor:
    """Normalized gradient descent on the factors (k, q) of W = diag(k * q) for ONE problem, by autograd: the
    gradients of k, q and w = k * q, steps -lr (g_k, g_q) / ||g_w||; returns the diagonals w(k) (steps + 1, d)."""
    k, q = k0.clone().requires_grad_(True), q0.clone().requires_grad_(True)
    iterates = []
    for _ in range(steps + 1):
        w = k * q
        iterates.append(w.detach().clone())
        g_k, g_q, g_w = torch.autograd.grad(_loss(X, Y, Z, v, torch.diag(w)), (k, q, w))
        with torch.no_grad():
            norm = g_w.norm()
            if norm > 0:
                k -= lr * g_k / norm
                q -= lr * g_q / norm
    return torch.stack(iterates)


def ntp_gd(ids, labels, E, *, steps: int, lr: float, W0=None) -> torch.Tensor:
    """Normalized gradient descent on W of the next-token model for ONE problem (ids (n, T), labels (n,), embeddings
    E (K, d)): the loss -mean log p_(i, y_i), p the attention mass on the label's positions, by autograd through
    softmax; returns the iterates W(k) (steps + 1, d, d)."""
    X, Zq = E[ids], E[ids[:, -1]]
    is_label = (ids == labels[:, None]).to(E.dtype)
    W = (torch.zeros(E.shape[1], E.shape[1], dtype=E.dtype) if W0 is None else W0.clone()).requires_grad_(True)
    iterates = []
    for _ in range(steps + 1):
        iterates.append(W.detach().clone())
        s = torch.softmax(torch.einsum("ntd,de,ne->nt", X, W, Zq), dim=-1)
        (g,) = torch.autograd.grad(-torch.log((s * is_label).sum(-1)).mean(), W)
        with torch.no_grad():
            norm = g.norm()
            if norm > 0:
                W -= lr * g / norm
    return torch.stack(iterates)


def spectral_svm(X: np.ndarray, Z: np.ndarray, alpha: np.ndarray) -> np.ndarray | None:
    """The spectral-norm Att-SVM of one problem: cvxpy's sigma_max + Clarabel (one constraint per token pair)."""
    n, T, d = X.shape
    W = cp.Variable((d, d))
    constraints = [(X[i, alpha[i]] - X[i, t]) @ W @ Z[i] >= 1 for i in range(n) for t in range(T) if t != alpha[i]]
    problem = cp.Problem(cp.Minimize(cp.sigma_max(W)), constraints)
    problem.solve(solver=cp.CLARABEL)
    return W.value if problem.status == cp.OPTIMAL else None


def graph_svm(ids: list, labels: list, E: np.ndarray) -> np.ndarray | None:
    """The Frobenius graph SVM of one next-token problem: the priority graph of each query token by networkx, its
    strongly connected components, then cvxpy + Clarabel with one constraint per (sequence, other token):
    (e_y - e_x)^T W e_k == 0 inside the label's component, >= 1 across."""
    import networkx as nx

    graphs = {}
    for row, y in zip(ids, labels):
        graph = graphs.setdefault(row[-1], nx.DiGraph())
        graph.add_nodes_from(row)
        graph.add_edges_from((y, x) for x in row if x != y)
    component = {k: {x: c for c in map(frozenset, nx.strongly_connected_components(g)) for x in c}
                 for k, g in graphs.items()}
    d = E.shape[1]
    W = cp.Variable((d, d))
    constraints = []
    for row, y in zip(ids, labels):
        k = row[-1]
        for x in row:
            if x != y:
                margin = (E[y] - E[x]) @ W @ E[k]
                constraints.append(margin == 0 if component[k][x] == component[k][y] else margin >= 1)
    problem = cp.Problem(cp.Minimize(cp.norm(W, "fro")), constraints)
    problem.solve(solver=cp.CLARABEL)
    return W.value if problem.status == cp.OPTIMAL else None


def diagonal_l1_svm(X: np.ndarray, Z: np.ndarray, alpha: np.ndarray) -> np.ndarray | None:
    """The l1 diagonal Att-SVM of one problem: min ||w||_1 s.t. (x_(i,alpha_i) - x_it)^T diag(w) z_i >= 1, cvxpy
    + Clarabel (one constraint per token pair); returns w (d,)."""
    n, T, d = X.shape
    w = cp.Variable(d)
    constraints = [((X[i, alpha[i]] - X[i, t]) * Z[i]) @ w >= 1 for i in range(n) for t in range(T) if t != alpha[i]]
    problem = cp.Problem(cp.Minimize(cp.norm1(w)), constraints)
    problem.solve(solver=cp.CLARABEL)
    return w.value if problem.status == cp.OPTIMAL else None
