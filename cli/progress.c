/* progress.c -- the progress bar of `quant quantize` on stderr: drawn only on a terminal (never
 * into a pipe or a file), redrawn in place with '\r' at most ten times a second:
 *   [#########           ] 12/30 tensors  1.2/4.0 GiB  850.0 MiB/s  ETA 0:03
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

#define BAR_CELLS      20
#define REDRAW_SECONDS 0.1

void cli_progress_init(cli_progress *pr, bool enabled)
{
    memset(pr, 0, sizeof *pr);
    pr->enabled = enabled && isatty(STDERR_FILENO);
    pr->start = cli_now();
}

/* "1.2/4.0 GiB": both amounts in the unit of the total. */
static void fmt_amounts(uint64_t done, uint64_t total, char *buf, size_t cap)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double d = (double)done, t = (double)total;
    size_t u = 0;
    while (t >= 1024.0 && u + 1 < sizeof units / sizeof units[0]) {
        d /= 1024.0;
        t /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, cap, "%llu/%llu B", (unsigned long long)done, (unsigned long long)total);
    else
        snprintf(buf, cap, "%.1f/%.1f %s", d, t, units[u]);
}

static void draw(cli_progress *pr, double now)
{
    const quant_progress *p = &pr->p;
    double frac = p->bytes_total     ? (double)p->bytes_done / (double)p->bytes_total
                  : p->tensors_total ? (double)p->tensors_done / (double)p->tensors_total
                                     : 1.0;
    if (frac > 1.0) frac = 1.0;
    char bar[BAR_CELLS + 1];
    int full = (int)(frac * BAR_CELLS);
    for (int i = 0; i < BAR_CELLS; i++) bar[i] = i < full ? '#' : ' ';
    bar[BAR_CELLS] = '\0';

    double elapsed = now - pr->start;
    double rate = elapsed > 0.0 ? (double)p->bytes_done / elapsed : 0.0;
    char amounts[48], speed[32], eta[24];
    fmt_amounts(p->bytes_done, p->bytes_total, amounts, sizeof amounts);
    cli_fmt_bytes((uint64_t)rate, speed, sizeof speed);
    if (rate > 0.0 && p->bytes_done > 0)
        cli_fmt_duration((double)(p->bytes_total - p->bytes_done) / rate, eta, sizeof eta);
    else
        snprintf(eta, sizeof eta, "-:--");

    char line[256];
    int n = snprintf(line, sizeof line, "[%s] %llu/%llu tensors  %s  %s/s  ETA %s", bar,
                     (unsigned long long)p->tensors_done, (unsigned long long)p->tensors_total,
                     amounts, speed, eta);
    if (n < 0) return;
    if (n >= (int)sizeof line) n = (int)sizeof line - 1;
    /* Pad over a longer previous line instead of relying on terminal escapes. */
    int pad = pr->width > n ? pr->width - n : 0;
    fprintf(stderr, "\r%s%*s", line, pad, "");
    fflush(stderr);
    pr->width = n;
    pr->drawn = true;
    pr->last = now;
}

void cli_progress_update(void *user, const quant_progress *p)
{
    cli_progress *pr = user;
    pr->p = *p;
    if (!pr->enabled) return;
    double now = cli_now();
    bool finished = p->tensors_done == p->tensors_total;
    if (!pr->drawn || finished || now - pr->last >= REDRAW_SECONDS) draw(pr, now);
}

void cli_progress_finish(cli_progress *pr)
{
    if (!pr->enabled || !pr->drawn) return;
    draw(pr, cli_now());
    fputc('\n', stderr);
    pr->drawn = false;
}
