"""The book's own helpers, not the science's: figure style and tables (``plots``), offline explorers
(``widgets``), exercise self-checks (``exercises``). They need the ``book`` extra (matplotlib, IPython) and load
on first use."""

from importlib import import_module as _import_module

__all__ = ["exercises", "plots", "schematics", "widgets"]


def __getattr__(name: str):
    if name in __all__:
        return _import_module(f".{name}", __name__)
    raise AttributeError(f"module 'attnsvm.book' has no attribute {name!r}")
