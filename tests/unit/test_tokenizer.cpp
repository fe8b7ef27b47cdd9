// The Qwen2.5-VL tokenizer, the pipeline's prompt ids and `ditbatch tokenize`, against ids made by
// transformers' Qwen2Tokenizer (tests/data/golden/tokenizer.h5, text_encoder.h5; tools/golden/README.md)
// and the test vectors of spec text-encoder.md §4.8 / §5.1.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "core/fs.h"
#include "io/h5.h"
#include "io/weight_store.h"
#include "model/prompt_tokens.h"
#include "model/qwen_image_constants.h"
#include "model/tokenizer.h"
#include "test_util.h"

using namespace ditbatch;
namespace fs = std::filesystem;
using Ids = std::vector<int64_t>;

namespace {

const std::string kRealTokenizerDir = std::string(DITBATCH_SOURCE_DIR) + "/weights/tokenizer";
const std::string kTinyTokenizerDir = std::string(DITBATCH_TEST_DATA) + "/golden/tiny-pipeline/tokenizer";
const std::string kTokenizerGolden = std::string(DITBATCH_TEST_DATA) + "/golden/tokenizer.h5";
const std::string kTextEncoderGolden = std::string(DITBATCH_TEST_DATA) + "/golden/text_encoder.h5";

// Loading the real vocabulary takes a fraction of a second; do it once and hand out copies.
const Tokenizer& real_tokenizer() {
  static const Tokenizer tokenizer = Tokenizer::from_folder(kRealTokenizerDir);
  return tokenizer;
}

Ids read_ids(const h5::Group& group, const std::string& name) {
  const h5::DatasetInfo info = group.dataset_info(name);
  EXPECT_EQ(info.dtype, DType::I64) << group.where(name);
  if (shape_numel(info.shape) == 0) return {};
  const Tensor t = group.read_tensor(name);
  return Ids(t.data<int64_t>(), t.data<int64_t>() + t.numel());
}

struct GoldenCase {
  std::string name, description, text;
  Ids ids, template_ids, template_ids_dropped;
  bool nfc_changes_text = false;
};

std::vector<GoldenCase> load_golden_cases() {
  const h5::File file = h5::File::open_read(kTokenizerGolden);
  const h5::Group cases = file.root().open_group("cases");
  std::vector<GoldenCase> out;
  for (const std::string& name : cases.members()) {
    const h5::Group g = cases.open_group(name);
    GoldenCase c;
    c.name = name;
    c.description = g.attr_string("description");
    c.text = g.read_bytes("text");
    c.ids = read_ids(g, "ids");
    c.template_ids = read_ids(g, "template_ids");
    c.template_ids_dropped = read_ids(g, "template_ids_dropped");
    c.nfc_changes_text = g.attr_int("nfc_changes_text") != 0;
    out.push_back(std::move(c));
  }
  return out;
}

const std::vector<GoldenCase>& golden_cases() {
  static const std::vector<GoldenCase> cases = load_golden_cases();
  return cases;
}

std::string case_label(const GoldenCase& c) {
  return "case " + c.name + " (" + c.description + ")";
}

using test::TempDir;
using test::write_text;
using test::input_error_of;

// A copy of the tiny tokenizer folder (4000 merges: small enough to rewrite per test).
void copy_tiny_tokenizer(const TempDir& dir) {
  for (const char* name : {"vocab.json", "merges.txt", "added_tokens.json", "tokenizer_config.json"})
    fs::copy_file(fs::path(kTinyTokenizerDir) / name, dir / name);
}

struct CliResult {  // stdout and stderr apart (test::run merges them)
  int status = -1;
  std::string out, err;
};

// Runs `ditbatch <args>` with `input` on stdin.
CliResult run_ditbatch(const std::string& args, const std::string& input, const TempDir& dir) {
  write_text(dir / "stdin.txt", input);
  const std::string command = fmt::format("'{}' {} < '{}' > '{}' 2> '{}'", DITBATCH_EXE, args, dir / "stdin.txt",
                                          dir / "stdout.txt", dir / "stderr.txt");
  const int raw = std::system(command.c_str());
  CliResult r;
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  r.out = read_file(dir / "stdout.txt");
  r.err = read_file(dir / "stderr.txt");
  return r;
}

std::vector<Ids> parse_id_lines(const std::string& out) {
  std::vector<Ids> lines;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) lines.push_back(nlohmann::json::parse(line).get<Ids>());
  return lines;
}

