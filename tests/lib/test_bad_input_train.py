"""Bad input for the training modules (model, gradients, initial, path, compiled, train), issue 21: every public
function either returns a valid result (finite, of the right shape) or raises a TypeError, ValueError or
FloatingPointError whose message names the argument the caller passed; never a NaN, a hang or a deep error."""

import os
import re
import time
from functools import partial

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsvm import data, heads, model, train
from attnsvm.train import _cpu_loop as compiled, _gradients as gradients, _initial as initial, _path as path

COVERED = {"model.as_key_query", "model.logits", "model.queries", "model.attention",
           "model.token_values", "model.outputs", "model.loss", "model.support_gradient", "model.min_margin",
           "train.logit_gradient", "train.weight_gradient", "train.uniform_init",
           "train.initial_parameters", "train.initial_vector", "train.regularization_path", "train.why_not_compiled",
           "train._cpu_loop.gd", "train.loss_gradient", "train.lipschitz_W", "train.gd", "train.gd_prompt", "train.gd_joint",
           "train.Trajectory.selection"}
ERRORS = (TypeError, ValueError, FloatingPointError)
EXAMPLES = int(os.environ.get("BAD_INPUT_EXAMPLES", 30))  # more to search harder by hand
n, T, d = 2, 3, 2
PROBLEM = data.random_problem(n, T, d, seed=0)
BATCHED = data.random_problem(n, T, d, seed=1, batch=2)
W = initial.uniform_init((d, d), seed=3)
ALPHA = [0, 1]


def _maybe(build):
    """build(), or the string "unbuildable" where construction itself refuses it (then a bad value too)."""
    try:
        return build()
    except ERRORS:
        return "unbuildable"


def _raw_problem(X, Y, Z, v):
    """A Problem that skipped its constructor's checks (a caller's hand-made object)."""
    problem = object.__new__(data.Problem)
    for name, value in zip("XYZv", (X, Y, Z, v)):
        object.__setattr__(problem, name, value)
    return problem


def _with(tensor, value):
    out = torch.as_tensor(tensor, dtype=torch.float64).clone()
    out.view(-1)[0] = value
    return out


P = PROBLEM
BAD_PROBLEMS = [PROBLEM, BATCHED, None, "problem", P.X, 3,
                _maybe(lambda: data.Problem(P.X * 1e160, P.Y, P.Z, P.v)),
                _maybe(lambda: data.Problem(P.X * 1e-160, P.Y, P.Z * 1e-160, P.v)),
                _maybe(lambda: data.Problem(P.X * 1e100, P.Y, P.Z * 1e100, P.v * 1e160)),
                _maybe(lambda: data.Problem(P.X.clone().requires_grad_(), P.Y, P.Z, P.v)),
                _maybe(lambda: data.Problem(P.X, P.Y, None, P.v)),  # paper B's prompt model: no queries
                _raw_problem(P.X[:, :1], P.Y, P.Z, P.v),  # T = 1
                _raw_problem(P.X[:0], P.Y[:0], P.Z[:0], P.v),  # n = 0
                _raw_problem(P.X[..., :0], P.Y, P.Z[..., :0], P.v[:0]),  # d = 0
                _raw_problem(*(t.to("meta") for t in (P.X, P.Y, P.Z, P.v)))]  # not on the CPU
SCALARS = [0, -1, 1e-160, 1e160, 1e308, float("nan"), float("inf"), -float("inf"), "0.1", None, True, [0.1],
           np.float64(0.3), torch.tensor(0.3), torch.tensor(0.3, requires_grad=True), complex(1, 1)]
