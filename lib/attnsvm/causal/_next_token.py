"""Next-token prediction with one query per sequence: the token-priority graphs, their strongly connected
components, the graph SVM and the finite part (the model of Li, Huang, Ildiz, Rawat and Oymak).

An ``NTPProblem`` holds n sequences of T token ids over a vocabulary of K embeddings e_k in R^d and one label
token y_i per sequence. The query of sequence i is its last token z_i = x_iT; it attends to every position:

    logit_it = x_it^T W z_i,   s_i = softmax(logit_i),   p_ik = sum over the positions t holding token k of s_it,
    L(W) = -(1/n) sum_i log p_{i, y_i}                     (the output probability of a token: its attention mass).

The priority graph of a query token k has an edge y_i -> x_it for every sequence i whose last token is k and every
other token x_it of it (the label has priority over the tokens it was chosen among). By the paper (not proved here;
checked numerically in the book), gradient descent learns to retrieve the label's strongly connected component
(SCC) hard and to compose softly inside it: in the book's reading W(t)/||W(t)|| -> W_svm/||W_svm|| and the
component of W(t) in the span of ``finite_subspace`` -> W_fin, with W_svm the graph SVM (``graph_svm``: logit
differences equal inside a component, a margin of one across) and W_fin the minimizer of the loss restricted to
the components (``finite_part``). W(t) - R(t) W_svm - W_fin need not vanish: the book's runs keep a bounded
remainder outside both. This is a causal model's
last query, hence its place in ``causal``; its names carry ``ntp`` where the causal model of every query has its
own (``causal.loss`` there, ``causal.ntp_loss`` here).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dataclasses import dataclass

import numpy as np
import torch
from numpy.typing import ArrayLike

if TYPE_CHECKING:  # networkx is imported where it is used: it adds 0.15 s to `import attnsvm`
    import networkx as nx

from .._checks import as_array, as_tensor, boolean, finite_result, memory, option, positive_int
from .._checks import number as _positive
from ..data import _seed, unit_rows
from ..svm import InfeasibleSVM, SolverError, soft_margin_svm
from ..svm._attention import CLARABEL_MAX_ITER, CLARABEL_TOL, _accepted, _solved
from ..train import Trajectory, uniform_init
from ..train._descent import ENGINES, _descend, _recorder
from . import _ntp_loop

__all__ = ["NTPProblem", "finite_part", "finite_subspace", "graph_svm", "ntp_attention", "ntp_gd", "ntp_gradient",
           "ntp_logits", "ntp_loss", "ntp_probabilities", "ntp_problem", "official_problems", "priority_components",
           "priority_graphs", "retrieved", "GRAPH_NORMS", "MAX_DRAWS"]

GRAPH_NORMS = ("fro", "nuc")  # the norms of the graph SVM: Frobenius (GD on W) or nuclear
EQUALITY_TOL = 1e-7  # accepted |logit difference| inside a component, relative to the largest margin (nuclear SVM)



def _token_ids(value, name: str, upper: int | None, ndim: int) -> torch.Tensor:
    """`value` as an int64 tensor of `ndim` dimensions with entries in [0, upper) (any upper when None)."""
    array = as_array(value, name, "an array of integers")
    if array.dtype.kind not in "iu":
        if array.dtype.kind == "f" and np.isfinite(array).all() and (array == np.round(array)).all():
            array = array.astype(np.int64)
        else:
            raise TypeError(f"{name} must hold integer token ids, got dtype {array.dtype}")
    if array.ndim != ndim or 0 in array.shape:
        shape = "(n, T): n >= 1 sequences of T >= 1 token ids" if ndim == 2 else "(n,): one label per sequence"
        raise ValueError(f"{name} must have shape {shape}, got {array.shape}")
    if array.min() < 0 or (upper is not None and array.max() >= upper):
        bound = f"[0, {upper - 1}] (the vocabulary's K={upper} tokens)" if upper is not None else ">= 0"
        raise ValueError(f"{name} holds token ids outside {bound}")
    return torch.as_tensor(array.astype(np.int64))


@dataclass(frozen=True)
class NTPProblem:
    """Next-token prediction data.

    The query of sequence i is its last token; every label must occur in its sequence (the model can only output
    tokens it attends to).

    Parameters
    ----------
    ids : Tensor
        The token ids, shape (n, T).
    labels : Tensor
        The next token of each sequence, shape (n,).
    embeddings : Tensor
        The vocabulary's embeddings, shape (K, d).

    Raises
    ------
    ValueError
        If a label does not occur in its sequence, an id is out of range, or the shapes do not fit.

    Examples
    --------
    >>> import torch
    >>> from attnsvm import causal
    >>> E = torch.eye(3, dtype=torch.float64)
    >>> problem = causal.NTPProblem([[1, 2, 0], [2, 1, 0]], [1, 2], E)
    >>> problem.n, problem.T, problem.K, problem.d, problem.query_ids.tolist()
    (2, 3, 3, 3, [0, 0])
    """

    ids: torch.Tensor
    labels: torch.Tensor
    embeddings: torch.Tensor

    def __post_init__(self):
        embeddings = as_tensor(self.embeddings, "embeddings")
        if embeddings.ndim != 2 or 0 in embeddings.shape:
            raise ValueError(f"embeddings must have shape (K, d) with K, d >= 1 (one embedding per token), got "
                             f"{tuple(embeddings.shape)}")
        ids = _token_ids(self.ids, "ids", embeddings.shape[0], 2)
        labels = _token_ids(self.labels, "labels", embeddings.shape[0], 1)
        if labels.shape[0] != ids.shape[0]:
            raise ValueError(f"labels must have shape ({ids.shape[0]},) (one label per sequence of ids), got "
                             f"{tuple(labels.shape)}")
        missing = (ids != labels[:, None]).all(1).nonzero()[:, 0].tolist()
        if missing:
            raise ValueError(f"labels of sequences {missing} do not occur in them: the output probability of a "
                             f"token is its attention mass, so each label must be one of its sequence's ids")
        for name, value in (("ids", ids), ("labels", labels), ("embeddings", embeddings.detach())):
            object.__setattr__(self, name, value)

    @property
    def n(self) -> int:
        """The number of sequences."""
        return self.ids.shape[0]

    @property
    def T(self) -> int:
        """The number of tokens of each sequence."""
        return self.ids.shape[1]

    @property
    def K(self) -> int:
        """The size of the vocabulary."""
        return self.embeddings.shape[0]

    @property
    def d(self) -> int:
        """The dimension of the embeddings."""
        return self.embeddings.shape[1]

    @property
    def X(self) -> torch.Tensor:
        """The sequences' embeddings, (n, T, d)."""
        return self.embeddings[self.ids]

    @property
    def query_ids(self) -> torch.Tensor:
        """The last token of each sequence (its query), (n,)."""
        return self.ids[:, -1]

    @property
    def queries(self) -> torch.Tensor:
        """The queries z_i = e_(last token of i), (n, d)."""
        return self.embeddings[self.query_ids]


