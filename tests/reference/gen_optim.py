#!/usr/bin/env python3
"""gen_optim.py - PyTorch reference values for tests/test_optim.c.

Runs torch.optim.SGD / Adam / AdamW for several steps on three small f32
parameters with fixed, changing gradients (the third parameter has no
gradient on some steps, and the learning rate changes mid-run), runs
torch.nn.utils.clip_grad_norm_ on finite and non-finite gradients, and
steps StepLR, CosineAnnealingLR and LinearLR + SequentialLR; writes every
input and expected value into tests/reference/optim_ref.h.

Then Adam / AdamW / amsgrad on random cases for 20 steps (gen_adam_random:
parameters and gradients from a splitmix64 stream the C test regenerates
bit for bit, so only PyTorch's results are stored), each run with a
correctly rounded sqrt and with PyTorch's own, their bits into
tests/reference/optim_adam_ref.h, for the bitwise comparison in
tests/test_optim.c. The first run's bits do not depend on the machine;
the second's do (which values MKL's float32 sqrt misrounds depends on the
CPU it runs on), and the test only measures against them. Likewise a
rerun on another CPU may move optim_ref.h's Adam values by an ulp.

Run from anywhere: python3 tests/reference/gen_optim.py
(PyTorch is needed only here, never by the build or the tests.)
"""
import math
import os
import warnings

import numpy as np
import torch

warnings.filterwarnings("ignore")
torch.manual_seed(1234)

STEPS = 6
SHAPES = [(2, 3), (4,), (3,)]
NUMELS = [math.prod(s) for s in SHAPES]
TOTAL = sum(NUMELS)
# Parameter 2 has no gradient on steps 0 and 3 (its state must not move).
HAS_GRAD = [[1, 1, 0 if s in (0, 3) else 1] for s in range(STEPS)]

INIT = [torch.randn(s) + (0.5 if i == 0 else -0.5) for i, s in enumerate(SHAPES)]
GRADS = [[torch.randn(s) * (0.2 + 0.3 * step) for s in SHAPES] for step in range(STEPS)]


def lrs(base, change_at=None, new=None):
    return [new if change_at is not None and s >= change_at else base for s in range(STEPS)]


# name, kind (0 sgd, 1 adam, 2 adamw), options, lr per step
CASES = [
    ("sgd_plain", 0, dict(momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False), lrs(0.1)),
    ("sgd_momentum_dampening", 0, dict(momentum=0.9, dampening=0.3, weight_decay=0.0, nesterov=False), lrs(0.05)),
    ("sgd_nesterov", 0, dict(momentum=0.9, dampening=0.0, weight_decay=0.0, nesterov=True), lrs(0.05)),
    ("sgd_weight_decay_momentum", 0, dict(momentum=0.5, dampening=0.0, weight_decay=0.1, nesterov=False),
     lrs(0.1, 3, 0.02)),
    ("adam_default", 1, dict(betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False), lrs(0.01)),
    ("adam_weight_decay", 1, dict(betas=(0.9, 0.999), eps=1e-8, weight_decay=0.05, amsgrad=False), lrs(0.01)),
    ("adam_amsgrad_wd_betas", 1, dict(betas=(0.3, 0.99), eps=1e-6, weight_decay=0.1, amsgrad=True),
     lrs(0.02, 2, 0.005)),
    ("adamw_default_lr_change", 2, dict(betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, amsgrad=False),
     lrs(0.01, 3, 0.003)),
    ("adamw_amsgrad", 2, dict(betas=(0.8, 0.95), eps=1e-4, weight_decay=0.2, amsgrad=True), lrs(0.03)),
]


def run_case(kind, opts, lr):
    params = [p.clone().requires_grad_(True) for p in INIT]
    if kind == 0:
        opt = torch.optim.SGD(params, lr=lr[0], foreach=False, **opts)
    elif kind == 1:
        opt = torch.optim.Adam(params, lr=lr[0], foreach=False, **opts)
    else:
        opt = torch.optim.AdamW(params, lr=lr[0], foreach=False, **opts)
    out = []
    for step in range(STEPS):
        for g in opt.param_groups:
            g["lr"] = lr[step]
        for i, p in enumerate(params):
            p.grad = GRADS[step][i].clone() if HAS_GRAD[step][i] else None
        opt.step()
        out.append(torch.cat([p.detach().reshape(-1) for p in params]))
    return out


def fmt_f(x):
    x = float(x)
    if math.isnan(x):
        return "NAN"
    if math.isinf(x):
        return "INFINITY" if x > 0 else "-INFINITY"
    return "%.9ef" % x


