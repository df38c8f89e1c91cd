#!/usr/bin/env python3
"""CTranslate2 peer for bench/translate_bench (issue "engine throughput").

Two steps, each meant to run in its own process (so peak memory is per configuration):

  convert   DIR -> CT2DIR: reads the model that `translate_bench --export DIR` wrote
            (config.json + model.safetensors, read by tools/convert/tnmt_model.py) and writes the SAME
            model as a CTranslate2 model (float32).
  translate CT2DIR: translates DIR/sources.txt with beam 4, 32 sentences per batch, output
            length fixed at 70, with N intra threads, and reports target tokens/s and memory.
            With --compare DIR it also checks the outputs against tnmt's (DIR/tnmt_beam.txt,
            DIR/tnmt_greedy.txt): token ids and scores.

Mapping (tnmt / fairseq names -> CTranslate2 TransformerSpec), shared with
tools/convert/export_ctranslate2.py (build_spec; docs/model-import-export.md); for the
benchmark's model:
  * post-norm (pre_norm=False), relu, shared embeddings, decoder projection = embeddings
    (no bias), embeddings scaled by sqrt(d_model).
  * positions: CTranslate2's built-in sinusoid is the tensor2tensor layout ([sin | cos]
    halves, a different frequency scale), NOT the interleaved formula tnmt uses
    (docs/model-format.md), so the table is given explicitly as position_encodings.encodings
    (rows start at position 0, as in tnmt).
  * self-attention: linear[0] = fused [q; k; v] (3d x d), linear[1] = out_proj.
    cross-attention: linear[0] = q, linear[1] = fused [k; v] (2d x d), linear[2] = out_proj.
    Layer norms: self_attention.layer_norm = self_attn_layer_norm, attention.layer_norm =
    encoder_attn_layer_norm, ffn.layer_norm = final_layer_norm; ffn.linear_0 = fc1,
    ffn.linear_1 = fc2.
  * layer norm epsilon: set through the model config (TransformerConfig.layer_norm_epsilon);
    CTranslate2's default would otherwise be 1e-5 where tnmt's config says 1e-6.
  * vocabulary: 8000 strings "<pad>", "<unk>", "<s>", "</s>", "t4" ... "t7999" (token id i
    <-> string i); decoder start token "<s>" (tnmt bos_id 2), end token "</s>" (eos_id 3), the
    source is given with its "</s>" (add_source_eos=False, as tnmt's sources end with eos).
  * tnmt never generates pad_id; CTranslate2 would, so "<pad>" is suppressed
    (suppress_sequences=[["<pad>"]]).

Length: tnmt's output length counts </s> (docs/model-format.md): min_length = max_length = 70
gives 69 tokens + </s>, i.e. 70 decoder steps. CTranslate2's min/max_decoding_length count
generated tokens without </s>, and a hypothesis that reaches max_decoding_length stops without
</s> (even with return_end_token=True; measured with 4.8.5, and re-checked at every run). So
CTranslate2 gets min_decoding_length = max_decoding_length = 70: 70 tokens, no </s>, also 70
decoder steps (one forward pass per generated token, the first from <s>). Both engines are
credited 70 target tokens per sentence: tokens without </s> + 1 if the hypothesis ends with </s>.

Cross-check (--compare): token ids of the best hypotheses (tnmt's 69 tokens against
CTranslate2's first 69; beam and greedy) and, independent of search, CTranslate2's
score_batch log-probabilities of tnmt's own outputs (69 tokens + </s>) against tnmt's scores
(greedy: sum of log-probabilities; beam: normalized score * ((5 + 70) / 6)^0.6).
"""

import argparse
import os
import resource
import sys
import time


def vocabulary(size):
    return ["<pad>", "<unk>", "<s>", "</s>"] + [f"t{i}" for i in range(4, size)]


VOCAB = vocabulary(8000)
TOKEN_ID = {t: i for i, t in enumerate(VOCAB)}


# ------------------------------------------------------------------------------------------
# convert

