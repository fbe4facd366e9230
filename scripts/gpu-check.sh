#!/usr/bin/env bash
# The GPU check, for a machine with an NVIDIA GPU
# (sm_90: H100 / H200): configure with the CUDA backend required, build,
# run the CUDA tests, then the GPU benchmark (cuBLASLt GEMM TFLOP/s in
# f16 / bf16 / f32, the mlp, cnn and gpt training steps in fp32 / bf16 /
# fp16 + scaler) and PyTorch AMP on the same models in the same run, and
# write docs/benchmarks-gpu.md; then, in the time left, compute-sanitizer's
# memcheck and racecheck over test_cuda. The NCCL path:
# test_dist_cuda among the CUDA tests (collectives and a training through
# NCCL in a one-rank world, an MPI singleton), then `mpirun -np 1 ampc
# train --device cuda` with NCCL_DEBUG=INFO, which shows whether the CLI's
# run went through NCCL. Each phase has a time limit; the
# whole stays under 8 minutes.
#
#   scripts/gpu-check.sh [--build-only] [BUILD_DIR]     (default build-gpu)
#
# --build-only (or no GPU) stops after the build: what a machine without a
# GPU can check. Exit status: 0 when the build and the CUDA tests passed.
#
# On a GPU machine that cannot fetch packages: run scripts/gpu-deps.sh
# beforehand where it can, and take .gpu-deps along (zlib's headers, used
# when that image has none). Warnings do not stop the build there (another
# compiler may warn where CI's does not; CI keeps -Werror). When $OUT is set
# (a folder that the machine's runner brings back), the report and the
# logs are copied there at the end, whatever happened.
set -uo pipefail
cd "$(dirname "$0")/.."
build=build-gpu
build_only=0
for a in "$@"; do
  case "$a" in
    --build-only) build_only=1 ;;
    -*) echo "gpu-check: unknown option $a" >&2; exit 2 ;;
    *) build=$a ;;
  esac
done
start=$(date +%s)
phase() { echo "== $* ($(( $(date +%s) - start )) s)"; }
jobs=$(nproc)
out="$build/gpu-check"
mkdir -p "$out"
save_out() {
  [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ] || return 0
  cp docs/benchmarks-gpu.md "$out/tests.log" "$out/results.jsonl" "$OUT/" 2>/dev/null
  [ -f "$out/sanitizer.log" ] && tail -300 "$out/sanitizer.log" > "$OUT/sanitizer.log"
  for f in configure build; do [ -f "$out/$f.log" ] && tail -200 "$out/$f.log" > "$OUT/$f.log"; done
  return 0
}
trap save_out EXIT

# zlib: the machine's headers, else the carried ones beside the machine's
# libz.so.1 (scripts/gpu-deps.sh).
zlib_args=()
if ! echo '#include <zlib.h>' | cc -E -x c - > /dev/null 2>&1; then
  zlib_so=$(ldconfig -p 2>/dev/null | awk '/libz\.so\.1 .*x86-64/ {print $NF; exit}')
  if [ -f .gpu-deps/zlib/include/zlib.h ] && [ -n "$zlib_so" ]; then
    echo "gpu-check: no zlib.h here: .gpu-deps/zlib/include with $zlib_so"
    zlib_args=(-DZLIB_INCLUDE_DIR="$PWD/.gpu-deps/zlib/include" -DZLIB_LIBRARY="$zlib_so")
  else
    echo "gpu-check: no zlib.h here (and no .gpu-deps/zlib or libz.so.1): run scripts/gpu-deps.sh where" \
      "packages can be fetched and take .gpu-deps along" >&2
    exit 1
  fi
fi

phase "configure ($build, sm_90, AMPC_CUDA=ON)"
if ! timeout 120 cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DAMPC_WERROR=OFF -DAMPC_CUDA=ON \
     -DCMAKE_CUDA_ARCHITECTURES=90 "${zlib_args[@]}" > "$out/configure.log" 2>&1; then
  tail -30 "$out/configure.log"
  echo "gpu-check: configure failed"
  exit 1
fi
phase "build"
if ! timeout 240 cmake --build "$build" -j "$jobs" --target ampc_static ampc_shared ampc test_device \
     test_cuda test_cuda_train test_cuda_cli test_backend_ops test_profiler test_memory_categories \
     test_checkpoint_activations test_dist_cuda test_generate test_optim bench_cuda > "$out/build.log" 2>&1; then
  grep -E "error|Error" "$out/build.log" | head -30
  echo "gpu-check: build failed"
  exit 1
fi

gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -n 1)
if [ $build_only = 1 ] || [ -z "$gpu" ]; then
  [ -z "$gpu" ] && echo "gpu-check: no GPU (nvidia-smi found none): build only"
  phase "done (build only)"
  exit 0