Ids tail(const Ids& ids, size_t first) {
  return first >= ids.size() ? Ids{} : Ids(ids.begin() + first, ids.end());
}

}  // namespace

// ---- the goldens: every case of tokenizer.h5, real vocabulary -------------------------------------

TEST(TokenizerGolden, FileDescribesTheQwenImagePipeline) {
  const h5::File file = h5::File::open_read(kTokenizerGolden);
  EXPECT_EQ(file.root().attr_string("template"), kQwenImagePromptTemplate);
  EXPECT_EQ(file.root().attr_int("drop_idx"), kQwenImageDropIdx);
  EXPECT_EQ(file.root().attr_int("template_max_length"), kQwenImageTokenizerMaxLength + kQwenImageDropIdx);
  EXPECT_EQ(file.root().attr_int("num_cases"), 197);
  EXPECT_EQ(golden_cases().size(), 197u);
}

TEST(TokenizerGolden, EveryCasePlainIds) {
  Tokenizer tokenizer = real_tokenizer();
  for (const GoldenCase& c : golden_cases()) EXPECT_EQ(tokenizer.encode(c.text), c.ids) << case_label(c);
}

TEST(TokenizerGolden, EveryCaseTemplatedIdsAndDroppedIds) {
  Tokenizer tokenizer = real_tokenizer();
  int truncated = 0;
  for (const GoldenCase& c : golden_cases()) {
    const PromptTokens tokens =
        tokenize_prompt(tokenizer, c.text, kQwenImagePromptTemplate, kQwenImageDropIdx, kQwenImageTokenizerMaxLength);
    EXPECT_EQ(tokens.ids, c.template_ids) << case_label(c);
    EXPECT_EQ(tokens.keep_first, kQwenImageDropIdx) << case_label(c);
    EXPECT_EQ(tail(tokens.ids, static_cast<size_t>(tokens.keep_first)), c.template_ids_dropped) << case_label(c);
    EXPECT_EQ(tokens.keep_count, static_cast<int64_t>(c.template_ids_dropped.size())) << case_label(c);
    // The pipeline default keeps at most 512 of those rows.
    const PromptTokens default_cut = tokenize_prompt(tokenizer, c.text, kQwenImagePromptTemplate, kQwenImageDropIdx);
    EXPECT_EQ(default_cut.keep_count, std::min<int64_t>(512, static_cast<int64_t>(c.template_ids_dropped.size())))
        << case_label(c);
    if (c.template_ids.size() == 1058u) ++truncated;
  }
  EXPECT_EQ(truncated, 5) << "the README says 5 long cases are cut to 1058 ids";
}

TEST(TokenizerGolden, DecodeGivesBackTheText) {
  const Tokenizer& tokenizer = real_tokenizer();
  for (const GoldenCase& c : golden_cases()) {
    if (c.nfc_changes_text) continue;  // decode gives the NFC form
    EXPECT_EQ(tokenizer.decode(c.ids), c.text) << case_label(c);
  }
}

// The \s corner cases the spec lists (§4.3) as engine-dependent: each is in some golden case
// (so EveryCasePlainIds really checks it), and it tokenizes as transformers does.
TEST(TokenizerGolden, WhitespaceCornerCasesAreCoveredAndMatch) {
  Tokenizer tokenizer = real_tokenizer();
  const std::vector<std::pair<std::string, const char*>> corner_cases = {
      {"\u0085", "U+0085"}, {"\u00A0", "U+00A0"}, {"\u2028", "U+2028"}, {"\u3000", "U+3000"},
      {"\x1C", "U+001C"},   {"\x1D", "U+001D"},   {"\x1E", "U+001E"},   {"\x1F", "U+001F"},
      {"\uFEFF", "U+FEFF"}, {"\u200B", "U+200B"}, {"\u2029", "U+2029"}, {"\u1680", "U+1680"}};
  for (const auto& [character, name] : corner_cases) {
    int found = 0;
    for (const GoldenCase& c : golden_cases()) {
      if (c.text.find(character) == std::string::npos) continue;
      ++found;
      EXPECT_EQ(tokenizer.encode(c.text), c.ids) << name << " in " << case_label(c);
    }
    EXPECT_GT(found, 0) << "no golden case contains " << name;
  }
}

