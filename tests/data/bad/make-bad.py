#!/usr/bin/env python3
# make-bad.py -- regenerates the malformed safetensors corpus in this directory: one
# NAME.safetensors per fault and NAME.expect holding a substring the reader's error must contain.
# Python standard library only. Run: python3 tests/data/bad/make-bad.py
# SPDX-License-Identifier: Apache-2.0
import glob
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def st(header, data=b"", length=None):
    """8-byte little-endian length (the header's own unless given), header, data."""
    if isinstance(header, str):
        header = header.encode("utf-8")
    n = len(header) if length is None else length
    return struct.pack("<Q", n) + header + data


def one(name, dtype="F32", shape="[2]", offsets="[0,8]", extra=""):
    """A header with one tensor entry, built from raw JSON pieces."""
    return ('{"%s":{"dtype":"%s","shape":%s,"data_offsets":%s%s}}'
            % (name, dtype, shape, offsets, extra))


def entry(dtype, shape, offsets):
    return '{"dtype":"%s","shape":%s,"data_offsets":%s}' % (dtype, shape, offsets)


def two(a, b):
    return '{"a":%s,"b":%s}' % (a, b)


CASES = {
    # the length prefix
    "empty": (b"", "empty file"),
    "short": (b"\x05\x00\x00", "shorter than the 8-byte header length"),
    "header-past-eof": (st("{}", length=1000), "runs past the end"),
    "header-too-large": (st("{}", length=1 << 40), "not a safetensors file (the first 8 bytes are "
                         "not a header length: they read as 1099511627776, more than the "
                         "100000000-byte limit)"),
    "header-empty": (st(""), "not valid JSON"),
    "text-file": (b"# Model card\n\nA tiny model trained on TinyStories.\n",
                  "not a safetensors file (the first 8 bytes are not a header length"),
    "binary-after-length": (st(b"\x89PNG\r\n\x1a\n"), "not a safetensors file (the 8 bytes after "
                            "the 8-byte header length are not a JSON header"),
    # the header text
    "not-json": (st("{not json}"), "not valid JSON"),
    "trailing-garbage": (st("{} x"), "not valid JSON"),
    "invalid-utf8": (st(b'{"w\xff":' + entry("U8", "[0]", "[0,0]").encode() + b"}"),
                     "not valid UTF-8"),
    "utf8-surrogate": (st(b'{"\xed\xa0\x80":' + entry("U8", "[0]", "[0,0]").encode() + b"}"),
                       "not valid UTF-8"),
    "utf8-overlong": (st(b'{"\xc0\xaf":' + entry("U8", "[0]", "[0,0]").encode() + b"}"),
                      "not valid UTF-8"),
    "array": (st("[]"), "header is an array, not a JSON object"),
    "duplicate-name": (st('{"w":%s,"w":%s}' % (entry("U8", "[4]", "[0,4]"),
                                                entry("U8", "[4]", "[4,8]")), b"\0" * 8),
                       "duplicate object key"),
    # one tensor entry
    "entry-not-object": (st('{"w":3}'), "tensor 'w': entry is an integer, not an object"),
    "unknown-key": (st(one("w", extra=',"extra":1'), b"\0" * 8), "tensor 'w': unknown key \"extra\""),
    "missing-key": (st('{"w":{"dtype":"F32","shape":[2]}}', b"\0" * 8),
                    "tensor 'w': missing \"data_offsets\""),
    "duplicate-key": (st('{"w":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}}',
                         b"\0" * 8), "duplicate object key"),
    "unknown-dtype": (st(one("w", dtype="F7"), b"\0" * 8), "tensor 'w': unknown dtype \"F7\""),
    "dtype-lowercase": (st(one("w", dtype="f32"), b"\0" * 8), "unknown dtype \"f32\""),
    "dtype-not-string": (st('{"w":{"dtype":4,"shape":[2],"data_offsets":[0,8]}}', b"\0" * 8),
                         "tensor 'w': dtype is an integer, not a string"),
    "shape-negative": (st(one("w", shape="[2,-3]"), b"\0" * 8), "tensor 'w': shape[1] is negative"),
    "shape-not-list": (st(one("w", shape="2"), b"\0" * 8),
                       "tensor 'w': shape is an integer, not an array"),
    "shape-non-integer": (st(one("w", shape="[2.0]"), b"\0" * 8),
                          "tensor 'w': shape[0] is a real number, not an integer"),
    "shape-string-dim": (st(one("w", shape='["2"]'), b"\0" * 8),
                         "tensor 'w': shape[0] is a string, not an integer"),
    "rank-9": (st(one("w", shape="[1,1,1,1,1,1,1,1,2]"), b"\0" * 8),
               "tensor 'w': shape has rank 9, more than the 8 supported"),
    "offsets-wrong-length": (st(one("w", offsets="[0,8,16]"), b"\0" * 8),
                             "tensor 'w': data_offsets must be an array [begin, end]"),
    "offsets-not-list": (st(one("w", offsets='"0-8"'), b"\0" * 8),
                         "tensor 'w': data_offsets must be an array [begin, end]"),
    "offsets-negative": (st(one("w", offsets="[-8,0]"), b"\0" * 8),
                         "tensor 'w': data_offsets must hold two non-negative integers"),
    "end-before-begin": (st(two(entry("U8", "[8]", "[0,8]"), entry("U8", "[0]", "[8,4]")),
                            b"\0" * 8), "tensor 'b': data_offsets [8, 4] end before begin"),
    "size-mismatch": (st(one("w", shape="[2,3]", offsets="[0,12]"), b"\0" * 12),
                      "tensor 'w': data_offsets [0, 12] hold 12 bytes but shape [2, 3] of F32 "
                      "needs 24"),
    "shape-overflow": (st(one("w", shape="[4294967296,4294967296]", offsets="[0,8]"), b"\0" * 8),
                       "tensor 'w': shape [4294967296, 4294967296] of F32 overflows"),
    "f4-odd": (st(one("w", dtype="F4", shape="[3]", offsets="[0,2]"), b"\0" * 2),
               "tensor 'w': shape [3] of F4 is 12 bits, not a whole number of bytes"),
    "f6-misaligned": (st(one("w", dtype="F6_E2M3", shape="[2]", offsets="[0,2]"), b"\0" * 2),
                      "misaligned"),
    # the layout of the byte buffer
    "overlap": (st(two(entry("U8", "[8]", "[0,8]"), entry("U8", "[8]", "[4,12]")), b"\0" * 12),
                "tensor 'b': data_offsets [4, 12] overlap tensor 'a' ending at 8"),
    "hole": (st(two(entry("U8", "[8]", "[0,8]"), entry("U8", "[8]", "[12,20]")), b"\0" * 20),
             "tensor 'b': data_offsets [12, 20] leave a hole of 4 bytes"),
    "first-not-zero": (st(one("w", offsets="[4,12]"), b"\0" * 12),
                       "tensor 'w': data starts at offset 4, but the first tensor must start at 0"),
    "trailing-bytes": (st(one("w"), b"\0" * 11), "3 trailing bytes"),
    "trailing-bytes-no-tensors": (st("{}", b"\0"), "1 trailing bytes"),
    "missing-bytes": (st(one("w"), b"\0" * 5), "3 missing bytes"),
    # __metadata__
    "metadata-non-string": (st('{"__metadata__":{"format":"pt","n":1}}'),
                            "__metadata__: value of \"n\" is an integer, not a string"),
    "metadata-not-object": (st('{"__metadata__":["pt"]}'), "__metadata__ is an array, not an object"),
}


def main():
    for old in glob.glob(os.path.join(HERE, "*.safetensors")) + \
            glob.glob(os.path.join(HERE, "*.expect")):
        os.remove(old)
    for name, (content, expect) in sorted(CASES.items()):
        with open(os.path.join(HERE, name + ".safetensors"), "wb") as f:
            f.write(content)
        with open(os.path.join(HERE, name + ".expect"), "w", encoding="utf-8") as f:
            f.write(expect + "\n")
    print("%d cases in %s" % (len(CASES), HERE))


if __name__ == "__main__":
    main()
