"""Planted faults: does the book catch a wrong library? (`make faults`)

Each fault below is a small, realistic bug planted in the library `attnsvm` by a monkeypatch, without editing
lib/. For each fault the book's chapters are executed (copies of book/*.ipynb in a temporary directory, never the
notebooks themselves), or a named library test is run, with the fault installed; the fault is *caught* when a
chapter's `assert` fails (or the chapter stops on a clear library error, a ValueError-type exception), or when
the named test fails. The table lists what caught each fault, and the catch rate; the exit status is non-zero if
a fault went uncaught (or if a chapter fails without any fault: then nothing it reports can be trusted).

How a fault gets into the kernel: the kernel (and every process it spawns: `ranks.grid` uses worker processes)
starts with ATTNSVM_FAULT=<name> and, on PYTHONPATH, a directory holding a `sitecustomize.py` that loads this
file and puts an import hook in front of `import attnsvm`: right after the package has imported its modules,
`install(name)` rebinds the faulty function everywhere it is bound (a module that did `from .x import f` holds
its own reference). Faults in the gradient also replace the compiled Numba loop (`compiled.gd`, which computes
the gradient itself) by the torch loop of `train.gd`, so that every gradient descent run goes through the
faulty Python code. A fault inside a compiled loop is planted in its source instead (`recompile`): the function
and its compiled callers are compiled anew, without Numba's disk cache, so no stale cache is left behind. Each
process the fault reaches appends a line to the file ATTNSVM_FAULT_MARK, and a run in which the fault was never
installed is reported as an error, not as "not caught".

The torch loop is not batch-invariant to the last bit (the compiled loop is), so a chapter that re-runs a subset
of a batch and asserts identical iterates can fail under the torch loop alone. A fault that needs the torch loop
is therefore checked cell by cell against a control run of the chapter in the torch loop without any fault: the
chapter catches the fault at the first cell that fails under the fault and not under the control.

For each fault, the chapters and tests expected to catch it run first, one after the other, stopping at the
first catch; if none does, every other chapter runs, so that "not caught" means that no chapter caught it.
Two faults run at a time (the machine has two cores).

    python tools/faults.py                  # every fault
    python tools/faults.py --fault NAME     # one fault (repeatable)
    python tools/faults.py --list           # the faults, what each models and where it should be caught
    python tools/faults.py --no-baseline    # skip the clean runs (faster; a catch is then unverified)

Every chapter that catches a fault is also executed once without any fault, through the same harness, up to the
last cell at which it caught one (the baseline): a catch counts only if the chapter passes there without the fault.

Only the standard library is imported at the top: `sitecustomize` loads this file in every Python process
started with the fault's environment.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = ("00_introduction", "prelude", "prelude_gd", "prelude_ngd", "01_preliminaries", "02_regularization_path",
            "02r_path_experiments", "03_global_convergence", "03b_central_theorem", "03r_global_experiments",
            "04_local_convergence", "04r_local_experiments", "05_nonlinear_heads", "05r_nonlinear_experiments",
            "06_causal_attention", "06r_causal_experiments", "07_tensor_lipschitz", "07r_lipschitz_experiments",
            "08_mirror_descent", "09_rates", "10_next_token", "11_low_rank", "12_open_problems")
CLEAR_ERRORS = {"AssertionError", "ValueError", "InfeasibleSVM", "SolverError", "FloatingPointError"}
CELL_TIMEOUT = 600  # seconds per cell
CHAPTER_TIMEOUT = 420  # seconds per chapter (the budget is 60 s; a fault may slow a chapter down, not this much)
TEST_TIMEOUT = 300


# ================================================================== the faults

@dataclass(frozen=True)
class Fault:
    name: str
    install: callable
    catchers: tuple  # chapter stems or pytest node ids, tried first, in this order
    control: str = "none"  # the fault-free run a catch is checked against (the baseline)
    is_control: bool = False

    @property
    def doc(self) -> str:
        return " ".join((self.install.__doc__ or "").split())


FAULTS: dict[str, Fault] = {}


def fault(*catchers, control: str = "none", is_control: bool = False):
    """Register a fault: the decorated function installs it (attnsvm is imported); `catchers`: where it should
    be caught, chapter stems ("03_global_convergence") or pytest node ids ("tests/lib/test_svm.py::test_x").
    control: the fault-free variant that a chapter catching the fault must pass ("none": the library as it is;
    "torch_loop": the compiled engine replaced by the torch loop, for the faults that need that replacement)."""
    def register(function):
        FAULTS[function.__name__] = Fault(function.__name__, function, catchers, control, is_control)
        return function
    return register


def _modules():
    return [module for name, module in list(sys.modules.items())
            if module is not None and (name == "attnsvm" or name.startswith("attnsvm."))]


def rebind(original, replacement) -> None:
    """Replace `original` by `replacement` wherever a module of attnsvm binds it (by identity)."""
    count = 0
    for module in _modules():
        for key, value in list(vars(module).items()):
            if value is original:
                setattr(module, key, replacement)
                count += 1
    if not count:
        raise RuntimeError(f"{original!r} is bound nowhere in attnsvm: the fault would change nothing")


def patch(module, name: str, make):
    """Rebind module.name to make(original) everywhere; returns the original."""
    original = getattr(module, name)
    rebind(original, make(original))
    return original


def recompile(module, name: str, old: str, new: str, callers: tuple = ()) -> None:
    """Plant a fault in the compiled (Numba) function module.name: its source with `old` (found exactly once)
    replaced by `new`, compiled anew; then each compiled function in `callers` (innermost first) compiled anew
    from its own source, since a compiled function binds its callees when it compiles and its cached machine code
    holds the original. None of them uses Numba's disk cache: the fault leaves nothing in __pycache__."""
    import inspect
    import linecache

    import numba
    original = getattr(module, name)
    source = inspect.getsource(original.py_func)
    if source.count(old) != 1:
        raise RuntimeError(f"{old!r} occurs {source.count(old)} times in {module.__name__}.{name}, not once")
    source = source[re.search(r"^def ", source, re.M).start():].replace(old, new)  # without its decorator
    filename = f"<fault {old!r} -> {new!r} in {module.__name__}.{name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)  # for a later fault
    namespace = dict(vars(module))
    exec(compile(source, filename, "exec"), namespace)

    def jit(function, options):
        return numba.njit(**{k: v for k, v in options.items() if k != "nopython"})(function)
    rebind(original, jit(namespace[name], original.targetoptions))
    for caller in callers:
        compiled = getattr(module, caller)  # its source reads module.name, now the faulty function
        rebind(compiled, jit(compiled.py_func, compiled.targetoptions))


