"""The book's figure style: a colour-blind-safe palette, a size rule that keeps every text readable, helpers for
its recurring pictures, and its tables.

The size rule. A figure is drawn at most ``WIDTH`` inches wide (the book's text column, ``COLUMN_PX`` CSS pixels
at 100 pixels per inch) with fonts of at least 9 pt, and saved by ``png()`` at ``DPI`` (sharp on high-density
screens) with its display width stated, so that the book shows it at 100 pixels per inch. A text's size is the
size its glyphs are drawn at: mathtext draws sub- and superscripts (and the parts of a fraction) at 0.7 times the
text's size, so ``png()`` first enlarges each text whose scripts would be drawn too small (a 9-pt tick label
``10^{-2}`` becomes about 9.5 pt). It then refuses a figure whose smallest drawn text (tables' cells included) would
be displayed below ``MIN_TEXT_PX`` CSS pixels in the column (a figure wider than the column is scaled down), and
records that size in the PNG (``TEXT_KEY``), where the browser tests read it. ``use_style()`` installs ``output()``
as IPython's PNG formatter of matplotlib figures.

Phones. A figure that, scaled down to a phone's column (``PHONE_COLUMN_PX``), would show text below ``MIN_TEXT_PX``
gets a second PNG, its phone layout (``phone_layout``: ``PHONE_WIDTH`` wide, panels stacked in one column, legends
clear of the data), stored in the PNG output's metadata under ``PHONE_KEY``; the HTML book shows it in windows that
match ``PHONE_MEDIA`` (assets/sphinx/phone_figures.py). A figure that cannot be laid out so raises ValueError, never
shows cropped or misplaced.
"""

from __future__ import annotations

import base64
import functools
import io
import math
import pickle
import warnings
from collections.abc import Sequence

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
import PIL.Image
import PIL.PngImagePlugin
from IPython.display import Markdown
from matplotlib import cbook
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg, RendererAgg
from matplotlib.collections import LineCollection, PathCollection
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.layout_engine import PlaceHolderLayoutEngine
from matplotlib.legend import Legend
from matplotlib.mathtext import MathTextParser
from matplotlib.patches import ConnectionPatch
from matplotlib.path import Path
from matplotlib.table import Table
from matplotlib.text import Annotation, Text
from matplotlib.ticker import FixedFormatter, FixedLocator, MaxNLocator, NullFormatter, ScalarFormatter
from matplotlib.transforms import Bbox, IdentityTransform, ScaledTranslation, Transform, blended_transform_factory
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
TEXT_KEY = "attnsvm-min-text-pt"  # PNG text chunk: the smallest drawn text size of the figure, in points
DPI_KEY = "attnsvm-dpi"  # PNG text chunk: the DPI it was saved with
PHONE_WIDTH = 3.4  # inches: the width of a figure's phone layout (about 3.5 in saved, with its tight margin)
PHONE_COLUMN_PX = 330  # CSS pixels: a figure's room in the HTML book at a 400 px window (338 px measured, less margin)
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
    """The smallest size at which a figure draws the glyphs of its visible non-empty texts (tick labels, labels,
    titles, legends, annotations, the cells of its tables): a text's font size, or for mathtext the size of its
    smallest glyph (sub- and superscripts and the parts of a fraction are drawn at 0.7 times the text's size).

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
    >>> _ = ax.set_xlabel("step $k_1$")  # 10 pt, its subscript drawn at 7 pt
    >>> round(plots.smallest_text(fig), 6)
    7.0
    >>> plt.close(fig)
    """
    fig.canvas.draw()  # ticks and their labels exist only once drawn, a table's text is sized when drawn
    return _smallest_drawn_text(fig)[0]


_MATHTEXT = MathTextParser("path")  # lays mathtext out (cached) without drawing it
# Glyphs that mathtext sizes to what they enclose (a radical's sign, \left( ... \right)): shapes, not text to read.
_SIZED_GLYPHS = frozenset(map(ord, "√∛∜()[]{}|‖⟨⟩⌈⌉⌊⌋/\\"))


def _drawn_points(text: Text) -> float:
    """The smallest size, in points, at which ``text`` draws a glyph: its font size, or that of its smallest
    mathtext glyph (a script, the numerator of a fraction; not a radical's sign or a delimiter, which mathtext
    sizes to what they enclose)."""
    size = text.get_fontsize()
    if text.get_usetex() or "$" not in text.get_text():  # TeX lays out its own scripts: counted at the text's size
        return size
    prop = text.get_fontproperties()
    font = (tuple(prop.get_family()), prop.get_style(), prop.get_weight(), prop.get_stretch(),
            prop.get_math_fontfamily())
    return size * min([1.0] + [_smallest_glyph(*text._preprocess_math(line), font)
                               for line in text.get_text().split("\n")])


@functools.lru_cache(maxsize=4096)
def _smallest_glyph(source: str, math: bool | str, font: tuple) -> float:
    """The size of the smallest glyph of a line of mathtext, as a fraction of its font size (glyph sizes scale
    with it); 1 for a line without math."""
    if math is not True:
        return 1.0
    family, style, weight, stretch, math_family = font
    prop = FontProperties(family=list(family), style=style, weight=weight, stretch=stretch, size=10,
                          math_fontfamily=math_family)
    try:
        glyphs = _MATHTEXT.parse(source, 72, prop).glyphs
    except ValueError:  # not valid mathtext: matplotlib will say so when it draws it
        return 1.0
    return min([10.0] + [glyph[1] for glyph in glyphs if glyph[2] not in _SIZED_GLYPHS]) / 10


