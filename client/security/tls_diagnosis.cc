#include "client/security/tls_diagnosis.h"

// The probe, step by step:
//  1. Parse the target into host and port ("dns:///h:p", "ipv4:h:p", "h:p",
//     "[v6]:p"); anything else (unix sockets) is not diagnosed.
//  2. Connect over TCP with a timeout. No connection: nothing to say (the
//     daemon may still be starting; the caller keeps waiting).
//  3. Run a TLS handshake with OpenSSL, verifying nothing, presenting the
//     worker's certificate when it has one, and recording any alert
//     reducerd sends.
//  4. No server certificate came back: reducerd does not speak TLS.
//     A certificate came back but the client is plaintext: it does.
//  5. Verify the certificate against tls.ca_file and check its names
//     against tls.server_name (or the target's host), as gRPC would.
//  6. Read once: under TLS 1.3 a server refuses a client certificate only
//     after the client's handshake is done; gRPC then closes the
//     connection (sometimes with an alert) where it would otherwise send
//     its first HTTP/2 frame. The worker's own certificate file then says
//     what is likely wrong (none, expired, another issuer).
#include <arpa/inet.h>
#include <netdb.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"

namespace reducer {
namespace {

struct HostPort {
  std::string host;
  std::string port;
};

std::optional<HostPort> ParseTarget(absl::string_view target) {
  for (absl::string_view prefix : {"dns:///", "dns:", "ipv4:", "ipv6:"}) {
    if (absl::StartsWith(target, prefix)) {
      target.remove_prefix(prefix.size());
      break;
    }
  }
  if (absl::StrContains(target, "://") || absl::StartsWith(target, "unix:")) {
    return std::nullopt;
  }
  const size_t colon = target.rfind(':');
  if (colon == absl::string_view::npos || colon + 1 == target.size()) {
    return std::nullopt;
  }
  HostPort hp{std::string(target.substr(0, colon)),
              std::string(target.substr(colon + 1))};
  if (hp.host.size() >= 2 && hp.host.front() == '[' && hp.host.back() == ']') {
    hp.host = hp.host.substr(1, hp.host.size() - 2);
  }
  return hp;
}

// A connected TCP socket with send and receive timeouts, or -1.
int ConnectTcp(const HostPort& hp, absl::Duration timeout) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(hp.host.c_str(), hp.port.c_str(), &hints, &found) != 0) {
    return -1;
  }
  int fd = -1;
  const timeval tv = absl::ToTimeval(timeout);
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));  // bounds connect
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) break;
    close(fd);
    fd = -1;
  }
  freeaddrinfo(found);
  return fd;
}

bool IsIpAddress(const std::string& host) {
  unsigned char buffer[16];
  return inet_pton(AF_INET, host.c_str(), buffer) == 1 ||
         inet_pton(AF_INET6, host.c_str(), buffer) == 1;
}

// The DNS and IP names in `cert`'s subjectAltName, as text.
std::vector<std::string> SubjectAltNames(X509* cert) {
  std::vector<std::string> names;
  auto* sans = static_cast<GENERAL_NAMES*>(
      X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  if (sans == nullptr) return names;
  for (int i = 0; i < sk_GENERAL_NAME_num(sans); ++i) {
    const GENERAL_NAME* name = sk_GENERAL_NAME_value(sans, i);
    if (name->type == GEN_DNS) {
      const ASN1_STRING* s = name->d.dNSName;
      names.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                         ASN1_STRING_length(s));
    } else if (name->type == GEN_IPADD) {
      const ASN1_STRING* s = name->d.iPAddress;
      char text[INET6_ADDRSTRLEN] = {};
      const int family = ASN1_STRING_length(s) == 4 ? AF_INET : AF_INET6;
      if (inet_ntop(family, ASN1_STRING_get0_data(s), text, sizeof(text))) {
        names.emplace_back(text);
      }
    }
  }
  GENERAL_NAMES_free(sans);
  return names;
}

std::string NameOf(X509_NAME* name) {
  char text[256] = {};
  X509_NAME_oneline(name, text, sizeof(text));
  return text;
}

// The SSL ex_data slot where RecordAlert finds the std::string to fill
// with the first alert reducerd sends.
int AlertIndex() {
  static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}

