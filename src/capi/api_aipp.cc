// The C API of AIPP (include/kiln/kiln.h): dynamic parameter sets (kilnmdlCreateAIPP, the
// kilnmdlSetAIPP* setters, kilnmdlDestroyAIPP), writing a set into a model's parameter
// input (kilnmdlSetInputAIPP, kilnmdlSetAIPPByInputIndex), and what a loaded model's inputs
// are (kilnmdlGetAippType, kilnmdlGetFirstAippInfo).
//
// A set holds ops::AippParams, the same parameters a static Aipp node carries; writing it
// means validate_aipp against the Aipp node's output and serialize_aipp into the buffer,
// which the Aipp kernel deserializes at run time (ops/aipp_params.h). A model's AIPP inputs
// are found from its graph: each kiln Aipp node whose image input is a model input.
#include <cmath>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "ops/aipp.h"
#include "ops/aipp_params.h"
#include "ops/registry.h"
#include "profiler/profiler.h"
#include "capi/api_dataset.h"
#include "capi/api_guard.h"
#include "capi/api_internal.h"
#include "runtime/memory.h"
#include "runtime/model_runtime.h"

struct kilnmdlAIPP {
  uint64_t batch_size = 0;
  bool format_set = false;
  kiln::ops::AippParams params;  // params.batch has batch_size records
  // Per record: the resize input size given to kilnmdlSetAIPPScfParams, checked against
  // the crop (or source) size when the set is written.
  struct ScfInput {
    int32_t w = 0, h = 0;
  };
  std::vector<ScfInput> scf_input;
};

