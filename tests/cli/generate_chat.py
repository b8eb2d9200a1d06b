#!/usr/bin/env python3
"""CLI test of `zero generate --chat` (issue 12 item 5) on the tiny BPE model of bpe_model.py.
A ChatML copy (chat_variant.py) must encode "Hi there!" to the ids transformers'
apply_chat_template(messages, add_generation_prompt=True, tokenize=True) gives for the same files
(HF_IDS, made once with transformers 5.24), reply with exactly the greedy continuation of those
ids, and stop at <|im_end|> and EOS; --chat with --prompt, a tokenizer without a chat_template and
an unrecognised template are refused with exit 2 and the file named.
Usage: generate_chat.py ZERO BPE_MODEL_DIR CHAT_FIXTURES_JSON WORK_DIR"""
import os
import subprocess
import sys

zero, model, fixtures, work = sys.argv[1:5]
here = os.path.dirname(os.path.abspath(__file__))
HF_IDS = [501, 326, 311, 309, 376, 260, 75, 299, 378, 298, 376, 295, 36, 502, 326, 260, 501,
          373, 309, 309, 299, 309, 310, 291, 304, 310, 260]
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def run(*args):
    p = subprocess.run([zero, *args], capture_output=True)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def variant(name, family):
    dst = os.path.join(work, name)
    subprocess.run([sys.executable, os.path.join(here, "chat_variant.py"), model, dst, fixtures,
                    family], check=True, capture_output=True)
    return dst


chatml = variant("chatml_model", "chatml")
greedy = ["--temperature", "0", "--max_new_tokens", "12"]
rc, reply, err = run("generate", "--model", chatml, "--chat", "Hi there!", *greedy)
check(rc == 0 and reply.endswith("\n"), "--chat exits 0: " + err)
reply = reply[:-1]  # the newline generate prints after the reply
check("2, 502" in err, "the reply stops at EOS (2) and <|im_end|> (502): " + err.strip())
rc, out, _ = run("generate", "--model", chatml, "--prompt_tokens", ",".join(map(str, HF_IDS)),
                 *greedy)
ids = out.split()
check(rc == 0 and ids[: len(HF_IDS)] == [str(i) for i in HF_IDS], "--prompt_tokens echoes HF_IDS")
_, prompt_text, _ = run("data", "detokenize", "--model", chatml, "--skip-special-tokens",
                        *ids[: len(HF_IDS)])
_, whole_text, _ = run("data", "detokenize", "--model", chatml, "--skip-special-tokens", *ids)
check(prompt_text.endswith("assistant\n") and whole_text.startswith(prompt_text),
      "detokenize of the prompt is a prefix of the whole decode")
want = whole_text[len(prompt_text):]
check(reply == want, "the --chat reply %r is the continuation of HF's ids %r" % (reply, want))

rc, _, err = run("generate", "--model", chatml, "--chat", "Hi", "--prompt", "Hi")
check(rc == 2 and "--chat, --prompt and --prompt_tokens exclude each other" in err,
      "--chat with --prompt refused: " + err.strip())
rc, _, err = run("generate", "--model", model, "--chat", "Hi")
check(rc == 2 and "tokenizer_config.json: no chat_template" in err,
      "no chat_template: exit 2 naming tokenizer_config.json: " + err.strip())
other = variant("other_model", "{{ messages | tojson }}")
rc, _, err = run("generate", "--model", other, "--chat", "Hi")
check(rc == 2 and "tokenizer_config.json: chat_template is none of" in err and
      "it begins \"{{ messages | tojson }}\"" in err,
      "unrecognised chat_template: exit 2 naming it: " + err.strip())
sys.exit(1 if failures else 0)
