/* config: DeepSpeed JSON -> one typed, validated zinf_config.
 *
 * One table per JSON object (KEYS_TOP, KEYS_ZERO, ...) says, for every key zinf knows: its type,
 * where it lives in zinf_config, its default, whether "auto" is allowed and what fills it, and
 * which command-line flag it must agree with. The same tables drive parsing, defaults, the
 * unknown-key warnings (with the nearest known key) and `zinf config show`. What no table can say
 * (the batch rule, stage/offload combinations, defaults that depend on another key) is in
 * resolve(), one rule per paragraph.
 *
 * Defaults and rules follow DeepSpeed's code: deepspeedai/DeepSpeed at edaa722 (2026-08-22,
 * version.txt 0.19.6; the 0.19.x line, whose 0.19.8 has the same defaults): runtime/constants.py,
 * runtime/config.py, runtime/config_utils.py, runtime/zero/config.py, runtime/zero/offload_config.py,
 * runtime/precision_config.py, runtime/lr_schedules.py, runtime/swap_tensor/{constants,aio_config}.py,
 * runtime/activation_checkpointing/config.py, comm/{config,constants}.py,
 * profiling/{config,constants}.py, ops/adam/fused_adam.py. The blocks that are DeepSpeedConfigModel
 * there (zero_optimization, offload_*, fp16, bf16, comms_logger) drop an "auto" before validation,
 * so an "auto" nothing fills takes the default (blockdef.pydantic); they also accept a field's
 * name beside its alias (keydef.alias, alias2). Where DeepSpeed's documentation disagrees with
 * that code, the code wins:
 *
 *  - gradient_clipping: 1.0 (GRADIENT_CLIPPING_DEFAULT); older releases had 0.
 *  - offload_param.pin_memory / offload_optimizer.pin_memory: True in offload_config.py.
 *  - overlap_comm: Optional, None -> (stage == 3) by the overlap_comm_valid validator; the docs
 *    still say false.
 *  - stage3_prefetch_bucket_size: pp_int(5e7) in zero/config.py; the docs say 5e8.
 *  - sub_group_size: 1e9 in zero/config.py; the ZERO_FORMAT docstring says 1e12.
 *  - steps_per_print: STEPS_PER_PRINT_DEFAULT is None (never print); 10 in older releases and
 *    the docs. It drives DeepSpeed's own progress prints only; the Trainer's log (zinf's) follows
 *    --logging_steps, 500 by default as in HF's TrainingArguments.
 *  - WarmupLR.warmup_max_lr: None -> the optimizer's lr in the code; the docstring and the docs
 *    say 0.001 (WarmupDecayLR still passes 0.001 explicitly).
 *  - WarmupCosineLR: warmup_min_ratio 0.0, cos_min_ratio 0.0001 in the constructor; the argparse
 *    helper in the same file says 0.01 for both.
 *  - OneCycle: cycle_first_step_size 2000, cycle_first_stair_count 0, decay_step_size 0,
 *    cycle_momentum true in the constructor; the argparse helper says 1000, -1, 1000, false.
 *  - LRRangeTest.lr_range_test_step_size: 2000 in the constructor; the argparse helper says 1000.
 *  - flops_profiler.top_modules: 1 (FLOPS_PROFILER_TOP_MODULES_DEFAULT); its FORMAT string and
 *    the docs say 3.
 *  - aio: thread_count was renamed intra_op_parallelism (default 1) in 0.16.4, which ignores the old
 *    name since; zinf accepts both.
 *  - The pydantic blocks validate in pydantic's lax mode: a bool field takes 0/1 and "yes"/"off"...
 *    (lax_bool); zinf reads them so there, and keeps true/false elsewhere.
 *  - Unknown keys inside the pydantic blocks are errors in DeepSpeed (extra="forbid"); zinf warns
 *    and names the nearest known key.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <strings.h>

#include <jansson.h>

#include "err.h"

/* ============================================================================ flags */

void zinf_flags_defaults(zinf_flags *f)
{
    /* HF TrainingArguments defaults */
    memset(f, 0, sizeof *f);
    f->per_device_train_batch_size = 8;
    f->gradient_accumulation_steps = 1;
    f->learning_rate = 5e-5;
    f->weight_decay = 0.0;
    f->adam_beta1 = 0.9;
    f->adam_beta2 = 0.999;
    f->adam_epsilon = 1e-8;
    f->max_grad_norm = 1.0;
    f->warmup_steps = 0;
    f->warmup_ratio = 0.0;
    f->num_train_epochs = 3.0;
    f->max_steps = -1;
    f->max_length = 0;
    f->logging_steps = 500;
    f->eval_steps = 0; /* None: follows logging_steps */
    f->save_steps = 500;
}

/* HF's IntervalStrategy names; -1 for another */
static int ival_of(const char *s)
{
    return !strcmp(s, "steps") ? ZINF_IVAL_STEPS : !strcmp(s, "no") ? ZINF_IVAL_NO : !strcmp(s, "epoch") ? ZINF_IVAL_EPOCH : -1;
}

/* The flags a config key can be tied to ("auto" takes the flag; a given flag must agree). */
enum { FL_NONE, FL_MICRO, FL_GAS, FL_LR, FL_WD, FL_BETA1, FL_BETA2, FL_EPS, FL_CLIP, FL_FP16,
       FL_BF16 };
static const struct flagdef {
    const char *opt;
    char kind; /* 'i' int64, 'd' double, 'b' bool */
    size_t val, set;
} FLAGS[] = {
#define FD(id, opt, kind, field) [id] = {opt, kind, offsetof(zinf_flags, field), offsetof(zinf_flags, field##_set)}
    FD(FL_MICRO, "--per_device_train_batch_size", 'i', per_device_train_batch_size),
    FD(FL_GAS, "--gradient_accumulation_steps", 'i', gradient_accumulation_steps),
    FD(FL_LR, "--learning_rate", 'd', learning_rate),
    FD(FL_WD, "--weight_decay", 'd', weight_decay),
    FD(FL_BETA1, "--adam_beta1", 'd', adam_beta1),
    FD(FL_BETA2, "--adam_beta2", 'd', adam_beta2),
    FD(FL_EPS, "--adam_epsilon", 'd', adam_epsilon),
    FD(FL_CLIP, "--max_grad_norm", 'd', max_grad_norm),
    FD(FL_FP16, "--fp16", 'b', fp16),
    FD(FL_BF16, "--bf16", 'b', bf16),
#undef FD
};

static double flag_val(const zinf_flags *f, int id)
{
    const char *p = (const char *)f + FLAGS[id].val;
    switch (FLAGS[id].kind) {
    case 'i': return (double)*(const int64_t *)p;
    case 'b': return *(const bool *)p ? 1.0 : 0.0;
    default: return *(const double *)p;
    }
}

static bool flag_given(const zinf_flags *f, int id)
{
    return id != FL_NONE && *(const bool *)((const char *)f + FLAGS[id].set);
}

/* The precision --torch_dtype asks for: the --bf16 and --fp16 values it stands for. 0, or
 * ZINF_EINVAL for a dtype zinf does not have. */
static int torch_dtype_bools(const char *dt, bool *bf16, bool *fp16)
{
    *bf16 = dt && (!strcmp(dt, "bfloat16") || !strcmp(dt, "bf16"));
    *fp16 = dt && (!strcmp(dt, "float16") || !strcmp(dt, "fp16") || !strcmp(dt, "half"));
    if (*bf16 || *fp16 || (dt && (!strcmp(dt, "float32") || !strcmp(dt, "fp32") || !strcmp(dt, "float"))))
        return 0;
    return zinf_err("--torch_dtype %s: expected bfloat16, float16 or float32", dt ? dt : "(null)");
}

/* --torch_dtype as ms-swift applies it: --bf16 and --fp16 follow it where they are not given,
 * and a given one must agree with it. The flags then fill bf16.enabled/fp16.enabled "auto" and
 * must agree with written values, as --bf16/--fp16 do. */
static int apply_torch_dtype(zinf_flags *f)
{
    if (!f->torch_dtype_set) return 0;
    bool bf, fp;
    ZINF_TRY(torch_dtype_bools(f->torch_dtype, &bf, &fp));
    if ((f->bf16_set && f->bf16 != bf) || (f->fp16_set && f->fp16 != fp))
        return zinf_err("--torch_dtype %s and --%s %s disagree: give one of them", f->torch_dtype,
                        f->bf16_set && f->bf16 != bf ? "bf16" : "fp16",
                        (f->bf16_set && f->bf16 != bf ? f->bf16 : f->fp16) ? "true" : "false");
    if (!f->bf16_set) f->bf16 = bf, f->bf16_set = true;
    if (!f->fp16_set) f->fp16 = fp, f->fp16_set = true;
    return 0;
}

/* How a message names flag `id`: --bf16/--fp16 as the --torch_dtype they came from */
static const char *flag_opt(const zinf_flags *f, int id, char *buf, size_t cap)
{
    if ((id == FL_BF16 || id == FL_FP16) && f->torch_dtype_set) {
        snprintf(buf, cap, "--torch_dtype %s", f->torch_dtype);
        return buf;
    }
    if (id == FL_MICRO && f->per_device_train_batch_size_opt) return f->per_device_train_batch_size_opt;
    return FLAGS[id].opt;
}

/* ============================================================================ key tables */

typedef enum {
    T_BOOL, T_INT, T_NUM, T_STR, T_ENUM, T_BETAS, T_OBJ,
    T_NOEFFECT, /* a DeepSpeed key zinf knows and does not implement: warning (or error, see F_) */
    T_PATHS,    /* a directory, or (zinf) an array of directories: stored one per line */
    T_LEGACY,   /* a deprecated DeepSpeed key that DeepSpeed maps onto a new one: see legacy() */
    T_VACUOUS   /* a DeepSpeed key whose effect cannot arise in zinf (the note says why) */
} ktype;

enum {
    F_AUTO = 1 << 0,       /* "auto" allowed; filled as `autok` says */
    F_NULL = 1 << 1,       /* null accepted = unset (int -1, string "", object absent) */
    F_POS = 1 << 2,        /* int > 0 / number > 0 */
    F_SIGNED = 1 << 3,     /* int or number may be negative (otherwise >= 0) */
    F_UNIT = 1 << 4,       /* number in [0, 1] */
    F_I32 = 1 << 5,        /* the field is an `int`, not int64_t */
    F_REQ = 1 << 6,        /* required when its block is present */
    F_FILL = 1 << 7,       /* absent: taken from its flag when the flag was given */
    F_PRESENT = 1 << 8,    /* T_OBJ: bool at `off2` says whether the block was present */
    F_ABSENT_AUTO = 1 << 9,/* T_OBJ: an absent block behaves as if every F_AUTO key said "auto" */
    F_ERR_TRUE = 1 << 10,  /* bool that zinf cannot honour when true: error */
    F_ERR_ENABLED = 1 << 11, /* T_NOEFFECT block whose "enabled": true changes numerics: error */
    F_DYNAMIC = 1 << 12,   /* default depends on other keys: see resolve() */
    F_RANGE = 1 << 13,     /* int within [lo, hi] */
    F_ERR_SET = 1 << 14,   /* T_NOEFFECT whose mere presence (not null, false or {}) changes
                              numerics: error */
    F_ERR_REFUSED = 1 << 16, /* T_NOEFFECT that DeepSpeed itself refuses: an error, as there */
    F_SCALE = 1 << 17,     /* number: a loss scale (zinf_loss_scale_ok), or 0 without F_POS */
    F_ERR_SUB = 1 << 15,   /* T_NOEFFECT object whose member `errkey` > 1 (or true) changes
                              numerics: error */
    F_NULL_ABSENT = 1 << 19, /* null is the key left out (DeepSpeed's get_scalar_param gives None) */
    F_ENUM_DEFAULT = 1 << 18, /* T_ENUM: any other value (null included) is DeepSpeed's default,
                                 with a warning, as DeepSpeed itself does */
    F_WHOLE = 1 << 20,     /* T_NUM: no fractional part (a pydantic int field kept as a double) */
    F_NUMSTR = 1 << 21,    /* T_NUM: a string is read as Python's float() reads it */
};

enum { K_DEF = 1 << 0, K_DEFNULL = 1 << 1 };

/* how "auto" is filled */
enum { A_NONE, A_FLAG, A_DERIVE, A_HH, A_HH09, A_10H, A_ZERO, A_STEPS, A_WARMUP, A_STAGE, A_RUNTIME };

/* scheduler types as bits, for which scheduler takes which params */
#define S_(t) (1u << (t))
#define SW S_(ZINF_SCHED_WARMUP_LR)
#define SD S_(ZINF_SCHED_WARMUP_DECAY_LR)
#define SC S_(ZINF_SCHED_WARMUP_COSINE_LR)
#define SO S_(ZINF_SCHED_ONE_CYCLE)
#define SR S_(ZINF_SCHED_LR_RANGE_TEST)

typedef struct enumdef {
    const char *const *names; /* index = stored int value */
    int n;
    bool icase;
    const char *list;         /* for messages */
} enumdef;

typedef struct keydef keydef;
typedef struct blockdef {
    const keydef *keys;
    size_t n;
    bool sched_params;        /* keys carry scheduler masks */
    bool pydantic;            /* a DeepSpeedConfigModel in DeepSpeed: an "auto" that nothing fills
                                 is dropped there (config_utils.py), so the default applies */
} blockdef;

struct keydef {
    const char *name;
    ktype type;
    unsigned flags;
    size_t off;               /* field offset (T_OBJ: base added to the sub-table's offsets) */
    double def, def2;         /* default for bool/num (def2: betas[1]) */
    int64_t idef;             /* default for int */
    const char *sdef;         /* default for string/enum (enum: a name) */
    int autok, flag;
    const blockdef *sub;      /* T_OBJ */
    const enumdef *en;        /* T_ENUM */
    const char *alias;        /* second accepted name (DeepSpeed's field name or old name) */
    const char *alias2;       /* third accepted name */
    const char *errkey;       /* F_ERR_SUB: the member that makes the block an error */
    unsigned flags2;          /* K_DEF: T_NOEFFECT whose DeepSpeed default is `def` (a number or
                                 bool); K_DEFNULL: whose default is null. Given at its default, it
                                 asks for nothing zinf lacks, so it is accepted without a word. */
    size_t off2;              /* F_PRESENT flag offset */
    int64_t lo, hi;           /* F_RANGE */
    unsigned smask, sreq;     /* scheduler params: taken by / required by */
    const char *note;         /* T_NOEFFECT: what to use instead, when there is something */
};

#define CO(field) offsetof(zinf_config, field)
#define OO(field) offsetof(zinf_offload_cfg, field)
#define NOEFF(nm, ...) {.name = nm, .type = T_NOEFFECT, __VA_ARGS__}
#define BLOCK(tbl) {tbl, sizeof tbl / sizeof tbl[0], false, false}
#define PBLOCK(tbl) {tbl, sizeof tbl / sizeof tbl[0], false, true}
/* accepted, and nothing to do: the DeepSpeed behaviour the key selects cannot arise in zinf */
#define VACUOUS(nm, why) {.name = nm, .type = T_VACUOUS, .note = why}