namespace kiln::rt {
namespace {

// AscendCL accepts batchSize up to its own limits; Kiln's serialized layout reads at most
// this many records (ops/aipp_params.cc).
constexpr uint64_t kMaxAippBatch = 1 << 16;

HandleSet<kilnmdlAIPP>& aipp_sets() {
  static auto* set = new HandleSet<kilnmdlAIPP>();
  return *set;
}

// The set named by a handle, or null with the message recorded.
kilnmdlAIPP* live_set(const char* api, const kilnmdlAIPP* aipp) {
  if (aipp && aipp_sets().contains(aipp)) return const_cast<kilnmdlAIPP*>(aipp);
  fail(KILN_ERROR_INVALID_PARAM, "%s: %p is not a live kilnmdlAIPP (made by kilnmdlCreateAIPP)", api,
       static_cast<const void*>(aipp));
  return nullptr;
}

kilnError check_switch(const char* api, const char* name, int8_t value) {
  if (value == 0 || value == 1) return KILN_SUCCESS;
  return fail(KILN_ERROR_INVALID_PARAM, "%s: %s is %d; it must be 0 (off) or 1 (on)", api, name, value);
}

kilnError check_batch_index(const char* api, const kilnmdlAIPP& set, uint64_t index) {
  if (index < set.batch_size) return KILN_SUCCESS;
  return fail(KILN_ERROR_INVALID_PARAM,
              "%s: batchIndex %llu is out of range: the set was created for batchSize %llu (indices 0..%llu)", api,
              static_cast<unsigned long long>(index), static_cast<unsigned long long>(set.batch_size),
              static_cast<unsigned long long>(set.batch_size - 1));
}

// The record of image `index` for a setter with an on/off switch, or null with the error in
// *error (a dead handle, a switch other than 0/1, an index out of range).
kiln::ops::AippBatchParams* switched_record(const char* api, kilnmdlAIPP* handle, const char* switch_name,
                                            int8_t on, uint64_t index, kilnError* error) {
  kilnmdlAIPP* set = live_set(api, handle);
  *error = !set ? KILN_ERROR_INVALID_PARAM : check_switch(api, switch_name, on);
  if (*error == KILN_SUCCESS) *error = check_batch_index(api, *set, index);
  return *error == KILN_SUCCESS ? &set->params.batch[index] : nullptr;
}

kilnError check_finite(const char* api, const char* what, const float v[4]) {
  for (int c = 0; c < 4; ++c)
    if (!std::isfinite(v[c]))
      return fail(KILN_ERROR_INVALID_PARAM, "%s: %s of channel %d is %g; it must be finite", api, what, c, v[c]);
  return KILN_SUCCESS;
}

// ---- A loaded model's AIPP inputs ----------------------------------------------------------

struct AippInput {
  size_t image_index = 0;            // model input of the raw image
  std::optional<size_t> params_index;  // dynamic: model input of the parameters
  const ir::Node* node = nullptr;
  ops::AippNodeInfo info;
};

// The model input index of graph value `v`, if it is one.
std::optional<size_t> model_input_of(const Model& m, const ir::Value* v) {
  if (!v) return std::nullopt;
  const std::vector<ir::Value*>& graph_inputs = m.graph().inputs();
  for (size_t i = 0; i < m.inputs().size(); ++i) {
    const size_t g = m.inputs()[i].graph_index;
    if (g < graph_inputs.size() && graph_inputs[g] == v) return i;
  }
  return std::nullopt;
}

// Every Aipp node of the model whose image is a model input, in input order. A node whose
// attributes do not decode is an error naming it (the loader already ran its inference, so
// this means a model Kiln did not write).
Expected<std::vector<AippInput>> aipp_inputs(const Model& m) {
  std::vector<AippInput> out;
  for (const std::unique_ptr<ir::Node>& n : m.graph().nodes()) {
    if (!ops::is_aipp_node(*n)) continue;  // an AippConv carries the Aipp node's attributes
    std::optional<size_t> image = model_input_of(m, n->input(0));
    if (!image) continue;
    KILN_ASSIGN_OR_RETURN(ops::AippNodeInfo info, ops::aipp_node_info(*n));
    AippInput a;
    a.image_index = *image;
    a.node = n.get();
    if (info.dynamic) {
      a.params_index = model_input_of(m, n->input(1));
      if (!a.params_index)
        return invalid_argument("node %s: the parameters of a dynamic Aipp are not a model input",
                                n->label().c_str());
    }
    a.info = std::move(info);
    out.push_back(std::move(a));
  }
  return out;
}

std::string input_label(const Model& m, size_t index) {
  return std::to_string(index) + " ('" + m.inputs()[index].name + "')";
}

// The model and its AIPP inputs, or an error code with the message recorded.
struct ModelAipp {
  std::shared_ptr<Model> model;
  std::vector<AippInput> inputs;
};
kilnError find_model_aipp(const char* api, uint32_t id, ModelAipp* out) {
  out->model = ModelTable::get().find(id);
  if (!out->model) return fail(KILN_ERROR_INVALID_MODEL_ID, "%s: no model with id %u is loaded", api, id);
  Expected<std::vector<AippInput>> inputs = aipp_inputs(*out->model);
  if (!inputs.ok())
    return fail(KILN_ERROR_PARSE_MODEL, "%s: model %u: %s", api, id, inputs.status().to_string().c_str());
  out->inputs = std::move(*inputs);
  return KILN_SUCCESS;
}

kilnError check_input_index(const char* api, const Model& m, size_t index) {
  if (index < m.inputs().size()) return KILN_SUCCESS;
  return fail(KILN_ERROR_INVALID_PARAM, "%s: input index %zu is out of range (model %u has %zu inputs)", api, index,
              m.id(), m.inputs().size());
}

// The set as the parameters of `input`: complete, consistent and fitting the model.
Expected<ops::AippParams> params_for(const kilnmdlAIPP& set, const Model& m, const AippInput& input) {
  const std::string where = "model input " + input_label(m, input.image_index) + ": ";
  if (!set.format_set)
    return invalid_argument("%sthe set has no input format (kilnmdlSetAIPPInputFormat)", where.c_str());
  if (set.params.src_w <= 0 || set.params.src_h <= 0)
    return invalid_argument("%sthe set has no source image size (kilnmdlSetAIPPSrcImageSize)", where.c_str());
  const ops::AippOutputDesc& out = input.info.out;
  if (set.batch_size != 1 && static_cast<int64_t>(set.batch_size) != out.batch)
    return invalid_argument(
        "%sthe set was created for batchSize %llu; the input takes %lld images (create it with batchSize %lld, "
        "or 1 for parameters shared by every image)",
        where.c_str(), static_cast<unsigned long long>(set.batch_size), static_cast<long long>(out.batch),
        static_cast<long long>(out.batch));
  for (size_t i = 0; i < set.params.batch.size(); ++i) {
    const ops::AippBatchParams& b = set.params.batch[i];
    if (!b.resize) continue;
    const int32_t in_w = b.crop ? b.crop_w : set.params.src_w, in_h = b.crop ? b.crop_h : set.params.src_h;
    const kilnmdlAIPP::ScfInput& scf = set.scf_input[i];
    if (scf.w != in_w || scf.h != in_h)
      return invalid_argument("%simage %zu: scfInputSize %dx%d must be the %s size %dx%d (kilnmdlSetAIPPScfParams)",
                              where.c_str(), i, scf.w, scf.h, b.crop ? "crop" : "source image", in_w, in_h);
  }
  Status valid = ops::validate_aipp(set.params, out);
  if (!valid.ok()) return invalid_argument("%s%s", where.c_str(), valid.message().c_str());
  const int64_t bytes = ops::aipp_image_bytes(set.params.format, set.params.src_w, set.params.src_h);
  if (bytes > input.info.max_src_image_size)
    return invalid_argument(
        "%sa %s image of %dx%d takes %lld bytes, more than the model's max_src_image_size %lld (compile with a "
        "larger max_src_image_size)",
        where.c_str(), ops::aipp_format_name(set.params.format), set.params.src_w, set.params.src_h,
        static_cast<long long>(bytes), static_cast<long long>(input.info.max_src_image_size));
  return set.params;
}

// kilnmdlSetInputAIPP and kilnmdlSetAIPPByInputIndex once the AIPP input is known.
kilnError write_params(const char* api, const Model& m, kilnmdlDataset* dataset, const AippInput& input,
                       const kilnmdlAIPP& set) {
  Expected<ops::AippParams> params = params_for(set, m, input);
  if (!params.ok()) return fail(KILN_ERROR_INVALID_PARAM, "%s: %s", api, params.status().message().c_str());
  const std::vector<uint8_t> bytes = ops::serialize_aipp(*params);
  const size_t index = *input.params_index;
  std::lock_guard lock(dataset->mutex);
  if (index >= dataset->buffers.size())
    return fail(KILN_ERROR_INVALID_PARAM,
                "%s: the dataset has %zu buffers, none for the AIPP parameter input %s (add one of %zu bytes)", api,
                dataset->buffers.size(), input_label(m, index).c_str(), m.inputs()[index].size_bytes);
  const kilnDataBuffer* buffer = dataset->buffers[index];
  if (!data_buffers().contains(buffer))
    return fail(KILN_ERROR_INVALID_PARAM, "%s: buffer %zu of the dataset was destroyed", api, index);
  if (buffer->data == nullptr || buffer->size < bytes.size())
    return fail(KILN_ERROR_INVALID_PARAM,
                "%s: buffer %zu of the dataset (AIPP parameter input %s) has %zu bytes; the parameters take %zu "
                "(the input is %zu)",
                api, index, input_label(m, index).c_str(), buffer->size, bytes.size(), m.inputs()[index].size_bytes);
  std::optional<Allocation> a = MemoryRegistry::get().find(buffer->data, bytes.size());
  if (!a || a->kind != MemoryKind::kDevice || a->device != m.device().id())
    return fail(KILN_ERROR_INVALID_MEMORY,
                "%s: buffer %zu of the dataset (%p) is not %zu bytes of device memory of %s, where model %u runs",
                api, index, buffer->data, bytes.size(), m.device().name().c_str(), m.id());
  copy_memory(buffer->data, bytes.data(), bytes.size());
  return KILN_SUCCESS;
}

// Which AIPP input `index` names for kilnmdlSetInputAIPP (the parameter input) or, with
// `by_image`, kilnmdlSetAIPPByInputIndex (the image input); null with the message recorded
// (naming the inputs that would do) when it is not one.
const AippInput* target_input(const char* api, const Model& m, const std::vector<AippInput>& inputs, size_t index,
                              bool by_image, kilnError* error) {
  std::string candidates;
  for (const AippInput& a : inputs) {
    if (!a.params_index) {
      if (by_image && a.image_index == index) {
        *error = fail(KILN_ERROR_INVALID_PARAM,
                      "%s: input %s has static AIPP: its parameters were fixed at compile time", api,
                      input_label(m, index).c_str());
        return nullptr;
      }
      continue;
    }
    if ((by_image ? a.image_index : *a.params_index) == index) return &a;
    if (!by_image && a.image_index == index) {
      *error = fail(KILN_ERROR_INVALID_PARAM,
                    "%s: input %s is the image of a dynamic AIPP; its parameter input is %s (pass that index, or use "
                    "kilnmdlSetAIPPByInputIndex with the image's)",
                    api, input_label(m, index).c_str(), input_label(m, *a.params_index).c_str());
      return nullptr;
    }
    candidates += (candidates.empty() ? "" : ", ") + input_label(m, by_image ? a.image_index : *a.params_index);
  }
  if (candidates.empty())
    *error = fail(KILN_ERROR_INVALID_PARAM,
                  "%s: model %u has no dynamic AIPP input (compile it with --insert-op-conf and aipp_mode: dynamic)",
                  api, m.id());
  else
    *error = fail(KILN_ERROR_INVALID_PARAM, "%s: input %s is not %s (model %u has: %s)", api,
                  input_label(m, index).c_str(),
                  by_image ? "an image input with dynamic AIPP" : "a dynamic AIPP parameter input", m.id(),
                  candidates.c_str());
  return nullptr;
}

kilnError set_input_aipp(const char* api, uint32_t model_id, kilnmdlDataset* dataset, size_t index,
                         const kilnmdlAIPP* aipp, bool by_image) {
  const kilnmdlAIPP* set = live_set(api, aipp);
  if (!set) return KILN_ERROR_INVALID_PARAM;
  if (!dataset || !datasets().contains(dataset))
    return fail(KILN_ERROR_INVALID_PARAM, "%s: %p is not a live dataset", api, static_cast<void*>(dataset));
  ModelAipp found;
  if (kilnError e = find_model_aipp(api, model_id, &found)) return e;
  const Model& m = *found.model;
  if (kilnError e = check_input_index(api, m, index)) return e;
  kilnError error = KILN_SUCCESS;
  const AippInput* input = target_input(api, m, found.inputs, index, by_image, &error);
  return input ? write_params(api, m, dataset, *input, *set) : error;
}

int32_t round_to_int(float v) { return static_cast<int32_t>(std::lround(v)); }

void fill_dims(kilnmdlIODims* d, const std::string& name, const std::vector<int64_t>& dims) {
  std::memset(d, 0, sizeof(*d));
  std::strncpy(d->name, name.c_str(), KILN_MAX_TENSOR_NAME_LEN - 1);
  d->dimCount = dims.size();
  for (size_t k = 0; k < dims.size() && k < KILN_MAX_DIM_CNT; ++k) d->dims[k] = dims[k];
}

}  // namespace
}  // namespace kiln::rt

