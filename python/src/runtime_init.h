// The process-wide Kiln runtime the Python package runs on: kilnInit on first use, never
// finalized (arrays returned by sessions own device buffers until the interpreter exits).
#pragma once

namespace kiln::python {

// kilnInit(NULL) when the runtime is not running (KILN_DEVICES decides the devices), with
// intra-op threads capped at `threads` (> 0) the first time; an initialization by the low
// level (kiln.init) is accepted, and so is a re-initialization after kiln.finalize. A
// different thread count once running gives a RuntimeWarning. Raises kiln.Error on failure.
// Call with the GIL held.
void ensure_runtime(int threads);

}  // namespace kiln::python
