/* test_estimate: `zinf estimate` against the ZeRO paper's formulas (Rajbhandari et al. 2020,
 * section 5 and figure 1: mixed-precision Adam, K = 12) written out here independently:
 *   model states per GPU = 16Psi (stage 0), 4Psi + 12Psi/N (1), 2Psi + 14Psi/N (2), 16Psi/N (3)
 * and the paper's 7.5B-parameter, N = 64 example (120 GB, 31.4 GB, 16.6 GB, 1.9 GB); offload
 * moving exactly the optimizer share; the buffers against the rules in estimate.c; the table for
 * a DeepSpeed config showing only that config's row; the command line through cli.c's flag table
 * and the options struct it fills (zinf_estimate_run). */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "cli.h"
#include "config.h"
#include "err.h"
#include "estimate.h"
#include "kernels.h"
#include "model.h"

#define RT 1e-12

static double paper_states(double psi, int stage, double N)
{
    switch (stage) {
    case 0: return 16 * psi;
    case 1: return 4 * psi + 12 * psi / N;
    case 2: return 2 * psi + 14 * psi / N;
    default: return 16 * psi / N;
    }
}

typedef struct { int stage, opt, param; } combo;
static const combo VALID[] = {{0, 0, 0}, {1, 0, 0}, {1, 1, 0}, {2, 0, 0}, {2, 1, 0}, {3, 0, 0},
                              {3, 1, 0}, {3, 2, 0}, {3, 1, 1}, {3, 2, 2}, {3, 0, 1}, {3, 1, 2},
                              {3, 2, 1}, {3, 0, 2}};
static const combo INVALID[] = {{0, 1, 0}, {0, 2, 0}, {0, 0, 1}, {1, 2, 0}, {2, 2, 0},
                                {1, 0, 1}, {2, 1, 1}, {2, 0, 2}, {4, 0, 0}, {-1, 0, 0}};
#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* model states only: what lives on the GPU, host and NVMe, per GPU */
static double gpu_states(const zinf_mem_estimate *e) { return e->gpu_bytes - e->gpu_buffers; }
static double cpu_states(const zinf_mem_estimate *e, int G)
{
    return e->cpu_bytes_per_node / G - e->cpu_buffers;
}

static void check_model(const zinf_model_cfg *m, int nodes, int G)
{
    const double psi = (double)zinf_model_num_params(m);
    const double N = (double)nodes * G;
    const int64_t L = zinf_estimate_largest_unit(m, NULL);
    /* the gradients alive at once in the backward pass (GPT-2's tied embedding, wte + wpe, from
     * the head's backward to its own, beside a block's 12C^2 + 13C or the final LayerNorm's 2C) */
    const double Cm = m->n_embd, emb = (double)m->padded_vocab * Cm + (double)m->n_positions * Cm;
    const double Gl = emb + fmax(12 * Cm * Cm + 13 * Cm, 2 * Cm);
    char what[160];
    for (size_t i = 0; i < NELEM(VALID); i++) {
        const combo c = VALID[i];
        zinf_mem_estimate e;
        int rc = zinf_estimate(m, c.stage, c.opt, c.param, nodes, G, L, NULL, &e);
        snprintf(what, sizeof what, "%s N=%g stage %d opt %d param %d", m->name, N, c.stage, c.opt,
                 c.param);
        CHECK(rc == 0, "%s: rc %d (%s)", what, rc, zinf_errmsg());
        if (rc) continue;
        CHECK(e.stage == c.stage && e.offload_optimizer == c.opt && e.offload_param == c.param,
              "%s: labels", what);
        /* the paper's formula, exactly, wherever the states live */
        CHECK_CLOSE(e.params + e.grads + e.optim, paper_states(psi, c.stage, N), RT, 0, what);
        CHECK_CLOSE(e.optim, c.stage ? 12 * psi / N : 12 * psi, RT, 0, what);
        CHECK_CLOSE(e.grads, c.stage >= 2 ? 2 * psi / N : 2 * psi, RT, 0, what);
        CHECK_CLOSE(e.params, c.stage >= 3 ? 2 * psi / N : 2 * psi, RT, 0, what);
        /* every state byte is somewhere, once */
        const double placed = gpu_states(&e) + cpu_states(&e, G) + e.nvme_bytes_per_node / G;
        CHECK_CLOSE(placed, e.params + e.grads + e.optim, 1e-9, 0, what);
        CHECK_CLOSE(e.buffers, e.gpu_buffers + e.cpu_buffers, RT, 0, what);
        CHECK(e.gpu_buffers >= 0 && e.cpu_buffers >= 0, "%s: negative buffers", what);

        /* buffers per the rules in estimate.c, with DeepSpeed's defaults */
        const double rbs = fmin(5e8, psi), tile = fmin(1e9, c.stage ? psi / N : psi);
        /* stages 2-3: the reduce-scatter's result beside the bucket (zero.c's bound) */
        /* (one rank adds each gradient into its accumulator in place: no bucket) */
        const double red = c.stage < 2 ? rbs : N > 1 ? rbs + floor(rbs / N) : 0;
        double want_gpu = 2 * red + 2 * Gl + (c.opt ? 0 : 4 * tile);
        if (c.stage == 1 || c.stage == 2) want_gpu += 2 * fmin(5e8, psi);
        if (c.stage == 3) {
            /* GPT-2 presets here: every unit but the final LayerNorm (2C) is gathered */
            const double C = m->n_embd, pers = 2 * C, gathered = psi - pers;
            /* prefetch goes on while less than the bucket (5e7) is in flight: up to one unit more */
            const double live = fmin(gathered, fmax((double)L, fmin(1e9, (double)L + 5e7 + (double)L)));
            want_gpu += 2 * live + 2 * pers;
            /* documented bounds: at least the largest unit gathered and its gradient */
            CHECK(e.gpu_buffers >= 4.0 * (double)L, "%s: stage-3 buffers %g below 4L", what,
                  e.gpu_buffers);
            CHECK(e.gpu_buffers <= 2 * fmax((double)L, 1e9) + 2 * pers + 2 * Gl +
                                       2 * 5e8 + 4 * 1e9,
                  "%s: stage-3 buffers %g above the bound", what, e.gpu_buffers);
        }
        CHECK_CLOSE(e.gpu_buffers, want_gpu, RT, 0, what);
        double want_cpu = c.opt ? 4 * tile : 0;
        if (c.opt == 2) want_cpu += 4 * 4 * tile;
        if (c.param == 2) want_cpu += 5 * 1e8 * 2;
        CHECK_CLOSE(e.cpu_buffers, want_cpu, RT, 0, what);

        /* offload moves exactly the optimizer share (and, for params, the 2Psi/N shard) */
        if (c.opt || c.param) {
            zinf_mem_estimate none;
            CHECK(zinf_estimate(m, c.stage, 0, 0, nodes, G, L, NULL, &none) == 0, "%s", what);
            double moved = (c.opt ? 12 * psi / N : 0) + (c.param ? 2 * psi / N : 0);
            double to_cpu = (c.opt == 1 ? 12 * psi / N : 0) + (c.param == 1 ? 2 * psi / N : 0);
            double to_nvme = (c.opt == 2 ? 12 * psi / N : 0) + (c.param == 2 ? 2 * psi / N : 0);
            CHECK_CLOSE(gpu_states(&none) - gpu_states(&e), moved, 1e-9, 1e-3, what);
            CHECK_CLOSE(cpu_states(&e, G) * G, to_cpu * G, 1e-9, 1e-3, what);
            CHECK_CLOSE(e.nvme_bytes_per_node, to_nvme * G, 1e-9, 1e-3, what);
            CHECK_CLOSE(none.cpu_bytes_per_node, 0, 0, 0, what);
        } else {
            CHECK(e.cpu_bytes_per_node == 0 && e.nvme_bytes_per_node == 0, "%s: host use", what);
            CHECK_CLOSE(e.gpu_bytes, paper_states(psi, c.stage, N) + e.gpu_buffers, RT, 0, what);
        }
    }
    for (size_t i = 0; i < NELEM(INVALID); i++) {
        zinf_mem_estimate e;
        int rc = zinf_estimate(m, INVALID[i].stage, INVALID[i].opt, INVALID[i].param, nodes, G, L,
                               NULL, &e);
        CHECK(rc == ZINF_EINVAL && zinf_errmsg()[0], "stage %d opt %d param %d accepted",
              INVALID[i].stage, INVALID[i].opt, INVALID[i].param);
    }
}

