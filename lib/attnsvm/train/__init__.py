"""Training: gradient descent on W, (K, Q) or paper B's prompt and head (`gd`, `gd_prompt`, `gd_joint`), the
exact gradients (`weight_gradient`, `logit_gradient`), initializations and the regularization path. `gd` on W
runs a compiled loop on the CPU where it can (`supports` says when and why not)."""

from ._cpu_loop import supports
from ._descent import OFFICIAL_EPS, Trajectory, gd, gd_joint, gd_prompt, lipschitz_W, loss_gradient
from ._gradients import GRADIENTS, LogitGradient, logit_gradient, weight_gradient
from ._initial import PARAMS, initial_parameters, initial_vector, uniform_init
from ._path import MAX_RADIUS, Path, regularization_path

__all__ = ["Trajectory", "Path", "LogitGradient", "gd", "gd_prompt", "gd_joint", "loss_gradient", "lipschitz_W",
           "weight_gradient", "logit_gradient", "regularization_path", "initial_parameters", "initial_vector",
           "uniform_init", "supports", "OFFICIAL_EPS", "GRADIENTS", "PARAMS", "MAX_RADIUS"]
