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
  static bool initialized = false;
  static int initial_threads = 0;
  std::lock_guard lock(mutex);
  if (!initialized) {
    tools::cap_threads(threads);
    kilnError e = kilnInit(nullptr);
    if (e != KILN_SUCCESS && e != KILN_ERROR_REPEAT_INITIALIZE) throw_api_error(e, "kilnInit");
    initialized = true;
    initial_threads = threads;
    return;
  }
  if (threads > 0 && threads != initial_threads) {
    std::string msg = "threads=" + std::to_string(threads) +
                      " ignored: the runtime was initialized with " +
                      (initial_threads > 0 ? std::to_string(initial_threads) : std::string("the default")) +
                      " threads per device (the first session decides)";
    if (PyErr_WarnEx(PyExc_RuntimeWarning, msg.c_str(), 1) < 0) throw py::error_already_set();
  }
}

}  // namespace kiln::python
