/*
 * fuzz_settings.c - libFuzzer target: the input is the run-settings JSON
 * the ampc program keeps in a checkpoint's metadata (settings_to_json's
 * output). It is read as --resume reads it: settings_from_json, merged
 * under an empty command line (settings_merge) and checked
 * (opts_resolve). Settings that pass must write back (settings_to_json)
 * and read again to the same JSON; anything else stops the fuzzer.
 * Seeds: fuzz/corpus/settings.
 */
#include "settings.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Resolved options o must write, read back and write again to the same
 * JSON, as a resumed run that saves again does. */
static void round_trip(const train_opts *o, const run_info *ri)
{
    char *json = settings_to_json(o, ri), *again = NULL;
    train_opts back;
    run_info ri2 = {0};
    train_opts_default(&back);
    if (json && settings_from_json(json, "fuzz (written back)", &back, &ri2) >= 0) {
        fprintf(stderr, "fuzz_settings: settings that were read and resolved do not read back:\n%s\n", json);
        __builtin_trap();
    }
    if (json && (again = settings_to_json(&back, &ri2)) && strcmp(json, again) != 0) {
        fprintf(stderr, "fuzz_settings: the round trip changes the settings:\n%s\n%s\n", json, again);
        __builtin_trap();
    }
    free(again);
    free(json);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    train_opts ck, o;
    run_info ri = {0};
    train_opts_default(&ck);
    if (settings_from_json(text, "fuzz", &ck, &ri) < 0) {
        train_opts_default(&o);
        o.resume = "fuzz";
        if (settings_merge(&o, &ck, "fuzz") < 0 && opts_resolve(&o) < 0)
            round_trip(&o, &ri);
    }
    settings_forget();
    free(text);
    return 0;
}