def torch_loop_only() -> None:
    """Route every training (W, (K, Q), paper B's p, Polyak steps, the diagonal model and its flow, the causal and
    next-token models) through the torch loops: the compiled engines compute the gradient themselves and would
    bypass a fault in the Python gradient. Its W loop returns what
    `compiled.gd` returns."""
    from functools import partial, reduce
    from math import gcd

    import attnsvm.train._cpu_loop as compiled
    import attnsvm.train as train

    def gd(problem, W0, head, loss, lr, normalized, eps, record, sqrt_schedule=False):
        every = reduce(gcd, record) or 1
        run = train.gd(problem, steps=record[-1], lr=lr, normalized=normalized, init=W0, record_every=every,
                       loss=loss, head=head, eps=eps, engine="torch", schedule="sqrt" if sqrt_schedule else "constant")
        index = [list(run.steps).index(k) for k in record]
        return run.W[index], run.probs[index], run.loss[index]
    patch(compiled, "_gd", lambda original: gd)  # train.gd calls the unchecked engine
    patch(compiled, "gd", lambda original: lambda problem, W0, head, *, loss, lr, normalized, eps, record: gd(
        problem, W0, head, loss, lr, normalized, eps, record))
    # (K, Q) trains in its own compiled loop (_kq_loop) wherever why_not_compiled gives no reason: give one
    patch(compiled, "why_not_compiled", lambda original: lambda param, *rest: (
        "the faults harness runs (K, Q) in the torch loop" if param == "KQ" else original(param, *rest)))
    from attnsvm.train import _mirror as mirror
    # mirror descent's compiled loop takes neither the torch loop's maps nor its step: run the torch loop
    patch(mirror, "_train", lambda original: lambda *arguments: original(*arguments[:-1], "torch"))
    # the other trainers with a compiled loop of their own: their torch loops, unless told otherwise
    from attnsvm import causal
    for module, name in ((train, "gd_prompt"), (train, "polyak"), (train, "diagonal_gd"), (train, "gradient_flow"),
                         (causal, "gd"), (causal, "ntp_gd")):
        patch(module, name, lambda original: partial(original, engine="torch"))


@fault(is_control=True)
def none():
    """No fault (the baseline: every chapter must pass with the harness in place)."""


@fault(is_control=True)
def torch_loop():
    """No fault, but every training of W in the torch loop (the baseline of the faults that need it)."""
    torch_loop_only()


@fault("01_preliminaries", "tests/lib/test_svm.py::test_frobenius_kkt_conditions")
def svm_drops_constraint():
    """The Frobenius Att-SVM silently drops one constraint (the first non-selected token of the first
    sequence): an off-by-one in the rows of the constraint matrix, with the multipliers scattered to match."""
    import numpy as np

    from attnsvm import svm
    patch(svm, "constraint_matrix", lambda original: lambda X, Z, alpha: original(X, Z, alpha)[1:])

    def scatter(original):
        def _scatter(values, alpha, T):
            return original(np.concatenate([[0.0], values]) if len(values) == len(alpha) * (T - 1) - 1 else values,
                            alpha, T)
        return _scatter
    patch(svm._attention, "_scatter", scatter)


@fault("01_preliminaries", "tests/lib/test_svm.py::test_frobenius_kkt_conditions")
def svm_not_minimal():
    """The Frobenius Att-SVM returns a feasible but not minimal W: 1.1 W^mm (every margin >= 1.1)."""
    from attnsvm import svm

    def make(original):
        def att_svm(X, Z, alpha, norm="fro", **options):
            result = original(X, Z, alpha, norm, **options)
            if norm != "fro":
                return result
            return (1.1 * result[0], result[1]) if options.get("return_multipliers") else 1.1 * result
        return att_svm
    patch(svm, "att_svm", make)


@fault("02_regularization_path", "01_preliminaries", "tests/lib/test_svm.py::test_nuclear_solution_is_optimal")
def nuclear_solves_frobenius():
    """The nuclear-norm solver (the default interior-point method) quietly solves the Frobenius problem."""
    from attnsvm import svm

    def solve_ipm(instances, d):
        return [svm._attention._least_distance(svm.constraint_matrix(*instance)) for instance in instances]
    patch(svm._attention, "_solve_ipm", lambda original: solve_ipm)


@fault("02_regularization_path", "tests/lib/test_nuclear.py::test_ipm_kkt_conditions")
def ipm_stops_early():
    """The interior-point method stops after 8 iterations, reports convergence without checking the duality gap,
    and rescales its iterate to satisfy every margin: a feasible, suboptimal (higher-rank) nuclear-norm W."""
    import numpy as np

    from attnsvm.svm import _nuclear_svm as nuclear

    def make(original):
        def solve(deltas, queries):
            deltas, queries = np.asarray(deltas, dtype=float), np.asarray(queries, dtype=float)
            saved = nuclear.MAX_ITER
            nuclear.MAX_ITER = 8
            try:
                W, y, _ = original(deltas, queries)
            finally:
                nuclear.MAX_ITER = saved
            for b in range(len(W)):
                smallest = np.einsum("kd,de,ke->k", deltas[b], W[b], queries[b]).min()
                if smallest > 0:
                    W[b] /= smallest
            return W, y, np.ones(len(W), dtype=bool)
        return solve
    patch(nuclear, "solve", make)


@fault("00_introduction", "03_global_convergence", "tests/lib/test_theory.py::test_optimal_tokens_are_argmax_of_scores")
def optimal_token_skips_first():
    """The optimal token is searched from the second token on (an off-by-one slice: gamma[..., 1:].argmax() + 1),
    so a sequence whose first token is optimal gets a wrong opt_i."""
    from attnsvm import theory
    patch(theory, "optimal_tokens",
          lambda original: lambda problem: theory.token_scores(problem)[..., 1:].argmax(-1) + 1)


@fault("00_introduction", "03_global_convergence",
       "tests/lib/test_theory.py::test_token_scores_are_label_times_head_value")
def scores_ignore_labels():
    """The token score forgets the label: gamma_it = v^T x_it instead of Y_i v^T x_it."""
    from attnsvm import model, theory
    patch(theory, "token_scores", lambda original: lambda problem: model.token_values(problem))


@fault("02_regularization_path", "04_local_convergence",
       "tests/lib/test_theory.py::test_correlation_symmetric_and_bounded")
def correlation_inflated():
    """The correlation is nudged toward 1: sign(c) |c|^(1/2) instead of c (a norm taken as a squared norm)."""
    import numpy as np

    from attnsvm import theory
    def make(original):
        def correlation(A, B):
            c = original(A, B)
            return np.sign(c) * np.sqrt(np.abs(c))
        return correlation
    patch(theory, "correlation", make)


@fault("01_preliminaries", "tests/lib/test_theory.py::test_margins_are_logit_differences")
def margin_sign_flipped():
    """The margins are computed the wrong way round: x_it^T W z_i - x_{i,alpha_i}^T W z_i."""
    from attnsvm import theory
    patch(theory, "margins", lambda original: lambda problem, W, alpha: -original(problem, W, alpha))


@fault("01_preliminaries", "02_regularization_path",
       "tests/lib/test_theory.py::test_support_tokens_on_a_hand_built_instance")
def support_tolerance_loose():
    """Support tokens with a wrong tolerance: a margin within 0.05 of 1 counts as "on the margin" (a tolerance
    meant for a loose solver)."""
    from attnsvm import theory
    theory.SUPPORT_TOL = 0.05


@fault("01_preliminaries", "tests/lib/test_theory.py::test_margins_and_support_tokens_of_att_svm")
def support_tolerance_zero():
    """Support tokens with a wrong tolerance: only a margin exactly equal to 1 in floating point counts (tolerance
    0), so round-off of a few ulps hides support tokens."""
    from attnsvm import theory
    theory.SUPPORT_TOL = 0.0


