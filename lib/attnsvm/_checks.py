"""Input validation shared by every module: each failure names the argument and the fix."""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["as_array", "as_index", "as_tensor", "boolean", "budget", "choice", "cpu_device", "finite_result", "memory",
           "nonnegative_float", "number", "on_cpu", "option", "positive_float", "positive_int", "require_shape",
           "seed", "which_problems", "MAX_BYTES"]

MAX_BYTES = 2 * 2**30  # float64 arrays one call may allocate; a larger request is refused before the work


def as_tensor(value, name: str, *, device=None) -> torch.Tensor:
    """Return `value` as a float64 torch tensor, rejecting non-numeric and non-finite input and tensors on another
    device than the CPU. A tensor that requires grad keeps its graph (the model's functions are differentiable);
    functions that leave torch (numpy, cvxpy) must call `.detach()` themselves."""
    on_cpu(value, name)
    try:
        tensor = value if torch.is_tensor(value) else torch.as_tensor(np.asarray(value))
    except (TypeError, ValueError) as err:
        raise TypeError(f"{name} must be a numeric array or tensor, got {type(value).__name__}") from err
    if tensor.is_complex() or tensor.dtype == torch.bool:
        raise TypeError(f"{name} must hold real numbers, got dtype {tensor.dtype}")
    tensor = tensor.to(dtype=torch.float64, device=device)
    if not torch.isfinite(tensor).all():
        bad = int((~torch.isfinite(tensor)).sum())
        raise ValueError(f"{name} contains {bad} NaN or infinite entries: pass finite values only")
    return tensor


def on_cpu(value, name: str):
    """`value`, unless it is a tensor on another device than the CPU (e.g. 'meta', which holds no data): then a
    ValueError naming `name`."""
    if torch.is_tensor(value) and value.device.type != "cpu":
        raise ValueError(f"{name} is on the device {value.device.type!r}: attnsvm computes on the CPU, pass "
                         f"{name}.cpu()")
    return value


def as_array(value, name: str, what: str) -> np.ndarray:
    """`value` as a numpy array (a CPU tensor detached), or a TypeError naming `name` and saying it must be
    `what` (ragged lists, objects)."""
    if torch.is_tensor(value):
        return on_cpu(value, name).detach().numpy()
    try:
        return np.asarray(value)
    except (TypeError, ValueError) as err:
        raise TypeError(f"{name} must be {what}, got {type(value).__name__}") from err


def as_index(value, name: str, shape: tuple, upper: int) -> np.ndarray:
    """Return `value` as an int64 numpy array of the given shape with entries in [0, upper)."""
    array = on_cpu(value, name).detach().numpy() if torch.is_tensor(value) else np.asarray(value)
    if array.dtype.kind not in "iu":
        if array.dtype.kind == "f" and np.all(np.isfinite(array)) and np.all(array == np.round(array)):
            array = array.astype(np.int64)
        else:
            raise TypeError(f"{name} must hold integer token indices, got dtype {array.dtype}")
    if array.shape != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)} (one token index per sequence), got {array.shape}")
    if array.size and (array.min() < 0 or array.max() >= upper):
        raise ValueError(f"{name} holds token indices outside [0, {upper - 1}]: each must be a valid position t < T={upper}")
    return array.astype(np.int64)


def require_shape(tensor: torch.Tensor, name: str, shape: tuple, meaning: str) -> None:
    """Raise a ValueError naming `name` unless `tensor.shape == shape`."""
    if tuple(tensor.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)} ({meaning}), got {tuple(tensor.shape)}")


def choice(value, name: str, options) -> str:
    """Return `value` if it is one of `options`, else raise a ValueError listing them."""
    if value not in options:
        raise ValueError(f"{name}={value!r} is not supported: choose one of {', '.join(map(repr, options))}")
    return value


