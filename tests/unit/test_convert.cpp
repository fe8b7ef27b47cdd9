// `ditbatch convert` on the tiny pipeline diffusers saved, laid out as the real one ships
// (sharded, mixed dtypes), then `inspect`; its checks before any work; and `make-tiny`, which
// must be deterministic.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <map>

#include "convert/convert.h"
#include "cpu/cpu_backend.h"
#include "io/diffusers_export.h"
#include "io/h5.h"
#include "io/safetensors.h"
#include "io/weight_store.h"
#include "model/qwen_image_21/constants.h"
#include "model/qwen_image_constants.h"
#include "model/qwen_image_edit_constants.h"
#include "model/qwen_vl_vision.h"
#include "model/scheduler.h"
#include "model/vae_encoder.h"
#include "golden.h"
#include "pipeline/image_model.h"
#include "test_util.h"

using namespace ditbatch;
using test::TempDir;

namespace {

namespace fs = std::filesystem;

std::string bf16_bytes(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  convert_from_f32(v.data(), h.data(), DType::BF16, v.size());
  return std::string(reinterpret_cast<const char*>(h.data()), h.size() * 2);
}

// A safetensors file's tensors as f32 values by name.
std::map<std::string, std::vector<float>> read_safetensors(const std::string& path) {
  auto file = SafetensorsFile::open(path);
  std::map<std::string, std::vector<float>> out;
  for (const auto& e : file->entries()) {
    std::vector<float> v(static_cast<size_t>(shape_numel(e.shape)));
    convert_to_f32(file->data(e), e.dtype, v.data(), v.size());
    out[e.name] = std::move(v);
  }
  return out;
}

std::vector<float> values(const Tensor& t) {
  const Tensor f = t.to_f32();
  return std::vector<float>(f.data<float>(), f.data<float>() + f.numel());
}

std::string dtype_tag(DType t) { return t == DType::BF16 ? "BF16" : t == DType::F16 ? "F16" : "F32"; }

std::string stored_bytes(const std::vector<float>& v, DType t) {
  if (t == DType::F32) return test::f32_bytes(v);
  std::string b(v.size() * 2, '\0');
  convert_from_f32(v.data(), b.data(), t, v.size());
  return b;
}

// Writes the tensors of `file` (a safetensors file) again, each through `edit`, which may
// rename it, change its dtype or shape, or drop it (empty name).
void rewrite_safetensors(const std::string& path,
                         const std::function<void(std::string& name, DType& dtype, Shape& shape)>& edit) {
  auto file = SafetensorsFile::open(path);
  std::vector<test::StTensor> tensors;
  for (const auto& e : file->entries()) {
    std::string name = e.name;
    DType dtype = e.dtype;
    Shape shape = e.shape;
    edit(name, dtype, shape);
    if (name.empty()) continue;
    std::vector<float> v(static_cast<size_t>(shape_numel(e.shape)));
    convert_to_f32(file->data(e), e.dtype, v.data(), v.size());
    v.resize(static_cast<size_t>(shape_numel(shape)), 0.5f);
    tensors.push_back({name, dtype_tag(dtype), shape, stored_bytes(v, dtype)});
  }
  file.reset();
  test::write_text(path, test::safetensors_bytes(tensors));
}

// The tiny pipeline diffusers saved (tests/data/golden/tiny-pipeline), laid out as the real
// model ships: the text encoder in bf16, in two shards with an index (its vision tower and LM
// head included), and one VAE tensor in f16.
void write_pipeline(const std::string& root) {
  fs::remove_all(root);
  fs::copy(test::golden("tiny-pipeline"), root, fs::copy_options::recursive);
  const std::string te = root + "/text_encoder";
  auto source = SafetensorsFile::open(te + "/model.safetensors");
  std::vector<test::StTensor> shards[2];
  nlohmann::json weight_map = nlohmann::json::object();
  for (const auto& e : source->entries()) {
    std::vector<float> v(static_cast<size_t>(shape_numel(e.shape)));
    convert_to_f32(source->data(e), e.dtype, v.data(), v.size());
    const int shard = e.name < "model.language_model.layers.1" ? 0 : 1;
    shards[shard].push_back({e.name, "BF16", e.shape, bf16_bytes(v)});
    weight_map[e.name] = fmt::format("model-0000{}-of-00002.safetensors", shard + 1);
  }
  source.reset();
  fs::remove(te + "/model.safetensors");
  for (int i = 0; i < 2; ++i)
    test::write_text(te + fmt::format("/model-0000{}-of-00002.safetensors", i + 1), test::safetensors_bytes(shards[i]));
  test::write_text(te + "/model.safetensors.index.json",
                   nlohmann::json{{"metadata", nlohmann::json::object()}, {"weight_map", weight_map}}.dump());
  rewrite_safetensors(root + "/vae/diffusion_pytorch_model.safetensors", [](std::string& name, DType& dtype, Shape&) {
    if (name == "decoder.conv_in.bias") dtype = DType::F16;
  });
}

}  // namespace

