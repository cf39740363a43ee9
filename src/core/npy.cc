// NumPy .npy read and write.
#include "core/npy.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

namespace kiln {
namespace {

struct NpyType {
  DataType dtype;
  const char* descr;  // without the byte-order character
};

constexpr NpyType kNpyTypes[] = {
    {DataType::kFloat32, "f4"},  {DataType::kFloat64, "f8"}, {DataType::kFloat16, "f2"},
    {DataType::kInt8, "i1"},     {DataType::kInt16, "i2"},   {DataType::kInt32, "i4"},
    {DataType::kInt64, "i8"},    {DataType::kUInt8, "u1"},   {DataType::kUInt16, "u2"},
    {DataType::kUInt32, "u4"},   {DataType::kUInt64, "u8"},  {DataType::kBool, "b1"},
};

// Finds the value of 'key' in the header dict; returns the text after "'key':".
Status dict_value(const std::string& header, const std::string& key, std::string* value) {
  std::string pat = "'" + key + "'";
  size_t p = header.find(pat);
  if (p == std::string::npos) return invalid_argument("header has no '%s'", key.c_str());
  p = header.find(':', p + pat.size());
  if (p == std::string::npos) return invalid_argument("header entry '%s' has no value", key.c_str());
  ++p;
  while (p < header.size() && header[p] == ' ') ++p;
  *value = header.substr(p);
  return ok_status();
}

Expected<DataType> parse_descr(const std::string& value, bool* big_endian) {
  if (value.empty() || value[0] != '\'') return invalid_argument("descr is not a string");
  size_t end = value.find('\'', 1);
  if (end == std::string::npos) return invalid_argument("descr is not a string");
  std::string d = value.substr(1, end - 1);
  if (d == "bfloat16") {
    *big_endian = false;
    return DataType::kBFloat16;
  }
  *big_endian = false;
  if (!d.empty() && (d[0] == '<' || d[0] == '>' || d[0] == '|' || d[0] == '=')) {
    *big_endian = d[0] == '>';
    d = d.substr(1);
  }
  if (d == "?") d = "b1";
  for (const auto& t : kNpyTypes)
    if (d == t.descr) return t.dtype;
  return unsupported("dtype '%s' is not supported", d.c_str());
}

Expected<std::vector<int64_t>> parse_shape(const std::string& value) {
  if (value.empty() || value[0] != '(') return invalid_argument("shape is not a tuple");
  size_t end = value.find(')');
  if (end == std::string::npos) return invalid_argument("shape is not a tuple");
  std::vector<int64_t> dims;
  const char* p = value.c_str() + 1;
  const char* e = value.c_str() + end;
  while (p < e) {
    while (p < e && (*p == ' ' || *p == ',')) ++p;
    if (p >= e) break;
    char* next = nullptr;
    errno = 0;
    long long d = std::strtoll(p, &next, 10);
    if (next == p || errno || d < 0) return invalid_argument("bad dimension in shape");
    dims.push_back(d);
    p = next;
    while (p < e && *p == 'L') ++p;  // Python 2 longs
  }
  if (dims.size() > 64) return invalid_argument("shape has more than 64 dimensions");
  return dims;
}

}  // namespace

Expected<Tensor> parse_npy(const void* data, size_t size, const std::string& name) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  if (size < 10 || std::memcmp(bytes, "\x93NUMPY", 6) != 0)
    return invalid_argument("%s: not a .npy file (bad magic)", name.c_str());
  int major = bytes[6];
  size_t header_len, header_start;
  if (major == 1) {
    header_len = bytes[8] | (static_cast<size_t>(bytes[9]) << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (size < 12) return invalid_argument("%s: truncated header", name.c_str());
    header_len = bytes[8] | (static_cast<size_t>(bytes[9]) << 8) | (static_cast<size_t>(bytes[10]) << 16) |
                 (static_cast<size_t>(bytes[11]) << 24);
    header_start = 12;
  } else {
    return unsupported("%s: .npy format version %d is not supported", name.c_str(), major);
  }
  if (header_len > size - header_start) return invalid_argument("%s: truncated header", name.c_str());
  std::string header(reinterpret_cast<const char*>(bytes + header_start), header_len);
  bool big_endian = false;
  std::string descr_v, order_v, shape_v;
  KILN_RETURN_IF_ERROR(dict_value(header, "descr", &descr_v), "%s", name.c_str());
  KILN_ASSIGN_OR_RETURN(DataType dtype, parse_descr(descr_v, &big_endian), "%s", name.c_str());
  KILN_RETURN_IF_ERROR(dict_value(header, "fortran_order", &order_v), "%s", name.c_str());
  bool fortran = order_v.rfind("True", 0) == 0;
  KILN_RETURN_IF_ERROR(dict_value(header, "shape", &shape_v), "%s", name.c_str());
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> dims, parse_shape(shape_v), "%s", name.c_str());
  // The data must be there before the tensor is allocated: a 100-byte file whose header
  // claims a huge shape is truncated, not a reason to allocate gigabytes (found by fuzz/npy.cc).
  size_t need = 0;
  if (!Tensor::storage_bytes_for(dtype, dims, &need))
    return invalid_argument("%s: shape %s is negative or too large", name.c_str(), dims_to_string(dims).c_str());
  need = dtype_bytes(dtype, num_elements(dims));
  size_t avail = size - header_start - header_len;
  if (avail < need)
    return invalid_argument("%s: truncated data: %zu bytes, shape %s needs %zu", name.c_str(), avail,
                            dims_to_string(dims).c_str(), need);
  KILN_ASSIGN_OR_RETURN(Tensor t, Tensor::allocate(dtype, dims), "%s", name.c_str());
  const unsigned char* src = bytes + header_start + header_len;
  size_t esize = dtype_bytes(dtype, 1);
  auto* dst = static_cast<unsigned char*>(t.raw_data());
  if (!fortran || dims.size() < 2) {
    if (need) std::memcpy(dst, src, need);
  } else {
    // Fortran order: the first index varies fastest. Walk C order and gather.
    int rank = static_cast<int>(dims.size());
    std::vector<int64_t> fstride(dims.size(), 1);
    for (int i = 1; i < rank; ++i) fstride[i] = fstride[i - 1] * dims[i - 1];
    std::vector<int64_t> idx(dims.size(), 0);
    for (int64_t c = 0; c < t.num_elements(); ++c) {
      int64_t f = 0;
      for (int i = 0; i < rank; ++i) f += idx[i] * fstride[i];
      std::memcpy(dst + c * esize, src + f * esize, esize);
      for (int i = rank - 1; i >= 0; --i) {
        if (++idx[i] < dims[i]) break;
        idx[i] = 0;
      }
    }
  }
  if (big_endian && esize > 1)
    for (int64_t i = 0; i < t.num_elements(); ++i) std::reverse(dst + i * esize, dst + (i + 1) * esize);
  return t;
}

