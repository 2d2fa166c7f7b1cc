#include "m2m/auth.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace fedfs::m2m {
namespace {

Bytes Key(char c) { return Bytes(kClusterKeyBytes, std::byte(c)); }

TEST(Auth, SameKeySucceedsBothWays) {
  ClientHandshake c(Key('a'));
  ServerHandshake s(Key('a'));
  auto challenge = s.OnHello(c.Hello());
  ASSERT_TRUE(challenge);
  auto proof = c.OnChallenge(*challenge);
  ASSERT_TRUE(proof);
  auto verdict = s.OnProof(*proof);
  ASSERT_TRUE(verdict);
  EXPECT_TRUE(c.OnResult(ServerHandshake::ResultFrame(verdict)));
}

TEST(Auth, ClientRefusesServerWithoutKey) {
  ClientHandshake c(Key('a'));
  ServerHandshake s(Key('b'));
  auto challenge = s.OnHello(c.Hello());
  ASSERT_TRUE(challenge);
  auto proof = c.OnChallenge(*challenge);
  ASSERT_FALSE(proof);
  EXPECT_EQ(proof.error().code, EACCES);
}

TEST(Auth, ServerRefusesClientWithoutKey) {
  // A client with the wrong key cannot forge the proof, even if it skips
  // checking the server.
  ClientHandshake good(Key('a'));
  ServerHandshake s(Key('a'));
  auto challenge = s.OnHello(good.Hello());
  ASSERT_TRUE(challenge);
  FrameHeader forged;
  forged.kind = FrameKind::kAuthProof;
  forged.mac = Bytes(32, std::byte{0});
  auto verdict = s.OnProof(forged);
  ASSERT_FALSE(verdict);
  EXPECT_EQ(verdict.error().code, EACCES);
  EXPECT_FALSE(ClientHandshake(Key('a')).OnResult(ServerHandshake::ResultFrame(verdict)));
}

TEST(Auth, ProofWithoutHelloIsRefused) {
  ServerHandshake s(Key('a'));
  FrameHeader p;
  p.kind = FrameKind::kAuthProof;
  EXPECT_FALSE(s.OnProof(p));
}

class KeyFile : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "fedfs-key-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/key";
  }
  void TearDown() override {
    ::unlink(path_.c_str());
    ::rmdir(dir_.c_str());
  }
  void Write(const std::string& text, mode_t mode) {
    std::ofstream(path_) << text;
    ::chmod(path_.c_str(), mode);
  }
  std::string dir_, path_;
};

TEST_F(KeyFile, LoadsGeneratedKey) {
  Write(GenerateClusterKeyHex() + "\n", 0600);
  auto k = LoadClusterKeyFile(path_);
  ASSERT_TRUE(k) << k.error().ToString();
  EXPECT_EQ(k->size(), kClusterKeyBytes);
}

TEST_F(KeyFile, RefusesWorldReadable) {
  Write(GenerateClusterKeyHex(), 0644);
  auto k = LoadClusterKeyFile(path_);
  ASSERT_FALSE(k);
  EXPECT_EQ(k.error().code, EPERM);
}

TEST_F(KeyFile, RefusesMalformed) {
  Write("not hex", 0600);
  EXPECT_EQ(LoadClusterKeyFile(path_).error().code, EINVAL);
}

TEST_F(KeyFile, MissingFileNamesPath) {
  auto k = LoadClusterKeyFile(dir_ + "/absent");
  ASSERT_FALSE(k);
  EXPECT_EQ(k.error().code, ENOENT);
  EXPECT_NE(k.error().context.find("absent"), std::string::npos);
}

}  // namespace
}  // namespace fedfs::m2m