def _drawn_texts(fig: Figure) -> list[Text]:
    """The visible non-empty texts of a figure, the cells of its tables included (which ``findobj`` misses)."""
    texts = [text for text in fig.findobj(Text) if text.get_visible() and text.get_text().strip()]
    for table in _tables(fig):
        texts += [cell.get_text() for cell in table.get_celld().values()
                  if cell.get_visible() and cell.get_text().get_visible() and cell.get_text().get_text().strip()]
    return texts


def _tables(fig: Figure) -> list[Table]:
    return [table for ax in fig.axes for table in ax.tables]


def _smallest_drawn_text(fig: Figure) -> tuple[float, Text | None]:
    """The smallest drawn text size of a figure as it was last drawn, in points, and that text."""
    sized = [(_drawn_points(text), k, text) for k, text in enumerate(_drawn_texts(fig))]
    if not sized:
        return float("inf"), None
    points, _, text = min(sized, key=lambda item: item[:2])
    return points, text


def _needed_points(column_px: float, width_in: float) -> float:
    """The smallest drawn text size, in points, that a figure ``width_in`` inches wide (as saved) shows at
    ``MIN_TEXT_PX`` CSS px in a ``column_px`` column."""
    return MIN_TEXT_PX * 72 / CSS_PX_PER_INCH / min(1.0, column_px / (width_in * CSS_PX_PER_INCH))


def _enlarge_scripts(fig: Figure, points: float) -> None:
    """Each text whose own size is at least ``points`` but whose scripts would be drawn smaller, at the size that
    draws them at ``points`` (rounded up to 0.1 pt; tick labels through their axis, so that new ticks keep it).
    A text smaller than ``points`` itself, or a table's, stays as it is: ``png`` refuses it."""
    def size(text):  # the font size that draws text's smallest glyph at points, or None
        own, drawn = text.get_fontsize(), _drawn_points(text)
        if drawn >= points - 1e-9 or own < points - 1e-9:
            return None
        return math.ceil(own * points / drawn * 10 - 1e-6) / 10

    ticks = set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            for which in ("major", "minor"):
                if not _may_draw_mathtext(axis, which):  # its labels drawn at their size (formatting them costs)
                    continue
                labels = axis.get_majorticklabels() if which == "major" else axis.get_minorticklabels()
                ticks.update(labels)
                sizes = [size(label) for label in labels if label.get_visible() and label.get_text().strip()]
                sizes = [s for s in sizes if s is not None]
                if sizes:
                    axis.set_tick_params(which=which, labelsize=max(sizes))
    ticks.update(label for ax in fig.axes for axis in (ax.xaxis, ax.yaxis)
                 for tick in (*axis.majorTicks, *axis.minorTicks) for label in (tick.label1, tick.label2))
    cells = {cell.get_text() for table in _tables(fig) for cell in table.get_celld().values()}
    legends = {}  # a legend's entries keep one size: the largest any of them needs
    for legend in [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend() is not None)]:
        sizes = [s for s in map(size, legend.get_texts()) if s is not None]
        if sizes:
            legends.update({text: max(sizes) for text in legend.get_texts()
                            if text.get_fontsize() < max(sizes) and text.get_fontsize() >= points - 1e-9})
    for text in _drawn_texts(fig):
        if text in legends:
            text.set_fontsize(legends[text])
        elif text not in ticks and text not in cells and (new := size(text)) is not None:
            text.set_fontsize(new)


def _may_draw_mathtext(axis, which: str) -> bool:
    """Whether an axis' major or minor tick labels may be mathtext (log axes' 10^k, labels given as $...$)."""
    formatter = axis.get_major_formatter() if which == "major" else axis.get_minor_formatter()
    if isinstance(formatter, NullFormatter) or (type(formatter) is ScalarFormatter and not formatter._useMathText):
        return False
    if isinstance(formatter, FixedFormatter):
        return any("$" in str(label) for label in formatter.seq)
    return True


class _SharedMathtext(MathTextParser):
    """Matplotlib's mathtext parser of Agg renderers (``output="path"``) with one cache of layouts for every renderer
    that uses it: matplotlib gives each renderer its own parser (50 layouts), and a picture takes several renderers
    (a tight save draws at two sizes, a phone layout at the screen's and the saved resolution), so that an
    explorer's frames laid the same labels out again and again (a fifth of the time of Chapter 4's 30 frames,
    measured). A layout depends on its text, font properties, dpi, antialiasing and hinting (the cache's key) and on
    the font and mathtext rcParams (``_shared_mathtext`` keeps one parser per setting of them)."""

    if hasattr(MathTextParser, "_parse_cached"):  # matplotlib's own cache, unwrapped and made larger
        _parse_cached = functools.lru_cache(maxsize=4096)(
            getattr(MathTextParser._parse_cached, "__wrapped__", MathTextParser._parse_cached))


@functools.lru_cache(maxsize=8)
def _mathtext_for(settings: tuple) -> MathTextParser:
    return _SharedMathtext("path")


def _shared_mathtext(renderer) -> None:
    """Give an Agg renderer the shared mathtext parser of the current font and mathtext rcParams (a renderer with
    another kind of parser keeps its own)."""
    parser = getattr(renderer, "mathtext_parser", None)
    if (type(parser) is not MathTextParser or getattr(parser, "_output_type", None) != "vector"
            or "_parse_cached" not in vars(_SharedMathtext)):
        return
    settings = tuple((name, tuple(value) if isinstance(value, list) else value)
                     for name, value in mpl.rcParams.items() if name.startswith(("font.", "mathtext.")))
    renderer.mathtext_parser = _mathtext_for(settings)


