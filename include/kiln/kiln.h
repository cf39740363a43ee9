/*
 * Kiln runtime C API: devices, contexts, streams, events, memory, models.
 *
 * Names and signatures mirror AscendCL with `acl` renamed to `kiln`, so code written
 * against CANN ports by renaming; docs/porting.md lists every AscendCL name and its
 * Kiln twin. The ABI is plain C: opaque handles, fixed-width integers, error codes.
 *
 * Every function returning kilnError returns KILN_SUCCESS (0) or an error code, and on
 * error leaves a message for the calling thread in kilnGetRecentErrMsg(). Functions
 * that return a handle or a size return NULL / 0 on error and leave the message too.
 *
 * Device memory is its own domain even on the CPU device: a host pointer where a device
 * pointer belongs (or a pointer of another device, or a freed one) is an error code.
 */
#ifndef KILN_KILN_H_
#define KILN_KILN_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define KILN_API __attribute__((visibility("default")))
#else
#define KILN_API
#endif

#define KILN_VERSION_MAJOR 0
#define KILN_VERSION_MINOR 1
#define KILN_VERSION_PATCH 0

/* ---- Errors ------------------------------------------------------------------------ */

typedef int kilnError;

#define KILN_SUCCESS 0
/* Parameter and state errors (AscendCL's 1000xx numbering). */
#define KILN_ERROR_INVALID_PARAM 100000
#define KILN_ERROR_UNINITIALIZE 100001
#define KILN_ERROR_REPEAT_INITIALIZE 100002
#define KILN_ERROR_INVALID_FILE 100003
#define KILN_ERROR_WRITE_FILE 100004
#define KILN_ERROR_INVALID_FILE_SIZE 100005
#define KILN_ERROR_PARSE_FILE 100006
#define KILN_ERROR_INVALID_MODEL_ID 100011
#define KILN_ERROR_DESERIALIZE_MODEL 100012
#define KILN_ERROR_PARSE_MODEL 100013
#define KILN_ERROR_READ_MODEL_FAILURE 100014
#define KILN_ERROR_MODEL_SIZE_INVALID 100015
#define KILN_ERROR_MODEL_INPUT_NOT_MATCH 100017
#define KILN_ERROR_MODEL_OUTPUT_NOT_MATCH 100018
#define KILN_ERROR_MODEL_NOT_DYNAMIC 100019
/* Runtime errors. */
#define KILN_ERROR_RT_CONTEXT_NULL 107002       /* no current context on this thread */
#define KILN_ERROR_RT_STREAM_CONTEXT 107003     /* stream of another context/device */
#define KILN_ERROR_RT_EVENT_NOT_RECORDED 107010 /* elapsed time of an unrecorded event */
#define KILN_ERROR_RT_TIMEOUT 107020            /* a synchronize ran out of time */
#define KILN_ERROR_RT_TASK_FAILED 107021        /* a task on the stream failed */
/* Resource errors (AscendCL's 2000xx numbering). */
#define KILN_ERROR_BAD_ALLOC 200000
#define KILN_ERROR_API_NOT_SUPPORT 200001
#define KILN_ERROR_INVALID_DEVICE 200002
#define KILN_ERROR_MEMORY_ADDRESS_UNALIGNED 200003
#define KILN_ERROR_RESOURCE_NOT_MATCH 200004
#define KILN_ERROR_INVALID_RESOURCE_HANDLE 200005
#define KILN_ERROR_FEATURE_UNSUPPORTED 200006
#define KILN_ERROR_INVALID_MEMORY 200010 /* not a live allocation of the right domain */
#define KILN_ERROR_STORAGE_OVER_LIMIT 300000
#define KILN_ERROR_INTERNAL_ERROR 500000
#define KILN_ERROR_FAILURE 500001

/* The message of the last failed call on this thread ("" if none). Valid until the
 * thread's next failing call. */
KILN_API const char* kilnGetRecentErrMsg(void);

/* ---- Data types and formats (AscendCL's numbering) -------------------------------------- */