/* The paper's example (section 5, figure 1): Psi = 7.5B, N_d = 64, in GB = 1e9 bytes. */
static void check_paper(void)
{
    const double want[4] = {120.0, 31.4, 16.6, 1.9};
    for (int s = 0; s < 4; s++) {
        zinf_mem_estimate e;
        CHECK(zinf_estimate_states(7.5e9, s, 0, 0, 1.0, 1, 64, &e) == 0, "paper stage %d", s);
        const double tot = e.params + e.grads + e.optim;
        CHECK_CLOSE(round(tot / 1e8) / 10, want[s], 0, 1e-9, "paper example, GB");
        CHECK_CLOSE(e.gpu_bytes, tot, RT, 0, "paper example on the GPU");
        /* the same with 8 nodes x 8 GPUs */
        zinf_mem_estimate f;
        CHECK(zinf_estimate_states(7.5e9, s, 0, 0, 1.0, 8, 8, &f) == 0, "paper 8x8");
        CHECK_CLOSE(f.gpu_bytes, e.gpu_bytes, RT, 0, "8x8 = 1x64 per GPU");
    }
    /* ZeRO-Offload on the same: 12Psi/N of optimizer state per GPU on the host, x8 per node */
    zinf_mem_estimate e;
    CHECK(zinf_estimate_states(7.5e9, 2, 1, 0, 1.0, 8, 8, &e) == 0, "offload");
    CHECK_CLOSE(e.gpu_bytes, 2 * 7.5e9 + 2 * 7.5e9 / 64, RT, 0, "stage 2 offload GPU");
    CHECK_CLOSE(e.cpu_bytes_per_node, 12 * 7.5e9 / 64 * 8, RT, 0, "stage 2 offload per node");
    /* partial offload (ratio 0.25): a quarter of the optimizer share moves */
    CHECK(zinf_estimate_states(7.5e9, 3, 1, 0, 0.25, 1, 64, &e) == 0, "ratio");
    CHECK_CLOSE(e.cpu_bytes_per_node, 0.25 * 12 * 7.5e9 / 64 * 64, RT, 0, "ratio 0.25 on host");
    CHECK_CLOSE(e.gpu_bytes, 16 * 7.5e9 / 64 - 0.25 * 12 * 7.5e9 / 64, RT, 0, "ratio 0.25 GPU");
    CHECK(zinf_estimate_states(0, 0, 0, 0, 1.0, 1, 1, &e) == ZINF_EINVAL, "psi 0 accepted");
    CHECK(zinf_estimate_states(1e9, 0, 0, 0, 1.0, 0, 1, &e) == ZINF_EINVAL, "0 nodes accepted");
}

static int parse_cfg(zinf_config *cfg, const char *json, const zinf_model_cfg *m, int world)
{
    zinf_flags f;
    zinf_flags_defaults(&f);
    f.hidden_size = m->n_embd;
    return zinf_config_parse(cfg, json, strlen(json), "(test)", &f, world, NULL);
}

