/*
 * generate: greedy text generation from C with Kiln's LLM engine (include/kiln/llm.h): every
 * prompt on the command line is a request, all decoded together on the paged KV cache, their
 * tokens streamed through the token callback as they are sampled.
 *
 *   generate MODEL_DIR MAX_NEW_TOKENS IDS [IDS ...]     (IDS: comma-separated token ids)
 *
 * MODEL_DIR is a decoder directory written by bench/llm/export_decoder.py. Prints each token as
 * "token REQUEST TOKEN" while it streams, then "request REQUEST: TOKENS" per request and the KV
 * cache's statistics. Exit 1 with Kiln's message on any error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/llm.h"

#define MAX_PROMPT 4096

static int32_t on_token(int64_t request, int64_t token, int32_t is_last, void* user) {
  (void)user;
  printf("token %lld %lld%s\n", (long long)request, (long long)token, is_last ? " last" : "");
  return 0; /* nonzero would cancel the request */
}

static int fail(const char* what) {
  fprintf(stderr, "generate: %s: %s\n", what, kilnGetRecentErrMsg());
  return 1;
}

/* "1,2,3" -> ids; the count, or -1 on anything else. */
static long parse_ids(const char* text, int64_t* ids, long capacity) {
  long n = 0;
  while (*text) {
    char* end = NULL;
    long long v = strtoll(text, &end, 10);
    if (end == text || n == capacity || (*end != ',' && *end != '\0')) return -1;
    ids[n++] = v;
    text = *end == ',' ? end + 1 : end;
  }
  return n;
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: generate MODEL_DIR MAX_NEW_TOKENS IDS [IDS ...]\n");
    return 2;
  }
  const long max_new = atol(argv[2]);
  if (kilnInit(NULL) != KILN_SUCCESS) return fail("kilnInit");
  kilnllmEngine* engine = NULL;
  if (kilnllmCreateEngine(argv[1], NULL, &engine) != KILN_SUCCESS) return fail(argv[1]);
  kilnllmRequestParams params;
  kilnllmRequestParamsInit(&params); /* greedy */
  params.maxNewTokens = max_new;
  static int64_t prompt[MAX_PROMPT];
  int64_t ids[64];
  const int count = argc - 3 < 64 ? argc - 3 : 64;
  for (int i = 0; i < count; ++i) {
    const long n = parse_ids(argv[3 + i], prompt, MAX_PROMPT);
    if (n < 0) {
      fprintf(stderr, "generate: '%s' is not a list of token ids\n", argv[3 + i]);
      return 2;
    }
    /* A bad request (an id outside the vocabulary, too long) fails alone. */
    if (kilnllmAddRequest(engine, prompt, (size_t)n, &params, &ids[i]) != KILN_SUCCESS) return fail("add request");
  }
  if (kilnllmSetTokenCallback(engine, on_token, NULL) != KILN_SUCCESS) return fail("callback");
  if (kilnllmRunToCompletion(engine) != KILN_SUCCESS) return fail("run");
  for (int i = 0; i < count; ++i) {
    int64_t tokens[MAX_PROMPT];
    size_t n = 0;
    if (kilnllmGetRequestTokens(engine, ids[i], tokens, MAX_PROMPT, &n) != KILN_SUCCESS) return fail("tokens");
    printf("request %lld:", (long long)ids[i]);
    for (size_t t = 0; t < n && t < MAX_PROMPT; ++t) printf(" %lld", (long long)tokens[t]);
    printf("\n");
  }
  kilnllmStats stats;
  memset(&stats, 0, sizeof(stats));
  stats.size = sizeof(stats);
  if (kilnllmGetStats(engine, &stats) != KILN_SUCCESS) return fail("stats");
  printf("KV cache: %lld blocks of %lld tokens, peak %lld used, %lld used now; mean fragmentation %.2f%%; "
         "%lld decode steps, %lld preemptions\n",
         (long long)stats.blocksTotal, (long long)stats.blockSize, (long long)stats.peakBlocksUsed,
         (long long)stats.blocksUsed, 100.0 * stats.meanFragmentation, (long long)stats.decodeSteps,
         (long long)stats.preemptions);
  kilnllmDestroyEngine(engine);
  kilnFinalize();
  return 0;
}