def _problem(problem) -> NTPProblem:
    if not isinstance(problem, NTPProblem):
        raise TypeError(f"problem must be a causal.NTPProblem (e.g. causal.ntp_problem(ids, labels, d=8, seed=0)), "
                        f"got {type(problem).__name__}")
    return problem


def ntp_problem(ids: ArrayLike, labels: ArrayLike, *, d: int, seed: int, K: int | None = None) -> NTPProblem:
    r"""An ``NTPProblem`` with K random unit-norm Gaussian embeddings in :math:`\mathbb{R}^d` (seeded).

    Parameters
    ----------
    ids : ArrayLike
        The token ids, shape (n, T).
    labels : ArrayLike
        The next token of each sequence, shape (n,).
    d : int
        The dimension.
    seed : int
        The seed.
    K : int or None, default=None
        The size of the vocabulary (None: the largest id or label plus one).

    Returns
    -------
    NTPProblem
        The problem.

    Raises
    ------
    ValueError
        If a label does not occur in its sequence, or an id is out of range.

    Examples
    --------
    >>> from attnsvm import causal
    >>> problem = causal.ntp_problem([[2, 3, 1], [2, 4, 0], [2, 3, 1]], [2, 2, 1], d=8, seed=0, K=5)
    >>> problem.K, problem.d, round(float(problem.embeddings.norm(dim=1).max()), 12)
    (5, 8, 1.0)
    """
    d, seed = positive_int(d, "d"), _seed(seed)
    top = max(int(_token_ids(ids, "ids", None, 2).max()), int(_token_ids(labels, "labels", None, 1).max())) + 1
    K = top if K is None else positive_int(K, "K")
    if K < top:
        raise ValueError(f"K={K} is too small: ids and labels use token ids up to {top - 1}")
    memory(float(K) * d, "K and d (K embeddings in R^d)")
    gen = torch.Generator().manual_seed(seed)
    return NTPProblem(ids, labels, unit_rows(torch.randn(K, d, generator=gen, dtype=torch.float64)))


def _weights(problem: NTPProblem, W, name: str = "W") -> torch.Tensor:
    W = as_tensor(W, name)
    if tuple(W.shape) != (problem.d, problem.d):
        raise ValueError(f"{name} must have shape ({problem.d}, {problem.d}) (the attention weights of the "
                         f"problem's tokens in R^{problem.d}), got {tuple(W.shape)}")
    return W


def _logits(problem: NTPProblem, W: torch.Tensor, name: str = "W") -> torch.Tensor:
    logits = torch.einsum("ntd,de,ne->nt", problem.X, W, problem.queries)
    return finite_result(logits, "the logits x_it^T W z_i",
                         f"{name} or the problem's embeddings are too large (scale them down)")


def ntp_logits(problem: NTPProblem, W: ArrayLike) -> torch.Tensor:
    r"""The attention logits :math:`x_{it}^\top W z_i` of the last token's query.

    Parameters
    ----------
    problem : NTPProblem
        The problem.
    W : ArrayLike
        The key-query matrix, shape (d, d).

    Returns
    -------
    Tensor
        The logits, shape (n, T).

    Raises
    ------
    ValueError
        If W does not have shape (d, d).

    Examples
    --------
    >>> import torch
    >>> from attnsvm import causal
    >>> problem = causal.NTPProblem([[1, 2, 0]], [1], torch.eye(3, dtype=torch.float64))
    >>> causal.ntp_logits(problem, torch.eye(3, dtype=torch.float64)).tolist()  # only token 0 matches itself
    [[0.0, 0.0, 1.0]]
    """
    problem = _problem(problem)
    return _logits(problem, _weights(problem, W))


def ntp_attention(problem: NTPProblem, W: ArrayLike) -> torch.Tensor:
    r"""The attention :math:`s_i = \mathrm{softmax}_t(x_{it}^\top W z_i)`.

    Parameters
    ----------
    problem : NTPProblem
        The problem.
    W : ArrayLike
        The key-query matrix, shape (d, d).

    Returns
    -------
    Tensor
        The attention, shape (n, T).

    Raises
    ------
    ValueError
        If W does not have shape (d, d).

    Examples
    --------
    >>> import torch
    >>> from attnsvm import causal
    >>> problem = causal.NTPProblem([[1, 2, 0]], [1], torch.eye(3, dtype=torch.float64))
    >>> causal.ntp_attention(problem, torch.zeros(3, 3, dtype=torch.float64)).tolist()
    [[0.3333333333333333, 0.3333333333333333, 0.3333333333333333]]
    """
    return torch.softmax(ntp_logits(problem, W), dim=-1)