class _SharedCanvas(FigureCanvasAgg):
    """An off-screen Agg canvas for figures drawn one after the other (an explorer's frames, a phone layout): the
    canvases given one ``renderers`` pool share a renderer for each size and resolution, and with it its cache of
    text sizes (tick labels, labels), and all renderers share their mathtext layouts (``_SharedMathtext``). A
    renderer is cleared before each drawing, and what one figure drew is copied out of it before the next draws
    (``_rgba``)."""

    def __init__(self, figure: Figure, renderers: dict | None = None):
        super().__init__(figure)
        self._renderers = {} if renderers is None else renderers

    def get_renderer(self):
        width, height = self.get_width_height(physical=True)
        key = width, height, self.figure.dpi
        if self._lastKey != key:
            renderer = self._renderers.pop(key, None)
            if renderer is None:
                renderer = RendererAgg(width, height, self.figure.dpi)
                _shared_mathtext(renderer)
            self._renderers[key] = renderer  # the most recent last
            while len(self._renderers) > 4:  # each holds its pixels (megabytes): the least recently used go
                del self._renderers[next(iter(self._renderers))]
            self.renderer, self._lastKey = renderer, key
        return self.renderer


def _rgba(fig: Figure, dpi: int, tight: bool) -> np.ndarray:
    """The pixels (rows, columns, RGBA) that ``fig.savefig(..., dpi=dpi, bbox_inches="tight" if tight else None)``
    draws, without encoding a PNG. A figure without a layout engine to run (none, or ``"none"``, as an explorer's
    frames and their phone layouts) is drawn once: savefig would first draw it without rendering, to run the
    layout and (when tight) measure it; its tight box is measured here, as savefig measures it, and passed on."""
    canvas = fig.canvas
    if not isinstance(canvas, FigureCanvasAgg):  # another backend's: savefig switches to Agg for the PNG
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight" if tight else None)
        return np.asarray(PIL.Image.open(buffer).convert("RGBA"))
    own = canvas.__dict__.get("get_renderer")
    if not isinstance(canvas, _SharedCanvas):  # this picture's renderers share their mathtext layouts
        def get_renderer():
            renderer = type(canvas).get_renderer(canvas)
            _shared_mathtext(renderer)
            return renderer
        canvas.get_renderer = get_renderer
    engine = fig.get_layout_engine()  # placed: no layout to run, and no axes placed by a locator (inset axes,
    placed = ((engine is None or isinstance(engine, PlaceHolderLayoutEngine))  # colorbars), which savefig would
              and not any(ax.get_axes_locator() is not None for ax in fig.axes))  # place with its renderer
    box = "tight" if tight else None
    try:
        if placed and tight and mpl.rcParams["savefig.pad_inches"] not in (None, "layout"):
            with cbook._setattr_cm(canvas, manager=None), cbook._setattr_cm(fig, dpi=dpi), \
                    cbook._setattr_cm(canvas, _device_pixel_ratio=1), cbook._setattr_cm(canvas, _is_saving=True):
                pad = mpl.rcParams["savefig.pad_inches"]
                box = fig.get_tightbbox(canvas.get_renderer()).padded(pad, pad)
        if placed:
            fig._layout_engine = None  # nothing to run: savefig draws it once
        fig.savefig(io.BytesIO(), format="rgba", dpi=dpi, bbox_inches=box)
        return np.asarray(canvas.renderer.buffer_rgba()).copy()
    finally:
        fig._layout_engine = engine
        if own is None:
            canvas.__dict__.pop("get_renderer", None)
        else:
            canvas.get_renderer = own


def _encoded(pixels: np.ndarray, dpi: int, points: float, colors: int | None) -> bytes:
    """A PNG of RGBA pixels with the text chunks ``TEXT_KEY`` (the smallest drawn text ``points``), matplotlib's
    Software and ``DPI_KEY``, as matplotlib's own PNG; with ``colors``: quantized to a palette of at most that many
    colours (no dithering: a figure's flat colours stay flat), without its resolution chunk."""
    info = PIL.PngImagePlugin.PngInfo()
    info.add_text(TEXT_KEY, f"{points:.4g}")
    info.add_text("Software", f"Matplotlib version{mpl.__version__}, https://matplotlib.org/")
    info.add_text(DPI_KEY, str(dpi))
    image = PIL.Image.frombuffer("RGBA", (pixels.shape[1], pixels.shape[0]), pixels, "raw", "RGBA", 0, 1)
    buffer = io.BytesIO()
    if colors is None:
        image.save(buffer, format="png", pnginfo=info, dpi=(dpi, dpi))
    else:
        image.quantize(colors=colors, method=PIL.Image.Quantize.FASTOCTREE,
                       dither=PIL.Image.Dither.NONE).save(buffer, format="png", pnginfo=info)
    return buffer.getvalue()


