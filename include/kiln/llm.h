/*
 * Kiln LLM: decoding with decoder-only transformers (GPT-2 and Llama styles) on a paged KV
 * cache with continuous batching, as a library. `kiln generate` and `kiln llm-bench` run the
 * same engine (docs/llm.md).
 *
 *   kilnInit(NULL);
 *   kilnllmEngine* engine;
 *   kilnllmCreateEngine("gpt2-10m", NULL, &engine);  // bench/llm/export_decoder.py's directory
 *   kilnllmRequestParams params;
 *   kilnllmRequestParamsInit(&params);              // greedy, 16 new tokens
 *   params.maxNewTokens = 32;
 *   int64_t prompt[] = {464, 2068, 7586}, id;
 *   kilnllmAddRequest(engine, prompt, 3, &params, &id);
 *   kilnllmSetTokenCallback(engine, on_token, NULL);  // or poll with kilnllmPollTokens
 *   kilnllmRunToCompletion(engine);                    // or kilnllmStep in a loop
 *   kilnllmDestroyEngine(engine);
 *   kilnFinalize();
 *
 * The model is a decoder directory: config.json and the decoder's ONNX segments split at
 * the attention boundary, as bench/llm/export_decoder.py writes them (docs/llm.md); the
 * segments are compiled when the engine is created.
 *
 * Requests. kilnllmAddRequest queues a prompt (token ids) with a budget of new tokens and
 * sampling parameters, and returns the request's id (0, 1, 2, ... per engine). Each
 * kilnllmStep admits waiting requests while the batch and the KV pool have room (their
 * prompts prefilled, their first token sampled), then decodes one token for every running
 * request together, and retires requests that reached their budget or a stop token. A request
 * that cannot get a KV block may be preempted (its blocks freed, recomputed later): it goes
 * back to waiting, and no token it produced is lost or produced twice.
 *
 * Tokens reach the caller two ways, usable together: a callback called during kilnllmStep for
 * every token as it is sampled (kilnllmSetTokenCallback), and kilnllmPollTokens, which
 * returns the tokens of a request that the caller has not polled yet.
 *
 * Ownership: an engine is created by kilnllmCreateEngine and freed by kilnllmDestroyEngine,
 * with everything it holds (the compiled model, the KV pool, every request's tokens). A
 * request's state stays until kilnllmReleaseRequest or the engine's destruction. Arrays passed
 * in (prompts, stop tokens, buckets) are copied before the call returns.
 *
 * Errors follow kiln.h: a kilnError code, and the message in kilnGetRecentErrMsg(). A bad
 * request (an empty prompt, a token id outside the vocabulary, a prompt plus budget beyond the
 * model's context or the KV pool, bad sampling parameters) is an error of kilnllmAddRequest
 * alone: the engine and its other requests go on. A NULL, destroyed or foreign engine handle is
 * KILN_ERROR_INVALID_RESOURCE_HANDLE; an unknown request id KILN_ERROR_INVALID_PARAM.
 *
 * Runtime: kilnllmCreateEngine, kilnllmAddRequest, kilnllmStep and kilnllmRunToCompletion need
 * kilnInit (KILN_ERROR_UNINITIALIZE otherwise); the others work on any live engine.
 *
 * Threads: an engine's calls are serialised (a call from another thread waits for the one
 * running); different engines run independently. The token callback runs on the thread that
 * called kilnllmStep; from inside it only kilnllmCancelRequest, kilnllmPollTokens,
 * kilnllmGetRequestStatus, kilnllmGetRequestTokens, kilnllmGetStats and kilnllmGetModelInfo may
 * be called on that engine (the others return KILN_ERROR_FAILURE, as kilnllmCreateEngine,
 * kilnllmAddRequest, kilnllmStep and kilnllmRunToCompletion on any engine).
 */
#ifndef KILN_LLM_H_
#define KILN_LLM_H_

#include "kiln/kiln.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kilnllmEngine kilnllmEngine;

/* ---- Engine -------------------------------------------------------------------------- */

