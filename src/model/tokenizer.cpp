#include "model/tokenizer.h"

#include <oniguruma.h>
#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <queue>

#include "core/error.h"
#include "core/fs.h"
#include "io/json_text.h"
#include "io/weight_store.h"

namespace ditbatch {

using nlohmann::json;

namespace {

// The pre-tokenizer of Qwen2Tokenizer (transformers' PRETOKENIZE_REGEX), spec §4.3.
constexpr std::string_view kPretokenizePattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Pieces longer than this are not cached (Hugging Face tokenizers uses the same bound): long
// pieces (runs of spaces, very long words) rarely repeat and would only bloat the cache.
constexpr size_t kMaxCachedPieceBytes = 256;
// The cache is emptied when it reaches this many pieces, which bounds its memory for endless
// prompt streams; a typical prompt set's vocabulary fits many times over.
constexpr size_t kMaxCachedPieces = 1 << 16;
// Whole segments (the text between added tokens) are cached too: the template's fixed parts
// ("system\nDescribe the image ...") come back with every prompt, and the regex is the costly
// step. Each prompt's own segment is usually new, so this cache is kept small.
constexpr size_t kMaxCachedSegmentBytes = 1024;
constexpr size_t kMaxCachedSegments = 1 << 12;

// GPT-2's bytes_to_unicode (spec §4.4): printable bytes map to themselves, the other 68 in
// ascending order to U+0100.. so that every byte is a visible, non-space symbol.
std::array<char32_t, 256> byte_to_codepoint_table() {
  std::array<char32_t, 256> table{};
  char32_t next_unprintable = 0x100;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    table[b] = printable ? static_cast<char32_t>(b) : next_unprintable++;
  }
  return table;
}

void append_utf8(std::string& out, char32_t cp) {
  utf8proc_uint8_t buf[4];
  const utf8proc_ssize_t n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(cp), buf);
  out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

bool is_ascii(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

// Unicode NFC (not NFKC: full-width forms stay as they are). Invalid UTF-8 is an InputError.
std::string nfc(std::string_view text) {
  utf8proc_uint8_t* normalized = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()), static_cast<utf8proc_ssize_t>(text.size()),
                   &normalized, static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) {
    // Find the first bad byte so the message can point at it.
    size_t offset = 0;
    while (offset < text.size()) {
      utf8proc_int32_t cp;
      const utf8proc_ssize_t len = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data()) + offset,
                                                    static_cast<utf8proc_ssize_t>(text.size() - offset), &cp);
      if (len <= 0) break;
      offset += static_cast<size_t>(len);
    }
    fail_input("text to tokenize is not valid UTF-8 (byte offset {} of a {}-byte segment): {}", offset, text.size(),
               utf8proc_errmsg(n));
  }
  std::string out(reinterpret_cast<const char*>(normalized), static_cast<size_t>(n));
  std::free(normalized);
  return out;
}

json parse_json_file(const TokenizerFiles& files, const std::string& name, const std::string& where) {
  try {
    return parse_json(files.at(name));
  } catch (const json::exception& e) {
    fail_input("{}/{}: bad JSON: {}", where, name, e.what());
  }
}

const json& require_member(const json& object, const char* key, const std::string& file) {
  auto it = object.find(key);
  if (it == object.end()) fail_input("{}: no \"{}\" key", file, key);
  return *it;
}

// Token ids are JSON integers in 0 .. 2^24-1: 100 times the largest vocabularies in use (Qwen2:
// 151,665 ids), and small enough that the id -> token table an id sizes stays bounded (2^31-1
// made one bad id allocate 32 GB).
constexpr int64_t kMaxTokenId = (int64_t{1} << 24) - 1;

int32_t token_id_from_json(const json& value, const std::string& file, const std::string& token) {
  if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > kMaxTokenId)
    fail_input("{}: token \"{}\" has id {}, expected an integer in 0..{}", file, token, json_excerpt(value), kMaxTokenId);
  return static_cast<int32_t>(value.get<int64_t>());
}

// One merge as read from its file; the views point into the file's bytes (or JSON document).
struct MergeRule {
  std::string_view left, right;
  int64_t line;  // merges.txt line number, or the index in tokenizer.json's model.merges
};

struct MergeList {
  std::vector<MergeRule> rules;
  std::string origin;  // "dir/merges.txt", "dir/tokenizer.json model.merges"
  const char* unit;    // "line" or "index": how MergeRule::line reads in a message

