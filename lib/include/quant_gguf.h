/* quant_gguf.h -- GGUF files (llama.cpp's format): a strict reader (header, key-value pairs and
 * tensor infos validated as ggml's own reader does, every length and offset bounded by the file
 * before use; tensor bytes read on demand with pread) and a streaming writer (key-value pairs and
 * tensor infos declared first, then the data in order or by offset, published by rename).
 * SPDX-License-Identifier: Apache-2.0
 *
 * Layout: "GGUF", u32 version (2 or 3), u64 tensor count, u64 KV count, the KVs (a string key,
 * an i32 value type, the value), the tensor infos (a string name, u32 n_dims, n_dims i64 ne[],
 * i32 ggml type, u64 offset), zeros up to the alignment, then the data: each tensor at its offset
 * from the data start, in tensor-info order, contiguous, each padded with zeros to the alignment
 * (general.alignment, a u32 power of two; 32 without it). A string is a u64 length and its bytes.
 * Everything is little-endian. Dimensions are ggml's order: ne[0] is the innermost (a row); the
 * shape a PyTorch user sees is ne reversed.
 */
#ifndef QUANT_GGUF_H
#define QUANT_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "quant_ckpt.h"
#include "quant_ggml.h"
#include "quant_st.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QUANT_GGUF_MAX_DIMS    4                   /* ggml's GGML_MAX_DIMS */
#define QUANT_GGUF_MAX_NAME    64                  /* a tensor name has fewer bytes than this */
#define QUANT_GGUF_ALIGNMENT   32                  /* the default alignment */
#define QUANT_GGUF_MAX_STRING  ((uint64_t)1 << 30) /* ggml's limits: bytes of one string, */
#define QUANT_GGUF_MAX_ARRAY   ((uint64_t)1 << 30) /* elements of one array */
#define QUANT_GGUF_QNT_VERSION 2 /* general.quantization_version that ggml's block types mean */

/* Value types of a key-value pair (ggml's `enum gguf_type`; stored as i32; stable). */
typedef enum quant_gguf_type {
    QUANT_GGUF_U8 = 0,
    QUANT_GGUF_I8 = 1,
    QUANT_GGUF_U16 = 2,
    QUANT_GGUF_I16 = 3,
    QUANT_GGUF_U32 = 4,
    QUANT_GGUF_I32 = 5,
    QUANT_GGUF_F32 = 6,
    QUANT_GGUF_BOOL = 7,
    QUANT_GGUF_STRING = 8,
    QUANT_GGUF_ARRAY = 9,
    QUANT_GGUF_U64 = 10,
    QUANT_GGUF_I64 = 11,
    QUANT_GGUF_F64 = 12,
    QUANT_GGUF_TYPE_COUNT = 13
} quant_gguf_type;

/*! quant_gguf_type_name() : "u32", "string", "array", ...; NULL when out of range. */
QUANT_API const char *quant_gguf_type_name(int type);
/*! quant_gguf_type_size() : bytes of one value of a fixed-size type; 0 for string, array and
 * ids out of range. */
QUANT_API size_t quant_gguf_type_size(int type);

/* One key-value pair as the file holds it. `raw` is the value exactly as encoded after its type
 * id: a scalar's bytes; a string's u64 length and bytes; an array's i32 element type, u64 count
 * and elements (strings each with their length). A writer copies it verbatim. */
typedef struct quant_gguf_kv {
    char *key;            /* non-empty, no NUL byte, unique in the file */
    quant_gguf_type type; /* the value type; QUANT_GGUF_ARRAY for an array */
    quant_gguf_type elem; /* an array's element type (never ARRAY); == type for a scalar */
    uint64_t n;           /* an array's element count; 1 for a scalar */
    unsigned char *raw;
    size_t raw_len;
    char *str;       /* a STRING scalar: its bytes and a NUL (it may hold NUL bytes itself: the
                        length is raw_len - 8); NULL otherwise */
    uint64_t offset; /* file offset where the pair starts (its key's length) */
} quant_gguf_kv;

