/* readme_main.c -- drives the README's libquant example (extracted by `make check`), so the
 * documented code keeps compiling and working.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdint.h>
#include <stdio.h>

int quantize_rows(const float *w, int64_t rows, int64_t cols, int8_t *q, float *scale);

int main(void)
{
    const float w[2 * 4] = {1.0f, -2.0f, 0.5f, 4.0f, 127.5f, 0.0f, -63.75f, 1.0f};
    int8_t q[8];
    float scale[2];
    if (quantize_rows(w, 2, 4, q, scale) != 0) return 1;
    /* row 1: absmax 127.5 -> scale 1, codes are the rounded values */
    if (scale[1] != 1.0f || q[4] != 127 || q[6] != -64) return 1;
    printf("README example: ok\n");
    return 0;
}
