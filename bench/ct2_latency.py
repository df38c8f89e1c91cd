#!/usr/bin/env python3
"""Interactive latency of CTranslate2 in-process, the peer of `tnmt serve` answering one
sentence per call (bench/run_interactive_bench.sh): each non-empty line of --input is
translated alone (SentencePiece encode, translate_batch of one source, decode), after one
warm-up call; prints one JSON line with the per-call latency percentiles (nearest rank, as
bench/serve_load reports them) in milliseconds.

    ct2_latency.py --ct2 CT2_DIR --input SRC [--threads 1] [--beam-size 4]
                   [--length-penalty 0.6] [--compute-type float32] [--spm SPM]

CT2_DIR is a model written by tools/convert/export_ctranslate2.py (it holds spm.model).
"""

import argparse
import json
import math
import os
import time


def percentile(sorted_ms, q):
    return sorted_ms[min(len(sorted_ms) - 1, max(0, math.ceil(q * len(sorted_ms)) - 1))]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ct2", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--beam-size", type=int, default=4)
    ap.add_argument("--length-penalty", type=float, default=0.6)
    ap.add_argument("--compute-type", default="float32")
    ap.add_argument("--spm", help="source SentencePiece model (default: CT2_DIR/spm.model)")
    a = ap.parse_args()

    import ctranslate2
    import sentencepiece

    sp = sentencepiece.SentencePieceProcessor(model_file=a.spm or os.path.join(a.ct2, "spm.model"))
    tr = ctranslate2.Translator(a.ct2, device="cpu", compute_type=a.compute_type, inter_threads=1,
                                intra_threads=a.threads)
    with open(a.input, encoding="utf-8") as f:
        lines = [l.rstrip("\n") for l in f if l.strip()]
    if not lines:
        raise SystemExit("ct2_latency: %s has no non-empty line" % a.input)

    def translate(line):
        r = tr.translate_batch([sp.encode(line, out_type=str)], beam_size=a.beam_size,
                               length_penalty=a.length_penalty)
        return sp.decode(r[0].hypotheses[0])

    translate(lines[0])
    ms = []
    for line in lines:
        t0 = time.perf_counter()
        translate(line)
        ms.append((time.perf_counter() - t0) * 1000.0)
    ms.sort()
    print(json.dumps({"calls": len(ms), "p50": percentile(ms, 0.5), "p90": percentile(ms, 0.9),
                      "p99": percentile(ms, 0.99), "max": ms[-1], "mean": sum(ms) / len(ms)}))


if __name__ == "__main__":
    main()
