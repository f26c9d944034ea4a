/* sched: DeepSpeed's learning-rate schedules as pure functions of the optimizer step.
 *
 * Source read: deepspeed/runtime/lr_schedules.py (deepspeedai/DeepSpeed master, 2025/26: the
 * version whose OneCycle honours the stair counts and whose WarmupCosineLR clamps the cosine
 * progress at 1) and deepspeed/runtime/engine.py. What follows is written from the math, not
 * copied.
 *
 * Step semantics (what zinf_sched_lr's `step` means):
 *  - engine.py `_scheduler_from_config` builds the scheduler with last_batch_iteration = -1 and
 *    does not step it. The constructors then put the value for iteration -1 into the optimizer:
 *      WarmupLR / WarmupDecayLR: get_lr() at iteration -1 = warmup_min_lr;
 *      WarmupCosineLR:           get_lr() at iteration -1 = 0.0 (not a ratio of the base lr);
 *      OneCycle `_initialize_lr`: cycle_min_lr; `_initialize_momentum`: betas=(cycle_min_mom,0.99);
 *      LRRangeTest:              lr_range_test_min_lr.
 *    So the first optimizer update (k = 0) runs with those values.
 *  - engine.py `_take_model_step` calls optimizer.step() and then lr_scheduler.step() only when
 *    the optimizer did NOT report an fp16 overflow (overflow -> skipped_steps += 1, no scheduler
 *    step). step() does last_batch_iteration += 1 and writes get_lr() into the param groups.
 *  - Hence the update that follows `step` applied (non-skipped) updates runs with get_lr() at
 *    last_batch_iteration t = step - 1. That is what zinf_sched_lr(c, base_lr, step) returns
 *    (t = -1 gives the constructor's value above). The trainer must pass the number of APPLIED
 *    updates: an overflow-skipped step does not advance the schedule.
 *
 * Arithmetic is done in double in the same operation order as the Python code, so on IEEE
 * hardware without FMA contraction the results are bit-identical to DeepSpeed's floats. */
#include "sched.h"

#include <math.h>

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

/* ---- WarmupLR / WarmupDecayLR / WarmupCosineLR warm-up ----------------------------------
 * W = max(2, warmup_num_steps), t = last_batch_iteration, 0 <= t < W:
 *   log:    gamma(t) = (1 / ln W) * ln(t + 1)
 *   linear: gamma(t) = t / W
 * (WarmupLR._get_gamma, WarmupDecayLR._get_gamma, WarmupCosineLR.get_lr_ratio.) */
static int64_t warmup_steps(const zinf_sched_cfg *c)
{
    return c->warmup_num_steps < 2 ? 2 : c->warmup_num_steps;
}

static double warmup_gamma(const zinf_sched_cfg *c, int64_t W, int64_t t)
{
    if (c->warmup_type_linear) return (double)t / (double)W;
    double inverse_log_warm_up = 1.0 / log((double)W);
    return inverse_log_warm_up * log((double)(t + 1));
}

/* WarmupLR.get_lr: lr(t) = min + (max - min) * gamma(t), gamma = 1 for t >= W.
 * WarmupDecayLR._get_gamma for t >= W:
 *   gamma(t) = max(0, (total - t) / max(1, total - W)) */
static double warmup_lr(const zinf_sched_cfg *c, int64_t t, bool decay)
{
    if (t < 0) return c->warmup_min_lr; /* get_lr before the first step: min_lrs */
    int64_t W = warmup_steps(c);
    double gamma;
    if (t < W) {
        gamma = warmup_gamma(c, W, t);
    } else if (!decay) {
        gamma = 1.0;
    } else {
        double den = (double)(c->total_num_steps - W);
        if (den < 1.0) den = 1.0;
        gamma = (double)(c->total_num_steps - t) / den;
        if (gamma < 0.0) gamma = 0.0;
    }
    double delta = c->warmup_max_lr - c->warmup_min_lr;
    return c->warmup_min_lr + delta * gamma;
}

