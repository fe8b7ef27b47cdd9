// The Edit pipelines' text side against diffusers' own _get_qwen_prompt_embeds (tests/data/golden/
// text_encoder_edit.h5): the Edit and Edit-Plus ids with each image's pads (real and tiny
// tokenizer), the positions of both modes (1-D as the installed stack runs, 3-D M-RoPE with
// mm_token_type_ids passed), and prompt_embeds of the tiny Qwen2.5-VL with the vision tower's rows
// at the pads, on the CPU backend.
#include <gtest/gtest.h>

#include <array>
#include <string>
#include <vector>

#include "core/error.h"
#include "cpu/cpu_backend.h"
#include "golden.h"
#include "io/config.h"
#include "io/h5.h"
#include "model/edit_prompt_embeds.h"
#include "model/edit_prompt_tokens.h"
#include "model/qwen_image_edit_constants.h"
#include "model/text_encoder.h"
#include "model/text_positions.h"
#include "model/tokenizer.h"

using namespace ditbatch;
using Ids = std::vector<int64_t>;

namespace {

constexpr double kNmseBound = 1e-10;  // test_text_encoder_golden.cpp's, for the same tiny encoder in f32

Tokenizer& real_tokenizer() {
  static Tokenizer tokenizer = Tokenizer::from_folder(std::string(DITBATCH_SOURCE_DIR) + "/weights/tokenizer");
  return tokenizer;
}

Tokenizer& tiny_tokenizer() {
  static Tokenizer tokenizer = Tokenizer::from_folder(test::golden("tiny-pipeline/tokenizer"));
  return tokenizer;
}

Ids ids_of(const Tensor& t) { return Ids(t.data<int64_t>(), t.data<int64_t>() + t.numel()); }

struct EditCase {
  std::string name, prompt;
  EditPipeline pipeline = EditPipeline::Edit;
  TextPositionMode positions = TextPositionMode::Sequential;
  std::vector<std::array<int64_t, 3>> grid_thw;
  Ids input_ids, real_input_ids, pad_positions;
  std::array<Ids, 3> position_ids;
  Tensor vision_rows, prompt_embeds, prompt_embeds_mask;
};

std::vector<EditCase> load_cases() {
  const h5::File f = h5::File::open_read(test::golden("text_encoder_edit.h5"));
  EXPECT_EQ(f.root().attr_int("drop_idx"), kQwenImageEditDropIdx);
  const h5::Group cases = f.root().open_group("cases");
  std::vector<EditCase> out;
  for (const std::string& name : cases.members()) {
    const h5::Group g = cases.open_group(name);
    EditCase c;
    c.name = name;
    c.prompt = g.read_bytes("prompt_utf8");
    c.pipeline = g.attr_string("pipeline") == "edit" ? EditPipeline::Edit : EditPipeline::EditPlus;
    c.positions = g.attr_int("mm_token_type_ids") ? TextPositionMode::MRope : TextPositionMode::Sequential;
    const Ids grid = ids_of(g.read_tensor("image_grid_thw"));  // [images, 3]
    for (size_t i = 0; i + 2 < grid.size(); i += 3) c.grid_thw.push_back({grid[i], grid[i + 1], grid[i + 2]});
    c.input_ids = ids_of(g.read_tensor("input_ids"));
    c.real_input_ids = ids_of(g.read_tensor("real_input_ids"));
    c.pad_positions = ids_of(g.read_tensor("pad_positions"));
    const Tensor pos = g.read_tensor("position_ids");  // [3, L]
    const Ids flat = ids_of(pos);
    for (int64_t a = 0; a < 3; ++a)
      c.position_ids[a] = Ids(flat.begin() + a * pos.dim(1), flat.begin() + (a + 1) * pos.dim(1));
    c.vision_rows = g.read_tensor("vision_rows");
    c.prompt_embeds = g.read_tensor("prompt_embeds");
    c.prompt_embeds_mask = g.read_tensor("prompt_embeds_mask");
    out.push_back(std::move(c));
  }
  return out;
}

const std::vector<EditCase>& cases() {
  static const std::vector<EditCase> loaded = load_cases();
  return loaded;
}

Ids pads_of(const EditPromptTokens& tokens) {
  Ids pads;
  for (const ImageTokenSpan& image : tokens.images)
    for (int64_t i = 0; i < image.count(); ++i) pads.push_back(image.first + i);
  return pads;
}

}  // namespace