typedef enum {
  KILN_DT_UNDEFINED = -1,
  KILN_FLOAT = 0,
  KILN_FLOAT16 = 1,
  KILN_INT8 = 2,
  KILN_INT32 = 3,
  KILN_UINT8 = 4,
  KILN_INT16 = 6,
  KILN_UINT16 = 7,
  KILN_UINT32 = 8,
  KILN_INT64 = 9,
  KILN_UINT64 = 10,
  KILN_DOUBLE = 11,
  KILN_BOOL = 12,
  KILN_STRING = 13,
  KILN_COMPLEX64 = 16,
  KILN_COMPLEX128 = 17,
  KILN_BF16 = 27
} kilnDataType;

typedef enum {
  KILN_FORMAT_UNDEFINED = -1,
  KILN_FORMAT_NCHW = 0,
  KILN_FORMAT_NHWC = 1,
  KILN_FORMAT_ND = 2,
  KILN_FORMAT_NC1HWC0 = 3
} kilnFormat;

/* Bytes per element (0 for KILN_STRING and KILN_DT_UNDEFINED). */
KILN_API size_t kilnDataTypeSize(kilnDataType dataType);

/* ---- Initialisation ---------------------------------------------------------------- */

/* configPath: NULL, or a JSON file such as {"devices": "cpu:2"} or
 * {"devices": {"kind": "cpu", "count": 2, "memory_mb": 4096}}. Without a config,
 * KILN_DEVICES=cpu:N decides; the default is one CPU device owning every core. */
KILN_API kilnError kilnInit(const char* configPath);
/* Waits for all work, then releases every stream, event, context, model and allocation. */
KILN_API kilnError kilnFinalize(void);
KILN_API kilnError kilnrtGetVersion(int32_t* majorVersion, int32_t* minorVersion, int32_t* patchVersion);

typedef enum { KILN_DEVICE = 0, KILN_HOST = 1 } kilnrtRunMode;
/* Always KILN_HOST: the program runs on the host and drives the devices. */
KILN_API kilnError kilnrtGetRunMode(kilnrtRunMode* runMode);

/* ---- Devices and contexts ------------------------------------------------------------ */

typedef void* kilnrtContext;
typedef void* kilnrtStream;
typedef void* kilnrtEvent;

KILN_API kilnError kilnrtGetDeviceCount(uint32_t* count);
/* Makes deviceId current on this thread, creating its default context on first use. */
KILN_API kilnError kilnrtSetDevice(int32_t deviceId);
KILN_API kilnError kilnrtGetDevice(int32_t* deviceId);
/* Waits for the device's work, then releases its default context and default stream
 * once every kilnrtSetDevice of it has been matched. */
KILN_API kilnError kilnrtResetDevice(int32_t deviceId);
/* Waits until every stream of the current device is idle. */
KILN_API kilnError kilnrtSynchronizeDevice(void);
KILN_API kilnError kilnrtSynchronizeDeviceWithTimeout(int32_t timeout);

/* Creates a context on deviceId and makes it current on this thread. */
KILN_API kilnError kilnrtCreateContext(kilnrtContext* context, int32_t deviceId);
KILN_API kilnError kilnrtDestroyContext(kilnrtContext context);
KILN_API kilnError kilnrtSetCurrentContext(kilnrtContext context);
KILN_API kilnError kilnrtGetCurrentContext(kilnrtContext* context);

/* ---- Streams ---------------------------------------------------------------------- */

/* A stream is an in-order asynchronous queue on the current context's device. Passing
 * NULL as a stream means the current context's default stream. */
KILN_API kilnError kilnrtCreateStream(kilnrtStream* stream);
/* Waits for the stream's work, then destroys it. */
KILN_API kilnError kilnrtDestroyStream(kilnrtStream stream);
/* Waits for every task submitted so far. If a task failed since the last synchronize,
 * returns KILN_ERROR_RT_TASK_FAILED with that task's message and clears the state. */
KILN_API kilnError kilnrtSynchronizeStream(kilnrtStream stream);
/* timeout in milliseconds; -1 waits forever. KILN_ERROR_RT_TIMEOUT when time runs out. */
KILN_API kilnError kilnrtSynchronizeStreamWithTimeout(kilnrtStream stream, int32_t timeout);

typedef enum {
  KILN_STREAM_STATUS_COMPLETE = 0,
  KILN_STREAM_STATUS_NOT_READY = 1
} kilnrtStreamStatus;
KILN_API kilnError kilnrtStreamQuery(kilnrtStream stream, kilnrtStreamStatus* status);
/* Later work on `stream` waits until the event's latest record (at the time of this
 * call) has completed; works across streams, contexts and devices. Waiting on an
 * event never recorded is a no-op. */
