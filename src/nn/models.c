/* models.c - placeholder until the models land. */
#include "nn/nn.h"
#include "base/base.h"

amp_module *amp_model_mlp(int64_t in, const int64_t *hidden, int n_hidden, int64_t classes) { (void)in; (void)hidden; (void)n_hidden; (void)classes; return amp_fail_null(AMP_ERR_STATE, "model_mlp: not implemented yet"); }
amp_module *amp_model_cnn(int64_t in_ch, int64_t height, int64_t width, int64_t classes) { (void)in_ch; (void)height; (void)width; (void)classes; return amp_fail_null(AMP_ERR_STATE, "model_cnn: not implemented yet"); }
amp_module *amp_model_gpt(amp_gpt_config c) { (void)c; return amp_fail_null(AMP_ERR_STATE, "model_gpt: not implemented yet"); }
