#!/usr/bin/env python3
"""ampc_torch.py - ampc checkpoints in PyTorch, and PyTorch weights in ampc.

An ampc checkpoint (DIR/checkpoint.safetensors) names its tensors as the
PyTorch module tree of the same model names them (docs/interop.md). This
module builds that tree, the "twin", from the run's settings stored in the
checkpoint, and loads the weights with safetensors; and it writes a twin's
(or any matching state_dict's) weights as a checkpoint that `ampc eval` and
`ampc train --resume` accept.

    import ampc_torch
    model = ampc_torch.load("run/checkpoint.safetensors")     # eval mode, float32
    logits = model(x)                                         # the same logits as ampc's fp32 forward

    twin = ampc_torch.GPT(vocab=65, context=64, width=128, layers=2, heads=4)
    ...train it in PyTorch...
    ampc_torch.save(twin, "out/checkpoint.safetensors", data="input.txt")
    #   ampc eval out --data input.txt ; ampc train --resume out --steps 2000

From the shell: `python3 python/ampc_torch.py CHECKPOINT` prints the twin and
its parameters.

The three models (ampc's src/nn/models.c and gpt.c):
  mlp  nn.Sequential(Linear, ReLU, ..., Linear): "0.weight", "2.weight", ...
       input [B, features] (the image flattened, normalised as ampc does)
  cnn  nn.Sequential(Conv2d(C, 32, 3, padding=1), ReLU, MaxPool2d(2),
       Conv2d(32, 64, 3, padding=1), ReLU, MaxPool2d(2), Flatten,
       Linear(64 * H/4 * W/4, 128), ReLU, Linear(128, classes)): "0.weight",
       "3.weight", "7.weight", "9.weight"; input [B, C, H, W]
  gpt  GPT below: wte, wpe, h.<i>.{ln_1, attn.qkv, attn.proj, ln_2, mlp.fc1,
       mlp.fc2}, ln_f; the head is tied to wte (no tensor of its own); input
       token ids [B, T], logits [B, T, vocab]

Needs torch and safetensors (pip install torch safetensors). ampc itself
never needs Python.
"""
import json
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

FORMAT = "ampc-1"
AMPC_VERSION = "0.1.0"


# ---------------------------------------------------------------- the twins

def MLP(features, hidden, classes):
    """ampc's mlp: Linear(features, hidden[0]), ReLU, ..., Linear(.., classes)."""
    layers, prev = [], features
    for h in hidden:
        layers += [nn.Linear(prev, h), nn.ReLU()]
        prev = h
    layers.append(nn.Linear(prev, classes))
    m = nn.Sequential(*layers)
    m.ampc_config = {"model": "mlp", "features": features, "hidden": list(hidden), "classes": classes}
    return m


def CNN(channels, height, width, classes):
    """ampc's cnn: two conv3x3(pad 1) + ReLU + max-pool(2) stages, then 128, classes."""
    if height % 4 or width % 4:
        raise ValueError(f"cnn: height {height} and width {width} must be multiples of 4")
    m = nn.Sequential(
        nn.Conv2d(channels, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * (height // 4) * (width // 4), 128), nn.ReLU(),
        nn.Linear(128, classes))
    m.ampc_config = {"model": "cnn", "channels": channels, "height": height, "width": width,
                     "classes": classes}
    return m


class Attention(nn.Module):
    """Causal self-attention with one fused q, k, v linear (qkv.weight rows:
    q's, then k's, then v's)."""

    def __init__(self, width, heads, bias=True):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width, bias=bias)
        self.proj = nn.Linear(width, width, bias=bias)

    def forward(self, x):
        B, T, W = x.shape
        q, k, v = self.qkv(x).split(W, dim=2)
        q, k, v = (t.view(B, T, self.heads, W // self.heads).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(a.transpose(1, 2).reshape(B, T, W))


class FeedForward(nn.Module):
    def __init__(self, width, mlp, bias=True, gelu="tanh"):
        super().__init__()
        self.fc1 = nn.Linear(width, mlp, bias=bias)
        self.fc2 = nn.Linear(mlp, width, bias=bias)
        self.approximate = "none" if gelu == "exact" else "tanh"

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x), approximate=self.approximate))