@fault("03_global_convergence", "04_local_convergence",
       "tests/lib/test_theory.py::test_some_random_selections_are_not_locally_optimal")
def locally_optimal_non_strict():
    """Local optimality tested with a non-strict inequality: gamma_alpha >= gamma_t for the support tokens
    instead of gamma_alpha > gamma_t, so ties (equal scores, Assumption B.2) count as locally optimal."""
    import numpy as np

    from attnsvm import svm, theory
    from attnsvm._checks import as_index, as_tensor, choice

    def locally_optimal(problem, alpha, *, norm="fro", key=None):
        alpha = as_index(alpha, "alpha", problem.batch_shape + (problem.n,), problem.T)
        choice(norm, "norm", tuple(svm.SOLVERS))
        if key is None:
            feasible, solutions = theory._svm_where_feasible(problem, alpha, norm)
            on_margin = np.abs(theory.margins(problem, np.nan_to_num(solutions), alpha) - 1) <= theory.SUPPORT_TOL
        else:
            keys = (problem.X @ as_tensor(key, "key")).cpu().numpy()
            feasible, p = np.ones(problem.batch_shape, bool), svm.prompt_svm(problem.X, key, alpha)
            chosen_keys = np.take_along_axis(keys, alpha[..., None, None], axis=-2)
            on_margin = np.abs(np.einsum("...ntd,...d->...nt", chosen_keys - keys, p) - 1) <= theory.SUPPORT_TOL
        gamma = theory.token_scores(problem).cpu().numpy()
        chosen = np.take_along_axis(gamma, alpha[..., None], axis=-1)
        return feasible & np.all((chosen >= gamma) | ~on_margin, axis=(-2, -1))
    patch(theory, "locally_optimal", lambda original: locally_optimal)


@fault("02_regularization_path", "tests/lib/test_path.py::test_W_path_lies_on_the_spheres")
def path_radius_doubled():
    """The regularization path of W follows the sphere of radius 2R instead of R (a diameter for a radius)."""
    import dataclasses

    import numpy as np

    from attnsvm.train import _path as path

    def make(original):
        def regularization_path(problem, radii, *, param="W", **options):
            if param != "W":
                return original(problem, radii, param=param, **options)
            result = original(problem, 2 * np.asarray(radii, dtype=float), param=param, **options)
            return dataclasses.replace(result, radii=np.asarray(radii, dtype=float))
        return regularization_path
    patch(path, "regularization_path", make)


@fault("03_global_convergence", "tests/lib/test_train.py::test_normalized_gd_on_W_moves_lr_each_step",
       control="torch_loop")
def gd_not_normalized():
    """Normalized gradient descent forgets to normalize: the step is -lr G (G the gradient direction of order
    one), not -lr G / ||G||_F."""
    from attnsvm import train
    torch_loop_only()
    patch(train._descent, "_unit", lambda original: lambda G, dims=(-2, -1), log_scale=None, eps=0.0: G)


@fault("01_preliminaries", "03_global_convergence",
       "tests/lib/test_train.py::test_exact_gradient_equals_autograd_when_not_saturated", control="torch_loop")
def gradient_float32():
    """The logits inside the gradient are computed in float32 (X, W and Z cast down before the product), the rest
    in float64; the compiled loop is bypassed so that every run uses it."""
    import torch

    from attnsvm.train import _gradients as gradients
    from attnsvm.model import queries

    def weight_gradient(problem, W, kind, head=None, values=None):
        Z = queries(problem)
        Wz = torch.einsum("...de,...ne->...nd", W.float(), Z.float())
        logits = (problem.X.float() * Wz[..., None, :]).sum(-1).double()
        grad = gradients.logit_gradient(problem, logits, kind, head, values)
        weighted = (grad.direction[..., None] * problem.X).sum(-2)
        return weighted.transpose(-2, -1) @ Z, grad.log_scale, grad
    torch_loop_only()
    patch(gradients, "_weight_gradient", lambda original: weight_gradient)


@fault("01_preliminaries", "tests/lib/test_train.py::test_exact_gradient_is_accurate_when_softmax_saturates",
       control="torch_loop")
def exact_gradient_is_autograd():
    """gradient="exact" silently differentiates through softmax by autograd (steered by round-off once softmax
    saturates); the compiled loop is bypassed."""
    import torch

    from attnsvm import model
    from attnsvm.train import _gradients as gradients

    def make(original):
        def weight_gradient(problem, W, kind, head=None, values=None):
            _, _, grad = original(problem, W, kind, head, values)
            W = W.detach().requires_grad_(True)
            with torch.enable_grad():
                (G,) = torch.autograd.grad(model.loss(problem, W, kind, head).sum(), W)
            return G, torch.zeros(G.shape[:-2], dtype=G.dtype), grad
        return weight_gradient
    torch_loop_only()
    patch(gradients, "_weight_gradient", make)


@fault("01_preliminaries", "04r_local_experiments", "07_tensor_lipschitz",
       "tests/lib/test_train.py::test_exact_gradient_is_accurate_when_softmax_saturates", control="torch_loop")
def softmax_without_max_shift():
    """Softmax without the max-subtraction, exp(l) / sum exp(l), in the model, the probabilities the gradient
    returns, causal attention and paper C's f: it overflows (inf / inf = NaN) once a logit exceeds 709 and
    underflows below -745."""
    import torch

    from attnsvm import causal, model, tensor
    from attnsvm.train import _gradients as gradients

    def naive(logits, dim=-1):
        e = torch.exp(logits)
        return e / e.sum(dim, keepdim=True)

    def logit_gradient(original):
        def faulty(problem, logits, *args, **kwargs):  # the probabilities of the naive softmax
            return original(problem, logits, *args, **kwargs)._replace(probs=naive(logits))
        return faulty

    torch_loop_only()
    patch(gradients, "_logit_gradient", logit_gradient)
    patch(model, "attention", lambda original: lambda problem, W: naive(model.logits(problem, W)))
    patch(causal, "attention", lambda original: lambda problem, W: naive(causal.logits(problem, W)))
    patch(tensor, "f", lambda original: lambda Aj, x: naive(tensor._logits(*tensor._block_and_point(Aj, x))))


@fault("01_preliminaries", "03_global_convergence",
       "tests/lib/test_model.py::test_log_slope_is_the_log_of_minus_the_derivative_even_where_it_underflows",
       control="torch_loop")
def logistic_slope_sign():
    """The log-space slope of the logistic loss has the wrong sign inside: log sigma(x) instead of log sigma(-x),
    so gradient descent weights the well-classified sequences most (the compiled loop is bypassed)."""
    import torch

    from attnsvm import model
    torch_loop_only()
    logistic = model.LOSSES["logistic"]
    model.LOSSES["logistic"] = logistic._replace(log_slope=lambda x: -torch.logaddexp(torch.zeros_like(x), -x))


@fault("05_nonlinear_heads", "tests/lib/test_heads.py::test_head_gradient_is_the_gradient_of_its_value",
       control="torch_loop")
