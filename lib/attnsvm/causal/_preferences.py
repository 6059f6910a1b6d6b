"""The token-preference graphs of the causal Att-SVM: which selections are optimal, the preference cycles that make
the hard margin infeasible, the constraints on them, and the most constraints one W can satisfy.

The constraint of pair (i, k, t) asks the query token a = x_ik to prefer the selected token p = x_{i alpha_ik} to
q = x_it: (p - q)^T (W a) >= 1. W a depends only on the query token, so for each distinct query token the
constraints form a directed preference graph p -> q over the distinct tokens (a networkx DiGraph), and any cycle
is infeasible (the margins around it sum to zero, not to its length)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch
from numpy.typing import ArrayLike

if TYPE_CHECKING:  # networkx is imported where it is used: it adds 0.15 s to `import attnsvm`
    import networkx as nx

from .._checks import boolean, budget, finite_result
from ._problems import SequenceProblem, _copies, _no_grad_numpy, _selection, optimal_tokens, separation_mask

__all__ = ["conflicts", "max_positive_margins", "preference_cycle", "selects_optimal", "MAX_GRAPH_STEPS",
           "MAX_ORDER_TOKENS"]

MAX_GRAPH_STEPS = 10**8  # steps of the preference-graph searches (`preference_cycle`, `conflicts`)
MAX_ORDER_TOKENS = 16  # `max_positive_margins` orders a strongly connected part of at most this many tokens exactly


def selects_optimal(problem: SequenceProblem, alpha: ArrayLike) -> torch.Tensor:
    r"""Whether :math:`\alpha_{ik}` is the optimal token of query (i, k) or an exact copy of it.

    Parameters
    ----------
    problem : SequenceProblem
        The problems (a batch).
    alpha : ArrayLike
        The selection, shape (..., n, K).

    Returns
    -------
    Tensor
        A boolean mask, shape (..., n, K).

    Raises
    ------
    ValueError
        If alpha does not fit the problem.

    Examples
    --------
    >>> import torch
    >>> from attnsvm import causal
    >>> problem = causal.random_problem(n=2, T=3, d=4, seed=0)
    >>> bool(causal.selects_optimal(problem, causal.optimal_tokens(problem)).all())
    True
    >>> causal.selects_optimal(problem, torch.zeros(2, 3, dtype=torch.int64))[:, 0].tolist()  # query 0: token 0
    [True, True]
    """
    if alpha is None:  # elsewhere None means the optimal tokens: compared with themselves, a silent "all True"
        raise TypeError("alpha is missing (None): selects_optimal(problem, alpha) says whether the selection alpha "
                        "(..., n, K) picks the optimal tokens; pass one, e.g. a training run's selection")
    alpha = _selection(problem, alpha)
    return _copies(problem, optimal_tokens(problem)).gather(-1, alpha[..., None])[..., 0]


def _preference_edges(problem: SequenceProblem, alpha: torch.Tensor) -> list[tuple[int, ...]]:
    """The constraints of one problem as preference edges: a list of (i, k, t, a, p, q), where the query token
    a = x_ik must prefer p = x_{i alpha_ik} to q = x_it, with a, p, q numbered by distinct token."""
    _, ids = torch.unique(problem.X.reshape(-1, problem.d), dim=0, return_inverse=True)
    ids = ids.reshape(problem.n, problem.T).tolist()
    return [(i, k, t, ids[i][k], ids[i][int(alpha[i, k])], ids[i][t])
            for i, k, t in separation_mask(problem, alpha).nonzero().tolist()]


def _graphs(edges: list) -> dict[int, nx.DiGraph]:
    """{query token a: its preference graph}, edges p -> q in the order of the constraints, each edge holding
    `constraint`: the first (i, k, t) asking for p over q, and `weight`: how many constraints ask for it. The
    graphs, their nodes and each node's edges are ordered by first appearance among the constraints (the searches
    depend on no other order)."""
    import networkx as nx
    graphs = {}
    for *_, a, p, q in edges:  # the nodes first, in the order they first prefer a token: `_shortest_cycle`'s order
        graphs.setdefault(a, nx.DiGraph()).add_node(p)
    for i, k, t, a, p, q in edges:
        graph = graphs[a]
        if graph.has_edge(p, q):
            graph[p][q]["weight"] += 1
        else:
            graph.add_edge(p, q, constraint=(i, k, t), weight=1)
    return graphs


def _graph_selection(problem: SequenceProblem, alpha) -> torch.Tensor:
    """alpha checked (`_selection`), for a problem whose constraints fit the graph searches' Python lists."""
    alpha = _selection(problem, alpha)
    budget(float(separation_mask(problem, alpha).sum()), "problem", 10**7,
           "separation constraints (one Python tuple each in the preference graphs; use fewer or shorter sequences)")
    return alpha


