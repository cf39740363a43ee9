/*
 * Kiln single-operator mode: AscendCL's aclop* API with `aclop` renamed to `kilnop`.
 *
 * Runs one ONNX op (by op type, domain and opset, with attributes and tensor descs of
 * kiln.h) on device buffers, without a model. The first call with a given key (op type,
 * domain, opset, attributes, input dtypes and shapes, device) builds a one-node graph and
 * compiles it with Kiln's compiler, so the op gets the kernel a model would get; the
 * compiled op is kept in a bounded, thread-safe LRU cache, and a repeated call costs a
 * lookup plus the kernel run. Errors follow kiln.h: a code, and kilnGetRecentErrMsg().
 */
#ifndef KILN_KILN_OP_H_
#define KILN_KILN_OP_H_

#include "kiln/kiln.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Op errors (AscendCL's numbering). */
#define KILN_ERROR_OP_TYPE_NOT_MATCH 100021   /* unknown op type (or not in this domain/opset) */
#define KILN_ERROR_OP_INPUT_NOT_MATCH 100022  /* input count, dtype or shape the op refuses */
#define KILN_ERROR_OP_OUTPUT_NOT_MATCH 100023 /* output count, dtype or shape differs from inference */
#define KILN_ERROR_OP_ATTR_NOT_MATCH 100024   /* an attribute the op refuses */

/* ---- Attributes ---------------------------------------------------------------------- */

/* A set of named ONNX attributes. Setting a name again replaces its value. */
typedef struct kilnopAttr kilnopAttr;
KILN_API kilnopAttr* kilnopCreateAttr(void);
KILN_API void kilnopDestroyAttr(const kilnopAttr* attr);
KILN_API kilnError kilnopSetAttrInt(kilnopAttr* attr, const char* attrName, int64_t attrValue);
KILN_API kilnError kilnopSetAttrFloat(kilnopAttr* attr, const char* attrName, float attrValue);
KILN_API kilnError kilnopSetAttrString(kilnopAttr* attr, const char* attrName, const char* attrValue);
KILN_API kilnError kilnopSetAttrListInt(kilnopAttr* attr, const char* attrName, int numValues,
                                        const int64_t* values);
KILN_API kilnError kilnopSetAttrListFloat(kilnopAttr* attr, const char* attrName, int numValues,
                                          const float* values);

/* ---- Execution ----------------------------------------------------------------------- */

/* domain: NULL or "" is the default ONNX domain; opsetVersion: the opset of that domain.
 * inputDesc/inputs: numInputs of each (dtype and dims of each input; every dim fixed).
 * outputDesc/outputs: numOutputs of each; each desc's dtype and dims must equal what shape
 * inference gives (kilnopInferShape tells them), each buffer must hold the output.
 * attr may be NULL (no attributes).
 *
 * Queues the op on `stream` (NULL: the current context's default stream) and returns; the
 * buffers must stay valid until the stream has run it, as with kilnmdlExecuteAsync. */
KILN_API kilnError kilnopExecute(const char* opType, const char* domain, int32_t opsetVersion, int numInputs,
                                 const kilnTensorDesc* const inputDesc[], const kilnDataBuffer* const inputs[],
                                 int numOutputs, const kilnTensorDesc* const outputDesc[],
                                 kilnDataBuffer* const outputs[], const kilnopAttr* attr, kilnrtStream stream);
/* Compiles the op into the cache without running it (aclopCompile). */
KILN_API kilnError kilnopCompile(const char* opType, const char* domain, int32_t opsetVersion, int numInputs,
                                 const kilnTensorDesc* const inputDesc[], const kilnopAttr* attr);
/* The outputs' dtypes and dims for these inputs: outputDesc[i] gets a new desc (free it
 * with kilnDestroyTensorDesc). Compiles the op into the cache as kilnopCompile does. */
KILN_API kilnError kilnopInferShape(const char* opType, const char* domain, int32_t opsetVersion, int numInputs,
                                    const kilnTensorDesc* const inputDesc[], int numOutputs,
                                    kilnTensorDesc* outputDesc[], const kilnopAttr* attr);

/* ---- The compiled-op cache ----------------------------------------------------------- */

/* At most `capacity` compiled ops are kept (default 256; at least 1); the least recently
 * used goes first. Shrinking evicts at once. */
KILN_API kilnError kilnopSetCacheCapacity(size_t capacity);
/* Lookups that found a compiled op, lookups that compiled one, and the ops kept now. */
KILN_API kilnError kilnopGetCacheStats(uint64_t* hits, uint64_t* misses, size_t* entries);
/* Drops every compiled op (ops queued on streams finish first: they keep theirs alive). */
KILN_API kilnError kilnopClearCache(void);

#ifdef __cplusplus
}
#endif

#endif /* KILN_KILN_OP_H_ */
