"""Quantities of the theory: token scores, optimal and locally-optimal tokens, margins, support tokens, correlation.

Arguments come in the order of ``attnsvm.model``: the problem, then the key-query matrix ``W``, then a selection
``alpha`` (one token index per sequence).
"""

from __future__ import annotations

import numpy as np
import torch
from numpy.typing import ArrayLike

from . import data, svm
from ._checks import as_array, as_index, as_tensor, budget, choice, finite_result, positive_int, require_shape
from .data import Problem, _as_problem, _memory, _real, _seed, _sizes
from .model import as_key_query, attention, logits, queries, token_values

__all__ = ["convergence", "correlation", "cosine", "locally_optimal", "margins", "neighbour_selections",
           "optimal_tokens", "sample_feasible", "support_tokens", "token_scores", "SUPPORT_TOL", "MAX_DRAWS",
           "OVERFLOW", "Cone", "ConeSides", "cone_constants", "cone_sides", "Reduction", "ResidualOffset", "leak",
           "limiting_weights", "reduction_constants", "residual_offset", "surrogate", "weight_ratios"]
_INDICES = "an array of integer token indices"

SUPPORT_TOL = 1e-6  # a token is a support token of an Att-SVM solution when its margin is within this of 1
MAX_DRAWS = 10**7  # sample_feasible draws at most this many random problems
OVERFLOW = "the logits x_it^T W z_i of problem and W overflow float64: scale problem.X, problem.Z or W down"


def _with_queries(problem: object) -> Problem:
    """`problem` checked to be a Problem with query tokens Z (paper A's model)."""
    if _as_problem(problem).Z is None:
        raise ValueError("problem has no query tokens Z (a prompt-model problem, trained by train.gd_prompt): this "
                         "function needs the queries z_i of paper A's model; build the Problem with Z")
    return problem



def _selection(problem: Problem, alpha: ArrayLike) -> torch.Tensor:
    """`alpha` checked to hold one token index per sequence of `problem`, as a long tensor (..., n)."""
    shape = problem.batch_shape + (problem.n,)
    alpha = as_array(alpha, "alpha", _INDICES)
    return torch.as_tensor(as_index(alpha, "alpha", shape, problem.T), device=problem.X.device)


def _margins(problem: Problem, W: ArrayLike, alpha: torch.Tensor) -> torch.Tensor:
    """The margins of `margins`, as a tensor (unchecked for overflow); W may have extra leading dimensions."""
    scores = logits(problem, W).detach()
    return scores.gather(-1, alpha.expand(scores.shape[:-1])[..., None]) - scores


def _normalized_inner(A: torch.Tensor, B: torch.Tensor, dims: int | tuple[int, ...], zero: str) -> np.ndarray:
    """<A, B> / (||A|| ||B||) over `dims` (numpy); zero A or B raise `zero`. Where the largest entry of an A or B
    lies outside [1e-150, 1e150] (squares and products would over- or underflow), both are first divided by their
    largest entries: the ratio does not change, and in range it is computed as it always was."""
    _memory(np.prod(torch.broadcast_shapes(A.shape, B.shape)), "A and B (broadcast together)")
    A, B = A.detach(), B.detach()
    scales = [M.abs().amax(dims, keepdim=True) for M in (A, B)]
    if not all(((scale >= 1e-150) & (scale <= 1e150)).all() for scale in scales):
        if any((scale == 0).any() for scale in scales):
            raise ValueError(zero)
        A, B = A / scales[0], B / scales[1]
    norms = A.norm(dim=dims) * B.norm(dim=dims)
    if (norms == 0).any():
        raise ValueError(zero)
    return ((A * B).sum(dims) / norms).clamp(-1.0, 1.0).numpy()  # |<A,B>| <= |A||B| can fail by one rounding


