// Crash-safe file steps: atomic file writes, directory installs with and without replacement,
// removal through an aside name, and errors that name the path.
#include "trainer/checkpoint/durable_file.h"

#include <filesystem>
#include <fstream>
#include <iterator>

#include <gtest/gtest.h>

namespace tnmt {
namespace {

namespace fs = std::filesystem;

std::string Fresh() {
  const fs::path dir = fs::path(::testing::TempDir()) /
                       ::testing::UnitTest::GetInstance()->current_test_info()->name();
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

std::string Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(DurableFileTest, AtomicWriteReplacesAndLeavesNoTemp) {
  const std::string dir = Fresh();
  ASSERT_TRUE(WriteFileAtomically(dir + "/f", "one", dir + "/f.tmp").ok());
  ASSERT_TRUE(WriteFileAtomically(dir + "/f", std::string("t\0o", 3), dir + "/f.tmp").ok());
  EXPECT_EQ(Read(dir + "/f"), std::string("t\0o", 3));
  EXPECT_FALSE(fs::exists(dir + "/f.tmp"));
  auto back = ReadFileToString(dir + "/f");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, std::string("t\0o", 3));
}

TEST(DurableFileTest, ErrorsNameThePath) {
  const std::string dir = Fresh();
  absl::Status s = WriteFileSynced(dir + "/no/such/dir/f", "x");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find(dir + "/no/such/dir/f"), std::string::npos) << s;
  auto r = ReadFileToString(dir + "/missing");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(std::string(r.status().message()).find("missing"), std::string::npos);
  s = CopyFileSynced(dir + "/missing", dir + "/copy");
  EXPECT_NE(std::string(s.message()).find("missing"), std::string::npos) << s;
  EXPECT_FALSE(fs::exists(dir + "/copy"));
}

TEST(DurableFileTest, InstallDirectory) {
  const std::string dir = Fresh();
  auto make = [&](const std::string& name, const std::string& content) {
    fs::create_directories(dir + "/" + name);
    EXPECT_TRUE(WriteFileSynced(dir + "/" + name + "/f", content).ok());
  };
  make(".tmp-a", "first");
  ASSERT_TRUE(InstallDirectory(dir + "/.tmp-a", dir + "/a", /*replace=*/false).ok());
  EXPECT_EQ(Read(dir + "/a/f"), "first");
  EXPECT_FALSE(fs::exists(dir + "/.tmp-a"));

  make(".tmp-a", "second");
  absl::Status s = InstallDirectory(dir + "/.tmp-a", dir + "/a", /*replace=*/false);
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists) << s;
  EXPECT_EQ(Read(dir + "/a/f"), "first");

  ASSERT_TRUE(InstallDirectory(dir + "/.tmp-a", dir + "/a", /*replace=*/true).ok());
  EXPECT_EQ(Read(dir + "/a/f"), "second");
  EXPECT_FALSE(fs::exists(dir + "/.tmp-a"));
  EXPECT_FALSE(fs::exists(dir + "/.tmp-a.old"));

  fs::create_directories(dir + "/empty");
  make(".tmp-e", "third");
  ASSERT_TRUE(InstallDirectory(dir + "/.tmp-e", dir + "/empty", /*replace=*/false).ok());
  EXPECT_EQ(Read(dir + "/empty/f"), "third");
}

TEST(DurableFileTest, RemoveTreeVia) {
  const std::string dir = Fresh();
  fs::create_directories(dir + "/t/sub");
  ASSERT_TRUE(WriteFileSynced(dir + "/t/sub/f", "x").ok());
  ASSERT_TRUE(RemoveTreeVia(dir + "/t", dir + "/.tmp-delete-t").ok());
  EXPECT_FALSE(fs::exists(dir + "/t"));
  EXPECT_FALSE(fs::exists(dir + "/.tmp-delete-t"));
  EXPECT_FALSE(RemoveTreeVia(dir + "/t", dir + "/.tmp-delete-t").ok());
}

TEST(DurableFileTest, ParentDirectory) {
  EXPECT_EQ(ParentDirectory("a/b/c"), "a/b");
  EXPECT_EQ(ParentDirectory("c"), ".");
  EXPECT_EQ(ParentDirectory("/c"), "/");
}

}  // namespace
}  // namespace tnmt
