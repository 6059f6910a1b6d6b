"""Straightforward numpy formulas the tests compare the library against."""

import numpy as np


def off_alpha(alpha, T):
    """Boolean mask (..., n, T) of the tokens that are not selected."""
    mask = np.ones(alpha.shape + (T,), dtype=bool)
    np.put_along_axis(mask, alpha[..., None], False, axis=-1)
    return mask


def margins(X, Z, alpha, W):
    """(x_{i alpha_i} - x_it)^T W z_i for every token, (..., n, T)."""
    logits = np.einsum("...ntd,...de,...ne->...nt", X, W, Z)
    return np.take_along_axis(logits, alpha[..., None], axis=-1) - logits


def combination(lam, X, Z, alpha):
    """sum_it lam_it (x_{i alpha_i} - x_it) z_i^T."""
    chosen = np.take_along_axis(X, alpha[..., None, None], axis=-2)
    return np.einsum("...nt,...ntd,...ne->...de", lam, chosen - X, Z)
