/*
 * generate: greedy text generation from C with Kiln's LLM engine (include/kiln/llm.h): every
 * prompt on the command line is a request, all decoded together on the paged KV cache, their
 * tokens streamed through the token callback as they are sampled.
 *
 *   generate MODEL_DIR MAX_NEW_TOKENS IDS [IDS ...]                        (IDS: 1,2,3)
 *   generate --tokenizer FILE MODEL_DIR MAX_NEW_TOKENS TEXT [TEXT ...]
 *
 * MODEL_DIR is a decoder directory written by bench/llm/export_decoder.py; FILE a SentencePiece
 * model whose pieces the model's vocabulary holds. With --tokenizer each prompt is text, queued by
 * kilnllmAddTextRequest (<s> in front, ending at </s>), and each request's text is printed after
 * the run ("text REQUEST: ..."). Prints each token as "token REQUEST TOKEN" while it streams, then
 * "request REQUEST: TOKENS" per request and the KV cache's statistics. Exit 1 with Kiln's message
 * on any error, 2 on bad usage.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/llm.h"

#define MAX_PROMPT 4096
#define MAX_TEXT (16 * MAX_PROMPT)

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

/* Prints a request's text: its tokens (without the </s> that ended it) through the tokenizer. */
static int print_text(const kilnllmTokenizer* tok, int64_t request, const int64_t* tokens, size_t n) {
  static char text[MAX_TEXT];
  int64_t eos = -1;
  size_t length = 0;
  if (kilnllmTokenizerEosId(tok, &eos) != KILN_SUCCESS) return fail("eos");
  if (n > 0 && tokens[n - 1] == eos) --n;
  if (kilnllmDetokenize(tok, tokens, n, text, sizeof(text), &length) != KILN_SUCCESS) return fail("detokenize");
  printf("text %lld: %s\n", (long long)request, text);
  return 0;
}

int main(int argc, char** argv) {
  const char* tokenizer_path = NULL;
  if (argc > 2 && strcmp(argv[1], "--tokenizer") == 0) {
    tokenizer_path = argv[2];
    argc -= 2;
    argv += 2;
  }
  if (argc < 4) {
    fprintf(stderr, "usage: generate [--tokenizer FILE] MODEL_DIR MAX_NEW_TOKENS PROMPT [PROMPT ...]\n"
                    "  PROMPT: comma-separated token ids, or text with --tokenizer\n");
    return 2;
  }
  const long max_new = atol(argv[2]);
  if (kilnInit(NULL) != KILN_SUCCESS) return fail("kilnInit");
  kilnllmEngine* engine = NULL;
  if (kilnllmCreateEngine(argv[1], NULL, &engine) != KILN_SUCCESS) return fail(argv[1]);
  kilnllmTokenizer* tok = NULL;
  if (tokenizer_path && kilnllmCreateTokenizer(tokenizer_path, &tok) != KILN_SUCCESS) return fail(tokenizer_path);
  kilnllmRequestParams params;
  kilnllmRequestParamsInit(&params); /* greedy */
  params.maxNewTokens = max_new;
  static int64_t prompt[MAX_PROMPT];
  int64_t ids[64];
  const int count = argc - 3 < 64 ? argc - 3 : 64;
  for (int i = 0; i < count; ++i) {
    /* A bad request (an id outside the vocabulary, too long, a tokenizer not the model's) fails alone. */
    if (tok) {
      if (kilnllmAddTextRequest(engine, tok, argv[3 + i], &params, &ids[i]) != KILN_SUCCESS) return fail("add request");
      continue;
    }
    const long n = parse_ids(argv[3 + i], prompt, MAX_PROMPT);
    if (n < 0) {
      fprintf(stderr, "generate: '%s' is not a list of token ids\n", argv[3 + i]);
      return 2;
    }
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
    if (tok && print_text(tok, ids[i], tokens, n < MAX_PROMPT ? n : MAX_PROMPT) != 0) return 1;
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
  if (tok) kilnllmDestroyTokenizer(tok);
  kilnllmDestroyEngine(engine);
  kilnFinalize();
  return 0;
}