def png(fig: Figure, *, dpi: int = DPI, column_px: float = COLUMN_PX, tight: bool = True,
        colors: int | None = None) -> tuple[bytes, dict]:
    """A figure as PNG bytes and the display metadata that shows it at ``CSS_PX_PER_INCH``.

    Before saving, each text whose scripts (mathtext's sub- and superscripts, fractions) would be displayed below
    ``MIN_TEXT_PX`` in the column, though the text itself would not, is enlarged until they are not (the figure is
    changed: a 9-pt tick label ``10^{-2}`` becomes about 9.5 pt).

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
    colors : int or None, default=None
        Store it with a palette of at most this many colours, 2 to 256 (no dithering: a figure's flat colours stay
        flat), as an explorer's frames are; None: in full colour.

    Returns
    -------
    tuple
        The PNG bytes and ``{"width": CSS px}``.

    Raises
    ------
    ValueError
        If its smallest drawn text would be displayed below ``MIN_TEXT_PX`` CSS pixels in the column, or colors is
        not None or an integer from 2 to 256.

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
    >>> ax.set_yscale("log")  # tick labels 10^k: their 9-pt exponents would be drawn at 6.3 pt, 8.75 px
    >>> data, metadata = plots.png(fig)
    >>> ax.yaxis.get_majorticklabels()[0].get_fontsize()  # enlarged: exponents at 6.51 pt, 9.04 px
    9.3
    >>> plt.close(fig)
    """
    if colors is not None and (isinstance(colors, bool) or not isinstance(colors, int) or not 2 <= colors <= 256):
        raise ValueError(f"colors={colors!r}: pass None (full colour) or an integer from 2 to 256 (a palette)")
    pad = 2 * mpl.rcParams["savefig.pad_inches"] if tight else 0  # the width as saved, about (a constrained figure
    width_in = fig.get_figwidth() + pad  # fills it): where what sticks out makes it wider, another try
    for attempt in range(3):
        _enlarge_scripts(fig, _needed_points(column_px, width_in))
        pixels = _rgba(fig, dpi, tight)
        points, text = _smallest_drawn_text(fig)  # the texts as saved (drawing the figure once more costs time)
        width = pixels.shape[1]
        shown = displayed_text_px(points, width, dpi, column_px)
        if shown >= MIN_TEXT_PX or attempt == 2 or points >= text.get_fontsize():
            break
        width_in = width / dpi  # its scripts too small for the width it was saved at: enlarged for that width
    if shown < MIN_TEXT_PX:
        inches = fig.get_size_inches()
        limit = WIDTH if column_px == COLUMN_PX else PHONE_WIDTH
        scripts = " (its scripts)" if points < text.get_fontsize() else ""
        raise ValueError(f"this figure's smallest text, {text.get_text()!r}{scripts} at {points:.3g} pt, would be "
                         f"displayed at {shown:.1f} CSS px in a {column_px:g}-px column, below the {MIN_TEXT_PX} px "
                         f"the book allows: draw it at most {limit} in wide (it is {inches[0]:g} in, "
                         f"{width / dpi:.2f} in with what sticks out; stack panels in rows, keep legends inside the "
                         "axes or under them) with fonts of at least 9 pt (a table's: table.auto_set_font_size(False),"
                         " table.set_fontsize(9))")
    return _encoded(pixels, dpi, points, colors), {"width": round(width * CSS_PX_PER_INCH / dpi)}


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

    The panels (the axes of its grids, a twin with its axes, a colorbar attached to its axes) are each as tall as
    their row was; tick labels and axis labels that a shared axis had left to a neighbour are shown on every panel,
    and axis labels placed by hand (``set_label_coords``) are placed as matplotlib places them, aligned across the
    panels; a panel of fixed aspect (``ax.set_aspect``) gets the height that its box needs at the phone's width;
    texts whose scripts would be too small on a phone are enlarged (as ``png`` does); figure legends, and
    axes legends placed in figure coordinates, go under the panels; axes legends take as many columns as fit their
    axes, and one that covers drawn data (lines, markers, scatter points, bars, bands, texts) moves to a corner of
    its axes where it covers none, or else under its panel; of x ticks fixed by hand, as many labels as fit. The
    layout is the constrained layout.

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
        For a figure it cannot lay out, naming what it would misplace and the fix: axes placed by hand
        (``fig.add_axes``), a colorbar in a cell of its own, subfigures, texts or artists placed on the figure
        (``fig.text``, ``fig.add_artist``) or in figure coordinates inside an axes; or a figure that cannot be
        copied.

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
    return _phone_layout(fig, in_place=in_place)[0]


def _phone_layout(fig: Figure, *, in_place: bool, legends: bool = True,
                  like: Figure | None = None) -> tuple[Figure, bool]:
    """``phone_layout``, and whether its layout has run since its last change (a layout run costs); legends=False
    leaves the legends that cover data where they are (``aligned_phone_layouts`` places them for all its figures
    at once); ``like``: the phone layout of a figure with the same panels, whose rows' heights this one takes (an
    explorer's frames: fitted once)."""
    problems = _misplaced(fig)
    if problems:
        raise ValueError("this figure's phone layout would misplace " + "; ".join(problems))
    try:
        phone = fig if in_place else pickle.loads(pickle.dumps(fig))
    except Exception as error:
        raise ValueError(f"this figure cannot be copied for its phone layout ({error}): draw it with picklable "
                         "artists (e.g. a named function, not a lambda, in a FuncFormatter)") from error
    plt.close(phone)  # a copy of a pyplot figure is registered with pyplot: it must not be shown
    if not isinstance(phone.canvas, _SharedCanvas):  # drawn off screen, whatever the backend
        _SharedCanvas(phone)
    panels = {}
    for ax in phone.axes:  # a twin shares its axes' cell: one panel; a colorbar follows its axes (constrained)
        spec = ax.get_subplotspec()
        if spec is not None:
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
    _axis_labels_placed_automatically(phone, list(panel))
    _figure_legends_for_legends_in_figure_coordinates(phone)
    phone.set_size_inches(PHONE_WIDTH, sum(heights))
    phone.set_layout_engine("constrained")
    pad = mpl.rcParams["savefig.pad_inches"]
    _enlarge_scripts(phone, _needed_points(PHONE_COLUMN_PX, PHONE_WIDTH + 2 * pad))  # before the legends' sizes
    _legends_below(phone)
    _legends_within_their_axes(phone)
    for ax in phone.axes:  # a phone has no room beside a panel: before the rows' heights, which take its width
        if ax.get_legend() is not None and _beside(ax.get_legend()):
            height = _legend_under(ax, ax.get_legend())
            phone.set_size_inches(phone.get_figwidth(), phone.get_figheight() + height)
    if like is None:  # the rows' heights first: the tick labels' widths do not depend on them
        _rows_fitting_fixed_aspects(phone, grid, order, False)
    else:
        grid.set_height_ratios(like.axes[0].get_subplotspec().get_gridspec().get_height_ratios())
        phone.set_size_inches(*like.get_size_inches())
    laid_out = _thin_fixed_tick_labels(phone)  # whether the last layout run still holds: each costs
    if legends:
        laid_out = _legends_clear_of_data([phone], laid_out)
    return phone, laid_out


