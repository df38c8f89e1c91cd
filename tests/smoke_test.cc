#include <gtest/gtest.h>
#include "absl/status/status.h"
#include <cblas.h>
TEST(Smoke, Works) { EXPECT_TRUE(absl::OkStatus().ok()); float a=1,b=2,c=0; cblas_sgemm(CblasRowMajor,CblasNoTrans,CblasNoTrans,1,1,1,1,&a,1,&b,1,0,&c,1); EXPECT_EQ(c,2); }
