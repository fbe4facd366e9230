"""test_tensorboard.py - the Python side of test_tensorboard.c: ampc's
TensorBoard event files read by TensorBoard's own readers (EventAccumulator,
its record reader and its CRC32C), checked against ampc's JSON-lines log of
the same run.

    check DIR LOG EVALS [mlp]
                             every scalar series in DIR equals the log's
                             values at the log's steps; the closing
                             evaluations (EVALS: TAG@STEP=VALUE,... as the
                             runs printed them); every record's masked
                             CRCs; with mlp, the scaler's skips and scale
                             changes and the gradient histograms at the
                             --health-every steps
    corrupt DIR SCRATCH      a flipped byte in a record's data, and one in
                             a record's length, are caught by TensorBoard's
                             reader (copies in SCRATCH; DIR is not touched)

The mlp run checked is test_tensorboard.c's 784-16-10, whose gradients
are NUMEL's. Prints what it checked; exits 1 naming the first
difference.
"""
import glob
import json
import math
import os
import re
import shutil
import struct
import sys

import numpy as np
from tensorboard.backend.event_processing import event_accumulator as ea
from tensorboard.backend.event_processing import event_file_loader
from tensorboard.compat import tf
from tensorboard.compat.proto import event_pb2
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

NUMEL = {"0.weight": 16 * 784, "0.bias": 16, "2.weight": 10 * 16, "2.bias": 10}

# (log key, TensorBoard tag, significant digits the log prints it with)
SERIES = [
    ("loss", "train/loss", 9),
    ("lr", "train/lr", 9),
    ("scale", "amp/loss_scale", 17),
    ("grad_norm", "train/grad_norm", 9),
    ("step_ms", "train/step_ms", 6),
    ("samples_per_s", "train/samples_per_s", 6),
    ("tokens_per_s", "train/tokens_per_s", 6),
    ("f16_zero", "f16/zero", 6),
    ("f16_flush", "f16/flush", 6),
    ("f16_subnormal", "f16/subnormal", 6),
    ("f16_overflow", "f16/overflow", 6),
    ("f16_flush_scaled", "f16/flush_scaled", 6),
    ("f16_subnormal_scaled", "f16/subnormal_scaled", 6),
    ("f16_overflow_scaled", "f16/overflow_scaled", 6),
    ("stalled", "amp/stalled", 6),
    ("stalled_worst_fraction", "amp/stalled_worst", 6),
]

FILE_NAME = re.compile(r"^events\.out\.tfevents\.\d{10}\..+\.\d+\.\d+$")


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def close_enough(got, logged, digits):
    """got: TensorBoard's float32; logged: the log's decimal of the same
    double. The log's 9 (or 17) digits name one float32, up to the double's
    own rounding to float32: one ulp. Its 6 digits are 5e-6 relative."""
    want = np.float32(logged)
    if digits >= 9:
        return abs(np.float32(got) - want) <= np.spacing(abs(want))
    return abs(got - logged) <= 5e-6 * abs(logged) + 1e-30


def accumulator(d):
    guidance = {k: 0 for k in (ea.SCALARS, ea.HISTOGRAMS, ea.COMPRESSED_HISTOGRAMS, ea.IMAGES, ea.AUDIO,
                               ea.TENSORS)}
    acc = ea.EventAccumulator(d, size_guidance=guidance)
    acc.Reload()
    return acc


def records(path):
    """Every record's (offset, length, data, crc of length, crc of data),
    read by hand; the file must end after the last."""
    out = []
    with open(path, "rb") as f:
        raw = f.read()
    at = 0
    while at < len(raw):
        if at + 12 > len(raw):
            fail("%s: %d stray bytes at offset %d" % (path, len(raw) - at, at))
        (n,) = struct.unpack_from("<Q", raw, at)
        (crc_len,) = struct.unpack_from("<I", raw, at + 8)
        if at + 12 + n + 4 > len(raw):
            fail("%s: the record at offset %d (%d bytes) runs past the end" % (path, at, n))
        data = raw[at + 12:at + 12 + n]
        (crc_data,) = struct.unpack_from("<I", raw, at + 12 + n)
        out.append((at, n, data, crc_len, crc_data))
        at += 12 + n + 4
    return out


