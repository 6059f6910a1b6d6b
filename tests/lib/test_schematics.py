"""attnsvm.book.schematics: the planar reduction, the ball minimizers against the library's path, the drawn
quantities (attention bars, margins, angles), the prerequisite graph read from chapter sources, the size rule for a
phone column, and bad input."""

import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import networkx as nx  # noqa: E402
import numpy as np  # noqa: E402
import PIL.Image  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from attnsvm import data, model, svm, theory, train  # noqa: E402
from attnsvm.book import plots, schematics  # noqa: E402

BOOK_SRC = Path(__file__).resolve().parents[2] / "book_src"
PHONE_COLUMN_PX = 370


@pytest.fixture(scope="module")
def tiny():
    problem = schematics.shared_query_problem(data.planar_problem(seed=4, n=2, T=4))
    alpha = theory.optimal_tokens(problem)
    return problem, alpha, svm.att_svm(problem.X, problem.Z, alpha)


def _page(stem, label, prerequisites):
    return stem, f"(chapter-{label})=\n# Title\n\nPrerequisites: {prerequisites}\n:::\n"


# ------------------------------------------------------------------ the planar problem and its path

def test_shared_query_problem_keeps_the_tokens_and_makes_the_loss_depend_on_W_z_only(tiny):
    problem, _, _ = tiny
    original = data.planar_problem(seed=4, n=2, T=4)
    torch.testing.assert_close(problem.X, original.X, rtol=0, atol=0)
    W = torch.tensor([[0.7, -3.0], [-0.2, 5.0]], dtype=torch.float64)
    first_column_only = W.clone()
    first_column_only[:, 1] = 0
    torch.testing.assert_close(model.loss(problem, W), model.loss(problem, first_column_only), rtol=0, atol=0)


def test_the_att_svm_of_the_planar_problem_lives_in_the_first_column(tiny):
    _, _, W_mm = tiny
    np.testing.assert_allclose(W_mm[:, 1], 0.0, atol=1e-8)


def test_ball_minimizers_are_on_the_spheres_and_no_worse_than_the_library_path(tiny):
    problem, _, _ = tiny
    radii = [0.5, 2.0, 8.0]
    w = schematics.ball_minimizers(problem, radii)
    np.testing.assert_allclose(np.linalg.norm(w, axis=1), radii, rtol=0, atol=1e-12)
    W = torch.zeros(len(radii), 2, 2, dtype=torch.float64)
    W[:, :, 0] = torch.from_numpy(w)
    grid_loss = torch.stack([model.loss(problem, W[k]) for k in range(len(radii))])
    path = train.regularization_path(problem, radii, steps=300)
    # the refined grid minimizer is no worse than the library's path (to rounding) and on the same branch: their
    # angles differ by less than a tenth of the grid step of 0.125 degrees (the path's own accuracy)
    assert (grid_loss <= path.loss * (1 + 1e-12)).all(), (grid_loss, path.loss)
    angle = np.degrees(np.arccos(np.clip(theory.correlation(W, path.W), -1, 1)))
    assert (angle < 0.0125).all(), angle


def test_ball_minimizers_turn_toward_the_att_svm(tiny):
    problem, _, W_mm = tiny
    radii = [0.5, 2.0, 8.0, 16.0]
    w = schematics.ball_minimizers(problem, radii)
    fig, (top, bottom) = plt.subplots(2, 1)
    angles = schematics.path_turn(top, bottom, radii, w, W_mm)
    plt.close(fig)
    cosines = w @ W_mm[:, 0] / (np.linalg.norm(w, axis=1) * np.linalg.norm(W_mm[:, 0]))
    np.testing.assert_allclose(np.cos(np.radians(angles)), cosines, rtol=0, atol=1e-12)
    assert (np.diff(angles) < -360 / 2880).all() and angles[-1] < 5, angles


# ------------------------------------------------------------------ what the pictures draw

def test_attention_model_draws_the_softmax_of_the_scores():
    fig, ax = plt.subplots()
    scores = np.array([1.0, -2.0, 0.5])
    schematics.attention_model(ax, scores)
    widths = np.array([bar.get_width() for bar in ax.containers[0]]) / schematics.BAR
    np.testing.assert_allclose(widths, torch.softmax(torch.tensor(scores), 0).numpy(), rtol=1e-14)
    texts = {text.get_text() for text in ax.texts}
    assert {"$x_1$", "$x_3$", "+1.0", "-2.0", "query $z$"} <= texts
    plt.close(fig)


