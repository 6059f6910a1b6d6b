import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def one_torch_thread():
    """One torch thread, as `attnsvm.setup()` sets for the book: the problems are tiny, and with two threads on a
    busy 2-core machine OpenMP's waiting made the 2000-step fidelity run 10-20 times slower (measured)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
