#!/usr/bin/env python3
"""Writes tests/fixtures/golden/sampling_hf5.json: transformers' own logits processors on fixed logits.

Each case is one row of logits (fp32 values, drawn here), the ids generated so far (prompt and new
tokens, repeats included) and the sampling settings; the expected result is what transformers'
generate() samples from: RepetitionPenaltyLogitsProcessor, then TemperatureLogitsWarper,
TopKLogitsWarper and TopPLogitsWarper in that order (GenerationMixin._get_logits_processor), then a
softmax; with temperature 0 (greedy), the argmax of the penalised logits. The processors run in
fp64 on the fp32 logits, so the probabilities are a reference to ~1e-15. Read by
src/runtime/sampling_test.cc.

  /work/venv-hfm/bin/python tools/golden/make_sampling_fixture.py   # transformers==5.24.0
"""
import json
import os

import torch
from transformers.generation.logits_process import (
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
OUT = os.path.join(ROOT, "tests", "fixtures", "golden", "sampling_hf5.json")
V = 37  # a prime: no power-of-two shortcuts

# (repetition_penalty, temperature, top_k, top_p); temperature 0 = greedy.
SETTINGS = [
    (1.3, 1.0, 0, 1.0),  # the penalty alone: positive logits divided, negative multiplied
    (1.3, 0.7, 10, 0.9),  # every stage at once
    (0.8, 1.5, 0, 0.5),  # penalty < 1 favours the repeated tokens
    (2.0, 1.0, 5, 1.0),
    (1.0, 0.9, 0, 0.75),  # no penalty: top-p alone
    (1.2, 1.0, 1, 1.0),  # top-k 1: one token left
    (2.5, 0.0, 0, 1.0),  # greedy: the penalty moves the argmax (checked below)
    (1.1, 0.0, 0, 1.0),
]


def main():
    gen = torch.Generator().manual_seed(29)
    cases = []
    for i, (penalty, temperature, top_k, top_p) in enumerate(SETTINGS):
        logits = (torch.randn(V, generator=gen) * 3.0).float()
        # Ids so far: a few repeats, and (for the greedy cases) the top token, so the penalty acts.
        history = torch.randint(0, V, (9,), generator=gen).tolist()
        if temperature == 0.0:
            history.append(int(torch.argmax(logits)))
        x = logits.double().unsqueeze(0)
        ids = torch.tensor([history])
        if penalty != 1.0:
            x = RepetitionPenaltyLogitsProcessor(penalty)(ids, x)
        case = {
            "logits": [float(v) for v in logits.tolist()],
            "history": history,
            "repetition_penalty": penalty,
            "temperature": temperature,
            "top_k": top_k,
            "top_p": top_p,
        }
        if temperature == 0.0:
            case["greedy"] = int(torch.argmax(x))
            if penalty >= 2.0:
                assert case["greedy"] != int(torch.argmax(logits)), "the penalty must move the argmax"
        else:
            x = TemperatureLogitsWarper(temperature)(ids, x)
            if top_k > 0:
                x = TopKLogitsWarper(top_k)(ids, x)
            if top_p < 1.0:
                x = TopPLogitsWarper(top_p)(ids, x)
            case["probs"] = torch.softmax(x, dim=-1)[0].tolist()
        cases.append(case)
    with open(OUT, "w") as f:
        json.dump({"vocab_size": V, "cases": cases}, f, indent=None)
        f.write("\n")
    print(f"wrote {len(cases)} cases to {os.path.normpath(OUT)}")


if __name__ == "__main__":
    main()
