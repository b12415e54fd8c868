/* table.c -- the text tables of the quant command (plan, inspect): every column as wide as its
 * widest cell, two spaces apart, words left-aligned and numbers right-aligned; and shapes
 * written as "[a, b]".
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

void cli_fmt_shape(int rank, const int64_t *shape, char *buf, size_t cap)
{
    size_t used = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < rank && used < cap; i++)
        used +=
            (size_t)snprintf(buf + used, cap - used, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (used < cap) snprintf(buf + used, cap - used, "]");
}

/* One line: cells padded to the widths; the last column and those from right_from on are
 * right-aligned (headings: only the last). */
static void print_line(const char *const *cells, const int *w, int ncols, int right_from)
{
    for (int k = 0; k < ncols; k++) {
        bool right = k == ncols - 1 || k >= right_from;
        printf(right ? "%*s" : "%-*s", w[k], cells[k]);
        fputs(k == ncols - 1 ? "\n" : "  ", stdout);
    }
}

void cli_print_table(const char *const *heads, int ncols, int right_from, size_t nrows,
                     cli_row_fn row, void *user)
{
    int w[CLI_TABLE_MAX_COLS];
    const char *cells[CLI_TABLE_MAX_COLS];
    if (ncols > CLI_TABLE_MAX_COLS) ncols = CLI_TABLE_MAX_COLS;
    for (int k = 0; k < ncols; k++) w[k] = (int)strlen(heads[k]);
    for (size_t i = 0; i < nrows; i++) {
        row(user, i, cells);
        for (int k = 0; k < ncols; k++)
            if ((int)strlen(cells[k]) > w[k]) w[k] = (int)strlen(cells[k]);
    }
    print_line(heads, w, ncols, ncols); /* headings left, but the last */
    for (size_t i = 0; i < nrows; i++) {
        row(user, i, cells);
        print_line(cells, w, ncols, right_from);
    }
}
