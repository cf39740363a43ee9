// Reading the calibration set (calibration_data.h).
#include "quant/calibration_data.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <system_error>

#include "core/npy.h"
#include "core/shape.h"
#include "quant/image_preprocess.h"

namespace kiln::quant {
namespace fs = std::filesystem;
namespace {

std::string dims_text(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? "," : "") + (dims[i] < 0 ? std::string("?") : std::to_string(dims[i]));
  return s + "]";
}

// Splits a batch along axis 0 into tensors with a batch dim of 1.
std::vector<Tensor> split_batch(const Tensor& t) {
  std::vector<Tensor> out;
  std::vector<int64_t> dims = t.dims();
  const int64_t n = dims[0];
  dims[0] = 1;
  const size_t row_bytes = n > 0 ? t.size_bytes() / static_cast<size_t>(n) : 0;
  for (int64_t i = 0; i < n; ++i) {
    Tensor r = Tensor::make(t.dtype(), dims);
    std::memcpy(r.raw_data(), static_cast<const char*>(t.raw_data()) + static_cast<size_t>(i) * row_bytes, row_bytes);
    out.push_back(std::move(r));
  }
  return out;
}

Status check_finite(const Tensor& t, const std::string& file) {
  if (!dtype_is_float(t.dtype())) return ok_status();
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    double v = t.element_as_double(i);
    if (!std::isfinite(v))
      return invalid_argument("%s: element %lld is %s: calibration data must be finite", file.c_str(),
                              static_cast<long long>(i), std::isnan(v) ? "NaN" : "infinite");
  }
  return ok_status();
}

// Checks a file's tensor against the input and returns its samples, batch dim 1 each.
Expected<std::vector<Tensor>> samples_of(Tensor t, const ModelInput& in, const std::string& file) {
  if (t.dtype() != in.dtype)
    return invalid_argument("%s: dtype %s, but model input '%s' is %s", file.c_str(), dtype_name(t.dtype()),
                            in.name.c_str(), dtype_name(in.dtype));
  const size_t rank = in.dims.size();
  if (rank == 0) {
    if (t.rank() != 0 && !(t.rank() == 1 && t.dim(0) == 1))
      return invalid_argument("%s: shape %s, but model input '%s' is a scalar", file.c_str(), dims_text(t.dims()).c_str(),
                              in.name.c_str());
    KILN_RETURN_IF_ERROR(check_finite(t, file));
    return std::vector<Tensor>{t.reshaped({})};
  }
  const std::vector<int64_t> file_dims = t.dims();
  if (static_cast<size_t>(t.rank()) + 1 == rank) {  // one sample without its batch dim
    std::vector<int64_t> dims = t.dims();
    dims.insert(dims.begin(), 1);
    t = t.reshaped(dims);
  }
  bool shape_ok = static_cast<size_t>(t.rank()) == rank && t.dim(0) > 0;
  for (size_t i = 1; shape_ok && i < rank; ++i) shape_ok = in.dims[i] < 0 || in.dims[i] == t.dim(static_cast<int>(i));
  if (!shape_ok)
    return invalid_argument("%s: shape %s does not fit model input '%s' %s (one sample without the batch dim, or a "
                            "batch along axis 0)",
                            file.c_str(), dims_text(file_dims).c_str(), in.name.c_str(), dims_text(in.dims).c_str());
  KILN_RETURN_IF_ERROR(check_finite(t, file));
  return split_batch(t);
}

Expected<Tensor> read_file(const std::string& file) {
  auto t = read_npy(file);
  if (!t.ok()) return t.status();  // read_npy names the file
  return std::move(*t);
}

}  // namespace

std::string input_file_name(const std::string& input) {
  std::string s = input;
  for (char& c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) c = '_';
  return s + ".npy";
}

