// Finding and loading libtnmt_spm.so; see spm_library.h.
#include "engine/tokenizer/spm_library.h"

#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <mutex>

namespace tnmt {

namespace {

constexpr char kName[] = "libtnmt_spm.so";
constexpr char kRunfilesPath[] = "/tnmt/engine/tokenizer/libtnmt_spm.so";

std::string ExecutablePath() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, n) : "";
}

std::vector<std::string> Candidates() {
  std::vector<std::string> out;
  if (const char* p = std::getenv("TNMT_SPM_LIBRARY")) out.emplace_back(p);
  const std::string exe = ExecutablePath();
  const std::string dir = exe.substr(0, exe.rfind('/') + 1);
  if (!exe.empty()) {
    out.push_back(dir + kName);
    out.push_back(dir + "../lib/tnmt/" + kName);
  }
  for (const char* env : {"RUNFILES_DIR", "TEST_SRCDIR"}) {
    if (const char* p = std::getenv(env)) out.push_back(std::string(p) + kRunfilesPath);
  }
  if (!exe.empty()) out.push_back(exe + ".runfiles" + kRunfilesPath);
  return out;
}

template <typename F>
bool Resolve(void* handle, const char* name, F* fn, std::string* error) {
  *fn = reinterpret_cast<F>(dlsym(handle, name));
  if (*fn == nullptr) *error = std::string(kName) + " lacks " + name;
  return *fn != nullptr;
}

}  // namespace

const SpmLibrary* GetSpmLibrary(std::string* error) {
  static std::once_flag once;
  static SpmLibrary lib;
  static const SpmLibrary* loaded = nullptr;
  static std::string load_error;
  std::call_once(once, [] {
    std::string tried;
    for (const std::string& path : Candidates()) {
      if (access(path.c_str(), R_OK) != 0) {
        tried += "\n  " + path + " (absent)";
        continue;
      }
      void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
      if (h == nullptr) {
        tried += "\n  " + path + " (" + dlerror() + ")";
        continue;
      }
      if (Resolve(h, "tnmt_spm_load", &lib.load, &load_error) &&
          Resolve(h, "tnmt_spm_free", &lib.free, &load_error) &&
          Resolve(h, "tnmt_spm_encode", &lib.encode, &load_error) &&
          Resolve(h, "tnmt_spm_decode", &lib.decode, &load_error) &&
          Resolve(h, "tnmt_spm_info", &lib.info, &load_error) &&
          Resolve(h, "tnmt_spm_encode_pieces", &lib.encode_pieces, &load_error) &&
          Resolve(h, "tnmt_spm_decode_pieces", &lib.decode_pieces, &load_error) &&
          Resolve(h, "tnmt_spm_id_to_piece", &lib.id_to_piece, &load_error) &&
          Resolve(h, "tnmt_spm_nbest", &lib.nbest, &load_error) &&
          Resolve(h, "tnmt_spm_train", &lib.train, &load_error)) {
        loaded = &lib;
      }
      return;
    }
    load_error = std::string("cannot find ") + kName + " (SentencePiece support); tried:" + tried +
                 "\nset TNMT_SPM_LIBRARY to its path";
  });
  if (loaded == nullptr && error != nullptr) *error = load_error;
  return loaded;
}

}  // namespace tnmt
