// The hash a job tokens file holds for a token, made as users are told to
// make it (`printf %s TOKEN | sha256sum`): by coreutils, independently of
// reducerd's own SHA-256, so that tests check reducerd against it.
#ifndef REDUCER_TESTS_TOKEN_HASH_H_
#define REDUCER_TESTS_TOKEN_HASH_H_

#include <string>

namespace reducer::testing {

// 64 lowercase hex digits; empty when sha256sum cannot be run. `token` must
// hold no single quote (it is quoted for the shell).
std::string Sha256Hex(const std::string& token);

}  // namespace reducer::testing

#endif  // REDUCER_TESTS_TOKEN_HASH_H_
