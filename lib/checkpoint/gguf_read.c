/* gguf_read.c -- the GGUF reader: opens a file (or a descriptor, or a buffer in memory), parses
 * the header, the key-value pairs (each kept as its raw encoded bytes) and the tensor infos
 * through a small buffered cursor that checks every length and count against the bytes the file
 * has left before anything is allocated, applies every rule of ggml's reader (and a few of its
 * own), lays the tensors out against their offsets, and reads tensor bytes on demand with pread.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ck_internal.h"
#include "quant_gguf.h"

#define CUR_BUF (64u << 10) /* bytes the cursor reads at a time */

/* What quant_gguf_open allocates: the public struct first, then the lookup indexes. */
typedef struct gg_file {
    quant_gguf_file pub;
    const unsigned char *mem;            /* quant_gguf_open_buffer's bytes, else NULL */
    const quant_gguf_kv **kv_by_key;     /* n_kv pointers in strcmp order */
    const quant_gguf_tensor **t_by_name; /* n_tensors pointers in strcmp order */
    size_t kv_cap, t_cap;                /* entries allocated (zeroed) in kv and tensors */
} gg_file;

/* A reading position with a window of the file before it. */
typedef struct gg_cur {
    const gg_file *gf;
    uint64_t pos;
    unsigned char buf[CUR_BUF];
    uint64_t buf_at; /* file offset of buf[0] */
    size_t buf_len;
    const char *what; /* the item being read, for messages ("key 'a.b'", "tensor #3") */
    char what_buf[160];
} gg_cur;

static quant_ck_status bad(quant_ck_error *err, uint64_t at, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* "byte N: WHAT: message" as a format error; the file name is prefixed by open_common. */
static quant_ck_status bad(quant_ck_error *err, uint64_t at, const char *what, const char *fmt, ...)
{
    if (!err) return QUANT_CK_ERR_FORMAT;
    err->status = QUANT_CK_ERR_FORMAT;
    int n = snprintf(err->message, sizeof err->message, "byte %" PRIu64 ": %s%s", at,
                     what ? what : "", what ? ": " : "");
    if (n < 0 || (size_t)n >= sizeof err->message) return QUANT_CK_ERR_FORMAT;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message + n, sizeof err->message - (size_t)n, fmt, ap);
    va_end(ap);
    return QUANT_CK_ERR_FORMAT;
}

static quant_ck_status no_memory(quant_ck_error *err)
{
    return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
}

