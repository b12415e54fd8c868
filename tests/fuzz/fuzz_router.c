/* fuzz_router.c -- libFuzzer harness of quantd's route table: the input is "METHOD PATH" (the
 * method up to the first space; no space: GET and the whole input as the path, up to a NUL).
 * qd_route_match() must give a route of that method (or a GET route for a HEAD) whose pattern,
 * with the {params} it filled put back, is the path; a path known with another method must get
 * a non-empty Allow list from qd_route_allow(), which must stay within buffers of any size
 * (allocated to the byte, so AddressSanitizer sees one byte too far).
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "router.h"

/* The path the route's pattern gives with r's params put in place of its {names}. */
static void check_params(const qd_route *route, const qd_req *r, const char *path)
{
    char *rebuilt = malloc(strlen(path) + 1);
    FUZZ_CHECK(rebuilt);
    size_t at = 0, len = strlen(path);
    int n = 0;
    for (const char *p = route->pattern; *p;) {
        if (*p != '{') {
            FUZZ_CHECK(at < len && *p == path[at]);
            rebuilt[at++] = *p++;
            continue;
        }
        FUZZ_CHECK(n < QD_MAX_PARAMS);
        const char *v = r->params[n++];
        size_t k = strnlen(v, QD_MAX_PARAM_LEN);
        FUZZ_CHECK(k > 0 && k < QD_MAX_PARAM_LEN && !strchr(v, '/') && at + k <= len);
        memcpy(rebuilt + at, v, k);
        at += k;
        p = strchr(p, '}') + 1;
    }
    rebuilt[at] = '\0';
    FUZZ_CHECK(strcmp(rebuilt, path) == 0);
    free(rebuilt);
}

static void check_allow(const char *path, const char *method, bool path_known)
{
    static const size_t sizes[] = {1, 2, 4, 5, 7, 12, 64, 256};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        char *buf = malloc(sizes[i]);
        FUZZ_CHECK(buf);
        memset(buf, 'x', sizes[i]);
        qd_route_allow(path, buf, sizes[i]);
        FUZZ_CHECK(memchr(buf, '\0', sizes[i]));
        if (sizes[i] == 256) {
            FUZZ_CHECK((buf[0] != '\0') == path_known);
            /* the method asked for is not among those allowed (else it had matched) */
            char *save = NULL;
            for (char *m = strtok_r(buf, ", ", &save); m; m = strtok_r(NULL, ", ", &save))
                FUZZ_CHECK(strcmp(m, method) != 0);
        }
        free(buf);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_strndup(data, size);
    FUZZ_CHECK(text);
    const char *method = "GET", *path = text;
    char *space = strchr(text, ' ');
    if (space) {
        *space = '\0';
        method = text;
        path = space + 1;
    }
    qd_req r;
    memset(&r, 0, sizeof r);
    bool path_known = true;
    const qd_route *route = qd_route_match(method, path, &r, &path_known);
    if (route) {
        FUZZ_CHECK(path_known && qd_route_index(route) < qd_n_routes);
        FUZZ_CHECK(&qd_routes[qd_route_index(route)] == route);
        /* the route has that method, or it is a GET route and the request a HEAD */
        FUZZ_CHECK(route->handler &&
                   (strcmp(route->method, method) == 0 ||
                    (strcmp(method, "HEAD") == 0 && strcmp(route->method, "GET") == 0)));
        check_params(route, &r, path);
    } else {
        check_allow(path, method, path_known);
    }
    free(text);
    return 0;
}
