// The C interface of libkiln_sentencepiece.so (src/plugins/sentencepiece), which
// tokenizer.cc loads with dlopen: SentencePiece behind functions of C types only. Strings and
// id arrays it returns are malloc'ed and freed with kiln_spm_free; a failing call sets *error
// to such a string.
#pragma once

#include <stddef.h>
#include <stdint.h>

// 2: decode reports the text's length (a <0x00> byte piece decodes to a NUL inside the text).
#define KILN_SPM_ABI_VERSION 2u

enum { KILN_SPM_BOS = 0, KILN_SPM_EOS = 1, KILN_SPM_UNK = 2, KILN_SPM_PAD = 3 };

extern "C" {
typedef uint32_t (*kiln_spm_abi_version_fn)(void);
typedef void* (*kiln_spm_load_fn)(const char* path, char** error);
typedef int32_t (*kiln_spm_vocab_size_fn)(void* model);
// The id of KILN_SPM_BOS/EOS/UNK/PAD, or -1 when the model has none.
typedef int32_t (*kiln_spm_special_id_fn)(void* model, int32_t which);
// 0 and *ids (*count of them), or -1 and *error.
typedef int32_t (*kiln_spm_encode_fn)(void* model, const char* text, size_t len, int32_t** ids,
                                      size_t* count, char** error);
// The text (NUL-terminated, *length bytes without the NUL: it may hold NULs), or null and *error.
typedef char* (*kiln_spm_decode_fn)(void* model, const int32_t* ids, size_t count, size_t* length,
                                    char** error);
typedef void (*kiln_spm_free_fn)(void* p);
typedef void (*kiln_spm_unload_fn)(void* model);
}
