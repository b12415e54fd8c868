/* quant_st.h -- safetensors files: a validating reader (header parsed with jansson, data read
 * with pread on demand; or the same over a buffer in memory) and a writer whose header is fixed
 * before any data is written, so workers can pwrite each tensor at its offset; the file appears by
 * rename only. SPDX-License-Identifier: Apache-2.0
 *
 * Format (safetensors, as Hugging Face defines it): u64 little-endian header length N,
 * N bytes of JSON, then the byte buffer; each tensor's data_offsets are relative to the buffer.
 */
#ifndef QUANT_ST_H
#define QUANT_ST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "quant_ckpt.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QUANT_ST_MAX_HEADER 100000000u /* the reference parser's MAX_HEADER_SIZE */

/* Every dtype the reference implementation knows. Values are stable. Only F64, F32, F16, BF16
 * (and the fp8 dtypes for conversions) have numeric meaning here; the rest pass through as
 * bytes. */
typedef enum quant_st_dtype {
    QUANT_ST_BOOL = 0,
    QUANT_ST_U8,
    QUANT_ST_I8,
    QUANT_ST_F8_E5M2,
    QUANT_ST_F8_E4M3,
    QUANT_ST_I16,
    QUANT_ST_U16,
    QUANT_ST_F16,
    QUANT_ST_BF16,
    QUANT_ST_I32,
    QUANT_ST_U32,
    QUANT_ST_F32,
    QUANT_ST_F64,
    QUANT_ST_I64,
    QUANT_ST_U64,
    QUANT_ST_C64,
    QUANT_ST_F4,
    QUANT_ST_F6_E2M3,
    QUANT_ST_F6_E3M2,
    QUANT_ST_F8_E8M0,
    QUANT_ST_F8_E4M3FNUZ,
    QUANT_ST_F8_E5M2FNUZ,
    QUANT_ST_DTYPE_COUNT
} quant_st_dtype;

/*! quant_st_dtype_name() : "F32", "BF16", ...; NULL when out of range. */
QUANT_API const char *quant_st_dtype_name(quant_st_dtype dtype);
/*! quant_st_dtype_parse() : the dtype named `name` (exact, case-sensitive); false if unknown. */
QUANT_API bool quant_st_dtype_parse(const char *name, quant_st_dtype *out);
/*! quant_st_dtype_bits() : bits per element (4 for F4, 6 for F6_*, 8..64 otherwise). */
QUANT_API int quant_st_dtype_bits(quant_st_dtype dtype);
/*! quant_st_dtype_align() : bytes a tensor of this dtype is aligned to by the writer
 * (element size, 1 for sub-byte dtypes). */
QUANT_API int quant_st_dtype_align(quant_st_dtype dtype);
/*! quant_st_to_quant_dtype() : the libquant dtype of
 * F32/F16/BF16/F64/F8_E4M3/F8_E5M2/I8/U8/I16/I32; false otherwise. */
QUANT_API bool quant_st_to_quant_dtype(quant_st_dtype dtype, quant_dtype *out);
/*! quant_st_from_quant_dtype() : the inverse of quant_st_to_quant_dtype();
 * QUANT_ST_DTYPE_COUNT for a libquant dtype safetensors has no name for. */
QUANT_API quant_st_dtype quant_st_from_quant_dtype(quant_dtype dtype);

/* One tensor of a file, as its header describes it (validated). */
typedef struct quant_st_tensor {
    char *name;
    quant_st_dtype dtype;
    int rank; /* 0..QUANT_MAX_RANK; larger ranks are rejected */
    int64_t shape[QUANT_MAX_RANK];
    uint64_t begin, end; /* data_offsets, relative to the byte buffer */
} quant_st_tensor;

/* An open, validated safetensors file. Tensors are in data order (ascending `begin`), which is
 * the order the pipeline processes them in. Metadata pairs are in header order. */
typedef struct quant_st_file {
    char *path; /* the name it was opened by: quant_st_open's path, or the `name` given to
                   quant_st_open_fd / quant_st_open_buffer (messages and reports use it) */
    int fd;
    uint64_t file_size;
    uint64_t header_len; /* N */
    uint64_t data_start; /* 8 + N: file offset of the byte buffer */
    size_t n_tensors;
    quant_st_tensor *tensors;
    size_t n_meta;
    char **meta_keys;
    char **meta_values;
} quant_st_file;

