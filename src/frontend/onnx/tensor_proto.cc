// TensorProto -> kiln::Tensor: dtype and dims checks, raw_data, the typed repeated fields
// with ONNX's packing rules, and external data files.
#include "frontend/onnx/tensor_proto.h"

#include <sys/stat.h>

#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>

namespace kiln::frontend {

namespace {

namespace fs = std::filesystem;

std::string dims_text(const onnx::TensorProto& proto) {
  std::string s = "[";
  for (int i = 0; i < proto.dims_size(); ++i) {
    if (i) s += ',';
    s += std::to_string(proto.dims(i));
  }
  return s + "]";
}

// Element count of the proto's dims, rejecting negative extents and overflow.
Expected<int64_t> element_count(const onnx::TensorProto& proto, const std::string& what) {
  int64_t n = 1;
  for (int i = 0; i < proto.dims_size(); ++i) {
    int64_t d = proto.dims(i);
    if (d < 0)
      return invalid_argument("%s: negative dimension %lld in %s", what.c_str(),
                              static_cast<long long>(d), dims_text(proto).c_str());
    // Bound the count so that count * 16 bytes (complex128) cannot overflow size_t.
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / 16 / d)
      return invalid_argument("%s: shape %s is too large", what.c_str(), dims_text(proto).c_str());
    n *= d;
  }
  return n;
}

Status count_mismatch(const std::string& what, const char* field, int64_t have, int64_t need,
                      DataType dt, const onnx::TensorProto& proto) {
  return invalid_argument("%s: %s has %lld values, %s%s needs %lld", what.c_str(), field,
                          static_cast<long long>(have), dtype_name(dt), dims_text(proto).c_str(),
                          static_cast<long long>(need));
}

// Copies a repeated field into the tensor, converting each element with `conv`.
template <typename Dst, typename Field, typename Conv>
void copy_field(const Field& field, Tensor& t, Conv conv) {
  Dst* out = static_cast<Dst*>(t.raw_data());
  for (int i = 0; i < field.size(); ++i) out[i] = conv(field.Get(i));
}

// The typed repeated field a dtype uses, per onnx.proto: int32_data carries every type
// of 16 bits or fewer, one element per value, the 4-bit types two per value and the 2-bit
// types four per value (one packed byte each);
// uint64_data carries uint32/uint64; float_data and double_data carry the complex types
// as (real, imaginary) pairs.
struct TypedField {
  const char* name;
  int64_t have;
  int64_t want;
};

TypedField typed_field(const onnx::TensorProto& proto, DataType dt, int64_t n) {
  switch (dt) {
    case DataType::kFloat32:
      return {"float_data", proto.float_data_size(), n};
    case DataType::kComplex64:
      return {"float_data", proto.float_data_size(), 2 * n};
    case DataType::kFloat64:
      return {"double_data", proto.double_data_size(), n};
    case DataType::kComplex128:
      return {"double_data", proto.double_data_size(), 2 * n};
    case DataType::kInt64:
      return {"int64_data", proto.int64_data_size(), n};
    case DataType::kUInt32:
    case DataType::kUInt64:
      return {"uint64_data", proto.uint64_data_size(), n};
    case DataType::kString:
      return {"string_data", proto.string_data_size(), n};
    case DataType::kUInt4:
    case DataType::kInt4:
    case DataType::kFloat4E2M1:
      return {"int32_data", proto.int32_data_size(), (n + 1) / 2};
    case DataType::kUInt2:
    case DataType::kInt2:
      return {"int32_data", proto.int32_data_size(), (n + 3) / 4};
    default:
      return {"int32_data", proto.int32_data_size(), n};
  }
}

// Copies the typed field into `t`; typed_field() sizes were checked by the caller.
void read_typed_fields(const onnx::TensorProto& proto, DataType dt, Tensor& t) {
  auto same = [](auto v) { return v; };
  switch (dt) {
    case DataType::kFloat32:
    case DataType::kComplex64:
      copy_field<float>(proto.float_data(), t, same);
      return;
    case DataType::kFloat64:
    case DataType::kComplex128:
      copy_field<double>(proto.double_data(), t, same);
      return;
    case DataType::kInt64:
      copy_field<int64_t>(proto.int64_data(), t, same);
      return;
    case DataType::kUInt64:
      copy_field<uint64_t>(proto.uint64_data(), t, same);
      return;
    case DataType::kUInt32:
      copy_field<uint32_t>(proto.uint64_data(), t,
                           [](uint64_t v) { return static_cast<uint32_t>(v); });
      return;
    case DataType::kInt32:
      copy_field<int32_t>(proto.int32_data(), t, same);
      return;
    case DataType::kInt16:
      copy_field<int16_t>(proto.int32_data(), t, [](int32_t v) { return static_cast<int16_t>(v); });
      return;
    case DataType::kUInt16:
    case DataType::kFloat16:
    case DataType::kBFloat16:
      // Half types are stored as their bit patterns.
      copy_field<uint16_t>(proto.int32_data(), t,
                           [](int32_t v) { return static_cast<uint16_t>(v); });
      return;
    case DataType::kInt8:
      copy_field<int8_t>(proto.int32_data(), t, [](int32_t v) { return static_cast<int8_t>(v); });
      return;
    case DataType::kBool:
      copy_field<bool>(proto.int32_data(), t, [](int32_t v) { return v != 0; });
      return;
    case DataType::kString:
      copy_field<std::string>(proto.string_data(), t, [](const std::string& v) { return v; });
      return;
    default:
      // uint8, the float8 kinds, and the 4-bit and 2-bit kinds (one packed byte per value).
      copy_field<uint8_t>(proto.int32_data(), t, [](int32_t v) { return static_cast<uint8_t>(v); });
      return;
  }
}

// True if `s` parses completely as a non-negative decimal integer.
bool parse_size(const std::string& s, int64_t* out) {
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, *out);
  return ec == std::errc() && p == end && *out >= 0;
}

