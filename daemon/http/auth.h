/* auth.h -- the access check every request passes once its headers are in (auth.c).
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QD_AUTH_H
#define QD_AUTH_H

#include <stdbool.h>

#include "http.h"

/* Whether r's token (or none) may call its route; fills r->who with the token's name. Replies
 * 401, 403 (or 503 when the tokens cannot be read) and returns false otherwise. */
bool qd_auth_request(qd_req *r);

/* Whether the server has tokens (`any`), as a request or a token's creation just found: the
 * first token of an open server ends its open mode and the last one revoked opens it again,
 * each change logged once. */
void qd_auth_tokens_seen(qd_app *app, bool any);

/* The server's access mode for the start-up line: "open" (no token yet, loopback: anyone may do
 * everything until the first token is created), "insecure" (no token yet, --insecure), or
 * "tokens" (every request but /healthz and /readyz needs one). */
const char *qd_auth_mode(const qd_app *app, bool any);

#endif /* QD_AUTH_H */
