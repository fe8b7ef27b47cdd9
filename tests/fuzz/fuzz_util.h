// What every fuzz target shares (tests/fuzz/README.md).
//
// A target feeds its bytes to the product's real parser, the function `generate`, `convert` or
// `tokenize` calls. The parser's own refusal, an InputError (exit status 2, a message naming
// the file and what was expected), is a normal outcome. Everything else is a finding and stops
// the run so that libFuzzer saves the input: another exception escaping (std::bad_alloc,
// nlohmann's type_error, a plain ditbatch::Error from an internal check, which the command
// would report as a run-time failure, exit 1), a broken invariant the target checks, a
// sanitizer report, a hang (-timeout) or unbounded memory (-rss_limit_mb, -malloc_limit_mb).
#pragma once

#include <cxxabi.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <typeinfo>

#include "core/error.h"

namespace ditbatch::fuzz {

// Stops the run as a finding (libFuzzer saves the input as crash-<sha1>).
[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "\n==== FUZZ FINDING: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

inline std::string type_name(const std::exception& e) {
  int status = 0;
  char* name = abi::__cxa_demangle(typeid(e).name(), nullptr, nullptr, &status);
  std::string out = status == 0 && name ? name : typeid(e).name();
  std::free(name);
  return out;
}

// Runs one parse: an InputError is the parser refusing bad bytes, anything else a finding.
template <typename F>
void parse(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    // DITBATCH_FUZZ_VERBOSE=1: say why an input was refused (is a seed still accepted?).
    static const bool verbose = std::getenv("DITBATCH_FUZZ_VERBOSE") != nullptr;
    if (verbose) std::fprintf(stderr, "refused: %s\n", e.what());
  } catch (const std::exception& e) {
    finding(type_name(e) + " escaped the parser (only ditbatch::InputError may): " + e.what());
  } catch (...) {
    finding("a non-std exception escaped the parser");
  }
}

// A private folder for the files a parser reads by path, made once per process under $TMPDIR
// and removed at exit. Real files on a real file system: no mocks.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "ditbatch-fuzz-XXXXXX").string();
    if (!::mkdtemp(pattern.data())) finding("cannot make a scratch folder under $TMPDIR");
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

  // Writes `bytes` as the file `name` (replacing it) and returns its path.
  std::string write(const std::string& name, std::string_view bytes) const {
    const std::string file = *this / name;
    const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) finding("cannot write the scratch file " + file);
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (n <= 0) finding("cannot write the scratch file " + file);
      done += static_cast<size_t>(n);
    }
    ::close(fd);
    return file;
  }

 private:
  std::string path_;
};

// Several files in one input, for parsers that read a set (a tokenizer folder, a config with its
// weights): each file starts with a line ">>> NAME" at the start of the input or of a line; the
// bytes up to the next such line (without its '\n') are the file. Bytes before the first marker
// are ignored. A name given twice keeps the last.
inline std::map<std::string, std::string> split_files(std::string_view input) {
  std::map<std::string, std::string> files;
  constexpr std::string_view kMarker = ">>> ";
  size_t pos = input.starts_with(kMarker) ? 0 : input.find(std::string("\n").append(kMarker));
  if (pos != std::string_view::npos && pos > 0) ++pos;
  while (pos != std::string_view::npos && pos < input.size()) {
    const size_t name_start = pos + kMarker.size();
    const size_t name_end = input.find('\n', name_start);
    if (name_end == std::string_view::npos) break;
    const std::string name(input.substr(name_start, name_end - name_start));
    const size_t body_start = name_end + 1;
    // Searched from the name's own '\n': an empty body is followed by the next marker at once.
    const size_t next = input.find(std::string("\n").append(kMarker), name_end);
    const size_t body_end = next == std::string_view::npos ? input.size() : next;
    files[name] = body_end > body_start ? std::string(input.substr(body_start, body_end - body_start)) : std::string();
    pos = next == std::string_view::npos ? next : next + 1;
  }
  return files;
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Fixture files the targets read (tests/fuzz/fixtures/..., the repository's tests/data).
inline std::string source_path(const std::string& relative) {
  return std::string(DITBATCH_SOURCE_DIR) + "/" + relative;
}

}  // namespace ditbatch::fuzz
