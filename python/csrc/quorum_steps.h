// Quorum steps on `_reducer.Client`: all_reduce_quorum (out of place) and
// all_reduce_quorum_ (in place), over Client::AllReduceQuorum and
// AllReduceQuorumInPlace (client/reducer_client.h has their semantics).
//
//   result, contributors, joined, step = client.all_reduce_quorum(
//       x, "float64", "sum", 2, 2.0, name="", timeout=None)
//
// Each takes the array and its dtype name, the op's name, min_ranks (0:
// every rank) and grace (seconds past the first arrival), then the
// keyword-only name and timeout; no group, since a step is over the whole
// job. Returns (result, contributors, joined, step): a new array, or None in
// place (x then holds the result, all or nothing); the contributing and the
// joined ranks as lists, ascending; the job's number for the step.
//
// ValueError for min_ranks outside [0, world size] or a grace that is
// negative or not finite, raised before anything is sent, as are the
// array's TypeError/ValueError. The call's own errors raise ReducerError
// subclasses (a rank left out of the step: FailedPrecondition). The GIL is
// released while the step waits.
//
//   client.done(name="", timeout=None)
//
// Client::Done: this rank is out of data; returns None once every rank of
// the job has called it (the GIL released meanwhile).
#ifndef REDUCER_PYTHON_CSRC_QUORUM_STEPS_H_
#define REDUCER_PYTHON_CSRC_QUORUM_STEPS_H_

#include "pybind11/pybind11.h"
#include "python/csrc/py_client.h"

namespace reducer::python {

void DefineQuorumSteps(pybind11::class_<PyClient>& client);

}  // namespace reducer::python

#endif  // REDUCER_PYTHON_CSRC_QUORUM_STEPS_H_
