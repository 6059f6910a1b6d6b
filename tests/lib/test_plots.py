"""attnsvm.book.plots (figure helpers, drawn on Agg figures) and the size rule (plots.png), and
attnsvm.book.widgets.explorer (precomputed frames)."""

import base64
import io
import json
import re

import matplotlib
import numpy as np
import PIL.Image
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PolyCollection
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator
from matplotlib.transforms import Bbox

from attnsvm.book import plots, widgets


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


# ------------------------------------------------------------------ the size rule

def _figure(width, fontsize=None):
    import matplotlib.pyplot as plt
    plots.use_style()
    figure, ax = plt.subplots(figsize=(width, 3))
    ax.plot([0, 1], [0, 1], label="line")
    ax.set_xlabel(r"$p_1$", fontsize=fontsize)
    ax.legend()
    return figure


def test_png_carries_its_display_width_and_smallest_text():
    data, metadata = plots.png(_figure(plots.WIDTH))
    image = PIL.Image.open(io.BytesIO(data))
    # the smallest drawn text: the subscript of the 10-pt label $p_1$, drawn at 0.7 x 10 pt (9-pt ticks, legend)
    assert image.text[plots.TEXT_KEY] == "7" and image.text[plots.DPI_KEY] == str(plots.DPI)
    assert metadata["width"] == round(image.width * plots.CSS_PX_PER_INCH / plots.DPI) <= plots.COLUMN_PX
    assert plots.displayed_text_px(9, image.width, plots.DPI) == pytest.approx(9 * 100 / 72)


@pytest.mark.parametrize("width, fontsize", [(14, None), (plots.WIDTH, 6)])
def test_png_refuses_text_displayed_below_nine_pixels(width, fontsize):
    with pytest.raises(ValueError, match=r"would be displayed at \d+\.\d CSS px .* below the 9 px"):
        plots.png(_figure(width, fontsize))


