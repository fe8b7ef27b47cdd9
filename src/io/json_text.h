// JSON from outside bytes (configs, prompt lines, tokenizer files, safetensors headers, LoRA
// metadata, manifests, run records, stdin): nlohmann's parser behind a nesting limit, and values
// quoted in error messages at a bounded length.
//
// nlohmann's parser and the values it builds recurse once per level of nesting: a value nested
// 100,000 levels deep overflows the stack (a crash with nothing printed). parse_json refuses
// such text before the parser sees it, with the parser's own exception type, so every caller's
// handling of a parse error (the file and line it names, its exit status) covers it too.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace ditbatch {

// Far deeper than anything ditbatch reads nests (configs, prompt lines and manifests: 2 or 3
// levels; tokenizer.json: 4).
inline constexpr int kMaxJsonDepth = 64;

// Where text first nests deeper than kMaxJsonDepth, as nlohmann reports a position.
struct JsonTooDeep {
  std::size_t byte = 0;  // 0-based offset of the bracket past the limit
  std::size_t line = 0;  // 0-based, as nlohmann's position_t counts
  std::size_t column = 0;
  std::string key;       // the top-level key it is under ("" when none), cut to 40 bytes
};
std::optional<JsonTooDeep> find_json_too_deep(std::string_view text, int max_depth = kMaxJsonDepth);

// Json::parse(text, callback, allow_exceptions), but text nested deeper than kMaxJsonDepth is
// refused first: a Json::parse_error ("parse error at line L, column C: nested deeper than 64
// levels under key "k"") or, with allow_exceptions false, a discarded value.
template <class Json = nlohmann::json>
Json parse_json(std::string_view text, typename Json::parser_callback_t callback = nullptr,
                bool allow_exceptions = true) {
  if (const auto deep = find_json_too_deep(text)) {
    if (!allow_exceptions) return Json(Json::value_t::discarded);
    nlohmann::detail::position_t at;
    at.chars_read_total = deep->byte + 1;
    at.chars_read_current_line = deep->column + 1;
    at.lines_read = deep->line;
    std::string what = "nested deeper than " + std::to_string(kMaxJsonDepth) + " levels";
    if (!deep->key.empty()) what += " under key \"" + deep->key + "\"";
    throw Json::parse_error::create(101, at, what, nullptr);
  }
  return Json::parse(text, std::move(callback), allow_exceptions);
}

// A value as error messages quote it: its JSON text (invalid UTF-8 replaced), cut to max_bytes
// at a character boundary with the full size said, so a 10 MB value is not echoed back.
std::string json_excerpt(const nlohmann::json& value, std::size_t max_bytes = 80);
std::string json_excerpt(const nlohmann::ordered_json& value, std::size_t max_bytes = 80);
// The same cut for any text quoted in an error message.
std::string text_excerpt(std::string_view text, std::size_t max_bytes = 80);

}  // namespace ditbatch
