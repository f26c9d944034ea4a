/* fuzz_config: a deterministic mutation fuzzer for the DeepSpeed config reader
 * (zinf_config_parse), run by `make check` with plain gcc.
 *
 * Seeds: every tests/fixtures/NAME.json* file (directory from $FIXTURES, else "tests/fixtures") and
 * the built-in configs below. Each iteration takes a corpus entry, stacks 1-4 seeded mutations
 * (byte flips, JSON punctuation and keywords, "auto", huge/negative/overflowing numbers, NaN,
 * 1e400, unicode and invalid UTF-8, comments, truncation, key renames, value replacement,
 * nesting, splices between entries, long strings) and parses the result at a world size in
 * {1,2,3,4} with flags that do or do not give the hidden size (and other flag variants).
 *
 * Asserted for every input (behaviour, not only "it did not crash"):
 *  - the status is 0 or negative; a failure leaves a message that is non-empty, one line, starts
 *    with the source name "fuzz" and is shorter than 1000 characters;
 *  - every warning line starts with "zinf: warning: fuzz: " and there are cfg.n_warnings of them;
 *  - a success satisfies what config.c promises: the batch rule train = micro x gas x world
 *    (checked in 128-bit arithmetic, all three positive), stage 0-3, not fp16 and bf16, the
 *    offload/stage combinations, non-negative finite numbers, betas in [0, 1), the enum ranges,
 *    the derived values (overlap_comm, adam_w_mode, logging/eval steps, ...);
 *  - an independent oracle: jansson parses the raw text (it only succeeds when there are no
 *    comments, so the text zinf parses is the same). Raw JSON that is not an object and has no
 *    '/' must be rejected; a valid object must never be called malformed; values written in it
 *    (batch sizes, stage, fp16/bf16, lr, betas, device, optimizer type) must come out unchanged,
 *    and a few combinations the config rules forbid (fp16+bf16, stage 4, offload_param below
 *    stage 3, train_batch_size <= 0, amsgrad true) must be rejected;
 *  - parsing is deterministic (same input, same bytes of zinf_config and the same message), and
 *    `zinf config show` output of a success is a JSON object with the same batch size and stage.
 * Each failing kind is printed once with the input minimised and written as a C string literal.
 *
 * Environment: ZINF_FUZZ_ITERS (default 20000), ZINF_FUZZ_SEED (default 1),
 * ZINF_FUZZ_SECONDS (wall-clock cap, default 15: the run stops early and says so).
 *
 * Accepted must also mean trainable, so the run can hand a sample to tests/mpi/test_fuzz_train.sh:
 * ZINF_FUZZ_EMIT_DIR=dir (an existing directory) and ZINF_FUZZ_EMIT_N=n (default 32) write n
 * accepted mutated configs as dir/000.json, dir/001.json, ... and dir/index.txt, one line per
 * file: "NNN.json WORLD feature...". Each was accepted as `zinf train --model test-mini
 * --max_length 16 --max_steps 2 --logging_steps 1` at world size WORLD (1-3) parses it, with the
 * batch numbers made small (micro <= 2, accumulation <= 3, rewritten through jansson when larger)
 * so a run takes well under a second. The sample is a deterministic greedy cover of features of
 * the resolved configs: stage 0-3 (by world size), fp16/bf16 (by stage), accumulation, the
 * schedulers, clipping, CPU offload of either kind, and every zero_optimization size key at 0, 1,
 * small, mid and huge values at a stage that uses it; the shortest text is kept per feature set.
 * The size mutation (case 16) sets a size key to 0, 1, 2, 7, 1e12 or 2^62, all legal in DeepSpeed
 * (pydantic ints with ge=0). Emitting draws nothing from the random stream: the fuzz run and its
 * checks are the same with or without it (the parses it adds make it about twice as long).
 *
 * libFuzzer build (not part of make check), from the repository root after ./configure:
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -DZINF_LIBFUZZER -I. -iquote src \
 *     tests/fuzz/fuzz_config.c src/config.c src/err.c $(pkg-config --cflags --libs jansson) -lm \
 *     -o fuzz_config_lf
 *   ./fuzz_config_lf -max_total_time=600 tests/fixtures
 * It runs the same checks and abort()s on the first violated one. */
#define _GNU_SOURCE
#include <dirent.h>
#include <math.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <jansson.h>

#include "config.h"
#include "err.h"

#define SRC "fuzz"

/* ============================================================================ small helpers */

#include "rng.h"

typedef struct {
    char *p;
    size_t n, cap;
} buf;

static void buf_reserve(buf *b, size_t need)
{
    if (need <= b->cap) return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need) cap *= 2;
    char *np = realloc(b->p, cap);
    if (!np) {
        fprintf(stderr, "fuzz_config: out of memory\n");
        exit(1);
    }
    b->p = np;
    b->cap = cap;
}

static void buf_set(buf *b, const char *s, size_t n)
{
    buf_reserve(b, n + 1);
    memcpy(b->p, s, n);
    b->n = n;
}

/* replace b[at, at+del) by s[0, n) */
static void buf_splice(buf *b, size_t at, size_t del, const char *s, size_t n)
{
    if (at > b->n) at = b->n;
    if (del > b->n - at) del = b->n - at;
    buf_reserve(b, b->n - del + n + 1);
    memmove(b->p + at + n, b->p + at + del, b->n - at - del);
    memcpy(b->p + at, s, n);
    b->n = b->n - del + n;
}

/* Write data as a C string literal (octal escapes, so no following digit is ever swallowed). */
static void print_literal(FILE *out, const char *d, size_t n)
{
    fputc('"', out);
    size_t col = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)d[i];
        if (ch == '"' || ch == '\\') col += (size_t)fprintf(out, "\\%c", ch);
        else if (ch == '\n') col += (size_t)fprintf(out, "\\n");
        else if (ch >= 0x20 && ch < 0x7f && !(ch == '?' && i + 1 < n && d[i + 1] == '?'))
            fputc(ch, out), col++;
        else col += (size_t)fprintf(out, "\\%03o", ch);
        if (col > 90 && i + 1 < n) {
            fputs("\"\n    \"", out);
            col = 0;
        }
    }
    fputc('"', out);
}

/* ============================================================================ the checks */

typedef struct {
    int world;
    int variant; /* bit 0: hidden_size 768; bit 1: total_steps 500; bit 2: micro/lr flags given;
                    bit 3: --bf16 given */
} setting;

static void make_flags(zinf_flags *f, int variant)
{
    zinf_flags_defaults(f);
    if (variant & 1) f->hidden_size = 768;
    if (variant & 2) f->total_steps = 500;
    if (variant & 4) {
        f->per_device_train_batch_size = 3, f->per_device_train_batch_size_set = true;
        f->learning_rate = 1e-4, f->learning_rate_set = true;
    }
    if (variant & 8) f->bf16 = true, f->bf16_set = true;
}

/* The first violated check of one parse: kind (a short fixed id) and a description. */
typedef struct {
    const char *kind;
    char why[1200];
} verdict;

#define REQ(cond, kindid, ...)                                                                    \
    do {                                                                                          \
        if (!(cond)) {                                                                            \
            v->kind = kindid;                                                                     \
            snprintf(v->why, sizeof v->why, __VA_ARGS__);                                         \
            return 1;                                                                             \
        }                                                                                         \
    } while (0)

static json_t *jget(json_t *root, const char *a, const char *b, const char *c)
{
    json_t *x = json_is_object(root) ? json_object_get(root, a) : NULL;
    if (b) x = json_is_object(x) ? json_object_get(x, b) : NULL;
    if (c) x = json_is_object(x) ? json_object_get(x, c) : NULL;
    return x;
}

static bool is_auto(json_t *x) { return json_is_string(x) && !strcmp(json_string_value(x), "auto"); }

/* an integral JSON number as zinf reads an integer key; false if not one */
static bool jint(json_t *x, int64_t *out)
{
    if (json_is_integer(x)) {
        *out = json_integer_value(x);
        return true;
    }
    if (json_is_real(x)) {
        double d = json_real_value(x);
        if (d == floor(d) && d >= -9.2233720368547758e18 && d < 9.2233720368547758e18) {
            *out = (int64_t)d;
            return true;
        }
    }
    return false;
}

static bool close_to(double a, double b) { return a == b || fabs(a - b) <= 1e-12 * fmax(fabs(a), fabs(b)); }

/* The warnings stream: each line prefixed, as many lines as cfg->n_warnings. */
static int check_warnings(verdict *v, const char *w, size_t wn, int n_warnings)
{
    int lines = 0;
    size_t i = 0;
    static const char pre[] = "zinf: warning: " SRC ": ";
    while (i < wn) {
        REQ(wn - i >= sizeof pre - 1 && !memcmp(w + i, pre, sizeof pre - 1), "warn-prefix",
            "warning line %d does not start with \"%s\": %.200s", lines + 1, pre, w + i);
        const char *nl = memchr(w + i, '\n', wn - i);
        REQ(nl != NULL, "warn-unterminated", "last warning line has no newline");
        i = (size_t)(nl - w) + 1;
        lines++;
    }
    REQ(lines == n_warnings, "warn-count", "%d warning lines but cfg.n_warnings = %d", lines,
        n_warnings);
    return 0;
}

