/* test_config: the DeepSpeed config reader: defaults (DeepSpeed's code values), "auto" filled from
 * the flags, the batch rule, validation messages naming the key, unknown-key warnings, comments,
 * and the five fixture configs at the world size their numbers imply. */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "config.h"
#include "err.h"
#include "sched.h"

static const char *fixtures(void)
{
    const char *d = getenv("FIXTURES");
    return d && *d ? d : "tests/fixtures";
}

/* warnings printed by the last parse */
static char warnbuf[8192];

/* what was written to w (a tmpfile(), or NULL) into warnbuf; closes w */
static void capture(FILE *w)
{
    size_t n = 0;
    if (w) {
        rewind(w);
        n = fread(warnbuf, 1, sizeof warnbuf - 1, w);
        fclose(w);
    }
    warnbuf[n] = 0;
}

static int parse_w(zinf_config *c, const char *json, const zinf_flags *f, int world)
{
    FILE *w = tmpfile();
    int rc = zinf_config_parse(c, json, strlen(json), "cfg.json", f, world, w);
    capture(w);
    return rc;
}

static int parse(zinf_config *c, const char *json, int world)
{
    zinf_flags f;
    zinf_flags_defaults(&f);
    return parse_w(c, json, &f, world);
}

static int load(zinf_config *c, const char *name, const zinf_flags *f, int world)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", fixtures(), name);
    FILE *w = tmpfile();
    int rc = zinf_config_load(c, path, f, world, w);
    capture(w);
    return rc;
}

#define HAS(s) (strstr(zinf_errmsg(), (s)) != NULL)
#define CHECK_ERR(rc, ...)                                                                        \
    do {                                                                                          \
        const char *want_[] = {__VA_ARGS__};                                                      \
        CHECK((rc) == ZINF_EINVAL, "expected an error, rc %d", (rc));                             \
        for (size_t i_ = 0; i_ < sizeof want_ / sizeof want_[0]; i_++)                            \
            CHECK(HAS(want_[i_]), "message lacks \"%s\": %s", want_[i_], zinf_errmsg());          \
    } while (0)
#define CHECK_OK(rc) CHECK((rc) == 0, "unexpected error: %s", zinf_errmsg())

/* ---------------------------------------------------------------- fixtures */

static void test_fixtures(void)
{
    zinf_config c;
    zinf_flags f;
    int rc;

    /* cpu-offload-fp16: 32 = 4 x 2 x 4; "auto" sizes need the hidden size */
    zinf_flags_defaults(&f);
    f.hidden_size = 768;
    rc = load(&c, "seed-zero3-cpu-offload-fp16.json", &f, 4);
    CHECK_OK(rc);
    CHECK(c.train_batch_size == 32 && c.train_micro_batch_size_per_gpu == 4 &&
              c.gradient_accumulation_steps == 2,
          "batch %lld %lld %lld", (long long)c.train_batch_size,
          (long long)c.train_micro_batch_size_per_gpu, (long long)c.gradient_accumulation_steps);
    CHECK(c.zero_stage == 3 && c.fp16 && !c.bf16, "stage/precision");
    CHECK(c.offload_param.device == ZINF_DEV_CPU && c.offload_param.pin_memory, "offload_param");
    CHECK(c.offload_optimizer.device == ZINF_DEV_CPU, "offload_optimizer");
    CHECK(c.sub_group_size == 1000000000 && c.stage3_max_live_parameters == 1000000000,
          "1e9 read as an integer");
    CHECK(c.stage3_gather_16bit_weights_on_model_save, "gather 16bit");
    CHECK(c.sched.type == ZINF_SCHED_WARMUP_LR && c.sched.warmup_num_steps == 1000, "sched");
    CHECK_CLOSE(c.sched.warmup_max_lr, 3e-4, 0, 0, "warmup_max_lr");
    CHECK_CLOSE(c.lr, 3e-4, 0, 0, "lr");
    CHECK_CLOSE(c.weight_decay, 0.01, 0, 0, "weight_decay");
    CHECK_CLOSE(c.gradient_clipping, 1.0, 0, 0, "gradient_clipping");
    CHECK(c.has_optimizer && c.opt_type == ZINF_OPT_ADAMW && c.adam_w_mode, "optimizer");
    CHECK(c.reduce_bucket_size == 589824, "reduce_bucket_size %lld",
          (long long)c.reduce_bucket_size);
    CHECK(c.n_warnings == 0, "warnings: %s", warnbuf);

    /* the same file at W=3: 32 != 4 x 2 x 3 */
    rc = load(&c, "seed-zero3-cpu-offload-fp16.json", &f, 3);
    CHECK_ERR(rc, "seed-zero3-cpu-offload-fp16.json", "train_batch_size 32",
              "train_micro_batch_size_per_gpu 4", "gradient_accumulation_steps 2",
              "world size 3", "(= 24)");

    /* commented (UTF-8 in comments): 32 = 4 x 8 x 1 */
    zinf_flags_defaults(&f);
    rc = load(&c, "seed-zero3-commented.jsonc", &f, 1);
    CHECK_OK(rc);
    CHECK(c.train_batch_size == 32 && c.train_micro_batch_size_per_gpu == 4 &&
              c.gradient_accumulation_steps == 8,
          "commented batch");
    CHECK(c.zero_stage == 3 && c.fp16 && c.offload_optimizer.device == ZINF_DEV_CPU, "commented");
    CHECK(c.activation_checkpointing && c.ac_partition_activations &&
              c.ac_contiguous_memory_optimization && !c.ac_cpu_checkpointing,
          "commented activation_checkpointing");
    CHECK(!c.has_optimizer && c.opt_type == ZINF_OPT_ADAMW, "no optimizer block -> AdamW");
    CHECK_CLOSE(c.lr, 5e-5, 0, 0, "lr from the HF default");
    CHECK(c.n_warnings == 0, "warnings: %s", warnbuf);

    /* cpu-optimizer-64: train 64, gas 4 -> micro = 64 / (4 x W) */
    rc = load(&c, "seed-zero3-cpu-optimizer-64.json", &f, 2);
    CHECK_OK(rc);
    CHECK(c.train_micro_batch_size_per_gpu == 8, "W=2 micro %lld",
          (long long)c.train_micro_batch_size_per_gpu);
    rc = load(&c, "seed-zero3-cpu-optimizer-64.json", &f, 4);
    CHECK_OK(rc);
    CHECK(c.train_micro_batch_size_per_gpu == 4, "W=4 micro %lld",
          (long long)c.train_micro_batch_size_per_gpu);
    CHECK(c.reduce_bucket_size == 500000000 && c.stage3_prefetch_bucket_size == 500000000 &&
              c.stage3_param_persistence_threshold == 1000000,
          "5e8/1e6 as integers");
    CHECK(c.ac_cpu_checkpointing && c.activation_checkpointing, "cpu_checkpointing");
    CHECK_CLOSE(c.lr, 2e-5, 0, 0, "lr 2e-5");
    CHECK_CLOSE(c.beta1, 0.9, 0, 0, "FusedAdam beta1 default");
    CHECK_CLOSE(c.beta2, 0.999, 0, 0, "FusedAdam beta2 default");
    CHECK_CLOSE(c.eps, 1e-8, 0, 0, "FusedAdam eps default");
    rc = load(&c, "seed-zero3-cpu-optimizer-64.json", &f, 3);
    CHECK_ERR(rc, "train_batch_size 64 is not divisible by gradient_accumulation_steps 4 x world "
                  "size 3");

    /* auto template: per_device 1 given, hidden 768 */
    zinf_flags_defaults(&f);
    f.per_device_train_batch_size = 1, f.per_device_train_batch_size_set = true;
    f.hidden_size = 768;
    rc = load(&c, "seed-zero3-auto-template.json", &f, 2);
    CHECK_OK(rc);
    CHECK(c.reduce_bucket_size == 589824, "H^2 %lld", (long long)c.reduce_bucket_size);
    CHECK(c.stage3_prefetch_bucket_size == 530841, "0.9 H^2 %lld",
          (long long)c.stage3_prefetch_bucket_size);
    CHECK(c.stage3_param_persistence_threshold == 7680, "10 H %lld",
          (long long)c.stage3_param_persistence_threshold);
    CHECK(c.train_micro_batch_size_per_gpu == 1 && c.gradient_accumulation_steps == 1 &&
              c.train_batch_size == 2,
          "template batch %lld %lld %lld", (long long)c.train_micro_batch_size_per_gpu,
          (long long)c.gradient_accumulation_steps, (long long)c.train_batch_size);
    CHECK_CLOSE(c.lr, 5e-5, 0, 0, "auto lr");
    CHECK_CLOSE(c.beta2, 0.999, 0, 0, "auto betas");
    CHECK_CLOSE(c.eps, 1e-8, 0, 0, "auto eps");
    CHECK_CLOSE(c.weight_decay, 0.0, 0, 0, "auto weight_decay");
    CHECK(!c.fp16 && !c.bf16, "auto precision without flags");
    CHECK(c.ac_number_checkpoints == -1, "number_checkpoints null");
    CHECK(c.n_warnings == 1 && strstr(warnbuf, "compression") && strstr(warnbuf, "no effect"),
          "compression warning: %s", warnbuf);
    /* without the hidden size the size "auto"s cannot be filled */
    f.hidden_size = 0;
    rc = load(&c, "seed-zero3-auto-template.json", &f, 2);
    CHECK_ERR(rc, "zero_optimization.reduce_bucket_size", "hidden size");

    /* offload-both: no batch keys; the flag gives the micro batch */
    zinf_flags_defaults(&f);
    f.per_device_train_batch_size = 2, f.per_device_train_batch_size_set = true;
    rc = load(&c, "seed-zero3-offload-both.json", &f, 4);
    CHECK_OK(rc);
    CHECK(c.train_micro_batch_size_per_gpu == 2 && c.gradient_accumulation_steps == 1 &&
              c.train_batch_size == 8,
          "offload-both batch");
    CHECK(c.offload_param.device == ZINF_DEV_CPU && c.offload_param.pin_memory,
          "pin_memory true (the fixture says so)");
    zinf_flags_defaults(&f);
    rc = load(&c, "seed-zero3-offload-both.json", &f, 4);
    CHECK_ERR(rc, "train_batch_size", "train_micro_batch_size_per_gpu",
              "--per_device_train_batch_size");
}

/* ---------------------------------------------------------------- defaults */

