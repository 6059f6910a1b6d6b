"""The book's figure style: a colour-blind-safe palette, helpers for its recurring pictures, and its tables."""

from __future__ import annotations

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Markdown

# Okabe and Ito (2008), safe for the common forms of colour blindness.
PALETTE = {"blue": "#0072B2", "orange": "#E69F00", "green": "#009E73", "vermillion": "#D55E00",
           "sky": "#56B4E9", "purple": "#CC79A7", "yellow": "#F0E442", "black": "#000000"}
CYCLE = [PALETTE[name] for name in ("blue", "vermillion", "green", "orange", "purple", "sky", "black")]


def use_style() -> None:
    """Apply the book's matplotlib style (sizes, palette, no top/right spines)."""
    mpl.rcParams.update({
        "figure.figsize": (6.4, 4.0), "figure.dpi": 100, "savefig.dpi": 150, "font.size": 11,
        "axes.prop_cycle": mpl.cycler(color=CYCLE), "axes.spines.top": False, "axes.spines.right": False,
        "axes.grid": True, "grid.alpha": 0.3, "legend.frameon": False, "lines.linewidth": 2,
    })


def table(header, rows, caption: str = "") -> Markdown:
    """A table the book renders as one (cells may hold $math$), with `caption` as a paragraph under it.
    header: the column titles; rows: one sequence of cells per row, as many as titles."""
    header = [str(title) for title in header]
    for k, row in enumerate(rows):
        if len(row) != len(header):
            raise ValueError(f"rows[{k}] has {len(row)} cells but the header has {len(header)} columns: "
                             "give every row one cell per column")
    lines = [header, ["---"] * len(header)] + [[str(cell) for cell in row] for row in rows]
    text = "\n".join("| " + " | ".join(cells) + " |" for cells in lines)
    return Markdown(text + (f"\n\n{caption}" if caption else ""))


def svm_picture(ax, tokens, alpha: int, w, *, support=None, color=PALETTE["blue"], label: str = "") -> None:
    """One sequence's tokens in R^2 and its Att-SVM geometry, for w = W^mm z_i.

    Draws the tokens (the selected one as a star, support tokens ringed), the direction of w, and the
    lines {x : (x_alpha - x)^T w = c} for c = 0 (through the selected token), 1/2 (the max-margin
    separating line, solid) and 1 (through the support tokens).
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


def line(ax, point, normal, *, reach: float = 100.0, color=PALETTE["black"], linestyle="-", label=None) -> None:
    """The line through `point` orthogonal to `normal` (a separating hyperplane in R^2)."""
    point, normal = np.asarray(point, dtype=float), np.asarray(normal, dtype=float)
    along = np.array([-normal[1], normal[0]]) / np.linalg.norm(normal)
    ends = point + np.outer([-reach, reach], along)
    ax.plot(*ends.T, color=color, linestyle=linestyle, linewidth=1.2, alpha=0.8, label=label)


def ray(ax, direction, *, length: float = 100.0, color=PALETTE["black"], linestyle="--", label=None) -> None:
    """The ray from the origin along `direction` (an SVM direction, e.g. W^mm z_i, in R^2)."""
    direction = np.asarray(direction, dtype=float)
    end = length * direction / np.linalg.norm(direction)
    ax.plot([0, end[0]], [0, end[1]], color=color, linestyle=linestyle, linewidth=1.5, label=label)


def path(ax, points, *, arrow_every: int = 0, color=PALETTE["blue"], linestyle="-", label=None) -> None:
    """A trajectory of points (K, 2) in R^2 (e.g. W(k) z_i or p(k)), with an arrowhead every `arrow_every` points."""
    points = np.asarray(points, dtype=float)
    ax.plot(*points.T, color=color, linestyle=linestyle, label=label)
    for k in range(arrow_every, len(points), arrow_every) if arrow_every > 0 else ():
        ax.annotate("", xy=points[k], xytext=points[k - 1],
                    arrowprops=dict(arrowstyle="-|>", color=color, linewidth=1.5, mutation_scale=14))


def band(ax, x, runs, *, color=None, label=None, spread: str = "std", log: bool = False, linestyle="-") -> None:
    """The mean over runs (axis 1 of `runs`, shape (len(x), runs)) with a shaded band: +-1 standard deviation
    (spread="std"), the standard error ("sem") or the 10th-90th percentiles ("percentile"). With log=True the
    mean is geometric and the band is taken on log values (for quantities that decay over decades)."""
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
