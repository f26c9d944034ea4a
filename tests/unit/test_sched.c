/* test_sched: LR schedules, OneCycle momentum, loss scaler and clip coefficient against
 * DeepSpeed's formulas written out independently here (closed forms in double precision).
 *
 * Index convention (see sched.h): zinf_sched_lr(c, base, k) is the lr of update k (k = 0 first),
 * which DeepSpeed computes with last_batch_iteration t = k - 1; k = 0 gets what the scheduler's
 * constructor set. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "config.h"
#include "optim.h"
#include "sched.h"

#define RT 1e-12 /* relative tolerance: the formulas are evaluated in double both sides */
#define PI 3.14159265358979323846

static zinf_sched_cfg base_cfg(zinf_sched_type t)
{
    zinf_sched_cfg c;
    memset(&c, 0, sizeof c);
    c.type = t;
    c.cycle_second_step_size = -1;
    c.cycle_second_stair_count = -1;
    return c;
}

/* ---- WarmupLR (WarmupLR.get_lr / _get_gamma) ----
 * lr(t) = min + (max-min) * gamma(t); log: gamma = ln(t+1)/ln(W); linear: gamma = t/W;
 * gamma = 1 for t >= W; W = max(2, warmup_num_steps); t = -1 (before any step): min. */
static void test_warmup_lr(void)
{
    const double mn = 1e-5, mx = 1e-3;
    zinf_sched_cfg c = base_cfg(ZINF_SCHED_WARMUP_LR);
    c.warmup_min_lr = mn;
    c.warmup_max_lr = mx;
    c.warmup_num_steps = 1000;
    c.total_num_steps = -1;

    CHECK_CLOSE(zinf_sched_lr(&c, 0.5, 0), mn, RT, 0, "WarmupLR log k=0 (ctor)");
    CHECK_CLOSE(zinf_sched_lr(&c, 0.5, 1), mn, RT, 0, "WarmupLR log k=1 (t=0, ln 1 = 0)");
    CHECK_CLOSE(zinf_sched_lr(&c, 0.5, 11), mn + (mx - mn) * log(11.0) / log(1000.0), RT, 0,
                "WarmupLR log t=10");
    CHECK_CLOSE(zinf_sched_lr(&c, 0.5, 500), mn + (mx - mn) * log(500.0) / log(1000.0), RT, 0,
                "WarmupLR log t=499");
    CHECK_CLOSE(zinf_sched_lr(&c, 0.5, 1000), mx, RT, 0, "WarmupLR log t=999 (ln1000/ln1000)");
    CHECK_CLOSE(zinf_sched_lr(&c, 0.5, 1001), mx, RT, 0, "WarmupLR t=1000 -> max");
    CHECK_CLOSE(zinf_sched_lr(&c, 0.5, 50000), mx, RT, 0, "WarmupLR t>>W -> max");

    c.warmup_type_linear = 1;
    c.warmup_num_steps = 100;
    CHECK_CLOSE(zinf_sched_lr(&c, 0.5, 0), mn, RT, 0, "WarmupLR lin k=0");
    CHECK_CLOSE(zinf_sched_lr(&c, 0.5, 1), mn, RT, 0, "WarmupLR lin t=0");
    CHECK_CLOSE(zinf_sched_lr(&c, 0.5, 51), mn + (mx - mn) * 0.5, RT, 0, "WarmupLR lin t=50");
    CHECK_CLOSE(zinf_sched_lr(&c, 0.5, 100), mn + (mx - mn) * 0.99, RT, 0, "WarmupLR lin t=99");
    CHECK_CLOSE(zinf_sched_lr(&c, 0.5, 101), mx, RT, 0, "WarmupLR lin t=100");

    /* warmup_num_steps below 2 is raised to 2 */
    c.warmup_num_steps = 1;
    CHECK_CLOSE(zinf_sched_lr(&c, 0.5, 2), mn + (mx - mn) * 0.5, RT, 0, "WarmupLR W=1->2 t=1");
    CHECK_CLOSE(zinf_sched_lr(&c, 0.5, 3), mx, RT, 0, "WarmupLR W=1->2 t=2");
    c.warmup_type_linear = 0;
    c.warmup_num_steps = 0;
    CHECK_CLOSE(zinf_sched_lr(&c, 0.5, 2), mn + (mx - mn) * log(2.0) / log(2.0), RT, 0,
                "WarmupLR W=0->2 log t=1");
}