/* WarmupCosineLR.get_lr_ratio, t = last_batch_iteration:
 *   t < W:  r = wmin + gamma(t) * (1 - wmin)
 *   t >= W: s = t - W + 1, S = max(1, total - W), p = min(1, s / S),
 *           r = max(0, cmin + (1 - cmin) * (1 + cos(pi * p)) / 2)
 * lr = base_lr * r; before the first step (t < 0) get_lr returns 0.0.
 * (Older DeepSpeed releases did not clamp p at 1, so past total_num_steps their cosine rose
 * again; they agree with this for t <= total_num_steps when total > W.) */
static double warmup_cosine_lr(const zinf_sched_cfg *c, double base_lr, int64_t t)
{
    if (t < 0) return 0.0;
    int64_t W = warmup_steps(c);
    double ratio;
    if (t < W) {
        ratio = warmup_gamma(c, W, t);
        double ratio_delta = 1.0 - c->warmup_min_ratio;
        ratio = c->warmup_min_ratio + ratio * ratio_delta;
    } else {
        int64_t real_last_step = t - W + 1;
        int64_t real_total_steps = c->total_num_steps - W;
        if (real_total_steps < 1) real_total_steps = 1;
        double progress = (double)real_last_step / (double)real_total_steps;
        if (progress > 1.0) progress = 1.0;
        double ratio_delta = 1.0 - c->cos_min_ratio;
        ratio = (1.0 + cos(M_PI * progress)) / 2.0;
        ratio = c->cos_min_ratio + ratio_delta * ratio;
        if (ratio < 0.0) ratio = 0.0;
    }
    return base_lr * ratio;
}

/* ---- OneCycle ------------------------------------------------------------------------------
 * F = cycle_first_step_size, G = cycle_second_step_size (negative = None -> F), T = F + G,
 * rho = F / T. For batch index b = last_batch_iteration + 1 (OneCycle._get_scale_factor):
 *   cycle = floor(1 + b/T), x = 1 + b/T - cycle
 *   x <= rho: s = x / rho,             stairs n = cycle_first_stair_count
 *   else:     s = (x - 1) / (rho - 1), stairs n = cycle_second_stair_count (negative -> first)
 *   n > 0:    i = b mod T; pos = i*n/F if i <= F else (T - i)*n/G; s = floor(pos) / n
 * Cycle phase (last_batch_iteration < T):
 *   lr   = min_lr + (max_lr - min_lr) * s                      (_get_cycle_lr)
 *   beta1 = max_mom - (max_mom - min_mom) * s                   (_get_cycle_mom)
 * Decay phase, d = last_batch_iteration - T + 1, q = d / decay_step_size:
 *   lr    = min_lr / (1 + decay_lr_rate * q)    (just min_lr when decay_step_size == 0 or
 *                                                decay_lr_rate == 0)      (_get_decay_lr)
 *   beta1 = max_mom * (1 + decay_mom_rate * q)  (just max_mom when decay_step_size == 0 or
 *                                                decay_mom_rate == 0)     (_get_decay_mom)
 * Before the first step the constructor sets lr = min_lr and betas = (min_mom, 0.99): note that
 * the first update's beta1 is cycle_min_mom while the formula at b = 0 would give cycle_max_mom.
 * Whenever cycle_momentum is on, beta2 is 0.99 for every step (see zinf_sched_beta2). */
static double onecycle_first(const zinf_sched_cfg *c) { return (double)c->cycle_first_step_size; }

static double onecycle_second(const zinf_sched_cfg *c)
{
    return c->cycle_second_step_size < 0 ? (double)c->cycle_first_step_size
                                         : (double)c->cycle_second_step_size;
}

static double onecycle_total(const zinf_sched_cfg *c)
{
    return onecycle_first(c) + onecycle_second(c);
}

