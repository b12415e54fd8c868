/* test_range.c -- the range suite: the pure header parsers called directly. Range (range.c):
 * the examples of RFC 9110 section 14.1.2 against a 10000-byte representation, suffix and open
 * ranges, clamping, the list rule (OWS around commas, empty elements), what is not a
 * ranges-specifier (signs, spaces inside a range-spec, other units, last < first, overflow),
 * unsatisfiable sets and several ranges. If-None-Match (etag.c): `*`, lists, W/ on either side
 * (weak comparison, RFC 9110 8.8.3.2), and malformed values that match nothing.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "etag.h"
#include "qdtest.h"
#include "range.h"

typedef struct range_case {
    const char *header;
    uint64_t size;
    qd_range_result want;
    uint64_t from, to; /* QD_RANGE_SINGLE only */
} range_case;

static void check_ranges(const range_case *c, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t from = 7777, to = 7777;
        qd_range_result got = qd_range_parse(c[i].header, c[i].size, &from, &to);
        ck_assert_msg(got == c[i].want, "Range \"%s\" on %llu bytes: %s, wanted %s", c[i].header,
                      (unsigned long long)c[i].size, qd_range_result_name(got),
                      qd_range_result_name(c[i].want));
        if (got == QD_RANGE_SINGLE)
            ck_assert_msg(from == c[i].from && to == c[i].to,
                          "Range \"%s\" on %llu bytes: %llu-%llu, wanted %llu-%llu", c[i].header,
                          (unsigned long long)c[i].size, (unsigned long long)from,
                          (unsigned long long)to, (unsigned long long)c[i].from,
                          (unsigned long long)c[i].to);
        else
            ck_assert_msg(from == 7777 && to == 7777, "Range \"%s\": from/to written for %s",
                          c[i].header, qd_range_result_name(got));
    }
}

/* RFC 9110 14.1.2's examples (a representation of 10000 bytes), suffix and open ranges. */
START_TEST(test_range_single)
{
    static const range_case cases[] = {
        {"bytes=0-499", 10000, QD_RANGE_SINGLE, 0, 499},     /* the first 500 bytes */
        {"bytes=500-999", 10000, QD_RANGE_SINGLE, 500, 999}, /* the second 500 bytes */
        {"bytes=-500", 10000, QD_RANGE_SINGLE, 9500, 9999},  /* the final 500 bytes */
        {"bytes=9500-", 10000, QD_RANGE_SINGLE, 9500, 9999}, /* the final 500 bytes */
        {"bytes=0-0", 10000, QD_RANGE_SINGLE, 0, 0},         /* the first byte */
        {"bytes=-1", 10000, QD_RANGE_SINGLE, 9999, 9999},    /* the last byte */
        {"bytes=9999-9999", 10000, QD_RANGE_SINGLE, 9999, 9999},
        {"bytes=0-", 10000, QD_RANGE_SINGLE, 0, 9999},
        {"bytes=0-9999", 10000, QD_RANGE_SINGLE, 0, 9999},
        {"bytes=0-10000", 10000, QD_RANGE_SINGLE, 0, 9999}, /* last-pos past the end: clamped */
        {"bytes=100-18446744073709551615", 10000, QD_RANGE_SINGLE, 100, 9999}, /* UINT64_MAX */
        {"bytes=-10000", 10000, QD_RANGE_SINGLE, 0, 9999},
        {"bytes=-20000", 10000, QD_RANGE_SINGLE, 0, 9999}, /* longer than it: the whole */
        {"bytes=-18446744073709551615", 10000, QD_RANGE_SINGLE, 0, 9999},
        {"bytes=007-0010", 10000, QD_RANGE_SINGLE, 7, 10}, /* 1*DIGIT: leading zeros */
        {"bytes=0-0", 1, QD_RANGE_SINGLE, 0, 0},
        {"bytes=-1", 1, QD_RANGE_SINGLE, 0, 0},
        /* the unit is case-insensitive */
        {"BYTES=1-2", 10000, QD_RANGE_SINGLE, 1, 2},
        {"Bytes=1-2", 10000, QD_RANGE_SINGLE, 1, 2},
        /* surrounding whitespace is not part of a field value; empty list elements are allowed */
        {" bytes=1-2\t", 10000, QD_RANGE_SINGLE, 1, 2},
        {"bytes=1-2,", 10000, QD_RANGE_SINGLE, 1, 2},
        {"bytes=,1-2", 10000, QD_RANGE_SINGLE, 1, 2},
        {"bytes=, ,1-2 , ,", 10000, QD_RANGE_SINGLE, 1, 2},
        {"bytes= ,1-2", 10000, QD_RANGE_SINGLE, 1, 2}, /* an empty element, OWS, a comma */
        {"bytes=1-2 ,", 10000, QD_RANGE_SINGLE, 1, 2},
    };
    check_ranges(cases, sizeof cases / sizeof cases[0]);
}
END_TEST

