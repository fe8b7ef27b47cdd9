#include "core/sha256.h"

#include <openssl/evp.h>

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/fs.h"

namespace ditbatch {

struct Sha256::State {
  EVP_MD_CTX* ctx = nullptr;
};

Sha256::Sha256() : state_(std::make_unique<State>()) {
  state_->ctx = EVP_MD_CTX_new();
  if (!state_->ctx || EVP_DigestInit_ex(state_->ctx, EVP_sha256(), nullptr) != 1)
    fail("sha256: cannot initialise OpenSSL digest");
}

Sha256::~Sha256() { EVP_MD_CTX_free(state_->ctx); }

void Sha256::update(const void* data, size_t bytes) {
  if (bytes && EVP_DigestUpdate(state_->ctx, data, bytes) != 1) fail("sha256: update failed");
}

std::string Sha256::hex() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(state_->ctx, digest, &len) != 1) fail("sha256: final failed");
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < len; ++i) {
    out += digits[digest[i] >> 4];
    out += digits[digest[i] & 15];
  }
  return out;
}

std::string sha256_hex(std::string_view data) {
  Sha256 h;
  h.update(data);
  return h.hex();
}

std::string sha256_fd(int fd) {
  Sha256 h;
  std::vector<char> buf(1 << 20);
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail_input("read error: {}", std::strerror(errno));
    if (n == 0) break;
    h.update(buf.data(), static_cast<size_t>(n));
  }
  return h.hex();
}

std::string sha256_file(const std::string& path) {
  std::string why;
  const int fd = open_regular_file(path, true, &why);
  if (fd < 0) fail_input("{}: cannot hash: {}", path, why);
  try {
    std::string hex = sha256_fd(fd);
    ::close(fd);
    return hex;
  } catch (const InputError& e) {
    ::close(fd);
    fail_input("{}: {}", path, e.what());
  }
}

}  // namespace ditbatch
