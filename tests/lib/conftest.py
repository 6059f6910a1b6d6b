import attnsvm  # noqa: F401, I001 (first: it pins the CPU code paths before torch and numpy load)
import pytest
import torch
from hypothesis import settings
from threadpoolctl import threadpool_limits


@pytest.fixture(autouse=True, scope="session")
def one_thread():
    """One thread for torch and the BLAS, as `attnsvm.setup()` sets for the book: the problems are tiny, and with
    two threads on a busy 2-core machine the waiting made the 2000-step fidelity run 10-20 times slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with threadpool_limits(1):
        yield
    torch.set_num_threads(threads)


# Property tests draw the same examples on every run and machine (a failure reproduces; CI is deterministic).
settings.register_profile("attnsvm", derandomize=True, deadline=None)
settings.load_profile("attnsvm")
