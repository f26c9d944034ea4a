/* optim: AdamW over parameter shards (through the backend), global-norm clipping, and fp16 loss
 * scaling with DeepSpeed's DynamicLossScaler / static loss_scale semantics. */
#ifndef ZINF_OPTIM_H
#define ZINF_OPTIM_H

#include <stdbool.h>
#include <stdint.h>

#include "config.h"

/* ---- loss scaling ---- */
typedef struct zinf_loss_scaler {
    bool dynamic;            /* fp16 with loss_scale 0 */
    double cur_scale;        /* 1.0 when scaling is off (bf16/fp32) */
    double min_scale;
    int64_t scale_window;
    int64_t delayed_shift;   /* hysteresis */
    int64_t cur_hysteresis;
    bool consecutive_hysteresis;
    int64_t cur_iter;
    int64_t last_overflow_iter;
} zinf_loss_scaler;

/* From the fp16 block of cfg: dynamic (2^initial_scale_power), static (loss_scale), or off. */
void zinf_loss_scaler_init(zinf_loss_scaler *s, const zinf_config *cfg);
/* Record one optimizer step's outcome; with overflow the step is skipped by the caller and the
 * scale may drop. Returns true when the scale changed. */
bool zinf_loss_scaler_update(zinf_loss_scaler *s, bool overflow);

/* Clip coefficient for global norm `norm` and threshold `max_norm` (0 = off): DeepSpeed's
 * min(1, max_norm / (norm + 1e-6)). */
double zinf_clip_coef(double norm, double max_norm);

#endif