def _rows_fitting_fixed_aspects(fig: Figure, grid, rows: list[list[Axes]], laid_out: bool) -> bool:
    """Each row of ``grid`` whose panel has a fixed aspect (``ax.set_aspect``, drawn in a box of that shape inside
    its cell), as tall as the box that fills the column's width needs (at most as tall as wide, or as it was): a
    phone's narrow cell would otherwise leave a blank band above and below the box, or a box narrower than the
    column. ``laid_out``: whether the figure's layout has run since its last change; returns the same after."""
    if not any(ax.get_aspect() != "auto" and ax.get_adjustable() == "box" for axes in rows for ax in axes):
        return laid_out
    for round_ in range(6):  # the layout gives each row its ratio of what the margins leave: a few rounds converge
        if round_ or not laid_out:
            _execute_layout(fig)
        width, height = fig.get_size_inches()
        cells, changes = [], []
        for axes in rows:
            cells.append(axes[0].get_position(original=True).height * height)  # inches, as laid out
            needs = []
            for ax in axes:
                if ax.get_aspect() == "auto" or ax.get_adjustable() != "box":
                    continue
                cell, drawn = ax.get_position(original=True), ax.get_position(original=False)
                across, up = cell.width * width, cell.height * height
                filling = across * (drawn.height * height) / (drawn.width * width)  # the box as wide as the cell
                needs.append(min(filling, max(up, across)) - up)
            changes.append(max(needs, default=0.0))
        if all(abs(change) < 0.05 for change in changes):
            return True
        changes = [0.65 * change for change in changes]  # a row's ratio counts its margins too: damped, it
        grid.set_height_ratios([cell + change for cell, change in zip(cells, changes)])  # converges in a few
        fig.set_size_inches(width, height + sum(changes))
    return False


def aligned_phone_layouts(figures: Sequence[Figure]) -> list[Figure]:
    """The phone layouts (``phone_layout``, in place) of figures with the same axes, e.g. an explorer's frames, with
    each panel at one place in all of them, so that a frame does not jump: each figure's constrained layout leaves
    room for its own labels, and every panel takes the box inside all of its boxes, with room for all of them. An
    axes legend that covers data in one of them goes to the same place in all, where it covers data in none.

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
    first, laid_out = _phone_layout(figures[0], in_place=True, legends=False)  # the rows fitted once, for all
    laid = [(first, laid_out)] + [_phone_layout(figure, in_place=True, legends=False, like=first)
                                  for figure in figures[1:]]
    phones = [phone for phone, _ in laid]
    sizes = {tuple(phone.get_size_inches()) for phone in phones}  # figure legends below: as tall as the tallest
    tallest = max(sizes, key=lambda size: size[1])
    for phone in phones:
        phone.set_size_inches(*tallest)
    laid_out = len(sizes) == 1 and all(done for _, done in laid)
    if not _legends_clear_of_data(phones, laid_out):
        for phone in phones:
            _execute_layout(phone)
    boxes = [[ax.get_position().extents for ax in phone.axes] for phone in phones]  # as drawn (aspects applied)
    extents = np.asarray(boxes)  # (figures, axes, [x0, y0, x1, y1])
    inner = np.concatenate([extents[..., :2].max(0), extents[..., 2:].min(0)], axis=-1)
    for phone in phones:
        phone.set_layout_engine("none")
        for ax, (x0, y0, x1, y1) in zip(phone.axes, inner):
            ax.set_position([x0, y0, x1 - x0, y1 - y0])
    _cropped_alike(phones)
    return phones


def _cropped_alike(figures: list[Figure], pad: float = 0.05) -> None:
    """Figures laid out alike (their layout engine off) cropped alike to all that any of them draws, with ``pad``
    inches around: saved uncropped, they show no text cut off at an edge and no margin that all leave blank (a
    panel of fixed aspect leaves some), and their panels stay at one place."""
    boxes = [fig.get_tightbbox(fig.canvas.get_renderer()) for fig in figures]  # inches, as they will be drawn
    x0, y0 = min(box.x0 for box in boxes) - pad, min(box.y0 for box in boxes) - pad
    width, height = max(box.x1 for box in boxes) + pad - x0, max(box.y1 for box in boxes) + pad - y0
    for fig in figures:
        old_width, old_height = fig.get_size_inches()
        renderer = fig.canvas.get_renderer()
        for legend in fig.legends:  # its lower left corner where it was, in inches from the new corner
            box = legend.get_window_extent(renderer)
            legend.set_loc("lower left")
            legend.borderaxespad = 0
            legend.set_bbox_to_anchor((box.x0 / fig.dpi - x0, box.y0 / fig.dpi - y0), transform=fig.dpi_scale_trans)
        for text in (fig._suptitle, fig._supxlabel, fig._supylabel):
            if text is not None:
                x, y = text.get_position()  # figure fractions
                text.set_position(((x * old_width - x0) / width, (y * old_height - y0) / height))
        for ax in fig.axes:
            left, bottom, across, up = ax.get_position(original=True).bounds
            ax.set_position([(left * old_width - x0) / width, (bottom * old_height - y0) / height,
                             across * old_width / width, up * old_height / height])
        fig.set_size_inches(width, height)


def _misplaced(fig: Figure) -> list[str]:
    """What a phone layout of ``fig`` would misplace, each with its fix."""
    problems = []
    if fig.subfigs:
        problems.append("subfigures (fig.subfigures), whose panels it cannot stack: draw every panel on one grid "
                        "(plt.subplots, or fig.add_gridspec with gs[k].subgridspec for a group of panels)")
    labels = {fig._suptitle, fig._supxlabel, fig._supylabel}
    for text in fig.texts:
        if text not in labels:
            problems.append(f"the text {text.get_text()!r} placed on the figure (fig.text): put it in an axes "
                            "(ax.text, in data or axes coordinates) or a figure label (fig.suptitle, fig.supxlabel, "
                            "fig.supylabel)")
    for artist in [*fig.lines, *fig.patches, *fig.artists, *fig.images]:
        problems.append(f"{_named(artist)} added to the figure (fig.add_artist, figure coordinates): add it to an "
                        "axes instead (ax.add_artist, ax.annotate), in data or axes coordinates")
    for ax in fig.axes:
        spec = ax.get_subplotspec()
        if hasattr(ax, "_colorbar") and spec is not None:
            problems.append("a colorbar in a cell of its own (fig.colorbar with cax= a grid cell, or fig.colorbar "
                            "without the constrained layout), which would be stacked as a panel: draw the figure "
                            "with layout='constrained' and attach the colorbar to its axes, fig.colorbar(mappable, "
                            "ax=ax)")
        elif spec is None and hasattr(ax, "_colorbar") and not hasattr(ax, "_colorbar_info"):
            problems.append("a colorbar in axes placed by hand (fig.add_axes): attach it to its axes, "
                            "fig.colorbar(mappable, ax=ax), in a figure with layout='constrained'")
        elif spec is None and not hasattr(ax, "_colorbar"):
            problems.append("axes placed by hand (fig.add_axes): put every panel on a grid (plt.subplots, "
                            "fig.add_subplot)")
        for artist in [*ax.texts, *ax.lines, *ax.patches, *ax.collections, *ax.images, *ax.artists]:
            if _in_figure_coordinates(artist, fig):
                problems.append(f"{_named(artist)} in figure coordinates, which would not follow its panel: place it "
                                "in data or axes coordinates (transform=ax.transAxes, xycoords='axes fraction')")
    return list(dict.fromkeys(problems))


def _named(artist) -> str:
    if isinstance(artist, Text):
        return f"the {type(artist).__name__.lower()} {artist.get_text()!r}"
    label = artist.get_label()
    return f"a {type(artist).__name__}" + (f" {label!r}" if label and not label.startswith("_") else "")


_FIGURE_COORDINATES = ("figure ", "subfigure ")  # the prefixes of annotate's names of figure coordinates


def _in_figure_coordinates(artist, fig: Figure) -> bool:
    """Whether ``artist`` (in an axes) is placed in the figure's coordinates: its transform, or for an annotation
    or a connection its coordinates, is the figure's (fraction, pixels or points)."""
    def figure_coordinates(coords) -> bool:
        if isinstance(coords, str):
            return coords.startswith(_FIGURE_COORDINATES)
        if isinstance(coords, tuple):
            return any(figure_coordinates(part) for part in coords)
        if isinstance(coords, Transform):
            return any(coords == place or coords.contains_branch(place)
                       for place in (fig.transFigure, fig.transSubfigure, fig.dpi_scale_trans))
        return False

    if isinstance(artist, Annotation):
        return figure_coordinates(artist.xycoords) or figure_coordinates(artist.anncoords)
    if isinstance(artist, ConnectionPatch):
        return figure_coordinates(artist.coords1) or figure_coordinates(artist.coords2)
    return figure_coordinates(artist.get_transform())


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


