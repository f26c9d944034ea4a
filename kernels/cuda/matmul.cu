/* matmul: the three GEMMs of a linear layer through cuBLASLt, fp32 accumulation (CUBLAS_COMPUTE_32F,
 * no TF32, so the fp32 compute type matches the CPU reference closely).
 *
 * Row-major tensors are column-major transposes, so every product is written for cuBLASLt as
 * its transpose:
 *   fwd: out[N,OC] = x[N,K] w[OC,K]^T     ->  out^T (OC x N) = op_T(w: K x OC) * x^T (K x N)   "TN"
 *   dx : dx[N,K] = dout[N,OC] w[OC,K]       ->  dx^T (K x N)   = w^T (K x OC)     * dout^T (OC x N) "NN"
 *   dw : dw[OC,K] += dout^T[OC,N] x[N,K]    ->  dw^T (K x OC)  = x^T (K x N)      * op_T(dout^T)   "NT"
 * The forward fuses the bias with CUBLASLT_EPILOGUE_BIAS (and the residual of matmul_fwd_res as C,
 * beta = 1); dx is written (beta = 0), dw accumulates with beta = 1 (C == D, in place) or, as a
 * step's first write of it (matmul_bwd's acc 0), is written with beta = 0, and the
 * bias gradient is summed by a deterministic kernel (ops.cu), because the BGRAD epilogues
 * overwrite rather than accumulate.
 *
 * The MLP's GELU rides on the epilogues too (cuBLASLt's GELU is the tanh approximation, the one
 * gelu_fwd computes; test_backend_ops holds the fp32 result to 1e-5 of the CPU's tanh form):
 *   matmul_gelu_fwd:  CUBLASLT_EPILOGUE_GELU_AUX_BIAS (GELU_AUX without bias), aux = pre, the
 *                     GEMM + bias result before the GELU, D = gelu(aux);
 *   matmul_dgelu_bwd: CUBLASLT_EPILOGUE_DGELU, aux = pre, D = gelu'(aux) * (dout w), beta = 0,
 *                     for bf16/fp16 only: the epilogue's gelu' is about 2e-5 (absolute) off the
 *                     exact tanh form (measured on an H100), 200x below a bf16 rounding but past
 *                     the fp32 tolerance, so fp32 takes the exact unfused path.
 * The aux matrix has the shape of D (m x n, leading dimension m), which cuBLASLt wants divisible
 * by 8, and a 16-byte aligned pointer. When that does not hold, or cuBLASLt has no algorithm for
 * the epilogue, the operations fall back to the plain GEMM and the GELU kernels of ops.cu.
 *
 * Descriptors, layouts and the chosen algorithm are cached per (kind, shape, alignments). The
 * algorithm: cuBLASLt's heuristic proposes up to MM_CANDS; on a plan's first use each is timed on
 * the call's own operands (the output saved and restored around the trials when the product
 * accumulates into it) and the fastest is kept, unless it beats the heuristic's first choice by
 * less than 3%. The heuristic's first pick is not always its best: with the GELU epilogue on an
 * H100 it took one that ran at 466 TFLOP/s where the plain GEMM of the same shape ran at 632.
 * ZINF_GEMM_AUTOTUNE=0 keeps the heuristic's first choice (=verbose prints each choice).
 * cuBLAS gives bit-identical results run to run for one algorithm on one GPU model, which keeps
 * the backward deterministic within a run; two runs agree bit for bit when they choose the same
 * algorithms, which timing does not promise: set ZINF_GEMM_AUTOTUNE=0 where reruns must match
 * bit for bit. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unordered_map>

#include "cuda_common.h"

#define LT_WORKSPACE (32u << 20)
#define MM_CANDS 8

struct MmKey {
    int kind; /* 0 fwd, 1 fwd+bias, 2 dx, 3 dw, 4 fwd+bias+gelu(aux), 5 fwd+gelu(aux), 6 dx*dgelu(aux) */
    int64_t m, n, k;
    int align; /* the smallest alignment (bytes, <= 256) of the four pointers */
    bool operator==(const MmKey &o) const
    {
        return kind == o.kind && m == o.m && n == o.n && k == o.k && align == o.align;
    }
};
struct MmKeyHash {
    size_t operator()(const MmKey &k) const
    {
        size_t h = (size_t)k.kind * 0x9E3779B97F4A7C15ull;
        h ^= (size_t)k.m + 0x9E3779B9u + (h << 6) + (h >> 2);
        h ^= (size_t)k.n + 0x9E3779B9u + (h << 6) + (h >> 2);
        h ^= (size_t)k.k + 0x9E3779B9u + (h << 6) + (h >> 2);
        h ^= (size_t)k.align + 0x9E3779B9u + (h << 6) + (h >> 2);
        return h;
    }
};
struct MmPlan {
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t a = NULL, b = NULL, c = NULL;
    cublasLtMatmulAlgo_t algo;
    cublasLtMatmulAlgo_t cand[MM_CANDS]; /* the heuristic's proposals, best first */
    int ncand = 0;
    bool tuned = false; /* algo is final */
    bool ok = false;
};
struct MatmulCache {
    std::unordered_map<MmKey, MmPlan, MmKeyHash> plans;
    int autotune; /* 0 off, 1 on, 2 on and verbose (ZINF_GEMM_AUTOTUNE) */
};

