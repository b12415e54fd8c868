/* gguf_write.c -- the GGUF writer: key-value pairs (copied raw from a reader, or new typed ones,
 * set or replaced in place) and tensor infos are declared first; begin lays the data out as
 * ggml's reader requires (contiguous in declaration order, every tensor and the tail padded to
 * the alignment), writes the header to a sized temporary file beside the target, then takes the
 * data streamed in order or by pwrite at any offset (counting each tensor's bytes), and commit
 * checks the counts and publishes by fsync + rename + fsync of the directory. On request the
 * file's SHA-256 is taken while it is written (hash.c).
 * SPDX-License-Identifier: Apache-2.0
 */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ck_internal.h"
#include "quant_gguf.h"

#define GGUF_VERSION_OUT 3

typedef struct gw_kv {
    char *key;
    quant_gguf_type type;
    unsigned char *raw; /* the value as encoded after its type id */
    size_t raw_len;
} gw_kv;

typedef struct gw_tensor {
    char *name;
    int n_dims;
    int64_t ne[QUANT_GGUF_MAX_DIMS];
    int type;
    uint64_t offset, nbytes;
    atomic_uint_fast64_t written;
} gw_tensor;

enum { MODE_NONE = 0, MODE_STREAM, MODE_PWRITE };

struct quant_gguf_writer {
    char *path;
    char *tmp; /* the temporary file while it exists */
    int fd;
    bool begun, committed, want_hash, hashed;
    uint32_t alignment;
    gw_kv *kv;
    size_t n_kv, cap_kv;
    gw_tensor *t;
    size_t n_t, cap_t;
    uint64_t data_start, size;
    atomic_int mode;
    size_t cur;       /* streaming: the tensor being written */
    uint64_t cur_off; /* ... and how far */
    ck_hasher *hasher;
    char sha256[65];
};

static quant_ck_status no_memory(quant_ck_error *err)
{
    return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
}

static void put_le(unsigned char *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t pad_to(uint64_t x, uint64_t a)
{
    return (x + a - 1) / a * a;
}

static quant_ck_status not_open(const quant_gguf_writer *w, const char *call, quant_ck_error *err)
{
    return quant_ck_fail(err, QUANT_CK_ERR_ARG, "%s: %s", call,
                         !w ? "NULL writer" : "the writer has begun: nothing can be declared now");
}

/* ---- key-value pairs ----------------------------------------------------------------------- */

static long kv_index(const quant_gguf_writer *w, const char *key)
{
    for (size_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->kv[i].key, key) == 0) return (long)i;
    return -1;
}

/* general.alignment: only a u32 power of two; it becomes the writer's alignment. */
static quant_ck_status check_alignment(quant_gguf_writer *w, const char *key, quant_gguf_type type,
                                       const unsigned char *raw, quant_ck_error *err)
{
    if (strcmp(key, "general.alignment") != 0) return QUANT_CK_OK;
    if (type != QUANT_GGUF_U32)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG,
                             "%s: key 'general.alignment' must be u32, not %s", w->path,
                             quant_gguf_type_name(type));
    uint32_t v = (uint32_t)(raw[0] | raw[1] << 8 | raw[2] << 16 | (uint32_t)raw[3] << 24);
    if (v == 0 || (v & (v - 1)) != 0)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG,
                             "%s: key 'general.alignment': %" PRIu32 " is not a power of two",
                             w->path, v);
    w->alignment = v;
    return QUANT_CK_OK;
}

/* Sets `key` to the encoded value `raw` (taken over: freed on failure too), in place or
 * appended. */