// ---- the spec's vectors ----------------------------------------------------------------------------

TEST(TokenizerSpec, TestVectorsOfSection4_8) {
  Tokenizer tokenizer = real_tokenizer();
  EXPECT_EQ(tokenizer.encode("Hello world"), (Ids{9707, 1879}));
  EXPECT_EQ(tokenizer.encode(" Hello world"), (Ids{21927, 1879}));
  EXPECT_EQ(tokenizer.encode("hello\r\n\r\nworld"), (Ids{14990, 871, 14615}));
  EXPECT_EQ(tokenizer.encode("   leading spaces"), (Ids{256, 6388, 12621}));
  EXPECT_EQ(tokenizer.encode("tab\tsep"), (Ids{6192, 197, 28036}));
  EXPECT_EQ(tokenizer.encode("x\u00A0y"), (Ids{87, 4102, 88}));
  EXPECT_EQ(tokenizer.encode("I'LL DO IT"), (Ids{40, 6, 4086, 9319, 8700}));
  EXPECT_EQ(tokenizer.encode("emoji \U0001F600\U0001F44D\U0001F3FD"), (Ids{37523, 90316, 144349, 145375}));
  EXPECT_EQ(tokenizer.encode("e\u0301 \uFF21\uFF11 x<|im_end|>y <|endoftext|>"),
            (Ids{963, 62823, 94, 20109, 856, 151645, 88, 220, 151643}));
  EXPECT_EQ(tokenizer.encode(""), Ids{});
}

TEST(TokenizerSpec, ByteSymbolsAndSizes) {
  const Tokenizer& tokenizer = real_tokenizer();
  EXPECT_EQ(tokenizer.token_id("\u0120"), 220);  // space -> 'Ġ'
  EXPECT_EQ(tokenizer.token_id("\u010A"), 198);  // '\n' -> 'Ċ'
  EXPECT_EQ(tokenizer.token_id("\u0109"), 197);  // '\t' -> 'ĉ'
  EXPECT_EQ(tokenizer.token_id("!"), 0);
  EXPECT_EQ(tokenizer.token_id("<|im_start|>"), 151644);
  EXPECT_EQ(tokenizer.token_id("<|file_sep|>"), 151664);
  EXPECT_EQ(tokenizer.token_id("<think>"), -1);  // not an added token of Qwen-Image (§4.6)
  EXPECT_EQ(tokenizer.vocab_size(), 151665);
  EXPECT_EQ(tokenizer.decode({151644, 8948, 198}), "<|im_start|>system\n");
}

TEST(TokenizerSpec, TemplateOfSection5_1) {
  Tokenizer tokenizer = real_tokenizer();
  const Ids prefix = {151644, 8948, 198, 74785, 279, 2168,   553, 44193,  279, 1894,  11,    6083,
                      11,     1379, 11,  10434, 11,  12194,  11,  1467,   11,  27979, 11871, 315,
                      279,    6171, 323, 4004,  25,  151645, 198, 151644, 872, 198};
  ASSERT_EQ(prefix.size(), 34u);
  const Ids suffix = {151645, 198, 151644, 77091, 198};

  const PromptTokens cat = tokenize_prompt(tokenizer, "A cat holding a sign that says hello world",
                                           kQwenImagePromptTemplate, kQwenImageDropIdx);
  EXPECT_EQ(cat.ids.size(), 48u);
  EXPECT_EQ(Ids(cat.ids.begin(), cat.ids.begin() + 34), prefix);
  EXPECT_EQ(tail(cat.ids, 34),
            (Ids{32, 8251, 9963, 264, 1841, 429, 2727, 23811, 1879, 151645, 198, 151644, 77091, 198}));
  EXPECT_EQ(cat.keep_first, 34);
  EXPECT_EQ(cat.keep_count, 14);

  const PromptTokens empty = tokenize_prompt(tokenizer, "", kQwenImagePromptTemplate, kQwenImageDropIdx);
  EXPECT_EQ(empty.ids.size(), 39u);
  EXPECT_EQ(tail(empty.ids, 34), suffix);

  // A leading newline merges with the template's "\n" (token 33 becomes "\n\n" = 271) and is dropped with it.
  const PromptTokens newline = tokenize_prompt(tokenizer, "\nA cat", kQwenImagePromptTemplate, kQwenImageDropIdx);
  EXPECT_EQ(newline.ids[33], 271);
  EXPECT_EQ(tail(newline.ids, 34), (Ids{32, 8251, 151645, 198, 151644, 77091, 198}));
}

