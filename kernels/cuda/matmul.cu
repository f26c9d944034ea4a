/* matmul: the three GEMMs of a linear layer through cuBLASLt, fp32 accumulation (CUBLAS_COMPUTE_32F,
 * no TF32, so the fp32 compute type matches the CPU reference closely).
 *
 * Row-major tensors are column-major transposes, so every product is written for cuBLASLt as
 * its transpose:
 *   fwd: out[N,OC] = x[N,K] w[OC,K]^T     ->  out^T (OC x N) = op_T(w: K x OC) * x^T (K x N)   "TN"
 *   dx : dx[N,K] += dout[N,OC] w[OC,K]      ->  dx^T (K x N)   = w^T (K x OC)     * dout^T (OC x N) "NN"
 *   dw : dw[OC,K] += dout^T[OC,N] x[N,K]    ->  dw^T (K x OC)  = x^T (K x N)      * op_T(dout^T)   "NT"
 * The forward fuses the bias with CUBLASLT_EPILOGUE_BIAS; the backward accumulates with beta = 1
 * (C == D, in place) and sums the bias gradient with a deterministic kernel (ops.cu), because the
 * BGRAD epilogues overwrite rather than accumulate.
 *
 * Descriptors, layouts and the heuristic's algorithm are cached per (kind, shape, alignments).
 * cuBLAS gives bit-identical results run to run for one algorithm on one GPU model, which keeps
 * the backward deterministic. */
#include <stdio.h>
#include <string.h>

#include <unordered_map>

#include "cuda_common.h"

#define LT_WORKSPACE (32u << 20)

struct MmKey {
    int kind; /* 0 fwd, 1 fwd+bias, 2 dx, 3 dw */
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
    bool ok = false;
};
struct MatmulCache {
    std::unordered_map<MmKey, MmPlan, MmKeyHash> plans;
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

/* Build (once) the plan for D(m x n) = op(A) op(B) [+ bias], column-major, all in cdt. */
static MmPlan *get_plan(CudaImpl *im, const MmKey &key, bool ta, bool tb, const char *opname)
{
    auto it = im->mm->plans.find(key);
    if (it != im->mm->plans.end()) return it->second.ok ? &it->second : NULL;
    MmPlan &p = im->mm->plans[key];
    cudaDataType_t dt = cuda_type(im->cdt);
    int64_t m = key.m, n = key.n, k = key.k;
    cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasStatus_t st;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t res;
    int nres = 0;
    uint32_t al = (uint32_t)key.align;
    uint64_t ws = im->lt_ws_bytes;
    cublasLtEpilogue_t epi = key.kind == 1 ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    /* A is (ta ? k x m : m x k) as stored, B is (tb ? n x k : k x n) */
    if ((st = cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F)) ||
        (st = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa)) ||
        (st = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb)) ||
        (st = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi)))
        goto fail;
    if (key.kind == 1 &&
        (st = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &dt, sizeof dt)))
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
    st = cublasLtMatmulAlgoGetHeuristic(im->lt, p.op, p.a, p.b, p.c, p.c, pref, 1, &res, &nres);
    cublasLtMatmulPreferenceDestroy(pref);
    pref = NULL;
    if (st || nres == 0) {
        zinf_cuda_fail(im, opname, ZINF_CUDA_ENOTSUP,
                       "%s: cuBLASLt has no algorithm for m=%lld n=%lld k=%lld %s%s (%s, align %d): status %d",
                       opname, (long long)m, (long long)n, (long long)k, ta ? "T" : "N", tb ? "T" : "N",
                       zinf_dtype_name(im->cdt), key.align, (int)st);
        return NULL;
    }
    p.algo = res.algo;
    p.ok = true;
    return &p;
fail:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    zinf_cuda_fail(im, opname, ZINF_CUDA_EIO, "%s: cuBLASLt descriptor setup failed: status %d",
                   opname, (int)st);
    return NULL;
}

/* D = alpha op(A) op(B) + beta D (+ bias), column-major m x n. */
static void gemm(CudaImpl *im, int kind, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                 const void *A, const void *B, void *D, float beta, const void *bias, const char *opname)
{
    int al = ptr_align(A);
    al = al < ptr_align(B) ? al : ptr_align(B);
    al = al < ptr_align(D) ? al : ptr_align(D);
    MmKey key = {kind, m, n, k, al};
    MmPlan *p = get_plan(im, key, ta, tb, opname);
    if (!p) return;
    if (bias) {
        cublasStatus_t st = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                           &bias, sizeof bias);
        if (st) {
            zinf_cuda_fail(im, opname, ZINF_CUDA_EIO, "%s: setting the bias pointer: status %d", opname, (int)st);
            return;
        }
    }
    float alpha = 1.0f;
    cublasStatus_t st = cublasLtMatmul(im->lt, p->op, &alpha, A, p->a, B, p->b, &beta, D, p->c, D,
                                       p->c, &p->algo, im->lt_ws, im->lt_ws_bytes, im->stream);
    if (st != CUBLAS_STATUS_SUCCESS)
        zinf_cuda_fail(im, opname, ZINF_CUDA_EIO,
                       "%s: cublasLtMatmul failed (status %d) m=%lld n=%lld k=%lld %s%s %s", opname,
                       (int)st, (long long)m, (long long)n, (long long)k, ta ? "T" : "N",
                       tb ? "T" : "N", zinf_dtype_name(im->cdt));
}

void cu_matmul_fwd(zinf_backend *be, void *out, const void *x, const void *w, const void *bias,
                   int64_t N, int K, int OC)
{
    CudaImpl *im = impl_of(be);
    if (N <= 0 || OC <= 0) return;
    if (K <= 0) { /* empty product: out = bias or 0 */
        cudaMemsetAsync(out, 0, (size_t)N * OC * zinf_dtype_size(im->cdt), im->stream);
        if (bias) cu_add_bias(im, out, bias, N, OC);
        return;
    }
    /* the bias epilogue reads the bias vector with wide loads: use it for 16-byte aligned bias */
    bool epi = bias && aligned16(bias);
    gemm(im, epi ? 1 : 0, true, false, OC, N, K, w, x, out, 0.0f, epi ? bias : NULL, "matmul_fwd");
    if (bias && !epi) cu_add_bias(im, out, bias, N, OC);
}

void cu_matmul_bwd(zinf_backend *be, void *dx, void *dw, void *dbias, const void *dout,
                   const void *x, const void *w, int64_t N, int K, int OC)
{
    CudaImpl *im = impl_of(be);
    if (N <= 0 || K <= 0 || OC <= 0) return;
    if (dx) gemm(im, 2, false, false, K, N, OC, w, dout, dx, 1.0f, NULL, "matmul_bwd(dx)");
    gemm(im, 3, false, true, K, OC, N, x, dout, dw, 1.0f, NULL, "matmul_bwd(dw)");
    if (dbias) cu_bias_grad(im, dbias, dout, N, OC);
}
