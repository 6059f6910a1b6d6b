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
    assert image.text[plots.TEXT_KEY] == "9" and image.text[plots.DPI_KEY] == str(plots.DPI)
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


def test_phone_layout_refuses_what_it_would_misplace(agg):
    figure, ax = agg.subplots(figsize=(plots.WIDTH, 3))
    figure.add_axes([0.6, 0.6, 0.3, 0.3])
    with pytest.raises(ValueError, match=r"axes placed by hand \(fig.add_axes\) or texts placed on the figure"):
        plots.phone_layout(figure)
    figure, ax = agg.subplots(figsize=(plots.WIDTH, 3))
    figure.text(0.1, 0.1, "note")
    with pytest.raises(ValueError, match=r"put every panel on a grid"):
        plots.phone_layout(figure)
    figure.texts.clear()
    figure.supylabel("error")  # a figure label is laid out with the panels: allowed
    assert plots.phone_layout(figure).get_supylabel() == "error"


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
    ax.plot([0, 1], label="a curve whose name is longer than a phone's column is wide")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    data, _ = plots.png(figure)  # fits the book's column, not a phone's
    assert not plots.fits_phone(data)
    with pytest.warns(UserWarning, match="constrained_layout not applied"), \
            pytest.raises(ValueError, match=r"in a 330-px column, below the 9 px .* at most 3.4 in wide"):
        plots.phone_png(figure, data)


def test_explorer_frames_have_phone_layouts_alike_where_the_figure_needs_them(agg, monkeypatch):
    def draw(angle=1.0):
        figure, axes = agg.subplots(1, 2, figsize=(plots.WIDTH, 3))
        axes[0].plot([0, np.cos(angle)], [0, np.sin(angle)])
        axes[1].plot([0, 1], [0, angle * 1e4])  # tick labels of another width at every angle
        return figure
    images, _, phones = widgets.frames(draw, angle=[1.0, 2.0, 3.0])
    sizes = {PIL.Image.open(io.BytesIO(base64.b64decode(phone))).size for phone in phones}
    assert len(phones) == 3 and len(set(phones)) == 3 and len(sizes) == 1  # one place for the panels
    assert all(_text_px(base64.b64decode(phone), plots.PHONE_COLUMN_PX) >= plots.MIN_TEXT_PX for phone in phones)
    assert widgets.frames(_draw_angle([]), angle=[1.0, 2.0])[2] is None  # 4 inches wide: scaled on a phone
    shown = []
    monkeypatch.setattr(widgets, "display", lambda bundle, raw: shown.append(bundle))
    widgets.explorer(draw, angle=[1.0, 2.0, 3.0])
    html = shown[0]["text/html"]
    spec = json.loads(re.search(r'<script type="application/json">(.*?)</script>', html).group(1))
    assert spec["phone"] == phones
    assert (f'<picture><source media="{plots.PHONE_MEDIA}" srcset="data:image/png;base64,{phones[0]}">'
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