def ntp_probabilities(problem: NTPProblem, W: ArrayLike) -> torch.Tensor:
    """The output probability of every vocabulary token, :math:`p_{ik}` = the attention mass on the positions holding
    k (0 for a token absent from the sequence).

    Parameters
    ----------
    problem : NTPProblem
        The problem.
    W : ArrayLike
        The key-query matrix, shape (d, d).

    Returns
    -------
    Tensor
        The probabilities, shape (n, K).

    Raises
    ------
    ValueError
        If W does not have shape (d, d).

    Examples
    --------
    >>> import torch
    >>> from attnsvm import causal
    >>> problem = causal.NTPProblem([[1, 1, 0]], [1], torch.eye(3, dtype=torch.float64))
    >>> p = causal.ntp_probabilities(problem, torch.zeros(3, 3, dtype=torch.float64))
    >>> [round(x, 4) for x in p[0].tolist()]  # token 1 holds two positions of three
    [0.3333, 0.6667, 0.0]
    """
    s = ntp_attention(problem, W)
    return torch.zeros(problem.n, problem.K, dtype=s.dtype).scatter_add(1, problem.ids, s)


def _log_parts(problem: NTPProblem, logits: torch.Tensor):
    """(log-sum-exp over all positions, over the label's positions, over the others), each (n,); positions of
    logit -inf (masked) count for none."""
    is_label = problem.ids == problem.labels[:, None]
    every = torch.logsumexp(logits, -1)
    label = torch.logsumexp(logits.masked_fill(~is_label, -torch.inf), -1)
    other = torch.logsumexp(logits.masked_fill(is_label, -torch.inf), -1)
    return every, label, other, is_label


def ntp_loss(problem: NTPProblem, W: ArrayLike, *, mask: ArrayLike | None = None) -> torch.Tensor:
    r"""The mean negative log-likelihood :math:`-\frac{1}{n}\sum_i \log p_{iy_i}`, computed in log space (exact where
    :math:`p_{iy_i}` rounds to 1 or its complement underflows).

    Parameters
    ----------
    problem : NTPProblem
        The problem.
    W : ArrayLike
        The key-query matrix, shape (d, d).
    mask : ArrayLike or None, default=None
        None (attention over every position) or a boolean (n, T), the positions attention may use, holding every
        label position (e.g. ``retrieved(problem)``: the restricted loss whose minimizer over
        ``finite_subspace`` is ``finite_part``).

    Returns
    -------
    Tensor
        The loss (0-d).

    Raises
    ------
    ValueError
        If W or mask has the wrong shape, or mask leaves out a label position.

    Examples
    --------
    >>> import torch
    >>> from attnsvm import causal
    >>> problem = causal.NTPProblem([[1, 2, 0]], [1], torch.eye(3, dtype=torch.float64))
    >>> W = torch.zeros(3, 3, dtype=torch.float64)
    >>> round(float(causal.ntp_loss(problem, W)), 4), float(causal.ntp_loss(problem, W, mask=[[1, 0, 0]]))
    (1.0986, 0.0)
    """
    logits = ntp_logits(problem, W)
    if mask is not None:
        array = as_array(mask, "mask", "an array of integers")
        if array.dtype.kind not in "biu" or array.shape != (problem.n, problem.T) or not np.isin(array, (0, 1)).all():
            raise ValueError(f"mask must be a boolean array of shape ({problem.n}, {problem.T}) (the positions "
                             f"attention may use), got {array.dtype} {array.shape}")
        keep = torch.as_tensor(array.astype(bool))
        if (~keep & (problem.ids == problem.labels[:, None])).any():
            raise ValueError("mask must keep every position holding a sequence's label (the loss is -log of the "
                             "label's attention)")
        logits = logits.masked_fill(~keep, -torch.inf)
    every, label, _, _ = _log_parts(problem, logits)
    return (every - label).mean()


def _gradient(problem: NTPProblem, W: torch.Tensor):
    """(direction, log_scale) of dL/dW for a checked W: dL/dlogit_it = (s_it - q_it) / n, q_i the attention
    renormalized over the label's positions (which share one logit). Off the label, log|g| = logit - lse; on it,
    g = -s (1 - p) / p, log|g| = logit + lse_other - lse - lse_label. The terms are combined relative to the largest,
    so no term underflows before the sum."""
    logits = _logits(problem, W)
    every, label, other, is_label = _log_parts(problem, logits)
    log_g = torch.where(is_label, logits + (other - every - label)[:, None], logits - every[:, None])
    top = log_g.max()
    if top == -torch.inf:  # every sequence holds its label alone: the loss is 0 and constant
        return torch.zeros(problem.d, problem.d, dtype=torch.float64), torch.tensor(-torch.inf, dtype=torch.float64)
    g = torch.exp(log_g - top) * torch.where(is_label, -1.0, 1.0)
    direction = torch.einsum("nt,ntd,ne->de", g, problem.X, problem.queries)
    return direction, top - np.log(problem.n)