def _graph_budget(graphs) -> None:
    """Refuse preference graphs whose searches (a breadth-first search per edge) would run for hours."""
    work = sum(graph.number_of_edges() * (graph.number_of_edges() + graph.number_of_nodes()) for graph in graphs)
    budget(work, "problem", MAX_GRAPH_STEPS, "preference-graph search steps (use fewer or shorter sequences)")


def _flat(problem: SequenceProblem, alpha: torch.Tensor):
    """The problems of the batch and their selections, flattened to one batch dimension."""
    flat = SequenceProblem(problem.X.reshape((-1,) + problem.X.shape[-3:]),
                           problem.V.reshape((-1,) + problem.V.shape[-3:]), causal=problem.causal)
    return flat, alpha.reshape((-1,) + alpha.shape[-2:])


def _shortest_cycle(graph: nx.DiGraph) -> list | None:
    """The shortest directed cycle [p_0, ..., p_{L-1}] of `graph`, or None: for every edge p -> q (in the order
    the edges were added), networkx's breadth-first shortest path from q back to p closes a cycle through it; the
    first of the shortest wins (a deterministic choice among cycles of equal length)."""
    import networkx as nx
    best, paths = None, {}
    for p, q in graph.edges:
        if q not in paths:
            paths[q] = nx.single_source_shortest_path(graph, q)
        back = paths[q].get(p)  # [q, ..., p]
        if back is not None and (best is None or len(back) < len(best)):
            best = [p] + back[:-1]
    return best


def preference_cycle(problem: SequenceProblem, alpha: ArrayLike | None = None) -> list[tuple[int, int, int]] | None:
    r"""A short cycle of contradictory constraints of the hard-margin Att-SVM of one problem, or None.

    The constraint of pair (i, k, t) asks the query token :math:`a = x_{ik}` to prefer the selected token
    :math:`p = x_{i\alpha_{ik}}` to :math:`q = x_{it}` by a margin of one: :math:`(p - q)^\top (W a) \ge 1`.
    :math:`W a` depends only on the query token, so for each distinct query token the constraints form a directed
    preference graph :math:`p \to q` over the distinct tokens, and any cycle :math:`p_0 \to p_1 \to \dots \to p_0`
    is infeasible (the margins around it sum to zero, not to its length). When the distinct tokens are linearly
    independent (e.g. at most d random embeddings), the converse holds too: the hard-margin SVM is feasible exactly
    when no query token's preferences have a cycle (see ``conflicts``).

    Parameters
    ----------
    problem : SequenceProblem
        One problem.
    alpha : ArrayLike or None, default=None
        The selection (None: the optimal tokens).

    Returns
    -------
    list of tuple or None
        The constraints along the shortest cycle found, as (i, k, t) index triples (each: query k of sequence i
        prefers its selected token to token t), or None when every preference graph is acyclic.

    Raises
    ------
    ValueError
        If the problem is a batch, or alpha does not fit it.

    Examples
    --------
    >>> import torch
    >>> from attnsvm import causal
    >>> a, b, c = torch.eye(3, dtype=torch.float64)
    >>> X = torch.stack([torch.stack([b, a]), torch.stack([b, a])])  # two sequences "b a"
    >>> V = torch.stack([torch.stack([c, a]), torch.stack([c, b])])  # the query a wants a, then b
    >>> causal.preference_cycle(causal.SequenceProblem(X, V))
    [(0, 1, 0), (1, 1, 1)]
    >>> causal.preference_cycle(causal.random_problem(n=2, T=3, d=4, seed=0)) is None
    True
    """
    alpha = _graph_selection(problem, alpha)
    if problem.batch_shape:
        raise ValueError("preference_cycle takes one problem: index the batch first, e.g. problem[0]")
    graphs = _graphs(_preference_edges(problem, alpha))
    _graph_budget(graphs.values())
    best = None
    for graph in graphs.values():
        cycle = _shortest_cycle(graph)
        if cycle is not None and (best is None or len(cycle) < len(best[1])):
            best = graph, cycle
    if best is None:
        return None
    graph, cycle = best
    return [graph[p][q]["constraint"] for p, q in zip(cycle, cycle[1:] + cycle[:1])]


