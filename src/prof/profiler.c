/*
 * profiler.c - the profiler's and the phases' public calls (ampc.h:
 * amp_profiler_*, amp_phase_begin / amp_phase_end) over the recorder of
 * src/record/profile.c: the checks of the calls' order, with the error
 * each misuse gets (the recorder, below base, sets none).
 */
#include "base/base.h"
#include "record/profile.h"

amp_profiler_opts amp_profiler_defaults(void)
{
    return (amp_profiler_opts){.record_shapes = true, .memory = true, .max_events = 0};
}

amp_status amp_profiler_start(const amp_profiler_opts *o)
{
    const amp_profiler_opts defaults = amp_profiler_defaults();
    if (!prof_start(o ? o : &defaults))
        return amp_set_error(AMP_ERR_STATE, "profiler_start: the profiler is already running");
    return AMP_OK;
}

void amp_profiler_step(void) { prof_step(); }

amp_status amp_profiler_stop(void)
{
    if (!prof_stop())
        return amp_set_error(AMP_ERR_STATE, "profiler_stop: the profiler is not running");
    return AMP_OK;
}

bool amp_profiler_enabled(void) { return prof_on(); }

void amp_profiler_reset(void) { prof_reset(); }

size_t amp_profiler_num_events(size_t *dropped) { return prof_num_events(dropped); }

void amp_phase_begin(amp_phase p) { prof_phase_begin(p); }

amp_status amp_phase_end(amp_phase p)
{
    amp_phase open = AMP_PHASE_OTHER;
    const char *asked = amp_phase_name(p) ? amp_phase_name(p) : "?";
    switch (prof_phase_end(p, &open)) {
    case PROF_PHASE_NONE_OPEN:
        return amp_set_error(AMP_ERR_STATE, "phase_end: no phase is open (asked to end '%s')", asked);
    case PROF_PHASE_OTHER_OPEN:
        return amp_set_error(AMP_ERR_STATE, "phase_end: the open phase is '%s', not '%s'", amp_phase_name(open),
                             asked);
    default:
        return AMP_OK;
    }
}
