"""Bad-input census of attnsvm's public API, tried as a new user would.

For every public function, public class constructor and public method of the science namespaces (enumerated from
their ``__all__``: a public name without an entry in the registry below stops the census, so that a new function is
never forgotten), one valid call, then the same call with ONE argument at a time replaced by each of the bad or
extreme values suited to its kind (None, strings, bools and fractions for integers, negative, zero and huge sizes,
NaN/inf, 1e308 and 1e-320, tensors x1e160 and x1e-160, wrong shapes and ndims, empty, int-dtype, requires_grad,
'meta'-device and python-list arrays, degenerate problems, unknown option names...).

Each call runs in a forked child (its own process group) with a time limit and an address-space cap, and is
classified:

``clear``     TypeError / ValueError / FloatingPointError / svm.SolverError / svm.InfeasibleSVM whose message names
              the replaced argument (IndexError too for ``__getitem__``; for a problem replaced by one of another
              size, a message naming any argument of the call, the one the new size contradicts)
``unclear``   any other exception, or a message that does not name the replaced argument
``nan``       returned NaN or inf (beyond what the function returns by design: causal.logits' -inf off the
              candidates, causal.margins' NaN off the constraints, log_scale = -inf for a gradient exactly 0)
``accepted``  returned a finite result: a valid extreme, or a silent wrong answer (SUSPECT when the value is
              obviously invalid: None, strings, bools for numbers, negative sizes, NaN/inf, wrong shapes, 'meta')
``hang``      ran past the time limit
``crash``     the child died (a signal, or MemoryError at the memory cap)

Prints the valid calls that failed, a table by class (and by namespace), then every call that is not a clear
error (function | argument | value | outcome | message). About 6000 calls, 1 to 3 minutes on 2 cores.

Usage::

    .venv/bin/python tools/bad_input_census.py              # the whole census, 2 calls at a time
    .venv/bin/python tools/bad_input_census.py --only 'train.gd*' --timeout 20 --jobs 2
    .venv/bin/python tools/bad_input_census.py --missing-ok  # census what the registry has, list what it lacks
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import importlib
import inspect
import math
import os
import pickle
import re
import resource
import select
import signal
import sys
import time
from collections import Counter, defaultdict
from types import SimpleNamespace
from typing import Any, Callable, NamedTuple

import attnsvm  # noqa: I001 (first: it pins numpy's and torch's code paths)
import numpy as np
import torch

from attnsvm import causal, data, heads, model, svm, tensor, theory, train
from attnsvm.experiments import relu_head, svm_rank

NAMESPACES = ("data", "model", "heads", "theory", "svm", "train", "causal", "tensor", "experiments.relu_head",
              "experiments.svm_rank")
CLEAR_TYPES = (TypeError, ValueError, FloatingPointError, svm.SolverError)  # svm.InfeasibleSVM is a ValueError
CLASSES = ("clear", "unclear", "nan", "accepted", "hang", "crash")
MEMORY_CAP = 4 * 2**30  # RLIMIT_AS of each child, bytes
NAN, INF = math.nan, math.inf
S, J = True, False  # accepting the value is SUSPECT / a human judges (a valid extreme, perhaps)


class Bad(NamedTuple):
    label: str
    value: Any
    suspect: bool
    lenient: bool = False  # a message naming any argument of the call counts as clear (a problem of another size)


# ------------------------------------------------------------------ the bad values of each kind of argument
# A kind is a function (valid value, default) -> list of Bad; `valid` is the value of the valid call (or the kind's
# `like` for an optional argument the valid call leaves out).

def _none(default) -> Bad:
    return Bad("None", None, default is not None)


def size(valid=None, default=inspect.Parameter.empty, *, huge_ok: bool = False):
    """A size, count or number of steps (an int >= 1, or >= 0)."""
    return [_none(default), Bad("'x'", "x", S), Bad("'12'", "12", S), Bad("True", True, S), Bad("1.5", 1.5, S),
            Bad("-1", -1, S), Bad("0", 0, J), Bad("10**12", 10**12, not huge_ok), Bad("nan", NAN, S),
            Bad("inf", INF, S)]


def bound(valid=None, default=inspect.Parameter.empty):
    """An upper bound (a record interval, a number of candidates, a count that is a maximum): 10**12 is valid."""
    return size(valid, default, huge_ok=True)


def seed(valid=None, default=inspect.Parameter.empty):
    return [_none(default), Bad("'x'", "x", S), Bad("'12'", "12", S), Bad("True", True, S), Bad("1.5", 1.5, S),
            Bad("-1", -1, S), Bad("nan", NAN, S), Bad("2**64", 2**64, J), Bad("10**12", 10**12, J)]


def number(sign: str = "real"):
    """A float: any real ("real"), > 0 ("positive"), >= 0 ("nonnegative")."""
    def make(valid=None, default=inspect.Parameter.empty):
        return [_none(default), Bad("'x'", "x", S), Bad("'12'", "12", S), Bad("True", True, S),
                Bad("nan", NAN, S), Bad("inf", INF, S), Bad("-inf", -INF, S), Bad("1e308", 1e308, J),
                Bad("1e-320", 1e-320, J), Bad("-1", -1.0, sign != "real"), Bad("0", 0.0, sign == "positive")]
    return make


def flag(valid=None, default=inspect.Parameter.empty):
    return [Bad("None", None, S), Bad("'no'", "no", S), Bad("'x'", "x", S), Bad("1", 1, S), Bad("0", 0, S),
            Bad("1.5", 1.5, S)]


def option(*options):
    def make(valid=None, default=inspect.Parameter.empty):
        bads = [_none(default), Bad("'relu'", "relu", S), Bad("'no'", "no", S), Bad("''", "", S), Bad("1", 1, S),
                Bad("True", True, S)]
        return [bad._replace(suspect=bad.suspect and bad.value not in options) for bad in bads
                if bad.value not in options or bad.value is None or bad.value is True or bad.value == 1]
    return make


def _float_tensor(valid) -> torch.Tensor:
    if torch.is_tensor(valid):
        return valid.detach().clone().to(torch.float64)
    return torch.as_tensor(np.asarray(valid, dtype=np.float64))


def _with_entry(t: torch.Tensor, value) -> torch.Tensor:
    t = t.clone()
    if t.numel():
        t.view(-1)[0] = value
    return t


def _wrong_shape(t: torch.Tensor) -> torch.Tensor:
    return torch.ones(2, dtype=t.dtype) if t.ndim == 0 else torch.cat([t, t.narrow(-1, 0, 1) + 1], dim=-1)


def _wrong_ndim(t: torch.Tensor) -> torch.Tensor:
    if t.ndim >= 2:
        return t.flatten()
    return torch.ones(2, 2, dtype=t.dtype) if t.ndim == 0 else t[0].clone()


def _empty(t: torch.Tensor) -> torch.Tensor:
    return t.new_empty((0,) + tuple(t.shape[1:])) if t.ndim else t.new_empty((0,))


def array(*, positive: bool = False, like=None, any_shape: bool = False, sizes_ok: bool = False,
          empty_ok: bool = False, none_ok: bool = False):
    """A float array or tensor (its valid shape from the valid call). What is valid besides: ``any_shape`` every
    shape, ``sizes_ok`` other sizes of the same ndim (e.g. the dimension d of the tokens), ``empty_ok`` a leading
    size 0, ``none_ok`` None."""
    def make(valid=None, default=inspect.Parameter.empty):
        t = _float_tensor(like if valid is None else valid)
        bads = [Bad("None", None, not none_ok and default is not None), Bad("'x'", "x", S),
                Bad("nan entry", _with_entry(t, NAN), S),
                Bad("inf entry", _with_entry(t, INF), S), Bad("x1e160", t * 1e160, J), Bad("x1e-160", t * 1e-160, J),
                Bad("wrong shape", _wrong_shape(t), not (any_shape or sizes_ok)),
                Bad("wrong ndim", _wrong_ndim(t), not any_shape),
                Bad("empty", _empty(t), not (any_shape or empty_ok)), Bad("int dtype", t.round().long(), J),
                Bad("requires_grad", t.clone().requires_grad_(), J), Bad("meta device", t.to("meta"), S),
                Bad("python list", t.tolist(), J)]
        if positive:
            bads += [Bad("-1 entry", _with_entry(t, -1.0), S), Bad("0 entry", _with_entry(t, 0.0), S)]
        return bads
    make.like = like
    return make


def index(upper: int, *, like=None, labels: bool = False, sizes_ok: bool = False, none_ok: bool = False):
    """Token indices (an int array, entries in [0, upper)); ``labels``: any integers (group labels); ``sizes_ok``:
    another length is valid."""
    def make(valid=None, default=inspect.Parameter.empty):
        t = torch.as_tensor(np.asarray(like if valid is None else valid)).to(torch.int64)
        return [Bad("None", None, not none_ok and default is not None), Bad("'x'", "x", S),
                Bad("-1 entry", _with_entry(t, -1), not labels),
                Bad(f"{upper} entry (out of range)", _with_entry(t, upper), not labels),
                Bad("0.5 entries", t.double() + 0.5, S), Bad("nan entry", _with_entry(t.double(), NAN), S),
                Bad("wrong shape", _wrong_shape(t), not sizes_ok), Bad("wrong ndim", _wrong_ndim(t), S),
                Bad("empty", _empty(t), S), Bad("bool dtype", t > 0, S), Bad("meta device", t.to("meta"), S),
                Bad("python list", t.tolist(), J), Bad("float integers", t.double(), J)]
    make.like = like
    return make


def mask(*, like=None):
    """A boolean mask."""
    def make(valid=None, default=inspect.Parameter.empty):
        t = torch.as_tensor(np.asarray(like if valid is None else valid)).to(torch.bool)
        return [_none(default), Bad("'x'", "x", S), Bad("float 0/1", t.double(), S), Bad("int 0/1", t.long(), J),
                Bad("wrong shape", _wrong_shape(t), S), Bad("wrong ndim", _wrong_ndim(t), S),
                Bad("empty", _empty(t), S), Bad("meta device", t.to("meta"), S), Bad("python list", t.tolist(), J)]
    make.like = like
    return make


def _problem_like(P: data.Problem, X=None, **changes) -> data.Problem:
    fields = dict(X=P.X if X is None else X, Y=P.Y, Z=P.Z, v=P.v) | changes
    return data.Problem(**fields)


def problem(*, needs_Z: bool = True, arrays_ok: bool = False):
    """An attnsvm.data.Problem (variants that cannot be constructed are left out: the constructor refused them);
    ``needs_Z``: the function needs the queries Z; ``arrays_ok``: it takes the tokens X in the problem's place."""
    def make(valid, default=inspect.Parameter.empty):
        bads = [Bad("None", None, S), Bad("'x'", "x", S), Bad("its X tensor", valid.X, not arrays_ok),
                Bad("a causal.SequenceProblem", F.CP, S, True)]
        variants = [("T=1 problem", lambda: _problem_like(valid, valid.X[..., :1, :]), J, True),
                    ("X x1e160", lambda: _problem_like(valid, valid.X * 1e160), J, False),
                    ("X x1e-160", lambda: _problem_like(valid, valid.X * 1e-160), J, False),
                    ("X requires_grad", lambda: _problem_like(valid, valid.X.clone().requires_grad_()), J, False),
                    ("Z=None problem", lambda: _problem_like(valid, Z=None), needs_Z and valid.Z is not None, False)]
        for label, build, suspect, lenient in variants:
            try:
                bads.append(Bad(label, build(), suspect, lenient))
            except (TypeError, ValueError):
                pass
        return bads
    return make


