"""The papers' experiments that need more than one call of the library: ``relu_head`` (paper A's ReLU-head
experiment with several relevant tokens, and its run filter) and ``svm_rank`` (paper A's rank of the Att-SVM
solution).

Their grids (``svm_rank.grid``, ``relu_head.search``) are independent tasks run through joblib: in this process,
in worker processes (``workers=k``) or on a Dask cluster (``joblib.parallel_config(backend="dask")``), with the
same numbers bit for bit (each task sets ``attnsvm.setup()``'s numerics itself)."""

from . import relu_head, svm_rank

__all__ = ["relu_head", "svm_rank"]
