/* st_write.c -- the safetensors writer: lays a file out as the reference writer does (dtype
 * alignment descending, then name; `__metadata__` first; header padded with spaces to a multiple
 * of 8), writes the header to a sized temporary file beside the target, takes tensor data by
 * pwrite from any thread and makes the file appear by fsync + rename + fsync of the directory.
 * On request the file's SHA-256 is taken as it is written (hash.c), finished during the fsync.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ck_internal.h"

typedef struct st_out {
    char *name;
    quant_st_dtype dtype;
    int rank;
    int64_t shape[QUANT_MAX_RANK];
    uint64_t nbytes;
    uint64_t begin; /* relative to the byte buffer */
} st_out;

struct quant_st_writer {
    char *path;
    char *tmp; /* the temporary file while it exists, else NULL */
    int fd;
    bool committed;
    size_t n;
    st_out *t;           /* input order */
    st_out **layout;     /* data order */
    st_out **by_name;    /* strcmp order, for quant_st_writer_index */
    uint64_t data_start; /* 8 + header length */
    uint64_t total;      /* data bytes */
    ck_hasher *hasher;   /* quant_st_writer_hash() */
    bool hashed;         /* committed with sha256 */
    char sha256[65];
};

static quant_ck_status no_memory(quant_ck_error *err)
{
    return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
}

/* ---- the tensors and their layout ------------------------------------------------------------ */

/* Validates one input tensor and sets its byte size (checked arithmetic, whole bytes). */
static quant_ck_status size_tensor(const char *path, const quant_st_out_tensor *in, st_out *o,
                                   quant_ck_error *err)
{
    if (!in->name)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "%s: a tensor has no name (NULL)", path);
    const char *name = in->name;
    if (!quant_st_dtype_name(in->dtype))
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "%s: tensor '%s': unknown dtype %d", path, name,
                             (int)in->dtype);
    if (in->rank < 0 || in->rank > QUANT_MAX_RANK)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "%s: tensor '%s': rank %d is outside 0..%d",
                             path, name, in->rank, QUANT_MAX_RANK);
    uint64_t bits = (uint64_t)quant_st_dtype_bits(in->dtype);
    for (int i = 0; i < in->rank; i++) {
        if (in->shape[i] < 0 || __builtin_mul_overflow(bits, (uint64_t)in->shape[i], &bits))
            return quant_ck_fail(err, QUANT_CK_ERR_ARG,
                                 "%s: tensor '%s': shape[%d] = %" PRId64 " is negative or "
                                 "overflows 64-bit sizes",
                                 path, name, i, in->shape[i]);
    }
    if (bits % 8 != 0)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG,
                             "%s: tensor '%s': %" PRIu64 " bits of %s is not a whole number of "
                             "bytes",
                             path, name, bits, quant_st_dtype_name(in->dtype));
    o->dtype = in->dtype;
    o->rank = in->rank;
    memcpy(o->shape, in->shape, sizeof o->shape);
    o->nbytes = bits / 8;
    o->name = strdup(in->name);
    return o->name ? QUANT_CK_OK : no_memory(err);
}

static int name_cmp(const void *a, const void *b)
{
    const st_out *const *x = a, *const *y = b;
    return strcmp((*x)->name, (*y)->name);
}

/* The position of a dtype in the reference crate's `enum Dtype` (HEAD), whose derived order its
 * writer sorts by: increasing alignment, and within one alignment a fixed order (F32 before I32,
 * BF16 before F16 once reversed). */
static int reference_rank(quant_st_dtype d)
{
    static const quant_st_dtype order[] = {
        QUANT_ST_BOOL,    QUANT_ST_F4,          QUANT_ST_F6_E2M3,     QUANT_ST_F6_E3M2,
        QUANT_ST_U8,      QUANT_ST_I8,          QUANT_ST_F8_E5M2,     QUANT_ST_F8_E4M3,
        QUANT_ST_F8_E8M0, QUANT_ST_F8_E4M3FNUZ, QUANT_ST_F8_E5M2FNUZ, QUANT_ST_I16,
        QUANT_ST_U16,     QUANT_ST_F16,         QUANT_ST_BF16,        QUANT_ST_I32,
        QUANT_ST_U32,     QUANT_ST_F32,         QUANT_ST_C64,         QUANT_ST_F64,
        QUANT_ST_I64,     QUANT_ST_U64};
    for (int i = 0; i < (int)(sizeof order / sizeof order[0]); i++)
        if (order[i] == d) return i;
    return -1;
}

/* The reference writer's order (tensor.rs `prepare`): dtype descending, then name. */
static int layout_cmp(const void *a, const void *b)
{
    const st_out *const *x = a, *const *y = b;
    int rx = reference_rank((*x)->dtype), ry = reference_rank((*y)->dtype);
    if (rx != ry) return rx > ry ? -1 : 1;
    return strcmp((*x)->name, (*y)->name);
}

