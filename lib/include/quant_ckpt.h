/* quant_ckpt.h -- libquant-checkpoint's shared vocabulary: status codes and the error struct every
 * checkpoint call fills (safetensors, rule sets, the pipeline).
 * SPDX-License-Identifier: Apache-2.0
 *
 * Like libquant, libquant-checkpoint never prints and never exits. A failing call returns a
 * quant_ck_status and, when `err` is not NULL, fills it with one line a user can act on: it names
 * the file, the tensor or rule, and what is wrong ("model.safetensors: tensor 'a.weight':
 * data_offsets [0, 12] hold 12 bytes but shape [2, 3] of F32 needs 24").
 */
#ifndef QUANT_CKPT_H
#define QUANT_CKPT_H

#include <stdarg.h>

#include "quant.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes. Values are stable: never renumbered, never reused. */
typedef enum quant_ck_status {
    QUANT_CK_OK = 0,
    QUANT_CK_ERR_IO = 1,          /* open/read/write/fsync/rename failed (errno text in message) */
    QUANT_CK_ERR_FORMAT = 2,      /* a malformed safetensors file or index */
    QUANT_CK_ERR_RULES = 3,       /* a malformed rule set (message names rule index and field) */
    QUANT_CK_ERR_QUANT = 4,       /* libquant refused a tensor (message has its status text) */
    QUANT_CK_ERR_NOMEM = 5,       /* allocation failed */
    QUANT_CK_ERR_CANCELLED = 6,   /* the caller's cancel flag was raised */
    QUANT_CK_ERR_UNSUPPORTED = 7, /* valid input the chosen output layout cannot express */
    QUANT_CK_ERR_ARG = 8,         /* invalid argument (NULL pointer, bad option value) */
    QUANT_CK_ERR_ACCESS = 9       /* refused by the run's confinement: a symbolic link, or a path
                                     that is not plain components under the input directory; or
                                     an output name that is a symbolic link or exists as anything
                                     but a regular file (directory) */
} quant_ck_status;

#define QUANT_CK_MESSAGE_MAX 1024

typedef struct quant_ck_error {
    quant_ck_status status;
    char message[QUANT_CK_MESSAGE_MAX];
} quant_ck_error;

/*! quant_ck_status_str() : a static name of `status` ("io error", "bad format", ...). */
QUANT_API const char *quant_ck_status_str(quant_ck_status status);

/*! quant_ck_fail() :
 * Fills `err` (when not NULL) with `status` and the formatted message (truncated to fit) and
 * returns `status`. For the library's own modules and its front ends (cli, daemon). */
QUANT_API quant_ck_status quant_ck_fail(quant_ck_error *err, quant_ck_status status,
                                        const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/*! quant_ck_prefix() :
 * Prepends "<prefix>: " to err->message (truncating the end if needed); no-op for NULL `err`.
 * Used to add the file name to an error raised deeper down. */
QUANT_API void quant_ck_prefix(quant_ck_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/*! quant_json_error_text() :
 * A JSON parse error (jansson's json_error_t text `what` and byte `position`, for the document
 * `text` of `len` bytes) in words a user can act on: an integer beyond 64 bits ("too big integer
 * near ...") becomes "field 'tile_size': integer 99999999999999999999 is out of range: integers
 * must lie in -9223372036854775808..9223372036854775807 (64 bits)" in `buf` (capacity `cap`);
 * any other error is `what` itself.
 * @return : `buf` or `what`; never NULL. */
QUANT_API const char *quant_json_error_text(const char *text, size_t len, int position,
                                            const char *what, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif /* QUANT_CKPT_H */