def check_files(d):
    files = sorted(glob.glob(os.path.join(d, "events.out.tfevents.*")))
    if not files:
        fail("no event file in " + d)
    n = 0
    for path in files:
        if not FILE_NAME.match(os.path.basename(path)):
            fail("%s: not TensorFlow's event file name" % path)
        recs = records(path)
        for at, length, data, crc_len, crc_data in recs:
            if crc_len != masked_crc32c(struct.pack("<Q", length)):
                fail("%s: offset %d: the length's masked CRC32C is %08x, TensorBoard's %08x" %
                     (path, at, crc_len, masked_crc32c(struct.pack("<Q", length))))
            if crc_data != masked_crc32c(data):
                fail("%s: offset %d: the data's masked CRC32C is %08x, TensorBoard's %08x" %
                     (path, at, crc_data, masked_crc32c(data)))
        first = event_pb2.Event.FromString(recs[0][2])
        if first.file_version != "brain.Event:2":
            fail("%s: the first event's file_version is %r" % (path, first.file_version))
        n += len(recs)
    print("  %d event files, %d records: names, masked CRCs and file_version as TensorBoard's" % (len(files), n))
    return files


def check(d, log_path, evals, mlp):
    check_files(d)
    with open(log_path) as f:
        lines = [json.loads(line) for line in f]
    acc = accumulator(d)
    tags = acc.Tags()
    scalars = set(tags["scalars"])
    want_evals = {}
    for item in evals.split(","):
        tag, at = item.split("@")
        step, value = at.split("=")
        # as printed: within half the last decimal (and float32's rounding)
        decimals = len(value.split(".")[1]) if "." in value else 0
        want_evals.setdefault(tag, {})[int(step)] = (float(value), 0.5 * 10 ** -decimals + 1e-6 * abs(float(value)))
    known = {t for _, t, _ in SERIES} | {"amp/skipped_steps"} | set(want_evals)
    if scalars - known:
        fail("scalar tags the log does not have: %s" % sorted(scalars - known))
    compared, series = 0, []
    for key, tag, digits in SERIES:
        want = {r["step"]: r[key] for r in lines if r.get(key) is not None}
        got = {e.step: e.value for e in acc.Scalars(tag)} if tag in scalars else {}
        if sorted(got) != sorted(want):
            fail("%s: steps %s, the log's %s at steps %s" % (tag, sorted(got), key, sorted(want)))
        for step, v in want.items():
            if not close_enough(got[step], v, digits):
                fail("%s at step %d: %r, the log's %s %r" % (tag, step, got[step], key, v))
        compared += len(want)
        series += [tag] if want else []
    # The scaler's skips so far, against the log's skipped flags.
    skipped, want = 0, {}
    for r in lines:
        skipped += r["skipped"]
        want[r["step"]] = skipped
    got = {e.step: e.value for e in acc.Scalars("amp/skipped_steps")} if "amp/skipped_steps" in scalars else {}
    scaled = any(r["scale"] is not None for r in lines)
    if got != (want if scaled else {}):
        fail("amp/skipped_steps %s, the log's running count %s" % (got, want))
    for tag, want in want_evals.items():
        got = {e.step: e.value for e in acc.Scalars(tag)} if tag in scalars else {}
        if sorted(got) != sorted(want) or any(abs(got[s] - v) > tol for s, (v, tol) in want.items()):
            fail("%s %s, printed %s" % (tag, got, want))
    print("  %d scalar values equal the log's (%d steps, %d skipped) in %s, and %s at the closing evaluations" %
          (compared, len(lines), skipped, " ".join(series), " ".join(sorted(want_evals))))
    if not mlp:
        return
    if not 0 < skipped < len(lines):
        fail("the run skipped %d of %d steps: the test needs both kinds" % (skipped, len(lines)))
    scales = {r["scale"] for r in lines}
    if len(scales) < 3:
        fail("the scale took %d values: the test needs it to back off and grow" % len(scales))
    print("  the scaler skipped %d steps and took %d scales" % (skipped, len(scales)))
    check_histograms(acc, tags, lines)


