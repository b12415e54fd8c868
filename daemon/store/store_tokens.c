/* store_tokens.c -- access tokens, the same for every engine: a token is 256 random bits
 * (getrandom) written as "qdt_" + base64url; the engine keeps its SHA-256 (nettle) only. A
 * request's token is hashed, looked up by that hash (nobody can steer a hash towards a stored
 * one, so the index lookup leaks nothing usable) and the hashes are compared again with nettle's
 * memeql_sec. The rows live in the engine (store_engine.h's token operations) on a connection of
 * their own.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _GNU_SOURCE
#include <nettle/base64.h>
#include <nettle/memops.h>
#include <nettle/sha2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "http.h"
#include "store_engine.h"
#include "tokens.h"

#define TOKEN_PREFIX "qdt_"
#define DAY_MS       ((int64_t)86400 * 1000)

_Static_assert(SHA256_DIGEST_SIZE == QD_TOKEN_HASH_LEN, "a token's hash is its SHA-256");

static const char *const role_names[QD_ROLE_COUNT] = {
    [QD_ROLE_TRAINER] = "trainer", [QD_ROLE_READER] = "reader", [QD_ROLE_OPERATOR] = "operator"};

const char *qd_role_name(qd_role r)
{
    return (unsigned)r < QD_ROLE_COUNT ? role_names[r] : "unknown";
}

bool qd_role_parse(const char *name, qd_role *out)
{
    for (int i = 0; name && i < QD_ROLE_COUNT; i++)
        if (strcmp(name, role_names[i]) == 0) {
            *out = (qd_role)i;
            return true;
        }
    return false;
}

struct qd_tokens {
    const qd_store_ops *ops;
    void *cls; /* the engine's tokens connection */
};

qd_status qd_tokens_open(const char *db_path, qd_tokens **out, qd_err *err)
{
    return qd_tokens_open_engine(QD_STORE_SQLITE, db_path, NULL, out, err);
}

qd_status qd_tokens_open_tuned(const char *db_path, const qd_db_tuning *tuning, qd_tokens **out,
                               qd_err *err)
{
    return qd_tokens_open_engine(QD_STORE_SQLITE, db_path, tuning, out, err);
}

qd_status qd_tokens_open_engine(qd_store_kind kind, const char *target, const qd_db_tuning *tuning,
                                qd_tokens **out, qd_err *err)
{
    *out = NULL;
    const qd_store_ops *ops = qd_store_engine_ops(kind);
    if (!ops) return qd_fail(err, QD_INVALID, "no store engine %d", (int)kind);
    if (!target || !*target) return qd_fail(err, QD_INVALID, "no database to open");
    qd_tokens *t = calloc(1, sizeof *t);
    if (!t) return qd_fail(err, QD_NOMEM, "out of memory");
    t->ops = ops;
    qd_status st = ops->tokens_open(target, tuning, &t->cls, err);
    if (st != QD_OK) {
        free(t);
        return st;
    }
    *out = t;
    return QD_OK;
}

void qd_tokens_close(qd_tokens *t)
{
    if (!t) return;
    t->ops->tokens_close(t->cls);
    free(t);
}

/* ---- issuing and revoking ---------------------------------------------------------------------
 */

static void sha256(const char *text, uint8_t digest[SHA256_DIGEST_SIZE])
{
    struct sha256_ctx ctx;
    sha256_init(&ctx);
    sha256_update(&ctx, strlen(text), (const uint8_t *)text);
    sha256_digest(&ctx, SHA256_DIGEST_SIZE, digest);
}

