"""The book's figure style: a colour-blind-safe palette, a size rule that keeps every text readable, helpers for
its recurring pictures, and its tables.

The size rule. A figure is drawn at most ``WIDTH`` inches wide (the book's text column, ``COLUMN_PX`` CSS pixels
at 100 pixels per inch) with fonts of at least 9 pt, and saved by ``png()`` at ``DPI`` (sharp on high-density
screens) with its display width stated, so that the book shows it at 100 pixels per inch. ``png()`` refuses a
figure whose smallest text would be displayed below ``MIN_TEXT_PX`` CSS pixels in the column (a figure wider than
the column is scaled down), and records the smallest text size in the PNG (``TEXT_KEY``), where the browser tests
read it. ``use_style()`` installs ``output()`` as IPython's PNG formatter of matplotlib figures.

Phones. A figure that, scaled down to a phone's column (``PHONE_COLUMN_PX``), would show text below ``MIN_TEXT_PX``
gets a second PNG, its phone layout (``phone_layout``: ``PHONE_WIDTH`` wide, panels stacked in one column), stored
in the PNG output's metadata under ``PHONE_KEY``; the HTML book shows it in windows that match ``PHONE_MEDIA``
(assets/sphinx/phone_figures.py). A figure that cannot be laid out so raises ValueError, never shows cropped.
"""

from __future__ import annotations

import base64
import io
import pickle
import warnings
import zlib
from collections.abc import Sequence

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
import PIL.Image
from IPython.display import Markdown
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.ticker import FixedLocator
from matplotlib.transforms import IdentityTransform
from numpy.typing import ArrayLike

__all__ = ["aligned_phone_layouts", "band", "displayed_text_px", "fits_phone", "line", "output", "path", "phone_layout",
           "phone_png", "png",
           "ray", "smallest_text", "svm_picture", "table", "use_style", "PALETTE", "CYCLE", "WIDTH", "COLUMN_PX",
           "CSS_PX_PER_INCH", "MIN_TEXT_PX", "DPI", "TEXT_KEY", "DPI_KEY", "PHONE_WIDTH", "PHONE_COLUMN_PX",
           "PHONE_MEDIA", "PHONE_KEY"]

# Okabe and Ito (2008), safe for the common forms of colour blindness.
PALETTE = {"blue": "#0072B2", "orange": "#E69F00", "green": "#009E73", "vermillion": "#D55E00",
           "sky": "#56B4E9", "purple": "#CC79A7", "yellow": "#F0E442", "black": "#000000"}
CYCLE = [PALETTE[name] for name in ("blue", "vermillion", "green", "orange", "purple", "sky", "black")]
WIDTH = 6.7  # inches: the widest figure that is shown unscaled in the text column
COLUMN_PX = 672  # CSS pixels: the text column of the HTML book at a 1280 px window
CSS_PX_PER_INCH = 100  # how large the book shows a figure (its PNG carries this display width)
MIN_TEXT_PX = 9  # the smallest text, in CSS pixels as displayed, that the book allows in a figure
DPI = 200  # pixels per inch of the saved PNG (2 image pixels per CSS pixel)
TEXT_KEY = "attnsvm-min-text-pt"  # PNG text chunk: the smallest font size of the figure, in points
DPI_KEY = "attnsvm-dpi"  # PNG text chunk: the DPI it was saved with
PHONE_WIDTH = 3.4  # inches: the width of a figure's phone layout (about 3.5 in saved, with its tight margin)
PHONE_COLUMN_PX = 330  # CSS pixels: a figure's room in the HTML book at a 400 px window (338 px measured, less a margin)
PHONE_MEDIA = "(max-width: 720px)"  # the windows in which the HTML book shows phone layouts (as book.css)
PHONE_KEY = "attnsvm-phone"  # metadata of a figure's PNG output: its phone layout, a base64 PNG