/* What config.c guarantees of every successful parse. */
static int check_invariants(verdict *v, const zinf_config *g, const setting *s, const zinf_flags *f)
{
    int64_t tb = g->train_batch_size, mb = g->train_micro_batch_size_per_gpu,
            ga = g->gradient_accumulation_steps;
    REQ(g->world_size == s->world, "world", "world_size %d, asked %d", g->world_size, s->world);
    REQ(!strcmp(g->path, SRC), "path", "path \"%.100s\"", g->path);
    REQ(tb > 0 && mb > 0 && ga > 0, "batch-positive", "batch sizes train %lld micro %lld gas %lld",
        (long long)tb, (long long)mb, (long long)ga);
    REQ((__int128)mb * ga * s->world == (__int128)tb, "batch-rule",
        "train_batch_size %lld != micro %lld x gas %lld x world %d (exactly)", (long long)tb,
        (long long)mb, (long long)ga, s->world);
    REQ(g->zero_stage >= 0 && g->zero_stage <= 3, "stage", "zero_stage %d", g->zero_stage);
    REQ(!(g->fp16 && g->bf16), "fp16-bf16", "fp16 and bf16 both on");

    const zinf_offload_cfg *op = &g->offload_param, *oo = &g->offload_optimizer;
    REQ(op->device >= ZINF_DEV_NONE && op->device <= ZINF_DEV_NVME && oo->device >= ZINF_DEV_NONE &&
            oo->device <= ZINF_DEV_NVME,
        "offload-enum", "offload devices %d %d", op->device, oo->device);
    REQ(op->device == ZINF_DEV_NONE || g->zero_stage == 3, "offload-param-stage",
        "offload_param.device %d at stage %d", op->device, g->zero_stage);
    REQ(oo->device == ZINF_DEV_NONE || g->zero_stage >= 1, "offload-opt-stage",
        "offload_optimizer at stage 0");
    REQ(oo->device != ZINF_DEV_NVME || g->zero_stage == 3, "offload-opt-nvme-stage",
        "NVMe optimizer offload at stage %d", g->zero_stage);
    REQ(oo->device == ZINF_DEV_NONE || oo->ratio >= 1.0 || g->zero_stage == 3, "offload-ratio-stage",
        "ratio %g at stage %d", oo->ratio, g->zero_stage);
    REQ(oo->ratio >= 0 && oo->ratio <= 1, "offload-ratio", "offload_optimizer.ratio %g", oo->ratio);
    for (int k = 0; k < 2; k++) {
        const zinf_offload_cfg *o = k ? oo : op;
        REQ(memchr(o->nvme_path, 0, sizeof o->nvme_path) != NULL, "nvme-path-nul",
            "nvme_path not terminated");
        REQ(o->device != ZINF_DEV_NVME || o->nvme_path[0], "nvme-path", "nvme without nvme_path");
        REQ(o->buffer_count >= 0 && o->buffer_size >= 0 && o->max_in_cpu >= 0, "offload-ints",
            "offload ints %lld %lld %lld", (long long)o->buffer_count, (long long)o->buffer_size,
            (long long)o->max_in_cpu);
    }

    REQ(isfinite(g->lr) && g->lr >= 0, "lr", "lr %g", g->lr);
    REQ(isfinite(g->eps) && g->eps >= 0, "eps", "eps %g", g->eps);
    REQ(isfinite(g->weight_decay) && g->weight_decay >= 0, "weight-decay", "weight_decay %g",
        g->weight_decay);
    REQ(g->beta1 >= 0 && g->beta1 < 1 && g->beta2 >= 0 && g->beta2 < 1, "betas", "betas %g %g",
        g->beta1, g->beta2);
    REQ(isfinite(g->gradient_clipping) && g->gradient_clipping >= 0, "clipping",
        "gradient_clipping %g", g->gradient_clipping);
    REQ(isfinite(g->gradient_predivide_factor) && g->gradient_predivide_factor > 0, "predivide",
        "gradient_predivide_factor %g", g->gradient_predivide_factor);
    REQ(g->opt_type == ZINF_OPT_ADAMW || g->opt_type == ZINF_OPT_ADAM, "opt-enum", "opt_type %d",
        (int)g->opt_type);
    REQ(g->opt_type != ZINF_OPT_ADAMW || g->adam_w_mode, "adam-w-mode",
        "AdamW without adam_w_mode");
    REQ(g->steps_per_print > 0 || g->steps_per_print == -1, "steps-per-print", "steps_per_print %lld",
        (long long)g->steps_per_print);

    REQ(g->fp16_loss_scale >= 0 && g->fp16_min_loss_scale >= 0 && g->fp16_initial_scale_power >= 0 &&
            g->fp16_loss_scale_window >= 0 && g->fp16_hysteresis >= 0,
        "fp16-values", "fp16 values %g %g %lld %lld %lld", g->fp16_loss_scale, g->fp16_min_loss_scale,
        (long long)g->fp16_initial_scale_power, (long long)g->fp16_loss_scale_window,
        (long long)g->fp16_hysteresis);

    REQ(g->reduce_bucket_size >= 0 && g->allgather_bucket_size >= 0 && g->sub_group_size >= 0 &&
            g->stage3_prefetch_bucket_size >= 0 && g->stage3_param_persistence_threshold >= 0 &&
            g->stage3_model_persistence_threshold >= 0 && g->stage3_max_live_parameters >= 0 &&
            g->stage3_max_reuse_distance >= 0,
        "zero-ints", "a negative zero_optimization size");
    REQ(g->aio_block_size > 0 && g->aio_queue_depth > 0 && g->aio_intra_op_parallelism > 0,
        "aio", "aio %lld %lld %lld", (long long)g->aio_block_size, (long long)g->aio_queue_depth,
        (long long)g->aio_intra_op_parallelism);
    REQ(g->ac_number_checkpoints >= -1, "ac-number", "number_checkpoints %lld",
        (long long)g->ac_number_checkpoints);
    REQ(g->ckpt_tag_validation >= 0 && g->ckpt_tag_validation <= 2 &&
            g->ckpt_tag_validation_fail == (g->ckpt_tag_validation == 2),
        "tag-validation", "tag_validation %d fail %d", g->ckpt_tag_validation,
        g->ckpt_tag_validation_fail);
    REQ(!g->flops_profiler_enabled || g->wall_clock_breakdown, "wall-clock",
        "flops_profiler on without wall_clock_breakdown");
    REQ(g->flops_profiler_profile_step >= 0 && g->flops_profiler_top_modules >= 0 &&
            memchr(g->flops_profiler_output_file, 0, sizeof g->flops_profiler_output_file),
        "flops", "flops_profiler values");

    const zinf_sched_cfg *sc = &g->sched;
    REQ(sc->type >= ZINF_SCHED_NONE && sc->type <= ZINF_SCHED_LR_RANGE_TEST, "sched-enum",
        "sched type %d", (int)sc->type);
    REQ(sc->warmup_type_linear == 0 || sc->warmup_type_linear == 1, "warmup-type", "warmup_type %d",
        sc->warmup_type_linear);
    REQ(!isnan(sc->warmup_max_lr) && sc->warmup_max_lr >= 0 && sc->warmup_min_lr >= 0,
        "warmup-lr", "warmup lr %g %g", sc->warmup_min_lr, sc->warmup_max_lr);
    REQ(sc->cycle_first_step_size > 0 && (sc->cycle_second_step_size > 0 ||
                                          sc->cycle_second_step_size == -1),
        "cycle-steps", "cycle step sizes %lld %lld", (long long)sc->cycle_first_step_size,
        (long long)sc->cycle_second_step_size);
    REQ(sc->cycle_second_stair_count >= -1 && sc->lr_range_test_step_size > 0, "sched-ints",
        "stair %lld range step %lld", (long long)sc->cycle_second_stair_count,
        (long long)sc->lr_range_test_step_size);
    if (f->total_steps > 0) {
        REQ(g->max_steps == f->total_steps && sc->total_num_steps >= 0 && sc->warmup_num_steps >= 0,
            "finalize", "after finalize: max_steps %lld total %lld warmup %lld",
            (long long)g->max_steps, (long long)sc->total_num_steps,
            (long long)sc->warmup_num_steps);
        /* a total below the warm-up is DeepSpeed's warning (lr_schedules.py), and zinf's */
        REQ(!(sc->type == ZINF_SCHED_WARMUP_DECAY_LR || sc->type == ZINF_SCHED_WARMUP_COSINE_LR) ||
                sc->total_num_steps >= sc->warmup_num_steps || g->n_warnings > 0,
            "finalize-order", "total_num_steps %lld < warmup %lld without a warning",
            (long long)sc->total_num_steps, (long long)sc->warmup_num_steps);
    } else {
        REQ(g->max_steps == -1 && sc->total_num_steps >= -1 && sc->warmup_num_steps >= -1,
            "unfinalized", "max_steps %lld total %lld warmup %lld", (long long)g->max_steps,
            (long long)sc->total_num_steps, (long long)sc->warmup_num_steps);
    }
    REQ(g->logging_steps == f->logging_steps &&
            g->eval_steps == g->logging_steps &&
            g->save_steps == f->save_steps && g->seq_len == f->max_length &&
            g->num_train_epochs == f->num_train_epochs,
        "trainer-values", "logging %lld eval %lld save %lld", (long long)g->logging_steps,
        (long long)g->eval_steps, (long long)g->save_steps);
    return 0;
}

