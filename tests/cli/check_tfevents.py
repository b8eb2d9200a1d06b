#!/usr/bin/env python3
"""An independent reader of `zero train`'s TensorBoard event file (no tensorboard package: CI has
no pip): TFRecord framing with a bitwise CRC-32C, a minimal protobuf decoder, then every scalar
checked against metrics.jsonl and the csv_monitor files of the same run.

    check_tfevents.py TB_DIR CSV_DIR METRICS_JSONL TRAIN_BATCH_SIZE

Prints "PASS: ..." or exits 1 naming what is wrong.
"""
import csv
import glob
import json
import os
import struct
import sys


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(buf, pos):
    value = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, pos


def fields(buf):
    """(field number, wire type, value) of one message: bytes for length-delimited fields."""
    pos = 0
    while pos < len(buf):
        key, pos = varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        elif wire == 2:
            n, pos = varint(buf, pos)
            value, pos = buf[pos:pos + n], pos + n
        else:
            raise ValueError(f"wire type {wire}")
        yield number, wire, value


def records(data):
    pos = 0
    while pos < len(data):
        if len(data) - pos < 12:
            raise ValueError(f"torn header at {pos}")
        (length,) = struct.unpack_from("<Q", data, pos)
        (length_crc,) = struct.unpack_from("<I", data, pos + 8)
        if length_crc != masked(crc32c(data[pos:pos + 8])):
            raise ValueError(f"length CRC at {pos}")
        body = data[pos + 12:pos + 12 + length]
        (body_crc,) = struct.unpack_from("<I", data, pos + 12 + length)
        if body_crc != masked(crc32c(body)):
            raise ValueError(f"data CRC at {pos}")
        yield body
        pos += 12 + length + 4


def events(path):
    out = []
    with open(path, "rb") as f:
        data = f.read()
    for body in records(data):
        ev = {"step": 0}
        for number, _, value in fields(body):
            if number == 1:
                ev["wall_time"] = struct.unpack("<d", value)[0]
            elif number == 2:
                ev["step"] = value
            elif number == 3:
                ev["file_version"] = value.decode()
            elif number == 5:
                for vnum, _, v in fields(value):
                    assert vnum == 1
                    for n, _, x in fields(v):
                        if n == 1:
                            ev["tag"] = x.decode()
                        elif n == 2:
                            ev["value"] = struct.unpack("<f", x)[0]
        out.append(ev)
    return out


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def main():
    tb_dir, csv_dir, metrics_path, tbs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    files = glob.glob(os.path.join(tb_dir, "events.out.tfevents.*"))
    if len(files) != 1:
        fail(f"expected one event file in {tb_dir}, found {files}")
    evs = events(files[0])
    if evs[0].get("file_version") != "brain.Event:2":
        fail(f"first record is not the file_version event: {evs[0]}")
    scalars = {}
    for ev in evs[1:]:
        if "tag" not in ev or "value" not in ev or not ev.get("wall_time"):
            fail(f"not a scalar event: {ev}")
        scalars[(ev["tag"], ev["step"])] = ev["value"]
    lines = [json.loads(l) for l in open(metrics_path) if l.strip()]
    want = {"Train/Samples/train_loss": "loss", "Train/Samples/lr": "lr",
            "Train/Samples/grad_norm": "grad_norm", "Train/Samples/tokens_per_second": "tokens_per_s"}
    for line in lines:
        x = line["step"] * tbs
        for tag, key in want.items():
            if key in line and scalars.get((tag, x)) != f32(line[key]):
                fail(f"{tag} at {x}: {scalars.get((tag, x))} != {line[key]} (metrics.jsonl)")
        for tag, key in [("Train/Samples/host_rss_mib", "host_rss_bytes"),
                         ("Train/Samples/host_rss_peak_mib", "host_rss_peak_bytes")]:
            if scalars.get((tag, x)) != f32(line[key] / 1048576.0):
                fail(f"{tag} at {x}: {scalars.get((tag, x))} vs {line[key]} bytes")
        if "eval_loss" in line and scalars.get(("Eval/Samples/eval_loss", x)) != f32(line["eval_loss"]):
            fail(f"Eval/Samples/eval_loss at {x}")
    tags = sorted({t for t, _ in scalars})
    # csv_monitor: the same tags, the same points (its values printed from the doubles).
    for tag in tags:
        path = os.path.join(csv_dir, tag.replace("/", "_") + ".csv")
        if not os.path.exists(path):
            fail(f"csv_monitor has no {path}")
        rows = list(csv.reader(open(path)))
        if rows[0] != ["step", tag]:
            fail(f"{path} header {rows[0]}")
        points = {int(r[0]): float(r[1]) for r in rows[1:]}
        mine = {s: v for (t, s), v in scalars.items() if t == tag}
        if sorted(points) != sorted(mine) or any(f32(points[s]) != mine[s] for s in mine):
            fail(f"{path} disagrees with the event file")
    evals = sum(1 for t, _ in scalars if t == "Eval/Samples/eval_loss")
    print(f"PASS: {len(evs) - 1} scalars under {len(tags)} tags ({', '.join(tags)}), {evals} eval "
          f"points, CRCs checked, matching metrics.jsonl and csv_monitor")


if __name__ == "__main__":
    main()
