#include "cli.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chat.h"
#include "ckpt_tool.h"
#include "config.h" /* zinf_config */
#include "data.h"
#include "err.h"
#include "estimate.h"
#include "generate.h"
#include "iobench.h"
#include "io/file.h"
#include "launch.h"
#include "log.h" /* zinf_warn */
#include "model.h"
#include "plot.h"
#include "safetensors.h" /* zinf_st_parse_size */
#include "train.h"

#include "zinf-build.h" /* autoconf: PACKAGE_VERSION */

typedef enum { F_STR, F_INT, F_DBL, F_BOOL, F_U64, F_STRS, F_PATH } ftype;
/* F_PATH: a string naming a file or directory, which an empty value cannot */
/* F_STRS: a repeatable string flag; ptr is a strlist and every occurrence appends */
typedef struct { const char **v; int n, max; } strlist;
typedef struct flag {
    const char *name; /* without the dashes */
    ftype type;
    void *ptr;
    bool *set;        /* may be NULL */
    const char *help;
} flag;

static int edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63) return 99;
    int d[64][64];
    for (size_t i = 0; i <= la; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= lb; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            int c = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < c) c = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < c) c = d[i][j - 1] + 1;
            d[i][j] = c;
        }
    return d[la][lb];
}

/* An integer flag's text: decimal digits, with a sign, a point or an exponent for the configs'
 * 1e3 style; strtoll and strtod alone also take leading blanks and hexadecimal (0x10, 0x1p4) */
static bool decimal_text(const char *v, const char *extra)
{
    if (!*v) return false;
    for (const char *p = v; *p; p++)
        if (!(*p >= '0' && *p <= '9') && !strchr(extra, *p)) return false;
    return true;
}

static int parse_value(const char *cmd, const flag *f, const char *v)
{
    char *end = NULL;
    errno = 0;
    switch (f->type) {
    case F_PATH:
        if (!*v) return zinf_err("%s: --%s is empty: give a path", cmd, f->name);
        /* fall through */
    case F_STR: *(const char **)f->ptr = v; break;
    case F_INT: {
        if (!decimal_text(v, "+-.eE")) return zinf_err("%s: --%s expects an integer, got '%s'", cmd, f->name, v);
        long long x = strtoll(v, &end, 10);
        if (errno || !*v || *end) {
            /* 1e3-style integers, as in the configs */
            double dv = strtod(v, &end);
            if (!*v || *end || dv != (double)(long long)dv)
                return zinf_err("%s: --%s expects an integer, got '%s'", cmd, f->name, v);
            x = (long long)dv;
        }
        *(int64_t *)f->ptr = x;
        break;
    }
    case F_U64: {
        unsigned long long x = strtoull(v, &end, 10);
        if (errno || !decimal_text(v, "+") || *end) return zinf_err("%s: --%s expects a non-negative integer, got '%s'", cmd, f->name, v);
        *(uint64_t *)f->ptr = x;
        break;
    }
    case F_DBL: {
        double x = strtod(v, &end);
        if (errno || !*v || *end) return zinf_err("%s: --%s expects a number, got '%s'", cmd, f->name, v);
        *(double *)f->ptr = x;
        break;
    }
    case F_STRS: {
        strlist *l = f->ptr;
        if (l->n >= l->max) return zinf_err("%s: --%s is given more than %d times", cmd, f->name, l->max);
        l->v[l->n++] = v;
        break;
    }
    case F_BOOL:
        if (!strcmp(v, "true") || !strcmp(v, "True") || !strcmp(v, "1")) *(bool *)f->ptr = true;
        else if (!strcmp(v, "false") || !strcmp(v, "False") || !strcmp(v, "0")) *(bool *)f->ptr = false;
        else return zinf_err("%s: --%s expects true or false, got '%s'", cmd, f->name, v);
        break;
    }
    if (f->set) *f->set = true;
    return 0;
}

/* A table may spell a flag with dashes or underscores (each as its page documents it); the user
 * may write either, so names are compared with '-' and '_' the same. */
static bool flag_name_eq(const char *a, const char *b)
{
    for (; *a && *b; a++, b++)
        if (*a != *b && !((*a == '-' || *a == '_') && (*b == '-' || *b == '_'))) return false;
    return *a == *b;
}

/* Parse argv[first..] against the table; positional arguments go to pos (up to maxpos). With rest
 * not NULL, the first positional argument or "--" ends the flags instead: *rest is the index of
 * what follows (argc when nothing does), for a command that runs another with its own flags.
 * shorts, when not NULL, pairs short spellings with long ones ({"-H", "--hostfile", ..., NULL});
 * -h is always --help. */
static int parse_flags_until(const char *cmd, const flag *tab, int argc, char **argv, int first,
                             const char **pos, int maxpos, int *npos, int *rest, const char *const *shorts)
{
    *npos = 0;
    if (rest) *rest = argc;
    /* each setting once: the spelling and value it was given with, by its first table entry (an
     * alias is an entry with the same ptr) */
    enum { MAXTAB = 128 };
    const char *seen[MAXTAB] = {0}, *seen_v[MAXTAB] = {0};
    size_t seen_l[MAXTAB] = {0};
    const flag *seen_f[MAXTAB] = {0};
    for (int i = first; i < argc; i++) {
        const char *a = argv[i], *typed = argv[i]; /* typed: -H where a is --hostfile */
        if (!strcmp(a, "-h")) a = "--help"; /* the one short flag, as `zinf -h` has it */
        for (const char *const *sh = shorts; sh && *sh; sh += 2)
            if (!strcmp(a, sh[0])) a = sh[1];
        if (rest && (strncmp(a, "--", 2) != 0 || !a[2])) {
            *rest = i + !strcmp(a, "--");
            return 0;
        }
        if (strncmp(a, "--", 2) != 0 || !a[2]) {
            if (*npos >= maxpos) return zinf_err("%s: unexpected argument '%s'", cmd, a);
            pos[(*npos)++] = a;
            continue;
        }
        char name[128];
        const char *eq = strchr(a + 2, '=');
        size_t nl = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
        if (nl >= sizeof name) nl = sizeof name - 1;
        memcpy(name, a + 2, nl);
        name[nl] = 0;
        for (char *p = name; *p; p++) if (*p == '-') *p = '_'; /* --max-steps == --max_steps */
        const flag *f = NULL;
        for (const flag *t = tab; t->name; t++) if (flag_name_eq(t->name, name)) { f = t; break; }
        if (!f) {
            const flag *best = NULL;
            int bd = 99;
            for (const flag *t = tab; t->name; t++) {
                char tn[sizeof name];
                snprintf(tn, sizeof tn, "%s", t->name);
                for (char *p = tn; *p; p++) if (*p == '-') *p = '_';
                int d = edit_distance(name, tn);
                if (d < bd) { bd = d; best = t; }
            }
            if (best && bd <= 3) return zinf_err("%s: unknown flag --%s (did you mean --%s?)", cmd, name, best->name);
            return zinf_err("%s: unknown flag --%s (see %s%s --help)", cmd, name,
                            strncmp(cmd, "zinf-", 5) ? "zinf " : "", cmd);
        }
        const char *v = eq ? eq + 1 : NULL;
        if (!v && f->type == F_BOOL) {
            /* --bf16 alone, or --bf16 true|false */
            if (i + 1 < argc && (!strcmp(argv[i + 1], "true") || !strcmp(argv[i + 1], "false") ||
                                 !strcmp(argv[i + 1], "True") || !strcmp(argv[i + 1], "False")))
                v = argv[++i];
            else v = "true";
        }
        if (!v) {
            if (i + 1 >= argc) return zinf_err("%s: --%s needs a value", cmd, f->name);
            v = argv[++i];
        }
        /* a flag given twice, or with its alias, is refused: which one wins would be a guess */
        const flag *canon = tab;
        while (canon->ptr != f->ptr) canon++;
        if (strncmp(typed, "--", 2)) a = typed, eq = NULL;
        size_t ci = (size_t)(canon - tab), al = eq ? (size_t)(eq - a) : strlen(a);
        if (f->type != F_STRS && ci < MAXTAB && seen[ci]) {
            char was[96], now[96];
            snprintf(was, sizeof was, "%.*s %s", (int)seen_l[ci], seen[ci], seen_v[ci]);
            snprintf(now, sizeof now, "%.*s %s", (int)al, a, v);
            if (seen_f[ci] == f)
                return zinf_err("%s: --%s is given twice (%s, then %s); give it once", cmd, f->name, was, now);
            return zinf_err("%s: %.*s and %.*s set the same thing (%s, then %s); give one of them", cmd,
                            (int)seen_l[ci], seen[ci], (int)al, a, was, now);
        }
        if (ci < MAXTAB) seen[ci] = a, seen_l[ci] = al, seen_v[ci] = v, seen_f[ci] = f;
        ZINF_TRY(parse_value(cmd, f, v));
    }
    return 0;
}