static void test_defaults(void)
{
    zinf_config c;
    int rc = parse(&c, "{\"train_batch_size\": 8}", 2);
    CHECK_OK(rc);
    CHECK(c.train_micro_batch_size_per_gpu == 4 && c.gradient_accumulation_steps == 1,
          "only train -> gas 1");
    /* DeepSpeed 0.19 runtime/constants.py: GRADIENT_CLIPPING_DEFAULT = 1.0,
     * STEPS_PER_PRINT_DEFAULT = None */
    CHECK(c.gradient_clipping == 1.0, "gradient_clipping default 1.0 (code), got %g",
          c.gradient_clipping);
    /* transformers TrainingArguments: logging_steps 500, eval_steps None (= logging_steps) */
    CHECK(c.steps_per_print == -1 && c.logging_steps == 500 && c.eval_steps == 500,
          "steps_per_print null, logging and eval every 500 (HF)");
    {
        zinf_config d;
        int r2 = parse(&d, "{\"train_batch_size\": 8, \"steps_per_print\": 7}", 1);
        CHECK(r2 == 0 && d.steps_per_print == 7 && d.logging_steps == 500,
              "steps_per_print is DeepSpeed's own print, not the logging interval");
    }
    CHECK(!c.wall_clock_breakdown && !c.prescale_gradients && c.gradient_predivide_factor == 1.0,
          "top-level bools");
    CHECK(!c.fp16 && !c.bf16 && c.fp16_loss_scale == 0 && c.fp16_initial_scale_power == 16 &&
              c.fp16_loss_scale_window == 1000 && c.fp16_hysteresis == 2 &&
              !c.fp16_consecutive_hysteresis && c.fp16_min_loss_scale == 1,
          "fp16 block defaults");
    CHECK(c.zero_stage == 0 && !c.overlap_comm, "stage 0, overlap_comm false");
    CHECK(c.contiguous_gradients && c.reduce_scatter && c.allgather_partitions, "zero bools");
    CHECK(c.reduce_bucket_size == 500000000 && c.allgather_bucket_size == 500000000, "buckets");
    CHECK(c.sub_group_size == 1000000000, "sub_group_size");
    CHECK(c.stage3_prefetch_bucket_size == 50000000, "prefetch 5e7, got %lld",
          (long long)c.stage3_prefetch_bucket_size);
    CHECK(c.stage3_param_persistence_threshold == 100000, "persistence 1e5");
    CHECK(c.stage3_model_persistence_threshold == INT64_MAX, "model persistence maxsize");
    CHECK(c.stage3_max_live_parameters == 1000000000 && c.stage3_max_reuse_distance == 1000000000,
          "live/reuse 1e9");
    CHECK(!c.stage3_gather_16bit_weights_on_model_save && !c.round_robin_gradients &&
              !c.elastic_checkpoint,
          "zero off-by-default");
    CHECK(c.offload_param.device == ZINF_DEV_NONE && c.offload_optimizer.device == ZINF_DEV_NONE,
          "no offload");
    CHECK(c.offload_param.buffer_count == 5 && c.offload_param.buffer_size == 100000000 &&
              c.offload_param.max_in_cpu == 1000000000 && c.offload_param.pin_memory,
          "offload_param defaults (pin_memory true: offload_config.py)");
    CHECK(c.offload_optimizer.buffer_count == 4 && c.offload_optimizer.pin_memory &&
              c.offload_optimizer.ratio == 1.0 && !c.offload_optimizer.pipeline_read &&
              !c.offload_optimizer.fast_init,
          "offload_optimizer defaults");
    CHECK(c.aio_block_size == 1048576 && c.aio_queue_depth == 8 &&
              c.aio_intra_op_parallelism == 1 && !c.aio_single_submit && c.aio_overlap_events &&
              !c.aio_use_gds,
          "aio defaults");
    CHECK(!c.activation_checkpointing && c.ac_number_checkpoints == -1, "no act. ckpt");
    CHECK(c.ckpt_tag_validation == 1 && !c.ckpt_tag_validation_fail, "tag_validation Warn");
    CHECK(!c.comms_logger_enabled && c.comms_logger_prof_all, "comms_logger");
    CHECK(!c.flops_profiler_enabled && c.flops_profiler_profile_step == 1 &&
              c.flops_profiler_module_depth == -1 && c.flops_profiler_top_modules == 1 &&
              c.flops_profiler_detailed,
          "flops_profiler");
    CHECK(c.sched.type == ZINF_SCHED_NONE, "no scheduler");
    CHECK(c.logging_steps == 500 && c.eval_steps == 500 && c.save_steps == 500 &&
              c.max_steps == -1 && c.num_train_epochs == 3.0,
          "loop values from flags");

    rc = parse(&c, "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 3}}", 1);
    CHECK_OK(rc);
    CHECK(c.overlap_comm, "overlap_comm true at stage 3");
    rc = parse(&c, "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 2}}", 1);
    CHECK_OK(rc);
    CHECK(!c.overlap_comm, "overlap_comm false at stage 2");
    rc = parse(&c, "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 2, "
                   "\"overlap_comm\": true}}",
               1);
    CHECK_OK(rc);
    CHECK(c.overlap_comm, "overlap_comm given");
    rc = parse(&c, "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 3, "
                   "\"overlap_comm\": null}}",
               1);
    CHECK_OK(rc);
    CHECK(c.overlap_comm, "overlap_comm null = dynamic default");

    /* optimizer block present: FusedAdam defaults */
    rc = parse(&c, "{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"adam\"}}", 1);
    CHECK_OK(rc);
    CHECK(c.has_optimizer && c.opt_type == ZINF_OPT_ADAM, "adam, case-insensitive");
    CHECK(c.lr == 1e-3 && c.beta1 == 0.9 && c.beta2 == 0.999 && c.eps == 1e-8 &&
              c.weight_decay == 0 && c.bias_correction,
          "FusedAdam defaults");
    CHECK(c.adam_w_mode, "Adam has adam_w_mode true by default");
    rc = parse(&c, "{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"Adam\", \"params\": "
                   "{\"adam_w_mode\": false, \"betas\": [0.8, 0.95]}}}",
               1);
    CHECK_OK(rc);
    CHECK(!c.adam_w_mode && c.beta1 == 0.8 && c.beta2 == 0.95, "Adam with adam_w_mode false");
    rc = parse(&c, "{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"AdamW\", \"params\": "
                   "{\"adam_w_mode\": false}}}",
               1);
    CHECK_OK(rc);
    CHECK(c.adam_w_mode, "AdamW is always adam_w_mode");

    /* scheduler defaults */
    rc = parse(&c, "{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"AdamW\", \"params\": "
                   "{\"lr\": 0.02}}, \"scheduler\": {\"type\": \"WarmupLR\", \"params\": {}}}",
               1);
    CHECK_OK(rc);
    CHECK(c.sched.warmup_min_lr == 0 && c.sched.warmup_num_steps == 1000 &&
              c.sched.warmup_type_linear == 0,
          "WarmupLR defaults");
    CHECK_CLOSE(c.sched.warmup_max_lr, 0.02, 0, 0, "WarmupLR warmup_max_lr = optimizer lr");
    rc = parse(&c, "{\"train_batch_size\": 8, \"scheduler\": {\"type\": \"WarmupDecayLR\", "
                   "\"params\": {\"total_num_steps\": 5000, \"warmup_type\": \"linear\"}}}",
               1);
    CHECK_OK(rc);
    CHECK_CLOSE(c.sched.warmup_max_lr, 0.001, 0, 0, "WarmupDecayLR warmup_max_lr");
    CHECK(c.sched.total_num_steps == 5000 && c.sched.warmup_type_linear == 1, "decay");
    rc = parse(&c, "{\"train_batch_size\": 8, \"scheduler\": {\"type\": \"WarmupCosineLR\", "
                   "\"params\": {\"total_num_steps\": 100}}}",
               1);
    CHECK_OK(rc);
    CHECK(c.sched.warmup_min_ratio == 0 && c.sched.cos_min_ratio == 0.0001 &&
              c.sched.warmup_num_steps == 1000,
          "WarmupCosineLR defaults");
    rc = parse(&c, "{\"train_batch_size\": 8, \"scheduler\": {\"type\": \"OneCycle\", "
                   "\"params\": {\"cycle_min_lr\": 0.001, \"cycle_max_lr\": 0.01, "
                   "\"cycle_second_step_size\": null}}}",
               1);
    CHECK_OK(rc);
    CHECK(c.sched.cycle_first_step_size == 2000 && c.sched.cycle_second_step_size == -1 &&
              c.sched.cycle_first_stair_count == 0 && c.sched.cycle_second_stair_count == -1 &&
              c.sched.decay_step_size == 0 && c.sched.cycle_momentum &&
              c.sched.cycle_min_mom == 0.8 && c.sched.cycle_max_mom == 0.9 &&
              c.sched.decay_lr_rate == 0 && c.sched.decay_mom_rate == 0,
          "OneCycle defaults");
    rc = parse(&c, "{\"train_batch_size\": 8, \"scheduler\": {\"type\": \"OneCycle\", "
                   "\"params\": {\"cycle_max_lr\": 0.01}}}",
               1);
    CHECK_ERR(rc, "scheduler.params.cycle_min_lr", "OneCycle");
    rc = parse(&c, "{\"train_batch_size\": 8, \"scheduler\": {\"type\": \"LRRangeTest\", \"params\": {}}}", 1);
    CHECK_OK(rc);
    CHECK(c.sched.lr_range_test_min_lr == 1e-3 && c.sched.lr_range_test_step_size == 2000 &&
              c.sched.lr_range_test_step_rate == 1.0 && !c.sched.lr_range_test_staircase,
          "LRRangeTest defaults");
    rc = parse(&c, "{\"train_batch_size\": 8, \"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {}}}", 1);
    CHECK_ERR(rc, "scheduler.params.total_num_steps", "WarmupDecayLR");
    /* no params at all: engine.py's scheduler(optimizer, **None), a TypeError */
    rc = parse(&c, "{\"train_batch_size\": 8, \"scheduler\": {\"type\": \"WarmupLR\"}}", 1);
    CHECK_ERR(rc, "cfg.json: scheduler.params: missing: DeepSpeed passes the missing params as keywords and fails "
                  "with a TypeError; give \"params\": {} for the schedule's defaults");

    /* other blocks */
    rc = parse(&c, "{\"train_batch_size\": 8, \"bfloat16\": {\"enabled\": true}, "
                   "\"checkpoint\": {\"tag_validation\": \"fail\"}, \"flops_profiler\": "
                   "{\"enabled\": true, \"module_depth\": -1, \"output_file\": null}, "
                   "\"aio\": {\"thread_count\": 4}}",
               1);
    CHECK_OK(rc);
    CHECK(c.bf16, "bfloat16 alias");
    CHECK(c.ckpt_tag_validation_fail, "tag_validation fail");
    CHECK(c.wall_clock_breakdown, "flops_profiler turns on wall_clock_breakdown");
    CHECK(c.aio_intra_op_parallelism == 4, "thread_count alias");
}

/* ---------------------------------------------------------------- types and values */

