// C API of device and host memory: kilnrtMalloc/Free, MallocHost/FreeHost, Memcpy(Async),
// Memcpy2d(Async), Memset(Async), GetMemInfo, GetMemStats, EmptyCache.
//
// Every pointer is checked against the MemoryRegistry before it is touched: a pointer in
// the wrong domain, of another device, freed, or a range running past its allocation is
// an error code. Overlapping source and destination ranges copy as memmove does
// (copy_memory).
#include <cstdint>
#include <cstring>
#include <mutex>
#include <new>
#include <shared_mutex>
#include <string>

#include "core/fault_inject.h"
#include "core/logging.h"
#include "kiln/kiln.h"
#include "profiler/profiler.h"
#include "capi/api_guard.h"
#include "capi/api_internal.h"
#include "runtime/memory.h"

namespace kiln::rt {
namespace {

const char* kind_name(kilnrtMemcpyKind kind) {
  switch (kind) {
    case KILN_MEMCPY_HOST_TO_HOST: return "KILN_MEMCPY_HOST_TO_HOST";
    case KILN_MEMCPY_HOST_TO_DEVICE: return "KILN_MEMCPY_HOST_TO_DEVICE";
    case KILN_MEMCPY_DEVICE_TO_HOST: return "KILN_MEMCPY_DEVICE_TO_HOST";
    case KILN_MEMCPY_DEVICE_TO_DEVICE: return "KILN_MEMCPY_DEVICE_TO_DEVICE";
    case KILN_MEMCPY_DEFAULT: return "KILN_MEMCPY_DEFAULT";
  }
  return "?";
}

// Where a pointer range lies.
struct Place {
  int device = -1;  // owning device of device memory; -1: host memory
  bool pinned = false;
  // Host memory mapped for `device` by kilnrtHostRegister: device memory to the device, host
  // memory still to the host, so it is either side of any copy.
  bool registered = false;
  bool is_device() const { return device >= 0; }
};

std::string describe(const Place& place) {
  if (place.is_device()) return str_format("device memory of cpu:%d", place.device);
  return place.pinned ? "pinned host memory" : "host memory";
}

// The device whose cache holds `p` as part of a freed block, or -1.
int freed_on_device(const RuntimeState& state, const void* p) {
  for (int i = 0; i < state.devices->count(); ++i) {
    if (state.devices->device(i)->memory().holds_freed(p)) return i;
  }
  return -1;
}

// How to name a pointer that is not device memory: it may be a block freed to a
// device's cache.
std::string describe_host(const RuntimeState& state, const void* p) {
  int device = freed_on_device(state, p);
  if (device >= 0) return str_format("freed device memory of cpu:%d (released by kilnrtFree)", device);
  return "host memory";
}

// Classifies [p, p + count): inside one allocation, or touching none (pageable host
// memory). A range that is partly in an allocation is an error.
kilnError locate(const char* api, const char* what, const void* p, size_t count, Place* place) {
  std::optional<Allocation> a = MemoryRegistry::get().find_overlapping(p, count);
  *place = Place{};
  if (!a) return KILN_SUCCESS;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p);
  const uintptr_t base = reinterpret_cast<uintptr_t>(a->base);
  const char* domain = a->kind == MemoryKind::kDevice ? "device" : "pinned host";
  if (begin >= base) {
    size_t left = a->size - (begin - base);
    if (count <= left) {
      if (a->kind == MemoryKind::kDevice) {
        place->device = a->device;
        place->registered = a->registered;
      } else {
        place->pinned = true;
      }
      return KILN_SUCCESS;
    }
    return fail(KILN_ERROR_INVALID_MEMORY,
                "%s: %s range of %zu bytes at %p runs past the end of its %s allocation (%zu bytes at %p, "
                "%zu bytes left from %s)",
                api, what, count, p, domain, a->size, a->base, left, what);
  }
  return fail(KILN_ERROR_INVALID_MEMORY,
              "%s: %s range of %zu bytes at %p (host memory) runs into the %s allocation of %zu bytes at %p", api,
              what, count, p, domain, a->size, a->base);
}

// Checks a copy touching dst_bytes at dst and src_bytes at src against its kind; returns the
// devices owning dst and src (-1: host).
kilnError check_copy_spans(const RuntimeState& state, const char* api, void* dst, size_t dst_bytes,
                           const void* src, size_t src_bytes, kilnrtMemcpyKind kind, int* dst_device,
                           int* src_device) {
  Place d, s;
  if (kilnError e = locate(api, "dst", dst, dst_bytes, &d)) return e;
  if (kilnError e = locate(api, "src", src, src_bytes, &s)) return e;
  if (kind == KILN_MEMCPY_DEFAULT) {
    kind = d.is_device() ? (s.is_device() ? KILN_MEMCPY_DEVICE_TO_DEVICE : KILN_MEMCPY_HOST_TO_DEVICE)
                         : (s.is_device() ? KILN_MEMCPY_DEVICE_TO_HOST : KILN_MEMCPY_HOST_TO_HOST);
  }
  const bool want_dst_device = kind == KILN_MEMCPY_HOST_TO_DEVICE || kind == KILN_MEMCPY_DEVICE_TO_DEVICE;
  const bool want_src_device = kind == KILN_MEMCPY_DEVICE_TO_HOST || kind == KILN_MEMCPY_DEVICE_TO_DEVICE;
  for (int i = 0; i < 2; ++i) {
    const char* what = i == 0 ? "dst" : "src";
    const void* p = i == 0 ? dst : src;
    const Place& place = i == 0 ? d : s;
    const bool want_device = i == 0 ? want_dst_device : want_src_device;
    if (want_device && !place.is_device()) {
      std::string domain = place.pinned ? describe(place) : describe_host(state, p);
      return fail(KILN_ERROR_INVALID_MEMORY, "%s: %s %p is %s, the kind %s needs a live device allocation", api,
                  what, p, domain.c_str(), kind_name(kind));
    }
    if (!want_device && place.is_device() && !place.registered) {
      return fail(KILN_ERROR_INVALID_MEMORY, "%s: %s %p is %s, the kind %s needs host memory", api, what, p,
                  describe(place).c_str(), kind_name(kind));
    }
  }
  // Registered memory is host memory too: copied as such, from or to any device.
  if (d.registered && (!want_dst_device || s.is_device())) d = Place{};
  if (s.registered && (!want_src_device || d.is_device())) s = Place{};
  if (d.is_device() && s.is_device() && d.device != s.device) {
    return fail(KILN_ERROR_INVALID_MEMORY,
                "%s: dst %p is device memory of cpu:%d but src %p is device memory of cpu:%d; a "
                "device-to-device copy stays on one device (stage through host memory)",
                api, dst, d.device, src, s.device);
  }
  *dst_device = d.device;
  *src_device = s.device;
  return KILN_SUCCESS;
}

kilnError check_pointers_and_kind(const char* api, const void* dst, const void* src, kilnrtMemcpyKind kind) {
  if (dst == nullptr || src == nullptr) {
    return fail(KILN_ERROR_INVALID_PARAM, "%s: %s is NULL", api, dst == nullptr ? "dst" : "src");
  }
  if (static_cast<int>(kind) < KILN_MEMCPY_HOST_TO_HOST || static_cast<int>(kind) > KILN_MEMCPY_DEFAULT) {
    return fail(KILN_ERROR_INVALID_PARAM, "%s: kind %d is not a kilnrtMemcpyKind", api, static_cast<int>(kind));
  }
  return KILN_SUCCESS;
}

// Checks a copy against its kind; returns the devices owning dst and src (-1: host).
kilnError check_copy(const RuntimeState& state, const char* api, void* dst, size_t dest_max, const void* src,
                     size_t count, kilnrtMemcpyKind kind, int* dst_device, int* src_device) {
  if (kilnError e = check_pointers_and_kind(api, dst, src, kind)) return e;
  if (dest_max < count) {
    return fail(KILN_ERROR_INVALID_PARAM, "%s: count %zu exceeds destMax %zu", api, count, dest_max);
  }
  return check_copy_spans(state, api, dst, count, src, count, kind, dst_device, src_device);
}

// A pitched copy: `height` rows of `width` bytes. Checks the pitches and both spans
// ((height - 1) * pitch + width bytes); *bytes gets width * height (0: nothing to copy).
kilnError check_copy_2d(const RuntimeState& state, const char* api, void* dst, size_t dpitch, const void* src,
                        size_t spitch, size_t width, size_t height, kilnrtMemcpyKind kind, int* dst_device,
                        int* src_device, size_t* bytes) {
  if (kilnError e = check_pointers_and_kind(api, dst, src, kind)) return e;
  if (width > dpitch) {
    return fail(KILN_ERROR_INVALID_PARAM, "%s: width %zu exceeds dpitch %zu (a row must fit in its pitch)", api,
                width, dpitch);
  }
  if (width > spitch) {
    return fail(KILN_ERROR_INVALID_PARAM, "%s: width %zu exceeds spitch %zu (a row must fit in its pitch)", api,
                width, spitch);
  }
  *bytes = 0;
  *dst_device = *src_device = -1;
  if (width == 0 || height == 0) return KILN_SUCCESS;
  const size_t rows = height - 1;
  if (rows > (SIZE_MAX - width) / dpitch || rows > (SIZE_MAX - width) / spitch) {
    return fail(KILN_ERROR_INVALID_PARAM, "%s: %zu rows of pitch %zu/%zu bytes overflow the address space", api,
                height, dpitch, spitch);
  }
  const size_t dst_span = rows * dpitch + width, src_span = rows * spitch + width;
  const uintptr_t d = reinterpret_cast<uintptr_t>(dst), s = reinterpret_cast<uintptr_t>(src);
  if (d < s + src_span && s < d + dst_span) {
    return fail(KILN_ERROR_INVALID_PARAM,
                "%s: the dst span (%zu bytes at %p) and the src span (%zu bytes at %p) overlap; a pitched copy "
                "needs distinct ranges",
                api, dst_span, dst, src_span, src);
  }
  if (kilnError e = check_copy_spans(state, api, dst, dst_span, src, src_span, kind, dst_device, src_device)) {
    return e;
  }
  *bytes = width * height;
  return KILN_SUCCESS;
}

void copy_rows(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height) {
  if (dpitch == width && spitch == width) {
    copy_memory(dst, src, width * height);  // contiguous rows: one copy
    return;
  }
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  for (size_t r = 0; r < height; ++r) std::memcpy(d + r * dpitch, s + r * spitch, width);
}

kilnError check_memset(const RuntimeState& state, const char* api, void* dev_ptr, size_t max_count, size_t count,
                       int* device) {
  if (dev_ptr == nullptr) return fail(KILN_ERROR_INVALID_PARAM, "%s: devPtr is NULL", api);
  if (max_count < count) {
    return fail(KILN_ERROR_INVALID_PARAM, "%s: count %zu exceeds maxCount %zu", api, count, max_count);
  }
  Place place;
  if (kilnError e = locate(api, "devPtr", dev_ptr, count, &place)) return e;
  if (!place.is_device()) {
    std::string domain = place.pinned ? describe(place) : describe_host(state, dev_ptr);
    return fail(KILN_ERROR_INVALID_MEMORY, "%s: devPtr %p is %s, not a live device allocation", api, dev_ptr,
                domain.c_str());
  }
  *device = place.device;
  return KILN_SUCCESS;
}

// Device memory given to an asynchronous call must be on the stream's device.
kilnError check_stream_device(const char* api, const Stream& stream, int device, const char* what) {
  if (device >= 0 && device != stream.device().id()) {
    return fail(KILN_ERROR_INVALID_MEMORY, "%s: %s is device memory of cpu:%d but the stream is on %s", api, what,
                device, stream.device().name().c_str());
  }
  return KILN_SUCCESS;
}

}  // namespace
}  // namespace kiln::rt

