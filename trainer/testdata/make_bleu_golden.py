#!/usr/bin/env python3
"""Writes bleu_golden.json: sacreBLEU reference results that //trainer:bleu_test checks
trainer/bleu.cc against.

Generated with sacrebleu 2.6.0 (pip install sacrebleu==2.6.0), Python 3.11. The script refuses
to run with another sacrebleu version unless --any-version is given, so that the recorded
numbers always say which implementation produced them.

Every corpus is built deterministically (fixed strings, or random.Random with a fixed seed).
For each corpus the JSON holds the hypotheses and references, sacreBLEU's default corpus BLEU
(tokenize='13a', smooth_method='exp', max_ngram_order=4, cased, effective_order=False, one
reference) at full precision, its n-gram counts/totals, sys_len, ref_len, brevity penalty and
precisions, and the raw 13a tokenizer output of every line (Tokenizer13a.__call__, i.e. without
the rstrip() that BLEU._preprocess_segment applies first). A separate "tokenize" list holds
tokenizer-only edge cases.

Usage (from the repository root):
  python3 trainer/testdata/make_bleu_golden.py [--out trainer/testdata/bleu_golden.json]
"""

import argparse
import json
import os
import random
import sys

import sacrebleu
from sacrebleu.metrics import BLEU

EXPECTED_VERSION = "2.6.0"

# ---------------------------------------------------------------------------------------------
# Corpora.
# ---------------------------------------------------------------------------------------------

BASE_SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "A man, a plan, a canal: Panama!",
    "It costs 3.5 dollars, or 1,000 yen in total.",
    "She said \"hello\" and left at 10-12 o'clock.",
    "Tom & Jerry are friends; they're (mostly) nice.",
    "Die Katze sitzt auf der Matte, während es regnet.",
    "Le garçon a mangé une pomme à côté de l'école.",
    "We met on 2021-03-04 at 5:30 p.m. in New York.",
    "Prices rose by 12.5% -- the highest since 1990.",
    "Is this the real life? Is this just fantasy?",
    "Müller's café serves crème brûlée for €4,50.",
    "The committee adopted the resolution without a vote.",
]


def corpus_identical():
    return list(BASE_SENTENCES), list(BASE_SENTENCES)


def corpus_single_line():
    return (["The cat sat on the mat with the other cat."],
            ["The cat sat on a mat next to the other cat."])


def corpus_empty_hyps():
    refs = BASE_SENTENCES[:5]
    return [""] * len(refs), list(refs)


def corpus_some_empty():
    # Empty hypotheses, an empty reference, and whitespace-only lines among normal ones.
    hyps = ["", "The quick brown fox jumps over the dog.", "   ", "A man, a plan: Panama!",
            "Something with no reference at all.", "\t", "It costs 3.5 dollars."]
    refs = ["Nothing here matched.", "The quick brown fox jumps over the lazy dog.",
            "A line whose hypothesis is blank.", "A man, a plan, a canal: Panama!", "",
            "", "It costs 3.5 dollars, or 1,000 yen in total."]
    return hyps, refs