static int parse_flags(const char *cmd, const flag *tab, int argc, char **argv, int first,
                       const char **pos, int maxpos, int *npos)
{
    return parse_flags_until(cmd, tab, argc, argv, first, pos, maxpos, npos, NULL, NULL);
}

static void print_flags(FILE *out, const flag *tab)
{
    for (const flag *t = tab; t->name; t++) {
        const char *arg = t->type == F_BOOL ? "" : t->type == F_STR || t->type == F_STRS || t->type == F_PATH ? " S" : " N";
        char left[64];
        snprintf(left, sizeof left, "--%s%s", t->name, arg);
        fprintf(out, "  %-34s %s\n", left, t->help);
    }
}

/* ---------------------------------------------------------------- train -------------------- */
#define FLAGS_HF(fl)                                                                                          \
    {"per_device_train_batch_size", F_INT, &(fl)->per_device_train_batch_size, &(fl)->per_device_train_batch_size_set, \
     "micro-batch per rank (fills train_micro_batch_size_per_gpu)"},                                           \
    {"gradient_accumulation_steps", F_INT, &(fl)->gradient_accumulation_steps, &(fl)->gradient_accumulation_steps_set, \
     "micro-steps per optimizer step"},                                                                        \
    {"learning_rate", F_DBL, &(fl)->learning_rate, &(fl)->learning_rate_set, "peak learning rate (default 5e-5)"}, \
    {"weight_decay", F_DBL, &(fl)->weight_decay, &(fl)->weight_decay_set, "AdamW weight decay (default 0)"},    \
    {"adam_beta1", F_DBL, &(fl)->adam_beta1, &(fl)->adam_beta1_set, "Adam beta1 (default 0.9)"},               \
    {"adam_beta2", F_DBL, &(fl)->adam_beta2, &(fl)->adam_beta2_set, "Adam beta2 (default 0.999)"},             \
    {"adam_epsilon", F_DBL, &(fl)->adam_epsilon, &(fl)->adam_epsilon_set, "Adam epsilon (default 1e-8)"},      \
    {"max_grad_norm", F_DBL, &(fl)->max_grad_norm, &(fl)->max_grad_norm_set, "gradient clipping norm (fills \"auto\"; default 1.0)"}, \
    {"warmup_steps", F_INT, &(fl)->warmup_steps, &(fl)->warmup_steps_set, "scheduler warmup steps (fills \"auto\")"}, \
    {"warmup_ratio", F_DBL, &(fl)->warmup_ratio, &(fl)->warmup_ratio_set, "warmup as a fraction of all steps, when --warmup_steps is not given"}, \
    {"lr_scheduler_type", F_STR, &(fl)->lr_scheduler_type, &(fl)->lr_scheduler_type_set, "the HF Trainer's schedule when the config has no scheduler block: linear, cosine, cosine_with_min_lr, constant, constant_with_warmup (without it: a constant rate)"}, \
    {"min_lr", F_DBL, &(fl)->min_lr, &(fl)->min_lr_set, "cosine_with_min_lr's floor"}, \
    {"num_train_epochs", F_DBL, &(fl)->num_train_epochs, &(fl)->num_train_epochs_set, "epochs when --max_steps is not given (default 3)"}, \
    {"max_steps", F_INT, &(fl)->max_steps, &(fl)->max_steps_set, "optimizer steps to run (overrides epochs)"}, \
    {"max_length", F_INT, &(fl)->max_length, &(fl)->max_length_set, "sequence length T (default: the model's n_positions)"}, \
    {"bf16", F_BOOL, &(fl)->bf16, &(fl)->bf16_set, "bf16 mixed precision (fills bf16.enabled \"auto\")"},      \
    {"fp16", F_BOOL, &(fl)->fp16, &(fl)->fp16_set, "fp16 mixed precision (fills fp16.enabled \"auto\")"},      \
    {"torch_dtype", F_STR, &(fl)->torch_dtype, &(fl)->torch_dtype_set, "bfloat16, float16 or float32: sets --bf16/--fp16 where not given (ms-swift's rule), so fills the precision blocks' \"auto\""}, \
    {"logging_steps", F_INT, &(fl)->logging_steps, &(fl)->logging_steps_set, "log every N steps, and the first and last (default 500, as HF; not steps_per_print)"}, \
    {"eval_steps", F_INT, &(fl)->eval_steps, &(fl)->eval_steps_set, "evaluate on --val every N steps (default: logging steps)"}, \
    {"save_steps", F_INT, &(fl)->save_steps, &(fl)->save_steps_set, "checkpoint every N steps and at the end (default 500; 0: only when a signal stops the run)"}, \
    {"logging_strategy", F_STR, &(fl)->logging_strategy, &(fl)->logging_strategy_set, "steps (every --logging_steps, default), epoch (at each epoch's end) or no (the last step only)"}, \
    {"eval_strategy", F_STR, &(fl)->eval_strategy, &(fl)->eval_strategy_set, "with --val: steps (every --eval_steps, default), epoch or no"}, \
    {"evaluation_strategy", F_STR, &(fl)->eval_strategy, &(fl)->eval_strategy_set, "alias of --eval_strategy (HF's older name)"}, \
    {"save_strategy", F_STR, &(fl)->save_strategy, &(fl)->save_strategy_set, "steps (every --save_steps and at the end, default), epoch (each epoch's end and the end) or no (only when a signal stops the run)"}

/* The flags that make SFT shards of a chat dataset, for `zinf data --sft` and `zinf train
 * --dataset` alike: one table, one check. */
typedef struct sft_flags {
    const char *tokenizer, *tmpl, *system, *trunc, *val_dataset;
    double split;
    uint64_t data_seed;
} sft_flags;
#define FLAGS_SFT(sf) \
    {"tokenizer", F_STR, &(sf)->tokenizer, NULL, "tokenizer.json, or a model directory holding one: its byte-level BPE ids are the tokens"}, \
    {"template", F_STR, &(sf)->tmpl, NULL, "chat template (qwen, qwen2_5, qwen3, qwen3_nothinking, llama3, llama3_2, chatml); " \
                                        "default: from the tokenizer's model directory"}, \
    {"system", F_STR, &(sf)->system, NULL, "system message of samples that have none (default: the template's)"}, \
    {"truncation_strategy", F_STR, &(sf)->trunc, NULL, "a sample over --max_length: delete (default), left, right"}, \
    {"split_dataset_ratio", F_DBL, &(sf)->split, NULL, "fraction of the samples held out for validation (default 0)"}, \
    {"val_dataset", F_STR, &(sf)->val_dataset, NULL, "validation chat dataset, FILE or FILE#N"}, \
    {"data_seed", F_U64, &(sf)->data_seed, NULL, "seed of FILE#N sampling and of the split (default 42)"}