// Behaviour the goldens do not pin down, with ids from the same reference (transformers 5.24.0
// Qwen2Tokenizer on weights/tokenizer, run in tools/golden/.venv).
TEST(TokenizerSpec, ReferenceIdsOutsideTheGoldens) {
  Tokenizer tokenizer = real_tokenizer();
  // Added tokens are split before NFC: ">" + U+0338 would compose to U+226F, yet <|im_end|> stays whole.
  EXPECT_EQ(tokenizer.encode("<|im_end|>\u0338"), (Ids{151645, 136, 116}));
  // ...while in plain text NFC does compose them (U+226F is 58994, 107).
  EXPECT_EQ(tokenizer.encode("a>\u0338b"), (Ids{64, 58994, 107, 65}));
  // A combining mark cannot join a letter across an added token.
  EXPECT_EQ(tokenizer.encode("e<|im_end|>\u0301"), (Ids{68, 151645, 53839}));
  // Oniguruma's case folding in (?i:'s...): the long s U+017F after an apostrophe is not a contraction.
  EXPECT_EQ(tokenizer.encode("\u017F's '\u017F 'S '\uFB05"), (Ids{144815, 594, 364, 144815, 364, 50, 364, 148672}));
}

// ---- prompt tokens -----------------------------------------------------------------------------------

TEST(TokenizerPrompt, MaxSequenceLengthBounds) {
  Tokenizer tokenizer = real_tokenizer();
  EXPECT_EQ(input_error_of([&] { tokenize_prompt(tokenizer, "a", kQwenImagePromptTemplate, 34, 1025); }),
            "max_sequence_length 1025: must be 1..1024, as diffusers allows");
  EXPECT_EQ(input_error_of([&] { tokenize_prompt(tokenizer, "a", kQwenImagePromptTemplate, 34, 0); }),
            "max_sequence_length 0: must be 1..1024, as diffusers allows");
  // "A cat holding a sign that says hello world" keeps 14 rows; a cut below that applies.
  EXPECT_EQ(tokenize_prompt(tokenizer, "A cat holding a sign that says hello world", kQwenImagePromptTemplate, 34, 3)
                .keep_count,
            3);
  EXPECT_EQ(tokenize_prompt(tokenizer, "A cat holding a sign that says hello world", kQwenImagePromptTemplate, 34, 1)
                .keep_count,
            1);
}

TEST(TokenizerPrompt, TemplateFormatsLikePython) {
  EXPECT_EQ(apply_prompt_template("a {} b", "X"), "a X b");
  EXPECT_EQ(apply_prompt_template("{0}!", "X"), "X!");
  EXPECT_EQ(apply_prompt_template("{{json}}: {}", "{}"), "{json}: {}");  // the prompt is inserted verbatim
  EXPECT_NE(input_error_of([] { apply_prompt_template("no field", "X"); }).find("exactly one"), std::string::npos);
  EXPECT_NE(input_error_of([] { apply_prompt_template("{}{}", "X"); }).find("exactly one"), std::string::npos);
  EXPECT_NE(input_error_of([] { apply_prompt_template("{name}", "X"); }).find("'{'"), std::string::npos);
}

// ---- a second vocabulary: the tiny tokenizer against text_encoder.h5 ------------------------------

