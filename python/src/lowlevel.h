// What the pyACL-shaped binders (rt.cc, mdl.cc, prof.cc, comm.cc, util.cc) share: handles
// and addresses as Python ints, as pyACL passes them.
//
// Conventions of the low-level modules (docs/python.md, "Low level (pyACL)"): every function
// wraps one C API function; a kilnError comes back as the int `ret` (0 is success, the
// message in kiln.get_recent_err_msg()), a value as the tuple (value, ret); handles and
// addresses are ints (0 for NULL). Nothing here raises kiln.Error: a wrong Python type is a
// TypeError from pybind11, everything the C API checks is a code.
#pragma once

#include <cstdint>

#include <pybind11/pybind11.h>

#include "kiln/kiln.h"

namespace kiln::python {

namespace py = pybind11;

// A handle or address as the int Python sees (0 for NULL).
inline std::uintptr_t handle_int(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

template <class T>
T* handle_ptr(std::uintptr_t h) {
  return reinterpret_cast<T*>(h);
}

// An address argument: an int (an address from kiln.rt.malloc, numpy_to_ptr, ...), None
// (NULL), or an object with the buffer protocol (a NumPy array, bytearray; bytes when
// `writable` is false) whose first byte is taken. The object must outlive the use of the
// address: for asynchronous calls, until the stream has passed the call.
inline void* address_arg(const py::handle& obj, bool writable) {
  if (obj.is_none()) return nullptr;
  if (PyLong_Check(obj.ptr())) return reinterpret_cast<void*>(obj.cast<std::uintptr_t>());
  Py_buffer view;
  if (PyObject_GetBuffer(obj.ptr(), &view, writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) != 0)
    throw py::error_already_set();
  void* p = view.buf;
  PyBuffer_Release(&view);  // the exporter keeps the memory while the object lives
  return p;
}

}  // namespace kiln::python