static void sft_flags_defaults(sft_flags *sf) { *sf = (sft_flags){.trunc = "delete", .data_seed = 42}; }

/* Whether any flag of the SFT table differs from its default */
static bool sft_flags_given(const sft_flags *sf)
{
    return sf->tmpl || sf->system || sf->split != 0 || sf->val_dataset || strcmp(sf->trunc, "delete") ||
           sf->data_seed != 42;
}

/* The chat-data options of the flags (input, prefix and max_length left to the caller) */
static int sft_opts(const char *cmd, const sft_flags *sf, zinf_chat_data_opts *o)
{
    if (sf->data_seed > UINT32_MAX)
        return zinf_err("%s: --data_seed %llu exceeds 2^32-1", cmd, (unsigned long long)sf->data_seed);
    *o = (zinf_chat_data_opts){.val_input = sf->val_dataset, .tokenizer = sf->tokenizer, .template_name = sf->tmpl,
                               .split_ratio = sf->split, .seed = (uint32_t)sf->data_seed, .chat = {.system = sf->system}};
    if (!strcmp(sf->trunc, "delete")) o->truncation = ZINF_TRUNC_DELETE;
    else if (!strcmp(sf->trunc, "left")) o->truncation = ZINF_TRUNC_LEFT;
    else if (!strcmp(sf->trunc, "right")) o->truncation = ZINF_TRUNC_RIGHT;
    else return zinf_err("%s: --truncation_strategy %s: expected delete, left or right", cmd, sf->trunc);
    return 0;
}

static int cmd_train(zinf_comm *comm, int argc, char **argv, int first, bool *help)
{
    zinf_train_opts o;
    zinf_train_opts_defaults(&o);
    zinf_flags *fl = &o.flags;
    bool h = false;
    sft_flags sf;
    sft_flags_defaults(&sf);
    bool mnt_set = false;
    const flag tab[] = {
        {"config", F_STR, &o.config_path, NULL, "DeepSpeed JSON config (// comments allowed); default: stage 0, values from the flags"},
        {"deepspeed", F_STR, &o.config_path, NULL, "alias of --config (the HF/ms-swift spelling); also ms-swift's built-in names zero0, zero1, zero2, zero2_offload, zero3, zero3_offload (bundled files)"},
        {"model", F_STR, &o.model, NULL, "preset, Hugging Face model directory or config.json (gpt2, llama, qwen2, qwen3, mistral; default test-mini)"},
        {"data", F_STR, &o.data, NULL, "glob of training token shards"},
        {"val", F_STR, &o.val, NULL, "glob of validation token shards"},
        {"dataset", F_STR, &o.dataset, NULL, "instead of --data: a JSONL chat dataset (FILE or FILE#N), rendered with the model's "
                                             "template and tokenizer into SFT shards once and cached (see --dataset_cache)"},
        {"dataset_cache", F_STR, &o.dataset_cache, NULL, "where --dataset's shards are kept, one directory per set of inputs "
                                                         "(default OUT/sft-cache)"},
        FLAGS_SFT(&sf),
        {"out", F_PATH, &o.out, NULL, "output directory (metrics.jsonl, logs/, checkpoints); default zinf-out"},
        {"resume", F_STR, &o.resume, NULL, "continue from a checkpoint: auto (the newest in --out, else a fresh start), a file or a directory"},
        {"resume_from_checkpoint", F_STR, &o.resume, NULL, "alias of --resume (the HF/ms-swift spelling)"},
        {"save_total_limit", F_INT, &o.save_total_limit, NULL, "keep only this run's newest N checkpoints (default 0: all); another run's are never removed"},
        {"overwrite_output_dir", F_BOOL, &o.overwrite_output_dir, NULL, "start a fresh run in an --out that holds another run's checkpoints (they stay; `latest` then names this run's)"},
        {"no_signal_save", F_BOOL, &o.no_signal_save, NULL, "a stop by SIGUSR1 or SIGTERM ends the run after its step without saving a checkpoint (with --save_steps 0: no save at all)"},
        {"init_from", F_STR, &o.init_from, NULL, "start from a Hugging Face directory's weights (config.json, model.safetensors or its shards); a resumed run ignores it"},
        {"output_dir", F_PATH, &o.out, NULL, "alias of --out"},
        {"report_to", F_STR, &o.report_to, NULL, "tensorboard: also write HF's TensorBoard scalars (train/loss, train/learning_rate, train/grad_norm, train/epoch, eval/loss) at each logged step; none (default)"},
        {"logging_dir", F_STR, &o.logging_dir, NULL, "--report_to tensorboard's directory (default OUT/runs/MonDD_HH-MM-SS_HOST, as HF)"},
        {"seed", F_U64, &o.seed, NULL, "seed of initialisation and data order (default 1234)"},
        {"device", F_STR, &o.device, NULL, "cpu or cuda (default cpu)"},
        {"eval_prompts", F_STR, &o.prompts, NULL, "after training, complete each 'prompt<TAB>answer' line greedily and report accuracy"},
        {"max_new_tokens", F_INT, &o.max_new_tokens, &mnt_set, "with --eval_prompts: tokens generated per prompt at most (default 16)"},
        {"per_rank_logs", F_BOOL, &o.per_rank_logs, NULL, "every rank also writes <out>/logs/rank<R>.log"},
        {"gradient_checkpointing", F_BOOL, &o.gradient_checkpointing, &o.gradient_checkpointing_set, "recompute each block in the backward (the HF/ms-swift flag; the same as an activation_checkpointing block)"},
        {"swap_engine", F_STR, &o.swap_engine, NULL, "NVMe offload I/O: io_uring (O_DIRECT, default) or psync (pread/pwrite through the page cache, for file systems without O_DIRECT)"},
        {"packing", F_BOOL, &o.packing, NULL, "SFT data: pack whole samples best-fit-decreasing into the rows of --max_length, as ms-swift's --packing (without it: one sample per row, padded)"},
        {"ac_keep_attention", F_BOOL, &o.ac_keep_attention, NULL, "with activation_checkpointing, also keep each block's attention output: more memory, no recomputed attention"},
        {"comm_timeout", F_DBL, &fl->comm_timeout, &fl->comm_timeout_set, "abort when a collective waits longer than this many seconds; 0 waits forever (default ZINF_COMM_TIMEOUT, else 600)"},
        FLAGS_HF(fl),
        {"help", F_BOOL, &h, NULL, "this text"},
        {NULL, 0, NULL, NULL, NULL},
    };
    int npos;
    ZINF_TRY(zinf_comm_agree(comm, parse_flags("train", tab, argc, argv, first, NULL, 0, &npos)));
    if (h) {
        *help = true;
        if (comm->rank == 0) {
            printf("usage: mpirun -np N zinf train --data GLOB [--config ds.json] [--model M] [flags]\n\n"
                   "Train a GPT-2 or Llama-family model (llama, qwen2, qwen3, mistral) with a DeepSpeed config.\n"
                   "Presets: %s.\n\nflags:\n",
                   zinf_model_presets());
            print_flags(stdout, tab);
        }
        return 0;
    }
    /* every value by the rule of the config key it fills, or its own (config.c) */
    ZINF_TRY(zinf_comm_agree(comm, zinf_flags_check(fl)));
    ZINF_TRY(zinf_comm_agree(comm, sft_opts("train", &sf, &o.sft)));
    if (!o.dataset && (sft_flags_given(&sf) || sf.tokenizer || o.dataset_cache))
        return zinf_comm_agree(comm, zinf_err("train: --tokenizer, --template, --system, --truncation_strategy, "
                                              "--split_dataset_ratio, --val_dataset, --data_seed and --dataset_cache "
                                              "go with --dataset"));
    if (o.save_total_limit < 0)
        return zinf_comm_agree(comm, zinf_err("train: --save_total_limit must be >= 0 (0: keep every checkpoint)"));
    /* an empty value (an unset variable in a job script) is no value: a fresh start or a path of "" */
    if (o.resume && !*o.resume)
        return zinf_comm_agree(comm, zinf_err("train: --resume is empty: give auto, a checkpoint file or a directory "
                                              "(leave the flag out for a fresh run)"));
    if (o.init_from && !*o.init_from)
        return zinf_comm_agree(comm, zinf_err("train: --init_from is empty: give a Hugging Face model directory"));
    if (o.max_new_tokens < 1)
        return zinf_comm_agree(comm, zinf_err("train: --max_new_tokens %lld: expected 1 or more",
                                              (long long)o.max_new_tokens));
    if (mnt_set && !o.prompts)
        zinf_warn("--max_new_tokens %lld has no effect: it sizes --eval_prompts' completions, and none was given",
                  (long long)o.max_new_tokens);
    /* ms-swift holds samples out only where no validation set is given */
    if (sf.val_dataset && o.val)
        return zinf_comm_agree(comm, zinf_err("train: --val_dataset with --val: two validation sets; give one of them"));
    if (sf.split != 0 && o.val)
        return zinf_comm_agree(comm, zinf_err("train: --split_dataset_ratio with --val: the held-out samples would "
                                              "never be evaluated (--val's shards are); give one of them"));
    if (sf.split != 0 && sf.val_dataset)
        zinf_warn("--split_dataset_ratio %g has no effect: --val_dataset is the validation set (as in ms-swift); every "
                  "sample of --dataset trains", sf.split);
    if (fl->comm_timeout_set) comm->timeout_s = fl->comm_timeout; /* 0: no limit */
    return zinf_train_run(comm, &o);
}