static const char *const OPT_NAMES[] = {"AdamW", "Adam"}; /* = zinf_opt_type */
static const enumdef EN_OPT = {OPT_NAMES, 2, true, "Adam, AdamW"};
static const char *const SCHED_NAMES[] = {"", "WarmupLR", "WarmupDecayLR", "WarmupCosineLR",
                                          "OneCycle", "LRRangeTest", /* the config's; then HF's: */
                                          "linear", "cosine", "cosine_with_min_lr", "constant",
                                          "constant_with_warmup"}; /* = zinf_sched_type */
static const enumdef EN_SCHED = {SCHED_NAMES, 6, false,
                                 "WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle, LRRangeTest"};
static const char *const DEV_NAMES[] = {"none", "cpu", "nvme"}; /* = zinf_offload_device */
static const enumdef EN_DEV = {DEV_NAMES, 3, true, "none, cpu, nvme"};
static const char *const WTYPE_NAMES[] = {"log", "linear"};
static const enumdef EN_WTYPE = {WTYPE_NAMES, 2, false, "log, linear"};
static const char *const COMMDT_NAMES[] = {"", "fp16", "bf16", "fp32"}; /* ZINF_COMM_* */
static const enumdef EN_COMMDT = {COMMDT_NAMES, 4, true, "fp16, bf16, fp32"};
/* data_types.*: config.py DtypeEnum's names, stored as the index here and made ZINF_COMM_* by
 * dtype_canon() in resolve() (int8 -> -1) */
static const char *const DTYPE_NAMES[] = {"", "fp16", "bf16", "fp32", "float16", "half", "torch.float16",
                                          "bfloat16", "torch.bfloat16", "float32", "float",
                                          "torch.float32", "int8", "torch.int8"};
static const enumdef EN_DTYPE = {DTYPE_NAMES, 14, true,
                                 "fp16, bf16, fp32 (or DeepSpeed's other names: float16, half, bfloat16, "
                                 "float32, float, torch.float16, ...)"};
static const char *const TAGV_NAMES[] = {"Ignore", "Warn", "Fail"};
static const enumdef EN_TAGV = {TAGV_NAMES, 3, true, "Ignore, Warn, Fail"};
/* config.py get_gradient_allreduce_op: lowercased, GRADIENT_ALLREDUCE_OP_SUPPORTED */
static const char *const ALLRED_NAMES[] = {"mean", "sum"};
static const enumdef EN_ALLRED = {ALLRED_NAMES, 2, true, "mean, sum"};

/* ---- THE DEFAULTS TABLE: every key, its type, default, "auto" rule and flag ---- */

static const keydef KEYS_FP16[] = {
    {"enabled", T_BOOL, F_AUTO, CO(fp16), .def = 0, .autok = A_FLAG, .flag = FL_FP16},
    /* precision_config.py _validate_loss_scale: float(v), so "0" or "128" is a number there */
    {"loss_scale", T_NUM, F_SCALE | F_NUMSTR, CO(fp16_loss_scale), .def = 0},
    {"initial_scale_power", T_INT, F_RANGE, CO(fp16_initial_scale_power), .idef = 16, .lo = 0, .hi = 127},
    {"loss_scale_window", T_INT, 0, CO(fp16_loss_scale_window), .idef = 1000},
    {"hysteresis", T_INT, 0, CO(fp16_hysteresis), .idef = 2},
    {"consecutive_hysteresis", T_BOOL, 0, CO(fp16_consecutive_hysteresis), .def = 0},
    /* > 0 (and loss_scale_window > 0) only with dynamic scaling on: see resolve() */
    {"min_loss_scale", T_NUM, F_SCALE | F_WHOLE, CO(fp16_min_loss_scale), .def = 1}, /* an int field */
    VACUOUS("auto_cast", "DeepSpeed casts floating-point inputs; a token-id model has none"),
    NOEFF("fp16_master_weights_and_grads", .flags2 = K_DEF, .def = 0, .flags = F_ERR_TRUE),
    NOEFF("fused_mode"),
};

static const keydef KEYS_BF16[] = {
    {"enabled", T_BOOL, F_AUTO, CO(bf16), .def = 0, .autok = A_FLAG, .flag = FL_BF16},
    NOEFF("immediate_grad_update", .flags2 = K_DEF, .def = 0),
    {"check_grad_overflow", T_BOOL, 0, CO(bf16_check_grad_overflow), .def = 1},
    NOEFF("bf16_master_weights_and_grads", .flags2 = K_DEF, .def = 0, .flags = F_ERR_TRUE),
    NOEFF("bf16_optimizer_states", .flags2 = K_DEF, .def = 0, .flags = F_ERR_TRUE),
};

/* DeepSpeed's FusedAdam defaults (ops/adam/fused_adam.py) */
static const keydef KEYS_OPT_PARAMS[] = {
    {"lr", T_NUM, F_AUTO, CO(lr), .def = 1e-3, .autok = A_FLAG, .flag = FL_LR},
    {"betas", T_BETAS, F_AUTO, CO(beta1), .def = 0.9, .def2 = 0.999, .autok = A_FLAG,
     .flag = FL_BETA1},
    {"eps", T_NUM, F_AUTO, CO(eps), .def = 1e-8, .autok = A_FLAG, .flag = FL_EPS},
    {"weight_decay", T_NUM, F_AUTO, CO(weight_decay), .def = 0, .autok = A_FLAG, .flag = FL_WD},
    {"adam_w_mode", T_BOOL, 0, CO(adam_w_mode), .def = 1}, /* ADAM_W_MODE_DEFAULT */
    {"bias_correction", T_BOOL, 0, CO(bias_correction), .def = 1},
    {"torch_adam", T_BOOL, 0, CO(torch_adam), .def = 0},
    {"amsgrad", T_BOOL, F_ERR_TRUE, (size_t)-1, .def = 0},
    /* DeepSpeed's engine raises ValueError for it (engine.py _configure_basic_optimizer) */
    NOEFF("max_grad_norm", .flags = F_ERR_REFUSED,
          .note = "DeepSpeed refuses it too (ValueError); use the top-level gradient_clipping"),
};
static const blockdef B_OPT_PARAMS = BLOCK(KEYS_OPT_PARAMS);

static const keydef KEYS_OPT[] = {
    {"type", T_ENUM, F_REQ, CO(opt_type), .sdef = "AdamW", .en = &EN_OPT,
     .note = "DeepSpeed builds no optimizer from a block without it (config.py get_optimizer_name gives None) "
             "and its params have no effect; give the type, or leave the block out for AdamW from the flags"},
    {"params", T_OBJ, 0, 0, .sub = &B_OPT_PARAMS},
    NOEFF("legacy_fusion", .flags2 = K_DEF, .def = 0),
};

/* lr_schedules.py constructor defaults; masks say which schedule takes the key */
static const keydef KEYS_SCHED_PARAMS[] = {
    {"warmup_min_lr", T_NUM, F_AUTO, CO(sched.warmup_min_lr), .def = 0, .autok = A_ZERO,
     .smask = SW | SD},
    {"warmup_max_lr", T_NUM, F_AUTO | F_DYNAMIC, CO(sched.warmup_max_lr), .def = NAN,
     .autok = A_FLAG, .flag = FL_LR, .smask = SW | SD}, /* WarmupLR: optimizer lr; Decay 1e-3 */
    /* WarmupLR.__init__ and WarmupCosineLR.__init__ raise ValueError for one below 1 */
    {"warmup_num_steps", T_INT, F_AUTO | F_POS, CO(sched.warmup_num_steps), .idef = 1000,
     .autok = A_WARMUP, .smask = SW | SD | SC},
    /* lr_schedules.py: an unknown warmup_type is a warning there, and log */
    {"warmup_type", T_ENUM, F_ENUM_DEFAULT, CO(sched.warmup_type_linear), .sdef = "log", .en = &EN_WTYPE,
     .smask = SW | SD | SC},
    {"total_num_steps", T_INT, F_AUTO, CO(sched.total_num_steps), .idef = 0, .autok = A_STEPS,
     .smask = SD | SC, .sreq = SD | SC},
    {"warmup_min_ratio", T_NUM, 0, CO(sched.warmup_min_ratio), .def = 0, .smask = SC},
    {"cos_min_ratio", T_NUM, 0, CO(sched.cos_min_ratio), .def = 0.0001, .smask = SC},
    {"cycle_min_lr", T_NUM, 0, CO(sched.cycle_min_lr), .def = 0, .smask = SO, .sreq = SO},
    {"cycle_max_lr", T_NUM, 0, CO(sched.cycle_max_lr), .def = 0, .smask = SO, .sreq = SO},
    {"decay_lr_rate", T_NUM, 0, CO(sched.decay_lr_rate), .def = 0, .smask = SO},
    {"cycle_first_step_size", T_INT, F_POS, CO(sched.cycle_first_step_size), .idef = 2000,
     .smask = SO},
    {"cycle_second_step_size", T_INT, F_NULL | F_POS, CO(sched.cycle_second_step_size),
     .idef = -1, .smask = SO}, /* None: same as the first */
    {"cycle_first_stair_count", T_INT, 0, CO(sched.cycle_first_stair_count), .idef = 0,
     .smask = SO},
    {"cycle_second_stair_count", T_INT, F_NULL, CO(sched.cycle_second_stair_count), .idef = -1,
     .smask = SO}, /* None: same as the first */
    {"decay_step_size", T_INT, 0, CO(sched.decay_step_size), .idef = 0, .smask = SO},
    {"cycle_momentum", T_BOOL, 0, CO(sched.cycle_momentum), .def = 1, .smask = SO},
    {"cycle_min_mom", T_NUM, 0, CO(sched.cycle_min_mom), .def = 0.8, .smask = SO},
    {"cycle_max_mom", T_NUM, 0, CO(sched.cycle_max_mom), .def = 0.9, .smask = SO},
    {"decay_mom_rate", T_NUM, 0, CO(sched.decay_mom_rate), .def = 0, .smask = SO},
    {"lr_range_test_min_lr", T_NUM, 0, CO(sched.lr_range_test_min_lr), .def = 1e-3, .smask = SR},
    {"lr_range_test_step_size", T_INT, F_POS, CO(sched.lr_range_test_step_size), .idef = 2000,
     .smask = SR},
    {"lr_range_test_step_rate", T_NUM, 0, CO(sched.lr_range_test_step_rate), .def = 1.0,
     .smask = SR},
    {"lr_range_test_staircase", T_BOOL, 0, CO(sched.lr_range_test_staircase), .def = 0,
     .smask = SR},
    NOEFF("last_batch_iteration", .flags2 = K_DEF, .def = -1, .flags = F_ERR_SET,
          .note = "it starts the schedule part-way; zinf's schedule position is the optimizer step"),
};
static const blockdef B_SCHED_PARAMS = {KEYS_SCHED_PARAMS,
                                        sizeof KEYS_SCHED_PARAMS / sizeof KEYS_SCHED_PARAMS[0],
                                        true, false};

static const keydef KEYS_SCHED[] = {
    {"type", T_ENUM, F_REQ, CO(sched.type), .sdef = "", .en = &EN_SCHED,
     .note = "DeepSpeed builds no scheduler from a block without it (config.py get_scheduler_name gives None) "
             "and its params have no effect; give the type, or leave the block out"},
    /* engine.py _scheduler_from_config: scheduler(optimizer, **scheduler_params()), which is None
     * without the key: a TypeError there */
    {"params", T_OBJ, F_REQ, 0, .sub = &B_SCHED_PARAMS,
     .note = "DeepSpeed passes the missing params as keywords and fails with a TypeError; give \"params\": {} "
             "for the schedule's defaults"},
};

static const keydef KEYS_OFF_PARAM[] = {
    {"device", T_ENUM, 0, OO(device), .sdef = "none", .en = &EN_DEV},
    {"nvme_path", T_PATHS, F_NULL, OO(nvme_path), .sdef = ""},
    {"buffer_count", T_INT, 0, OO(buffer_count), .idef = 5},
    {"buffer_size", T_INT, 0, OO(buffer_size), .idef = 100000000},
    {"max_in_cpu", T_INT, 0, OO(max_in_cpu), .idef = 1000000000},
    {"pin_memory", T_BOOL, 0, OO(pin_memory), .def = 1},
};
static const blockdef B_OFF_PARAM = PBLOCK(KEYS_OFF_PARAM);

static const keydef KEYS_OFF_OPT[] = {
    {"device", T_ENUM, 0, OO(device), .sdef = "none", .en = &EN_DEV},
    {"nvme_path", T_PATHS, F_NULL, OO(nvme_path), .sdef = ""},
    {"buffer_count", T_INT, 0, OO(buffer_count), .idef = 4},
    {"pin_memory", T_BOOL, 0, OO(pin_memory), .def = 1},
    {"pipeline_read", T_BOOL, 0, OO(pipeline_read), .def = 0},
    {"pipeline_write", T_BOOL, 0, OO(pipeline_write), .def = 0},
    {"fast_init", T_BOOL, 0, OO(fast_init), .def = 0},
    {"ratio", T_NUM, F_UNIT, OO(ratio), .def = 1.0},
    NOEFF("super_offload", .flags2 = K_DEF, .def = 0),
    NOEFF("convert_grad_on_cpu"),
    NOEFF("cpuadam_cores_perc", .flags2 = K_DEF, .def = 0.8),
};
static const blockdef B_OFF_OPT = PBLOCK(KEYS_OFF_OPT);

