"""Explorers: a figure drawn in advance for every combination of a few parameter values, embedded in the page as
frames with one slider per parameter. They move in the static HTML book (no Python kernel, no network) as in
Jupyter; for values between the frames, call the chapter's ``draw(...)`` in a running notebook. Where the frames
need one on a phone (``plots.fits_phone``), each frame has a phone layout too, shown in windows that match
``plots.PHONE_MEDIA``, at twice the display resolution (phones' screens have two or three device pixels per CSS
pixel). Every frame is stored with a palette of at most ``FRAME_COLORS`` colours, which keeps the page small (a
phone frame at 2x weighs less than an unquantized one at 1x). The frames are drawn one after the other on off-screen
canvases that share renderers and mathtext layouts (``plots._SharedCanvas``), each picture drawn once and quantized
from its pixels (``plots.png`` with ``colors``): the bytes of each figure drawn alone, in about half the time
(tests/lib/test_frame_rendering.py).
"""

from __future__ import annotations

import base64
import hashlib
import html
import itertools
import json
from collections.abc import Callable, Sequence
from numbers import Real

import matplotlib.pyplot as plt
from IPython.display import display
from matplotlib.figure import Figure

from . import plots

__all__ = ["explorer", "frames", "MAX_FRAMES", "FRAME_DPI", "PHONE_FRAME_DPI", "FRAME_COLORS"]

MAX_FRAMES = 64  # frames per explorer: each is a PNG stored in the notebook and the page
FRAME_DPI = 100  # frames are saved at the display resolution (the static figure above is the sharp one)
PHONE_FRAME_DPI = 200  # phone frames at twice the display resolution (shown with srcset "2x")
FRAME_COLORS = 256  # the palette of a stored frame (lines, text and their anti-aliasing need far fewer)

_SCRIPT = """<script>
(function () {
  var root = document.getElementById("%(id)s");
  var spec = JSON.parse(root.querySelector("script[type='application/json']").textContent);
  var inputs = root.querySelectorAll("input"), outputs = root.querySelectorAll("output");
  var image = root.querySelector("img"), phone = root.querySelector("source");
  function update() {
    var index = 0, words = [];
    inputs.forEach(function (input, k) {
      var position = Number(input.value);
      index += spec.strides[k] * spec.order[k][position];
      outputs[k].textContent = spec.labels[k][position];
      words.push(spec.names[k] + " = " + spec.labels[k][position]);
    });
    image.src = "data:image/png;base64," + spec.frames[index];
    if (phone) phone.srcset = "data:image/png;base64," + spec.phone[index] + " 2x";
    image.alt = spec.alt + " " + words.join(", ") + ".";
  }
  inputs.forEach(function (input) { input.addEventListener("input", update); });
})();
</script>"""


def _values(name: str, spec) -> list:
    if not isinstance(spec, (list, tuple)) or len(spec) < 2:
        raise ValueError(f"control {name}={spec!r}: pass a list of at least two values, the first one the default "
                         f"(e.g. {name}=[1.0, 0.5, 2.0])")
    if len(set(map(repr, spec))) != len(spec):
        raise ValueError(f"control {name}={spec!r} repeats a value: list each value once")
    return list(spec)


def _slider_order(values: list) -> list[int]:
    """The values' indices in slider order: ascending for numbers, as given otherwise."""
    if all(isinstance(v, Real) and not isinstance(v, bool) for v in values):
        return sorted(range(len(values)), key=lambda k: values[k])
    return list(range(len(values)))


def _base64(pngs: list[bytes]) -> list[str]:
    return [base64.b64encode(data).decode("ascii") for data in pngs]


