#!/usr/bin/env python3
"""Translates a text file with CTranslate2, the way `tnmt translate` does, for the real-work
benchmark (bench/run_real_bench.sh): one process, one file, batches by source tokens.

    ct2_translate_file.py --ct2 CT2_DIR --input SRC --output HYP [--threads N] [--beam-size 4]
                          [--length-penalty 0.6] [--compute-type float32|int8]
                          [--max-batch-tokens 4096] [--spm SPM] [--source-eos]
                          [--min-decoding-length 0] [--max-decoding-length 256] [--pieces]

CT2_DIR is a model written by tools/convert/export_ctranslate2.py (it holds spm.model). Blank
lines stay blank. Prints one JSON line to stderr: sentences, seconds of translation (load
excluded) and target tokens.

For other models (bench/run_opus_bench.sh: a Hugging Face Marian model converted by
ct2-transformers-converter): --spm names the source SentencePiece model (Marian's source.spm),
--source-eos appends "</s>" to each source (MarianTokenizer does; that converter sets
add_source_eos false), --min/max-decoding-length pass CTranslate2's limits (tokens without
</s>), and --pieces writes each output's pieces separated by spaces instead of the decoded text.
"""

import argparse
import json
import os
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ct2", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--beam-size", type=int, default=4)
    ap.add_argument("--length-penalty", type=float, default=0.6)
    ap.add_argument("--compute-type", default="float32")
    ap.add_argument("--max-batch-tokens", type=int, default=4096)
    ap.add_argument("--spm", help="source SentencePiece model (default: CT2_DIR/spm.model)")
    ap.add_argument("--source-eos", action="store_true", help='append "</s>" to each source')
    ap.add_argument("--min-decoding-length", type=int, default=0)
    ap.add_argument("--max-decoding-length", type=int, default=256)
    ap.add_argument("--pieces", action="store_true", help="write pieces, not decoded text")
    a = ap.parse_args()

    import ctranslate2
    import sentencepiece

    sp = sentencepiece.SentencePieceProcessor(model_file=a.spm or os.path.join(a.ct2, "spm.model"))
    tr = ctranslate2.Translator(a.ct2, device="cpu", compute_type=a.compute_type, inter_threads=1,
                                intra_threads=a.threads)
    with open(a.input, encoding="utf-8") as f:
        lines = [l.rstrip("\n") for l in f]
    t0 = time.perf_counter()
    keep = [i for i, l in enumerate(lines) if l.strip()]
    sources = [sp.encode(lines[i], out_type=str) + (["</s>"] if a.source_eos else []) for i in keep]
    results = tr.translate_batch(sources, max_batch_size=a.max_batch_tokens, batch_type="tokens",
                                 beam_size=a.beam_size, length_penalty=a.length_penalty,
                                 min_decoding_length=a.min_decoding_length,
                                 max_decoding_length=a.max_decoding_length)
    out = [""] * len(lines)
    tokens = 0
    for i, r in zip(keep, results):
        hyp = r.hypotheses[0]
        tokens += len(hyp) + 1  # + </s>, as tnmt counts generated tokens
        out[i] = " ".join(hyp) if a.pieces else sp.decode(hyp)
    seconds = time.perf_counter() - t0
    with open(a.output, "w", encoding="utf-8") as f:
        f.write("".join(l + "\n" for l in out))
    print(json.dumps({"sentences": len(keep), "seconds": seconds, "target_tokens": tokens}), file=sys.stderr)


if __name__ == "__main__":
    main()
