#!/usr/bin/env bash
# Two builds of ampc against each other, interleaved: A B, B A, A B ...
# (one process each, the order flipped every round, so that a drift of the
# machine's load falls on both), and the medians over rounds. Made to
# compare builds that differ in a library (oneDNN 2.6 from Debian against
# 3.x from PyPI: docs/benchmarks.md), good for any two builds.
#
#   bench/builds_ab.sh BUILD_A BUILD_B [--rounds N] [--steps N] [--threads "1 2"]
#                      [--models cnn] [--precisions fp32,bf16] [--no-gemm] [--out DIR]
#
# Per round, build and thread count: bench_ampc_step --profile-table on
# the models (the step's median and its CPU time, and per step the
# profiler's self time of conv2d's forward, its backward with the input
# gradient, the backward of a first layer (weight gradient only) and of
# oneDNN's matmul kernel), then, unless --no-gemm, bench_gemm --reps 3
# --max-n 1024 (each side's GFLOP/s on the model shapes and square
# products, 1 and 2 threads). Prints one table of medians: A, B, B/A
# (below 1: B is faster for times, slower for GFLOP/s). The raw outputs
# stay in --out (default: a temporary directory, removed).
set -uo pipefail
[ $# -ge 2 ] || { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
a=$1 b=$2
shift 2
rounds=6 steps=20 threads="1 2" models=cnn precs=fp32,bf16 gemm=1 out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --precisions) precs=$2; shift 2 ;;
    --no-gemm) gemm=0; shift ;;
    --out) out=$2; shift 2 ;;
    *) echo "bench/builds_ab.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
for d in "$a" "$b"; do
  [ -x "$d/bench_ampc_step" ] || { echo "bench/builds_ab.sh: no $d/bench_ampc_step (build it)" >&2; exit 2; }
  [ $gemm = 0 ] || [ -x "$d/bench_gemm" ] || { echo "bench/builds_ab.sh: no $d/bench_gemm" >&2; exit 2; }
done
if [ -z "$out" ]; then
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi
mkdir -p "$out"
for d in "$a" "$b"; do echo "$d: $("$d/ampc" --version 2>/dev/null | sed -n 2p)"; done
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$rounds"); do
  order="A B"
  [ $((r % 2)) = 1 ] || order="B A"
  for s in $order; do
    d=$a
    [ $s = A ] || d=$b
    for t in $threads; do
      OMP_WAIT_POLICY=PASSIVE "$d/bench_ampc_step" --threads "$t" --steps "$steps" --warmup 3 --models "$models" \
        --precisions "$precs" --profile-table >"$out/step_${s}_t${t}_r$r.json" 2>"$out/step_${s}_t${t}_r$r.prof"
    done
    [ $gemm = 0 ] || OMP_WAIT_POLICY=PASSIVE "$d/bench_gemm" --reps 3 --max-n 1024 \
      --json "$out/gemm_${s}_r$r.json" >/dev/null 2>&1
  done
  echo "round $r of $rounds done, load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$out" <<'EOF'
import collections, glob, json, re, statistics, sys
out = sys.argv[1]
v = collections.defaultdict(list)  # (what, threads, measure, side) -> values
for f in glob.glob(out + '/step_*.json'):
    side, t = re.search(r'step_([AB])_t(\d+)_r', f).groups()
    for line in open(f):
        if line.startswith('{'):
            j = json.loads(line)
            cell = j['model'] + ' ' + j['precision']
            v[(cell, t, 'step ms', side)].append(j['step_ms'])
            v[(cell, t, 'step cpu ms', side)].append(j['cpu_ms'])
    for cell in open(f[:-5] + '.prof').read().split('== ')[1:]:
        name = ' '.join(cell.split()[:2])
        steps = int(re.search(r'(\d+) steps profiled', cell).group(1))
        per = collections.Counter()
        for line in cell.splitlines():
            m = re.match(r'(conv2d|oneDNN matmul)\s+(fwd|bwd|kernel)\s+(.*?)\s{2,}\d+\s+[\d.]+\s+([\d.]+)', line)
            if not m:
                continue
            op, ps, dts, self_ms = m.group(1), m.group(2), m.group(3), float(m.group(4))
            if op == 'oneDNN matmul':
                key = 'oneDNN matmul ms'
            elif ps == 'fwd':
                key = 'conv fwd ms'
            else:
                key = 'conv bwd dW only ms' if '-,' in dts else 'conv bwd ms'
            per[key] += self_ms / steps
        for k, x in per.items():
            v[(name, t, k, side)].append(x)
for f in glob.glob(out + '/gemm_*.json'):
    side = re.search(r'gemm_([AB])_r', f).group(1)
    j = json.load(open(f))
    for g in j['gemm_gflops']:
        for k in ('f32 onednn', 'bf16 onednn'):
            if g.get(k):
                v[('square n=%d' % g['n'], str(g['threads']), k + ' GFLOP/s', side)].append(g[k])
    for s in j['model_shapes']:
        for k in ('f32_onednn', 'bf16_onednn'):
            if s.get(k):
                v[('%s %s %s' % (s['model'], s['gemm'], s['pass']), str(s['threads']), k + ' GFLOP/s', side)].append(s[k])
    for t, d in j.get('model_shapes_total_ms', {}).items():
        for k in ('step_f32', 'step_bf16'):
            v[('all model GEMMs', t[-1], k + ' auto ms', side)].append(d[k]['auto'])
rows = sorted({k[:3] for k in v}, key=lambda k: (k[2].endswith('GFLOP/s'), k[0], k[1], k[2]))
print('%-30s %3s %-24s %9s %9s %6s %s' % ('what', 'thr', 'measure', 'A', 'B', 'B/A', 'rounds'))
for k in rows:
    x, y = v.get(k + ('A',)), v.get(k + ('B',))
    if x and y:
        mx, my = statistics.median(x), statistics.median(y)
        print('%-30s %3s %-24s %9.2f %9.2f %6.2f %d' % (k[0], k[1], k[2], mx, my, my / mx if mx else 0, min(len(x), len(y))))
EOF