INTEGERS = [0, -1, 2.5, "3", None, True, np.int64(2), 10**9, 10**12, 2**64, torch.tensor(2), [2]]
BOOLEANS = [True, False, None, "no", "yes", 0, 1, np.bool_(False), torch.tensor(True), [True]]
OPTIONS = ["bogus", None, 3, True, ["W"], np.array(["W", "KQ"]), "w", ""]
HEADS = [None, "relu", "linear", object(), len, heads.random_relu(d, seed=0), heads.Linear(P.v),
         heads.Lambda(P.v, 0.5), heads.random_relu(d + 1, seed=0), heads.random_relu(d, seed=0, batch=3),
         _maybe(lambda: heads.Linear(torch.ones(d + 1))), _maybe(lambda: heads.Linear(torch.tensor([np.nan, 1.0]))),
         _maybe(lambda: heads.Linear(P.v.float())), _maybe(lambda: heads.Linear(P.v.to("meta"))),
         _maybe(lambda: heads.ReLU(torch.eye(d) * 1e160)), _maybe(lambda: heads.Linear(P.v * 1e308))]


def arrays(valid):
    """Bad and extreme variants of a valid array: scales, NaN/inf, dtypes, shapes, devices, types, autograd."""
    v = torch.as_tensor(valid, dtype=torch.float64)
    return st.sampled_from([
        v, v.numpy(), v.tolist(), v * 1e160, v * 1e-160, v * 1e308, -v, v.float(), v.clone().requires_grad_(),
        _with(v, np.nan), _with(v, np.inf), _with(v, -np.inf), v.to(torch.bool), v.to(torch.complex128),
        v.to(torch.int64), v[..., :0], v[..., None], v.reshape(-1), torch.ones(5, 5, 5), v.to("meta"),
        np.array([["a", "b"]]), "abc", None, 1.0, [[1.0, "a"]], {"W": 1}, torch.zeros(()),
    ])


def _tensors(result):
    """Every tensor or float array in a result (tensors, tuples, dataclasses)."""
    if torch.is_tensor(result):
        yield result
    elif isinstance(result, np.ndarray) and result.dtype.kind == "f":
        yield torch.from_numpy(result)
    elif isinstance(result, (tuple, list)):
        for item in result:
            yield from _tensors(item)
    elif hasattr(result, "__dataclass_fields__"):
        for name in result.__dataclass_fields__:
            yield from _tensors(getattr(result, name))


def _names(name, spec):
    """What an error about argument `name` may call it (another problem may leave any argument inconsistent)."""
    if name == "problem":
        return tuple(spec)
    return {"kind": ("kind", "loss"), "value": ("init",)}.get(name, (name,))


def _check(function, spec, base=None, shape=None):
    """A hypothesis test: `function(**arguments)` with one or two arguments of `spec` (name: (valid, bad values))
    drawn bad, on top of a valid `base` (a strategy of overrides), either returns finite tensors (of
    `shape(arguments)` if given) or raises one of ERRORS whose message names a drawn argument."""
    base = st.just({}) if base is None else base

    @settings(max_examples=EXAMPLES, deadline=None, database=None)
    @given(st.data())
    def test(draw):
        arguments = {name: valid for name, (valid, _) in spec.items()}
        arguments.update(draw.draw(base, label="base"))
        names = draw.draw(st.lists(st.sampled_from(sorted(spec)), min_size=1, max_size=2, unique=True), label="bad")
        for name in names:
            bad = spec[name][1]
            arguments[name] = draw.draw(bad if isinstance(bad, st.SearchStrategy) else st.sampled_from(bad), label=name)
        try:
            result = function(**arguments)
        except ERRORS as err:
            pattern = "|".join(rf"\b{re.escape(alias)}\b" for name in names for alias in _names(name, spec))
            assert re.search(pattern, str(err)), f"{type(err).__name__} does not name {names}: {err}"
            return
        for tensor in _tensors(result):
            assert torch.isfinite(tensor.detach()).all(), f"{function.__name__} returned non-finite values"
        if shape is not None:
            expected, got = shape(arguments), tuple(_first(result).shape)
            assert got == expected, f"{function.__name__} returned shape {got}, expected {expected}"
    return test


def _first(result):
    return next(iter(_tensors(result)))


def _dims(arguments):
    """The batch shape, n, T and d of the arguments' problem."""
    problem = arguments.get("problem", PROBLEM)
    return problem.batch_shape, problem.n, problem.T, problem.d


def _batch(arguments):
    return _dims(arguments)[0]


def _tokens(arguments):
    """(..., n, T): one entry per token."""
    batch, n_, T_, _ = _dims(arguments)
    return batch + (n_, T_)


