#!/usr/bin/env python3
"""gen_amp.py - PyTorch reference for tests/test_amp_reference.c.

Writes tests/reference/amp_ref.h with three groups of references taken
from PyTorch itself (>= 2.3; PyTorch is never a build or test dependency):

(a) Autocast output dtypes. Every ampc op (src/ops/op_list.h) is run as its
    PyTorch equivalent under torch.autocast("cpu", dtype=bf16 / f16) with
    f32, bf16, f16 and mixed inputs, and the result dtype (or an error) is
    recorded. The same is done for CUDA autocast without a GPU: the inputs
    are FakeTensors on device "cuda" (their dispatch keys include
    AutocastCUDA, so the real AutocastCUDA kernels of autocast_mode.cpp
    run; only the compute is faked). Each op's category per device is
    written by hand below from aten/src/ATen/autocast_mode.cpp /
    autocast_mode.h (PyTorch's "Autocast Op Reference"), and the script
    checks it against what PyTorch did: plan the inputs' dtypes by the
    category, run the op without autocast on the planned dtypes, and the
    result dtype must equal the one measured under autocast, for every
    case. It also asks the dispatcher whether the op has an Autocast kernel.
(b) Grad-scaler sequences: torch.amp.GradScaler("cpu", ...) driving
    torch.optim.SGD / Adam on small parameters whose gradients are set
    through a real backward of scaler.scale(sum(p * c)) (so grad = c), with
    inf / -inf / NaN / overflowing steps, several configurations,
    accumulation, two optimizers, update(new_scale), explicit unscale with
    clipping and a state_dict reload into a fresh scaler. After every
    iteration: scale, growth tracker, parameters; after every step:
    whether it was skipped.
(c) 30 steps of a 16-32-4 ReLU MLP (batch 8, cross-entropy, SGD lr 0.1
    momentum 0.9) under torch.autocast("cpu", float16) + GradScaler("cpu"):
    initial weights, data, and the loss / scale / skip of every step; once
    with the scaler's defaults and once with an init scale at which the
    f16 backward overflows (real skips, backoffs and regrowth).

Run from anywhere:  python3 tests/reference/gen_amp.py
"""
import math
import os
import sys

import torch
import torch.nn.functional as F

try:
    from torch._subclasses.fake_tensor import FakeTensorMode
except ImportError:  # pragma: no cover
    FakeTensorMode = None

F32, F16, BF16, I64 = torch.float32, torch.float16, torch.bfloat16, torch.int64
CNAME = {F32: "AMP_F32", F16: "AMP_F16", BF16: "AMP_BF16", I64: "AMP_I64"}
SHORT = {F32: "f32", F16: "f16", BF16: "bf16", I64: "i64"}
ERR = "error"
# PyTorch's op itself rejects these input dtypes, autocast or not (e.g.
# layer_norm with an f32 input and bf16 weight): not an autocast matter.
OP_REJECTS = "op rejects"

out = []  # the header's text, piece by piece


def fmt_float(v):
    if math.isnan(v):
        return "NAN"
    if math.isinf(v):
        return "INFINITY" if v > 0 else "-INFINITY"
    return "%.9g" % v


def fmt_double(v):
    if math.isinf(v):
        return "INFINITY" if v > 0 else "-INFINITY"
    return repr(float(v))  # shortest text that reads back as the same double


def c_array(ctype, name, vals, fmt, per_line=6):
    body = ",\n    ".join(", ".join(fmt(x) for x in vals[i:i + per_line])
                          for i in range(0, len(vals), per_line))
    out.append("static const %s %s[%d] = {\n    %s};\n" % (ctype, name, max(len(vals), 1),
                                                           body if vals else "0"))


# =====================================================================
# (a) autocast dtypes
# =====================================================================