void RecordAlert(const SSL* ssl, int where, int value) {
  if ((where & SSL_CB_READ_ALERT) != SSL_CB_READ_ALERT) return;
  auto* alert = static_cast<std::string*>(SSL_get_ex_data(ssl, AlertIndex()));
  if (alert != nullptr && alert->empty()) {
    *alert = SSL_alert_desc_string_long(value);
  }
}

struct SslCloser {
  void operator()(SSL_CTX* ctx) const { SSL_CTX_free(ctx); }
  void operator()(SSL* ssl) const { SSL_free(ssl); }
  void operator()(X509* cert) const { X509_free(cert); }
  void operator()(X509_STORE* store) const { X509_STORE_free(store); }
  void operator()(X509_STORE_CTX* ctx) const { X509_STORE_CTX_free(ctx); }
};
template <typename T>
using Owned = std::unique_ptr<T, SslCloser>;

// Step 5: the server certificate against the CA file and the expected name.
absl::Status CheckServerCertificate(const std::string& target, SSL* ssl,
                                    X509* cert, const TlsOptions& tls,
                                    const std::string& name) {
  Owned<X509_STORE> store(X509_STORE_new());
  if (X509_STORE_load_file(store.get(), tls.ca_file.c_str()) != 1) {
    return absl::OkStatus();  // ChannelSecurity reports unreadable files
  }
  Owned<X509_STORE_CTX> ctx(X509_STORE_CTX_new());
  X509_STORE_CTX_init(ctx.get(), store.get(), cert, SSL_get_peer_cert_chain(ssl));
  if (X509_verify_cert(ctx.get()) != 1) {
    const int error = X509_STORE_CTX_get_error(ctx.get());
    std::string fix = "point tls.ca_file at the CA that signed reducerd's "
                      "certificate, or have it reissued by yours";
    if (error == X509_V_ERR_CERT_HAS_EXPIRED ||
        error == X509_V_ERR_CERT_NOT_YET_VALID) {
      fix = "reducerd's certificate must be renewed (--tls_cert_file)";
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "reducerd at ", target, " presented a certificate (subject ",
        NameOf(X509_get_subject_name(cert)), ", issuer ",
        NameOf(X509_get_issuer_name(cert)), ") that tls.ca_file=", tls.ca_file,
        " does not trust: ", X509_verify_cert_error_string(error), "; ", fix));
  }
  const bool matches =
      IsIpAddress(name) ? X509_check_ip_asc(cert, name.c_str(), 0) == 1
                        : X509_check_host(cert, name.c_str(), name.size(), 0,
                                          nullptr) == 1;
  if (!matches) {
    return absl::FailedPreconditionError(absl::StrCat(
        "reducerd at ", target, " presented a certificate for [",
        absl::StrJoin(SubjectAltNames(cert), ", "), "], which does not name \"",
        name, "\"; connect to one of those names, set tls.server_name to one "
        "of them, or reissue the certificate with this name"));
  }
  return absl::OkStatus();
}

// Step 6: true when reducerd ends the connection (alert or EOF) instead
// of sending its first HTTP/2 frame. False when data came or the read
// timed out.
bool ClosedAfterHandshake(SSL* ssl) {
  char byte;
  errno = 0;
  if (SSL_read(ssl, &byte, 1) > 0) return false;
  const int error = SSL_get_error(ssl, -1);
  if (error == SSL_ERROR_WANT_READ) return false;
  return !(errno == EAGAIN || errno == EWOULDBLOCK);
}

// What is likely wrong with the worker's certificate, as far as it can
// tell from its own files.
std::string ClientCertificateProblem(const TlsOptions& tls) {
  if (tls.cert_file.empty()) {
    return "it requires mutual TLS (--tls_client_ca_file): set tls.cert_file "
           "and tls.key_file";
  }
  Owned<X509> cert;
  if (BIO* bio = BIO_new_file(tls.cert_file.c_str(), "r")) {
    cert.reset(PEM_read_bio_X509(bio, nullptr, nullptr, nullptr));
    BIO_free(bio);
  }
  if (cert != nullptr && X509_cmp_current_time(X509_get0_notAfter(cert.get())) < 0) {
    return absl::StrCat("tls.cert_file=", tls.cert_file,
                        " has expired; renew it");
  }
  if (cert != nullptr && X509_cmp_current_time(X509_get0_notBefore(cert.get())) > 0) {
    return absl::StrCat("tls.cert_file=", tls.cert_file, " is not valid yet");
  }
  return absl::StrCat("tls.cert_file=", tls.cert_file,
                      " must be signed by a CA that reducerd's "
                      "--tls_client_ca_file names (issuer here: ",
                      cert != nullptr ? NameOf(X509_get_issuer_name(cert.get()))
                                      : "unreadable",
                      ")");
}

}  // namespace

