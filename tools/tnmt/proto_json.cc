// Protobuf messages as JSON with numeric 64-bit integers; see proto_json.h.
#include "tools/tnmt/proto_json.h"

#include <string>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/util/json_util.h>

namespace tnmt::cli {

namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;

bool Is64BitInteger(const FieldDescriptor& f) {
  switch (f.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT64:
    case FieldDescriptor::CPPTYPE_UINT64:
      return true;
    default:
      return false;
  }
}

nlohmann::ordered_json Number(const FieldDescriptor& f, const nlohmann::ordered_json& value) {
  if (!value.is_string()) return value;
  const std::string& s = value.get_ref<const std::string&>();
  try {
    if (f.cpp_type() == FieldDescriptor::CPPTYPE_UINT64) return std::stoull(s);
    return std::stoll(s);
  } catch (...) {
    return value;
  }
}

// Rewrites the 64-bit integers of `j`, the JSON of a message of type `d`, in place.
void FixIntegers(const Descriptor& d, nlohmann::ordered_json& j) {
  if (!j.is_object()) return;
  for (int i = 0; i < d.field_count(); ++i) {
    const FieldDescriptor& f = *d.field(i);
    auto it = j.find(f.name());
    if (it == j.end()) continue;
    nlohmann::ordered_json& v = *it;
    if (f.is_map()) continue;  // none in the CLI's messages
    if (Is64BitInteger(f)) {
      if (f.is_repeated() && v.is_array()) {
        for (auto& e : v) e = Number(f, e);
      } else {
        v = Number(f, v);
      }
    } else if (f.cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (f.is_repeated() && v.is_array()) {
        for (auto& e : v) FixIntegers(*f.message_type(), e);
      } else {
        FixIntegers(*f.message_type(), v);
      }
    }
  }
}

}  // namespace

nlohmann::ordered_json ProtoToJson(const google::protobuf::Message& message) {
  std::string text;
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  o.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(message, &text, o);
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(text, nullptr, false);
  if (j.is_discarded()) return nlohmann::ordered_json::object();
  FixIntegers(*message.GetDescriptor(), j);
  return j;
}

std::string JsonArrayByLine(const std::vector<nlohmann::ordered_json>& items) {
  if (items.empty()) return "[]\n";
  std::string out = "[\n";
  for (size_t i = 0; i < items.size(); ++i) {
    out += items[i].dump();
    out += i + 1 < items.size() ? ",\n" : "\n";
  }
  return out + "]\n";
}

}  // namespace tnmt::cli
