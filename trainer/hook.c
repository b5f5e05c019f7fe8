/* hook.c — the bucket helpers every hook uses (see hook.h). */
#include "trainer/hook.h"

#include <stdlib.h>

int hook_bucket_reserve(hook_bucket *b, uint64_t nnz)
{
    uint64_t need = nnz * (8 + 4 * b->cols);
    if (need <= b->result_cap)
        return 0;
    uint8_t *p = realloc(b->result, need ? need : 1);
    if (!p)
        return -1;
    b->result = p;
    b->result_cap = need;
    return 0;
}

void hook_bucket_release(hook_bucket *b)
{
    free(b->result);
    b->result = NULL;
    b->result_cap = b->result_nnz = 0;
}