using namespace kiln::rt;  // NOLINT: the C entry points below implement kiln::rt's API

// ---- Parameter sets ------------------------------------------------------------------------

kilnmdlAIPP* kilnmdlCreateAIPP(uint64_t batchSize) {
  const char* api = "kilnmdlCreateAIPP";
  return api_entry_or<kilnmdlAIPP*>(api, ApiNeeds::kNothing, nullptr, [&]() -> kilnmdlAIPP* {
    if (batchSize == 0 || batchSize > kMaxAippBatch) {
      fail(KILN_ERROR_INVALID_PARAM, "%s: batchSize %llu must be within 1..%llu", api,
           static_cast<unsigned long long>(batchSize),
           static_cast<unsigned long long>(kMaxAippBatch));
      return nullptr;
    }
    auto set = std::make_unique<kilnmdlAIPP>();
    set->batch_size = batchSize;
    set->params.batch.assign(batchSize, kiln::ops::AippBatchParams{});
    set->scf_input.assign(batchSize, kilnmdlAIPP::ScfInput{});
    aipp_sets().add(set.get());
    return set.release();
  });
}

kilnError kilnmdlDestroyAIPP(const kilnmdlAIPP* aippParmsSet) {
  return api_entry("kilnmdlDestroyAIPP", ApiNeeds::kNothing, [&] {
    if (!aippParmsSet || !aipp_sets().remove(aippParmsSet))
      return fail(KILN_ERROR_INVALID_PARAM, "kilnmdlDestroyAIPP: %p is not a live kilnmdlAIPP",
                  static_cast<const void*>(aippParmsSet));
    delete aippParmsSet;
    return KILN_SUCCESS;
  });
}

