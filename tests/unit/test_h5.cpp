// The HDF5 layer and the weight store: round trips of every dtype, attributes, clear errors.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/fs.h"
#include "io/weight_store.h"
#include "test_util.h"

using namespace ditbatch;
using test::TempDir;

TEST(H5, RoundTripEveryDtype) {
  TempDir dir;
  const std::string path = dir / "t.h5";
  std::vector<float> values = test::random_floats(24, 7, 100.0f);
  std::vector<uint16_t> bf16(24), f16(24);
  convert_from_f32(values.data(), bf16.data(), DType::BF16, 24);
  convert_from_f32(values.data(), f16.data(), DType::F16, 24);
  std::vector<int32_t> i32 = {-2147483647 - 1, -1, 0, 1, 2147483647, 42};
  std::vector<int64_t> i64 = {INT64_MIN, -1, 0, 1, INT64_MAX, 1234567890123};
  std::string u8 = "bytes\0with nul", empty;
  {
    h5::File f = h5::File::create(path);
    h5::Group g = f.root().create_group("g");
    g.write_dataset("f32", {2, 3, 4}, DType::F32, values.data());
    g.write_dataset("bf16", {4, 6}, DType::BF16, bf16.data());
    g.write_dataset("f16", {24}, DType::F16, f16.data());
    g.write_dataset("i32", {6}, DType::I32, i32.data());
    g.write_dataset("i64", {2, 3}, DType::I64, i64.data());
    g.write_bytes("u8", u8);
    g.write_bytes("empty", empty);
    g.write_dataset("scalar", {}, DType::F32, values.data());
    g.set_attr("s", std::string("héllo"));
    g.set_attr("i", int64_t{-5});
    g.set_attr("d", 0.25);
    g.set_attr("is", std::vector<int64_t>{1, 2, 3});
    g.set_attr("ds", std::vector<double>{0.5, -1.5});
  }
  h5::File f = h5::File::open_read(path);
  h5::Group g = f.root().open_group("g");
  EXPECT_EQ(g.members(), (std::vector<std::string>{"bf16", "empty", "f16", "f32", "i32", "i64", "scalar", "u8"}));
  auto check = [&](const std::string& name, DType dtype, const Shape& shape, const void* expected) {
    h5::DatasetInfo info = g.dataset_info(name);
    EXPECT_EQ(info.dtype, dtype) << name;
    EXPECT_EQ(info.shape, shape) << name;
    Tensor t = g.read_tensor(name);
    EXPECT_EQ(std::memcmp(t.raw(), expected, t.nbytes()), 0) << name;
  };
  check("f32", DType::F32, {2, 3, 4}, values.data());
  check("bf16", DType::BF16, {4, 6}, bf16.data());
  check("f16", DType::F16, {24}, f16.data());
  check("i32", DType::I32, {6}, i32.data());
  check("i64", DType::I64, {2, 3}, i64.data());
  check("scalar", DType::F32, {}, values.data());
  EXPECT_EQ(g.read_bytes("u8"), u8);
  EXPECT_EQ(g.read_bytes("empty"), "");
  // Conversion on read: bf16 -> f32 is exact for values that came from bf16.
  Tensor as_f32 = g.read_tensor("bf16").to_f32();
  for (int i = 0; i < 24; ++i) EXPECT_EQ(as_f32.data<float>()[i], bf16_to_f32(bf16[static_cast<size_t>(i)]));
  EXPECT_EQ(g.attr_string("s"), "héllo");
  EXPECT_EQ(g.attr_int("i"), -5);
  EXPECT_EQ(g.attr_double("d"), 0.25);
  EXPECT_EQ(g.attr_ints("is"), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(g.attr_doubles("ds"), (std::vector<double>{0.5, -1.5}));
}

TEST(H5, Bf16IsAFloatTypeToHdf5Tools) {
  // h5dump must print bf16 values as floats, not as opaque integers.
  TempDir dir;
  const std::string path = dir / "bf16.h5";
  std::vector<uint16_t> v = {f32_to_bf16(1.5f), f32_to_bf16(-2.25f)};
  h5::File::create(path).root().write_dataset("x", {2}, DType::BF16, v.data());
  auto r = test::run("h5dump -d /x " + path);
  if (r.status == 127) GTEST_SKIP() << "h5dump not installed (hdf5-tools)";
  EXPECT_NE(r.output.find("1.5, -2.25"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("floating-point"), std::string::npos) << r.output;
}

namespace {

// A minimal valid weight file: one component with one tensor.
void write_store(const std::string& path) {
  WeightWriter w(path);
  w.set_root_attr("model_name", "test");
  w.begin_component("transformer", R"({"num_layers": 2, "nested": {"k": 1.5}, "flags": [true, false]})");
  std::vector<float> v = test::random_floats(6, 1);
  w.add_tensor("transformer_blocks.0.attn.to_q.weight", {2, 3}, DType::F32, v.data());
  w.add_tensor("transformer_blocks.0.attn.to_k.weight", {2, 3}, DType::F32, v.data());
  w.end_component();
  w.finish();
}


}  // namespace

TEST(WeightStore, ConfigAndTypedAttributes) {
  TempDir dir;
  write_store(dir / "w.h5");
  WeightStore s = WeightStore::open(dir / "w.h5");
  Component c = s.component("transformer");
  EXPECT_EQ(c.config().get_int("num_layers"), 2);
  EXPECT_EQ(c.config().get_double("nested.k"), 1.5);
  EXPECT_EQ(c.config().get_ints("flags"), (std::vector<int64_t>{1, 0}));
  // The typed attributes h5ls/h5py users see:
  EXPECT_EQ(c.group().attr_int("num_layers"), 2);
  EXPECT_EQ(c.group().attr_double("nested.k"), 1.5);
  EXPECT_EQ(s.model_name(), "test");
  EXPECT_EQ(s.checksum().size(), 64u);
  EXPECT_EQ(s.root_string("checksum.transformer").size(), 64u);
}

TEST(WeightStore, ClearErrors) {
  TempDir dir;
  const std::string good = dir / "w.h5";
  write_store(good);
  EXPECT_NE(test::input_error_of([&] { WeightStore::open(dir / "missing.h5"); }).find("missing.h5: no such file"), std::string::npos);
  test::write_text(dir / "text.h5", "this is not an HDF5 file at all, just text\n");
  EXPECT_NE(test::input_error_of([&] { WeightStore::open(dir / "text.h5"); }).find("not an HDF5 file"), std::string::npos);
  // A valid HDF5 file that is not a ditbatch weight file.
  h5::File::create(dir / "plain.h5");
  EXPECT_NE(test::input_error_of([&] { WeightStore::open(dir / "plain.h5"); }).find("not a ditbatch weight file"), std::string::npos);
  {
    h5::File f = h5::File::create(dir / "future.h5");
    f.root().set_attr("format_version", int64_t{99});
  }
  EXPECT_NE(test::input_error_of([&] { WeightStore::open(dir / "future.h5"); }).find("version 99 is not supported"),
            std::string::npos);
  WeightStore s = WeightStore::open(good);
  std::string msg = test::input_error_of([&] { s.component("vae"); });
  EXPECT_NE(msg.find("missing component 'vae' (the file has: transformer)"), std::string::npos) << msg;
  Component c = s.component("transformer");
  msg = test::input_error_of([&] { c.tensor("transformer_blocks.0.attn.to_v.weight"); });
  EXPECT_NE(msg.find("missing tensor 'transformer_blocks.0.attn.to_v.weight'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("closest: transformer_blocks.0.attn.to_k.weight"), std::string::npos) << msg;
  msg = test::input_error_of([&] { c.tensor("transformer_blocks.0.attn.to_q.weight", {3, 2}, "heads 1 x dim 3"); });
  EXPECT_NE(msg.find("shape [2, 3] does not match the expected [3, 2] from the config: heads 1 x dim 3"),
            std::string::npos)
      << msg;
  msg = test::input_error_of([&] { c.config().get_int("no_such_key"); });
  EXPECT_NE(msg.find("config key 'no_such_key' is missing"), std::string::npos) << msg;
}

TEST(WeightStore, UnsupportedDtypeIsAnError) {
  TempDir dir;
  {
    WeightWriter w(dir / "w.h5");
    w.begin_component("transformer", "{}");
    std::vector<int64_t> ids = {1, 2};
    w.add_tensor("ids", {2}, DType::I64, ids.data());
    w.end_component();
    w.finish();
  }
  WeightStore s = WeightStore::open(dir / "w.h5");
  std::string msg = test::input_error_of([&] { s.component("transformer").tensor("ids"); });
  EXPECT_NE(msg.find("dtype i64, expected f32, bf16 or f16"), std::string::npos) << msg;
}

TEST(WeightStore, TruncatedFileIsAClearError) {
  TempDir dir;
  write_store(dir / "w.h5");
  std::string bytes = test::read_text(dir / "w.h5");
  for (size_t keep : {bytes.size() / 2, bytes.size() - 100, size_t{600}}) {
    test::write_text(dir / "cut.h5", bytes.substr(0, keep));
    std::string msg = test::input_error_of([&] {
      WeightStore s = WeightStore::open(dir / "cut.h5");
      Component c = s.component("transformer");
      for (const auto& n : c.tensor_names()) c.tensor(n);
    });
    EXPECT_NE(msg.find("cut.h5"), std::string::npos) << keep << ": " << msg;
    EXPECT_TRUE(msg.find("truncated") != std::string::npos || msg.find("not an HDF5") != std::string::npos)
        << keep << ": " << msg;
  }
}

TEST(WeightStore, UnfinishedWriterLeavesNothing) {
  TempDir dir;
  std::string tmp;
  {
    WeightWriter w(dir / "w.h5");
    tmp = w.temp_path();
    w.begin_component("transformer", "{}");
    EXPECT_TRUE(std::filesystem::exists(tmp));
  }  // destroyed without finish(), as after an exception
  EXPECT_FALSE(std::filesystem::exists(tmp));
  EXPECT_FALSE(std::filesystem::exists(dir / "w.h5"));
}

// Ctrl-C, scancel or a closed terminal during a conversion: the temporary file (57 GB for the
// real model) goes with the process, which still dies of the signal (the status its caller
// expects). In a child process, so the signal ends only it.
TEST(WeightStore, AWriterEndedBySignalLeavesNothing) {
  for (int signal_number : {SIGINT, SIGTERM, SIGHUP}) {
    TempDir dir;
    const std::string tmp = temp_path_for(dir / "w.h5");
    pid_t pid = fork();
    if (pid == 0) {
      // A process started in the background of a script inherits SIGINT ignored, which the
      // writer rightly leaves ignored: here the signal is the process's default one.
      signal(signal_number, SIG_DFL);
      WeightWriter w(dir / "w.h5");
      w.begin_component("transformer", "{}");
      std::vector<float> data(1 << 16, 1.0f);
      w.add_tensor("x", {1 << 16}, DType::F32, data.data());
      raise(signal_number);
      _exit(0);  // not reached
    }
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "signal " << signal_number << ": exited with " << WEXITSTATUS(status);
    EXPECT_EQ(WTERMSIG(status), signal_number);
    EXPECT_TRUE(std::filesystem::is_empty(dir.path())) << "signal " << signal_number << " left " << tmp;
  }
  // While a writer lives its handler is in place; once it is gone the process's own again.
  {
    TempDir dir;
    struct sigaction before {}, during {};
    sigaction(SIGTERM, nullptr, &before);
    {
      WeightWriter w(dir / "w.h5");
      sigaction(SIGTERM, nullptr, &during);
    }
    if (before.sa_handler != SIG_IGN) {
      EXPECT_NE(during.sa_handler, before.sa_handler);
    }
    struct sigaction after {};
    sigaction(SIGTERM, nullptr, &after);
    EXPECT_EQ(after.sa_handler, before.sa_handler);
  }
  // A signal the process ignores (nohup's SIGHUP) stays ignored: the writer carries on.
  TempDir dir;
  pid_t pid = fork();
  if (pid == 0) {
    signal(SIGHUP, SIG_IGN);
    {
      WeightWriter w(dir / "w.h5");
      w.begin_component("transformer", "{}");
      raise(SIGHUP);
      w.end_component();
      w.finish();
    }
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  EXPECT_TRUE(std::filesystem::exists(dir / "w.h5"));
}

// Temporary files of dead writers are swept; a live writer's (by pid here, or recently
// written: perhaps a writer on another host) never.
TEST(WeightStore, OrphanedTempFilesOfDeadWritersAreRemoved) {
  TempDir dir;
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  waitpid(dead, nullptr, 0);  // a pid no process has now
  const auto old = std::filesystem::file_time_type::clock::now() - std::chrono::hours(1);
  auto make = [&](const std::string& name, bool stale) {
    test::write_text(dir / name, "partial");
    if (stale) std::filesystem::last_write_time(dir / name, old);
  };
  make(fmt::format(".w.h5.tmp.{}", dead), true);              // removed
  make(fmt::format(".w.h5.tmp.{}", getpid()), true);          // alive: kept
  make(fmt::format(".w.h5.tmp.{}", dead + 100000000), false);  // recent: kept
  make(fmt::format(".other.h5.tmp.{}", dead), true);          // another file's: kept
  make(".w.h5.tmp.notapid", true);                           // not ours: kept
  const auto removed = remove_orphaned_temp_files(dir.path(), "w.h5");
  EXPECT_EQ(removed, (std::vector<std::string>{dir / fmt::format(".w.h5.tmp.{}", dead)}));
  EXPECT_FALSE(std::filesystem::exists(dir / fmt::format(".w.h5.tmp.{}", dead)));
  size_t left = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir.path())) ++left;
  EXPECT_EQ(left, 4u);
  // Without a name (generate's sweep of its output folder): every dead writer's temporary.
  make("plain.png", true);  // not a temporary: kept
  const auto all = remove_orphaned_temp_files(dir.path());
  EXPECT_EQ(all, (std::vector<std::string>{dir / fmt::format(".other.h5.tmp.{}", dead)}));
  EXPECT_TRUE(std::filesystem::exists(dir / "plain.png"));
}
