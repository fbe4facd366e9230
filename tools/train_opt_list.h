/*
 * train_opt_list.h - the rows of train's option table: every option of a
 * run, once. eval and profile take their rows from it (eval.c,
 * profile_cmd.c); settings.c keeps those of class SETTING and SHAPE in
 * each checkpoint, by name.
 *
 * X(field, row...): field is train_opts' member the value goes to (and
 * RO_field the row's id: train_opts.given[RO_field]); the rest are the
 * row's opt_def members (opts.h) by name: .name, .meta, .kind, .cls (saved
 * or not), .lo / .hi (the range), .choices, .models (the one model it
 * applies to), .fp16 (the grad scaler's bits) and .help. Expanded where
 * train_opts is complete (train_opts.c's table) or with the row ignored
 * (train_opts.h's ids).
 */
/* clang-format off */
X(model, .name = "model", .meta = "NAME", .kind = OPT_STR, .cls = OC_SHAPE, .choices = "mlp|cnn|gpt",
  .help = "mlp or cnn on Fashion-MNIST, gpt on a text corpus (default cnn)")
X(data, .name = "data", .meta = "PATH", .kind = OPT_STR, .cls = OC_SETTING,
  .help = "Fashion-MNIST IDX directory (mlp, cnn), text file or directory (gpt)")
X(hidden, .name = "hidden", .meta = "N,N,..", .kind = OPT_LIST, .cls = OC_SHAPE, .lo = 1, .hi = 1 << 20,
  .models = "mlp", .count_off = offsetof(train_opts, n_hidden), .cap = CLI_MAX_HIDDEN,
  .help = "mlp: hidden layer widths, \"none\" for a linear model (default 256,128)")
X(layers, .name = "layers", .meta = "N", .kind = OPT_INT, .cls = OC_SHAPE, .lo = 1, .hi = 1024, .models = "gpt",
  .help = "gpt: transformer blocks (default 2)")
X(heads, .name = "heads", .meta = "N", .kind = OPT_INT, .cls = OC_SHAPE, .lo = 1, .hi = 1024, .models = "gpt",
  .help = "gpt: attention heads, dividing --width (default 4)")
X(width, .name = "width", .meta = "N", .kind = OPT_INT, .cls = OC_SHAPE, .lo = 1, .hi = 1 << 16, .models = "gpt",
  .help = "gpt: embedding width (default 128)")
X(context, .name = "context", .meta = "N", .kind = OPT_INT, .cls = OC_SHAPE, .lo = 1, .hi = 1 << 16, .models = "gpt",
  .help = "gpt: tokens per sequence (default 64)")
X(mlp_width, .name = "mlp-width", .meta = "N", .kind = OPT_INT, .cls = OC_SHAPE, .lo = 1, .hi = 1 << 20,
  .models = "gpt", .help = "gpt: each block's MLP width (default 4 * width)")
X(dropout, .name = "dropout", .meta = "P", .kind = OPT_REAL, .cls = OC_SETTING, .lo = 0, .hi = 0.95, .models = "gpt",
  .help = "gpt: dropout probability (default 0)")
X(checkpoint_activations, .name = "checkpoint-activations", .meta = "", .kind = OPT_FLAG, .cls = OC_SETTING,
  .models = "gpt",
  .help = "gpt: keep only each block's input and recompute the block in backward (less memory, ~1/3 more time)")

X(epochs, .name = "epochs", .meta = "N", .kind = OPT_INT, .cls = OC_SETTING, .lo = 1, .hi = 1e6,
  .help = "passes over the training set (default 3; gpt: see --steps)")
X(steps, .name = "steps", .meta = "N", .kind = OPT_INT, .cls = OC_SETTING, .lo = 1, .hi = (double)CLI_MAX_STEPS,
  .help = "optimizer steps, instead of --epochs (default: gpt 1000)")
X(batch, .name = "batch", .meta = "B", .kind = OPT_INT, .cls = OC_SETTING, .lo = 1, .hi = 1 << 20,
  .help = "examples (gpt: sequences) per micro-batch (default: cnn 64, mlp 128, gpt 32)")
X(accum, .name = "accum", .meta = "N", .kind = OPT_INT, .cls = OC_SETTING, .lo = 1, .hi = 1 << 16,
  .help = "micro-batches per optimizer step (gradient accumulation; default 1)")
X(optim, .name = "optim", .meta = "NAME", .kind = OPT_STR, .cls = OC_SHAPE, .choices = "sgd|adam|adamw",
  .help = "optimizer: sgd, adam or adamw (default adam)")
