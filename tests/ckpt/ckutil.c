/* ckutil.c -- helpers shared by the checkpoint suites (see ckutil.h).
 * SPDX-License-Identifier: Apache-2.0
 */
#define _XOPEN_SOURCE 700
#include "ckutil.h"

#include <dirent.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

char *ck_tmpdir(void)
{
    const char *base = getenv("TMPDIR");
    if (!base || !*base) base = "/tmp";
    char *templ = ck_join(base, "quant-ckpt-test-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(templ));
    return templ;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

void ck_rmtree(const char *path)
{
    if (path) nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

char *ck_join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *s = malloc(n);
    ck_assert_ptr_nonnull(s);
    snprintf(s, n, "%s/%s", dir, name);
    return s;
}

void ck_write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "cannot create %s", path);
    ck_assert_uint_eq(fwrite(data, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
}

void *ck_read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) {
            char *bigger = realloc(buf, cap * 2);
            if (!bigger) free(buf);
            buf = bigger;
            cap *= 2;
        }
    }
    fclose(f);
    if (n) *n = len;
    return buf;
}

void ck_write_st(const char *path, const char *header, const void *data, size_t n)
{
    size_t hl = strlen(header);
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "cannot create %s", path);
    unsigned char len[8];
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    ck_assert_uint_eq(fwrite(len, 1, 8, f), 8);
    ck_assert_uint_eq(fwrite(header, 1, hl, f), hl);
    if (n) ck_assert_uint_eq(fwrite(data, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
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