kilnError kilnmdlSetAIPPInputFormat(kilnmdlAIPP* aippParmsSet, kilnAippInputFormat inputFormat) {
  const char* api = "kilnmdlSetAIPPInputFormat";
  return api_entry(api, ApiNeeds::kNothing, [&] {
    kilnmdlAIPP* set = live_set(api, aippParmsSet);
    if (!set) return KILN_ERROR_INVALID_PARAM;
    // kilnAippInputFormat keeps AscendCL's numbers, which are ops::AippFormat's (ATC's): the
    // value passes through unchanged (static_asserts below).
    const auto format = static_cast<kiln::ops::AippFormat>(inputFormat);
    if (kiln::ops::aipp_format_known(format)) {
      set->params.format = format;
      set->format_set = true;
      return KILN_SUCCESS;
    }
    switch (inputFormat) {
      case KILN_NC1HWC0DI_FP16:
      case KILN_NC1HWC0DI_S8:
      case KILN_RAW10:
      case KILN_RAW12:
      case KILN_RAW16:
      case KILN_RAW24:
        return fail(
            KILN_ERROR_FEATURE_UNSUPPORTED,
            "%s: input format %d (an NC1HWC0DI or RAW format) is not one Kiln's AIPP takes: use "
            "YUV420SP_U8, "
            "XRGB8888_U8, RGB888_U8, YUV400_U8, ARGB8888_U8, YUYV_U8, YUV422SP_U8 or AYUV444_U8",
            api, static_cast<int>(inputFormat));
      default:
        return fail(KILN_ERROR_INVALID_PARAM, "%s: input format %d is not a kilnAippInputFormat",
                    api, static_cast<int>(inputFormat));
    }
  });
}

static_assert(KILN_YUV420SP_U8 == static_cast<int>(kiln::ops::AippFormat::kYuv420sp) &&
                  KILN_XRGB8888_U8 == static_cast<int>(kiln::ops::AippFormat::kXrgb8888) &&
                  KILN_RGB888_U8 == static_cast<int>(kiln::ops::AippFormat::kRgb888) &&
                  KILN_YUV400_U8 == static_cast<int>(kiln::ops::AippFormat::kYuv400) &&
                  KILN_ARGB8888_U8 == static_cast<int>(kiln::ops::AippFormat::kArgb8888) &&
                  KILN_YUYV_U8 == static_cast<int>(kiln::ops::AippFormat::kYuyv) &&
                  KILN_YUV422SP_U8 == static_cast<int>(kiln::ops::AippFormat::kYuv422sp) &&
                  KILN_AYUV444_U8 == static_cast<int>(kiln::ops::AippFormat::kAyuv444),
              "kilnAippInputFormat and ops::AippFormat must keep the same (AscendCL's) numbers");