typedef struct {
  size_t size;              /* sizeof(kilnllmEngineOptions) as the caller knows it (Init sets it) */
  int64_t blockSize;        /* token slots per KV block; 16 */
  int64_t kvCacheMiB;       /* KV pool size; 256 */
  int64_t kvBlocks;         /* blocks in the pool; 0 (default): as many as kvCacheMiB holds */
  int64_t maxBatch;         /* most requests decoding together; 16 */
  const int64_t* prefillBuckets; /* ascending prefill pass sizes; NULL (default): 128, 512, 1024, 2048 */
  size_t numPrefillBuckets;
  int32_t numThreads;       /* threads of the engine's kernels; 0 (default): KILN_NUM_THREADS, else the cores */
  int32_t recordLogits;     /* 1: keep every token's logits (kilnllmGetRequestLogits); 0 (default) */
  /* Added after the first release (a caller whose `size` ends before it gets the default):
   * rows per step, 0 or at least maxBatch: each step runs every decoding request's row, then
   * prefill chunks in the rest of the budget (chunked prefill, docs/llm.md); 0 (default): each
   * admitted prompt is prefilled whole before the step's decode. */
  int64_t maxStepTokens;
  /* Added after maxStepTokens (a caller whose `size` ends before it gets the default): the
   * element type of the KV pool, KILN_FLOAT (default) or KILN_BF16. bf16 takes half the bytes
   * per block, so kvCacheMiB holds twice the blocks; K/V are rounded to nearest even as they
   * are stored and attention computes in fp32 (docs/llm.md: accuracy and speed). */
  kilnDataType kvDataType;
} kilnllmEngineOptions;

/* Fills `options` with the defaults above. KILN_ERROR_INVALID_PARAM for NULL. */
KILN_API kilnError kilnllmEngineOptionsInit(kilnllmEngineOptions* options);

/* Loads and compiles the decoder in directory `modelDir` and makes an engine with an empty KV
 * pool (`options` NULL: the defaults). Errors: KILN_ERROR_INVALID_PARAM for a NULL argument
 * or an option out of range (block size outside 1..4096, no blocks, bad buckets, maxStepTokens
 * neither 0 nor at least maxBatch, a kvDataType other than KILN_FLOAT and KILN_BF16, a `size`
 * this library does not know: the current one or one of an earlier release); KILN_ERROR_INVALID_FILE when the directory is missing or not a Kiln
 * decoder directory (the message names the file and what is wrong); KILN_ERROR_BAD_ALLOC when
 * the KV pool cannot be allocated. `*engine` is set only on success. */
KILN_API kilnError kilnllmCreateEngine(const char* modelDir, const kilnllmEngineOptions* options,
                                       kilnllmEngine** engine);
/* Frees the engine and every request in it. Not from inside its token callback, and not while
 * another thread may still call the engine (as for every handle of kiln.h). */
KILN_API kilnError kilnllmDestroyEngine(kilnllmEngine* engine);

typedef struct {
  size_t size;      /* in: sizeof(kilnllmModelInfo) as the caller knows it */
  char name[64];    /* the configuration's name, e.g. "gpt2-124m" */
  char style[16];   /* "gpt2" or "llama" */
  int64_t vocab;    /* token ids are 0..vocab-1 */
  int64_t context;  /* most tokens of a request: prompt + new tokens - 1 */
  int64_t layers, dModel, heads, kvHeads, headDim;
} kilnllmModelInfo;

/* The engine's model. KILN_ERROR_INVALID_PARAM for NULL `info` or an unknown `info->size`. */
KILN_API kilnError kilnllmGetModelInfo(const kilnllmEngine* engine, kilnllmModelInfo* info);

/* ---- Requests ------------------------------------------------------------------------- */

typedef struct {
  size_t size;                /* sizeof(kilnllmRequestParams) as the caller knows it (Init sets it) */
  int64_t maxNewTokens;       /* tokens to generate at most; 16 */
  float temperature;          /* 0 (default): greedy (argmax, first index on ties) */
  int64_t topK;               /* sample among the k likeliest; 0 (default): all */
  float topP;                 /* sample in the nucleus of this probability, (0, 1]; 1 (default) */
  uint64_t seed;              /* the request's own random stream; 0 */
  const int64_t* stopTokens;  /* tokens that end the request (the stop token is delivered); NULL */
  size_t numStopTokens;
} kilnllmRequestParams;