static int cmd_config(zinf_comm *comm, int argc, char **argv, int first, bool *help)
{
    zinf_flags f;
    zinf_flags_defaults(&f);
    zinf_flags *fl = &f;
    const char *model = NULL, *device = "cpu";
    int64_t hidden = 0;
    bool h = false;
    const flag tab[] = {
        {"model", F_STR, &model, NULL, "model whose hidden size fills the size \"auto\"s"},
        {"device", F_STR, &device, NULL, "backend whose notices to print, as zinf train (default cpu)"},
        {"hidden_size", F_INT, &hidden, NULL, "hidden size for the size \"auto\"s, without a model"},
        FLAGS_HF(fl),
        {"help", F_BOOL, &h, NULL, "this text"},
        {NULL, 0, NULL, NULL, NULL},
    };
    const char *pos[2];
    int npos;
    ZINF_TRY(zinf_comm_agree(comm, parse_flags("config", tab, argc, argv, first, pos, 2, &npos)));
    if (h || npos < 1 || strcmp(pos[0], "show") != 0) {
        if (!h)
            return zinf_comm_agree(comm, zinf_err("config: usage: zinf config show [FILE] [flags] "
                                                  "(see zinf config --help)"));
        *help = true;
        if (comm->rank == 0) {
            printf("usage: [mpirun -np N] zinf config show [FILE] [flags]\n\n"
                   "Print the fully resolved DeepSpeed config: defaults, \"auto\" values from the flags,\n"
                   "and batch sizes for this world size (N ranks under mpirun). Without FILE, the\n"
                   "embedded default.\n\nflags:\n");
            print_flags(stdout, tab);
        }
        return 0;
    }
    /* config show runs the same collectives as train's setup, under the same time limit */
    ZINF_TRY(zinf_comm_agree(comm, zinf_comm_check_env()));
    if (hidden > 0) f.hidden_size = hidden;
    if (strcmp(device, "cpu") != 0 && strcmp(device, "cuda") != 0)
        return zinf_comm_agree(comm, zinf_err("config: --device %s: expected cpu or cuda", device));
    zinf_config cfg;
    ZINF_TRY(zinf_train_resolve_config(comm, npos > 1 ? pos[1] : NULL, model, &f, &cfg));
    /* what train resolves next: the step count (known here from --max_steps only; from epochs it
     * needs the data) and the notices for the backend */
    if (f.max_steps_set && f.max_steps > 0)
        ZINF_TRY(zinf_comm_agree(comm, zinf_config_finalize_steps(&cfg, f.max_steps, &f, comm->rank == 0 ? stderr : NULL)));
    ZINF_TRY(zinf_comm_agree(comm, zinf_config_notices(&cfg, device,
                                                       comm->rank == 0 ? stderr : NULL)));
    if (comm->rank == 0) zinf_config_print(&cfg, stdout);
    return 0;
}

/* A report printed whole or not at all: fn writes it to a memory stream, which goes to stdout
 * only when fn succeeds, so a failure half-way (a bad dataset in ckpt info, activations past
 * 2^63 bytes in estimate) prints its one error line and no half report. */
static int print_whole(int (*fn)(void *ctx, FILE *out), void *ctx)
{
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    if (!mem) return zinf_errc(ZINF_ENOMEM, "out of host memory");
    int rc = fn(ctx, mem);
    if (fclose(mem) && !rc) rc = zinf_errc(ZINF_ENOMEM, "out of host memory for the report");
    if (!rc) fwrite(text, 1, len, stdout);
    free(text);
    return rc;
}
static int ckpt_info_to(void *spec, FILE *out) { return zinf_ckpt_info(spec, out); }
static int estimate_to(void *o, FILE *out) { return zinf_estimate_run(o, out, stderr); }

static int cmd_data(int argc, char **argv, int first, bool *help)
{
    const char *input = NULL, *prefix = NULL;
    double valf = 0;
    int64_t shard = 0, random_n = 0, vocab = 50257, max_length = 0;
    uint64_t seed = 1;
    bool h = false, sft = false, vocab_set = false, seed_set = false;
    sft_flags sf;
    sft_flags_defaults(&sf);
    const flag tab[] = {
        {"input", F_STR, &input, NULL, "UTF-8 text file to tokenise (without --tokenizer: bytes are tokens, vocabulary "
                                       "256); with --sft, a JSONL chat dataset, FILE or FILE#N"},
        {"out", F_PATH, &prefix, NULL, "output prefix: PREFIX_train_NNNNNN.bin, PREFIX_val_000000.bin"},
        {"val_fraction", F_DBL, &valf, NULL, "last fraction of the text kept for validation (default 0)"},
        {"shard_tokens", F_INT, &shard, NULL, "tokens per training shard at most (default 0: one shard)"},
        {"random", F_INT, &random_n, NULL, "instead of --input: N uniformly random tokens (benchmarks)"},
        {"vocab", F_INT, &vocab, &vocab_set, "vocabulary of --random tokens (default 50257)"},
        {"seed", F_U64, &seed, &seed_set, "seed of --random tokens (default 1)"},
        {"sft", F_BOOL, &sft, NULL, "--input is a chat dataset: render it with a template into SFT shards"},
        {"max_length", F_INT, &max_length, NULL, "tokens per sample at most (default 0: no limit)"},
        FLAGS_SFT(&sf),
        {"help", F_BOOL, &h, NULL, "this text"},
        {NULL, 0, NULL, NULL, NULL},
    };
    int npos;
    ZINF_TRY(parse_flags("data", tab, argc, argv, first, NULL, 0, &npos));
    if (h) {
        *help = true;
        printf("usage: zinf data --input FILE [--tokenizer PATH] --out PREFIX [--val_fraction F] [--shard_tokens N]\n"
               "       zinf data --random N --vocab V --out PREFIX [--seed S]\n"
               "       zinf data --sft --input DATA.jsonl[#N] --tokenizer DIR [--template NAME]\n"
               "                 [--max_length N] --out PREFIX\n\n"
               "Turn a text file into token shards (llm.c format) of its bytes or of a Hugging Face\n"
               "tokenizer's ids, write N random tokens for benchmarks, or render a chat dataset\n"
               "with a template into SFT shards (tokens and loss flags).\n\nflags:\n");
        print_flags(stdout, tab);
        return 0;
    }
    if (!prefix) return zinf_err("data: --out is required");
    ZINF_TRY(zinf_prefix_dir("data: --out", prefix));
    /* each mode's flags, and no other's: a flag another mode takes would be ignored */
    if (!random_n && (vocab_set || seed_set))
        return zinf_err("data: --vocab and --seed go with --random (a text's tokens are its bytes or its tokenizer's "
                        "ids; --sft's sampling seed is --data_seed)");
    if (random_n && (valf != 0 || shard != 0))
        return zinf_err("data: --random writes one training shard: --val_fraction and --shard_tokens go with --input");
    if (sft) {
        if (!input) return zinf_err("data: --sft needs --input DATA.jsonl");
        if (!sf.tokenizer) return zinf_err("data: --sft needs --tokenizer");
        if (random_n || valf != 0 || shard != 0)
            return zinf_err("data: --sft takes no --random, --val_fraction or --shard_tokens "
                            "(use --split_dataset_ratio or --val_dataset)");
        if (max_length < 0 || max_length > INT32_MAX)
            return zinf_err("data: --max_length %lld is out of range", (long long)max_length);
        zinf_chat_data_opts o;
        ZINF_TRY(sft_opts("data", &sf, &o));
        o.input = input, o.prefix = prefix, o.max_length = max_length;
        return zinf_chat_make_shards(&o, stdout, NULL);
    }
    if (max_length || sft_flags_given(&sf))
        return zinf_err("data: --template, --system, --max_length, --truncation_strategy, --split_dataset_ratio, "
                        "--data_seed and --val_dataset need --sft");
    if (random_n) {
        if (input || sf.tokenizer) return zinf_err("data: --random and --input or --tokenizer exclude each other");
        if (vocab > INT32_MAX) return zinf_err("data: --vocab %lld is too large", (long long)vocab);
        return zinf_data_make_random(prefix, random_n, (int)vocab, seed, stdout);
    }
    if (!input) return zinf_err("data: --input (or --random) is required");
    if (sf.tokenizer) return zinf_data_make_tokens(input, sf.tokenizer, prefix, valf, shard, stdout);
    return zinf_data_make_bytes(input, prefix, valf, shard, stdout, stderr);
}

