/* optim: fp16 loss scaling (DeepSpeed's DynamicLossScaler / static LossScaler) and the gradient
 * clip coefficient.
 *
 * Source read: deepspeed/runtime/fp16/loss_scaler.py (DynamicLossScaler.update_scale,
 * CreateLossScaler), deepspeed/runtime/zero/stage_1_and_2.py (step, unscale_and_clip_grads) and
 * deepspeed/runtime/engine.py (_take_model_step). Written from the semantics, not copied. */
#include "optim.h"

#include <math.h>
#include <string.h>

/* CreateLossScaler: fp16 with fp16.loss_scale == 0 -> DynamicLossScaler(init_scale =
 * 2^initial_scale_power, scale_window = loss_scale_window, min_scale = min_loss_scale,
 * delayed_shift = hysteresis, consecutive_hysteresis); fp16 with loss_scale > 0 -> static
 * LossScaler(loss_scale) whose update_scale does nothing; bf16/fp32 -> LossScaler(1.0). */
void zinf_loss_scaler_init(zinf_loss_scaler *s, const zinf_config *cfg)
{
    memset(s, 0, sizeof *s);
    s->cur_scale = 1.0;
    s->min_scale = 1.0;
    s->last_overflow_iter = -1;
    if (!cfg->fp16) return;
    if (cfg->fp16_loss_scale > 0.0) {
        s->cur_scale = cfg->fp16_loss_scale;
        return;
    }
    s->dynamic = true;
    s->cur_scale = ldexp(1.0, (int)cfg->fp16_initial_scale_power);
    s->min_scale = cfg->fp16_min_loss_scale;
    s->scale_window = cfg->fp16_loss_scale_window;
    s->delayed_shift = cfg->fp16_hysteresis;
    s->cur_hysteresis = cfg->fp16_hysteresis;
    s->consecutive_hysteresis = cfg->fp16_consecutive_hysteresis;
    s->cur_iter = 0;
    s->last_overflow_iter = -1;
}

/* DynamicLossScaler.update_scale(overflow), called once per optimizer step (the ZeRO and fp16
 * optimizers call it from step(), before the overflow early-return, so skipped steps count):
 *
 *   overflow:
 *     if delayed_shift == 1 or cur_hysteresis == 1:
 *         cur_scale = max(cur_scale / 2, min_scale)
 *         (DeepSpeed RAISES "Current loss scale already at minimum - cannot decrease scale
 *          anymore. Exiting run." when cur_scale == min_scale here; this function cannot fail,
 *          so a caller that wants that abort checks, before calling with overflow = true:
 *          s->dynamic && s->cur_scale == s->min_scale &&
 *          (s->delayed_shift == 1 || s->cur_hysteresis == 1).)
 *     else:
 *         cur_hysteresis -= 1                       (scale kept)
 *     last_overflow_iter = cur_iter
 *   no overflow:
 *     if consecutive_hysteresis: cur_hysteresis = delayed_shift
 *     stable = cur_iter - last_overflow_iter - 1
 *     if stable > 0 and stable % scale_window == 0:
 *         if not consecutive_hysteresis: cur_hysteresis = delayed_shift
 *         cur_scale *= 2
 *   cur_iter += 1
 *
 * Consequences worth knowing: the scale doubles on the (window+1)-th consecutive clean step
 * counted from the start or from the last overflow, then every `window` clean steps after that
 * (last_overflow_iter is not reset by an increase); without consecutive_hysteresis the
 * hysteresis is refilled only by a scale increase, so after it is used up every further
 * overflow halves the scale.
 *
 * Note for the trainer: DeepSpeed's ZeRO step() (and FP16_Optimizer.step()) call update_scale
 * BEFORE unscaling, and unscale_and_clip_grads divides by the UPDATED scale; so on a step where
 * the scale doubles, the gradients (computed with the old scale) are divided by twice that scale
 * unless clipping is binding (then clip * scale cancels it). Stage 1/2 divides the reported
 * global norm by the old scale (prev_scale). zinf deliberately unscales by the scale the
 * gradients were computed with (train.c updates the scaler after the step), so a doubling step
 * is not halved; only the scale's trajectory follows DeepSpeed exactly. */
bool zinf_loss_scaler_update(zinf_loss_scaler *s, bool overflow)
{
    if (!s->dynamic) return false;
    double before = s->cur_scale;
    if (overflow) {
        if (s->delayed_shift == 1 || s->cur_hysteresis == 1) {
            double next = s->cur_scale / 2.0;
            s->cur_scale = next > s->min_scale ? next : s->min_scale;
        } else {
            s->cur_hysteresis -= 1;
        }
        s->last_overflow_iter = s->cur_iter;
    } else {
        if (s->consecutive_hysteresis) s->cur_hysteresis = s->delayed_shift;
        int64_t stable_interval = (s->cur_iter - s->last_overflow_iter) - 1;
        if (stable_interval > 0 && s->scale_window > 0 && stable_interval % s->scale_window == 0) {
            if (!s->consecutive_hysteresis) s->cur_hysteresis = s->delayed_shift;
            s->cur_scale *= 2.0;
        }
    }
    s->cur_iter += 1;
    return s->cur_scale != before;
}

/* ZeRO's unscale_and_clip_grads (stage_1_and_2.py, stage3.py), with the norm already unscaled:
 *   clip = (norm + 1e-6) / max_norm, clamped below at 1;  grads *= 1 / clip
 * i.e. coef = 1 / max(1, (norm + 1e-6) / max_norm) = min(1, max_norm / (norm + 1e-6)); the
 * non-ZeRO path (runtime/utils.py clip_grad_norm_) multiplies by max_norm / (norm + 1e-6) when
 * that is < 1, the same value. max_norm <= 0 means clipping is off (DeepSpeed: clip_grad > 0).
 * A NaN norm gives NaN, as torch.clamp does in the ZeRO path. */
double zinf_clip_coef(double norm, double max_norm)
{
    if (!(max_norm > 0.0)) return 1.0;
    double clip = (norm + 1e-6) / max_norm;
    if (isnan(clip)) return clip;
    if (clip > 1.0) return 1.0 / clip;
    return 1.0;
}
