// Fuzz target: the kilnInit JSON configuration (rt::parse_device_config, what kilnInit(path)
// runs on the file's text; with KILN_DEVICES unset, as the fuzzer runs).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "runtime/device.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1u << 16)) return -1;
  std::string text(reinterpret_cast<const char*>(data), size);
  kiln::Expected<kiln::rt::DeviceConfig> config =
      kiln::rt::parse_device_config(text, "fuzz.json");
  if (!config.ok()) return 0;
  // A config that parsed promises kilnInit a count DeviceManager::create accepts (1..1024,
  // device.cc's kMaxDevices); creating the devices (threads per core) is not fuzzed.
  if (config->count < 1 || config->count > 1024) std::abort();
  return 0;
}
