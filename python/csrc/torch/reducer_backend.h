// ReducerBackend: the torch backend "reducer" as a c10d::Backend, the way
// torch's own gloo and NCCL backends are made. torch's ProcessGroup owns
// one per process group and device type ("cpu", "cuda") and dispatches each
// collective to it.
//
//   backend = reducer._torch_c.Backend(rank, size, ops, client_or_None)
//
// The collectives themselves are `ops`' (reducer._torch_backend.BackendOps,
// a Python object over the group's reducer.Client): each method here calls
// the method of `ops` of the same name (the Python names of c10d::Backend's
// methods) under the GIL and returns its TorchWork as a PythonWork. The
// exception: an all_reduce of one contiguous CPU tensor of a dtype and op
// Reducer carries, which runs in C++ over the client's native connection
// (python/csrc/native_api.h) and returns a NativeWork, without Python in
// its path, when the backend was made with the client.
//
// Thread-safe: the native path is, and each call into `ops` holds the GIL.
#ifndef REDUCER_PYTHON_CSRC_TORCH_REDUCER_BACKEND_H_
#define REDUCER_PYTHON_CSRC_TORCH_REDUCER_BACKEND_H_

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/utils/pybind.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "python/csrc/native_api.h"
#include "python/csrc/torch/native_work.h"

namespace reducer::python {

class ReducerBackend : public c10d::Backend {
 public:
  // `ops`: the Python collectives; `client`: a `_reducer.Client` for the
  // native all-reduce, or None to send every all_reduce through `ops`;
  // `where` names the group in errors ("in job J (rank R)"). The caller
  // holds the GIL.
  ReducerBackend(int rank, int size, pybind11::object ops,
                 const pybind11::object& client, const std::string& where);
  ~ReducerBackend() override;

  // The Python collectives (reducer.torch.backend_of returns them).
  const pybind11::object& ops() const { return ops_; }
  bool native() const { return connection_ != nullptr; }

  const std::string getBackendName() const override { return "reducer"; }

  // How many collectives (not sends and receives) this group has issued:
  // the same on every rank when they call the same collectives in the same
  // order, which torch's ProcessGroupWrapper (TORCH_DISTRIBUTED_DEBUG=DETAIL)
  // checks before each collective.
  uint64_t getSequenceNumberForGroup() override { return sequence_.load(); }

  c10::intrusive_ptr<c10d::Work> broadcast(
      std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(
      std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> all_gather_single(
      at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& output_lists, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> all_gather_single_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(
      std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_single(
      at::Tensor& output, at::Tensor& input,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_single_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> all_to_all_single(
      at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_split_sizes,
      std::vector<int64_t>& input_split_sizes, const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                               int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  // Raises (the Python error) naming the ranks that had not arrived.
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;
  // The group's end (destroy_process_group): the rank leaves the job once
  // the collectives already started have finished; ops.close().
  void shutdown() override;

 private:
  // ops_.<method>(args...) under the GIL, its TorchWork as a PythonWork.
  template <typename... Args>
  c10::intrusive_ptr<c10d::Work> CallOps(const char* method, Args&&... args);
  // CallOps for a collective: counts it first (getSequenceNumberForGroup).
  template <typename... Args>
  c10::intrusive_ptr<c10d::Work> CallCollective(const char* method, Args&&... args);
  // The native all-reduce's work, or null for a call it does not take.
  c10::intrusive_ptr<c10d::Work> NativeAllReduce(std::vector<at::Tensor>& tensors,
                                                 const c10d::AllreduceOptions& opts);

  pybind11::object ops_;
  // The native all-reduce's state; null connection_: off.
  std::unique_ptr<NativeConnection> connection_;
  const std::shared_ptr<const std::string> all_reduce_what_;
  const std::shared_ptr<WorkCompleter> completer_;
  std::atomic<uint64_t> sequence_{0};  // collectives issued
};

}  // namespace reducer::python

#endif  // REDUCER_PYTHON_CSRC_TORCH_REDUCER_BACKEND_H_
