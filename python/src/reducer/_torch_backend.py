"""BackendOps: the collectives of one torch process group on the backend
"reducer", over one Reducer job.

torch 2.x's way for a backend out of its tree is a c10d::Backend, which
torch's ProcessGroup owns and dispatches each collective to by the tensors'
device. reducer._torch_c.Backend is that Backend (in C++, as torch's gloo
and NCCL are); it calls the method of a BackendOps of the same name for
every collective but the all-reduce it runs in C++, and hands its TorchWork
back to torch (python/csrc/torch/reducer_backend.h). The method names are
c10d::Backend's (torch 2.15's: `all_gather_single` for
all_gather_into_tensor, `reduce_scatter_single`, `all_to_all_single`, the
`_coalesced` forms).

Every collective starts at once (its place in the group's call order taken,
its contribution sent) and returns its Work (reducer._torch_work), whose
outputs change only once the whole result has arrived.
"""

import math
import weakref

import torch
import torch.distributed as dist

import reducer
from reducer import _arrays
from reducer._torch_args import (_check_coalesced, _check_parts, _check_world_times, _one,
                                 _reduce_op, _same_dtype, _timeout)
from reducer._torch_routed import RoutedOps
from reducer._torch_work import Completer, TorchWork, _filling

BACKEND_NAME = "reducer"


