/* main.c -- the `quant` command: `quant <command> [options]` dispatched to the subcommands
 * (quantize, plan, inspect, dequantize), `quant --help`, `quant --version`, `quant help COMMAND`.
 * Exit status: 0 success, 1 runtime failure, 2 usage error; every error is one line on stderr
 * starting with "quant: ".
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

#ifndef QUANT_RELEASE
#error "QUANT_RELEASE must be defined (the Makefile passes -DQUANT_RELEASE=... from VERSION)"
#endif

#ifndef QUANT_RELEASE
#error "QUANT_RELEASE must be defined (the Makefile passes -DQUANT_RELEASE=... from VERSION)"
#endif

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"quantize", cmd_quantize, "quantize a safetensors file or checkpoint directory by rules"},
    {"plan", cmd_plan, "show what quantize would do, from the headers alone (no data read)"},
    {"inspect", cmd_inspect, "list the tensors of a safetensors or GGUF file"},
    {"dequantize", cmd_dequantize,
     "turn a quantized checkpoint or GGUF file back into float tensors"},
};

#define N_COMMANDS (sizeof commands / sizeof commands[0])

static void print_usage(FILE *to)
{
    fputs("usage: quant <command> [options] [args]\n"
          "       quant --help | --version\n"
          "\n"
          "commands:\n",
          to);
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(to, "  %-12s %s\n", commands[i].name, commands[i].summary);
    fputs("\n'quant <command> --help' describes a command; 'man quant' describes them all.\n", to);
}

static const command *find_command(const char *name)
{
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0) return &commands[i];
    return NULL;
}

/* `quant help [COMMAND]`: the same text as --help. */
static int help(int argc, char **argv)
{
    if (argc < 2) {
        print_usage(stdout);
        return CLI_EXIT_OK;
    }
    const command *c = find_command(argv[1]);
    if (!c) {
        cli_error("unknown command '%s' (see 'quant --help')", argv[1]);
        return CLI_EXIT_USAGE;
    }
    char *args[] = {(char *)c->name, "--help", NULL};
    return c->run(2, args);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        cli_error("no command given (see 'quant --help')");
        return CLI_EXIT_USAGE;
    }
    const char *name = argv[1];
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) {
        print_usage(stdout);
        return CLI_EXIT_OK;
    }
    if (strcmp(name, "--version") == 0 || strcmp(name, "-V") == 0) {
        unsigned lib = quant_version_number();
        printf("quant %s (libquant %u.%u.%u)\n", QUANT_RELEASE, lib / 10000, lib / 100 % 100,
               lib % 100);
        return CLI_EXIT_OK;
    }
    if (strcmp(name, "help") == 0) return help(argc - 1, argv + 1);
    const command *c = find_command(name);
    if (!c) {
        if (name[0] == '-')
            cli_error("unknown option '%s' (see 'quant --help')", name);
        else
            cli_error("unknown command '%s' (see 'quant --help')", name);
        return CLI_EXIT_USAGE;
    }
    return c->run(argc - 1, argv + 1);
}
