#!/usr/bin/env python3
# make-corpus.py -- writes the seed corpora of tests/fuzz/corpus/TARGET/ (small valid inputs,
# and a few near misses), reproducibly, with the standard library only: safetensors files cut
# from tests/data/stories260K-bf16-sharded/ (real BF16 weights) and made up (every dtype),
# every file of tests/data/bad/, rule sets from the README and the tests, statistics posts,
# config files, requests and source paths. Each seed stays under 64 KiB. Files it does not
# write (crash regressions, named crash-* or leak-* or timeout-*) are left alone; the seeds it
# writes are rewritten.
# Usage: tests/fuzz/make-corpus.py   (from anywhere; paths are relative to the repository)
# SPDX-License-Identifier: Apache-2.0
import json
import os
import struct
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus")
SHARDS = os.path.join(ROOT, "tests", "data", "stories260K-bf16-sharded")
BAD = os.path.join(ROOT, "tests", "data", "bad")
SEED_MAX = 64 << 10

written = {}


def put(target, name, data):
    if isinstance(data, str):
        data = data.encode()
    if len(data) >= SEED_MAX:
        sys.exit(f"make-corpus: {target}/{name} is {len(data)} bytes, over {SEED_MAX}")
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)
    written.setdefault(target, []).append(name)


# ---- safetensors --------------------------------------------------------------------------------

ALIGN = {"F64": 8, "I64": 8, "U64": 8, "C64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2,
         "BF16": 2, "I16": 2, "U16": 2}
BITS = {"BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "I16": 16, "U16": 16, "F16": 16,
        "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "F64": 64, "I64": 64, "U64": 64, "C64": 64,
        "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8}


def safetensors(tensors, metadata=None, pad=8):
    """tensors: [(name, dtype, shape, bytes)], laid out as the reference writer does (alignment
    descending, then name; the header padded with spaces to a multiple of pad: 1 leaves the data
    where it falls, misaligned as other writers may leave it)."""
    order = sorted(tensors, key=lambda t: (-ALIGN.get(t[1], 1), t[0]))
    header, data, pos = {}, b"", 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in order:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [pos, pos + len(raw)]}
        data += raw
        pos += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % pad)
    if pad == 1 and len(text) % 2 == 0:
        text += b" "  # odd: every element of two bytes or more is misaligned
    return struct.pack("<Q", len(text)) + text + data


def read_shard(path):
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    base = 8 + n
    out = {}
    for name, e in header.items():
        if name != "__metadata__":
            b, end = e["data_offsets"]
            out[name] = (e["dtype"], e["shape"], blob[base + b:base + end])
    return out


def pattern(nbytes, seed):
    """nbytes of deterministic filler (a linear congruential sequence)."""
    x, out = seed, bytearray()
    for _ in range(nbytes):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        out.append(x >> 16 & 0xFF)
    return bytes(out)


