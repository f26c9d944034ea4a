/* `zinf estimate`: model-state and buffer memory per GPU and per node for each ZeRO stage and
 * offload choice.
 *
 * MODEL STATES (per GPU, bytes; Psi parameters, N = nodes x gpus_per_node ranks), the ZeRO
 * paper's mixed-precision Adam accounting with K = 12:
 *
 *   state                      stage 0   stage 1   stage 2   stage 3   lives on
 *   16-bit parameters          2Psi      2Psi      2Psi      2Psi/N    GPU; offload_param moves it
 *   16-bit gradients           2Psi      2Psi      2Psi/N    2Psi/N    GPU
 *   fp32 master + m + v        12Psi     12Psi/N   12Psi/N   12Psi/N   GPU; offload_optimizer moves it
 *
 * so the sum is 16Psi, 4Psi + 12Psi/N, 2Psi + 14Psi/N and 16Psi/N exactly. zinf pads each unit to
 * a multiple of N (fewer than N elements per unit): not counted, it is below the printed precision.
 * A known difference: with 16-bit compute, zinf's engine keeps no 16-bit gradient at rest but
 * fp32 gradient accumulators on the device, 4 bytes per element (of the rank's shard at stages
 * 2-3, of the whole unit at stages 0-1), so these mixed-precision rows count 2 bytes per
 * gradient element where the engine holds 4; except at stage 0 on one rank with one micro-step a
 * step, where the engine's step reads the 16-bit gradients themselves (zinf_zero_grads16).
 *
 * PLACES in the table: offload_param moves all the parameters to its device, offload_optimizer
 * moves its ratio of the optimizer states (a plain fraction), and with NVMe optimizer offload
 * zinf_optimizer_host_bytes moves up to that many bytes per rank of the NVMe optimizer states to
 * the CPU column (never more than the optimizer's NVMe share); max_in_cpu is not applied.
 * --print-bytes with --config appends device= host= nvme=: the model states by place, each unit
 * placed by zinf_zero_places, the rule the engine applies (rank_places).
 *
 * BUFFERS (per GPU; "elements" are parameters; "min(x, Psi)" because no bucket outgrows the model):
 *   - gradient reduction bucket, 16-bit, on the GPU, all stages:       2 x min(reduce_bucket_size, Psi)
 *     and at stages 2-3 the reduce-scatter's result beside it: 1/N of that more (the engine
 *     completes older reduce-scatters before staging past it: zinf_zero_reduce_elems); none at
 *     stages 2-3 on one GPU, which adds each unit's gradient into its accumulator in place
 *   - parameter all-gather bucket after the step, 16-bit, stages 1-2:  2 x min(allgather_bucket_size, Psi)
 *   - stage 3, on the GPU:
 *       gathered units: the unit in use plus what prefetch brings in (it goes on while less than
 *       P = stage3_prefetch_bucket_size elements are in flight, so up to one unit beyond P),
 *       capped by max_live_parameters but never below one unit:
 *         2 x min(Psi', max(L', min(stage3_max_live_parameters, L' + P + L'))) when P > 0,
 *         2 x L' when P = 0 (nothing is prefetched)
 *       where Psi' and L' are the total and the largest of the units that are gathered (not
 *       persistent); persistent units (numel <= stage3_param_persistence_threshold, taken in
 *       model order while their total stays within stage3_model_persistence_threshold; zinf
 *       decides per unit, DeepSpeed per tensor) stay whole on every GPU: 2 x their numel.
 *   - the units' full 16-bit gradients alive at once in the backward pass, each from its unit's
 *     first backward use to its last, before it is reduced (zinf_model_grad_live_max, in the
 *     family's use order: a tied embedding's from the head's backward to its own, beside each
 *     block's): 2 x that; at stages 2-3, and at stages 0-1 in 16-bit (fp32 at stages 0-1
 *     accumulates in place). At least the caller's largest layer.
 *   - fp32 gradient tile for the optimizer step (DeepSpeed's fp32 gradient partition):
 *       4 x min(sub_group_size, S), S = the shard (Psi for stage 0, Psi/N otherwise); on the GPU,
 *       or in host memory when the optimizer is offloaded. The engine holds no such tile on the
 *       GPU: its device step runs AdamW per tensor piece of the shard, straight on the fp32
 *       accumulators. Its host step works in tiles of T elements, T = sub_group_size clamped to
 *       [min(2^18, the largest tensor's share of a shard), min(2^24, the largest shard)] and
 *       rounded up to a multiple of 1024; on a GPU it copies the gradient down through 2 pinned
 *       fp32 tiles (4T bytes each) and sends the updated parameters up (or out to NVMe) through 2
 *       pinned tiles of the compute dtype (2T bytes each in 16-bit); the CPU backend reads the
 *       accumulators in place.
 *   - NVMe optimizer offload, host, as DeepSpeed sizes its swap buffers:
 *       offload_optimizer.buffer_count x 4 x min(sub_group_size, S).
 *     The engine's own pool is different: 3 x (1 + pipeline_read + pipeline_write) fp32 tiles of
 *     T elements (4T bytes each), whatever buffer_count says; for GPT-2 1.5B on one GPU with the
 *     defaults, 192 MiB where this line counts 4 x 4 x 1e9 bytes.
 *   - NVMe parameter offload, host, as DeepSpeed sizes its swap buffers:
 *       offload_param.buffer_count x offload_param.buffer_size x 2.
 *     The engine on a device backend reads NVMe shards (ahead of use, for the units the stage-3
 *     plan prefetches) into offload_param.buffer_count pinned host buffers (at most 64) of one
 *     largest NVMe shard each, plus one more such buffer for the reads it waits for (and the
 *     device step's shard writes); buffer_size changes nothing (zinf reads whole shards). The
 *     CPU backend reads straight into the gathered buffer.
 * Per node = per GPU x gpus_per_node (host and NVMe are shared by a node's ranks).
 *
 * HOW THIS DIFFERS FROM DEEPSPEED'S ESTIMATORS (stage_1_and_2.py
 * estimate_zero2_model_states_mem_needs, stage3.py estimate_zero3_model_states_mem_needs), which
 * print per GPU and per CPU (= per node) for a hypothetical model:
 *   - DeepSpeed counts 16 bytes per parameter of optimizer state where zinf counts 12: its extra 4
 *     are the fp32 gradient partition. zinf keeps the paper's K = 12 in the model states and counts
 *     that fp32 gradient as the step tile above (the same 4Psi/N while sub_group_size >= Psi/N, the
 *     default 1e9 for any model below 1e9 x N parameters); zinf's engine holds it as its fp32
 *     gradient accumulators (see MODEL STATES). DeepSpeed's ZeRO-2 figure without
 *     offload, 4Psi + 16Psi/N, also keeps full 16-bit gradients (conservative); zinf's stage 2
 *     partitions them: 2Psi + 14Psi/N.
 *   - DeepSpeed's ZeRO-3 GPU figure adds 4 bytes x the largest layer (its fp32-ish gather room);
 *     zinf counts what its engine holds: 16-bit gathered units (>= the largest), the largest unit's
 *     16-bit gradient and the reduction bucket. DeepSpeed's largest layer is the largest
 *     nn.Module (for HF GPT-2, wte alone); zinf's is the largest unit (wte + wpe together),
 *     because zinf gathers by unit.
 *   - DeepSpeed multiplies host figures by additional_buffer_factor = 1.5 and, without zero_init,
 *     adds a full fp32 model per rank (4Psi x gpus_per_node) for loading. zinf has no such peak:
 *     every shard is initialised in place from (seed, unit, index) - as zero_init=1 - so no
 *     factor is applied and only the buffers listed above are added.
 *   - With ZeRO-Offload DeepSpeed also keeps the reduced gradient partition on the host (its
 *     ZeRO-2 offload GPU figure is 2Psi). zinf reduce-scatters 16-bit pieces, adds them into the
 *     fp32 gradient accumulators of the shard on the GPU, and its host step copies those down a
 *     tile at a time, so offload moves exactly the optimizer share (12Psi/N) and the fp32
 *     gradient tile; the gradient partition stays on the GPU (at stages 2-3, 2Psi/N here and
 *     4Psi/N in the engine).
 *   - DeepSpeed does not count communication buckets at all; zinf does (they are real device
 *     memory: reduce_bucket_size 5e8 is 1 GB of 16-bit buffer).
 *   - Precision: both assume 16-bit parameters and gradients. A config with neither fp16 nor bf16
 *     trains in fp32 (4 + 4 + 8 bytes: the same 16Psi in total, split differently); the table says
 *     so in a note but keeps the mixed-precision figures, as DeepSpeed's estimators do, unless
 *     --precision fp32 is given.
 *
 * FP32 (--precision fp32): the states as zero.c allocates them on the fp32 CPU backend, unit by
 * unit (embedding wte+wpe, each block, final LayerNorm), n elements padded from stage 1 on to
 * pn = ceil(n/N) x N, shard p = pn/N (stage 0: pn = p = n), per rank at rest:
 *
 *   state                      stage 0   stage 1   stage 2   stage 3
 *   fp32 parameters            4n        4pn       4pn       4p (shard)
 *   fp32 gradients             4n        4pn       4p (acc)  4p (acc)
 *   fp32 master                0: the fp32 parameters are the master weights
 *   Adam m + v                 8n        8p        8p        8p
 *
 * summed over the units (zinf_estimate_rank_states_fp32; a run's metrics.jsonl reports the same
 * bytes). An offloaded optimizer also needs an fp32 master of the shard where it runs (4p) unless
 * the parameter shard is offloaded there too. Buffers: as above with 4 bytes per element for the
 * compute-dtype ones (buckets, gathered units, unit gradient, NVMe parameter buffers); no fp32
 * gradient tile on the GPU (nothing to convert), the host copy of it with optimizer offload
 * (counted, though the CPU backend's host step reads the accumulators in place). */
