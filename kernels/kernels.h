/* kernels: the compute backend interface. src/ is written once against this header; each backend
 * (cpu/ is the fp32 reference, cuda/ the GPU one) fills a zinf_backend with its memory, streams,
 * copies and operations. Plain C, no MPI, no CUDA types.
 *
 * Conventions for the operations:
 *  - Tensors are row-major. "act" pointers hold the backend's compute dtype (be->cdt: fp32 on the
 *    CPU backend, bf16/fp16 on CUDA); pointers typed float * are always fp32 (statistics, losses,
 *    master weights, optimizer states, gradient accumulators).
 *  - Every backward operation ACCUMULATES (+=) into all of its gradient outputs, input gradients
 *    and parameter gradients alike; callers zero what must start at zero. That makes the tied
 *    embedding, the residual stream and gradient accumulation one rule. The exceptions, which
 *    overwrite a fresh activation gradient, say so: matmul_bwd's dx, attention_bwd's dqkv,
 *    matmul_dgelu_bwd's dpre and swiglu_bwd's dgu; and matmul_bwd's dw and dbias when its `acc`
 *    is 0: the first write of a parameter gradient that holds nothing yet (model.h's grad_fresh),
 *    which then need not be zeroed first nor read.
 *  - Operations run in order on the backend's compute stream; results are visible to the host
 *    after zinf_be_sync() (the CPU backend is synchronous).
 */
#ifndef ZINF_KERNELS_H
#define ZINF_KERNELS_H

#include <stddef.h>
#include <stdint.h>

typedef enum { ZINF_F32 = 0, ZINF_BF16 = 1, ZINF_F16 = 2 } zinf_dtype;

/* Where a buffer lives. */
typedef enum {
    ZINF_PLACE_DEVICE = 0, /* the backend's compute memory (host memory on the CPU backend) */
    ZINF_PLACE_PINNED = 1, /* page-locked host memory (ordinary host memory on the CPU backend) */
    ZINF_PLACE_HOST = 2    /* ordinary pageable host memory */
} zinf_place;

typedef struct zinf_stream zinf_stream; /* opaque; NULL means the compute stream */
typedef struct zinf_event zinf_event;   /* opaque */

typedef struct zinf_adamw_args {
    float lr, beta1, beta2, eps, weight_decay;
    float bias_correction1;  /* 1 - beta1^t */
    float bias_correction2;  /* 1 - beta2^t */
    float grad_scale;        /* gradients are multiplied by this first (1/loss_scale * clip) */
    int adam_w_mode;         /* 1: decoupled decay (AdamW); 0: L2 added to the gradient (Adam) */
} zinf_adamw_args;

typedef struct zinf_backend zinf_backend;
typedef struct zinf_op_prof zinf_op_prof; /* src/profile.h */

/* Samples packed into rows (supervised fine-tuning): token i attends to the tokens of its own
 * sample only, j in [kv_start[i], i] of its row. Samples are contiguous and never cross a row, so
 * the same thing is also given as a list of samples, which the tiled kernels walk as independent
 * sequences (a tile wholly outside a sample is never visited). Pointers are the backend's memory. */
typedef struct zinf_attn_rows {
    const int32_t *kv_start; /* [B*T]: where in its row token i's sample begins */
    const int32_t *seq;      /* [2*nseq]: each sample's first token (row*T + offset) and length */
    int nseq, max_len;       /* sample count; the longest sample */
} zinf_attn_rows;

struct zinf_backend {
    const char *name; /* "cpu", "cuda" */
    int host_visible; /* 1: the backend's memory is host memory the host may read and write
                       * (the CPU backend); 0: it is device memory, reached by copies */
    zinf_dtype cdt;   /* compute dtype of activations and 16-bit parameter copies */
    void *impl;       /* backend-private state */
    zinf_op_prof *prof; /* the operation profile attached (src/profile.h), NULL when none */

    /* memory */
    void *(*alloc)(zinf_backend *be, zinf_place place, size_t bytes); /* zeroed; NULL on failure */
    void (*free)(zinf_backend *be, zinf_place place, void *p);
    /* dst/src may be in any place; with a stream the copy is asynchronous on it */
    int (*copy)(zinf_backend *be, void *dst, const void *src, size_t bytes, zinf_stream *s);
    int (*memset0)(zinf_backend *be, void *dst, size_t bytes, zinf_stream *s);