/* Reads exactly n bytes at off: 0, -1 (errno set) or 1 (the end came first). */
static int read_at(const gg_file *gf, void *buf, size_t n, uint64_t off)
{
    if (gf->mem) {
        if (off > gf->pub.file_size || (uint64_t)n > gf->pub.file_size - off) return 1;
        memcpy(buf, gf->mem + off, n);
        return 0;
    }
    char *p = buf;
    while (n > 0) {
        size_t chunk = n < ((size_t)1 << 30) ? n : ((size_t)1 << 30);
        ssize_t k = pread(gf->pub.fd, p, chunk, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return -1;
        if (k == 0) return 1;
        p += k;
        n -= (size_t)k;
        off += (uint64_t)k;
    }
    return 0;
}

static quant_ck_status read_failed(int r, uint64_t at, quant_ck_error *err)
{
    return quant_ck_fail(err, QUANT_CK_ERR_IO, "byte %" PRIu64 ": read failed: %s", at,
                         r < 0 ? strerror(errno) : "short read (file changed?)");
}

/* ---- the cursor -------------------------------------------------------------------------------
 */

static uint64_t cur_left(const gg_cur *c)
{
    return c->gf->pub.file_size - c->pos;
}

static quant_ck_status cur_need(const gg_cur *c, uint64_t n, const char *field, quant_ck_error *err)
{
    if (n <= cur_left(c)) return QUANT_CK_OK;
    return bad(err, c->pos, c->what,
               "truncated: %s needs %" PRIu64 " bytes but the file ends at byte %" PRIu64, field, n,
               c->gf->pub.file_size);
}

/* Copies n bytes at the position out (n <= CUR_BUF) and advances. */
static quant_ck_status cur_take(gg_cur *c, void *out, size_t n, const char *field,
                                quant_ck_error *err)
{
    quant_ck_status st = cur_need(c, n, field, err);
    if (st != QUANT_CK_OK) return st;
    if (c->pos < c->buf_at || c->pos + n > c->buf_at + c->buf_len) {
        uint64_t left = cur_left(c);
        size_t want = left < CUR_BUF ? (size_t)left : CUR_BUF;
        int r = read_at(c->gf, c->buf, want, c->pos);
        if (r != 0) return read_failed(r, c->pos, err);
        c->buf_at = c->pos;
        c->buf_len = want;
    }
    memcpy(out, c->buf + (c->pos - c->buf_at), n);
    c->pos += n;
    return QUANT_CK_OK;
}

static uint64_t le(const unsigned char *b, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | b[i];
    return v;
}

static quant_ck_status cur_u32(gg_cur *c, uint32_t *v, const char *field, quant_ck_error *err)
{
    unsigned char b[4];
    quant_ck_status st = cur_take(c, b, 4, field, err);
    *v = (uint32_t)le(b, 4);
    return st;
}

static quant_ck_status cur_u64(gg_cur *c, uint64_t *v, const char *field, quant_ck_error *err)
{
    unsigned char b[8];
    quant_ck_status st = cur_take(c, b, 8, field, err);
    *v = le(b, 8);
    return st;
}

static quant_ck_status cur_skip(gg_cur *c, uint64_t n, const char *field, quant_ck_error *err)
{
    quant_ck_status st = cur_need(c, n, field, err);
    if (st == QUANT_CK_OK) c->pos += n;
    return st;
}

/* A string's u64 length, checked against ggml's cap and what the file has left. */
static quant_ck_status cur_strlen(gg_cur *c, uint64_t *len, const char *field, quant_ck_error *err)
{
    uint64_t at = c->pos;
    quant_ck_status st = cur_u64(c, len, field, err);
    if (st != QUANT_CK_OK) return st;
    if (*len > QUANT_GGUF_MAX_STRING)
        return bad(err, at, c->what, "%s length %" PRIu64 " exceeds the %" PRIu64 "-byte limit",
                   field, *len, QUANT_GGUF_MAX_STRING);
    if (*len > cur_left(c))
        return bad(err, at, c->what,
                   "%s length %" PRIu64 " runs past the end of the file (%" PRIu64 " bytes left)",
                   field, *len, cur_left(c));
    return QUANT_CK_OK;
}

/* A key or tensor name: a string without NUL bytes, malloc'd with a NUL. */
static quant_ck_status cur_name(gg_cur *c, char **out, uint64_t *len_out, const char *field,
                                quant_ck_error *err)
{
    uint64_t len, at = c->pos;
    quant_ck_status st = cur_strlen(c, &len, field, err);
    if (st != QUANT_CK_OK) return st;
    char *s = malloc((size_t)len + 1);
    if (!s) return no_memory(err);
    int r = read_at(c->gf, s, (size_t)len, c->pos);
    if (r != 0) {
        free(s);
        return read_failed(r, c->pos, err);
    }
    s[len] = '\0';
    c->pos += len;
    if (strlen(s) != len) {
        free(s);
        return bad(err, at, c->what, "%s holds a NUL byte", field);
    }
    *out = s;
    if (len_out) *len_out = len;
    return QUANT_CK_OK;
}

/* ---- the header -------------------------------------------------------------------------------
 */

static quant_ck_status read_version(gg_cur *c, quant_ck_error *err)
{
    unsigned char magic[4];
    quant_ck_status st = cur_take(c, magic, 4, "the magic", err);
    if (st != QUANT_CK_OK) return st;
    if (!quant_gguf_is_gguf(magic, 4)) {
        char shown[5];
        for (int i = 0; i < 4; i++)
            shown[i] = magic[i] >= 0x20 && magic[i] < 0x7f ? (char)magic[i] : '?';
        shown[4] = '\0';
        return bad(err, 0, NULL, "bad magic '%s' (bytes %02x %02x %02x %02x): not a GGUF file",
                   shown, magic[0], magic[1], magic[2], magic[3]);
    }
    uint32_t v;
    if ((st = cur_u32(c, &v, "the version", err)) != QUANT_CK_OK) return st;
    if (v != 0 && (v & 0xFFFFu) == 0)
        return bad(err, 4, NULL,
                   "version %" PRIu32 " (0x%08" PRIx32 ") looks byte-swapped: a big-endian file, "
                   "which GGUF readers do not take",
                   v, v);
    if (v < 2 || v > 3)
        return bad(err, 4, NULL, "version %" PRIu32 " is not supported (only 2 and 3 are)", v);
    ((gg_file *)c->gf)->pub.version = v;
    return QUANT_CK_OK;
}

/* A count: an int64 >= 0. Nothing is allocated from it: the arrays grow as items are read, so
 * a count the file cannot back ends at the first item it lacks. */
static quant_ck_status read_count(gg_cur *c, const char *field, uint64_t *n, quant_ck_error *err)
{
    uint64_t at = c->pos;
    quant_ck_status st = cur_u64(c, n, field, err);
    if (st == QUANT_CK_OK && *n > (uint64_t)INT64_MAX)
        return bad(err, at, NULL, "%s %" PRId64 " is negative", field, (int64_t)*n);
    return st;
}

/* `arr` with room for item `n` (*cap entries of `size` bytes, doubled when full, the new ones
 * zeroed); NULL when out of memory (`arr` is still the caller's). */
static void *grow(void *arr, size_t *cap, size_t n, size_t size)
{
    if (n < *cap) return arr;
    size_t want = *cap ? 2 * *cap : 16;
    if (want > SIZE_MAX / size) return NULL;
    unsigned char *p = realloc(arr, want * size);
    if (!p) return NULL;
    memset(p + *cap * size, 0, (want - *cap) * size);
    *cap = want;
    return p;
}

/* ---- key-value pairs --------------------------------------------------------------------------
 */

static bool valid_type(int32_t t)
{
    return t >= 0 && t < QUANT_GGUF_TYPE_COUNT;
}

/* Moves past one value of scalar type t (strings: checked lengths). */
static quant_ck_status skip_scalar(gg_cur *c, quant_gguf_type t, quant_ck_error *err)
{
    if (t != QUANT_GGUF_STRING) return cur_skip(c, quant_gguf_type_size(t), "the value", err);
    uint64_t len;
    quant_ck_status st = cur_strlen(c, &len, "the string", err);
    return st == QUANT_CK_OK ? cur_skip(c, len, "the string", err) : st;
}

/* After the value type: an array's element type and count, then every element. */
static quant_ck_status skip_array(gg_cur *c, quant_gguf_kv *kv, quant_ck_error *err)
{
    uint32_t elem;
    uint64_t at = c->pos;
    quant_ck_status st = cur_u32(c, &elem, "the array's element type", err);
    if (st == QUANT_CK_OK) st = cur_u64(c, &kv->n, "the array's length", err);
    if (st != QUANT_CK_OK) return st;
    if ((int32_t)elem == QUANT_GGUF_ARRAY)
        return bad(err, at, c->what, "an array of arrays (nested arrays are not supported)");
    if (!valid_type((int32_t)elem))
        return bad(err, at, c->what, "unknown array element type %" PRId32, (int32_t)elem);
    kv->elem = (quant_gguf_type)elem;
    if (kv->n > QUANT_GGUF_MAX_ARRAY)
        return bad(err, at + 4, c->what,
                   "array length %" PRIu64 " exceeds the %" PRIu64 "-element limit", kv->n,
                   QUANT_GGUF_MAX_ARRAY);
    uint64_t each = kv->elem == QUANT_GGUF_STRING ? 8 : quant_gguf_type_size(kv->elem);
    if (kv->n > cur_left(c) / each)
        return bad(err, at + 4, c->what,
                   "array of %" PRIu64 " %s runs past the end of the file (%" PRIu64 " bytes left)",
                   kv->n, quant_gguf_type_name(kv->elem), cur_left(c));
    if (kv->elem != QUANT_GGUF_STRING) return cur_skip(c, kv->n * each, "the array", err);
    for (uint64_t i = 0; st == QUANT_CK_OK && i < kv->n; i++) st = skip_scalar(c, kv->elem, err);
    return st;
}

/* Keeps the value's bytes [from, c->pos) as raw (and a STRING scalar as str). */
static quant_ck_status keep_raw(gg_cur *c, quant_gguf_kv *kv, uint64_t from, quant_ck_error *err)
{
    kv->raw_len = (size_t)(c->pos - from);
    if (!(kv->raw = malloc(kv->raw_len ? kv->raw_len : 1))) return no_memory(err);
    int r = read_at(c->gf, kv->raw, kv->raw_len, from);
    if (r != 0) return read_failed(r, from, err);
    if (kv->type != QUANT_GGUF_STRING) return QUANT_CK_OK;
    if (!(kv->str = malloc(kv->raw_len - 8 + 1))) return no_memory(err);
    memcpy(kv->str, kv->raw + 8, kv->raw_len - 8);
    kv->str[kv->raw_len - 8] = '\0';
    return QUANT_CK_OK;
}

static quant_ck_status read_kv(gg_cur *c, uint64_t i, quant_gguf_kv *kv, quant_ck_error *err)
{
    kv->offset = c->pos;
    snprintf(c->what_buf, sizeof c->what_buf, "key #%" PRIu64, i);
    c->what = c->what_buf;
    uint64_t len;
    quant_ck_status st = cur_name(c, &kv->key, &len, "the key", err);
    if (st != QUANT_CK_OK) return st;
    if (len == 0) return bad(err, kv->offset, c->what, "the key is empty");
    char shortk[CK_SHORT_MAX];
    snprintf(c->what_buf, sizeof c->what_buf, "key '%s'",
             ck_short_text(kv->key, shortk, sizeof shortk));
    uint32_t type;
    uint64_t at = c->pos;
    if ((st = cur_u32(c, &type, "the value type", err)) != QUANT_CK_OK) return st;
    if (!valid_type((int32_t)type))
        return bad(err, at, c->what, "unknown value type %" PRId32, (int32_t)type);
    kv->type = kv->elem = (quant_gguf_type)type;
    kv->n = 1;
    uint64_t from = c->pos;
    st = kv->type == QUANT_GGUF_ARRAY ? skip_array(c, kv, err) : skip_scalar(c, kv->type, err);
    return st == QUANT_CK_OK ? keep_raw(c, kv, from, err) : st;
}

static int kv_cmp(const void *a, const void *b)
{
    const quant_gguf_kv *const *x = a, *const *y = b;
    int k = strcmp((*x)->key, (*y)->key);
    return k ? k : ((*x)->offset < (*y)->offset ? -1 : 1);
}

/* Unique keys; general.alignment a u32 power of two. */
static quant_ck_status check_kvs(gg_file *gf, quant_ck_error *err)
{
    quant_gguf_file *f = &gf->pub;
    for (size_t i = 0; i < f->n_kv; i++) gf->kv_by_key[i] = &f->kv[i];
    if (f->n_kv > 1) qsort(gf->kv_by_key, f->n_kv, sizeof *gf->kv_by_key, kv_cmp);
    char s[CK_SHORT_MAX];
    for (size_t i = 1; i < f->n_kv; i++)
        if (strcmp(gf->kv_by_key[i - 1]->key, gf->kv_by_key[i]->key) == 0)
            return bad(err, gf->kv_by_key[i]->offset, NULL,
                       "duplicate key '%s' (first at byte %" PRIu64 ")",
                       ck_short_text(gf->kv_by_key[i]->key, s, sizeof s),
                       gf->kv_by_key[i - 1]->offset);
    f->alignment = QUANT_GGUF_ALIGNMENT;
    const quant_gguf_kv *a = quant_gguf_find_kv(f, "general.alignment");
    if (!a) return QUANT_CK_OK;
    if (a->type != QUANT_GGUF_U32)
        return bad(err, a->offset, "key 'general.alignment'", "it is %s, not u32",
                   quant_gguf_type_name(a->type));
    uint32_t v = (uint32_t)le(a->raw, 4);
    if (v == 0 || (v & (v - 1)) != 0)
        return bad(err, a->offset, "key 'general.alignment'", "%" PRIu32 " is not a power of two",
                   v);
    f->alignment = v;
    return QUANT_CK_OK;
}

/* ---- tensor infos -----------------------------------------------------------------------------
 */

/* ggml's overflow rule: the element count must stay below INT64_MAX. */
static bool count_overflows(const int64_t *ne)
{
    for (int i = 0; i < QUANT_GGUF_MAX_DIMS; i++)
        if (ne[i] == 0) return false;
    return INT64_MAX / ne[1] <= ne[0] || INT64_MAX / ne[2] <= ne[0] * ne[1] ||
           INT64_MAX / ne[3] <= ne[0] * ne[1] * ne[2];
}

static quant_ck_status read_dims(gg_cur *c, quant_gguf_tensor *t, quant_ck_error *err)
{
    uint32_t n_dims;
    uint64_t at = c->pos;
    quant_ck_status st = cur_u32(c, &n_dims, "n_dims", err);
    if (st != QUANT_CK_OK) return st;
    if (n_dims > QUANT_GGUF_MAX_DIMS)
        return bad(err, at, c->what, "n_dims %" PRIu32 " exceeds %d", n_dims, QUANT_GGUF_MAX_DIMS);
    t->n_dims = (int)n_dims;
    for (int j = 0; j < QUANT_GGUF_MAX_DIMS; j++) {
        uint64_t v = 1;
        at = c->pos;
        if (j < t->n_dims && (st = cur_u64(c, &v, "a dimension", err)) != QUANT_CK_OK) return st;
        t->ne[j] = (int64_t)v;
        if (t->ne[j] < 0)
            return bad(err, at, c->what, "ne[%d] = %" PRId64 " is negative", j, t->ne[j]);
    }
    if (count_overflows(t->ne))
        return bad(err, at, c->what,
                   "%" PRId64 " x %" PRId64 " x %" PRId64 " x %" PRId64 " elements overflow int64",
                   t->ne[0], t->ne[1], t->ne[2], t->ne[3]);
    /* with ne[0] = 0 ggml checks nothing more; the row count must still fit */
    if (__builtin_mul_overflow(t->ne[1], t->ne[2], &t->nrows) ||
        __builtin_mul_overflow(t->nrows, t->ne[3], &t->nrows))
        return bad(err, at, c->what, "%" PRId64 " x %" PRId64 " x %" PRId64 " rows overflow int64",
                   t->ne[1], t->ne[2], t->ne[3]);
    return QUANT_CK_OK;
}

static quant_ck_status read_type(gg_cur *c, quant_gguf_tensor *t, quant_ck_error *err)
{
    uint32_t type;
    uint64_t at = c->pos;
    quant_ck_status st = cur_u32(c, &type, "the ggml type", err);
    if (st != QUANT_CK_OK) return st;
    t->type = (int32_t)type;
    if (!(t->traits = quant_ggml_traits_get(t->type)))
        return bad(err, at, c->what,
                   "ggml type id %d is unknown (not a ggml type, or one quantd does not read)",
                   t->type);
    if (t->ne[0] % t->traits->block != 0)
        return bad(err, at, c->what,
                   "ne[0] = %" PRId64 " is not a multiple of %s's block of %" PRId64, t->ne[0],
                   t->traits->ggml_name, t->traits->block);
    int64_t rb = t->ne[0] ? quant_ggml_row_bytes(t->type, t->ne[0]) : 0;
    if (rb < 0 || (t->nrows > 0 && (uint64_t)rb > (uint64_t)INT64_MAX / (uint64_t)t->nrows))
        return bad(err, at, c->what, "its byte size overflows int64");
    t->row_bytes = (uint64_t)rb;
    t->nbytes = t->row_bytes * (uint64_t)t->nrows;
    return QUANT_CK_OK;
}

static quant_ck_status read_tensor(gg_cur *c, uint64_t i, quant_gguf_tensor *t, quant_ck_error *err)
{
    t->info_offset = c->pos;
    snprintf(c->what_buf, sizeof c->what_buf, "tensor #%" PRIu64, i);
    c->what = c->what_buf;
    uint64_t len;
    quant_ck_status st = cur_name(c, &t->name, &len, "the name", err);
    if (st != QUANT_CK_OK) return st;
    char s[CK_SHORT_MAX];
    snprintf(c->what_buf, sizeof c->what_buf, "tensor '%s'", ck_short_text(t->name, s, sizeof s));
    if (len >= QUANT_GGUF_MAX_NAME)
        return bad(err, t->info_offset, c->what, "name of %" PRIu64 " bytes is too long (< %d)",
                   len, QUANT_GGUF_MAX_NAME);
    if ((st = read_dims(c, t, err)) != QUANT_CK_OK) return st;
    if ((st = read_type(c, t, err)) != QUANT_CK_OK) return st;
    return cur_u64(c, &t->offset, "the offset", err);
}

static int t_cmp(const void *a, const void *b)
{
    const quant_gguf_tensor *const *x = a, *const *y = b;
    int k = strcmp((*x)->name, (*y)->name);
    return k ? k : ((*x)->info_offset < (*y)->info_offset ? -1 : 1);
}

static uint64_t pad_to(uint64_t x, uint64_t a)
{
    return (x + a - 1) / a * a;
}

/* Unique names; offsets exactly contiguous and padded; every tensor inside the file. */
static quant_ck_status lay_out(gg_file *gf, uint64_t infos_end, quant_ck_error *err)
{
    quant_gguf_file *f = &gf->pub;
    for (size_t i = 0; i < f->n_tensors; i++) gf->t_by_name[i] = &f->tensors[i];
    if (f->n_tensors > 1) qsort(gf->t_by_name, f->n_tensors, sizeof *gf->t_by_name, t_cmp);
    for (size_t i = 1; i < f->n_tensors; i++)
        if (strcmp(gf->t_by_name[i - 1]->name, gf->t_by_name[i]->name) == 0)
            return bad(err, gf->t_by_name[i]->info_offset, NULL,
                       "duplicate tensor name '%s' (first at byte %" PRIu64 ")",
                       gf->t_by_name[i]->name, gf->t_by_name[i - 1]->info_offset);
    f->data_start = pad_to(infos_end, f->alignment);
    if (f->n_tensors > 0 && f->data_start > f->file_size)
        return bad(err, infos_end, NULL,
                   "truncated: the data section would start at byte %" PRIu64
                   " but the file ends at byte %" PRIu64,
                   f->data_start, f->file_size);
    uint64_t pos = 0;
    for (size_t i = 0; i < f->n_tensors; i++) {
        const quant_gguf_tensor *t = &f->tensors[i];
        if (t->offset != pos)
            return bad(err, t->info_offset, NULL,
                       "tensor '%s': offset %" PRIu64 " should be %" PRIu64
                       " (data is contiguous in tensor-info order, each tensor padded to %" PRIu32
                       " bytes)",
                       t->name, t->offset, pos, f->alignment);
        uint64_t room = f->file_size - f->data_start; /* data_start <= file_size: checked */
        if (t->offset > room || t->nbytes > room - t->offset)
            return bad(err, f->data_start + t->offset, NULL,
                       "tensor '%s': truncated: its %" PRIu64 " bytes end past the end of the "
                       "file (%" PRIu64 " bytes)",
                       t->name, t->nbytes, f->file_size);
        pos = pad_to(t->offset + t->nbytes, f->alignment);
    }
    f->data_size = pos;
    return QUANT_CK_OK;
}

/* ---- opening ----------------------------------------------------------------------------------
 */

static quant_ck_status parse(gg_cur *c, quant_ck_error *err)
{
    gg_file *gf = (gg_file *)c->gf;
    quant_gguf_file *f = &gf->pub;
    uint64_t n_tensors, n_kv;
    quant_ck_status st = read_version(c, err);
    if (st == QUANT_CK_OK) st = read_count(c, "tensor count", &n_tensors, err);
    if (st == QUANT_CK_OK) st = read_count(c, "key-value count", &n_kv, err);
    for (uint64_t i = 0; st == QUANT_CK_OK && i < n_kv; i++) {
        quant_gguf_kv *kv = grow(f->kv, &gf->kv_cap, f->n_kv, sizeof *f->kv);
        if (!kv) return no_memory(err);
        f->kv = kv;
        st = read_kv(c, i, &f->kv[f->n_kv++], err);
    }
    if (st == QUANT_CK_OK && !(gf->kv_by_key = calloc(f->n_kv + 1, sizeof *gf->kv_by_key)))
        return no_memory(err);
    if (st == QUANT_CK_OK) st = check_kvs(gf, err);
    for (uint64_t i = 0; st == QUANT_CK_OK && i < n_tensors; i++) {
        quant_gguf_tensor *t = grow(f->tensors, &gf->t_cap, f->n_tensors, sizeof *f->tensors);
        if (!t) return no_memory(err);
        f->tensors = t;
        st = read_tensor(c, i, &f->tensors[f->n_tensors++], err);
    }
    if (st == QUANT_CK_OK && !(gf->t_by_name = calloc(f->n_tensors + 1, sizeof *gf->t_by_name)))
        return no_memory(err);
    return st == QUANT_CK_OK ? lay_out(gf, c->pos, err) : st;
}

static quant_ck_status stat_fd(quant_gguf_file *f, quant_ck_error *err)
{
    struct stat sb;
    if (fstat(f->fd, &sb) != 0)
        return quant_ck_fail(err, QUANT_CK_ERR_IO, "cannot stat: %s", strerror(errno));
    if (!S_ISREG(sb.st_mode)) return quant_ck_fail(err, QUANT_CK_ERR_IO, "not a regular file");
    int fl = fcntl(f->fd, F_GETFL);
    if (fl >= 0 && (fl & O_NONBLOCK)) fcntl(f->fd, F_SETFL, fl & ~O_NONBLOCK);
    f->file_size = (uint64_t)sb.st_size;
    return QUANT_CK_OK;
}

static quant_ck_status open_common(const char *name, int fd, const void *mem, size_t len,
                                   quant_gguf_file **out, quant_ck_error *err)
{
    gg_file *gf = calloc(1, sizeof *gf);
    gg_cur *c = malloc(sizeof *c);
    if (!gf || !c || !(gf->pub.path = strdup(name))) {
        free(gf);
        free(c);
        if (fd >= 0) close(fd);
        return no_memory(err);
    }
    gf->pub.fd = fd;
    gf->mem = mem;
    gf->pub.file_size = (uint64_t)len;
    *c = (gg_cur){.gf = gf};
    quant_ck_status st = mem ? QUANT_CK_OK : stat_fd(&gf->pub, err);
    if (st == QUANT_CK_OK) st = parse(c, err);
    free(c);
    if (st != QUANT_CK_OK) {
        quant_ck_prefix(err, "%s", name);
        quant_gguf_close(&gf->pub);
        return st;
    }
    *out = &gf->pub;
    return QUANT_CK_OK;
}

quant_ck_status quant_gguf_open(const char *path, quant_gguf_file **out, quant_ck_error *err)
{
    if (out) *out = NULL;
    if (!path || !out)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "quant_gguf_open: NULL argument");
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return quant_ck_fail(err, QUANT_CK_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    return open_common(path, fd, NULL, 0, out, err);
}

quant_ck_status quant_gguf_open_fd(int fd, const char *name, quant_gguf_file **out,
                                   quant_ck_error *err)
{
    if (out) *out = NULL;
    if (fd < 0 || !name || !out) {
        if (fd >= 0) close(fd);
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "quant_gguf_open_fd: %s",
                             fd < 0 ? "negative descriptor" : "NULL argument");
    }
    return open_common(name, fd, NULL, 0, out, err);
}