/* ---- WarmupDecayLR (WarmupDecayLR._get_gamma) ----
 * t >= W: gamma = max(0, (total - t) / max(1, total - W)). */
static void test_warmup_decay_lr(void)
{
    const double mn = 0.0, mx = 2e-4;
    zinf_sched_cfg c = base_cfg(ZINF_SCHED_WARMUP_DECAY_LR);
    c.warmup_min_lr = mn;
    c.warmup_max_lr = mx;
    c.warmup_num_steps = 100;
    c.warmup_type_linear = 1;
    c.total_num_steps = 1000;

    CHECK_CLOSE(zinf_sched_lr(&c, 1.0, 0), mn, RT, 0, "WarmupDecayLR k=0");
    CHECK_CLOSE(zinf_sched_lr(&c, 1.0, 26), mn + (mx - mn) * 25.0 / 100.0, RT, 0,
                "WarmupDecayLR lin t=25");
    CHECK_CLOSE(zinf_sched_lr(&c, 1.0, 101), mx, RT, 0, "WarmupDecayLR t=100 -> (1000-100)/900");
    CHECK_CLOSE(zinf_sched_lr(&c, 1.0, 551), mn + (mx - mn) * 450.0 / 900.0, RT, 0,
                "WarmupDecayLR t=550");
    CHECK_CLOSE(zinf_sched_lr(&c, 1.0, 1000), mn + (mx - mn) * 1.0 / 900.0, RT, 0,
                "WarmupDecayLR t=999");
    CHECK_CLOSE(zinf_sched_lr(&c, 1.0, 1001), mn, 0, 1e-300, "WarmupDecayLR t=1000 -> 0");
    CHECK_CLOSE(zinf_sched_lr(&c, 1.0, 3000), mn, 0, 1e-300, "WarmupDecayLR past total clamps");

    /* log warmup with nonzero min */
    c.warmup_min_lr = 1e-6;
    c.warmup_type_linear = 0;
    CHECK_CLOSE(zinf_sched_lr(&c, 1.0, 8), 1e-6 + (mx - 1e-6) * log(8.0) / log(100.0), RT, 0,
                "WarmupDecayLR log t=7");
    CHECK_CLOSE(zinf_sched_lr(&c, 1.0, 0), 1e-6, RT, 0, "WarmupDecayLR k=0 -> min");
    CHECK_CLOSE(zinf_sched_lr(&c, 1.0, 776), 1e-6 + (mx - 1e-6) * (225.0 / 900.0), RT, 0,
                "WarmupDecayLR t=775");

    /* total < W: denominator floored at 1, gamma clamped at 0 */
    c.total_num_steps = 50;
    CHECK_CLOSE(zinf_sched_lr(&c, 1.0, 151), 1e-6, RT, 0, "WarmupDecayLR total<W after warmup");
}

/* ---- WarmupCosineLR (WarmupCosineLR.get_lr / get_lr_ratio) ----
 * t < 0: 0.0; t < W: r = wmin + gamma(t)(1 - wmin);
 * t >= W: p = min(1, (t - W + 1) / max(1, total - W)),
 *         r = max(0, cmin + (1 - cmin)(1 + cos(pi p))/2); lr = base * r. */
