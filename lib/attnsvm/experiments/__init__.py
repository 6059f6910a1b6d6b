"""The papers' experiments that need more than one call of the library: `relu_head` (paper A's ReLU-head
experiment with several relevant tokens, and its run filter) and `svm_rank` (paper A's rank of the Att-SVM
solution)."""

from . import relu_head, svm_rank

__all__ = ["relu_head", "svm_rank"]
