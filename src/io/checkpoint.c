/*
 * checkpoint.c - amp_checkpoint_save: a training run's state in one
 * safetensors file (github.com/huggingface/safetensors, "Format"), so
 * Python's safetensors and PyTorch open it by name. The reader is
 * checkpoint_load.c; what both share is in checkpoint.h.
 *
 * The file:
 *   8 bytes   N, the header length (u64, little-endian)
 *   N bytes   a JSON object: "__metadata__" (string -> string) and, per
 *             tensor, {"dtype": "F32", "shape": [..], "data_offsets":
 *             [begin, end]}; padded with spaces so the data starts at a
 *             multiple of 8
 *   the data  every tensor's raw little-endian bytes, back to back,
 *             offsets relative to the start of the data, covering it
 *
 * What ampc puts in it:
 *   "<module name>"       each model parameter by its PyTorch state_dict
 *                         name ("0.weight", "h.0.attn.qkv.weight"), its
 *                         own dtype
 *   "optim.steps"         I64 [n]: the steps each optimizer parameter took
 *   "optim.<p>.<key>"     state of parameter p that has taken a step, p
 *                         the parameter's module name
 *                         (ckpt_optim_param_name: "optim.0.weight.exp_avg";
 *                         files before the names used its index i), in
 *                         the optimizer's state dtype (F32, or BF16 with
 *                         amp_optim_set_state_dtype; PyTorch's keys:
 *                         momentum_buffer, exp_avg, ...)
 *   "optim.<p>.master"    F32: with master weights on, the master copy of
 *                         16-bit parameter i that has taken a step (the
 *                         parameter itself stays in its own 16-bit dtype,
 *                         as the model holds it: eval and a model-only
 *                         load read it as is; the master is what the
 *                         optimizer needs to resume bit-exact, so it is
 *                         optimizer state, as Apex's and DeepSpeed's
 *                         optimizer state dicts hold theirs)
 *   __metadata__          format "ampc-1", step, settings (the run's JSON),
 *                         rng.seed / rng.offset, optim.kind / lr / n_params
 *                         / total_steps (and its options, for the reader),
 *                         scaler.enabled / scale / growth_factor /
 *                         backoff_factor / growth_interval / growth_tracker
 *                         / steps / skipped / skipped_in_a_row
 *                         (amp_scaler_get_counts) / hysteresis_left
 * Tensors are laid out widest element first, so each starts aligned to its
 * element size.
 *
 * Decisions:
 *   - Save writes "<path>.tmp.<pid>" next to path, fsyncs it, renames it
 *     over path and fsyncs the directory: readers see the old checkpoint or
 *     the new one, never half of one. Any failure removes the temporary.
 *   - A save killed before its rename leaves its temporary behind; the
 *     next save into the same place removes every "<path>.tmp.<pid>" whose
 *     pid is not a live process (ckpt_remove_stale_temps). A live one's is
 *     kept: two processes may be saving to one path, each into its own
 *     temporary, and the other's rename must still find its file. (A
 *     dead run's pid reused by a live process keeps that file until the
 *     process ends: a leak, never a lost save.)
 *   - Load reads the whole file and checks everything (sizes, JSON, dtypes,
 *     shapes, offsets, every parameter and optimizer key, the scaler state)
 *     before it writes anything: a bad file changes nothing. (Only running
 *     out of memory while creating the optimizer's buffers can interrupt
 *     the copy.)
 *   - Exact matches only: a parameter's dtype and shape, the optimizer's
 *     kind and keys. A file without "format" is read as plain safetensors
 *     weights (a model-only load); one with another format is refused.
 *   - Little-endian hosts only (the format's byte order); a big-endian one
 *     gets an error rather than swapped bytes.
 *   - The file does not say which device a tensor was on: save copies
 *     device parameters and optimizer state to the host first (and reads
 *     the optimizer's step counts from its backend's memory), load copies
 *     into the tensors on their device; a run saved on one device loads on
 *     the other.
 */
#include "io/checkpoint.h"

#include "base/base.h"
#include "dtype/dtype.h"
#include "io/json.h"
#include "tensor/tensor.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------- shared */

static const struct {
    amp_dtype dt;
    const char *name;
} st_dtypes[] = {{AMP_F32, "F32"}, {AMP_F16, "F16"}, {AMP_BF16, "BF16"}, {AMP_I32, "I32"}, {AMP_I64, "I64"}};