def test_displayed_text_shrinks_with_a_figure_wider_than_the_column():
    dpi = plots.DPI
    assert plots.displayed_text_px(9, 2 * plots.COLUMN_PX * dpi // 100, dpi) == pytest.approx(9 * 100 / 72 / 2)


# ------------------------------------------------------------------ explorer

@pytest.fixture
def agg():
    import matplotlib.pyplot as plt
    backend = matplotlib.get_backend()
    plt.switch_backend("Agg")
    plt.close("all")
    plots.use_style()
    yield plt
    plt.close("all")
    plt.switch_backend(backend)


def _draw_angle(calls):
    import matplotlib.pyplot as plt

    def draw(angle=1.0, kind="a"):
        calls.append((angle, kind))
        figure, ax = plt.subplots(figsize=(4, 3))
        ax.plot([0, np.cos(angle)], [0, np.sin(angle)], linestyle="-" if kind == "a" else "--")
    return draw


def test_explorer_frames_are_every_combination_last_control_fastest(agg):
    calls = []
    images, grids, _ = widgets.frames(_draw_angle(calls), angle=[1.0, 0.5, 2.0], kind=["a", "b"])
    assert calls == [(1.0, "a"), (1.0, "b"), (0.5, "a"), (0.5, "b"), (2.0, "a"), (2.0, "b")]
    assert len(images) == 6 and len(set(images)) == 6 and grids == [[1.0, 0.5, 2.0], ["a", "b"]]
    assert not agg.get_fignums()  # every frame's figure is closed


def test_explorer_page_holds_sliders_frames_and_the_default_frame(agg, monkeypatch):
    shown = []
    monkeypatch.setattr(widgets, "display", lambda bundle, raw: shown.append(bundle))
    widgets.explorer(_draw_angle([]), angle=[1.0, 0.5, 2.0], kind=["a", "b"])
    html = shown[0]["text/html"]
    assert "6 precomputed frames" in shown[0]["text/plain"]
    spec = json.loads(re.search(r'<script type="application/json">(.*?)</script>', html).group(1))
    assert spec["labels"] == [["0.5", "1", "2"], ["a", "b"]]  # numbers ascending on the slider
    assert spec["order"] == [[1, 0, 2], [0, 1]] and spec["strides"] == [2, 1]
    sliders = re.findall(r'<input type="range" min="0" max="(\d)" step="1" value="(\d)"', html)
    assert sliders == [("2", "1"), ("1", "0")]  # each slider starts at its default
    assert f'src="data:image/png;base64,{spec["frames"][0]}"' in html
    assert 'alt="The figure above redrawn at angle = 1, kind = a."' in html


def test_explorer_rejects_a_control_that_changes_no_pixel(agg):
    def draw(angle=1.0, kind="a"):
        figure, ax = agg.subplots(figsize=(4, 3))
        ax.plot([0, angle], [0, 1])
    with pytest.raises(ValueError, match=r"control kind changes no pixel between a and b"):
        widgets.frames(draw, angle=[1.0, 2.0], kind=["a", "b"])


@pytest.mark.parametrize("spec", ["abc", 3, None, [], [1.0], (0.0, 1.0, 0.1, 0.5)[:1], {"low": 0}])
def test_explorer_rejects_bad_controls(agg, spec):
    with pytest.raises(ValueError, match=r"control angle=.*: pass a list of at least two values"):
        widgets.frames(_draw_angle([]), angle=spec)


def test_explorer_rejects_repeated_values_and_too_many_frames(agg):
    with pytest.raises(ValueError, match=r"repeats a value"):
        widgets.frames(_draw_angle([]), angle=[1.0, 1.0])
    with pytest.raises(ValueError, match=r"make 80 frames, more than 64"):
        widgets.frames(_draw_angle([]), angle=list(np.linspace(0, 1, 40)), kind=["a", "b"])
    with pytest.raises(ValueError, match=r"at least one control"):
        widgets.frames(_draw_angle([]))


# ------------------------------------------------------------------ phone layouts

def _text_px(data, column_px):
    image = PIL.Image.open(io.BytesIO(data))
    return plots.displayed_text_px(float(image.text[plots.TEXT_KEY]), image.width, float(image.text[plots.DPI_KEY]),
                                   column_px)


def _grid(agg):
    figure, axes = agg.subplots(2, 2, figsize=(plots.WIDTH, 4.4), sharex=True, sharey=True)
    for k, ax in enumerate(axes.flat):
        ax.plot([0, 1], [0, k + 1])
        ax.text(0.5, 0.5, f"panel {k}", transform=ax.transAxes)
    axes[1, 0].set_xlabel("step $k$")
    axes[0, 0].set_ylabel("error")
    return figure


def test_phone_layout_stacks_the_panels_in_reading_order_and_leaves_the_figure_alone(agg):
    figure = _grid(agg)
    places = [ax.get_position().bounds for ax in figure.axes]
    phone = plots.phone_layout(figure)
    assert phone is not figure and list(figure.get_size_inches()) == [plots.WIDTH, 4.4]
    assert [ax.get_position().bounds for ax in figure.axes] == places
    assert list(phone.get_size_inches()) == [plots.PHONE_WIDTH, 4.4 * 2]  # four rows as tall as the two were
    phone.canvas.draw()
    tops = [ax.get_position().y1 for ax in phone.axes]
    assert [ax.texts[0].get_text() for ax in phone.axes] == ["panel 0", "panel 1", "panel 2", "panel 3"]
    assert tops == sorted(tops, reverse=True) and len({round(ax.get_position().x0, 6) for ax in phone.axes}) == 1
    # what sharing had left to a neighbour, every panel now shows: tick labels and axis labels
    assert all(ax.yaxis.get_tick_params(which="major")["labelleft"] for ax in phone.axes)
    assert all(ax.xaxis.get_tick_params(which="major").get("labelbottom", True) for ax in phone.axes)
    assert [ax.get_ylabel() for ax in phone.axes] == ["error"] * 4
    assert [ax.get_xlabel() for ax in phone.axes] == ["step $k$"] * 4
    assert not agg.get_fignums() or figure.number in agg.get_fignums() and len(agg.get_fignums()) == 1


def test_phone_layout_keeps_a_twin_with_its_axes_and_puts_figure_legends_below(agg):
    figure, (left, right) = agg.subplots(1, 2, figsize=(plots.WIDTH, 3))
    twin = right.twinx()
    for ax, name in ((left, "first curve"), (right, "second curve"), (twin, "third curve")):
        ax.plot([0, 1], [1, 0], label=name)
    figure.legend(loc="lower center", ncols=3)
    phone = plots.phone_layout(figure)
    p_left, p_right, p_twin = phone.axes
    assert p_twin.get_subplotspec().rowspan == p_right.get_subplotspec().rowspan == range(1, 2)
    assert not p_twin.xaxis.get_visible() and p_twin.yaxis.get_ticks_position() == "right"  # still a twin
    data, _ = plots.png(phone, column_px=plots.PHONE_COLUMN_PX)
    renderer = phone.canvas.get_renderer()
    (legend,) = phone.legends
    box = legend.get_window_extent(renderer)
    assert box.y1 <= min(ax.get_tightbbox(renderer).y0 for ax in phone.axes) + 1  # under every panel
    assert 0 <= box.x0 and box.x1 <= phone.bbox.width and legend._ncols < 3  # in fewer columns, inside the figure
    assert [text.get_text() for text in legend.get_texts()] == ["first curve", "second curve", "third curve"]
    assert _text_px(data, plots.PHONE_COLUMN_PX) >= plots.MIN_TEXT_PX


def _by_hand(figure, ax):
    figure.add_axes([0.6, 0.6, 0.3, 0.3])


def _figure_text(figure, ax):
    figure.text(0.1, 0.1, "note")


def _figure_artist(figure, ax):
    from matplotlib.lines import Line2D
    figure.add_artist(Line2D([0.1, 0.9], [0.5, 0.5], label="divider"))


def _figure_fraction_annotation(figure, ax):
    ax.annotate("peak", xy=(0.5, 0.5), xycoords="figure fraction")


def _figure_transform_text(figure, ax):
    ax.text(0.02, 0.95, "corner", transform=figure.transFigure)


def _subfigures(figure, ax):
    figure.subfigures(1, 2)[1].subplots()


def _image(ax):
    return ax.imshow(np.arange(12.0).reshape(3, 4))


def _colorbar_in_its_own_cell(figure, ax):
    grid = figure.add_gridspec(1, 2, width_ratios=[1, 0.05])
    ax.set_subplotspec(grid[0])
    figure.colorbar(_image(ax), cax=figure.add_subplot(grid[1]))


def _colorbar_without_constrained_layout(figure, ax):
    figure.colorbar(_image(ax), ax=ax)  # no layout engine: a cell of a nested grid


def _colorbar_by_hand(figure, ax):
    figure.colorbar(_image(ax), cax=figure.add_axes([0.9, 0.1, 0.03, 0.8]))


@pytest.mark.parametrize("build, message", [
    (_by_hand, r"axes placed by hand \(fig.add_axes\): put every panel on a grid"),
    (_figure_text, r"the text 'note' placed on the figure \(fig.text\): put it in an axes"),
    (_figure_artist, r"a Line2D 'divider' added to the figure \(fig.add_artist.*\): add it to an axes"),
    (_figure_fraction_annotation, r"the annotation 'peak' in figure coordinates, .*xycoords='axes fraction'"),
    (_figure_transform_text, r"the text 'corner' in figure coordinates, .*transform=ax.transAxes"),
    (_subfigures, r"subfigures \(fig.subfigures\), .*draw every panel on one grid"),
    (_colorbar_in_its_own_cell, r"a colorbar in a cell of its own .* fig.colorbar\(mappable, ax=ax\)"),
    (_colorbar_without_constrained_layout, r"a colorbar in a cell of its own .*layout='constrained'"),
    (_colorbar_by_hand, r"a colorbar in axes placed by hand \(fig.add_axes\): attach it to its axes"),
])
def test_phone_layout_refuses_what_it_would_misplace_naming_it_and_the_fix(agg, build, message):
    """Each of these was laid out wrongly without a word: texts and artists in figure coordinates stayed where the
    wide figure had them, a colorbar's cell was stacked as a panel, subfigures overlapped."""
    figure, ax = agg.subplots(figsize=(plots.WIDTH, 3))
    build(figure, ax)
    with pytest.raises(ValueError, match="this figure's phone layout would misplace " + message):
        plots.phone_layout(figure)


def test_phone_layout_allows_figure_labels(agg):
    figure, ax = agg.subplots(figsize=(plots.WIDTH, 3))
    figure.supylabel("error")  # a figure label is laid out with the panels
    figure.suptitle("runs")
    phone = plots.phone_layout(figure)
    assert phone.get_supylabel() == "error" and phone.get_suptitle() == "runs"


def test_phone_layout_keeps_a_colorbar_beside_its_axes(agg):
    figure, axes = agg.subplots(1, 2, figsize=(plots.WIDTH, 3), layout="constrained")
    for ax in axes:
        image = _image(ax)
    figure.colorbar(image, ax=axes[1], label="value")
    phone = plots.phone_layout(figure)
    top, bottom, bar = phone.axes
    data, _ = plots.png(phone, column_px=plots.PHONE_COLUMN_PX)
    assert _text_px(data, plots.PHONE_COLUMN_PX) >= plots.MIN_TEXT_PX
    renderer = phone.canvas.get_renderer()
    assert bar.get_subplotspec() is None and bar.get_ylabel() == "value"
    assert bottom.bbox.y1 < top.bbox.y0  # stacked
    assert bar.bbox.x0 >= bottom.bbox.x1 and bar.bbox.y0 < bottom.bbox.y1 and bar.bbox.y1 > bottom.bbox.y0  # beside
    assert bar.get_tightbbox(renderer).x1 <= phone.bbox.x1 + 0.5  # inside the figure, its label too


def test_phone_layout_puts_a_legend_in_figure_coordinates_under_the_panels(agg):
    figure, axes = agg.subplots(1, 2, figsize=(plots.WIDTH, 3))
    for ax, name in zip(axes, ("first", "second")):
        ax.plot([0, 1], [0, 1], label=name)
    axes[1].legend(*axes[0].get_legend_handles_labels(), loc="lower right", bbox_to_anchor=(0.5, 0.5),
                   bbox_transform=figure.transFigure)  # the middle of the wide figure: on the second panel
    phone = plots.phone_layout(figure)
    plots.png(phone, column_px=plots.PHONE_COLUMN_PX)
    renderer = phone.canvas.get_renderer()
    assert all(ax.get_legend() is None for ax in phone.axes)
    (legend,) = phone.legends
    assert [text.get_text() for text in legend.get_texts()] == ["first"]
    assert legend.get_window_extent(renderer).y1 <= min(ax.get_tightbbox(renderer).y0 for ax in phone.axes) + 1


def test_phone_layout_places_an_axis_label_placed_by_hand_beside_its_tick_labels(agg):
    """Chapter 3's explorer places its second panel's label by hand (set_label_coords(-0.07, 0.5), a place that
    suits the wide figure's 5.9-inch panels); in a 3-inch panel that place put the label p2 on the tick labels."""
    figure, axes = agg.subplots(2, 1, figsize=(plots.WIDTH, 7.6))
    for ax, top in zip(axes, (3, 120)):
        ax.plot([-3, top], [-3, 0.58 * top])
        ax.set(xlabel=r"$p_1$", ylabel=r"$p_2$")
    axes[1].yaxis.set_label_coords(-0.07, 0.5)
    phone = plots.phone_layout(figure)
    phone.canvas.draw()
    renderer = phone.canvas.get_renderer()
    for ax in phone.axes:
        label = ax.yaxis.label.get_window_extent(renderer)
        ticks = [text.get_window_extent(renderer) for text in ax.get_yticklabels() if text.get_text()]
        ticks = [box for box in ticks if ax.bbox.y0 - 1 <= (box.y0 + box.y1) / 2 <= ax.bbox.y1 + 1]  # drawn
        assert label.x1 <= min(box.x0 for box in ticks), (label, ticks)  # left of every tick label
    first, second = (ax.yaxis.label.get_window_extent(renderer) for ax in phone.axes)
    assert first.x0 == pytest.approx(second.x0, abs=0.5)  # aligned, as the wide figure meant them
    assert not figure.axes[1].yaxis._autolabelpos  # the wide figure keeps its place


def test_output_stores_a_phone_layout_where_the_figure_would_shrink_below_nine_pixels(agg):
    narrow, _ = agg.subplots(figsize=(3.0, 2.5))
    data, metadata = plots.output(narrow)
    assert plots.PHONE_KEY not in metadata and plots.fits_phone(data)
    assert _text_px(data, plots.PHONE_COLUMN_PX) == pytest.approx(9 * 100 / 72, rel=0.02)
    data, metadata = plots.output(_grid(agg))
    assert not plots.fits_phone(data) and _text_px(data, plots.PHONE_COLUMN_PX) < plots.MIN_TEXT_PX
    phone = base64.b64decode(metadata[plots.PHONE_KEY])
    width = PIL.Image.open(io.BytesIO(phone)).width * plots.CSS_PX_PER_INCH / plots.DPI
    assert plots.PHONE_WIDTH * 100 - 20 <= width <= plots.PHONE_WIDTH * 100 + 15  # shown at most 6% smaller
    assert _text_px(phone, plots.PHONE_COLUMN_PX) >= plots.MIN_TEXT_PX


def test_a_phone_layout_that_stays_too_wide_fails_loudly(agg):
    figure, ax = agg.subplots(figsize=(2.4, 3))
    ax.plot([0, 1], label="a curve whose name, even under the panel, is far wider than a phone's column")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    data, _ = plots.png(figure)  # fits the book's column, not a phone's
    assert not plots.fits_phone(data)
    with pytest.raises(ValueError, match=r"in a 330-px column, below the 9 px .* at most 3.4 in wide"):
        plots.phone_png(figure, data)


def test_phone_layout_puts_a_legend_beside_its_axes_under_the_panel(agg):
    figure, ax = agg.subplots(figsize=(plots.WIDTH, 3))
    for k in range(3):
        ax.plot([0, 1], [0, k], label=f"curve {k}")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))  # room beside the panel: a wide page has it
    phone = plots.phone_layout(figure)
    data, _ = plots.png(phone, column_px=plots.PHONE_COLUMN_PX)
    renderer = phone.canvas.get_renderer()
    box = phone.axes[0].get_legend().get_window_extent(renderer)
    assert box.y1 <= phone.axes[0].xaxis.get_tightbbox(renderer).y0 + 1 and box.x1 <= phone.bbox.x1
    assert phone.axes[0].bbox.width > 0.75 * phone.bbox.width  # the panel keeps the column's width
    assert _text_px(data, plots.PHONE_COLUMN_PX) >= plots.MIN_TEXT_PX


