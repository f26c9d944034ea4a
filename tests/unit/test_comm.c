/* test_comm: the collectives' time limit where a test can reach it without training.
 *
 * Alone (make check runs it as a singleton MPI job): a broadcast delivers root's bytes and counts
 * one call of them; ZINF_COMM_TIMEOUT's values are accepted or refused with the value named, as
 * zinf(1) says.
 *
 * `mpirun -np 2 test_comm hang` (tests/mpi/test_comm.sh): rank 0 reaches the broadcast HANG_S
 * seconds late and rank 1 waits for it with a 1 s limit. A broadcast with the time limit ends the
 * job after about 1 s, naming the rank and "a broadcast from rank 0"; a blocking MPI_Bcast would
 * wait the HANG_S seconds and then exit 0, which the script counts as the failure. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "comm.h"
#include "err.h"

#define HANG_S 30

static void check_env(void)
{
    const char *good[] = {"", "0", "2.5", "600"}, *bad[] = {"10s", "-5", "inf", "abc"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        setenv("ZINF_COMM_TIMEOUT", good[i], 1);
        CHECK(zinf_comm_check_env() == 0, "ZINF_COMM_TIMEOUT='%s' refused: %s", good[i], zinf_errmsg());
    }
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        setenv("ZINF_COMM_TIMEOUT", bad[i], 1);
        char want[64];
        snprintf(want, sizeof want, "ZINF_COMM_TIMEOUT=%s: expected a number of seconds >= 0", bad[i]);
        CHECK(zinf_comm_check_env() != 0 && strstr(zinf_errmsg(), want), "ZINF_COMM_TIMEOUT='%s': '%s'", bad[i],
              zinf_errmsg());
    }
    unsetenv("ZINF_COMM_TIMEOUT");
    CHECK(zinf_comm_check_env() == 0, "unset ZINF_COMM_TIMEOUT refused");
}

int main(int argc, char **argv)
{
    zinf_comm c;
    if (zinf_comm_init(&c, &argc, &argv)) {
        fprintf(stderr, "test_comm: %s\n", zinf_errmsg());
        return 1;
    }
    if (argc > 1 && !strcmp(argv[1], "hang")) {
        if (c.size < 2) {
            fprintf(stderr, "test_comm hang: needs 2 ranks\n");
            zinf_comm_finalize(&c);
            return 77;
        }
        c.timeout_s = 1;
        if (c.rank == 0) sleep(HANG_S);
        char msg[8] = "";
        if (c.rank == 0) memcpy(msg, "hello", 6);
        int rc = zinf_comm_bcast(&c, msg, sizeof msg, 0);
        printf("rank %d: the broadcast returned %d after the %d s stall ('%s')\n", c.rank, rc, HANG_S, msg);
        zinf_comm_finalize(&c);
        return 0;
    }
    char msg[8] = "";
    if (c.rank == 0) memcpy(msg, "hello", 6);
    int64_t calls = c.n_calls[ZINF_COLL_BCAST], bytes = c.bytes[ZINF_COLL_BCAST];
    CHECK(zinf_comm_bcast(&c, msg, sizeof msg, 0) == 0, "broadcast: %s", zinf_errmsg());
    CHECK(!strcmp(msg, "hello"), "broadcast delivered '%s'", msg);
    CHECK(c.n_calls[ZINF_COLL_BCAST] == calls + 1 && c.bytes[ZINF_COLL_BCAST] == bytes + 8,
          "broadcast counted %lld calls, %lld bytes", (long long)(c.n_calls[ZINF_COLL_BCAST] - calls),
          (long long)(c.bytes[ZINF_COLL_BCAST] - bytes));
    check_env();
    zinf_comm_finalize(&c);
    return check_done("test_comm");
}
