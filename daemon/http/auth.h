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

#endif /* QD_AUTH_H */