static const keydef KEYS_ZERO[] = {
    {"stage", T_INT, F_I32 | F_RANGE | F_AUTO, CO(zero_stage), .idef = 0, .lo = 0, .hi = 3,
     .autok = A_STAGE},
    {"contiguous_gradients", T_BOOL, 0, CO(contiguous_gradients), .def = 1},
    {"overlap_comm", T_BOOL, F_DYNAMIC | F_NULL, CO(overlap_comm), .def = 0}, /* stage == 3 */
    {"reduce_scatter", T_BOOL, 0, CO(reduce_scatter), .def = 1},
    {"reduce_bucket_size", T_INT, F_AUTO, CO(reduce_bucket_size), .idef = 500000000,
     .autok = A_HH},
    {"allgather_bucket_size", T_INT, 0, CO(allgather_bucket_size), .idef = 500000000},
    {"allgather_partitions", T_BOOL, 0, CO(allgather_partitions), .def = 1},
    {"sub_group_size", T_INT, 0, CO(sub_group_size), .idef = 1000000000},
    {"stage3_prefetch_bucket_size", T_INT, F_AUTO, CO(stage3_prefetch_bucket_size),
     .idef = 50000000, .autok = A_HH09, .alias = "prefetch_bucket_size"},
    {"stage3_param_persistence_threshold", T_INT, F_AUTO, CO(stage3_param_persistence_threshold),
     .idef = 100000, .autok = A_10H, .alias = "param_persistence_threshold"},
    {"stage3_model_persistence_threshold", T_INT, 0, CO(stage3_model_persistence_threshold),
     .idef = INT64_MAX, .alias = "model_persistence_threshold"},
    {"stage3_max_live_parameters", T_INT, 0, CO(stage3_max_live_parameters), .idef = 1000000000,
     .alias = "max_live_parameters"},
    {"stage3_max_reuse_distance", T_INT, 0, CO(stage3_max_reuse_distance), .idef = 1000000000,
     .alias = "max_reuse_distance"},
    {"stage3_gather_16bit_weights_on_model_save", T_BOOL, 0,
     CO(stage3_gather_16bit_weights_on_model_save), .def = 0,
     .alias = "gather_16bit_weights_on_model_save",
     .alias2 = "stage3_gather_fp16_weights_on_model_save"},
    {"round_robin_gradients", T_BOOL, 0, CO(round_robin_gradients), .def = 0},
    {"elastic_checkpoint", T_BOOL, 0, CO(elastic_checkpoint), .def = 0},
    {"offload_optimizer", T_OBJ, F_NULL, CO(offload_optimizer), .sub = &B_OFF_OPT},
    {"offload_param", T_OBJ, F_NULL, CO(offload_param), .sub = &B_OFF_PARAM},
    {"cpu_offload", T_LEGACY, 0, CO(offload_optimizer), .note = "offload_optimizer"},
    {"cpu_offload_param", T_LEGACY, 0, CO(offload_param), .note = "offload_param"},
    {"cpu_offload_use_pin_memory", T_LEGACY, 0, (size_t)-1,
     .note = "offload_param.pin_memory or offload_optimizer.pin_memory"},
    NOEFF("load_from_fp32_weights", .flags2 = K_DEF, .def = 1),
    VACUOUS("ignore_unused_parameters", "every parameter of zinf's models takes part in the loss"),
    NOEFF("legacy_stage1", .flags2 = K_DEF, .def = 0),
    NOEFF("use_multi_rank_bucket_allreduce", .flags2 = K_DEF, .def = 1),
    NOEFF("zero_hpz_partition_size", .flags2 = K_DEF, .def = 1),
    NOEFF("zero_quantized_weights", .flags2 = K_DEF, .def = 0, .flags = F_ERR_TRUE),
    NOEFF("zero_quantized_nontrainable_weights", .flags2 = K_DEF, .def = 0, .flags = F_ERR_TRUE),
    NOEFF("zero_quantized_gradients", .flags2 = K_DEF, .def = 0, .flags = F_ERR_TRUE),
    NOEFF("zeropp_loco_param", .flags2 = K_DEFNULL),
    NOEFF("mics_shard_size", .flags2 = K_DEF, .def = -1),
    NOEFF("mics_hierarchical_params_gather", .flags2 = K_DEF, .def = 0),
    NOEFF("memory_efficient_linear", .flags2 = K_DEF, .def = 1),
    NOEFF("pipeline_loading_checkpoint", .flags2 = K_DEF, .def = 0),
    NOEFF("override_module_apply", .flags2 = K_DEF, .def = 1),
    NOEFF("log_trace_cache_warnings", .flags2 = K_DEF, .def = 0),
    NOEFF("enable_sanity_checks", .flags2 = K_DEF, .def = 0),
    NOEFF("stage3_module_granularity_threshold", .flags2 = K_DEF, .def = 0, .alias = "module_granularity_threshold"),
    NOEFF("stage3_use_all_reduce_for_fetch_params", .flags2 = K_DEF, .def = 0, .alias = "use_all_reduce_for_fetch_params"),
    NOEFF("stage3_allgather_sequential", .flags2 = K_DEF, .def = 0, .alias = "allgather_sequential"),
    NOEFF("stage3_partition_stream_chunk_size"),
    NOEFF("zenflow", .flags2 = K_DEFNULL, .flags = F_ERR_SET, .note = "ZenFlow applies stale, selective updates"),
    NOEFF("leaf_module"),
    NOEFF("save_muon_momentum_buffer_in_memory", .flags2 = K_DEF, .def = 0),
};

static const keydef KEYS_AIO[] = {
    {"block_size", T_INT, F_POS, CO(aio_block_size), .idef = 1048576},
    {"queue_depth", T_INT, F_POS, CO(aio_queue_depth), .idef = 8},
    {"intra_op_parallelism", T_INT, F_POS, CO(aio_intra_op_parallelism), .idef = 1,
     .alias = "thread_count"},
    {"single_submit", T_BOOL, 0, CO(aio_single_submit), .def = 0},
    {"overlap_events", T_BOOL, 0, CO(aio_overlap_events), .def = 1},
    {"use_gds", T_BOOL, 0, CO(aio_use_gds), .def = 0},
    NOEFF("io_backend"),
};

static const keydef KEYS_AC[] = {
    {"partition_activations", T_BOOL, 0, CO(ac_partition_activations), .def = 0},
    {"contiguous_memory_optimization", T_BOOL, 0, CO(ac_contiguous_memory_optimization),
     .def = 0},
    {"cpu_checkpointing", T_BOOL, 0, CO(ac_cpu_checkpointing), .def = 0},
    {"number_checkpoints", T_INT, F_NULL, CO(ac_number_checkpoints), .idef = -1},
    {"synchronize_checkpoint_boundary", T_BOOL, 0, CO(ac_synchronize_checkpoint_boundary),
     .def = 0},
    {"profile", T_BOOL, 0, CO(ac_profile), .def = 0},
    /* zinf: how many blocks to recompute, or "auto": decided from the device memory at run time */
    {"zinf_recompute_blocks", T_INT, F_AUTO | F_NULL, CO(zinf_recompute_blocks), .idef = -1, .autok = A_RUNTIME},
};

static const keydef KEYS_CKPT[] = {
    /* zinf's checkpoint is one file that every rank writes together (ckpt.c): the ranks' tags
     * cannot disagree, and every checkpoint is "universal" (any world size and stage load it) */
    {"tag_validation", T_ENUM, 0, CO(ckpt_tag_validation), .sdef = "Warn", .en = &EN_TAGV},
    VACUOUS("load_universal", "every zinf checkpoint loads at any world size and ZeRO stage"),
    NOEFF("use_node_local_storage", .flags2 = K_DEF, .def = 0,
          .note = "zinf writes one shared file through MPI-IO into --out"),
    NOEFF("parallel_write"),
    NOEFF("writer"),
};

static const keydef KEYS_DTYPES[] = {
    {"grad_accum_dtype", T_ENUM, F_NULL, CO(grad_accum_dtype), .sdef = "", .en = &EN_DTYPE},
    {"param_dtype", T_ENUM, F_NULL, CO(param_dtype), .sdef = "", .en = &EN_DTYPE},
    {"buffer_dtype", T_ENUM, F_NULL, CO(buffer_dtype), .sdef = "", .en = &EN_DTYPE},
};
static const blockdef B_DTYPES = BLOCK(KEYS_DTYPES);

static const keydef KEYS_COMMS[] = {
    {"enabled", T_BOOL, 0, CO(comms_logger_enabled), .def = 0},
    {"verbose", T_BOOL, 0, CO(comms_logger_verbose), .def = 0},
    {"prof_all", T_BOOL, 0, CO(comms_logger_prof_all), .def = 1},
    {"debug", T_BOOL, 0, CO(comms_logger_debug), .def = 0},
    NOEFF("prof_ops"),
};

static const keydef KEYS_FLOPS[] = {
    {"enabled", T_BOOL, 0, CO(flops_profiler_enabled), .def = 0},
    {"profile_step", T_INT, 0, CO(flops_profiler_profile_step), .idef = 1},
    {"module_depth", T_INT, F_SIGNED, CO(flops_profiler_module_depth), .idef = -1},
    {"top_modules", T_INT, 0, CO(flops_profiler_top_modules), .idef = 1},
    {"detailed", T_BOOL, 0, CO(flops_profiler_detailed), .def = 1},
    {"output_file", T_STR, F_NULL, CO(flops_profiler_output_file), .sdef = ""},
    NOEFF("recompute_fwd_factor"),
};

/* DeepSpeed's monitor/config.py: TensorBoardConfig and CSVConfig */
static const keydef KEYS_TB[] = {
    {"enabled", T_BOOL, 0, CO(tensorboard_enabled), .def = 0},
    {"output_path", T_STR, F_NULL, CO(tensorboard_output_path), .sdef = ""},
    {"job_name", T_STR, 0, CO(tensorboard_job_name), .sdef = "DeepSpeedJobName"},
};
static const keydef KEYS_CSV[] = {
    {"enabled", T_BOOL, 0, CO(csv_monitor_enabled), .def = 0},
    {"output_path", T_STR, F_NULL, CO(csv_monitor_output_path), .sdef = ""},
    {"job_name", T_STR, 0, CO(csv_monitor_job_name), .sdef = "DeepSpeedJobName"},
};

static const blockdef B_FP16 = PBLOCK(KEYS_FP16), B_BF16 = PBLOCK(KEYS_BF16),
                      B_OPT = BLOCK(KEYS_OPT), B_SCHED = BLOCK(KEYS_SCHED),
                      B_ZERO = PBLOCK(KEYS_ZERO), B_AIO = BLOCK(KEYS_AIO), B_AC = BLOCK(KEYS_AC),
                      B_CKPT = BLOCK(KEYS_CKPT), B_COMMS = PBLOCK(KEYS_COMMS),
                      B_FLOPS = BLOCK(KEYS_FLOPS), B_TB = PBLOCK(KEYS_TB), B_CSV = PBLOCK(KEYS_CSV);

static const keydef KEYS_TOP[] = {
    /* batch: 0 = not given; resolve() applies the batch rule */
    {"train_batch_size", T_INT, F_AUTO | F_POS | F_NULL_ABSENT, CO(train_batch_size), .idef = 0,
     .autok = A_DERIVE},
    {"train_micro_batch_size_per_gpu", T_INT, F_AUTO | F_POS | F_FILL | F_NULL_ABSENT,
     CO(train_micro_batch_size_per_gpu), .idef = 0, .autok = A_FLAG, .flag = FL_MICRO},
    {"gradient_accumulation_steps", T_INT, F_AUTO | F_POS | F_FILL | F_NULL_ABSENT,
     CO(gradient_accumulation_steps), .idef = 0, .autok = A_FLAG, .flag = FL_GAS},
    {"gradient_clipping", T_NUM, F_AUTO, CO(gradient_clipping), .def = 1.0, .autok = A_FLAG,
     .flag = FL_CLIP},
    {"steps_per_print", T_INT, F_POS | F_NULL, CO(steps_per_print), .idef = -1},
    {"wall_clock_breakdown", T_BOOL, F_DYNAMIC, CO(wall_clock_breakdown), .def = 0},
    {"prescale_gradients", T_BOOL, 0, CO(prescale_gradients), .def = 0},
    {"gradient_predivide_factor", T_NUM, F_POS, CO(gradient_predivide_factor), .def = 1.0},
    {"sparse_gradients", T_BOOL, 0, CO(sparse_gradients), .def = 0},
    {"fp16", T_OBJ, 0, 0, .sub = &B_FP16},
    /* precision_config.py get_bfloat16_config: a null "bf16" is left out and "bfloat16" read */
    {"bf16", T_OBJ, F_NULL_ABSENT, 0, .sub = &B_BF16, .alias = "bfloat16"},
    {"optimizer", T_OBJ, F_PRESENT | F_ABSENT_AUTO, 0, .sub = &B_OPT, .off2 = CO(has_optimizer)},
    {"scheduler", T_OBJ, 0, 0, .sub = &B_SCHED},
    {"zero_optimization", T_OBJ, 0, 0, .sub = &B_ZERO},
    {"aio", T_OBJ, F_NULL, 0, .sub = &B_AIO},
    {"activation_checkpointing", T_OBJ, F_PRESENT, 0, .sub = &B_AC,
     .off2 = CO(activation_checkpointing)},
    {"checkpoint", T_OBJ, 0, 0, .sub = &B_CKPT},
    {"comms_logger", T_OBJ, 0, 0, .sub = &B_COMMS},
    {"flops_profiler", T_OBJ, 0, 0, .sub = &B_FLOPS},
    NOEFF("amp", .flags = F_ERR_ENABLED, .note = "use fp16 or bf16"),
    NOEFF("torch_autocast", .flags = F_ERR_ENABLED, .note = "use fp16 or bf16"),
    NOEFF("elasticity", .flags = F_ERR_ENABLED),
    NOEFF("progressive_layer_drop", .flags = F_ERR_ENABLED),
    NOEFF("compression", .note = "it acts only on modules a script passed to init_compression"),
    /* zinf's own (DeepSpeed ignores unknown top-level keys, so a config that has it still runs
     * there): with offload_optimizer.device nvme, keep units' optimizer states in host memory up
     * to this many bytes per rank, whole units in order, and put only the rest on NVMe */
    {"zinf_optimizer_host_bytes", T_INT, 0, CO(zinf_optimizer_host_bytes), .idef = 0},
    /* zinf's own: with gradient_clipping 0 and no step that can be skipped, the host optimizer
     * step of each unit starts during the backward pass, once its gradient is final */
    {"zinf_overlap_host_step", T_BOOL, 0, CO(zinf_overlap_host_step), .def = 1},
    VACUOUS("zero_allow_untested_optimizer", "zinf runs only its own Adam and AdamW"),
    VACUOUS("zero_force_ds_cpu_optimizer", "zinf runs only its own Adam and AdamW"),
    NOEFF("data_efficiency", .flags = F_ERR_ENABLED, .note = "it changes which samples are seen"),
    NOEFF("curriculum_learning", .flags = F_ERR_ENABLED,
          .note = "it changes the sequence lengths trained on"),
    {"tensorboard", T_OBJ, 0, 0, .sub = &B_TB},
    {"csv_monitor", T_OBJ, 0, 0, .sub = &B_CSV},
    NOEFF("wandb", .note = "zinf sends nothing off the machine: use the tensorboard block, or metrics.jsonl"),
    NOEFF("comet", .note = "zinf sends nothing off the machine: use the tensorboard block, or metrics.jsonl"),
    NOEFF("pipeline"),
    NOEFF("sparse_attention"),
    {"communication_data_type", T_ENUM, F_NULL, CO(communication_data_type), .sdef = "",
     .en = &EN_COMMDT},
    NOEFF("seq_parallel_communication_data_type"),
    NOEFF("dump_state", .flags2 = K_DEF, .def = 0),
    NOEFF("memory_breakdown", .flags2 = K_DEF, .def = 0),
    NOEFF("disable_allgather", .flags2 = K_DEF, .def = 0),
    NOEFF("vocabulary_size"),
    NOEFF("eigenvalue"),
    NOEFF("quantize_training", .flags = F_ERR_ENABLED),
    NOEFF("autotuning"),
    NOEFF("nebula"),
    {"data_types", T_OBJ, 0, 0, .sub = &B_DTYPES},
    NOEFF("dataloader_drop_last", .flags2 = K_DEF, .def = 0),
    NOEFF("graph_harvesting", .flags2 = K_DEF, .def = 0),
    NOEFF("hybrid_engine"),
    NOEFF("weight_quantization"),
    NOEFF("compile"),
    NOEFF("timers"),
    NOEFF("tensor_parallel", .flags = F_ERR_SUB, .errkey = "autotp_size",
          .note = "zinf has no tensor parallelism"),
    /* true (DeepSpeed's default) is zinf's accumulation; false makes every engine step() an
     * optimizer update (engine.py is_gradient_accumulation_boundary) */
    NOEFF("managed_gradient_accumulation", .flags2 = K_DEF, .def = 1, .flags = F_ERR_SET,
          .note = "false makes every micro-batch an optimizer step; zinf accumulates "
                  "gradient_accumulation_steps micro-batches per step"),
    /* "mean" (the default) is what zinf does; "sum" is refused in resolve() */
    {"gradient_allreduce_op", T_ENUM, 0, CO(gradient_allreduce_op), .sdef = "mean", .en = &EN_ALLRED},
    NOEFF("use_data_before_expert_parallelism"),
    NOEFF("log_level", .flags2 = K_DEFNULL),
    NOEFF("datastates_ckpt", .flags2 = K_DEF, .def = 0,
          .note = "zinf writes its own checkpoint (zinf-checkpoint(5))"),
    NOEFF("expert_parallel", .note = "zinf's models have no mixture-of-experts layers to replace"),
    NOEFF("sequence_parallel_size", .flags2 = K_DEF, .def = 1, .flags = F_ERR_SUB, .note = "zinf has no sequence parallelism"),
};
static const blockdef B_TOP = BLOCK(KEYS_TOP);

