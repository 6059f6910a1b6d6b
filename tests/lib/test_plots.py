"""attnsvm.plots (figure helpers, drawn on Agg figures) and attnsvm.widgets.explorer (sliders and live redraw)."""

import ipywidgets
import matplotlib
import numpy as np
import pytest
from ipywidgets.widgets import widget_output
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PolyCollection
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure

from attnsvm import plots, widgets


def _axes():
    figure = Figure()
    FigureCanvasAgg(figure)  # an Agg canvas, no pyplot state
    return figure.subplots()


def _draw(ax):
    ax.figure.canvas.draw()  # renders with Agg without error
    assert isinstance(ax.figure.canvas, FigureCanvasAgg)


# ------------------------------------------------------------------ table

def test_table_is_markdown_with_one_row_per_line_and_the_caption_under_it():
    shown = plots.table(["$d$", "error"], [[4, "1.0e-02"], [10, "5.0e-03"]], caption="Mean over runs.")
    assert shown.data == ("| $d$ | error |\n| --- | --- |\n| 4 | 1.0e-02 |\n| 10 | 5.0e-03 |\n\n"
                          "Mean over runs.")
    assert plots.table(["a"], []).data == "| a |\n| --- |"


def test_table_rejects_a_row_of_the_wrong_length():
    with pytest.raises(ValueError, match=r"rows\[1\] has 1 cells but the header has 2 columns"):
        plots.table(["a", "b"], [[1, 2], [3]])


# ------------------------------------------------------------------ line, ray, path

def test_line_passes_through_the_point_orthogonal_to_the_normal():
    ax = _axes()
    plots.line(ax, [1.0, 2.0], [3.0, 4.0], reach=5.0, linestyle="--", label="boundary")
    (drawn,) = ax.lines
    ends = np.column_stack(drawn.get_data())
    np.testing.assert_allclose(ends.mean(0), [1.0, 2.0], rtol=0, atol=1e-14)
    np.testing.assert_allclose((ends - [1.0, 2.0]) @ [3.0, 4.0], 0.0, rtol=0, atol=1e-13)
    np.testing.assert_allclose(np.linalg.norm(ends[1] - ends[0]), 10.0, rtol=1e-14)  # reach on either side
    assert drawn.get_linestyle() == "--" and drawn.get_label() == "boundary"
    _draw(ax)


def test_ray_goes_from_the_origin_along_the_direction():
    ax = _axes()
    plots.ray(ax, [3.0, -4.0], length=10.0, color=plots.PALETTE["vermillion"])
    (drawn,) = ax.lines
    np.testing.assert_allclose(np.column_stack(drawn.get_data()), [[0.0, 0.0], [6.0, -8.0]], rtol=0, atol=1e-14)
    assert to_rgba(drawn.get_color()) == to_rgba(plots.PALETTE["vermillion"])
    _draw(ax)


def test_path_draws_the_points_with_an_arrow_every_few_points():
    ax = _axes()
    points = np.arange(20.0).reshape(10, 2)
    plots.path(ax, points, arrow_every=3, label="GD")
    (drawn,) = ax.lines
    np.testing.assert_array_equal(np.column_stack(drawn.get_data()), points)
    arrows = [(tuple(a.xy), tuple(a.xyann)) for a in ax.texts]
    assert arrows == [(tuple(points[k]), tuple(points[k - 1])) for k in (3, 6, 9)]  # each ends at points[k]
    _draw(ax)


def test_path_without_arrows_draws_no_arrow():
    """The default arrow_every=0 draws no arrow. (An earlier version looped over range(0, len(points),
    len(points)), which yields k = 0 and drew one arrow from points[-1] to points[0] across the picture.)"""
    ax = _axes()
    plots.path(ax, np.arange(10.0).reshape(5, 2))
    assert len(ax.lines) == 1
    assert len(ax.texts) == 0


# ------------------------------------------------------------------ band

def _band(spread="std", log=False, runs=None):
    ax = _axes()
    runs = np.random.default_rng(0).random((5, 7)) + 0.5 if runs is None else runs
    x = np.arange(float(len(runs)))
    plots.band(ax, x, runs, spread=spread, log=log, label="mean")
    (drawn,) = ax.lines
    (shade,) = [c for c in ax.collections if isinstance(c, PolyCollection)]
    vertices = shade.get_paths()[0].vertices
    _draw(ax)
    return x, runs, drawn, shade, vertices


@pytest.mark.parametrize("spread", ["std", "sem", "percentile"])
def test_band_draws_the_mean_and_the_spread(spread):
    x, runs, drawn, shade, vertices = _band(spread)
    np.testing.assert_array_equal(drawn.get_xdata(), x)
    np.testing.assert_allclose(drawn.get_ydata(), runs.mean(1), rtol=1e-14)
    if spread == "percentile":
        low, high = np.percentile(runs, [10, 90], axis=1)
    else:
        width = runs.std(1) / (np.sqrt(7) if spread == "sem" else 1)
        low, high = runs.mean(1) - width, runs.mean(1) + width
    np.testing.assert_allclose([vertices[:, 1].min(), vertices[:, 1].max()], [low.min(), high.max()], rtol=1e-13)
    assert vertices[:, 0].min() == x[0] and vertices[:, 0].max() == x[-1]
    np.testing.assert_allclose(shade.get_facecolor()[0][:3], to_rgba(drawn.get_color())[:3])  # the line's colour
    assert drawn.get_label() == "mean"


