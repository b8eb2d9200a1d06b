#!/usr/bin/env python3
"""Writes tests/fixtures/tfevents/: event files made by TensorBoard's own protobuf classes and
record writer, which src/runtime/tf_event_test.cc compares with ours byte for byte, and
check_tfevents.py's reader for event files that `zero train` writes.

Needs the `tensorboard` package (pip install tensorboard; tested with 2.21.0). CI has no pip: the
fixture is committed.

    python3 tools/golden/make_tfevents_fixture.py [--out DIR]
"""
import argparse
import io
import os

from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.record_writer import RecordWriter

# (wall_time, step, tag, value): zeros (proto3 defaults: omitted fields), a negative value, a large
# step (multi-byte varint), a long tag, DeepSpeed's tag names.
SCALARS = [
    (1764300000.25, 1, "Train/Samples/train_loss", 5.546875),
    (1764300000.5, 1, "Train/Samples/lr", 0.0),
    (1764300001.0, 0, "Train/Samples/loss_scale", 65536.0),
    (0.0, 300, "Eval/Samples/eval_loss", -1.5),
    (1764300002.75, 1234567890123, "Train/Samples/" + "x" * 150, 3.0e-7),
]


def write(path):
    buf = io.BytesIO()
    w = RecordWriter(buf)
    w.write(event_pb2.Event(wall_time=1764300000.0, file_version="brain.Event:2").SerializeToString())
    for wall_time, step, tag, value in SCALARS:
        ev = event_pb2.Event(wall_time=wall_time, step=step,
                             summary=summary_pb2.Summary(
                                 value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)]))
        w.write(ev.SerializeToString())
    with open(path, "wb") as f:
        f.write(buf.getvalue())


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "..", "tests", "fixtures", "tfevents"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "tensorboard_writer.tfevents")
    write(path)
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main()