static quant_ck_status set_raw(quant_gguf_writer *w, const char *key, quant_gguf_type type,
                               unsigned char *raw, size_t raw_len, quant_ck_error *err)
{
    quant_ck_status st = QUANT_CK_OK;
    if (!w || w->begun)
        st = not_open(w, "quant_gguf_writer_set", err);
    else if (!key || !*key || strlen(key) > QUANT_GGUF_MAX_STRING)
        st = quant_ck_fail(err, QUANT_CK_ERR_ARG,
                           "%s: a key must be a non-empty string of at most %" PRIu64 " bytes",
                           w->path, QUANT_GGUF_MAX_STRING);
    else if (!raw)
        st = no_memory(err);
    if (st == QUANT_CK_OK) st = check_alignment(w, key, type, raw, err);
    long i = st == QUANT_CK_OK ? kv_index(w, key) : -1;
    if (st == QUANT_CK_OK && i < 0 && w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? 2 * w->cap_kv : 16;
        gw_kv *kv = realloc(w->kv, cap * sizeof *kv);
        if (!kv)
            st = no_memory(err);
        else {
            w->kv = kv;
            w->cap_kv = cap;
        }
    }
    char *k = NULL;
    if (st == QUANT_CK_OK && i < 0 && !(k = strdup(key))) st = no_memory(err);
    if (st != QUANT_CK_OK) {
        free(raw);
        return st;
    }
    if (i < 0) {
        i = (long)w->n_kv++;
        w->kv[i].key = k;
    } else {
        free(w->kv[i].raw);
    }
    w->kv[i].type = type;
    w->kv[i].raw = raw;
    w->kv[i].raw_len = raw_len;
    return QUANT_CK_OK;
}

static quant_ck_status set_scalar(quant_gguf_writer *w, const char *key, quant_gguf_type type,
                                  uint64_t bits, quant_ck_error *err)
{
    size_t n = quant_gguf_type_size(type);
    unsigned char *raw = malloc(n);
    if (raw) put_le(raw, bits, (int)n);
    return set_raw(w, key, type, raw, n, err);
}

quant_ck_status quant_gguf_writer_set_u32(quant_gguf_writer *w, const char *key, uint32_t v,
                                          quant_ck_error *err)
{
    return set_scalar(w, key, QUANT_GGUF_U32, v, err);
}

quant_ck_status quant_gguf_writer_set_i32(quant_gguf_writer *w, const char *key, int32_t v,
                                          quant_ck_error *err)
{
    return set_scalar(w, key, QUANT_GGUF_I32, (uint32_t)v, err);
}

quant_ck_status quant_gguf_writer_set_u64(quant_gguf_writer *w, const char *key, uint64_t v,
                                          quant_ck_error *err)
{
    return set_scalar(w, key, QUANT_GGUF_U64, v, err);
}

quant_ck_status quant_gguf_writer_set_f32(quant_gguf_writer *w, const char *key, float v,
                                          quant_ck_error *err)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return set_scalar(w, key, QUANT_GGUF_F32, u, err);
}

quant_ck_status quant_gguf_writer_set_bool(quant_gguf_writer *w, const char *key, bool v,
                                           quant_ck_error *err)
{
    return set_scalar(w, key, QUANT_GGUF_BOOL, v ? 1 : 0, err);
}

quant_ck_status quant_gguf_writer_set_string(quant_gguf_writer *w, const char *key, const char *v,
                                             quant_ck_error *err)
{
    if (!v || strlen(v) > QUANT_GGUF_MAX_STRING) {
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "%s: key '%s': the string is NULL or too long",
                             w ? w->path : "quant_gguf_writer_set_string", key ? key : "(null)");
    }
    size_t len = strlen(v);
    unsigned char *raw = malloc(8 + len);
    if (raw) {
        put_le(raw, len, 8);
        memcpy(raw + 8, v, len);
    }
    return set_raw(w, key, QUANT_GGUF_STRING, raw, 8 + len, err);
}

/* An array's encoded head (element type, count) with room for `body` bytes after it. */
static unsigned char *array_raw(quant_gguf_type elem, size_t n, size_t body)
{
    unsigned char *raw = malloc(12 + body);
    if (raw) {
        put_le(raw, (uint32_t)elem, 4);
        put_le(raw + 4, n, 8);
    }
    return raw;
}

static quant_ck_status check_array(quant_gguf_writer *w, const char *key, const void *v, size_t n,
                                   quant_ck_error *err)
{
    if ((v || n == 0) && (uint64_t)n <= QUANT_GGUF_MAX_ARRAY) return QUANT_CK_OK;
    return quant_ck_fail(err, QUANT_CK_ERR_ARG, "%s: key '%s': the array is NULL or too long",
                         w ? w->path : "quant_gguf_writer_set", key ? key : "(null)");
}

