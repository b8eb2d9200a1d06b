#!/usr/bin/python3
"""Compares two metrics.jsonl files step by step: loss within a relative tolerance.

Usage: compare_metrics.py A.jsonl B.jsonl [rtol]   (exit 0 when every step of A matches B's)
Every step logged in A must be in B (B may hold more, e.g. A is a resumed run's tail).
rtol 0 means bit-identical losses.
Standard library only, so CI needs nothing beyond Debian's python3.
"""
import json
import sys


def read(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def main():
    a, b = read(sys.argv[1]), read(sys.argv[2])
    rtol = float(sys.argv[3]) if len(sys.argv) > 3 else 1e-5
    if not a:
        print(f"{sys.argv[1]}: no steps")
        return 1
    by_step = {row["step"]: row for row in b}
    for x in a:
        y = by_step.get(x["step"])
        if y is None:
            print(f"step {x['step']} is missing from {sys.argv[2]}")
            return 1
        # The step-0 line of --eval_on_start has no "loss"; eval_loss is compared where both
        # lines have it.
        for key in ("loss", "eval_loss"):
            if key in x and key in y and abs(x[key] - y[key]) > rtol * abs(y[key]):
                print(f"step {x['step']}: {key} {x[key]} vs {y[key]} (rtol {rtol})")
                return 1
            if (key in x) != (key in y):
                print(f"step {x['step']}: {key} is in only one of the files")
                return 1
    print(f"{len(a)} steps match within {rtol}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
