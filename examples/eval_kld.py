#!/usr/bin/env python3
# eval_kld.py -- owns the model-level quality measure: the KL divergence
# between a float Llama checkpoint and a quantized copy of it, as llama.cpp's
# `perplexity --kl-divergence` measures it. It samples held-out token sequences from the float
# model (seeded; collect_stats.py calibrates on other seeds), runs both models on them
# (llama_np.py), and at every position takes KL(P_float || Q_quant) = sum_v p_v (log p_v - log
# q_v) of the next-token distributions (log-softmax in float64), then reports the mean (with its
# standard error), median, 99th percentile and maximum, and top-1 agreement (how often both
# models' most likely next token is the same). A quantized checkpoint -- quant quantize's native
# layout, or the compressed-tensors layout (ours, or llm-compressor's) -- is first turned back
# into float by `quant dequantize` into a temporary directory.
# Needs NumPy (Debian: python3-numpy). Run: python3 examples/eval_kld.py --help
# SPDX-License-Identifier: Apache-2.0
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

import llama_np


CT_PARTS = (".weight_packed", ".weight_scale", ".weight_global_scale", ".weight_zero_point")


def quantized_layout(ckpt):
    """The layout `quant dequantize` must turn back into float, or None for a float checkpoint:
    "native" when a safetensors file carries quantd's `quantization` metadata entry,
    "compressed-tensors" when config.json's quantization_config says so or a tensor is named as
    compressed-tensors names a weight's parts (read from the headers alone)."""
    config = os.path.join(ckpt, "config.json")
    if os.path.exists(config):
        with open(config) as f:
            qc = json.load(f).get("quantization_config") or {}
        if qc.get("quant_method") == "compressed-tensors":
            return "compressed-tensors"
    for path in llama_np.checkpoint_files(ckpt):
        with open(path, "rb") as f:
            (hlen,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(hlen))
        if "quantization" in header.get("__metadata__", {}):
            return "native"
        if any(name.endswith(CT_PARTS) for name in header if name != "__metadata__"):
            return "compressed-tensors"
    return None


def find_quant(given):
    """The quant command: --quant, else $QUANT_BIN, else `quant` on PATH, else the build tree's."""
    if given:
        return given
    if os.environ.get("QUANT_BIN"):
        return os.environ["QUANT_BIN"]
    on_path = shutil.which("quant")
    if on_path:
        return on_path
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(os.path.dirname(here), "build", "bin", "quant")