/* One tensor info. */
typedef struct quant_gguf_tensor {
    char *name; /* fewer than QUANT_GGUF_MAX_NAME bytes, no NUL byte, unique in the file */
    int n_dims; /* 0..QUANT_GGUF_MAX_DIMS as stored */
    int64_t ne[QUANT_GGUF_MAX_DIMS]; /* ggml order, ne[0] innermost; 1 past n_dims */
    int type;                        /* ggml type id */
    const quant_ggml_traits *traits; /* its row of quant_ggml.h's table (never NULL) */
    uint64_t offset;                 /* of its data, relative to data_start */
    uint64_t nbytes;                 /* nrows * row_bytes */
    int64_t nrows;                   /* ne[1] * ne[2] * ne[3] */
    uint64_t row_bytes;              /* quant_ggml_row_bytes(type, ne[0]); 0 when ne[0] is 0 */
    uint64_t info_offset;            /* file offset of its info (messages) */
} quant_gguf_tensor;

/* An open, validated GGUF file. KVs and tensors are in file order. */
typedef struct quant_gguf_file {
    char *path; /* the name given to open (messages use it) */
    int fd;     /* -1 over a buffer */
    uint64_t file_size;
    uint32_t version;    /* 2 or 3 */
    uint32_t alignment;  /* general.alignment, or QUANT_GGUF_ALIGNMENT */
    uint64_t data_start; /* file offset of the data section (aligned) */
    uint64_t data_size;  /* the tensors' bytes, each padded to the alignment */
    size_t n_kv;
    quant_gguf_kv *kv;
    size_t n_tensors;
    quant_gguf_tensor *tensors;
} quant_gguf_file;

/*! quant_gguf_is_gguf() : whether the `n` bytes at `head` start with the magic "GGUF". */
QUANT_API bool quant_gguf_is_gguf(const void *head, size_t n);

/*! quant_gguf_sniff() : whether `path` names a regular file that starts with "GGUF" (opened
 * without blocking and closed again; any failure is false). */
QUANT_API bool quant_gguf_sniff(const char *path);

/*! quant_gguf_open() :
 * Opens `path` and validates it with every rule of ggml's reader (gguf_init_from_file): magic;
 * version 2 or 3 (1, 0, later versions and a byte-swapped header refused); counts, strings
 * (<= QUANT_GGUF_MAX_STRING bytes) and arrays (<= QUANT_GGUF_MAX_ARRAY elements, no array of
 * arrays) within what the file holds; keys non-empty and unique; value types known;
 * general.alignment a u32 power of two; tensor names < QUANT_GGUF_MAX_NAME bytes and unique;
 * n_dims <= 4, every ne >= 0, the element count and byte size within int64; the ggml type one of
 * quant_ggml.h's table with ne[0] a multiple of its block; offsets exactly contiguous in
 * tensor-info order, each tensor padded to the alignment; and, beyond ggml's no-data reader,
 * every tensor's bytes inside the file (the final padding may be missing, as llama.cpp's loader
 * allows). Stricter than ggml: keys and names holding a NUL byte are refused, and so is a
 * zero-element tensor whose row count ne[1] * ne[2] * ne[3] overflows int64. The data is not
 * read.
 * @return : QUANT_CK_OK with `*out` to release with quant_gguf_close(); QUANT_CK_ERR_FORMAT with
 *           a message naming the file, the byte offset, the key or tensor and the rule broken;
 *           QUANT_CK_ERR_IO; QUANT_CK_ERR_NOMEM. */
QUANT_API quant_ck_status quant_gguf_open(const char *path, quant_gguf_file **out,
                                          quant_ck_error *err);

/*! quant_gguf_open_fd() : the same over `fd` (a regular file open for reading), which passes to
 * the reader: quant_gguf_close() closes it, and any failure closes it before returning. `name`
 * is copied and shown in messages. */