fi
echo "GPU: $gpu"

phase "CUDA tests"
status=0
# test_device has 240 s; the CUDA test binaries (three split by subject,
# then test_backend_ops: every op row on the GPU against the CPU; then
# the profiler's event timing, the device allocator's categories,
# activation checkpointing on the device; the KV-cache
# generation and the optimizers' CPU-against-CUDA bits) share
# the 240 s test_cuda alone had, and all run even when one fails, so the
# log names every failure.
(cd "$build" || exit 1
 timeout 240 ./test_device || exit 1
 rc=0 end=$(( $(date +%s) + 240 ))
 for t in test_cuda test_cuda_train test_cuda_cli test_backend_ops test_profiler test_memory_categories \
          test_checkpoint_activations test_dist_cuda test_generate test_optim; do
   left=$(( end - $(date +%s) ))
   echo "== $t"
   if [ $left -le 0 ]; then
     echo "  FAIL $t: not run, the 240 s of the CUDA tests are spent"
     rc=1
     continue
   fi
   # 77: every test skipped (test_dist_cuda without MPI or NCCL in the
   # build: it says which), not a failure.
   timeout $left "./$t"
   r=$?
   [ $r -eq 0 ] || [ $r -eq 77 ] || rc=1
 done
 exit $rc) > "$out/tests.log" 2>&1
trc=$?
grep -E "^(==|ok|FAIL|  FAIL|  SKIP)|passed" "$out/tests.log"
if [ $trc -ne 0 ]; then
  echo "gpu-check: the CUDA tests failed (exit $trc)"
  status=1
fi

# A 1-rank training through NCCL, as a user starts one. NCCL_DEBUG=INFO
# makes NCCL print its "NCCL INFO" lines when the communicator is made:
# their absence means the run never reached NCCL.
phase "NCCL: mpirun -np 1 ampc train --device cuda"
nlog="$out/nccl.log"
if ! grep -q "ampc: NCCL: ON" "$out/configure.log"; then
  echo "gpu-check: NCCL: CMake found no NCCL (nccl.h + libnccl) in this toolkit: the NCCL path is not built"
  status=1
elif ! command -v mpirun > /dev/null; then
  echo "gpu-check: NCCL: no mpirun on this machine (Open MPI): no launched run; test_dist_cuda's result above" \
    "says whether the NCCL path ran as an MPI singleton"
else
  timeout 120 mpirun --allow-run-as-root -np 1 -x NCCL_DEBUG=INFO -x NCCL_DEBUG_SUBSYS=INIT \
    "$build/ampc" train --model gpt --data docs/cuda.md --steps 20 --batch 8 --context 64 --device cuda \
    > "$nlog" 2>&1
  nrc=$?
  if [ $nrc -ne 0 ]; then
    tail -20 "$nlog"
    echo "gpu-check: NCCL: the 1-rank training failed (exit $nrc; $nlog)"
    status=1
  elif grep -q "NCCL INFO" "$nlog"; then
    echo "gpu-check: NCCL: ok, the 1-rank training ran through NCCL ($(grep -c "NCCL INFO" "$nlog") NCCL INFO lines);" \
      "$(grep -m1 -o 'NCCL version [^ ]*' "$nlog")"
    tail -2 "$nlog"
  else
    tail -3 "$nlog"
    echo "gpu-check: NCCL: the training ran, but NCCL_DEBUG printed no NCCL INFO line: it did not go through" \
      "NCCL (test_dist_cuda's training covers the path)"
  fi
fi
[ -n "${OUT:-}" ] && [ -d "${OUT:-}" ] && [ -f "$nlog" ] && tail -100 "$nlog" > "$OUT/nccl.log"

phase "benchmark: ampc"
results="$out/results.jsonl"
timeout 150 "$build/bench_cuda" --gemm 4096,8192 --models mlp,cnn,gpt --steps 20 | tee "$results"
phase "benchmark: PyTorch"
if python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  timeout 150 python3 bench/torch_step.py --device cuda --models mlp,cnn,gpt --steps 20 --gemm 4096,8192 \
    | tee -a "$results"
else
  echo '{"impl": "torch", "error": "PyTorch with CUDA is not installed"}' | tee -a "$results"
fi

phase "report"
GPU="$gpu" TESTS="$out/tests.log" REV="$(git rev-parse --short HEAD 2>/dev/null || echo '?')" \
NVCC="$(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' | head -n 1)" \
  python3 - "$results" > docs/benchmarks-gpu.md <<'EOF'