def use_style() -> None:
    """Apply the book's matplotlib style (sizes, palette, no top/right spines) and, inside IPython, show figures
    through ``png()`` (the size rule).

    Examples
    --------
    >>> import matplotlib
    >>> from attnsvm.book import plots
    >>> plots.use_style()
    >>> matplotlib.rcParams["font.size"], matplotlib.rcParams["axes.prop_cycle"].by_key()["color"][0]
    (10.0, '#0072B2')
    """
    mpl.rcParams.update({
        "figure.figsize": (WIDTH, 4.0), "figure.dpi": CSS_PX_PER_INCH, "savefig.dpi": DPI, "font.size": 10,
        "axes.titlesize": 10, "axes.labelsize": 10, "xtick.labelsize": 9, "ytick.labelsize": 9,
        "legend.fontsize": 9, "legend.title_fontsize": 9, "figure.titlesize": 11,
        "axes.prop_cycle": mpl.cycler(color=CYCLE), "axes.spines.top": False, "axes.spines.right": False,
        "axes.grid": True, "grid.alpha": 0.3, "legend.frameon": False, "lines.linewidth": 2,
    })
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython is a dependency
        return
    shell = get_ipython()
    if shell is not None:
        if "inline" in mpl.get_backend():
            # The inline backend registers its own PNG formatter when it is first imported (usually at the first
            # figure): import it now, so that ours, registered after, is the one that stays.
            import matplotlib_inline.backend_inline  # noqa: F401
        shell.display_formatter.formatters["image/png"].for_type(Figure, output)


def smallest_text(fig: Figure) -> float:
    """The smallest font size of the visible non-empty texts of a figure (tick labels, labels, titles, legends,
    annotations).

    Parameters
    ----------
    fig : Figure
        The figure.

    Returns
    -------
    float
        The size in points; inf for a figure without text.

    Examples
    --------
    >>> import matplotlib; matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> from attnsvm.book import plots
    >>> plots.use_style()
    >>> fig, ax = plt.subplots()
    >>> plots.smallest_text(fig)  # the tick labels
    9.0
    >>> plt.close(fig)
    """
    fig.canvas.draw()  # ticks and their labels exist only once drawn
    return _smallest_drawn_text(fig)


def _smallest_drawn_text(fig: Figure) -> float:
    sizes = [text.get_fontsize() for text in fig.findobj(Text) if text.get_visible() and text.get_text().strip()]
    return min(sizes, default=float("inf"))


def _with_text(data: bytes, key: str, value: str) -> bytes:
    """The PNG ``data`` with a text chunk key=value after its header chunk (IHDR, 33 bytes with the signature)."""
    body = b"tEXt" + key.encode("latin-1") + b"\0" + value.encode("latin-1")
    chunk = (len(body) - 4).to_bytes(4, "big") + body + zlib.crc32(body).to_bytes(4, "big")
    return data[:33] + chunk + data[33:]


def png(fig: Figure, *, dpi: int = DPI, column_px: float = COLUMN_PX, tight: bool = True) -> tuple[bytes, dict]:
    """A figure as PNG bytes and the display metadata that shows it at ``CSS_PX_PER_INCH``.

    Parameters
    ----------
    fig : Figure
        The figure.
    dpi : int, default=200
        The resolution.
    column_px : float, default=672
        The column it is shown in, in CSS pixels (the book's, or a phone's for a phone layout).
    tight : bool, default=True
        Crop to what it draws; False: a figure whose layout fills it saves faster uncropped.

    Returns
    -------
    tuple
        The PNG bytes and ``{"width": CSS px}``.

    Raises
    ------
    ValueError
        If its smallest text would be displayed below ``MIN_TEXT_PX`` CSS pixels in the column.

    Examples
    --------
    >>> import matplotlib; matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> from attnsvm.book import plots
    >>> plots.use_style()
    >>> fig, ax = plt.subplots(figsize=(3, 2))
    >>> data, metadata = plots.png(fig)
    >>> data[1:4], sorted(metadata)
    (b'PNG', ['width'])
    >>> plt.close(fig)
    """
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight" if tight else None, metadata={DPI_KEY: str(dpi)})
    points = _smallest_drawn_text(fig)  # the texts as saved (drawing the figure once more for them costs time)
    data = _with_text(buffer.getvalue(), TEXT_KEY, f"{points:g}")
    width = _png_width(data)
    shown = displayed_text_px(points, width, dpi, column_px)
    if shown < MIN_TEXT_PX:
        inches = fig.get_size_inches()
        limit = WIDTH if column_px == COLUMN_PX else PHONE_WIDTH
        raise ValueError(f"this figure's smallest text ({points:g} pt) would be displayed at {shown:.1f} CSS px in "
                         f"a {column_px:g}-px column, below the {MIN_TEXT_PX} px the book allows: draw it at most "
                         f"{limit} in wide (it is {inches[0]:g} in, {width / dpi:.2f} in with what sticks out; stack "
                         "panels in rows, keep legends inside the axes or under them) with fonts of at least 9 pt")
    return data, {"width": round(width * CSS_PX_PER_INCH / dpi)}


