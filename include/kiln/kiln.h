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
#define KILN_ERROR_NOT_STATIC_AIPP 100038 /* kilnmdlGetFirstAippInfo of an input without static AIPP */
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

typedef enum { KILN_HOST_REGISTER_MAPPED = 0 } kilnrtHostRegisterType;
/* Maps the caller's host memory [ptr, ptr + size) into the current device's address space
 * (AscendCL's aclrtHostRegister): *devPtr is the address the device uses, which on the CPU
 * device is ptr itself, so that a model reads its input where the program wrote it, with no
 * copy. Until kilnrtHostUnregister the range counts as device memory of the current device
 * wherever the API checks it (data buffers of model execution, copies); the caller keeps
 * owning it (kilnrtFree refuses it) and must not unregister it while work submitted to a
 * stream may still use it. A range overlapping memory the runtime already manages (device,
 * pinned or registered) is KILN_ERROR_INVALID_MEMORY. */
KILN_API kilnError kilnrtHostRegister(void* ptr, uint64_t size, kilnrtHostRegisterType type, void** devPtr);
/* Ends a registration; ptr is the pointer kilnrtHostRegister was given. */
KILN_API kilnError kilnrtHostUnregister(void* ptr);
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
/* Workspace an execution needs at most, and the bytes of weights a loaded model holds (those
 * stored pre-packed counted as packed; their originals, which the file keeps in a part a load
 * does not read, not counted). Fails with
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

/* ---- AIPP: image preprocessing compiled into the model ------------------------------- */
/* `kiln compile m.onnx --insert-op-conf aipp.cfg` puts an Aipp node in front of a model
 * input (docs/aipp.md): the input becomes the raw uint8 image (NV12, RGB, ...) and the
 * crop, colour-space conversion, resize, normalisation and padding run inside the model.
 *
 * With `aipp_mode: static` the parameters are fixed in the model (kilnmdlGetFirstAippInfo
 * reads them). With `aipp_mode: dynamic` the image input is [N, max_src_image_size] uint8
 * and the model gets one more input, appended after the others: the parameter input
 * (KILN_DYNAMIC_AIPP_NODE), uint8 bytes the program fills before each execution from a
 * kilnmdlAIPP parameter set (kilnmdlSetInputAIPP / kilnmdlSetAIPPByInputIndex).
 *
 * A kilnmdlAIPP is a plain host object: it works without kilnInit, is owned by the caller
 * (kilnmdlCreateAIPP ... kilnmdlDestroyAIPP) and is not thread-safe: one thread sets it at
 * a time; any number of threads may pass a set that no thread is changing to
 * kilnmdlSetInputAIPP. Every setter checks what it can alone (switches 0 or 1, a batchIndex
 * below the batchSize of kilnmdlCreateAIPP, sizes not negative) and returns
 * KILN_ERROR_INVALID_PARAM with a message otherwise, leaving the set unchanged; the set as
 * a whole is checked against the model by kilnmdlSetInputAIPP. A handle that is not a live
 * kilnmdlAIPP is KILN_ERROR_INVALID_PARAM. */

typedef struct kilnmdlAIPP kilnmdlAIPP;

/* Raw image formats, AscendCL's aclAippInputFormat numbering (the same numbers as ATC's
 * input_format field and as Kiln's configuration file). Kiln's AIPP takes YUV420SP_U8
 * (NV12; NV21 with the rbuv swap), XRGB8888_U8, RGB888_U8, YUV400_U8, ARGB8888_U8,
 * YUYV_U8, YUV422SP_U8 and AYUV444_U8; the NC1HWC0DI and RAW formats are listed for
 * porting and refused (KILN_ERROR_FEATURE_UNSUPPORTED). */
typedef enum {
  KILN_YUV420SP_U8 = 1,
  KILN_XRGB8888_U8 = 2,
  KILN_RGB888_U8 = 3,
  KILN_YUV400_U8 = 4,
  KILN_NC1HWC0DI_FP16 = 5,
  KILN_NC1HWC0DI_S8 = 6,
  KILN_ARGB8888_U8 = 7,
  KILN_YUYV_U8 = 8,
  KILN_YUV422SP_U8 = 9,
  KILN_AYUV444_U8 = 10,
  KILN_RAW10 = 11,
  KILN_RAW12 = 12,
  KILN_RAW16 = 13,
  KILN_RAW24 = 14,
  KILN_AIPP_RESERVED = 0xffff
} kilnAippInputFormat;

