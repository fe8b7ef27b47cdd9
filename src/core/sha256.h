// SHA-256 (OpenSSL EVP): weight-file checksums and PNG digests in the manifest.
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace ditbatch {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(const void* data, size_t bytes);
  void update(std::string_view s) { update(s.data(), s.size()); }
  std::string hex();  // finishes the digest; lowercase hex, 64 chars

 private:
  struct State;
  std::unique_ptr<State> state_;
};

std::string sha256_hex(std::string_view data);
std::string sha256_file(const std::string& path);  // a regular file's; throws if unreadable
std::string sha256_fd(int fd);                     // from the descriptor's offset to its end

}  // namespace ditbatch