TEST(EditPromptTokens, GoldenCoversBothPipelinesModesAndImageCounts) {
  int edit = 0, plus_one = 0, plus_two = 0, mrope = 0;
  for (const EditCase& c : cases()) {
    edit += c.pipeline == EditPipeline::Edit;
    plus_one += c.pipeline == EditPipeline::EditPlus && c.grid_thw.size() == 1;
    plus_two += c.pipeline == EditPipeline::EditPlus && c.grid_thw.size() == 2;
    mrope += c.positions == TextPositionMode::MRope;
  }
  EXPECT_EQ(cases().size(), 7u);
  EXPECT_GE(edit, 2);
  EXPECT_GE(plus_one, 1);
  EXPECT_GE(plus_two, 2);
  EXPECT_EQ(mrope, 2);
}

TEST(EditPromptTokens, RealTokenizerIdsEqualTheProcessors) {
  for (const EditCase& c : cases()) {
    SCOPED_TRACE(c.name);
    const EditPromptTokens tokens = tokenize_edit_prompt(real_tokenizer(), c.pipeline, c.prompt, c.grid_thw);
    EXPECT_EQ(tokens.ids, c.real_input_ids);
    ASSERT_EQ(tokens.images.size(), c.grid_thw.size());
    for (size_t k = 0; k < c.grid_thw.size(); ++k)  // grid_t * grid_h * grid_w / 4 pads, each at its own place
      EXPECT_EQ(tokens.images[k].count(), c.grid_thw[k][0] * c.grid_thw[k][1] * c.grid_thw[k][2] / 4);
    for (const int64_t p : pads_of(tokens)) EXPECT_EQ(tokens.ids[static_cast<size_t>(p)], kQwen25VLImageTokenId);
    EXPECT_EQ(tokens.keep_first, 64);
    EXPECT_EQ(tokens.keep_count, static_cast<int64_t>(c.real_input_ids.size()) - 64);  // no truncation
  }
}

// Spec qwen-image-edit.md §3: the drop of 64 is the system turn and "<|im_start|>user\n"; what
// it keeps starts with the image (Edit) or "Picture 1: " (Edit-Plus), and image k is "Picture k: ".
TEST(EditPromptTokens, DropKeepsTheImageOrPicturePrompts) {
  Tokenizer& tok = real_tokenizer();
  const std::vector<std::array<int64_t, 3>> two_images = {{1, 8, 12}, {1, 14, 10}};
  const EditPromptTokens edit = tokenize_edit_prompt(tok, EditPipeline::Edit, "A cat", {two_images[0]});
  EXPECT_EQ(edit.ids[64], kQwen25VLVisionStartTokenId);
  EXPECT_EQ(edit.images.at(0).first, 65);
  EXPECT_EQ(edit.images.at(0).count(), 24);
  EXPECT_EQ(edit.ids[65 + 24], kQwen25VLVisionEndTokenId);

  const EditPromptTokens plus = tokenize_edit_prompt(tok, EditPipeline::EditPlus, "A cat", two_images);
  const Ids picture1 = tok.encode("Picture 1: "), picture2 = tok.encode("Picture 2: ");
  ASSERT_EQ(picture1.size(), 5u);  // "Picture", " ", "1", ":", " "
  EXPECT_EQ(Ids(plus.ids.begin() + 64, plus.ids.begin() + 69), picture1);
  EXPECT_EQ(plus.ids[69], kQwen25VLVisionStartTokenId);
  EXPECT_EQ(plus.images.at(0).first, 70);
  const int64_t after_first = 70 + 24;
  EXPECT_EQ(plus.ids[static_cast<size_t>(after_first)], kQwen25VLVisionEndTokenId);
  EXPECT_EQ(Ids(plus.ids.begin() + after_first + 1, plus.ids.begin() + after_first + 6), picture2);
  EXPECT_EQ(plus.images.at(1).first, after_first + 7);
  EXPECT_EQ(plus.images.at(1).count(), 35);
  // The template's own tokens before the user's text: the same 64 for both templates.
  const Ids prefix = tok.encode(std::string(kQwenImageEditPlusPromptTemplate).substr(
      0, std::string(kQwenImageEditPlusPromptTemplate).find("{}")));
  EXPECT_EQ(prefix.size(), 64u);
  EXPECT_EQ(Ids(edit.ids.begin(), edit.ids.begin() + 64), prefix);
  EXPECT_EQ(Ids(plus.ids.begin(), plus.ids.begin() + 64), prefix);
}

