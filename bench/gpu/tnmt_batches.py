#!/usr/bin/env python3
"""tnmt's training batches, rebuilt in Python from the same corpus, SentencePiece model and
options, for a peer (bench/torch_train_peer.py) that must train on exactly the batches
`tnmt train` trains on. tnmt cannot write its batches to a file, so this follows the C++
rule for rule:

- Dataset (trainer/data/dataset.cc): line i of each file (one trailing '\\r' dropped, plain or
  .gz), both sides encoded with the joint SentencePiece model (Tokenizer::Encode: the model's
  ids, no bos/eos); a pair is dropped when a side is empty, longer than max_length (256)
  pieces, or the longer side exceeds max_length_ratio (2.0) x the shorter (ClassifyPair).
- BatchIterator (trainer/data/batch_iterator.h): epoch e's plan from std::mt19937_64 seeded
  by std::seed_seq{seed lo, seed hi, e lo, e hi} (both written out below from the C++
  standard); Fisher-Yates with rejection sampling over all kept pairs; windows of
  sort_window_batches x int(max_tokens / mean padded cost) pairs, each stable-sorted by
  (max(src, tgt) length, src, tgt); cut where one more pair would make rows x max(longest
  src + 1, longest tgt + 1) exceed max_tokens; batches shuffled; epochs follow on.
- A batch (BatchIterator::Fill): src = ids + eos, tgt_in = bos + ids, tgt_out = ids + eos,
  each right-padded with pad to the batch's longest + 1.
One rank only (no data-parallel sharding), no subword sampling (--subword-nbest 1).

Checking against a `tnmt train --save-dir DIR` run (check_against): DIR/train.rank0.cache
holds every kept pair's ids (the magic "TNMTIDS1", then each pair's source ids and target ids
as int32): equal to ours means the same tokenization and filtering; DIR/metrics.jsonl's
tokens_seen at each logged step equals our cumulative target tokens when the batches are the
same (an update skipped for a float16 overflow consumes a batch without a step: such runs
are not compared).

    tnmt_batches.py --train-source S --train-target T --spm-model M --max-tokens N
                    [--batches K] [--tnmt-save-dir DIR]
prints the first K batches' shapes and token counts, and the check's verdict.
"""

import argparse
import gzip
import json
import os
import struct
import sys

M32 = 0xFFFFFFFF
M64 = 0xFFFFFFFFFFFFFFFF


def seed_seq_generate(values, n):
    """std::seed_seq(values).generate(n 32-bit words) ([rand.util.seedseq])."""
    b = [0x8B8B8B8B] * n
    s = len(values)
    t = 11 if n >= 623 else 7 if n >= 68 else 5 if n >= 39 else 3 if n >= 7 else (n - 1) // 2
    p = (n - t) // 2
    q = p + t
    m = max(s + 1, n)

    def T(x):
        return x ^ (x >> 27)

    for k in range(m):
        r1 = (1664525 * T(b[k % n] ^ b[(k + p) % n] ^ b[(k - 1) % n])) & M32
        if k == 0:
            r2 = r1 + s
        elif k <= s:
            r2 = r1 + k % n + values[k - 1]
        else:
            r2 = r1 + k % n
        r2 &= M32
        b[(k + p) % n] = (b[(k + p) % n] + r1) & M32
        b[(k + q) % n] = (b[(k + q) % n] + r2) & M32
        b[k % n] = r2
    for k in range(m, m + n):
        r3 = (1566083941 * T((b[k % n] + b[(k + p) % n] + b[(k - 1) % n]) & M32)) & M32
        r4 = (r3 - k % n) & M32
        b[(k + p) % n] ^= r3
        b[(k + q) % n] ^= r4
        b[k % n] = r4
    return b


class MT19937_64:
    """std::mt19937_64 seeded from a std::seed_seq ([rand.eng.mers])."""
    N, M, R = 312, 156, 31
    A = 0xB5026F5AA96619E9
    UPPER, LOWER = (~((1 << 31) - 1)) & M64, (1 << 31) - 1

    def __init__(self, seed_words):
        a = seed_seq_generate(seed_words, 2 * self.N)
        self.x = [a[2 * i] | (a[2 * i + 1] << 32) for i in range(self.N)]
        if (self.x[0] & self.UPPER) == 0 and not any(self.x[1:]):
            self.x[0] = 1 << 63
        self.i = self.N

    def _twist(self):
        x, n, m = self.x, self.N, self.M
        for k in range(n):
            y = (x[k] & self.UPPER) | (x[(k + 1) % n] & self.LOWER)
            x[k] = x[(k + m) % n] ^ (y >> 1) ^ (self.A if y & 1 else 0)
        self.i = 0

    def __call__(self):
        if self.i >= self.N:
            self._twist()
        y = self.x[self.i]
        self.i += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000 & M64
        y ^= (y << 37) & 0xFFF7EEE000000000 & M64
        y ^= y >> 43
        return y