def relu_wrong_derivative():
    """The ReLU head's gradient uses the activation instead of its derivative: ReLU(V^T a) V^T instead of
    1[V^T a > 0] V^T (the compiled loop, which has the right one, is bypassed)."""
    import torch

    from attnsvm import heads

    def value_and_gradient(self, a):
        hidden = a @ self.V
        return torch.relu(hidden).sum(-1), torch.relu(hidden) @ self.V.transpose(-2, -1)
    torch_loop_only()
    heads.ReLU.value_and_gradient = value_and_gradient


@fault("05_nonlinear_heads", "tests/lib/test_heads.py::test_lambda_optimum_by_hand_and_limits")
def lambda_head_factor():
    """The lambda head's water filling uses lam where the optimality condition has 2 lam (s_t = (u_t - tau) /
    lam): the optimum of the head v^T a - (lam / 2) ||a||^2."""
    from attnsvm import heads
    patch(heads, "lambda_optimum",
          lambda original: lambda values, lam: original(values, lam / 2 if float(lam) else lam))


@fault("05_nonlinear_heads", "tests/lib/test_prompt.py::test_relaxed_sequences_only_need_a_non_negative_margin")
def prompt_relaxed_as_hard():
    """Paper B's relaxed p-SVM treats the relaxed constraints as hard: `relaxed` is ignored."""
    from attnsvm import svm
    patch(svm, "prompt_svm", lambda original: lambda X, key, alpha, *, relaxed=None: original(X, key, alpha))


@fault("06_causal_attention", "tests/lib/test_causal.py::test_candidates_scores_and_repr")
def causal_mask_off_by_one():
    """The causal mask is off by one: query k also sees token k + 1 (t <= k + 1)."""
    import torch

    from attnsvm import causal

    def candidates(problem):
        k = torch.arange(problem.K, device=problem.X.device)[:, None]
        t = torch.arange(problem.T, device=problem.X.device)[None, :]
        return t <= k + 1 if problem.causal else torch.ones(problem.K, problem.T, dtype=torch.bool,
                                                           device=problem.X.device)
    patch(causal, "candidates", lambda original: candidates)


@fault("06_causal_attention",
       "tests/lib/test_causal.py::test_optimal_token_among_copies_is_the_latest_and_copies_are_not_separated")
def causal_copies_first_occurrence():
    """Among exact copies of the best token, the causal optimal token is the first occurrence (a plain argmax),
    not the latest, as the chapter's convention states."""
    from attnsvm import causal
    patch(causal, "optimal_tokens", lambda original: lambda problem: causal.scores(problem).argmax(-1))


@fault("06_causal_attention", "tests/lib/test_causal.py::test_soft_margin_kkt_and_cvxpy_on_language_data")
def soft_margin_C_ignored():
    """The soft-margin causal Att-SVM ignores its penalty C (always solved with C = 1)."""
    from attnsvm import causal

    def make(original):
        def att_svm(problem, alpha=None, *, C=None, **options):
            return original(problem, alpha, C=None if C is None else 1.0, **options)
        return att_svm
    patch(causal, "att_svm", make)


@fault("07_tensor_lipschitz", "tests/lib/test_tensor.py::test_vec_is_row_major_and_mat_inverts_it")
def vec_column_major():
    """Paper C's tensor trick with vec in column-major order (vec stacks the columns, mat still rows)."""
    from attnsvm import tensor

    def vec(X):
        X = tensor._matrix(X, "X")
        return X.transpose(-2, -1).reshape(X.shape[:-2] + (-1,))
    patch(tensor, "vec", lambda original: vec)


@fault("07r_lipschitz_experiments", "tests/lib/test_tensor.py::test_log10_bound_matches_mpmath")
def paper_bound_halved():
    """Paper C's Lipschitz bound M = 3 T^3 R^7 exp(13 R^2) computed as M / 2 (a constant 3/2 for 3)."""
    import numpy as np

    from attnsvm import tensor
    patch(tensor, "log10_bound", lambda original: lambda T, R: original(T, R) - np.log10(2))


@fault("07r_lipschitz_experiments", "tests/lib/test_tensor.py::test_lipschitz_bound_dominates_exact_hessian_everywhere")
def book_bound_halved():
    """The book's own Lipschitz bound of the gradient comes out half as large (a factor 2 of a derivative lost)."""
    from attnsvm import tensor
    patch(tensor, "lipschitz_bound", lambda original: lambda *args, **options: 0.5 * original(*args, **options))


@fault("04r_local_experiments", "03r_global_experiments",
       "tests/lib/test_train.py::test_plain_gd_on_KQ_follows_the_chain_rule", control="torch_loop")
def kq_gradient_untransposed():
    """Gradient descent on (K, Q) forgets a transpose in the chain rule: dL/dQ = G K instead of G^T K (they agree
    only where the gradient G is symmetric)."""
    import torch

    from attnsvm import train

    def make(original):
        def loop(problem, params, recorder, steps, lr, normalized, loss, gradient, head, eps, ridge, sqrt_schedule):
            if len(params) == 1 or gradient != "exact" or ridge or sqrt_schedule:
                return original(problem, params, recorder, steps, lr, normalized, loss, gradient, head, eps, ridge,
                                sqrt_schedule)
            values = train._descent._token_values(problem, problem.v) if head is None else None
            K, Q = params
            for k in range(steps + 1):
                W = K @ Q.transpose(-2, -1)
                G, log_scale, grad = train._gradients._weight_gradient(problem, W, loss, head, values)
                if recorder.wants(k):
                    risk = train._descent._risk(train._descent.LOSSES[loss], problem, grad.outputs)
                    recorder.add(W=W, probs=grad.probs, loss=risk, K=K, Q=Q)
                if k == steps:
                    break
                if not normalized:
                    G, log_scale = torch.exp(log_scale)[..., None, None] * G, torch.zeros_like(log_scale)

                def step(update):
                    return train._descent._unit(update, log_scale=log_scale, eps=eps) if normalized else update
                K, Q = K - lr * step(G @ Q), Q - lr * step(G @ K)  # the fault: G^T @ K
        return loop
    torch_loop_only()
    patch(train._descent, "_torch_loop", make)


@fault("01_preliminaries", "03_global_convergence", "tests/lib/test_data.py::test_random_problem_unit_norms_and_labels")
def tokens_not_normalized():
    """The random instance is not normalized: unit_rows returns its input (Gaussian tokens, queries and heads of
    norm about sqrt(d), not 1)."""
    from attnsvm import data
    patch(data, "unit_rows", lambda original: lambda tensor: tensor)


# ------------------------------------------------------------------ Part II (chapters 8-12)

@fault("08_mirror_descent", control="torch_loop")
def mirror_map_exponent_p():
    """Mirror descent's mirror map with exponent p instead of p - 1: the dual variable is sign(w) |w|^p and the
    inverse map sign(theta) |theta|^(1/p) (the gradient of ||w||_p^p taken as |w|^p): consistent with each other,
    but the mirror descent of the potential ||w||_(p+1)^(p+1)."""
    import torch

    from attnsvm.train import _mirror as mirror

    def dual(w, p):
        return torch.sign(w) * w.abs() ** p

    def primal(theta, p):
        return torch.sign(theta) * theta.abs() ** (1.0 / p)
    torch_loop_only()
    patch(mirror, "_dual", lambda original: dual)
    patch(mirror, "_primal", lambda original: primal)