import json, os, sys, time
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
tests = open(os.environ["TESTS"]).read().splitlines()
print("# ampc on the GPU\n")
print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.environ['GPU']}, CUDA {os.environ['NVCC'].replace('release ', '')},")
torch_v = next((r["version"] for r in rows if r.get("impl") == "torch" and "version" in r), "not run")
print(f"ampc {os.environ['REV']}, PyTorch {torch_v}. Written by scripts/gpu-check.sh.\n")
print("## CUDA tests\n")
summary, name = [], "test_device"
for l in tests:  # "== test_cuda" opens each CUDA test binary's part of the log
    if l.startswith("== "):
        name = l[3:]
    elif "passed," in l:
        summary.append(f"{name}: {l}")
print("\n".join(f"    {l}" for l in summary) or "    (no summary: see the build's gpu-check/tests.log)")
fails = [l.strip() for l in tests if "FAIL" in l]
if fails:
    print("\nFailures:\n")
    print("\n".join(f"    {l}" for l in fails[:40]))
print("\n## GEMM (n x n x n, TFLOP/s)\n")
print("| dtype | n | ampc (cuBLASLt) | PyTorch |")
print("|---|---|---|---|")
g = {}
for r in rows:
    if r.get("kind") == "gemm":
        g.setdefault((r.get("dtype"), r.get("n")), {})[r["impl"]] = r.get("tflops", r.get("error", "error"))
for (dt, n), v in g.items():
    print(f"| {dt} | {n} | {v.get('ampc', '-')} | {v.get('torch', '-')} |")
print("\n## Training step (median ms per step, each ending with reading the loss)\n")
print("mlp: 784-4096-4096-10, batch 256, SGD momentum. cnn: conv 1-32 and 32-64 3x3 with max pools,")
print("linear 3136-128-10, 28x28 images, batch 128, SGD momentum. gpt: 4 layers, width 256, 4 heads,")
print("context 128, batch 16, AdamW. fp16 runs with the grad scaler.\n")
print("| model | precision | ampc ms | PyTorch ms | ampc / PyTorch | ampc peak MB | PyTorch peak MB | ampc host syncs/step |"
      " ampc queue ms | launches/step | fwd / bwd / opt ms |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
s = {}
for r in rows:
    if "model" in r:
        s.setdefault((r["model"], r["precision"]), {})[r["impl"]] = r
for (m, p), v in s.items():
    a, t = v.get("ampc", {}), v.get("torch", {})
    am, tm = a.get("step_ms"), t.get("step_ms")
    ratio = f"{am / tm:.2f}" if am and tm else "-"
    phases = " / ".join(str(a.get(k, "-")) for k in ("fwd_ms", "bwd_ms", "opt_ms"))
    print(f"| {m} | {p} | {am if am else 'error'} | {tm if tm else '-'} | {ratio} | "
          f"{a.get('peak_mb', '-')} | {t.get('peak_mb', '-')} | {a.get('host_syncs_per_step', '-')} | "
          f"{a.get('queue_ms', '-')} | {a.get('launches_per_step', '-')} | {phases} |")
print("\nqueue ms: the host's time to queue one step (near the step's time: bound by the host's launches);")
print("fwd / bwd / opt: separate steps with a wait after each phase.")
errs = [r for r in rows if "error" in r]
if errs:
    print("\nErrors:\n")
    for r in errs:
        what = ", ".join(str(r[k]) for k in ("impl", "kind", "model", "precision", "dtype") if k in r)
        print(f"- {what}: {r['error']}")
EOF
# compute-sanitizer (on the GPU image, not here): memcheck and racecheck
# over test_cuda, the ops' test, in what is left of ~7.5 minutes; after the
# report, so running out of time loses nothing else. Findings are appended.
if command -v compute-sanitizer > /dev/null; then
  left=$(( 450 - ($(date +%s) - start) ))
  if [ $left -gt 60 ]; then
    phase "compute-sanitizer memcheck + racecheck (test_cuda, $left s)"
    m=0 r=0
    (cd "$build" && timeout $(( left / 2 )) compute-sanitizer --tool memcheck --error-exitcode 9 ./test_cuda) \
      > "$out/sanitizer.log" 2>&1 || m=$?
    (cd "$build" && timeout $(( left / 2 )) compute-sanitizer --tool racecheck --error-exitcode 9 ./test_cuda) \
      >> "$out/sanitizer.log" 2>&1 || r=$?
    {
      printf '\n## compute-sanitizer on test_cuda\n\n'
      printf 'memcheck exit %s, racecheck exit %s (0: clean; 9: errors found; 124: out of time).\n\n' "$m" "$r"
      grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Invalid|Race reported|Hazard" "$out/sanitizer.log" | head -20 |
        sed 's/^/    /'
    } >> docs/benchmarks-gpu.md
    [ $m -eq 0 ] && [ $r -eq 0 ] || status=1
  fi
fi
phase "done"
exit $status