#include "estimate.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "err.h"
#include "zero.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

/* DeepSpeed's defaults (runtime/zero/config.py, offload_config.py) for the buffer sizes */
#define DS_REDUCE_BUCKET 500000000.0
#define DS_ALLGATHER_BUCKET 500000000.0
#define DS_SUB_GROUP 1000000000.0
#define DS_PREFETCH 50000000.0
#define DS_MAX_LIVE 1000000000.0
#define DS_PERSISTENCE 100000.0
#define DS_MODEL_PERSISTENCE 9223372036854775807.0 /* sys.maxsize */
#define DS_OPT_BUFFER_COUNT 4.0
#define DS_PARAM_BUFFER_COUNT 5.0
#define DS_PARAM_BUFFER_SIZE 100000000.0

static const char *const DEV[] = {"none", "cpu", "nvme"};

static double dmin(double a, double b) { return a < b ? a : b; }
static double dmax(double a, double b) { return a > b ? a : b; }

/* a buffer size from the config when it has one (> 0), else DeepSpeed's default */
static double cfg_or(const zinf_config *cfg, int64_t v, double dflt)
{
    return cfg && v > 0 ? (double)v : dflt;
}

static int check_combo(int stage, int off_opt, int off_param, int nodes, int gpus_per_node)
{
    if (stage < 0 || stage > 3) return zinf_err("ZeRO stage %d: expected 0, 1, 2 or 3", stage);
    if (off_opt < 0 || off_opt > 2 || off_param < 0 || off_param > 2)
        return zinf_err("offload device %d/%d: expected 0 (none), 1 (cpu) or 2 (nvme)", off_opt,
                        off_param);
    if (nodes < 1 || gpus_per_node < 1)
        return zinf_err("nodes %d, gpus per node %d: both must be at least 1", nodes,
                        gpus_per_node);
    if ((long long)nodes * gpus_per_node > INT_MAX / 2)
        return zinf_err("%d nodes x %d GPUs per node: too many", nodes, gpus_per_node);
    if (off_param && stage < 3)
        return zinf_err("offload_param=%s needs ZeRO stage 3 (stage is %d)", DEV[off_param], stage);
    if (off_opt && stage == 0)
        return zinf_err("offload_optimizer=%s needs ZeRO stage 1, 2 or 3 (stage is 0)",
                        DEV[off_opt]);
    if (off_opt == ZINF_EST_NVME && stage < 3)
        return zinf_err("offload_optimizer=nvme needs ZeRO stage 3 (stage is %d)", stage);
    return 0;
}

int zinf_estimate_states(double psi, int stage, int off_opt, int off_param, double off_opt_ratio,
                         int nodes, int gpus_per_node, zinf_mem_estimate *out)
{
    memset(out, 0, sizeof *out);
    ZINF_TRY(check_combo(stage, off_opt, off_param, nodes, gpus_per_node));
    if (!(psi > 0)) return zinf_err("parameter count %g: must be positive", psi);
    if (!(off_opt_ratio > 0 && off_opt_ratio <= 1))
        return zinf_err("offload_optimizer ratio %g: expected 0 < ratio <= 1", off_opt_ratio);
    const double N = (double)nodes * gpus_per_node, G = gpus_per_node;
    out->stage = stage;
    out->offload_optimizer = off_opt;
    out->offload_param = off_param;
    out->params = stage >= 3 ? 2.0 * psi / N : 2.0 * psi;
    out->grads = stage >= 2 ? 2.0 * psi / N : 2.0 * psi;
    out->optim = stage >= 1 ? 12.0 * psi / N : 12.0 * psi;

    double gpu = 0, cpu = 0, nvme = 0; /* per GPU */
    double *place[3] = {&gpu, &cpu, &nvme};
    *place[off_param] += out->params;
    gpu += out->grads;
    if (off_opt == ZINF_EST_NONE || off_opt_ratio >= 1.0) {
        *place[off_opt] += out->optim;
    } else {
        *place[off_opt] += out->optim * off_opt_ratio;
        gpu += out->optim - out->optim * off_opt_ratio;
    }
    out->gpu_bytes = gpu;
    out->cpu_bytes_per_node = cpu * G;
    out->nvme_bytes_per_node = nvme * G;
    return 0;
}

