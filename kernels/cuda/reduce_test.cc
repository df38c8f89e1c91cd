// The training step's device-side sums (reduce.h; no CPU kernel: the CPU trainer sums on the
// host): SumOfSquares against a float64 host sum (within 1e-12 relative: each square exact in
// double, sums of up to a million terms in double), bit-identical from run to run, non-finite
// for NaN or inf in the input and 0 for no input; AddDoubles and StoreDouble exactly.
#include "kernels/cuda/reduce.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cuda/test_util.h"

namespace tnmt::kernels::cuda {
namespace {

using ReduceTest = testing::CudaTest;

TEST_F(ReduceTest, SumOfSquares) {
  double* d_out = Alloc<double>(1);
  auto run = [&](const std::vector<float>& x) {
    Poison(d_out, sizeof(double));
    const float* d_x = x.empty() ? Alloc<float>(1) : ToDevice(x);
    const absl::Status st = SumOfSquares(*ctx_, d_out, d_x, static_cast<int64_t>(x.size()));
    EXPECT_TRUE(st.ok()) << st;
    return ToHost(d_out, 1)[0];
  };
  EXPECT_EQ(run({}), 0.0);
  for (int64_t count : {int64_t{1}, int64_t{255}, int64_t{4099}, int64_t{1000003}}) {
    const std::vector<float> x = Random(count, 0.1f, 3.0f);
    double ref = 0.0;
    for (float v : x) ref += static_cast<double>(v) * v;
    const double got = run(x);
    EXPECT_LE(std::fabs(got - ref), 1e-12 * ref) << count;
    const double again = run(x);
    EXPECT_EQ(std::memcmp(&got, &again, sizeof(got)), 0) << count;
  }
  std::vector<float> x = Random(100003);
  x[50001] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(run(x)));
  x[50001] = -std::numeric_limits<float>::infinity();
  EXPECT_TRUE(std::isinf(run(x)));
  x[50001] = 65504.0f;  // float16's largest value: finite
  EXPECT_TRUE(std::isfinite(run(x)));
  EXPECT_FALSE(SumOfSquares(*ctx_, d_out, nullptr, -1).ok());
}

TEST_F(ReduceTest, AddDoublesAndStoreDouble) {
  const std::vector<double> acc = {1.5, -2.0, 1e300, 0.25}, x = {0.25, 2.0, 1e300, -0.25};
  double* d_acc = ToDevice(acc);
  ASSERT_TRUE(AddDoubles(*ctx_, d_acc, ToDevice(x), 3).ok());
  ASSERT_TRUE(StoreDouble(*ctx_, d_acc + 3, 7.0).ok());
  EXPECT_EQ(ToHost(d_acc, 4), (std::vector<double>{1.75, 0.0, 2e300, 7.0}));
}

}  // namespace
}  // namespace tnmt::kernels::cuda
