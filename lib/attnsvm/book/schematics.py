"""Schematic figures of the book's objects, drawn by code: the attention model, token selection as a linear
separation in the space of W, the regularization path of a two-dimensional problem, and the graph of the
chapters' prerequisites.

Every figure is ``WIDTH`` inches wide (``WIDTH`` * 100 CSS pixels, narrower than a 370-px phone column) with
panels stacked in rows and fonts of at least 9 pt, so that it shows whole, with readable text, on a phone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import networkx as nx
import numpy as np
import torch
from matplotlib.axes import Axes
from scipy.optimize import minimize_scalar
from matplotlib.patches import Circle, FancyBboxPatch
from numpy.typing import ArrayLike

from .. import model
from ..data import Problem
from . import plots

__all__ = ["WIDTH", "BAR", "shared_query_problem", "ball_minimizers", "attention_model", "separation", "path_turn",
           "prerequisites", "book_prerequisites", "chapter_graph", "PREREQUISITES_FILE"]

WIDTH = 3.6  # inches: 360 CSS px, shown unscaled in a 370-px phone column
# The book's prerequisite graph, read from book_src/ by tools/prerequisites.py and stored with the library, so that
# the introduction draws it wherever its notebook runs (Colab has no book_src/); tests/lib/test_schematics.py checks
# it against the sources.
PREREQUISITES_FILE = Path(__file__).with_name("prerequisites.json")
BAR = 3.0  # axis units of attention_model's bar for attention 1


def shared_query_problem(problem: Problem) -> Problem:
    r"""A problem (d = 2) with every query replaced by z = (1, 0).

    Then :math:`\langle A_{it}, W\rangle = (x_{ia} - x_{it})^\top W z`, so the loss and the Att-SVM depend on W
    only through its first column w = Wz: the space of W becomes a plane.

    Parameters
    ----------
    problem : Problem
        One problem with tokens in :math:`\mathbb{R}^2`.

    Returns
    -------
    Problem
        The problem with the shared query.

    Raises
    ------
    ValueError
        If problem is a batch or its tokens are not in :math:`\mathbb{R}^2`.

    Examples
    --------
    >>> from attnsvm import data
    >>> from attnsvm.book import schematics
    >>> schematics.shared_query_problem(data.planar_problem(seed=4, n=2, T=4)).Z.tolist()
    [[1.0, 0.0], [1.0, 0.0]]
    """
    if not isinstance(problem, Problem) or problem.batch_shape or problem.d != 2:
        raise ValueError("problem must be one Problem (no batch) with tokens in R^2, e.g. data.planar_problem(...)")
    Z = torch.zeros(problem.n, 2, dtype=torch.float64)
    Z[:, 0] = 1.0
    return Problem(problem.X, problem.Y, Z, problem.v)


def ball_minimizers(problem: Problem, radii: ArrayLike, *, angles: int = 2880, rings: int = 100) -> np.ndarray:
    r""":math:`w_R = W_R z`, where :math:`W_R` minimizes the logistic loss over :math:`\{\|W\|_F \le R\}`, for a
    ``shared_query_problem``.

    The best point of a polar grid of the disk of radius R (``angles`` directions, ``rings`` radii up to R),
    refined, when it lies on the circle :math:`\|w\| = R`, by a bounded one-dimensional search over the angle within
    one grid step on either side. Its accuracy is limited by how flat the loss is in float64, which grows with R
    (the tests compare it with ``train.regularization_path`` up to R = 8). The grid makes it the global minimizer
    unless the loss has a deeper dip narrower than the grid's spacing (:math:`2\pi`/angles in angle, R/rings in
    norm), or two basins whose minima differ by less than the grid's error.

    Parameters
    ----------
    problem : Problem
        A ``shared_query_problem``.
    radii : ArrayLike
        Positive finite radii.
    angles : int, default=2880
        Directions of the grid, at least 4.
    rings : int, default=100
        Radii of the grid, at least 1.

    Returns
    -------
    ndarray
        :math:`w_R`, shape (len(radii), 2).

    Raises
    ------
    ValueError
        If problem does not have the shared query z = (1, 0), radii is empty or not positive, or angles < 4 or
        rings < 1.

    Examples
    --------
    >>> from attnsvm import data
    >>> from attnsvm.book import schematics
    >>> problem = schematics.shared_query_problem(data.planar_problem(seed=4, n=2, T=4))
    >>> w = schematics.ball_minimizers(problem, [1.0, 4.0], angles=360, rings=10)
    >>> np.linalg.norm(w, axis=1).round(6).tolist()  # on the boundary of each disk
    [1.0, 4.0]
    """
    if problem.Z is None or not torch.equal(problem.Z, shared_query_problem(problem).Z):
        raise ValueError("problem must have the shared query z = (1, 0): pass schematics.shared_query_problem(...)")
    radii = np.asarray(radii, dtype=float)
    if radii.ndim != 1 or radii.size == 0 or not np.all(np.isfinite(radii) & (radii > 0)):
        raise ValueError(f"radii must be a non-empty list of positive finite radii, got {radii.tolist()}")
    if int(angles) < 4 or int(rings) < 1:
        raise ValueError(f"angles must be at least 4 and rings at least 1, got angles={angles}, rings={rings}")

    def losses(w: np.ndarray) -> np.ndarray:
        W = torch.zeros(len(w), 2, 2, dtype=torch.float64)
        W[:, :, 0] = torch.from_numpy(w)
        return model.loss(problem, W).numpy()

    step = 2 * np.pi / int(angles)
    theta = np.arange(int(angles)) * step
    unit = np.stack([np.cos(theta), np.sin(theta)], -1)
    best = []
    for R in radii:
        w = (np.linspace(R / rings, R, int(rings))[:, None, None] * unit).reshape(-1, 2)
        k = int(losses(w).argmin())
        if k < len(w) - int(angles):  # inside the disk: the grid point
            best.append(w[k])
            continue
        on_circle = minimize_scalar(lambda a: losses(R * np.array([[np.cos(a), np.sin(a)]]))[0],
                                    bounds=(theta[k % int(angles)] - step, theta[k % int(angles)] + step),
                                    method="bounded", options={"xatol": 1e-9})
        best.append(R * np.array([np.cos(on_circle.x), np.sin(on_circle.x)]))
    return np.array(best)


def _box(ax, x: float, y: float, text: str, *, width: float, color: str, height: float = 0.7) -> None:
    ax.add_patch(FancyBboxPatch((x - width / 2, y - height / 2), width, height, boxstyle="round,pad=0.05",
                                facecolor=color, edgecolor=plots.PALETTE["black"], alpha=0.9, linewidth=1))
    ax.text(x, y, text, ha="center", va="center", fontsize=10)


def attention_model(ax: Axes, scores: ArrayLike) -> None:
    r"""The attention model as a diagram: tokens :math:`x_1, \dots, x_T`, the query z, the scores
    :math:`x_t^\top W z`, the attention :math:`s = \mathrm{softmax}(XWz)` as bars and the output
    :math:`v^\top X^\top s`.

    Parameters
    ----------
    ax : Axes
        Where to draw.
    scores : ArrayLike
        The scores, shape (T,), :math:`2 \le T \le 6` (the bars are ``BAR`` long for :math:`s_t = 1`).

    Raises
    ------
    ValueError
        If scores is not T finite numbers with :math:`2 \le T \le 6`.

    Examples
    --------
    >>> import matplotlib; matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> from attnsvm.book import schematics
    >>> fig, ax = plt.subplots()
    >>> schematics.attention_model(ax, [2.0, 0.5, -1.0, 0.0])
    >>> [round(float(bar.get_width()) / schematics.BAR, 4) for bar in ax.containers[0]]
    [0.7101, 0.1584, 0.0354, 0.0961]
    >>> plt.close(fig)
    """
    scores = np.asarray(scores, dtype=float)
    if scores.ndim != 1 or not 2 <= scores.size <= 6 or not np.all(np.isfinite(scores)):
        raise ValueError(f"scores must be T finite numbers, 2 <= T <= 6 (one per token), got shape {scores.shape}")
    s = np.exp(scores - scores.max())
    s /= s.sum()
    T = scores.size
    ax.set(xlim=(0, 10), ylim=(-2.4, T + 0.3))
    ax.axis("off")
    ax.text(0.9, T - 0.2, "tokens", ha="center", fontsize=10)
    ax.text(4.0, T - 0.2, r"$x_t^\top Wz$", ha="center", fontsize=10)
    ax.text(8.0, T - 0.2, r"$s=\mathrm{softmax}(XWz)$", ha="center", fontsize=10)
    for t in range(T):
        y = T - 1 - t
        _box(ax, 0.9, y, f"$x_{t + 1}$", width=1.1, color=plots.PALETTE["sky"])
        ax.annotate("", xy=(3.1, y), xytext=(1.6, y), arrowprops=dict(arrowstyle="->", linewidth=1))
        ax.text(4.0, y, f"{scores[t]:+.1f}", ha="center", va="center", fontsize=10)
        ax.annotate("", xy=(6.2, y), xytext=(4.9, y), arrowprops=dict(arrowstyle="->", linewidth=1))
    ax.barh(T - 1 - np.arange(T), BAR * s, left=6.4, height=0.55, color=plots.PALETTE["orange"])
    _box(ax, 1.2, -1.1, "query $z$", width=2.2, color=plots.PALETTE["green"])
    ax.annotate("", xy=(3.9, -0.45), xytext=(2.4, -1.1), arrowprops=dict(arrowstyle="->", linewidth=1))
    ax.text(9.9, -1.1, r"output $v^\top X^\top s$", ha="right", va="center", fontsize=10)


def _deltas(problem: Problem, alpha: ArrayLike) -> np.ndarray:
    """x_{i alpha_i} - x_it for t != alpha_i, shape (n (T - 1), 2)."""
    X, alpha = problem.X.numpy(), np.asarray(alpha)
    n, T, _ = X.shape
    return np.concatenate([X[i, alpha[i]] - X[i, np.arange(T) != alpha[i]] for i in range(n)])


def separation(ax: Axes, problem: Problem, alpha: ArrayLike, W_mm: ArrayLike, *, tol: float = 1e-6) -> np.ndarray:
    r"""Token selection as separation, for a ``shared_query_problem``.

    Draws the points :math:`x_{ia} - x_{it}` (standing for :math:`A_{it} = (x_{ia} - x_{it}) z^\top`), the line
    :math:`\langle A, W_{mm}\rangle = 0` through 0 (orthogonal to :math:`w = W_{mm} z`), the margin line
    :math:`\langle A, W_{mm}\rangle = 1` through the support points (ringed) and the direction of :math:`W_{mm}`.

    Parameters
    ----------
    ax : Axes
        Where to draw.
    problem : Problem
        A ``shared_query_problem``.
    alpha : ArrayLike
        The selected tokens, shape (n,).
    W_mm : ArrayLike
        Its Att-SVM, 2 x 2.
    tol : float, default=1e-06
        A point is ringed when its margin is within tol of 1.

    Returns
    -------
    ndarray
        The margins :math:`\langle A_{it}, W_{mm}\rangle`, shape (n(T - 1),).

    Raises
    ------
    ValueError
        If W_mm is not the 2 x 2 Att-SVM of a shared-query problem (its second column zero).

    Examples
    --------
    >>> import matplotlib; matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> from attnsvm import data, svm, theory
    >>> from attnsvm.book import schematics
    >>> problem = schematics.shared_query_problem(data.planar_problem(seed=4, n=2, T=4))
    >>> alpha = theory.optimal_tokens(problem)
    >>> fig, ax = plt.subplots()
    >>> margins = schematics.separation(ax, problem, alpha, svm.att_svm(problem.X, problem.Z, alpha))
    >>> bool(margins.min() > 1 - 1e-6)
    True
    >>> plt.close(fig)
    """
    W_mm = np.asarray(W_mm, dtype=float)
    if W_mm.shape != (2, 2) or np.abs(W_mm[:, 1]).max() > 1e-8 * np.abs(W_mm).max():
        raise ValueError("W_mm must be the 2 x 2 Att-SVM of a shared_query_problem (its second column zero), got "
                         f"{W_mm.tolist()}")
    points, w = _deltas(shared_query_problem(problem), alpha), W_mm[:, 0]
    margins = points @ w
    support = np.abs(margins - 1) <= tol
    reach = 1.3 * np.abs(points).max()
    plots.line(ax, [0.0, 0.0], w, reach=reach, color=plots.PALETTE["black"],
               label=r"$\langle A,W^{\mathrm{mm}}\rangle=0$: a line through 0")
    plots.line(ax, w / (w @ w), w, reach=reach, linestyle="--", color=plots.PALETTE["vermillion"],
               label=r"margin: $\langle A,W^{\mathrm{mm}}\rangle=1$")
    ax.scatter(*points.T, s=36, color=plots.PALETTE["blue"], zorder=3, label=r"$A_{it}$")
    ax.scatter(*points[support].T, s=150, facecolor="none", edgecolor=plots.PALETTE["black"], zorder=3,
               label="support")
    head = 0.8 * reach * w / np.linalg.norm(w)
    ax.annotate("", xy=head, xytext=(0, 0), arrowprops=dict(arrowstyle="-|>", color=plots.PALETTE["vermillion"],
                                                            linewidth=2, mutation_scale=14))
    ax.text(*(head + [0.0, 0.12 * reach]), r"$W^{\mathrm{mm}}$", color=plots.PALETTE["vermillion"], fontsize=11,
            ha="center")
    ax.scatter([0], [0], s=30, color=plots.PALETTE["black"], marker="+", zorder=3)
    top = points[np.argmax(points[:, 1])]
    ax.text(top[0], top[1] + 0.1 * reach, r"$A_{it}$", ha="center", va="bottom", color=plots.PALETTE["blue"],
            fontsize=11)
    ax.set(xlim=(-0.5 * reach, reach), ylim=(-0.75 * reach, 0.75 * reach), aspect="equal")
    ax.set(xlabel="first coordinate of $Wz$", ylabel="second coordinate")
    ax.legend(handles=ax.lines[:2], loc="upper left", bbox_to_anchor=(0.0, -0.22))
    return margins


def path_turn(ax_plane: Axes, ax_angle: Axes, radii: ArrayLike, w: ArrayLike, W_mm: ArrayLike) -> np.ndarray:
    """The regularization path of a ``shared_query_problem`` in a picture, and the angles it turns through.

    On ``ax_plane`` the unit directions of :math:`w_R = W_R z`, darker for larger R, and the direction of
    :math:`W_{mm}`; on ``ax_angle`` the angle between :math:`W_R` and :math:`W_{mm}`, in degrees, against R (log
    scale).

    Parameters
    ----------
    ax_plane : Axes
        Where to draw the directions.
    ax_angle : Axes
        Where to draw the angles.
    radii : ArrayLike
        The radii R.
    w : ArrayLike
        :math:`w_R`, shape (len(radii), 2), e.g. ``ball_minimizers``.
    W_mm : ArrayLike
        The Att-SVM, 2 x 2.

    Returns
    -------
    ndarray
        The angles in degrees, shape (len(radii),).

    Raises
    ------
    ValueError
        If W_mm is not 2 x 2 or w not (len(radii), 2).

    Examples
    --------
    >>> import matplotlib; matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> from attnsvm.book import schematics
    >>> fig, (top, bottom) = plt.subplots(2, 1)
    >>> schematics.path_turn(top, bottom, [1.0, 10.0], [[0.0, 1.0], [10.0, 0.0]], [[1.0, 0.0], [0.0, 0.0]])
    array([90.,  0.])
    >>> plt.close(fig)
    """
    radii, w, W_mm = (np.asarray(a, dtype=float) for a in (radii, w, W_mm))
    if W_mm.shape != (2, 2) or w.shape != (radii.size, 2):
        raise ValueError(f"W_mm must be 2 x 2 and w (len(radii), 2), got {W_mm.shape} and {w.shape}")
    unit, mm = w / np.linalg.norm(w, axis=1, keepdims=True), W_mm[:, 0] / np.linalg.norm(W_mm[:, 0])
    angles = np.degrees(np.arccos(np.clip(unit @ mm, -1.0, 1.0)))
    shades = plt.get_cmap("Blues")(np.linspace(0.55, 1.0, radii.size))
    arc = np.linspace(0, 2 * np.pi, 721)
    ax_plane.plot(np.cos(arc), np.sin(arc), color=plots.PALETTE["black"], linewidth=0.8, alpha=0.4)
    for R, u, shade in zip(radii, unit, shades):
        ax_plane.plot([0, u[0]], [0, u[1]], color=shade, linewidth=2)
    ax_plane.plot([0, mm[0]], [0, mm[1]], color=plots.PALETTE["vermillion"], linestyle="--", linewidth=2)
    ax_plane.text(*(1.04 * mm), r"$W^{\mathrm{mm}}$", color=plots.PALETTE["vermillion"], fontsize=11,
                  va="top")
    for k in (0, radii.size - 1):
        ax_plane.text(*(1.04 * unit[k]), f"$R={radii[k]:g}$", color=shades[k], fontsize=10, va="bottom")
    spread = np.concatenate([unit, mm[None]])
    low, high = spread.min(0) - 0.15, spread.max(0) + 0.15
    ax_plane.set(xlim=(min(low[0], -0.05), high[0] + 0.45), ylim=(min(low[1], -0.05), max(high[1], 0.05)),
                 aspect="equal", xlabel=r"first coordinate of $W_Rz/\Vert W_Rz\Vert$", ylabel="second")
    ax_angle.plot(radii, angles, marker="o", color=plots.PALETTE["blue"])
    ax_angle.set(xscale="log", xlabel="radius $R$", ylabel=r"angle to $W^{\mathrm{mm}}$ (deg)")
    return angles


# ------------------------------------------------------------------ the chapters' prerequisites

_REF = re.compile(r"<?(chapter-[a-z-]+)>?`")


def _node(stem: str, sources: Mapping[str, str]) -> str | None:
    """The sidebar's name of a chapter file: "P" for the prelude, "3" for 03_..., "3.11" for a section file 03b_...
    (numbered after the sections of its chapter); None for other pages."""
    if stem == "prelude":
        return "P"
    found = re.fullmatch(r"(\d\d)(b?)_\w+", stem)
    if found is None or int(found[1]) == 0:  # not a chapter, or the introduction
        return None
    number = str(int(found[1]))
    if not found[2]:
        return number
    chapter = next(text for name, text in sources.items() if name.startswith(found[1] + "_"))
    prose = re.sub(r"```.*?```", "", chapter, flags=re.S)
    return f"{number}.{len(re.findall(r'^## ', prose, flags=re.M)) + 1}"


def prerequisites(sources: Mapping[str, str]) -> nx.DiGraph:
    """The chapters' prerequisite graph.

    An edge :math:`u \\to v` for every chapter u that chapter v's "Prerequisites:" paragraph cross-references (a
    MyST ref role to a chapter label), with kind "background" when the sentence says "background" and "needs"
    otherwise.

    Parameters
    ----------
    sources : dict
        File stem to MyST text of every page (book_src/*.md).

    Returns
    -------
    networkx.DiGraph
        The graph.

    Raises
    ------
    ValueError
        If a chapter has no "Prerequisites:" paragraph, or refers to a label no page defines.

    Examples
    --------
    >>> from attnsvm.book import schematics
    >>> pages = {"01_a": "(chapter-a)=\\nPrerequisites: linear algebra.\\n",
    ...          "02_b": "(chapter-b)=\\nPrerequisites: {ref}`chapter-a`.\\n"}
    >>> list(schematics.prerequisites(pages).edges(data="kind"))
    [('1', '2', 'needs')]
    """
    names = {stem: _node(stem, sources) for stem in sources}
    labels = {}
    for stem, text in sources.items():
        for label in re.findall(r"^\((chapter-[a-z-]+)\)=", text, flags=re.M):
            labels[label] = names[stem]
    graph = nx.DiGraph()
    for stem, text in sources.items():
        if names[stem] is None:
            continue
        graph.add_node(names[stem])
        found = re.search(r"^Prerequisites:(.*?)(?:\n\s*\n|\n:::|\Z)", text, flags=re.M | re.S)
        if found is None:
            raise ValueError(f"{stem}: no 'Prerequisites:' paragraph; every chapter states its prerequisites")
        for sentence in re.split(r"(?<=\.)\s", found[1]):
            kind = "background" if "background" in sentence else "needs"
            for label in _REF.findall(sentence):
                if label not in labels:
                    raise ValueError(f"{stem}: its prerequisites refer to {label!r}, which no page defines")
                if labels[label] is None:
                    raise ValueError(f"{stem}: its prerequisites refer to {label!r}, which is on a page that is not "
                                     "a chapter or a numbered section of one: refer to its chapter")
                graph.add_edge(labels[label], names[stem], kind=kind)
    return graph


def book_prerequisites() -> nx.DiGraph:
    """The book's own prerequisite graph (``prerequisites`` of book_src/*.md), as stored in PREREQUISITES_FILE.

    Returns
    -------
    networkx.DiGraph
        The graph.

    Examples
    --------
    >>> from attnsvm.book import schematics
    >>> graph = schematics.book_prerequisites()
    >>> graph.edges["1", "2"]["kind"], sorted(graph.predecessors("2"))
    ('needs', ['1'])
    """
    stored = json.loads(PREREQUISITES_FILE.read_text())
    graph = nx.DiGraph()
    graph.add_nodes_from(stored["chapters"])
    graph.add_edges_from((u, v, {"kind": kind}) for u, v, kind in stored["edges"])
    return graph


def _order(node: str) -> tuple[float, ...]:
    return (-1.0,) if node == "P" else tuple(float(part) for part in node.split("."))


def chapter_graph(ax: Axes, graph: nx.DiGraph, parts: Mapping[str, Sequence[str]]) -> nx.DiGraph:
    """Draw a prerequisite graph in layers, each chapter below all it needs.

    The edges that other "needs" paths imply are left out (the transitive reduction of the "needs" edges) and the
    "background" edges that no "needs" path implies are dashed. An edge that skips layers runs through places of
    its own in the layers it crosses, so that it never passes behind a chapter; each layer is ordered by the mean
    place of what it hangs from.

    Parameters
    ----------
    ax : Axes
        Where to draw.
    graph : networkx.DiGraph
        The graph (from ``prerequisites``).
    parts : dict
        Part name to chapter names, in legend order; the chapters are coloured by part.

    Returns
    -------
    networkx.DiGraph
        The graph of the drawn edges.

    Raises
    ------
    ValueError
        If graph has a cycle, or parts misses a chapter.

    Examples
    --------
    >>> import matplotlib; matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> from attnsvm.book import schematics
    >>> graph = nx.DiGraph([("1", "2"), ("2", "3"), ("1", "3")])
    >>> fig, ax = plt.subplots()
    >>> sorted(schematics.chapter_graph(ax, graph, {"Part I": ["1", "2", "3"]}).edges)
    [('1', '2'), ('2', '3')]
    >>> plt.close(fig)
    """
    if not nx.is_directed_acyclic_graph(graph):
        raise ValueError("graph must be acyclic: a chapter cannot be its own prerequisite")
    missing = set(graph) - {node for nodes in parts.values() for node in nodes}
    if missing:
        raise ValueError(f"parts must name every chapter of the graph; missing: {sorted(missing, key=_order)}")
    needs = nx.DiGraph([(u, v) for u, v, kind in graph.edges(data="kind") if kind != "background"])
    needs.add_nodes_from(graph)
    drawn = nx.transitive_reduction(needs)
    drawn.add_edges_from((u, v, {"kind": "needs"}) for u, v in list(drawn.edges))
    drawn.add_edges_from((u, v, {"kind": kind}) for u, v, kind in graph.edges(data="kind")
                         if kind == "background" and not nx.has_path(needs, u, v))
    depth = {node: k for k, layer in enumerate(nx.topological_generations(graph)) for node in layer}
    routes = {(u, v): [u] + [(u, v, k) for k in range(depth[u] + 1, depth[v])] + [v] for u, v in drawn.edges}
    layers = [[] for _ in range(max(depth.values()) + 1)]  # chapters, and one waypoint per layer a long edge crosses
    for node in sorted(graph, key=_order):
        layers[depth[node]].append(node)
    for route in routes.values():
        for waypoint in route[1:-1]:
            layers[waypoint[2]].append(waypoint)
    above = {}  # each chapter's or waypoint's neighbours one layer up
    for route in routes.values():
        for upper, lower in zip(route, route[1:]):
            above.setdefault(lower, []).append(upper)
    position = {}
    for k, layer in enumerate(layers):  # order each layer by the mean place of what it hangs from (barycentres)
        if k:
            layer.sort(key=lambda node: np.mean([position[up][0] for up in above.get(node, [])] or [0.0]))
        position.update({node: (j - (len(layer) - 1) / 2, -k) for j, node in enumerate(layer)})
    for (u, v), route in routes.items():
        points = np.array([position[node] for node in route])
        style = "--" if drawn.edges[u, v]["kind"] == "background" else "-"
        if len(points) > 2:  # a long edge: through its waypoints, the empty places of the layers it crosses
            ax.plot(points[:-1, 0], points[:-1, 1], linestyle=style, color=plots.PALETTE["black"], linewidth=1,
                    alpha=0.7, zorder=1)
        ax.annotate("", xy=points[-1], xytext=points[-2],
                    arrowprops=dict(arrowstyle="-|>", color=plots.PALETTE["black"], linewidth=1,
                                    shrinkA=0 if len(points) > 2 else 14, shrinkB=14, linestyle=style, alpha=0.7))
    colours = [plots.PALETTE[name] for name in ("sky", "orange", "green", "purple")]
    for (part, nodes), colour in zip(parts.items(), colours):
        for node in nodes:
            if node in position:
                ax.add_patch(Circle(position[node], 0.3, facecolor=colour, edgecolor=plots.PALETTE["black"],
                                    zorder=3))
                ax.text(*position[node], node, ha="center", va="center", fontsize=9 if len(node) > 2 else 10,
                        zorder=4)
        ax.scatter([], [], s=120, color=colour, edgecolor=plots.PALETTE["black"], label=part)
    width = max(len(layer) for layer in layers)
    ax.set(xlim=(-width / 2, width / 2), ylim=(-len(layers) + 0.6, 0.4), aspect="equal")
    ax.axis("off")
    ax.legend(loc="upper left", bbox_to_anchor=(0.0, 0.0), handletextpad=0.3)
    return drawn