def ntp_gradient(problem: NTPProblem, W: ArrayLike) -> tuple[torch.Tensor, torch.Tensor]:
    r"""The gradient :math:`\partial L/\partial W = e^{\mathrm{log\_scale}}\,\mathrm{direction}` of ``ntp_loss``, free
    of underflow however far softmax saturates.

    Terms of order one that cancel still leave their round-off (about 1e-16 of each) in the direction.

    Parameters
    ----------
    problem : NTPProblem
        The problem.
    W : ArrayLike
        The key-query matrix, shape (d, d).

    Returns
    -------
    tuple of Tensor
        The direction (d, d) and log_scale (0-d; :math:`-\infty` where the gradient is exactly 0).

    Raises
    ------
    ValueError
        If W does not have shape (d, d).

    Examples
    --------
    >>> import torch
    >>> from attnsvm import causal
    >>> problem = causal.ntp_problem([[1, 2, 0], [2, 1, 0]], [1, 2], d=4, seed=0)
    >>> W = torch.zeros(4, 4, dtype=torch.float64, requires_grad=True)
    >>> causal.ntp_loss(problem, W).backward()
    >>> direction, log_scale = causal.ntp_gradient(problem, W)
    >>> bool(torch.allclose(torch.exp(log_scale) * direction, W.grad))
    True
    """
    problem = _problem(problem)
    W = _weights(problem, W).detach()
    direction, log_scale = _gradient(problem, W)
    return finite_result(direction, "the gradient's direction",
                         "W or the problem's embeddings are too large (scale them down)"), log_scale


def _initial(problem: NTPProblem, init, seed: int) -> torch.Tensor:
    if init is None or isinstance(init, str):
        init = "zeros" if init is None else option(init, "init", ("zeros", "uniform"))
        shape = (problem.d, problem.d)
        return uniform_init(shape, seed) if init == "uniform" else torch.zeros(shape, dtype=torch.float64)
    return _weights(problem, init, "init").detach().clone()


@torch.no_grad()
def ntp_gd(problem: NTPProblem, *, steps: int, lr: float, normalized: bool = True,
           init: str | ArrayLike | None = None, seed: int = 0, record_every: int = 1,
           engine: str = "auto") -> Trajectory:
    r"""Gradient descent on ``ntp_loss``: :math:`W \leftarrow W - \eta\, G/\|G\|_F` (normalized) or
    :math:`W - \eta\, G` (plain), with G the exact ``ntp_gradient``, in a compiled CPU loop or on the torch
    training loop of ``train.gd``.

    The two engines take the same steps from the same gradient, exact in log space however far softmax
    saturates, and agree to round-off step by step; over thousands of steps a run can amplify round-off.

    Parameters
    ----------
    problem : NTPProblem
        The problem.
    steps : int
        The number of steps.
    lr : float
        The step size :math:`\eta`.
    normalized : bool, default=True
        Normalized steps, or plain.
    init : str, ArrayLike or None, default=None
        None or "zeros", "uniform" (torch.nn.Linear's default, seeded by ``seed``, the authors' start), or a W
        (d, d).
    seed : int, default=0
        The seed of "uniform".
    record_every : int, default=1
        Record every this many steps.
    engine : {'auto', 'compiled', 'torch'}, default='auto'
        "compiled" (a compiled CPU loop, Numba: the same steps, many times faster), "torch" (the torch loop of
        ``train.gd``), or "auto": the compiled loop, which runs every option here (a problem is always on the
        CPU).

    Returns
    -------
    Trajectory
        W (records, d, d), the attention ``probs`` (records, n, T) and the loss (records,) at steps 0,
        ``record_every``, ..., ``steps``.

    Raises
    ------
    ValueError
        If an argument is invalid (the message names it).
    FloatingPointError
        If the logits overflow float64, at init or during the run (the message names init, or lr and the
        problem's embeddings).

    Examples
    --------
    >>> from attnsvm import causal
    >>> problem = causal.ntp_problem([[1, 2, 0], [2, 1, 0]], [1, 1], d=4, seed=0)
    >>> run = causal.ntp_gd(problem, steps=20, lr=0.1, record_every=10)
    >>> run.steps.tolist(), tuple(run.W.shape), tuple(run.probs.shape), bool(run.loss[-1] < run.loss[0])
    ([0, 10, 20], (3, 4, 4), (3, 2, 3), True)
    >>> slow = causal.ntp_gd(problem, steps=20, lr=0.1, record_every=10, engine="torch")
    >>> float((run.W - slow.W).abs().max()) < 1e-14
    True
    """
    problem = _problem(problem)
    steps, lr = positive_int(steps, "steps", minimum=0), _positive(lr, "lr")
    record_every = positive_int(record_every, "record_every")
    normalized, seed = boolean(normalized, "normalized"), _seed(seed)
    engine = option(engine, "engine", ENGINES)
    recorder = _recorder(steps, record_every, problem.d ** 2 + problem.n * problem.T + 1)
    W = _initial(problem, init, seed)
    _logits(problem, W, "init")
    if engine != "torch":
        W, probs, loss, diverged = _ntp_loop.gd([problem], W[None], lr, normalized, recorder.steps)
        if diverged[0] >= 0:
            raise FloatingPointError(f"ntp_gd diverged at step {diverged[0]} (W or the logits x_it^T W z_i "
                                     f"overflowed float64): lower lr (got {lr!r}) or scale the problem's "
                                     f"embeddings down")
        return Trajectory(steps=np.array(recorder.steps), probs=probs[:, 0], loss=loss[:, 0], W=W[:, 0])

    def evaluate(params: tuple, k: int, wants: bool):
        (W,) = params
        try:
            if not torch.isfinite(W).all():
                raise FloatingPointError("W overflowed float64")
            record = None
            if wants:
                logits = _logits(problem, W)
                every, label, _, _ = _log_parts(problem, logits)
                record = dict(W=W, probs=torch.softmax(logits, -1), loss=(every - label).mean())
            if k == steps:
                return None, None, record
            G, log_scale = _gradient(problem, W)
        except FloatingPointError as err:
            raise FloatingPointError(f"ntp_gd diverged at step {k} ({err}): lower lr (got {lr!r}) or scale the "
                                     f"problem's embeddings down") from err
        return (G,), log_scale, record
    _descend((W,), evaluate, recorder, steps, lr, normalized)
    return recorder.trajectory()


