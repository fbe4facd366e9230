/*
 * models.c - the ready-made MLP and CNN: sequential containers of the nn
 * layers, so their parameters are named as torch.nn.Sequential names them
 * ("0.weight", "0.bias", "2.weight", ...) and initialised as PyTorch
 * initialises those layers (layers.c). The GPT lives in gpt.c.
 */
#include "nn/nn.h"

#include "base/base.h"

/* Appends child to seq; on failure frees seq and returns false (the
 * error of whatever failed is kept). sequential_add frees the child when
 * it cannot take it. */
static bool append(amp_module *seq, amp_module *child)
{
    if (amp_sequential_add(seq, child) == AMP_OK)
        return true;
    amp_module_free(seq);
    return false;
}

/* Linear(in, hidden[0]), ReLU, ..., Linear(hidden[n-1], classes). */
amp_module *amp_model_mlp(int64_t in, const int64_t *hidden, int n_hidden, int64_t classes)
{
    if (in < 1)
        return amp_fail_null(AMP_ERR_ARG, "model_mlp: in %lld must be >= 1", (long long)in);
    if (classes < 1)
        return amp_fail_null(AMP_ERR_ARG, "model_mlp: classes %lld must be >= 1", (long long)classes);
    if (n_hidden < 0 || (n_hidden > 0 && !hidden))
        return amp_fail_null(AMP_ERR_ARG, "model_mlp: hidden must list n_hidden (%d) widths", n_hidden);
    for (int i = 0; i < n_hidden; i++)
        if (hidden[i] < 1)
            return amp_fail_null(AMP_ERR_ARG, "model_mlp: hidden[%d] = %lld must be >= 1", i,
                                 (long long)hidden[i]);
    amp_module *seq = amp_nn_sequential();
    if (!seq)
        return NULL;
    int64_t prev = in;
    for (int i = 0; i < n_hidden; i++) {
        if (!append(seq, amp_nn_linear(prev, hidden[i], true)) || !append(seq, amp_nn_relu()))
            return NULL;
        prev = hidden[i];
    }
    return append(seq, amp_nn_linear(prev, classes, true)) ? seq : NULL;
}

/* Two conv(3x3, pad 1) + ReLU + max-pool(2) stages halve height and width
 * twice, so the classifier sees 64 * (height / 4) * (width / 4) features
 * (3136 for 28x28). */
amp_module *amp_model_cnn(int64_t in_ch, int64_t height, int64_t width, int64_t classes)
{
    if (in_ch < 1)
        return amp_fail_null(AMP_ERR_ARG, "model_cnn: in_ch %lld must be >= 1", (long long)in_ch);
    if (height < 4 || height % 4 || width < 4 || width % 4)
        return amp_fail_null(AMP_ERR_ARG,
                             "model_cnn: height %lld and width %lld must be positive multiples of 4 "
                             "(two 2x2 max-pools)",
                             (long long)height, (long long)width);
    if (classes < 1)
        return amp_fail_null(AMP_ERR_ARG, "model_cnn: classes %lld must be >= 1", (long long)classes);
    amp_module *seq = amp_nn_sequential();
    if (!seq)
        return NULL;
    int64_t features = 64 * (height / 4) * (width / 4);
    if (!append(seq, amp_nn_conv2d(in_ch, 32, 3, 1, 1, true)) || !append(seq, amp_nn_relu()) ||
        !append(seq, amp_nn_max_pool2d(2, 0)) || !append(seq, amp_nn_conv2d(32, 64, 3, 1, 1, true)) ||
        !append(seq, amp_nn_relu()) || !append(seq, amp_nn_max_pool2d(2, 0)) ||
        !append(seq, amp_nn_flatten()) || !append(seq, amp_nn_linear(features, 128, true)) ||
        !append(seq, amp_nn_relu()) || !append(seq, amp_nn_linear(128, classes, true)))
        return NULL;
    return seq;
}