static void test_warmup_cosine_lr(void)
{
    const double base = 3e-4, wmin = 0.1, cmin = 0.01;
    zinf_sched_cfg c = base_cfg(ZINF_SCHED_WARMUP_COSINE_LR);
    c.warmup_num_steps = 10;
    c.total_num_steps = 110;
    c.warmup_min_ratio = wmin;
    c.cos_min_ratio = cmin;

    CHECK(zinf_sched_lr(&c, base, 0) == 0.0, "WarmupCosineLR k=0 must be 0.0 (ctor), got %g",
          zinf_sched_lr(&c, base, 0));
    CHECK_CLOSE(zinf_sched_lr(&c, base, 1), base * wmin, RT, 0, "WarmupCosineLR t=0");
    CHECK_CLOSE(zinf_sched_lr(&c, base, 6), base * (wmin + (1 - wmin) * log(6.0) / log(10.0)), RT,
                0, "WarmupCosineLR log t=5");
    CHECK_CLOSE(zinf_sched_lr(&c, base, 10), base * (wmin + (1 - wmin) * log(10.0) / log(10.0)),
                RT, 0, "WarmupCosineLR log t=9");
    CHECK_CLOSE(zinf_sched_lr(&c, base, 11), base * (cmin + (1 - cmin) * (1 + cos(PI * 0.01)) / 2),
                RT, 0, "WarmupCosineLR t=10 (p=1/100)");
    CHECK_CLOSE(zinf_sched_lr(&c, base, 60), base * (cmin + (1 - cmin) * 0.5), RT, 0,
                "WarmupCosineLR t=59 (p=1/2)");
    CHECK_CLOSE(zinf_sched_lr(&c, base, 85), base * (cmin + (1 - cmin) * (1 + cos(PI * 0.75)) / 2),
                RT, 0, "WarmupCosineLR t=84 (p=3/4)");
    CHECK_CLOSE(zinf_sched_lr(&c, base, 110), base * cmin, RT, 1e-20, "WarmupCosineLR t=109 (p=1)");
    CHECK_CLOSE(zinf_sched_lr(&c, base, 200), base * cmin, RT, 1e-20,
                "WarmupCosineLR past total stays at cos_min_ratio");

    c.warmup_type_linear = 1;
    CHECK_CLOSE(zinf_sched_lr(&c, base, 6), base * (wmin + (1 - wmin) * 0.5), RT, 0,
                "WarmupCosineLR lin t=5");
    /* total <= W: every post-warmup step sits at the floor */
    c.total_num_steps = 5;
    CHECK_CLOSE(zinf_sched_lr(&c, base, 11), base * cmin, RT, 1e-20, "WarmupCosineLR total<W");
}

/* ---- OneCycle (OneCycle._get_scale_factor, _get_cycle_lr/_mom, _get_decay_lr/_mom) ----
 * b = t + 1 = k. Rising half (b in [0, F]): s = b/F; falling half (b in (F, F+G]):
 * s = 1 - (b - F)/G; lr = min + (max - min) s; beta1 = max_mom - (max_mom - min_mom) s.
 * Stairs n: s = floor(n * s_continuous) / n (taken from the integer offset).
 * After the cycle (t >= F+G), d = t - (F+G) + 1: lr = min / (1 + rate * d/decay_step_size),
 * beta1 = max_mom * (1 + mom_rate * d/decay_step_size). k = 0: lr = min, beta1 = min_mom. */