# Categories, per device, as PyTorch assigns them. From
# aten/src/ATen/autocast_mode.cpp (TORCH_LIBRARY_IMPL(aten, AutocastCPU))
# and autocast_mode.h (AT_FORALL_LOWER_PRECISION_FP, AT_FORALL_FP32,
# AT_FORALL_FP32_SET_OPT_DTYPE, AT_FORALL_PROMOTE for CUDA).
#   CPU  lower: conv2d, mm/matmul, linear, scaled_dot_product_attention;
#        fp32: mse_loss, cross_entropy_loss;
#        promote: cat, stack, index_copy.  Everything else ampc has: unlisted.
#   CUDA lower: conv2d, matmul, linear, scaled_dot_product_attention;
#        fp32: exp, log, pow, layer_norm, mse_loss (and nll_loss);
#        fp32_set_opt_dtype (ampc: fp32_out): sum, softmax, log_softmax.
#        cat is not listed on CUDA (unlisted there).
#   cross_entropy on CUDA has no AutocastCUDA kernel: the composite
#   cross_entropy_loss runs log_softmax (fp32_set_opt_dtype) then nll_loss
#   (fp32), so the result is f32 whatever the logits; ampc fuses it and
#   gives it "fp32", which yields the same dtype.
NONE, LOWER, FP32, FP32_OUT, PROMOTE = "NONE", "LOWER", "FP32", "FP32_OUT", "PROMOTE"
CATEGORY = {
    # op:            (cpu,     cuda,     aten ops that carry the autocast kernel)
    "add":           (NONE,    NONE,     ["aten::add.Tensor"]),
    "sub":           (NONE,    NONE,     ["aten::sub.Tensor"]),
    "mul":           (NONE,    NONE,     ["aten::mul.Tensor"]),
    "div":           (NONE,    NONE,     ["aten::div.Tensor"]),
    "add_scalar":    (NONE,    NONE,     ["aten::add.Scalar"]),
    "mul_scalar":    (NONE,    NONE,     ["aten::mul.Scalar"]),
    "div_scalar":    (NONE,    NONE,     ["aten::div.Scalar"]),
    "neg":           (NONE,    NONE,     ["aten::neg"]),
    "relu":          (NONE,    NONE,     ["aten::relu"]),
    "gelu":          (NONE,    NONE,     ["aten::gelu"]),
    "tanh":          (NONE,    NONE,     ["aten::tanh"]),
    "sigmoid":       (NONE,    NONE,     ["aten::sigmoid"]),
    "silu":          (NONE,    NONE,     ["aten::silu"]),
    "exp":           (NONE,    FP32,     ["aten::exp"]),
    "log":           (NONE,    FP32,     ["aten::log"]),
    "pow":           (NONE,    FP32,     ["aten::pow.Tensor_Scalar"]),
    "matmul":        (LOWER,   LOWER,    ["aten::matmul"]),
    "linear":        (LOWER,   LOWER,    ["aten::linear"]),
    "sum":           (NONE,    FP32_OUT, ["aten::sum", "aten::sum.dim_IntList"]),
    "mean":          (NONE,    NONE,     ["aten::mean", "aten::mean.dim"]),
    "softmax":       (NONE,    FP32_OUT, ["aten::softmax.int"]),
    "log_softmax":   (NONE,    FP32_OUT, ["aten::log_softmax.int"]),
    "cross_entropy": (FP32,    FP32,     ["aten::cross_entropy_loss"]),
    "mse_loss":      (FP32,    FP32,     ["aten::mse_loss"]),
    "layer_norm":    (NONE,    FP32,     ["aten::layer_norm"]),
    "embedding":     (NONE,    NONE,     ["aten::embedding"]),
    "dropout":       (NONE,    NONE,     ["aten::dropout"]),
    "conv2d":        (LOWER,   LOWER,    ["aten::conv2d"]),
    "max_pool2d":    (NONE,    NONE,     ["aten::max_pool2d"]),
    "avg_pool2d":    (NONE,    NONE,     ["aten::avg_pool2d"]),
    "reshape":       (NONE,    NONE,     ["aten::reshape"]),
    "permute":       (NONE,    NONE,     ["aten::permute"]),
    "cat":           (PROMOTE, NONE,     ["aten::cat"]),
    "narrow":        (NONE,    NONE,     ["aten::narrow"]),
    "to":            (NONE,    NONE,     ["aten::to.dtype"]),
    "argmax":        (NONE,    NONE,     ["aten::argmax"]),
    "scaled_dot_product_attention":
                     (LOWER,   LOWER,    ["aten::scaled_dot_product_attention"]),
}
# Composite on CUDA (no AutocastCUDA kernel of its own; see above).
COMPOSITE_CUDA = {"cross_entropy"}

# Each op's inputs, in ampc's argument order: "f" a float tensor of the
# given shape, "i" an int64 tensor (labels / indices). The C test builds
# the same shapes (test_amp_reference.c, make_case_inputs).
# variant: linear/layer_norm 0 = with weight+bias, 1 = without; sum/mean
# 0 = all elements, 1 = over dim 1; cat 0 = two inputs, 1 = three;
# to: the target dtype.
def spec(op, variant):
    s23 = [("f", (2, 3))]
    two = [("f", (2, 3)), ("f", (2, 3))]
    table = {
        "add": two, "sub": two, "mul": two, "div": two, "mse_loss": two,
        "add_scalar": s23, "mul_scalar": s23, "div_scalar": s23, "neg": s23,
        "relu": s23, "gelu": s23, "tanh": s23, "sigmoid": s23, "silu": s23, "exp": s23,
        "log": s23, "pow": s23, "softmax": s23, "log_softmax": s23,
        "dropout": s23, "reshape": s23, "argmax": s23, "to": s23, "narrow": s23,
        "sum": s23, "mean": s23,
        "matmul": [("f", (2, 3)), ("f", (3, 4))],
        "linear": [("f", (2, 3)), ("f", (4, 3)), ("f", (4,))] if variant == 0
        else [("f", (2, 3)), ("f", (4, 3))],
        "cross_entropy": [("f", (4, 5)), ("i", (4,))],
        "layer_norm": [("f", (2, 4)), ("f", (4,)), ("f", (4,))] if variant == 0
        else [("f", (2, 4))],
        "embedding": [("f", (5, 3)), ("i", (2, 2))],
        "conv2d": [("f", (1, 2, 5, 5)), ("f", (3, 2, 3, 3)), ("f", (3,))],
        "max_pool2d": [("f", (1, 2, 4, 4))],
        "avg_pool2d": [("f", (1, 2, 4, 4))],
        "permute": [("f", (2, 3, 4))],
        "cat": two if variant == 0 else [("f", (2, 3))] * 3,
        "scaled_dot_product_attention": [("f", (2, 3, 4))] * 3,
    }
    return table[op]