/* Misnamed keys that edit distance would not lead back to the key that was meant. */
static const struct { const char *path, *meant; } HINTS[] = {
    {"zero_optimization.offload_gradients", "offload_optimizer"},
    {"zero_optimization.offload_grads", "offload_optimizer"},
    {"zero_optimization.offload_optimizer_states", "offload_optimizer"},
    {"zero_optimization.offload_parameters", "offload_param"},
    {"max_grad_norm", "gradient_clipping"},
    {"micro_batch_size", "train_micro_batch_size_per_gpu"},
    {"optimizer.params.learning_rate", "lr"},
    {"optimizer.params.beta1", "betas"},
    {"optimizer.params.beta2", "betas"},
    {"optimizer.params.epsilon", "eps"},
};

/* ============================================================================ parse context */

typedef struct ctx {
    zinf_config *cfg;
    const zinf_flags *fl;
    const char *src;
    FILE *warn;
} ctx;

static int cerr(const ctx *c, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Messages are one line of bounded length whatever the file holds: control characters in
 * keys, values or jansson's text are escaped, and a long message is cut with "...". */
static void one_line(char *dst, size_t cap, const char *src)
{
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)src; *p && n + 5 < cap; p++) {
        if (*p == '\n') { dst[n++] = '\\'; dst[n++] = 'n'; }
        else if (*p < 0x20 || *p == 0x7f) n += (size_t)snprintf(dst + n, cap - n, "\\x%02x", *p);
        else dst[n++] = (char)*p;
    }
    dst[n] = 0;
    if (n + 5 >= cap && cap > 4) memcpy(dst + cap - 4, "...", 4);
}

static int cerr(const ctx *c, const char *path, const char *fmt, ...)
{
    char msg[1536], clean[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    one_line(clean, sizeof clean, msg);
    if (path && *path) {
        char p[300];
        one_line(p, sizeof p, path);
        return zinf_err("%s: %s: %s", c->src, p, clean);
    }
    return zinf_err("%s: %s", c->src, clean);
}

static void cwarn(ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void cwarn(ctx *c, const char *fmt, ...)
{
    c->cfg->n_warnings++;
    if (!c->warn) return;
    char msg[1536], clean[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    one_line(clean, sizeof clean, msg);
    fprintf(c->warn, "zinf: warning: %s: %s\n", c->src, clean);
}

static void join(char *out, size_t cap, const char *prefix, const char *name)
{
    if (prefix && *prefix) snprintf(out, cap, "%s.%s", prefix, name);
    else snprintf(out, cap, "%s", name);
}

/* a JSON value as it was written, for messages */
static const char *shown(const json_t *v, char *buf, size_t cap)
{
    char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(17));
    snprintf(buf, cap, "%s", s ? s : "?");
    if (s && strlen(s) >= cap && cap > 4) memcpy(buf + cap - 4, "...", 4);
    free(s);
    return buf;
}

static void *slot_of(const ctx *c, const keydef *k, size_t base)
{
    return k->off == (size_t)-1 ? NULL : (char *)c->cfg + base + k->off;
}

/* write a scalar (given as a double) into the field of k; i selects betas[i] */
static void slot_set(void *slot, const keydef *k, double v, int i)
{
    switch (k->type) {
    case T_BOOL: *(bool *)slot = v != 0; break;
    case T_INT:
        if (k->flags & F_I32) *(int *)slot = (int)v;
        else *(int64_t *)slot = (int64_t)v;
        break;
    case T_BETAS: ((double *)slot)[i] = v; break;
    default: *(double *)slot = v; break;
    }
}

static double slot_get(const void *slot, const keydef *k, int i)
{
    switch (k->type) {
    case T_BOOL: return *(const bool *)slot ? 1 : 0;
    case T_INT: return k->flags & F_I32 ? *(const int *)slot : (double)*(const int64_t *)slot;
    case T_ENUM: return *(const int *)slot;
    case T_BETAS: return ((const double *)slot)[i];
    default: return *(const double *)slot;
    }
}

static int enum_index(const enumdef *e, const char *s)
{
    for (int i = 0; i < e->n; i++)
        if (*e->names[i] && (e->icase ? strcasecmp(s, e->names[i]) : strcmp(s, e->names[i])) == 0)
            return i;
    return -1;
}

static void set_default(const ctx *c, const keydef *k, size_t base)
{
    void *slot = slot_of(c, k, base);
    if (!slot) return;
    switch (k->type) {
    case T_INT:
        if (k->flags & F_I32) *(int *)slot = (int)k->idef;
        else *(int64_t *)slot = k->idef;
        break;
    case T_STR: snprintf(slot, 1024, "%s", k->sdef ? k->sdef : ""); break; /* T_STR slots are 1024 bytes */
    case T_PATHS: ((char *)slot)[0] = 0; break;
    case T_ENUM: *(int *)slot = k->sdef && *k->sdef ? enum_index(k->en, k->sdef) : 0; break;
    case T_BETAS: ((double *)slot)[0] = k->def, ((double *)slot)[1] = k->def2; break;
    default: slot_set(slot, k, k->def, 0); break;
    }
}

static void fmt_num(char *buf, size_t cap, const keydef *k, double v)
{
    if (k->type == T_BOOL) snprintf(buf, cap, "%s", v != 0 ? "true" : "false");
    else if (k->type == T_INT) snprintf(buf, cap, "%lld", (long long)v);
    else snprintf(buf, cap, "%.15g", v);
}

static bool same(double a, double b)
{
    return a == b || fabs(a - b) <= 1e-12 * fmax(fabs(a), fabs(b));
}

/* A value written in the config must agree with its flag when the flag was given. */
static int check_flag(const ctx *c, const keydef *k, const void *slot, const char *path)
{
    int ncomp = k->type == T_BETAS ? 2 : 1;
    for (int i = 0; i < ncomp; i++) {
        int fl = k->flag + i;
        if (!flag_given(c->fl, fl)) continue;
        double want = flag_val(c->fl, fl), have = slot_get(slot, k, i);
        if (same(want, have)) continue;
        char a[64], b[64], p[340], o[64];
        fmt_num(a, sizeof a, k, have);
        fmt_num(b, sizeof b, k, want);
        if (ncomp == 2) snprintf(p, sizeof p, "%s[%d]", path, i);
        else snprintf(p, sizeof p, "%s", path);
        if ((fl == FL_BF16 || fl == FL_FP16) && c->fl->torch_dtype_set)
            return cerr(c, NULL, "%s is %s in the config but --torch_dtype %s needs it %s", p, a,
                        c->fl->torch_dtype, b);
        return cerr(c, NULL, "%s is %s in the config but %s is %s", p, a, flag_opt(c->fl, fl, o, sizeof o), b);
    }
    return 0;
}

/* "auto" (or an absent key of an absent optimizer block): fill as the HF integration does */
static int fill_auto(const ctx *c, const keydef *k, void *slot, const char *path)
{
    int64_t h = c->fl->hidden_size;
    switch (k->autok) {
    case A_FLAG:
        slot_set(slot, k, flag_val(c->fl, k->flag), 0);
        if (k->type == T_BETAS) slot_set(slot, k, flag_val(c->fl, k->flag + 1), 1);
        return 0;
    case A_DERIVE: slot_set(slot, k, 0, 0); return 0; /* the batch rule fills it */
    case A_ZERO: slot_set(slot, k, 0, 0); return 0;
    case A_RUNTIME: slot_set(slot, k, ZINF_RECOMPUTE_AUTO, 0); return 0;
    case A_STEPS: slot_set(slot, k, -1, 0); return 0; /* zinf_config_finalize_steps */
    case A_WARMUP: {
        bool steps = c->fl->warmup_steps_set && c->fl->warmup_steps > 0;
        slot_set(slot, k, steps ? (double)c->fl->warmup_steps : -1, 0);
        return 0;
    }
    case A_STAGE:
        return cerr(c, path, "\"auto\" has no single meaning here: accelerate fills it from its "
                             "zero_stage (default 2) and DeepSpeed alone uses 0; write the stage");
    case A_HH: case A_HH09: case A_10H:
        /* HF fills the two stage-3 sizes only at stage 3 (trainer_config_finalize's is_zero3());
         * below it DeepSpeedConfigModel drops the "auto" and zero/config.py's default applies.
         * "stage" comes first in KEYS_ZERO, so it is read by now */
        if (k->autok != A_HH && c->cfg->zero_stage != 3) {
            slot_set(slot, k, (double)k->idef, 0);
            return 0;
        }
        if (h <= 0)
            return cerr(c, path, "\"auto\" needs the model's hidden size, which is not known here");
        slot_set(slot, k, k->autok == A_HH ? (double)(h * h)
                          : k->autok == A_HH09 ? (double)(int64_t)(0.9 * (double)h * (double)h)
                                               : (double)(10 * h), 0);
        return 0;
    default: return cerr(c, path, "\"auto\" is not accepted here");
    }
}

bool zinf_loss_scale_ok(double s) { return s >= FLT_MIN && s <= FLT_MAX; }

static const char *expected(const keydef *k, char *buf, size_t cap)
{
    switch (k->type) {
    case T_BOOL: return "true or false";
    case T_INT:
        if (k->flags & F_RANGE)
            snprintf(buf, cap, "an integer %lld-%lld", (long long)k->lo, (long long)k->hi);
        else
            snprintf(buf, cap, "%s integer", k->flags & F_POS      ? "a positive"
                                             : k->flags & F_SIGNED ? "an"
                                                                   : "a non-negative");
        return buf;
    case T_NUM:
        if (k->flags & F_SCALE)
            return k->flags & F_WHOLE ? "0 or an integer from 1 to 3.4e38"
                   : k->flags & F_POS ? "a number from 1.18e-38 to 3.4e38 (a normal float)"
                                      : "0 or a number from 1.18e-38 to 3.4e38 (a normal float)";
        return k->flags & F_UNIT     ? "a number from 0 to 1"
               : k->flags & F_POS    ? "a positive number"
               : k->flags & F_SIGNED ? "a number"
                                     : "a non-negative number";
    case T_STR: return "a string";
    case T_PATHS: return "a directory, or an array of 1 to 16 directories";
    case T_ENUM: snprintf(buf, cap, "one of %s", k->en->list); return buf;
    case T_BETAS: return "an array of two numbers from 0 to 1";
    default: return "an object";
    }
}

/* The rule a number must meet to be the value of k (each component of betas), whichever way it
 * arrives: written in the config (parse_value) or given as the flag that fills the key or stands
 * for it (zinf_flags_check). Infinities and NaN meet no rule. */
static bool value_ok(const keydef *k, double d)
{
    if (!isfinite(d)) return false;
    switch (k->type) {
    case T_INT:
        if (d != floor(d)) return false;
        if ((k->flags & F_RANGE) && (d < (double)k->lo || d > (double)k->hi)) return false;
        if ((k->flags & F_POS) && !(d > 0)) return false;
        return (k->flags & (F_SIGNED | F_RANGE)) || d >= 0;
    case T_NUM:
        if ((k->flags & F_UNIT) && !(d >= 0 && d <= 1)) return false;
        if ((k->flags & F_WHOLE) && d != floor(d)) return false;
        if ((k->flags & F_SCALE) && d != 0 && !zinf_loss_scale_ok(d)) return false;
        if ((k->flags & F_POS) && !(d > 0)) return false;
        return (k->flags & F_SIGNED) || d >= 0;
    case T_BETAS: return d >= 0 && d < 1;
    default: return true;
    }
}

/* A string as Python's float() reads it: surrounding whitespace, a sign, digits with single
 * underscores between them, a decimal point, an exponent, inf/infinity/nan; no hexadecimal. */
static bool py_float(const char *s, double *out)
{
    char buf[128];
    size_t n = 0, len = strlen(s);
    while (len && strchr(" \t\n\r\f\v", s[len - 1])) len--;
    while (len && strchr(" \t\n\r\f\v", *s)) s++, len--;
    if (!len || len >= sizeof buf) return false;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '_') {
            if (!i || i + 1 == len || !isdigit((unsigned char)s[i - 1]) || !isdigit((unsigned char)s[i + 1]))
                return false;
            continue;
        }
        if (s[i] == 'x' || s[i] == 'X' || s[i] == '(') return false; /* strtod's 0x.. and nan(..) */
        buf[n++] = s[i];
    }
    buf[n] = 0;
    char *end;
    errno = 0;
    *out = strtod(buf, &end);
    return end == buf + n && end != buf;
}

/* Pydantic's lax bool (DeepSpeedConfigModel validates in lax mode): 0, 1, 0.0, 1.0 and, in any
 * case, the strings 0 off f false n no and 1 on t true y yes. 1 true, 0 false, -1 none of them. */
static int lax_bool(const json_t *v)
{
    static const char *const no[] = {"0", "off", "f", "false", "n", "no"},
                             *const yes[] = {"1", "on", "t", "true", "y", "yes"};
    if (json_is_boolean(v)) return json_is_true(v);
    if (json_is_number(v)) {
        double d = json_number_value(v);
        return d == 1 ? 1 : d == 0 ? 0 : -1;
    }
    if (!json_is_string(v)) return -1;
    for (int i = 0; i < 6; i++) {
        if (!strcasecmp(json_string_value(v), yes[i])) return 1;
        if (!strcasecmp(json_string_value(v), no[i])) return 0;
    }
    return -1;
}

