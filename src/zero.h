/* zero: ZeRO stages 0-3 over the collectives API. Owns the partitioning of each unit's flat
 * buffer (padded to a multiple of the world size W; rank r owns [r*p, (r+1)*p)), the shard
 * states and their memory, the stage-3 gather/release/prefetch plan, gradient reduction in
 * buckets into the owners' fp32 accumulators, the global gradient norm, the optimizer step (on
 * the device one AdamW per tensor piece of the shard; on the host, for offloaded states, in tiles
 * sized by sub_group_size), and the per-rank memory report. Stages are one code path:
 *   stage 0: full gradients all-reduced, every state replicated;
 *   stage 1: full gradients all-reduced, optimizer states (master, m, v) sharded, parameters
 *            all-gathered after the step in allgather_bucket_size pieces;
 *   stage 2: gradients reduce-scattered in reduce_bucket_size buckets after each unit's backward;
 *   stage 3: parameters sharded too, gathered per unit before use by a static prefetch plan,
 *            which also starts the reads of NVMe shards ahead (a unit's all-gather starts when
 *            its read lands). */
#ifndef ZINF_ZERO_H
#define ZINF_ZERO_H

#include <stdint.h>
#include <stdio.h>

#include "comm.h"
#include "config.h"
#include "kernels.h"
#include "model.h"

typedef struct zinf_zero zinf_zero;

/* Where a state lives: the backend's memory (the GPU; host memory on the CPU backend), host
 * memory (pinned where the offload block's pin_memory says so), or an NVMe swap file. These are
 * zinf estimate's GPU, CPU and NVMe columns. */
typedef enum { ZINF_AT_DEVICE = 0, ZINF_AT_HOST = 1, ZINF_AT_NVME = 2, ZINF_AT_N } zinf_at;

/* Memory held by this rank, by state, in bytes (current and peak of the total). */
typedef enum {
    ZINF_MEM_PARAM = 0,  /* full (gathered or replicated) compute-dtype parameters */
    ZINF_MEM_PARAM_SHARD,/* stage 3: this rank's compute-dtype parameter shard */
    ZINF_MEM_GRAD,       /* full compute-dtype gradients written by the backward */
    ZINF_MEM_GRAD_ACC,   /* fp32 gradient accumulators of this rank's shard */
    ZINF_MEM_MASTER,     /* fp32 master weights of this rank's shard (none when compute is fp32) */
    ZINF_MEM_ADAM,       /* Adam m and v of this rank's shard */
    ZINF_MEM_COMM,       /* bucket and staging buffers */
    ZINF_MEM_STAGING,    /* offload: host buffers tiles of gradients, parameters and NVMe states
                            pass through */
    ZINF_MEM_NKINDS
} zinf_mem_kind;

typedef struct zinf_mem_report {
    int64_t bytes[ZINF_MEM_NKINDS];          /* over every place */
    int64_t at[ZINF_AT_N][ZINF_MEM_NKINDS];  /* by place */
    int64_t total, peak;
    int64_t live_max_beyond_current; /* stage 3: most gathered elements beyond the unit in use */
    int64_t reduce_peak;    /* stages 2-3: most bytes the reduce-scatters in flight held at once */
} zinf_mem_report;

/* Host seconds spent in each part, and (wall_clock_breakdown, timed events) the backend's
 * seconds the compute stream waited for stage-3 gathers. */
typedef struct zinf_zero_times {
    double gather, reduce, wait, optimizer, gather_stall_dev;
    /* the host optimizer step (offload): in AdamW, waiting for copies to or from the device, and
     * waiting for NVMe reads and writes */
    double host_adam, host_copy_wait, host_io_wait;
    /* offloaded units updated, and of those the ones begun during the backward pass
     * (zinf_zero_overlap_step) */
    int host_units, host_units_early;
    double host_adam_early; /* of host_adam, the seconds before the backward pass and the norm ended */
    int host_threads;       /* the OpenMP team of the host AdamW (0: no host step) */
    /* stage 3: host updates joined in this period that ran on into the passes after their step
     * (each pass waits only for the units it uses), and the seconds those passes waited */
    int host_into_next;
    double update_wait;
} zinf_zero_times;

