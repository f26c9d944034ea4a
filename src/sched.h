/* sched: DeepSpeed's learning-rate schedules (WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle,
 * LRRangeTest) as pure functions of the step, with DeepSpeed's exact formulas, and OneCycle's
 * momentum (beta1) cycle. */
#ifndef ZINF_SCHED_H
#define ZINF_SCHED_H

#include <stdint.h>

#include "config.h"

/* The learning rate for the optimizer step that follows `step` completed optimizer steps
 * (step = 0 for the first update), as DeepSpeed's scheduler yields it when it is stepped once per
 * optimizer step. base_lr is the optimizer's configured lr (used by WarmupCosineLR, whose values
 * are ratios of it, and returned unchanged when c->type is ZINF_SCHED_NONE). */
double zinf_sched_lr(const zinf_sched_cfg *c, double base_lr, int64_t step);

/* beta1 for that step: OneCycle with cycle_momentum cycles it; otherwise base_beta1. */
double zinf_sched_beta1(const zinf_sched_cfg *c, double base_beta1, int64_t step);

const char *zinf_sched_name(zinf_sched_type t);

#endif
