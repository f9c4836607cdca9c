"""The torch backend's collectives whose bytes go to some ranks only:
reduce, gather, scatter, all_to_all (alltoall), all_to_all_single, send
and recv, so isend, irecv, batch_isend_irecv and the
object collectives work too. Each returns its TorchWork at once, as the
others do (reducer._torch_work).

Ranks are the group's: each process group is one Reducer job, so a group
rank is the job's rank. What torch allows and Reducer does not take raises
at the call, naming it: all_to_all with parts of different shapes or
all_to_all_single with uneven split sizes, recv from any source.
"""

import torch

from reducer import _arrays
from reducer._torch_args import _check_parts, _one, _reduce_op, _timeout


def _root(opts):
    return opts.rootRank if opts is not None else 0


def _check_received(result, into, what):
    """Raises ValueError unless `result` fits `into` (dtype and size)."""
    if result.dtype != into.dtype or result.numel() != into.numel():
        raise ValueError(f"{what} received {result.dtype} {list(result.shape)} into "
                         f"{into.dtype} {list(into.shape)}; the sender's tensor must "
                         "have the receiver's dtype and number of elements")


def _even_split(sizes, dim0, parts, what):
    """Checks that torch's split sizes (empty: even) cut dim0 in equal parts."""
    if not sizes:
        return
    if len(sizes) != parts or any(s * parts != dim0 for s in sizes):
        raise RuntimeError(f"the reducer backend does not support {what} with uneven "
                           f"split sizes {list(sizes)}: Reducer's all-to-all sends "
                           f"dim 0 / {parts} rows to each rank")


class RoutedOps:
    """Mixin of BackendOps: needs self._client, self._work,
    self.rank(), self.size()."""

    def reduce(self, tensors, opts=None):
        tensor = _one(tensors, "reduce")
        pending = self._client.reduce_async(tensor, _reduce_op(opts), _root(opts),
                                            timeout=_timeout(opts))

        def finish(result):
            if result is not None:  # the root
                tensor.copy_(result)
            return [tensor]
        return self._work(pending, finish, "reduce")

    def gather(self, output_tensors, input_tensors, opts=None):
        tensor = _one(input_tensors, "gather")
        root = _root(opts)
        outputs = None
        if root == self.rank():
            outputs = _one(output_tensors, "gather")
            _check_parts(outputs, self.size(), tensor, "gather", "output")
        elif output_tensors:
            raise ValueError(f"gather: only the root (rank {root}) passes output "
                             f"tensors; rank {self.rank()} passed {len(output_tensors)}")
        n = tensor.numel()
        pending = self._client.gather_async(tensor.reshape(-1), root,
                                            timeout=_timeout(opts))

        def finish(gathered):
            for i, out in enumerate(outputs or []):
                out.copy_(gathered[i * n:(i + 1) * n].view(out.shape))
            return output_tensors
        return self._work(pending, finish, "gather")

    def scatter(self, output_tensors, input_tensors, opts=None):
        output = _one(output_tensors, "scatter")
        root = _root(opts)
        stacked = None
        if root == self.rank():
            inputs = _one(input_tensors, "scatter")
            _check_parts(inputs, self.size(), output, "scatter", "input")
            stacked = torch.cat([x.reshape(-1) for x in inputs])
        elif input_tensors:
            raise ValueError(f"scatter: only the root (rank {root}) passes input "
                             f"tensors; rank {self.rank()} passed {len(input_tensors)}")
        pending = self._client.scatter_async(stacked, root, kind=_arrays.TORCH,
                                             timeout=_timeout(opts))

        def finish(part):
            _check_received(part, output, "scatter")
            output.copy_(part.view(output.shape))
            return [output]
        return self._work(pending, finish, "scatter")

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes,
                          opts=None):
        world = self.size()
        dim0 = input.shape[0] if input.dim() > 0 else 0
        _even_split(input_split_sizes, dim0, world, "all_to_all_single")
        _even_split(output_split_sizes, dim0, world, "all_to_all_single")
        if output.numel() != input.numel() or output.dtype != input.dtype:
            raise ValueError(f"all_to_all_single output is {output.dtype} "
                             f"{list(output.shape)}; expected {input.dtype} with "
                             f"{input.numel()} elements")
        pending = self._client.all_to_all_async(input.contiguous(),
                                                timeout=_timeout(opts))

        def finish(result):
            output.copy_(result.view(output.shape))
            return [output]
        return self._work(pending, finish, "all_to_all_single")

    def alltoall(self, output_tensors, input_tensors, opts=None):
        world = self.size()
        if len(input_tensors) != world or len(output_tensors) != world:
            raise ValueError(f"all_to_all needs {world} input and output tensors, got "
                             f"{len(input_tensors)} and {len(output_tensors)}")
        like = input_tensors[0]
        for i, x in enumerate(list(input_tensors) + list(output_tensors)):
            if x.shape != like.shape or x.dtype != like.dtype:
                raise RuntimeError(
                    "the reducer backend does not support all_to_all with parts of "
                    f"different shapes or dtypes ({like.dtype} {list(like.shape)} and "
                    f"{x.dtype} {list(x.shape)}): Reducer's all-to-all sends equal parts")
        stacked = torch.stack([x.contiguous() for x in input_tensors])
        pending = self._client.all_to_all_async(stacked, timeout=_timeout(opts))

        def finish(result):
            for i, out in enumerate(output_tensors):
                out.copy_(result[i])
            return output_tensors
        return self._work(pending, finish, "all_to_all")

    def send(self, tensors, dstRank, tag):
        tensor = _one(tensors, "send")
        pending = self._client.send_async(tensor.contiguous(), dstRank, tag)
        return self._work(pending, lambda _: [tensor], "send")

    def recv(self, tensors, srcRank, tag):
        tensor = _one(tensors, "recv")
        pending = self._client.recv_async(srcRank, tag, kind=_arrays.TORCH)

        def finish(result):
            _check_received(result, tensor, "recv")
            tensor.copy_(result.view(tensor.shape))
            return [tensor]
        return self._work(pending, finish, "recv")
