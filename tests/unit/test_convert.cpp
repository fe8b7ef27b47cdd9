// `ditbatch convert` on synthetic diffusers folders written here (sharded and unsharded), then
// `inspect`; and `make-tiny`, which must be deterministic.
#include <gtest/gtest.h>

#include <filesystem>

#include "io/weight_store.h"
#include "test_util.h"

using namespace ditbatch;
using test::TempDir;

namespace {

std::string bf16_bytes(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  convert_from_f32(v.data(), h.data(), DType::BF16, v.size());
  return std::string(reinterpret_cast<const char*>(h.data()), h.size() * 2);
}

// A diffusers-layout folder with small tensors under the real names (not a loadable model:
// convert copies tensors, it does not interpret them).
void write_pipeline(const std::string& root) {
  test::write_text(root + "/model_index.json",
                   R"({"_class_name": "QwenImagePipeline", "_diffusers_version": "0.42.1", "_name_or_path": "test/qwen-mini"})");
  test::write_text(root + "/transformer/config.json", R"({"_class_name": "QwenImageTransformer2DModel", "num_layers": 1})");
  test::write_text(root + "/transformer/diffusion_pytorch_model.safetensors",
                   test::safetensors_bytes({{"img_in.weight", "F32", {4, 2}, test::f32_bytes(test::random_floats(8, 1))},
                                            {"img_in.bias", "F32", {4}, test::f32_bytes(test::random_floats(4, 2))}}));
  // The text encoder is sharded and carries tensors a text-only pipeline skips.
  test::write_text(root + "/text_encoder/config.json", R"({"architectures": ["Qwen2_5_VLForConditionalGeneration"]})");
  test::write_text(root + "/text_encoder/model-00001-of-00002.safetensors",
                   test::safetensors_bytes({{"model.embed_tokens.weight", "BF16", {5, 2}, bf16_bytes(test::random_floats(10, 3))},
                                            {"visual.blocks.0.attn.qkv.weight", "BF16", {2, 2}, bf16_bytes(test::random_floats(4, 4))}}));
  test::write_text(root + "/text_encoder/model-00002-of-00002.safetensors",
                   test::safetensors_bytes({{"model.norm.weight", "BF16", {2}, bf16_bytes({1.0f, 2.0f})},
                                            {"lm_head.weight", "BF16", {5, 2}, bf16_bytes(test::random_floats(10, 5))}}));
  test::write_text(root + "/text_encoder/model.safetensors.index.json",
                   R"({"metadata": {}, "weight_map": {"model.embed_tokens.weight": "model-00001-of-00002.safetensors",
                       "visual.blocks.0.attn.qkv.weight": "model-00001-of-00002.safetensors",
                       "model.norm.weight": "model-00002-of-00002.safetensors",
                       "lm_head.weight": "model-00002-of-00002.safetensors"}})");
  test::write_text(root + "/vae/config.json", R"({"_class_name": "AutoencoderKLQwenImage", "z_dim": 16, "latents_std": [1.5, 2.5]})");
  test::write_text(root + "/vae/diffusion_pytorch_model.safetensors",
                   test::safetensors_bytes({{"decoder.conv_in.bias", "F16", {3}, std::string("\x00\x3c\x00\xc0\x00\x38", 6)}}));
  test::write_text(root + "/tokenizer/vocab.json", R"({"a": 0})");
  test::write_text(root + "/tokenizer/merges.txt", "#version: 0.2\n");
  test::write_text(root + "/tokenizer/tokenizer_config.json", R"({"tokenizer_class": "Qwen2Tokenizer"})");
  test::write_text(root + "/scheduler/scheduler_config.json", R"({"_class_name": "FlowMatchEulerDiscreteScheduler", "shift": 1.0})");
}

}  // namespace