/* An array of 4-byte elements. */
static quant_ck_status set_words(quant_gguf_writer *w, const char *key, quant_gguf_type elem,
                                 const void *v, size_t n, quant_ck_error *err)
{
    quant_ck_status st = check_array(w, key, v, n, err);
    if (st != QUANT_CK_OK) return st;
    unsigned char *raw = array_raw(elem, n, 4 * n);
    for (size_t i = 0; raw && i < n; i++) {
        uint32_t u;
        memcpy(&u, (const unsigned char *)v + 4 * i, 4);
        put_le(raw + 12 + 4 * i, u, 4);
    }
    return set_raw(w, key, QUANT_GGUF_ARRAY, raw, 12 + 4 * n, err);
}

quant_ck_status quant_gguf_writer_set_i32s(quant_gguf_writer *w, const char *key, const int32_t *v,
                                           size_t n, quant_ck_error *err)
{
    return set_words(w, key, QUANT_GGUF_I32, v, n, err);
}

quant_ck_status quant_gguf_writer_set_u32s(quant_gguf_writer *w, const char *key, const uint32_t *v,
                                           size_t n, quant_ck_error *err)
{
    return set_words(w, key, QUANT_GGUF_U32, v, n, err);
}

quant_ck_status quant_gguf_writer_set_f32s(quant_gguf_writer *w, const char *key, const float *v,
                                           size_t n, quant_ck_error *err)
{
    return set_words(w, key, QUANT_GGUF_F32, v, n, err);
}

quant_ck_status quant_gguf_writer_set_strings(quant_gguf_writer *w, const char *key,
                                              const char *const *v, size_t n, quant_ck_error *err)
{
    quant_ck_status st = check_array(w, key, v, n, err);
    size_t body = 0;
    for (size_t i = 0; st == QUANT_CK_OK && i < n; i++) {
        if (!v[i] || strlen(v[i]) > QUANT_GGUF_MAX_STRING || body > SIZE_MAX / 2)
            st = quant_ck_fail(
                err, QUANT_CK_ERR_ARG, "%s: key '%s': string %zu is NULL or too long",
                w ? w->path : "quant_gguf_writer_set_strings", key ? key : "(null)", i);
        else
            body += 8 + strlen(v[i]);
    }
    if (st != QUANT_CK_OK) return st;
    unsigned char *raw = array_raw(QUANT_GGUF_STRING, n, body);
    for (size_t i = 0, at = 12; raw && i < n; i++) {
        size_t len = strlen(v[i]);
        put_le(raw + at, len, 8);
        memcpy(raw + at + 8, v[i], len);
        at += 8 + len;
    }
    return set_raw(w, key, QUANT_GGUF_ARRAY, raw, 12 + body, err);
}

quant_ck_status quant_gguf_writer_copy_kv(quant_gguf_writer *w, const quant_gguf_kv *kv,
                                          quant_ck_error *err)
{
    if (!kv || !kv->raw)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "quant_gguf_writer_copy_kv: NULL pair");
    unsigned char *raw = malloc(kv->raw_len ? kv->raw_len : 1);
    if (raw) memcpy(raw, kv->raw, kv->raw_len);
    return set_raw(w, kv->key, kv->type, raw, kv->raw_len, err);
}

quant_ck_status quant_gguf_writer_copy_kvs(quant_gguf_writer *w, const quant_gguf_file *f,
                                           quant_ck_error *err)
{
    if (!f) return quant_ck_fail(err, QUANT_CK_ERR_ARG, "quant_gguf_writer_copy_kvs: NULL file");
    quant_ck_status st = QUANT_CK_OK;
    for (size_t i = 0; st == QUANT_CK_OK && i < f->n_kv; i++)
        st = quant_gguf_writer_copy_kv(w, &f->kv[i], err);
    return st;
}

bool quant_gguf_writer_remove_kv(quant_gguf_writer *w, const char *key)
{
    long i = w && !w->begun && key ? kv_index(w, key) : -1;
    if (i < 0) return false;
    if (strcmp(key, "general.alignment") == 0) w->alignment = QUANT_GGUF_ALIGNMENT;
    free(w->kv[i].key);
    free(w->kv[i].raw);
    memmove(&w->kv[i], &w->kv[i + 1], (w->n_kv - (size_t)i - 1) * sizeof *w->kv);
    w->n_kv--;
    return true;
}