  std::string where(const MergeRule& rule) const { return fmt::format("{} {} {}", origin, unit, rule.line); }
};

struct AddedTokenRule {
  std::string content;
  int32_t id;
  std::string origin;  // the file that declares it
};

// "A B" with exactly one space and two non-empty symbols (a byte-level symbol never holds a space).
bool split_merge(std::string_view text, std::string_view& left, std::string_view& right) {
  const size_t space = text.find(' ');
  if (space == std::string_view::npos || space == 0 || space + 1 == text.size() ||
      text.find(' ', space + 1) != std::string_view::npos)
    return false;
  left = text.substr(0, space);
  right = text.substr(space + 1);
  return true;
}

// merges.txt as Hugging Face tokenizers reads it: "#version" lines are skipped (a merge may
// begin with '#', e.g. "# include", so only that prefix is), every other line is "A B".
MergeList parse_merges_txt(std::string_view text, const std::string& file) {
  MergeList merges{{}, file, "line"};
  merges.rules.reserve(static_cast<size_t>(std::count(text.begin(), text.end(), '\n')) + 1);
  size_t line_start = 0;
  int64_t line_number = 0;
  while (line_start < text.size()) {
    size_t line_end = text.find('\n', line_start);
    if (line_end == std::string_view::npos) line_end = text.size();
    std::string_view line = text.substr(line_start, line_end - line_start);
    line_start = line_end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);  // CRLF files; '\r' is never in a symbol
    if (line.starts_with("#version")) continue;
    MergeRule rule{{}, {}, line_number};
    if (!split_merge(line, rule.left, rule.right))
      fail_input("{} line {}: \"{}\" is not a merge \"A B\" (two symbols separated by one space)", file, line_number,
                 line);
    merges.rules.push_back(rule);
  }
  return merges;
}

// tokenizer.json's model.merges: either "A B" strings (older files) or ["A", "B"] pairs. The
// views point into `merges_json`, which must outlive the result.
MergeList parse_json_merges(const json& merges_json, const std::string& file) {
  MergeList merges{{}, file + " model.merges", "index"};
  if (!merges_json.is_array()) fail_input("{}: model.merges is not an array", file);
  merges.rules.reserve(merges_json.size());
  for (size_t i = 0; i < merges_json.size(); ++i) {
    const json& m = merges_json[i];
    MergeRule rule{{}, {}, static_cast<int64_t>(i)};
    if (m.is_string()) {
      if (!split_merge(m.get_ref<const std::string&>(), rule.left, rule.right))
        fail_input("{}: \"{}\" is not a merge \"A B\" (two symbols separated by one space)", merges.where(rule),
                   m.get_ref<const std::string&>());
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      rule.left = m[0].get_ref<const std::string&>();
      rule.right = m[1].get_ref<const std::string&>();
    } else {
      fail_input("{}: {} is neither \"A B\" nor [\"A\", \"B\"]", merges.where(rule), json_excerpt(m));
    }
    merges.rules.push_back(rule);
  }
  return merges;
}

// vocab.json ({"symbol": id, ...}, 151,643 entries for Qwen) read with nlohmann's SAX interface:
// building the DOM first would take most of the tokenizer's load time.
class VocabReader : public nlohmann::json_sax<json> {
 public:
  using OnEntry = std::function<void(std::string&&, const json&)>;
  VocabReader(std::string file, OnEntry on_entry) : file_(std::move(file)), on_entry_(std::move(on_entry)) {}

  void read(std::string_view text) {
    if (const auto deep = find_json_too_deep(text))  // the SAX parser, too, recurses per level
      fail_input("{}: bad JSON: nested deeper than {} levels at line {}, column {}", file_, kMaxJsonDepth, deep->line + 1,
                 deep->column + 1);
    const bool ok = json::sax_parse(text.begin(), text.end(), this);
    if (!error_.empty()) fail_input("{}", error_);
    if (!ok) fail_input("{}: bad JSON", file_);
  }