/* What a model input is, for kilnmdlGetAippType (AscendCL's numbering). */
typedef enum {
  KILN_DATA_WITHOUT_AIPP = 0,     /* an ordinary input */
  KILN_DATA_WITH_STATIC_AIPP = 1, /* a raw image preprocessed with parameters fixed at compile time */
  KILN_DATA_WITH_DYNAMIC_AIPP = 2, /* a raw image preprocessed with parameters set at run time */
  KILN_DYNAMIC_AIPP_NODE = 3      /* the parameter input of a dynamic AIPP */
} kilnmdlInputAippType;

/* kilnmdlGetAippType's dynamicAttachedDataIndex when there is none. */
#define KILN_INVALID_NODE_INDEX 0xFFFFFFFFu

/* A parameter set for `batchSize` images: one record per image for the parameters that may
 * differ per image (crop, resize, padding, mean, min, var_reci), one common part (format,
 * source size, colour conversion, swaps). batchSize is the model input's batch N, or 1 for
 * one record that applies to every image. Defaults: no input format (must be set), source
 * size 0x0 (must be set), every switch off, mean 0, min 0, var_reci 1. Returns NULL
 * (message in kilnGetRecentErrMsg) for batchSize 0 or above 65536, or out of memory. */
KILN_API kilnmdlAIPP* kilnmdlCreateAIPP(uint64_t batchSize);
KILN_API kilnError kilnmdlDestroyAIPP(const kilnmdlAIPP* aippParmsSet);

/* The raw image format. KILN_ERROR_FEATURE_UNSUPPORTED for the NC1HWC0DI and RAW formats,
 * KILN_ERROR_INVALID_PARAM for a value not in kilnAippInputFormat. */
KILN_API kilnError kilnmdlSetAIPPInputFormat(kilnmdlAIPP* aippParmsSet, kilnAippInputFormat inputFormat);
/* Colour-space conversion, for every image: out_r = clamp(sum_c M[r][c] * (in_c -
 * inputBias_c) / 256 + outputBias_r, 0, 255), M in 1/256 units as ATC's matrix_r<r>c<c>.
 * cscSwitch 0 turns it off (the other arguments are then ignored), 1 on. */
KILN_API kilnError kilnmdlSetAIPPCscParams(kilnmdlAIPP* aippParmsSet, int8_t cscSwitch, int16_t cscMatrixR0C0,
                                           int16_t cscMatrixR0C1, int16_t cscMatrixR0C2, int16_t cscMatrixR1C0,
                                           int16_t cscMatrixR1C1, int16_t cscMatrixR1C2, int16_t cscMatrixR2C0,
                                           int16_t cscMatrixR2C1, int16_t cscMatrixR2C2, uint8_t cscOutputBiasR0,
                                           uint8_t cscOutputBiasR1, uint8_t cscOutputBiasR2,
                                           uint8_t cscInputBiasR0, uint8_t cscInputBiasR1,
                                           uint8_t cscInputBiasR2);
/* 1: swap U and V of a YUV format (NV21 from YUV420SP_U8), R and B of an RGB one. */
KILN_API kilnError kilnmdlSetAIPPRbuvSwapSwitch(kilnmdlAIPP* aippParmsSet, int8_t rbuvSwapSwitch);
/* 1: the alpha/X byte of a 4-byte format is last (RGBX, YUVA), not first. */
KILN_API kilnError kilnmdlSetAIPPAxSwapSwitch(kilnmdlAIPP* aippParmsSet, int8_t axSwapSwitch);
/* Width and height in pixels of every source image, both > 0. The image takes
 * aipp_image_bytes of the format (YUV420SP_U8: w * h * 3 / 2), which must fit the model's
 * max_src_image_size. */
KILN_API kilnError kilnmdlSetAIPPSrcImageSize(kilnmdlAIPP* aippParmsSet, int32_t srcImageSizeW,
                                              int32_t srcImageSizeH);