/* ---- tensors --------------------------------------------------------------------------------- */

/* The byte size of a declared tensor, checked as the reader checks it. */
static quant_ck_status tensor_size(const quant_gguf_writer *w, const char *name, int n_dims,
                                   const int64_t *ne, int type, uint64_t *nbytes,
                                   quant_ck_error *err)
{
    const quant_ggml_traits *tr = quant_ggml_traits_get(type);
    if (!tr)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "%s: tensor '%s': ggml type id %d is unknown",
                             w->path, name, type);
    if (n_dims < 1 || n_dims > QUANT_GGUF_MAX_DIMS || !ne)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "%s: tensor '%s': n_dims %d is outside 1..%d",
                             w->path, name, n_dims, QUANT_GGUF_MAX_DIMS);
    int64_t rows = 1;
    for (int i = 0; i < n_dims; i++) {
        if (ne[i] < 0)
            return quant_ck_fail(err, QUANT_CK_ERR_ARG,
                                 "%s: tensor '%s': ne[%d] = %" PRId64 " is negative", w->path, name,
                                 i, ne[i]);
        if (i > 0 && ne[i] > 0 && rows > INT64_MAX / ne[i])
            return quant_ck_fail(err, QUANT_CK_ERR_ARG, "%s: tensor '%s': its size overflows",
                                 w->path, name);
        if (i > 0) rows *= ne[i];
    }
    if (ne[0] % tr->block != 0)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG,
                             "%s: tensor '%s': ne[0] = %" PRId64
                             " is not a multiple of %s's block of %" PRId64,
                             w->path, name, ne[0], tr->ggml_name, tr->block);
    int64_t rb = ne[0] ? quant_ggml_row_bytes(type, ne[0]) : 0;
    if (rb < 0 || (rows > 0 && rb > INT64_MAX / 2 / rows))
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "%s: tensor '%s': its size overflows", w->path,
                             name);
    *nbytes = (uint64_t)rb * (uint64_t)rows;
    return QUANT_CK_OK;
}

quant_ck_status quant_gguf_writer_add_tensor(quant_gguf_writer *w, const char *name, int n_dims,
                                             const int64_t *ne, int type, size_t *index,
                                             quant_ck_error *err)
{
    if (!w || w->begun) return not_open(w, "quant_gguf_writer_add_tensor", err);
    if (!name) return quant_ck_fail(err, QUANT_CK_ERR_ARG, "%s: a tensor has no name", w->path);
    char s[CK_SHORT_MAX];
    if (strlen(name) >= QUANT_GGUF_MAX_NAME)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG,
                             "%s: tensor '%s': a name of %zu bytes is too long (< %d)", w->path,
                             ck_short_text(name, s, sizeof s), strlen(name), QUANT_GGUF_MAX_NAME);
    for (size_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0)
            return quant_ck_fail(err, QUANT_CK_ERR_ARG, "%s: tensor name '%s' is used twice",
                                 w->path, name);
    uint64_t nbytes = 0;
    quant_ck_status st = tensor_size(w, name, n_dims, ne, type, &nbytes, err);
    if (st != QUANT_CK_OK) return st;
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? 2 * w->cap_t : 16;
        gw_tensor *t = realloc(w->t, cap * sizeof *t);
        if (!t) return no_memory(err);
        w->t = t;
        w->cap_t = cap;
    }
    gw_tensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    if (!(t->name = strdup(name))) return no_memory(err);
    t->n_dims = n_dims;
    for (int i = 0; i < QUANT_GGUF_MAX_DIMS; i++) t->ne[i] = i < n_dims ? ne[i] : 1;
    t->type = type;
    t->nbytes = nbytes;
    atomic_init(&t->written, 0);
    if (index) *index = w->n_t;
    w->n_t++;
    return QUANT_CK_OK;
}

/* ---- the header ------------------------------------------------------------------------------ */