def _matrices(arguments):
    """(..., d, d): one matrix per problem."""
    batch, _, _, d_ = _dims(arguments)
    return batch + (d_, d_)


V_FIELD = model.token_values(PROBLEM)
KQ = (initial.uniform_init((d, d), 0), initial.uniform_init((d, d), 1))
LOGITS = model.logits(PROBLEM, W)
MASK = torch.ones(n, T, dtype=torch.bool)
PROB = (PROBLEM, BAD_PROBLEMS)
KIND = ("logistic", OPTIONS + ["exponential", "linear"])
WEIGHTS = (W, arrays(W))
INITS = [*OPTIONS, "zeros", "uniform", KQ, list(KQ), (KQ[0] * 1e160, KQ[1]), (KQ[0].clone().requires_grad_(), KQ[1]),
         (KQ[0], KQ[1][:, :1]), (KQ[0], _with(KQ[1], np.nan)), (KQ[0][0], KQ[1]), (KQ[0],), (KQ[0], KQ[1], KQ[0]),
         (KQ[0], "Q")]

# ------------------------------------------------------------------ one test per defect fixed

def test_gd_refuses_normalized_none_or_a_string():
    """Before: normalized=None ran plain GD, normalized='no' normalized GD."""
    for value in (None, "no", 0):
        with pytest.raises(TypeError, match=r"^normalized must be True or False"):
            train.gd(PROBLEM, steps=1, lr=0.1, normalized=value)
        with pytest.raises(TypeError, match=r"^normalized must be True or False"):
            train.gd_prompt(PROBLEM, torch.eye(d), steps=1, lr=0.1, normalized=value)
        with pytest.raises(TypeError, match=r"^normalized must be True or False"):
            train.gd_joint(PROBLEM, torch.eye(d), steps=1, lr=0.1, init_p=[0.0, 0.0], init_v=[1.0, 0.0],
                           normalized=value)


def test_gd_accepts_numpy_booleans_for_normalized():
    """Before: rule="official" took normalized=np.True_ for a request to change it."""
    run = train.gd(PROBLEM, steps=2, lr=0.1, normalized=np.True_, rule="official")
    assert torch.equal(run.W, train.gd(PROBLEM, steps=2, lr=0.1, rule="official").W)


@pytest.mark.parametrize("record", [[5, 2], [0, 0, 3], [-1, 2], [], [0.0, 1.5], ["0"], [[0, 1]], [True, False],
                                    [0, 10**9]])
def test_compiled_gd_refuses_a_bad_record(record):
    """Before: record=[5, 2] returned uninitialized memory."""
    with pytest.raises((TypeError, ValueError), match=r"^record "):
        compiled.gd(PROBLEM, torch.zeros(d, d), None, loss="logistic", lr=0.1, normalized=True, eps=0.0,
                    record=record)


# The runs refused below would take hours or exhaust memory; a refusal takes milliseconds. A bound this generous
# separates the two on any machine, however slow or loaded (it is not a speed test).
HANG = 60.0


@pytest.mark.parametrize("kwargs,name", [(dict(steps=10**12), "steps"), (dict(steps=10**9), "steps"),
                                         (dict(steps=10**8 - 1, record_every=1), "steps / record_every")])
@pytest.mark.parametrize("trainer", ["gd", "gd_prompt", "gd_joint"])
def test_training_refuses_runs_that_would_not_end_or_exhaust_memory(kwargs, name, trainer):
    """Before: gd(steps=10**12) hung; record_every=1 with 10**9 steps built a billion-element set."""
    start = time.perf_counter()
    with pytest.raises(ValueError, match=rf"^{re.escape(name)} asks for"):
        if trainer == "gd":
            train.gd(PROBLEM, lr=0.1, **kwargs)
        elif trainer == "gd_prompt":
            train.gd_prompt(PROBLEM, torch.eye(d), lr=0.1, **kwargs)
        else:
            train.gd_joint(PROBLEM, torch.eye(d), lr=0.1, init_p=[0.0, 0.0], init_v=[1.0, 0.0], **kwargs)
    assert time.perf_counter() - start < HANG


