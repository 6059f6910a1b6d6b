"""Gradient descent on the causal model (`causal.gd`) compiled with Numba, in the space of the logits.

At Chapter 6's sizes (five languages of ten sentences of five tokens in R^100, a thousand steps) a step of the
batched torch loop forms the d x d gradient and updates W, and the d^2 work and some fifty tensor operations set its
time. The gradient, though, is a sum of rank-one terms, G = sum_ikt g_ikt x_it x_ik^T (query k of sequence i,
candidate t), so a step W -= c G moves every logit by

    x_it^T G x_ik = sum_jlu g_jlu (x_it . x_ju) (x_jl . x_ik),

which takes the Gram matrix of the tokens (computed once) and n^2 K T^2 operations, whatever d. This loop keeps
the logits and the coefficients C of W = W0 - sum_ikt C_ikt x_it x_ik^T, never W itself; `gd` forms W at the
recorded steps. ||G||_F^2 = sum_ikt g_ikt (x_it^T G x_ik) comes from the same sums. Where the terms of G cancel
(||G||^2 below GUARD times the square of the sum of the terms' sizes, where its round-off could exceed ~1e-12 of
it: near a stationary point, or with tokens repeated across sequences) the loop takes the norm of that problem's
G from its terms, as the torch loop does, through the QR factorization of the queries (`_direct_norm`), so the
norm never loses the digits the torch loop keeps.

It follows `train._cpu_loop`'s design (read its docstring): every array ends in the lane axis, one problem per lane,
blocks of up to BLOCK problems, float64, exponentials and logarithms through libmvec, and each lane's arithmetic its
own, so a problem's run does not depend on the batch it is in. Each query's gradient is `_Plan.gradient`'s, in log
space: the per-query logit gradient of `train.logit_gradient` (`train._diagonal_loop._sequence`, label +1, the
query's own values) and the queries combined as sum_q e^{w_q - top} h_q with top the largest log weight, so it stays
exact however far softmax saturates. The step is the torch loop's: -lr G / ||G||_F (no move where G = 0) or the
plain -lr e^{top - log(nK)} G. The two loops sum in other orders and agree to round-off step by step
(tests/lib/test_causal_compiled.py). Numba's cache keys on the file that defines a function: after an edit of
`train._diagonal_loop` or `train._cpu_loop`, clear this module's files in ``__pycache__``.
"""

from __future__ import annotations

import math

import numba
import numpy as np
import torch

from ..train._cpu_loop import LOSS_CODES, _each_block, _lanes
from ..train._diagonal_loop import LANE_MATH, LOG_SCALE, ROWS, _combine, _sequence

__all__ = ["gd"]  # `causal.gd` runs it

GUARD = 1e-4  # ||G||^2 below GUARD (sum of the terms' sizes)^2: the norm from G formed in full
MAX_TOKENS = 512  # engine "auto" runs the compiled loop where n T is at most this (its step costs (n T)^2 K)


@numba.njit(cache=True, fastmath=LANE_MATH, error_model="numpy")
def _direct_norm(b, X, R, D, seq, counts, A, M):
    """||G||_F on lane b from the terms of G = sum_j A_j q_j^T, A_j = sum_t D[j, t] x_{seq_j, t}, as the torch loop
    takes it (scaled by its largest entry first), through the QR factorization [q_1 ... q_J] = V R computed once:
    ||G||_F = ||A^T R^T||_F (V has orthonormal columns), d min(d, J) entries instead of d^2."""
    n, T, d, L = X.shape
    J, rank = D.shape[0], R.shape[0]
    for j in range(J):
        for p in range(d):
            A[j, p] = 0.0
        for t in range(counts[j]):
            for p in range(d):
                A[j, p] += D[j, t, b] * X[seq[j], t, p, b]
    scale = 0.0
    for p in range(d):
        for c in range(rank):
            M[p, c] = 0.0
            for j in range(J):
                M[p, c] += A[j, p] * R[c, j, b]
            scale = max(scale, abs(M[p, c]))
    if scale == 0:
        return 0.0
    total = 0.0
    for p in range(d):
        for c in range(rank):
            unit = M[p, c] / scale
            total += unit * unit
    return scale * math.sqrt(total)