QUANT_API quant_ck_status quant_gguf_open_fd(int fd, const char *name, quant_gguf_file **out,
                                             quant_ck_error *err);

/*! quant_gguf_open_buffer() : the same over `len` bytes in memory, borrowed (they must outlive
 * the reader); `fd` is -1. */
QUANT_API quant_ck_status quant_gguf_open_buffer(const void *buf, size_t len, const char *name,
                                                 quant_gguf_file **out, quant_ck_error *err);

/*! quant_gguf_close() : closes and frees; NULL is a no-op. */
QUANT_API void quant_gguf_close(quant_gguf_file *f);

/*! quant_gguf_find_kv() : the pair with key `key`, or NULL. */
QUANT_API const quant_gguf_kv *quant_gguf_find_kv(const quant_gguf_file *f, const char *key);

/*! quant_gguf_find_tensor() : the tensor named `name`, or NULL. O(log n). */
QUANT_API const quant_gguf_tensor *quant_gguf_find_tensor(const quant_gguf_file *f,
                                                          const char *name);

/* ---- typed values -------------------------------------------------------------------------- */

/*! quant_gguf_get_u32() / _i32() / _u64() / _f32() / _bool() / _string() :
 * The value of scalar key `key`, which must have exactly that type (as llama.cpp reads them: no
 * conversion). _string gives a NUL-terminated pointer into the reader (valid until
 * quant_gguf_close()).
 * @return : QUANT_CK_OK; QUANT_CK_ERR_FORMAT "FILE: key 'K' is missing" or "FILE: key 'K' is
 *           TYPE, not u32". */
QUANT_API quant_ck_status quant_gguf_get_u32(const quant_gguf_file *f, const char *key,
                                             uint32_t *out, quant_ck_error *err);
QUANT_API quant_ck_status quant_gguf_get_i32(const quant_gguf_file *f, const char *key,
                                             int32_t *out, quant_ck_error *err);
QUANT_API quant_ck_status quant_gguf_get_u64(const quant_gguf_file *f, const char *key,
                                             uint64_t *out, quant_ck_error *err);
QUANT_API quant_ck_status quant_gguf_get_f32(const quant_gguf_file *f, const char *key, float *out,
                                             quant_ck_error *err);
QUANT_API quant_ck_status quant_gguf_get_bool(const quant_gguf_file *f, const char *key, bool *out,
                                              quant_ck_error *err);
QUANT_API quant_ck_status quant_gguf_get_string(const quant_gguf_file *f, const char *key,
                                                const char **out, quant_ck_error *err);

/*! quant_gguf_get_u32_layer() :
 * A key llama.cpp reads as one u32 or as an array with one value per layer
 * (llama.feed_forward_length, llama.attention.head_count): the scalar, or element `layer` of an
 * array of u32 or i32 (an i32 below 0 is refused).
 * @return : as quant_gguf_get_u32(); also QUANT_CK_ERR_FORMAT when `layer` is past the array. */
QUANT_API quant_ck_status quant_gguf_get_u32_layer(const quant_gguf_file *f, const char *key,
                                                   uint64_t layer, uint32_t *out,
                                                   quant_ck_error *err);

/*! quant_gguf_get_array() :
 * The array `key` whose elements are `elem` (QUANT_GGUF_TYPE_COUNT: any), into `*out`.
 * @return : as quant_gguf_get_u32(). */
QUANT_API quant_ck_status quant_gguf_get_array(const quant_gguf_file *f, const char *key, int elem,
                                               const quant_gguf_kv **out, quant_ck_error *err);

/*! quant_gguf_kv_int() : element `i` (0 for a scalar) of an integer or bool pair as int64; false
 * when out of range, not an integer type, or a u64 above INT64_MAX. */
