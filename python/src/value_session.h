// The execution path of kiln.InferenceSession for models whose inputs or outputs are not
// plain tensors: strings, sequences and optionals. The C API carries fixed-size tensor
// elements in data buffers only (as AscendCL does), so such a model runs on Kiln's graph
// executor directly, with ONNX Runtime's Python conventions for the values:
//   string tensor   <-> numpy array of str (dtype object; str, bytes or numpy 'U'/'S' in)
//   sequence        <-> list of numpy arrays
//   empty optional  <-> None
// Numeric tensors are copied in and out (these models are rare and small: the copy keeps
// the graph's weights, which an output may alias, out of the caller's reach).
#pragma once

#include <memory>
#include <shared_mutex>
#include <string>
#include <vector>

#include <pybind11/pybind11.h>

#include "ir/graph.h"
#include "python/src/node_arg.h"
#include "runtime/graph_executor.h"

namespace kiln::python {

class ValueSession {
 public:
  // Whether some input or output of `graph` is a sequence, an optional or a string tensor.
  static bool needed(const ir::Graph& graph);

  // Prepares the executor; raises kiln.Error when the graph cannot run. Call with the GIL.
  ValueSession(std::shared_ptr<const ir::Graph> graph, std::string path);

  std::vector<NodeArg> inputs() const;
  std::vector<NodeArg> outputs() const;
  // InferenceSession.run: the feed checked and converted, the graph run with the GIL
  // released, the outputs converted. Errors name the input or output at fault.
  py::list run(py::object output_names, py::dict feed);
  void close();
  bool closed();

 private:
  std::string path_;
  std::shared_ptr<const ir::Graph> graph_;
  std::vector<const ir::Value*> inputs_;  // graph inputs without an initializer
  std::unique_ptr<rt::GraphExecutor> executor_;
  std::shared_mutex mutex_;
  bool closed_ = false;
};

}  // namespace kiln::python