@fault("08_mirror_descent", control="torch_loop")
def mirror_dual_exponent():
    """Mirror descent normalizes its step in the wrong dual norm: q = p / (p + 1) instead of p / (p - 1) (a sign
    slip), so the dual variable no longer moves by exactly lr in the l_q norm."""
    from attnsvm.train import _mirror as mirror
    torch_loop_only()
    patch(mirror, "_mirror_step", lambda original: lambda p, q, eps: original(p, p / (p + 1.0), eps))


@fault("08_mirror_descent",
       "tests/lib/test_mirror.py::test_one_compiled_step_deep_in_saturation_is_the_torch_loops")
def compiled_dual_exponent():
    """The compiled mirror-descent engine (`_update`, the step the chapters run) takes the dual exponent
    q = p / (p + 1) instead of p / (p - 1) (a sign slip): it normalizes the step in the wrong (quasi-)norm."""
    from attnsvm.train import _mirror as mirror
    recompile(mirror, "_update", "q = p / (p - 1.0)", "q = p / (p + 1.0)", callers=("_body", "_run", "_run_one"))


@fault("08_mirror_descent",
       "tests/lib/test_mirror.py::test_one_compiled_step_deep_in_saturation_is_the_torch_loops")
def compiled_inverse_map():
    """The compiled mirror-descent engine maps the dual variable back with the mirror map's exponent instead of
    its inverse's: w = sign(theta) |theta|^(p - 1), not |theta|^(1/(p - 1)) (the same for p = 2 only)."""
    from attnsvm.train import _mirror as mirror
    recompile(mirror, "_update", "_signed_powers(theta, w, 1.0 / (p - 1.0))", "_signed_powers(theta, w, p - 1.0)",
              callers=("_body", "_run", "_run_one"))


@fault("08_mirror_descent")
def lp_svm_ignores_p():
    """The entrywise l_p Att-SVM loses its exponent on the way to the smooth solvers: for 1 < p < infinity
    (Clarabel's power cone and the L-BFGS-B dual) it solves the l_2 (Frobenius) problem; the linear programs
    p = 1 and p = infinity are right."""
    import math

    from attnsvm.svm import _entrywise as entrywise

    def make(original):
        def entrywise_svm(X, Z, alpha, norm, **options):
            p = entrywise.exponent(norm)
            return original(X, Z, alpha, 2.0 if 1 < p < math.inf else norm, **options)
        return entrywise_svm
    patch(entrywise, "entrywise_svm", make)


@fault("09_rates")
def polyak_without_gap():
    """Polyak steps without the loss gap: the step length uses L(W) instead of L(W) - L* (the optimal value taken
    as 0, as for an interpolating model), in the exact and in the autograd rule."""
    import torch

    from attnsvm.train import _step_sizes as steps

    def log_loss(problem, W, loss):
        return torch.log(steps._risk(steps.LOSSES[loss], problem, steps._outputs(problem, W, None)))

    def zero(problem, loss="logistic"):
        return torch.zeros(problem.batch_shape, dtype=torch.float64)

    def make(original):
        def polyak(problem, **options):
            saved = steps._log_loss_gap, steps.optimal_loss
            steps._log_loss_gap, steps.optimal_loss = log_loss, zero
            try:
                return original(problem, **{**options, "engine": "torch"})  # the compiled loop has its own gap
            finally:
                steps._log_loss_gap, steps.optimal_loss = saved
        return polyak
    patch(steps, "polyak", make)


@fault("09_rates", "tests/lib/test_polyak_compiled.py::test_each_step_from_zero_agrees_with_the_torch_loop")
def compiled_polyak_sum_not_mean():
    """The compiled Polyak engine (`_polyak_loop._log_gap`) takes log(L - L*) of the sum of the sequences'
    excesses, not their mean (the 1/n dropped): every step n times too long."""
    from attnsvm.train import _polyak_loop as loop
    recompile(loop, "_log_gap", "log_gap[b] = rows[PEAK, b] + rows[SUM, b] - math.log(n)",
              "log_gap[b] = rows[PEAK, b] + rows[SUM, b]", callers=("_run",))


@fault("10_next_token", "tests/lib/test_next_token.py::test_graph_svm_matches_cvxpy")
def graph_svm_drops_equalities():
    """The next-token graph SVM drops its equality constraints (equal logits for the tokens of one strongly
    connected component): only the margins across components are kept."""
    import numpy as np

    from attnsvm.causal import _next_token as ntp

    def make(original):
        def constraints(problem):
            equal, margin = original(problem)
            return np.zeros((0, equal.shape[1])), margin
        return constraints
    patch(ntp, "_constraints", make)


@fault("10_next_token")
def priority_components_unordered():
    """The priority components come in the order of their smallest token, not in a topological order of the
    condensation (highest priority first)."""
    from attnsvm.causal import _next_token as ntp

    def ordered_components(graph):
        import networkx as nx
        return sorted((frozenset(c) for c in nx.strongly_connected_components(graph)), key=min)
    patch(ntp, "_ordered_components", lambda original: ordered_components)


@fault("11_low_rank")
def diagonal_kq_same_gradient():
    """Diagonal gradient descent on the factors updates k and q with the same gradient: q <- q - eta g * q
    instead of q - eta g * k (a copy of k's line), so k = q is kept but kappa^2 - rho^2 is no longer scaled by
    1 - eta^2 g^2."""
    import torch

    from attnsvm.train import _diagonal as diagonal

    @torch.no_grad()
    def diagonal_gd(problem, *, factorized, steps, lr, init=None, normalized=True, record_every=1,
                    loss="logistic", engine="auto"):  # engine: the torch loop's fault in any case
        problem = diagonal._checked_problem(problem, min_T=2, why=diagonal._TRAINING, needs_Z=True)
        factorized = diagonal.boolean(factorized, "factorized")
        normalized = diagonal.boolean(normalized, "normalized")
        steps, lr = diagonal.positive_int(steps, "steps", minimum=0), diagonal.positive_float(lr, "lr")
        record_every = diagonal.positive_int(record_every, "record_every")
        loss = diagonal._option(loss, "loss", tuple(diagonal.LOSSES))
        params = diagonal._starts(problem, factorized, init)
        batch, n, T, d = problem.batch_shape, problem.n, problem.T, problem.d
        entries = float(torch.tensor(batch, dtype=torch.float64).prod()) * (3 * d * d + n * T + 1)
        recorder = diagonal._recorder(steps, record_every, entries)
        phi = problem.X * problem.Z[..., None, :]
        values = diagonal._token_values(problem, problem.v)
        blame = diagonal._blame(f"lr={lr!r}", "init")
        with diagonal._overflow("gradient descent's iterates", blame, "lower lr"):
            for step in range(steps + 1):
                w = params[0] if not factorized else params[0] * params[1]
                grad = diagonal.gradients._logit_gradient(problem, (phi * w[..., None, None, :]).sum(-1), loss, None,
                                                          values)
                if recorder.wants(step):
                    factors = dict(K=torch.diag_embed(params[0]), Q=torch.diag_embed(params[1])) if factorized else {}
                    recorder.add(W=torch.diag_embed(w), probs=grad.probs,
                                 loss=diagonal._risk(diagonal.LOSSES[loss], problem, grad.outputs), **factors)
                if step == steps:
                    break
                g = (grad.direction[..., None] * phi).sum((-3, -2))
                move = lr * (diagonal._unit(g, dims=(-1,)) if normalized
                             else torch.exp(grad.log_scale)[..., None] * g)
                params = ((w - move,) if not factorized
                          else (params[0] - move * params[1], params[1] - move * params[1]))  # the fault
        return diagonal._finite_trajectory(recorder.trajectory(), blame)
    patch(diagonal, "diagonal_gd", lambda original: diagonal_gd)