static void test_one_cycle(void)
{
    const double mn = 1e-4, mx = 1e-3, mmin = 0.85, mmax = 0.95;
    zinf_sched_cfg c = base_cfg(ZINF_SCHED_ONE_CYCLE);
    c.cycle_min_lr = mn;
    c.cycle_max_lr = mx;
    c.cycle_first_step_size = 10;
    c.decay_lr_rate = 0.5;
    c.decay_step_size = 5;
    c.cycle_momentum = true;
    c.cycle_min_mom = mmin;
    c.cycle_max_mom = mmax;
    c.decay_mom_rate = 0.1;

#define LR(s) (mn + (mx - mn) * (s))
#define MOM(s) (mmax - (mmax - mmin) * (s))
    CHECK_CLOSE(zinf_sched_lr(&c, 9.0, 0), mn, RT, 0, "OneCycle k=0 lr");
    CHECK_CLOSE(zinf_sched_beta1(&c, 0.9, 0), mmin, RT, 0, "OneCycle k=0 beta1 = cycle_min_mom");
    CHECK_CLOSE(zinf_sched_beta2(&c, 0.999, 0), 0.99, RT, 0, "OneCycle k=0 beta2 = 0.99");
    CHECK_CLOSE(zinf_sched_lr(&c, 9.0, 1), LR(0.1), RT, 0, "OneCycle b=1");
    CHECK_CLOSE(zinf_sched_beta1(&c, 0.9, 1), MOM(0.1), RT, 0, "OneCycle b=1 beta1");
    CHECK_CLOSE(zinf_sched_lr(&c, 9.0, 5), LR(0.5), RT, 0, "OneCycle b=5");
    CHECK_CLOSE(zinf_sched_beta1(&c, 0.9, 5), MOM(0.5), RT, 0, "OneCycle b=5 beta1");
    CHECK_CLOSE(zinf_sched_lr(&c, 9.0, 10), mx, RT, 0, "OneCycle b=10 peak");
    CHECK_CLOSE(zinf_sched_beta1(&c, 0.9, 10), mmin, RT, 0, "OneCycle b=10 beta1 trough");
    CHECK_CLOSE(zinf_sched_lr(&c, 9.0, 15), LR(0.5), RT, 0, "OneCycle b=15");
    CHECK_CLOSE(zinf_sched_lr(&c, 9.0, 19), LR(0.1), RT, 0, "OneCycle b=19");
    CHECK_CLOSE(zinf_sched_lr(&c, 9.0, 20), mn, RT, 0, "OneCycle t=19 (b=20) back to min");
    CHECK_CLOSE(zinf_sched_beta1(&c, 0.9, 20), mmax, RT, 0, "OneCycle t=19 beta1 max");
    CHECK_CLOSE(zinf_sched_lr(&c, 9.0, 21), mn / (1 + 0.5 * (1.0 / 5)), RT, 0,
                "OneCycle decay d=1");
    CHECK_CLOSE(zinf_sched_beta1(&c, 0.9, 21), mmax * (1 + 0.1 * (1.0 / 5)), RT, 0,
                "OneCycle decay d=1 beta1");
    CHECK_CLOSE(zinf_sched_lr(&c, 9.0, 30), mn / 2.0, RT, 0, "OneCycle decay d=10");
    CHECK_CLOSE(zinf_sched_beta1(&c, 0.9, 30), mmax * 1.2, RT, 0, "OneCycle decay d=10 beta1");
    CHECK_CLOSE(zinf_sched_beta2(&c, 0.999, 30), 0.99, RT, 0, "OneCycle decay beta2");

    /* asymmetric cycle: F=10, G=30 */
    c.cycle_second_step_size = 30;
    CHECK_CLOSE(zinf_sched_lr(&c, 9.0, 4), LR(4.0 / 10), RT, 0, "OneCycle asym b=4");
    CHECK_CLOSE(zinf_sched_lr(&c, 9.0, 10), mx, RT, 0, "OneCycle asym peak");
    CHECK_CLOSE(zinf_sched_lr(&c, 9.0, 25), LR(1 - 15.0 / 30), RT, 0, "OneCycle asym b=25");
    CHECK_CLOSE(zinf_sched_lr(&c, 9.0, 37), LR(1 - 27.0 / 30), RT, 0, "OneCycle asym b=37");
    CHECK_CLOSE(zinf_sched_lr(&c, 9.0, 41), mn / (1 + 0.5 * (1.0 / 5)), RT, 0,
                "OneCycle asym decay d=1");

    /* stairs: 4 in each half (second_stair_count absent -> first) */
    c.cycle_second_step_size = -1;
    c.cycle_first_stair_count = 4;
    CHECK_CLOSE(zinf_sched_lr(&c, 9.0, 3), LR(floor(4 * 0.3) / 4), RT, 0, "OneCycle stairs b=3");
    CHECK_CLOSE(zinf_sched_lr(&c, 9.0, 5), LR(floor(4 * 0.5) / 4), RT, 0, "OneCycle stairs b=5");
    CHECK_CLOSE(zinf_sched_lr(&c, 9.0, 10), mx, RT, 0, "OneCycle stairs peak");
    CHECK_CLOSE(zinf_sched_lr(&c, 9.0, 12), LR(floor(4 * 0.8) / 4), RT, 0, "OneCycle stairs b=12");
    CHECK_CLOSE(zinf_sched_beta1(&c, 0.9, 12), MOM(0.75), RT, 0, "OneCycle stairs b=12 beta1");
    c.cycle_second_stair_count = 2;
    CHECK_CLOSE(zinf_sched_lr(&c, 9.0, 12), LR(floor(2 * 0.8) / 2), RT, 0,
                "OneCycle stairs second=2 b=12");
    CHECK_CLOSE(zinf_sched_lr(&c, 9.0, 3), LR(floor(4 * 0.3) / 4), RT, 0,
                "OneCycle stairs second=2 b=3 (first half keeps 4)");
    /* stairs on an asymmetric cycle: the peak must stay the peak (F=10, G=30, 3 stairs) */
    c.cycle_second_step_size = 30;
    c.cycle_first_stair_count = 3;
    c.cycle_second_stair_count = 3;
    CHECK_CLOSE(zinf_sched_lr(&c, 9.0, 10), mx, RT, 0, "OneCycle asym stairs peak");
    CHECK_CLOSE(zinf_sched_lr(&c, 9.0, 20), LR(floor(3 * (1 - 10.0 / 30)) / 3), RT, 0,
                "OneCycle asym stairs b=20");
    c.cycle_second_step_size = -1;
    c.cycle_first_stair_count = 0;
    c.cycle_second_stair_count = -1;

    /* no decay: decay_step_size 0 -> min_lr / max_mom after the cycle */
    c.decay_step_size = 0;
    CHECK_CLOSE(zinf_sched_lr(&c, 9.0, 35), mn, RT, 0, "OneCycle no-decay lr");
    CHECK_CLOSE(zinf_sched_beta1(&c, 0.9, 35), mmax, RT, 0, "OneCycle no-decay beta1");
    c.decay_step_size = 5;
    c.decay_lr_rate = 0.0;
    c.decay_mom_rate = 0.0;
    CHECK_CLOSE(zinf_sched_lr(&c, 9.0, 35), mn, RT, 0, "OneCycle rate 0 lr");
    CHECK_CLOSE(zinf_sched_beta1(&c, 0.9, 35), mmax, RT, 0, "OneCycle rate 0 beta1");

    /* momentum off: betas untouched */
    c.cycle_momentum = false;
    CHECK(zinf_sched_beta1(&c, 0.9, 5) == 0.9, "beta1 with cycle_momentum off");
    CHECK(zinf_sched_beta2(&c, 0.999, 5) == 0.999, "beta2 with cycle_momentum off");
#undef LR
#undef MOM
}

