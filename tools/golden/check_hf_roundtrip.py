#!/usr/bin/python3
"""Checks that an HF model directory saved by `zero train --save_final` is the fixture it started from.

Usage: /usr/bin/python3 tools/golden/check_hf_roundtrip.py SAVED_DIR FIXTURE_DIR

For tests/cli/hf_matrix.cmake: a tests/fixtures/hf_matrix case trained with learning rate 0 and
saved must come back as the same model, so transformers computes the same loss from it as the one
recorded in the fixture's expected.json. Checked here without torch or transformers (CI has
neither):
- the same tensor names (a tied head absent in both), each with the same dtype, shape and bytes
  (bitwise), whichever files (single or sharded + index) hold them on either side;
- config.json: the same keys (so the same layout: rope_parameters / dtype / layer_types or
  rope_theta / rope_scaling / torch_dtype) with the same values, `transformers_version` aside.
Exits 1 naming every difference.
"""
import json
import os
import struct
import sys


def read_tensors(d):
    """{name: (dtype, shape, raw bytes)} over the directory's safetensors file(s)."""
    index = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    out = {}
    for name in files:
        with open(os.path.join(d, name), "rb") as f:
            blob = f.read()
        (n,) = struct.unpack("<Q", blob[:8])
        header = json.loads(blob[8:8 + n])
        header.pop("__metadata__", None)
        for t, e in header.items():
            b, end = e["data_offsets"]
            assert t not in out, f"{d}: tensor {t} is in more than one file"
            out[t] = (e["dtype"], e["shape"], blob[8 + n + b:8 + n + end])
    return out


def main():
    saved, fixture = sys.argv[1], sys.argv[2]
    errors = []
    got, want = read_tensors(saved), read_tensors(fixture)
    for t in sorted(set(got) ^ set(want)):
        errors.append(f"tensor {t}: only in {saved if t in got else fixture}")
    for t in sorted(set(got) & set(want)):
        (gd, gs, gb), (wd, ws, wb) = got[t], want[t]
        if (gd, gs) != (wd, ws):
            errors.append(f"tensor {t}: {gd} {gs} saved, {wd} {ws} in the fixture")
        elif gb != wb:
            errors.append(f"tensor {t}: values differ (not bitwise equal)")

    with open(os.path.join(saved, "config.json")) as f:
        got_cfg = json.load(f)
    with open(os.path.join(fixture, "config.json")) as f:
        want_cfg = json.load(f)
    for k in sorted(set(got_cfg) | set(want_cfg)):
        if k == "transformers_version":
            continue
        if k not in got_cfg or k not in want_cfg:
            errors.append(f"config.json: key {k} only in {saved if k in got_cfg else fixture}")
        elif got_cfg[k] != want_cfg[k]:
            errors.append(f"config.json: {k}: {got_cfg[k]!r} saved, {want_cfg[k]!r} in the fixture")

    for e in errors:
        print(f"check_hf_roundtrip: {e}", file=sys.stderr)
    if errors:
        sys.exit(1)
    print(f"check_hf_roundtrip: {saved} == {fixture}: {len(got)} tensors bitwise, config.json keys")


if __name__ == "__main__":
    main()
