/* attention_cudnn: causal grouped-query attention through cuDNN's fused flash-attention engine,
 * tried first by attention.cu's entry points for rows of one sample each (no packing), 16-bit
 * compute and head sizes 64 and 128; anything cuDNN refuses falls back to zinf's own kernels,
 * which compute the same function (the CPU reference checks both, op by op).
 *
 * cuDNN is loaded at run time (dlopen of libcudnn.so.9): zinf runs on machines without it, and
 * then always takes its own kernels. The graphs are built with cuDNN 9's backend API (the C
 * descriptors of cudnn_graph.h): cuDNN matches a graph of matmuls, pointwise operations and
 * reductions with this shape against its fused attention kernels:
 *   forward   S = Q K^T * scale, causal mask (generated row and column indices, row >= col),
 *             M = rowmax S, E = exp(S - M), Z = rowsum E, lse = M + log Z, O = (E / Z) V
 *   backward  D = rowsum(dO o O); P = exp(Q K^T * scale - lse) under the mask;
 *             dV = P^T dO, dS = P o (dO V^T - D) * scale, dK = dS^T Q, dQ = dS K
 * with grouped kv heads summed over each group by a reduction. lse is the natural log-sum-exp
 * of the scaled scores, as zinf's kernels store it, so a forward of either kind pairs with a
 * backward of either kind. The layout is zinf's own: q, k and v of a token side by side in one
 * row of qkv, addressed by strides, nothing copied.
 *
 * zinf's runs are repeatable bit for bit (DESIGN 5). The backward graph with dQ summed over the key
 * tiles in an fp32 buffer is matched by an engine that adds the tiles with atomics without saying
 * so (no nondeterministic note; two runs at T 4096 differ on an H100, cuDNN 9.19), so dQ = dS K
 * goes straight into dQ, and cuDNN keeps dP in its workspace (NH T^2 2 bytes a sample) and sums in
 * a fixed order; the samples go in calls within ZINF_ATTN_WS_BUDGET (kernels.h), and past one
 * sample zinf's kernels run. The accumulated form stays for timing against it
 * (zinf_cuda_attn_cudnn_acc, test_backend_ops --bench-attn). Engines marked nondeterministic are
 * passed over as well, and test_backend_ops holds the backward's reruns to the same bits, at T
 * 4096 too. One plan per shape is built on first use and kept until the backend is freed. */
#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"
#include "cuda_common.h"
#include "zinf-build.h"

int zinf_cuda_attn_cudnn = -1;     /* -1: from ZINF_ATTN_CUDNN at first use */
int zinf_cuda_attn_cudnn_acc = 0;  /* the backward's dQ through the accumulator (cuda_backend.h) */
long zinf_cuda_attn_cudnn_runs = 0; /* attention calls cuDNN ran (tests check it ran) */

#ifdef ZINF_HAVE_CUDNN
#include <cudnn_graph.h>

static int verbose; /* ZINF_ATTN_CUDNN=verbose: each plan, and why cuDNN was not used, on stderr */

/* ---------------------------------------------------------------- the library, loaded on demand */

static struct {
    int tried, ok;
    size_t version;
    char why[200];
    cudnnStatus_t (*create)(cudnnHandle_t *);
    cudnnStatus_t (*destroy)(cudnnHandle_t);
    cudnnStatus_t (*set_stream)(cudnnHandle_t, cudaStream_t);
    size_t (*get_version)(void);
    const char *(*err_string)(cudnnStatus_t);
    void (*last_error)(char *, size_t);
    cudnnStatus_t (*mk)(cudnnBackendDescriptorType_t, cudnnBackendDescriptor_t *);
    cudnnStatus_t (*rm)(cudnnBackendDescriptor_t);
    cudnnStatus_t (*set)(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t, cudnnBackendAttributeType_t, int64_t,
                         const void *);
    cudnnStatus_t (*get)(cudnnBackendDescriptor_t const, cudnnBackendAttributeName_t, cudnnBackendAttributeType_t,
                         int64_t, int64_t *, void *);
    cudnnStatus_t (*fin)(cudnnBackendDescriptor_t);
    cudnnStatus_t (*exec)(cudnnHandle_t, cudnnBackendDescriptor_t, cudnnBackendDescriptor_t);
} L;