/* ---------------------------------------------------------------- estimate ----------------- */
static int cmd_estimate(int argc, char **argv, int first, bool *help)
{
    zinf_estimate_opts o;
    zinf_estimate_opts_defaults(&o);
    bool h = false;
    /* spelt with dashes, as zinf-estimate(1) and the README have always written them */
    const flag tab[] = {
        {"model", F_STR, &o.model, NULL, "preset, Hugging Face model directory or config.json (required)"},
        {"config", F_STR, &o.config, NULL, "DeepSpeed JSON config, or ms-swift's built-in name (zero3_offload, ...): only its row, with its buffer sizes"},
        {"nodes", F_INT, &o.nodes, NULL, "number of nodes (default 1)"},
        {"gpus-per-node", F_INT, &o.gpus_per_node, NULL, "GPUs, that is ranks, per node (default 1)"},
        {"precision", F_STR, &o.precision, NULL, "mixed (the ZeRO paper's 2+2+12 bytes per parameter) or fp32 (4+4+8, as the "
         "CPU backend holds them); default: what zinf's engine holds in the precision --bf16/--fp16 or the config "
         "give, as train would (16-bit: 2+4+12, fp32 gradient accumulators; neither: fp32)"},
        {"bf16", F_BOOL, &o.bf16, NULL, "bf16 compute, as zinf train --bf16 (fills bf16.enabled \"auto\")"},
        {"fp16", F_BOOL, &o.fp16, NULL, "fp16 compute, as zinf train --fp16 (fills fp16.enabled \"auto\")"},
        {"stage", F_INT, &o.stage, &o.stage_set, "only the row of this stage (0-3), without offload; not with --config"},
        {"print-bytes", F_BOOL, &o.print_bytes, NULL, "instead of the table, one line of exact bytes per rank at rest "
         "(param= ... total=, a run's mem_* figures); with --config also device= host= nvme="},
        {"micro-batch", F_INT, &o.micro_batch, &o.micro_batch_set, "also print the activation memory per GPU for "
         "micro-batches of N sequences"},
        {"seq-len", F_INT, &o.seq_len, &o.seq_len_set, "with --micro-batch: tokens per sequence (default: the model's "
         "n_positions)"},
        {"recompute", F_STR, &o.recompute, NULL, "with --micro-batch: none, full or keep-attention (default none; full "
         "when the config has an activation_checkpointing block)"},
        {"help", F_BOOL, &h, NULL, "this text"},
        {NULL, 0, NULL, NULL, NULL},
    };
    int npos;
    ZINF_TRY(parse_flags("estimate", tab, argc, argv, first, NULL, 0, &npos));
    if (h) {
        *help = true;
        printf("usage: zinf estimate --model M [--config C] [--nodes N] [--gpus-per-node G]\n"
               "                     [--bf16 | --fp16 | --precision mixed|fp32] [--stage S] [--print-bytes]\n"
               "                     [--micro-batch B [--seq-len T] [--recompute none|full|keep-attention]]\n\n"
               "Print per-GPU and per-node memory for the model states and ZeRO's buffers, for every stage and\n"
               "offload choice, or only for the stage and offload devices of the DeepSpeed config C, or only\n"
               "for stage S without offload. Needs no MPI.\nPresets: %s.\n\nflags:\n",
               zinf_model_presets());
        print_flags(stdout, tab);
        printf("\nSee zinf-estimate(1).\n");
        return 0;
    }
    return print_whole(estimate_to, &o);
}

/* ---------------------------------------------------------------- io-bench ----------------- */
static int cmd_io_bench(int argc, char **argv, int first, bool *help)
{
    zinf_iobench_opts o;
    zinf_iobench_opts_defaults(&o);
    const char *paths[ZINF_IOBENCH_MAX_PATHS];
    strlist pl = {paths, 0, ZINF_IOBENCH_MAX_PATHS};
    bool h = false;
    const flag tab[] = {
        {"path", F_STRS, &pl, NULL, "directory for the test files; repeat it to stripe over several (as nvme_path lines)"},
        {"size", F_STR, &o.size, NULL, "bytes written and read back per setting, K/M/G suffixes (default 1G; 64M with --quick)"},
        {"engine", F_STR, &o.engine, NULL, "io_uring (O_DIRECT, default) or psync (buffered, as train --swap_engine psync)"},
        {"block_sizes", F_STR, &o.block_sizes, NULL, "comma list of aio.block_size values (default 128K,256K,512K,1M,4M,8M)"},
        {"queue_depths", F_STR, &o.queue_depths, NULL, "comma list of aio.queue_depth values (default 4,8,16,32,64)"},
        {"parallelism", F_STR, &o.parallelism, NULL, "comma list of aio.intra_op_parallelism values (default 1,2)"},
        {"single_submit", F_STR, &o.single_submit, NULL, "aio.single_submit: both, true or false (default false)"},
        {"overlap_events", F_STR, &o.overlap_events, NULL, "aio.overlap_events: both, true or false (default true)"},
        {"quick", F_BOOL, &o.quick, NULL, "a small sweep (128K,1M x 4,32 x 1,2; 64M) for tests; lists given still apply"},
        {"help", F_BOOL, &h, NULL, "this text"},
        {NULL, 0, NULL, NULL, NULL},
    };
    int npos;
    ZINF_TRY(parse_flags("io-bench", tab, argc, argv, first, NULL, 0, &npos));
    if (h) {
        *help = true;
        printf("usage: zinf io-bench --path DIR [--path DIR ...] [--size BYTES] [--engine io_uring|psync]\n"
               "                     [--block-sizes LIST] [--queue-depths LIST] [--parallelism LIST]\n"
               "                     [--single-submit both|true|false] [--overlap-events both|true|false] [--quick]\n\n"
               "Measure the NVMe swapper's write and read speed for every combination of the \"aio\" settings\n"
               "(as DeepSpeed's ds_nvme_tune), beside a plain O_DIRECT loop on the same paths, and print the\n"
               "best combination as a ready-to-paste \"aio\" block.\n\nflags:\n");
        print_flags(stdout, tab);
        return 0;
    }
    o.paths = paths;
    o.npaths = pl.n;
    return zinf_iobench_run(&o, stdout);
}