KILN_API kilnError kilnrtStreamWaitEvent(kilnrtStream stream, kilnrtEvent event);

/* ---- Events ----------------------------------------------------------------------- */

KILN_API kilnError kilnrtCreateEvent(kilnrtEvent* event);
/* Flags of kilnrtCreateEventWithFlag, AscendCL's values; any combination is accepted.
 * Every Kiln event keeps timestamps and can be waited on, so they change nothing. */
#define KILN_EVENT_SYNC 0x00000001u
#define KILN_EVENT_CAPTURE_STREAM_PROGRESS 0x00000002u
#define KILN_EVENT_TIME_LINE 0x00000008u
KILN_API kilnError kilnrtCreateEventWithFlag(kilnrtEvent* event, uint32_t flag);
KILN_API kilnError kilnrtDestroyEvent(kilnrtEvent event);
/* Completes (and takes a timestamp) when all work submitted to `stream` before it has run. */
KILN_API kilnError kilnrtRecordEvent(kilnrtEvent event, kilnrtStream stream);
KILN_API kilnError kilnrtResetEvent(kilnrtEvent event, kilnrtStream stream);

typedef enum {
  KILN_EVENT_STATUS_COMPLETE = 0,
  KILN_EVENT_STATUS_NOT_READY = 1,
  KILN_EVENT_STATUS_RESERVED = 2
} kilnrtEventStatus;
KILN_API kilnError kilnrtQueryEvent(kilnrtEvent event, kilnrtEventStatus* status);
KILN_API kilnError kilnrtSynchronizeEvent(kilnrtEvent event);
KILN_API kilnError kilnrtSynchronizeEventWithTimeout(kilnrtEvent event, int32_t timeout);
/* Milliseconds between two completed records. */
KILN_API kilnError kilnrtEventElapsedTime(float* ms, kilnrtEvent startEvent, kilnrtEvent endEvent);

/* ---- Host callbacks ----------------------------------------------------------------- */

typedef void (*kilnrtCallback)(void* userData);
typedef enum { KILN_CALLBACK_NO_BLOCK = 0, KILN_CALLBACK_BLOCK = 1 } kilnrtCallbackBlockType;
/* Runs fn(userData) on a host thread in stream order. With KILN_CALLBACK_BLOCK later
 * work on the stream waits for the callback to return; with NO_BLOCK it does not. If a
 * thread subscribed to the stream (kilnrtSubscribeReport), the callback runs on that
 * thread inside kilnrtProcessReport; otherwise on the stream's own host thread. */
KILN_API kilnError kilnrtLaunchCallback(kilnrtCallback fn, void* userData, kilnrtCallbackBlockType blockType,
                                        kilnrtStream stream);
KILN_API kilnError kilnrtSubscribeReport(uint64_t threadId, kilnrtStream stream);
KILN_API kilnError kilnrtUnSubscribeReport(uint64_t threadId, kilnrtStream stream);
/* Runs the callbacks pending for streams this thread subscribed to; waits up to
 * `timeout` ms (-1: forever) for one. KILN_ERROR_RT_TIMEOUT if none came. */
KILN_API kilnError kilnrtProcessReport(int32_t timeout);

/* ---- Memory ----------------------------------------------------------------------- */

typedef enum {
  KILN_MEM_MALLOC_HUGE_FIRST = 0,
  KILN_MEM_MALLOC_HUGE_ONLY = 1,
  KILN_MEM_MALLOC_NORMAL_ONLY = 2
} kilnrtMemMallocPolicy;

typedef enum {
  KILN_MEMCPY_HOST_TO_HOST = 0,
  KILN_MEMCPY_HOST_TO_DEVICE = 1,
  KILN_MEMCPY_DEVICE_TO_HOST = 2,
  KILN_MEMCPY_DEVICE_TO_DEVICE = 3,
  KILN_MEMCPY_DEFAULT = 4 /* direction told by the pointers */
} kilnrtMemcpyKind;

typedef enum {
  KILN_DDR_MEM = 0,
  KILN_HBM_MEM = 1,
  KILN_DDR_MEM_HUGE = 2,
  KILN_DDR_MEM_NORMAL = 3,
  KILN_HBM_MEM_HUGE = 4,
  KILN_HBM_MEM_NORMAL = 5
} kilnrtMemAttr;