def _png_width(data: bytes) -> int:
    return int.from_bytes(data[16:20], "big")  # the PNG header's width, in image pixels


def output(fig: Figure) -> tuple[bytes, dict]:
    """IPython's PNG of a figure, with its phone layout where it needs one.

    Parameters
    ----------
    fig : Figure
        The figure.

    Returns
    -------
    tuple
        ``png(fig)``'s bytes and metadata; where ``fig`` needs one, the metadata holds its phone layout
        (``phone_png``) as a base64 PNG under ``PHONE_KEY``.

    Raises
    ------
    ValueError
        As ``png`` and ``phone_layout`` do.

    Examples
    --------
    >>> import matplotlib; matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> from attnsvm.book import plots
    >>> plots.use_style()
    >>> fig, axes = plt.subplots(1, 2, figsize=(plots.WIDTH, 3))
    >>> data, metadata = plots.output(fig)
    >>> sorted(metadata), metadata["width"]
    (['attnsvm-phone', 'width'], 578)
    >>> plt.close(fig)
    """
    data, metadata = png(fig)
    phone = phone_png(fig, data)
    if phone is not None:
        metadata[PHONE_KEY] = base64.b64encode(phone).decode("ascii")
    return data, metadata


def phone_png(fig: Figure, data: bytes, *, dpi: int = DPI) -> bytes | None:
    """The PNG of a figure's phone layout, or None where the figure fits a phone as it is (``fits_phone``).

    Parameters
    ----------
    fig : Figure
        The figure.
    data : bytes
        Its PNG, saved by ``png`` at ``dpi``.
    dpi : int, default=200
        The resolution of ``data``.

    Returns
    -------
    bytes or None
        The PNG of ``phone_layout(fig)``, saved by ``png`` for a ``PHONE_COLUMN_PX`` column, or None.

    Raises
    ------
    ValueError
        As ``phone_layout`` does.

    Examples
    --------
    >>> import matplotlib; matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> from attnsvm.book import plots
    >>> plots.use_style()
    >>> fig, ax = plt.subplots(figsize=(3, 2))
    >>> plots.phone_png(fig, plots.png(fig)[0]) is None
    True
    >>> plt.close(fig)
    """
    if fits_phone(data, dpi):
        return None
    return png(phone_layout(fig), dpi=dpi, column_px=PHONE_COLUMN_PX)[0]


def fits_phone(data: bytes, dpi: int = DPI) -> bool:
    """Whether a PNG shows text of at least ``MIN_TEXT_PX`` CSS px when scaled down to a phone's column
    (``PHONE_COLUMN_PX``); then the book scales it there.

    Parameters
    ----------
    data : bytes
        A PNG saved by ``png``.
    dpi : int, default=200
        The resolution it was saved at.

    Returns
    -------
    bool
        Whether it fits.

    Examples
    --------
    >>> import matplotlib; matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> from attnsvm.book import plots
    >>> plots.use_style()
    >>> fig, ax = plt.subplots(figsize=(3, 2))
    >>> plots.fits_phone(plots.png(fig)[0])  # 9-pt text shown at 12.5 px
    True
    >>> plt.close(fig)
    """
    points = float(PIL.Image.open(io.BytesIO(data)).text[TEXT_KEY])
    return displayed_text_px(points, _png_width(data), dpi, PHONE_COLUMN_PX) >= MIN_TEXT_PX


