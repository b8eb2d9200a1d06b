#!/usr/bin/env python3
"""Loads event files with TensorBoard's own reader and prints every scalar, one per line:
"<tag> <step> <value>". Exit 1 when a file fails to load (a bad CRC, a torn record).

    python3 tools/golden/check_tfevents.py DIR_OR_FILE...

Needs the `tensorboard` package (pip install tensorboard). Used by hand on `zero train` event files
(tests/cli/monitor.cmake runs our independent C++ reader in CI instead).
"""
import os
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def main():
    status = 0
    for arg in sys.argv[1:]:
        acc = EventAccumulator(arg, size_guidance={"scalars": 0})
        acc.Reload()
        tags = acc.Tags()["scalars"]
        if not tags:
            print(f"{arg}: no scalars", file=sys.stderr)
            status = 1
        for tag in sorted(tags):
            for ev in acc.Scalars(tag):
                print(f"{tag} {ev.step} {ev.value!r}")
    return status


if __name__ == "__main__":
    sys.exit(main())