/* ---- LRRangeTest (LRRangeTest.get_lr) ----
 * lr = min * (1 + rate * interval), interval = (t+1)/size = k/size, floored when staircase. */
static void test_lr_range_test(void)
{
    const double mn = 1e-4;
    zinf_sched_cfg c = base_cfg(ZINF_SCHED_LR_RANGE_TEST);
    c.lr_range_test_min_lr = mn;
    c.lr_range_test_step_size = 10;
    c.lr_range_test_step_rate = 2.0;

    CHECK_CLOSE(zinf_sched_lr(&c, 1.0, 0), mn, RT, 0, "LRRT k=0");
    CHECK_CLOSE(zinf_sched_lr(&c, 1.0, 1), mn * (1 + 2.0 * 0.1), RT, 0, "LRRT t=0");
    CHECK_CLOSE(zinf_sched_lr(&c, 1.0, 5), mn * 2.0, RT, 0, "LRRT t=4");
    CHECK_CLOSE(zinf_sched_lr(&c, 1.0, 25), mn * 6.0, RT, 0, "LRRT t=24");
    c.lr_range_test_staircase = true;
    CHECK_CLOSE(zinf_sched_lr(&c, 1.0, 5), mn, RT, 0, "LRRT stair t=4");
    CHECK_CLOSE(zinf_sched_lr(&c, 1.0, 9), mn, RT, 0, "LRRT stair t=8");
    CHECK_CLOSE(zinf_sched_lr(&c, 1.0, 10), mn * 3.0, RT, 0, "LRRT stair t=9");
    CHECK_CLOSE(zinf_sched_lr(&c, 1.0, 25), mn * 5.0, RT, 0, "LRRT stair t=24");
}

