/*
 * train_mlp.c - the shortest complete ampc program: train a 784-256-128-10
 * MLP on Fashion-MNIST for one epoch and print its test accuracy.
 *
 *   example_train_mlp [DIR]   (DIR defaults to /usr/share/datasets/fashion-mnist)
 *
 * Uses only the public header. Error checks are kept to one per step:
 * ops given NULL return NULL, so a chain is checked once at its end.
 */
#include "ampc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BATCH 128

/* Loads DIR/PREFIX-{images,labels}; pixels scaled as x/255, normalised with
 * Fashion-MNIST's mean 0.2860 and std 0.3530. */
static int load(const char *dir, const char *prefix, amp_tensor **x, amp_tensor **y)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s-images-idx3-ubyte.gz", dir, prefix);
    *x = amp_idx_load(path, AMP_F32);
    snprintf(path, sizeof path, "%s/%s-labels-idx1-ubyte.gz", dir, prefix);
    *y = *x ? amp_idx_load(path, AMP_I64) : NULL;
    if (!*y) {
        fprintf(stderr, "%s\n", amp_last_error());
        return -1;
    }
    float *p = amp_tensor_data(*x);
    for (int64_t i = 0; i < amp_tensor_numel(*x); i++)
        p[i] = (p[i] / 255.0f - 0.2860f) / 0.3530f;
    return 0;
}

/* Copies rows idx[0..n) of x [N, 784] and y [N] into the batch buffers. */
static void gather(amp_tensor *x, amp_tensor *y, const int *idx, int n, amp_tensor *bx, amp_tensor *by)
{
    const float *xs = amp_tensor_cdata(x);
    const int64_t *ys = amp_tensor_cdata(y);
    for (int r = 0; r < n; r++) {
        memcpy((float *)amp_tensor_data(bx) + r * 784, xs + (int64_t)idx[r] * 784, 784 * sizeof(float));
        ((int64_t *)amp_tensor_data(by))[r] = ys[idx[r]];
    }
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : "/usr/share/datasets/fashion-mnist";
    amp_tensor *xtr, *ytr, *xte, *yte;
    if (load(dir, "train", &xtr, &ytr) || load(dir, "t10k", &xte, &yte))
        return 1;
    int n = (int)amp_tensor_dim(xtr, 0), nt = (int)amp_tensor_dim(xte, 0);

    amp_manual_seed(0);
    amp_module *model = amp_nn_sequential();
    amp_sequential_add(model, amp_nn_linear(784, 256, true));
    amp_sequential_add(model, amp_nn_relu());
    amp_sequential_add(model, amp_nn_linear(256, 128, true));
    amp_sequential_add(model, amp_nn_relu());
    amp_sequential_add(model, amp_nn_linear(128, 10, true));
    amp_tensor *params[16];
    int np = amp_module_params(model, params, 16);
    amp_sgd_opts so = amp_sgd_defaults();
    so.lr = 0.05;
    so.momentum = 0.9;
    amp_optim *opt = amp_optim_sgd(params, np, so);
    if (!opt || np != 6) { /* 3 weights + 3 biases, or a layer failed */
        fprintf(stderr, "model: %s\n", amp_last_error());
        return 1;
    }

    /* One epoch in a shuffled order; the batch buffers are reused. */
    int *order = malloc(sizeof(int) * (size_t)n);
    for (int i = 0; i < n; i++)
        order[i] = i;
    srand(0);
    for (int i = n - 1; i > 0; i--) {
        int j = rand() % (i + 1), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    amp_tensor *bx = amp_empty(AMP_SHAPE(BATCH, 784), AMP_F32), *by = amp_empty(AMP_SHAPE(BATCH), AMP_I64);
    for (int step = 0; step < n / BATCH; step++) {
        gather(xtr, ytr, order + step * BATCH, BATCH, bx, by);
        amp_optim_zero_grad(opt);
        amp_tensor *loss = amp_cross_entropy(amp_module_forward(model, bx), by);
        if (!loss || amp_backward(loss) != AMP_OK || amp_optim_step(opt) != AMP_OK) {
            fprintf(stderr, "step %d: %s\n", step, amp_last_error());
            return 1;
        }
        if (step % 100 == 0)
            printf("step %d loss %.4f\n", step, amp_item(loss));
        amp_temps_free(); /* this step's activations and op results */
    }

    /* Test: the whole test set in one forward pass, without a graph. */
    amp_no_grad_begin();
    amp_tensor *pred = amp_argmax(amp_module_forward(model, amp_reshape(xte, AMP_SHAPE(nt, 784))), 1);
    if (!pred) {
        fprintf(stderr, "test: %s\n", amp_last_error());
        return 1;
    }
    int correct = 0;
    for (int i = 0; i < nt; i++)
        correct += amp_tensor_get(pred, i) == amp_tensor_get(yte, i);
    amp_no_grad_end();
    printf("test_accuracy %.4f\n", (double)correct / nt);

    amp_temps_free();
    amp_tensor_free(bx), amp_tensor_free(by);
    amp_optim_free(opt);
    amp_module_free(model);
    amp_tensor_free(xtr), amp_tensor_free(ytr), amp_tensor_free(xte), amp_tensor_free(yte);
    free(order);
    return 0;
}