static cudaDataType_t cuda_type(zinf_dtype dt)
{
    return dt == ZINF_F32 ? CUDA_R_32F : dt == ZINF_BF16 ? CUDA_R_16BF : CUDA_R_16F;
}

static int ptr_align(const void *p)
{
    uintptr_t u = (uintptr_t)p;
    int a = 1;
    while (a < 256 && (u & (uintptr_t)(2 * a - 1)) == 0) a *= 2;
    return a;
}

int cu_matmul_init(CudaImpl *im)
{
    if (cublasLtCreate(&im->lt) != CUBLAS_STATUS_SUCCESS) {
        zinf_cuda_fail(NULL, "init", ZINF_CUDA_ENOTSUP, "cuBLASLt: cublasLtCreate failed");
        return ZINF_CUDA_ENOTSUP;
    }
    if (cudaMalloc(&im->lt_ws, LT_WORKSPACE) != cudaSuccess) {
        cudaGetLastError();
        zinf_cuda_fail(NULL, "init", ZINF_CUDA_ENOMEM, "cannot allocate the cuBLASLt workspace");
        return ZINF_CUDA_ENOMEM;
    }
    im->lt_ws_bytes = LT_WORKSPACE;
    im->mm = new MatmulCache();
    /* a bad value is reported by zinf train before the backend starts; here it means "on" */
    int at = zinf_env_switch(getenv("ZINF_GEMM_AUTOTUNE"));
    im->mm->autotune = at < 0 ? 1 : at;
    return 0;
}

void cu_matmul_free(CudaImpl *im)
{
    if (!im->mm) return;
    for (auto &kv : im->mm->plans) {
        MmPlan &p = kv.second;
        if (p.op) cublasLtMatmulDescDestroy(p.op);
        if (p.a) cublasLtMatrixLayoutDestroy(p.a);
        if (p.b) cublasLtMatrixLayoutDestroy(p.b);
        if (p.c) cublasLtMatrixLayoutDestroy(p.c);
    }
    delete im->mm;
    im->mm = NULL;
}

static bool kind_has_aux(int kind) { return kind >= 4; }

/* Build (once) the plan for D(m x n) = op(A) op(B) [+ bias] [GELU epilogue], column-major, all in
 * cdt. The GELU kinds (aux != NULL) fail quietly: their callers fall back to unfused operations. */