    /* streams and events (the CPU backend's are synchronous and cost nothing) */
    zinf_stream *(*stream_new)(zinf_backend *be);
    void (*stream_free)(zinf_backend *be, zinf_stream *s);
    int (*stream_sync)(zinf_backend *be, zinf_stream *s);
    zinf_event *(*event_new)(zinf_backend *be);
    void (*event_free)(zinf_backend *be, zinf_event *e);
    int (*event_record)(zinf_backend *be, zinf_event *e, zinf_stream *s);
    int (*stream_wait)(zinf_backend *be, zinf_stream *s, zinf_event *e);
    int (*event_query)(zinf_backend *be, zinf_event *e); /* 1 when done, 0 when pending, <0 error */
    /* events that also take the device's time (freed with event_free; the CPU backend's hold the
     * clock at their recording), and the milliseconds between two of them once both completed
     * (negative on error) */
    zinf_event *(*event_new_timed)(zinf_backend *be);
    double (*event_elapsed_ms)(zinf_backend *be, zinf_event *a, zinf_event *b);
    int (*sync)(zinf_backend *be); /* everything issued so far has finished */
    /* device memory in use and in total (bytes), for reports; NULL on the CPU backend */
    int (*mem_info)(zinf_backend *be, size_t *used, size_t *total);
    /* the backend's own device buffers (GEMM workspace, operations' scratch, which grows to the
     * largest asked for), bytes; NULL on the CPU backend */
    size_t (*scratch_bytes)(zinf_backend *be);

