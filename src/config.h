/* config: DeepSpeed JSON -> one typed, validated zinf_config.
 * Owns: reading the file (with // and block comments), DeepSpeed's code defaults, "auto" values
 * filled from the HF/ms-swift flags (zinf_flags), the batch-size rule, validation with messages
 * that name the key by its JSON path, warnings for unknown keys with the nearest known key, and
 * printing the resolved config (`zinf config show`). */
#ifndef ZINF_CONFIG_H
#define ZINF_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* ---------- command-line flags that fill "auto" values and absent keys (HF TrainingArguments) */
typedef struct zinf_flags {
    /* each *_set is true when the flag was given on the command line */
    int64_t per_device_train_batch_size; bool per_device_train_batch_size_set;
    const char *per_device_train_batch_size_opt; /* its name in messages where a command spells it
                                                  * otherwise (zinf estimate: --micro-batch); NULL:
                                                  * --per_device_train_batch_size */
    int64_t gradient_accumulation_steps;  bool gradient_accumulation_steps_set;
    double learning_rate;   bool learning_rate_set;   /* HF default 5e-5 */
    double weight_decay;    bool weight_decay_set;    /* 0.0 */
    double adam_beta1;      bool adam_beta1_set;      /* 0.9 */
    double adam_beta2;      bool adam_beta2_set;      /* 0.999 */
    double adam_epsilon;    bool adam_epsilon_set;    /* 1e-8 */
    double max_grad_norm;   bool max_grad_norm_set;   /* 1.0 */
    int64_t warmup_steps;   bool warmup_steps_set;    /* 0 */
    double warmup_ratio;    bool warmup_ratio_set;    /* 0.0; used when warmup_steps is not set */
    const char *lr_scheduler_type; bool lr_scheduler_type_set; /* HF's schedule when the config has no
                                                                * scheduler block; HF's default linear */
    double min_lr;          bool min_lr_set;          /* cosine_with_min_lr's floor */
    double num_train_epochs; bool num_train_epochs_set; /* 3.0 */
    int64_t max_steps;      bool max_steps_set;       /* -1 = derive from epochs */
    int64_t max_length;     bool max_length_set;      /* sequence length T */
    bool bf16;              bool bf16_set;
    bool fp16;              bool fp16_set;
    const char *torch_dtype; bool torch_dtype_set;   /* bfloat16, float16, float32: sets --bf16/--fp16
                                                      * when they are not given (ms-swift's rule) */
    int64_t logging_steps;  bool logging_steps_set;
    int64_t eval_steps;     bool eval_steps_set;
    int64_t save_steps;     bool save_steps_set;
    /* HF's interval strategies: steps (the *_steps interval), epoch (at each epoch's end) or no */
    const char *logging_strategy; bool logging_strategy_set;
    const char *eval_strategy;    bool eval_strategy_set;
    const char *save_strategy;    bool save_strategy_set;
    double comm_timeout;    bool comm_timeout_set;    /* seconds, 0 = no limit (zinf train) */
    int64_t hidden_size;    /* from the model: fills the size "auto"s; 0 = unknown */
    int64_t total_steps;    /* resolved number of optimizer steps for schedulers; 0 = unknown */
} zinf_flags;

void zinf_flags_defaults(zinf_flags *f);
/* Every given flag against the rule of the config key it fills (--learning_rate as
 * optimizer.params.lr, --per_device_train_batch_size as train_micro_batch_size_per_gpu, ...), or
 * its own rule where it stands for no key (--logging_steps, --num_train_epochs, ...): one value,
 * one rule, whichever way it arrives. zinf_config_parse calls it first. 0, or ZINF_EINVAL with
 * "--FLAG VALUE: expected ..." in zinf_errmsg(). */
int zinf_flags_check(const zinf_flags *f);

/* ---------- the resolved config ------------------------------------------------------------ */
typedef enum { ZINF_DEV_NONE = 0, ZINF_DEV_CPU = 1, ZINF_DEV_NVME = 2 } zinf_offload_device;