using kiln::rt::api_entry;
using kiln::rt::ApiNeeds;
using kiln::rt::Device;
using kiln::rt::fail;
using kiln::rt::MemoryRegistry;
using kiln::rt::runtime_lock;
using kiln::rt::runtime_state;
using kiln::rt::RuntimeState;

namespace kiln::rt {
namespace {

// The profiler's name of a copy between the devices check_copy found (-1: host memory).
const char* copy_direction(int dst_device, int src_device) {
  if (src_device < 0) return dst_device < 0 ? "H2H" : "H2D";
  return dst_device < 0 ? "D2H" : "D2D";
}

// KILN_FAULT_INJECT's copy site for the synchronous copies (an asynchronous copy fails as its
// copy-engine task, runtime/stream.cc): KILN_ERROR_FAILURE naming the fault, or KILN_SUCCESS.
kilnError injected_copy_fault(const char* api, size_t bytes) {
  const uint64_t event = fault::should_fail(fault::Site::kCopy);
  if (event == 0) return KILN_SUCCESS;
  return fail(fault::injected_error(fault::Site::kCopy, event, str_format("%s of %zu bytes", api, bytes)));
}

// The tail of kilnrtMemcpyAsync and kilnrtMemcpy2dAsync, once the copy itself is checked:
// the stream, its device against the devices of the copy's ends, then a copy-engine task
// that runs copy() (moving `bytes`) and records it for the profiler.
template <typename Copy>
kilnError enqueue_copy(const char* api, kilnrtStream stream, int dst_device, int src_device, size_t bytes,
                       const char* task, Copy copy) {
  Expected<Stream*> s = resolve_stream(stream, api);
  if (!s.ok()) return fail(s.status(), KILN_ERROR_INVALID_RESOURCE_HANDLE);
  Stream& target = **s;
  if (kilnError e = check_stream_device(api, target, dst_device, "dst")) return e;
  if (kilnError e = check_stream_device(api, target, src_device, "src")) return e;
  if (bytes == 0) return KILN_SUCCESS;
  const char* direction = copy_direction(dst_device, src_device);
  target.submit(
      Engine::kCopy,
      [copy, bytes, direction]() {
        int64_t start = KILN_UNLIKELY(profiler::enabled()) ? profiler::now_ns() : -1;
        copy();
        if (KILN_UNLIKELY(start >= 0)) profiler::record_copy(direction, bytes, start);
        return ok_status();
      },
      task);
  return KILN_SUCCESS;
}

}  // namespace
}  // namespace kiln::rt