absl::Status DiagnoseTls(const std::string& target,
                         const std::optional<TlsOptions>& tls,
                         absl::Duration timeout) {
  std::optional<HostPort> hp = ParseTarget(target);
  if (!hp.has_value()) return absl::OkStatus();
  const int fd = ConnectTcp(*hp, timeout);  // step 2
  if (fd < 0) return absl::OkStatus();

  // Step 3.
  Owned<SSL_CTX> ctx(SSL_CTX_new(TLS_client_method()));
  if (ctx == nullptr) {
    close(fd);
    return absl::OkStatus();
  }
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_NONE, nullptr);
  if (tls.has_value() && !tls->cert_file.empty()) {
    SSL_CTX_use_certificate_chain_file(ctx.get(), tls->cert_file.c_str());
    SSL_CTX_use_PrivateKey_file(ctx.get(), tls->key_file.c_str(), SSL_FILETYPE_PEM);
  }
  static const unsigned char kAlpnH2[] = {2, 'h', '2'};
  SSL_CTX_set_alpn_protos(ctx.get(), kAlpnH2, sizeof(kAlpnH2));
  Owned<SSL> ssl(SSL_new(ctx.get()));
  std::string alert;
  SSL_set_ex_data(ssl.get(), AlertIndex(), &alert);
  SSL_set_info_callback(ssl.get(), RecordAlert);
  SSL_set_fd(ssl.get(), fd);
  const std::string name =
      tls.has_value() && !tls->server_name.empty() ? tls->server_name : hp->host;
  if (!IsIpAddress(name)) SSL_set_tlsext_host_name(ssl.get(), name.c_str());
  const bool handshake_done = SSL_connect(ssl.get()) == 1;
  Owned<X509> cert(SSL_get1_peer_certificate(ssl.get()));

  absl::Status verdict;
  if (!tls.has_value()) {  // step 4, plaintext client
    if (cert != nullptr) {
      verdict = absl::FailedPreconditionError(absl::StrCat(
          "reducerd at ", target, " serves TLS, and this client connects in "
          "plaintext (ClientOptions::tls is unset); set tls.ca_file to the CA "
          "that signed reducerd's certificate"));
    }
  } else if (cert == nullptr) {  // step 4, TLS client
    if (alert.empty()) {
      verdict = absl::FailedPreconditionError(absl::StrCat(
          "reducerd at ", target, " does not speak TLS (it answered the TLS "
          "handshake in plaintext), and ClientOptions::tls is set; unset tls, "
          "or start reducerd with --tls_cert_file and --tls_key_file"));
    } else {
      verdict = absl::FailedPreconditionError(absl::StrCat(
          "reducerd at ", target, " refused the TLS handshake: ", alert));
    }
  } else {
    verdict = CheckServerCertificate(target, ssl.get(), cert.get(), *tls, name);
    if (verdict.ok() && handshake_done && alert.empty() &&
        ClosedAfterHandshake(ssl.get())) {
      verdict = absl::FailedPreconditionError(absl::StrCat(
          "reducerd at ", target, " closed the connection right after the TLS "
          "handshake: it refused this client's certificate; ",
          ClientCertificateProblem(*tls)));
    } else if (verdict.ok() && !alert.empty() && alert != "close notify") {
      verdict = absl::FailedPreconditionError(absl::StrCat(
          "reducerd at ", target, " refused this client's certificate (TLS "
          "alert: ", alert, "); ", ClientCertificateProblem(*tls)));
    }
  }
  ERR_clear_error();
  close(fd);
  return verdict;
}

}  // namespace reducer