static quant_ck_status copy_tensors(quant_st_writer *w, const quant_st_out_tensor *in,
                                    quant_ck_error *err)
{
    size_t cap = w->n ? w->n : 1;
    w->t = calloc(cap, sizeof *w->t);
    w->layout = malloc(cap * sizeof *w->layout);
    w->by_name = malloc(cap * sizeof *w->by_name);
    if (!w->t || !w->layout || !w->by_name) return no_memory(err);
    for (size_t i = 0; i < w->n; i++) {
        quant_ck_status st = size_tensor(w->path, &in[i], &w->t[i], err);
        if (st != QUANT_CK_OK) return st;
        w->layout[i] = w->by_name[i] = &w->t[i];
    }
    return QUANT_CK_OK;
}

/* Names unique and not `__metadata__`; offsets in layout order. */
static quant_ck_status lay_out(quant_st_writer *w, quant_ck_error *err)
{
    if (w->n > 1) qsort(w->by_name, w->n, sizeof *w->by_name, name_cmp);
    for (size_t i = 0; i < w->n; i++) {
        const char *name = w->by_name[i]->name;
        bool twice = i > 0 && strcmp(w->by_name[i - 1]->name, name) == 0;
        if (twice || strcmp(name, "__metadata__") == 0)
            return quant_ck_fail(err, QUANT_CK_ERR_ARG, "%s: tensor name '%s' is %s", w->path, name,
                                 twice ? "used twice" : "reserved");
    }
    if (w->n > 1) qsort(w->layout, w->n, sizeof *w->layout, layout_cmp);
    uint64_t pos = 0;
    for (size_t i = 0; i < w->n; i++) {
        w->layout[i]->begin = pos;
        if (__builtin_add_overflow(pos, w->layout[i]->nbytes, &pos))
            return quant_ck_fail(err, QUANT_CK_ERR_ARG, "%s: tensors total more than 2^64 bytes",
                                 w->path);
    }
    w->total = pos;
    return QUANT_CK_OK;
}

/* ---- the header ------------------------------------------------------------------------------ */

/* {"dtype": ..., "shape": [...], "data_offsets": [begin, end]}, in that order; NULL on OOM. */
static json_t *tensor_entry(const st_out *t)
{
    json_t *shape = json_array();
    for (int i = 0; shape && i < t->rank; i++) {
        if (json_array_append_new(shape, json_integer(t->shape[i])) != 0) {
            json_decref(shape);
            shape = NULL;
        }
    }
    if (!shape) return NULL;
    return json_pack("{s:s, s:o, s:[I, I]}", "dtype", quant_st_dtype_name(t->dtype), "shape", shape,
                     "data_offsets", (json_int_t)t->begin, (json_int_t)(t->begin + t->nbytes));
}

static quant_ck_status add_metadata(const quant_st_writer *w, json_t *root, const char *const *keys,
                                    const char *const *values, size_t n_meta, quant_ck_error *err)
{
    json_t *meta = json_object();
    if (!meta || json_object_set_new(root, "__metadata__", meta) != 0) return no_memory(err);
    for (size_t i = 0; i < n_meta; i++) {
        if (!keys || !values || !keys[i] || !values[i] || json_object_get(meta, keys[i]))
            return quant_ck_fail(err, QUANT_CK_ERR_ARG,
                                 "%s: metadata pair %zu is NULL or repeats key '%s'", w->path, i,
                                 keys && keys[i] ? keys[i] : "(null)");
        if (json_object_set_new(meta, keys[i], json_string(values[i])) != 0)
            return quant_ck_fail(err, QUANT_CK_ERR_ARG,
                                 "%s: metadata '%s' is not valid UTF-8 (or out of memory)", w->path,
                                 keys[i]);
    }
    return QUANT_CK_OK;
}

/* The header JSON: `__metadata__` first, then the tensors in layout order; compact. */
static quant_ck_status header_json(const quant_st_writer *w, const char *const *keys,
                                   const char *const *values, size_t n_meta, char **text,
                                   quant_ck_error *err)
{
    json_t *root = json_object();
    if (!root) return no_memory(err);
    quant_ck_status st = n_meta ? add_metadata(w, root, keys, values, n_meta, err) : QUANT_CK_OK;
    for (size_t i = 0; st == QUANT_CK_OK && i < w->n; i++) {
        json_t *e = tensor_entry(w->layout[i]);
        if (!e || json_object_set_new(root, w->layout[i]->name, e) != 0)
            st = quant_ck_fail(err, QUANT_CK_ERR_ARG,
                               "%s: tensor name '%s' is not valid UTF-8 (or out of memory)",
                               w->path, w->layout[i]->name);
    }
    if (st == QUANT_CK_OK && !(*text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER)))
        st = no_memory(err);
    json_decref(root);
    return st;
}

