/* launch: zinf-launch, DeepSpeed's launcher options turned into one OpenMPI mpirun command.
 *
 * The resource pool is a DeepSpeed hostfile ("HOST slots=N" lines; blank lines are skipped, a '#'
 * starts a comment anywhere on a line, a node may appear once, under one name) or, without one, this node with its GPUs. Each
 * host's slots are the GPU indices 0..N-1. --include / --exclude ("HOST[:SLOT[,SLOT...]][@HOST...]")
 * pick slots, --num_nodes keeps the first hosts, --num_gpus the first slots of each. One rank runs
 * per chosen slot, ranks numbered host by host in the hostfile's order. A rank picks its GPU by its
 * local rank on the node (comm.c), so a host whose chosen slots are not 0..k-1 gets a
 * CUDA_VISIBLE_DEVICES that lists them, and then every host gets its own mpirun app context.
 *
 * Nothing here prints or runs anything: zinf_launch_plan returns the argv, notes go to the FILE*
 * it is given, and the caller (cli.c) prints and execs. */
#ifndef ZINF_LAUNCH_H
#define ZINF_LAUNCH_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
    char *name;
    int nslots; /* slots the pool gives the host */
    int *slot;  /* the chosen slots, ascending */
    int n;      /* how many are chosen; 0 drops the host */
} zinf_launch_host;

typedef struct {
    zinf_launch_host *h;
    int n;
} zinf_launch_pool;

/* Parse hostfile text; fname names it in errors ("FILE:LINE: ..."). Every host starts with all
 * of its slots chosen. Text after "slots=N" other than a comment is named in a note. */
int zinf_launch_parse_hostfile(const char *text, const char *fname, zinf_launch_pool *pool, FILE *notes);
/* Apply an --include or --exclude filter (at most one of them non-NULL), in DeepSpeed's syntax;
 * each host's chosen slots ascend, as DeepSpeed sorts them. */
int zinf_launch_filter(zinf_launch_pool *pool, const char *include, const char *exclude);
/* Keep the first num_nodes hosts (< 0: all) and the first num_gpus slots of each (< 0: all).
 * Asking for more than the pool has is an error. */
int zinf_launch_limit(zinf_launch_pool *pool, int64_t num_nodes, int64_t num_gpus);
void zinf_launch_pool_free(zinf_launch_pool *pool);

typedef struct {
    const char *hostfile;           /* NULL: this node only */
    const char *include, *exclude;  /* NULL: none */
    int64_t num_nodes, num_gpus;    /* < 0: not given */
    const char *master_addr;        /* accepted with a note: MPI does the rendezvous */
    int64_t master_port;            /* < 0: not given */
    /* torchrun's spellings, and its environment (NPROC_PER_NODE, NNODES, NODE_RANK, MASTER_ADDR,
     * MASTER_PORT in environ): the same counts as --num_gpus and --num_nodes, a value given two
     * ways that differ is an error naming both, and a node-by-node start (NODE_RANK) is refused
     * with the command that starts every node from here */
    const char *nproc_per_node;     /* a number, or gpu / auto: every GPU slot (NULL: not given) */
    int64_t nnodes, node_rank;      /* < 0: not given */
    /* cores per rank: each rank runs `zinf-launch --rank_bind MODE PROGRAM`, which binds it to its
     * share of its node's cores and sets OMP_NUM_THREADS (unless set) before it execs PROGRAM */
    int bind_cores;                 /* --bind_cores_to_rank: -1 not given (bound), 0 false, 1 true */
    const char *bind_core_list;     /* the CPUs to share out, "1,3-5,7" (NULL: the node's cores) */
    const char *launcher;           /* NULL or "openmpi" */
    const char *launcher_args;      /* more mpirun arguments, split at blanks ('..' and ".." quote) */
    int64_t ssh_port;               /* < 0: not given */
    const char *each_rank_log;      /* DIR: mpirun --output-filename DIR */
    const char *mpirun;             /* the mpirun to run (default "mpirun") */
    const char *self_dir;           /* the launcher's directory: PROGRAM "zinf" is the zinf there */
    int local_gpus;                 /* GPUs of this node, for a run without a hostfile */
    const char *cuda_visible;       /* CUDA_VISIBLE_DEVICES where the launcher runs, or NULL */
    const char *env_file;           /* DeepSpeed's .deepspeed_env (VAR=VALUE lines) or NULL */
    char *const *environ;           /* the environment whose NCCL_*, ZINF_*... are exported */
    char *const *prog;              /* PROGRAM ARGS..., NULL-terminated */
} zinf_launch_opts;

