/* ckutil.c -- helpers shared by the checkpoint suites (see ckutil.h).
 * SPDX-License-Identifier: Apache-2.0
 */
#include "ckutil.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *ck_tmpdir(void)
{
    char *dir = kit_tmpdir("quant-ckpt-test");
    ck_assert_msg(dir != NULL, "cannot make a temporary directory: %s", strerror(errno));
    return dir;
}

void ck_write_file(const char *path, const void *data, size_t n)
{
    ck_assert_msg(kit_write_file(path, data, n) == 0, "cannot write %s", path);
}

void ck_write_st(const char *path, const char *header, const void *data, size_t n)
{
    ck_assert_msg(kit_st_write_raw(path, header, data, n) == 0, "cannot write %s", path);
}

void ck_gen_file(const char *path, const kit_st_tensor *t, size_t n, const char *meta_json)
{
    ck_assert_msg(kit_st_write(path, t, n, meta_json) == 0, "cannot write %s", path);
}

int ck_count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return -1;
    int count = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) count++;
    closedir(d);
    return count;
}

const char *ck_data_dir(void)
{
    const char *d = getenv("QUANT_CKPT_DATA");
    return d && *d ? d : "tests/data";
}

quant_ruleset *ck_rules(const char *json)
{
    quant_ruleset *rs = NULL;
    quant_ck_error err;
    ck_assert_msg(quant_ruleset_parse(json, strlen(json), "test", &rs, &err) == QUANT_CK_OK,
                  "rules: %s", err.message);
    return rs;
}

quant_ck_status ck_quantize(const char *rules_json, const char *in, const char *out,
                            const quant_pipeline_options *o, quant_report **rep,
                            quant_ck_error *err)
{
    quant_ruleset *rs = ck_rules(rules_json);
    quant_ck_status st = quant_quantize_path(rs, in, out, o, rep, err);
    quant_ruleset_free(rs);
    return st;
}

bool ck_has_tensor(const char *path, const char *name)
{
    quant_st_file *f = NULL;
    ck_assert_int_eq(quant_st_open(path, &f, NULL), QUANT_CK_OK);
    bool found = quant_st_find(f, name) != NULL;
    quant_st_close(f);
    return found;
}