QUANT_API bool quant_gguf_kv_int(const quant_gguf_kv *kv, uint64_t i, int64_t *out);
/*! quant_gguf_kv_float() : element `i` (0 for a scalar) of an f32 or f64 pair; false otherwise. */
QUANT_API bool quant_gguf_kv_float(const quant_gguf_kv *kv, uint64_t i, double *out);
/*! quant_gguf_kv_next_string() :
 * Walks the strings of a string pair (a scalar gives one): start with *cursor = 0; each call
 * gives the next string's bytes (`*s`, not NUL-terminated, into the reader) and length.
 * @return : false after the last one (or for a pair of another type). */
QUANT_API bool quant_gguf_kv_next_string(const quant_gguf_kv *kv, size_t *cursor, const char **s,
                                         uint64_t *len);

/* ---- tensors ------------------------------------------------------------------------------- */

/*! quant_gguf_shape() : the tensor's shape in the user's (PyTorch) order -- ne reversed over its
 * n_dims -- into `shape`; @return : its rank (n_dims). */
QUANT_API int quant_gguf_shape(const quant_gguf_tensor *t, int64_t shape[QUANT_GGUF_MAX_DIMS]);

/*! quant_gguf_read() :
 * Reads `n` bytes of tensor `t` starting `offset` bytes into its data (pread, thread-safe; a
 * memcpy over a buffer).
 * @return : QUANT_CK_OK, QUANT_CK_ERR_ARG (the range is outside the tensor), QUANT_CK_ERR_IO
 *           (a short read: the file changed). */
QUANT_API quant_ck_status quant_gguf_read(const quant_gguf_file *f, const quant_gguf_tensor *t,
                                          uint64_t offset, void *buf, size_t n,
                                          quant_ck_error *err);

/*! quant_gguf_read_rows() : rows [row0, row0 + nrows) of `t` (nrows * row_bytes bytes) into
 * `buf`; @return : as quant_gguf_read(). */
QUANT_API quant_ck_status quant_gguf_read_rows(const quant_gguf_file *f, const quant_gguf_tensor *t,
                                               int64_t row0, int64_t nrows, void *buf,
                                               quant_ck_error *err);

/* ---- writer -------------------------------------------------------------------------------- */

typedef struct quant_gguf_writer quant_gguf_writer;

/*! quant_gguf_writer_new() :
 * A writer of a version-3 GGUF file at `path` (copied). Nothing is on disk until
 * quant_gguf_writer_begin(): first declare the pairs (quant_gguf_writer_copy_kvs,
 * quant_gguf_writer_set_*) and the tensors (quant_gguf_writer_add_tensor), in file order.
 * @return : QUANT_CK_OK with `*out` (free with quant_gguf_writer_free()), QUANT_CK_ERR_ARG,
 *           QUANT_CK_ERR_NOMEM. */
QUANT_API quant_ck_status quant_gguf_writer_new(const char *path, quant_gguf_writer **out,
                                                quant_ck_error *err);

/*! quant_gguf_writer_copy_kv() / _copy_kvs() :
 * Adds one pair of a reader (or all of them, in their order), its value copied byte for byte;
 * a key the writer already has is replaced in place. Tokenizer arrays and every other key are
 * kept as they are; general.alignment must be a u32 power of two (it sets the writer's
 * alignment). @return : QUANT_CK_OK, QUANT_CK_ERR_ARG (general.alignment refused; the writer
 * has begun), QUANT_CK_ERR_NOMEM. */
QUANT_API quant_ck_status quant_gguf_writer_copy_kv(quant_gguf_writer *w, const quant_gguf_kv *kv,
                                                    quant_ck_error *err);
QUANT_API quant_ck_status quant_gguf_writer_copy_kvs(quant_gguf_writer *w, const quant_gguf_file *f,
                                                     quant_ck_error *err);

/*! quant_gguf_writer_set_*() :
 * Sets key `key` (non-empty, no longer than QUANT_GGUF_MAX_STRING) to a new value, replacing the
 * pair in place when it exists (general.file_type and general.quantization_version on a copy,
 * say), else appending it. Arrays: `n` elements (n <= QUANT_GGUF_MAX_ARRAY; strings are
 * NUL-terminated). general.alignment only as a u32 power of two.
 * @return : QUANT_CK_OK, QUANT_CK_ERR_ARG (a bad key, value or type for the key; the writer has
 *           begun), QUANT_CK_ERR_NOMEM. */