extern "C" {

kilnError kilnrtMalloc(void** devPtr, size_t size, kilnrtMemMallocPolicy policy) {
  static const char* const kApi = "kilnrtMalloc";
  return api_entry(kApi, ApiNeeds::kRuntime, [&] {
    if (devPtr == nullptr) return fail(KILN_ERROR_INVALID_PARAM, "%s: devPtr is NULL", kApi);
    *devPtr = nullptr;
    if (size == 0) return fail(KILN_ERROR_INVALID_PARAM, "%s: size is 0", kApi);
    kiln::rt::PagePolicy page_policy;
    switch (policy) {
      case KILN_MEM_MALLOC_HUGE_FIRST:
        page_policy = kiln::rt::PagePolicy::kHugeFirst;
        break;
      case KILN_MEM_MALLOC_HUGE_ONLY:
        page_policy = kiln::rt::PagePolicy::kHugeOnly;
        break;
      case KILN_MEM_MALLOC_NORMAL_ONLY:
        page_policy = kiln::rt::PagePolicy::kNormalOnly;
        break;
      default:
        return fail(KILN_ERROR_INVALID_PARAM, "%s: policy %d is not a kilnrtMemMallocPolicy", kApi,
                    static_cast<int>(policy));
    }
    kiln::rt::Context* context = kiln::rt::current_context();
    if (context == nullptr) {
      return fail(KILN_ERROR_RT_CONTEXT_NULL,
                  "%s: no current context on this thread (call kilnrtSetDevice)", kApi);
    }
    kiln::Expected<void*> p = context->device().memory().allocate(size, page_policy);
    if (!p.ok()) {
      kiln::Status s = p.status();
      kilnError code = s.code() == kiln::StatusCode::kResourceExhausted ? KILN_ERROR_BAD_ALLOC : KILN_ERROR_FAILURE;
      return fail(code, "%s: %s", kApi, s.to_string().c_str());
    }
    *devPtr = *p;
    return KILN_SUCCESS;
  });
}

kilnError kilnrtFree(void* devPtr) {
  static const char* const kApi = "kilnrtFree";
  return api_entry(kApi, ApiNeeds::kRuntime, [&](RuntimeState* state) {
    if (devPtr == nullptr) return fail(KILN_ERROR_INVALID_PARAM, "%s: devPtr is NULL", kApi);
    std::optional<kiln::rt::Allocation> a = MemoryRegistry::get().find(devPtr);
    if (!a) {
      if (kiln::rt::freed_on_device(*state, devPtr) >= 0) {
        return fail(KILN_ERROR_INVALID_MEMORY, "%s: %p was already freed (double free)", kApi,
                    devPtr);
      }
      return fail(
          KILN_ERROR_INVALID_MEMORY,
          "%s: %p is not device memory (a host pointer, or device memory freed earlier and since "
          "returned to the system)",
          kApi, devPtr);
    }
    if (a->kind == kiln::rt::MemoryKind::kPinnedHost) {
      return fail(KILN_ERROR_INVALID_MEMORY,
                  "%s: %p is pinned host memory; free it with kilnrtFreeHost", kApi, devPtr);
    }
    if (a->registered) {
      return fail(KILN_ERROR_INVALID_MEMORY,
                  "%s: %p is host memory registered with kilnrtHostRegister, which its owner "
                  "frees; end the "
                  "registration with kilnrtHostUnregister",
                  kApi, devPtr);
    }
    if (a->base != devPtr) {
      return fail(
          KILN_ERROR_INVALID_MEMORY,
          "%s: %p points %zu bytes into the device allocation at %p; kilnrtFree takes the pointer "
          "kilnrtMalloc returned",
          kApi, devPtr,
          static_cast<size_t>(static_cast<const char*>(devPtr) - static_cast<const char*>(a->base)),
          a->base);
    }
    Device* device = state->devices->device(a->device);
    if (device == nullptr) {
      return fail(KILN_ERROR_INTERNAL_ERROR, "%s: %p belongs to cpu:%d, which does not exist", kApi,
                  devPtr, a->device);
    }
    {
      // Work already submitted to the device's streams may still use the block: it is
      // reused only once every stream has passed this point.
      kiln::Status s = device->memory().free(devPtr, device->fence_all_streams());
      if (!s.ok()) {
        // Lost a race with another kilnrtFree of the same pointer.
        return fail(KILN_ERROR_INVALID_MEMORY, "%s: %p was already freed (double free): %s", kApi,
                    devPtr, s.to_string().c_str());
      }
    }
    return KILN_SUCCESS;
  });
}

kilnError kilnrtMallocHost(void** hostPtr, size_t size) {
  static const char* const kApi = "kilnrtMallocHost";
  return api_entry(kApi, ApiNeeds::kRuntime, [&] {
    if (hostPtr == nullptr) return fail(KILN_ERROR_INVALID_PARAM, "%s: hostPtr is NULL", kApi);
    *hostPtr = nullptr;
    if (size == 0) return fail(KILN_ERROR_INVALID_PARAM, "%s: size is 0", kApi);
    // Pinned blocks the program did not free go at kilnFinalize, like device memory.
    static std::once_flag hook_once;
    std::call_once(hook_once, [] { kiln::rt::add_finalize_hook(&kiln::rt::free_all_pinned_host); });
    kiln::Expected<void*> p = kiln::rt::allocate_pinned_host(size);
    if (!p.ok()) return fail(KILN_ERROR_BAD_ALLOC, "%s: %s", kApi, p.status().to_string().c_str());
    *hostPtr = *p;
    return KILN_SUCCESS;
  });
}

kilnError kilnrtFreeHost(void* hostPtr) {
  static const char* const kApi = "kilnrtFreeHost";
  return api_entry(kApi, ApiNeeds::kRuntime, [&] {
    if (hostPtr == nullptr) return fail(KILN_ERROR_INVALID_PARAM, "%s: hostPtr is NULL", kApi);
    std::optional<kiln::rt::Allocation> a = MemoryRegistry::get().find(hostPtr);
    if (a && a->kind == kiln::rt::MemoryKind::kDevice) {
      return fail(KILN_ERROR_INVALID_MEMORY,
                  "%s: %p is device memory of cpu:%d; free it with kilnrtFree", kApi, hostPtr,
                  a->device);
    }
    if (a && a->base != hostPtr) {
      return fail(
          KILN_ERROR_INVALID_MEMORY,
          "%s: %p points into the pinned host allocation at %p; kilnrtFreeHost takes the pointer "
          "kilnrtMallocHost returned",
          kApi, hostPtr, a->base);
    }
    kiln::Status s = kiln::rt::free_pinned_host(hostPtr);
    if (!s.ok()) {
      return fail(KILN_ERROR_INVALID_MEMORY,
                  "%s: %p is not memory from kilnrtMallocHost (or was freed already)", kApi,
                  hostPtr);
    }
    return KILN_SUCCESS;
  });
}

kilnError kilnrtHostRegister(void* ptr, uint64_t size, kilnrtHostRegisterType type, void** devPtr) {
  static const char* const kApi = "kilnrtHostRegister";
  return api_entry(kApi, ApiNeeds::kRuntime, [&] {
    if (ptr == nullptr || devPtr == nullptr)
      return fail(KILN_ERROR_INVALID_PARAM, "%s: ptr and devPtr must not be NULL", kApi);
    *devPtr = nullptr;
    if (size == 0) return fail(KILN_ERROR_INVALID_PARAM, "%s: size is 0", kApi);
    if (type != KILN_HOST_REGISTER_MAPPED)
      return fail(KILN_ERROR_INVALID_PARAM, "%s: type %d is not a kilnrtHostRegisterType", kApi,
                  static_cast<int>(type));
    kiln::rt::Context* context = kiln::rt::current_context();
    if (context == nullptr) {
      return fail(KILN_ERROR_RT_CONTEXT_NULL,
                  "%s: no current context on this thread (call kilnrtSetDevice)", kApi);
    }
    // The CPU device addresses host memory as it is: the device address is the host address.
    kiln::rt::Allocation a;
    a.base = ptr;
    a.size = static_cast<size_t>(size);
    a.kind = kiln::rt::MemoryKind::kDevice;
    a.device = context->device().id();
    a.registered = true;
    {
      if (!MemoryRegistry::get().add_if_free(a)) {
        std::optional<kiln::rt::Allocation> other =
            MemoryRegistry::get().find_overlapping(ptr, a.size);
        return fail(KILN_ERROR_INVALID_MEMORY,
                    "%s: [%p, +%llu bytes) overlaps %s at %p, which the runtime manages already",
                    kApi, ptr, static_cast<unsigned long long>(size),
                    !other                                             ? "an allocation"
                    : other->registered                                ? "a registered host range"
                    : other->kind == kiln::rt::MemoryKind::kPinnedHost ? "pinned host memory"
                                                                       : "device memory",
                    other ? other->base : ptr);
      }
    }
    *devPtr = ptr;
    return KILN_SUCCESS;
  });
}

kilnError kilnrtHostUnregister(void* ptr) {
  static const char* const kApi = "kilnrtHostUnregister";
  return api_entry(kApi, ApiNeeds::kRuntime, [&] {
    if (ptr == nullptr) return fail(KILN_ERROR_INVALID_PARAM, "%s: ptr is NULL", kApi);
    std::optional<kiln::rt::Allocation> a = MemoryRegistry::get().find(ptr);
    if (!a || !a->registered || a->base != ptr)
      return fail(KILN_ERROR_INVALID_MEMORY,
                  "%s: %p is not the start of a range registered with kilnrtHostRegister", kApi,
                  ptr);
    MemoryRegistry::get().remove(ptr);
    return KILN_SUCCESS;
  });
}

kilnError kilnrtMemcpy(void* dst, size_t destMax, const void* src, size_t count, kilnrtMemcpyKind kind) {
  static const char* const kApi = "kilnrtMemcpy";
  return api_entry(kApi, ApiNeeds::kRuntime, [&](RuntimeState* state) {
    int dst_device = -1, src_device = -1;
    if (kilnError e = kiln::rt::check_copy(*state, kApi, dst, destMax, src, count, kind,
                                           &dst_device, &src_device)) {
      return e;
    }
    if (count == 0) return KILN_SUCCESS;
    if (kilnError e = kiln::rt::injected_copy_fault(kApi, count)) return e;
    // A synchronous copy runs on the calling thread and, as in AscendCL, is not ordered
    // with stream work, so it takes no engine lock: small copies cost the checks and the
    // copy, nothing more (bench/memcpy_bench).
    int64_t profile_start =
        KILN_UNLIKELY(kiln::profiler::enabled()) ? kiln::profiler::now_ns() : -1;
    kiln::rt::copy_memory(dst, src, count);
    if (KILN_UNLIKELY(profile_start >= 0)) {
      kiln::profiler::record_copy(kiln::rt::copy_direction(dst_device, src_device), count,
                                  profile_start);
    }
    return KILN_SUCCESS;
  });
}

kilnError kilnrtMemcpyAsync(void* dst, size_t destMax, const void* src, size_t count, kilnrtMemcpyKind kind,
                            kilnrtStream stream) {
  static const char* const kApi = "kilnrtMemcpyAsync";
  return api_entry(kApi, ApiNeeds::kRuntime, [&](RuntimeState* state) {
    int dst_device = -1, src_device = -1;
    if (kilnError e = kiln::rt::check_copy(*state, kApi, dst, destMax, src, count, kind,
                                           &dst_device, &src_device)) {
      return e;
    }
    return kiln::rt::enqueue_copy(kApi, stream, dst_device, src_device, count, "MemcpyAsync",
                                  [dst, src, count] { kiln::rt::copy_memory(dst, src, count); });
  });
}

kilnError kilnrtMemcpy2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                         kilnrtMemcpyKind kind) {
  static const char* const kApi = "kilnrtMemcpy2d";
  return api_entry(kApi, ApiNeeds::kRuntime, [&](RuntimeState* state) {
    int dst_device = -1, src_device = -1;
    size_t bytes = 0;
    if (kilnError e = kiln::rt::check_copy_2d(*state, kApi, dst, dpitch, src, spitch, width, height,
                                              kind, &dst_device, &src_device, &bytes)) {
      return e;
    }
    if (bytes == 0) return KILN_SUCCESS;
    if (kilnError e = kiln::rt::injected_copy_fault(kApi, bytes)) return e;
    int64_t profile_start =
        KILN_UNLIKELY(kiln::profiler::enabled()) ? kiln::profiler::now_ns() : -1;
    kiln::rt::copy_rows(dst, dpitch, src, spitch, width, height);
    if (KILN_UNLIKELY(profile_start >= 0)) {
      kiln::profiler::record_copy(kiln::rt::copy_direction(dst_device, src_device), bytes,
                                  profile_start);
    }
    return KILN_SUCCESS;
  });
}