/*! quant_st_open() :
 * Opens `path` and validates its header as the reference parser does: length within the file and
 * <= QUANT_ST_MAX_HEADER, UTF-8 JSON object, known dtypes, shape product x dtype bits (checked
 * for overflow) == end - begin, offsets contiguous from 0 with no overlap, hole or trailing byte,
 * `__metadata__` string-to-string only, no duplicate names, rank <= QUANT_MAX_RANK. Data bytes are
 * not read.
 * @return : QUANT_CK_OK with `*out` to release with quant_st_close(), or QUANT_CK_ERR_FORMAT /
 *           QUANT_CK_ERR_IO with a message naming the file, the tensor and the fault. */
QUANT_API quant_ck_status quant_st_open(const char *path, quant_st_file **out, quant_ck_error *err);

/*! quant_st_open_fd() :
 * The same as quant_st_open() over `fd`, a descriptor already open for reading (a checkpoint's
 * shard opened under its directory, say). `fd` always passes to the reader: quant_st_close()
 * closes it, and on any failure (a bad argument too) it is closed before the call returns.
 * `name` is the file's name in messages and becomes `path` (it is copied); the descriptor must
 * be a regular file (O_NONBLOCK, if set, is cleared). quant_st_read() and the pipeline's
 * map_input work on it as on an opened path.
 * @return : QUANT_CK_OK with `*out` to release with quant_st_close(), QUANT_CK_ERR_FORMAT /
 *           QUANT_CK_ERR_IO with a message naming `name`, or QUANT_CK_ERR_ARG (negative `fd`,
 *           NULL `name` or `out`). */
QUANT_API quant_ck_status quant_st_open_fd(int fd, const char *name, quant_st_file **out,
                                           quant_ck_error *err);

/*! quant_st_open_header_fd() :
 * quant_st_open_fd() for a shard's header without (all of) its data: the file may end anywhere
 * after the header (the data region cut short or absent: what a client sends to have a run
 * planned, POST /v1/plans); everything else is validated the same, bytes past the last tensor
 * still refused. quant_st_read() of bytes the file does not hold fails. For planning only
 * (quant_plan_file()): a run over such a file would fail reading.
 * @return : as quant_st_open_fd(). */
QUANT_API quant_ck_status quant_st_open_header_fd(int fd, const char *name, quant_st_file **out,
                                                  quant_ck_error *err);

/*! quant_st_open_buffer() :
 * The same validation as quant_st_open() on `len` bytes already in memory (a request body, say):
 * `buf` is borrowed, not copied, and must stay valid and unchanged until quant_st_close(). The
 * reader has `fd` -1 and `path` = `name` (used in messages like a file name); quant_st_read()
 * copies from the buffer.
 * @return : QUANT_CK_OK with `*out` to release with quant_st_close(), QUANT_CK_ERR_FORMAT with a
 *           message naming `name`, the tensor and the fault, or QUANT_CK_ERR_ARG (NULL argument).
 */
QUANT_API quant_ck_status quant_st_open_buffer(const void *buf, size_t len, const char *name,
                                               quant_st_file **out, quant_ck_error *err);

/*! quant_st_close() : closes the file and frees everything; NULL is a no-op. */
QUANT_API void quant_st_close(quant_st_file *f);

/*! quant_st_find() : the tensor named `name`, or NULL. O(log n). */
QUANT_API const quant_st_tensor *quant_st_find(const quant_st_file *f, const char *name);

/*! quant_st_meta() : the value of metadata key `key`, or NULL. */
QUANT_API const char *quant_st_meta(const quant_st_file *f, const char *key);

/*! quant_st_nbytes() : end - begin. */
QUANT_API uint64_t quant_st_nbytes(const quant_st_tensor *t);

/*! quant_st_read() :
 * Reads `n` bytes of tensor `t`'s data starting `offset` bytes into it (pread; thread-safe).
 * @return : QUANT_CK_OK, QUANT_CK_ERR_ARG when the range is outside the tensor, QUANT_CK_ERR_IO
 *           (short read: the file changed under us). */
QUANT_API quant_ck_status quant_st_read(const quant_st_file *f, const quant_st_tensor *t,
                                        uint64_t offset, void *buf, size_t n, quant_ck_error *err);

/* ---- writer --------------------------------------------------------------------------------- */

/* A tensor to write: name, dtype, shape (the byte size follows). */
typedef struct quant_st_out_tensor {
    const char *name;
    quant_st_dtype dtype;
    int rank;
    int64_t shape[QUANT_MAX_RANK];
} quant_st_out_tensor;