    /* ---- operations; B batch, T time, C channels, NH heads, N = B*T rows ---- */
    /* out[N,C] = wte[tok] + wpe[t]; wpe NULL: no learned positions (RoPE models), out = wte[tok];
     * the backward then takes dwpe NULL */
    void (*encoder_fwd)(zinf_backend *be, void *out, const int32_t *tok, const void *wte,
                        const void *wpe, int B, int T, int C);
    void (*encoder_bwd)(zinf_backend *be, void *dwte, void *dwpe, const void *dout,
                        const int32_t *tok, int B, int T, int C);
    /* rows of cols compute-dtype elements from src (rows ld_src apart) to dst (ld_dst apart): a
     * part of each row of a packed buffer, such as the v heads of q|k|v rows */
    void (*copy_rows)(zinf_backend *be, void *dst, int64_t ld_dst, const void *src, int64_t ld_src, int64_t rows,
                      int64_t cols);
    /* out = (x - mean) * rstd * w + b over the last dimension C; eps 1e-5 */
    void (*layernorm_fwd)(zinf_backend *be, void *out, float *mean, float *rstd, const void *x,
                          const void *w, const void *b, int64_t N, int C);
    void (*layernorm_bwd)(zinf_backend *be, void *dx, void *dw, void *db, const void *dout,
                          const void *x, const void *w, const float *mean, const float *rstd,
                          int64_t N, int C);
    /* out[N,OC] = x[N,K] @ w[OC,K]^T (+ bias[OC] when bias != NULL) */
    void (*matmul_fwd)(zinf_backend *be, void *out, const void *x, const void *w, const void *bias,
                       int64_t N, int K, int OC);
    /* out[N,OC] = x @ w^T (+ bias) + res[N,OC]: a linear layer and the residual sum after it in
     * one pass (res may be out itself; otherwise they must not overlap) */
    void (*matmul_fwd_res)(zinf_backend *be, void *out, const void *x, const void *w,
                           const void *bias, const void *res, int64_t N, int K, int OC);
    /* dx[N,K] = dout @ w (overwritten: the model zeroes nothing first); dw[OC,K] += dout^T @ x;
     * dbias[OC] += sum_n dout (the parameter gradients accumulate; dx, dbias may be NULL). acc 0:
     * dw and dbias are overwritten instead (=), whatever they held: the same values as adding to
     * zeros */
    void (*matmul_bwd)(zinf_backend *be, void *dx, void *dw, void *dbias, const void *dout,
                       const void *x, const void *w, int64_t N, int K, int OC, int acc);
    /* Causal self-attention with grouped-query heads of explicit size hs. qkv[B,T,W] rows pack
     * q (NH*hs) | k (NKV*hs) | v (NKV*hs), W = (NH + 2*NKV)*hs; query head h uses kv head
     * h / (NH/NKV) (NKV divides NH; NKV = NH is multi-head attention, GPT-2's case with hs = C/NH).
     * Scale 1/sqrt(hs); out[B,T,NH*hs]; lse[B,NH,T] keeps each row's natural log-sum-exp for the
     * backward, which recomputes the scores (the T x T matrix is never stored). The backward
     * OVERWRITES dqkv[B,T,W] (an exception to the accumulate rule): dq per query head, dk and dv
     * per kv head summed over the NH/NKV query heads of its group.
     * rows: samples packed into the rows (zinf_attn_rows); NULL is one sample per row. */
    void (*attention_fwd)(zinf_backend *be, void *out, float *lse, const void *qkv, int B, int T,
                          int NH, int NKV, int hs, const zinf_attn_rows *rows);
    void (*attention_bwd)(zinf_backend *be, void *dqkv, const void *dout, const void *qkv,
                          const void *out, const float *lse, int B, int T, int NH, int NKV,
                          int hs, const zinf_attn_rows *rows);
    /* RMSNorm over C: out = x * rstd * w, rstd = 1/sqrt(mean_c x^2 + eps) saved for the
     * backward. Each of the N rows holds `heads` groups of C elements side by side, each
     * normalised on its own with the same w: group h of row n starts at n * ld + h * C (ld >=
     * heads * C; ld = C when one contiguous group a row) and its rstd is rstd[h * N + n]. So
     * Qwen3's per-head q/k norm runs in one call on the q heads (or the k heads) of a packed
     * q|k|v row (heads = NH, C = head size, ld = the row). The normalised value is multiplied by
     * w in fp32 and rounded once (HF rounds x * rstd to the input dtype first: one bf16 rounding
     * apart). */
    void (*rmsnorm_fwd)(zinf_backend *be, void *out, float *rstd, const void *x, const void *w,
                        int64_t N, int heads, int C, int64_t ld, float eps);
    /* dx (laid out as x) += the input gradient (ACCUMULATES, as layernorm_bwd's dx: callers
     * zero it or pass the residual stream's gradient); elements past a row's groups are not
     * touched. dw[C] += sum over every row's groups of dout * x * rstd (a fixed-order fp32
     * reduction, as layernorm's); dw may be NULL (a frozen weight). dout is laid out as x too. */
    void (*rmsnorm_bwd)(zinf_backend *be, void *dx, void *dw, const void *dout, const void *x,
                        const void *w, const float *rstd, int64_t N, int heads, int C, int64_t ld);
    /* Rotary embedding in place on heads 0..nh-1 (each hs wide, contiguous) of every row of x,
     * rows `stride` elements apart: HF's rotate_half pairing (element i with i + hs/2, i < hs/2),
     * angle pos[n] * inv_freq[i]; pos == NULL means pos[n] = n % T. pos lives where the token ids
     * the encoder reads live on that backend (device memory on CUDA, as encoder_fwd's tok);
     * inv_freq[hs/2] is fp32 in backend memory (the family computes it on the host, scaling
     * included, and copies it). inverse = 1 rotates by -angle (the backward: the gradient of a
     * rotation is its transpose). cos and sin are computed in fp32 from the fp32 angle (HF
     * rounds them to the compute dtype first). */
    void (*rope)(zinf_backend *be, void *x, int64_t N, int nh, int hs, int64_t stride,
                 const int32_t *pos, int T, const float *inv_freq, int inverse);
    /* SwiGLU: gu rows pack gate|up (2F wide, from one fused GEMM); out[N,F] = silu(gate) * up */
    void (*swiglu_fwd)(zinf_backend *be, void *out, const void *gu, int64_t N, int F);
    /* dgu[N,2F] OVERWRITTEN with the gradients of gate and up (an exception to the accumulate
     * rule: a fresh activation gradient); dgu must not overlap dout or gu */
    void (*swiglu_bwd)(zinf_backend *be, void *dgu, const void *dout, const void *gu, int64_t N,
                       int F);
    /* The MLP's first product fused with its GELU (tanh approximation, as gelu_fwd):
     * pre[N,OC] = x[N,K] @ w[OC,K]^T (+ bias[OC] when bias != NULL), out[N,OC] = gelu(pre).
     * pre keeps the GELU's input for matmul_dgelu_bwd; out and pre must not overlap. */
    void (*matmul_gelu_fwd)(zinf_backend *be, void *out, void *pre, const void *x, const void *w,
                            const void *bias, int64_t N, int K, int OC);
    /* The input gradient of a linear layer whose input was gelu(pre), through the GELU:
     * dpre[N,K] = gelu'(pre[N,K]) * (dout[N,OC] @ w[OC,K]), elementwise.
     * An exception to the accumulate rule: dpre is OVERWRITTEN (it is a fresh activation
     * gradient, so callers need not zero it). The layer's dw/dbias come from matmul_bwd with
     * dx = NULL. dpre must not overlap dout, w or pre. */
    void (*matmul_dgelu_bwd)(zinf_backend *be, void *dpre, const void *dout, const void *w,
                             const void *pre, int64_t N, int K, int OC);
    /* GELU, tanh approximation */
    void (*gelu_fwd)(zinf_backend *be, void *out, const void *x, int64_t n);
    void (*gelu_bwd)(zinf_backend *be, void *dx, const void *x, const void *dout, int64_t n);
    /* out = a + b */
    void (*add)(zinf_backend *be, void *out, const void *a, const void *b, int64_t n);
    /* Softmax cross-entropy over the first V of Vp columns. losses[i] = -log p[i][tgt[i]], 0 when
     * tgt[i] < 0 (ignored). When dloss != 0, logits is overwritten with its gradient
     * (p - onehot) * dloss (0 for ignored rows and padded columns). */
    void (*xent)(zinf_backend *be, float *losses, void *logits, const int32_t *tgt, int64_t N,
                 int V, int Vp, float dloss);