typedef struct zinf_offload_cfg {
    zinf_offload_device device; /* "none" | "cpu" | "nvme" */
    char nvme_path[1024];       /* "" when not given */
    bool pin_memory;
    int64_t buffer_count;       /* offload_param: 5; offload_optimizer: 4 */
    int64_t buffer_size;        /* offload_param only: 1e8 */
    int64_t max_in_cpu;         /* offload_param only: 1e9 */
    bool pipeline_read, pipeline_write; /* offload_optimizer only */
    bool fast_init;             /* offload_optimizer only */
    double ratio;               /* offload_optimizer only: 1.0 */
} zinf_offload_cfg;

typedef enum {
    ZINF_SCHED_NONE = 0, ZINF_SCHED_WARMUP_LR, ZINF_SCHED_WARMUP_DECAY_LR,
    ZINF_SCHED_WARMUP_COSINE_LR, ZINF_SCHED_ONE_CYCLE, ZINF_SCHED_LR_RANGE_TEST,
    /* the HF Trainer's own schedules (--lr_scheduler_type), built when the config has no
     * scheduler block: transformers' get_scheduler, warmup_num_steps and total_num_steps */
    ZINF_SCHED_HF_LINEAR, ZINF_SCHED_HF_COSINE, ZINF_SCHED_HF_COSINE_MIN_LR, ZINF_SCHED_HF_CONSTANT,
    ZINF_SCHED_HF_CONSTANT_WARMUP
} zinf_sched_type;

typedef struct zinf_sched_cfg {
    zinf_sched_type type;
    /* WarmupLR / WarmupDecayLR */
    double warmup_min_lr, warmup_max_lr;
    int64_t warmup_num_steps;
    int warmup_type_linear;     /* 0 = "log" (default), 1 = "linear" */
    int64_t total_num_steps;    /* WarmupDecayLR, WarmupCosineLR */
    /* WarmupCosineLR */
    double warmup_min_ratio, cos_min_ratio;
    /* cosine_with_min_lr: the floor (--min_lr) */
    double hf_min_lr;
    /* OneCycle */
    double cycle_min_lr, cycle_max_lr, decay_lr_rate;
    int64_t cycle_first_step_size, cycle_second_step_size; /* second < 0: same as first */
    int64_t cycle_first_stair_count, cycle_second_stair_count, decay_step_size;
    bool cycle_momentum;
    double cycle_min_mom, cycle_max_mom, decay_mom_rate;
    /* LRRangeTest */
    double lr_range_test_min_lr, lr_range_test_step_rate;
    int64_t lr_range_test_step_size;
    bool lr_range_test_staircase;
} zinf_sched_cfg;

typedef enum { ZINF_OPT_ADAMW = 0, ZINF_OPT_ADAM = 1 } zinf_opt_type;

