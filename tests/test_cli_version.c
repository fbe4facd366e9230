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

/* The line of cli_out that starts with prefix, without its newline, in
 * buf; false when there is none. */
static bool out_line(const char *prefix, char *buf, size_t size)
{
    for (const char *p = cli_out; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        if (strncmp(p, prefix, strlen(prefix)) == 0) {
            size_t n = strcspn(p, "\n");
            if (n >= size)
                n = size - 1;
            memcpy(buf, p, n);
            buf[n] = '\0';
            return true;
        }
    }
    return false;
}

static void test_version_names_the_linked_onednn(void)
{
    CHECK_EQ_INT(cli_run("--version"), 0);
    CHECK_OUT("ampc " AMPC_VERSION);
    char line[256], kernels[512];
    CHECK_MSG(out_line("oneDNN", line, sizeof line), "no oneDNN line in:\n%s", cli_out);
    CHECK_MSG(out_line("kernels ", kernels, sizeof kernels), "no kernels line in:\n%s", cli_out);
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