/* The independent oracle: what the raw JSON (when jansson reads it) says must come out. */
static int check_oracle(verdict *v, json_t *root, int rc, const zinf_config *g, const zinf_flags *f,
                        const setting *s)
{
    json_t *x;
    int64_t n;
    /* rules whose violation must be rejected */
    json_t *fp = jget(root, "fp16", "enabled", NULL), *bf = jget(root, "bf16", "enabled", NULL);
    if (!bf) bf = jget(root, "bfloat16", "enabled", NULL);
    bool want_fail = false;
    const char *rule = "";
    if (json_is_true(fp) && json_is_true(bf)) want_fail = true, rule = "fp16 and bf16 both enabled";
    x = jget(root, "zero_optimization", "stage", NULL);
    int64_t stage = 0;
    bool stage_known = !x || jint(x, &stage);
    if (x && stage_known && (stage < 0 || stage > 3)) want_fail = true, rule = "stage outside 0-3";
    x = jget(root, "train_batch_size", NULL, NULL);
    if (x && jint(x, &n) && n <= 0) want_fail = true, rule = "train_batch_size <= 0";
    if (json_is_true(jget(root, "optimizer", "params", "amsgrad")))
        want_fail = true, rule = "amsgrad true";
    if (json_is_true(jget(root, "amp", "enabled", NULL))) want_fail = true, rule = "amp enabled";
    REQ(!(want_fail && rc == 0), "oracle-accepts-forbidden", "accepted although %s", rule);
    if (rc != 0) return 0;

    /* values written in the config come out unchanged */
    static const struct { const char *key; size_t off; } BATCH[] = {
        {"train_batch_size", offsetof(zinf_config, train_batch_size)},
        {"train_micro_batch_size_per_gpu", offsetof(zinf_config, train_micro_batch_size_per_gpu)},
        {"gradient_accumulation_steps", offsetof(zinf_config, gradient_accumulation_steps)},
        {"steps_per_print", offsetof(zinf_config, steps_per_print)},
    };
    for (size_t i = 0; i < sizeof BATCH / sizeof BATCH[0]; i++) {
        int64_t have = *(const int64_t *)((const char *)g + BATCH[i].off);
        x = jget(root, BATCH[i].key, NULL, NULL);
        if (x && jint(x, &n))
            REQ(have == n, "oracle-int", "%s is %lld in the JSON, %lld in the config", BATCH[i].key,
                (long long)n, (long long)have);
    }
    if (is_auto(jget(root, "train_micro_batch_size_per_gpu", NULL, NULL)))
        REQ(g->train_micro_batch_size_per_gpu == f->per_device_train_batch_size, "oracle-auto-micro",
            "\"auto\" micro batch is %lld, flag %lld", (long long)g->train_micro_batch_size_per_gpu,
            (long long)f->per_device_train_batch_size);
    x = jget(root, "zero_optimization", "stage", NULL);
    if (x) REQ(g->zero_stage == stage, "oracle-stage", "stage %lld in the JSON, %d in the config",
               (long long)stage, g->zero_stage);
    else if (json_is_boolean(jget(root, "zero_optimization", NULL, NULL))) /* DeepSpeed's first format */
        REQ(g->zero_stage == json_is_true(jget(root, "zero_optimization", NULL, NULL)), "oracle-stage-bool",
            "\"zero_optimization\": bool gave stage %d", g->zero_stage);
    else REQ(g->zero_stage == 0, "oracle-stage-default", "absent stage gave %d", g->zero_stage);
    /* DeepSpeed keeps parameters on the device below stage 3 whatever offload_param says */
    if (g->zero_stage < 3)
        REQ(g->offload_param.device == ZINF_DEV_NONE, "oracle-offload-param", "offload_param device %d at stage %d",
            g->offload_param.device, g->zero_stage);
    /* a pydantic bool: true/false, or pydantic's lax 0/1 (strings are left to test_config) */
    x = jget(root, "zero_optimization", "overlap_comm", NULL);
    int lax = json_is_boolean(x) ? json_is_true(x)
              : json_is_number(x) && (json_number_value(x) == 0 || json_number_value(x) == 1) ? json_number_value(x) == 1
                                                                                              : -1;
    if (lax >= 0) REQ(g->overlap_comm == lax, "oracle-overlap", "overlap_comm");
    else if (!json_is_string(x) || is_auto(x)) REQ(g->overlap_comm == (g->zero_stage == 3), "oracle-overlap-default",
             "overlap_comm %d at stage %d", g->overlap_comm, g->zero_stage);
    if (json_is_boolean(fp)) REQ(g->fp16 == json_is_true(fp), "oracle-fp16", "fp16.enabled");
    if (json_is_boolean(bf)) REQ(g->bf16 == json_is_true(bf), "oracle-bf16", "bf16.enabled");
    if (is_auto(fp)) REQ(g->fp16 == f->fp16, "oracle-fp16-auto", "fp16 auto");
    if (is_auto(bf)) REQ(g->bf16 == f->bf16, "oracle-bf16-auto", "bf16 auto");

    json_t *opt = jget(root, "optimizer", NULL, NULL);
    REQ(g->has_optimizer == (opt != NULL), "oracle-has-optimizer", "has_optimizer %d",
        g->has_optimizer);
    if (!opt) {
        REQ(g->opt_type == ZINF_OPT_ADAMW && close_to(g->lr, f->learning_rate) &&
                close_to(g->beta1, f->adam_beta1) && close_to(g->beta2, f->adam_beta2) &&
                close_to(g->eps, f->adam_epsilon) && close_to(g->weight_decay, f->weight_decay),
            "oracle-no-optimizer", "without an optimizer block: lr %g betas %g %g eps %g wd %g",
            g->lr, g->beta1, g->beta2, g->eps, g->weight_decay);
    } else {
        x = jget(root, "optimizer", "type", NULL);
        if (json_is_string(x))
            REQ(g->opt_type == (strcasecmp(json_string_value(x), "adam") ? ZINF_OPT_ADAMW : ZINF_OPT_ADAM),
                "oracle-opt-type", "optimizer.type \"%.50s\" gave %d", json_string_value(x),
                (int)g->opt_type);
        x = jget(root, "optimizer", "params", "lr");
        if (json_is_number(x))
            REQ(g->lr == json_number_value(x), "oracle-lr", "lr %.17g in the JSON, %.17g in the config",
                json_number_value(x), g->lr);
        else if (is_auto(x))
            REQ(g->lr == f->learning_rate, "oracle-lr-auto", "\"auto\" lr %g", g->lr);
        x = jget(root, "optimizer", "params", "betas");
        if (json_is_array(x) && json_array_size(x) == 2 && json_is_number(json_array_get(x, 0)) &&
            json_is_number(json_array_get(x, 1)))
            REQ(g->beta1 == json_number_value(json_array_get(x, 0)) &&
                    g->beta2 == json_number_value(json_array_get(x, 1)),
                "oracle-betas", "betas %g %g", g->beta1, g->beta2);
    }
    static const char *const DEV[] = {"none", "cpu", "nvme"};
    for (int k = 0; k < 2; k++) {
        const char *blk = k ? "offload_optimizer" : "offload_param";
        const zinf_offload_cfg *o = k ? &g->offload_optimizer : &g->offload_param;
        x = jget(root, "zero_optimization", blk, "device");
        /* DeepSpeed's deprecated switches: "cpu_offload" / "cpu_offload_param": true is device cpu */
        const json_t *legacy = jget(root, "zero_optimization", k ? "cpu_offload" : "cpu_offload_param", NULL);
        if (is_auto(x)) x = NULL; /* a pydantic model drops "auto": the default */
        if (!k && g->zero_stage < 3) continue; /* none whatever it says: oracle-offload-param */
        if (!x && json_is_true(legacy))
            REQ(o->device == ZINF_DEV_CPU, "oracle-device-legacy", "%s true gave %s.device %d",
                k ? "cpu_offload" : "cpu_offload_param", blk, (int)o->device);
        else if (json_is_string(x))
            REQ(!strcasecmp(json_string_value(x), DEV[o->device]), "oracle-device",
                "%s.device \"%.50s\" gave %d", blk, json_string_value(x), (int)o->device);
        else if (!x)
            REQ(o->device == ZINF_DEV_NONE, "oracle-device-default", "absent %s.device gave %d", blk,
                (int)o->device);
    }
    (void)s;
    return 0;
}

/* `zinf config show` of a success is a JSON object holding the same batch size and stage. */
static int check_print(verdict *v, const zinf_config *g)
{
    char *out = NULL;
    size_t on = 0;
    FILE *fp = open_memstream(&out, &on);
    REQ(fp != NULL, "memstream", "open_memstream failed");
    zinf_config_print(g, fp);
    fclose(fp);
    json_error_t je;
    json_t *o = json_loadb(out, on, 0, &je);
    free(out);
    REQ(json_is_object(o), "print-json", "config show output is not a JSON object: %s", je.text);
    int64_t tb = -1, st = -1;
    bool ok = jint(json_object_get(o, "train_batch_size"), &tb) &&
              jint(jget(o, "zero_optimization", "stage", NULL), &st);
    json_decref(o);
    REQ(ok && tb == g->train_batch_size && st == g->zero_stage, "print-values",
        "config show: train_batch_size %lld stage %lld, config %lld %d", (long long)tb,
        (long long)st, (long long)g->train_batch_size, g->zero_stage);
    return 0;
}

static zinf_config cfg_a, cfg_b;
static int verify_repeat; /* check determinism on this call */
static int last_rc;       /* status of the last check_one parse */

/* Every check of one parse (rc, message msg, warnings w) against the raw JSON root. */
static int check_parsed(verdict *v, const char *text, size_t len, const setting *s,
                        const zinf_flags *f, int rc, const char *msg, const char *w, size_t wn,
                        json_t *root, const char *jerr)
{
    REQ(rc <= 0, "rc-positive", "returned %d", rc);
    if (rc < 0) {
        size_t ml = strlen(msg);
        REQ(ml > 0, "msg-empty", "failed (%d) with an empty message", rc);
        bool json_level = msg[strlen(SRC)] == ':' && msg[strlen(SRC) + 1] >= '0' &&
                          msg[strlen(SRC) + 1] <= '9';
        REQ(!strchr(msg, '\n'), json_level ? "msg-newline-jansson" : "msg-newline",
            "message has a newline: %.300s", msg);
        REQ(!strncmp(msg, SRC, strlen(SRC)), "msg-source",
            "message does not start with \"" SRC "\": %.300s", msg);
        REQ(ml < 1000, "msg-long", "message is %zu chars: %.200s...", ml, msg);
        /* JSON-level errors are "fuzz:LINE:COL: ..." or "fuzz: the top level must be ..." */
        if (json_is_object(root))
            REQ(!(msg[strlen(SRC)] == ':' && msg[strlen(SRC) + 1] >= '0' &&
                  msg[strlen(SRC) + 1] <= '9') &&
                    strncmp(msg + strlen(SRC), ": the top level must be", 23),
                "oracle-called-malformed", "valid JSON object called malformed: %.300s", msg);
    }
    if (check_warnings(v, w, wn, cfg_a.n_warnings)) return 1;
    if (!json_is_object(root))
        REQ(memchr(text, '/', len) || rc != 0, "oracle-accepts-invalid",
            "accepted text that jansson rejects (%s) and that has no comment",
            root ? "not an object" : jerr);
    if (rc == 0 && check_invariants(v, &cfg_a, s, f)) return 1;
    if (json_is_object(root) && check_oracle(v, root, rc, &cfg_a, f, s)) return 1;
    if (rc == 0 && check_print(v, &cfg_a)) return 1;
    if (verify_repeat) {
        FILE *wf2 = fopen("/dev/null", "w");
        int rc2 = zinf_config_parse(&cfg_b, text, len, SRC, f, s->world, wf2);
        if (wf2) fclose(wf2);
        REQ(rc2 == rc && !strcmp(zinf_errmsg(), msg) && !memcmp(&cfg_a, &cfg_b, sizeof cfg_a),
            "nondeterministic", "second parse differs: rc %d vs %d", rc2, rc);
    }
    return 0;
}

