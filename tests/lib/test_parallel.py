"""The experiments' parallel grids through joblib: the same numbers, bit for bit, in this process, in worker
processes (joblib's loky backend) and on a Dask cluster (a local one, on 127.0.0.1 only), which a user reaches by
changing joblib's backend, with no change to the library (lib/README.md shows the same snippet)."""

import numpy as np
import pytest
import torch
from joblib import parallel_config

from attnsvm.experiments import relu_head, svm_rank

# The scheduler's small HTTP server (health checks; the dashboard is off) moves off port 8787 when another
# cluster holds it, and says so: on 127.0.0.1 either way.
pytestmark = pytest.mark.filterwarnings("ignore:Port 8787 is already in use")

POINTS = [(8, 5, 2), (3, 4, 5), (4, 3, 6)]  # (8, 5, 2) needs a second chunk of 20 draws


def _grid(**kwargs) -> dict:
    return svm_rank.grid(POINTS, count=3, max_draws=200, chunk=20, **kwargs)


def _search(**kwargs) -> tuple[list[int], int]:
    return relu_head.search(4, 8, chunk=8, **kwargs)


def _assert_same_grid(first: dict, second: dict) -> None:
    assert list(first) == list(second) == POINTS
    for point in POINTS:
        assert np.array_equal(first[point].values, second[point].values)  # bit for bit
        assert first[point].draws == second[point].draws


@pytest.fixture(scope="module")
def serial():
    return _grid(workers=1), _search(workers=1)


@pytest.fixture(scope="module")
def dask_client():
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                       dashboard_address=None)
    client = distributed.Client(cluster)
    yield client
    client.close()
    cluster.close()


def test_serial_is_the_default_and_the_book_numbers(serial):
    grid, search = serial
    _assert_same_grid(_grid(), grid)  # workers=None outside parallel_config: this process
    assert _search() == search
    assert search == (relu_head.stored_seeds(4)[:8], relu_head.stored_seeds(4)[7])
    assert [result.values.shape[1] for result in grid.values()] == [3] * len(POINTS)
    assert grid[8, 5, 2].draws > 20


def test_worker_processes_give_the_same_numbers(serial):
    grid, search = serial
    _assert_same_grid(_grid(workers=2), grid)
    assert _search(workers=2) == search
    with parallel_config(n_jobs=2):  # joblib's own way to ask for processes: the library is not told
        _assert_same_grid(_grid(), grid)
        assert _search() == search


def test_a_dask_cluster_gives_the_same_numbers(serial, dask_client):
    from distributed import get_task_stream

    grid, search = serial
    with get_task_stream(dask_client) as tasks, parallel_config(backend="dask"):
        dask_grid, dask_search = _grid(), _search()
    _assert_same_grid(dask_grid, grid)
    assert dask_search == search
    assert len(tasks.data) >= len(POINTS) + 1  # the points and the search's chunks ran on the cluster


def test_the_callers_numerics_are_left_alone():
    """Each task sets float64, one thread and seed 0 for itself; run in the caller's process, it gives the
    caller's settings and random state back."""
    torch.manual_seed(7)
    expected = torch.rand(2)
    torch.manual_seed(7)
    np.random.seed(7)
    expected_numpy = np.random.rand(2)
    np.random.seed(7)
    dtype, threads = torch.get_default_dtype(), torch.get_num_threads()
    torch.set_default_dtype(torch.float32)
    try:
        _grid(workers=1)
        assert torch.get_default_dtype() == torch.float32
    finally:
        torch.set_default_dtype(dtype)
    assert torch.equal(torch.rand(2), expected) and np.array_equal(np.random.rand(2), expected_numpy)
    assert torch.get_num_threads() == threads