TEST(TokenizerTiny, TemplatedIdsOfTextEncoderGolden) {
  Tokenizer tokenizer = Tokenizer::from_folder(kTinyTokenizerDir);
  EXPECT_EQ(tokenizer.vocab_size(), 4278);
  const h5::File file = h5::File::open_read(kTextEncoderGolden);
  const std::string prompt_template = file.root().attr_string("template");
  const int64_t drop_idx = file.root().attr_int("drop_idx");
  const h5::Group prompts = file.root().open_group("prompts");
  ASSERT_EQ(prompts.members().size(), 7u);
  for (const std::string& name : prompts.members()) {
    const h5::Group g = prompts.open_group(name);
    const PromptTokens tokens =
        tokenize_prompt(tokenizer, g.read_bytes("prompt_utf8"), prompt_template, drop_idx, 1024);
    EXPECT_EQ(tokens.ids, read_ids(g, "input_ids")) << "prompt " << name;
  }
  // The padded batch: each row's unpadded ids are the same prompt tokenized alone.
  const h5::Group batch = file.root().open_group("batch");
  const Tensor input_ids = batch.read_tensor("input_ids");
  const Tensor mask = batch.read_tensor("attention_mask");
  const int64_t width = input_ids.dim(1);
  for (int64_t row = 0; row < input_ids.dim(0); ++row) {
    Ids expected;
    for (int64_t k = 0; k < width; ++k)
      if (mask.data<int64_t>()[row * width + k]) expected.push_back(input_ids.data<int64_t>()[row * width + k]);
    const std::string prompt = batch.read_bytes(fmt::format("prompt_{:02}", row));
    EXPECT_EQ(tokenize_prompt(tokenizer, prompt, prompt_template, drop_idx, 1024).ids, expected) << "batch row " << row;
  }
}

// tokenizer.json (the fast-tokenizer file) with merges as "A B" strings and as ["A", "B"] pairs.
TEST(TokenizerTiny, TokenizerJsonInBothMergeForms) {
  const nlohmann::json vocab = nlohmann::json::parse(read_file(kTinyTokenizerDir + "/vocab.json"));
  const nlohmann::json added = nlohmann::json::parse(read_file(kTinyTokenizerDir + "/added_tokens.json"));
  nlohmann::json merges_as_strings = nlohmann::json::array(), merges_as_pairs = nlohmann::json::array();
  std::istringstream merges(read_file(kTinyTokenizerDir + "/merges.txt"));
  std::string line;
  while (std::getline(merges, line)) {
    if (line.starts_with("#version") || line.empty()) continue;
    merges_as_strings.push_back(line);
    const size_t space = line.find(' ');
    merges_as_pairs.push_back({line.substr(0, space), line.substr(space + 1)});
  }
  nlohmann::json added_tokens = nlohmann::json::array();
  for (const auto& [content, id] : added.items())
    added_tokens.push_back({{"id", id},
                            {"content", content},
                            {"single_word", false},
                            {"lstrip", false},
                            {"rstrip", false},
                            {"normalized", false},
                            {"special", true}});

  const h5::File file = h5::File::open_read(kTextEncoderGolden);
  const h5::Group prompt = file.root().open_group("prompts").open_group("06");  // CJK + emoji
  for (const nlohmann::json& merge_list : {merges_as_strings, merges_as_pairs}) {
    TempDir dir;
    nlohmann::json tokenizer_json = {{"version", "1.0"},
                                     {"added_tokens", added_tokens},
                                     {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list}}}};
    write_text(dir / "tokenizer.json", tokenizer_json.dump());
    Tokenizer tokenizer = Tokenizer::from_folder(dir.path());
    EXPECT_EQ(
        tokenize_prompt(tokenizer, prompt.read_bytes("prompt_utf8"), file.root().attr_string("template"), 34, 1024).ids,
        read_ids(prompt, "input_ids"));
  }
}

// ---- loading from a ditbatch .h5 ------------------------------------------------------------------

TEST(TokenizerWeights, FromTheTokenizerGroupOfAWeightFile) {
  TempDir dir;
  const std::string path = dir / "tokenizer-only.h5";
  WeightWriter writer(path);
  writer.set_root_attr("prompt_template", std::string(kQwenImagePromptTemplate));
  writer.set_root_attr("prompt_template_encode_start_idx", static_cast<int64_t>(kQwenImageDropIdx));
  writer.begin_component("tokenizer", "");
  for (const char* name : {"added_tokens.json", "merges.txt", "tokenizer_config.json", "vocab.json"})
    writer.add_file(name, read_file(kRealTokenizerDir + "/" + name));
  writer.end_component();
  writer.finish();

  const WeightStore store = WeightStore::open(path);
  Tokenizer tokenizer = Tokenizer::from_weights(store);
  EXPECT_NE(tokenizer.source().find("tokenizer-only.h5"), std::string::npos) << tokenizer.source();
  const PromptTemplate tmpl = PromptTemplate::from_weights(store);
  EXPECT_EQ(tmpl.text, kQwenImagePromptTemplate);
  EXPECT_EQ(tmpl.drop_idx, 34);
  for (const GoldenCase& c : golden_cases()) {
    EXPECT_EQ(tokenizer.encode(c.text), c.ids) << case_label(c);
    EXPECT_EQ(tokenize_prompt(tokenizer, c.text, tmpl, 1024).ids, c.template_ids) << case_label(c);
  }
}