def test_separation_returns_the_score_gaps_and_rings_the_support_points(tiny):
    problem, alpha, W_mm = tiny
    fig, ax = plt.subplots()
    margins = schematics.separation(ax, problem, alpha, W_mm)
    z = problem.Z[0].numpy()
    expected = [(problem.X[i, alpha[i]] - problem.X[i, t]).numpy() @ W_mm @ z
                for i in range(problem.n) for t in range(problem.T) if t != alpha[i]]
    np.testing.assert_allclose(margins, expected, rtol=1e-12)
    assert margins.min() == pytest.approx(1.0, abs=1e-6)
    ringed = ax.collections[1].get_offsets()
    assert len(ringed) == int((np.abs(margins - 1) <= 1e-6).sum()) >= 1
    plt.close(fig)


@pytest.mark.parametrize("draw", ["idea", "path", "graph"])
def test_the_figures_fit_a_phone_column_with_readable_text(tiny, draw):
    problem, alpha, W_mm = tiny
    plots.use_style()
    if draw == "idea":
        fig, (top, bottom) = plt.subplots(2, 1, figsize=(schematics.WIDTH, 5.4), height_ratios=[0.8, 1.2])
        schematics.attention_model(top, [1.0, -1.0, -2.0, -1.5])
        schematics.separation(bottom, problem, alpha, W_mm)
    elif draw == "path":
        fig, (top, bottom) = plt.subplots(2, 1, figsize=(schematics.WIDTH, 5.0))
        radii = [0.5, 4.0, 16.0]
        schematics.path_turn(top, bottom, radii, schematics.ball_minimizers(problem, radii, angles=360), W_mm)
    else:
        fig, ax = plt.subplots(figsize=(schematics.WIDTH, 4.6))
        sources = {path.stem: path.read_text() for path in BOOK_SRC.glob("*.md")}
        graph = schematics.prerequisites(sources)
        schematics.chapter_graph(ax, graph, {"Part": sorted(graph)})
    png, metadata = plots.png(fig)
    plt.close(fig)
    assert metadata["width"] <= PHONE_COLUMN_PX, metadata
    points = float(PIL.Image.open(io.BytesIO(png)).text[plots.TEXT_KEY])
    assert plots.displayed_text_px(points, metadata["width"] * 2, 200, PHONE_COLUMN_PX) >= plots.MIN_TEXT_PX


# ------------------------------------------------------------------ the prerequisite graph

def test_prerequisites_reads_refs_from_the_prerequisites_paragraph_only():
    pages = dict([
        _page("prelude", "prelude", "linear algebra."),
        _page("01_a", "a", "convex optimization; not {ref}`the notation <notation>`."),
        _page("02_b", "b", "{ref}`chapter-a`."),
        _page("03_c", "c", "{ref}`chapter-a`. The chapter {ref}`chapter-b` is the background of Project 1."),
        _page("03b_d", "d", "the {ref}`prelude <chapter-prelude>` and {ref}`chapter-c`."),
        ("00_introduction", "(intro)=\nSee {ref}`chapter-a`.\n"),
        ("course", "(course)=\nRead {ref}`chapter-b`.\n"),
    ])
    pages["03_c"] = pages["03_c"].replace("# Title", "# Title\n\n## One\n\n```\n## not a section\n```\n\n## Two")
    pages["02_b"] += "\nLater text: {ref}`chapter-c`.\n"
    graph = schematics.prerequisites(pages)
    assert sorted(graph) == sorted(["P", "1", "2", "3", "3.3"])  # 3.3: after Chapter 3's two sections
    assert sorted(graph.edges(data="kind")) == [("1", "2", "needs"), ("1", "3", "needs"),
                                                ("2", "3", "background"), ("3", "3.3", "needs"),
                                                ("P", "3.3", "needs")]


def test_prerequisites_rejects_a_chapter_without_prerequisites_or_with_an_unknown_label():
    with pytest.raises(ValueError, match="01_a: no 'Prerequisites:' paragraph"):
        schematics.prerequisites({"01_a": "(chapter-a)=\n# A\n"})
    with pytest.raises(ValueError, match="refer to 'chapter-z', which no page defines"):
        schematics.prerequisites(dict([_page("01_a", "a", "{ref}`chapter-z`.")]))
    pages = dict([_page("01_a", "a", "linear algebra."), _page("02_b", "b", "{ref}`chapter-c`.")])
    pages["02r_c"] = "(chapter-c)=\n# C, a page that is not a chapter\n"
    with pytest.raises(ValueError, match="refer to 'chapter-c', which is on a page that is not a chapter"):
        schematics.prerequisites(pages)


