// Device lists: accepted spellings, errors that name the flag and value, "cuda" resolution and
// the device of each local rank under mpirun.
#include "trainer/launch/devices.h"

#include <cstdlib>

#include <gtest/gtest.h>

namespace tnmt::train {
namespace {

std::vector<std::string> Names(const DeviceList& d) {
  std::vector<std::string> out;
  for (int i = 0; i < d.size(); ++i) out.push_back(d.Name(i));
  return out;
}

TEST(DevicesTest, Spellings) {
  using V = std::vector<std::string>;
  EXPECT_EQ(Names(*ParseDeviceList("cpu")), V({"cpu"}));
  EXPECT_EQ(Names(*ParseDeviceList("cpu,cpu,cpu")), V({"cpu", "cpu", "cpu"}));
  EXPECT_EQ(Names(*ParseDeviceList("cuda:0,1,3")), V({"cuda:0", "cuda:1", "cuda:3"}));
  EXPECT_EQ(Names(*ParseDeviceList("cuda:0,cuda:1")), V({"cuda:0", "cuda:1"}));
  EXPECT_EQ(Names(*ParseDeviceList("cuda:2, 0")), V({"cuda:2", "cuda:0"}));
  EXPECT_FALSE(ParseDeviceList("cpu")->cuda);
  EXPECT_TRUE(ParseDeviceList("cuda:5")->cuda);
  auto all = ParseDeviceList("cuda");
  ASSERT_TRUE(all.ok());
  EXPECT_TRUE(all->cuda && all->all_visible && all->ids.empty());
  ASSERT_TRUE(ResolveAllVisible(3, &*all).ok());
  EXPECT_EQ(Names(*all), V({"cuda:0", "cuda:1", "cuda:2"}));
  DeviceList none = *ParseDeviceList("cuda");
  EXPECT_FALSE(ResolveAllVisible(0, &none).ok());
}

TEST(DevicesTest, ErrorsNameTheFlagAndValue) {
  auto message = [](const char* v) { return std::string(ParseDeviceList(v).status().message()); };
  EXPECT_EQ(message("cuda:0,cuda:0"), "--devices cuda:0,cuda:0: device listed twice (cuda:0)");
  EXPECT_EQ(message("cuda:1,2,1"), "--devices cuda:1,2,1: device listed twice (cuda:1)");
  EXPECT_EQ(message("gpu:1").rfind("--devices gpu:1: expected cpu or cuda[:N]", 0), 0u) << message("gpu:1");
  EXPECT_EQ(message("0,1").rfind("--devices 0,1: expected cpu or cuda[:N]", 0), 0u);
  EXPECT_EQ(message("cuda:-1").rfind("--devices cuda:-1: expected cpu or cuda[:N]", 0), 0u);
  EXPECT_EQ(message("cuda:").rfind("--devices cuda:: expected", 0), 0u);
  EXPECT_EQ(message("").rfind("--devices : expected", 0), 0u);
  EXPECT_EQ(message("cpu,"), "--devices cpu,: expected cpu or cuda[:N], got \"\" (e.g. cpu,cpu or cuda:0,1 or cuda)");
  EXPECT_EQ(message("cpu,cuda:0"), "--devices cpu,cuda:0: cannot mix cpu and cuda devices");
  EXPECT_EQ(message("cuda,cuda:1"),
            "--devices cuda,cuda:1: \"cuda\" (every visible GPU) cannot be combined with a list");
  EXPECT_EQ(message("cuda,1").rfind("--devices cuda,1: expected", 0), 0u);
}

TEST(DevicesTest, DeviceForLocalRank) {
  EXPECT_EQ(*DeviceForLocalRank(*ParseDeviceList("cuda"), 5, 4, "cuda"), "cuda:1");
  EXPECT_EQ(*DeviceForLocalRank(*ParseDeviceList("cuda:3,2"), 1, 0, "cuda:3,2"), "cuda:2");
  EXPECT_EQ(*DeviceForLocalRank(*ParseDeviceList("cpu"), 7, 0, "cpu"), "cpu");
  auto short_list = DeviceForLocalRank(*ParseDeviceList("cuda:0,1"), 2, 8, "cuda:0,1");
  ASSERT_FALSE(short_list.ok());
  EXPECT_NE(short_list.status().message().find(
                "--devices cuda:0,1: lists 2 device(s) but this process is local rank 2"),
            std::string::npos);
  EXPECT_FALSE(DeviceForLocalRank(*ParseDeviceList("cuda"), 0, 0, "cuda").ok());
}

TEST(DevicesTest, MpiLocalRankFromTheEnvironment) {
  ::unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
  ::unsetenv("MPI_LOCALRANKID");
  ::unsetenv("SLURM_LOCALID");
  EXPECT_FALSE(MpiLocalRank().has_value());
  ::setenv("MPI_LOCALRANKID", "3", 1);
  EXPECT_EQ(MpiLocalRank(), 3);
  ::setenv("OMPI_COMM_WORLD_LOCAL_RANK", "5", 1);
  EXPECT_EQ(MpiLocalRank(), 5);
  ::unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
  ::unsetenv("MPI_LOCALRANKID");
}

}  // namespace
}  // namespace tnmt::train
