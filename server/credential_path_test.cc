#include "server/credential_path.h"

#include "gtest/gtest.h"

namespace reducer {
namespace {

constexpr char kDir[] = "/run/credentials/reducerd.service";

TEST(CredentialPathTest, ABareNameIsAFileOfTheCredentialsDirectory) {
  EXPECT_EQ(CredentialPath("reducer_tls.key", kDir),
            "/run/credentials/reducerd.service/reducer_tls.key");
}

TEST(CredentialPathTest, APathWithASlashStaysAsGiven) {
  EXPECT_EQ(CredentialPath("/etc/reducer/tls.key", kDir),
            "/etc/reducer/tls.key");
  EXPECT_EQ(CredentialPath("certs/tls.key", kDir), "certs/tls.key");
  EXPECT_EQ(CredentialPath("./tls.key", kDir), "./tls.key");
}

TEST(CredentialPathTest, WithoutACredentialsDirectoryANameStaysAsGiven) {
  EXPECT_EQ(CredentialPath("tls.key", nullptr), "tls.key");
  EXPECT_EQ(CredentialPath("tls.key", ""), "tls.key");
}

TEST(CredentialPathTest, AnEmptyFlagStaysEmpty) {
  EXPECT_EQ(CredentialPath("", kDir), "");
}

}  // namespace
}  // namespace reducer