static int check_precision(int precision)
{
    if (precision != ZINF_EST_MIXED && precision != ZINF_EST_FP32 && precision != ZINF_EST_ENGINE16)
        return zinf_err("precision %d: expected mixed (0), fp32 (1) or the engine's 16-bit (2)", precision);
    return 0;
}

/* The engine's units for model c: zinf_model_init without a backend, the exact counts it shards. */
static int layout(const zinf_model_cfg *c, zinf_model *m)
{
    int rc = zinf_model_init(m, c, NULL);
    if (rc) zinf_model_free(m);
    return rc;
}

/* the first of the largest units of m, and what it is */
static int64_t largest_unit(const zinf_model *m, const char **name)
{
    int best = 0;
    for (int u = 1; u < m->nunits; u++)
        if (m->units[u].numel > m->units[best].numel) best = u;
    if (name) *name = m->units[best].what ? m->units[best].what : "unit"; /* static: outlives m */
    return m->units[best].numel;
}

int64_t zinf_estimate_largest_unit(const zinf_model_cfg *m, const char **name)
{
    zinf_model mm;
    ZINF_TRY(layout(m, &mm));
    int64_t n = largest_unit(&mm, name);
    zinf_model_free(&mm);
    return n;
}

/* the micro-steps a step: the config's, else DeepSpeed's default, 1 */
static int64_t cfg_gas(const zinf_config *cfg)
{
    return cfg && cfg->gradient_accumulation_steps > 0 ? cfg->gradient_accumulation_steps : 1;
}

int zinf_estimate_rank_states(const zinf_model_cfg *m, int precision, int stage, int world, int64_t gas,
                              int64_t bytes_out[ZINF_EST_NKINDS])
{
    for (int k = 0; k < ZINF_EST_NKINDS; k++) bytes_out[k] = 0;
    if (!m) return zinf_err("estimate: no model");
    ZINF_TRY(check_precision(precision));
    if (stage < 0 || stage > 3) return zinf_err("ZeRO stage %d: expected 0, 1, 2 or 3", stage);
    if (world < 1) return zinf_err("world size %d: must be at least 1", world);
    zinf_model mm;
    ZINF_TRY(layout(m, &mm));
    const int64_t e = precision == ZINF_EST_FP32 ? 4 : 2; /* bytes of the compute dtype */
    const int64_t W = world;
    const bool f32 = precision == ZINF_EST_FP32, g16 = zinf_zero_grads16(stage, f32, world, gas);
    for (int u = 0; u < mm.nunits; u++) {
        const int64_t n = mm.units[u].numel;
        const int64_t pn = stage == 0 ? n : (n + W - 1) / W * W; /* zero.c's padding */
        const int64_t p = stage == 0 ? n : pn / W;
        if (stage < 3) bytes_out[ZINF_EST_PARAM] += e * pn;
        else bytes_out[ZINF_EST_PARAM_SHARD] += e * p;
        if (precision == ZINF_EST_MIXED) { /* the paper: 16-bit gradients */
            if (stage < 2) bytes_out[ZINF_EST_GRAD] += e * pn;
            else bytes_out[ZINF_EST_GRAD_ACC] += e * p;
        } else { /* the engine: its gradient store, by zero.c's own rule */
            zinf_mem_kind gk;
            int64_t gb = zinf_zero_grad_bytes(stage, f32, g16, (size_t)e, pn, p, &gk);
            bytes_out[gk == ZINF_MEM_GRAD ? ZINF_EST_GRAD : ZINF_EST_GRAD_ACC] += gb;
        }
        if (precision != ZINF_EST_FP32) bytes_out[ZINF_EST_MASTER] += 4 * p;
        bytes_out[ZINF_EST_ADAM] += 8 * p;
    }
    zinf_model_free(&mm);
    return 0;
}

int zinf_estimate_rank_states_fp32(const zinf_model_cfg *m, int stage, int world,
                                   int64_t bytes_out[ZINF_EST_NKINDS])
{
    return zinf_estimate_rank_states(m, ZINF_EST_FP32, stage, world, 1, bytes_out);
}

/* The engine's model states (fp32, or 16-bit compute) and their placement: the exact per-unit
 * bytes of zero.c */
static int states_exact(const zinf_model_cfg *m, int precision, int stage, int off_opt, int off_param,
                        double ratio, int nodes, int gpus_per_node, int64_t gas, zinf_mem_estimate *out)
{
    int64_t b[ZINF_EST_NKINDS];
    ZINF_TRY(zinf_estimate_rank_states(m, precision, stage, nodes * gpus_per_node, gas, b));
    out->stage = stage;
    out->offload_optimizer = off_opt;
    out->offload_param = off_param;
    out->params = (double)(b[ZINF_EST_PARAM] + b[ZINF_EST_PARAM_SHARD]);
    out->grads = (double)(b[ZINF_EST_GRAD] + b[ZINF_EST_GRAD_ACC]);
    /* 16-bit: the master of the shard lives with m and v. fp32: an offloaded optimizer updates an
     * fp32 master of the shard (4 bytes = adam / 2) where it runs, unless the parameter shard
     * itself lives there */
    const double adam = precision == ZINF_EST_FP32 ? (double)b[ZINF_EST_ADAM]
                                                   : (double)(b[ZINF_EST_ADAM] + b[ZINF_EST_MASTER]);
    const double master = precision == ZINF_EST_FP32 && off_opt && off_opt != off_param ? ratio * adam / 2.0 : 0.0;
    out->optim = adam + master;

    double gpu = 0, cpu = 0, nvme = 0; /* per GPU */
    double *place[3] = {&gpu, &cpu, &nvme};
    *place[off_param] += out->params;
    gpu += out->grads;
    if (off_opt == ZINF_EST_NONE || ratio >= 1.0) {
        *place[off_opt] += out->optim;
    } else {
        *place[off_opt] += adam * ratio + master;
        gpu += adam - adam * ratio;
    }
    out->gpu_bytes = gpu;
    out->cpu_bytes_per_node = cpu * gpus_per_node;
    out->nvme_bytes_per_node = nvme * gpus_per_node;
    return 0;
}

/* The GPU buffers that exist only while a step runs, in elements of the compute dtype: the
 * gradient reduction bucket; at stages 1-2 the post-step all-gather bucket; the units' full
 * gradients alive at once in the backward pass (zinf_model_grad_live_max: at stages 2-3, and at
 * stages 0-1 in 16-bit, where the engine adds them into fp32 accumulators; fp32 at stages 0-1
 * accumulates in place); at stage 3 the gathered units in flight. *pers gets the stage-3
 * persistent units (whole on every GPU from the start). */
