"""Quantities of the theory: token scores, optimal and locally-optimal tokens, margins, support tokens, correlation."""

from __future__ import annotations

import numpy as np
import torch

from . import data, svm
from .checks import as_index, as_tensor, choice, positive_int
from .data import Problem
from .model import attention, logits, queries, token_values

SUPPORT_TOL = 1e-6  # a token is a support token of an Att-SVM solution when its margin is within this of 1


def token_scores(problem: Problem) -> torch.Tensor:
    """gamma_it = Y_i v^T x_it: how much selecting token t helps classify sequence i, shape (..., n, T)."""
    return problem.Y[..., None] * token_values(problem)


def optimal_tokens(problem: Problem) -> torch.Tensor:
    """opt_i = argmax_t gamma_it, the token a linear head wants attention to select, shape (..., n)."""
    return token_scores(problem).argmax(-1)


def correlation(A, B) -> np.ndarray:
    """<A, B> / (||A||_F ||B||_F) over the last two dimensions, broadcast over leading ones (numpy result)."""
    A, B = as_tensor(A, "A", device="cpu"), as_tensor(B, "B", device="cpu")
    if A.ndim < 2 or B.ndim < 2 or A.shape[-2:] != B.shape[-2:]:
        raise ValueError(f"A and B must be matrices of the same shape (..., p, q), got {tuple(A.shape)} and "
                         f"{tuple(B.shape)}")
    try:
        torch.broadcast_shapes(A.shape, B.shape)
    except RuntimeError as err:
        raise ValueError(f"the batch shapes of A {tuple(A.shape)} and B {tuple(B.shape)} do not broadcast") from err
    inner = (A * B).sum((-2, -1))
    norms = A.norm(dim=(-2, -1)) * B.norm(dim=(-2, -1))
    if (norms == 0).any():
        raise ValueError("correlation of a zero matrix is undefined: A and B must be non-zero")
    return (inner / norms).clamp(-1.0, 1.0).numpy()  # |<A,B>| <= |A||B| can fail by one rounding


def margins(problem: Problem, alpha, W) -> np.ndarray:
    """(x_{i,alpha_i} - x_it)^T W z_i for every token, shape (..., n, T) (0 at t = alpha_i)."""
    alpha = torch.as_tensor(as_index(alpha, "alpha", problem.batch_shape + (problem.n,), problem.T), device=problem.X.device)
    scores = logits(problem, W)
    return (scores.gather(-1, alpha[..., None]) - scores).cpu().numpy()


def support_tokens(problem: Problem, alpha, W) -> np.ndarray:
    """Boolean mask (..., n, T) of the support tokens of W: those t != alpha_i whose margin is exactly 1."""
    return np.abs(margins(problem, alpha, W) - 1) <= SUPPORT_TOL


def cosine(a, b) -> np.ndarray:
    """<a, b> / (||a|| ||b||) over the last dimension, broadcast over leading ones (for vectors, e.g. p)."""
    a, b = as_tensor(a, "a", device="cpu"), as_tensor(b, "b", device="cpu")
    norms = a.norm(dim=-1) * b.norm(dim=-1)
    if (norms == 0).any():
        raise ValueError("the cosine of a zero vector is undefined: a and b must be non-zero")
    return ((a * b).sum(-1) / norms).clamp(-1.0, 1.0).numpy()


def neighbour_selections(alpha, T: int) -> torch.Tensor:
    """Every selection that differs from alpha (n,) in exactly one sequence (T tokens each): (n (T - 1), n)."""
    alpha = torch.as_tensor(as_index(alpha, "alpha", np.shape(alpha)[-1:], positive_int(T, "T")))
    rows = [alpha.clone().index_fill_(0, torch.tensor([i]), t) for i in range(len(alpha)) for t in range(T)
            if t != int(alpha[i])]
    return torch.stack(rows)


def _svm_where_feasible(problem: Problem, alpha: np.ndarray, norm: str = "fro"):
    """(feasible flags, Att-SVM solutions with NaN where infeasible), both of batch shape (+ (d, d))."""
    feasible = np.asarray(svm.feasible(problem.X, queries(problem), alpha))
    solutions = np.full(problem.batch_shape + (problem.d, problem.d), np.nan)
    if feasible.any():
        chosen = torch.as_tensor(feasible)
        instances = problem[chosen] if problem.batch_shape else problem
        solutions[feasible] = svm.att_svm(instances.X, instances.Z, alpha[feasible] if alpha.ndim > 1 else alpha,
                                          norm=norm)
    return feasible, solutions