def test_the_path_refuses_a_run_that_would_not_end():
    start = time.perf_counter()
    with pytest.raises(ValueError, match=r"^steps \* len\(radii\) \* \(candidates \+ 1\) asks for 1.3e\+09 loss"):
        path.regularization_path(PROBLEM, [1.0], steps=10**8)
    with pytest.raises(ValueError, match=r"^candidates asks for .* bytes"):
        path.regularization_path(data.random_problem(n, T, d, seed=0, batch=1000), [1.0], steps=1, candidates=10**5)
    assert time.perf_counter() - start < HANG


def test_gd_memory_estimate_names_the_width():
    with pytest.raises(ValueError, match=r"^m asks for .* bytes"):
        train.gd(PROBLEM, param="KQ", steps=1, lr=0.1, m=10**9)


@pytest.mark.parametrize("kwargs", [dict(param="KQ", lr=1e308), dict(param="KQ", lr=1e200, normalized=False),
                                    dict(lr=1e308), dict(lr=1e308, engine="torch")])
def test_gd_overflow_is_an_error_naming_lr(kwargs):
    """Before: lr=1e308 with (K, Q) returned NaN iterates without an error."""
    with pytest.raises(FloatingPointError, match=r"is not finite \(overflow in float64\): lr=1e\+[0-9]+ takes steps "
                                                 r"too large .*: lower lr"):
        train.gd(PROBLEM, steps=20, **kwargs)


@pytest.mark.parametrize("trainer", [train.gd_prompt, partial(train.gd_prompt, engine="torch"), train.gd_joint])
def test_prompt_overflow_is_an_error_naming_lr(trainer):
    extra = dict(init_p=[0.0, 0.0], init_v=[1.0, 0.0]) if trainer is train.gd_joint else {}
    with pytest.raises(FloatingPointError, match=r"lr=1e\+308 takes steps too large"):
        trainer(PROBLEM, torch.eye(d), steps=20, lr=1e308, **extra)


@pytest.mark.parametrize("function", [lambda head: train.gd(PROBLEM, steps=1, lr=0.1, head=head),
                                      lambda head: model.outputs(PROBLEM, W, head),
                                      lambda head: train.loss_gradient(PROBLEM, W, "logistic", head),
                                      lambda head: compiled.why_not_compiled("W", head, "exact", "cpu")])
def test_a_head_by_name_is_a_type_error_listing_the_heads(function):
    """Before: head='relu' raised AttributeError: 'str' object has no attribute 'value'."""
    with pytest.raises(TypeError, match=r"^head must be None .* heads\.Linear\(v\), heads\.ReLU\(V\)"):
        function("relu")


def test_a_head_of_the_wrong_dimension_names_the_head():
    with pytest.raises(ValueError, match=r"^head\.V must have shape \(\.\.\., 2, k\)"):
        train.gd(PROBLEM, steps=1, lr=0.1, head=heads.random_relu(d + 1, seed=0))


@pytest.mark.parametrize("device", ["cuda", "meta", torch.device("meta")])
def test_uniform_init_runs_on_the_cpu_only(device):
    """Before: device='meta' returned a tensor no function could use; 'cuda' failed inside torch."""
    with pytest.raises(ValueError, match=r"^device=.* attnsvm computes on the CPU"):
        initial.uniform_init((d, d), 0, device=device)


def test_uniform_init_refuses_a_device_that_is_no_device():
    with pytest.raises(TypeError, match=r"^device must be None or 'cpu'"):
        initial.uniform_init((d, d), 0, device=3)


def test_a_problem_off_the_cpu_is_refused_naming_problem():
    meta = _raw_problem(*(t.to("meta") for t in (P.X, P.Y, P.Z, P.v)))
    for call in (lambda: train.gd(meta, steps=1, lr=0.1), lambda: model.loss(meta, W),
                 lambda: path.regularization_path(meta, [1.0])):
        with pytest.raises(ValueError, match=r"^problem is on the device 'meta'"):
            call()
    with pytest.raises(ValueError, match=r"^W is on the device 'meta'"):
        model.logits(PROBLEM, W.to("meta"))


