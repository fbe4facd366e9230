/*
 * test_cli_version.c - `ampc --version` names the oneDNN the program runs:
 * its second line is "oneDNN X.Y.Z (built against A.B.C)", X.Y.Z what the
 * library loaded at run time says of itself (dnnl_version(), called here
 * directly: this test links the same libdnnl as the program) and A.B.C
 * the headers' DNNL_VERSION_*; "oneDNN: none" in a build without oneDNN,
 * where the kernels line names no oneDNN either.
 */
#include "test_cli_util.h"

#ifdef AMPC_HAVE_DNNL
#include <dnnl.h>
#endif

/* The first of n lines that starts with prefix; "" when none does. */
static const char *line_with(char **lines, int n, const char *prefix)
{
    for (int i = 0; i < n; i++)
        if (strncmp(lines[i], prefix, strlen(prefix)) == 0)
            return lines[i];
    return "";
}

static void test_version_names_the_linked_onednn(void)
{
    CHECK_EQ_INT(cli_run("--version"), 0);
    CHECK_OUT("ampc " AMPC_VERSION);
    char *lines[16];
    const int n = cli_lines(cli_out, lines, 16); /* cli_out split in place */
    const char *line = line_with(lines, n, "oneDNN"), *kernels = line_with(lines, n, "kernels ");
    CHECK_MSG(*line && *kernels, "no oneDNN line or no kernels line in ampc --version's %d lines", n);
#ifdef AMPC_HAVE_DNNL
    const dnnl_version_t *v = dnnl_version();
    char want[128];
    snprintf(want, sizeof want, "oneDNN %d.%d.%d (built against %d.%d.%d)", v->major, v->minor, v->patch,
             DNNL_VERSION_MAJOR, DNNL_VERSION_MINOR, DNNL_VERSION_PATCH);
    CHECK_MSG(strcmp(line, want) == 0, "ampc --version says '%s', the linked library '%s'", line, want);
    /* The build links the major version it was compiled for (the SONAME
     * carries it): a 2.x program cannot load a 3.x library. */
    CHECK_EQ_INT(v->major, DNNL_VERSION_MAJOR);
    char lib[64];
    snprintf(lib, sizeof lib, "kernels oneDNN %d.%d.%d ", v->major, v->minor, v->patch);
    CHECK_MSG(strncmp(kernels, lib, strlen(lib)) == 0, "the kernels line names another oneDNN: '%s'", kernels);
#else
    CHECK_MSG(strcmp(line, "oneDNN: none") == 0, "ampc --version says '%s' in a build without oneDNN", line);
    CHECK_MSG(strstr(kernels, "oneDNN") == NULL, "the kernels line names a oneDNN: '%s'", kernels);
#endif
}

int main(void)
{
    cli_init("test-cli-version");
    RUN_IF(cli_have_binary, test_version_names_the_linked_onednn);
    cli_cleanup();
    return harness_done();
}