/* Device memory on the current device, 64-byte aligned, from a caching allocator. */
KILN_API kilnError kilnrtMalloc(void** devPtr, size_t size, kilnrtMemMallocPolicy policy);
/* Returns memory to the device's cache; it is reused once the streams that could still
 * touch it have passed the point of the free. */
KILN_API kilnError kilnrtFree(void* devPtr);
/* Page-locked host memory (staging buffers for asynchronous copies). */
KILN_API kilnError kilnrtMallocHost(void** hostPtr, size_t size);
KILN_API kilnError kilnrtFreeHost(void* hostPtr);
/* Copies `count` bytes; destMax is the capacity at dst. The kind must match the
 * pointers' domains. Synchronous. Overlapping ranges copy as memmove does. */
KILN_API kilnError kilnrtMemcpy(void* dst, size_t destMax, const void* src, size_t count, kilnrtMemcpyKind kind);
/* Enqueued on the stream's device copy engine; returns at once. Host memory must stay
 * valid until the copy has run. */
KILN_API kilnError kilnrtMemcpyAsync(void* dst, size_t destMax, const void* src, size_t count,
                                     kilnrtMemcpyKind kind, kilnrtStream stream);
/* Pitched 2-D copy (image planes): `height` rows of `width` bytes, row r read at
 * src + r * spitch and written at dst + r * dpitch. The kind and the pointers' domains are
 * checked as for kilnrtMemcpy over the whole span of each side ((height - 1) * pitch +
 * width bytes): a device pointer where the kind wants host memory, or a span running past
 * its allocation, is KILN_ERROR_INVALID_MEMORY. width > dpitch or width > spitch, NULL
 * pointers, an unknown kind, spans that overflow size_t or that overlap each other are
 * KILN_ERROR_INVALID_PARAM. width or height 0 copies nothing. Synchronous, on the calling
 * thread, not ordered with stream work (as kilnrtMemcpy). */
KILN_API kilnError kilnrtMemcpy2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                  size_t height, kilnrtMemcpyKind kind);
/* The same, enqueued on the stream's device copy engine; returns at once. Device memory
 * must be of the stream's device (KILN_ERROR_INVALID_MEMORY otherwise); host memory must
 * stay valid until the copy has run. */
KILN_API kilnError kilnrtMemcpy2dAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                       size_t height, kilnrtMemcpyKind kind, kilnrtStream stream);
/* Sets `count` bytes of device memory to (unsigned char)value. */
KILN_API kilnError kilnrtMemset(void* devPtr, size_t maxCount, int32_t value, size_t count);
KILN_API kilnError kilnrtMemsetAsync(void* devPtr, size_t maxCount, int32_t value, size_t count,
                                     kilnrtStream stream);
/* Free and total bytes of the current device's memory domain. */
KILN_API kilnError kilnrtGetMemInfo(kilnrtMemAttr attr, size_t* free, size_t* total);

/* Statistics of a device's caching allocator (a Kiln extension). Byte counts are of whole
 * blocks: a request is rounded up to its size class (512 B steps up to 1 MiB, 2 MiB above). */
typedef struct {
  size_t inUse;          /* bytes handed out and not freed */
  size_t cached;         /* bytes held in the cache, free for reuse */
  size_t peakInUse;      /* highest inUse since kilnInit or the last reset */
  size_t reserved;       /* inUse + cached, rounded to blocks */
  uint64_t allocCount;   /* kilnrtMalloc calls */
  uint64_t cacheHits;    /* of those, served from the cache */
  double fragmentation;  /* 1 - largest cached block / cached (0 when nothing cached) */
} kilnrtMemStats;
KILN_API kilnError kilnrtGetMemStats(int32_t deviceId, kilnrtMemStats* stats);
/* Releases the cached (free) blocks of the device back to the system. */
KILN_API kilnError kilnrtEmptyCache(int32_t deviceId);

/* ---- Tensor descriptions ----------------------------------------------------------- */

typedef struct kilnTensorDesc kilnTensorDesc;
KILN_API kilnTensorDesc* kilnCreateTensorDesc(kilnDataType dataType, int numDims, const int64_t* dims,
                                              kilnFormat format);