Expected<CalibrationSet> load_calibration_data(const std::vector<ModelInput>& inputs,
                                               const CalibrationDataOptions& options) {
  std::error_code ec;
  const std::string& root = options.path;
  if (!fs::is_directory(root, ec)) {
    if (!fs::exists(root, ec)) return not_found("calibration data %s does not exist", root.c_str());
    return invalid_argument("calibration data %s is not a folder", root.c_str());
  }
  if (inputs.empty()) return invalid_argument("the model has no inputs to feed");
  std::vector<std::string> dirs, npys, images, others;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    std::string p = it->path().string();
    if (it->is_directory(ec)) dirs.push_back(p);
    else if (it->path().extension() == ".npy") npys.push_back(p);
    else if (is_image_file(p)) images.push_back(p);
    else others.push_back(p);
  }
  if (ec) return invalid_argument("cannot list %s: %s", root.c_str(), ec.message().c_str());
  for (auto* v : {&dirs, &npys, &images}) std::sort(v->begin(), v->end());
  const int kinds = !dirs.empty() + !npys.empty() + !images.empty();
  if (kinds == 0)
    return invalid_argument("calibration folder %s is empty: expected .npy files, images, or one sub-folder per "
                            "sample holding <input>.npy",
                            root.c_str());
  if (kinds > 1)
    return invalid_argument("calibration folder %s mixes %s: use one layout (sample folders, .npy files or images)",
                            root.c_str(),
                            !dirs.empty() && !npys.empty() ? "sub-folders and .npy files"
                            : !dirs.empty()                ? "sub-folders and images"
                                                           : ".npy files and images");
  CalibrationSet set;
  const ModelInput& first = inputs[0];
  if (!npys.empty() || !images.empty()) {
    if (inputs.size() != 1)
      return invalid_argument("the model has %zu inputs: put each sample in its own sub-folder of %s holding one "
                              "<input>.npy per input (e.g. %s/0/%s)",
                              inputs.size(), root.c_str(), root.c_str(), input_file_name(first.name).c_str());
  }
  if (!images.empty()) {
    set.layout = "images";
    if (options.preprocess.empty())
      return invalid_argument("%s holds images: give --preprocess (e.g. resize=224,224:mean=0.485,0.456,0.406:"
                              "std=0.229,0.224,0.225:layout=NCHW:color=RGB)",
                              root.c_str());
    if (first.dtype != DataType::kFloat32)
      return invalid_argument("model input '%s' is %s: images feed float32 inputs only", first.name.c_str(),
                              dtype_name(first.dtype));
    KILN_ASSIGN_OR_RETURN(ImagePreprocess pre, parse_image_preprocess(options.preprocess));
    KILN_RETURN_IF_ERROR(resolve_image_preprocess(pre, first.dims, first.name));
    // One image is one sample: pick the files before decoding them.
    set.available = static_cast<int64_t>(images.size());
    std::vector<size_t> order(images.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    if (options.max_samples > 0 && static_cast<size_t>(options.max_samples) < images.size()) {
      std::mt19937 rng(options.seed);
      for (size_t i = order.size() - 1; i > 0; --i) std::swap(order[i], order[rng() % (i + 1)]);
      order.resize(static_cast<size_t>(options.max_samples));
      std::sort(order.begin(), order.end());
    }
    for (size_t i : order) {
      KILN_ASSIGN_OR_RETURN(Tensor t, load_image(images[i], pre));
      KILN_ASSIGN_OR_RETURN(auto s, samples_of(std::move(t), first, images[i]));
      set.samples.push_back({std::move(s[0])});
    }
    return set;
  }
  if (!npys.empty()) {
    set.layout = "npy files";
    for (const std::string& f : npys) {
      KILN_ASSIGN_OR_RETURN(Tensor t, read_file(f));
      KILN_ASSIGN_OR_RETURN(auto rows, samples_of(std::move(t), first, f));
      for (Tensor& r : rows) set.samples.push_back({std::move(r)});
    }
  } else {
    set.layout = "sample folders";
    for (const std::string& d : dirs) {
      std::vector<std::vector<Tensor>> per_input;
      for (const ModelInput& in : inputs) {
        std::string f = (fs::path(d) / input_file_name(in.name)).string();
        if (!fs::exists(f, ec))
          return invalid_argument("sample folder %s has no %s for model input '%s'", d.c_str(),
                                  input_file_name(in.name).c_str(), in.name.c_str());
        KILN_ASSIGN_OR_RETURN(Tensor t, read_file(f));
        KILN_ASSIGN_OR_RETURN(auto rows, samples_of(std::move(t), in, f));
        if (!per_input.empty() && rows.size() != per_input[0].size())
          return invalid_argument("%s holds %zu samples but %s holds %zu: every input of a sample folder needs the "
                                  "same batch",
                                  f.c_str(), rows.size(),
                                  (fs::path(d) / input_file_name(inputs[0].name)).string().c_str(), per_input[0].size());
        per_input.push_back(std::move(rows));
      }
      for (size_t r = 0; r < per_input[0].size(); ++r) {
        Sample s;
        for (auto& rows : per_input) s.push_back(std::move(rows[r]));
        set.samples.push_back(std::move(s));
      }
    }
  }
  set.available = static_cast<int64_t>(set.samples.size());
  if (set.samples.empty()) return invalid_argument("calibration folder %s holds no samples", root.c_str());
  if (options.max_samples > 0 && static_cast<size_t>(options.max_samples) < set.samples.size()) {
    std::vector<size_t> order(set.samples.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::mt19937 rng(options.seed);
    for (size_t i = order.size() - 1; i > 0; --i) std::swap(order[i], order[rng() % (i + 1)]);
    order.resize(static_cast<size_t>(options.max_samples));
    std::sort(order.begin(), order.end());
    std::vector<Sample> picked;
    for (size_t i : order) picked.push_back(std::move(set.samples[i]));
    set.samples = std::move(picked);
  }
  return set;
}

}  // namespace kiln::quant
