/*
 * classify: runs an image-classification .kiln model through the Kiln C API and prints
 * the top-5 classes, following the classic AscendCL sample flow step by step:
 *
 *   kilnInit -> kilnrtSetDevice -> kilnrtCreateContext -> kilnrtCreateStream
 *   -> kilnmdlLoadFromFile -> kilnmdlCreateDesc/GetDesc
 *   -> kilnrtMalloc every input and output (sizes from the description)
 *   -> datasets of data buffers -> kilnrtMemcpy H2D -> kilnmdlExecuteAsync
 *   -> kilnrtSynchronizeStream -> kilnrtMemcpy D2H -> top-5
 *   -> release everything in reverse order.
 *
 * Usage: classify MODEL.kiln [INPUT.raw]
 *   INPUT.raw: the model's first input as raw little-endian float32, exactly the
 *   input's size in bytes. Without it a built-in test pattern is used.
 *   The first output is read as float32 scores (one per class).
 *   Exit status: 0 on success, 1 on any error (the message of kilnGetRecentErrMsg).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/kiln.h"

#define TOP_K 5

/* Every call is checked: on failure print where, the code and Kiln's message, and jump
 * to the release code, which frees what was made so far. */
#define CHECK(call)                                                              \
  do {                                                                           \
    kilnError check_ret_ = (call);                                               \
    if (check_ret_ != KILN_SUCCESS) {                                            \
      fprintf(stderr, "classify: %s failed (error %d): %s\n", #call, check_ret_, \
              kilnGetRecentErrMsg());                                            \
      goto cleanup;                                                              \
    }                                                                            \
  } while (0)