/* Offsets, the header's size, the data start and the file size (checked sums). */
static quant_ck_status lay_out(quant_gguf_writer *w, size_t *hdr_len, quant_ck_error *err)
{
    uint64_t len = 4 + 4 + 8 + 8;
    for (size_t i = 0; i < w->n_kv; i++) len += 8 + strlen(w->kv[i].key) + 4 + w->kv[i].raw_len;
    for (size_t i = 0; i < w->n_t; i++)
        len += 8 + strlen(w->t[i].name) + 4 + 8 * (uint64_t)w->t[i].n_dims + 4 + 8;
    if (len > SIZE_MAX / 2)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "%s: the header is too large", w->path);
    w->data_start = pad_to(len, w->alignment);
    uint64_t pos = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        w->t[i].offset = pos;
        if (w->t[i].nbytes > (uint64_t)INT64_MAX / 2 - pos)
            return quant_ck_fail(err, QUANT_CK_ERR_ARG, "%s: the tensors exceed 2^62 bytes",
                                 w->path);
        pos = pad_to(pos + w->t[i].nbytes, w->alignment);
    }
    if (pos > (uint64_t)INT64_MAX / 2 - w->data_start)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "%s: the file would exceed 2^62 bytes",
                             w->path);
    w->size = w->data_start + pos;
    *hdr_len = (size_t)w->data_start;
    return QUANT_CK_OK;
}

static unsigned char *put_string(unsigned char *p, const char *s)
{
    size_t n = strlen(s);
    put_le(p, n, 8);
    memcpy(p + 8, s, n);
    return p + 8 + n;
}

/* The header, padded with zeros to the data start. */
static unsigned char *header_bytes(const quant_gguf_writer *w, size_t len)
{
    unsigned char *b = calloc(1, len), *p = b;
    if (!b) return NULL;
    memcpy(p, "GGUF", 4);
    put_le(p + 4, GGUF_VERSION_OUT, 4);
    put_le(p + 8, w->n_t, 8);
    put_le(p + 16, w->n_kv, 8);
    p += 24;
    for (size_t i = 0; i < w->n_kv; i++) {
        p = put_string(p, w->kv[i].key);
        put_le(p, (uint32_t)w->kv[i].type, 4);
        memcpy(p + 4, w->kv[i].raw, w->kv[i].raw_len);
        p += 4 + w->kv[i].raw_len;
    }
    for (size_t i = 0; i < w->n_t; i++) {
        const gw_tensor *t = &w->t[i];
        p = put_string(p, t->name);
        put_le(p, (uint32_t)t->n_dims, 4);
        p += 4;
        for (int j = 0; j < t->n_dims; j++, p += 8) put_le(p, (uint64_t)t->ne[j], 8);
        put_le(p, (uint32_t)t->type, 4);
        put_le(p + 4, t->offset, 8);
        p += 12;
    }
    return b;
}

/* ---- the file -------------------------------------------------------------------------------- */

static quant_ck_status io_fail(const quant_gguf_writer *w, quant_ck_error *err, const char *what)
{
    return quant_ck_fail(err, QUANT_CK_ERR_IO, "%s: %s: %s", w->path, what, strerror(errno));
}

static bool pwrite_full(int fd, const void *buf, size_t n, uint64_t off)
{
    const char *p = buf;
    while (n > 0) {
        size_t chunk = n < ((size_t)1 << 30) ? n : ((size_t)1 << 30);
        ssize_t k = pwrite(fd, p, chunk, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            if (k == 0) errno = EIO;
            return false;
        }
        p += k;
        n -= (size_t)k;
        off += (uint64_t)k;
    }
    return true;
}

/* The hasher over the sized file; the header and every padding are written already. */
static quant_ck_status start_hash(quant_gguf_writer *w, quant_ck_error *err)
{
    if (!(w->hasher = ck_hasher_start(w->fd, w->size)))
        return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "%s: cannot start hashing it", w->path);
    ck_hasher_wrote(w->hasher, 0, w->data_start);
    for (size_t i = 0; i < w->n_t; i++) {
        uint64_t end = w->data_start + w->t[i].offset + w->t[i].nbytes;
        uint64_t next = i + 1 < w->n_t ? w->data_start + w->t[i + 1].offset : w->size;
        ck_hasher_wrote(w->hasher, end, next - end);
    }
    return QUANT_CK_OK;
}