def test_explorer_frames_have_phone_layouts_alike_where_the_figure_needs_them(agg, monkeypatch):
    def draw(angle=1.0):
        figure, axes = agg.subplots(1, 2, figsize=(plots.WIDTH, 3))
        axes[0].plot([0, np.cos(angle)], [0, np.sin(angle)])
        axes[1].plot([0, 1], [0, angle * 1e4])  # tick labels of another width at every angle
        return figure
    images, _, phones = widgets.frames(draw, angle=[1.0, 2.0, 3.0])
    opened = [PIL.Image.open(io.BytesIO(base64.b64decode(phone))) for phone in phones]
    assert len(phones) == 3 and len(set(phones)) == 3 and len({image.size for image in opened}) == 1  # alike
    assert all(_text_px(base64.b64decode(phone), plots.PHONE_COLUMN_PX) >= plots.MIN_TEXT_PX for phone in phones)
    # sharp on phones' 2-3x screens: twice the display resolution, and small: a palette of at most 256 colours
    assert {image.text[plots.DPI_KEY] for image in opened} == {str(widgets.PHONE_FRAME_DPI)} == {"200"}
    assert all(image.mode == "P" and abs(image.width / 2 - plots.PHONE_WIDTH * 100) <= 15 for image in opened)
    wide = PIL.Image.open(io.BytesIO(base64.b64decode(images[0])))
    assert wide.mode == "P" and wide.text[plots.DPI_KEY] == str(widgets.FRAME_DPI) and plots.TEXT_KEY in wide.text
    assert widgets.frames(_draw_angle([]), angle=[1.0, 2.0])[2] is None  # 4 inches wide: scaled on a phone
    shown = []
    monkeypatch.setattr(widgets, "display", lambda bundle, raw: shown.append(bundle))
    widgets.explorer(draw, angle=[1.0, 2.0, 3.0])
    html = shown[0]["text/html"]
    spec = json.loads(re.search(r'<script type="application/json">(.*?)</script>', html).group(1))
    assert spec["phone"] == phones
    assert 'phone.srcset = "data:image/png;base64," + spec.phone[index] + " 2x";' in html  # each frame at 2x
    assert (f'<picture><source media="{plots.PHONE_MEDIA}" srcset="data:image/png;base64,{phones[0]} 2x">'
            f'<img src="data:image/png;base64,{images[0]}"') in html


