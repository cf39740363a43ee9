// The process-wide Kiln runtime the Python package runs on: kilnInit on first use, never
// finalized (arrays returned by sessions own device buffers until the interpreter exits).
#pragma once

namespace kiln::python {

// kilnInit(NULL) once (KILN_DEVICES decides the devices), with intra-op threads capped at
// `threads` (> 0) when this call initializes; an initialization by someone else (kiln.rt)
// is accepted. A different thread count after initialization gives a RuntimeWarning.
// Raises kiln.Error on failure. Call with the GIL held.
void ensure_runtime(int threads);

}  // namespace kiln::python