/* Parse one present, non-"auto", non-null value into its field. */
static int parse_value(const ctx *c, const keydef *k, json_t *v, void *slot, const char *path)
{
    char got[128], exp[96];
    const char *bad = NULL;
    switch (k->type) {
    case T_BOOL:
        if (!json_is_boolean(v)) goto type_error;
        if ((k->flags & F_ERR_TRUE) && json_is_true(v))
            return cerr(c, path, "true is not supported by zinf");
        if (slot) *(bool *)slot = json_is_true(v);
        break;
    case T_INT: {
        if (!json_is_number(v)) goto type_error;
        double d = json_number_value(v);
        if (json_is_integer(v)) d = (double)json_integer_value(v);
        else if (!(d == floor(d) && d >= -9.2233720368547758e18 && d < 9.2233720368547758e18))
            goto type_error;
        int64_t x = json_is_integer(v) ? json_integer_value(v) : (int64_t)d;
        if (!value_ok(k, (double)x)) goto type_error;
        if (k->flags & F_I32) *(int *)slot = (int)x;
        else *(int64_t *)slot = x;
        break;
    }
    case T_NUM: {
        double d;
        if (json_is_string(v) && (k->flags & F_NUMSTR)) {
            if (!py_float(json_string_value(v), &d)) goto type_error;
        } else if (!json_is_number(v)) {
            goto type_error;
        } else {
            d = json_number_value(v);
        }
        if (!value_ok(k, d)) goto type_error;
        *(double *)slot = d;
        break;
    }
    case T_STR: {
        if (!json_is_string(v)) goto type_error;
        if (json_string_length(v) >= 1024) return cerr(c, path, "longer than 1023 bytes");
        memcpy(slot, json_string_value(v), json_string_length(v) + 1);
        break;
    }
    case T_PATHS: { /* DeepSpeed takes one directory; zinf stripes over several */
        size_t n = json_is_array(v) ? json_array_size(v) : 1, len = 0;
        if (!json_is_string(v) && !(json_is_array(v) && n >= 1 && n <= 16)) goto type_error;
        char *out = slot;
        for (size_t i = 0; i < n; i++) {
            json_t *e = json_is_array(v) ? json_array_get(v, i) : v;
            if (!json_is_string(e) || !json_string_length(e) || strchr(json_string_value(e), '\n'))
                goto type_error;
            size_t l = json_string_length(e);
            if (len + l + 1 >= 1024) return cerr(c, path, "longer than 1023 bytes");
            if (i) out[len++] = '\n';
            memcpy(out + len, json_string_value(e), l);
            len += l;
        }
        out[len] = 0;
        break;
    }
    case T_ENUM: {
        if (!json_is_string(v)) goto type_error;
        int i = enum_index(k->en, json_string_value(v));
        if (i < 0)
            return cerr(c, path, "\"%s\" is not supported (zinf has %s)", json_string_value(v),
                        k->en->list);
        *(int *)slot = i;
        break;
    }
    case T_BETAS:
        if (!json_is_array(v) || json_array_size(v) != 2) goto type_error;
        for (int i = 0; i < 2; i++) {
            json_t *e = json_array_get(v, (size_t)i);
            if (!json_is_number(e)) goto type_error;
            double d = json_number_value(e);
            if (!value_ok(k, d)) goto type_error;
            ((double *)slot)[i] = d;
        }
        break;
    default: break;
    }
    if (k->flag != FL_NONE) return check_flag(c, k, slot, path);
    return 0;
type_error:
    bad = shown(v, got, sizeof got);
    return cerr(c, path, "expected %s, got %s", expected(k, exp, sizeof exp), bad);
}

/* ---- nearest known key ---- */

static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (lb > 127) return (size_t)-1;
    size_t row[128];
    for (size_t j = 0; j <= lb; j++) row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

static const char *nearest(const blockdef *b, const char *path, const char *name, unsigned smask)
{
    for (size_t i = 0; i < sizeof HINTS / sizeof HINTS[0]; i++)
        if (strcmp(HINTS[i].path, path) == 0) return HINTS[i].meant;
    const char *best = NULL;
    size_t bd = (size_t)-1, len = strlen(name);
    for (size_t i = 0; i < b->n; i++) {
        const keydef *k = &b->keys[i];
        if (k->type == T_NOEFFECT || k->type == T_LEGACY || k->type == T_VACUOUS) continue;
        if (b->sched_params && smask && !(k->smask & smask)) continue;
        size_t d = edit_distance(name, k->name);
        if (d < bd) bd = d, best = k->name;
    }
    size_t limit = len / 2 > 2 ? len / 2 : 2;
    return bd <= limit ? best : NULL;
}

static const keydef *find_key(const blockdef *b, const char *name)
{
    for (size_t i = 0; i < b->n; i++)
        if (strcmp(b->keys[i].name, name) == 0 ||
            (b->keys[i].alias && strcmp(b->keys[i].alias, name) == 0) ||
            (b->keys[i].alias2 && strcmp(b->keys[i].alias2, name) == 0))
            return &b->keys[i];
    return NULL;
}

static bool is_auto(const json_t *v)
{
    return json_is_string(v) && strcmp(json_string_value(v), "auto") == 0;
}

/* A value that asks for nothing: null, false, 0 or an empty object. */
static bool is_off(const json_t *v)
{
    return json_is_null(v) || json_is_false(v) || (json_is_number(v) && json_number_value(v) == 0) ||
           (json_is_object(v) && json_object_size(v) == 0);
}

/* A DeepSpeed key zinf knows but does not implement. */
static int no_effect(ctx *c, const keydef *k, json_t *v, const char *path)
{
    if (k->flags & F_ERR_REFUSED) return cerr(c, path, "not accepted: %s", k->note);
    if ((k->flags2 & K_DEFNULL) && json_is_null(v)) return 0;
    if ((k->flags2 & K_DEF) && (json_is_boolean(v) || json_is_number(v))) {
        double x = json_is_boolean(v) ? (json_is_true(v) ? 1 : 0) : json_number_value(v);
        if (same(x, k->def)) return 0;
        /* a value other than the default of a key that changes the numerics */
        if (k->flags & F_ERR_SET)
            return cerr(c, path, "zinf does not implement this DeepSpeed feature and it changes the "
                                 "training numerics, so it cannot be ignored%s%s",
                        k->note ? "; " : "", k->note ? k->note : "");
    }
    bool on = (k->flags & F_ERR_TRUE) && json_is_true(v);
    if ((k->flags & F_ERR_ENABLED) && json_is_object(v) && json_is_true(json_object_get(v, "enabled")))
        on = true;
    if ((k->flags & F_ERR_SET) && !is_off(v)) on = true;
    if (k->flags & F_ERR_SUB) {
        /* the value itself, or its member errkey: a count above 1, or true */
        const json_t *x = k->errkey ? (json_is_object(v) ? json_object_get(v, k->errkey) : NULL) : v;
        if (x && (json_is_true(x) || (json_is_number(x) && json_number_value(x) > 1))) on = true;
    }
    if (on && (k->flags & F_ERR_SUB) && k->errkey)
        return cerr(c, path, "%s above 1: zinf does not implement this DeepSpeed feature and it changes "
                             "the training numerics, so it cannot be ignored%s%s",
                    k->errkey, k->note ? "; " : "", k->note ? k->note : "");
    if (on)
        return cerr(c, path, "zinf does not implement this DeepSpeed feature and it changes the "
                             "training numerics, so it cannot be ignored%s%s",
                    k->note ? "; " : "", k->note ? k->note : "");
    cwarn(c, "%s is a DeepSpeed key zinf does not implement; it has no effect%s%s%s", path,
          k->note ? " (" : "", k->note ? k->note : "", k->note ? ")" : "");
    return 0;
}

/* DeepSpeed's deprecated offload switches (zero/config.py): "cpu_offload": true means
 * offload_optimizer {"device": "cpu"}, "cpu_offload_param": true means offload_param {"device":
 * "cpu"}, each with the block's other defaults; giving the new block too is DeepSpeed's assertion
 * error. "cpu_offload_use_pin_memory" sets nothing in DeepSpeed (set_new_param False). */
static int legacy(ctx *c, const keydef *k, json_t *obj, json_t *v, size_t base, const char *path)
{
    if (json_is_null(v)) return 0;
    if (!json_is_boolean(v)) {
        char got[128];
        return cerr(c, path, "expected true or false, got %s", shown(v, got, sizeof got));
    }
    if (k->off == (size_t)-1) {
        cwarn(c, "%s is deprecated and DeepSpeed ignores it too; pinning follows %s (default true)",
              path, k->note);
        return 0;
    }
    json_t *nv = json_object_get(obj, k->note);
    if (nv && !json_is_null(nv))
        return cerr(c, path, "given together with %s, which replaces it; DeepSpeed refuses both too",
                    k->note);
    if (!json_is_true(v)) {
        cwarn(c, "%s is deprecated (use %s); false asks for nothing", path, k->note);
        return 0;
    }
    ((zinf_offload_cfg *)((char *)c->cfg + base + k->off))->device = ZINF_DEV_CPU;
    cwarn(c, "%s is deprecated; as DeepSpeed does, it is read as %s.device \"cpu\"", path, k->note);
    return 0;
}

/* A key the config does not give: its default, or "auto" for an absent optimizer block, or the
 * flag for the batch keys; a required key is an error; a given flag that cannot reach its key is
 * a warning. */
static int absent(ctx *c, const keydef *k, void *slot, const char *path, bool block_present,
                  bool as_auto, unsigned stype)
{
    bool sched_on = stype > S_(ZINF_SCHED_NONE);
    if (as_auto && (k->flags & F_AUTO)) return fill_auto(c, k, slot, path);
    if ((k->flags & F_FILL) && flag_given(c->fl, k->flag)) {
        slot_set(slot, k, flag_val(c->fl, k->flag), 0);
        return 0;
    }
    if ((block_present && (k->flags & F_REQ)) || (k->sreq & stype))
        return cerr(c, path, "missing%s%s%s%s", sched_on ? ", and required by " : "",
                    sched_on ? SCHED_NAMES[c->cfg->sched.type] : "", k->note ? ": " : "", k->note ? k->note : "");
    if (as_auto || k->flag == FL_NONE || (k->flags & F_DYNAMIC) || stype == S_(ZINF_SCHED_NONE))
        return 0;
    int fl = flag_given(c->fl, k->flag) ? k->flag
             : k->type == T_BETAS && flag_given(c->fl, k->flag + 1) ? k->flag + 1
                                                                     : FL_NONE;
    if (fl == FL_NONE) return 0;
    char d[64], o[64];
    if (k->type == T_BETAS) snprintf(d, sizeof d, "[%g, %g]", k->def, k->def2);
    else fmt_num(d, sizeof d, k, k->type == T_INT ? (double)k->idef : k->def);
    cwarn(c, "%s has no effect: %s is not in the config, so DeepSpeed's default %s applies "
             "(write \"auto\" there to take the flag)",
          flag_opt(c->fl, fl, o, sizeof o), path, d);
    return 0;
}

/* Walk one JSON object (NULL = absent) against its key table: defaults, values, "auto",
 * flags, then warnings for every member the table does not know. */
static int walk(ctx *c, const blockdef *b, json_t *obj, size_t base, const char *prefix,
                bool as_auto)
{
    char path[320];
    if (obj && !json_is_object(obj)) {
        char got[128];
        return cerr(c, prefix, "expected an object, got %s", shown(obj, got, sizeof got));
    }
    unsigned stype = b->sched_params ? S_(c->cfg->sched.type) : 0;

    for (size_t i = 0; i < b->n; i++) {
        const keydef *k = &b->keys[i];
        join(path, sizeof path, prefix, k->name);
        json_t *v = obj ? json_object_get(obj, k->name) : NULL;
        if (v && json_is_null(v) && k->type == T_OBJ && (k->flags & F_NULL_ABSENT)) v = NULL; /* its alias may follow */
        for (int ai = 0; obj && ai < 2; ai++) {
            const char *an = ai ? k->alias2 : k->alias;
            json_t *a = an ? json_object_get(obj, an) : NULL;
            if (a && v) {
                char ap[320];
                join(ap, sizeof ap, prefix, an);
                return cerr(c, path, "given twice, also as %s", ap);
            }
            if (a) v = a;
        }
        /* DeepSpeedConfigModel drops an "auto" before validation: the key is as if absent */
        bool dropped = v && b->pydantic && is_auto(v) && !(k->flags & F_AUTO);
        /* and validates a bool field in pydantic's lax mode: 0/1 and "yes"/"off"... are booleans */
        bool is_bool = k->type == T_BOOL || k->type == T_VACUOUS || k->type == T_LEGACY ||
                       (k->type == T_NOEFFECT && (k->flags & F_ERR_TRUE));
        if (v && !dropped && b->pydantic && is_bool && !json_is_boolean(v) && !is_auto(v) && lax_bool(v) >= 0)
            v = json_boolean(lax_bool(v)); /* jansson's true and false are static: nothing to free */
        if (k->type == T_NOEFFECT) {
            if (v && !dropped) ZINF_TRY(no_effect(c, k, v, path));
            continue;
        }
        if (k->type == T_LEGACY) {
            if (v && !dropped) ZINF_TRY(legacy(c, k, obj, v, base, path));
            continue;
        }
        if (k->type == T_VACUOUS) {
            if (v && !dropped && !json_is_boolean(v) && !json_is_null(v)) {
                char got[128];
                return cerr(c, path, "expected true or false, got %s", shown(v, got, sizeof got));
            }
            continue;
        }
        if (dropped || (v && json_is_null(v) && (k->flags & F_NULL_ABSENT) && k->type != T_OBJ)) v = NULL;
        if (v && json_is_null(v) && (k->flags & F_NULL) && k->type == T_OBJ) v = NULL;

        if (k->type == T_OBJ) {
            bool present = v != NULL;
            if (!present && obj && (k->flags & F_REQ)) return cerr(c, path, "missing: %s", k->note);
            if (k->flags & F_PRESENT) *(bool *)((char *)c->cfg + k->off2) = present;
            bool child_auto = !present && (as_auto || (k->flags & F_ABSENT_AUTO));
            ZINF_TRY(walk(c, k->sub, v, base + k->off, path, child_auto));
            continue;
        }

        void *slot = slot_of(c, k, base);
        set_default(c, k, base);
        if (b->sched_params && stype > 1 && !(k->smask & stype)) {
            /* engine.py _scheduler_from_config passes the params as keywords: TypeError there */
            if (v)
                return cerr(c, path, "not a parameter of %s (DeepSpeed's %s() refuses it with a TypeError)",
                            SCHED_NAMES[c->cfg->sched.type], SCHED_NAMES[c->cfg->sched.type]);
            continue;
        }
        if (!v) {
            ZINF_TRY(absent(c, k, slot, path, obj != NULL, as_auto, stype));
            continue;
        }
        if ((k->flags & F_ENUM_DEFAULT) && !(json_is_string(v) && enum_index(k->en, json_string_value(v)) >= 0)) {
            char got[128];
            cwarn(c, "%s: %s is not one of %s; as DeepSpeed does, \"%s\" is used", path, shown(v, got, sizeof got),
                  k->en->list, k->sdef);
            continue; /* the default, set above */
        }
        if (json_is_string(v) && strcmp(json_string_value(v), "auto") == 0) {
            if (!(k->flags & F_AUTO))
                return cerr(c, path, "\"auto\" is not accepted for this key (zinf fills \"auto\" "
                                     "only where the HF integration does)");
            ZINF_TRY(fill_auto(c, k, slot, path));
            continue;
        }
        if (json_is_null(v) && (k->flags & F_NULL)) {
            if (k->type == T_INT) slot_set(slot, k, -1, 0);
            else if (k->type == T_STR || k->type == T_PATHS) ((char *)slot)[0] = 0;
            continue;
        }
        ZINF_TRY(parse_value(c, k, v, slot, path));
    }

    if (!obj) return 0;
    const char *name;
    json_t *v;
    json_object_foreach(obj, name, v) {
        if (find_key(b, name)) continue;
        join(path, sizeof path, prefix, name);
        const char *near = nearest(b, path, name, stype > 1 ? stype : 0);
        char sugg[400] = "";
        if (near) {
            char np[320];
            join(np, sizeof np, prefix, near);
            snprintf(sugg, sizeof sugg, " (did you mean %s?)", np);
        }
        if (b->sched_params && stype > 1) /* a keyword the constructor does not take, as above */
            return cerr(c, path, "not a parameter of %s (DeepSpeed's %s() refuses it with a TypeError)%s",
                        SCHED_NAMES[c->cfg->sched.type], SCHED_NAMES[c->cfg->sched.type], sugg);
        cwarn(c, "unknown key %s%s", path, sugg);
    }
    return 0;
}

