# Type stubs of reducer._torch_c, the torch backend's extension module
# (python/csrc/torch/), as reducer.torch calls it.
# tests/python/stubs_test.py checks these names and parameters against the
# built module.
from torch._C._distributed_c10d import Backend as _C10dBackend

from reducer._reducer import Client

class Backend(_C10dBackend):
    def __init__(self, rank: int, size: int, ops: object, client: Client | None, where: str) -> None: ...
    # The BackendOps (reducer._torch_backend) that run what is not in C++.
    @property
    def ops(self) -> object: ...
    # Whether all_reduce runs in C++ (a client was given).
    @property
    def native(self) -> bool: ...