def test_aligned_phone_layouts_leave_room_for_the_labels_of_every_frame(agg):
    """Each panel at one place in every frame, and no frame's text cut off at the figure's edge (with the first
    frame's places, the wider tick labels and the label of the last frame would be)."""
    frames = []
    for scale in (1.0, 1e5, 1e9):
        figure, axes = agg.subplots(1, 2, figsize=(plots.WIDTH * 2, 3))
        axes[0].plot([0, 1], [0, scale], label=f"scale {scale:g}")
        axes[1].plot([0, scale], [0, 1])
        axes[0].set_ylabel("a long label" if scale > 1e8 else "")
        axes[0].legend()
        frames.append(figure)
    phones = plots.aligned_phone_layouts(frames)
    places = {tuple(np.round(ax.get_position().bounds, 12)) for phone in phones for ax in phone.axes}
    assert len(places) == 2
    for phone in phones:
        renderer = phone.canvas.get_renderer()
        for ax in phone.axes:  # what is drawn of each panel: ticks, tick labels, axis labels, legend
            box = ax.get_tightbbox(renderer)
            assert -0.5 <= box.x0 and box.x1 <= phone.bbox.x1 + 0.5 and -0.5 <= box.y0, box
            assert box.y1 <= phone.bbox.y1 + 0.5, box
    with pytest.raises(ValueError, match="same size and axes"):
        plots.aligned_phone_layouts([agg.subplots(1, 2)[0], agg.subplots(1, 3)[0]])


