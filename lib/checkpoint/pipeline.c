/* pipeline.c -- one shard through three overlapped stages: a reader thread (pread into units;
 * for an input still arriving each unit waits for its last byte, and the shard's size is checked
 * once it is whole),
 * the compute stage in the calling thread (libquant's pool does the math), and a writer thread
 * (pwrite of every output piece at its planned offset). Bounded queues between the stages keep
 * the number of buffers in flight, hence memory, fixed whatever the shard or tensor size. The
 * shard's static activation scales (small, given by the caller) are written before the stages
 * start.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ck_internal.h"

typedef struct pipe {
    ck_run *run;
    ck_shard_plan *sp;
    quant_st_writer *w;
    ck_queue to_compute, to_write;
    atomic_int failed;
    pthread_mutex_t err_mu;
    quant_ck_error err; /* the first error of any stage */
} pipe_t;

static void pipe_fail(pipe_t *p, const quant_ck_error *e)
{
    pthread_mutex_lock(&p->err_mu);
    if (!atomic_load(&p->failed)) {
        p->err = *e;
        atomic_store(&p->failed, 1);
    }
    pthread_mutex_unlock(&p->err_mu);
}

static bool cancelled(pipe_t *p)
{
    atomic_int *flag = p->run->opts->cancel;
    if (!flag || !atomic_load(flag)) return false;
    quant_ck_error e;
    quant_ck_fail(&e, QUANT_CK_ERR_CANCELLED, "cancelled");
    pipe_fail(p, &e);
    return true;
}

static void release_input(ck_unit *u)
{
    if (u->map_base)
        ck_unmap(u->map_base, u->map_len);
    else
        ck_buf_free(u->in_buf, u->in_len);
    u->in_buf = u->map_base = NULL;
}

static void unit_free(ck_unit *u)
{
    if (!u) return;
    release_input(u);
    for (size_t i = 0; i < u->n_pieces; i++) ck_buf_free(u->piece[i].buf, u->piece[i].alloc);
    free(u);
}

/* ---- reader ---------------------------------------------------------------------------------- */

/* The unit's input bytes: a buffer read with pread (copied units always: the writer takes it),
 * or, with map_input, a read-only mapping of the file (no copy). Errors name the file (those of
 * quant_st_read, which waits for a file still arriving, name it already). */
static quant_ck_status load_input(pipe_t *p, ck_unit *u, quant_ck_error *e)
{
    const quant_st_tensor *t = u->tp->in;
    uint64_t at = p->sp->in->data_start + t->begin + u->in_off;
    /* a mapping only when the data is aligned for the kernels (a header not padded to a
     * multiple of 8 leaves it misaligned: then the copy aligns it) */
    if (u->kind != CK_UNIT_COPY && p->run->opts->map_input &&
        at % (uint64_t)quant_dtype_size(u->tp->in_dtype) == 0) {
        u->in_buf = ck_map_range(p->sp->in->fd, at, u->in_len, &u->map_base, &u->map_len);
        if (u->in_buf) return QUANT_CK_OK;
    }
    if (!(u->in_buf = ck_buf_alloc(u->in_len)))
        return quant_ck_fail(e, QUANT_CK_ERR_NOMEM, "%s: out of memory for a %llu-byte buffer",
                             p->sp->in->path, (unsigned long long)u->in_len);
    return quant_st_read(p->sp->in, t, u->in_off, u->in_buf, u->in_len, e);
}

static bool read_unit(pipe_t *p, size_t tensor, ck_unit_kind kind, int64_t row0, int64_t rows,
                      uint64_t off, uint64_t len, bool first, bool last)
{
    if (atomic_load(&p->failed) || cancelled(p)) return false;
    ck_unit *u = calloc(1, sizeof *u);
    quant_ck_error e;
    if (!u) {
        quant_ck_fail(&e, QUANT_CK_ERR_NOMEM, "out of memory");
        pipe_fail(p, &e);
        return false;
    }
    *u = (ck_unit){.tp = &p->sp->t[tensor],
                   .tensor = tensor,
                   .kind = kind,
                   .row0 = row0,
                   .rows = rows,
                   .in_off = off,
                   .in_len = len,
                   .first = first,
                   .last = last};
    if (load_input(p, u, &e) != QUANT_CK_OK) {
        pipe_fail(p, &e);
        unit_free(u);
        return false;
    }
    if (!ck_queue_push(&p->to_compute, u)) {
        unit_free(u);
        return false;
    }
    return true;
}

static bool read_copy(pipe_t *p, size_t i)
{
    const quant_st_tensor *t = p->sp->t[i].in;
    uint64_t total = quant_st_nbytes(t), step = p->run->opts->chunk_bytes, off = 0;
    do {
        uint64_t len = total - off < step ? total - off : step;
        if (!read_unit(p, i, CK_UNIT_COPY, 0, 0, off, len, off == 0, off + len == total))
            return false;
        off += len;
    } while (off < total);
    return true;
}