def locally_optimal(problem: Problem, alpha, *, norm: str = "fro", key=None) -> np.ndarray:
    """Whether alpha is locally optimal: its SVM exists and gamma_{i,alpha_i} > gamma_it for every support token t.

    norm: the Att-SVM whose support tokens count ("fro", the definition; "nuc", its analogue for (K, Q)).
    key: for paper B's prompt model, the key-query matrix: then the SVM is the p-SVM (`svm.prompt_svm`).
    Globally-optimal tokens (alpha = opt) are locally optimal. Returns a bool array of batch shape.
    """
    alpha = as_index(alpha, "alpha", problem.batch_shape + (problem.n,), problem.T)
    choice(norm, "norm", tuple(svm.SOLVERS))
    if key is None:
        feasible, solutions = _svm_where_feasible(problem, alpha, norm)
        on_margin = np.abs(margins(problem, alpha, np.nan_to_num(solutions)) - 1) <= SUPPORT_TOL
    else:
        keys = (problem.X @ as_tensor(key, "key")).cpu().numpy()
        feasible, p = np.ones(problem.batch_shape, bool), svm.prompt_svm(problem.X, key, alpha)
        chosen_keys = np.take_along_axis(keys, alpha[..., None, None], axis=-2)
        on_margin = np.abs(np.einsum("...ntd,...d->...nt", chosen_keys - keys, p) - 1) <= SUPPORT_TOL
    gamma = token_scores(problem).cpu().numpy()
    chosen = np.take_along_axis(gamma, alpha[..., None], axis=-1)
    return feasible & np.all((chosen > gamma) | ~on_margin, axis=(-2, -1))


def convergence(problem: Problem, W, *, threshold: float = 0.99) -> np.ndarray:
    """Classify where gradient descent went, from its final iterate W (..., d, d): "global" if attention selects
    the optimal tokens and corr(W, W^mm) >= threshold; "local" if it selects other, locally-optimal tokens
    alpha and corr(W, W_alpha^mm) >= threshold; "none" otherwise. Returns a string array of batch shape.
    """
    selection = attention(problem, W).argmax(-1).cpu().numpy()
    feasible, solutions = _svm_where_feasible(problem, selection)
    aligned = np.zeros(problem.batch_shape, dtype=bool)
    aligned[feasible] = correlation(np.asarray(W)[feasible] if problem.batch_shape else W,
                                    solutions[feasible]) >= threshold
    is_optimal = np.all(selection == optimal_tokens(problem).cpu().numpy(), axis=-1)
    labels = np.full(problem.batch_shape, "none", dtype=object)
    labels[aligned & is_optimal] = "global"
    labels[aligned & ~is_optimal & locally_optimal(problem, selection)] = "local"
    return labels.astype(str)


def sample_feasible(n: int, T: int, d: int, *, count: int, seed: int, max_draws: int = 2000,
                    selection: str = "optimal"):
    """Up to `count` random problems (`data.random_problem`) whose Att-SVM is feasible for the optimal tokens
    (selection="optimal") or for a random selection ("random"), drawing at most `max_draws` candidates.

    Returns (problem batch, alpha, draws): the feasible problems in the order drawn (fewer than `count` when
    feasibility is rare), their selections, and how many candidates were drawn to find them.
    """
    choice(selection, "selection", ("optimal", "random"))
    count, max_draws = positive_int(count, "count"), positive_int(max_draws, "max_draws")
    batch = data.random_problem(n, T, d, seed=seed, batch=max_draws)
    alpha = optimal_tokens(batch) if selection == "optimal" else data.random_selection(batch, seed=seed + 1)
    found, start, size = [], 0, count
    while start < max_draws and len(found) < count:  # chunks double in size while feasibility is rare
        chunk = slice(start, min(start + size, max_draws))
        found += [start + k for k in np.flatnonzero(svm.feasible(batch.X[chunk], batch.Z[chunk], alpha[chunk]))]
        start, size = chunk.stop, 2 * size
    draws = found[count - 1] + 1 if len(found) >= count else start
    chosen = torch.as_tensor(found[:count], dtype=torch.long)
    return batch[chosen], alpha[chosen], draws