def test_phone_layout_gives_a_legend_wider_than_its_axes_fewer_columns_at_the_same_place(agg):
    figure, ax = agg.subplots(figsize=(plots.WIDTH, 3.6))
    for k in range(3):
        ax.plot([1, 2], [0, k], marker="o", label=rf"$n={k}$, $T={k + 4}$, a long name")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3)
    phone = plots.phone_layout(figure)
    plots.png(phone, column_px=plots.PHONE_COLUMN_PX)
    legend, renderer = phone.axes[0].get_legend(), phone.canvas.get_renderer()
    box, axes = legend.get_window_extent(renderer), phone.axes[0].bbox
    assert legend._ncols < 3 and box.width <= axes.width
    pad = legend.borderaxespad * legend.prop.get_size_in_points() * phone.dpi / 72
    assert box.y1 == pytest.approx(axes.y0 - 0.2 * axes.height - pad, abs=1)  # 0.2 axes heights under the axes
    assert (box.x0 + box.x1) / 2 == pytest.approx((axes.x0 + axes.x1) / 2, abs=1)


def test_phone_layout_labels_every_second_fixed_tick_where_all_would_overlap(agg):
    figure, ax = agg.subplots(figsize=(plots.WIDTH, 3))
    dims = list(range(2, 21))
    ax.bar(dims, np.ones(len(dims)))
    ax.set(xticks=dims)
    phone = plots.phone_layout(figure)
    labels = [text.get_text() for text in phone.axes[0].get_xticklabels()]
    assert list(phone.axes[0].get_xticks()) == dims  # every tick stays
    assert labels[::2] == [str(d) for d in dims[::2]] and set(labels[1::2]) == {""}
    assert [text.get_text() for text in figure.axes[0].get_xticklabels()] == [str(d) for d in dims]  # not the figure


# ------------------------------------------------------------------ legends clear of the data on a phone