def check_histograms(acc, tags, lines):
    by_step = {}
    for tag in tags["histograms"]:
        name = tag[len("grad/"):]
        if not tag.startswith("grad/") or name not in NUMEL:
            fail("histogram tag %s is no parameter of the mlp" % tag)
        for e in acc.Histograms(tag):
            by_step.setdefault(e.step, {})[name] = e.histogram_value
    health = [r for r in lines if "f16_zero" in r]
    clean = [r for r in health if not r["skipped"]]
    if not clean or len(health) == len(clean):
        fail("the health steps (%d) must include clean and skipped ones" % len(health))
    for step in by_step:
        if step not in {r["step"] for r in health}:
            fail("histograms at step %d, which is no --health-every step" % step)
    for r in health:
        hs = by_step.get(r["step"], {})
        for name, h in hs.items():
            buckets, limits = list(h.bucket), list(h.bucket_limit)
            if not (0 < h.num <= NUMEL[name]) or sum(buckets) != h.num or len(limits) != len(buckets):
                fail("grad/%s at step %d: num %g of %d elements, buckets summing to %g" %
                     (name, r["step"], h.num, NUMEL[name], sum(buckets)))
            if not (h.min <= h.max and limits == sorted(limits) and limits[-1] == h.max and limits[0] >= h.min):
                fail("grad/%s at step %d: min %g max %g, bucket limits %s" % (name, r["step"], h.min, h.max, limits))
            if h.sum_squares * h.num < h.sum * h.sum * (1 - 1e-9):
                fail("grad/%s at step %d: sum %g and sum of squares %g of %g values" %
                     (name, r["step"], h.sum, h.sum_squares, h.num))
        if r["skipped"]:
            continue
        # A clean step: every gradient whole, and together their norm is
        # the log's grad_norm (measured by the library's clip_grad_norm).
        if sorted(hs) != sorted(NUMEL) or any(hs[n].num != NUMEL[n] for n in NUMEL):
            fail("step %d: histograms %s, every parameter's whole gradient wanted" %
                 (r["step"], {n: h.num for n, h in hs.items()}))
        norm = math.sqrt(sum(h.sum_squares for h in hs.values()))
        if abs(norm - r["grad_norm"]) > 1e-5 * r["grad_norm"]:
            fail("step %d: the histograms' sums of squares make a norm of %.9g, the log's grad_norm %.9g" %
                 (r["step"], norm, r["grad_norm"]))
    print("  histograms at %d health steps (%d clean: every gradient whole, the norm of their sums of squares "
          "the log's grad_norm)" % (len(by_step), len(clean)))


def corrupt(d, scratch):
    (path,) = glob.glob(os.path.join(d, "events.out.tfevents.*"))
    recs = records(path)
    if len(recs) < 6:
        fail("%s: %d records, too few to corrupt one in the middle" % (path, len(recs)))
    clean = sum(1 for _ in event_file_loader.RawEventFileLoader(path).Load())
    if clean != len(recs):
        fail("TensorBoard's loader reads %d of the %d records of the untouched file" % (clean, len(recs)))
    k = len(recs) // 2
    at, n = recs[k][0], recs[k][1]
    for what, offset, message in (("data", at + 12 + n // 2, "failed event crc32 check"),
                                  ("length", at + 1, "failed header crc32 check")):
        sub = os.path.join(scratch, "corrupt-" + what)
        shutil.rmtree(sub, ignore_errors=True)
        os.makedirs(sub)
        bad = os.path.join(sub, os.path.basename(path))
        shutil.copyfile(path, bad)
        with open(bad, "r+b") as f:
            f.seek(offset)
            b = f.read(1)
            f.seek(offset)
            f.write(bytes([b[0] ^ 0x40]))
        got = sum(1 for _ in event_file_loader.RawEventFileLoader(bad).Load())
        if got != k:
            fail("a byte of record %d's %s flipped: TensorBoard's loader read %d records, %d wanted" %
                 (k, what, got, k))
        if tf.__version__ == "stub":  # the reader's own words (TensorFlow's reader words them otherwise)
            reader = tf.pywrap_tensorflow.PyRecordReader_New(bad.encode())
            try:
                for _ in range(len(recs)):
                    reader.GetNext()
                fail("a byte of record %d's %s flipped: the record reader raised nothing" % (k, what))
            except tf.errors.DataLossError as e:
                if message not in str(e):
                    fail("a byte of record %d's %s flipped: %s" % (k, what, e))
        last = max((e.step for e in accumulator(sub).Scalars("train/loss")), default=0)
        first_bad = event_pb2.Event.FromString(recs[k][2]).step
        if last >= first_bad:
            fail("a byte of record %d's %s flipped: EventAccumulator has train/loss up to step %d, past %d" %
                 (k, what, last, first_bad))
    print("  a flipped byte in record %d's data, and in its length: TensorBoard's reader stops there "
          "(CRC mismatch), %d records before it read" % (k, k))


if __name__ == "__main__":
    if sys.argv[1] == "check" and len(sys.argv) in (5, 6):
        check(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:] == ["mlp"])
    elif sys.argv[1] == "corrupt" and len(sys.argv) == 4:
        corrupt(sys.argv[2], sys.argv[3])
    else:
        fail("usage: test_tensorboard.py check DIR LOG TAG@STEP=VALUE,... [mlp] | corrupt DIR SCRATCH")
    print("ok")