/* ============================================================================ resolution */

/* a x b x c in int64, false on overflow */
static bool mul3(int64_t a, int64_t b, int64_t c, int64_t *out)
{
    int64_t t;
    return !__builtin_mul_overflow(a, b, &t) && !__builtin_mul_overflow(t, c, out);
}

static int batch_rule(ctx *c)
{
    zinf_config *g = c->cfg;
    int64_t W = g->world_size, tb = g->train_batch_size, mb = g->train_micro_batch_size_per_gpu,
            ga = g->gradient_accumulation_steps, prod;
    /* every product below is bounded by one of these */
    if (!mul3(mb ? mb : 1, ga ? ga : 1, W, &prod))
        return cerr(c, NULL,
                    "batch sizes are too large: train_micro_batch_size_per_gpu %lld x "
                    "gradient_accumulation_steps %lld x world size %lld overflows 64 bits",
                    (long long)mb, (long long)ga, (long long)W);
    if (tb && mb && ga) {
        if (tb != mb * ga * W)
            return cerr(c, NULL,
                        "batch sizes do not agree: train_batch_size %lld != "
                        "train_micro_batch_size_per_gpu %lld x gradient_accumulation_steps %lld x "
                        "world size %lld (= %lld)",
                        (long long)tb, (long long)mb, (long long)ga, (long long)W,
                        (long long)(mb * ga * W));
    } else if (tb && mb) {
        if (tb % (mb * W) != 0)
            return cerr(c, NULL,
                        "train_batch_size %lld is not divisible by train_micro_batch_size_per_gpu "
                        "%lld x world size %lld",
                        (long long)tb, (long long)mb, (long long)W);
        ga = tb / (mb * W);
    } else if (tb && ga) {
        if (tb % (ga * W) != 0)
            return cerr(c, NULL,
                        "train_batch_size %lld is not divisible by gradient_accumulation_steps "
                        "%lld x world size %lld",
                        (long long)tb, (long long)ga, (long long)W);
        mb = tb / (ga * W);
    } else if (mb && ga) {
        tb = mb * ga * W;
    } else if (tb) {
        if (tb % W != 0)
            return cerr(c, NULL, "train_batch_size %lld is not divisible by world size %lld",
                        (long long)tb, (long long)W);
        ga = 1, mb = tb / W;
    } else if (mb) {
        ga = 1, tb = mb * W;
    } else {
        char o[64];
        return cerr(c, NULL,
                    "neither train_batch_size nor train_micro_batch_size_per_gpu is set: give one "
                    "in the config, or %s", flag_opt(c->fl, FL_MICRO, o, sizeof o));
    }
    g->train_batch_size = tb;
    g->train_micro_batch_size_per_gpu = mb;
    g->gradient_accumulation_steps = ga;
    return 0;
}

static int check_offload(ctx *c, zinf_offload_cfg *o, const char *name, bool is_param)
{
    int stage = c->cfg->zero_stage;
    char path[96];
    snprintf(path, sizeof path, "zero_optimization.%s", name);
    /* zero/config.py offload_ratio_check asserts stage 3 for a ratio below 1, whatever the device */
    if (!is_param && o->ratio < 1.0 && stage < 3)
        return cerr(c, path, "partial offload (ratio %g) needs stage 3 (stage is %d), as DeepSpeed asserts",
                    o->ratio, stage);
    if (!is_param && o->ratio < 1.0 && o->device == ZINF_DEV_NONE)
        cwarn(c, "%s.ratio %g has no effect: the device is \"none\", so no optimizer state is offloaded "
                 "(DeepSpeed's stage 3 reads the ratio only with an offload device)", path, o->ratio);
    if (o->device == ZINF_DEV_NONE) return 0;
    /* engine.py _configure_zero_optimizer hands offload_param to the stage-3 optimizer only: below
     * stage 3 DeepSpeed accepts the block and keeps the parameters on the device */
    if (is_param && stage < 3) {
        cwarn(c, "%s.device \"%s\" has no effect at stage %d: DeepSpeed offloads parameters only at stage 3 "
                 "and keeps them on the device below it, as zinf does", path, DEV_NAMES[o->device], stage);
        o->device = ZINF_DEV_NONE;
        return 0;
    }
    if (!is_param && stage == 0)
        return cerr(c, path, "optimizer offload needs ZeRO stage 1, 2 or 3 (stage is 0)");
    if (!is_param && o->device == ZINF_DEV_NVME && stage < 3)
        return cerr(c, path, "NVMe optimizer offload needs stage 3 (stage is %d)", stage);
    if (o->device == ZINF_DEV_NVME && !o->nvme_path[0])
        return cerr(c, path, "device \"nvme\" needs nvme_path");
    return 0;
}

static int resolve(ctx *c, json_t *root)
{
    zinf_config *g = c->cfg;
    const zinf_flags *f = c->fl;

    /* precision */
    if (g->fp16 && g->bf16)
        return cerr(c, NULL, "fp16.enabled and bf16.enabled are both true; choose one");
    /* precision_config.py _validate_dynamic_loss_scale_params: checked only when dynamic scaling
     * runs (fp16 on, loss_scale 0); a disabled block or a static scale carries them unchecked */
    if (g->fp16 && g->fp16_loss_scale == 0 && g->fp16_loss_scale_window <= 0)
        return cerr(c, "fp16.loss_scale_window", "must be above 0 with dynamic loss scaling (loss_scale 0), as in "
                    "DeepSpeed: the scale would never grow");
    if (g->fp16 && g->fp16_loss_scale == 0 && !(g->fp16_min_loss_scale > 0))
        return cerr(c, "fp16.min_loss_scale", "must be above 0 with dynamic loss scaling (loss_scale 0), as in "
                    "DeepSpeed: it is the floor the scale falls to");

    /* zero: overlap_comm defaults to (stage == 3), DeepSpeed's overlap_comm_valid */
    json_t *z = json_object_get(root, "zero_optimization");
    json_t *oc = json_is_object(z) ? json_object_get(z, "overlap_comm") : NULL;
    if (!oc || json_is_null(oc) || is_auto(oc)) g->overlap_comm = g->zero_stage == 3;
    ZINF_TRY(check_offload(c, &g->offload_param, "offload_param", true));
    ZINF_TRY(check_offload(c, &g->offload_optimizer, "offload_optimizer", false));

    /* optimizer: DeepSpeed's effective_adam_w_mode */
    g->adam_w_mode = g->opt_type == ZINF_OPT_ADAMW || g->adam_w_mode;

    /* scheduler: WarmupLR's warmup_max_lr None -> the optimizer's lr; WarmupDecayLR 0.001 */
    if (isnan(g->sched.warmup_max_lr))
        g->sched.warmup_max_lr = g->sched.type == ZINF_SCHED_WARMUP_LR ? g->lr : 0.001;
    /* no scheduler block and --lr_scheduler_type: the HF Trainer's own schedule from its flags
     * (transformers' get_scheduler; --warmup_steps or --warmup_ratio; --min_lr), which DeepSpeed
     * then steps; a block in the config wins, as in HF. Without the flag the rate stays constant,
     * as zinf has always run such configs: warm-up flags then have nothing to act on, and say so */
    json_t *sb = json_object_get(root, "scheduler");
    const zinf_flags *fl = c->fl;
    bool given = fl && fl->lr_scheduler_type_set;
    bool warm = fl && ((fl->warmup_steps_set && fl->warmup_steps > 0) || (fl->warmup_ratio_set && fl->warmup_ratio > 0));
    if ((!sb || json_is_null(sb)) && !given && warm)
        cwarn(c, "--warmup_steps/--warmup_ratio have no effect: the config has no scheduler block and no "
                 "--lr_scheduler_type was given (the learning rate stays constant; the HF Trainer would run "
                 "linear); give --lr_scheduler_type linear (or cosine, ...) for its schedule");
    if ((!sb || json_is_null(sb)) && given) {
        const char *want = fl->lr_scheduler_type;
        int k = ZINF_SCHED_HF_LINEAR;
        while (k <= ZINF_SCHED_HF_CONSTANT_WARMUP && strcmp(SCHED_NAMES[k], want)) k++;
        if (k > ZINF_SCHED_HF_CONSTANT_WARMUP)
            return cerr(c, NULL, "--lr_scheduler_type %s: zinf has linear, cosine, cosine_with_min_lr, constant and "
                                 "constant_with_warmup (or a scheduler block in the config)", want);
        g->sched.type = (zinf_sched_type)k;
        g->sched.warmup_num_steps = -1; /* from --warmup_steps or --warmup_ratio once the steps are known */
        g->sched.total_num_steps = -1;
        g->sched.hf_min_lr = fl->min_lr_set ? fl->min_lr : 0.0;
        if (k == ZINF_SCHED_HF_COSINE_MIN_LR && !fl->min_lr_set)
            return cerr(c, NULL, "--lr_scheduler_type cosine_with_min_lr needs --min_lr");
        if (k == ZINF_SCHED_HF_CONSTANT && warm)
            cwarn(c, "--lr_scheduler_type constant has no warmup (HF's); --warmup_steps/--warmup_ratio have no "
                     "effect: constant_with_warmup has one");
    } else if (given) {
        cwarn(c, "--lr_scheduler_type %s has no effect: the config's scheduler block (%s) is the schedule, as "
                 "in the HF Trainer", fl->lr_scheduler_type, SCHED_NAMES[g->sched.type]);
    }
    /* a scheduler block's own warmup_num_steps wins; the HF Trainer fills only an "auto" one */
    json_t *sp = json_is_object(sb) ? json_object_get(sb, "params") : NULL;
    json_t *swn = json_is_object(sp) ? json_object_get(sp, "warmup_num_steps") : NULL;
    if (sb && !json_is_null(sb) && warm && !is_auto(swn) && g->sched.warmup_num_steps >= 0)
        cwarn(c, "--warmup_steps/--warmup_ratio have no effect: the config's scheduler block sets warmup_num_steps "
                 "%lld (the HF Trainer fills only \"auto\" from them)", (long long)g->sched.warmup_num_steps);
    if (fl && fl->min_lr_set && !(given && (!sb || json_is_null(sb)) && g->sched.type == ZINF_SCHED_HF_COSINE_MIN_LR))
        cwarn(c, "--min_lr has no effect: only --lr_scheduler_type cosine_with_min_lr (without a scheduler block in the "
                 "config) has a floor");

    /* communication_data_type: zinf reduces in fp32 at stages 0-1 (the fp32 accumulators are
     * all-reduced) and in the compute dtype at stages 2-3; another dtype would change the sums */
    if (g->communication_data_type != ZINF_COMM_UNSET) {
        int have = g->zero_stage <= 1 || (!g->fp16 && !g->bf16) ? ZINF_COMM_FP32
                   : g->bf16                                   ? ZINF_COMM_BF16
                                                               : ZINF_COMM_FP16;
        if (g->communication_data_type != have)
            return cerr(c, "communication_data_type",
                        "\"%s\" is not supported here: zinf reduces gradients in %s at ZeRO stage %d "
                        "with this precision, and another dtype changes the training numerics",
                        COMMDT_NAMES[g->communication_data_type], COMMDT_NAMES[have], g->zero_stage);
    }

    /* data_types: DtypeEnum's names as ZINF_COMM_* (int8: -1) */
    int *dts[] = {&g->grad_accum_dtype, &g->param_dtype, &g->buffer_dtype};
    for (size_t i = 0; i < sizeof dts / sizeof *dts; i++) {
        static const int canon[] = {ZINF_COMM_UNSET, ZINF_COMM_FP16, ZINF_COMM_BF16, ZINF_COMM_FP32,
                                    ZINF_COMM_FP16, ZINF_COMM_FP16, ZINF_COMM_FP16, ZINF_COMM_BF16,
                                    ZINF_COMM_BF16, ZINF_COMM_FP32, ZINF_COMM_FP32, ZINF_COMM_FP32, -1, -1};
        *dts[i] = canon[*dts[i]];
    }
    /* data_types.param_dtype: DeepSpeed asserts it is the model dtype (engine.py
     * _assert_valid_mixed_precision_config) */
    int model_dt = g->fp16 ? ZINF_COMM_FP16 : g->bf16 ? ZINF_COMM_BF16 : ZINF_COMM_FP32;
    if (g->param_dtype != ZINF_COMM_UNSET && g->param_dtype != model_dt)
        return cerr(c, "data_types.param_dtype", "%s conflicts with the precision enabled (%s), as in DeepSpeed: "
                    "enable the matching fp16 or bf16 block, or leave param_dtype out",
                    g->param_dtype < 0 ? "int8" : COMMDT_NAMES[g->param_dtype], COMMDT_NAMES[model_dt]);
    /* data_types.buffer_dtype: DeepSpeed casts the model's floating buffers to it; zinf's only one,
     * the Llama family's rotary frequencies (HF's inv_freq), stays in fp32 */
    if (g->buffer_dtype != ZINF_COMM_UNSET && g->buffer_dtype != ZINF_COMM_FP32)
        return cerr(c, "data_types.buffer_dtype", "%s is not supported: DeepSpeed would round the rotary-embedding "
                    "frequencies (the Llama family's inv_freq buffer) to it, which changes the training numerics; "
                    "zinf keeps them in fp32", g->buffer_dtype < 0 ? "int8" : COMMDT_NAMES[g->buffer_dtype]);

    /* data_types.grad_accum_dtype: zinf accumulates gradients in fp32 */
    if (g->grad_accum_dtype != ZINF_COMM_UNSET && g->grad_accum_dtype != ZINF_COMM_FP32)
        return cerr(c, "data_types.grad_accum_dtype",
                    "\"%s\" is not supported: zinf accumulates gradients in fp32, and another dtype "
                    "changes the training numerics",
                    g->grad_accum_dtype < 0 ? "int8" : COMMDT_NAMES[g->grad_accum_dtype]);

    /* the gradients are divided by the predivide factor in fp32 or 16 bits and multiplied back:
     * a factor whose value or reciprocal is not a normal fp32 number turns them into 0 x inf */
    if (g->gradient_predivide_factor > 3.4e38 || g->gradient_predivide_factor < 1.2e-38)
        return cerr(c, "gradient_predivide_factor", "%g is outside the fp32 range the gradients are "
                    "divided and multiplied in (1.2e-38 to 3.4e38)", g->gradient_predivide_factor);

    /* gradient_allreduce_op "sum": DeepSpeed leaves the gradients summed over the data-parallel
     * ranks instead of averaged, a step world-size times larger */
    if (g->gradient_allreduce_op == 1)
        return cerr(c, "gradient_allreduce_op", "\"sum\" is not supported: zinf averages gradients over the "
                    "data-parallel ranks (\"mean\"), and a sum changes the training numerics");

    g->ckpt_tag_validation_fail = g->ckpt_tag_validation == 2;
    /* DeepSpeed: wall_clock_breakdown | flops_profiler.enabled */
    g->wall_clock_breakdown = g->wall_clock_breakdown || g->flops_profiler_enabled;
    /* DeepSpeed's module tree and its aggregated top modules have no counterpart in zinf's report,
     * which lists the step's backend operations, every one (flops_profiler.detailed) */
    if (g->flops_profiler_enabled && g->flops_profiler_module_depth != -1)
        cwarn(c, "flops_profiler.module_depth has no effect: zinf's detailed report lists every backend "
                 "operation of the profile step, not modules to a depth");
    if (g->flops_profiler_enabled && g->flops_profiler_top_modules != 1)
        cwarn(c, "flops_profiler.top_modules has no effect: zinf's detailed report lists every backend "
                 "operation of the profile step, most time first");

    /* stage 3's keys in a config of a lower stage (a ZeRO-3 file with its stage lowered): DeepSpeed
     * reads them only at stage 3, and so does zinf; said where one is not DeepSpeed's default (as
     * `zinf config show` prints them at any stage) */
    const struct { const char *name; int64_t v, def; } s3[] = {
        {"stage3_prefetch_bucket_size", g->stage3_prefetch_bucket_size, 50000000},
        {"stage3_param_persistence_threshold", g->stage3_param_persistence_threshold, 100000},
        {"stage3_model_persistence_threshold", g->stage3_model_persistence_threshold, INT64_MAX},
        {"stage3_max_live_parameters", g->stage3_max_live_parameters, 1000000000},
        {"stage3_max_reuse_distance", g->stage3_max_reuse_distance, 1000000000}};
    for (size_t i = 0; g->zero_stage < 3 && i < sizeof s3 / sizeof *s3; i++)
        if (s3[i].v != s3[i].def)
            cwarn(c, "zero_optimization.%s %lld has no effect at stage %d: it shapes stage 3's parameter gathering",
                  s3[i].name, (long long)s3[i].v, g->zero_stage);

    ZINF_TRY(batch_rule(c));

    /* what the training loop takes from the flags */
    g->max_steps = f->max_steps_set ? f->max_steps : -1;
    if (f->max_steps_set && f->max_steps <= 0)
        cwarn(c, "--max_steps %lld is not a positive number: the run's length comes from --num_train_epochs (%g), as "
                 "in the HF Trainer", (long long)f->max_steps, f->num_train_epochs);
    g->num_train_epochs = f->num_train_epochs;
    g->seq_len = f->max_length;
    /* HF's TrainingArguments: logging_steps 500, eval_steps None = logging_steps, save_steps 500;
     * steps_per_print is DeepSpeed's own print and sets none of them */
    g->logging_steps = f->logging_steps;
    g->eval_steps = f->eval_steps_set ? f->eval_steps : g->logging_steps;
    g->save_steps = f->save_steps;
    /* steps, unless the strategy flags say otherwise; with --val zinf evaluates, as HF does with
     * eval_strategy steps (HF's own default is no, ms-swift's follows save_strategy) */
    g->logging_strategy = f->logging_strategy_set ? ival_of(f->logging_strategy) : ZINF_IVAL_STEPS;
    g->eval_strategy = f->eval_strategy_set ? ival_of(f->eval_strategy) : ZINF_IVAL_STEPS;
    g->save_strategy = f->save_strategy_set ? ival_of(f->save_strategy) : ZINF_IVAL_STEPS;
    if (g->save_strategy == ZINF_IVAL_NO) g->save_steps = 0; /* saves only when a signal stops the run */
    /* an interval flag beside a strategy that is not "steps" has nothing to act on */
    const struct { const char *steps, *strategy; bool set; int64_t v; int ival; } iv[] = {
        {"--logging_steps", "--logging_strategy", f->logging_steps_set, f->logging_steps, g->logging_strategy},
        {"--eval_steps", "--eval_strategy", f->eval_steps_set, f->eval_steps, g->eval_strategy},
        {"--save_steps", "--save_strategy", f->save_steps_set, f->save_steps, g->save_strategy}};
    for (size_t i = 0; i < sizeof iv / sizeof *iv; i++)
        if (iv[i].set && iv[i].ival != ZINF_IVAL_STEPS)
            cwarn(c, "%s %lld has no effect: %s %s", iv[i].steps, (long long)iv[i].v, iv[i].strategy,
                  iv[i].ival == ZINF_IVAL_NO ? "no" : "epoch");
    return 0;
}