@fault("12_open_problems")
def spectral_svm_nuclear():
    """The spectral-norm Att-SVM minimizes the nuclear norm (the sum of the singular values, a copy of the
    nuclear-norm program) instead of the largest singular value."""
    from attnsvm.svm import _spectral as spectral

    def solver(solver, k, d):
        import cvxpy as cp

        A = cp.Parameter((k, d * d))
        W = cp.Variable((d, d))
        problem = cp.Problem(cp.Minimize(cp.normNuc(W)), [A @ cp.vec(W, order="C") >= 1])  # the fault
        if solver == "clarabel":
            tol = spectral.CLARABEL_TOL["nuc"]
            settings = {"solver": cp.CLARABEL, "max_iter": spectral.CLARABEL_MAX_ITER, "tol_gap_abs": tol,
                        "tol_gap_rel": tol, "tol_feas": tol}
        else:
            settings = {"solver": cp.SCS, "eps_abs": spectral.SCS_TOL, "eps_rel": spectral.SCS_TOL,
                        "max_iters": spectral.SCS_MAX_ITERS}

        def solve(matrix):
            A.value = matrix
            problem.solve(**settings)
            if problem.status != cp.OPTIMAL:
                raise spectral.SolverError(f"{solver} stopped with status {problem.status!r}")
            w = W.value.reshape(-1)
            return w / spectral._accepted((matrix @ w).min(), f"{solver} returned a spectral Att-SVM solution")
        return solve
    patch(spectral, "_solver", lambda original: solver)


@fault("prelude", "tests/lib/test_linear.py::test_svm_kkt_and_independent_solver")
def linear_svm_half_multipliers():
    """The linear SVM returns its dual multipliers halved (a factor 1/2 from the dual's 1/2 ||w||^2 applied
    twice): w_hat and the support are right, but w_hat = sum_i alpha_i y_i x_i fails."""
    import dataclasses

    from attnsvm import linear

    def make(original):
        def svm(*args, **kwargs):
            solution = original(*args, **kwargs)
            return dataclasses.replace(solution, alpha=solution.alpha / 2)
        return svm
    patch(linear, "svm", make)


@fault("prelude_gd", "tests/lib/test_linear.py::test_offset_and_residual")
def linear_offset_sign():
    """Hypothesis (H)'s offset solves m_i(w) = log(alpha_i / c) instead of log(c / alpha_i) on the support
    vectors: the offset with the wrong sign."""
    from attnsvm import linear
    patch(linear, "offset", lambda original: lambda *args, **kwargs: -original(*args, **kwargs))


@fault("03b_central_theorem", "tests/lib/test_reduction.py::test_limiting_weights_are_the_slope_times_the_gap")
def reduction_weights_without_n():
    """The limiting weights c*_it = |l'(gamma*_i)| Delta_it / n, as `theory.limiting_weights` returns them, lose
    their 1/n (the loss's average forgotten): n times too large."""
    from attnsvm import theory
    patch(theory, "limiting_weights",
          lambda original: lambda problem, *args, **kwargs: original(problem, *args, **kwargs) * problem.n)


@fault("04_local_convergence", "tests/lib/test_cone.py::test_constants_match_their_definitions")
def cone_radius_without_other_tokens():
    """The cone lemma's constants forget the tokens off the support (|N| = 0), so its radius drops the term that
    makes their pull, of order e^{-rho m delta / 2}, negligible: far too small a radius."""
    from attnsvm import theory
    patch(theory, "cone_constants",
          lambda original: lambda *args, **kwargs: original(*args, **kwargs)._replace(n_other=0))


# ================================================================== installing a fault in a process

_ARMED = {"name": None, "done": False, "busy": False}


def install(name: str) -> None:
    """Install fault `name` into the imported attnsvm, and record it in ATTNSVM_FAULT_MARK."""
    FAULTS[name].install()
    mark = os.environ.get("ATTNSVM_FAULT_MARK")
    if mark:
        with open(mark, "a") as handle:
            handle.write(f"{os.getpid()} {name}\n")


class _Hook:
    """A meta path finder in front of all others: once `attnsvm` has been executed (and with it every module of the
    package), install the armed fault."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "attnsvm" or _ARMED["done"] or _ARMED["busy"]:
            return None
        import importlib.util
        _ARMED["busy"] = True
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            _ARMED["busy"] = False
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        execute = loader.exec_module

        def exec_module(module):
            execute(module)
            if not _ARMED["done"]:
                _ARMED["done"] = True
                install(_ARMED["name"])
        loader.exec_module = exec_module
        return spec


def arm(name: str) -> None:
    """Called by the generated sitecustomize.py: install fault `name` when attnsvm is imported."""
    if name not in FAULTS:
        raise SystemExit(f"ATTNSVM_FAULT={name!r} is not a fault: see tools/faults.py --list")
    _ARMED["name"] = name
    if "attnsvm" in sys.modules:
        _ARMED["done"] = True
        install(name)
    else:
        sys.meta_path.insert(0, _Hook())


SITECUSTOMIZE = """\
# Generated by tools/faults.py: plant the fault ATTNSVM_FAULT in attnsvm when it is imported.
import os
if os.environ.get("ATTNSVM_FAULT"):
    import importlib.util
    import sys
    _spec = importlib.util.spec_from_file_location("_attnsvm_faults", os.environ["ATTNSVM_FAULTS_FILE"])
    _faults = importlib.util.module_from_spec(_spec)
    sys.modules["_attnsvm_faults"] = _faults
    _spec.loader.exec_module(_faults)
    _faults.arm(os.environ["ATTNSVM_FAULT"])