def phone_layout(fig: Figure, *, in_place: bool = False) -> Figure:
    """A copy of a figure laid out for a phone: ``PHONE_WIDTH`` wide, its panels stacked in one column in reading
    order.

    The panels (the axes of its grids, a twin with its axes) are each as tall as their row was; tick labels and
    axis labels that a shared axis had left to a neighbour are shown on every panel; figure legends go under the
    panels and axes legends take as many columns as fit their axes; of x ticks fixed by hand, as many labels as
    fit. The layout is the constrained layout.

    Parameters
    ----------
    fig : Figure
        The figure.
    in_place : bool, default=False
        Lay out ``fig`` itself and return it (for a figure that is not shown again); otherwise ``fig`` is not
        changed.

    Returns
    -------
    Figure
        The phone layout.

    Raises
    ------
    ValueError
        For a figure it cannot lay out: axes placed by hand (``fig.add_axes``) or texts placed on the figure
        (``fig.text``), which the new layout would misplace; or a figure that cannot be copied.

    Examples
    --------
    >>> import matplotlib; matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> from attnsvm.book import plots
    >>> plots.use_style()
    >>> fig, axes = plt.subplots(2, 2, figsize=(plots.WIDTH, 4))
    >>> phone = plots.phone_layout(fig)
    >>> phone.get_size_inches().tolist(), [ax.get_subplotspec().rowspan.start for ax in phone.axes]
    ([3.4, 8.0], [0, 1, 2, 3])
    >>> plt.close(fig)
    """
    try:
        phone = fig if in_place else pickle.loads(pickle.dumps(fig))
    except Exception as error:
        raise ValueError(f"this figure cannot be copied for its phone layout ({error}): draw it with picklable "
                         "artists (e.g. a named function, not a lambda, in a FuncFormatter)") from error
    plt.close(phone)  # a copy of a pyplot figure is registered with pyplot: it must not be shown
    FigureCanvasAgg(phone)  # drawn off screen, whatever the backend
    loose = [ax for ax in phone.axes if ax.get_subplotspec() is None]
    labels = {phone._suptitle, phone._supxlabel, phone._supylabel}
    if loose or any(text not in labels for text in phone.texts):
        raise ValueError("this figure has axes placed by hand (fig.add_axes) or texts placed on the figure "
                         "(fig.text), which its phone layout would misplace: put every panel on a grid "
                         "(plt.subplots, fig.add_subplot) and every text in an axes (ax.text) or a figure label "
                         "(fig.supxlabel, fig.supylabel)")
    panels = {}
    for ax in phone.axes:  # a twin shares its axes' cell: one panel
        spec = ax.get_subplotspec()
        panels.setdefault((id(spec.get_gridspec()), spec.rowspan, spec.colspan), []).append(ax)
    height = phone.get_figheight()
    order = sorted(panels.values(), key=lambda axes: _reading_order(axes[0].get_subplotspec(), phone))
    heights = [height * _height_fraction(axes[0].get_subplotspec()) for axes in order]
    grid = phone.add_gridspec(len(order), 1, height_ratios=heights)
    panel = {}
    for k, axes in enumerate(order):
        for ax in axes:
            ax.set_subplotspec(grid[k])
            panel[ax] = k
    for ax in (axes[0] for axes in order):
        _show_shared_labels(ax, panel)
    phone.set_size_inches(PHONE_WIDTH, sum(heights))
    phone.set_layout_engine("constrained")
    _legends_below(phone)
    _legends_within_their_axes(phone)
    _thin_fixed_tick_labels(phone)
    return phone


def aligned_phone_layouts(figures: Sequence[Figure]) -> list[Figure]:
    """The phone layouts (``phone_layout``, in place) of figures with the same axes, e.g. an explorer's frames, with
    each panel at one place in all of them, so that a frame does not jump: each figure's constrained layout leaves
    room for its own labels, and every panel takes the box inside all of its boxes, with room for all of them.

    Parameters
    ----------
    figures : Sequence of Figure
        Figures of one size with the same axes (they are changed).

    Returns
    -------
    list of Figure
        The laid-out figures.

    Raises
    ------
    ValueError
        If the figures differ in size or number of axes, or for a figure ``phone_layout`` refuses.

    Examples
    --------
    >>> import matplotlib; matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> from attnsvm.book import plots
    >>> frames = [plt.subplots(1, 2, figsize=(plots.WIDTH, 3))[0] for _ in range(2)]
    >>> frames[1].axes[1].plot([0, 1], [0, 1e5])  # wider tick labels in one frame  # doctest: +ELLIPSIS
    [...]
    >>> one, two = plots.aligned_phone_layouts(frames)
    >>> [ax.get_position().bounds for ax in one.axes] == [ax.get_position().bounds for ax in two.axes]
    True
    >>> for frame in frames: plt.close(frame)
    """
    figures = list(figures)
    shapes = {(len(figure.axes), tuple(figure.get_size_inches())) for figure in figures}
    if len(shapes) > 1:
        raise ValueError(f"figures must have the same size and axes (found {sorted(shapes)}): draw every frame "
                         "with one figsize and the same panels")
    phones = [phone_layout(figure, in_place=True) for figure in figures]
    boxes = []
    for phone in phones:
        phone.draw_without_rendering()  # runs the constrained layout
        boxes.append([ax.get_position().extents for ax in phone.axes])
    extents = np.asarray(boxes)  # (figures, axes, [x0, y0, x1, y1])
    inner = np.concatenate([extents[..., :2].max(0), extents[..., 2:].min(0)], axis=-1)
    for phone in phones:
        phone.set_layout_engine("none")
        for ax, (x0, y0, x1, y1) in zip(phone.axes, inner):
            ax.set_position([x0, y0, x1 - x0, y1 - y0])
    return phones