// ---- copies, cache and threads ----------------------------------------------------------------------

TEST(TokenizerThreads, OneCopyPerThreadGivesTheGoldenIds) {
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < mismatches.size(); ++t)
    threads.emplace_back([&, t] {
      Tokenizer tokenizer = real_tokenizer();  // each thread its own copy (shared vocabulary)
      for (int round = 0; round < 2; ++round)  // the second round runs from the cache
        for (const GoldenCase& c : golden_cases())
          if (tokenizer.encode(c.text) != c.ids) ++mismatches[t];
    });
  for (auto& thread : threads) thread.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

// ---- malformed files --------------------------------------------------------------------------------

TEST(TokenizerFiles, MissingMergesTxt) {
  TempDir dir;
  copy_tiny_tokenizer(dir);
  fs::remove(dir / "merges.txt");
  const std::string message = input_error_of([&] { Tokenizer::from_folder(dir.path()); });
  EXPECT_NE(message.find(dir / "merges.txt"), std::string::npos) << message;
  EXPECT_NE(message.find("missing"), std::string::npos) << message;
}

TEST(TokenizerFiles, MissingVocabJsonAndMissingFolder) {
  TempDir dir;
  copy_tiny_tokenizer(dir);
  fs::remove(dir / "vocab.json");
  const std::string message = input_error_of([&] { Tokenizer::from_folder(dir.path()); });
  EXPECT_NE(message.find(dir / "vocab.json"), std::string::npos) << message;
  const std::string no_folder = input_error_of([&] { Tokenizer::from_folder(dir / "nowhere"); });
  EXPECT_NE(no_folder.find("nowhere"), std::string::npos) << no_folder;
}

TEST(TokenizerFiles, BadJsonInVocab) {
  TempDir dir;
  copy_tiny_tokenizer(dir);
  write_text(dir / "vocab.json", "{\"a\": 0, \"b\": }");
  const std::string message = input_error_of([&] { Tokenizer::from_folder(dir.path()); });
  EXPECT_NE(message.find(dir / "vocab.json"), std::string::npos) << message;
  EXPECT_NE(message.find("bad JSON"), std::string::npos) << message;
}

TEST(TokenizerFiles, BadJsonInTokenizerConfig) {
  TempDir dir;
  copy_tiny_tokenizer(dir);
  write_text(dir / "tokenizer_config.json", "{\"added_tokens_decoder\": [");
  const std::string message = input_error_of([&] { Tokenizer::from_folder(dir.path()); });
  EXPECT_NE(message.find(dir / "tokenizer_config.json"), std::string::npos) << message;
}

TEST(TokenizerFiles, MergeWithAnUnknownSymbol) {
  TempDir dir;
  copy_tiny_tokenizer(dir);
  write_text(dir / "merges.txt", "#version: 0.2\n\u0120 \u0120\nzzq\u00D7 t\n");
  const std::string message = input_error_of([&] { Tokenizer::from_folder(dir.path()); });
  EXPECT_NE(message.find(dir / "merges.txt line 3"), std::string::npos) << message;
  EXPECT_NE(message.find("zzq\u00D7"), std::string::npos) << message;
  EXPECT_NE(message.find("vocab.json"), std::string::npos) << message;
}

TEST(TokenizerFiles, MergeWhoseProductIsNotInTheVocab) {
  TempDir dir;
  copy_tiny_tokenizer(dir);
  write_text(dir / "merges.txt", "#version: 0.2\nQ Z\n");  // both bytes exist, "QZ" does not
  const std::string message = input_error_of([&] { Tokenizer::from_folder(dir.path()); });
  EXPECT_NE(message.find("merges.txt line 2"), std::string::npos) << message;
  EXPECT_NE(message.find("\"QZ\""), std::string::npos) << message;
}