  bool start_object(std::size_t) override {
    if (depth_++ == 0) return true;
    return value_error("an object");
  }
  bool end_object() override {
    --depth_;
    return true;
  }
  bool key(string_t& key) override {
    key_ = std::move(key);
    return true;
  }
  bool number_integer(number_integer_t value) override { return entry(json(value)); }
  bool number_unsigned(number_unsigned_t value) override { return entry(json(value)); }
  bool number_float(number_float_t value, const string_t&) override { return entry(json(value)); }
  bool null() override { return value_error("null"); }
  bool boolean(bool) override { return value_error("a boolean"); }
  bool string(string_t& value) override { return value_error("a string \"" + value + "\""); }
  bool binary(binary_t&) override { return value_error("binary data"); }
  bool start_array(std::size_t) override { return value_error("an array"); }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    error_ = fmt::format("{}: bad JSON: {}", file_, e.what());
    return false;
  }

 private:
  bool entry(const json& id) {
    if (depth_ != 1) return value_error("a number");
    on_entry_(std::move(key_), id);
    return true;
  }
  bool value_error(const std::string& what) {
    error_ = depth_ == 0 ? fmt::format("{}: found {}, expected an object {{\"symbol\": id, ...}}", file_, what)
                         : fmt::format("{}: symbol \"{}\" maps to {}, expected an integer id", file_, key_, what);
    return false;
  }

  std::string file_;
  OnEntry on_entry_;
  std::string key_;
  int depth_ = 0;
  std::string error_;
};

// Flags ditbatch does not implement would silently change the ids; refuse them instead.
void check_added_token_flags(const json& entry, const std::string& content, const std::string& file) {
  for (const char* flag : {"lstrip", "rstrip", "single_word"}) {
    auto it = entry.find(flag);
    if (it != entry.end() && it->is_boolean() && it->get<bool>())
      fail_input(
          "{}: added token \"{}\" sets {}: true, which ditbatch does not support (Qwen2 tokenizers set "
          "it false)",
          file, content, flag);
  }
}

}  // namespace

// ---- the immutable model ------------------------------------------------------------------------

struct Tokenizer::Model {
  struct Merge {
    int32_t rank;
    int32_t product;
  };
  struct AddedToken {
    std::string content;
    int32_t id;
  };

  std::string where;
  // Vocabulary symbols (byte-mapped strings such as "Ġworld") and added tokens, to ids.
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> vocab;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> added_ids;
  // id -> symbol or added token ("" for an id nobody uses), viewing the keys of the two maps
  // above (their nodes never move); id_is_added says which way decode() reads it.
  std::vector<std::string_view> id_to_token;
  std::vector<bool> id_is_added;
  std::array<int32_t, 256> byte_ids{};  // the id of each byte's one-symbol token
  std::unordered_map<char32_t, uint8_t> codepoint_to_byte;
  // (left id, right id) packed into 64 bits -> rank and product id.
  std::unordered_map<uint64_t, Merge> merges;
  // Added tokens by their first byte, longest first, so the scan is leftmost-longest.
  std::vector<AddedToken> added;
  std::array<std::vector<int32_t>, 256> added_by_first_byte;

  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }

  std::string_view token_of(int32_t id) const {
    return static_cast<size_t>(id) < id_to_token.size() ? id_to_token[static_cast<size_t>(id)] : std::string_view();
  }
  void set_id(int32_t id, std::string_view token, bool is_added) {
    if (static_cast<size_t>(id) >= id_to_token.size()) {
      id_to_token.resize(static_cast<size_t>(id) + 1);
      id_is_added.resize(static_cast<size_t>(id) + 1, false);
    }
    id_to_token[static_cast<size_t>(id)] = token;
    id_is_added[static_cast<size_t>(id)] = is_added;
  }

  void add_symbol(std::string&& token, const json& id_json, const std::string& file);
  void finish_vocab(const std::string& file);
  void load_merges(const MergeList& merges, const std::string& vocab_file);
  void load_added(const std::vector<AddedTokenRule>& rules, const std::string& vocab_file);
};

void Tokenizer::Model::add_symbol(std::string&& token, const json& id_json, const std::string& file) {
  const int32_t id = token_id_from_json(id_json, file, token);
  if (token.empty()) fail_input("{}: the empty string has id {}; symbols are never empty", file, id);
  if (!token_of(id).empty()) fail_input("{}: id {} is given to both \"{}\" and \"{}\"", file, id, token_of(id), token);
  auto [it, inserted] = vocab.emplace(std::move(token), id);
  if (!inserted) fail_input("{}: symbol \"{}\" appears twice", file, it->first);
  set_id(id, it->first, false);
}

void Tokenizer::Model::finish_vocab(const std::string& file) {
  const std::array<char32_t, 256> byte_to_codepoint = byte_to_codepoint_table();
  for (int b = 0; b < 256; ++b) {
    std::string symbol;
    append_utf8(symbol, byte_to_codepoint[b]);
    codepoint_to_byte.emplace(byte_to_codepoint[b], static_cast<uint8_t>(b));
    auto it = vocab.find(symbol);
    if (it == vocab.end())
      fail_input("{}: no symbol \"{}\" for byte 0x{:02X}; a byte-level BPE vocabulary has all 256 byte symbols", file,
                 symbol, b);
    byte_ids[b] = it->second;
  }
}