def torch_call(op, variant, t):
    """The PyTorch equivalent of the ampc op on inputs t (ampc's order)."""
    if op == "add": return torch.add(t[0], t[1])
    if op == "sub": return torch.sub(t[0], t[1])
    if op == "mul": return torch.mul(t[0], t[1])
    if op == "div": return torch.div(t[0], t[1])
    if op == "add_scalar": return torch.add(t[0], 2.5)
    if op == "mul_scalar": return torch.mul(t[0], 2.5)
    if op == "div_scalar": return torch.div(t[0], 2.5)
    if op == "neg": return torch.neg(t[0])
    if op == "relu": return torch.relu(t[0])
    if op == "gelu": return F.gelu(t[0])
    if op == "tanh": return torch.tanh(t[0])
    if op == "sigmoid": return torch.sigmoid(t[0])
    if op == "silu": return F.silu(t[0])
    if op == "exp": return torch.exp(t[0])
    if op == "log": return torch.log(t[0])
    if op == "pow": return torch.pow(t[0], 2.0)
    if op == "matmul": return torch.matmul(t[0], t[1])
    if op == "linear": return F.linear(t[0], t[1], t[2] if variant == 0 else None)
    if op == "sum": return t[0].sum() if variant == 0 else t[0].sum(dim=1)
    if op == "mean": return t[0].mean() if variant == 0 else t[0].mean(dim=1)
    if op == "softmax": return torch.softmax(t[0], -1)
    if op == "log_softmax": return torch.log_softmax(t[0], -1)
    if op == "cross_entropy": return F.cross_entropy(t[0], t[1])
    if op == "mse_loss": return F.mse_loss(t[0], t[1])
    if op == "layer_norm":
        return F.layer_norm(t[0], (4,), t[1] if variant == 0 else None,
                            t[2] if variant == 0 else None, 1e-5)
    if op == "embedding": return F.embedding(t[1], t[0])
    if op == "dropout": return torch.dropout(t[0], 0.5, True)
    if op == "conv2d": return F.conv2d(t[0], t[1], t[2], stride=1, padding=1)
    if op == "max_pool2d": return F.max_pool2d(t[0], 2)
    if op == "avg_pool2d": return F.avg_pool2d(t[0], 2)
    if op == "reshape": return t[0].reshape(3, 2)
    if op == "permute": return t[0].permute(2, 0, 1)
    if op == "cat": return torch.cat(t, 0)
    if op == "narrow": return t[0].narrow(1, 1, 2)
    if op == "to": return t[0].to(variant)
    if op == "argmax": return torch.argmax(t[0], 1)
    if op == "scaled_dot_product_attention":
        return F.scaled_dot_product_attention(t[0], t[1], t[2], is_causal=True)
    raise KeyError(op)


def make_inputs(op, variant, dts, device):
    ts = []
    g = torch.Generator().manual_seed(7)
    fi = 0
    for kind, shape in spec(op, variant):
        if kind == "i":
            hi = 5 if op in ("cross_entropy", "embedding") else 2
            ts.append(torch.randint(0, hi, shape, generator=g).to(device))
        else:
            v = torch.rand(shape, generator=g) + 0.5  # positive: log is defined
            ts.append(v.to(dts[fi]).to(device))
            fi += 1
    return ts


def float_patterns(k):
    """Input dtype patterns for k float inputs: uniform ones, then mixes."""
    pats = [[F32] * k, [BF16] * k, [F16] * k]
    if k == 2:
        pats += [[BF16, F32], [F32, BF16], [F16, F32], [F32, F16], [F16, BF16]]
    elif k == 3:
        pats += [[BF16, F32, F32], [F32, BF16, BF16], [F16, F32, F32], [F32, F16, F16],
                 [F16, F16, F32]]
    return pats


def variants(op):
    if op in ("linear", "layer_norm", "sum", "mean", "cat"):
        return [0, 1]
    if op == "to":
        return [F32, F16, BF16]
    return [0]