typedef struct quant_st_writer quant_st_writer;

/*! quant_st_writer_new() :
 * Lays out a file as the reference writer does (tensors sorted by dtype alignment descending,
 * then name; `__metadata__` first; header padded with spaces to a multiple of 8, so every
 * tensor is aligned to its element size), creates it under the temporary name
 * `path`.quant-tmp-PID-XXXXXX beside it (O_EXCL, locked with flock while it exists: see
 * quant_remove_stale_temps()) and sizes it. `path` must be nothing or a regular file (checked
 * with lstat: a symbolic link, FIFO, device, socket or directory is refused with
 * QUANT_CK_ERR_ACCESS, as quant_check_output_file() describes). `meta_keys`/`meta_values`
 * (n_meta pairs, may be 0) are copied. Names must be unique.
 * @return : QUANT_CK_OK with `*out`, or an error (nothing left on disk). */
QUANT_API quant_ck_status quant_st_writer_new(const char *path, const quant_st_out_tensor *tensors,
                                              size_t n_tensors, const char *const *meta_keys,
                                              const char *const *meta_values, size_t n_meta,
                                              quant_st_writer **out, quant_ck_error *err);

/*! quant_st_writer_index() : the index (input order of quant_st_writer_new) of tensor `name`,
 * or -1 when the writer has no such tensor. */
QUANT_API long quant_st_writer_index(const quant_st_writer *w, const char *name);

/*! quant_st_writer_nbytes() : byte size of tensor `index` (input order of quant_st_writer_new). */
QUANT_API uint64_t quant_st_writer_nbytes(const quant_st_writer *w, size_t index);

/*! quant_st_writer_total() : the sum of all tensors' data bytes (an index's total_size). */
QUANT_API uint64_t quant_st_writer_total(const quant_st_writer *w);

/*! quant_st_writer_pwrite() :
 * Writes `n` bytes into tensor `index` (input order) starting `offset` bytes into its data.
 * Thread-safe; each byte should be written once.
 * @return : QUANT_CK_OK, QUANT_CK_ERR_ARG (range outside the tensor), QUANT_CK_ERR_IO. */
QUANT_API quant_ck_status quant_st_writer_pwrite(quant_st_writer *w, size_t index, uint64_t offset,
                                                 const void *buf, size_t n, quant_ck_error *err);

/*! quant_st_writer_hash() :
 * Has the writer compute the file's SHA-256 as it is written, so that no second pass over the
 * file is needed: a thread of the writer hashes the bytes in file order as soon as everything
 * before them has been written (quant_st_writer_pwrite() calls may come in any order, from any
 * thread), reading them back from the file (the page cache) rather than keeping copies, so
 * memory stays one 4 MiB buffer; quant_st_writer_commit() hashes what remains while it fsyncs.
 * Call it before the first quant_st_writer_pwrite().
 * @return : QUANT_CK_OK, QUANT_CK_ERR_ARG (no open writer, or called twice), QUANT_CK_ERR_NOMEM
 *           (no memory or no thread). */
QUANT_API quant_ck_status quant_st_writer_hash(quant_st_writer *w, quant_ck_error *err);

/*! quant_st_writer_sha256() :
 * After a successful quant_st_writer_commit() of a writer that hashed: the file's SHA-256 as 64
 * lowercase hex digits and a NUL into `hex`, and its size into `*bytes` (when not NULL) -- the
 * same as sha256sum of the committed file. false otherwise. */
QUANT_API bool quant_st_writer_sha256(const quant_st_writer *w, char hex[65], uint64_t *bytes);

/*! quant_st_writer_commit() :
 * fsyncs the temporary file, checks the final path again (nothing or a regular file, which is
 * replaced), renames the temporary to it and fsyncs the directory. The writer must still be
 * freed.
 * @return : QUANT_CK_OK, QUANT_CK_ERR_IO (also: a hashing writer could not read the file back)
 *           or QUANT_CK_ERR_ACCESS (a link or a non-regular file appeared at the path: left as it
 *           is); on error the temporary file is removed. */
QUANT_API quant_ck_status quant_st_writer_commit(quant_st_writer *w, quant_ck_error *err);

/*! quant_st_writer_free() :
 * Frees the writer; if it was not committed, removes the temporary file (a failed or cancelled
 * run leaves nothing behind). NULL is a no-op. */
QUANT_API void quant_st_writer_free(quant_st_writer *w);

#ifdef __cplusplus
}
#endif
#endif /* QUANT_ST_H */