def convert(model_dir, out_dir, position_rows):
    """The mapping is tools/convert/export_ctranslate2.py's (build_spec), with this peer's
    placeholder vocabulary and sources that already end with </s>."""
    import ctranslate2

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                                    "tools", "convert"))
    import export_ctranslate2
    import tnmt_model

    try:
        model = tnmt_model.load_model(model_dir, vocabulary=False)
        spec = export_ctranslate2.build_spec(model, position_rows,
                                             vocabulary=vocabulary(model.config["vocab_size"]))
    except tnmt_model.ModelError as e:
        raise SystemExit(f"ct2_peer: {e}")
    spec.config.add_source_eos = False  # sources.txt ids end with eos_id already
    spec.validate()
    spec.optimize(quantization="float32")
    os.makedirs(out_dir, exist_ok=True)
    spec.save(out_dir)
    print(f"ct2_peer: wrote CTranslate2 {ctranslate2.__version__} model to {out_dir} "
          f"(layer_norm_epsilon {spec.config.layer_norm_epsilon}, {position_rows} position rows)")


# ------------------------------------------------------------------------------------------
# translate

def read_sources(path):
    with open(path) as f:
        return [[int(x) for x in line.split()] for line in f if line.strip()]


def read_scored(path):
    out = []
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            score, _, ids = line.partition("\t")
            out.append((float(score), [int(x) for x in ids.split()]))
    return out


def proc_status_kib(key):
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


def reset_peak_rss():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def maxrss_kib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def run_ct2(translator, sources, *, beam, batch, min_len, max_len, scores=False):
    import ctranslate2  # noqa: F401
    return translator.translate_batch(
        sources, beam_size=beam, max_batch_size=batch, batch_type="examples",
        length_penalty=0.6, min_decoding_length=min_len, max_decoding_length=max_len,
        suppress_sequences=[["<pad>"]], return_end_token=True, return_scores=scores,
        max_input_length=0)


def output_lengths(results):
    """(tokens without </s>, ends with </s>) of each best hypothesis."""
    out = []
    for r in results:
        h = r.hypotheses[0]
        eos = bool(h) and h[-1] == "</s>"
        out.append((len(h) - (1 if eos else 0), eos))
    return out


def counted_tokens(n, eos):
    return n + (1 if eos else 0)


def compare(translator, sources, ct2_results, tnmt_path, kind, out_len, alpha=0.6):
    """tnmt's best hypotheses vs CTranslate2's: ids, and CTranslate2's log-probabilities of
    tnmt's outputs (score_batch) vs tnmt's scores."""
    if not os.path.exists(tnmt_path):
        return f"{kind}: {tnmt_path} missing, not compared"
    tnmt = read_scored(tnmt_path)
    n = min(len(tnmt), len(ct2_results))
    same = 0
    first_diff = None
    for s in range(n):
        t_ids = tnmt[s][1]
        c_ids = [TOKEN_ID[t] for t in ct2_results[s].hypotheses[0] if t != "</s>"][: len(t_ids)]
        if c_ids == t_ids:
            same += 1
        elif first_diff is None:
            pos = next((i for i, (x, y) in enumerate(zip(c_ids, t_ids)) if x != y),
                       min(len(c_ids), len(t_ids)))
            first_diff = (s, pos)
    msg = f"{kind}: {same}/{n} sentences with identical ids (first {out_len - 1} tokens)"
    if first_diff:
        msg += f", first difference at sentence {first_diff[0]} token {first_diff[1]}"
    # Log-probability of tnmt's outputs under CTranslate2 (score_batch appends </s>).
    targets = [[VOCAB[i] for i in ids] for _, ids in tnmt[:n]]
    scored = translator.score_batch(sources[:n], targets, max_batch_size=32)
    max_abs = max_rel = 0.0
    lp = ((5.0 + out_len) / 6.0) ** alpha
    for s in range(n):
        ct2_sum = float(sum(scored[s].log_probs))
        t_score = tnmt[s][0]
        t_sum = t_score * lp if kind == "beam" else t_score
        max_abs = max(max_abs, abs(ct2_sum - t_sum))
        max_rel = max(max_rel, abs(ct2_sum - t_sum) / max(1e-9, abs(t_sum)))
    msg += (f"; log-prob of tnmt's outputs under CT2 vs tnmt's score: max |diff| {max_abs:.4f} "
            f"(relative {max_rel:.1e})")
    return msg