static int step_buffers(const zinf_model_cfg *m, int stage, bool fp32, bool g16, double N, double L, double psi, double rbs,
                        double abs_, double prefetch, double max_live, double persist, const zinf_config *cfg,
                        double *step, double *pers)
{
    /* gradient reduction bucket, and at stages 2-3 the reduce-scatter's result: the engine's bound */
    *step = (double)zinf_zero_reduce_elems(stage, (int)N, (int64_t)rbs, (int64_t)psi);
    *pers = 0;
    if (stage == 1 || stage == 2) *step += dmin(abs_, psi); /* post-step all-gather bucket */
    zinf_model mm;
    ZINF_TRY(layout(m, &mm));
    const int64_t glive = zinf_model_grad_live_max(&mm);
    /* persistence as zinf_zero_init decides it (and DeepSpeed, per tensor): units in model order,
     * a unit of at most stage3_param_persistence_threshold elements persists while the persistent
     * units, it included, hold at most stage3_model_persistence_threshold */
    const double model_persist = cfg ? (double)cfg->stage3_model_persistence_threshold : DS_MODEL_PERSISTENCE;
    double gath_total = 0, gath_max = 0;
    for (int u = 0; stage == 3 && u < mm.nunits; u++) {
        const double n = (double)mm.units[u].numel;
        if (n <= persist && *pers + n <= model_persist) *pers += n;
        else { gath_total += n; gath_max = dmax(gath_max, n); }
    }
    zinf_model_free(&mm);
    if (glive < 0) return (int)glive;
    /* the units' full gradients, in the compute dtype; the caller's largest layer, when bigger
     * (not where the 16-bit gradients are the model states' own, zinf_zero_grads16) */
    if (stage >= 2 || (!fp32 && !g16)) *step += dmax((double)glive, L);
    if (stage != 3) return 0;
    /* the caller's largest layer, when it names a gathered unit bigger than ours, wins */
    if (gath_max > 0 && L > persist) gath_max = dmax(gath_max, dmin(L, gath_total));
    double live = 0;
    if (gath_total > 0)
        /* prefetch goes on while less than the bucket is in flight: up to one unit more */
        live = dmin(gath_total, dmax(gath_max, dmin(max_live, gath_max + (prefetch > 0 ? prefetch + gath_max : 0))));
    *step += live; /* gathered units */
    return 0;
}

int zinf_estimate_prec(const zinf_model_cfg *m, int precision, int stage, int off_opt,
                       int off_param, int nodes, int gpus_per_node, int64_t largest_layer_params,
                       const zinf_config *cfg, zinf_mem_estimate *out)
{
    memset(out, 0, sizeof *out);
    if (!m) return zinf_err("estimate: no model");
    ZINF_TRY(check_precision(precision));
    const bool fp32 = precision == ZINF_EST_FP32;
    const double esz = fp32 ? 4.0 : 2.0; /* bytes per element of the compute dtype */
    const int64_t nparams = zinf_model_num_params(m);
    if (nparams < 0) return (int)nparams; /* an int64 count: ZINF_TRY would cut it to int */
    const double psi = (double)nparams;
    /* partial optimizer offload (stage 3): the config's ratio applies to its own device */
    double ratio = 1.0;
    if (cfg && off_opt && (int)cfg->offload_optimizer.device == off_opt &&
        cfg->offload_optimizer.ratio > 0 && cfg->offload_optimizer.ratio < 1)
        ratio = cfg->offload_optimizer.ratio;
    if (precision != ZINF_EST_MIXED) {
        ZINF_TRY(check_combo(stage, off_opt, off_param, nodes, gpus_per_node));
        ZINF_TRY(states_exact(m, precision, stage, off_opt, off_param, ratio, nodes, gpus_per_node, cfg_gas(cfg),
                              out));
    } else {
        ZINF_TRY(zinf_estimate_states(psi, stage, off_opt, off_param, ratio, nodes, gpus_per_node,
                                      out));
    }
    /* zinf_optimizer_host_bytes: NVMe optimizer offload keeps up to that many bytes per rank of
     * optimizer states in host memory (zinf_zero_places places whole units; --print-bytes with
     * --config gives the exact split) */
    if (cfg && off_opt == ZINF_EST_NVME && cfg->zinf_optimizer_host_bytes > 0) {
        double nv = out->nvme_bytes_per_node / gpus_per_node, keep = (double)cfg->zinf_optimizer_host_bytes;
        if (off_param == ZINF_EST_NVME) nv -= out->params; /* only the optimizer's share moves */
        if (keep > nv) keep = nv;
        if (keep > 0) {
            out->nvme_bytes_per_node -= keep * gpus_per_node;
            out->cpu_bytes_per_node += keep * gpus_per_node;
        }
    }

    const double N = (double)nodes * gpus_per_node, G = gpus_per_node;
    const int64_t largest = largest_layer_params > 0 ? largest_layer_params : zinf_estimate_largest_unit(m, NULL);
    if (largest < 0) return (int)largest; /* an int64 count: ZINF_TRY would cut it to int */
    const double L = (double)largest;
    const double rbs = cfg_or(cfg, cfg ? cfg->reduce_bucket_size : 0, DS_REDUCE_BUCKET);
    const double abs_ = cfg_or(cfg, cfg ? cfg->allgather_bucket_size : 0, DS_ALLGATHER_BUCKET);
    const double sub = cfg_or(cfg, cfg ? cfg->sub_group_size : 0, DS_SUB_GROUP);
    const double prefetch =
        cfg ? (double)(cfg->stage3_prefetch_bucket_size > 0 ? cfg->stage3_prefetch_bucket_size : 0)
            : DS_PREFETCH;
    const double max_live = cfg_or(cfg, cfg ? cfg->stage3_max_live_parameters : 0, DS_MAX_LIVE);
    const double persist =
        cfg ? (double)(cfg->stage3_param_persistence_threshold > 0
                           ? cfg->stage3_param_persistence_threshold : 0)
            : DS_PERSISTENCE;
    const double opt_bufs =
        cfg_or(cfg, cfg ? cfg->offload_optimizer.buffer_count : 0, DS_OPT_BUFFER_COUNT);
    const double par_bufs = cfg_or(cfg, cfg ? cfg->offload_param.buffer_count : 0,
                                   DS_PARAM_BUFFER_COUNT);
    const double par_bufsize = cfg_or(cfg, cfg ? cfg->offload_param.buffer_size : 0,
                                      DS_PARAM_BUFFER_SIZE);

    double gbuf = 0, hbuf = 0; /* per GPU: device buffers, host buffers */
    double step_bufs = 0, pers = 0;
    /* the engine's 16-bit gradients kept whole (not the paper's accounting, which has no buffer) */
    const bool g16 = precision == ZINF_EST_ENGINE16 && zinf_zero_grads16(stage, false, (int)N, cfg_gas(cfg));
    ZINF_TRY(step_buffers(m, stage, fp32, g16, N, L, psi, rbs, abs_, prefetch, max_live, persist, cfg, &step_bufs,
                          &pers));
    gbuf += esz * step_bufs; /* the buckets, the gradients in flight, at stage 3 the gathered units */
    gbuf += esz * pers;      /* stage 3: persistent units, whole on every GPU */
    const double shard = stage == 0 ? psi : psi / N;
    const double tile = dmin(sub, shard);
    /* fp32 gradient tile for the step: in the paper's accounting on the GPU (the engine's device
     * step reads its fp32 accumulators in place); with an offloaded optimizer the host copy */
    if (off_opt == ZINF_EST_NONE) { if (precision == ZINF_EST_MIXED) gbuf += 4.0 * tile; }
    else hbuf += 4.0 * tile;
    if (off_opt == ZINF_EST_NVME) hbuf += opt_bufs * 4.0 * tile; /* pinned swap staging */
    if (off_param == ZINF_EST_NVME) hbuf += par_bufs * par_bufsize * esz;

    out->gpu_step_buffers = esz * step_bufs;
    out->gpu_buffers = gbuf;
    out->cpu_buffers = hbuf;
    out->buffers = gbuf + hbuf;
    out->gpu_bytes += gbuf;
    out->cpu_bytes_per_node += hbuf * G;
    return 0;
}

