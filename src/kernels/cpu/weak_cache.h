// A process-wide cache of shared objects that live only while someone holds them: packed
// weights shared by the kernels one node gets at several input shapes
// (kernels/shape_specialized_kernel.h). Entries whose last holder is gone are dropped on the
// next lookup; a handful per model, so lookups scan.
#pragma once

#include <algorithm>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace kiln::kernels {

template <typename Key, typename T>
class WeakCache {
 public:
  // The live object for `key`, or the one `make` builds (outside the lock: packing takes
  // milliseconds; two threads making the same key at once each keep their own, which is
  // correct, only not shared). `make` may throw; nothing is cached then.
  std::shared_ptr<T> get_or_make(const Key& key, const std::function<std::shared_ptr<T>()>& make) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      std::erase_if(entries_, [](const auto& e) { return e.second.expired(); });
      for (const auto& [k, weak] : entries_)
        if (k == key)
          if (auto live = weak.lock()) return live;
    }
    std::shared_ptr<T> made = make();
    if (made) {
      std::lock_guard<std::mutex> lock(mutex_);
      entries_.emplace_back(key, made);
    }
    return made;
  }

 private:
  std::mutex mutex_;
  std::vector<std::pair<Key, std::weak_ptr<T>>> entries_;
};

}  // namespace kiln::kernels
