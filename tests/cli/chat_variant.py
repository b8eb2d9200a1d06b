#!/usr/bin/env python3
"""Copies a model directory with tokenizer_config.json's chat_template set to FAMILY's template
from tests/fixtures/chat_templates/expected.json (or to TEMPLATE text itself when FAMILY is not
one of them) and, for ChatML, <|im_start|> / <|im_end|> added to tokenizer.json as special tokens
after the vocabulary, as ChatML models have them. Prints <|im_end|>'s id.
Usage: chat_variant.py SRC_DIR DST_DIR FIXTURES_JSON FAMILY|TEMPLATE"""
import json
import os
import shutil
import sys

src, dst, fixtures, family = sys.argv[1:5]
shutil.rmtree(dst, ignore_errors=True)
shutil.copytree(src, dst)
with open(fixtures) as f:
    templates = json.load(f)["templates"]
path = os.path.join(dst, "tokenizer_config.json")
with open(path) as f:
    config = json.load(f)
config["chat_template"] = templates.get(family, family)
with open(path, "w") as f:
    json.dump(config, f, indent=1)
if family == "chatml":
    path = os.path.join(dst, "tokenizer.json")
    with open(path) as f:
        tok = json.load(f)
    next_id = 1 + max(list(tok["model"]["vocab"].values()) + [a["id"] for a in tok["added_tokens"]])
    for content in ("<|im_start|>", "<|im_end|>"):
        tok["added_tokens"].append({"id": next_id, "content": content, "single_word": False,
                                    "lstrip": False, "rstrip": False, "normalized": False,
                                    "special": True})
        next_id += 1
    with open(path, "w") as f:
        json.dump(tok, f, indent=1, ensure_ascii=False)
    print(next_id - 1)
