// Qwen2.5-VL's byte-level BPE tokenizer, as transformers' Qwen2Tokenizer runs it: spec
// text-encoder.md §4. Added tokens are split out literally, each other segment is NFC-normalised,
// cut by the Qwen2 pre-tokenizer regex, mapped byte by byte to GPT-2's printable symbols and
// merged by BPE rank. No BOS/EOS is ever added.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ditbatch {

class WeightStore;

// A tokenizer folder's files by name ("vocab.json" -> its bytes).
using TokenizerFiles = std::map<std::string, std::string>;

// Thread safety: one instance per thread. encode() fills per-instance caches and uses a
// per-instance regex match state, so an instance must not be used by two threads at once.
// Copies are cheap and independent: they share the immutable vocabulary and merges, and get
// their own regex and an empty cache. Give each thread its own copy.
class Tokenizer {
 public:
  // The files a tokenizer folder may hold that the tokenizer reads (convert stores these only).
  static const std::vector<std::string>& file_names();
  // A folder with vocab.json + merges.txt (+ added_tokens.json and/or tokenizer_config.json),
  // or with tokenizer.json (which then supplies the vocabulary, merges and added tokens).
  static Tokenizer from_folder(const std::string& dir);
  // The /tokenizer group of a ditbatch weight file (`convert` stores the folder's files there).
  static Tokenizer from_weights(const WeightStore& store);
  // Both loaders end here. `where` names the source in errors ("weights/tokenizer").
  // Bad or inconsistent files throw InputError naming the file and the problem.
  static Tokenizer from_files(const TokenizerFiles& files, const std::string& where);

  Tokenizer(const Tokenizer& other);
  Tokenizer& operator=(const Tokenizer& other);
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // The ids of `text` (UTF-8; invalid UTF-8 is an InputError), like `tokenizer(text)["input_ids"]`.
  std::vector<int64_t> encode(std::string_view text);
  // The UTF-8 text of `ids` (for debugging; a cut multi-byte character stays cut). An unknown
  // id is an InputError.
  std::string decode(const std::vector<int64_t>& ids) const;
  // Highest id + 1 over the vocabulary and the added tokens (151,665 for Qwen2.5-VL); the text
  // encoder's embedding may have more rows (152,064).
  int64_t vocab_size() const;
  // The id of a vocabulary symbol ("Ġworld") or added token ("<|im_end|>"); -1 if none.
  int64_t token_id(std::string_view token) const;
  // Where it was loaded from (the `where` of from_files).
  const std::string& source() const;

 private:
  struct Model;         // vocabulary, merges, added tokens: immutable, shared by copies
  class PieceSplitter;  // the pre-tokenizer regex with its match state: one per instance

  // Heterogeneous lookup, so that a cache probe with a string_view allocates nothing.
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using IdCache = std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>>;

  explicit Tokenizer(std::shared_ptr<const Model> model);
  void encode_segment(std::string_view segment, std::vector<int64_t>& ids);
  void encode_piece(std::string_view piece, std::vector<int64_t>& ids);

  std::shared_ptr<const Model> model_;
  std::unique_ptr<PieceSplitter> splitter_;
  IdCache piece_cache_;    // pre-tokenized piece -> its BPE ids
  IdCache segment_cache_;  // text between added tokens -> its ids (the template's fixed parts)
};

}  // namespace ditbatch