/* For the calls that return a handle (NULL on failure). */
#define CHECK_PTR(var, call)                                                      \
  do {                                                                            \
    (var) = (call);                                                               \
    if ((var) == NULL) {                                                          \
      fprintf(stderr, "classify: %s failed: %s\n", #call, kilnGetRecentErrMsg()); \
      goto cleanup;                                                               \
    }                                                                             \
  } while (0)

/* Release calls are checked too, but a failure does not stop the rest of the release. */
#define RELEASE(call)                                                              \
  do {                                                                             \
    kilnError release_ret_ = (call);                                               \
    if (release_ret_ != KILN_SUCCESS) {                                            \
      fprintf(stderr, "classify: %s failed (error %d): %s\n", #call, release_ret_, \
              kilnGetRecentErrMsg());                                              \
      status = 1;                                                                  \
    }                                                                              \
  } while (0)

/* Reads exactly `size` bytes of `path` into `dst`. */
static int read_input_file(const char* path, void* dst, size_t size) {
  FILE* f = fopen(path, "rb");
  long file_size;
  if (f == NULL) {
    fprintf(stderr, "classify: cannot open input %s\n", path);
    return -1;
  }
  if (fseek(f, 0, SEEK_END) != 0 || (file_size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
    fprintf(stderr, "classify: cannot read input %s\n", path);
    fclose(f);
    return -1;
  }
  if ((size_t)file_size != size) {
    fprintf(stderr, "classify: input %s has %ld bytes, the model's input takes %zu\n", path,
            file_size, size);
    fclose(f);
    return -1;
  }
  if (fread(dst, 1, size, f) != size) {
    fprintf(stderr, "classify: short read from %s\n", path);
    fclose(f);
    return -1;
  }
  fclose(f);
  return 0;
}

/* A deterministic pattern in [-1, 1): a stand-in for a normalised image. */
static void fill_test_pattern(float* data, size_t count) {
  size_t i;
  for (i = 0; i < count; ++i) data[i] = (float)((i * 7919u) % 2000u) / 1000.0f - 1.0f;
}

int main(int argc, char** argv) {
  const int32_t device_id = 0;
  int status = 1;
  int initialized = 0, device_set = 0, model_loaded = 0;
  kilnrtContext context = NULL;
  kilnrtStream stream = NULL;
  uint32_t model_id = 0;
  kilnmdlDesc* desc = NULL;
  kilnmdlDataset* input = NULL;
  kilnmdlDataset* output = NULL;
  void** input_dev = NULL;
  void** output_dev = NULL;
  size_t num_inputs = 0, num_outputs = 0, i, k;
  void* host_input = NULL;
  float* host_scores = NULL;
  size_t input_size, output_size, num_classes;
  int top[TOP_K];

  if (argc < 2 || argc > 3) {
    fprintf(stderr, "usage: %s MODEL.kiln [INPUT.raw]\n", argv[0]);
    return 2;
  }

  /* 1. Runtime, device, context, stream. */
  CHECK(kilnInit(NULL));
  initialized = 1;
  CHECK(kilnrtSetDevice(device_id));
  device_set = 1;
  CHECK(kilnrtCreateContext(&context, device_id));
  CHECK(kilnrtCreateStream(&stream));

  /* 2. The model and its description. */
  CHECK(kilnmdlLoadFromFile(argv[1], &model_id));
  model_loaded = 1;
  CHECK_PTR(desc, kilnmdlCreateDesc());
  CHECK(kilnmdlGetDesc(desc, model_id));
  num_inputs = kilnmdlGetNumInputs(desc);
  num_outputs = kilnmdlGetNumOutputs(desc);
  if (num_inputs == 0 || num_outputs == 0) {
    fprintf(stderr,
            "classify: the model has %zu inputs and %zu outputs; it needs at least one of each\n",
            num_inputs, num_outputs);
    goto cleanup;
  }
  if (kilnmdlGetInputDataType(desc, 0) != KILN_FLOAT ||
      kilnmdlGetOutputDataType(desc, 0) != KILN_FLOAT) {
    fprintf(stderr, "classify: the model's first input and output must be float32\n");
    goto cleanup;
  }

  /* 3. Device memory for every input and output, sized by the description, wrapped in
   *    data buffers and collected in one dataset for the inputs and one for the outputs. */
  input_dev = (void**)calloc(num_inputs, sizeof(void*));
  output_dev = (void**)calloc(num_outputs, sizeof(void*));
  if (input_dev == NULL || output_dev == NULL) {
    fprintf(stderr, "classify: out of host memory\n");
    goto cleanup;
  }
  CHECK_PTR(input, kilnmdlCreateDataset());
  CHECK_PTR(output, kilnmdlCreateDataset());
  for (i = 0; i < num_inputs; ++i) {
    size_t size = kilnmdlGetInputSizeByIndex(desc, i);
    kilnDataBuffer* buffer;
    if (size == 0) {
      fprintf(stderr,
              "classify: input %zu (%s) has dims not fixed at compile time; compile the model with "
              "--input-shape\n",
              i, kilnmdlGetInputNameByIndex(desc, i));
      goto cleanup;
    }
    CHECK(kilnrtMalloc(&input_dev[i], size, KILN_MEM_MALLOC_HUGE_FIRST));
    CHECK(kilnrtMemset(input_dev[i], size, 0, size));
    CHECK_PTR(buffer, kilnCreateDataBuffer(input_dev[i], size));
    if (kilnmdlAddDatasetBuffer(input, buffer) != KILN_SUCCESS) {
      fprintf(stderr, "classify: kilnmdlAddDatasetBuffer failed: %s\n", kilnGetRecentErrMsg());
      kilnDestroyDataBuffer(buffer);
      goto cleanup;
    }
  }
  for (i = 0; i < num_outputs; ++i) {
    size_t size = kilnmdlGetOutputSizeByIndex(desc, i);
    kilnDataBuffer* buffer;
    if (size == 0) {
      fprintf(stderr, "classify: output %zu (%s) has dims not fixed at compile time\n", i,
              kilnmdlGetOutputNameByIndex(desc, i));
      goto cleanup;
    }
    CHECK(kilnrtMalloc(&output_dev[i], size, KILN_MEM_MALLOC_HUGE_FIRST));
    CHECK_PTR(buffer, kilnCreateDataBuffer(output_dev[i], size));
    if (kilnmdlAddDatasetBuffer(output, buffer) != KILN_SUCCESS) {
      fprintf(stderr, "classify: kilnmdlAddDatasetBuffer failed: %s\n", kilnGetRecentErrMsg());
      kilnDestroyDataBuffer(buffer);
      goto cleanup;
    }
  }

  /* 4. Fill the first input on the host (other inputs stay zero) and copy it over. */
  input_size = kilnmdlGetInputSizeByIndex(desc, 0);
  host_input = malloc(input_size);
  if (host_input == NULL) {
    fprintf(stderr, "classify: out of host memory\n");
    goto cleanup;
  }
  if (argc == 3) {
    if (read_input_file(argv[2], host_input, input_size) != 0) goto cleanup;
  } else {
    fill_test_pattern((float*)host_input, input_size / sizeof(float));
  }
  CHECK(kilnrtMemcpy(input_dev[0], input_size, host_input, input_size, KILN_MEMCPY_HOST_TO_DEVICE));

  /* 5. Execute on the stream and wait for it. */
  CHECK(kilnmdlExecuteAsync(model_id, input, output, stream));
  CHECK(kilnrtSynchronizeStream(stream));

  /* 6. Copy the scores back and print the top 5. */
  output_size = kilnmdlGetOutputSizeByIndex(desc, 0);
  num_classes = output_size / sizeof(float);
  host_scores = (float*)malloc(output_size);
  if (host_scores == NULL) {
    fprintf(stderr, "classify: out of host memory\n");
    goto cleanup;
  }
  CHECK(kilnrtMemcpy(host_scores, output_size, output_dev[0], output_size,
                     KILN_MEMCPY_DEVICE_TO_HOST));
  for (k = 0; k < TOP_K && k < num_classes; ++k) {
    int best = -1;
    for (i = 0; i < num_classes; ++i) {
      size_t j;
      int taken = 0;
      for (j = 0; j < k; ++j) taken |= (top[j] == (int)i);
      if (!taken && (best < 0 || host_scores[i] > host_scores[best])) best = (int)i;
    }
    top[k] = best;
  }
  printf("top-%zu of %zu classes (output %s):\n", k, num_classes,
         kilnmdlGetOutputNameByIndex(desc, 0));
  for (i = 0; i < k; ++i) printf("  %d %.6f\n", top[i], host_scores[top[i]]);
  status = 0;

cleanup:
  /* 7. Release in reverse order: buffers and datasets, device memory, description,
   *    model, stream, context, device, runtime. A failure here is reported and makes the
   *    exit status 1, but the release goes on. */
  free(host_scores);
  free(host_input);
  if (output != NULL) {
    for (i = 0; i < kilnmdlGetDatasetNumBuffers(output); ++i) {
      RELEASE(kilnDestroyDataBuffer(kilnmdlGetDatasetBuffer(output, i)));
    }
    RELEASE(kilnmdlDestroyDataset(output));
  }
  if (input != NULL) {
    for (i = 0; i < kilnmdlGetDatasetNumBuffers(input); ++i) {
      RELEASE(kilnDestroyDataBuffer(kilnmdlGetDatasetBuffer(input, i)));
    }
    RELEASE(kilnmdlDestroyDataset(input));
  }
  for (i = 0; output_dev != NULL && i < num_outputs; ++i) {
    if (output_dev[i] != NULL) RELEASE(kilnrtFree(output_dev[i]));
  }
  for (i = 0; input_dev != NULL && i < num_inputs; ++i) {
    if (input_dev[i] != NULL) RELEASE(kilnrtFree(input_dev[i]));
  }
  free(output_dev);
  free(input_dev);
  if (desc != NULL) RELEASE(kilnmdlDestroyDesc(desc));
  if (model_loaded) RELEASE(kilnmdlUnload(model_id));
  if (stream != NULL) RELEASE(kilnrtDestroyStream(stream));
  if (context != NULL) RELEASE(kilnrtDestroyContext(context));
  if (device_set) RELEASE(kilnrtResetDevice(device_id));
  if (initialized) RELEASE(kilnFinalize());
  return status;
}