def corpus_short_hyps():
    # Brevity penalty: hypotheses are prefixes of the references.
    refs = BASE_SENTENCES[:8]
    hyps = [" ".join(r.split()[: max(1, len(r.split()) // 2)]) for r in refs]
    return hyps, refs


def corpus_long_hyps():
    # Hypotheses longer than the references: BP = 1.
    refs = BASE_SENTENCES[:6]
    hyps = [r + " and then some extra words appear here" for r in refs]
    return hyps, refs


def corpus_no_4gram():
    # Unigram and bigram matches, some trigrams, but no 4-gram matches: exp smoothing.
    hyps = ["the dog the cat the bird", "a red car a blue bus", "one two x three four y"]
    refs = ["the cat the dog a bird", "a blue car a red bus", "one two three four five"]
    return hyps, refs


def corpus_no_3gram_no_4gram():
    # Only unigram/bigram matches: smoothing doubles twice.
    hyps = ["alpha beta gamma delta epsilon", "red green blue yellow"]
    refs = ["alpha beta delta gamma zeta", "green red yellow blue"]
    return hyps, refs


def corpus_no_4gram_total():
    # All hypotheses have at most three tokens, so there are no 4-grams at all (total 0):
    # compute_bleu stops early and the score underflows to 0 despite matches.
    hyps = ["the cat sat", "on the mat", "hello"]
    refs = ["the cat sat on the mat", "on the mat it sat", "hello world"]
    return hyps, refs


def corpus_no_matches():
    hyps = ["completely different words here", "nothing overlaps"]
    refs = ["the reference is unrelated", "totally disjoint tokens"]
    return hyps, refs


def corpus_case():
    # BLEU is cased by default: lowercased hypotheses lose matches.
    refs = BASE_SENTENCES[:6]
    hyps = [r.lower() for r in refs]
    return hyps, refs


def corpus_punctuation():
    hyps = [
        "He said: \"It's 3.5 km -- not 1,000!\"",
        "&quot;Quoted&quot; text &amp; more &lt;tags&gt; here.",
        "Numbers: 1.5, 2,5 and 3-4-5; also -7 and 8- and 9.",
        "Straße, Öl, Äpfel... und Übermut!",
        "L'été, c'est « formidable » — n'est-ce pas ?",
        "Dots...at the end.., commas,,, and .5 or 5. or ,5 or 5,",
        "URL http://example.com/a?b=c&d=e#frag (see [1]) {x|y} ~z ^w `q` _u_",
        "Mixed CASE words And numbers 10.000,00 € vs $10,000.00.",
        "x.,y a..b 1.,2 ,.3 4., .,. -- --- 3--4 a-b-c",
        "Über 50% der Fälle (ca. 3,5 Mio.) waren betroffen.",
    ]
    refs = [
        "He said: \"It is 3.5 km -- not 1,000!\"",
        "\"Quoted\" text & more <tags> here.",
        "Numbers: 1.5, 2.5 and 3-4-5; also -7 and 8 - and 9.",
        "Strasse, Öl, Äpfel ... und Übermut!",
        "L'été, c'est « formidable » – n'est-ce pas?",
        "Dots... at the end., commas, and .5 or 5. or ,5 or 5,",
        "URL http://example.com/a?b=c&amp;d=e#frag (see [1]) {x|y} ~z ^w `q` _u_",
        "Mixed case words and numbers 10.000,00 € vs $10,000.00.",
        "x., y a.. b 1.,2 ,.3 4., .,. -- --- 3--4 a-b-c",
        "Über 50 % der Fälle (ca. 3,5 Mio.) waren betroffen.",
    ]
    return hyps, refs


def corpus_tokenizer_edges():
    # Lines exercising the 13a preprocessing as seen through BLEU (which rstrip()s every line
    # first: a trailing "-\n" is therefore kept as a dash, not joined).
    hyps = [
        "hyphen-\nated words and a<skipped>b plus line\nbreak",
        "trailing dash at the end-\n",
        "trailing spaces and tabs \t  ",
        "non\u00a0breaking\u2009thin\u3000ideographic\u2028line sep\u0085nel",
        "trailing non-breaking space\u00a0\u3000",
        "&amp;quot; &amp;lt; &amp;amp; &quot;&amp;&quot;",
        "<skipped>",
        "ends with -<skipped>\nafter",
        "zero\u200bwidth\ufeffnot space",
        "file\x1cseparator\x1funit and \x0bvtab \x0cff \rcr",
    ]
    refs = [
        "hyphenated words and ab plus line break",
        "trailing dash at the end -",
        "trailing spaces and tabs",
        "non breaking thin ideographic line sep nel",
        "trailing non-breaking space",
        "&quot; &lt; &amp; \"&\"",
        "",
        "ends with after",
        "zero width not space",
        "file separator unit and vtab ff cr",
    ]
    return hyps, refs


# Vocabulary for the synthetic pseudo-translations.
WORDS = (
    "the a an of to in on for with by from at as is was are were be been has have had will "
    "would can could should may might must not and or but if then than that this these those "
    "it its they them their we our you your he she his her government council report meeting "
    "people year years time day week market price prices company companies country countries "
    "said says told reported announced according new old first last next big small high low "
    "economic political social public private local national international european world "
    "Minister President Parliament Commission Europe Germany France Berlin Paris London "
    "Union Bank Court Police Monday Tuesday Friday January March July "
    "increase decrease growth crisis agreement decision proposal law laws rule rules "
    "Straße Müller für über während Größe déjà été garçon naïve Zürich São café"
).split()
PUNCT_TOKENS = [",", ".", ";", ":", "!", "?", "\"", "'s", "(", ")", "-", "--", "%", "&amp;",
                "&quot;", "&"]


def synth_number(rng):
    kind = rng.randrange(6)
    if kind == 0:
        return str(rng.randrange(1, 100))
    if kind == 1:
        return f"{rng.randrange(1, 100)}.{rng.randrange(0, 10)}"
    if kind == 2:
        return f"{rng.randrange(1, 10)},{rng.randrange(0, 1000):03d}"
    if kind == 3:
        return f"{rng.randrange(1990, 2030)}-{rng.randrange(1, 13):02d}"
    if kind == 4:
        return f"{rng.randrange(1, 100)}%"
    return f"${rng.randrange(1, 10)}.{rng.randrange(0, 100):02d}"


def synth_reference(rng):
    n = rng.randrange(4, 26)
    toks = []
    for _ in range(n):
        r = rng.random()
        if r < 0.08:
            toks.append(synth_number(rng))
        elif r < 0.18:
            toks.append(rng.choice(PUNCT_TOKENS))
        else:
            w = rng.choice(WORDS)
            if rng.random() < 0.1:
                w = w.capitalize()
            toks.append(w)
    # Detokenize-ish: attach some punctuation to the previous word.
    out = ""
    for t in toks:
        if out and t in (",", ".", ";", ":", "!", "?", "'s", ")") and rng.random() < 0.7:
            out += t
        elif out:
            out += " " + t
        else:
            out = t
    if rng.random() < 0.8:
        out += rng.choice([".", "!", "?", "...", " ."])
    return out


def synth_hypothesis(rng, ref):
    toks = ref.split()
    mode = rng.random()
    if mode < 0.05:
        return ref  # perfect
    if mode < 0.08:
        return ""  # empty output
    out = []
    for t in toks:
        r = rng.random()
        if r < 0.08:
            continue  # deletion
        if r < 0.18:
            out.append(rng.choice(WORDS))  # substitution
            continue
        if r < 0.22:
            out.append(t.lower() if rng.random() < 0.5 else t.upper())  # case change
            continue
        out.append(t)
        if rng.random() < 0.05:
            out.append(rng.choice(WORDS + PUNCT_TOKENS))  # insertion
    if len(out) > 3 and rng.random() < 0.15:
        i, j = sorted(rng.sample(range(len(out)), 2))
        out[i], out[j] = out[j], out[i]  # reordering
    if rng.random() < 0.1:
        out = out[: max(0, len(out) // 2)]  # truncated output
    return " ".join(out)


def corpus_synthetic(seed, n_lines):
    rng = random.Random(seed)
    refs = [synth_reference(rng) for _ in range(n_lines)]
    hyps = [synth_hypothesis(rng, r) for r in refs]
    return hyps, refs


CORPORA = [
    ("identical", corpus_identical),
    ("single_line", corpus_single_line),
    ("empty_hyps", corpus_empty_hyps),
    ("some_empty", corpus_some_empty),
    ("short_hyps", corpus_short_hyps),
    ("long_hyps", corpus_long_hyps),
    ("no_4gram", corpus_no_4gram),
    ("no_3gram_no_4gram", corpus_no_3gram_no_4gram),
    ("no_4gram_total", corpus_no_4gram_total),
    ("no_matches", corpus_no_matches),
    ("case", corpus_case),
    ("punctuation", corpus_punctuation),
    ("tokenizer_edges", corpus_tokenizer_edges),
    ("synthetic_small", lambda: corpus_synthetic(7, 40)),
    ("synthetic_large", lambda: corpus_synthetic(20240601, 300)),
]

# Tokenizer-only edge cases (compared with Tokenizer13a.__call__ output, no rstrip).
TOKENIZE_CASES = [
    "",
    " ",
    "a",
    "Hello, world.",
    "3.5 1,000 1.000,5 .5 5. ,5 5,",
    "a.. a,, ..a ,,a .,. ,., a.,b 1.,2 1,.2 x.y x,y",
    "3-4 3--4 -3 3- a-3 3-a 2021-03-04",
    "é. é, é.5 5.é .é ,é ü5. 5ü. €1,000.50 …, «a», “quoted”.",
    "line-\nbreak and line\nbreak and end-\n",
    "a<skipped>b <skipped> <skip ped>",
    "-<skipped>\nx",
    "&quot;&amp;&lt;&gt; &amp;quot; &amp;lt; &amp;gt; &amp;amp; &QUOT; & amp;",
    "tab\tsep\vv\ff\rr",
    "\x1c\x1d\x1e\x1f mixed",
    "nbsp\u00a0ideo\u3000thin\u2009hair\u200alsep\u2028psep\u2029nnbsp\u202fmm\u205fog\u1680nel\u0085",
    "zwsp\u200bbom\ufeff",
    "trailing -\n",
    "trailing ws \t\u00a0",
    "{a}|b~c[d]\\e^f_g`h!i\"j#k$l%m&n(o)p*q+r:s;t<u=v>w?x@y/z'apos",
    "'single' quotes aren't split",
    "Ünïcödé ΕΛΛΗΝΙΚΆ кириллица 中文，标点。 日本語、テスト！",
    "emoji 😀. 🇩🇪, ok",
    "...",
    ",,,,",
    "1.2.3.4 1,2,3,4 a.b.c a,b,c",
]


# ---------------------------------------------------------------------------------------------


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--out", default=os.path.join(here, "bleu_golden.json"))
    parser.add_argument("--any-version", action="store_true",
                        help="allow a sacrebleu version other than " + EXPECTED_VERSION)
    args = parser.parse_args()

    if sacrebleu.__version__ != EXPECTED_VERSION and not args.any_version:
        sys.exit(f"sacrebleu {sacrebleu.__version__} installed, expected {EXPECTED_VERSION}")

    bleu = BLEU()  # all defaults: 13a, exp smoothing, order 4, cased, no effective order
    tok = bleu.tokenizer

    corpora = []
    for name, make in CORPORA:
        hyps, refs = make()
        assert len(hyps) == len(refs), name
        score = bleu.corpus_score(hyps, [refs])
        # Cross-check with the functional API.
        assert sacrebleu.corpus_bleu(hyps, [refs]).score == score.score, name
        corpora.append({
            "name": name,
            "hyps": hyps,
            "refs": refs,
            "hyp_tokens": [tok(h) for h in hyps],
            "ref_tokens": [tok(r) for r in refs],
            "score": score.score,
            "counts": list(score.counts),
            "totals": list(score.totals),
            "sys_len": score.sys_len,
            "ref_len": score.ref_len,
            "bp": score.bp,
            "precisions": list(score.precisions),
        })
    signature = str(bleu.get_signature())

    golden = {
        "generator": "trainer/testdata/make_bleu_golden.py",
        "sacrebleu_version": sacrebleu.__version__,
        "signature": signature,
        "note": "tokens are Tokenizer13a output joined by single spaces (no rstrip applied); "
                "score/counts/totals are BLEU().corpus_score(hyps, [refs])",
        "tokenize": [{"line": line, "tokens": tok(line)} for line in TOKENIZE_CASES],
        "corpora": corpora,
    }
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False, indent=1)
        f.write("\n")
    size = os.path.getsize(args.out)
    print(f"wrote {args.out}: {len(corpora)} corpora, {len(TOKENIZE_CASES)} tokenizer cases, "
          f"{size} bytes, {signature}")
    for c in corpora:
        print(f"  {c['name']:20s} {c['score']!r:24} counts={c['counts']} totals={c['totals']} "
              f"sys={c['sys_len']} ref={c['ref_len']}")


if __name__ == "__main__":
    main()
