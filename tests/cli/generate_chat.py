#!/usr/bin/env python3
"""CLI test of `zero generate --chat` (issue 12 item 5) on the tiny BPE model of bpe_model.py.
A ChatML copy (chat_variant.py, with <|im_start|> / <|im_end|> added) and a Llama-3 copy (template
only: this tokenizer has no <|eot_id|>) must encode the message to the ids transformers'
apply_chat_template(messages, add_generation_prompt=True, tokenize=True) gives for the same files
(HF ids, made once with transformers 5.24), reply with exactly the greedy continuation of those
ids, and stop at EOS, and at <|im_end|> for ChatML; --chat with --prompt, a tokenizer without a
chat_template and an unrecognised template are refused with exit 2 and the file named.
Usage: generate_chat.py ZERO BPE_MODEL_DIR CHAT_FIXTURES_JSON WORK_DIR"""
import os
import subprocess
import sys

zero, model, fixtures, work = sys.argv[1:5]
here = os.path.dirname(os.path.abspath(__file__))
CASES = [  # family, message, HF's ids, the stop ids zero reports
    ("chatml", "Hi there!",
     [501, 326, 311, 309, 376, 260, 75, 299, 378, 298, 376, 295, 36, 502, 326, 260, 501, 373, 309,
      309, 299, 309, 310, 291, 304, 310, 260], "token ids 2, 502 (end of turn and end of sequence)"),
    ("llama3", " What is 2+2? ",
     [1, 426, 127, 309, 310, 480, 310, 98, 380, 478, 376, 98, 299, 294, 127, 65, 311, 309, 376, 279,
      127, 295, 381, 98, 380, 478, 376, 98, 299, 294, 127, 65, 409, 90, 498, 391, 309, 424, 267, 272,
      66, 279, 127, 295, 305, 310, 98, 299, 294, 127, 65, 279, 127, 309, 310, 480, 310, 98, 380, 478,
      376, 98, 299, 294, 127, 65, 291, 309, 309, 299, 309, 310, 291, 304, 310, 279, 127, 295, 381, 98,
      380, 478, 376, 98, 299, 294, 127, 65, 409], "token id 2\n"),
]
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


greedy = ["--temperature", "0", "--max_new_tokens", "12"]
for family, message, hf_ids, stops in CASES:
    chat_model = variant(family + "_model", family)
    rc, reply, err = run("generate", "--model", chat_model, "--chat", message, *greedy)
    check(rc == 0 and reply.endswith("\n"), family + ": --chat exits 0: " + err)
    reply = reply[:-1]  # the newline generate prints after the reply
    check("stops at " + stops in err, family + ": the reply stops at " + stops.strip())
    rc, out, _ = run("generate", "--model", chat_model, "--prompt_tokens",
                     ",".join(map(str, hf_ids)), *greedy)
    ids = out.split()
    check(rc == 0 and ids[: len(hf_ids)] == [str(i) for i in hf_ids],
          family + ": --prompt_tokens echoes HF's ids")
    _, prompt_text, _ = run("data", "detokenize", "--model", chat_model, "--skip-special-tokens",
                            *ids[: len(hf_ids)])
    _, whole_text, _ = run("data", "detokenize", "--model", chat_model, "--skip-special-tokens",
                           *ids)
    check(whole_text.startswith(prompt_text) and len(ids) > len(hf_ids),
          family + ": detokenize of the prompt is a prefix of the whole decode")
    want = whole_text[len(prompt_text):]
    check(reply == want, "%s: the --chat reply %r is the continuation of HF's ids %r" % (
        family, reply, want))

chatml = os.path.join(work, "chatml_model")
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
