/*
 * memory_report.c - the memory categories of each device's allocator, as
 * figures (amp_memory_get_categories) and as a table
 * (amp_memory_report): per category what is in use and its peak, then per
 * phase of the step the allocator's peak within it and the categories that
 * made it up. Each device's allocator keeps the figures in its ledger
 * (record/mem_ledger.h) and its backend hands them out (the table's
 * memory_categories); reading them never starts a device.
 */
#include "backend/backend.h"
#include "base/base.h"

#include <string.h>

amp_status amp_memory_get_categories(amp_device dev, amp_memory_categories *out)
{
    if (!out)
        return amp_set_error(AMP_ERR_ARG, "memory_get_categories: NULL output");
    if ((unsigned)dev >= AMP_DEVICE_COUNT)
        return amp_set_error(AMP_ERR_DEVICE, "memory_get_categories: invalid device %d", (int)dev);
    const amp_backend *be = backend_of(dev);
    if (!be->memory_categories) {
        /* A device this build cannot use has allocated nothing. */
        memset(out, 0, sizeof *out);
        return AMP_OK;
    }
    return be->memory_categories(out);
}

static double mib(size_t b) { return (double)b / (1024.0 * 1024.0); }

/* The table of one device's figures. */
static void report_device(FILE *f, const char *dev, const amp_memory_categories *m)
{
    fprintf(f, "memory on %s (MiB): in use now and the peak, per category\n", dev);
    fprintf(f, "  %-16s %10s %10s\n", "category", "current", "peak");
    for (int c = 0; c < AMP_MEM_CATEGORY_COUNT; c++)
        fprintf(f, "  %-16s %10.2f %10.2f\n", amp_memory_category_name((amp_mem_category)c), mib(m->current[c]),
                mib(m->peak[c]));
    fprintf(f, "  %-16s %10.2f %10.2f\n", "total", mib(m->total), mib(m->total_peak));
    /* The overall peak is the largest phase peak: how it was made up. */
    int at = 0;
    for (int p = 1; p < AMP_PHASE_COUNT; p++)
        if (m->phase_peak[p] > m->phase_peak[at])
            at = p;
    fprintf(f, "  at the peak (%.2f, in %s):", mib(m->phase_peak[at]), amp_phase_name((amp_phase)at));
    for (int c = 0; c < AMP_MEM_CATEGORY_COUNT; c++)
        fprintf(f, "%s %s %.2f", c ? "," : "", amp_memory_category_name((amp_mem_category)c),
                mib(m->phase_peak_by[at][c]));
    fprintf(f, "\n");
    fprintf(f, "  peak per phase: the total, and its largest categories\n");
    for (int p = 0; p < AMP_PHASE_COUNT; p++) {
        if (!m->phase_peak[p])
            continue;
        fprintf(f, "  %-16s %10.2f ", amp_phase_name((amp_phase)p), mib(m->phase_peak[p]));
        /* The three largest categories at that peak, largest first. */
        bool used[AMP_MEM_CATEGORY_COUNT] = {0};
        for (int k = 0; k < 3; k++) {
            int best = -1;
            for (int c = 0; c < AMP_MEM_CATEGORY_COUNT; c++)
                if (!used[c] && m->phase_peak_by[p][c] &&
                    (best < 0 || m->phase_peak_by[p][c] > m->phase_peak_by[p][best]))
                    best = c;
            if (best < 0)
                break;
            used[best] = true;
            fprintf(f, "%s%s %.2f", k ? ", " : "  ", amp_memory_category_name((amp_mem_category)best),
                    mib(m->phase_peak_by[p][best]));
        }
        fputc('\n', f);
    }
}

amp_status amp_memory_report(FILE *f)
{
    if (!f)
        f = stdout;
    for (int d = 0; d < AMP_DEVICE_COUNT; d++) {
        amp_memory_categories m;
        amp_status st = amp_memory_get_categories((amp_device)d, &m);
        if (st != AMP_OK)
            return st;
        /* The host always; a device once it has allocated. */
        if (d != AMP_CPU && m.total_peak == 0)
            continue;
        report_device(f, amp_device_name((amp_device)d), &m);
    }
    return AMP_OK;
}