def dequantize(quant, ckpt, tmp):
    out = os.path.join(tmp, "dequantized")
    r = subprocess.run([quant, "dequantize", "-q", "--dtype", "f32", ckpt, out],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit("eval_kld: %s dequantize %s failed (exit %d): %s" % (
            quant, ckpt, r.returncode, r.stderr.strip()))
    return out


def compare(ref, other, tokens):
    """Per-position KL(P_ref || Q_other) [N], top-1 agreement [N] and each model's negative
    log-likelihood of the sampled next tokens [N'] over every position of tokens [B, T]."""
    lp = llama_np.log_softmax64(ref.forward(tokens))
    lq = llama_np.log_softmax64(other.forward(tokens))
    kld = np.sum(np.exp(lp) * (lp - lq), axis=-1).reshape(-1)
    top1 = (np.argmax(lp, axis=-1) == np.argmax(lq, axis=-1)).reshape(-1)
    nxt = tokens[:, 1:, None]
    nll_p = -np.take_along_axis(lp[:, :-1, :], nxt, axis=-1).reshape(-1)
    nll_q = -np.take_along_axis(lq[:, :-1, :], nxt, axis=-1).reshape(-1)
    return kld, top1, nll_p, nll_q


def summarize(a, kld, top1, nll_p, nll_q):
    n = kld.size
    return {
        "sequences": a.sequences,
        "seq_len": a.seq_len,
        "seed": a.seed,
        "temperature": a.temperature,
        "positions": int(n),
        "kld_mean": float(np.mean(kld)),
        "kld_stderr": float(np.std(kld, ddof=1) / np.sqrt(n)) if n > 1 else 0.0,
        "kld_median": float(np.median(kld)),
        "kld_p99": float(np.percentile(kld, 99)),
        "kld_max": float(np.max(kld)),
        "top1": float(np.mean(top1)),
        "ppl_float": float(np.exp(np.mean(nll_p))) if nll_p.size else None,
        "ppl_quant": float(np.exp(np.mean(nll_q))) if nll_q.size else None,
    }


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="KL divergence and top-1 agreement of a quantized Llama checkpoint against "
                    "its float original, on sequences sampled from the float model.")
    p.add_argument("float_ckpt", help="the float checkpoint directory (Hugging Face layout)")
    p.add_argument("quant_ckpt", help="the quantized one: quant quantize's output in the native "
                   "or the compressed-tensors layout (dequantized with `quant dequantize` first) "
                   "or any float checkpoint")
    p.add_argument("--quant", metavar="PATH", help="the quant command (default: $QUANT_BIN, "
                   "else quant on PATH, else build/bin/quant)")
    p.add_argument("--sequences", type=int, default=16, help="held-out sequences (default "
                   "%(default)s)")
    p.add_argument("--seq-len", type=int, default=64, help="tokens per sequence, BOS included; "
                   "every position is scored (default %(default)s)")
    p.add_argument("--seed", type=int, default=1234, help="sampling seed (default %(default)s; "
                   "collect_stats.py's sequences use the seed sequences [SEED, step])")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature "
                   "(default %(default)s)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    a = p.parse_args(argv)
    if a.sequences < 1 or a.seq_len < 2:
        p.error("--sequences must be at least 1 and --seq-len at least 2")
    if a.temperature <= 0:
        p.error("--temperature must be positive")
    return a


def run(a):
    with tempfile.TemporaryDirectory(prefix="eval_kld-") as tmp:
        qdir = a.quant_ckpt
        layout = quantized_layout(qdir)
        dequantized = layout is not None
        if dequantized:
            qdir = dequantize(find_quant(a.quant), qdir, tmp)
        ref = llama_np.Llama(a.float_ckpt)
        other = llama_np.Llama(qdir)
    if (ref.dim, ref.n_layers, ref.vocab) != (other.dim, other.n_layers, other.vocab):
        sys.exit("eval_kld: %s and %s are not the same architecture" % (a.float_ckpt,
                                                                         a.quant_ckpt))
    tokens = ref.sample(a.sequences, a.seq_len, a.seed, a.temperature)
    s = summarize(a, *compare(ref, other, tokens))
    s["float"] = a.float_ckpt
    s["quantized"] = a.quant_ckpt
    s["dequantized"] = dequantized
    s["layout"] = layout
    if a.json:
        print(json.dumps(s, indent=2))
        return
    print("float:     %s" % a.float_ckpt)
    print("quantized: %s%s" % (a.quant_ckpt, " (%s, through quant dequantize)" % layout
                               if dequantized else ""))
    print("sequences: %d x %d tokens sampled from the float model (seed %d, temperature %g), "
          "%d positions" % (a.sequences, a.seq_len, a.seed, a.temperature, s["positions"]))
    print("mean KLD:  %.6f +/- %.6f (median %.6f, p99 %.6f, max %.6f)" % (
        s["kld_mean"], s["kld_stderr"], s["kld_median"], s["kld_p99"], s["kld_max"]))
    print("same top1: %.2f %%" % (100.0 * s["top1"]))
    print("PPL:       float %.4f, quantized %.4f (of the sampled tokens)" % (
        s["ppl_float"], s["ppl_quant"]))


def main(argv=None):
    a = parse_args(argv)
    try:
        run(a)
    except (OSError, ValueError, KeyError) as e:
        sys.exit("eval_kld: %s" % e)
    return 0


if __name__ == "__main__":
    sys.exit(main())