quant_ck_status quant_gguf_writer_begin(quant_gguf_writer *w, quant_ck_error *err)
{
    if (!w || w->begun) return not_open(w, "quant_gguf_writer_begin", err);
    size_t len = 0;
    quant_ck_status st = lay_out(w, &len, err);
    unsigned char *hdr = st == QUANT_CK_OK ? header_bytes(w, len) : NULL;
    if (st == QUANT_CK_OK && !hdr) st = no_memory(err);
    if (st == QUANT_CK_OK) st = ck_check_target(w->path, CK_TARGET_FILE, err);
    if (st == QUANT_CK_OK) st = ck_temp_file(w->path, &w->tmp, &w->fd, err);
    if (st == QUANT_CK_OK && fchmod(w->fd, 0644) != 0)
        st = io_fail(w, err, "cannot set the temporary file's mode");
    if (st == QUANT_CK_OK && !pwrite_full(w->fd, hdr, len, 0))
        st = io_fail(w, err, "cannot write the header");
    if (st == QUANT_CK_OK && ftruncate(w->fd, (off_t)w->size) != 0)
        st = io_fail(w, err, "cannot size the temporary file");
    if (st == QUANT_CK_OK && w->want_hash) st = start_hash(w, err);
    free(hdr);
    if (st != QUANT_CK_OK) return st; /* quant_gguf_writer_free removes the temporary */
    w->begun = true;
    return QUANT_CK_OK;
}

quant_ck_status quant_gguf_writer_hash(quant_gguf_writer *w, quant_ck_error *err)
{
    if (!w || w->want_hash || atomic_load(&w->mode) != MODE_NONE)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG,
                             "quant_gguf_writer_hash: no writer, already hashing, or data written");
    w->want_hash = true;
    return w->begun ? start_hash(w, err) : QUANT_CK_OK;
}

uint64_t quant_gguf_writer_nbytes(const quant_gguf_writer *w, size_t index)
{
    return w && index < w->n_t ? w->t[index].nbytes : 0;
}

uint64_t quant_gguf_writer_size(const quant_gguf_writer *w)
{
    return w && w->begun ? w->size : 0;
}

/* Claims the writer for one way of writing: the first call decides. */
static bool take_mode(quant_gguf_writer *w, int mode)
{
    int none = MODE_NONE;
    return atomic_compare_exchange_strong(&w->mode, &none, mode) || none == mode;
}

static quant_ck_status put(quant_gguf_writer *w, gw_tensor *t, uint64_t offset, const void *buf,
                           size_t n, quant_ck_error *err)
{
    uint64_t at = w->data_start + t->offset + offset;
    if (!pwrite_full(w->fd, buf, n, at))
        return quant_ck_fail(err, QUANT_CK_ERR_IO, "%s: tensor '%s': write failed: %s", w->path,
                             t->name, strerror(errno));
    ck_hasher_wrote(w->hasher, at, n);
    atomic_fetch_add(&t->written, n);
    return QUANT_CK_OK;
}

quant_ck_status quant_gguf_writer_write(quant_gguf_writer *w, const void *buf, size_t n,
                                        quant_ck_error *err)
{
    if (!w || !w->begun || w->fd < 0 || (!buf && n > 0) || !take_mode(w, MODE_STREAM))
        return quant_ck_fail(err, QUANT_CK_ERR_ARG,
                             "quant_gguf_writer_write: NULL argument, not begun, or the writer "
                             "takes pwrite");
    while (w->cur < w->n_t && w->cur_off == w->t[w->cur].nbytes) {
        w->cur++;
        w->cur_off = 0;
    }
    if (n == 0) return QUANT_CK_OK;
    if (w->cur == w->n_t)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG,
                             "%s: %zu bytes more than the tensors hold (every tensor has its data)",
                             w->path, n);
    gw_tensor *t = &w->t[w->cur];
    if ((uint64_t)n > t->nbytes - w->cur_off)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG,
                             "%s: tensor '%s': a piece of %zu bytes runs past its end (%" PRIu64
                             " of its %" PRIu64 " bytes left)",
                             w->path, t->name, n, t->nbytes - w->cur_off, t->nbytes);
    quant_ck_status st = put(w, t, w->cur_off, buf, n, err);
    if (st == QUANT_CK_OK) w->cur_off += n;
    return st;
}

