/* adamw: the CPU's one AdamW step (ZeRO-Offload's optimizer, and the CPU backend's adamw).
 *
 * One step over n fp32 master parameters p with gradient g and Adam states m, v, the same
 * arithmetic as the CUDA kernel and in the same order, element by element:
 *     gi  = g * grad_scale                    (Adam: gi += weight_decay * p)
 *     m   = beta1 * m + (1 - beta1) * gi
 *     v   = beta2 * v + ((1 - beta2) * gi) * gi
 *     p   = p * (1 - lr * weight_decay)       (AdamW only: decoupled decay, first)
 *     p   = p - (lr * (m / bias_correction1)) / (sqrt(v / bias_correction2) + eps)
 * and the updated p is also written to p16 (when not NULL) as fp32, bf16 or fp16, rounded to
 * nearest even (zinf_f32_to_bf16 / zinf_f32_to_f16 in kernels.h).
 *
 * Paths: scalar C, AVX2 (+F16C), AVX-512F, picked at run time from what the CPU has; every path
 * gives the same bits (separate multiplies and adds, never a fused multiply-add; correctly rounded
 * division and square root), whatever the thread count. OpenMP's threads take chunks of 64K
 * elements, cut at 64-byte boundaries of p, as they come free.
 *
 * ZINF_CPU_ISA=scalar|avx2|avx512 in the environment caps the automatic choice (read once, at the
 * first call; a value naming none of these is ignored). */
#ifndef ZINF_CPU_ADAMW_H
#define ZINF_CPU_ADAMW_H

#include <stdint.h>

#include "kernels.h"

typedef enum {
    ZINF_CPU_ISA_AUTO = 0, /* the best the CPU has, capped by ZINF_CPU_ISA */
    ZINF_CPU_ISA_SCALAR = 1,
    ZINF_CPU_ISA_AVX2 = 2, /* AVX2 and F16C */
    ZINF_CPU_ISA_AVX512 = 3 /* AVX-512F */
} zinf_cpu_isa;

/* The AdamW step on the automatic path. p16 may be NULL; otherwise it holds n elements of
 * p16_type. p, m, v are read and written; the arrays must not overlap, except p16 == p with
 * p16_type ZINF_F32. */
void zinf_cpu_adamw(float *p, void *p16, zinf_dtype p16_type, const float *g, float *m, float *v,
                    int64_t n, const zinf_adamw_args *a);

/* The same on a chosen path (tests and benchmarks). Returns 0, or -1004 (ZINF_ENOTSUP) without
 * touching anything when this CPU lacks the path. */
int zinf_cpu_adamw_isa(zinf_cpu_isa isa, float *p, void *p16, zinf_dtype p16_type, const float *g,
                       float *m, float *v, int64_t n, const zinf_adamw_args *a);

/* One step over several arrays (the tensor pieces of a tile), each with its own weight decay
 * (a->weight_decay is not read), in one OpenMP region instead of one a piece: each piece gets
 * exactly what zinf_cpu_adamw with its decay gives it. The pieces must not overlap. */
typedef struct zinf_adamw_piece {
    float *p;
    void *p16; /* NULL, or n elements of the call's p16_type */
    const float *g;
    float *m, *v;
    int64_t n;
    float weight_decay;
} zinf_adamw_piece;
void zinf_cpu_adamw_pieces(const zinf_adamw_piece *pc, int npc, zinf_dtype p16_type, const zinf_adamw_args *a);
int zinf_cpu_adamw_pieces_isa(zinf_cpu_isa isa, const zinf_adamw_piece *pc, int npc, zinf_dtype p16_type,
                              const zinf_adamw_args *a);

/* 1 when this CPU (and build) can run the path; ZINF_CPU_ISA_AUTO is always supported. */
int zinf_cpu_isa_supported(zinf_cpu_isa isa);
/* The path ZINF_CPU_ISA_AUTO resolves to. */
zinf_cpu_isa zinf_cpu_isa_auto(void);
/* "scalar", "avx2", "avx512" ("auto" for ZINF_CPU_ISA_AUTO). */
const char *zinf_cpu_isa_name(zinf_cpu_isa isa);

#endif