/* Not a ranges-specifier of the bytes unit: ignored (the whole representation is sent). */
START_TEST(test_range_invalid)
{
    static const range_case cases[] = {
        /* the defects of the issue: strtoull took signs and spaces */
        {"bytes=1--2", 10000, QD_RANGE_INVALID, 0, 0},
        {"bytes=--5", 10000, QD_RANGE_INVALID, 0, 0},
        {"bytes=+1-+2", 10000, QD_RANGE_INVALID, 0, 0},
        {"bytes= 1-2", 10000, QD_RANGE_INVALID, 0, 0},
        {"bytes=+1-2", 10000, QD_RANGE_INVALID, 0, 0},
        {"bytes=1-+2", 10000, QD_RANGE_INVALID, 0, 0},
        {"bytes=-+5", 10000, QD_RANGE_INVALID, 0, 0},
        {"bytes=- 5", 10000, QD_RANGE_INVALID, 0, 0},
        {"bytes=1 -2", 10000, QD_RANGE_INVALID, 0, 0},
        {"bytes=1- 2", 10000, QD_RANGE_INVALID, 0, 0},
        {"bytes=1-2 3-4", 10000, QD_RANGE_INVALID, 0, 0},
        {"bytes=1-2;3-4", 10000, QD_RANGE_INVALID, 0, 0},
        {"bytes=0x10-20", 10000, QD_RANGE_INVALID, 0, 0},
        {"bytes=1-2-3", 10000, QD_RANGE_INVALID, 0, 0},
        {"bytes=1.5-2", 10000, QD_RANGE_INVALID, 0, 0},
        {"bytes=1", 10000, QD_RANGE_INVALID, 0, 0},
        {"bytes=-", 10000, QD_RANGE_INVALID, 0, 0},
        {"bytes=a-b", 10000, QD_RANGE_INVALID, 0, 0},
        {"bytes=\xef\xbc\x91-2", 10000, QD_RANGE_INVALID, 0, 0}, /* a fullwidth digit */
        {"bytes=1-2,x", 10000, QD_RANGE_INVALID, 0, 0},
        {"bytes=1-2,,3--4", 10000, QD_RANGE_INVALID, 0, 0},
        /* last-pos below first-pos (RFC 9110 14.1.1: invalid) */
        {"bytes=5-3", 10000, QD_RANGE_INVALID, 0, 0},
        {"bytes=0-1,5-3", 10000, QD_RANGE_INVALID, 0, 0},
        /* no range-spec at all */
        {"bytes=", 10000, QD_RANGE_INVALID, 0, 0},
        {"bytes=,", 10000, QD_RANGE_INVALID, 0, 0},
        {"bytes= , ", 10000, QD_RANGE_INVALID, 0, 0},
        {"", 10000, QD_RANGE_INVALID, 0, 0},
        /* the unit and its '=' */
        {"bytes 1-2", 10000, QD_RANGE_INVALID, 0, 0},
        {"bytes =1-2", 10000, QD_RANGE_INVALID, 0, 0},
        {"bytes:1-2", 10000, QD_RANGE_INVALID, 0, 0},
        {"byte=1-2", 10000, QD_RANGE_INVALID, 0, 0},
        {"bytesx=1-2", 10000, QD_RANGE_INVALID, 0, 0},
        {"items=1-2", 10000, QD_RANGE_INVALID, 0, 0},
        {"1-2", 10000, QD_RANGE_INVALID, 0, 0},
        /* past UINT64_MAX */
        {"bytes=18446744073709551616-", 10000, QD_RANGE_INVALID, 0, 0},
        {"bytes=0-18446744073709551616", 10000, QD_RANGE_INVALID, 0, 0},
        {"bytes=-18446744073709551616", 10000, QD_RANGE_INVALID, 0, 0},
        {"bytes=0-99999999999999999999999999999999", 10000, QD_RANGE_INVALID, 0, 0},
    };
    check_ranges(cases, sizeof cases / sizeof cases[0]);
    uint64_t from = 1, to = 2;
    ck_assert_int_eq(qd_range_parse(NULL, 10, &from, &to), QD_RANGE_NONE);
    ck_assert(from == 1 && to == 2);
}
END_TEST