def _axis_labels_placed_automatically(fig: Figure, panels: list[Axes]) -> None:
    """Each axis label placed by hand (``axis.set_label_coords``, for the wide layout's panels) placed as matplotlib
    places it, next to its tick labels, and the panels' labels aligned (the usual reason to place one by hand)."""
    placed = {"x": [], "y": []}
    for ax in panels:
        for axis in (ax.xaxis, ax.yaxis):
            if axis._autolabelpos:
                continue
            axis._autolabelpos = True
            x, y = axis.label.get_position()
            if axis.axis_name == "x":
                axis.label.set(transform=blended_transform_factory(ax.transAxes, IdentityTransform()), x=0.5)
            else:
                axis.label.set(transform=blended_transform_factory(IdentityTransform(), ax.transAxes), y=0.5)
            placed[axis.axis_name].append(ax)
    if placed["y"]:
        fig.align_ylabels(panels)
    if placed["x"]:
        fig.align_xlabels(panels)


def _legend_options(legend) -> dict:
    texts = legend.get_texts()
    options = dict(title=legend.get_title().get_text() or None, title_fontsize=legend.get_title().get_fontsize(),
                   fontsize=texts[0].get_fontsize() if texts else None, frameon=legend.get_frame_on())
    for name in ("borderpad", "labelspacing", "handlelength", "handleheight", "handletextpad", "borderaxespad",
                 "columnspacing", "markerscale", "numpoints", "scatterpoints"):
        options[name] = getattr(legend, name)
    return options


def _redrawn_legend(parent, legend, **changes) -> Legend:
    """``legend`` (of the axes or figure ``parent``) drawn anew with ``changes`` to its options; its texts keep
    their sizes."""
    texts = legend.get_texts()
    new = parent.legend(legend.legend_handles, [text.get_text() for text in texts],
                        **dict(_legend_options(legend), **changes))
    for old, text in zip(texts, new.get_texts()):
        text.set_fontsize(old.get_fontsize())
    return new


def _figure_legends_for_legends_in_figure_coordinates(fig: Figure) -> None:
    """Each axes legend placed in figure coordinates (``bbox_transform=fig.transFigure``), which would not follow
    its panel, made a figure legend (which ``_legends_below`` puts under the panels)."""
    for ax in fig.axes:
        legend = ax.get_legend()
        anchor = None if legend is None else legend._bbox_to_anchor
        transform = getattr(anchor, "_transform", None)
        if transform is not None and any(transform == place or transform.contains_branch(place)
                                         for place in (fig.transFigure, fig.transSubfigure)):
            legend.remove()
            _redrawn_legend(fig, legend, loc="lower center")


