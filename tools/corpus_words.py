#!/usr/bin/env python3
"""Share of a generated text's words that occur in a corpus: the quick start's check that its
sample reads as words. A word is a whitespace-separated token with punctuation stripped, compared
case-insensitively; tokens that are only punctuation are not counted.

Usage: zero generate ... | tools/corpus_words.py CORPUS [--prompt TEXT] [--min_share 0.9]
Prints 'words found in the corpus: 93% (186/200)'. --prompt drops the prompt that `zero generate`
echoes before the sample; --min_share makes it exit 1 below that share (default: report only).
"""
import argparse
import string
import sys

_STRIP = str.maketrans("", "", string.punctuation)


def words(text):
    """The normalised words of text: punctuation removed, lower case, empty tokens dropped."""
    out = []
    for token in text.split():
        word = token.translate(_STRIP).lower()
        if word:
            out.append(word)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", help="the training text, e.g. examples/data/kjv.txt")
    parser.add_argument("--prompt", default="", help="prompt echoed before the sample, not counted")
    parser.add_argument("--min_share", type=float, default=None,
                        help="exit 1 when the share is below this fraction (e.g. 0.9)")
    args = parser.parse_args()

    with open(args.corpus, encoding="utf-8", errors="replace") as f:
        vocabulary = set(words(f.read()))
    sample = sys.stdin.read()
    if args.prompt and sample.startswith(args.prompt):
        sample = sample[len(args.prompt):]
    # The last word may be cut off by --max_new_tokens: it is not counted.
    sample_words = words(sample)
    if sample and not sample[-1].isspace() and sample_words:
        sample_words.pop()
    if not sample_words:
        print("words found in the corpus: no words in the sample", file=sys.stderr)
        return 1
    found = sum(1 for w in sample_words if w in vocabulary)
    share = found / len(sample_words)
    print(f"words found in the corpus: {100 * share:.0f}% ({found}/{len(sample_words)})")
    if args.min_share is not None and share < args.min_share:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