# ------------------------------------------------------------------ the token-priority graphs

def priority_graphs(problem: NTPProblem) -> dict[int, nx.DiGraph]:
    r"""The token-priority graph of each query token k.

    A networkx DiGraph over the token ids of the sequences whose last token is k, with an edge
    :math:`y_i \to x_{it}` for each such sequence i and each other token :math:`x_{it}` of it (``weight``: how many
    positions ask for it).

    Parameters
    ----------
    problem : NTPProblem
        The problem.

    Returns
    -------
    dict
        {query token k: DiGraph}.

    Examples
    --------
    >>> import torch
    >>> from attnsvm import causal
    >>> problem = causal.NTPProblem([[1, 2, 0], [2, 1, 0]], [1, 2], torch.eye(3, dtype=torch.float64))
    >>> graph = causal.priority_graphs(problem)[0]
    >>> sorted(graph.edges)
    [(1, 0), (1, 2), (2, 0), (2, 1)]
    """
    import networkx as nx
    problem = _problem(problem)
    graphs = {}
    for row, y in zip(problem.ids.tolist(), problem.labels.tolist()):
        graph = graphs.setdefault(row[-1], nx.DiGraph())
        graph.add_nodes_from(row)
        for x in row:
            if x != y:
                weight = graph[y][x]["weight"] + 1 if graph.has_edge(y, x) else 1
                graph.add_edge(y, x, weight=weight)
    return dict(sorted(graphs.items()))


def _ordered_components(graph: nx.DiGraph) -> list[frozenset]:
    """The SCCs of `graph` (networkx), highest priority first: a topological order of the condensation, ties broken
    by each component's smallest token."""
    import networkx as nx
    condensation = nx.condensation(graph)
    members = nx.get_node_attributes(condensation, "members")
    order = nx.lexicographical_topological_sort(condensation, key=lambda c: min(members[c]))
    return [frozenset(members[c]) for c in order]


def priority_components(problem: NTPProblem) -> dict[int, list[frozenset]]:
    """The strongly connected components of each query token's priority graph, highest priority first.

    Components come in a topological order of the condensation by networkx; components no path orders come by
    their smallest token.

    Parameters
    ----------
    problem : NTPProblem
        The problem.

    Returns
    -------
    dict
        {query token k: list of frozenset}.

    Examples
    --------
    >>> import torch
    >>> from attnsvm import causal
    >>> problem = causal.NTPProblem([[1, 2, 0], [2, 1, 0]], [1, 2], torch.eye(3, dtype=torch.float64))
    >>> [sorted(c) for c in causal.priority_components(problem)[0]]  # 1 and 2 outrank each other
    [[1, 2], [0]]
    """
    return {k: _ordered_components(graph) for k, graph in priority_graphs(problem).items()}


def _membership(problem: NTPProblem) -> dict[int, dict[int, frozenset]]:
    """{query token k: {token: its component}}."""
    return {k: {x: c for c in components for x in c} for k, components in priority_components(problem).items()}


def retrieved(problem: NTPProblem) -> torch.Tensor:
    """The positions whose token lies in the label's strongly connected component of the sequence's priority graph:
    the tokens that hard retrieval keeps.

    The label outranks every token of its sequence, so its component is the highest one present.

    Parameters
    ----------
    problem : NTPProblem
        The problem.

    Returns
    -------
    Tensor
        A boolean mask, shape (n, T).

    Examples
    --------
    >>> import torch
    >>> from attnsvm import causal
    >>> problem = causal.NTPProblem([[1, 2, 0], [2, 1, 0]], [1, 2], torch.eye(3, dtype=torch.float64))
    >>> causal.retrieved(problem).tolist()
    [[True, True, False], [True, True, False]]
    """
    problem = _problem(problem)
    member = _membership(problem)
    rows = [[member[row[-1]][x] == member[row[-1]][y] for x in row]
            for row, y in zip(problem.ids.tolist(), problem.labels.tolist())]
    return torch.tensor(rows, dtype=torch.bool)


def _constraints(problem: NTPProblem) -> tuple[np.ndarray, np.ndarray]:
    """(equalities (m_eq, d^2), margins (m_ge, d^2)): rows kron(e_y - e_x, e_k) (row-major vec(W)) of the distinct
    triples (k, y, x), x another token of a sequence with query k and label y; an equality where y and x share a
    component of k's graph, else a margin."""
    member = _membership(problem)
    E = problem.embeddings.numpy()
    triples = {(row[-1], y, x) for row, y in zip(problem.ids.tolist(), problem.labels.tolist()) for x in row if x != y}
    equal, margin = [], []
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is reported by the caller (finite_result)
        for k, y, x in sorted(triples):
            (equal if member[k][x] == member[k][y] else margin).append(np.kron(E[y] - E[x], E[k]))
    width = problem.d ** 2
    return np.array(equal).reshape(-1, width), np.array(margin).reshape(-1, width)


def _null_projector(rows: np.ndarray, width: int) -> np.ndarray:
    """The orthogonal projector onto the null space of `rows` (an SVD; numerical rank by numpy's default rule)."""
    if len(rows) == 0:
        return np.eye(width)
    _, sigma, Vt = np.linalg.svd(rows, full_matrices=False)
    rank = int((sigma > sigma.max() * max(rows.shape) * np.finfo(float).eps).sum())
    return np.eye(width) - Vt[:rank].T @ Vt[:rank]