/* DeepSpeed's oldest ZeRO format (zero/config.py read_zero_config_deprecated): "zero_optimization":
 * true is stage 1 with the top-level "allgather_size" (default 5e8) as allgather_bucket_size;
 * false is stage 0. Rewritten into the current form before the walk. */
static int legacy_zero_bool(ctx *c, json_t *root)
{
    json_t *z = json_object_get(root, "zero_optimization");
    json_t *ag = json_object_get(root, "allgather_size");
    if (!json_is_boolean(z)) {
        if (ag) cwarn(c, "allgather_size belongs to the boolean \"zero_optimization\" format; it has "
                         "no effect here (use zero_optimization.allgather_bucket_size)");
        if (ag) json_object_del(root, "allgather_size");
        return 0;
    }
    json_t *nz = json_pack("{s:i}", "stage", json_is_true(z) ? 1 : 0);
    if (!nz) return zinf_errc(ZINF_ENOMEM, "%s: out of memory", c->src);
    if (ag && json_is_true(z)) json_object_set(nz, "allgather_bucket_size", ag);
    json_object_set_new(root, "zero_optimization", nz);
    json_object_del(root, "allgather_size");
    cwarn(c, "zero_optimization: the boolean form is deprecated; as DeepSpeed does, it is read as "
             "{\"stage\": %d}", json_is_true(z) ? 1 : 0);
    return 0;
}

/* ============================================================================ text -> JSON */

/* Replace // and block comments outside strings by spaces, one space per UTF-8 character, keeping
 * newlines, so jansson's line and column stay those of the file. Returns the new length. */
static long strip_comments(const char *in, size_t len, char *out, const char *src)
{
    size_t o = 0, i = 0;
    int line = 1;
    bool str = false;
    while (i < len) {
        char ch = in[i];
        if (str) {
            out[o++] = in[i++];
            if (ch == '\\' && i < len) out[o++] = in[i++];
            else if (ch == '"') str = false;
            continue;
        }
        if (ch != '/' || i + 1 >= len || (in[i + 1] != '/' && in[i + 1] != '*')) {
            if (ch == '"') str = true;
            if (ch == '\n') line++;
            out[o++] = in[i++];
            continue;
        }
        bool block = in[i + 1] == '*';
        int start = line;
        bool closed = !block;
        out[o++] = ' ', out[o++] = ' ';
        for (i += 2; i < len; i++) {
            if (!block && in[i] == '\n') break; /* the newline is copied by the outer loop */
            if (block && in[i] == '*' && i + 1 < len && in[i + 1] == '/') {
                out[o++] = ' ', out[o++] = ' ';
                i += 2;
                closed = true;
                break;
            }
            if (in[i] == '\n') out[o++] = '\n', line++;
            else if (((unsigned char)in[i] & 0xC0) != 0x80) out[o++] = ' ';
        }
        if (!closed) return zinf_err("%s:%d: unterminated /* comment", src, start);
    }
    out[o] = 0;
    return (long)o;
}

static int load_json(const char *text, size_t len, const char *src, json_t **root)
{
    char *buf = malloc(len + 1);
    if (!buf) return zinf_errc(ZINF_ENOMEM, "%s: out of memory", src);
    long n = strip_comments(text, len, buf, src);
    if (n < 0) {
        free(buf);
        return (int)n;
    }
    json_error_t je;
    *root = json_loadb(buf, (size_t)n, JSON_REJECT_DUPLICATES, &je);
    free(buf);
    if (!*root) {
        char text[sizeof je.text * 4 + 8];
        one_line(text, sizeof text, je.text);
        if (strstr(je.text, "duplicate"))
            return zinf_err("%s:%d:%d: a key is given twice in one object: %s", src, je.line,
                            je.column, text);
        return zinf_err("%s:%d:%d: malformed JSON: %s", src, je.line, je.column, text);
    }
    if (!json_is_object(*root)) {
        json_decref(*root);
        return zinf_err("%s: the top level must be a JSON object", src);
    }
    return 0;
}

/* ============================================================================ flags' values */

/* The key a flag fills or must agree with: the first in the tables' order (optimizer.params.lr
 * before the scheduler's warmup_max_lr, which takes --learning_rate too); its path into path. */
static const keydef *key_of_flag(const blockdef *b, int id, const char *prefix, char *path,
                                 size_t cap)
{
    for (size_t i = 0; i < b->n; i++) {
        const keydef *k = &b->keys[i];
        char p[320];
        join(p, sizeof p, prefix, k->name);
        if (k->type == T_OBJ) {
            const keydef *r = key_of_flag(k->sub, id, p, path, cap);
            if (r) return r;
        } else if (k->flag != FL_NONE && (k->flag == id || (k->type == T_BETAS && k->flag + 1 == id))) {
            if (k->type == T_BETAS) snprintf(path, cap, "%s[%d]", p, id - k->flag);
            else snprintf(path, cap, "%s", p);
            return k;
        }
    }
    return NULL;
}

/* The flags that stand for no DeepSpeed key, with their rules in the keys' terms. */
static const struct flagrule {
    const char *opt;
    keydef rule;              /* type (T_INT: int64_t, T_NUM: double) and F_ rule flags */
    size_t val, set;          /* in zinf_flags */
    const char *note;
} FLAG_RULES[] = {
#define FR(field, ty, rflags, note) \
    {"--" #field, {.type = ty, .flags = rflags}, offsetof(zinf_flags, field), offsetof(zinf_flags, field##_set), note}
    FR(num_train_epochs, T_NUM, F_POS, NULL),
    FR(warmup_steps, T_INT, 0, NULL),
    FR(warmup_ratio, T_NUM, F_UNIT, NULL),
    FR(min_lr, T_NUM, 0, "cosine_with_min_lr's floor"),
    FR(max_length, T_INT, 0, "0: the model's n_positions"),
    FR(logging_steps, T_INT, F_POS, "HF's Trainer refuses 0 too"),
    FR(eval_steps, T_INT, F_POS, "leave it out to evaluate every --logging_steps steps"),
    FR(save_steps, T_INT, 0, "0: no periodic saves"),
    FR(comm_timeout, T_NUM, 0, "seconds; 0 waits forever"),
#undef FR
};

int zinf_flags_check(const zinf_flags *f)
{
    const struct { const char *opt, *v; bool set; } iv[] = {
        {"--logging_strategy", f->logging_strategy, f->logging_strategy_set},
        {"--eval_strategy", f->eval_strategy, f->eval_strategy_set},
        {"--save_strategy", f->save_strategy, f->save_strategy_set}};
    for (size_t i = 0; i < sizeof iv / sizeof *iv; i++)
        if (iv[i].set && (!iv[i].v || ival_of(iv[i].v) < 0))
            return zinf_err("%s %s: expected steps, epoch or no%s", iv[i].opt, iv[i].v ? iv[i].v : "(null)",
                            iv[i].v && !strcmp(iv[i].v, "best") ? " (best needs an evaluation metric to choose by, "
                                                                  "which zinf does not keep)" : "");
    char exp[96], val[64], path[340];
    for (int id = FL_NONE + 1; id < (int)(sizeof FLAGS / sizeof FLAGS[0]); id++) {
        if (FLAGS[id].kind == 'b' || !flag_given(f, id)) continue;
        const keydef *k = key_of_flag(&B_TOP, id, "", path, sizeof path);
        double d = flag_val(f, id);
        if (!k || value_ok(k, d)) continue;
        if (FLAGS[id].kind == 'i') snprintf(val, sizeof val, "%lld", (long long)d);
        else snprintf(val, sizeof val, "%g", d);
        return zinf_err("%s %s: expected %s, as %s in a DeepSpeed config", FLAGS[id].opt, val,
                        k->type == T_BETAS ? "a number at least 0 and below 1"
                                           : expected(k, exp, sizeof exp),
                        path);
    }
    for (size_t i = 0; i < sizeof FLAG_RULES / sizeof FLAG_RULES[0]; i++) {
        const struct flagrule *r = &FLAG_RULES[i];
        const char *p = (const char *)f + r->val;
        if (!*(const bool *)((const char *)f + r->set)) continue;
        double d = r->rule.type == T_INT ? (double)*(const int64_t *)p : *(const double *)p;
        if (value_ok(&r->rule, d)) continue;
        if (r->rule.type == T_INT) snprintf(val, sizeof val, "%lld", (long long)*(const int64_t *)p);
        else snprintf(val, sizeof val, "%g", d);
        return zinf_err("%s %s: expected %s%s%s%s", r->opt, val, expected(&r->rule, exp, sizeof exp),
                        r->note ? " (" : "", r->note ? r->note : "", r->note ? ")" : "");
    }
    return 0;
}

/* ============================================================================ API */

int zinf_config_parse(zinf_config *cfg, const char *text, size_t len, const char *source_name,
                      const zinf_flags *flags, int world_size, FILE *warn)
{
    zinf_flags deflt;
    if (!flags) {
        zinf_flags_defaults(&deflt);
        flags = &deflt;
    }
    const char *src = source_name && *source_name ? source_name : "(config)";
    memset(cfg, 0, sizeof *cfg);
    ZINF_TRY(zinf_flags_check(flags));
    zinf_flags withdt = *flags; /* --torch_dtype as the --bf16/--fp16 it stands for */
    ZINF_TRY(apply_torch_dtype(&withdt));
    flags = &withdt;
    snprintf(cfg->path, sizeof cfg->path, "%s", source_name ? source_name : "");
    cfg->world_size = world_size;
    if (world_size < 1) return zinf_err("%s: world size %d is not positive", src, world_size);

    /* a UTF-8 byte-order mark (Windows editors write one) is skipped, as Python's utf-8-sig
     * codec does: it is no part of the JSON text, and an error about it would show nothing */
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) text += 3, len -= 3;
    json_t *root = NULL;
    ZINF_TRY(load_json(text, len, src, &root));
    ctx c = {cfg, flags, src, warn};
    int rc = legacy_zero_bool(&c, root);
    if (rc == 0) rc = walk(&c, &B_TOP, root, 0, "", false);
    if (rc == 0) rc = resolve(&c, root);
    json_decref(root);
    if (rc == 0 && flags->total_steps > 0)
        rc = zinf_config_finalize_steps(cfg, flags->total_steps, flags, warn);
    return rc;
}