QUANT_API quant_ck_status quant_gguf_writer_set_u32(quant_gguf_writer *w, const char *key,
                                                    uint32_t v, quant_ck_error *err);
QUANT_API quant_ck_status quant_gguf_writer_set_i32(quant_gguf_writer *w, const char *key,
                                                    int32_t v, quant_ck_error *err);
QUANT_API quant_ck_status quant_gguf_writer_set_u64(quant_gguf_writer *w, const char *key,
                                                    uint64_t v, quant_ck_error *err);
QUANT_API quant_ck_status quant_gguf_writer_set_f32(quant_gguf_writer *w, const char *key, float v,
                                                    quant_ck_error *err);
QUANT_API quant_ck_status quant_gguf_writer_set_bool(quant_gguf_writer *w, const char *key, bool v,
                                                     quant_ck_error *err);
QUANT_API quant_ck_status quant_gguf_writer_set_string(quant_gguf_writer *w, const char *key,
                                                       const char *v, quant_ck_error *err);
QUANT_API quant_ck_status quant_gguf_writer_set_strings(quant_gguf_writer *w, const char *key,
                                                        const char *const *v, size_t n,
                                                        quant_ck_error *err);
QUANT_API quant_ck_status quant_gguf_writer_set_i32s(quant_gguf_writer *w, const char *key,
                                                     const int32_t *v, size_t n,
                                                     quant_ck_error *err);
QUANT_API quant_ck_status quant_gguf_writer_set_u32s(quant_gguf_writer *w, const char *key,
                                                     const uint32_t *v, size_t n,
                                                     quant_ck_error *err);
QUANT_API quant_ck_status quant_gguf_writer_set_f32s(quant_gguf_writer *w, const char *key,
                                                     const float *v, size_t n, quant_ck_error *err);

/*! quant_gguf_writer_remove_kv() : drops pair `key` if the writer has it (before begin).
 * @return : whether it had it. */
QUANT_API bool quant_gguf_writer_remove_kv(quant_gguf_writer *w, const char *key);

/*! quant_gguf_writer_add_tensor() :
 * Declares the next tensor: `name` (copied; fewer than QUANT_GGUF_MAX_NAME bytes, unique),
 * `n_dims` (1..4) dims `ne` in ggml order (ne[0] innermost, each >= 0, ne[0] a multiple of the
 * type's block), ggml type `type` (a row of quant_ggml.h's table). Its data follows the previous
 * tensor's, padded to the alignment.
 * @return : QUANT_CK_OK with its index in `*index` (when not NULL), QUANT_CK_ERR_ARG naming the
 *           tensor and the rule, QUANT_CK_ERR_NOMEM. */
QUANT_API quant_ck_status quant_gguf_writer_add_tensor(quant_gguf_writer *w, const char *name,
                                                       int n_dims, const int64_t *ne, int type,
                                                       size_t *index, quant_ck_error *err);

/*! quant_gguf_writer_hash() : has the writer take the file's SHA-256 while it is written (as
 * quant_st_writer_hash(): the bytes read back in file order from the page cache, one 4 MiB
 * buffer); call it before begin or before the first data byte. */
QUANT_API quant_ck_status quant_gguf_writer_hash(quant_gguf_writer *w, quant_ck_error *err);

/*! quant_gguf_writer_begin() :
 * Lays the data out (offsets contiguous in declaration order, each tensor padded to the
 * alignment, the tail too), checks the target (nothing or a regular file: a link, FIFO, device
 * or directory is refused with QUANT_CK_ERR_ACCESS), creates the locked temporary
 * `path`.quant-tmp-PID-XXXXXX beside it, writes the header and sizes the file (padding reads as
 * zeros). No pair or tensor can be declared afterwards.
 * @return : QUANT_CK_OK or an error (nothing left on disk). */