def test_tensors_that_require_grad_train_and_differentiate():
    """Before: a tensor that requires grad met "Can't call numpy() on Tensor that requires grad"."""
    W0 = torch.zeros(d, d, requires_grad=True, dtype=torch.float64)
    grad_problem = data.Problem(P.X.clone().requires_grad_(), P.Y, P.Z, P.v)
    for engine in ("compiled", "torch"):
        run = train.gd(grad_problem, steps=3, lr=0.1, init=W0, engine=engine)
        assert not run.W.requires_grad and torch.isfinite(run.W).all()
    runs = compiled.gd(PROBLEM, W0, heads.ReLU(torch.eye(d).requires_grad_()), loss="logistic", lr=0.1,
                       normalized=True, eps=0.0, record=[0, 2])
    assert all(torch.isfinite(r).all() for r in runs)
    radii = torch.tensor([0.5, 1.0], requires_grad=True)
    assert torch.isfinite(path.regularization_path(PROBLEM, radii, steps=2).W).all()
    for engine in ("compiled", "torch"):
        run = train.gd_prompt(grad_problem, torch.eye(d, requires_grad=True), steps=2, lr=0.1, init=W0[0],
                              engine=engine)
        assert not run.p.requires_grad and torch.isfinite(run.p).all()
    loss = model.loss(PROBLEM, W0 + 1)  # the model's functions stay differentiable
    loss.backward()
    assert torch.isfinite(W0.grad).all() and W0.grad.abs().sum() > 0


def test_errors_name_the_argument_the_caller_passed():
    """Before: compiled.gd blamed "W", lipschitz_W "Aj", the path and gd "W" for an overflow the caller's W0,
    problem, radii or lr caused."""
    with pytest.raises(ValueError, match=r"^W0 contains 1 NaN"):
        compiled.gd(PROBLEM, _with(torch.zeros(d, d), np.nan), None, loss="logistic", lr=0.1, normalized=True,
                    eps=0.0, record=[0, 1])
    huge = data.Problem(P.X * 1e160, P.Y, P.Z * 1e160, P.v)
    with pytest.raises(FloatingPointError, match=r"problem's tokens"):
        train.lipschitz_W(huge)
    huge = data.Problem(P.X * 1e150, P.Y, P.Z * 1e150, P.v)
    with pytest.raises(FloatingPointError, match=r"^the path's W is not finite .*: radii up to 1e\+10 are too large"):
        path.regularization_path(huge, [1.0, 1e10], steps=2)
    with pytest.raises(ValueError, match=r"^radii must be at most 1.34e\+154"):
        path.regularization_path(PROBLEM, [1.0, 1e300], steps=2)
    with pytest.raises(FloatingPointError, match=r"lr=1e\+308"):
        train.gd(PROBLEM, steps=20, lr=1e308, param="KQ", gradient="autograd")


@pytest.mark.parametrize("call", [lambda seed: train.gd(PROBLEM, steps=1, lr=0.1, init="uniform", seed=seed),
                                  lambda seed: initial.uniform_init((d, d), seed),
                                  lambda seed: path.regularization_path(PROBLEM, [1.0], steps=1, seed=seed)])
@pytest.mark.parametrize("seed", ["12", 1.5, None, -1, 2**64])
def test_seeds_must_be_integers(call, seed):
    """Before: seed='12' was read as 12 and seed=1.5 as 1."""
    with pytest.raises((TypeError, ValueError), match=r"^seed must be an integer"):
        call(seed)


def test_one_token_per_sequence():
    """T = 1: no gradient to train on (refused by the trainers, saying why); loss_gradient is exactly 0."""
    one = _raw_problem(P.X[:, :1], P.Y, P.Z, P.v)
    with pytest.raises(ValueError, match=r"^problem has T = 1 token\(s\) per sequence: .*T >= 2 .*attention is "
                                         r"constant"):
        train.gd(one, steps=1, lr=0.1)
    assert torch.equal(train.loss_gradient(one, W), torch.zeros(d, d, dtype=torch.float64))