def positive_int(value, name: str, *, minimum: int = 1) -> int:
    """Return `value` as an int >= minimum, else raise a ValueError naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def positive_float(value, name: str) -> float:
    """Return `value` as a finite float > 0, else raise a ValueError naming it (strings, bools and None are not
    numbers here, even "0.1")."""
    if isinstance(value, (str, bytes, bool, np.bool_)) or value is None:
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    if torch.is_tensor(value):
        value = value.detach()
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError) as err:
        raise ValueError(f"{name} must be a positive number, got {value!r:.40}") from err
    if not np.isfinite(number) or number <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return number


def nonnegative_float(value, name: str) -> float:
    """Return `value` as a finite float >= 0, else raise a ValueError naming it."""
    try:
        return 0.0 if float(value) == 0 else positive_float(value, name)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}") from err


def boolean(value, name: str) -> bool:
    """Return `value` if it is a bool (numpy's too), else raise a TypeError naming it (None, 'no', 0 are not)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def seed(value, name: str = "seed", below: int | None = None) -> int:
    """Return `value` as an int >= 0 (a random seed), below `below` if given (torch's generator takes seeds below
    2**63; a caller that derives seed + 1, seed + 2 asks for less), else raise a TypeError/ValueError naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer >= 0, got {value!r} ({type(value).__name__})")
    if value < 0:
        raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
    if below is not None and value >= below:
        raise ValueError(f"{name} must be an integer in [0, {_power(below)}), got {value}")
    return int(value)


def _power(number: int) -> str:
    """2**k for a power of two, else the number."""
    k = number.bit_length() - 1
    return f"2**{k}" if number == 1 << k else str(number)


def number(value, name: str) -> float:
    """`positive_float`, with a TypeError for strings, bools and None (a number is expected, not its spelling)."""
    if isinstance(value, (str, bytes, bool, np.bool_)) or value is None:
        raise TypeError(f"{name} must be a finite number > 0, got {value!r}")
    return positive_float(value, name)


def budget(count: float, name: str, limit: float, what: str) -> None:
    """Raise a ValueError naming `name` when a request would need more than `limit` `what` (e.g. records kept in
    memory, or steps): a clear refusal instead of a run that exhausts memory or never ends."""
    if count > limit:
        raise ValueError(f"{name} asks for {count:.3g} {what}, more than the {limit:.3g} this function allows: "
                         f"make it smaller")


def finite_result(tensor, what: str, fix: str):
    """Return `tensor` if every entry is finite, else raise a FloatingPointError saying what overflowed and how
    to avoid it (never hand back NaN or inf)."""
    values = tensor if torch.is_tensor(tensor) else torch.as_tensor(np.asarray(tensor, dtype=float))
    if not torch.isfinite(values).all():
        raise FloatingPointError(f"{what} is not finite (overflow in float64): {fix}")
    return tensor


def memory(entries: float, name: str) -> None:
    """Refuse, naming `name`, a request for more than MAX_BYTES of float64 entries."""
    budget(8.0 * entries, name, MAX_BYTES, "bytes of memory")


def option(value, name: str, options):
    """`choice` for a string option (None where `options` holds it), refusing other types (an array would make
    `in` ambiguous) with a TypeError naming `name`."""
    if not (isinstance(value, str) or (value is None and None in options)):
        raise TypeError(f"{name} must be one of {', '.join(map(repr, options))}, got {type(value).__name__}")
    return choice(value, name, options)


def cpu_device(device, name: str = "device"):
    """`device` checked to be None or the CPU (attnsvm computes on the CPU): a TypeError for what is not a device,
    a ValueError naming `name` for another device."""
    if device is None:
        return None
    try:
        checked = torch.device(device)
    except (TypeError, RuntimeError, ValueError) as err:
        raise TypeError(f"{name} must be None or 'cpu', got {device!r}") from err
    if checked.type != "cpu":
        raise ValueError(f"{name}={device!r} is not supported: attnsvm computes on the CPU, pass {name}=None or "
                         "'cpu'")
    return "cpu"


def which_problems(mask) -> str:
    """" for problem i" or " for problems [i, j, ...]" naming where a boolean mask over a batch of problems is
    true (a tuple index for a batch of several dimensions); "" for a single problem (a 0-d mask)."""
    mask = np.asarray(mask, dtype=bool)
    if mask.ndim == 0:
        return ""
    index = [tuple(i) if len(i) > 1 else i[0] for i in np.argwhere(mask).tolist()]
    return f" for problem {index[0]}" if len(index) == 1 else f" for problems {index}"