/* Fills `params` with the defaults above. KILN_ERROR_INVALID_PARAM for NULL. */
KILN_API kilnError kilnllmRequestParamsInit(kilnllmRequestParams* params);

/* Queues a request of `promptLength` token ids (`params` NULL: the defaults) and sets
 * `*requestId`. Errors, for this request alone: KILN_ERROR_INVALID_PARAM for NULL arguments,
 * an empty prompt, a token id outside 0..vocab-1 (the message names the id, its position and
 * the model), a prompt plus maxNewTokens - 1 beyond the model's context, or sampling
 * parameters out of range; KILN_ERROR_BAD_ALLOC when that context needs more KV blocks than
 * the whole pool has. Not from inside the token callback. */
KILN_API kilnError kilnllmAddRequest(kilnllmEngine* engine, const int64_t* promptIds, size_t promptLength,
                                     const kilnllmRequestParams* params, int64_t* requestId);

/* Stops a waiting or running request: its KV blocks are freed at once (from inside the token
 * callback: when the current step ends, and no further token of it is delivered). Its tokens so
 * far stay readable. Cancelling a finished or cancelled request does nothing. Errors:
 * KILN_ERROR_INVALID_PARAM for an unknown id. */
KILN_API kilnError kilnllmCancelRequest(kilnllmEngine* engine, int64_t requestId);

/* Forgets a finished or cancelled request (its tokens and logits), so a long-running caller
 * does not keep every request it ever ran. KILN_ERROR_INVALID_PARAM for an unknown id or a
 * request still waiting or running. Not from inside the token callback. */
KILN_API kilnError kilnllmReleaseRequest(kilnllmEngine* engine, int64_t requestId);

typedef enum {
  KILN_LLM_REQUEST_WAITING = 0,   /* queued, or preempted and queued again */
  KILN_LLM_REQUEST_RUNNING = 1,   /* in the decode batch */
  KILN_LLM_REQUEST_FINISHED = 2,  /* reached maxNewTokens or a stop token */
  KILN_LLM_REQUEST_CANCELLED = 3, /* kilnllmCancelRequest, or the callback returned nonzero */
} kilnllmRequestStatus;

/* The request's status and the number of tokens it has generated (either may be NULL). */
KILN_API kilnError kilnllmGetRequestStatus(const kilnllmEngine* engine, int64_t requestId,
                                           kilnllmRequestStatus* status, size_t* numTokens);

/* Copies the request's tokens generated so far, up to `capacity` of them, into `tokens` (NULL
 * when `capacity` is 0) and sets `*numTokens` to how many it has generated in all (so a call
 * with capacity 0 asks for the count). Does not move the poll position. */
KILN_API kilnError kilnllmGetRequestTokens(const kilnllmEngine* engine, int64_t requestId, int64_t* tokens,
                                           size_t capacity, size_t* numTokens);

/* Streaming by polling: copies the request's tokens not yet returned by an earlier poll, up to
 * `capacity` (NULL `tokens` when 0), sets `*numTokens` to how many it copied and moves the poll
 * position past them; `status` (may be NULL) gets the request's status. A request is done when
 * its status is FINISHED or CANCELLED and a poll copies nothing. */
KILN_API kilnError kilnllmPollTokens(kilnllmEngine* engine, int64_t requestId, int64_t* tokens, size_t capacity,
                                     size_t* numTokens, kilnllmRequestStatus* status);

/* With recordLogits: the vocab logits the engine sampled the request's token `index` (0 for
 * the first) from, into `logits` (`capacity` floats, at least vocab). KILN_ERROR_INVALID_PARAM
 * for an unknown id, an index not generated yet, a short buffer, or an engine made without
 * recordLogits. */
KILN_API kilnError kilnllmGetRequestLogits(const kilnllmEngine* engine, int64_t requestId, size_t index,
                                           float* logits, size_t capacity);

/* ---- Running -------------------------------------------------------------------------- */