static bool read_pass(pipe_t *p, size_t i, ck_unit_kind kind, bool first_pass)
{
    const ck_tensor_plan *tp = &p->sp->t[i];
    int64_t d0 = tp->in->shape[0];
    uint64_t row_bytes = (uint64_t)tp->row_elems * quant_dtype_size(tp->in_dtype);
    for (int64_t r = 0; r < d0; r += tp->unit_rows) {
        int64_t rows = d0 - r < tp->unit_rows ? d0 - r : tp->unit_rows;
        if (!read_unit(p, i, kind, r, rows, row_bytes * (uint64_t)r, row_bytes * (uint64_t)rows,
                       first_pass && r == 0, r + rows == d0))
            return false;
    }
    return true;
}

/* After the shard's last tensor: a file still arriving must then be whole, of the size its
 * header implies (ck_st_check_whole; nothing for any other file). */
static void shard_whole(pipe_t *p)
{
    quant_ck_error e;
    if (!atomic_load(&p->failed) && ck_st_check_whole(p->sp->in, &e) != QUANT_CK_OK)
        pipe_fail(p, &e);
}

static void *reader_main(void *arg)
{
    pipe_t *p = arg;
    for (size_t i = 0; i < p->sp->n; i++) {
        const ck_tensor_plan *tp = &p->sp->t[i];
        bool ok = !tp->quantize ? read_copy(p, i)
                                : (!tp->two_pass || read_pass(p, i, CK_UNIT_CALIB, true)) &&
                                      read_pass(p, i, CK_UNIT_QUANT, !tp->two_pass);
        if (!ok) break;
        if (i + 1 == p->sp->n) shard_whole(p);
    }
    if (p->sp->n == 0) shard_whole(p);
    ck_queue_close(&p->to_compute);
    return NULL;
}

/* ---- writer ---------------------------------------------------------------------------------- */

static void *writer_main(void *arg)
{
    pipe_t *p = arg;
    ck_unit *u;
    while ((u = ck_queue_pop(&p->to_write)) != NULL) {
        for (size_t k = 0; k < u->n_pieces && !atomic_load(&p->failed); k++) {
            ck_piece *pc = &u->piece[k];
            quant_ck_error e;
            if (quant_st_writer_pwrite(p->w, (size_t)pc->index, pc->offset, pc->buf, pc->len, &e) !=
                QUANT_CK_OK)
                pipe_fail(p, &e);
        }
        unit_free(u);
    }
    return NULL;
}

/* ---- compute (the calling thread) --------------------------------------------------------------
 */

static uint64_t out_bytes(const pipe_t *p, const ck_tensor_plan *tp)
{
    uint64_t n = 0;
    for (int k = 0; k < CK_OUT_ROLES; k++)
        if (tp->out[k] >= 0) n += quant_st_writer_nbytes(p->w, (size_t)tp->out[k]);
    return n;
}

static void tensor_done(pipe_t *p, ck_compute *c, const ck_unit *u)
{
    ck_run *run = p->run;
    quant_report_entry *e = ck_report_add(run->report, p->sp->base, u->tp);
    if (e) {
        e->bytes_in = quant_st_nbytes(u->tp->in);
        e->bytes_out = out_bytes(p, u->tp);
    }
    ck_compute_finish(c, e);
    run->tensors_done++;
}

static void compute_loop(pipe_t *p, ck_compute *c)
{
    ck_run *run = p->run;
    ck_unit *u;
    while ((u = ck_queue_pop(&p->to_compute)) != NULL) {
        quant_ck_error e;
        if (atomic_load(&p->failed) || cancelled(p)) {
            unit_free(u);
            continue;
        }
        if (ck_compute_unit(c, u, &e) != QUANT_CK_OK) {
            quant_ck_prefix(&e, "%s", p->sp->in->path);
            pipe_fail(p, &e);
            unit_free(u);
            continue;
        }
        release_input(u);
        if (u->kind != CK_UNIT_CALIB) run->bytes_done += u->in_len;
        if (u->last && u->kind != CK_UNIT_CALIB) tensor_done(p, c, u);
        if (run->opts->progress) {
            quant_progress pr = {run->tensors_done, run->tensors_total, run->bytes_done,
                                 run->bytes_total, p->sp->base};
            run->opts->progress(run->opts->progress_user, &pr);
        }
        if (!ck_queue_push(&p->to_write, u)) unit_free(u);
    }
}

/* ---- the shard ---------------------------------------------------------------------------------
 */