Expected<Tensor> read_npy(const std::string& path) {
  // A directory opens as a stream on Linux and fails only on the first read (with an
  // exception from the stream buffer): name it before.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return invalid_argument("%s is a directory, not a .npy file", path.c_str());
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("%s: cannot open: %s", path.c_str(), std::strerror(errno));
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse_npy(bytes.data(), bytes.size(), path);
}

Status write_npy(const std::string& path, const Tensor& tensor) {
  std::string descr;
  if (tensor.dtype() == DataType::kBFloat16) {
    descr = "bfloat16";
  } else {
    for (const auto& t : kNpyTypes)
      if (t.dtype == tensor.dtype()) descr = std::string(dtype_bytes(t.dtype, 1) == 1 ? "|" : "<") + t.descr;
  }
  if (descr.empty())
    return unsupported("%s: cannot write dtype %s to .npy", path.c_str(), dtype_name(tensor.dtype()));
  std::string shape = "(";
  for (int64_t d : tensor.dims()) shape += std::to_string(d) + ", ";
  if (tensor.rank() > 1) shape.resize(shape.size() - 2);
  if (tensor.rank() == 1) shape.resize(shape.size() - 1);
  shape += ")";
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  // Pad with spaces so that the data starts at a multiple of 64 bytes, ending in '\n'.
  bool v2 = header.size() + 11 > 65535;
  size_t prefix = v2 ? 12 : 10;
  size_t total = prefix + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  if (!out) return unavailable("%s: cannot write: %s", path.c_str(), std::strerror(errno));
  out.write("\x93NUMPY", 6);
  char ver[2] = {static_cast<char>(v2 ? 2 : 1), 0};
  out.write(ver, 2);
  uint32_t len = static_cast<uint32_t>(header.size());
  char lenb[4] = {static_cast<char>(len & 0xff), static_cast<char>((len >> 8) & 0xff),
                  static_cast<char>((len >> 16) & 0xff), static_cast<char>((len >> 24) & 0xff)};
  out.write(lenb, v2 ? 4 : 2);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(static_cast<const char*>(tensor.raw_data()), static_cast<std::streamsize>(tensor.size_bytes()));
  if (!out) return unavailable("%s: write failed: %s", path.c_str(), std::strerror(errno));
  return ok_status();
}

}  // namespace kiln