TEST(Convert, DiffusersFolderToH5ThenInspect) {
  TempDir dir;
  write_pipeline(dir / "pipe");
  auto te_source = read_safetensors(dir / "pipe/text_encoder/model-00001-of-00002.safetensors");
  te_source.merge(read_safetensors(dir / "pipe/text_encoder/model-00002-of-00002.safetensors"));
  const auto dit_source = read_safetensors(dir / "pipe/transformer/diffusion_pytorch_model.safetensors");
  const auto vae_source = read_safetensors(dir / "pipe/vae/diffusion_pytorch_model.safetensors");
  std::vector<std::string> te_kept;
  int64_t unused = 0;
  for (const auto& [name, values] : te_source) {
    if (is_unused_text_encoder_tensor(name)) ++unused;
    else te_kept.push_back(name);
  }
  ASSERT_GT(unused, 0) << "the diffusers folder should carry the vision tower";
  const int64_t converted = static_cast<int64_t>(te_kept.size() + dit_source.size() + vae_source.size());

  auto r = test::run(test::exe() + " convert --from " + (dir / "pipe") + " --to " + (dir / "out.h5"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find(fmt::format("{0}/{0} tensors", converted)), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(fmt::format("{} skipped", unused)), std::string::npos) << r.output;

  WeightStore s = WeightStore::open(dir / "out.h5");
  EXPECT_EQ(s.model_name(), "pipe");  // no _name_or_path in model_index.json: the folder's name
  EXPECT_EQ(s.components(), (std::vector<std::string>{"scheduler", "text_encoder", "tokenizer", "transformer", "vae"}));
  Component te = s.component("text_encoder");
  EXPECT_EQ(te.tensor_names(), te_kept);
  // --dtype keep: every tensor as stored, value for value
  for (const std::string& name : {te_kept.front(), te_kept.back()}) {
    EXPECT_EQ(te.tensor_info(name).dtype, DType::BF16) << name;
    EXPECT_EQ(values(te.tensor(name)), te_source.at(name)) << name;
  }
  EXPECT_EQ(s.component("transformer").tensor_info("img_in.weight").dtype, DType::F32);
  EXPECT_EQ(values(s.component("transformer").tensor("img_in.weight")), dit_source.at("img_in.weight"));
  Component vae = s.component("vae");
  EXPECT_EQ(vae.tensor_info("decoder.conv_in.bias").dtype, DType::F16);
  EXPECT_EQ(values(vae.tensor("decoder.conv_in.bias")), vae_source.at("decoder.conv_in.bias"));
  EXPECT_EQ(vae.config().get_doubles("latents_std").size(), 16u);
  EXPECT_EQ(s.component("tokenizer").file_bytes("merges.txt"), test::read_text(dir / "pipe/tokenizer/merges.txt"));
  EXPECT_EQ(s.component("scheduler").config().get_string("_class_name"), "FlowMatchEulerDiscreteScheduler");
  EXPECT_EQ(s.root_int("prompt_template_encode_start_idx"), 34);

  auto inspect = test::run(test::exe() + " inspect " + (dir / "out.h5") + " --tensors");
  ASSERT_EQ(inspect.status, 0) << inspect.output;
  const Shape img_in = s.component("transformer").tensor_info("img_in.weight").shape;
  for (const std::string& needle :
       {std::string("model_name: pipe"), std::string("[text_encoder]"),
        fmt::format("tensors: {}", te_kept.size()), fmt::format("{} bf16{}", te_kept.front(), shape_str(te.tensor_info(te_kept.front()).shape)),
        fmt::format("img_in.weight f32{}", shape_str(img_in)), std::string("file merges.txt"),
        std::string("GPU memory for generate")})
    EXPECT_NE(inspect.output.find(needle), std::string::npos) << needle << "\n" << inspect.output;
}

// What `bench convert` converts: a weight file written back as a diffusers folder. Its
// tensors are the bytes diffusers saved (sharded, mixed dtypes, in the folder convert read),
// and converting it again gives a file of the same checksum.
TEST(Convert, AFileWrittenBackAsADiffusersFolderConvertsToTheSameChecksum) {
  TempDir dir;
  write_pipeline(dir / "pipe");
  ConvertOptions first{.from = dir / "pipe", .to = dir / "first.h5"};
  convert_diffusers(first, Log::quiet());
  const WeightStore store = WeightStore::open(dir / "first.h5");
  const int64_t bytes = export_diffusers_folder(store, dir / "back");
  std::map<std::string, std::string> saved;  // name -> the bytes diffusers (or write_pipeline) stored
  int64_t saved_bytes = 0;
  for (const std::string f : {"text_encoder/model-00001-of-00002.safetensors",
                               "text_encoder/model-00002-of-00002.safetensors",
                               "transformer/diffusion_pytorch_model.safetensors", "vae/diffusion_pytorch_model.safetensors"}) {
    auto file = SafetensorsFile::open(dir / "pipe/" + f);
    for (const auto& e : file->entries()) {
      if (is_unused_text_encoder_tensor(e.name)) continue;
      saved[fs::path(f).parent_path().string() + "/" + e.name] =
          std::string(static_cast<const char*>(file->data(e)), e.end - e.begin);
      saved_bytes += static_cast<int64_t>(e.end - e.begin);
    }
  }
  EXPECT_EQ(bytes, saved_bytes);
  size_t compared = 0;
  for (const std::string f : {"text_encoder/model.safetensors", "transformer/diffusion_pytorch_model.safetensors",
                               "vae/diffusion_pytorch_model.safetensors"}) {
    auto file = SafetensorsFile::open(dir / "back/" + f);
    for (const auto& e : file->entries()) {
      const std::string key = fs::path(f).parent_path().string() + "/" + e.name;
      ASSERT_TRUE(saved.count(key)) << key;
      EXPECT_EQ(std::string(static_cast<const char*>(file->data(e)), e.end - e.begin), saved.at(key)) << key;
      ++compared;
    }
  }
  EXPECT_EQ(compared, saved.size());
  EXPECT_EQ(test::read_text(dir / "back/tokenizer/vocab.json"), test::read_text(dir / "pipe/tokenizer/vocab.json"));
  convert_diffusers({.from = dir / "back", .to = dir / "again.h5"}, Log::quiet());
  EXPECT_EQ(WeightStore::open(dir / "again.h5").checksum(), store.checksum());
  // A folder that exists is never written into.
  EXPECT_NE(test::input_error_of([&] { export_diffusers_folder(store, dir / "back"); }).find("exists"),
            std::string::npos);
}

TEST(Convert, DtypeBf16RoundsEveryTensor) {
  TempDir dir;
  write_pipeline(dir / "pipe");
  auto r = test::run(test::exe() + " convert --from " + (dir / "pipe") + " --to " + (dir / "bf16.h5") + " --dtype bf16");
  ASSERT_EQ(r.status, 0) << r.output;
  WeightStore s = WeightStore::open(dir / "bf16.h5");
  Component t = s.component("transformer");
  EXPECT_EQ(t.tensor_info("img_in.weight").dtype, DType::BF16);
  const std::vector<float> w = values(t.tensor("img_in.weight"));
  const auto original = read_safetensors(dir / "pipe/transformer/diffusion_pytorch_model.safetensors").at("img_in.weight");
  ASSERT_EQ(w.size(), original.size());
  for (size_t i = 0; i < w.size(); ++i) EXPECT_EQ(w[i], bf16_to_f32(f32_to_bf16(original[i]))) << i;
  EXPECT_EQ(s.component("vae").tensor_info("decoder.conv_in.bias").dtype, DType::BF16);  // from f16
}

// A tensor the models read that is missing or has another shape than the config implies (a
// truncated download, another model's folder) fails in seconds, before anything is written,
// not after converting 57 GB or when generate loads the file.
TEST(Convert, EveryTensorTheModelsReadIsCheckedFirst) {
  TempDir dir;
  auto convert = [&](const std::string& pipe) {
    return test::run(test::exe() + " convert --from " + (dir / pipe) + " --to " + (dir / "out.h5"));
  };
  auto nothing_written = [&] {
    for (const auto& e : fs::directory_iterator(dir.path()))
      if (e.path().filename().string().find("out.h5") != std::string::npos) return false;
    return true;
  };
  write_pipeline(dir / "missing");
  rewrite_safetensors(dir / "missing/vae/diffusion_pytorch_model.safetensors", [](std::string& name, DType&, Shape&) {
    if (name == "decoder.conv_in.bias" || name == "decoder.up_blocks.0.resnets.0.conv1.weight") name.clear();
  });
  auto r = convert("missing");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("missing/vae: 2 of the"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("tensors the model reads are missing: decoder.conv_in.bias, "
                          "decoder.up_blocks.0.resnets.0.conv1.weight"),
            std::string::npos)
      << r.output;
  EXPECT_TRUE(nothing_written());

  write_pipeline(dir / "shape");
  rewrite_safetensors(dir / "shape/transformer/diffusion_pytorch_model.safetensors", [](std::string& name, DType&, Shape& shape) {
    if (name == "img_in.weight") shape[0] += 1;
  });
  r = convert("shape");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("tensor 'img_in.weight' has shape"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("but transformer/config.json makes the model expect"), std::string::npos) << r.output;
  EXPECT_TRUE(nothing_written());

  // A text encoder under names the loader does not know (another architecture).
  write_pipeline(dir / "names");
  for (const char* shard : {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"})
    rewrite_safetensors(dir / ("names/text_encoder/" + std::string(shard)), [](std::string& name, DType&, Shape&) {
      if (name.find("embed_tokens") != std::string::npos) name = "transformer.wte.weight";
    });
  nlohmann::json index = nlohmann::json::parse(test::read_text(dir / "names/text_encoder/model.safetensors.index.json"));
  nlohmann::json renamed = nlohmann::json::object();
  for (auto& [name, shard] : index["weight_map"].items())
    renamed[name.find("embed_tokens") != std::string::npos ? "transformer.wte.weight" : name] = shard;
  index["weight_map"] = renamed;
  test::write_text(dir / "names/text_encoder/model.safetensors.index.json", index.dump());
  r = convert("names");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("names/text_encoder: no embed_tokens.weight"), std::string::npos) << r.output;
  EXPECT_TRUE(nothing_written());
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

  // A family convert does not read: refused naming its class and what convert reads.
  write_pipeline(dir / "pipe");
  test::write_text(dir / "pipe/model_index.json",
                   R"({"_class_name": "QwenImageLayeredPipeline", "_diffusers_version": "0.42.1"})");
  r = test::run(test::exe() + " convert --from " + (dir / "pipe") + " --to " + (dir / "out.h5"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("model_index.json: _class_name 'QwenImageLayeredPipeline': ditbatch converts "
                          "QwenImagePipeline (Qwen-Image, Qwen-Image-2512), QwenImage21Pipeline (Qwen-Image-2.1), "
                          "QwenImageEditPipeline (Qwen-Image-Edit), QwenImageEditPlusPipeline (Qwen-Image-Edit-2509, "
                          "Qwen-Image-Edit-2511) folders"),
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

namespace {

// Sets element `at` of tensor `name` in a safetensors file to `value`, keeping every dtype.
void poke(const std::string& path, const std::string& name, size_t at, float value) {
  bool found = false;
  auto file = SafetensorsFile::open(path);
  std::vector<test::StTensor> tensors;
  for (const auto& e : file->entries()) {
    std::vector<float> v(static_cast<size_t>(shape_numel(e.shape)));
    convert_to_f32(file->data(e), e.dtype, v.data(), v.size());
    if (e.name == name) v.at(at) = value, found = true;
    tensors.push_back({e.name, dtype_tag(e.dtype), e.shape, stored_bytes(v, e.dtype)});
  }
  file.reset();
  ASSERT_TRUE(found) << name;
  test::write_text(path, test::safetensors_bytes(tensors));
}

int64_t numel_of(const std::string& path, const std::string& name) {
  auto file = SafetensorsFile::open(path);
  for (const auto& e : file->entries())
    if (e.name == name) return shape_numel(e.shape);
  return -1;
}

}  // namespace

// A NaN or Inf weight makes every image NaN: convert refuses it naming the file, tensor and
// element (as a LoRA's are), in any stored type, and leaves nothing behind. So does a value
// that --dtype f16 cannot hold, a model_index.json that is no object, and a shard index that
// names itself as a shard (it was read as a safetensors header: "header length 70178...").
TEST(Convert, NonFiniteWeightsAndBrokenIndexesAreRefusedByName) {
  TempDir dir;
  auto convert = [&](const std::string& extra = "") {
    auto r = test::run(fmt::format("{} convert --from {} --to {} {}", test::exe(), dir / "pipe", dir / "out.h5", extra));
    EXPECT_FALSE(fs::exists(dir / "out.h5"));
    for (const auto& e : fs::directory_iterator(dir.path())) EXPECT_EQ(e.path().filename(), "pipe") << e.path();
    return r;
  };
  struct Case {
    std::string file, tensor, dtype;
    float value;
  };
  const std::vector<Case> cases = {
      {"vae/diffusion_pytorch_model.safetensors", "decoder.conv_in.bias", "F16", std::nanf("")},
      {"text_encoder/model-00002-of-00002.safetensors", "model.norm.weight", "BF16", -INFINITY},
      {"transformer/diffusion_pytorch_model.safetensors", "proj_out.bias", "F32", INFINITY}};
  for (const Case& c : cases) {
    write_pipeline(dir / "pipe");
    const std::string path = dir / ("pipe/" + c.file);
    poke(path, c.tensor, 3, c.value);
    const auto r = convert();
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_NE(r.output.find(fmt::format("{}: tensor '{}' of the {} holds a NaN or infinite value at element 3 of {}",
                                        path, c.tensor, c.file.substr(0, c.file.find('/')), numel_of(path, c.tensor))),
              std::string::npos)
        << c.dtype << ": " << r.output;
  }
  write_pipeline(dir / "pipe");
  poke(dir / "pipe/transformer/diffusion_pytorch_model.safetensors", "proj_out.bias", 2, 1e6f);
  auto r = convert("--dtype f16");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("tensor 'proj_out.bias' of the transformer: element 2 (1000000) is past the range of "
                          "--dtype f16"),
            std::string::npos)
      << r.output;

  write_pipeline(dir / "pipe");
  test::write_text(dir / "pipe/model_index.json", "[\"QwenImagePipeline\"]");
  r = convert();
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find((dir / "pipe") + "/model_index.json: is array [\"QwenImagePipeline\"], not the JSON object "
                          "of a diffusers pipeline folder"),
            std::string::npos)
      << r.output;

  write_pipeline(dir / "pipe");
  const std::string index = dir / "pipe/text_encoder/model.safetensors.index.json";
  nlohmann::json j = nlohmann::json::parse(test::read_text(index));
  j["weight_map"]["model.norm.weight"] = "model.safetensors.index.json";
  test::write_text(index, j.dump());
  r = convert();
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find(index + ": weight_map entry 'model.norm.weight' names "
                                  "\"model.safetensors.index.json\", which is not a .safetensors file"),
            std::string::npos)
      << r.output;
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

// A QwenImage21Pipeline folder as diffusers saves it (tests/data/golden/tiny-pipeline-21, the
// tokenizer in processor/) converts into a file whose components the 2.1 models load and that
// makes diffusers' image through the model seam (ImageModel::open, its generator), with the
// template and the drop index the file records, against pipeline_21.h5. Its components are
// checked against the 2.1 models (a Qwen-Image VAE in a 2.1 folder is refused, naming the tensors).
TEST(Convert, AQwenImage21FolderConvertsIntoWhatItsModelsLoad) {
  TempDir dir;
  fs::copy(test::golden("tiny-pipeline-21"), dir / "pipe", fs::copy_options::recursive);
  auto r = test::run(test::exe() + " convert --from " + (dir / "pipe") + " --to " + (dir / "v21.h5"));
  ASSERT_EQ(r.status, 0) << r.output;
  const WeightStore store = WeightStore::open(dir / "v21.h5");
  EXPECT_EQ(store.root_string("pipeline_class"), "QwenImage21Pipeline");
  EXPECT_EQ(store.root_string("prompt_template"), kQwenImage21PromptTemplate);
  const h5::File te_golden = h5::File::open_read(test::golden("text_encoder_21.h5"));
  EXPECT_EQ(store.root_int("prompt_template_encode_start_idx"), te_golden.root().attr_int("drop_idx"));
  EXPECT_FALSE(store.root().has_attr("sample_sigmas"));  // null in the base checkpoint

  // Through the model seam, as generate runs it.
  CpuBackend be;
  const std::unique_ptr<ImageModel> model = ImageModel::open(store);
  EXPECT_EQ(model->family(), "Qwen-Image-2.1");
  const Log log;  // outlives the generator, which keeps a reference
  const std::unique_ptr<ImageGenerator> pipeline = model->make_generator(be, log, 0, nullptr);
  const h5::File golden = h5::File::open_read(test::golden("pipeline_21.h5"));
  const h5::Group g = golden.root().open_group("cases").open_group("00");  // no CFG, 32x64
  ImageJob job;
  job.prompt = g.attr_string("prompt");
  job.width = g.attr_int("width");
  job.height = g.attr_int("height");
  job.steps = g.attr_int("steps");
  job.seed = static_cast<uint64_t>(g.attr_int("seed"));
  StageTimes times;
  const GeneratedImage image = pipeline->generate(job, pipeline->encode_prompt(job.prompt), nullptr, nullptr, times);
  ASSERT_TRUE(image.ok) << image.error;
  EXPECT_LE(test::nmse(image.latents, g.read_tensor("latents")), 1e-9);
  EXPECT_EQ(image.channels, 4);
  const Tensor expected = g.read_tensor("image_uint8");  // [H, W, 4]
  ASSERT_EQ(std::ssize(image.pixels), expected.numel());
  EXPECT_LE(test::rgb_agreement(image.pixels.data(), expected.numel(), expected).max_diff, 1);

  // Turbo's sigma grid is kept as model_index.json gives it.
  nlohmann::json index = nlohmann::json::parse(test::read_text(dir / "pipe/model_index.json"));
  index["sample_sigmas"] = {1.0, 0.978453, 0.414568};
  test::write_text(dir / "pipe/model_index.json", index.dump());
  r = test::run(test::exe() + " convert --from " + (dir / "pipe") + " --to " + (dir / "turbo.h5"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(nlohmann::json::parse(WeightStore::open(dir / "turbo.h5").root_string("sample_sigmas")),
            index["sample_sigmas"]);

  // A component of the other family: refused before anything is written, naming the tensors.
  fs::remove_all(dir / "pipe/vae");
  fs::copy(test::golden("tiny-pipeline/vae"), dir / "pipe/vae", fs::copy_options::recursive);
  r = test::run(test::exe() + " convert --from " + (dir / "pipe") + " --to " + (dir / "mixed.h5"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("pipe/vae/diffusion_pytorch_model.safetensors: tensor 'post_quant_conv.weight' has shape "
                          "[16, 16, 1, 1, 1], but vae/config.json makes the model expect [16, 16, 1, 1]"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir / "mixed.h5"));

}

// Only the families whose model encodes input images (the Edit pipelines) read the VAE's
// encoder: a Qwen-Image folder without it still converts, and make-tiny's Qwen-Image file has
// none of its tensors.
TEST(Convert, TheVaeEncoderIsRequiredOnlyWhereTheFamilyReadsIt) {
  EXPECT_FALSE(keeps_vae_encoder("QwenImagePipeline"));
  EXPECT_FALSE(keeps_vae_encoder("QwenImage21Pipeline"));
  EXPECT_FALSE(keeps_vae_encoder("NoSuchPipeline"));
  EXPECT_TRUE(keeps_vae_encoder("QwenImageEditPipeline"));
  EXPECT_TRUE(keeps_vae_encoder("QwenImageEditPlusPipeline"));
  TempDir dir;
  write_pipeline(dir / "decoder-only");
  const std::string vae = dir / "decoder-only/vae";
  int dropped = 0;
  rewrite_safetensors(vae + "/diffusion_pytorch_model.safetensors", [&](std::string& name, DType&, Shape&) {
    if (name.starts_with("encoder.") || name.starts_with("quant_conv.")) {
      name.clear();
      ++dropped;
    }
  });
  EXPECT_EQ(dropped, 86);
  const std::string config = test::read_text(vae + "/config.json");
  EXPECT_NO_THROW(check_component_tensors("vae", vae + "/config.json", config, SafetensorsSet::open_dir(vae),
                                          dir / "decoder-only", "QwenImagePipeline"));

  ASSERT_EQ(test::run(test::exe() + " make-tiny --out " + (dir / "tiny.h5")).status, 0);
  const std::vector<std::string> names = WeightStore::open(dir / "tiny.h5").component("vae").tensor_names();
  EXPECT_GT(names.size(), 50u);
  for (const std::string& name : names)
    EXPECT_FALSE(name.starts_with("encoder.") || name.starts_with("quant_conv.")) << name;
  // The encoder from such a file is refused naming its first tensor, not run on garbage.
  CpuBackend be;
  const WeightStore store = WeightStore::open(dir / "tiny.h5");
  try {
    VaeEncoder encoder(be, store.component("vae"));
    ADD_FAILURE() << "a VAE without encoder tensors loaded as an encoder";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("encoder.conv_in.weight"), std::string::npos) << e.what();
  }
}

// An Edit folder (QwenImageEditPlusPipeline, the text encoder's tower under the newer
// model.visual.* names) keeps the vision tower under its checkpoint names (visual.*), the image
// processor's preprocessor_config.json verbatim, and the Edit template and drop index; a
// text-to-image folder of the same tensors keeps neither (DiffusersFolderToH5ThenInspect).
TEST(Convert, AnEditFolderKeepsTheVisionTowerAndTheProcessorConfig) {
  TempDir dir;
  test::write_edit_pipeline(dir / "edit", "QwenImageEditPlusPipeline");
  const std::string te_file = dir / "edit/text_encoder/model.safetensors";
  const auto source = read_safetensors(te_file);
  rewrite_safetensors(te_file, [](std::string& name, DType&, Shape&) {
    if (name.starts_with("visual.")) name = "model." + name;
  });
  nlohmann::json transformer = nlohmann::json::parse(test::read_text(dir / "edit/transformer/config.json"));
  // Carried in the stored config (Edit-2511 sets it true; this folder stands for 2509).
  transformer["zero_cond_t"] = false;
  test::write_text(dir / "edit/transformer/config.json", transformer.dump(2));
  auto r = test::run(test::exe() + " convert --from " + (dir / "edit") + " --to " + (dir / "edit.h5"));
  ASSERT_EQ(r.status, 0) << r.output;
  const WeightStore store = WeightStore::open(dir / "edit.h5");
  EXPECT_EQ(store.root_string("pipeline_class"), "QwenImageEditPlusPipeline");
  EXPECT_EQ(store.root_string("prompt_template"), kQwenImageEditPlusPromptTemplate);
  EXPECT_EQ(store.root_int("prompt_template_encode_start_idx"), 64);
  EXPECT_FALSE(store.component("transformer").config().get_bool("zero_cond_t"));
  EXPECT_EQ(store.component("transformer").group().attr_string("config_json"),
            test::read_text(dir / "edit/transformer/config.json"));
  const Component te = store.component("text_encoder");
  int64_t visual = 0;
  for (const auto& [name, values_of_source] : source) {
    if (name.starts_with("lm_head.")) {
      EXPECT_FALSE(te.has_tensor(name)) << name;
    } else if (name.starts_with("visual.")) {
      ASSERT_TRUE(te.has_tensor(name)) << name;
      EXPECT_EQ(values(te.tensor(name)), values_of_source) << name;
      ++visual;
    }
  }
  EXPECT_EQ(visual, 18);  // one block of 12, patch_embed, ln_q and the merger's two linears
  EXPECT_EQ(VisionConfig::from(te.config()).hidden_size, 32);
  const Component processor = store.component("processor");
  EXPECT_EQ(processor.group().attr_string("config_json"), test::read_text(dir / "edit/processor/preprocessor_config.json"));
  EXPECT_EQ(processor.config().get_int("max_pixels"), 12845056);

  // inspect shows the file and what generate will ask of a GPU; the model seam opens it as Edit-2509.
  auto inspect = test::run(test::exe() + " inspect " + (dir / "edit.h5"));
  EXPECT_EQ(inspect.status, 0) << inspect.output;
  EXPECT_NE(inspect.output.find("QwenImageEditPlusPipeline"), std::string::npos) << inspect.output;
  EXPECT_NE(inspect.output.find("[processor]"), std::string::npos) << inspect.output;
  EXPECT_EQ(inspect.output.find("no estimate"), std::string::npos) << inspect.output;
  EXPECT_EQ(ImageModel::open(store)->family(), "Qwen-Image-Edit-2509");
}

TEST(Convert, AnEditFolderWithoutItsProcessorConfigOrVisionTowerIsRefused) {
  TempDir dir;
  test::write_edit_pipeline(dir / "edit", "QwenImageEditPipeline");
  fs::remove(dir / "edit/processor/preprocessor_config.json");
  auto r = test::run(test::exe() + " convert --from " + (dir / "edit") + " --to " + (dir / "edit.h5"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("edit/processor/preprocessor_config.json: missing"), std::string::npos) << r.output;

  test::write_edit_pipeline(dir / "edit", "QwenImageEditPipeline");
  rewrite_safetensors(dir / "edit/text_encoder/model.safetensors", [](std::string& name, DType&, Shape&) {
    if (name.starts_with("visual.")) name.clear();
  });
  r = test::run(test::exe() + " convert --from " + (dir / "edit") + " --to " + (dir / "edit.h5"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("no visual.patch_embed.proj.weight"), std::string::npos) << r.output;

  // A tower of another shape than vision_config says: named with the config values.
  test::write_edit_pipeline(dir / "edit", "QwenImageEditPipeline");
  rewrite_safetensors(dir / "edit/text_encoder/model.safetensors", [](std::string& name, DType&, Shape& shape) {
    if (name == "visual.merger.mlp.2.weight") shape = {48, 128};
  });
  r = test::run(test::exe() + " convert --from " + (dir / "edit") + " --to " + (dir / "edit.h5"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("tensor 'visual.merger.mlp.2.weight' has shape [48, 128], but text_encoder/config.json "
                          "makes the model expect [64, 128]"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir / "edit.h5"));
}
