/*
 * test_cli_memory_report.c - `ampc train --memory` and the 'peak memory'
 * line, through the ampc program:
 *
 *   - 'peak memory X MiB (model Y + data Z)': the data set's part Z above
 *     the images' size (they are f32 in memory) and the same as the
 *     report's data at the peak;
 *   - --memory prints the table on the host: every category with its
 *     current and peak MiB, the total, the makeup of the peak (which sums
 *     to it) and the peak per phase; without --memory no table;
 *   - --memory is a flag: a value after it is refused.
 */
#include "test_cli_util.h"

#include <stdlib.h>

static char images[256];

static const char *const cats[8] = {"parameters", "gradients", "optimizer state", "activations",
                                    "cast cache", "temporaries", "workspace", "data"};

static void test_the_peak_line_names_the_data_apart(void)
{
    const char *precisions[2] = {"fp32", "bf16"};
    for (int p = 0; p < 2; p++) {
        CHECK_EQ_INT(cli_run("train --model mlp --hidden 32 --batch 16 --steps 2 --threads 2 --precision %s "
                             "--data %s",
                             precisions[p], images),
                     0);
        double peak = cli_value_after("peak memory "), model = cli_value_after("MiB (model "),
               data = cli_value_after(" + data ");
        CHECK_MSG(peak > 0 && model > 0 && data > 0, "no 'peak memory X MiB (model Y + data Z)':\n%s", cli_out);
        /* 512 train + 512 test 28x28 images in f32. */
        CHECK_MSG(data >= 1024 * 784 * 4 / (1024.0 * 1024.0), "data %g MiB", data);
        CHECK_MSG(!strstr(cli_out, "memory on cpu"), "a table without --memory:\n%s", cli_out);
    }
}

static void test_memory_prints_the_categories_table(void)
{
    CHECK_EQ_INT(cli_run("train --model mlp --hidden 32 --batch 16 --steps 2 --threads 2 --precision bf16 "
                         "--memory --data %s",
                         images),
                 0);
    const char *t = strstr(cli_out, "memory on cpu (MiB)");
    CHECK_MSG(t, "no table:\n%s", cli_out);
    if (!t)
        return;
    for (int c = 0; c < 8; c++) {
        char label[64];
        snprintf(label, sizeof label, "\n  %s ", cats[c]);
        const char *row = strstr(t, label);
        CHECK_MSG(row, "no row for %s:\n%s", cats[c], t);
        if (!row)
            continue;
        char *end;
        double cur = strtod(row + strlen(label), &end), peak = strtod(end, NULL);
        CHECK_MSG(cur >= 0 && peak >= cur, "%s: current %g, peak %g", cats[c], cur, peak);
        if (c == 4) /* the cast cache: something under bf16 autocast */
            CHECK_MSG(peak > 0, "no cast cache under bf16:\n%s", t);
    }
    /* The makeup of the peak sums to it (each figure rounded to 0.01). */
    const char *at = strstr(t, "at the peak (");
    CHECK_MSG(at, "no makeup of the peak:\n%s", t);
    if (at) {
        double total = atof(at + strlen("at the peak (")), sum = 0;
        for (int c = 0; c < 8; c++) {
            const char *v = strstr(at, cats[c]);
            CHECK_MSG(v, "no %s in the makeup", cats[c]);
            if (v)
                sum += atof(v + strlen(cats[c]));
        }
        CHECK_MSG(fabs(sum - total) <= 0.05, "the makeup sums to %g, the peak is %g", sum, total);
        /* The line's data is the data category at the peak (each rounded). */
        const char *d = strstr(at, "data ");
        double line_data = cli_value_after(" + data ");
        CHECK_MSG(d && fabs(atof(d + 5) - line_data) <= 0.06, "the line's data %g, at the peak %s", line_data,
                  d ? d : "(none)");
        CHECK_MSG(fabs(total - cli_value_after("peak memory ")) <= 0.06, "the peak %g, the line's %g", total,
                  cli_value_after("peak memory "));
    }
    CHECK_MSG(strstr(t, "peak per phase"), "no phases:\n%s", t);
}

static void test_memory_is_a_flag(void)
{
    CHECK(cli_run("train --model mlp --memory=yes --data %s", images) != 0);
    CHECK_MSG(strstr(cli_out, "--memory") && strstr(cli_out, "takes no value"), "the message:\n%s", cli_out);
}

int main(void)
{
    cli_init("memory-report");
    cli_write_noise_images(cli_path(images, sizeof images, "images"), 512, 3);
    RUN_IF(cli_have_binary, test_the_peak_line_names_the_data_apart);
    RUN_IF(cli_have_binary, test_memory_prints_the_categories_table);
    RUN_IF(cli_have_binary, test_memory_is_a_flag);
    cli_cleanup();
    return harness_done();
}