KILN_API void kilnDestroyTensorDesc(const kilnTensorDesc* desc);
KILN_API kilnDataType kilnGetTensorDescType(const kilnTensorDesc* desc);
KILN_API kilnFormat kilnGetTensorDescFormat(const kilnTensorDesc* desc);
KILN_API size_t kilnGetTensorDescNumDims(const kilnTensorDesc* desc);
KILN_API kilnError kilnGetTensorDescDimV2(const kilnTensorDesc* desc, size_t index, int64_t* dimSize);
KILN_API size_t kilnGetTensorDescElementCount(const kilnTensorDesc* desc);
KILN_API size_t kilnGetTensorDescSize(const kilnTensorDesc* desc);

/* ---- Data buffers and datasets ------------------------------------------------------ */

typedef struct kilnDataBuffer kilnDataBuffer;
/* Wraps (does not own) `size` bytes at `data`, normally device memory. */
KILN_API kilnDataBuffer* kilnCreateDataBuffer(void* data, size_t size);
KILN_API kilnError kilnDestroyDataBuffer(const kilnDataBuffer* dataBuffer);
KILN_API kilnError kilnUpdateDataBuffer(kilnDataBuffer* dataBuffer, void* data, size_t size);
KILN_API void* kilnGetDataBufferAddr(const kilnDataBuffer* dataBuffer);
KILN_API size_t kilnGetDataBufferSizeV2(const kilnDataBuffer* dataBuffer);

typedef struct kilnmdlDataset kilnmdlDataset;
KILN_API kilnmdlDataset* kilnmdlCreateDataset(void);
/* Destroys the dataset, not the buffers in it. */
KILN_API kilnError kilnmdlDestroyDataset(const kilnmdlDataset* dataset);
KILN_API kilnError kilnmdlAddDatasetBuffer(kilnmdlDataset* dataset, kilnDataBuffer* dataBuffer);
KILN_API size_t kilnmdlGetDatasetNumBuffers(const kilnmdlDataset* dataset);
KILN_API kilnDataBuffer* kilnmdlGetDatasetBuffer(const kilnmdlDataset* dataset, size_t index);
/* The actual shape of input `index` when the model's input has dims not fixed at
 * compile time. The dataset keeps a copy. */
KILN_API kilnError kilnmdlSetDatasetTensorDesc(kilnmdlDataset* dataset, kilnTensorDesc* tensorDesc, size_t index);
/* After an execution: the actual shape of output `index` (owned by the dataset). */
KILN_API kilnTensorDesc* kilnmdlGetDatasetTensorDesc(const kilnmdlDataset* dataset, size_t index);

/* ---- Models ------------------------------------------------------------------------- */

#define KILN_MAX_DIM_CNT 128
#define KILN_MAX_TENSOR_NAME_LEN 128

typedef struct {
  char name[KILN_MAX_TENSOR_NAME_LEN];
  size_t dimCount;
  int64_t dims[KILN_MAX_DIM_CNT]; /* -1 for a dim not fixed at compile time; a rank not
                                     known: dimCount 1 and dims[0] == -2 (as AscendCL) */
} kilnmdlIODims;

typedef struct kilnmdlDesc kilnmdlDesc;

/* Loads a .kiln model (read into memory, or mapped with KILN_MODEL_LOAD=map; validated)
 * for the current context's device. Weights are
 * shared by every execution; each execution gets its own activation arena. */
KILN_API kilnError kilnmdlLoadFromFile(const char* modelPath, uint32_t* modelId);
/* From bytes in host memory; the bytes are copied. */
KILN_API kilnError kilnmdlLoadFromMem(const void* model, size_t modelSize, uint32_t* modelId);
/* Like kilnmdlLoadFromFile, with a caller-provided activation workspace of workSize
 * bytes (at least what kilnmdlQuerySize reports) used by executions of this model one
 * at a time. workPtr: 64-byte aligned device memory of the current device, or NULL to
 * leave activations to the runtime. weightPtr must be NULL: weights stay in the loaded
 * file. */
KILN_API kilnError kilnmdlLoadFromFileWithMem(const char* modelPath, uint32_t* modelId, void* workPtr,
                                              size_t workSize, void* weightPtr, size_t weightSize);
