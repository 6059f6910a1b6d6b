"""The book's figure style: a colour-blind-safe palette, a size rule that keeps every text readable, helpers for
its recurring pictures, and its tables.

The size rule. A figure is drawn at most ``WIDTH`` inches wide (the book's text column, ``COLUMN_PX`` CSS pixels
at 100 pixels per inch) with fonts of at least 9 pt, and saved by ``png()`` at ``DPI`` (sharp on high-density
screens) with its display width stated, so that the book shows it at 100 pixels per inch. ``png()`` refuses a
figure whose smallest text would be displayed below ``MIN_TEXT_PX`` CSS pixels in the column (a figure wider than
the column is scaled down), and records the smallest text size in the PNG (``TEXT_KEY``), where the browser tests
read it. ``use_style()`` installs ``png()`` as IPython's PNG formatter of matplotlib figures.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Markdown
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.text import Text
from numpy.typing import ArrayLike

__all__ = ["band", "displayed_text_px", "line", "path", "png", "ray", "smallest_text", "svm_picture", "table",
           "use_style", "PALETTE", "CYCLE", "WIDTH", "COLUMN_PX", "CSS_PX_PER_INCH", "MIN_TEXT_PX", "DPI", "TEXT_KEY",
           "DPI_KEY"]

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
        shell.display_formatter.formatters["image/png"].for_type(Figure, png)


def smallest_text(fig: Figure) -> float:
    """The smallest font size, in points, of the visible non-empty texts of ``fig`` (tick labels, labels, titles,
    legends, annotations); inf for a figure without text.

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
    sizes = [text.get_fontsize() for text in fig.findobj(Text)
             if text.get_visible() and text.get_text().strip()]
    return min(sizes, default=float("inf"))


def png(fig: Figure, *, dpi: int = DPI) -> tuple[bytes, dict]:
    """``fig`` as PNG bytes (tight bounding box, saved at ``dpi``) and the display metadata {"width": CSS px} that
    shows it at ``CSS_PX_PER_INCH``; raises ValueError if its smallest text would be displayed below
    ``MIN_TEXT_PX`` CSS pixels in the book's column.

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
    points = smallest_text(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight",
                metadata={TEXT_KEY: f"{points:g}", DPI_KEY: str(dpi)})
    data = buffer.getvalue()
    width = int.from_bytes(data[16:20], "big")  # the PNG header's width, in image pixels
    shown = displayed_text_px(points, width, dpi)
    if shown < MIN_TEXT_PX:
        inches = fig.get_size_inches()
        raise ValueError(f"this figure's smallest text ({points:g} pt) would be displayed at {shown:.1f} CSS px in "
                         f"the book's {COLUMN_PX}-px column, below the {MIN_TEXT_PX} px the book allows: draw it at "
                         f"most {WIDTH} in wide (it is {inches[0]:g} in; stack panels in rows) with fonts of at "
                         "least 9 pt")
    return data, {"width": round(width * CSS_PX_PER_INCH / dpi)}


def displayed_text_px(points: float, width_px: int, dpi: float, column_px: float = COLUMN_PX) -> float:
    """CSS pixels of a ``points``-pt text in a PNG of ``width_px`` image pixels saved at ``dpi``, shown at
    ``CSS_PX_PER_INCH`` but never wider than ``column_px``.

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
    """A table the book renders as one (cells may hold math in dollar signs), with ``caption`` as a paragraph
    under it.
    header: the column titles; rows: one sequence of cells per row, as many as titles.

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
    """One sequence's tokens in R^2 and its Att-SVM geometry, for w = W^mm z_i.

    Draws the tokens (the selected one, index ``alpha``, as a star; support tokens ringed), the direction of
    w, and the lines {x : (x_alpha - x)^T w = c} for c = 0 (through the selected token), 1/2 (the max-margin
    separating line, solid) and 1 (through the support tokens).

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
    """The line through ``point`` orthogonal to ``normal`` (a separating hyperplane in R^2), drawn ``reach``
    either side of the point.

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
    """The ray from the origin along ``direction`` (an SVM direction, e.g. W^mm z_i, in R^2), ``length`` long.

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
    """A trajectory of points (K, 2) in R^2 (e.g. W(k) z_i or p(k)), with an arrowhead every ``arrow_every``
    points (none for 0).

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
    """The mean over runs (axis 1 of ``runs``, shape (len(x), runs)) with a shaded band: +-1 standard deviation
    (spread="std"), the standard error ("sem") or the 10th-90th percentiles ("percentile"). With log=True the
    mean is geometric and the band is taken on log values (for quantities that decay over decades).

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