TEST(TokenizerFiles, MergeLineThatIsNotTwoSymbols) {
  TempDir dir;
  copy_tiny_tokenizer(dir);
  write_text(dir / "merges.txt", "#version: 0.2\n\u0120 \u0120\nthree parts here\n");
  const std::string message = input_error_of([&] { Tokenizer::from_folder(dir.path()); });
  EXPECT_NE(message.find(dir / "merges.txt line 3"), std::string::npos) << message;
  EXPECT_NE(message.find("three parts here"), std::string::npos) << message;
}

TEST(TokenizerFiles, AddedTokenIdCollidesWithTheVocab) {
  TempDir dir;
  copy_tiny_tokenizer(dir);
  fs::remove(dir / "tokenizer_config.json");
  write_text(dir / "added_tokens.json", "{\"<|im_end|>\": 100}");  // id 100 is a vocabulary symbol
  const std::string message = input_error_of([&] { Tokenizer::from_folder(dir.path()); });
  EXPECT_NE(message.find(dir / "added_tokens.json"), std::string::npos) << message;
  EXPECT_NE(message.find("<|im_end|>"), std::string::npos) << message;
  EXPECT_NE(message.find("100"), std::string::npos) << message;
}

TEST(TokenizerFiles, AddedTokenFilesDisagree) {
  TempDir dir;
  copy_tiny_tokenizer(dir);
  // added_tokens.json swaps two ids that tokenizer_config.json's added_tokens_decoder gives the other way.
  std::string added = read_file(dir / "added_tokens.json");
  added.replace(added.find("4257"), 4, "XXXX");
  added.replace(added.find("4258"), 4, "4257");
  added.replace(added.find("XXXX"), 4, "4258");
  write_text(dir / "added_tokens.json", added);
  const std::string message = input_error_of([&] { Tokenizer::from_folder(dir.path()); });
  EXPECT_NE(message.find("tokenizer_config.json"), std::string::npos) << message;
  EXPECT_NE(message.find("added_tokens.json"), std::string::npos) << message;
}

TEST(TokenizerFiles, DuplicateIdInVocab) {
  TempDir dir;
  copy_tiny_tokenizer(dir);
  nlohmann::json vocab = nlohmann::json::parse(read_file(dir / "vocab.json"));
  vocab["zz\u00D7duplicate"] = 7;
  write_text(dir / "vocab.json", vocab.dump());
  const std::string message = input_error_of([&] { Tokenizer::from_folder(dir.path()); });
  EXPECT_NE(message.find(dir / "vocab.json"), std::string::npos) << message;
  EXPECT_NE(message.find("id 7"), std::string::npos) << message;
}

TEST(TokenizerFiles, InvalidUtf8Text) {
  Tokenizer tokenizer = real_tokenizer();
  const std::string message = input_error_of([&] { tokenizer.encode("caf\xC3"); });
  EXPECT_NE(message.find("UTF-8"), std::string::npos) << message;
}

// ---- the command ----------------------------------------------------------------------------------

TEST(TokenizerCommand, IdsForEveryGoldenCase) {
  TempDir dir;
  std::string input;
  for (const GoldenCase& c : golden_cases()) input += nlohmann::json(c.text).dump() + "\n";
  const std::string tokenizer_arg = "tokenize --tokenizer '" + kRealTokenizerDir + "'";

  const CliResult plain = run_ditbatch(tokenizer_arg, input, dir);
  ASSERT_EQ(plain.status, 0) << plain.err;
  const CliResult templated = run_ditbatch(tokenizer_arg + " --template", input, dir);
  ASSERT_EQ(templated.status, 0) << templated.err;
  const CliResult dropped = run_ditbatch(tokenizer_arg + " --template --drop", input, dir);
  ASSERT_EQ(dropped.status, 0) << dropped.err;

  const auto plain_ids = parse_id_lines(plain.out), templated_ids = parse_id_lines(templated.out),
             dropped_ids = parse_id_lines(dropped.out);
  ASSERT_EQ(plain_ids.size(), golden_cases().size());
  ASSERT_EQ(templated_ids.size(), golden_cases().size());
  ASSERT_EQ(dropped_ids.size(), golden_cases().size());
  for (size_t i = 0; i < golden_cases().size(); ++i) {
    const GoldenCase& c = golden_cases()[i];
    EXPECT_EQ(plain_ids[i], c.ids) << case_label(c);
    EXPECT_EQ(templated_ids[i], c.template_ids) << case_label(c);
    EXPECT_EQ(dropped_ids[i], c.template_ids_dropped) << case_label(c);
  }
  // Printed the way Python prints a list, to diff against `print(tokenizer(text).input_ids)`.
  ASSERT_EQ(golden_cases()[0].text, "Hello world");
  EXPECT_EQ(plain.out.substr(0, plain.out.find('\n')), "[9707, 1879]");
}