/* Parse data at one setting and check everything. Returns 0 if all holds, 1 with v filled. */
static int check_one(const char *data, size_t len, const setting *s, verdict *v)
{
    zinf_flags f;
    make_flags(&f, s->variant);
    /* an exact-size copy, so reading past len is caught by ASan under libFuzzer */
    char *text = malloc(len ? len : 1);
    if (len) memcpy(text, data, len);
    char *w = NULL;
    size_t wn = 0;
    FILE *wf = open_memstream(&w, &wn);
    zinf_err_clear();
    int rc = zinf_config_parse(&cfg_a, text, len, SRC, &f, s->world, wf);
    last_rc = rc;
    if (wf) fclose(wf);
    static char msg[2100];
    snprintf(msg, sizeof msg, "%s", zinf_errmsg());

    json_error_t je;
    /* the oracle reads what zinf reads: a leading UTF-8 byte-order mark is skipped (zinf-config(5)) */
    size_t bom = len >= 3 && !memcmp(data, "\xEF\xBB\xBF", 3) ? 3 : 0;
    json_t *root = json_loadb(data + bom, len - bom, JSON_REJECT_DUPLICATES, &je);
    int bad = check_parsed(v, text, len, s, &f, rc, msg, w ? w : "", w ? wn : 0, root, je.text);
    if (bad && rc < 0) {
        size_t l = strlen(v->why);
        snprintf(v->why + l, sizeof v->why - l, " [rc %d: %.200s]", rc, msg);
    }
    json_decref(root);
    free(w);
    free(text);
    return bad;
}

#ifdef ZINF_LIBFUZZER
/* ============================================================================ libFuzzer */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const int VARIANTS[] = {0, 1, 2, 5, 9, 15};
    for (int world = 1; world <= 4; world++) {
        setting s = {world, VARIANTS[(size + (size_t)world) % 6]};
        verdict v = {0};
        verify_repeat = world == 1;
        if (check_one((const char *)data, size, &s, &v)) {
            fprintf(stderr, "fuzz_config: [%s] world %d variant %d: %s\ninput: ", v.kind, s.world,
                    s.variant, v.why);
            print_literal(stderr, (const char *)data, size);
            fputc('\n', stderr);
            abort();
        }
    }
    return 0;
}
#else
/* ============================================================================ the mutator */

static const char *const KEYS[] = {
    "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
    "gradient_clipping", "steps_per_print", "wall_clock_breakdown", "prescale_gradients",
    "gradient_predivide_factor", "sparse_gradients", "fp16", "bf16", "bfloat16", "optimizer",
    "scheduler", "zero_optimization", "aio", "activation_checkpointing", "checkpoint",
    "comms_logger", "flops_profiler", "amp", "elasticity", "compression", "enabled", "loss_scale",
    "initial_scale_power", "loss_scale_window", "hysteresis", "min_loss_scale", "auto_cast",
    "type", "params", "lr", "betas", "eps", "weight_decay", "adam_w_mode", "bias_correction",
    "torch_adam", "amsgrad", "max_grad_norm", "warmup_min_lr", "warmup_max_lr",
    "warmup_num_steps", "warmup_type", "total_num_steps", "warmup_min_ratio", "cos_min_ratio",
    "cycle_min_lr", "cycle_max_lr", "cycle_first_step_size", "cycle_second_step_size",
    "cycle_second_stair_count", "decay_step_size", "cycle_momentum", "lr_range_test_step_size",
    "stage", "contiguous_gradients", "overlap_comm", "reduce_scatter", "reduce_bucket_size",
    "allgather_bucket_size", "sub_group_size", "stage3_prefetch_bucket_size",
    "prefetch_bucket_size", "stage3_param_persistence_threshold",
    "stage3_max_live_parameters", "stage3_gather_16bit_weights_on_model_save",
    "offload_optimizer", "offload_param", "device", "nvme_path", "pin_memory", "buffer_count",
    "buffer_size", "max_in_cpu", "ratio", "pipeline_read", "cpu_offload",
    "zero_quantized_weights", "block_size", "queue_depth", "intra_op_parallelism",
    "thread_count", "number_checkpoints", "partition_activations", "tag_validation",
    "profile_step", "module_depth", "top_modules", "output_file", "zero_optimisation",
    "micro_batch_size", "train_batch", "Stage", "", "stage3_max_reuse_distance",
    "stage3_model_persistence_threshold",
};

static const char *const VALUES[] = {
    "\"auto\"", "\"Auto\"", "null", "true", "false", "0", "1", "-1", "2", "3", "4", "-0", "0.5",
    "1.0", "1e9", "1e400", "-1e400", "1e308", "1e-400", "NaN", "Infinity", "-Infinity", "nan",
    "9223372036854775807", "9223372036854775808", "-9223372036854775808", "4611686018427387904",
    "3074457345618258603", "2147483647", "2147483648", "4294967296", "18446744073709551616",
    "9.3e18", "9.2233720368547758e18", "1e19", "4.6e18", "\"\"", "\"cpu\"", "\"nvme\"", "\"none\"",
    "\"CPU\"", "\"NvMe\"", "\"AdamW\"", "\"adam\"", "\"Lamb\"", "\"WarmupLR\"", "\"WarmupDecayLR\"",
    "\"WarmupCosineLR\"", "\"OneCycle\"", "\"LRRangeTest\"", "\"linear\"", "\"Fail\"",
    "\"ignore\"", "[0.9, 0.999]", "[1, 0.5]", "[0.9]", "[0.9, 0.999, 0.5]", "[\"a\", 1]", "[]", "{}",
    "{\"enabled\": true}", "{\"enabled\": \"auto\"}", "{\"device\": \"nvme\"}",
    "{\"device\": \"cpu\", \"ratio\": 0.5}", "\"/tmp/nvme\"", "\"\\u00e9\"", "\"\\u0000\"",
    "\"a\\nb\"", "\"\\ud800\"", "\"\\u2028\"", "0.999999999999", "1e-8", "3.0", "3.5", "-3",
    "\"three\"", "[[[[[[[[]]]]]]]]", "{\"a\": {\"b\": {\"c\": {}}}}", "1.7976931348623157e308",
    "5e-324", "00", "01", "+1", ".5", "1.", "0x10", "\"\\/\"", "'auto'",
};

static const char *const PUNCT[] = {
    "{", "}", "[", "]", ",", ":", "\"", "\\", "/", "//", "/*", "*/", "\n", " ", "\t", "\r",
    "\xef\xbb\xbf", "\xff", "\xc3\xa9", "\xe2\x80\x8b", "\xed\xa0\x80", "\xc0\xaf", "\0", "//\n",
    "/* x */", "/* \xe6\xb3\xa8 */", "// \xe2\x80\x94 comment\n", "/*", "\"auto\"", "true",
    "null", ",,", "\"\":", "\\u", "\\\"", "\x1f",
};

/* values by key name (the keys that decide what is valid) */
static const struct {
    const char *keys; /* space-separated */
    const char *const vals[20];
} DOMAINS[] = {
    {"stage", {"0", "1", "2", "3", "4", "-1", "\"3\"", "3.0", "null", "2.5"}},
    {"device", {"\"cpu\"", "\"nvme\"", "\"none\"", "\"CPU\"", "\"gpu\"", "null", "1"}},
    {"enabled", {"true", "false", "\"auto\"", "null", "1", "\"true\""}},
    {"type", {"\"AdamW\"", "\"Adam\"", "\"adamw\"", "\"WarmupLR\"", "\"WarmupDecayLR\"",
              "\"WarmupCosineLR\"", "\"OneCycle\"", "\"LRRangeTest\"", "\"SGD\"", "\"\"",
              "null"}},
    {"train_batch_size train_micro_batch_size_per_gpu gradient_accumulation_steps",
     {"1", "2", "3", "4", "6", "8", "12", "16", "24", "32", "64", "0", "-4", "\"auto\"",
      "4611686018427387904", "3074457345618258603", "null", "8.0", "8.5", "1e3"}},
    {"ratio", {"0", "0.5", "1", "1.0", "1.5", "-0.1", "\"auto\""}},
    {"nvme_path output_file", {"\"/nvme\"", "\"\"", "null", "1", "\"a\\nb\""}},
    {"betas", {"[0.9, 0.999]", "[0.9, 1]", "[0, 0]", "[-0.1, 0.9]", "\"auto\"", "[0.9]", "null",
               "[0.9, \"x\"]"}},
    {"lr eps weight_decay gradient_clipping warmup_max_lr warmup_min_lr",
     {"0", "1e-3", "-1e-3", "\"auto\"", "1e308", "5e-324", "-0.0", "null", "1"}},
    {"overlap_comm contiguous_gradients pin_memory adam_w_mode amsgrad auto_cast cpu_offload",
     {"true", "false", "null", "0", "\"auto\""}},
    {"total_num_steps warmup_num_steps cycle_first_step_size cycle_second_step_size "
     "steps_per_print block_size queue_depth number_checkpoints",
     {"0", "1", "10", "100", "1000", "\"auto\"", "-1", "null", "9223372036854775807"}},
    {"warmup_type tag_validation", {"\"log\"", "\"linear\"", "\"Fail\"", "\"ignore\"",
                                    "\"Warn\"", "\"cosine\""}},
    /* the zero_optimization sizes: DeepSpeed's pydantic ints with ge=0, so 0, 1 and huge values
     * are all legal (and must train: 0 is not "unbounded" unless zinf says so) */
    {"reduce_bucket_size allgather_bucket_size sub_group_size stage3_prefetch_bucket_size "
     "prefetch_bucket_size stage3_param_persistence_threshold stage3_model_persistence_threshold "
     "stage3_max_live_parameters stage3_max_reuse_distance",
     {"0", "1", "2", "7", "1e12", "1e15", "4611686018427387904", "9223372036854775807", "\"auto\"",
      "-1", "null", "5e8", "1.5", "1e19"}},
};

/* the DOMAINS entry of the key name k (length kl), or -1 */
static int domain_of(const char *k, size_t kl)
{
    for (size_t d = 0; d < sizeof DOMAINS / sizeof DOMAINS[0]; d++) {
        const char *p = DOMAINS[d].keys;
        while (*p) {
            size_t wl = strcspn(p, " ");
            if (wl == kl && !memcmp(p, k, kl)) return (int)d;
            p += wl;
            while (*p == ' ') p++;
        }
    }
    return -1;
}

/* a value for the key name k (length kl), or NULL */
static const char *domain_value(const char *k, size_t kl)
{
    int d = domain_of(k, kl);
    if (d < 0) return NULL;
    size_t n = 0;
    while (n < 20 && DOMAINS[d].vals[n]) n++;
    return DOMAINS[d].vals[rndn(n)];
}

static buf *corpus;
static size_t ncorpus, corpus_cap;