def _reading_order(spec, fig: Figure) -> tuple[float, float]:
    box = spec.get_position(fig)
    return -round(box.y1, 6), round(box.x0, 6)


def _height_fraction(spec) -> float:
    """The fraction of the figure's height that the rows of ``spec`` take (nested grids included)."""
    grid = spec.get_gridspec()
    ratios = np.asarray(grid.get_height_ratios() or [1] * grid.nrows, dtype=float)
    fraction = ratios[spec.rowspan].sum() / ratios.sum()
    parent = getattr(grid, "_subplot_spec", None)  # a grid nested in a cell of another
    return fraction * (_height_fraction(parent) if parent is not None else 1.0)


def _show_shared_labels(ax: Axes, panel: dict) -> None:
    for axis, shared, side in ((ax.xaxis, ax.get_shared_x_axes(), "labelbottom"),
                               (ax.yaxis, ax.get_shared_y_axes(), "labelleft")):
        others = [other for other in shared.get_siblings(ax) if panel.get(other, panel[ax]) != panel[ax]]
        others = [getattr(other, axis.axis_name + "axis") for other in others]
        if not others:
            continue
        if not axis.get_tick_params(which="major").get(side, True) and any(
                other.get_tick_params(which="major").get(side, True) for other in others):
            axis.set_tick_params(which="both", **{side: True})
        named = [other for other in others if other.get_label_text()]
        if not axis.get_label_text() and named:
            axis.set_label_text(named[0].get_label_text(), fontproperties=named[0].label.get_fontproperties(),
                                color=named[0].label.get_color())


def _legend_options(legend) -> dict:
    texts = legend.get_texts()
    return dict(title=legend.get_title().get_text() or None, title_fontsize=legend.get_title().get_fontsize(),
                fontsize=texts[0].get_fontsize() if texts else None)


def _legends_within_their_axes(fig: Figure) -> None:
    """Each axes legend in several columns that is wider than its axes, redrawn in as many columns as fit."""
    several = [ax for ax in fig.axes if ax.get_legend() is not None and ax.get_legend()._ncols > 1]
    if not several:
        return
    with warnings.catch_warnings():  # if the legends are too wide for the layout, the axes keep their grid's
        warnings.filterwarnings("ignore", "constrained_layout not applied")  # places, as good a measure
        fig.get_layout_engine().execute(fig)  # the axes' widths in this layout
    renderer = fig.canvas.get_renderer()
    for ax in several:
        legend = ax.get_legend()
        if legend.get_window_extent(renderer).width <= ax.bbox.width:
            continue
        handles, labels = legend.legend_handles, [text.get_text() for text in legend.get_texts()]
        options = dict(_legend_options(legend), loc=legend._loc)
        if legend._bbox_to_anchor is not None:  # a place given in display units: kept as they are
            options.update(bbox_to_anchor=legend._bbox_to_anchor, bbox_transform=IdentityTransform())
        for ncols in range(legend._ncols - 1, 0, -1):
            narrower = ax.legend(handles, labels, ncols=ncols, **options)
            if narrower.get_window_extent(renderer).width <= ax.bbox.width:
                break


def _thin_fixed_tick_labels(fig: Figure) -> None:
    """On each x axis with ticks fixed by hand (``ax.set_xticks``) whose labels would overlap in the narrower
    panel, every second (third, ...) label only; the ticks stay."""
    fixed = [ax.xaxis for ax in fig.axes if isinstance(ax.xaxis.get_major_locator(), FixedLocator)
             and ax.xaxis.get_visible() and len(ax.xaxis.get_major_locator().locs) > 2]
    if not fixed:
        return
    fig.canvas.draw()  # the labels' places in this layout
    renderer = fig.canvas.get_renderer()
    for axis in fixed:
        boxes = sorted((label.get_window_extent(renderer) for label in axis.get_majorticklabels()
                        if label.get_visible() and label.get_text()), key=lambda box: box.x0)
        step = 1
        while any(right.x0 < left.x1 + 2 for left, right in zip(boxes[::step], boxes[step::step])):
            step += 1
        if step > 1:
            locs = axis.get_major_locator().locs
            labels = axis.get_major_formatter().format_ticks(locs)
            axis.set_ticks(locs, labels=[label if k % step == 0 else "" for k, label in enumerate(labels)])