void Tokenizer::Model::load_merges(const MergeList& list, const std::string& vocab_file) {
  merges.reserve(list.rules.size());
  std::string product;
  for (size_t rank = 0; rank < list.rules.size(); ++rank) {
    const MergeRule& rule = list.rules[rank];
    auto lookup = [&](std::string_view symbol, const char* role) {
      auto it = vocab.find(symbol);
      if (it == vocab.end())
        fail_input("{}: {} \"{}\" of merge \"{} {}\" is not in {}", list.where(rule), role, symbol, rule.left,
                   rule.right, vocab_file);
      return it->second;
    };
    const int32_t left = lookup(rule.left, "symbol");
    const int32_t right = lookup(rule.right, "symbol");
    product.assign(rule.left).append(rule.right);
    // A repeated pair takes the later rank, as Hugging Face tokenizers' map insert does.
    merges[pair_key(left, right)] = Merge{static_cast<int32_t>(rank), lookup(product, "product")};
  }
  // Byte-level BPE makes every symbol past the 256 byte symbols by a merge. One that no merge
  // makes is never produced: text is cut into smaller pieces than the model knows (an empty
  // merges.txt tokenizes "hello world" byte by byte) and every image is silently wrong; a list
  // cut by 0.9 % tokenizes rare words differently. Only a vocabulary's own special symbols
  // are made by no merge (GPT-2's vocab.json lists <|endoftext|>; Qwen's none): any other
  // symbol no merge makes means the merges are missing or cut.
  std::vector<bool> made(id_to_token.size(), false);
  for (const int32_t id : byte_ids) made[static_cast<size_t>(id)] = true;
  for (const auto& entry : merges) made[static_cast<size_t>(entry.second.product)] = true;
  auto is_special = [](std::string_view s) { return s.size() > 4 && s.starts_with("<|") && s.ends_with("|>"); };
  std::vector<std::string_view> unmade;
  for (const auto& entry : vocab)
    if (!made[static_cast<size_t>(entry.second)] && !is_special(entry.first)) unmade.push_back(entry.first);
  if (!unmade.empty()) {
    const size_t count = unmade.size();
    std::sort(unmade.begin(), unmade.end(),
              [&](std::string_view a, std::string_view b) { return vocab.find(a)->second < vocab.find(b)->second; });
    unmade.resize(std::min<size_t>(count, 3));
    fail_input("{}: {} merges, but {} of the {} symbols of {} are neither byte symbols nor made by a merge (\"{}\"{}): "
               "the merges are missing or cut short, and text would be cut into pieces the model does not know",
               list.origin, list.rules.size(), count, vocab.size(), vocab_file, fmt::join(unmade, "\", \""),
               count > unmade.size() ? ", ..." : "");
  }
}

void Tokenizer::Model::load_added(const std::vector<AddedTokenRule>& rules, const std::string& vocab_file) {
  std::unordered_map<int32_t, const AddedTokenRule*> by_id;
  std::unordered_map<std::string, const AddedTokenRule*> by_content;
  for (const AddedTokenRule& rule : rules) {
    if (rule.content.empty()) fail_input("{}: an added token with id {} is empty", rule.origin, rule.id);
    if (auto it = by_id.find(rule.id); it != by_id.end()) {
      if (it->second->content != rule.content)
        fail_input("{}: added token id {} is \"{}\", but {} gives it to \"{}\"", rule.origin, rule.id, rule.content,
                   it->second->origin, it->second->content);
      continue;  // the same token declared in two files
    }
    if (auto it = by_content.find(rule.content); it != by_content.end())
      fail_input("{}: added token \"{}\" has id {}, but {} gives it id {}", rule.origin, rule.content, rule.id,
                 it->second->origin, it->second->id);
    // An added token may repeat a vocabulary symbol with the same id, never take another's id.
    const std::string_view vocab_symbol = token_of(rule.id);
    if (!vocab_symbol.empty() && vocab_symbol != rule.content)
      fail_input("{}: added token \"{}\" has id {}, which {} gives to \"{}\"", rule.origin, rule.content, rule.id,
                 vocab_file, vocab_symbol);
    by_id.emplace(rule.id, &rule);
    by_content.emplace(rule.content, &rule);
    added.push_back({rule.content, rule.id});
    const auto added_entry = added_ids.emplace(rule.content, rule.id).first;
    // A vocabulary symbol that is also an added token still decodes as the symbol it is.
    if (vocab_symbol.empty()) set_id(rule.id, added_entry->first, true);
  }
  for (size_t i = 0; i < added.size(); ++i)
    added_by_first_byte[static_cast<unsigned char>(added[i].content[0])].push_back(static_cast<int32_t>(i));
  for (auto& candidates : added_by_first_byte)
    std::stable_sort(candidates.begin(), candidates.end(), [&](int32_t a, int32_t b) {
      return added[static_cast<size_t>(a)].content.size() > added[static_cast<size_t>(b)].content.size();
    });
}