/* Resize of image batchIndex (bilinear, half-pixel centres): from scfInputSizeW x H, which
 * must be the crop size (the source size without crop; checked by kilnmdlSetInputAIPP),
 * to scfOutputSizeW x H. Sizes > 0 when scfSwitch is 1. */
KILN_API kilnError kilnmdlSetAIPPScfParams(kilnmdlAIPP* aippParmsSet, int8_t scfSwitch, int32_t scfInputSizeW,
                                           int32_t scfInputSizeH, int32_t scfOutputSizeW,
                                           int32_t scfOutputSizeH, uint64_t batchIndex);
/* Crop of image batchIndex: the window at (cropStartPosW, cropStartPosH) of cropSizeW x H
 * pixels; start >= 0 and size > 0 when cropSwitch is 1 (inside the image: checked by
 * kilnmdlSetInputAIPP). */
KILN_API kilnError kilnmdlSetAIPPCropParams(kilnmdlAIPP* aippParmsSet, int8_t cropSwitch, int32_t cropStartPosW,
                                            int32_t cropStartPosH, int32_t cropSizeW, int32_t cropSizeH,
                                            uint64_t batchIndex);
/* Padding of image batchIndex around the (cropped, resized) image, sizes >= 0; the padded
 * pixels are 0 in the output. */
KILN_API kilnError kilnmdlSetAIPPPaddingParams(kilnmdlAIPP* aippParmsSet, int8_t paddingSwitch,
                                               int32_t paddingSizeTop, int32_t paddingSizeBottom,
                                               int32_t paddingSizeLeft, int32_t paddingSizeRight,
                                               uint64_t batchIndex);
/* Normalisation of image batchIndex, per output channel c:
 * out_c = (v_c - mean_c - min_c) * var_reci_c (floats must be finite). */
KILN_API kilnError kilnmdlSetAIPPDtcPixelMean(kilnmdlAIPP* aippParmsSet, int16_t dtcPixelMeanChn0,
                                              int16_t dtcPixelMeanChn1, int16_t dtcPixelMeanChn2,
                                              int16_t dtcPixelMeanChn3, uint64_t batchIndex);
KILN_API kilnError kilnmdlSetAIPPDtcPixelMin(kilnmdlAIPP* aippParmsSet, float dtcPixelMinChn0,
                                             float dtcPixelMinChn1, float dtcPixelMinChn2, float dtcPixelMinChn3,
                                             uint64_t batchIndex);
KILN_API kilnError kilnmdlSetAIPPPixelVarReci(kilnmdlAIPP* aippParmsSet, float dtcPixelVarReciChn0,
                                              float dtcPixelVarReciChn1, float dtcPixelVarReciChn2,
                                              float dtcPixelVarReciChn3, uint64_t batchIndex);

/* Checks the whole set against model input `index`'s dynamic AIPP and writes it into the
 * dataset's buffer `index`: `index` is the parameter input (KILN_DYNAMIC_AIPP_NODE, see
 * kilnmdlGetAippType). The buffer must be device memory of the model's device with room
 * for the parameter input (kilnmdlGetInputSizeByIndex). The write is synchronous and, as
 * kilnrtMemcpy, not ordered with stream work: do not call it while an execution that reads
 * this buffer is queued. The set is not kept: change and write it again for the next run.
 * Errors: KILN_ERROR_UNINITIALIZE; KILN_ERROR_INVALID_MODEL_ID; KILN_ERROR_INVALID_PARAM for
 * a dead handle, an index that is not a dynamic AIPP parameter input (the message names the
 * ones there are, or says the model has none), a set that does not fit the model (no input
 * format or source size, a crop outside the image, an output size other than the model
 * input's, a batchSize other than 1 or the input's batch, an image larger than
 * max_src_image_size: the message names the parameter and the image), a dataset without
 * buffer `index` or one too small; KILN_ERROR_INVALID_MEMORY for a buffer that is not device
 * memory of the model's device. */
KILN_API kilnError kilnmdlSetInputAIPP(uint32_t modelId, kilnmdlDataset* dataset, size_t index,
                                       const kilnmdlAIPP* aippParmsSet);
