// Device lists; see devices.h.
#include "trainer/launch/devices.h"

#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace tnmt::train {

namespace {

bool ParseOrdinal(absl::string_view s, int* out) {
  if (s.empty() || !absl::ascii_isdigit(static_cast<unsigned char>(s[0]))) return false;
  return absl::SimpleAtoi(s, out) && *out >= 0;
}

}  // namespace

std::string DeviceList::Name(int i) const { return cuda ? absl::StrCat("cuda:", ids[i]) : "cpu"; }

absl::StatusOr<DeviceList> ParseDeviceList(absl::string_view value, absl::string_view flag) {
  auto error = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " ", value, ": ", what));
  };
  DeviceList d;
  bool saw_cpu = false, saw_cuda = false;
  for (absl::string_view item : absl::StrSplit(value, ',')) {
    item = absl::StripAsciiWhitespace(item);
    int id = 0;
    if (item == "cpu") {
      saw_cpu = true;
      d.ids.push_back(0);
    } else if (item == "cuda") {
      d.all_visible = true;
      saw_cuda = true;
    } else if (absl::ConsumePrefix(&item, "cuda:") && ParseOrdinal(item, &id)) {
      saw_cuda = true;
      d.ids.push_back(id);
    } else if (saw_cuda && !d.all_visible && ParseOrdinal(item, &id)) {
      d.ids.push_back(id);
    } else {
      return error(absl::StrCat("expected cpu or cuda[:N], got \"", item, "\" (e.g. cpu,cpu or cuda:0,1 or cuda)"));
    }
  }
  if (saw_cpu && saw_cuda) return error("cannot mix cpu and cuda devices");
  if (d.all_visible && !d.ids.empty()) return error("\"cuda\" (every visible GPU) cannot be combined with a list");
  d.cuda = saw_cuda;
  if (d.cuda) {
    for (size_t i = 0; i < d.ids.size(); ++i) {
      for (size_t j = 0; j < i; ++j) {
        if (d.ids[i] == d.ids[j]) return error(absl::StrCat("device listed twice (cuda:", d.ids[i], ")"));
      }
    }
  }
  return d;
}

absl::Status ResolveAllVisible(int visible, DeviceList* devices) {
  if (!devices->all_visible) return absl::OkStatus();
  if (visible < 1) return absl::FailedPreconditionError("--devices cuda: no CUDA device is visible");
  devices->ids.clear();
  for (int i = 0; i < visible; ++i) devices->ids.push_back(i);
  return absl::OkStatus();
}

std::optional<int> MpiLocalRank() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}) {
    const char* v = std::getenv(name);
    int r = 0;
    if (v != nullptr && absl::SimpleAtoi(v, &r) && r >= 0) return r;
  }
  return std::nullopt;
}

absl::StatusOr<std::string> DeviceForLocalRank(const DeviceList& devices, int local_rank, int visible,
                                               absl::string_view flag_value) {
  if (!devices.cuda) return std::string("cpu");
  if (devices.all_visible) {
    if (visible < 1) return absl::FailedPreconditionError("--devices cuda: no CUDA device is visible");
    return absl::StrCat("cuda:", local_rank % visible);
  }
  if (local_rank >= devices.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--devices ", flag_value, ": lists ", devices.size(), " device(s) but this process is local rank ", local_rank,
        " under mpirun; list one device per process on a node, or use --devices cuda"));
  }
  return devices.Name(local_rank);
}

}  // namespace tnmt::train
