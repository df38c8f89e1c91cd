#!/usr/bin/env python3
"""Compares CTranslate2 translations of an exported model with `tnmt translate`.

    ct2_compare.py --tnmt TNMT --model MODEL_DIR --ct2 CT2_DIR --sentences FILE [--tol 1e-4]

Three decoding settings, each run by both engines on every non-empty line of FILE:

  beam     the model's config.json defaults (beam 4, length penalty 0.6, max_len = input
           length + 50). CTranslate2's beam search differs from tnmt's in two documented ways
           (docs/model-import-export.md): it normalizes a finished hypothesis by n^alpha where
           tnmt uses ((5 + n) / 6)^alpha, and at the length limit it stops without </s> where
           tnmt forces </s> (and counts its log-probability). So CTranslate2's own 1-best is
           reported, and the check is on its n-best list (num_hypotheses = beam size) ranked
           with tnmt's rule: every hypothesis re-scored as CTranslate2's log-probability of its
           tokens + </s> (score_batch) divided by ((5 + n) / 6)^alpha. That best must be tnmt's
           text, with tnmt's score within --tol (relative, at least --tol absolute).
  alpha0   beam 4, length penalty 0 (both engines rank by the plain sum): CTranslate2's own
           1-best must be tnmt's text for every line whose output ended before max_len.
  greedy   beam 1: CTranslate2's own output must be tnmt's text for every line, and its score
           (log-probabilities + the forced </s> at max_len) tnmt's score within --tol.

CTranslate2 settings that make it follow tnmt: min_decoding_length=0 (its default of 1 forbids
an empty output and renormalizes the first step without </s>), max_decoding_length = max_len - 1
(tnmt's max_len counts </s>), max_input_length=0, CPU, float32. The empty line is skipped: tnmt
returns an empty translation for it without running the model.
Exit status 0 when all checks pass, 1 otherwise (--report-only: 0 whenever it ran).
"""

import argparse
import json
import os
import subprocess
import sys


def tnmt_translate(tnmt, model, sentences, extra):
    out = subprocess.run([tnmt, "translate", "--model", model, "--input", sentences, "--scores",
                          "--threads", "1"] + extra, check=True, capture_output=True,
                         text=True).stdout
    rows = []
    for line in out.split("\n")[:-1]:
        score, _, text = line.partition(" ||| ")
        rows.append((float(score), text))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tnmt", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--ct2", required=True)
    ap.add_argument("--sentences", required=True)
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--compute-type", default="float32")
    ap.add_argument("--report-only", action="store_true",
                    help="print the agreement, exit 0 whatever it is (quantized models)")
    args = ap.parse_args()

    import ctranslate2
    import sentencepiece

    with open(os.path.join(args.model, "config.json")) as f:
        dec = {"beam_size": 4, "length_penalty": 0.6, "max_length_offset": 50}
        dec.update(json.load(f).get("decoding", {}))
    beam, alpha, offset = dec["beam_size"], dec["length_penalty"], dec["max_length_offset"]
    sp = sentencepiece.SentencePieceProcessor(model_file=os.path.join(args.ct2, "spm.model"))
    tr = ctranslate2.Translator(args.ct2, device="cpu", compute_type=args.compute_type,
                                inter_threads=1, intra_threads=1)
    with open(args.sentences, encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f]

    def text(tokens):
        return sp.decode([sp.piece_to_id(t) for t in tokens])

    def lp(n, a):
        return ((5.0 + n) / 6.0) ** a

    def close(a, b):
        return abs(a - b) <= args.tol * max(1.0, abs(b))

    failures = 0

    def fail(msg):
        nonlocal failures
        failures += 1
        if not args.report_only:
            print("FAIL " + msg)

    settings = [("beam", beam, alpha, []),
                ("alpha0", beam, 0.0, ["--length-penalty", "0"]),
                ("greedy", 1, 0.0, ["--beam-size", "1"])]
    for name, k, a, extra in settings:
        ref = tnmt_translate(args.tnmt, args.model, args.sentences, extra)
        if len(ref) != len(lines):
            fail(f"{name}: tnmt gave {len(ref)} lines for {len(lines)}")
            continue
        n_lines = own_same = ranked_same = at_limit = 0
        worst = 0.0
        for i, line in enumerate(lines):
            if not line:
                continue
            n_lines += 1
            t_score, t_text = ref[i]
            src = sp.encode(line, out_type=str)
            max_len = len(src) + 1 + offset
            r = tr.translate_batch(
                [src], beam_size=k, length_penalty=a, num_hypotheses=k, return_scores=True,
                return_end_token=True, min_decoding_length=0, max_decoding_length=max_len - 1,
                max_input_length=0)[0]
            hyps = [[t for t in h if t != "</s>"] for h in r.hypotheses]
            ended = [bool(h) and h[-1] == "</s>" for h in r.hypotheses]
            # tnmt's score of each hypothesis under CTranslate2's model: log-probabilities of its
            # tokens and </s> (forced by tnmt at max_len), normalized by tnmt's length penalty.
            scored = tr.score_batch([src] * len(hyps), hyps)
            rescored = []
            for h, s in zip(hyps, scored):
                total = float(sum(s.log_probs))
                rescored.append(total / lp(len(h) + 1, a) if k > 1 else total)
            own = text(hyps[0])
            own_same += own == t_text
            if not ended[0]:
                at_limit += 1
            best = max(range(len(hyps)), key=lambda j: rescored[j])
            b_text, b_score = text(hyps[best]), rescored[best]
            if name == "beam":
                ok = b_text == t_text
                ranked_same += ok
                if not ok:
                    fail(f"{name} line {i + 1}: tnmt {t_text!r} ({t_score:.6f}), CTranslate2 "
                         f"n-best ranked by tnmt's rule {b_text!r} ({b_score:.6f})")
                    continue
                score = b_score
            else:
                if own != t_text and (ended[0] or name == "greedy"):
                    fail(f"{name} line {i + 1}: tnmt {t_text!r}, CTranslate2 {own!r}")
                    continue
                if own != t_text:
                    # alpha0 at the length limit: tnmt's forced </s> may reorder the beam.
                    if b_text != t_text:
                        fail(f"{name} line {i + 1}: tnmt {t_text!r}, CTranslate2 {own!r} "
                             f"(limit; with </s> {b_text!r})")
                        continue
                score = b_score if own != t_text else rescored[0]
            worst = max(worst, abs(score - t_score) / max(1.0, abs(t_score)))
            if not close(score, t_score):
                fail(f"{name} line {i + 1}: {t_text!r}: tnmt score {t_score:.6f}, CTranslate2 "
                     f"{score:.6f}")
        msg = (f"{name} (beam {k}, length penalty {a}): {n_lines} lines, CTranslate2's own "
               f"1-best = tnmt's text for {own_same}")
        if name == "beam":
            msg += f"; its {k}-best ranked by tnmt's rule = tnmt's text for {ranked_same}"
        msg += (f"; {at_limit} CTranslate2 1-best(s) at the length limit; max relative score "
                f"difference {worst:.2e}")
        print(msg)
    if args.report_only:
        print(f"ct2_compare: {failures} difference(s) beyond --tol {args.tol} (report only)")
        return 0
    print(f"ct2_compare: {failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