void zinf_launch_opts_defaults(zinf_launch_opts *o);

/* Build the mpirun command (a NULL-terminated argv, free with zinf_launch_argv_free). *nranks gets
 * the number of ranks. Notes for the user (flags that have no effect, the pool chosen) go to notes
 * when it is not NULL. */
int zinf_launch_plan(const zinf_launch_opts *o, char ***argv, int *nranks, FILE *notes);
void zinf_launch_argv_free(char **argv);

/* The command as one line a shell would run the same way (arguments quoted where needed). */
char *zinf_launch_cmdline(char *const *argv);

/* GPUs of this node as the NVIDIA driver lists them (/proc/driver/nvidia/gpus); 0 when none. */
int zinf_launch_count_gpus(void);

/* The command that starts the same job from one node with a hostfile (what a torchrun-style
 * node-by-node start becomes), as one shell line; NULL when out of memory. */
char *zinf_launch_equivalent(const zinf_launch_opts *o, int64_t nnodes, int64_t nproc);

/* ---- cores per rank ---- */
/* A CPU list in DeepSpeed's --bind_core_list syntax ("1,3-5,7": numbers and ranges, ascending,
 * not overlapping, no blanks) into *cpus (malloc'd) and *n; what names it in errors. */
int zinf_launch_parse_cpulist(const char *s, const char *what, int **cpus, int *n);
/* cpus[0..n) (ascending) condensed to "0-3,8,10-11" in buf; a list too long ends in "...". */
void zinf_launch_cpulist(const int *cpus, int n, char *buf, size_t cap);

/* One rank's share of its node: cpus[0..ncpu) are the node's CPUs (ascending) and core_of[i] the
 * core cpus[i] is a hardware thread of. Without a list, the node's cores are dealt out in order,
 * cores / local_size to each local rank (those left over stay free, as DeepSpeed leaves them),
 * each with all of its cores' hardware threads, one OpenMP thread per core. With a list
 * (--bind_core_list), its CPUs are dealt out the same way, one thread per CPU. The rank's CPUs
 * go to out (room for ncpu), their count to *nout.
 * Returns 0; 1 when the node has fewer cores than local ranks and !strict (no binding; *threads
 * is 1); or an error (strict, or a listed CPU that the node lacks). */
int zinf_launch_share(const int *cpus, const int *core_of, int ncpu, const int *list, int nlist, int local_rank,
                      int local_size, bool strict, int *out, int *nout, int *threads);

/* What `zinf-launch --rank_bind MODE` does in each rank: MODE is auto (the default binding),
 * cores (--bind_cores_to_rank: fewer cores than ranks is an error) or a CPU list. It reads the
 * rank's place on its node from Open MPI's OMPI_COMM_WORLD_LOCAL_RANK/_SIZE, the node's CPUs
 * from its own affinity and /sys, binds itself (sched_setaffinity) and sets OMP_NUM_THREADS
 * where it is not set. OMP_PROC_BIND and OMP_PLACES are left alone: set, they make the OpenMP
 * runtime bind the program's first thread to one core at its start, and every thread started
 * later (NVMe I/O, the overlapped host step, CUDA's and NCCL's) inherits that core. notes (when not NULL) gets one line from
 * local rank 0 when the ranks are left unbound. */
int zinf_launch_rank_bind(const char *mode, FILE *notes);

/* This process's CPUs (its affinity) condensed into buf, their count into *n. */
int zinf_launch_affinity(char *buf, size_t cap, int *n);

#endif