typedef struct zinf_config {
    char path[1024];            /* the file it came from ("" for the embedded default) */
    int world_size;

    /* batch: train_batch = micro x grad_accum x world, all resolved */
    int64_t train_batch_size, train_micro_batch_size_per_gpu, gradient_accumulation_steps;

    double gradient_clipping;   /* 0 = off */
    int64_t steps_per_print;    /* null (-1): DeepSpeed prints nothing periodically */
    bool wall_clock_breakdown;
    bool prescale_gradients;
    double gradient_predivide_factor; /* 1.0 */
    bool sparse_gradients;

    /* precision */
    bool fp16, bf16;
    double fp16_loss_scale;     /* 0 = dynamic */
    int64_t fp16_initial_scale_power; /* 16 */
    int64_t fp16_loss_scale_window;   /* 1000 */
    int64_t fp16_hysteresis;          /* 2 */
    bool fp16_consecutive_hysteresis; /* false */
    double fp16_min_loss_scale;       /* 1 */

    /* optimizer */
    bool has_optimizer;         /* false: "optimizer" absent -> AdamW from the flags */
    zinf_opt_type opt_type;
    double lr, beta1, beta2, eps, weight_decay;
    bool adam_w_mode;           /* effective: type AdamW, or Adam with adam_w_mode (default true) */
    bool bias_correction;       /* true */

    zinf_sched_cfg sched;

    /* zero_optimization */
    int zero_stage;             /* 0 */
    bool contiguous_gradients;  /* true */
    bool overlap_comm;          /* true for stage 3, false otherwise */
    bool reduce_scatter;        /* true */
    int64_t reduce_bucket_size;         /* 5e8 */
    int64_t allgather_bucket_size;      /* 5e8 */
    bool allgather_partitions;          /* true */
    int64_t sub_group_size;             /* 1e9 */
    int64_t stage3_prefetch_bucket_size;        /* 5e7 */
    int64_t stage3_param_persistence_threshold; /* 1e5 */
    int64_t stage3_model_persistence_threshold; /* INT64_MAX */
    int64_t stage3_max_live_parameters;         /* 1e9 */
    int64_t stage3_max_reuse_distance;          /* 1e9 */
    bool stage3_gather_16bit_weights_on_model_save; /* false */
    bool round_robin_gradients;
    bool elastic_checkpoint;
    zinf_offload_cfg offload_optimizer, offload_param;

    /* aio */
    int64_t aio_block_size;     /* 1048576 */
    int64_t aio_queue_depth;    /* 8 */
    int64_t aio_intra_op_parallelism; /* 1 */
    bool aio_single_submit;     /* false */
    bool aio_overlap_events;    /* true */
    bool aio_use_gds;           /* false */

    /* activation_checkpointing: present => recompute each block in backward */
    bool activation_checkpointing;
    bool ac_partition_activations, ac_cpu_checkpointing, ac_contiguous_memory_optimization;
    bool ac_synchronize_checkpoint_boundary, ac_profile;
    /* zinf: blocks recomputed (the first N); -1 every block, ZINF_RECOMPUTE_AUTO: as few as the
     * device memory left after the ZeRO states needs (train.c) */
    int64_t zinf_recompute_blocks;
    int64_t ac_number_checkpoints; /* -1 = null */

    /* checkpoint block */
    bool ckpt_tag_validation_fail; /* tag_validation "Fail" */

    /* comms_logger */
    bool comms_logger_enabled, comms_logger_verbose, comms_logger_prof_all, comms_logger_debug;

    /* flops_profiler */
    bool flops_profiler_enabled, flops_profiler_detailed;
    int64_t flops_profiler_profile_step; /* 1 */
    int64_t flops_profiler_module_depth, flops_profiler_top_modules;
    char flops_profiler_output_file[1024];

    /* from the flags: what the training loop needs that is not a DeepSpeed key */
    int64_t max_steps;          /* resolved; -1 when derived from epochs by the trainer */
    double num_train_epochs;
    int64_t seq_len;            /* --max_length, 0 = the model's n_positions */
    int64_t logging_steps, eval_steps, save_steps;

    int n_warnings;             /* how many warnings resolution printed */

    /* added after the first layout; keep new fields at the end */
    int ckpt_tag_validation;    /* checkpoint.tag_validation: 0 Ignore, 1 Warn (default), 2 Fail */
    bool torch_adam;            /* optimizer.params.torch_adam (same maths as the fused Adam) */
    bool bf16_check_grad_overflow; /* bf16.check_grad_overflow: skip a step whose norm overflows */
    int communication_data_type;   /* 0 unset, ZINF_COMM_FP16/BF16/FP32 */
    int grad_accum_dtype;          /* data_types.grad_accum_dtype: the same values */
    char swap_engine[16];       /* --swap_engine: "io_uring" (O_DIRECT) or "psync" (buffered) */
    int64_t zinf_optimizer_host_bytes; /* NVMe optimizer offload: host memory kept per rank */
    bool zinf_overlap_host_step;       /* the host step may run during the backward pass */
    /* DeepSpeed's monitors (monitor/config.py): written to output_path/job_name by rank 0 */
    bool tensorboard_enabled;
    char tensorboard_output_path[1024], tensorboard_job_name[1024]; /* "", "DeepSpeedJobName" */
    bool csv_monitor_enabled;
    char csv_monitor_output_path[1024], csv_monitor_job_name[1024];
    /* HF's --logging_strategy, --eval_strategy, --save_strategy: ZINF_IVAL_* */
    int logging_strategy, eval_strategy, save_strategy;
    int param_dtype, buffer_dtype; /* data_types.param_dtype / buffer_dtype: ZINF_COMM_*, 0 unset */
    int gradient_allreduce_op;  /* 0 "mean" (DeepSpeed's default and zinf's); 1 "sum" is refused */
} zinf_config;