kilnError kilnrtMemcpy2dAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                              size_t height, kilnrtMemcpyKind kind, kilnrtStream stream) {
  static const char* const kApi = "kilnrtMemcpy2dAsync";
  return api_entry(kApi, ApiNeeds::kRuntime, [&](RuntimeState* state) {
    int dst_device = -1, src_device = -1;
    size_t bytes = 0;
    if (kilnError e = kiln::rt::check_copy_2d(*state, kApi, dst, dpitch, src, spitch, width, height,
                                              kind, &dst_device, &src_device, &bytes)) {
      return e;
    }
    return kiln::rt::enqueue_copy(kApi, stream, dst_device, src_device, bytes, "Memcpy2dAsync",
                                  [dst, dpitch, src, spitch, width, height] {
                                    kiln::rt::copy_rows(dst, dpitch, src, spitch, width, height);
                                  });
  });
}

kilnError kilnrtMemset(void* devPtr, size_t maxCount, int32_t value, size_t count) {
  static const char* const kApi = "kilnrtMemset";
  return api_entry(kApi, ApiNeeds::kRuntime, [&](RuntimeState* state) {
    int device_id = -1;
    if (kilnError e = kiln::rt::check_memset(*state, kApi, devPtr, maxCount, count, &device_id))
      return e;
    if (count == 0) return KILN_SUCCESS;
    Device* device = state->devices->device(device_id);
    if (device == nullptr) {
      return fail(KILN_ERROR_INTERNAL_ERROR, "%s: %p belongs to cpu:%d, which does not exist", kApi,
                  devPtr, device_id);
    }
    std::lock_guard engine(device->copy_engine());
    std::memset(devPtr, static_cast<unsigned char>(value), count);
    return KILN_SUCCESS;
  });
}

