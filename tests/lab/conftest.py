"""The lab's tests run on one torch thread: their tensors are small, and on a shared 2-core machine a second
OpenMP thread mostly waits for a busy core (measured: 15x slower element-wise ops, 56 s vs 3 s for a quick script)."""

import pytest
import torch


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