static void test_types(void)
{
    zinf_config c;
    int rc;
    rc = parse(&c, "{\"train_batch_size\": 8, \"zero_optimization\": {\"reduce_bucket_size\": "
                   "1e9, \"allgather_bucket_size\": 2.5e8}}",
               1);
    CHECK_OK(rc);
    CHECK(c.reduce_bucket_size == 1000000000 && c.allgather_bucket_size == 250000000,
          "1e9 / 2.5e8 as integers");
    rc = parse(&c, "{\"train_batch_size\": 8, \"zero_optimization\": {\"reduce_bucket_size\": "
                   "1.5}}",
               1);
    CHECK_ERR(rc, "cfg.json: zero_optimization.reduce_bucket_size: expected a non-negative "
                  "integer, got 1.5");
    rc = parse(&c, "{\"train_batch_size\": 8, \"zero_optimization\": {\"reduce_bucket_size\": "
                   "\"abc\"}}",
               1);
    CHECK_ERR(rc, "zero_optimization.reduce_bucket_size", "\"abc\"");
    rc = parse(&c, "{\"train_batch_size\": 8, \"zero_optimization\": {\"sub_group_size\": -5}}",
               1);
    CHECK_ERR(rc, "zero_optimization.sub_group_size", "non-negative", "-5");
    rc = parse(&c, "{\"train_batch_size\": 8, \"zero_optimization\": {\"offload_param\": "
                   "{\"buffer_size\": -1}}}",
               1);
    CHECK_ERR(rc, "zero_optimization.offload_param.buffer_size", "-1");
    rc = parse(&c, "{\"train_batch_size\": 1e20}", 1);
    CHECK_ERR(rc, "train_batch_size", "positive integer");
    rc = parse(&c, "{\"train_batch_size\": 0}", 1);
    CHECK_ERR(rc, "train_batch_size", "positive integer");
    rc = parse(&c, "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": \"three\"}}", 1);
    CHECK_ERR(rc, "zero_optimization.stage: expected an integer 0-3, got \"three\"");
    rc = parse(&c, "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 4}}", 1);
    CHECK_ERR(rc, "zero_optimization.stage", "0-3", "4");
    /* pydantic's lax bool takes 0/1 and "yes"/"no"...; 2 or "maybe" is none of them */
    rc = parse(&c, "{\"train_batch_size\": 8, \"fp16\": {\"enabled\": \"maybe\"}}", 1);
    CHECK_ERR(rc, "fp16.enabled: expected true or false, got \"maybe\"");
    rc = parse(&c, "{\"train_batch_size\": 8, \"fp16\": {\"enabled\": 2}}", 1);
    CHECK_ERR(rc, "fp16.enabled: expected true or false, got 2");
    /* loss scales the fp32 step can apply (FLT_MIN 1.1754944e-38 to FLT_MAX 3.4028235e38): 1e-320
     * would be 0 as a float (a step that trains nothing), 1e39 and 2^128 infinite */
    rc = parse(&c, "{\"train_batch_size\": 8, \"fp16\": {\"enabled\": true, \"loss_scale\": 1e-320}}", 1);
    CHECK_ERR(rc, "fp16.loss_scale: expected 0 or a number from 1.18e-38 to 3.4e38 (a normal float)");
    rc = parse(&c, "{\"train_batch_size\": 8, \"fp16\": {\"enabled\": true, \"loss_scale\": 1e39}}", 1);
    CHECK_ERR(rc, "fp16.loss_scale", "a normal float");
    rc = parse(&c, "{\"train_batch_size\": 8, \"fp16\": {\"enabled\": true, \"min_loss_scale\": 1e39}}", 1);
    CHECK_ERR(rc, "fp16.min_loss_scale: expected 0 or an integer from 1 to 3.4e38, got 9.9999999999999994e38");
    rc = parse(&c, "{\"train_batch_size\": 8, \"fp16\": {\"enabled\": true, \"initial_scale_power\": 128}}", 1);
    CHECK_ERR(rc, "fp16.initial_scale_power: expected an integer 0-127");
    rc = parse(&c, "{\"train_batch_size\": 8, \"fp16\": {\"enabled\": true, \"initial_scale_power\": 127, "
                   "\"loss_scale\": 0, \"min_loss_scale\": 1}}", 1);
    CHECK_OK(rc);
    rc = parse(&c, "{\"train_batch_size\": 8, \"fp16\": {\"enabled\": true, \"loss_scale\": 3.4e38}}", 1);
    CHECK_OK(rc);
    rc = parse(&c, "{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"AdamW\", \"params\": "
                   "{\"betas\": [0.9]}}}",
               1);
    CHECK_ERR(rc, "optimizer.params.betas", "two numbers");
    rc = parse(&c, "{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"AdamW\", \"params\": "
                   "{\"lr\": -0.1}}}",
               1);
    CHECK_ERR(rc, "optimizer.params.lr", "non-negative");
    rc = parse(&c, "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 3, "
                   "\"offload_optimizer\": {\"device\": \"CPU\", \"ratio\": 1.5}}}",
               1);
    CHECK_ERR(rc, "zero_optimization.offload_optimizer.ratio", "0 to 1");
    rc = parse(&c, "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 3, "
                   "\"offload_param\": {\"device\": \"gpu\"}}}",
               1);
    CHECK_ERR(rc, "zero_optimization.offload_param.device", "\"gpu\"", "none, cpu, nvme");
    rc = parse(&c, "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 3, "
                   "\"offload_param\": {\"device\": \"CPU\"}}}",
               1);
    CHECK_OK(rc);
    CHECK(c.offload_param.device == ZINF_DEV_CPU, "device case-insensitive");
    rc = parse(&c, "{\"train_batch_size\": 8, \"zero_optimization\": []}", 1);
    CHECK_ERR(rc, "zero_optimization", "expected an object");
    rc = parse(&c, "{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"AdamW\", \"params\": "
                   "{\"amsgrad\": true}}}",
               1);
    CHECK_ERR(rc, "optimizer.params.amsgrad");
    rc = parse(&c, "{\"train_batch_size\": 8, \"amp\": {\"enabled\": true}}", 1);
    CHECK_ERR(rc, "cfg.json: amp");
    rc = parse(&c, "{\"train_batch_size\": 8, \"amp\": {\"enabled\": false}}", 1);
    CHECK_OK(rc);
    CHECK(strstr(warnbuf, "amp") && strstr(warnbuf, "no effect"), "amp off warns: %s", warnbuf);
    rc = parse(&c, "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 3, "
                   "\"stage3_prefetch_bucket_size\": 1, \"prefetch_bucket_size\": 2}}",
               1);
    CHECK_ERR(rc, "zero_optimization.stage3_prefetch_bucket_size", "given twice");
}

/* ---------------------------------------------------------------- JSON text */

static void test_text(void)
{
    zinf_config c;
    int rc;
    rc = parse(&c, "{\n  \"train_batch_size\": 8, // eight\n  /* a block\n comment */ "
                   "\"steps_per_print\": 5 /* trailing */\n}\n",
               1);
    CHECK_OK(rc);
    CHECK(c.steps_per_print == 5, "comments stripped");
    rc = parse(&c, "{\"train_batch_size\": 8, \"checkpoint\": {\"tag_validation\": \"Warn\"}, "
                   "\"flops_profiler\": {\"output_file\": \"a//b/*c*/.txt\"}}",
               1);
    CHECK_OK(rc);
    CHECK(strcmp(c.flops_profiler_output_file, "a//b/*c*/.txt") == 0,
          "comment markers inside strings kept: %s", c.flops_profiler_output_file);
    rc = parse(&c, "{\n  \"train_batch_size\": 8,\n  \"steps_per_print\": 5,,\n}\n", 1);
    CHECK_ERR(rc, "cfg.json:3:", "malformed JSON");
    rc = parse(&c, "// c\n/* x\n y */\n{\"train_batch_size\": 8 \"x\": 1}", 1);
    CHECK_ERR(rc, "cfg.json:4:", "malformed JSON");
    rc = parse(&c, "{\"train_batch_size\": 8 /* never closed", 1);
    CHECK_ERR(rc, "cfg.json:1", "unterminated");
    rc = parse(&c, "{\"zero_optimization\": {\"stage\": 1, \"stage\": 2}, \"train_batch_size\": 8}",
               1);
    CHECK_ERR(rc, "cfg.json:1:", "twice", "stage");
    rc = parse(&c, "[1, 2]", 1);
    CHECK_ERR(rc, "cfg.json", "object");
}

/* ---------------------------------------------------------------- unknown keys */

static void test_unknown(void)
{
    zinf_config c;
    int rc = parse(&c, "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 2, "
                       "\"offload_gradients\": {\"device\": \"cpu\"}}}",
                   1);
    CHECK_OK(rc);
    CHECK(strstr(warnbuf, "zinf: warning: cfg.json: unknown key "
                          "zero_optimization.offload_gradients (did you mean "
                          "zero_optimization.offload_optimizer?)") != NULL,
          "offload_gradients warning: %s", warnbuf);
    CHECK(c.n_warnings == 1, "one warning, got %d", c.n_warnings);
    rc = parse(&c, "{\"train_batch_size\": 8, \"zero_optimization\": {\"reduce_bucket_sise\": 5}}",
               1);
    CHECK_OK(rc);
    CHECK(strstr(warnbuf, "did you mean zero_optimization.reduce_bucket_size?") != NULL,
          "typo suggestion: %s", warnbuf);
    rc = parse(&c, "{\"train_batch_size\": 8, \"zzzzqqq\": 5}", 1);
    CHECK_OK(rc);
    CHECK(strstr(warnbuf, "unknown key zzzzqqq\n") != NULL, "no suggestion when far: %s",
          warnbuf);
    /* engine.py _scheduler_from_config: scheduler(optimizer, **params), a TypeError for a keyword
     * the constructor does not take, misspelt or another schedule's */
    rc = parse(&c, "{\"train_batch_size\": 8, \"scheduler\": {\"type\": \"WarmupLR\", "
                   "\"params\": {\"warmup_num_step\": 10}}}",
               1);
    CHECK_ERR(rc, "cfg.json: scheduler.params.warmup_num_step: not a parameter of WarmupLR (DeepSpeed's WarmupLR() "
                  "refuses it with a TypeError) (did you mean scheduler.params.warmup_num_steps?)");
    rc = parse(&c, "{\"train_batch_size\": 8, \"scheduler\": {\"type\": \"WarmupLR\", "
                   "\"params\": {\"cos_min_ratio\": 0.1}}}",
               1);
    CHECK_ERR(rc, "cfg.json: scheduler.params.cos_min_ratio: not a parameter of WarmupLR (DeepSpeed's WarmupLR() "
                  "refuses it with a TypeError)");
    rc = parse(&c, "{\"train_batch_size\": 8, \"scheduler\": {\"type\": \"OneCycle\", "
                   "\"params\": {\"cycle_min_lr\": 0, \"cycle_max_lr\": 1, \"warmup_num_steps\": 5}}}",
               1);
    CHECK_ERR(rc, "cfg.json: scheduler.params.warmup_num_steps: not a parameter of OneCycle");
    rc = parse(&c, "{\"train_batch_size\": 8, \"wandb\": {\"enabled\": true}, \"tensorboard\": {\"enabled\": true}, "
                   "\"zero_optimization\": {\"stage\": 1, \"cpu_offload\": true}}",
               1);
    CHECK_OK(rc);
    CHECK(strstr(warnbuf, "wandb is a DeepSpeed key zinf does not implement; it has no effect (zinf sends nothing "
                          "off the machine: use the tensorboard block, or metrics.jsonl)"),
          "wandb: %s", warnbuf);
    /* monitor/config.py: TensorBoardConfig output_path "", job_name "DeepSpeedJobName" */
    CHECK(c.tensorboard_enabled && !strcmp(c.tensorboard_output_path, "") &&
              !strcmp(c.tensorboard_job_name, "DeepSpeedJobName") && !c.csv_monitor_enabled &&
              !strcmp(c.csv_monitor_job_name, "DeepSpeedJobName"),
          "tensorboard and csv_monitor defaults");
    CHECK(strstr(warnbuf, "zero_optimization.cpu_offload") && strstr(warnbuf, "deprecated"),
          "cpu_offload: %s", warnbuf);
    CHECK(c.n_warnings == 2, "two warnings, got %d", c.n_warnings);
}

/* ---------------------------------------------------------------- combinations */

