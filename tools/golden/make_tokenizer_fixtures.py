#!/usr/bin/env python3
"""Tokenizer fixtures for src/text/tokenizer_test.cc: tiny tokenizers trained on the fly by HF
`tokenizers` (PyPI) in each form the native tokenizer reads, plus the ids HF produces for a corpus
(English, code, CJK, emoji, combining marks, whitespace runs, added/special tokens) and the text HF
decodes for id lists (including byte tokens that form invalid UTF-8).

  python3 -m venv /work/venv-tok && /work/venv-tok/bin/pip install tokenizers
  /work/venv-tok/bin/pip install sentencepiece   # for the spm_bpe fixture
  /work/venv-tok/bin/python tools/golden/make_tokenizer_fixtures.py tests/fixtures/tokenizers

Writes <out>/<name>/{tokenizer.json, tokenizer_config.json, expected.json} per tokenizer. CI only
reads the committed files; HF `tokenizers` is needed only to regenerate them.
"""
import json
import os
import random
import sys

import tokenizers
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
from tokenizers import processors, trainers

TRAIN_TEXT = [
    "The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs away.",
    "It's a tokenizer: we'll test what they've done, and I'm sure you'd like it.",
    "Training a model with ZeRO stage 3 shards parameters, gradients and optimizer states.",
    "def train(model, data):\n    for step, batch in enumerate(data):\n        loss = model(batch)\n",
    "    if loss < 0.5:\n\t\treturn {'loss': loss, \"step\": step}  # done\n",
    "for (int i = 0; i < n; ++i) { sum += x[i] * 2; }",
    "東京は日本の首都です。今日は良い天気ですね。",
    "我们在学习分词器。你好，世界！",
    "안녕하세요 세계",
    "Emoji: 😀 🚀 👍🏽 ❤️ 🇫🇷",
    "Café naïve résumé coöperate — e\u0301 a\u0300 n\u0303",
    "Numbers 12345 and 3.14159 and 1,000,000 in 2024.",
    "   leading spaces and trailing   \n\n\nnew   lines\t\ttabs",
] * 20

CORPUS = [
    "Hello world",
    "Hello, world! How are you today?",
    " leading space",
    "  two leading spaces",
    "trailing spaces   ",
    "The quick brown fox jumps over the lazy dog.",
    "It's what we'll do; they've said I'm fine and you'd agree. THEY'RE HERE.",
    "def f(x):\n    return x * 2  # double\n",
    "\tif (a && b) { return c[0]; }\n\n",
    "東京は日本の首都です。",
    "我们在学习分词器，你好世界！",
    "안녕하세요",
    "Emoji: 😀🚀 👍🏽 ❤️ 🇫🇷 🧑‍💻",
    "Cafe\u0301 nai\u0308ve e\u0301\u0301 \u0301start",
    "Numbers: 1234567890 3.14159 1,000,000",
    "a  b   c    d\n\n\ne \t f\r\ng",
    "     ",
    "\n",
    "",
    "x",
    "unseen: Ωμέγα ÿ þ ß Ж ק ع ह ก ∑∫√ ½ ①",
    "mixed 😀text東京code()",
    "<|endoftext|>",
    "before<|endoftext|>after",
    "a <|endoftext|> b <|endoftext|><|endoftext|>",
    "<s>Hello</s> <unk>",
    "<|begin_of_text|>Hi<|eot_id|><|end_of_text|>",
    "a foo_bar b foo_barfoo_bar xfoo_bar",
    "<|begin_of_text|foo_bar>",
    "▁already▁meta",
    "<0x41> is not a byte token in text",
    "mongolian \u180e'rettddd \u180e \u00a0\u2000\u3000 x\u0085y\u2028z \u200b\ufeff",
    "unicode 16: \u1c89\u1c8a \U00031350\U00031351 \U00010d40\U00010d41 1\u1c89",
    "NFC: \u1100\u1161\u11a8 A\u030a \u212b \ufb01 \u2460 x\u0323\u0307",
    "ZeRO stage 3 shards parameters, gradients and optimizer states across ranks.",
]


def trained(model, pre_tokenizer, normalizer, specials, vocab_size, alphabet=None):
    tok = Tokenizer(model)
    if normalizer is not None:
        tok.normalizer = normalizer
    if pre_tokenizer is not None:
        tok.pre_tokenizer = pre_tokenizer
    kwargs = dict(vocab_size=vocab_size, special_tokens=specials, show_progress=False)
    if alphabet is not None:
        kwargs["initial_alphabet"] = alphabet
    else:
        kwargs["limit_alphabet"] = 120
    tok.train_from_iterator(TRAIN_TEXT, trainer=trainers.BpeTrainer(**kwargs))
    return tok