kilnError kilnmdlSetAIPPCscParams(kilnmdlAIPP* aippParmsSet, int8_t cscSwitch, int16_t cscMatrixR0C0,
                                  int16_t cscMatrixR0C1, int16_t cscMatrixR0C2, int16_t cscMatrixR1C0,
                                  int16_t cscMatrixR1C1, int16_t cscMatrixR1C2, int16_t cscMatrixR2C0,
                                  int16_t cscMatrixR2C1, int16_t cscMatrixR2C2, uint8_t cscOutputBiasR0,
                                  uint8_t cscOutputBiasR1, uint8_t cscOutputBiasR2, uint8_t cscInputBiasR0,
                                  uint8_t cscInputBiasR1, uint8_t cscInputBiasR2) {
  const char* api = "kilnmdlSetAIPPCscParams";
  return api_entry(api, ApiNeeds::kNothing, [&] {
    kilnmdlAIPP* set = live_set(api, aippParmsSet);
    if (!set) return KILN_ERROR_INVALID_PARAM;
    if (kilnError e = check_switch(api, "cscSwitch", cscSwitch)) return e;
    kiln::ops::AippParams& p = set->params;
    p.csc = cscSwitch == 1;
    if (!p.csc) return KILN_SUCCESS;  // as AscendCL: the rest is ignored when off
    const int16_t m[9] = {cscMatrixR0C0, cscMatrixR0C1, cscMatrixR0C2, cscMatrixR1C0, cscMatrixR1C1,
                          cscMatrixR1C2, cscMatrixR2C0, cscMatrixR2C1, cscMatrixR2C2};
    for (int i = 0; i < 9; ++i) p.matrix[i / 3][i % 3] = m[i];
    p.output_bias[0] = cscOutputBiasR0;
    p.output_bias[1] = cscOutputBiasR1;
    p.output_bias[2] = cscOutputBiasR2;
    p.input_bias[0] = cscInputBiasR0;
    p.input_bias[1] = cscInputBiasR1;
    p.input_bias[2] = cscInputBiasR2;
    return KILN_SUCCESS;
  });
}

kilnError kilnmdlSetAIPPRbuvSwapSwitch(kilnmdlAIPP* aippParmsSet, int8_t rbuvSwapSwitch) {
  const char* api = "kilnmdlSetAIPPRbuvSwapSwitch";
  return api_entry(api, ApiNeeds::kNothing, [&] {
    kilnmdlAIPP* set = live_set(api, aippParmsSet);
    if (!set) return KILN_ERROR_INVALID_PARAM;
    if (kilnError e = check_switch(api, "rbuvSwapSwitch", rbuvSwapSwitch)) return e;
    set->params.rbuv_swap = rbuvSwapSwitch == 1;
    return KILN_SUCCESS;
  });
}

kilnError kilnmdlSetAIPPAxSwapSwitch(kilnmdlAIPP* aippParmsSet, int8_t axSwapSwitch) {
  const char* api = "kilnmdlSetAIPPAxSwapSwitch";
  return api_entry(api, ApiNeeds::kNothing, [&] {
    kilnmdlAIPP* set = live_set(api, aippParmsSet);
    if (!set) return KILN_ERROR_INVALID_PARAM;
    if (kilnError e = check_switch(api, "axSwapSwitch", axSwapSwitch)) return e;
    set->params.ax_swap = axSwapSwitch == 1;
    return KILN_SUCCESS;
  });
}

kilnError kilnmdlSetAIPPSrcImageSize(kilnmdlAIPP* aippParmsSet, int32_t srcImageSizeW, int32_t srcImageSizeH) {
  const char* api = "kilnmdlSetAIPPSrcImageSize";
  return api_entry(api, ApiNeeds::kNothing, [&] {
    kilnmdlAIPP* set = live_set(api, aippParmsSet);
    if (!set) return KILN_ERROR_INVALID_PARAM;
    if (srcImageSizeW <= 0 || srcImageSizeH <= 0)
      return fail(KILN_ERROR_INVALID_PARAM, "%s: srcImageSizeW/H %dx%d must be positive", api,
                  srcImageSizeW, srcImageSizeH);
    set->params.src_w = srcImageSizeW;
    set->params.src_h = srcImageSizeH;
    return KILN_SUCCESS;
  });
}

