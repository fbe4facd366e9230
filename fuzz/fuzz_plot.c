/*
 * fuzz_plot.c - libFuzzer target: the input is a training log (JSON
 * Lines) as `ampc plot` reads it (plot_read; the SVG drawing is not part
 * of it). Seeds: fuzz/corpus/plot.
 */
#include "plot.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file("log.jsonl", data, size);
    plot_data d;
    if (plot_read(path, &d) == AMP_OK)
        plot_data_free(&d);
    amp_clear_error();
    return 0;
}
