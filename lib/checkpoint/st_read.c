/* st_read.c -- the safetensors reader: opens a file (or takes an open descriptor, or a buffer
 * already in memory), validates its header as the reference parser does (length, UTF-8, JSON,
 * dtypes, shapes, sizes, contiguous offsets, metadata), keeps the tensors in data order with a
 * name index, and reads tensor bytes on demand with pread (or memcpy from the buffer). A file
 * still arriving (ck_st_open_growing) is read only as far as the run's wait function confirms,
 * and its size checked against its header once it is whole.
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
#include "quant_st.h"

/* What quant_st_open allocates: the public struct first, then the name index. */
typedef struct st_file {
    quant_st_file pub;
    const quant_st_tensor **by_name; /* n_tensors pointers, sorted by strcmp of the name */
    const unsigned char *mem; /* quant_st_open_buffer: the caller's file_size bytes, else NULL */
    bool header_only;         /* quant_st_open_header_fd: the data may be cut short or absent */
    bool growing;             /* ck_st_open_growing: read only what `wait` confirms; file_size is
                                 what the header implies until ck_st_check_whole */
    ck_wait wait;
} st_file;

#define SHAPE_TEXT_MAX (QUANT_MAX_RANK * 22 + 4)

static quant_ck_status bad(quant_ck_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* A format error; the file name is prefixed by quant_st_open. */
static quant_ck_status bad(quant_ck_error *err, const char *fmt, ...)
{
    if (err) {
        err->status = QUANT_CK_ERR_FORMAT;
        va_list ap;
        va_start(ap, fmt);
        ck_vformat(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return QUANT_CK_ERR_FORMAT;
}

static quant_ck_status no_memory(quant_ck_error *err)
{
    return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
}

/* "[2, 3]" for a shape. */
static const char *shape_text(char *buf, size_t cap, int rank, const int64_t *shape)
{
    size_t len = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < rank && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (len < cap) snprintf(buf + len, cap - len, "]");
    return buf;
}

static const char *json_kind(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
        return "an integer";
    case JSON_REAL:
        return "a real number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    case JSON_NULL:
        return "null";
    }
    return "a JSON value";
}

/* Reads exactly n bytes at off: 0, -1 (errno set) or 1 (end of file first). */
static int pread_full(int fd, void *buf, size_t n, uint64_t off)
{
    char *p = buf;
    while (n > 0) {
        size_t chunk = n < ((size_t)1 << 30) ? n : ((size_t)1 << 30);
        ssize_t k = pread(fd, p, chunk, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return -1;
        if (k == 0) return 1;
        p += k;
        n -= (size_t)k;
        off += (uint64_t)k;
    }
    return 0;
}

/* Reads exactly n bytes at offset off of the file or the buffer: 0, -1 (errno set) or 1 (the
 * end came first). */
static int read_at(const st_file *sf, void *buf, size_t n, uint64_t off)
{
    if (!sf->mem) return pread_full(sf->pub.fd, buf, n, off);
    if (off > sf->pub.file_size || (uint64_t)n > sf->pub.file_size - off) return 1;
    memcpy(buf, sf->mem + off, n);
    return 0;
}

/* ---- the length prefix and the header text --------------------------------------------------- */

/* The descriptor's size (not for a file still arriving); it must be a regular file (O_NONBLOCK,
 * if it was opened with it, is cleared). */
static quant_ck_status stat_file(st_file *sf, quant_ck_error *err)
{
    quant_st_file *f = &sf->pub;
    struct stat sb;
    if (fstat(f->fd, &sb) != 0)
        return quant_ck_fail(err, QUANT_CK_ERR_IO, "cannot stat: %s", strerror(errno));
    if (!S_ISREG(sb.st_mode)) return quant_ck_fail(err, QUANT_CK_ERR_IO, "not a regular file");
    int fl = fcntl(f->fd, F_GETFL);
    if (fl < 0 || ((fl & O_NONBLOCK) && fcntl(f->fd, F_SETFL, fl & ~O_NONBLOCK) != 0))
        return quant_ck_fail(err, QUANT_CK_ERR_IO, "fcntl: %s", strerror(errno));
    if (!sf->growing) f->file_size = (uint64_t)sb.st_size;
    return QUANT_CK_OK;
}

/* A file still arriving: waits for bytes [0, end) (the header's: no tensor named). */
static quant_ck_status wait_header(const st_file *sf, uint64_t end, quant_ck_error *err)
{
    return ck_wait_input(&sf->wait, ck_basename(sf->pub.path), end, NULL, err);
}

/* Whether the byte after the length prefix opens a JSON object, as every safetensors header does
 * (whitespace first is tolerated, as the reference parser's serde_json does). */
static bool header_opens(const st_file *sf)
{
    unsigned char c = ' ';
    for (uint64_t off = 8; off < sf->pub.file_size && off < 8 + 64 && c != '{'; off++)
        if (read_at(sf, &c, 1, off) != 0 || (c != ' ' && c != '\t' && c != '\n' && c != '\r'))
            break;
    return c == '{';
}

/* A length prefix that cannot be one: a file of some other kind (a model card, a PyTorch zip),
 * unless a '{' follows it, when it is a safetensors file cut short. */
static quant_ck_status bad_length(const st_file *sf, uint64_t n, quant_ck_error *err)
{
    const quant_st_file *f = &sf->pub;
    if (n <= QUANT_ST_MAX_HEADER && header_opens(sf))
        return bad(err,
                   "header length %" PRIu64 " runs past the end of the %" PRIu64 "-byte file "
                   "(truncated?)",
                   n, f->file_size);
    if (n > QUANT_ST_MAX_HEADER)
        return bad(err,
                   "not a safetensors file (the first 8 bytes are not a header length: they read "
                   "as %" PRIu64 ", more than the %u-byte limit)",
                   n, QUANT_ST_MAX_HEADER);
    return bad(err,
               "not a safetensors file (the first 8 bytes are not a header length: they read as "
               "%" PRIu64 ", past the end of the %" PRIu64 "-byte file)",
               n, f->file_size);
}

/* The length prefix of a file still arriving: its 8 bytes waited for, then the header's. */
static quant_ck_status read_length_growing(st_file *sf, quant_ck_error *err)
{
    quant_st_file *f = &sf->pub;
    quant_ck_status st = wait_header(sf, 8, err);
    if (st != QUANT_CK_OK) return st;
    unsigned char b[8];
    int r = read_at(sf, b, 8, 0);
    if (r != 0)
        return quant_ck_fail(err, QUANT_CK_ERR_IO, "cannot read: %s",
                             r < 0 ? strerror(errno) : "file shorter than its confirmed 8 bytes");
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | b[i];
    if (n > QUANT_ST_MAX_HEADER)
        return bad(err,
                   "not a safetensors file (the first 8 bytes are not a header length: they read "
                   "as %" PRIu64 ", more than the %u-byte limit)",
                   n, QUANT_ST_MAX_HEADER);
    st = wait_header(sf, 8 + n, err);
    if (st != QUANT_CK_OK) return st;
    f->header_len = n;
    f->data_start = 8 + n;
    return QUANT_CK_OK;
}

static quant_ck_status read_length(st_file *sf, quant_ck_error *err)
{
    quant_st_file *f = &sf->pub;
    if (sf->growing) return read_length_growing(sf, err);
    if (f->file_size == 0) return bad(err, "empty file (0 bytes), not a safetensors file");
    if (f->file_size < 8)
        return bad(err, "file is %" PRIu64 " bytes, shorter than the 8-byte header length",
                   f->file_size);
    unsigned char b[8];
    int r = read_at(sf, b, 8, 0);
    if (r != 0)
        return quant_ck_fail(err, QUANT_CK_ERR_IO, "cannot read: %s",
                             r < 0 ? strerror(errno) : "file shrank while reading");
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | b[i];
    if (n > QUANT_ST_MAX_HEADER || n > f->file_size - 8) return bad_length(sf, n, err);
    f->header_len = n;
    f->data_start = 8 + n;
    return QUANT_CK_OK;
}

/* Strict UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF); the offset of the first
 * bad byte, or n when all is well. */
static size_t utf8_check(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t len = c < 0x80                 ? 1
                     : c >= 0xC2 && c <= 0xDF ? 2
                     : (c & 0xF0) == 0xE0     ? 3
                     : c >= 0xF0 && c <= 0xF4 ? 4
                                              : 0;
        if (len == 0 || len > n - i) return i;
        unsigned lo = 0x80, hi = 0xBF; /* range of the second byte */
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
        if (len > 1 && (s[i + 1] < lo || s[i + 1] > hi)) return i;
        for (size_t k = 2; k < len; k++)
            if ((s[i + k] & 0xC0) != 0x80) return i;
        i += len;
    }
    return n;
}

/* The header's bytes: in place in the caller's buffer, or read from the file into *owned. */
static quant_ck_status header_bytes(const st_file *sf, const char **text, char **owned,
                                    quant_ck_error *err)
{
    *owned = NULL;
    if (sf->mem) {
        *text = (const char *)sf->mem + 8;
        return QUANT_CK_OK;
    }
    uint64_t n = sf->pub.header_len;
    *owned = malloc(n ? n : 1); /* <= file size and the limit */
    if (!*owned) return no_memory(err);
    int r = read_at(sf, *owned, n, 8);
    if (r != 0)
        return quant_ck_fail(err, QUANT_CK_ERR_IO, "cannot read the header: %s",
                             r < 0         ? strerror(errno)
                             : sf->growing ? "file shorter than its confirmed header"
                                           : "file shrank while reading");
    *text = *owned;
    return QUANT_CK_OK;
}

/* Leading JSON whitespace, then '{': what every safetensors header starts with. */
static bool opens_object(const char *text, size_t n)
{
    size_t i = 0;
    while (i < n && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r')) i++;
    return i < n && text[i] == '{';
}

/* Parses the header text (n bytes) into *root, a JSON object. A header that is neither UTF-8
 * nor JSON and does not even open an object is some other kind of file. */
static quant_ck_status parse_header(const char *text, size_t n, json_t **root, quant_ck_error *err)
{
    bool brace = n == 0 || opens_object(text, n);
    size_t bad_at = utf8_check((const unsigned char *)text, n);
    json_error_t je;
    *root = bad_at == n ? json_loadb(text, n, JSON_REJECT_DUPLICATES, &je) : NULL;
    if (!*root && !brace)
        return bad(err,
                   "not a safetensors file (the %zu bytes after the 8-byte header length are "
                   "not a JSON header: they do not start with '{')",
                   n);
    if (bad_at != n)
        return bad(err, "header is not valid UTF-8 (bad byte at header offset %zu)", bad_at);
    if (!*root) {
        char why[256];
        return bad(err, "header is not valid JSON: %s (at header offset %d)",
                   quant_json_error_text(text, n, je.position, je.text, why, sizeof why),
                   je.position);
    }
    if (!json_is_object(*root))
        return bad(err, "header is %s, not a JSON object", json_kind(*root));
    return QUANT_CK_OK;
}

static quant_ck_status load_header(const st_file *sf, json_t **root, quant_ck_error *err)
{
    const char *text = NULL;
    char *owned;
    quant_ck_status st = header_bytes(sf, &text, &owned, err);
    if (st == QUANT_CK_OK) st = parse_header(text, (size_t)sf->pub.header_len, root, err);
    free(owned);
    return st;
}

/* ---- one tensor entry ------------------------------------------------------------------------ */

static bool as_uint(const json_t *v, uint64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0) return false;
    *out = (uint64_t)json_integer_value(v);
    return true;
}

static quant_ck_status check_keys(const char *name, json_t *entry, quant_ck_error *err)
{
    if (!json_is_object(entry))
        return bad(err, "tensor '%s': entry is %s, not an object", name, json_kind(entry));
    const char *key;
    json_t *v;
    json_object_foreach(entry, key, v)
    {
        if (strcmp(key, "dtype") != 0 && strcmp(key, "shape") != 0 &&
            strcmp(key, "data_offsets") != 0)
            return bad(err, "tensor '%s': unknown key \"%s\"", name, key);
    }
    static const char *const need[] = {"dtype", "shape", "data_offsets"};
    for (size_t i = 0; i < 3; i++)
        if (!json_object_get(entry, need[i]))
            return bad(err, "tensor '%s': missing \"%s\"", name, need[i]);
    return QUANT_CK_OK;
}

static quant_ck_status parse_dtype(quant_st_tensor *t, const json_t *v, quant_ck_error *err)
{
    if (!json_is_string(v))
        return bad(err, "tensor '%s': dtype is %s, not a string", t->name, json_kind(v));
    if (!quant_st_dtype_parse(json_string_value(v), &t->dtype))
        return bad(err, "tensor '%s': unknown dtype \"%s\"", t->name, json_string_value(v));
    return QUANT_CK_OK;
}

static quant_ck_status parse_shape(quant_st_tensor *t, const json_t *v, quant_ck_error *err)
{
    if (!json_is_array(v))
        return bad(err, "tensor '%s': shape is %s, not an array", t->name, json_kind(v));
    if (json_array_size(v) > QUANT_MAX_RANK)
        return bad(err, "tensor '%s': shape has rank %zu, more than the %d supported", t->name,
                   json_array_size(v), QUANT_MAX_RANK);
    t->rank = (int)json_array_size(v);
    for (int i = 0; i < t->rank; i++) {
        const json_t *d = json_array_get(v, (size_t)i);
        uint64_t dim;
        if (!as_uint(d, &dim)) {
            if (json_is_integer(d))
                return bad(err, "tensor '%s': shape[%d] is negative (%" JSON_INTEGER_FORMAT ")",
                           t->name, i, json_integer_value(d));
            return bad(err, "tensor '%s': shape[%d] is %s, not an integer", t->name, i,
                       json_kind(d));
        }
        t->shape[i] = (int64_t)dim;
    }
    return QUANT_CK_OK;
}

static quant_ck_status parse_offsets(quant_st_tensor *t, const json_t *v, quant_ck_error *err)
{
    if (!json_is_array(v))
        return bad(err, "tensor '%s': data_offsets must be an array [begin, end], not %s", t->name,
                   json_kind(v));
    if (json_array_size(v) != 2)
        return bad(err, "tensor '%s': data_offsets must be an array [begin, end], not %zu entries",
                   t->name, json_array_size(v));
    if (!as_uint(json_array_get(v, 0), &t->begin) || !as_uint(json_array_get(v, 1), &t->end))
        return bad(err, "tensor '%s': data_offsets must hold two non-negative integers", t->name);
    if (t->end < t->begin)
        return bad(err, "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] end before begin",
                   t->name, t->begin, t->end);
    return QUANT_CK_OK;
}

/* Shape product x bits, checked for overflow, must be whole bytes and equal end - begin. */
static quant_ck_status check_size(const quant_st_tensor *t, quant_ck_error *err)
{
    char sh[SHAPE_TEXT_MAX];
    const char *dt = quant_st_dtype_name(t->dtype);
    uint64_t bits = (uint64_t)quant_st_dtype_bits(t->dtype);
    for (int i = 0; i < t->rank; i++)
        if (__builtin_mul_overflow(bits, (uint64_t)t->shape[i], &bits))
            return bad(err, "tensor '%s': shape %s of %s overflows 64-bit sizes", t->name,
                       shape_text(sh, sizeof sh, t->rank, t->shape), dt);
    if (bits % 8 != 0)
        return bad(err,
                   "tensor '%s': shape %s of %s is %" PRIu64 " bits, not a whole number of "
                   "bytes (misaligned)",
                   t->name, shape_text(sh, sizeof sh, t->rank, t->shape), dt, bits);
    if (t->end - t->begin != bits / 8)
        return bad(err,
                   "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] hold %" PRIu64
                   " bytes but shape %s of %s needs %" PRIu64,
                   t->name, t->begin, t->end, t->end - t->begin,
                   shape_text(sh, sizeof sh, t->rank, t->shape), dt, bits / 8);
    return QUANT_CK_OK;
}

static quant_ck_status parse_tensor(quant_st_tensor *t, const char *name, json_t *entry,
                                    quant_ck_error *err)
{
    t->name = strdup(name);
    if (!t->name) return no_memory(err);
    quant_ck_status st = check_keys(name, entry, err);
    if (st == QUANT_CK_OK) st = parse_dtype(t, json_object_get(entry, "dtype"), err);
    if (st == QUANT_CK_OK) st = parse_shape(t, json_object_get(entry, "shape"), err);
    if (st == QUANT_CK_OK) st = parse_offsets(t, json_object_get(entry, "data_offsets"), err);
    if (st == QUANT_CK_OK) st = check_size(t, err);
    return st;
}

/* ---- __metadata__ and the whole header ------------------------------------------------------- */

static quant_ck_status parse_metadata(quant_st_file *f, json_t *meta, quant_ck_error *err)
{
    if (json_is_null(meta)) return QUANT_CK_OK; /* serde's Option: null means none */
    if (!json_is_object(meta))
        return bad(err, "__metadata__ is %s, not an object of strings", json_kind(meta));
    size_t n = json_object_size(meta);
    f->meta_keys = calloc(n ? n : 1, sizeof *f->meta_keys);
    f->meta_values = calloc(n ? n : 1, sizeof *f->meta_values);
    if (!f->meta_keys || !f->meta_values) return no_memory(err);
    const char *key;
    json_t *v;
    json_object_foreach(meta, key, v)
    {
        if (!json_is_string(v))
            return bad(err, "__metadata__: value of \"%s\" is %s, not a string", key, json_kind(v));
        size_t i = f->n_meta++;
        f->meta_keys[i] = strdup(key);
        f->meta_values[i] = strdup(json_string_value(v));
        if (!f->meta_keys[i] || !f->meta_values[i]) return no_memory(err);
    }
    return QUANT_CK_OK;
}

static quant_ck_status parse_entries(quant_st_file *f, json_t *root, quant_ck_error *err)
{
    json_t *meta = json_object_get(root, "__metadata__");
    size_t n = json_object_size(root) - (meta ? 1 : 0);
    f->tensors = calloc(n ? n : 1, sizeof *f->tensors);
    if (!f->tensors) return no_memory(err);
    quant_ck_status st = meta ? parse_metadata(f, meta, err) : QUANT_CK_OK;
    const char *name;
    json_t *entry;
    json_object_foreach(root, name, entry)
    {
        if (st != QUANT_CK_OK) break;
        if (entry == meta) continue;
        st = parse_tensor(&f->tensors[f->n_tensors++], name, entry, err);
    }
    return st;
}

/* ---- data order and the name index ----------------------------------------------------------- */

static int by_offsets(const void *a, const void *b)
{
    const quant_st_tensor *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* The tensors, ending at `pos`, must cover the byte buffer (`buffer` bytes after the header)
 * exactly; `short_ok`: a header without (all of) its data. */
static quant_ck_status coverage(uint64_t buffer, uint64_t pos, bool short_ok, quant_ck_error *err)
{
    if (pos < buffer)
        return bad(err,
                   "%" PRIu64 " trailing bytes after the last tensor's data (tensors cover %" PRIu64
                   " of the %" PRIu64 "-byte buffer)",
                   buffer - pos, pos, buffer);
    if (pos > buffer && !short_ok)
        return bad(err,
                   "file is truncated: tensors need %" PRIu64 " bytes of data but the buffer "
                   "holds %" PRIu64 " (%" PRIu64 " missing bytes)",
                   pos, buffer, pos - buffer);
    return QUANT_CK_OK;
}

/* The tensors, ending at `pos`, must cover the byte buffer up to the end of the file; a file
 * still arriving takes the size they imply (checked by ck_st_check_whole once it is whole). */
static quant_ck_status check_coverage(quant_st_file *f, uint64_t pos, quant_ck_error *err)
{
    const st_file *sf = (const st_file *)f;
    if (sf->growing) {
        f->file_size = f->data_start + pos;
        return QUANT_CK_OK;
    }
    return coverage(f->file_size - f->data_start, pos, sf->header_only, err);
}

/* Sorted by offsets, the tensors must tile [0, buffer size) exactly. */
static quant_ck_status check_layout(quant_st_file *f, quant_ck_error *err)
{
    if (f->n_tensors > 1) qsort(f->tensors, f->n_tensors, sizeof *f->tensors, by_offsets);
    uint64_t pos = 0;
    for (size_t i = 0; i < f->n_tensors; i++) {
        const quant_st_tensor *t = &f->tensors[i], *prev = i ? t - 1 : NULL;
        if (t->begin == pos) {
            pos = t->end;
        } else if (!prev) {
            return bad(err,
                       "tensor '%s': data starts at offset %" PRIu64 ", but the first "
                       "tensor must start at 0",
                       t->name, t->begin);
        } else if (t->begin < pos) {
            return bad(err,
                       "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] overlap tensor "
                       "'%s' ending at %" PRIu64,
                       t->name, t->begin, t->end, prev->name, pos);
        } else {
            return bad(err,
                       "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] leave a hole "
                       "of %" PRIu64 " bytes after tensor '%s' (ends at %" PRIu64 ")",
                       t->name, t->begin, t->end, t->begin - pos, prev->name, pos);
        }
    }
    return check_coverage(f, pos, err);
}

static int by_name_cmp(const void *a, const void *b)
{
    const quant_st_tensor *const *x = a, *const *y = b;
    return strcmp((*x)->name, (*y)->name);
}

static quant_ck_status build_index(st_file *sf, quant_ck_error *err)
{
    size_t n = sf->pub.n_tensors;
    sf->by_name = malloc((n ? n : 1) * sizeof *sf->by_name);
    if (!sf->by_name) return no_memory(err);
    for (size_t i = 0; i < n; i++) sf->by_name[i] = &sf->pub.tensors[i];
    if (n > 1) qsort(sf->by_name, n, sizeof *sf->by_name, by_name_cmp);
    return QUANT_CK_OK;
}

/* ---- the public calls ------------------------------------------------------------------------ */

static quant_ck_status validate(st_file *sf, quant_ck_error *err)
{
    quant_st_file *f = &sf->pub;
    json_t *root = NULL;
    quant_ck_status st = sf->mem ? QUANT_CK_OK : stat_file(sf, err);
    if (st == QUANT_CK_OK) st = read_length(sf, err);
    if (st == QUANT_CK_OK) st = load_header(sf, &root, err);
    if (st == QUANT_CK_OK) st = parse_entries(f, root, err);
    if (st == QUANT_CK_OK) st = check_layout(f, err);
    if (st == QUANT_CK_OK) st = build_index(sf, err);
    json_decref(root);
    return st;
}

/* Allocates the reader for `name`, validates it (from the descriptor `fd`, or from mem when not
 * NULL) and hands it out; on failure frees it (closing `fd`) and prefixes the message with the
 * name. */
static quant_ck_status open_common(const char *name, int fd, const void *mem, size_t len,
                                   bool header_only, const ck_wait *wait, quant_st_file **out,
                                   quant_ck_error *err)
{
    st_file *sf = calloc(1, sizeof *sf);
    if (!sf || !(sf->pub.path = strdup(name))) {
        free(sf);
        if (fd >= 0) close(fd);
        return no_memory(err);
    }
    sf->pub.fd = fd;
    sf->mem = mem;
    sf->header_only = header_only;
    if (wait) {
        sf->growing = true;
        sf->wait = *wait;
    }
    if (mem) sf->pub.file_size = (uint64_t)len;
    quant_ck_status st = validate(sf, err);
    if (st != QUANT_CK_OK) {
        if (st != QUANT_CK_ERR_CANCELLED) quant_ck_prefix(err, "%s", name);
        quant_st_close(&sf->pub);
        return st;
    }
    *out = &sf->pub;
    return QUANT_CK_OK;
}

quant_ck_status quant_st_open(const char *path, quant_st_file **out, quant_ck_error *err)
{
    if (out) *out = NULL;
    if (!path || !out) return quant_ck_fail(err, QUANT_CK_ERR_ARG, "quant_st_open: NULL argument");
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC); /* a FIFO must not block */
    if (fd < 0)
        return quant_ck_fail(err, QUANT_CK_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    return open_common(path, fd, NULL, 0, false, NULL, out, err);
}

quant_ck_status quant_st_open_fd(int fd, const char *name, quant_st_file **out, quant_ck_error *err)
{
    if (out) *out = NULL;
    if (fd < 0 || !name || !out) {
        if (fd >= 0) close(fd);
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "quant_st_open_fd: %s",
                             fd < 0 ? "negative descriptor" : "NULL argument");
    }
    return open_common(name, fd, NULL, 0, false, NULL, out, err);
}

quant_ck_status quant_st_open_header_fd(int fd, const char *name, quant_st_file **out,
                                        quant_ck_error *err)
{
    if (out) *out = NULL;
    if (fd < 0 || !name || !out) {
        if (fd >= 0) close(fd);
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "quant_st_open_header_fd: %s",
                             fd < 0 ? "negative descriptor" : "NULL argument");
    }
    return open_common(name, fd, NULL, 0, true, NULL, out, err);
}

quant_ck_status ck_st_open_growing(int fd, const char *name, const ck_wait *w, quant_st_file **out,
                                   quant_ck_error *err)
{
    if (out) *out = NULL;
    if (fd < 0 || !name || !w || !w->fn || !out) {
        if (fd >= 0) close(fd);
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "ck_st_open_growing: bad argument");
    }
    return open_common(name, fd, NULL, 0, false, w, out, err);
}

