/*
 * fuzz_plot.c - libFuzzer target: the input is a training log (JSON
 * Lines) as `ampc plot` reads and draws it (plot_file: plot_read, then
 * the SVG). The drawing must stay bounded for any log: an SVG over
 * MAX_SVG bytes is reported as a crash (`ampc plot` once wrote 1.26 GB
 * for steps near 2^53), and so is a non-finite coordinate. Seeds:
 * fuzz/corpus/plot.
 */
#include "plot.h"
#include "util.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_SVG (4 << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Whether text holds "nan" or "inf" as a number of its own (what printf
 * makes of a non-finite coordinate): between delimiters of attribute
 * values and point lists, not inside words such as the legend's
 * "NaN/inf losses". */
static bool has_nonfinite_number(const char *text)
{
    static const char *const words[2] = {"nan", "inf"};
    for (int w = 0; w < 2; w++)
        for (const char *p = strstr(text, words[w]); p; p = strstr(p + 1, words[w])) {
            char before = p > text ? p[-1] : ' ', after = p[3];
            if (before == '-' && p - 1 > text)
                before = p[-2];
            if (strchr("\" ,(", before) && after && strchr("\" ,)", after))
                return true;
        }
    return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file("log.jsonl", data, size);
    char svg[4096];
    snprintf(svg, sizeof svg, "%s/plot.svg", fuzz_dir());
    remove(svg);
    if (plot_file(path, svg, NULL) == AMP_OK) {
        struct stat st;
        if (stat(svg, &st) != 0 || st.st_size > MAX_SVG) {
            fprintf(stderr, "fuzz_plot: the SVG is %lld bytes (limit %d)\n", (long long)st.st_size, MAX_SVG);
            abort();
        }
        FILE *f = fopen(svg, "r");
        char *text = f ? calloc(1, (size_t)st.st_size + 1) : NULL;
        if (text && fread(text, 1, (size_t)st.st_size, f) == (size_t)st.st_size &&
            has_nonfinite_number(text)) {
            fprintf(stderr, "fuzz_plot: a non-finite number in the SVG\n");
            abort();
        }
        free(text);
        if (f)
            fclose(f);
    }
    amp_clear_error();
    return 0;
}