def token_scores(problem: Problem) -> torch.Tensor:
    r"""The token scores :math:`\gamma_{it} = Y_i v^\top x_{it}`: how much selecting token t helps classify sequence i.

    Parameters
    ----------
    problem : Problem
        The problems (a batch).

    Returns
    -------
    Tensor
        The scores, shape (..., n, T).

    Raises
    ------
    TypeError
        If problem is not a ``Problem``.

    Examples
    --------
    >>> from attnsvm import data, theory
    >>> problem = data.Problem([[[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]]], [-1.0], [[1.0, 0.0]], [1.0, 0.0])
    >>> theory.token_scores(problem).tolist()
    [[-1.0, -0.0, 1.0]]
    """
    scores = _as_problem(problem).Y[..., None] * token_values(problem)
    return finite_result(scores, "token_scores", "problem.X times the head problem.v overflows float64: scale the "
                                                 "tokens or the head down")


def optimal_tokens(problem: Problem) -> torch.Tensor:
    r"""The optimal tokens :math:`\mathrm{opt}_i = \arg\max_t \gamma_{it}`, the tokens a linear head wants attention to
    select.

    Parameters
    ----------
    problem : Problem
        The problems (a batch).

    Returns
    -------
    Tensor
        The token indices, shape (..., n).

    Raises
    ------
    TypeError
        If problem is not a ``Problem``.

    Examples
    --------
    >>> from attnsvm import data, theory
    >>> problem = data.Problem([[[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]]], [-1.0], [[1.0, 0.0]], [1.0, 0.0])
    >>> theory.optimal_tokens(problem).tolist()
    [2]
    >>> tuple(theory.optimal_tokens(data.random_problem(3, 4, 2, seed=0, batch=5)).shape)
    (5, 3)
    """
    return token_scores(problem).argmax(-1)


def correlation(A: ArrayLike, B: ArrayLike) -> np.ndarray:
    r"""The correlation :math:`\langle A, B\rangle/(\|A\|_F \|B\|_F)` over the last two dimensions, broadcast over the
    leading ones.

    Parameters
    ----------
    A : ArrayLike
        Matrices, shape (..., p, q).
    B : ArrayLike
        Matrices, shape (..., p, q).

    Returns
    -------
    ndarray
        The correlations, shape (...).

    Raises
    ------
    ValueError
        If the shapes do not broadcast, or a matrix is zero.

    Examples
    --------
    >>> import numpy as np
    >>> from attnsvm import theory
    >>> float(theory.correlation(np.eye(2), 3 * np.eye(2)))
    1.0
    >>> round(float(theory.correlation(np.eye(2), [[1.0, 0.0], [0.0, 0.0]])), 4)
    0.7071
    """
    A, B = as_tensor(A, "A", device="cpu"), as_tensor(B, "B", device="cpu")
    if A.ndim < 2 or B.ndim < 2 or A.shape[-2:] != B.shape[-2:]:
        raise ValueError(f"A and B must be matrices of the same shape (..., p, q), got {tuple(A.shape)} and "
                         f"{tuple(B.shape)}")
    try:
        torch.broadcast_shapes(A.shape, B.shape)
    except RuntimeError as err:
        raise ValueError(f"the batch shapes of A {tuple(A.shape)} and B {tuple(B.shape)} do not broadcast") from err
    return _normalized_inner(A, B, (-2, -1), "correlation of a zero matrix is undefined: A and B must be non-zero")


def margins(problem: Problem, W: ArrayLike, alpha: ArrayLike) -> np.ndarray:
    r"""The margins :math:`\mu_{it}(W) = (x_{i\alpha_i} - x_{it})^\top W z_i` of every token (0 at
    :math:`t = \alpha_i`).

    Parameters
    ----------
    problem : Problem
        The problems (a batch).
    W : ArrayLike
        The key-query matrix (d, d), or one per problem (..., d, d).
    alpha : ArrayLike
        The selected token of each sequence, shape (..., n).

    Returns
    -------
    ndarray
        The margins, shape (..., n, T).

    Raises
    ------
    ValueError
        If W or alpha does not fit the problem.

    Examples
    --------
    >>> import numpy as np
    >>> from attnsvm import data, theory
    >>> # one sequence: tokens e1, e2, -e2 and the query e1
    >>> problem = data.Problem([[[1.0, 0.0], [0.0, 1.0], [0.0, -1.0]]], [1.0], [[1.0, 0.0]], [1.0, 0.0])
    >>> W = np.array([[1.0, 0.0], [0.0, 0.0]])
    >>> theory.margins(problem, W, [0]).tolist()
    [[0.0, 1.0, 1.0]]
    """
    problem = _with_queries(problem)
    return finite_result(_margins(problem, W, _selection(problem, alpha)), "the margins", OVERFLOW).cpu().numpy()