def test_zero_sequences_are_refused():
    empty = _raw_problem(P.X[:0], P.Y[:0], P.Z[:0], P.v)
    with pytest.raises(ValueError, match=r"^problem has n = 0 sequences"):
        model.loss(empty, W)


def test_logit_gradient_checks_its_logits_and_values():
    """Before: NaN logits gave NaN gradients; values=None with the linear head raised AttributeError."""
    with pytest.raises(ValueError, match=r"^logits contains NaN"):
        gradients.logit_gradient(PROBLEM, _with(torch.zeros(n, T), np.nan), "logistic")
    with pytest.raises(ValueError, match=r"^logits has a sequence with fewer than two finite logits"):
        gradients.logit_gradient(PROBLEM, torch.tensor([[0.0, -np.inf, -np.inf], [0, 1, 2]]), "logistic")
    grad = gradients.logit_gradient(PROBLEM, torch.tensor([[0.0, 1.0, -np.inf], [0, 1, 2]]), "logistic")
    assert grad.direction[0, 2] == 0 and torch.isfinite(grad.direction).all()
    default = gradients.weight_gradient(PROBLEM, W, "logistic")
    given_values = gradients.weight_gradient(PROBLEM, W, "logistic", values=model.token_values(PROBLEM))
    assert torch.equal(default[0], given_values[0])


@pytest.mark.parametrize("call", [lambda: gradients.logit_gradient(PROBLEM, LOGITS, "hinge"),
                                  lambda: gradients.weight_gradient(PROBLEM, W, "hinge")])
def test_the_gradients_name_an_unknown_loss(call):
    """Before: KeyError: 'hinge'."""
    with pytest.raises(ValueError, match=r"^loss='hinge' is not supported: choose one of 'logistic'"):
        call()


def test_compiled_gd_refuses_a_head_it_cannot_train():
    """Before: the lambda head trained as a linear head (its penalty silently dropped)."""
    with pytest.raises(ValueError, match=r"^head=Lambda.* is not supported: it has no Lambda head"):
        compiled.gd(PROBLEM, torch.zeros(d, d), heads.Lambda(P.v, 0.5), loss="logistic", lr=0.1, normalized=True,
                    eps=0.0, record=[0, 1])


@pytest.mark.parametrize("radii,pattern", [([[1.0, 2.0]], r"^radii must be one radius or a 1-D list"),
                                           ([1.0, [2.0]], r"^radii must be a positive number")])
def test_the_path_refuses_radii_of_another_shape(radii, pattern):
    """Before: numpy's "inhomogeneous shape" error, or a 2-D array read row by row."""
    with pytest.raises(ValueError, match=pattern):
        path.regularization_path(PROBLEM, radii, steps=1)


def test_support_gradient_refuses_a_mask_that_is_no_mask():
    """Before: a list of strings failed inside torch."""
    with pytest.raises(TypeError, match=r"^support must be a boolean mask"):
        model.support_gradient(PROBLEM, W, ALPHA, [["a"] * T] * n)


def test_why_not_compiled_checks_its_options():
    with pytest.raises(ValueError, match=r"^param='X' is not supported"):
        compiled.why_not_compiled("X", None, "exact", "cpu")
    with pytest.raises(TypeError, match=r"^device must be a torch.device"):
        compiled.why_not_compiled("W", None, "exact", 3)
    assert compiled.why_not_compiled("W", None, "exact", "cpu") is None


def test_fit_line_takes_tensors_that_require_grad_and_names_a_meta_tensor():
    """The bad-input census (tools/bad_input_census.py): fit_line(x, y) with a tensor that requires grad met
    torch's "Can't call numpy() on Tensor that requires grad"; a 'meta' tensor met numpy's error."""
    k = torch.arange(1.0, 50.0, dtype=torch.float64).requires_grad_()
    assert round(train.fit_line(k, 3.0 * torch.exp(-0.2 * k)).slope, 12) == -0.2
    with pytest.raises(ValueError, match=r"^y is on the device 'meta'"):
        train.fit_line(k.detach(), k.detach().to("meta"))


