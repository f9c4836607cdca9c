"""The torch backend's collectives whose bytes go to some ranks only:
reduce, gather, scatter, all_to_all (alltoall), all_to_all_single (even
parts or split sizes), send, recv and recv from any source, so isend,
irecv, batch_isend_irecv and the object collectives work too. Each returns
its TorchWork at once, as the others do (reducer._torch_work).

Ranks are the group's: each process group is one Reducer job, so a group
rank is the job's rank. Uneven all-to-all and receives from any source are
reducerd's own (its AllToAllV and ReceiveAny): split sizes that disagree
between two ranks fail every rank, naming both.
"""

import torch

from reducer import _arrays
from reducer._torch_args import _check_parts, _one, _reduce_op, _same_dtype, _timeout
from reducer._torch_work import _filling


def _root(opts):
    return opts.rootRank if opts is not None else 0


def _check_received(result, into, what):
    """Raises ValueError unless `result` fits `into` (dtype and size)."""
    if result.dtype != into.dtype or result.numel() != into.numel():
        raise ValueError(f"{what} received {result.dtype} {list(result.shape)} into "
                         f"{into.dtype} {list(into.shape)}; the sender's tensor must "
                         "have the receiver's dtype and number of elements")


def _split_rows(sizes, tensor, parts, role):
    """torch's split sizes of `tensor` (dim 0; empty: even parts) as rows per
    rank; ValueError when they are not one per rank or do not add up."""
    dim0 = tensor.shape[0] if tensor.dim() > 0 else 0
    if not sizes:
        if dim0 % parts:
            raise ValueError(f"all_to_all_single {role} has {dim0} rows, which "
                             f"{parts} ranks cannot split evenly; give split sizes")
        return [dim0 // parts] * parts
    sizes = [int(s) for s in sizes]
    if len(sizes) != parts or sum(sizes) != dim0:
        raise ValueError(f"all_to_all_single {role} split sizes {sizes} must be "
                         f"{parts} numbers adding up to its {dim0} rows")
    return sizes


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

    def _root_parts(self, tensors, like, opts, what, role):
        """(root, parts): the list of `role` tensors ("output" of gather,
        "input" of scatter) that the root alone passes as `tensors`, checked
        to hold one tensor of like's dtype and size per rank; None on the
        other ranks, which must pass none."""
        root = _root(opts)
        if root != self.rank():
            if tensors:
                raise ValueError(f"{what}: only the root (rank {root}) passes {role} "
                                 f"tensors; rank {self.rank()} passed {len(tensors)}")
            return root, None
        parts = _one(tensors, what)
        _check_parts(parts, self.size(), like, what, role)
        return root, parts

    def gather(self, output_tensors, input_tensors, opts=None):
        tensor = _one(input_tensors, "gather")
        root, outputs = self._root_parts(output_tensors, tensor, opts, "gather", "output")
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
        root, inputs = self._root_parts(input_tensors, output, opts, "scatter", "input")
        stacked = None if inputs is None else torch.cat([x.reshape(-1) for x in inputs])
        pending = self._client.scatter_async(stacked, root, kind=_arrays.TORCH,
                                             timeout=_timeout(opts))

        def finish(part):
            _check_received(part, output, "scatter")
            output.copy_(part.view(output.shape))
            return [output]
        return self._work(pending, finish, "scatter")

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes,
                          opts=None):
        """Even parts (no split sizes) go through reducerd's all-to-all;
        split sizes (mixture-of-experts routing) through its uneven one,
        which checks every pair of ranks' sizes against each other and fails
        every rank naming both when they disagree."""
        world = self.size()
        if output.dtype != input.dtype:
            raise ValueError(f"all_to_all_single output is {output.dtype}; the input "
                             f"is {input.dtype}")
        if not input_split_sizes and not output_split_sizes:
            if output.numel() != input.numel():
                raise ValueError(f"all_to_all_single output is {list(output.shape)}; "
                                 f"expected {input.numel()} elements, as the input")
            pending = self._client.all_to_all_async(input.contiguous(),
                                                    timeout=_timeout(opts))
        else:
            send_rows = _split_rows(input_split_sizes, input, world, "input")
            recv_rows = _split_rows(output_split_sizes, output, world, "output")
            pending = self._client.all_to_all_v_async(
                input.contiguous(), send_rows, recv_rows, timeout=_timeout(opts))
        return self._work(pending, _filling(output), "all_to_all_single")

    def alltoall(self, output_tensors, input_tensors, opts=None):
        """Parts of one shape go through reducerd's all-to-all; parts of
        different sizes (one dtype) through its uneven one, flattened."""
        world = self.size()
        if len(input_tensors) != world or len(output_tensors) != world:
            raise ValueError(f"all_to_all needs {world} input and output tensors, got "
                             f"{len(input_tensors)} and {len(output_tensors)}")
        _same_dtype(list(input_tensors) + list(output_tensors), "all_to_all")
        like = input_tensors[0]
        if all(x.shape == like.shape for x in list(input_tensors) + list(output_tensors)):
            stacked = torch.stack([x.contiguous() for x in input_tensors])
            pending = self._client.all_to_all_async(stacked, timeout=_timeout(opts))

            def finish(result):
                for out, part in zip(output_tensors, result):
                    out.copy_(part)
                return output_tensors
        else:
            flat = torch.cat([x.reshape(-1) for x in input_tensors])
            pending = self._client.all_to_all_v_async(
                flat, [x.numel() for x in input_tensors],
                [x.numel() for x in output_tensors], timeout=_timeout(opts))

            def finish(result):
                offset = 0
                for out in output_tensors:
                    out.copy_(result[offset:offset + out.numel()].view(out.shape))
                    offset += out.numel()
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

    def recv_anysource(self, tensors, tag):
        """The first send to this rank with `tag`, from any rank (reducerd
        picks the earliest it holds); the work's _source_rank() names the
        sender once completed."""
        tensor = _one(tensors, "recv")
        pending = self._client.recv_any_async(tag, kind=_arrays.TORCH)

        def finish(result_and_source):
            result, source = result_and_source
            _check_received(result, tensor, "recv")
            tensor.copy_(result.view(tensor.shape))
            work._source_rank = source
            return [tensor]
        work = self._work(pending, finish, "recv from any source")
        return work