TEST(EditPromptTokens, TinyTokenizerIdsAndPadPositionsEqualThePipelines) {
  for (const EditCase& c : cases()) {
    SCOPED_TRACE(c.name);
    const EditPromptTokens tokens = tokenize_edit_prompt(tiny_tokenizer(), c.pipeline, c.prompt, c.grid_thw);
    EXPECT_EQ(tokens.ids, c.input_ids);
    EXPECT_EQ(pads_of(tokens), c.pad_positions);
    EXPECT_EQ(tokens.keep_count, c.prompt_embeds.dim(0));
  }
}

TEST(EditPromptTokens, RefusesWhatThePipelinesCannotRun) {
  Tokenizer& tok = real_tokenizer();
  const std::array<int64_t, 3> grid = {1, 4, 6};
  EXPECT_NE(test::input_error_of([&] { tokenize_edit_prompt(tok, EditPipeline::Edit, "a <|image_pad|> b", {grid}); })
                .find("<|image_pad|>"),
            std::string::npos);
  EXPECT_NE(test::input_error_of([&] { tokenize_edit_prompt(tok, EditPipeline::Edit, "x", {grid, grid}); })
                .find("2 images"),
            std::string::npos);
  EXPECT_NE(test::input_error_of([&] { tokenize_edit_prompt(tok, EditPipeline::EditPlus, "x", {}); }).find("0 images"),
            std::string::npos);
  EXPECT_NE(test::input_error_of([&] { tokenize_edit_prompt(tok, EditPipeline::EditPlus, "x", {{1, 5, 6}}); })
                .find("merge blocks"),
            std::string::npos);
  EXPECT_NE(test::input_error_of([&] { tokenize_edit_prompt(tok, EditPipeline::Edit, "x", {grid}, 2, 1025); })
                .find("max_sequence_length"),
            std::string::npos);
  // Inside the range it cuts nothing: the whole prompt and its image stay.
  EXPECT_EQ(tokenize_edit_prompt(tok, EditPipeline::Edit, "one two three four", {grid}, 2, 1).keep_count,
            tokenize_edit_prompt(tok, EditPipeline::Edit, "one two three four", {grid}, 2, 1024).keep_count);
}

TEST(TextPositions, BothModesEqualTransformers) {
  for (const EditCase& c : cases()) {
    SCOPED_TRACE(c.name);
    const EditPromptTokens tokens = tokenize_edit_prompt(tiny_tokenizer(), c.pipeline, c.prompt, c.grid_thw);
    const auto L = static_cast<int64_t>(tokens.ids.size());
    const TextPositionIds pos = text_positions(c.positions, L, tokens.images);
    for (size_t a = 0; a < 3; ++a) EXPECT_EQ(pos.axes[a], c.position_ids[a]) << "axis " << a;
    // The other mode gives other positions: the golden tells the two apart.
    const TextPositionMode other =
        c.positions == TextPositionMode::MRope ? TextPositionMode::Sequential : TextPositionMode::MRope;
    EXPECT_NE(text_positions(other, L, tokens.images).axes, pos.axes);
  }
}

// Spec qwen-image-edit.md §6, the verified example: 24 image tokens (4x6 merged) at p = 4.
TEST(TextPositions, MRopeOfOneImageBetweenText) {
  const TextPositionIds pos = mrope_positions(4 + 24 + 2, {ImageTokenSpan{4, 1, 4, 6}});
  for (int64_t i = 0; i < 4; ++i)
    for (size_t a = 0; a < 3; ++a) EXPECT_EQ(pos.axes[a][static_cast<size_t>(i)], i);
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t col = 0; col < 6; ++col) {
      const auto i = static_cast<size_t>(4 + r * 6 + col);
      EXPECT_EQ(pos.axes[0][i], 4);
      EXPECT_EQ(pos.axes[1][i], 4 + r);
      EXPECT_EQ(pos.axes[2][i], 4 + col);
    }
  for (size_t a = 0; a < 3; ++a) {  // the cursor moved by max(4, 6)
    EXPECT_EQ(pos.axes[a][28], 10);
    EXPECT_EQ(pos.axes[a][29], 11);
  }
}