static void test_combinations(void)
{
    zinf_config c;
    int rc;
    rc = parse(&c, "{\"train_batch_size\": 8, \"fp16\": {\"enabled\": true}, \"bf16\": "
                   "{\"enabled\": true}}",
               1);
    CHECK_ERR(rc, "fp16.enabled", "bf16.enabled");
    /* DeepSpeed hands offload_param to the stage-3 optimizer only (engine.py
     * _configure_zero_optimizer): below stage 3 the block is accepted and the parameters stay */
    rc = parse(&c, "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 2, "
                   "\"offload_param\": {\"device\": \"cpu\"}}}",
               1);
    CHECK_OK(rc);
    CHECK(c.offload_param.device == ZINF_DEV_NONE, "offload_param below stage 3: not offloaded");
    CHECK(strstr(warnbuf, "zinf: warning: cfg.json: zero_optimization.offload_param.device \"cpu\" has no effect at "
                          "stage 2: DeepSpeed offloads parameters only at stage 3") != NULL, "said: %s", warnbuf);
    CHECK(c.n_warnings == 1, "one warning, got %d", c.n_warnings);
    rc = parse(&c, "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 2, "
                   "\"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"/nvme\"}}}",
               1);
    CHECK_ERR(rc, "zero_optimization.offload_optimizer", "NVMe", "stage 3", "stage is 2");
    rc = parse(&c, "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 2, "
                   "\"offload_optimizer\": {\"device\": \"cpu\"}}}",
               1);
    CHECK_OK(rc);
    rc = parse(&c, "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 0, "
                   "\"offload_optimizer\": {\"device\": \"cpu\"}}}",
               1);
    CHECK_ERR(rc, "zero_optimization.offload_optimizer", "stage is 0");
    rc = parse(&c, "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 3, "
                   "\"offload_param\": {\"device\": \"nvme\"}}}",
               1);
    CHECK_ERR(rc, "zero_optimization.offload_param", "nvme_path");
    rc = parse(&c, "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 3, "
                   "\"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"/local\"}, "
                   "\"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"/local\"}}}",
               1);
    CHECK_OK(rc);
    CHECK(c.offload_param.device == ZINF_DEV_NVME && strcmp(c.offload_param.nvme_path, "/local") == 0,
          "nvme path");
    rc = parse(&c, "{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"Lamb\"}}", 1);
    CHECK_ERR(rc, "optimizer.type: \"Lamb\" is not supported (zinf has Adam, AdamW)");
    rc = parse(&c, "{\"train_batch_size\": 8, \"scheduler\": {\"type\": \"CosineAnnealing\"}}", 1);
    CHECK_ERR(rc, "scheduler.type: \"CosineAnnealing\" is not supported", "WarmupLR",
              "WarmupDecayLR", "WarmupCosineLR", "OneCycle", "LRRangeTest");
    rc = parse(&c, "{\"train_batch_size\": 8, \"optimizer\": {\"params\": {\"lr\": 1}}}", 1);
    CHECK_ERR(rc, "optimizer.type", "missing");
}

/* ---------------------------------------------------------------- batch rule */

static void test_batch(void)
{
    zinf_config c;
    zinf_flags f;
    int rc;
    rc = parse(&c, "{\"train_batch_size\": 32, \"train_micro_batch_size_per_gpu\": 4, "
                   "\"gradient_accumulation_steps\": 2}",
               2);
    CHECK_ERR(rc, "batch sizes do not agree: train_batch_size 32 != "
                  "train_micro_batch_size_per_gpu 4 x gradient_accumulation_steps 2 x world size 2 "
                  "(= 16)");
    rc = parse(&c, "{\"train_batch_size\": 32, \"train_micro_batch_size_per_gpu\": 4}", 2);
    CHECK_OK(rc);
    CHECK(c.gradient_accumulation_steps == 4, "train+micro -> gas");
    rc = parse(&c, "{\"train_batch_size\": 32, \"train_micro_batch_size_per_gpu\": 4}", 3);
    CHECK_ERR(rc, "train_batch_size 32 is not divisible by train_micro_batch_size_per_gpu 4 x "
                  "world size 3");
    rc = parse(&c, "{\"train_batch_size\": 4, \"train_micro_batch_size_per_gpu\": 4}", 2);
    CHECK_ERR(rc, "train_batch_size 4", "micro", "world size 2");
    rc = parse(&c, "{\"train_batch_size\": 64, \"gradient_accumulation_steps\": 4}", 3);
    CHECK_ERR(rc, "train_batch_size 64 is not divisible by gradient_accumulation_steps 4 x world "
                  "size 3");
    rc = parse(&c, "{\"train_micro_batch_size_per_gpu\": 3, \"gradient_accumulation_steps\": 5}", 2);
    CHECK_OK(rc);
    CHECK(c.train_batch_size == 30, "micro+gas -> train");
    rc = parse(&c, "{\"train_micro_batch_size_per_gpu\": 3}", 4);
    CHECK_OK(rc);
    CHECK(c.train_batch_size == 12 && c.gradient_accumulation_steps == 1, "micro only");
    rc = parse(&c, "{\"train_batch_size\": 30}", 4);
    CHECK_ERR(rc, "train_batch_size 30 is not divisible by world size 4");
    rc = parse(&c, "{\"gradient_accumulation_steps\": 2}", 1);
    CHECK_ERR(rc, "train_batch_size", "train_micro_batch_size_per_gpu",
              "--per_device_train_batch_size");

    /* flags fill absent batch keys and "auto" */
    zinf_flags_defaults(&f);
    f.gradient_accumulation_steps = 3, f.gradient_accumulation_steps_set = true;
    f.per_device_train_batch_size = 2, f.per_device_train_batch_size_set = true;
    rc = parse_w(&c, "{}", &f, 2);
    CHECK_OK(rc);
    CHECK(c.train_micro_batch_size_per_gpu == 2 && c.gradient_accumulation_steps == 3 &&
              c.train_batch_size == 12,
          "absent keys from given flags");
    zinf_flags_defaults(&f);
    rc = parse_w(&c, "{\"train_batch_size\": \"auto\", \"train_micro_batch_size_per_gpu\": "
                     "\"auto\", \"gradient_accumulation_steps\": \"auto\"}",
                 &f, 2);
    CHECK_OK(rc);
    CHECK(c.train_micro_batch_size_per_gpu == 8 && c.gradient_accumulation_steps == 1 &&
              c.train_batch_size == 16,
          "auto batch from HF defaults");
    /* mismatch with a given flag */
    f.per_device_train_batch_size = 2, f.per_device_train_batch_size_set = true;
    rc = parse_w(&c, "{\"train_micro_batch_size_per_gpu\": 4}", &f, 1);
    CHECK_ERR(rc, "cfg.json: train_micro_batch_size_per_gpu is 4 in the config but "
                  "--per_device_train_batch_size is 2");
}

/* ---------------------------------------------------------------- auto and flags */

static void test_auto(void)
{
    zinf_config c;
    zinf_flags f;
    int rc;
    zinf_flags_defaults(&f);
    f.learning_rate = 1e-4, f.learning_rate_set = true;
    f.adam_beta2 = 0.95, f.adam_beta2_set = true;
    f.weight_decay = 0.1, f.weight_decay_set = true;
    f.adam_epsilon = 1e-6, f.adam_epsilon_set = true;
    f.max_grad_norm = 0.5, f.max_grad_norm_set = true;
    f.bf16 = true, f.bf16_set = true;
    f.hidden_size = 1024;
    const char *tmpl =
        "{\"train_batch_size\": 8, \"gradient_clipping\": \"auto\", \"optimizer\": {\"type\": "
        "\"AdamW\", \"params\": {\"lr\": \"auto\", \"betas\": \"auto\", \"eps\": \"auto\", "
        "\"weight_decay\": \"auto\"}}, \"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": "
        "{\"warmup_min_lr\": \"auto\", \"warmup_max_lr\": \"auto\", \"warmup_num_steps\": "
        "\"auto\", \"total_num_steps\": \"auto\"}}, \"fp16\": {\"enabled\": \"auto\"}, \"bf16\": "
        "{\"enabled\": \"auto\"}, \"zero_optimization\": {\"stage\": 3, \"reduce_bucket_size\": "
        "\"auto\", \"stage3_prefetch_bucket_size\": \"auto\", "
        "\"stage3_param_persistence_threshold\": \"auto\"}}";
    rc = parse_w(&c, tmpl, &f, 1);
    CHECK_OK(rc);
    CHECK_CLOSE(c.lr, 1e-4, 0, 0, "auto lr");
    CHECK_CLOSE(c.beta1, 0.9, 0, 0, "auto beta1 (flag default)");
    CHECK_CLOSE(c.beta2, 0.95, 0, 0, "auto beta2");
    CHECK_CLOSE(c.eps, 1e-6, 0, 0, "auto eps");
    CHECK_CLOSE(c.weight_decay, 0.1, 0, 0, "auto weight_decay");
    CHECK_CLOSE(c.gradient_clipping, 0.5, 0, 0, "auto gradient_clipping");
    CHECK(c.bf16 && !c.fp16, "auto precision");
    CHECK(c.sched.warmup_min_lr == 0, "auto warmup_min_lr");
    CHECK_CLOSE(c.sched.warmup_max_lr, 1e-4, 0, 0, "auto warmup_max_lr");
    CHECK(c.sched.total_num_steps == -1 && c.sched.warmup_num_steps == -1, "steps placeholders");
    CHECK(c.reduce_bucket_size == 1048576 && c.stage3_prefetch_bucket_size == 943718 &&
              c.stage3_param_persistence_threshold == 10240,
          "size autos for H=1024: %lld %lld %lld", (long long)c.reduce_bucket_size,
          (long long)c.stage3_prefetch_bucket_size, (long long)c.stage3_param_persistence_threshold);
    /* finalize: total steps, warmup from --warmup_ratio */
    f.warmup_ratio = 0.03, f.warmup_ratio_set = true;
    rc = zinf_config_finalize_steps(&c, 1000, &f, NULL);
    CHECK_OK(rc);
    CHECK(c.sched.total_num_steps == 1000 && c.sched.warmup_num_steps == 30 && c.max_steps == 1000,
          "finalize %lld %lld", (long long)c.sched.total_num_steps,
          (long long)c.sched.warmup_num_steps);
    /* warmup from --warmup_steps at parse time */
    f.warmup_steps = 50, f.warmup_steps_set = true;
    rc = parse_w(&c, tmpl, &f, 1);
    CHECK_OK(rc);
    CHECK(c.sched.warmup_num_steps == 50, "warmup from --warmup_steps");
    /* total_num_steps below warmup_num_steps: lr_schedules.py WarmupDecayLR.__init__ (and
     * WarmupCosineLR.__init__) only logger.warning('total_num_steps {} is less than
     * warmup_num_steps {}'); the schedule runs: the warm-up to its end, then
     * max(0, (total - t) / max(1, total - W)) = 0, so warmup_min_lr */
    {
        FILE *w = tmpfile();
        rc = zinf_config_finalize_steps(&c, 40, &f, w);
        capture(w);
    }
    CHECK_OK(rc);
    CHECK(c.sched.total_num_steps == 40 && c.sched.warmup_num_steps == 50, "kept as given");
    CHECK(strstr(warnbuf, "total_num_steps 40 is less than warmup_num_steps 50") != NULL, "said: %s", warnbuf);
    CHECK_CLOSE(zinf_sched_lr(&c.sched, c.lr, 41), 1e-4 * log(41.0) / log(50.0), 1e-15, 0, "warm-up runs on");
    CHECK(zinf_sched_lr(&c.sched, c.lr, 51) == 0.0, "after it: warmup_min_lr 0");
    /* flags->total_steps known up front */
    f.total_steps = 200;
    rc = parse_w(&c, tmpl, &f, 1);
    CHECK_OK(rc);
    CHECK(c.sched.total_num_steps == 200, "total_steps from flags");
    f.total_steps = 0;

    /* mismatches with given flags */
    rc = parse_w(&c, "{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"AdamW\", \"params\": "
                     "{\"lr\": 3e-4}}}",
                 &f, 1);
    CHECK_ERR(rc, "optimizer.params.lr is 0.0003 in the config but --learning_rate is 0.0001");
    rc = parse_w(&c, "{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"AdamW\", \"params\": "
                     "{\"betas\": [0.9, 0.999]}}}",
                 &f, 1);
    CHECK_ERR(rc, "optimizer.params.betas[1] is 0.999", "--adam_beta2 is 0.95");
    rc = parse_w(&c, "{\"train_batch_size\": 8, \"gradient_clipping\": 1.0}", &f, 1);
    CHECK_ERR(rc, "gradient_clipping is 1 in the config but --max_grad_norm is 0.5");
    rc = parse_w(&c, "{\"train_batch_size\": 8, \"bf16\": {\"enabled\": false}}", &f, 1);
    CHECK_ERR(rc, "bf16.enabled is false in the config but --bf16 is true");
    rc = parse_w(&c, "{\"train_batch_size\": 8, \"fp16\": {\"enabled\": \"auto\"}, \"bf16\": "
                     "{\"enabled\": true}}",
                 &f, 1);
    CHECK_OK(rc);
    /* a given flag whose key is absent: warned, DeepSpeed's default kept */
    rc = parse_w(&c, "{\"train_batch_size\": 8, \"bf16\": {\"enabled\": true}}", &f, 1);
    CHECK_OK(rc);
    CHECK(c.gradient_clipping == 1.0 && strstr(warnbuf, "--max_grad_norm has no effect"),
          "clipping absent: %s", warnbuf);
    /* no optimizer block: AdamW from the flags, no warnings about them */
    CHECK(!c.has_optimizer && c.lr == 1e-4 && c.beta2 == 0.95 && c.weight_decay == 0.1 &&
              c.adam_w_mode,
          "AdamW from flags");
    CHECK(!strstr(warnbuf, "learning_rate"), "no lr warning: %s", warnbuf);

    /* "auto" where it is not accepted */
    rc = parse(&c, "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": \"auto\"}}", 1);
    CHECK_ERR(rc, "zero_optimization.stage", "\"auto\" has no single meaning", "accelerate");
    /* outside DeepSpeed's pydantic models "auto" stays a string there, which breaks DeepSpeed */
    rc = parse(&c, "{\"train_batch_size\": 8, \"steps_per_print\": \"auto\"}", 1);
    CHECK_ERR(rc, "steps_per_print", "\"auto\"");
    rc = parse(&c, "{\"train_batch_size\": 8, \"aio\": {\"block_size\": \"auto\"}}", 1);
    CHECK_ERR(rc, "aio.block_size", "\"auto\"");
}