static void test_none_and_names(void)
{
    zinf_sched_cfg c = base_cfg(ZINF_SCHED_NONE);
    CHECK(zinf_sched_lr(&c, 5e-5, 0) == 5e-5, "none k=0");
    CHECK(zinf_sched_lr(&c, 5e-5, 12345) == 5e-5, "none k=12345");
    CHECK(zinf_sched_beta1(&c, 0.9, 3) == 0.9, "none beta1");
    CHECK(strcmp(zinf_sched_name(ZINF_SCHED_NONE), "none") == 0, "name none");
    CHECK(strcmp(zinf_sched_name(ZINF_SCHED_WARMUP_LR), "WarmupLR") == 0, "name WarmupLR");
    CHECK(strcmp(zinf_sched_name(ZINF_SCHED_WARMUP_DECAY_LR), "WarmupDecayLR") == 0, "name");
    CHECK(strcmp(zinf_sched_name(ZINF_SCHED_WARMUP_COSINE_LR), "WarmupCosineLR") == 0, "name");
    CHECK(strcmp(zinf_sched_name(ZINF_SCHED_ONE_CYCLE), "OneCycle") == 0, "name OneCycle");
    CHECK(strcmp(zinf_sched_name(ZINF_SCHED_LR_RANGE_TEST), "LRRangeTest") == 0, "name LRRT");
}

/* ---- loss scaler (DynamicLossScaler.update_scale) ---- */
static zinf_config fp16_cfg(int64_t power, int64_t window, int64_t hyst, bool consec, double min)
{
    zinf_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.fp16 = true;
    cfg.fp16_loss_scale = 0;
    cfg.fp16_initial_scale_power = power;
    cfg.fp16_loss_scale_window = window;
    cfg.fp16_hysteresis = hyst;
    cfg.fp16_consecutive_hysteresis = consec;
    cfg.fp16_min_loss_scale = min;
    return cfg;
}

/* Feed a script ('o' = overflow, '.' = clean) and compare the scale after each update. */
static void run_script(zinf_loss_scaler *s, const char *script, const double *want,
                       const char *what)
{
    for (int i = 0; script[i]; i++) {
        double before = s->cur_scale;
        bool changed = zinf_loss_scaler_update(s, script[i] == 'o');
        CHECK(s->cur_scale == want[i], "%s: after update %d ('%c') scale %g want %g", what, i,
              script[i], s->cur_scale, want[i]);
        CHECK(changed == (before != want[i]), "%s: update %d changed flag", what, i);
    }
}