/* The same, with `index` the image input (KILN_DATA_WITH_DYNAMIC_AIPP): the parameters go
 * to the buffer of its parameter input. */
KILN_API kilnError kilnmdlSetAIPPByInputIndex(uint32_t modelId, kilnmdlDataset* dataset, size_t index,
                                              const kilnmdlAIPP* aippParmsSet);
/* What model input `index` is (kilnmdlInputAippType); *dynamicAttachedDataIndex is the
 * index of the parameter input for KILN_DATA_WITH_DYNAMIC_AIPP, KILN_INVALID_NODE_INDEX
 * otherwise. KILN_ERROR_INVALID_PARAM for an index out of range or NULL outputs. */
KILN_API kilnError kilnmdlGetAippType(uint32_t modelId, size_t index, kilnmdlInputAippType* type,
                                      size_t* dynamicAttachedDataIndex);

/* Dims of an AIPP input before and after preprocessing (AscendCL's aclAippDims). */
typedef struct {
  kilnmdlIODims srcDims; /* the model input the AIPP output feeds (float32, as compiled) */
  size_t srcSize;        /* its bytes */
  kilnmdlIODims aippOutdims; /* what AIPP writes: the same dims in Kiln */
  size_t aippOutSize;
} kilnAippDims;

/* The static AIPP configuration of an input (AscendCL's aclAippInfo, with a leading size
 * field). Set `size` to sizeof(kilnAippInfo) before the call; later versions only append
 * fields. Differences from AscendCL: meanChn are floats (Kiln's configuration takes
 * fractional means), paddingValue is added, and there is one shape (shapeCount 1): AIPP
 * models have fixed input dims. */
typedef struct {
  size_t size; /* in: sizeof(kilnAippInfo) as the caller knows it */
  kilnAippInputFormat inputFormat;
  int32_t srcImageSizeW;
  int32_t srcImageSizeH;
  int8_t cropSwitch;
  int32_t loadStartPosW;
  int32_t loadStartPosH;
  int32_t cropSizeW;
  int32_t cropSizeH;
  int8_t resizeSwitch;
  int32_t resizeOutputW;
  int32_t resizeOutputH;
  int8_t paddingSwitch;
  int32_t leftPaddingSize;
  int32_t rightPaddingSize;
  int32_t topPaddingSize;
  int32_t bottomPaddingSize;
  float paddingValue; /* Kiln: the output value of padded pixels */
  int8_t cscSwitch;
  int8_t rbuvSwapSwitch;
  int8_t axSwapSwitch;
  int8_t singleLineMode; /* always 0 */
  int32_t matrixR0C0;
  int32_t matrixR0C1;
  int32_t matrixR0C2;
  int32_t matrixR1C0;
  int32_t matrixR1C1;
  int32_t matrixR1C2;
  int32_t matrixR2C0;
  int32_t matrixR2C1;
  int32_t matrixR2C2;
  int32_t outputBias0;
  int32_t outputBias1;
  int32_t outputBias2;
  int32_t inputBias0;
  int32_t inputBias1;
  int32_t inputBias2;
  float meanChn0;
  float meanChn1;
  float meanChn2;
  float meanChn3;
  float minChn0;
  float minChn1;
  float minChn2;
  float minChn3;
  float varReciChn0;
  float varReciChn1;
  float varReciChn2;
  float varReciChn3;
  kilnFormat srcFormat;     /* of the model input the AIPP output feeds: NCHW or NHWC */
  kilnDataType srcDatatype; /* KILN_FLOAT */
  size_t srcDimNum;         /* 4 */
  size_t shapeCount;        /* 1 */
  kilnAippDims outDims[1];
} kilnAippInfo;

/* The static AIPP configuration of image input `index` (the first image's per-image
 * parameters). KILN_ERROR_NOT_STATIC_AIPP when the input has no static AIPP (the message
 * says whether it has a dynamic one); KILN_ERROR_INVALID_PARAM for an index out of range,
 * a NULL aippInfo or a size below sizeof(kilnAippInfo) of this version. */
KILN_API kilnError kilnmdlGetFirstAippInfo(uint32_t modelId, size_t index, kilnAippInfo* aippInfo);

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