def sequence_problem(valid, default=inspect.Parameter.empty):
    """A causal.SequenceProblem."""
    bads = [Bad("None", None, S), Bad("'x'", "x", S), Bad("its X tensor", valid.X, S),
            Bad("a data.Problem", F.P, S, True)]
    variants = [("T=1 problem", lambda: causal.SequenceProblem(valid.X[..., :1, :], valid.V[..., :1, :]), J, True),
                ("X x1e160", lambda: causal.SequenceProblem(valid.X * 1e160, valid.V), J, False),
                ("X x1e-160", lambda: causal.SequenceProblem(valid.X * 1e-160, valid.V * 1e-160), J, False),
                ("X requires_grad", lambda: causal.SequenceProblem(valid.X.clone().requires_grad_(), valid.V), J,
                 False)]
    for label, build, suspect, lenient in variants:
        try:
            bads.append(Bad(label, build(), suspect, lenient))
        except (TypeError, ValueError):
            pass
    return bads


def ntp_problem(valid, default=inspect.Parameter.empty):
    """A causal.NTPProblem."""
    bads = [Bad("None", None, S), Bad("'x'", "x", S), Bad("a data.Problem", F.P, S, True),
            Bad("a causal.SequenceProblem", F.CP, S, True)]
    for label, scale in (("embeddings x1e160", 1e160), ("embeddings x1e-160", 1e-160)):
        bads.append(Bad(label, causal.NTPProblem(valid.ids, valid.labels, valid.embeddings * scale), J))
    bads.append(Bad("embeddings requires_grad", causal.NTPProblem(valid.ids, valid.labels,
                                                                  valid.embeddings.clone().requires_grad_()), J))
    return bads


def head(d: int, *, none_ok: bool = False, any_d: bool = False):
    """None (the problem's linear head) or a head of attnsvm.heads acting on R^d."""
    def make(valid=None, default=inspect.Parameter.empty):
        return [Bad("None", None, not none_ok and default is not None), Bad("'relu'", "relu", S), Bad("3", 3, S),
                Bad(f"head on R^{d + 1}", heads.random_relu(d + 1, seed=0), not any_d),
                Bad("a tensor", torch.ones(d, dtype=torch.float64), S)]
    return make


def function(valid=None, default=inspect.Parameter.empty):
    return [Bad("None", None, S), Bad("'x'", "x", S), Bad("returns NaN", lambda x: x.sum(-1) * NAN, S),
            Bad("returns a string", lambda x: "x", S)]


def runs(valid, default=inspect.Parameter.empty):
    return [Bad("None", None, S), Bad("'x'", "x", S), Bad("its trajectory", valid.trajectory, S),
            Bad("its problem", valid.problem, S)]


def instance(valid, default=inspect.Parameter.empty):
    Aj, h, b = valid
    return [Bad("None", None, S), Bad("'x'", "x", S), Bad("(Aj, h) only", (Aj, h), S),
            Bad("Aj nan entry", tensor.Instance(_with_entry(Aj, NAN), h, b), S),
            Bad("Aj x1e160", tensor.Instance(Aj * 1e160, h, b), J),
            Bad("Aj x1e-160", tensor.Instance(Aj * 1e-160, h, b), J),
            Bad("Aj wrong shape", tensor.Instance(_wrong_shape(Aj), h, b), S),
            Bad("h wrong shape", tensor.Instance(Aj, _wrong_shape(h), b), S),
            Bad("b = 'x'", tensor.Instance(Aj, h, "x"), S), Bad("b nan", tensor.Instance(Aj, h, b * NAN), S)]


def device(valid=None, default=inspect.Parameter.empty, *, any_device: bool = False):
    """A device: None (the default device) or the CPU; ``any_device``: the function only describes it."""
    return [Bad("None", None, J), Bad("'cuda'", "cuda", not any_device), Bad("'meta'", "meta", not any_device),
            Bad("3", 3, S), Bad("'x'", "x", S)]


def int_list(valid=None, default=inspect.Parameter.empty):
    """A list of seeds."""
    return [_none(default), Bad("'12'", "12", S), Bad("[1.5]", [1.5], S), Bad("[-1]", [-1], S), Bad("[]", [], S),
            Bad("[True]", [True], S), Bad("['1']", ["1"], S), Bad("5 (not a list)", 5, J),
            Bad("[10**12]", [10**12], J), Bad("[nan]", [NAN], S)]


def points(valid=None, default=inspect.Parameter.empty):
    return [_none(default), Bad("'abc'", "abc", S), Bad("[(2, 1, 3)] (T=1)", [(2, 1, 3)], S), Bad("[]", [], S),
            Bad("[(-1, 3, 3)]", [(-1, 3, 3)], S), Bad("[(10**6, 10**3, 10**3)]", [(10**6, 10**3, 10**3)], S),
            Bad("[(2, 3)]", [(2, 3)], S), Bad("[(2.5, 3, 3)]", [(2.5, 3, 3)], S)]


def shape(valid=None, default=inspect.Parameter.empty, *, batch: bool = False):
    """A shape tuple; ``batch``: a batch shape, () (unbatched) and sizes 0 are valid."""
    return [_none(default), Bad("'x'", "x", S), Bad("(-1, 2)", (-1, 2), S), Bad("(10**6, 10**6)", (10**6, 10**6), S),
            Bad("(1.5, 2)", (1.5, 2), S), Bad("()", (), not batch), Bad("(0, 2)", (0, 2), not batch),
            Bad("(True, 2)", (True, 2), S)]


def mapping(valid=None, default=inspect.Parameter.empty):
    return [_none(default), Bad("{'bogus': 1}", {"bogus": 1}, S), Bad("'x'", "x", S), Bad("[1]", [1], S)]


def text(valid=None, default=inspect.Parameter.empty):
    return [_none(default), Bad("3", 3, S), Bad("b'x'", b"x", S)]


def custom(*bads: Bad):
    def make(valid=None, default=inspect.Parameter.empty):
        return list(bads)
    return make


def both(*kinds):
    """The bad values of several kinds (e.g. an option or an array)."""
    def make(valid=None, default=inspect.Parameter.empty):
        seen, out = set(), []
        for kind in kinds:
            like = getattr(kind, "like", None)
            tried = valid if valid is not None and not isinstance(valid, str) else like
            for bad in kind(tried, default):
                if bad.label not in seen:
                    seen.add(bad.label)
                    out.append(bad)
        return out
    return make


SKIP = None  # a parameter the census leaves alone (the registry says why)


# ------------------------------------------------------------------ fixtures (built once, in the parent)

F = SimpleNamespace()


