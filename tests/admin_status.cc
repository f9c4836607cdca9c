#include "tests/admin_status.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "proto/reducer/v1/admin.grpc.pb.h"

namespace reducer {
namespace testing {

absl::StatusOr<v1::StatusResponse> AdminStatusOf(const std::string& address) {
  std::unique_ptr<v1::Admin::Stub> admin = v1::Admin::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(3)));
  v1::StatusResponse status;
  const grpc::Status answered =
      admin->Status(&context, v1::StatusRequest(), &status);
  if (!answered.ok()) {
    return absl::UnavailableError(absl::StrCat("Admin.Status of ", address,
                                               ": ", answered.error_message()));
  }
  return status;
}

}  // namespace testing
}  // namespace reducer
