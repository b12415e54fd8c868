/* test_pack.c -- nibble packing: layout (2i low, 2i+1 high), odd last dims, sign extension.
 * SPDX-License-Identifier: Apache-2.0
 */
#include "../testutil.h"

START_TEST(pack_layout_and_round_trip)
{
    const uint8_t codes[2 * 5] = {1, 2, 3, 4, 5, 0xf, 0x8, 0x7, 0x0, 0xe};
    uint8_t packed[2 * 3], back[2 * 5];
    quant_pack_nibbles(codes, 2, 5, packed);
    const uint8_t want[6] = {0x21, 0x43, 0x05, 0x8f, 0x07, 0x0e};
    ck_assert_int_eq(memcmp(packed, want, 6), 0);
    quant_unpack_nibbles(packed, 2, 5, false, back);
    ck_assert_int_eq(memcmp(back, codes, 10), 0);
    quant_unpack_nibbles(packed, 2, 5, true, back);
    ck_assert_int_eq((int8_t)back[5], -1);
    ck_assert_int_eq((int8_t)back[6], -8);
    ck_assert_int_eq((int8_t)back[7], 7);
    ck_assert_int_eq((int8_t)back[9], -2);
}
END_TEST

START_TEST(pack_random_widths)
{
    tu_rng r = {17};
    for (int it = 0; it < 200; it++) {
        int64_t rows = 1 + tu_below(&r, 5), n = 1 + tu_below(&r, 70);
        uint8_t codes[5 * 70], packed[5 * 35], back[5 * 70];
        for (int64_t i = 0; i < rows * n; i++) codes[i] = (uint8_t)tu_below(&r, 16);
        quant_pack_nibbles(codes, rows, n, packed);
        quant_unpack_nibbles(packed, rows, n, false, back);
        ck_assert_int_eq(memcmp(codes, back, (size_t)(rows * n)), 0);
        if (n % 2) /* the spare high nibble of each row is zero */
            for (int64_t row = 0; row < rows; row++)
                ck_assert_int_eq(packed[row * ((n + 1) / 2) + n / 2] >> 4, 0);
    }
}
END_TEST

/* Every byte value, both extensions, even and odd widths: each nibble comes back as the literal
 * definition says (zero-extended, or bit 3 copied into the high four bits). */
START_TEST(unpack_every_byte)
{
    uint8_t packed[256], back[512];
    for (int i = 0; i < 256; i++) packed[i] = (uint8_t)i;
    for (int se = 0; se < 2; se++)
        for (int64_t n = 511; n <= 512; n++) {
            quant_unpack_nibbles(packed, 1, n, se, back);
            for (int64_t i = 0; i < n; i++) {
                uint8_t v = (uint8_t)((packed[i / 2] >> (i % 2 * 4)) & 0x0f);
                if (se && (v & 0x08)) v |= 0xf0;
                ck_assert_msg(back[i] == v, "byte %#x nibble %lld sign %d: %#x", packed[i / 2],
                              (long long)(i % 2), se, back[i]);
            }
        }
}
END_TEST

Suite *suite_pack(void)
{
    Suite *s = suite_create("pack");
    TCase *tc = tcase_create("nibbles");
    tcase_add_test(tc, pack_layout_and_round_trip);
    tcase_add_test(tc, pack_random_widths);
    tcase_add_test(tc, unpack_every_byte);
    suite_add_tcase(s, tc);
    return s;
}