def _legends_below(fig: Figure, resize: bool = True) -> None:
    """Each figure legend redrawn under the panels, in as many columns as fit the figure's width."""
    for legend in list(fig.legends):
        handles, texts = legend.legend_handles, legend.get_texts()
        options = dict(_legend_options(legend), loc="outside lower center")
        legend.remove()
        for ncols in range(len(texts), 0, -1):
            below = fig.legend(handles, [text.get_text() for text in texts], ncols=ncols, **options)
            if ncols == 1 or below.get_window_extent(fig.canvas.get_renderer()).width <= fig.bbox.width:
                break
            below.remove()
        if resize:
            extra = below.get_window_extent(fig.canvas.get_renderer()).height / fig.dpi
            fig.set_size_inches(PHONE_WIDTH, fig.get_figheight() + extra)


def displayed_text_px(points: float, width_px: int, dpi: float, column_px: float = COLUMN_PX) -> float:
    """The CSS pixels of a text of ``points`` pt in a PNG shown at ``CSS_PX_PER_INCH``, but never wider than
    ``column_px``.

    Parameters
    ----------
    points : float
        The text's size in points.
    width_px : int
        The PNG's width in image pixels.
    dpi : float
        The resolution it was saved at.
    column_px : float, default=672
        The column's width in CSS pixels.

    Returns
    -------
    float
        The displayed size in CSS pixels.

    Examples
    --------
    >>> from attnsvm.book import plots
    >>> plots.displayed_text_px(9, 1340, 200)  # 6.7 inches at 200 dpi: shown unscaled
    12.5
    >>> round(plots.displayed_text_px(9, 2680, 200), 4)  # twice as wide: scaled down to the column
    6.2687
    """
    css_width = width_px * CSS_PX_PER_INCH / dpi
    return points * CSS_PX_PER_INCH / 72 * min(1.0, column_px / css_width)


def table(header: Sequence[object], rows: Sequence[Sequence[object]], caption: str = "") -> Markdown:
    """A table the book renders as one (cells may hold math in dollar signs), with a caption under it.

    Parameters
    ----------
    header : Sequence
        The column titles.
    rows : Sequence
        One sequence of cells per row, as many as titles.
    caption : str, default=''
        A paragraph under the table.

    Returns
    -------
    Markdown
        The table.

    Raises
    ------
    ValueError
        If a row does not have as many cells as the header.

    Examples
    --------
    >>> from attnsvm.book import plots
    >>> print(plots.table(["$d$", "error"], [[4, "1.0e-02"], [10, "5.0e-03"]]).data)
    | $d$ | error |
    | --- | --- |
    | 4 | 1.0e-02 |
    | 10 | 5.0e-03 |
    """
    header = [str(title) for title in header]
    for k, row in enumerate(rows):
        if len(row) != len(header):
            raise ValueError(f"rows[{k}] has {len(row)} cells but the header has {len(header)} columns: "
                             "give every row one cell per column")
    lines = [header, ["---"] * len(header)] + [[str(cell) for cell in row] for row in rows]
    text = "\n".join("| " + " | ".join(cells) + " |" for cells in lines)
    return Markdown(text + (f"\n\n{caption}" if caption else ""))


