/* zinf: ZeRO-family transformer training over MPI. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

/* `zinf train ... --device cuda`: the last --device on the command line says cuda */
static bool train_on_cuda(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "train")) return false;
    const char *dev = NULL;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--device") && i + 1 < argc) dev = argv[++i];
        else if (!strncmp(argv[i], "--device=", 9)) dev = argv[i] + 9;
    }
    return dev && !strcmp(dev, "cuda");
}

/* `zinf train --device cuda` runs OpenMP's idle threads passive (they sleep at once instead of
 * spinning) unless OMP_WAIT_POLICY or GOMP_SPINCOUNT says otherwise. With the optimizer in host
 * memory the host AdamW's team runs beside the thread that drives the GPU, and its threads that
 * had finished their chunks spun on cores the others needed: Llama-3.1-8B's AdamW took 2,128 ms on
 * a 64-core node and 1,713 ms passive (docs/performance.md). The CPU backend, whose kernels are
 * many short parallel regions one after another, keeps the runtime's default: passive, its tests
 * ran 16% slower. The OpenMP runtime reads the variable as it loads, before main, so zinf sets it
 * and executes itself again: the same process, arguments, environment and CPU binding. Should
 * that fail, it runs on with the runtime's default. */
int main(int argc, char **argv)
{
    if (train_on_cuda(argc, argv) && !getenv("OMP_WAIT_POLICY") && !getenv("GOMP_SPINCOUNT") &&
        !setenv("OMP_WAIT_POLICY", "passive", 1))
        execv("/proc/self/exe", argv);
    return zinf_cli_main(argc, argv);
}
