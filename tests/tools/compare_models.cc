// compare_models A B TOL: loads two model directories' weights and exits 0 iff every tensor
// has the same name and shape and max |a - b| <= TOL (TOL 0: bit-identical). Prints the worst.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "engine/model/safetensors.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: compare_models DIR_A DIR_B TOLERANCE\n");
    return 2;
  }
  auto a = tnmt::ReadSafetensors(std::string(argv[1]) + "/model.safetensors");
  auto b = tnmt::ReadSafetensors(std::string(argv[2]) + "/model.safetensors");
  if (!a.ok() || !b.ok()) {
    std::fprintf(stderr, "%s\n", std::string((!a.ok() ? a.status() : b.status()).message()).c_str());
    return 2;
  }
  const double tol = std::atof(argv[3]);
  double worst = 0;
  std::string worst_name;
  if (a->size() != b->size()) {
    std::fprintf(stderr, "different tensor counts: %zu vs %zu\n", a->size(), b->size());
    return 1;
  }
  for (const auto& [name, ta] : *a) {
    auto it = b->find(name);
    if (it == b->end() || it->second.value.shape() != ta.value.shape()) {
      std::fprintf(stderr, "tensor %s missing or misshapen in %s\n", name.c_str(), argv[2]);
      return 1;
    }
    const float* x = ta.value.f32();
    const float* y = it->second.value.f32();
    for (int64_t i = 0; i < ta.value.numel(); ++i) {
      const double d = std::fabs(static_cast<double>(x[i]) - y[i]);
      if (!(d <= worst)) worst = d, worst_name = name;
    }
  }
  std::printf("max |a - b| = %.3g (%s)\n", worst, worst_name.c_str());
  return worst <= tol ? 0 : 1;
}
