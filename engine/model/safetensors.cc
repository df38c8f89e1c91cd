// safetensors reader and writer; see safetensors.h.
#include "engine/model/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "engine/core/json_limits.h"
#include "kernels/cpu/elementwise.h"

namespace tnmt {

namespace {

using nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100u << 20;

absl::Status Corrupt(const std::string& path, const std::string& what) {
  return absl::DataLossError(absl::StrCat(path, ": ", what));
}

bool ParseDType(const std::string& s, DType* out) {
  if (s == "F32") *out = DType::kFloat32;
  else if (s == "F16") *out = DType::kFloat16;
  else if (s == "BF16") *out = DType::kBFloat16;
  else if (s == "I32") *out = DType::kInt32;
  else return false;
  return true;
}

const char* DTypeTag(DType d) {
  switch (d) {
    case DType::kFloat16: return "F16";
    case DType::kBFloat16: return "BF16";
    case DType::kInt32: return "I32";
    default: return "F32";
  }
}

uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const int32_t exp = static_cast<int32_t>((x >> 23) & 0xff) - 127 + 15;
  uint32_t mant = x & 0x7fffffu;
  if (((x >> 23) & 0xff) == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0));
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  if (exp <= 0) {
    if (exp < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000u;
    const int shift = 14 - exp;
    uint32_t h = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) ++h;  // round to nearest even
  return static_cast<uint16_t>(sign | h);
}

uint16_t FloatToBFloat16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if (std::isnan(f)) return static_cast<uint16_t>((x >> 16) | 0x40);
  const uint32_t rounding = 0x7fffu + ((x >> 16) & 1);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

}  // namespace

absl::StatusOr<TensorMap> ReadSafetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open (missing or unreadable)"));
  const int64_t file_size = static_cast<int64_t>(in.tellg());
  in.seekg(0);
  if (file_size < 8) return Corrupt(path, "file too short for a safetensors header");
  unsigned char len_bytes[8];
  in.read(reinterpret_cast<char*>(len_bytes), 8);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len_bytes[i];
  if (header_len > kMaxHeaderBytes || header_len > static_cast<uint64_t>(file_size - 8)) {
    return Corrupt(path, absl::StrCat("header length ", header_len, " exceeds the file size ",
                                      file_size, " (truncated or not safetensors)"));
  }
  std::string header(header_len, '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_len));
  if (absl::Status s = CheckJsonLimits(header, "header"); !s.ok()) return Corrupt(path, std::string(s.message()));
  json j = json::parse(header, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Corrupt(path, "header is not a JSON object");
  const int64_t data_start = 8 + static_cast<int64_t>(header_len);
  const int64_t data_size = file_size - data_start;

  TensorMap out;
  std::vector<char> raw;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") continue;
    const json& e = it.value();
    auto bad = [&](const std::string& what) { return Corrupt(path, absl::StrCat("tensor \"", name, "\": ", what)); };
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") ||
        !e.contains("data_offsets")) {
      return bad("entry needs dtype, shape and data_offsets");
    }
    DType dtype;
    if (!e["dtype"].is_string() || !ParseDType(e["dtype"].get<std::string>(), &dtype)) {
      return bad(absl::StrCat("unsupported dtype ", e["dtype"].dump(), " (F32, F16, BF16, I32)"));
    }
    if (!e["shape"].is_array()) return bad("shape is not an array");
    std::vector<int64_t> shape;
    int64_t numel = 1;
    for (const json& d : e["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0 || d.get<int64_t>() > (int64_t{1} << 40)) {
        return bad("shape has an invalid dimension");
      }
      shape.push_back(d.get<int64_t>());
      numel *= shape.back();
      if (numel > (int64_t{1} << 40)) return bad("tensor too large");
    }
    const json& off = e["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
        !off[1].is_number_unsigned()) {
      return bad("data_offsets must be two non-negative integers");
    }
    const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (begin > end || end > static_cast<uint64_t>(data_size)) {
      return bad(absl::StrCat("data [", begin, ", ", end, ") lies outside the ", data_size,
                              " data bytes (file truncated?)"));
    }
    const int64_t bytes = numel * DTypeSize(dtype);
    if (static_cast<int64_t>(end - begin) != bytes) {
      return bad(absl::StrCat("holds ", end - begin, " bytes but shape and dtype need ", bytes));
    }
    auto t = Tensor::Empty(shape, dtype == DType::kInt32 ? DType::kInt32 : DType::kFloat32);
    if (!t.ok()) return t.status();
    in.seekg(data_start + static_cast<int64_t>(begin));
    if (dtype == DType::kFloat32 || dtype == DType::kInt32) {
      in.read(t->data<char>(), bytes);
    } else {
      raw.resize(bytes);
      in.read(raw.data(), bytes);
      const auto* h = reinterpret_cast<const uint16_t*>(raw.data());
      if (dtype == DType::kFloat16) {
        kernels::cpu::HalfToFloat(t->f32(), h, numel);
      } else {
        kernels::cpu::BFloat16ToFloat(t->f32(), h, numel);
      }
    }
    if (!in) return bad("read failed (file truncated?)");
    out.emplace(name, StoredTensor{*std::move(t), dtype});
  }
  return out;
}

absl::Status WriteSafetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                              DType stored) {
  json header = json::object();
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    const DType d = t.dtype() == DType::kInt32 ? DType::kInt32 : stored;
    const uint64_t bytes = t.numel() * DTypeSize(d);
    header[name] = {{"dtype", DTypeTag(d)}, {"shape", t.shape()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string h = header.dump();
  while ((h.size() + 8) % 8 != 0) h.push_back(' ');
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return absl::PermissionDeniedError(absl::StrCat(tmp, ": cannot open for writing"));
  unsigned char len_bytes[8];
  uint64_t len = h.size();
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<unsigned char>(len >> (8 * i));
  bool ok = std::fwrite(len_bytes, 1, 8, f) == 8 && std::fwrite(h.data(), 1, h.size(), f) == h.size();
  std::vector<uint16_t> half;
  for (const auto& [name, t] : tensors) {
    if (!ok) break;
    const DType d = t.dtype() == DType::kInt32 ? DType::kInt32 : stored;
    if (d == DType::kFloat32 || d == DType::kInt32) {
      ok = std::fwrite(t.data<char>(), 4, t.numel(), f) == static_cast<size_t>(t.numel());
    } else {
      half.resize(t.numel());
      const float* src = t.f32();
      for (int64_t i = 0; i < t.numel(); ++i) {
        half[i] = d == DType::kFloat16 ? FloatToHalf(src[i]) : FloatToBFloat16(src[i]);
      }
      ok = std::fwrite(half.data(), 2, half.size(), f) == half.size();
    }
  }
  ok = ok && std::fflush(f) == 0 && ::fsync(fileno(f)) == 0;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::InternalError(absl::StrCat(path, ": write failed (disk full?)"));
  }
  return absl::OkStatus();
}

}  // namespace tnmt