class Block(nn.Module):
    """Pre-LN block; dropout after each residual branch (training only), as ampc."""

    def __init__(self, width, heads, mlp, dropout, bias=True, gelu="tanh"):
        super().__init__()
        self.ln_1 = nn.LayerNorm(width, eps=1e-5, bias=bias)
        self.attn = Attention(width, heads, bias)
        self.ln_2 = nn.LayerNorm(width, eps=1e-5, bias=bias)
        self.mlp = FeedForward(width, mlp, bias, gelu)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        x = x + self.drop(self.attn(self.ln_1(x)))
        return x + self.drop(self.mlp(self.ln_2(x)))


class GPT(nn.Module):
    """ampc's gpt: x = wte[idx] + wpe[0..T), blocks, ln_f, logits = x @ wte.weight^T;
    bias=False (ampc's --no-bias, nanoGPT's bias=False): no linear or LayerNorm has a bias;
    gelu="exact" (ampc's --gelu exact, nanoGPT's nn.GELU()): the MLP's GELU in the erf form, else tanh."""

    def __init__(self, vocab, context, width, layers, heads, mlp=None, dropout=0.0, bias=True, gelu="tanh"):
        super().__init__()
        mlp = mlp or 4 * width
        if width % heads:
            raise ValueError(f"gpt: width {width} is not divisible by heads {heads}")
        self.context = context
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(context, width)
        if gelu not in ("tanh", "exact"):
            raise ValueError(f"gpt: gelu {gelu!r} is not tanh or exact")
        self.h = nn.ModuleList(Block(width, heads, mlp, dropout, bias, gelu) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width, eps=1e-5, bias=bias)
        self.ampc_config = {"model": "gpt", "vocab": vocab, "context": context, "width": width,
                            "layers": layers, "heads": heads, "mlp-width": mlp, "dropout": dropout,
                            "no-bias": not bias, "gelu": gelu}
        # ampc's initialisation (nanoGPT's): N(0, 0.02), residual projections
        # N(0, 0.02 / sqrt(2 layers)), biases 0, LayerNorms 1 and 0.
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif ".ln_" in name or name.startswith("ln_f"):
                nn.init.ones_(p)
            elif name.endswith(("attn.proj.weight", "mlp.fc2.weight")):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * layers))
            else:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx):
        T = idx.shape[1]
        if T > self.context:
            raise ValueError(f"gpt: {T} tokens, the context is {self.context}")
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for block in self.h:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)


def build(config):
    """The twin of an ampc model config (what config_of returns)."""
    kind = config["model"]
    if kind == "mlp":
        return MLP(config["features"], config["hidden"], config["classes"])
    if kind == "cnn":
        return CNN(config["channels"], config["height"], config["width"], config["classes"])
    if kind == "gpt":
        return GPT(config["vocab"], config["context"], config["width"], config["layers"], config["heads"],
                   config.get("mlp-width"), config.get("dropout", 0.0), not config.get("no-bias", False),
                   config.get("gelu", "tanh"))
    raise ValueError(f"unknown ampc model {kind!r} (mlp, cnn or gpt)")


# ------------------------------------------------------------ checkpoints

# ampc's defaults for the options a settings object may leave out (tools/train_opts.c).
_DEFAULTS = {"hidden": [256, 128], "layers": 2, "heads": 4, "width": 128, "context": 64, "dropout": 0.0}


def read(path):
    """(tensors, metadata, settings) of an ampc checkpoint: every tensor by
    name (torch, as stored), the __metadata__ strings, and the run's
    settings JSON parsed ({} for a plain safetensors file)."""
    from safetensors import safe_open
    from safetensors.torch import load_file
    with safe_open(path, framework="pt") as f:
        meta = f.metadata() or {}
    tensors = load_file(path)
    settings = json.loads(meta["settings"]) if "settings" in meta else {}
    return tensors, meta, settings


