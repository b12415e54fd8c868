/* test_confine.c -- the run's confinement (quant_pipeline_options.input_dir_fd and no_symlinks)
 * and quant_open_beneath(): a copy of the stories260K fixture under a temporary "root" opened as
 * a descriptor, quantized as quantd would (in = "model", links refused); every symbolic link the
 * run would read through (top path, intermediate component, shard, index, config.json, a copied
 * file, a directory among the extras, a link made while the run is going) fails it with
 * QUANT_CK_ERR_ACCESS naming the entry and leaves nothing at OUT; FIFOs never block; paths that
 * are not plain components are refused; a plain copy quantizes to the same bytes as a normal
 * run; and the default options still follow links (a Hugging Face cache snapshot).
 * SPDX-License-Identifier: Apache-2.0
 */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckutil.h"
#include "quant_pipeline.h"

#define FIXTURE  "stories260K-bf16-sharded"
#define SHARD1   "model-00001-of-00002.safetensors"
#define SHARD2   "model-00002-of-00002.safetensors"
#define INDEX    "model.safetensors.index.json"
#define LINK     "a symbolic link (quantd does not follow links)"
#define NOTPLAIN "not a plain relative path (no '..', '.', empty components or leading '/')"

static const char rules[] = "[{\"module_path\": \".*proj\", \"weight_qtype\": \"int8\"}]";
static const char *const fixture_files[] = {SHARD1, SHARD2, INDEX, "config.json"};

/* A test's directories: tmp/root (opened as root_fd) holding root/model, a plain copy of the
 * fixture, and tmp/outs where outputs go (empty after a refused run). */
typedef struct fixture {
    char *tmp, *root, *model, *outs, *out;
    int root_fd;
} fixture;

static void copy_file(const char *from, const char *to)
{
    size_t n = 0;
    void *data = kit_read_file(from, &n);
    ck_assert_msg(data != NULL, "cannot read %s", from);
    ck_write_file(to, data, n);
    free(data);
}

static char *fx_path(const fixture *f, const char *rel)
{
    return kit_join(f->root, rel);
}

