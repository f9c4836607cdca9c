"""The collectives whose bytes reducerd routes to some ranks only, as methods
of reducer.Client (this class is one of its bases):

    total = client.reduce(x, root=0)         # the root: a new array; others: None
    client.reduce_(x, root=0)                # the root's x holds the reduction
    rows = client.gather(x, root=0)          # the root: every rank's x along dim 0
    part = client.scatter(x if root else None, root=0)   # rank i: part i of the root's x
    mine = client.all_to_all(x)              # part j of rank i goes to rank j
    mine = client.all_to_all_v(x, send_rows=[2, 0, 1])   # uneven: rows per rank
    client.send(x, destination=1, tag=0)     # returns once reducerd holds x
    y = client.recv(source=0, tag=0)         # the matching send's tensor, new
    client.recv_(y, source=0, tag=0)         # or written into y (same dtype and shape)
    y, source = client.recv_any(tag=0)       # the first send to this rank, any source

Ranks are the job's (global) ranks; `root` must be in the call's group.
reduce, gather and scatter cut or join along dim 0 in group-rank order:
scatter's and all_to_all's dim 0 must divide by the group size;
all_to_all_v sends send_rows[j] rows to group rank j (one entry per group
rank, summing to dim 0) and, given recv_rows, has reducerd check them
against what each rank sends. Sends and receives between two ranks match by
(source, destination, tag) in call order; a send is buffered by reducerd,
so a ring of sends then receives does not deadlock. recv_any takes the
first send to this rank with its tag from any rank (the earliest held, else
the first to arrive) and returns it with its source, the sender's group
rank; a recv from that source afterwards gets its next message. The *_async forms return a Work whose wait() gives what
the blocking form returns. Every method takes the keyword-only group, name
and timeout (send and recv: timeout only).
"""

from reducer import _arrays
from reducer._work import Work, _call_from_root, _result_dtype


