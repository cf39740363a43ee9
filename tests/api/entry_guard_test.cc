// Every function libkiln.so exports, called with invalid arguments (NULL pointers, model ids 0
// and 999999, a destroyed stream, event and foreign handles), before kilnInit and after: each
// returns an error code or its documented fallback, and none crashes. The test links
// libkiln.so itself, so each probe calls the exported function; the list of probes is checked
// against the library's dynamic symbol table and against the public headers (kiln.h, comm.h,
// kiln_op.h, llm.h), so a new export or public function without a probe here fails the test.
#include <dlfcn.h>
#include <elf.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kiln/comm.h"
#include "kiln/kiln.h"
#include "kiln/kiln_op.h"
#include "kiln/llm.h"

namespace {

// What a probe expects of its call: an error code, the fallback of a function returning
// a value (NULL, 0, KILN_DT_UNDEFINED...), or, for a function with no invalid input, only
// that it returns.
bool err(kilnError e) { return e != KILN_SUCCESS; }
bool null(const void* p) { return p == nullptr; }
bool zero(size_t n) { return n == 0; }

// Handles no call may accept: before kilnInit a pointer to nothing Kiln made, after it a
// stream and an event created and destroyed (and still a foreign communicator).
int g_foreign = 0;
kilnrtStream g_dead_stream = &g_foreign;
kilnrtEvent g_dead_event = &g_foreign;
kilnrtContext g_foreign_context = &g_foreign;
kilnComm g_foreign_comm = &g_foreign;

struct Probe {
  const char* name;
  // Calls the function with invalid arguments; true when the result is the expected one.
  std::function<bool(bool initialized)> call;
};

template <typename T>
T* foreign() {
  return reinterpret_cast<T*>(&g_foreign);
}

std::vector<Probe> probes() {
  static const kilnrtStream& s = g_dead_stream;
  static const kilnrtEvent& e = g_dead_event;
  static const kilnComm& c = g_foreign_comm;
  constexpr uint32_t kNoModel = 999999;
  return {
      // ---- errors, data types, init ----
      {"kilnGetRecentErrMsg", [](bool) { return kilnGetRecentErrMsg() != nullptr; }},
      {"kilnDataTypeSize",
       [](bool) { return zero(kilnDataTypeSize(static_cast<kilnDataType>(12345))); }},
      {"kilnInit", [](bool) { return err(kilnInit("/nonexistent/kiln-config.json")); }},
      // After kilnInit finalizing is valid: the test's teardown checks that it succeeds.
      {"kilnFinalize", [](bool initialized) { return initialized || err(kilnFinalize()); }},
      {"kilnrtGetVersion", [](bool) { return err(kilnrtGetVersion(nullptr, nullptr, nullptr)); }},
      {"kilnrtGetRunMode", [](bool) { return err(kilnrtGetRunMode(nullptr)); }},
      // ---- devices and contexts (the probing thread has no current context) ----
      {"kilnrtGetDeviceCount", [](bool) { return err(kilnrtGetDeviceCount(nullptr)); }},
      {"kilnrtSetDevice",
       [](bool) { return err(kilnrtSetDevice(-1)) && err(kilnrtSetDevice(4096)); }},
      {"kilnrtGetDevice", [](bool) { return err(kilnrtGetDevice(nullptr)); }},
      {"kilnrtResetDevice",
       [](bool) { return err(kilnrtResetDevice(-1)) && err(kilnrtResetDevice(0)); }},
      {"kilnrtSynchronizeDevice", [](bool) { return err(kilnrtSynchronizeDevice()); }},
      {"kilnrtSynchronizeDeviceWithTimeout",
       [](bool) { return err(kilnrtSynchronizeDeviceWithTimeout(-5)); }},
      {"kilnrtCreateContext", [](bool) { return err(kilnrtCreateContext(nullptr, 0)); }},
      {"kilnrtDestroyContext",
       [](bool) {
         return err(kilnrtDestroyContext(nullptr)) && err(kilnrtDestroyContext(g_foreign_context));
       }},
      {"kilnrtSetCurrentContext",
       [](bool) { return err(kilnrtSetCurrentContext(g_foreign_context)); }},
      {"kilnrtGetCurrentContext", [](bool) { return err(kilnrtGetCurrentContext(nullptr)); }},
      // ---- streams and events ----
      {"kilnrtCreateStream", [](bool) { return err(kilnrtCreateStream(nullptr)); }},
      {"kilnrtDestroyStream",
       [&](bool) { return err(kilnrtDestroyStream(s)) && err(kilnrtDestroyStream(nullptr)); }},
      {"kilnrtSynchronizeStream", [&](bool) { return err(kilnrtSynchronizeStream(s)); }},
      {"kilnrtSynchronizeStreamWithTimeout",
       [&](bool) { return err(kilnrtSynchronizeStreamWithTimeout(s, -1)); }},
      {"kilnrtStreamQuery", [&](bool) { return err(kilnrtStreamQuery(s, nullptr)); }},
      {"kilnrtStreamWaitEvent", [&](bool) { return err(kilnrtStreamWaitEvent(s, e)); }},
      {"kilnrtCreateEvent", [](bool) { return err(kilnrtCreateEvent(nullptr)); }},
      {"kilnrtCreateEventWithFlag",
       [](bool) { return err(kilnrtCreateEventWithFlag(nullptr, 0)); }},
      {"kilnrtDestroyEvent",
       [&](bool) { return err(kilnrtDestroyEvent(e)) && err(kilnrtDestroyEvent(nullptr)); }},
      {"kilnrtRecordEvent", [&](bool) { return err(kilnrtRecordEvent(e, s)); }},
      {"kilnrtResetEvent", [&](bool) { return err(kilnrtResetEvent(e, s)); }},
      {"kilnrtQueryEvent", [&](bool) { return err(kilnrtQueryEvent(e, nullptr)); }},
      {"kilnrtSynchronizeEvent", [&](bool) { return err(kilnrtSynchronizeEvent(e)); }},
      {"kilnrtSynchronizeEventWithTimeout",
       [&](bool) { return err(kilnrtSynchronizeEventWithTimeout(e, -1)); }},
      {"kilnrtEventElapsedTime", [&](bool) { return err(kilnrtEventElapsedTime(nullptr, e, e)); }},
      {"kilnrtLaunchCallback",
       [&](bool) {
         return err(kilnrtLaunchCallback(nullptr, nullptr, KILN_CALLBACK_NO_BLOCK, s));
       }},
      {"kilnrtSubscribeReport", [&](bool) { return err(kilnrtSubscribeReport(0, s)); }},
      {"kilnrtUnSubscribeReport", [&](bool) { return err(kilnrtUnSubscribeReport(0, s)); }},
      {"kilnrtProcessReport", [](bool) { return err(kilnrtProcessReport(-5)); }},
      // ---- memory ----
      {"kilnrtMalloc",
       [](bool) { return err(kilnrtMalloc(nullptr, 64, KILN_MEM_MALLOC_HUGE_FIRST)); }},
      {"kilnrtFree", [](bool) { return err(kilnrtFree(nullptr)) && err(kilnrtFree(&g_foreign)); }},
      {"kilnrtMallocHost", [](bool) { return err(kilnrtMallocHost(nullptr, 64)); }},
      {"kilnrtFreeHost",
       [](bool) { return err(kilnrtFreeHost(nullptr)) && err(kilnrtFreeHost(&g_foreign)); }},
      {"kilnrtHostRegister",
       [](bool) {
         return err(
             kilnrtHostRegister(nullptr, 64, static_cast<kilnrtHostRegisterType>(0), nullptr));
       }},
      {"kilnrtHostUnregister", [](bool) { return err(kilnrtHostUnregister(&g_foreign)); }},
      {"kilnrtMemcpy",
       [](bool) { return err(kilnrtMemcpy(nullptr, 64, nullptr, 64, KILN_MEMCPY_HOST_TO_HOST)); }},
      {"kilnrtMemcpyAsync",
       [&](bool) {
         return err(kilnrtMemcpyAsync(nullptr, 64, nullptr, 64, KILN_MEMCPY_HOST_TO_HOST, s));
       }},
      {"kilnrtMemcpy2d",
       [](bool) {
         return err(kilnrtMemcpy2d(nullptr, 8, nullptr, 8, 8, 8, KILN_MEMCPY_HOST_TO_HOST));
       }},
      {"kilnrtMemcpy2dAsync",
       [&](bool) {
         return err(kilnrtMemcpy2dAsync(nullptr, 8, nullptr, 8, 8, 8, KILN_MEMCPY_HOST_TO_HOST, s));
       }},
      {"kilnrtMemset", [](bool) { return err(kilnrtMemset(nullptr, 64, 0, 64)); }},
      {"kilnrtMemsetAsync", [&](bool) { return err(kilnrtMemsetAsync(nullptr, 64, 0, 64, s)); }},
      {"kilnrtGetMemInfo",
       [](bool) { return err(kilnrtGetMemInfo(KILN_DDR_MEM, nullptr, nullptr)); }},
      {"kilnrtGetMemStats", [](bool) { return err(kilnrtGetMemStats(-1, nullptr)); }},
      {"kilnrtEmptyCache", [](bool) { return err(kilnrtEmptyCache(-1)); }},
      // ---- tensor descs, data buffers, datasets (host objects: same answers either way) ----
      {"kilnCreateTensorDesc",
       [](bool) {
         return null(kilnCreateTensorDesc(static_cast<kilnDataType>(12345), 0, nullptr,
                                          KILN_FORMAT_ND)) &&
                null(kilnCreateTensorDesc(KILN_FLOAT, 2, nullptr, KILN_FORMAT_ND));
       }},
      {"kilnDestroyTensorDesc",
       [](bool) {
         kilnDestroyTensorDesc(nullptr);
         kilnDestroyTensorDesc(foreign<kilnTensorDesc>());
         return true;
       }},
      {"kilnGetTensorDescType",
       [](bool) { return kilnGetTensorDescType(nullptr) == KILN_DT_UNDEFINED; }},
      {"kilnGetTensorDescFormat",
       [](bool) {
         return kilnGetTensorDescFormat(foreign<kilnTensorDesc>()) == KILN_FORMAT_UNDEFINED;
       }},
      {"kilnGetTensorDescNumDims", [](bool) { return zero(kilnGetTensorDescNumDims(nullptr)); }},
      {"kilnGetTensorDescDimV2",
       [](bool) { return err(kilnGetTensorDescDimV2(nullptr, 0, nullptr)); }},
      {"kilnGetTensorDescElementCount",
       [](bool) { return zero(kilnGetTensorDescElementCount(nullptr)); }},
      {"kilnGetTensorDescSize",
       [](bool) { return zero(kilnGetTensorDescSize(foreign<kilnTensorDesc>())); }},
      {"kilnCreateDataBuffer", [](bool) { return null(kilnCreateDataBuffer(nullptr, 64)); }},
      {"kilnDestroyDataBuffer",
       [](bool) {
         return err(kilnDestroyDataBuffer(nullptr)) &&
                err(kilnDestroyDataBuffer(foreign<kilnDataBuffer>()));
       }},
      {"kilnUpdateDataBuffer", [](bool) { return err(kilnUpdateDataBuffer(nullptr, nullptr, 0)); }},
      {"kilnGetDataBufferAddr", [](bool) { return null(kilnGetDataBufferAddr(nullptr)); }},
      {"kilnGetDataBufferSizeV2",
       [](bool) { return zero(kilnGetDataBufferSizeV2(foreign<kilnDataBuffer>())); }},
      // No invalid input: made and destroyed.
      {"kilnmdlCreateDataset",
       [](bool) {
         kilnmdlDataset* d = kilnmdlCreateDataset();
         return d != nullptr && kilnmdlDestroyDataset(d) == KILN_SUCCESS;
       }},
      {"kilnmdlDestroyDataset",
       [](bool) {
         return err(kilnmdlDestroyDataset(nullptr)) &&
                err(kilnmdlDestroyDataset(foreign<kilnmdlDataset>()));
       }},
      {"kilnmdlAddDatasetBuffer",
       [](bool) { return err(kilnmdlAddDatasetBuffer(nullptr, nullptr)); }},
      {"kilnmdlGetDatasetNumBuffers",
       [](bool) { return zero(kilnmdlGetDatasetNumBuffers(nullptr)); }},
      {"kilnmdlGetDatasetBuffer", [](bool) { return null(kilnmdlGetDatasetBuffer(nullptr, 0)); }},
      {"kilnmdlSetDatasetTensorDesc",
       [](bool) { return err(kilnmdlSetDatasetTensorDesc(nullptr, nullptr, 0)); }},
      {"kilnmdlGetDatasetTensorDesc",
       [](bool) { return null(kilnmdlGetDatasetTensorDesc(foreign<kilnmdlDataset>(), 0)); }},
      // ---- models ----
      {"kilnmdlLoadFromFile",
       [](bool) {
         uint32_t id = 0;
         return err(kilnmdlLoadFromFile(nullptr, &id)) &&
                err(kilnmdlLoadFromFile("/nonexistent/model.kiln", &id));
       }},
      {"kilnmdlLoadFromMem", [](bool) { return err(kilnmdlLoadFromMem(nullptr, 0, nullptr)); }},
      {"kilnmdlLoadFromFileWithMem",
       [](bool) {
         return err(kilnmdlLoadFromFileWithMem(nullptr, nullptr, nullptr, 0, nullptr, 0));
       }},
      {"kilnmdlQuerySize", [](bool) { return err(kilnmdlQuerySize(nullptr, nullptr, nullptr)); }},
      {"kilnmdlUnload", [](bool) { return err(kilnmdlUnload(0)) && err(kilnmdlUnload(kNoModel)); }},
      {"kilnmdlCreateDesc",
       [](bool) {
         kilnmdlDesc* d = kilnmdlCreateDesc();
         return d != nullptr && kilnmdlDestroyDesc(d) == KILN_SUCCESS;
       }},
      {"kilnmdlDestroyDesc",
       [](bool) {
         return err(kilnmdlDestroyDesc(nullptr)) && err(kilnmdlDestroyDesc(foreign<kilnmdlDesc>()));
       }},
      {"kilnmdlGetDesc",
       [](bool) {
         kilnmdlDesc* d = kilnmdlCreateDesc();
         bool ok = err(kilnmdlGetDesc(nullptr, 0)) && err(kilnmdlGetDesc(d, 0)) &&
                   err(kilnmdlGetDesc(d, kNoModel));
         kilnmdlDestroyDesc(d);
         return ok;
       }},
      {"kilnmdlGetNumInputs", [](bool) { return zero(kilnmdlGetNumInputs(nullptr)); }},
      {"kilnmdlGetNumOutputs",
       [](bool) { return zero(kilnmdlGetNumOutputs(foreign<kilnmdlDesc>())); }},
      {"kilnmdlGetInputSizeByIndex",
       [](bool) { return zero(kilnmdlGetInputSizeByIndex(nullptr, 0)); }},
      {"kilnmdlGetOutputSizeByIndex",
       [](bool) { return zero(kilnmdlGetOutputSizeByIndex(nullptr, 0)); }},
      {"kilnmdlGetInputNameByIndex",
       [](bool) { return null(kilnmdlGetInputNameByIndex(nullptr, 0)); }},
      {"kilnmdlGetOutputNameByIndex",
       [](bool) { return null(kilnmdlGetOutputNameByIndex(nullptr, 0)); }},
      {"kilnmdlGetInputIndexByName",
       [](bool) { return err(kilnmdlGetInputIndexByName(nullptr, nullptr, nullptr)); }},
      {"kilnmdlGetOutputIndexByName",
       [](bool) { return err(kilnmdlGetOutputIndexByName(nullptr, nullptr, nullptr)); }},
      {"kilnmdlGetInputDims", [](bool) { return err(kilnmdlGetInputDims(nullptr, 0, nullptr)); }},
      {"kilnmdlGetOutputDims", [](bool) { return err(kilnmdlGetOutputDims(nullptr, 0, nullptr)); }},
      {"kilnmdlGetInputDataType",
       [](bool) { return kilnmdlGetInputDataType(nullptr, 0) == KILN_DT_UNDEFINED; }},
      {"kilnmdlGetOutputDataType",
       [](bool) { return kilnmdlGetOutputDataType(nullptr, 0) == KILN_DT_UNDEFINED; }},
      {"kilnmdlGetInputFormat",
       [](bool) { return kilnmdlGetInputFormat(nullptr, 0) == KILN_FORMAT_UNDEFINED; }},
      {"kilnmdlGetOutputFormat",
       [](bool) { return kilnmdlGetOutputFormat(nullptr, 0) == KILN_FORMAT_UNDEFINED; }},
      {"kilnmdlExecute",
       [](bool) {
         return err(kilnmdlExecute(0, nullptr, nullptr)) &&
                err(kilnmdlExecute(kNoModel, nullptr, nullptr));
       }},
      {"kilnmdlExecuteAsync",
       [&](bool) {
         return err(kilnmdlExecuteAsync(0, nullptr, nullptr, s)) &&
                err(kilnmdlExecuteAsync(kNoModel, nullptr, nullptr, s));
       }},
      // ---- AIPP ----
      {"kilnmdlCreateAIPP", [](bool) { return null(kilnmdlCreateAIPP(0)); }},
      {"kilnmdlDestroyAIPP",
       [](bool) {
         return err(kilnmdlDestroyAIPP(nullptr)) && err(kilnmdlDestroyAIPP(foreign<kilnmdlAIPP>()));
       }},
      {"kilnmdlSetAIPPInputFormat",
       [](bool) {
         return err(kilnmdlSetAIPPInputFormat(nullptr, static_cast<kilnAippInputFormat>(0)));
       }},
      {"kilnmdlSetAIPPCscParams",
       [](bool) {
         return err(
             kilnmdlSetAIPPCscParams(nullptr, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0));
       }},
      {"kilnmdlSetAIPPRbuvSwapSwitch",
       [](bool) { return err(kilnmdlSetAIPPRbuvSwapSwitch(nullptr, 0)); }},
      {"kilnmdlSetAIPPAxSwapSwitch",
       [](bool) { return err(kilnmdlSetAIPPAxSwapSwitch(nullptr, 0)); }},
      {"kilnmdlSetAIPPSrcImageSize",
       [](bool) { return err(kilnmdlSetAIPPSrcImageSize(nullptr, 8, 8)); }},
      {"kilnmdlSetAIPPScfParams",
       [](bool) { return err(kilnmdlSetAIPPScfParams(nullptr, 0, 8, 8, 8, 8, 0)); }},
      {"kilnmdlSetAIPPCropParams",
       [](bool) { return err(kilnmdlSetAIPPCropParams(nullptr, 0, 0, 0, 8, 8, 0)); }},
      {"kilnmdlSetAIPPPaddingParams",
       [](bool) { return err(kilnmdlSetAIPPPaddingParams(nullptr, 0, 0, 0, 0, 0, 0)); }},
      {"kilnmdlSetAIPPDtcPixelMean",
       [](bool) { return err(kilnmdlSetAIPPDtcPixelMean(nullptr, 0, 0, 0, 0, 0)); }},
      {"kilnmdlSetAIPPDtcPixelMin",
       [](bool) { return err(kilnmdlSetAIPPDtcPixelMin(nullptr, 0, 0, 0, 0, 0)); }},
      {"kilnmdlSetAIPPPixelVarReci",
       [](bool) { return err(kilnmdlSetAIPPPixelVarReci(nullptr, 1, 1, 1, 1, 0)); }},
      {"kilnmdlSetInputAIPP",
       [](bool) {
         return err(kilnmdlSetInputAIPP(0, nullptr, 0, nullptr)) &&
                err(kilnmdlSetInputAIPP(kNoModel, nullptr, 0, nullptr));
       }},
      {"kilnmdlSetAIPPByInputIndex",
       [](bool) { return err(kilnmdlSetAIPPByInputIndex(kNoModel, nullptr, 0, nullptr)); }},
      {"kilnmdlGetAippType",
       [](bool) {
         kilnmdlInputAippType type;
         size_t index = 0;
         return err(kilnmdlGetAippType(0, 0, nullptr, nullptr)) &&
                err(kilnmdlGetAippType(kNoModel, 0, &type, &index));
       }},
      {"kilnmdlGetFirstAippInfo",
       [](bool) {
         kilnAippInfo info;
         return err(kilnmdlGetFirstAippInfo(kNoModel, 0, &info)) &&
                err(kilnmdlGetFirstAippInfo(0, 0, nullptr));
       }},
      // ---- profiler (no session is open) ----
      {"kilnprofInit", [](bool) { return err(kilnprofInit(nullptr, 0)); }},
      {"kilnprofStart", [](bool) { return err(kilnprofStart()); }},
      {"kilnprofStop", [](bool) { return err(kilnprofStop()); }},
      {"kilnprofFinalize", [](bool) { return err(kilnprofFinalize()); }},
      // ---- communicators ----
      {"kilnCommGetRootInfo", [](bool) { return err(kilnCommGetRootInfo(nullptr)); }},
      {"kilnCommInitRootInfo",
       [](bool) { return err(kilnCommInitRootInfo(0, nullptr, 0, nullptr)); }},
      {"kilnCommInitFromEnv", [](bool) { return err(kilnCommInitFromEnv(nullptr)); }},
      {"kilnCommInitAll", [](bool) { return err(kilnCommInitAll(0, nullptr, nullptr)); }},
      {"kilnCommDestroy",
       [&](bool) { return err(kilnCommDestroy(nullptr)) && err(kilnCommDestroy(c)); }},
      {"kilnCommAbort", [&](bool) { return err(kilnCommAbort(c)); }},
      {"kilnCommGetRankId", [&](bool) { return err(kilnCommGetRankId(c, nullptr)); }},
      {"kilnCommGetRankSize", [&](bool) { return err(kilnCommGetRankSize(nullptr, nullptr)); }},
      {"kilnCommGetAsyncError", [&](bool) { return err(kilnCommGetAsyncError(c, nullptr)); }},
      {"kilnAllReduce",
       [&](bool) {
         return err(kilnAllReduce(nullptr, nullptr, 1, KILN_COMM_FP32, KILN_REDUCE_SUM, c, s));
       }},
      {"kilnBroadcast",
       [&](bool) { return err(kilnBroadcast(nullptr, 1, KILN_COMM_FP32, 0, c, s)); }},
      {"kilnReduce",
       [&](bool) {
         return err(kilnReduce(nullptr, nullptr, 1, KILN_COMM_FP32, KILN_REDUCE_SUM, 0, c, s));
       }},
      {"kilnAllGather",
       [&](bool) { return err(kilnAllGather(nullptr, nullptr, 1, KILN_COMM_FP32, c, s)); }},
      {"kilnReduceScatter",
       [&](bool) {
         return err(kilnReduceScatter(nullptr, nullptr, 1, KILN_COMM_FP32, KILN_REDUCE_SUM, c, s));
       }},
      {"kilnAlltoAll",
       [&](bool) {
         return err(kilnAlltoAll(nullptr, 1, KILN_COMM_FP32, nullptr, 1, KILN_COMM_FP32, c, s));
       }},
      {"kilnAlltoAllV",
       [&](bool) {
         return err(kilnAlltoAllV(nullptr, nullptr, nullptr, KILN_COMM_FP32, nullptr, nullptr,
                                  nullptr, KILN_COMM_FP32, c, s));
       }},
      {"kilnSend", [&](bool) { return err(kilnSend(nullptr, 1, KILN_COMM_FP32, 0, c, s)); }},
      {"kilnRecv", [&](bool) { return err(kilnRecv(nullptr, 1, KILN_COMM_FP32, 0, c, s)); }},
      {"kilnBarrier", [&](bool) { return err(kilnBarrier(c, s)); }},
      {"kilnGroupEnd", [](bool) { return err(kilnGroupEnd()); }},  // no group is open
      // No invalid input: an empty group opened and closed.
      {"kilnGroupStart",
       [](bool) { return kilnGroupStart() == KILN_SUCCESS && kilnGroupEnd() == KILN_SUCCESS; }},
      // ---- single-operator mode (kiln_op.h; the probing thread has no current context) ----
      // No invalid input: an attribute set made and destroyed.
      {"kilnopCreateAttr",
       [](bool) {
         kilnopAttr* a = kilnopCreateAttr();
         kilnopDestroyAttr(a);
         return a != nullptr;
       }},
      {"kilnopDestroyAttr",
       [](bool) {
         kilnopDestroyAttr(foreign<kilnopAttr>());
         return true;
       }},
      {"kilnopSetAttrInt",
       [](bool) {
         return err(kilnopSetAttrInt(nullptr, "a", 1)) && err(kilnopSetAttrInt(foreign<kilnopAttr>(), "a", 1));
       }},
      {"kilnopSetAttrFloat", [](bool) { return err(kilnopSetAttrFloat(foreign<kilnopAttr>(), "a", 1.0f)); }},
      {"kilnopSetAttrString",
       [](bool) { return err(kilnopSetAttrString(foreign<kilnopAttr>(), "a", nullptr)); }},
      {"kilnopSetAttrListInt",
       [](bool) { return err(kilnopSetAttrListInt(foreign<kilnopAttr>(), "a", -1, nullptr)); }},
      {"kilnopSetAttrListFloat",
       [](bool) { return err(kilnopSetAttrListFloat(nullptr, nullptr, 1, nullptr)); }},
      {"kilnopExecute",
       [&](bool) {
         return err(kilnopExecute(nullptr, nullptr, 17, -1, nullptr, nullptr, 0, nullptr, nullptr,
                                  foreign<kilnopAttr>(), s)) &&
                err(kilnopExecute("Add", "", 17, 0, nullptr, nullptr, 1, nullptr, nullptr, nullptr, s));
       }},
      {"kilnopCompile",
       [](bool) {
         return err(kilnopCompile(nullptr, nullptr, 0, 0, nullptr, nullptr)) &&
                err(kilnopCompile("Add", "", 17, 2, nullptr, foreign<kilnopAttr>()));
       }},
      {"kilnopInferShape",
       [](bool) { return err(kilnopInferShape("Add", "", 17, 2, nullptr, 1, nullptr, nullptr)); }},
      {"kilnopSetCacheCapacity", [](bool) { return err(kilnopSetCacheCapacity(0)); }},
      {"kilnopGetCacheStats", [](bool) { return err(kilnopGetCacheStats(nullptr, nullptr, nullptr)); }},
      // No invalid input: clearing the cache always works.
      {"kilnopClearCache", [](bool) { return kilnopClearCache() == KILN_SUCCESS; }},
      // ---- LLM decoding (llm.h): NULL pointers, a foreign engine handle, no model ----
      {"kilnllmEngineOptionsInit", [](bool) { return err(kilnllmEngineOptionsInit(nullptr)); }},
      {"kilnllmRequestParamsInit", [](bool) { return err(kilnllmRequestParamsInit(nullptr)); }},
      {"kilnllmCreateEngine",
       [](bool) {
         kilnllmEngine* engine = nullptr;
         return err(kilnllmCreateEngine(nullptr, nullptr, &engine)) &&
                err(kilnllmCreateEngine("/nonexistent/decoder", nullptr, &engine)) && engine == nullptr;
       }},
      {"kilnllmDestroyEngine",
       [](bool) {
         return err(kilnllmDestroyEngine(nullptr)) && err(kilnllmDestroyEngine(foreign<kilnllmEngine>()));
       }},
      {"kilnllmGetModelInfo", [](bool) { return err(kilnllmGetModelInfo(foreign<kilnllmEngine>(), nullptr)); }},
      {"kilnllmAddRequest",
       [](bool) {
         int64_t id = 0;
         return err(kilnllmAddRequest(foreign<kilnllmEngine>(), nullptr, 1, nullptr, &id));
       }},
      {"kilnllmCancelRequest", [](bool) { return err(kilnllmCancelRequest(foreign<kilnllmEngine>(), 0)); }},
      {"kilnllmReleaseRequest", [](bool) { return err(kilnllmReleaseRequest(nullptr, 0)); }},
      {"kilnllmGetRequestStatus",
       [](bool) { return err(kilnllmGetRequestStatus(foreign<kilnllmEngine>(), 0, nullptr, nullptr)); }},
      {"kilnllmGetRequestTokens",
       [](bool) { return err(kilnllmGetRequestTokens(foreign<kilnllmEngine>(), 0, nullptr, 4, nullptr)); }},
      {"kilnllmPollTokens",
       [](bool) { return err(kilnllmPollTokens(foreign<kilnllmEngine>(), 0, nullptr, 4, nullptr, nullptr)); }},
      {"kilnllmGetRequestLogits",
       [](bool) { return err(kilnllmGetRequestLogits(foreign<kilnllmEngine>(), 0, 0, nullptr, 0)); }},
      {"kilnllmSetTokenCallback",
       [](bool) { return err(kilnllmSetTokenCallback(foreign<kilnllmEngine>(), nullptr, nullptr)); }},
      {"kilnllmStep", [](bool) { return err(kilnllmStep(foreign<kilnllmEngine>(), nullptr)); }},
      {"kilnllmRunToCompletion", [](bool) { return err(kilnllmRunToCompletion(nullptr)); }},
      {"kilnllmGetStats", [](bool) { return err(kilnllmGetStats(foreign<kilnllmEngine>(), nullptr)); }},
      // ---- LLM tokenizer (a host object: the same answers before and after kilnInit) ----
      {"kilnllmCreateTokenizer",
       [](bool) {
         kilnllmTokenizer* tok = nullptr;
         return err(kilnllmCreateTokenizer(nullptr, &tok)) && err(kilnllmCreateTokenizer("x.model", nullptr)) &&
                err(kilnllmCreateTokenizer("/nonexistent/tokenizer.model", &tok)) && tok == nullptr;
       }},
      {"kilnllmDestroyTokenizer",
       [](bool) {
         return err(kilnllmDestroyTokenizer(nullptr)) && err(kilnllmDestroyTokenizer(foreign<kilnllmTokenizer>()));
       }},
      {"kilnllmTokenize",
       [](bool) {
         int64_t ids[4];
         size_t n = 0;
         return err(kilnllmTokenize(nullptr, "x", 1, ids, 4, &n)) &&
                err(kilnllmTokenize(foreign<kilnllmTokenizer>(), nullptr, 1, nullptr, 4, nullptr));
       }},
      {"kilnllmDetokenize",
       [](bool) {
         const int64_t ids[] = {1, 2};
         char text[8];
         size_t n = 0;
         return err(kilnllmDetokenize(nullptr, ids, 2, text, 8, &n)) &&
                err(kilnllmDetokenize(foreign<kilnllmTokenizer>(), nullptr, 2, nullptr, 8, nullptr));
       }},
      {"kilnllmTokenizerBosId", [](bool) { return err(kilnllmTokenizerBosId(foreign<kilnllmTokenizer>(), nullptr)); }},
      {"kilnllmTokenizerEosId", [](bool) { return err(kilnllmTokenizerEosId(nullptr, nullptr)); }},
      {"kilnllmTokenizerVocabSize",
       [](bool) {
         int64_t v = 0;
         return err(kilnllmTokenizerVocabSize(foreign<kilnllmTokenizer>(), &v));
       }},
      {"kilnllmAddTextRequest",
       [](bool) {
         int64_t id = -1;
         return err(kilnllmAddTextRequest(foreign<kilnllmEngine>(), foreign<kilnllmTokenizer>(), "x", nullptr, &id)) &&
                err(kilnllmAddTextRequest(nullptr, nullptr, nullptr, nullptr, nullptr));
       }},
  };
}

// The public functions a header declares: every "kiln...(" outside comments.
std::set<std::string> declared_functions(const std::string& header) {
  const char* src = std::getenv("KILN_SOURCE_DIR");
  std::ifstream in(std::string(src ? src : ".") + "/include/kiln/" + header);
  EXPECT_TRUE(in.good()) << header << " (KILN_SOURCE_DIR not set?)";
  std::stringstream text;
  text << in.rdbuf();
  std::string code = std::regex_replace(text.str(), std::regex(R"(/\*[\s\S]*?\*/|//[^\n]*)"), " ");
  std::set<std::string> names;
  std::regex call(R"(\b(kiln[A-Za-z0-9_]*)\s*\()");
  for (std::sregex_iterator it(code.begin(), code.end(), call), end; it != end; ++it) {
    names.insert((*it)[1]);
  }
  return names;
}

// The functions named kiln* that the loaded libkiln.so exports: its dynamic symbol table
// (defined, global or weak, default visibility), read from the file dladdr names as the home
// of kilnInit. Bounds are checked: a file that is not a 64-bit ELF is a test failure.
std::set<std::string> exported_functions() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&kilnInit), &info) == 0 || info.dli_fname == nullptr) {
    ADD_FAILURE() << "dladdr found no library holding kilnInit";
    return {};
  }
  // Linked statically, the probes would test the archives, not the library users load.
  EXPECT_NE(std::strstr(info.dli_fname, "libkiln.so"), nullptr)
      << "kilnInit comes from " << info.dli_fname << ", not from libkiln.so";
  std::ifstream in(info.dli_fname, std::ios::binary);
  const std::string image((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto fits = [&](uint64_t offset, uint64_t bytes) {
    return offset <= image.size() && bytes <= image.size() - offset;
  };
  Elf64_Ehdr eh;
  if (!fits(0, sizeof(eh)) || std::memcmp(image.data(), ELFMAG, SELFMAG) != 0 ||
      image[EI_CLASS] != ELFCLASS64) {
    ADD_FAILURE() << info.dli_fname << " is not a 64-bit ELF file";
    return {};
  }
  std::memcpy(&eh, image.data(), sizeof(eh));
  auto section = [&](uint64_t index, Elf64_Shdr* sh) {
    const uint64_t offset = eh.e_shoff + index * eh.e_shentsize;
    if (index >= eh.e_shnum || eh.e_shentsize < sizeof(*sh) || !fits(offset, sizeof(*sh))) return false;
    std::memcpy(sh, image.data() + offset, sizeof(*sh));
    return true;
  };
  std::set<std::string> names;
  Elf64_Shdr symtab, strtab;
  for (uint64_t i = 0; section(i, &symtab); ++i) {
    if (symtab.sh_type != SHT_DYNSYM) continue;
    if (!section(symtab.sh_link, &strtab) || !fits(symtab.sh_offset, symtab.sh_size) ||
        !fits(strtab.sh_offset, strtab.sh_size)) {
      ADD_FAILURE() << info.dli_fname << ": its dynamic symbol table runs past the file";
      return {};
    }
    for (uint64_t at = 0; at + sizeof(Elf64_Sym) <= symtab.sh_size; at += sizeof(Elf64_Sym)) {
      Elf64_Sym sym;
      std::memcpy(&sym, image.data() + symtab.sh_offset + at, sizeof(sym));
      if (ELF64_ST_TYPE(sym.st_info) != STT_FUNC || sym.st_shndx == SHN_UNDEF ||
          ELF64_ST_BIND(sym.st_info) == STB_LOCAL || ELF64_ST_VISIBILITY(sym.st_other) != STV_DEFAULT ||
          sym.st_name >= strtab.sh_size) {
        continue;
      }
      const char* name = image.data() + strtab.sh_offset + sym.st_name;
      const std::string n(name, strnlen(name, strtab.sh_size - sym.st_name));
      if (n.rfind("kiln", 0) == 0) names.insert(n);
    }
  }
  return names;
}

void run_probes(bool initialized) {
  for (const Probe& p : probes()) {
    SCOPED_TRACE(p.name);
    EXPECT_TRUE(p.call(initialized))
        << p.name << (initialized ? " after" : " before") << " kilnInit: " << kilnGetRecentErrMsg();
  }
}

TEST(EntryGuardTest, EveryPublicFunctionHasAProbe) {
  std::set<std::string> probed;
  for (const Probe& p : probes()) EXPECT_TRUE(probed.insert(p.name).second) << "twice: " << p.name;
  std::set<std::string> declared = declared_functions("kiln.h");
  for (const std::string& n : declared_functions("comm.h")) declared.insert(n);
  for (const std::string& n : declared_functions("kiln_op.h")) declared.insert(n);
  for (const std::string& n : declared_functions("llm.h")) declared.insert(n);
  ASSERT_GT(declared.size(), 100u);
  for (const std::string& n : declared) EXPECT_TRUE(probed.count(n)) << n << " has no probe here";
  for (const std::string& n : probed)
    EXPECT_TRUE(declared.count(n)) << n << " is not in the headers";
}

TEST(EntryGuardTest, EveryExportedFunctionHasAProbe) {
  std::set<std::string> probed;
  for (const Probe& p : probes()) probed.insert(p.name);
  const std::set<std::string> exported = exported_functions();
  ASSERT_GT(exported.size(), 100u);
  for (const std::string& n : exported)
    EXPECT_TRUE(probed.count(n)) << n << " is exported by libkiln.so and has no probe here";
  for (const std::string& n : probed)
    EXPECT_TRUE(exported.count(n)) << n << " has a probe but libkiln.so does not export it";
}

TEST(EntryGuardTest, InvalidArgumentsFailBeforeAndAfterInit) {
  run_probes(/*initialized=*/false);

  ASSERT_EQ(kilnInit(nullptr), KILN_SUCCESS);
  // A destroyed stream and event, made on another thread so this one stays without a
  // current context (kilnrtSynchronizeDevice then has nothing to wait for: an error).
  std::thread([] {
    ASSERT_EQ(kilnrtSetDevice(0), KILN_SUCCESS);
    ASSERT_EQ(kilnrtCreateStream(&g_dead_stream), KILN_SUCCESS);
    ASSERT_EQ(kilnrtDestroyStream(g_dead_stream), KILN_SUCCESS);
    ASSERT_EQ(kilnrtCreateEvent(&g_dead_event), KILN_SUCCESS);
    ASSERT_EQ(kilnrtDestroyEvent(g_dead_event), KILN_SUCCESS);
    ASSERT_EQ(kilnrtResetDevice(0), KILN_SUCCESS);
  }).join();
  run_probes(/*initialized=*/true);
  EXPECT_EQ(kilnFinalize(), KILN_SUCCESS);

  // After kilnFinalize the runtime is gone again.
  g_dead_stream = &g_foreign;
  g_dead_event = &g_foreign;
  run_probes(/*initialized=*/false);
}

}  // namespace