def _execute_layout(fig: Figure) -> None:
    """The places that drawing ``fig`` gives its axes: its layout, then each axes' aspect (``ax.set_aspect``)."""
    with warnings.catch_warnings():  # if the legends are too wide for the layout, the axes keep their grid's
        warnings.filterwarnings("ignore", "constrained_layout not applied")  # places, as good a measure
        fig.get_layout_engine().execute(fig)
    for ax in fig.axes:
        ax.apply_aspect()


def _legends_within_their_axes(fig: Figure) -> None:
    """Each axes legend in several columns that is wider than its axes, redrawn in as many columns as fit."""
    several = [ax for ax in fig.axes if ax.get_legend() is not None and ax.get_legend()._ncols > 1]
    if not several:
        return
    _execute_layout(fig)  # the axes' widths in this layout
    renderer = fig.canvas.get_renderer()
    for ax in several:
        legend = ax.get_legend()
        if legend.get_window_extent(renderer).width <= ax.bbox.width:
            continue
        options = dict(loc=legend._loc)
        if legend._bbox_to_anchor is not None:  # a place given in display units: kept as they are
            options.update(bbox_to_anchor=legend._bbox_to_anchor, bbox_transform=IdentityTransform())
        for ncols in range(legend._ncols - 1, 0, -1):
            narrower = _redrawn_legend(ax, legend, ncols=ncols, **options)
            if narrower.get_window_extent(renderer).width <= ax.bbox.width:
                break


def _thin_fixed_tick_labels(fig: Figure) -> bool:
    """On each x axis whose tick labels would overlap in the narrower panel: with ticks fixed by hand
    (``ax.set_xticks``), every second (third, ...) label only, the ticks staying; with ticks matplotlib places
    (``MaxNLocator``, the default), fewer ticks. Returns whether the layout it ran still holds (nothing changed)."""
    axes = [ax.xaxis for ax in fig.axes if ax.xaxis.get_visible()]
    fixed = [axis for axis in axes if isinstance(axis.get_major_locator(), FixedLocator)
             and len(axis.get_major_locator().locs) > 2]
    placed = [axis for axis in axes if isinstance(axis.get_major_locator(), MaxNLocator)]
    if not fixed and not placed:
        return False
    _execute_layout(fig)  # the labels' places in this layout
    renderer = fig.canvas.get_renderer()
    changed = False
    for axis in fixed:
        boxes = _tick_label_boxes(axis, renderer)
        step = 1
        while any(right.x0 < left.x1 + 2 for left, right in zip(boxes[::step], boxes[step::step])):
            step += 1
        if step > 1:
            locs = axis.get_major_locator().locs
            labels = axis.get_major_formatter().format_ticks(locs)
            axis.set_ticks(locs, labels=[label if k % step == 0 else "" for k, label in enumerate(labels)])
            changed = True
    for axis in placed:
        boxes = _tick_label_boxes(axis, renderer)
        while len(boxes) > 2 and any(right.x0 < left.x1 + 2 for left, right in zip(boxes, boxes[1:])):
            axis.get_major_locator().set_params(nbins=len(boxes) - 2)  # intervals: one fewer than the ticks shown
            changed, shown = True, len(boxes)
            boxes = _tick_label_boxes(axis, renderer)
            if len(boxes) >= shown:  # the locator gives no fewer (its steps): leave it
                break
    return not changed


def _tick_label_boxes(axis, renderer) -> list:
    """The boxes of the major tick labels an axis draws (in its view), left to right."""
    boxes = [tick.label1.get_window_extent(renderer) for tick in axis._update_ticks()  # the ticks it draws
             if tick in axis.majorTicks and tick.label1.get_visible() and tick.label1.get_text()]
    return sorted(boxes, key=lambda box: box.x0)


def _legends_below(fig: Figure, resize: bool = True) -> None:
    """Each figure legend redrawn under the panels, in as many columns as fit the figure's width."""
    for legend in list(fig.legends):
        legend.remove()
        for ncols in range(len(legend.get_texts()), 0, -1):
            below = _redrawn_legend(fig, legend, loc="outside lower center", ncols=ncols)
            if ncols == 1 or below.get_window_extent(fig.canvas.get_renderer()).width <= fig.bbox.width:
                break
            below.remove()
        if resize:
            extra = below.get_window_extent(fig.canvas.get_renderer()).height / fig.dpi
            fig.set_size_inches(PHONE_WIDTH, fig.get_figheight() + extra)


# Where a legend that covers data may go inside its axes, in the order tried: the corners, then the sides' middles.
_LEGEND_PLACES = ("upper right", "upper left", "lower left", "lower right", "upper center", "lower center",
                  "center left", "center right")


def _legends_clear_of_data(figures: list[Figure], laid_out: bool = False) -> bool:
    """Each axes legend that covers drawn data (``_covered``) in one of ``figures`` (one figure, or an explorer's
    frames: figures with the same axes), moved to the same place in all of them: the first of ``_LEGEND_PLACES``
    where it covers data in none, or else under its panel (the figures grow by its height); a legend beside its
    axes goes under its panel too. ``laid_out``: whether their layouts have run since their last change; returns
    the same after."""
    if not any(ax.get_legend() is not None for fig in figures for ax in fig.axes):
        return laid_out
    for round_ in range(3):  # a legend moved under its panel shrinks the panels: the others are looked at again
        for fig in figures if round_ or not laid_out else ():
            _execute_layout(fig)
        moved, inside = False, False
        for k in range(len(figures[0].axes)):
            axes = [fig.axes[k] for fig in figures]
            legends = [ax.get_legend() for ax in axes]
            if any(legend is None or not legend.get_visible() for legend in legends):
                continue
            beside = any(_beside(legend) for legend in legends)  # a phone has no room beside a panel
            if not beside and not any(_covered(legend) for legend in legends):
                inside = True
                continue
            moved = True
            for place in () if beside else _LEGEND_PLACES:
                for legend in legends:
                    legend.set_loc(place)
                    legend.set_bbox_to_anchor(None)
                if not any(_covered(legend) for legend in legends):
                    inside = True
                    break
            else:
                extra = max(_legend_under(ax, legend) for ax, legend in zip(axes, legends))
                for fig in figures:
                    fig.set_size_inches(fig.get_figwidth(), fig.get_figheight() + extra)
        if not moved:
            return True
        if not inside:  # no legend left inside an axes to look at again
            return False
    return False