static fixture fx_new(void)
{
    fixture f = {.tmp = ck_tmpdir()};
    f.root = kit_join(f.tmp, "root");
    f.model = kit_join(f.root, "model");
    f.outs = kit_join(f.tmp, "outs");
    f.out = kit_join(f.outs, "out");
    ck_assert_int_eq(mkdir(f.root, 0755), 0);
    ck_assert_int_eq(mkdir(f.model, 0755), 0);
    ck_assert_int_eq(mkdir(f.outs, 0755), 0);
    char *src = kit_join(ck_data_dir(), FIXTURE);
    for (size_t i = 0; i < sizeof fixture_files / sizeof fixture_files[0]; i++) {
        char *from = kit_join(src, fixture_files[i]), *to = kit_join(f.model, fixture_files[i]);
        copy_file(from, to);
        free(from);
        free(to);
    }
    free(src);
    f.root_fd = open(f.root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ck_assert_int_ge(f.root_fd, 0);
    return f;
}

static void fx_free(fixture *f)
{
    close(f->root_fd);
    kit_rmtree(f->tmp);
    free(f->tmp);
    free(f->root);
    free(f->model);
    free(f->outs);
    free(f->out);
}

/* root/rel becomes a symbolic link to `target`. */
static void make_link(const fixture *f, const char *target, const char *rel)
{
    char *path = fx_path(f, rel);
    unlink(path);
    ck_assert_msg(symlink(target, path) == 0, "symlink %s: %s", path, strerror(errno));
    free(path);
}

/* root/from moves to root/to. */
static void move(const fixture *f, const char *from, const char *to)
{
    char *a = fx_path(f, from), *b = fx_path(f, to);
    ck_assert_msg(rename(a, b) == 0, "rename %s: %s", a, strerror(errno));
    free(a);
    free(b);
}

static void write_text(const fixture *f, const char *rel, const char *text)
{
    char *path = fx_path(f, rel);
    ck_write_file(path, text, strlen(text));
    free(path);
}

static void confined_options(const fixture *f, quant_pipeline_options *o)
{
    quant_pipeline_options_init(o);
    o->chunk_bytes = 64u << 10;
    o->input_dir_fd = f->root_fd;
    o->no_symlinks = true;
}

/* The run quantd makes: `in` under the root, links refused, into f->out. */
static quant_ck_status run_confined(const fixture *f, const char *in, quant_layout layout,
                                    quant_ck_error *err)
{
    quant_pipeline_options o;
    confined_options(f, &o);
    o.layout = layout;
    return ck_quantize(rules, in, f->out, &o, NULL, err);
}

/* Descriptors open in this process (-1 where /proc/self/fd is not there): a run leaks none. */
static int open_fds(void)
{
    return ck_count_entries("/proc/self/fd");
}

/* The run fails with `status`, its message holds `needle`, nothing is left in outs and no
 * descriptor stays open. */
static void expect_refused_as(const fixture *f, const char *in, quant_layout layout,
                              quant_ck_status status, const char *needle)
{
    quant_ck_error err = {0};
    int fds = open_fds();
    quant_ck_status st = run_confined(f, in, layout, &err);
    ck_assert_int_eq(open_fds(), fds);
    ck_assert_msg(st == status, "in '%s': status %d (%s), want %d", in, (int)st, err.message,
                  (int)status);
    ck_assert_msg(strstr(err.message, needle) != NULL, "in '%s': message '%s' lacks '%s'", in,
                  err.message, needle);
    ck_assert_msg(ck_count_entries(f->outs) == 0, "in '%s': something was left at OUT", in);
}

static void expect_refused(const fixture *f, const char *in, const char *needle)
{
    expect_refused_as(f, in, QUANT_LAYOUT_NATIVE, QUANT_CK_ERR_ACCESS, needle);
}

/* Every entry of directory a is in b with the same bytes, and b has no other. */
static void same_files(const char *a, const char *b)
{
    ck_assert_int_eq(ck_count_entries(a), ck_count_entries(b));
    static const char *const names[] = {SHARD1, SHARD2, INDEX, "config.json", "tokenizer.json"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char *pa = kit_join(a, names[i]), *pb = kit_join(b, names[i]);
        size_t na = 0, nb = 0;
        void *da = kit_read_file(pa, &na), *db = kit_read_file(pb, &nb);
        ck_assert_msg(da && db, "%s or %s is missing", pa, pb);
        ck_assert_msg(na == nb && memcmp(da, db, na) == 0, "%s and %s differ", pa, pb);
        free(da);
        free(db);
        free(pa);
        free(pb);
    }
}

/* ---- the positive cases --------------------------------------------------------------------- */

/* A plain copy quantizes under confinement to exactly the bytes of a normal run; a real
 * subdirectory among the extras is skipped as before; map_input works over the descriptors. */
START_TEST(test_plain_copy_same_output)
{
    fixture f = fx_new();
    write_text(&f, "model/tokenizer.json", "{\"version\":\"1.0\"}");
    char *sub = fx_path(&f, "model/sub");
    ck_assert_int_eq(mkdir(sub, 0755), 0);
    write_text(&f, "model/sub/notes.txt", "not copied");
    char *plain = kit_join(f.tmp, "plain");
    quant_pipeline_options o;
    quant_pipeline_options_init(&o);
    o.chunk_bytes = 64u << 10;
    quant_ck_error err;
    ck_assert_msg(ck_quantize(rules, f.model, plain, &o, NULL, &err) == QUANT_CK_OK, "%s",
                  err.message);
    for (int map = 0; map < 2; map++) {
        confined_options(&f, &o);
        o.map_input = map;
        quant_report *rep = NULL;
        int fds = open_fds();
        ck_assert_msg(ck_quantize(rules, "model", f.out, &o, &rep, &err) == QUANT_CK_OK, "%s",
                      err.message);
        ck_assert_int_eq(open_fds(), fds);
        ck_assert_uint_gt(quant_report_count(rep), 0);
        ck_assert_str_eq(quant_report_entry_at(rep, 0)->shard, SHARD1);
        quant_report_free(rep);
        same_files(plain, f.out);
        kit_rmtree(f.out);
    }
    free(sub);
    free(plain);
    fx_free(&f);
}
END_TEST

/* A single file as `in`, and a nested `in`, under the root. */
START_TEST(test_file_and_nested_in)
{
    fixture f = fx_new();
    char *deep = fx_path(&f, "a");
    ck_assert_int_eq(mkdir(deep, 0755), 0);
    move(&f, "model", "a/model");
    quant_ck_error err;
    ck_assert_msg(run_confined(&f, "a/model", QUANT_LAYOUT_NATIVE, &err) == QUANT_CK_OK, "%s",
                  err.message);
    kit_rmtree(f.out);
    ck_assert_msg(run_confined(&f, "a/model/" SHARD2, QUANT_LAYOUT_NATIVE, &err) == QUANT_CK_OK,
                  "%s", err.message);
    quant_st_file *out = NULL;
    ck_assert_msg(quant_st_open(f.out, &out, &err) == QUANT_CK_OK, "%s", err.message);
    ck_assert_uint_gt(out->n_tensors, 0);
    quant_st_close(out);
    free(deep);
    fx_free(&f);
}
END_TEST

/* Hard links are not refused: a hard link is the file itself, not a path to another. */
START_TEST(test_hard_link_copied)
{
    fixture f = fx_new();
    write_text(&f, "vocab.txt", "a b c");
    char *from = fx_path(&f, "vocab.txt"), *to = fx_path(&f, "model/vocab.txt");
    ck_assert_int_eq(link(from, to), 0);
    quant_ck_error err;
    ck_assert_msg(run_confined(&f, "model", QUANT_LAYOUT_NATIVE, &err) == QUANT_CK_OK, "%s",
                  err.message);
    char *copied = kit_join(f.out, "vocab.txt");
    size_t n = 0;
    char *text = kit_read_file(copied, &n);
    ck_assert(text && n == 5 && memcmp(text, "a b c", 5) == 0);
    free(text);
    free(copied);
    free(from);
    free(to);
    fx_free(&f);
}
END_TEST

/* compressed-tensors reads config.json through the confined path too: a plain one gets its
 * quantization_config, a linked one is refused. */
START_TEST(test_ctensors_config)
{
    fixture f = fx_new();
    quant_ck_error err;
    ck_assert_msg(run_confined(&f, "model", QUANT_LAYOUT_CTENSORS, &err) == QUANT_CK_OK, "%s",
                  err.message);
    char *cfg = kit_join(f.out, "config.json");
    size_t n = 0;
    char *text = kit_read_file(cfg, &n);
    ck_assert(text && strstr(text, "quantization_config"));
    free(text);
    free(cfg);
    kit_rmtree(f.out);
    write_text(&f, "real-config.json", "{\"model_type\":\"llama\"}");
    make_link(&f, "../real-config.json", "model/config.json");
    expect_refused_as(&f, "model", QUANT_LAYOUT_CTENSORS, QUANT_CK_ERR_ACCESS,
                      "model/config.json: " LINK);
    make_link(&f, "/etc/passwd", "model/config.json");
    expect_refused_as(&f, "model", QUANT_LAYOUT_CTENSORS, QUANT_CK_ERR_ACCESS,
                      "model/config.json: " LINK);
    fx_free(&f);
}
END_TEST

/* ---- links refused -------------------------------------------------------------------------- */

START_TEST(test_config_link_outside)
{
    fixture f = fx_new();
    make_link(&f, "/etc/passwd", "model/config.json");
    expect_refused(&f, "model", "model/config.json: " LINK);
    fx_free(&f);
}
END_TEST

/* Links are not followed at all, even to a file inside the root. */
START_TEST(test_config_link_inside)
{
    fixture f = fx_new();
    move(&f, "model/config.json", "config-elsewhere.json");
    make_link(&f, "../config-elsewhere.json", "model/config.json");
    expect_refused(&f, "model", "model/config.json: " LINK);
    fx_free(&f);
}
END_TEST

static void count_progress(void *user, const quant_progress *p)
{
    (void)p;
    (*(int *)user)++;
}

/* Refused before any work: the other files are checked before the first shard is read. */
START_TEST(test_extra_link_proc)
{
    fixture f = fx_new();
    make_link(&f, "/proc/self/environ", "model/tokenizer.json");
    expect_refused(&f, "model", "model/tokenizer.json: " LINK);
    quant_pipeline_options o;
    confined_options(&f, &o);
    int calls = 0;
    o.progress = count_progress;
    o.progress_user = &calls;
    quant_ck_error err;
    ck_assert_int_eq(ck_quantize(rules, "model", f.out, &o, NULL, &err), QUANT_CK_ERR_ACCESS);
    ck_assert_int_eq(calls, 0);
    fx_free(&f);
}
END_TEST

/* A shard linked to the real shard elsewhere: refused with the index and without (glob). */
START_TEST(test_shard_link)
{
    fixture f = fx_new();
    char *elsewhere = fx_path(&f, "elsewhere");
    ck_assert_int_eq(mkdir(elsewhere, 0755), 0);
    move(&f, "model/" SHARD2, "elsewhere/" SHARD2);
    char *target = kit_join(elsewhere, SHARD2);
    make_link(&f, target, "model/" SHARD2);
    expect_refused(&f, "model", "model/" SHARD2 ": " LINK);
    char *index = fx_path(&f, "model/" INDEX);
    ck_assert_int_eq(unlink(index), 0);
    expect_refused(&f, "model", "model/" SHARD2 ": " LINK);
    free(index);
    free(target);
    free(elsewhere);
    fx_free(&f);
}
END_TEST

START_TEST(test_index_link)
{
    fixture f = fx_new();
    move(&f, "model/" INDEX, "index.json");
    make_link(&f, "../index.json", "model/" INDEX);
    expect_refused(&f, "model", "model/" INDEX ": " LINK);
    fx_free(&f);
}
END_TEST

/* `in` itself a link to a directory, and a link as an intermediate component. */
START_TEST(test_in_link)
{
    fixture f = fx_new();
    make_link(&f, "model", "link");
    expect_refused(&f, "link", "link: " LINK);
    char *real = fx_path(&f, "real");
    ck_assert_int_eq(mkdir(real, 0755), 0);
    move(&f, "model", "real/model");
    make_link(&f, "real", "a");
    expect_refused(&f, "a/model", "a: " LINK);
    make_link(&f, "../real/model", "real/b");
    expect_refused(&f, "real/b/" SHARD1, "real/b: " LINK);
    free(real);
    fx_free(&f);
}
END_TEST

/* A linked directory among the extras is refused (a real one is skipped: see above). */
START_TEST(test_extra_dir_link)
{
    fixture f = fx_new();
    make_link(&f, "/etc", "model/extra");
    expect_refused(&f, "model", "model/extra: " LINK);
    fx_free(&f);
}
END_TEST

/* A link that appears while the run goes (after the check before any work) is refused by the
 * copy, which opens each file with O_NOFOLLOW. */
static void make_late_link(void *user, const quant_progress *p)
{
    (void)p;
    const fixture *f = user;
    char *path = fx_path(f, "model/late.txt");
    if (symlink("/etc/passwd", path) != 0) ck_assert_int_eq(errno, EEXIST);
    free(path);
}

START_TEST(test_late_link)
{
    fixture f = fx_new();
    quant_pipeline_options o;
    confined_options(&f, &o);
    o.progress = make_late_link;
    o.progress_user = &f;
    quant_ck_error err;
    ck_assert_int_eq(ck_quantize(rules, "model", f.out, &o, NULL, &err), QUANT_CK_ERR_ACCESS);
    ck_assert_msg(strstr(err.message, "model/late.txt: " LINK), "%s", err.message);
    ck_assert_int_eq(ck_count_entries(f.outs), 0);
    fx_free(&f);
}
END_TEST

/* ---- FIFOs and bad paths -------------------------------------------------------------------- */

/* A FIFO among the extras is skipped without blocking the run. */
START_TEST(test_fifo_extra)
{
    fixture f = fx_new();
    char *fifo = fx_path(&f, "model/notes.txt");
    ck_assert_int_eq(mkfifo(fifo, 0644), 0);
    quant_ck_error err;
    ck_assert_msg(run_confined(&f, "model", QUANT_LAYOUT_NATIVE, &err) == QUANT_CK_OK, "%s",
                  err.message);
    char *copied = kit_join(f.out, "notes.txt");
    ck_assert_int_ne(access(copied, F_OK), 0);
    free(copied);
    free(fifo);
    fx_free(&f);
}
END_TEST

/* A FIFO named like a shard (no index: every *.safetensors is one) fails at once, confined or
 * not; so does a FIFO in place of the index. */
START_TEST(test_fifo_shard)
{
    fixture f = fx_new();
    char *index = fx_path(&f, "model/" INDEX), *fifo = fx_path(&f, "model/zz.safetensors");
    ck_assert_int_eq(unlink(index), 0);
    ck_assert_int_eq(mkfifo(fifo, 0644), 0);
    expect_refused_as(&f, "model", QUANT_LAYOUT_NATIVE, QUANT_CK_ERR_IO,
                      "model/zz.safetensors: not a regular file");
    quant_ck_error err;
    ck_assert_int_eq(ck_quantize(rules, f.model, f.out, NULL, NULL, &err), QUANT_CK_ERR_IO);
    ck_assert_msg(strstr(err.message, "zz.safetensors: not a regular file"), "%s", err.message);
    ck_assert_int_eq(ck_count_entries(f.outs), 0);
    ck_assert_int_eq(unlink(fifo), 0);
    ck_assert_int_eq(mkfifo(index, 0644), 0); /* the index a FIFO: an error too */
    expect_refused_as(&f, "model", QUANT_LAYOUT_NATIVE, QUANT_CK_ERR_IO,
                      "model/" INDEX ": not a regular file");
    free(index);
    free(fifo);
    fx_free(&f);
}
END_TEST

START_TEST(test_bad_paths)
{
    fixture f = fx_new();
    static const char *const bad[] = {"../x", "/abs",           "a//b",    "./a", "model/",
                                      "",     "model/../model", "model/.", "..",  "."};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) expect_refused(&f, bad[i], NOTPLAIN);
    char *abs = fx_path(&f, "model");
    expect_refused(&f, abs, NOTPLAIN); /* an absolute path, even one inside the root */
    free(abs);
    fx_free(&f);
}
END_TEST