int zinf_estimate(const zinf_model_cfg *m, int stage, int off_opt, int off_param, int nodes,
                  int gpus_per_node, int64_t largest_layer_params, const zinf_config *cfg,
                  zinf_mem_estimate *out)
{
    return zinf_estimate_prec(m, ZINF_EST_MIXED, stage, off_opt, off_param, nodes, gpus_per_node,
                              largest_layer_params, cfg, out);
}

/* ------------------------------------------------------------------ printing --------------- */
/* The free bytes under the first of the config's NVMe paths (one per line), 0 when none is given
 * or it cannot be examined from here */
static double nvme_free(const char *paths)
{
    char first[1024];
    snprintf(first, sizeof first, "%s", paths ? paths : "");
    first[strcspn(first, "\n")] = 0;
    struct statvfs sv;
    if (!first[0] || statvfs(first, &sv)) return 0;
    return (double)sv.f_bavail * (double)sv.f_frsize;
}

typedef struct { int stage, opt, param; } row;

/* every row DeepSpeed accepts that the table shows without a config */
static const row ROWS[] = {
    {0, 0, 0},
    {1, 0, 0}, {1, 1, 0},
    {2, 0, 0}, {2, 1, 0},
    {3, 0, 0}, {3, 1, 0}, {3, 2, 0}, {3, 1, 1}, {3, 2, 2},
};

/* 5e8 rather than 500000000 where a count is one digit times a power of ten */
static void fmt_count(char *buf, size_t cap, double v)
{
    double p = 1;
    int k = 0;
    while (v >= 1e5 && p * 10 <= v) { p *= 10; k++; }
    double d = v / p;
    if (v >= 1e5 && d == (double)(int)d)
        snprintf(buf, cap, "%de%d", (int)d, k);
    else
        snprintf(buf, cap, "%.0f", v);
}

/* "name value" items after a label, wrapped below 100 columns */
static void print_items(FILE *out, const char *label, const char *const *names,
                        const double *vals, int n)
{
    int col = fprintf(out, "  %-9s ", label);
    const int indent = col;
    for (int i = 0; i < n; i++) {
        char num[32], item[96];
        fmt_count(num, sizeof num, vals[i]);
        int len = snprintf(item, sizeof item, "%s %s%s", names[i], num, i + 1 < n ? "," : "");
        if (i > 0 && col + 1 + len > 98) { fprintf(out, "\n%*s", indent, ""); col = indent; }
        else if (i > 0) { fputc(' ', out); col++; }
        col += fprintf(out, "%s", item);
    }
    fputc('\n', out);
}

