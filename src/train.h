/* train: the training loop - micro-steps, gradient accumulation, data-parallel reduction,
 * clipping, the optimizer step, LR schedule, loss scaling, eval, logging, metrics.jsonl, and the
 * held-out prompt check (greedy completion, exact-match accuracy). */
#ifndef ZINF_TRAIN_H
#define ZINF_TRAIN_H

#include <stdbool.h>
#include <stdint.h>

#include "comm.h"
#include "chat.h"
#include "config.h"
#include "kernels.h"

typedef struct zinf_train_opts {
    const char *config_path; /* NULL: the embedded default */
    const char *model;       /* preset or HF-style JSON */
    const char *data, *val;  /* globs; val may be NULL */
    const char *dataset;     /* --dataset FILE[#N]: a chat dataset made into SFT shards (dataset.c) instead of --data */
    const char *dataset_cache; /* where those shards are kept (NULL: OUT/sft-cache) */
    zinf_chat_data_opts sft; /* --dataset's template, tokenizer, split...: input, prefix and max_length unset */
    const char *out;         /* output directory (metrics.jsonl, logs) */
    const char *device;      /* "cpu" | "cuda" */
    const char *prompts;     /* NULL or a file of "prompt<TAB>expected" lines */
    uint64_t seed;
    bool per_rank_logs;      /* <out>/logs/rank<R>.log */
    const char *swap_engine; /* --swap_engine: io_uring or psync (NULL: io_uring) */
    bool ac_keep_attention;  /* activation checkpointing keeps attention outputs (ZINF_RECOMPUTE_KEEP_ATTN) */
    bool packing;            /* --packing: SFT samples packed into the rows (data.c) */
    bool gradient_checkpointing, gradient_checkpointing_set; /* HF/ms-swift: recompute blocks */
    int64_t max_new_tokens;  /* for the prompt check */
    const char *resume;      /* --resume: "auto", a checkpoint file or a directory; NULL: fresh */
    const char *init_from;   /* --init_from: a Hugging Face GPT-2 directory (safetensors); NULL: random */
    int64_t save_total_limit; /* --save_total_limit: checkpoints kept (0: all) */
    bool overwrite_output_dir; /* a fresh run may start in an --out holding checkpoints */
    bool no_signal_save;       /* a stop by SIGUSR1/SIGTERM saves no checkpoint */
    const char *report_to;     /* --report_to: "none" (NULL) or "tensorboard" (HF's scalars) */
    const char *logging_dir;   /* --logging_dir: its directory; NULL: OUT/runs/DATE_HOST as HF */
    zinf_flags flags;
} zinf_train_opts;

/* zinf_train_run's return after a SIGUSR1 or SIGTERM: the run stopped after a step and a
 * checkpoint, or before its first step without one; main exits with ZINF_EXIT_STOPPED
 * (EX_TEMPFAIL), which a job script requeues on. */
#define ZINF_TRAIN_STOPPED 1
#define ZINF_EXIT_STOPPED 75

/* OUT/ZINF_FINISHED_FILE: rank 0 removes it when the run takes --out's lock and writes it (to a
 * temporary file, renamed into place) when the run ends with status 0, one JSON line naming the
 * step reached. A job script (jobs/slurm/requeue.sh) that removed it before its launch can tell
 * a run that finished from a launcher that exited 0 without running zinf to its end. */
#define ZINF_FINISHED_FILE "finished"

/* Catch SIGUSR1 and SIGTERM from now on: the signal is only recorded, and zinf_train_run acts on
 * it. main calls this first, before MPI_Init, so that a signal during the start-up (MPI_Init,
 * the config, the model, a checkpoint's load) stops the run with 75 instead of killing it. */
void zinf_train_catch_signals(void);

void zinf_train_opts_defaults(zinf_train_opts *o);
int zinf_train_run(zinf_comm *comm, const zinf_train_opts *o);

/* Resolve the config the way `train` does (rank 0 reads the bytes, all ranks parse them) for
 * `zinf config show`; model may be NULL (then size "auto"s need --hidden_size-free configs). */
int zinf_train_resolve_config(zinf_comm *comm, const char *config_path, const char *model,
                              zinf_flags *flags, zinf_config *cfg);

/* The backend --device names: cpu, or cuda (GPU local_rank modulo the visible ones, compute
 * dtype cdt); one line naming the cause when it cannot be had. */
int zinf_backend_open(zinf_backend *be, const char *device, int local_rank, zinf_dtype cdt);
void zinf_backend_close(zinf_backend *be);

#endif