def _data_under(legend):
    """What of its panel's drawn data a legend covers, measured apart from the library: points along every line
    segment (one per display pixel) and its markers, scatter points, bars; each inside the axes (clipped)."""
    ax, renderer = legend.axes, legend.figure.canvas.get_renderer()
    box, inside = legend.get_window_extent(renderer), ax.bbox
    hits = []
    for line in ax.lines:
        xy = line.get_transform().transform(line.get_xydata())
        pieces = [xy] + [a + np.linspace(0, 1, int(np.hypot(*(b - a))) + 2)[:, None] * (b - a)
                         for a, b in zip(xy[:-1], xy[1:])]
        hits += [("line", line.get_label()) for x, y in np.concatenate(pieces)
                 if box.contains(x, y) and inside.contains(x, y)]
    for collection in ax.collections:
        offsets = collection.get_offset_transform().transform(collection.get_offsets())
        hits += [("scatter", tuple(p)) for p in offsets if box.contains(*p) and inside.contains(*p)]
    for patch in ax.patches:
        drawn = Bbox.intersection(patch.get_window_extent(renderer), inside)
        if drawn is not None and drawn.overlaps(box):
            hits.append(("bar", tuple(drawn.bounds)))
    return sorted(set(hits))


def _covering_figure(agg):
    """Three panels whose legends cover their data: lines under an upper-left legend (the lower right is free),
    scatter points everywhere, and bars on a log axis from 1e-8 under a lower-left legend (Chapter 11's (a))."""
    figure, (lines, points, bars) = agg.subplots(1, 3, figsize=(plots.WIDTH, 2.6))
    x = np.linspace(0, 1, 60)
    for k in range(3):
        lines.plot(x, 1 - 0.5 * x ** (k + 1), label=f"curve {k}")
    lines.set_ylim(0, 1.05)
    lines.legend(loc="upper left")
    grid = np.linspace(0, 1, 12)
    points.scatter(*np.meshgrid(grid, grid), s=12, label="samples")
    points.legend()
    coordinates = np.arange(8)
    bars.bar(coordinates, np.linspace(0.05, 1, 8), label="weights")
    bars.plot(coordinates[::2], np.full(4, 2.0), "kx", label="support")
    bars.set(yscale="log", ylim=(1e-8, 5))
    bars.legend(loc="lower left")
    return figure


def test_phone_layout_moves_every_legend_off_the_data(agg):
    """Plant the old behaviour (monkeypatch plots._legends_clear_of_data to do nothing) and this fails: the legends
    stay on the lines, the points and the bars."""
    figure = _covering_figure(agg)
    covered = [_data_under(ax.get_legend()) for ax in figure.axes]
    phone = plots.phone_layout(figure)
    data, _ = plots.png(phone, column_px=plots.PHONE_COLUMN_PX)
    assert _text_px(data, plots.PHONE_COLUMN_PX) >= plots.MIN_TEXT_PX
    assert [ax.get_legend()._loc for ax in figure.axes] == [2, 0, 3]  # the wide figure keeps its legends
    assert all(covered)  # ... which covered data there already
    renderer = phone.canvas.get_renderer()
    lines, points, bars = phone.axes
    for ax in phone.axes:
        assert _data_under(ax.get_legend()) == [], ax.get_legend().get_texts()[0].get_text()
    box = lines.get_legend().get_window_extent(renderer)
    assert lines.bbox.x0 <= box.x0 and box.x1 <= lines.bbox.x1 and lines.bbox.y0 <= box.y0  # a free corner
    assert box.y1 <= lines.bbox.y1
    for ax, below in ((points, bars), (bars, None)):  # no free place: under the panel, clear of its labels
        box = ax.get_legend().get_window_extent(renderer)
        assert box.y1 <= ax.xaxis.get_tightbbox(renderer).y0 + 1
        assert below is None or below.get_tightbbox(renderer, bbox_extra_artists=[]).y1 <= box.y0 + 1
        assert 0 <= box.x0 and box.x1 <= phone.bbox.x1
    assert phone.get_figheight() > 3 * 2.6  # grown by the legends under panels: the panels keep their height


def test_aligned_phone_layouts_put_a_legend_where_it_covers_no_frame(agg):
    """An explorer's frames whose line crosses a different corner in each: one place for the legend in all of them
    (a legend that jumps between frames reads as a change of the data), covering the data of none."""
    frames = []
    for start, end in ((1.0, 0.0), (0.0, 1.0), (0.1, 0.3)):
        figure, axes = agg.subplots(1, 2, figsize=(plots.WIDTH, 3))
        axes[0].plot([0, 1], [start, end], label="the path")
        axes[0].plot([0, 1], [0.5, 0.5], label="the limit")
        axes[0].legend(loc="upper left")
        axes[1].plot([0, 1], [0, 1])
        frames.append(figure)
    phones = plots.aligned_phone_layouts(frames)
    boxes = []
    for phone in phones:
        phone.canvas.draw()
        legend = phone.axes[0].get_legend()
        assert _data_under(legend) == []
        boxes.append(tuple(np.round(legend.get_window_extent(phone.canvas.get_renderer()).bounds, 6)))
    assert len(set(boxes)) == 1
    assert len({tuple(phone.get_size_inches()) for phone in phones}) == 1