X(lr, .name = "lr", .meta = "X", .kind = OPT_REAL, .cls = OC_SETTING, .lo = 1e-12, .hi = 1e3,
  .help = "learning rate (default: sgd 0.05; adam/adamw: cnn 0.003, gpt 0.002, mlp 0.001)")
X(momentum, .name = "momentum", .meta = "X", .kind = OPT_REAL, .cls = OC_SETTING, .lo = 0, .hi = 0.9999,
  .help = "sgd: momentum (default 0.9)")
X(weight_decay, .name = "weight-decay", .meta = "X", .kind = OPT_REAL, .cls = OC_SETTING, .lo = 0, .hi = 10,
  .help = "weight decay (default 0; adamw 0.01)")
X(schedule, .name = "schedule", .meta = "NAME", .kind = OPT_STR, .cls = OC_SETTING, .choices = "constant|step|cosine",
  .help = "lr schedule: constant, step or cosine (default: mlp constant, else cosine)")
X(warmup, .name = "warmup", .meta = "N", .kind = OPT_INT, .cls = OC_SETTING, .lo = 0, .hi = 1e12,
  .help = "linear lr warm-up over the first N steps (default: gpt 100 or steps/10, else 0)")
X(step_size, .name = "step-size", .meta = "N", .kind = OPT_INT, .cls = OC_SETTING, .lo = 1, .hi = 1e12,
  .help = "step schedule: multiply the lr by --gamma every N steps (default 1000)")
X(gamma, .name = "gamma", .meta = "X", .kind = OPT_REAL, .cls = OC_SETTING, .lo = 0, .hi = 1,
  .help = "step schedule: the factor (default 0.1)")
X(min_lr, .name = "min-lr", .meta = "X", .kind = OPT_REAL, .cls = OC_SETTING, .lo = 0, .hi = 1e3,
  .help = "cosine schedule: the final lr (default 0)")
X(clip, .name = "clip", .meta = "X", .kind = OPT_REAL, .cls = OC_SETTING, .lo = 1e-12, .hi = 1e12,
  .help = "clip the global gradient norm to X (default: measured, not clipped)")
X(beta1, .name = "beta1", .meta = "X", .kind = OPT_REAL, .cls = OC_SETTING, .lo = 0, .hi = 1,
  .help = "adam/adamw: beta1, in [0, 1) (default 0.9)")
X(beta2, .name = "beta2", .meta = "X", .kind = OPT_REAL, .cls = OC_SETTING, .lo = 0, .hi = 1,
  .help = "adam/adamw: beta2, in [0, 1) (default 0.999; nanoGPT's small runs 0.99, GPT-2 124M 0.95)")
X(eps, .name = "eps", .meta = "X", .kind = OPT_REAL, .cls = OC_SETTING, .lo = 1e-30, .hi = 1,
  .help = "adam/adamw: epsilon, > 0 (default 1e-8)")
X(decay_all, .name = "decay-all", .meta = "", .kind = OPT_FLAG, .cls = OC_SETTING,
  .help = "weight decay on every parameter (default: on the weights of 2 or more dimensions only, as "
  "GPT-2 / nanoGPT: not on biases and norm weights)")
X(no_bias, .name = "no-bias", .meta = "", .kind = OPT_FLAG, .cls = OC_SHAPE, .models = "gpt",
  .help = "gpt: linears and LayerNorms without biases (nanoGPT's bias=False)")
X(gelu, .name = "gelu", .meta = "FORM", .kind = OPT_STR, .cls = OC_SHAPE, .choices = "tanh|exact", .models = "gpt",
  .help = "gpt: the MLP's GELU: tanh (GPT-2's, the default) or exact (the erf form, nanoGPT's nn.GELU())")
X(warmup_start_factor, .name = "warmup-start-factor", .meta = "X", .kind = OPT_REAL, .cls = OC_SETTING, .lo = 0,
  .hi = 1, .help = "the warm-up's first lr is X * lr, rising linearly to lr (PyTorch's LinearLR start_factor; "
  "default 1/(warmup+1): nanoGPT's lr * (t+1) / (warmup+1), never 0)")
X(seed, .name = "seed", .meta = "S", .kind = OPT_U64, .cls = OC_SETTING,
  .help = "seed for the weights, the data order and dropout (default 0)")