def st_read_seeds():
    shard1 = read_shard(os.path.join(SHARDS, "model-00001-of-00002.safetensors"))
    shard2 = read_shard(os.path.join(SHARDS, "model-00002-of-00002.safetensors"))
    weights = {**shard1, **shard2}
    pick = lambda names: [(n, *weights[n]) for n in names]
    norms = sorted(n for n in weights if n.endswith("norm.weight"))
    put("st_read", "stories-norms.safetensors", safetensors(pick(norms), {"format": "pt"}))
    attn = sorted(n for n in weights if n.startswith("model.layers.0.self_attn."))
    put("st_read", "stories-layer0-attn.safetensors", safetensors(pick(attn), {"format": "pt"}))
    mlp = ["model.layers.4.mlp.up_proj.weight", "model.layers.4.post_attention_layernorm.weight"]
    put("st_read", "stories-layer4-up.safetensors", safetensors(pick(mlp)))
    # what quantization writes: int8 codes, float32 scales
    put("st_read", "quantized-int8.safetensors", safetensors([
        ("model.layers.0.mlp.up_proj.weight", "I8", [172, 64], pattern(172 * 64, 1)),
        ("model.layers.0.mlp.up_proj.weight_scale", "F32", [172, 1], pattern(172 * 4, 2)),
        ("model.norm.weight", *weights["model.norm.weight"]),
    ], {"format": "pt", "quantization": "int8"}))
    # every dtype once, sizes that are whole bytes
    every = []
    for i, (dt, bits) in enumerate(sorted(BITS.items())):
        n = 8 if bits in (4, 6) else 3
        every.append((f"t.{dt.lower()}", dt, [n], pattern(n * bits // 8, 10 + i)))
    put("st_read", "every-dtype.safetensors", safetensors(every))
    put("st_read", "scalar-and-empty.safetensors", safetensors([
        ("scalar", "F32", [], struct.pack("<f", 1.5)),
        ("empty", "F16", [0, 4], b""),
        ("bool", "BOOL", [2, 2], b"\x01\x00\x00\x01"),
        ("rank8", "U8", [1, 1, 1, 1, 1, 1, 1, 2], b"\x07\x09"),
    ]))
    put("st_read", "misaligned.safetensors", safetensors([
        ("a", "BF16", [2, 2], pattern(8, 3)),
        ("b", "F32", [3], pattern(12, 4)),
        ("c", "F64", [1], pattern(8, 5)),
    ], pad=1))
    put("st_read", "no-tensors.safetensors", safetensors([]))
    put("st_read", "metadata-only.safetensors", safetensors([], {"format": "pt", "k": "v\u00e9"}))
    put("st_read", "metadata-null.safetensors",
        struct.pack("<Q", 24) + b'{"__metadata__":null}   ')
    put("st_read", "fp-specials.safetensors", safetensors([
        ("f32", "F32", [4], struct.pack("<4I", 0x7F800000, 0xFF800000, 0x7FC00000, 0x00000001)),
        ("bf16", "BF16", [4], struct.pack("<4H", 0x7F80, 0xFF80, 0x7FC0, 0x0001)),
        ("f16", "F16", [4], struct.pack("<4H", 0x7C00, 0xFC00, 0x7E00, 0x0001)),
        ("e4m3", "F8_E4M3", [4], b"\x7f\xff\x01\x80"),
        ("e5m2", "F8_E5M2", [4], b"\x7c\xfc\x7f\x01"),
    ]))
    for name in sorted(os.listdir(BAD)):
        if name.endswith(".safetensors"):
            with open(os.path.join(BAD, name), "rb") as f:
                put("st_read", "bad-" + name, f.read())


# ---- statistics ---------------------------------------------------------------------------------

def stats_st_seeds():
    f32 = lambda vals: struct.pack(f"<{len(vals)}f", *vals)
    f64 = lambda vals: struct.pack(f"<{len(vals)}d", *vals)
    bf16 = lambda vals: b"".join(struct.pack("<I", struct.unpack("<I", struct.pack("<f", v))[0])[2:]
                                 for v in vals)
    f16 = lambda vals: struct.pack(f"<{len(vals)}e", *vals)
    put("stats_st", "absmax-f32.safetensors", safetensors([
        ("layers/0/mlp/dot_general0_lhs/absmax", "F32", [2, 3], f32([1, 2.5, 3, 4, 5, 0.5])),
    ], {"step": "1200"}))
    put("stats_st", "minmax-bf16.safetensors", safetensors([
        ("model/layers/1/mlp/up_proj/dot_general0_lhs/min", "BF16", [4], bf16([-1, -2, 0, -0.5])),
        ("model/layers/1/mlp/up_proj/dot_general0_lhs/max", "BF16", [4], bf16([1, 2, 3, 0.5])),
    ]))
    put("stats_st", "misaligned.safetensors", safetensors([
        ("x/absmax", "F16", [3], f16([1, 2, 3])),
        ("y/min", "F32", [2], f32([-1, -2])),
        ("y/max", "F32", [2], f32([1, 2])),
        ("z/absmax", "F64", [], f64([4])),
    ], pad=1))
    put("stats_st", "mixed.safetensors", safetensors([
        ("a/absmax", "F16", [], f16([3.0])),
        ("b/min", "F64", [1, 2], f64([-1.25, 0])),
        ("b/max", "F64", [1, 2], f64([3, 7])),
        ("c/d/e/absmax", "F32", [2, 1, 2], f32([1, 2, 3, 4])),
    ], {"step": "7", "format": "pt"}))
    # near misses: a wrong dtype, min without max, a non-finite value, a bad step
    put("stats_st", "int-dtype.safetensors", safetensors([("x/absmax", "I32", [2], b"\1\0\0\0" * 2)]))
    put("stats_st", "min-alone.safetensors", safetensors([("x/min", "F32", [1], f32([0]))]))
    put("stats_st", "nan.safetensors", safetensors([("x/absmax", "F32", [2], f32([1, float("nan")]))]))
    put("stats_st", "bad-step.safetensors", safetensors([("x/absmax", "F32", [], f32([1]))],
                                                        {"step": "-3"}))
    put("stats_st", "no-slash.safetensors", safetensors([("absmax", "F32", [], f32([1]))]))
    # the importance statistic mean_sq (SPEC section 9): beside absmax (tiled), beside min/max,
    # alone; and near misses: negative, rank 2, a length the range's last dimension does not divide
    put("stats_st", "mean-sq.safetensors", safetensors([
        ("l/0/x/absmax", "F32", [1, 2], f32([1, 2])),
        ("l/0/x/mean_sq", "F32", [4], f32([0.25, 4, 0, 9])),
        ("l/1/y/min", "F16", [2], f16([-1, -2])),
        ("l/1/y/max", "F16", [2], f16([1, 2])),
        ("l/1/y/mean_sq", "F64", [2], f64([1, 2])),
        ("l/2/z/mean_sq", "BF16", [3], bf16([0.5, 1, 2])),
    ], {"step": "5"}))
    put("stats_st", "mean-sq-negative.safetensors",
        safetensors([("x/mean_sq", "F32", [2], f32([1, -1]))]))
    put("stats_st", "mean-sq-rank2.safetensors",
        safetensors([("x/mean_sq", "F32", [1, 2], f32([1, 1]))]))
    put("stats_st", "mean-sq-length.safetensors", safetensors([
        ("x/absmax", "F32", [3], f32([1, 2, 3])), ("x/mean_sq", "F32", [4], f32([1, 1, 1, 1]))]))


def stats_json_seeds():
    put("stats_json", "update.json",
        '{"step": 1200, "stats": {"layers/0/mlp/dot_general0_lhs": {"absmax": [[1, 2.5, 3e0],'
        ' [4, -5, 6E-1]]},\n "b\\/x\\u00e9": {"min": -1.25, "max": 3},\n'
        ' "a": {"max": [[[7]]], "min": [[[0]]]}}}\n')
    put("stats_json", "update-null-step.json",
        '{"stats":{"s":{"absmax":[1e-320,1.7976931348623157e308,-0.0]}},"step":null}')
    put("stats_json", "update-minmax.json",
        '{"stats": {"model/layers/0/mlp/up_proj/dot_general0_lhs": {"min": [-1, -2, -3, -4],'
        ' "max": [1, 2, 3, 4]}}}')
    put("stats_json", "update-surrogates.json",
        '{"stats": {"\\ud83d\\ude00/\\u0041": {"absmax": 0.5}, "\u00e9t\u00e9": {"absmax": [2]}}}')
    put("stats_json", "merge.json",
        '{"stats": {"layers/0/mlp/dot_general0_lhs": {"count": 100, "sum_of_absmax": [[10, 20],'
        ' [30, 40]]}, "act2": {"count": 3.0, "sum_of_min": [-3], "sum_of_max": [6]}}}')
    put("stats_json", "merge-scalar.json",
        '{"stats": {"x": {"count": 9007199254740992, "sum_of_absmax": 1.5}}, "step": 0}')
    # near misses
    put("stats_json", "nan.json", '{"stats": {"x": {"absmax": [1, NaN]}}}')
    put("stats_json", "ragged.json", '{"stats": {"x": {"absmax": [[1, 2], [3]]}}}')
    put("stats_json", "rank9.json", '{"stats": {"x": {"absmax": [[[[[[[[[1]]]]]]]]]}}}')
    put("stats_json", "overflow.json", '{"stats": {"x": {"absmax": 1e999}}}')
    put("stats_json", "twice.json", '{"stats": {"x": {"absmax": 1}, "x": {"absmax": 2}}}')
    # mean_sq (SPEC section 9) in an update and a merge, and near misses
    put("stats_json", "update-mean-sq.json",
        '{"step": 3, "stats": {"l/0/x": {"absmax": [[1, 2]], "mean_sq": [0.5, 1, 0, -0.0]},'
        ' "l/1/y": {"mean_sq": [2, 4]}, "l/2/z": {"min": -1, "max": 1, "mean_sq": [1e-30]}}}')
    put("stats_json", "merge-mean-sq.json",
        '{"stats": {"l/0/x": {"count": 4, "sum_of_absmax": [[4, 8]], "sum_of_mean_sq": [2, 4, 0,'
        ' 1]}, "l/1/y": {"sum_of_mean_sq": [8, 16], "count": 4}}}')
    put("stats_json", "mean-sq-negative.json", '{"stats": {"x": {"mean_sq": [1, -1e-300]}}}')
    put("stats_json", "mean-sq-length.json",
        '{"stats": {"x": {"absmax": [1, 2, 3], "mean_sq": [1, 2, 3, 4]}}}')


# ---- rule sets ----------------------------------------------------------------------------------

RULESETS = {
    "readme-mixed.json": '''[
  {"module_path": "model\\\\.embed_tokens|lm_head", "weight_qtype": null},
  {"module_path": ".*\\\\.mlp\\\\.down_proj", "weight_qtype": "int8"},
  {"module_path": ".*_proj", "weight_qtype": "int4", "tile_size": 32}
]''',
    "readme-int4.json": '[{"module_path": ".*_proj", "weight_qtype": "int4", "tile_size": 32}]',
    "readme-srq.json": '''{"rules": [
  {"module_path": ".*up_proj", "weight_qtype": "int8", "act_qtype": "int8", "act_static_scale": true},
  {"module_path": ".*proj", "weight_qtype": "int8"}]}''',
    "api-proj.json": '{"rules": [{"module_path": ".*proj", "weight_qtype": "int8"}]}',
    "every-field.json": '''[{"module_path": "model\\\\.layers\\\\.[0-9]+\\\\.mlp\\\\..*",
  "weight_qtype": "uint4", "weight_calibration_method": "minmax,0.9",
  "tile_size": {"0": 4, "-1": 0.5}, "contraction_axes": [-1], "scale_dtype": "bfloat16",
  "pack": false, "stochastic_rounding": 42, "act_qtype": "fp8_e4m3",
  "act_calibration_method": "absmax", "act_static_scale": true, "act_batch_axes": [0]}]''',
    "qtypes.json": '''[{"module_path": "a", "weight_qtype": "int2"}, {"module_path": "b", "weight_qtype": "int3"},
 {"module_path": "c", "weight_qtype": "int16"}, {"module_path": "d", "weight_qtype": "uint8"},
 {"module_path": "e", "weight_qtype": "nf4", "tile_size": 64},
 {"module_path": "f", "weight_qtype": "float8_e4m3fn", "scale_dtype": "float16"},
 {"module_path": "g", "weight_qtype": "float8_e5m2"},
 {"module_path": ".*", "weight_qtype": "int8", "weight_calibration_method": "rms,3"}]''',
    "fixed-calibration.json": '''[{"weight_qtype": "int8", "weight_calibration_method": "fixed,-2,6",
  "contraction_axes": [0, 1], "tile_size": 1.0},
 {"weight_qtype": "int4", "weight_calibration_method": "fixed,4", "stochastic_rounding": true}]''',
    "unicode-regex.json": '[{"module_path": "(?i)\\\\w+\\\\.\\\\d{1,3}|\u00e9.*", "weight_qtype": "int8"}]',
    "empty-object.json": "[{}]",
    "empty-rules.json": '{"rules": []}',
    "nulls.json": '[{"weight_qtype": null, "act_qtype": null}]',
    # near misses: what the rule tests refuse
    "bad-field.json": '[{"weight_qtyp": "int8"}]',
    "bad-regex.json": '[{"module_path": "(", "weight_qtype": "int8"}]',
    "bad-axes.json": '[{"contraction_axes": [0,1,2,3,4,5,6,7,-1]}]',
    "bad-duplicate.json": '[{"module_path": "a", "module_path": "b"}]',
    "bad-tile.json": '[{}, {"tile_size": [128]}]',
    "bad-asymmetric.json": '[{"weight_qtype": "nf4", "weight_calibration_method": "minmax"}]',
}


def srq_stats_seeds():
    get = {"model": "m", "averaging": "ema", "ema_constant": 0.25, "bootstrap_steps": 0,
           "stats": {"model/layers/0/self_attn/q_proj/dot_general0_lhs": {
               "kind": "absmax", "count": 3, "shape": [1, 2], "updated_at": "2026-11-25T00:00:00Z",
               "bootstrapping": False, "sum_of_absmax": [[3, 6]], "absmax": [[1.5, 2.5]],
               "sum_of_mean_sq": [3, 6], "mean_sq": [1, 2]},
               "model/layers/0/mlp/up_proj/dot_general0_lhs": {
               "kind": "minmax", "count": 2, "shape": [2], "sum_of_min": [-2, 1], "min": [-1, 0.5],
               "sum_of_max": [4, 6], "max": [2, 3]},
               "model/layers/1/imp": {"count": 1, "mean_sq": [1, 2, 3]}}}
    put("srq_stats", "get.json", json.dumps(get))
    put("srq_stats", "merge-body.json",
        '{"stats": {"a/q_proj/x": {"count": 4, "sum_of_absmax": [[2, 6]]}}}')
    put("srq_stats", "qwix-flat.json",
        '{"layers/0/mlp/dot_general0_lhs": {"count": 3, "sum_of_absmax": [[0.3, 0.6, 0.9]]}}')
    put("srq_stats", "qwix-nested.json",
        '{"layers": {"0": {"up_proj": {"einsum0_lhs": {"count": 2.0, "sum_of_min": [-1],'
        ' "sum_of_max": [5]}}}, "1": {"x": {"count": 1, "sum_of_absmax": 1e-30}}}}')
    put("srq_stats", "twice.json",
        '{"a/b": {"count": 1, "absmax": 1}, "a": {"b": {"count": 1, "absmax": 2}}}')
    put("srq_stats", "ragged.json", '{"a": {"count": 1, "absmax": [[1], [2, 3]]}}')
    put("srq_stats", "count0.json", '{"a": {"count": 0, "sum_of_absmax": [1]}}')
    put("srq_stats", "twins.json",
        '{"a/b": {"count": 1, "min": -1, "max": 1}, "a.b": {"count": 1, "min": -1, "max": 1}}')


def rules_seeds():
    for name, text in RULESETS.items():
        put("rules", name, text)
    # a rule set, a NUL, then the module paths to match (NUL-separated)
    put("rules", "with-paths.bin", RULESETS["readme-mixed.json"] + "\0model.embed_tokens\0"
        "model.layers.3.mlp.down_proj\0model.layers.3.self_attn.q_proj\0lm_head\0")
    put("rules", "with-odd-paths.bin", RULESETS["unicode-regex.json"] +
        "\0\0\u00e9t\u00e9\0a" * 3 + "\0" + "x" * 300)


# ---- ct_read ------------------------------------------------------------------------------------

def f32s(*values):
    return struct.pack("<%df" % len(values), *values)


def ct_config(fmt, bits, typ="int", target="m.p", version=None, status="compressed"):
    qc = {"quant_method": "compressed-tensors", "format": fmt, "quantization_status": status,
          "config_groups": {"group_0": {"targets": [target], "format": fmt,
                                        "weights": {"num_bits": bits, "type": typ}}}}
    if version:
        qc["version"] = version
    return json.dumps({"model_type": "llama", "quantization_config": qc})


def ct_read_seeds():
    """A config.json, a NUL, then a shard holding one compressed-tensors weight m.p.weight of
    each form (and a plain tensor and an input_scale beside it); one shard without a config."""
    pt = {"format": "pt"}
    head = ("lm_head.weight", "F32", [2, 4], f32s(*[0.25 * i for i in range(8)]))
    shape = ("m.p.weight_shape", "I64", [2], struct.pack("<2q", 4, 64))
    int4 = [("m.p.weight_packed", "I32", [4, 8], pattern(128, 1)),
            ("m.p.weight_scale", "F32", [4, 4], f32s(*[0.5 + i for i in range(16)])), shape, head]
    seeds = {
        "pack-int4-group.bin": (ct_config("pack-quantized", 4), int4),
        "pack-int3-asym-channel.bin": (ct_config("pack-quantized", 3), [
            ("m.p.weight_packed", "I32", [4, 6], pattern(96, 2)),
            ("m.p.weight_scale", "BF16", [4, 1], struct.pack("<4H", 0x3f00, 0x3f80, 0x4000, 0x3e80)),
            ("m.p.weight_zero_point", "I32", [1, 1], struct.pack("<I", 0x0ac5)), shape]),
        "int8-block-zp.bin": (ct_config("int-quantized", 8), [
            ("m.p.weight", "I8", [8, 32], pattern(256, 3)),
            ("m.p.weight_scale", "F16", [2, 2], struct.pack("<4H", 0x3800, 0x3c00, 0x2e66, 0x4400)),
            ("m.p.weight_zero_point", "I8", [2, 2], bytes([3, 0, 0xfd, 0x7f])),
            ("m.p.input_scale", "F32", [1], f32s(0.02))]),
        "fp8-tensor.bin": (ct_config("float-quantized", 8, "float"), [
            ("m.p.weight", "F8_E4M3", [4, 16], pattern(64, 4)),
            ("m.p.weight_scale", "F32", [1], f32s(0.125))]),
        "mxfp4.bin": (ct_config("mxfp4-pack-quantized", 4, "float"), [
            ("m.p.weight_packed", "U8", [4, 32], pattern(128, 5)),
            ("m.p.weight_scale", "U8", [4, 2], bytes([120, 121, 127, 128, 0, 1, 130, 254]))]),
        "mxfp8.bin": (ct_config("mxfp8-quantized", 8, "float"), [
            ("m.p.weight", "F8_E4M3", [4, 64], pattern(256, 6)),
            ("m.p.weight_scale", "U8", [4, 2], bytes([127, 126, 125, 124, 123, 122, 121, 120]))]),
        "nvfp4.bin": (ct_config("nvfp4-pack-quantized", 4, "float"), [
            ("m.p.weight_packed", "U8", [4, 32], pattern(128, 7)),
            ("m.p.weight_scale", "F8_E4M3", [4, 4], bytes([0x38, 0x30, 0x7e, 0x20] * 4)),
            ("m.p.weight_global_scale", "F32", [1], f32s(2688.0))]),
        "old-release-int3.bin": (ct_config("pack-quantized", 3, version="0.12.2"), [
            ("m.p.weight_packed", "I32", [4, 6], pattern(96, 8)),
            ("m.p.weight_scale", "F32", [4, 1], f32s(1, 2, 3, 4)), shape]),
        "unknown-format.bin": (ct_config("marlin-24", 4), int4),
    }
    for name, (cfg, tensors) in seeds.items():
        put("ct_read", name, cfg.encode() + b"\0" + safetensors(tensors, pt))
    # no config.json: num_bits from the packed shape (8 words a row: int4 for 64 inputs)
    put("ct_read", "pack-int4-no-config.safetensors", safetensors(int4, pt))


# ---- config -------------------------------------------------------------------------------------

def config_seeds():
    with open(os.path.join(ROOT, "systemd", "quantd.conf"), "rb") as f:
        put("config", "shipped.conf", f.read())
    put("config", "every-section.conf", """[server]
listen = [::1]:0
insecure = yes
metrics_auth = token
http_threads = 8
idle_timeout = 30
max_upload = 1T
max_json_body = 1M
max_stats_body = 512K
[tls]
cert = /etc/quantd/tls/cert.pem
key = /etc/quantd/tls/key.pem ; inline comment
priorities = NORMAL
[limits]
max_connections = 10
max_connections_per_ip = 0
header_timeout = 5
body_timeout = 3600
body_min_rate = 1
max_body_memory = 4G
min_free_disk = 0
max_queued_jobs = 0
stats_quota = 1K
[storage]
data_dir = /var/lib/quantd/
db = /var/lib/quantd/other.db
[jobs]
workers = 256
quant_threads = 1024
max_attempts = 100
retention = 0
keep_outputs = 7
source_root = /
source_root = /tmp
[stats]
idempotency_window = 365d
[log]
level = debug
""")
    put("config", "durations.conf", "\ufeff[jobs]\nretention = 90s\n[stats]\n"
        "idempotency_window = 15m\n[log]\n# comment\nlevel = warn\n")
    put("config", "bad-unknown.conf", "[server]\nlisten = 127.0.0.1:8080\nlisten = :1\n[nope]\nx=1\n")
    put("config", "bad-value.conf", "[server]\nhttp_threads = 0x10\nmax_upload = 16Q\n")
    put("config", "bad-long-line.conf", "[storage]\ndata_dir = /" + "d" * 250 + "\n")
    put("config", "bad-outside.conf", "workers = 2\n[jobs\n")
    # an INI file, a NUL, then command-line arguments (NUL-separated)
    put("config", "with-flags.bin", "[server]\nlisten = 127.0.0.1:0\n\0--workers\0" "4\0"
        "--max-upload=2G\0--insecure\0check-config\0")
    put("config", "with-help.bin", "\0--help\0")
    put("config", "with-bad-flag.bin", "[log]\nlevel = info\n\0--nope=1\0migrate\0serve\0")


# ---- router -------------------------------------------------------------------------------------

def router_seeds():
    reqs = [
        "GET /healthz", "GET /readyz", "GET /metrics", "GET /v1/rulesets",
        "PUT /v1/rulesets/int8", "GET /v1/rulesets/int8", "DELETE /v1/rulesets/int8",
        "POST /v1/jobs", "GET /v1/jobs", "GET /v1/jobs/12", "DELETE /v1/jobs/12",
        "GET /v1/jobs/12/output", "GET /v1/jobs/12/outputs/model-00001-of-00002.safetensors",
        "GET /v1/jobs/12/report", "GET /v1/models", "PUT /v1/models/stories",
        "GET /v1/models/stories", "POST /v1/models/stories/stats",
        "GET /v1/models/stories/stats", "DELETE /v1/models/stories/stats",
        "GET /v1/models/stories/scales", "GET /v1/tokens", "POST /v1/tokens",
        "DELETE /v1/tokens/ci", "POST /v1/plans", "HEAD /healthz", "HEAD /v1/jobs/12/outputs/x.safetensors",
        # 405, 404 and edge cases
        "PATCH /v1/jobs/12", "POST /healthz", "GET /v1/jobs/", "GET /v1/jobs//report",
        "GET /v1/jobs/12/outputs/" + "n" * 127, "GET /v1/jobs/12/outputs/" + "n" * 128,
        "GET /nope", " /v1/jobs", "GET", "/v1/models/a/stats",
    ]
    for i, r in enumerate(reqs):
        put("router", f"req-{i:02d}.txt", r)


# ---- source paths -------------------------------------------------------------------------------

def source_seeds():
    # byte 0: which roots are configured (bit i: root i); '@' stands for the temporary directory
    cases = [
        (0x01, "@/models/llama/model.safetensors", "@/models/llama/model.safetensors: No such file"),
        (0x03, "@/data/inner/x/", "cannot open @/data/inner/x: a link (@/data)"),
        (0x22, "@/data/inner", "@/data"),
        (0x04, "@/a/b/c", "source.path names the root directory itself"),
        (0x08, "@/gone/root/x", "the source root cannot be opened"),
        (0x20, "/etc/passwd", "/srv/var/x and /srv/variant and @ and /"),
        (0x3f, "@/models/../models/llama/x", "@/models/llama//x"),
        (0x00, "relative/path", ""),
        (0x10, "@/data/inner/./x", "@/data/inner/"),
        (0x01, "@/models/llamas/x", "@/models/llamas/x"),
    ]
    for i, (mask, path, msg) in enumerate(cases):
        put("source", f"case-{i:02d}.bin", bytes([mask]) + path.encode() + b"\0" + msg.encode())


# ---- range and If-None-Match headers ------------------------------------------------------------

def range_seeds():
    # 8 bytes little-endian: the representation's size; then the header value
    cases = [
        (1000, "bytes=0-499"), (1000, "bytes=-500"), (1000, "bytes=500-"), (1000, "bytes=0-0,-1"),
        (0, "bytes=0-"), (10, "bytes=10-20"), (10, "Bytes = 2-3"), (10, "items=0-1"),
        (1 << 40, "bytes=18446744073709551615-"), (100, "bytes=5-1"),
        (100, "bytes=0-99999999999999999999999"), (100, '"abc", W/"def"'), (100, "*"),
        (100, 'W/"0123abcd"'), (100, '"0123abcd"'), (100, "bytes=,,0-1, "),
    ]
    for i, (size, value) in enumerate(cases):
        put("range", f"case-{i:02d}.bin", struct.pack("<Q", size) + value.encode())


# ---- whole requests to the running daemon -------------------------------------------------------

def http_seeds():
    # markers (fuzz_http.c): @SRC@ the source root, @OP@/@READER@/@TRAINER@ tokens, @JOB@ the
    # last job created, @LEN@ the length of the body that follows, up to @END@
    def req(method, target, token="@OP@", ctype=None, body=b"", extra="", last=False):
        head = f"{method} {target} HTTP/1.1\r\nHost: localhost\r\n"
        if last:
            head += "Connection: close\r\n"
        if token:
            head += f"Authorization: Bearer {token}\r\n"
        if ctype:
            head += f"Content-Type: {ctype}\r\n"
        if body or method in ("POST", "PUT"):
            head += "Content-Length: @LEN@\r\n"
        head += extra
        body = body.encode() if isinstance(body, str) else body
        return head.encode() + b"\r\n" + body + b"@END@"

    js, octets = "application/json", "application/octet-stream"
    rules = '{"rules": [{"module_path": ".*proj", "weight_qtype": "int8"}]}'
    srq = ('{"rules": [{"module_path": ".*up_proj", "weight_qtype": "int8", "act_qtype": "int8", '
           '"act_static_scale": true}]}')
    act = "model/layers/0/mlp/up_proj/dot_general0_lhs"
    weight = safetensors([("model.layers.0.mlp.up_proj.weight", "F32", [4, 8],
                           struct.pack("<32f", *[(i - 16) / 8 for i in range(32)]))])
    post = '{"step": 1, "stats": {"%s": {"absmax": [0.5, 1.5, 2.5, 3.5]}}}' % act
    post_st = safetensors([(act + "/min", "F32", [4], struct.pack("<4f", -1, -2, 0, -0.5)),
                           (act + "/max", "F32", [4], struct.pack("<4f", 1, 2, 3, 0.5))],
                          {"step": "3"})
    post_sq = ('{"stats": {"%s": {"absmax": [0.5, 1.5, 2.5, 3.5], "mean_sq": [0.25, 1, 4, 9]}, '
               '"only/sq": {"mean_sq": [1, 2]}}}' % act)
    post_sq_st = safetensors([(act + "/absmax", "F32", [4], struct.pack("<4f", 1, 2, 3, 4)),
                              (act + "/mean_sq", "F32", [4], struct.pack("<4f", 1, 4, 9, 16))])
    put_rules = req("PUT", "/v1/rulesets/int8", ctype=js, body=rules)

    def job(body, last=True):
        return put_rules + req("POST", "/v1/jobs", ctype=js, body=body, last=last)

    def then_read(target, extra=""):  # a source job, then a read of it
        return job('{"ruleset": "int8", "source": {"path": "@SRC@/ckpt"}}', last=False) + \
            req("GET", target, "@READER@", extra=extra, last=True)

    cases = {
        "healthz": req("GET", "/healthz", token=None, last=True),
        "metrics": req("GET", "/metrics", token=None, last=True),
        "http10": b"GET /readyz HTTP/1.0\r\n\r\n",
        "garbage": b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03",
        "no-token": req("GET", "/v1/jobs", token=None, last=True),
        "bad-token": req("GET", "/v1/jobs", token="qdt_" + "A" * 43, last=True),
        "reader-put-ruleset": req("PUT", "/v1/rulesets/int8", "@READER@", js, rules, last=True),
        "rulesets": put_rules + req("GET", "/v1/rulesets/int8", "@READER@") +
                    req("GET", "/v1/rulesets") + req("DELETE", "/v1/rulesets/int8", last=True),
        "ruleset-bare-list": req("PUT", "/v1/rulesets/bare", ctype=js,
                                 body='[{"module_path": ".*"}]', last=True),
        "ruleset-did-you-mean": req("PUT", "/v1/rulesets/typo", ctype=js, last=True,
                                    body='{"rules": [{"module_path": ".*", "weight_qtyp": "int8"}]}'),
        "upload": put_rules + req("POST", "/v1/jobs?ruleset=int8", ctype=octets, body=weight,
                                  last=True),
        "upload-compressed": put_rules + req(
            "POST", "/v1/jobs?ruleset=int8&layout=compressed-tensors", ctype=octets, body=weight,
            last=True),
        "upload-expect": put_rules + req("POST", "/v1/jobs?ruleset=int8", ctype=octets,
                                         body=weight, extra="Expect: 100-continue\r\n",
                                         last=True),
        "upload-no-ctype": put_rules + req("POST", "/v1/jobs?ruleset=int8", body=weight, last=True),
        "job-source-file": job('{"ruleset": "int8", "source": {"path": "@SRC@/model.safetensors"}}'),
        "job-source-dir": job('{"ruleset": "int8", "layout": "compressed-tensors", '
                              '"source": {"path": "@SRC@/ckpt"}}'),
        "job-source-dir-link": job('{"ruleset": "int8", "source": {"path": "@SRC@/ckpt-link"}}'),
        "job-source-link": job('{"ruleset": "int8", "source": {"path": "@SRC@/passwd.safetensors"}}'),
        "job-source-outside": job('{"ruleset": "int8", "source": {"path": "/etc/passwd"}}'),
        "job-source-dotdot": job('{"ruleset": "int8", "source": {"path": "@SRC@/../data/quantd.db"}}'),
        "job-inline-rules": req("POST", "/v1/jobs", ctype=js, last=True,
                                body='{"rules": [{"module_path": ".*", "weight_qtype": "int4", '
                                     '"tile_size": 8}], "source": {"path": "@SRC@/model.safetensors"}}'),
        "job-srq": req("POST", "/v1/models/stories/stats", "@TRAINER@", js, post) +
                   req("PUT", "/v1/rulesets/srq", ctype=js, body=srq) +
                   req("POST", "/v1/jobs?ruleset=srq&stats_model=stories", ctype=octets,
                       body=weight, last=True),
        "jobs": req("GET", "/v1/jobs?limit=5&state=succeeded", last=True),
        "plan-source": put_rules + req("POST", "/v1/plans", ctype=js, last=True,
                                       body='{"ruleset": "int8", "layout": "compressed-tensors", '
                                            '"source": {"path": "@SRC@/ckpt"}}'),
        "plan-inline-unused": req("POST", "/v1/plans", ctype=js, last=True,
                                  body='{"rules": [{"module_path": "nothing", "weight_qtype": '
                                       '"int8"}, {"module_path": ".*", "weight_qtype": "int4"}], '
                                       '"source": {"path": "@SRC@/model.safetensors"}}'),
        "plan-header": put_rules + req("POST", "/v1/plans?ruleset=int8", ctype=octets,
                                       body=weight[:8 + struct.unpack("<Q", weight[:8])[0]],
                                       last=True),
        "job": then_read("/v1/jobs/@JOB@"),
        "job-output-range": then_read("/v1/jobs/@JOB@/output", "Range: bytes=0-99\r\n"),
        "job-output-head": then_read("/v1/jobs/@JOB@/output", 'If-None-Match: W/"x", "y"\r\n')
                           .replace(b"GET /v1/jobs/@JOB@/output", b"HEAD /v1/jobs/@JOB@/output"),
        "job-outputs-config": then_read("/v1/jobs/@JOB@/outputs/config.json"),
        "job-outputs-tokenizer": then_read("/v1/jobs/@JOB@/outputs/tokenizer.json"),
        "job-report": then_read("/v1/jobs/@JOB@/report"),
        "job-earlier": req("GET", "/v1/jobs/1/outputs/model.safetensors", "@READER@",
                           extra="Range: bytes=-16\r\n") +
                       req("GET", "/v1/jobs/1/report", "@READER@", last=True),
        "job-delete": req("DELETE", "/v1/jobs/@JOB@", last=True),
        "job-nul": req("GET", "/v1/jobs/1%00/output", last=True),
        "stats-post": req("POST", "/v1/models/stories/stats?mode=update", "@TRAINER@", js, post,
                          extra="Idempotency-Key: fuzz-1\r\n") +
                      req("POST", "/v1/models/stories/stats?mode=update", "@TRAINER@", js, post,
                          extra="Idempotency-Key: fuzz-1\r\n", last=True),
        "stats-post-st": req("POST", "/v1/models/stories/stats", "@TRAINER@", octets, post_st,
                             last=True),
        "stats-merge": req("POST", "/v1/models/stories/stats?mode=merge", "@TRAINER@", js,
                           '{"stats": {"%s": {"count": 4, "sum_of_absmax": [2, 4, 6, 8]}}}' % act,
                           last=True),
        "stats-mean-sq": req("POST", "/v1/models/imp/stats", "@TRAINER@", js, post_sq) +
                         req("POST", "/v1/models/imp/stats", "@TRAINER@", js, post) +
                         req("POST", "/v1/models/imp/stats", "@TRAINER@", octets, post_sq_st) +
                         req("POST", "/v1/models/imp/stats?mode=merge", "@TRAINER@", js,
                             '{"stats": {"%s": {"count": 2, "sum_of_absmax": [1, 2, 3, 4], '
                             '"sum_of_mean_sq": [2, 2, 2, 2]}}}' % act) +
                         req("GET", "/v1/models/imp/stats", "@TRAINER@", last=True),
        "stats-get": req("POST", "/v1/models/stories/stats", "@TRAINER@", js, post) +
                     req("GET", "/v1/models/stories/stats?name=model/layers/0/.*", "@TRAINER@") +
                     req("GET", "/v1/models/stories", "@TRAINER@") +
                     req("GET", "/v1/models", "@TRAINER@", last=True),
        "stats-delete": req("DELETE", "/v1/models/stories/stats", last=True),
        "scales": req("POST", "/v1/models/stories/stats", "@TRAINER@", js, post) +
                  req("PUT", "/v1/rulesets/srq", ctype=js, body=srq) +
                  req("GET", "/v1/models/stories/scales?ruleset=srq&static_only=true", last=True),
        "models-reader": req("GET", "/v1/models", "@READER@", last=True),
        "model-put": req("PUT", "/v1/models/stories", ctype=js, body="{}", last=True),
        "tokens": req("GET", "/v1/tokens") +
                  req("POST", "/v1/tokens", ctype=js, body='{"name": "ci", "role": "reader"}') +
                  req("DELETE", "/v1/tokens/ci", last=True),
        "token-revoke": req("DELETE", "/v1/tokens/fuzz-reader", last=True),
        "chunked": b"POST /v1/models/stories/stats HTTP/1.1\r\nHost: x\r\n"
                   b"Authorization: Bearer @TRAINER@\r\nContent-Type: application/json\r\n"
                   b"Transfer-Encoding: chunked\r\n\r\n" +
                   b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in
                            (post[:20].encode(), post[20:].encode())) + b"0\r\n\r\n",
    }
    for i, (name, data) in enumerate(cases.items()):
        put("http", f"{i:02d}-{name}.txt", data)


def main():
    st_read_seeds()
    ct_read_seeds()
    stats_st_seeds()
    stats_json_seeds()
    srq_stats_seeds()
    rules_seeds()
    config_seeds()
    router_seeds()
    source_seeds()
    range_seeds()
    http_seeds()
    for target, names in sorted(written.items()):
        print(f"make-corpus: {target}: {len(names)} seeds")


if __name__ == "__main__":
    main()