static double onecycle_scale(const zinf_sched_cfg *c, int64_t b)
{
    double first = onecycle_first(c), second = onecycle_second(c);
    double total = first + second;
    double step_ratio = first / total;
    double q = (double)b / total;
    double cycle = floor(1.0 + q);
    double x = 1.0 + q - cycle;
    double scale;
    int64_t stair_count;
    if (x <= step_ratio) {
        scale = x / step_ratio;
        stair_count = c->cycle_first_stair_count;
    } else {
        scale = (x - 1.0) / (step_ratio - 1.0);
        stair_count = c->cycle_second_stair_count < 0 ? c->cycle_first_stair_count
                                                      : c->cycle_second_stair_count;
    }
    if (stair_count > 0) {
        double cycle_iteration = fmod((double)b, total); /* b >= 0, total > 0: Python's % */
        double pos;
        if (cycle_iteration <= first)
            pos = cycle_iteration * (double)stair_count / first;
        else
            pos = (total - cycle_iteration) * (double)stair_count / second;
        scale = floor(pos) / (double)stair_count;
    }
    return scale;
}

static double onecycle_lr(const zinf_sched_cfg *c, int64_t t)
{
    if (t < 0) return c->cycle_min_lr; /* OneCycle._initialize_lr */
    double total = onecycle_total(c);
    if ((double)t < total) {
        double base_height = (c->cycle_max_lr - c->cycle_min_lr) * onecycle_scale(c, t + 1);
        return c->cycle_min_lr + base_height;
    }
    if (c->decay_step_size == 0 || c->decay_lr_rate == 0.0) return c->cycle_min_lr;
    double decay_batch_iteration = (double)t - total + 1.0;
    double decay_interval = decay_batch_iteration / (double)c->decay_step_size;
    double lr_decay_factor = 1.0 + c->decay_lr_rate * decay_interval;
    return c->cycle_min_lr / lr_decay_factor;
}

static double onecycle_mom(const zinf_sched_cfg *c, int64_t t)
{
    if (t < 0) return c->cycle_min_mom; /* OneCycle._initialize_momentum */
    double total = onecycle_total(c);
    if ((double)t < total) {
        double base_height = (c->cycle_max_mom - c->cycle_min_mom) * onecycle_scale(c, t + 1);
        return c->cycle_max_mom - base_height;
    }
    if (c->decay_step_size == 0 || c->decay_mom_rate == 0.0) return c->cycle_max_mom;
    double decay_batch_iteration = (double)t - total + 1.0;
    double decay_interval = decay_batch_iteration / (double)c->decay_step_size;
    double mom_decay_factor = 1.0 + c->decay_mom_rate * decay_interval;
    return c->cycle_max_mom * mom_decay_factor;
}

/* ---- LRRangeTest ---------------------------------------------------------------------------
 * interval(t) = (t + 1) / step_size, floored when staircase (_staircase_interval /
 * _continuous_interval); lr = min_lr * (1 + step_rate * interval). The constructor's min_lr for
 * t = -1 is the same formula at interval 0. */
static double range_test_lr(const zinf_sched_cfg *c, int64_t t)
{
    if (t < 0) return c->lr_range_test_min_lr;
    double interval = (double)(t + 1) / (double)c->lr_range_test_step_size;
    if (c->lr_range_test_staircase) interval = floor(interval);
    double lr_increase = 1.0 + c->lr_range_test_step_rate * interval;
    return c->lr_range_test_min_lr * lr_increase;
}

/* `step` = optimizer updates applied so far (overflow-skipped ones excluded: DeepSpeed's engine
 * does not step the scheduler on them); DeepSpeed's last_batch_iteration is step - 1. */
/* The HF Trainer's schedules (transformers' optimization.py, get_scheduler): a LambdaLR whose
 * factor for the k-th update (k = 0 first; the Trainer steps the scheduler after each applied
 * update) is, with W warmup and N total steps,
 *   warmup (k < W, all but constant): k / max(1, W)
 *   linear: max(0, (N - k) / max(1, N - W))
 *   cosine: max(0, 0.5 (1 + cos(pi * (k - W) / max(1, N - W))))   (num_cycles 0.5)
 *   cosine_with_min_lr: the cosine factor f as f (1 - m) + m, m = min_lr / lr
 *   constant, constant_with_warmup: 1 */
