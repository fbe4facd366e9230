/*
 * op_list.h - the op table's rows: every differentiable operation, once.
 *
 * X(ENUM, "name", cpu category, cuda category, forward, backward)
 *
 * The categories are autocast's, per device type, as PyTorch assigns them
 * (aten/src/ATen/autocast_mode.cpp): LOWER (run in the autocast dtype),
 * FP32 (run in float32), FP32_OUT (inputs untouched, result float32),
 * PROMOTE (widest input dtype), BANNED (an error under autocast), NONE
 * (unlisted: runs in its inputs' dtype). Where ampc fuses what PyTorch
 * composes (cross_entropy on CUDA = log_softmax + nll_loss) the row takes
 * the category that gives PyTorch's result dtype.
 *
 * no_backward marks an op that has no gradient (argmax).
 */
/* clang-format off */
X(ADD,          "add",          NONE,    NONE,     add_forward,          add_backward)
X(SUB,          "sub",          NONE,    NONE,     sub_forward,          sub_backward)
X(MUL,          "mul",          NONE,    NONE,     mul_forward,          mul_backward)
X(DIV,          "div",          NONE,    NONE,     div_forward,          div_backward)
X(ADD_SCALAR,   "add_scalar",   NONE,    NONE,     add_scalar_forward,   add_scalar_backward)
X(MUL_SCALAR,   "mul_scalar",   NONE,    NONE,     mul_scalar_forward,   mul_scalar_backward)
X(DIV_SCALAR,   "div_scalar",   NONE,    NONE,     div_scalar_forward,   div_scalar_backward)
X(NEG,          "neg",          NONE,    NONE,     neg_forward,          neg_backward)
X(RELU,         "relu",         NONE,    NONE,     relu_forward,         relu_backward)
X(GELU,         "gelu",         NONE,    NONE,     gelu_forward,         gelu_backward)
X(TANH,         "tanh",         NONE,    NONE,     tanh_forward,         tanh_backward)
X(SIGMOID,      "sigmoid",      NONE,    NONE,     sigmoid_forward,      sigmoid_backward)
X(SILU,         "silu",         NONE,    NONE,     silu_forward,         silu_backward)
X(EXP,          "exp",          NONE,    FP32,     exp_forward,          exp_backward)
X(LOG,          "log",          NONE,    FP32,     log_forward,          log_backward)
X(POW_SCALAR,   "pow",          NONE,    FP32,     pow_scalar_forward,   pow_scalar_backward)
X(MATMUL,       "matmul",       LOWER,   LOWER,    matmul_forward,       matmul_backward)
X(LINEAR,       "linear",       LOWER,   LOWER,    linear_forward,       linear_backward)
X(SUM,          "sum",          NONE,    FP32_OUT, sum_forward,          sum_backward)
X(MEAN,         "mean",         NONE,    NONE,     mean_forward,         mean_backward)
X(SOFTMAX,      "softmax",      NONE,    FP32_OUT, softmax_forward,      softmax_backward)
X(LOG_SOFTMAX,  "log_softmax",  NONE,    FP32_OUT, log_softmax_forward,  log_softmax_backward)
X(CROSS_ENTROPY,"cross_entropy",FP32,    FP32,     cross_entropy_forward,cross_entropy_backward)
X(MSE_LOSS,     "mse_loss",     FP32,    FP32,     mse_loss_forward,     mse_loss_backward)
X(LAYER_NORM,   "layer_norm",   NONE,    FP32,     layer_norm_forward,   layer_norm_backward)
X(EMBEDDING,    "embedding",    NONE,    NONE,     embedding_forward,    embedding_backward)
X(DROPOUT,      "dropout",      NONE,    NONE,     dropout_forward,      dropout_backward)
X(CONV2D,       "conv2d",       LOWER,   LOWER,    conv2d_forward,       conv2d_backward)
X(MAX_POOL2D,   "max_pool2d",   NONE,    NONE,     max_pool2d_forward,   max_pool2d_backward)
X(AVG_POOL2D,   "avg_pool2d",   NONE,    NONE,     avg_pool2d_forward,   avg_pool2d_backward)
X(RESHAPE,      "reshape",      NONE,    NONE,     reshape_forward,      reshape_backward)
X(PERMUTE,      "permute",      NONE,    NONE,     permute_forward,      permute_backward)
X(CAT,          "cat",          PROMOTE, NONE,     cat_forward,          cat_backward)
X(NARROW,       "narrow",       NONE,    NONE,     narrow_forward,       narrow_backward)
X(TO,           "to",           NONE,    NONE,     to_forward,           to_backward)
X(ARGMAX,       "argmax",       NONE,    NONE,     argmax_forward,       no_backward)
X(ATTENTION,    "scaled_dot_product_attention", LOWER, LOWER, attention_forward, attention_backward)
/* clang-format on */