/* ---------------------------------------------------------------- DeepSpeed's own rules */

/* What DeepSpeed 0.19's pydantic models (runtime/config_utils.py, runtime/zero/config.py,
 * offload_config.py, precision_config.py) and runtime/config.py do with the keys that published
 * configs carry. Each expectation is DeepSpeed's behaviour, cited beside it. */
static void test_deepspeed_rules(void)
{
    zinf_config c;
    int rc;
    /* DeepSpeedConfigModel.__init__ drops "auto" values: the default applies, without a word */
    rc = parse(&c, "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 3, "
                   "\"allgather_bucket_size\": \"auto\", \"stage3_max_live_parameters\": \"auto\", "
                   "\"stage3_gather_16bit_weights_on_model_save\": \"auto\", \"sub_group_size\": "
                   "\"auto\", \"offload_param\": {\"device\": \"cpu\", \"buffer_size\": \"auto\", "
                   "\"pin_memory\": \"auto\"}, \"offload_optimizer\": \"auto\", "
                   "\"zero_quantized_weights\": \"auto\"}, \"fp16\": {\"auto_cast\": \"auto\", "
                   "\"loss_scale_window\": \"auto\"}}", 1);
    CHECK_OK(rc);
    CHECK(c.allgather_bucket_size == 500000000 && c.stage3_max_live_parameters == 1000000000 &&
              !c.stage3_gather_16bit_weights_on_model_save && c.sub_group_size == 1000000000 &&
              c.offload_param.buffer_size == 100000000 && c.offload_param.pin_memory &&
              c.offload_optimizer.device == ZINF_DEV_NONE && c.fp16_loss_scale_window == 1000,
          "dropped \"auto\" values take DeepSpeed's defaults");
    CHECK(c.n_warnings == 0 && !warnbuf[0], "no warning for a dropped \"auto\": %s", warnbuf);

    /* field names are accepted beside their stage3_ aliases (populate_by_name=True) */
    rc = parse(&c, "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 3, "
                   "\"gather_16bit_weights_on_model_save\": true, \"prefetch_bucket_size\": 7, "
                   "\"param_persistence_threshold\": 9, \"max_live_parameters\": 11, "
                   "\"max_reuse_distance\": 13, \"model_persistence_threshold\": 15}}", 1);
    CHECK_OK(rc);
    CHECK(c.stage3_gather_16bit_weights_on_model_save && c.stage3_prefetch_bucket_size == 7 &&
              c.stage3_param_persistence_threshold == 9 && c.stage3_max_live_parameters == 11 &&
              c.stage3_max_reuse_distance == 13 && c.stage3_model_persistence_threshold == 15,
          "field names");
    CHECK(!strstr(warnbuf, "unknown"), "field names are known: %s", warnbuf);
    rc = parse(&c, "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 3, "
                   "\"gather_16bit_weights_on_model_save\": true, "
                   "\"stage3_gather_16bit_weights_on_model_save\": true}}", 1);
    CHECK_ERR(rc, "given twice");

    /* legacy cpu_offload: read as offload_optimizer {"device": "cpu"} with the block's defaults */
    rc = parse(&c, "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 2, "
                   "\"cpu_offload\": true}}", 1);
    CHECK_OK(rc);
    CHECK(c.offload_optimizer.device == ZINF_DEV_CPU && c.offload_optimizer.pin_memory &&
              c.offload_optimizer.buffer_count == 4,
          "cpu_offload -> offload_optimizer cpu");
    CHECK(strstr(warnbuf, "cpu_offload is deprecated") != NULL, "deprecation said: %s", warnbuf);
    rc = parse(&c, "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 3, "
                   "\"cpu_offload_param\": true, \"cpu_offload\": false}}", 1);
    CHECK_OK(rc);
    CHECK(c.offload_param.device == ZINF_DEV_CPU && c.offload_optimizer.device == ZINF_DEV_NONE,
          "cpu_offload_param -> offload_param cpu; false changes nothing");
    rc = parse(&c, "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 2, "
                   "\"cpu_offload\": true, \"offload_optimizer\": {\"device\": \"cpu\"}}}", 1);
    CHECK_ERR(rc, "zero_optimization.cpu_offload", "offload_optimizer");
    rc = parse(&c, "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 0, "
                   "\"cpu_offload\": true}}", 1);
    CHECK_ERR(rc, "optimizer offload needs ZeRO stage 1, 2 or 3");
    rc = parse(&c, "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 2, "
                   "\"cpu_offload_use_pin_memory\": true}}", 1);
    CHECK_OK(rc);
    CHECK(c.offload_optimizer.device == ZINF_DEV_NONE && strstr(warnbuf, "DeepSpeed ignores it too"),
          "cpu_offload_use_pin_memory sets nothing: %s", warnbuf);

    /* the boolean zero_optimization of DeepSpeed's first format */
    rc = parse(&c, "{\"train_batch_size\": 8, \"zero_optimization\": true, \"allgather_size\": 1000}", 1);
    CHECK_OK(rc);
    CHECK(c.zero_stage == 1 && c.allgather_bucket_size == 1000, "zero_optimization true -> stage 1");
    rc = parse(&c, "{\"train_batch_size\": 8, \"zero_optimization\": false}", 1);
    CHECK_OK(rc);
    CHECK(c.zero_stage == 0, "zero_optimization false -> stage 0");

    /* keys that change what DeepSpeed computes are errors, not "no effect" */
    rc = parse(&c, "{\"train_batch_size\": 8, \"tensor_parallel\": {\"autotp_size\": 2}}", 1);
    CHECK_ERR(rc, "tensor_parallel", "changes the training numerics");
    rc = parse(&c, "{\"train_batch_size\": 8, \"tensor_parallel\": {\"autotp_size\": 1}}", 1);
    CHECK_OK(rc);
    rc = parse(&c, "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 2, \"zenflow\": "
                   "{\"topk_ratio\": 0.1}}}", 1);
    CHECK_ERR(rc, "zero_optimization.zenflow", "changes the training numerics");
    rc = parse(&c, "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 2, \"zenflow\": null}}", 1);
    CHECK_OK(rc);
    CHECK(c.n_warnings == 0, "zenflow null: no warning, got %s", warnbuf);
    rc = parse(&c, "{\"train_batch_size\": 8, \"sequence_parallel_size\": 4}", 1);
    CHECK_ERR(rc, "sequence_parallel_size", "changes the training numerics");
    rc = parse(&c, "{\"train_batch_size\": 8, \"curriculum_learning\": {\"enabled\": true}}", 1);
    CHECK_ERR(rc, "curriculum_learning");
    rc = parse(&c, "{\"train_batch_size\": 8, \"scheduler\": {\"type\": \"WarmupLR\", \"params\": "
                   "{\"last_batch_iteration\": 100}}}", 1);
    CHECK_ERR(rc, "last_batch_iteration", "changes the training numerics");
    rc = parse(&c, "{\"train_batch_size\": 8, \"scheduler\": {\"type\": \"WarmupLR\", \"params\": "
                   "{\"last_batch_iteration\": -1}}}", 1);
    CHECK_OK(rc);
    /* a key zinf lacks, written at DeepSpeed's default, asks for nothing: no warning */
    rc = parse(&c, "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 3, "
                   "\"zero_quantized_weights\": false, \"memory_efficient_linear\": true, "
                   "\"ignore_unused_parameters\": true, \"mics_shard_size\": -1}, \"bf16\": "
                   "{\"enabled\": true, \"immediate_grad_update\": false, \"check_grad_overflow\": "
                   "true}, \"fp16\": {\"auto_cast\": true}, \"zero_allow_untested_optimizer\": true}", 1);
    CHECK_OK(rc);
    CHECK(c.n_warnings == 0 && !warnbuf[0], "keys at their defaults are silent: %s", warnbuf);
    rc = parse(&c, "{\"train_batch_size\": 8, \"zero_optimization\": {\"memory_efficient_linear\": "
                   "false}}", 1);
    CHECK_OK(rc);
    CHECK(c.n_warnings == 1 && strstr(warnbuf, "memory_efficient_linear"), "off its default: said");

    /* the reduction and accumulation dtypes: what zinf does is accepted, anything else refused */
    rc = parse(&c, "{\"train_batch_size\": 8, \"communication_data_type\": \"fp32\", "
                   "\"zero_optimization\": {\"stage\": 1}, \"bf16\": {\"enabled\": true}}", 1);
    CHECK_OK(rc);
    rc = parse(&c, "{\"train_batch_size\": 8, \"communication_data_type\": \"fp32\", "
                   "\"zero_optimization\": {\"stage\": 3}, \"bf16\": {\"enabled\": true}}", 1);
    CHECK_ERR(rc, "communication_data_type", "bf16", "stage 3");
    rc = parse(&c, "{\"train_batch_size\": 8, \"data_types\": {\"grad_accum_dtype\": \"fp32\"}}", 1);
    CHECK_OK(rc);
    rc = parse(&c, "{\"train_batch_size\": 8, \"data_types\": {\"grad_accum_dtype\": \"bf16\"}}", 1);
    CHECK_ERR(rc, "data_types.grad_accum_dtype", "fp32");
    /* a predivide factor outside fp32 turns the gradients into 0 x inf (found by the fuzzer) */
    rc = parse(&c, "{\"train_batch_size\": 8, \"gradient_predivide_factor\": 1e308}", 1);
    CHECK_ERR(rc, "gradient_predivide_factor", "outside the fp32 range");
    rc = parse(&c, "{\"train_batch_size\": 8, \"gradient_predivide_factor\": 1e-300}", 1);
    CHECK_ERR(rc, "gradient_predivide_factor", "outside the fp32 range");
    rc = parse(&c, "{\"train_batch_size\": 8, \"gradient_predivide_factor\": 1e30}", 1);
    CHECK_OK(rc);
    /* keys this change added: bad values are one clear error each */
    rc = parse(&c, "{\"train_batch_size\": 8, \"zinf_optimizer_host_bytes\": -1}", 1);
    CHECK_ERR(rc, "zinf_optimizer_host_bytes", "non-negative integer");
    rc = parse(&c, "{\"train_batch_size\": 8, \"zinf_optimizer_host_bytes\": 1073741824}", 1);
    CHECK_OK(rc);
    CHECK(c.zinf_optimizer_host_bytes == 1073741824 && c.n_warnings == 0, "host budget read, no warning");
    rc = parse(&c, "{\"train_batch_size\": 8, \"zinf_overlap_host_step\": \"yes\"}", 1);
    CHECK_ERR(rc, "zinf_overlap_host_step");
    rc = parse(&c, "{\"train_batch_size\": 8, \"zinf_overlap_host_step\": false}", 1);
    CHECK_OK(rc);
    CHECK(!c.zinf_overlap_host_step && c.n_warnings == 0, "zinf_overlap_host_step false read, no warning");
    rc = parse(&c, "{\"train_batch_size\": 8, \"communication_data_type\": \"fp8\"}", 1);
    CHECK_ERR(rc, "communication_data_type", "fp16, bf16, fp32");
    rc = parse(&c, "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 3, \"offload_param\": "
                   "{\"device\": \"nvme\", \"nvme_path\": [\"/a\", \"\"]}}}", 1);
    CHECK_ERR(rc, "zero_optimization.offload_param.nvme_path", "an array of 1 to 16 directories");
    rc = parse(&c, "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 3, \"offload_param\": "
                   "{\"device\": \"nvme\", \"nvme_path\": []}}}", 1);
    CHECK_ERR(rc, "nvme_path", "an array of 1 to 16 directories");
    rc = parse(&c, "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 3, \"offload_param\": "
                   "{\"device\": \"nvme\", \"nvme_path\": [\"/a\", \"/b\"]}}}", 1);
    CHECK_OK(rc);
    CHECK(strcmp(c.offload_param.nvme_path, "/a\n/b") == 0, "nvme_path list kept one per line");
}

