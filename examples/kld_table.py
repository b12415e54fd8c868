#!/usr/bin/env python3
# kld_table.py -- owns the measurement behind BENCHMARKS.md's "model-level quality (KL
# divergence)" table: quantizes a float Llama checkpoint with each of a fixed list of rule sets
# (`quant quantize`, every rule's weight_calibration_method set by --method), turns each result
# back into float (`quant dequantize`) and compares it with the float model on the same held-out
# sequences sampled from the float model (eval_kld.py's measure), printing one Markdown row per
# rule set. With --stats (a collect_stats.py --out dump holding mean_sq) every quantizing rule
# also gets "weight_importance": true and `quant quantize --stats` weighs its MSE search. Needs NumPy (Debian: python3-numpy). Run: python3 examples/kld_table.py --help
# SPDX-License-Identifier: Apache-2.0
import argparse
import json
import os
import subprocess
import sys
import tempfile

import eval_kld
import llama_np

# The embedding (tied: also the output layer) stays float in every row; norms are rank 1 and
# always copied. `down_proj` has the FFN width (172 for stories260K) as its input axis, which no
# tile of 16 or 32 divides: the tiled rows keep it int8 per-channel, said in the row's name.
KEEP = {"module_path": "model\\.embed_tokens|lm_head", "weight_qtype": None}
DOWN_INT8 = {"module_path": ".*\\.mlp\\.down_proj", "weight_qtype": "int8"}
RULE_SETS = [
    ("int8 per-channel", [KEEP, {"module_path": ".*_proj", "weight_qtype": "int8"}]),
    ("int4 per-channel (down_proj too)", [KEEP, {"module_path": ".*_proj",
                                                 "weight_qtype": "int4"}]),
    ("int4 per-channel, down_proj int8", [KEEP, DOWN_INT8,
                                          {"module_path": ".*_proj", "weight_qtype": "int4"}]),
    ("int4 tile 32, down_proj int8", [KEEP, DOWN_INT8,
                                      {"module_path": ".*_proj", "weight_qtype": "int4",
                                       "tile_size": 32}]),
    ("nf4 per-channel, down_proj int8", [KEEP, DOWN_INT8,
                                         {"module_path": ".*_proj", "weight_qtype": "nf4"}]),
    ("nf4 tile 32, down_proj int8", [KEEP, DOWN_INT8,
                                     {"module_path": ".*_proj", "weight_qtype": "nf4",
                                      "tile_size": 32}]),
    ("mxfp4 (tile 32), down_proj int8", [KEEP, DOWN_INT8,
                                         {"module_path": ".*_proj", "weight_qtype": "mxfp4"}]),
    ("nvfp4 (tile 16), down_proj int8", [KEEP, DOWN_INT8,
                                         {"module_path": ".*_proj", "weight_qtype": "nvfp4"}]),
]


def with_method(rules, method, importance=False):
    extra = {"weight_importance": True} if importance else {}
    return [dict(r, weight_calibration_method=method, **extra) if r.get("weight_qtype") else r
            for r in rules]


def quantize(quant, rules, src, out, tmp, stats=None):
    path = os.path.join(tmp, "rules.json")
    with open(path, "w") as f:
        json.dump(rules, f)
    cmd = [quant, "quantize", "-q", "-r", path] + (["--stats", stats] if stats else [])
    r = subprocess.run(cmd + [src, out], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit("kld_table: quant quantize: %s" % r.stderr.strip())
    with open(os.path.join(out, "quant-report.json")) as f:
        return json.load(f)["summary"]


def main(argv=None):
    p = argparse.ArgumentParser(description="KL divergence and top-1 agreement of a float Llama "
                                "checkpoint quantized with each of a fixed list of rule sets.")
    p.add_argument("float_ckpt", help="the float checkpoint directory (Hugging Face layout)")
    p.add_argument("--quant", metavar="PATH", help="the quant command (as eval_kld.py)")
    p.add_argument("--method", default="absmax", help="weight_calibration_method of every "
                   "quantizing rule (default %(default)s)")
    p.add_argument("--stats", metavar="FILE", help="statistics with mean_sq (collect_stats.py "
                   "--out): every quantizing rule gets weight_importance (needs --method mse or "
                   "minmax_mse)")
    p.add_argument("--sequences", type=int, default=64, help="default %(default)s")
    p.add_argument("--seq-len", type=int, default=128, help="default %(default)s")
    p.add_argument("--seed", type=int, default=1234, help="default %(default)s")
    a = p.parse_args(argv)
    a.temperature = 1.0
    quant = eval_kld.find_quant(a.quant)
    ref = llama_np.Llama(a.float_ckpt)
    tokens = ref.sample(a.sequences, a.seq_len, a.seed)
    print("%s: %d sequences x %d tokens sampled from the float model (seed %d), %d positions; "
          "calibration %s%s" % (a.float_ckpt, a.sequences, a.seq_len, a.seed, tokens.size,
                                a.method, " + importance from " + a.stats if a.stats else ""))
    print("| rule set | bytes out | worst SQNR dB | mean KLD +/- stderr | p99 KLD | top-1 |")
    print("|---|---|---|---|---|---|")
    for name, rules in RULE_SETS:
        with tempfile.TemporaryDirectory(prefix="kld_table-") as tmp:
            out = os.path.join(tmp, "q")
            summary = quantize(quant, with_method(rules, a.method, bool(a.stats)), a.float_ckpt,
                               out, tmp, a.stats)
            other = llama_np.Llama(eval_kld.dequantize(quant, out, tmp))
        s = eval_kld.summarize(a, *eval_kld.compare(ref, other, tokens))
        print("| %s | %d | %.2f | %.4f +/- %.4f | %.3f | %.2f %% |" % (
            name, summary["bytes_out"], summary["min_sqnr_db"], s["kld_mean"], s["kld_stderr"],
            s["kld_p99"], 100.0 * s["top1"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