def build_fixtures() -> None:
    attnsvm.setup()
    f64 = torch.float64
    F.P = data.random_problem(n=2, T=3, d=2, seed=0)
    F.PB = data.random_problem(n=2, T=3, d=2, seed=0, batch=3)
    F.ALPHA = theory.optimal_tokens(F.P)
    F.EYE = torch.eye(2, dtype=f64)
    F.W = torch.tensor([[1.0, 0.5], [-0.5, 2.0]], dtype=f64)
    F.A = torch.tensor([[1.0, 2.0], [-1.0, 0.5], [0.3, -0.2]], dtype=f64)  # (n=3, d=2) head inputs
    F.P34 = data.random_problem(n=3, T=4, d=4, seed=1)
    F.PROBS = model.attention(F.P34, 10 * torch.randn(4, 4, dtype=f64, generator=torch.Generator().manual_seed(0)))
    F.P2 = data.random_problem(n=3, T=2, d=4, seed=0)  # head_svm
    F.PP = data.random_problem(n=2, T=3, d=4, seed=0)  # prompt_svm
    F.MARGIN_P = data.Problem([[[1.0, 0.0], [0.0, 1.0], [0.0, -1.0]]], [1.0], [[1.0, 0.0]], [1.0, 0.0])
    F.ROWS = np.array([[1.0, 0.0], [0.0, 2.0]])
    F.CP = causal.random_problem(n=2, T=3, d=4, seed=0)
    F.CALPHA = causal.optimal_tokens(F.CP)
    F.CW = torch.eye(4, dtype=f64)
    F.CLAM = causal.att_svm(F.CP, return_multipliers=True)[1]
    F.LANG = causal.synthetic_language(V=5, d=3, seed=0)
    F.INST = tensor.random_instance(T=3, d=2, R=1.0, seed=0)
    F.INST4 = tensor.random_instance(T=3, d=2, R=4.0, seed=0, batch=2)
    F.X0 = tensor.sample_ball(F.INST.Aj, 1.0, 1, seed=0)[0]
    F.GEN = svm.general_svm(F.P34, F.PROBS)
    F.RUNS = relu_head.train_runs(4, relu_head.stored_seeds(4)[:2])
    F.EXACT = relu_head.train_runs(4, relu_head.stored_seeds(4)[:2], eps=0)
    F.PAIRS = relu_head.token_pairs(F.PP.X[:, :, :3], F.PP.Z[:, :3], torch.ones(2, 3, dtype=torch.bool))
    F.RELEVANT = torch.tensor([[True, True, False], [True, False, False]])
    F.TRAJ = train.gd(F.P, steps=10, lr=0.5, record_every=5)
    F.PD = data.random_problem(n=5, T=2, d=12, seed=1)  # diagonal SVM and GD
    F.P3 = data.random_problem(n=2, T=3, d=3, seed=0)  # spectral SVM
    F.NTP = causal.ntp_problem([[1, 2, 0], [1, 2, 0], [2, 1, 0]], [1, 1, 2], d=4, seed=0)
    F.NTPE = causal.NTPProblem([[1, 2, 0], [2, 1, 0]], [1, 2], torch.eye(3, dtype=f64))
    F.HEADS = {"Linear": heads.Linear([1.0, -1.0]), "ReLU": heads.ReLU(torch.eye(2, dtype=f64)),
               "Lambda": heads.Lambda([1.0, 0.0], 0.5)}


# ------------------------------------------------------------------ the registry of valid calls

@dataclasses.dataclass
class Entry:
    name: str  # what the table shows, e.g. "svm.att_svm" or "svm.att_svm[arrays]"
    target: str  # the public name it censuses
    call: Callable[[], Callable]  # -> the function to call
    valid: Callable[[], dict]  # -> the valid call's keyword arguments
    kinds: dict  # parameter -> kind (SKIP: left alone, see `why`)
    nonfinite_ok: Callable[[dict, Any], int] | None = None  # (kwargs, result) -> the NaN/inf it holds by design
    why: str = ""
    index_errors: bool = False  # IndexError is the protocol's clear error (__getitem__)
    aliases: dict = dataclasses.field(default_factory=dict)  # parameter -> the name its errors use instead


REGISTRY: list[Entry] = []
# Result classes the library builds and users read (their constructors are not an input path) and abstract bases:
# their methods that take arguments are censused where they have any.
CONTAINERS = {
    "data.Sequences": "abstract base of Problem and causal.SequenceProblem",
    "heads.Head": "abstract base; its methods are censused on Linear, ReLU and Lambda",
    "model.Loss": "a named tuple of the loss functions in model.LOSSES (built by the library)",
    "svm.GeneralSVM": "general_svm's result (GeneralSVM.combined is censused)",
    "svm.InfeasibleSVM": "an exception class", "svm.SolverError": "an exception class",
    "train.Trajectory": "gd's result (Trajectory.selection is censused)", "train.Path": "regularization_path's result",
    "train.LogitGradient": "logit_gradient's result",
    "tensor.Ascent": "max_hessian_norm's result", "tensor.Comparison": "attention_study's result",
    "tensor.Estimate": "empirical_lipschitz's result", "tensor.Study": "gap_study's result",
    "tensor.Instance": "a named tuple (Aj, h, b): the functions that take one validate it (censused there)",
    "experiments.relu_head.LambdaRuns": "lambda_sweep's result", "experiments.relu_head.Runs": "train_runs' result",
    "experiments.relu_head.TokenFates": "token_fates' result",
    "experiments.relu_head.TokenPairs": "token_pairs' result (TokenPairs.project is censused)",
    "experiments.svm_rank.Spectra": "spectra's result",
}


def add(target: str, call: Callable, valid: Callable, *, variant: str = "", nonfinite_ok: Callable | None = None,
        why: str = "", index_errors: bool = False, aliases: dict | None = None, **kinds) -> None:
    REGISTRY.append(Entry(f"{target}[{variant}]" if variant else target, target, call, valid, kinds, nonfinite_ok,
                          why, index_errors, aliases or {}))


def off_mask(mask: Callable[[dict], torch.Tensor]) -> Callable[[dict, Any], int]:
    """The number of entries of the result outside `mask(kwargs)` (broadcast to the result's shape): where it is
    -inf or NaN by its definition."""
    return lambda kwargs, result: int(np.broadcast_to(~mask(kwargs).numpy(), np.shape(result)).sum())


def zero_gradients(kwargs: dict, result) -> int:
    """The -inf log scales of a weight_gradient or logit_gradient result: a gradient exactly 0 (e.g. no query with
    two candidates), by design."""
    if isinstance(result, train.LogitGradient):
        return int(torch.isneginf(result.log_scale).sum())
    _, log_scale, logit = result
    return int(torch.isneginf(log_scale).sum()) + zero_gradients(kwargs, logit)


def exact_zeros(kwargs: dict, result) -> int:
    """The -inf entries of a log-gap result: the log of a gap exactly 0 (e.g. one token per sequence), by design."""
    return int(torch.isneginf(torch.as_tensor(result)).sum())


def kw(**values):
    return lambda: values