quant_ck_status quant_gguf_writer_pwrite(quant_gguf_writer *w, size_t index, uint64_t offset,
                                         const void *buf, size_t n, quant_ck_error *err)
{
    if (!w || !w->begun || w->fd < 0 || (!buf && n > 0) || index >= w->n_t ||
        !take_mode(w, MODE_PWRITE))
        return quant_ck_fail(err, QUANT_CK_ERR_ARG,
                             "quant_gguf_writer_pwrite: NULL argument, bad index, not begun, or "
                             "the writer streams");
    gw_tensor *t = &w->t[index];
    if (offset > t->nbytes || (uint64_t)n > t->nbytes - offset)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG,
                             "%s: tensor '%s': cannot write %zu bytes at offset %" PRIu64
                             " of its %" PRIu64 " bytes",
                             w->path, t->name, n, offset, t->nbytes);
    return put(w, t, offset, buf, n, err);
}

/* Every tensor got exactly its bytes. */
static quant_ck_status check_counts(const quant_gguf_writer *w, quant_ck_error *err)
{
    for (size_t i = 0; i < w->n_t; i++) {
        uint64_t got = atomic_load(&w->t[i].written);
        if (got != w->t[i].nbytes)
            return quant_ck_fail(err, QUANT_CK_ERR_ARG,
                                 "%s: tensor '%s' got %" PRIu64 " of its %" PRIu64 " bytes",
                                 w->path, w->t[i].name, got, w->t[i].nbytes);
    }
    return QUANT_CK_OK;
}

quant_ck_status quant_gguf_writer_commit(quant_gguf_writer *w, quant_ck_error *err)
{
    if (!w || !w->begun || w->committed || w->fd < 0)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "quant_gguf_writer_commit: no open writer");
    quant_ck_status st = check_counts(w, err);
    if (st == QUANT_CK_OK) {
        ck_hasher_complete(w->hasher); /* the rest is hashed while the file is synced */
        if (fsync(w->fd) != 0) st = io_fail(w, err, "cannot fsync");
    }
    int read_error = 0;
    bool hashed = w->hasher && ck_hasher_finish(w->hasher, w->sha256, &read_error);
    if (w->hasher && !hashed && st == QUANT_CK_OK)
        st = quant_ck_fail(err, QUANT_CK_ERR_IO, "%s: cannot read it back for its SHA-256: %s",
                           w->path, strerror(read_error));
    w->hasher = NULL;
    if (st == QUANT_CK_OK) st = ck_publish(w->tmp, w->path, CK_TARGET_FILE, err);
    if (st != QUANT_CK_OK) unlink(w->tmp);
    close(w->fd); /* after the rename: the temporary stays locked while it has its name */
    w->fd = -1;
    free(w->tmp);
    w->tmp = NULL;
    if (st != QUANT_CK_OK) return st;
    w->committed = true;
    w->hashed = hashed;
    ck_fsync_parent(w->path);
    return QUANT_CK_OK;
}

bool quant_gguf_writer_sha256(const quant_gguf_writer *w, char hex[65], uint64_t *bytes)
{
    if (!w || !w->hashed) return false;
    memcpy(hex, w->sha256, sizeof w->sha256);
    if (bytes) *bytes = w->size;
    return true;
}

quant_ck_status quant_gguf_writer_new(const char *path, quant_gguf_writer **out,
                                      quant_ck_error *err)
{
    if (out) *out = NULL;
    if (!path || !out)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "quant_gguf_writer_new: NULL argument");
    quant_gguf_writer *w = calloc(1, sizeof *w);
    if (!w || !(w->path = strdup(path))) {
        free(w);
        return no_memory(err);
    }
    w->fd = -1;
    w->alignment = QUANT_GGUF_ALIGNMENT;
    atomic_init(&w->mode, MODE_NONE);
    *out = w;
    return QUANT_CK_OK;
}

void quant_gguf_writer_free(quant_gguf_writer *w)
{
    if (!w) return;
    ck_hasher_free(w->hasher);  /* before close: it reads the file */
    if (w->tmp) unlink(w->tmp); /* before close: never unlocked under its name */
    if (w->fd >= 0) close(w->fd);
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].raw);
    }
    for (size_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->kv);
    free(w->t);
    free(w->tmp);
    free(w->path);
    free(w);
}