def _nuclear(equal: np.ndarray, margin: np.ndarray, d: int) -> np.ndarray:
    """min ||W||_* s.t. the equalities and margins, by Clarabel through cvxpy at the library's tolerances."""
    import cvxpy as cp  # here: importing cvxpy takes a second that only this solver needs

    W = cp.Variable((d, d))
    w = cp.vec(W, order="C")
    constraints = [margin @ w >= 1] + ([equal @ w == 0] if len(equal) else [])
    problem = cp.Problem(cp.Minimize(cp.normNuc(W)), constraints)
    tol = CLARABEL_TOL["nuc"]
    settings = dict(solver=cp.CLARABEL, max_iter=CLARABEL_MAX_ITER, tol_gap_abs=tol, tol_gap_rel=tol, tol_feas=tol)
    if not _solved(problem, settings, "Clarabel", "nuclear graph SVM of problem", {}):
        raise InfeasibleSVM("the nuclear graph SVM of problem is infeasible: no W orders its components with a "
                            "margin (are the embeddings linearly dependent?)", [0])
    return np.asarray(W.value)


def graph_svm(problem: NTPProblem, *, norm: str = "fro") -> np.ndarray:
    r"""The graph SVM: :math:`\min \|W\|` s.t. :math:`(e_y - e_x)^\top W e_k = 0` where y and x share a strongly
    connected component of the priority graph of query k, and :math:`\ge 1` where they do not.

    The constraints run over the distinct triples (k, y, x) of the sequences (label y, another token x, last token
    k). "fro": the equalities are eliminated by projecting the margin rows onto their null space (the solution lies
    there), and the hard-margin SVM of the projected rows is ``svm.soft_margin_svm``'s (NNLS, checked against its
    dual). "nuc": Clarabel through cvxpy at the library's tolerances. Both accept a solution by the library's rule
    (margins short of 1 by round-off are scaled up).

    Parameters
    ----------
    problem : NTPProblem
        The problem.
    norm : {'fro', 'nuc'}, default='fro'
        "fro" (the bias of GD on W) or "nuc".

    Returns
    -------
    ndarray
        W, shape (d, d); 0 when no margin constraint exists (every token in its label's component).

    Raises
    ------
    ~attnsvm.svm.InfeasibleSVM
        If no W is feasible.
    ~attnsvm.svm.SolverError
        If a solution falls short of a margin beyond ``svm.MARGIN_TOL``.

    Examples
    --------
    >>> import numpy as np
    >>> from attnsvm import causal
    >>> problem = causal.ntp_problem([[1, 2, 3, 0], [2, 1, 3, 0]], [1, 2], d=6, seed=0)
    >>> W = causal.graph_svm(problem)
    >>> E = problem.embeddings.numpy()
    >>> abs(float((E[1] - E[2]) @ W @ E[0])) < 1e-12, round(float((E[1] - E[3]) @ W @ E[0]), 6)
    (True, 1.0)
    """
    problem = _problem(problem)
    norm = option(norm, "norm", GRAPH_NORMS)
    d = problem.d
    equal, margin = _constraints(problem)
    scale = "rescale the problem's embeddings to norm near 1"
    finite_result(margin, "the graph SVM's constraint rows", f"the problem's embeddings are too large ({scale})")
    if len(margin) == 0:
        return np.zeros((d, d))
    try:
        if norm == "nuc":
            W = _nuclear(equal, margin, d).reshape(-1)
        else:
            W = soft_margin_svm(margin @ _null_projector(equal, d * d))
        W = W / _accepted(float((margin @ W).min()), "the graph SVM solution")
    except InfeasibleSVM as err:
        raise InfeasibleSVM(f"the graph SVM of problem is infeasible: no W orders its components with a margin "
                            f"(are the embeddings linearly dependent?) [{err}]", [0]) from None
    except (SolverError, FloatingPointError, np.linalg.LinAlgError) as err:
        kind = FloatingPointError if isinstance(err, FloatingPointError) else SolverError
        raise kind(f"the graph SVM of problem failed ({err}): {scale}") from None
    finite_result(W, "the graph SVM solution", f"the problem's embeddings are badly scaled ({scale})")
    largest = float(np.abs(margin @ W).max())
    if len(equal) and np.abs(equal @ W).max() > EQUALITY_TOL * largest:
        raise SolverError(f"the graph SVM solution breaks an equality by {np.abs(equal @ W).max():.3g} (more than "
                          f"{EQUALITY_TOL:g} of its margins): the embeddings are badly scaled, rescale them")
    return W.reshape(d, d)


# ------------------------------------------------------------------ the finite part

def finite_subspace(problem: NTPProblem) -> np.ndarray:
    r"""An orthonormal basis of the span of :math:`(e_a - e_b) e_k^\top` over the tokens a, b of one strongly connected
    component of the priority graph of query k: the directions of soft composition.

    Parameters
    ----------
    problem : NTPProblem
        The problem.

    Returns
    -------
    ndarray
        The basis, shape (q, d, d) (q = 0 when every component is a single token).

    Examples
    --------
    >>> from attnsvm import causal
    >>> problem = causal.ntp_problem([[1, 2, 3, 0], [2, 1, 3, 0]], [1, 2], d=6, seed=0)
    >>> causal.finite_subspace(problem).shape  # one component {1, 2}: one direction
    (1, 6, 6)
    """
    problem = _problem(problem)
    E, d = problem.embeddings.numpy(), problem.d
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is reported below (finite_result)
        spans = [np.kron(E[a] - E[min(c)], E[k]) for k, components in priority_components(problem).items()
                 for c in components for a in sorted(c) if a != min(c)]
    if not spans:
        return np.zeros((0, d, d))
    spans = finite_result(np.array(spans), "the finite subspace's spanning matrices",
                          "the problem's embeddings are too large (rescale them to norm near 1)")
    _, sigma, Vt = np.linalg.svd(spans, full_matrices=False)
    rank = int((sigma > sigma.max() * max(len(spans), d * d) * np.finfo(float).eps).sum())
    return Vt[:rank].reshape(rank, d, d)