def config_of(settings):
    """The model config from a checkpoint's settings JSON."""
    s, run = settings.get("settings", {}), settings.get("run", {})
    kind = s.get("model", "cnn")
    if kind == "mlp":
        return {"model": "mlp", "features": run["features"], "hidden": list(s.get("hidden", _DEFAULTS["hidden"])),
                "classes": run["classes"], "height": run["height"], "width": run["width"]}
    if kind == "cnn":
        return {"model": "cnn", "channels": run["channels"], "height": run["height"], "width": run["width"],
                "classes": run["classes"]}
    if kind == "gpt":
        width = s.get("width", _DEFAULTS["width"])
        return {"model": "gpt", "vocab": run["vocab"], "context": s.get("context", _DEFAULTS["context"]),
                "width": width, "layers": s.get("layers", _DEFAULTS["layers"]),
                "heads": s.get("heads", _DEFAULTS["heads"]), "mlp-width": s.get("mlp-width", 4 * width),
                "dropout": s.get("dropout", 0.0), "no-bias": s.get("no-bias", False), "gelu": s.get("gelu", "tanh")}
    raise ValueError(f"the checkpoint's settings name model {kind!r}, which this module does not know")


def convert_old_gpt(weights, layers):
    """A gpt state_dict in ampc's layout before the names (index names, q, k
    and v as three linears: "3.1.weight" ...) in today's names, qkv =
    cat(q, k, v) along dim 0. ampc converts such files itself on load."""
    if "0.1.weight" not in weights or "h.0.ln_1.weight" in weights:
        return dict(weights)
    names = {0: "ln_1", 4: "attn.proj", 5: "ln_2", 6: "mlp.fc1", 7: "mlp.fc2"}
    out = {"wte.weight": weights["wte.weight"], "wpe.weight": weights["wpe.weight"]}
    for b in range(layers):
        for wb in ("weight", "bias"):
            for j, n in names.items():
                out[f"h.{b}.{n}.{wb}"] = weights[f"{b}.{j}.{wb}"]
            out[f"h.{b}.attn.qkv.{wb}"] = torch.cat([weights[f"{b}.{j}.{wb}"] for j in (1, 2, 3)], 0)
    for wb in ("weight", "bias"):
        out[f"ln_f.{wb}"] = weights[f"{layers}.{wb}"]
    return out


def load(path, dtype=torch.float32):
    """The PyTorch twin of the model in an ampc checkpoint, its weights
    loaded (in dtype; ampc may hold some in bf16 / fp16), in eval mode.
    The twin remembers the run's settings (model.ampc_settings) and the
    dtype each weight was stored in (model.ampc_dtypes), so that save()
    writes a checkpoint that ampc measures and trains as the original."""
    tensors, _, settings = read(path)
    if not settings:
        raise ValueError(f"{path}: no ampc settings in __metadata__ (not a checkpoint `ampc train` wrote)")
    config = config_of(settings)
    model = build(config)
    weights = {k: v for k, v in tensors.items() if not k.startswith("optim.")}
    if config["model"] == "gpt":
        weights = convert_old_gpt(weights, config["layers"])
    load_state_dict(model, weights)
    model.ampc_settings = settings
    model.ampc_dtypes = {k: v.dtype for k, v in weights.items()}
    return model.to(dtype).eval()