/* ---------------------------------------------------------------- default config, print */

static void test_default_and_print(void)
{
    zinf_config c;
    zinf_flags f;
    zinf_flags_defaults(&f);
    f.per_device_train_batch_size = 4, f.per_device_train_batch_size_set = true;
    f.logging_steps = 7, f.logging_steps_set = true;
    int rc = zinf_config_default(&c, &f, 2, NULL);
    CHECK_OK(rc);
    CHECK(c.path[0] == 0 && c.zero_stage == 0 && !c.has_optimizer, "default config");
    CHECK(c.train_micro_batch_size_per_gpu == 4 && c.gradient_accumulation_steps == 1 &&
              c.train_batch_size == 8,
          "default batch");
    CHECK_CLOSE(c.gradient_clipping, 1.0, 0, 0, "default clipping from --max_grad_norm default");
    CHECK(c.logging_steps == 7 && c.eval_steps == 7, "logging from flags");

    char *buf = NULL;
    size_t n = 0;
    FILE *m = open_memstream(&buf, &n);
    zinf_config_print(&c, m);
    fclose(m);
    CHECK(buf && strstr(buf, "\"train_batch_size\": 8"), "print batch: %s", buf);
    CHECK(buf && strstr(buf, "\"stage3_prefetch_bucket_size\": 50000000"), "print int");
    CHECK(buf && strstr(buf, "\"stage3_model_persistence_threshold\": 9223372036854775807"),
          "print maxsize");
    CHECK(buf && strstr(buf, "\"offload_param\"") && strstr(buf, "\"flops_profiler\""),
          "print blocks");
    CHECK(buf && !strstr(buf, "amp"), "no unimplemented keys");
    /* the printed config parses back to the same values */
    zinf_config d;
    zinf_flags_defaults(&f);
    rc = zinf_config_parse(&d, buf, n, "printed", &f, 2, NULL);
    CHECK_OK(rc);
    CHECK(d.train_batch_size == c.train_batch_size && d.gradient_clipping == c.gradient_clipping &&
              d.stage3_model_persistence_threshold == INT64_MAX && d.zero_stage == c.zero_stage,
          "round trip");
    CHECK(d.n_warnings == 1, "only the zinf block is unknown, got %d", d.n_warnings);
    free(buf);
}

/* One rule per value, whichever way it arrives: a flag that fills a key (through "auto", an
 * absent key, or the built-in default config) meets that key's rule, with the key named; a flag
 * that fills no key meets its own. The message is the flag and its value. */