// Resolves an external-data location against `dir`, refusing anything that could name
// a file outside it: absolute paths, ".." components, and symlinks leading out.
Expected<fs::path> resolve_location(const std::string& location, const std::string& dir,
                                    const std::string& what) {
  if (location.empty())
    return invalid_argument("%s: external data has no 'location'", what.c_str());
  if (location.find('\0') != std::string::npos)
    return invalid_argument("%s: external data location contains a NUL byte", what.c_str());
  fs::path loc(location);
  if (loc.is_absolute() || loc.has_root_name() || loc.has_root_directory())
    return invalid_argument(
        "%s: external data location '%s' is absolute; it must be relative to the "
        "model's folder",
        what.c_str(), location.c_str());
  for (const fs::path& part : loc)
    if (part == "..")
      return invalid_argument("%s: external data location '%s' leaves the model's folder ('..')",
                              what.c_str(), location.c_str());
  if (dir.empty())
    return failed_precondition(
        "%s: uses external data file '%s', but the model was given as bytes "
        "with no external_data_dir to find it in",
        what.c_str(), location.c_str());
  fs::path full = fs::path(dir) / loc;
  std::error_code ec;
  fs::path base = fs::weakly_canonical(fs::path(dir), ec);
  if (ec)
    return not_found("%s: external data folder '%s': %s", what.c_str(), dir.c_str(),
                     ec.message().c_str());
  fs::path real = fs::weakly_canonical(full, ec);
  if (ec)
    return not_found("%s: external data file '%s': %s", what.c_str(), full.string().c_str(),
                     ec.message().c_str());
  auto rel = real.lexically_relative(base);
  if (rel.empty() || *rel.begin() == "..")
    return invalid_argument("%s: external data location '%s' resolves outside the model's folder",
                            what.c_str(), location.c_str());
  return full;
}

// An external-data file opened and checked to hold the tensor's bytes.
struct ExternalSource {
  std::unique_ptr<FILE, int (*)(FILE*)> file{nullptr, &std::fclose};
  int64_t offset = 0;
  std::string path;
};

Expected<ExternalSource> open_external(const onnx::TensorProto& proto,
                                       const TensorProtoContext& ctx, size_t need_bytes,
                                       const std::string& what) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : proto.external_data()) {
    if (kv.key() == "location") {
      location = kv.value();
    } else if (kv.key() == "offset") {
      if (!parse_size(kv.value(), &offset))
        return invalid_argument("%s: external data offset '%s' is not a non-negative integer",
                                what.c_str(), kv.value().c_str());
    } else if (kv.key() == "length") {
      if (!parse_size(kv.value(), &length))
        return invalid_argument("%s: external data length '%s' is not a non-negative integer",
                                what.c_str(), kv.value().c_str());
    }
    // "checksum" and unknown keys are informational.
  }
  KILN_ASSIGN_OR_RETURN(fs::path path, resolve_location(location, ctx.external_data_dir, what));
  ExternalSource src;
  src.path = path.string();
  src.offset = offset;
  const char* p = src.path.c_str();
  if (length >= 0 && static_cast<uint64_t>(length) != need_bytes)
    return invalid_argument("%s: external data length is %lld bytes, %s%s needs %zu", what.c_str(),
                            static_cast<long long>(length),
                            dtype_name(static_cast<DataType>(proto.data_type())),
                            dims_text(proto).c_str(), need_bytes);
  src.file.reset(std::fopen(p, "rb"));
  if (!src.file)
    return not_found("%s: cannot open external data file '%s': %s", what.c_str(), p,
                     std::strerror(errno));
  struct stat st;
  if (fstat(fileno(src.file.get()), &st) != 0 || !S_ISREG(st.st_mode))
    return invalid_argument("%s: external data '%s' is not a regular file", what.c_str(), p);
  uint64_t size = static_cast<uint64_t>(st.st_size);
  if (static_cast<uint64_t>(offset) > size || size - static_cast<uint64_t>(offset) < need_bytes)
    return out_of_range(
        "%s: external data file '%s' is %llu bytes, too short for %zu bytes at offset %lld",
        what.c_str(), p, static_cast<unsigned long long>(size), need_bytes,
        static_cast<long long>(offset));
  return src;
}

