/* ct_read.h -- what the compressed-tensors reader's files share (ct_config_read.c, ct_read.c,
 * ct_decode.c): a config group as the reader sees it, and which forms a format holds.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef CT_READ_H
#define CT_READ_H

#include <jansson.h>

#include "quant_ctensors.h"

/* One config group of a quantization_config. Strings point into the parsed config. */
typedef struct ct_group {
    const char *name;      /* its key, "group_0" */
    const char *format;    /* its format, else the top-level one */
    int bits;              /* weights.num_bits, 0 when absent */
    const json_t *targets; /* its targets (module names, "re:..." patterns, class names) */
    const char *version;   /* quantization_config's "version" (the compressed-tensors release
                              that wrote it), NULL when absent */
} ct_group;

/* Whether tensors of `form` may be stored under `format`. */
bool ct_format_holds(const char *format, quant_ct_form form);

/* The group of module `module`: the first whose targets name it exactly, else the config's only
 * group, else NULL ("re:" patterns and class names are not evaluated). NULL-safe on `cfg`. */
const ct_group *ct_config_group(const quant_ct_config *cfg, const char *module);

#endif /* CT_READ_H */
