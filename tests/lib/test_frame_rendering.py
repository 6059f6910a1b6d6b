"""How attnsvm.book draws pictures fast, and that it draws the pictures matplotlib draws: ``plots.png`` draws a
figure without a layout to run once (``savefig`` first draws it without rendering), an explorer's frames share
their renderers and mathtext layouts, and frames are quantized from the drawn pixels (no PNG encoded and decoded
in between). Each test compares bytes with matplotlib's own ``savefig`` or with a figure drawn alone."""

import io
import zlib

import matplotlib
import numpy as np
import PIL.Image
import PIL.PngImagePlugin
import pytest
from mpl_toolkits.axes_grid1.inset_locator import inset_axes

from attnsvm.book import plots, widgets


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


def _savefig_png(fig, dpi, tight, colors=None) -> bytes:
    """What png() gave before it drew without encoding a PNG in between: savefig's PNG with the smallest-text chunk
    inserted first, and for a frame that PNG decoded and quantized (the scripts already enlarged by png())."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight" if tight else None,
                metadata={plots.DPI_KEY: str(dpi)})
    points, _ = plots._smallest_drawn_text(fig)
    body = b"tEXt" + plots.TEXT_KEY.encode("latin-1") + b"\0" + f"{points:.4g}".encode("latin-1")
    data = buffer.getvalue()
    data = data[:33] + (len(body) - 4).to_bytes(4, "big") + body + zlib.crc32(body).to_bytes(4, "big") + data[33:]
    if colors is None:
        return data
    image = PIL.Image.open(io.BytesIO(data))
    info = PIL.PngImagePlugin.PngInfo()
    for key, value in image.text.items():
        info.add_text(key, value)
    out = io.BytesIO()
    image.convert("RGBA").quantize(colors=colors, method=PIL.Image.Quantize.FASTOCTREE,
                                   dither=PIL.Image.Dither.NONE).save(out, format="png", pnginfo=info)
    return out.getvalue()


def _placed(plt):  # no layout engine: drawn once
    fig, (left, right) = plt.subplots(1, 2, figsize=(plots.WIDTH, 3))
    left.plot([1, 10, 100], [1e-3, 1e-1, 1.0], label=r"$\|W(k)\|$")
    left.set(xscale="log", yscale="log", xlabel="step $k$", ylabel=r"$\epsilon_k$")
    right.annotate("", xy=(1, 1), xytext=(0, 0), arrowprops=dict(arrowstyle="-|>"))
    right.imshow(np.arange(12.0).reshape(3, 4), extent=(0, 2, 0, 1.5), alpha=0.3)
    right.legend(*left.get_legend_handles_labels(), title="$p(0)=(0, 1)$", loc="best")
    fig.subplots_adjust(left=0.12, right=0.98, bottom=0.2)
    return fig


def _constrained(plt):  # a layout to run: drawn as savefig draws it
    fig, axes = plt.subplots(2, 1, figsize=(4, 4), layout="constrained")
    axes[0].bar(range(4), [1, 3, 2, 4], label="bars")
    axes[1].set_xlabel(r"$\lambda$")
    fig.legend(loc="outside lower center")
    return fig


def _inset(plt):  # axes placed by a locator, which savefig places with its renderer
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot([0, 1], [0, 1])
    inset = inset_axes(ax, width="30%", height="30%", loc="lower right")
    inset.plot([0, 1], [1, 0])
    return fig


def _laid_out(plt):  # laid out once, its layout engine then "none": a phone frame, saved untrimmed
    fig, ax = plt.subplots(figsize=(3.4, 3), layout="constrained")
    ax.plot([0, 1], [0, 1e4], label="line")
    ax.set_ylabel("$y_1$")
    ax.legend()
    fig.canvas.draw()
    fig.set_layout_engine("none")
    return fig


@pytest.mark.parametrize("build, tight", [(_placed, True), (_constrained, True), (_inset, True), (_laid_out, False),
                                          (_placed, False)])
@pytest.mark.parametrize("colors", [None, 256])
def test_png_gives_the_bytes_of_savefigs_png(agg, build, tight, colors):
    fig = build(agg)
    data, metadata = plots.png(fig, dpi=200, tight=tight, colors=colors)
    assert data == _savefig_png(fig, 200, tight, colors)
    assert metadata["width"] == round(PIL.Image.open(io.BytesIO(data)).width / 2)


def test_png_leaves_the_figure_its_layout_engine_and_its_canvas(agg):
    fig = _laid_out(agg)
    engine, canvas = fig.get_layout_engine(), fig.canvas
    plots.png(fig, tight=False)
    assert fig.get_layout_engine() is engine and fig.canvas is canvas and "get_renderer" not in vars(canvas)
    fig.axes[0].set_ylabel("tiny", fontsize=4)  # refused: restored all the same
    with pytest.raises(ValueError, match="below the 9 px"):
        plots.png(fig, tight=False)
    assert fig.get_layout_engine() is engine and "get_renderer" not in vars(canvas)


def test_png_gives_frames_a_palette_and_refuses_a_bad_number_of_colours(agg):
    fig = _placed(agg)
    image = PIL.Image.open(io.BytesIO(plots.png(fig, colors=8)[0]))
    assert image.mode == "P" and len(image.getcolors()) <= 8 and plots.TEXT_KEY in image.text
    for colors in (1, 257, 2.5, True, "256"):
        with pytest.raises(ValueError, match=r"colors=.*: pass None \(full colour\) or an integer from 2 to 256"):
            plots.png(fig, colors=colors)


def test_shared_mathtext_layouts_follow_the_font_settings(agg):
    """The frames share their mathtext layouts: a layout made under one mathtext font is not reused under
    another."""
    def draw():
        fig, ax = agg.subplots(figsize=(4, 3))
        ax.set_xlabel(r"$\sum_t s_t x_t^2$")
        return fig
    for italic in ("DejaVu Sans:italic", "DejaVu Serif:italic"):  # the same font properties, other glyphs
        with matplotlib.rc_context({"mathtext.fontset": "custom", "mathtext.it": italic}):
            fig = draw()
            data = plots.png(fig)[0]  # the first one's layouts cached, not reused for the second
            assert data == _savefig_png(fig, plots.DPI, True)


def _frame_draw(plt):
    def draw(angle=1.0):
        fig, axes = plt.subplots(1, 2, figsize=(plots.WIDTH, 3))
        axes[0].plot([0, np.cos(angle)], [0, np.sin(angle)], label=f"$\\theta={angle:g}$")
        axes[0].legend(title=r"$\cos\theta$")
        axes[1].plot([1, 10], [angle * 1e-3, angle * 1e3])
        axes[1].set(yscale="log", xlabel=f"step $k_{int(angle)}$")
        return fig
    return draw


def test_explorer_frames_are_the_figures_drawn_alone_in_any_order(agg):
    """The frames share renderers (one per size) and mathtext layouts: nothing a frame drew leaks into another."""
    draw, values = _frame_draw(agg), [1.0, 2.5, 0.5]
    images, _, phones = widgets.frames(draw, angle=values)
    backwards, _, _ = widgets.frames(draw, angle=values[::-1])
    assert images == backwards[::-1]
    for value, image in zip(values, images):
        fig = draw(value)  # a canvas and renderers of its own
        agg.close(fig)
        data = plots.png(fig, dpi=widgets.FRAME_DPI, colors=widgets.FRAME_COLORS)[0]
        assert data == _savefig_png(fig, widgets.FRAME_DPI, True, widgets.FRAME_COLORS)
        assert image == widgets._base64([data])[0]
    figures = [draw(value) for value in values]  # the phone layouts of figures drawn alone
    for fig in figures:
        agg.close(fig)
    alone = []
    for phone in plots.aligned_phone_layouts(figures):
        plots._enlarge_scripts(phone, plots._needed_points(plots.PHONE_COLUMN_PX, phone.get_figwidth()))  # as png()
        alone.append(_savefig_png(phone, widgets.PHONE_FRAME_DPI, False, widgets.FRAME_COLORS))
    assert phones is not None and phones == widgets._base64(alone)