// The template and drop index come from the .h5's root attributes, not the built-in constants.
TEST(TokenizerCommand, TemplateFromTheWeightFile) {
  TempDir dir;
  const std::string path = dir / "custom-template.h5";
  WeightWriter writer(path);
  writer.set_root_attr("prompt_template", std::string("<|im_start|>user\n{}<|im_end|>"));
  writer.set_root_attr("prompt_template_encode_start_idx", static_cast<int64_t>(3));
  writer.begin_component("tokenizer", "");
  for (const char* name : {"added_tokens.json", "merges.txt", "tokenizer_config.json", "vocab.json"})
    writer.add_file(name, read_file(kRealTokenizerDir + "/" + name));
  writer.end_component();
  writer.finish();

  // "<|im_start|>", "user", "\n" (spec §5.1 ids), "Hello world" (§4.8), "<|im_end|>".
  const CliResult full = run_ditbatch("tokenize --template --tokenizer '" + path + "'", "\"Hello world\"\n", dir);
  ASSERT_EQ(full.status, 0) << full.err;
  EXPECT_EQ(full.out, "[151644, 872, 198, 9707, 1879, 151645]\n");
  const CliResult dropped =
      run_ditbatch("tokenize --template --drop --tokenizer '" + path + "'", "\"Hello world\"\n", dir);
  ASSERT_EQ(dropped.status, 0) << dropped.err;
  EXPECT_EQ(dropped.out, "[9707, 1879, 151645]\n");
}

// A .jsonl prompt file pipes straight in: its objects' "prompt", blank lines skipped as
// generate skips them, so output line i is the prompt of image i.
TEST(TokenizerCommand, ReadsAPromptFilesLines) {
  TempDir dir;
  const CliResult r = run_ditbatch("tokenize --tokenizer '" + kRealTokenizerDir + "'",
                                   "{\"prompt\": \"Hello world\", \"seed\": 3}\n\n  \n\"Hello world\"\n", dir);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "[9707, 1879]\n[9707, 1879]\n");  // spec §4.8's ids
  const CliResult no_prompt = run_ditbatch("tokenize --tokenizer '" + kRealTokenizerDir + "'", "{\"seed\": 3}\n", dir);
  EXPECT_EQ(no_prompt.status, 2);
  EXPECT_NE(no_prompt.err.find("an object with a \"prompt\" string"), std::string::npos) << no_prompt.err;
}

TEST(TokenizerCommand, BadInputLineIsExitStatus2) {
  TempDir dir;
  const std::string args = "tokenize --tokenizer '" + kTinyTokenizerDir + "'";
  const CliResult not_json = run_ditbatch(args, "\"A cat\"\nA dog\n", dir);
  EXPECT_EQ(not_json.status, 2);
  EXPECT_NE(not_json.err.find("line 2"), std::string::npos) << not_json.err;
  EXPECT_EQ(std::count(not_json.out.begin(), not_json.out.end(), '\n'), 1) << "line 1 is answered before line 2 fails";

  const CliResult not_string = run_ditbatch(args, "\"A cat\"\n\"ok\"\n42\n", dir);
  EXPECT_EQ(not_string.status, 2);
  EXPECT_NE(not_string.err.find("line 3"), std::string::npos) << not_string.err;
  EXPECT_NE(not_string.err.find("number"), std::string::npos) << not_string.err;

  const CliResult drop_alone = run_ditbatch(args + " --drop", "\"A cat\"\n", dir);
  EXPECT_EQ(drop_alone.status, 2);
  EXPECT_NE(drop_alone.err.find("--template"), std::string::npos) << drop_alone.err;

  const CliResult no_tokenizer = run_ditbatch("tokenize --tokenizer '" + (dir / "missing") + "'", "", dir);
  EXPECT_EQ(no_tokenizer.status, 2);
  EXPECT_NE(no_tokenizer.err.find("missing"), std::string::npos) << no_tokenizer.err;
}
