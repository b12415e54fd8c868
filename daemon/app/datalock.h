/* datalock.h -- one quantd per data directory (datalock.c).
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QD_DATALOCK_H
#define QD_DATALOCK_H

#include "store.h"

/* Takes the lock of data_dir (flock on DATA/quantd.lock, holding this process's PID) for as long
 * as the process lives; *fd is the lock's descriptor (never to be closed before exit).
 * QD_CONFLICT with a message naming the holder's PID when another process holds it. */
qd_status qd_data_lock(const char *data_dir, int *fd, qd_err *err);

#endif /* QD_DATALOCK_H */