/* Called during kilnllmStep with every token as it is sampled, in order per request.
 * `isLast` is 1 for the request's last token (its budget reached or a stop token). Return 0 to
 * go on, nonzero to cancel the request (as kilnllmCancelRequest from the callback). */
typedef int32_t (*kilnllmTokenCallback)(int64_t requestId, int64_t token, int32_t isLast, void* userData);

/* Sets (or with NULL `callback` clears) the engine's token callback. Not from inside it. */
KILN_API kilnError kilnllmSetTokenCallback(kilnllmEngine* engine, kilnllmTokenCallback callback, void* userData);

/* One iteration: admission and prefill, one decode step for the running requests, retirement.
 * `idle` (may be NULL) is set to 1 when afterwards no request waits or runs, else 0. An error
 * here is the engine's (a segment that failed to run: KILN_ERROR_FAILURE), not a request's;
 * destroy the engine after it. Not from inside the token callback. */
KILN_API kilnError kilnllmStep(kilnllmEngine* engine, int32_t* idle);

/* Steps until no request waits or runs. */
KILN_API kilnError kilnllmRunToCompletion(kilnllmEngine* engine);

/* ---- Statistics ----------------------------------------------------------------------- */

typedef struct {
  size_t size; /* in: sizeof(kilnllmStats) as the caller knows it */
  /* The KV cache now. A block shared by several requests (a common prefix) counts once. */
  int64_t blockSize;
  int64_t blocksTotal, blocksUsed, blocksFree; /* used + free = total */
  int64_t blocksShared;      /* used blocks more than one request maps */
  int64_t blocksCached;      /* free blocks still holding a finished request's prefix (reusable) */
  int64_t slotsAllocated;    /* token slots of the used blocks */
  int64_t slotsUsed;         /* those a token fills */
  double fragmentation;      /* (slotsAllocated - slotsUsed) / slotsAllocated; 0 when none */
  int64_t peakBlocksUsed;    /* most blocks used at once so far */
  double meanFragmentation;  /* fragmentation averaged over the decode steps so far */
  int64_t copiesOnWrite;
  /* Requests. */
  int64_t waiting, running, finished, preemptions;
  /* Work so far. */
  int64_t steps, decodeSteps;
  int64_t prefillTokens, prefillPaddedTokens; /* prompt rows computed, and with bucket padding */
  int64_t prefixHitTokens;                    /* prompt tokens mapped from cached blocks, not computed */
  int64_t decodeTokens, decodePaddedTokens;
  double prefillMs, decodeMs;
  /* Added after decodeMs (a caller whose `size` ends before them gets the fields before only):
   * chunked prefill (maxStepTokens). The most real rows one step's pass ran (prefill and
   * decode rows together), and the passes that ran prefill chunk rows beside decode rows. */
  int64_t peakStepTokens;
  int64_t mixedSteps;
} kilnllmStats;

/* The engine's statistics. KILN_ERROR_INVALID_PARAM for NULL `stats` or an unknown
 * `stats->size`; a `size` of an earlier release (ending before peakStepTokens) is filled up to
 * that size and no further. */
KILN_API kilnError kilnllmGetStats(const kilnllmEngine* engine, kilnllmStats* stats);

/* ---- Tokenizer: text in, text out ------------------------------------------------------- */

/* A SentencePiece model (the `.model` file spm_train writes, as Llama's and T5's tokenizers
 * are), the one `kiln generate --tokenizer` takes. SentencePiece is loaded on first use from
 * libkiln_sentencepiece.so beside libkiln.so (docs/llm.md); a Kiln built without it answers
 * KILN_ERROR_FEATURE_UNSUPPORTED.
 *
 * A tokenizer is a host object: its functions work with or without kilnInit. It is immutable
 * once created, so any number of threads may tokenize and detokenize with it at once; it must
 * not be destroyed while one does. Token ids are 0..vocabSize-1; the buffers a call fills are
 * the caller's, and a short one is KILN_ERROR_STORAGE_OVER_LIMIT with the size it needs in the
 * count and nothing written to it. A NULL, destroyed or foreign tokenizer is
 * KILN_ERROR_INVALID_RESOURCE_HANDLE. */