kilnError kilnmdlSetAIPPScfParams(kilnmdlAIPP* aippParmsSet, int8_t scfSwitch, int32_t scfInputSizeW,
                                  int32_t scfInputSizeH, int32_t scfOutputSizeW, int32_t scfOutputSizeH,
                                  uint64_t batchIndex) {
  const char* api = "kilnmdlSetAIPPScfParams";
  return api_entry(api, ApiNeeds::kNothing, [&] {
    kilnError error = KILN_SUCCESS;
    kiln::ops::AippBatchParams* record =
        switched_record(api, aippParmsSet, "scfSwitch", scfSwitch, batchIndex, &error);
    if (!record) return error;
    kiln::ops::AippBatchParams& b = *record;
    if (scfSwitch == 0) {
      b.resize = false;
      return KILN_SUCCESS;
    }
    if (scfInputSizeW <= 0 || scfInputSizeH <= 0 || scfOutputSizeW <= 0 || scfOutputSizeH <= 0)
      return fail(
          KILN_ERROR_INVALID_PARAM,
          "%s: batchIndex %llu: scfInputSize %dx%d and scfOutputSize %dx%d must be positive", api,
          static_cast<unsigned long long>(batchIndex), scfInputSizeW, scfInputSizeH, scfOutputSizeW,
          scfOutputSizeH);
    b.resize = true;
    b.resize_w = scfOutputSizeW;
    b.resize_h = scfOutputSizeH;
    aippParmsSet->scf_input[batchIndex] = {scfInputSizeW, scfInputSizeH};
    return KILN_SUCCESS;
  });
}

kilnError kilnmdlSetAIPPCropParams(kilnmdlAIPP* aippParmsSet, int8_t cropSwitch, int32_t cropStartPosW,
                                   int32_t cropStartPosH, int32_t cropSizeW, int32_t cropSizeH, uint64_t batchIndex) {
  const char* api = "kilnmdlSetAIPPCropParams";
  return api_entry(api, ApiNeeds::kNothing, [&] {
    kilnError error = KILN_SUCCESS;
    kiln::ops::AippBatchParams* record =
        switched_record(api, aippParmsSet, "cropSwitch", cropSwitch, batchIndex, &error);
    if (!record) return error;
    kiln::ops::AippBatchParams& b = *record;
    if (cropSwitch == 0) {
      b.crop = false;
      return KILN_SUCCESS;
    }
    if (cropStartPosW < 0 || cropStartPosH < 0)
      return fail(KILN_ERROR_INVALID_PARAM,
                  "%s: batchIndex %llu: cropStartPosW/H %d,%d must not be negative", api,
                  static_cast<unsigned long long>(batchIndex), cropStartPosW, cropStartPosH);
    if (cropSizeW <= 0 || cropSizeH <= 0)
      return fail(KILN_ERROR_INVALID_PARAM,
                  "%s: batchIndex %llu: cropSizeW/H %dx%d must be positive", api,
                  static_cast<unsigned long long>(batchIndex), cropSizeW, cropSizeH);
    b.crop = true;
    b.crop_x = cropStartPosW;
    b.crop_y = cropStartPosH;
    b.crop_w = cropSizeW;
    b.crop_h = cropSizeH;
    return KILN_SUCCESS;
  });
}

kilnError kilnmdlSetAIPPPaddingParams(kilnmdlAIPP* aippParmsSet, int8_t paddingSwitch, int32_t paddingSizeTop,
                                      int32_t paddingSizeBottom, int32_t paddingSizeLeft, int32_t paddingSizeRight,
                                      uint64_t batchIndex) {
  const char* api = "kilnmdlSetAIPPPaddingParams";
  return api_entry(api, ApiNeeds::kNothing, [&] {
    kilnError error = KILN_SUCCESS;
    kiln::ops::AippBatchParams* record =
        switched_record(api, aippParmsSet, "paddingSwitch", paddingSwitch, batchIndex, &error);
    if (!record) return error;
    kiln::ops::AippBatchParams& b = *record;
    if (paddingSwitch == 0) {
      b.padding = false;
      return KILN_SUCCESS;
    }
    if (paddingSizeTop < 0 || paddingSizeBottom < 0 || paddingSizeLeft < 0 || paddingSizeRight < 0)
      return fail(KILN_ERROR_INVALID_PARAM,
                  "%s: batchIndex %llu: padding sizes (top %d, bottom %d, left %d, right %d) must "
                  "not be negative",
                  api, static_cast<unsigned long long>(batchIndex), paddingSizeTop,
                  paddingSizeBottom, paddingSizeLeft, paddingSizeRight);
    b.padding = true;
    b.pad_top = paddingSizeTop;
    b.pad_bottom = paddingSizeBottom;
    b.pad_left = paddingSizeLeft;
    b.pad_right = paddingSizeRight;
    return KILN_SUCCESS;
  });
}

kilnError kilnmdlSetAIPPDtcPixelMean(kilnmdlAIPP* aippParmsSet, int16_t dtcPixelMeanChn0, int16_t dtcPixelMeanChn1,
                                     int16_t dtcPixelMeanChn2, int16_t dtcPixelMeanChn3, uint64_t batchIndex) {
  const char* api = "kilnmdlSetAIPPDtcPixelMean";
  return api_entry(api, ApiNeeds::kNothing, [&] {
    kilnmdlAIPP* set = live_set(api, aippParmsSet);
    if (!set) return KILN_ERROR_INVALID_PARAM;
    if (kilnError e = check_batch_index(api, *set, batchIndex)) return e;
    float* mean = set->params.batch[batchIndex].mean;
    mean[0] = dtcPixelMeanChn0;
    mean[1] = dtcPixelMeanChn1;
    mean[2] = dtcPixelMeanChn2;
    mean[3] = dtcPixelMeanChn3;
    return KILN_SUCCESS;
  });
}