X(threads, .name = "threads", .meta = "T", .kind = OPT_INT, .cls = OC_RUN, .lo = 0, .hi = 1024,
  .help = "kernel threads, 0 for every core (default 0)")
X(device, .name = "device", .meta = "NAME", .kind = OPT_STR, .cls = OC_RUN, .choices = "cpu|cuda",
  .help = "cpu or cuda (default cpu)")
X(flush_denormal, .name = "flush-denormal", .meta = "", .kind = OPT_FLAG, .cls = OC_SETTING,
  .help = "flush subnormal floats to zero on the CPU, as torch.set_flush_denormal(True): arithmetic reads and "
  "writes values below ~1.2e-38 as 0, sparing the CPU's slow path for them (also AMPC_FLUSH_DENORMAL=1; "
  "kept in the checkpoint)")

X(precision, .name = "precision", .meta = "P", .kind = OPT_STR, .cls = OC_SETTING, .choices = "fp32|bf16|fp16",
  .help = "fp32, bf16 autocast, or fp16 autocast with the grad scaler (default bf16; fp16 with --device cuda)")
X(no_scaler, .name = "no-scaler", .meta = "", .kind = OPT_FLAG, .cls = OC_SETTING, .fp16 = OPT_FP16,
  .help = "fp16 without the grad scaler")
X(param_dtype, .name = "param-dtype", .meta = "DT", .kind = OPT_STR, .cls = OC_SHAPE, .choices = "fp32|bf16|fp16",
  .help = "bf16 / fp16 (= --precision): weights in 16 bits, norms and embeddings fp32, fp32 masters in the "
  "optimizer (Apex O2; default fp32)")
X(optim_state, .name = "optim-state", .meta = "DT", .kind = OPT_STR, .cls = OC_SHAPE, .choices = "fp32|bf16|bf16-sr",
  .help = "optimizer state (Adam's moments, SGD's momentum): fp32, bf16, or bf16-sr (stochastic rounding); "
  "updated in fp32 (default fp32)")
X(init_scale, .name = "init-scale", .meta = "X", .kind = OPT_REAL, .cls = OC_SETTING, .lo = 1e-30, .hi = 1e30,
  .fp16 = SC_DYNAMIC, .help = "the grad scaler's initial scale (default 65536), or auto: measured on the "
  "first step, the largest power of two 16 times below the largest whose gradients stay finite, "
  "at most 65536 or --max-scale (step 0 only; a resumed run keeps its scale)")
X(growth_interval, .name = "growth-interval", .meta = "N", .kind = OPT_INT, .cls = OC_SETTING, .lo = 1, .hi = 1e12,
  .fp16 = SC_DYNAMIC, .help = "clean steps before the scale grows (default 2000)")
X(growth_factor, .name = "growth-factor", .meta = "X", .kind = OPT_REAL, .cls = OC_SETTING, .lo = 1, .hi = 1e6,
  .fp16 = SC_DYNAMIC, .help = "the scale is multiplied by X (> 1) after --growth-interval clean steps (default 2)")
X(backoff_factor, .name = "backoff-factor", .meta = "X", .kind = OPT_REAL, .cls = OC_SETTING, .lo = 0, .hi = 1,
  .fp16 = SC_DYNAMIC,
  .help = "the scale is multiplied by X (between 0 and 1) at a step with inf/NaN gradients (default 0.5)")
X(hysteresis, .name = "hysteresis", .meta = "N", .kind = OPT_INT, .cls = OC_SETTING, .lo = 1, .hi = 1e6,
  .fp16 = SC_DYNAMIC,
  .help = "the first N-1 steps with inf/NaN gradients since the scale last grew keep the scale; the N-th "
  "and each one after it back off, until the scale grows (Megatron-LM; default 1: every one backs off); "
  "every such step is skipped")
X(min_scale, .name = "min-scale", .meta = "X", .kind = OPT_REAL, .cls = OC_SETTING, .lo = 1e-30, .hi = 1e30,
  .fp16 = SC_DYNAMIC, .zero_off = true, .help = "the scale never backs off below X (0: no bound, the default)")
X(max_scale, .name = "max-scale", .meta = "X", .kind = OPT_REAL, .cls = OC_SETTING, .lo = 1e-30, .hi = 1e30,
  .fp16 = SC_DYNAMIC, .zero_off = true, .help = "the scale never grows above X (0: no bound, the default)")
