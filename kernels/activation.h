// The feed-forward activations, one enum for every part of tnmt: the model config, the CPU
// kernels (kernels/cpu/elementwise.h) and the CUDA kernels (kernels/cuda/elementwise.h).
#pragma once

namespace tnmt::kernels {

// kGelu: tanh approximation 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))); kGeluErf: the exact
// x * Phi(x) = 0.5x(1 + erf(x / sqrt(2))); kSwish: x * sigmoid(x) (SiLU).
enum class Activation { kRelu, kGelu, kGeluErf, kSwish };

// The config.json name of an activation ("relu", "gelu", "gelu_erf", "swish").
constexpr const char* ActivationName(Activation act) {
  switch (act) {
    case Activation::kRelu: return "relu";
    case Activation::kGelu: return "gelu";
    case Activation::kGeluErf: return "gelu_erf";
    case Activation::kSwish: return "swish";
  }
  return "?";
}

// Whether the CUDA kernels implement `act` (kernels/cuda BiasActivation, ActivationBackward);
// the others run on the CPU only.
constexpr bool HasCudaKernel(Activation act) {
  return act == Activation::kRelu || act == Activation::kGelu;
}

}  // namespace tnmt::kernels