@numba.njit(cache=True, fastmath=LANE_MATH, error_model="numpy", nogil=True)
def _run(XX, X, R, L0, GAMMA, seq, pos, counts, loss, log_nK, lr, normalized, record, Cs):
    """Every lane's run to step record[-1], lanes last: XX (n, T, n, T, L) the Gram matrix of the tokens, X
    (n, T, d, L), R (min(d, J), J, L) the R factor of the queries [q_1 ... q_J] = V R, L0 (J, T, L) the logits
    x_it^T W0 x_ik of the J queries with two candidates or more (query j is token pos[j] of sequence seq[j], with
    candidates 0..counts[j]-1), GAMMA (J, T, L) their token values. The
    coefficients C (W = W0 - sum_jt C[j, t] x_{seq_j t} x_{seq_j pos_j}^T) at the steps `record` go to Cs (records,
    L, J, T). Returns the first step at which a lane's logits or coefficients are not finite, or -1."""
    n, T, d, L = X.shape
    J = L0.shape[0]
    logits, C, g = L0.copy(), np.zeros((J, T, L)), np.empty((J, T, L))
    s, e, delta, P = np.empty((J, T, L)), np.empty((J, T, L)), np.empty((J, T, L)), np.empty((J, n, T, L))
    ones, f, weights, lanes = np.ones((J, L)), np.empty((J, L)), np.empty((J, L)), np.empty((ROWS, L))
    norms, sizes, factor, A, M = np.empty(L), np.empty(L), np.empty(L), np.empty((J, d)), np.empty((d, R.shape[0]))
    r = 0
    for step in range(record[-1] + 1):
        if step == record[r]:
            for b in range(L):
                for j in range(J):
                    for t in range(T):
                        Cs[r, b, j, t] = C[j, t, b]
            r += 1
            if r == len(record):
                return -1
        for j in range(J):
            for t in range(counts[j]):
                for b in range(L):
                    g[j, t, b] = logits[j, t, b]
            _sequence(j, counts[j], ones, GAMMA, loss, 0.0, g, s, e, f, weights, lanes)
        _combine(J, counts, ones, g, weights, lanes)  # g: the direction D of each query, lanes[LOG_SCALE]: top
        for j2 in range(J):  # P[j2, i, t] = sum_u D[j2, u] (x_it . x_{seq j2, u})
            for i in range(n):
                for t in range(T):
                    for b in range(L):
                        P[j2, i, t, b] = 0.0
                    for u in range(counts[j2]):
                        for b in range(L):
                            P[j2, i, t, b] += g[j2, u, b] * XX[i, t, seq[j2], u, b]
        for b in range(L):
            norms[b], sizes[b] = 0.0, 0.0
        for j in range(J):  # delta[j, t] = x_it^T G x_ik = sum_j2 P[j2, i, t] (x_{seq j2, pos j2} . x_ik)
            i, k = seq[j], pos[j]
            for t in range(counts[j]):
                for b in range(L):
                    delta[j, t, b] = 0.0
                for j2 in range(J):
                    for b in range(L):
                        delta[j, t, b] += P[j2, i, t, b] * XX[seq[j2], pos[j2], i, k, b]
                for b in range(L):
                    norms[b] += g[j, t, b] * delta[j, t, b]
                    sizes[b] += abs(g[j, t, b]) * math.sqrt(XX[i, t, i, t, b] * XX[i, k, i, k, b])
        for b in range(L):
            if normalized and not norms[b] >= GUARD * sizes[b] * sizes[b]:  # the terms cancel (or are not finite)
                norms[b] = _direct_norm(b, X, R, g, seq, counts, A, M)
            elif normalized:
                norms[b] = math.sqrt(norms[b])
        for b in range(L):
            if normalized:
                factor[b] = lr / norms[b] if norms[b] > 0 else 0.0
            else:
                factor[b] = lr * math.exp(lanes[LOG_SCALE, b] - log_nK)
        finite = True
        for j in range(J):
            for t in range(counts[j]):
                for b in range(L):
                    logits[j, t, b] -= factor[b] * delta[j, t, b]
                    C[j, t, b] += factor[b] * g[j, t, b]
                    finite &= math.isfinite(logits[j, t, b]) and math.isfinite(C[j, t, b])
        if not finite:
            return step + 1
    return -1


def gd(problem, W0: torch.Tensor, L0: torch.Tensor, gamma: torch.Tensor, first: int, loss: str, lr: float,
       normalized: bool, record) -> tuple[torch.Tensor, int | None]:
    """The iterates W (records, *batch, d, d) at the increasing steps ``record`` of ``causal.gd`` from W0
    (*batch, d, d), whose logits x_it^T W0 x_ik are L0 (*batch, n, K, T), with token values gamma
    (*batch, n, K, T), on the queries from ``first`` on (each with two candidates or more); and the first step at
    which an iterate is not finite (None if none). No argument is checked: ``causal.gd`` checks them."""
    batch, n, T, K, d = problem.batch_shape, problem.n, problem.T, problem.K, problem.d
    size, padded, lanes_last = _lanes(batch)
    X = problem.X.expand(batch + (n, T, d)).reshape(size, n * T, d)
    XX = torch.bmm(X, X.transpose(1, 2)).reshape(batch + (n, T, n, T))
    J = n * (K - first)
    queries = [part.expand(batch + (n, K, T))[..., first:, :].reshape(batch + (J, T)) for part in (L0, gamma)]
    seq, pos = np.repeat(np.arange(n), K - first), np.tile(np.arange(first, K), n)
    counts = pos + 1 if problem.causal else np.full(J, T)
    Q = problem.queries.expand(batch + (n, K, d))[..., first:, :].reshape(batch + (J, d))
    R = torch.from_numpy(np.linalg.qr(Q.mT.numpy(), mode="r")) if J else torch.zeros(batch + (0, 0),
                                                                                  dtype=torch.float64)
    arrays = (lanes_last(XX, (n, T, n, T)), lanes_last(problem.X, (n, T, d)), lanes_last(R, R.shape[-2:]),
              *(lanes_last(part, (J, T)) for part in queries))
    record = np.asarray(record, dtype=np.int64)
    Cs = np.zeros((len(record), padded, J, T))

    def run_block(block: slice) -> int:
        part = np.zeros(Cs[:, block].shape)
        step = _run(*(np.ascontiguousarray(a[..., block]) for a in arrays), seq, pos, counts.astype(np.int64),
                    LOSS_CODES[loss], math.log(n * K), float(lr), bool(normalized), record, part)
        Cs[:, block] = part
        return int(step)
    diverged = [step for step in _each_block(run_block, padded) if step >= 0]
    C = torch.from_numpy(Cs[:, :size]).reshape(len(record), size, n, K - first, T)
    A = torch.einsum("rbikt,bitd->rbikd", C, problem.X.expand(batch + (n, T, d)).reshape(size, n, T, d))
    Q = problem.queries.expand(batch + (n, K, d)).reshape(size, n, K, d)[:, :, first:]
    G = torch.einsum("rbikd,bike->rbde", A, Q)  # sum_ikt C_ikt x_it x_ik^T
    W = W0.expand(batch + (d, d)).reshape(size, d, d) - G
    return W.reshape((len(record),) + batch + (d, d)), min(diverged) if diverged else None