TEST(TextEncoderEditGolden, PromptEmbedsWithImageRows) {
  CpuBackend be;
  WeightStore store = WeightStore::open(test::golden_weights());
  QwenTextEncoder te(be, store.component("text_encoder"));
  const h5::File f = h5::File::open_read(test::golden("text_encoder_edit.h5"));
  EXPECT_EQ(te.config().image_token_id, f.root().attr_int("image_token_id"));
  EXPECT_EQ(te.config().mrope_section, f.root().attr_ints("mrope_section"));
  EXPECT_EQ(te.config().image_token_id, tiny_tokenizer().token_id(kImagePadToken));
  for (const EditCase& c : cases()) {
    SCOPED_TRACE(c.name);
    const EditPromptTokens tokens = tokenize_edit_prompt(tiny_tokenizer(), c.pipeline, c.prompt, c.grid_thw);
    const Tensor embeds = be.to_host_f32(edit_prompt_embeds(te, tokens, c.vision_rows, c.positions));
    ASSERT_EQ(embeds.shape(), c.prompt_embeds.shape());
    EXPECT_LE(test::nmse(embeds, c.prompt_embeds), kNmseBound);
    for (int64_t j = 0; j < c.prompt_embeds_mask.numel(); ++j) EXPECT_EQ(c.prompt_embeds_mask.data<int64_t>()[j], 1);
    // Neither the rows nor (for M-RoPE) the positions are idle: without them the output is another.
    const Tensor pad_embeddings = be.to_host_f32(te.encode(tokens.ids));
    EXPECT_GT(test::nmse(pad_embeddings.slice0(tokens.keep_first, tokens.keep_first + tokens.keep_count), c.prompt_embeds),
              1e-4);
    if (c.positions == TextPositionMode::MRope) {
      const Tensor sequential = be.to_host_f32(edit_prompt_embeds(te, tokens, c.vision_rows, TextPositionMode::Sequential));
      EXPECT_GT(test::nmse(sequential, c.prompt_embeds), 1e-6);
    }
  }
}

TEST(TextEncoderEditGolden, ImageRowsMustMatchThePads) {
  CpuBackend be;
  WeightStore store = WeightStore::open(test::golden_weights());
  QwenTextEncoder te(be, store.component("text_encoder"));
  const EditCase& c = cases().front();
  const EditPromptTokens tokens = tokenize_edit_prompt(tiny_tokenizer(), c.pipeline, c.prompt, c.grid_thw);
  const Tensor one_short = c.vision_rows.slice0(1, c.vision_rows.dim(0));
  EXPECT_NE(test::input_error_of([&] { edit_prompt_embeds(te, tokens, one_short, TextPositionMode::Sequential); })
                .find("do not match"),
            std::string::npos);
}

TEST(TextEncoderEditConfig, MropeSectionsMustCoverHalfAHeadAndImageTokenIdIsRead) {
  auto config = [](const char* mrope_section) {
    return Config::parse(fmt::format(R"({{"model_type": "qwen2_5_vl", "image_token_id": 4268, "text_config": {{
        "hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
        "intermediate_size": 128, "vocab_size": 4278, "rms_norm_eps": 1e-6,
        "rope_parameters": {{"rope_type": "default", "rope_theta": 1e6, "mrope_section": {}}}}}}})",
                                     mrope_section),
                         "config.json");
  };
  const TextEncoderConfig c = TextEncoderConfig::from(config("[2, 3, 3]"));
  EXPECT_EQ(c.mrope_section, (std::vector<int64_t>{2, 3, 3}));
  EXPECT_FALSE(c.mrope_interleaved);
  EXPECT_EQ(c.image_token_id, 4268);
  for (const char* wrong : {"[16, 24, 24]", "[2, 3]", "[4, -1, 5]"})
    EXPECT_NE(test::input_error_of([&] { TextEncoderConfig::from(config(wrong)); }).find("mrope_section"),
              std::string::npos)
        << wrong;
}