/* 8-byte little-endian length, the JSON, spaces up to a multiple of 8. */
static quant_ck_status header_bytes(quant_st_writer *w, const char *json, unsigned char **out,
                                    size_t *len, quant_ck_error *err)
{
    size_t n = strlen(json), padded = n + (8 - n % 8) % 8;
    if (padded > QUANT_ST_MAX_HEADER)
        return quant_ck_fail(err, QUANT_CK_ERR_UNSUPPORTED,
                             "%s: header of %zu bytes exceeds the %u-byte limit", w->path, padded,
                             QUANT_ST_MAX_HEADER);
    w->data_start = 8 + (uint64_t)padded;
    if (w->total > (uint64_t)INT64_MAX - w->data_start)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "%s: file would exceed 2^63 bytes", w->path);
    unsigned char *b = malloc(8 + padded);
    if (!b) return no_memory(err);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    memcpy(b + 8, json, n);
    memset(b + 8 + n, ' ', padded - n);
    *out = b;
    *len = 8 + padded;
    return QUANT_CK_OK;
}

/* ---- the file -------------------------------------------------------------------------------- */

static quant_ck_status io_fail(const quant_st_writer *w, quant_ck_error *err, const char *what)
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
        if (k < 0) return false;
        if (k == 0) {
            errno = EIO;
            return false;
        }
        p += k;
        n -= (size_t)k;
        off += (uint64_t)k;
    }
    return true;
}

/* Creates the locked temporary "<path>.quant-tmp-PID-XXXXXX" (the target checked first: a
 * link or anything but a regular file is refused), writes the header and sizes the file. */
static quant_ck_status create_file(quant_st_writer *w, const unsigned char *hdr, size_t len,
                                   quant_ck_error *err)
{
    quant_ck_status st = ck_check_target(w->path, CK_TARGET_FILE, err);
    if (st == QUANT_CK_OK) st = ck_temp_file(w->path, &w->tmp, &w->fd, err);
    if (st != QUANT_CK_OK) return st;
    if (fchmod(w->fd, 0644) != 0) return io_fail(w, err, "cannot set the temporary file's mode");
    if (!pwrite_full(w->fd, hdr, len, 0)) return io_fail(w, err, "cannot write the header");
    if (ftruncate(w->fd, (off_t)(w->data_start + w->total)) != 0)
        return io_fail(w, err, "cannot size the temporary file");
    return QUANT_CK_OK;
}

/* ---- the public calls ------------------------------------------------------------------------ */

static quant_ck_status prepare(quant_st_writer *w, const quant_st_out_tensor *tensors,
                               const char *const *meta_keys, const char *const *meta_values,
                               size_t n_meta, quant_ck_error *err)
{
    char *json = NULL;
    unsigned char *hdr = NULL;
    size_t len = 0;
    quant_ck_status st = copy_tensors(w, tensors, err);
    if (st == QUANT_CK_OK) st = lay_out(w, err);
    if (st == QUANT_CK_OK) st = header_json(w, meta_keys, meta_values, n_meta, &json, err);
    if (st == QUANT_CK_OK) st = header_bytes(w, json, &hdr, &len, err);
    if (st == QUANT_CK_OK) st = create_file(w, hdr, len, err);
    free(json);
    free(hdr);
    return st;
}

quant_ck_status quant_st_writer_new(const char *path, const quant_st_out_tensor *tensors,
                                    size_t n_tensors, const char *const *meta_keys,
                                    const char *const *meta_values, size_t n_meta,
                                    quant_st_writer **out, quant_ck_error *err)
{
    if (out) *out = NULL;
    if (!path || !out || (!tensors && n_tensors > 0))
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "quant_st_writer_new: NULL argument");
    quant_st_writer *w = calloc(1, sizeof *w);
    if (!w || !(w->path = strdup(path))) {
        free(w);
        return no_memory(err);
    }
    w->fd = -1;
    w->n = n_tensors;
    quant_ck_status st = prepare(w, tensors, meta_keys, meta_values, n_meta, err);
    if (st != QUANT_CK_OK) {
        quant_st_writer_free(w);
        return st;
    }
    *out = w;
    return QUANT_CK_OK;
}

static int index_cmp(const void *key, const void *elem)
{
    const st_out *const *t = elem;
    return strcmp(key, (*t)->name);
}

long quant_st_writer_index(const quant_st_writer *w, const char *name)
{
    if (!w || !name || w->n == 0) return -1;
    st_out *const *hit = bsearch(name, w->by_name, w->n, sizeof *w->by_name, index_cmp);
    return hit ? (long)(*hit - w->t) : -1;
}