Status read_external(ExternalSource& src, size_t need_bytes, Tensor& t, const std::string& what) {
  if (need_bytes == 0) return ok_status();
  if (fseeko(src.file.get(), static_cast<off_t>(src.offset), SEEK_SET) != 0 ||
      std::fread(t.raw_data(), 1, need_bytes, src.file.get()) != need_bytes)
    return data_loss("%s: reading %zu bytes at offset %lld of '%s' failed", what.c_str(),
                     need_bytes, static_cast<long long>(src.offset), src.path.c_str());
  return ok_status();
}

}  // namespace

Expected<DataType> dtype_from_onnx(int32_t elem_type, const std::string& what) {
  if (!dtype_is_valid(elem_type))
    return unsupported("%s: unknown ONNX element type %d", what.c_str(),
                       static_cast<int>(elem_type));
  return static_cast<DataType>(elem_type);
}

Expected<Tensor> tensor_from_proto(const onnx::TensorProto& proto, const TensorProtoContext& ctx,
                                   const std::string& what) {
  if (proto.has_segment())
    return unsupported("%s: segmented tensors are not supported", what.c_str());
  KILN_ASSIGN_OR_RETURN(DataType dt, dtype_from_onnx(proto.data_type(), what));
  if (dt == DataType::kUndefined)
    return invalid_argument("%s: data_type is undefined (0)", what.c_str());
  KILN_ASSIGN_OR_RETURN(int64_t n, element_count(proto, what));
  std::vector<int64_t> dims(proto.dims().begin(), proto.dims().end());
  const bool external = proto.data_location() == onnx::TensorProto::EXTERNAL;
  const size_t need_bytes = dt == DataType::kString ? 0 : dtype_bytes(dt, n);

  // Every size is checked against the data actually present before allocating, so a
  // hostile shape cannot make us allocate more than the file holds.
  if (dt == DataType::kString && (external || proto.has_raw_data()))
    return invalid_argument("%s: string tensors must use string_data, not raw or external data",
                            what.c_str());
  const bool raw = !external && dt != DataType::kString && proto.has_raw_data();
  if (raw && proto.raw_data().size() != need_bytes)
    return invalid_argument("%s: raw_data has %zu bytes, %s%s needs %zu", what.c_str(),
                            proto.raw_data().size(), dtype_name(dt), dims_text(proto).c_str(),
                            need_bytes);
  ExternalSource src;
  if (external) {
    KILN_ASSIGN_OR_RETURN(src, open_external(proto, ctx, need_bytes, what));
  } else if (!raw) {
    TypedField f = typed_field(proto, dt, n);
    if (f.have != f.want) return count_mismatch(what, f.name, f.have, f.want, dt, proto);
  }
  KILN_ASSIGN_OR_RETURN(Tensor t, Tensor::allocate(dt, std::move(dims)), "%s", what.c_str());

  if (external) {
    KILN_RETURN_IF_ERROR(read_external(src, need_bytes, t, what));
  } else if (raw) {
    // raw_data is little-endian, as is every host Kiln builds for.
    if (need_bytes) std::memcpy(t.raw_data(), proto.raw_data().data(), need_bytes);
  } else {
    read_typed_fields(proto, dt, t);
    return t;
  }
  if (dt == DataType::kBool) {
    // A bool must hold 0 or 1; normalise whatever bytes the file had.
    uint8_t* b = static_cast<uint8_t*>(t.raw_data());
    for (int64_t i = 0; i < n; ++i) b[i] = b[i] != 0;
  }
  return t;
}

}  // namespace kiln::frontend
