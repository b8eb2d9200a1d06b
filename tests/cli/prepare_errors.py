#!/usr/bin/env python3
"""`zero data prepare` refusals (issue 12): invalid UTF-8 (plain text and JSONL), a missing field
and an unknown chat role each exit 2 with FILE:LINE and the reason, write nothing under a fresh
PREFIX, and leave an earlier PREFIX's three files byte for byte as they were.
Usage: prepare_errors.py ZERO MODEL_DIR CHAT_FIXTURES_JSON WORK_DIR"""
import os
import shutil
import subprocess
import sys

zero, model, fixtures, work = sys.argv[1:5]
here = os.path.dirname(os.path.abspath(__file__))
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
chat_model = os.path.join(work, "zephyr_model")  # a chat template that adds no tokens
subprocess.run([sys.executable, os.path.join(here, "chat_variant.py"), model, chat_model, fixtures,
                "zephyr"], check=True)
good = os.path.join(work, "good.jsonl")
with open(good, "w") as f:
    f.write('{"text": "fine"}\n{"messages": [{"role": "user", "content": "Hi"}, '
            '{"role": "assistant", "content": "Hello"}]}\n')
CASES = [  # name, file content, line, reason
    ("utf8.txt", b"ok\nstill ok\nbad \xc3\x28 byte\n", 3, "not valid UTF-8 (byte 0xC3 at column 5)"),
    ("utf8.jsonl", b'{"text": "a"}\n{"text": "b \xff"}\n', 2, "not valid UTF-8 (byte 0xFF at column 13)"),
    ("field.jsonl", b'{"text": "a"}\n\n{"prompt": "p"}\n', 3, 'no "completion" field'),
    ("role.jsonl", b'{"text": "a"}\n{"messages": [{"role": "user", "content": "a"}, '
                   b'{"role": "robot", "content": "b"}]}\n', 2,
     'message 1: unknown role "robot" (system, user or assistant)'),
]
SUFFIXES = (".tokens", ".mask", ".manifest.json")
failures = 0
for name, content, line, reason in CASES:
    path = os.path.join(work, name)
    open(path, "wb").write(content)
    kept = os.path.join(work, "kept_" + name)
    subprocess.run([zero, "data", "prepare", "--model", chat_model, "--output", kept, good],
                   check=True, stdout=subprocess.DEVNULL)
    before = [open(kept + s, "rb").read() for s in SUFFIXES]
    for prefix in (kept, os.path.join(work, "fresh_" + name)):
        p = subprocess.run([zero, "data", "prepare", "--model", chat_model, "--output", prefix,
                            good, path], capture_output=True, text=True)
        want = "%s:%d: %s (nothing written)" % (path, line, reason)
        ok = p.returncode == 2 and want in p.stderr
        if prefix == kept:
            ok &= [open(kept + s, "rb").read() for s in SUFFIXES] == before
        else:
            ok &= not any(os.path.exists(prefix + s) for s in SUFFIXES)
        ok &= not any(f.endswith(".tmp") or ".tmp." in f for f in os.listdir(work))
        print("%s %s -> %s: %s" % ("ok  " if ok else "FAIL", name, prefix, p.stderr.strip()))
        failures += not ok
print("PREPARE_ERRORS_OK" if failures == 0 else "FAIL")
sys.exit(1 if failures else 0)