/* ---------------------------------------------------------------- ckpt --------------------- */
static int cmd_ckpt(int argc, char **argv, int first, bool *help)
{
    const char *out = NULL, *format = "hf", *dtype = NULL, *max_shard = NULL;
    bool h = false;
    const flag tab[] = {
        {"out", F_PATH, &out, NULL, "export: output directory (created when missing)"},
        {"format", F_STR, &format, NULL, "export: hf (a Hugging Face directory: config.json, generation_config.json, "
                                          "model.safetensors or shards and their index; default; also spelled "
                                          "safetensors) or hdf5 (weights.h5)"},
        {"dtype", F_STR, &dtype, NULL, "export: fp32, bf16 or fp16 (default fp32 for hf, bf16 for hdf5)"},
        {"max_shard_size", F_STR, &max_shard, NULL, "export, hf: the most bytes of tensors in one safetensors file, as HF "
                                                    "spells it (\"5GB\" = 5e9 bytes, the default; \"500MB\", \"2GiB\")"},
        {"help", F_BOOL, &h, NULL, "this text"},
        {NULL, 0, NULL, NULL, NULL},
    };
    const char *pos[2];
    int npos;
    ZINF_TRY(parse_flags("ckpt", tab, argc, argv, first, pos, 2, &npos));
    if (h) {
        *help = true;
        printf("usage: zinf ckpt info PATH\n"
               "       zinf ckpt verify PATH\n"
               "       zinf ckpt export PATH --out DIR [--format hf|hdf5] [--dtype fp32|bf16|fp16] [--max_shard_size 5GB]\n\n"
               "Inspect, check or convert a checkpoint of zinf train --save_steps. PATH is a checkpoint-STEP.h5\n"
               "or a directory whose `latest` names one. info prints the run's state, the model and its\n"
               "tensors; verify recomputes every dataset's checksum; export writes the weights as a\n"
               "Hugging Face directory (sharded past --max_shard_size) or as one HDF5 file.\n\nflags:\n");
        print_flags(stdout, tab);
        return 0;
    }
    const char *sub = npos > 0 ? pos[0] : "";
    bool info = !strcmp(sub, "info"), verify = !strcmp(sub, "verify"), exporting = !strcmp(sub, "export");
    if (!npos) return zinf_err("ckpt: a subcommand is required: info, verify or export (see zinf ckpt --help)");
    if (!info && !verify && !exporting)
        return zinf_err("ckpt: unknown subcommand '%s': expected info, verify or export", sub);
    if (npos < 2) return zinf_err("ckpt %s: PATH (a checkpoint file or directory) is required", sub);
    if (!exporting && (out || dtype || max_shard || strcmp(format, "hf")))
        return zinf_err("ckpt %s: --out, --format, --dtype and --max_shard_size apply to export only", sub);
    if (info) return print_whole(ckpt_info_to, (void *)pos[1]);
    if (verify) return zinf_ckpt_verify(pos[1], stdout);
    if (!out) return zinf_err("ckpt export: --out DIR is required");
    zinf_export_opts x = {0};
    if (!strcmp(format, "hf") || !strcmp(format, "safetensors")) x.fmt = ZINF_EXPORT_HF;
    else if (!strcmp(format, "hdf5")) x.fmt = ZINF_EXPORT_HDF5;
    else return zinf_err("ckpt export: --format %s: expected hf (or safetensors) or hdf5", format);
    if (!dtype) x.dt = x.fmt == ZINF_EXPORT_HDF5 ? ZINF_BF16 : ZINF_F32;
    else if (!strcmp(dtype, "fp32")) x.dt = ZINF_F32;
    else if (!strcmp(dtype, "bf16")) x.dt = ZINF_BF16;
    else if (!strcmp(dtype, "fp16")) x.dt = ZINF_F16;
    else return zinf_err("ckpt export: --dtype %s: expected fp32, bf16 or fp16", dtype);
    if (max_shard && x.fmt != ZINF_EXPORT_HF) return zinf_err("ckpt export: --max_shard_size applies to --format hf only");
    if (max_shard && zinf_st_parse_size(max_shard, &x.max_shard))
        return zinf_err_prefix(ZINF_EINVAL, "ckpt export: --max_shard_size");
    return zinf_ckpt_export(pos[1], out, &x, stdout, 0);
}

/* ---------------------------------------------------------------- generate ----------------- */
static int cmd_generate(int argc, char **argv, int first, bool *help)
{
    zinf_gen_opts o;
    zinf_gen_opts_defaults(&o);
    bool h = false, gen_set[4] = {false, false, false, false};
    const flag tab[] = {
        {"model", F_STR, &o.model, NULL, "a Hugging Face model directory (config.json, safetensors, tokenizer.json)"},
        {"checkpoint", F_STR, &o.checkpoint, NULL, "instead of --model: a zinf checkpoint (file, or run directory and its latest)"},
        {"tokenizer", F_STR, &o.tokenizer, NULL, "tokenizer.json or its directory (default: --model; required with --checkpoint)"},
        {"prompt", F_STR, &o.prompt, NULL, "the user message"},
        {"system", F_STR, &o.system, NULL, "the system message (default: the template's)"},
        {"template", F_STR, &o.template_name, NULL, "chat template (default: detected from the model directory)"},
        {"raw", F_BOOL, &o.raw, NULL, "feed the prompt text as it is, without a template"},
        {"max_new_tokens", F_INT, &o.max_new_tokens, &gen_set[0], "tokens generated at most (default 128)"},
        {"temperature", F_DBL, &o.temperature, &gen_set[1], "sampling temperature (default 0: greedy)"},
        {"top_p", F_DBL, &o.top_p, &gen_set[2], "nucleus sampling: the most likely tokens up to this probability (default 1)"},
        {"seed", F_U64, &o.seed, &gen_set[3], "the sampler's seed, with --temperature above 0 (default 0)"},
        {"device", F_STR, &o.device, NULL, "cpu (default) or cuda"},
        {"prompt_ids", F_STR, &o.prompt_ids, NULL, "testing: the prompt as token ids 1,2,3 (no template); the reply printed as ids"},
        {"show_prompt", F_BOOL, &o.show_prompt, NULL, "print the prompt text the template makes, and stop"},
        {"help", F_BOOL, &h, NULL, "this text"},
        {NULL, 0, NULL, NULL, NULL},
    };
    int npos;
    ZINF_TRY(parse_flags("generate", tab, argc, argv, first, NULL, 0, &npos));
    if (h) {
        *help = true;
        printf("usage: zinf generate --model DIR --prompt TEXT [--system TEXT] [--template NAME | --raw]\n"
               "       zinf generate --checkpoint PATH --tokenizer PATH --prompt TEXT [...]\n"
               "                     [--max_new_tokens N] [--temperature T] [--top_p P] [--seed S]\n\n"
               "Print a model's reply to a user message: the chat template's prompt up to the assistant\n"
               "header, then tokens greedily (or sampled) until the end of the turn, the EOS, or\n"
               "--max_new_tokens. The weights are read alone, without optimizer state.\n\nflags:\n");
        print_flags(stdout, tab);
        return 0;
    }
    /* flags with nothing to act on: the prompt alone is printed, or greedy decoding draws nothing */
    static const char *const gen_names[] = {"--max_new_tokens", "--temperature", "--top_p", "--seed"};
    for (int i = 0; o.show_prompt && i < 4; i++)
        if (gen_set[i])
            return zinf_err("generate: %s: --show_prompt prints the prompt and stops, generating nothing", gen_names[i]);
    if (gen_set[3] && o.temperature == 0)
        return zinf_err("generate: --seed %llu seeds the sampler, and --temperature 0 is greedy: give a temperature "
                        "above 0", (unsigned long long)o.seed);
    return zinf_generate(&o, stdout);
}