/* buffer sizes taken from a config; the live-parameter cap */
static void check_config_buffers(void)
{
    zinf_model_cfg m;
    CHECK(zinf_model_cfg_load(&m, "gpt2-1.5b") == 0, "load");
    const double psi = (double)zinf_model_num_params(&m), N = 8;
    const double L = (double)zinf_estimate_largest_unit(&m, NULL);
    static zinf_config cfg;
    const char *j = "{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": {\"stage\": 3,"
                    " \"reduce_bucket_size\": 1e7, \"sub_group_size\": 1e8,"
                    " \"stage3_prefetch_bucket_size\": 2e7, \"stage3_max_live_parameters\": 1e6,"
                    " \"stage3_param_persistence_threshold\": 1e4}}";
    CHECK(parse_cfg(&cfg, j, &m, 8) == 0, "parse: %s", zinf_errmsg());
    zinf_mem_estimate e;
    CHECK(zinf_estimate(&m, 3, 0, 0, 1, 8, 0, &cfg, &e) == 0, "estimate: %s", zinf_errmsg());
    /* the gradients alive at once: the tied embedding's beside a block's */
    const double Gl = L + (12 * 1600.0 * 1600.0 + 13 * 1600.0);
    /* max_live 1e6 < L: exactly one unit gathered, no prefetch room */
    double want = 2 * (1e7 + 1e7 / 8) + 2 * L + 2 * (2 * 1600.0) + 2 * Gl + 4 * fmin(1e8, psi / N);
    CHECK_CLOSE(e.gpu_buffers, want, RT, 0, "stage 3 with max_live below the largest unit");
    CHECK_CLOSE(e.params + e.grads + e.optim, 16 * psi / N, RT, 0, "states with a config");

    /* persistence threshold above the block size: every block and the LayerNorm stay whole */
    j = "{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": {\"stage\": 3,"
        " \"stage3_param_persistence_threshold\": 40000000}}";
    CHECK(parse_cfg(&cfg, j, &m, 8) == 0, "parse: %s", zinf_errmsg());
    CHECK(zinf_estimate(&m, 3, 0, 0, 1, 8, 0, &cfg, &e) == 0, "estimate: %s", zinf_errmsg());
    const double C = 1600, block = 12 * C * C + 13 * C, pers = 48 * block + 2 * C;
    want = 2 * (5e8 + 5e8 / 8) + 2 * L /* only the embedding is gathered */ + 2 * pers + 2 * Gl +
           4 * fmin(1e9, psi / N);
    CHECK_CLOSE(e.gpu_buffers, want, RT, 0, "stage 3 with persistent blocks");
    /* a unit of exactly the threshold persists (zero.c's <=, DeepSpeed's ds_numel <= threshold) */
    char buf[320];
    snprintf(buf, sizeof buf, "{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": {\"stage\": 3,"
             " \"stage3_param_persistence_threshold\": %.0f}}", block);
    CHECK(parse_cfg(&cfg, buf, &m, 8) == 0, "parse: %s", zinf_errmsg());
    CHECK(zinf_estimate(&m, 3, 0, 0, 1, 8, 0, &cfg, &e) == 0, "estimate: %s", zinf_errmsg());
    CHECK_CLOSE(e.gpu_buffers, want, RT, 0, "stage 3, threshold equal to a block");
    /* stage3_model_persistence_threshold caps the persistent total, units taken in model order
     * and skipped when they do not fit: 10 blocks and the LayerNorm fit, the other 38 blocks are
     * gathered with the embedding, prefetch adds up to one unit beyond the 5e7 bucket */
    snprintf(buf, sizeof buf, "{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": {\"stage\": 3,"
             " \"stage3_param_persistence_threshold\": 4e7, \"stage3_model_persistence_threshold\": %.0f}}",
             10 * block + 2 * C + 5);
    CHECK(parse_cfg(&cfg, buf, &m, 8) == 0, "parse: %s", zinf_errmsg());
    CHECK(zinf_estimate(&m, 3, 0, 0, 1, 8, 0, &cfg, &e) == 0, "estimate: %s", zinf_errmsg());
    const double gathered = L + 38 * block, live = fmin(gathered, 2 * L + 5e7);
    want = 2 * (5e8 + 5e8 / 8) + 2 * live + 2 * (10 * block + 2 * C) + 2 * Gl + 4 * fmin(1e9, psi / N);
    CHECK_CLOSE(e.gpu_buffers, want, RT, 0, "stage 3 with a model persistence threshold");

    /* stage 2 with the auto buckets (hidden^2) */
    j = "{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": {\"stage\": 2,"
        " \"reduce_bucket_size\": \"auto\", \"allgather_bucket_size\": 3e6,"
        " \"offload_optimizer\": {\"device\": \"cpu\"}}}";
    CHECK(parse_cfg(&cfg, j, &m, 8) == 0, "parse: %s", zinf_errmsg());
    CHECK(zinf_estimate(&m, 2, 1, 0, 2, 4, 0, &cfg, &e) == 0, "estimate: %s", zinf_errmsg());
    CHECK_CLOSE(e.gpu_buffers, 2 * (C * C + C * C / 8) + 2 * 3e6 + 2 * Gl, RT, 0, "stage 2 auto buckets");
    CHECK_CLOSE(e.cpu_buffers, 4 * psi / N, RT, 0, "stage 2 offload fp32 gradient tile");
    CHECK_CLOSE(e.cpu_bytes_per_node, (12 * psi / N + 4 * psi / N) * 4, RT, 0, "per node x4");
}

static void check_largest(void)
{
    zinf_model_cfg m;
    CHECK(zinf_model_cfg_load(&m, "gpt2-124m") == 0, "load");
    /* llm.c's published count for GPT-2 124M with the vocabulary padded to 50304 */
    CHECK(zinf_model_num_params(&m) == 124475904, "gpt2-124m Psi %lld",
          (long long)zinf_model_num_params(&m));
    const char *name = NULL;
    CHECK(zinf_estimate_largest_unit(&m, &name) == 50304LL * 768 + 1024LL * 768, "124m L");
    CHECK(name && strstr(name, "embedding"), "124m largest is the embedding");
    CHECK(zinf_model_cfg_load(&m, "gpt2-1.5b") == 0, "load");
    CHECK(zinf_model_num_params(&m) == 1557686400, "gpt2-1.5b Psi %lld",
          (long long)zinf_model_num_params(&m));
}

/* the rows of a printed table: (marked, stage, optimizer, param) */
typedef struct { int n; char mark[16]; int stage[16]; char opt[16][16], par[16][16]; double gpu[16]; } rows;

static int print_rows(const zinf_model_cfg *m, const zinf_config *cfg, int nodes, int G, rows *r)
{
    memset(r, 0, sizeof *r);
    FILE *f = tmpfile();
    if (!f) return -1;
    int rc = zinf_estimate_print(f, m, cfg, nodes, G);
    rewind(f);
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char *p = line;
        char mark = ' ';
        while (*p == ' ') p++;
        if (*p == '*' && p[1] == ' ') { mark = '*'; p++; while (*p == ' ') p++; }
        if (*p < '0' || *p > '9' || r->n >= 16) continue;
        int k = r->n;
        if (sscanf(p, "%d %15s %15s %lf", &r->stage[k], r->opt[k], r->par[k], &r->gpu[k]) == 4) {
            r->mark[k] = mark;
            r->n++;
        }
    }
    fclose(f);
    return rc;
}

static const char *fixture(const char *name, char *buf, size_t cap)
{
    const char *dirs[] = {getenv("FIXTURES"), "tests/fixtures", "../tests/fixtures",
                          "../../tests/fixtures"};
    for (size_t i = 0; i < NELEM(dirs); i++) {
        if (!dirs[i]) continue;
        snprintf(buf, cap, "%s/%s", dirs[i], name);
        if (access(buf, R_OK) == 0) return buf;
    }
    if (getenv("top_srcdir")) {
        snprintf(buf, cap, "%s/tests/fixtures/%s", getenv("top_srcdir"), name);
        if (access(buf, R_OK) == 0) return buf;
    }
    return NULL;
}

static void check_print(void)
{
    zinf_model_cfg m;
    CHECK(zinf_model_cfg_load(&m, "gpt2-124m") == 0, "load");
    rows r;
    CHECK(print_rows(&m, NULL, 1, 2, &r) == 0, "print: %s", zinf_errmsg());
    CHECK(r.n == 10, "full table: %d rows, want 10", r.n);
    int per_stage[4] = {0};
    for (int i = 0; i < r.n; i++) {
        CHECK(r.mark[i] == ' ', "row %d marked without a config", i);
        if (r.stage[i] >= 0 && r.stage[i] < 4) per_stage[r.stage[i]]++;
        if (strcmp(r.par[i], "none")) CHECK(r.stage[i] == 3, "param offload row at stage %d", r.stage[i]);
        if (!strcmp(r.opt[i], "nvme")) CHECK(r.stage[i] == 3, "nvme optimizer at stage %d", r.stage[i]);
    }
    CHECK(per_stage[0] == 1 && per_stage[1] == 2 && per_stage[2] == 2 && per_stage[3] == 5,
          "rows per stage %d %d %d %d", per_stage[0], per_stage[1], per_stage[2], per_stage[3]);

    char path[1024];
    const char *fx = fixture("seed-zero3-cpu-offload-fp16.json", path, sizeof path);
    CHECK(fx != NULL, "fixture seed-zero3-cpu-offload-fp16.json not found (set FIXTURES)");
    if (!fx) return;
    static zinf_config cfg;
    zinf_flags f;
    zinf_flags_defaults(&f);
    f.hidden_size = m.n_embd;
    f.per_device_train_batch_size_set = false;
    CHECK(zinf_config_load(&cfg, fx, &f, 4, NULL) == 0, "config: %s", zinf_errmsg());
    CHECK(print_rows(&m, &cfg, 1, 4, &r) == 0, "print: %s", zinf_errmsg());
    CHECK(r.n == 1, "config table: %d rows, want 1", r.n);
    if (r.n == 1) {
        CHECK(r.mark[0] == '*', "config row not marked");
        CHECK(r.stage[0] == 3, "config row stage %d", r.stage[0]);
        CHECK(!strcmp(r.opt[0], "cpu") && !strcmp(r.par[0], "cpu"), "config row %s/%s", r.opt[0],
              r.par[0]);
        zinf_mem_estimate e;
        CHECK(zinf_estimate(&m, 3, 1, 1, 1, 4, 0, &cfg, &e) == 0, "estimate");
        CHECK_CLOSE(r.gpu[0], e.gpu_bytes / 1073741824.0, 0, 0.006, "printed GPU GiB");
        /* the fixture's "auto" buckets come from hidden 768 */
        const double psi = (double)zinf_model_num_params(&m);
        CHECK_CLOSE(gpu_states(&e), 2 * psi / 4, RT, 0, "only the gradient shard on the GPU");
        CHECK_CLOSE(cpu_states(&e, 4) * 4, 14 * psi, RT, 0, "params + optimizer on the host");
    }
    /* the same config on a world its batch sizes do not fit is an error, not a table */
    static zinf_config bad;
    CHECK(zinf_config_load(&bad, fx, &f, 3, NULL) != 0, "world 3 accepted");
}

/* --precision fp32: zinf's CPU engine (zero.c) allocates per unit, padding each to a multiple of
 * W from stage 1 on; written out here from the unit list of model.c */
static void check_fp32(void)
{
    zinf_model_cfg m;
    CHECK(zinf_model_cfg_load(&m, "gpt2-124m") == 0, "load");
    const int64_t psi = zinf_model_num_params(&m), C = m.n_embd;
    const int64_t unit[3] = {(int64_t)m.padded_vocab * C + (int64_t)m.n_positions * C,
                             12 * C * C + 13 * C, 2 * C};
    const int64_t cnt[3] = {1, m.n_layer, 1};
    const int worlds[] = {1, 2, 3, 4, 7, 8, 64};
    for (size_t w = 0; w < NELEM(worlds); w++) {
        const int64_t W = worlds[w];
        int64_t sum_pn = 0, sum_p = 0;
        for (int i = 0; i < 3; i++) {
            int64_t pn = (unit[i] + W - 1) / W * W;
            sum_pn += cnt[i] * pn;
            sum_p += cnt[i] * (pn / W);
        }
        for (int st = 0; st < 4; st++) {
            int64_t b[ZINF_EST_NKINDS];
            CHECK(zinf_estimate_rank_states_fp32(&m, st, (int)W, b) == 0, "fp32 %d/%d: %s", st,
                  (int)W, zinf_errmsg());
            const int64_t full = st ? 4 * sum_pn : 4 * psi, shard = st ? 4 * sum_p : 4 * psi;
            const int64_t want[ZINF_EST_NKINDS] = {
                st < 3 ? full : 0, st == 3 ? shard : 0, st < 2 ? full : 0, st >= 2 ? shard : 0,
                0, 2 * shard, 0};
            for (int k = 0; k < ZINF_EST_NKINDS; k++)
                CHECK(b[k] == want[k], "fp32 stage %d world %d kind %d: %lld, want %lld", st,
                      (int)W, k, (long long)b[k], (long long)want[k]);
            /* padding: fewer than W elements per unit, (L + 2) units */
            const int64_t tot = b[0] + b[1] + b[2] + b[3] + b[4] + b[5] + b[6];
            const int64_t ideal = st == 0 ? 16 * psi : st == 1 ? 8 * psi + 8 * psi / W
                                : st == 2 ? 4 * psi + 12 * psi / W : 16 * psi / W;
            CHECK(tot >= ideal && tot <= ideal + 16 * (W - 1) * (m.n_layer + 2) + 16,
                  "fp32 stage %d world %d: %lld bytes vs %lld", st, (int)W, (long long)tot,
                  (long long)ideal);
            /* mixed: the paper's 2 + 2 + 12 with the same padding */
            int64_t x[ZINF_EST_NKINDS];
            CHECK(zinf_estimate_rank_states(&m, ZINF_EST_MIXED, st, (int)W, 1, x) == 0, "mixed");
            CHECK(x[0] == want[0] / 2 && x[1] == want[1] / 2 && x[2] == want[2] / 2 &&
                      x[3] == want[3] / 2 && x[4] == shard && x[5] == 2 * shard && x[6] == 0,
                  "mixed stage %d world %d", st, (int)W);
            /* the 16-bit engine: 16-bit parameters, fp32 accumulators of fp32's shape (grad_acc
             * where fp32 has grad), except at stage 0 on one rank with one micro-step a step,
             * where the step reads the 16-bit gradients themselves (2n, grad) */
            for (int64_t gas = 1; gas <= 2; gas++) {
                CHECK(zinf_estimate_rank_states(&m, ZINF_EST_ENGINE16, st, (int)W, gas, x) == 0, "engine16");
                const bool g16 = st == 0 && W == 1 && gas == 1;
                const int64_t acc = want[2] + want[3];
                CHECK(x[0] == want[0] / 2 && x[1] == want[1] / 2 && x[2] == (g16 ? acc / 2 : 0) &&
                          x[3] == (g16 ? 0 : acc) && x[4] == shard && x[5] == 2 * shard && x[6] == 0,
                      "engine16 stage %d world %d gas %lld: grad %lld grad_acc %lld", st, (int)W, (long long)gas,
                      (long long)x[2], (long long)x[3]);
            }

            /* the table's states are these bytes, all on the GPU without offload */
            zinf_mem_estimate e;
            CHECK(zinf_estimate_prec(&m, ZINF_EST_FP32, st, 0, 0, 1, (int)W, 0, NULL, &e) == 0,
                  "estimate fp32: %s", zinf_errmsg());
            CHECK(e.params + e.grads + e.optim == (double)tot, "fp32 states %g != %lld",
                  e.params + e.grads + e.optim, (long long)tot);
            CHECK_CLOSE(e.gpu_bytes, (double)tot + e.gpu_buffers, RT, 0, "fp32 GPU");
            CHECK(e.cpu_bytes_per_node == 0 && e.nvme_bytes_per_node == 0, "fp32 host use");
            /* precision mixed through zinf_estimate_prec is zinf_estimate */
            zinf_mem_estimate a, c;
            CHECK(zinf_estimate_prec(&m, ZINF_EST_MIXED, st, 0, 0, 1, (int)W, 0, NULL, &a) == 0 &&
                      zinf_estimate(&m, st, 0, 0, 1, (int)W, 0, NULL, &c) == 0,
                  "mixed estimate");
            CHECK(memcmp(&a, &c, sizeof a) == 0, "zinf_estimate_prec(mixed) != zinf_estimate");
        }
        /* optimizer offload: Adam m + v and an fp32 master (4p) move, unless the parameter shard
         * is on the same device (stage 3, both cpu) */
        zinf_mem_estimate none, off, both;
        int64_t b[ZINF_EST_NKINDS];
        CHECK(zinf_estimate_rank_states_fp32(&m, 2, (int)W, b) == 0, "stage 2");
        CHECK(zinf_estimate_prec(&m, ZINF_EST_FP32, 2, 0, 0, 1, (int)W, 0, NULL, &none) == 0 &&
                  zinf_estimate_prec(&m, ZINF_EST_FP32, 2, 1, 0, 1, (int)W, 0, NULL, &off) == 0,
              "stage 2 offload");
        CHECK_CLOSE(off.cpu_bytes_per_node / W - off.cpu_buffers,
                    (double)b[ZINF_EST_ADAM] * 1.5, RT, 0, "fp32 offload: m + v + master on host");
        CHECK_CLOSE(gpu_states(&none) - gpu_states(&off), (double)b[ZINF_EST_ADAM], RT, 0,
                    "fp32 offload: m + v leave the GPU");
        CHECK(zinf_estimate_rank_states_fp32(&m, 3, (int)W, b) == 0, "stage 3");
        CHECK(zinf_estimate_prec(&m, ZINF_EST_FP32, 3, 1, 1, 1, (int)W, 0, NULL, &both) == 0,
              "stage 3 offload");
        CHECK_CLOSE(both.optim, (double)b[ZINF_EST_ADAM], RT, 0, "master aliases offloaded params");
        CHECK_CLOSE(gpu_states(&both), (double)b[ZINF_EST_GRAD_ACC], RT, 0, "only grads on GPU");
    }
    int64_t b[ZINF_EST_NKINDS];
    CHECK(zinf_estimate_rank_states_fp32(&m, 4, 2, b) == ZINF_EINVAL, "stage 4 accepted");
    CHECK(zinf_estimate_rank_states_fp32(&m, 1, 0, b) == ZINF_EINVAL, "world 0 accepted");
    CHECK(zinf_estimate_rank_states(&m, 7, 1, 1, 1, b) == ZINF_EINVAL, "precision 7 accepted");

    /* the table in fp32 mode for one stage: one row */
    FILE *f = tmpfile();
    CHECK(f != NULL, "tmpfile");
    if (f) {
        CHECK(zinf_estimate_print_prec(f, &m, NULL, 1, 4, ZINF_EST_FP32, 2) == 0, "print: %s",
              zinf_errmsg());
        rewind(f);
        char line[512];
        int nrow = 0, stage = -1;
        bool fp32_title = false;
        while (fgets(line, sizeof line, f)) {
            char opt[16], par[16];
            double g;
            if (strstr(line, "(fp32 Adam, as zinf's engine holds them)")) fp32_title = true;
            if (sscanf(line, " %d %15s %15s %lf", &stage, opt, par, &g) == 4) nrow++;
        }
        fclose(f);
        CHECK(nrow == 1 && stage == 2, "fp32 --stage 2 table: %d rows, stage %d", nrow, stage);
        CHECK(fp32_title, "fp32 table title");
    }
}

/* The whole first line that f holds from the start, without its newline. */
static void first_line(FILE *f, char *line, size_t cap)
{
    rewind(f);
    line[0] = 0;
    if (fgets(line, (int)cap, f)) line[strcspn(line, "\n")] = 0;
}

/* The command line as the binary runs it (zinf_cli_main: cli.c's flag table), then the options
 * struct that the table fills (zinf_estimate_run). */
static void check_main(void)
{
    char *a1[] = {"zinf", "estimate", NULL};
    CHECK(zinf_cli_main(2, a1) != 0, "no --model accepted");
    char *a2[] = {"zinf", "estimate", "--model", "gpt2-124m", "--nodes", "0", NULL};
    CHECK(zinf_cli_main(6, a2) != 0, "--nodes 0 accepted");
    char *a3[] = {"zinf", "estimate", "--model", "gpt2-124m", "--gpus-per-node", "x", NULL};
    CHECK(zinf_cli_main(6, a3) != 0, "--gpus-per-node x accepted");
    char *a4[] = {"zinf", "estimate", "--model", "no-such-model", NULL};
    CHECK(zinf_cli_main(4, a4) != 0, "unknown model accepted");
    char *a5[] = {"zinf", "estimate", "--model", "gpt2-124m", "--frobnicate", "1", NULL};
    CHECK(zinf_cli_main(6, a5) != 0, "unknown flag accepted");
    char *a6[] = {"zinf", "estimate", "--model", NULL};
    CHECK(zinf_cli_main(3, a6) != 0, "--model without a value accepted");
    char *a7[] = {"zinf", "estimate", "--model", "test-mini", "--precision", "fp16", NULL};
    CHECK(zinf_cli_main(6, a7) != 0, "--precision fp16 accepted");
    char *a8[] = {"zinf", "estimate", "--model", "test-mini", "--stage", "4", NULL};
    CHECK(zinf_cli_main(6, a8) != 0, "--stage 4 accepted");
    /* a boolean flag takes true or false (and 1 or 0), as every subcommand's do, and nothing else */
    char *a9[] = {"zinf", "estimate", "--model", "test-mini", "--print-bytes=maybe", NULL};
    CHECK(zinf_cli_main(5, a9) != 0, "--print-bytes=maybe accepted");
    char *a10[] = {"zinf", "estimate", "--model", "test-mini", "--stage", "1", "--config", "x.json", NULL};
    CHECK(zinf_cli_main(8, a10) != 0, "--stage with --config accepted");
    char *a11[] = {"zinf", "estimate", "--model", "test-mini", "stray", NULL};
    CHECK(zinf_cli_main(5, a11) != 0, "a positional argument accepted");

    /* the options struct: one stage's bytes are zinf_estimate_print_bytes' line, exactly */
    zinf_model_cfg m;
    CHECK(zinf_model_cfg_load(&m, "test-mini") == 0, "test-mini: %s", zinf_errmsg());
    FILE *f = tmpfile(), *g = tmpfile();
    CHECK(f && g, "tmpfile");
    if (!f || !g) return;
    zinf_estimate_opts o;
    zinf_estimate_opts_defaults(&o);
    o.model = "test-mini";
    o.precision = "fp32";
    o.gpus_per_node = 3;
    o.stage = 2;
    o.stage_set = true;
    o.print_bytes = true;
    CHECK(zinf_estimate_run(&o, f, NULL) == 0, "run: %s", zinf_errmsg());
    CHECK(zinf_estimate_print_bytes(g, &m, ZINF_EST_FP32, 2, 3, 0, NULL) == 0, "print_bytes: %s", zinf_errmsg());
    char lf[512], lg[512];
    first_line(f, lf, sizeof lf);
    first_line(g, lg, sizeof lg);
    CHECK(lf[0] && !strcmp(lf, lg), "run printed '%s', print_bytes '%s'", lf, lg);

    /* each bad value is refused with the flag and the value in the message */
    struct { const char *what, *want; } bad[] = {
        {"micro-batch 0", "--micro-batch 0: expected a whole number from 1 to 1000000"},
        {"seq-len without micro-batch", "give --micro-batch too"},
        {"stage -1", "--stage -1: expected 0, 1, 2 or 3"},
        {"recompute some", "--recompute some: expected none, full or keep-attention"},
        {"no model", "--model is required"},
        {"nodes 2000000", "--nodes 2000000: expected a whole number from 1 to 1000000"},
    };
    for (size_t k = 0; k < NELEM(bad); k++) {
        zinf_estimate_opts b = o;
        if (k == 0) b.micro_batch_set = true, b.micro_batch = 0;
        if (k == 1) b.seq_len_set = true, b.seq_len = 16;
        if (k == 2) b.stage = -1;
        if (k == 3) b.micro_batch_set = true, b.micro_batch = 1, b.recompute = "some";
        if (k == 4) b.model = NULL;
        if (k == 5) b.nodes = 2000000;
        int rc = zinf_estimate_run(&b, g, NULL);
        CHECK(rc != 0 && strstr(zinf_errmsg(), bad[k].want), "%s: rc %d, message '%s'", bad[k].what, rc,
              zinf_errmsg());
    }
    fclose(f);
    fclose(g);
}

/* cuDNN's attention backward workspace (kernels.h), against the sizes cuDNN 9.19 reported for its
 * plans on an H100 (ZINF_ATTN_CUDNN=verbose, 2026-11-28; each 256 bytes more, its alignment):
 * one sample of T 4096, 32 query heads over 8 kv heads of 128, 1140850944 bytes (dP 32 x 4096^2 x 2,
 * and the grouped heads' fp32 dK/dV 32 x 4096 x 128 x 4); two samples of 32/32 heads of 128,
 * 2147483904; one of 64/64 heads of 64, 2147483904. The calls: as few as keep each within the
 * 4.5 GiB budget (4831838208 bytes), of equal size. */
static void check_attn_ws(void)
{
    CHECK(ZINF_ATTN_WS_BUDGET == (size_t)9 << 29, "the budget is 4.5 GiB");
    CHECK(zinf_attn_ws_bytes(1, 4096, 32, 8, 128, 2) == 1140850944 - 256, "1 x 4096, 32/8 heads of 128");
    CHECK(zinf_attn_ws_bytes(2, 4096, 32, 32, 128, 2) == 2147483904 - 256, "2 x 4096, 32/32 heads of 128");
    CHECK(zinf_attn_ws_bytes(1, 4096, 64, 64, 64, 2) == 2147483904 - 256, "1 x 4096, 64/64 heads of 64");
    /* Llama-3.2-1B at micro-batch 4 (32/8 heads of 64): 4 x (32 x 4096^2 x 2 + 32 x 4096 x 64 x 4)
     * = 4429185024 bytes, one call */
    CHECK(zinf_attn_ws_samples(4, 4096, 32, 8, 64, 2) == 4, "Llama-3.2-1B: four samples a call");
    CHECK(zinf_attn_ws_bytes(4, 4096, 32, 8, 64, 2) == 4429185024u, "Llama-3.2-1B bytes");
    /* five samples of it: two calls, of 3 and 2 */
    CHECK(zinf_attn_ws_samples(5, 4096, 32, 8, 64, 2) == 3, "Llama-3.2-1B, 5 samples: calls of 3 and 2");
    /* Qwen2.5-1.5B (12/2 heads of 128): all four in one call, 1.7 GB */
    CHECK(zinf_attn_ws_samples(4, 4096, 12, 2, 128, 2) == 4, "Qwen2.5-1.5B: four samples a call");
    CHECK(zinf_attn_ws_bytes(4, 4096, 12, 2, 128, 2) == (size_t)4 * 12 * (4096 * 4096 * 2 + 4096 * 128 * 4),
          "Qwen2.5-1.5B bytes");
    /* 64 grouped heads at T 8192: one sample's 8 GiB of dP passes the budget */
    CHECK(zinf_attn_ws_samples(4, 8192, 64, 16, 64, 2) == 0, "64/16 heads at 8192: zinf's kernels");
    CHECK(zinf_attn_ws_bytes(4, 8192, 64, 16, 64, 2) == 0, "no workspace where cuDNN is not used");
    /* at 4096 one sample of them (2 GiB of dP, 64 MiB of fp32 dK/dV) fits, two (4.125 GiB) too */
    CHECK(zinf_attn_ws_samples(4, 4096, 64, 16, 64, 2) == 2, "64/16 heads at 4096: two a call");
    /* five samples of which two fit a call (56 heads: 1.75 GiB each): calls of 2, 2, 1 (as few
     * calls, sizes equal but the last) */
    CHECK(zinf_attn_ws_samples(5, 4096, 56, 56, 64, 2) == 2, "5 samples, 2 fit: 2 a call");
    /* the budget itself is within it: three samples of 48 heads of 64 are 4.5 GiB to the byte */
    CHECK(zinf_attn_ws_samples(3, 4096, 48, 48, 64, 2) == 3, "exactly the budget: one call");
    /* T rounded up to 64; 7 of 8 samples fit (20 heads of 128: 625 MiB each): two calls of 4 */
    CHECK(zinf_attn_ws_bytes(1, 4000, 16, 16, 64, 2) == (size_t)16 * 4032 * 4032 * 2, "T 4000 counted as 4032");
    CHECK(zinf_attn_ws_samples(8, 4096, 20, 20, 128, 2) == 4, "8 samples, 7 fit: two calls of 4");
    /* test_backend_ops' rerun check at T 4096: 3 samples of 48/12 heads of 128 (1.59 GiB each) go
     * as 2 and 1 */
    CHECK(zinf_attn_ws_samples(3, 4096, 48, 12, 128, 2) == 2, "3 samples of 48/12 heads: calls of 2 and 1");
    CHECK(zinf_attn_ws_samples(0, 4096, 4, 4, 128, 2) == 0, "no samples");
    CHECK(zinf_attn_ws_samples(4, 4096, 12, 2, 128, 4) == 0 && zinf_attn_ws_bytes(4, 4096, 12, 2, 128, 4) == 0,
          "fp32: no cuDNN, zinf's kernels");
    CHECK(zinf_attn_ws_samples(4, 4096, 8, 8, 96, 2) == 0 && zinf_attn_ws_bytes(4, 4096, 8, 8, 96, 2) == 0,
          "head size 96: no cuDNN graph, zinf's kernels");
    /* several calls with NH T not a multiple of 4: a later call's lse rows would not be 16-byte
     * aligned, so zinf's kernels; one call needs no offset */
    CHECK(zinf_attn_ws_samples(8, 4095, 25, 25, 64, 2) == 0, "NH 25 x T 4095 in calls: zinf's kernels");
    CHECK(zinf_attn_ws_samples(4, 4095, 25, 25, 64, 2) == 4, "NH 25 x T 4095, four samples in one call");
    CHECK(zinf_attn_ws_samples(1, 4095, 25, 25, 64, 2) == 1, "NH 25 x T 4095, one sample: one call");
}

/* the gradients alive at once in a backward pass, against each family's closed form: a tied
 * embedding's beside the biggest block's; untied, the head's unit (final norm and head) is
 * differentiated alone, before the blocks, and the embedding's after them */
static void check_grad_live(void)
{
    const char *names[] = {"llama-3.2-1b", "llama-3.1-8b", "qwen2.5-0.5b", "qwen3-8b"};
    for (size_t i = 0; i < NELEM(names); i++) {
        zinf_model_cfg c;
        CHECK(zinf_model_cfg_load(&c, names[i]) == 0, "%s: %s", names[i], zinf_errmsg());
        const double C = c.n_embd, A = (double)c.n_head * c.head_dim, KV = (double)c.n_kv_head * c.head_dim;
        const double F = c.d_ff, Vp = c.padded_vocab;
        double block = C * A + 2 * C * KV + A * C + 3 * C * F + 2 * C; /* q k v o, gate up down, 2 norms */
        if (c.qkv_bias) block += A + 2 * KV;
        if (c.o_bias) block += C;
        if (c.mlp_bias) block += 2 * F + C;
        if (c.qk_norm) block += 2.0 * c.head_dim;
        const double emb = Vp * C, last = C + (c.tie_embeddings ? 0 : Vp * C);
        const double want = c.tie_embeddings ? emb + fmax(block, last) : fmax(fmax(last, block), emb);
        zinf_model mm;
        CHECK(zinf_model_init(&mm, &c, NULL) == 0, "%s: layout: %s", names[i], zinf_errmsg());
        CHECK((double)zinf_model_grad_live_max(&mm) == want, "%s: gradients alive at once %lld, want %.0f", names[i],
              (long long)zinf_model_grad_live_max(&mm), want);
        zinf_model_free(&mm);
    }
}

/* Activations past 64 bits: GPT-2 124M's layout written out from gpt2.c's and model.c's carve
 * (N = B x T tokens, a multiple of 256 so that no buffer is rounded; es = 4): the residual stream
 * (L+1) N C es; per block ln1, qkv, atty, res2, ln2, fch, fchg (15 N C es), four LayerNorm
 * statistics (16 N) and the lse (4 N NH); lnf (N C es) and its statistics (8 N); the logits, at
 * most 2 GiB of rows; losses, tokens, targets (12 N). Gradient scratch: d_res, d_ln, d_qkv,
 * d_atty, d_fch (10 N C es) and the head's weight gradient in chunks (Vp C es). At 2^40 tokens
 * that is exact in 64 bits; at 10^6 x 2^24 tokens it passes 2^64 and wrapped silently before. */
static void check_act_overflow(void)
{
    zinf_model_cfg m;
    CHECK(zinf_model_cfg_load(&m, "gpt2-124m") == 0, "gpt2-124m: %s", zinf_errmsg());
    m.n_positions = 1 << 30; /* the activations know T, not the position table */
    const uint64_t C = 768, L = 12, NH = 12, Vp = 50304, es = 4, N = (uint64_t)1 << 40;
    const uint64_t rows = ((uint64_t)2 << 30) / (Vp * es), logits = (rows * Vp * es + 255) / 256 * 256;
    const uint64_t want_a = (L + 1) * N * C * es + L * (15 * N * C * es + 16 * N + 4 * N * NH) + N * C * es + 8 * N +
                            logits + 12 * N;
    const uint64_t want_g = 10 * N * C * es + Vp * C * es;
    size_t a = 0, g = 0;
    CHECK(zinf_model_act_bytes(&m, 1 << 20, 1 << 20, 4, ZINF_RECOMPUTE_NONE, &a, &g) == 0, "2^40 tokens: %s",
          zinf_errmsg());
    CHECK(a == want_a && g == want_g, "2^40 tokens: act %zu act_grad %zu, want %llu %llu", a, g,
          (unsigned long long)want_a, (unsigned long long)want_g);
    int rc = zinf_model_act_bytes(&m, 1000000, 1 << 24, 4, ZINF_RECOMPUTE_NONE, &a, &g);
    CHECK(rc != 0 && strstr(zinf_errmsg(), "activations of 1000000 x 16777216 tokens: more than 2^63 bytes"),
          "10^6 x 2^24 tokens: rc %d, %s", rc, rc ? zinf_errmsg() : "accepted");
    /* the command line: a 72B at 10^6 x 10^6 tokens (a config with that many positions) */
    char path[] = "/tmp/zinf_test_estimate_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    if (fd < 0) return;
    const char *j = "{\"model_type\": \"qwen2\", \"hidden_size\": 8192, \"intermediate_size\": 29568, "
                    "\"num_hidden_layers\": 80, \"num_attention_heads\": 64, \"num_key_value_heads\": 8, "
                    "\"vocab_size\": 152064, \"max_position_embeddings\": 1000000, \"rms_norm_eps\": 1e-6, "
                    "\"rope_theta\": 1000000.0, \"tie_word_embeddings\": false}";
    CHECK(write(fd, j, strlen(j)) == (ssize_t)strlen(j), "write");
    close(fd);
    FILE *f = tmpfile();
    zinf_estimate_opts o;
    zinf_estimate_opts_defaults(&o);
    o.model = path;
    o.precision = "fp32";
    o.stage = 3, o.stage_set = true;
    o.micro_batch = 1000000, o.micro_batch_set = true;
    o.seq_len = 1000000, o.seq_len_set = true;
    o.print_bytes = true;
    rc = f ? zinf_estimate_run(&o, f, NULL) : -1;
    CHECK(rc != 0 && strstr(zinf_errmsg(), "more than 2^63 bytes"), "72B, 10^6 x 10^6 tokens: %s",
          rc ? zinf_errmsg() : "accepted");
    if (f) fclose(f);
    unlink(path);
}

/* a config's path, its text written to a temporary file */
static void write_tmp(char *path, const char *text)
{
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    if (fd < 0) return;
    CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text), "write");
    close(fd);
}

/* zinf_estimate_run's --print-bytes line for test-mini with a config and --micro-batch (0: none) */
static int run_micro(const char *cfg, int64_t micro, char *line, size_t cap)
{
    FILE *f = tmpfile();
    if (!f) return -1;
    zinf_estimate_opts o;
    zinf_estimate_opts_defaults(&o);
    o.model = "test-mini";
    o.config = cfg;
    o.print_bytes = true;
    if (micro) o.micro_batch = micro, o.micro_batch_set = true, o.seq_len = 8, o.seq_len_set = true;
    int rc = zinf_estimate_run(&o, f, NULL);
    rewind(f);
    line[0] = 0;
    if (!fgets(line, (int)cap, f)) line[0] = 0;
    fclose(f);
    return rc;
}

/* --micro-batch is the run's micro-batch, as train's --per_device_train_batch_size: it fills the
 * config's "auto" (and so the accumulation steps the batch rule derives), and a config that fixes
 * another is refused. train_batch_size 32 on one rank, the accumulation steps derived: --micro-batch 32 is one micro-step a step,
 * where bf16 at stage 0 keeps the 16-bit gradients (2 Psi, no accumulator: zinf_zero_grads16),
 * --micro-batch 16 two, with fp32 accumulators (4 Psi). Before, "auto" took HF's default 8
 * (four micro-steps) whatever --micro-batch said, and a fixed 4 beside --micro-batch 16 passed. */
static void check_micro_fills_auto(void)
{
    zinf_model_cfg m;
    CHECK(zinf_model_cfg_load(&m, "test-mini") == 0, "test-mini: %s", zinf_errmsg());
    const long long psi = (long long)zinf_model_num_params(&m);
    char autop[] = "/tmp/zinf_test_estimate_XXXXXX", fixed[] = "/tmp/zinf_test_estimate_XXXXXX",
         none[] = "/tmp/zinf_test_estimate_XXXXXX";
    write_tmp(autop, "{\"train_batch_size\": 32, \"train_micro_batch_size_per_gpu\": \"auto\", "
                     "\"bf16\": {\"enabled\": true}, "
                     "\"zero_optimization\": {\"stage\": 0}}");
    write_tmp(fixed, "{\"train_micro_batch_size_per_gpu\": 4, \"gradient_accumulation_steps\": 2, "
                     "\"bf16\": {\"enabled\": true}, \"zero_optimization\": {\"stage\": 2}}");
    write_tmp(none, "{\"bf16\": {\"enabled\": true}, \"zero_optimization\": {\"stage\": 3}}");
    char line[512], want[256];
    CHECK(run_micro(autop, 32, line, sizeof line) == 0, "auto, --micro-batch 32: %s", zinf_errmsg());
    snprintf(want, sizeof want, "param=%lld param_shard=0 grad=%lld grad_acc=0 ", 2 * psi, 2 * psi);
    CHECK(!strncmp(line, want, strlen(want)), "auto, --micro-batch 32 (1 micro-step): %s, want %s", line, want);
    CHECK(run_micro(autop, 16, line, sizeof line) == 0, "auto, --micro-batch 16: %s", zinf_errmsg());
    snprintf(want, sizeof want, "param=%lld param_shard=0 grad=0 grad_acc=%lld ", 2 * psi, 4 * psi);
    CHECK(!strncmp(line, want, strlen(want)), "auto, --micro-batch 16 (2 micro-steps): %s, want %s", line, want);
    int rc = run_micro(fixed, 16, line, sizeof line);
    CHECK(rc != 0 && strstr(zinf_errmsg(), "train_micro_batch_size_per_gpu is 4 in the config but --micro-batch is 16"),
          "a fixed 4 beside --micro-batch 16: %s", rc ? zinf_errmsg() : "accepted");
    CHECK(run_micro(fixed, 4, line, sizeof line) == 0, "a fixed 4 beside --micro-batch 4: %s", zinf_errmsg());
    /* HF's own zero3 config has no batch key: the Trainer fills it; here --micro-batch does */
    rc = run_micro(none, 0, line, sizeof line);
    CHECK(rc != 0 && strstr(zinf_errmsg(), "neither train_batch_size nor train_micro_batch_size_per_gpu is set: "
                                           "give one in the config, or --micro-batch"),
          "no batch key, no --micro-batch: %s", rc ? zinf_errmsg() : "accepted");
    CHECK(run_micro(none, 2, line, sizeof line) == 0, "no batch key, --micro-batch 2: %s", zinf_errmsg());
    /* --seq-len with a config and no --micro-batch: the activations of the config's micro-batch (its
     * 4), the same output as --micro-batch 4 gives; without a config it is still an error */
    char *out[2];
    for (int k = 0; k < 2; k++) {
        FILE *f = tmpfile();
        CHECK(f != NULL, "tmpfile");
        if (!f) return;
        zinf_estimate_opts o;
        zinf_estimate_opts_defaults(&o);
        o.model = "test-mini", o.config = fixed, o.print_bytes = true;
        o.seq_len = 8, o.seq_len_set = true;
        if (k) o.micro_batch = 4, o.micro_batch_set = true;
        CHECK(zinf_estimate_run(&o, f, NULL) == 0, "config, --seq-len 8%s: %s", k ? ", --micro-batch 4" : "",
              zinf_errmsg());
        long n = ftell(f);
        rewind(f);
        out[k] = calloc((size_t)n + 1, 1);
        if (out[k] && n > 0 && fread(out[k], 1, (size_t)n, f) != (size_t)n) out[k][0] = 0;
        fclose(f);
    }
    CHECK(out[0] && out[1] && strstr(out[0], "\nact=") && !strcmp(out[0], out[1]),
          "the config's micro-batch: '%s', --micro-batch 4: '%s'", out[0] ? out[0] : "", out[1] ? out[1] : "");
    free(out[0]), free(out[1]);
    unlink(autop), unlink(fixed), unlink(none);
}

/* Psi of published models from their own config.json (the published files, every key as
 * released: bos/eos ids, use_cache, sliding_window, max_window_layers, ...), against the count
 * written out from the shape: the embedding V h; per layer q (h Hq d), k and v (h Hkv d each), o
 * (Hq d h), Qwen2's q/k/v biases (Hq d + 2 Hkv d), Qwen3's q/k norms (2 d), gate, up, down (3 h I)
 * and two norms (2 h); the final norm h; an untied head V h. Each equals the parameter count the
 * model's card publishes (the last column). */
static void check_published_psi(void)
{
    static const struct {
        const char *name;
        double h, I, L, Hq, Hkv, d, V;
        int tied, qkv_bias, qk_norm;
        int64_t published;
        const char *json;
    } P[] = {
        {"Llama-3.1-8B", 4096, 14336, 32, 32, 8, 128, 128256, 0, 0, 0, 8030261248,
         "{\"architectures\":[\"LlamaForCausalLM\"],\"attention_bias\":false,\"attention_dropout\""
         ":0.0,\"bos_token_id\":128000,\"eos_token_id\":128001,\"hidden_act\":\"silu\",\"hidden_si"
         "ze\":4096,\"initializer_range\":0.02,\"intermediate_size\":14336,\"max_position_embeddin"
         "gs\":131072,\"mlp_bias\":false,\"model_type\":\"llama\",\"num_attention_heads\":32,\"num"
         "_hidden_layers\":32,\"num_key_value_heads\":8,\"pretraining_tp\":1,\"rms_norm_eps\":1e-0"
         "5,\"rope_scaling\":{\"factor\":8.0,\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,\"or"
         "iginal_max_position_embeddings\":8192,\"rope_type\":\"llama3\"},\"rope_theta\":500000.0,"
         "\"tie_word_embeddings\":false,\"torch_dtype\":\"bfloat16\",\"transformers_version\":\"4."
         "43.0.dev0\",\"use_cache\":true,\"vocab_size\":128256}"},
        {"Llama-3.2-1B", 2048, 8192, 16, 32, 8, 64, 128256, 1, 0, 0, 1235814400,
         "{\"architectures\":[\"LlamaForCausalLM\"],\"attention_bias\":false,\"attention_dropout\""
         ":0.0,\"bos_token_id\":128000,\"eos_token_id\":128001,\"head_dim\":64,\"hidden_act\":\"si"
         "lu\",\"hidden_size\":2048,\"initializer_range\":0.02,\"intermediate_size\":8192,\"max_po"
         "sition_embeddings\":131072,\"mlp_bias\":false,\"model_type\":\"llama\",\"num_attention_h"
         "eads\":32,\"num_hidden_layers\":16,\"num_key_value_heads\":8,\"pretraining_tp\":1,\"rms_"
         "norm_eps\":1e-05,\"rope_scaling\":{\"factor\":32.0,\"high_freq_factor\":4.0,\"low_freq_f"
         "actor\":1.0,\"original_max_position_embeddings\":8192,\"rope_type\":\"llama3\"},\"rope_t"
         "heta\":500000.0,\"tie_word_embeddings\":true,\"torch_dtype\":\"bfloat16\",\"transformers"
         "_version\":\"4.45.0.dev0\",\"use_cache\":true,\"vocab_size\":128256}"},
        {"Qwen2.5-0.5B", 896, 4864, 24, 14, 2, 64, 151936, 1, 1, 0, 494032768,
         "{\"architectures\":[\"Qwen2ForCausalLM\"],\"attention_dropout\":0.0,\"bos_token_id\":151"
         "643,\"eos_token_id\":151643,\"hidden_act\":\"silu\",\"hidden_size\":896,\"initializer_ra"
         "nge\":0.02,\"intermediate_size\":4864,\"max_position_embeddings\":32768,\"max_window_lay"
         "ers\":24,\"model_type\":\"qwen2\",\"num_attention_heads\":14,\"num_hidden_layers\":24,\""
         "num_key_value_heads\":2,\"rms_norm_eps\":1e-06,\"rope_theta\":1000000.0,\"sliding_window"
         "\":32768,\"tie_word_embeddings\":true,\"torch_dtype\":\"bfloat16\",\"transformers_versio"
         "n\":\"4.40.1\",\"use_cache\":true,\"use_mrope\":false,\"use_sliding_window\":false,\"voc"
         "ab_size\":151936}"},
        {"Qwen2.5-7B", 3584, 18944, 28, 28, 4, 128, 152064, 0, 1, 0, 7615616512,
         "{\"architectures\":[\"Qwen2ForCausalLM\"],\"attention_dropout\":0.0,\"bos_token_id\":151"
         "643,\"eos_token_id\":151643,\"hidden_act\":\"silu\",\"hidden_size\":3584,\"initializer_r"
         "ange\":0.02,\"intermediate_size\":18944,\"max_position_embeddings\":131072,\"max_window_"
         "layers\":28,\"model_type\":\"qwen2\",\"num_attention_heads\":28,\"num_hidden_layers\":28"
         ",\"num_key_value_heads\":4,\"rms_norm_eps\":1e-06,\"rope_theta\":1000000.0,\"sliding_win"
         "dow\":131072,\"tie_word_embeddings\":false,\"torch_dtype\":\"bfloat16\",\"transformers_v"
         "ersion\":\"4.40.1\",\"use_cache\":true,\"use_mrope\":false,\"use_sliding_window\":false,"
         "\"vocab_size\":152064}"},
        {"Qwen2.5-72B", 8192, 29568, 80, 64, 8, 128, 152064, 0, 1, 0, 72706203648,
         "{\"architectures\":[\"Qwen2ForCausalLM\"],\"attention_dropout\":0.0,\"bos_token_id\":151"
         "643,\"eos_token_id\":151643,\"hidden_act\":\"silu\",\"hidden_size\":8192,\"initializer_r"
         "ange\":0.02,\"intermediate_size\":29568,\"max_position_embeddings\":131072,\"max_window_"
         "layers\":80,\"model_type\":\"qwen2\",\"num_attention_heads\":64,\"num_hidden_layers\":80"
         ",\"num_key_value_heads\":8,\"rms_norm_eps\":1e-06,\"rope_theta\":1000000.0,\"sliding_win"
         "dow\":131072,\"tie_word_embeddings\":false,\"torch_dtype\":\"bfloat16\",\"transformers_v"
         "ersion\":\"4.43.1\",\"use_cache\":true,\"use_sliding_window\":false,\"vocab_size\":15206"
         "4}"},
        {"Qwen3-8B", 4096, 12288, 36, 32, 8, 128, 151936, 0, 0, 1, 8190735360,
         "{\"architectures\":[\"Qwen3ForCausalLM\"],\"attention_bias\":false,\"attention_dropout\""
         ":0.0,\"bos_token_id\":151643,\"eos_token_id\":151645,\"head_dim\":128,\"hidden_act\":\"s"
         "ilu\",\"hidden_size\":4096,\"initializer_range\":0.02,\"intermediate_size\":12288,\"max_"
         "position_embeddings\":40960,\"max_window_layers\":36,\"model_type\":\"qwen3\",\"num_atte"
         "ntion_heads\":32,\"num_hidden_layers\":36,\"num_key_value_heads\":8,\"rms_norm_eps\":1e-"
         "06,\"rope_scaling\":null,\"rope_theta\":1000000,\"sliding_window\":null,\"tie_word_embed"
         "dings\":false,\"torch_dtype\":\"bfloat16\",\"transformers_version\":\"4.51.0\",\"use_cac"
         "he\":true,\"use_sliding_window\":false,\"vocab_size\":151936}"},
        {"Mistral-7B-v0.1", 4096, 14336, 32, 32, 8, 128, 32000, 0, 0, 0, 7241732096,
         "{\"architectures\":[\"MistralForCausalLM\"],\"bos_token_id\":1,\"eos_token_id\":2,\"hidd"
         "en_act\":\"silu\",\"hidden_size\":4096,\"initializer_range\":0.02,\"intermediate_size\":"
         "14336,\"max_position_embeddings\":32768,\"model_type\":\"mistral\",\"num_attention_heads"
         "\":32,\"num_hidden_layers\":32,\"num_key_value_heads\":8,\"rms_norm_eps\":1e-05,\"rope_t"
         "heta\":10000.0,\"sliding_window\":4096,\"tie_word_embeddings\":false,\"torch_dtype\":\"b"
         "float16\",\"transformers_version\":\"4.34.0.dev0\",\"use_cache\":true,\"vocab_size\":320"
         "00}"},
    };
    for (size_t i = 0; i < NELEM(P); i++) {
        const double h = P[i].h, d = P[i].d, q = P[i].Hq * d, kv = P[i].Hkv * d;
        const double layer = h * q + 2 * h * kv + q * h + (P[i].qkv_bias ? q + 2 * kv : 0) +
                             (P[i].qk_norm ? 2 * d : 0) + 3 * h * P[i].I + 2 * h;
        const double want = P[i].V * h + P[i].L * layer + h + (P[i].tied ? 0 : P[i].V * h);
        CHECK(want == (double)P[i].published, "%s: the closed form %.0f, published %lld", P[i].name, want,
              (long long)P[i].published);
        char path[] = "/tmp/zinf_test_estimate_XXXXXX";
        int fd = mkstemp(path);
        CHECK(fd >= 0, "mkstemp");
        if (fd < 0) continue;
        CHECK(write(fd, P[i].json, strlen(P[i].json)) == (ssize_t)strlen(P[i].json), "write");
        close(fd);
        zinf_model_cfg m;
        int rc = zinf_model_cfg_load(&m, path);
        CHECK(rc == 0, "%s: %s", P[i].name, rc ? zinf_errmsg() : "");
        if (!rc)
            CHECK((double)zinf_model_num_params(&m) == want, "%s: Psi %lld, want %.0f", P[i].name,
                  (long long)zinf_model_num_params(&m), want);
        unlink(path);
    }
}

int main(void)
{
    check_published_psi();
    check_micro_fills_auto();
    check_act_overflow();
    check_largest();
    check_grad_live();
    check_paper();
    check_attn_ws();

    zinf_model_cfg m;
    const char *presets[] = {"gpt2-124m", "gpt2-1.5b"};
    const int shapes[][2] = {{1, 1}, {1, 2}, {1, 8}, {8, 8}}; /* N = 1, 2, 8, 64 */
    for (size_t p = 0; p < NELEM(presets); p++) {
        CHECK(zinf_model_cfg_load(&m, presets[p]) == 0, "%s: %s", presets[p], zinf_errmsg());
        for (size_t s = 0; s < NELEM(shapes); s++) check_model(&m, shapes[s][0], shapes[s][1]);
    }

    /* a model file whose largest unit is a block, not the embedding */
    char path[] = "/tmp/zinf_test_estimate_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    if (fd >= 0) {
        const char *j = "{\"model_type\": \"gpt2\", \"n_layer\": 6, \"n_embd\": 1024, "
                        "\"n_head\": 16, \"vocab_size\": 1000, \"n_positions\": 512}";
        CHECK(write(fd, j, strlen(j)) == (ssize_t)strlen(j), "write");
        close(fd);
        CHECK(zinf_model_cfg_load(&m, path) == 0, "model file: %s", zinf_errmsg());
        const double C = 1024;
        CHECK(zinf_model_num_params(&m) ==
                  (int64_t)(1024 * C + 512 * C + 6 * (12 * C * C + 13 * C) + 2 * C),
              "model file Psi");
        const char *name = NULL;
        CHECK(zinf_estimate_largest_unit(&m, &name) == (int64_t)(12 * C * C + 13 * C),
              "model file L");
        CHECK(name && strstr(name, "block"), "model file largest unit is a block");
        /* the gathered-units rule above assumes only the LayerNorm is persistent: true here */
        for (size_t s = 0; s < NELEM(shapes); s++) check_model(&m, shapes[s][0], shapes[s][1]);
        unlink(path);
    }

    check_config_buffers();
    check_print();
    check_fp32();
    check_main();
    return check_done("test_estimate");
}