"""


# ================================================================== running chapters and tests

@dataclass
class Outcome:
    target: str  # chapter stem or test node id
    status: str  # "pass", "assert", "error" (clear library error: caught), "crash" (other exception), "timeout",
    # "no-fault" (the fault never got installed)
    detail: str = ""
    seconds: float = 0.0
    failures: list = field(default_factory=list)  # [cell index, status, detail] of each failing cell

    @property
    def caught(self) -> bool:
        return self.status in ("assert", "error")


def _environment(name: str, work: Path, mark: Path) -> dict:
    env = dict(os.environ)  # the CPU code paths: attnsvm pins them itself (attnsvm.codepaths), as for a reader
    env["PYTHONPATH"] = os.pathsep.join([str(work / "hook")] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.update(ATTNSVM_FAULT=name, ATTNSVM_FAULTS_FILE=str(Path(__file__).resolve()), ATTNSVM_FAULT_MARK=str(mark))
    return env


def _first_line(source: str) -> str:
    lines = [line.strip() for line in source.splitlines()]
    code = [line for line in lines if line and not line.startswith("#")]
    return (code or lines or [""])[0][:100]


def execute_notebook(path: Path, report: Path, allow_errors: bool = False) -> None:
    """(Run in a subprocess with the fault's environment.) Execute the notebook at `path`, write the outcome as
    JSON to `report`: the failing cells [cell index, status assert / error / crash, detail] (the first only,
    unless allow_errors: then every cell runs), and the status (pass, that of the first failure, or timeout)."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name="python3", allow_errors=allow_errors,
                            resources={"metadata": {"path": str(path.parent)}})
    timeout = ""
    try:
        client.execute()
    except CellTimeoutError as err:
        timeout = str(err).splitlines()[0][:200]
    except CellExecutionError:
        pass  # the failing cell holds the error output
    failures = []
    for index, cell in enumerate(nb.cells):
        error = next((o for o in cell.get("outputs", []) if o.get("output_type") == "error"), None)
        if cell.cell_type != "code" or error is None:
            continue
        line = _first_line(cell.source)
        trace = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(error.get("traceback", [])))
        arrows = [m.group(1).strip() for m in re.finditer(r"^-+>\s*\d+\s(.*)$", trace, re.M)]
        raised = arrows[0] if arrows else ""  # the cell's line that raised (its first frame)
        ename = error.get("ename", "?")
        status = "assert" if ename == "AssertionError" else ("error" if ename in CLEAR_ERRORS else "crash")
        message = f"{ename}: {error.get('evalue', '')}".strip().rstrip(":")
        where = f"cell `{line}`" + (f", line `{raised[:120]}`" if raised and raised != line else "")
        failures.append([index, status, f"{where}: {message[:200]}"])
    if timeout:
        result = {"status": "timeout", "detail": timeout, "failures": failures}
    elif failures:
        result = {"status": failures[0][1], "detail": failures[0][2], "failures": failures}
    else:
        result = {"status": "pass", "detail": "", "failures": []}
    report.write_text(json.dumps(result))


def _run_chapter(fault_name: str, stem: str, work: Path, allow_errors: bool = False,
                 upto: int | None = None) -> Outcome:
    """Execute a copy of the chapter under fault `fault_name` (its cells up to index `upto` only, if given)."""
    job = Path(tempfile.mkdtemp(prefix=f"{fault_name}-{stem}-", dir=work))
    notebook = job / f"{stem}.ipynb"
    if upto is None:
        shutil.copy(work / "book" / f"{stem}.ipynb", notebook)
    else:
        content = json.loads((work / "book" / f"{stem}.ipynb").read_text())
        content["cells"] = content["cells"][: upto + 1]
        notebook.write_text(json.dumps(content))
    mark, report = job / "mark", job / "report.json"
    start = time.perf_counter()
    command = [sys.executable, str(Path(__file__).resolve()), "--execute-notebook", str(notebook), str(report)]
    try:
        proc = subprocess.run(command + (["--allow-errors"] if allow_errors else []),
                              env=_environment(fault_name, work, mark), cwd=job, capture_output=True, text=True,
                              timeout=CHAPTER_TIMEOUT)
    except subprocess.TimeoutExpired:
        return Outcome(stem, "timeout", f"over {CHAPTER_TIMEOUT} s", time.perf_counter() - start)
    seconds = time.perf_counter() - start
    if not report.exists():
        return Outcome(stem, "crash", f"the executor failed: {(proc.stderr or proc.stdout).strip()[-300:]}", seconds)
    result = json.loads(report.read_text())
    if not (mark.exists() and fault_name in mark.read_text()):
        return Outcome(stem, "no-fault", "the fault was never installed in the kernel", seconds)
    return Outcome(stem, result["status"], result["detail"], seconds, result["failures"])


_CONTROLS: dict = {}
_CONTROLS_LOCK = threading.Lock()


def control_run(control: str, stem: str, work: Path) -> Outcome:
    """The chapter run under a control (no fault), every cell executed; computed once, shared by all threads."""
    with _CONTROLS_LOCK:
        entry = _CONTROLS.get((control, stem))
        owner = entry is None
        if owner:
            entry = _CONTROLS[control, stem] = {"done": threading.Event()}
    if owner:
        entry["outcome"] = _run_chapter(control, stem, work, allow_errors=True)
        entry["done"].set()
    entry["done"].wait()
    return entry["outcome"]


def _run_against_control(fault: "Fault", stem: str, work: Path) -> Outcome:
    """The chapter under the fault, compared with the same under the fault's control: the first cell that fails
    under the fault but not under the control catches it (the torch loop is not batch-invariant, so a chapter's
    reproducibility check can fail under the control itself). First the chapter runs to its first failure, and
    the control up to that cell; only if the control fails there too do both run every cell."""
    outcome = _run_chapter(fault.name, stem, work)
    if not outcome.caught:
        return outcome
    index, status, _ = outcome.failures[0]
    control = _run_chapter(fault.control, stem, work, upto=index)
    if not any(f[0] == index and f[1] == status for f in control.failures):
        if control.status != "pass":
            return Outcome(stem, "crash", f"the {fault.control} control failed before cell {index}: {control.detail}",
                           outcome.seconds + control.seconds)
        outcome.detail += f" (the {fault.control} control passes this cell)"
        return outcome
    outcome = _run_chapter(fault.name, stem, work, allow_errors=True)
    if outcome.status in ("timeout", "no-fault") or (outcome.status == "crash" and not outcome.failures):
        return outcome
    control = control_run(fault.control, stem, work)
    known = {(index, status) for index, status, _ in control.failures}
    new = [f for f in outcome.failures if (f[0], f[1]) not in known]
    if not new:
        note = f" (fails only where the {fault.control} control fails too)" if outcome.failures else ""
        return Outcome(stem, "pass", note.strip(), outcome.seconds, outcome.failures)
    return Outcome(stem, new[0][1], new[0][2], outcome.seconds, outcome.failures)


def _run_test(fault_name: str, node: str, work: Path) -> Outcome:
    job = Path(tempfile.mkdtemp(prefix=f"{fault_name}-test-", dir=work))
    mark = job / "mark"
    start = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-rf",
                               "--tb=line", node], env=dict(_environment(fault_name, work, mark), COLUMNS="400"),
                              cwd=ROOT,
                              capture_output=True, text=True, timeout=TEST_TIMEOUT)
    except subprocess.TimeoutExpired:
        return Outcome(node, "timeout", f"over {TEST_TIMEOUT} s", time.perf_counter() - start)
    seconds = time.perf_counter() - start
    if not (mark.exists() and fault_name in mark.read_text()):
        return Outcome(node, "no-fault", "the fault was never installed in pytest", seconds)
    if proc.returncode == 0:
        return Outcome(node, "pass", "", seconds)
    failed = [line for line in proc.stdout.splitlines() if line.startswith("FAILED")]
    if proc.returncode == 1 and failed:  # a failing test catches the fault, whatever it raised
        message = failed[0].split(" - ", 1)[1] if " - " in failed[0] else failed[0]
        assertion = message.startswith(("AssertionError", "assert "))
        return Outcome(node, "assert" if assertion else "error", message[:200], seconds)
    return Outcome(node, "crash", f"pytest exit {proc.returncode}: {proc.stdout.strip()[-200:]}", seconds)