static MmPlan *get_plan(CudaImpl *im, const MmKey &key, bool ta, bool tb, const void *aux,
                        const char *opname)
{
    auto it = im->mm->plans.find(key);
    if (it != im->mm->plans.end()) return it->second.ok ? &it->second : NULL;
    MmPlan &p = im->mm->plans[key];
    cudaDataType_t dt = cuda_type(im->cdt);
    int64_t m = key.m, n = key.n, k = key.k;
    cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasStatus_t st;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t res[MM_CANDS];
    int nres = 0;
    uint32_t al = (uint32_t)key.align;
    uint64_t ws = im->lt_ws_bytes;
    bool quiet = kind_has_aux(key.kind);
    int64_t auxld = m;
    cublasLtEpilogue_t epi = key.kind == 1   ? CUBLASLT_EPILOGUE_BIAS
                             : key.kind == 4 ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                             : key.kind == 5 ? CUBLASLT_EPILOGUE_GELU_AUX
                             : key.kind == 6 ? CUBLASLT_EPILOGUE_DGELU
                                             : CUBLASLT_EPILOGUE_DEFAULT;
    /* A is (ta ? k x m : m x k) as stored, B is (tb ? n x k : k x n) */
    if ((st = cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F)) ||
        (st = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa)) ||
        (st = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb)) ||
        (st = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi)))
        goto fail;
    if ((key.kind == 1 || key.kind == 4) &&
        (st = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &dt, sizeof dt)))
        goto fail;
    /* the heuristic reads the aux pointer's value for its alignment: set the real one */
    if (quiet &&
        ((st = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux)) ||
         (st = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &auxld, sizeof auxld))))
        goto fail;
    if ((st = cublasLtMatrixLayoutCreate(&p.a, dt, ta ? k : m, ta ? m : k, ta ? k : m)) ||
        (st = cublasLtMatrixLayoutCreate(&p.b, dt, tb ? n : k, tb ? k : n, tb ? n : k)) ||
        (st = cublasLtMatrixLayoutCreate(&p.c, dt, m, n, m)))
        goto fail;
    if ((st = cublasLtMatmulPreferenceCreate(&pref)) ||
        (st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws)) ||
        (st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, sizeof al)) ||
        (st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al, sizeof al)) ||
        (st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al, sizeof al)) ||
        (st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al, sizeof al)))
        goto fail;
    st = cublasLtMatmulAlgoGetHeuristic(im->lt, p.op, p.a, p.b, p.c, p.c, pref, MM_CANDS, res, &nres);
    cublasLtMatmulPreferenceDestroy(pref);
    pref = NULL;
    if (st || nres == 0) {
        if (quiet) return NULL;
        zinf_cuda_fail(im, opname, ZINF_CUDA_ENOTSUP,
                       "%s: cuBLASLt has no algorithm for m=%lld n=%lld k=%lld %s%s (%s, align %d): status %d",
                       opname, (long long)m, (long long)n, (long long)k, ta ? "T" : "N", tb ? "T" : "N",
                       zinf_dtype_name(im->cdt), key.align, (int)st);
        return NULL;
    }
    for (int i = 0; i < nres; i++)
        if (res[i].state == CUBLAS_STATUS_SUCCESS) p.cand[p.ncand++] = res[i].algo;
    if (p.ncand == 0) p.cand[p.ncand++] = res[0].algo;
    p.algo = p.cand[0];
    p.tuned = p.ncand == 1 || !im->mm->autotune;
    p.ok = true;
    return &p;
fail:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (quiet) return NULL;
    zinf_cuda_fail(im, opname, ZINF_CUDA_EIO, "%s: cuBLASLt descriptor setup failed: status %d",
                   opname, (int)st);
    return NULL;
}

/* Time the plan's candidate algorithms on these operands and keep the fastest (see the top of
 * the file). D is saved and restored when the product accumulates into it (beta != 0, C == D;
 * with a separate C the trials only read C and overwrite D, as the real call does); the GELU
 * epilogues' aux is written (forward) or only read (backward), and the real call that follows
 * writes D and aux again. Any failure here keeps the heuristic's first choice. */
static void tune(CudaImpl *im, MmPlan *p, const MmKey &key, const void *A, const void *B,
                 const void *Cm, void *D, float beta)
{
    p->tuned = true;
    size_t bytes = (size_t)key.m * key.n * zinf_dtype_size(im->cdt);
    void *save = NULL;
    cudaEvent_t ev[2] = {NULL, NULL};
    float ms[MM_CANDS] = {0}, alpha = 1.0f;
    int best = 0;
    if (beta != 0.0f && Cm == D) { /* the trials accumulate into D itself */
        if (cudaMalloc(&save, bytes) != cudaSuccess) {
            save = NULL;
            goto out;
        }
        if (cudaMemcpyAsync(save, D, bytes, cudaMemcpyDeviceToDevice, im->stream) != cudaSuccess) {
            cudaFree(save);
            save = NULL;
            goto out;
        }
    }
    if (cudaEventCreate(&ev[0]) != cudaSuccess || cudaEventCreate(&ev[1]) != cudaSuccess) goto out;
    for (int i = 0; i < p->ncand; i++) {
        ms[i] = INFINITY;
        for (int rep = 0; rep < 4; rep++) { /* the first is a warm-up; keep the fastest of three */
            float t;
            if (cudaEventRecord(ev[0], im->stream) != cudaSuccess ||
                cublasLtMatmul(im->lt, p->op, &alpha, A, p->a, B, p->b, &beta, Cm, p->c, D, p->c,
                               &p->cand[i], im->lt_ws, im->lt_ws_bytes, im->stream) != CUBLAS_STATUS_SUCCESS ||
                cudaEventRecord(ev[1], im->stream) != cudaSuccess ||
                cudaEventSynchronize(ev[1]) != cudaSuccess || cudaEventElapsedTime(&t, ev[0], ev[1]) != cudaSuccess) {
                ms[i] = INFINITY;
                break;
            }
            if (rep > 0 && t < ms[i]) ms[i] = t;
        }
        if (ms[i] < ms[best]) best = i;
    }
    if (ms[best] > 0.97f * ms[0] && ms[0] < INFINITY) best = 0; /* keep the heuristic's choice */
    if (ms[best] < INFINITY) p->algo = p->cand[best];
    if (im->mm->autotune == 2)
        fprintf(stderr, "zinf: gemm kind %d m=%lld n=%lld k=%lld: algorithm %d of %d, %.3f ms (first %.3f ms)\n",
                key.kind, (long long)key.m, (long long)key.n, (long long)key.k, best, p->ncand,
                (double)ms[best], (double)ms[0]);
out:
    if (save) {
        cudaMemcpyAsync(D, save, bytes, cudaMemcpyDeviceToDevice, im->stream);
        cudaStreamSynchronize(im->stream);
        cudaFree(save);
    }
    for (int i = 0; i < 2; i++)
        if (ev[i]) cudaEventDestroy(ev[i]);
    cudaGetLastError(); /* a failed trial is not the call's failure */
}