def svm_picture(ax: Axes, tokens: ArrayLike, alpha: int, w: ArrayLike, *, support: ArrayLike | None = None,
                color: str = PALETTE["blue"], label: str = "") -> None:
    r"""One sequence's tokens in :math:`\mathbb{R}^2` and its Att-SVM geometry, for :math:`w = W^{mm} z_i`.

    Draws the tokens (the selected one as a star; support tokens ringed), the direction of w, and the lines
    :math:`\{x : (x_\alpha - x)^\top w = c\}` for c = 0 (through the selected token), 1/2 (the max-margin
    separating line, solid) and 1 (through the support tokens).

    Parameters
    ----------
    ax : Axes
        Where to draw.
    tokens : ArrayLike
        The tokens, shape (T, 2).
    alpha : int
        The selected token.
    w : ArrayLike
        :math:`W^{mm} z_i`, shape (2,).
    support : ArrayLike or None, default=None
        The support tokens (a boolean mask (T,)).
    color : str, default='#0072B2'
        The colour.
    label : str, default=''
        The legend's label.

    Raises
    ------
    ValueError
        If tokens is not (T, 2) or w not (2,).

    Examples
    --------
    >>> import matplotlib; matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> from attnsvm.book import plots
    >>> fig, ax = plt.subplots()
    >>> plots.svm_picture(ax, [[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]], 0, [1.0, -0.5], support=[False, True, False])
    >>> len(ax.lines), len(ax.collections)  # three lines; tokens, selected token, support tokens
    (3, 3)
    >>> plt.close(fig)
    """
    tokens, w = np.asarray(tokens, dtype=float), np.asarray(w, dtype=float)
    if tokens.ndim != 2 or tokens.shape[1] != 2 or w.shape != (2,):
        raise ValueError(f"svm_picture draws d=2 only: tokens (T, 2) and w (2,), got {tokens.shape} and {w.shape}")
    others = np.arange(len(tokens)) != alpha
    ax.scatter(*tokens[others].T, s=40, color=color, marker="o", zorder=3, label=f"tokens{label}")
    ax.scatter(*tokens[alpha], s=220, color=color, marker="*", edgecolor="black", zorder=4,
               label=f"selected token{label}")
    if support is not None and np.any(support):
        ax.scatter(*tokens[np.asarray(support)].T, s=160, facecolor="none", edgecolor="black", zorder=4,
                   label=f"support tokens{label}")
    reach = 4 * np.abs(tokens).max() + 1
    for gap, style in ((0.0, ":"), (0.5, "-"), (1.0, "--")):
        line(ax, tokens[alpha] - gap * w / (w @ w), w, color=color, linestyle=style, reach=reach)
    ax.annotate("", xy=tokens[alpha] + 0.6 * w / np.linalg.norm(w), xytext=tokens[alpha],
                arrowprops=dict(arrowstyle="->", color=color, linewidth=2))
    ax.set_aspect("equal")


def line(ax: Axes, point: ArrayLike, normal: ArrayLike, *, reach: float = 100.0, color: str = PALETTE["black"],
         linestyle: str = "-", label: str | None = None) -> None:
    r"""The line through ``point`` orthogonal to ``normal`` (a separating hyperplane in :math:`\mathbb{R}^2`).

    Parameters
    ----------
    ax : Axes
        Where to draw.
    point : ArrayLike
        A point of the line, shape (2,).
    normal : ArrayLike
        Its normal, shape (2,).
    reach : float, default=100.0
        How far the line is drawn on either side of the point.
    color : str, default='#000000'
        The colour.
    linestyle : str, default='-'
        The line style.
    label : str or None, default=None
        The legend's label.

    Examples
    --------
    >>> import matplotlib; matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> from attnsvm.book import plots
    >>> fig, ax = plt.subplots()
    >>> plots.line(ax, [1.0, 0.0], [1.0, 1.0], reach=2.0)
    >>> ax.lines[0].get_xydata().round(4).tolist()
    [[2.4142, -1.4142], [-0.4142, 1.4142]]
    >>> plt.close(fig)
    """
    point, normal = np.asarray(point, dtype=float), np.asarray(normal, dtype=float)
    along = np.array([-normal[1], normal[0]]) / np.linalg.norm(normal)
    ends = point + np.outer([-reach, reach], along)
    ax.plot(*ends.T, color=color, linestyle=linestyle, linewidth=1.2, alpha=0.8, label=label)


