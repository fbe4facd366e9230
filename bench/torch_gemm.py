"""PyTorch's matmul on the GEMMs bench/bench_gemm.c times for ampc: square
n x n x n products and the three benchmark models' own products (forward,
dX, dW), on 1 and 2 threads, in bf16 and f32, timed the way bench_gemm
times ampc's (bench/run.sh joins the two JSON files into one table).

Timing, as bench_gemm's: per figure two untimed calls (warm-up), then
`inner` back-to-back calls make one sample of at least 2 ms (so a small
product is not a single timer reading), --reps samples; the JSON has the
best sample (bench_gemm's figure) and the median one, as GFLOP/s.

The products, as bench_gemm issues them (gemm.h's convention): C[M x N] =
act(op(A) op(B) + bias), A stored [K x M] when trans_a, B stored [N x K]
when trans_b (a transposed view here, as PyTorch's autograd passes it);
operands uniform in [-0.5, 0.5]. A forward with a bias runs torch.addmm
(what F.linear runs), then relu_ (in place) or gelu(tanh) (into a new
tensor, the addmm output kept as the pre-activation, as ampc's fused
epilogue keeps it) when the pass names one ("fwd+b+relu", "fwd+b+gelu");
dX and dW run torch.matmul. Every call writes into a
preallocated out= tensor, so neither side pays for page faults on a fresh
output: the comparison is of the kernels.

The shapes: by default bench_gemm's table (model_gemms() in bench_gemm.c,
copied below); with --shapes-json PATH, the "model_shapes" entries of
bench_gemm's --json output instead (model, gemm, pass, trans_a, trans_b, M,
N, K), so the two always time the same products.

usage: python bench/torch_gemm.py [--threads 1,2] [--sizes 512,1024,2048,4096]
           [--dtypes bf16,f32] [--reps 5] [--shapes-json PATH] [--no-shapes]
           [--json PATH]
Prints a line per figure and writes {"torch": version, "reps", "load_average_before",
"load_average_after", "square": [{"n", "threads", "dtype", "gflops",
"median_gflops"}], "model_shapes": [{"model", "gemm", "pass", "trans_a",
"trans_b", "M", "N", "K", "threads", "dtype", "gflops", "median_gflops"}]}.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

SAMPLE_MIN_S = 2e-3

# bench_gemm.c's model_gemms(): (model, layer, rows, in, out, first, bias,
# activation fused into the forward: 0 none, 1 relu, 2 gelu (tanh))
LAYERS = [
    ("mlp", "fc1", 256, 784, 4096, True, True, 1),
    ("mlp", "fc2", 256, 4096, 4096, False, True, 1),
    ("mlp", "fc3", 256, 4096, 10, False, True, 0),
    ("gpt", "q/k/v/o", 2048, 256, 256, False, True, 0),
    ("gpt", "mlp.fc1", 2048, 256, 1024, False, True, 2),
    ("gpt", "mlp.fc2", 2048, 1024, 256, False, True, 0),
    ("gpt", "head", 2048, 256, 96, False, False, 0),
    ("cnn", "fc1", 128, 3136, 128, False, True, 1),
    ("cnn", "fc2", 128, 128, 10, False, True, 0),
]


def default_shapes():
    """bench_gemm's add_linear(): forward, dX (not for a first layer), dW."""
    out = []
    for model, layer, rows, fin, fout, first, bias, act in LAYERS:
        fwd = "fwd" + ("+b" if bias else "") + {0: "", 1: "+relu", 2: "+gelu"}[act]
        out.append(dict(model=model, gemm=layer, **{"pass": fwd}, trans_a=False, trans_b=True,
                        M=rows, N=fout, K=fin))
        if not first:
            out.append(dict(model=model, gemm=layer, **{"pass": "dX"}, trans_a=False, trans_b=False,
                            M=rows, N=fin, K=fout))
        out.append(dict(model=model, gemm=layer, **{"pass": "dW"}, trans_a=True, trans_b=False,
                        M=fout, N=fin, K=rows))
    return out


def shapes_from_json(path):
    """The distinct products of bench_gemm's JSON "model_shapes", in order."""
    with open(path) as f:
        doc = json.load(f)
    seen, out = set(), []
    for s in doc.get("model_shapes", []):
        key = (s["model"], s["gemm"], s["pass"], bool(s["trans_a"]), bool(s["trans_b"]), s["M"], s["N"], s["K"])
        if key not in seen:
            seen.add(key)
            out.append(dict(model=key[0], gemm=key[1], **{"pass": key[2]}, trans_a=key[3], trans_b=key[4],
                            M=key[5], N=key[6], K=key[7]))
    return out