def fmt_d(x):
    return "%.17g" % float(x)


def flat(ts):
    return torch.cat([t.reshape(-1) for t in ts])


def farr(t):
    return "{" + ", ".join(fmt_f(v) for v in t.reshape(-1).tolist()) + "}"


# ------------------------------------------------------------ clip cases

CLIP_SHAPES = [(3, 2), (5,)]
CLIP_G = [torch.randn(s) for s in CLIP_SHAPES]
CLIP_INF = [g.clone() for g in CLIP_G]
CLIP_INF[1][2] = float("inf")
CLIP_NAN = [g.clone() for g in CLIP_G]
CLIP_NAN[0][1, 0] = float("nan")
# name, grads, max_norm
CLIPS = [
    ("no_clip", CLIP_G, 100.0),
    ("clip_half", CLIP_G, 0.5 * float(flat(CLIP_G).norm())),
    ("clip_small", CLIP_G, 0.01),
    ("clip_zero", CLIP_G, 0.0),
    ("inf_grad", CLIP_INF, 1.0),
    ("nan_grad", CLIP_NAN, 1.0),
]


def run_clip(grads, max_norm):
    params = [torch.zeros(g.shape, requires_grad=True) for g in grads]
    for p, g in zip(params, grads):
        p.grad = g.clone()
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm, error_if_nonfinite=False, foreach=False)
    return float(norm), flat([p.grad for p in params])


# ------------------------------------------------------------- schedules

# kind: 0 constant, 1 step, 2 cosine (amp_sched_kind)
SCHEDS = [
    dict(name="step", kind=1, base=0.1, step_size=3, gamma=0.5, T=0, eta_min=0.0, W=0, f=1.0, n=12),
    dict(name="cosine_past_tmax", kind=2, base=0.1, step_size=0, gamma=0.0, T=10, eta_min=0.001, W=0, f=1.0, n=16),
    dict(name="warmup_step", kind=1, base=0.2, step_size=2, gamma=0.5, T=0, eta_min=0.0, W=4, f=0.1, n=12),
    dict(name="warmup_cosine", kind=2, base=0.05, step_size=0, gamma=0.0, T=8, eta_min=0.0, W=5, f=0.25, n=15),
    dict(name="warmup_constant", kind=0, base=0.3, step_size=0, gamma=0.0, T=0, eta_min=0.0, W=3, f=0.1, n=8),
]