def uniform_below(rng, n):
    threshold = ((1 << 64) - n) % n
    while True:
        r = rng()
        if r >= threshold:
            return r % n


def shuffle(values, rng):
    for i in range(len(values), 1, -1):
        j = uniform_below(rng, i)
        values[i - 1], values[j] = values[j], values[i - 1]


def epoch_rng(seed, epoch):
    return MT19937_64([seed & M32, (seed >> 32) & M32, epoch & M32, (epoch >> 32) & M32])


def _lines(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        for raw in f:
            line = raw[:-1] if raw.endswith(b"\n") else raw
            if line.endswith(b"\r"):
                line = line[:-1]
            yield line.decode("utf-8")


class Corpus:
    """The kept pairs' ids, in corpus order (trainer/data/dataset.cc, no subword sampling)."""

    def __init__(self, source_path, target_path, spm_model, max_length=256, max_length_ratio=2.0):
        import sentencepiece as spm
        sp = spm.SentencePieceProcessor(model_file=spm_model)
        self.vocab_size = sp.get_piece_size()
        src, tgt = list(_lines(source_path)), list(_lines(target_path))
        if len(src) != len(tgt):
            raise ValueError(f"{source_path} has {len(src)} lines, {target_path} {len(tgt)}")
        src_ids, tgt_ids = sp.encode(src), sp.encode(tgt)
        self.pairs = []
        self.read = len(src)
        for s, t in zip(src_ids, tgt_ids):
            ls, lt = len(s), len(t)
            if ls == 0 or lt == 0:
                continue
            if max_length > 0 and (ls > max_length or lt > max_length):
                continue
            if max_length_ratio > 0 and max(ls, lt) > max_length_ratio * min(ls, lt):
                continue
            self.pairs.append((s, t))


class Batches:
    """BatchIterator with shuffle, one rank: yields (src, tgt_in, tgt_out, tgt_tokens, src_lengths)
    with src [rows, src_len] etc. as lists of lists."""

    def __init__(self, corpus, max_tokens, seed=1, sort_window_batches=100, pad=0, bos=2, eos=3):
        self.c, self.max_tokens, self.seed = corpus, max_tokens, seed
        self.pad, self.bos, self.eos = pad, bos, eos
        n = len(corpus.pairs)
        if n == 0:
            raise ValueError("the dataset has no pairs")
        cost = 0.0
        for s, t in corpus.pairs:
            cost += max(len(s), len(t)) + 1
        pairs_per_batch = max(1, int(float(max_tokens) / (cost / n)))
        self.window = pairs_per_batch * sort_window_batches

    def plan(self, epoch):
        pairs = self.c.pairs
        n = len(pairs)
        order = list(range(n))
        rng = epoch_rng(self.seed, epoch)
        shuffle(order, rng)

        def key(i):
            ls, lt = len(pairs[i][0]), len(pairs[i][1])
            return (max(ls, lt), ls, lt)

        batches = []
        for begin in range(0, n, self.window):
            end = min(n, begin + self.window)
            order[begin:end] = sorted(order[begin:end], key=key)  # stable, as std::stable_sort
            i = begin
            while i < end:
                first, longest = i, 0
                while i < end:
                    ls, lt = len(pairs[order[i]][0]), len(pairs[order[i]][1])
                    candidate = max(longest, max(ls, lt) + 1)
                    if i > first and (i - first + 1) * candidate > self.max_tokens:
                        break
                    longest = candidate
                    i += 1
                batches.append(order[first:i])
        shuffle(batches, rng)
        return batches

    def fill(self, rows):
        pairs = self.c.pairs
        src_len = max(len(pairs[r][0]) for r in rows) + 1
        tgt_len = max(len(pairs[r][1]) for r in rows) + 1
        src, tgt_in, tgt_out, lengths, tokens = [], [], [], [], 0
        for r in rows:
            s, t = pairs[r]
            src.append(s + [self.eos] + [self.pad] * (src_len - len(s) - 1))
            tgt_in.append([self.bos] + t + [self.pad] * (tgt_len - len(t) - 1))
            tgt_out.append(t + [self.eos] + [self.pad] * (tgt_len - len(t) - 1))
            lengths.append(len(s) + 1)
            tokens += len(t) + 1
        return src, tgt_in, tgt_out, tokens, lengths

    def first(self, k):
        """The first k batches of training (epoch 0 on, as a fresh `tnmt train` reads them)."""
        out, epoch = [], 0
        while len(out) < k:
            for rows in self.plan(epoch):
                if len(out) == k:
                    break
                out.append(self.fill(rows))
            epoch += 1
        return out


def check_against(corpus, batches, save_dir):
    """(verdict, message lines) comparing with a `tnmt train --save-dir save_dir` run; the
    verdict is "batches the same as tnmt's (WHAT)", "batches NOT the same as tnmt's (WHAT)"
    or "batches not compared with tnmt's", WHAT naming what was compared."""
    notes, ok, compared = [], True, []
    cache = os.path.join(save_dir, "train.rank0.cache")
    if os.path.exists(cache):
        with open(cache, "rb") as f:
            magic = f.read(8)
            data = f.read()
        if magic != b"TNMTIDS1":
            notes.append(f"{cache}: magic {magic!r}, not TNMTIDS1 (subword sampling?): not compared")
        else:
            ours = [x for s, t in corpus.pairs for x in s + t]
            theirs = list(struct.unpack(f"<{len(data) // 4}i", data))
            same = ours == theirs
            ok &= same
            compared.append("ids")
            notes.append(f"ids of the {len(corpus.pairs)} kept pairs {'equal' if same else 'DIFFER from'} "
                         f"{cache} ({len(theirs)} ids there, {len(ours)} here)")
    else:
        notes.append(f"no {cache}: tokenization not compared")
    metrics = os.path.join(save_dir, "metrics.jsonl")
    if os.path.exists(metrics):
        seen = {}
        with open(metrics) as f:
            for line in f:
                j = json.loads(line)
                if j.get("event") == "train":
                    seen[j["step"]] = j["tokens_seen"]
                if j.get("event") == "overflow":
                    seen = None
                    break
        if seen is None:
            notes.append(f"{metrics}: a float16 overflow skipped updates: tokens_seen not compared")
        elif not seen:
            notes.append(f"{metrics}: no train events: batch token counts not compared")
        else:
            total, sums = 0, {}
            for step, b in enumerate(batches, 1):
                total += b[3]
                sums[step] = total
            steps = [s for s in sorted(seen) if s in sums]
            bad = [s for s in steps if abs(sums[s] - seen[s]) > 0.5]
            ok &= not bad
            if steps:
                compared.append(f"target tokens to step {steps[-1]}")
            notes.append(f"target tokens after steps {steps}: {'equal to' if not bad else 'DIFFERENT from'} "
                         f"tnmt's tokens_seen" + (f" (step {bad[0]}: {sums[bad[0]]} here, {seen[bad[0]]:.0f} "
                                                  f"there)" if bad else ""))
    else:
        notes.append(f"no {metrics}: batch token counts not compared")
    if not compared:
        return "batches not compared with tnmt's", notes
    return f"batches {'the same as' if ok else 'NOT the same as'} tnmt's ({', '.join(compared)})", notes


def add_arguments(ap, required=True):
    """The flags that name tnmt's batches, spelled and defaulted as `tnmt train` has them
    (--seed is the caller's: it seeds more than the batches)."""
    ap.add_argument("--train-source", required=required, help="as tnmt train --train-source")
    ap.add_argument("--train-target", required=required, help="as tnmt train --train-target")
    ap.add_argument("--spm-model", required=required, help="as tnmt train --spm-model")
    ap.add_argument("--max-tokens", type=int, default=4096, help="as tnmt train --max-tokens")
    ap.add_argument("--max-length", type=int, default=256, help="as tnmt train --max-length")
    ap.add_argument("--max-length-ratio", type=float, default=2.0, help="as tnmt train --max-length-ratio")
    ap.add_argument("--tnmt-save-dir", help="a tnmt train --save-dir to compare the batches with")


def from_arguments(a, **special_ids):
    """(Corpus, Batches) for parsed add_arguments flags and a.seed."""
    corpus = Corpus(a.train_source, a.train_target, a.spm_model, a.max_length, a.max_length_ratio)
    return corpus, Batches(corpus, a.max_tokens, a.seed, **special_ids)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_arguments(ap)
    ap.add_argument("--seed", type=int, default=1, help="as tnmt train --seed")
    ap.add_argument("--batches", type=int, default=10)
    a = ap.parse_args()
    corpus, it = from_arguments(a)
    batches = it.first(a.batches)
    print(f"tnmt_batches: {len(corpus.pairs)} pairs kept of {corpus.read}, vocabulary {corpus.vocab_size}, "
          f"window {it.window} pairs, {len(it.plan(0))} batches in epoch 0")
    for i, (src, tgt_in, _, tokens, _) in enumerate(batches, 1):
        print(f"batch {i}: {len(src)} x (src {len(src[0])}, tgt {len(tgt_in[0])}), {tokens} target tokens")
    if a.tnmt_save_dir:
        verdict, notes = check_against(corpus, batches, a.tnmt_save_dir)
        for n in notes:
            print(f"tnmt_batches: {n}")
        print(f"tnmt_batches: {verdict}")
        return 0 if "the same" in verdict else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