quant_ck_status quant_gguf_open_buffer(const void *buf, size_t len, const char *name,
                                       quant_gguf_file **out, quant_ck_error *err)
{
    if (out) *out = NULL;
    if (!buf || !name || !out)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "quant_gguf_open_buffer: NULL argument");
    return open_common(name, -1, buf, len, out, err);
}

void quant_gguf_close(quant_gguf_file *f)
{
    if (!f) return;
    gg_file *gf = (gg_file *)f;
    if (f->fd >= 0) close(f->fd);
    for (size_t i = 0; f->kv && i < gf->kv_cap; i++) { /* read or half-read entries */
        free(f->kv[i].key);
        free(f->kv[i].raw);
        free(f->kv[i].str);
    }
    for (size_t i = 0; f->tensors && i < gf->t_cap; i++) free(f->tensors[i].name);
    free(f->kv);
    free(f->tensors);
    free(gf->kv_by_key);
    free(gf->t_by_name);
    free(f->path);
    free(gf);
}

bool quant_gguf_is_gguf(const void *head, size_t n)
{
    return head && n >= 4 && memcmp(head, "GGUF", 4) == 0;
}

bool quant_gguf_sniff(const char *path)
{
    if (!path) return false;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return false;
    struct stat sb;
    unsigned char head[4];
    bool yes = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && pread(fd, head, 4, 0) == 4 &&
               quant_gguf_is_gguf(head, 4);
    close(fd);
    return yes;
}