kilnError kilnmdlSetAIPPDtcPixelMin(kilnmdlAIPP* aippParmsSet, float dtcPixelMinChn0, float dtcPixelMinChn1,
                                    float dtcPixelMinChn2, float dtcPixelMinChn3, uint64_t batchIndex) {
  const char* api = "kilnmdlSetAIPPDtcPixelMin";
  return api_entry(api, ApiNeeds::kNothing, [&] {
    kilnmdlAIPP* set = live_set(api, aippParmsSet);
    if (!set) return KILN_ERROR_INVALID_PARAM;
    if (kilnError e = check_batch_index(api, *set, batchIndex)) return e;
    const float v[4] = {dtcPixelMinChn0, dtcPixelMinChn1, dtcPixelMinChn2, dtcPixelMinChn3};
    if (kilnError e = check_finite(api, "dtcPixelMin", v)) return e;
    std::memcpy(set->params.batch[batchIndex].min, v, sizeof v);
    return KILN_SUCCESS;
  });
}

kilnError kilnmdlSetAIPPPixelVarReci(kilnmdlAIPP* aippParmsSet, float dtcPixelVarReciChn0, float dtcPixelVarReciChn1,
                                     float dtcPixelVarReciChn2, float dtcPixelVarReciChn3, uint64_t batchIndex) {
  const char* api = "kilnmdlSetAIPPPixelVarReci";
  return api_entry(api, ApiNeeds::kNothing, [&] {
    kilnmdlAIPP* set = live_set(api, aippParmsSet);
    if (!set) return KILN_ERROR_INVALID_PARAM;
    if (kilnError e = check_batch_index(api, *set, batchIndex)) return e;
    const float v[4] = {dtcPixelVarReciChn0, dtcPixelVarReciChn1, dtcPixelVarReciChn2,
                        dtcPixelVarReciChn3};
    if (kilnError e = check_finite(api, "dtcPixelVarReci", v)) return e;
    std::memcpy(set->params.batch[batchIndex].var_reci, v, sizeof v);
    return KILN_SUCCESS;
  });
}

// ---- Models ----------------------------------------------------------------------------------

kilnError kilnmdlSetInputAIPP(uint32_t modelId, kilnmdlDataset* dataset, size_t index,
                              const kilnmdlAIPP* aippParmsSet) {
  return api_entry("kilnmdlSetInputAIPP", ApiNeeds::kRuntime, [&] {
    return set_input_aipp("kilnmdlSetInputAIPP", modelId, dataset, index, aippParmsSet,
                          /*by_image=*/false);
  });
}

kilnError kilnmdlSetAIPPByInputIndex(uint32_t modelId, kilnmdlDataset* dataset, size_t index,
                                     const kilnmdlAIPP* aippParmsSet) {
  return api_entry("kilnmdlSetAIPPByInputIndex", ApiNeeds::kRuntime, [&] {
    return set_input_aipp("kilnmdlSetAIPPByInputIndex", modelId, dataset, index, aippParmsSet,
                          /*by_image=*/true);
  });
}

kilnError kilnmdlGetAippType(uint32_t modelId, size_t index, kilnmdlInputAippType* type,
                             size_t* dynamicAttachedDataIndex) {
  const char* api = "kilnmdlGetAippType";
  return api_entry(api, ApiNeeds::kRuntime, [&] {
    if (!type || !dynamicAttachedDataIndex)
      return fail(KILN_ERROR_INVALID_PARAM,
                  "%s: type and dynamicAttachedDataIndex must not be NULL", api);
    ModelAipp found;
    if (kilnError e = find_model_aipp(api, modelId, &found)) return e;
    if (kilnError e = check_input_index(api, *found.model, index)) return e;
    *type = KILN_DATA_WITHOUT_AIPP;
    *dynamicAttachedDataIndex = KILN_INVALID_NODE_INDEX;
    for (const AippInput& a : found.inputs) {
      if (a.image_index == index) {
        *type = a.params_index ? KILN_DATA_WITH_DYNAMIC_AIPP : KILN_DATA_WITH_STATIC_AIPP;
        if (a.params_index) *dynamicAttachedDataIndex = *a.params_index;
      } else if (a.params_index == index) {
        *type = KILN_DYNAMIC_AIPP_NODE;
      }
    }
    return KILN_SUCCESS;
  });
}