def load_state_dict(model, state_dict):
    """model.load_state_dict(state_dict) in float32, strict, with an error
    naming every missing, unexpected or misshapen tensor. A GPT's
    "lm_head.weight" (a tied head, as nanoGPT's state_dict has it) is
    dropped when it equals "wte.weight"."""
    sd = dict(state_dict)
    if "lm_head.weight" in sd and "wte.weight" in sd:
        if not torch.equal(sd["lm_head.weight"], sd["wte.weight"]):
            raise ValueError("lm_head.weight differs from wte.weight: ampc's gpt ties the head to wte")
        del sd["lm_head.weight"]
    own = dict(model.named_parameters())
    missing = sorted(set(own) - set(sd))
    unexpected = sorted(set(sd) - set(own))
    shapes = [f"{k}: {tuple(sd[k].shape)} (the model's is {tuple(own[k].shape)})"
              for k in own if k in sd and tuple(sd[k].shape) != tuple(own[k].shape)]
    if missing or unexpected or shapes:
        raise ValueError("state_dict does not fit the ampc twin: " + "; ".join(
            ([f"missing {missing}"] if missing else []) + ([f"unexpected {unexpected}"] if unexpected else [])
            + shapes))
    with torch.no_grad():
        for k, p in own.items():
            p.copy_(sd[k].to(torch.float32))
    return model


def _same_model(settings, config):
    """Whether a checkpoint's settings describe the model of config."""
    try:
        saved = config_of(settings)
    except (KeyError, ValueError):
        return False
    return all(saved.get(k) == v for k, v in config.items())


def _kept_settings(base, data, precision, optim, lr, steps):
    """A run's settings (what load() kept) for a checkpoint at step 0 of the
    same run: every option as it was (batch, seed, val-batches, the
    scaler's knobs ...), the arguments given on top, and the run values of
    a run that has taken no step."""
    s, run = dict(base.get("settings", {})), dict(base.get("run", {}))
    for key, value in (("data", data), ("precision", precision), ("optim", optim), ("lr", lr), ("steps", steps)):
        if value is not None:
            s[key] = value
    run.update(sched_step=0, skipped=0)
    return {"ampc": base.get("ampc", AMPC_VERSION), "settings": s, "run": run}