const char *ckpt_dtype_name(amp_dtype dt)
{
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (st_dtypes[i].dt == dt)
            return st_dtypes[i].name;
    return "?";
}

bool ckpt_dtype_parse(const char *s, amp_dtype *dt)
{
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (strcmp(s, st_dtypes[i].name) == 0) {
            *dt = st_dtypes[i].dt;
            return true;
        }
    return false;
}

bool ckpt_host_le(void)
{
    const uint16_t one = 1;
    return *(const unsigned char *)&one == 1;
}

const char *ckpt_shape_text(amp_shape s, char *buf, size_t n)
{
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < s.ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%" PRId64, i ? ", " : "", s.d[i]);
    if (k < n)
        snprintf(buf + k, n - k, "]");
    return buf;
}

/* The state keys o's options use, in slot order (the optimizer kind's
 * registry entry says which). */
int ckpt_optim_keys(const amp_optim *o, const char *keys[OPTIM_MAX_STATE])
{
    int n = 0;
    for (int k = 0; k < OPTIM_MAX_STATE; k++)
        if (o->def->has_state(o, k))
            keys[n++] = o->def->state_names[k];
    return n;
}

const char *ckpt_optim_param_name(const amp_module *m, const amp_optim *o, int i, char *buf, size_t n)
{
    for (int j = 0, np = m ? amp_module_num_params(m) : 0; j < np; j++) {
        const char *name;
        if (amp_module_param(m, j, &name) == o->params[i] && name)
            return name;
    }
    snprintf(buf, n, "%d", i);
    return buf;
}

/* =================================================================== save */

typedef struct {
    const char *name;
    amp_dtype dt;
    amp_shape shape;
    const void *data;
    size_t nbytes;
    void *host; /* a device tensor's host copy (data points at it), freed after writing */
} out_entry;

/* The entry for tensor t: its own data in host memory, or for a tensor on
 * another device a host copy (which waits for the device). */
static amp_status entry_of(const char *path, const char *name, const amp_tensor *t, out_entry *e)
{
    size_t nb = (size_t)t->numel * amp_dtype_size(t->dtype);
    *e = (out_entry){name, t->dtype, t->shape, tensor_ptr(t), nb, NULL};
    if (tensor_device(t) == AMP_CPU)
        return AMP_OK;
    if (!(e->host = malloc(nb ? nb : 1)))
        return amp_set_error(AMP_ERR_MEMORY, "checkpoint '%s': out of memory for a host copy of '%s'", path, name);
    e->data = e->host;
    return amp_tensor_copy_out(t, e->host, t->dtype);
}

static void free_hosts(out_entry *e, int n)
{
    for (int i = 0; e && i < n; i++)
        free(e[i].host);
}