/* Satisfiability (RFC 9110 14.1.2) and several ranges. */
START_TEST(test_range_sets)
{
    static const range_case cases[] = {
        {"bytes=10000-", 10000, QD_RANGE_UNSATISFIABLE, 0, 0}, /* first-pos at the end */
        {"bytes=10000-10001", 10000, QD_RANGE_UNSATISFIABLE, 0, 0},
        {"bytes=99999999-", 10000, QD_RANGE_UNSATISFIABLE, 0, 0},
        {"bytes=-0", 10000, QD_RANGE_UNSATISFIABLE, 0, 0}, /* a suffix of no byte */
        {"bytes=10000-,-0", 10000, QD_RANGE_UNSATISFIABLE, 0, 0},
        {"bytes=0-0", 0, QD_RANGE_UNSATISFIABLE, 0, 0}, /* an empty representation */
        {"bytes=0-", 0, QD_RANGE_UNSATISFIABLE, 0, 0},
        {"bytes=-0", 0, QD_RANGE_UNSATISFIABLE, 0, 0},
        {"bytes=1-", 1, QD_RANGE_UNSATISFIABLE, 0, 0},
        /* RFC 9110 14.1.2: of an empty representation only a suffix range is satisfiable, and
         * it has no byte to send: the whole (empty) representation */
        {"bytes=-5", 0, QD_RANGE_MULTI, 0, 0},
        /* several ranges, at least one satisfiable: the whole representation */
        {"bytes=500-600,601-999", 10000, QD_RANGE_MULTI, 0, 0},
        {"bytes=500-700,601-999", 10000, QD_RANGE_MULTI, 0, 0}, /* overlapping */
        {"bytes=0-0,-1", 10000, QD_RANGE_MULTI, 0, 0},          /* first and last bytes */
        {"bytes=0-0, -1", 10000, QD_RANGE_MULTI, 0, 0},
        {"bytes=0-0 ,\t-1", 10000, QD_RANGE_MULTI, 0, 0},
        {"bytes=0-0,99999-", 10000, QD_RANGE_MULTI, 0, 0}, /* one of them satisfiable */
        {"bytes=99999-,0-0", 10000, QD_RANGE_MULTI, 0, 0},
        {"bytes=1-2,1-2", 10000, QD_RANGE_MULTI, 0, 0},
    };
    check_ranges(cases, sizeof cases / sizeof cases[0]);
    ck_assert_str_eq(qd_range_result_name(QD_RANGE_UNSATISFIABLE), "unsatisfiable");
}
END_TEST