/* Where one unit's states live: the optimizer's (master, m, v), the stage-3 parameter shard's,
 * and whether the fp32 master is the parameter store itself (fp32 compute, one place). */
typedef struct zinf_unit_place { zinf_at opt, par; bool master_alias; } zinf_unit_place;

/* The placement rule zinf_zero_init applies, for units whose shards hold p[0..n) elements:
 * offload_optimizer moves every unit's optimizer states (at stage 3 only `ratio` of the shard's
 * elements, whole units in order); offload_param moves the stage-3 shards, NVMe only beyond the
 * first max_in_cpu elements, which stay in host memory; with NVMe optimizer offload, units whose
 * 12 bytes per element fit in zinf_optimizer_host_bytes (in order) stay in host memory too.
 * zinf estimate uses it as well. */
void zinf_zero_places(const zinf_config *cfg, int stage, bool f32, int n, const int64_t *p,
                      zinf_unit_place *out);

/* Whether a run's step reads its 16-bit gradients as the backward left them, with no fp32
 * accumulator: 16-bit compute (f32 false) at stage 0 on one rank (world 1) with one micro-step a
 * step (gas 1). Nothing is summed or averaged into them, so the norm and AdamW read each as its
 * exact fp32 value and the step has the same bits as through an fp32 copy, without the copy's
 * conversion pass and its 4 bytes a parameter. */
bool zinf_zero_grads16(int stage, bool f32, int world, int64_t gas);

/* The gradient store a rank keeps through a step of a unit whose padded size is pn and shard p:
 * its bytes and kind. ZINF_MEM_GRAD where it is the gradient itself: an fp32 run's at stages 0-1
 * (4 pn), or the 16-bit gradient of zinf_zero_grads16 (es pn, es the compute dtype's bytes);
 * else the fp32 accumulator, ZINF_MEM_GRAD_ACC, beside transient 16-bit gradients (4 pn at stages
 * 0-1, 4 p at stages 2-3). zinf_zero_init allocates by this rule and zinf estimate counts by the
 * same. */
int64_t zinf_zero_grad_bytes(int stage, bool f32, bool g16, size_t es, int64_t pn, int64_t p, zinf_mem_kind *kind);

/* The compute-dtype elements a rank's gradient reduction holds while a step runs, for a model of
 * psi parameters: a bucket of reduce_bucket_size elements (never more than psi) and, at stages
 * 2-3, the reduce-scatter's result beside its staging (1/W of it); nothing at stages 2-3 on one
 * rank, which adds each unit's gradient into its accumulator in place. The engine completes older
 * reduce-scatters before staging a piece that would pass it (a piece bigger than it, where the
 * largest tensor is, goes alone); zinf estimate counts it. */
int64_t zinf_zero_reduce_elems(int stage, int W, int64_t reduce_bucket, int64_t psi);

int zinf_zero_init(zinf_zero **out, zinf_model *m, const zinf_config *cfg, zinf_comm *comm,
                   zinf_backend *be, uint64_t seed);
void zinf_zero_free(zinf_zero *z);

/* Hooks for zinf_model_forward/backward. */
const zinf_unit_hooks *zinf_zero_hooks(zinf_zero *z);

/* Start of an optimizer step: zero gradient accumulators. */
int zinf_zero_begin_step(zinf_zero *z);
/* A step stopped between micro-batches (a stop signal): the reductions and device collectives in
 * flight complete, and the gradients summed so far stay where they are, unused (the next
 * zinf_zero_begin_step would discard them). Nothing is updated: the parameters and optimizer
 * states are the last step's, and a checkpoint written next holds them. */
int zinf_zero_abandon_step(zinf_zero *z);
/* Before a pass: which of the model's unit uses it makes (stage 3 plan): the forward's; the
 * forward's and the backward's (a training micro-step); the forward's before the head's (the
 * forwards of several micro-batches at once, zinf_model_forward_layers); the head's and the
 * backward's (each of those micro-batches after it). last_micro marks the last micro-step of an
 * optimizer step (stage 0/1 overlap the all-reduce). */
