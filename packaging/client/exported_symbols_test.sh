#!/usr/bin/env bash
# Checks what libreducer_client exports (nm -D --defined-only | c++filt):
# only the public API of client/reducer_client.h and the core/ headers it
# includes, every symbol under the version node REDUCER_<soversion>; no
# gRPC, protobuf, Abseil or internal reducer symbol; the public entry points
# present; the soname; and gRPC, protobuf and Abseil loaded as Debian's
# shared libraries.
#
#   exported_symbols_test.sh LIBRARY SONAME
set -uo pipefail

library=$1
want_soname=$2
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

soname=$(objdump -p "$library" | awk '$1 == "SONAME" { print $2 }')
[[ "$soname" == "$want_soname" ]] ||
  fail "soname of $library is '$soname', want '$want_soname'"
version_node="REDUCER_${want_soname##*.so.}"

# gRPC, protobuf and Abseil are Debian's shared libraries, not copies.
needed=$(objdump -p "$library" | awk '$1 == "NEEDED" { print $2 }')
for lib in 'libgrpc++.so.1.51' 'libgrpc.so.29' 'libprotobuf.so.32' 'libabsl_status.so.20220623'; do
  grep -qxF "$lib" <<<"$needed" || fail "$library does not load $lib (NEEDED: $(echo $needed))"
done

# Public classes (every member) and free functions, as declared in the
# installed headers.
classes='Client|MetricSync|CollectiveHandle|TensorView|MutableTensorView|Tensor|Device|BufferPool|BufferDeleter'
functions='operator<<|NumElements|NumBytes|ShapeToString|DataTypeSize|DataTypeName|ReduceOpName|IsFloatingPoint|CheckOpSupported|DataTypeFromWire|ReduceOpFromWire|DataTypeToWire|ReduceOpToWire|AllocateBuffer'
public="^reducer::(($classes)::|($functions)(\\(|\\[abi))"
internal='^(grpc|grpc_|gpr_|google::|absl::|std::|reducer::v1::|reducer::Client::Impl::|reducer::CollectiveHandle::Impl::|reducer::ClientSession|reducer::CollectiveRpc|reducer::CollectivesRpc|reducer::CompletionDriver|reducer::Fingerprint)'

symbols=$(nm -D --defined-only "$library" | c++filt) || {
  fail "nm -D --defined-only $library failed"; symbols=""; }
count=0
while IFS= read -r line; do
  [[ -z "$line" ]] && continue
  # "ADDRESS TYPE NAME@@VERSION"; the version node itself has type A.
  type=$(awk '{ print $2 }' <<<"$line")
  name=$(cut -d' ' -f3- <<<"$line")
  if [[ "$type" == "A" ]]; then
    [[ "$name" == "$version_node" ]] || fail "unexpected version node '$name'"
    continue
  fi
  count=$((count + 1))
  base=${name%@@*}
  [[ "$name" == "$base@@$version_node" ]] ||
    fail "not under version $version_node: $name"
  if [[ "$base" =~ $internal ]]; then
    fail "internal symbol exported: $base"
  elif ! [[ "$base" =~ $public ]]; then
    fail "symbol outside the public API exported: $base"
  fi
done <<<"$symbols"

# What a worker calls, directly or from the headers' inline code.
for required in \
    'reducer::Client::Connect(reducer::ClientOptions const&)' \
    'reducer::Client::AllReduce(reducer::TensorView const&, reducer::ReduceOp, reducer::CallOptions const&)' \
    'reducer::Client::AllReduceInPlace(' \
    'reducer::Client::~Client()' \
    'reducer::MetricSync::Reduce' \
    'reducer::MetricSync::ReduceInPlace(' \
    'reducer::Client::AllReduceAsync(' \
    'reducer::Client::AllReduceInPlaceAsync(' \
    'reducer::CollectiveHandle::Wait()' \
    'reducer::CollectiveHandle::Ready()' \
    'reducer::Client::AllGatherAsync(' \
    'reducer::TensorView::TensorView(void const*, reducer::DataType' \
    'reducer::MutableTensorView::MutableTensorView(void*, reducer::DataType' \
    'reducer::Tensor::Tensor(reducer::Tensor const&)' \
    'reducer::BufferDeleter::operator()(void*) const' \
    'reducer::DataTypeSize(reducer::DataType)' \
    'reducer::Device::ToString' \
    'reducer::TensorView::OnDevice(reducer::Device'; do
  grep -qF -- " $required" <<<"$symbols" || fail "public symbol not exported: $required"
done

if [[ $failures -gt 0 ]]; then
  echo "$failures failure(s) in the exports of $library" >&2
  exit 1
fi
echo "OK: $count symbols exported, all public, soname $soname"