def test_phone_layout_gives_crowded_automatic_tick_labels_fewer_ticks(agg):
    """Chapter 2's explorer: x from -1 to 0.75 in a panel of fixed aspect; in the phone's narrower panel the
    labels -1.00, -0.75, ... ran into each other."""
    figure, ax = agg.subplots(figsize=(plots.WIDTH, 3.9))
    ax.plot([-0.9, 0.6], [0.2, -0.6])
    ax.set(xlim=(-1.0, 0.75), ylim=(-0.65, 0.3), aspect="equal", xlabel="first coordinate")
    phone = plots.phone_layout(figure)
    phone.canvas.draw()
    renderer = phone.canvas.get_renderer()
    low, high = phone.axes[0].get_xlim()
    boxes = sorted((tick.label1.get_window_extent(renderer) for tick in phone.axes[0].xaxis.get_major_ticks()
                    if low <= tick.get_loc() <= high and tick.label1.get_text()), key=lambda box: box.x0)
    assert len(boxes) >= 3 and all(left.x1 + 2 <= right.x0 for left, right in zip(boxes, boxes[1:]))
    assert len(figure.axes[0].get_xticks()) > len(phone.axes[0].get_xticks())  # the wide figure keeps its ticks


def test_aligned_phone_layouts_crop_frames_alike_to_what_they_draw(agg):
    """Frames of a panel of fixed aspect leave a blank band above and below it, and its last tick label sticks out
    of the figure at the right; the frames are cropped alike to what any of them draws."""
    frames = []
    for top in (0.3, 0.25):
        figure, ax = agg.subplots(figsize=(plots.WIDTH, 3.9))
        ax.plot([-0.9, 0.6], [top, -0.6])
        ax.set(xlim=(-1.0, 0.75), ylim=(-0.65, 0.3), aspect="equal", xlabel="first coordinate",
               ylabel="second coordinate")
        frames.append(figure)
    phones = plots.aligned_phone_layouts(frames)
    assert len({tuple(phone.get_size_inches()) for phone in phones}) == 1
    extents = []
    for phone in phones:
        phone.canvas.draw()
        box = phone.get_tightbbox(phone.canvas.get_renderer())  # inches
        assert box.x0 >= 0 and box.y0 >= 0 and box.x1 <= phone.get_figwidth() and box.y1 <= phone.get_figheight()
        extents.append(box)
    width, height = phones[0].get_size_inches()
    union = Bbox.union(extents)
    assert width - union.width <= 0.11 and height - union.height <= 0.11  # 0.05 in around, no blank band
    assert height < 3.9 - 1  # the band each frame left blank is gone


# ------------------------------------------------------------------ scripts and tables in the size rule

def test_smallest_text_is_the_drawn_size_of_scripts_fractions_and_table_cells(agg):
    figure, ax = agg.subplots(figsize=(3, 2))
    assert plots.smallest_text(figure) == 9  # the tick labels
    ax.set_xlabel("step $k_1$")  # 10 pt, its subscript drawn at 7 pt
    assert plots.smallest_text(figure) == pytest.approx(7.0)
    ax.set_xlabel(r"$\frac{a}{b}$", fontsize=12)  # a fraction's parts at 0.7 x 12 pt in text style
    assert plots.smallest_text(figure) == pytest.approx(8.4)
    table = ax.table([["first", "second"]], loc="top")
    table.auto_set_font_size(False)
    table.set_fontsize(5)
    assert plots.smallest_text(figure) == pytest.approx(5.0)  # not measured before: findobj misses a table's cells
    with pytest.raises(ValueError, match=r"smallest text, 'first' at 5 pt, would be displayed at 6.9 CSS px .* "
                                         r"table.set_fontsize\(9\)"):
        plots.png(figure)


def _scripted(agg):
    figure, ax = agg.subplots(figsize=(plots.WIDTH, 3))
    ax.semilogy([1, 2, 3], [1e-3, 1e-1, 1e1], label=r"$p^{\mathrm{relax}}$")  # tick labels 10^k: exponents
    ax.plot([1, 3], [1, 1], label="plain")
    ax.legend()
    return figure, ax


def test_png_enlarges_the_texts_whose_scripts_would_be_too_small(agg):
    figure, ax = _scripted(agg)
    data, metadata = plots.output(figure)
    assert _text_px(data, plots.COLUMN_PX) >= plots.MIN_TEXT_PX
    scripted, plain = ax.get_legend().get_texts()
    assert scripted.get_fontsize() == plain.get_fontsize() > 9  # a legend's entries at one size
    assert min(label.get_fontsize() for label in ax.get_yticklabels()) > 9
    assert {label.get_fontsize() for label in ax.get_xticklabels()} == {9}  # only where scripts occur
    phone = base64.b64decode(metadata[plots.PHONE_KEY])
    assert _text_px(phone, plots.PHONE_COLUMN_PX) >= plots.MIN_TEXT_PX