kilnError kilnrtMemsetAsync(void* devPtr, size_t maxCount, int32_t value, size_t count, kilnrtStream stream) {
  static const char* const kApi = "kilnrtMemsetAsync";
  return api_entry(kApi, ApiNeeds::kRuntime, [&](RuntimeState* state) {
    int device_id = -1;
    if (kilnError e = kiln::rt::check_memset(*state, kApi, devPtr, maxCount, count, &device_id))
      return e;
    kiln::Expected<kiln::rt::Stream*> s = kiln::rt::resolve_stream(stream, kApi);
    if (!s.ok()) return fail(s.status(), KILN_ERROR_INVALID_RESOURCE_HANDLE);
    kiln::rt::Stream& target = **s;
    if (kilnError e = kiln::rt::check_stream_device(kApi, target, device_id, "devPtr")) return e;
    if (count == 0) return KILN_SUCCESS;
    const unsigned char byte = static_cast<unsigned char>(value);
    {
      target.submit(
          kiln::rt::Engine::kCopy,
          [devPtr, byte, count]() {
            int64_t start =
                KILN_UNLIKELY(kiln::profiler::enabled()) ? kiln::profiler::now_ns() : -1;
            std::memset(devPtr, byte, count);
            if (KILN_UNLIKELY(start >= 0)) kiln::profiler::record_copy("memset", count, start);
            return kiln::ok_status();
          },
          "MemsetAsync");
    }
    return KILN_SUCCESS;
  });
}