// ---- the pre-tokenizer regex ---------------------------------------------------------------------

// Oniguruma, compiled with its default (Oniguruma) syntax and UTF-8, exactly as Hugging Face
// tokenizers compiles the Split pattern (onig crate, Regex::new): the same engine gives the same
// Unicode classes, including \s = White_Space (U+0085, U+00A0, U+2028, U+3000 yes; U+001C..U+001F,
// U+200B, U+FEFF no) and Unicode case folding in (?i:...).
class Tokenizer::PieceSplitter {
 public:
  PieceSplitter() {
    static std::once_flag initialized;
    std::call_once(initialized, [] {
      OnigEncoding encodings[] = {ONIG_ENCODING_UTF8};
      onig_initialize(encodings, 1);
    });
    OnigErrorInfo error_info;
    const auto* pattern = reinterpret_cast<const OnigUChar*>(kPretokenizePattern.data());
    const int rc = onig_new(&regex_, pattern, pattern + kPretokenizePattern.size(), ONIG_OPTION_NONE,
                            ONIG_ENCODING_UTF8, ONIG_SYNTAX_ONIGURUMA, &error_info);
    if (rc != ONIG_NORMAL) fail("Oniguruma cannot compile the Qwen2 pre-tokenizer regex: {}", message(rc, &error_info));
    region_ = onig_region_new();
  }
  ~PieceSplitter() {
    onig_region_free(region_, 1);
    onig_free(regex_);
  }
  PieceSplitter(const PieceSplitter&) = delete;
  PieceSplitter& operator=(const PieceSplitter&) = delete;

  // Calls on_piece for every piece of `segment`, left to right (findall semantics). The pattern
  // matches every character, so pieces cover the segment; any gap would still be passed on, as
  // the "isolated" Split behaviour keeps non-matching text.
  template <typename OnPiece>
  void split(std::string_view segment, OnPiece&& on_piece) {
    const auto* begin = reinterpret_cast<const OnigUChar*>(segment.data());
    const auto* end = begin + segment.size();
    const OnigUChar* position = begin;
    while (position < end) {
      const int found = onig_search(regex_, begin, end, position, end, region_, ONIG_OPTION_NONE);
      if (found == ONIG_MISMATCH) break;
      if (found < 0) fail("Oniguruma search failed in the pre-tokenizer: {}", message(found, nullptr));
      const size_t match_begin = static_cast<size_t>(region_->beg[0]);
      const size_t match_end = static_cast<size_t>(region_->end[0]);
      const size_t current = static_cast<size_t>(position - begin);
      if (match_begin > current) on_piece(segment.substr(current, match_begin - current));
      if (match_end == match_begin) {
        fail("the pre-tokenizer regex matched an empty piece at byte {} of \"{}\"", match_begin, segment);
      }
      on_piece(segment.substr(match_begin, match_end - match_begin));
      position = begin + match_end;
    }
    if (position < end) on_piece(segment.substr(static_cast<size_t>(position - begin)));
  }

 private:
  static std::string message(int code, OnigErrorInfo* info) {
    OnigUChar buffer[ONIG_MAX_ERROR_MESSAGE_LEN];
    if (info)
      onig_error_code_to_str(buffer, code, info);
    else
      onig_error_code_to_str(buffer, code);
    return reinterpret_cast<const char*>(buffer);
  }

  OnigRegex regex_ = nullptr;
  OnigRegion* region_ = nullptr;
};

// ---- loading --------------------------------------------------------------------------------------

const std::vector<std::string>& Tokenizer::file_names() {
  static const std::vector<std::string> names = {"tokenizer.json", "vocab.json", "merges.txt", "added_tokens.json",
                                                 "tokenizer_config.json"};
  return names;
}

