// The Python package's runtime (python/src/runtime_init.h).
#include "python/src/runtime_init.h"

#include <mutex>
#include <string>

#include "python/src/binders.h"
#include "python/src/errors.h"
#include "tools/api_session.h"

namespace kiln::python {

void ensure_runtime(int threads) {
  static std::mutex mutex;
  static int initial_threads = 0;  // of the first initialization made here; -1: the default
  std::lock_guard lock(mutex);
  // Asked every time: the low level (kiln.init, kiln.finalize) may have changed it since.
  uint32_t devices = 0;
  if (kilnrtGetDeviceCount(&devices) != KILN_SUCCESS) {
    if (initial_threads == 0) tools::cap_threads(threads);  // read once per process
    kilnError e = kilnInit(nullptr);
    if (e != KILN_SUCCESS && e != KILN_ERROR_REPEAT_INITIALIZE) throw_api_error(e, "kilnInit");
    if (initial_threads == 0) initial_threads = threads > 0 ? threads : -1;
    return;
  }
  if (threads > 0 && threads != initial_threads) {
    std::string msg = "threads=" + std::to_string(threads) +
                      " ignored: the runtime was initialized with " +
                      (initial_threads > 0 ? std::to_string(initial_threads) : std::string(initial_threads < 0 ? "the default" : "kiln.init's")) +
                      " threads per device (the first session decides)";
    if (PyErr_WarnEx(PyExc_RuntimeWarning, msg.c_str(), 1) < 0) throw py::error_already_set();
  }
}

}  // namespace kiln::python
