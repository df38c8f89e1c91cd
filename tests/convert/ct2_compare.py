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
--max-token-diff / --mean-token-diff (quantized models): both engines score the pieces of tnmt's
greedy and beam translations (forced decoding, tnmt's --token-scores against CTranslate2's
score_batch), and the per-token log-probability differences must stay within the bounds.
Exit status 0 when all checks pass, 1 otherwise (--report-only: the translations are only
reported; the forced-decoding bounds still count).
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


def tnmt_token_scores(tnmt, model, sentences, extra):
    """{line number from 1: (pieces, per-token log-probabilities with </s> last)}"""
    out = subprocess.run([tnmt, "translate", "--model", model, "--input", sentences,
                          "--token-scores", "--threads", "1"] + extra, check=True,
                         capture_output=True, text=True).stdout
    rows = {}
    for line in out.split("\n")[:-1]:
        fields = line.split(" ||| ")
        if len(fields) != 5:
            continue
        pieces = fields[3].split()
        rows[int(fields[0])] = (pieces, [float(x) for x in fields[4].split()])
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
                    help="print the agreement of the translations, exit 0 whatever it is "
                    "(quantized models; the --max-token-diff checks still count)")
    ap.add_argument("--max-token-diff", type=float,
                    help="also force CTranslate2 along tnmt's greedy and beam translations "
                    "(the pieces tnmt wrote) and fail if any token's log-probability differs "
                    "from tnmt's by more than this")
    ap.add_argument("--mean-token-diff", type=float,
                    help="the same forced decoding: fail if the mean absolute difference over "
                    "all those tokens exceeds this")
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
    # Forced decoding: the same pieces scored by both engines, token by token. Unlike the
    # translations above this does not hinge on near-ties, so it bounds a quantized model's
    # error on any machine.
    forced_failures = 0
    if args.max_token_diff is not None or args.mean_token_diff is not None:
        diffs = []
        worst = (0.0, "")
        for name, extra in (("greedy", ["--beam-size", "1"]), ("beam", [])):
            rows = tnmt_token_scores(args.tnmt, args.model, args.sentences, extra)
            for i, line in enumerate(lines):
                if not line:
                    continue
                if i + 1 not in rows:
                    forced_failures += 1
                    print(f"FAIL forced: tnmt wrote no token scores for line {i + 1}")
                    continue
                pieces, t_lp = rows[i + 1]
                src = sp.encode(line, out_type=str)
                c_lp = list(tr.score_batch([src], [pieces])[0].log_probs)
                if len(c_lp) != len(t_lp):
                    forced_failures += 1
                    print(f"FAIL forced {name} line {i + 1}: CTranslate2 scored {len(c_lp)} "
                          f"tokens, tnmt {len(t_lp)}")
                    continue
                for j, (c, t) in enumerate(zip(c_lp, t_lp)):
                    d = abs(c - t)
                    diffs.append(d)
                    if d > worst[0]:
                        tok = pieces[j] if j < len(pieces) else "</s>"
                        worst = (d, f"{name} line {i + 1} token {j} {tok!r}: tnmt {t:.6f}, "
                                 f"CTranslate2 {c:.6f}")
        mean = sum(diffs) / max(1, len(diffs))
        max_bound = "none" if args.max_token_diff is None else args.max_token_diff
        print(f"forced decoding along tnmt's greedy and beam translations: {len(diffs)} tokens, "
              f"|log-probability difference| mean {mean:.2e} (bound {args.mean_token_diff}), "
              f"max {worst[0]:.2e} (bound {max_bound}; {worst[1]})")
        if args.max_token_diff is not None and worst[0] > args.max_token_diff:
            forced_failures += 1
            print(f"FAIL forced: max difference {worst[0]:.3e} > {args.max_token_diff}")
        if args.mean_token_diff is not None and mean > args.mean_token_diff:
            forced_failures += 1
            print(f"FAIL forced: mean difference {mean:.3e} > {args.mean_token_diff}")
        if not diffs:
            forced_failures += 1
            print("FAIL forced: no tokens compared")
    if args.report_only:
        print(f"ct2_compare: {failures} difference(s) beyond --tol {args.tol} (report only), "
              f"{forced_failures} forced-decoding failure(s)")
        return 1 if forced_failures else 0
    failures += forced_failures
    print(f"ct2_compare: {failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