def define_registry() -> None:  # noqa: C901 (one line per public name)
    # data
    add("data.Problem", lambda: data.Problem, lambda: dict(X=F.P.X, Y=F.P.Y, Z=F.P.Z, v=F.P.v),
        X=array(), Y=both(array(), custom(Bad("labels 0.5", torch.tensor([0.5, -1.0]), J),
                                          Bad("labels 2", torch.tensor([2.0, 1.0]), J))),
        Z=array(none_ok=True), v=array(), device=device)
    add("data.Problem.repeat", lambda: F.P.repeat, kw(copies=2), copies=size)
    add("data.Problem.to", lambda: F.P.to, kw(device="cpu"), device=device)
    add("data.Problem.__getitem__", lambda: (lambda index: F.PB[index]), kw(index=1), index_errors=True,
        index=custom(Bad("None", None, J), Bad("'x'", "x", S), Bad("1.5", 1.5, S), Bad("10**12", 10**12, S),
                     Bad("-10", -10, S), Bad("(0, 1)", (0, 1), S), Bad("True", True, J),
                     Bad("float tensor", torch.tensor([0.5]), S)))
    add("data.equal_scores_problem", lambda: data.equal_scores_problem, kw(n=2, T=3, d=2, seed=0),
        n=size, T=size, d=size, seed=seed, batch=size, delta=number("nonnegative"))
    add("data.joint_training_problem", lambda: data.joint_training_problem, kw(tight=True), tight=flag)
    add("data.loss_example_problem", lambda: data.loss_example_problem, kw(C=2.0), C=number("positive"))
    add("data.multi_input_problem", lambda: data.multi_input_problem, kw(), seed=seed, spread=number("nonnegative"))
    add("data.opposite_clusters_problem", lambda: data.opposite_clusters_problem, kw(), seed=seed,
        spread=number("nonnegative"))
    add("data.orthonormal_problem", lambda: data.orthonormal_problem, kw(T=3, seed=0), T=size, seed=seed,
        batch=size)
    add("data.planar_problem", lambda: data.planar_problem, kw(seed=0), seed=seed, n=size, T=size,
        spread=number("nonnegative"))
    add("data.random_problem", lambda: data.random_problem, kw(n=2, T=3, d=2, seed=0), n=size, T=size, d=size,
        seed=both(seed, custom(Bad("[1.5, 2]", [1.5, 2], S), Bad("[]", [], S), Bad("[-1]", [-1], S))),
        batch=size, device=device)
    add("data.random_selection", lambda: data.random_selection, lambda: dict(problem=F.P, seed=0),
        problem=problem(needs_Z=False), seed=seed)
    add("data.single_input_problem", lambda: data.single_input_problem, kw(global_case=False), global_case=flag)
    add("data.unit_rows", lambda: data.unit_rows, kw(tensor=[[3.0, 4.0], [0.0, 2.0]]), tensor=array(any_shape=True))
    # model
    add("model.as_key_query", lambda: model.as_key_query, lambda: dict(problem=F.P, W=F.W),
        problem=problem(needs_Z=False), W=array())
    for name in ("attention", "logits"):
        add(f"model.{name}", lambda name=name: getattr(model, name), lambda: dict(problem=F.P, W=F.W),
            problem=problem(), W=array())
    add("model.loss", lambda: model.loss, lambda: dict(problem=F.P, W=F.W), problem=problem(), W=array(),
        loss=option(*model.LOSSES), head=head(2, none_ok=True))
    add("model.min_margin", lambda: model.min_margin, lambda: dict(problem=F.P, W=F.W, alpha=F.ALPHA),
        problem=problem(), W=array(), alpha=index(3))
    add("model.outputs", lambda: model.outputs, lambda: dict(problem=F.P, W=F.W), problem=problem(), W=array(),
        head=head(2, none_ok=True))
    add("model.queries", lambda: model.queries, lambda: dict(problem=F.P), problem=problem())
    add("model.support_gradient", lambda: model.support_gradient,
        lambda: dict(problem=F.P, W=F.W, alpha=F.ALPHA, support=torch.ones(2, 3, dtype=torch.bool)),
        problem=problem(), W=array(), alpha=index(3), support=mask(), loss=option(*model.LOSSES))
    add("model.token_values", lambda: model.token_values, lambda: dict(problem=F.P), problem=problem(needs_Z=False),
        v=array(like=torch.tensor([1.0, -1.0], dtype=torch.float64)))
    # heads
    add("heads.Linear", lambda: heads.Linear, kw(v=[1.0, -1.0]), v=array(sizes_ok=True))
    add("heads.ReLU", lambda: heads.ReLU, lambda: dict(V=torch.eye(2, dtype=torch.float64)), V=array(sizes_ok=True))
    add("heads.Lambda", lambda: heads.Lambda, kw(v=[1.0, 0.0], lam=0.5), v=array(sizes_ok=True),
        lam=both(number("nonnegative"), custom(Bad("[0.5, -1]", [0.5, -1.0], S), Bad("[nan]", [NAN], S))))
    for cls in ("Linear", "ReLU", "Lambda"):
        for method in ("value", "gradient", "value_and_gradient"):
            add(f"heads.{cls}.{method}", lambda cls=cls, method=method: getattr(F.HEADS[cls], method),
                lambda: dict(a=F.A), a=array(empty_ok=True))
    add("heads.lambda_optimum", lambda: heads.lambda_optimum, kw(values=[1.0, 0.5, 0.2], lam=0.5),
        values=array(sizes_ok=True), lam=number("nonnegative"))
    add("heads.lambda_threshold", lambda: heads.lambda_threshold, kw(values=[1.0, 0.5, 0.2], lam=0.5),
        values=array(sizes_ok=True), lam=number("nonnegative"))
    add("heads.random_relu", lambda: heads.random_relu, kw(d=3, seed=0), d=size, seed=seed, batch=size)
    # theory
    add("theory.convergence", lambda: theory.convergence, lambda: dict(problem=F.P, W=10 * F.W), problem=problem(),
        W=array(), threshold=number("real"))
    add("theory.correlation", lambda: theory.correlation, lambda: dict(A=F.W, B=F.EYE), A=array(), B=array())
    add("theory.cosine", lambda: theory.cosine, kw(a=[1.0, 0.5], b=[2.0, 0.0]), a=array(), b=array())
    add("theory.locally_optimal", lambda: theory.locally_optimal, lambda: dict(problem=F.P, alpha=F.ALPHA),
        problem=problem(), alpha=index(3), norm=option("fro", "nuc"), key=array(like=torch.eye(2), none_ok=True))
    for name in ("margins", "support_tokens"):
        add(f"theory.{name}", lambda name=name: getattr(theory, name),
            lambda: dict(problem=F.P, W=F.W, alpha=F.ALPHA), problem=problem(), W=array(), alpha=index(3))
    add("theory.neighbour_selections", lambda: theory.neighbour_selections, kw(alpha=[0, 2], T=3),
        alpha=index(3, sizes_ok=True), T=size)
    add("theory.optimal_tokens", lambda: theory.optimal_tokens, lambda: dict(problem=F.P),
        problem=problem(needs_Z=False))
    add("theory.token_scores", lambda: theory.token_scores, lambda: dict(problem=F.P), problem=problem(needs_Z=False))
    add("theory.sample_feasible", lambda: theory.sample_feasible, kw(n=4, T=3, d=2, count=2, seed=0), n=size,
        T=size, d=size, count=bound, seed=seed, max_draws=size, selection=option("optimal", "random"))
    # svm
    for name in ("att_svm", "constraint_matrix", "feasible"):
        norms = custom(Bad("None", None, S), Bad("'relu'", "relu", S), Bad("''", "", S), Bad("0.5 (p < 1)", 0.5, S),
                       Bad("-1", -1, S), Bad("nan", NAN, S), Bad("True", True, S), Bad("'1'", "1", S))
        extra = (dict(norm=norms,
                      solver=option(*sorted({s for ss in svm.SOLVERS.values() for s in ss})),
                      return_multipliers=flag, options=mapping) if name == "att_svm" else {})
        add(f"svm.{name}", lambda name=name: getattr(svm, name), lambda: dict(X=F.P, alpha=F.ALPHA), variant="problem",
            why="Z: the problem carries it (censused in the arrays form)", X=problem(), Z=SKIP, alpha=index(3),
            aliases=dict(X="problem"), **extra)
        add(f"svm.{name}", lambda name=name: getattr(svm, name), lambda: dict(X=F.P.X, Z=F.P.Z, alpha=F.ALPHA),
            variant="arrays", why="options: censused in the problem form", X=array(), Z=array(), alpha=index(3),
            **{k: SKIP for k in extra})
    add("svm.general_svm", lambda: svm.general_svm, lambda: dict(X=F.P34, probs=F.PROBS), variant="problem",
        why="Z: censused in the arrays form", X=problem(), Z=SKIP, aliases=dict(X="problem"),
        probs=both(array(), custom(Bad("rows summing to 2", F.PROBS * 2, S), Bad("negative row", -F.PROBS, S))),
        threshold=number("positive"))
    add("svm.general_svm", lambda: svm.general_svm, lambda: dict(X=F.P34.X, Z=F.P34.Z, probs=F.PROBS),
        variant="arrays", why="threshold: censused in the problem form", X=array(), Z=array(), probs=array(),
        threshold=SKIP)
    add("svm.GeneralSVM.combined", lambda: F.GEN.combined, lambda: dict(W_gd=torch.eye(4, dtype=torch.float64)),
        W_gd=array())
    labels = custom(Bad("labels 2", torch.tensor([2.0, 1.0, -1.0]), S), Bad("labels 0", torch.tensor([0.0, 1.0, -1.0]), S))
    add("svm.head_svm", lambda: svm.head_svm, lambda: dict(X=F.P2, alpha=[0, 1, 0]),
        variant="problem", why="Y: censused in the arrays form", X=problem(needs_Z=False), Y=SKIP, alpha=index(2),
        aliases=dict(X="problem"))
    add("svm.head_svm", lambda: svm.head_svm, lambda: dict(X=F.P2.X, Y=F.P2.Y, alpha=[0, 1, 0]), variant="arrays",
        X=array(sizes_ok=True), Y=both(array(), labels), alpha=index(2))
    add("svm.prompt_svm", lambda: svm.prompt_svm, lambda: dict(X=F.PP, key=np.eye(4), alpha=[0, 1]),
        X=problem(needs_Z=False, arrays_ok=True), key=array(), alpha=index(3),
        relaxed=mask(like=torch.tensor([False, True])), aliases=dict(X="problem"))
    # rows (m, D): any D; no rows at all is the trivial SVM w = 0; groups: any integer labels
    add("svm.soft_margin_svm", lambda: svm.soft_margin_svm, lambda: dict(rows=F.ROWS, C=0.5),
        rows=array(sizes_ok=True, empty_ok=True), C=number("positive"), objective=option(*svm.OBJECTIVES),
        groups=index(2, like=[0, 1], labels=True), return_multipliers=flag)
    add("svm.penalty_threshold", lambda: svm.penalty_threshold, lambda: dict(rows=F.ROWS),
        rows=array(sizes_ok=True, empty_ok=True), groups=index(2, like=[0, 1], labels=True))
    # train
    gd_kinds = dict(problem=problem(), steps=size, lr=number("positive"), normalized=flag,
                    init=both(option("zeros", "uniform"), array(like=torch.eye(2))), record_every=bound,
                    loss=option(*model.LOSSES), seed=seed, gradient=option(*train.GRADIENTS), head=head(2),
                    eps=number("nonnegative"), ridge=SKIP, rule=option("official"), engine=option("auto", "compiled", "torch"))
    add("train.gd", lambda: train.gd, lambda: dict(problem=F.P, steps=10, lr=0.5), variant="W",
        why="m, ridge: (K, Q) only, censused in the KQ form", param=option(*train.PARAMS), m=SKIP, **gd_kinds)
    add("train.gd", lambda: train.gd, lambda: dict(problem=F.P, param="KQ", steps=10, lr=0.1, m=2), variant="KQ",
        why="the options shared with W: censused in the W form", param=SKIP, m=size, ridge=number("nonnegative"),
        init=both(option("zeros", "uniform"), custom(Bad("(K,) only", (torch.eye(2),), S),
                                                     Bad("W (d, d) for KQ", torch.eye(2), J))),
        **{k: v for k, v in gd_kinds.items() if k in ("problem", "steps", "lr")},
        **{k: SKIP for k in gd_kinds if k not in ("problem", "steps", "lr", "init", "ridge")})
    add("train.gd_prompt", lambda: train.gd_prompt, lambda: dict(problem=F.P, key=F.EYE, steps=20, lr=0.5),
        problem=problem(needs_Z=False), key=array(), steps=size, lr=number("positive"), normalized=flag,
        init=array(like=torch.zeros(2, dtype=torch.float64)), record_every=bound, loss=option(*model.LOSSES),
        engine=option("auto", "compiled", "torch"))
    add("train.gd_joint", lambda: train.gd_joint,
        lambda: dict(problem=F.P, key=F.EYE, steps=20, lr=0.1, init_p=torch.zeros(2, dtype=torch.float64),
                     init_v=torch.full((2,), 0.1, dtype=torch.float64)),
        problem=problem(needs_Z=False), key=array(), steps=size, lr=number("positive"), init_p=array(), init_v=array(),
        normalized=flag, record_every=bound, loss=option(*model.LOSSES))
    add("train.loss_gradient", lambda: train.loss_gradient, lambda: dict(problem=F.P, W=F.W), problem=problem(),
        W=array(), loss=option(*model.LOSSES), head=head(2, none_ok=True))
    add("train.lipschitz_W", lambda: train.lipschitz_W, lambda: dict(problem=F.P), problem=problem())
    add("train.weight_gradient", lambda: train.weight_gradient, lambda: dict(problem=F.P, W=F.W),
        nonfinite_ok=zero_gradients, problem=problem(),
        W=array(), loss=option(*model.LOSSES), head=head(2, none_ok=True),
        values=array(like=model.token_values(F.P), none_ok=True))
    add("train.logit_gradient", lambda: train.logit_gradient,
        lambda: dict(problem=F.P, logits=torch.zeros(2, 3, dtype=torch.float64)), nonfinite_ok=zero_gradients,
        problem=problem(needs_Z=False),
        logits=array(), loss=option(*model.LOSSES), head=head(2, none_ok=True),
        values=array(like=model.token_values(F.P), none_ok=True))
    add("train.regularization_path", lambda: train.regularization_path,
        lambda: dict(problem=F.P, radii=[1.0, 2.0], steps=5), variant="W", why="m: (K, Q) only, censused there",
        problem=problem(), radii=array(positive=True, sizes_ok=True, any_shape=True), param=option(*train.PARAMS),
        steps=size,
        loss=option(*model.LOSSES), m=SKIP, seed=seed, candidates=size)
    add("train.regularization_path", lambda: train.regularization_path,
        lambda: dict(problem=F.P, radii=[1.0], param="KQ", steps=5, m=2), variant="KQ",
        why="the rest: censused in the W form", problem=SKIP, radii=SKIP, param=SKIP, steps=SKIP, loss=SKIP,
        m=size, seed=SKIP, candidates=SKIP)
    add("train.initial_parameters", lambda: train.initial_parameters,
        lambda: dict(problem=F.P, param="KQ", init="uniform", m=3, seed=0), problem=problem(needs_Z=False),
        param=option(*train.PARAMS), init=both(option("zeros", "uniform", None), array(like=torch.eye(2))), m=size,
        seed=seed)
    add("train.initial_vector", lambda: train.initial_vector,
        kw(value=[1.0, 0.0], name="init", batch=(3,), d=2, device=None), value=array(), name=text,
        batch=lambda valid, default: shape(valid, default, batch=True), d=size, device=device,
        aliases=dict(value="init"))
    add("train.uniform_init", lambda: train.uniform_init, kw(shape=(4, 2), seed=0), shape=shape, seed=seed,
        device=device)
    add("train.why_not_compiled", lambda: train.why_not_compiled,
        kw(param="W", head=None, gradient="exact", device="cpu"), param=option(*train.PARAMS),
        head=head(2, none_ok=True, any_d=True), gradient=option(*train.GRADIENTS),
        device=lambda valid, default: device(valid, default, any_device=True))
    add("train.Trajectory.selection", lambda: F.TRAJ.selection, kw())
    # causal
    add("causal.Language", lambda: causal.Language,
        lambda: dict(embeddings=F.LANG.embeddings, start=F.LANG.start, transition=F.LANG.transition),
        embeddings=array(sizes_ok=True), start=both(array(), custom(Bad("sums to 2", F.LANG.start * 2, S))),
        transition=both(array(), custom(Bad("negative entry", _with_entry(F.LANG.transition, -0.5), S),
                                        Bad("rows sum to 2", F.LANG.transition * 2, S))))
    add("causal.Language.sample", lambda: F.LANG.sample, kw(n=4, T=6, seed=1), n=size, T=size, seed=seed)
    add("causal.SequenceProblem", lambda: causal.SequenceProblem, lambda: dict(X=F.CP.X, V=F.CP.V),
        X=array(), V=array(), causal=flag, device=device)
    calpha = lambda: index(3, like=F.CALPHA)  # noqa: E731
    add("causal.att_svm", lambda: causal.att_svm, lambda: dict(problem=F.CP), problem=sequence_problem,
        alpha=calpha(), C=number("positive"), objective=option(*causal.OBJECTIVES), slack=option(*causal.SLACKS),
        return_multipliers=flag)
    candidates = off_mask(lambda kwargs: causal.candidates(kwargs["problem"]))  # -inf for the tokens a query can't see
    separations = off_mask(lambda kwargs: causal.separation_mask(kwargs["problem"], kwargs.get("alpha")))
    for name, allowed in (("attention", None), ("logits", candidates), ("outputs", None)):
        add(f"causal.{name}", lambda name=name: getattr(causal, name), lambda: dict(problem=F.CP, W=F.CW),
            nonfinite_ok=allowed, problem=sequence_problem, W=array())
    for name in ("loss", "loss_gradient", "weight_gradient"):
        add(f"causal.{name}", lambda name=name: getattr(causal, name), lambda: dict(problem=F.CP, W=F.CW),
            nonfinite_ok=zero_gradients if name == "weight_gradient" else None, problem=sequence_problem, W=array(),
            loss=option(*model.LOSSES))
    for name, allowed in (("candidates", None), ("scores", candidates), ("optimal_tokens", None)):
        add(f"causal.{name}", lambda name=name: getattr(causal, name), lambda: dict(problem=F.CP),
            nonfinite_ok=allowed, problem=sequence_problem)
    for name in ("separation_mask", "conflicts", "feasible", "preference_cycle"):
        add(f"causal.{name}", lambda name=name: getattr(causal, name), lambda: dict(problem=F.CP),
            problem=sequence_problem, alpha=calpha())
    add("causal.selects_optimal", lambda: causal.selects_optimal, lambda: dict(problem=F.CP, alpha=F.CALPHA),
        problem=sequence_problem, alpha=calpha())
    add("causal.max_positive_margins", lambda: causal.max_positive_margins, lambda: dict(problem=F.CP),
        problem=sequence_problem, alpha=calpha(), return_W=flag)
    add("causal.penalty_threshold", lambda: causal.penalty_threshold, lambda: dict(problem=F.CP),
        problem=sequence_problem, alpha=calpha(), slack=option(*causal.SLACKS))
    add("causal.combine", lambda: causal.combine, lambda: dict(problem=F.CP, lam=F.CLAM), problem=sequence_problem,
        lam=array(), alpha=calpha())
    for name, allowed in (("margins", separations), ("total_slack", None), ("violations", None)):
        add(f"causal.{name}", lambda name=name: getattr(causal, name), lambda: dict(problem=F.CP, W=F.CW),
            nonfinite_ok=allowed, problem=sequence_problem, W=array(), alpha=calpha())
    add("causal.gd", lambda: causal.gd, lambda: dict(problem=F.CP, steps=20, lr=0.5, record_every=10),
        problem=sequence_problem, steps=size, lr=number("positive"), normalized=flag,
        init=both(option("zeros", "uniform"), array(like=torch.eye(4))), seed=seed, record_every=bound,
        loss=option(*model.LOSSES))
    add("causal.next_token_problem", lambda: causal.next_token_problem, lambda: dict(X=F.CP.X),
        X=array(sizes_ok=True))
    add("causal.next_token_problems", lambda: causal.next_token_problems, kw(n=4, T=5, d=8, V=6, seeds=[0, 1]),
        n=size, T=size, d=size, V=size, successors=size, seeds=int_list)
    add("causal.random_problem", lambda: causal.random_problem, kw(n=2, T=3, d=4, seed=0), n=size, T=size, d=size,
        seed=seed, batch=size, causal=flag)
    add("causal.synthetic_language", lambda: causal.synthetic_language, kw(V=5, d=3, seed=0), V=size, d=size,
        seed=seed, successors=size)
    # tensor
    Ajx = lambda: dict(Aj=F.INST.Aj, x=F.X0)  # noqa: E731
    for name in ("alpha", "f", "u"):
        add(f"tensor.{name}", lambda name=name: getattr(tensor, name), Ajx, Aj=array(), x=array())
    add("tensor.attention_row", lambda: tensor.attention_row, Ajx, Aj=array(), x=array(),
        attention=option(*tensor.ATTENTIONS))
    full = lambda: dict(Aj=F.INST.Aj, x=F.X0, h=F.INST.h, b=F.INST.b)  # noqa: E731
    for name in ("gradient", "hessian", "loss"):
        add(f"tensor.{name}", lambda name=name: getattr(tensor, name), full, Aj=array(), x=array(), h=array(),
            b=array(any_shape=True), loss=option(*tensor.LOSSES), attention=option(*tensor.ATTENTIONS))
    add("tensor.paper_gradient", lambda: tensor.paper_gradient, full, Aj=array(), x=array(), h=array(),
        b=array(any_shape=True))  # b: one label, or a batch of them (broadcast)
    add("tensor.lipschitz_bound", lambda: tensor.lipschitz_bound,
        lambda: dict(Aj=F.INST4.Aj, h=F.INST4.h, b=F.INST4.b), Aj=array(sizes_ok=True), h=array(),
        b=array(any_shape=True),
        loss=option(*tensor.LOSSES), attention=option(*tensor.ATTENTIONS))
    add("tensor.attention_study", lambda: tensor.attention_study,
        kw(radii=[1.0, 2.0], loss="logistic", T=3, d=2, batch=2, starts=1, steps=2),
        radii=array(positive=True, any_shape=True),
        loss=option(*tensor.LOSSES), T=size, d=size, batch=size, h_norm=number("positive"), starts=size, steps=size)
    add("tensor.descend", lambda: tensor.descend,
        lambda: dict(instance=F.INST4, x0=torch.zeros(4, dtype=torch.float64), lr=0.1, steps=20), instance=instance,
        x0=array(), lr=number("positive"), steps=size, loss=option(*tensor.LOSSES),
        attention=option(*tensor.ATTENTIONS))
    add("tensor.empirical_lipschitz", lambda: tensor.empirical_lipschitz,
        lambda: dict(instance=F.INST4, R=4.0, points=8, iterations=5), instance=instance, R=number("positive"),
        loss=option(*tensor.LOSSES), attention=option(*tensor.ATTENTIONS), points=size, iterations=size, seed=seed,
        close=number("positive"))
    add("tensor.gap_study", lambda: tensor.gap_study,
        kw(sizes=[2, 3], radii=[4.0], d=2, batch=2, points=4, iterations=2, starts=1, steps=2),
        sizes=both(array(positive=True), custom(Bad("[1, 3] (T=1)", [1, 3], J), Bad("[2.5]", [2.5], S))),
        radii=array(positive=True, any_shape=True), d=size, batch=size, loss=option(*tensor.LOSSES), points=size, iterations=size,
        starts=size, steps=size)
    add("tensor.h", lambda: tensor.h,
        lambda: dict(A3=torch.ones(4, 2, dtype=torch.float64), Y=torch.tensor([[1.0, 0.0], [2.0, 1.0]]), i0=0),
        A3=array(sizes_ok=True, empty_ok=True), Y=array(sizes_ok=True), i0=size)
    add("tensor.hessian_norm", lambda: tensor.hessian_norm,
        lambda: dict(function=lambda x: x[..., 0] ** 2 + 3 * x[..., 1] ** 2, x=torch.zeros(2, dtype=torch.float64)),
        function=function, x=array(sizes_ok=True), iterations=size, seed=seed)
    add("tensor.into_ball", lambda: tensor.into_ball,
        lambda: dict(Aj=torch.eye(2, 4, dtype=torch.float64), x=torch.tensor([3.0, 4.0, 7.0, 0.0]), R=1.0),
        Aj=array(), x=array(), R=number("positive"))
    kr = lambda: dict(A1=F.A, A2=F.A * 2)  # noqa: E731
    matrix = lambda: array(sizes_ok=True, empty_ok=True)  # noqa: E731 (any (rows, columns) matrix)
    add("tensor.kron", lambda: tensor.kron, kr, A1=matrix(), A2=matrix())
    add("tensor.kron_logits", lambda: tensor.kron_logits, lambda: dict(A1=F.A, A2=F.A * 2, X=F.W), A1=matrix(),
        A2=matrix(), X=array())
    add("tensor.row_block", lambda: tensor.row_block, lambda: dict(A1=F.A, A2=F.A * 2, j0=1), A1=matrix(),
        A2=matrix(), j0=size)
    add("tensor.log10_bound", lambda: tensor.log10_bound, kw(T=5, R=4.0),
        T=both(bound, custom(Bad("[5, 1]", [5, 1], J), Bad("[5, -2]", [5, -2], S))),
        R=both(number("positive"), custom(Bad("[4.0, -1.0]", [4.0, -1.0], S))))
    add("tensor.mat", lambda: tensor.mat, lambda: dict(x=torch.arange(6, dtype=torch.float64), rows=2), x=array(),
        rows=both(size, custom(Bad("4 (6 % 4 != 0)", 4, S))))
    add("tensor.max_hessian_norm", lambda: tensor.max_hessian_norm,
        lambda: dict(instance=F.INST4, R=4.0, starts=4, steps=20), instance=instance, R=number("positive"),
        loss=option(*tensor.LOSSES), attention=option(*tensor.ATTENTIONS), starts=size, steps=size,
        lr=number("positive"), seed=seed)
    add("tensor.random_instance", lambda: tensor.random_instance, kw(T=3, d=2, R=4.0, seed=0), T=size, d=size,
        R=number("positive"), seed=seed, batch=size, h_norm=number("positive"))
    add("tensor.ratios", lambda: tensor.ratios,
        lambda: dict(function=lambda x: 3 * x, x1=torch.zeros(3, 2, dtype=torch.float64),
                     x2=torch.ones(3, 2, dtype=torch.float64)), function=function, x1=array(), x2=array())
    add("tensor.sample_ball", lambda: tensor.sample_ball, lambda: dict(Aj=F.INST.Aj, R=4.0, count=10, seed=1),
        Aj=array(sizes_ok=True), R=number("positive"), count=size, seed=seed)
    add("tensor.vec", lambda: tensor.vec, lambda: dict(X=F.W), X=array(any_shape=True))
    # experiments.relu_head
    for name in ("errors", "largest_masked", "norms", "passes_filter"):
        add(f"experiments.relu_head.{name}", lambda name=name: getattr(relu_head, name), lambda: dict(runs=F.RUNS),
            runs=runs)
    add("experiments.relu_head.moved", lambda: relu_head.moved, lambda: dict(runs=F.RUNS), runs=runs, back=size)
    add("experiments.relu_head.lambda_sweep", lambda: relu_head.lambda_sweep, kw(lams=[0.5], batch=4, steps=100),
        lams=both(array(sizes_ok=True), custom(Bad("'0.5'", "0.5", S), Bad("[0.5, True]", [0.5, True], S),
                                  Bad("[-1.0]", [-1.0], S))),
        batch=size, seed=seed, T=size, steps=size)
    add("experiments.relu_head.search", lambda: relu_head.search, kw(d=4, count=2, chunk=8), d=size, count=size,
        start=bound, chunk=size, workers=size, max_candidates=bound)
    add("experiments.relu_head.select", lambda: relu_head.select,
        lambda: dict(runs=F.RUNS, keep=np.array([True, False])), runs=runs, keep=mask())
    add("experiments.relu_head.stored_seeds", lambda: relu_head.stored_seeds, kw(d=4), d=size)
    add("experiments.relu_head.token_fates", lambda: relu_head.token_fates,
        lambda: dict(paper=F.RUNS, exact=F.EXACT), paper=runs, exact=runs)
    add("experiments.relu_head.token_pairs", lambda: relu_head.token_pairs,
        lambda: dict(X=F.PP.X[:, :, :3], Z=F.PP.Z[:, :3], relevant=F.RELEVANT), X=array(), Z=array(),
        relevant=mask())
    add("experiments.relu_head.TokenPairs.project", lambda: F.PAIRS.project,
        lambda: dict(W=np.eye(3)), W=array())
    add("experiments.relu_head.train_runs", lambda: relu_head.train_runs, kw(d=4, seeds=[2, 3]), d=size,
        seeds=int_list, eps=number("nonnegative"))
    # experiments.svm_rank
    for name in ("feasible_problems", "spectra"):
        add(f"experiments.svm_rank.{name}", lambda name=name: getattr(svm_rank, name), kw(n=3, T=4, d=5, count=2),
            n=size, T=size, d=size, count=bound, max_draws=size, chunk=bound)
    add("experiments.svm_rank.grid", lambda: svm_rank.grid, kw(points=[(3, 4, 5)], count=2), points=points,
        count=bound, max_draws=size, chunk=bound, workers=size)
    define_new_registry()


