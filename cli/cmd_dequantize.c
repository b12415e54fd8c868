/* cmd_dequantize.c -- `quant dequantize IN OUT [--dtype f32|bf16|f16]`: a quantized checkpoint
 * (file or directory; the native layout or compressed-tensors') or a GGUF file back to float
 * tensors with the original names and shapes, for evaluation.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "cli.h"

#define CMD "dequantize"

static const char usage[] =
    "usage: quant dequantize [options] IN OUT\n"
    "\n"
    "Turns every quantized tensor of the file or directory IN back into a float tensor in OUT;\n"
    "other tensors are copied. The layout is found per file:\n"
    "  native             `quantization` metadata: NAME.qvalue, NAME.scale (, NAME.zero_point)\n"
    "                     become NAME\n"
    "  compressed-tensors config.json's quantization_config (quant_method compressed-tensors;\n"
    "                     a directory's, or the one beside a file), or the tensor names:\n"
    "                     P.weight_packed or P.weight with P.weight_scale\n"
    "                     (, weight_zero_point, weight_global_scale, weight_shape) become\n"
    "                     P.weight; formats pack-quantized, int-quantized, naive-quantized,\n"
    "                     float-quantized, nvfp4-pack-quantized, mxfp4-pack-quantized,\n"
    "                     mxfp8-quantized; OUT's config.json loses its quantization_config\n"
    "  GGUF               a file with the GGUF magic (whatever its name): every tensor, of any\n"
    "                     ggml type quantd reads, becomes a tensor of OUT, a safetensors file,\n"
    "                     with its name and its shape in PyTorch order (GGUF's reversed)\n"
    "Anything else quantized (another format, activation ordering) is refused, naming the file,\n"
    "the tensor and what is not supported. OUT must not exist (nor be a symbolic link); nothing\n"
    "is left at OUT when the run fails. Temporaries that runs which died left in OUT's directory\n"
    "are removed first.\n"
    "\n"
    "options:\n"
    "  -d, --dtype TYPE       f32 (default), bf16 or f16\n"
    "  -t, --threads N        worker threads, 0 = every CPU (default 0, at most 256)\n"
    "  -q, --quiet            no summary line\n"
    "  -h, --help             this text\n";

static bool parse_dtype(const char *s, quant_st_dtype *out)
{
    static const struct {
        const char *name;
        quant_st_dtype dtype;
    } names[] = {
        {"f32", QUANT_ST_F32},       {"float32", QUANT_ST_F32}, {"bf16", QUANT_ST_BF16},
        {"bfloat16", QUANT_ST_BF16}, {"f16", QUANT_ST_F16},     {"float16", QUANT_ST_F16},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcasecmp(s, names[i].name) == 0) {
            *out = names[i].dtype;
            return true;
        }
    return false;
}

int cmd_dequantize(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"dtype", required_argument, NULL, 'd'},
        {"threads", required_argument, NULL, 't'},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    quant_st_dtype dtype = QUANT_ST_F32;
    int threads = 0, c;
    bool quiet = false;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":d:t:qh", longopts, NULL)) != -1) {
        switch (c) {
        case 'd':
            if (!parse_dtype(optarg, &dtype))
                return cli_usage_error(CMD, "--dtype must be f32, bf16 or f16, not '%s'", optarg);
            break;
        case 't':
            if (!cli_parse_threads(CMD, optarg, &threads)) return CLI_EXIT_USAGE;
            break;
        case 'q':
            quiet = true;
            break;
        case 'h':
            fputs(usage, stdout);
            return CLI_EXIT_OK;
        default:
            return cli_getopt_error(CMD, c, argv);
        }
    }
    if (argc - optind != 2)
        return cli_usage_error(CMD, "expected IN and OUT, got %d operand%s", argc - optind,
                               argc - optind == 1 ? "" : "s");
    const char *in = argv[optind], *out = argv[optind + 1];
    cli_clean_stale(out, NULL);
    double start = cli_now();
    quant_ck_error err;
    if (quant_dequantize_path(in, out, dtype, threads, &err) != QUANT_CK_OK)
        return cli_ck_error(&err);
    if (!quiet)
        fprintf(stderr, "dequantized %s -> %s (%s) in %.2f s\n", in, out,
                quant_st_dtype_name(dtype), cli_now() - start);
    return CLI_EXIT_OK;
}
