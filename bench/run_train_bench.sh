#!/usr/bin/env bash
# Training speed benchmark (trainer issue, "Speed"): target tokens/s of tnmt's trainer vs.
# PyTorch (Debian python3-torch 1.13) on the same model, the same fixed synthetic batch and the
# same thread count, each configuration in its own process; prints one table with the ratio.
# Target: tnmt >= 2x PyTorch on CPU, at 1 and 2 threads.
#
#   bench/run_train_bench.sh
#
# Both engines do their GEMMs in the same system OpenBLAS. tnmt chooses OpenBLAS's kernel
# family itself (kernels/cpu/gemm.cc: Debian's 0.3.21 misdetects recent Xeons as SSE3
# "Prescott"); the "torch" column runs PyTorch with that same OPENBLAS_CORETYPE, so the ratio
# compares the engines and not the kernel detection. STOCK=1 adds a "torch stock" column:
# PyTorch with OpenBLAS's own detection, i.e. what `python3 -c 'import torch'` gets here.
#
# The machine may be shared with a long training run (`tnmt train`, or processes named
# tnmt-train-bin). It is paused (SIGSTOP) for the measurements and always resumed (SIGCONT) by
# an EXIT trap, also on errors and Ctrl-C (only a SIGKILL of this script could leave it
# stopped: then run `kill -CONT <pid>` by hand; the pids are printed).
#
# Environment:
#   THREADS="1 2"   thread counts
#   ARGS="..."      flags for both engines (default: the issue's workload, small preset,
#                   128 sentences x 25/25 tokens, vocab 8000, 2 warm-up + 10 timed steps)
#   STOCK=0|1       also time PyTorch with OpenBLAS's own kernel choice (slow: ~3x)
#   DTYPES="float32" add bfloat16 for rows of tnmt's bfloat16 GEMMs (CPUs with AVX-512 BF16)
#                   against PyTorch's bfloat16 autocast (its matmuls in oneDNN's bfloat16)
#   PAUSE=1|0       pause the background training run while measuring
#   TORCH_PYTHON    interpreter with torch (default /usr/bin/python3)
#   WORK=DIR        where the logs go (default: a new temp dir)
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$(pwd)"

THREADS="${THREADS:-1 2}"
ARGS="${ARGS:---preset small --vocab 8000 --batch-sentences 128 --src-len 25 --tgt-len 25 --steps 10 --warmup 2 --dropout 0.1}"
STOCK="${STOCK:-0}"
DTYPES="${DTYPES:-float32}"
PAUSE="${PAUSE:-1}"
TORCH_PYTHON="${TORCH_PYTHON:-/usr/bin/python3}"
WORK="${WORK:-$(mktemp -d /tmp/tnmt_train_bench.XXXXXX)}"
mkdir -p "$WORK"
echo "== work dir: $WORK"
echo "== workload: $ARGS"

bazel build //bench:train_bench
BIN="$(bazel info bazel-bin 2>/dev/null)/bench/train_bench"

# --- pause the background training run ------------------------------------------------------
PAUSED=()
resume() {
  local pid
  for pid in "${PAUSED[@]+"${PAUSED[@]}"}"; do
    if kill -CONT "$pid" 2>/dev/null; then
      echo "== resumed background training pid $pid (kill -CONT)"
    else
      echo "== background training pid $pid is gone (nothing to resume)"
    fi
  done
  PAUSED=()
}
trap resume EXIT
trap 'echo "== interrupted"; exit 130' INT TERM HUP