/* A long list is parsed in one pass, and one bad element anywhere makes the whole invalid. */
START_TEST(test_range_long_list)
{
    char h[8192] = "bytes=";
    size_t at = strlen(h);
    for (int i = 0; i < 500; i++) at += (size_t)snprintf(h + at, sizeof h - at, "%d-%d, ", i, i);
    uint64_t from, to;
    ck_assert_int_eq(qd_range_parse(h, 10000, &from, &to), QD_RANGE_MULTI);
    snprintf(h + at, sizeof h - at, "+1-2");
    ck_assert_int_eq(qd_range_parse(h, 10000, &from, &to), QD_RANGE_INVALID);
}
END_TEST

/* ---- If-None-Match ----------------------------------------------------------------------------
 */

#define TAG "\"0123abcd\""

START_TEST(test_inm_matches)
{
    static const char *const yes[] = {
        TAG,
        "*",
        " * ",
        "W/" TAG, /* weak comparison: W/ ignored on the request's side */
        "\"xyzzy\", " TAG,
        TAG ", \"xyzzy\"",
        "\"xyzzy\"," TAG ",\"r2d2xxxx\"",
        "W/\"xyzzy\", W/" TAG,
        "\"a\" ,\t" TAG,
        " " TAG " ",
        ", " TAG " ,",
        "\"\", " TAG, /* an empty opaque-tag is a valid entity-tag */
    };
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
        ck_assert_msg(qd_etag_none_match(yes[i], TAG), "If-None-Match: %s should match", yes[i]);
    /* and W/ on the server's side */
    ck_assert(qd_etag_none_match(TAG, "W/" TAG));
    ck_assert(qd_etag_none_match("W/" TAG, "W/" TAG));
    ck_assert(qd_etag_none_match("*", "W/" TAG));
}
END_TEST

START_TEST(test_inm_no_match)
{
    static const char *const no[] = {
        "\"xyzzy\"",
        "\"xyzzy\", \"r2d2xxxx\"",
        "\"0123ABCD\"",  /* opaque-tags compare byte for byte */
        "\"0123abcd",    /* unterminated */
        "0123abcd",      /* unquoted */
        "w/" TAG,        /* W/ is case-sensitive */
        "W/ " TAG,       /* nothing between W/ and the quote */
        "W" TAG,         /* not W/ */
        "\"0123 abcd\"", /* a space is not etagc */
        "\"a\"\"b\"",    /* two tags with no comma between them */
        TAG " \"a\"",    /* nor with only a space */
        TAG ", bogus",   /* one element malformed: the whole value is */
        "bogus, " TAG,
        "*, " TAG, /* '*' stands alone */
        TAG ", *",
        "**",
        "",
        " ",
        ",",
        "\"0123abcd\"x",
    };
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
        ck_assert_msg(!qd_etag_none_match(no[i], TAG), "If-None-Match: %s should not match", no[i]);
    ck_assert(!qd_etag_none_match(NULL, TAG));
    ck_assert(!qd_etag_none_match("*", "not-a-tag")); /* the server's tag must be valid */
    ck_assert(!qd_etag_none_match(TAG, TAG "x"));
    ck_assert(!qd_etag_none_match("\"a\x7f\"", "\"a\x7f\""));      /* DEL is not etagc */
    ck_assert(qd_etag_none_match("\"\xc3\xa9\"", "\"\xc3\xa9\"")); /* obs-text is */
}
END_TEST

Suite *suite_range(void)
{
    Suite *s = suite_create("range");
    TCase *tc = tcase_create("parsers");
    tcase_add_test(tc, test_range_single);
    tcase_add_test(tc, test_range_invalid);
    tcase_add_test(tc, test_range_sets);
    tcase_add_test(tc, test_range_long_list);
    tcase_add_test(tc, test_inm_matches);
    tcase_add_test(tc, test_inm_no_match);
    suite_add_tcase(s, tc);
    return s;
}