enum { ZINF_PASS_FORWARD = 0, ZINF_PASS_TRAIN = 1, ZINF_PASS_BODY = 2, ZINF_PASS_TAIL = 3 };
int zinf_zero_begin_pass(zinf_zero *z, int kind, int last_micro);
/* The last step's host update is still running on into the passes to come (stage 3, see
 * zinf_zero_step): the step's first forwards can follow it unit by unit. */
bool zinf_zero_update_running(const zinf_zero *z);
/* Whether the placement lets the host update run on into the next step at all. */
bool zinf_zero_update_may_run_on(const zinf_zero *z);
/* After the pass (and its backward): finish outstanding reductions, release gathered units. */
int zinf_zero_end_pass(zinf_zero *z);
/* After the last micro-step: reduce what is still unreduced (stage 0/1 all-reduce), average over
 * ranks (prescale_gradients / gradient_predivide_factor), and return the global norm of the
 * averaged gradients, still multiplied by the loss scale. */
int zinf_zero_reduce(zinf_zero *z, double *norm);
/* AdamW on this rank's shards with the given hyper-parameters (weight decay per tensor), then
 * make the updated parameters visible (stage 1/2 all-gather, stage 3 refresh). At stage 3 with the
 * optimizer states in host memory (zinf_overlap_host_step) the host update may still be running
 * when this returns: the next passes wait for each unit's update before they gather it, and every
 * call that reads or writes the states (the checkpoint's, get_params, the next step) waits for
 * all of it. Same arithmetic, same results. */
int zinf_zero_step(zinf_zero *z, const zinf_adamw_args *a, double weight_decay);
/* Before the last micro-step's pass, where the step's arguments are already known and the step
 * will not be skipped (no clipping, no overflow skip): the offloaded units' host update begins
 * on a thread, each unit's as soon as its gradient is final during the backward pass, and
 * zinf_zero_step (called with the same arguments) finishes it. Same arithmetic, same results.
 * Returns 1 when begun, 0 where the placement does not allow it (zinf_overlap_host_step false,
 * no host optimizer states, NVMe states, stages 0-1), negative on failure. */
int zinf_zero_overlap_step(zinf_zero *z, const zinf_adamw_args *a, double weight_decay);

/* Checkpoints (ckpt.c). A unit's states are flat over its elements [0, numel); this rank's part
 * of them is [lo, lo+len): its shard, clipped to numel (stage 0: the whole unit). With `writer`,
 * each element belongs to exactly one rank (stage 0: rank 0), the ranges a file is written and
 * checksummed from. */
typedef enum { ZINF_CKPT_MASTER, ZINF_CKPT_ADAM_M, ZINF_CKPT_ADAM_V } zinf_ckpt_state;
void zinf_zero_ckpt_range(const zinf_zero *z, int u, bool writer, int64_t *lo, int64_t *len);
/* This rank's part of a unit's fp32 state, from or to a host buffer of len elements, wherever
 * the state lives (device, host, NVMe). */
int zinf_zero_ckpt_get(zinf_zero *z, int u, zinf_ckpt_state k, float *buf);
int zinf_zero_ckpt_set(zinf_zero *z, int u, zinf_ckpt_state k, const float *buf);
/* After the masters were set: the parameters from them, as a step leaves them. */
int zinf_zero_ckpt_params_from_master(zinf_zero *z);

void zinf_zero_mem(const zinf_zero *z, zinf_mem_report *r);
void zinf_zero_times_take(zinf_zero *z, zinf_zero_times *t); /* and reset */
/* After a pass has finished on the backend: add its gather waits to the times (count) or drop them. */
void zinf_zero_event_times(zinf_zero *z, bool count);
/* One line per state with MiB and the peak, on rank 0 via zinf_info. */
void zinf_zero_print_mem(const zinf_zero *z);

/* Copy this rank's view of unit u's full parameters into host fp32 (gathering in stage 3); for
 * tests and checks that parameters agree across ranks. */
int zinf_zero_get_params(zinf_zero *z, int u, float *out);

#endif
