/* fuzz_range.c -- libFuzzer harness for the conditional and range header parsers (range.c,
 * etag.c): the input's first 8 bytes (little-endian) give the representation's size, the rest,
 * as a NUL-terminated copy, is a Range field value (parsed against that size and against it
 * modulo 4096, where satisfiability is decided more often) and an If-None-Match field value.
 * Invariants: SINGLE implies from <= to < size and from/to are written only then; a non-NULL
 * header is never NONE; anything but INVALID starts with the bytes unit; a trailing ',' (an
 * empty list element) and leading whitespace change nothing; If-None-Match gives the same
 * answer for a strong tag and its weak twin (the weak comparison), and a value that is an
 * entity-tag (`*` matches it as the server's tag) matches itself.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "etag.h"
#include "fuzz.h"
#include "range.h"

#define CHECK(c) FUZZ_CHECK(c)

static bool unit_first(const char *h)
{
    while (*h == ' ' || *h == '\t') h++;
    static const char unit[] = "bytes=";
    for (size_t i = 0; i < sizeof unit - 1; i++) {
        char c = h[i] >= 'A' && h[i] <= 'Z' ? (char)(h[i] - 'A' + 'a') : h[i];
        if (c != unit[i]) return false;
    }
    return true;
}

/* h parsed against size, with the invariants; h has room for two more bytes. */
static void check_range(char *h, size_t len, uint64_t size)
{
    uint64_t from = 0xdeadbeef, to = 0xfeedface;
    qd_range_result r = qd_range_parse(h, size, &from, &to);
    CHECK(r != QD_RANGE_NONE);
    CHECK(r >= QD_RANGE_INVALID && r <= QD_RANGE_UNSATISFIABLE);
    if (r == QD_RANGE_SINGLE)
        CHECK(from <= to && to < size);
    else
        CHECK(from == 0xdeadbeef && to == 0xfeedface);
    if (r != QD_RANGE_INVALID) CHECK(unit_first(h));
    uint64_t f2, t2;
    h[len] = ','; /* an empty list element */
    h[len + 1] = '\0';
    qd_range_result r2 = qd_range_parse(h, size, &f2, &t2);
    CHECK(r2 == r && (r != QD_RANGE_SINGLE || (f2 == from && t2 == to)));
    h[len] = '\0';
}

static void check_inm(const char *h)
{
    static const char strong[] = "\"0123abcd\"", weak[] = "W/\"0123abcd\"";
    CHECK(qd_etag_none_match(h, strong) == qd_etag_none_match(h, weak));
    if (qd_etag_none_match("*", h)) CHECK(qd_etag_none_match(h, h)); /* h is one entity-tag */
    CHECK(!qd_etag_none_match(h, "not a tag"));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t rep = 0;
    size_t k = size < 8 ? size : 8;
    for (size_t i = 0; i < k; i++) rep |= (uint64_t)data[i] << (8 * i);
    size_t len = size - k;
    char *h = malloc(len + 3); /* one leading space, two bytes for check_range */
    if (!h) return 0;
    h[0] = ' ';
    memcpy(h + 1, data + k, len);
    h[len + 1] = '\0';
    char *v = h + 1;
    size_t n = strlen(v); /* the copy ends at the first NUL of the input */
    check_range(v, n, rep);
    check_range(v, n, rep % 4096);
    uint64_t f1 = 0, t1 = 0, f2 = 0, t2 = 0; /* leading whitespace is not part of the value */
    CHECK(qd_range_parse(v, rep, &f1, &t1) == qd_range_parse(h, rep, &f2, &t2) && f1 == f2 &&
          t1 == t2);
    check_inm(v);
    free(h);
    return 0;
}
