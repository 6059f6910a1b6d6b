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