def run_sched(c):
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([p], lr=c["base"])
    S = torch.optim.lr_scheduler
    if c["kind"] == 1:
        main = S.StepLR(opt, step_size=c["step_size"], gamma=c["gamma"])
    elif c["kind"] == 2:
        main = S.CosineAnnealingLR(opt, T_max=c["T"], eta_min=c["eta_min"])
    else:
        main = S.LambdaLR(opt, lambda _: 1.0)
    if c["W"] > 0:
        warm = S.LinearLR(opt, start_factor=c["f"], end_factor=1.0, total_iters=c["W"])
        sched = S.SequentialLR(opt, [warm, main], milestones=[c["W"]])
    else:
        sched = main
    out = []
    for _ in range(c["n"]):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    L = []
    w = L.append
    w("/*")
    w(" * optim_ref.h - reference values from PyTorch %s, written by gen_optim.py" % torch.__version__)
    w(" * (do not edit: rerun the script). Used by tests/test_optim.c.")
    w(" */")
    w("#ifndef AMPC_OPTIM_REF_H")
    w("#define AMPC_OPTIM_REF_H")
    w("")
    w("#include <math.h>")
    w("#include <stdint.h>")
    w("")
    w("#define OREF_STEPS %d" % STEPS)
    w("#define OREF_NPARAM %d" % len(SHAPES))
    w("#define OREF_TOTAL %d" % TOTAL)
    w("static const int oref_ndim[OREF_NPARAM] = {%s};" % ", ".join(str(len(s)) for s in SHAPES))
    w("static const int64_t oref_dims[OREF_NPARAM][2] = {%s};"
      % ", ".join("{%s}" % ", ".join(str(d) for d in (list(s) + [0])[:2]) for s in SHAPES))
    w("static const int oref_numel[OREF_NPARAM] = {%s};" % ", ".join(str(n) for n in NUMELS))
    w("static const int oref_has_grad[OREF_STEPS][OREF_NPARAM] = {%s};"
      % ", ".join("{%s}" % ", ".join(str(h) for h in row) for row in HAS_GRAD))
    w("static const float oref_init[OREF_TOTAL] = %s;" % farr(flat(INIT)))
    w("static const float oref_grad[OREF_STEPS][OREF_TOTAL] = {")
    for s in range(STEPS):
        w("    %s," % farr(flat(GRADS[s])))
    w("};")
    w("")
    w("typedef struct {")
    w("    const char *name;")
    w("    int kind; /* 0 sgd, 1 adam, 2 adamw */")
    w("    double lr[OREF_STEPS];")
    w("    double momentum, dampening, weight_decay;")
    w("    int nesterov;")
    w("    double beta1, beta2, eps;")
    w("    int amsgrad;")
    w("    float expect[OREF_STEPS][OREF_TOTAL]; /* all parameters after each step */")
    w("} oref_case;")
    w("")
    w("static const oref_case oref_cases[] = {")
    for name, kind, o, lr in CASES:
        res = run_case(kind, o, lr)
        b1, b2 = o.get("betas", (0.0, 0.0))
        w("    {\"%s\", %d, {%s}, %s, %s, %s, %d, %s, %s, %s, %d, {" % (
            name, kind, ", ".join(fmt_d(x) for x in lr), fmt_d(o.get("momentum", 0.0)),
            fmt_d(o.get("dampening", 0.0)), fmt_d(o.get("weight_decay", 0.0)), int(o.get("nesterov", False)),
            fmt_d(b1), fmt_d(b2), fmt_d(o.get("eps", 0.0)), int(o.get("amsgrad", False))))
        for r in res:
            w("        %s," % farr(r))
        w("    }},")
    w("};")
    w("#define OREF_NCASES ((int)(sizeof oref_cases / sizeof oref_cases[0]))")
    w("")
    w("#define CREF_NPARAM %d" % len(CLIP_SHAPES))
    w("#define CREF_TOTAL %d" % sum(math.prod(s) for s in CLIP_SHAPES))
    w("static const int cref_numel[CREF_NPARAM] = {%s};" % ", ".join(str(math.prod(s)) for s in CLIP_SHAPES))
    w("typedef struct {")
    w("    const char *name;")
    w("    double max_norm;")
    w("    float grad[CREF_TOTAL];")
    w("    double norm; /* clip_grad_norm_'s return (f32 in PyTorch) */")
    w("    float expect[CREF_TOTAL];")
    w("} cref_case;")
    w("static const cref_case cref_cases[] = {")
    for name, grads, mx in CLIPS:
        norm, after = run_clip(grads, mx)
        w("    {\"%s\", %s, %s, %s, %s}," % (name, fmt_d(mx), farr(flat(grads)),
                                         fmt_f(norm).rstrip("f") if math.isfinite(norm) else fmt_f(norm),
                                         farr(after)))
    w("};")
    w("#define CREF_NCASES ((int)(sizeof cref_cases / sizeof cref_cases[0]))")
    w("")
    w("typedef struct {")
    w("    const char *name;")
    w("    int kind;")
    w("    double base_lr;")
    w("    int64_t step_size;")
    w("    double gamma;")
    w("    int64_t total_steps;")
    w("    double min_lr;")
    w("    int64_t warmup_steps;")
    w("    double warmup_start_factor;")
    w("    int n;")
    w("    double lr[16]; /* optimizer lr in use at steps 0..n-1 */")
    w("} sref_case;")
    w("static const sref_case sref_cases[] = {")
    for c in SCHEDS:
        out = run_sched(c)
        w("    {\"%s\", %d, %s, %d, %s, %d, %s, %d, %s, %d, {%s}}," % (
            c["name"], c["kind"], fmt_d(c["base"]), c["step_size"], fmt_d(c["gamma"]), c["T"],
            fmt_d(c["eta_min"]), c["W"], fmt_d(c["f"]), c["n"], ", ".join(fmt_d(x) for x in out)))
    w("};")
    w("#define SREF_NCASES ((int)(sizeof sref_cases / sizeof sref_cases[0]))")
    w("")
    w("#endif")
    with open(os.path.join(here, "optim_ref.h"), "w") as f:
        f.write("\n".join(L) + "\n")
    gen_adam_random(here)


# ------------------------------------------- Adam on random cases, bitwise

ARAND_STEPS = 20
ARAND_SHAPES = [(10, 33), (141,), (9,)]  # vector tails of 10, 13 and 9
ARAND_SAVE = [0, 9, 19]  # the steps whose parameters are stored (0-based)
M64 = (1 << 64) - 1