uint64_t quant_st_writer_nbytes(const quant_st_writer *w, size_t index)
{
    return w && index < w->n ? w->t[index].nbytes : 0;
}

uint64_t quant_st_writer_total(const quant_st_writer *w)
{
    return w ? w->total : 0;
}

quant_ck_status quant_st_writer_pwrite(quant_st_writer *w, size_t index, uint64_t offset,
                                       const void *buf, size_t n, quant_ck_error *err)
{
    if (!w || (!buf && n > 0) || index >= w->n || w->fd < 0)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG,
                             "quant_st_writer_pwrite: NULL argument, bad index or closed writer");
    const st_out *t = &w->t[index];
    if (offset > t->nbytes || (uint64_t)n > t->nbytes - offset)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG,
                             "%s: tensor '%s': cannot write %zu bytes at offset %" PRIu64
                             " of its %" PRIu64 " bytes",
                             w->path, t->name, n, offset, t->nbytes);
    if (!pwrite_full(w->fd, buf, n, w->data_start + t->begin + offset))
        return quant_ck_fail(err, QUANT_CK_ERR_IO, "%s: tensor '%s': write failed: %s", w->path,
                             t->name, strerror(errno));
    ck_hasher_wrote(w->hasher, w->data_start + t->begin + offset, n);
    return QUANT_CK_OK;
}

quant_ck_status quant_st_writer_hash(quant_st_writer *w, quant_ck_error *err)
{
    if (!w || w->fd < 0 || w->hasher)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG,
                             "quant_st_writer_hash: no open writer, or already hashing");
    if (!(w->hasher = ck_hasher_start(w->fd, w->data_start + w->total)))
        return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "%s: cannot start hashing it", w->path);
    ck_hasher_wrote(w->hasher, 0, w->data_start); /* the header, written by quant_st_writer_new */
    return QUANT_CK_OK;
}

bool quant_st_writer_sha256(const quant_st_writer *w, char hex[65], uint64_t *bytes)
{
    if (!w || !w->hashed) return false;
    memcpy(hex, w->sha256, sizeof w->sha256);
    if (bytes) *bytes = w->data_start + w->total;
    return true;
}

/* "dir" of "dir/name" ("." without a slash, "/" for "/name"); malloc'd. */
static char *parent_dir(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash) return strdup(".");
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, path, n);
        d[n] = '\0';
    }
    return d;
}

static quant_ck_status fsync_dir(const quant_st_writer *w, quant_ck_error *err)
{
    char *dir = parent_dir(w->path);
    if (!dir) return no_memory(err);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    bool ok = fd >= 0 && (fsync(fd) == 0 || errno == EINVAL);
    if (fd >= 0) close(fd);
    free(dir);
    return ok ? QUANT_CK_OK : io_fail(w, err, "cannot fsync its directory");
}

quant_ck_status quant_st_writer_commit(quant_st_writer *w, quant_ck_error *err)
{
    if (!w || w->committed || w->fd < 0)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "quant_st_writer_commit: no open writer");
    quant_ck_status st = QUANT_CK_OK;
    ck_hasher_complete(w->hasher); /* the rest is hashed while the file is synced */
    if (fsync(w->fd) != 0) st = io_fail(w, err, "cannot fsync");
    int read_error = 0;
    bool hashed = w->hasher && ck_hasher_finish(w->hasher, w->sha256, &read_error);
    if (w->hasher && !hashed && st == QUANT_CK_OK)
        st = quant_ck_fail(err, QUANT_CK_ERR_IO, "%s: cannot read it back for its SHA-256: %s",
                           w->path, strerror(read_error));
    w->hasher = NULL;
    if (st == QUANT_CK_OK) st = ck_publish(w->tmp, w->path, CK_TARGET_FILE, err);
    if (st != QUANT_CK_OK) unlink(w->tmp);
    close(w->fd); /* after the rename, so the temporary is locked while it has its name; after
                     fsync, close has nothing left to report */
    w->fd = -1;
    if (st == QUANT_CK_OK) {
        w->committed = true;
        w->hashed = hashed;
        st = fsync_dir(w, err);
    }
    free(w->tmp);
    w->tmp = NULL;
    return st;
}

void quant_st_writer_free(quant_st_writer *w)
{
    if (!w) return;
    ck_hasher_free(w->hasher);  /* before close: it reads the file */
    if (w->tmp) unlink(w->tmp); /* before close: never unlocked under its name */
    if (w->fd >= 0) close(w->fd);
    for (size_t i = 0; w->t && i < w->n; i++) free(w->t[i].name);
    free(w->t);
    free(w->layout);
    free(w->by_name);
    free(w->tmp);
    free(w->path);
    free(w);
}