/* When the loop logs, evaluates or saves: every *_steps steps, never (but logging's last step),
 * or where the data position crosses the end of an epoch (HF's IntervalStrategy) */
enum { ZINF_IVAL_STEPS = 0, ZINF_IVAL_NO = 1, ZINF_IVAL_EPOCH = 2 };

enum { ZINF_COMM_UNSET = 0, ZINF_COMM_FP16 = 1, ZINF_COMM_BF16 = 2, ZINF_COMM_FP32 = 3 };

/* What a run of this config on `backend` ("cpu", "cuda") does differently from DeepSpeed, said
 * as warnings (counted in n_warnings) and notes on `out` (NULL: only counted); an error where the
 * run cannot go on. `zinf train` and `zinf config show` both call it, so they say the same. */
int zinf_config_notices(zinf_config *cfg, const char *backend, FILE *out);

/* Parse JSON text (comments allowed) into cfg with every default applied, fill "auto" and absent
 * values from flags, apply the batch rule for world_size, and validate. Warnings (unknown keys
 * with a suggestion, keys that have no effect) go to `warn` when not NULL, one line each, prefixed
 * "zinf: warning: ". Returns 0 or ZINF_EINVAL with zinf_errmsg() naming the key by JSON path
 * (e.g. "zero_optimization.stage: expected an integer 0-3, got \"three\""). */
int zinf_config_parse(zinf_config *cfg, const char *text, size_t len, const char *source_name,
                      const zinf_flags *flags, int world_size, FILE *warn);
/* Read the file at path and parse it. */
int zinf_config_load(zinf_config *cfg, const char *path, const zinf_flags *flags, int world_size,
                     FILE *warn);
/* The config used when --config is not given: the embedded default (stage 0, AdamW from flags). */
int zinf_config_default(zinf_config *cfg, const zinf_flags *flags, int world_size, FILE *warn);
/* Once the trainer knows the number of optimizer steps (from --max_steps, or epochs x dataset):
 * fill scheduler values that were "auto" or came from the flags and need it (total_num_steps,
 * warmup_num_steps from --warmup_ratio when --warmup_steps was not given), then re-check them.
 * Before this call such values are -1. */
int zinf_config_finalize_steps(zinf_config *cfg, int64_t total_steps, const zinf_flags *flags,
                               FILE *warn);
/* ms-swift's built-in DeepSpeed config names (--deepspeed zero0 ... zero3_offload), bundled with
 * zinf as the same JSON: when `spec` is one of them, the path of its file (installed under
 * ZINF_PKGDATADIR/deepspeed, or in the source tree's jobs/configs/deepspeed when run from the
 * build tree) goes to `path` and 1 is returned; 0 when `spec` is not such a name (a file path);
 * ZINF_EINVAL when the name is known and no file is found. */
int zinf_config_builtin(const char *spec, char *path, size_t cap);

/* The keys whose values differ between two configs as zinf_config_print writes them, as
 * "path OLD -> NEW" items joined by ", " into out (cut at cap bytes); a key that only one of them
 * has (another zinf's keys) and zinf.warnings are left out. Returns how many differ, or
 * ZINF_EINVAL when either text is not a JSON object. */
int zinf_config_diff(const char *old_json, const char *new_json, char *out, size_t cap);

/* Print the resolved config as DeepSpeed JSON (every key zinf knows, with its resolved value). */
void zinf_config_print(const zinf_config *cfg, FILE *out);

#define ZINF_RECOMPUTE_AUTO (-2)

/* A loss scale the step can apply: the step multiplies in fp32, so a scale is a normal float,
 * FLT_MIN to FLT_MAX (a smaller one becomes 0 and trains nothing; a larger one is infinite).
 * fp16.loss_scale (0 aside: dynamic), fp16.min_loss_scale and a checkpoint's loss_scale obey it. */
bool zinf_loss_scale_ok(double s);

#endif
