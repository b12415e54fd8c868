/* cmd_token.h -- the `quantd token` subcommand (cmd_token.c).
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef QD_CMD_TOKEN_H
#define QD_CMD_TOKEN_H

#include <stdbool.h>

/* Whether argv's command (its first word that is not an option or an option's value) is
 * "token". */
bool qd_cmd_is_token(int argc, char **argv);
/* Runs `quantd token ...`; returns the exit status (0, 1 failed, 2 usage). */
int qd_cmd_token(int argc, char **argv);

#endif /* QD_CMD_TOKEN_H */