Tokenizer Tokenizer::from_folder(const std::string& dir) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir)) fail_input("{}: not a tokenizer folder (no such directory)", dir);
  TokenizerFiles files;
  for (const std::string& name : file_names()) {
    const std::string path = (fs::path(dir) / name).string();
    if (file_exists(path)) files.emplace(name, read_file(path));
  }
  return from_files(files, dir);
}

Tokenizer Tokenizer::from_weights(const WeightStore& store) {
  const Component component = store.component("tokenizer");
  TokenizerFiles files;
  for (const std::string& name : component.tensor_names()) files.emplace(name, component.file_bytes(name));
  return from_files(files, component.where());
}

Tokenizer Tokenizer::from_files(const TokenizerFiles& files, const std::string& where) {
  auto model = std::make_shared<Model>();
  model->where = where;
  auto path_of = [&](const std::string& name) { return fmt::format("{}/{}", where, name); };
  std::vector<AddedTokenRule> added_rules;
  std::string vocab_file;

  if (files.count("tokenizer.json")) {
    // The fast-tokenizer file is the whole tokenizer; vocab.json / merges.txt are then ignored,
    // as transformers ignores them.
    vocab_file = path_of("tokenizer.json");
    const json tokenizer = parse_json_file(files, "tokenizer.json", where);
    if (!tokenizer.is_object()) fail_input("{}: expected a JSON object", vocab_file);
    const json& bpe = require_member(tokenizer, "model", vocab_file);
    if (bpe.contains("type") && bpe["type"] != "BPE")
      fail_input("{}: model.type is {}, expected \"BPE\" (a Qwen2 byte-level BPE tokenizer)", vocab_file,
                 json_excerpt(bpe["type"]));
    const json& vocab = require_member(bpe, "vocab", vocab_file + " model");
    if (!vocab.is_object()) fail_input("{}: model.vocab is not an object {{\"symbol\": id, ...}}", vocab_file);
    model->vocab.reserve(vocab.size());
    for (const auto& [token, id] : vocab.items()) model->add_symbol(std::string(token), id, vocab_file);
    model->finish_vocab(vocab_file);
    model->load_merges(parse_json_merges(require_member(bpe, "merges", vocab_file + " model"), vocab_file), vocab_file);
    if (tokenizer.contains("added_tokens")) {
      const json& list = tokenizer["added_tokens"];
      if (!list.is_array()) fail_input("{}: added_tokens is not an array", vocab_file);
      for (const json& entry : list) {
        if (!entry.is_object() || !entry.contains("content") || !entry["content"].is_string() || !entry.contains("id"))
          fail_input("{}: added_tokens entry {} lacks \"content\" or \"id\"", vocab_file, json_excerpt(entry));
        const std::string content = entry["content"].get<std::string>();
        check_added_token_flags(entry, content, vocab_file);
        added_rules.push_back({content, token_id_from_json(entry["id"], vocab_file, content), vocab_file});
      }
    }
  } else {
    for (const char* required : {"vocab.json", "merges.txt"})
      if (!files.count(required))
        fail_input("{}: missing (a Qwen2 tokenizer needs vocab.json and merges.txt, or tokenizer.json)",
                   path_of(required));
    vocab_file = path_of("vocab.json");
    model->vocab.reserve(160000);  // Qwen2's 151,643 symbols without a rehash
    VocabReader reader(
        vocab_file, [&](std::string&& token, const json& id) { model->add_symbol(std::move(token), id, vocab_file); });
    reader.read(files.at("vocab.json"));
    model->finish_vocab(vocab_file);
    model->load_merges(parse_merges_txt(files.at("merges.txt"), path_of("merges.txt")), vocab_file);
  }

  if (files.count("added_tokens.json")) {
    const std::string file = path_of("added_tokens.json");
    const json list = parse_json_file(files, "added_tokens.json", where);
    if (!list.is_object()) fail_input("{}: expected an object {{\"token\": id, ...}}", file);
    for (const auto& [content, id] : list.items())
      added_rules.push_back({content, token_id_from_json(id, file, content), file});
  }
  if (files.count("tokenizer_config.json")) {
    const std::string file = path_of("tokenizer_config.json");
    const json config = parse_json_file(files, "tokenizer_config.json", where);
    if (!config.is_object()) fail_input("{}: expected a JSON object", file);
    const auto split_special = config.find("split_special_tokens");
    if (split_special != config.end() && split_special->is_boolean() && split_special->get<bool>())
      fail_input("{}: split_special_tokens is true, which ditbatch does not support (Qwen2 sets it false)", file);
    if (config.contains("added_tokens_decoder")) {
      const json& decoder = config["added_tokens_decoder"];
      if (!decoder.is_object()) fail_input("{}: added_tokens_decoder is not an object", file);
      for (const auto& [id_text, entry] : decoder.items()) {
        if (!entry.is_object() || !entry.contains("content") || !entry["content"].is_string())
          fail_input("{}: added_tokens_decoder[\"{}\"] has no string \"content\"", file, id_text);
        const std::string content = entry["content"].get<std::string>();
        int64_t id = -1;
        try {
          size_t used = 0;
          id = std::stoll(id_text, &used);
          if (used != id_text.size()) id = -1;
        } catch (const std::exception&) {
        }
        if (id < 0 || id > kMaxTokenId)
          fail_input("{}: added_tokens_decoder key \"{}\" is not a token id (0..{})", file, id_text, kMaxTokenId);
        check_added_token_flags(entry, content, file);
        added_rules.push_back({content, static_cast<int32_t>(id), file});
      }
    }
  }
  model->load_added(added_rules, vocab_file);
  return Tokenizer(std::move(model));
}

