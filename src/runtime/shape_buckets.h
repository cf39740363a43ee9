// Run-time side of shape buckets (kiln compile --dynamic-batch-size / --dynamic-dims): the
// output shapes a graph with open dims gives for concrete input shapes, and the padding of
// inputs into a bucket and slicing of outputs back to their true size.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "ir/graph.h"

namespace kiln::rt {

// The dims of every output of `graph` when its inputs have the given dims (pairs of index
// in graph.inputs() and dims; inputs not listed keep their declared type): shape inference
// over the graph, with the small shape computations (Shape, Size and nodes whose inputs are
// all known, e.g. Gather/Concat/Unsqueeze chains feeding a Reshape) evaluated by their
// reference kernels so that the shapes they produce become static. Fails when an output's
// shape stays open (it depends on data, or an op's inference cannot tell): the caller then
// runs the graph to learn it. Does not modify the graph.
Expected<std::vector<std::vector<int64_t>>> infer_output_dims(
    const ir::Graph& graph, const std::vector<std::pair<size_t, std::vector<int64_t>>>& input_dims);

// A tensor of dims `to` (each >= the source's) holding `src` at its origin and `pad_value`
// (converted to the dtype) everywhere else. Allocated from the thread's TensorAllocator.
Expected<Tensor> pad_tensor(const Tensor& src, const std::vector<int64_t>& to, double pad_value);

// Copies the leading block of dims `to` (each <= the source's) of `src` into `dst`, densely
// (row-major). `dst` must hold dtype_bytes(src.dtype(), product of `to`) bytes.
void copy_leading_block(const Tensor& src, const std::vector<int64_t>& to, void* dst);

}  // namespace kiln::rt