int zinf_estimate_print_prec(FILE *out, const zinf_model_cfg *m, const zinf_config *cfg,
                             int nodes, int gpus_per_node, int precision, int stage)
{
    if (!m) return zinf_err("estimate: no model");
    ZINF_TRY(check_combo(0, 0, 0, nodes, gpus_per_node));
    ZINF_TRY(check_precision(precision));
    if (stage > 3 || stage < -1) return zinf_err("ZeRO stage %d: expected 0, 1, 2 or 3", stage);
    if (cfg && stage >= 0)
        return zinf_err("estimate: a stage and a config both choose the row; give one of them");
    const bool fp32 = precision == ZINF_EST_FP32;
    const char *lname;
    const int64_t psi = zinf_model_num_params(m);
    const int64_t L = zinf_estimate_largest_unit(m, &lname);
    if (psi < 0) return (int)psi; /* int64 counts: ZINF_TRY would cut them to int */
    if (L < 0) return (int)L;
    const int world = nodes * gpus_per_node;

    fprintf(out, "zinf estimate: memory for parameters, gradients and optimizer states (%s)\n",
            fp32 ? "fp32 Adam, as zinf's engine holds them"
                 : precision == ZINF_EST_ENGINE16 ? "16-bit compute, as zinf's engine holds them"
                                                  : "mixed-precision Adam, the ZeRO paper's accounting");
    fprintf(out, "  hardware: %d node%s x %d GPU%s per node = %d GPU%s (data-parallel world %d)\n",
            nodes, nodes > 1 ? "s" : "", gpus_per_node, gpus_per_node > 1 ? "s" : "", world,
            world > 1 ? "s" : "", world);
    char *shape = zinf_model_describe(m, 12, 100);
    if (!shape) return ZINF_ENOMEM;
    fprintf(out, "  model:    %s (%s)\n            %s\n", m->name, m->model_type[0] ? m->model_type : "gpt2", shape);
    free(shape);
    fprintf(out, "  params:   Psi = %" PRId64 " (%.1fM); largest unit: %s, %" PRId64 " (%.1fM)\n",
            psi, (double)psi / 1e6, lname, L, (double)L / 1e6);
    if (fp32)
        fprintf(out, "  states:   4Psi fp32 params + 4Psi fp32 grads + 8Psi Adam m/v (the master is the\n"
                     "            params); stage 1 shards m/v over the %d GPU%s, stage 2 also the grads,\n"
                     "            stage 3 also the params; each unit padded to a multiple of %d, exactly\n",
                world, world > 1 ? "s" : "", world);
    else if (precision == ZINF_EST_ENGINE16)
        fprintf(out, "  states:   2Psi 16-bit params + 4Psi fp32 gradient accumulators + 12Psi fp32 master/m/v;\n"
                     "            stage 1 shards the optimizer states over the %d GPU%s, stage 2 also the\n"
                     "            accumulators, stage 3 also the params; each unit padded to a multiple of %d\n"
                     "            (--precision mixed: the ZeRO paper's 2+2+12)\n",
                world, world > 1 ? "s" : "", world);
    else
        fprintf(out, "  states:   2Psi 16-bit params + 2Psi 16-bit grads + 12Psi fp32 master/m/v; stage 1\n"
                     "            shards the optimizer states over the %d GPU%s, stage 2 also the grads,\n"
                     "            stage 3 also the params\n",
                world, world > 1 ? "s" : "");
    static const char *const bnames[] = {
        "reduce_bucket_size", "allgather_bucket_size", "sub_group_size",
        "stage3_prefetch_bucket_size", "stage3_max_live_parameters",
        "stage3_param_persistence_threshold"};
    if (cfg) {
        fprintf(out, "  config:   %s\n", cfg->path[0] ? cfg->path : "(given)");
        const double v[] = {(double)cfg->reduce_bucket_size, (double)cfg->allgather_bucket_size,
                            (double)cfg->sub_group_size, (double)cfg->stage3_prefetch_bucket_size,
                            (double)cfg->stage3_max_live_parameters,
                            (double)cfg->stage3_param_persistence_threshold};
        print_items(out, "buffers:", bnames, v, cfg->zero_stage == 3 ? 6 : 3);
        if (precision == ZINF_EST_MIXED && !cfg->fp16 && !cfg->bf16)
            fprintf(out, "  note:     the config enables neither fp16 nor bf16 (fp32 training: "
                         "4+4+8 bytes per\n"
                         "            parameter); --precision mixed counts 16-bit params and grads, as "
                         "DeepSpeed's do\n");
        if (fp32 && (cfg->fp16 || cfg->bf16))
            fprintf(out, "  note:     the config enables %s; the figures count fp32 training (--precision "
                         "fp32, or\n"
                         "            the CPU backend, which computes in fp32)\n",
                    cfg->fp16 ? "fp16" : "bf16");
    } else {
        const double v[] = {DS_REDUCE_BUCKET, DS_ALLGATHER_BUCKET, DS_SUB_GROUP, DS_PREFETCH,
                            DS_MAX_LIVE, DS_PERSISTENCE};
        fprintf(out, "  config:   none: DeepSpeed's defaults for the buffers\n");
        print_items(out, "buffers:", bnames, v, 6);
    }
    fprintf(out, "\n");
    fprintf(out, "    %5s  %-17s  %-13s  %-30s  %s\n", "", "", "",
            "------------ per GPU -----------", "------ per node ------");
    fprintf(out, "    %5s  %-17s  %-13s  %9s  %9s  %9s  %10s  %10s\n", "stage",
            "offload_optimizer", "offload_param", "GPU GiB", "states", "buffers", "CPU GiB",
            "NVMe GiB");

    row rows[sizeof ROWS / sizeof ROWS[0]];
    size_t nrows = 0;
    if (cfg) {
        rows[nrows++] = (row){cfg->zero_stage, (int)cfg->offload_optimizer.device,
                              (int)cfg->offload_param.device};
    } else if (stage >= 0) {
        rows[nrows++] = (row){stage, 0, 0};
    } else {
        for (size_t i = 0; i < sizeof ROWS / sizeof ROWS[0]; i++) rows[nrows++] = ROWS[i];
    }
    /* what this machine has: its host memory, and the free space where the config's NVMe paths are */
    const long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    const double host = pages > 0 && psz > 0 ? (double)pages * (double)psz : 0;
    const char *npath = cfg ? (cfg->offload_param.nvme_path[0] ? cfg->offload_param.nvme_path
                                                               : cfg->offload_optimizer.nvme_path) : "";
    const double disk = nvme_free(npath);
    bool over_host = false, over_disk = false;
    for (size_t i = 0; i < nrows; i++) {
        const row r = rows[i];
        zinf_mem_estimate e;
        ZINF_TRY(zinf_estimate_prec(m, precision, r.stage, r.opt, r.param, nodes, gpus_per_node, L,
                                    cfg, &e));
        const bool oh = host > 0 && e.cpu_bytes_per_node > host, od = disk > 0 && e.nvme_bytes_per_node > disk;
        over_host = over_host || oh, over_disk = over_disk || od;
        char optname[32];
        double ratio = cfg ? cfg->offload_optimizer.ratio : 1.0;
        if (cfg && r.opt && ratio > 0 && ratio < 1)
            snprintf(optname, sizeof optname, "%s (ratio %.2g)", DEV[r.opt], ratio);
        else
            snprintf(optname, sizeof optname, "%s", DEV[r.opt]);
        fprintf(out, "  %c %5d  %-17s  %-13s  %9.2f  %9.2f  %9.2f  %10.2f  %10.2f%s%s\n",
                cfg ? '*' : ' ', r.stage, optname, DEV[r.param], e.gpu_bytes / GIB,
                (e.gpu_bytes - e.gpu_buffers) / GIB, e.gpu_buffers / GIB,
                e.cpu_bytes_per_node / GIB, e.nvme_bytes_per_node / GIB, oh ? "  host!" : "", od ? "  disk!" : "");
    }
    fprintf(out, "\n");
    if (host > 0)
        fprintf(out, "  this machine has %.2f GiB of host memory: %s\n", host / GIB,
                over_host ? "rows marked host! need more per node than that" : "every row's CPU column fits in it");
    if (disk > 0)
        fprintf(out, "  %s has %.2f GiB free: %s\n", npath, disk / GIB,
                over_disk ? "rows marked disk! need more NVMe per node than that" : "the NVMe column fits in it");
    if (cfg)
        fprintf(out, "  * the config's stage and offload devices\n");
    fprintf(out, "  GiB = 2^30 bytes. GPU = model states kept on the GPU + buffers (reduction and "
                 "gather buckets,\n"
                 "  gathered units%s); per node = %d GPU%s host and NVMe shares. "
                 "Activations are\n"
                 "  not included (--micro-batch, or --seq-len with --config, adds them). See zinf-estimate(1).\n",
            precision == ZINF_EST_MIXED ? ", fp32 gradient tile" : "", gpus_per_node, gpus_per_node > 1 ? "s'" : "'s");
    if (fflush(out) != 0 || ferror(out))
        return zinf_errc(ZINF_EIO, "estimate: writing the table failed: %s", strerror(errno));
    return 0;
}

int zinf_estimate_print(FILE *out, const zinf_model_cfg *m, const zinf_config *cfg, int nodes,
                        int gpus_per_node)
{
    return zinf_estimate_print_prec(out, m, cfg, nodes, gpus_per_node, ZINF_EST_MIXED, -1);
}

/* Model-state bytes of one rank by place: zinf_estimate_rank_states' units, each placed by
 * zinf_zero_places as zinf_zero_init places it. */
static int rank_places(const zinf_model_cfg *m, int precision, int stage, int world,
                       const zinf_config *cfg, int64_t at[ZINF_AT_N])
{
    const int64_t W = world;
    const int64_t e = precision == ZINF_EST_FP32 ? 4 : 2;
    zinf_model mm;
    ZINF_TRY(layout(m, &mm));
    const int n = mm.nunits;
    int64_t *p = calloc((size_t)n, sizeof *p), *pn = calloc((size_t)n, sizeof *pn);
    zinf_unit_place *pl = calloc((size_t)n, sizeof *pl);
    if (!p || !pn || !pl) {
        free(p), free(pn), free(pl);
        zinf_model_free(&mm);
        return zinf_errc(ZINF_ENOMEM, "estimate: out of memory");
    }
    for (int u = 0; u < n; u++) {
        int64_t size = mm.units[u].numel;
        pn[u] = stage == 0 ? size : (size + W - 1) / W * W;
        p[u] = stage == 0 ? size : pn[u] / W;
    }
    zinf_model_free(&mm);
    zinf_zero_places(cfg, stage, precision == ZINF_EST_FP32, n, p, pl);
    const bool f32 = precision == ZINF_EST_FP32, g16 = zinf_zero_grads16(stage, f32, world, cfg_gas(cfg));
    for (int k = 0; k < ZINF_AT_N; k++) at[k] = 0;
    for (int u = 0; u < n; u++) {
        at[stage == 3 ? pl[u].par : ZINF_AT_DEVICE] += e * (stage == 3 ? p[u] : pn[u]); /* parameters */
        at[ZINF_AT_DEVICE] += precision == ZINF_EST_MIXED /* gradients: the paper's 16-bit, or the engine's store */
                                  ? e * (stage < 2 ? pn[u] : p[u])
                                  : zinf_zero_grad_bytes(stage, f32, g16, (size_t)e, pn[u], p[u], NULL);
        if (precision == ZINF_EST_MIXED || !pl[u].master_alias) at[pl[u].opt] += 4 * p[u]; /* master */
        at[pl[u].opt] += 8 * p[u];                                                    /* Adam m, v */
    }
    free(p), free(pn), free(pl);
    return 0;
}

