/* test_fsutil.c -- the file-system helpers the daemon's answers depend on: server paths taken
 * out of error messages (qd_scrub_paths).
 * SPDX-License-Identifier: Apache-2.0
 */
#include <string.h>

#include "fsutil.h"
#include "qdtest.h"

static void scrubbed(const char *msg, const char *want)
{
    const char *paths[] = {"/srv/var", "/srv/var/jobs/7", "./rel/dir/", "/models", NULL};
    char out[256];
    qd_scrub_paths(msg, paths, 5, out, sizeof out);
    ck_assert_msg(strcmp(out, want) == 0, "'%s' -> '%s', wanted '%s'", msg, out, want);
}

START_TEST(test_scrub)
{
    scrubbed("/srv/var/jobs/7/output.partial-x/a.safetensors: write failed: No space left",
             "output.partial-x/a.safetensors: write failed: No space left");
    scrubbed("/srv/var/tmp/upload-1: fsync: EIO", "tmp/upload-1: fsync: EIO");
    scrubbed("cannot open /srv/var", "cannot open (server)");
    scrubbed("/srv/variant/x", "/srv/variant/x"); /* not a path of the list: a prefix only */
    scrubbed("./rel/dir/q.db and /models/llama/config.json", "q.db and llama/config.json");
    scrubbed("no paths here", "no paths here");
    char tiny[8];
    const char *p[] = {"/a"};
    qd_scrub_paths("/a/bcdefghijklmn", p, 1, tiny, sizeof tiny);
    ck_assert_str_eq(tiny, "bcdefgh");
    qd_scrub_paths("/a", p, 1, tiny, sizeof tiny);
    ck_assert_str_eq(tiny, "(server"); /* cut to the buffer, still terminated */
}
END_TEST

Suite *suite_fsutil(void)
{
    Suite *s = suite_create("fsutil");
    TCase *tc = tcase_create("fsutil");
    tcase_add_test(tc, test_scrub);
    suite_add_tcase(s, tc);
    return s;
}
