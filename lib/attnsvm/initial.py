"""Initial parameters for gradient descent and the regularization path."""

from __future__ import annotations

import numpy as np
import torch

from .checks import as_tensor, choice, require_shape
from .data import Problem


def uniform_init(shape: tuple, seed: int, device=None) -> torch.Tensor:
    """Entries uniform in [-1/sqrt(d), 1/sqrt(d)] (torch.nn.Linear's default), d = shape[-2]."""
    gen = torch.Generator().manual_seed(int(seed))
    bound = 1.0 / np.sqrt(shape[-2])
    return ((torch.rand(shape, generator=gen, dtype=torch.float64) * 2 - 1) * bound).to(device)


def initial_parameters(problem: Problem, param: str, init, m: int, seed: int):
    """The initial parameters: a tuple (W,) or (K, Q), each of shape (..., d, d) or (..., d, m)."""
    batch, d, device = problem.batch_shape, problem.d, problem.X.device
    if init is None:
        init = "zeros" if param == "W" else "uniform"
    if isinstance(init, str):
        choice(init, "init", ("zeros", "uniform"))
        if param == "W":
            zeros = torch.zeros(batch + (d, d), dtype=torch.float64, device=device)
            return (zeros if init == "zeros" else uniform_init(batch + (d, d), seed, device),)
        if init == "zeros":
            raise ValueError('init="zeros" is a saddle point of the (K, Q) parameterization (zero gradient): '
                             'use init="uniform" or pass (K0, Q0)')
        return uniform_init(batch + (d, m), seed, device), uniform_init(batch + (d, m), seed + 1, device)
    if param == "W":
        W0 = as_tensor(init, "init", device=device)
        require_shape(W0, "init", batch + (d, d), "an initial W for every problem")
        return (W0,)
    if not (isinstance(init, (tuple, list)) and len(init) == 2):
        raise ValueError('init for param="KQ" must be "uniform" or a pair (K0, Q0) of (..., d, m) arrays')
    K0, Q0 = (as_tensor(value, name, device=device) for value, name in zip(init, ("init[0] (K0)", "init[1] (Q0)")))
    require_shape(K0, "init[0] (K0)", batch + (d, K0.shape[-1]), "the initial key matrix K, (..., d, m)")
    require_shape(Q0, "init[1] (Q0)", tuple(K0.shape), "the initial query matrix Q, the same shape as K0")
    return K0, Q0


def initial_vector(value, name: str, batch: tuple, d: int, device) -> torch.Tensor:
    """An initial vector (d,) shared by all problems, or one per problem (..., d)."""
    vector = as_tensor(value, name, device=device)
    if tuple(vector.shape) not in ((d,), batch + (d,)):
        raise ValueError(f"{name} must have shape ({d},) or {batch + (d,)} (one vector per problem), "
                         f"got {tuple(vector.shape)}")
    return vector.expand(batch + (d,)).clone()