def _components(graph: nx.DiGraph) -> dict:
    """{token: the frozenset of its strongly connected component}."""
    import networkx as nx
    return {x: members for members in map(frozenset, nx.strongly_connected_components(graph)) for x in members}


def conflicts(problem: SequenceProblem, alpha: ArrayLike | None = None) -> np.ndarray:
    r"""The constraints of the hard-margin Att-SVM that lie on a preference cycle.

    An edge :math:`p \to q` of query token a's preference graph (see ``preference_cycle``) is in conflict when q
    leads back to p, that is, when p and q lie in one strongly connected component. No W gives every constraint of
    a cycle a positive margin: the margins around it sum to zero. When the distinct tokens are linearly
    independent, this is the whole obstruction: some W gives every other constraint a margin of at least one and
    the conflicting ones a margin of exactly zero (:math:`W x_a` can be chosen for each query token a on its own,
    and :math:`p^\top W x_a` for each token p: order the strongly connected components of each graph). So the
    hard-margin SVM is then feasible exactly when no constraint is in conflict.

    Parameters
    ----------
    problem : SequenceProblem
        The problems (a batch).
    alpha : ArrayLike or None, default=None
        The selection (None: the optimal tokens).

    Returns
    -------
    ndarray
        A boolean mask, shape (..., n, K, T).

    Raises
    ------
    ValueError
        If alpha does not fit the problem.

    Examples
    --------
    >>> from attnsvm import causal
    >>> problems, _ = causal.next_token_problems(6, 5, 8, V=6, seeds=[0, 1, 2])
    >>> on_cycle = causal.conflicts(problems)
    >>> on_cycle.shape, on_cycle.sum((-3, -2, -1)).tolist(), causal.feasible(problems).tolist()
    ((3, 6, 4, 5), [10, 12, 11], [False, False, False])
    """
    alpha = _graph_selection(problem, alpha)
    flat, alpha = _flat(problem, alpha)
    out = np.zeros((len(alpha), problem.n, problem.K, problem.T), dtype=bool)
    for b in range(len(alpha)):
        edges = _preference_edges(flat[b], alpha[b])
        graphs = _graphs(edges)
        _graph_budget(graphs.values())
        components = {a: _components(graph) for a, graph in graphs.items()}
        for i, k, t, a, p, q in edges:
            out[b, i, k, t] = components[a][p] == components[a][q]
    return out.reshape(problem.batch_shape + out.shape[1:])


def _best_inside(graph: nx.DiGraph, members: frozenset) -> tuple[int, list]:
    """(the most edge weight an order of `members` puts forward, one such order), by dynamic programming over the
    subsets of the component (hand-written: this is the linear-ordering problem, NP-hard, which networkx does not
    solve; a component has at most MAX_ORDER_TOKENS tokens)."""
    names = sorted(members)
    index = {x: j for j, x in enumerate(names)}
    into = [[0] * len(index) for _ in index]  # into[v][u]: weight of the edge u -> v
    for p, q, w in graph.subgraph(members).edges(data="weight"):
        into[index[q]][index[p]] += w
    best = [0] + [-1] * ((1 << len(index)) - 1)  # best[S]: the nodes of S placed first, in the best order
    last = [-1] * (1 << len(index))  # the node placed last in a best order of S
    for S in range(1 << len(index)):
        for v in range(len(index)):
            if not S >> v & 1:
                gained = sum(into[v][u] for u in range(len(index)) if S >> u & 1)
                if best[S] + gained > best[S | 1 << v]:
                    best[S | 1 << v], last[S | 1 << v] = best[S] + gained, v
    order, S = [], (1 << len(index)) - 1
    while S:
        order.append(names[last[S]])
        S &= ~(1 << last[S])
    return best[-1], order[::-1]


