"""The book's figure style: a colour-blind-safe palette and helpers for its recurring pictures."""

from __future__ import annotations

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np

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
    unit = w / np.linalg.norm(w)
    normal = np.array([-unit[1], unit[0]])
    reach = 4 * np.abs(tokens).max() + 1
    for gap, style in ((0.0, ":"), (0.5, "-"), (1.0, "--")):
        anchor = tokens[alpha] - gap * w / (w @ w)
        ends = anchor + np.outer([-reach, reach], normal)
        ax.plot(*ends.T, color=color, linestyle=style, linewidth=1.2, alpha=0.8)
    ax.annotate("", xy=tokens[alpha] + 0.6 * unit, xytext=tokens[alpha],
                arrowprops=dict(arrowstyle="->", color=color, linewidth=2))
    ax.set_aspect("equal")