static bool load_cudnn(void)
{
    if (L.tried) return L.ok;
    L.tried = 1;
    void *h = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
    if (!h) h = dlopen("libcudnn.so", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(L.why, sizeof L.why, "libcudnn.so.9 not found (%s)", dlerror());
        return false;
    }
#define SYM(field, name)                                                                          \
    if (!(*(void **)&L.field = dlsym(h, name))) {                                                 \
        snprintf(L.why, sizeof L.why, "libcudnn has no %s", name);                                \
        return false;                                                                             \
    }
    SYM(create, "cudnnCreate")
    SYM(destroy, "cudnnDestroy")
    SYM(set_stream, "cudnnSetStream")
    SYM(get_version, "cudnnGetVersion")
    SYM(err_string, "cudnnGetErrorString")
    SYM(last_error, "cudnnGetLastErrorString")
    SYM(mk, "cudnnBackendCreateDescriptor")
    SYM(rm, "cudnnBackendDestroyDescriptor")
    SYM(set, "cudnnBackendSetAttribute")
    SYM(get, "cudnnBackendGetAttribute")
    SYM(fin, "cudnnBackendFinalize")
    SYM(exec, "cudnnBackendExecute")
#undef SYM
    L.version = L.get_version();
    if (L.version < 90000) { /* the fused graphs below need cuDNN 9 */
        snprintf(L.why, sizeof L.why, "cuDNN %zu is older than 9.0", L.version);
        return false;
    }
    L.ok = 1;
    return true;
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    if (!verbose) return;
    va_list ap;
    va_start(ap, fmt);
    fputs("zinf: attention: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* ---------------------------------------------------------------- building a graph */

typedef cudnnBackendDescriptor_t Desc;
enum { MAX_DESC = 160, MAX_OPS = 48 };

/* The descriptors of one graph and its plan (kept together: the plan refers to them) */
struct Graph {
    Desc all[MAX_DESC];
    int nall;
    Desc ops[MAX_OPS];
    int nops;
    int64_t next_uid;
    cudnnStatus_t st; /* the first failure, and where */
    char where[160];
    char notes[160]; /* the engine configuration the plan was made from */
};

static Desc mk(Graph *g, cudnnBackendDescriptorType_t t, const char *what)
{
    if (g->st) return NULL;
    if (g->nall == MAX_DESC) {
        g->st = CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
        snprintf(g->where, sizeof g->where, "too many descriptors at %s", what);
        return NULL;
    }
    Desc d = NULL;
    cudnnStatus_t s = L.mk(t, &d);
    if (s) {
        g->st = s;
        snprintf(g->where, sizeof g->where, "create %s", what);
        return NULL;
    }
    return g->all[g->nall++] = d;
}
static void set(Graph *g, Desc d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t, int64_t n,
                const void *v, const char *what)
{
    if (g->st) return;
    cudnnStatus_t s = L.set(d, a, t, n, v);
    if (s) g->st = s, snprintf(g->where, sizeof g->where, "set %s", what);
}
#define SET(g, d, attr, type, n, v) set(g, d, attr, type, n, v, #attr)
static void fin(Graph *g, Desc d, const char *what)
{
    if (g->st) return;
    cudnnStatus_t s = L.fin(d);
    if (s) g->st = s, snprintf(g->where, sizeof g->where, "finalize %s", what);
}
static void add_op(Graph *g, Desc op)
{
    if (!g->st && g->nops < MAX_OPS) g->ops[g->nops++] = op;
}

/* A 4-d tensor; uid 0 takes the next virtual uid. by_value: a host scalar in the variant pack. */
static Desc tensor(Graph *g, int64_t uid, cudnnDataType_t dt, const int64_t dim[4], const int64_t str[4], bool virt,
                   bool by_value = false)
{
    Desc d = mk(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR, "tensor");
    if (!uid) uid = g->next_uid++;
    int64_t align = 16;
    bool yes = true;
    SET(g, d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
    SET(g, d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim);
    SET(g, d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, str);
    SET(g, d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    SET(g, d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
    if (virt) SET(g, d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &yes);
    if (by_value) SET(g, d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &yes);
    fin(g, d, "tensor");
    return d;
}
static Desc virt(Graph *g, cudnnDataType_t dt, const int64_t dim[4], const int64_t str[4])
{
    return tensor(g, 0, dt, dim, str, true);
}

/* An operation of type t whose descriptor attributes names[i] are ds[i] (a NULL one left unset),
 * finalized and added to the graph */
static void op_of(Graph *g, cudnnBackendDescriptorType_t t, const char *what, int n,
                  const cudnnBackendAttributeName_t *names, const Desc *ds)
{
    Desc op = mk(g, t, what);
    for (int i = 0; i < n; i++)
        if (ds[i]) set(g, op, names[i], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &ds[i], what);
    fin(g, op, what);
    add_op(g, op);
}
/* The descriptor an operation carries (kind t), its compute type fp32 set by attribute comp */
static Desc fp32_desc(Graph *g, cudnnBackendDescriptorType_t t, cudnnBackendAttributeName_t comp, const char *what)
{
    cudnnDataType_t f = CUDNN_DATA_FLOAT;
    Desc d = mk(g, t, what);
    set(g, d, comp, CUDNN_TYPE_DATA_TYPE, 1, &f, what);
    return d;
}

/* y = mode(x[, b[, t]]) computed in prec; axis >= 0 for GEN_INDEX */
static void pw(Graph *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec, Desc x, Desc b, Desc t, Desc y,
               int64_t axis = -1)
{
    Desc p = mk(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "pointwise");
    SET(g, p, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    SET(g, p, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    if (axis >= 0) SET(g, p, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    fin(g, p, "pointwise");
    const cudnnBackendAttributeName_t a[] = {
        CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_ATTR_OPERATION_POINTWISE_XDESC,
        CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_ATTR_OPERATION_POINTWISE_YDESC};
    const Desc d[] = {p, x, b, t, y};
    op_of(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "pointwise op", 5, a, d);
}
/* c = a b over the last two dimensions (batched over the first two), fp32 accumulation */
static void mm(Graph *g, Desc a, Desc b, Desc c)
{
    Desc m = fp32_desc(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR, CUDNN_ATTR_MATMUL_COMP_TYPE, "matmul");
    fin(g, m, "matmul");
    const cudnnBackendAttributeName_t n[] = {CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_ATTR_OPERATION_MATMUL_BDESC,
                                             CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_ATTR_OPERATION_MATMUL_DESC};
    const Desc d[] = {a, b, c, m};
    op_of(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "matmul op", 4, n, d);
}
/* y = x reduced (sum or max) over the dimensions where y is smaller */
static void red(Graph *g, cudnnReduceTensorOp_t how, Desc x, Desc y)
{
    Desc r = fp32_desc(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, CUDNN_ATTR_REDUCTION_COMP_TYPE, "reduction");
    SET(g, r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &how);
    fin(g, r, "reduction");
    const cudnnBackendAttributeName_t n[] = {CUDNN_ATTR_OPERATION_REDUCTION_XDESC,
                                             CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_ATTR_OPERATION_REDUCTION_DESC};
    const Desc d[] = {x, y, r};
    op_of(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "reduction op", 3, n, d);
}
/* y: the same elements as x seen through other dimensions and strides (a transposed view) */
static void view(Graph *g, Desc x, Desc y)
{
    const cudnnBackendAttributeName_t n[] = {CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_ATTR_OPERATION_RESHAPE_YDESC};
    const Desc d[] = {x, y};
    op_of(g, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, "reshape op", 2, n, d);
}

/* The tensors' uids in the variant pack */
enum { U_Q = 1, U_K, U_V, U_O, U_LSE, U_SCALE, U_NEGINF, U_ONE, U_DO, U_DQ, U_DK, U_DV, U_DSUM, U_DQACC, U_VIRT = 100 };

/* Shapes in zinf's layout (AttnGeo in attention.cu): qkv rows of W, q heads then k then v */
struct Shape {
    int64_t B, T, NH, NKV, hs, W, C;
};

/* The dimensions and strides both graphs use, in zinf's layout: q (and dq) heads in qkv rows of W;
 * K seen transposed; k/v heads; the attention output's rows of C; one value per query row (lse);
 * a scalar; the scores */
struct Dims {
    int64_t qd[4], qs[4], ktd[4], kts[4], kd[4], os[4], ld[4], ls[4], one[4], sd[4], ss[4];
    explicit Dims(const Shape &s)
        : qd{s.B, s.NH, s.T, s.hs}, qs{s.T * s.W, s.hs, s.W, 1}, ktd{s.B, s.NKV, s.hs, s.T},
          kts{s.T * s.W, s.hs, 1, s.W}, kd{s.B, s.NKV, s.T, s.hs}, os{s.T * s.C, s.hs, s.C, 1},
          ld{s.B, s.NH, s.T, 1}, ls{s.NH * s.T, s.T, 1, 1}, one{1, 1, 1, 1}, sd{s.B, s.NH, s.T, s.T},
          ss{s.NH * s.T * s.T, s.T * s.T, s.T, 1}
    {
    }
};

/* S = Q K^T * scale with the causal mask applied (masked scores -inf), as the engine expects it */
static Desc masked_scores(Graph *g, const Dims &d, Desc Q, Desc KT, Desc SC, Desc NI, Desc LSE_or_null)
{
    const cudnnDataType_t F = CUDNN_DATA_FLOAT;
    const int64_t *sd = d.sd, *ss = d.ss;
    Desc S = virt(g, F, sd, ss), S1 = virt(g, F, sd, ss);
    mm(g, Q, KT, S);
    pw(g, CUDNN_POINTWISE_MUL, F, S, SC, NULL, S1);
    if (LSE_or_null) { /* backward: scores less lse, before the mask */
        Desc S2 = virt(g, F, sd, ss);
        pw(g, CUDNN_POINTWISE_SUB, F, S1, LSE_or_null, NULL, S2);
        S1 = S2;
    }
    Desc R = virt(g, CUDNN_DATA_INT32, sd, ss), Cc = virt(g, CUDNN_DATA_INT32, sd, ss),
         M = virt(g, CUDNN_DATA_BOOLEAN, sd, ss), S3 = virt(g, F, sd, ss);
    pw(g, CUDNN_POINTWISE_GEN_INDEX, F, S1, NULL, NULL, R, 2);
    pw(g, CUDNN_POINTWISE_GEN_INDEX, F, S1, NULL, NULL, Cc, 3);
    pw(g, CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, R, Cc, NULL, M);
    pw(g, CUDNN_POINTWISE_BINARY_SELECT, F, S1, NI, M, S3);
    return S3;
}

static void build_fwd(Graph *g, const Shape &s, cudnnDataType_t io)
{
    const cudnnDataType_t F = CUDNN_DATA_FLOAT;
    const Dims d(s);
    const int64_t *qd = d.qd, *qs = d.qs, *ktd = d.ktd, *kts = d.kts, *vd = d.kd, *os = d.os, *ld = d.ld,
                  *ls = d.ls, *one = d.one, *sd = d.sd, *ss = d.ss;
    Desc Q = tensor(g, U_Q, io, qd, qs, false), KT = tensor(g, U_K, io, ktd, kts, false),
         V = tensor(g, U_V, io, vd, qs, false), O = tensor(g, U_O, io, qd, os, false),
         LSE = tensor(g, U_LSE, F, ld, ls, false), SC = tensor(g, U_SCALE, F, one, one, false, true),
         NI = tensor(g, U_NEGINF, F, one, one, false, true);
    Desc S = masked_scores(g, d, Q, KT, SC, NI, NULL);
    Desc MX = virt(g, F, ld, ls), D = virt(g, F, sd, ss), E = virt(g, F, sd, ss), Z = virt(g, F, ld, ls),
         LZ = virt(g, F, ld, ls), P = virt(g, io, sd, ss);
    red(g, CUDNN_REDUCE_TENSOR_MAX, S, MX);
    pw(g, CUDNN_POINTWISE_SUB, F, S, MX, NULL, D);
    pw(g, CUDNN_POINTWISE_EXP, F, D, NULL, NULL, E);
    red(g, CUDNN_REDUCE_TENSOR_ADD, E, Z);
    pw(g, CUDNN_POINTWISE_LOG, F, Z, NULL, NULL, LZ);
    pw(g, CUDNN_POINTWISE_ADD, F, MX, LZ, NULL, LSE);
    pw(g, CUDNN_POINTWISE_DIV, F, E, Z, NULL, P);
    mm(g, P, V, O);
}

static void build_bwd(Graph *g, const Shape &s, cudnnDataType_t io, bool acc)
{
    const cudnnDataType_t F = CUDNN_DATA_FLOAT;
    const Dims d(s);
    const int64_t *qd = d.qd, *qs = d.qs, *ktd = d.ktd, *kts = d.kts, *kd = d.kd, *os = d.os, *ld = d.ld,
                  *ls = d.ls, *one = d.one, *sd = d.sd, *ss = d.ss;
    /* the scores transposed; a query head's [T, hs] products stored contiguously */
    const int64_t sts[4] = {s.NH * s.T * s.T, s.T * s.T, 1, s.T}, fs[4] = {s.NH * s.T * s.hs, s.T * s.hs, s.hs, 1};
    Desc Q = tensor(g, U_Q, io, qd, qs, false), KT = tensor(g, U_K, io, ktd, kts, false),
         VT = tensor(g, U_V, io, ktd, kts, false), O = tensor(g, U_O, io, qd, os, false),
         dO = tensor(g, U_DO, io, qd, os, false), LSE = tensor(g, U_LSE, F, ld, ls, false),
         SC = tensor(g, U_SCALE, F, one, one, false, true), NI = tensor(g, U_NEGINF, F, one, one, false, true),
         ONE = tensor(g, U_ONE, F, one, one, false, true), dQ = tensor(g, U_DQ, io, qd, qs, false),
         dK = tensor(g, U_DK, io, kd, qs, false), dV = tensor(g, U_DV, io, kd, qs, false),
         DSUM = tensor(g, U_DSUM, F, ld, ls, false), DQACC = acc ? tensor(g, U_DQACC, F, qd, fs, false) : NULL;
    /* D = rowsum(dO o O) */
    Desc t1 = virt(g, F, qd, os), t2 = virt(g, F, ld, ls);
    pw(g, CUDNN_POINTWISE_MUL, F, dO, O, NULL, t1);
    red(g, CUDNN_REDUCE_TENSOR_ADD, t1, t2);
    pw(g, CUDNN_POINTWISE_MUL, F, t2, ONE, NULL, DSUM);
    /* P, then dV = P^T dO (summed over each group of query heads) */
    Desc S = masked_scores(g, d, Q, KT, SC, NI, LSE);
    Desc P = virt(g, F, sd, ss), PT = virt(g, io, sd, sts);
    pw(g, CUDNN_POINTWISE_EXP, F, S, NULL, NULL, P);
    view(g, P, PT);
    /* y = a b into a k/v head's gradient: with grouped heads, each query head's product in full,
     * summed over its group */
    auto kv_grad = [&](Desc a, Desc b, Desc y) {
        if (s.NH == s.NKV) return mm(g, a, b, y);
        Desc full = virt(g, io, qd, fs);
        mm(g, a, b, full);
        red(g, CUDNN_REDUCE_TENSOR_ADD, full, y);
    };
    kv_grad(PT, dO, dV);
    /* dS = P o (dO V^T - D) * scale; dK = dS^T Q */
    Desc dP = virt(g, F, sd, ss), u = virt(g, F, sd, ss), u2 = virt(g, F, sd, ss), dS = virt(g, F, sd, ss),
         dST = virt(g, io, sd, sts);
    mm(g, dO, VT, dP);
    pw(g, CUDNN_POINTWISE_SUB, F, dP, DSUM, NULL, u);
    pw(g, CUDNN_POINTWISE_MUL, F, u, P, NULL, u2);
    pw(g, CUDNN_POINTWISE_MUL, F, u2, SC, NULL, dS);
    view(g, dS, dST);
    kv_grad(dST, Q, dK);
    /* dQ = dS K: straight into dQ (cuDNN then keeps dP in its workspace and sums dQ in a fixed
     * order), or through an fp32 accumulator that the key tiles add to with atomics */
    Desc K = virt(g, io, kd, qs);
    view(g, KT, K);
    if (!acc) return mm(g, dS, K, dQ);
    mm(g, dS, K, DQACC);
    pw(g, CUDNN_POINTWISE_IDENTITY, F, DQACC, NULL, NULL, dQ);
}

/* The operation graph, the heuristics' engine configurations in order, the first that cuDNN
 * finalizes as a plan; NULL with g->st/where set when none */
static Desc make_plan(Graph *g, cudnnHandle_t h, int64_t *ws)
{
    Desc og = mk(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
    SET(g, og, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
    SET(g, og, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g->nops, g->ops);
    fin(g, og, "operation graph");
    const cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    for (int m = 0; m < 2 && !g->st; m++) {
        Desc heur = mk(g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "heuristics");
        SET(g, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &og);
        SET(g, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &modes[m]);
        fin(g, heur, "heuristics");
        if (g->st) return NULL;
        int64_t n = 0;
        if (L.get(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n, NULL) || n <= 0)
            continue;
        if (n > 8) n = 8;
        Desc cfg[8];
        for (int i = 0; i < n; i++) cfg[i] = mk(g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config");
        if (g->st) return NULL;
        int64_t got = 0;
        if (L.get(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n, &got, cfg)) continue;
        for (int i = 0; i < got; i++) {
            /* zinf's runs are deterministic (DESIGN 5): an engine cuDNN marks nondeterministic
             * (atomics in its reductions) is passed over */
            char notes[96] = "";
            bool nondet = false;
            Desc eng = mk(g, CUDNN_BACKEND_ENGINE_DESCRIPTOR, "engine");
            if (g->st) return NULL;
            int64_t ne = 0, nn = 0;
            cudnnBackendNumericalNote_t note[16];
            if (!L.get(cfg[i], CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &ne, &eng) &&
                !L.get(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE, 16, &nn, note))
                for (int64_t j = 0; j < nn && j < 16; j++) {
                    nondet |= note[j] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC;
                    size_t at = strlen(notes);
                    snprintf(notes + at, sizeof notes - at, "%s%d", j ? "," : "", (int)note[j]);
                }
            snprintf(g->notes, sizeof g->notes, "mode %s engine config %d, numerical notes {%s}",
                     m ? "fallback" : "A", i, notes);
            if (nondet) {
                say("%s: nondeterministic, passed over", g->notes);
                continue;
            }
            Desc plan = mk(g, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "plan");
            SET(g, plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
            SET(g, plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg[i]);
            if (g->st) return NULL;
            if (L.fin(plan)) continue; /* this engine cannot run the graph: the next one */
            int64_t cnt = 0;
            *ws = 0;
            if (L.get(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &cnt, ws)) continue;
            return plan;
        }
    }
    if (!g->st) g->st = CUDNN_STATUS_NOT_SUPPORTED, snprintf(g->where, sizeof g->where, "no engine takes the graph");
    return NULL;
}

/* ---------------------------------------------------------------- plans per shape */

struct Plan {
    int bwd, B, T, NH, NKV, hs; /* bwd: 1 dQ straight, 2 through the fp32 accumulator */
    zinf_dtype dt;
    Graph *g; /* NULL: cuDNN refused this shape (fall back) */
    Desc plan;
    int64_t ws;
};
struct DnnState {
    cudnnHandle_t h;
    int bad; /* the handle could not be made */
    Plan plans[32];
    int n;
};

static void drop_graph(Graph *g)
{
    if (!g) return;
    for (int i = g->nall - 1; i >= 0; i--) L.rm(g->all[i]);
    free(g);
}

void zinf_cudnn_free(CudaImpl *im)
{
    DnnState *st = (DnnState *)im->dnn;
    if (!st) return;
    for (int i = 0; i < st->n; i++) drop_graph(st->plans[i].g);
    if (st->h) L.destroy(st->h);
    free(st);
    im->dnn = NULL;
}

static bool enabled(void)
{
    /* ZINF_ATTN_CUDNN, read once (zinf train refuses a bad value): the default of the switch, and
     * verbose whether the switch comes from it or is set by a test */
    static int env = -2;
    static bool told;
    if (env == -2) {
        env = zinf_env_switch(getenv("ZINF_ATTN_CUDNN"));
        verbose = env == 2;
    }
    if (zinf_cuda_attn_cudnn < 0) zinf_cuda_attn_cudnn = env != 0;
    if (!zinf_cuda_attn_cudnn) return false;
    if (!load_cudnn() && !told) told = true, say("cuDNN not used: %s", L.why);
    return L.ok;
}

static Plan *plan_for(CudaImpl *im, int bwd, const Shape &s)
{
    DnnState *st = (DnnState *)im->dnn;
    if (!st) {
        st = (DnnState *)calloc(1, sizeof *st);
        if (!st) return NULL;
        im->dnn = st;
        cudnnStatus_t e = L.create(&st->h);
        if (!e) e = L.set_stream(st->h, im->stream);
        if (e) {
            st->bad = 1;
            say("cuDNN not used: cudnnCreate: %s", L.err_string(e));
        }
    }
    if (st->bad) return NULL;
    for (int i = 0; i < st->n; i++) {
        Plan *p = &st->plans[i];
        if (p->bwd == bwd && p->B == s.B && p->T == s.T && p->NH == s.NH && p->NKV == s.NKV && p->hs == s.hs &&
            p->dt == im->cdt)
            return p->g ? p : NULL;
    }
    if (st->n == (int)(sizeof st->plans / sizeof *st->plans)) return NULL; /* full: zinf's kernels */
    Plan *p = &st->plans[st->n++];
    *p = Plan{bwd, (int)s.B, (int)s.T, (int)s.NH, (int)s.NKV, (int)s.hs, im->cdt, NULL, NULL, 0};
    Graph *g = (Graph *)calloc(1, sizeof *g);
    if (!g) return NULL;
    g->next_uid = U_VIRT;
    const cudnnDataType_t io = im->cdt == ZINF_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
    if (bwd)
        build_bwd(g, s, io, bwd == 2);
    else
        build_fwd(g, s, io);
    Desc plan = g->st ? NULL : make_plan(g, st->h, &p->ws);
    if (!plan) {
        char last[256] = "";
        L.last_error(last, sizeof last);
        say("cuDNN %s not used for B %lld T %lld NH %lld NKV %lld hs %lld: %s: %s%s%s", bwd ? "backward" : "forward",
            (long long)s.B, (long long)s.T, (long long)s.NH, (long long)s.NKV, (long long)s.hs, g->where,
            L.err_string(g->st), *last ? "; " : "", last);
        drop_graph(g);
        return NULL;
    }
    p->g = g, p->plan = plan;
    say("cuDNN %zu %s plan for B %lld T %lld NH %lld NKV %lld hs %lld, workspace %lld bytes (%s)", L.version,
        bwd == 2 ? "backward (dQ accumulated)" : bwd ? "backward" : "forward", (long long)s.B, (long long)s.T,
        (long long)s.NH, (long long)s.NKV, (long long)s.hs, (long long)p->ws, g->notes);
    return p;
}

static size_t up256(size_t n) { return (n + 255) & ~(size_t)255; }

/* Run plan p on the tensors of these uids at these pointers, with workspace ws (p->ws bytes, then
 * the backward's own fp32 tensors); true: it ran, or its failure is recorded for the next sync */
static bool execute(CudaImpl *im, Plan *p, const int64_t *uids, void **ptrs, int n, void *ws, const char *op)
{
    DnnState *st = (DnnState *)im->dnn;
    Graph g = {};
    Desc vp = mk(&g, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, "variant pack");
    SET(&g, vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
    SET(&g, vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs);
    SET(&g, vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
    fin(&g, vp, "variant pack");
    cudnnStatus_t e = g.st ? g.st : L.exec(st->h, p->plan, vp);
    if (vp) L.rm(vp);
    if (e) {
        char last[256] = "";
        L.last_error(last, sizeof last);
        zinf_cuda_fail(im, op, ZINF_CUDA_EIO, "%s: cuDNN: %s%s%s%s%s", op, g.st ? g.where : "execute",
                       ": ", L.err_string(e), *last ? "; " : "", last);
        return true; /* ran and failed: the failure is recorded, nothing to fall back to */
    }
    zinf_cuda_attn_cudnn_runs++;
    return true;
}

static bool usable(CudaImpl *im, const void *a, const void *b, const void *c, const void *d, int hs)
{
    auto al = [](const void *x) { return ((uintptr_t)x & 15) == 0; };
    return im->cdt != ZINF_F32 && (hs == 64 || hs == 128) && al(a) && al(b) && (!c || al(c)) && (!d || al(d)) &&
           enabled();
}

bool zinf_cudnn_attn_fwd(CudaImpl *im, void *out, float *lse, const void *qkv, int B, int T, int NH,
                                    int NKV, int hs)
{
    if (!usable(im, out, qkv, lse, NULL, hs)) return false;
    const Shape s{B, T, NH, NKV, hs, (int64_t)(NH + 2 * NKV) * hs, (int64_t)NH * hs};
    Plan *p = plan_for(im, 0, s);
    if (!p) return false;
    void *ws = p->ws ? zinf_cuda_scratch(im, (size_t)p->ws, "attention_fwd") : NULL;
    if (p->ws && !ws) return true; /* recorded */
    float scale = 1.0f / sqrtf((float)hs), neginf = -INFINITY;
    const size_t e = im->cdt == ZINF_F32 ? 4 : 2;
    char *base = (char *)qkv;
    const int64_t uids[] = {U_Q, U_K, U_V, U_O, U_LSE, U_SCALE, U_NEGINF};
    void *ptrs[] = {base, base + s.C * e, base + (s.C + (int64_t)NKV * hs) * e, out, lse, &scale, &neginf};
    return execute(im, p, uids, ptrs, 7, ws, "attention_fwd");
}

bool zinf_cudnn_attn_bwd(CudaImpl *im, void *dqkv, const void *dout, const void *qkv, const void *out,
                                    const float *lse, int B, int T, int NH, int NKV, int hs)
{
    if (!usable(im, dqkv, dout, qkv, out, hs)) return false;
    const bool acc = zinf_cuda_attn_cudnn_acc > 0;
    /* dQ straight: the samples in calls of Bc, each call's dP within ZINF_ATTN_WS_BUDGET */
    const int64_t Bc = acc ? B : zinf_attn_ws_samples(B, T, NH, NKV, hs, zinf_dtype_size(im->cdt));
    if (Bc == 0) {
        static int told_T;
        if (told_T != T)
            told_T = T, say("cuDNN backward not used for B %d T %d NH %d: its workspace does not fit "
                            "ZINF_ATTN_WS_BUDGET in calls it can make (zinf_attn_ws_samples): zinf's kernels",
                            B, T, NH);
        return false;
    }
    const Shape s{Bc, T, NH, NKV, hs, (int64_t)(NH + 2 * NKV) * hs, (int64_t)NH * hs};
    Plan *p = plan_for(im, acc ? 2 : 1, s), *last = p;
    const int64_t tail = B % Bc;
    if (p && tail) last = plan_for(im, 1, Shape{tail, s.T, s.NH, s.NKV, s.hs, s.W, s.C});
    if (!p || !last) return false;
    const size_t rows = (size_t)Bc * NH * T, ws_max = (size_t)(p->ws > last->ws ? p->ws : last->ws),
                 at_sum = up256(ws_max), at_acc = at_sum + up256(rows * 4);
    char *ws = (char *)zinf_cuda_scratch(im, acc ? at_acc + rows * hs * 4 : at_acc, "attention_bwd");
    if (!ws) return true; /* recorded */
    /* dQ's fp32 accumulator starts at zero: the graph adds the products of every key block to it */
    cudaError_t ce = acc ? cudaMemsetAsync(ws + at_acc, 0, rows * hs * 4, im->stream) : cudaSuccess;
    if (ce != cudaSuccess) {
        zinf_cuda_fail(im, "attention_bwd", ZINF_CUDA_EIO, "attention_bwd: clearing dQ's accumulator: %s",
                       cudaGetErrorString(ce));
        return true;
    }
    float scale = 1.0f / sqrtf((float)hs), neginf = -INFINITY, one = 1.0f;
    const size_t e = 2;
    const int64_t k_off = s.C * e, v_off = (s.C + (int64_t)NKV * hs) * e;
    const int64_t uids[] = {U_Q, U_K, U_V, U_O, U_DO, U_LSE, U_SCALE, U_NEGINF, U_ONE,
                            U_DQ, U_DK, U_DV, U_DSUM, U_DQACC};
    for (int64_t b0 = 0; b0 < B; b0 += Bc) {
        /* sample b0 on: its rows of qkv and dqkv, of the output and its gradient, of lse */
        const size_t at_row = (size_t)b0 * T * s.W * e, at_out = (size_t)b0 * T * s.C * e;
        char *q = (char *)qkv + at_row, *dq = (char *)dqkv + at_row;
        void *ptrs[] = {q, q + k_off, q + v_off, (char *)out + at_out, (char *)dout + at_out,
                        (void *)(lse + (size_t)b0 * NH * T), &scale, &neginf, &one,
                        dq, dq + k_off, dq + v_off, ws + at_sum, ws + at_acc};
        execute(im, b0 + Bc > B ? last : p, uids, ptrs, acc ? 14 : 13, ws, "attention_bwd"); /* failures recorded */
    }
    return true;
}

int zinf_cuda_cudnn_version(void) { return load_cudnn() ? (int)L.version : 0; }

#else /* no cudnn_graph.h at build time: zinf's kernels only */

int zinf_cuda_cudnn_version(void) { return 0; }

void zinf_cudnn_free(CudaImpl *im) { (void)im; }
bool zinf_cudnn_attn_fwd(CudaImpl *, void *, float *, const void *, int, int, int, int, int)
{
    return false;
}
bool zinf_cudnn_attn_bwd(CudaImpl *, void *, const void *, const void *, const void *, const float *, int,
                                    int, int, int, int)
{
    return false;
}
#endif
