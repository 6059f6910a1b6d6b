"""Prediction heads h: R^d -> R applied to the attention output a_i = X_i^T s_i, so that f(X_i) = h(a_i).

The linear head h(a) = v^T a is the theory's main case (it is the problem's `v` when no head is given).
Nonlinear heads make attention mix several tokens (Chapter 5). Each head gives its value and its gradient
with respect to a, batched over (..., n, d).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .checks import as_tensor, nonnegative_float, positive_float


class _Head:
    """A head's value and gradient at a (..., n, d), computed together (they may share work)."""

    def value_and_gradient(self, a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.value(a), self.gradient(a)


@dataclass(frozen=True)
class Linear(_Head):
    """h(a) = v^T a."""

    v: torch.Tensor  # (..., d)

    def value(self, a: torch.Tensor) -> torch.Tensor:
        return (a * self.v[..., None, :]).sum(-1)

    def gradient(self, a: torch.Tensor) -> torch.Tensor:
        return self.v[..., None, :].expand(a.shape)


@dataclass(frozen=True)
class ReLU(_Head):
    """h(a) = 1^T ReLU(V^T a): a one-hidden-layer ReLU network with fixed weights V (..., d, k) (paper A's
    `relu` head, with V Gaussian scaled to ||V||_F = 1)."""

    V: torch.Tensor

    def __post_init__(self):
        object.__setattr__(self, "V", as_tensor(self.V, "V"))

    def value(self, a: torch.Tensor) -> torch.Tensor:
        return torch.relu(a @ self.V).sum(-1)

    def gradient(self, a: torch.Tensor) -> torch.Tensor:
        return self.value_and_gradient(a)[1]

    def value_and_gradient(self, a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = a @ self.V  # (..., n, k)
        return torch.relu(hidden).sum(-1), (hidden > 0).to(a.dtype) @ self.V.transpose(-2, -1)


@dataclass(frozen=True)
class Lambda(_Head):
    """h(a) = v^T a - lam ||a||^2 (paper A's `lambda` head): the penalty rewards averaging several tokens.

    lam: a number >= 0, or a tensor of them, one per problem, broadcast against the batch shape of `a` without
    its (n, d) (e.g. shape (L, 1) for L values of lam, each on the same batch of problems)."""

    v: torch.Tensor
    lam: float | torch.Tensor

    def __post_init__(self):
        object.__setattr__(self, "v", as_tensor(self.v, "v"))
        if isinstance(self.lam, torch.Tensor) and self.lam.ndim:
            lam = as_tensor(self.lam, "lam")
            if not (torch.isfinite(lam).all() and (lam >= 0).all()):
                raise ValueError(f"lam must hold finite numbers >= 0, got {lam}")
        else:
            lam = nonnegative_float(self.lam, "lam")
        object.__setattr__(self, "lam", lam)

    def _lam(self, extra: int):
        return self.lam[(...,) + (None,) * extra] if isinstance(self.lam, torch.Tensor) else self.lam

    def value(self, a: torch.Tensor) -> torch.Tensor:
        return (a * self.v[..., None, :]).sum(-1) - self._lam(1) * (a * a).sum(-1)

    def gradient(self, a: torch.Tensor) -> torch.Tensor:
        return self.v[..., None, :] - 2 * self._lam(2) * a


def random_relu(d: int, *, seed: int, batch: int | None = None) -> ReLU:
    """Paper A's ReLU head: V Gaussian (d, d), scaled to unit Frobenius norm, one per problem of the batch."""
    gen = torch.Generator().manual_seed(int(seed))
    V = torch.randn(((batch,) if batch else ()) + (d, d), generator=gen, dtype=torch.float64)
    return ReLU(V / V.norm(dim=(-2, -1), keepdim=True))


def lambda_threshold(values, lam: float) -> torch.Tensor:
    """The water level theta (...,) of the lambda-head's optimum on orthonormal tokens: the number with
    sum_t max(u_t - theta, 0) = 2 lam (Chapter 5). values: u (..., T); lam > 0. The kept tokens are those with
    u_t > theta."""
    u = as_tensor(values, "values")
    lam = positive_float(lam, "lam")
    top = u.sort(-1, descending=True).values
    k = torch.arange(1, u.shape[-1] + 1, dtype=u.dtype)
    thetas = (top.cumsum(-1) - 2 * lam) / k  # the level if the k largest values are kept
    kept = (top > thetas).sum(-1, keepdim=True)  # they are, for k = 1..kept
    return thetas.gather(-1, kept - 1)[..., 0]


def lambda_optimum(values, lam: float) -> torch.Tensor:
    """The attention that maximizes the lambda-head on orthonormal tokens: argmax over the simplex of
    sum_t s_t u_t - lam ||s||^2, i.e. s_t = max(u_t - theta, 0) / (2 lam) with theta = `lambda_threshold`
    ("water filling"; Chapter 5). values: u (..., T). lam = 0 gives the top token (a linear head)."""
    u = as_tensor(values, "values")
    if float(lam) == 0:
        return torch.nn.functional.one_hot(u.argmax(-1), u.shape[-1]).to(u.dtype)
    lam = positive_float(lam, "lam")
    return torch.clamp(u - lambda_threshold(u, lam)[..., None], min=0) / (2 * lam)