static void test_loss_scaler(void)
{
    zinf_loss_scaler s;
    zinf_config cfg;

    /* bf16 / fp32: no scaling */
    memset(&cfg, 0, sizeof cfg);
    cfg.bf16 = true;
    cfg.fp16_initial_scale_power = 16;
    zinf_loss_scaler_init(&s, &cfg);
    CHECK(!s.dynamic && s.cur_scale == 1.0, "bf16 scale 1, got %g", s.cur_scale);
    CHECK(!zinf_loss_scaler_update(&s, true) && s.cur_scale == 1.0, "bf16 never changes");

    /* static loss_scale */
    cfg = fp16_cfg(16, 1000, 2, false, 1);
    cfg.fp16_loss_scale = 128;
    zinf_loss_scaler_init(&s, &cfg);
    CHECK(!s.dynamic && s.cur_scale == 128.0, "static scale 128, got %g", s.cur_scale);
    for (int i = 0; i < 5; i++) zinf_loss_scaler_update(&s, i % 2 == 0);
    for (int i = 0; i < 3000; i++) zinf_loss_scaler_update(&s, false);
    CHECK(s.cur_scale == 128.0, "static scale never changes, got %g", s.cur_scale);

    /* dynamic, hysteresis 2, window 3, not consecutive.
     * iter: 0 o (hyst 2->1, keep)  1 o (halve; hyst stays 1)  2 o (halve)
     *       3 . stable 0   4 . 1   5 . 2   6 . 3 -> double, hyst := 2
     *       7 . 4   8 . 5   9 . 6 -> double
     *       10 o (hyst 2->1, keep)  11 . stable 0 (hyst stays 1)  12 o (halve) */
    cfg = fp16_cfg(16, 3, 2, false, 1);
    zinf_loss_scaler_init(&s, &cfg);
    CHECK(s.dynamic && s.cur_scale == 65536.0, "init 2^16, got %g", s.cur_scale);
    {
        const double K = 65536.0;
        const double want[] = {K,     K / 2, K / 4, K / 4, K / 4, K / 4, K / 2,
                               K / 2, K / 2, K,     K,     K,     K / 2};
        run_script(&s, "ooo.......o.o", want, "hysteresis 2 window 3");
        CHECK(s.cur_hysteresis == 1, "hysteresis used up, got %lld", (long long)s.cur_hysteresis);
    }

    /* consecutive_hysteresis: a clean step refills hysteresis, so alternating overflows never
     * lower the scale; two in a row do. */
    cfg = fp16_cfg(16, 1000, 2, true, 1);
    zinf_loss_scaler_init(&s, &cfg);
    {
        const double K = 65536.0;
        const double want[] = {K, K, K, K, K, K, K, K / 2, K / 4};
        run_script(&s, "o.o.o.ooo", want, "consecutive hysteresis");
    }

    /* window counted from the start: with window 2 the 3rd clean update doubles, then every
     * 2 more (stable interval 2, 4, ...). */
    cfg = fp16_cfg(10, 2, 1, false, 1);
    zinf_loss_scaler_init(&s, &cfg);
    {
        const double want[] = {1024, 1024, 2048, 2048, 4096, 2048, 2048, 2048, 4096};
        run_script(&s, ".....o...", want, "window 2 from start");
    }

    /* min_loss_scale floor: 4 -> 2 -> 1 -> 1 (DeepSpeed raises at the last one) */
    cfg = fp16_cfg(2, 1000, 1, false, 1);
    zinf_loss_scaler_init(&s, &cfg);
    {
        const double want[] = {2, 1};
        run_script(&s, "oo", want, "min floor");
        bool at_min = s.dynamic && s.cur_scale == s.min_scale &&
                      (s.delayed_shift == 1 || s.cur_hysteresis == 1);
        CHECK(at_min, "DeepSpeed's raise condition holds at the floor");
        CHECK(!zinf_loss_scaler_update(&s, true) && s.cur_scale == 1.0, "stays at the floor");
    }
    cfg = fp16_cfg(2, 1000, 1, false, 3);
    zinf_loss_scaler_init(&s, &cfg);
    zinf_loss_scaler_update(&s, true);
    CHECK(s.cur_scale == 3.0, "max(4/2, min 3) = 3, got %g", s.cur_scale);
}

/* ---- clip coefficient: ZeRO unscale_and_clip_grads: coef = 1 / max(1, (norm+1e-6)/max) ---- */
static void test_clip(void)
{
    CHECK(zinf_clip_coef(5.0, 0.0) == 1.0, "clipping off");
    CHECK(zinf_clip_coef(0.5, 1.0) == 1.0, "below threshold");
    CHECK_CLOSE(zinf_clip_coef(2.0, 1.0), 1.0 / (2.0 + 1e-6), RT, 0, "norm 2 max 1");
    CHECK_CLOSE(zinf_clip_coef(10.0, 0.5), 0.5 / (10.0 + 1e-6), RT, 0, "norm 10 max 0.5");
    CHECK_CLOSE(zinf_clip_coef(1.0, 1.0), 1.0 / (1.0 + 1e-6), RT, 0, "norm == max still clips");
    CHECK(zinf_clip_coef(1.0 - 1e-6, 1.0) <= 1.0, "just below: coef <= 1");
    CHECK(zinf_clip_coef(1.0 - 2e-6, 1.0) == 1.0, "below by 2e-6: no clip");
    CHECK(zinf_clip_coef(INFINITY, 1.0) == 0.0, "inf norm -> 0");
    CHECK(isnan(zinf_clip_coef(NAN, 1.0)), "NaN norm propagates");
}

int main(void)
{
    test_warmup_lr();
    test_warmup_decay_lr();
    test_warmup_cosine_lr();
    test_one_cycle();
    test_lr_range_test();
    test_none_and_names();
    test_loss_scaler();
    test_clip();
    return check_done("test_sched");
}
