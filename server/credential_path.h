// Where reducerd finds a file flag's file under systemd's LoadCredential=:
// a value that is a bare name (no '/') names a credential, the file of
// that name in $CREDENTIALS_DIRECTORY, where systemd copied it when the
// service started (readable by the service's dynamic user even when the
// file it came from is root's alone). reducerd's --tls_cert_file,
// --tls_key_file, --tls_client_ca_file and --job_tokens_file go through it.
//
//   options.tls_key_file = CredentialPath(absl::GetFlag(FLAGS_tls_key_file),
//                                         std::getenv("CREDENTIALS_DIRECTORY"));
//
// Thread-compatible (a function of its arguments).
#ifndef REDUCER_SERVER_CREDENTIAL_PATH_H_
#define REDUCER_SERVER_CREDENTIAL_PATH_H_

#include <string>

namespace reducer {

// `value` unchanged when it is empty, holds a '/', or `credentials_directory`
// is null or empty (outside systemd, or a unit without credentials);
// else credentials_directory + "/" + value.
std::string CredentialPath(const std::string& value,
                           const char* credentials_directory);

}  // namespace reducer

#endif  // REDUCER_SERVER_CREDENTIAL_PATH_H_