QUANT_API quant_ck_status quant_gguf_writer_begin(quant_gguf_writer *w, quant_ck_error *err);

/*! quant_gguf_writer_nbytes() : the byte size of tensor `index` (0 when out of range). */
QUANT_API uint64_t quant_gguf_writer_nbytes(const quant_gguf_writer *w, size_t index);
/*! quant_gguf_writer_size() : the file's size (after begin; 0 before). */
QUANT_API uint64_t quant_gguf_writer_size(const quant_gguf_writer *w);

/*! quant_gguf_writer_write() :
 * Streams `n` bytes of data in declaration order: they continue the current tensor, and once it
 * has all its bytes the next one starts (a piece never runs past the tensor it starts in, so a
 * tensor may come in any number of pieces and never has to be in memory whole). Not to be mixed
 * with quant_gguf_writer_pwrite() on one writer; one thread.
 * @return : QUANT_CK_OK, QUANT_CK_ERR_ARG (not begun, pwrite used, or the piece runs past the
 *           current tensor or the last one: the message names the tensor and the bytes it has
 *           left), QUANT_CK_ERR_IO. */
QUANT_API quant_ck_status quant_gguf_writer_write(quant_gguf_writer *w, const void *buf, size_t n,
                                                  quant_ck_error *err);

/*! quant_gguf_writer_pwrite() :
 * Writes `n` bytes into tensor `index` starting `offset` bytes into its data; any order, any
 * thread (each byte once: the writer counts them).
 * @return : QUANT_CK_OK, QUANT_CK_ERR_ARG (the range is outside the tensor, not begun, or the
 *           writer streams), QUANT_CK_ERR_IO. */
QUANT_API quant_ck_status quant_gguf_writer_pwrite(quant_gguf_writer *w, size_t index,
                                                   uint64_t offset, const void *buf, size_t n,
                                                   quant_ck_error *err);

/*! quant_gguf_writer_commit() :
 * Checks that every tensor got exactly its bytes, fsyncs (finishing the hash), renames the
 * temporary to `path` (a regular file there is replaced) and fsyncs the directory.
 * @return : QUANT_CK_OK; QUANT_CK_ERR_ARG "tensor 'T' got N of its M bytes" (the temporary is
 *           removed); QUANT_CK_ERR_IO; QUANT_CK_ERR_ACCESS (a link or other file appeared at
 *           the path). The writer must still be freed. */
QUANT_API quant_ck_status quant_gguf_writer_commit(quant_gguf_writer *w, quant_ck_error *err);

/*! quant_gguf_writer_sha256() : after a commit of a hashing writer, the file's SHA-256 (64 hex
 * digits and a NUL) and its size (when `bytes` is not NULL); false otherwise. */
QUANT_API bool quant_gguf_writer_sha256(const quant_gguf_writer *w, char hex[65], uint64_t *bytes);

/*! quant_gguf_writer_free() : frees the writer, removing the temporary file of an uncommitted
 * one; NULL is a no-op. */
QUANT_API void quant_gguf_writer_free(quant_gguf_writer *w);

/* ---- dequantizing ---------------------------------------------------------------------------- */

/*! quant_gguf_dequantize_path() :
 * Every tensor of the GGUF file `in` through quant_ggml_dequantize() into the safetensors file
 * `out`, as `dtype` (QUANT_ST_F32, QUANT_ST_BF16 or QUANT_ST_F16), same names, shapes in the
 * user's order; a bounded number of rows at a time. `out` must not exist (nor be a link); it
 * appears by rename only.
 * @return : QUANT_CK_OK or an error naming the file and tensor. */
QUANT_API quant_ck_status quant_gguf_dequantize_path(const char *in, const char *out,
                                                     quant_st_dtype dtype, int threads,
                                                     quant_ck_error *err);

#ifdef __cplusplus
}
#endif
#endif /* QUANT_GGUF_H */
