/* The one source of libkiln.so itself (the runtime archives are linked into it whole):
 * compiled as C, it proves that include/kiln/kiln.h is plain C, and pins the few values
 * the ABI promises. */
#include "kiln/kiln.h"
#include "kiln/kiln_op.h" /* plain C too */
#include "kiln/llm.h"     /* and the LLM engine's API */

_Static_assert(KILN_SUCCESS == 0, "KILN_SUCCESS must be 0, as ACL_SUCCESS");
_Static_assert(sizeof(kilnError) == sizeof(int), "kilnError is an int");
_Static_assert(KILN_FLOAT == 0 && KILN_FLOAT16 == 1 && KILN_BF16 == 27,
               "data types keep AscendCL's numbering");
_Static_assert(KILN_MEMCPY_HOST_TO_DEVICE == 1 && KILN_MEMCPY_DEVICE_TO_HOST == 2,
               "memcpy kinds keep AscendCL's numbering");
_Static_assert(KILN_YUV420SP_U8 == 1 && KILN_ARGB8888_U8 == 7 && KILN_AYUV444_U8 == 10 && KILN_RAW24 == 14,
               "AIPP input formats keep AscendCL's (and ATC's) numbering");
_Static_assert(KILN_DATA_WITHOUT_AIPP == 0 && KILN_DYNAMIC_AIPP_NODE == 3,
               "AIPP input types keep AscendCL's numbering");
_Static_assert(KILN_ERROR_NOT_STATIC_AIPP == 100038, "AIPP errors keep AscendCL's numbering");
_Static_assert(KILN_LLM_REQUEST_WAITING == 0 && KILN_LLM_REQUEST_CANCELLED == 3,
               "LLM request statuses keep their numbering");