// ---- instances ------------------------------------------------------------------------------------

Tokenizer::Tokenizer(std::shared_ptr<const Model> model)
    : model_(std::move(model)), splitter_(std::make_unique<PieceSplitter>()) {}

Tokenizer::Tokenizer(const Tokenizer& other) : Tokenizer(other.model_) {}

Tokenizer& Tokenizer::operator=(const Tokenizer& other) {
  if (this != &other) {
    model_ = other.model_;
    piece_cache_.clear();
    segment_cache_.clear();
    if (!splitter_) splitter_ = std::make_unique<PieceSplitter>();  // `this` was moved from
  }
  return *this;
}

Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

int64_t Tokenizer::vocab_size() const {
  return static_cast<int64_t>(model_->id_to_token.size());
}

const std::string& Tokenizer::source() const {
  return model_->where;
}

int64_t Tokenizer::token_id(std::string_view token) const {
  if (auto it = model_->added_ids.find(token); it != model_->added_ids.end()) return it->second;
  if (auto it = model_->vocab.find(token); it != model_->vocab.end()) return it->second;
  return -1;
}

// ---- encoding -------------------------------------------------------------------------------------

std::vector<int64_t> Tokenizer::encode(std::string_view text) {
  std::vector<int64_t> ids;
  ids.reserve(text.size() / 3 + 8);
  // Added tokens are matched on the raw text, before NFC, as Hugging Face tokenizers does for
  // tokens with normalized=false (all of Qwen2's); NFC then runs on the text between them.
  size_t segment_start = 0;
  size_t position = 0;
  while (position < text.size()) {
    const auto& candidates = model_->added_by_first_byte[static_cast<unsigned char>(text[position])];
    const Model::AddedToken* match = nullptr;
    for (int32_t index : candidates) {  // longest first
      const Model::AddedToken& token = model_->added[static_cast<size_t>(index)];
      if (text.substr(position).starts_with(token.content)) {
        match = &token;
        break;
      }
    }
    if (!match) {
      ++position;
      continue;
    }
    encode_segment(text.substr(segment_start, position - segment_start), ids);
    ids.push_back(match->id);
    position += match->content.size();
    segment_start = position;
  }
  encode_segment(text.substr(segment_start), ids);
  return ids;
}

