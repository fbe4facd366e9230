"""The training-step tables of bench/run.sh (bench/report.py's `steps`
command): ampc beside PyTorch default and tuned, the step's FLOPs and its
share of this machine's measured peak, the speed targets, and where ampc's
step time goes. The standard library only.

Input: the JSON lines of bench_ampc_step (--breakdown in some rounds) and
bench/torch_step.py (default and tuned), each with "round", and bench_gemm's
--json for the peaks (its "peak_gflops" and "bf16_default"), one or more:
run.sh measures them before and after the steps and each peak is the
higher of the two.

The sides: "ampc"; "torch", PyTorch as a user runs it by default (glibc's
malloc); "torch_tuned", the same step under PyTorch's CPU performance
tuning guide (jemalloc or tcmalloc preloaded, jemalloc's MALLOC_CONF;
the record's "setting": "tuned"). Ratios against PyTorch use the tuned
side where it ran.

The peak for a precision on T threads: fp32, the f32 FMA loop; bf16, the
loop of the instruction ampc's bf16 products run on here (bench_gemm's
default bf16 kernel: AMX TDPBF16PS when it is an AMX kernel, VDPBF16PS for
an AVX512-BF16 one, else the f32 FMA loop: bf16 widened to f32). Each is
the larger of the T-thread measurement and T x the 1-thread one: on a
shared machine the T-thread loop loses a core to other work more often
than the 1-thread one does, and the cores' capacity is what a step is
measured against.
"""
import json
import statistics

# The targets: (model, precision, what, at least). what: "peak" (% of the
# precision's peak), "torch_tuned" (PyTorch tuned's step over ampc's),
# "fp32_over" (ampc's fp32 step over this precision's).
TARGETS = [
    ("mlp", "bf16", "peak", 80), ("gpt", "bf16", "peak", 75), ("cnn", "bf16", "torch_tuned", 2.5),
    ("mlp", "bf16", "fp32_over", 1.9), ("gpt", "bf16", "fp32_over", 1.9),
    ("mlp", "fp32", "peak", 85), ("gpt", "fp32", "peak", 75),
]

# The breakdown's categories (bench/step_breakdown.h), in its order, and
# what the table calls them.
CATEGORIES = [("gemm", "GEMM"), ("attention", "attention"), ("elementwise", "elementwise"), ("norm", "norm"),
              ("loss", "loss"), ("reduction", "reduction"), ("pool", "pool"), ("embedding", "embedding"),
              ("shape", "shape"), ("cast", "casts"), ("other_ops", "other ops"), ("optimizer", "optimizer"),
              ("autograd", "autograd"), ("other", "other")]

SIDES = ("ampc", "torch", "torch_tuned")

INSTRUCTION = {"fma_f32": "f32 FMA", "vdpbf16ps": "VDPBF16PS", "amx_bf16": "AMX TDPBF16PS"}


def side_of(r):
    """The side a record belongs to: ampc, torch (default) or torch_tuned."""
    if r.get("impl") == "torch" and r.get("setting") == "tuned":
        return "torch_tuned"
    return r.get("impl")


def peaks(gemm_json, threads):
    """{"fp32": (GFLOP/s, instruction), "bf16": (..), "bf16_alt": (..) or
    None} for threads threads from bench_gemm's JSON (a dict, or a list of
    them: the highest of each); bf16_alt is the VDPBF16PS figure where bf16
    runs on AMX. {} without peaks."""
    runs = [g for g in (gemm_json if isinstance(gemm_json, list) else [gemm_json]) if g and g.get("peak_gflops")]
    if not runs:
        return {}

    def at(key):
        best = 0
        for g in runs:
            p = g["peak_gflops"]
            by_nt = dict(zip(p.get("threads", [1, 2]), p.get(key) or []))
            best = max(best, by_nt.get(threads, 0) or 0, threads * (by_nt.get(1, 0) or 0))
        return best
    kern = (runs[0].get("bf16_default") or "").lower()
    bf16_key = "amx_bf16" if "amx" in kern else "vdpbf16ps" if ("avx512bf16" in kern or "dot" in kern) else "fma_f32"
    out = {"fp32": (at("fma_f32"), INSTRUCTION["fma_f32"]), "bf16": (at(bf16_key), INSTRUCTION[bf16_key]),
           "bf16_alt": None}
    if bf16_key == "amx_bf16" and at("vdpbf16ps"):
        out["bf16_alt"] = (at("vdpbf16ps"), INSTRUCTION["vdpbf16ps"])
    return out


def pct_of_peak(gflop, ms, peak):
    """A step of gflop GFLOP in ms milliseconds as % of peak GFLOP/s."""
    if not gflop or not ms or not peak:
        return None
    return gflop / (ms / 1e3) / peak * 100