/* ---------------------------------------------------------------- zinf-launch -------------- */
int zinf_launch_cli_main(int argc, char **argv)
{
    zinf_launch_opts o;
    zinf_launch_opts_defaults(&o);
    bool h = false, dry = false, bind = true, bind_set = false;
    const char *rank_bind = NULL;
    const flag tab[] = {
        {"hostfile", F_STR, &o.hostfile, NULL, "DeepSpeed hostfile of 'HOST slots=N' lines (-H; default /job/hostfile when it exists, else this node)"},
        {"include", F_STR, &o.include, NULL, "only these hosts and slots: HOST[:SLOT,...][@HOST...] (-i)"},
        {"exclude", F_STR, &o.exclude, NULL, "all but these hosts and slots, same syntax (-e)"},
        {"num_nodes", F_INT, &o.num_nodes, NULL, "run on the first N hosts"},
        {"num_gpus", F_INT, &o.num_gpus, NULL, "ranks per host: its first N slots (without a GPU: N CPU ranks here)"},
        {"master_addr", F_STR, &o.master_addr, NULL, "accepted for DeepSpeed's and torchrun's command lines (also MASTER_ADDR); MPI does the rendezvous"},
        {"master_port", F_INT, &o.master_port, NULL, "accepted for DeepSpeed's and torchrun's command lines (also MASTER_PORT); MPI does the rendezvous"},
        {"nproc_per_node", F_STR, &o.nproc_per_node, NULL, "torchrun's --num_gpus: ranks per node, N, gpu or auto (also NPROC_PER_NODE)"},
        {"nnodes", F_INT, &o.nnodes, NULL, "torchrun's --num_nodes (also NNODES); more than 1 needs a hostfile"},
        {"node_rank", F_INT, &o.node_rank, NULL, "torchrun's node-by-node start (also NODE_RANK): refused with the command that starts every node from one place"},
        {"bind_cores_to_rank", F_BOOL, &bind, &bind_set, "bind each rank to its share of its node's cores, OMP_NUM_THREADS as many (default true; false: unbound, as many threads as cores)"},
        {"bind_core_list", F_STR, &o.bind_core_list, NULL, "the CPUs to share out among each node's ranks, e.g. 0-27,56-83 (default: every core)"},
        {"rank_bind", F_STR, &rank_bind, NULL, "in the mpirun command: bind this rank (auto, cores or a CPU list) and run PROGRAM"},
        {"launcher", F_STR, &o.launcher, NULL, "openmpi (the only one; under Slurm use srun, see jobs/slurm/)"},
        {"launcher_args", F_STR, &o.launcher_args, NULL, "more mpirun arguments, split at blanks (quotes group)"},
        {"ssh_port", F_INT, &o.ssh_port, NULL, "ssh port of the hosts (mpirun --mca plm_rsh_args '-p N')"},
        {"enable_each_rank_log", F_STR, &o.each_rank_log, NULL, "each rank's output to a file under DIR (mpirun --output-filename)"},
        {"dry_run", F_BOOL, &dry, NULL, "print the mpirun command and stop"},
        {"help", F_BOOL, &h, NULL, "this text"},
        {NULL, 0, NULL, NULL, NULL},
    };
    /* DeepSpeed's short spellings of the launcher's flags */
    static const char *const shorts[] = {"-H", "--hostfile", "-i", "--include", "-e", "--exclude", NULL};
    int npos, rest;
    int rc = parse_flags_until("zinf-launch", tab, argc, argv, 1, NULL, 0, &npos, &rest, shorts);
    if (!rc && h) {
        printf("usage: zinf-launch [--hostfile FILE] [--include SPEC | --exclude SPEC] [--num_nodes N]\n"
               "                   [--num_gpus N] [--bind_core_list CPUS] [--launcher_args ARGS] [--dry-run]\n"
               "                   PROGRAM [ARGS...]\n\n"
               "Run PROGRAM (usually: zinf train ...) with one rank per GPU slot through OpenMPI's mpirun,\n"
               "from DeepSpeed's (and torchrun's) launcher options. SPEC is HOST[:SLOT[,SLOT...]][@HOST...].\n"
               "Each rank is bound to its share of its node's cores, with as many OpenMP threads\n"
               "(OMP_NUM_THREADS, unless set). NCCL_*, ZINF_*, UCX_*, OMP_*, PATH and LD_LIBRARY_PATH, and the\n"
               "lines of .deepspeed_env (DS_ENV_FILE, ./ or ~/), reach every rank. NPROC_PER_NODE, NNODES,\n"
               "NODE_RANK, MASTER_ADDR and MASTER_PORT are read as torchrun reads them. The command is\n"
               "printed before it runs.\n\nflags:\n");
        print_flags(stdout, tab);
        return 0;
    }
    if (rc) {
        const char *m = zinf_errmsg();
        fprintf(stderr, "zinf-launch: error: %s\n", strncmp(m, "zinf-launch: ", 13) ? m : m + 13);
        return 2;
    }
    if (rest >= argc) {
        /* `--dry-run true`: a true/false after a switch is its value here, where DeepSpeed's
         * store_true switches take none and would launch the program `true` */
        const char *last = argv[argc - 1], *prev = argc > 2 ? argv[argc - 2] : "";
        const flag *sw = NULL;
        for (const flag *t = tab; t->name && !strchr(prev, '=') && !strncmp(prev, "--", 2); t++)
            if (t->type == F_BOOL && flag_name_eq(t->name, prev + 2)) sw = t;
        if (sw && (!strcasecmp(last, "true") || !strcasecmp(last, "false")))
            fprintf(stderr, "zinf-launch: error: no program to launch: '%s' after %s is read as its value; to launch "
                            "the program %s, write %s -- %s\n", last, prev, last, prev, last);
        else
            fprintf(stderr, "zinf-launch: error: no program to launch (zinf-launch [flags] PROGRAM [ARGS...]; "
                            "see zinf-launch --help)\n");
        return 2;
    }
    o.prog = argv + rest;
    if (rank_bind) {
        /* one rank of the mpirun command: bind it, then become PROGRAM */
        if (zinf_launch_rank_bind(rank_bind, stderr)) {
            fprintf(stderr, "zinf-launch: error: %s\n", zinf_errmsg());
            return 2;
        }
        execvp(o.prog[0], o.prog);
        fprintf(stderr, "zinf-launch: error: cannot run %s: %s\n", o.prog[0], strerror(errno));
        return 127;
    }
    if (bind_set) o.bind_cores = bind;
    if (!o.hostfile && access("/job/hostfile", R_OK) == 0) {
        o.hostfile = "/job/hostfile"; /* DeepSpeed's default */
        fprintf(stderr, "zinf-launch: using /job/hostfile\n");
    }
    const char *mpirun = getenv("MPIRUN");
    if (mpirun && *mpirun) o.mpirun = mpirun;
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        self[n] = 0;
        char *slash = strrchr(self, '/');
        if (slash) { *slash = 0; o.self_dir = self; }
    }
    o.local_gpus = zinf_launch_count_gpus();
    o.cuda_visible = getenv("CUDA_VISIBLE_DEVICES");
    /* DeepSpeed's environment file: DS_ENV_FILE, else .deepspeed_env here, else in $HOME */
    char envf[4096] = "";
    const char *dsenv = getenv("DS_ENV_FILE"), *home = getenv("HOME");
    if (dsenv && *dsenv) snprintf(envf, sizeof envf, "%s", dsenv);
    else if (access(".deepspeed_env", R_OK) == 0) snprintf(envf, sizeof envf, ".deepspeed_env");
    else if (home && snprintf(envf, sizeof envf, "%s/.deepspeed_env", home) > 0 && access(envf, R_OK) != 0) envf[0] = 0;
    if (envf[0]) o.env_file = envf;
    extern char **environ;
    o.environ = environ;
    char **cmd;
    int nranks;
    if (zinf_launch_plan(&o, &cmd, &nranks, stderr)) {
        fprintf(stderr, "zinf-launch: error: %s\n", zinf_errmsg());
        return 2;
    }
    char *line = zinf_launch_cmdline(cmd);
    fprintf(stderr, "zinf-launch: %s\n", line ? line : cmd[0]);
    free(line);
    if (dry) {
        zinf_launch_argv_free(cmd);
        return 0;
    }
    fflush(NULL);
    /* the slots of a hostfile are GPU indices: a CUDA_VISIBLE_DEVICES here must not renumber
     * them for the ranks that mpirun starts on this node */
    if (o.hostfile) unsetenv("CUDA_VISIBLE_DEVICES");
    /* mpirun takes our place: signals (Slurm's warning, a Ctrl-C) reach it, its status is ours */
    execvp(cmd[0], cmd);
    fprintf(stderr, "zinf-launch: error: cannot run %s: %s\n", cmd[0], strerror(errno));
    zinf_launch_argv_free(cmd);
    return 127;
}

