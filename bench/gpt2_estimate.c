/*
 * gpt2_estimate.c - what `ampc train --dry-run` would estimate for GPT-2
 * 124M's shapes (vocab 50257, width 768, 12 layers of 12 heads, MLP 3072),
 * AdamW, at a batch and sequence length: tools/estimate.c's
 * mem_estimate_run on those settings, no model built. bench/gpt2.sh puts
 * it beside bench_ampc_step --models gpt2's measured peak.
 *
 *   bench_gpt2_estimate [--threads N] [--batch B] [--seq T]
 *                       [--precisions fp32,bf16] [--checkpoint-activations]
 *
 * Prints one JSON object per precision: {"impl": "estimate", "model":
 * "gpt2", "precision", "batch", "seq", "checkpoint", "estimate_mb" (what
 * amp_memory_get_stats would count at the peak, the figure to hold
 * against bench_ampc_step's "peak_mb"), "host_mb" (the whole host
 * estimate, the dry run's total less the program itself)}. The model's
 * context is the sequence length here (the CLI's --context), so wpe is
 * [T, 768] where bench_ampc_step builds [1024, 768]: 3 MiB, and its
 * AdamW state 6 MiB, at most.
 */
#include "estimate.h"

#include <ampc.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    int64_t batch = 4, seq = 1024, threads = 2;
    bool ckpt = false;
    char precisions[64] = "fp32,bf16";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--checkpoint-activations") == 0) {
            ckpt = true;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "gpt2_estimate: %s needs a value\n", argv[i]);
            return 2;
        }
        const char *v = argv[++i];
        if (strcmp(argv[i - 1], "--threads") == 0)
            threads = atoll(v);
        else if (strcmp(argv[i - 1], "--batch") == 0)
            batch = atoll(v);
        else if (strcmp(argv[i - 1], "--seq") == 0)
            seq = atoll(v);
        else if (strcmp(argv[i - 1], "--precisions") == 0)
            snprintf(precisions, sizeof precisions, "%s", v);
        else {
            fprintf(stderr, "gpt2_estimate: unknown option %s\n", argv[i - 1]);
            return 2;
        }
    }
    if (batch < 1 || seq < 1 || seq > 1024 || threads < 1) {
        fprintf(stderr, "gpt2_estimate: --batch and --threads must be >= 1, --seq 1 to 1024\n");
        return 2;
    }
    for (char *p = strtok(precisions, ","); p; p = strtok(NULL, ",")) {
        if (strcmp(p, "fp32") != 0 && strcmp(p, "bf16") != 0 && strcmp(p, "fp16") != 0) {
            fprintf(stderr, "gpt2_estimate: --precisions: unknown '%s' (fp32, bf16, fp16)\n", p);
            return 2;
        }
        train_opts o;
        train_opts_default(&o);
        o.model = "gpt";
        o.layers = 12;
        o.heads = 12;
        o.width = 768;
        o.context = seq;
        o.mlp_width = 3072;
        o.batch = batch;
        o.optim = "adamw";
        o.precision = p;
        o.checkpoint_activations = ckpt;
        run_info ri = {.vocab = 50257};
        run_data rd = {.gpt = true};
        mem_estimate e;
        mem_estimate_run(&o, &ri, &rd, (int)threads, &e);
        printf("{\"impl\": \"estimate\", \"model\": \"gpt2\", \"precision\": \"%s\", \"batch\": %lld, \"seq\": %lld, "
               "\"checkpoint\": %s, \"estimate_mb\": %.1f, \"host_mb\": %.1f}\n",
               p, (long long)batch, (long long)seq, ckpt ? "true" : "false", (double)e.tracked / (1 << 20),
               (double)e.host_total / (1 << 20));
    }
    return 0;
}