def run(op, variant, dts, device, at):
    """Result dtype of op under autocast(device, at) (at None: no autocast)."""
    try:
        if device == "cpu":
            ts = make_inputs(op, variant, dts, "cpu")
            if at is None:
                return torch_call(op, variant, ts).dtype
            with torch.autocast("cpu", dtype=at):
                return torch_call(op, variant, ts).dtype
        # CUDA without a GPU: FakeTensors carry AutocastCUDA in their keys.
        with FakeTensorMode(allow_non_fake_inputs=True):
            ts = make_inputs(op, variant, dts, "cuda")
            if at is None:
                return torch_call(op, variant, ts).dtype
            prev = (torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda"))
            torch.set_autocast_enabled("cuda", True)
            torch.set_autocast_dtype("cuda", at)
            torch.autocast_increment_nesting()
            try:
                return torch_call(op, variant, ts).dtype
            finally:
                torch.set_autocast_enabled("cuda", prev[0])
                torch.set_autocast_dtype("cuda", prev[1])
                if torch.autocast_decrement_nesting() == 0:
                    torch.clear_autocast_cache()
    except RuntimeError:
        return ERR


def plan(cat, at, dts):
    """ampc's planning rule (and PyTorch's cached_cast / prioritize)."""
    if cat == LOWER:
        return [at if d != I64 else d for d in dts]
    if cat in (FP32, FP32_OUT):
        return [F32 if d != I64 else d for d in dts]
    if cat == PROMOTE:
        widest = at
        for d in dts:
            if d == I64:
                continue
            if widest == F32 or d == F32:
                widest = F32
            elif d != widest:
                return None  # PyTorch: "Unexpected floating ScalarType in prioritize"
        return [widest if d != I64 else d for d in dts]
    return list(dts)


def all_dtypes(op, variant, fdts):
    """Full input dtype list (floats from fdts, ints as I64) in ampc order."""
    res, fi = [], 0
    for kind, _ in spec(op, variant):
        if kind == "i":
            res.append(I64)
        else:
            res.append(fdts[fi])
            fi += 1
    return res


def gen_autocast():
    cases = []
    problems = []
    kernel_key = {"cpu": "AutocastCPU", "cuda": "AutocastCUDA"}
    for op, (cpu_cat, cuda_cat, aten_ops) in CATEGORY.items():
        for dev, cat in (("cpu", cpu_cat), ("cuda", cuda_cat)):
            has = any(torch._C._dispatch_has_kernel_for_dispatch_key(a, kernel_key[dev])
                      for a in aten_ops)
            want = cat != NONE and not (dev == "cuda" and op in COMPOSITE_CUDA)
            if has != want:
                problems.append("%s on %s: category %s but Autocast kernel registered: %s"
                                % (op, dev, cat, has))
        for variant in variants(op):
            k = sum(1 for kind, _ in spec(op, variant) if kind == "f")
            for fdts in float_patterns(k):
                dts = all_dtypes(op, variant, fdts)
                for dev, cat in (("cpu", cpu_cat), ("cuda", cuda_cat)):
                    for at in (BF16, F16):
                        got = run(op, variant, fdts, dev, at)
                        # The model check: plan by the category, run
                        # without autocast on the planned dtypes.
                        p = plan(cat, at, dts)
                        if p is None:
                            pred = ERR
                        else:
                            pf = [d for d in p if d != I64]
                            pred = run(op, variant, pf, dev, None)
                        if got != pred:
                            problems.append("%s v%s %s on %s at %s: PyTorch %s, category %s "
                                            "predicts %s" % (op, variant, [SHORT[d] for d in dts],
                                                             dev, SHORT[at], got, cat, pred))
                        if got == ERR and run(op, variant, fdts, dev, None) == ERR:
                            got = OP_REJECTS
                        cases.append((op, variant, dev, at, dts, got))
    if problems:
        sys.exit("category table disagrees with PyTorch:\n  " + "\n  ".join(problems))

    out.append("\n/* ---- (a) autocast ---- */\n")
    out.append("/* Categories per op: cpu, cuda (AMP_CAST_*). Checked by the generator\n"
               " * against PyTorch's dispatcher and measured dtypes. */\n")
    out.append("typedef struct {\n    const char *op;\n    int cpu, cuda;\n} amp_ref_category;\n")
    rows = ['    {"%s", AMP_CAST_%s, AMP_CAST_%s}' % (op, c[0], c[1]) for op, c in CATEGORY.items()]
    out.append("static const amp_ref_category amp_ref_categories[%d] = {\n%s};\n"
               % (len(rows), ",\n".join(rows)))
    out.append("/* A case: op (variant: see gen_amp.py spec()) run on inputs of dtypes\n"
               " * in[0..n) under autocast on dev with dtype at; out is the dtype PyTorch\n"
               " * returned, -1 when autocast made PyTorch raise, -2 when PyTorch's op\n"
               " * rejects these dtypes even without autocast. cuda cases were measured\n"
               " * with FakeTensors through PyTorch's real AutocastCUDA kernels. */\n")
    out.append("typedef struct {\n    const char *op;\n    int variant, dev, at, n;\n"
               "    int in[3];\n    int out;\n} amp_ref_cast_case;\n")
    rows = []
    for op, variant, dev, at, dts, got in cases:
        v = CNAME[variant] if isinstance(variant, torch.dtype) else str(variant)
        ins = ", ".join(CNAME[d] for d in dts)
        rows.append('    {"%s", %s, %s, %s, %d, {%s}, %s}'
                    % (op, v, "AMP_CPU" if dev == "cpu" else "AMP_CUDA", CNAME[at], len(dts),
                       ins, {ERR: "-1", OP_REJECTS: "-2"}.get(got) or CNAME[got]))
    out.append("static const amp_ref_cast_case amp_ref_cast_cases[%d] = {\n%s};\n"
               % (len(rows), ",\n".join(rows)))
    return len(cases)


# =====================================================================
# (b) grad scaler sequences
# =====================================================================

EV = {"grad": 0, "unscale": 1, "clip": 2, "step": 3, "update": 4, "update_to": 5,
      "reload": 6, "zero": 7, "check": 8}
seq_vals = []    # float values: gradients to produce, parameters to check
seq_events = []  # (kind, opt, arg, skipped, scale, tracker, off, n)
seq_rows = []


def add_vals(vs):
    off = len(seq_vals)
    seq_vals.extend(float(v) for v in vs)
    return off, len(vs)


class Seq:
    def __init__(self, name, scaler_kw, opts):
        """opts: list of (kind "sgd"/"adam", kwargs, [initial values per param])."""
        self.name = name
        self.kw = dict(init_scale=65536.0, growth_factor=2.0, backoff_factor=0.5,
                       growth_interval=2000)
        self.kw.update(scaler_kw)
        self.scaler = torch.amp.GradScaler("cpu", **self.kw)
        self.params, self.opts, self.specs = [], [], []
        for kind, okw, inits in opts:
            ps = [torch.tensor(v, dtype=F32, requires_grad=True) for v in inits]
            full = dict(lr=0.1, momentum=0.0, weight_decay=0.0) if kind == "sgd" else \
                dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
            full.update(okw)
            o = torch.optim.SGD(ps, **full) if kind == "sgd" else torch.optim.Adam(ps, **full)
            self.params.append(ps)
            self.opts.append(o)
            off, _ = add_vals([x for v in inits for x in v])
            self.specs.append((kind, full, [len(v) for v in inits], off))
        self.ev0 = len(seq_events)

    def ev(self, kind, opt=0, arg=0.0, skipped=0, scale=0.0, tracker=0, vals=()):
        off, n = add_vals(vals) if vals else (0, 0)
        seq_events.append((EV[kind], opt, arg, skipped, scale, tracker, off, n))

    def grad(self, k, cs, div=1.0):
        """Backward of scale(sum_j sum(p_j * c_j) / div): adds c/div to grads."""
        loss = sum((p * torch.tensor(c, dtype=F32)).sum() for p, c in zip(self.params[k], cs))
        if div != 1.0:
            loss = loss / div
        self.scaler.scale(loss).backward()
        self.ev("grad", k, div, vals=[x for c in cs for x in c])

    def zero(self, k):
        self.opts[k].zero_grad(set_to_none=True)
        self.ev("zero", k)

    def unscale(self, k):
        self.scaler.unscale_(self.opts[k])
        self.ev("unscale", k)

    def clip(self, k, max_norm):
        torch.nn.utils.clip_grad_norm_(self.params[k], max_norm)
        self.ev("clip", k, max_norm)

    def step(self, k):
        before = [p.detach().clone() for p in self.params[k]]
        self.scaler.step(self.opts[k])
        st = self.scaler._per_optimizer_states[id(self.opts[k])]
        found = sum(v.item() for v in st["found_inf_per_device"].values())
        skipped = int(found != 0)
        if skipped:  # a skipped step leaves every parameter as it was
            assert all(torch.equal(b, p) for b, p in zip(before, self.params[k]))
        self.ev("step", k, skipped=skipped)

    def update(self, new_scale=None):
        self.scaler.update(new_scale)
        if new_scale is None:
            self.ev("update")
        else:
            self.ev("update_to", arg=new_scale)

    def reload(self):
        """state_dict of the scaler loaded into a fresh default one."""
        sd = self.scaler.state_dict()
        fresh = torch.amp.GradScaler("cpu")
        fresh.load_state_dict(sd)
        self.scaler = fresh
        self.ev("reload")

    def check(self):
        vals = [x for ps in self.params for p in ps for x in p.detach().tolist()]
        self.ev("check", scale=self.scaler.get_scale(),
                tracker=int(self.scaler._get_growth_tracker()), vals=vals)

    def iteration(self, grads, new_scale=None):
        """One plain iteration: grads[k] = per-param c lists for optimizer k."""
        for k in range(len(self.opts)):
            self.zero(k)
        for k, cs in enumerate(grads):
            self.grad(k, cs)
        for k in range(len(self.opts)):
            self.step(k)
        self.update(new_scale)
        self.check()

    def done(self):
        seq_rows.append((self.name, self.kw, self.specs, self.ev0, len(seq_events) - self.ev0))


INF, NAN = float("inf"), float("nan")


def gen_scaler():
    # 1. Defaults: inf, NaN, a -inf in one element, and a real f32 overflow
    #    (1e35 * 8192 > FLT_MAX) each back off; clean steps count.
    s = Seq("defaults_sgd", {}, [("sgd", dict(lr=0.1), [[0.5, -1.25, 2.0, 0.75]])])
    for c in ([0.1, -0.2, 0.3, 0.4], [INF, 0.1, 0.2, 0.3], [0.5, 0.25, -0.125, 1.0],
              [0.1, NAN, 0.2, 0.3], [0.2, 0.2, -INF, 0.2], [1.0, -1.0, 0.5, 0.25],
              [1e35, 0.1, 0.1, 0.1], [0.3, 0.3, 0.3, -0.3]):
        s.iteration([[c]])
    s.done()

    # 2. AMP_SPEC case 3's settings with momentum and weight decay, two params.
    s = Seq("init4_g2_b025_i2", dict(init_scale=4.0, growth_factor=2.0, backoff_factor=0.25,
                                     growth_interval=2),
            [("sgd", dict(lr=0.05, momentum=0.9, weight_decay=0.01),
              [[1.0, -2.0, 0.5], [0.25, 3.0]])])
    for cs in ([[0.1, 0.2, 0.3], [-0.4, 0.5]], [[0.2, -0.1, 0.0], [0.3, 0.3]],
               [[INF, 0.2, 0.3], [-0.4, 0.5]], [[0.05, 0.1, -0.2], [0.1, -0.1]],
               [[0.3, 0.3, 0.3], [0.3, 0.3]], [[-0.2, 0.4, 0.1], [0.0, 0.7]],
               [[0.1, 0.1, 0.1], [NAN, NAN]], [[0.6, -0.6, 0.2], [0.2, 0.1]],
               [[0.1, 0.2, 0.3], [0.4, 0.5]]):
        s.iteration([cs])
    s.done()

    # 3. Interval 1 growth with Adam (a skipped step must not advance Adam's
    #    step counter: the bias correction shows it).
    s = Seq("interval1_adam", dict(init_scale=128.0, growth_factor=2.0, growth_interval=1),
            [("adam", dict(lr=0.01), [[0.3, -0.7, 1.1]])])
    for c in ([0.5, -0.25, 1.0], [0.4, 0.1, -0.3], [NAN, 0.1, 0.1], [0.2, 0.2, 0.2],
              [-1.0, 0.5, 0.25], [0.3, -0.3, 0.9]):
        s.iteration([[c]])
    s.done()

    # 4. Growth that would overflow: 2^127 * 2 is not finite, so the scale
    #    stays and the tracker resets (AMP_SPEC case 6); unscale multiplies
    #    by the subnormal f32 2^-127.
    s = Seq("growth_not_finite", dict(init_scale=2.0 ** 127, growth_interval=1),
            [("sgd", dict(lr=0.1), [[1.0, 2.0]])])
    for c in ([0.5, -0.25], [1.5, 0.75], [0.3, 0.6]):
        s.iteration([[c]])
    s.done()

    # 5. Two optimizers, one loss each: each skips on its own infs; one
    #    update, one backoff even when both overflow.
    s = Seq("two_optimizers", dict(init_scale=1024.0, growth_interval=2),
            [("sgd", dict(lr=0.1, momentum=0.5), [[0.2, 0.4, -0.6]]),
             ("adam", dict(lr=0.05), [[1.0, -1.0]])])
    for a, b in (([0.1, 0.2, 0.3], [0.5, -0.5]), ([0.3, -0.2, 0.1], [INF, 0.1]),
                 ([-INF, 0.1, 0.1], [0.2, NAN]), ([0.2, 0.2, 0.2], [0.1, 0.3]),
                 ([NAN, 0.0, 0.0], [0.4, 0.4]), ([0.1, -0.1, 0.1], [-0.2, 0.6]),
                 ([0.5, 0.5, 0.5], [0.5, 0.5])):
        s.iteration([[a], [b]])
    s.done()

    # 6. Gradient accumulation: 2 micro-batches per step, loss / 2, scale
    #    fixed inside the step; an inf in the second micro-batch of step 3.
    s = Seq("accumulation", dict(init_scale=128.0, growth_interval=1),
            [("sgd", dict(lr=0.1, momentum=0.9), [[0.5, 1.5, -0.5]])])
    for c1, c2 in (([0.2, 0.4, 0.6], [0.6, 0.4, 0.2]), ([0.1, -0.1, 0.3], [0.5, 0.5, 0.5]),
                   ([0.3, 0.3, 0.3], [0.1, INF, 0.1]), ([-0.2, 0.2, 0.9], [0.7, 0.1, 0.1]),
                   ([1.0, 1.0, -1.0], [0.25, 0.5, 0.75])):
        s.zero(0)
        s.grad(0, [c1], 2.0)
        s.grad(0, [c2], 2.0)
        s.step(0)
        s.update()
        s.check()
    s.done()

    # 7. update(new_scale=...) mid-sequence: the tracker is kept; 1000 and
    #    300 are not powers of two, so unscale's rounding shows.
    s = Seq("update_new_scale", dict(growth_interval=3),
            [("sgd", dict(lr=0.1), [[2.0, -1.0, 0.5]])])
    s.iteration([[[0.1, 0.2, 0.3]]])
    s.iteration([[[0.3, -0.1, 0.7]]])
    s.iteration([[[0.2, 0.2, 0.2]]], new_scale=1000.0)
    s.iteration([[[0.7, 0.3, -0.9]]])
    s.iteration([[[INF, 0.3, -0.9]]], new_scale=300.0)
    s.iteration([[[0.11, 0.37, -0.53]]])
    s.iteration([[[1.3, -0.7, 0.29]]])
    s.done()

    # 8. state_dict saved and loaded into a fresh default scaler mid-run
    #    (before its first scale()), twice: scale, factors, interval and
    #    tracker carry over.
    s = Seq("state_dict_reload", dict(init_scale=256.0, growth_factor=4.0, backoff_factor=0.5,
                                      growth_interval=3),
            [("adam", dict(lr=0.02), [[0.1, 0.2, 0.3, 0.4]])])
    s.iteration([[[0.1, -0.2, 0.3, -0.4]]])
    s.iteration([[[0.5, 0.5, -0.5, 0.5]]])
    s.reload()
    s.check()
    s.iteration([[[0.2, 0.1, 0.0, -0.1]]])
    s.iteration([[[NAN, 0.1, 0.0, -0.1]]])
    s.reload()
    s.iteration([[[0.9, -0.9, 0.9, -0.9]]])
    s.iteration([[[0.3, 0.1, 0.2, 0.4]]])
    s.done()

    # 9. Explicit unscale, clip the true gradients (norm > max_norm), step
    #    (no second unscale; still skips on inf), update.
    s = Seq("unscale_clip", dict(growth_interval=2),
            [("sgd", dict(lr=0.1), [[1.0, 2.0, 3.0], [-1.0]])])
    for cs in ([[3.0, 4.0, 0.0], [12.0]], [[0.1, INF, 0.2], [0.3]], [[0.2, 0.1, 0.3], [0.1]],
               [[-5.0, 1.0, 2.0], [0.5]], [[0.01, 0.02, 0.03], [0.04]]):
        s.zero(0)
        s.grad(0, cs)
        s.unscale(0)
        s.clip(0, 1.0)
        s.step(0)
        s.update()
        s.check()
    s.done()

    out.append("\n/* ---- (b) grad scaler sequences ---- */\n")
    out.append("enum { AR_GRAD, AR_UNSCALE, AR_CLIP, AR_STEP, AR_UPDATE, AR_UPDATE_TO, AR_RELOAD,\n"
               "       AR_ZERO, AR_CHECK };\n")
    out.append("/* An event of a sequence, replayed in order:\n"
               " *   GRAD      backward of scale(sum_j sum(p_j * c_j) / arg) over optimizer\n"
               " *             opt's params; c = vals[off..off+n) (all params in order)\n"
               " *   UNSCALE   unscale(opt);  CLIP  clip_grad_norm(opt's params, arg)\n"
               " *   STEP      step(opt); skipped: whether PyTorch skipped it\n"
               " *   UPDATE    update();  UPDATE_TO  update(new_scale = arg)\n"
               " *   RELOAD    state_dict into a fresh default scaler, which replaces it\n"
               " *   ZERO      zero_grad(opt) (set_to_none)\n"
               " *   CHECK     scale, tracker, and every param of every optimizer = vals */\n")
    out.append("typedef struct {\n    int kind, opt;\n    double arg;\n    int skipped;\n"
               "    double scale;\n    long long tracker;\n    int off, n;\n} amp_ref_event;\n")
    out.append("typedef struct {\n    int adam; /* 0: SGD, 1: Adam */\n"
               "    double lr, momentum, weight_decay, beta1, beta2, eps;\n"
               "    int n_params, size[2];\n    int init_off; /* initial values in vals */\n"
               "} amp_ref_optspec;\n")
    out.append("typedef struct {\n    const char *name;\n    double init_scale, growth, backoff;\n"
               "    long long interval;\n    int n_opts;\n    amp_ref_optspec opt[2];\n"
               "    int ev_off, n_ev;\n} amp_ref_seq;\n")
    c_array("float", "amp_ref_seq_vals", seq_vals, fmt_float)
    rows = ["    {%d, %d, %s, %d, %s, %d, %d, %d}" % (k, o, fmt_double(a), sk, fmt_double(sc), tr,
                                                     off, n)
            for k, o, a, sk, sc, tr, off, n in seq_events]
    out.append("static const amp_ref_event amp_ref_seq_events[%d] = {\n%s};\n"
               % (len(rows), ",\n".join(rows)))
    rows = []
    for name, kw, specs, ev0, nev in seq_rows:
        ospecs = []
        for kind, full, sizes, off in specs:
            sizes2 = sizes + [0] * (2 - len(sizes))
            if kind == "sgd":
                ospecs.append("{0, %s, %s, %s, 0, 0, 0, %d, {%d, %d}, %d}"
                              % (fmt_double(full["lr"]), fmt_double(full["momentum"]),
                                 fmt_double(full["weight_decay"]), len(sizes), sizes2[0],
                                 sizes2[1], off))
            else:
                ospecs.append("{1, %s, 0, %s, %s, %s, %s, %d, {%d, %d}, %d}"
                              % (fmt_double(full["lr"]), fmt_double(full["weight_decay"]),
                                 fmt_double(full["betas"][0]), fmt_double(full["betas"][1]),
                                 fmt_double(full["eps"]), len(sizes), sizes2[0], sizes2[1], off))
        while len(ospecs) < 2:
            ospecs.append("{0}")
        rows.append('    {"%s", %s, %s, %s, %d, %d, {%s}, %d, %d}'
                    % (name, fmt_double(kw["init_scale"]), fmt_double(kw["growth_factor"]),
                       fmt_double(kw["backoff_factor"]), kw["growth_interval"], len(specs),
                       ", ".join(ospecs), ev0, nev))
    out.append("static const amp_ref_seq amp_ref_seqs[%d] = {\n%s};\n"
               % (len(rows), ",\n".join(rows)))


# =====================================================================
# (c) a 30-step MLP under f16 autocast + GradScaler
# =====================================================================

MLP_STEPS, MLP_BATCH, MLP_IN, MLP_HID, MLP_OUT = 30, 8, 16, 32, 4


def f16_margin(params, x, y, scale):
    """How far the step's largest f16 backward value sits from f16's
    overflow threshold, computed in f32 (|ratio - 1| of max|value| / 65504):
    a run whose skips are decided by a hair would not be a robust test."""
    ps = [p.detach().clone().requires_grad_() for p in params]
    pre = F.linear(x, ps[0], ps[1])
    pre.retain_grad()
    h = F.relu(pre)
    h.retain_grad()
    logits = F.linear(h, ps[2], ps[3])
    logits.retain_grad()
    (F.cross_entropy(logits, y) * scale).backward()
    m = max(t.grad.abs().max().item() for t in [pre, h, logits] + ps)
    return abs(m / 65504.0 - 1.0)


def mlp_run(w, x, y, scaler_kw):
    params = [t.clone().requires_grad_() for t in w]
    opt = torch.optim.SGD(params, lr=0.1, momentum=0.9)
    scaler = torch.amp.GradScaler("cpu", **scaler_kw)
    losses, scales, skipped, margin = [], [], [], float("inf")
    for t in range(MLP_STEPS):
        opt.zero_grad(set_to_none=True)
        margin = min(margin, f16_margin(params, x[t], y[t], scaler.get_scale()))
        with torch.autocast("cpu", dtype=torch.float16):
            h = F.relu(F.linear(x[t], params[0], params[1]))
            logits = F.linear(h, params[2], params[3])
            loss = F.cross_entropy(logits, y[t])
        assert logits.dtype == F16 and loss.dtype == F32
        scaler.scale(loss).backward()
        assert all(p.grad.dtype == F32 for p in params)
        scaler.step(opt)
        st = scaler._per_optimizer_states[id(opt)]
        skipped.append(int(sum(v.item() for v in st["found_inf_per_device"].values()) != 0))
        scaler.update()
        losses.append(loss.item())
        scales.append(scaler.get_scale())
    return losses, scales, skipped, margin


def gen_mlp():
    torch.manual_seed(1234)
    l1 = torch.nn.Linear(MLP_IN, MLP_HID)
    l2 = torch.nn.Linear(MLP_HID, MLP_OUT)
    w = [l1.weight.detach().clone(), l1.bias.detach().clone(),
         l2.weight.detach().clone(), l2.bias.detach().clone()]
    # Data: a random teacher's labels on Gaussian inputs, so the loss falls.
    teacher = torch.randn(MLP_IN, MLP_OUT)
    x = torch.randn(MLP_STEPS, MLP_BATCH, MLP_IN)
    y = (x @ teacher).argmax(-1)

    out.append("\n/* ---- (c) MLP %d-%d-4, batch %d, %d steps, f16 CPU autocast + GradScaler ---- */\n"
               % (MLP_IN, MLP_HID, MLP_BATCH, MLP_STEPS))
    out.append("#define AMP_REF_MLP_STEPS %d\n#define AMP_REF_MLP_BATCH %d\n#define AMP_REF_MLP_IN %d\n"
               "#define AMP_REF_MLP_HID %d\n#define AMP_REF_MLP_OUT %d\n"
               % (MLP_STEPS, MLP_BATCH, MLP_IN, MLP_HID, MLP_OUT))
    for name, t in zip(("w1", "b1", "w2", "b2"), w):
        c_array("float", "amp_ref_mlp_" + name, t.reshape(-1).tolist(), fmt_float)
    c_array("float", "amp_ref_mlp_x", x.reshape(-1).tolist(), fmt_float)
    c_array("int64_t", "amp_ref_mlp_y", y.reshape(-1).tolist(), str, 16)
    # Run 0: GradScaler("cpu") defaults. Run 1: init 2^18, interval 2, so
    # the f16 backward really overflows (inf grads from autocast's f16
    # GEMMs), steps are skipped, the scale backs off and grows again. Of
    # intervals 2..6 and init scales 2^18..2^22 this pair keeps every step
    # farthest from f16's limit (margin below); most others have a step
    # within 1-2% of it.
    runs = [("defaults", {}), ("overflow", dict(init_scale=2.0 ** 18, growth_interval=2))]
    out.append("typedef struct {\n    const char *name;\n    double init_scale;\n"
               "    long long growth_interval;\n    double loss[%d], scale[%d];\n"
               "    int skipped[%d];\n} amp_ref_mlp_run;\n" % ((MLP_STEPS,) * 3))
    rows, summary = [], []
    for name, kw in runs:
        losses, scales, skipped, margin = mlp_run(w, x, y, kw)
        # Skips decided within 3% of f16's limit could flip on summation
        # order; keep the reference away from that edge.
        assert margin > 0.03, "%s: f16 overflow margin %.3g too thin" % (name, margin)
        full = dict(init_scale=65536.0, growth_interval=2000)
        full.update(kw)
        def wrap(vals, fmt, k):
            return ",\n      ".join(", ".join(fmt(v) for v in vals[i:i + k])
                                    for i in range(0, len(vals), k))
        rows.append('    {"%s", %s, %d,\n     {%s},\n     {%s},\n     {%s}}'
                    % (name, fmt_double(full["init_scale"]), full["growth_interval"],
                       wrap(losses, fmt_double, 4), wrap(scales, fmt_double, 8),
                       wrap(skipped, str, 30)))
        summary.append("%s: loss %.4f -> %.4f, %d skipped, final scale %g, f16 margin %.2f"
                       % (name, losses[0], losses[-1], sum(skipped), scales[-1], margin))
    out.append("static const amp_ref_mlp_run amp_ref_mlp_runs[%d] = {\n%s};\n"
               % (len(rows), ",\n".join(rows)))
    return summary


def main():
    v = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
    if v < (2, 3):
        sys.exit("gen_amp.py needs PyTorch >= 2.3 (torch.amp.GradScaler('cpu'))")
    if FakeTensorMode is None:
        sys.exit("gen_amp.py needs torch._subclasses.fake_tensor for the CUDA cases")
    torch.set_num_threads(1)
    n_cases = gen_autocast()
    gen_scaler()
    summary = gen_mlp()
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "amp_ref.h")
    with open(path, "w") as f:
        f.write("/* amp_ref.h - generated by tests/reference/gen_amp.py (PyTorch %s);\n"
                " * do not edit. Autocast dtypes, grad-scaler sequences and an f16 MLP run,\n"
                " * as PyTorch computes them, for tests/test_amp_reference.c. */\n"
                "#ifndef AMP_REF_H\n#define AMP_REF_H\n#include <math.h>\n#include <stdint.h>\n"
                % torch.__version__)
        f.write("".join(out))
        f.write("#endif\n")
    print("wrote %s: %d autocast cases, %d scaler sequences (%d events)\n  MLP %s"
          % (path, n_cases, len(seq_rows), len(seq_events), "\n  MLP ".join(summary)))


if __name__ == "__main__":
    main()