/* D = alpha op(A) op(B) + beta C (+ bias) (GELU epilogue with aux for kinds 4-6), column-major
 * m x n; C is D itself when Cm is NULL. Returns false when it did not run; for the GELU kinds that
 * is quiet (nothing recorded, the plan is marked unusable) and the caller falls back. */
static bool gemm(CudaImpl *im, int kind, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                 const void *A, const void *B, void *D, float beta, const void *bias,
                 const void *aux, const char *opname, const void *Cm = NULL)
{
    bool quiet = kind_has_aux(kind);
    if (!Cm) Cm = D;
    int al = ptr_align(A);
    al = al < ptr_align(B) ? al : ptr_align(B);
    al = al < ptr_align(D) ? al : ptr_align(D);
    al = al < ptr_align(Cm) ? al : ptr_align(Cm);
    if (aux) al = al < ptr_align(aux) ? al : ptr_align(aux);
    MmKey key = {kind, m, n, k, al};
    MmPlan *p = get_plan(im, key, ta, tb, aux, opname);
    if (!p) return false;
    cublasStatus_t st;
    if (bias && (st = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                     sizeof bias))) {
        if (!quiet)
            zinf_cuda_fail(im, opname, ZINF_CUDA_EIO, "%s: setting the bias pointer: status %d",
                           opname, (int)st);
        return false;
    }
    if (aux && (st = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                    &aux, sizeof aux)))
        return false;
    if (!p->tuned) tune(im, p, key, A, B, Cm, D, beta);
    float alpha = 1.0f;
    st = cublasLtMatmul(im->lt, p->op, &alpha, A, p->a, B, p->b, &beta, Cm, p->c, D, p->c, &p->algo,
                        im->lt_ws, im->lt_ws_bytes, im->stream);
    if (st != CUBLAS_STATUS_SUCCESS) {
        if (quiet) {
            p->ok = false; /* from now on this shape takes the fallback at once */
            return false;
        }
        zinf_cuda_fail(im, opname, ZINF_CUDA_EIO,
                       "%s: cublasLtMatmul failed (status %d) m=%lld n=%lld k=%lld %s%s %s", opname,
                       (int)st, (long long)m, (long long)n, (long long)k, ta ? "T" : "N",
                       tb ? "T" : "N", zinf_dtype_name(im->cdt));
        return false;
    }
    return true;
}

/* out = x w^T (+ bias) (+ res): the residual is cuBLASLt's C (beta = 1), the bias its epilogue */
void cu_matmul_fwd_res(zinf_backend *be, void *out, const void *x, const void *w, const void *bias,
                       const void *res, int64_t N, int K, int OC)
{
    CudaImpl *im = impl_of(be);
    if (N <= 0 || OC <= 0) return;
    size_t bytes = (size_t)N * OC * zinf_dtype_size(im->cdt);
    if (K <= 0) { /* empty product: out = res or 0, + bias */
        if (!res) cudaMemsetAsync(out, 0, bytes, im->stream);
        else if (res != out) cudaMemcpyAsync(out, res, bytes, cudaMemcpyDeviceToDevice, im->stream);
        if (bias) cu_add_bias(im, out, bias, N, OC);
        return;
    }
    /* the bias epilogue reads the bias vector with wide loads: use it for 16-byte aligned bias */
    bool epi = bias && aligned16(bias);
    gemm(im, epi ? 1 : 0, true, false, OC, N, K, w, x, out, res ? 1.0f : 0.0f, epi ? bias : NULL, NULL,
         res ? "matmul_fwd_res" : "matmul_fwd", res);
    if (bias && !epi) cu_add_bias(im, out, bias, N, OC);
}