kilnError kilnmdlGetFirstAippInfo(uint32_t modelId, size_t index, kilnAippInfo* aippInfo) {
  const char* api = "kilnmdlGetFirstAippInfo";
  return api_entry(api, ApiNeeds::kRuntime, [&] {
    if (!aippInfo) return fail(KILN_ERROR_INVALID_PARAM, "%s: aippInfo is NULL", api);
    if (aippInfo->size < sizeof(kilnAippInfo))
      return fail(KILN_ERROR_INVALID_PARAM,
                  "%s: aippInfo->size is %zu; set it to sizeof(kilnAippInfo) (%zu)", api,
                  aippInfo->size, sizeof(kilnAippInfo));
    ModelAipp found;
    if (kilnError e = find_model_aipp(api, modelId, &found)) return e;
    const Model& m = *found.model;
    if (kilnError e = check_input_index(api, m, index)) return e;
    const AippInput* input = nullptr;
    for (const AippInput& a : found.inputs)
      if (a.image_index == index) input = &a;
    if (!input || input->params_index) {
      const char* why = input ? "has dynamic AIPP: its parameters are set at run time (kilnmdlSetInputAIPP)"
                              : "has no AIPP";
      for (const AippInput& a : found.inputs)
        if (a.params_index == index) why = "is the parameter input of a dynamic AIPP";
      return fail(KILN_ERROR_NOT_STATIC_AIPP, "%s: input %s %s", api, input_label(m, index).c_str(), why);
    }
    const kiln::ops::AippParams& p = input->info.params;
    const kiln::ops::AippBatchParams& b = p.batch[0];
    const size_t size = aippInfo->size;
    std::memset(aippInfo, 0, sizeof(kilnAippInfo));
    aippInfo->size = size;
    kilnAippInfo& i = *aippInfo;
    i.inputFormat = static_cast<kilnAippInputFormat>(p.format);
    i.srcImageSizeW = p.src_w;
    i.srcImageSizeH = p.src_h;
    i.cropSwitch = b.crop;
    i.loadStartPosW = b.crop_x;
    i.loadStartPosH = b.crop_y;
    i.cropSizeW = b.crop_w;
    i.cropSizeH = b.crop_h;
    i.resizeSwitch = b.resize;
    i.resizeOutputW = b.resize_w;
    i.resizeOutputH = b.resize_h;
    i.paddingSwitch = b.padding;
    i.leftPaddingSize = b.pad_left;
    i.rightPaddingSize = b.pad_right;
    i.topPaddingSize = b.pad_top;
    i.bottomPaddingSize = b.pad_bottom;
    i.paddingValue = b.padding_value;
    i.cscSwitch = p.csc;
    i.rbuvSwapSwitch = p.rbuv_swap;
    i.axSwapSwitch = p.ax_swap;
    int32_t* matrix[9] = {&i.matrixR0C0, &i.matrixR0C1, &i.matrixR0C2, &i.matrixR1C0, &i.matrixR1C1,
                          &i.matrixR1C2, &i.matrixR2C0, &i.matrixR2C1, &i.matrixR2C2};
    for (int k = 0; k < 9; ++k) *matrix[k] = round_to_int(p.matrix[k / 3][k % 3]);
    i.outputBias0 = round_to_int(p.output_bias[0]);
    i.outputBias1 = round_to_int(p.output_bias[1]);
    i.outputBias2 = round_to_int(p.output_bias[2]);
    i.inputBias0 = round_to_int(p.input_bias[0]);
    i.inputBias1 = round_to_int(p.input_bias[1]);
    i.inputBias2 = round_to_int(p.input_bias[2]);
    i.meanChn0 = b.mean[0], i.meanChn1 = b.mean[1], i.meanChn2 = b.mean[2], i.meanChn3 = b.mean[3];
    i.minChn0 = b.min[0], i.minChn1 = b.min[1], i.minChn2 = b.min[2], i.minChn3 = b.min[3];
    i.varReciChn0 = b.var_reci[0], i.varReciChn1 = b.var_reci[1];
    i.varReciChn2 = b.var_reci[2], i.varReciChn3 = b.var_reci[3];
    const kiln::ops::AippOutputDesc& out = input->info.out;
    i.srcFormat = out.nhwc ? KILN_FORMAT_NHWC : KILN_FORMAT_NCHW;
    i.srcDatatype = KILN_FLOAT;
    i.srcDimNum = input->info.output_dims.size();
    i.shapeCount = 1;
    int64_t elements = 1;
    for (int64_t d : input->info.output_dims) elements *= d;
    const std::string name = input->node->output(0) ? input->node->output(0)->name() : m.inputs()[index].name;
    fill_dims(&i.outDims[0].srcDims, name, input->info.output_dims);
    i.outDims[0].srcSize = static_cast<size_t>(elements) * sizeof(float);
    fill_dims(&i.outDims[0].aippOutdims, name, input->info.output_dims);
    i.outDims[0].aippOutSize = i.outDims[0].srcSize;
    return KILN_SUCCESS;
  });
}