typedef struct kilnllmTokenizer kilnllmTokenizer;

/* Loads the SentencePiece model at `modelPath` and sets `*tokenizer` (only on success).
 * Errors: KILN_ERROR_INVALID_PARAM for NULL arguments; KILN_ERROR_INVALID_FILE for a missing
 * file or one that is not a SentencePiece model (the message names the path);
 * KILN_ERROR_FEATURE_UNSUPPORTED when Kiln was built without SentencePiece or the shim library
 * is not found. */
KILN_API kilnError kilnllmCreateTokenizer(const char* modelPath, kilnllmTokenizer** tokenizer);
/* Frees the tokenizer. Not while another thread uses it. */
KILN_API kilnError kilnllmDestroyTokenizer(kilnllmTokenizer* tokenizer);

/* Encodes the NUL-terminated UTF-8 `text` into token ids, with the tokenizer's <s> in front when
 * `addBos` is nonzero and the model has one (as SentencePiece's encode, then bos_id prepended).
 * `*count` is set to the number of ids the text has; they are written to `ids` when `capacity`
 * holds them all, else the call is KILN_ERROR_STORAGE_OVER_LIMIT and nothing is written (call
 * again with `*count` ids; `ids` may be NULL with capacity 0 to ask). Errors besides:
 * KILN_ERROR_INVALID_PARAM for NULL `text` or `count`, and for text that is not valid UTF-8
 * (the message names the first bad byte and its offset). */
KILN_API kilnError kilnllmTokenize(const kilnllmTokenizer* tokenizer, const char* text, int32_t addBos,
                                   int64_t* ids, size_t capacity, size_t* count);

/* Decodes `numIds` token ids into UTF-8 text, written NUL-terminated to `text`. `*length` is set
 * to the text's length in bytes without the NUL; `capacity` must hold it and the NUL, else the
 * call is KILN_ERROR_STORAGE_OVER_LIMIT and nothing is written (`text` may be NULL with capacity
 * 0 to ask). SentencePiece drops the space in front of the first piece and writes control ids
 * (<s>, </s>) as nothing. Errors besides: KILN_ERROR_INVALID_PARAM for NULL `ids` (with numIds
 * > 0) or `length`, and for an id outside 0..vocabSize-1 (the message names it). */
KILN_API kilnError kilnllmDetokenize(const kilnllmTokenizer* tokenizer, const int64_t* ids, size_t numIds,
                                     char* text, size_t capacity, size_t* length);

/* The ids of <s> and </s>, -1 when the model has none, and the number of ids. */
KILN_API kilnError kilnllmTokenizerBosId(const kilnllmTokenizer* tokenizer, int64_t* id);
KILN_API kilnError kilnllmTokenizerEosId(const kilnllmTokenizer* tokenizer, int64_t* id);
KILN_API kilnError kilnllmTokenizerVocabSize(const kilnllmTokenizer* tokenizer, int64_t* vocabSize);

/* kilnllmAddRequest with a text prompt, as `kiln generate --prompt` runs one: `text` encoded by
 * `tokenizer` with its <s> in front, and its </s> added to the request's stop tokens (params'
 * stop tokens stay), so the request ends at </s> (delivered as its last token, as every stop
 * token) or at maxNewTokens. The generated ids are read as for any request and decoded with
 * kilnllmDetokenize. Errors: a tokenizer with more pieces than the engine's model has token ids
 * (not this model's tokenizer) is KILN_ERROR_INVALID_PARAM naming both sizes; besides, those of
 * kilnllmTokenize for the text (NULL, not UTF-8) and of kilnllmAddRequest (a NULL, foreign or
 * destroyed engine or tokenizer is KILN_ERROR_INVALID_RESOURCE_HANDLE). Not from inside the token
 * callback. */
KILN_API kilnError kilnllmAddTextRequest(kilnllmEngine* engine, const kilnllmTokenizer* tokenizer, const char* text,
                                         const kilnllmRequestParams* params, int64_t* requestId);

#ifdef __cplusplus
}
#endif

#endif /* KILN_LLM_H_ */