def _reduced(problem: NTPProblem, basis: np.ndarray):
    """The loss restricted to the retrieved positions, on W = sum_j u_j basis_j: a function of u returning (loss,
    gradient, Hessian). The label's positions share one feature, so the Hessian is the attention's covariance of the
    features, positive semidefinite: the reduced loss is convex."""
    keep = retrieved(problem).numpy()
    X, Z = problem.X.numpy(), problem.queries.numpy()
    features = np.einsum("jde,ntd,ne->ntj", basis, X, Z)  # phi_it = <basis_j, x_it z_i^T>
    is_label = (problem.ids == problem.labels[:, None]).numpy()
    n = problem.n

    def evaluate(u: np.ndarray):
        logits = np.where(keep, features @ u, -np.inf)
        top = logits.max(1, keepdims=True)
        weights = np.exp(logits - top)
        every = np.log(weights.sum(1)) + top[:, 0]
        label = np.log(np.where(is_label, weights, 0.0).sum(1)) + top[:, 0]
        s = weights / weights.sum(1, keepdims=True)
        mean = np.einsum("nt,ntj->nj", s, features)
        label_feature = features[np.arange(n), is_label.argmax(1)]
        gradient = (mean - label_feature).sum(0) / n
        hessian = (np.einsum("nt,ntj,ntk->jk", s, features, features) - mean.T @ mean) / n
        return float((every - label).mean()), gradient, hessian
    return evaluate


def finite_part(problem: NTPProblem, *, max_steps: int = 100) -> np.ndarray:
    """The finite part :math:`W_{fin}`: the minimizer, over the span of ``finite_subspace``, of the loss restricted to
    the retrieved positions (each sequence's tokens in its label's component).

    It is the soft composition inside the components that, by the paper (not proved here), gradient descent
    approaches. Newton's method with a backtracking line search on this convex function, from 0, to a gradient
    below 1e-12.

    Parameters
    ----------
    problem : NTPProblem
        The problem.
    max_steps : int, default=100
        The most Newton steps.

    Returns
    -------
    ndarray
        :math:`W_{fin}`, shape (d, d).

    Raises
    ------
    ~attnsvm.svm.SolverError
        If ``max_steps`` steps do not reach the tolerance (no finite minimizer, e.g. linearly dependent
        embeddings).

    Examples
    --------
    >>> import numpy as np
    >>> from attnsvm import causal
    >>> problem = causal.ntp_problem([[1, 2, 0], [1, 2, 0], [2, 1, 0]], [1, 1, 2], d=4, seed=0)
    >>> W_fin = causal.finite_part(problem)
    >>> p = causal.ntp_probabilities(problem, W_fin)[0]
    >>> round(float(p[1] / (p[1] + p[2])), 6)  # the label odds 2:1
    0.666667
    """
    problem = _problem(problem)
    max_steps = positive_int(max_steps, "max_steps")
    basis = finite_subspace(problem)
    if len(basis) == 0:
        return np.zeros((problem.d, problem.d))
    evaluate = _reduced(problem, basis)
    u = np.zeros(len(basis))
    with np.errstate(over="ignore", invalid="ignore"):
        value, gradient, hessian = evaluate(u)
    finite_result(hessian, "the restricted loss's Hessian", "the problem's embeddings are too large (rescale them)")
    for _ in range(max_steps):
        if np.abs(gradient).max() <= 1e-12:
            return np.einsum("j,jde->de", u, basis)
        step = np.linalg.lstsq(hessian, gradient, rcond=None)[0]
        t = 1.0
        while True:
            with np.errstate(over="ignore", invalid="ignore"):
                trial = evaluate(u - t * step)
            # A predicted decrease below the loss's round-off cannot be tested on the loss: take the Newton step.
            negligible = gradient @ step <= 100 * np.finfo(float).eps * max(1.0, abs(value))
            if trial[0] <= value - 1e-4 * t * (gradient @ step) or negligible or t < 1e-12:
                break
            t /= 2
        if not (np.isfinite(trial[0]) and np.isfinite(trial[1]).all()):
            break
        u = u - t * step
        value, gradient, hessian = trial
    raise SolverError(f"finite_part: Newton's method did not reach a gradient below 1e-12 in max_steps="
                      f"{max_steps} steps (|gradient| = {np.abs(gradient).max():.3g}): the restricted loss may have "
                      f"no finite minimizer for this problem (linearly dependent or badly scaled embeddings?)")


# ------------------------------------------------------------------ the authors' random data sets

MAX_DRAWS = 10_000  # data sets drawn for one official_problems entry before giving up (no cycle possible?)
_CYCLE_ODDS = 0.01  # official_problems refuses at once where MAX_DRAWS draws find a cycle with at most this chance