static quant_ck_status open_writer(pipe_t *p, const char *out_path, quant_ck_error *err)
{
    const quant_st_file *in = p->sp->in;
    bool native = p->run->opts->layout == QUANT_LAYOUT_NATIVE;
    const char *extra_key = native ? "quantization" : "format";
    const char *extra_val = native ? p->sp->quant_meta : "pt";
    size_t n = 0;
    const char **keys = malloc((in->n_meta + 1) * sizeof *keys);
    const char **vals = malloc((in->n_meta + 1) * sizeof *vals);
    if (!keys || !vals) {
        free(keys);
        free(vals);
        return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < in->n_meta; i++) {
        if (strcmp(in->meta_keys[i], extra_key) == 0) continue;
        keys[n] = in->meta_keys[i];
        vals[n++] = in->meta_values[i];
    }
    keys[n] = extra_key;
    vals[n++] = extra_val;
    quant_ck_status st =
        quant_st_writer_new(out_path, p->sp->out, p->sp->n_out, keys, vals, n, &p->w, err);
    free(keys);
    free(vals);
    return st;
}

/* The static activation scales (F32) and zero points (the qtype's zero point dtype). */
static quant_ck_status write_static_acts(pipe_t *p, quant_ck_error *err)
{
    quant_ck_status st = QUANT_CK_OK;
    for (size_t i = 0; st == QUANT_CK_OK && i < p->sp->n_acts; i++) {
        const ck_act_plan *ap = &p->sp->acts[i];
        size_t n = (size_t)quant_numel(ap->act->rank, ap->act->shape);
        st = quant_st_writer_pwrite(p->w, (size_t)ap->out_scale, 0, ap->act->scale,
                                    n * sizeof(float), err);
        if (st != QUANT_CK_OK || ap->out_zp < 0) continue;
        quant_dtype zd = quant_qtype_traits_get(ap->act->qtype)->zero_point_dtype;
        void *zp = malloc(n ? n * quant_dtype_size(zd) : 1);
        if (!zp) return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
        ck_store_zero_points(zd, ap->act->zero_point, n, zp);
        st = quant_st_writer_pwrite(p->w, (size_t)ap->out_zp, 0, zp, n * quant_dtype_size(zd), err);
        free(zp);
    }
    return st;
}

/* The committed shard in the report's outputs: its size, and its SHA-256 when the run hashes. */
static quant_ck_status record_output(pipe_t *p, const char *out_path, quant_ck_error *err)
{
    char hex[65];
    uint64_t bytes = 0;
    bool hashed = quant_st_writer_sha256(p->w, hex, &bytes);
    if (!hashed) {
        struct stat sb;
        bytes = stat(out_path, &sb) == 0 ? (uint64_t)sb.st_size : 0;
    }
    if (ck_report_add_output(p->run->report, ck_basename(out_path), bytes, hashed ? hex : NULL))
        return QUANT_CK_OK;
    return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
}

quant_ck_status ck_run_shard(ck_run *run, ck_shard_plan *sp, const char *out_path,
                             quant_ck_error *err)
{
    pipe_t p = {.run = run, .sp = sp};
    atomic_init(&p.failed, 0);
    quant_ck_status st = open_writer(&p, out_path, err);
    if (st == QUANT_CK_OK && run->opts->sha256) st = quant_st_writer_hash(p.w, err);
    if (st == QUANT_CK_OK) st = write_static_acts(&p, err);
    if (st != QUANT_CK_OK) {
        quant_st_writer_free(p.w);
        return st;
    }
    size_t cap = (size_t)run->opts->buffers;
    if (!ck_queue_init(&p.to_compute, cap)) goto nomem;
    if (!ck_queue_init(&p.to_write, cap)) {
        ck_queue_destroy(&p.to_compute);
        goto nomem;
    }
    pthread_mutex_init(&p.err_mu, NULL);
    ck_compute c = {.ctx = run->ctx, .quality = run->opts->quality};
    pthread_t reader, writer;
    bool reader_up = pthread_create(&reader, NULL, reader_main, &p) == 0;
    bool writer_up = reader_up && pthread_create(&writer, NULL, writer_main, &p) == 0;
    if (!writer_up) {
        quant_ck_fail(&p.err, QUANT_CK_ERR_NOMEM, "cannot start the pipeline threads");
        atomic_store(&p.failed, 1);
        ck_queue_close(&p.to_compute);
    }
    compute_loop(&p, &c);
    ck_queue_close(&p.to_write);
    if (reader_up) pthread_join(reader, NULL);
    if (writer_up)
        pthread_join(writer, NULL);
    else
        writer_main(&p); /* drains what compute queued */
    ck_compute_destroy(&c);
    ck_queue_destroy(&p.to_compute);
    ck_queue_destroy(&p.to_write);
    pthread_mutex_destroy(&p.err_mu);
    st = atomic_load(&p.failed) ? quant_ck_fail(err, p.err.status, "%s", p.err.message)
                                : quant_st_writer_commit(p.w, err);
    if (st == QUANT_CK_OK) st = record_output(&p, out_path, err);
    quant_st_writer_free(p.w);
    if (st == QUANT_CK_OK && !ck_report_add_static(run->report, sp->base, sp))
        st = quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
    return st;
nomem:
    quant_st_writer_free(p.w);
    return quant_ck_fail(err, QUANT_CK_ERR_NOMEM, "out of memory");
}
