/*
 * trace_check.h - a checker of the profiler's Chrome trace / Perfetto JSON
 * for the tests (test_profile_out.c, test_cli_profile.c): the file parses
 * as JSON (the library's own strict reader, src/io/json.c) and follows the
 * trace-event format as ampc writes it:
 *   - a top-level object with "traceEvents" (an array) and
 *     "displayTimeUnit";
 *   - every event has name (string), ph (one of X i C M), ts, pid, tid
 *     (numbers); "X" has dur >= 0; "i" has scope "s";
 *   - per (pid, tid), in file order: ts never decreases, and complete
 *     events nest (each one ends before the one it starts inside ends);
 *   - with ops_in_phases: every host op event (cat op, backward, cast,
 *     kernel) lies inside a phase event (cat "phase") on its thread.
 * Header-only (static), like test_cli_util.h.
 */
#ifndef AMPC_TRACE_CHECK_H
#define AMPC_TRACE_CHECK_H

#include "harness.h"
#include "io/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TC_MAX_TRACKS 64
#define TC_MAX_DEPTH 64

typedef struct {
    int n_events, n_complete, n_instant, n_counter, n_meta;
    int n_phase, n_op, n_step, n_cast;
    int ops_outside_phases;
    char error[512]; /* the first violation, "" when none */
} trace_report;

typedef struct {
    double pid, tid, last_ts;
    int depth;
    double end[TC_MAX_DEPTH];
    bool phase[TC_MAX_DEPTH];
} tc_track;

static inline double tc_num(const json_value *v, bool *ok)
{
    if (!v || v->type != JSON_NUMBER) {
        *ok = false;
        return 0;
    }
    return strtod(v->str, NULL);
}

static inline const char *tc_str(const json_value *v) { return v && v->type == JSON_STRING ? v->str : NULL; }

/* Checks text[0..len); fills r (r->error names the first problem, with the
 * event's index). Returns whether the trace is valid. */
static inline bool trace_check(const char *text, size_t len, bool ops_in_phases, trace_report *r)
{
    memset(r, 0, sizeof *r);
    const json_value *root;
    char err[256];
    json_doc *doc = json_parse(text, len, &root, err, sizeof err);
    if (!doc) {
        snprintf(r->error, sizeof r->error, "not JSON: %s", err);
        return false;
    }
    static tc_track tracks[TC_MAX_TRACKS];
    int n_tracks = 0;
    const json_value *evs = json_get(root, "traceEvents");
    if (root->type != JSON_OBJECT || !evs || evs->type != JSON_ARRAY || !tc_str(json_get(root, "displayTimeUnit"))) {
        snprintf(r->error, sizeof r->error, "no traceEvents array or displayTimeUnit");
        json_free(doc);
        return false;
    }
    for (int i = 0; i < evs->n && !r->error[0]; i++) {
        const json_value *e = &evs->items[i];
        bool ok = e->type == JSON_OBJECT;
        const char *name = ok ? tc_str(json_get(e, "name")) : NULL, *ph = ok ? tc_str(json_get(e, "ph")) : NULL;
        const char *cat = ok ? tc_str(json_get(e, "cat")) : NULL;
        double ts = ok ? tc_num(json_get(e, "ts"), &ok) : 0;
        double pid = ok ? tc_num(json_get(e, "pid"), &ok) : 0;
        double tid = ok ? tc_num(json_get(e, "tid"), &ok) : 0;
        if (!ok || !name || !ph || strlen(ph) != 1 || !strchr("XiCM", ph[0])) {
            snprintf(r->error, sizeof r->error, "event %d: missing or bad name / ph / ts / pid / tid", i);
            break;
        }
        r->n_events++;
        if (ph[0] == 'M') {
            r->n_meta++;
            continue;
        }
        double dur = 0;
        if (ph[0] == 'X') {
            dur = tc_num(json_get(e, "dur"), &ok);
            if (!ok || dur < 0) {
                snprintf(r->error, sizeof r->error, "event %d (%s): complete event without dur >= 0", i, name);
                break;
            }
            r->n_complete++;
        } else if (ph[0] == 'i') {
            if (!tc_str(json_get(e, "s"))) {
                snprintf(r->error, sizeof r->error, "event %d (%s): instant without scope s", i, name);
                break;
            }
            r->n_instant++;
        } else {
            r->n_counter++;
        }
        tc_track *t = NULL;
        for (int k = 0; k < n_tracks && !t; k++)
            if (tracks[k].pid == pid && tracks[k].tid == tid)
                t = &tracks[k];
        if (!t) {
            if (n_tracks == TC_MAX_TRACKS) {
                snprintf(r->error, sizeof r->error, "more than %d tracks", TC_MAX_TRACKS);
                break;
            }
            t = &tracks[n_tracks++];
            memset(t, 0, sizeof *t);
            t->pid = pid;
            t->tid = tid;
            t->last_ts = -1e300;
        }
        if (ts < t->last_ts) {
            snprintf(r->error, sizeof r->error, "event %d (%s): ts %.3f before the track's previous %.3f", i, name,
                     ts, t->last_ts);
            break;
        }
        t->last_ts = ts;
        /* The open events it starts after (0.1 ns of slack: an end is a sum
         * of two parsed decimals, ts and dur, each exact ns in us). */
        while (t->depth > 0 && ts >= t->end[t->depth - 1] - 1e-4)
            t->depth--;
        if (ph[0] != 'X') {
            if (ph[0] == 'i' && cat && strcmp(cat, "cast") == 0)
                r->n_cast++;
            continue;
        }
        if (t->depth > 0 && ts + dur > t->end[t->depth - 1] + 1e-4) {
            snprintf(r->error, sizeof r->error,
                     "event %d (%s): [%.3f, %.3f] overlaps the event it starts in (ends at %.3f)", i, name, ts,
                     ts + dur, t->end[t->depth - 1]);
            break;
        }
        bool in_phase = false;
        for (int d = 0; d < t->depth; d++)
            in_phase |= t->phase[d];
        bool is_phase = cat && strcmp(cat, "phase") == 0;
        bool is_op = cat && (strcmp(cat, "op") == 0 || strcmp(cat, "backward") == 0 || strcmp(cat, "cast") == 0 ||
                             strcmp(cat, "kernel") == 0);
        r->n_phase += is_phase;
        r->n_op += is_op;
        r->n_step += cat && strcmp(cat, "step") == 0;
        r->n_cast += cat && strcmp(cat, "cast") == 0;
        if (is_op && pid == 0 && !in_phase) {
            r->ops_outside_phases++;
            if (ops_in_phases)
                snprintf(r->error, sizeof r->error, "event %d (%s, %s): an op outside every phase", i, name, cat);
        }
        if (t->depth < TC_MAX_DEPTH) {
            t->end[t->depth] = ts + dur;
            t->phase[t->depth] = is_phase;
            t->depth++;
        }
    }
    json_free(doc);
    return !r->error[0];
}

/* Reads path whole (malloc'd, NUL-terminated) into *len; NULL when it
 * cannot be read. */
static inline char *trace_read(const char *path, size_t *len) { return test_read_file(path, len); }

#endif