int zinf_estimate_print_bytes(FILE *out, const zinf_model_cfg *m, int precision, int stage,
                              int world, int prefix_stage, const zinf_config *cfg)
{
    int64_t b[ZINF_EST_NKINDS];
    ZINF_TRY(zinf_estimate_rank_states(m, precision, stage, world, cfg_gas(cfg), b));
    static const char *const names[ZINF_EST_NKINDS] = {"param",  "param_shard", "grad", "grad_acc",
                                                       "master", "adam",        "comm"};
    int64_t total = 0;
    if (prefix_stage) fprintf(out, "stage=%d ", stage);
    for (int k = 0; k < ZINF_EST_NKINDS; k++) {
        fprintf(out, "%s=%" PRId64 " ", names[k], b[k]);
        total += b[k];
    }
    fprintf(out, "total=%" PRId64, total);
    /* the working buffers a GPU holds beside the states while a step runs (the table's figure) */
    zinf_mem_estimate e;
    const int oo = cfg && stage >= 1 ? (int)cfg->offload_optimizer.device : ZINF_EST_NONE,
              op = cfg && stage == 3 ? (int)cfg->offload_param.device : ZINF_EST_NONE;
    ZINF_TRY(zinf_estimate_prec(m, precision, stage, oo, op, 1, world, 0, cfg, &e));
    fprintf(out, " buffers=%.0f", e.gpu_buffers);
    if (cfg) {
        int64_t at[ZINF_AT_N] = {0, 0, 0};
        ZINF_TRY(rank_places(m, precision, stage, world, cfg, at));
        fprintf(out, " device=%" PRId64 " host=%" PRId64 " nvme=%" PRId64, at[ZINF_AT_DEVICE],
                at[ZINF_AT_HOST], at[ZINF_AT_NVME]);
    }
    fputc('\n', out);
    if (fflush(out) != 0 || ferror(out))
        return zinf_errc(ZINF_EIO, "estimate: writing the bytes failed: %s", strerror(errno));
    return 0;
}

/* Activation memory per GPU, exactly as zinf_model_alloc_acts lays it out (each buffer rounded
 * up to 256 bytes): in bytes mode "act=A act_grad=G", else a sentence in GiB. */
static const char *const RECOMPUTE[] = {"none", "full", "keep-attention"};

int zinf_estimate_print_acts(FILE *out, const zinf_model_cfg *m, int precision, int micro, int T,
                             int recompute, int blocks, int bytes)
{
    size_t a = 0, g = 0, a0 = 0, g0 = 0, la = 0, lg = 0;
    size_t es = precision == ZINF_EST_FP32 ? 4 : 2;
    int nrc = blocks < 0 ? m->n_layer : blocks;
    ZINF_TRY(zinf_model_act_bytes_n(m, micro, T, es, (zinf_recompute)recompute, nrc, &a, &g));
    /* lean (zinf_model.lean; train.c's choose_lean and "auto"'s zinf_model_recompute_fit): where the
     * family has it, the run's figure when the forwards of a step run together behind the host
     * update, or "auto" chose it */
    ZINF_TRY(zinf_model_act_bytes_lean(m, micro, T, es, (zinf_recompute)recompute, nrc, true, &la, &lg));
    bool lean = la + lg < a + g;
    if (bytes) {
        fprintf(out, "act=%zu act_grad=%zu", a, g);
        if (lean) fprintf(out, " lean_act=%zu lean_act_grad=%zu", la, lg);
        fputc('\n', out);
    } else {
        char which[64] = "";
        if (recompute && nrc < m->n_layer) snprintf(which, sizeof which, " (%d of %d blocks)", nrc, m->n_layer);
        fprintf(out, "Activations per GPU, micro-batch %d x %d tokens, %s, recompute %s%s: %.2f GiB, "
                "plus %.2f GiB of activation-gradient scratch\n", micro, T,
                precision == ZINF_EST_FP32 ? "fp32" : "16-bit", RECOMPUTE[recompute], which,
                (double)a / 1073741824.0, (double)g / 1073741824.0);
        if (lean)
            fprintf(out, "Lean, %.2f GiB, plus %.2f GiB of scratch: the run's figure where ZeRO-3's host update runs "
                    "on beside the next forwards (optimizer offloaded, gradient accumulation) and lean activations "
                    "fit more of them together (on the CPU backend always), or where zinf_recompute_blocks \"auto\" "
                    "keeps more blocks lean; their backward recomputes the norms' outputs and the MLP's product\n",
                    (double)la / 1073741824.0, (double)lg / 1073741824.0);
        /* on CUDA: what cuDNN's attention backward takes while it runs */
        int64_t per = zinf_attn_ws_samples(micro, T, m->n_head, m->n_kv_head, m->head_dim, es);
        if (per)
            fprintf(out, "cuDNN's attention backward (CUDA) takes %.2f GiB more while it runs (%lld sample%s a call)\n",
                    (double)zinf_attn_ws_bytes(micro, T, m->n_head, m->n_kv_head, m->head_dim, es) / 1073741824.0,
                    (long long)per, per == 1 ? "" : "s");
        /* what activation_checkpointing.zinf_recompute_blocks trades: one stored set per block kept */
        if (recompute && m->n_layer > 1) {
            ZINF_TRY(zinf_model_act_bytes_n(m, micro, T, es, (zinf_recompute)recompute, m->n_layer, &a, &g));
            ZINF_TRY(zinf_model_act_bytes_n(m, micro, T, es, (zinf_recompute)recompute, m->n_layer - 1, &a0, &g0));
            fprintf(out, "Each block that keeps its activations instead of being recomputed adds %.2f GiB "
                    "(activation_checkpointing.zinf_recompute_blocks)\n", (double)(a0 - a) / 1073741824.0);
        }
    }
    if (fflush(out) != 0 || ferror(out))
        return zinf_errc(ZINF_EIO, "estimate: writing failed: %s", strerror(errno));
    return 0;
}

/* ------------------------------------------------------------------ options --------------- */
void zinf_estimate_opts_defaults(zinf_estimate_opts *o)
{
    memset(o, 0, sizeof *o);
    o->nodes = 1;
    o->gpus_per_node = 1;
    o->precision = NULL;
}

