/* ct_file_config.c -- compressed-tensors config.json for a one-file run: the run's
 * quantization_config merged into the config.json beside the input file (a new one when there is
 * none), checked before any work (config.json beside the output must not exist yet: it is never
 * replaced, so the input's own config.json is never overwritten), written beside the output file
 * once the shard is published and recorded in the run's report. Without it a compressed-tensors
 * shard is a file vLLM cannot load as quantized.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ck_internal.h"

#define CONFIG_NAME "config.json"

/* "DIR/config.json" for the directory part of `path` ("config.json" when it has none);
 * malloc'd, NULL on OOM. */
static char *beside(const char *path)
{
    const char *slash = strrchr(path, '/');
    size_t dir = slash ? (size_t)(slash - path) + 1 : 0, n = dir + sizeof CONFIG_NAME;
    char *s = malloc(n);
    if (s) snprintf(s, n, "%.*s%s", (int)dir, path, CONFIG_NAME);
    return s;
}

quant_ck_status ck_ct_file_config_text(const ck_dir *base, const char *in, const char *out,
                                       const ck_ct_config *ct, char **text, quant_ck_error *err)
{
    *text = NULL;
    char *src = beside(in), *dst = out ? beside(out) : NULL, *old = NULL;
    if (!src || (out && !dst)) {
        free(src);
        return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    }
    quant_ck_status st = dst ? ck_check_target(dst, CK_TARGET_NEW, err) : QUANT_CK_OK;
    if (st == QUANT_CK_ERR_ARG) /* it exists */
        st = quant_ck_fail(err, QUANT_CK_ERR_ARG,
                           "%s already exists: the compressed-tensors layout writes config.json "
                           "(its quantization_config) beside the output file, and never replaces "
                           "one; write the output into a directory without config.json, or "
                           "quantize the checkpoint directory instead",
                           dst);
    struct stat sb;
    if (st == QUANT_CK_OK && !base->wait && ck_stat_in(base, src, &sb))
        st = ck_read_small_in(base, src, CK_CONFIG_MAX, &old, NULL, err);
    if (st == QUANT_CK_OK && !(*text = ck_ct_config_apply(ct, old, err)))
        st = err ? err->status : QUANT_CK_ERR_NOMEM;
    if (st != QUANT_CK_OK && old) quant_ck_prefix(err, "%s", src);
    free(old);
    free(src);
    free(dst);
    return st;
}

quant_ck_status ck_ct_file_config_write(const char *out, const char *text, quant_report *report,
                                        bool sha256, quant_ck_error *err)
{
    char *dst = beside(out), hex[65] = "";
    if (!dst) return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    size_t len = strlen(text);
    quant_ck_status st = ck_check_target(dst, CK_TARGET_NEW, err);
    if (st == QUANT_CK_OK) st = ck_write_file_atomic_sha(dst, text, len, sha256 ? hex : NULL, err);
    if (st == QUANT_CK_OK && !ck_report_add_output(report, CONFIG_NAME, len, sha256 ? hex : NULL)) {
        unlink(dst);
        st = quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    }
    free(dst);
    return st;
}
