/*
 * op_list.h - the op table's rows: every differentiable operation, once.
 *
 * X(ENUM, "name", cpu category, cuda category, params, forward, backward, cost)
 *
 * The categories are autocast's, per device type, as PyTorch assigns them
 * (aten/src/ATen/autocast_mode.cpp): LOWER (run in the autocast dtype),
 * FP32 (run in float32), FP32_OUT (inputs untouched, result float32),
 * PROMOTE (widest input dtype), BANNED (an error under autocast), NONE
 * (unlisted: runs in its inputs' dtype). Where ampc fuses what PyTorch
 * composes (cross_entropy on CUDA = log_softmax + nll_loss) the row takes
 * the category that gives PyTorch's result dtype.
 *
 * params names the op's parameter struct (<params>_params, op_params.h);
 * forward, backward and cost take a pointer to it (ops.h declares them
 * from these rows). cost gives the FLOPs and bytes of a forward or a
 * backward, for the profiler. argmax's backward is never called: its
 * result is an index, which carries no gradient.
 */
/* clang-format off */
X(ADD,           "add",           NONE,    NONE,     add,           add_forward,           add_backward,           add_cost)
X(SUB,           "sub",           NONE,    NONE,     none,          sub_forward,           sub_backward,           pointwise_cost)
X(MUL,           "mul",           NONE,    NONE,     none,          mul_forward,           mul_backward,           pointwise_cost)
X(DIV,           "div",           NONE,    NONE,     none,          div_forward,           div_backward,           pointwise_cost)
X(ADD_SCALAR,    "add_scalar",    NONE,    NONE,     scalar,        add_scalar_forward,    add_scalar_backward,    scalar_cost)
X(MUL_SCALAR,    "mul_scalar",    NONE,    NONE,     scalar,        mul_scalar_forward,    mul_scalar_backward,    scalar_cost)
X(DIV_SCALAR,    "div_scalar",    NONE,    NONE,     scalar,        div_scalar_forward,    div_scalar_backward,    scalar_cost)
X(NEG,           "neg",           NONE,    NONE,     none,          neg_forward,           neg_backward,           pointwise_cost)
X(RELU,          "relu",          NONE,    NONE,     none,          relu_forward,          relu_backward,          pointwise_cost)
X(GELU,          "gelu",          NONE,    NONE,     gelu,          gelu_forward,          gelu_backward,          gelu_cost)
X(TANH,          "tanh",          NONE,    NONE,     none,          tanh_forward,          tanh_backward,          pointwise_cost)
X(SIGMOID,       "sigmoid",       NONE,    NONE,     none,          sigmoid_forward,       sigmoid_backward,       pointwise_cost)
X(SILU,          "silu",          NONE,    NONE,     none,          silu_forward,          silu_backward,          pointwise_cost)
X(EXP,           "exp",           NONE,    FP32,     none,          exp_forward,           exp_backward,           pointwise_cost)
X(LOG,           "log",           NONE,    FP32,     none,          log_forward,           log_backward,           pointwise_cost)
X(POW_SCALAR,    "pow",           NONE,    FP32,     pow_scalar,    pow_scalar_forward,    pow_scalar_backward,    pow_scalar_cost)
X(MATMUL,        "matmul",        LOWER,   LOWER,    none,          matmul_forward,        matmul_backward,        matmul_cost)
X(LINEAR,        "linear",        LOWER,   LOWER,    linear,        linear_forward,        linear_backward,        linear_cost)
X(SUM,           "sum",           NONE,    FP32_OUT, reduce,        reduce_forward,        reduce_backward,        reduce_cost)
X(MEAN,          "mean",          NONE,    NONE,     reduce,        reduce_forward,        reduce_backward,        reduce_cost)
X(SOFTMAX,       "softmax",       NONE,    FP32_OUT, dim,           softmax_forward,       softmax_backward,       softmax_cost)
X(LOG_SOFTMAX,   "log_softmax",   NONE,    FP32_OUT, dim,           softmax_forward,       softmax_backward,       softmax_cost)
X(CROSS_ENTROPY, "cross_entropy", FP32,    FP32,     cross_entropy, cross_entropy_forward, cross_entropy_backward, cross_entropy_cost)
X(MSE_LOSS,      "mse_loss",      FP32,    FP32,     none,          mse_loss_forward,      mse_loss_backward,      mse_loss_cost)
X(LAYER_NORM,    "layer_norm",    NONE,    FP32,     layer_norm,    layer_norm_forward,    layer_norm_backward,    layer_norm_cost)
X(EMBEDDING,     "embedding",     NONE,    NONE,     none,          embedding_forward,     embedding_backward,     embedding_cost)
X(DROPOUT,       "dropout",       NONE,    NONE,     dropout,       dropout_forward,       dropout_backward,       dropout_cost)
X(CONV2D,        "conv2d",        LOWER,   LOWER,    conv2d,        conv2d_forward,        conv2d_backward,        conv2d_cost)
X(MAX_POOL2D,    "max_pool2d",    NONE,    NONE,     pool2d,        pool2d_forward,        pool2d_backward,        pool2d_cost)
X(AVG_POOL2D,    "avg_pool2d",    NONE,    NONE,     pool2d,        pool2d_forward,        pool2d_backward,        pool2d_cost)
X(RESHAPE,       "reshape",       NONE,    NONE,     reshape,       reshape_forward,       reshape_backward,       reshape_cost)
X(PERMUTE,       "permute",       NONE,    NONE,     permute,       permute_forward,       permute_backward,       permute_cost)
X(CAT,           "cat",           PROMOTE, NONE,     dim,           cat_forward,           cat_backward,           cat_cost)
X(NARROW,        "narrow",        NONE,    NONE,     narrow,        narrow_forward,        narrow_backward,        narrow_cost)
X(TO,            "to",            NONE,    NONE,     to,            to_forward,            to_backward,            to_cost)
X(ARGMAX,        "argmax",        NONE,    NONE,     dim,           argmax_forward,        argmax_backward,        argmax_cost)
X(ATTENTION, "scaled_dot_product_attention", LOWER, LOWER, attention, attention_forward, attention_backward, attention_cost)
/* clang-format on */