kilnError kilnrtGetMemInfo(kilnrtMemAttr attr, size_t* free, size_t* total) {
  static const char* const kApi = "kilnrtGetMemInfo";
  return api_entry(kApi, ApiNeeds::kRuntime, [&] {
    if (free == nullptr || total == nullptr) {
      return fail(KILN_ERROR_INVALID_PARAM, "%s: %s is NULL", kApi,
                  free == nullptr ? "free" : "total");
    }
    if (static_cast<int>(attr) < KILN_DDR_MEM || static_cast<int>(attr) > KILN_HBM_MEM_NORMAL) {
      return fail(KILN_ERROR_INVALID_PARAM, "%s: attr %d is not a kilnrtMemAttr", kApi,
                  static_cast<int>(attr));
    }
    kiln::rt::Context* context = kiln::rt::current_context();
    if (context == nullptr) {
      return fail(KILN_ERROR_RT_CONTEXT_NULL,
                  "%s: no current context on this thread (call kilnrtSetDevice)", kApi);
    }
    // The CPU device has one memory domain: every attribute describes it.
    kiln::rt::MemoryPool& pool = context->device().memory();
    size_t reserved = pool.reserved();
    *total = pool.limit();
    *free = reserved < pool.limit() ? pool.limit() - reserved : 0;
    return KILN_SUCCESS;
  });
}