    /* ---- fp32 vector work for the optimizer and gradient handling ---- */
    /* AdamW over n elements of fp32 master p with gradient g and states m, v; when p16 != NULL
     * the updated parameter is also written there in the compute dtype. gdt, the gradient's
     * dtype, is ZINF_F32 or the compute dtype: a 16-bit gradient is read as its exact fp32 value,
     * so the result has the same bits as the same gradient converted to fp32 first (zero.c reads
     * a one-rank stage-0 step's 16-bit gradients so, with no fp32 copy). */
    void (*adamw)(zinf_backend *be, float *p, void *p16, const void *g, zinf_dtype gdt, float *m, float *v,
                  int64_t n, const zinf_adamw_args *a);
    /* the sum of squares of k arrays x[0..k) of n[i] elements of xdt (ZINF_F32 or the compute
     * dtype, read as exact fp32 values): each array's sum in a fixed order that depends on n
     * only, then the k sums added in order (deterministic, and the same bits for a 16-bit array
     * as for its fp32 conversion; NaN/Inf propagate). One call, one wait for the device, however
     * many arrays: zinf_sumsq1 is the one-array fp32 form. */
    double (*sumsq)(zinf_backend *be, int k, const void *const *x, const int64_t *n, zinf_dtype xdt);
    void (*scale)(zinf_backend *be, float *x, int64_t n, float s);
    void (*axpy)(zinf_backend *be, float *y, const float *x, int64_t n, float a); /* y += a x */
    /* y (fp32) += a * x, x in the compute dtype: gradients into fp32 accumulators */
    void (*acc_f32)(zinf_backend *be, float *y, const void *x, int64_t n, float a);
    /* y = a * x in the compute dtype (y may be x), rounded once: gradients divided before a
     * 16-bit reduction, as DeepSpeed divides them */
    void (*scale_to)(zinf_backend *be, void *y, const void *x, int64_t n, float a);
    /* conversions between the compute dtype and fp32 (a copy when cdt is fp32) */
    void (*to_f32)(zinf_backend *be, float *dst, const void *src, int64_t n);
    void (*from_f32)(zinf_backend *be, void *dst, const float *src, int64_t n);
};

/* The value of a switch in the environment (ZINF_GEMM_AUTOTUNE, ZINF_ATTN_CUDNN): 0 off, 1 on
 * (also when unset or empty), 2 ("verbose": on, and each choice printed); -1 for anything else. */
static inline int zinf_env_switch(const char *s)
{
    if (!s || !*s || (s[0] == '1' && !s[1])) return 1;
    if (s[0] == '0' && !s[1]) return 0;
    const char *v = "verbose";
    while (*v && *s == *v) s++, v++;
    return !*v && !*s ? 2 : -1;
}

/* cuDNN's attention backward, as the CUDA backend runs it (deterministic: attention_cudnn.cu),
 * keeps the gradient of the probabilities of the samples it runs at once in its workspace, NH T^2
 * 2 bytes a sample with T rounded up to 64, and with grouped kv heads each query head's dK and dV
 * in fp32 before the group's sum (NH T hs 4 bytes). It runs the micro-batch's samples in as few
 * calls of equal size as keep that within ZINF_ATTN_WS_BUDGET, and zinf's own kernels (no
 * workspace) in fp32 (es, the compute dtype's bytes, 4), at other head sizes than 64 and 128,
 * where one sample does not fit, or where several
 * calls are needed and NH T is not a multiple of 4 (a later call's log-sum-exp rows would not be
 * 16-byte aligned).
 * zinf_attn_ws_samples: the samples a call takes (0: zinf's kernels); zinf_attn_ws_bytes: the
 * workspace they need, which the activation fit of zinf_recompute_blocks "auto" keeps free and
 * zinf estimate counts. The budget, 4.5 GiB, holds four samples of 32 heads at T 4096 (4.125 GiB:
 * Llama-3.2-1B's and the 8B shapes' micro-batch of 4) in one call: in calls of one sample within
 * 2 GiB the attention backward of a Llama-3.2-1B step took 50 ms, in one call 44-46 (one H200,
 * 2026-11-28, PERF-NOTES). */