TEST(Convert, DiffusersFolderToH5ThenInspect) {
  TempDir dir;
  write_pipeline(dir / "pipe");
  auto r = test::run(test::exe() + " convert --from " + (dir / "pipe") + " --to " + (dir / "out.h5"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("5/5 tensors"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("2 skipped"), std::string::npos) << r.output;  // visual.* and lm_head

  WeightStore s = WeightStore::open(dir / "out.h5");
  EXPECT_EQ(s.model_name(), "test/qwen-mini");
  EXPECT_EQ(s.components(), (std::vector<std::string>{"scheduler", "text_encoder", "tokenizer", "transformer", "vae"}));
  Component te = s.component("text_encoder");
  EXPECT_EQ(te.tensor_names(), (std::vector<std::string>{"model.embed_tokens.weight", "model.norm.weight"}));
  EXPECT_EQ(te.tensor_info("model.embed_tokens.weight").dtype, DType::BF16);  // --dtype keep
  Tensor norm = te.tensor("model.norm.weight").to_f32();
  EXPECT_EQ(norm.data<float>()[1], 2.0f);
  Tensor w = s.component("transformer").tensor("img_in.weight");
  std::vector<float> expected = test::random_floats(8, 1);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(w.data<float>()[i], expected[static_cast<size_t>(i)]);
  Tensor f16 = s.component("vae").tensor("decoder.conv_in.bias").to_f32();
  EXPECT_EQ(f16.data<float>()[0], 1.0f);
  EXPECT_EQ(f16.data<float>()[1], -2.0f);
  EXPECT_EQ(f16.data<float>()[2], 0.5f);
  EXPECT_EQ(s.component("vae").config().get_doubles("latents_std"), (std::vector<double>{1.5, 2.5}));
  EXPECT_EQ(s.component("tokenizer").file_bytes("vocab.json"), R"({"a": 0})");
  EXPECT_EQ(s.component("scheduler").config().get_double("shift"), 1.0);
  EXPECT_EQ(s.root_int("prompt_template_encode_start_idx"), 34);

  auto inspect = test::run(test::exe() + " inspect " + (dir / "out.h5") + " --tensors");
  ASSERT_EQ(inspect.status, 0) << inspect.output;
  for (const char* needle : {"model_name: test/qwen-mini", "[text_encoder]", "tensors: 2, parameters: 12",
                             "model.embed_tokens.weight bf16[5, 2]", "img_in.weight f32[4, 2]", "file merges.txt",
                             "total parameters: 27", "GPU memory for generate"})
    EXPECT_NE(inspect.output.find(needle), std::string::npos) << needle << "\n" << inspect.output;
}

TEST(Convert, DtypeBf16RoundsEveryTensor) {
  TempDir dir;
  write_pipeline(dir / "pipe");
  auto r = test::run(test::exe() + " convert --from " + (dir / "pipe") + " --to " + (dir / "bf16.h5") + " --dtype bf16");
  ASSERT_EQ(r.status, 0) << r.output;
  WeightStore s = WeightStore::open(dir / "bf16.h5");
  Component t = s.component("transformer");
  EXPECT_EQ(t.tensor_info("img_in.weight").dtype, DType::BF16);
  Tensor w = t.tensor("img_in.weight").to_f32();
  std::vector<float> original = test::random_floats(8, 1);
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(w.data<float>()[i], bf16_to_f32(f32_to_bf16(original[static_cast<size_t>(i)])));
}

TEST(Convert, BadInputFailsBeforeWritingAnything) {
  TempDir dir;
  write_pipeline(dir / "pipe");
  // A corrupt safetensors header in the last component: the error comes before any output.
  test::write_text(dir / "pipe/vae/diffusion_pytorch_model.safetensors", std::string("\x10\0\0\0\0\0\0\0{broken", 15));
  auto r = test::run(test::exe() + " convert --from " + (dir / "pipe") + " --to " + (dir / "out.h5"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("diffusion_pytorch_model.safetensors: header length 16 exceeds the file size"),
            std::string::npos)
      << r.output;
  for (const auto& e : std::filesystem::directory_iterator(dir.path()))
    EXPECT_EQ(e.path().filename(), "pipe") << "left behind: " << e.path();

  std::filesystem::remove(dir / "pipe/model_index.json");
  r = test::run(test::exe() + " convert --from " + (dir / "pipe") + " --to " + (dir / "out.h5"));
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("model_index.json: missing"), std::string::npos) << r.output;
  r = test::run(test::exe() + " convert --from " + (dir / "pipe"));
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("--to"), std::string::npos) << r.output;

  // An output that cannot be written is refused before the conversion, not at its end.
  write_pipeline(dir / "pipe");
  std::filesystem::create_directories(dir / "a-folder");
  r = test::run(test::exe() + " convert --from " + (dir / "pipe") + " --to " + (dir / "a-folder"));
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("a-folder: is a folder; name the file to write in it"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("converting"), std::string::npos) << r.output;
  r = test::run(test::exe() + " convert --from " + (dir / "pipe") + " --to " + (dir / "missing/out.h5"));
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("the folder " + (dir / "missing") + " does not exist"), std::string::npos) << r.output;
  r = test::run(test::exe() + " make-tiny --out " + (dir / "a-folder"));
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("is a folder"), std::string::npos) << r.output;
}

TEST(MakeTiny, DeterministicPerSeed) {
  TempDir dir;
  for (const char* name : {"a.h5", "b.h5"})
    ASSERT_EQ(test::run(test::exe() + " make-tiny --seed 7 --out " + (dir / name)).status, 0);
  ASSERT_EQ(test::run(test::exe() + " make-tiny --seed 8 --out " + (dir / "c.h5")).status, 0);
  EXPECT_EQ(test::read_text(dir / "a.h5"), test::read_text(dir / "b.h5"));  // byte for byte
  WeightStore a = WeightStore::open(dir / "a.h5"), c = WeightStore::open(dir / "c.h5");
  EXPECT_NE(a.checksum(), c.checksum());
  EXPECT_EQ(a.root_string("checksum.tokenizer"), c.root_string("checksum.tokenizer"));
  EXPECT_EQ(a.component("transformer").config().get_int("num_layers"), 2);
  EXPECT_EQ(a.component("tokenizer").file_bytes("merges.txt"),
            test::read_text(std::string(DITBATCH_SOURCE_DIR) + "/weights/tokenizer/merges.txt"));
}