void cu_matmul_fwd(zinf_backend *be, void *out, const void *x, const void *w, const void *bias,
                   int64_t N, int K, int OC)
{
    cu_matmul_fwd_res(be, out, x, w, bias, NULL, N, K, OC);
}

void cu_matmul_bwd(zinf_backend *be, void *dx, void *dw, void *dbias, const void *dout,
                   const void *x, const void *w, int64_t N, int K, int OC, int acc)
{
    CudaImpl *im = impl_of(be);
    if (N <= 0 || K <= 0) return;
    if (OC <= 0) { /* empty product: dx = 0 (it is overwritten), dw and dbias unchanged */
        if (dx) cudaMemsetAsync(dx, 0, (size_t)N * K * zinf_dtype_size(im->cdt), im->stream);
        return;
    }
    if (dx) gemm(im, 2, false, false, K, N, OC, w, dout, dx, 0.0f, NULL, NULL, "matmul_bwd(dx)");
    /* acc 0: beta 0, so the product neither reads dw nor needs it zeroed (the first write of a
     * step's gradient): it differs from adding to zeros only in the sign of an exact zero */
    gemm(im, 3, false, true, K, OC, N, x, dout, dw, acc ? 1.0f : 0.0f, NULL, NULL, "matmul_bwd(dw)");
    if (dbias && !acc) cudaMemsetAsync(dbias, 0, (size_t)OC * zinf_dtype_size(im->cdt), im->stream);
    if (dbias) cu_bias_grad(im, dbias, dout, N, OC);
}

void cu_matmul_gelu_fwd(zinf_backend *be, void *out, void *pre, const void *x, const void *w,
                        const void *bias, int64_t N, int K, int OC)
{
    CudaImpl *im = impl_of(be);
    if (N <= 0 || OC <= 0) return;
    /* aux (pre) has leading dimension OC: divisible by 8, 16-byte aligned; a bias likewise */
    bool fuse = K > 0 && OC % 8 == 0 && aligned16(pre) && (!bias || aligned16(bias));
    if (fuse && gemm(im, bias ? 4 : 5, true, false, OC, N, K, w, x, out, 0.0f, bias, pre,
                     "matmul_gelu_fwd"))
        return;
    cu_matmul_fwd(be, pre, x, w, bias, N, K, OC);
    cu_gelu_fwd(be, out, pre, N * OC);
}

void cu_matmul_dgelu_bwd(zinf_backend *be, void *dpre, const void *dout, const void *w,
                         const void *pre, int64_t N, int K, int OC)
{
    CudaImpl *im = impl_of(be);
    if (N <= 0 || K <= 0) return;
    size_t bytes = (size_t)N * K * zinf_dtype_size(im->cdt);
    if (OC <= 0) {
        cudaMemsetAsync(dpre, 0, bytes, im->stream);
        return;
    }
    /* aux (pre) has the shape of D: leading dimension K */
    bool fuse = im->cdt != ZINF_F32 && K % 8 == 0 && aligned16(pre);
    if (fuse && gemm(im, 6, false, false, K, N, OC, w, dout, dpre, 0.0f, NULL, pre,
                     "matmul_dgelu_bwd"))
        return;
    /* fallback: dout @ w into scratch, then dpre = 0 + gelu'(pre) * scratch */
    void *tmp = zinf_cuda_scratch(im, bytes, "matmul_dgelu_bwd");
    if (!tmp) return;
    gemm(im, 2, false, false, K, N, OC, w, dout, tmp, 0.0f, NULL, NULL, "matmul_dgelu_bwd");
    cudaMemsetAsync(dpre, 0, bytes, im->stream);
    cu_gelu_bwd(be, dpre, pre, tmp, (int64_t)N * K);
    zinf_cuda_check_launch(im, "matmul_dgelu_bwd");
}