class RoutedCollectives:
    """Mixin of reducer.Client: needs self._client (a _reducer.Client)."""

    # --- to one rank: reduce, gather -------------------------------------

    def reduce(self, x, op="sum", root=0, **call_options):
        """The reduction of every rank's x, new, on the root; None elsewhere.
        x is only read."""
        array, dtype, kind = _arrays.to_array(x)
        result = self._client.reduce(array, dtype, op, int(root), **call_options)
        return None if result is None else _arrays.from_array(result, dtype, kind)

    def reduce_(self, x, op="sum", root=0, **call_options):
        """Writes the reduction into the root's x (all or nothing) and returns
        x; the other ranks' x are only read."""
        array, dtype, _ = _arrays.to_array(x)
        self._client.reduce_(array, dtype, op, int(root), **call_options)
        return x

    def gather(self, x, root=0, **call_options):
        """Every rank's x concatenated along dim 0 in rank order, on the root
        (dim 0 may differ between ranks); None elsewhere."""
        array, dtype, kind = _arrays.to_array(x)
        result = self._client.gather(array, dtype, int(root), **call_options)
        return None if result is None else _arrays.from_array(result, dtype, kind)

    # --- from one rank, and among all: scatter, all_to_all ----------------

    def scatter(self, x, root=0, kind=None, **call_options):
        """Part i (along dim 0) of the root's x, new, on rank i. The other
        ranks pass None; they get a numpy array, or a torch tensor with
        kind="torch"."""
        result, convert = _call_from_root(self._client.scatter, x, root, kind, call_options)
        return convert(result)

    def all_to_all(self, x, **call_options):
        """x cut along dim 0 into one part per rank; part j goes to rank j.
        Returns the parts sent to this rank, concatenated in rank order (the
        shape of x, which must be the same on every rank)."""
        array, dtype, kind = _arrays.to_array(x)
        return _arrays.from_array(self._client.all_to_all(array, dtype, **call_options),
                                  dtype, kind)

    def all_to_all_v(self, x, send_rows, recv_rows=None, **call_options):
        """Uneven all-to-all (torch's all_to_all_single with split sizes):
        the first send_rows[0] rows of x (dim 0) go to group rank 0, the next
        send_rows[1] to group rank 1, and so on; returns the rows sent to
        this rank, concatenated in group-rank order. recv_rows (optional):
        the rows this rank expects from each, checked by reducerd against
        what each sends (FailedPrecondition naming both ranks otherwise)."""
        array, dtype, kind = _arrays.to_array(x)
        result = self._client.all_to_all_v(
            array, dtype, [int(r) for r in send_rows],
            None if recv_rows is None else [int(r) for r in recv_rows],
            **call_options)
        return _arrays.from_array(result, dtype, kind)

    # --- point to point: send, recv --------------------------------------

    def send(self, x, destination, tag=0, **call_options):
        """Sends x to rank `destination`; returns None once reducerd holds it
        (the matching recv may come later)."""
        array, dtype, _ = _arrays.to_array(x)
        self._client.send(array, dtype, int(destination), int(tag), **call_options)

    def recv(self, source, tag=0, kind=None, **call_options):
        """The tensor of rank `source`'s matching send, new: a numpy array, or
        a torch tensor with kind="torch"."""
        result = self._client.recv(int(source), int(tag), **call_options)
        return _arrays.from_array(result, _result_dtype(result), kind or _arrays.NUMPY)

    def recv_any(self, tag=0, kind=None, **call_options):
        """(tensor, source): the first send to this rank with `tag` from any
        rank (the earliest reducerd holds, else the first to arrive), new,
        and its sender's group rank (its place in `group`, if given; else its
        rank)."""
        result, source = self._client.recv_any(int(tag), **call_options)
        return (_arrays.from_array(result, _result_dtype(result),
                                   kind or _arrays.NUMPY), source)

    def recv_(self, x, source, tag=0, **call_options):
        """Writes the matching send's tensor into x (same dtype and shape, all
        or nothing) and returns x."""
        array, dtype, _ = _arrays.to_array(x)
        self._client.recv_(array, dtype, int(source), int(tag), **call_options)
        return x

    # --- asynchronous forms ------------------------------------------------

    def reduce_async(self, x, op="sum", root=0, **call_options):
        """Starts reduce; Work.wait() returns what reduce returns."""
        array, dtype, kind = _arrays.to_array(x)
        is_root = int(root) == self.rank
        handle = self._client.reduce_async(array, dtype, op, int(root), **call_options)
        return Work(handle, lambda results: _arrays.from_array(results[0], dtype, kind)
                    if is_root else None)

    def gather_async(self, x, root=0, **call_options):
        """Starts gather; Work.wait() returns what gather returns."""
        array, dtype, kind = _arrays.to_array(x)
        is_root = int(root) == self.rank
        handle = self._client.gather_async(array, dtype, int(root), **call_options)
        return Work(handle, lambda results: _arrays.from_array(results[0], dtype, kind)
                    if is_root else None)

    def scatter_async(self, x, root=0, kind=None, **call_options):
        """Starts scatter (x None on the other ranks); Work.wait() returns
        this rank's part."""
        handle, convert = _call_from_root(self._client.scatter_async, x, root, kind,
                                          call_options)
        return Work(handle, lambda results: convert(results[0]))

    def all_to_all_async(self, x, **call_options):
        """Starts all_to_all; Work.wait() returns what all_to_all returns."""
        array, dtype, kind = _arrays.to_array(x)
        handle = self._client.all_to_all_async(array, dtype, **call_options)
        return Work(handle, lambda results: _arrays.from_array(results[0], dtype, kind))

    def all_to_all_v_async(self, x, send_rows, recv_rows=None, **call_options):
        """Starts all_to_all_v; Work.wait() returns what all_to_all_v
        returns."""
        array, dtype, kind = _arrays.to_array(x)
        handle = self._client.all_to_all_v_async(
            array, dtype, [int(r) for r in send_rows],
            None if recv_rows is None else [int(r) for r in recv_rows],
            **call_options)
        return Work(handle, lambda results: _arrays.from_array(results[0], dtype, kind))

    def send_async(self, x, destination, tag=0, **call_options):
        """Starts send; Work.wait() returns None once reducerd holds x."""
        array, dtype, _ = _arrays.to_array(x)
        handle = self._client.send_async(array, dtype, int(destination), int(tag),
                                         **call_options)
        return Work(handle, lambda results: None)

    def recv_async(self, source, tag=0, kind=None, **call_options):
        """Starts recv; Work.wait() returns the received tensor."""
        handle = self._client.recv_async(int(source), int(tag), **call_options)
        return Work(handle, lambda results: _arrays.from_array(
            results[0], _result_dtype(results[0]), kind or _arrays.NUMPY))

    def recv_any_async(self, tag=0, kind=None, **call_options):
        """Starts recv_any; Work.wait() returns (tensor, source)."""
        handle = self._client.recv_any_async(int(tag), **call_options)
        return Work(handle, lambda results: (_arrays.from_array(
            results[0], _result_dtype(results[0]), kind or _arrays.NUMPY),
            handle.source()))