/* ---- the default still follows links -------------------------------------------------------- */

/* A Hugging Face cache snapshot (every file a link into ../../blobs): the default options follow
 * the links; no_symlinks refuses the first one. */
START_TEST(test_default_follows_links)
{
    fixture f = fx_new();
    char *blobs = fx_path(&f, "blobs"), *snaps = fx_path(&f, "snapshots");
    char *rev = fx_path(&f, "snapshots/rev");
    ck_assert_int_eq(mkdir(blobs, 0755), 0);
    ck_assert_int_eq(mkdir(snaps, 0755), 0);
    ck_assert_int_eq(mkdir(rev, 0755), 0);
    for (size_t i = 0; i < sizeof fixture_files / sizeof fixture_files[0]; i++) {
        char from[256], blob[64], target[80], name[256];
        snprintf(from, sizeof from, "model/%s", fixture_files[i]);
        snprintf(blob, sizeof blob, "blobs/%zu", i);
        snprintf(target, sizeof target, "../../%s", blob);
        snprintf(name, sizeof name, "snapshots/rev/%s", fixture_files[i]);
        move(&f, from, blob);
        make_link(&f, target, name);
    }
    quant_pipeline_options o;
    quant_pipeline_options_init(&o);
    o.chunk_bytes = 64u << 10;
    o.input_dir_fd = f.root_fd;
    quant_ck_error err;
    ck_assert_msg(ck_quantize(rules, "snapshots/rev", f.out, &o, NULL, &err) == QUANT_CK_OK, "%s",
                  err.message);
    kit_rmtree(f.out);
    o.input_dir_fd = AT_FDCWD;
    ck_assert_msg(ck_quantize(rules, rev, f.out, &o, NULL, &err) == QUANT_CK_OK, "%s", err.message);
    kit_rmtree(f.out);
    expect_refused(&f, "snapshots/rev", ": " LINK);
    free(blobs);
    free(snaps);
    free(rev);
    fx_free(&f);
}
END_TEST

