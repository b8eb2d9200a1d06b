#!/usr/bin/env python3
"""`zero data prepare` next to HF `tokenizers` (Rust, encode_batch) on the same corpus and threads.

Builds (once, cached in WORK) a deterministic multi-MB corpus of mixed English (verses of
examples/data/kjv.txt shuffled into paragraphs), code (this repository's C++ sources cut into
chunks) and CJK (generated Chinese / Japanese sentences), as JSONL {"text": ...} documents, and
trains two 32k-vocabulary tokenizers on it with HF `tokenizers`: GPT-2-style byte-level BPE and
Llama-3-style (the Llama-3 split regex + byte-level, ignore_merges, BOS added). No real GPT-2
tokenizer.json is used (none is available offline); the trained ones have the same components.

Then, per tokenizer, REPS interleaved repetitions of
  A: `zero data prepare --num_threads T` (wall and CPU time of the whole process: load, JSON
     parsing, encoding, writing the three files), and
  B: HF `Tokenizer.encode_batch` on the list of document strings in a fresh process with
     RAYON_NUM_THREADS=T (wall and process CPU time around encode_batch only: loading and JSON
     parsing excluded, which favours HF),
and prints the median MB/s and tokens/s of both and the ratios (wall clock, and per CPU second,
which a machine shared with other work disturbs less). Checks once that both give the
same ids (HF: per document the encoding with special tokens, then EOS, concatenated).
Usage: tokenize_vs_hf.py --zero ZERO --work DIR [--mb 12] [--threads 2] [--reps 5]"""
import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
                  r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# Common Chinese characters and kana, drawn Zipf-like into words and sentences.
HANZI = ("的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学"
         "对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头"
         "面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向"
         "情部正名定女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信")
KANA = "あいうえおかきくけこさしすせそたちつてとなにぬねのはひふへほまみむめもやゆよらりるれろわをんです"
PUNCT_CJK = "，。！？、"


def make_corpus(path, target_bytes, seed=1234):
    rng = random.Random(seed)
    with open(os.path.join(REPO, "examples/data/kjv.txt"), encoding="utf-8") as f:
        verses = [line.strip() for line in f if line.strip()]
    sources = []
    for root, _, files in sorted(os.walk(os.path.join(REPO, "src"))):
        for name in sorted(files):
            if name.endswith((".cc", ".h", ".cu")):
                with open(os.path.join(root, name), encoding="utf-8", errors="replace") as f:
                    sources.append(f.read())
    hanzi_w = [1.0 / (i + 1) for i in range(len(HANZI))]

    def english():
        return "\n".join(" ".join(rng.choice(verses) for _ in range(rng.randint(1, 4)))
                         for _ in range(rng.randint(2, 8)))

    def code():
        src = rng.choice(sources)
        begin = rng.randrange(max(1, len(src) - 200))
        return src[begin:begin + rng.randint(300, 3000)]

    def cjk():
        out = []
        for _ in range(rng.randint(3, 15)):
            if rng.random() < 0.7:
                s = "".join(rng.choices(HANZI, hanzi_w, k=rng.randint(6, 30)))
            else:
                s = "".join(rng.choice(KANA) for _ in range(rng.randint(6, 25)))
            out.append(s + rng.choice(PUNCT_CJK))
        return "".join(out)

    total = 0
    with open(path, "w", encoding="utf-8") as f:
        while total < target_bytes:
            kind = rng.random()
            text = english() if kind < 0.55 else code() if kind < 0.85 else cjk()
            f.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
            total += len(text.encode("utf-8"))


def read_texts(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f if line.strip()]


def train(kind, corpus, out_dir):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    texts = read_texts(corpus)
    if kind == "gpt2":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        specials = ["<|endoftext|>"]
        cfg = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"}
    else:
        tok = Tokenizer(models.BPE(ignore_merges=True))
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
        ])
        specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]
        cfg = {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"}
    tok.train_from_iterator(texts, trainer=trainers.BpeTrainer(
        vocab_size=32000, special_tokens=specials, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.decoder = decoders.ByteLevel()
    if kind == "gpt2":
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    else:
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                          pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                          special_tokens=[("<|begin_of_text|>", bos)]),
        ])
    os.makedirs(out_dir, exist_ok=True)
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=1)