X(static_scale, .name = "static-scale", .meta = "S", .kind = OPT_REAL, .cls = OC_SETTING, .lo = 1e-30, .hi = 1e30,
  .fp16 = SC_SCALER, .zero_off = true,
  .help = "a fixed scale S: never grows or backs off; a step with inf/NaN gradients is still skipped "
  "(not with the dynamic scaler's options; 0: dynamic, the default)")
X(health_every, .name = "health-every", .meta = "N", .kind = OPT_INT, .cls = OC_RUN, .lo = 1, .hi = 1e12,
  .help = "every N steps, the f16 health of the gradients in the log and the progress line: the share "
  "of elements that f16 flushes to zero, makes subnormal, or overflows, at the scale and unscaled; with "
  "16-bit weights, the stalled updates (weights an update did not move; remedies: fp32 masters, the default, "
  "or --weight-update sr) (default: off)")
X(max_skips, .name = "max-skips", .meta = "N", .kind = OPT_INT, .cls = OC_SETTING, .lo = 0, .hi = 1e12,
  .fp16 = SC_SCALER,
  .help = "stop with an error after N steps skipped in a row (inf/NaN at every scale), 0: never (default 32)")

X(val_batches, .name = "val-batches", .meta = "N", .kind = OPT_INT, .cls = OC_SETTING, .lo = 1, .hi = 1e6,
  .models = "gpt", .help = "gpt: validation batches for the val loss (default 20)")
X(save, .name = "save", .meta = "DIR", .kind = OPT_STR, .cls = OC_RUN,
  .help = "save DIR/" CHECKPOINT_FILE " every --save-every steps and at the end")
X(save_every, .name = "save-every", .meta = "N", .kind = OPT_INT, .cls = OC_RUN, .lo = 0, .hi = (double)CLI_MAX_STEPS,
  .help = "steps between checkpoints, 0 for the end only (default 1000)")
X(stop_at, .name = "stop-at", .meta = "N", .kind = OPT_INT, .cls = OC_RUN, .lo = 1, .hi = (double)CLI_MAX_STEPS,
  .help = "stop after step N and save, to --resume later (the lr schedule spans the run)")
X(resume, .name = "resume", .meta = "DIR", .kind = OPT_STR, .cls = OC_RUN,
  .help = "continue the run saved in DIR (its settings; saves there unless --save)")
X(log, .name = "log", .meta = "FILE", .kind = OPT_STR, .cls = OC_RUN,
  .help = "write one JSON line per optimizer step to FILE (see ampc plot); never over a non-log file")
X(log_mode, .name = "log-mode", .meta = "MODE", .kind = OPT_STR, .cls = OC_RUN, .choices = "append|replace",
  .help = "an existing log at --log: append or replace (default: refused; append on --resume)")
X(log_every, .name = "log-every", .meta = "N", .kind = OPT_INT, .cls = OC_RUN, .lo = 1, .hi = 1e12,
  .help = "steps between progress lines (default: about 20 a run)")
X(profile, .name = "profile", .meta = "[FILE]", .kind = OPT_STR, .cls = OC_RUN, .absent = PROFILE_DEFAULT_FILE,
  .help = "after the warm-up, profile steps: print the op table and the verdict, write the trace to FILE "
  "(default " PROFILE_DEFAULT_FILE ", for ui.perfetto.dev; docs/profiling.md)")
X(profile_steps, .name = "profile-steps", .meta = "N", .kind = OPT_INT, .cls = OC_RUN, .lo = 1, .hi = 1e6,
  .help = "--profile: steps profiled (default 5)")
X(profile_warmup, .name = "profile-warmup", .meta = "N", .kind = OPT_INT, .cls = OC_RUN, .lo = 0, .hi = 1e6,
  .help = "--profile: steps run before profiling starts, after the start or resume (default 2)")
X(dry_run, .name = "dry-run", .meta = "", .kind = OPT_FLAG, .cls = OC_RUN,
  .help = "print the memory the run needs (estimated) and what is available, and stop")
X(no_memory_check, .name = "no-memory-check", .meta = "", .kind = OPT_FLAG, .cls = OC_RUN,
  .help = "run even when the memory estimate does not fit (also AMPC_NO_MEMORY_CHECK=1)")
X(memory, .name = "memory", .meta = "", .kind = OPT_FLAG, .cls = OC_RUN,
  .help = "at the end, print the memory per category (parameters, gradients, optimizer state, activations, "
  "cast cache, temporaries, workspace, data) and per phase, on each device")