// One segment between added tokens: NFC, regex pieces, BPE. Segments are independent of each
// other (no regex match or NFC composition crosses an added token), so caching them is exact.
void Tokenizer::encode_segment(std::string_view segment, std::vector<int64_t>& ids) {
  if (segment.empty()) return;
  const bool cacheable = segment.size() <= kMaxCachedSegmentBytes;
  if (cacheable) {
    if (auto it = segment_cache_.find(segment); it != segment_cache_.end()) {
      ids.insert(ids.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first_id = ids.size();
  // ASCII is its own NFC; skipping utf8proc for it keeps the common case cheap.
  std::string_view text = segment;
  std::string normalized;
  if (!is_ascii(segment)) {
    normalized = nfc(segment);
    text = normalized;
  }
  splitter_->split(text, [&](std::string_view piece) { encode_piece(piece, ids); });
  if (cacheable) {
    if (segment_cache_.size() >= kMaxCachedSegments) segment_cache_.clear();
    segment_cache_.emplace(std::string(segment),
                           std::vector<int32_t>(ids.begin() + static_cast<ptrdiff_t>(first_id), ids.end()));
  }
}

// BPE of one pre-tokenized piece, the way Hugging Face tokenizers' Word::merge_all does it: a
// priority queue of adjacent pairs ordered by (rank, position), stale entries skipped. For a
// well-formed merges list this equals GPT-2's "merge every occurrence of the best pair" loop;
// following the queue exactly also keeps odd merge lists identical to the reference.
void Tokenizer::encode_piece(std::string_view piece, std::vector<int64_t>& ids) {
  if (auto it = piece_cache_.find(piece); it != piece_cache_.end()) {
    ids.insert(ids.end(), it->second.begin(), it->second.end());
    return;
  }
  struct Symbol {
    int32_t id;
    int32_t prev, next;  // neighbours in the linked list; -1 at the ends
    bool removed;
  };
  struct Candidate {
    int32_t rank, position, product;
    bool operator<(const Candidate& other) const {  // std::priority_queue pops the largest
      return rank != other.rank ? rank > other.rank : position > other.position;
    }
  };
  const int32_t n = static_cast<int32_t>(piece.size());
  std::vector<Symbol> symbols(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i)
    symbols[static_cast<size_t>(i)] = {model_->byte_ids[static_cast<unsigned char>(piece[static_cast<size_t>(i)])],
                                       i - 1, i + 1 < n ? i + 1 : -1, false};

  std::priority_queue<Candidate> queue;
  auto push_pair = [&](int32_t position) {
    const Symbol& left = symbols[static_cast<size_t>(position)];
    if (left.next < 0) return;
    auto it = model_->merges.find(Model::pair_key(left.id, symbols[static_cast<size_t>(left.next)].id));
    if (it != model_->merges.end()) queue.push({it->second.rank, position, it->second.product});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair(i);

  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[static_cast<size_t>(top.position)];
    if (left.removed || left.next < 0) continue;
    Symbol& right = symbols[static_cast<size_t>(left.next)];
    // Stale entry: one of the two symbols has merged since this pair was queued.
    auto it = model_->merges.find(Model::pair_key(left.id, right.id));
    if (it == model_->merges.end() || it->second.product != top.product) continue;
    left.id = top.product;
    right.removed = true;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = top.position;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(top.position);
  }

  std::vector<int32_t> piece_ids;
  for (int32_t i = 0; i >= 0; i = symbols[static_cast<size_t>(i)].next)
    piece_ids.push_back(symbols[static_cast<size_t>(i)].id);
  ids.insert(ids.end(), piece_ids.begin(), piece_ids.end());
  if (piece.size() <= kMaxCachedPieceBytes) {
    if (piece_cache_.size() >= kMaxCachedPieces) piece_cache_.clear();
    piece_cache_.emplace(std::string(piece), std::move(piece_ids));
  }
}

// ---- decoding -------------------------------------------------------------------------------------

std::string Tokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string text;
  for (int64_t id : ids) {
    const std::string_view token = id < 0 || id > std::numeric_limits<int32_t>::max()
                                       ? std::string_view()
                                       : model_->token_of(static_cast<int32_t>(id));
    if (token.empty())
      fail_input("decode: id {} is not a token of {} (ids 0..{})", id, model_->where, vocab_size() - 1);
    if (model_->id_is_added[static_cast<size_t>(id)]) {
      text += token;
      continue;
    }
    // A vocabulary symbol: map each code point back to the byte it stands for.
    const auto* bytes = reinterpret_cast<const utf8proc_uint8_t*>(token.data());
    utf8proc_ssize_t offset = 0;
    while (offset < static_cast<utf8proc_ssize_t>(token.size())) {
      utf8proc_int32_t cp = 0;
      const utf8proc_ssize_t len =
          utf8proc_iterate(bytes + offset, static_cast<utf8proc_ssize_t>(token.size()) - offset, &cp);
      auto it = len > 0 ? model_->codepoint_to_byte.find(static_cast<char32_t>(cp)) : model_->codepoint_to_byte.end();
      if (it == model_->codepoint_to_byte.end())
        fail_input("decode: symbol \"{}\" (id {}) of {} is not byte-level BPE text", token, id, model_->where);
      text.push_back(static_cast<char>(it->second));
      offset += len;
    }
  }
  return text;
}

}  // namespace ditbatch