class BackendOps(RoutedOps):
    """One torch process group as one Reducer job. Thread-safe as
    reducer.Client; collectives must be issued in the same order on every
    rank of the group (torch's rule). Every collective returns at once with
    a TorchWork."""

    def __init__(self, client, job, rank, size):
        """`client`: the group's reducer.Client; `job`: its job name."""
        self._client = client
        self.job = job  # the Reducer job name agreed through the store
        self._rank = rank
        self._size = size
        self.where = f"in job {job} (rank {rank})"  # for errors
        self._completer = Completer(f"reducer-futures-{job}")
        # The completer's thread ends when the group is dropped.
        weakref.finalize(self, self._completer.close)

    def rank(self):
        return self._rank

    def size(self):
        return self._size

    @property
    def client(self):
        """The group's reducer.Client, for Reducer's explicit forms
        (all_reduce vs all_reduce_, MetricSync) on the same job."""
        return self._client

    def _work(self, pending, finish, what):
        return TorchWork(self._completer, pending, finish, what, self.where)

    def close(self):
        """The group's end (torch's shutdown, from destroy_process_group):
        its rank leaves the job, so that reducerd sees the job end instead
        of a lost session. Calls already started finish first (they hold
        the session); later calls raise ValueError."""
        self._completer.close()
        self._client.close()

    # --- all-reduce ---------------------------------------------------------

    def allreduce(self, tensors, opts=None):
        """What the C++ all-reduce leaves: several tensors, CUDA, a layout,
        dtype or op it does not take (or every call, with it off)."""
        tensor = _one(tensors, "all_reduce")
        op = _reduce_op(opts)
        if tensor.layout == torch.sparse_coo:
            return self._sparse_allreduce(tensor, op, opts)
        # The extension's handle itself (its wait() returns None once the
        # tensor holds the result): one Python layer less than reducer.Work's.
        array, dtype, _ = _arrays.to_array(tensor)
        pending = self._client._client.all_reduce_async(array, dtype, op, True,
                                                        timeout=_timeout(opts))
        result = [tensor]
        return self._work(pending, lambda _: result, "all_reduce")

    def _sparse_allreduce(self, tensor, op, opts):
        """all_reduce SUM of a sparse COO tensor, as gloo does it: the result is
        the coalesced sum of every rank's tensor, written into `tensor`. One
        all-gather of each rank's indices and values packed as bytes (an
        8-byte count of its entries first), which may differ in length
        between ranks."""
        if op != "sum":
            raise RuntimeError(f"the reducer backend's all_reduce of a sparse tensor "
                               f"takes ReduceOp SUM only (as gloo's), not {op}")
        x = tensor.coalesce()
        indices, values = x.indices().contiguous(), x.values().contiguous()
        count = torch.tensor([values.shape[0]], dtype=torch.int64)
        packed = torch.cat([t.cpu().reshape(-1).view(torch.uint8)
                            for t in (count, indices, values)])
        pending = self._client.all_gather_async(packed, timeout=_timeout(opts))
        sparse_dims = indices.shape[0]
        value_shape = list(values.shape[1:])
        value_bytes = math.prod(value_shape) * values.element_size()  # per entry

        def finish(gathered):
            all_indices, all_values, offset = [], [], 0
            for _ in range(self.size()):
                n = int(gathered[offset:offset + 8].clone().view(torch.int64)[0])
                offset += 8
                size = sparse_dims * n * 8
                all_indices.append(gathered[offset:offset + size].clone()
                                   .view(torch.int64).view(sparse_dims, n))
                offset += size
                size = n * value_bytes
                all_values.append(gathered[offset:offset + size].clone()
                                  .view(values.dtype).view([n] + value_shape))
                offset += size
            total = torch.sparse_coo_tensor(torch.cat(all_indices, dim=1),
                                            torch.cat(all_values), tensor.shape)
            tensor.copy_(total.coalesce().to(tensor.device))
            return [tensor]
        return self._work(pending, finish, "all_reduce")

    def allreduce_coalesced(self, tensors, opts=None):
        pending = self._client.all_reduce_many_async(tensors, _reduce_op(opts),
                                                     timeout=_timeout(opts))

        def finish(results):
            for tensor, result in zip(tensors, results):
                tensor.copy_(result)
            return tensors
        return self._work(pending, finish, "all_reduce_coalesced")

    # --- all-gather ---------------------------------------------------------

    def allgather(self, output_tensors, input_tensors, opts=None):
        tensor = _one(input_tensors, "all_gather")
        outputs = _one(output_tensors, "all_gather")
        _check_parts(outputs, self.size(), tensor, "all_gather", "output")
        n = tensor.numel()
        pending = self._client.all_gather_async(tensor.reshape(-1),
                                                timeout=_timeout(opts))

        def finish(gathered):
            for i, out in enumerate(outputs):
                out.copy_(gathered[i * n:(i + 1) * n].view(out.shape))
            return output_tensors
        return self._work(pending, finish, "all_gather")

    def all_gather_single(self, output, input, opts=None):
        _check_world_times(output, input, self.size(), "all_gather_into_tensor", "output")
        pending = self._client.all_gather_async(input.reshape(-1),
                                                timeout=_timeout(opts))
        return self._work(pending, _filling(output), "all_gather_into_tensor")

    def _gather_concatenated(self, inputs, what, opts):
        """Starts one all-gather of the inputs flattened and concatenated
        (one dtype); its pending result is every rank's concatenation, in
        rank order. Returns (pending, the inputs' element counts)."""
        _same_dtype(inputs, what)
        counts = [x.numel() for x in inputs]
        flat = torch.cat([x.reshape(-1) for x in inputs]) if inputs else torch.empty(0)
        return self._client.all_gather_async(flat, timeout=_timeout(opts)), counts

    def allgather_coalesced(self, output_lists, input_tensors, opts=None):
        """all_gather_coalesced: output_lists[r][k] gets rank r's
        input_tensors[k] (torch's layout, gloo's too); one round trip for
        all of them."""
        if len(output_lists) != self.size():
            raise ValueError(f"all_gather_coalesced needs {self.size()} output lists "
                             f"(one per rank), got {len(output_lists)}")
        for r, outputs in enumerate(output_lists):
            if len(outputs) != len(input_tensors):
                raise ValueError(f"all_gather_coalesced output list {r} holds "
                                 f"{len(outputs)} tensors for {len(input_tensors)} inputs")
            for k, (out, x) in enumerate(zip(outputs, input_tensors)):
                if out.numel() != x.numel() or out.dtype != x.dtype:
                    raise ValueError(f"all_gather_coalesced output [{r}][{k}] is "
                                     f"{out.dtype} {list(out.shape)}; expected {x.dtype} "
                                     f"with {x.numel()} elements")
        pending, counts = self._gather_concatenated(input_tensors,
                                                    "all_gather_coalesced", opts)
        total = sum(counts)

        def finish(gathered):
            for r, outputs in enumerate(output_lists):
                offset = r * total
                for out, n in zip(outputs, counts):
                    out.copy_(gathered[offset:offset + n].view(out.shape))
                    offset += n
            return output_lists
        return self._work(pending, finish, "all_gather_coalesced")

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        """all_gather_into_tensor under _coalescing_manager: outputs[k] gets
        every rank's inputs[k], concatenated in rank order."""
        _check_coalesced(outputs, inputs, self.size(), "all_gather_into_tensor_coalesced",
                         "output")
        pending, counts = self._gather_concatenated(
            inputs, "all_gather_into_tensor_coalesced", opts)
        total = sum(counts)

        def finish(gathered):
            by_rank = gathered.view(self.size(), total)
            offset = 0
            for out, n in zip(outputs, counts):
                out.view(self.size(), n).copy_(by_rank[:, offset:offset + n])
                offset += n
            return outputs
        return self._work(pending, finish, "all_gather_into_tensor_coalesced")

    # --- broadcast ----------------------------------------------------------

    def broadcast(self, tensors, opts=None):
        tensor = _one(tensors, "broadcast")
        root = opts.rootRank if opts is not None else 0
        pending = self._client.broadcast_async(tensor, root, timeout=_timeout(opts))
        is_root = root == self.rank()

        def finish(result):
            if not is_root:
                tensor.copy_(result)
            return [tensor]
        return self._work(pending, finish, "broadcast")

    # --- reduce-scatter -----------------------------------------------------

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        output = _one(output_tensors, "reduce_scatter")
        inputs = _one(input_tensors, "reduce_scatter")
        _check_parts(inputs, self.size(), output, "reduce_scatter", "input")
        stacked = torch.cat([x.reshape(-1) for x in inputs])
        pending = self._client.reduce_scatter_async(stacked, _reduce_op(opts),
                                                    timeout=_timeout(opts))
        return self._work(pending, _filling(output), "reduce_scatter")

    def reduce_scatter_single(self, output, input, opts=None):
        _check_world_times(input, output, self.size(), "reduce_scatter_tensor", "input")
        pending = self._client.reduce_scatter_async(input.reshape(-1), _reduce_op(opts),
                                                    timeout=_timeout(opts))
        return self._work(pending, _filling(output), "reduce_scatter_tensor")

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        """reduce_scatter_tensor under _coalescing_manager: one reduce-scatter
        of every input, laid out so that rank r's part holds part r of each
        input in turn."""
        _check_coalesced(inputs, outputs, self.size(), "reduce_scatter_tensor_coalesced",
                         "input")
        _same_dtype(inputs, "reduce_scatter_tensor_coalesced")
        world = self.size()
        counts = [out.numel() for out in outputs]
        stacked = torch.cat([x.reshape(world, n) for x, n in zip(inputs, counts)], dim=1)
        pending = self._client.reduce_scatter_async(stacked.reshape(-1), _reduce_op(opts),
                                                    timeout=_timeout(opts))

        def finish(result):
            offset = 0
            for out, n in zip(outputs, counts):
                out.copy_(result[offset:offset + n].view(out.shape))
                offset += n
            return outputs
        return self._work(pending, finish, "reduce_scatter_tensor_coalesced")

    # --- barriers -----------------------------------------------------------

    def barrier(self, opts=None):
        pending = self._client.barrier_async(timeout=_timeout(opts))
        return self._work(pending, lambda _: [], "barrier")

    def monitored_barrier(self, opts=None, wait_all_ranks=False):
        """Returns once every rank of the group arrived; raises RuntimeError
        naming the ranks that had not arrived by opts.timeout. reducerd
        watches every rank (not rank 0 alone, as gloo does) and always names
        every missing rank, so wait_all_ranks changes nothing."""
        try:
            self._client.barrier(timeout=_timeout(opts))
        except reducer.DeadlineExceeded as e:
            raise RuntimeError(f"monitored_barrier {self.where}: {e}") from e



def backend_of(group=None, what="reducer.torch.backend_of"):
    """The BackendOps of `group` (None: the default group): its `client` (a
    reducer.Client on the group's job, for Reducer's explicit forms and
    MetricSync) and `job`. ValueError when the group is not of the
    "reducer" backend; RuntimeError when there is no default group. `what`
    names the caller in errors."""
    if group is None:
        group = dist.group.WORLD
        if group is None:
            raise RuntimeError(f"{what}: the default process group is not "
                               "initialized; call init_process_group")
    name = dist.get_backend(group)
    backend = group._get_backend(torch.device("cpu")) if name == BACKEND_NAME else None
    ops = getattr(backend, "ops", None)
    if not isinstance(ops, BackendOps):
        raise ValueError(f"{what} needs a process group of the \"{BACKEND_NAME}\" "
                         f"backend; this one is {name!r}")
    return ops