def _settings_json(config, data, precision, optim, lr, steps):
    """The settings object ampc's CLI writes for a run of this model
    (tools/settings.c): its shape options, the optimizer, the precision;
    and the "run" values the data decided."""
    kind = config["model"]
    s = {"model": kind}
    if data is not None:
        s["data"] = data
    run = {"features": 0, "channels": 0, "height": 0, "width": 0, "classes": 0, "vocab": 0,
           "sched_step": 0, "skipped": 0, "world_size": 0, "total_steps": 0}
    if kind == "mlp":
        # The images' height and width (the data check compares them): from
        # the config when it has them, else a square image when features is
        # a square (28 x 28 = 784), else one row.
        f = config["features"]
        side = math.isqrt(f)
        h = config.get("height") or (side if side * side == f else 1)
        s["hidden"] = list(config["hidden"])
        run.update(features=f, channels=1, height=h, width=f // h, classes=config["classes"])
    elif kind == "cnn":
        run.update(features=config["height"] * config["width"], channels=config["channels"],
                   height=config["height"], width=config["width"], classes=config["classes"])
    else:
        for k in ("layers", "heads", "width", "context", "mlp-width", "dropout"):
            s[k] = config[k]
        s["no-bias"] = config.get("no-bias", False)
        s["gelu"] = config.get("gelu", "tanh")
        run["vocab"] = config["vocab"]
    s.update({"optim": optim, "precision": precision})
    if lr is not None:
        s["lr"] = lr
    if steps is not None:
        s["steps"] = steps
    return {"ampc": AMPC_VERSION, "settings": s, "run": run}


def save(model, path, *, data=None, precision=None, optim=None, lr=None, steps=None, config=None,
         settings=None):
    """Writes model's weights (a twin, or any module whose state_dict has the
    twin's names) as an ampc checkpoint at path (DIR/checkpoint.safetensors
    for the CLI): the tensors, the settings the CLI needs (model shape,
    data, precision, optimizer, steps) and a fresh optimizer state (no step
    taken; with precision "fp16" a fresh grad scaler's state too), so that
    `ampc eval DIR` measures it and `ampc train --resume DIR` trains it on
    from step 0. config: the model config when model is not a
    twin built here (what config_of returns).

    A twin from load() (or settings=, a checkpoint's settings JSON) keeps
    that run's settings, every one (batch, seed, val-batches, the scaler's
    knobs ...), and its weights' stored dtypes (--param-dtype): the
    checkpoint evaluates to the same number as the one loaded. The
    arguments given replace those settings. Otherwise the tensors are
    float32 and the settings the model's shape with precision "fp32" and
    optimizer "adam" unless given."""
    from safetensors.torch import save_file
    config = config or getattr(model, "ampc_config", None)
    if config is None:
        raise ValueError("save: model has no ampc_config; pass config= (see config_of)")
    twin = build(config)
    load_state_dict(twin, model.state_dict())  # checks every name and shape
    base = settings if settings is not None else getattr(model, "ampc_settings", None)
    if base is not None and not _same_model(base, config):
        if settings is not None:
            raise ValueError("save: settings= describes another model than the one saved")
        base = None  # the twin was rebuilt into another shape: its old settings do not apply
    if base is not None:
        settings = _kept_settings(base, data, precision, optim, lr, steps)
    else:
        settings = _settings_json(config, data, precision or "fp32", optim or "adam", lr, steps)
    s = settings["settings"]
    optim, precision = s.get("optim", "adam"), s.get("precision", "bf16")
    if optim not in ("sgd", "adam", "adamw"):
        raise ValueError(f"save: optim {optim!r} is not sgd, adam or adamw")
    if precision not in ("fp32", "bf16", "fp16"):
        raise ValueError(f"save: precision {precision!r} is not fp32, bf16 or fp16")
    # --param-dtype runs store their 16-bit weights as such (load() noted
    # which); the rest, and every weight of a new twin, in float32.
    dtypes = getattr(model, "ampc_dtypes", {}) if base is not None else {}
    if s.get("param-dtype", "fp32") == "fp32":
        dtypes = {}
    tensors = {k: p.detach().to(torch.float32).to(dtypes.get(k, torch.float32)).contiguous().cpu()
               for k, p in twin.named_parameters()}
    for k, t in tensors.items():
        if not torch.isfinite(t).all():
            raise ValueError(f"save: {k} holds inf or NaN")
    n = len(tensors)
    tensors["optim.steps"] = torch.zeros(n, dtype=torch.int64)
    lr = s.get("lr", {"sgd": 0.05}.get(optim, {"cnn": 0.003, "gpt": 0.002, "mlp": 0.001}[config["model"]]))
    meta = {"format": FORMAT, "ampc.version": AMPC_VERSION, "step": "0", "settings": json.dumps(settings),
            "optim.kind": optim, "optim.lr": repr(float(lr)), "optim.n_params": str(n), "optim.total_steps": "0"}
    if precision == "fp16" and not s.get("no-scaler", False):
        # A fresh grad scaler's state with the run's knobs (ampc's defaults,
        # as GradScaler's, where the settings have none), as the CLI saves
        # an fp16 run's: `ampc train --resume` loads it.
        scale = s.get("static-scale") or s.get("init-scale") or 65536
        meta.update({"scaler.enabled": "true", "scaler.scale": repr(float(scale)),
                     "scaler.growth_factor": repr(float(s.get("growth-factor") or 2)),
                     "scaler.backoff_factor": repr(float(s.get("backoff-factor") or 0.5)),
                     "scaler.growth_interval": str(int(s.get("growth-interval") or 2000)),
                     "scaler.growth_tracker": "0", "scaler.steps": "0", "scaler.skipped": "0",
                     "scaler.skipped_in_a_row": "0", "scaler.hysteresis_left": str(int(s.get("hysteresis") or 1))})
    save_file(tensors, path, metadata=meta)


def main(argv):
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        print("usage: python3 ampc_torch.py CHECKPOINT   (prints the PyTorch twin and its parameters)")
        return 0 if len(argv) == 2 else 2
    model = load(argv[1])
    print(model)
    for k, p in model.named_parameters():
        print(f"{k} {list(p.shape)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
