// JSON output of the CLI's API messages: protobuf's JSON mapping with the proto field names
// and every field present, except that 64-bit integers are JSON numbers (the mapping writes
// them as strings), so scripts read `"step":200` as the number it is. Lists are one JSON array.
#pragma once

#include <string>
#include <vector>

#include <google/protobuf/message.h>
#include <nlohmann/json.hpp>

namespace tnmt::cli {

nlohmann::ordered_json ProtoToJson(const google::protobuf::Message& message);

// One JSON array written with one item per line, e.g. "[\n{...},\n{...}\n]\n", or "[]\n" when
// empty: valid JSON that line tools can still count and grep.
std::string JsonArrayByLine(const std::vector<nlohmann::ordered_json>& items);

}  // namespace tnmt::cli
