/* tokens.h -- access tokens and roles: issuing a token (shown once, only its SHA-256 kept),
 * listing, revoking, and checking the token of a request. Used by the HTTP layer (every
 * request), by /v1/tokens and by `quantd token` (the same calls, on the same database).
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QD_TOKENS_H
#define QD_TOKENS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store.h"

/* Roles, as stored and as the API spells them. */
typedef enum qd_role {
    QD_ROLE_TRAINER = 0, /* posts and reads statistics */
    QD_ROLE_READER,      /* reads jobs, reports and outputs */
    QD_ROLE_OPERATOR,    /* everything */
    QD_ROLE_COUNT
} qd_role;

const char *qd_role_name(qd_role r);
bool qd_role_parse(const char *name, qd_role *out);

/* "qdt_" + 43 characters of base64url (256 random bits). */
#define QD_TOKEN_LEN      47
#define QD_TOKEN_NAME_MAX 64
/* Days a token may be given at most (100 years). */
#define QD_TOKEN_MAX_DAYS 36500

typedef struct qd_token_info {
    char name[QD_TOKEN_NAME_MAX + 1];
    qd_role role;
    int64_t created_ms;
    int64_t expires_ms; /* 0: never */
} qd_token_info;

typedef struct qd_tokens qd_tokens;

/* Opens its own connection to the SQLite database at db_path (the schema migrated by
 * qd_store_open). */
qd_status qd_tokens_open(const char *db_path, qd_tokens **out, qd_err *err);
/* qd_tokens_open with the connection's busy timeout from tuning (NULL: db.h's default). */
qd_status qd_tokens_open_tuned(const char *db_path, const qd_db_tuning *tuning, qd_tokens **out,
                               qd_err *err);
/* Its own connection to the database of engine kind at target (store.h's qd_store_open_engine;
 * the schema migrated by the store's open). */
qd_status qd_tokens_open_engine(qd_store_kind kind, const char *target, const qd_db_tuning *tuning,
                                qd_tokens **out, qd_err *err);
void qd_tokens_close(qd_tokens *t); /* NULL is a no-op */

/* A new token named `name` (qd_valid_name) with `role`, expiring after `days` (0: never;
 * at most QD_TOKEN_MAX_DAYS). token gets its text (QD_TOKEN_LEN + 1 bytes), the only time it
 * exists outside the client. QD_CONFLICT when the name is taken, QD_INVALID for a bad name or
 * days. */
qd_status qd_tokens_create(qd_tokens *t, const char *name, qd_role role, int64_t days,
                           char token[QD_TOKEN_LEN + 1], qd_token_info *info, qd_err *err);
/* Every token by name (*out malloc'd, *n entries). */
qd_status qd_tokens_list(qd_tokens *t, qd_token_info **out, size_t *n, qd_err *err);
/* Deletes the token; it stops working at once. QD_NOT_FOUND when there is none. */
qd_status qd_tokens_revoke(qd_tokens *t, const char *name, qd_err *err);
/* Whether any token exists (expired ones count: they still lock the server). */
qd_status qd_tokens_any(qd_tokens *t, bool *any, qd_err *err);

/* What a presented token is. */
typedef enum qd_token_check {
    QD_TOKEN_VALID = 0,
    QD_TOKEN_UNKNOWN, /* malformed, never issued, or revoked */
    QD_TOKEN_EXPIRED
} qd_token_check;

/* Checks `token` (the text after "Bearer "): its SHA-256 is looked up and compared in constant
 * time; *who is filled for a valid or expired token. */
qd_status qd_tokens_check(qd_tokens *t, const char *token, qd_token_check *result,
                          qd_token_info *who, qd_err *err);

#endif /* QD_TOKENS_H */
