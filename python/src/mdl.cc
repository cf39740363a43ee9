// kiln.mdl: pyACL's acl.mdl over include/kiln/kiln.h's kilnmdl* functions, one to one
// (model load/execute, descriptions, datasets, dynamic AIPP). Conventions: lowlevel.h.
#include <cstdint>
#include <cstring>
#include <string>

#include "python/src/binders.h"
#include "python/src/lowlevel.h"

namespace kiln::python {
namespace {

using Ptr = std::uintptr_t;

// pyACL's dims dict: {"name": str, "dimCount": int, "dims": [int, ...]}.
py::dict dims_dict(const kilnmdlIODims& d) {
  py::list dims;
  for (size_t i = 0; i < d.dimCount && i < KILN_MAX_DIM_CNT; ++i) dims.append(d.dims[i]);
  py::dict out;
  out["name"] = std::string(d.name, strnlen(d.name, KILN_MAX_TENSOR_NAME_LEN));
  out["dimCount"] = d.dimCount;
  out["dims"] = dims;
  return out;
}

std::string c_str_or_empty(const char* s) { return s ? std::string(s) : std::string(); }

kilnmdlDesc* desc_of(Ptr h) { return handle_ptr<kilnmdlDesc>(h); }
kilnmdlDataset* dataset_of(Ptr h) { return handle_ptr<kilnmdlDataset>(h); }
kilnmdlAIPP* aipp_of(Ptr h) { return handle_ptr<kilnmdlAIPP>(h); }

void bind_models(py::module_& m) {
  m.def("load_from_file", [](const std::string& path) {
    uint32_t id = 0;
    kilnError ret;
    {
      py::gil_scoped_release release;
      ret = kilnmdlLoadFromFile(path.c_str(), &id);
    }
    return py::make_tuple(id, ret);
  }, py::arg("model_path"),
        "load_from_file(model_path) -> (model_id, ret): loads a .kiln model for the current "
        "context's device.");
  m.def("load_from_mem", [](py::object model, size_t size) {
    const void* p = address_arg(model, false);
    uint32_t id = 0;
    kilnError ret;
    {
      py::gil_scoped_release release;
      ret = kilnmdlLoadFromMem(p, size, &id);
    }
    return py::make_tuple(id, ret);
  }, py::arg("model"), py::arg("model_size"),
        "load_from_mem(model, model_size) -> (model_id, ret): from host bytes (bytes, a NumPy "
        "array or an address); the bytes are copied.");
  m.def("load_from_file_with_mem", [](const std::string& path, Ptr work_ptr, size_t work_size, Ptr weight_ptr,
                                      size_t weight_size) {
    uint32_t id = 0;
    kilnError ret;
    {
      py::gil_scoped_release release;
      ret = kilnmdlLoadFromFileWithMem(path.c_str(), &id, handle_ptr<void>(work_ptr), work_size,
                                       handle_ptr<void>(weight_ptr), weight_size);
    }
    return py::make_tuple(id, ret);
  }, py::arg("model_path"), py::arg("work_ptr"), py::arg("work_size"), py::arg("weight_ptr"),
        py::arg("weight_size"),
        "load_from_file_with_mem(model_path, work_ptr, work_size, weight_ptr, weight_size) -> "
        "(model_id, ret): with a caller's activation workspace (device memory, query_size's "
        "work_size); weight_ptr must be 0.");
  m.def("query_size", [](const std::string& path) {
    size_t work = 0, weight = 0;
    kilnError ret = kilnmdlQuerySize(path.c_str(), &work, &weight);
    return py::make_tuple(work, weight, ret);
  }, py::arg("model_path"), "query_size(model_path) -> (work_size, weight_size, ret).");
  m.def("unload", [](uint32_t id) {
    py::gil_scoped_release release;
    return kilnmdlUnload(id);
  }, py::arg("model_id"), "unload(model_id) -> ret: waits for executions in flight, then releases the model.");
  m.def("execute", [](uint32_t id, Ptr input, Ptr output) {
    py::gil_scoped_release release;
    return kilnmdlExecute(id, dataset_of(input), dataset_of(output));
  }, py::arg("model_id"), py::arg("input"), py::arg("output"),
        "execute(model_id, input, output) -> ret: runs the model on the calling thread (GIL released); "
        "the datasets hold device buffers in the model's input/output order.");
  m.def("execute_async", [](uint32_t id, Ptr input, Ptr output, Ptr stream) {
    return kilnmdlExecuteAsync(id, dataset_of(input), dataset_of(output), handle_ptr<void>(stream));
  }, py::arg("model_id"), py::arg("input"), py::arg("output"), py::arg("stream"),
        "execute_async(model_id, input, output, stream) -> ret: enqueued on the stream; the datasets "
        "and buffers must stay alive until kiln.rt.synchronize_stream.");
}

void bind_descs(py::module_& m) {
  m.def("create_desc", [] { return handle_int(kilnmdlCreateDesc()); },
        "create_desc() -> desc: an empty model description (0 on failure).");
  m.def("destroy_desc", [](Ptr d) { return kilnmdlDestroyDesc(desc_of(d)); }, py::arg("model_desc"),
        "destroy_desc(model_desc) -> ret.");
  m.def("get_desc", [](Ptr d, uint32_t id) { return kilnmdlGetDesc(desc_of(d), id); }, py::arg("model_desc"),
        py::arg("model_id"), "get_desc(model_desc, model_id) -> ret: fills the description of the model.");
  m.def("get_num_inputs", [](Ptr d) { return kilnmdlGetNumInputs(desc_of(d)); }, py::arg("model_desc"),
        "get_num_inputs(model_desc) -> int.");
  m.def("get_num_outputs", [](Ptr d) { return kilnmdlGetNumOutputs(desc_of(d)); }, py::arg("model_desc"),
        "get_num_outputs(model_desc) -> int.");
  m.def("get_input_size_by_index", [](Ptr d, size_t i) { return kilnmdlGetInputSizeByIndex(desc_of(d), i); },
        py::arg("model_desc"), py::arg("index"),
        "get_input_size_by_index(model_desc, index) -> int: bytes (0 when a dim is open).");
  m.def("get_output_size_by_index", [](Ptr d, size_t i) { return kilnmdlGetOutputSizeByIndex(desc_of(d), i); },
        py::arg("model_desc"), py::arg("index"),
        "get_output_size_by_index(model_desc, index) -> int: bytes (0 when a dim is open).");
  m.def("get_input_name_by_index", [](Ptr d, size_t i) {
    return c_str_or_empty(kilnmdlGetInputNameByIndex(desc_of(d), i));
  }, py::arg("model_desc"), py::arg("index"), "get_input_name_by_index(model_desc, index) -> str ('' on error).");
  m.def("get_output_name_by_index", [](Ptr d, size_t i) {
    return c_str_or_empty(kilnmdlGetOutputNameByIndex(desc_of(d), i));
  }, py::arg("model_desc"), py::arg("index"), "get_output_name_by_index(model_desc, index) -> str ('' on error).");
  m.def("get_input_index_by_name", [](Ptr d, const std::string& name) {
    size_t index = 0;
    kilnError ret = kilnmdlGetInputIndexByName(desc_of(d), name.c_str(), &index);
    return py::make_tuple(index, ret);
  }, py::arg("model_desc"), py::arg("name"), "get_input_index_by_name(model_desc, name) -> (index, ret).");
  m.def("get_output_index_by_name", [](Ptr d, const std::string& name) {
    size_t index = 0;
    kilnError ret = kilnmdlGetOutputIndexByName(desc_of(d), name.c_str(), &index);
    return py::make_tuple(index, ret);
  }, py::arg("model_desc"), py::arg("name"), "get_output_index_by_name(model_desc, name) -> (index, ret).");
  m.def("get_input_dims", [](Ptr d, size_t i) {
    kilnmdlIODims dims{};
    kilnError ret = kilnmdlGetInputDims(desc_of(d), i, &dims);
    return py::make_tuple(dims_dict(dims), ret);
  }, py::arg("model_desc"), py::arg("index"),
        "get_input_dims(model_desc, index) -> (dims, ret): dims is {'name', 'dimCount', 'dims'} as "
        "pyACL; -1 for an open dim.");
  m.def("get_output_dims", [](Ptr d, size_t i) {
    kilnmdlIODims dims{};
    kilnError ret = kilnmdlGetOutputDims(desc_of(d), i, &dims);
    return py::make_tuple(dims_dict(dims), ret);
  }, py::arg("model_desc"), py::arg("index"), "get_output_dims(model_desc, index) -> (dims, ret).");
  m.def("get_input_data_type", [](Ptr d, size_t i) { return int(kilnmdlGetInputDataType(desc_of(d), i)); },
        py::arg("model_desc"), py::arg("index"),
        "get_input_data_type(model_desc, index) -> int: a kiln.FLOAT ... value (-1 on error).");
  m.def("get_output_data_type", [](Ptr d, size_t i) { return int(kilnmdlGetOutputDataType(desc_of(d), i)); },
        py::arg("model_desc"), py::arg("index"), "get_output_data_type(model_desc, index) -> int.");
  m.def("get_input_format", [](Ptr d, size_t i) { return int(kilnmdlGetInputFormat(desc_of(d), i)); },
        py::arg("model_desc"), py::arg("index"), "get_input_format(model_desc, index) -> int (kiln.FORMAT_*).");
  m.def("get_output_format", [](Ptr d, size_t i) { return int(kilnmdlGetOutputFormat(desc_of(d), i)); },
        py::arg("model_desc"), py::arg("index"), "get_output_format(model_desc, index) -> int (kiln.FORMAT_*).");
}

void bind_datasets(py::module_& m) {
  m.def("create_dataset", [] { return handle_int(kilnmdlCreateDataset()); },
        "create_dataset() -> dataset (0 on failure).");
  m.def("destroy_dataset", [](Ptr ds) { return kilnmdlDestroyDataset(dataset_of(ds)); }, py::arg("dataset"),
        "destroy_dataset(dataset) -> ret: the buffers in it are not destroyed.");
  m.def("add_dataset_buffer", [](Ptr ds, Ptr buffer) {
    kilnError ret = kilnmdlAddDatasetBuffer(dataset_of(ds), handle_ptr<kilnDataBuffer>(buffer));
    return py::make_tuple(ds, ret);
  }, py::arg("dataset"), py::arg("data_buffer"),
        "add_dataset_buffer(dataset, data_buffer) -> (dataset, ret), as pyACL.");
  m.def("get_dataset_num_buffers", [](Ptr ds) { return kilnmdlGetDatasetNumBuffers(dataset_of(ds)); },
        py::arg("dataset"), "get_dataset_num_buffers(dataset) -> int.");
  m.def("get_dataset_buffer", [](Ptr ds, size_t i) { return handle_int(kilnmdlGetDatasetBuffer(dataset_of(ds), i)); },
        py::arg("dataset"), py::arg("index"), "get_dataset_buffer(dataset, index) -> data_buffer (0 on error).");
  m.def("set_dataset_tensor_desc", [](Ptr ds, Ptr desc, size_t i) {
    kilnError ret = kilnmdlSetDatasetTensorDesc(dataset_of(ds), handle_ptr<kilnTensorDesc>(desc), i);
    return py::make_tuple(ds, ret);
  }, py::arg("dataset"), py::arg("tensor_desc"), py::arg("index"),
        "set_dataset_tensor_desc(dataset, tensor_desc, index) -> (dataset, ret): the actual shape of "
        "input index (the dataset keeps a copy).");
  m.def("get_dataset_tensor_desc", [](Ptr ds, size_t i) {
    return handle_int(kilnmdlGetDatasetTensorDesc(dataset_of(ds), i));
  }, py::arg("dataset"), py::arg("index"),
        "get_dataset_tensor_desc(dataset, index) -> tensor_desc: after an execution, the actual "
        "shape of output index (owned by the dataset; 0 on error).");
}

void bind_aipp(py::module_& m) {
  m.attr("DATA_WITHOUT_AIPP") = int(KILN_DATA_WITHOUT_AIPP);
  m.attr("DATA_WITH_STATIC_AIPP") = int(KILN_DATA_WITH_STATIC_AIPP);
  m.attr("DATA_WITH_DYNAMIC_AIPP") = int(KILN_DATA_WITH_DYNAMIC_AIPP);
  m.attr("DYNAMIC_AIPP_NODE") = int(KILN_DYNAMIC_AIPP_NODE);
  m.attr("INVALID_NODE_INDEX") = KILN_INVALID_NODE_INDEX;
  m.attr("YUV420SP_U8") = int(KILN_YUV420SP_U8);
  m.attr("XRGB8888_U8") = int(KILN_XRGB8888_U8);
  m.attr("RGB888_U8") = int(KILN_RGB888_U8);
  m.attr("YUV400_U8") = int(KILN_YUV400_U8);
  m.attr("ARGB8888_U8") = int(KILN_ARGB8888_U8);
  m.attr("YUYV_U8") = int(KILN_YUYV_U8);
  m.attr("YUV422SP_U8") = int(KILN_YUV422SP_U8);
  m.attr("AYUV444_U8") = int(KILN_AYUV444_U8);

  m.def("create_aipp", [](uint64_t batch) { return handle_int(kilnmdlCreateAIPP(batch)); }, py::arg("batch_size"),
        "create_aipp(batch_size) -> aipp: a dynamic AIPP parameter set (0 for batch_size 0 or above 65536).");
  m.def("destroy_aipp", [](Ptr a) { return kilnmdlDestroyAIPP(aipp_of(a)); }, py::arg("aipp"),
        "destroy_aipp(aipp) -> ret.");
  m.def("set_aipp_input_format", [](Ptr a, int f) {
    return kilnmdlSetAIPPInputFormat(aipp_of(a), static_cast<kilnAippInputFormat>(f));
  }, py::arg("aipp"), py::arg("input_format"),
        "set_aipp_input_format(aipp, input_format) -> ret (kiln.mdl.YUV420SP_U8 ...).");
  m.def("set_aipp_csc_params", [](Ptr a, int8_t sw, int16_t r0c0, int16_t r0c1, int16_t r0c2, int16_t r1c0,
                                  int16_t r1c1, int16_t r1c2, int16_t r2c0, int16_t r2c1, int16_t r2c2, uint8_t ob0,
                                  uint8_t ob1, uint8_t ob2, uint8_t ib0, uint8_t ib1, uint8_t ib2) {
    return kilnmdlSetAIPPCscParams(aipp_of(a), sw, r0c0, r0c1, r0c2, r1c0, r1c1, r1c2, r2c0, r2c1, r2c2, ob0, ob1,
                                   ob2, ib0, ib1, ib2);
  }, py::arg("aipp"), py::arg("csc_switch"), py::arg("r0c0"), py::arg("r0c1"), py::arg("r0c2"), py::arg("r1c0"),
        py::arg("r1c1"), py::arg("r1c2"), py::arg("r2c0"), py::arg("r2c1"), py::arg("r2c2"),
        py::arg("output_bias_r0"), py::arg("output_bias_r1"), py::arg("output_bias_r2"), py::arg("input_bias_r0"),
        py::arg("input_bias_r1"), py::arg("input_bias_r2"),
        "set_aipp_csc_params(aipp, csc_switch, 9 matrix entries (1/256 units), 3 output biases, 3 input "
        "biases) -> ret: colour-space conversion for every image.");
  m.def("set_aipp_rbuv_swap_switch", [](Ptr a, int8_t sw) { return kilnmdlSetAIPPRbuvSwapSwitch(aipp_of(a), sw); },
        py::arg("aipp"), py::arg("rbuv_swap_switch"),
        "set_aipp_rbuv_swap_switch(aipp, switch) -> ret: swap U/V or R/B.");
  m.def("set_aipp_ax_swap_switch", [](Ptr a, int8_t sw) { return kilnmdlSetAIPPAxSwapSwitch(aipp_of(a), sw); },
        py::arg("aipp"), py::arg("ax_swap_switch"), "set_aipp_ax_swap_switch(aipp, switch) -> ret: alpha byte last.");
  m.def("set_aipp_src_image_size", [](Ptr a, int32_t w, int32_t h) {
    return kilnmdlSetAIPPSrcImageSize(aipp_of(a), w, h);
  }, py::arg("aipp"), py::arg("src_image_size_w"), py::arg("src_image_size_h"),
        "set_aipp_src_image_size(aipp, w, h) -> ret: pixels of every source image.");
  m.def("set_aipp_scf_params", [](Ptr a, int8_t sw, int32_t in_w, int32_t in_h, int32_t out_w, int32_t out_h,
                                  uint64_t batch_index) {
    return kilnmdlSetAIPPScfParams(aipp_of(a), sw, in_w, in_h, out_w, out_h, batch_index);
  }, py::arg("aipp"), py::arg("scf_switch"), py::arg("scf_input_size_w"), py::arg("scf_input_size_h"),
        py::arg("scf_output_size_w"), py::arg("scf_output_size_h"), py::arg("batch_index"),
        "set_aipp_scf_params(aipp, switch, in_w, in_h, out_w, out_h, batch_index) -> ret: resize of one image.");
  m.def("set_aipp_crop_params", [](Ptr a, int8_t sw, int32_t x, int32_t y, int32_t w, int32_t h, uint64_t batch_index) {
    return kilnmdlSetAIPPCropParams(aipp_of(a), sw, x, y, w, h, batch_index);
  }, py::arg("aipp"), py::arg("crop_switch"), py::arg("crop_start_pos_w"), py::arg("crop_start_pos_h"),
        py::arg("crop_size_w"), py::arg("crop_size_h"), py::arg("batch_index"),
        "set_aipp_crop_params(aipp, switch, start_w, start_h, size_w, size_h, batch_index) -> ret.");
  m.def("set_aipp_padding_params", [](Ptr a, int8_t sw, int32_t top, int32_t bottom, int32_t left, int32_t right,
                                      uint64_t batch_index) {
    return kilnmdlSetAIPPPaddingParams(aipp_of(a), sw, top, bottom, left, right, batch_index);
  }, py::arg("aipp"), py::arg("padding_switch"), py::arg("padding_size_top"), py::arg("padding_size_bottom"),
        py::arg("padding_size_left"), py::arg("padding_size_right"), py::arg("batch_index"),
        "set_aipp_padding_params(aipp, switch, top, bottom, left, right, batch_index) -> ret.");
  m.def("set_aipp_dtc_pixel_mean", [](Ptr a, int16_t c0, int16_t c1, int16_t c2, int16_t c3, uint64_t batch_index) {
    return kilnmdlSetAIPPDtcPixelMean(aipp_of(a), c0, c1, c2, c3, batch_index);
  }, py::arg("aipp"), py::arg("mean_chn0"), py::arg("mean_chn1"), py::arg("mean_chn2"), py::arg("mean_chn3"),
        py::arg("batch_index"), "set_aipp_dtc_pixel_mean(aipp, c0, c1, c2, c3, batch_index) -> ret.");
  m.def("set_aipp_dtc_pixel_min", [](Ptr a, float c0, float c1, float c2, float c3, uint64_t batch_index) {
    return kilnmdlSetAIPPDtcPixelMin(aipp_of(a), c0, c1, c2, c3, batch_index);
  }, py::arg("aipp"), py::arg("min_chn0"), py::arg("min_chn1"), py::arg("min_chn2"), py::arg("min_chn3"),
        py::arg("batch_index"), "set_aipp_dtc_pixel_min(aipp, c0, c1, c2, c3, batch_index) -> ret.");
  m.def("set_aipp_pixel_var_reci", [](Ptr a, float c0, float c1, float c2, float c3, uint64_t batch_index) {
    return kilnmdlSetAIPPPixelVarReci(aipp_of(a), c0, c1, c2, c3, batch_index);
  }, py::arg("aipp"), py::arg("var_reci_chn0"), py::arg("var_reci_chn1"), py::arg("var_reci_chn2"),
        py::arg("var_reci_chn3"), py::arg("batch_index"),
        "set_aipp_pixel_var_reci(aipp, c0, c1, c2, c3, batch_index) -> ret: out = (v - mean - min) * var_reci.");
  m.def("set_input_aipp", [](uint32_t id, Ptr ds, size_t index, Ptr a) {
    py::gil_scoped_release release;
    return kilnmdlSetInputAIPP(id, dataset_of(ds), index, aipp_of(a));
  }, py::arg("model_id"), py::arg("dataset"), py::arg("index"), py::arg("aipp"),
        "set_input_aipp(model_id, dataset, index, aipp) -> ret: checks the set against the model and "
        "writes it into the dataset's buffer index (the parameter input).");
  m.def("set_aipp_by_input_index", [](uint32_t id, Ptr ds, size_t index, Ptr a) {
    py::gil_scoped_release release;
    return kilnmdlSetAIPPByInputIndex(id, dataset_of(ds), index, aipp_of(a));
  }, py::arg("model_id"), py::arg("dataset"), py::arg("index"), py::arg("aipp"),
        "set_aipp_by_input_index(model_id, dataset, index, aipp) -> ret: the same, index naming the image input.");
  m.def("get_aipp_type", [](uint32_t id, size_t index) {
    kilnmdlInputAippType type = KILN_DATA_WITHOUT_AIPP;
    size_t attached = KILN_INVALID_NODE_INDEX;
    kilnError ret = kilnmdlGetAippType(id, index, &type, &attached);
    return py::make_tuple(int(type), attached, ret);
  }, py::arg("model_id"), py::arg("index"),
        "get_aipp_type(model_id, index) -> (type, attached_index, ret): DATA_WITHOUT_AIPP ... and the "
        "parameter input of a dynamic AIPP input (INVALID_NODE_INDEX otherwise).");
  m.def("get_first_aipp_info", [](uint32_t id, size_t index) {
    kilnAippInfo info{};
    info.size = sizeof(info);
    kilnError ret = kilnmdlGetFirstAippInfo(id, index, &info);
    py::dict d;
    if (ret == KILN_SUCCESS) {
#define KILN_AIPP_FIELD(f) d[#f] = info.f
      KILN_AIPP_FIELD(srcImageSizeW); KILN_AIPP_FIELD(srcImageSizeH);
      KILN_AIPP_FIELD(cropSwitch); KILN_AIPP_FIELD(loadStartPosW); KILN_AIPP_FIELD(loadStartPosH);
      KILN_AIPP_FIELD(cropSizeW); KILN_AIPP_FIELD(cropSizeH);
      KILN_AIPP_FIELD(resizeSwitch); KILN_AIPP_FIELD(resizeOutputW); KILN_AIPP_FIELD(resizeOutputH);
      KILN_AIPP_FIELD(paddingSwitch); KILN_AIPP_FIELD(leftPaddingSize); KILN_AIPP_FIELD(rightPaddingSize);
      KILN_AIPP_FIELD(topPaddingSize); KILN_AIPP_FIELD(bottomPaddingSize); KILN_AIPP_FIELD(paddingValue);
      KILN_AIPP_FIELD(cscSwitch); KILN_AIPP_FIELD(rbuvSwapSwitch); KILN_AIPP_FIELD(axSwapSwitch);
      KILN_AIPP_FIELD(matrixR0C0); KILN_AIPP_FIELD(matrixR0C1); KILN_AIPP_FIELD(matrixR0C2);
      KILN_AIPP_FIELD(matrixR1C0); KILN_AIPP_FIELD(matrixR1C1); KILN_AIPP_FIELD(matrixR1C2);
      KILN_AIPP_FIELD(matrixR2C0); KILN_AIPP_FIELD(matrixR2C1); KILN_AIPP_FIELD(matrixR2C2);
      KILN_AIPP_FIELD(outputBias0); KILN_AIPP_FIELD(outputBias1); KILN_AIPP_FIELD(outputBias2);
      KILN_AIPP_FIELD(inputBias0); KILN_AIPP_FIELD(inputBias1); KILN_AIPP_FIELD(inputBias2);
      KILN_AIPP_FIELD(meanChn0); KILN_AIPP_FIELD(meanChn1); KILN_AIPP_FIELD(meanChn2); KILN_AIPP_FIELD(meanChn3);
      KILN_AIPP_FIELD(minChn0); KILN_AIPP_FIELD(minChn1); KILN_AIPP_FIELD(minChn2); KILN_AIPP_FIELD(minChn3);
      KILN_AIPP_FIELD(varReciChn0); KILN_AIPP_FIELD(varReciChn1); KILN_AIPP_FIELD(varReciChn2);
      KILN_AIPP_FIELD(varReciChn3); KILN_AIPP_FIELD(srcDimNum); KILN_AIPP_FIELD(shapeCount);
#undef KILN_AIPP_FIELD
      d["inputFormat"] = int(info.inputFormat);
      d["srcFormat"] = int(info.srcFormat);
      d["srcDatatype"] = int(info.srcDatatype);
      d["srcDims"] = dims_dict(info.outDims[0].srcDims);
      d["srcSize"] = info.outDims[0].srcSize;
      d["aippOutdims"] = dims_dict(info.outDims[0].aippOutdims);
      d["aippOutSize"] = info.outDims[0].aippOutSize;
    }
    return py::make_tuple(d, ret);
  }, py::arg("model_id"), py::arg("index"),
        "get_first_aipp_info(model_id, index) -> (info, ret): the static AIPP configuration of an image "
        "input as a dict keyed by aclAippInfo's field names (empty on error).");
}

}  // namespace

void bind_mdl(py::module_& parent) {
  py::module_ m = parent.def_submodule(
      "mdl",
      "Models (pyACL's acl.mdl): load, execute, descriptions, datasets, dynamic AIPP.\n\n"
      "Each function wraps one kilnmdl* function of include/kiln/kiln.h; returns `ret` codes or\n"
      "(value, ret) tuples; handles are ints. execute() releases the GIL.");
  bind_models(m);
  bind_descs(m);
  bind_datasets(m);
  bind_aipp(m);
}

}  // namespace kiln::python