/* the counts the flags give: whole numbers from 1 to 1000000 */
static int check_count(const char *flag, int64_t v)
{
    if (v < 1 || v > 1000000)
        return zinf_err("estimate: %s %" PRId64 ": expected a whole number from 1 to 1000000", flag, v);
    return 0;
}

int zinf_estimate_run(const zinf_estimate_opts *o, FILE *out, FILE *notes)
{
    if (!o->model || !*o->model) return zinf_err("estimate: --model is required (see zinf estimate --help)");
    ZINF_TRY(check_count("--nodes", o->nodes));
    ZINF_TRY(check_count("--gpus-per-node", o->gpus_per_node));
    const int nodes = (int)o->nodes, gpus = (int)o->gpus_per_node;
    if ((long long)nodes * gpus > INT_MAX / 2)
        return zinf_err("estimate: %d nodes x %d GPUs per node is too many", nodes, gpus);
    /* the precision: --precision, else the engine's in the dtype --bf16/--fp16 or the config
     * choose (as zinf train would), fp32 where nothing says 16-bit */
    int precision = -1;
    if (o->bf16 && o->fp16) return zinf_err("estimate: --bf16 and --fp16 exclude each other");
    if (o->precision && !strcmp(o->precision, "mixed")) precision = ZINF_EST_MIXED;
    else if (o->precision && !strcmp(o->precision, "fp32")) precision = ZINF_EST_FP32;
    else if (o->precision) return zinf_err("estimate: --precision %s: expected mixed or fp32", o->precision);
    if (precision == ZINF_EST_FP32 && (o->bf16 || o->fp16))
        return zinf_err("estimate: --precision fp32 and --%s disagree: give one of them", o->bf16 ? "bf16" : "fp16");
    if (precision < 0 && (o->bf16 || o->fp16)) precision = ZINF_EST_ENGINE16;
    int stage = -1;
    if (o->stage_set) {
        if (o->stage < 0 || o->stage > 3)
            return zinf_err("estimate: --stage %" PRId64 ": expected 0, 1, 2 or 3", o->stage);
        stage = (int)o->stage;
    }
    if (o->config && stage >= 0)
        return zinf_err("estimate: --stage and --config both choose the row; give one of them");
    int recompute = -1;
    if (o->recompute) {
        for (int k = 0; k < 3; k++)
            if (!strcmp(o->recompute, RECOMPUTE[k])) recompute = k;
        if (recompute < 0)
            return zinf_err("estimate: --recompute %s: expected none, full or keep-attention", o->recompute);
    }
    if (o->micro_batch_set) ZINF_TRY(check_count("--micro-batch", o->micro_batch));
    if (o->seq_len_set) ZINF_TRY(check_count("--seq-len", o->seq_len));
    if (!o->micro_batch_set && !o->config && (o->seq_len_set || o->recompute))
        return zinf_err("estimate: --seq-len and --recompute describe activations; give --micro-batch too (or a --config, "
                        "whose micro-batch they then take)");
    zinf_model_cfg m;
    ZINF_TRY(zinf_model_cfg_load(&m, o->model));
    if (o->seq_len_set && o->seq_len > m.n_positions)
        return zinf_err("estimate: --seq-len %" PRId64 " exceeds the model's %s %d", o->seq_len,
                        zinf_model_positions_key(&m), m.n_positions);
    int rc = 0;
    zinf_config *cfg = NULL;
    if (!o->config) {
        if (precision < 0) precision = ZINF_EST_FP32;
        if (!o->print_bytes) rc = zinf_estimate_print_prec(out, &m, NULL, nodes, gpus, precision, stage);
        else if (stage >= 0) rc = zinf_estimate_print_bytes(out, &m, precision, stage, nodes * gpus, 0, NULL);
        else
            for (int s = 0; s < 4 && !rc; s++)
                rc = zinf_estimate_print_bytes(out, &m, precision, s, nodes * gpus, 1, NULL);
    } else {
        zinf_flags f;
        zinf_flags_defaults(&f);
        f.hidden_size = m.n_embd;
        /* --micro-batch is the run's micro-batch: it fills "auto" as train's
         * --per_device_train_batch_size does, and a config that fixes another is an error */
        f.per_device_train_batch_size_set = o->micro_batch_set;
        if (o->micro_batch_set) f.per_device_train_batch_size = o->micro_batch;
        f.per_device_train_batch_size_opt = "--micro-batch";
        f.bf16 = o->bf16, f.bf16_set = o->bf16; /* fill the precision blocks' "auto" as train does */
        f.fp16 = o->fp16, f.fp16_set = o->fp16;
        cfg = malloc(sizeof *cfg);
        if (!cfg) return zinf_errc(ZINF_ENOMEM, "estimate: out of memory");
        /* ms-swift's built-in names, as train's --config takes them */
        char builtin[4096];
        int b = zinf_config_builtin(o->config, builtin, sizeof builtin);
        rc = b < 0 ? b : zinf_config_load(cfg, b ? builtin : o->config, &f, nodes * gpus, notes);
        if (!rc && precision < 0) precision = cfg->bf16 || cfg->fp16 ? ZINF_EST_ENGINE16 : ZINF_EST_FP32;
        if (!rc && o->print_bytes)
            rc = zinf_estimate_print_bytes(out, &m, precision, cfg->zero_stage, nodes * gpus, 0, cfg);
        else if (!rc)
            rc = zinf_estimate_print_prec(out, &m, cfg, nodes, gpus, precision, -1);
    }
    /* the activations: of --micro-batch, or with --seq-len or --recompute of the config's micro-batch
     * (its number, or what "auto" resolves to, as train runs it); a config's activation_checkpointing
     * block means full recomputation unless --recompute says */
    int64_t micro = o->micro_batch_set                        ? o->micro_batch
                    : cfg && (o->seq_len_set || o->recompute) ? cfg->train_micro_batch_size_per_gpu
                                                              : 0;
    if (!rc && micro > 0) {
        /* the config's count of recomputed blocks; "auto" is chosen at run time from the GPU's free
         * memory, which is not known here: every block, and a note */
        int64_t nb = cfg && cfg->activation_checkpointing ? cfg->zinf_recompute_blocks : -1;
        if (nb == ZINF_RECOMPUTE_AUTO && notes)
            fprintf(notes, "estimate: zinf_recompute_blocks \"auto\" is chosen at run time from the GPU's free "
                           "memory; shown with every block recomputed\n");
        if (nb > m.n_layer)
            rc = zinf_err("estimate: activation_checkpointing.zinf_recompute_blocks %lld: the model has %d blocks",
                          (long long)nb, m.n_layer);
        if (!rc)
            rc = zinf_estimate_print_acts(out, &m, precision, (int)micro,
                                          o->seq_len_set ? (int)o->seq_len : m.n_positions,
                                          recompute >= 0 ? recompute : cfg && cfg->activation_checkpointing ? 1 : 0,
                                          nb < 0 ? -1 : (int)nb, o->print_bytes);
    }
    free(cfg);
    return rc;
}
