/* rng: the seeded splitmix64 stream the fuzz tests draw their mutations from, so a failure
 * reproduces from its seed. */
#ifndef ZINF_FUZZ_RNG_H
#define ZINF_FUZZ_RNG_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

static uint64_t rng_state;

static inline uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* uniform-ish in [0, n); 0 when n is 0 */
static inline size_t rndn(size_t n) { return n ? (size_t)(rnd() % n) : 0; }

/* The run's knobs from the environment: ZINF_FUZZ_ITERS, ZINF_FUZZ_SECONDS (a wall-clock cap)
 * and ZINF_FUZZ_SEED (default 1), which seeds the stream and is returned. */
static inline uint64_t fuzz_options(long *iters, double *max_s)
{
    const char *e;
    uint64_t seed = 1;
    if ((e = getenv("ZINF_FUZZ_ITERS")) && *e) *iters = atol(e);
    if ((e = getenv("ZINF_FUZZ_SECONDS")) && *e) *max_s = atof(e);
    if ((e = getenv("ZINF_FUZZ_SEED")) && *e) seed = strtoull(e, NULL, 0);
    rng_state = seed;
    return seed;
}

#endif