if [[ "$PAUSE" == 1 ]]; then
  # pgrep -f also matches any shell whose command line merely mentions the name; keep only
  # processes whose program (argv[0]) is tnmt-train-bin, or tnmt with `train` as its command.
  for pid in $(pgrep -f 'tnmt-train-bin|tnmt train' || true); do
    [[ "$pid" == "$$" ]] && continue
    mapfile -t argv < <(tr '\0' '\n' < "/proc/$pid/cmdline" 2>/dev/null || true)
    prog="$(basename -- "${argv[0]:-x}")"
    [[ "$prog" == tnmt-train-bin || ( "$prog" == tnmt && "${argv[1]:-}" == train ) ]] || continue
    if kill -STOP "$pid" 2>/dev/null; then
      PAUSED+=("$pid")
      echo "== paused background training pid $pid (kill -STOP): $(tr '\0' ' ' < "/proc/$pid/cmdline")"
    fi
  done
  [[ ${#PAUSED[@]} -gt 0 ]] || echo "== no background training (tnmt train, tnmt-train-bin) running: nothing paused"
  sleep 2  # let its threads actually stop before the first timing
fi

LOAD_START="$(cut -d' ' -f1-3 /proc/loadavg)"
echo "== load average at start: $LOAD_START"

run() {  # name threads command...
  local name="$1" t="$2"
  shift 2
  echo "== $name, $t thread(s); load: $(cut -d' ' -f1-3 /proc/loadavg)"
  "$@" | tee "$WORK/$name.t$t.log"
}

CORE=""
for t in $THREADS; do
  for d in $DTYPES; do
    x=""  # log name suffix: none for float32
    [[ "$d" == float32 ]] || x="_$d"
    # shellcheck disable=SC2086
    run "tnmt$x" "$t" "$BIN" --threads "$t" --dtype "$d" $ARGS
    [[ -n "$CORE" ]] || CORE="$(sed -n 's/^RESULT .*blas_core=\([^ ]*\).*/\1/p' "$WORK/tnmt$x.t$t.log")"
    # shellcheck disable=SC2086
    (cd "$WORK" && run "torch$x" "$t" env OPENBLAS_CORETYPE="$CORE" OPENBLAS_NUM_THREADS="$t" OMP_NUM_THREADS="$t" \
        "$TORCH_PYTHON" "$REPO/bench/torch_train_peer.py" --threads "$t" --dtype "$d" $ARGS)
    if [[ "$STOCK" == 1 ]]; then
      # shellcheck disable=SC2086
      (cd "$WORK" && run "torch_stock$x" "$t" env -u OPENBLAS_CORETYPE OPENBLAS_NUM_THREADS="$t" OMP_NUM_THREADS="$t" \
          "$TORCH_PYTHON" "$REPO/bench/torch_train_peer.py" --threads "$t" --dtype "$d" $ARGS)
    fi
  done
done

LOAD_END="$(cut -d' ' -f1-3 /proc/loadavg)"
echo "== load average at end: $LOAD_END"
resume

# --- one table ----------------------------------------------------------------------------
"$TORCH_PYTHON" - "$WORK" "$THREADS" "$LOAD_START" "$LOAD_END" "$ARGS" "$DTYPES" <<'EOF'
import math, os, sys
work, threads, load_start, load_end, args = sys.argv[1], sys.argv[2].split(), sys.argv[3], sys.argv[4], sys.argv[5]
dtypes = sys.argv[6].split()
GOAL = 2.0

def result(name, t):
    path = f"{work}/{name}.t{t}.log"
    if not os.path.exists(path):
        return None
    for line in open(path):
        if line.startswith("RESULT "):
            return dict(kv.split("=", 1) for kv in line.split()[1:])
    return None

def suffix(d):
    return "" if d == "float32" else "_" + d

stock = any(result("torch_stock" + suffix(d), t) for t in threads for d in dtypes)
print()
print(f"Workload: {args}")
print("tokens/s = target tokens per step x timed steps / wall time of the timed steps "
      "(zero grads + forward/backward + Adam).")
hdr = f"{'threads':>7} {'dtype':>8} {'tnmt tok/s':>11} {'torch tok/s':>12} {'ratio':>7} {'ceiling':>8}"
if stock:
    hdr += f" {'torch stock tok/s':>18} {'ratio':>7}"
hdr += f" {'tnmt s/step':>12} {'torch s/step':>13} {'tnmt RSS':>9} {'torch RSS':>10} {'cores t/p':>10}"
print(hdr)
print("-" * len(hdr))
ok = True
for t, d in ((t, d) for t in threads for d in dtypes):
    x = suffix(d)
    a, b, s = result("tnmt" + x, t), result("torch" + x, t), result("torch_stock" + x, t)
    if not a or not b:
        print(f"{t:>7} {d:>8} missing results (see {work})")
        ok = False
        continue
    ta, tb = float(a["tokens_per_s"]), float(b["tokens_per_s"])
    # The ratio tnmt would reach if its step were nothing but its matrix products at the rate of
    # one large product through the same GEMM (train_bench's gemm_gflop / gemm_peak_gflops).
    floor = float(a["gemm_gflop"]) / float(a["gemm_peak_gflops"]) if "gemm_gflop" in a else 0.0
    ceiling = f"{float(b['s_per_step']) / floor:>7.2f}x" if floor > 0 else f"{'-':>8}"
    row = f"{t:>7} {d:>8} {ta:>11.1f} {tb:>12.1f} {ta / tb:>6.2f}x {ceiling}"
    if stock:
        row += (f" {float(s['tokens_per_s']):>18.1f} {ta / float(s['tokens_per_s']):>6.2f}x" if s
                else f" {'-':>18} {'-':>7}")
    row += (f" {float(a['s_per_step']):>12.3f} {float(b['s_per_step']):>13.3f}"
            f" {a['peak_rss_mib']:>5} MiB {b['peak_rss_mib']:>6} MiB {a['cores']:>4}/{b['cores']:<4}")
    print(row)
core = (result("tnmt" + suffix(dtypes[0]), threads[0]) or {}).get("blas_core", "?")
print(f"ratio = tnmt / torch; goal >= {GOAL}x. 'torch': PyTorch with OPENBLAS_CORETYPE={core} "
      "(the OpenBLAS kernels tnmt chose).")
print("ceiling = torch s/step / (the step's GEMM GFLOP / tnmt's GEMM GFLOP/s on one 2048^3 product, same dtype "
      "and threads): the most any trainer doing these products with this GEMM could reach.")
if stock:
    print("'torch stock': PyTorch with OpenBLAS's own kernel detection (no OPENBLAS_CORETYPE).")
if "bfloat16" in dtypes:
    print("bfloat16: tnmt's linears with bfloat16 GEMM operands and float32 sums (everything else float32); "
          "torch: the forward under torch.autocast('cpu', torch.bfloat16).")
print("'cores t/p': CPU seconds / wall seconds of the timed steps, tnmt/torch (~threads = it had its cores).")
print(f"load average (1/5/15 min) at start: {load_start}; at end: {load_end}")
# The check that both compute the same thing: the first (untimed) step's loss per token.
for t in threads[:1]:
    a, b = result("tnmt" + suffix(dtypes[0]), t), result("torch" + suffix(dtypes[0]), t)
    if a and b:
        la, lb = float(a["loss0"]), float(b["loss0"])
        vocab = 8000
        for i, w in enumerate(args.split()):
            if w == "--vocab":
                vocab = int(args.split()[i + 1])
        lnv = math.log(vocab)
        same = abs(la - lb) < 0.05 * lnv and all(0.9 * lnv < x < 1.3 * lnv for x in (la, lb))
        print(f"initial loss/token (first warm-up step, dropout on): tnmt {la:.4f}, torch {lb:.4f}, "
              f"ln V {lnv:.4f}: {'same range, OK' if same else 'MISMATCH'}")
        ok = ok and same
sys.exit(0 if ok else 1)
EOF
echo "(logs: $WORK)"