static void corpus_add(const char *d, size_t n)
{
    if (ncorpus == corpus_cap) {
        corpus_cap = corpus_cap ? corpus_cap * 2 : 64;
        corpus = realloc(corpus, corpus_cap * sizeof *corpus);
        if (!corpus) exit(1);
    }
    buf b = {0};
    buf_set(&b, d, n);
    corpus[ncorpus++] = b;
}

static const char *pick(const char *const *tbl, size_t n) { return tbl[rndn(n)]; }
#define PICK(tbl) pick(tbl, sizeof tbl / sizeof tbl[0])

/* index of the c at or after a random position (wrapping), or SIZE_MAX */
static size_t find_char(const buf *b, char c)
{
    if (!b->n) return SIZE_MAX;
    size_t start = rndn(b->n);
    for (size_t k = 0; k < b->n; k++) {
        size_t i = (start + k) % b->n;
        if (b->p[i] == c) return i;
    }
    return SIZE_MAX;
}

/* the extent [*s, *e) of the JSON value that starts at or after i (whitespace skipped) */
static bool value_extent(const buf *b, size_t i, size_t *s, size_t *e)
{
    while (i < b->n && (b->p[i] == ' ' || b->p[i] == '\n' || b->p[i] == '\t' || b->p[i] == '\r')) i++;
    if (i >= b->n) return false;
    *s = i;
    char c = b->p[i];
    if (c == '"') {
        for (i++; i < b->n && b->p[i] != '"'; i++)
            if (b->p[i] == '\\') i++;
        *e = i < b->n ? i + 1 : b->n;
        return true;
    }
    if (c == '{' || c == '[') {
        int depth = 0;
        bool str = false;
        for (; i < b->n; i++) {
            char d = b->p[i];
            if (str) {
                if (d == '\\') i++;
                else if (d == '"') str = false;
            } else if (d == '"') str = true;
            else if (d == '{' || d == '[') depth++;
            else if ((d == '}' || d == ']') && --depth == 0) {
                i++;
                break;
            }
        }
        *e = i;
        return true;
    }
    while (i < b->n && !strchr(",}] \n\t\r", b->p[i])) i++;
    *e = i;
    return true;
}

/* the quoted key [*s, *e) before the ':' at i */
static bool key_before(const buf *b, size_t i, size_t *s, size_t *e)
{
    while (i > 0 && strchr(" \t\n\r", b->p[i - 1])) i--;
    if (i == 0 || b->p[i - 1] != '"') return false;
    *e = i;
    i--;
    while (i > 0 && b->p[i - 1] != '"') i--;
    if (i == 0) return false;
    *s = i - 1;
    return true;
}

static void mutate(buf *b)
{
    char tmp[4096];
    size_t s, e, i;
    size_t op = rndn(20);
    if (op >= 17) op = 5; /* the domain mutation below, 5 times in 20 */
    switch (op) {
    case 0: /* flip a bit */
        if (b->n) b->p[rndn(b->n)] ^= (char)(1u << rndn(8));
        break;
    case 1: /* set a byte */
        if (b->n) b->p[rndn(b->n)] = (char)rnd();
        break;
    case 2: { /* insert punctuation / a keyword */
        const char *t = PICK(PUNCT);
        size_t tl = t[0] ? strlen(t) : 1; /* "\0" inserts one NUL */
        buf_splice(b, rndn(b->n + 1), 0, t, tl);
        break;
    }
    case 3: /* delete a range */
        if (b->n) {
            i = rndn(b->n);
            buf_splice(b, i, 1 + rndn(rndn(2) ? 4 : 64), "", 0);
        }
        break;
    case 4: /* truncate */
        b->n = rndn(b->n + 1);
        break;
    case 5: case 6: { /* give a key present in the text that decides validity a value of its
                         * domain */
        size_t cand[256], nc = 0;
        for (size_t at = 0; at + 2 < b->n && nc < 256; at++) {
            if (b->p[at] != '"') continue;
            const char *q = memchr(b->p + at + 1, '"', b->n - at - 1);
            if (!q) break;
            size_t c = (size_t)(q - b->p) + 1;
            while (c < b->n && strchr(" \t\n\r", b->p[c])) c++;
            if (c < b->n && b->p[c] == ':' && domain_of(b->p + at + 1, (size_t)(q - b->p) - at - 1) >= 0)
                cand[nc++] = at;
            at = (size_t)(q - b->p);
        }
        if (!nc) break;
        size_t at = cand[rndn(nc)];
        const char *q = memchr(b->p + at + 1, '"', b->n - at - 1);
        int d = domain_of(b->p + at + 1, (size_t)(q - b->p) - at - 1);
        i = (size_t)(q - b->p) + 1;
        while (b->p[i] != ':') i++;
        if (value_extent(b, i + 1, &s, &e)) {
            size_t n = 0;
            while (n < 20 && DOMAINS[d].vals[n]) n++;
            const char *t = DOMAINS[d].vals[rndn(n)];
            buf_splice(b, s, e - s, t, strlen(t));
        }
        break;
    }
    case 7: /* replace a value */
        i = find_char(b, ':');
        if (i != SIZE_MAX && value_extent(b, i + 1, &s, &e)) {
            /* mostly a value of the key's own domain, so the combinations the rules forbid or
             * allow get reached; otherwise anything */
            size_t ks, ke;
            const char *t = NULL;
            if (rndn(4) && key_before(b, i, &ks, &ke)) t = domain_value(b->p + ks + 1, ke - ks - 2);
            if (!t) t = PICK(VALUES);
            buf_splice(b, s, e - s, t, strlen(t));
        }
        break;
    case 8: /* rename a key: to another known key, or a near miss */
        i = find_char(b, ':');
        if (i != SIZE_MAX && key_before(b, i, &s, &e)) {
            int k;
            if (rndn(3)) {
                k = snprintf(tmp, sizeof tmp, "\"%s\"", PICK(KEYS));
            } else {
                size_t kl = e - s - 2 < 200 ? e - s - 2 : 200;
                memcpy(tmp, b->p + s, kl + 1);
                tmp[kl + 1] = '"';
                k = (int)kl + 2;
                if (kl > 1) {
                    size_t j = 1 + rndn(kl);
                    switch (rndn(3)) {
                    case 0: memmove(tmp + j, tmp + j + 1, (size_t)k - j - 1), k--; break; /* drop */
                    case 1: tmp[j] = (char)(tmp[j] ^ 0x20); break;                     /* case */
                    default: memmove(tmp + j + 1, tmp + j, (size_t)k - j), tmp[j] = '_', k++;
                    }
                }
            }
            buf_splice(b, s, e - s, tmp, (size_t)k);
        }
        break;
    case 9: /* insert a member after a '{' */
        i = find_char(b, '{');
        if (i != SIZE_MAX) {
            int k = snprintf(tmp, sizeof tmp, "\"%s\": %s%s", PICK(KEYS), PICK(VALUES),
                             rndn(4) ? ", " : " ");
            buf_splice(b, i + 1, 0, tmp, (size_t)k);
        }
        break;
    case 10: /* nest a value in an object or an array, or deeply */
        i = find_char(b, ':');
        if (i != SIZE_MAX && value_extent(b, i + 1, &s, &e) && e - s < sizeof tmp - 512) {
            int depth = rndn(8) ? 1 : (int)(1 + rndn(3000));
            bool obj = rndn(2);
            buf pre = {0}, post = {0};
            for (int d = 0; d < depth; d++) {
                if (obj) {
                    const char *key = PICK(KEYS);
                    buf_splice(&pre, pre.n, 0, "{\"", 2);
                    buf_splice(&pre, pre.n, 0, key, strlen(key));
                    buf_splice(&pre, pre.n, 0, "\": ", 3);
                    buf_splice(&post, post.n, 0, "}", 1);
                } else {
                    buf_splice(&pre, pre.n, 0, "[", 1);
                    buf_splice(&post, post.n, 0, "]", 1);
                }
            }
            buf_splice(b, e, 0, post.p, post.n);
            buf_splice(b, s, 0, pre.p, pre.n);
            free(pre.p);
            free(post.p);
        }
        break;
    case 11: /* duplicate a range (also duplicates keys) */
        if (b->n) {
            s = rndn(b->n);
            e = s + 1 + rndn(b->n - s < 200 ? b->n - s : 200);
            memcpy(tmp, b->p + s, e - s);
            buf_splice(b, rndn(b->n + 1), 0, tmp, e - s);
        }
        break;
    case 12: /* splice in a value from another corpus entry */
        if (ncorpus) {
            const buf *o = &corpus[rndn(ncorpus)];
            i = find_char(o, ':');
            size_t t = find_char(b, ':');
            if (i != SIZE_MAX && t != SIZE_MAX && value_extent(o, i + 1, &s, &e) &&
                value_extent(b, t + 1, &i, &t))
                buf_splice(b, i, t - i, o->p + s, e - s);
        }
        break;
    case 13: /* a long string: as a value, or as a key */
        i = find_char(b, ':');
        if (i != SIZE_MAX) {
            size_t len = 900 + rndn(2500);
            tmp[0] = '"';
            for (size_t k = 1; k <= len; k++) tmp[k] = (char)('a' + k % 26);
            tmp[len + 1] = '"';
            if (rndn(2) && value_extent(b, i + 1, &s, &e)) buf_splice(b, s, e - s, tmp, len + 2);
            else if (key_before(b, i, &s, &e)) buf_splice(b, s, e - s, tmp, len + 2);
        }
        break;
    case 14: /* a comment somewhere */
        {
            static const char *const C[] = {"// c\n", "/* c */", "/**/", "/* \n */", "//",
                                            "/* unterminated", "/*/", "// \xe4\xb8\xad\n"};
            const char *t = PICK(C);
            buf_splice(b, rndn(b->n + 1), 0, t, strlen(t));
        }
        break;
    case 16: { /* a zero_optimization size to an extreme legal value: replaced where the key is
                * written, else added to the zero_optimization block, else a block is added */
        static const char *const SK[] = {
            "reduce_bucket_size", "allgather_bucket_size", "sub_group_size",
            "stage3_prefetch_bucket_size", "stage3_max_live_parameters",
            "stage3_max_reuse_distance", "stage3_param_persistence_threshold",
            "stage3_model_persistence_threshold"};
        static const char *const SV[] = {"0", "1", "2", "7", "1e12", "4611686018427387904"};
        const char *k = PICK(SK), *val = PICK(SV);
        char pat[64];
        int pl = snprintf(pat, sizeof pat, "\"%s\"", k);
        const char *hit = memmem(b->p, b->n, pat, (size_t)pl);
        if (hit) {
            i = (size_t)(hit - b->p) + (size_t)pl;
            while (i < b->n && strchr(" \t\n\r", b->p[i])) i++;
            if (i < b->n && b->p[i] == ':' && value_extent(b, i + 1, &s, &e))
                buf_splice(b, s, e - s, val, strlen(val));
            break;
        }
        int k2;
        hit = memmem(b->p, b->n, "\"zero_optimization\"", 19);
        if (hit) {
            i = (size_t)(hit - b->p) + 19;
            while (i < b->n && strchr(" \t\n\r:", b->p[i])) i++;
            if (i >= b->n || b->p[i] != '{') break;
            k2 = snprintf(tmp, sizeof tmp, "\"%s\": %s", k, val);
        } else {
            const char *ob = memchr(b->p, '{', b->n);
            if (!ob) break;
            i = (size_t)(ob - b->p);
            k2 = snprintf(tmp, sizeof tmp, "\"zero_optimization\": {\"stage\": %d, \"%s\": %s}",
                          (int)rndn(4), k, val);
        }
        /* after the '{' at i; a comma unless the object is empty */
        for (e = i + 1; e < b->n && strchr(" \t\n\r", b->p[e]); e++) {}
        if (e < b->n && b->p[e] != '}') k2 += snprintf(tmp + k2, sizeof tmp - (size_t)k2, ", ");
        buf_splice(b, i + 1, 0, tmp, (size_t)k2);
        break;
    }
    default: /* replace a value by a number near a batch-rule edge */
        i = find_char(b, ':');
        if (i != SIZE_MAX && value_extent(b, i + 1, &s, &e)) {
            static const char *const N[] = {"8", "16", "32", "64", "6", "12", "4611686018427387904",
                                            "2305843009213693952", "1537228672809129301", "-8",
                                            "\"auto\"", "1e18", "7"};
            const char *t = PICK(N);
            buf_splice(b, s, e - s, t, strlen(t));
        }
        break;
    }
}