quant_ck_status ck_st_check_whole(const quant_st_file *f, quant_ck_error *err)
{
    const st_file *sf = (const st_file *)f;
    if (!sf->growing) return QUANT_CK_OK;
    quant_ck_status st =
        ck_wait_input(&sf->wait, ck_basename(f->path), QUANT_INPUT_WHOLE, NULL, err);
    struct stat sb;
    if (st == QUANT_CK_OK && fstat(f->fd, &sb) != 0)
        st = quant_ck_fail(err, QUANT_CK_ERR_IO, "cannot stat: %s", strerror(errno));
    if (st == QUANT_CK_OK) {
        uint64_t size = (uint64_t)sb.st_size;
        uint64_t buffer = size > f->data_start ? size - f->data_start : 0;
        st = coverage(buffer, f->file_size - f->data_start, false, err);
    }
    if (st != QUANT_CK_OK && st != QUANT_CK_ERR_CANCELLED) quant_ck_prefix(err, "%s", f->path);
    return st;
}

quant_ck_status quant_st_open_buffer(const void *buf, size_t len, const char *name,
                                     quant_st_file **out, quant_ck_error *err)
{
    if (out) *out = NULL;
    if (!buf || !name || !out)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "quant_st_open_buffer: NULL argument");
    return open_common(name, -1, buf, len, false, NULL, out, err);
}