def cells(rows):
    """(side, model, precision) -> {"times", "rounds", "boxed", "peak",
    "gflop", "bd": [breakdown dicts], "alloc": [...], "allocator"}."""
    out = {}
    for r in rows:
        c = out.setdefault((side_of(r), r["model"], r["precision"]),
                           {"times": [], "rounds": [], "boxed": False, "peak": None, "gflop": None, "bd": [],
                            "bd_step": [], "alloc": [], "gemm_gflop": None, "gemm_kernel": [], "allocator": None})
        c["times"] += r.get("times_ms") or [r["step_ms"]]
        c["rounds"].append(r["step_ms"])
        c["boxed"] |= bool(r.get("timeboxed"))
        if r.get("peak_mb") is not None:
            c["peak"] = r["peak_mb"]
        if r.get("gflop"):
            c["gflop"] = r["gflop"]
            c["gemm_gflop"] = r.get("gemm_gflop")
        if r.get("breakdown_ms"):
            c["bd"].append(r["breakdown_ms"])
            c["bd_step"].append(r.get("profiled_step_ms"))
            c["gemm_kernel"].append(r.get("gemm_kernel_ms"))
        if r.get("alloc"):
            c["alloc"].append(r["alloc"])
        if r.get("allocator"):
            c["allocator"] = r["allocator"]
    return out


def med(c):
    return statistics.median(c["times"]) if c and c["times"] else None


def ratio(a, b):
    return f"{a / b:.2f}x" if a and b else "-"


def check_targets(cs, pk):
    """[(text, value text, met: True / False / None when not measured)]."""
    out = []
    for model, prec, what, want in TARGETS:
        a = med(cs.get(("ampc", model, prec)))
        if what == "peak":
            peak = (pk.get(prec) or (None, "?"))
            gflop = (cs.get(("ampc", model, prec)) or {}).get("gflop")
            v = pct_of_peak(gflop, a, peak[0])
            text = f"{model} {prec} step >= {want}% of the {prec} peak ({peak[1]}"
            text += f", {peak[0]:.0f} GFLOP/s)" if peak[0] else ")"
            vt = f"{v:.1f}%" if v is not None else "not measured"
            alt = pk.get(f"{prec}_alt")
            if v is not None and alt:
                vt += f" ({pct_of_peak(gflop, a, alt[0]):.0f}% of the {alt[1]} peak, {alt[0]:.0f} GFLOP/s)"
            out.append((text, vt, None if v is None else v >= want))
        elif what == "torch_tuned":
            t = med(cs.get(("torch_tuned", model, prec)))
            text = f"{model} {prec}: PyTorch tuned / ampc >= {want}x"
            v = t / a if t and a else None
            out.append((text, f"{v:.2f}x" if v else "not measured (no tuned PyTorch in this run)",
                        None if v is None else v >= want))
        else:
            f = med(cs.get(("ampc", model, "fp32")))
            text = f"{model}: ampc fp32 / {prec} >= {want}x"
            v = f / a if f and a else None
            out.append((text, f"{v:.2f}x" if v else "not measured", None if v is None else v >= want))
    return out


def table(rows, threads, gemm_json):
    """The step section's markdown lines."""
    cs = cells(rows)
    pk = peaks(gemm_json, threads)
    n_rounds = max((r.get("round", 1) for r in rows), default=0)
    torch_v = next((r.get("version") for r in rows if r.get("impl") == "torch"), None)
    tuned_alloc = next((c["allocator"] for k, c in cs.items() if k[0] == "torch_tuned" and c["allocator"]), None)
    has_tuned = any(k[0] == "torch_tuned" for k in cs)
    L = [f"### Training step, {threads} threads: ampc and PyTorch{' ' + torch_v if torch_v else ''} "
         f"(default and tuned) alternating, {n_rounds} round(s)", ""]
    L.append("ms: the median of every timed step of all rounds [the rounds' medians, lowest-highest]. PyTorch default:")
    L.append("glibc's malloc; tuned: PyTorch's CPU performance tuning guide, "
             + (f"allocator {tuned_alloc}" if tuned_alloc else "not run (no jemalloc / tcmalloc found)")
             + "; zero_grad(set_to_none=True) and the threads on both.")
    if pk:
        alt = f"; bf16 on {pk['bf16_alt'][1]} would be {pk['bf16_alt'][0]:.0f}" if pk.get("bf16_alt") else ""
        L.append(f"GFLOP/step: the op table's cost of a step's forward and backward ops; % of peak: ampc's step against "
                 f"this machine's measured peak on {threads} threads (fp32: {pk['fp32'][1]} {pk['fp32'][0]:.0f} "
                 f"GFLOP/s; bf16: {pk['bf16'][1]} {pk['bf16'][0]:.0f}{alt}).")
    else:
        L.append("GFLOP/step: the op table's cost of a step's forward and backward ops; % of peak: no peaks measured.")
    L.append("steps: timed steps per side over all rounds (*: time-boxed; (n rounds): the cell's time was spent after n).")
    L.append("")
    L.append("| model | precision | ampc ms | PyTorch default ms | PyTorch tuned ms | default/ampc | tuned/ampc "
             "| ampc fp32/this | GFLOP/step | ampc % of peak | steps ampc / default / tuned | ampc peak MB |")
    L.append("|---|---|---|---|---|---|---|---|---|---|---|---|")

    def cell(c):
        m = med(c)
        if m is None:
            return "-"
        if len(c["rounds"]) > 1:
            return f"{m:.1f} [{min(c['rounds']):.0f}-{max(c['rounds']):.0f}]"
        return f"{m:.1f}"

    def count(c):
        if not c:
            return "-"
        fewer = f" ({len(c['rounds'])} round{'s' if len(c['rounds']) > 1 else ''})" if len(c["rounds"]) < n_rounds else ""
        return f"{len(c['times'])}{'*' if c['boxed'] else ''}{fewer}"
    for model in ("mlp", "cnn", "gpt"):
        base = med(cs.get(("ampc", model, "fp32")))
        for p in ("fp32", "bf16", "fp16"):
            a, t, tt = (cs.get((s, model, p)) for s in SIDES)
            if not (a or t or tt):
                continue
            am, tm, ttm = med(a), med(t), med(tt)
            gflop = a and a["gflop"]
            pp = pct_of_peak(gflop, am, (pk.get(p) or (None,))[0])
            peak_mb = f"{a['peak']:.0f}" if a and a["peak"] is not None else "-"
            label = p + (" + scaler" if p == "fp16" else "")
            L.append(f"| {model} | {label} | {cell(a)} | {cell(t)} | {cell(tt)} | {ratio(tm, am)} | {ratio(ttm, am)} | "
                     f"{ratio(base, am)} | {f'{gflop:.2f}' if gflop else '-'} | {f'{pp:.1f}%' if pp is not None else '-'} | "
                     f"{count(a)} / {count(t)} / {count(tt)} | {peak_mb} |")
    L.append("")
    L.append("Targets (PyTorch: the tuned side; peaks as above):")
    L.append("")
    for text, vt, met in check_targets(cs, pk):
        if met is None:
            L.append(f"- {text}: {vt}")
        else:
            L.append(f"- {text}: {vt}: {'met' if met else '**not met**'}")
    if not has_tuned:
        L.append("")
        L.append("PyTorch tuned did not run: install jemalloc (Debian: apt-get install libjemalloc2, or "
                 "scripts/bench-deps.sh as root) and run again.")
    L += breakdown_table(cs)
    return L


