// The collectives every rank of the group takes part in, on
// `_reducer.Client`: all_reduce, all_reduce_, all_reduce_float,
// all_reduce_int, all_reduce_many, all_gather, broadcast, broadcast_,
// reduce_scatter, barrier, and the *_async forms of all_reduce_many,
// all_gather, broadcast, reduce_scatter and barrier (which return a
// `_reducer.Pending`; all_reduce_async is the module's, with its Handle).
//
// Each takes the array and its dtype name (all_reduce_many: lists of both),
// then its own arguments (op, root), then the keyword-only group, name and
// timeout (collective_binding.h has the steps every call takes). Results: a
// new array (all_reduce_many: a list), the scalar (all_reduce_float, _int),
// or None (in place, the array written; barrier). broadcast's `x` is None
// on ranks that do not know the root's dtype or shape.
#ifndef REDUCER_PYTHON_CSRC_COLLECTIVES_H_
#define REDUCER_PYTHON_CSRC_COLLECTIVES_H_

#include "pybind11/pybind11.h"
#include "python/csrc/py_client.h"

namespace reducer::python {

void DefineCollectives(pybind11::class_<PyClient>& client);

}  // namespace reducer::python

#endif  // REDUCER_PYTHON_CSRC_COLLECTIVES_H_