def hf_child(model_dir, corpus, ids_out):
    """Runs in a fresh process (RAYON_NUM_THREADS set before the import): one timed encode_batch."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    with open(os.path.join(model_dir, "tokenizer_config.json")) as f:
        eos = tok.token_to_id(json.load(f)["eos_token"])
    texts = read_texts(corpus)
    t0, c0 = time.perf_counter(), time.process_time()
    encodings = tok.encode_batch(texts, add_special_tokens=True)
    seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    tokens = sum(len(e.ids) + 1 for e in encodings)
    if ids_out:
        import array
        a = array.array("I")
        for e in encodings:
            a.extend(e.ids)
            a.append(eos)
        with open(ids_out, "wb") as f:
            a.tofile(f)
    print(json.dumps({"seconds": seconds, "cpu_seconds": cpu_seconds, "tokens": tokens}))


def run_hf(args, model_dir, corpus, ids_out=""):
    env = dict(os.environ, RAYON_NUM_THREADS=str(args.threads), TOKENIZERS_PARALLELISM="true")
    out = subprocess.run([sys.executable, __file__, "--hf-child", model_dir, corpus, ids_out],
                         env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def children_cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_zero(args, model_dir, corpus, prefix):
    t0, c0 = time.perf_counter(), children_cpu_seconds()
    subprocess.run([args.zero, "data", "prepare", "--model", model_dir, "--output", prefix,
                    "--num_threads", str(args.threads), corpus],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seconds, cpu_seconds = time.perf_counter() - t0, children_cpu_seconds() - c0
    with open(prefix + ".manifest.json") as f:
        manifest = json.load(f)
    return {"seconds": seconds, "cpu_seconds": cpu_seconds, "tokens": manifest["num_tokens"], "dtype": manifest["token_dtype"]}


def same_ids(zero_prefix, dtype, hf_ids_path):
    import array
    ours = array.array("H" if dtype == "uint16" else "I")
    with open(zero_prefix + ".tokens", "rb") as f:
        ours.frombytes(f.read())
    theirs = array.array("I")
    with open(hf_ids_path, "rb") as f:
        theirs.frombytes(f.read())
    if len(ours) != len(theirs):
        return "different lengths: zero %d, HF %d" % (len(ours), len(theirs))
    for i, (a, b) in enumerate(zip(ours, theirs)):
        if a != b:
            return "first difference at token %d: zero %d, HF %d" % (i, a, b)
    return ""


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--hf-child":
        hf_child(*sys.argv[2:5])
        return
    p = argparse.ArgumentParser()
    p.add_argument("--zero", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--mb", type=float, default=12)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--kinds", default="gpt2,llama3")
    args = p.parse_args()
    os.makedirs(args.work, exist_ok=True)
    corpus = os.path.join(args.work, "corpus_%gmb.jsonl" % args.mb)
    if not os.path.exists(corpus):
        make_corpus(corpus + ".tmp", int(args.mb * 1e6))
        os.replace(corpus + ".tmp", corpus)
    text_bytes = sum(len(t.encode("utf-8")) for t in read_texts(corpus))
    import tokenizers
    print("corpus %s: %.2f MB of text in %d documents; tokenizers %s; %d threads; uptime:%s" % (
        corpus, text_bytes / 1e6, len(read_texts(corpus)), tokenizers.__version__, args.threads,
        subprocess.run(["uptime"], capture_output=True, text=True).stdout.split("load")[-1].rstrip()))
    failed = False
    for kind in args.kinds.split(","):
        model_dir = os.path.join(args.work, "%s_32k_%gmb" % (kind, args.mb))
        if not os.path.exists(os.path.join(model_dir, "tokenizer_config.json")):
            train(kind, corpus, model_dir)
        prefix = os.path.join(args.work, "out_" + kind)
        hf_ids = os.path.join(args.work, "hf_ids_%s.u32" % kind)
        zero_runs, hf_runs = [], []
        for rep in range(args.reps):  # interleaved A/B/A/B: load drifts hit both alike
            zero_runs.append(run_zero(args, model_dir, corpus, prefix))
            hf_runs.append(run_hf(args, model_dir, corpus, hf_ids if rep == 0 else ""))
            if rep == 0:
                diff = same_ids(prefix, zero_runs[0]["dtype"], hf_ids)
                print("%s: token ids %s" % (kind, "identical (%d tokens)" % zero_runs[0]["tokens"]
                                            if not diff else "DIFFER: " + diff))
                failed |= bool(diff)
        for name, runs in (("zero data prepare", zero_runs), ("HF tokenizers    ", hf_runs)):
            wall = statistics.median(r["seconds"] for r in runs)
            cpu = statistics.median(r["cpu_seconds"] for r in runs)
            print("%s: %s %.2f MB/s %.0f tokens/s; CPU %.2f s = %.2f MB per CPU-s "
                  "(median of %d; wall s: %s)" % (
                      kind, name, text_bytes / 1e6 / wall, runs[0]["tokens"] / wall, cpu,
                      text_bytes / 1e6 / cpu, args.reps,
                      " ".join("%.2f" % r["seconds"] for r in runs)))
        z = statistics.median(r["seconds"] for r in zero_runs)
        h = statistics.median(r["seconds"] for r in hf_runs)
        zc = statistics.median(r["cpu_seconds"] for r in zero_runs)
        hc = statistics.median(r["cpu_seconds"] for r in hf_runs)
        print("%s: zero / HF throughput = %.2fx (wall), %.2fx (per CPU second)" % (
            kind, h / z, hc / zc))
    print("uptime at the end:%s" % subprocess.run(["uptime"], capture_output=True,
                                                   text=True).stdout.split("load")[-1].rstrip())
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