/* ============================================================================ seeds */

static const char *const BUILTIN[] = {
    "{}",
    "{\"train_batch_size\": 8}",
    "{\"train_micro_batch_size_per_gpu\": \"auto\", \"gradient_accumulation_steps\": \"auto\", "
    "\"train_batch_size\": \"auto\", \"gradient_clipping\": \"auto\", \"fp16\": {\"enabled\": "
    "\"auto\"}, \"bf16\": {\"enabled\": \"auto\"}, \"zero_optimization\": {\"stage\": 0}}",
    "{\"train_batch_size\": 24, \"train_micro_batch_size_per_gpu\": 2, \"gradient_accumulation_steps\": 4,"
    " \"optimizer\": {\"type\": \"Adam\", \"params\": {\"lr\": 3e-4, \"betas\": [0.8, 0.95], \"eps\": "
    "1e-6, \"weight_decay\": 0.1, \"adam_w_mode\": false}}, \"scheduler\": {\"type\": \"WarmupDecayLR\","
    " \"params\": {\"warmup_min_lr\": 0, \"warmup_max_lr\": 3e-4, \"warmup_num_steps\": 10, "
    "\"total_num_steps\": 100, \"warmup_type\": \"linear\"}}}",
    "{\"train_micro_batch_size_per_gpu\": 1, \"scheduler\": {\"type\": \"OneCycle\", \"params\": "
    "{\"cycle_min_lr\": 1e-5, \"cycle_max_lr\": 1e-3, \"cycle_first_step_size\": 100, "
    "\"cycle_second_step_size\": null, \"cycle_second_stair_count\": null, \"decay_lr_rate\": 0.1}}}",
    "{\"train_micro_batch_size_per_gpu\": 2, \"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": "
    "{\"total_num_steps\": \"auto\", \"warmup_num_steps\": \"auto\", \"cos_min_ratio\": 0.01}}, "
    "\"bf16\": {\"enabled\": true}}",
    "{\"train_micro_batch_size_per_gpu\": 4, \"scheduler\": {\"type\": \"LRRangeTest\", \"params\": "
    "{\"lr_range_test_min_lr\": 1e-5, \"lr_range_test_step_size\": 10}}, \"gradient_clipping\": 1.0}",
    "{\"train_batch_size\": 16, \"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": "
    "{\"device\": \"nvme\", \"nvme_path\": \"/local_nvme\", \"buffer_count\": 4, \"ratio\": 0.3, "
    "\"pipeline_read\": true}, \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"/local_nvme\","
    " \"buffer_size\": 1e8, \"max_in_cpu\": 1e9}}, \"aio\": {\"block_size\": 1048576, \"queue_depth\": "
    "8, \"thread_count\": 1, \"single_submit\": false, \"overlap_events\": true}}",
    "{\"train_micro_batch_size_per_gpu\": 2, \"zero_optimization\": {\"stage\": 3, "
    "\"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"/nvme\", \"ratio\": 1.0}}}",
    "{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": {\"stage\": 3, "
    "\"offload_optimizer\": {\"device\": \"cpu\", \"ratio\": 0.5}}}",
    "{\"train_batch_size\": 4, \"optimizer\": {\"type\": \"Adam\", \"params\": {\"adam_w_mode\": "
    "false}}}",
    "{\"train_batch_size\": 12, \"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": "
    "{\"device\": \"cpu\"}, \"overlap_comm\": null, \"reduce_bucket_size\": \"auto\", "
    "\"allgather_bucket_size\": 2e8}, \"fp16\": {\"enabled\": true, \"loss_scale\": 0, "
    "\"initial_scale_power\": 12}}",
    "{\"train_micro_batch_size_per_gpu\": 1, \"checkpoint\": {\"tag_validation\": \"Fail\"}, "
    "\"comms_logger\": {\"enabled\": true, \"verbose\": false}, \"flops_profiler\": {\"enabled\": true,"
    " \"profile_step\": 2, \"module_depth\": -1, \"output_file\": null}, \"activation_checkpointing\": "
    "{\"number_checkpoints\": 4, \"cpu_checkpointing\": true}, \"wall_clock_breakdown\": false}",
    "// comment\n{ /* block */ \"train_micro_batch_size_per_gpu\": 2, // tail\n"
    " \"zero_optimization\": {\"stage\": 1, \"offload_optimizer\": {\"device\": \"CPU\"}}}",
    "{\"train_micro_batch_size_per_gpu\": 2, \"zero_optimisation\": {\"stage\": 3}, \"tensorboard\": "
    "{\"enabled\": true}, \"zero_optimization\": {\"stage\": 1, \"cpu_offload\": true, "
    "\"offload_gradients\": 1}, \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"beta1\": 0.9}}}",
};

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Inputs the fuzzer found that broke a check (minimised), kept as seeds so every run tries them:
 *  - the batch rule multiplies in int64 and overflows: train_batch_size 0 at world 4, negative at
 *    world 3, or a wrong product (micro 4 x gas 3074457345618258603 x world 2);
 *  - an enum value is quoted raw in the message: a newline in it splits the one-line message;
 *  - jansson's error text quotes the bad token raw: a backslash before a newline inside a string
 *    puts that newline into the "malformed JSON" message (found by the libFuzzer build);
 *  - an unknown key is quoted raw in the warning: a newline in it splits the warning line;
 *  - `config show` prints numbers with 15 digits: DBL_MAX becomes 1.79769313486232e308, which
 *    no JSON reader accepts (it overflows).
 * (The over-long message, an enum value of 1000+ characters quoted whole, is built in main.) */
static const char *const REGRESSION[] = {
    "{\"train_micro_batch_size_per_gpu\": 4611686018427387904}",
    "{\"train_micro_batch_size_per_gpu\": 4, \"gradient_accumulation_steps\": 3074457345618258603}",
    "{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"a\\nb\"}}",
    "{\"train_batch_size\": 8, \"\\n\": 0}",
    "{\"a\\\n\": 1}",
    "{\"train_batch_size\": 8, \"gradient_clipping\": 1.7976931348623157e308}",
};

static void load_fixtures(void)
{
    const char *d = getenv("FIXTURES");
    if (!d || !*d) d = "tests/fixtures";
    DIR *dir = opendir(d);
    if (!dir) {
        printf("fuzz_config: no fixtures at %s; built-in seeds only\n", d);
        return;
    }
    /* sorted, so the corpus (and so the run) does not depend on readdir order */
    char *names[256];
    int nn = 0;
    struct dirent *de;
    while ((de = readdir(dir)) && nn < 256)
        if (strstr(de->d_name, ".json")) names[nn++] = strdup(de->d_name);
    closedir(dir);
    qsort(names, (size_t)nn, sizeof names[0], cmp_str);
    for (int i = 0; i < nn; i++) {
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", d, names[i]);
        FILE *fp = fopen(path, "rb");
        if (fp) {
            char data[65536];
            size_t n = fread(data, 1, sizeof data, fp);
            fclose(fp);
            corpus_add(data, n);
        }
        free(names[i]);
    }
    printf("fuzz_config: %d fixture seeds from %s\n", nn, d);
}

/* ============================================================================ findings */

#define MAX_KINDS 64
static struct {
    const char *kind;
    long count;
} kinds[MAX_KINDS];
static int nkinds;

/* Drop chunks while the same kind of failure remains (bounded effort): halving chunks aligned
 * to their size, then spans of up to 64 bytes at every offset (every length when the input is
 * short), until nothing changes. */
static void minimise(buf *b, const setting *s, const char *kind)
{
    buf t = {0};
    verdict v;
    for (int pass = 0; pass < 4; pass++) {
        size_t before = b->n;
        for (size_t chunk = b->n / 2; chunk >= 1;
             chunk = chunk > 64 || b->n > 400 ? chunk / 2 : chunk - 1) {
            size_t step = chunk <= 64 ? 1 : chunk;
            for (size_t at = 0; at + chunk <= b->n;) {
                buf_set(&t, b->p, b->n);
                buf_splice(&t, at, chunk, "", 0);
                memset(&v, 0, sizeof v);
                if (check_one(t.p, t.n, s, &v) && v.kind == kind) buf_set(b, t.p, t.n);
                else at += step;
            }
        }
        if (b->n == before) break;
    }
    free(t.p);
}

static void record(const buf *in, const setting *s, const verdict *v, long iter)
{
    for (int k = 0; k < nkinds; k++)
        if (kinds[k].kind == v->kind) {
            kinds[k].count++;
            return;
        }
    if (nkinds < MAX_KINDS) kinds[nkinds].kind = v->kind, kinds[nkinds++].count = 1;
    buf m = {0};
    buf_set(&m, in->p, in->n);
    bool saved = verify_repeat;
    verify_repeat = 0;
    minimise(&m, s, v->kind);
    verdict mv = {0};
    check_one(m.p, m.n, s, &mv);
    verify_repeat = saved;
    printf("FAIL [%s] iteration %ld, world %d, flags variant %d (hidden_size %s, total_steps %s, "
           "micro/lr flags %s, --bf16 %s):\n  %s\n  input (%zu bytes, minimised from %zu): ",
           v->kind, iter, s->world, s->variant, s->variant & 1 ? "768" : "0",
           s->variant & 2 ? "500" : "0", s->variant & 4 ? "given" : "no",
           s->variant & 8 ? "given" : "no", mv.kind ? mv.why : v->why, m.n, in->n);
    print_literal(stdout, m.p, m.n);
    printf("\n");
    fflush(stdout);
    free(m.p);
}

/* ============================================================================ emitting a sample
 * With ZINF_FUZZ_EMIT_DIR, every accepted mutated input is also parsed as `zinf train --model
 * test-mini --max_length 16 --max_steps 2 --logging_steps 1` would parse it, at a world size of
 * 1-3; what that accepts becomes a candidate, described by the features of its resolved config
 * (stage, precision, world, accumulation, scheduler, clipping, offload, and each zero size key's
 * value class where the stage uses it). At the end a greedy cover picks ZINF_FUZZ_EMIT_N of them
 * (shortest text per feature set), written as DIR/NNN.json with DIR/index.txt. Nothing here draws
 * from the random stream, so the fuzz run itself is the same with or without emitting. */

#define EMIT_MICRO_MAX 2 /* per-step sizes stay tiny: micro x accumulation x world x 16 tokens */
#define EMIT_GAS_MAX 3
#define EMIT_POOL_MAX 4096

enum {
    FT_STAGE = 0,                 /* +stage, 4 */
    FT_WORLD = FT_STAGE + 4,      /* +world-1, 3 */
    FT_STAGE_WORLD = FT_WORLD + 3, /* +stage*3+world-1, 12 */
    FT_FP16 = FT_STAGE_WORLD + 12,
    FT_BF16,
    FT_STAGE_FP16, /* +stage, 4 */
    FT_STAGE_BF16 = FT_STAGE_FP16 + 4,
    FT_GAS = FT_STAGE_BF16 + 4,
    FT_MICRO,
    FT_SCHED, /* +type-1, 5 */
    FT_CLIP = FT_SCHED + 5,
    FT_OFF_OPT,
    FT_OFF_PARAM,
    FT_OFF_OPT_RATIO, /* ratio below 1 */
    FT_NVME,          /* refused by zinf train: it counts for nothing else */
    FT_AC,
    FT_ADAM,          /* Adam without weight decay mode */
    FT_WD,
    FT_LOSS_SCALE,    /* fp16 static loss scale */
    FT_PRESCALE,
    FT_PREDIVIDE,
    FT_WALL_CLOCK,
    FT_OVERLAP,       /* overlap_comm not its stage's default */
    FT_SIZE,          /* + key*5 + class (0, 1, 2..1e6, 1e6..1e11 not default, >= 1e12), 8 keys */
    FT_SUBGROUP_HI = FT_SIZE + 40, /* sub_group_size class again, at stages 2-3: +class, 5 */
    FT_N = FT_SUBGROUP_HI + 5
};

typedef struct {
    char *text;
    size_t n;
    int world;
    uint64_t f[2];
} emit_cand;

static const char *emit_dir;
static long emit_n;
static emit_cand *emit_pool;
static size_t emit_npool, emit_seen;

static const struct {
    const char *key;
    size_t off;
    int64_t def;
    int stage_lo, stage_hi; /* the stages whose training reads it */
} SIZEK[8] = {
    {"reduce_bucket_size", offsetof(zinf_config, reduce_bucket_size), 500000000, 2, 3},
    {"allgather_bucket_size", offsetof(zinf_config, allgather_bucket_size), 500000000, 1, 2},
    {"sub_group_size", offsetof(zinf_config, sub_group_size), 1000000000, 0, 3},
    {"stage3_prefetch_bucket_size", offsetof(zinf_config, stage3_prefetch_bucket_size), 50000000, 3, 3},
    {"stage3_max_live_parameters", offsetof(zinf_config, stage3_max_live_parameters), 1000000000, 3, 3},
    {"stage3_max_reuse_distance", offsetof(zinf_config, stage3_max_reuse_distance), 1000000000, 3, 3},
    {"stage3_param_persistence_threshold", offsetof(zinf_config, stage3_param_persistence_threshold),
     100000, 3, 3},
    {"stage3_model_persistence_threshold", offsetof(zinf_config, stage3_model_persistence_threshold),
     INT64_MAX, 3, 3},
};
static const char *const SIZE_CLASS[5] = {"0", "1", "2..1e6", "1e6..1e11", ">=1e12"};
static const char *const SCHED_NAME[6] = {"none", "WarmupLR", "WarmupDecayLR", "WarmupCosineLR",
                                          "OneCycle", "LRRangeTest"};

/* the value class of a size, or -1 for its default */
static int size_class(int64_t v, int64_t def)
{
    if (v == def) return -1;
    if (v <= 1) return (int)v;
    if (v <= 1000000) return 2;
    if (v < 1000000000000) return 3;
    return 4;
}

static void fset(uint64_t f[2], int bit) { f[bit / 64] |= 1ull << (bit % 64); }
static bool fhas(const uint64_t f[2], int bit) { return f[bit / 64] >> (bit % 64) & 1; }

static void features(const zinf_config *g, uint64_t f[2])
{
    f[0] = f[1] = 0;
    if (g->offload_optimizer.device == ZINF_DEV_NVME || g->offload_param.device == ZINF_DEV_NVME) {
        fset(f, FT_NVME);
        return;
    }
    int st = g->zero_stage, w = g->world_size;
    fset(f, FT_STAGE + st);
    fset(f, FT_WORLD + w - 1);
    fset(f, FT_STAGE_WORLD + st * 3 + w - 1);
    if (g->fp16) fset(f, FT_FP16), fset(f, FT_STAGE_FP16 + st);
    if (g->bf16) fset(f, FT_BF16), fset(f, FT_STAGE_BF16 + st);
    if (g->gradient_accumulation_steps > 1) fset(f, FT_GAS);
    if (g->train_micro_batch_size_per_gpu > 1) fset(f, FT_MICRO);
    if (g->sched.type != ZINF_SCHED_NONE) fset(f, FT_SCHED + (int)g->sched.type - 1);
    if (g->gradient_clipping > 0) fset(f, FT_CLIP);
    if (g->offload_optimizer.device == ZINF_DEV_CPU) fset(f, FT_OFF_OPT);
    if (g->offload_optimizer.device == ZINF_DEV_CPU && g->offload_optimizer.ratio < 1)
        fset(f, FT_OFF_OPT_RATIO);
    if (g->offload_param.device == ZINF_DEV_CPU) fset(f, FT_OFF_PARAM);
    if (g->activation_checkpointing) fset(f, FT_AC);
    if (!g->adam_w_mode) fset(f, FT_ADAM);
    if (g->weight_decay > 0) fset(f, FT_WD);
    if (g->fp16 && g->fp16_loss_scale > 0) fset(f, FT_LOSS_SCALE);
    if (g->prescale_gradients) fset(f, FT_PRESCALE);
    if (g->gradient_predivide_factor != 1.0) fset(f, FT_PREDIVIDE);
    if (g->wall_clock_breakdown) fset(f, FT_WALL_CLOCK);
    if (g->overlap_comm != (st == 3)) fset(f, FT_OVERLAP);
    for (int k = 0; k < 8; k++) {
        int c = size_class(*(const int64_t *)((const char *)g + SIZEK[k].off), SIZEK[k].def);
        if (c < 0 || st < SIZEK[k].stage_lo || st > SIZEK[k].stage_hi) continue;
        fset(f, FT_SIZE + k * 5 + c);
        if (k == 2 && st >= 2) fset(f, FT_SUBGROUP_HI + c);
    }
}

static const char *feature_name(int bit, char *b, size_t cap)
{
    if (bit < FT_WORLD) snprintf(b, cap, "stage=%d", bit - FT_STAGE);
    else if (bit < FT_STAGE_WORLD) snprintf(b, cap, "world=%d", bit - FT_WORLD + 1);
    else if (bit < FT_FP16)
        snprintf(b, cap, "stage=%d@world=%d", (bit - FT_STAGE_WORLD) / 3, (bit - FT_STAGE_WORLD) % 3 + 1);
    else if (bit == FT_FP16) snprintf(b, cap, "fp16");
    else if (bit == FT_BF16) snprintf(b, cap, "bf16");
    else if (bit < FT_STAGE_BF16) snprintf(b, cap, "fp16@stage=%d", bit - FT_STAGE_FP16);
    else if (bit < FT_GAS) snprintf(b, cap, "bf16@stage=%d", bit - FT_STAGE_BF16);
    else if (bit == FT_GAS) snprintf(b, cap, "accumulation>1");
    else if (bit == FT_MICRO) snprintf(b, cap, "micro>1");
    else if (bit < FT_CLIP) snprintf(b, cap, "scheduler=%s", SCHED_NAME[bit - FT_SCHED + 1]);
    else if (bit < FT_SIZE) {
        static const char *const N[] = {"clipping", "offload_optimizer=cpu", "offload_param=cpu",
                                        "offload_optimizer.ratio<1", "nvme", "activation_checkpointing",
                                        "Adam(L2)", "weight_decay", "static_loss_scale", "prescale",
                                        "predivide", "wall_clock_breakdown", "overlap_comm(non-default)"};
        snprintf(b, cap, "%s", N[bit - FT_CLIP]);
    } else if (bit < FT_SUBGROUP_HI)
        snprintf(b, cap, "%s=%s", SIZEK[(bit - FT_SIZE) / 5].key, SIZE_CLASS[(bit - FT_SIZE) % 5]);
    else snprintf(b, cap, "sub_group_size=%s@stage>=2", SIZE_CLASS[bit - FT_SUBGROUP_HI]);
    return b;
}

/* the features' weights in the cover: the size keys (what is least tried elsewhere) count most */
static int feature_weight(int bit) { return bit >= FT_SIZE ? 3 : bit == FT_NVME ? 1 : 2; }

/* Parse as the training test's `zinf train` does (test-mini: hidden size 64; --max_length 16
 * --max_steps 2 --logging_steps 1) at world w and resolve the steps; 0 when accepted. */
static int train_parse(zinf_config *g, const char *text, size_t len, int w)
{
    zinf_flags f;
    zinf_flags_defaults(&f);
    f.hidden_size = 64;
    f.max_length = 16, f.max_length_set = true;
    f.max_steps = 2, f.max_steps_set = true;
    f.logging_steps = 1, f.logging_steps_set = true;
    zinf_err_clear();
    if (zinf_config_parse(g, text, len, SRC, &f, w, NULL)) return 1;
    return zinf_config_finalize_steps(g, 2, &f, NULL) ? 1 : 0;
}

/* The batch numbers made small (micro <= EMIT_MICRO_MAX, accumulation <= EMIT_GAS_MAX, all three
 * written out) when the text is plain JSON; a new malloc'd text, or NULL. */
static char *shrink_batch(const char *text, size_t len, const zinf_config *g, size_t *outn)
{
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(root)) {
        json_decref(root);
        return NULL;
    }
    int64_t m = g->train_micro_batch_size_per_gpu, a = g->gradient_accumulation_steps;
    if (m > EMIT_MICRO_MAX) m = EMIT_MICRO_MAX;
    if (a > EMIT_GAS_MAX) a = EMIT_GAS_MAX;
    json_object_set_new(root, "train_batch_size", json_integer(m * a * g->world_size));
    json_object_set_new(root, "train_micro_batch_size_per_gpu", json_integer(m));
    json_object_set_new(root, "gradient_accumulation_steps", json_integer(a));
    char *out = json_dumps(root, JSON_ENSURE_ASCII);
    json_decref(root);
    if (out) *outn = strlen(out);
    return out;
}

