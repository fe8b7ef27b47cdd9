#include "io/json_text.h"

namespace ditbatch {

std::optional<JsonTooDeep> find_json_too_deep(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  std::size_t line = 0, line_start = 0, string_start = 0;
  std::string last_string, key;  // a depth-1 string (cut) is the key once its ':' follows
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') {
        in_string = false;
        if (depth == 1) last_string = text_excerpt(text.substr(string_start, i - string_start), 40);
      } else if (c == '\n') {
        ++line;
        line_start = i + 1;
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        string_start = i + 1;
        break;
      case ':':
        if (depth == 1) key = last_string;
        break;
      case '[':
      case '{':
        if (++depth > max_depth) return JsonTooDeep{i, line, i - line_start, key};
        break;
      case ']':
      case '}':
        if (depth > 0) --depth;
        break;
      case '\n':
        ++line;
        line_start = i + 1;
        break;
      default:
        break;
    }
  }
  return std::nullopt;
}

std::string text_excerpt(std::string_view text, std::size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  std::size_t cut = max_bytes;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // a UTF-8 start
  return std::string(text.substr(0, cut)) + "... (" + std::to_string(text.size()) + " bytes)";
}

namespace {
template <class Json>
std::string excerpt_of(const Json& value, std::size_t max_bytes) {
  return text_excerpt(value.dump(-1, ' ', false, Json::error_handler_t::replace), max_bytes);
}
}  // namespace

std::string json_excerpt(const nlohmann::json& value, std::size_t max_bytes) { return excerpt_of(value, max_bytes); }
std::string json_excerpt(const nlohmann::ordered_json& value, std::size_t max_bytes) {
  return excerpt_of(value, max_bytes);
}

}  // namespace ditbatch