def _best_order(graph: nx.DiGraph) -> tuple[int, list]:
    """(max over orders of the nodes of the total weight of the edges p -> q with p before q, one best order).

    Every edge between strongly connected components goes forward in a topological order of the condensation
    (networkx: the lexicographic one by each component's smallest token, a deterministic choice); inside a
    component, `_best_inside` finds the best order exactly."""
    import networkx as nx
    condensation = nx.condensation(graph)
    members = nx.get_node_attributes(condensation, "members")
    component = condensation.graph["mapping"]
    total = sum(w for p, q, w in graph.edges(data="weight") if component[p] != component[q])  # always satisfiable
    order = []
    for c in nx.lexicographical_topological_sort(condensation, key=lambda c: min(members[c])):
        if len(members[c]) > MAX_ORDER_TOKENS:
            raise ValueError(f"problem has a preference conflict among {len(members[c])} tokens, too large for the "
                             f"exact count (at most {MAX_ORDER_TOKENS}): use fewer sequences or a larger vocabulary")
        count, inside = _best_inside(graph, frozenset(members[c])) if len(members[c]) > 1 else (0, list(members[c]))
        total += count
        order.extend(inside)
    return total, order


def max_positive_margins(problem: SequenceProblem, alpha: ArrayLike | None = None, *,
                         return_W: bool = False) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    r"""The largest number of Att-SVM constraints that one W can give a positive margin.

    Any W orders the tokens for each query token a by their logits :math:`p^\top W x_a`, and a constraint (prefer p
    to q) has a positive margin only if p comes before q. So the count is at most the sum, over the query tokens,
    of the most constraints that one order of the tokens satisfies: all the edges between different strongly
    connected components of a's preference graph, plus the best order inside each component (found exactly by
    dynamic programming over its subsets). When the distinct tokens are linearly independent, every family of
    orders is realized by some W (see ``conflicts``), and the bound is attained.

    Parameters
    ----------
    problem : SequenceProblem
        The problems (a batch).
    alpha : ArrayLike or None, default=None
        The selection (None: the optimal tokens).
    return_W : bool, default=False
        Also return a witness W with :math:`p^\top W x_a` = -(the rank of p in a best order of a's tokens) for
        every distinct token p and query token a, by least squares (pseudo-inverses). When the distinct tokens are
        linearly independent these equations hold exactly and W attains the count; otherwise it may attain fewer.

    Returns
    -------
    ndarray or tuple of ndarray
        The counts (int, shape (...)), and with ``return_W`` the witnesses (..., d, d).

    Raises
    ------
    ValueError
        If alpha does not fit the problem, or a component is too large for the dynamic program.

    Examples
    --------
    >>> import numpy as np
    >>> from attnsvm import causal
    >>> problems, _ = causal.next_token_problems(10, 5, 30, seeds=range(3))  # 20 tokens in R^30: independent
    >>> best, W = causal.max_positive_margins(problems, return_W=True)
    >>> best.tolist(), causal.separation_mask(problems).sum((-3, -2, -1)).tolist()  # attainable, of all
    ([60, 49, 54], [60, 51, 59])
    >>> (np.nan_to_num(causal.margins(problems, W), nan=0.0) > 0).sum((-3, -2, -1)).tolist()  # the witness
    [60, 49, 54]
    """
    return_W = boolean(return_W, "return_W")
    alpha = _graph_selection(problem, alpha)
    flat, alpha = _flat(problem, alpha)
    counts, witnesses = [], []
    for b in range(len(alpha)):
        graphs = _graphs(_preference_edges(flat[b], alpha[b]))
        _graph_budget(graphs.values())
        best = {a: _best_order(graph) for a, graph in graphs.items()}
        counts.append(sum(count for count, _ in best.values()))
        if return_W:
            tokens = _no_grad_numpy(torch.unique(flat[b].X.reshape(-1, problem.d), dim=0))  # ids as in the edges
            queries = sorted(best)
            phi = np.zeros((len(tokens), len(queries)))  # phi[p, j] = p^T W x_(queries[j])
            for j, a in enumerate(queries):
                for rank, p in enumerate(best[a][1]):
                    phi[p, j] = -float(rank)
            A = tokens[queries]
            witnesses.append(np.linalg.pinv(tokens) @ phi @ np.linalg.pinv(A.T) if queries else
                             np.zeros((problem.d, problem.d)))
    counts = np.array(counts, dtype=np.int64).reshape(problem.batch_shape)
    if not return_W:
        return counts
    witness = np.stack(witnesses).reshape(problem.batch_shape + (problem.d, problem.d))
    return counts, finite_result(witness, "the witness W", "the problem's tokens are too small (rescale them)")