static void emit_consider(const buf *in, long it)
{
    zinf_config *g = &cfg_b;
    int w = 0;
    for (int t = 0; t < 3 && !w; t++)
        if (!train_parse(g, in->p, in->n, 1 + (int)((it + t) % 3))) w = 1 + (int)((it + t) % 3);
    if (!w) return;
    char *text = NULL;
    size_t n = in->n;
    if (g->train_micro_batch_size_per_gpu > EMIT_MICRO_MAX || g->gradient_accumulation_steps > EMIT_GAS_MAX) {
        text = shrink_batch(in->p, in->n, g, &n);
        if (!text || train_parse(g, text, n, w)) {
            free(text);
            return;
        }
    } else {
        text = malloc(n ? n : 1);
        if (!text) exit(1);
        memcpy(text, in->p, n);
    }
    emit_seen++;
    uint64_t f[2];
    features(g, f);
    /* one candidate per feature set: the shortest text */
    for (size_t c = 0; c < emit_npool; c++)
        if (emit_pool[c].f[0] == f[0] && emit_pool[c].f[1] == f[1]) {
            if (n < emit_pool[c].n) {
                free(emit_pool[c].text);
                emit_pool[c].text = text, emit_pool[c].n = n, emit_pool[c].world = w;
            } else free(text);
            return;
        }
    if (emit_npool == EMIT_POOL_MAX) {
        free(text);
        return;
    }
    if (!emit_pool && !(emit_pool = calloc(EMIT_POOL_MAX, sizeof *emit_pool))) exit(1);
    emit_pool[emit_npool++] = (emit_cand){text, n, w, {f[0], f[1]}};
}

