"""Training: gradient descent on W, (K, Q) or paper B's prompt and head (``gd``, ``gd_prompt``, ``gd_joint``), the
exact gradients (``loss_gradient``, ``weight_gradient``, ``logit_gradient``), initializations and the
regularization path. ``gd`` on W or (K, Q) runs a compiled loop on the CPU where it can (``why_not_compiled`` says where
not). The loss is named by the argument ``loss`` everywhere (a name of ``model.LOSSES``).

Examples
--------
>>> from attnsvm import data, train
>>> problem = data.random_problem(n=2, T=3, d=2, seed=0)
>>> run = train.gd(problem, steps=100, lr=0.5, record_every=100)
>>> run.steps.tolist(), train.loss_gradient(problem, run.W[-1], loss="logistic").shape
([0, 100], torch.Size([2, 2]))
"""

from ._cpu_loop import why_not_compiled
from ._diagonal import diagonal_gd
from ._flow import FLOW_PARAMS, Flow, gradient_flow
from ._descent import OFFICIAL_EPS, Trajectory, gd, gd_joint, gd_prompt, lipschitz_W, loss_gradient
from ._gradients import GRADIENTS, LogitGradient, logit_gradient, weight_gradient
from ._initial import PARAMS, initial_parameters, initial_vector, uniform_init
from ._mirror import dual_norm, mirror_descent, sign_descent
from ._path import MAX_RADIUS, Path, regularization_path
from ._rates import Fit, fit_line
from ._step_sizes import POLYAK_GRADIENTS, log_attention_gap, log_loss_gap, optimal_loss, polyak

__all__ = ["Trajectory", "Path", "LogitGradient", "gd", "gd_prompt", "gd_joint", "loss_gradient", "lipschitz_W",
           "weight_gradient", "logit_gradient", "regularization_path", "initial_parameters", "initial_vector",
           "uniform_init", "why_not_compiled", "OFFICIAL_EPS", "GRADIENTS", "PARAMS", "MAX_RADIUS",
           "mirror_descent", "sign_descent", "dual_norm",
           "diagonal_gd", "gradient_flow", "Flow", "FLOW_PARAMS",
           "polyak", "optimal_loss", "log_loss_gap", "log_attention_gap", "fit_line", "Fit", "POLYAK_GRADIENTS"]
