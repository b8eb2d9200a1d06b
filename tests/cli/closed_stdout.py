#!/usr/bin/python3
"""Runs a command with stdout a pipe whose reader is already gone, so its every write to stdout fails
with EPIPE (SIGPIPE at its default action in the child, as a shell pipeline leaves it), and prints
the command's stderr. Exit status: the command's.

Deterministic where `cmd | head -n 1` was not: when every line fit in the pipe before `head`
exited (a slow, loaded machine), no write ever failed and the test saw no "stdout is closed".

    closed_stdout.py zero train ... --output_dir OUT
"""
import os
import subprocess
import sys

r, w = os.pipe()
os.close(r)
p = subprocess.run(sys.argv[1:], stdout=w, stderr=subprocess.PIPE, text=True)
os.close(w)
print(p.stderr, end="")
sys.exit(p.returncode)
