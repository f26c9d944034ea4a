/* sched: DeepSpeed's learning-rate schedules (WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle,
 * LRRangeTest) as pure functions of the step, with DeepSpeed's exact formulas, and OneCycle's
 * momentum (beta1) cycle. */
#ifndef ZINF_SCHED_H
#define ZINF_SCHED_H

#include <stdint.h>

#include "config.h"

/* The learning rate for the optimizer step that follows `step` APPLIED optimizer steps
 * (step = 0 for the first update), as DeepSpeed's scheduler yields it: DeepSpeed's engine steps
 * the scheduler after each update that was applied and NOT after an fp16-overflow-skipped one,
 * so skipped steps must not be counted in `step`. Mapping: DeepSpeed's last_batch_iteration =
 * step - 1; step 0 gets what the scheduler's constructor set (WarmupLR/WarmupDecayLR:
 * warmup_min_lr; WarmupCosineLR: 0.0; OneCycle: cycle_min_lr; LRRangeTest: its min lr).
 * base_lr is the optimizer's configured lr (used by WarmupCosineLR, whose values are ratios of
 * it, and returned unchanged when c->type is ZINF_SCHED_NONE). */
double zinf_sched_lr(const zinf_sched_cfg *c, double base_lr, int64_t step);

/* beta1 for that step: OneCycle with cycle_momentum cycles it (step 0: cycle_min_mom, as the
 * constructor sets it); otherwise base_beta1. */
double zinf_sched_beta1(const zinf_sched_cfg *c, double base_beta1, int64_t step);

/* beta2 for that step: OneCycle with cycle_momentum sets betas = (beta1, 0.99) at construction
 * and on every step, overriding the optimizer's beta2; otherwise base_beta2. */
double zinf_sched_beta2(const zinf_sched_cfg *c, double base_beta2, int64_t step);

const char *zinf_sched_name(zinf_sched_type t);

#endif