X(bucket_mb, .name = "bucket-mb", .meta = "X", .kind = OPT_REAL, .cls = OC_RUN, .lo = 1e-3, .hi = 1e6,
  .help = "under mpirun: gradients all-reduced in buckets of X MiB during backward (default 25)")
X(compress, .name = "compress", .meta = "DT", .kind = OPT_STR, .cls = OC_RUN, .choices = "none|bf16|fp16",
  .help = "under mpirun: send the gradient buckets rounded to bf16 / fp16, summed in fp32 (default none)")
X(zero, .name = "zero", .meta = "N", .kind = OPT_INT, .cls = OC_RUN, .lo = 0, .hi = 1,
  .help = "under mpirun: 1 shards the optimizer state over the ranks (ZeRO stage 1; default 0: DDP)")
X(dist_timeout, .name = "dist-timeout", .meta = "S", .kind = OPT_REAL, .cls = OC_RUN, .lo = 1e-3, .hi = 1e7,
  .help = "under mpirun: seconds a rank waits for the others before it ends the job (default "
  "AMPC_DIST_TIMEOUT or 300)")
X(tensorboard, .name = "tensorboard", .meta = "DIR", .kind = OPT_STR, .cls = OC_RUN,
  .help = "write TensorBoard event files into DIR (created when missing): the log's values per step, gradient "
  "histograms at --health-every's steps (tensorboard --logdir DIR)")
X(data_bin, .name = "data-bin", .meta = "FILE", .kind = OPT_STR, .cls = OC_SETTING, .models = "gpt",
  .help = "gpt: train on token ids: nanoGPT's train.bin (uint16) or an llm.c shard, instead of --data's text")
X(val_bin, .name = "val-bin", .meta = "FILE", .kind = OPT_STR, .cls = OC_SETTING, .models = "gpt",
  .help = "gpt with --data-bin: the token file the validation loss is measured on (val.bin)")
X(vocab, .name = "vocab", .meta = "N", .kind = OPT_INT, .cls = OC_SHAPE, .lo = 1, .hi = 65536, .models = "gpt",
  .help = "gpt with --data-bin: token ids 0 .. N-1 (default: the vocab_size written beside --data-bin: "
  "FILE.json, meta.json or nanoGPT's meta.pkl)")
X(init_from, .name = "init-from", .meta = "DIR", .kind = OPT_STR, .cls = OC_RUN,
  .help = "start from the weights saved in DIR (a run's --save, or ampc import): its model and shape, a fresh "
  "optimizer, scaler and schedule from step 0 (fine-tuning)")
X(detect_anomaly, .name = "detect-anomaly", .meta = "", .kind = OPT_FLAG, .cls = OC_RUN,
  .help = "check every op's result and gradient for inf/NaN: the first stops the run (exit 1) naming the op, "
  "its module, phase and dtypes, on stderr and in --log (docs/debugging.md)")
X(anomaly_continue, .name = "anomaly-continue", .meta = "", .kind = OPT_FLAG, .cls = OC_RUN,
  .help = "--detect-anomaly that goes on: each op that makes an inf/NaN is reported once, the step is "
  "skipped by the scaler as usual")
X(fp32_modules, .name = "fp32-modules", .meta = "PATH,..", .kind = OPT_STR, .cls = OC_SETTING,
  .help = "run these modules (PyTorch's module paths: h.0.attn, ln_f, lm_head, 0 ...) and those under them in "
  "f32 under autocast, as a nested autocast(enabled=False) does (docs/debugging.md)")
X(policy, .name = "policy", .meta = "FILE", .kind = OPT_STR, .cls = OC_SETTING,
  .help = "the autocast policy in FILE: modules kept in f32 and per-op categories (ampc policy search writes "
  "one; docs/debugging.md); the log's start record names it and its hash")
X(master_weights, .name = "master-weights", .meta = "on|off", .kind = OPT_STR, .cls = OC_SHAPE, .choices = "on|off",
  .help = "with --param-dtype bf16/fp16: off updates the 16-bit weights in place, without fp32 masters: an "
  "update under half a unit in the weight's last place is lost (the stall, --health-every's \"stalled\"; "
  "default on)")
X(weight_update, .name = "weight-update", .meta = "HOW", .kind = OPT_STR, .cls = OC_SHAPE, .choices = "nearest|sr",
  .help = "with --param-dtype bf16: sr stores each updated weight with stochastic rounding instead of fp32 "
  "masters (the weight is right in expectation; no extra memory; default nearest)")
/* clang-format on */
