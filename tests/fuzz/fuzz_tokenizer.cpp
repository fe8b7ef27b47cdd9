// A tokenizer folder as `convert`, `generate` and `tokenize` load it (Tokenizer::from_files):
// tokenizer.json, or vocab.json + merges.txt, with added_tokens.json and tokenizer_config.json.
// The input holds the files one after the other, each after a line ">>> NAME" (fuzz_util.h).
//
// A tokenizer that loads then encodes a few fixed texts (ASCII, CJK, emoji, the chat template's
// special tokens). Beyond "no crash": every id is below vocab_size(), and for ASCII text that
// decodes at all, decode(encode(text)) gives the text back (byte-level BPE loses nothing).
#include <vector>

#include "fuzz_util.h"
#include "model/tokenizer.h"

using namespace ditbatch;

namespace {

const std::vector<std::string> kAsciiTexts = {
    "A red fox, jumping over 3 lazy dogs!",
    "<|im_start|>system\nDescribe the image.<|im_end|>\n<|im_start|>user\nhello world<|im_end|>\n",
    "   spaces  \t\ttabs\r\n\n  and 'quotes' don't 1234567",
};
const std::vector<std::string> kUnicodeTexts = {"東京の夜景、ネオン", "caf\u00e9 cafe\u0301 \U0001F98A",
                                                "\u00a0\u2028\u3000x"};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const TokenizerFiles files = fuzz::split_files(fuzz::as_text(data, size));
  fuzz::parse([&] {
    Tokenizer tokenizer = Tokenizer::from_files(files, "fuzz/tokenizer");
    auto check_ids = [&](const std::vector<int64_t>& ids, const std::string& text) {
      for (int64_t id : ids)
        if (id < 0 || id >= tokenizer.vocab_size())
          fuzz::finding("encode(\"" + text + "\") gave id " + std::to_string(id) + ", outside the vocabulary of " +
                        std::to_string(tokenizer.vocab_size()));
    };
    for (const std::string& text : kAsciiTexts) {
      const std::vector<int64_t> ids = tokenizer.encode(text);
      check_ids(ids, text);
      std::string decoded;
      try {
        decoded = tokenizer.decode(ids);
      } catch (const InputError&) {
        continue;  // a symbol that is not byte-level text: decode refuses it, which is fine
      }
      if (decoded != text) fuzz::finding("decode(encode(\"" + text + "\")) gave \"" + decoded + "\"");
    }
    for (const std::string& text : kUnicodeTexts) check_ids(tokenizer.encode(text), text);
  });
  return 0;
}