def define_new_registry() -> None:
    """The public names added for chapters 8 to 12 (entrywise, spectral and diagonal SVMs, mirror, sign and
    diagonal descent, rates, next-token prediction)."""
    alpha3 = lambda: index(3, like=theory.optimal_tokens(F.P3))  # noqa: E731
    add("svm.spectral_att_svm", lambda: svm.spectral_att_svm, lambda: dict(X=F.P3, alpha=theory.optimal_tokens(F.P3)),
        variant="problem", why="Z: censused in the arrays form", X=problem(), Z=SKIP, alpha=alpha3(),
        solver=option(*svm.SPECTRAL_SOLVERS), aliases=dict(X="problem"))
    add("svm.spectral_att_svm", lambda: svm.spectral_att_svm,
        lambda: dict(X=F.P3.X, Z=F.P3.Z, alpha=theory.optimal_tokens(F.P3)), variant="arrays",
        why="solver: censused in the problem form", X=array(), Z=array(), alpha=alpha3(), solver=SKIP)
    norms = custom(Bad("None", None, S), Bad("'x'", "x", S), Bad("3", 3, S), Bad("1.5", 1.5, S), Bad("True", True, S),
                   Bad("0", 0, S), Bad("inf", INF, S))
    add("svm.diagonal_svm", lambda: svm.diagonal_svm, lambda: dict(problem=F.PD, alpha=theory.optimal_tokens(F.PD)),
        problem=problem(), alpha=index(2, like=theory.optimal_tokens(F.PD)), norm=norms, nonnegative=flag)
    add("svm.diagonal_features", lambda: svm.diagonal_features, lambda: dict(problem=F.P), problem=problem())
    descent = dict(problem=problem(), steps=size, lr=number("positive"), param=option(*train.PARAMS),
                   init=both(option("zeros", "uniform"), array(like=torch.eye(2))), m=SKIP, seed=seed,
                   record_every=bound, loss=option(*model.LOSSES))
    add("train.mirror_descent", lambda: train.mirror_descent, lambda: dict(problem=F.P, p=3.0, steps=10, lr=0.1),
        why="m: (K, Q) only", p=both(number("positive"), custom(Bad("0.5 (p < 1)", 0.5, S))),
        rule=option(None, "official"), eps=number("nonnegative"), **descent)
    add("train.sign_descent", lambda: train.sign_descent, lambda: dict(problem=F.P, steps=10, lr=0.01),
        why="m: (K, Q) only", **descent)
    add("train.dual_norm", lambda: train.dual_norm, lambda: dict(G=F.W, q=2.0), G=array(sizes_ok=True),
        q=custom(Bad("None", None, S), Bad("'x'", "x", S), Bad("'12'", "12", S), Bad("True", True, S),
                 Bad("nan", NAN, S), Bad("inf (the max norm)", INF, J), Bad("-inf", -INF, S), Bad("1e308", 1e308, J),
                 Bad("0.5 (q < 1)", 0.5, S), Bad("0", 0.0, S), Bad("-1", -1.0, S)),
        dims=custom(Bad("None", None, S), Bad("'x'", "x", S), Bad("(5,)", (5,), S), Bad("(-1, -1)", (-1, -1), S),
                    Bad("(0.5,)", (0.5,), S)))
    ones = torch.ones(12, dtype=torch.float64)
    add("train.diagonal_gd", lambda: train.diagonal_gd,
        lambda: dict(problem=F.PD, factorized=True, steps=20, lr=0.1, init=(0.1 * ones, 0.1 * ones)),
        problem=problem(), factorized=flag, steps=size, lr=number("positive"),
        init=custom(Bad("None", None, J), Bad("'x'", "x", S), Bad("(k,) only", (0.1 * ones,), S),
                    Bad("nan entry", (_with_entry(0.1 * ones, NAN), 0.1 * ones), S),
                    Bad("wrong shape", (0.1 * ones[:5], 0.1 * ones[:5]), S), Bad("meta", (ones.to("meta"), ones), S)),
        normalized=flag, record_every=bound, loss=option(*model.LOSSES))
    add("train.polyak", lambda: train.polyak, lambda: dict(problem=F.P, steps=10), problem=problem(), steps=size,
        init=both(option("zeros", "uniform", None), array(like=torch.eye(2))), record_every=bound,
        loss=option(*model.LOSSES), gradient=option(*train.POLYAK_GRADIENTS), seed=seed,
        engine=option("auto", "compiled", "torch"))
    add("train.optimal_loss", lambda: train.optimal_loss, lambda: dict(problem=F.P), problem=problem(needs_Z=False),
        loss=option(*model.LOSSES))
    add("train.log_loss_gap", lambda: train.log_loss_gap, lambda: dict(problem=F.P, W=F.W),
        nonfinite_ok=exact_zeros, problem=problem(),
        W=array(), loss=option(*model.LOSSES))
    add("train.log_attention_gap", lambda: train.log_attention_gap, lambda: dict(problem=F.P, W=F.W),
        nonfinite_ok=exact_zeros, problem=problem(), W=array(), alpha=index(3, like=F.ALPHA, none_ok=True))
    k = np.arange(1.0, 50.0)
    add("train.fit_line", lambda: train.fit_line, lambda: dict(x=k, y=3.0 * np.exp(-0.2 * k)), x=array(sizes_ok=True),
        y=array(positive=True), x_scale=option("linear", "log"), y_scale=option("linear", "log"))
    CONTAINERS["train.Fit"] = "fit_line's result"
    add("causal.NTPProblem", lambda: causal.NTPProblem,
        lambda: dict(ids=F.NTPE.ids, labels=F.NTPE.labels, embeddings=F.NTPE.embeddings),
        ids=index(3, like=F.NTPE.ids), labels=index(3, like=F.NTPE.labels), embeddings=array(sizes_ok=True))
    add("causal.ntp_problem", lambda: causal.ntp_problem, kw(ids=[[2, 3, 1], [2, 4, 0], [2, 3, 1]], labels=[2, 2, 1],
                                                             d=8, seed=0, K=5),
        ids=index(5, like=[[2, 3, 1], [2, 4, 0], [2, 3, 1]], sizes_ok=True), labels=index(5, like=[2, 2, 1]), d=size, seed=seed,
        K=size)
    for name in ("finite_subspace", "priority_components", "priority_graphs", "retrieved"):
        add(f"causal.{name}", lambda name=name: getattr(causal, name), lambda: dict(problem=F.NTP),
            problem=ntp_problem)
    add("causal.finite_part", lambda: causal.finite_part, lambda: dict(problem=F.NTP), problem=ntp_problem,
        max_steps=bound)
    add("causal.graph_svm", lambda: causal.graph_svm, lambda: dict(problem=F.NTP), problem=ntp_problem,
        norm=option(*causal.GRAPH_NORMS))
    W4 = lambda: dict(problem=F.NTP, W=torch.eye(4, dtype=torch.float64))  # noqa: E731
    for name in ("ntp_attention", "ntp_logits", "ntp_probabilities", "ntp_gradient"):
        add(f"causal.{name}", lambda name=name: getattr(causal, name), W4, problem=ntp_problem, W=array())
    add("causal.ntp_loss", lambda: causal.ntp_loss, W4, problem=ntp_problem, W=array(),
        mask=mask(like=torch.ones(3, 3, dtype=torch.bool)))
    add("causal.ntp_gd", lambda: causal.ntp_gd, lambda: dict(problem=F.NTP, steps=20, lr=0.1, record_every=10),
        problem=ntp_problem, steps=size, lr=number("positive"), normalized=flag,
        init=both(option("zeros", "uniform"), array(like=torch.eye(4))), seed=seed, record_every=bound)