/* Workspace an execution needs at most, and the bytes of weights. Fails with
 * KILN_ERROR_FEATURE_UNSUPPORTED for models whose workspace cannot be bounded ahead of
 * time (dims not fixed, sequences, Loop/Scan). */
KILN_API kilnError kilnmdlQuerySize(const char* fileName, size_t* workSize, size_t* weightSize);
/* Waits for the model's executions in flight, then releases it. */
KILN_API kilnError kilnmdlUnload(uint32_t modelId);

KILN_API kilnmdlDesc* kilnmdlCreateDesc(void);
KILN_API kilnError kilnmdlDestroyDesc(kilnmdlDesc* modelDesc);
KILN_API kilnError kilnmdlGetDesc(kilnmdlDesc* modelDesc, uint32_t modelId);
KILN_API size_t kilnmdlGetNumInputs(kilnmdlDesc* modelDesc);
KILN_API size_t kilnmdlGetNumOutputs(kilnmdlDesc* modelDesc);
/* Bytes of input/output `index` (0 when a dim is not fixed at compile time). */
KILN_API size_t kilnmdlGetInputSizeByIndex(kilnmdlDesc* modelDesc, size_t index);
KILN_API size_t kilnmdlGetOutputSizeByIndex(kilnmdlDesc* modelDesc, size_t index);
KILN_API const char* kilnmdlGetInputNameByIndex(const kilnmdlDesc* modelDesc, size_t index);
KILN_API const char* kilnmdlGetOutputNameByIndex(const kilnmdlDesc* modelDesc, size_t index);
KILN_API kilnError kilnmdlGetInputIndexByName(const kilnmdlDesc* modelDesc, const char* name, size_t* index);
KILN_API kilnError kilnmdlGetOutputIndexByName(const kilnmdlDesc* modelDesc, const char* name, size_t* index);
KILN_API kilnError kilnmdlGetInputDims(const kilnmdlDesc* modelDesc, size_t index, kilnmdlIODims* dims);
KILN_API kilnError kilnmdlGetOutputDims(const kilnmdlDesc* modelDesc, size_t index, kilnmdlIODims* dims);
KILN_API kilnDataType kilnmdlGetInputDataType(const kilnmdlDesc* modelDesc, size_t index);
KILN_API kilnDataType kilnmdlGetOutputDataType(const kilnmdlDesc* modelDesc, size_t index);
KILN_API kilnFormat kilnmdlGetInputFormat(const kilnmdlDesc* modelDesc, size_t index);
KILN_API kilnFormat kilnmdlGetOutputFormat(const kilnmdlDesc* modelDesc, size_t index);

/* Runs the model on the calling thread, on the current context's device. Input and
 * output buffers are device memory of that device, in the model's input/output order.
 * The model's inputs are the graph inputs without an initializer (an input with one
 * keeps its value), as kilnmdlGetDesc lists them. */
KILN_API kilnError kilnmdlExecute(uint32_t modelId, const kilnmdlDataset* input, kilnmdlDataset* output);
/* Enqueues the execution on `stream` and returns at once; the datasets and their
 * buffers must stay valid until the stream has run it. */
KILN_API kilnError kilnmdlExecuteAsync(uint32_t modelId, const kilnmdlDataset* input, kilnmdlDataset* output,
                                       kilnrtStream stream);

/* ---- Profiling (aclprof's shape) ------------------------------------------------------ */
/* kilnprofInit(dir) names the output directory (created if missing; `length` is
 * strlen(dir)); kilnprofStart/kilnprofStop turn recording on and off (any number of
 * times); kilnprofFinalize stops and writes timeline.json, op_summary.csv,
 * op_statistic.csv and api_statistic.csv into the directory. Unlike aclprofStart there is
 * no config object: host API calls, stream tasks, model ops, copies and event flows are
 * all recorded. The environment variable KILN_PROFILE=DIR does the same for a whole
 * process without code changes (from kilnInit, written at kilnFinalize and at exit); while
 * it is set kilnprofInit fails with KILN_ERROR_REPEAT_INITIALIZE. These calls do not need
 * kilnInit. */
KILN_API kilnError kilnprofInit(const char* profilerResultPath, size_t length);
KILN_API kilnError kilnprofStart(void);
KILN_API kilnError kilnprofStop(void);
KILN_API kilnError kilnprofFinalize(void);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif /* KILN_KILN_H_ */