/* Appends ,"key":"<formatted value>" to the metadata object. */
static void meta(json_buf *b, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void meta(json_buf *b, const char *key, const char *fmt, ...)
{
    char val[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(val, sizeof val, fmt, ap);
    va_end(ap);
    jb_puts(b, ",");
    jb_string(b, key);
    jb_puts(b, ":");
    jb_string(b, val);
}

/* An optimizer option as "optim.<key>" metadata. */
static void put_optim_meta(void *ctx, const char *key, const char *value)
{
    char k[64];
    snprintf(k, sizeof k, "optim.%s", key);
    meta(ctx, k, "%s", value);
}

static void write_metadata(json_buf *b, const amp_optim *o, const amp_scaler *s, int64_t step, const char *settings)
{
    amp_rng_state r = amp_rng_get_state();
    jb_puts(b, "\"__metadata__\":{\"format\":\"" CKPT_FORMAT "\"");
    meta(b, "ampc.version", "%s", AMPC_VERSION);
    meta(b, "step", "%" PRId64, step);
    meta(b, "rng.seed", "%" PRIu64, r.seed);
    meta(b, "rng.offset", "%" PRIu64, r.offset);
    if (settings) {
        jb_puts(b, ",\"settings\":");
        jb_string(b, settings);
    }
    if (o) {
        meta(b, "optim.kind", "%s", o->name);
        meta(b, "optim.lr", "%.17g", o->lr);
        meta(b, "optim.n_params", "%d", o->n);
        meta(b, "optim.total_steps", "%" PRId64, amp_optim_steps(o)); /* (on the device for CUDA) */
        o->def->describe(o, put_optim_meta, b);
    }
    if (s) {
        amp_scaler_state st = amp_scaler_state_get(s);
        amp_scaler_counts c = amp_scaler_get_counts(s);
        meta(b, "scaler.enabled", "%s", st.valid ? "true" : "false");
        if (st.valid) {
            meta(b, "scaler.scale", "%.17g", st.scale);
            meta(b, "scaler.growth_factor", "%.17g", st.growth_factor);
            meta(b, "scaler.backoff_factor", "%.17g", st.backoff_factor);
            meta(b, "scaler.growth_interval", "%" PRId64, st.growth_interval);
            meta(b, "scaler.growth_tracker", "%" PRId64, st.growth_tracker);
        }
        meta(b, "scaler.steps", "%" PRId64, c.steps);
        meta(b, "scaler.skipped", "%" PRId64, c.skipped);
        meta(b, "scaler.skipped_in_a_row", "%" PRId64, c.skipped_in_a_row);
        if (st.valid)
            meta(b, "scaler.hysteresis_left", "%d", amp_scaler_get_hysteresis_left(s));
    }
    jb_puts(b, "}");
}

/* A tensor about to be saved must be finite: a weight or optimizer buffer
 * that is inf / NaN (a run that diverged between two saves) would replace
 * the last good checkpoint with one no resume accepts. */
static amp_status check_finite(const char *path, const out_entry *e)
{
    size_t n = e->nbytes / amp_dtype_size(e->dt);
    for (size_t i = 0; i < n; i++) {
        if (amp_dtype_is_float(e->dt) && !isfinite(load_f32(e->data, e->dt, i)))
            return amp_set_error(AMP_ERR_STATE,
                                 "checkpoint '%s': not saved: tensor '%s' holds a non-finite value (inf or NaN) at "
                                 "element %zu (the run diverged); the previous checkpoint is left as it was",
                                 path, e->name, i);
    }
    return AMP_OK;
}

/* "optim.<name of parameter i>.<key>", allocated (NULL: out of memory). */
static char *state_name(const amp_module *m, const amp_optim *o, int i, const char *key)
{
    char buf[24];
    const char *pn = ckpt_optim_param_name(m, o, i, buf, sizeof buf);
    size_t len = strlen(pn) + strlen(key) + 8;
    char *s = malloc(len);
    if (s)
        snprintf(s, len, "optim.%s.%s", pn, key);
    return s;
}

/* The tensors to write, widest element first (stable within a width). */
static amp_status gather(const char *path, const amp_module *m, const amp_optim *o, const int64_t *steps,
                         char **onames, out_entry **out, int *n_out)
{
    int nm = amp_module_num_params(m), n = 0, cap = nm + (o ? 1 + o->n * (OPTIM_MAX_STATE + 1) : 0);
    out_entry *e = calloc((size_t)cap + 1, sizeof *e), *sorted = calloc((size_t)cap + 1, sizeof *e);
    if (!e || !sorted) {
        free(e);
        free(sorted);
        return amp_set_error(AMP_ERR_MEMORY, "checkpoint '%s': out of memory", path);
    }
    amp_status st = AMP_OK;
    for (int i = 0; i < nm && st == AMP_OK; i++) {
        const char *name;
        amp_tensor *p = amp_module_param(m, i, &name);
        if (!p)
            st = amp_last_status();
        else if (strncmp(name, "optim.", 6) == 0 || strcmp(name, "__metadata__") == 0)
            st = amp_set_error(AMP_ERR_ARG, "checkpoint '%s': parameter name '%s' is reserved", path, name);
        else if ((st = entry_of(path, name, p, &e[n])) == AMP_OK)
            st = check_finite(path, &e[n++]);
        else
            n++;
    }
    if (o && st == AMP_OK) {
        e[n++] = (out_entry){"optim.steps", AMP_I64, AMP_SHAPE(o->n), steps, (size_t)o->n * sizeof(int64_t), NULL};
        const char *keys[OPTIM_MAX_STATE];
        int nk = ckpt_optim_keys(o, keys), q = 0;
        for (int i = 0; i < o->n && st == AMP_OK; i++)
            for (int k = 0; k < nk && steps[i] > 0 && st == AMP_OK; k++) {
                amp_tensor *t = amp_optim_state_tensor(o, i, keys[k]);
                if (!t) {
                    st = amp_set_error(AMP_ERR_STATE,
                                       "checkpoint '%s': optimizer parameter %d took %" PRId64
                                       " steps but has no \"%s\" buffer",
                                       path, i, steps[i], keys[k]);
                    break;
                }
                if (!(onames[q] = state_name(m, o, i, keys[k]))) {
                    st = amp_set_error(AMP_ERR_MEMORY, "checkpoint '%s': out of memory", path);
                    break;
                }
                if ((st = entry_of(path, onames[q++], t, &e[n++])) == AMP_OK)
                    st = check_finite(path, &e[n - 1]);
            }
        for (int i = 0; i < o->n && st == AMP_OK; i++) {
            if (steps[i] == 0 || (st = optim_sync_master(o, i)) != AMP_OK || !optim_master(o, i))
                continue;
            if (!(onames[q] = state_name(m, o, i, "master"))) {
                st = amp_set_error(AMP_ERR_MEMORY, "checkpoint '%s': out of memory", path);
                break;
            }
            if ((st = entry_of(path, onames[q++], optim_master(o, i), &e[n++])) == AMP_OK)
                st = check_finite(path, &e[n - 1]);
        }
    }
    int k = 0;
    for (size_t width = 8; width >= 1; width /= 2)
        for (int i = 0; i < n; i++)
            if (amp_dtype_size(e[i].dt) == width)
                sorted[k++] = e[i];
    free(e);
    if (st != AMP_OK) {
        free_hosts(sorted, k);
        free(sorted);
        return st;
    }
    *out = sorted;
    *n_out = k;
    return AMP_OK;
}

static amp_status build_header(const amp_optim *o, const amp_scaler *s, int64_t step, const char *settings,
                               const out_entry *e, int n, json_buf *b)
{
    jb_puts(b, "{");
    write_metadata(b, o, s, step, settings);
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        char shape[CKPT_SHAPE_TEXT];
        jb_puts(b, ",");
        jb_string(b, e[i].name);
        jb_printf(b, ":{\"dtype\":\"%s\",\"shape\":%s,\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}",
                  ckpt_dtype_name(e[i].dt), ckpt_shape_text(e[i].shape, shape, sizeof shape), off, off + e[i].nbytes);
        off += e[i].nbytes;
    }
    jb_puts(b, "}");
    while (!b->oom && (8 + b->len) % 8)
        jb_puts(b, " ");
    return b->oom ? amp_set_error(AMP_ERR_MEMORY, "checkpoint: out of memory for the header") : AMP_OK;
}

/* fsyncs the directory holding path, so the rename itself is durable. */
static int sync_dir(const char *path)
{
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    if (!dir)
        return ENOMEM;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), err = 0;
    free(dir);
    if (fd < 0)
        return errno;
    if (fsync(fd) != 0 && errno != EINVAL) /* EINVAL: this file system cannot sync directories */
        err = errno;
    close(fd);
    return err;
}

