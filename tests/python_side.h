/*
 * python_side.h - what the tests whose other side is a Python package (the
 * real client: torch and safetensors, tensorboard) share: finding a Python
 * that imports it, and running the test's script with it. The packages
 * are no build dependency: a test that finds none skips what needs them
 * (exit 77 where nothing else failed). Header-only, over
 * test_cli_util.h's cli_capture.
 *
 * Defines: python_exe, python_script, python_find, python_run.
 */
#ifndef AMPC_PYTHON_SIDE_H
#define AMPC_PYTHON_SIDE_H

#include "test_cli_util.h"

static char python_exe[512], python_script[1024];

/* The first of $AMPC_TORCH_PYTHON, python3 and the source tree's
 * .bench-venv (scripts/torch-deps.sh fills it) that runs `import IMPORTS`
 * into python_exe, and $AMPC_SOURCE_DIR/tests/SCRIPT into python_script.
 * Whether one did. */
static inline bool python_find(const char *script, const char *imports)
{
    const char *src = getenv("AMPC_SOURCE_DIR"), *tp = getenv("AMPC_TORCH_PYTHON");
    char venv[1100];
    snprintf(python_script, sizeof python_script, "%s/tests/%s", src ? src : ".", script);
    snprintf(venv, sizeof venv, "%s/.bench-venv/bin/python", src ? src : ".");
    const char *cands[] = {tp && *tp ? tp : NULL, "python3", venv};
    for (int i = 0; i < 3; i++) {
        char probe[1300];
        if (!cands[i])
            continue;
        snprintf(python_exe, sizeof python_exe, "%s", cands[i]);
        snprintf(probe, sizeof probe, "'%s' -c 'import %s' > /dev/null 2>&1", python_exe, imports);
        if (system(probe) == 0)
            return true;
    }
    return false;
}

/* Runs python_script with args (printf-style), stderr joined to stdout,
 * into cli_out; returns its exit code. */
static inline int python_run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline int python_run(const char *fmt, ...)
{
    char args[6000], cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "'%s' '%s' %s 2>&1", python_exe, python_script, args);
    return cli_capture(cmd);
}

#endif