def ray(ax: Axes, direction: ArrayLike, *, length: float = 100.0, color: str = PALETTE["black"],
        linestyle: str = "--", label: str | None = None) -> None:
    r"""The ray from the origin along ``direction`` (an SVM direction, e.g. :math:`W^{mm} z_i`, in
    :math:`\mathbb{R}^2`).

    Parameters
    ----------
    ax : Axes
        Where to draw.
    direction : ArrayLike
        The direction, shape (2,).
    length : float, default=100.0
        Its length.
    color : str, default='#000000'
        The colour.
    linestyle : str, default='--'
        The line style.
    label : str or None, default=None
        The legend's label.

    Examples
    --------
    >>> import matplotlib; matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> from attnsvm.book import plots
    >>> fig, ax = plt.subplots()
    >>> plots.ray(ax, [3.0, 4.0], length=5.0)
    >>> ax.lines[0].get_xydata().tolist()
    [[0.0, 0.0], [3.0, 4.0]]
    >>> plt.close(fig)
    """
    direction = np.asarray(direction, dtype=float)
    end = length * direction / np.linalg.norm(direction)
    ax.plot([0, end[0]], [0, end[1]], color=color, linestyle=linestyle, linewidth=1.5, label=label)


def path(ax: Axes, points: ArrayLike, *, arrow_every: int = 0, color: str = PALETTE["blue"], linestyle: str = "-",
         label: str | None = None) -> None:
    r"""A trajectory of points in :math:`\mathbb{R}^2` (e.g. :math:`W(k) z_i` or p(k)), with arrowheads.

    Parameters
    ----------
    ax : Axes
        Where to draw.
    points : ArrayLike
        The points, shape (K, 2).
    arrow_every : int, default=0
        An arrowhead every this many points (none for 0).
    color : str, default='#0072B2'
        The colour.
    linestyle : str, default='-'
        The line style.
    label : str or None, default=None
        The legend's label.

    Examples
    --------
    >>> import matplotlib; matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> from attnsvm.book import plots
    >>> fig, ax = plt.subplots()
    >>> plots.path(ax, [[0, 0], [1, 0], [1, 1], [2, 1]], arrow_every=2)
    >>> len(ax.lines), len(ax.texts)  # the trajectory and one arrowhead
    (1, 1)
    >>> plt.close(fig)
    """
    points = np.asarray(points, dtype=float)
    ax.plot(*points.T, color=color, linestyle=linestyle, label=label)
    for k in range(arrow_every, len(points), arrow_every) if arrow_every > 0 else ():
        ax.annotate("", xy=points[k], xytext=points[k - 1],
                    arrowprops=dict(arrowstyle="-|>", color=color, linewidth=1.5, mutation_scale=14))


def band(ax: Axes, x: ArrayLike, runs: ArrayLike, *, color: str | None = None, label: str | None = None,
         spread: str = "std", log: bool = False, linestyle: str = "-") -> None:
    r"""The mean over runs with a shaded band.

    With log=True the mean is geometric and the band is taken on log values (for quantities that decay over
    decades).

    Parameters
    ----------
    ax : Axes
        Where to draw.
    x : ArrayLike
        The abscissae.
    runs : ArrayLike
        The values, shape (len(x), runs).
    color : str or None, default=None
        The colour (None: the next of the palette).
    label : str or None, default=None
        The legend's label.
    spread : {'std', 'sem', 'percentile'}, default='std'
        :math:`\pm 1` standard deviation, the standard error, or the 10th-90th percentiles.
    log : bool, default=False
        Geometric mean, band on log values.
    linestyle : str, default='-'
        The mean's line style.

    Raises
    ------
    ValueError
        If spread is not supported.

    Examples
    --------
    >>> import matplotlib; matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> from attnsvm.book import plots
    >>> fig, ax = plt.subplots()
    >>> plots.band(ax, [0, 1, 2], [[1.0, 3.0], [2.0, 4.0], [3.0, 5.0]])
    >>> ax.lines[0].get_ydata().tolist(), len(ax.collections)  # the mean, and the band
    ([2.0, 3.0, 4.0], 1)
    >>> plt.close(fig)
    """
    values = np.log10(np.asarray(runs, dtype=float)) if log else np.asarray(runs, dtype=float)
    centre = values.mean(1)
    if spread == "percentile":
        low, high = np.percentile(values, [10, 90], axis=1)
    elif spread in ("std", "sem"):
        width = values.std(1) / (np.sqrt(values.shape[1]) if spread == "sem" else 1)
        low, high = centre - width, centre + width
    else:
        raise ValueError(f"spread={spread!r} is not supported: choose 'std', 'sem' or 'percentile'")
    if log:
        centre, low, high = 10**centre, 10**low, 10**high
    (drawn,) = ax.plot(x, centre, color=color, label=label, linestyle=linestyle)
    ax.fill_between(x, low, high, color=drawn.get_color(), alpha=0.2, linewidth=0)