void ckpt_remove_stale_temps(const char *path)
{
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    DIR *d = dir ? opendir(dir) : NULL;
    size_t nb = strlen(base);
    struct dirent *ent;
    while (d && (ent = readdir(d)) != NULL) {
        const char *name = ent->d_name, *digits = name + nb + 5;
        if (strncmp(name, base, nb) != 0 || strncmp(name + nb, ".tmp.", 5) != 0 || !*digits ||
            strspn(digits, "0123456789") != strlen(digits) || strlen(digits) > 9)
            continue;
        long pid = strtol(digits, NULL, 10);
        if (pid <= 0 || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue; /* ours, or a live process's (EPERM: alive, another user's) */
        char *full = malloc(strlen(dir) + strlen(name) + 2);
        struct stat sb;
        if (full) {
            sprintf(full, "%s/%s", dir, name);
            if (lstat(full, &sb) == 0 && S_ISREG(sb.st_mode))
                unlink(full); /* best effort: a file we cannot remove stays */
        }
        free(full);
    }
    if (d)
        closedir(d);
    free(dir);
}

static amp_status write_atomic(const char *path, const json_buf *hdr, const out_entry *e, int n)
{
    size_t plen = strlen(path) + 32;
    char *tmp = malloc(plen);
    if (!tmp)
        return amp_set_error(AMP_ERR_MEMORY, "checkpoint '%s': out of memory", path);
    snprintf(tmp, plen, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) {
        amp_status st = amp_set_error(AMP_ERR_IO, "checkpoint '%s': cannot create the temporary file '%s': %s", path,
                                      tmp, strerror(errno));
        free(tmp);
        return st;
    }
    FILE *f = fdopen(fd, "wb");
    int err = 0;
    const char *what = "write";
    if (!f) {
        err = errno;
        close(fd);
    } else {
        unsigned char len[8];
        for (int i = 0; i < 8; i++)
            len[i] = (unsigned char)((uint64_t)hdr->len >> (8 * i));
        errno = 0;
        bool ok = fwrite(len, 1, 8, f) == 8 && fwrite(hdr->p, 1, hdr->len, f) == hdr->len;
        for (int i = 0; i < n && ok; i++)
            ok = fwrite(e[i].data, 1, e[i].nbytes, f) == e[i].nbytes;
        if (!ok || fflush(f) != 0)
            err = errno ? errno : EIO;
        else if (fsync(fileno(f)) != 0)
            err = errno, what = "fsync";
        if (fclose(f) != 0 && !err)
            err = errno, what = "close";
    }
    if (!err && rename(tmp, path) != 0)
        err = errno, what = "rename the temporary file over";
    if (err) {
        unlink(tmp);
        free(tmp);
        return amp_set_error(AMP_ERR_IO, "checkpoint '%s': cannot %s it: %s (the old file, if any, is unchanged)", path,
                             what, strerror(err));
    }
    free(tmp);
    if ((err = sync_dir(path)) != 0)
        return amp_set_error(AMP_ERR_IO, "checkpoint '%s': written, but syncing its directory failed: %s", path,
                             strerror(err));
    return AMP_OK;
}

static amp_status checkpoint_save(const char *path, const amp_module *m, const amp_optim *o, const amp_scaler *s,
                                  int64_t step, const char *settings_json);

/* The save runs in the checkpoint phase. */
amp_status amp_checkpoint_save(const char *path, const amp_module *m, const amp_optim *o, const amp_scaler *s,
                               int64_t step, const char *settings_json)
{
    amp_phase_begin(AMP_PHASE_CHECKPOINT);
    amp_status st = checkpoint_save(path, m, o, s, step, settings_json);
    amp_phase_end(AMP_PHASE_CHECKPOINT);
    return st;
}

static amp_status checkpoint_save(const char *path, const amp_module *m, const amp_optim *o, const amp_scaler *s,
                                  int64_t step, const char *settings_json)
{
    if (!path || !m)
        return amp_set_error(AMP_ERR_ARG, "checkpoint_save: NULL %s", path ? "module" : "path");
    if (!ckpt_host_le())
        return amp_set_error(AMP_ERR_STATE, "checkpoint '%s': safetensors is little-endian; this host is not", path);
    if (settings_json && !json_utf8_valid(settings_json, strlen(settings_json)))
        return amp_set_error(AMP_ERR_ARG, "checkpoint '%s': settings_json is not valid UTF-8", path);
    if (o && optim_first_sharded(o) >= 0) /* the file holds whole state, loadable on any world size */
        return amp_set_error(AMP_ERR_STATE, "checkpoint '%s': the optimizer's state is sharded over the ranks "
                             "(ZeRO-1, parameter %d): amp_zero_gather_state before saving", path,
                             optim_first_sharded(o));
    int64_t *steps = NULL;
    char **onames = NULL;
    if (o) {
        steps = malloc((size_t)o->n * sizeof *steps);
        onames = calloc((size_t)o->n * (OPTIM_MAX_STATE + 1) + 1, sizeof *onames);
        if (!steps || !onames) {
            free(steps);
            free(onames);
            return amp_set_error(AMP_ERR_MEMORY, "checkpoint '%s': out of memory", path);
        }
        for (int i = 0; i < o->n; i++) /* (read from the parameters' backend memory) */
            steps[i] = amp_optim_param_steps(o, i);
    }
    out_entry *e = NULL;
    int n = 0;
    json_buf hdr = {0};
    amp_status st = gather(path, m, o, steps, onames, &e, &n);
    if (st == AMP_OK)
        st = build_header(o, s, step, settings_json, e, n, &hdr);
    if (st == AMP_OK) {
        ckpt_remove_stale_temps(path);
        st = write_atomic(path, &hdr, e, n);
    }
    jb_free(&hdr);
    free_hosts(e, n);
    free(e);
    free(steps);
    for (int i = 0; onames && i < o->n * (OPTIM_MAX_STATE + 1); i++)
        free(onames[i]);
    free(onames);
    return st;
}