/* ---- lookups and data -------------------------------------------------------------------------
 */

static int kv_find_cmp(const void *key, const void *elem)
{
    const quant_gguf_kv *const *kv = elem;
    return strcmp(key, (*kv)->key);
}

const quant_gguf_kv *quant_gguf_find_kv(const quant_gguf_file *f, const char *key)
{
    if (!f || !key || f->n_kv == 0) return NULL;
    const gg_file *gf = (const gg_file *)f;
    const quant_gguf_kv *const *hit =
        bsearch(key, gf->kv_by_key, f->n_kv, sizeof *gf->kv_by_key, kv_find_cmp);
    return hit ? *hit : NULL;
}

static int t_find_cmp(const void *key, const void *elem)
{
    const quant_gguf_tensor *const *t = elem;
    return strcmp(key, (*t)->name);
}

const quant_gguf_tensor *quant_gguf_find_tensor(const quant_gguf_file *f, const char *name)
{
    if (!f || !name || f->n_tensors == 0) return NULL;
    const gg_file *gf = (const gg_file *)f;
    const quant_gguf_tensor *const *hit =
        bsearch(name, gf->t_by_name, f->n_tensors, sizeof *gf->t_by_name, t_find_cmp);
    return hit ? *hit : NULL;
}

int quant_gguf_shape(const quant_gguf_tensor *t, int64_t shape[QUANT_GGUF_MAX_DIMS])
{
    for (int i = 0; i < t->n_dims; i++) shape[i] = t->ne[t->n_dims - 1 - i];
    return t->n_dims;
}

