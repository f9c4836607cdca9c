#include "client/security/channel_security.h"

#include <openssl/bio.h>
#include <openssl/pem.h>

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_credentials_options.h"
#include "grpcpp/support/client_interceptor.h"

namespace reducer {
namespace {

// How often the worker's TLS files are looked at for a new version: a
// rotated Secret reaches the pod within a minute anyway.
constexpr unsigned int kTlsRefreshSeconds = 10;

// Adds the token to the initial metadata of every call of its channel.
class TokenInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit TokenInterceptor(const std::string* authorization)
      : authorization_(authorization) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace("authorization", *authorization_);
    }
    methods->Proceed();
  }

 private:
  const std::string* const authorization_;  // owned by the factory
};

class TokenInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit TokenInterceptorFactory(std::string authorization)
      : authorization_(std::move(authorization)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* /*info*/) override {
    return new TokenInterceptor(&authorization_);
  }

 private:
  const std::string authorization_;
};

// OK when `path` holds a PEM private key (`is_key`) or certificate; else
// INVALID_ARGUMENT naming `field` and the file.
absl::Status CheckPem(const std::string& field, const std::string& path,
                      bool is_key) {
  BIO* bio = BIO_new_file(path.c_str(), "r");
  if (bio == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("ClientOptions::tls.", field, "=", path,
                     ": cannot read the file"));
  }
  bool found;
  if (is_key) {
    EVP_PKEY* key = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
    found = key != nullptr;
    EVP_PKEY_free(key);
  } else {
    X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
    found = cert != nullptr;
    X509_free(cert);
  }
  BIO_free(bio);
  if (found) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "ClientOptions::tls.", field, "=", path, ": no PEM ",
      is_key ? "unencrypted private key" : "certificate", " in it"));
}

}  // namespace

absl::StatusOr<ChannelSecurity> ChannelSecurity::Create(
    const ClientOptions& options) {
  ChannelSecurity security;
  if (!options.token.empty()) {
    security.authorization_ = absl::StrCat("Bearer ", options.token);
  }
  if (!options.tls.has_value()) {
    security.credentials_ = grpc::InsecureChannelCredentials();
    return security;
  }
  const TlsOptions& tls = *options.tls;
  if (tls.ca_file.empty()) {
    return absl::InvalidArgumentError(
        "ClientOptions::tls.ca_file is empty: name the PEM file of the CA "
        "that signed reducerd's certificate");
  }
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return absl::InvalidArgumentError(
        "ClientOptions::tls.cert_file and key_file go together (mutual TLS): "
        "give both or neither");
  }
  absl::Status ok = CheckPem("ca_file", tls.ca_file, false);
  if (ok.ok() && !tls.cert_file.empty()) {
    ok = CheckPem("cert_file", tls.cert_file, false);
    if (ok.ok()) ok = CheckPem("key_file", tls.key_file, true);
  }
  if (!ok.ok()) return ok;
  // The provider's files are re-read every kTlsRefreshSeconds; the roots
  // and (for mutual TLS) the identity must both be watched, or the
  // handshaker gets nothing.
  auto provider =
      std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
          tls.key_file, tls.cert_file, tls.ca_file, kTlsRefreshSeconds);
  grpc::experimental::TlsChannelCredentialsOptions tls_options;
  tls_options.set_certificate_provider(provider);
  tls_options.watch_root_certs();
  if (!tls.cert_file.empty()) tls_options.watch_identity_key_cert_pairs();
  tls_options.set_verify_server_certs(true);
  security.credentials_ = grpc::experimental::TlsCredentials(tls_options);
  security.server_name_ = tls.server_name;
  return security;
}

std::shared_ptr<grpc::Channel> ChannelSecurity::NewChannel(
    const std::string& target, grpc::ChannelArguments args) const {
  if (!server_name_.empty()) args.SetSslTargetNameOverride(server_name_);
  if (authorization_.empty()) {
    return grpc::CreateCustomChannel(target, credentials_, args);
  }
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
      interceptors;
  interceptors.push_back(std::make_unique<TokenInterceptorFactory>(authorization_));
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      target, credentials_, args, std::move(interceptors));
}

}  // namespace reducer