class SplitMix64:
    """splitmix64, as tests/test_optim.c's arand_next."""

    def __init__(self, seed):
        self.s = seed & M64

    def next(self):
        self.s = (self.s + 0x9E3779B97F4A7C15) & M64
        z = self.s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        return z ^ (z >> 31)


def arand_value(z, max_shift):
    """An exact float32 in [-1, 1) times 2^-(z mod (max_shift + 1)): the top
    24 bits of z, centred, over 2^23 (as arand_value in the C test)."""
    k = (z & 0xFFFF) % (max_shift + 1)
    return math.ldexp((z >> 40) - (1 << 23), -23 - k)


def arand_tensors(seed, max_shift):
    r = SplitMix64(seed)
    out = []
    for s in ARAND_SHAPES:
        vals = [arand_value(r.next(), max_shift) for _ in range(math.prod(s))]
        out.append(torch.tensor(vals, dtype=torch.float32).reshape(s))
    return out


# name, kind (1 adam, 2 adamw), lr, lr from step 10 on, betas, eps, weight_decay, amsgrad
ARAND_CASES = [
    ("adam_lr1e-3", 1, 1e-3, 1e-3, (0.9, 0.999), 1e-8, 0.0, False),
    ("adam_lr1e-2_l2", 1, 1e-2, 1e-2, (0.9, 0.999), 1e-8, 0.01, False),
    ("adam_lr0.1_l2_amsgrad", 1, 0.1, 0.1, (0.9, 0.999), 1e-8, 0.1, True),
    ("adam_lr1e-4_eps1e-6", 1, 1e-4, 1e-4, (0.9, 0.999), 1e-6, 0.0, False),
    ("adam_beta1_0.3_lr5e-3", 1, 5e-3, 5e-3, (0.3, 0.99), 1e-8, 0.0, False),
    ("adamw_lr1e-3", 2, 1e-3, 1e-3, (0.9, 0.999), 1e-8, 0.01, False),
    ("adamw_lr3e-2_amsgrad", 2, 3e-2, 3e-2, (0.8, 0.95), 1e-8, 0.1, True),
    ("adamw_beta1_0.4_lr_change", 2, 1e-2, 1e-3, (0.4, 0.999), 1e-8, 0.05, False),
]


def arand_seed_init():
    return 0xADA0


def arand_seed_grad(step):
    return 0xADA1 + step


def run_arand(kind, lr, lr2, betas, eps, wd, ams):
    params = [p.clone().requires_grad_(True) for p in arand_tensors(arand_seed_init(), 2)]
    cls = torch.optim.Adam if kind == 1 else torch.optim.AdamW
    opt = cls(params, lr=lr, betas=betas, eps=eps, weight_decay=wd, amsgrad=ams, foreach=False, fused=False)
    saved = []
    for step in range(ARAND_STEPS):
        for g in opt.param_groups:
            g["lr"] = lr if step < 10 else lr2
        for p, g in zip(params, arand_tensors(arand_seed_grad(step), 15)):
            p.grad = g
        opt.step()
        if step in ARAND_SAVE:
            saved.append(flat([p.detach() for p in params]))
    m = flat([opt.state[p]["exp_avg"] for p in params])
    v = flat([opt.state[p]["exp_avg_sq"] for p in params])
    return saved, m, v


class CorrectlyRoundedSqrt:
    """Within the block, Tensor.sqrt of a float32 CPU tensor is the correctly
    rounded square root (numpy's, the hardware's). PyTorch's own float32 CPU
    sqrt (MKL's vsSqrt where PyTorch is built with MKL) is an ulp off in
    about one value in five, so its Adam is compared twice: as it is, and
    with this sqrt, which isolates the order of the other operations."""

    def __enter__(self):
        self.orig = torch.Tensor.sqrt
        orig = self.orig

        def sqrt(t):
            if t.dtype != torch.float32 or t.device.type != "cpu":
                return orig(t)
            return torch.from_numpy(np.sqrt(t.detach().numpy()))

        torch.Tensor.sqrt = sqrt
        return self

    def __exit__(self, *exc):
        torch.Tensor.sqrt = self.orig


def bits(t):
    return "{" + ", ".join("0x%08x" % x for x in t.contiguous().view(torch.int32).tolist()
                           for x in [x & 0xFFFFFFFF]) + "}"