def run_target(fault_name: str, target: str, work: Path) -> Outcome:
    if "::" in target:
        return _run_test(fault_name, target, work)
    if FAULTS[fault_name].control != "none":
        return _run_against_control(FAULTS[fault_name], target, work)
    return _run_chapter(fault_name, target, work)


def hunt(fault: Fault, work: Path, log) -> list[Outcome]:
    """The expected catchers of `fault` in order, then the other chapters, until one catches it."""
    order = list(fault.catchers) + [stem for stem in CHAPTERS if stem not in fault.catchers]
    outcomes = []
    for target in order:
        outcome = run_target(fault.name, target, work)
        outcomes.append(outcome)
        log(f"{fault.name:<28} {_short(target):<40} {outcome.status:<8} {outcome.seconds:6.1f} s  "
            f"{outcome.detail[:90]}")
        if outcome.caught:
            break
    return outcomes


# ================================================================== the report

def _short(target: str) -> str:
    return target.replace("tests/lib/", "") if "::" in target else target


def report(results: dict, baseline: dict, total: float, unverified_ok: bool = False) -> int:
    rows, uncaught, untrusted = [], [], []
    for name, outcomes in results.items():
        control = FAULTS[name].control
        catch = next((o for o in outcomes if o.caught), None)
        if catch is None:
            uncaught.append(name)
            others = sorted({o.status for o in outcomes} - {"pass"})
            ran = f"ran {len(outcomes)} targets" + (f" ({', '.join(others)})" if others else "")
            rows.append((name, "NOT CAUGHT", ran))
            continue
        verified = ("::" in catch.target or control != "none"  # checked cell by cell against its control
                    or baseline.get((control, catch.target), Outcome("", "?")).status == "pass")
        if not verified and not unverified_ok:
            untrusted.append(name)
        kind = "assert" if catch.status == "assert" else "error"
        note = "" if verified else (" (no baseline run)" if unverified_ok else " (FAILS WITHOUT THE FAULT TOO)")
        missed = [f"{_short(o.target)} {o.status}" for o in outcomes if o is not catch]
        detail = catch.detail + (f" [missed first by: {', '.join(missed)}]" if missed else "")
        rows.append((name, f"{_short(catch.target)} [{kind}]{note}", detail))
    print()
    if baseline:
        print("Baseline, each catching chapter without any fault, up to its last catching cell:\n  "
              + ", ".join(f"{stem} {o.status} ({o.seconds:.0f} s)" for (control, stem), o in baseline.items()))
    width = max(len(r[0]) for r in rows)
    print(f"\n{'fault':<{width}}  caught by")
    print("-" * (width + 2 + 60))
    for name, by, detail in rows:
        print(f"{name:<{width}}  {by}")
        if detail:
            print(f"{'':<{width}}    {textwrap.shorten(detail, 220)}")
    caught = len(results) - len(uncaught)
    by_test = [name for name, outcomes in results.items()
               if any(o.caught and "::" in o.target for o in outcomes)]
    print("-" * (width + 2 + 60))
    print(f"catch rate: {caught}/{len(results)} faults caught ({100 * caught / max(len(results), 1):.0f}%), "
          f"{sum(1 for r in results.values() for o in r if o.caught and o.status == 'assert')} by an assertion; "
          f"total {total:.0f} s")
    print(f"caught by a chapter: {caught - len(by_test)}; only by a library test (no chapter caught them): "
          f"{len(by_test)}" + (f" ({', '.join(by_test)})" if by_test else ""))
    if uncaught:
        print("not caught: " + ", ".join(uncaught))
    bad_baseline = [f"{stem} [{control}]" for (control, stem), o in baseline.items() if o.status != "pass"]
    for (control, stem), entry in sorted(_CONTROLS.items()):
        for index, status, detail in entry["outcome"].failures:
            print(f"note: under the {control} control alone, {stem} fails at cell {index} ({status}): "
                  f"{textwrap.shorten(detail, 160)}; a fault failing there is not counted as caught")
    if bad_baseline:
        print("chapters failing WITHOUT a fault: " + ", ".join(bad_baseline))
    return 1 if (uncaught or bad_baseline or untrusted) else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fault", action="append", help="run only this fault (repeatable)")
    parser.add_argument("--list", action="store_true", help="list the faults and their expected catchers")
    parser.add_argument("--no-baseline", action="store_true",
                        help="skip the clean run of each catching chapter (faster; a catch is then unverified)")
    parser.add_argument("--jobs", type=int, default=2, help="executions at a time (default 2)")
    parser.add_argument("--execute-notebook", nargs=2, metavar=("NOTEBOOK", "REPORT"), help=argparse.SUPPRESS)
    parser.add_argument("--allow-errors", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.execute_notebook:
        execute_notebook(Path(args.execute_notebook[0]), Path(args.execute_notebook[1]), args.allow_errors)
        return 0
    faults = [f for f in FAULTS.values() if not f.is_control]
    if args.list:
        for f in faults:
            print(f"{f.name}\n    {textwrap.fill(f.doc, 110, subsequent_indent='    ')}\n"
                  f"    expected catchers: {', '.join(map(_short, f.catchers))}")
        return 0
    if args.fault:
        unknown = [name for name in args.fault if name not in FAULTS or FAULTS[name].is_control]
        if unknown:
            parser.error(f"unknown fault(s) {', '.join(unknown)}: see --list")
        faults = [FAULTS[name] for name in args.fault]
    start = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="attnsvm-faults-"))
    lock = threading.Lock()

    def log(line):
        with lock:
            print(f"[{time.perf_counter() - start:5.0f} s] {line}", flush=True)
    try:
        (work / "hook").mkdir()
        (work / "hook" / "sitecustomize.py").write_text(SITECUSTOMIZE)
        shutil.copytree(ROOT / "book", work / "book")  # a snapshot: other work may be editing book/ meanwhile
        with ThreadPoolExecutor(max(1, args.jobs)) as pool:
            hunts = {f.name: pool.submit(hunt, f, work, log) for f in faults}
            results = {name: future.result() for name, future in hunts.items()}
            # The baseline: each chapter that caught a fault (against the unchanged library), run without any
            # fault up to the last cell at which it caught one (a catch against the torch-loop control was
            # already checked against that control, cell by cell).
            upto = {}
            for name, outcomes in results.items():
                catch = next((o for o in outcomes if o.caught), None)
                if catch is not None and "::" not in catch.target and FAULTS[name].control == "none":
                    upto[catch.target] = max(upto.get(catch.target, 0), catch.failures[0][0])
            clean = {} if args.no_baseline else {
                ("none", stem): pool.submit(_run_chapter, "none", stem, work, upto=index)
                for stem, index in sorted(upto.items())}
            baseline = {}
            for key in clean:
                baseline[key] = outcome = clean[key].result()
                log(f"{'(baseline: ' + key[0] + ')':<28} {key[1] + f' to cell {upto[key[1]]}':<40} {outcome.status:<8} "
                    f"{outcome.seconds:6.1f} s  {outcome.detail[:90]}")
        return report(results, baseline, time.perf_counter() - start, args.no_baseline)
    finally:
        shutil.rmtree(work, ignore_errors=True)

if __name__ == "__main__":
    sys.exit(main())