def gpt2():
    tok = trained(models.BPE(), pre_tokenizers.ByteLevel(add_prefix_space=False), None,
                  ["<|endoftext|>"], 400, pre_tokenizers.ByteLevel.alphabet())
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_tokens(["foo_bar"])  # a non-special added token
    cfg = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"}
    return tok, cfg


LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
                  r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def llama3():
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]
    tok = trained(models.BPE(ignore_merges=True), pre, None, specials, 450,
                  pre_tokenizers.ByteLevel.alphabet())
    tok.decoder = decoders.ByteLevel()
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                      pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                      special_tokens=[("<|begin_of_text|>", bos)]),
    ])
    tok.add_tokens(["foo_bar"])
    cfg = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
           "pad_token": {"__type": "AddedToken", "content": "<|end_of_text|>", "lstrip": False,
                         "normalized": False, "rstrip": False, "single_word": False}}
    return tok, cfg


QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
                 r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def qwen2_variant(llama3_tok):
    # Qwen2's tokenizer.json: NFC normalizer, one-digit numbers in the split regex, no BOS added.
    tok = Tokenizer.from_str(llama3_tok.to_str())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def llama2():
    byte_tokens = ["<0x%02X>" % b for b in range(256)]
    specials = ["<unk>", "<s>", "</s>"] + byte_tokens
    pre = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    tok = trained(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True), pre, None,
                  specials, 500)
    # Encode as the Llama-2 / TinyLlama conversion does: the normaliser prepends and replaces, there
    # is no pre-tokeniser (merges may span words), and the decoder undoes it.
    tok.pre_tokenizer = None
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    # As in Llama-2's tokenizer.json the <0xNN> tokens are ordinary vocabulary entries, not added
    # tokens (the trainer made them added tokens only so that they get ids 3..258).
    spec = json.loads(tok.to_str())
    spec["added_tokens"] = [t for t in spec["added_tokens"] if not t["content"].startswith("<0x")]
    tok = Tokenizer.from_str(json.dumps(spec))
    tok.add_tokens(["foo_bar"])
    cfg = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": None,
           "add_bos_token": True, "add_eos_token": False}
    return tok, cfg


def metaspace_variant(llama2_tok):
    # The newer Llama/Mistral conversion: a Metaspace pre-tokeniser (prepend_scheme "first", no
    # split) and the Metaspace decoder instead of the normaliser sequence.
    tok = Tokenizer.from_str(llama2_tok.to_str())
    tok.normalizer = None
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    tok.decoder = decoders.Sequence([decoders.Metaspace(replacement="▁", prepend_scheme="first",
                                                        split=False),
                                     decoders.ByteFallback(), decoders.Fuse()])
    return tok


def gemma_variant(llama2_tok):
    # Gemma's tokenizer.json (Gemma 1-3): BPE with byte fallback like Llama-2's, but the normaliser
    # only replaces spaces (no "▁" prepended), the decoder strips nothing, and the turn markers
    # <start_of_turn> / <end_of_turn> are special tokens; BOS is added.
    tok = Tokenizer.from_str(llama2_tok.to_str())
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                     decoders.Fuse()])
    tok.add_special_tokens(["<start_of_turn>", "<end_of_turn>"])
    cfg = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": None,
           "add_bos_token": True, "add_eos_token": False}
    return tok, cfg


def prefix_space_variant(gpt2_tok):
    tok = Tokenizer.from_str(gpt2_tok.to_str())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    return tok


def decode_cases(tok, rng, encodings):
    vocab = tok.get_vocab()
    n = tok.get_vocab_size()
    cases = []
    for ids in encodings:
        cases.append(ids)
    # Random id lists, including special tokens and byte tokens that make invalid UTF-8.
    byte_ids = sorted(i for t, i in vocab.items() if t.startswith("<0x"))
    byte_level = sorted(i for t, i in vocab.items() if len(t) == 1)
    for _ in range(40):
        cases.append([rng.randrange(n) for _ in range(rng.randrange(1, 12))])
    pool = byte_ids or byte_level
    for _ in range(40):
        cases.append([rng.choice(pool) for _ in range(rng.randrange(1, 8))])
    # A multi-byte character cut short, then followed by ordinary tokens.
    for text in ["é", "東", "😀"]:
        ids = tok.encode(text, add_special_tokens=False).ids
        cases.append(ids[:-1] + tok.encode(" ok", add_special_tokens=False).ids)
    out = []
    for ids in cases:
        for skip in (False, True):
            out.append({"ids": ids, "skip_special_tokens": skip,
                        "text": tok.decode(ids, skip_special_tokens=skip)})
    return out