static double hf_factor(const zinf_sched_cfg *c, double base_lr, int64_t k)
{
    double W = (double)c->warmup_num_steps, N = (double)c->total_num_steps, K = (double)k;
    if (c->type == ZINF_SCHED_HF_CONSTANT) return 1.0;
    if (K < W) return K / (W > 1 ? W : 1);
    double d = N - W > 1 ? N - W : 1, progress = (K - W) / d;
    switch (c->type) {
    case ZINF_SCHED_HF_LINEAR: return (N - K) / d > 0 ? (N - K) / d : 0.0;
    case ZINF_SCHED_HF_COSINE: {
        double f = 0.5 * (1.0 + cos(M_PI * 2.0 * 0.5 * progress));
        return f > 0 ? f : 0.0;
    }
    case ZINF_SCHED_HF_COSINE_MIN_LR: {
        double f = 0.5 * (1.0 + cos(M_PI * 2.0 * 0.5 * progress)), m = base_lr > 0 ? c->hf_min_lr / base_lr : 0;
        f = f > 0 ? f : 0.0;
        return f * (1.0 - m) + m;
    }
    default: return 1.0;
    }
}

double zinf_sched_lr(const zinf_sched_cfg *c, double base_lr, int64_t step)
{
    int64_t t = step - 1;
    if (c->type >= ZINF_SCHED_HF_LINEAR) return base_lr * hf_factor(c, base_lr, step);
    switch (c->type) {
    case ZINF_SCHED_WARMUP_LR: return warmup_lr(c, t, false);
    case ZINF_SCHED_WARMUP_DECAY_LR: return warmup_lr(c, t, true);
    case ZINF_SCHED_WARMUP_COSINE_LR: return warmup_cosine_lr(c, base_lr, t);
    case ZINF_SCHED_ONE_CYCLE: return onecycle_lr(c, t);
    case ZINF_SCHED_LR_RANGE_TEST: return range_test_lr(c, t);
    case ZINF_SCHED_NONE:
    default: return base_lr;
    }
}

double zinf_sched_beta1(const zinf_sched_cfg *c, double base_beta1, int64_t step)
{
    if (c->type != ZINF_SCHED_ONE_CYCLE || !c->cycle_momentum) return base_beta1;
    return onecycle_mom(c, step - 1);
}

double zinf_sched_beta2(const zinf_sched_cfg *c, double base_beta2, int64_t step)
{
    (void)step;
    if (c->type != ZINF_SCHED_ONE_CYCLE || !c->cycle_momentum) return base_beta2;
    return 0.99; /* OneCycle keeps betas = (mom, 0.99) in every phase */
}

const char *zinf_sched_name(zinf_sched_type t)
{
    switch (t) {
    case ZINF_SCHED_NONE: return "none";
    case ZINF_SCHED_WARMUP_LR: return "WarmupLR";
    case ZINF_SCHED_WARMUP_DECAY_LR: return "WarmupDecayLR";
    case ZINF_SCHED_WARMUP_COSINE_LR: return "WarmupCosineLR";
    case ZINF_SCHED_ONE_CYCLE: return "OneCycle";
    case ZINF_SCHED_LR_RANGE_TEST: return "LRRangeTest";
    case ZINF_SCHED_HF_LINEAR: return "linear";
    case ZINF_SCHED_HF_COSINE: return "cosine";
    case ZINF_SCHED_HF_COSINE_MIN_LR: return "cosine_with_min_lr";
    case ZINF_SCHED_HF_CONSTANT: return "constant";
    case ZINF_SCHED_HF_CONSTANT_WARMUP: return "constant_with_warmup";
    }
    return "unknown";
}