static void test_flag_rules(void)
{
    zinf_config c;
    zinf_flags f;
    static const struct { const char *json, *msg; } cases[] = {
        /* "auto" filled from the flag */
        {"{\"train_micro_batch_size_per_gpu\": 2, \"gradient_accumulation_steps\": \"auto\"}",
         "--gradient_accumulation_steps -1: expected a positive integer, as gradient_accumulation_steps in a "
         "DeepSpeed config"},
        /* an absent key that the flag fills */
        {"{\"train_micro_batch_size_per_gpu\": 2}",
         "--gradient_accumulation_steps -1: expected a positive integer, as gradient_accumulation_steps in a "
         "DeepSpeed config"},
        /* a key the config gives: the flag is still wrong, whatever it would have been checked against */
        {"{\"train_micro_batch_size_per_gpu\": 2, \"gradient_accumulation_steps\": 3}",
         "--gradient_accumulation_steps -1: expected a positive integer, as gradient_accumulation_steps in a "
         "DeepSpeed config"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        zinf_flags_defaults(&f);
        f.gradient_accumulation_steps = -1, f.gradient_accumulation_steps_set = true;
        CHECK(parse_w(&c, cases[i].json, &f, 1) == ZINF_EINVAL && strcmp(zinf_errmsg(), cases[i].msg) == 0,
              "case %zu: %s", i, zinf_errmsg());
    }
    /* the same rule written in the config: the same words */
    CHECK(parse(&c, "{\"train_micro_batch_size_per_gpu\": 2, \"gradient_accumulation_steps\": -1}", 1) ==
                  ZINF_EINVAL &&
              strcmp(zinf_errmsg(), "cfg.json: gradient_accumulation_steps: expected a positive integer, got -1") == 0,
          "key: %s", zinf_errmsg());
    /* the built-in default config takes every value from the flags */
    zinf_flags_defaults(&f);
    f.learning_rate = NAN, f.learning_rate_set = true;
    CHECK(zinf_config_default(&c, &f, 1, NULL) == ZINF_EINVAL &&
              strcmp(zinf_errmsg(), "--learning_rate nan: expected a non-negative number, as optimizer.params.lr in "
                                    "a DeepSpeed config") == 0,
          "default config, lr nan: %s", zinf_errmsg());
    zinf_flags_defaults(&f);
    f.adam_beta1 = 1.5, f.adam_beta1_set = true;
    CHECK(zinf_flags_check(&f) == ZINF_EINVAL &&
              strcmp(zinf_errmsg(), "--adam_beta1 1.5: expected a number at least 0 and below 1, as "
                                    "optimizer.params.betas[0] in a DeepSpeed config") == 0,
          "beta1: %s", zinf_errmsg());
    zinf_flags_defaults(&f);
    f.max_grad_norm = INFINITY, f.max_grad_norm_set = true;
    CHECK(zinf_flags_check(&f) == ZINF_EINVAL &&
              strcmp(zinf_errmsg(), "--max_grad_norm inf: expected a non-negative number, as gradient_clipping in a "
                                    "DeepSpeed config") == 0,
          "clip inf: %s", zinf_errmsg());
    /* the flags that fill no key */
    zinf_flags_defaults(&f);
    f.logging_steps = 0, f.logging_steps_set = true;
    CHECK(zinf_flags_check(&f) == ZINF_EINVAL &&
              strcmp(zinf_errmsg(), "--logging_steps 0: expected a positive integer (HF's Trainer refuses 0 too)") == 0,
          "logging 0: %s", zinf_errmsg());
    zinf_flags_defaults(&f);
    f.num_train_epochs = NAN, f.num_train_epochs_set = true;
    CHECK(zinf_flags_check(&f) == ZINF_EINVAL &&
              strcmp(zinf_errmsg(), "--num_train_epochs nan: expected a positive number") == 0,
          "epochs nan: %s", zinf_errmsg());
    /* the defaults, unset flags whatever their value, and edge values that are valid */
    zinf_flags_defaults(&f);
    CHECK(zinf_flags_check(&f) == 0, "defaults: %s", zinf_errmsg());
    f.logging_steps = 0; /* not given */
    f.learning_rate = 0, f.learning_rate_set = true;
    f.adam_beta2 = 0, f.adam_beta2_set = true;
    f.max_grad_norm = 0, f.max_grad_norm_set = true;
    f.save_steps = 0, f.save_steps_set = true;
    f.comm_timeout = 0, f.comm_timeout_set = true;
    f.warmup_ratio = 1, f.warmup_ratio_set = true;
    CHECK(zinf_flags_check(&f) == 0, "valid edges: %s", zinf_errmsg());
}

/* A UTF-8 byte-order mark before the JSON text is skipped, as Python's utf-8-sig codec does. */
static void test_bom(void)
{
    zinf_config c;
    CHECK(parse(&c, "\xEF\xBB\xBF{\"train_batch_size\": 16}", 2) == 0 && c.train_batch_size == 16 &&
              c.train_micro_batch_size_per_gpu == 8,
          "BOM: %s", zinf_errmsg());
    /* only at the start: elsewhere it is what JSON makes of it */
    CHECK(parse(&c, "{\"train_batch_size\": 16}\xEF\xBB\xBF", 2) == ZINF_EINVAL && HAS("malformed JSON"),
          "BOM at the end: %s", zinf_errmsg());
}

/* --torch_dtype as ms-swift applies it: it sets --bf16/--fp16 where they are not given, which then
 * fill "auto" and must agree with written values */
static void test_torch_dtype(void)
{
    static const struct { const char *dt; bool bf, fp; } T[] = {
        {"bfloat16", true, false}, {"float16", false, true}, {"float32", false, false}};
    const char *js = "{\"train_batch_size\": 8, \"bf16\": {\"enabled\": \"auto\"}, "
                     "\"fp16\": {\"enabled\": \"auto\"}}";
    zinf_config c;
    for (size_t i = 0; i < 3; i++) {
        zinf_flags f;
        zinf_flags_defaults(&f);
        f.torch_dtype = T[i].dt, f.torch_dtype_set = true;
        int rc = parse_w(&c, js, &f, 1);
        CHECK(rc == 0 && c.bf16 == T[i].bf && c.fp16 == T[i].fp, "--torch_dtype %s: bf16 %d fp16 %d", T[i].dt,
              c.bf16, c.fp16);
    }
    zinf_flags f;
    zinf_flags_defaults(&f);
    f.torch_dtype = "float16", f.torch_dtype_set = true;
    int rc = parse_w(&c, "{\"train_batch_size\": 8, \"bf16\": {\"enabled\": true}}", &f, 1);
    CHECK_ERR(rc, "bf16.enabled is true in the config but --torch_dtype float16 needs it false");
    f.bf16 = true, f.bf16_set = true;
    rc = parse_w(&c, js, &f, 1);
    CHECK_ERR(rc, "--torch_dtype float16 and --bf16 true disagree");
    f.bf16_set = false, f.torch_dtype = "int8";
    rc = parse_w(&c, js, &f, 1);
    CHECK_ERR(rc, "--torch_dtype int8: expected bfloat16, float16 or float32");
}


/* ---------------------------------------------------------------- audit against DeepSpeed 0.19.6
 * Each case cites the DeepSpeed source (deepspeedai/DeepSpeed at edaa722) that fixes the value. */
static void test_ds_audit(void)
{
    zinf_config c;
    int rc;

    /* gradient_allreduce_op: config.py get_gradient_allreduce_op lowercases a string and raises
     * ValueError for anything outside GRADIENT_ALLREDUCE_OP_SUPPORTED = ("mean", "sum")
     * (constants.py); "sum" leaves the reduced gradients summed over the data-parallel ranks, not
     * averaged (engine.py), so it changes the step: an error in zinf, which averages */
    rc = parse(&c, "{\"train_batch_size\": 8, \"gradient_allreduce_op\": \"MEAN\"}", 2);
    CHECK_OK(rc);
    CHECK(c.gradient_allreduce_op == 0 && c.n_warnings == 0, "\"mean\" is what zinf does: %s", warnbuf);
    rc = parse(&c, "{\"train_batch_size\": 8, \"gradient_allreduce_op\": \"sum\"}", 2);
    CHECK_ERR(rc, "gradient_allreduce_op", "\"sum\"", "changes the training numerics");
    rc = parse(&c, "{\"train_batch_size\": 8, \"gradient_allreduce_op\": \"max\"}", 2);
    CHECK_ERR(rc, "gradient_allreduce_op", "\"max\"");
    rc = parse(&c, "{\"train_batch_size\": 8, \"gradient_allreduce_op\": null}", 2);
    CHECK_ERR(rc, "gradient_allreduce_op", "null");

    /* managed_gradient_accumulation: constants.py MANAGED_GRADIENT_ACCUMULATION_DEFAULT = True,
     * read by config.py get_managed_gradient_accumulation; false makes every engine step() an
     * optimizer update (engine.py is_gradient_accumulation_boundary), so accumulation stops:
     * true is what zinf does, false an error */
    rc = parse(&c, "{\"train_batch_size\": 8, \"gradient_accumulation_steps\": 2, "
                   "\"managed_gradient_accumulation\": true}", 2);
    CHECK_OK(rc);
    CHECK(c.gradient_accumulation_steps == 2 && c.n_warnings == 0, "true is the default: %s", warnbuf);
    rc = parse(&c, "{\"train_batch_size\": 8, \"gradient_accumulation_steps\": 2, "
                   "\"managed_gradient_accumulation\": false}", 2);
    CHECK_ERR(rc, "managed_gradient_accumulation", "changes the training numerics");

    /* data_types: config.py _initialize_params reads grad_accum_dtype, param_dtype and
     * buffer_dtype, each a DtypeEnum name (config.py DtypeEnum: fp16 = "torch.float16", "fp16",
     * "float16", "half"; fp32 = "torch.float32", "fp32", "float32", "float"; bf16 =
     * "torch.bfloat16", "bf16", "bfloat16"; int8). engine.py _assert_valid_mixed_precision_config
     * asserts param_dtype == the model dtype (fp16.enabled -> half, bf16.enabled -> bfloat16,
     * else float32); _cast_module_mixed_precision casts every floating buffer to buffer_dtype */
    rc = parse(&c, "{\"train_batch_size\": 8, \"bf16\": {\"enabled\": true}, \"data_types\": "
                   "{\"param_dtype\": \"bfloat16\", \"buffer_dtype\": \"float32\", "
                   "\"grad_accum_dtype\": \"torch.float32\"}}", 1);
    CHECK_OK(rc);
    CHECK(c.param_dtype == ZINF_COMM_BF16 && c.buffer_dtype == ZINF_COMM_FP32 &&
              c.grad_accum_dtype == ZINF_COMM_FP32 && c.n_warnings == 0,
          "DtypeEnum spellings: %d %d %d: %s", c.param_dtype, c.buffer_dtype, c.grad_accum_dtype, warnbuf);
    rc = parse(&c, "{\"train_batch_size\": 8, \"data_types\": {\"param_dtype\": \"fp32\", "
                   "\"buffer_dtype\": null}}", 1);
    CHECK_OK(rc);
    CHECK(c.param_dtype == ZINF_COMM_FP32 && c.buffer_dtype == ZINF_COMM_UNSET && c.n_warnings == 0,
          "fp32 without fp16/bf16: %s", warnbuf);
    rc = parse(&c, "{\"train_batch_size\": 8, \"bf16\": {\"enabled\": true}, \"data_types\": "
                   "{\"param_dtype\": \"fp32\"}}", 1);
    CHECK_ERR(rc, "data_types.param_dtype", "fp32", "bf16");
    rc = parse(&c, "{\"train_batch_size\": 8, \"fp16\": {\"enabled\": true}, \"data_types\": "
                   "{\"param_dtype\": \"bf16\"}}", 1);
    CHECK_ERR(rc, "data_types.param_dtype", "bf16", "fp16");
    rc = parse(&c, "{\"train_batch_size\": 8, \"data_types\": {\"buffer_dtype\": \"bf16\"}}", 1);
    CHECK_ERR(rc, "data_types.buffer_dtype", "changes the training numerics");
    rc = parse(&c, "{\"train_batch_size\": 8, \"data_types\": {\"param_dtype\": \"fp8\"}}", 1);
    CHECK_ERR(rc, "data_types.param_dtype", "\"fp8\"");
    rc = parse(&c, "{\"train_batch_size\": 8, \"data_types\": {\"grad_accum_dtype\": \"half\"}}", 1);
    CHECK_ERR(rc, "data_types.grad_accum_dtype", "fp16");

    /* stage-3 "auto" sizes below stage 3: transformers' integrations/deepspeed.py
     * trainer_config_finalize fills stage3_prefetch_bucket_size (0.9 h^2) and
     * stage3_param_persistence_threshold (10 h) only `if self.is_zero3()`; otherwise the "auto"
     * reaches DeepSpeedZeroConfig, whose DeepSpeedConfigModel.__init__ (config_utils.py) drops it,
     * so zero/config.py's defaults pp_int(5e7) and pp_int(1e5) apply. reduce_bucket_size "auto" is
     * h^2 at every stage */
    {
        zinf_flags f;
        zinf_flags_defaults(&f);
        f.hidden_size = 768;
        const char *z = "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": %d, "
                        "\"reduce_bucket_size\": \"auto\", \"stage3_prefetch_bucket_size\": \"auto\", "
                        "\"stage3_param_persistence_threshold\": \"auto\"}}";
        char js[512];
        snprintf(js, sizeof js, z, 2);
        rc = parse_w(&c, js, &f, 1);
        CHECK_OK(rc);
        CHECK(c.reduce_bucket_size == 589824 && c.stage3_prefetch_bucket_size == 50000000 &&
                  c.stage3_param_persistence_threshold == 100000,
              "stage 2: %lld %lld %lld", (long long)c.reduce_bucket_size,
              (long long)c.stage3_prefetch_bucket_size, (long long)c.stage3_param_persistence_threshold);
        CHECK(c.n_warnings == 0, "no stage-3 warning for an \"auto\" HF leaves alone: %s", warnbuf);
        snprintf(js, sizeof js, z, 3);
        rc = parse_w(&c, js, &f, 1);
        CHECK_OK(rc);
        CHECK(c.stage3_prefetch_bucket_size == 530841 && c.stage3_param_persistence_threshold == 7680,
              "stage 3: 0.9 x 768^2 = 530841.6 -> 530841, 10 x 768");
        f.hidden_size = 0; /* below stage 3 the hidden size is not needed */
        snprintf(js, sizeof js, z, 1);
        js[strlen("{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 1, ")] = 0;
        strcat(js, "\"stage3_prefetch_bucket_size\": \"auto\"}}");
        rc = parse_w(&c, js, &f, 1);
        CHECK_OK(rc);
        CHECK(c.stage3_prefetch_bucket_size == 50000000, "stage 1 without a hidden size");
    }

    /* fp16's dynamic-scaling keys: precision_config.py DeepSpeedFP16Config
     * _validate_dynamic_loss_scale_params raises ValueError for loss_scale_window <= 0 or
     * min_loss_scale <= 0 only "if self.enabled and self.loss_scale == 0"; a disabled block or a
     * static scale carries them unchecked ("Validating them otherwise would reject valid
     * static-loss-scale configs that carry unused values") */
    rc = parse(&c, "{\"train_batch_size\": 8, \"fp16\": {\"enabled\": true, \"loss_scale_window\": 0}}", 1);
    CHECK_ERR(rc, "fp16.loss_scale_window", "dynamic loss scaling");
    rc = parse(&c, "{\"train_batch_size\": 8, \"fp16\": {\"enabled\": true, \"min_loss_scale\": 0}}", 1);
    CHECK_ERR(rc, "fp16.min_loss_scale", "dynamic loss scaling");
    rc = parse(&c, "{\"train_batch_size\": 8, \"fp16\": {\"enabled\": true, \"loss_scale\": 128, "
                   "\"loss_scale_window\": 0, \"min_loss_scale\": 0}}", 1);
    CHECK_OK(rc);
    CHECK(c.fp16_loss_scale == 128 && c.fp16_loss_scale_window == 0 && c.fp16_min_loss_scale == 0,
          "a static scale carries them unchecked");
    rc = parse(&c, "{\"train_batch_size\": 8, \"bf16\": {\"enabled\": true}, \"fp16\": {\"enabled\": false, "
                   "\"loss_scale_window\": 0, \"min_loss_scale\": 0}}", 1);
    CHECK_OK(rc);
    CHECK(c.bf16 && !c.fp16, "a disabled fp16 block carries them unchecked");

    /* warmup_type: lr_schedules.py WarmupLR.__init__ (and WarmupCosineLR.__init__): `if
     * warmup_type not in {WARMUP_LOG_RATE, WARMUP_LINEAR_RATE}: logger.warning(f"Using unknown
     * warmup_type: {warmup_type}. The increasing function is set to default (log)")`: any other
     * value, another case or null included, runs the log warm-up */
    const char *wt[] = {"\"cosine\"", "\"Linear\"", "null", "1", "\"auto\""};
    for (size_t i = 0; i < sizeof wt / sizeof *wt; i++) {
        char js[256];
        snprintf(js, sizeof js, "{\"train_batch_size\": 8, \"scheduler\": {\"type\": \"%s\", \"params\": "
                 "{%s\"warmup_type\": %s}}}", i % 2 ? "WarmupCosineLR" : "WarmupLR",
                 i % 2 ? "\"total_num_steps\": 100, " : "", wt[i]);
        rc = parse(&c, js, 1);
        CHECK_OK(rc);
        CHECK(c.sched.warmup_type_linear == 0 && c.n_warnings == 1 &&
                  strstr(warnbuf, "scheduler.params.warmup_type") && strstr(warnbuf, "log"),
              "warmup_type %s: log, with a warning: %s", wt[i], warnbuf);
    }

    /* top-level keys config.py DeepSpeedConfig._initialize_params reads that zinf does not
     * implement: log_level (get_log_level, LOG_LEVEL_DEFAULT None), datastates_ckpt
     * (datastates/config.py: enabled = the value `is not False`) and expert_parallel
     * (get_expert_parallel_config -> module_inject/auto_ep_config.py, "enabled" default False):
     * DeepSpeed keys, so not "unknown"; at their defaults (null, false) nothing is said */
    rc = parse(&c, "{\"train_batch_size\": 8, \"log_level\": \"info\", \"datastates_ckpt\": {}, "
                   "\"expert_parallel\": {\"enabled\": true}}", 1);
    CHECK_OK(rc);
    CHECK(c.n_warnings == 3 && !strstr(warnbuf, "unknown key") && strstr(warnbuf, "log_level is a DeepSpeed key") &&
              strstr(warnbuf, "datastates_ckpt is a DeepSpeed key") && strstr(warnbuf, "expert_parallel is a DeepSpeed key"),
          "DeepSpeed's keys: %s", warnbuf);
    rc = parse(&c, "{\"train_batch_size\": 8, \"log_level\": null, \"datastates_ckpt\": false}", 1);
    CHECK_OK(rc);
    CHECK(c.n_warnings == 0, "at their defaults: %s", warnbuf);

    /* batch keys written null: config.py get_train_batch_size & co. are get_scalar_param =
     * param_dict.get(key, None), so null is None, "not provided", and
     * _set_batch_related_parameters derives it (config_utils.py get_scalar_param; config.py) */
    rc = parse(&c, "{\"train_batch_size\": null, \"train_micro_batch_size_per_gpu\": 4, "
                   "\"gradient_accumulation_steps\": null}", 2);
    CHECK_OK(rc);
    CHECK(c.train_batch_size == 8 && c.train_micro_batch_size_per_gpu == 4 && c.gradient_accumulation_steps == 1,
          "null batch keys derived: %lld %lld %lld", (long long)c.train_batch_size,
          (long long)c.train_micro_batch_size_per_gpu, (long long)c.gradient_accumulation_steps);
    rc = parse(&c, "{\"train_batch_size\": 16, \"train_micro_batch_size_per_gpu\": null}", 2);
    CHECK_OK(rc);
    CHECK(c.train_batch_size == 16 && c.train_micro_batch_size_per_gpu == 8 && c.gradient_accumulation_steps == 1,
          "micro null: 16 / 2");
    rc = parse(&c, "{\"train_batch_size\": null, \"gradient_accumulation_steps\": 2}", 2);
    CHECK_ERR(rc, "neither train_batch_size nor train_micro_batch_size_per_gpu");
}

/* ---------------------------------------------------------------- DeepSpeed 0.19's edge values */

static void test_ds_edges(void)
{
    zinf_config c;
    int rc;
    /* 1. lr_schedules.py WarmupLR.__init__ (WarmupDecayLR calls it) and WarmupCosineLR.__init__:
     * ValueError for warmup_num_steps below 1 */
    rc = parse(&c, "{\"train_batch_size\": 8, \"scheduler\": {\"type\": \"WarmupLR\", \"params\": "
                   "{\"warmup_num_steps\": 0}}}", 1);
    CHECK_ERR(rc, "cfg.json: scheduler.params.warmup_num_steps: expected a positive integer, got 0");
    rc = parse(&c, "{\"train_batch_size\": 8, \"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": "
                   "{\"total_num_steps\": 10, \"warmup_num_steps\": 0}}}", 1);
    CHECK_ERR(rc, "cfg.json: scheduler.params.warmup_num_steps: expected a positive integer, got 0");
    rc = parse(&c, "{\"train_batch_size\": 8, \"scheduler\": {\"type\": \"WarmupLR\", \"params\": "
                   "{\"warmup_num_steps\": 1}}}", 1);
    CHECK_OK(rc);
    CHECK(c.sched.warmup_num_steps == 1, "warmup_num_steps 1 kept");

    /* 2. DeepSpeedConfigModel validates in pydantic's lax mode: a bool field takes 0/1 and the
     * strings of its lax table; blocks that are no pydantic model (aio) keep true/false */
    rc = parse(&c, "{\"train_batch_size\": 8, \"bf16\": {\"enabled\": 1, \"check_grad_overflow\": 0}, "
                   "\"zero_optimization\": {\"stage\": 3, \"overlap_comm\": \"no\", \"contiguous_gradients\": 0.0, "
                   "\"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": \"OFF\"}}}", 1);
    CHECK_OK(rc);
    CHECK(c.bf16 && !c.bf16_check_grad_overflow && !c.overlap_comm && !c.contiguous_gradients &&
              !c.offload_optimizer.pin_memory, "lax bools read as DeepSpeed reads them");
    CHECK(c.n_warnings == 0, "no warning, got %d: %s", c.n_warnings, warnbuf);
    rc = parse(&c, "{\"train_batch_size\": 8, \"fp16\": {\"enabled\": 1, \"fp16_master_weights_and_grads\": 1}}", 1);
    CHECK_ERR(rc, "cfg.json: fp16.fp16_master_weights_and_grads: zinf does not implement this DeepSpeed feature");
    rc = parse(&c, "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 1, \"cpu_offload\": 1}}", 1);
    CHECK_OK(rc);
    CHECK(c.offload_optimizer.device == ZINF_DEV_CPU, "cpu_offload 1 is true");
    rc = parse(&c, "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 1, \"round_robin_gradients\": 2}}", 1);
    CHECK_ERR(rc, "cfg.json: zero_optimization.round_robin_gradients: expected true or false, got 2");
    rc = parse(&c, "{\"train_batch_size\": 8, \"aio\": {\"single_submit\": 1}}", 1);
    CHECK_ERR(rc, "cfg.json: aio.single_submit: expected true or false, got 1");

    /* 3. precision_config.py: min_loss_scale is an int field; pydantic refuses a fraction */
    rc = parse(&c, "{\"train_batch_size\": 8, \"fp16\": {\"enabled\": true, \"min_loss_scale\": 0.5}}", 1);
    CHECK_ERR(rc, "cfg.json: fp16.min_loss_scale: expected 0 or an integer from 1 to 3.4e38, got 0.5");
    rc = parse(&c, "{\"train_batch_size\": 8, \"fp16\": {\"enabled\": true, \"min_loss_scale\": 4.0}}", 1);
    CHECK_OK(rc);
    CHECK(c.fp16_min_loss_scale == 4, "min_loss_scale 4.0 is 4");

    /* 4. precision_config.py _validate_loss_scale: float(v), then finite and >= 0 */
    rc = parse(&c, "{\"train_batch_size\": 8, \"fp16\": {\"enabled\": true, \"loss_scale\": \"0\"}}", 1);
    CHECK_OK(rc);
    CHECK(c.fp16_loss_scale == 0, "\"0\" is dynamic scaling");
    rc = parse(&c, "{\"train_batch_size\": 8, \"fp16\": {\"enabled\": true, \"loss_scale\": \" 1_024 \"}}", 1);
    CHECK_OK(rc);
    CHECK(c.fp16_loss_scale == 1024, "\" 1_024 \" is 1024 as float() reads it, got %g", c.fp16_loss_scale);
    rc = parse(&c, "{\"train_batch_size\": 8, \"fp16\": {\"enabled\": true, \"loss_scale\": \"dynamic\"}}", 1);
    CHECK_ERR(rc, "cfg.json: fp16.loss_scale: expected 0 or a number from 1.18e-38 to 3.4e38 (a normal float), got "
                  "\"dynamic\"");
    rc = parse(&c, "{\"train_batch_size\": 8, \"fp16\": {\"enabled\": true, \"loss_scale\": \"inf\"}}", 1);
    CHECK_ERR(rc, "cfg.json: fp16.loss_scale: expected 0 or a number", "got \"inf\"");
    rc = parse(&c, "{\"train_batch_size\": 8, \"fp16\": {\"enabled\": true, \"loss_scale\": \"0x10\"}}", 1);
    CHECK_ERR(rc, "cfg.json: fp16.loss_scale: expected 0 or a number", "got \"0x10\"");

    /* 7. zero/config.py offload_ratio_check: a ratio below 1 asserts stage 3, whatever the device */
    rc = parse(&c, "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 2, "
                   "\"offload_optimizer\": {\"device\": \"none\", \"ratio\": 0.5}}}", 1);
    CHECK_ERR(rc, "cfg.json: zero_optimization.offload_optimizer: partial offload (ratio 0.5) needs stage 3 (stage "
                  "is 2), as DeepSpeed asserts");
    rc = parse(&c, "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 3, "
                   "\"offload_optimizer\": {\"device\": \"none\", \"ratio\": 0.5}}}", 1);
    CHECK_OK(rc);
    CHECK(strstr(warnbuf, "zinf: warning: cfg.json: zero_optimization.offload_optimizer.ratio 0.5 has no effect: the "
                          "device is \"none\"") != NULL, "ratio without a device: %s", warnbuf);

    /* 6. below stage 0 too: accepted, not offloaded, said */
    rc = parse(&c, "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 0, "
                   "\"offload_param\": {\"device\": \"nvme\"}}}", 1);
    CHECK_OK(rc);
    CHECK(c.offload_param.device == ZINF_DEV_NONE && strstr(warnbuf, "offload_param.device \"nvme\" has no effect at "
                                                                      "stage 0"), "stage 0: %s", warnbuf);

    /* 9. config.py get_optimizer_name / get_scheduler_name: None without "type" */
    rc = parse(&c, "{\"train_batch_size\": 8, \"optimizer\": {\"params\": {\"lr\": 0.1}}}", 1);
    CHECK_ERR(rc, "cfg.json: optimizer.type: missing: DeepSpeed builds no optimizer from a block without it");
    rc = parse(&c, "{\"train_batch_size\": 8, \"scheduler\": {\"params\": {\"warmup_num_steps\": 10}}}", 1);
    CHECK_ERR(rc, "cfg.json: scheduler.type: missing: DeepSpeed builds no scheduler from a block without it");

    /* 10. precision_config.py: get_bfloat16_config reads a null "bf16" as absent and then
     * "bfloat16"; get_float16_config passes a null "fp16" to the model (TypeError) */
    rc = parse(&c, "{\"train_batch_size\": 8, \"bf16\": null}", 1);
    CHECK_OK(rc);
    CHECK(!c.bf16 && c.n_warnings == 0, "bf16 null is bf16 absent");
    rc = parse(&c, "{\"train_batch_size\": 8, \"bf16\": null, \"bfloat16\": {\"enabled\": true}}", 1);
    CHECK_OK(rc);
    CHECK(c.bf16, "bf16 null: bfloat16 is read");
    rc = parse(&c, "{\"train_batch_size\": 8, \"fp16\": null}", 1);
    CHECK_ERR(rc, "cfg.json: fp16: expected an object, got null");
}

int main(void)
{
    test_flag_rules();
    test_bom();
    test_fixtures();
    test_defaults();
    test_types();
    test_text();
    test_unknown();
    test_combinations();
    test_batch();
    test_auto();
    test_default_and_print();
    test_deepspeed_rules();
    test_torch_dtype();
    test_ds_audit();
    test_ds_edges();
    return check_done("test_config");
}