/* ---------------------------------------------------------------- plot --------------------- */
static int cmd_plot(int argc, char **argv, int first, bool *help)
{
    zinf_plot_opts o = {.png = ZINF_PLOT_PNG_AUTO, .log_y = ZINF_PLOT_LOG_AUTO};
    const char *log_y = "auto";
    bool png = false, png_set = false, h = false;
    const flag tab[] = {
        {"out", F_PATH, &o.out, NULL, "the figure: a directory (DIR/loss.svg), FILE.svg or FILE.png, or a prefix for "
                                     ".svg and .png; default RUN_DIR/loss.svg, required with several runs"},
        {"title", F_STR, &o.title, NULL, "the figure's title (default: the runs' names)"},
        {"png", F_BOOL, &png, &png_set, "true: a PNG beside the SVG or an error; false: no PNG (default: a PNG where "
                                        "rsvg-convert or ImageMagick's convert is on PATH)"},
        {"log_y", F_STR, &log_y, NULL, "loss and gradient norm on a log scale: auto (when they span more than 10x, "
                                       "default), true or false"},
        {"help", F_BOOL, &h, NULL, "this text"},
        {NULL, 0, NULL, NULL, NULL},
    };
    const char *pos[64];
    int npos;
    ZINF_TRY(parse_flags("plot", tab, argc, argv, first, pos, 64, &npos));
    if (h) {
        *help = true;
        printf("usage: zinf plot [--out PATH] [--title T] [--png [true|false]] [--log_y auto|true|false]\n"
               "                 RUN_DIR|METRICS_FILE...\n\n"
               "Draw the metrics.jsonl of one or several zinf train runs as one SVG figure: loss (training\n"
               "and validation), gradient norm, learning rate and tokens/s against the step, one colour per\n"
               "run (at most %d), and a PNG beside it where a converter is installed.\n\nflags:\n",
               ZINF_PLOT_MAX_RUNS);
        print_flags(stdout, tab);
        return 0;
    }
    if (png_set) o.png = png ? ZINF_PLOT_PNG_YES : ZINF_PLOT_PNG_NO;
    if (!strcmp(log_y, "auto")) o.log_y = ZINF_PLOT_LOG_AUTO;
    else if (!strcmp(log_y, "true")) o.log_y = ZINF_PLOT_LOG_YES;
    else if (!strcmp(log_y, "false")) o.log_y = ZINF_PLOT_LOG_NO;
    else return zinf_err("plot: --log_y %s: expected auto, true or false", log_y);
    o.inputs = pos;
    o.ninputs = npos;
    return zinf_plot(&o, stdout, stderr);
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: zinf COMMAND [flags]        (under mpirun/srun for more than one rank)\n\n"
            "commands:\n"
            "  train          train a GPT-2 or Llama-family model with a DeepSpeed config (zinf train --help)\n"
            "  config show    print the resolved DeepSpeed config (zinf config --help)\n"
            "  data           make token shards from a text file or a chat dataset (zinf data --help)\n"
            "  estimate       memory per GPU and per node for each ZeRO stage and offload choice\n"
            "                 (zinf estimate --help)\n"
            "  io-bench       measure NVMe swap speed over the aio settings; print the best \"aio\" block\n"
            "                 (zinf io-bench --help)\n"
            "  ckpt           inspect, verify or export a checkpoint: info, verify, export\n"
            "                 (zinf ckpt --help)\n"
            "  plot           draw runs' metrics.jsonl (loss, validation loss, learning rate, tokens/s)\n"
            "                 as an SVG figure (zinf plot --help)\n"
            "  generate       a model's reply to a prompt, through its chat template (zinf generate --help)\n\n"
            "  --help         this text\n"
            "  --version      the version\n\n"
            "See zinf(1), zinf-train(1), zinf-config(5), zinf-data(1), zinf-estimate(1),\n"
            "zinf-io-bench(1), zinf-ckpt(1), zinf-plot(1), zinf-generate(1), zinf-launch(1) (the launcher:\n"
            "zinf-launch --help).\n");
}

int zinf_cli_main(int argc, char **argv)
{
    if (argc < 2) { usage(stderr); return 2; }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) { usage(stdout); return 0; }
    if (!strcmp(cmd, "--version")) {
        printf("zinf %s\n", PACKAGE_VERSION);
        return 0;
    }
    bool help = false;
    /* the commands that need no MPI (ckpt reads files on one process): their error is printed here */
    static const struct { const char *name; int (*run)(int, char **, int, bool *); } serial[] = {
        {"estimate", cmd_estimate}, {"data", cmd_data}, {"io-bench", cmd_io_bench}, {"ckpt", cmd_ckpt},
        {"plot", cmd_plot}, {"generate", cmd_generate}};
    for (size_t i = 0; i < sizeof serial / sizeof serial[0]; i++) {
        if (strcmp(cmd, serial[i].name)) continue;
        if (serial[i].run(argc, argv, 2, &help)) { fprintf(stderr, "zinf: error: %s\n", zinf_errmsg()); return 1; }
        return 0;
    }
    if (strcmp(cmd, "train") && strcmp(cmd, "config")) {
        fprintf(stderr, "zinf: error: unknown command '%s' (see zinf --help)\n", cmd);
        return 2;
    }
    /* before MPI_Init, whose start-up takes long on many nodes: a stop asked for from here on
     * ends the run with 75 (zinf_train_run acts on it) */
    if (!strcmp(cmd, "train")) zinf_train_catch_signals();
    zinf_comm comm;
    if (zinf_comm_init(&comm, &argc, &argv)) { fprintf(stderr, "zinf: error: %s\n", zinf_errmsg()); return 1; }
    int rc = !strcmp(cmd, "train") ? cmd_train(&comm, argc, argv, 2, &help) : cmd_config(&comm, argc, argv, 2, &help);
    /* every error that reaches here was printed once: agreed on (zinf_comm_agree) or by the
     * failing rank itself */
    zinf_comm_finalize(&comm);
    return rc == ZINF_TRAIN_STOPPED ? ZINF_EXIT_STOPPED : rc ? 1 : 0;
}