#ifndef ZINF_PKGDATADIR
#define ZINF_PKGDATADIR "/usr/local/share/zinf"
#endif
#ifndef ZINF_SRCDIR
#define ZINF_SRCDIR "."
#endif
int zinf_config_builtin(const char *spec, char *path, size_t cap)
{
    static const char *const names[] = {"zero0", "zero1", "zero2", "zero2_offload", "zero3", "zero3_offload"};
    bool known = false;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) known = known || !strcmp(spec, names[i]);
    if (!known) return 0;
    const char *dirs[] = {ZINF_PKGDATADIR "/deepspeed", ZINF_SRCDIR "/jobs/configs/deepspeed"};
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
        snprintf(path, cap, "%s/%s.json", dirs[i], spec);
        if (access(path, R_OK) == 0) return 1;
    }
    return zinf_err("--deepspeed %s: ms-swift's built-in config, but %s/%s.json is not installed (nor in %s)", spec, ZINF_PKGDATADIR "/deepspeed", spec,
                    ZINF_SRCDIR "/jobs/configs/deepspeed");
}

static int diff_walk(json_t *a, json_t *b, const char *prefix, char *out, size_t cap, size_t *len)
{
    int n = 0;
    const char *k;
    json_t *va;
    json_object_foreach(a, k, va) {
        json_t *vb = json_object_get(b, k);
        char path[512];
        snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "", k);
        if (!vb || !strcmp(path, "zinf.warnings")) continue;
        if (json_is_object(va) && json_is_object(vb)) {
            n += diff_walk(va, vb, path, out, cap, len);
            continue;
        }
        if (json_equal(va, vb)) continue;
        char *ta = json_dumps(va, JSON_ENCODE_ANY | JSON_COMPACT), *tb = json_dumps(vb, JSON_ENCODE_ANY | JSON_COMPACT);
        if (*len < cap)
            *len += (size_t)snprintf(out + *len, cap - *len, "%s%s %s -> %s", n || *len ? ", " : "", path,
                                     ta ? ta : "?", tb ? tb : "?");
        free(ta);
        free(tb);
        n++;
    }
    return n;
}

int zinf_config_diff(const char *old_json, const char *new_json, char *out, size_t cap)
{
    if (cap) out[0] = 0;
    json_t *a = json_loads(old_json, 0, NULL), *b = json_loads(new_json, 0, NULL);
    int n = ZINF_EINVAL;
    size_t len = 0;
    if (json_is_object(a) && json_is_object(b)) n = diff_walk(a, b, "", out, cap, &len);
    else zinf_err("a stored config is not a JSON object");
    json_decref(a);
    json_decref(b);
    return n;
}

int zinf_config_load(zinf_config *cfg, const char *path, const zinf_flags *flags, int world_size,
                     FILE *warn)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) return zinf_errc(-errno, "%s: cannot open: %s", path, strerror(errno));
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 > cap) {
            cap = cap ? cap * 2 : 65536;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(fp);
                return zinf_errc(ZINF_ENOMEM, "%s: out of memory", path);
            }
            buf = nb;
        }
        size_t n = fread(buf + len, 1, cap - len, fp);
        len += n;
        if (n == 0) break;
    }
    int bad = ferror(fp);
    fclose(fp);
    if (bad) {
        free(buf);
        return zinf_errc(ZINF_EIO, "%s: read failed", path);
    }
    int rc = zinf_config_parse(cfg, buf, len, path, flags, world_size, warn);
    free(buf);
    return rc;
}

static const char DEFAULT_CONFIG[] =
    "{\"train_micro_batch_size_per_gpu\": \"auto\", \"gradient_accumulation_steps\": \"auto\", "
    "\"train_batch_size\": \"auto\", \"gradient_clipping\": \"auto\", "
    "\"fp16\": {\"enabled\": \"auto\"}, \"bf16\": {\"enabled\": \"auto\"}, "
    "\"zero_optimization\": {\"stage\": 0}}";

int zinf_config_default(zinf_config *cfg, const zinf_flags *flags, int world_size, FILE *warn)
{
    int rc = zinf_config_parse(cfg, DEFAULT_CONFIG, sizeof DEFAULT_CONFIG - 1,
                               "(built-in default config)", flags, world_size, warn);
    cfg->path[0] = 0;
    return rc;
}

int zinf_config_finalize_steps(zinf_config *cfg, int64_t total_steps, const zinf_flags *flags,
                               FILE *warn)
{
    const char *src = cfg->path[0] ? cfg->path : "(built-in default config)";
    if (total_steps < 1)
        return zinf_err("%s: the number of optimizer steps is %lld; it must be positive", src,
                        (long long)total_steps);
    zinf_sched_cfg *s = &cfg->sched;
    cfg->max_steps = total_steps;
    if (s->total_num_steps < 0) s->total_num_steps = total_steps;
    if (s->warmup_num_steps < 0) {
        /* HF TrainingArguments.get_warmup_steps */
        bool steps = flags && flags->warmup_steps_set && flags->warmup_steps > 0;
        double ratio = flags ? flags->warmup_ratio : 0.0;
        s->warmup_num_steps = steps ? flags->warmup_steps : (int64_t)ceil((double)total_steps * ratio);
    }
    if (s->type >= ZINF_SCHED_HF_LINEAR && s->warmup_num_steps > total_steps)
        return zinf_err("--warmup_steps %lld is more than the run's %lld steps", (long long)s->warmup_num_steps,
                        (long long)total_steps);
    /* lr_schedules.py WarmupDecayLR.__init__ and WarmupCosineLR.__init__ only warn; the schedule
     * warms up to its end and then stays at its floor (sched.c, as DeepSpeed computes it) */
    if ((s->type == ZINF_SCHED_WARMUP_DECAY_LR || s->type == ZINF_SCHED_WARMUP_COSINE_LR) &&
        s->total_num_steps < s->warmup_num_steps) {
        ctx c = {cfg, flags, src, warn};
        cwarn(&c, "scheduler.params.total_num_steps %lld is less than warmup_num_steps %lld: as in DeepSpeed, the "
                  "warm-up runs to its end and the rate then stays at %s", (long long)s->total_num_steps,
              (long long)s->warmup_num_steps,
              s->type == ZINF_SCHED_WARMUP_DECAY_LR ? "warmup_min_lr" : "cos_min_ratio x the optimizer's lr");
    }
    return 0;
}

/* ============================================================================ notices */

static void note(zinf_config *cfg, FILE *out, bool warning, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void note(zinf_config *cfg, FILE *out, bool warning, const char *fmt, ...)
{
    if (warning) cfg->n_warnings++;
    if (!out) return;
    va_list ap;
    va_start(ap, fmt);
    fputs(warning ? "zinf: warning: " : "zinf: ", out);
    vfprintf(out, fmt, ap);
    fputc('\n', out);
    va_end(ap);
}

int zinf_config_notices(zinf_config *cfg, const char *backend, FILE *out)
{
    const zinf_config *c = cfg;
    bool cpu = strcmp(backend, "cpu") == 0;
    if (cpu && (c->fp16 || c->bf16))
        note(cfg, out, true, "%s.enabled: the CPU backend computes in fp32; %s", c->fp16 ? "fp16" : "bf16",
             c->fp16 ? "loss scaling still runs as configured" : "bf16 has no effect");
    if (c->aio_use_gds && (c->offload_optimizer.device == ZINF_DEV_NVME || c->offload_param.device == ZINF_DEV_NVME))
        note(cfg, out, true, "aio.use_gds: GPUDirect Storage is not implemented; NVMe data passes through "
             "host buffers");
    if (c->zero_stage >= 1 && !c->allgather_partitions)
        note(cfg, out, true, "zero_optimization.allgather_partitions false: zinf always all-gathers "
             "partitions");
    if (c->zero_stage >= 2 && !c->reduce_scatter)
        note(cfg, out, true, "zero_optimization.reduce_scatter false: zinf always reduce-scatters at "
             "stage %d", c->zero_stage);
    if (c->round_robin_gradients)
        note(cfg, out, true, "zero_optimization.round_robin_gradients: no effect (zinf reduces by unit "
             "in a fixed order)");
    if (c->activation_checkpointing) {
        if (c->ac_partition_activations)
            note(cfg, out, true, "activation_checkpointing.partition_activations: no effect (zinf has no "
                 "model parallelism to partition across)");
        if (c->ac_cpu_checkpointing && !cpu)
            note(cfg, out, true, "activation_checkpointing.cpu_checkpointing: not implemented on %s; "
                 "checkpoints stay in device memory", backend);
        if (c->ac_contiguous_memory_optimization)
            note(cfg, out, true, "activation_checkpointing.contiguous_memory_optimization: no effect "
                 "(zinf already carves activations from one allocation)");
        if (c->ac_number_checkpoints > 0)
            note(cfg, out, true, "activation_checkpointing.number_checkpoints: no effect (DeepSpeed sizes a "
                 "buffer with it); zinf_recompute_blocks chooses how many blocks are recomputed");
        if (c->ac_synchronize_checkpoint_boundary)
            note(cfg, out, true, "activation_checkpointing.synchronize_checkpoint_boundary: no effect on "
                 "%s", backend);
        if (c->ac_profile) note(cfg, out, true, "activation_checkpointing.profile: not implemented");
    }
    if (c->sparse_gradients) note(cfg, out, true, "sparse_gradients: not implemented; gradients are dense");
    /* keys read and checked whose other values would change nothing here: said where a config
     * asks for something other than what zinf does */
    if (!c->contiguous_gradients)
        note(cfg, out, true, "zero_optimization.contiguous_gradients false: no effect (each unit's gradient is one "
             "buffer in zinf)");
    if (c->elastic_checkpoint)
        note(cfg, out, true, "zero_optimization.elastic_checkpoint: no effect (every zinf checkpoint loads at any "
             "world size)");
    if (c->ckpt_tag_validation != 1)
        note(cfg, out, true, "checkpoint.tag_validation: no effect (zinf names a checkpoint by its step, the same on "
             "every rank)");
    if (c->comms_logger_verbose || c->comms_logger_debug || !c->comms_logger_prof_all)
        note(cfg, out, true, "comms_logger.verbose, debug and prof_all: no effect (zinf's comms line gives rank 0's "
             "collectives so far, by kind, at each logged step)");
    if (c->offload_optimizer.buffer_count != 4)
        note(cfg, out, true, "offload_optimizer.buffer_count %lld: no effect (zinf's swapper sizes its pool by the "
             "pipeline)", (long long)c->offload_optimizer.buffer_count);
    if (c->offload_param.buffer_size != 100000000)
        note(cfg, out, true, "offload_param.buffer_size %lld: no effect in training (zinf reads whole parameter "
             "shards); zinf estimate's DeepSpeed lines use it", (long long)c->offload_param.buffer_size);
    if (c->offload_optimizer.fast_init)
        note(cfg, out, true, "offload_optimizer.fast_init: no effect (zinf initializes the optimizer's shards "
             "itself)");
    if (c->offload_optimizer.device != ZINF_DEV_NVME &&
        (c->offload_optimizer.pipeline_read || c->offload_optimizer.pipeline_write))
        note(cfg, out, true, "offload_optimizer.pipeline_read/pipeline_write: no effect without device \"nvme\"");
    if (c->offload_param.device != ZINF_DEV_NVME && c->offload_param.max_in_cpu != 1000000000)
        note(cfg, out, true, "offload_param.max_in_cpu: no effect without device \"nvme\"");
    if (c->steps_per_print > 0 && c->steps_per_print != c->logging_steps)
        note(cfg, out, false, "steps_per_print %lld sets DeepSpeed's own progress print; zinf logs every "
             "--logging_steps (%lld) steps, as HF's Trainer does", (long long)c->steps_per_print,
             (long long)c->logging_steps);
    return 0;
}

/* ============================================================================ print */

static json_t *emit(const zinf_config *g, const blockdef *b, size_t base)
{
    json_t *o = json_object();
    unsigned stype = b->sched_params ? S_(g->sched.type) : 0;
    for (size_t i = 0; i < b->n; i++) {
        const keydef *k = &b->keys[i];
        if (k->type == T_NOEFFECT || k->type == T_LEGACY || k->type == T_VACUOUS ||
            k->off == (size_t)-1)
            continue;
        if (b->sched_params && !(k->smask & stype)) continue;
        const void *slot = (const char *)g + base + k->off;
        json_t *v = NULL;
        switch (k->type) {
        case T_BOOL: v = json_boolean(*(const bool *)slot); break;
        case T_INT: {
            int64_t x = k->flags & F_I32 ? *(const int *)slot : *(const int64_t *)slot;
            v = k->autok == A_RUNTIME && x == ZINF_RECOMPUTE_AUTO ? json_string("auto")
                : (k->flags & F_NULL) && x < 0                     ? json_null()
                                                                   : json_integer(x);
            break;
        }
        case T_NUM: v = json_real(*(const double *)slot); break;
        case T_STR: v = *(const char *)slot ? json_string(slot) : json_null(); break;
        case T_PATHS: {
            if (!*(const char *)slot) { v = json_null(); break; }
            if (!strchr(slot, '\n')) { v = json_string(slot); break; }
            v = json_array();
            char buf[1024];
            snprintf(buf, sizeof buf, "%s", (const char *)slot);
            for (char *sv = NULL, *t = strtok_r(buf, "\n", &sv); t; t = strtok_r(NULL, "\n", &sv))
                json_array_append_new(v, json_string(t));
            break;
        }
        case T_ENUM: {
            int x = *(const int *)slot;
            v = x >= 0 && x < k->en->n && *k->en->names[x] ? json_string(k->en->names[x])
                                                           : json_null();
            break;
        }
        case T_BETAS:
            v = json_pack("[ff]", ((const double *)slot)[0], ((const double *)slot)[1]);
            break;
        case T_OBJ: v = emit(g, k->sub, base + k->off); break;
        default: break;
        }
        if (v) json_object_set_new(o, k->name, v);
    }
    return o;
}

void zinf_config_print(const zinf_config *cfg, FILE *out)
{
    json_t *o = emit(cfg, &B_TOP, 0);
    /* absent = none; HF's own schedules are no DeepSpeed block: the "zinf" record names them */
    if (cfg->sched.type == ZINF_SCHED_NONE || cfg->sched.type >= ZINF_SCHED_HF_LINEAR)
        json_object_del(o, "scheduler");
    json_t *z = json_pack("{s:s?, s:i, s:b, s:I, s:f, s:I, s:I, s:I, s:I, s:i}",
                          "source", cfg->path[0] ? cfg->path : NULL, "world_size", cfg->world_size,
                          "has_optimizer", cfg->has_optimizer, "max_steps", (json_int_t)cfg->max_steps,
                          "num_train_epochs", cfg->num_train_epochs, "seq_len",
                          (json_int_t)cfg->seq_len, "logging_steps", (json_int_t)cfg->logging_steps,
                          "eval_steps", (json_int_t)cfg->eval_steps, "save_steps",
                          (json_int_t)cfg->save_steps, "warnings", cfg->n_warnings);
    static const char *const IVAL[] = {"steps", "no", "epoch"};
    if (z) {
        json_object_set_new(z, "logging_strategy", json_string(IVAL[cfg->logging_strategy]));
        json_object_set_new(z, "eval_strategy", json_string(IVAL[cfg->eval_strategy]));
        json_object_set_new(z, "save_strategy", json_string(IVAL[cfg->save_strategy]));
        json_object_set_new(o, "zinf", z);
    }
    /* 17 digits: every double prints back to itself and stays a finite JSON number */
    json_dumpf(o, out, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
    fputc('\n', out);
    json_decref(o);
}
