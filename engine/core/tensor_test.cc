// Tensor: allocation, alignment, views and shape errors.
#include "engine/core/tensor.h"

#include <cstdint>

#include <gtest/gtest.h>

namespace tnmt {
namespace {

TEST(TensorTest, EmptyIsAlignedAndShaped) {
  auto t = Tensor::Empty({3, 5});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->numel(), 15);
  EXPECT_EQ(t->dim(-1), 5);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t->f32()) % 64, 0u);
  EXPECT_EQ(t->ShapeString(), "[3, 5]");
}

TEST(TensorTest, RowsShareStorage) {
  auto t = Tensor::FromVector({3, 2}, {0, 1, 2, 3, 4, 5});
  ASSERT_TRUE(t.ok());
  Tensor mid = t->Rows(1, 3);
  EXPECT_EQ(mid.dim(0), 2);
  EXPECT_EQ(mid.f32()[0], 2.0f);
  mid.f32()[0] = 7.0f;
  EXPECT_EQ(t->f32()[2], 7.0f);
}

TEST(TensorTest, BadShapesAreErrors) {
  EXPECT_FALSE(Tensor::FromVector({2, 2}, {1, 2, 3}).ok());
  auto t = Tensor::Zeros({4});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->f32()[3], 0.0f);
  EXPECT_FALSE(t->Reshape({3}).ok());
  EXPECT_TRUE(t->Reshape({2, 2}).ok());
  EXPECT_FALSE(Tensor::Empty({-1}).ok());
}

TEST(TensorTest, HugeAllocationFailsCleanly) {
  auto t = Tensor::Empty({int64_t{1} << 40, 1 << 20});
  EXPECT_FALSE(t.ok());
}

TEST(TensorTest, DeviceAndDTypeNames) {
  for (DType t : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    auto parsed = ParseFloatDType(DTypeName(t));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, t);
  }
  for (const char* bad : {"int32", "fp16", "half", "", "Float32"}) EXPECT_FALSE(ParseFloatDType(bad).ok()) << bad;
  auto cpu = ParseDeviceId("cpu");
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ(cpu->device, Device::kCpu);
  auto cuda = ParseDeviceId("cuda");
  ASSERT_TRUE(cuda.ok());
  EXPECT_EQ(cuda->device, Device::kCuda);
  EXPECT_EQ(cuda->index, -1);
  auto three = ParseDeviceId("cuda:3");
  ASSERT_TRUE(three.ok());
  EXPECT_EQ(three->index, 3);
  EXPECT_EQ(ParseDeviceId("cuda:1023")->index, 1023);
  for (const char* bad : {"gpu", "cuda:", "cuda:-1", "cuda:+1", "cuda:x", "cuda:1:2", "cuda:00000", "CUDA", " cpu", ""}) {
    auto d = ParseDeviceId(bad);
    ASSERT_FALSE(d.ok()) << bad;
    EXPECT_EQ(d.status().message(), "expected cpu, cuda or cuda:N");
  }
}

}  // namespace
}  // namespace tnmt