kilnError kilnrtGetMemStats(int32_t deviceId, kilnrtMemStats* stats) {
  static const char* const kApi = "kilnrtGetMemStats";
  return api_entry(kApi, ApiNeeds::kRuntime, [&](RuntimeState* state) {
    if (stats == nullptr) return fail(KILN_ERROR_INVALID_PARAM, "%s: stats is NULL", kApi);
    Device* device = state->devices->device(deviceId);
    if (device == nullptr) {
      return fail(KILN_ERROR_INVALID_DEVICE, "%s: device %d does not exist (%d devices)", kApi,
                  deviceId, state->devices->count());
    }
    kiln::rt::MemoryStats s = device->memory().stats();
    stats->inUse = s.in_use;
    stats->cached = s.cached;
    stats->peakInUse = s.peak_in_use;
    stats->reserved = s.reserved;
    stats->allocCount = s.alloc_count;
    stats->cacheHits = s.cache_hits;
    stats->fragmentation = s.fragmentation;
    return KILN_SUCCESS;
  });
}

kilnError kilnrtEmptyCache(int32_t deviceId) {
  static const char* const kApi = "kilnrtEmptyCache";
  return api_entry(kApi, ApiNeeds::kRuntime, [&](RuntimeState* state) {
    Device* device = state->devices->device(deviceId);
    if (device == nullptr) {
      return fail(KILN_ERROR_INVALID_DEVICE, "%s: device %d does not exist (%d devices)", kApi,
                  deviceId, state->devices->count());
    }
    device->memory().empty_cache();
    return KILN_SUCCESS;
  });
}

}  // extern "C"
