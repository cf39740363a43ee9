// HMAC-SHA256 through libcrypto's C ABI, resolved with dlsym on first use.
#include "comm/hmac_sha256.h"

#include <dlfcn.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/opensslv.h>

#include <mutex>

namespace kiln::comm {
namespace {

#define KILN_STR2(x) #x
#define KILN_STR(x) KILN_STR2(x)
// The soname of the OpenSSL whose headers these are: the ABI the declarations describe.
constexpr char kLibcrypto[] = "libcrypto.so." KILN_STR(OPENSSL_VERSION_MAJOR);

struct Libcrypto {
  decltype(&::EVP_sha256) evp_sha256 = nullptr;
  decltype(&::HMAC) hmac = nullptr;
};

Status load(Libcrypto& lib) {
  // Never closed: the handshakes run until the process exits.
  void* h = ::dlopen(kLibcrypto, RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* why = ::dlerror();
    return unavailable("the communication handshakes need OpenSSL's %s, which cannot be loaded (%s); "
                       "install it with `apt-get install libssl3`",
                       kLibcrypto, why != nullptr ? why : "unknown error");
  }
  lib.evp_sha256 = reinterpret_cast<decltype(&::EVP_sha256)>(::dlsym(h, "EVP_sha256"));
  lib.hmac = reinterpret_cast<decltype(&::HMAC)>(::dlsym(h, "HMAC"));
  if (lib.evp_sha256 == nullptr || lib.hmac == nullptr)
    return unavailable("%s has no EVP_sha256 or HMAC: not the OpenSSL Kiln was built with", kLibcrypto);
  return ok_status();
}

const Libcrypto* loaded = nullptr;  // set once, by load_hmac_sha256's first call

}  // namespace

Status load_hmac_sha256() {
  static std::once_flag once;
  static Status result = ok_status();
  std::call_once(once, [] {
    static Libcrypto lib;
    result = load(lib);
    if (result.ok()) loaded = &lib;
  });
  return result;
}

bool hmac_sha256(std::string_view key, std::string_view data, unsigned char* mac) {
  if (!load_hmac_sha256().ok()) return false;
  unsigned int len = 0;
  loaded->hmac(loaded->evp_sha256(), key.data(), static_cast<int>(key.size()),
               reinterpret_cast<const unsigned char*>(data.data()), data.size(), mac, &len);
  return len == kHmacSha256Bytes;
}

}  // namespace kiln::comm
