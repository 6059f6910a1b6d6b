"""Interactive explorers: a figure that is drawn once statically, then redrawn live as sliders move.

In the rendered book (no Python kernel) the static figure is what the reader sees; the sliders come to life
when the chapter runs in Jupyter, Binder or Colab.
"""

from __future__ import annotations

import ipywidgets
import matplotlib.pyplot as plt
from IPython.display import display


def explorer(draw, **controls) -> None:
    """Sliders for the keyword arguments of `draw(**values)`, which draws one matplotlib figure.

    controls: name=(low, high, step, default), a tuple, for a float slider, or name=[options...], a list, for
    a dropdown (its first option is the default). The live figure appears below the sliders once one is
    moved; call `draw(**defaults)` in the cell before to show the static figure (with its caption).
    """
    sliders = {}
    for name, spec in controls.items():
        if isinstance(spec, tuple) and len(spec) == 4 and all(isinstance(v, (int, float)) for v in spec):
            low, high, step, default = spec
            if not (low < high and step > 0 and low <= default <= high):
                raise ValueError(f"control {name}={spec!r}: need low < high, step > 0 and low <= default <= high")
            sliders[name] = ipywidgets.FloatSlider(value=default, min=low, max=high, step=step, description=name,
                                                   continuous_update=False)
        elif isinstance(spec, list) and spec:
            sliders[name] = ipywidgets.Dropdown(options=spec, value=spec[0], description=name)
        else:
            raise ValueError(f"control {name}={spec!r}: pass a tuple (low, high, step, default) for a slider or a "
                             f"non-empty list of options for a dropdown")
    live = ipywidgets.Output()

    def redraw(change):
        with live:
            live.clear_output(wait=True)
            draw(**{name: widget.value for name, widget in sliders.items()})
            plt.show()

    for widget in sliders.values():
        widget.observe(redraw, names="value")
    display(ipywidgets.VBox([ipywidgets.HBox(list(sliders.values())), live]))
