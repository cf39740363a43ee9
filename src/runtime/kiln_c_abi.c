/* The one source of libkiln.so itself (the runtime archives are linked into it whole):
 * compiled as C, it proves that include/kiln/kiln.h is plain C, and pins the few values
 * the ABI promises. */
#include "kiln/kiln.h"

_Static_assert(KILN_SUCCESS == 0, "KILN_SUCCESS must be 0, as ACL_SUCCESS");
_Static_assert(sizeof(kilnError) == sizeof(int), "kilnError is an int");
_Static_assert(KILN_FLOAT == 0 && KILN_FLOAT16 == 1 && KILN_BF16 == 27,
               "data types keep AscendCL's numbering");
_Static_assert(KILN_MEMCPY_HOST_TO_DEVICE == 1 && KILN_MEMCPY_DEVICE_TO_HOST == 2,
               "memcpy kinds keep AscendCL's numbering");