# ------------------------------------------------------------------ completeness: every public name has an entry

def public_targets() -> dict[str, list[str]]:
    """Public name -> the public method names (of a class) that take arguments besides self."""
    targets = {}
    for namespace in NAMESPACES:
        module = importlib.import_module(f"attnsvm.{namespace}")
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isfunction(obj):
                targets[f"{namespace}.{name}"] = []
            elif inspect.isclass(obj):
                targets[f"{namespace}.{name}"] = [
                    f"{namespace}.{name}.{attr}" for attr, member in inspect.getmembers(obj, inspect.isfunction)
                    if not attr.startswith("_") and member.__module__.startswith("attnsvm")]
    return targets


def check_registry(missing_ok: bool = False) -> None:
    names = {entry.target for entry in REGISTRY}
    missing = []
    for target, methods in public_targets().items():
        if target not in names and target not in CONTAINERS:
            missing.append(target)
        missing += [m for m in methods if m not in names and not any(m.startswith(c + ".") and c in ("heads.Head",)
                                                                      for c in CONTAINERS)]
    if missing:
        message = f"bad_input_census: public names without a valid call in the registry (add them): {missing}"
        if not missing_ok:
            sys.exit(message)
        print(message + " (left out: --missing-ok)", flush=True)
    for entry in REGISTRY:
        params = [p for p in inspect.signature(entry.call()).parameters.values()
                  if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        unknown = [p.name for p in params if p.name not in entry.kinds]
        if unknown:
            sys.exit(f"bad_input_census: {entry.name}: parameters without a kind in the registry: {unknown}")


# ------------------------------------------------------------------ one call in a forked child

def _walk(value, depth=0):
    """Yield every tensor, array and float inside a result (tuples, lists, dicts, dataclasses, the library's
    objects)."""
    if depth > 6 or value is None or isinstance(value, (str, bytes, bool)):
        return
    if torch.is_tensor(value) or isinstance(value, (np.ndarray, float, np.floating, int, np.integer)):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _walk(item, depth + 1)
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _walk(item, depth + 1)
    elif dataclasses.is_dataclass(value):
        for field in dataclasses.fields(value):
            yield from _walk(getattr(value, field.name), depth + 1)
    elif type(value).__module__.startswith("attnsvm") and hasattr(value, "__dict__"):
        yield from _walk(vars(value), depth + 1)


def inspect_result(result) -> dict:
    nan = inf = total = 0
    meta = False
    for item in _walk(result):
        if torch.is_tensor(item):
            if item.device.type == "meta":
                meta = True
                continue
            if not (item.is_floating_point() or item.is_complex()):
                total += item.numel()
                continue
            item = item.detach().cpu().numpy()
        array_ = np.asarray(item)
        if array_.dtype.kind in "fc":
            nan += int(np.isnan(array_).sum())
            inf += int(np.isinf(array_).sum())
        total += array_.size
    return dict(nan=nan, inf=inf, total=max(total, 1), meta=meta, type=type(result).__name__)


def child(fn: Callable, kwargs: dict, wfd: int, allowed: Callable | None) -> None:
    """In the forked child: cap its memory, run the call, send back what happened, exit without cleanup."""
    os.setpgid(0, 0)
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    try:
        result = fn(**kwargs)
        report = dict(outcome="returned", **inspect_result(result))
        if allowed is not None:
            report["allowed"] = allowed(kwargs, result)
    except MemoryError as err:
        report = dict(outcome="memory", message=f"MemoryError {err}"[:300])
    except BaseException as err:  # noqa: BLE001 (everything is a finding)
        report = dict(outcome="raised", type=type(err).__name__, module=type(err).__module__,
                      clear_type=isinstance(err, CLEAR_TYPES), index=isinstance(err, (IndexError, KeyError)),
                      message=" ".join(str(err).split())[:400])
    try:
        payload = pickle.dumps(report)
    except Exception as err:  # noqa: BLE001
        payload = pickle.dumps(dict(outcome="raised", type="PicklingError", module="", clear_type=False, index=False,
                                    message=str(err)[:300]))
    view = memoryview(payload)
    while view:
        view = view[os.write(wfd, view):]
    os._exit(0)


class Case(NamedTuple):
    entry: Entry
    arg: str | None  # None: the valid call
    bad: Bad | None
    kwargs: dict


class Result(NamedTuple):
    case: Case
    cls: str
    suspect: bool
    message: str
    seconds: float


SHAPES = re.compile(r"\((?:\s*[\w.+*-]{1,4}\s*,)+\s*[\w.+*-]{0,4}\s*\)")  # (n, T, d), (..., d, m): not names


def _names(message: str, name: str) -> bool:
    """Whether `message` names the argument `name`: as a word (not inside a shape like (n, T, d), not in R^d or
    x_i); the article "a" only where it reads as the argument ("a must", "a and b", "a (")."""
    if name == "a":
        pattern = r"(?:^|[\s(,'\"`])a(?=\s*(?:must|=|has\b|holds|is\b|contains|asks|and\b|\(|\[|:))"
    else:
        pattern = rf"(?<![\w^_]){re.escape(name)}(?![\w^_])"
    return re.search(pattern, SHAPES.sub(" ", message)) is not None


def classify(case: Case, report: dict | None, status: str, baseline: dict | None) -> tuple[str, str]:
    if status == "hang":
        return "hang", ""
    if report is None:
        return "crash", status
    if report["outcome"] == "memory":
        return "crash", report["message"]
    if report["outcome"] == "raised":
        message = f"{report['type']}: {report['message']}"
        if case.arg is None:
            return "unclear", message
        names = [case.arg] + ([case.entry.aliases[case.arg]] if case.arg in case.entry.aliases else [])
        if case.bad.lenient:
            names += list(case.kwargs) + [case.entry.aliases.get(name, name) for name in case.kwargs]
        named = any(_names(report["message"], name) for name in names)
        typed = report["clear_type"] or (case.entry.index_errors and report["index"])
        return ("clear" if typed and named else "unclear"), message
    summary = f"returned {report['type']}"
    if report["meta"]:
        return "accepted", summary + " (meta tensors)"
    bad = report["nan"] + report["inf"]
    if bad > report.get("allowed", 0):
        return "nan", summary + f" ({report['nan']} NaN, {report['inf']} inf of {report['total']})"
    return "accepted", summary


def run_cases(cases: list[Case], jobs: int, timeout: float, baselines: dict, progress: bool) -> list[Result]:
    results, pending, running = [], list(reversed(cases)), {}
    done = 0
    while pending or running:
        while pending and len(running) < jobs:
            case = pending.pop()
            rfd, wfd = os.pipe()
            fn = case.entry.call()
            pid = os.fork()
            if pid == 0:  # the child
                os.close(rfd)
                child(fn, case.kwargs, wfd, case.entry.nonfinite_ok)
            os.close(wfd)
            running[pid] = [case, rfd, time.monotonic(), b""]
        readable, _, _ = select.select([r[1] for r in running.values()], [], [], 0.05)
        for pid, slot in list(running.items()):
            case, rfd, start, buffer = slot
            if rfd in readable:
                chunk = os.read(rfd, 1 << 16)
                slot[3] = buffer + chunk
                if chunk:
                    continue
            waited, status = os.waitpid(pid, os.WNOHANG)
            elapsed = time.monotonic() - start
            if waited == 0 and elapsed < timeout:
                continue
            if waited == 0:  # past the time limit: end the child and what it started
                _kill_group(pid)
                os.waitpid(pid, 0)
                kind, report = "hang", None
            else:
                while True:  # the rest of the report
                    chunk = os.read(rfd, 1 << 16)
                    if not chunk:
                        break
                    slot[3] += chunk
                _kill_group(pid)
                report = pickle.loads(slot[3]) if slot[3] else None
                kind = "done" if report else _status(status)
            os.close(rfd)
            del running[pid]
            cls, message = classify(case, report, kind, baselines.get(case.entry.name))
            results.append(Result(case, cls, bool(case.bad and case.bad.suspect and cls == "accepted"), message,
                                  elapsed))
            done += 1
            if progress and done % 200 == 0:
                print(f"  ... {done}/{len(cases)} calls", file=sys.stderr, flush=True)
    return results


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _status(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by signal {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exited with status {os.WEXITSTATUS(status)} without a report"


# ------------------------------------------------------------------ the census

def make_cases(entries: list[Entry]) -> tuple[list[Case], dict, list[str]]:
    """The valid call of each entry (run here, in the parent: it must work, and it warms the compiled code) and its
    bad variants."""
    cases, baselines, broken = [], {}, []
    for entry in entries:
        kwargs = entry.valid()
        try:
            baselines[entry.name] = inspect_result(entry.call()(**kwargs))
        except Exception as err:  # noqa: BLE001
            broken.append(f"{entry.name}: the registry's valid call fails: {type(err).__name__}: {err}")
            continue
        cases.append(Case(entry, None, None, kwargs))
        signature = inspect.signature(entry.call())
        for arg, kind in entry.kinds.items():
            if kind is SKIP:
                continue
            default = signature.parameters[arg].default
            valid = kwargs.get(arg, getattr(kind, "like", None))
            for bad in kind(valid, default):
                cases.append(Case(entry, arg, bad, {**kwargs, arg: bad.value}))
    return cases, baselines, broken


def report(results: list[Result], seconds: float, broken: list[str]) -> None:
    valid = [r for r in results if r.case.arg is None]
    bad = [r for r in results if r.case.arg is not None]
    print(f"attnsvm {attnsvm.__version__} bad-input census: {len(valid)} valid calls "
          f"({len({r.case.entry.target for r in valid})} public names), {len(bad)} bad calls, {seconds:.0f} s")
    failed = [r for r in valid if r.cls != "accepted"]
    print(f"valid calls that did not return a finite result in a child: {len(failed)}")
    for r in failed:
        print(f"  {r.case.entry.name}: {r.cls}: {r.message}")
    for line in broken:
        print(f"  {line}")
    counts = Counter(r.cls for r in bad)
    suspect = sum(r.suspect for r in bad)
    print("\nbad calls by class")
    for cls in CLASSES:
        extra = f"   ({suspect} SUSPECT)" if cls == "accepted" else ""
        print(f"  {cls:9s} {counts.get(cls, 0):5d}{extra}")
    print(f"  {'total':9s} {len(bad):5d}")
    by_namespace = defaultdict(Counter)
    for r in bad:
        namespace = r.case.entry.target.rsplit(".", 1)[0]
        namespace = next((ns for ns in sorted(NAMESPACES, key=len, reverse=True)
                          if r.case.entry.target.startswith(ns + ".")), namespace)
        by_namespace[namespace][r.cls] += 1
        by_namespace[namespace]["SUSPECT"] += r.suspect
    print("\nby namespace    " + " ".join(f"{c:>8s}" for c in CLASSES + ("SUSPECT",)))
    for namespace in NAMESPACES:
        row = by_namespace.get(namespace, Counter())
        print(f"  {namespace:22s}" + " ".join(f"{row.get(c, 0):8d}" for c in CLASSES + ("SUSPECT",)))
    order = {"crash": 0, "hang": 1, "nan": 2, "unclear": 3, "accepted": 4}
    listed = sorted((r for r in bad if r.cls != "clear"),
                    key=lambda r: (order[r.cls], not r.suspect, r.case.entry.name, r.case.arg))
    print("\nevery call that is not a clear error (function | argument | value | outcome | message)")
    for r in listed:
        outcome = r.cls + (" SUSPECT" if r.suspect else "")
        print(f"  {r.case.entry.name} | {r.case.arg} | {r.case.bad.label} | {outcome} | {r.message[:220]}")
    slow = sorted(bad, key=lambda r: -r.seconds)[:5]
    print("\nslowest calls: " + ", ".join(f"{r.case.entry.name}({r.case.arg}={r.case.bad.label}) {r.seconds:.1f} s"
                                          for r in slow))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2, help="calls at a time (default 2)")
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds per call (default 20)")
    parser.add_argument("--only", default="*", help="fnmatch pattern on the entry names, e.g. 'train.*'")
    parser.add_argument("--missing-ok", action="store_true",
                        help="census what the registry has, listing the public names it lacks (default: stop)")
    args = parser.parse_args(argv)
    start = time.monotonic()
    build_fixtures()
    define_registry()
    check_registry(args.missing_ok)
    entries = [e for e in REGISTRY if fnmatch.fnmatch(e.name, args.only) or fnmatch.fnmatch(e.target, args.only)]
    cases, baselines, broken = make_cases(entries)
    results = run_cases(cases, args.jobs, args.timeout, baselines, progress=True)
    report(results, time.monotonic() - start, broken)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