def _label(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def frames(draw: Callable[..., Figure | None], **controls: Sequence[object]
           ) -> tuple[list[str], list[list], list[str] | None]:
    """Draw ``draw(**values)`` for every combination of the controls' values (the last control varying fastest).

    Parameters
    ----------
    draw : Callable
        Draws one figure from keyword arguments.
    **controls : Sequence
        name=[values...], as in ``explorer``.

    Returns
    -------
    tuple
        The frames (base64 PNGs, ``plots.png`` at ``FRAME_DPI``, so the size rule holds, with a palette of
        ``FRAME_COLORS``), the value lists and the frames' phone layouts (``plots.aligned_phone_layouts``, at
        ``PHONE_FRAME_DPI``, likewise; None where no frame needs one).

    Raises
    ------
    ValueError
        If there is no control, a control has fewer than two values or repeats one, the controls make more than
        ``MAX_FRAMES`` frames, or two frames that differ in one control's value are identical (that control would
        change no pixel).

    Examples
    --------
    >>> import matplotlib; matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> from attnsvm.book import widgets
    >>> def draw(slope):
    ...     fig, ax = plt.subplots(figsize=(3, 2))
    ...     ax.plot([0, 1], [0, slope])
    ...     return fig
    >>> images, values, phone = widgets.frames(draw, slope=[1.0, 2.0])
    >>> len(images), values, phone  # 3 inches wide: no phone layout needed
    (2, [[1.0, 2.0]], None)
    """
    if not controls:
        raise ValueError("explorer needs at least one control, e.g. log2_R=[6.0, 5.0, 4.0]")
    names, grids = list(controls), [_values(name, spec) for name, spec in controls.items()]
    count = 1
    for grid in grids:
        count *= len(grid)
    if count > MAX_FRAMES:
        raise ValueError(f"the controls make {count} frames, more than {MAX_FRAMES}: give fewer values")
    images, figures, renderers = [], [], {}
    for combination in itertools.product(*grids):
        figure = draw(**dict(zip(names, combination)))
        figure = figure if isinstance(figure, Figure) else plt.gcf()
        plt.close(figure)  # closed for pyplot, kept for its phone layout below
        plots._SharedCanvas(figure, renderers)  # drawn off screen, one after the other: they share renderers
        images.append(plots.png(figure, dpi=FRAME_DPI, colors=FRAME_COLORS)[0])
        figures.append(figure)
    strides = [1] * len(grids)
    for k in range(len(grids) - 2, -1, -1):
        strides[k] = strides[k + 1] * len(grids[k + 1])
    for k, (name, grid) in enumerate(zip(names, grids)):
        for index in range(count):
            position = (index // strides[k]) % len(grid)
            if position and images[index] == images[index - strides[k]]:
                others = {n: _label(g[(index // s) % len(g)]) for n, g, s in zip(names, grids, strides) if n != name}
                raise ValueError(f"control {name} changes no pixel between {_label(grid[position - 1])} and "
                                 f"{_label(grid[position])} (at {others}): drop one of those values")
    phones = None
    if not all(plots.fits_phone(data, FRAME_DPI) for data in images):  # then every frame has a phone layout,
        phones = [plots.png(phone, dpi=PHONE_FRAME_DPI, column_px=plots.PHONE_COLUMN_PX, tight=False,
                            colors=FRAME_COLORS)[0]
                  for phone in plots.aligned_phone_layouts(figures)]  # cropped alike: saved as they are
    return _base64(images), grids, None if phones is None else _base64(phones)


def explorer(draw: Callable[..., Figure | None], **controls: Sequence[object]) -> None:
    """Display an explorer of ``draw(**values)``, which draws one matplotlib figure (and may return it).

    Numeric values are put on the slider in ascending order, others in the order given. Every combination is drawn
    in advance (at most ``MAX_FRAMES``), so keep the lists short.

    Parameters
    ----------
    draw : Callable
        Draws one figure from keyword arguments.
    **controls : Sequence
        name=[values...], the first value the default (the static figure shown above the explorer).

    Raises
    ------
    ValueError
        As ``frames`` does.

    Examples
    --------
    >>> import matplotlib; matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> from attnsvm.book import widgets
    >>> def draw(slope):
    ...     fig, ax = plt.subplots(figsize=(3, 2))
    ...     ax.plot([0, 1], [0, slope])
    ...     return fig
    >>> widgets.explorer(draw, slope=[1.0, 2.0])  # outside IPython, the page's HTML is printed
    {'text/html': '<div class="attnsvm-explorer" id="explorer-...', 'text/plain': 'Explorer: 2 precomputed frames ...'}
    """
    images, grids, phones = frames(draw, **controls)
    names = list(controls)
    orders = [_slider_order(grid) for grid in grids]
    strides = [1] * len(grids)
    for k in range(len(grids) - 2, -1, -1):
        strides[k] = strides[k + 1] * len(grids[k + 1])
    digest = hashlib.sha256("".join(images).encode()).hexdigest()[:12]
    spec = {"names": names, "strides": strides, "order": orders, "frames": images,
            "labels": [[_label(grid[k]) for k in order] for grid, order in zip(grids, orders)],
            "alt": "The figure above redrawn at"}
    if phones is not None:
        spec["phone"] = phones
    phone = (f'<source media="{plots.PHONE_MEDIA}" srcset="data:image/png;base64,{phones[0]} 2x">'
             if phones is not None else "")
    rows = []
    for name, grid, order in zip(names, grids, orders):
        start = order.index(0)
        rows.append(f'<label class="attnsvm-explorer-control">{html.escape(name)} '
                    f'<input type="range" min="0" max="{len(grid) - 1}" step="1" value="{start}" '
                    f'aria-label="{html.escape(name)}"> <output>{html.escape(_label(grid[0]))}</output></label>')
    defaults = ", ".join(f"{name} = {_label(grid[0])}" for name, grid in zip(names, grids))
    payload = json.dumps(spec).replace("</", "<\\/")  # nothing in it may close the script element
    markup = (f'<div class="attnsvm-explorer" id="explorer-{digest}">'
              f'<div class="attnsvm-explorer-controls">{"".join(rows)}</div>'
              f'<picture>{phone}<img src="data:image/png;base64,{images[0]}" '
              f'alt="{spec["alt"]} {html.escape(defaults)}."></picture>'
              f'<script type="application/json">{payload}</script></div>'
              + _SCRIPT % {"id": f"explorer-{digest}"})
    text = (f"Explorer: {len(images)} precomputed frames of the figure above, one slider per parameter "
            f"({', '.join(names)}); move the sliders in the HTML book or a running notebook.")
    display({"text/html": markup, "text/plain": text}, raw=True)
