#include "server/security/server_credentials.h"

#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_credentials_options.h"

namespace reducer {
namespace {

struct BioCloser {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
struct X509Closer {
  void operator()(X509* cert) const { X509_free(cert); }
};
struct KeyCloser {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
using Bio = std::unique_ptr<BIO, BioCloser>;
using Cert = std::unique_ptr<X509, X509Closer>;
using Key = std::unique_ptr<EVP_PKEY, KeyCloser>;

absl::StatusOr<Bio> OpenPem(const std::string& flag, const std::string& path) {
  Bio bio(BIO_new_file(path.c_str(), "r"));
  if (bio == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, "=", path, ": cannot read the file"));
  }
  return bio;
}

absl::StatusOr<Cert> ReadCertificate(const std::string& flag,
                                     const std::string& path) {
  absl::StatusOr<Bio> bio = OpenPem(flag, path);
  if (!bio.ok()) return bio.status();
  Cert cert(PEM_read_bio_X509(bio->get(), nullptr, nullptr, nullptr));
  if (cert == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", flag, "=", path, ": no PEM certificate (BEGIN CERTIFICATE) in it"));
  }
  return cert;
}

absl::StatusOr<Key> ReadKey(const std::string& flag, const std::string& path) {
  absl::StatusOr<Bio> bio = OpenPem(flag, path);
  if (!bio.ok()) return bio.status();
  Key key(PEM_read_bio_PrivateKey(bio->get(), nullptr, nullptr, nullptr));
  if (key == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", flag, "=", path,
        ": no unencrypted PEM private key in it (BEGIN PRIVATE KEY)"));
  }
  return key;
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerOptions& options) {
  const bool tls = !options.tls_cert_file.empty();
  if (tls != !options.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert_file and --tls_key_file go together: give both to serve "
        "TLS, or neither for plaintext");
  }
  if (!tls) {
    if (!options.tls_client_ca_file.empty()) {
      return absl::InvalidArgumentError(
          "--tls_client_ca_file needs TLS: give --tls_cert_file and "
          "--tls_key_file too");
    }
    return grpc::InsecureServerCredentials();
  }
  // Check the files now, so that a mistake stops reducerd at start with the
  // flag's name instead of failing every handshake.
  absl::StatusOr<Cert> cert = ReadCertificate("tls_cert_file", options.tls_cert_file);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<Key> key = ReadKey("tls_key_file", options.tls_key_file);
  if (!key.ok()) return key.status();
  if (X509_check_private_key(cert->get(), key->get()) != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls_key_file=", options.tls_key_file,
        " is not the private key of --tls_cert_file=", options.tls_cert_file));
  }
  const bool mutual = !options.tls_client_ca_file.empty();
  if (mutual) {
    absl::StatusOr<Cert> ca =
        ReadCertificate("tls_client_ca_file", options.tls_client_ca_file);
    if (!ca.ok()) return ca.status();
  }
  const unsigned int refresh_s = static_cast<unsigned int>(
      std::max<int64_t>(1, absl::ToInt64Seconds(options.tls_refresh_interval)));
  auto provider =
      std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
          options.tls_key_file, options.tls_cert_file,
          options.tls_client_ca_file, refresh_s);
  grpc::experimental::TlsServerCredentialsOptions tls_options(provider);
  tls_options.watch_identity_key_cert_pairs();
  if (mutual) {
    // Both the identity and the roots must be watched, or the provider
    // hands the handshaker no client CA and every handshake fails.
    tls_options.watch_root_certs();
    tls_options.set_cert_request_type(
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  } else {
    tls_options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  return grpc::experimental::TlsServerCredentials(tls_options);
}

}  // namespace reducer
