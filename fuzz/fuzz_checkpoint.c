/*
 * fuzz_checkpoint.c - libFuzzer target: the input is a checkpoint file,
 * DIR/checkpoint.safetensors. It goes through the library's loader
 * (amp_checkpoint_load: header, entries, layout, optimizer and scaler
 * state) into an mlp with Adam and the scaler, into one with SGD and no
 * scaler, into one in bf16 with f32 masters and bf16 Adam state (the
 * memory levers), and into the model alone; into a gpt with Adam and
 * alone (older gpt files are converted on load: checkpoint_convert.c);
 * then through the ampc program's
 * reader of the run settings in its header (checkpoint_read_settings:
 * header and settings JSON). Seeds: fuzz/corpus/checkpoint (fuzz_seeds;
 * gpt-*.safetensors by hand, fuzz/README.md).
 */
#include "checkpoint_cli.h"
#include "settings.h"
#include "util.h"

#include <stdlib.h>

static fuzz_run adam, sgd, levers, gpt;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    fuzz_run_make(&adam, FUZZ_ADAM);
    fuzz_run_make(&sgd, FUZZ_SGD);
    fuzz_run_make(&levers, FUZZ_LEVERS);
    fuzz_run_make(&gpt, FUZZ_GPT);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file(CHECKPOINT_FILE, data, size);
    int64_t step = 0;
    char *settings = NULL;
    amp_checkpoint_load(path, adam.m, adam.o, adam.s, &step, &settings);
    free(settings);
    amp_checkpoint_load(path, sgd.m, sgd.o, NULL, NULL, NULL);
    amp_checkpoint_load(path, levers.m, levers.o, levers.s, NULL, NULL);
    settings = NULL;
    amp_checkpoint_load(path, adam.m, NULL, NULL, &step, &settings);
    free(settings);
    amp_checkpoint_load(path, gpt.m, gpt.o, gpt.s, NULL, NULL);
    amp_checkpoint_load(path, gpt.m, NULL, NULL, NULL, NULL);
    amp_clear_error();

    train_opts ck;
    run_info ri;
    checkpoint_read_settings(fuzz_dir(), &ck, &ri);
    settings_forget();
    return 0;
}