def support_tokens(problem: Problem, W: ArrayLike, alpha: ArrayLike) -> np.ndarray:
    r"""Boolean mask of the support tokens of W: those :math:`t \ne \alpha_i` whose margin is 1 (within
    ``SUPPORT_TOL``).

    Parameters
    ----------
    problem : Problem
        The problems (a batch).
    W : ArrayLike
        As in ``margins``.
    alpha : ArrayLike
        As in ``margins``.

    Returns
    -------
    ndarray
        The mask, shape (..., n, T).

    Raises
    ------
    ValueError
        If W or alpha does not fit the problem.

    Examples
    --------
    >>> import numpy as np
    >>> from attnsvm import data, theory
    >>> problem = data.Problem([[[1.0, 0.0], [0.0, 1.0], [0.0, -1.0]]], [1.0], [[1.0, 0.0]], [1.0, 0.0])
    >>> W = np.array([[1.0, 0.0], [0.0, 0.0]])
    >>> theory.support_tokens(problem, W, [0]).tolist()
    [[False, True, True]]
    >>> theory.support_tokens(problem, 2 * W, [0]).tolist()  # margins 2: no support token
    [[False, False, False]]
    """
    return np.abs(margins(problem, W, alpha) - 1) <= SUPPORT_TOL


def cosine(a: ArrayLike, b: ArrayLike) -> np.ndarray:
    r"""The cosine :math:`\langle a, b\rangle/(\|a\|\,\|b\|)` over the last dimension, broadcast over the leading ones
    (for vectors, e.g. p).

    Parameters
    ----------
    a : ArrayLike
        Vectors, shape (..., d).
    b : ArrayLike
        Vectors, shape (..., d).

    Returns
    -------
    ndarray
        The cosines, shape (...).

    Raises
    ------
    ValueError
        If the shapes do not broadcast, or a vector is zero.

    Examples
    --------
    >>> from attnsvm import theory
    >>> float(theory.cosine([1.0, 0.0], [2.0, 0.0])), float(theory.cosine([1.0, 0.0], [0.0, 1.0]))
    (1.0, 0.0)
    >>> theory.cosine([[1.0, 0.0], [0.0, 1.0]], [1.0, 0.0]).shape
    (2,)
    """
    a, b = as_tensor(a, "a", device="cpu"), as_tensor(b, "b", device="cpu")
    if a.ndim < 1 or b.ndim < 1 or a.shape[-1] != b.shape[-1] or a.shape[-1] < 1:
        raise ValueError(f"a and b must be vectors of the same length (..., d), d >= 1, got {tuple(a.shape)} and "
                         f"{tuple(b.shape)}")
    try:
        torch.broadcast_shapes(a.shape, b.shape)
    except RuntimeError as err:
        raise ValueError(f"the batch shapes of a {tuple(a.shape)} and b {tuple(b.shape)} do not broadcast") from err
    return _normalized_inner(a, b, -1, "the cosine of a zero vector is undefined: a and b must be non-zero")