/* ---- quant_open_beneath() ------------------------------------------------------------------- */

/* quant_open_beneath fails with `status` and exactly `message`. */
static void beneath_fails(int dir_fd, const char *rel, int flags, quant_ck_status status,
                          const char *message)
{
    quant_ck_error err = {0};
    int fd = quant_open_beneath(dir_fd, rel, flags, &err);
    if (fd >= 0) close(fd);
    ck_assert_msg(fd == -1, "'%s' opened", rel);
    ck_assert_msg(err.status == status, "'%s': status %d (%s), want %d", rel, (int)err.status,
                  err.message, (int)status);
    ck_assert_msg(strcmp(err.message, message) == 0, "'%s': message '%s', want '%s'", rel,
                  err.message, message);
}

START_TEST(test_beneath_opens)
{
    fixture f = fx_new();
    quant_ck_error err;
    int fd = quant_open_beneath(f.root_fd, "model/config.json", O_RDONLY, &err);
    ck_assert_msg(fd >= 0, "%s", err.message);
    ck_assert_int_eq(fcntl(fd, F_GETFL) & O_NONBLOCK, 0);
    ck_assert_int_ne(fcntl(fd, F_GETFD) & FD_CLOEXEC, 0);
    char c;
    ck_assert_int_eq(read(fd, &c, 1), 1);
    ck_assert_int_eq(c, '{');
    close(fd);
    fd = quant_open_beneath(f.root_fd, "model", O_RDONLY | O_DIRECTORY, &err);
    ck_assert_msg(fd >= 0, "%s", err.message);
    struct stat sb;
    ck_assert(fstat(fd, &sb) == 0 && S_ISDIR(sb.st_mode));
    close(fd);
    fd = quant_open_beneath(f.root_fd, "model", O_RDONLY, &err); /* a file or a directory */
    ck_assert_msg(fd >= 0, "%s", err.message);
    ck_assert(fstat(fd, &sb) == 0 && S_ISDIR(sb.st_mode));
    close(fd);
    char *d1 = fx_path(&f, "model/d1");
    ck_assert_int_eq(mkdir(d1, 0755), 0);
    write_text(&f, "model/d1/f", "x");
    int fds = open_fds();
    fd = quant_open_beneath(f.root_fd, "model/d1/f", O_RDONLY, &err);
    ck_assert_msg(fd >= 0, "%s", err.message);
    ck_assert_int_eq(open_fds(), fds + 1); /* the intermediate directories are closed */
    close(fd);
    beneath_fails(f.root_fd, "model/d1/f/g", O_RDONLY, QUANT_CK_ERR_IO,
                  "model/d1/f: Not a directory");
    ck_assert_int_eq(open_fds(), fds);
    free(d1);
    beneath_fails(f.root_fd, "model/config.json", O_RDONLY | O_DIRECTORY, QUANT_CK_ERR_IO,
                  "model/config.json: Not a directory");
    beneath_fails(f.root_fd, "model/config.json/x", O_RDONLY, QUANT_CK_ERR_IO,
                  "model/config.json: Not a directory");
    beneath_fails(f.root_fd, "model/nope/x", O_RDONLY, QUANT_CK_ERR_IO,
                  "model/nope: No such file or directory");
    beneath_fails(f.root_fd, "model/nope", O_RDONLY, QUANT_CK_ERR_IO,
                  "model/nope: No such file or directory");
    fx_free(&f);
}
END_TEST