def gen_adam_random(here):
    torch.set_num_threads(1)
    total = sum(math.prod(s) for s in ARAND_SHAPES)
    L = []
    w = L.append
    w("/*")
    w(" * optim_adam_ref.h - PyTorch %s's Adam / AdamW (foreach=False: _single_tensor_adam" % torch.__version__)
    w(" * on the CPU, capability %s) on random cases, as bits; written by" % torch.backends.cpu.get_cpu_capability())
    w(" * gen_optim.py (do not edit: rerun the script). Used by tests/test_optim.c, which")
    w(" * regenerates the parameters and gradients from the same splitmix64 stream.")
    w(" * Each case ran twice: with a correctly rounded float32 sqrt (param, exp_avg,")
    w(" * exp_avg_sq) and with PyTorch's own CPU sqrt (aref_stock_diff: where its")
    w(" * parameters differ from the first run's).")
    w(" */")
    w("#ifndef AMPC_OPTIM_ADAM_REF_H")
    w("#define AMPC_OPTIM_ADAM_REF_H")
    w("")
    w("#include <stdint.h>")
    w("")
    w("#define AREF_STEPS %d" % ARAND_STEPS)
    w("#define AREF_NPARAM %d" % len(ARAND_SHAPES))
    w("#define AREF_TOTAL %d" % total)
    w("#define AREF_NSAVE %d" % len(ARAND_SAVE))
    w("#define AREF_SEED_INIT 0x%X /* parameters: values to 2^-2 */" % arand_seed_init())
    w("#define AREF_SEED_GRAD 0x%X /* + step: gradients, values to 2^-15 */" % arand_seed_grad(0))
    w("static const int aref_save[AREF_NSAVE] = {%s}; /* steps stored, 0-based */"
      % ", ".join(str(x) for x in ARAND_SAVE))
    w("static const int aref_ndim[AREF_NPARAM] = {%s};" % ", ".join(str(len(s)) for s in ARAND_SHAPES))
    w("static const int64_t aref_dims[AREF_NPARAM][2] = {%s};"
      % ", ".join("{%s}" % ", ".join(str(d) for d in (list(s) + [0])[:2]) for s in ARAND_SHAPES))
    w("")
    w("typedef struct {")
    w("    const char *name;")
    w("    int kind; /* 1 adam, 2 adamw */")
    w("    double lr, lr_from_10; /* the learning rate, and from step 10 (0-based) on */")
    w("    double beta1, beta2, eps, weight_decay;")
    w("    int amsgrad;")
    w("    /* with a correctly rounded sqrt: every parameter after the steps")
    w("     * aref_save, the state after the last step */")
    w("    uint32_t param[AREF_NSAVE][AREF_TOTAL];")
    w("    uint32_t exp_avg[AREF_TOTAL], exp_avg_sq[AREF_TOTAL];")
    w("} aref_case;")
    w("")
    w("/* Stock PyTorch's parameter bits where they differ from param[save][index]. */")
    w("typedef struct {")
    w("    int16_t case_index, save, index;")
    w("    uint32_t bits;")
    w("} aref_diff;")
    w("")
    diffs = []
    w("static const aref_case aref_cases[] = {")
    for k, (name, kind, lr, lr2, betas, eps, wd, ams) in enumerate(ARAND_CASES):
        with CorrectlyRoundedSqrt():
            saved, m, v = run_arand(kind, lr, lr2, betas, eps, wd, ams)
        stock, _, _ = run_arand(kind, lr, lr2, betas, eps, wd, ams)
        for si, (a, b) in enumerate(zip(saved, stock)):
            ab, bb = a.view(torch.int32), b.view(torch.int32)
            for j in torch.nonzero(ab != bb).reshape(-1).tolist():
                diffs.append((k, si, j, int(bb[j]) & 0xFFFFFFFF))
        w("    {\"%s\", %d, %s, %s, %s, %s, %s, %s, %d, {" % (
            name, kind, fmt_d(lr), fmt_d(lr2), fmt_d(betas[0]), fmt_d(betas[1]), fmt_d(eps), fmt_d(wd), int(ams)))
        for t in saved:
            w("        %s," % bits(t))
        w("    }, %s," % bits(m))
        w("    %s}," % bits(v))
    w("};")
    w("#define AREF_NCASES ((int)(sizeof aref_cases / sizeof aref_cases[0]))")
    w("")
    w("static const aref_diff aref_stock_diff[] = {")
    for i in range(0, len(diffs), 4):
        w("    %s," % ", ".join("{%d, %d, %d, 0x%08x}" % d for d in diffs[i:i + 4]))
    w("};")
    w("#define AREF_NDIFF ((int)(sizeof aref_stock_diff / sizeof aref_stock_diff[0]))")
    w("")
    w("#endif")
    with open(os.path.join(here, "optim_adam_ref.h"), "w") as f:
        f.write("\n".join(L) + "\n")

if __name__ == "__main__":
    main()