void quant_st_close(quant_st_file *f)
{
    if (!f) return;
    st_file *sf = (st_file *)f;
    if (f->fd >= 0) close(f->fd);
    for (size_t i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
    for (size_t i = 0; i < f->n_meta; i++) {
        free(f->meta_keys[i]);
        free(f->meta_values[i]);
    }
    free(f->tensors);
    free(f->meta_keys);
    free(f->meta_values);
    free(sf->by_name);
    free(f->path);
    free(sf);
}

static int find_cmp(const void *key, const void *elem)
{
    const quant_st_tensor *const *t = elem;
    return strcmp(key, (*t)->name);
}

const quant_st_tensor *quant_st_find(const quant_st_file *f, const char *name)
{
    if (!f || !name || f->n_tensors == 0) return NULL;
    const st_file *sf = (const st_file *)f;
    const quant_st_tensor *const *hit =
        bsearch(name, sf->by_name, f->n_tensors, sizeof *sf->by_name, find_cmp);
    return hit ? *hit : NULL;
}

const char *quant_st_meta(const quant_st_file *f, const char *key)
{
    for (size_t i = 0; f && key && i < f->n_meta; i++)
        if (strcmp(f->meta_keys[i], key) == 0) return f->meta_values[i];
    return NULL;
}

uint64_t quant_st_nbytes(const quant_st_tensor *t)
{
    return t ? t->end - t->begin : 0;
}

quant_ck_status quant_st_read(const quant_st_file *f, const quant_st_tensor *t, uint64_t offset,
                              void *buf, size_t n, quant_ck_error *err)
{
    if (!f || !t || (!buf && n > 0))
        return quant_ck_fail(err, QUANT_CK_ERR_ARG, "quant_st_read: NULL argument");
    uint64_t size = t->end - t->begin;
    if (offset > size || (uint64_t)n > size - offset)
        return quant_ck_fail(err, QUANT_CK_ERR_ARG,
                             "%s: tensor '%s': cannot read %zu bytes at offset %" PRIu64
                             " of its %" PRIu64 " bytes",
                             f->path, t->name, n, offset, size);
    const st_file *sf = (const st_file *)f;
    uint64_t at = f->data_start + t->begin + offset;
    if (sf->growing) {
        quant_ck_status st = ck_wait_input(&sf->wait, ck_basename(f->path), at + n, t->name, err);
        if (st != QUANT_CK_OK) {
            if (st != QUANT_CK_ERR_CANCELLED) quant_ck_prefix(err, "%s", f->path);
            return st;
        }
    }
    int r = read_at(sf, buf, n, at);
    if (r != 0)
        return quant_ck_fail(err, QUANT_CK_ERR_IO, "%s: tensor '%s': read failed: %s", f->path,
                             t->name, r < 0 ? strerror(errno) : "short read (file changed?)");
    return QUANT_CK_OK;
}