START_TEST(test_beneath_refuses)
{
    fixture f = fx_new();
    make_link(&f, "model", "llama");
    make_link(&f, "config.json", "model/cfg");
    beneath_fails(f.root_fd, "llama/config.json", O_RDONLY, QUANT_CK_ERR_ACCESS, "llama: " LINK);
    beneath_fails(f.root_fd, "llama", O_RDONLY | O_DIRECTORY, QUANT_CK_ERR_ACCESS, "llama: " LINK);
    beneath_fails(f.root_fd, "llama", O_RDONLY, QUANT_CK_ERR_ACCESS, "llama: " LINK);
    beneath_fails(f.root_fd, "model/cfg", O_RDONLY, QUANT_CK_ERR_ACCESS, "model/cfg: " LINK);
    beneath_fails(f.root_fd, "../x", O_RDONLY, QUANT_CK_ERR_ACCESS, "../x: " NOTPLAIN);
    beneath_fails(f.root_fd, "/etc/passwd", O_RDONLY, QUANT_CK_ERR_ACCESS,
                  "/etc/passwd: " NOTPLAIN);
    beneath_fails(f.root_fd, "model//config.json", O_RDONLY, QUANT_CK_ERR_ACCESS,
                  "model//config.json: " NOTPLAIN);
    beneath_fails(f.root_fd, "model/", O_RDONLY | O_DIRECTORY, QUANT_CK_ERR_ACCESS,
                  "model/: " NOTPLAIN);
    char *fifo = fx_path(&f, "model/fifo");
    ck_assert_int_eq(mkfifo(fifo, 0644), 0);
    int fds = open_fds();
    beneath_fails(f.root_fd, "model/fifo", O_RDONLY, QUANT_CK_ERR_IO,
                  "model/fifo: not a regular file or a directory");
    beneath_fails(f.root_fd, "model/fifo", O_RDONLY | O_DIRECTORY, QUANT_CK_ERR_IO,
                  "model/fifo: Not a directory");
    beneath_fails(f.root_fd, "model/config.json/x", O_RDONLY, QUANT_CK_ERR_IO,
                  "model/config.json: Not a directory");
    beneath_fails(f.root_fd, "llama/config.json", O_RDONLY, QUANT_CK_ERR_ACCESS, "llama: " LINK);
    ck_assert_int_eq(open_fds(), fds);
    quant_ck_error err;
    ck_assert_int_eq(quant_open_beneath(f.root_fd, "model/x", O_WRONLY | O_CREAT, &err), -1);
    ck_assert_int_eq(err.status, QUANT_CK_ERR_ARG);
    ck_assert_int_eq(quant_open_beneath(f.root_fd, NULL, O_RDONLY, &err), -1);
    ck_assert_int_eq(err.status, QUANT_CK_ERR_ARG);
    ck_assert_int_eq(quant_open_beneath(f.root_fd, "model/nope", O_RDONLY, NULL), -1);
    char *created = fx_path(&f, "model/x");
    ck_assert_int_ne(access(created, F_OK), 0);
    free(created);
    free(fifo);
    fx_free(&f);
}
END_TEST

Suite *suite_confine(void)
{
    Suite *s = suite_create("confine");
    TCase *tc = tcase_create("confine");
    tcase_set_timeout(tc, 60); /* a FIFO that blocked would hang here */
    tcase_add_test(tc, test_plain_copy_same_output);
    tcase_add_test(tc, test_file_and_nested_in);
    tcase_add_test(tc, test_hard_link_copied);
    tcase_add_test(tc, test_ctensors_config);
    tcase_add_test(tc, test_config_link_outside);
    tcase_add_test(tc, test_config_link_inside);
    tcase_add_test(tc, test_extra_link_proc);
    tcase_add_test(tc, test_shard_link);
    tcase_add_test(tc, test_index_link);
    tcase_add_test(tc, test_in_link);
    tcase_add_test(tc, test_extra_dir_link);
    tcase_add_test(tc, test_late_link);
    tcase_add_test(tc, test_fifo_extra);
    tcase_add_test(tc, test_fifo_shard);
    tcase_add_test(tc, test_bad_paths);
    tcase_add_test(tc, test_default_follows_links);
    tcase_add_test(tc, test_beneath_opens);
    tcase_add_test(tc, test_beneath_refuses);
    suite_add_tcase(s, tc);
    return s;
}
