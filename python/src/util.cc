// kiln.util (pyACL's acl.util: NumPy arrays <-> addresses) and the top-level functions pyACL
// has on `acl` itself: init/finalize, data buffers, tensor descriptions, data types, errors.
// Conventions: lowlevel.h.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "python/src/binders.h"
#include "python/src/lowlevel.h"

namespace kiln::python {
namespace {

using Ptr = std::uintptr_t;

void bind_top_level(py::module_& m) {
  // Data types and formats (kiln.h's enums, AscendCL's numbering).
  for (const auto& [name, value] : std::initializer_list<std::pair<const char*, int>>{
           {"DT_UNDEFINED", KILN_DT_UNDEFINED}, {"FLOAT", KILN_FLOAT}, {"FLOAT16", KILN_FLOAT16},
           {"INT8", KILN_INT8}, {"INT32", KILN_INT32}, {"UINT8", KILN_UINT8}, {"INT16", KILN_INT16},
           {"UINT16", KILN_UINT16}, {"UINT32", KILN_UINT32}, {"INT64", KILN_INT64}, {"UINT64", KILN_UINT64},
           {"DOUBLE", KILN_DOUBLE}, {"BOOL", KILN_BOOL}, {"STRING", KILN_STRING},
           {"COMPLEX64", KILN_COMPLEX64}, {"COMPLEX128", KILN_COMPLEX128}, {"BF16", KILN_BF16},
           {"FORMAT_UNDEFINED", KILN_FORMAT_UNDEFINED}, {"FORMAT_NCHW", KILN_FORMAT_NCHW},
           {"FORMAT_NHWC", KILN_FORMAT_NHWC}, {"FORMAT_ND", KILN_FORMAT_ND},
           {"FORMAT_NC1HWC0", KILN_FORMAT_NC1HWC0}, {"SUCCESS", KILN_SUCCESS}})
    m.attr(name) = value;

  m.def("init", [](std::optional<std::string> config) {
    py::gil_scoped_release release;
    return kilnInit(config ? config->c_str() : nullptr);
  }, py::arg("config_path") = py::none(),
        "init(config_path=None) -> ret: kilnInit. config_path: None (KILN_DEVICES=cpu:N decides) or a "
        "JSON file such as {\"devices\": \"cpu:2\"}. 100002 when already initialized (an "
        "InferenceSession initializes the runtime too).");
  m.def("finalize", [] {
    py::gil_scoped_release release;
    return kilnFinalize();
  }, "finalize() -> ret: waits for all work and releases every stream, event, context, model and "
     "allocation. InferenceSession objects and their outputs must be gone before.");
  m.def("get_recent_err_msg", [] { return std::string(kilnGetRecentErrMsg()); },
        "get_recent_err_msg() -> str: the message of this thread's last failed call ('' if none).");
  m.def("data_type_size", [](int dtype) { return kilnDataTypeSize(static_cast<kilnDataType>(dtype)); },
        py::arg("data_type"), "data_type_size(data_type) -> int: bytes per element (0 for STRING).");

  // Data buffers.
  m.def("create_data_buffer", [](py::object data, size_t size) {
    return handle_int(kilnCreateDataBuffer(address_arg(data, true), size));
  }, py::arg("data"), py::arg("size"),
        "create_data_buffer(data, size) -> data_buffer: wraps (does not own) size bytes at the address "
        "data (device memory from kiln.rt.malloc); 0 on failure.");
  m.def("destroy_data_buffer", [](Ptr b) { return kilnDestroyDataBuffer(handle_ptr<kilnDataBuffer>(b)); },
        py::arg("data_buffer"), "destroy_data_buffer(data_buffer) -> ret: the memory is not freed.");
  m.def("update_data_buffer", [](Ptr b, py::object data, size_t size) {
    return kilnUpdateDataBuffer(handle_ptr<kilnDataBuffer>(b), address_arg(data, true), size);
  }, py::arg("data_buffer"), py::arg("data"), py::arg("size"), "update_data_buffer(data_buffer, data, size) -> ret.");
  m.def("get_data_buffer_addr", [](Ptr b) { return handle_int(kilnGetDataBufferAddr(handle_ptr<kilnDataBuffer>(b))); },
        py::arg("data_buffer"), "get_data_buffer_addr(data_buffer) -> address (0 on error).");
  m.def("get_data_buffer_size_v2", [](Ptr b) { return kilnGetDataBufferSizeV2(handle_ptr<kilnDataBuffer>(b)); },
        py::arg("data_buffer"), "get_data_buffer_size_v2(data_buffer) -> bytes (0 on error).");
  m.attr("get_data_buffer_size") = m.attr("get_data_buffer_size_v2");

  // Tensor descriptions.
  m.def("create_tensor_desc", [](int dtype, std::vector<int64_t> dims, int format) {
    return handle_int(kilnCreateTensorDesc(static_cast<kilnDataType>(dtype), static_cast<int>(dims.size()),
                                           dims.data(), static_cast<kilnFormat>(format)));
  }, py::arg("data_type"), py::arg("dims"), py::arg("format"),
        "create_tensor_desc(data_type, dims, format) -> tensor_desc (0 on failure).");
  m.def("destroy_tensor_desc", [](Ptr d) { kilnDestroyTensorDesc(handle_ptr<kilnTensorDesc>(d)); },
        py::arg("tensor_desc"), "destroy_tensor_desc(tensor_desc) -> None.");
  m.def("get_tensor_desc_type", [](Ptr d) { return int(kilnGetTensorDescType(handle_ptr<kilnTensorDesc>(d))); },
        py::arg("tensor_desc"), "get_tensor_desc_type(tensor_desc) -> data_type.");
  m.def("get_tensor_desc_format", [](Ptr d) { return int(kilnGetTensorDescFormat(handle_ptr<kilnTensorDesc>(d))); },
        py::arg("tensor_desc"), "get_tensor_desc_format(tensor_desc) -> format.");
  m.def("get_tensor_desc_num_dims", [](Ptr d) { return kilnGetTensorDescNumDims(handle_ptr<kilnTensorDesc>(d)); },
        py::arg("tensor_desc"), "get_tensor_desc_num_dims(tensor_desc) -> int.");
  m.def("get_tensor_desc_dim_v2", [](Ptr d, size_t i) {
    int64_t dim = 0;
    kilnError ret = kilnGetTensorDescDimV2(handle_ptr<kilnTensorDesc>(d), i, &dim);
    return py::make_tuple(dim, ret);
  }, py::arg("tensor_desc"), py::arg("index"), "get_tensor_desc_dim_v2(tensor_desc, index) -> (dim, ret).");
  m.def("get_tensor_desc_element_count", [](Ptr d) {
    return kilnGetTensorDescElementCount(handle_ptr<kilnTensorDesc>(d));
  }, py::arg("tensor_desc"), "get_tensor_desc_element_count(tensor_desc) -> int.");
  m.def("get_tensor_desc_size", [](Ptr d) { return kilnGetTensorDescSize(handle_ptr<kilnTensorDesc>(d)); },
        py::arg("tensor_desc"), "get_tensor_desc_size(tensor_desc) -> bytes.");
}

void bind_util_module(py::module_& m) {
  m.def("numpy_to_ptr", [](py::array a) {
    if (!(a.flags() & py::array::c_style))
      throw py::value_error("numpy_to_ptr: the array is not C-contiguous (use numpy.ascontiguousarray)");
    return handle_int(a.data());
  }, py::arg("array"),
        "numpy_to_ptr(array) -> address of a C-contiguous array's first byte (host memory). The "
        "array must outlive every use of the address.");
  m.def("ptr_to_numpy", [](Ptr p, std::vector<py::ssize_t> shape, py::object dtype) {
    if (p == 0) throw py::value_error("ptr_to_numpy: null address");
    py::dtype dt = py::isinstance<py::int_>(dtype) ? py::dtype(dtype.cast<int>()) : py::dtype::from_args(dtype);
    // A view that owns nothing: the base capsule (no destructor work) keeps NumPy from
    // copying; the memory lives until kiln.rt.free / free_host, after which the view must
    // not be used.
    py::capsule base(reinterpret_cast<void*>(p), [](void*) {});
    return py::array(dt, shape, reinterpret_cast<void*>(p), base);
  }, py::arg("ptr"), py::arg("shape"), py::arg("dtype"),
        "ptr_to_numpy(ptr, shape, dtype) -> a writable NumPy view (no copy) of host-addressable memory: "
        "kiln.rt.malloc_host memory, and kiln.rt.malloc memory of the CPU device. dtype: a NumPy dtype "
        "or its type number as pyACL passes it. The view does not own the memory: do not use it after "
        "free. (An accelerator's device memory is not host-addressable: copy it with kiln.rt.memcpy.)");
  m.def("bytes_to_ptr", [](py::object b) { return handle_int(address_arg(b, false)); }, py::arg("data"),
        "bytes_to_ptr(data) -> address of a bytes/bytearray object's contents (read-only for bytes).");
  m.def("ptr_to_bytes", [](Ptr p, size_t size) {
    if (p == 0 && size != 0) throw py::value_error("ptr_to_bytes: null address");
    return py::bytes(reinterpret_cast<const char*>(p), size);
  }, py::arg("ptr"), py::arg("size"),
        "ptr_to_bytes(ptr, size) -> bytes: a copy of size bytes of host-addressable memory.");
}

}  // namespace

void bind_util(py::module_& m) {
  bind_top_level(m);  // kiln/__init__.py re-exports the native module's public names
  py::module_ util = m.def_submodule(
      "util", "NumPy arrays <-> addresses (pyACL's acl.util). On the CPU device, device memory is "
              "host-addressable, so ptr_to_numpy views kiln.rt.malloc memory without a copy.");
  bind_util_module(util);
}

}  // namespace kiln::python
