"""The causal Att-SVM: its constraints, margins and slacks, and its hard- and soft-margin solutions.

For every query it separates the selected token alpha_ik from each other candidate,

    min ||W||_F  s.t.  (x_{i alpha_ik} - x_it)^T W x_ik >= 1  for every (i, k) and candidate t != alpha_ik,

except the candidates that are copies of the selected token (their logit equals the selected token's for every
W; ``separation_mask``). Its constraints are the Kronecker rows kron(x_{i alpha_ik} - x_it, x_ik) of the attention
SVMs, and the solvers are those of ``svm.soft_margin_svm`` and ``svm.penalty_threshold``, which work with the
Gram matrix of the rows (their cost does not grow with d^2)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from numpy.typing import ArrayLike

from .. import svm
from .._checks import MAX_BYTES, memory as _memory, number as _positive, option as _option
from .._checks import as_tensor, boolean, budget, finite_result, require_shape
from ._model import _checked_logits
from ._problems import SequenceProblem, _no_grad_numpy, _selection, separation_mask

__all__ = ["att_svm", "combine", "feasible", "margins", "penalty_threshold", "total_slack", "violations",
           "SLACKS"]

SLACKS = ("constraint", "token")  # one slack per constraint (i, k, t) (default), or paper C's per (sequence i, token t)


def margins(problem: SequenceProblem, W: ArrayLike, alpha: ArrayLike | None = None) -> np.ndarray:
    r"""The margins :math:`(x_{i\alpha_{ik}} - x_{it})^\top W x_{ik}` for the constraint pairs of ``separation_mask``,
    NaN elsewhere.

    Parameters
    ----------
    problem : SequenceProblem
        The problems (a batch).
    W : ArrayLike
        The key-query matrix, (d, d) or (..., d, d).
    alpha : ArrayLike or None, default=None
        The selection (None: the optimal tokens).

    Returns
    -------
    ndarray
        The margins, shape (..., n, K, T).

    Raises
    ------
    ValueError
        If W or alpha does not fit the problem.

    Examples
    --------
    >>> import numpy as np
    >>> from attnsvm import causal
    >>> problem = causal.random_problem(n=2, T=3, d=4, seed=0)
    >>> gaps = causal.margins(problem, causal.att_svm(problem))
    >>> gaps.shape, round(float(np.nanmin(gaps)), 6)  # the hard-margin SVM: every margin at least 1
    ((2, 3, 3), 1.0)
    """
    alpha = _selection(problem, alpha)
    raw = _checked_logits(problem, W)
    gaps = raw.gather(-1, alpha[..., None].expand(raw.shape[:-1] + (1,))) - raw
    mask = separation_mask(problem, alpha).expand(gaps.shape)
    finite_result(gaps.detach()[mask], "the margins", "W or the problem's tokens are too large (scale them down)")
    return _no_grad_numpy(gaps.masked_fill(~mask, torch.nan))


@dataclass(frozen=True)
class _Instance:
    """The separation constraints of one problem as Kronecker rows: pairs (delta_c, z_c) over `where` in C order."""

    deltas: np.ndarray  # (m, d): x_{i alpha_ik} - x_it
    queries: np.ndarray  # (m, d): x_ik
    where: np.ndarray  # (n, K, T) bool

    @property
    def rows(self) -> tuple[np.ndarray, np.ndarray]:
        """The rows as `svm.soft_margin_svm` takes them."""
        return self.deltas, self.queries

    def groups(self, slack: str) -> np.ndarray | None:
        """The shared slack of each constraint: None for its own (slack="constraint"), else that of its
        (sequence i, token t)."""
        if slack == "constraint":
            return None
        i, _, t = np.nonzero(self.where)
        return np.unique(np.stack([i, t], axis=1), axis=0, return_inverse=True)[1].reshape(-1)

    def scatter(self, values: np.ndarray) -> np.ndarray:
        out = np.zeros(self.where.shape)
        out[self.where] = values
        return out


def _instances(problem: SequenceProblem, alpha: torch.Tensor) -> list[_Instance]:
    """One `_Instance` per problem of the batch (flattened)."""
    where = separation_mask(problem, alpha).cpu().numpy()
    X, alpha_np = _no_grad_numpy(problem.X), alpha.cpu().numpy()
    n, K, T, d = problem.n, problem.K, problem.T, problem.d
    X = X.reshape(-1, n, T, d)
    where, alpha_np = where.reshape(-1, n, K, T), alpha_np.reshape(-1, n, K)
    out = []
    for Xb, mask, ab in zip(X, where, alpha_np):
        i, k, t = np.nonzero(mask)
        out.append(_Instance(Xb[i, ab[i, k]] - Xb[i, t], Xb[i, k], mask))
    return out


def _svm_selection(problem: SequenceProblem, alpha, solver: str) -> torch.Tensor:
    """alpha checked (`_selection`) for a problem whose Att-SVM can be solved here: T >= 2, tokens whose constraint
    Gram matrix (products of four token entries) fits float64, and a dense constraint system of at most MAX_BYTES
    (`solver`: a key of svm.SOLVER_FLOATS, the solver's peak memory in floats per squared constraint count)."""
    alpha = _selection(problem, alpha)
    if problem.T < 2:
        raise ValueError("problem has T = 1 token per sequence: the Att-SVM separates each query's selected token "
                         "from its other candidates, and there are none; pass sequences of T >= 2 tokens")
    scale = float(problem.X.detach().abs().max())
    if scale > 0 and np.log10(4.0) + 4 * np.log10(scale) + 2 * np.log10(problem.d) > 290:
        raise ValueError(f"problem's tokens have entries up to {scale:.3g}: the Att-SVM's constraint Gram matrix holds "
                         f"products of four token entries, which overflow float64; rescale the tokens (the SVM of "
                         f"c X is the SVM of X divided by c^2)")
    m = int(separation_mask(problem, alpha).sum((-3, -2, -1)).max())
    label = f"problem (n={problem.n}, T={problem.T}, K={problem.K}: {m} separation constraints in one instance)"
    floats = svm.SOLVER_FLOATS[solver]
    budget(floats * 8.0 * m * m, label, MAX_BYTES,
           f"bytes for its dense constraint system (about {floats} m^2 floats for m constraints; use fewer or "
           f"shorter sequences)")
    return alpha


def _solve(function, instance: _Instance, b: int, batch: tuple, **options):
    """function(instance.rows, **options) of `svm`, None where the hard margin is infeasible; a SolverError says
    which instance; for a soft margin, how rescaling the tokens changes the SVM only where its rows are far from norm
    1 (at a fixed C it is another SVM)."""
    try:
        return function(instance.rows, **options)
    except svm.InfeasibleSVM:
        return None
    except svm.SolverError as err:
        where = f" for batch instance {b}" if batch else ""
        if "C" not in options:  # the hard margin: the SVM of c X is that of X divided by c^2
            raise svm.SolverError(f"the causal Att-SVM{where}: {err} (its rows are built from the problem's tokens: "
                                  f"rescale its tokens to entries near 1; the SVM of c X is the SVM of X divided by "
                                  f"c^2)") from err
        size = float(np.max(np.linalg.norm(instance.deltas, axis=1) * np.linalg.norm(instance.queries, axis=1)))
        scaled = 2.0 ** svm.SCALES[0] <= size <= 2.0 ** svm.SCALES[1]
        advice = "" if scaled else ": at a fixed C, tokens c X give the squared form's SVM of X at c^4 C divided " \
            "by c^2, paper C's at c^2 C divided by c^2"
        raise svm.SolverError(f"the causal Att-SVM{where}: {err} (its rows are built from the problem's tokens, of "
                              f"norms up to {size:.3g}{advice})") from err


def _raise_infeasible(solutions: list, batch: tuple) -> None:
    """svm.InfeasibleSVM naming the batch instances whose solution is None (the hard margin does not exist)."""
    infeasible = [b for b, solution in enumerate(solutions) if solution is None]
    if infeasible:
        where = f" for batch instances {infeasible}" if batch else ""
        raise svm.InfeasibleSVM(
            f"the causal Att-SVM is infeasible{where}: no W separates every query's selected token from its other "
            f"candidates (typically the same query token must prefer a over b in one prefix and b over a in "
            f"another; `preference_cycle` finds such a conflict). Pass C for the soft-margin SVM. (Numerically, "
            f"infeasible also means that every separating W has ||W||_F > {svm.MAX_NORM:g}, as for tiny tokens: "
            f"rescale the problem's tokens to entries near 1.)", infeasible)


def att_svm(problem: SequenceProblem, alpha: ArrayLike | None = None, *, C: float | None = None,
            objective: str = "squared", slack: str = "constraint",
            return_multipliers: bool = False) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    r"""The causal (or seq2seq) Att-SVM for the selection :math:`\alpha`.

    C=None gives the hard-margin SVM, :math:`\min \|W\|_F` s.t. every margin of ``separation_mask``
    :math:`\ge 1`. C > 0 gives the soft-margin SVM with slacks :math:`\xi \ge 0` on the margins,
    :math:`\mathrm{margin}_c \ge 1 - \xi`, with the objective :math:`\frac{1}{2}\|W\|_F^2 + C\sum\xi` ("squared")
    or paper C's :math:`\|W\|_F + C\sum\xi` ("norm"), both solved on the active set of Clarabel's interior-point
    solution and certified. Both give the same family of solutions: the "norm" solution for C is the "squared"
    one for :math:`C\|W\|_F`. Both equal the hard-margin SVM, if it exists, for every C above
    ``penalty_threshold`` (the "squared" one at :math:`C\|W^{mm}\|_F`). The solvers are
    ``svm.soft_margin_svm``'s, on the problem's constraint rows.

    Parameters
    ----------
    problem : SequenceProblem
        The problems (a batch).
    alpha : ArrayLike or None, default=None
        The selected token of each query, shape (..., n, K) (None: the optimal tokens).
    C : float or None, default=None
        None (hard margin) or the penalty C > 0.
    objective : {'squared', 'norm'}, default='squared'
        The soft-margin objective.
    slack : {'constraint', 'token'}, default='constraint'
        One slack per constraint (i, k, t), the textbook soft margin; or "token", paper C's Definition 4.1 as
        printed, one slack :math:`\xi_{it}` per (sequence i, token t) shared by all queries k of sequence i whose
        constraints involve token t.
    return_multipliers : bool, default=False
        Also return :math:`\lambda` (..., n, K, T), 0 off the constraints, with :math:`W = \sum_c \lambda_c A_c`
        ("squared" and hard) or :math:`W = \|W\|_F \sum_c \lambda_c A_c` ("norm"); :math:`0 \le \lambda \le C`
        (slack="constraint"), or :math:`\lambda \ge 0` with the exact sum of :math:`\lambda` over the constraints
        of each (i, t) at most C (slack="token"); the identity holds to the certified bound.

    Returns
    -------
    ndarray or tuple of ndarray
        W, shape (..., d, d), and with ``return_multipliers`` :math:`\lambda`.

    Raises
    ------
    ~attnsvm.svm.InfeasibleSVM
        If C is None and no W exists (``.instances``: the infeasible batch indices).
    ~attnsvm.svm.SolverError
        Where no soft-margin candidate is certified, or a hard-margin gap exceeds ``svm.GAP_TOL["hard"]``.
    ValueError
        Before any work: T = 1, tokens whose constraint Gram matrix overflows float64, a dense constraint system
        above ``MAX_BYTES``, or an invalid argument.

    Notes
    -----
    Every soft-margin answer is certified by its multipliers (``svm.soft_margin_svm``): :math:`\|W - W^*\|_F \le
    \sqrt{2(P - D)} \le 10^{-5}\|W\|_F` for the squared form (for "norm": the squared form at :math:`C\|W\|_F`, and
    its own relative duality gap at most ``svm.GAP_TOL["soft"]`` = 1e-9 plus round-off). SolverError where no
    candidate is certified was measured on next-token problems from C ~ 2e4 for both objectives, every case at
    C >= 1e6; a smaller C may be certified. W = 0 is certified to an absolute bound,
    :math:`\sqrt{32\varepsilon C g}` for g slack groups, and within about 1e-9 relative of the "norm" W = 0
    threshold either side may be returned.

    Examples
    --------
    >>> import numpy as np
    >>> from attnsvm import causal
    >>> problem = causal.random_problem(n=2, T=3, d=4, seed=0)
    >>> W, lam = causal.att_svm(problem, return_multipliers=True)
    >>> W.shape, lam.shape, bool(np.abs(causal.combine(problem, lam) - W).max() < 1e-9)
    ((4, 4), (2, 3, 3), True)
    >>> W_soft = causal.att_svm(problem, C=10.0, objective="norm")  # paper C's soft margin
    >>> W_soft.shape
    (4, 4)
    """
    _option(objective, "objective", svm.OBJECTIVES)
    _option(slack, "slack", SLACKS)
    return_multipliers = boolean(return_multipliers, "return_multipliers")
    if C is not None:
        C = _positive(C, "C")
    elif objective != "squared":
        raise ValueError('objective="norm" is paper C\'s soft-margin form: pass C with it')
    elif slack != "constraint":
        raise ValueError('slack="token" is a soft-margin option: pass C with it')
    solver = "hard" if C is None else "token" if slack == "token" else objective
    alpha = _svm_selection(problem, alpha, solver)
    instances, batch = _instances(problem, alpha), problem.batch_shape
    solutions = []
    for b, instance in enumerate(instances):
        soft = {} if C is None else dict(C=C, objective=objective, groups=instance.groups(slack))
        solutions.append(_solve(svm.soft_margin_svm, instance, b, batch, return_multipliers=True, **soft))
    _raise_infeasible(solutions, batch)
    W = np.stack([w for w, _ in solutions]).reshape(batch + (problem.d, problem.d))
    if not return_multipliers:
        return W
    lam = np.stack([instance.scatter(l) for instance, (_, l) in zip(instances, solutions)])
    return W, lam.reshape(batch + (problem.n, problem.K, problem.T))


def feasible(problem: SequenceProblem, alpha: ArrayLike | None = None) -> np.ndarray:
    r"""Whether the hard-margin causal Att-SVM exists for the selection :math:`\alpha`.

    Parameters
    ----------
    problem : SequenceProblem
        The problems (a batch).
    alpha : ArrayLike or None, default=None
        The selection (None: the optimal tokens).

    Returns
    -------
    ndarray
        A boolean array, shape (...).

    Raises
    ------
    ValueError
        If alpha does not fit the problem.

    Examples
    --------
    >>> from attnsvm import causal
    >>> causal.feasible(causal.random_problem(n=2, T=3, d=4, seed=0, batch=3)).tolist()
    [True, True, True]
    """
    alpha = _svm_selection(problem, alpha, "hard")
    batch = problem.batch_shape
    flags = [_solve(svm.soft_margin_svm, instance, b, batch) is not None
             for b, instance in enumerate(_instances(problem, alpha))]
    return np.array(flags, dtype=bool).reshape(batch)


def penalty_threshold(problem: SequenceProblem, alpha: ArrayLike | None = None, *,
                      slack: str = "constraint") -> np.ndarray:
    r"""The exact-penalty threshold :math:`C^*` of paper C's soft-margin form (objective="norm").

    With :math:`\lambda` the multipliers of the hard-margin SVM (:math:`W^{mm} = \sum_c \lambda_c A_c`,
    :math:`\lambda \ge 0`, :math:`\lambda_c = 0` off the margin), :math:`C^*` is the minimum over all such
    :math:`\lambda` of :math:`\max_c \lambda_c/\|W^{mm}\|_F` (slack="constraint"), or of
    :math:`\max_{(i,t)} \sum_{c \text{ of } (i,t)} \lambda_c/\|W^{mm}\|_F` (slack="token"). The soft-margin
    solution is :math:`W^{mm}` for every :math:`C > C^*`, :math:`W^{mm}` is one solution at :math:`C = C^*`, and it
    is none for :math:`C < C^*`. The minimum over :math:`\lambda` matters only when the constraints on the margin
    are linearly dependent (otherwise :math:`\lambda` is unique); it is a linear program
    (``svm.penalty_threshold``).

    Parameters
    ----------
    problem : SequenceProblem
        The problems (a batch).
    alpha : ArrayLike or None, default=None
        The selection (None: the optimal tokens).
    slack : {'constraint', 'token'}, default='constraint'
        As in ``att_svm``.

    Returns
    -------
    ndarray
        :math:`C^*`, shape (...).

    Raises
    ------
    ~attnsvm.svm.InfeasibleSVM
        Where the hard-margin SVM does not exist.
    ValueError
        If alpha does not fit the problem or slack is not supported.

    Examples
    --------
    >>> from attnsvm import causal
    >>> problem = causal.random_problem(n=2, T=3, d=4, seed=0)
    >>> C_star = float(causal.penalty_threshold(problem))
    >>> W_mm, W_soft = causal.att_svm(problem), causal.att_svm(problem, C=1.1 * C_star, objective="norm")
    >>> bool(abs(W_soft - W_mm).max() < 1e-6)  # above C*, the soft margin is the hard margin
    True
    """
    _option(slack, "slack", SLACKS)
    alpha = _svm_selection(problem, alpha, "threshold")
    batch = problem.batch_shape
    instances = _instances(problem, alpha)
    out = [_solve(svm.penalty_threshold, instance, b, batch, groups=instance.groups(slack))
           for b, instance in enumerate(instances)]
    _raise_infeasible(out, batch)
    return np.array(out).reshape(batch)


def violations(problem: SequenceProblem, W: ArrayLike, alpha: ArrayLike | None = None) -> np.ndarray:
    r"""The number of constraint pairs whose margin under W is below one (the slacks :math:`\xi > 0`).

    Parameters
    ----------
    problem : SequenceProblem
        The problems (a batch).
    W : ArrayLike
        The key-query matrix, (d, d) or (..., d, d).
    alpha : ArrayLike or None, default=None
        The selection (None: the optimal tokens).

    Returns
    -------
    ndarray
        The counts, shape (...).

    Raises
    ------
    ValueError
        If W or alpha does not fit the problem.

    Examples
    --------
    >>> from attnsvm import causal
    >>> problem = causal.random_problem(n=2, T=3, d=4, seed=0)
    >>> W = causal.att_svm(problem)
    >>> int(causal.violations(problem, W)), int(causal.violations(problem, 0.5 * W)) > 0
    (0, True)
    """
    gaps = margins(problem, W, alpha)
    return (np.nan_to_num(gaps, nan=np.inf) < 1 - 1e-9).sum((-3, -2, -1))


def total_slack(problem: SequenceProblem, W: ArrayLike, alpha: ArrayLike | None = None) -> np.ndarray:
    r"""The least total slack W needs with one slack per constraint, :math:`\sum_c \max(0, 1 - \mu_c(W))` over the
    separation constraints c.

    Paper C's objective of W (slack="constraint") is :math:`\|W\|_F + C` total_slack.

    Parameters
    ----------
    problem : SequenceProblem
        The problems (a batch).
    W : ArrayLike
        The key-query matrix, (d, d) or (..., d, d).
    alpha : ArrayLike or None, default=None
        The selection (None: the optimal tokens).

    Returns
    -------
    ndarray
        The total slack, shape (...).

    Raises
    ------
    ValueError
        If W or alpha does not fit the problem.

    Examples
    --------
    >>> import numpy as np
    >>> from attnsvm import causal
    >>> problem = causal.random_problem(n=2, T=3, d=4, seed=0)
    >>> float(causal.total_slack(problem, np.zeros((4, 4))))  # W = 0: every margin 0, a slack of 1 each
    6.0
    """
    gaps = margins(problem, W, alpha)
    return finite_result(np.nansum(np.maximum(0.0, 1.0 - gaps), axis=(-3, -2, -1)), "the total slack",
                         "W or the problem's tokens are too large (scale them down)")


def combine(problem: SequenceProblem, lam: ArrayLike, alpha: ArrayLike | None = None) -> np.ndarray:
    r""":math:`\sum_c \lambda_c A_c` with the constraint matrices :math:`A_c = (x_{i\alpha_{ik}} - x_{it}) x_{ik}^\top`.

    Computed directly from the tokens (not from the solvers' constraint rows), so :math:`W^{mm}` = combine(problem,
    lam) checks the multipliers of the hard-margin SVM independently.

    Parameters
    ----------
    problem : SequenceProblem
        The problems (a batch).
    lam : ArrayLike
        The multipliers (..., n, K, T), e.g. those of ``att_svm``; entries off the constraints
        (``separation_mask``) are ignored.
    alpha : ArrayLike or None, default=None
        The selection (None: the optimal tokens).

    Returns
    -------
    ndarray
        The combination, shape (..., d, d).

    Raises
    ------
    ValueError
        If lam or alpha does not fit the problem.

    Examples
    --------
    >>> import numpy as np
    >>> from attnsvm import causal
    >>> problem = causal.random_problem(n=2, T=3, d=4, seed=0)
    >>> causal.combine(problem, np.ones((2, 3, 3))).shape
    (4, 4)
    """
    alpha = _selection(problem, alpha)
    shape = problem.batch_shape + (problem.n, problem.K, problem.T)
    lam = as_tensor(lam, "lam", device=problem.X.device)
    require_shape(lam, "lam", shape, "one multiplier per (sequence, query, token)")
    _memory(2.0 * np.prod(shape, dtype=float) * problem.d, "problem (its constraint rows, (..., n, K, T, d))")
    lam = lam.masked_fill(~separation_mask(problem, alpha), 0.0)
    chosen = torch.gather(problem.X, -2, alpha[..., None].expand(alpha.shape + (problem.d,)))  # (..., n, K, d)
    deltas = chosen[..., :, None, :] - problem.X[..., None, :, :]  # (..., n, K, T, d)
    W = torch.einsum("...nkt,...nktd,...nke->...de", lam, deltas, problem.queries)
    return finite_result(_no_grad_numpy(W), "sum_c lam_c A_c", "lam or the problem's tokens are too large")
