/* status.h -- the daemon's internal outcome of a call: a qd_status and, on failure, a qd_err
 * message a person can act on (status.c). Every layer (store, statistics, jobs, TLS, tokens)
 * returns these; only the HTTP layer turns them into API errors (error_codes.h).
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QD_STATUS_H
#define QD_STATUS_H

typedef enum qd_status {
    QD_OK = 0,
    QD_NOT_FOUND, /* no such row */
    QD_CONFLICT,  /* the row is not in a state that allows the change */
    QD_DB,        /* SQLite failed (message has its text) */
    QD_IO,        /* a file operation failed */
    QD_INVALID,   /* bad argument or bad input */
    QD_NOMEM
} qd_status;

typedef struct qd_err {
    char message[512];
} qd_err;

/* Fills err (may be NULL) with the printf-style message; returns st. */
qd_status qd_fail(qd_err *err, qd_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif /* QD_STATUS_H */