def test_the_books_graph_has_every_chapter_and_chapter_1_before_all_but_the_prelude():
    sources = {path.stem: path.read_text() for path in BOOK_SRC.glob("*.md")}
    graph = schematics.prerequisites(sources)
    chapters = {str(k) for k in range(1, 13)}
    assert chapters | {"P"} <= set(graph) and nx.is_directed_acyclic_graph(graph)
    assert nx.descendants(graph, "1") >= chapters - {"1"}
    assert graph.has_edge("P", next(node for node in graph if node.startswith("3.")))


def test_the_stored_graph_is_the_one_the_sources_give():
    """The introduction draws schematics.book_prerequisites(); it must be what book_src/ says today."""
    sources = {path.stem: path.read_text() for path in BOOK_SRC.glob("*.md")}
    graph, stored = schematics.prerequisites(sources), schematics.book_prerequisites()
    assert set(stored) == set(graph) and sorted(stored.edges(data="kind")) == sorted(graph.edges(data="kind")), (
        "lib/attnsvm/book/prerequisites.json is stale: run `make sync` (tools/prerequisites.py)")


def test_chapter_graph_draws_the_reduction_and_only_the_background_edges_no_path_implies():
    graph = nx.DiGraph()
    graph.add_edges_from([("1", "2"), ("2", "3"), ("1", "3")], kind="needs")
    graph.add_edges_from([("1", "4"), ("2", "4")], kind="background")
    graph.add_edge("3", "4", kind="needs")
    fig, ax = plt.subplots()
    drawn = schematics.chapter_graph(ax, graph, {"Part": ["1", "2", "3", "4"]})
    assert sorted(drawn.edges(data="kind")) == [("1", "2", "needs"), ("2", "3", "needs"), ("3", "4", "needs")]
    graph.remove_edge("3", "4")
    drawn = schematics.chapter_graph(ax, graph, {"Part": ["1", "2", "3", "4"]})
    assert sorted(drawn.edges(data="kind")) == [("1", "2", "needs"), ("1", "4", "background"),
                                                ("2", "3", "needs"), ("2", "4", "background")]
    assert len([patch for patch in ax.patches if hasattr(patch, "radius")]) == 8  # 4 nodes, drawn twice
    plt.close(fig)


# ------------------------------------------------------------------ bad input

def test_bad_input_raises_clear_errors(tiny):
    problem, alpha, W_mm = tiny
    fig, ax = plt.subplots()
    with pytest.raises(ValueError, match="tokens in R\\^2"):
        schematics.shared_query_problem(data.random_problem(2, 3, 4, seed=0))
    with pytest.raises(ValueError, match="shared query z = \\(1, 0\\)"):
        schematics.ball_minimizers(data.planar_problem(seed=4, n=2, T=4), [1.0])
    with pytest.raises(ValueError, match="radii must be a non-empty list of positive"):
        schematics.ball_minimizers(problem, [1.0, -1.0])
    with pytest.raises(ValueError, match="angles must be at least 4"):
        schematics.ball_minimizers(problem, [1.0], angles=2)
    with pytest.raises(ValueError, match="scores must be T finite numbers"):
        schematics.attention_model(ax, [1.0])
    with pytest.raises(ValueError, match="W_mm must be the 2 x 2 Att-SVM"):
        schematics.separation(ax, problem, alpha, np.eye(2))
    with pytest.raises(ValueError, match="w \\(len\\(radii\\), 2\\)"):
        schematics.path_turn(ax, ax, [1.0, 2.0], [[1.0, 0.0]], W_mm)
    with pytest.raises(ValueError, match="graph must be acyclic"):
        schematics.chapter_graph(ax, nx.DiGraph([("1", "2"), ("2", "1")]), {"Part": ["1", "2"]})
    with pytest.raises(ValueError, match="missing: \\['2'\\]"):
        schematics.chapter_graph(ax, nx.DiGraph([("1", "2")]), {"Part": ["1"]})
    plt.close(fig)