def _panel(ax: Axes) -> list[Axes]:
    """The axes drawn in ``ax``'s box: ``ax`` and its twins."""
    return [other for other in ax.figure.axes if other is ax or ax in other._twinned_axes.get_siblings(other)]


def _legend_under(ax: Axes, legend: Legend) -> float:
    """``legend`` redrawn under ``ax``'s panel, below its x axis' labels, in as many columns as fit the axes' width;
    its height in inches."""
    fig = ax.figure
    renderer = fig.canvas.get_renderer()
    bottoms = [ax.bbox.y0] + [other.xaxis.get_tightbbox(renderer).y0 for other in _panel(ax)
                              if other.xaxis.get_visible() and other.xaxis.get_tightbbox(renderer) is not None]
    drop = (ax.bbox.y0 - min(bottoms)) / fig.dpi  # inches: the panel's x axis, under which the legend goes
    place = ax.transAxes + ScaledTranslation(0, -drop, fig.dpi_scale_trans)
    legend.remove()
    for ncols in range(len(legend.get_texts()), 0, -1):
        under = _redrawn_legend(ax, legend, loc="upper center", bbox_to_anchor=(0.5, 0.0), bbox_transform=place,
                                ncols=ncols)
        if ncols == 1 or under.get_window_extent(renderer).width <= ax.bbox.width:
            break
    return under.get_window_extent(renderer).height / fig.dpi


def _beside(legend: Legend) -> bool:
    """Whether ``legend`` is drawn to the left or right of its axes (``bbox_to_anchor=(1, 1)``)."""
    box, axes = legend.get_window_extent(legend.figure.canvas.get_renderer()), legend.axes.bbox
    return box.x0 >= axes.x1 - 1 or box.x1 <= axes.x0 + 1


def _covered(legend: Legend) -> bool:
    """Whether ``legend``, inside its axes, covers drawn data of its panel (the axes and its twins): a line or its
    markers, a scatter point, a collection's segments or polygons, a bar or another patch, an image, a text."""
    ax = legend.axes
    renderer = ax.figure.canvas.get_renderer()
    box = Bbox.intersection(legend.get_window_extent(renderer), ax.bbox)
    if box is None or box.width <= 0 or box.height <= 0:
        return False  # outside the axes: it covers no data
    points = ax.figure.dpi / 72
    for other in _panel(ax):
        for line in other.lines:
            if not line.get_visible():
                continue
            path = line.get_transform().transform_path(line.get_path())
            if line.get_linestyle() not in ("None", "", " ") and _finite(path).intersects_bbox(box, filled=False):
                return True
            if line.get_marker() not in (None, "None", "", " ") and _near(
                    path.vertices, box, line.get_markersize() / 2 * points):
                return True
        for collection in other.collections:
            if not collection.get_visible():
                continue
            if isinstance(collection, PathCollection):  # scatter: markers at offsets
                offsets = collection.get_offset_transform().transform(collection.get_offsets())
                sizes = collection.get_sizes()
                radius = (np.sqrt(sizes.max()) / 2 if len(sizes) else 3) * points
                if _near(offsets, box, radius):
                    return True
                continue
            transform, filled = collection.get_transform(), not isinstance(collection, LineCollection)
            filled = filled and len(collection.get_facecolor()) and np.any(collection.get_facecolor()[:, 3] > 0)
            if any(_finite(transform.transform_path(p)).intersects_bbox(box, filled=bool(filled))
                   for p in collection.get_paths()):
                return True
        for patch in other.patches:
            if patch.get_visible() and _finite(patch.get_transform().transform_path(patch.get_path())).intersects_bbox(
                    box, filled=patch.get_fill()):
                return True
        for artist in [*other.texts, *other.images]:
            if artist.get_visible() and Bbox.intersection(artist.get_window_extent(renderer), box) is not None:
                if not isinstance(artist, Text) or artist.get_text().strip() or getattr(artist, "arrow_patch", None):
                    return True
    return False


def _finite(path: Path) -> Path:
    """``path`` without its non-finite vertices (a NaN breaks a line there, as matplotlib draws it)."""
    vertices = path.vertices
    keep = np.isfinite(vertices).all(1)
    if keep.all():
        return path
    codes = path.codes.copy() if path.codes is not None else np.full(len(vertices), Path.LINETO, dtype=Path.code_type)
    if path.codes is None:
        codes[0] = Path.MOVETO
    after = np.concatenate([[True], ~keep[:-1]])  # a vertex after a dropped one starts a new piece
    codes[keep & after & (codes == Path.LINETO)] = Path.MOVETO
    if not keep.any():
        return Path(np.zeros((0, 2)))
    return Path(vertices[keep], codes[keep])


def _near(points: np.ndarray, box: Bbox, radius: float) -> bool:
    """Whether a marker of ``radius`` display pixels at one of ``points`` reaches into ``box``."""
    points = np.asarray(points, dtype=float).reshape(-1, 2)
    x, y = points[:, 0], points[:, 1]
    return bool(np.any((x >= box.x0 - radius) & (x <= box.x1 + radius) & (y >= box.y0 - radius)
                       & (y <= box.y1 + radius)))


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