@pytest.mark.parametrize("G, dims, error, pattern", [
    (torch.ones(2, 2), None, TypeError, r"^dims must be a non-empty tuple"),
    (torch.ones(2, 2), "x", TypeError, r"^dims must be a non-empty tuple"),
    (torch.ones(2, 2), (0.5,), TypeError, r"^dims must be a non-empty tuple"),
    (torch.ones(2, 2), (5,), ValueError, r"^dims must name distinct dimensions of G"),
    (torch.ones(2, 2), (-1, -1), ValueError, r"^dims must name distinct dimensions of G"),
    (torch.ones(0, 2), (-2, -1), ValueError, r"^G has no entries along dims"),
])
def test_dual_norm_checks_dims_and_an_empty_G(G, dims, error, pattern):
    """The bad-input census: dims None, 'x', (5,), (-1, -1) met torch's TypeError/IndexError/RuntimeError, and an
    empty G an IndexError from amax()."""
    with pytest.raises(error, match=pattern):
        train.dual_norm(G.double(), 2.0, dims)


# ------------------------------------------------------------------ every public function, bad and extreme input

test_as_key_query = _check(model.as_key_query, {"problem": PROB, "W": WEIGHTS})
test_logits = _check(model.logits, {"problem": PROB, "W": WEIGHTS}, shape=_tokens)
test_queries = _check(model.queries, {"problem": PROB})
test_attention = _check(model.attention, {"problem": PROB, "W": WEIGHTS}, shape=_tokens)
test_token_values = _check(model.token_values, {"problem": PROB, "v": (None, arrays(P.v))},
                           shape=_tokens)
test_outputs = _check(model.outputs, {"problem": PROB, "W": WEIGHTS, "head": (None, HEADS)},
                      shape=lambda a: _tokens(a)[:-1])
test_loss = _check(model.loss, {"problem": PROB, "W": WEIGHTS, "loss": KIND, "head": (None, HEADS)},
                   shape=_batch)
test_support_gradient = _check(model.support_gradient, {
    "problem": PROB, "W": WEIGHTS,
    "alpha": (ALPHA, [[0, 3], [0], [-1, 0], [0.5, 1], "ab", None, torch.tensor([0, 1]).to("meta")]),
    "support": (MASK, [MASK.float(), MASK[0], "mask", None, MASK.to("meta"), [[True] * T] * n]),
    "loss": KIND}, shape=_matrices)
test_min_margin = _check(model.min_margin, {"problem": PROB, "W": WEIGHTS,
                                            "alpha": (ALPHA, [[0, 3], [0], [1.5, 0], "ab"])}, shape=_batch)
test_logit_gradient = _check(gradients.logit_gradient, {
    "problem": PROB, "logits": (LOGITS, arrays(LOGITS)), "loss": KIND, "head": (None, HEADS),
    "values": (V_FIELD, arrays(V_FIELD))}, shape=_tokens)
test_weight_gradient = _check(gradients.weight_gradient, {
    "problem": PROB, "W": WEIGHTS, "loss": KIND, "head": (None, HEADS), "values": (None, arrays(V_FIELD))})
test_loss_gradient = _check(train.loss_gradient, {"problem": PROB, "W": WEIGHTS, "loss": KIND,
                                                  "head": (None, HEADS)}, shape=_matrices)
test_lipschitz_W = _check(train.lipschitz_W, {"problem": PROB}, shape=_batch)
test_uniform_init = _check(initial.uniform_init, {
    "shape": ((d, 3), [(0, 2), (2,), (), (10**6, 10**6), (-1, 2), (2.0, 2), (True, 2), "22", None, 5, [2, 2],
                       torch.Size([2, 2]), (2, 0)]),
    "seed": (0, INTEGERS), "device": (None, ["cpu", torch.device("cpu"), "cuda", "meta", 3, "gpu", "cpu:0"])})
test_initial_parameters = _check(initial.initial_parameters, {
    "problem": PROB, "param": ("W", OPTIONS + ["KQ"]), "m": (d, INTEGERS),
    "init": (None, st.one_of(arrays(W), st.sampled_from(INITS))),
    "seed": (0, INTEGERS)},
    base=st.sampled_from([{}, {"param": "KQ"}]))
