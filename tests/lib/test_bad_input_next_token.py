"""Bad and extreme input for next-token prediction with one query (`attnsvm.causal`'s ``ntp_*`` functions, the
priority graphs, the graph SVM and the finite part), in the style of test_bad_input_causal.py: one hypothesis
property per public function, in which one argument of an otherwise valid, small call is replaced by a bad or
extreme value, and the call must either return a valid (finite) result or raise TypeError/ValueError/
FloatingPointError/SolverError naming that argument. An InfeasibleSVM is a valid answer about the input."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnsvm import causal, svm

COVERED = {
    "causal.ntp_problem", "causal.ntp_logits", "causal.ntp_attention", "causal.ntp_probabilities", "causal.ntp_loss",
    "causal.ntp_gradient", "causal.ntp_gd", "causal.priority_graphs", "causal.priority_components",
    "causal.retrieved", "causal.graph_svm", "causal.finite_subspace", "causal.finite_part", "causal.official_problems",
}

CLEAR = (TypeError, ValueError, FloatingPointError, svm.SolverError)
F64 = torch.float64
IDS = [[1, 2, 0], [2, 1, 0], [1, 3, 0]]
LABELS = [1, 2, 1]
P = causal.ntp_problem(IDS, LABELS, d=4, seed=0)
W = torch.tensor([[0.5, -0.2, 0.1, 0.0], [0.1, 0.3, -0.4, 0.2], [0.0, 0.2, 0.6, -0.1], [0.3, 0.0, 0.1, 0.4]],
                 dtype=F64)

NUMBERS = [None, "0.5", "abc", True, False, float("nan"), float("inf"), -1.0, 0.0, 1e-300, 1e300, 1.5, [1.0],
           np.float64(0.25), object()]
INTEGERS = [None, "3", True, -1, 0, 1.5, 2.0, 10**15, 2**70, np.int64(2), [2], object()]
FLAGS = [None, "no", 0, 1, np.bool_(True), [True], object()]
OPTIONS = [None, 3, "", "l1", ["fro"], np.array(["fro"]), object()]
SEEDS = [None, "12", -1, 1.5, True, 2**70, np.int64(3), [1, 2], object()]


def _names(message: str, name: str) -> bool:
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", message) is not None


def _finite(value) -> bool:
    if value is None or isinstance(value, (bool, int, np.bool_, np.integer, dict, list)):
        return True
    if isinstance(value, (float, np.floating)):
        return bool(np.isfinite(value))
    if torch.is_tensor(value):
        return not value.is_floating_point() or bool(torch.isfinite(value.detach()).all())
    if isinstance(value, np.ndarray):
        return value.dtype.kind not in "fc" or bool(np.isfinite(value).all())
    if isinstance(value, tuple):
        return all(_finite(part) for part in value)
    if hasattr(value, "__dataclass_fields__"):
        return all(_finite(getattr(value, name)) for name in value.__dataclass_fields__)
    return True


def _gradient_ok(result) -> bool:
    direction, log_scale = result
    return _finite(direction) and not bool(torch.isnan(log_scale) or log_scale == torch.inf)


def _arrays(valid) -> st.SearchStrategy:
    v = torch.as_tensor(valid, dtype=F64)
    nan = v.clone().flatten()
    nan[0] = float("nan")
    return st.sampled_from([v * s for s in (1e-300, 1e-160, 1e160, 1e300, -1e300)] + [
        nan.reshape(v.shape), v.clone().requires_grad_(True), v[..., None], v.flatten(), v.tolist(),
        v.numpy().astype(np.float32), v.to(torch.complex128), v > 0, v.to(torch.int64),
        torch.empty(v.shape, device="meta"), None, "abc", 3, True, [["a", "b"]], v[..., :0], v[..., 0],
        torch.cat([v, v], -1)])


def _ids() -> st.SearchStrategy:
    return st.sampled_from([None, "abc", 3, [], [[]], [1, 2, 0], [[1, 2], [0]], [[1, 2, 0]], [[1.5, 2, 0]] * 3,
                            [[-1, 2, 0]] * 3, [[1, 2, 9]] * 3, np.array(IDS, dtype=np.float64),
                            torch.tensor(IDS), torch.tensor(IDS, device="meta"), [[1, 1, 1]] * 3, object(),
                            [["a", "b", "c"]] * 3])


def _labels() -> st.SearchStrategy:
    return st.sampled_from([None, "abc", 1, [], [1, 2], [1, 2, 3], [0.5, 1, 1], [-1, 1, 1], [9, 1, 1],
                            torch.tensor(LABELS), torch.tensor(LABELS, device="meta"), [[1, 2, 1]], object()])


def _problems() -> st.SearchStrategy:
    E = P.embeddings
    return st.sampled_from([
        None, "problem", P.X, causal.random_problem(2, 3, 3, seed=0), causal.NTPProblem(IDS, LABELS, E * 1e300),
        causal.NTPProblem(IDS, LABELS, E * 1e-160), causal.NTPProblem(IDS, LABELS, E * 1e160),
        causal.NTPProblem(IDS, LABELS, E * 1e-300), causal.NTPProblem(IDS, LABELS, torch.zeros_like(E)),
        causal.NTPProblem(IDS, LABELS, E[:, :1]), causal.NTPProblem([[1], [2], [1]], LABELS, E),
        causal.NTPProblem([[1, 1, 1], [2, 2, 2], [1, 1, 1]], LABELS, E),
        causal.NTPProblem(IDS, LABELS, E.clone().requires_grad_(True))])


def _masks() -> st.SearchStrategy:
    keep = causal.retrieved(P)
    return st.sampled_from([None, keep, keep.numpy(), keep.int(), keep.double(), keep[:2], keep.tolist(), "abc",
                            torch.zeros(3, 3, dtype=torch.bool), torch.ones(3, 3, dtype=torch.bool) * 2, object(),
                            torch.empty(3, 3, device="meta")])


@dataclass
class Spec:
    call: Callable
    valid: Callable[[], dict]
    pools: dict
    check: Callable = _finite
    names: dict = field(default_factory=dict)


def _problem_spec(function, *, W_arg=False, check=_finite, **extra) -> Spec:
    def valid():
        arguments = {"problem": P}
        if W_arg:
            arguments["W"] = W
        return dict(arguments, **{name: value for name, (value, _) in extra.items()})
    pools = {"problem": _problems()}
    if W_arg:
        pools["W"] = _arrays(W)
    pools.update({name: pool for name, (_, pool) in extra.items()})
    return Spec(lambda **a: function(**a), valid, pools, check)


SPECS = {
    "causal.NTPProblem": Spec(
        lambda **a: causal.NTPProblem(**a), lambda: {"ids": IDS, "labels": LABELS, "embeddings": P.embeddings},
        {"ids": _ids(), "labels": _labels(), "embeddings": _arrays(P.embeddings)}),
    "causal.ntp_problem": Spec(
        lambda **a: causal.ntp_problem(**a), lambda: {"ids": IDS, "labels": LABELS, "d": 4, "seed": 0, "K": None},
        {"ids": _ids(), "labels": _labels(), "d": st.sampled_from(INTEGERS), "seed": st.sampled_from(SEEDS),
         "K": st.sampled_from(INTEGERS + [3, 4])}),
    "causal.ntp_logits": _problem_spec(causal.ntp_logits, W_arg=True),
    "causal.ntp_attention": _problem_spec(causal.ntp_attention, W_arg=True),
    "causal.ntp_probabilities": _problem_spec(causal.ntp_probabilities, W_arg=True),
    "causal.ntp_loss": _problem_spec(causal.ntp_loss, W_arg=True, mask=(None, _masks())),
    "causal.ntp_gradient": _problem_spec(causal.ntp_gradient, W_arg=True, check=_gradient_ok),
    "causal.ntp_gd": _problem_spec(
        causal.ntp_gd, steps=(3, st.sampled_from(INTEGERS)), lr=(0.1, st.sampled_from(NUMBERS)),
        normalized=(True, st.sampled_from(FLAGS)),
        init=(None, st.one_of(_arrays(W), st.sampled_from(OPTIONS + ["zeros", "uniform"]))),
        seed=(0, st.sampled_from(SEEDS)), record_every=(1, st.sampled_from(INTEGERS)),
        engine=("auto", st.sampled_from(OPTIONS + ["compiled", "torch", "numba", "Auto"]))),
    "causal.priority_graphs": _problem_spec(causal.priority_graphs),
    "causal.priority_components": _problem_spec(causal.priority_components),
    "causal.retrieved": _problem_spec(causal.retrieved),
    "causal.graph_svm": _problem_spec(causal.graph_svm, norm=("fro", st.sampled_from(OPTIONS + ["nuc"]))),
    "causal.finite_subspace": _problem_spec(causal.finite_subspace),
    "causal.finite_part": _problem_spec(causal.finite_part, max_steps=(100, st.sampled_from(INTEGERS))),
    "causal.official_problems": Spec(
        lambda **a: causal.official_problems(**a), lambda: {"count": 1, "n": 6, "T": 4, "K": 6, "d": 8, "seed": 1},
        {"count": st.sampled_from(INTEGERS), "n": st.sampled_from(INTEGERS), "T": st.sampled_from(INTEGERS),
         "K": st.sampled_from(INTEGERS), "d": st.sampled_from(INTEGERS), "seed": st.sampled_from(SEEDS)}),
}


def test_every_covered_function_has_a_property():
    assert {name for name in SPECS if name[name.index(".") + 1].islower()} == COVERED


def test_a_label_absent_from_its_sequence_is_refused():
    with pytest.raises(ValueError, match=r"labels of sequences \[1\] do not occur in them"):
        causal.NTPProblem([[1, 2, 0], [2, 3, 0]], [1, 1], torch.eye(4, dtype=F64))


def test_a_vocabulary_too_small_for_the_ids_is_refused():
    with pytest.raises(ValueError, match=r"K=2 is too small: ids and labels use token ids up to 3"):
        causal.ntp_problem([[1, 3, 0]], [1], d=4, seed=0, K=2)


def test_a_weight_matrix_of_the_wrong_size_is_refused():
    with pytest.raises(ValueError, match=r"W must have shape \(4, 4\)"):
        causal.ntp_loss(P, torch.zeros(3, 3, dtype=F64))


@pytest.mark.parametrize("function", sorted(SPECS))
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(data=st.data())
def test_bad_or_extreme_argument_gives_a_valid_result_or_an_error_naming_it(function, data):
    _check(function, SPECS[function], data, {})


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(data=st.data())
def test_ntp_gd_on_the_torch_engine_too(data):
    """ntp_gd's default engine is the compiled loop: the same bad and extreme arguments on its torch loop."""
    spec = SPECS["causal.ntp_gd"]
    pools = {name: pool for name, pool in spec.pools.items() if name != "engine"}
    _check("causal.ntp_gd", Spec(spec.call, spec.valid, pools, spec.check), data, {"engine": "torch"})


def _check(function: str, spec: Spec, data, base: dict) -> None:
    argument = data.draw(st.sampled_from(sorted(spec.pools)), label="argument")
    value = data.draw(spec.pools[argument], label="value")
    arguments = dict(spec.valid(), **base, **{argument: value})
    try:
        result = spec.call(**arguments)
    except svm.InfeasibleSVM:
        return
    except CLEAR as err:
        name = spec.names.get(argument, argument)
        assert _names(str(err), name), f"{function}({argument}={value!r}): {type(err).__name__} without {name!r}: {err}"
        return
    assert spec.check(result), f"{function}({argument}={value!r}) returned an invalid result: {result!r}"
