// HMAC-SHA256 of the bootstrap and link handshakes, from OpenSSL's libcrypto loaded on first
// use (dlopen), so that processes that never join a multi-host world (`kiln run`, programs on
// libkiln.so) do not map libcrypto: 3.1 MiB of their peak RSS (docs/design.md, issue 33).
#pragma once

#include <string_view>

#include "core/status.h"

namespace kiln::comm {

constexpr size_t kHmacSha256Bytes = 32;

// Loads libcrypto once per process (later calls return the first call's result); the error
// names the library and how to install it. Every handshake's entry (the root listener, a
// rank's join) calls it before any MAC is computed.
Status load_hmac_sha256();

// HMAC-SHA256(key, data) into `mac` (kHmacSha256Bytes bytes). Returns false when
// load_hmac_sha256() did not succeed (then `mac` is untouched).
bool hmac_sha256(std::string_view key, std::string_view data, unsigned char* mac);

}  // namespace kiln::comm