/* 256 random bits as "qdt_" + 43 base64url characters (no padding). */
static bool new_token(char token[QD_TOKEN_LEN + 1])
{
    uint8_t rnd[32];
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) return false;
    char b64[BASE64_ENCODE_LENGTH(32) + BASE64_ENCODE_FINAL_LENGTH + 1];
    struct base64_encode_ctx ctx;
    base64url_encode_init(&ctx);
    size_t n = base64_encode_update(&ctx, b64, sizeof rnd, rnd);
    n += base64_encode_final(&ctx, b64 + n); /* 44 characters, the last one padding */
    b64[n] = '\0';
    snprintf(token, QD_TOKEN_LEN + 1, TOKEN_PREFIX "%.43s", b64);
    explicit_bzero(rnd, sizeof rnd);
    return true;
}

qd_status qd_tokens_create(qd_tokens *t, const char *name, qd_role role, int64_t days,
                           char token[QD_TOKEN_LEN + 1], qd_token_info *info, qd_err *err)
{
    if (!name || !qd_valid_name(name))
        return qd_fail(err, QD_INVALID,
                       "token names are 1-64 characters of A-Z a-z 0-9 . _ - (not starting with "
                       "'.')");
    if ((unsigned)role >= QD_ROLE_COUNT)
        return qd_fail(err, QD_INVALID, "role must be trainer, reader or operator");
    if (days < 0 || days > QD_TOKEN_MAX_DAYS)
        return qd_fail(err, QD_INVALID, "expiry must be 1..%d days, or 0 for never",
                       QD_TOKEN_MAX_DAYS);
    if (!new_token(token)) return qd_fail(err, QD_IO, "getrandom failed");
    uint8_t hash[SHA256_DIGEST_SIZE];
    sha256(token, hash);
    memset(info, 0, sizeof *info);
    snprintf(info->name, sizeof info->name, "%s", name);
    info->role = role;
    info->created_ms = qd_now_ms();
    info->expires_ms = days ? info->created_ms + days * DAY_MS : 0;
    qd_status st = t->ops->token_insert(t->cls, info, hash, err);
    if (st != QD_OK) explicit_bzero(token, QD_TOKEN_LEN + 1);
    return st;
}

qd_status qd_tokens_revoke(qd_tokens *t, const char *name, qd_err *err)
{
    if (!name) return qd_fail(err, QD_INVALID, "no token name");
    return t->ops->token_delete(t->cls, name, err);
}

/* ---- reading ----------------------------------------------------------------------------------
 */

qd_status qd_tokens_list(qd_tokens *t, qd_token_info **out, size_t *n, qd_err *err)
{
    *out = NULL;
    *n = 0;
    qd_status st = t->ops->token_list(t->cls, out, n, err);
    if (st != QD_OK) {
        free(*out);
        *out = NULL;
        *n = 0;
    }
    return st;
}

qd_status qd_tokens_any(qd_tokens *t, bool *any, qd_err *err)
{
    *any = false;
    return t->ops->token_any(t->cls, any, err);
}

/* "qdt_" and 43 base64url characters: anything else is not one of ours (no lookup). */
static bool well_formed(const char *token)
{
    if (strlen(token) != QD_TOKEN_LEN || strncmp(token, TOKEN_PREFIX, 4) != 0) return false;
    return strspn(token + 4, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") ==
           QD_TOKEN_LEN - 4;
}

qd_status qd_tokens_check(qd_tokens *t, const char *token, qd_token_check *result,
                          qd_token_info *who, qd_err *err)
{
    *result = QD_TOKEN_UNKNOWN;
    if (!well_formed(token)) return QD_OK;
    uint8_t hash[SHA256_DIGEST_SIZE], stored[SHA256_DIGEST_SIZE];
    sha256(token, hash);
    bool found = false;
    qd_token_info row;
    qd_status st = t->ops->token_lookup(t->cls, hash, &found, &row, stored, err);
    if (st != QD_OK || !found || !memeql_sec(stored, hash, SHA256_DIGEST_SIZE)) return st;
    *who = row;
    bool expired = who->expires_ms != 0 && qd_now_ms() >= who->expires_ms;
    *result = expired ? QD_TOKEN_EXPIRED : QD_TOKEN_VALID;
    return QD_OK;
}