test_initial_vector = _check(initial.initial_vector, {
    "value": ([1.0, 0.0], arrays(P.v)), "name": ("init", [None, 3, b"init"]), "batch": ((), [(2,), (-1,), "2", None,
                                                                                          (2.5,), (10**10,)]),
    "d": (d, INTEGERS), "device": (None, ["cpu", "cuda", "meta", 3])})
test_regularization_path = _check(path.regularization_path, {
    "problem": PROB, "radii": ([0.5, 1.0], [[1.0, 0.5], [], [[1.0]], [1.0, [2.0]], "1", None, 1e300, [1.0, 1e160],
                                            torch.tensor([1.0, 2.0]).to("meta"), torch.tensor([1.0, 2.0]), 1e-160]),
    "param": ("W", OPTIONS + ["KQ"]), "steps": (2, INTEGERS + [10**8]),
    "loss": KIND, "m": (None, INTEGERS), "seed": (0, INTEGERS),
    "candidates": (3, [0, -1, 2.5, None, "3", 10**9])})
test_why_not_compiled = _check(compiled.why_not_compiled, {
    "param": ("W", OPTIONS + ["KQ"]), "head": (None, HEADS), "gradient": ("exact", OPTIONS + ["autograd"]),
    "device": (torch.device("cpu"), ["cpu", "cuda", "meta", 3, None, "gpu"])})
test_compiled_gd = _check(compiled.gd, {
    "problem": PROB, "W0": (torch.zeros(d, d), arrays(torch.zeros(d, d))), "head": (None, HEADS),
    "loss": KIND, "lr": (0.1, SCALARS), "normalized": (True, BOOLEANS), "eps": (0.0, SCALARS),
    "record": ([0, 2], [[2, 0], [0, 0], [-1], [], [0.5], "0", None, [0, 10**9], np.arange(3), torch.tensor([0, 1]),
                        [[0, 1]], 3])},
    shape=lambda a: (len(a["record"]),) + _matrices(a))
GD_SPEC = {"problem": PROB, "param": ("W", OPTIONS + ["KQ"]), "steps": (2, INTEGERS), "lr": (0.1, SCALARS),
           "normalized": (True, BOOLEANS), "init": (None, st.one_of(arrays(W), st.sampled_from(INITS))),
           "record_every": (1, INTEGERS), "loss": KIND, "m": (None, INTEGERS), "seed": (0, INTEGERS),
           "gradient": (None, OPTIONS + ["exact", "autograd"]), "head": (None, HEADS), "eps": (None, SCALARS),
           "ridge": (None, SCALARS), "rule": (None, OPTIONS + ["official"]),
           "engine": ("auto", OPTIONS + ["compiled", "torch"])}
GD_BASES = st.sampled_from([{}, {"param": "KQ"}, {"engine": "torch"}, {"normalized": False},
                            {"gradient": "autograd"}, {"rule": "official"}, {"param": "KQ", "ridge": 0.01}])


def _gd_and_select(**arguments):
    run = train.gd(**arguments)
    assert run.selection().shape == _tokens(arguments)[:-1]
    return run


test_gd = _check(_gd_and_select, GD_SPEC, base=GD_BASES)
PROMPT_SPEC = {"problem": PROB, "key": (torch.eye(d), arrays(torch.eye(d))), "steps": (2, INTEGERS),
               "lr": (0.1, SCALARS), "normalized": (True, BOOLEANS), "record_every": (1, INTEGERS), "loss": KIND}
test_gd_prompt = _check(train.gd_prompt, {**PROMPT_SPEC, "init": (None, arrays(P.v)),
                                          "engine": ("auto", OPTIONS + ["compiled", "torch"])},
                        base=st.sampled_from([{}, {"normalized": False}, {"engine": "torch"},
                                              {"engine": "torch", "normalized": False}]))
test_gd_joint = _check(train.gd_joint, {**PROMPT_SPEC, "init_p": ([0.0, 0.0], arrays(P.v)),
                                        "init_v": ([1.0, 0.0], arrays(P.v))},
                       base=st.sampled_from([{}, {"normalized": False}]))