def operand(rows, cols, trans, dtype):
    """A [rows x cols] operand; stored transposed ([cols x rows]) when trans."""
    t = torch.rand(cols, rows) - 0.5 if trans else torch.rand(rows, cols) - 0.5
    t = t.to(dtype)
    return t.t() if trans else t


def product_fn(s, dtype):
    """A function running the product once, into a preallocated output."""
    M, N, K = s["M"], s["N"], s["K"]
    a = operand(M, K, s["trans_a"], dtype)
    b = operand(K, N, s["trans_b"], dtype)
    c = torch.empty(M, N, dtype=dtype)
    p = s["pass"]
    if "+b" in p:
        bias = (torch.rand(N) - 0.5).to(dtype)
        if "relu" in p:
            return lambda: torch.relu_(torch.addmm(bias, a, b, out=c))
        if "gelu" in p:
            return lambda: F.gelu(torch.addmm(bias, a, b, out=c), approximate="tanh")
        return lambda: torch.addmm(bias, a, b, out=c)
    if "relu" in p:
        return lambda: torch.relu_(torch.matmul(a, b, out=c))
    if "gelu" in p:
        return lambda: F.gelu(torch.matmul(a, b, out=c), approximate="tanh")
    return lambda: torch.matmul(a, b, out=c)


def sample(fn, inner):
    t0 = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - t0) / inner


def time_product(s, dtype, threads, reps):
    """(best, median) GFLOP/s of the product on `threads` threads."""
    torch.set_num_threads(threads)
    fn = product_fn(s, dtype)
    sample(fn, 1)
    t = sample(fn, 1)
    inner = max(1, min(1000, int(SAMPLE_MIN_S / t) + 1 if t > 0 else 1000))
    times = [sample(fn, inner) for _ in range(reps)]
    flops = 2.0 * s["M"] * s["N"] * s["K"]
    return flops / min(times) / 1e9, flops / statistics.median(times) / 1e9


def load_average():
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return None


def int_list(text):
    return [int(v) for v in text.split(",") if v]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--sizes", default="512,1024,2048,4096")
    ap.add_argument("--dtypes", default="bf16,f32")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--shapes-json", default="")
    ap.add_argument("--no-shapes", action="store_true")
    ap.add_argument("--json", default="torch_gemm.json")
    a = ap.parse_args()
    threads, sizes = int_list(a.threads), int_list(a.sizes)
    dtypes = {"bf16": torch.bfloat16, "f32": torch.float32}
    names = [d for d in a.dtypes.split(",") if d]
    bad = [d for d in names if d not in dtypes]
    if bad or a.reps < 1 or any(t < 1 for t in threads) or any(n < 1 for n in sizes):
        ap.error(f"bad option: dtypes must be among {list(dtypes)} (got {bad}), --reps, --threads "
                 "and --sizes must be >= 1")
    shapes = []
    if not a.no_shapes:
        try:
            shapes = shapes_from_json(a.shapes_json) if a.shapes_json else default_shapes()
        except (OSError, ValueError, KeyError) as e:
            print(f"torch_gemm: cannot read the shapes from {a.shapes_json}: {e!r}; using the built-in table",
                  file=sys.stderr)
            shapes = default_shapes()
    doc = {"torch": torch.__version__, "reps": a.reps, "load_average_before": load_average(),
           "square": [], "model_shapes": []}
    torch.manual_seed(0)
    for n in sizes:
        for nt in threads:
            line = f"torch matmul n {n:5d}, {nt} thread{'s' if nt > 1 else ' '}:"
            for d in names:
                s = dict(M=n, N=n, K=n, trans_a=False, trans_b=False, **{"pass": "square"})
                best, med = time_product(s, dtypes[d], nt, a.reps if n < 2048 else (a.reps + 1) // 2)
                doc["square"].append({"n": n, "threads": nt, "dtype": d, "gflops": round(best, 3),
                                      "median_gflops": round(med, 3)})
                line += f" {d} {best:.0f}"
            print(line, flush=True)
    for s in shapes:
        for nt in threads:
            line = (f"torch {s['model']} {s['gemm']} {s['pass']} {'T' if s['trans_a'] else 'N'}"
                    f"{'T' if s['trans_b'] else 'N'} {s['M']}x{s['N']}x{s['K']}, {nt} thread{'s' if nt > 1 else ' '}:")
            for d in names:
                best, med = time_product(s, dtypes[d], nt, a.reps)
                doc["model_shapes"].append({**s, "threads": nt, "dtype": d, "gflops": round(best, 3),
                                            "median_gflops": round(med, 3)})
                line += f" {d} {best:.0f}"
            print(line, flush=True)
    doc["load_average_after"] = load_average()
    with open(a.json, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
