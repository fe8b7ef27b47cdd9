// Helpers shared by the tests: temporary directories, writing safetensors files, running the
// ditbatch binary, normalised error.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "selftest/random_inputs.h"

namespace ditbatch::test {

// A fresh directory under /tmp, removed with everything in it when the object dies.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "ditbatch-test-XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline void write_text(const std::string& path, const std::string& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

struct StTensor {
  std::string name;
  std::string dtype;  // "F32", "BF16", "F16"
  Shape shape;
  std::string bytes;
};

// Builds a safetensors file: 8-byte little-endian header length, JSON header, data.
inline std::string safetensors_bytes(const std::vector<StTensor>& tensors, const nlohmann::json& metadata = nullptr) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.is_null()) header["__metadata__"] = metadata;
  std::string data;
  for (const auto& t : tensors) {
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data += t.bytes;
  }
  std::string h = header.dump();
  uint64_t n = h.size();
  std::string out(reinterpret_cast<const char*>(&n), 8);
  return out + h + data;
}

inline std::string f32_bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

using selftest::random_floats;
using selftest::random_tensor;

struct CommandResult {
  int status;
  std::string output;  // stdout and stderr together
};

// Runs a shell command line; returns its exit status and combined output.
inline CommandResult run(const std::string& command) {
  CommandResult r{-1, ""};
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  int rc = pclose(p);
  r.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  return r;
}

// The message of the InputError that f throws; a test failure if it throws nothing or another type.
inline std::string input_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected InputError, got another exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected InputError, nothing was thrown";
  return "";
}

// A command run in the background (`exec`: the pid is the command's own), its output in `log`.
// A test that ends early (a failed assertion) kills and reaps it: no run outlives its test.
class Child {
 public:
  Child(const std::string& command, const std::string& log) {
    const std::string line = "exec " + command + " > " + log + " 2>&1";
    pid_ = fork();
    if (pid_ == 0) {
      execl("/bin/sh", "sh", "-c", line.c_str(), nullptr);
      _exit(127);
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  pid_t pid() const { return pid_; }
  void signal(int sig) const { kill(pid_, sig); }
  // The wait status (reaps the child).
  int wait() {
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }
  // Polls every 10 ms until `ready` holds; false once the child has ended without it (not
  // reaped: wait() still reads its status), or after `seconds`, a bound for a hung run far
  // above what a loaded machine needs. Callers assert on the result.
  [[nodiscard]] bool wait_until(const std::function<bool()>& ready, double seconds = 300) const {
    for (int i = 0; i < seconds * 100; ++i) {
      if (ready()) return true;
      siginfo_t info{};
      if (waitid(P_PID, pid_, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid_) return ready();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return ready();
  }

 private:
  pid_t pid_ = -1;
};

inline bool log_has(const std::string& log, const std::string& text) {
  return read_text(log).find(text) != std::string::npos;
}

inline std::vector<std::string> pngs_in(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".png") names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

inline std::string exe() { return DITBATCH_EXE; }
inline std::string golden(const std::string& name) { return std::string(DITBATCH_TEST_DATA) + "/golden/" + name; }

// sum((a-b)^2) / sum(b^2) over host tensors (any float dtype), accumulated in double.
inline double nmse(const Tensor& a, const Tensor& b) {
  Tensor x = a.to_f32(), y = b.to_f32();
  EXPECT_EQ(x.numel(), y.numel());
  double num = 0, den = 0;
  for (int64_t i = 0; i < std::min(x.numel(), y.numel()); ++i) {
    double d = static_cast<double>(x.data<float>()[i]) - y.data<float>()[i];
    num += d * d;
    den += static_cast<double>(y.data<float>()[i]) * y.data<float>()[i];
  }
  return den > 0 ? num / den : num;
}

inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  Tensor x = a.to_f32(), y = b.to_f32();
  double m = 0;
  for (int64_t i = 0; i < std::min(x.numel(), y.numel()); ++i)
    m = std::max(m, std::abs(static_cast<double>(x.data<float>()[i]) - y.data<float>()[i]));
  return m;
}

}  // namespace ditbatch::test