quant_ck_status quant_gguf_read(const quant_gguf_file *f, const quant_gguf_tensor *t,
                                uint64_t offset, void *buf, size_t n, quant_ck_error *err)
{
    if (!f || !t || (!buf && n > 0))
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "quant_gguf_read: NULL argument");
    if (offset > t->nbytes || (uint64_t)n > t->nbytes - offset)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG,
                             "%s: tensor '%s': cannot read %zu bytes at offset %" PRIu64
                             " of its %" PRIu64 " bytes",
                             f->path, t->name, n, offset, t->nbytes);
    int r = read_at((const gg_file *)f, buf, n, f->data_start + t->offset + offset);
    if (r != 0)
        return quant_ck_fail(err, QUANT_CK_ERR_IO, "%s: tensor '%s': read failed: %s", f->path,
                             t->name, r < 0 ? strerror(errno) : "short read (file changed?)");
    return QUANT_CK_OK;
}

quant_ck_status quant_gguf_read_rows(const quant_gguf_file *f, const quant_gguf_tensor *t,
                                     int64_t row0, int64_t nrows, void *buf, quant_ck_error *err)
{
    if (!f || !t)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "quant_gguf_read_rows: NULL argument");
    if (row0 < 0 || nrows < 0 || row0 > t->nrows || nrows > t->nrows - row0)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG,
                             "%s: tensor '%s': rows [%" PRId64 ", %" PRId64
                             ") are outside its %" PRId64 " rows",
                             f->path, t->name, row0, row0 + nrows, t->nrows);
    return quant_gguf_read(f, t, (uint64_t)row0 * t->row_bytes, buf,
                           (size_t)((uint64_t)nrows * t->row_bytes), err);
}