def test_band_sem_is_narrower_than_std():
    *_, std = _band("std")
    *_, sem = _band("sem")
    assert np.ptp(sem[:, 1]) < np.ptp(std[:, 1])


def test_band_log_uses_the_geometric_mean():
    runs = np.array([[1.0, 100.0], [10.0, 1000.0], [1e-3, 1e-1]])
    x, _, drawn, _, vertices = _band("std", log=True, runs=runs)
    np.testing.assert_allclose(drawn.get_ydata(), [10.0, 100.0, 1e-2], rtol=1e-12)
    # +-1 standard deviation of log10 values (1 decade here): a factor 10 either side
    np.testing.assert_allclose([vertices[:, 1].min(), vertices[:, 1].max()], [1e-3, 1e3], rtol=1e-12)


@pytest.mark.parametrize("spread", ["iqr", "minmax", None])
def test_band_rejects_an_unknown_spread(spread):
    with pytest.raises(ValueError, match=r"spread=.* is not supported: choose 'std', 'sem' or 'percentile'"):
        plots.band(_axes(), np.arange(3.0), np.ones((3, 2)), spread=spread)


# ------------------------------------------------------------------ explorer

class _FakeKernel:
    """Just enough of an IPython kernel for ipywidgets.Output to claim the output of the current request."""

    parent = {"header": {"msg_id": "request-1"}}

    def get_parent(self):
        return self.parent


class _FakeShell:
    kernel = _FakeKernel()

    def get_parent(self):
        return _FakeKernel.parent

    def set_parent(self, parent):
        pass


@pytest.fixture
def explorer_box(monkeypatch):
    """Run widgets.explorer with display() captured and an Agg pyplot whose show() records the current figure and
    whether the explorer's Output widget was capturing at that moment (its msg_id is the request's)."""
    import matplotlib.pyplot as plt

    backend = matplotlib.get_backend()
    plt.switch_backend("Agg")
    displayed, shown, calls = [], [], []
    monkeypatch.setattr(widgets, "display", displayed.append)
    monkeypatch.setattr(widget_output, "get_ipython", lambda: _FakeShell())

    def show(*args, **kwargs):
        live = displayed[0].children[1]
        shown.append((plt.gcf(), live.msg_id))

    monkeypatch.setattr(plt, "show", show)

    def draw(angle, kind):
        calls.append((angle, kind))
        fig, ax = plt.subplots()
        ax.plot([0, np.cos(angle)], [0, np.sin(angle)], label=kind)

    def build(**controls):
        widgets.explorer(draw, **controls)
        assert len(displayed) == 1
        return displayed[0], calls, shown

    yield build
    plt.close("all")
    plt.switch_backend(backend)


def test_explorer_builds_its_controls(explorer_box):
    box, calls, shown = explorer_box(angle=(0.0, 3.0, 0.25, 1.0), kind=["alpha", "opt"])
    assert isinstance(box, ipywidgets.VBox)
    controls, live = box.children
    assert isinstance(live, ipywidgets.Output)
    slider, dropdown = controls.children
    assert isinstance(slider, ipywidgets.FloatSlider) and isinstance(dropdown, ipywidgets.Dropdown)
    assert (slider.min, slider.max, slider.step, slider.value) == (0.0, 3.0, 0.25, 1.0)
    assert slider.description == "angle" and slider.continuous_update is False
    assert dropdown.options == ("alpha", "opt") and dropdown.value == "alpha" and dropdown.description == "kind"
    assert calls == [] and shown == []  # nothing is drawn until a control moves


def test_explorer_redraws_into_its_output_when_a_control_moves(explorer_box):
    box, calls, shown = explorer_box(angle=(0.0, 3.0, 0.25, 1.0), kind=["alpha", "opt"])
    (slider, dropdown), live = box.children[0].children, box.children[1]
    slider.value = 2.5
    assert calls == [(2.5, "alpha")]
    assert len(shown) == 1
    figure, capturing = shown[0]
    assert capturing == "request-1"  # shown while the Output widget captured the request's output
    line = figure.axes[0].lines[0]
    np.testing.assert_allclose(line.get_xydata()[1], [np.cos(2.5), np.sin(2.5)])
    dropdown.value = "opt"
    assert calls == [(2.5, "alpha"), (2.5, "opt")] and len(shown) == 2
    assert shown[1][0].axes[0].lines[0].get_label() == "opt"
    assert live.msg_id == ""  # released after each redraw


@pytest.mark.parametrize("spec", ["abc", 3, 2.5, None, [], (), {"low": 0}, ("a", "b"), (0, 1, 0.1)])
def test_explorer_rejects_bad_specs(explorer_box, spec):
    with pytest.raises(ValueError, match=r"control angle=.*: pass a tuple \(low, high, step, default\) for a slider"):
        explorer_box(angle=spec)


@pytest.mark.parametrize("spec", [(1.0, 0.0, 0.1, 0.5), (0.0, 1.0, 0.0, 0.5), (0.0, 1.0, 0.1, 2.0)])
def test_explorer_rejects_inconsistent_sliders(explorer_box, spec):
    with pytest.raises(ValueError, match=r"need low < high, step > 0 and low <= default <= high"):
        explorer_box(angle=spec)


def test_explorer_list_of_four_numbers_is_a_dropdown(explorer_box):
    """A list is a dropdown even when it holds four numbers (only a tuple makes a slider)."""
    box, _, _ = explorer_box(T=[2, 4, 8, 16])
    (control,) = box.children[0].children
    assert isinstance(control, ipywidgets.Dropdown) and control.options == (2, 4, 8, 16)
