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

}  // namespace
}  // namespace tnmt