def write(out_dir, name, tok, cfg, merges_as_strings=False, extra_corpus=()):
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    spec = json.loads(tok.to_str())
    if merges_as_strings:
        # The older "a b" merges format (tokenizers < 0.20 wrote it; HF still reads both).
        spec["model"]["merges"] = [" ".join(m) for m in spec["model"]["merges"]]
        tok = Tokenizer.from_str(json.dumps(spec))
    with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(spec, f, ensure_ascii=False, indent=1)
        f.write("\n")
    with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, ensure_ascii=False, indent=1)
        f.write("\n")
    rng = random.Random(1234)
    encode = []
    encodings = []
    for text in CORPUS + list(extra_corpus):
        for special in (True, False):
            ids = tok.encode(text, add_special_tokens=special).ids
            encode.append({"text": text, "add_special_tokens": special, "ids": ids})
            if special:
                encodings.append(ids)
    expected = {"tokenizers_version": tokenizers.__version__, "encode": encode,
                "decode": decode_cases(tok, rng, encodings)}
    with open(os.path.join(d, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(f"{name}: vocab {tok.get_vocab_size()}, {len(encode)} encode, "
          f"{len(expected['decode'])} decode cases")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/tokenizers"
    g, gcfg = gpt2()
    write(out, "gpt2_bytelevel", g, gcfg, merges_as_strings=True)
    write(out, "gpt2_prefix_space", prefix_space_variant(g), gcfg)
    l3, l3cfg = llama3()
    write(out, "llama3_split", l3, l3cfg)
    write(out, "qwen2_nfc", qwen2_variant(l3), {"bos_token": None, "eos_token": "<|end_of_text|>",
                                                "pad_token": "<|end_of_text|>"})
    l2, l2cfg = llama2()
    write(out, "llama2_byte_fallback", l2, l2cfg)
    write(out, "llama2_metaspace", metaspace_variant(l2), l2cfg)
    g, gcfg = gemma_variant(l2)
    write(out, "gemma_byte_fallback", g, gcfg,
          extra_corpus=["<start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n",
                        " two  spaces\nno prefix"])
    sentencepiece_fixture(out)


def sentencepiece_fixture(out_dir):
    """A SentencePiece BPE model (byte_fallback, identity normalisation, as Llama-2's
    tokenizer.model) trained by `sentencepiece`; the expected ids and text are sentencepiece's
    own (BOS added with add_special_tokens, as transformers' LlamaTokenizer)."""
    import io
    import sentencepiece as spm
    d = os.path.join(out_dir, "spm_bpe")
    os.makedirs(d, exist_ok=True)
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(TRAIN_TEXT), model_writer=model,
                                   model_type="bpe", vocab_size=420, byte_fallback=True,
                                   normalization_rule_name="identity", character_coverage=1.0,
                                   add_dummy_prefix=True, remove_extra_whitespaces=False,
                                   minloglevel=2)
    with open(os.path.join(d, "tokenizer.model"), "wb") as f:
        f.write(model.getvalue())
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    cfg = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": None,
           "add_bos_token": True, "add_eos_token": False}
    with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=1)
        f.write("\n")
    encode = []
    for text in CORPUS:
        ids = sp.encode(text)
        encode.append({"text": text, "add_special_tokens": False, "ids": ids})
        encode.append({"text": text, "add_special_tokens": True, "ids": [sp.bos_id()] + ids})
    rng = random.Random(1234)
    n = sp.get_piece_size()
    byte_ids = [i for i in range(n) if sp.is_byte(i)]
    ordinary = [i for i in range(n) if not sp.is_control(i)]
    lists = [c["ids"] for c in encode if not c["add_special_tokens"]]
    lists += [[rng.choice(ordinary) for _ in range(rng.randrange(1, 12))] for _ in range(40)]
    lists += [[rng.choice(byte_ids) for _ in range(rng.randrange(1, 8))] for _ in range(40)]
    decode = [{"ids": ids, "skip_special_tokens": False, "text": sp.decode(ids)} for ids in lists]
    # With control pieces mixed in, skipping them decodes the rest as one run.
    for _ in range(20):
        ids = [rng.randrange(n) for _ in range(rng.randrange(1, 12))]
        decode.append({"ids": ids, "skip_special_tokens": True,
                       "text": sp.decode([i for i in ids if not sp.is_control(i)])})
    expected = {"sentencepiece_version": spm.__version__, "encode": encode, "decode": decode}
    with open(os.path.join(d, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(f"spm_bpe: vocab {n}, {len(encode)} encode, {len(decode)} decode cases")


if __name__ == "__main__":
    main()