/* Greedy weighted cover of the features; when nothing new is left to cover, start again. */
static int emit_write(void)
{
    char path[4096], nm[96];
    snprintf(path, sizeof path, "%s/index.txt", emit_dir);
    FILE *idx = fopen(path, "w");
    if (!idx) {
        printf("fuzz_config: cannot write %s\n", path);
        return 1;
    }
    uint64_t cov[2] = {0, 0}, ever[2] = {0, 0};
    bool *used = calloc(emit_npool + 1, 1);
    long written = 0;
    while (written < emit_n && used) {
        long best = -1, bestw = 0;
        for (size_t c = 0; c < emit_npool; c++) {
            if (used[c]) continue;
            long gain = 0;
            for (int b = 0; b < FT_N; b++)
                if (fhas(emit_pool[c].f, b) && !fhas(cov, b)) gain += feature_weight(b);
            if (gain > bestw || (gain == bestw && gain > 0 && emit_pool[c].n < emit_pool[best].n))
                best = (long)c, bestw = gain;
        }
        if (best < 0) {
            if (!cov[0] && !cov[1]) break; /* nothing covers anything: the pool is spent */
            cov[0] = cov[1] = 0;
            continue;
        }
        emit_cand *e = &emit_pool[best];
        used[best] = true;
        cov[0] |= e->f[0], cov[1] |= e->f[1];
        ever[0] |= e->f[0], ever[1] |= e->f[1];
        snprintf(path, sizeof path, "%s/%03ld.json", emit_dir, written);
        FILE *fp = fopen(path, "wb");
        if (!fp || fwrite(e->text, 1, e->n, fp) != e->n || fclose(fp)) {
            printf("fuzz_config: cannot write %s\n", path);
            free(used);
            fclose(idx);
            return 1;
        }
        fprintf(idx, "%03ld.json %d", written, e->world);
        for (int b = 0; b < FT_N; b++)
            if (fhas(e->f, b)) fprintf(idx, " %s", feature_name(b, nm, sizeof nm));
        fputc('\n', idx);
        written++;
    }
    free(used);
    fclose(idx);
    int nf = FT_N, nc = 0;
    for (int b = 0; b < FT_N; b++) nc += fhas(ever, b);
    printf("fuzz_config: emitted %ld configs to %s (from %zu candidates, %zu accepted for training);"
           " %d of %d features covered\n", written, emit_dir, emit_npool, emit_seen, nc, nf);
    bool first = true;
    for (int b = 0; b < FT_N; b++)
        if (!fhas(ever, b)) {
            printf("%s %s", first ? "  not covered:" : ",", feature_name(b, nm, sizeof nm));
            first = false;
        }
    if (!first) printf("\n");
    for (size_t c = 0; c < emit_npool; c++) free(emit_pool[c].text);
    free(emit_pool);
    return 0;
}

int main(void)
{
    long iters = 20000;
    double max_s = 15;
    uint64_t seed = fuzz_options(&iters, &max_s);
    const char *ed = getenv("ZINF_FUZZ_EMIT_DIR"), *en = getenv("ZINF_FUZZ_EMIT_N");
    if (ed && *ed) emit_dir = ed, emit_n = en && *en ? atol(en) : 32;

    load_fixtures();
    for (size_t i = 0; i < sizeof BUILTIN / sizeof BUILTIN[0]; i++)
        corpus_add(BUILTIN[i], strlen(BUILTIN[i]));
    for (size_t i = 0; i < sizeof REGRESSION / sizeof REGRESSION[0]; i++)
        corpus_add(REGRESSION[i], strlen(REGRESSION[i]));
    {
        char longv[1200];
        int n = snprintf(longv, sizeof longv, "{\"train_batch_size\": 8, \"scheduler\": {\"type\": \"");
        while (n < 1100) longv[n++] = 'x';
        n += snprintf(longv + n, sizeof longv - (size_t)n, "\"}}");
        corpus_add(longv, (size_t)n);
    }
    size_t nseeds = ncorpus;

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long failures = 0, parses = 0, oks = 0, it;
    buf in = {0};
    /* the seeds themselves, unmutated, at every setting */
    for (size_t c = 0; c < nseeds; c++)
        for (int world = 1; world <= 4; world++)
            for (int variant = 0; variant < 16; variant++) {
                setting s = {world, variant};
                verdict v = {0};
                verify_repeat = 1;
                parses++;
                if (check_one(corpus[c].p, corpus[c].n, &s, &v))
                    failures++, record(&corpus[c], &s, &v, -1);
                
            }
    for (it = 0; it < iters; it++) {
        if ((it & 255) == 0) {
            clock_gettime(CLOCK_MONOTONIC, &t1);
            if ((double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec) > max_s) {
                printf("fuzz_config: time cap of %.0f s reached after %ld of %ld iterations\n", max_s,
                       it, iters);
                break;
            }
        }
        /* half from the seeds, so they stay the main source however large the corpus grows */
        const buf *src = &corpus[rndn(rndn(2) ? nseeds : ncorpus)];
        buf_set(&in, src->p, src->n);
        int nm = rndn(2) ? 1 : 2 + (int)rndn(3);
        for (int m = 0; m < nm; m++) mutate(&in);
        if (in.n > 60000) in.n = 60000;
        bool any_ok = false;
        for (int r = 0; r < 3; r++) {
            /* one random setting, one with the hidden size and no batch flag (the fixtures'
             * size "auto"s), one with both (configs without batch keys) */
            setting s = {1 + (int)rndn(4), (int)rndn(16)};
            if (r == 1) s.variant = (s.variant | 1) & ~4;
            if (r == 2) s.variant |= 1 | 4;
            verdict v = {0};
            verify_repeat = (it % 16) == 0;
            parses++;
            if (check_one(in.p, in.n, &s, &v)) {
                failures++;
                record(&in, &s, &v, it);
            } else if (last_rc == 0) {
                any_ok = true;
            }
        }
        /* keep inputs that still parse, so later mutations go deeper (bounded corpus) */
        if (any_ok) {
            oks++;
            if (emit_dir) emit_consider(&in, it);
            if (ncorpus < 2000) corpus_add(in.p, in.n);
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    printf("fuzz_config: seed %llu, %ld iterations (%ld parses, %ld mutated inputs accepted, corpus "
           "%zu from %zu seeds) in %.1f s, %ld failed checks\n",
           (unsigned long long)seed, it, parses, oks, ncorpus, nseeds, secs, failures);
    for (int k = 0; k < nkinds; k++) printf("  [%s] x %ld\n", kinds[k].kind, kinds[k].count);
    if (emit_dir && emit_write()) failures++;
    for (size_t i = 0; i < ncorpus; i++) free(corpus[i].p);
    free(corpus);
    free(in.p);
    return failures ? 1 : 0;
}
#endif