#define ZINF_ATTN_WS_BUDGET ((size_t)9 << 29)
int64_t zinf_attn_ws_samples(int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t hs, size_t es);
size_t zinf_attn_ws_bytes(int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t hs, size_t es);

/* The sum of squares of one array (be->sumsq with k = 1). */
static inline double zinf_sumsq1(zinf_backend *be, const float *x, int64_t n)
{
    const void *xs = x;
    return be->sumsq(be, 1, &xs, &n, ZINF_F32);
}

size_t zinf_dtype_size(zinf_dtype dt);
const char *zinf_dtype_name(zinf_dtype dt);

/* Scalar conversions between fp32 and the 16-bit types, the one definition the CPU kernels and
 * the tests share. Both narrowings round to nearest, ties to even, with subnormals of the target
 * type rounded correctly, and keep a NaN a NaN: its sign and top payload bits, with the quiet
 * bit set (what x86's vcvtps2ph does for fp16, and the bf16 bit-truncation counterpart; CUDA
 * and PyTorch return one canonical NaN instead, and agree everywhere else).
 *  - bf16: beyond the largest bf16 (halfway to 2^128 and up) gives +-inf;
 *  - fp16: |x| >= 65520 gives +-inf; |x| <= 2^-25 gives +-0 (the sign kept).
 * The widenings are exact. */
uint16_t zinf_f32_to_bf16(float f);
float zinf_bf16_to_f32(uint16_t h);
uint16_t zinf_f32_to_f16(float f);
float zinf_f16_to_f32(uint16_t h);

/* The CPU backend (fp32, OpenMP, CBLAS). Returns 0 or a negative status. */
int zinf_backend_cpu_init(zinf_backend *be);
void zinf_backend_cpu_free(zinf_backend *be);

/* The CUDA backend, when built (ZINF_HAVE_CUDA). device: CUDA ordinal; cdt: compute dtype. */
int zinf_backend_cuda_init(zinf_backend *be, int device, zinf_dtype cdt);
void zinf_backend_cuda_free(zinf_backend *be);
/* Number of visible CUDA devices; 0 when none or not built. */
int zinf_backend_cuda_count(void);
/* 1 when this build has the CUDA backend. */
int zinf_backend_cuda_built(void);
/* Why the CUDA backend's last call failed ("" when none). */
const char *zinf_backend_cuda_error(void);

/* Device collectives for buffers MPI cannot read (NCCL with CUDA). src/comm.c bootstraps them
 * over MPI: rank 0 calls id_get, broadcasts the bytes, every rank calls init. All operations sum
 * where they reduce and run on stream s (NULL: the backend's communication stream).
 * timeout_s (0: none) bounds init's wait for the other ranks to join, and each operation's wait
 * to be queued (the first one connects to the peers); past it, or on any failure, init and the
 * operations return a negative status with the reason in zinf_backend_cuda_error(). */
#define ZINF_DCOLL_ID_BYTES 128
typedef struct zinf_dcoll {
    void *ctx;
    int (*allgather)(void *ctx, const void *send, void *recv, int64_t count, zinf_dtype dt);
    int (*reduce_scatter)(void *ctx, const void *send, void *recv, int64_t count, zinf_dtype dt);
    int (*allreduce)(void *ctx, void *buf, int64_t count, zinf_dtype dt);
    /* the event recorded on the communication stream after the last call, and the stream
     * the calls wait on (work on the compute stream issued before the call is waited for) */
    zinf_event *(*record)(void *ctx);
    void (*free)(void *ctx);
} zinf_dcoll;
int zinf_dcoll_id_get(zinf_backend *be, unsigned char id[ZINF_DCOLL_ID_BYTES]);
int zinf_dcoll_init(zinf_backend *be, const unsigned char id[ZINF_DCOLL_ID_BYTES], int rank,
                    int size, double timeout_s, zinf_dcoll *out);

#endif