def _cycle_probability_bound(n: int, T: int, K: int) -> float:
    """An upper bound on the probability that one draw of ``official_problems`` has a cycle. A cycle of G_q has at
    least two nodes, so one y != q. The edge out of y comes from a sequence i ending in q and labelled y, the edge
    into y from a sequence j ending in q, labelled otherwise, that holds y. For an ordered pair (i, j): the last
    tokens agree with probability 1/K; then y_i, uniform on i's T tokens, is one of its T - 1 others with
    probability (T - 1)/T, and lies among j's T - 1 others, drawn from the K - 1 tokens besides q, with
    probability (T - 1)/(K - 1). The union over the n(n - 1) pairs gives the bound."""
    return n * (n - 1) * (T - 1) ** 2 / (T * K * (K - 1))


def _draw(gen: torch.Generator, n: int, T: int, K: int, d: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One data set (ids, labels, E) of the authors' generator, from the stream ``gen`` in their order."""
    E = torch.randn(K, d, generator=gen, dtype=torch.float32).double()
    E = E / E.norm(dim=1, keepdim=True).clamp_min(1e-12)  # torch.nn.functional.normalize
    ids = torch.multinomial(torch.ones(n, K, dtype=torch.float32), T, replacement=False, generator=gen)
    labels = torch.multinomial(torch.ones(K, dtype=torch.float32), n, replacement=True, generator=gen)
    for i in range(n):
        if labels[i] not in ids[i]:
            labels[i] = ids[i, torch.randint(T, (1,), generator=gen)]
    return ids, labels, E


def _cyclic(ids: torch.Tensor, labels: torch.Tensor, E: torch.Tensor) -> NTPProblem | None:
    """The data set as an NTPProblem if some priority graph has a cycle, else None."""
    if len(set(ids[:, -1].tolist())) == len(ids):  # every query token alone: each graph is a star, no cycle
        return None
    problem = NTPProblem(ids, labels, E)
    return problem if any(len(c) > 1 for parts in priority_components(problem).values() for c in parts) else None


def official_problems(count: int, *, n: int = 6, T: int = 4, K: int = 6, d: int = 8,
                      seed: int = 1) -> list[tuple[NTPProblem, torch.Tensor]]:
    r"""The random cyclic data sets of the authors' global-convergence notebook (Li, Huang, Ildiz, Rawat, Oymak,
    public code), each with its initial W, replayed from their seed.

    One torch random stream seeded with ``seed`` draws, as their code does, K Gaussian embeddings in
    :math:`\mathbb{R}^d` normalized to unit norm (float32 draws, float64 normalization), n sequences of T distinct
    tokens, one label per sequence (uniform, redrawn from the sequence when it does not occur there), redrawing the
    whole set until some priority graph has a cycle; then torch.nn.Linear(d, d)'s default W (float32, as float64)
    and a second one their code builds and zeroes.

    Parameters
    ----------
    count : int
        How many data sets.
    n : int, default=6
        Sequences per set, :math:`n \ge 2`.
    T : int, default=4
        Tokens per sequence, :math:`2 \le T \le K`.
    K : int, default=6
        The size of the vocabulary.
    d : int, default=8
        The dimension.
    seed : int, default=1
        The seed of the stream.

    Returns
    -------
    list of tuple
        ``count`` pairs (problem, W0).

    Raises
    ------
    ValueError
        At once, for settings where a cycle is so improbable that ``MAX_DRAWS`` draws would find one with
        probability at most 1% (by a union bound on the pairs of sequences with the same last token), or n < 2,
        or T not in [2, K]; or when ``MAX_DRAWS`` draws find no data set with a cycle.

    Examples
    --------
    >>> from attnsvm import causal
    >>> problem, W0 = causal.official_problems(1)[0]
    >>> problem.ids[0].tolist(), problem.labels.tolist(), tuple(W0.shape)
    ([1, 2, 5, 4], [1, 5, 5, 0, 1, 3], (8, 8))
    """
    count, n, T = positive_int(count, "count"), positive_int(n, "n"), positive_int(T, "T")
    K, d, seed = positive_int(K, "K"), positive_int(d, "d"), _seed(seed)
    if not 2 <= T <= K or n < 2:
        raise ValueError(f"official_problems needs n >= 2 and 2 <= T <= K (sequences of T distinct tokens of K; a "
                         f"cycle needs two sequences and two tokens), got n={n}, T={T}, K={K}")
    memory(float(count) * (n * T + K * d + 2 * d * d), "count, n, T, K and d")
    chance = _cycle_probability_bound(n, T, K)
    if MAX_DRAWS * chance <= _CYCLE_ODDS:
        raise ValueError(f"official_problems: with n={n}, T={T}, K={K} a data set has a cycle with probability at most "
                         f"{chance:.1e}, so the {MAX_DRAWS} draws allowed would find one with probability at most "
                         f"{MAX_DRAWS * chance:.1e}: use more sequences n, more tokens per sequence T (T <= K) "
                         f"or fewer tokens K")
    gen = torch.Generator().manual_seed(seed)
    bound = 1.0 / np.sqrt(d)  # torch.nn.Linear's kaiming_uniform_(a=sqrt(5)): 1/sqrt(fan_in)
    pairs = []
    for _ in range(count):
        for _ in range(MAX_DRAWS):
            problem = _cyclic(*_draw(gen, n, T, K, d))
            if problem is not None:
                break
        else:
            raise ValueError(f"official_problems: no data set with a cycle in {MAX_DRAWS} draws (n={n}, T={T}, "
                             f"K={K}): use more sequences n, more tokens per sequence T (T <= K) or fewer tokens K")
        W0 = torch.empty(d, d, dtype=torch.float32).uniform_(-bound, bound, generator=gen).double()
        torch.empty(d, d, dtype=torch.float32).uniform_(-bound, bound, generator=gen)  # their W_fin model's, zeroed
        pairs.append((problem, W0))
    return pairs