def breakdown_table(cs):
    """Where ampc's step goes (bench_ampc_step --breakdown): ms per step and
    % of the profiled step per category, the medians over the rounds that
    profiled; [] when none did."""
    keys = [k for k in cs if k[0] == "ampc" and cs[k]["bd"]]
    if not keys:
        return []
    order = {m: i for i, m in enumerate(("mlp", "cnn", "gpt"))}
    porder = {p: i for i, p in enumerate(("fp32", "bf16", "fp16"))}
    keys.sort(key=lambda k: (order.get(k[1], 9), porder.get(k[2], 9)))

    def medcat(c, name):
        return statistics.median(b.get(name, 0.0) for b in c["bd"])
    shown = [(n, lbl) for n, lbl in CATEGORIES if any(medcat(cs[k], n) > 0.0005 for k in keys)]
    L = ["", "### Where ampc's step goes (bench_ampc_step --breakdown: profiled steps after the timed ones)", ""]
    L.append("ms per step (% of the profiled step), the median over the rounds that profiled. GEMM: matmul / linear /")
    L.append("conv2d forward and backward with their fused epilogues (GEMM GFLOP/s: their cost-model FLOPs over that")
    L.append("time); attention: scaled_dot_product_attention and softmax; optimizer: the update, the scaler's check and")
    L.append("update; autograd: the backward engine between ops; other: the step outside every op (zero_grad, reading")
    L.append("the loss, freeing temporaries). alloc: allocations per step x one cached alloc + free, an estimate that is")
    L.append("part of the other columns' time (fresh: allocations that took new memory).")
    L.append("")
    L.append("| model | precision | profiled ms | " + " | ".join(lbl for _, lbl in shown) + " | GEMM GFLOP/s | alloc |")
    L.append("|---|---|---|" + "---|" * len(shown) + "---|---|")
    for k in keys:
        c = cs[k]
        step = statistics.median(s for s in c["bd_step"] if s) if any(c["bd_step"]) else None
        parts = []
        for n, _ in shown:
            v = medcat(c, n)
            vs = f"{v:.1f}" if v >= 0.1 else f"{v:.2f}"
            parts.append(f"{vs} ({v / step * 100:.0f}%)" if step else vs)
        g = medcat(c, "gemm")
        gg = f"{c['gemm_gflop'] / (g / 1e3):.0f}" if c.get("gemm_gflop") and g else "-"
        al = "-"
        if c["alloc"]:
            a = c["alloc"][-1]
            al = f"{a['per_step']:.0f}/step, {a['est_ms']:.3f} ms, fresh {a['fresh_per_step']:.0f}"
        L.append(f"| {k[1]} | {k[2]} | {step:.1f} | " + " | ".join(parts) + f" | {gg} | {al} |"
                 if step else f"| {k[1]} | {k[2]} | - | " + " | ".join(parts) + f" | {gg} | {al} |")
    return L


def load_rows(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.startswith("{")]
