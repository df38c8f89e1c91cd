#!/usr/bin/env python3
"""The table of bench/run_opus_bench.sh, from its work directory (standard library only):

    opus_bench_table.py --work DIR --model-info FILE --sentences N --source-pieces P
                        --out-len L --repeat R --types "float32 int8" --threads "1 2"
                        --decoding "greedy beam4"

Reads DIR/runs ("ENGINE-TYPE-DECODING-THREADS-REP wall_s rss_kb" per timed run), each run's
output (DIR/NAME.hyp: tnmt's text, CTranslate2's pieces) and tnmt's untimed runs with
--token-scores (DIR/check-TYPE-DECODING.txt: 'LINE ||| TEXT ||| SCORE ||| PIECES ||| SCORES').
Prints the setup and one row per compute type, threads and decoding: both engines' target
tokens/s (sentences x L over the best wall time), their ratio, and how many sentences have
the same first L-1 pieces in both engines. Every output must have the forced length (tnmt L-1
pieces and </s>, CTranslate2 L pieces) and every timed tnmt run must print its check run's
text; a row where that fails says so.
"""

import argparse
import collections
import json
import os
import sys


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def check_run(path):
    """tnmt's --token-scores output: (text, pieces) per sentence."""
    out = []
    for line in read_lines(path):
        fields = line.split(" ||| ")
        out.append((fields[1], fields[3].split()))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name in ("work", "model-info", "types", "threads", "decoding"):
        ap.add_argument("--" + name, required=True)
    for name in ("sentences", "source-pieces", "out-len", "repeat"):
        ap.add_argument("--" + name, type=int, required=True)
    a = ap.parse_args()
    L = a.out_len
    with open(a.model_info) as f:
        info = json.load(f)

    walls = collections.defaultdict(list)
    for line in read_lines(os.path.join(a.work, "runs")):
        name, wall, _ = line.split()
        engine, ctype, dec, threads, _ = name.split("-")
        walls[(engine, ctype, dec, threads)].append((float(wall), name))

    print(f"model: Hugging Face Marian, {info['layers']} layers, d_model {info['d_model']}, "
          f"d_ff {info['d_ff']}, {info['heads']} heads, {info['activation']}, tied embeddings, "
          f"vocabulary {info['vocab_size']}; random weights (seed {info['seed']}, init_std "
          f"{info['init_std']}); SentencePiece unigram models of {info['pieces_per_side']} pieces "
          f"per side trained on {info['data']} (bench/make_opus_model.py)")
    print(f"work: {a.sentences} sources of {a.source_pieces} pieces (+ </s>), all at once; "
          f"outputs forced to {L} decoder steps (tnmt {L - 1} pieces + </s>, CTranslate2 {L} "
          f"pieces), {L} target tokens credited per sentence; whole processes, best of "
          f"{a.repeat}; identical = sentences with the same first {L - 1} pieces")
    print()
    print("| compute type | threads | decoding | tnmt tokens/s | CT2 tokens/s | tnmt / CT2 | outputs identical |")
    print("|---|---|---|---|---|---|---|")
    for ctype in a.types.split():
        for threads in a.threads.split():
            for dec in a.decoding.split():
                problems = []
                check = check_run(os.path.join(a.work, f"check-{ctype}-{dec}.txt"))
                if any(len(p) != L - 1 for _, p in check):
                    problems.append(f"tnmt lengths not {L - 1}")
                tps = {}
                ct2_pieces = None
                for engine in ("tnmt", "ct2"):
                    runs = walls[(engine, ctype, dec, threads)]
                    if not runs:
                        tps[engine] = None
                        continue
                    tps[engine] = a.sentences * L / min(w for w, _ in runs)
                    for _, name in runs:
                        hyp = read_lines(os.path.join(a.work, name + ".hyp"))
                        if len(hyp) != a.sentences:
                            problems.append(f"{name}: {len(hyp)} lines")
                        elif engine == "tnmt" and hyp != [t for t, _ in check]:
                            problems.append(f"{name} differs from its check run")
                        elif engine == "ct2":
                            pieces = [h.split() for h in hyp]
                            if any(len(p) != L for p in pieces):
                                problems.append(f"{name}: lengths not {L}")
                            if ct2_pieces is not None and pieces != ct2_pieces:
                                problems.append(f"{name} differs from the other repetitions")
                            ct2_pieces = pieces
                same = (sum(p[: L - 1] == c[: L - 1] for (_, p), c in zip(check, ct2_pieces))
                        if ct2_pieces is not None else None)
                t, c = tps["tnmt"], tps["ct2"]
                cells = [ctype, threads, dec, f"{t:.0f}" if t else "-", f"{c:.0f}" if c else "-",
                         f"{t / c:.2f}x" if t and c else "-",
                         f"{same}/{len(check)}" if same is not None else "-"]
                if problems:
                    cells[-1] += " (" + "; ".join(problems) + ")"
                print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