def neighbour_selections(alpha: ArrayLike, T: int) -> torch.Tensor:
    r"""Every selection that differs from :math:`\alpha` in exactly one sequence, ordered by sequence, then token.

    Parameters
    ----------
    alpha : ArrayLike
        A selection, shape (n,).
    T : int
        Tokens per sequence.

    Returns
    -------
    Tensor
        The selections, shape (n(T - 1), n).

    Raises
    ------
    ValueError
        If alpha is not a 1-d array of indices in [0, T).

    Examples
    --------
    >>> from attnsvm import theory
    >>> theory.neighbour_selections([0, 2], 3).tolist()
    [[1, 2], [2, 2], [0, 0], [0, 1]]
    """
    T, array = positive_int(T, "T", minimum=2), as_array(alpha, "alpha", _INDICES)
    if array.ndim != 1 or not array.size:
        raise ValueError(f"alpha must have shape (n,) with n >= 1 (one selected token per sequence), got {array.shape}")
    alpha, n = torch.as_tensor(as_index(array, "alpha", array.shape, T)), len(array)
    _memory(n * n * T, "alpha and T")
    sequence, token = torch.arange(n).repeat_interleave(T), torch.arange(T).repeat(n)
    changed = token != alpha[sequence]
    rows = alpha.repeat(n * (T - 1), 1)
    rows[torch.arange(len(rows)), sequence[changed]] = token[changed]
    return rows


def _svm_where_feasible(problem: Problem, alpha: np.ndarray, norm: str = "fro") -> tuple[np.ndarray, np.ndarray]:
    """(feasible flags, Att-SVM solutions with NaN where infeasible), both of batch shape (+ (d, d)); a solution
    outside float64's range is a FloatingPointError naming the problem."""
    try:
        feasible = np.asarray(svm.feasible(problem.X.detach(), queries(problem).detach(), alpha))
        solutions = np.full(problem.batch_shape + (problem.d, problem.d), np.nan)
        if feasible.any():
            chosen = torch.as_tensor(feasible)
            instances = problem[chosen] if problem.batch_shape else problem
            solutions[feasible] = svm.att_svm(instances.X.detach(), instances.Z.detach(),
                                              alpha[feasible] if alpha.ndim > 1 else alpha, norm=norm)
    except FloatingPointError as err:
        raise FloatingPointError(f"the Att-SVM of problem is outside float64's range: scale problem.X or problem.Z "
                                 f"({err})") from err
    return feasible, solutions


