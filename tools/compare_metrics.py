#!/usr/bin/python3
"""Compares two metrics.jsonl files step by step: loss within a relative tolerance.

Usage: compare_metrics.py A.jsonl B.jsonl [rtol]   (exit 0 when every step matches)
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
    if len(a) != len(b) or not a:
        print(f"step counts differ: {len(a)} vs {len(b)}")
        return 1
    for x, y in zip(a, b):
        if x["step"] != y["step"]:
            print(f"step numbers differ: {x['step']} vs {y['step']}")
            return 1
        if abs(x["loss"] - y["loss"]) > rtol * abs(y["loss"]):
            print(f"step {x['step']}: loss {x['loss']} vs {y['loss']} (rtol {rtol})")
            return 1
    print(f"{len(a)} steps match within {rtol}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