def translate(args):
    import ctranslate2

    sources_ids = read_sources(args.sources)[: args.sentences]
    sources = [[VOCAB[i] for i in s] for s in sources_ids]
    load_start = os.getloadavg()[0]

    t0 = time.perf_counter()
    translator = ctranslate2.Translator(args.ct2, device="cpu", compute_type="float32",
                                        inter_threads=1, intra_threads=args.threads)
    load_s = time.perf_counter() - t0
    min_len = max_len = args.out_len  # tokens without </s>: 70 decoder steps, like tnmt's 69 + </s>
    # Warm-up (untimed), as translate_bench does: one batch, short outputs.
    run_ct2(translator, sources[: args.batch], beam=args.beam, batch=args.batch, min_len=4,
            max_len=4)
    rss_model_kib = proc_status_kib("VmRSS")
    maxrss_before = maxrss_kib()
    hwm_reset = reset_peak_rss()

    cpu0 = time.process_time()
    t0 = time.perf_counter()
    results = run_ct2(translator, sources, beam=args.beam, batch=args.batch, min_len=min_len,
                      max_len=max_len, scores=True)
    seconds = time.perf_counter() - t0
    cpu_s = time.process_time() - cpu0  # all threads of the process
    decode_hwm_kib = proc_status_kib("VmHWM")
    peak_kib = max(maxrss_before, maxrss_kib())

    lens = output_lengths(results)
    tokens = sum(counted_tokens(n, eos) for n, eos in lens)
    bad = sum(1 for n, eos in lens if counted_tokens(n, eos) != args.out_len)
    with_eos = sum(1 for n, eos in lens if eos)
    tps = tokens / seconds
    print(f"ct2_peer: CTranslate2 {ctranslate2.__version__}, intra_threads={args.threads}, "
          f"load {load_s:.1f} s; min/max_decoding_length = {min_len}/{max_len}: "
          f"{len(lens) - with_eos} outputs of {args.out_len} tokens without </s>, {with_eos} "
          f"ending with </s>")
    print(f"ct2_peer: {len(sources)} sentences, {tokens} target tokens (expected "
          f"{len(sources) * args.out_len}; other lengths: {bad}) in {seconds:.2f} s = "
          f"{tps:.1f} target tokens/s ({cpu_s / seconds:.2f} cores busy); RSS model {rss_model_kib / 1024:.0f} MiB, decode peak "
          f"{decode_hwm_kib / 1024:.0f} MiB{'' if hwm_reset else ' (whole process)'}, process "
          f"peak {peak_kib / 1024:.0f} MiB")
    result = {
        "threads": args.threads, "tokens": tokens, "expected_tokens": len(sources) * args.out_len,
        "bad_lengths": bad, "seconds": seconds, "tokens_per_s": tps,
        "rss_model_mib": rss_model_kib / 1024, "decode_peak_mib": decode_hwm_kib / 1024,
        "maxrss_mib": peak_kib / 1024, "min_decoding_length": min_len,
        "max_decoding_length": max_len, "version": ctranslate2.__version__,
        "load_start": load_start, "load_end": os.getloadavg()[0],
        "cpu_per_wall": cpu_s / seconds,
    }

    if args.compare:
        notes = [compare(translator, sources, results,
                         os.path.join(args.compare, "tnmt_beam.txt"), "beam", args.out_len)]
        greedy_path = os.path.join(args.compare, "tnmt_greedy.txt")
        if os.path.exists(greedy_path):
            n = len(read_scored(greedy_path))
            g = run_ct2(translator, sources[:n], beam=1, batch=args.batch, min_len=min_len,
                        max_len=max_len, scores=True)
            notes.append(compare(translator, sources, g, greedy_path, "greedy", args.out_len))
        for note in notes:
            print("ct2_peer: vs tnmt:", note)
        result["compare"] = " | ".join(notes)

    if args.result:
        with open(args.result, "w") as f:
            for k, v in result.items():
                f.write(f"{k}={v}\n")
    return 0 if bad == 0 else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("convert")
    c.add_argument("model_dir")
    c.add_argument("ct2_dir")
    c.add_argument("--position-rows", type=int, default=1024)
    t = sub.add_parser("translate")
    t.add_argument("ct2")
    t.add_argument("--sources", required=True)
    t.add_argument("--threads", type=int, default=1)
    t.add_argument("--sentences", type=int, default=200)
    t.add_argument("--batch", type=int, default=32)
    t.add_argument("--beam", type=int, default=4)
    t.add_argument("--out-len", type=int, default=70)
    t.add_argument("--compare", help="tnmt export dir with tnmt_beam.txt / tnmt_greedy.txt")
    t.add_argument("--result", help="write key=value lines here")
    args = ap.parse_args()
    if args.cmd == "convert":
        convert(args.model_dir, args.ct2_dir, args.position_rows)
        return 0
    return translate(args)


if __name__ == "__main__":
    sys.exit(main())