def _prompt_svm_where_feasible(problem: Problem, key: torch.Tensor,
                               alpha: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(feasible flags, p-SVM solutions with 0 where infeasible), of batch shape (+ (d,))."""
    X, flat = problem.X.detach().reshape((-1,) + problem.X.shape[-3:]), alpha.reshape(-1, problem.n)
    feasible, p = np.ones(len(X), bool), np.zeros((len(X), problem.d))
    for b in range(len(X)):
        try:
            p[b] = svm.prompt_svm(X[b], key, flat[b])
        except svm.InfeasibleSVM:
            feasible[b] = False
    return feasible.reshape(problem.batch_shape), p.reshape(problem.batch_shape + (problem.d,))


def locally_optimal(problem: Problem, alpha: ArrayLike, *, norm: str = "fro",
                    key: ArrayLike | None = None) -> np.ndarray:
    r"""Whether :math:`\alpha` is locally optimal: its SVM exists and :math:`\gamma_{i\alpha_i} > \gamma_{it}` for every
    support token t.

    Optimal tokens (:math:`\alpha` = opt) are locally optimal when each is unique and their Att-SVM is feasible; a
    token tied in score with a support token is not (the comparison is strict).

    Parameters
    ----------
    problem : Problem
        The problems (a batch).
    alpha : ArrayLike
        The selected token of each sequence, shape (..., n).
    norm : {'fro', 'nuc'}, default='fro'
        The Att-SVM whose support tokens count ("fro", the definition; "nuc", its analogue for (K, Q)).
    key : ArrayLike or None, default=None
        For paper B's prompt model, the key-query matrix: then the SVM is the p-SVM (``svm.prompt_svm``).

    Returns
    -------
    ndarray
        A bool array of the batch shape (False where the SVM is infeasible).

    Raises
    ------
    ValueError
        If alpha does not fit the problem, T < 2, or norm is not supported.

    Examples
    --------
    >>> from attnsvm import data, theory
    >>> problem = data.random_problem(4, 5, 6, seed=0)
    >>> bool(theory.locally_optimal(problem, theory.optimal_tokens(problem)))
    True
    >>> batch = data.random_problem(4, 5, 6, seed=0, batch=3)
    >>> theory.locally_optimal(batch, theory.optimal_tokens(batch)).tolist()
    [True, True, True]
    """
    problem = _as_problem(problem) if key is not None else _with_queries(problem)
    if problem.T < 2:
        raise ValueError(f"problem has T={problem.T} token per sequence: local optimality needs T >= 2 (a selected "
                         f"token and another)")
    alpha = _selection(problem, alpha)
    choice(norm, "norm", tuple(svm.SOLVERS))
    if key is None:
        feasible, solutions = _svm_where_feasible(problem, alpha.cpu().numpy(), norm)
        gaps = _margins(problem, torch.as_tensor(np.nan_to_num(solutions)), alpha)
        finite_result(gaps, "the margins of the Att-SVM solution", "problem's tokens are too large for float64: "
                                                                    "scale problem.X or problem.Z down")
        on_margin = np.abs(gaps.cpu().numpy() - 1) <= SUPPORT_TOL
    else:
        key, alpha = as_tensor(key, "key"), alpha.cpu().numpy()
        require_shape(key, "key", (problem.d, problem.d), "the prompt model's key-query matrix")
        keys = (problem.X @ key).detach().cpu().numpy()
        feasible, p = _prompt_svm_where_feasible(problem, key.detach(), alpha)
        chosen_keys = np.take_along_axis(keys, alpha[..., None, None], axis=-2)
        gaps = np.einsum("...ntd,...d->...nt", chosen_keys - keys, p)
        finite_result(gaps, "the margins of the p-SVM solution", "problem.X or key is too large for float64: "
                                                                 "scale them down")
        on_margin = np.abs(gaps - 1) <= SUPPORT_TOL
    gamma = token_scores(problem).detach()
    chosen = gamma.gather(-1, torch.as_tensor(alpha)[..., None]).cpu().numpy()
    return feasible & np.all((chosen > gamma.cpu().numpy()) | ~on_margin, axis=(-2, -1))


def convergence(problem: Problem, W: ArrayLike, *, threshold: float = 0.99) -> np.ndarray:
    r"""Classify where gradient descent went, from its final iterate W.

    "global" if attention selects the optimal tokens and :math:`\mathrm{corr}(W, W^{mm}) \ge` threshold; "local"
    if it selects other, locally-optimal tokens :math:`\alpha` and :math:`\mathrm{corr}(W, W^{mm}_\alpha) \ge`
    threshold; "none" otherwise.

    Parameters
    ----------
    problem : Problem
        The problems (a batch).
    W : ArrayLike
        One W (d, d) for every problem or one per problem (..., d, d).
    threshold : float, default=0.99
        A number in [-1, 1].

    Returns
    -------
    ndarray
        A string array of the batch shape.

    Raises
    ------
    ValueError
        If W does not fit the problem or threshold is not in [-1, 1].

    Examples
    --------
    >>> from attnsvm import data, svm, theory
    >>> problem = data.random_problem(4, 5, 6, seed=0)
    >>> W_mm = svm.att_svm(problem.X, problem.Z, theory.optimal_tokens(problem))
    >>> str(theory.convergence(problem, 10 * W_mm)), str(theory.convergence(problem, -W_mm))
    ('global', 'none')
    """
    problem = _with_queries(problem)
    if problem.T < 2:
        raise ValueError(f"problem has T={problem.T} token per sequence: convergence needs T >= 2")
    W = as_key_query(problem, W).detach()
    if torch.broadcast_shapes(W.shape[:-2], problem.batch_shape) != problem.batch_shape:
        raise ValueError(f"W must have shape {problem.batch_shape + (problem.d, problem.d)} (one W per problem) or "
                         f"({problem.d}, {problem.d}), got {tuple(W.shape)}")
    W = W.expand(problem.batch_shape + W.shape[-2:])
    threshold = _real(threshold, "threshold")
    if not -1 <= threshold <= 1:
        raise ValueError(f"threshold must be a correlation in [-1, 1], got {threshold}")
    probs = finite_result(attention(problem, W), "the attention", OVERFLOW)
    selection = probs.argmax(-1).cpu().numpy()
    feasible, solutions = _svm_where_feasible(problem, selection)
    aligned = np.zeros(problem.batch_shape, dtype=bool)
    chosen = feasible & (W.abs().amax((-2, -1)) > 0).numpy()  # W = 0 has no direction: aligned with nothing
    if chosen.any():
        aligned[chosen] = correlation(W[torch.as_tensor(chosen)] if problem.batch_shape else W,
                                      solutions[chosen]) >= threshold
    is_optimal = np.all(selection == optimal_tokens(problem).cpu().numpy(), axis=-1)
    labels = np.full(problem.batch_shape, "none", dtype=object)
    labels[aligned & is_optimal] = "global"
    labels[aligned & ~is_optimal & locally_optimal(problem, selection)] = "local"
    return labels.astype(str)


def sample_feasible(n: int, T: int, d: int, *, count: int, seed: int, max_draws: int = 2000,
                    selection: str = "optimal") -> tuple[Problem, torch.Tensor, int]:
    """Up to ``count`` random problems (``data.random_problem``) whose Att-SVM is feasible for the optimal tokens or
    for a random selection.

    Parameters
    ----------
    n : int
        The number of sequences.
    T : int
        Tokens per sequence.
    d : int
        The dimension.
    count : int
        How many problems to find.
    seed : int
        The seed.
    max_draws : int, default=2000
        The most candidates drawn.
    selection : {'optimal', 'random'}, default='optimal'
        The selection whose Att-SVM must be feasible.

    Returns
    -------
    tuple
        (problem batch, alpha, draws): the feasible problems in the order drawn (fewer than ``count`` when
        feasibility is rare), their selections, and how many candidates were drawn to find them.

    Raises
    ------
    ValueError
        If a size is out of range or selection is not supported.

    Examples
    --------
    >>> from attnsvm import theory
    >>> problems, alpha, draws = theory.sample_feasible(4, 3, 2, count=2, seed=0)
    >>> problems.batch_shape, tuple(alpha.shape), draws >= 2
    ((2,), (2, 4), True)
    """
    n, T, d = _sizes(n, T, d)
    choice(selection, "selection", ("optimal", "random"))
    count, max_draws, seed = positive_int(count, "count"), positive_int(max_draws, "max_draws"), _seed(seed)
    budget(max_draws, "max_draws", MAX_DRAWS, "random problems")
    _memory(max_draws * n * (T + 1) * d, "max_draws, n, T and d")
    batch = data.random_problem(n, T, d, seed=seed, batch=max_draws)
    alpha = optimal_tokens(batch) if selection == "optimal" else data.random_selection(batch, seed=seed + 1)
    found, start, size = [], 0, count
    while start < max_draws and len(found) < count:  # chunks double in size while feasibility is rare
        chunk = slice(start, min(start + size, max_draws))
        found += [start + k for k in np.flatnonzero(svm.feasible(batch.X[chunk], batch.Z[chunk], alpha[chunk]))]
        start, size = chunk.stop, 2 * size
    draws = int(found[count - 1]) + 1 if len(found) >= count else start  # a Python int, as annotated
    chosen = torch.as_tensor(found[:count], dtype=torch.long)
    return batch[chosen], alpha[chosen], draws


# The central theorem's reduction (its own module; imported last, as it uses the functions above).
from ._cone import Cone, ConeSides, cone_constants, cone_sides  # noqa: E402
from ._reduction import (Reduction, ResidualOffset, leak, limiting_weights, reduction_constants,  # noqa: E402
                         residual_offset, surrogate, weight_ratios)