def test_png_refuses_scripts_displayed_below_nine_pixels(agg, monkeypatch):
    """The old behaviour (texts measured at their font size, scripts not enlarged): 9-pt tick labels passed at
    12.5 px while their exponents were shown at 8.75 px."""
    monkeypatch.setattr(plots, "_enlarge_scripts", lambda figure, points: None)
    with pytest.raises(ValueError, match=r"smallest text, .*10\^.* \(its scripts\) at 6.3 pt, would be displayed "
                                         r"at 8.\d CSS px"):
        plots.png(_scripted(agg)[0])


def test_phone_layout_measures_a_legend_in_a_panel_of_fixed_aspect_where_it_is_drawn(agg):
    """Chapter 3's fig-gc-multi-input: a panel of equal aspect is drawn in a box smaller than its cell, so the data
    is not where the layout's box says; its legend covered the path on a phone."""
    figure, axes = agg.subplots(1, 3, figsize=(plots.WIDTH, 3))
    x = np.linspace(0, 20, 40)
    axes[0].plot(x, 0.28 * x, marker=">", label="the path")
    axes[0].scatter([-1, -1.5, -0.5, 1], [1, 0, -1, 0.2], label="other keys")
    axes[0].plot([-2, 21], [-0.6, 5.9], "k--", label="direction")
    axes[0].plot([-1.5, 0.5], [6.5, -2.5], "k:", label="max-margin line")
    axes[0].set(xlim=(-2.5, 21), ylim=(-2.5, 7), aspect="equal")
    axes[0].legend(loc="lower right")
    for ax in axes[1:]:
        ax.plot([0, 1], [0, 1])
    phone = plots.phone_layout(figure)
    plots.png(phone, column_px=plots.PHONE_COLUMN_PX)
    assert _data_under(phone.axes[0].get_legend()) == []


def test_phone_layout_gives_a_panel_of_fixed_aspect_the_height_its_box_needs(agg):
    """A panel of equal aspect in a row as tall as the wide figure's: on a phone its box, as wide as the column, is
    much less tall than the row, which left blank bands above and below it (Chapter 3's explorer)."""
    figure, axes = agg.subplots(2, 1, figsize=(plots.WIDTH, 7.6))
    for ax, (right, top) in zip(axes, ((4, 3), (100, 57))):
        ax.plot([-2, right], [-2, top])
        ax.set(xlim=(-2.5, right), ylim=(-2.5, top), aspect="equal", xlabel="$p_1$", ylabel="$p_2$")
    phone = plots.phone_layout(figure)
    phone.canvas.draw()
    for ax in phone.axes:
        cell, drawn = ax.get_position(original=True), ax.get_position(original=False)
        assert drawn.width == pytest.approx(cell.width, rel=0.02) and drawn.height == pytest.approx(cell.height,
                                                                                                    rel=0.05)
    assert phone.get_figheight() < 7.6 - 2


def test_the_sign_of_a_radical_is_no_script(agg):
    """mathtext draws a radical's sign (and a delimiter sized by \\left ... \\right) at whatever size fits what it
    encloses: 5.1 pt around t+1 in a 9-pt label. Counted as text, it made a legend of the prelude grow to 12.6 pt and
    spill out of the phone's column."""
    figure, ax = agg.subplots(figsize=(3, 2))
    ax.set_xlabel(r"$\eta_t=0.25/\sqrt{t+1}$", fontsize=10)
    assert plots.smallest_text(figure) == pytest.approx(7.0)  # the subscript t, not the sign (5.6 pt)
    ax.set_xlabel(r"$\left(\frac{a}{b}\right)$", fontsize=10)
    assert plots.smallest_text(figure) == pytest.approx(7.0)  # a and b, not the parentheses


class _Stubborn(MaxNLocator):
    """A locator that ignores its number of bins: fewer ticks cannot be asked of it."""

    def tick_values(self, vmin, vmax):
        return np.linspace(vmin, vmax, 30)


def test_phone_layout_stops_thinning_ticks_a_locator_cannot_give_fewer_of(agg):
    """Asking a locator for fewer bins until the labels no longer overlap looped for ever (a prelude figure) where
    the locator gave as many ticks as before."""
    figure, ax = agg.subplots(figsize=(plots.WIDTH, 3))
    ax.plot([0, 1], [0, 1])
    ax.xaxis.set_major_locator(_Stubborn())
    phone = plots.phone_layout(figure)
    assert len(phone.axes[0].get_xticks()) == 30


def test_aligned_phone_layouts_give_frames_whose_figure_legends_differ_one_size(agg):
    """A figure legend that takes more rows in one frame (longer labels) must not make that frame taller."""
    frames = []
    for labels in (["a", "b", "c"], ["a much longer legend label one", "another long legend label two",
                                     "and a third long legend label"]):
        figure, axes = agg.subplots(1, 2, figsize=(plots.WIDTH * 2, 3))
        for k, label in enumerate(labels):
            axes[0].plot([0, 1], [0, k], label=label)
        figure.legend(loc="outside lower center", ncols=3)
        frames.append(figure)
    phones = plots.aligned_phone_layouts(frames)
    assert len({tuple(phone.get_size_inches()) for phone in phones}) == 1
