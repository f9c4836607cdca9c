// The collectives whose bytes reducerd routes to some ranks only, on
// `_reducer.Client`: reduce, reduce_, gather, scatter, all_to_all,
// all_to_all_v (send_rows, recv_rows=None), send, recv, recv_, recv_any
// and their *_async forms (which return a `_reducer.Pending`).
//
// Results: an array, or None where the rank gets nothing (the non-roots of
// reduce and gather); send returns None once reducerd holds the message;
// recv_any returns (array, source), source the sender's group rank
// (recv_any_async: the pending call's source() once waited for).
// Every call takes the keyword-only group, name and timeout, and releases
// the GIL while it waits (collective_binding.h).
#ifndef REDUCER_PYTHON_CSRC_ROUTED_COLLECTIVES_H_
#define REDUCER_PYTHON_CSRC_ROUTED_COLLECTIVES_H_

#include "pybind11/pybind11.h"
#include "python/csrc/py_client.h"

namespace reducer::python {

void DefineRoutedCollectives(pybind11::class_<PyClient>& client);

}  // namespace reducer::python

#endif  // REDUCER_PYTHON_CSRC_ROUTED_COLLECTIVES_H_
